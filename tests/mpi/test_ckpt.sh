#!/bin/sh
# HDF5 checkpoints on the CPU backend: N steps, save, resume, M more steps gives the losses and
# parameters of N+M uninterrupted steps bit for bit, at every ZeRO stage and offload placement;
# a checkpoint restarts at another world size and stage; a rank killed during a save leaves the
# previous checkpoint whole; SIGUSR1 stops the job with a checkpoint and status 75; truncated,
# corrupted and mismatched checkpoints are refused with one line naming the cause; h5py reads the
# tensors whose hash zinf reports.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
D="$TMP/add_train_*.bin"
mkdir -p "$TMP/nv"

OPT_CPU=', "offload_optimizer": {"device": "cpu"}'
OFF_NVME=', "offload_optimizer": {"device": "nvme", "nvme_path": "'$TMP/nv'"}, "offload_param": {"device": "nvme", "nvme_path": "'$TMP/nv'", "max_in_cpu": 0}'
# cfg NAME NP STAGE ZERO-EXTRA: a global batch of 12, AdamW with decay, clipping, warmup
cfg() {
    printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": %d, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_max_lr": 0.003}},
 "zero_optimization": {"stage": %d %s}}\n' $((12 / $2)) "$3" "$4" > "$TMP/$1.json"
}
# trn NAME NP OUT STEPS [flags]: train with NAME's config
trn() {
    local name=$1 np=$2 out=$3 steps=$4; shift 4
    # a flag is given once (zinf refuses a repeated one): seed 5 unless ARGS choose one
    local seed="--seed 5"
    case " $* " in *" --seed "*) seed="" ;; esac
    # shellcheck disable=SC2086
    mpi "$np" train --model test-mini --data "$D" --max_length 32 --max_steps "$steps" --logging_steps 1 \
        --config "$TMP/$name.json" --out "$TMP/$out" $seed --swap_engine psync "$@"
}
losses() { metric "$TMP/$1/metrics.jsonl" loss | tr -d ' ' | grep -v '^$' | tail -n "$2"; }

# --- 1. exact resume: 3 steps, save, 3 more = 6 uninterrupted, bit for bit ------------------------
for c in "1 0" "2 1" "2 2" "3 3" "2 3 cpu" "2 3 nvme"; do
    set -- $c
    np=$1 st=$2 off=${3:-}
    extra=""
    [ "$off" = cpu ] && extra=$OPT_CPU
    [ "$off" = nvme ] && extra=$OFF_NVME
    n=r$np$st$off
    cfg "$n" "$np" "$st" "$extra"
    trn "$n" "$np" "$n.full" 6 --save_steps 0
    expect_ok "$n: uninterrupted"
    H=$(hash_of)
    trn "$n" "$np" "$n.part" 3 --save_steps 3
    expect_ok "$n: first 3 steps"
    [ -f "$TMP/$n.part/checkpoint-3.h5" ] && [ "$(cat "$TMP/$n.part/latest")" = checkpoint-3.h5 ] && pass ||
        fail "$n: no checkpoint-3.h5 named by latest"
    trn "$n" "$np" "$n.part" 6 --save_steps 0 --resume auto
    expect_ok "$n: resumed"
    expect_has "$n: resumed" "resumed from $TMP/$n.part/checkpoint-3.h5 after step 3"
    # the start-up line: the ZeRO states' and the checkpoint's parts within the whole so far
    printf '%s\n' "$OUTPUT" |
        sed -n 's/^zinf: start-up \([0-9.]*\) s: ZeRO states allocated and initialized in \([0-9.]*\) s on rank 0, the checkpoint read in \([0-9.]*\) s$/\1 \2 \3/p' |
        awk '{ ok = $1 + 0.1 >= $2 + $3 } END { exit !(NR == 1 && ok) }' && pass ||
        fail "$n: no start-up line whose parts fit its whole: $(printf '%s\n' "$OUTPUT" | grep start-up)"
    [ -n "$H" ] && [ "$(hash_of)" = "$H" ] && pass || fail "$n: parameters after resuming $(hash_of), uninterrupted $H"
    [ -n "$(losses "$n.full" 3)" ] && [ "$(losses "$n.part" 3)" = "$(losses "$n.full" 3)" ] && pass ||
        fail "$n: the resumed losses differ"
    [ "$(metric "$TMP/$n.part/metrics.jsonl" step | tr '\n' ' ')" = "1 2 3 4 5 6 " ] && pass ||
        fail "$n: metrics.jsonl steps after resuming: $(metric "$TMP/$n.part/metrics.jsonl" step | tr '\n' ' ')"
