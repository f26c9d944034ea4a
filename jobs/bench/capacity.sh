#!/bin/sh
# The largest model one GPU node trains with ZeRO-Infinity: bf16 parameters in host memory,
# optimizer states in host memory up to a budget (zinf_optimizer_host_bytes) and the rest on NVMe,
# fp32 gradient accumulators on the GPUs. Any model zinf trains: a preset or an HF config.json
# (--model: Llama, Qwen, Mistral), a Llama shape of L layers at hidden H (--llama-layers/
# --llama-hidden), or a GPT-2 shape (--layers/--embd/--heads, the default). Prints zinf's capacity
# bound for this placement beside DeepSpeed's on the same node, the model's parameter count Psi
# (`zinf estimate`'s exact figure) beside both, then the run's step time and where it goes.
# Saves: none (--save_steps 0); it prints the size a checkpoint would take against the disk's free
# space and zinf's own start-up warning when it would not fit.
# --ds: then DeepSpeed ZeRO-Infinity at the same shape on the same node (Llama-family models: a
# preset hf_llama.py knows or a config.json; .peers/ carried): transformers' model built under
# deepspeed.zero.Init, offload_param cpu and offload_optimizer cpu, both pinned (the placement
# whose bound it prints, 18 bytes a parameter of host memory), for --ds-time seconds (default 400).
# A watchdog stops it where the node's MemAvailable falls under 12 GiB, before the kernel's OOM
# killer would take the node's other processes; it prints how far DeepSpeed came (model built,
# engine initialized, a step) and the most host memory the node had in use. --no-zinf: the bounds
# and DeepSpeed only.
# Usage (after `source .gpu-bundle/activate.sh`):
#   jobs/bench/capacity.sh [--model M | --llama-hidden H [--llama-layers L] |
#                           --layers 64 --embd 3584 --heads 56] --nvme DIR [--host-gib 64] [--np 1]
#                          [--steps 2] [--T 1024] [--plan] [--host-total-gib G] [--disk-gib G]
#                          [--gpu-gib G] [--ds [--ds-time S] [--no-zinf]]
# One 4xH100 node (512 GiB host memory, 235 GB disk), the Qwen2.5-32B shape as a full fine-tune
# (its checkpoint, 12 bytes a parameter, 393 GB, cannot fit that disk):
#   jobs/bench/capacity.sh --np 4 --model qwen2.5-32b --T 4096 --host-gib 400 --nvme /tmp/zinfcap
# A Llama shape near the bound: --llama-hidden H alone takes the largest layer count L that the
# bound allows at that hidden size; --plan prints that L, its Psi and the bounds without training
# (no GPU needed: --host-total-gib, --disk-gib and --gpu-gib stand for what it would measure),
#   jobs/bench/capacity.sh --plan --np 4 --llama-hidden 8192 --host-total-gib 503 --disk-gib 219 --gpu-gib 79.6
#   jobs/bench/capacity.sh --np 4 --llama-hidden 8192 --T 4096 --host-gib 300 --nvme /tmp/zinfcap
# then sets --host-gib to at most the optimizer budget it prints (host memory the parameters leave).
# The Llama shape: intermediate 3.5 H rounded to 256, H/128 heads of 128, 8 KV heads, vocabulary
# 128256, untied embeddings, rope_theta 500000 (Llama 3's 8B and 70B at H 4096 and 8192).
# --host-gib is the node's budget of optimizer states in host memory, split evenly over the --np
# ranks (one per GPU), each of which steps its shard on its own share of the cores.
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
L=64 C=3584 NH=56 nvme=${TMPDIR:-/tmp}/zinf-cap host_gib=64 steps=2 T=1024 np=1
model="" lh="" ll="" plan=no host_total="" disk_free="" gpu_gib="" ds=no ds_time=400 zinf_run=yes
while [ $# -gt 0 ]; do
    case $1 in
    --layers) L=$2; shift ;; --embd) C=$2; shift ;; --heads) NH=$2; shift ;; --nvme) nvme=$2; shift ;;
    --host-gib) host_gib=$2; shift ;; --steps) steps=$2; shift ;; --T) T=$2; shift ;; --np) np=$2; shift ;;
    --model) model=$2; shift ;; --llama-hidden) lh=$2; shift ;; --llama-layers) ll=$2; shift ;;
    --plan) plan=yes ;; --host-total-gib) host_total=$2; shift ;; --disk-gib) disk_free=$2; shift ;;
    --gpu-gib) gpu_gib=$2; shift ;;
    --ds) ds=yes ;; --ds-time) ds_time=$2; shift ;; --no-zinf) zinf_run=no ;;
    *) echo "capacity.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
