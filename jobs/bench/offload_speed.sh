#!/bin/sh
# ZeRO-Offload speed on a GPU node: zinf with the optimizer on the CPU (or on NVMe) beside PyTorch
# FSDP2 with CPU offload and its fused CPU AdamW and, where .peers/ was carried (PEERS.md), DeepSpeed
# ZeRO-3 with DeepSpeedCPUAdam (--offload cpu), measured in the same run on the same machine,
# and the bound the host's AdamW rate sets (parameters / the CPU AdamW's parameters per second,
# measured here by tests/unit/test_cpu_adamw --bench), and the model FLOPs utilisation (6 N + 12 L
# C T per token over --peak-tflops, the GPU's dense bf16 peak: 989 for an H100 or H200 SXM), with
# zinf's step breakdown and what its peak GPU memory holds.
# With --clip 0 the config also turns bf16.check_grad_overflow off, as FSDP2 has no such check:
# no step can then be skipped, so zinf's host step runs during the backward pass.
# Usage (after `source .gpu-bundle/activate.sh`):
#   jobs/bench/offload_speed.sh [--model gpt2-1.5b] [--np 1] [--micro 8] [--T 1024] [--steps 12]
#                               [--offload cpu|nvme] [--nvme DIR] [--clip 1.0|0] [--gas 1]
#                               [--no-recompute] [--peak-tflops 989] [--no-torch] [--no-ds]
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
model=gpt2-1.5b np=1 micro=8 T=1024 steps=12 offload=cpu nvme=${TMPDIR:-/tmp} clip=1.0 torch=yes
gas=1 recompute=yes peak=989 ds=yes
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=$2; shift ;; --np) np=$2; shift ;; --micro) micro=$2; shift ;; --T) T=$2; shift ;;
    --steps) steps=$2; shift ;; --offload) offload=$2; shift ;; --nvme) nvme=$2; shift ;;
    --clip) clip=$2; shift ;; --no-torch) torch=no ;; --gas) gas=$2; shift ;;
    --no-recompute) recompute=no ;; --peak-tflops) peak=$2; shift ;; --no-ds) ds=no ;;
    *) echo "offload_speed.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
tmp=${TMPDIR:-/tmp}/zinf-offbench.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
"$ZINF" data --random $((np * gas * micro * (T + 1) * (steps + 2))) --vocab 50257 --out "$tmp/rand" >/dev/null
opt='"offload_optimizer": {"device": "cpu", "pin_memory": true}'
aio=""
if [ "$offload" = nvme ]; then
    # the raw disk in the same run (a plain O_DIRECT loop) and the swapper's best aio settings
    "$ZINF" io-bench --path "$nvme" --size 4G --block-sizes 1M,8M --queue-depths 8,32 --parallelism 1,2 > "$tmp/iob.txt" 2>&1 ||
        { cat "$tmp/iob.txt" >&2; exit 1; }
    raw_w=$(sed -n 's/.*O_DIRECT: write \([0-9.]*\) GB\/s, read \([0-9.]*\) GB\/s.*/\1/p' "$tmp/iob.txt" | head -1)
    raw_r=$(sed -n 's/.*O_DIRECT: write \([0-9.]*\) GB\/s, read \([0-9.]*\) GB\/s.*/\2/p' "$tmp/iob.txt" | head -1)
    aio=$(sed -n '/^"aio": {/,/^}/p' "$tmp/iob.txt" | tr -d '\n')
    opt='"offload_optimizer": {"device": "nvme", "nvme_path": "'$nvme'", "pipeline_read": true, "pipeline_write": true}'
fi
check=true ac='"activation_checkpointing": {},' rc_word="full recompute"
awk -v c="$clip" 'BEGIN { exit !(c + 0 == 0) }' && check=false
[ "$recompute" = yes ] || { ac=""; rc_word="no recompute"; }
cat > "$tmp/ds.json" <<JSON
{ "train_micro_batch_size_per_gpu": $micro, "gradient_accumulation_steps": $gas, "gradient_clipping": $clip,
  "bf16": {"enabled": true, "check_grad_overflow": $check},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
  "zero_optimization": {"stage": 3, "overlap_comm": true, $opt}, $ac
  "wall_clock_breakdown": true ${aio:+, $aio} }
