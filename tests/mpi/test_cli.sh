#!/bin/sh
# The command line: help and version, every flag listed, unknown flags with a suggestion, bad
# values named, `zinf data` errors, and `config show` resolving with the MPI world size.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

run --version;            expect_ok "--version"; expect_has "--version" "zinf "
run --help;               expect_ok "--help";    expect_has "--help" "train" "config show" "data"
# `zinf train --device cuda` runs OpenMP's idle threads passive unless the user chose a policy;
# the CPU backend keeps the runtime's default. libgomp's own report of its settings as it loads
# (OMP_DISPLAY_ENV=verbose; the last report is the one the command ran with) names the spin
# count, 0 when passive. --help answers before any backend starts, so no GPU is needed.
spin() { env OMP_DISPLAY_ENV=verbose "$@" 2>&1 | sed -n "s/.*GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p" | tail -1; }
if ldd "$ZINF" 2>/dev/null | grep -q libgomp; then
    for a in "--device cuda" "--device=cuda" "--device cpu --device cuda"; do
        # shellcheck disable=SC2086 # $a is words
        s=$(spin "$ZINF" train $a --help); [ "$s" = 0 ] && pass || fail "zinf train $a: libgomp's spin count '$s', expected 0 (passive)"
    done
    [ "$(OMP_DISPLAY_ENV=true "$ZINF" train --device cuda --help 2>&1 | grep -c 'OPENMP DISPLAY ENVIRONMENT BEGIN')" = 2 ] && pass ||
        fail "zinf train --device cuda: expected two libgomp reports (the first load, then the run with the policy set)"
    s=$(spin OMP_WAIT_POLICY=active "$ZINF" train --device cuda --help); [ "${s:-0}" -gt 0 ] && pass || fail "OMP_WAIT_POLICY=active: spin count '$s'"
    s=$(spin GOMP_SPINCOUNT=12345 "$ZINF" train --device cuda --help); [ "$s" = 12345 ] && pass || fail "GOMP_SPINCOUNT=12345: spin count '$s'"
    for a in "train --help" "train --device cuda --device cpu --help" "estimate --model gpt2"; do
        # shellcheck disable=SC2086 # $a is words
        s=$(spin "$ZINF" $a); [ "${s:-0}" -gt 0 ] && pass || fail "zinf $a: spin count '$s', expected the runtime's default"
    done