[ -z "$model" ] || [ -z "$lh$ll" ] || { echo "capacity.sh: --model and --llama-hidden/--llama-layers name two models: give one" >&2; exit 2; }
[ -n "$lh" ] || [ -z "$ll" ] || { echo "capacity.sh: --llama-layers needs --llama-hidden" >&2; exit 2; }
[ "$ds" = yes ] || [ "$zinf_run" = yes ] || { echo "capacity.sh: --no-zinf without --ds leaves nothing to run" >&2; exit 2; }
if [ "$ds" = yes ] && [ -z "$model$lh" ]; then echo "capacity.sh: --ds runs the Llama family: give --model or --llama-hidden" >&2; exit 2; fi
case $ds_time in *[!0-9]* | "") echo "capacity.sh: --ds-time $ds_time: expected seconds" >&2; exit 2 ;; esac
if [ -n "$lh" ] && { [ "$lh" -le 0 ] || [ $((lh % 128)) -ne 0 ]; }; then
    echo "capacity.sh: --llama-hidden $lh: a Llama shape needs a positive multiple of 128 (heads of 128)" >&2; exit 2
fi
tmp=${TMPDIR:-/tmp}/zinf-capbench.$$
out=$nvme/zinf-capbench-out.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp" "$out"' EXIT
if [ "$plan" = no ] || [ -z "$disk_free" ]; then mkdir -p "$nvme"; fi # df measures its file system

# the node's sizes in GiB: measured unless given
if [ -z "$gpu_gib" ]; then
    command -v nvidia-smi >/dev/null || { echo "capacity.sh: no nvidia-smi to measure GPU memory: pass --gpu-gib" >&2; exit 2; }
    gpu_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{ printf "%.1f", $1 / 1024 }')