done

# --- 2. another world size and stage continue from the same state -------------------------------
cfg w3 3 1 ""
cfg w1 1 0 ""
for to in "w3 3" "w1 1"; do
    set -- $to
    rm -rf "$TMP/x$1"; mkdir -p "$TMP/x$1"; cp "$TMP/r33.part/checkpoint-3.h5" "$TMP/x$1/"
    trn "$1" "$2" "x$1" 6 --save_steps 0 --resume auto
    expect_ok "stage 3 on 3 ranks resumed as $1"
    got=$(losses "x$1" 3 | tr '\n' ' ') want=$(losses r33.full 3 | tr '\n' ' ')
    ok=1
    for i in 1 2 3; do
        close "$(echo "$got" | cut -d' ' -f$i)" "$(echo "$want" | cut -d' ' -f$i)" 1e-5 || ok=0
    done
    [ "$ok" = 1 ] && pass || fail "resumed as $1: losses $got, the uninterrupted run's $want"
done

# another placement: the checkpoint of the run with optimizer and parameters on NVMe continues
# with everything on the device (same world size and stage: the same bits)
rm -rf "$TMP/xp"; mkdir -p "$TMP/xp"; cp "$TMP/r23nvme.part/checkpoint-3.h5" "$TMP/xp/"
cfg xp 2 3 ""
trn xp 2 xp 6 --save_steps 0 --resume auto
expect_ok "NVMe placement resumed on the device"
H=$(hash_of)
trn r23nvme 2 xpref 6 --save_steps 0
[ -n "$H" ] && [ "$(hash_of)" = "$H" ] && pass || fail "NVMe checkpoint resumed without offload: parameters differ"

# --- 3. a rank killed during a save: the previous checkpoint stays, and is resumed from ----------
cfg k2 2 3 ""
ZINF_CKPT_FAULT="rank=1,step=4,after=7" trn k2 2 k 6 --save_steps 2
[ "$RC" -ne 0 ] && pass || fail "a rank killed during the save at step 4: the job succeeded"
[ "$(cat "$TMP/k/latest")" = checkpoint-2.h5 ] && [ ! -f "$TMP/k/checkpoint-4.h5" ] && pass ||
    fail "after the killed save: latest is '$(cat "$TMP/k/latest")', checkpoint-4.h5 $(ls "$TMP/k")"
trn k2 2 k 6 --save_steps 0 --resume auto
expect_ok "resume after the killed save"
expect_has "resume after the killed save" "after step 2"
trn k2 2 kfull 6 --save_steps 0
[ "$(hash_of)" = "$(trn k2 2 k 6 --save_steps 0 --resume "$TMP/k/checkpoint-2.h5"; hash_of)" ] && pass ||
    fail "resuming from checkpoint-2.h5 does not reproduce the uninterrupted run"

