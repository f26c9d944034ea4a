#!/bin/sh
# config.json values zinf does not implement are refused by name, never trained as another model:
# every accepted published config (tests/fixtures/hf_configs/accept, and GPT-2's published
# config.json with its dropout set to 0) still loads; each field below, set in a published file
# to a value that changes the model under transformers, is one line naming the field and value.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
command -v python3 >/dev/null || { echo "python3 is needed to edit the JSON files"; exit 77; }
A="$FIXTURES/hf_configs/accept"
# edit SRC OUT PYTHON: OUT is SRC's JSON with the python statement applied to d; the fixtures leave
# out max_position_embeddings (README there), which zinf needs: 4096 where absent
edit() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d.setdefault('max_position_embeddings', 4096); $3; json.dump(d, open(sys.argv[2], 'w'))" "$1" "$2"; }
for f in "$A"/*.json; do
    edit "$f" "$TMP/a.json" "pass"
    run estimate --model "$TMP/a.json" --stage 3
    expect_ok "accept $(basename "$f")"
done
for f in "$FIXTURES"/hf_configs/refuse/*.json; do
    # a sliding window is refused by train, where --max_length is known (test_llama.sh)
    case $f in *sliding_window*) continue ;; esac
    edit "$f" "$TMP/r.json" "pass"
    run estimate --model "$TMP/r.json" --stage 3
    CHECKS=$((CHECKS + 1)); [ "$RC" -ne 0 ] || fail "refuse $(basename "$f"): accepted"
done
refused() { # SRC PYTHON TEXT
    edit "$A/$1" "$TMP/e.json" "$2"
    run estimate --model "$TMP/e.json" --stage 3
    expect_err "$1 with $2" "$TMP/e.json: $3"
}
# an integer out of range says the range (2e9 was "must be a non-negative integer")
refused Qwen2.5-7B.json "d['max_position_embeddings'] = 2000000000" '"max_position_embeddings" must be an integer from 0 to 2^30 (1073741824)'
refused Qwen2.5-7B.json "d['num_hidden_layers'] = -1" '"num_hidden_layers" must be an integer from 0 to 2^30 (1073741824)'
refused Llama-3.1-8B.json "d['pretraining_tp'] = 2" "pretraining_tp 2: zinf computes each projection whole"
refused Llama-3.1-8B.json "d['hidden_act'] = 'gelu'" "hidden_act gelu"
refused Llama-3.1-8B.json "d['attention_dropout'] = 0.1" "attention_dropout 0.1: zinf trains without dropout"
refused Qwen3-8B.json "d['quantization_config'] = {'quant_method': 'awq', 'bits': 4}" "quantization_config (awq): zinf trains unquantized weights"
refused Qwen2.5-0.5B.v5.json "d['layer_types'][1] = 'sliding_attention'" "layer_types[1] sliding_attention"
refused Qwen2.5-0.5B.json "d['head_dim'] = 128" "head_dim 128: zinf's qwen2 heads are hidden_size / num_attention_heads = 64 wide"
refused Qwen3-0.6B.v5.json "d['rope_parameters']['partial_rotary_factor'] = 0.5" "partial_rotary_factor 0.5"
refused Llama-3.1-8B.json "d['rope_scaling']['rope_type'] = 'longrope'" "rope_scaling.rope_type \"longrope\""
# a key the RoPE block's type does not read (transformers warns of it and reads it no more than zinf)
refused Llama-3.1-8B.json "d['rope_scaling']['beta_fast'] = 32" "rope_scaling.beta_fast: not a key of llama3 RoPE"
refused Qwen3-0.6B.v5.json "d['rope_parameters']['factor'] = 2.0" "rope_parameters.factor: not a key of default RoPE"
refused Llama-3.1-8B.json "d['rope_scaling'] = {'type': 'linear', 'factor': 2.0, 'low_freq_factor': 1.0}" \
    "rope_scaling.low_freq_factor: not a key of linear RoPE"
# pretraining_tp 1, as Llama-2's files write it, is the whole projection
edit "$A/Llama-3.1-8B.json" "$TMP/tp1.json" "d['pretraining_tp'] = 1"
run estimate --model "$TMP/tp1.json" --stage 3
expect_ok "pretraining_tp 1"

# GPT-2's published config.json (openai-community/gpt2): dropout 0.1 everywhere
cat > "$TMP/gpt2.json" <<'J'
{"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
 "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
 "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
 "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": null,
 "summary_first_dropout": 0.1, "summary_proj_to_labels": true, "summary_type": "cls_index",
 "summary_use_proj": true, "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
 "vocab_size": 50257}
J
run estimate --model "$TMP/gpt2.json" --stage 3
expect_err "published gpt2 config" "$TMP/gpt2.json: resid_pdrop 0.1: zinf trains without dropout"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d.update(resid_pdrop=0, embd_pdrop=0.0, attn_pdrop=0); json.dump(d, open(sys.argv[1], 'w'))" "$TMP/gpt2.json"
run estimate --model "$TMP/gpt2.json" --stage 3
expect_ok "gpt2 config without dropout"
# GPT-2 small's parameters with the vocabulary padded to 64: V*C + P*C + L*(12C^2 + 13C) + 2C
psi=$(awk 'BEGIN { C = 768; V = 50304; printf "%d", V * C + 1024 * C + 12 * (12 * C * C + 13 * C) + 2 * C }')
expect_has "gpt2 config without dropout" "Psi = $psi"
finish
