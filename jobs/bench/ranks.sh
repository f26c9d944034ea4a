# shellcheck shell=sh
# Sourced by the benchmarks that run zinf under mpirun (the speed, offload and capacity scripts):
# its placement, the steady rate of its steps, what its peak GPU memory held, and a failed peer's
# own error.
# rank_place NP: PLACE becomes the mpirun placement words. One rank keeps every core, unbound;
# several ranks each get their share of the node's cores, bound to them, and as many OpenMP
# threads (unless OMP_NUM_THREADS is set), so that each steps its own shard on its own cores
# beside its own GPU's PCIe link instead of every rank's threads contending for all the cores.
# steady STEPS D: of the values on stdin, one a step, the median of those after the first STEPS / D
# (the warm-up), 0 where there are none
steady() {
    awk -v n="$1" -v d="$2" 'NR > n / d' | sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print 0 }'
}

# zinf_memory LOG: what zinf's peak GPU memory held (its end-of-run line in LOG), one line in GiB
zinf_memory() {
    sed -n 's/.*peak GPU memory [0-9.]* GiB in use on rank 0 (cudaMemGetInfo after each step): /  zinf memory on GPU 0 (GiB): /p' "$1" | tail -1
}

rank_place() {
    PLACE="--bind-to none"
    if [ "$1" -gt 1 ]; then
        per=$(( $(nproc) / $1 ))
        [ "$per" -ge 1 ] || per=1
        PLACE="--map-by slot:PE=$per --bind-to core"
        export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$per}"
    fi
    # mpirun warns about an -x variable that is not set
    [ -z "${OMP_NUM_THREADS:-}" ] || PLACE="$PLACE -x OMP_NUM_THREADS"
}

# peer_error NAME RC ERRFILE: one line saying that the peer NAME failed (exit RC), with its real
# error from the stderr that torchrun gathered (each line's [rankN]: prefix left out): the innermost frame and the exception of the
# first Python traceback, else the last lines that are not torchrun's own wrapper report
# (ChildFailedError, "Root Cause", error_file, the ==== frames), which name no cause.
peer_error() {
    awk -v name="$1" -v rc="$2" '
        { sub(/^\[(default)?rank[0-9]+\]: ?/, "") }
        /^Traceback \(most recent call last\):/ && !tb { tb = 1; next }
        tb == 1 && /^  File "/ { frame = $0; sub(/^ */, "", frame); next }
        tb == 1 && /^[A-Za-z_.]*(Error|Exception|Interrupt|Exit)[:]?/ { exc = $0; tb = 2; next }
        /torch\.distributed\.elastic|ChildFailedError|Root Cause|error_file|^ *traceback *:|^=+$|^\*+$|^ *(time|host|rank|exitcode) *:|Failures:|<NO_OTHER_FAILURES>|^[WE][0-9][0-9][0-9][0-9] / { next }
        NF { last[++n] = $0 }
        END {
            if (exc != "") msg = exc (frame != "" ? " (" frame ")" : "")
            else { for (i = (n > 3 ? n - 2 : 1); i <= n; i++) msg = msg (msg != "" ? " | " : "") last[i] }
            if (msg == "") msg = "no error text on stderr"
            printf "  %s does not run (exit %s): %s\n", name, rc, msg }' "$3"
}

# adamw_at_once NP PREFIX: test_cpu_adamw --sustain 5 on 2^26 parameters in NP processes at once,
# placed as $PLACE places ranks (rank_place), each process's line in PREFIX.RANK; adamw_rate
# FILE...: the Gparam/s of such lines
# ($here: the top of the tree, which every script that sources this sets)
adamw_at_once() {
    # shellcheck disable=SC2086,SC2154 # $PLACE is mpirun words
    mpirun $PLACE -np "$1" sh -c 'exec "$1" --sustain 5 67108864 > "$2.${OMPI_COMM_WORLD_RANK:-0}"' _ \
        "$here/tests/unit/test_cpu_adamw" "$2"
}
adamw_rate() { sed -n 's/.* threads: \([0-9.]*\) Gparam\/s.*/\1/p' "$@"; }
