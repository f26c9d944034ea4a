#!/bin/sh
# Training runs under mpirun: the first loss against the closed form ln(V), bit-identical reruns,
# world sizes and micro-batch splits that see the same global batch follow one trajectory,
# activation checkpointing (full, or keeping attention outputs) changes no bit, the LR schedule in
# metrics.jsonl follows DeepSpeed's formula, and bad data is one clear error.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

make_text "$TMP/add.txt" 4000
run data --input "$TMP/add.txt" --out "$TMP/add" --val_fraction 0.1
expect_ok "zinf data"
D="$TMP/add_train_*.bin"; VAL="$TMP/add_val_*.bin"
COMMON="--model test-mini --data $D --val $VAL --max_length 32 --max_steps 12 --learning_rate 3e-3 --logging_steps 1 --eval_steps 6 --seed 7"

train() { # train NP OUTDIR extra...
    local np=$1 out=$2; shift 2
    mpi "$np" train $COMMON --out "$TMP/$out" "$@"
}

train 1 a --per_device_train_batch_size 8 --gradient_accumulation_steps 1
expect_ok "1 rank, micro 8"
M="$TMP/a/metrics.jsonl"
[ "$(metric "$M" step | wc -l)" -eq 12 ] && pass || fail "metrics.jsonl: expected 12 logged steps"
for k in loss lr grad_norm tokens_per_s ms_per_step; do
    [ -n "$(metric "$M" $k | head -1)" ] && pass || fail "metrics.jsonl lacks $k"
done
[ "$(metric "$M" val_loss | wc -l)" -eq 2 ] && pass || fail "metrics.jsonl: expected val_loss at steps 6 and 12"
# initial weights are tiny (std 0.02), so the first loss is close to the uniform ln(256)
L1=$(metric "$M" loss | head -1)
close "$L1" 5.5452 0.01 && pass || fail "first loss $L1 is not ln(256)=5.5452 within 1%"
L12=$(metric "$M" loss | tail -1)
awk -v a="$L12" -v b="$L1" 'BEGIN { exit !(a < b - 1.0) }' && pass || fail "loss did not fall by 1 nat in 12 steps ($L1 -> $L12)"

train 1 b --per_device_train_batch_size 8
expect_ok "rerun"
if [ "$(metric "$TMP/a/metrics.jsonl" loss)" = "$(metric "$TMP/b/metrics.jsonl" loss)" ]; then pass
else fail "the same seed gave different losses"; fi

# the same global batch of 8, split four ways: the trajectories agree to fp32 summation order
for v in "2 c --per_device_train_batch_size 4" "4 d --per_device_train_batch_size 2" \
         "1 e --per_device_train_batch_size 4 --gradient_accumulation_steps 2" \
         "2 f --per_device_train_batch_size 2 --gradient_accumulation_steps 2"; do
    set -- $v
    np=$1; out=$2; shift 2
    train "$np" "$out" "$@"
    expect_ok "split $out ($np ranks $*)"
    paste -d' ' "$TMP/a/metrics.jsonl" "$TMP/$out/metrics.jsonl" > /dev/null
    metric "$TMP/a/metrics.jsonl" loss > "$TMP/la"; metric "$TMP/$out/metrics.jsonl" loss > "$TMP/lb"
    if paste "$TMP/la" "$TMP/lb" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 2e-4 * $1) bad = 1 } END { exit bad }'; then pass
    else fail "split $out: losses differ from 1 rank x 8 by more than 2e-4 relative"; paste "$TMP/la" "$TMP/lb" >&2; fi
done