fi
run bogus;                expect_err "unknown command" "unknown command 'bogus'"
run train --help;         expect_ok "train --help"
for f in config model data val out seed device max_steps per_device_train_batch_size \
         gradient_accumulation_steps learning_rate weight_decay adam_beta1 adam_beta2 adam_epsilon \
         max_grad_norm warmup_steps warmup_ratio num_train_epochs max_length bf16 fp16 logging_steps \
         eval_steps save_steps output_dir; do
    expect_has "train --help lists --$f" "--$f"
    grep -q -- "--$f\b\|\\\\-\\\\-$f\b\|fB\\\\-\\\\-$f" "${top_srcdir:-.}/man/zinf-train.1" && pass || fail "man/zinf-train.1 lacks --$f"
    cat "${top_srcdir:-.}/README.md" "${top_srcdir:-.}"/docs/*.md | grep -q -- "--$f" && pass || fail "README.md and docs/*.md lack --$f"
done
run train --learning_rte 1e-3 --data x
expect_err "misspelt flag" "unknown flag --learning_rte" "did you mean --learning_rate"
run train --max_steps ten --data x
expect_err "non-integer flag" "--max_steps expects an integer, got 'ten'"
# integers are decimal text alone (strtoll and strtod also take blanks and hexadecimal); 1e2 stays
for v in 0x10 " 3" "3 " 0x1p4; do
    run train --max_steps "$v" --data x
    expect_err "--max_steps '$v'" "--max_steps expects an integer, got '$v'"
done
run generate --prompt_ids 1 --model test-mini --seed 0x10 --temperature 1
expect_err "--seed 0x10" "--seed expects a non-negative integer, got '0x10'"
run train --learning_rate fast --data x
expect_err "non-number flag" "--learning_rate expects a number"
run train --gradient_checkpointing=maybe --data x
expect_err "non-boolean flag" "--gradient_checkpointing expects true or false, got 'maybe'"
run train --ac_keep_attention sometimes --data x
expect_err "stray word after a boolean flag" "unexpected argument 'sometimes'"
run train --model
expect_err "flag without value" "--model needs a value"
run train --model no-such-model --data x
expect_err "unknown model" "no-such-model" "not a preset"
printf '{"model_type": "qwen3_moe", "n_layer": 2}' > "$TMP/moe.json"
run train --model "$TMP/moe.json" --data x
expect_err "unsupported model type" "model_type qwen3_moe is not supported (zinf has gpt2 llama qwen2 qwen3 mistral)"
# a GPT2Config whose values make another model than zinf's is refused by name, not trained as one
for kv in '"activation_function": "relu"|activation_function relu' '"n_inner": 128|n_inner 128' \
    '"tie_word_embeddings": false|tie_word_embeddings false' '"layer_norm_epsilon": 1e-6|layer_norm_epsilon 1e-06' \
    '"scale_attn_by_inverse_layer_idx": true|scale_attn_by_inverse_layer_idx true'; do
    printf '{"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "n_positions": 64, %s}\n' \
        "${kv%%|*}" > "$TMP/g2.json"
    run train --model "$TMP/g2.json" --data x
    expect_err "gpt2 config with ${kv%%|*}" "$TMP/g2.json: ${kv#*|}"
done
printf '{"model_type": "llama", "n_layer": 2}' > "$TMP/llama.json"
run train --model "$TMP/llama.json" --data x
expect_err "a llama config.json without its sizes" "$TMP/llama.json lacks \"num_hidden_layers\""

run data --input "$TMP/missing.txt" --out "$TMP/m"
expect_err "data: missing input" "missing.txt"
# --out's directory is checked before anything is read or written (it said "cannot create
# DIR/x_train_000000.bin.tmp: No such file or directory" once the input had been read)
run data --input "$TMP/missing.txt" --out "$TMP/nodir/x"
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: data: --out $TMP/nodir/x: the directory $TMP/nodir does not exist (the files are written beside the prefix)" ] &&
    pass || fail "data --out in a missing directory: exit $RC, output '$OUTPUT'"
: > "$TMP/afile"
run data --sft --input "$TMP/missing.jsonl" --tokenizer "$TMP/none" --out "$TMP/afile/x"
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: data: --out $TMP/afile/x: $TMP/afile is a regular file, not a directory" ] &&
    pass || fail "data --out under a file: exit $RC, output '$OUTPUT'"
printf 'abc' > "$TMP/t.txt"
run data --input "$TMP/t.txt" --out "$TMP/t" --val_fraction 1.5
expect_err "data: bad val fraction" "val_fraction"

# --random: N tokens below the vocabulary, readable by train; the first loss is ln(V) on them
run data --random 20000 --vocab 300 --seed 5 --out "$TMP/rnd"
expect_ok "data --random"
printf '{"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 300, "n_positions": 32}\n' > "$TMP/v300.json"
run train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --max_length 32 --max_steps 1 --out "$TMP/rndo"
expect_ok "train on random tokens"
close "$(metric "$TMP/rndo/metrics.jsonl" loss | head -1)" 5.7038 0.01 && pass || fail "random tokens: first loss is not ln(300)"
run data --random 100 --input "$TMP/t.txt" --out "$TMP/x"
expect_err "data: --random with --input" "exclude each other"
run data --random 100 --vocab 1 --out "$TMP/x"
expect_err "data: --vocab 1" "--vocab must be at least 2"
# each mode's flags and no other's: another mode's flag would be ignored
for a in "--input $TMP/t.txt --seed 5" "--input $TMP/t.txt --vocab 300"; do
    # shellcheck disable=SC2086 # $a is words
    run data $a --out "$TMP/x"
    [ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: data: --vocab and --seed go with --random (a text's tokens are its bytes or its tokenizer's ids; --sft's sampling seed is --data_seed)" ] &&
        pass || fail "data $a: exit $RC, output '$OUTPUT'"
done
for a in "--val_fraction 0.5" "--shard_tokens 10"; do
    # shellcheck disable=SC2086
    run data --random 100 --vocab 256 --out "$TMP/x" $a
    [ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: data: --random writes one training shard: --val_fraction and --shard_tokens go with --input" ] &&
        pass || fail "data --random $a: exit $RC, output '$OUTPUT'"
done
run data --random 1 --out "$TMP/x"
expect_err "data: --random 1" "at least 2 tokens"
# one rule per value, whichever way it arrives: a flag is held to the rule of the config key it
# fills (and says which), a flag that fills no key to its own; one line, exit 1, before any step
# (--gradient_accumulation_steps -1 trained "batch -8", --per_device_train_batch_size -3 ran out
# of host memory, --logging_steps 0 divided by zero)
while IFS='|' read -r flag value msg; do
    run train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --max_steps 1 --out "$TMP/rule" "--$flag" "$value"
    [ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: --$flag $value: expected $msg" ] && pass ||
        fail "--$flag $value: exit $RC, output '$OUTPUT'"
done <<'EOF2'
gradient_accumulation_steps|-1|a positive integer, as gradient_accumulation_steps in a DeepSpeed config
per_device_train_batch_size|-3|a positive integer, as train_micro_batch_size_per_gpu in a DeepSpeed config
learning_rate|-1|a non-negative number, as optimizer.params.lr in a DeepSpeed config
learning_rate|nan|a non-negative number, as optimizer.params.lr in a DeepSpeed config
adam_beta1|1.5|a number at least 0 and below 1, as optimizer.params.betas[0] in a DeepSpeed config
adam_beta2|1|a number at least 0 and below 1, as optimizer.params.betas[1] in a DeepSpeed config
adam_epsilon|-0.5|a non-negative number, as optimizer.params.eps in a DeepSpeed config
weight_decay|inf|a non-negative number, as optimizer.params.weight_decay in a DeepSpeed config
max_grad_norm|-1|a non-negative number, as gradient_clipping in a DeepSpeed config
max_grad_norm|nan|a non-negative number, as gradient_clipping in a DeepSpeed config
num_train_epochs|nan|a positive number
num_train_epochs|0|a positive number
warmup_ratio|1.5|a number from 0 to 1
warmup_steps|-2|a non-negative integer
max_length|-1|a non-negative integer (0: the model's n_positions)
comm_timeout|nan|a non-negative number (seconds; 0 waits forever)
comm_timeout|-1|a non-negative number (seconds; 0 waits forever)
save_steps|-1|a non-negative integer (0: no periodic saves)
logging_steps|0|a positive integer (HF's Trainer refuses 0 too)
eval_steps|0|a positive integer (leave it out to evaluate every --logging_steps steps)
EOF2
# the config key itself, and "auto" filled from the flag, meet the same rule
printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": -1}' > "$TMP/gas.json"
run config show "$TMP/gas.json"
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: $TMP/gas.json: gradient_accumulation_steps: expected a positive integer, got -1" ] &&
    pass || fail "gradient_accumulation_steps -1 in a config: exit $RC, output '$OUTPUT'"
printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": "auto"}' > "$TMP/gasa.json"
mpi 2 config show "$TMP/gasa.json" --gradient_accumulation_steps -1
[ "$RC" -ne 0 ] && [ "$(count_lines 'zinf: error: ')" -eq 1 ] && [ "$(count_lines 'zinf: error: --gradient_accumulation_steps -1: expected a positive integer, as gradient_accumulation_steps in a DeepSpeed config')" -eq 1 ] &&
    pass || fail "\"auto\" from --gradient_accumulation_steps -1 at 2 ranks: exit $RC, output '$OUTPUT'"
# --logging_steps 0 with --val divided by zero (SIGFPE, exit 136)
run data --random 20000 --vocab 300 --seed 6 --out "$TMP/rval"
run train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --val "$TMP/rval_train_*.bin" --max_length 32 \
    --max_steps 2 --out "$TMP/lz" --logging_steps 0
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: --logging_steps 0: expected a positive integer (HF's Trainer refuses 0 too)" ] &&
    pass || fail "--logging_steps 0 with --val: exit $RC, output '$OUTPUT'"
run train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --val "$TMP/rval_train_*.bin" --max_length 32 \
    --max_steps 2 --out "$TMP/ez" --eval_steps 0
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: --eval_steps 0: expected a positive integer (leave it out to evaluate every --logging_steps steps)" ] &&
    pass || fail "--eval_steps 0 with --val: exit $RC, output '$OUTPUT'"
# an evaluation asked for without validation data: none (ms-swift turns its eval_strategy off
# without a validation set), with a warning that names the flag, not silence
nv="no validation data (--val, --val_dataset or --split_dataset_ratio): the run evaluates nothing"
run train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --max_length 32 --max_steps 1 --out "$TMP/nv1" --eval_steps 2
expect_ok "--eval_steps without --val"
expect_has "--eval_steps without --val" "zinf: warning: --eval_steps 2: $nv"
run train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --max_length 32 --max_steps 1 --out "$TMP/nv2" \
    --eval_strategy epoch --eval_steps 3
expect_ok "--eval_strategy epoch without --val"
expect_has "--eval_strategy epoch without --val" "zinf: warning: --eval_strategy epoch: $nv"
run train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --max_length 32 --max_steps 1 --out "$TMP/nv3" --eval_strategy no
[ "$RC" -eq 0 ] && ! printf '%s\n' "$OUTPUT" | grep -q "warning" && pass || fail "--eval_strategy no without --val: exit $RC, output '$OUTPUT'"

# a flag or value that has nothing to act on is said, not taken in silence
T1="--model $TMP/v300.json --data $TMP/rnd_train_*.bin --max_length 32"
# warn_has WHAT TEXT ARGS...: the run succeeds and prints "zinf: warning: ...TEXT"
warn_has() {
    local what=$1 text=$2; shift 2
    # shellcheck disable=SC2086 # $T1 is words
    run train $T1 --max_steps 1 --out "$TMP/w.$(printf '%s' "$what" | tr -c 'a-z0-9' _)" "$@"
    expect_ok "$what"
    expect_has "$what" "$text"
}
warn_has "logging steps beside epoch" "warning: (built-in default config): --logging_steps 5 has no effect: --logging_strategy epoch" \
    --logging_strategy epoch --logging_steps 5
warn_has "save steps beside no" "--save_steps 10 has no effect: --save_strategy no" --save_strategy no --save_steps 10
warn_has "eval steps beside epoch" "--eval_steps 4 has no effect: --eval_strategy epoch" --val "$TMP/rval_train_*.bin" \
    --eval_strategy epoch --eval_steps 4
warn_has "max_new_tokens without prompts" \
    "zinf: warning: --max_new_tokens 5 has no effect: it sizes --eval_prompts' completions, and none was given" --max_new_tokens 5
warn_has "min_lr with cosine" "--min_lr has no effect: only --lr_scheduler_type cosine_with_min_lr" \
    --lr_scheduler_type cosine --min_lr 1e-6
printf '{"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}}\n' > "$TMP/wl.json"
warn_has "warmup beside the block's" "$TMP/wl.json: --warmup_steps/--warmup_ratio have no effect: the config's scheduler block sets warmup_num_steps 10" \
    --config "$TMP/wl.json" --warmup_steps 5
printf '{"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}}\n' > "$TMP/wla.json"
# shellcheck disable=SC2086
run train $T1 --out "$TMP/wla" --config "$TMP/wla.json" --warmup_steps 5 --max_steps 6
[ "$RC" -eq 0 ] && ! printf '%s\n' "$OUTPUT" | grep -q "warning" && pass || fail "warmup into an \"auto\" warmup_num_steps: exit $RC, output '$OUTPUT'"
warn_has "swap engine without NVMe" "zinf: warning: --swap_engine psync has no effect: the config offloads nothing to NVMe" --swap_engine psync
# shellcheck disable=SC2086
run train $T1 --out "$TMP/ms0" --max_steps 0 --num_train_epochs 0.01
expect_ok "max_steps 0"
expect_has "max_steps 0" "--max_steps 0 is not a positive number: the run's length comes from --num_train_epochs (0.01), as in the HF Trainer"
run data --random 200 --vocab 300 --seed 5 --out "$TMP/small"
run train --model "$TMP/v300.json" --data "$TMP/small_train_*.bin" --max_length 32 --max_steps 1 --out "$TMP/small" \
    --per_device_train_batch_size 16
expect_ok "a batch larger than the data"
expect_has "a batch larger than the data" \
    "zinf: warning: $TMP/small_train_*.bin: 6 sequences of 32 tokens, fewer than one step's batch of 16 (micro 16 x accumulation 1 x world 1): each step repeats sequences"
warn_has "retention without saves" "zinf: warning: --save_total_limit 2: this run saves no checkpoint" --save_steps 0 --save_total_limit 2
# empty values, and a count of tokens below 1
# shellcheck disable=SC2086
run train $T1 --max_steps 1 --out "$TMP/e1" --resume ""
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: train: --resume is empty: give auto, a checkpoint file or a directory (leave the flag out for a fresh run)" ] &&
    pass || fail "--resume '': exit $RC, output '$OUTPUT'"
# shellcheck disable=SC2086
run train $T1 --max_steps 1 --out "$TMP/e2" --init_from ""
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: train: --init_from is empty: give a Hugging Face model directory" ] &&
    pass || fail "--init_from '': exit $RC, output '$OUTPUT'"
# an empty --out names itself in every command that writes one (export said "cannot create : No
# such file or directory")
for c in "train --output_dir" "train --out" "data --input $TMP/add.txt --out" "ckpt export $TMP/e1 --out" "plot $TMP/e1 --out"; do
    # shellcheck disable=SC2086
    run $c ""
    case $c in train*) w=train ;; *) w=${c%% *} ;; esac
    f=${c##* }
    [ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: $w: $f is empty: give a path" ] && pass ||
        fail "$c '': exit $RC, output '$OUTPUT'"
done
# shellcheck disable=SC2086
run train $T1 --max_steps 1 --out "$TMP/e3" --max_new_tokens 0
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: train: --max_new_tokens 0: expected 1 or more" ] &&
    pass || fail "--max_new_tokens 0: exit $RC, output '$OUTPUT'"
# ms-swift's split holds samples out only without a validation set
run train --model "$TMP/v300.json" --dataset "$TMP/none.jsonl" --split_dataset_ratio 0.2 --val "$TMP/rval_train_*.bin" --out "$TMP/e4"
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: train: --split_dataset_ratio with --val: the held-out samples would never be evaluated (--val's shards are); give one of them" ] &&
    pass || fail "--split_dataset_ratio with --val: exit $RC, output '$OUTPUT'"
run train --model "$TMP/v300.json" --dataset "$TMP/none.jsonl" --val_dataset "$TMP/none.jsonl" --val "$TMP/rval_train_*.bin" --out "$TMP/e6"
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: train: --val_dataset with --val: two validation sets; give one of them" ] &&
    pass || fail "--val_dataset with --val: exit $RC, output '$OUTPUT'"
run train --model "$TMP/v300.json" --dataset "$TMP/none.jsonl" --split_dataset_ratio 0.2 --val_dataset "$TMP/none.jsonl" --out "$TMP/e5"
expect_has "--split_dataset_ratio with --val_dataset" \
    "zinf: warning: --split_dataset_ratio 0.2 has no effect: --val_dataset is the validation set (as in ms-swift); every sample of --dataset trains"
# a resumed run's --init_from (a requeued job's command line) is not read, and the log says so
# shellcheck disable=SC2086
run train $T1 --max_steps 1 --out "$TMP/ri" --save_steps 1
expect_ok "a checkpoint to resume"
# shellcheck disable=SC2086
run train $T1 --out "$TMP/ri" --max_steps 2 --resume auto --init_from "$TMP/nowhere"
expect_ok "--init_from on a resumed run"
expect_has "--init_from on a resumed run" "zinf: --init_from $TMP/nowhere not read: the run resumed from $TMP/ri/checkpoint-1.h5, whose weights it continues"
case "$OUTPUT" in *"initial weights from"*) fail "--init_from on a resumed run: says it read them" ;; *) pass ;; esac
# the HF Trainer's and ms-swift's name for --resume
# shellcheck disable=SC2086
run train $T1 --out "$TMP/ri" --max_steps 3 --resume_from_checkpoint auto
expect_ok "--resume_from_checkpoint"
expect_has "--resume_from_checkpoint" "zinf: resumed from $TMP/ri/checkpoint-2.h5 after step 2"

# DeepSpeed keys read and checked whose asked-for value would change nothing here: a warning each
printf '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "contiguous_gradients": false,
 "elastic_checkpoint": true, "stage3_max_live_parameters": 1e8, "stage3_prefetch_bucket_size": 50000000,
 "offload_optimizer": {"device": "cpu", "pipeline_read": true, "fast_init": true}},
 "checkpoint": {"tag_validation": "Fail"}, "comms_logger": {"enabled": true, "verbose": true}}\n' > "$TMP/inert.json"
run config show "$TMP/inert.json"
expect_ok "inert keys"
expect_has "inert keys" \
    "zinf: warning: $TMP/inert.json: zero_optimization.stage3_max_live_parameters 100000000 has no effect at stage 2: it shapes stage 3's parameter gathering" \
    "zinf: warning: zero_optimization.contiguous_gradients false: no effect (each unit's gradient is one buffer in zinf)" \
    "zinf: warning: zero_optimization.elastic_checkpoint: no effect (every zinf checkpoint loads at any world size)" \
    "zinf: warning: checkpoint.tag_validation: no effect (zinf names a checkpoint by its step, the same on every rank)" \
    "zinf: warning: comms_logger.verbose, debug and prof_all: no effect" \
    "zinf: warning: offload_optimizer.fast_init: no effect (zinf initializes the optimizer's shards itself)" \
    "zinf: warning: offload_optimizer.pipeline_read/pipeline_write: no effect without device \"nvme\"" '"warnings": 7'
# at DeepSpeed's own default a stage-3 key at stage 2 says nothing (config show prints them all)
case "$OUTPUT" in *stage3_prefetch_bucket_size*"no effect"*) fail "a stage-3 key at its default warned" ;; *) pass ;; esac

# a model the node cannot hold on the CPU backend: one line with the figures, before anything is
# allocated (it was the kernel's OOM killer after minutes). 64 layers of 4 x 32768^2 + 3 x 32768 x
# 131072 parameters and an untied 300-token vocabulary: 1.0995e12 parameters, at ZeRO-3 over 2
# ranks 8 fp32 bytes (parameter, gradient, Adam's m and v, 16 bytes, halved) each: 8192 GiB a rank
# before the buffers
printf '{"model_type": "llama", "hidden_size": 32768, "intermediate_size": 131072, "num_hidden_layers": 64,
 "num_attention_heads": 256, "vocab_size": 300, "max_position_embeddings": 64}\n' > "$TMP/huge.json"
mpi 2 train --model "$TMP/huge.json" --data "$TMP/rnd_train_*.bin" --max_length 32 --max_steps 1 --out "$TMP/huge" \
    --deepspeed zero3
expect_err "a model the node cannot hold" "zinf: error: the CPU backend needs about" "of host memory on this node for 2 ranks" \
    "zinf estimate --precision fp32 gives the states), and MemAvailable is"
[ "$(count_lines "the CPU backend needs about")" -eq 1 ] && pass || fail "the host memory line said $(count_lines "the CPU backend needs about") times"
st=$(printf '%s\n' "$OUTPUT" | sed -n 's/.*for 2 ranks (\([0-9.]*\) GiB of states and buffers.*/\1/p' | head -1)
awk -v s="${st:-0}" 'BEGIN { exit !(s >= 8192 && s < 8192 * 1.05) }' && pass || fail "states a rank $st GiB, closed form 8192 (+ buffers)"
[ ! -e "$TMP/huge/checkpoint-1.h5" ] && pass || fail "a checkpoint of the model that did not fit"

