#!/bin/sh
# GPT-2 training speed on GPUs: zinf next to PyTorch measured in the same run.
# Usage (on a GPU node, after `source .gpu-bundle/activate.sh` where the host lacks the libraries):
#   jobs/bench/gpt2_speed.sh [--model gpt2-124m] [--np 1] [--stage 0] [--micro 16] [--T 1024]
#                            [--steps 30] [--recompute] [--keep-attention] [--no-torch]
# Prints tokens/s, ms/step, MFU (FLOPs per token 6N + 12*L*C*T over 989 TFLOP/s bf16 dense, the
# H100/H200 SXM figure) and peak GPU memory, for zinf and for PyTorch eager and torch.compile.
# --keep-attention implies --recompute and passes --ac_keep_attention (attention outputs kept).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
model=gpt2-124m np=1 stage=0 micro=16 T=1024 steps=30 recompute=false keep="" torch=yes
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=$2; shift ;; --np) np=$2; shift ;; --stage) stage=$2; shift ;;
    --micro) micro=$2; shift ;; --T) T=$2; shift ;; --steps) steps=$2; shift ;;
    --recompute) recompute=true ;; --no-torch) torch=no ;;
    --keep-attention) recompute=true keep=--ac_keep_attention ;;
    *) echo "gpt2_speed.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
tmp=${TMPDIR:-/tmp}/zinf-bench.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
"$ZINF" data --random $((np * micro * (T + 1) * (steps + 2))) --vocab 50257 --out "$tmp/rand" >/dev/null
ac=""
[ "$recompute" = true ] && ac=', "activation_checkpointing": {}'
cat > "$tmp/ds.json" <<JSON
{ "train_micro_batch_size_per_gpu": $micro, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
  "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
  "zero_optimization": {"stage": $stage, "overlap_comm": true}, "wall_clock_breakdown": true $ac }
JSON
# GPU power and SM clock once a second while zinf trains (a GPU at its power cap lowers its clock,
# and a long run then goes slower than its kernels do in short bursts)
dmon=""
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi dmon -s pc -d 1 > "$tmp/dmon.txt" 2>/dev/null &
    dmon=$!
fi
. "$here/jobs/bench/ranks.sh"
rank_place "$np"
rc=0
# shellcheck disable=SC2086 # $PLACE is mpirun words
mpirun $PLACE -np "$np" "$ZINF" train --device cuda --model "$model" --data "$tmp/rand_train_*.bin" --max_length "$T" \
    --max_steps "$steps" --logging_steps 1 --save_steps 0 --config "$tmp/ds.json" --out "$tmp/out" $keep > "$tmp/zinf.log" 2>&1 || rc=$?
[ -z "$dmon" ] || { kill "$dmon" 2>/dev/null || :; wait "$dmon" 2>/dev/null || :; }
[ "$rc" -eq 0 ] || { tail -20 "$tmp/zinf.log" >&2; exit 1; }
# steady state: the median of the second half of the steps
tps=$(sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p' "$tmp/out/metrics.jsonl" | steady "$steps" 2)
params=$(sed -n 's/.*(\([0-9.]*\)M parameters, L=\([0-9]*\) C=\([0-9]*\).*/\1 \2 \3/p' "$tmp/zinf.log" | head -1)
peak=$(sed -n 's/.*peak GPU memory \([0-9.]*\) GiB.*/\1/p' "$tmp/zinf.log" | tail -1)
set -- $params
flops=$(awk -v n="$1" -v l="$2" -v c="$3" -v t="$T" 'BEGIN { printf "%.6g", 6 * n * 1e6 + 12 * l * c * t }')
# row WHO TOKENS_PER_S PEAK: ms/step from the tokens of one step; MFU per GPU
row() { awk -v who="$1" -v tps="$2" -v peak="$3" -v f="$flops" -v np="$np" -v mb="$micro" -v t="$T" 'BEGIN {
    printf "%-22s %12.0f %10.1f %7.1f%% %10s\n", who, tps, 1e3 * np * mb * t / tps, 100 * tps / np * f / 989e12, peak }'; }
echo "GPT-2 $model, micro-batch $micro x T $T per GPU, $np GPU(s), bf16, ZeRO stage $stage, recompute $recompute${keep:+ (attention outputs kept)}"
echo "saves: none (zinf --save_steps 0; PyTorch saves nothing either)"
printf "%-22s %12s %10s %8s %10s\n" "" "tokens/s" "ms/step" "MFU" "peak GiB"
row "zinf" "$tps" "${peak:-?}"
grep "  time (ms)" "$tmp/zinf.log" | tail -1 | sed 's/^ */  zinf breakdown (host): /'
grep "device time (ms)" "$tmp/zinf.log" | tail -1 | sed 's/^ *device /  zinf breakdown (GPU 0): /'
# dmon rows: gpu pwr(W) gtemp mtemp mclk pclk(MHz); under load = at least half the highest power seen
[ ! -s "$tmp/dmon.txt" ] || awk '!/^#/ && NF >= 6 && $2 ~ /^[0-9]+$/ { n++; w[n] = $2; c[n] = $6; if ($2 > mx) mx = $2 }
    END { for (i = 1; i <= n; i++) if (w[i] >= mx / 2) { k++; sw += w[i]; sc += c[i]; if (!lo || c[i] < lo) lo = c[i] }
          if (k) printf "  zinf GPU load: %.0f W, SM clock %.0f MHz (lowest %d) over %d samples (nvidia-smi dmon)\n",
                        sw / k, sc / k, lo, k }' "$tmp/dmon.txt"
if [ "$torch" = yes ] && [ "$np" -eq 1 ] && python3 -c 'import torch' 2>/dev/null; then
    python3 "$here/jobs/bench/torch_gpt2.py" --model "$model" --micro "$micro" --T "$T" --steps "$steps" |
    while read -r _ mode ttps _ tpeak; do row "PyTorch ($mode)" "$ttps" "$tpeak"; done
fi