# activation checkpointing recomputes exactly the same numbers
printf '{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,\n "activation_checkpointing": {"partition_activations": false}}\n' > "$TMP/ac.json"
train 1 g --config "$TMP/ac.json"
expect_ok "activation checkpointing"
if [ "$(metric "$TMP/a/metrics.jsonl" loss)" = "$(metric "$TMP/g/metrics.jsonl" loss)" ]; then pass
else fail "activation checkpointing changed the losses"; fi
ACT_FULL=$(printf '%s\n' "$OUTPUT" | sed -n 's/.*zinf: activations \([0-9.]*\) MiB.*/\1/p')
# keeping the attention outputs skips the recomputed attention and changes no bit either; it adds
# one attention output (N x C fp32) and one LSE row (N x heads fp32) for each layer but the first,
# whose set the recomputation shares: test-mini has L=2, C=64, 4 heads, N = 8 x 32 tokens
train 1 g2 --config "$TMP/ac.json" --ac_keep_attention
expect_ok "activation checkpointing, attention outputs kept"
expect_has "--ac_keep_attention banner" "activation checkpointing (attention outputs kept)"
if [ "$(metric "$TMP/a/metrics.jsonl" loss)" = "$(metric "$TMP/g2/metrics.jsonl" loss)" ]; then pass
else fail "activation checkpointing with attention outputs kept changed the losses"; fi
ACT_KEEP=$(printf '%s\n' "$OUTPUT" | sed -n 's/.*zinf: activations \([0-9.]*\) MiB.*/\1/p')
close "$(awk -v a="$ACT_KEEP" -v b="$ACT_FULL" 'BEGIN { print a - b }')" \
      "$(awk 'BEGIN { print (2 - 1) * (256 * 64 * 4 + 256 * 4 * 4) / 1048576 }')" 0.15 && pass ||
    fail "activations with attention kept ($ACT_KEEP MiB) - full recompute ($ACT_FULL MiB) is not one layer's output and LSE"
train 1 g3 --per_device_train_batch_size 8 --ac_keep_attention
expect_err "--ac_keep_attention without activation checkpointing" \
    "--ac_keep_attention: neither an activation_checkpointing block nor --gradient_checkpointing"
# the HF/ms-swift flag asks for the same recomputation without a config block
train 1 g4 --per_device_train_batch_size 8 --gradient_checkpointing true --ac_keep_attention
expect_ok "--gradient_checkpointing true"
expect_has "--gradient_checkpointing banner" "activation checkpointing (attention outputs kept)"
if [ "$(metric "$TMP/a/metrics.jsonl" loss)" = "$(metric "$TMP/g4/metrics.jsonl" loss)" ]; then pass
else fail "--gradient_checkpointing changed the losses"; fi
train 1 g5 --config "$TMP/ac.json" --gradient_checkpointing false
expect_err "--gradient_checkpointing false with an activation_checkpointing block" \
    "--gradient_checkpointing false: the config's activation_checkpointing block asks for recomputation"

