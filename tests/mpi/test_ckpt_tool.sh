#!/bin/sh
# zinf ckpt info|verify|export on a checkpoint of a CPU run of test-mini (2 ranks, 300 steps, so
# that attention matters to the loss): info shows the step and the tensor shapes; verify passes,
# and fails naming the file and the dataset after one byte of a dataset is flipped, or the file
# is cut short or not HDF5; the HF export (also in shards: tests/mpi/st_check.py reads them with
# Python's standard library against the masters), loaded by Hugging Face transformers, gives
# the validation loss zinf reported on the same sequences (within 1e-4), and swapping its q and
# k shows the comparison would notice a wrong layout; h5py and numpy check the safetensors
# tensors against the masters with HF's transposes, the hdf5 export's bf16 values against a
# numpy round-to-nearest-even of the masters, its fp16 ones against numpy's float16 and its fp32
# ones bit for bit; a failed export leaves no file; zinf_hf_import (tests/unit/test_hf) on 2 ranks;
# zinf train --init_from the fp32 export, one file or shards, is the trained model bit for bit (a
# missing shard is named, a shard cut short names itself and its tensor), and from a bf16 export
# gives the validation loss transformers gives on it.
# Python packages come from PyPI into a cache directory ($ZINF_TEST_PY, else
# ${XDG_CACHE_HOME:-~/.cache}/zinf-test-py): where they cannot be installed, their checks are
# skipped with a message and the rest still runs.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
HERE="${top_srcdir:-.}/tests/mpi"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add" --val_fraction 0.1
expect_ok "zinf data"
T=32 B=4 S=300
VALG="$TMP/add_val_*.bin"
mpi 2 train --model test-mini --data "$TMP/add_train_*.bin" --val "$VALG" --max_length $T \
    --per_device_train_batch_size $B --learning_rate 3e-3 --max_steps $S --logging_steps 100 --eval_steps 100 \
    --save_steps $S --out "$TMP/run" --seed 5
expect_ok "train"
C="$TMP/run/checkpoint-$S.h5"
VAL=$(grep "\"step\": $S," "$TMP/run/metrics.jsonl" | sed -n 's/.*"val_loss": \([^,}]*\).*/\1/p')
[ -f "$C" ] && [ -n "$VAL" ] && pass || fail "train: no $C or no val_loss at step $S in metrics.jsonl"

# has RE: some output line matches the extended regular expression
has() { printf '%s\n' "$OUTPUT" | grep -Eq -- "$1"; }

# --- 1. info ----------------------------------------------------------------------------------
run ckpt info "$TMP/run"
expect_ok "info DIR"
has "^checkpoint +$C\$" && has "^step +$S\$" && has "^seed +5\$" && has "^batch size +8 sequences" \
    && has "n_layer 2, n_embd 64, n_head 4, vocab_size 256 \(padded to 256\), n_positions 64" && pass ||
    fail "info: step, seed, batch or model line wrong: $(printf '%s\n' "$OUTPUT" | head -10)"
# the shapes of model.c's layout, (out, in); the count is V*C + T*C + L*(12C^2 + 13C) + 2C
has '^  wte +256 x 64 +float32 +65536$' && has '^  blocks\.1\.attn\.qkv\.weight +192 x 64 +float32 +49152$' &&
    has '^  blocks\.0\.mlp\.proj\.weight +64 x 256 +float32 +65536$' && has '^  lnf\.bias +64 +float32 +256$' &&
    has "^parameters +$((256 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64))," && pass ||
    fail "info: tensor lines or parameter count wrong"
has '"train_micro_batch_size_per_gpu": 4' && has '"seq_len": 32' && pass || fail "info: the stored config is not shown"
run ckpt info "$C"
expect_ok "info FILE"
mkdir -p "$TMP/empty"
run ckpt info "$TMP/empty"
expect_err "info on a directory without checkpoints" "$TMP/empty: no checkpoint in this directory"
run ckpt info "$TMP/nonesuch.h5"
expect_err "info on a missing file" "$TMP/nonesuch.h5: No such file or directory"

