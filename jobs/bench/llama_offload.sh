#!/bin/sh
# ZeRO-3 for the Llama family on the GPUs of one node, the optimizer in host memory (--offload cpu,
# the default) or on the GPUs (--offload none): zinf beside DeepSpeed ZeRO-3 (where .peers/ was
# carried: ../shared/gpu/PEERS.md) and PyTorch FSDP2, both on transformers' LlamaForCausalLM /
# Qwen3ForCausalLM (hf_llama_offload.py: the same config, random init, SDPA, each decoder layer
# recomputed as zinf's "activation_checkpointing": {} does), measured in the same run on the same
# machine, one after the other. zinf runs --np ranks under mpirun, placed as ranks.sh's rank_place
# places them; each peer runs as many processes under torchrun. The peers:
#   --offload cpu   DeepSpeed ZeRO-3 + DeepSpeedCPUAdam (pinned); FSDP2 + CPUOffloadPolicy (pinned)
#                   with the fused CPU AdamW;
#   --offload none  DeepSpeed ZeRO-3 with its fused GPU Adam (FusedAdam, or torch's fused AdamW
#                   where FusedAdam cannot build: the output says which); FSDP2 with the fused
#                   AdamW on the GPUs;
# FSDP2 with bf16 parameters and fp32 gradient reduction. bf16, clipping 1.0, AdamW with decay;
# saves: none. Prints what `zinf estimate` gives a GPU for the config, then tokens/s per GPU,
# ms/step, peak GPU memory, MFU per GPU (llama_flops.sh: 6 (N - embedding) + 12 L NH hs T FLOPs
# per token, as llama_speed.sh counts, over --peak-tflops, 989 for an H100/H200 SXM), zinf's ratio
# to each peer, zinf's wall_clock_breakdown of its last step (host and device timers, ms) and what
# its peak GPU memory holds (GiB).
# --offload cpu: an 8B's fp32 master, m and v (12 bytes a parameter, 96 GB) and a peer's fp32
# gradients on the host (4 more) pass one H100 node's 125 GiB: run it on a node with more host
# memory (a 2-GPU node's 256 GiB), one rank on one GPU. --offload none: each GPU holds 1/N of
# zinf's 18 bytes a parameter (16-bit parameters, fp32 gradient accumulators, fp32 master, m, v;
# the peers 16): an 8B fits 80 GB GPUs from --np 2; at --np 1 zinf refuses at start-up and its
# one-line reason is printed.
# Measured 2026-11-26 on GPU 0 of a 2xH100 node (32 cores, 251 GiB), one rank, zinf at d4c5dff, this
# script at 9093585, `--model llama-3.1-8b --steps 4 --peer-steps 3 --peer-timeout 190` (--np 1
# --offload cpu): zinf 5,621 tokens/s (29.3% MFU as recounted in docs/performance.md; it exited 1
# after the steps, before its final report), DeepSpeed 0.19.8 2,330 (12.1%; zinf 2.41x), FSDP2 did
# not finish 3 steps in 190 s;
# Qwen3-8B on the same node and commit 5,288 (28.2%; DeepSpeed did not finish in its part's time;
# docs/performance.md). On a 2-GPU node lent as 2 H200 (32 cores, 251 GiB), one
# rank on GPU 0, 2026-11-28, zinf at 5a3b3da, `--model llama-3.1-8b --steps 4 --recompute auto
# --peer-steps 2 --peer-timeout 330 --no-torch`: zinf 6,740 tokens/s (35.1% MFU, no layer
# recomputed), DeepSpeed 1,290 (6.7%; zinf 5.23x).
# --recompute full|auto|none: zinf's activation checkpointing. full (the default): every layer
# recomputed ("activation_checkpointing": {}), the peers likewise (transformers' gradient
# checkpointing); none: nothing recomputed, in zinf and in the peers; auto: zinf recomputes the
# fewest layers whose activations fit the GPU memory its states leave ("zinf_recompute_blocks":
# "auto"), and the peers, which have no such choice, recompute every layer (they are run as with
# full, and the table says so).
# --ratio R (0 < R < 1, with --offload cpu): offload_optimizer.ratio, DeepSpeed's ZeRO-3 partial
# offload: R of each shard's optimizer states in host memory, the rest stepped on the GPU; the
# same config goes to DeepSpeed, and FSDP2, which has no such split, is not run.
# Usage (after `source .gpu-bundle/activate.sh`):
#   jobs/bench/llama_offload.sh [--model llama-3.1-8b|qwen3-8b] [--np 1] [--offload cpu|none] [--ratio 1]
#                               [--recompute full|auto|none] [--micro 1] [--T 4096] [--gas 8] [--steps 3] [--peer-steps 2]
#                               [--peer-timeout 300] [--peak-tflops 989] [--no-ds] [--no-torch]
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
model=llama-3.1-8b np=1 offload=cpu micro=1 T=4096 gas=8 steps=3 psteps=2 ptime=300 peak=989 ds=yes torch=yes ratio=1 recompute=full
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=$2; shift ;; --np) np=$2; shift ;; --offload) offload=$2; shift ;;
    --micro) micro=$2; shift ;; --T) T=$2; shift ;; --gas) gas=$2; shift ;;
    --steps) steps=$2; shift ;; --peer-steps) psteps=$2; shift ;; --peer-timeout) ptime=$2; shift ;;
    --peak-tflops) peak=$2; shift ;; --no-ds) ds=no ;; --no-torch) torch=no ;; --ratio) ratio=$2; shift ;;
    --recompute) recompute=$2; shift ;;
    *) echo "llama_offload.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