# zinf_recompute_blocks: recomputing only the first K of 4 blocks changes no bit either, and the
# activations shrink by one block's stored set for each block recomputed beyond the first (the
# recomputed blocks share one set): test-mini's width (C=64, 4 heads) with 4 layers, N = 8 x 32
printf '{"n_layer": 4, "n_embd": 64, "n_head": 4, "vocab_size": 256, "n_positions": 32}\n' > "$TMP/m4.json"
M4="--model $TMP/m4.json --data $D --max_length 32 --max_steps 4 --learning_rate 3e-3 --logging_steps 1 --seed 7 --per_device_train_batch_size 8"
# shellcheck disable=SC2086
mpi 1 train $M4 --out "$TMP/rb"
expect_ok "4 layers, no recompute"
act_of() { grep '"mem_act"' "$TMP/$1/metrics.jsonl" | tail -1 | sed 's/.*"mem_act": \([0-9]*\).*/\1/'; }
A0=$(act_of rb)
# one layer's stored set, every buffer rounded up to 256 bytes (the layout test_estimate_run.sh spells out)
SET=$(awk 'function r(x) { return int((x + 255) / 256) * 256 }
    BEGIN { N = 256; C = 64; NH = 4; print 4 * r(N * C * 4) + r(3 * N * C * 4) + 2 * r(4 * N * C * 4) + 4 * r(N * 4) + r(N * NH * 4) }')
for k in 0 1 2 3 4; do
    printf '{"train_micro_batch_size_per_gpu": 8, "activation_checkpointing": {"zinf_recompute_blocks": %d}}\n' "$k" > "$TMP/rb$k.json"
    # shellcheck disable=SC2086
    mpi 1 train $M4 --out "$TMP/rb$k" --config "$TMP/rb$k.json"
    expect_ok "zinf_recompute_blocks $k"
    [ "$(metric "$TMP/rb/metrics.jsonl" loss)" = "$(metric "$TMP/rb$k/metrics.jsonl" loss)" ] && pass ||
        fail "recomputing $k of 4 blocks changed the losses"
    saved=$(( k > 1 ? k - 1 : 0 ))
    [ "$(act_of "rb$k")" = $((A0 - saved * SET)) ] && pass ||
        fail "recomputing $k of 4 blocks: activations $(act_of "rb$k") bytes, want $A0 - $saved x $SET"
    [ "$k" -lt 4 ] && expect_has "partial recompute banner" "recomputing $k of 4 blocks"
    # zinf estimate reads the same count from the config and lays the activations out the same way
    run estimate --model "$TMP/m4.json" --config "$TMP/rb$k.json" --precision fp32 --print-bytes --micro-batch 8 --seq-len 32
    expect_ok "estimate, zinf_recompute_blocks $k"
    [ "$(printf '%s\n' "$OUTPUT" | sed -n 's/^act=\([0-9]*\) .*/\1/p')" = "$(act_of "rb$k")" ] && pass ||
        fail "estimate with zinf_recompute_blocks $k: $(printf '%s\n' "$OUTPUT" | grep '^act='), the run allocated $(act_of "rb$k")"
done
run estimate --model "$TMP/m4.json" --config "$TMP/rb4.json" --precision fp32 --micro-batch 8 --seq-len 32
expect_has "estimate: what a kept block costs" \
    "Each block that keeps its activations instead of being recomputed adds $(awk -v s="$SET" 'BEGIN { printf "%.2f", s / 1073741824 }') GiB"
printf '{"activation_checkpointing": {"zinf_recompute_blocks": 5}}\n' > "$TMP/rb5.json"
# shellcheck disable=SC2086
mpi 1 train $M4 --out "$TMP/rb5" --config "$TMP/rb5.json"
expect_err "more blocks than the model has" "activation_checkpointing.zinf_recompute_blocks 5: the model has 4 blocks"
for v in -3 1.5 '"many"'; do
    printf '{"activation_checkpointing": {"zinf_recompute_blocks": %s}}\n' "$v" > "$TMP/rbn.json"
    run config show "$TMP/rbn.json"
    expect_err "zinf_recompute_blocks $v" "activation_checkpointing.zinf_recompute_blocks: expected a non-negative integer, got $v"
done
# "auto" fits the device memory; the CPU backend has none to fit, so nothing is recomputed
printf '{"train_micro_batch_size_per_gpu": 8, "activation_checkpointing": {"zinf_recompute_blocks": "auto"}}\n' > "$TMP/rba.json"
run config show "$TMP/rba.json"
expect_has "auto in the resolved config" '"zinf_recompute_blocks": "auto"'
# shellcheck disable=SC2086
mpi 1 train $M4 --out "$TMP/rba" --config "$TMP/rba.json"
expect_ok "zinf_recompute_blocks auto on the CPU"
expect_has "auto on the CPU" 'zinf_recompute_blocks "auto" on the cpu backend, which has no device memory to fit: no block is recomputed'
[ "$(act_of rba)" = "$A0" ] && pass || fail "auto on the CPU: activations $(act_of rba), want $A0 (nothing recomputed)"

# WarmupLR, linear (DeepSpeed): the constructor sets warmup_min_lr for update 0 and the scheduler
# steps after each update, so update k >= 1 runs at min + (max - min) * min(1, (k - 1) / warmup)
cat > "$TMP/sched.json" <<'JSON'
{ "train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0001, "warmup_max_lr": 0.002,
                "warmup_num_steps": 8, "warmup_type": "linear"}},
  "gradient_clipping": 1.0, "wall_clock_breakdown": true }
