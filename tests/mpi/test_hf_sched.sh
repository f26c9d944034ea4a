#!/bin/sh
# The HF Trainer's own learning-rate schedules, built when the DeepSpeed config has no scheduler
# block (as transformers' Trainer does): every step's learning rate in metrics.jsonl against
# transformers' formulas (optimization.py, get_scheduler) written out here in awk, for each
# --lr_scheduler_type with --warmup_steps or --warmup_ratio; without the flag a constant rate and a
# warning when warm-up flags were given;
# a scheduler block in the config wins with a warning; bad values are one line.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
D="$TMP/add_train_*.bin"
N=12 LR=0.001
# hf TYPE W MIN: transformers' learning rate of updates k = 0..N-1, one per line
hf() {
    awk -v type="$1" -v W="$2" -v m="$3" -v N="$N" -v lr="$LR" 'BEGIN { pi = atan2(0, -1)
        for (k = 0; k < N; k++) {
            if (type == "constant") f = 1
            else if (k < W) f = k / (W > 1 ? W : 1)
            else {
                d = N - W > 1 ? N - W : 1; p = (k - W) / d
                if (type == "linear") { f = (N - k) / d; if (f < 0) f = 0 }
                else if (type == "cosine" || type == "cosine_with_min_lr") {
                    f = 0.5 * (1 + cos(pi * p)); if (f < 0) f = 0
                    if (type == "cosine_with_min_lr") f = f * (1 - m / lr) + m / lr
                } else f = 1
            }
            printf "%.9g\n", lr * f
        } }'
}
# lrs_match NAME TYPE W MIN
lrs_match() {
    metric "$TMP/$1/metrics.jsonl" lr | tr -d ' ' > "$TMP/$1.got"
    hf "$2" "$3" "$4" > "$TMP/$1.want"
    n=$(grep -c . "$TMP/$1.got")
    bad=$(paste -d' ' "$TMP/$1.got" "$TMP/$1.want" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * (($2 > 0) ? $2 : 1e-3)) n++ } END { print n + 0 }')
    [ "$n" -eq "$N" ] && [ "$bad" -eq 0 ] && pass || { fail "$1: learning rates differ from transformers' $2 schedule"; paste "$TMP/$1.got" "$TMP/$1.want" >&2; }
}
trn() {
    local name=$1; shift
    run train --model test-mini --data "$D" --max_length 32 --per_device_train_batch_size 4 --max_steps "$N" \
        --logging_steps 1 --learning_rate "$LR" --out "$TMP/$name" --save_steps 0 "$@"
}
for t in linear cosine constant constant_with_warmup; do
    trn "$t" --lr_scheduler_type "$t" --warmup_steps 3
    expect_ok "$t, 3 warmup steps"
    lrs_match "$t" "$t" 3 0
done
trn cosr --lr_scheduler_type cosine --warmup_ratio 0.25
expect_ok "cosine, warmup ratio 0.25"
lrs_match cosr cosine 3 0
trn cmin --lr_scheduler_type cosine_with_min_lr --min_lr 0.0001 --warmup_steps 2
expect_ok "cosine_with_min_lr"
lrs_match cmin cosine_with_min_lr 2 0.0001
# without the flag the rate stays constant, as zinf ran such configs before; warm-up flags say
# they have nothing to act on rather than being ignored in silence
trn dflt --warmup_steps 3
expect_ok "no flag"
lrs_match dflt constant 0 0
expect_has "no flag" "--warmup_steps/--warmup_ratio have no effect: the config has no scheduler block and no --lr_scheduler_type"
# a scheduler block in the config wins, with a warning naming both
printf '{"train_batch_size": 4, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 2}}}\n' > "$TMP/ws.json"
trn blk --config "$TMP/ws.json" --lr_scheduler_type cosine
expect_ok "a scheduler block and --lr_scheduler_type"
expect_has "a scheduler block and --lr_scheduler_type" "--lr_scheduler_type cosine has no effect: the config's scheduler block (WarmupLR) is the schedule"
trn bad --lr_scheduler_type polynomial
expect_err "an unknown schedule" "--lr_scheduler_type polynomial: zinf has linear, cosine, cosine_with_min_lr, constant and constant_with_warmup"
trn nomin --lr_scheduler_type cosine_with_min_lr
expect_err "cosine_with_min_lr without --min_lr" "--lr_scheduler_type cosine_with_min_lr needs --min_lr"
trn negmin --lr_scheduler_type cosine_with_min_lr --min_lr nan
expect_err "--min_lr nan" "--min_lr nan: expected a non-negative number (cosine_with_min_lr's floor)"
trn ww --lr_scheduler_type linear --warmup_steps 20
expect_err "more warmup than steps" "--warmup_steps 20 is more than the run's 12 steps"
finish
