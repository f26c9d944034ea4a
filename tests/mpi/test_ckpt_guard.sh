#!/bin/sh
# What keeps one run's checkpoints its own: retention removes only this run's older checkpoints;
# a fresh run does not start where another run's checkpoints are (unless --overwrite_output_dir);
# --out is locked, so two runs never write one directory at once; what an interrupted save left
# is removed; a resume with another --max_length, or past --max_steps, is refused; an edited root
# attribute is caught by its checksum or range; `ckpt verify` and a resume refuse the same files;
# a checkpoint of format 1 (written before run ids and the root checksum) still loads.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
D="$TMP/add_train_*.bin"
# T NP OUT [flags]: the run of the reports (test-mini, micro-batch 4)
T() {
    local np=$1 out=$2; shift 2
    mpi "$np" train --model test-mini --data "$D" --max_length 32 --per_device_train_batch_size 4 \
        --logging_steps 1 --out "$TMP/$out" --seed 9 "$@"
}
ckpts() { (cd "$TMP/$1" && ls checkpoint-*.h5 2>/dev/null | sed 's/checkpoint-\([0-9]*\).h5/\1/' | sort -n | tr '\n' ' '); }

# --- 1. retention and another run's directory ---------------------------------------------------
T 2 ret --max_steps 20 --save_steps 5 --save_total_limit 2
expect_ok "run 1"
[ "$(ckpts ret)" = "15 20 " ] && pass || fail "run 1 keeps $(ckpts ret)"
T 2 ret --max_steps 6 --save_steps 3 --save_total_limit 2 --learning_rate 1e-3
expect_err "a fresh run into run 1's directory" \
    "--out $TMP/ret holds another run's checkpoints ($TMP/ret/checkpoint-20.h5): continue it with --resume auto, or start a new run there with --overwrite_output_dir"
[ "$(count_lines "zinf: error:")" -eq 1 ] && pass || fail "the refusal is said $(count_lines "zinf: error:") times"
[ "$(ckpts ret)" = "15 20 " ] && [ "$(cat "$TMP/ret/latest")" = checkpoint-20.h5 ] && pass ||
    fail "the refused run changed the directory: $(ckpts ret), latest $(cat "$TMP/ret/latest")"
T 2 ret --max_steps 6 --save_steps 3 --save_total_limit 2 --learning_rate 1e-3 --overwrite_output_dir
expect_ok "run 2 with --overwrite_output_dir"
[ "$(ckpts ret)" = "3 6 15 20 " ] && pass || fail "run 2 left $(ckpts ret) (run 1's 15 and 20 must stay)"
[ "$(cat "$TMP/ret/latest")" = checkpoint-6.h5 ] && pass || fail "latest names $(cat "$TMP/ret/latest")"
H6=$(hash_of)
T 2 ret --max_steps 6 --save_steps 3 --save_total_limit 2 --learning_rate 1e-3 --resume auto
expect_ok "run 2 resumed at its last step"
expect_has "run 2 resumed at its last step" "resumed from $TMP/ret/checkpoint-6.h5 after step 6" \
    "$TMP/ret/checkpoint-6.h5 is at --max_steps 6 already: nothing to train"
[ "$(hash_of)" = "$H6" ] && pass || fail "resumed at the end: hash $(hash_of), run 2 ended with $H6"
T 2 ret --max_steps 9 --save_steps 3 --save_total_limit 2 --learning_rate 1e-3 --resume auto
expect_ok "run 2 continued to step 9"
[ "$(ckpts ret)" = "6 9 15 20 " ] && pass || fail "after step 9: $(ckpts ret) (this run's newest 2, run 1's untouched)"
T 2 ret --max_steps 8 --resume auto --learning_rate 1e-3
expect_err "a resume past --max_steps" "$TMP/ret/checkpoint-9.h5: the checkpoint is at step 9, past this run's --max_steps 8"
mpi 2 train --model test-mini --data "$D" --max_length 16 --per_device_train_batch_size 4 --out "$TMP/ret" --seed 9 \
    --max_steps 12 --resume auto --learning_rate 1e-3
