#!/bin/sh
# `zinf estimate --precision fp32 --print-bytes` against the bytes a run measures: test-mini, one
# step at ZeRO stages 0-3 on 1, 2 and 3 ranks; every state category of the final memory record in
# metrics.jsonl (mem_param ... mem_comm) must equal the estimate to the byte, padding included.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
D="$TMP/add_train_*.bin"

KEYS="param param_shard grad grad_acc master adam comm"

for st in 0 1 2 3; do
    for np in 1 2 3; do
        name="s${st}w${np}"
        printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": %d,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
 "zero_optimization": {"stage": %d}}\n' $((12 / np)) "$st" > "$TMP/$name.json"
        mpi "$np" train --model test-mini --data "$D" --max_length 32 --max_steps 1 \
            --config "$TMP/$name.json" --out "$TMP/$name" --seed 3
        expect_ok "$name: train"
        [ "$RC" -eq 0 ] || continue
        M="$TMP/$name/metrics.jsonl"
        # the memory record is the last line carrying mem_param
        grep '"mem_param"' "$M" | tail -1 > "$TMP/$name.mem"
        if [ ! -s "$TMP/$name.mem" ]; then fail "$name: no memory record in metrics.jsonl"; continue; fi

        run estimate --model test-mini --precision fp32 --nodes 1 --gpus-per-node "$np" \
            --stage "$st" --print-bytes
        expect_ok "$name: estimate"
        [ "$RC" -eq 0 ] || continue
        EST=$OUTPUT
        [ "$(printf '%s\n' "$EST" | wc -l)" -eq 1 ] && pass || fail "$name: --print-bytes printed more than one line: $EST"

        for k in $KEYS; do
            got=$(metric "$TMP/$name.mem" "mem_$k")
            want=$(printf '%s\n' "$EST" | tr ' ' '\n' | sed -n "s/^$k=\([0-9]*\)\$/\1/p")
            if [ -z "$got" ] || [ -z "$want" ]; then
                fail "$name: $k missing (run '$got', estimate '$want')"
            elif [ "$got" -eq "$want" ]; then
                pass
            else
                fail "stage $st world $np: mem_$k measured $got bytes, estimate $want"
            fi
        done
        # the estimate's total is the sum of the categories, and nothing is left at rest in comm
        total=$(printf '%s\n' "$EST" | tr ' ' '\n' | sed -n 's/^total=\([0-9]*\)$/\1/p')
        sum=0
        for k in $KEYS; do sum=$((sum + $(metric "$TMP/$name.mem" "mem_$k"))); done
        [ "$total" = "$sum" ] && pass || fail "$name: estimate total $total != measured sum $sum"
    done
done

# the mixed-precision default is untouched by --precision: stage 0 world 1 is 2+2+12 bytes each
run estimate --model test-mini --stage 0 --print-bytes
expect_ok "mixed estimate"
P=$(metric "$TMP/s0w1.mem" mem_param)   # 4 bytes x Psi
case "$OUTPUT" in
    *"param=$((P / 2)) "*"grad=$((P / 2)) "*"master=$P adam=$((2 * P)) "*) pass ;;
    *) fail "mixed stage 0: expected 2Psi/2Psi/4Psi/8Psi with Psi = $((P / 4)): $OUTPUT" ;;
esac
# bad values are refused
run estimate --model test-mini --precision fp16
expect_err "--precision fp16" "--precision fp16"
run estimate --model test-mini --stage 4
expect_err "--stage 4" "--stage 4"

finish
