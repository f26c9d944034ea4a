#!/bin/sh
# DeepSpeed's monitor blocks: "tensorboard" writes an event file that TensorBoard's own reader
# (the tensorboard package's EventAccumulator, from PyPI) reads, with every record's masked
# CRC-32C checked again here by a Python CRC-32C written in the test; "csv_monitor" writes
# DeepSpeed's CSV files; both hold, for every step, the loss, learning rate and (fp16) loss scale
# of metrics.jsonl at x = the samples read so far (step x train_batch_size). "wandb" is one
# warning line. HF's --report_to tensorboard writes train/loss, train/learning_rate,
# train/grad_norm, train/epoch at each logged step and eval/loss at each evaluation, at the global
# step, in OUT/runs/DATE_HOST. Without PyPI the TensorBoard part cannot run: exit 77, saying why.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
cat > "$TMP/ds.json" <<J
{"train_batch_size": 8, "fp16": {"enabled": true, "initial_scale_power": 12},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_type": "linear"}},
 "tensorboard": {"enabled": true, "output_path": "$TMP/tb", "job_name": "job1"},
 "csv_monitor": {"enabled": true, "output_path": "$TMP/csv/", "job_name": "job2"},
 "wandb": {"enabled": true, "project": "p"}}
J
mpi 2 train --model test-mini --data "$TMP/add_train_*.bin" --max_length 32 --config "$TMP/ds.json" --max_steps 6 \
    --logging_steps 1 --learning_rate 1e-3 --save_steps 0 --out "$TMP/o"
expect_ok "train with tensorboard and csv_monitor"
expect_has "wandb" "wandb is a DeepSpeed key zinf does not implement; it has no effect (zinf sends nothing off the machine: use the tensorboard block, or metrics.jsonl)"
M="$TMP/o/metrics.jsonl"
# the reference: metrics.jsonl's step, loss, lr, loss_scale; x = step x 8
python3 - "$M" > "$TMP/ref.txt" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "loss" in r and "step" in r: print(r["step"] * 8, r["loss"], r["lr"], r["loss_scale"])
PY
[ "$(wc -l < "$TMP/ref.txt")" -eq 6 ] && pass || fail "metrics.jsonl has $(wc -l < "$TMP/ref.txt") step records, not 6"

# --report_to tensorboard, logging every 2 steps, evaluating every 3: HF's tags at the global step
run data --input "$TMP/add.txt" --out "$TMP/v" --val_fraction 0.1
mpi 1 train --model test-mini --data "$TMP/v_train_*.bin" --val "$TMP/v_val_*.bin" --max_length 32 \
    --per_device_train_batch_size 4 --max_steps 6 --logging_steps 2 --eval_steps 3 --learning_rate 1e-3 \
    --save_steps 0 --report_to tensorboard --out "$TMP/hf"
expect_ok "train --report_to tensorboard"
expect_has "train --report_to tensorboard" "TensorBoard scalars (--report_to) in $TMP/hf/runs/"
NSEQ=$(printf '%s\n' "$OUTPUT" | sed -n 's/^zinf: data .*: \([0-9]*\) sequences of 32 tokens.*/\1/p')
run train --model test-mini --data "$TMP/v_train_*.bin" --max_steps 1 --report_to wandb --out "$TMP/hfw"
expect_err "--report_to wandb" "--report_to wandb: zinf reports to tensorboard or none"
run train --model test-mini --data "$TMP/v_train_*.bin" --max_steps 1 --logging_dir "$TMP/ld" --out "$TMP/hfl"
expect_err "--logging_dir alone" "--logging_dir $TMP/ld: it is where --report_to tensorboard writes"
python3 - "$TMP/hf/metrics.jsonl" > "$TMP/hfref.txt" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "loss" in r and "step" in r: print(r["step"], r["loss"], r["lr"], r["grad_norm"], r.get("val_loss", "-"))
PY

# csv_monitor: DeepSpeed's files, "step,NAME" then one "STEP,VALUE" line per step, \r\n ended
python3 - "$TMP/ref.txt" "$TMP/csv/job2" <<'PY' > "$TMP/csv.out" 2>&1 && pass || { fail "csv_monitor files"; cat "$TMP/csv.out" >&2; }
import sys, os
ref = [l.split() for l in open(sys.argv[1])]
for tag, col in (("train_loss", 1), ("lr", 2), ("loss_scale", 3)):
    raw = open(os.path.join(sys.argv[2], "Train_Samples_%s.csv" % tag), "rb").read().decode()
    lines = raw.split("\r\n")
    assert lines[-1] == "" and all("\n" not in x for x in lines), "lines must end with \\r\\n"
    assert lines[0] == "step,%s" % tag, lines[0]
    rows = [x.split(",") for x in lines[1:-1]]
    assert [int(s) for s, _ in rows] == [int(r[0]) for r in ref], (tag, rows)
    for (s, v), r in zip(rows, ref):
        want = float(r[col])
        assert abs(float(v) - want) <= 1e-6 * abs(want), (tag, s, v, want)