JSON
. "$here/jobs/bench/ranks.sh"
rank_place "$np"
rc=0
# shellcheck disable=SC2086 # $PLACE is mpirun words
mpirun $PLACE -np "$np" "$ZINF" train --device cuda --model "$model" --data "$tmp/rand_train_*.bin" --max_length "$T" \
    --max_steps "$steps" --logging_steps 1 --save_steps 0 --config "$tmp/ds.json" --out "$tmp/out" > "$tmp/zinf.log" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { tail -20 "$tmp/zinf.log" >&2; exit 1; }
tps=$(sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p' "$tmp/out/metrics.jsonl" | steady "$steps" 3)
peak_mem=$(sed -n 's/.*peak GPU memory \([0-9.]*\) GiB.*/\1/p' "$tmp/zinf.log" | tail -1)
nparams=$(sed -n 's/.*(\([0-9.]*\)M parameters.*/\1/p' "$tmp/zinf.log" | head -1)
# model FLOPs per token: 6 N + 12 L C T (the attention's scores and sums), from the run's shape
L=$(sed -n 's/.* L=\([0-9]*\) .*/\1/p' "$tmp/zinf.log" | head -1)
C=$(sed -n 's/.* C=\([0-9]*\) .*/\1/p' "$tmp/zinf.log" | head -1)
echo "GPT-2 $model, micro-batch $micro x T $T per GPU, gradient accumulation $gas, $np GPU(s), bf16, ZeRO-3, $rc_word, optimizer on $offload, clipping $clip, bf16.check_grad_overflow $check"
echo "saves: none (zinf --save_steps 0; the peers save nothing either)"
printf "%-34s %14s %10s %10s %6s\n" "" "tokens/s/GPU" "ms/step" "peak GiB" "MFU"
mfu() { awk -v t="$1" -v n="$nparams" -v L="${L:-0}" -v C="${C:-0}" -v T="$T" -v pk="$peak" 'BEGIN {
    if (L == 0) { print "?"; exit } printf "%.1f%%", 100 * t * (6e6 * n + 12 * L * C * T) / (pk * 1e12) }'; }
awk -v t="$tps" -v np="$np" -v mb="$((micro * gas))" -v T="$T" -v p="${peak_mem:-?}" -v u="$(mfu "$(awk -v t="$tps" -v np="$np" 'BEGIN { print t / np }')")" 'BEGIN {
    printf "%-34s %14.0f %10.1f %10s %6s\n", "zinf", t / np, 1e3 * np * mb * T / t, p, u }'
grep "  time (ms)" "$tmp/zinf.log" | tail -1 | sed 's/^ */  zinf breakdown (host): /'
grep "  host optimizer (ms)" "$tmp/zinf.log" | tail -1 | sed 's/^ */  zinf /'
zinf_memory "$tmp/zinf.log"
# the host AdamW bound: this shard's parameters over the CPU AdamW rate (bf16 output) measured
# here, over 5 s of back-to-back steps (test_cpu_adamw --sustain): by one rank alone on its share
# of the cores, then by one process per rank at once, placed and bound as the ranks are, so that
# the ranks share the host's memory bandwidth as their host steps do (their windows overlap; a
# best-of-rounds figure would not say this: each process's best round may fall where the others
# are idle); the slowest rank's rate sets the bound
if [ -x "$here/tests/unit/test_cpu_adamw" ]; then
    adamw_at_once 1 "$tmp/adamw.alone" 2>/dev/null || :
    rate=$(adamw_rate "$tmp/adamw.alone.0")
    adamw_at_once "$np" "$tmp/adamw.rank" 2>/dev/null || :
    all=$(for f in "$tmp"/adamw.rank.*; do adamw_rate "$f"; done | sort -g | head -1)
    thr=$(sed -n 's/.*, \([0-9]*\) threads:.*/\1/p' "$tmp/adamw.alone.0")
    [ -n "$rate" ] && awk -v n="$nparams" -v np="$np" -v r="$rate" -v a="${all:-0}" -v t="${thr:-?}" 'BEGIN {
        printf "  host AdamW (%s threads a rank, 5 s sustained): %.2f Gparam/s alone, %.2f with all %d rank(s) at once (the slowest); %.0f M parameters per rank take %.0f ms a step at that rate (the bound it sets)\n",
               t, r, a, np, n / np, (a > 0 ? n / np / a : n / np / r) }'
