#!/bin/sh
# The HF Trainer's intervals: --logging_steps (default 500, never the config's steps_per_print,
# which is DeepSpeed's own print), --eval_steps (default: the logging interval), --save_steps,
# --logging_strategy, --eval_strategy, --save_strategy (steps, epoch, no), and --num_train_epochs
# with --max_steps winning when > 0. The steps logged, evaluated and saved
# are checked against the rule written out here in awk (log at step 1, every N, at every
# evaluation and at the last step; evaluate every E and at the last step; save every S and at
# the last step), the step count against ceil(epochs x sequences / batch).
. "${top_srcdir:-.}/tests/mpi/lib.sh"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add" --val_fraction 0.1
expect_ok "zinf data"
D="$TMP/add_train_*.bin" V="$TMP/add_val_*.bin"
printf '{"train_batch_size": 4, "steps_per_print": 3}\n' > "$TMP/spp.json"
trn() {
    local name=$1; shift
    run train --model test-mini --config "$TMP/spp.json" --data "$D" --max_length 32 --out "$TMP/$name" "$@"
}
# want N L E: the steps of a run of N steps that log (L: logging interval, E: eval interval or 0)
want() {
    awk -v n="$1" -v l="$2" -v e="$3" 'BEGIN { for (s = 1; s <= n; s++) {
        ev = e > 0 && (s % e == 0 || s == n)
        if (s == 1 || s % l == 0 || s == n || ev) printf "%d%s\n", s, ev ? " v" : "" } }'
}
got() { sed -n 's/^{"step": \([0-9]*\),.*/\1/p; ' "$1" | while read -r s; do
    if grep -q "^{\"step\": $s,.*\"val_loss\"" "$1"; then echo "$s v"; else echo "$s"; fi; done; }
same() {
    if [ "$2" = "$3" ]; then pass; else fail "$1: logged steps differ"; printf 'got:\n%s\nwant:\n%s\n' "$2" "$3" >&2; fi
}

trn iv --max_steps 12 --logging_steps 5 --eval_steps 4 --save_steps 6 --val "$V"
expect_ok "logging 5, eval 4, save 6"
same "logging 5, eval 4, save 6" "$(got "$TMP/iv/metrics.jsonl")" "$(want 12 5 4)"
saved=$(cd "$TMP/iv" && ls checkpoint-*.h5 | sed 's/checkpoint-\([0-9]*\).h5/\1/' | sort -n | tr '\n' ' ')
wsaved=$(awk 'BEGIN { for (s = 1; s <= 12; s++) if (s % 6 == 0 || s == 12) printf "%d ", s }')
[ "$saved" = "$wsaved" ] && pass || fail "save_steps 6: saved at '$saved', want '$wsaved'"

# the defaults: HF's 500 for logging and evaluation (not steps_per_print 3), one line saying so
trn dflt --max_steps 12 --val "$V" --save_steps 0
expect_ok "defaults"
same "defaults" "$(got "$TMP/dflt/metrics.jsonl")" "$(want 12 500 500)"
expect_has "defaults" "steps_per_print 3 sets DeepSpeed's own progress print; zinf logs every --logging_steps (500) steps"
# eval_steps follows --logging_steps when not given, as HF's eval_steps None
trn evl --max_steps 12 --logging_steps 3 --val "$V" --save_steps 0
expect_ok "eval follows logging"
same "eval follows logging" "$(got "$TMP/evl/metrics.jsonl")" "$(want 12 3 3)"

# --num_train_epochs: 40 sequences of 32 tokens (1281 random tokens), batch 4
run data --random 1281 --vocab 256 --out "$TMP/r" --seed 3
expect_ok "random data"
D="$TMP/r_train_*.bin"
for ep in 2 0.5 1.3; do
    trn "ep$ep" --num_train_epochs "$ep" --save_steps 0
    expect_ok "--num_train_epochs $ep"
    n=$(awk -v e="$ep" 'BEGIN { x = e * 40 / 4; n = int(x); if (n < x) n++; print n }')
    expect_has "--num_train_epochs $ep" "40 sequences of 32 tokens" "; $n steps;"
done
# --max_steps wins when > 0; -1 (HF's default) leaves the epochs to decide
trn msw --num_train_epochs 2 --max_steps 3 --save_steps 0
expect_has "max_steps over epochs" "; 3 steps;"
trn msn --num_train_epochs 2 --max_steps -1 --save_steps 0
expect_ok "--max_steps -1"
expect_has "--max_steps -1" "; 20 steps;"
trn l0 --max_steps 2 --logging_steps 0
expect_err "--logging_steps 0" "--logging_steps 0"

# HF's strategies: epoch logs, evaluates and saves where the data position (12 sequences a step)
# passes the end of an epoch (40 sequences), and at the last step; no does none of it (logging
# keeps the last step; saving only a signal's)
printf '{"train_batch_size": 12}\n' > "$TMP/b12.json"
st() {
    local name=$1; shift
    run train --model test-mini --config "$TMP/b12.json" --data "$D" --val "$V" --max_length 32 --max_steps 10 \
        --out "$TMP/$name" "$@"
}
# want_ep N L E: as want, with epoch ends for L and E = "epoch", none for "no"
want_ep() {
    awk -v n="$1" -v l="$2" -v e="$3" 'BEGIN { for (s = 1; s <= n; s++) {
        end = int(12 * s / 40) > int(12 * (s - 1) / 40)
        ev = e == "epoch" && (end || s == n)
        lg = s == n || (l == "epoch" && (s == 1 || end))
        if (lg || ev) printf "%d%s\n", s, ev ? " v" : "" } }'
}
st ep --logging_strategy epoch --eval_strategy epoch --save_strategy epoch
expect_ok "strategies epoch"
same "strategies epoch" "$(got "$TMP/ep/metrics.jsonl")" "$(want_ep 10 epoch epoch)"
saved=$(cd "$TMP/ep" && ls checkpoint-*.h5 | sed 's/checkpoint-\([0-9]*\).h5/\1/' | sort -n | tr '\n' ' ')
wsaved=$(awk 'BEGIN { for (s = 1; s <= 10; s++) if (int(12 * s / 40) > int(12 * (s - 1) / 40) || s == 10) printf "%d ", s }')
[ "$saved" = "$wsaved" ] && pass || fail "save_strategy epoch: saved at '$saved', want '$wsaved'"
st no --logging_strategy no --eval_strategy no --save_strategy no
expect_ok "strategies no"
same "strategies no" "$(got "$TMP/no/metrics.jsonl")" "$(want_ep 10 no no)"
[ -z "$(ls "$TMP/no" | grep 'checkpoint-')" ] && pass || fail "save_strategy no saved $(ls "$TMP/no" | grep checkpoint- | tr '\n' ' ')"
st al --eval_strategy steps --evaluation_strategy steps
expect_err "--evaluation_strategy with --eval_strategy" "--eval_strategy and --evaluation_strategy set the same thing"
st bs --save_strategy best
expect_err "--save_strategy best" "--save_strategy best: expected steps, epoch or no (best needs an evaluation metric"
finish
