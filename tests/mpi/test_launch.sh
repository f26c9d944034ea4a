#!/bin/sh
# zinf-launch on this node: a run it launches equals the same run under plain mpirun; the command
# it prints is the one it runs and a shell runs it the same way; each rank gets the GPU its slot
# names and the variables it exports; a Slurm-style SIGUSR1 to the launcher stops the job with a
# checkpoint and status 75; bad hostfiles, filters and counts are one line each, and --dry-run
# runs nothing; each rank gets its share of the node's cores and as many OpenMP threads, as
# DeepSpeed's rule (written out below in awk over /sys's topology) deals them; torchrun's
# variables and flags count as DeepSpeed's, and a node-by-node start is refused with the command
# that starts every node from here. (tests/mpi/test_multihost.sh launches across hosts.)
. "${top_srcdir:-.}/tests/mpi/lib.sh"
LAUNCH=${ZINF_LAUNCH:-$(dirname "$ZINF")/zinf-launch}
[ -x "$LAUNCH" ] || { echo "SKIP: $LAUNCH not built"; exit 77; }
export MPIRUN
# launch args...: zinf-launch with output in $OUTPUT, status in $RC
launch() { OUTPUT=$("$LAUNCH" "$@" 2>&1); RC=$?; }
# the mpirun line zinf-launch printed
printed() { printf '%s\n' "$OUTPUT" | sed -n 's/^zinf-launch: \(.*mpirun .*\)$/\1/p' | head -1; }

make_text "$TMP/add.txt" 2000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
D="$TMP/add_train_*.bin"
printf '{"train_batch_size": 8, "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
 "zero_optimization": {"stage": 3}}\n' > "$TMP/z3.json"
TRAIN="train --model test-mini --data $D --max_length 32 --logging_steps 1 --config $TMP/z3.json --seed 3"

# --- 1. the same run as plain mpirun ------------------------------------------------------------
# shellcheck disable=SC2086
mpi 2 $TRAIN --max_steps 4 --out "$TMP/ref"
expect_ok "reference under mpirun"
REF=$(hash_of)
# "zinf" is the zinf beside the launcher, the way an installed pair finds each other
# shellcheck disable=SC2086
launch --num_gpus 2 zinf $TRAIN --max_steps 4 --out "$TMP/l1"
expect_ok "zinf-launch --num_gpus 2"
expect_has "launched" "zinf-launch: 2 ranks on 1 host: localhost:0,1" "--host localhost:2" "$(dirname "$ZINF")/zinf train"
[ -n "$REF" ] && [ "$(hash_of)" = "$REF" ] && pass || fail "launched run's parameters $(hash_of), mpirun's $REF"
[ "$(metric "$TMP/l1/metrics.jsonl" loss | tr '\n' ' ')" = "$(metric "$TMP/ref/metrics.jsonl" loss | tr '\n' ' ')" ] &&
    pass || fail "launched run's losses differ from mpirun's"

# a hostfile naming this node, DeepSpeed's -H spelling, a comment and a blank line
printf '# this node\n\nlocalhost slots=3   # three GPUs\n' > "$TMP/hosts"
# shellcheck disable=SC2086
launch -H "$TMP/hosts" --num_gpus 2 zinf $TRAIN --max_steps 4 --out "$TMP/l2"
expect_ok "zinf-launch -H hosts --num_gpus 2"
[ "$(hash_of)" = "$REF" ] && pass || fail "hostfile run's parameters $(hash_of), mpirun's $REF"

