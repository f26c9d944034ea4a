#!/bin/sh
# ZeRO-3 with the optimizer in host memory for the Llama family on one GPU: zinf beside DeepSpeed
# ZeRO-3 + DeepSpeedCPUAdam (where .peers/ was carried: ../shared/gpu/PEERS.md) and PyTorch FSDP2 +
# CPU offload with the fused CPU AdamW, both on transformers' LlamaForCausalLM / Qwen3ForCausalLM
# (hf_llama_offload.py: the same config, random init, SDPA, each decoder layer recomputed as zinf's
# "activation_checkpointing": {} does), measured in the same run on the same machine, one after the
# other. bf16, clipping 1.0, AdamW with decay; saves: none. Prints tokens/s, ms/step, peak GPU
# memory, MFU (llama_flops.sh: 6 (N - embedding) + 12 L NH hs T FLOPs per token, as llama_speed.sh
# counts, over --peak-tflops, 989 for an H100/H200 SXM) and zinf's ratio to each peer.
# An 8B's fp32 master, m and v (12 bytes a parameter, 96 GB) and a peer's fp32 gradients on the
# host (4 more) pass one H100 node's 125 GiB: run it on a node with more host memory (a 2-GPU
# node's 256 GiB), one rank on one GPU.
# Measured 2026-11-26 on GPU 0 of a 2xH100 node (32 cores, 251 GiB), one rank, zinf at d4c5dff, this
# script at 9093585, `--model llama-3.1-8b --steps 4 --peer-steps 3 --peer-timeout 190`: zinf 5,621
# tokens/s (26.5% MFU; it exited 1 after the steps, before its final report), DeepSpeed 0.19.8
# 2,330 (11.0%; zinf 2.41x), FSDP2 did not finish 3 steps in 190 s; Qwen3-8B not run
# (docs/performance.md).
# Usage (after `source .gpu-bundle/activate.sh`):
#   jobs/bench/llama_offload.sh [--model llama-3.1-8b|qwen3-8b] [--micro 1] [--T 4096] [--gas 8]
#                               [--steps 3] [--peer-steps 2] [--peer-timeout 300] [--peak-tflops 989]
#                               [--no-ds] [--no-torch]
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
model=llama-3.1-8b micro=1 T=4096 gas=8 steps=3 psteps=2 ptime=300 peak=989 ds=yes torch=yes
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=$2; shift ;; --micro) micro=$2; shift ;; --T) T=$2; shift ;; --gas) gas=$2; shift ;;
    --steps) steps=$2; shift ;; --peer-steps) psteps=$2; shift ;; --peer-timeout) ptime=$2; shift ;;
    --peak-tflops) peak=$2; shift ;; --no-ds) ds=no ;; --no-torch) torch=no ;;
    *) echo "llama_offload.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
tmp=${TMPDIR:-/tmp}/zinf-llamaoff.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
. "$here/jobs/bench/ranks.sh"
. "$here/jobs/bench/llama_flops.sh"
V=$("$ZINF" estimate --model "$model" | sed -n 's/.*vocab \([0-9]*\) (padded.*/\1/p' | head -1)
"$ZINF" data --random $((gas * micro * (T + 1) * (steps + 2))) --vocab "${V:-32000}" --out "$tmp/rand" >/dev/null
cat > "$tmp/ds.json" <<JSON
{ "train_micro_batch_size_per_gpu": $micro, "gradient_accumulation_steps": $gas, "gradient_clipping": 1.0,
  "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
  "zero_optimization": {"stage": 3, "overlap_comm": true, "offload_optimizer": {"device": "cpu", "pin_memory": true}},
  "activation_checkpointing": {}, "wall_clock_breakdown": true }
JSON
rc=0
t0=$(date +%s)
mpirun --bind-to none -np 1 "$ZINF" train --device cuda --model "$model" --data "$tmp/rand_train_*.bin" --max_length "$T" \
    --max_steps "$steps" --logging_steps 1 --save_steps 0 --config "$tmp/ds.json" --out "$tmp/out" > "$tmp/zinf.log" 2>&1 || rc=$?
