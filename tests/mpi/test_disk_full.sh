#!/bin/sh
# Saves on a real full file system, and ranks that stall during a save or a load.
# A 3 MiB tmpfs is filled to levels around the points where the 1st and 2nd checkpoint stop
# fitting; at each, on 2 and 3 ranks, the job must end within the time limit with one line that
# names the file, no rank may hang or crash, no .tmp may stay, `latest` must name a complete
# checkpoint, and a resume from it, with room, must continue the uninterrupted run exactly.
# Then a rank stopped (SIGSTOP) midway through a save, and through a load, must end the job
# within --comm_timeout, naming the collective; the next run removes the .tmp it left.
# Needs root for mount (CI runs as root); exit 77 elsewhere.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

SMALL="$TMP/small"
mkdir -p "$SMALL"
if [ "$(id -u)" -ne 0 ] || ! mount -t tmpfs -o size=3m tmpfs "$SMALL" 2>/dev/null; then
    echo "test_disk_full.sh: skipped: mounting a tmpfs needs root (and a system that allows mount)"
    exit 77
fi
umount "$SMALL"
trap 'umount "$SMALL" 2>/dev/null; rm -rf "$TMP"' EXIT

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
D="$TMP/add_train_*.bin"
# trn NP OUT STEPS [flags]: test-mini, a save every step
trn() {
    local np=$1 out=$2 steps=$3; shift 3
    OUTPUT=$(timeout 120 "$MPIRUN" --oversubscribe -np "$np" "$ZINF" train --model test-mini --data "$D" \
        --max_length 32 --per_device_train_batch_size 4 --logging_steps 1 --max_steps "$steps" --seed 3 \
        --out "$out" --comm_timeout 5 "$@" 2>&1)
    RC=$?
}
losses() { metric "$1/metrics.jsonl" loss | tr -d ' ' | grep -v '^$' | tail -n "$2"; }

# the reference: 3 uninterrupted steps on 2 ranks, and the size of one checkpoint
trn 2 "$TMP/ref" 3 --save_steps 1
expect_ok "reference run"
HREF=$(hash_of)
S=$(( $(stat -c %s "$TMP/ref/checkpoint-1.h5") / 1024 ))
[ "$S" -gt 100 ] && pass || fail "checkpoint size $S KiB"

# --- 1. fill levels: around the room for one and for two checkpoints ----------------------------
kinds=""
resumed=0
for k in 1 2; do
    for d in -40 0 16 32 48 96; do
        fill=$((3072 - k * S - 24 + d))
        [ "$fill" -gt 0 ] || continue
        for np in 2 3; do
            mount -t tmpfs -o size=3m tmpfs "$SMALL" || { fail "mount"; continue; }
            head -c $((fill * 1024)) /dev/zero > "$SMALL/filler" 2>/dev/null
            trn "$np" "$SMALL/run" 3 --save_steps 1
            w="fill $fill KiB, $np ranks"
            if [ "$RC" -eq 124 ] || [ "$RC" -ge 128 ]; then fail "$w: exit $RC (hung or crashed)"; printf '%s\n' "$OUTPUT" | tail -5 >&2
            elif [ "$RC" -eq 0 ]; then pass  # it fitted (tmpfs rounding): the run is whole
            else
                n=$(count_lines "error")
                [ "$n" -eq 1 ] && pass || { fail "$w: $n error lines"; printf '%s\n' "$OUTPUT" | grep error >&2; }
                line=$(printf '%s\n' "$OUTPUT" | grep "zinf: error:")
                case "$line" in *"$SMALL/run"*) pass ;; *) fail "$w: the error does not name the file: $line" ;; esac
                case "$line" in
                    *"a checkpoint of this model takes"*) kinds="$kinds pre" ;;
                    *"no space left on the device for the checkpoint"*) kinds="$kinds reserve" ;;
                    *"cannot write the checkpoint's layout"*) kinds="$kinds layout" ;;
                    *"latest.tmp: cannot write"*) kinds="$kinds latest" ;;
                    *) kinds="$kinds other"; echo "unexpected: $line" >&2 ;;
                esac
            fi
            left=$(find "$SMALL" -name '*.tmp' | tr '\n' ' ')
            [ -z "$left" ] && pass || fail "$w: left $left"
            if [ -f "$SMALL/run/latest" ]; then
                L=$(cat "$SMALL/run/latest")
                OUT2=$("$ZINF" ckpt verify "$SMALL/run" 2>&1) && pass || fail "$w: latest ($L) does not verify: $OUT2"
                # with room again, the run continues from `latest` to the uninterrupted result
                if [ "$RC" -ne 0 ] && [ "$np" -eq 2 ] && [ "$resumed" -lt 2 ]; then
                    rm -rf "$TMP/cont" && cp -r "$SMALL/run" "$TMP/cont"
                    trn 2 "$TMP/cont" 3 --save_steps 0 --resume auto
                    expect_ok "$w: resume from $L"
                    [ "$(hash_of)" = "$HREF" ] && pass || fail "$w: resumed from $L to hash $(hash_of), uninterrupted $HREF"
                    [ "$(losses "$TMP/cont" 3)" = "$(losses "$TMP/ref" 3)" ] && pass || fail "$w: resumed losses differ"
                    resumed=$((resumed + 1))
                fi
            fi
            umount "$SMALL"
        done
    done