expect_err "a resume with another --max_length" \
    "$TMP/ret/checkpoint-9.h5: saved with --max_length 32, this run has 16: the data position would not carry over"

# --- 2. the lock on --out -----------------------------------------------------------------------
mkdir -p "$TMP/lk"
flock "$TMP/lk/.zinf.lock" sleep 4 &
FL=$!
sleep 0.5
t0=$(date +%s)
OUTPUT=$(ZINF_OUT_LOCK_WAIT=1 "$MPIRUN" --oversubscribe -np 2 "$ZINF" train --model test-mini --data "$D" \
    --max_length 32 --per_device_train_batch_size 4 --max_steps 2 --out "$TMP/lk" 2>&1)
RC=$?
expect_err "a run into a locked --out" "--out $TMP/lk: another zinf run is using this directory" "waited 1 s for it to end"
[ ! -e "$TMP/lk/metrics.jsonl" ] && pass || fail "the refused run wrote metrics.jsonl"
# a run that waits long enough gets the directory once the holder ends
OUTPUT=$(ZINF_OUT_LOCK_WAIT=30 "$MPIRUN" --oversubscribe -np 2 "$ZINF" train --model test-mini --data "$D" \
    --max_length 32 --per_device_train_batch_size 4 --max_steps 2 --out "$TMP/lk" 2>&1)
RC=$?
expect_ok "a run that waits for the lock"
[ $(($(date +%s) - t0)) -ge 3 ] && pass || fail "the waiting run did not wait for the holder"
wait "$FL"
OUTPUT=$(ZINF_OUT_LOCK_WAIT=x "$ZINF" train --model test-mini --data "$D" --out "$TMP/lk2" 2>&1)
RC=$?
expect_err "ZINF_OUT_LOCK_WAIT=x" "ZINF_OUT_LOCK_WAIT=x: expected seconds >= 0"
OUTPUT=$(ZINF_OUT_LOCK_WAIT=-3 "$ZINF" train --model test-mini --data "$D" --out "$TMP/lk2" 2>&1)
RC=$?
expect_err "ZINF_OUT_LOCK_WAIT=-3" "ZINF_OUT_LOCK_WAIT=-3: expected seconds >= 0"
# two runs started together: one trains, the other is refused; the checkpoints verify and
# metrics.jsonl holds one run's steps
for i in 1 2; do
    ZINF_OUT_LOCK_WAIT=0 "$MPIRUN" --oversubscribe -np 2 "$ZINF" train --model test-mini --data "$D" --max_length 32 \
        --per_device_train_batch_size 4 --logging_steps 1 --max_steps 12 --save_steps 1 --out "$TMP/conc" \
        > "$TMP/conc$i.txt" 2>&1 &
done
wait
ok=0
for i in 1 2; do grep -q "parameters agree bit for bit" "$TMP/conc$i.txt" && ok=$((ok + 1)); done
[ "$ok" -eq 1 ] && pass || fail "$ok of 2 concurrent runs trained"
cat "$TMP/conc1.txt" "$TMP/conc2.txt" | grep -q "another zinf run is using this directory\|holds another run's checkpoints" &&
    pass || fail "the second concurrent run was not refused by name"
OUTPUT=$("$ZINF" ckpt verify "$TMP/conc/checkpoint-12.h5" 2>&1) && pass || fail "after two concurrent runs: $OUTPUT"
[ "$(metric "$TMP/conc/metrics.jsonl" step | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 10 11 12 " ] && pass ||
    fail "metrics.jsonl after two concurrent runs: $(metric "$TMP/conc/metrics.jsonl" step | tr '\n' ' ')"

