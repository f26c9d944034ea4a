#!/bin/sh
# flops_profiler.detailed: the profile step's operations, each timed between events. Its counts
# are held to the architecture, not to zinf: over G micro-batches of B x T tokens, every RMSNorm
# of HF's Llama (two a layer and the final one; Qwen3 adds its q and k norms, one call each per
# layer) and one attention a layer, forward and backward; the products' FLOPs, 2 tokens (the
# linear layers' parameters + the head's V C) forward and twice that backward (closed forms from
# config.json); causal attention 2 B NH T^2 hs a call forward, 2.5 times that backward. The
# operations' time fits in the step's, and the report is there only where asked for.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

run data --random 40000 --vocab 256 --out "$TMP/r"
expect_ok "zinf data --random"
D="$TMP/r_train_*.bin"
T=32

# llama_json FILE TYPE L C F NH NKV HS V TIED
llama_json() {
    printf '{"model_type": "%s", "num_hidden_layers": %d, "hidden_size": %d, "intermediate_size": %d,
  "num_attention_heads": %d, "num_key_value_heads": %d, "head_dim": %d, "vocab_size": %d,
  "tie_word_embeddings": %s, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 64}\n' \
        "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" "${10}" > "$1"
}
# ds_json FILE STAGE MICRO GAS DETAILED
ds_json() {
    printf '{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": %d,
 "zero_optimization": {"stage": %d}, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
 "flops_profiler": {"enabled": true, "profile_step": 2, "detailed": %s}}\n' "$3" "$4" "$2" "$5" > "$1"
}
# op NAME FIELD: the profile line of NAME: calls, flops or ms ("" when it did not run)
op() {
    printf '%s\n' "$OUTPUT" | awk -v n="$1" -v f="$2" '$1 == "op" && $2 == n {
        for (i = 3; i <= NF; i++) { if ($(i + 1) == "calls") c = $i; if ($(i + 1) == "FLOPs,") fl = $i }
        if (f == "calls") print c; else if (f == "flops") print (fl == "" ? 0 : fl); else print $3 }'
}
eq() { # eq WHAT GOT WANT
    if [ "$2" = "$3" ]; then pass; else fail "$1: $2, expected $3"; fi
}

# check NAME TYPE L C F NH NKV HS V TIED NP STAGE MICRO GAS
check() {
    local name=$1 type=$2 L=$3 C=$4 F=$5 NH=$6 NKV=$7 HS=$8 V=$9 tied=${10} np=${11} st=${12} B=${13} G=${14}
    llama_json "$TMP/$name.model.json" "$type" "$L" "$C" "$F" "$NH" "$NKV" "$HS" "$V" "$tied"
    ds_json "$TMP/$name.ds.json" "$st" "$B" "$G" true
    mpi "$np" train --model "$TMP/$name.model.json" --data "$D" --max_length $T --max_steps 2 --logging_steps 1 \
        --config "$TMP/$name.ds.json" --out "$TMP/$name" --seed 5
    expect_ok "$name: train"
    [ "$RC" -eq 0 ] || return
    expect_has "$name: the report" "flops profiler: the step's operations on rank 0 (cpu backend"
    # per rank: G micro-batches of B x T tokens
    local tok=$((G * B * T)) lin norms
    lin=$((L * (C * (NH + 2 * NKV) * HS + NH * HS * C + 3 * C * F) + V * C))
    norms=$(((2 * L + 1) * G))
    [ "$type" = qwen3 ] && norms=$((norms + 2 * L * G))
    eq "$name: attention_fwd calls" "$(op attention_fwd calls)" $((L * G))
    eq "$name: attention_bwd calls" "$(op attention_bwd calls)" $((L * G))
    eq "$name: rmsnorm_fwd calls" "$(op rmsnorm_fwd calls)" "$norms"
    eq "$name: rmsnorm_bwd calls" "$(op rmsnorm_bwd calls)" "$norms"
    eq "$name: forward products' FLOPs" $(($(op matmul_fwd flops) + $(op matmul_fwd_res flops))) $((2 * tok * lin))
    eq "$name: backward products' FLOPs" "$(op matmul_bwd flops)" $((4 * tok * lin))
    eq "$name: attention_fwd FLOPs" "$(op attention_fwd flops)" $((L * G * 2 * B * NH * T * T * HS))
    eq "$name: attention_bwd FLOPs" "$(op attention_bwd flops)" $((L * G * 5 * B * NH * T * T * HS))
    # the operations' time within the step's
    printf '%s\n' "$OUTPUT" | awk '/^  operations / { ops = $2; step = $7; found = 1 }
        END { exit !(found && ops > 0 && ops <= step) }' && pass || fail "$name: operations' time not within the step's"
}
check llama llama 2 64 128 4 2 16 256 false 1 0 2 4
check qwen3 qwen3 2 64 160 4 2 32 256 true 1 0 2 4
# ZeRO-3 at 2 ranks: each rank runs its own micro-batches (4 a step in all, 2 a rank)
check llama-z3 llama 3 64 128 4 4 16 256 false 2 3 2 2

# detailed false: the FLOPs line alone
ds_json "$TMP/nodet.json" 0 2 2 false
mpi 1 train --model "$TMP/llama.model.json" --data "$D" --max_length $T --max_steps 2 --config "$TMP/nodet.json" \
    --out "$TMP/nodet"
expect_ok "detailed false: train"
expect_has "detailed false: the FLOPs line" "flops profiler: step 2:"
eq "detailed false: operation lines" "$(count_lines "  op ")" 0

# output_file: the report goes there (rank 0's), not to the log; one that cannot be opened leaves
# it in the log with a warning naming the file
printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
 "flops_profiler": {"enabled": true, "profile_step": 1, "output_file": "%s"}}\n' "$TMP/prof.txt" > "$TMP/file.json"
mpi 2 train --model "$TMP/llama.model.json" --data "$D" --max_length $T --max_steps 1 --config "$TMP/file.json" --out "$TMP/file"
expect_ok "output_file: train"
expect_has "output_file: said where" "flops profiler: step 1's report written to $TMP/prof.txt"
eq "output_file: operation lines in the log" "$(count_lines "  op ")" 0
eq "output_file: attention_fwd calls in the file" "$(awk '$1 == "op" && $2 == "attention_fwd" { print $6 }' "$TMP/prof.txt")" 4
grep -q "^flops profiler: step 1: " "$TMP/prof.txt" && pass || fail "output_file: no FLOPs line in the file"
printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
 "flops_profiler": {"enabled": true, "profile_step": 1, "output_file": "%s/no/such/dir/p.txt", "module_depth": 2, "top_modules": 3}}\n' "$TMP" > "$TMP/nodir.json"
mpi 1 train --model "$TMP/llama.model.json" --data "$D" --max_length $T --max_steps 1 --config "$TMP/nodir.json" --out "$TMP/nodir"
expect_ok "output_file in no directory: train"
expect_has "output_file in no directory: the warning" "flops_profiler.output_file $TMP/no/such/dir/p.txt: No such file or directory; the report goes to the log"
eq "output_file in no directory: attention_fwd calls in the log" "$(op attention_fwd calls)" 4
expect_has "module_depth and top_modules: warnings" "flops_profiler.module_depth has no effect" "flops_profiler.top_modules has no effect"
finish