# --- 2. what each rank gets: its GPUs, the exported variables, DeepSpeed's env file --------------
cat > "$TMP/show.sh" <<'EOF'
#!/bin/sh
echo "rank=$OMPI_COMM_WORLD_RANK local=$OMPI_COMM_WORLD_LOCAL_RANK cvd=${CUDA_VISIBLE_DEVICES:-unset} nccl=${NCCL_SOCKET_IFNAME:-unset} zinf=${ZINF_COMM_TIMEOUT:-unset} ds=${DS_FROM_FILE:-unset}"
EOF
chmod +x "$TMP/show.sh"
printf 'DS_FROM_FILE=a b=c\n' > "$TMP/ds_env"
OUTPUT=$(cd "$TMP" && NCCL_SOCKET_IFNAME=eth9 ZINF_COMM_TIMEOUT=77 DS_ENV_FILE="$TMP/ds_env" \
    "$LAUNCH" -H "$TMP/hosts" -i localhost:2,0 "$TMP/show.sh" 2>&1); RC=$?
expect_ok "include localhost:2,0"
# the slots ascend whatever the order written, as DeepSpeed sorts them: rank 0 on GPU 0, rank 1
# on GPU 2, each picking by its local rank
expect_has "include" "zinf-launch: 2 ranks on 1 host: localhost:0,2" \
    "rank=0 local=0 cvd=0,2 nccl=eth9 zinf=77 ds=a b=c" "rank=1 local=1 cvd=0,2 nccl=eth9 zinf=77 ds=a b=c"
expect_has "include" "-x NCCL_SOCKET_IFNAME" "-x ZINF_COMM_TIMEOUT" "-x 'DS_FROM_FILE=a b=c'"
# the printed line is a command: a shell running it gets the same ranks
LINE=$(printed)
OUT2=$(cd "$TMP" && export NCCL_SOCKET_IFNAME=eth9 ZINF_COMM_TIMEOUT=77 && eval "$LINE" 2>&1 | grep '^rank=' | sort)
[ -n "$OUT2" ] && [ "$OUT2" = "$(printf '%s\n' "$OUTPUT" | grep '^rank=' | sort)" ] && pass ||
    fail "the printed command, run by sh, gives '$OUT2'"
# blanks around a slot number, as DeepSpeed's int() takes them
launch --dry-run -H "$TMP/hosts" -i 'localhost:2, 1' true
expect_has "include 'localhost:2, 1'" "zinf-launch: 2 ranks on 1 host: localhost:1,2" "env CUDA_VISIBLE_DEVICES=1,2 "
launch -H "$TMP/hosts" -e localhost:1 "$TMP/show.sh"
expect_has "exclude localhost:1" "rank=1 local=1 cvd=0,2"
# without a hostfile the slots are the entries of CUDA_VISIBLE_DEVICES
OUTPUT=$(CUDA_VISIBLE_DEVICES=GPU-a,GPU-b,GPU-c "$LAUNCH" --include localhost:1,2 "$TMP/show.sh" 2>&1); RC=$?
expect_has "CUDA_VISIBLE_DEVICES entries" "rank=0 local=0 cvd=GPU-b,GPU-c" "rank=1 local=1 cvd=GPU-b,GPU-c"
# a program's status comes back
launch --num_gpus 2 sh -c 'exit 3'
[ "$RC" = 3 ] && pass || fail "a rank's exit 3 came back as $RC"

