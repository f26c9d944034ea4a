#!/bin/sh
# A token shard truncated while a run reads it (the shards are memory-mapped, so a read past the
# new end is a SIGBUS) ends the run with exit 1 and one line naming the shard and both sizes, on
# one rank and on two, where the other rank must not be left waiting.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"

# truncated_during NP: train on NP ranks (0: a singleton, without mpirun) from a copy of the shard,
# truncate the copy to its first page after two logged steps; $RC, $OUTPUT, and $SIZE (its size
# before); $SECS: how long the run took after the truncation
truncated_during() {
    local np=$1 out=$TMP/run$1 i=0 t0
    S=$TMP/shards$1/add_train_000000.bin
    mkdir -p "$TMP/shards$1"
    cp "$TMP/add_train_000000.bin" "$S"
    SIZE=$(wc -c < "$S")
    set -- train --model test-mini --data "$TMP/shards$np/add_train_*.bin" --max_length 32 --max_steps 100000 \
        --logging_steps 1 --per_device_train_batch_size 4 --seed 5 --save_steps 0 --out "$out"
    if [ "$np" = 0 ]; then timeout 120 "$ZINF" "$@" > "$out.log" 2>&1 &
    else timeout 120 "$MPIRUN" --oversubscribe -np "$np" "$ZINF" "$@" > "$out.log" 2>&1 & fi
    local bg=$!
    while [ "$(metric "$out/metrics.jsonl" step 2>/dev/null | wc -l)" -lt 2 ] && [ $i -lt 600 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    truncate -s 4096 "$S"
    t0=$(date +%s)
    wait $bg
    RC=$?
    SECS=$(($(date +%s) - t0))
    OUTPUT=$(cat "$out.log")
}

truncated_during 0
[ "$RC" = 1 ] && pass || { fail "one rank: exit $RC, want 1"; printf '%s\n' "$OUTPUT" | tail -5 >&2; }
want="zinf: error: $S: the shard was truncated while in use: 4096 bytes now, $SIZE when it was opened"
[ "$(printf '%s\n' "$OUTPUT" | grep 'error')" = "$want" ] && pass ||
    { fail "one rank: the error lines are not the one expected:"; printf '%s\n' "$OUTPUT" | grep error >&2; echo "want: $want" >&2; }

# two ranks: each rank that read past the end says so (one or both), and the job ends in seconds
truncated_during 2
[ "$RC" = 1 ] && [ "$SECS" -lt 60 ] && pass || { fail "two ranks: exit $RC after $SECS s, want 1 at once"; printf '%s\n' "$OUTPUT" | tail -5 >&2; }
errs=$(printf '%s\n' "$OUTPUT" | grep 'zinf: error:')
n=$(printf '%s\n' "$errs" | grep -c .)
bad=$(printf '%s\n' "$errs" | grep -vx "zinf: error: rank [01]: $S: the shard was truncated while in use: 4096 bytes now, $SIZE when it was opened")
[ "$n" -ge 1 ] && [ "$n" -le 2 ] && [ -z "$bad" ] && pass ||
    { fail "two ranks: $n error lines, not each naming the shard:"; printf '%s\n' "$errs" >&2; }
# (the job ended through MPI_Abort: exit 1 above; OpenMPI's own "MPI_ABORT was invoked" notice is
# not asserted, since mpirun drops it when two ranks abort at once)

finish
