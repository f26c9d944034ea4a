#!/bin/sh
# A resume at another world size and global batch continues the data from the next sequence not
# yet read (the checkpoint's consumed_samples), with one warning line, and the schedule by step.
# With learning rate 0 the weights never move, so a step's loss is the mean loss of the sequences
# it reads; the reference is an uninterrupted 1-rank run of batch 4 over the same stream, whose
# step k reads positions 4k..4k+3: a 3-rank step of batch 12 reading positions p..p+11 must have
# the mean of those three steps' losses. The learning rate of the resumed steps is checked against
# transformers' linear schedule written out in awk.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
D="$TMP/add_train_*.bin"
C="--model test-mini --data $D --max_length 32 --logging_steps 1 --learning_rate 0 --seed 11"
# the reference: batch 4, 15 steps = stream positions 0..59
# shellcheck disable=SC2086
mpi 1 train $C --per_device_train_batch_size 4 --max_steps 15 --save_steps 0 --out "$TMP/ref"
expect_ok "reference run"
metric "$TMP/ref/metrics.jsonl" loss > "$TMP/ref.loss"
# 2 ranks x micro 2 x accumulation 2 = batch 8: steps 1-3 read positions 0..23, saved at step 3
# shellcheck disable=SC2086
mpi 2 train $C --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --max_steps 3 --save_steps 3 --out "$TMP/a"
expect_ok "2 ranks, batch 8"
# then 3 ranks x micro 2 x accumulation 2 = batch 12: steps 4-6 read positions 24..59
# shellcheck disable=SC2086
mpi 3 train $C --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --max_steps 6 --save_steps 0 \
    --out "$TMP/a" --resume auto
expect_ok "resume on 3 ranks, batch 12"
expect_has "resume on 3 ranks, batch 12" "saved with train_batch_size 8, this run has 12 (micro 2 x accumulation 2 x world 3): the data continues from sequence 24"
[ "$(count_lines "saved with train_batch_size")" -eq 1 ] && pass || fail "the batch change is not said in exactly one line"
# and the keys of the stored config that changed, in one line: the batch, the world, the steps, the saves
expect_has "resume on 3 ranks, batch 12" "$TMP/a/checkpoint-3.h5 was saved under another config; 4 keys changed: train_batch_size 8 -> 12, zinf.world_size 2 -> 3, zinf.max_steps 3 -> 6, zinf.save_steps 3 -> 0"
metric "$TMP/a/metrics.jsonl" loss > "$TMP/a.loss"
# want: steps 1-3 (batch 8) = means of reference steps (2s-1, 2s); 4-6 (batch 12) = means of 3 from 7
awk 'NR == FNR { r[FNR] = $1; next }
     { s = FNR; if (s <= 3) { a = 2 * s - 1; w = (r[a] + r[a + 1]) / 2 } else { a = 7 + 3 * (s - 4); w = (r[a] + r[a + 1] + r[a + 2]) / 3 }
       d = $1 - w; if (d < 0) d = -d; if (d > 2e-5 * w) { bad++; printf "step %d: loss %s, the sequences it should read give %.6f\n", s, $1, w } ; n++ }
     END { exit !(n == 6 && bad == 0) }' "$TMP/ref.loss" "$TMP/a.loss" > "$TMP/cmp" && pass ||
    { fail "the resumed run read other sequences than the uninterrupted one"; cat "$TMP/cmp" "$TMP/a.loss" >&2; }
run ckpt info "$TMP/a/checkpoint-3.h5"
expect_has "ckpt info" "data position    24 sequences read"

# the schedule goes on by step: linear over 6 steps with 2 warm-up steps, lr 1e-3
L="--model test-mini --data $D --max_length 32 --logging_steps 1 --learning_rate 1e-3 --lr_scheduler_type linear --warmup_steps 2 --max_steps 6"
# shellcheck disable=SC2086
mpi 2 train $L --per_device_train_batch_size 4 --save_steps 3 --out "$TMP/s"
expect_ok "schedule, 2 ranks"
rm -f "$TMP/s/checkpoint-6.h5"; echo checkpoint-3.h5 > "$TMP/s/latest"
: > "$TMP/s/metrics.jsonl"
# shellcheck disable=SC2086
mpi 3 train $L --per_device_train_batch_size 4 --save_steps 0 --out "$TMP/s" --resume auto
expect_ok "schedule, resumed on 3 ranks"
got=$(metric "$TMP/s/metrics.jsonl" lr | tr -d ' ' | tr '\n' ' ')
want=$(awk 'BEGIN { for (k = 3; k < 6; k++) printf "%.7g ", 1e-3 * (6 - k) / 4 }')
[ "$got" = "$want" ] && pass || fail "resumed learning rates '$got', transformers' linear schedule gives '$want'"
finish