fi
if [ "$offload" = nvme ]; then
    grep -A3 '^best sum' "$tmp/iob.txt" | head -1 | sed 's/^/  io-bench /'
    opt_ms=$(sed -n 's/.*optimizer \([0-9.]*\) |.*/\1/p' "$tmp/zinf.log" | tail -1)
    # the disk bound: 12 bytes per parameter (master, m, v) read at the raw read speed and written
    # at the raw write speed, both measured above on the same path
    # the raw disk at depth: io-bench's raw io_uring O_DIRECT loop (8 MiB blocks, queue depth 8)
    uring_w=$(sed -n 's/.*io_uring: write \([0-9.]*\) GB\/s, read \([0-9.]*\) GB\/s.*/\1/p' "$tmp/iob.txt" | head -1)
    uring_r=$(sed -n 's/.*io_uring: write \([0-9.]*\) GB\/s, read \([0-9.]*\) GB\/s.*/\2/p' "$tmp/iob.txt" | head -1)
    grep '^swapper at its best' "$tmp/iob.txt" | sed 's/^/  io-bench: /'
    for ref in "raw io_uring O_DIRECT, queue depth 8|$uring_r|$uring_w" "plain O_DIRECT loop, queue depth 1|$raw_r|$raw_w"; do
        awk -v n="$nparams" -v np="$np" -v ref="$ref" -v o="$opt_ms" 'BEGIN {
            split(ref, f, "|"); r = f[2]; w = f[3]
            b = 12 * n * 1e6 / np; t = 1e3 * (b / (r * 1e9) + b / (w * 1e9))
            printf "  optimizer on NVMe: %.0f ms a step; disk bound %.0f ms (%.1f GB read at %.2f, written at %.2f GB/s, %s): %.2fx\n",
                   o, t, b / 1e9, r, w, f[1], o / t }'
    done
fi
if [ "$torch" = yes ] && command -v torchrun >/dev/null 2>&1 && python3 -c 'import torch' 2>/dev/null; then
    prc=0
    (cd "$here/jobs/bench" && exec torchrun --standalone --nproc_per_node "$np" torch_fsdp2_offload.py --model "$model" \
        --micro "$micro" --T "$T" --steps "$steps" --clip "$(awk -v c="$clip" 'BEGIN { print c + 0 }')" --gas "$gas" \
        $([ "$recompute" = yes ] || echo --no-recompute)) > "$tmp/torch.out" 2> "$tmp/torch.err" || prc=$?
    grep '^fsdp2-offload' "$tmp/torch.out" |
    while read -r _ ttps tms tpeak; do printf "%-34s %14.0f %10.1f %10s %6s\n" "PyTorch FSDP2 + CPU offload" "$ttps" "$tms" "$tpeak" "$(mfu "$ttps")"; done
    grep -q '^fsdp2-offload' "$tmp/torch.out" && [ "$prc" -eq 0 ] || peer_error "PyTorch FSDP2 + CPU offload" "$prc" "$tmp/torch.err"
fi
if [ "$ds" = yes ] && [ "$offload" = cpu ] && [ -f "$here/.peers/activate-peers.sh" ]; then
    # the first use compiles DeepSpeed's CPU Adam (about a minute on a fresh machine)
    prc=0
    bash -c 'source "$1/.peers/activate-peers.sh" && cd "$1/jobs/bench" && shift && exec torchrun --standalone --nproc_per_node "$@"' \
        _ "$here" "$np" ds_offload.py --model "$model" --micro "$micro" --T "$T" --steps "$(( steps < 8 ? steps : 8 ))" \
        --clip "$(awk -v c="$clip" 'BEGIN { print c + 0 }')" --gas "$gas" $([ "$recompute" = yes ] || echo --no-recompute) \
        > "$tmp/ds.out" 2> "$tmp/ds.err" || prc=$?
    grep '^deepspeed-offload' "$tmp/ds.out" |
    while read -r _ ttps tms tpeak; do printf "%-34s %14.0f %10.1f %10s %6s\n" "DeepSpeed ZeRO-3 + CPU Adam" "$ttps" "$tms" "$tpeak" "$(mfu "$ttps")"; done
    grep -q '^deepspeed-offload' "$tmp/ds.out" && [ "$prc" -eq 0 ] || peer_error "DeepSpeed ZeRO-3 + CPU Adam" "$prc" "$tmp/ds.err"
elif [ "$ds" = yes ] && [ "$offload" = cpu ]; then
    echo "  DeepSpeed not run: no .peers/ here (../shared/gpu/PEERS.md)"
fi
