#!/bin/sh
# ZeRO-3 speed on the GPUs of one node: zinf beside PyTorch FSDP2 with the same recompute policy,
# measured in the same run on the same machine, and zinf's recompute policy from the memory budget
# (activation_checkpointing.zinf_recompute_blocks "auto": recompute only as many blocks as the
# memory needs) beside FSDP2's best configuration that fits.
# Usage (after `source .gpu-bundle/activate.sh`):
#   jobs/bench/zero3_speed.sh [--model gpt2-1.5b] [--np 2] [--micro 16] [--T 1024] [--steps 20]
#                             [--policies "full none auto"] [--peak-tflops 989] [--no-torch]
# Prints tokens/s per GPU, ms/step, peak GPU memory and MFU (6 N + 12 L C T FLOPs per token over
# --peak-tflops, the dense bf16 peak of one GPU: 989 for an H100 or H200 SXM) for each policy; a
# policy whose step does not fit in GPU memory says so; under each zinf row, where its last step
# went (wall_clock_breakdown: host timers, then the GPU's own).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
model=gpt2-1.5b np=2 micro=16 T=1024 steps=20 policies="full none auto" peak=989 torch=yes
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=$2; shift ;; --np) np=$2; shift ;; --micro) micro=$2; shift ;; --T) T=$2; shift ;;
    --steps) steps=$2; shift ;; --policies) policies=$2; shift ;; --peak-tflops) peak=$2; shift ;;
    --no-torch) torch=no ;;
    *) echo "zero3_speed.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
. "$here/jobs/bench/ranks.sh" # peer_error
tmp=${TMPDIR:-/tmp}/zinf-z3bench.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
"$ZINF" data --random $((np * micro * (T + 1) * (steps + 2))) --vocab 50257 --out "$tmp/rand" >/dev/null
L="" C="" nparams=""
# mfu TOKENS_PER_S_PER_GPU
mfu() { awk -v t="$1" -v n="$nparams" -v L="${L:-0}" -v C="${C:-0}" -v T="$T" -v pk="$peak" 'BEGIN {
    if (L == 0 || t == "-") { print "-"; exit } printf "%.1f%%", 100 * t * (6e6 * n + 12 * L * C * T) / (pk * 1e12) }'; }
row() { printf "%-40s %14s %10s %10s %6s\n" "$1" "$2" "$3" "$4" "$(mfu "$2")"; }
echo "GPT-2 $model, micro-batch $micro x T $T per GPU, $np GPU(s), bf16, ZeRO-3, gradient clipping 1.0"
echo "saves: none (zinf --save_steps 0; the peers save nothing either)"
printf "%-40s %14s %10s %10s %6s\n" "" "tokens/s/GPU" "ms/step" "peak GiB" "MFU"
for pol in $policies; do
    case $pol in
    full) ac='"activation_checkpointing": {},' ;;
    none) ac="" ;;
    auto) ac='"activation_checkpointing": {"zinf_recompute_blocks": "auto"},' ;;
    *) echo "zero3_speed.sh: policy $pol: expected full, none or auto" >&2; exit 2 ;;
    esac
    cat > "$tmp/ds.json" <<JSON
{ "train_micro_batch_size_per_gpu": $micro, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
  "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
  "zero_optimization": {"stage": 3, "overlap_comm": true}, $ac "wall_clock_breakdown": true }
JSON
    rc=0
    mpirun --bind-to none -np "$np" "$ZINF" train --device cuda --model "$model" --data "$tmp/rand_train_*.bin" \
        --max_length "$T" --max_steps "$steps" --logging_steps 1 --save_steps 0 --config "$tmp/ds.json" --out "$tmp/$pol" \
        > "$tmp/$pol.log" 2>&1 || rc=$?
    [ -n "$nparams" ] || nparams=$(sed -n 's/.*(\([0-9.]*\)M parameters.*/\1/p' "$tmp/$pol.log" | head -1)
    [ -n "$L" ] || L=$(sed -n 's/.* L=\([0-9]*\) .*/\1/p' "$tmp/$pol.log" | head -1)
    [ -n "$C" ] || C=$(sed -n 's/.* C=\([0-9]*\) .*/\1/p' "$tmp/$pol.log" | head -1)
    if [ "$rc" -ne 0 ]; then
        why=$(grep -m1 'zinf: error' "$tmp/$pol.log" || grep -i -m1 -E 'cannot allocate|out of memory' "$tmp/$pol.log" ||
              tail -1 "$tmp/$pol.log")
        row "zinf, recompute $pol" "-" "-" "-"
        echo "  does not run: $why"
        continue
    fi
    tps=$(sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p' "$tmp/$pol/metrics.jsonl" | steady "$steps" 3 |
          awk -v np="$np" '{ printf "%.0f", $1 / np }')
    pk=$(sed -n 's/.*peak GPU memory \([0-9.]*\) GiB.*/\1/p' "$tmp/$pol.log" | tail -1)
    row "zinf, recompute $pol" "$tps" "$(awk -v t="$tps" -v mb="$micro" -v T="$T" 'BEGIN { printf "%.1f", 1e3 * mb * T / t }')" "${pk:-?}"
    grep -h "activation checkpointing" "$tmp/$pol.log" | sed 's/^.*activation checkpointing/  zinf: activation checkpointing/' | head -2
    # where the step goes (rank 0's last step): the breakdown a missed goal needs
    grep "  time (ms)" "$tmp/$pol.log" | tail -1 | sed 's/^ */  zinf breakdown (host): /' || :
    grep "  device time (ms)" "$tmp/$pol.log" | tail -1 | sed 's/^ */  zinf breakdown (device): /' || :
done
if [ "$torch" = yes ] && command -v torchrun >/dev/null 2>&1 && python3 -c 'import torch' 2>/dev/null; then
    for pol in full none; do
        prc=0
        (cd "$here/jobs/bench" && exec torchrun --standalone --nproc_per_node "$np" torch_fsdp2.py --model "$model" \
            --micro "$micro" --T "$T" --steps "$steps" $([ "$pol" = full ] || echo --no-recompute)) \
            > "$tmp/torch-$pol.out" 2> "$tmp/torch-$pol.err" || prc=$?
        grep '^fsdp2 ' "$tmp/torch-$pol.out" |
        while read -r _ ttps tms tpeak; do
            if [ "$ttps" = oom ]; then row "PyTorch FSDP2, recompute $pol" "-" "-" "-"; echo "  does not fit in GPU memory"
            else row "PyTorch FSDP2, recompute $pol" "$ttps" "$tms" "$tpeak"; fi
        done
        grep -q '^fsdp2 ' "$tmp/torch-$pol.out" && [ "$prc" -eq 0 ] || peer_error "PyTorch FSDP2, recompute $pol" "$prc" "$tmp/torch-$pol.err"
    done
fi
