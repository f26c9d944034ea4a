#!/bin/sh
# make check-cuda: the CUDA backend against the CPU backend, op by op and over whole training
# runs, and ZeRO stages on GPUs. Needs a GPU (exit 77 without one). Environment: ZINF, TESTS_BIN.
here=$(cd "$(dirname "$0")/../.." && pwd)
top_srcdir=${top_srcdir:-$here}
. "$top_srcdir/tests/mpi/lib.sh"
TESTS_BIN=${TESTS_BIN:-$here/tests/unit}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# CUDA_VISIBLE_DEVICES narrows what the ranks see (nvidia-smi lists every GPU regardless)
case ${CUDA_VISIBLE_DEVICES-all} in all) ;; "") ngpu=0 ;; *) ngpu=$(printf '%s\n' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .) ;; esac
# the training runs below are compared bit for bit in places: one GEMM algorithm per shape in
# every run (test_backend_ops exercises the timed choice)
export ZINF_GEMM_AUTOTUNE=0
[ "$ngpu" -ge 1 ] || { echo "run.sh: no GPU: skipped"; exit 77; }

# 1. every op on both backends (fp32 ~1e-5, bf16 ~1e-2, fp16), and bitwise-repeatable backwards
if [ "${SKIP_OPS:-0}" != 1 ]; then
    OUTPUT=$("$TESTS_BIN/test_backend_ops" 2>&1); RC=$?
    printf '%s\n' "$OUTPUT" | tail -3
    expect_ok "test_backend_ops"
fi

# 2. a short training run on the GPU follows the CPU backend (head size 64: the fast attention)
make_text "$TMP/add.txt" 6000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
printf '{"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 2, "vocab_size": 256, "n_positions": 64}\n' > "$TMP/m.json"
train1() { # train1 NAME DEVICE PRECISION-JSON STAGE NP [zinf train flags...]; CLIP= overrides 1.0
    local name=$1 dev=$2 np=$5
    printf '{"train_batch_size": 16, "gradient_clipping": '"${CLIP:-1.0}"', %s "zero_optimization": {"stage": %s},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1}}}\n' "$3" "$4" > "$TMP/$1.json"
    shift 5
    mpi "$np" train --device "$dev" --model "$TMP/m.json" --data "$TMP/add_train_*.bin" --max_length 64 \
        --max_steps 20 --logging_steps 1 --config "$TMP/$name.json" --out "$TMP/$name" --seed 11 "$@"
    expect_ok "$name"
    metric "$TMP/$name/metrics.jsonl" loss > "$TMP/$name.loss"
    metric "$TMP/$name/metrics.jsonl" grad_norm > "$TMP/$name.norm"
}
agree() { # agree A B RTOL WHAT
    paste "$TMP/$1.loss" "$TMP/$2.loss" | awk -v r="$3" 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d;
        if (d > r * $1) bad = 1; if (d / $1 > m) m = d / $1 } END { printf "  %s: max relative loss difference %.2e (bound %s)\n", "'"$4"'", m, r; exit bad || NR != 20 }' \
        && pass || { fail "$4: losses differ by more than $3 relative"; paste "$TMP/$1.loss" "$TMP/$2.loss" | head -20 >&2; }
}
train1 cpu cpu "" 0 1
train1 gpu32 cuda "" 0 1
train1 gpubf16 cuda '"bf16": {"enabled": true},' 0 1
H_BF16=$(hash_of)
agree cpu gpu32 1e-4 "CUDA fp32 vs CPU"
agree cpu gpubf16 3e-2 "CUDA bf16 vs CPU"

# 2b. the Llama family (tests/cuda/llama.sh)
LL=$(ZINF="$ZINF" top_srcdir="$top_srcdir" sh "$top_srcdir/tests/cuda/llama.sh" 2>&1); lrc=$?
printf '%s\n' "$LL" | grep -E "relative|checks" | sed 's/^/  /'
CHECKS=$((CHECKS + 1))
[ "$lrc" -eq 0 ] || { fail "tests/cuda/llama.sh"; printf '%s\n' "$LL" >&2; }