# an I/O error on one rank alone, in a save and in a load (ZINF_CKPT_FAULT kind=eio): the other
# rank must not wait for it in the next collective HDF5 call; the job ends in seconds with one
# line naming the rank, the file and the dataset; a failed save leaves the previous checkpoint
# and `latest` as they were, and no .tmp
# one_line WHAT TEXT: the output has exactly one error line, and it has TEXT
one_line() {
    CHECKS=$((CHECKS + 1))
    [ "$(printf '%s\n' "$OUTPUT" | grep -c 'zinf: error:')" = 1 ] || { fail "$1: not one error line"; printf '%s\n' "$OUTPUT" | grep 'error' >&2; }
    expect_err "$1" "$2"
}
rm -rf "$TMP/e"
mkdir -p "$TMP/e"
cp "$TMP/k/checkpoint-2.h5" "$TMP/e/"
start=$(date +%s)
OUTPUT=$(ZINF_CKPT_FAULT="rank=1,step=4,after=9,kind=eio" timeout 120 "$MPIRUN" --oversubscribe -np 2 "$ZINF" train \
    --model test-mini --data "$D" --max_length 32 --max_steps 6 --logging_steps 1 --config "$TMP/k2.json" \
    --out "$TMP/e" --seed 5 --swap_engine psync --save_steps 2 --resume auto 2>&1); RC=$?
[ "$RC" -ne 124 ] && [ $(($(date +%s) - start)) -lt 60 ] && pass || fail "an I/O error on rank 1 during a save: the job hung (exit $RC)"
one_line "an I/O error on rank 1 during a save" "rank 1: $TMP/e/checkpoint-4.h5.tmp: cannot write dataset"
[ "$(cat "$TMP/e/latest" 2>/dev/null)" = checkpoint-2.h5 ] || [ ! -e "$TMP/e/latest" ] && [ ! -e "$TMP/e/checkpoint-4.h5" ] &&
    [ -z "$(find "$TMP/e" -name '*.tmp')" ] && pass || fail "after the failed save: $(ls "$TMP/e")"
start=$(date +%s)
OUTPUT=$(ZINF_CKPT_FAULT="rank=1,step=2,after=5,kind=eio" timeout 120 "$MPIRUN" --oversubscribe -np 2 "$ZINF" train \
    --model test-mini --data "$D" --max_length 32 --max_steps 6 --logging_steps 1 --config "$TMP/k2.json" \
    --out "$TMP/e" --seed 5 --swap_engine psync --save_steps 0 --resume "$TMP/e/checkpoint-2.h5" 2>&1); RC=$?
[ "$RC" -ne 124 ] && [ $(($(date +%s) - start)) -lt 60 ] && pass || fail "an I/O error on rank 1 during a load: the job hung (exit $RC)"
one_line "an I/O error on rank 1 during a load" "rank 1: $TMP/e/checkpoint-2.h5: cannot read dataset"

# --- 4. SIGUSR1: finish the step, save, exit 75; --resume auto continues -------------------------
# resumes_exactly WHAT CFG NP OUT MORE: the run stopped in OUT resumes for MORE steps past its
# checkpoint and ends with the parameters of the uninterrupted run of as many steps
resumes_exactly() {
    local S
    S=$(sed -n 's/^checkpoint-\([0-9]*\)\.h5$/\1/p' "$TMP/$4/latest")
    [ -n "$S" ] || { fail "$1: no checkpoint named by latest"; return; }
    trn "$2" "$3" "$4" $((S + $5)) --save_steps 0 --resume auto
    expect_ok "resume after $1"
    H=$(hash_of)
    # the step the signal stopped at is logged too: the two runs' metrics have every step once
    [ "$(metric "$TMP/$4/metrics.jsonl" step | tr '\n' ' ')" = "$(seq $((S + $5)) | tr '\n' ' ')" ] && pass ||
        fail "$1: metrics.jsonl steps after resuming: $(metric "$TMP/$4/metrics.jsonl" step | tr '\n' ' ')"
    trn "$2" "$3" "$4.full" $((S + $5)) --save_steps 0
    [ -n "$H" ] && [ "$(hash_of)" = "$H" ] && pass || fail "$1 at step $S: the resumed parameters differ from the uninterrupted run's"
}
cfg s2 2 2 ""
"$MPIRUN" --oversubscribe -np 2 "$ZINF" train --model test-mini --data "$D" --max_length 32 --max_steps 3000 \
    --logging_steps 1 --config "$TMP/s2.json" --out "$TMP/sig" --seed 5 --save_steps 0 > "$TMP/sig.log" 2>&1 &
