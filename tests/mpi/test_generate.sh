#!/bin/sh
# `zinf generate`. Checked here, against references that are not zinf's:
#  - the first greedy token after prefixes of golden.bin's tokens is the argmax of transformers'
#    own logits there (tests/golden/llama: llama3, llama_tied, qwen2, qwen3, mistral), and ten
#    greedy tokens are those of gen_ref.py, a numpy float64 forward of the same safetensors;
#  - the prompt each template makes is the text of Hugging Face's Jinja chat template (trl ships
#    the originals) rendered with add_generation_prompt=True and thinking off;
#  - top-p with a tiny p is greedy; a fixed seed draws the same tokens twice, another seed others;
#    the draws at a temperature follow the reference's softmax (chi-square), top-p's stay inside
#    transformers' nucleus;
#  - a model trained with `zinf train --dataset` on one conversation gives its reply back from the
#    checkpoint (greedy), and stops at the template's end of turn;
#  - bad input: one line each.
# The Python references need numpy (and jinja2 and trl's templates): without PyPI they are
# skipped and the test exits 77 after the rest has run.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
SRC=${top_srcdir:-.}
GOLD=$SRC/tests/golden/llama
REF=$SRC/tests/mpi/gen_ref.py
CREF=$SRC/tests/chat/chat_ref.py

# --- a tiny chat model, trained to remember one reply ------------------------------------------
M=$TMP/model
tiny_chat_model "$M"
Q="What is the capital of France?"
A="Paris is the capital of France."
for i in 1 2 3 4 5 6 7 8; do
    printf '{"messages": [{"role": "user", "content": "%s"}, {"role": "assistant", "content": "%s"}]}\n' "$Q" "$A"
done > "$TMP/data.jsonl"
run train --model "$M" --template chatml --dataset "$TMP/data.jsonl" --dataset_cache "$TMP/cache" --max_length 128 \
    --max_steps 60 --logging_steps 60 --per_device_train_batch_size 2 --learning_rate 1e-2 --seed 5 --out "$TMP/run"
expect_ok "train on one conversation"
run generate --checkpoint "$TMP/run" --tokenizer "$M" --template chatml --prompt "$Q"
expect_ok "generate from the checkpoint"
[ "$OUTPUT" = "$A" ] && pass || fail "the trained reply is not given back: '$OUTPUT' (want '$A')"
# the reply stops at <|im_end|>: a budget far past the reply gives the same text
run generate --checkpoint "$TMP/run/checkpoint-60.h5" --tokenizer "$M/tokenizer.json" --template chatml --prompt "$Q" \
    --max_new_tokens 100
[ "$OUTPUT" = "$A" ] && pass || fail "the reply does not stop at the end of turn: '$OUTPUT'"
# exported to a Hugging Face directory (with the tokenizer beside it), read by --model: the same reply
run ckpt export "$TMP/run" --out "$TMP/hf" --format hf
expect_ok "ckpt export"
cp "$M/tokenizer.json" "$TMP/hf/"
run generate --model "$TMP/hf" --template chatml --prompt "$Q"
[ "$OUTPUT" = "$A" ] && pass || fail "--model of the exported directory: '$OUTPUT' (want '$A')"
# a budget of 3 tokens: the reply's first 3 tokens, which the tokenizer decodes to a prefix
run generate --model "$TMP/hf" --template chatml --prompt "$Q" --max_new_tokens 3
case "$A" in "$OUTPUT"*) [ -n "$OUTPUT" ] && [ "$OUTPUT" != "$A" ] && pass || fail "3 tokens gave '$OUTPUT'" ;;
*) fail "3 tokens gave '$OUTPUT', not a prefix of the reply" ;; esac

# --- sampling ------------------------------------------------------------------------------------
run generate --model "$TMP/hf" --template chatml --prompt "Hello there" --max_new_tokens 12
G=$OUTPUT
run generate --model "$TMP/hf" --template chatml --prompt "Hello there" --max_new_tokens 12 --temperature 1 --top_p 1e-6 --seed 3
[ "$OUTPUT" = "$G" ] && pass || fail "top_p 1e-6 is not greedy: '$OUTPUT' vs '$G'"
S() { run generate --model "$TMP/hf" --template chatml --prompt "Hello there" --max_new_tokens 12 --temperature 5 --seed "$1"; }
S 7; S1=$OUTPUT; S 7; S2=$OUTPUT; S 8; S3=$OUTPUT
[ "$S1" = "$S2" ] && pass || fail "one seed drew twice differently: '$S1' vs '$S2'"
[ "$S1" != "$S3" ] && pass || fail "seeds 7 and 8 drew the same 12 tokens at temperature 5: '$S1'"