# 3. fp16 on the GPU with a scale that fits follows the CPU; from 2^32 fp16 gradients overflow and
# DeepSpeed's scaler (hysteresis 1) halves the scale on each skipped step until they fit
train1 fp16 cuda '"fp16": {"enabled": true, "initial_scale_power": 12},' 0 1
agree cpu fp16 5e-2 "CUDA fp16 vs CPU"
train1 fp16o cuda '"fp16": {"enabled": true, "initial_scale_power": 32, "hysteresis": 1},' 0 1
SK=$(metric "$TMP/fp16o/metrics.jsonl" skipped | tr '\n' ' ')
case "$SK" in true*false*) pass ;; *) fail "fp16: expected skipped steps first, then updates: $SK" ;; esac
awk '/"skipped": true/ { s = $0; sub(/.*"loss_scale": /, "", s); sub(/,.*/, "", s); if (p && s != p / 2) bad = 1; p = s } END { exit bad }' \
    "$TMP/fp16o/metrics.jsonl" && pass || fail "fp16: the scale did not halve on each skipped step"

# 3b. activation checkpointing recomputes the same activations (deterministic kernels; the
# recomputation skips the MLP projection, whose output the backward never reads)
train1 gpuac cuda '"bf16": {"enabled": true}, "activation_checkpointing": {},' 0 1
agree gpubf16 gpuac 1e-7 "CUDA bf16 with activation checkpointing vs without"
train1 gpuac2 cuda '"bf16": {"enabled": true}, "activation_checkpointing": {},' 0 1 --ac_keep_attention
agree gpubf16 gpuac2 1e-7 "CUDA bf16 with activation checkpointing, attention outputs kept, vs without"
# only the first block recomputed, and "auto", which fits this small model's activations in the
# GPU's free memory without recomputing any block, and says how much it found
train1 gpuac3 cuda '"bf16": {"enabled": true}, "activation_checkpointing": {"zinf_recompute_blocks": 1},' 0 1
agree gpubf16 gpuac3 1e-7 "CUDA bf16 recomputing 1 of 2 blocks vs without"
expect_has "zinf_recompute_blocks 1" "recomputing 1 of 2 blocks"
train1 gpuac4 cuda '"bf16": {"enabled": true}, "activation_checkpointing": {"zinf_recompute_blocks": "auto"},' 0 1
agree gpubf16 gpuac4 1e-7 "CUDA bf16 with zinf_recompute_blocks auto vs without"
expect_has "zinf_recompute_blocks auto" "activation checkpointing (auto):" "for 0 recomputed blocks fit the"

# 4. ZeRO stages 0-3 on the GPUs follow one GPU
for st in 1 2 3; do
    train1 "s${st}g1" cuda '"bf16": {"enabled": true},' $st 1
    agree gpubf16 "s${st}g1" 2e-3 "stage $st, 1 GPU vs stage 0"
    # stage 0 on one GPU with one micro-step a step reads its bf16 gradients themselves for the
    # norm and AdamW (zinf_zero_grads16); stage 1 on one GPU converts them into fp32
    # accumulators first, exactly: the same losses, norms and parameters, bit for bit
    if [ "$st" = 1 ]; then
        [ -n "$H_BF16" ] && [ "$(hash_of)" = "$H_BF16" ] && cmp -s "$TMP/gpubf16.loss" "$TMP/s1g1.loss" &&
            cmp -s "$TMP/gpubf16.norm" "$TMP/s1g1.norm" && pass ||
            fail "stage 0 reading its bf16 gradients differs from stage 1's fp32 accumulators (hashes $H_BF16, $(hash_of))"
    fi