# --- 3. what an interrupted save left goes ------------------------------------------------------
head -c 100000 /dev/zero > "$TMP/ret/checkpoint-12.h5.tmp"
echo x > "$TMP/ret/latest.tmp"
T 2 ret --max_steps 10 --resume auto --learning_rate 1e-3 --save_steps 0
expect_ok "a resume beside leftovers"
expect_has "a resume beside leftovers" "removed $TMP/ret/checkpoint-12.h5.tmp, left by an interrupted save" \
    "removed $TMP/ret/latest.tmp, left by an interrupted save"
[ ! -e "$TMP/ret/checkpoint-12.h5.tmp" ] && [ ! -e "$TMP/ret/latest.tmp" ] && pass || fail "the leftovers stay"

# --- 4. edited files: h5py edits, zinf (load and verify alike) refuses ----------------------------
PY="$TMP/py"
if python3 -c 'import h5py, numpy' 2>/dev/null || python3 -m pip install -q --target "$PY" h5py numpy >/dev/null 2>&1; then
    export PYTHONPATH="$PY${PYTHONPATH:+:$PYTHONPATH}"
    C="$TMP/ret/checkpoint-9.h5"
    # edit NAME PYTHON: a copy of C as $TMP/ed/NAME/checkpoint-9.h5 edited by PYTHON (f is the file)
    edit() {
        rm -rf "$TMP/ed/$1" && mkdir -p "$TMP/ed/$1" && cp "$C" "$TMP/ed/$1/"
        python3 -c "import h5py, numpy as np
f = h5py.File('$TMP/ed/$1/checkpoint-9.h5', 'r+')
$2
f.close()" && pass || fail "h5py edit $1"
    }
    # refused NAME TEXT: both a resume and ckpt verify refuse the edited file with TEXT
    refused() {
        local out
        T 2 "ed/$1" --max_steps 12 --resume auto --learning_rate 1e-3
        expect_err "resume of $1" "$TMP/ed/$1/checkpoint-9.h5: $2"
        out=$OUTPUT
        run ckpt verify "$TMP/ed/$1/checkpoint-9.h5"
        expect_err "verify of $1" "$TMP/ed/$1/checkpoint-9.h5: $2"
        # and export, which writes nothing, not even its --out
        run ckpt export "$TMP/ed/$1/checkpoint-9.h5" --out "$TMP/ed/$1/hf"
        expect_err "export of $1" "$TMP/ed/$1/checkpoint-9.h5: $2"
        [ ! -e "$TMP/ed/$1/hf" ] && pass || fail "the refused export of $1 left $(ls "$TMP/ed/$1/hf")"
        OUTPUT=$out
    }
    edit step7 "f.attrs['step'] = np.int64(7); f.attrs['opt_steps'] = np.int64(7)"
    refused step7 "the root attributes or /meta/config do not match their checksum"
    edit stepneg "f.attrs['step'] = np.int64(-5)"
    refused stepneg "attribute step is -5, out of range"
    edit scale "f.attrs['loss_scale'] = np.float64('nan')"
    refused scale "attribute loss_scale is nan, not a normal positive float"
    # edits a writer could make with the checksum recomputed: each is caught by its own rule
    edit scaletiny "f.attrs['loss_scale'] = np.float64(1e-320)"
    refused scaletiny "attribute loss_scale is 9.99989e-321, not a normal positive float"
    edit stepfloat "f.attrs['step'] = np.float64(9.5)"
    refused stepfloat "attribute step is not stored as an integer"
    edit maxlen0 "f.attrs['max_length'] = np.int64(0)"
    refused maxlen0 "attribute max_length is 0, out of range"
    edit nanm "d = f['master/lnf.weight']; x = d[...]; x[3] = np.nan; d[...] = x"
    refused nanm "dataset /master/lnf.weight holds NaN at element 3"
    edit infm "d = f['optim/m/lnf.bias']; x = d[...]; x[2] = -np.inf; d[...] = x"
    refused infm "dataset /optim/m/lnf.bias holds -Inf at element 2"
    edit negv "d = f['optim/v/lnf.weight']; x = d[...]; x[5] = -1.0; d[...] = x"
    refused negv "dataset /optim/v/lnf.weight holds a negative second moment at element 5"
    edit config "del f['meta/config']; f['meta/config'] = np.bytes_(b'{}')"
    refused config "the root attributes or /meta/config do not match their checksum"
    edit f64 "x = f['master/lnf.bias'][...].astype(np.float64); a = dict(f['master/lnf.bias'].attrs); del f['master/lnf.bias']