# --- 3. Slurm's warning signal to the launcher: checkpoint, exit 75, resume ----------------------
# shellcheck disable=SC2086
"$LAUNCH" --num_gpus 2 zinf $TRAIN --max_steps 3000 --save_steps 0 --out "$TMP/sig" > "$TMP/sig.log" 2>&1 &
bg=$!
i=0
while [ ! -s "$TMP/sig/metrics.jsonl" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
sleep 1
kill -USR1 $bg # the launcher is mpirun by now (exec), which passes the signal to the ranks
wait $bg
rc=$?
[ "$rc" = 75 ] && pass || { fail "SIGUSR1 to zinf-launch: exit $rc, want 75"; tail -5 "$TMP/sig.log" >&2; }
S=$(sed -n 's/^checkpoint-\([0-9]*\)\.h5$/\1/p' "$TMP/sig/latest" 2>/dev/null)
if [ -n "$S" ]; then
    # shellcheck disable=SC2086
    launch --num_gpus 2 zinf $TRAIN --max_steps $((S + 2)) --save_steps 0 --out "$TMP/sig" --resume auto
    expect_has "resume after SIGUSR1" "resumed from $TMP/sig/checkpoint-$S.h5 after step $S"
    H=$(hash_of)
    # shellcheck disable=SC2086
    mpi 2 $TRAIN --max_steps $((S + 2)) --save_steps 0 --out "$TMP/sigref"
    [ -n "$H" ] && [ "$(hash_of)" = "$H" ] && pass || fail "resumed after SIGUSR1 at step $S: parameters differ from the uninterrupted run"
else
    fail "SIGUSR1: no checkpoint named by $TMP/sig/latest"
fi

# --- 4. errors: one line naming the cause, status 2, nothing run ----------------------------------
# bad NAME TEXT ARGS...: zinf-launch ARGS fails with one line containing TEXT
bad() {
    local what=$1 text=$2; shift 2
    launch "$@"
    CHECKS=$((CHECKS + 1))
    [ "$RC" = 2 ] || fail "$what: exit $RC, want 2"
    case "$OUTPUT" in *"zinf-launch: error: $text"*) ;; *) fail "$what: output lacks '$text'"; printf '%s\n' "$OUTPUT" >&2 ;; esac
    [ "$(printf '%s\n' "$OUTPUT" | grep -c .)" -le 2 ] || fail "$what: more than one line (and a note): $OUTPUT"
}
printf 'a slots=2\nb slots=2\na slots=1\n' > "$TMP/dup"
printf 'a slots=2\nb   # no slots\n' > "$TMP/noslots"
printf '# nothing\n\n' > "$TMP/empty"
printf 'a slots=2\nb slots=1\n' > "$TMP/ab"
printf 'localhost slots=2\n127.0.0.1 slots=2\n' > "$TMP/twice_here"
printf 'a slots=2\nuser@b slots=2\n' > "$TMP/user_at"
bad "duplicate host" "$TMP/dup:3: host a is listed twice (first on line 1)" -H "$TMP/dup" true
bad "this node twice" "$TMP/twice_here:2: host 127.0.0.1 is host localhost of line 1 (both name this node): list the node once, with all its slots" -H "$TMP/twice_here" true
bad "user@host" "$TMP/user_at:2: host user@b: mpirun's --host takes no user@ (OpenMPI refuses the name), and --include/--exclude could not name it ('@' separates hosts there, as in DeepSpeed): set the user in ~/.ssh/config (Host b, User user) and write the host alone" -H "$TMP/user_at" -i a true
bad "bad line" "$TMP/noslots:2: expected 'HOST slots=N', got 'b'" -H "$TMP/noslots" true
bad "empty hostfile" "$TMP/empty: names no hosts" -H "$TMP/empty" true
bad "missing hostfile" "hostfile $TMP/none: No such file or directory" -H "$TMP/none" true
bad "unknown host" "--include: host 'c' is not among the hosts (a, b)" -H "$TMP/ab" -i c true
bad "bad slot" "--exclude: host b has slots 0-0, not 1" -H "$TMP/ab" -e b:1 true
bad "bad syntax" "--include: host a: slot 'x' is not a whole number" -H "$TMP/ab" --include a:x true
bad "too many slots" "--num_gpus 3: host a has 2 slots" -H "$TMP/ab" --num_gpus 3 true
bad "too many nodes" "--num_nodes 3: only 2 hosts to run on" -H "$TMP/ab" --num_nodes 3 true
bad "nodes without hostfile" "--num_nodes 2 needs a --hostfile" --num_nodes 2 --num_gpus 1 true
bad "include with num_gpus" "--num_nodes and --num_gpus cannot be combined with --include" -H "$TMP/ab" -i a --num_gpus 1 true
bad "pdsh" "--launcher pdsh: zinf-launch runs OpenMPI's mpirun" --launcher pdsh --num_gpus 1 true
bad "no program" "no program to launch" --num_gpus 2
# a true/false after a switch is its value (DeepSpeed's store_true switches take none, and would
# launch the program true): with nothing after it, the error says both readings
bad "dry-run true" "no program to launch: 'true' after --dry-run is read as its value; to launch the program true, write --dry-run -- true" --num_gpus 1 --dry-run true
bad "bind false" "no program to launch: 'false' after --bind_cores_to_rank is read as its value; to launch the program false, write --bind_cores_to_rank -- false" --num_gpus 1 --bind_cores_to_rank false
launch --num_gpus 1 --dry-run -- true
expect_has "--dry-run -- true" "zinf-launch: 1 rank on 1 host: localhost:0" "zinf-launch --rank_bind auto true"
bad "unknown flag" "unknown flag --num_gpu (did you mean --num_gpus?)" --num_gpu 2 true
bad "bad number" "--num_gpus expects an integer, got 'two'" --num_gpus two true
bad "ssh port 0" "--ssh_port 0: expected 1-65535" --ssh_port 0 --num_gpus 1 true
bad "master port too big" "--master_port 70000: expected 1-65535" --master_port 70000 --num_gpus 1 true
bad "unterminated quote" "--launcher_args: an unterminated ' quote" --launcher_args "--mca x 'y" --num_gpus 1 true
bad "zero GPUs" "--num_gpus must be at least 1" --num_gpus 0 true
bad "hostfile twice" "--hostfile is given twice (-H $TMP/ab, then --hostfile $TMP/dup); give it once" -H "$TMP/ab" --hostfile "$TMP/dup" true
printf 'a slots=2\nbig slots=1000000\n' > "$TMP/big"
bad "a million slots" "$TMP/big:2: host big: slots=1000000: expected a whole number from 1 to 4096" -H "$TMP/big" true
# the man page's example hostfile, copied as a reader sees it, names node1 and node2 (its \n once
# rendered as '\node2', which printf wrote as a host 'ode2')
if command -v groff >/dev/null 2>&1; then
    EX=$(groff -man -Tutf8 -P-c "${top_srcdir:-.}/man/zinf-launch.1" 2>/dev/null | sed -n "s/^ *printf \('node1[^']*'\) > hosts\$/\1/p")
    (cd "$TMP" && eval "printf $EX" > "$TMP/manhosts")
    launch --dry-run -H "$TMP/manhosts" --bind_cores_to_rank false true
    expect_has "the man page's hostfile" "zinf-launch: 8 ranks on 2 hosts: node1:0,1,2,3 node2:0,1,2,3"
