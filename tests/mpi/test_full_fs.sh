#!/bin/sh
# The run's own files on a full file system (a tmpfs of a few MiB, filled up): a write of
# metrics.jsonl or of a rank's log that fails ends the run at once with exit 1 and one line
# naming the file and errno, instead of a run that exits 0 with its records lost:
#  1. metrics.jsonl full from the start: the run stops after step 1 (its record is the first);
#  2. a resumed run whose metrics.jsonl can no longer grow: nothing is saved beyond what was due,
#     `latest` still names the checkpoint, which resumes to the uninterrupted run's losses;
#  3. --per_rank_logs on the full file system, and on rank 1 alone (its log on /dev/full): the
#     failing rank's line, once, and every rank stops.
# Needs root for the mount (CI runs as root); exit 77 where the mount is refused.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

FS=$TMP/fs
mkdir -p "$FS"
why=$(mount -t tmpfs -o size=8m zinf-test "$FS" 2>&1) || { echo "$(basename "$0"): skipped: cannot mount a tmpfs: $why"; exit 77; }
trap 'umount "$FS" 2>/dev/null; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
# trn NP OUT STEPS [flags]: train test-mini on NP ranks into OUT (a path)
trn() {
    local np=$1 out=$2 steps=$3; shift 3
    mpi "$np" train --model test-mini --data "$TMP/add_train_*.bin" --max_length 32 --max_steps "$steps" \
        --logging_steps 1 --per_device_train_batch_size 4 --seed 5 --out "$out" "$@"
}
# fill: no free block left on the tmpfs
fill() { dd if=/dev/zero of="$FS/fill" bs=64k 2>/dev/null; [ "$(df --output=avail "$FS" | tail -1)" -eq 0 ]; }
# one_error WHAT LINE: the output has exactly one error line, and it is LINE; the status is 1
one_error() {
    CHECKS=$((CHECKS + 1))
    [ "$RC" = 1 ] || fail "$1: exit $RC, want 1"
    local got
    got=$(printf '%s\n' "$OUTPUT" | grep 'zinf: error:')
    [ "$got" = "$2" ] || { fail "$1: the error lines are"; printf '%s\n' "$got" >&2; echo "want: $2" >&2; }
}
step_lines() { printf '%s\n' "$OUTPUT" | grep -c '^step '; }
losses() { metric "$1/metrics.jsonl" loss | tr '\n' ' '; }

# --- 1. full from the start -------------------------------------------------------------------
fill && pass || fail "the tmpfs is not full: $(df "$FS" | tail -1)"
trn 2 "$FS/a" 5 --save_steps 0
one_error "metrics.jsonl on a full file system" \
    "zinf: error: $FS/a/metrics.jsonl: cannot write the record of step 1: No space left on device"
[ "$(step_lines)" = 1 ] && [ ! -s "$FS/a/metrics.jsonl" ] && pass ||
    fail "full file system: $(step_lines) steps ran, metrics.jsonl has $(wc -c < "$FS/a/metrics.jsonl") bytes"
rm -f "$FS/fill"

# --- 2. a resumed run: the checkpoint stays and goes on ----------------------------------------
# the file's last block has room for some records: the run fails at the first that needs a new
# block, at step K, logged on standard output just before; metrics.jsonl keeps whole records
trn 2 "$TMP/ref" 4 --save_steps 0
expect_ok "the uninterrupted run"
trn 2 "$FS/b" 2 --save_steps 2
expect_ok "2 steps and a checkpoint on the tmpfs"
fill && pass || fail "the tmpfs is not full"
trn 2 "$FS/b" 200 --save_steps 0 --resume auto
K=$(printf '%s\n' "$OUTPUT" | sed -n 's/^step *\([0-9]*\)\/200 .*/\1/p' | tail -1)
one_error "a resumed run on a full file system" \
    "zinf: error: $FS/b/metrics.jsonl: cannot write the record of step $K: No space left on device"
[ -n "$K" ] && [ "$K" -gt 3 ] && [ "$K" -lt 200 ] && [ "$(step_lines)" = $((K - 2)) ] && pass ||
    fail "a resumed run on a full file system: the last step logged is '$K', after $(step_lines) steps"
[ "$(metric "$FS/b/metrics.jsonl" step | tr '\n' ' ')" = "$(seq $((K - 1)) | tr '\n' ' ')" ] &&
    [ "$(tail -c 1 "$FS/b/metrics.jsonl" | od -An -c | tr -d ' ')" = '\n' ] && pass ||
    fail "metrics.jsonl after the failed write of step $K: steps $(metric "$FS/b/metrics.jsonl" step | tr '\n' ' ')"
[ "$(cat "$FS/b/latest")" = checkpoint-2.h5 ] && [ "$(cd "$FS/b" && ls | tr '\n' ' ')" = "checkpoint-2.h5 latest metrics.jsonl " ] &&
    pass || fail "after the failed write: $(cd "$FS/b" && ls | tr '\n' ' '), latest $(cat "$FS/b/latest")"
rm -f "$FS/fill"
trn 2 "$FS/b" 4 --save_steps 0 --resume auto
expect_ok "resumed with room again"
expect_has "resumed with room again" "zinf: resumed from $FS/b/checkpoint-2.h5 after step 2"
# steps 3 and 4 again, appended: the uninterrupted run's losses
[ "$(metric "$FS/b/metrics.jsonl" loss | tail -2 | tr '\n' ' ')" = "$(metric "$TMP/ref/metrics.jsonl" loss | tail -2 | tr '\n' ' ')" ] &&
    pass || fail "resumed: losses $(losses "$FS/b"), the uninterrupted run's $(losses "$TMP/ref")"

# --- 3. the ranks' logs --------------------------------------------------------------------------
fill && pass || fail "the tmpfs is not full"
trn 2 "$FS/c" 5 --save_steps 0 --per_rank_logs
one_error "--per_rank_logs on a full file system" \
    "zinf: error: $FS/c/logs/rank0.log: cannot write: No space left on device"
[ "$(step_lines)" = 0 ] && pass || fail "--per_rank_logs on a full file system: $(step_lines) steps ran"
rm -f "$FS/fill"
mkdir -p "$TMP/d/logs"
ln -s /dev/full "$TMP/d/logs/rank1.log"
trn 2 "$TMP/d" 5 --save_steps 0 --per_rank_logs
one_error "rank 1's log on /dev/full" "zinf: error: $TMP/d/logs/rank1.log: cannot write: No space left on device"
[ "$(step_lines)" = 0 ] && [ ! -s "$TMP/d/metrics.jsonl" ] && pass || fail "rank 1's log on /dev/full: $(step_lines) steps ran"

finish