# --- bad input: one line each ---------------------------------------------------------------------
one_line() { [ "$(printf '%s\n' "$OUTPUT" | wc -l)" -eq 1 ] && pass || fail "$1: more than one line: $OUTPUT"; }
mkdir -p "$TMP/noweights"
cp "$M/config.json" "$M/tokenizer.json" "$TMP/noweights/"
run generate --model "$TMP/noweights" --template chatml --prompt hi
expect_err "no weights" "$TMP/noweights"
one_line "no weights"
run generate --checkpoint "$TMP/run" --prompt hi
expect_err "a checkpoint without --tokenizer" "a checkpoint holds no tokenizer; give --tokenizer PATH"
one_line "a checkpoint without --tokenizer"
LONG=$(awk 'BEGIN { for (i = 0; i < 300; i++) printf "word "; }')
run generate --model "$TMP/hf" --template chatml --prompt "$LONG"
expect_err "a prompt past the positions" "the model takes 256 positions: no room for a reply"
one_line "a prompt past the positions"
run generate --model "$TMP/hf" --template nosuch --prompt hi
expect_err "unknown template" "unknown template 'nosuch'"
one_line "unknown template"
run generate --model "$TMP/hf" --raw --prompt ""
expect_err "an empty prompt" "the prompt is empty: no token to continue from"
run generate --model "$TMP/hf" --prompt_ids 1,2,9999
expect_err "an id past the vocabulary" "token 9999 (at 2) is outside the model's vocabulary (size 640)"
run generate --model "$TMP/hf" --template chatml --prompt hi --top_p 0.5
expect_err "top_p without a temperature" "--top_p 0.5 samples"
run generate --model "$TMP/hf" --template chatml --prompt "Hello" --seed 7
expect_err "a seed without a temperature" "generate: --seed 7 seeds the sampler, and --temperature 0 is greedy: give a temperature above 0"
run generate --model "$TMP/hf" --template chatml --prompt "Hello" --show_prompt --temperature 0.7
expect_err "sampling beside --show_prompt" "generate: --temperature: --show_prompt prints the prompt and stops, generating nothing"

# --- Python references ---------------------------------------------------------------------------
py_setup
if ! pyok numpy && ! python3 -m pip install -q --disable-pip-version-check --target "$PYDIR" numpy > "$TMP/pip.log" 2>&1; then
    echo "numpy cannot be installed here (no PyPI?): the reference checks are skipped"
    finish >/dev/null
    [ "$FAILS" -eq 0 ] && exit 77 || exit 1
fi
for m in llama3 llama_tied qwen2 qwen3 mistral; do
    for k in 1 2 5 16; do
        # shellcheck disable=SC2046 # two words: the prefix and transformers' argmax after it
        set -- $(python3 "$REF" golden "$GOLD/$m" $k)
        run generate --model "$GOLD/$m" --prompt_ids "$1" --max_new_tokens 1
        [ "$RC" -eq 0 ] && [ "$OUTPUT" = "$2" ] && pass ||
            fail "$m: after $k tokens zinf chose '$OUTPUT', transformers' logits' argmax is $2"
    done
    want=$(python3 "$REF" greedy "$GOLD/$m" 5,6,7 10)
    run generate --model "$GOLD/$m" --prompt_ids 5,6,7 --max_new_tokens 10
    [ "$RC" -eq 0 ] && [ "$OUTPUT" = "$want" ] && pass || fail "$m: ten greedy tokens '$OUTPUT', the reference's '$want'"
done