fi
# an empty entry of CUDA_VISIBLE_DEVICES was a slot of its own: a third rank, without a GPU
CVD_WAS=${CUDA_VISIBLE_DEVICES-unset}
export CUDA_VISIBLE_DEVICES=0,1,
bad "CUDA_VISIBLE_DEVICES trailing comma" "CUDA_VISIBLE_DEVICES '0,1,': entry 3 is empty" true
if [ "$CVD_WAS" = unset ]; then unset CUDA_VISIBLE_DEVICES; else CUDA_VISIBLE_DEVICES=$CVD_WAS; fi
# an IPv6 address: mpirun's --host fe80::1:2 would be another host (OpenMPI takes none)
printf 'a slots=1\nfe80::1 slots=2\n' > "$TMP/ipv6"
bad "IPv6 host" "$TMP/ipv6:2: host fe80::1: a ':' (an IPv6 address?) cannot be passed in mpirun's --host NAME:N" -H "$TMP/ipv6" true
# the master address is taken for DeepSpeed's command lines and said to be unused
launch --dry-run --num_gpus 2 --master_addr 10.0.0.1 --master_port 29500 touch "$TMP/ran"
expect_ok "dry run"
expect_has "dry run" "--master_addr and --master_port are not used: MPI does the rendezvous" "mpirun -np 2"
[ ! -e "$TMP/ran" ] && pass || fail "--dry-run ran the program"
# inside a Slurm allocation of several nodes, no hostfile: said, not silent (zinf-launch reads no
# allocation; the ranks stay on this node)
OUTPUT=$(SLURM_JOB_NUM_NODES=3 "$LAUNCH" --dry-run --num_gpus 2 true 2>&1); RC=$?
expect_has "a 3-node Slurm allocation" "zinf-launch: this Slurm allocation has 3 nodes and no --hostfile is given: the ranks start on this node alone (srun, or the scripts in jobs/slurm/, start them on every node)" "2 ranks on 1 host"
OUTPUT=$(SLURM_JOB_NUM_NODES=1 "$LAUNCH" --dry-run --num_gpus 2 true 2>&1); RC=$?
[ "$(count_lines "Slurm allocation")" = 0 ] && pass || fail "a 1-node allocation was remarked on"

