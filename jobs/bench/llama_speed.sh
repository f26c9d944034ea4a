#!/bin/sh
# Llama-family training speed on one GPU: zinf next to Hugging Face transformers (eager and
# torch.compile) measured in the same run, same shape, same tokens per step.
# Usage (on a GPU node, after `source .gpu-bundle/activate.sh` where the host lacks the libraries):
#   jobs/bench/llama_speed.sh [--model llama-3.2-1b] [--micro 4] [--T 4096] [--steps 10] [--recompute]
#                             [--no-hf] [--hf-modes eager,compile] [--ops STEP]
# --ops STEP: zinf's flops profiler at step STEP (its "detailed" report): each operation's device
# time in that step, calls, share of the step and the products' and attention's TFLOP/s, then the
# time between the operations; printed under zinf's row (that step is not faster for its events,
# and the steady rate is the median of the steps after the first half).
# Prints tokens/s, ms/step, MFU and peak GPU memory (zinf's: also what it holds). MFU counts 6 (N - embedding) + 12 L NH hs T
# FLOPs per token (the count of the issue's figures; embedding = vocab x hidden) over 989 TFLOP/s,
# the H100/H200 SXM bf16 dense figure. Saves: none (zinf --save_steps 0; the peer saves nothing).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
model=llama-3.2-1b micro=4 T=4096 steps=10 recompute=false hf=yes hf_modes=eager,compile ops=""
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=$2; shift ;; --micro) micro=$2; shift ;; --T) T=$2; shift ;; --steps) steps=$2; shift ;;
    --recompute) recompute=true ;; --no-hf) hf=no ;; --hf-modes) hf_modes=$2; shift ;;
    --ops) ops=$2; shift ;;
    *) echo "llama_speed.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
case $ops in *[!0-9]*) echo "llama_speed.sh: --ops $ops: expected a step number" >&2; exit 2 ;; esac
prof=""
[ -z "$ops" ] || prof=", \"flops_profiler\": {\"enabled\": true, \"profile_step\": $ops}"
tmp=${TMPDIR:-/tmp}/zinf-bench.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
V=$("$ZINF" estimate --model "$model" | sed -n 's/.*vocab \([0-9]*\) (padded.*/\1/p' | head -1)
"$ZINF" data --random $((micro * (T + 1) * (steps + 2))) --vocab "${V:-32000}" --out "$tmp/rand" >/dev/null
ac=""
[ "$recompute" = true ] && ac=', "activation_checkpointing": {}'
cat > "$tmp/ds.json" <<JSON
{ "train_micro_batch_size_per_gpu": $micro, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
  "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
  "zero_optimization": {"stage": 0}, "wall_clock_breakdown": true $ac $prof }
JSON
. "$here/jobs/bench/ranks.sh"
rank_place 1 # unbound: mpirun binds one rank to one core by default, and its start-up then runs on one thread
rc=0
# shellcheck disable=SC2086 # $PLACE is mpirun words
mpirun $PLACE -np 1 "$ZINF" train --device cuda --model "$model" --data "$tmp/rand_train_*.bin" --max_length "$T" \
    --max_steps "$steps" --logging_steps 1 --save_steps 0 --config "$tmp/ds.json" --out "$tmp/out" > "$tmp/zinf.log" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then echo "zinf failed:"; tail -5 "$tmp/zinf.log"; fi
tps=$(sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p' "$tmp/out/metrics.jsonl" 2>/dev/null | steady "$steps" 2)
peak=$(sed -n 's/.*peak GPU memory \([0-9.]*\) GiB.*/\1/p' "$tmp/zinf.log" | tail -1)
# FLOPs per token from the model's shape, as zinf's estimate and log give it
. "$here/jobs/bench/llama_flops.sh"
flops=$(llama_flops "$ZINF" "$model" "$tmp/zinf.log" "$T")
row() { awk -v who="$1" -v tps="$2" -v peak="$3" -v f="$flops" -v mb="$micro" -v t="$T" 'BEGIN {
    if (tps <= 0) { printf "%-22s %s\n", who, "no figure"; exit }
    printf "%-22s %12.0f %10.1f %7.1f%% %10s\n", who, tps, 1e3 * mb * t / tps, 100 * tps * f / 989e12, peak }'; }
echo "$model, micro-batch $micro x T $T, one GPU, bf16, recompute $recompute; FLOPs/token $flops"
echo "saves: none (zinf --save_steps 0; transformers saves nothing)"
printf "%-22s %12s %10s %8s %10s\n" "" "tokens/s" "ms/step" "MFU" "peak GiB"
row "zinf" "$tps" "${peak:-?}"
grep "  time (ms)" "$tmp/zinf.log" | tail -1 | sed 's/^ */  zinf breakdown (host): /' || :
zinf_memory "$tmp/zinf.log"
[ -z "$ops" ] || grep -E "^flops profiler: the step's|^  op |^  operations " "$tmp/zinf.log" | sed 's/^/  /'
if [ "$hf" = yes ]; then
    python3 "$here/jobs/bench/hf_llama.py" --model "$model" --micro "$micro" --T "$T" --steps "$steps" --modes "$hf_modes" > "$tmp/hf.txt" 2>"$tmp/hf.err" || :
    while read -r who mode a b c; do
        case "$a" in failed:) echo "transformers $mode: failed: $b $c" ;; *) row "transformers $mode" "$a" "$c" ;; esac
    done < "$tmp/hf.txt"
    [ -s "$tmp/hf.txt" ] || { echo "transformers: no output:"; tail -5 "$tmp/hf.err"; }
fi
# issue 21's goal for these shapes: >= 1.2x transformers under torch.compile in the same run, and
# >= 50% MFU by the count above
ctps=$(awk '$2 == "compile" && $3 ~ /^[0-9.]+$/ { print $3 }' "$tmp/hf.txt" 2>/dev/null || :)
awk -v z="$tps" -v c="${ctps:-0}" -v f="$flops" 'BEGIN {
    m = 100 * z * f / 989e12
    printf "goal: MFU >= 50%%: %.1f%% (%s)", m, (m >= 50) ? "met" : "not met"
    if (c > 0) printf "; >= 1.2x transformers + torch.compile: %.2fx (%s)", z / c, (z / c >= 1.2) ? "met" : "not met"
    else printf "; >= 1.2x transformers + torch.compile: no peer figure in this run"
    printf "\n" }'