done
if [ "$ngpu" -ge 2 ]; then
    for st in 0 1 2 3; do
        train1 "s${st}g2" cuda '"bf16": {"enabled": true},' $st 2
        agree gpubf16 "s${st}g2" 1e-2 "stage $st, 2 GPUs vs 1 GPU"
        expect_has "stage $st on 2 GPUs" "parameters agree bit for bit across 2 ranks"
    done
    # wall_clock_breakdown on GPUs: the device-time parts of a step add up to the step's time
    printf '{"train_batch_size": 16, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3}, "wall_clock_breakdown": true}\n' > "$TMP/wcb.json"
    mpi 2 train --device cuda --model "$TMP/m.json" --data "$TMP/add_train_*.bin" --max_length 64 --max_steps 6 \
        --logging_steps 1 --config "$TMP/wcb.json" --out "$TMP/wcb"
    expect_ok "wall_clock_breakdown on 2 GPUs"
    DEV=$(printf '%s\n' "$OUTPUT" | grep "device time (ms)" | tail -1)
    MS=$(metric "$TMP/wcb/metrics.jsonl" ms_per_step | tail -1)
    printf '%s\n' "$DEV" | awk -v ms="$MS" '{ n = split($0, f, "|"); s = 0
        for (i = 1; i <= n; i++) if (f[i] !~ /idle|waiting/) { v = f[i]; sub(/.*[a-z)] /, "", v); s += v }
        printf "  device parts %.2f ms, step %.2f ms\n", s, ms; d = s - ms; if (d < 0) d = -d
        exit !(NF > 0 && s > 0 && d <= 0.2 * ms + 1) }' && pass ||
        fail "wall_clock_breakdown: the device parts ($DEV) do not add up to the step ($MS ms)"
    # fp16 at stages 2-3: the gradient is divided by W in fp16 before the reduce-scatter
    for st in 2 3; do
        train1 "s${st}f16g2" cuda '"fp16": {"enabled": true, "initial_scale_power": 12},' $st 2
        agree fp16 "s${st}f16g2" 1e-2 "fp16 stage $st, 2 GPUs vs 1 GPU"
        # the losses are blind to a constant factor in the gradients (clipping); the norms are not
        paste "$TMP/fp16.norm" "$TMP/s${st}f16g2.norm" | awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d;
            if (d > 3e-2 * $1) bad = 1; if (d / $1 > m) m = d / $1 } END { printf "  fp16 stage '"$st"' gradient norms, 2 GPUs vs 1: max relative difference %.2e (bound 3e-2)\n", m; exit bad || NR != 20 }' \
            && pass || fail "fp16 stage $st on 2 GPUs: gradient norms differ from 1 GPU by more than 3e-2 relative"
    done
    # a rank that stops answering: the other one's NCCL wait times out naming the collective
    printf '{"train_batch_size": 16, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}\n' > "$TMP/hang.json"
    OUTPUT=$(ZINF_FAULT="rank=0,step=2,kind=hang" timeout 180 "$MPIRUN" --oversubscribe -np 2 "$ZINF" train --device cuda \
        --model "$TMP/m.json" --data "$TMP/add_train_*.bin" --max_length 64 --max_steps 4 --config "$TMP/hang.json" \
        --out "$TMP/hang" --comm_timeout 5 2>&1); RC=$?
    expect_err "a stuck rank on GPUs" "rank 1: timed out after" "waiting for"
else
    echo "  one GPU: the 2-GPU stage runs are skipped"
fi