case $recompute in
full) ac='"activation_checkpointing": {}, ' rwords="each layer recomputed" pck=yes ;;
auto) ac='"activation_checkpointing": {"zinf_recompute_blocks": "auto"}, '
      rwords="zinf recomputes the fewest layers that fit (auto), the peers each layer" pck=yes ;;
none) ac="" rwords="nothing recomputed" pck=no ;;
*) echo "llama_offload.sh: --recompute $recompute: expected full, auto or none" >&2; exit 2 ;;
esac
case $offload in cpu | none) ;; *) echo "llama_offload.sh: --offload $offload: expected cpu or none" >&2; exit 2 ;; esac
case $np in '' | *[!0-9]* | 0) echo "llama_offload.sh: --np $np: expected a number of GPUs, 1 or more" >&2; exit 2 ;; esac
awk -v r="$ratio" 'BEGIN { exit !(r ~ /^[0-9]*\.?[0-9]+$/ && r > 0 && r <= 1) }' ||
    { echo "llama_offload.sh: --ratio $ratio: expected a number in (0, 1]" >&2; exit 2; }
partial=$(awk -v r="$ratio" 'BEGIN { print (r < 1) ? "yes" : "no" }')
[ "$partial" = no ] || [ "$offload" = cpu ] || { echo "llama_offload.sh: --ratio needs --offload cpu" >&2; exit 2; }
tmp=${TMPDIR:-/tmp}/zinf-llamaoff.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
. "$here/jobs/bench/ranks.sh"
. "$here/jobs/bench/llama_flops.sh"
V=$("$ZINF" estimate --model "$model" | sed -n 's/.*vocab \([0-9]*\) (padded.*/\1/p' | head -1)
"$ZINF" data --random $((np * gas * micro * (T + 1) * (steps + 2))) --vocab "${V:-32000}" --out "$tmp/rand" >/dev/null
opt=', "offload_optimizer": {"device": "cpu", "pin_memory": true}' where="optimizer in host memory (pinned)"
[ "$partial" = no ] || { opt=', "offload_optimizer": {"device": "cpu", "pin_memory": true, "ratio": '"$ratio"'}'
                         where="optimizer $ratio in host memory (pinned), the rest on the GPU"; }
[ "$offload" = cpu ] || { opt="" where="optimizer states on the GPUs"; }
cat > "$tmp/ds.json" <<JSON
{ "train_micro_batch_size_per_gpu": $micro, "gradient_accumulation_steps": $gas, "gradient_clipping": 1.0,
  "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
  "zero_optimization": {"stage": 3, "overlap_comm": true$opt},
  $ac"wall_clock_breakdown": true }