# a flag given twice, or with its alias, is one line naming both spellings (no silent last-wins)
run train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --config a.json --deepspeed b.json
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: train: --config and --deepspeed set the same thing (--config a.json, then --deepspeed b.json); give one of them" ] &&
    pass || fail "--config and --deepspeed: exit $RC, output '$OUTPUT'"
run train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --learning_rate 1e-3 --learning-rate=2e-3
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: train: --learning_rate is given twice (--learning_rate 1e-3, then --learning-rate 2e-3); give it once" ] &&
    pass || fail "--learning_rate twice: exit $RC, output '$OUTPUT'"
run train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --out "$TMP/o1" --output_dir "$TMP/o2"
[ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: train: --out and --output_dir set the same thing (--out $TMP/o1, then --output_dir $TMP/o2); give one of them" ] &&
    pass || fail "--out and --output_dir: exit $RC, output '$OUTPUT'"
mpi 2 config show --bf16 --bf16 false
[ "$RC" -ne 0 ] && [ "$(count_lines 'zinf: error: ')" -eq 1 ] && [ "$(count_lines 'zinf: error: config: --bf16 is given twice (--bf16 true, then --bf16 false); give it once')" -eq 1 ] &&
    pass || fail "--bf16 twice at 2 ranks: exit $RC, output '$OUTPUT'"

# what is not a regular file is refused, named as what it is, instead of read forever (/dev/zero),
# waited on (a FIFO) or mapped (a directory)
mkfifo "$TMP/fifo"; mkdir -p "$TMP/dir"
for v in "--config /dev/zero|--config /dev/zero: is a character device" "--config $TMP/fifo|--config $TMP/fifo: is a FIFO" \
         "--model $TMP/fifo|--model $TMP/fifo: is a FIFO" "--data $TMP/fifo|$TMP/fifo: is a FIFO" \
         "--data $TMP/dir|$TMP/dir: is a directory" "--config $TMP/dir|--config $TMP/dir: is a directory"; do
    args=${v%%|*}; msg=${v#*|}
    set -- --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --max_length 32 --max_steps 1 --out "$TMP/nr"
    case $args in --model*) shift 2 ;; --data*) set -- --model "$TMP/v300.json" --max_length 32 --max_steps 1 --out "$TMP/nr" ;; esac
    # shellcheck disable=SC2086
    OUTPUT=$(timeout 20 "$ZINF" train "$@" $args 2>&1); RC=$?
    [ "$RC" -eq 1 ] && [ "$OUTPUT" = "zinf: error: $msg, not a regular file" ] && pass || fail "$args: exit $RC, output '$OUTPUT'"
