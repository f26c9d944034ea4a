#!/bin/sh
# A step's gradients are not zeroed before the backward: each unit's first write of the step
# overwrites its products' weight and bias gradients (matmul_bwd with acc 0) and zeroes what it
# only adds to (the norms, the embedding's scatter), and the engine zeroes the padding
# (model.h's grad_fresh). ZINF_POISON_FRESH_GRADS (tests only) fills such a gradient with NaN
# first: a read of it before its first write makes the step's gradient norm NaN, which ends the
# run. Each run is held bit for bit to the same run without the poison (losses, gradient norms,
# the parameters' hash), for GPT-2 (tied), a Llama (untied head: its unit also holds the final
# norm), a Qwen3 (tied head, per-head q/k norms), a Qwen2 (q/k/v biases), at stage 0 on one rank,
# stage 1 on 2 ranks with gradient accumulation and the head in row chunks (its first chunk's
# weight gradient written into the context's buffer), and stage 3 on 2 ranks (gradients
# allocated per unit and micro-batch) with every block recomputed and the optimizer in host
# memory. That the default path gives the right gradients is test_llama_golden's and
# test_gpt2_golden's (against transformers).
. "${top_srcdir:-.}/tests/mpi/lib.sh"

run data --random 60000 --vocab 200 --out "$TMP/d"
expect_ok "zinf data"
printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}}, "zero_optimization": {"stage": 0}}\n' > "$TMP/s0.json"
printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}}, "zero_optimization": {"stage": 1}}\n' > "$TMP/s1.json"
printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}\n' > "$TMP/s3.json"
# trn MODEL CFG OUT NP [flags]: 4 steps
trn() {
    local model=$1 cfg=$2 out=$3 np=$4; shift 4
    mpi "$np" train --model "$model" --data "$TMP/d_train_*.bin" --max_length 32 --max_steps 4 --logging_steps 1 \
        --config "$TMP/$cfg.json" --out "$TMP/$out" --seed 3 --save_steps 0 "$@"
}
hash_of() { printf '%s\n' "$1" | sed -n 's/.*parameters agree bit for bit across [0-9]* ranks* (hash \([0-9a-f]*\)).*/\1/p'; }
G=${top_srcdir:-.}/tests/golden/llama
for model in test-tiny test-llama test-qwen3 "$G/qwen2"; do
    tag=$(basename "$model")
    for c in "s0 1" "s1 2" "s3 2"; do
        set -- $c
        cfg=$1 np=$2
        extra=""
        [ "$cfg" != s3 ] || extra=--gradient_checkpointing
        if [ "$cfg" = s1 ]; then ZINF_HEAD_ROWS=24 trn "$model" "$cfg" "$tag.$cfg.zero" "$np"; else trn "$model" "$cfg" "$tag.$cfg.zero" "$np" $extra; fi
        expect_ok "$tag $cfg"
        ref=$(hash_of "$OUTPUT")
        if [ "$cfg" = s1 ]; then
            ZINF_HEAD_ROWS=24 ZINF_POISON_FRESH_GRADS=1 trn "$model" "$cfg" "$tag.$cfg.nan" "$np"
            expect_has "$tag $cfg: the head in chunks" "the head computes its logits in"
        else
            ZINF_POISON_FRESH_GRADS=1 trn "$model" "$cfg" "$tag.$cfg.nan" "$np" $extra
        fi
        expect_ok "$tag $cfg, fresh gradients poisoned"
        got=$(hash_of "$OUTPUT")
        [ -n "$ref" ] && [ "$ref" = "$got" ] && pass || fail "$tag $cfg: parameters' hash $got with the poison, $ref without"
        for key in loss grad_norm; do
            a=$(metric "$TMP/$tag.$cfg.zero/metrics.jsonl" "$key" | tr -d ' ' | tr '\n' ' ')
            b=$(metric "$TMP/$tag.$cfg.nan/metrics.jsonl" "$key" | tr -d ' ' | tr '\n' ' ')
            [ "$(printf '%s' "$a" | wc -w)" -eq 4 ] && [ "$a" = "$b" ] && pass ||
                fail "$tag $cfg: $key $b with the poison, $a without"
        done
    done
done
finish