# --- 2. verify --------------------------------------------------------------------------------
run ckpt verify "$TMP/run"
expect_ok "verify"
[ "$OUTPUT" = "$C: 84 datasets, checksums match" ] && pass || fail "verify printed '$OUTPUT'"
# blocks of 1000 elements: 15 rows of 64 (wte in 18 reads, the last of one row), 5 columns of a
# transposed weight
export ZINF_CKPT_BLOCK=1000
run ckpt verify "$C"
unset ZINF_CKPT_BLOCK
[ "$OUTPUT" = "$C: 84 datasets, checksums match" ] && pass || fail "verify in blocks of 1000 printed '$OUTPUT'"
mkdir -p "$TMP/bad"
head -c 3000 "$C" > "$TMP/bad/head.h5"
head -c $(($(wc -c < "$C") / 2)) "$C" > "$TMP/bad/half.h5"
printf 'not a checkpoint\n' > "$TMP/bad/text.h5"
for f in head half text; do
    run ckpt verify "$TMP/bad/$f.h5"
    expect_err "verify $f.h5" "zinf: error: $TMP/bad/$f.h5: not a readable HDF5 file"
    [ "$RC" = 1 ] && [ "$(printf '%s\n' "$OUTPUT" | wc -l)" = 1 ] && pass || fail "verify $f.h5: exit $RC, $(printf '%s\n' "$OUTPUT" | wc -l) lines"
done

# --- Python: h5py and numpy; torch and transformers -------------------------------------------
PYDIR=${ZINF_TEST_PY:-${XDG_CACHE_HOME:-${HOME:-$TMP}/.cache}/zinf-test-py}
mkdir -p "$PYDIR" 2>/dev/null && [ -w "$PYDIR" ] || PYDIR="$TMP/py"
export PYTHONPATH="$PYDIR${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
pyok() { python3 -c "import $1" >/dev/null 2>&1; }
pipi() { python3 -m pip install -q --disable-pip-version-check --target "$PYDIR" "$@" >> "$TMP/pip.log" 2>&1; }
HAVE_H5=0 HAVE_HF=0
if pyok "h5py, numpy" || { pipi h5py numpy && pyok "h5py, numpy"; }; then HAVE_H5=1; fi
if [ "$HAVE_H5" = 1 ]; then
    # torch: the CPU wheel where its index is reachable; PyPI's build (5.6 GB with its CUDA
    # libraries, too much for make check's time on a CI machine) only with ZINF_TEST_TORCH_PYPI=1
    pyok torch || pipi --retries 1 --timeout 30 --index-url https://download.pytorch.org/whl/cpu torch ||
        { [ "${ZINF_TEST_TORCH_PYPI:-0}" = 1 ] && pipi torch; }
    pyok transformers || pipi transformers
    if pyok "torch, transformers"; then HAVE_HF=1; fi
fi
[ "$HAVE_H5" = 1 ] || echo "h5py and numpy cannot be installed here: their checks are skipped"
[ "$HAVE_HF" = 1 ] || echo "torch and transformers cannot be installed here: the Hugging Face checks are skipped"

# flip FILE DATASET AT: xor one byte of DATASET's values, AT bytes into them
flip() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    off = f[sys.argv[2]].id.get_offset() + int(sys.argv[3])
with open(sys.argv[1], "r+b") as fp:
    fp.seek(off)
    b = fp.read(1)
    fp.seek(off)
    fp.write(bytes([b[0] ^ 0x01]))
PY
}