fi
[ -n "$host_total" ] || host_total=$(awk '/MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)
[ -n "$disk_free" ] || disk_free=$(df -k "$nvme" | awk 'NR == 2 { printf "%.3f", $4 / 1048576 }')

# zinf's bound in parameters, the smaller of two: the GPUs hold 4 bytes a parameter (fp32 gradient
# accumulators, sharded over the --np GPUs) plus working buffers (8 GiB a GPU kept back); the
# node's host memory 2 (bf16 parameters) plus the optimizer's host share, and its disk the
# optimizer's remaining 12 - host share: 14 bytes over host memory (16 GiB kept back) and disk
bound=$(awk -v g="$gpu_gib" -v h="$host_total" -v d="$disk_free" -v np="$np" 'BEGIN {
    G = 1073741824; gpu = np * (g - 8) * G / 4; hd = ((h - 16) + d) * G / 14; b = gpu < hd ? gpu : hd
    printf "%.0f", (b > 0 ? b : 0) }')
[ "$bound" -gt 0 ] || { echo "capacity.sh: no room: $gpu_gib GiB a GPU (8 kept back), $host_total GiB host memory (16 kept back), $disk_free GiB disk" >&2; exit 1; }

# llama_cfg LAYERS HIDDEN FILE: an HF Llama config.json of the shape the header describes
llama_cfg() {
    printf '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "num_hidden_layers": %d, "hidden_size": %d, "intermediate_size": %d, "num_attention_heads": %d, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": %d, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false}\n' \
        "$1" "$2" $(((7 * $2 / 2 + 128) / 256 * 256)) $(($2 / 128)) "$T" > "$3"
}
# psi MODEL: the exact parameter count `zinf estimate` prints (its "params:   Psi = N (...)" line)
psi() {
    "$ZINF" estimate --model "$1" > "$tmp/psi.txt" 2>&1 || { sed -n '$p' "$tmp/psi.txt" >&2; exit 1; }
    sed -n 's/^ *params: *Psi = \([0-9]*\) .*/\1/p' "$tmp/psi.txt"
}

if [ -n "$lh" ]; then
    model=$tmp/llama.json
    if [ -z "$ll" ]; then
        # Psi is linear in L: the embedding, final norm and head, plus L equal blocks
        llama_cfg 1 "$lh" "$model"; p1=$(psi "$model")
        llama_cfg 2 "$lh" "$model"; p2=$(psi "$model")
        ll=$(awk -v b="$bound" -v p1="$p1" -v p2="$p2" 'BEGIN { printf "%d", (b - (2 * p1 - p2)) / (p2 - p1) }')
        [ "$ll" -ge 1 ] || { echo "capacity.sh: --llama-hidden $lh: one layer ($p1 parameters) passes the bound of $bound" >&2; exit 1; }
        echo "plan: hidden $lh, $(((7 * lh / 2 + 128) / 256 * 256)) intermediate: $ll layers, the most that zinf's bound of $bound parameters allows ($((p2 - p1)) a layer)"
    fi
    llama_cfg "$ll" "$lh" "$model"
elif [ -z "$model" ]; then
    model=$tmp/model.json
    printf '{"model_type": "gpt2", "n_layer": %d, "n_embd": %d, "n_head": %d, "vocab_size": 50257, "n_positions": %d}\n' \
        "$L" "$C" "$NH" "$T" > "$model"
fi
cat > "$tmp/ds.json" <<JSON
{ "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
  "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
  "zinf_optimizer_host_bytes": $((host_gib * 1073741824 / np)),
  "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
    "offload_optimizer": {"device": "nvme", "nvme_path": "$nvme", "pipeline_read": true, "pipeline_write": true}},
  "aio": {"block_size": 8388608, "queue_depth": 32, "intra_op_parallelism": 2},
  "activation_checkpointing": {}, "wall_clock_breakdown": true }