# --- 5. cores per rank ---------------------------------------------------------------------------
# the reference: DeepSpeed's rule (cores_per_rank = cores // ranks, rank r takes the r-th run of
# them) over the CPUs this shell may use, a core being a (package, core id) of /sys, with every
# hardware thread of a rank's cores; "unbound" where there are fewer cores than ranks
ALLOWED=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
expand() { printf '%s\n' "$1" | tr ',' '\n' | awk -F- '{ e = NF > 1 ? $2 : $1; for (i = $1; i <= e; i++) print i }'; }
topo() { cat "/sys/devices/system/cpu/cpu$1/topology/$2" 2>/dev/null || echo "cpu$1"; }
CORES=$(for c in $(expand "$ALLOWED"); do echo "$c $(topo "$c" physical_package_id):$(topo "$c" core_id)"; done)
NCORES=$(printf '%s\n' "$CORES" | awk '{ print $2 }' | sort -u | wc -l)
share() { # NP R: rank R's CPUs, condensed as the kernel writes them
    printf '%s\n' "$CORES" | awk -v np="$1" -v r="$2" '
        { cpu[NR] = $1; if (!($2 in idx)) idx[$2] = n++; ci[NR] = idx[$2] }
        END { per = int(n / np); if (per < 1) { print "unbound"; exit }
              s = ""; prev = -2; open = 0
              for (i = 1; i <= NR; i++) {
                  if (ci[i] < r * per || ci[i] >= (r + 1) * per) continue
                  c = cpu[i]
                  if (c == prev + 1) { open = 1 } else { if (open) s = s "-" prev; s = s (s == "" ? "" : ",") c; open = 0 }
                  prev = c }
              if (open) s = s "-" prev
              print s }'; }
cat > "$TMP/cpus.sh" <<'EOF'
#!/bin/sh
echo "rank=$OMPI_COMM_WORLD_RANK threads=${OMP_NUM_THREADS:-unset} places=${OMP_PLACES:-unset} bind=${OMP_PROC_BIND:-unset} cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
EOF
chmod +x "$TMP/cpus.sh"
ABS=$(readlink -f "$LAUNCH")
# a clean environment: the command is exactly this
OUTPUT=$(env -i PATH="$PATH" HOME="$TMP" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$LAUNCH" --dry-run --num_gpus 2 "$TMP/cpus.sh" 2>&1); RC=$?
expect_has "the command" "zinf-launch: mpirun -np 2 --host localhost:2 --map-by slot --bind-to none -x PATH $ABS --rank_bind auto $TMP/cpus.sh"
# rank_line NP R: what rank R of NP prints, from the reference (OMP_PLACES and OMP_PROC_BIND stay
# unset: the OpenMP runtime would bind the first thread to one core, and every thread after it)
rank_line() {
    sh=$(share "$1" "$2")
    if [ "$sh" = unbound ]; then echo "rank=$2 threads=1 places=unset bind=unset cpus=$ALLOWED"
    else echo "rank=$2 threads=$((NCORES / $1)) places=unset bind=unset cpus=$sh"; fi
}
for np in 1 2 3; do
    OUTPUT=$(env -u OMP_NUM_THREADS "$LAUNCH" --num_gpus "$np" "$TMP/cpus.sh" 2>&1); RC=$?
    expect_ok "$np ranks bound"
    for r in $(seq 0 $((np - 1))); do expect_has "$np ranks, rank $r" "$(rank_line "$np" "$r")"; done
done
# the note says the same before mpirun starts
OUTPUT=$(env -u OMP_NUM_THREADS "$LAUNCH" --dry-run --num_gpus 1 "$TMP/cpus.sh" 2>&1)
expect_has "the note" "zinf-launch: this node's ranks: rank 0 on CPUs $(share 1 0); OMP_NUM_THREADS=$NCORES"
# torchrun's variable and flag: the same ranks as --num_gpus
OUTPUT=$(env -u OMP_NUM_THREADS NPROC_PER_NODE=2 "$LAUNCH" "$TMP/cpus.sh" 2>&1); RC=$?
expect_ok "NPROC_PER_NODE=2"
expect_has "NPROC_PER_NODE=2" "$(rank_line 2 0)" "$(rank_line 2 1)"
OUTPUT=$(env -u OMP_NUM_THREADS "$LAUNCH" --nproc_per_node 2 "$TMP/cpus.sh" 2>&1)
expect_has "--nproc_per_node 2" "$(rank_line 2 0)" "$(rank_line 2 1)"
# the user's OMP_NUM_THREADS is kept (and said so); binding still applies
OUTPUT=$(OMP_NUM_THREADS=3 "$LAUNCH" --num_gpus 1 "$TMP/cpus.sh" 2>&1)
expect_has "OMP_NUM_THREADS=3" "OMP_NUM_THREADS=3 as set" "rank=0 threads=3 places=unset bind=unset cpus=$(share 1 0)"
# DeepSpeed's list: its last CPU for one rank, one thread per listed CPU
LAST=$(expand "$ALLOWED" | tail -1)
OUTPUT=$(env -u OMP_NUM_THREADS "$LAUNCH" --num_gpus 1 --bind_core_list "$LAST" "$TMP/cpus.sh" 2>&1)
expect_has "--bind_core_list $LAST" "rank=0 threads=1 places=unset bind=unset cpus=$LAST"
# --bind_cores_to_rank false: as before, every rank on every CPU, the thread count left alone
OUTPUT=$(env -u OMP_NUM_THREADS "$LAUNCH" --num_gpus 2 --bind_cores_to_rank false "$TMP/cpus.sh" 2>&1)
expect_has "unbound" "rank=1 threads=unset places=unset bind=unset cpus=$ALLOWED" "--bind-to none"
case "$OUTPUT" in *"--rank_bind"*) fail "--bind_cores_to_rank false still binds: $OUTPUT" ;; *) pass ;; esac
# the training log names each rank's CPUs and threads; unbound ranks whose threads outnumber the
# CPUs draw a warning
NCPU=$(expand "$ALLOWED" | wc -l)
plural() { [ "$1" = 1 ] || echo s; }
# shellcheck disable=SC2086
OUTPUT=$(env -u OMP_NUM_THREADS "$LAUNCH" --num_gpus 2 zinf $TRAIN --max_steps 1 --out "$TMP/log1" 2>&1); RC=$?
expect_ok "log of a bound run"
if [ "$(share 2 0)" != unbound ]; then
    expect_has "log of a bound run" "zinf: $(hostname): 2 ranks, $((NCORES / 2)) OpenMP thread$(plural $((NCORES / 2))) each; CPUs of rank 0: $(share 2 0), rank 1: $(share 2 1)"