if [ "$HAVE_H5" = 1 ]; then
    cp "$C" "$TMP/bad/flip.h5"
    flip "$TMP/bad/flip.h5" optim/v/blocks.0.attn.qkv.weight 77
    run ckpt verify "$TMP/bad/flip.h5"
    expect_err "verify after a flipped byte" \
        "zinf: error: $TMP/bad/flip.h5: dataset /optim/v/blocks.0.attn.qkv.weight: checksum mismatch"
    [ "$RC" = 1 ] && [ "$(printf '%s\n' "$OUTPUT" | wc -l)" = 1 ] && pass || fail "verify flip.h5: exit $RC, not one line"
    cp "$C" "$TMP/bad/flipw.h5" # in the last block of wte, read in blocks of 1000
    flip "$TMP/bad/flipw.h5" master/wte $((255 * 64 * 4 + 3))
    ZINF_CKPT_BLOCK=1000 "$ZINF" ckpt verify "$TMP/bad/flipw.h5" > "$TMP/o" 2>&1; RC=$?; OUTPUT=$(cat "$TMP/o")
    expect_err "verify in blocks after a flipped byte in wte's last row" "$TMP/bad/flipw.h5: dataset /master/wte: checksum mismatch"
    # a corrupted master stops the export; the last tensor, so most of the file was written first
    cp "$C" "$TMP/bad/flipm.h5"
    flip "$TMP/bad/flipm.h5" master/lnf.bias 5
    for fmt in safetensors hdf5; do
        run ckpt export "$TMP/bad/flipm.h5" --out "$TMP/exbad.$fmt" --format $fmt
        expect_err "export $fmt of a corrupted checkpoint" "$TMP/bad/flipm.h5: dataset /master/lnf.bias: checksum mismatch"
        [ -z "$(ls -A "$TMP/exbad.$fmt")" ] && pass || fail "a failed $fmt export left: $(ls -A "$TMP/exbad.$fmt" | tr '\n' ' ')"
    done
fi

# --- 3. export: safetensors -------------------------------------------------------------------
run ckpt export "$TMP/run" --out "$TMP/hf"
expect_ok "export safetensors"
[ -f "$TMP/hf/config.json" ] && [ -f "$TMP/hf/model.safetensors" ] && [ -z "$(ls "$TMP/hf" | grep tmp)" ] && pass ||
    fail "export safetensors wrote: $(ls "$TMP/hf" | tr '\n' ' ')"
ZINF_CKPT_BLOCK=1000 "$ZINF" ckpt export "$C" --out "$TMP/hf.small" > /dev/null 2>&1
cmp -s "$TMP/hf/model.safetensors" "$TMP/hf.small/model.safetensors" && pass ||
    fail "the safetensors export in blocks of 1000 elements differs from the one in one block"
