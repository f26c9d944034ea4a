#!/bin/sh
# make check-cuda on more than 2 GPUs (run.sh calls it with the GPU count; run alone:
# tests/cuda/multi.sh NP): ZeRO stages 0-3 on NP GPUs against 1 GPU; at stage 3 on NP GPUs the
# optimizer in host memory and on NVMe and the parameter shards in host memory and on NVMe, each
# against the same NP-GPU run without offload; and checkpoints saved on one GPU count and resumed
# on another (NP->2, 1->NP, and NP->2 with the save made under offload), whose losses follow the
# uninterrupted run on the GPU count that finishes them. run.sh covers 1 and 2 GPUs (2->1, 1->2).
# The bounds are run.sh's: bf16 reductions in another order stay within 1e-2 of the loss, the host
# AdamW is the device kernel's arithmetic, so offload moves only the bf16 rounding of rare elements.
here=$(cd "$(dirname "$0")/../.." && pwd)
top_srcdir=${top_srcdir:-$here}
. "$top_srcdir/tests/mpi/lib.sh"
export ZINF_GEMM_AUTOTUNE=0
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# CUDA_VISIBLE_DEVICES narrows what the ranks see (nvidia-smi lists every GPU regardless)
case ${CUDA_VISIBLE_DEVICES-all} in all) ;; "") ngpu=0 ;; *) ngpu=$(printf '%s\n' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .) ;; esac
NP=${1:-$ngpu}
[ "$NP" -ge 3 ] && [ "$NP" -le "$ngpu" ] || { echo "multi.sh: $NP GPUs asked, $ngpu here (3 or more needed): skipped"; exit 77; }
[ $((16 % NP)) -eq 0 ] || { echo "multi.sh: train_batch_size 16 is not a multiple of $NP GPUs: skipped"; exit 77; }

make_text "$TMP/add.txt" 6000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
printf '{"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 2, "vocab_size": 256, "n_positions": 64}\n' > "$TMP/m.json"
train1() { # train1 NAME PRECISION-JSON STAGE-AND-OFFLOAD NP [zinf train flags...]
    local name=$1 np=$4
    printf '{"train_batch_size": 16, "gradient_clipping": 1.0, %s "zero_optimization": {"stage": %s},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1}}}\n' "$2" "$3" > "$TMP/$1.json"
    shift 4
    mpi "$np" train --device cuda --model "$TMP/m.json" --data "$TMP/add_train_*.bin" --max_length 64 \
        --max_steps 20 --logging_steps 1 --config "$TMP/$name.json" --out "$TMP/$name" --seed 11 "$@"
    expect_ok "$name"
    metric "$TMP/$name/metrics.jsonl" loss > "$TMP/$name.loss"
}
agree() { # agree A B RTOL WHAT
    paste "$TMP/$1.loss" "$TMP/$2.loss" | awk -v r="$3" 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d;
        if (d > r * $1) bad = 1; if (d / $1 > m) m = d / $1 } END { printf "  %s: max relative loss difference %.2e (bound %s)\n", "'"$4"'", m, r; exit bad || NR != 20 }' \
        && pass || { fail "$4: losses differ by more than $3 relative"; paste "$TMP/$1.loss" "$TMP/$2.loss" | head -20 >&2; }
}
BF='"bf16": {"enabled": true},'

# 1. stages 0-3 on NP GPUs follow one GPU, the parameters the same bits on every rank
train1 g1 "$BF" 0 1
for st in 0 1 2 3; do
    train1 "s${st}g$NP" "$BF" $st "$NP"
    agree g1 "s${st}g$NP" 1e-2 "stage $st, $NP GPUs vs 1 GPU"
    expect_has "stage $st on $NP GPUs" "parameters agree bit for bit across $NP ranks"
done

