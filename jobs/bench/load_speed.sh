#!/bin/sh
# Loading a Hugging Face checkpoint into the ZeRO shards (--init_from) beside a raw read of the same
# files, in the same run on the same machine, from a cold page cache each time.
#  1. An 8B-shaped model (hf_llama.py's shapes), random init in bf16 on the GPU, written by
#     transformers' save_pretrained into --dir (shards of its default size and the index: the files
#     a user brings). zinf's own export (`zinf ckpt export --format hf`) writes the same layout but
#     needs a checkpoint, which for an 8B carries 96 GB of optimizer states.
#  2. The raw read: every shard with dd iflag=direct (8 MiB blocks, one read at a time), and the
#     same with io_uring at depth (`zinf io-bench`'s raw O_DIRECT figures on the same directory).
#  3. zinf train --init_from the directory on one rank (ZeRO-3, optimizer in host memory: every
#     byte goes to this rank's shards), which logs the bytes it read, its seconds and GB/s; one
#     short step follows so that the run is a real start.
# The page cache is dropped (echo 3 > /proc/sys/vm/drop_caches) before each read; where that is
# not allowed (not root), the script says so and the figures may come from memory.
# Measured 2026-11-26 on a 2xH100 node, zinf at d4c5dff, a 16.06 GB Llama-3.1-8B file on ext4: dd
# 1.64 and 1.79 GB/s, io-bench's plain O_DIRECT loop 1.68 and io_uring 2.11 GB/s; zinf's load not
# measured (both runs' limits ran out during its start-up and load; docs/performance.md).
# Usage (on a GPU node, after `source .gpu-bundle/activate.sh`):
#   jobs/bench/load_speed.sh [--model llama-3.1-8b] [--dir DIR] [--keep]
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
model=llama-3.1-8b dir= keep=no
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=$2; shift ;; --dir) dir=$2; shift ;; --keep) keep=yes ;;
    *) echo "load_speed.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
tmp=${TMPDIR:-/tmp}/zinf-loadbench.$$
mkdir -p "$tmp"
[ -n "$dir" ] || dir=$tmp/hf
trap 'rm -rf "$tmp"; [ "$keep" = yes ] || rm -rf "$dir"' EXIT
drop() {
    sync
    if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then return 0; fi
    echo "  (the page cache could not be dropped: not root here; the next figure may come from memory)"
}
if [ ! -f "$dir/config.json" ]; then
    t0=$(date +%s)
    python3 "$here/jobs/bench/hf_llama.py" --model "$model" --save "$dir" > "$tmp/save.out" 2> "$tmp/save.err" ||
        { echo "save_pretrained failed:"; tail -3 "$tmp/save.err"; exit 1; }
    echo "$(cat "$tmp/save.out") ($(( $(date +%s) - t0 )) s, transformers' save_pretrained)"
fi
bytes=$(cat "$dir"/*.safetensors | wc -c)
nshard=$(ls "$dir"/*.safetensors | wc -l)
echo "$model: $dir, $nshard files, $bytes bytes"
df -T "$dir" | tail -1 | awk '{ print "  file system: " $2 " (" $1 ")" }'
drop
t0=$(date +%s.%N)
for f in "$dir"/*.safetensors; do dd if="$f" of=/dev/null bs=8M iflag=direct 2>/dev/null; done
t1=$(date +%s.%N)
raw=$(awk -v b="$bytes" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.2f", b / 1e9 / (z - a) }')
echo "raw read, dd iflag=direct bs=8M, one file after another: $raw GB/s"
"$ZINF" io-bench --path "$dir" --size 4G --block-sizes 8M --queue-depths 8 --parallelism 1 > "$tmp/iob.txt" 2>&1 || :
grep -E 'O_DIRECT: write|io_uring: write' "$tmp/iob.txt" | sed 's/^/  io-bench on the same directory: /' || :
# zinf's load: one rank, ZeRO-3, optimizer in host memory (every master of the model on this rank)
V=$("$ZINF" estimate --model "$dir" | sed -n 's/.*vocab \([0-9]*\) (padded.*/\1/p' | head -1)
"$ZINF" data --random 20000 --vocab "${V:-32000}" --out "$tmp/rand" >/dev/null
cat > "$tmp/ds.json" <<JSON
{ "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
  "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true}} }
JSON
drop
rc=0
t0=$(date +%s)
mpirun --bind-to none -np 1 "$ZINF" train --device cuda --model "$dir" --init_from "$dir" --data "$tmp/rand_train_*.bin" \
    --max_length 256 --max_steps 1 --save_steps 0 --config "$tmp/ds.json" --out "$tmp/out" > "$tmp/zinf.log" 2>&1 || rc=$?
line=$(grep "initial weights from" "$tmp/zinf.log" | head -1)
# zinf's own lines, not mpirun's frame around them
[ "$rc" -eq 0 ] || { echo "zinf failed (exit $rc):"; grep -v '^ \|^--\|^$\|^mpirun\|^the job\|^Primary' "$tmp/zinf.log" | tail -6; }
echo "zinf --init_from: ${line#*safetensors; }" | sed 's/)$//'
zr=$(printf '%s\n' "$line" | sed -n 's/.* s, \([0-9.]*\) GB\/s, .*/\1/p')
awk -v z="$zr" -v r="$raw" 'BEGIN { if (z > 0 && r > 0) printf "the load at %.2fx the raw read (%.2f / %.2f GB/s)\n", z / r, z, r }'
echo "  whole zinf run (start-up, load, one step of 256 tokens): $(( $(date +%s) - t0 )) s"