if [ "$HAVE_H5" = 1 ]; then
    # the file read with numpy alone (the format from its specification), against the masters with
    # HF's names, (in, out) Conv1D weights and wte without the padded rows
    out=$(python3 - "$TMP/hf" "$C" 2>&1 <<'PY'
import json, struct, sys, h5py, numpy as np
d, ck = sys.argv[1:]
raw = open(f"{d}/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
data = raw[8 + n:]
assert (8 + n) % 8 == 0, "the data does not start 8-aligned"
meta = hdr.pop("__metadata__")
assert meta["format"] == "pt", meta
ends = sorted(v["data_offsets"] for v in hdr.values())
assert ends[0][0] == 0 and ends[-1][1] == len(data) and all(a[1] == b[0] for a, b in zip(ends, ends[1:])), "holes"
cfg = json.load(open(f"{d}/config.json"))
want = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_layer=2, n_embd=64, n_head=4, vocab_size=256,
            n_positions=64, n_ctx=64, activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=True,
            resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
assert all(cfg.get(k) == v for k, v in want.items()), {k: cfg.get(k) for k in want}
def t(name):
    e = hdr.pop(name)
    assert e["dtype"] == "F32", e
    a, b = e["data_offsets"]
    return np.frombuffer(data[a:b], dtype="<f4").reshape(e["shape"])
f = h5py.File(ck, "r")
m = lambda k: np.asarray(f["master"][k])
V = 256
pairs = [("transformer.wte.weight", m("wte")[:V]), ("transformer.wpe.weight", m("wpe")),
         ("transformer.ln_f.weight", m("lnf.weight")), ("transformer.ln_f.bias", m("lnf.bias"))]
for l in range(2):
    z, h = f"blocks.{l}.", f"transformer.h.{l}."
    pairs += [(h + "ln_1.weight", m(z + "ln1.weight")), (h + "ln_1.bias", m(z + "ln1.bias")),
              (h + "attn.c_attn.weight", m(z + "attn.qkv.weight").T), (h + "attn.c_attn.bias", m(z + "attn.qkv.bias")),
              (h + "attn.c_proj.weight", m(z + "attn.proj.weight").T), (h + "attn.c_proj.bias", m(z + "attn.proj.bias")),
              (h + "ln_2.weight", m(z + "ln2.weight")), (h + "ln_2.bias", m(z + "ln2.bias")),
              (h + "mlp.c_fc.weight", m(z + "mlp.fc.weight").T), (h + "mlp.c_fc.bias", m(z + "mlp.fc.bias")),
              (h + "mlp.c_proj.weight", m(z + "mlp.proj.weight").T), (h + "mlp.c_proj.bias", m(z + "mlp.proj.bias"))]
for name, ref in pairs:
    got = t(name)
    assert got.shape == ref.shape and np.array_equal(got.view("<u4"), ref.astype("<f4").view("<u4")), name
assert not hdr, f"tensors beyond HF's GPT-2: {sorted(hdr)}"
print("ok", len(pairs))
PY
)
    [ "$out" = "ok 28" ] && pass || fail "the safetensors file against the masters: $(printf '%s' "$out" | tail -1)"
fi
if [ "$HAVE_HF" = 1 ]; then
    got=$(python3 "$HERE/hf_check.py" "$TMP/hf" "$VALG" $T $B 2>"$TMP/hf_check.err")
    if close "$got" "$VAL" 1e-4; then pass; else
        fail "transformers on the export: validation loss '$got', zinf's $VAL"; tail -5 "$TMP/hf_check.err" >&2
    fi
    swapped=$(python3 "$HERE/hf_check.py" "$TMP/hf" "$VALG" $T $B swap_qk 2>>"$TMP/hf_check.err")
    if [ -n "$swapped" ] && ! close "$swapped" "$VAL" 1e-2; then pass; else
        fail "with q and k swapped the loss is '$swapped', zinf's $VAL: the check could not see a wrong layout"
    fi
fi

# --- 3b. export: HF shards (--max_shard_size), read with Python's standard library -------------
# 20000 bytes: wte (65536), c_attn (49152) and c_fc, mlp.c_proj (65536) alone, the rest grouped;
# st_check.py reads the files and the index from the format's specification, checks where the
# shards are cut against huggingface_hub's rule, the tensors against the single-file export byte
# for byte and, with h5py, against the masters (bf16: rounded to nearest even on their bits)
run ckpt export "$C" --out "$TMP/hfsh" --max_shard_size 20000
expect_ok "export hf in shards of 20000 bytes"
NP=$((256 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64))
expect_has "export hf in shards" "model.safetensors.index.json ($((NP * 4)) bytes of fp32)"
[ -f "$TMP/hfsh/config.json" ] && [ -f "$TMP/hfsh/generation_config.json" ] && [ ! -e "$TMP/hfsh/model.safetensors" ] &&
    [ -f "$TMP/hfsh/model-00001-of-00014.safetensors" ] && [ -z "$(ls "$TMP/hfsh" | grep tmp)" ] && pass ||
    fail "export in shards wrote: $(ls "$TMP/hfsh" | tr '\n' ' ')"
out=$(python3 "$HERE/st_check.py" "$TMP/hfsh" --max-shard 20000 --same-as "$TMP/hf" 2>&1)
[ "$out" = "ok 28 14" ] && pass || fail "st_check.py on the shards: $(printf '%s' "$out" | tail -1)"
out=$(python3 "$HERE/st_check.py" "$TMP/hf" 2>&1)
[ "$out" = "ok 28 1" ] && pass || fail "st_check.py on the single file: $(printf '%s' "$out" | tail -1)"
grep -q '"total_size": '$((NP * 4)) "$TMP/hfsh/model.safetensors.index.json" && pass || fail "total_size is not $((NP * 4))"
# the transformers check on a failure: the checker refuses a shard cut where the next tensor fit
out=$(python3 "$HERE/st_check.py" "$TMP/hfsh" --max-shard 100000 2>&1)
case "$out" in *"would fit"*) pass ;; *) fail "st_check.py with another limit did not see the cuts: $out" ;; esac
run ckpt export "$C" --out "$TMP/hfsh16" --max_shard_size 50KB --dtype bf16
expect_ok "export hf bf16 in shards of 50KB"
if [ "$HAVE_H5" = 1 ]; then
    for d in hfsh:20000 hfsh16:50000 hf:5000000000; do
        out=$(python3 "$HERE/st_check.py" "$TMP/${d%%:*}" --max-shard "${d#*:}" --ckpt "$C" --vocab 256 2>&1)
        case "$out" in "ok 28 "*) pass ;; *) fail "st_check.py ${d%%:*} against the masters: $(printf '%s' "$out" | tail -1)" ;; esac
    done