# 4b. offload on the GPU: the optimizer on the CPU (stages 1-3) or on NVMe (stage 3), the stage-3
# parameter shards in host memory or on NVMe, each against the same run without offload: the host
# AdamW is the device kernel's arithmetic in fp32, so only the bf16 rounding of rare elements may
# differ (the bound is the stage comparison's)
nvme_dir zinf-offload
for np in 1 2; do
    [ "$np" -le "$ngpu" ] || continue
    for st in 1 2 3; do
        [ -f "$TMP/s${st}g$np.loss" ] || train1 "s${st}g$np" cuda '"bf16": {"enabled": true},' $st $np
        train1 "oc${st}g$np" cuda '"bf16": {"enabled": true},' "$st, \"offload_optimizer\": {\"device\": \"cpu\"}" $np
        agree "s${st}g$np" "oc${st}g$np" 2e-3 "stage $st, optimizer on the CPU, $np GPU(s)"
    done
    # stage 3: the host update runs on into the next step's passes (each waits for the units it
    # uses); finished within its own step (zinf_overlap_host_step false) it gives the same bits
    HA=$(hash_of)
    train1 "os3g$np" cuda '"bf16": {"enabled": true}, "zinf_overlap_host_step": false,' "3, \"offload_optimizer\": {\"device\": \"cpu\"}" $np
    HS=$(hash_of)
    [ -n "$HA" ] && [ "$HA" = "$HS" ] && cmp -s "$TMP/oc3g$np.loss" "$TMP/os3g$np.loss" && pass ||
        fail "stage 3 on $np GPU(s): the update run on into the next passes gives $HA, finished in its step $HS"
    # with gradient accumulation the next step's first micro-batches run their forwards together,
    # unit by unit behind that update: the same bits again
    OC='"offload_optimizer": {"device": "cpu"}'
    train1 "og3g$np" cuda '"bf16": {"enabled": true}, "train_micro_batch_size_per_gpu": 4,' "3, $OC" $np
    expect_has "og3g$np: forwards together" "micro-batches of each step run together, unit by unit"
    HA=$(hash_of)
    train1 "ogs3g$np" cuda '"bf16": {"enabled": true}, "train_micro_batch_size_per_gpu": 4, "zinf_overlap_host_step": false,' "3, $OC" $np
    HS=$(hash_of)
    [ -n "$HA" ] && [ "$HA" = "$HS" ] && cmp -s "$TMP/og3g$np.loss" "$TMP/ogs3g$np.loss" && pass ||
        fail "stage 3 on $np GPU(s), accumulation: the forwards together behind the update give $HA, one after the other $HS"
    train1 "on3g$np" cuda '"bf16": {"enabled": true},' "3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$NV\", \"pipeline_read\": true, \"pipeline_write\": true}" $np --swap_engine $ENG
    agree "s3g$np" "on3g$np" 2e-3 "stage 3, optimizer on NVMe ($ENG), $np GPU(s)"
    train1 "pc3g$np" cuda '"bf16": {"enabled": true},' "3, \"offload_param\": {\"device\": \"cpu\"}" $np
    agree "s3g$np" "pc3g$np" 1e-7 "stage 3, parameters in host memory, $np GPU(s)"
    train1 "pb3g$np" cuda '"bf16": {"enabled": true},' "3, \"offload_param\": {\"device\": \"cpu\"}, \"offload_optimizer\": {\"device\": \"cpu\"}" $np
    agree "s3g$np" "pb3g$np" 2e-3 "stage 3, parameters and optimizer in host memory, $np GPU(s)"
    train1 "pn3g$np" cuda '"bf16": {"enabled": true},' "3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$NV\", \"max_in_cpu\": 0}, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$NV\"}" $np --swap_engine $ENG
    agree "s3g$np" "pn3g$np" 2e-3 "stage 3, parameters and optimizer on NVMe ($ENG), $np GPU(s)"
    # no clipping and no overflow skip: each unit's host update runs during the backward pass
    NS='"bf16": {"enabled": true, "check_grad_overflow": false},'
    for st in 2 3; do
        CLIP=0 train1 "ovr${st}g$np" cuda "$NS" $st $np
        CLIP=0 train1 "ov${st}g$np" cuda "$NS" "$st, \"offload_optimizer\": {\"device\": \"cpu\"}" $np
        case "$OUTPUT" in *"runs during the backward pass"*) pass ;; *) fail "ov${st}g$np: the overlapped host step did not run" ;; esac
        agree "ovr${st}g$np" "ov${st}g$np" 2e-3 "stage $st, host step during the backward pass, $np GPU(s)"
    done
    # the host AdamW's OpenMP team on a GPU is one core short of the rank's, after the backward
    # pass (clipping) and during it: the rank's other threads (the driver's, NCCL's, MPI's) keep one
    for k in 1 0; do
        if [ "$k" = 1 ]; then clip=1.0 check=true; else clip=0 check=false; fi
        printf '{"train_batch_size": 16, "gradient_clipping": %s, "bf16": {"enabled": true, "check_grad_overflow": %s},
          "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}, "wall_clock_breakdown": true}\n' \
            "$clip" "$check" > "$TMP/team$k.json"
        OMP_NUM_THREADS=4 mpi "$np" train --device cuda --model "$TMP/m.json" --data "$TMP/add_train_*.bin" --max_length 64 \
            --max_steps 2 --logging_steps 1 --config "$TMP/team$k.json" --out "$TMP/team$k$np"
        expect_ok "team$k$np"
        expect_has "the host AdamW's team on $np GPU(s) (clipping $k)" "host optimizer (ms): AdamW" "| 3 threads"
        expect_has "stage 3 on $np GPU(s) (clipping $k): the update runs on into the next step" \
            "the last step's update, run on into this step's passes, which waited"
    done