fi
# shellcheck disable=SC2086
OUTPUT=$(OMP_NUM_THREADS=$NCPU "$MPIRUN" --oversubscribe --bind-to none -np 2 "$ZINF" $TRAIN --max_steps 1 --out "$TMP/log2" 2>&1); RC=$?
expect_has "oversubscribed" "zinf: warning: $(hostname): 2 ranks run $((2 * NCPU)) OpenMP threads on $NCPU CPU" \
    "zinf: $(hostname): 2 ranks, $NCPU OpenMP thread$(plural "$NCPU") each; CPUs of rank 0: $ALLOWED, rank 1: $ALLOWED"

# plain mpirun, unbound, OMP_NUM_THREADS unset: each rank's team would span every CPU, so zinf
# splits the shared CPUs among the ranks itself (no warning then)
# shellcheck disable=SC2086
OUTPUT=$(env -u OMP_NUM_THREADS "$MPIRUN" --oversubscribe --bind-to none -np 2 "$ZINF" $TRAIN --max_steps 1 --out "$TMP/log4" 2>&1); RC=$?
T2=$((NCPU / 2)); [ "$T2" -ge 1 ] || T2=1
expect_has "unbound, no OMP_NUM_THREADS" "zinf: $(hostname): 2 ranks, $T2 OpenMP thread$(plural "$T2") each (OMP_NUM_THREADS unset: the CPUs the ranks share, split among them); CPUs of rank 0: $ALLOWED, rank 1: $ALLOWED"
case "$OUTPUT" in *"zinf: warning: $(hostname)"*) fail "unbound, no OMP_NUM_THREADS: a warning: $OUTPUT" ;; *) pass ;; esac
# shellcheck disable=SC2086
OUTPUT=$(OMP_PROC_BIND=close "$LAUNCH" --num_gpus 1 zinf $TRAIN --max_steps 1 --out "$TMP/log3" 2>&1)
expect_has "OMP_PROC_BIND" "zinf: warning: OMP_PROC_BIND=close: the OpenMP runtime binds each rank's first thread to one place"
# one rank bound to one core by mpirun with no thread count chosen: a warning naming the way out;
# unbound, or with OMP_NUM_THREADS set (a choice), none
if [ "$(getconf _NPROCESSORS_ONLN)" -ge 2 ]; then
    # shellcheck disable=SC2086
    OUTPUT=$(env -u OMP_NUM_THREADS "$MPIRUN" --bind-to core -np 1 "$ZINF" $TRAIN --max_steps 1 --out "$TMP/log5" 2>&1); RC=$?
    expect_ok "one rank bound to a core"
    expect_has "one rank bound to a core" "zinf: warning: $(hostname): its rank is bound to one CPU of the node's $(getconf _NPROCESSORS_ONLN) and OMP_NUM_THREADS is unset" \
        "--bind-to none, --map-by slot:PE=N --bind-to core -x OMP_NUM_THREADS=N, or zinf-launch)"
    for how in "env -u OMP_NUM_THREADS $MPIRUN --bind-to none" "env OMP_NUM_THREADS=1 $MPIRUN --bind-to core"; do
        # shellcheck disable=SC2086
        OUTPUT=$($how -np 1 "$ZINF" $TRAIN --max_steps 1 --out "$TMP/log6" --overwrite_output_dir 2>&1); RC=$?
        expect_ok "$how"
        case "$OUTPUT" in *"is bound to one CPU"*) fail "$how: warned of a one-CPU binding: $OUTPUT" ;; *) pass ;; esac
    done