fi
# an export into a directory of another one leaves only its own files
cp -r "$TMP/hfsh" "$TMP/hfre"
run ckpt export "$C" --out "$TMP/hfre"
expect_ok "export hf over a sharded one"
[ "$(ls "$TMP/hfre" | tr '\n' ' ')" = "config.json generation_config.json model.safetensors " ] &&
    cmp -s "$TMP/hfre/model.safetensors" "$TMP/hf/model.safetensors" && pass ||
    fail "the single-file export over shards left: $(ls "$TMP/hfre" | tr '\n' ' ')"
run ckpt export "$C" --out "$TMP/hfre" --max_shard_size 20000
[ "$(ls "$TMP/hfre" | grep -c safetensors)" = 15 ] && [ ! -e "$TMP/hfre/model.safetensors" ] && pass ||
    fail "the sharded export over a single file left: $(ls "$TMP/hfre" | tr '\n' ' ')"
if [ "$HAVE_HF" = 1 ]; then
    got=$(python3 "$HERE/hf_check.py" "$TMP/hfsh" "$VALG" $T $B 2>>"$TMP/hf_check.err")
    close "$got" "$VAL" 1e-4 && pass || fail "transformers on the sharded export: validation loss '$got', zinf's $VAL"
fi

# --- 4. export: hdf5 in bf16 (the default), fp16, fp32 ----------------------------------------
for sfx in "" .small; do
    [ -n "$sfx" ] && export ZINF_CKPT_BLOCK=1000
    run ckpt export "$C" --out "$TMP/h5bf$sfx" --format hdf5
    expect_ok "export hdf5"
    run ckpt export "$C" --out "$TMP/h5f16$sfx" --format hdf5 --dtype fp16
    expect_ok "export hdf5 fp16"
    run ckpt export "$C" --out "$TMP/h5f32$sfx" --format hdf5 --dtype fp32
    expect_ok "export hdf5 fp32"
    unset ZINF_CKPT_BLOCK
    [ "$HAVE_H5" = 1 ] || continue
    out=$(python3 - "$C" "$TMP" "$sfx" 2>&1 <<'PY'
import sys, h5py, numpy as np
ck, tmp, sfx = (sys.argv[1:] + [""])[:3]
masters = h5py.File(ck, "r")["master"]
names = []
masters.visit(lambda n: names.append(n) if isinstance(masters[n], h5py.Dataset) else None)
bf, f16, f32 = (h5py.File(f"{tmp}/{d}{sfx}/weights.h5", "r") for d in ("h5bf", "h5f16", "h5f32"))
assert (bf.attrs["dtype"], f16.attrs["dtype"], f32.attrs["dtype"]) == (b"bf16", b"fp16", b"fp32") or \
       (bf.attrs["dtype"], f16.attrs["dtype"], f32.attrs["dtype"]) == ("bf16", "fp16", "fp32")
rounded = 0
for n in names:
    m = np.asarray(masters[n], dtype="<f4")
    # bf16: round to nearest, ties to even, on the float32 bits (no NaN in a trained model)
    u = m.view("<u4").astype(np.uint64)
    want = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    d = bf[n]
    a = d.attrs["dtype"]
    assert (a.decode() if isinstance(a, bytes) else a) == "bf16", (n, a)
    assert d.dtype == np.uint16 and d.shape == m.shape, (n, d.dtype, d.shape)
    assert np.array_equal(d[...], want), f"{n}: bf16 values are not the rounded masters"
    rounded += int(np.count_nonzero(want != (u >> 16).astype(np.uint16)))
    d = f16[n]
    assert d.dtype == np.float16 and d.shape == m.shape, (n, d.dtype)
    assert np.array_equal(d[...].view(np.uint16), m.astype(np.float16).view(np.uint16)), f"{n}: fp16 values"
    d = f32[n]
    assert d.dtype == np.float32 and np.array_equal(d[...].view("<u4"), m.view("<u4")), f"{n}: fp32 values"
assert rounded > 0, "no bf16 value was rounded up: the check would not tell rounding from truncation"
print("ok", len(names))
PY
)
    [ "$out" = "ok 28" ] && pass || fail "the hdf5 exports$sfx against the masters: $(printf '%s' "$out" | tail -1)"