zwall=$(( $(date +%s) - t0 ))
# the steady rate: the median of the steps after the first third (the peers' rule, torch_gpt2.steady)
tps=$(sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p' "$tmp/out/metrics.jsonl" 2>/dev/null | awk -v n="$steps" 'NR > n / 3' |
      sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print 0 }')
zpeak=$(sed -n 's/.*peak GPU memory \([0-9.]*\) GiB.*/\1/p' "$tmp/zinf.log" | tail -1)
flops=$(llama_flops "$ZINF" "$model" "$tmp/zinf.log" "$T")
echo "$model, micro-batch $micro x T $T, gradient accumulation $gas ($((micro * gas * T)) tokens a step), one GPU, one rank, bf16, ZeRO-3, optimizer in host memory (pinned), each layer recomputed, clipping 1.0; FLOPs/token $flops"
echo "saves: none (zinf --save_steps 0; the peers save nothing)"
printf "%-30s %11s %10s %9s %7s %s\n" "" "tokens/s" "ms/step" "peak GiB" "MFU" "zinf's ratio"
row() { awk -v who="$1" -v t="$2" -v pk="$3" -v f="$flops" -v tok="$((micro * gas * T))" -v peak="$peak" -v z="$tps" 'BEGIN {
    if (t <= 0) { printf "%-30s %s\n", who, "no figure"; exit }
    printf "%-30s %11.0f %10.0f %9s %6.1f%% %s\n", who, t, 1e3 * tok / t, pk, 100 * t * f / (peak * 1e12),
           (who == "zinf" ? "" : sprintf("%.2fx", z / t)) }'; }
if [ "$rc" -ne 0 ]; then echo "zinf failed (exit $rc):"; grep -v '^ \|^--\|^$\|^mpirun\|^the job\|^Primary' "$tmp/zinf.log" | tail -6; fi
row zinf "$tps" "${zpeak:-?}"
grep "  time (ms)" "$tmp/zinf.log" | tail -1 | sed 's/^ */  zinf breakdown (host): /' || :
grep "  host optimizer (ms)" "$tmp/zinf.log" | tail -1 | sed 's/^ */  zinf /' || :
echo "  zinf wall ${zwall} s for $steps steps (start-up included)"
peer() { # peer NAME TAG ENGINE: one peer under torchrun, its row or its real error
    prc=0
    t0=$(date +%s)
    timeout "$ptime" bash -c '[ -z "$2" ] || source "$1/.peers/activate-peers.sh" || exit; cd "$1/jobs/bench" && shift 2 &&
        exec torchrun --standalone --nproc_per_node 1 hf_llama_offload.py "$@"' _ "$here" "$4" --engine "$3" \
        --model "$model" --micro "$micro" --T "$T" --gas "$gas" --steps "$psteps" > "$tmp/$3.out" 2> "$tmp/$3.err" || prc=$?
    pr=$(awk -v tag="$2" '$1 == tag { print $2, $4 }' "$tmp/$3.out")
    if [ -n "$pr" ] && [ "$prc" -eq 0 ]; then
        # shellcheck disable=SC2086 # two words: tokens/s, peak GiB
        row "$1" $pr
        echo "  $1 wall $(( $(date +%s) - t0 )) s for $psteps steps (start-up included)"
    elif [ "$prc" -eq 124 ]; then echo "  $1 did not finish in $ptime s ($psteps steps); its last output: $(tail -1 "$tmp/$3.err")"
    else peer_error "$1" "$prc" "$tmp/$3.err"; fi
}
if [ "$ds" = yes ] && [ -f "$here/.peers/activate-peers.sh" ]; then
    # the first use compiles DeepSpeed's CPU Adam (about a minute on a fresh machine)
    peer "DeepSpeed ZeRO-3 + CPU Adam" deepspeed-offload ds peers
elif [ "$ds" = yes ]; then echo "  DeepSpeed not run: no .peers/ here (../shared/gpu/PEERS.md)"; fi
if [ "$torch" = yes ] && command -v torchrun >/dev/null 2>&1 && python3 -c 'import torch, transformers' 2>/dev/null; then
    peer "FSDP2 + CPU offload" fsdp2-offload fsdp2 ""
elif [ "$torch" = yes ]; then echo "  FSDP2 not run: no torch and transformers here"; fi
