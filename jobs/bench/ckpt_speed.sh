#!/bin/sh
# Checkpoint speed on a GPU node: zinf trains GPT-2 (default 1.5B, bf16, ZeRO-3, full recompute)
# for a few steps, saves one checkpoint, then resumes from it. Printed beside it, measured in the
# same run on the same directory: a raw sequential write (dd, 8 MiB blocks, then fsync) and a raw
# sequential read (dd, O_DIRECT) of the same number of bytes. The save stalls the training loop
# for its whole duration (saves are synchronous), which the last line says.
# Usage (after `source .gpu-bundle/activate.sh`):
#   jobs/bench/ckpt_speed.sh [--model gpt2-1.5b] [--np 1] [--micro 8] [--T 1024] [--dir DIR]
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
model=gpt2-1.5b np=1 micro=8 T=1024 dir=${TMPDIR:-/tmp}/zinf-ckbench.$$
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=$2; shift ;; --np) np=$2; shift ;; --micro) micro=$2; shift ;; --T) T=$2; shift ;;
    --dir) dir=$2; shift ;;
    *) echo "ckpt_speed.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
"$ZINF" data --random $((np * micro * (T + 1) * 6)) --vocab 50257 --out "$dir/rand" >/dev/null
cat > "$dir/ds.json" <<JSON
{ "train_micro_batch_size_per_gpu": $micro, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
  "zero_optimization": {"stage": 3}, "activation_checkpointing": {} }
JSON
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo dropped || echo kept; }
mpirun --bind-to none -np "$np" "$ZINF" train --device cuda --model "$model" --data "$dir/rand_train_*.bin" \
    --max_length "$T" --max_steps 2 --save_steps 2 --config "$dir/ds.json" --out "$dir/out" > "$dir/save.log" 2>&1 ||
    { tail -20 "$dir/save.log" >&2; exit 1; }
save_s=$(sed -n 's/^saved .* in \([0-9.]*\) s$/\1/p' "$dir/save.log" | tail -1)
bytes=$(stat -c %s "$dir/out/checkpoint-2.h5")
cache=$(drop)
mpirun --bind-to none -np "$np" "$ZINF" train --device cuda --model "$model" --data "$dir/rand_train_*.bin" \
    --max_length "$T" --max_steps 2 --save_steps 0 --config "$dir/ds.json" --out "$dir/out" --resume auto > "$dir/load.log" 2>&1 ||
    { tail -20 "$dir/load.log" >&2; exit 1; }
load_s=$(sed -n 's/.*resumed from .* (read in \([0-9.]*\) s).*/\1/p' "$dir/load.log" | tail -1)
# the raw disk, the same bytes, the same directory
n=$(( (bytes + 8388607) / 8388608 ))
t0=$(date +%s.%N)
dd if=/dev/zero of="$dir/raw" bs=8M count="$n" conv=fsync status=none
t1=$(date +%s.%N)
drop > /dev/null
dd if="$dir/raw" of=/dev/null bs=8M iflag=direct status=none
t2=$(date +%s.%N)
echo "saves: one, checkpoint-2.h5 (--save_steps 2), read back once (--resume auto, --save_steps 0)"
echo "GPT-2 $model checkpoint on $np rank(s): $(awk -v b="$bytes" 'BEGIN { printf "%.2f GB", b / 1e9 }') in $dir (page cache $cache before the reads)"
awk -v b="$bytes" -v s="$save_s" -v l="$load_s" -v t0="$t0" -v t1="$t1" -v t2="$t2" 'BEGIN {
    w = b / (t1 - t0) / 1e9; r = b / (t2 - t1) / 1e9
    printf "  write: zinf %.2f GB/s (%.1f s); raw dd 8 MiB + fsync %.2f GB/s: %.0f%%\n", b / s / 1e9, s, w, 100 * b / s / 1e9 / w
    printf "  read:  zinf %.2f GB/s (%.1f s, with the 16-bit parameters rebuilt); raw dd O_DIRECT %.2f GB/s: %.0f%%\n", b / l / 1e9, l, r, 100 * b / l / 1e9 / r
    printf "  the training loop stalls %.1f s per save (saves are synchronous)\n", s }'