done

# --- 5. usage errors --------------------------------------------------------------------------
run ckpt export "$C"
expect_err "export without --out" "ckpt export: --out DIR is required"
run ckpt export "$C" --out "$TMP/x" --dtype fp8
expect_err "export --dtype fp8" "--dtype fp8: expected fp32, bf16 or fp16"
run ckpt export "$C" --out "$TMP/x" --format onnx
expect_err "export --format onnx" "--format onnx: expected hf (or safetensors) or hdf5"
run ckpt export "$C" --out "$TMP/x" --max_shard_size 5TB
expect_err "export --max_shard_size 5TB" "ckpt export: --max_shard_size: 5TB: expected a positive size"
run ckpt export "$C" --out "$TMP/x" --format hdf5 --max_shard_size 5GB
expect_err "export hdf5 --max_shard_size" "--max_shard_size applies to --format hf only"
run ckpt verify "$C" --out "$TMP/x"
expect_err "verify --out" "apply to export only"
run ckpt frob "$C"
expect_err "ckpt frob" "unknown subcommand 'frob'"
run ckpt info
expect_err "info without a path" "PATH (a checkpoint file or directory) is required"
[ ! -e "$TMP/x" ] && pass || fail "a refused export created $TMP/x"

# --- 6. zinf_hf_import: every unit split between 2 ranks (ZeRO-3) and replicated (stage 0) -------
HFT="${top_builddir:-.}/tests/unit/test_hf"
if [ -x "$HFT" ]; then
    for st in 3 0; do
        # its exports in blocks of 1000 elements: wte's 200 real rows of 256 end inside a block
        OUTPUT=$(ZINF_CKPT_BLOCK=1000 "$MPIRUN" --oversubscribe -np 2 "$HFT" $st 2>&1); RC=$?
        expect_ok "test_hf on 2 ranks, stage $st"
        expect_has "test_hf on 2 ranks, stage $st" ", 0 failed"
    done
else
    echo "$HFT is not built (make check builds it): the import checks on 2 ranks are skipped"
fi