JSON
mpi 2 train --model test-mini --data "$D" --max_length 32 --max_steps 10 --logging_steps 1 --config "$TMP/sched.json" --out "$TMP/h"
expect_ok "WarmupLR run"
expect_has "wall_clock_breakdown" "time (ms): fwd"
# the backend's own timeline (here the CPU's clock at the same marks): on every logged step the
# forward, backward, reduction and optimizer parts add up to the step's time; at stage 3 with
# evaluation in between, the line also carries the waits for parameter gathers
printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 3},
  "wall_clock_breakdown": true}\n' > "$TMP/wcb.json"
mpi 2 train --model test-mini --data "$D" --val "$VAL" --max_length 32 --max_steps 6 --logging_steps 1 \
    --eval_steps 2 --config "$TMP/wcb.json" --out "$TMP/wcb"
expect_ok "wall_clock_breakdown at stage 3"
expect_has "device timeline" "device time (ms): fwd" "waiting for gathers"
printf '%s\n' "$OUTPUT" | grep "device time (ms)" | sed 's/.*): //' > "$TMP/wcb.parts"
metric "$TMP/wcb/metrics.jsonl" ms_per_step > "$TMP/wcb.ms"
if paste -d'|' "$TMP/wcb.parts" "$TMP/wcb.ms" | awk -F'|' '{ s = 0
        for (i = 1; i <= 4; i++) { v = $i; sub(/.*[a-z] /, "", v); s += v }
        ms = $NF; d = s - ms; if (d < 0) d = -d; if (d > 0.1 * ms + 0.5) bad = 1; n++ }
        END { exit bad || n != 6 }'; then pass
else fail "wall_clock_breakdown: the backend's parts do not add up to the step"; paste "$TMP/wcb.parts" "$TMP/wcb.ms" >&2; fi
k=0
for lr in $(metric "$TMP/h/metrics.jsonl" lr); do
    want=$(awk -v k=$k 'BEGIN { g = k == 0 ? 0 : (k - 1 < 8 ? (k - 1) / 8 : 1); printf "%.9g", 0.0001 + (0.002 - 0.0001) * g }')
    close "$lr" "$want" 1e-6 && pass || fail "lr of update $k: $lr, want $want"
    k=$((k + 1))
done
# clipping at 1.0: every logged grad_norm is the pre-clip norm, and the run still trains
[ "$k" -eq 10 ] && pass || fail "expected 10 logged lr values, got $k"

# fp16 dynamic loss scaling with DeepSpeed's DynamicLossScaler rules: from 2^127 with window 3 and
# hysteresis 1 the scale doubles after the 4th clean update (stable interval 3), the doubled scale
# 2^128 overflows fp32 at update 5, which is skipped and halves it; again 4 clean, 1 skipped.
# A skipped step does not step the scheduler, so update 6 runs at update 5's lr.
cat > "$TMP/ls.json" <<'JSON'
{ "train_batch_size": 8, "fp16": {"enabled": true, "initial_scale_power": 127, "hysteresis": 1,
  "loss_scale_window": 3}, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.001,
  "warmup_num_steps": 4, "warmup_type": "linear"}} }
JSON
mpi 1 train --model test-mini --data "$D" --max_length 32 --max_steps 12 --logging_steps 1 --config "$TMP/ls.json" --out "$TMP/ls"
expect_ok "fp16 loss scaling"
expect_has "overflow is logged" "step 5: gradient overflow, step skipped; loss scale now 1.70141e+38"
[ "$(metric "$TMP/ls/metrics.jsonl" skipped | tr '\n' ' ')" = "false false false false true false false false false true false false " ] \
    && pass || fail "skipped steps: $(metric "$TMP/ls/metrics.jsonl" skipped | tr '\n' ' ')"
S=$(metric "$TMP/ls/metrics.jsonl" loss_scale | tr '\n' ' ')
set -- $S
close "$4" 3.4028236692093846e+38 1e-12 && close "$5" 1.7014118346046923e+38 1e-12 && pass || fail "loss scales: $S"
LR=$(metric "$TMP/ls/metrics.jsonl" lr | tr '\n' ' ')
set -- $LR
[ "$5" = "$6" ] && pass || fail "the scheduler stepped on a skipped step: lr $LR"
grep -q '"grad_norm": null' "$TMP/ls/metrics.jsonl" && pass || fail "an overflowed norm is not null in metrics.jsonl"