# 2. offload at stage 3 on NP GPUs against the same run without it
nvme_dir zinf-multi
train1 "oc3g$NP" "$BF" '3, "offload_optimizer": {"device": "cpu"}' "$NP"
agree "s3g$NP" "oc3g$NP" 2e-3 "stage 3, optimizer on the CPU, $NP GPUs"
train1 "on3g$NP" "$BF" "3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$NV\", \"pipeline_read\": true, \"pipeline_write\": true}" "$NP" --swap_engine $ENG
agree "s3g$NP" "on3g$NP" 2e-3 "stage 3, optimizer on NVMe ($ENG), $NP GPUs"
train1 "pc3g$NP" "$BF" '3, "offload_param": {"device": "cpu"}' "$NP"
agree "s3g$NP" "pc3g$NP" 1e-7 "stage 3, parameters in host memory, $NP GPUs"
train1 "pb3g$NP" "$BF" '3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}' "$NP"
agree "s3g$NP" "pb3g$NP" 2e-3 "stage 3, parameters and optimizer in host memory, $NP GPUs"
train1 "pn3g$NP" "$BF" "3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$NV\", \"max_in_cpu\": 0}, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$NV\"}" "$NP" --swap_engine $ENG
agree "s3g$NP" "pn3g$NP" 2e-3 "stage 3, parameters and optimizer on NVMe ($ENG), $NP GPUs"
rm -rf "$NV"

# 3. checkpoints across GPU counts: 3 steps on A GPUs and a save, 3 more on B GPUs; the last 3
# losses against 6 uninterrupted steps on B GPUs (stage 3; "o": the save made with the optimizer
# and the parameters in host memory, the resumption without offload)
ck() { # ck NAME NP OFFLOAD-JSON MAX-STEPS OUT [flags...]
    local name=$1 np=$2 steps=$4 out=$5
    printf '{"train_batch_size": 16, "gradient_clipping": 1.0, %s "zero_optimization": {"stage": 3 %s},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1}}}\n' "$BF" "$3" > "$TMP/$name.json"
    shift 5
    mpi "$np" train --device cuda --model "$TMP/m.json" --data "$TMP/add_train_*.bin" --max_length 64 \
        --logging_steps 1 --config "$TMP/$name.json" --seed 11 --max_steps "$steps" --out "$TMP/$out" "$@"
}
OFF=', "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}'
for c in "$NP 2" "1 $NP" "$NP 2 o"; do
    set -- $c
    a=$1 b=$2 o=${3:-}
    n=ck$a$b$o
    [ -f "$TMP/ckfull$b.loss" ] || {
        ck "full$b" "$b" "" 6 "ckfull$b" --save_steps 0
        expect_ok "6 steps on $b GPU(s)"
        metric "$TMP/ckfull$b/metrics.jsonl" loss | tail -3 > "$TMP/ckfull$b.loss"
    }
    ck "$n.a" "$a" "$([ -n "$o" ] && printf '%s' "$OFF")" 3 "$n" --save_steps 3
    expect_ok "3 steps on $a GPU(s)${o:+ with offload} and a checkpoint"
    ck "$n.b" "$b" "" 6 "$n" --resume auto
    expect_ok "checkpoint of $a GPU(s)${o:+ with offload} resumed on $b"
    expect_has "checkpoint of $a GPU(s) resumed on $b" "resumed from"
    metric "$TMP/$n/metrics.jsonl" loss | tail -3 > "$TMP/$n.loss"
    paste "$TMP/ckfull$b.loss" "$TMP/$n.loss" | awk -v w="checkpoint of $a GPU(s)${o:+ with offload} resumed on $b" '
        NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-2 * $1) bad = 1; if (d / $1 > m) m = d / $1 }
        END { printf "  %s: last 3 losses within %.2e of the uninterrupted run (bound 1e-2)\n", w, m; exit bad || NR != 3 }' && pass ||
        fail "checkpoint of $a GPU(s)${o:+ with offload} on $b: losses $(tr '\n' ' ' < "$TMP/$n.loss"), uninterrupted $(tr '\n' ' ' < "$TMP/ckfull$b.loss")"
done
finish
