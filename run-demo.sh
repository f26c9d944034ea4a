#!/bin/sh
# The main job on an embedded default: install what is missing (as root), build, make a data set
# of two-digit additions ("07+35=042") with a random 10% of the problems held out, train a small
# GPT-2 on it on 2 MPI ranks, then ask the model every held-out problem and print its accuracy.
# Usage: ./run-demo.sh [extra zinf train flags]     (outputs in demo-out/)
set -eu
cd "$(dirname "$0")"
sh jobs/install-deps.sh
if [ ! -x zinf ]; then
    [ -x configure ] || ./autogen.sh >/dev/null
    [ -f Makefile ] || ./configure >/dev/null
    echo "zinf: building"
    make -j"$(nproc)" zinf >/dev/null
fi
OUT=demo-out
# a run of the demo starts over: the last one's checkpoints would otherwise be refused as another
# run's (zinf train does not start a new run where one left its checkpoints)
rm -rf "$OUT"
mkdir -p "$OUT"
# Fixed-width problems of 10 bytes: a window of 30 tokens holds exactly three, so every training
# sequence starts at a problem. The training text is the kept problems in 6 shuffled passes; the
# validation text is one more pass; heldout.tsv is "prompt<TAB>answer".
awk -v out="$OUT" 'BEGIN { srand(1); n = 0
  for (a = 0; a < 100; a++) for (b = 0; b < 100; b++) {
    if (rand() < 0.1) printf "%02d+%02d=\t%03d\n", a, b, a + b > (out "/heldout.tsv")
    else line[n++] = sprintf("%02d+%02d=%03d", a, b, a + b) }
  for (r = 0; r < 7; r++) {
    for (i = n - 1; i > 0; i--) { j = int(rand() * (i + 1)); t = line[i]; line[i] = line[j]; line[j] = t }
    for (i = 0; i < n; i++) print line[i] > (out (r < 6 ? "/train.txt" : "/val.txt")) } }'
./zinf data --input "$OUT/train.txt" --out "$OUT/add"
./zinf data --input "$OUT/val.txt" --out "$OUT/addval"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mpirun --oversubscribe -np 2 ./zinf train --config jobs/configs/demo-addition.json \
    --model test-mini --data "$OUT/add_train_*.bin" --val "$OUT/addval_train_*.bin" --out "$OUT" \
    --max_length 30 --max_steps 1500 --eval_prompts "$OUT/heldout.tsv" --max_new_tokens 4 "$@"
echo "zinf: metrics in $OUT/metrics.jsonl"
# the run as a figure: loss, validation loss, learning rate and throughput (and a PNG where
# rsvg-convert or ImageMagick is installed)
./zinf plot "$OUT"