# --- failures: one clear line, from one rank -----------------------------------------------
mpi 2 train --model test-mini --data "$TMP/nothing_*.bin" --max_steps 1 --out "$TMP/x"
expect_err "no data files" "no files match"
[ "$(count_lines 'zinf: error')" -eq 1 ] && pass || fail "no data files: expected one error line, got $(count_lines 'zinf: error')"

printf 'not a shard at all, just text that is long enough to look like a header..............' > "$TMP/bad.bin"
head -c 2048 /dev/zero >> "$TMP/bad.bin"
mpi 2 train --model test-mini --data "$TMP/bad.bin" --max_steps 1 --out "$TMP/x"
expect_err "wrong magic" "bad.bin" "magic"

cp "$TMP"/add_train_000000.bin "$TMP/trunc.bin"
truncate -s 3000 "$TMP/trunc.bin"
mpi 1 train --model test-mini --data "$TMP/trunc.bin" --max_steps 1 --out "$TMP/x"
expect_err "truncated shard" "trunc.bin" "truncated"

# a model with a 64-token vocabulary cannot read byte tokens like '+' (43) and digits (48..57)
printf '{"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 50, "n_positions": 32}\n' > "$TMP/small-vocab.json"
mpi 1 train --model "$TMP/small-vocab.json" --data "$D" --max_steps 1 --out "$TMP/x"
expect_err "token >= vocab" ">= vocab size 50"

mpi 1 train --model test-mini --data "$D" --max_length 65 --max_steps 1 --out "$TMP/x"
expect_err "sequence too long" "--max_length 65" "n_positions 64"

printf '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}\n' > "$TMP/b32.json"
mpi 3 train --model test-mini --data "$D" --config "$TMP/b32.json" --max_steps 1 --out "$TMP/x"
expect_err "batch rule at world 3" "train_batch_size 32" "world size 3"
[ "$(count_lines 'zinf: error')" -eq 1 ] && pass || fail "batch rule: expected one error line"

# the hostfile launcher runs as many ranks as the slots add up to
printf '# two ranks here\nlocalhost slots=2\n' > "$TMP/hosts"
OUTPUT=$(ZINF="$ZINF" sh "${top_srcdir:-.}/jobs/mpirun/train.sh" "$TMP/hosts" --model test-mini --data "$D" --max_length 32 \
    --max_steps 1 --out "$TMP/hf" 2>&1); RC=$?
expect_ok "hostfile launcher"
expect_has "hostfile launcher" "on 2 ranks"
printf 'localhost slots=two\n' > "$TMP/badhosts"
OUTPUT=$(ZINF="$ZINF" sh "${top_srcdir:-.}/jobs/mpirun/train.sh" "$TMP/badhosts" --data "$D" 2>&1); RC=$?
expect_err "hostfile with bad slots" "badhosts:1: host localhost: slots=two: expected a whole number from 1 to 4096"

# --per_rank_logs: every rank writes its own log
mpi 2 train --model test-mini --data "$D" --max_length 32 --max_steps 1 --out "$TMP/pr" --per_rank_logs
expect_ok "per-rank logs"
[ -s "$TMP/pr/logs/rank0.log" ] && [ -f "$TMP/pr/logs/rank1.log" ] && pass || fail "per-rank logs: rank0.log/rank1.log missing"

mpi 1 train --model test-mini --data "$D" --device cuda --max_steps 1 --out "$TMP/x"
expect_err "--device cuda without CUDA" "--device cuda"