JSON
n=$(psi "$model")
nt=$(sed -n 's/^ *model: .*: \([0-9]*\) layers, .*/\1/p' "$tmp/psi.txt")
V=$(sed -n 's/.* vocab \([0-9]*\) (padded.*/\1/p' "$tmp/psi.txt")
sed -n 's/^ *model: *//p' "$tmp/psi.txt" | sed "s|^$tmp/llama.json:|Llama shape:|; s|^$tmp/model.json:|GPT-2 shape:|; s/^/model: /"
# DeepSpeed's bounds on the same node, host memory and disk only (16 GiB of host memory kept back
# as for zinf's). Adam in mixed precision holds 16 bytes a parameter, fp32 parameters, momentum,
# variance and the fp32 gradient (the ZeRO-Infinity paper, Rajbhandari et al. 2021, section 3 and
# its "16 bytes per parameter"; DeepSpeed's ZeRO-Offload and ZeRO-Infinity docs): with
# offload_optimizer cpu + offload_param cpu the host holds those 16 plus the bf16 parameters, 2;
# with offload_optimizer nvme the 16 go to disk (DeepSpeed writes no part of them to host memory
# instead) while the host keeps the bf16 parameters, 2, and its pinned swap buffers
awk -v g="$gpu_gib" -v h="$host_total" -v d="$disk_free" -v np="$np" -v n="$n" -v b="$bound" -v hg="$host_gib" 'BEGIN {
    G = 1073741824; gpu = np * (g - 8) * G / 4; hd = ((h - 16) + d) * G / 14
    cc = (h - 16) * G / 18; nd = d * G / 16; nh = (h - 16) * G / 2; nc = nd < nh ? nd : nh
    printf "  node: %d GPU(s) of %.1f GiB, host %.0f GiB, disk %.0f GiB free\n", np, g, h, d
    printf "  zinf bound: %.1fB parameters (GPUs %.1fB at 4 B each; host + disk %.1fB at 14 B each); this model %.2fB = %.0f%% of it\n",
           b / 1e9, gpu / 1e9, hd / 1e9, n / 1e9, 100 * n / b
    printf "  DeepSpeed bound: %.1fB with offload_optimizer cpu (host at 18 B each); %.1fB with offload_optimizer nvme (disk at 16 B each, host at 2); this model %.2fB = %.0f%% of the larger\n",
           cc / 1e9, nc / 1e9, n / 1e9, 100 * n / (cc > nc ? cc : nc)
    hb = h - 16 - 2 * n / G; if (hb < 0) hb = 0; ob = hg < hb ? hg : hb; nv = 12 * n / G - ob; if (nv < 0) nv = 0
    printf "  zinf placement: bf16 parameters %.0f GiB of host memory; optimizer states %.0f GiB, of them %.0f GiB in host memory (--host-gib %s; at most %.0f GiB fit beside the parameters), %.0f GiB on NVMe\n",
           2 * n / G, 12 * n / G, 12 * n / G < ob ? 12 * n / G : ob, hg, hb, nv }'
# zinf_ckpt_bytes (src/ckpt_file.c): 12 bytes a parameter (fp32 master, m, v), 3 KiB a tensor and
# 64 KiB of HDF5 metadata; counted here at 12 tensors a block and 4 outside them, the most of any
# family, which overstates a smaller count by under 45 KiB a block, below the 3 figures printed
awk -v n="$n" -v l="$nt" -v d="$disk_free" 'BEGIN { c = 12 * n + 3 * 1024 * (12 * l + 4) + 65536; f = d * 1073741824
    printf "saves: none (--save_steps 0): a checkpoint of this model takes at most %.3g GB, the disk has %.3g GB free (%s)\n",
           c / 1e9, f / 1e9, c <= f ? "it would fit" : "it cannot fit: zinf warns at start" }'
[ "$plan" = no ] || exit 0