# --- 7. zinf train --init_from the export: ZeRO-3 on 2 ranks, learning rate 0, one step ----------
# the weights must be the trained run's bit for bit (its parameter hash) and give its val_loss;
# from a bf16 export, the val_loss transformers computes on that same export
if "$ZINF" train --help 2>/dev/null | grep -q -- --init_from; then
    printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": %d, "zero_optimization": {"stage": 3}}\n' $B \
        > "$TMP/s3.json"
    # init DIR OUT: one step from DIR's weights; its val_loss in $IV
    init() {
        mpi 2 train --config "$TMP/s3.json" --model test-mini --data "$TMP/add_train_*.bin" --val "$VALG" \
            --max_length $T --learning_rate 0 --max_steps 1 --save_steps 0 --out "$TMP/$2" --init_from "$1"
        IV=$(grep '"step": 1,' "$TMP/$2/metrics.jsonl" 2>/dev/null | sed -n 's/.*"val_loss": \([^,}]*\).*/\1/p')
    }
    phash() { sed -n 's/.*"params_hash": "\([0-9a-f]*\)".*/\1/p' "$1"; }
    init "$TMP/hf" init32
    expect_ok "train --init_from the fp32 export"
    H0=$(phash "$TMP/run/metrics.jsonl")
    [ -n "$H0" ] && [ "$(phash "$TMP/init32/metrics.jsonl")" = "$H0" ] && pass ||
        fail "--init_from the fp32 export: parameter hash $(phash "$TMP/init32/metrics.jsonl"), the trained run's $H0"
    [ "$IV" = "$VAL" ] && pass || fail "--init_from the fp32 export: val_loss '$IV', the trained run's $VAL"
    # the sharded export: every rank reads its ranges across 14 shards, the same bits
    init "$TMP/hfsh" initsh
    expect_ok "train --init_from the sharded export"
    [ "$(phash "$TMP/initsh/metrics.jsonl")" = "$H0" ] && [ "$IV" = "$VAL" ] && pass ||
        fail "--init_from the sharded export: parameter hash $(phash "$TMP/initsh/metrics.jsonl"), val_loss '$IV'; single file's $H0, $VAL"
    # a shard the index names, missing: one line naming it, on every rank's behalf
    cp -r "$TMP/hfsh" "$TMP/hfmiss"
    rm "$TMP/hfmiss/model-00004-of-00014.safetensors"
    init "$TMP/hfmiss" initmiss
    expect_err "train --init_from with a shard missing" \
        "$TMP/hfmiss/model.safetensors.index.json names shard model-00004-of-00014.safetensors, which is missing"
    [ "$(printf '%s\n' "$OUTPUT" | grep -c 'error')" = 1 ] && pass || fail "a missing shard: not one error line: $OUTPUT"
    # a shard cut short: the file and its first tensor past the end
    cp -r "$TMP/hfsh" "$TMP/hfcut"
    head -c $(($(wc -c < "$TMP/hfsh/model-00002-of-00014.safetensors") - 100)) "$TMP/hfsh/model-00002-of-00014.safetensors" \
        > "$TMP/hfcut/model-00002-of-00014.safetensors"
    init "$TMP/hfcut" initcut
    expect_err "train --init_from with a shard cut short" "zinf: error: $TMP/hfcut/model-00002-of-00014.safetensors: tensor " \
        "end past the file's"
    [ "$(printf '%s\n' "$OUTPUT" | grep -c 'error')" = 1 ] && pass || fail "a shard cut short: not one error line: $OUTPUT"
    if [ "$HAVE_HF" = 1 ]; then
        run ckpt export "$C" --out "$TMP/hf16" --dtype bf16
        expect_ok "export safetensors bf16"
        L16=$(python3 "$HERE/hf_check.py" "$TMP/hf16" "$VALG" $T $B 2>>"$TMP/hf_check.err")
        init "$TMP/hf16" init16
        expect_ok "train --init_from the bf16 export"
        [ -n "$IV" ] && close "$IV" "$L16" 1e-4 && ! close "$IV" "$VAL" 1e-6 && pass ||
            fail "--init_from the bf16 export: val_loss '$IV', transformers on it '$L16' (fp32 $VAL)"
    fi
else
    echo "zinf train has no --init_from: its end-to-end checks are skipped"
fi

finish
