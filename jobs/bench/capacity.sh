#!/bin/sh
# The largest GPT-2-shaped model one GPU node trains with ZeRO-Infinity: parameters in host
# memory, optimizer states in host memory up to a budget (zinf_optimizer_host_bytes) and the rest
# on NVMe, fp32 gradient accumulators on the GPU. Prints the capacity bound that GPU memory, host
# memory and disk set for this placement beside the run's step time and where it goes.
# Usage (after `source .gpu-bundle/activate.sh`):
#   jobs/bench/capacity.sh --layers 64 --embd 3584 --heads 56 --nvme DIR [--host-gib 64] [--steps 2]
#                          [--np 1]
# --host-gib is the node's budget of optimizer states in host memory, split evenly over the --np
# ranks (one per GPU), each of which steps its shard on its own share of the cores.
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
L=64 C=3584 NH=56 nvme=${TMPDIR:-/tmp}/zinf-cap host_gib=64 steps=2 T=1024 np=1
while [ $# -gt 0 ]; do
    case $1 in
    --layers) L=$2; shift ;; --embd) C=$2; shift ;; --heads) NH=$2; shift ;; --nvme) nvme=$2; shift ;;
    --host-gib) host_gib=$2; shift ;; --steps) steps=$2; shift ;; --T) T=$2; shift ;; --np) np=$2; shift ;;
    *) echo "capacity.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
tmp=${TMPDIR:-/tmp}/zinf-capbench.$$
mkdir -p "$tmp" "$nvme"
trap 'rm -rf "$tmp"' EXIT
printf '{"model_type": "gpt2", "n_layer": %d, "n_embd": %d, "n_head": %d, "vocab_size": 50257, "n_positions": %d}\n' \
    "$L" "$C" "$NH" "$T" > "$tmp/model.json"
"$ZINF" data --random $(((T + 1) * (steps + 2))) --vocab 50257 --out "$tmp/rand" >/dev/null
cat > "$tmp/ds.json" <<JSON
{ "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
  "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
  "zinf_optimizer_host_bytes": $((host_gib * 1073741824 / np)),
  "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
    "offload_optimizer": {"device": "nvme", "nvme_path": "$nvme", "pipeline_read": true, "pipeline_write": true}},
  "aio": {"block_size": 8388608, "queue_depth": 32, "intra_op_parallelism": 2},
  "activation_checkpointing": {}, "wall_clock_breakdown": true }
JSON
gpu_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{ printf "%.1f", $1 / 1024 }')
host_total=$(awk '/MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)
disk_free=$(df -k "$nvme" | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }')
"$ZINF" estimate --model "$tmp/model.json" --config "$tmp/ds.json" --gpus-per-node "$np" > "$tmp/est.txt" 2>&1 || :
. "$here/jobs/bench/ranks.sh"
rank_place "$np"
rc=0
start=$(date +%s)
# shellcheck disable=SC2086 # $PLACE is mpirun words
mpirun $PLACE -np "$np" "$ZINF" train --device cuda --model "$tmp/model.json" --data "$tmp/rand_train_*.bin" \
    --max_length "$T" --max_steps "$steps" --logging_steps 1 --save_steps 0 --config "$tmp/ds.json" --out "$tmp/out" > "$tmp/zinf.log" 2>&1 || rc=$?
took=$(( $(date +%s) - start ))
echo "saves: none (--save_steps 0: a checkpoint of this model would need $(awk -v n="$(sed -n 's/.*(\([0-9.]*\)M parameters.*/\1/p' "$tmp/zinf.log" | head -1)" 'BEGIN { printf "%.0f", n * 12e6 / 1e9 }') GB beside the swap)"
grep -E "parameters, L=|memory on rank|NVMe swap pools" "$tmp/zinf.log" | head -4
grep "^  \*" "$tmp/est.txt" | head -1 | sed 's/^/  zinf estimate: /'
n=$(sed -n 's/.*(\([0-9.]*\)M parameters.*/\1/p' "$tmp/zinf.log" | head -1)
# bound: the GPUs hold 4 bytes a parameter (fp32 gradient accumulators, sharded over the --np
# GPUs) plus working buffers; the node's host memory 2 (bf16 parameters) plus the optimizer's
# share, and its disk the optimizer's remaining 12 - host share
awk -v g="$gpu_gib" -v h="$host_total" -v d="$disk_free" -v hb="$host_gib" -v n="$n" -v np="$np" 'BEGIN {
    G = 1073741824; gpu = np * (g - 8) * G / 4; hostdisk = ((h - 16) + d) * G / 14
    printf "  capacity bound (parameters): %d GPU(s) of %.1f GiB -> %.1fB; host %.0f GiB + disk %.0f GiB free -> %.1fB; this model %.2fB\n",
           np, g, gpu / 1e9, h, d, hostdisk / 1e9, n / 1e3 }'
echo "  run: exit $rc after $took s for $steps steps"
grep -E "step +[0-9]+/|time \(ms\)|host optimizer|error" "$tmp/zinf.log" | tail -6
[ "$rc" -eq 0 ] || tail -15 "$tmp/zinf.log" >&2