# bf16.check_grad_overflow (DeepSpeed's default true): a step whose gradient norm is not finite is
# skipped and the run goes on; false makes it an error. An absurd lr breaks the weights at step 1.
printf '{"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e30}}}\n' > "$TMP/bo.json"
mpi 1 train --model test-mini --data "$D" --max_length 32 --max_steps 3 --logging_steps 1 --config "$TMP/bo.json" --out "$TMP/bo"
expect_ok "bf16 overflow skipped"
expect_has "bf16 overflow skipped" "step 2: gradient overflow, step skipped (bf16.check_grad_overflow)"
[ "$(metric "$TMP/bo/metrics.jsonl" skipped | tr '\n' ' ')" = "false true true " ] && pass || fail "bf16 overflow: skipped flags $(metric "$TMP/bo/metrics.jsonl" skipped | tr '\n' ' ')"
# the metrics stay JSON: no NaN where the loss overflowed
[ "$(metric "$TMP/bo/metrics.jsonl" loss | sed -n 2p)" = "null" ] && ! grep -qi nan "$TMP/bo/metrics.jsonl" && pass || fail "metrics.jsonl holds a NaN: $(sed -n 2p "$TMP/bo/metrics.jsonl")"
printf '{"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true, "check_grad_overflow": false}, "optimizer": {"type": "AdamW", "params": {"lr": 1e30}}}\n' > "$TMP/bo2.json"
mpi 1 train --model test-mini --data "$D" --max_length 32 --max_steps 3 --config "$TMP/bo2.json" --out "$TMP/bo2"
expect_err "bf16 overflow without check_grad_overflow" "step 2: the gradient norm is not finite" "check_grad_overflow is false"
# on several ranks every rank sees the same norm: the ranks agree and the job says it once
printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e30}}}\n' > "$TMP/nf.json"
mpi 2 train --model test-mini --data "$D" --max_length 32 --max_steps 3 --config "$TMP/nf.json" --out "$TMP/nf"
expect_err "a non-finite norm on 2 ranks" "step 2: the gradient norm is not finite"
[ "$(count_lines 'zinf: error')" -eq 1 ] && pass || fail "a non-finite norm on 2 ranks: $(count_lines 'zinf: error') error lines, want 1"

# --eval_prompts is checked line by line before the first step (with --save_steps 0 an error after
# training lost the model), said once on 2 ranks, and an empty prompt is called empty
pq() { # pq NAME TEXT MESSAGE: a prompts file of TEXT fails with MESSAGE before any step
    printf "$2" > "$TMP/$1.tsv"
    mpi 2 train --model test-mini --data "$D" --max_length 32 --max_steps 2 --logging_steps 1 --save_steps 0 \
        --eval_prompts "$TMP/$1.tsv" --out "$TMP/$1"
    [ "$RC" -ne 0 ] && [ "$(count_lines 'zinf: error: ')" -eq 1 ] &&
        [ "$(count_lines "zinf: error: $TMP/$1.tsv:$3")" -eq 1 ] && pass ||
        fail "--eval_prompts $1: exit $RC, want one line '$TMP/$1.tsv:$3'; output: $(printf '%s\n' "$OUTPUT" | grep -v '^ *$' | head -5)"
    [ "$(count_lines 'step ')" -eq 0 ] && [ ! -e "$TMP/$1/metrics.jsonl" ] && pass || fail "--eval_prompts $1: training ran"
}
pq pempty '1+2\t3\n\n\t5\n' '3: the prompt is empty (nothing before the tab)'
pq plong '12345678901234567890\t5\n' '1: the prompt'"'"'s 20 bytes and --max_new_tokens 16 exceed the sequence length 32'
pq ptab '1+2=3\n' '1: expected "prompt<TAB>answer"'
pq panswer "1+1\\t$(printf '%0300d' 0)\\n" '1: the answer is longer than 254 bytes'
# a good file still runs after training, once
printf '1+2=\t3\n2+2=\t4\n' > "$TMP/pgood.tsv"
mpi 2 train --model test-mini --data "$D" --max_length 32 --max_steps 2 --save_steps 0 --eval_prompts "$TMP/pgood.tsv" \
    --out "$TMP/pgood"
expect_ok "--eval_prompts, a good file"
[ "$(count_lines 'held-out prompts: ')" -eq 1 ] && [ "$(count_lines '/2 exact')" -eq 1 ] && pass || fail "--eval_prompts: no single 'held-out prompts: N/2 exact' line"

finish