JSON
# what zinf's estimate gives each GPU for this config (model states and ZeRO's buffers, activations)
est=$("$ZINF" estimate --model "$model" --config "$tmp/ds.json" --gpus-per-node "$np" --micro-batch "$micro" --seq-len "$T" 2>&1 |
      awk '$1 == "*" && $2 ~ /^[0-3]$/ { s = sprintf("%s GiB a GPU (states %s, buffers %s), host %s GiB a node", $5, $6, $7, $8) }
           /^Activations per GPU/ { sub(/.*: /, ""); a = $0 } END { if (s != "") print s "; activations " a }')
# the peers' torchrun processes inherit the OMP_NUM_THREADS that rank_place sets: each its share
rank_place "$np"
rc=0
t0=$(date +%s)
# shellcheck disable=SC2086 # $PLACE is mpirun words
mpirun $PLACE -np "$np" "$ZINF" train --device cuda --model "$model" --data "$tmp/rand_train_*.bin" --max_length "$T" \
    --max_steps "$steps" --logging_steps 1 --save_steps 0 --config "$tmp/ds.json" --out "$tmp/out" > "$tmp/zinf.log" 2>&1 || rc=$?
zwall=$(( $(date +%s) - t0 ))
# the steady rate: the median of the steps after the first third (the peers' rule, torch_gpt2.steady)
tps=$(sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p' "$tmp/out/metrics.jsonl" 2>/dev/null | steady "$steps" 3 |
      awk -v np="$np" '{ print $1 / np }')
zrc=$(sed -n 's/.*activation checkpointing: recomputing \([0-9]* of [0-9]*\) blocks.*/\1/p' "$tmp/zinf.log" | head -1)
zpeak=$(sed -n 's/.*peak GPU memory \([0-9.]*\) GiB.*/\1/p' "$tmp/zinf.log" | tail -1)
flops=$(llama_flops "$ZINF" "$model" "$tmp/zinf.log" "$T")
echo "$model, micro-batch $micro x T $T per GPU, gradient accumulation $gas ($((micro * gas * T)) tokens a step per GPU), $np GPU(s), one rank each, bf16, ZeRO-3, $where, $rwords, clipping 1.0; FLOPs/token $flops; tokens/s and MFU per GPU"
echo "saves: none (zinf --save_steps 0; the peers save nothing)"
echo "zinf estimate: ${est:-no figure}"
printf "%-30s %12s %10s %9s %7s %s\n" "" "tokens/s/GPU" "ms/step" "peak GiB" "MFU" "zinf's ratio"
row() { awk -v who="$1" -v t="$2" -v pk="$3" -v f="$flops" -v tok="$((micro * gas * T))" -v peak="$peak" -v z="$tps" 'BEGIN {
    if (t <= 0) { printf "%-30s %s\n", who, "no figure"; exit }
    printf "%-30s %12.0f %10.0f %9s %6.1f%% %s\n", who, t, 1e3 * tok / t, pk, 100 * t * f / (peak * 1e12),
           (who == "zinf" || z <= 0 ? "" : sprintf("%.2fx", z / t)) }'; }
if [ "$rc" -ne 0 ]; then echo "zinf failed (exit $rc):"; grep -v '^ \|^--\|^$\|^mpirun\|^the job\|^Primary\|^a non-zero' "$tmp/zinf.log" | awk '!seen[$0]++' | tail -6; fi
row zinf "$tps" "${zpeak:-?}"
grep "  time (ms)" "$tmp/zinf.log" | tail -1 | sed 's/^ */  zinf breakdown (host): /' || :
grep "  device time (ms)" "$tmp/zinf.log" | tail -1 | sed 's/^ */  zinf breakdown (device): /' || :
grep "  host optimizer (ms)" "$tmp/zinf.log" | tail -1 | sed 's/^ */  zinf /' || :
sed -n 's/.*\(the forwards of [0-9]* micro-batches .*\)/  zinf: \1/p' "$tmp/zinf.log" | head -1
[ "$recompute" != auto ] || { echo "  zinf recomputed ${zrc:-every one of the} blocks (auto)"
    sed -n 's/.*\(activation checkpointing (auto): .*\)/  zinf: \1/p' "$tmp/zinf.log" | head -1; }
zinf_memory "$tmp/zinf.log"
echo "  zinf wall ${zwall} s for $steps steps (start-up included)"
peer() { # peer NAME TAG ENGINE PEERS: one peer, --np processes under torchrun (in .peers/'s
         # environment when PEERS is not empty), its row or its real error
    prc=0
    t0=$(date +%s)
    # shellcheck disable=SC2016 # the inner bash expands its own arguments
    timeout "$ptime" bash -c '[ -z "$2" ] || source "$1/.peers/activate-peers.sh" || exit; n=$3; cd "$1/jobs/bench" && shift 3 &&
        exec torchrun --standalone --nproc_per_node "$n" hf_llama_offload.py "$@"' _ "$here" "$4" "$np" --engine "$3" \
        --offload "$offload" --ratio "$ratio" --checkpoint "$pck" --model "$model" --micro "$micro" --T "$T" --gas "$gas" --steps "$psteps" > "$tmp/$3.out" 2> "$tmp/$3.err" || prc=$?
    pr=$(awk -v tag="$2" '$1 == tag { print $2, $4 }' "$tmp/$3.out")
    sed -n 's/^deepspeed-adam /  DeepSpeed'"'"'s optimizer: /p' "$tmp/$3.out"
    if [ -n "$pr" ] && [ "$prc" -eq 0 ]; then
        # shellcheck disable=SC2086 # two words: tokens/s, peak GiB
        row "$1" $pr
        echo "  $1 wall $(( $(date +%s) - t0 )) s for $psteps steps (start-up included)"
    elif [ "$prc" -eq 124 ]; then echo "  $1 did not finish in $ptime s ($psteps steps); its last output: $(tail -1 "$tmp/$3.err")"
    else peer_error "$1" "$prc" "$tmp/$3.err"; fi
}
if [ "$ds" = yes ] && [ -f "$here/.peers/activate-peers.sh" ]; then
    # the first use compiles DeepSpeed's CPU Adam or FusedAdam (about a minute on a fresh machine)
    if [ "$offload" = cpu ]; then peer "DeepSpeed ZeRO-3 + CPU Adam" deepspeed-offload ds peers
    else peer "DeepSpeed ZeRO-3" deepspeed ds peers; fi
elif [ "$ds" = yes ]; then echo "  DeepSpeed not run: no .peers/ here (../shared/gpu/PEERS.md)"; fi
if [ "$torch" = yes ] && [ "$partial" = yes ]; then echo "  FSDP2 not run: it has no partial optimizer offload (--ratio $ratio)"
elif [ "$torch" = yes ] && command -v torchrun >/dev/null 2>&1 && python3 -c 'import torch, transformers' 2>/dev/null; then
    if [ "$offload" = cpu ]; then peer "FSDP2 + CPU offload" fsdp2-offload fsdp2 ""
    else peer "FSDP2" fsdp2 fsdp2 ""; fi
elif [ "$torch" = yes ]; then echo "  FSDP2 not run: no torch and transformers here"; fi
# issue 21's goal for the 8B shapes with the optimizer in host memory: >= 35% MFU and >= 3x
# DeepSpeed ZeRO-3 + CPU Adam in the same run
if [ "$offload" = cpu ] && [ "$partial" = no ]; then
    dtps=$(awk '$1 == "deepspeed-offload" { print $2 }' "$tmp/ds.out" 2>/dev/null || :)
    awk -v z="$tps" -v d="${dtps:-0}" -v f="$flops" -v peak="$peak" 'BEGIN {
        m = 100 * z * f / (peak * 1e12)
        printf "goal: MFU >= 35%%: %.1f%% (%s)", m, (m >= 35) ? "met" : "not met"
        if (d > 0) printf "; >= 3x DeepSpeed ZeRO-3 + CPU Adam: %.2fx (%s)\n", z / d, (z / d >= 3) ? "met" : "not met"
        else printf "; >= 3x DeepSpeed ZeRO-3 + CPU Adam: no DeepSpeed figure in this run\n" }'
fi