done
for want in pre reserve layout; do
    case "$kinds" in *"$want"*) pass ;; *) fail "no fill level ended in the '$want' failure (seen:$kinds)" ;; esac
done
case "$kinds" in *other*) fail "an unexpected failure line (kinds:$kinds)" ;; *) pass ;; esac
[ "$resumed" -ge 1 ] && pass || fail "no failed run left a checkpoint to resume"

# --- 1b. no room for one checkpoint: with --save_steps 0 the run trains, warning at its start that
# the save a stopping signal asks for would fail; --no_signal_save gives that save up, silently
mount -t tmpfs -o size=3m tmpfs "$SMALL" || fail "mount"
head -c $(((3072 - S / 2) * 1024)) /dev/zero > "$SMALL/filler" 2>/dev/null
trn 2 "$SMALL/ns" 2 --save_steps 0
expect_ok "no room, --save_steps 0"
expect_has "no room, --save_steps 0" "warning" "$SMALL/ns: a checkpoint of this model takes" "--no_signal_save"
trn 2 "$SMALL/ns2" 2 --save_steps 0 --no_signal_save
expect_ok "no room, --save_steps 0 --no_signal_save"
[ "$(count_lines "a checkpoint of this model takes")" -eq 0 ] && pass || fail "--no_signal_save: still warned"
trn 2 "$SMALL/ns3" 2 --save_steps 1
expect_err "no room, --save_steps 1" "$SMALL/ns3: a checkpoint of this model takes"
umount "$SMALL"

# --- 2. a rank that stalls in a save or a load ends the job within the time limit ---------------
trn 2 "$TMP/st" 2 --save_steps 1
expect_ok "two steps with saves"
# stalled WHAT FAULT SAVE_STEPS: a run from --resume auto in which FAULT stops rank 1; it must end
# within the limit
stalled() {
    local t0; t0=$(date +%s)
    OUTPUT=$(ZINF_CKPT_FAULT="$2" timeout 60 "$MPIRUN" --oversubscribe -np 2 "$ZINF" train --model test-mini \
        --data "$D" --max_length 32 --per_device_train_batch_size 4 --logging_steps 1 --max_steps 4 --seed 3 \
        --out "$TMP/st" --comm_timeout 3 --save_steps "$3" --resume auto 2>&1)
    RC=$?
    local dt=$(($(date +%s) - t0))
    [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && [ "$dt" -lt 30 ] && pass || fail "$1: exit $RC after $dt s"
}
stalled "a rank stalled in a save" "rank=1,step=3,after=5,kind=stop" 1
expect_has "a rank stalled in a save" "agree" "3"
[ "$(cat "$TMP/st/latest")" = checkpoint-2.h5 ] && pass || fail "latest after the stalled save: $(cat "$TMP/st/latest")"
# the next run removes what the stalled save left, and resumes from checkpoint-2
trn 2 "$TMP/st" 3 --save_steps 0 --resume auto
expect_ok "resume after the stalled save"
expect_has "resume after the stalled save" "removed $TMP/st/checkpoint-3.h5.tmp, left by an interrupted save"
[ ! -e "$TMP/st/checkpoint-3.h5.tmp" ] && pass || fail "checkpoint-3.h5.tmp stays after a resume"
[ "$(hash_of)" = "$HREF" ] && pass || fail "after the stalled save, resumed to hash $(hash_of), uninterrupted $HREF"
stalled "a rank stalled in a load" "rank=1,step=2,after=4,kind=stop" 0
expect_has "a rank stalled in a load" "agree"
finish
