#!/bin/sh
# The head in row chunks. ZINF_HEAD_ROWS (for tests) caps a chunk's rows, as ZINF_LOGITS_BUDGET does
# at real shapes (a 128k vocabulary at 16k tokens a micro-batch), which tiny models never reach. A
# training forward then runs each chunk's head backward but the last's (the input gradient's rows,
# and the weight's into a buffer of the context), and the backward runs the last one's and adds
# the buffer. Held to the same run with the head whole (itself held to transformers' logits and
# gradients by test_llama_golden), on 2 ranks, for a tiny Llama (untied head) and a tiny Qwen3
# (tied: the head's weight gradient meets the embedding's), with 64 rows a micro-batch in chunks
# of 24, 24 and 16: stage 0 with gradient accumulation 2 and an evaluation every 2 steps (whose
# forwards run no backward), stage 3 recomputing every block, and stage 3 with the optimizer in
# host memory, where a step's micro-batches run their forwards together, each in its own context
# with its own chunks' weight gradient. Losses and gradient norms within 1e-5.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

make_text "$TMP/t.txt" 3000
run data --input "$TMP/t.txt" --out "$TMP/d" --val_fraction 0.1
expect_ok "zinf data"
# cfg NAME STAGE EXTRA: micro-batch 2 x gradient accumulation 2 x 2 ranks, AdamW with decay, clipping
cfg() {
    printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "zero_optimization": {"stage": %d %s}}\n' "$2" "$3" > "$TMP/$1.json"
}
cfg s0 0 ""
cfg s3 3 ""
cfg off 3 ', "offload_optimizer": {"device": "cpu"}'
# trn MODEL NAME OUT [flags]: 6 steps
trn() {
    local model=$1 name=$2 out=$3; shift 3
    mpi 2 train --model "$model" --data "$TMP/d_train_*.bin" --max_length 32 --max_steps 6 --logging_steps 1 \
        --config "$TMP/$name.json" --out "$TMP/$out" --seed 5 --save_steps 0 "$@"
}
# same A B WHAT: every logged loss, gradient norm and evaluation loss of runs A and B within 1e-5
same() {
    local ok=1 n=0 losses
    losses=$(metric "$TMP/$2/metrics.jsonl" loss | tr -d ' ' | tr '\n' ' ')
    for key in loss grad_norm val_loss; do
        metric "$TMP/$1/metrics.jsonl" "$key" | tr -d ' ' | grep -v '^$' > "$TMP/a.txt"
        metric "$TMP/$2/metrics.jsonl" "$key" | tr -d ' ' | grep -v '^$' > "$TMP/b.txt"
        [ "$(wc -l < "$TMP/a.txt")" -eq "$(wc -l < "$TMP/b.txt")" ] || ok=0
        while read -r a && read -r b <&3; do
            n=$((n + 1))
            close "$a" "$b" 1e-5 || ok=0
        done < "$TMP/a.txt" 3< "$TMP/b.txt"
    done
    [ "$ok" -eq 1 ] && [ "$n" -ge 12 ] && pass || fail "$3: $1 against $2 ($n values; the chunks' losses $losses)"
}
chunks="the head computes its logits in 3 chunks of at most 24 rows"
for model in test-llama test-qwen3; do
    for c in "s0 --val $TMP/d_val_*.bin --eval_steps 2" "s3 --gradient_checkpointing" "off"; do
        set -- $c
        name=$1; shift
        trn "$model" "$name" "$model.$name.whole" "$@"
        expect_ok "$model $name, the head whole"
        case "$OUTPUT" in *"the head computes its logits in"*) fail "$model $name: chunks without ZINF_HEAD_ROWS" ;; *) pass ;; esac
        ZINF_HEAD_ROWS=24 trn "$model" "$name" "$model.$name.chunks" "$@"
        expect_ok "$model $name, the head in chunks"
        expect_has "$model $name, the head in chunks" "$chunks"
        [ "$name" != off ] || expect_has "$model: the forwards together" "the forwards of 2 micro-batches of each step run together"
        [ "$name" != s0 ] || [ "$(metric "$TMP/$model.$name.chunks/metrics.jsonl" val_loss | grep -c .)" -ge 3 ] && pass ||
            fail "$model $name: no evaluations"
        same "$model.$name.whole" "$model.$name.chunks" "$model $name"
    done
done
# what ZINF_HEAD_ROWS refuses, before anything runs: one line naming it
for v in 0 -3 abc 12x; do
    ZINF_HEAD_ROWS=$v trn test-llama s0 "bad"
    expect_err "ZINF_HEAD_ROWS=$v" "zinf: error: ZINF_HEAD_ROWS=$v: expected the head's rows a chunk, an integer >= 1"
    [ "$(count_lines "ZINF_HEAD_ROWS=$v")" -eq 1 ] && pass || fail "ZINF_HEAD_ROWS=$v said $(count_lines "ZINF_HEAD_ROWS=$v") times"
done
finish