bg=$!
i=0
while [ ! -s "$TMP/sig/metrics.jsonl" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
sleep 1
kill -USR1 $bg # mpirun passes SIGUSR1 on to the ranks
wait $bg
echo $? > "$TMP/sig.rc"
[ "$(cat "$TMP/sig.rc")" = 75 ] && pass || { fail "SIGUSR1: exit $(cat "$TMP/sig.rc"), want 75"; tail -5 "$TMP/sig.log" >&2; }
grep -q "stopped by signal" "$TMP/sig.log" && pass || fail "SIGUSR1: no 'stopped by signal' line"
resumes_exactly SIGUSR1 s2 2 sig 2

# SIGTERM twice on a singleton run (no mpirun): the second signal, during the save, changes nothing
cfg t1 1 3 ""
"$ZINF" train --model test-mini --data "$D" --max_length 32 --max_steps 3000 --logging_steps 1 \
    --config "$TMP/t1.json" --out "$TMP/term" --seed 5 --save_steps 0 > "$TMP/term.log" 2>&1 &
bg=$!
i=0
while [ ! -s "$TMP/term/metrics.jsonl" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
kill -TERM $bg
i=0
while [ ! -f "$TMP/term/checkpoint-"*.h5.tmp ] && kill -0 $bg 2>/dev/null && [ $i -lt 200 ]; do sleep 0.01; i=$((i + 1)); done
kill -TERM $bg 2>/dev/null
wait $bg
rc=$?
[ "$rc" = 75 ] && pass || { fail "SIGTERM twice: exit $rc, want 75"; tail -5 "$TMP/term.log" >&2; }
resumes_exactly "SIGTERM twice" t1 1 term 1

# --- 5. damaged and mismatched checkpoints are refused with their cause --------------------------
C="$TMP/r22.part/checkpoint-3.h5"
mkdir -p "$TMP/bad"
head -c 3000 "$C" > "$TMP/bad/trunc.h5"
trn r22 2 bad 6 --resume "$TMP/bad/trunc.h5"
expect_err "a truncated checkpoint" "$TMP/bad/trunc.h5" "not a readable HDF5 file"
cfg tiny 2 2 ""
mpi 2 train --model test-tiny --data "$D" --max_length 32 --max_steps 6 --config "$TMP/tiny.json" --out "$TMP/bad" \
    --resume "$C"
expect_err "another model" "$C" "the checkpoint's model has"
trn r22 2 bad2 6 --resume "$C" --seed 6
expect_err "another seed" "saved with --seed 5"
trn r22 2 bad3 6 --resume "$TMP/none.h5"
expect_err "a missing checkpoint" "--resume $TMP/none.h5"
rm -rf "$TMP/empty"; trn r22 2 empty 2 --save_steps 0 --resume auto
expect_ok "--resume auto with no checkpoint starts fresh"

# --- 6. retention: --save_total_limit keeps the newest -------------------------------------------
trn r22 2 keep 5 --save_steps 1 --save_total_limit 2
expect_ok "save_total_limit"
[ "$(ls "$TMP/keep" | grep '\.h5' | tr '\n' ' ')" = "checkpoint-4.h5 checkpoint-5.h5 " ] && pass ||
    fail "save_total_limit 2 left: $(ls "$TMP/keep" | tr '\n' ' ')"

# --- 7. h5py (from PyPI where it can be installed): the tensors are the ones zinf hashed, and a
# --- flipped bit in a dataset is refused naming it
PY="$TMP/py"
if python3 -c 'import h5py, numpy' 2>/dev/null || python3 -m pip install -q --target "$PY" h5py numpy >/dev/null 2>&1; then
    export PYTHONPATH="$PY${PYTHONPATH:+:$PYTHONPATH}"
    H=$(trn r22 2 h5 6 --save_steps 6; hash_of)
    got=$(python3 - "$TMP/h5/checkpoint-6.h5" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
m = f["master"]
names = []
m.visit(lambda n: names.append(n) if isinstance(m[n], h5py.Dataset) else None)
# the model's order: by unit, then by offset in the unit (the attributes say where each sits)
names.sort(key=lambda n: (int(m[n].attrs["unit_index"]), int(m[n].attrs["unit_offset"])))
# zinf's end-of-run hash: per unit, the sum modulo 2^64 of splitmix64's finalizer over each value's
# bits keyed by its index in the unit, folded in unit order by an FNV-1a step
def mix(x):
    x = x ^ (x >> np.uint64(30)); x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27)); x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
units = {}
for n in names:
    units.setdefault(int(m[n].attrs["unit_index"]), []).append(np.asarray(m[n], dtype="<f4").ravel())
h = 1469598103934665603
with np.errstate(over="ignore"):
    for u in sorted(units):
        bits = np.concatenate(units[u]).view(np.uint32).astype(np.uint64)
        idx = np.arange(bits.size, dtype=np.uint64)
        s = int(mix((idx << np.uint64(32)) ^ bits ^ np.uint64(0x9E3779B97F4A7C15)).sum(dtype=np.uint64))
        h = ((h ^ s) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
print(f"{h:016x} {int(f.attrs['step'])}")
PY
)
    [ "$got" = "$H 6" ] && pass || fail "h5py: the masters hash to '$got', zinf reported '$H 6'"
    # stage3_gather_16bit_weights_on_model_save: a weights file beside each checkpoint, in the
    # compute dtype (fp32 on the CPU backend): the masters themselves
    sed 's/"stage": 3/"stage": 3, "stage3_gather_16bit_weights_on_model_save": true/' "$TMP/r33.json" > "$TMP/g16.json"
    trn g16 3 g16 4 --save_steps 2 --save_total_limit 1
    expect_ok "stage3_gather_16bit_weights_on_model_save"
    [ -f "$TMP/g16/checkpoint-4.weights/config.json" ] && [ -f "$TMP/g16/checkpoint-4.weights/model.safetensors" ] &&
        [ ! -e "$TMP/g16/checkpoint-2.weights" ] && pass || fail "16-bit weights on save: $(ls "$TMP/g16" | tr '\n' ' ')"
    # a Hugging Face directory whose tensors are the checkpoint's masters (fp32 on the CPU backend)
    out=$(python3 "${top_srcdir:-.}/tests/mpi/st_check.py" "$TMP/g16/checkpoint-4.weights" \
        --ckpt "$TMP/g16/checkpoint-4.h5" --vocab 256 2>&1)
    case "$out" in "ok "*) pass ;; *) fail "the weights directory against the checkpoint's masters: $out" ;; esac
    cp "$TMP/h5/checkpoint-6.h5" "$TMP/bad/flip.h5"
    python3 - "$TMP/bad/flip.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    off = f["optim/m/blocks.1.mlp.fc.weight"].id.get_offset()
with open(sys.argv[1], "r+b") as fp:
    fp.seek(off + 101)
    b = fp.read(1)
    fp.seek(off + 101)
    fp.write(bytes([b[0] ^ 0x10]))
PY
    trn r22 2 bad4 8 --resume "$TMP/bad/flip.h5"
    expect_err "a flipped bit" "$TMP/bad/flip.h5" "dataset /optim/m/blocks.1.mlp.fc.weight: checksum mismatch"
else
    echo "h5py cannot be installed here: its checks are skipped"
fi

finish