done
rm -rf "$NV"

# 4c. checkpoints on the GPU: 3 steps, save, resume, 3 more steps give the parameters of 6
# uninterrupted steps bit for bit (bf16, stage 3, optimizer on the GPU and on the CPU); a bf16 GPU
# checkpoint continues on the CPU backend within the bf16-vs-fp32 bound
printf '{"train_batch_size": 16, "gradient_clipping": 1.0, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3 %%s},
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1}}}\n' > "$TMP/ckfmt"
for off in "" ', "offload_optimizer": {"device": "cpu"}'; do
    n=ck$(printf '%s' "$off" | cksum | cut -c1-4)
    printf "$(cat "$TMP/ckfmt")" "$off" > "$TMP/$n.json"
    ckrun() { mpi 1 train --device "$1" --model "$TMP/m.json" --data "$TMP/add_train_*.bin" --max_length 64 \
        --logging_steps 1 --config "$TMP/$n.json" --seed 11 --max_steps "$2" --out "$TMP/$3" ${4:+"$4"} ${5:+"$5"}; }
    ckrun cuda 6 "$n.full" --save_steps 0
    expect_ok "$n: 6 steps"
    H=$(hash_of)
    ckrun cuda 3 "$n.part" --save_steps 3
    expect_ok "$n: 3 steps and a checkpoint"
    ckrun cuda 6 "$n.part" --resume auto
    expect_ok "$n: resumed on the GPU"
    [ -n "$H" ] && [ "$(hash_of)" = "$H" ] && pass ||
        fail "$n: resumed on the GPU, the parameters differ from 6 uninterrupted steps"
    if [ -z "$off" ]; then
        mkdir -p "$TMP/$n.cpu"; cp "$TMP/$n.part/checkpoint-3.h5" "$TMP/$n.cpu/"
        ckrun cpu 6 "$n.cpu" --resume auto
        expect_ok "$n: a bf16 GPU checkpoint resumed on the CPU"
        metric "$TMP/$n.full/metrics.jsonl" loss | tail -3 > "$TMP/ckg.loss"
        metric "$TMP/$n.cpu/metrics.jsonl" loss | tail -3 > "$TMP/ckc.loss"
        paste "$TMP/ckg.loss" "$TMP/ckc.loss" | awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 3e-2 * $1) bad = 1 }
            END { exit bad || NR != 3 }' && pass || fail "bf16 GPU checkpoint on the CPU: losses $(tr '\n' ' ' < "$TMP/ckc.loss"), GPU $(tr '\n' ' ' < "$TMP/ckg.loss")"
    fi