done
# a UTF-8 byte-order mark before a config is skipped (as Python's utf-8-sig reads it)
printf '\357\273\277{"train_batch_size": 24}\n' > "$TMP/bom.json"
run config show "$TMP/bom.json"
expect_ok "a config with a byte-order mark"
expect_has "a config with a byte-order mark" '"train_batch_size": 24'
run train --model test-mini --data "$TMP/rnd_train_*.bin" --save_total_limit -2
expect_err "negative --save_total_limit" "--save_total_limit must be >= 0"
run train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --max_length 32 --init_from "$TMP/no-such-hf-dir" --max_steps 1 --out "$TMP/if"
expect_err "--init_from a missing directory" "$TMP/no-such-hf-dir"
OUTPUT=$(ZINF_COMM_TIMEOUT=10s "$ZINF" train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --max_length 32 --max_steps 1 2>&1); RC=$?
expect_err "ZINF_COMM_TIMEOUT not a number" "ZINF_COMM_TIMEOUT=10s: expected a number of seconds >= 0"
OUTPUT=$(ZINF_COMM_TIMEOUT=-5 "$ZINF" train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --max_length 32 --max_steps 1 2>&1); RC=$?
expect_err "negative ZINF_COMM_TIMEOUT" "ZINF_COMM_TIMEOUT=-5: expected a number of seconds >= 0"
OUTPUT=$(ZINF_GEMM_AUTOTUNE=fast "$ZINF" train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --max_length 32 --max_steps 1 2>&1); RC=$?
expect_err "bad ZINF_GEMM_AUTOTUNE" "ZINF_GEMM_AUTOTUNE=fast: expected 0, 1 or verbose"
OUTPUT=$(ZINF_ATTN_CUDNN=yes "$ZINF" train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --max_length 32 --max_steps 1 2>&1); RC=$?
expect_err "bad ZINF_ATTN_CUDNN" "ZINF_ATTN_CUDNN=yes: expected 0, 1 or verbose"
OUTPUT=$(ZINF_GEMM_AUTOTUNE=verbose ZINF_ATTN_CUDNN=0 ZINF_COMM_TIMEOUT=2.5 "$ZINF" train --model "$TMP/v300.json" --data "$TMP/rnd_train_*.bin" --max_length 32 \
    --max_steps 1 --out "$TMP/envok" 2>&1); RC=$?