. "$here/jobs/bench/ranks.sh"
# ds_run: DeepSpeed ZeRO-Infinity at this shape (--ds), its phases and the node's peak host memory
ds_run() {
    case $model in
    */config.json | *.json) dsm=$model ;;
    */*) dsm=$model/config.json ;;
    *) dsm=$model ;;
    esac
    [ -f "$here/.peers/activate-peers.sh" ] || { echo "  DeepSpeed not run: no .peers/ here (../shared/gpu/PEERS.md)"; return 0; }
    echo "  DeepSpeed ZeRO-Infinity (offload_param cpu, offload_optimizer cpu, pinned), $np rank(s), up to $ds_time s:"
    prc=0 low=""
    t0=$(date +%s)
    : > "$tmp/ds.out"
    # shellcheck disable=SC2016 # the inner bash expands its own arguments
    timeout -k 10 "$ds_time" bash -c 'source "$1/.peers/activate-peers.sh" || exit; n=$2; cd "$1/jobs/bench" && shift 2 &&
        exec torchrun --standalone --nproc_per_node "$n" hf_llama_offload.py "$@"' _ "$here" "$np" --engine ds \
        --offload cpu --offload-param cpu --model "$dsm" --micro 1 --T "$T" --gas 1 --steps "$steps" > "$tmp/ds.out" 2> "$tmp/ds.err" &
    dpid=$!
    # timeout leads its own process group (a TERM to it reaches every rank; dash's kill takes -PID
    # for the group, and takes "--" for a PID, an error that would end this script under set -e)
    while kill -0 "$dpid" 2>/dev/null; do
        a=$(awk '/MemAvailable/ { printf "%d", $2 / 1024 }' /proc/meminfo) # MiB
        [ -n "$low" ] && [ "$low" -le "$a" ] || low=$a
        if [ "$a" -lt 12288 ]; then
            echo stopped > "$tmp/ds.oom"; kill -TERM "$dpid" 2>/dev/null || :; sleep 5; kill -KILL -"$dpid" 2>/dev/null || :; break
        fi
        sleep 0.5
    done
    wait "$dpid" || prc=$?
    awk -v tot="$host_total" -v low="$low" 'BEGIN { printf "    the node'"'"'s host memory in use at most %.1f GiB of %.0f\n", tot - low / 1024, tot }'
    sed -n 's/^deepspeed-phase \([a-z-]*\) \(.*\)/    reached: \1 (host memory in use then \2 GiB)/p' "$tmp/ds.out"
    if [ -f "$tmp/ds.oom" ]; then echo "    stopped after $(( $(date +%s) - t0 )) s: the node's MemAvailable fell under 12 GiB (DeepSpeed needs more host memory than the node has)"
    elif [ "$prc" -eq 124 ] || [ "$prc" -eq 137 ]; then echo "    did not finish in $ds_time s; its last output: $(tail -1 "$tmp/ds.err")"
    elif [ "$prc" -ne 0 ]; then peer_error "    DeepSpeed" "$prc" "$tmp/ds.err"
    else awk '$1 == "deepspeed-infinity" { printf "    trained: %s tokens/s per GPU, %s ms a step, peak GPU %s GiB\n", $2, $3, $4 }' "$tmp/ds.out"; fi
    echo "    DeepSpeed wall $(( $(date +%s) - t0 )) s"
}
if [ "$zinf_run" = no ]; then ds_run; exit 0; fi
"$ZINF" data --random $(((T + 1) * (steps + 2))) --vocab "$V" --out "$tmp/rand" >/dev/null
"$ZINF" estimate --model "$model" --config "$tmp/ds.json" --gpus-per-node "$np" > "$tmp/est.txt" 2>&1 || :
rank_place "$np"
rc=0
start=$(date +%s)
# in the background, so that a stop (timeout's SIGTERM) still shows how far the run came
# shellcheck disable=SC2086 # $PLACE is mpirun words
mpirun $PLACE -np "$np" "$ZINF" train --device cuda --model "$model" --data "$tmp/rand_train_*.bin" \
    --max_length "$T" --max_steps "$steps" --logging_steps 1 --save_steps 0 --config "$tmp/ds.json" --out "$out" > "$tmp/zinf.log" 2>&1 &
zpid=$!
trap 'echo "  stopped after $(( $(date +%s) - start )) s; the run had logged:"; grep -v "^ *--\|^\[\|dlopen\|Perhaps a missing" "$tmp/zinf.log" | tail -12
      kill "$zpid" 2>/dev/null; wait "$zpid" 2>/dev/null; exit 143' TERM INT
wait "$zpid" || rc=$?
trap - TERM INT
took=$(( $(date +%s) - start ))
grep "a checkpoint of this model takes" "$tmp/zinf.log" | head -1 | sed 's/^/  zinf at start: /'
grep -E "parameters, L=|memory on rank|NVMe swap pools" "$tmp/zinf.log" | head -4
grep "^  \*" "$tmp/est.txt" | head -1 | sed 's/^/  zinf estimate: /'
echo "  run: exit $rc after $took s for $steps steps"
grep -E "step +[0-9]+/|time \(ms\)|host optimizer|error" "$tmp/zinf.log" | tail -6
[ "$rc" -eq 0 ] || tail -15 "$tmp/zinf.log" >&2
[ "$ds" = no ] || ds_run