done
# across GPU counts: saved on 2 GPUs and resumed on 1, saved on 1 and resumed on 2; the last 3
# losses follow the uninterrupted run on the GPU count that finishes it within the bound of the
# stage comparison above (bf16 reductions in another order)
if [ "$ngpu" -ge 2 ]; then
    n=ckx
    printf "$(cat "$TMP/ckfmt")" "" > "$TMP/$n.json"
    for c in "2 1" "1 2"; do
        set -- $c
        a=$1 b=$2
        ckx() { mpi "$1" train --device cuda --model "$TMP/m.json" --data "$TMP/add_train_*.bin" --max_length 64 \
            --logging_steps 1 --config "$TMP/$n.json" --seed 11 --max_steps "$2" --out "$TMP/$3" ${4:+"$4"} ${5:+"$5"}; }
        ckx "$b" 6 "ckx$a$b.full" --save_steps 0
        expect_ok "6 steps on $b GPU(s)"
        ckx "$a" 3 "ckx$a$b" --save_steps 3
        expect_ok "3 steps on $a GPU(s) and a checkpoint"
        ckx "$b" 6 "ckx$a$b" --resume auto
        expect_ok "checkpoint of $a GPU(s) resumed on $b"
        expect_has "checkpoint of $a GPU(s) resumed on $b" "resumed from"
        metric "$TMP/ckx$a$b.full/metrics.jsonl" loss | tail -3 > "$TMP/ckxf.loss"
        metric "$TMP/ckx$a$b/metrics.jsonl" loss | tail -3 > "$TMP/ckxr.loss"
        paste "$TMP/ckxf.loss" "$TMP/ckxr.loss" | awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-2 * $1) bad = 1 }
            END { exit bad || NR != 3 }' && pass ||
            fail "checkpoint of $a GPU(s) on $b: losses $(tr '\n' ' ' < "$TMP/ckxr.loss"), uninterrupted $(tr '\n' ' ' < "$TMP/ckxf.loss")"
    done
else
    echo "  one GPU: the checkpoints across GPU counts are skipped"
fi

# 4d. more than 2 GPUs: stages, offload and checkpoints across GPU counts at 4 or 8 (multi.sh)
if [ "$ngpu" -ge 4 ]; then
    np=4
    [ "$ngpu" -lt 8 ] || np=8
    sh "$here/tests/cuda/multi.sh" "$np"; mrc=$?
    [ "$mrc" -eq 0 ] && pass || fail "tests/cuda/multi.sh $np: exit $mrc"
fi

# 5. a rank that stops or dies before it joins NCCL: the other one's communicator setup (or, when
# rank 0 is the one, the broadcast of the communicator id) times out, or mpirun ends the job,
# instead of waiting forever; one GPU will do, the faulty rank never joins
printf '{"train_batch_size": 16, "bf16": {"enabled": true}}\n' > "$TMP/join.json"
for case in 1:hang 1:kill 0:hang; do
    fr=${case%:*} kind=${case#*:}
    start=$(date +%s)
    OUTPUT=$(ZINF_COMM_TIMEOUT=5 ZINF_FAULT="rank=$fr,step=0,kind=$kind" timeout 90 "$MPIRUN" --oversubscribe -np 2 \
        "$ZINF" train --device cuda --model "$TMP/m.json" --data "$TMP/add_train_*.bin" --max_length 64 \
        --max_steps 2 --config "$TMP/join.json" --out "$TMP/join" 2>&1); RC=$?
    took=$(( $(date +%s) - start ))
    [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && [ "$took" -lt 60 ] && pass ||
        { fail "rank $fr ($kind) before joining NCCL: exit $RC after $took s (124 = hung)"; printf '%s\n' "$OUTPUT" | tail -8 >&2; }
    case $case in
    1:hang) expect_err "rank 1 stuck before joining NCCL" "rank 0: NCCL communicator setup did not finish within 5 s" ;;
    0:hang) expect_err "rank 0 stuck before the id broadcast" "rank 1: timed out after" "device communicator id" ;;
    esac
done
finish