expect_ok "good ZINF_GEMM_AUTOTUNE and ZINF_COMM_TIMEOUT values"

# config show: the batch rule is resolved with the world size of the job
mpi 4 config show "$FIXTURES/seed-zero3-cpu-offload-fp16.json" --model test-mini
expect_ok "config show at world 4"
expect_has "config show (world 4)" '"train_batch_size": 32' '"train_micro_batch_size_per_gpu": 4' '"gradient_accumulation_steps": 2'
mpi 2 config show "$FIXTURES/seed-zero3-cpu-optimizer-64.json"
expect_ok "config show 64 at world 2"
expect_has "micro batch from 64 / (4 x 2)" '"train_micro_batch_size_per_gpu": 8'
mpi 1 config show "$FIXTURES/seed-zero3-auto-template.json" --model gpt2-124m --per_device_train_batch_size 1 --gradient_accumulation_steps 3 --learning_rate 1e-4
expect_ok "auto template"
expect_has "auto values" '"reduce_bucket_size": 589824' '"stage3_prefetch_bucket_size": 530841' \
    '"stage3_param_persistence_threshold": 7680' '"train_batch_size": 3' '"lr": 0.0001'
run config show
expect_ok "config show (embedded default)"
expect_has "embedded default" '"stage": 0'
printf '{"zero_optimization": {"stage": 2, "offload_gradients": true}, "train_batch_size": 8}' > "$TMP/og.json"
run config show "$TMP/og.json"
expect_has "offload_gradients warning" "zero_optimization.offload_gradients" "did you mean"
printf '{"train_batch_size": 8,\n  "zero_optimization": {"stage": 3,}\n}' > "$TMP/bad.json"
mpi 2 config show "$TMP/bad.json"
expect_err "malformed JSON" "bad.json:2"
[ "$(count_lines 'zinf: error')" -eq 1 ] && pass || fail "malformed JSON at 2 ranks: expected one error line"
run config show "$TMP/none.json"
expect_err "missing config" "none.json"

