# Shared helpers for the shell tests: run zinf (under mpirun), check exit codes, messages and
# numbers. Sourced by tests/mpi/test_*.sh; each test exits 0 (pass), 1 (fail) or 77 (skip).
set -u
: "${ZINF:=./zinf}" "${MPIRUN:=mpirun}" "${FIXTURES:=tests/fixtures}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
# no stray InfiniBand/verbs probing on CI machines
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp} OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/zinf-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
FAILS=0
CHECKS=0

fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
pass() { CHECKS=$((CHECKS + 1)); }

# mpi NP args... : run zinf on NP ranks, output in $OUTPUT, status in $RC
mpi() {
    local np=$1; shift
    OUTPUT=$("$MPIRUN" --oversubscribe -np "$np" "$ZINF" "$@" 2>&1); RC=$?
}
# run args... : zinf without mpirun (a singleton MPI job)
run() { OUTPUT=$("$ZINF" "$@" 2>&1); RC=$?; }

# expect_ok WHAT: the last command succeeded
expect_ok() {
    CHECKS=$((CHECKS + 1))
    if [ "$RC" -ne 0 ]; then fail "$1: exit $RC"; printf '%s\n' "$OUTPUT" | tail -20 >&2; fi
}
# expect_err WHAT TEXT...: the last command failed and its output has every TEXT
expect_err() {
    local what=$1; shift
    CHECKS=$((CHECKS + 1))
    if [ "$RC" -eq 0 ]; then fail "$what: expected failure, got success"; printf '%s\n' "$OUTPUT" | tail -5 >&2; return; fi
    for t in "$@"; do
        case "$OUTPUT" in *"$t"*) ;; *) fail "$what: output lacks '$t'"; printf '%s\n' "$OUTPUT" | tail -8 >&2 ;; esac
    done
}
# expect_has WHAT TEXT...: the output has every TEXT
expect_has() {
    local what=$1; shift
    CHECKS=$((CHECKS + 1))
    for t in "$@"; do
        case "$OUTPUT" in *"$t"*) ;; *) fail "$what: output lacks '$t'"; printf '%s\n' "$OUTPUT" | tail -8 >&2 ;; esac
    done
}
# hash_of: the parameter hash the last run's ranks agreed on ("parameters agree bit for bit
# across N ranks (hash H)"), empty when the run printed none
hash_of() { printf '%s\n' "$OUTPUT" | sed -n 's/.*parameters agree bit for bit across [0-9]* ranks\{0,1\} (hash \([0-9a-f]*\)).*/\1/p'; }
# count_lines TEXT: how many output lines contain TEXT
count_lines() { printf '%s\n' "$OUTPUT" | grep -cF -- "$1"; }

# metric FILE KEY: the KEY values of every line of a metrics.jsonl, one per line
metric() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1"; }

# close A B RTOL: |a-b| <= rtol*max(|a|,|b|)
close() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d=a-b; if (d<0) d=-d; m=(a<0?-a:a); n=(b<0?-b:b); if (n>m) m=n; exit !(d <= r*m) }'; }

# make_text FILE N: N lines of two-digit additions "a+b=c" (deterministic)
make_text() {
    awk -v n="$2" 'BEGIN { s = 12345; for (i = 0; i < n; i++) { s = (s * 1103515245 + 12345) % 2147483648; a = int(s / 65536) % 100; s = (s * 1103515245 + 12345) % 2147483648; b = int(s / 65536) % 100; printf "%d+%d=%d\n", a, b, a + b } }' > "$1"
}

# tiny_chat_model DIR: a tiny Llama model directory (config.json, tests/tok/tiny.json as its
# tokenizer.json, no weights) for chat runs
tiny_chat_model() {
    mkdir -p "$1"
    # tiny.json with ChatML's two control tokens as special tokens (ids 633, 634 of the model's 640),
    # as a Qwen tokenizer has them: the chatml template refuses a tokenizer without them
    sed 's/^ "added_tokens": \[$/ "added_tokens": [\
  {"id": 633, "content": "<|im_start|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},\
  {"id": 634, "content": "<|im_end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},/' \
        "${top_srcdir:-.}/tests/tok/tiny.json" > "$1/tokenizer.json"
    cat > "$1/config.json" <<'JSON'
{"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 640, "max_position_embeddings": 256,
 "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": true}
JSON
}

# py_setup: PYDIR, a directory pip installs the Python references' packages into (kept between
# runs), on PYTHONPATH; pyok MODULES: they import
py_setup() {
    PYDIR=${ZINF_TEST_PY:-${XDG_CACHE_HOME:-${HOME:-$TMP}/.cache}/zinf-test-py}
    mkdir -p "$PYDIR" 2>/dev/null && [ -w "$PYDIR" ] || PYDIR="$TMP/py"
    export PYTHONPATH="$PYDIR${PYTHONPATH:+:$PYTHONPATH}"
}
pyok() { python3 -c "import $1" >/dev/null 2>&1; }

# fetch_jinja DIR: Hugging Face's chat templates as trl 1.16.0 ships them (DIR/qwen2_5.jinja,
# qwen3, qwen3_instruct_2507, llama3_1) and jinja2 to render them; fails without PyPI
fetch_jinja() {
    { pyok jinja2 || python3 -m pip install -q --disable-pip-version-check --target "$PYDIR" jinja2 >> "$TMP/pip.log" 2>&1; } &&
    python3 -m pip download -q --disable-pip-version-check --no-deps trl==1.16.0 -d "$1" >> "$TMP/pip.log" 2>&1 &&
    python3 - "$1" <<'PY'
import glob, sys, zipfile
z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/trl-*.whl")[0])
for n in ("qwen2_5", "qwen3", "qwen3_instruct_2507", "llama3_1"):
    open(f"{sys.argv[1]}/{n}.jinja", "wb").write(z.read(f"trl/chat_templates/{n}.jinja"))
PY
}

finish() {
    echo "$(basename "$0"): $CHECKS checks, $FAILS failed"
    [ "$FAILS" -eq 0 ]
}

# nvme_dir NAME: NV, a new directory for NVMe swap files on a file system that takes O_DIRECT
# (/var/tmp, else $TMPDIR or /tmp), with ENG=io_uring; where none does, one under $TMP with
# ENG=psync (buffered). The caller removes NV when it is not under $TMP.
nvme_dir() {
    NV=""
    for base in /var/tmp "${TMPDIR:-/tmp}"; do
        d=$(mktemp -d "$base/$1.XXXXXX" 2>/dev/null) || continue
        if dd if=/dev/zero of="$d/probe" bs=4096 count=1 oflag=direct 2>/dev/null; then NV=$d; rm -f "$d/probe"; break; fi
        rm -rf "$d"
    done
    ENG=io_uring
    [ -n "$NV" ] || { NV=$(mktemp -d "$TMP/nv.XXXXXX"); ENG=psync; }
}