fi

# refusals: one line each (the pool's note may come first), nothing run
bad "more ranks than cores" "--bind_cores_to_rank: $((NCORES + 1)) ranks on this node's $NCORES core" --num_gpus $((NCORES + 1)) --bind_cores_to_rank true "$TMP/cpus.sh"
bad "list too short" "--bind_core_list lists 1 CPU for the 2 ranks of this node: at least one each" --num_gpus 2 --bind_core_list "$LAST" "$TMP/cpus.sh"
bad "list off" "--bind_core_list 0 with --bind_cores_to_rank false" --num_gpus 1 --bind_core_list 0 --bind_cores_to_rank false "$TMP/cpus.sh"
bad "bad list" "--bind_core_list '2-1': the range 2-1 ends before it starts" --num_gpus 1 --bind_core_list 2-1 "$TMP/cpus.sh"
bad "missing CPU" "--bind_core_list: CPU 65535 is not among this node's CPUs ($ALLOWED)" --num_gpus 1 --bind_core_list 65535 "$TMP/cpus.sh"
bad "rank_bind outside mpirun" "--rank_bind: OMPI_COMM_WORLD_LOCAL_RANK is not set: this mode runs in the ranks of the mpirun command zinf-launch builds" --rank_bind auto "$TMP/cpus.sh"
bad "two counts" "--num_gpus 2 and --nproc_per_node 3 disagree: give one of them" --num_gpus 2 --nproc_per_node 3 "$TMP/cpus.sh"
export NPROC_PER_NODE=2
bad "flag and variable" "--num_gpus 3 and NPROC_PER_NODE=2 (environment) disagree: give one of them" --num_gpus 3 "$TMP/cpus.sh"
unset NPROC_PER_NODE
export MASTER_PORT=29500
bad "ports" "--master_port 29501 and MASTER_PORT=29500 (environment) disagree: give one of them" --master_port 29501 --num_gpus 1 "$TMP/cpus.sh"
unset MASTER_PORT
# torchrun's node-by-node start: the one line and the command that starts both nodes from here
OUTPUT=$(NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 NPROC_PER_NODE=2 "$LAUNCH" "$TMP/cpus.sh" --x 'a b' 2>&1); RC=$?
CHECKS=$((CHECKS + 1))
[ "$RC" = 2 ] || fail "node by node: exit $RC, want 2"
[ "$OUTPUT" = "zinf-launch: zinf-launch --hostfile HOSTFILE --num_nodes 2 --num_gpus 2 $TMP/cpus.sh --x 'a b'
zinf-launch: error: NNODES=2 (environment) with NODE_RANK=1 (environment) is torchrun's start of one node at a time; zinf starts every node from one place, once: run the command above on one node with a hostfile of 'HOST slots=N' lines naming the nodes, 10.0.0.1 (MASTER_ADDR) first, or under Slurm submit jobs/slurm/train-multinode.sbatch" ] ||
    fail "node by node printed: $OUTPUT"
OUTPUT=$("$LAUNCH" --nnodes 2 --node_rank 0 --nproc_per_node 2 "$TMP/cpus.sh" 2>&1); RC=$?
expect_has "--node_rank 0" "--nnodes 2 with --node_rank 0 is torchrun's start of one node at a time"
case "$OUTPUT" in *rank=*) fail "a node-by-node start ran ranks" ;; *) pass ;; esac
# the printed command, given a hostfile naming this node, runs the job (one node here)
printf 'localhost slots=2\n' > "$TMP/one"
LINE=$(NNODES=1 NODE_RANK=1 NPROC_PER_NODE=2 "$LAUNCH" "$TMP/cpus.sh" 2>&1 | sed -n 's/^zinf-launch: \(zinf-launch --hostfile.*\)/\1/p')
OUTPUT=$(eval "env -u OMP_NUM_THREADS $(printf '%s' "$LINE" | sed "s|^zinf-launch --hostfile HOSTFILE|$LAUNCH --hostfile $TMP/one|")" 2>&1); RC=$?
expect_ok "the printed command: $LINE"
expect_has "the printed command" "$(rank_line 2 0)" "$(rank_line 2 1)"

echo "test_launch: $CHECKS checks, $FAILS failed"
[ "$FAILS" -eq 0 ]