# config show says what train would use: the steps --max_steps fills, and train's notices
printf '{"train_batch_size": 8, "fp16": {"enabled": true}, "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto", "warmup_num_steps": "auto"}}}' > "$TMP/st.json"
run config show "$TMP/st.json" --max_steps 100 --warmup_ratio 0.1
expect_ok "config show --max_steps"
expect_has "steps filled" '"total_num_steps": 100' '"warmup_num_steps": 10' '"max_steps": 100'
expect_has "train's notice" "zinf: warning: fp16.enabled: the CPU backend computes in fp32" '"warnings": 1'
run config show "$TMP/st.json" --max_steps 100 --device cuda
expect_ok "config show --device cuda"
[ "$(count_lines 'CPU backend computes')" -eq 0 ] && pass || fail "--device cuda: the CPU backend's notice"
run config show "$TMP/st.json" --device tpu
expect_err "config show --device tpu" "--device tpu" "cpu or cuda"

# the legacy "cpu_offload": true is DeepSpeed's offload_optimizer.device cpu, in the estimate too
printf '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "cpu_offload": true}}' > "$TMP/co.json"
printf '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}' > "$TMP/oo.json"
run estimate --model gpt2-1.5b --config "$TMP/co.json"
expect_ok "estimate with cpu_offload"
printf '%s\n' "$OUTPUT" | grep '^  \*' | head -1 > "$TMP/co.row"
run estimate --model gpt2-1.5b --config "$TMP/oo.json"
printf '%s\n' "$OUTPUT" | grep '^  \*' | head -1 > "$TMP/oo.row"
grep -q " cpu " "$TMP/co.row" && cmp -s "$TMP/co.row" "$TMP/oo.row" && pass || fail "estimate: cpu_offload row $(cat "$TMP/co.row") != offload_optimizer cpu row $(cat "$TMP/oo.row")"

# estimate parses with the table rules of every subcommand: a dash and an underscore are the same
# (its flags are documented with dashes, --gpus_per_node has always worked too), --flag=value, a
# boolean alone or with true, -h for --help, and a misspelt flag names the nearest one
run estimate --model test-mini --gpus-per-node 2 --stage 1 --print-bytes
expect_ok "estimate with dashes"
A=$OUTPUT
run estimate --model=test-mini --gpus_per_node=2 --stage 1 --print_bytes true
expect_ok "estimate with underscores"
[ -n "$A" ] && [ "$OUTPUT" = "$A" ] && pass || fail "estimate: underscores gave '$OUTPUT', dashes '$A'"
run estimate -h
expect_ok "estimate -h"
expect_has "estimate -h" "usage: zinf estimate" "--gpus-per-node" "--micro-batch" "--print-bytes"
run estimate --model test-mini --gpus-per-nod 2
expect_err "misspelt estimate flag" "unknown flag --gpus_per_nod" "did you mean --gpus-per-node?"
run estimate --model test-mini --micro-batch 2 --seq-len x
expect_err "estimate: a non-integer" "--seq-len expects an integer, got 'x'"

finish