print("ok")
PY

# TensorBoard: the package's reader, and the CRCs checked here
PYDIR=${ZINF_TEST_PY:-${XDG_CACHE_HOME:-${HOME:-$TMP}/.cache}/zinf-test-py}
mkdir -p "$PYDIR" 2>/dev/null && [ -w "$PYDIR" ] || PYDIR="$TMP/py"
export PYTHONPATH="$PYDIR${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c "import tensorboard" >/dev/null 2>&1; then
    python3 -m pip install -q --disable-pip-version-check --target "$PYDIR" tensorboard > "$TMP/pip.log" 2>&1
fi
if ! python3 -c "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator" >/dev/null 2>&1; then
    echo "test_monitor.sh: the tensorboard package cannot be installed from PyPI here ($(tail -1 "$TMP/pip.log" 2>/dev/null)): the TensorBoard checks are skipped"
    [ "$FAILS" -eq 0 ] && exit 77
    finish; exit
fi
python3 - "$TMP/ref.txt" "$TMP/tb/job1" <<'PY' > "$TMP/tb.out" 2>&1 && pass || { fail "tensorboard events"; cat "$TMP/tb.out" >&2; }
import glob, struct, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ref = [l.split() for l in open(sys.argv[1])]
files = glob.glob(sys.argv[2] + "/events.out.tfevents.*")
assert len(files) == 1, files
# CRC-32C (Castagnoli), masked as TFRecord does, independent of zinf's
T = []
for i in range(256):
    c = i
    for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    T.append(c)
def crc(b):
    c = 0xFFFFFFFF
    for x in b: c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
raw, at, n = open(files[0], "rb").read(), 0, 0
while at < len(raw):
    h = raw[at:at + 8]; (ln,) = struct.unpack("<Q", h); (hc,) = struct.unpack("<I", raw[at + 8:at + 12])
    d = raw[at + 12:at + 12 + ln]; (dc,) = struct.unpack("<I", raw[at + 12 + ln:at + 16 + ln])
    assert hc == crc(h) and dc == crc(d), "record %d: bad CRC" % n
    at += 16 + ln; n += 1
assert n == 1 + 3 * len(ref), n  # file_version, then loss, lr, loss_scale per step
ea = EventAccumulator(sys.argv[2], size_guidance={"scalars": 0}); ea.Reload()
assert sorted(ea.Tags()["scalars"]) == ["Train/Samples/loss_scale", "Train/Samples/lr", "Train/Samples/train_loss"], ea.Tags()
for tag, col in (("Train/Samples/train_loss", 1), ("Train/Samples/lr", 2), ("Train/Samples/loss_scale", 3)):
    ev = ea.Scalars(tag)
    assert [e.step for e in ev] == [int(r[0]) for r in ref], (tag, [e.step for e in ev])
    for e, r in zip(ev, ref):
        want = float(r[col])
        assert abs(e.value - want) <= 2e-6 * abs(want), (tag, e.step, e.value, want)
print("ok")
PY
python3 - "$TMP/hfref.txt" "$TMP/hf/runs" "$NSEQ" <<'PY' > "$TMP/hf.out" 2>&1 && pass || { fail "--report_to tensorboard events"; cat "$TMP/hf.out" >&2; }
import glob, os, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ref = [l.split() for l in open(sys.argv[1])]
dirs = glob.glob(sys.argv[2] + "/*_*")
assert len(dirs) == 1, dirs
ea = EventAccumulator(dirs[0], size_guidance={"scalars": 0}); ea.Reload()
want_tags = ["eval/loss", "train/epoch", "train/grad_norm", "train/learning_rate", "train/loss"]
assert sorted(ea.Tags()["scalars"]) == want_tags, ea.Tags()
# the logged steps: 1, every 2, the last (6); evaluations every 3 and at the last
logged = [s for s in range(1, 7) if s == 1 or s % 2 == 0 or s == 6]
evals = [s for s in range(1, 7) if s % 3 == 0 or s == 6]
byst = {int(r[0]): r for r in ref}
for tag, col, steps in (("train/loss", 1, logged), ("train/learning_rate", 2, logged), ("train/grad_norm", 3, logged), ("eval/loss", 4, evals)):
    ev = ea.Scalars(tag)
    assert [e.step for e in ev] == steps, (tag, [e.step for e in ev], steps)
    for e in ev:
        want = float(byst[e.step][col])
        assert abs(e.value - want) <= 2e-6 * abs(want), (tag, e.step, e.value, want)
# train/epoch: the sequences read (4 per step) over the training sequences
nseq = int(sys.argv[3])
for e in ea.Scalars("train/epoch"):
    want = 4 * e.step / nseq
    assert abs(e.value - want) <= 1e-6 * want, ("epoch", e.step, e.value, want)
print("ok")
PY
finish