d = f.create_dataset('master/lnf.bias', data=x)
for k, v in a.items(): d.attrs[k] = v"
    refused f64 "dataset /master/lnf.bias is not float32 (little-endian)"
    # ckpt info says the one line, not half a report before it
    run ckpt info "$TMP/ed/f64/checkpoint-9.h5"
    expect_err "ckpt info of f64" "$TMP/ed/f64/checkpoint-9.h5: dataset /master/lnf.bias is not float32 (little-endian)"
    [ "$(count_lines "optimizer steps")" = 0 ] && pass || fail "ckpt info printed its report before the error"
    edit extra "f['optim/m/extra'] = np.zeros(3, np.float32)"
    refused extra "/optim/m/extra is not a tensor of the model the attributes describe"
    # format 1: the file as zinf wrote it before run ids and the root checksum; it loads
    T 2 f2 --max_steps 12 --save_steps 0 --resume "$C" --learning_rate 1e-3
    expect_ok "resume from format 2"
    H2=$(hash_of)
    # (format 1 named the model by GPT-2's six integers; test-mini's are written out here)
    edit fmt1 "for k in ('run_id', 'max_length', 'meta_checksum', 'model_type', 'model_config'): del f.attrs[k]
for k, v in dict(n_layer=2, n_embd=64, n_head=4, vocab_size=256, padded_vocab=256, n_positions=64).items():
    f.attrs[k] = np.int64(v)
f.attrs['format_version'] = np.int64(1)"
    T 2 ed/fmt1 --max_steps 12 --save_steps 0 --resume auto --learning_rate 1e-3
    expect_ok "resume from format 1"
    [ -n "$H2" ] && [ "$(hash_of)" = "$H2" ] && pass || fail "format 1 resumed to $(hash_of), format 2 to $H2"
    run ckpt verify "$TMP/ed/fmt1"
    expect_ok "verify of format 1"
else
    echo "test_ckpt_guard.sh: h5py unavailable (no PyPI): the edited-file checks were not run"
fi

# a checkpoint named with leading zeros (checkpoint-0009.h5, as a user's copy may be): --resume auto
# and a directory --resume open the file by its own name, not by the name zinf would give step 9
mkdir -p "$TMP/zp"
cp "$TMP/ret/checkpoint-9.h5" "$TMP/zp/checkpoint-0009.h5"
T 2 zp --max_steps 10 --save_steps 0 --learning_rate 1e-3 --resume auto
expect_ok "resume from checkpoint-0009.h5"
expect_has "resume from checkpoint-0009.h5" "zinf: resumed from $TMP/zp/checkpoint-0009.h5 after step 9"
run ckpt info "$TMP/zp"
expect_has "ckpt info of a directory of checkpoint-0009.h5" "checkpoint       $TMP/zp/checkpoint-0009.h5"