# sampling against the reference's softmax: llama_tied without its generation_config.json (no EOS
# stops a draw), the first token after 5,6,7 drawn with 800 seeds at temperature 0.7: Pearson's
# chi-square below its 0.999 quantile; top-p 0.3: every draw inside transformers' nucleus
mkdir -p "$TMP/lt"
cp "$GOLD/llama_tied/config.json" "$GOLD/llama_tied/"*.safetensors* "$TMP/lt/"
draw() { s=1; while [ $s -le "$1" ]; do "$ZINF" generate --model "$TMP/lt" --prompt_ids 5,6,7 --max_new_tokens 1 --seed $s \
    --temperature 0.7 ${2:-}; s=$((s + 1)); done; }
draw 800 > "$TMP/draws.txt"
python3 "$REF" chi2 "$TMP/lt" 5,6,7 0.7 "$TMP/draws.txt" > "$TMP/chi2.txt" && pass || fail "temperature 0.7: $(cat "$TMP/chi2.txt")"
cat "$TMP/chi2.txt"
NUC=" $(python3 "$REF" nucleus "$TMP/lt" 5,6,7 0.7 0.3) "
draw 100 "--top_p 0.3" > "$TMP/nd.txt"
bad=0; for t in $(cat "$TMP/nd.txt"); do case "$NUC" in *" $t "*) ;; *) bad=$t ;; esac; done
[ "$bad" = 0 ] && [ "$(sort -u "$TMP/nd.txt" | wc -l)" -gt 3 ] && pass ||
    fail "top_p 0.3 drew $bad, outside the nucleus$NUC, or too few distinct tokens: $(sort -u "$TMP/nd.txt" | tr '\n' ' ')"

# the prompt of each template against Hugging Face's Jinja templates (trl ships them)
JDIR=$TMP/jinja
if fetch_jinja "$JDIR"; then
    export ZINF_CHAT_DATE="26 Jul 2024"
    for c in "qwen2_5 qwen2_5" "qwen3 qwen3" "qwen3_nothinking qwen3_instruct_2507" "llama3_2 llama3_1"; do
        set -- $c
        for sys in "" "Answer in French."; do
            if [ -n "$sys" ]; then
                "$ZINF" generate --model "$M" --template "$1" --prompt "$Q" --system "$sys" --show_prompt > "$TMP/z.txt"
                python3 "$CREF" hf-prompt "$JDIR/$2.jinja" "$Q" "$sys" > "$TMP/j.txt"
            else
                "$ZINF" generate --model "$M" --template "$1" --prompt "$Q" --show_prompt > "$TMP/z.txt"
                python3 "$CREF" hf-prompt "$JDIR/$2.jinja" "$Q" > "$TMP/j.txt"
            fi
            cmp -s "$TMP/z.txt" "$TMP/j.txt" && pass ||
                fail "$1 (system '$sys'): the prompt differs from $2.jinja's: $(od -c "$TMP/z.txt" | head -3) vs $(od -c "$TMP/j.txt" | head -3)"
        done
    done
else
    echo "jinja2 or trl's templates cannot be fetched here: the Jinja comparison is skipped"
fi

# a template whose control tokens the tokenizer lacks: refused, as zinf data --sft refuses it
run generate --checkpoint "$TMP/run" --tokenizer "$M" --template llama3 --prompt "$Q"
expect_err "llama3's template with a ChatML tokenizer" "--template llama3: $M has no token <|begin_of_text|>, which the template writes"
# a model with more rows than its tokenizer has ids (Qwen's 151936 over 151669): the rows past the
# tokenizer are never drawn, so a reply always decodes. At a temperature of 1e30 every id is about
# as likely: 200 uniform draws over 2000 rows would all fall in the tokenizer's 635 ids with a
# probability of about 1e-100
mkdir -p "$TMP/wide"
cp "$M/tokenizer.json" "$TMP/wide/"
sed 's/"vocab_size": 640/"vocab_size": 2000/' "$M/config.json" > "$TMP/wide/config.json"
run data --random 20000 --vocab 630 --out "$TMP/wr"
mpi 1 train --model "$TMP/wide" --data "$TMP/wr_train_*.bin" --max_length 32 --max_steps 1 --out "$TMP/wrun"
expect_ok "one step of a model wider than its tokenizer"
for seed in 1 2 3; do
    run generate --checkpoint "$TMP/wrun" --tokenizer "$TMP/wide" --template chatml --prompt hi --temperature 1e30 \
        --seed $seed --max_new_tokens 200
    expect_ok "uniform draws over 2000 rows, a tokenizer of 635 ids, seed $seed"
done
finish