# A FIFO where a checkpoint, a safetensors file or a config.json is read: one line naming it, at
# once (HDF5's and jansson's opens of a FIFO wait for a writer forever, and a stop signal could
# not end that wait). `timeout` ends the check if it hangs.
mkdir -p "$TMP/fifo"
mkfifo "$TMP/fifo/checkpoint-3.h5"
OUTPUT=$(timeout 60 "$ZINF" train --model test-mini --data "$D" --max_length 32 --out "$TMP/fo1" --resume "$TMP/fifo/checkpoint-3.h5" 2>&1); RC=$?
expect_err "a FIFO to resume from" "$TMP/fifo/checkpoint-3.h5: is a FIFO, not a regular file"
OUTPUT=$(timeout 60 "$ZINF" ckpt info "$TMP/fifo/checkpoint-3.h5" 2>&1); RC=$?
expect_err "ckpt info of a FIFO" "$TMP/fifo/checkpoint-3.h5: is a FIFO, not a regular file"
run train --model test-mini --data "$D" --max_length 32 --max_steps 1 --out "$TMP/fo2"
run ckpt export "$TMP/fo2" --out "$TMP/fohf"
expect_ok "an HF directory to break"
for f in model.safetensors config.json; do
    mv "$TMP/fohf/$f" "$TMP/fohf/$f.bak"
    mkfifo "$TMP/fohf/$f"
    OUTPUT=$(timeout 60 "$ZINF" train --model test-mini --data "$D" --max_length 32 --out "$TMP/fo3" --init_from "$TMP/fohf" 2>&1); RC=$?
    expect_err "a FIFO as $f" "$TMP/fohf/$f: is a FIFO, not a regular file"
    rm "$TMP/fohf/$f"
    mv "$TMP/fohf/$f.bak" "$TMP/fohf/$f"
done
# a NaN or an infinity in the weights (a corrupted file): one line naming the tensor and element, on
# two ranks once, and from zinf generate too (it used to train until the first step's norm)
mkdir -p "$TMP/fonan"
cp "$TMP/fohf/config.json" "$TMP/fohf/generation_config.json" "$TMP/fonan/"
if python3 - "$TMP/fohf/model.safetensors" "$TMP/fonan/model.safetensors" <<'PY'
import json, struct, sys
d = bytearray(open(sys.argv[1], 'rb').read())
n = struct.unpack('<Q', d[:8])[0]
a = json.loads(bytes(d[8:8 + n]))['transformer.ln_f.weight']['data_offsets'][0]
for k, v in ((3, float('nan')), (5, float('inf'))):
    d[8 + n + a + 4 * k:8 + n + a + 4 * k + 4] = struct.pack('<f', v)
open(sys.argv[2], 'wb').write(d)
PY
then
    mpi 2 train --model test-mini --data "$D" --max_length 32 --out "$TMP/fo4/a/b" --init_from "$TMP/fonan"
    expect_err "NaN in the weights" "--init_from $TMP/fonan: unit lnf: tensor lnf.weight holds NaN at element 3: the weights are corrupted"
    [ "$(count_lines "holds NaN")" = 1 ] && pass || fail "the NaN is said $(count_lines "holds NaN") times"
    # the refused start leaves no --out behind (it made the directory, and nothing was written there)
    [ ! -e "$TMP/fo4" ] && pass || fail "the refused --init_from left $TMP/fo4: $(ls -AR "$TMP/fo4")"
    run generate --model "$TMP/fonan" --prompt_ids 1,2
    expect_err "NaN in generate's weights" "$TMP/fonan: tensor lnf.weight holds NaN at element 3"
else
    fail "python3 could not write the NaN file"
fi
# an export whose --out holds a directory where a file goes: refused before anything is written,
# so the config.json already there is not replaced
mkdir -p "$TMP/fodir/generation_config.json/x"
echo OLD > "$TMP/fodir/config.json"
run ckpt export "$TMP/fo2" --out "$TMP/fodir"
expect_err "an export over a directory" "--out $TMP/fodir/generation_config.json: is a directory, not a regular file"
[ "$(cat "$TMP/fodir/config.json")" = OLD ] && [ ! -e "$TMP/fodir/model.safetensors" ] && pass ||
    fail "the refused export changed $TMP/fodir: $(ls "$TMP/fodir")"
finish
