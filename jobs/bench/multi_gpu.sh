#!/bin/bash
# Issue 24's run on one node of several GPUs, in one call of a time-limited lease: the GPU tests
# (make check-cuda's tests/cuda/run.sh on 2 GPUs and on 4, multi.sh's stages, offload and
# checkpoints across GPU counts), the host AdamW rate with the ranks placed as the offload run
# places them, ZeRO-3 beside FSDP2 and offload beside FSDP2 and DeepSpeed. Each part has its own
# time limit and the whole a deadline, so that one hang does not take the rest; a part the deadline
# leaves no time for says so. Logs go to DIR/logs.tgz, the summary to DIR/summary.txt.
# Usage (from the top of a tree holding zinf, tests/ and jobs/, .gpu-bundle/ and, for DeepSpeed,
# .peers/): jobs/bench/multi_gpu.sh DIR [SECONDS, default 530] [PART ...]
# PARTs, run in the order given (default: tests adamw zero3_np4 offload_np2 offload_np4 zero3_np2;
# the Llama and capacity parts take minutes each, so a lease of 10-minute calls runs them a few at
# a time): tests, adamw, zero3_np4, zero3_np2, offload_np2, offload_np4, llama_z3_np4,
# llama_z3_np2, llama_off_np2, cap_qwen32b (Qwen2.5-32B shape on the node's GPUs, ZeRO-Infinity),
# ds_cap_qwen32b (DeepSpeed ZeRO-Infinity, parameters and optimizer in host memory, at that shape on
# the same GPUs: capacity.sh --ds, its phases and the node's peak host memory),
# cap_llama_max (a Llama shape of 56 layers at hidden 8192, 50.0B: on 4xH100 92% of the bound
# capacity.sh prints, whose own largest, 60 layers, would leave no room on the disk beside its
# 217 GiB of NVMe states), cap_20b_np2 (60 layers at hidden 5120, 21.6B, on 2 of the GPUs; 77% of
# the bound capacity.sh printed on a 2xH200 node of 252 GiB and 128 GiB of free disk), ds_build
# (DeepSpeed's CPU Adam and async I/O ops compiled once for the parts after it: on a fresh
# machine each DeepSpeed peer otherwise spends a minute or more of its part's limit compiling
# them, and at 2 and 4 ranks has not reached a step before its part ended), offload_np2_t16 (offload_np2's zinf run alone with 16 OpenMP threads a rank
# instead of the share's 32, to tell the team's size from the share's on a 64-core node),
# llama_off_np1_auto and qwen_off_np1_auto (Llama-3.1-8B and Qwen3-8B shapes, one rank on GPU 0,
# optimizer in host memory, zinf recomputing what its memory needs ("auto") beside DeepSpeed
# ZeRO-3 + CPU Adam in the same part: issue 21's 8B goal on a node whose host holds a peer's 8B
# states).
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: multi_gpu.sh DIR [SECONDS] [PART ...]}
budget=${2:-530}
case $budget in *[!0-9]* | "") echo "multi_gpu.sh: SECONDS '$budget' is not a number (PARTs come after it)" >&2; exit 2 ;; esac
shift; [ $# -eq 0 ] || shift
parts=${*:-tests adamw zero3_np4 offload_np2 offload_np4 zero3_np2}
for p in $parts; do
    case $p in
    tests | adamw | zero3_np4 | zero3_np2 | offload_np2 | offload_np4 | llama_z3_np4 | llama_z3_np2 | llama_off_np2 | \
        cap_qwen32b | ds_cap_qwen32b | cap_llama_max | cap_20b_np2 | ds_build | offload_np2_t16 | llama_off_np1_auto | qwen_off_np1_auto) ;;
    *) echo "multi_gpu.sh: unknown part $p" >&2; exit 2 ;;
    esac
done
start=$(date +%s)
deadline=$((start + budget))
mkdir -p "$out"
logs=$(mktemp -d /tmp/zinf-multi-gpu.XXXXXX)
S=$out/summary.txt
say() { printf '%s\n' "$*" | tee -a "$S"; }
pack() { tar -C "$logs" -czf "$out/logs.tgz" . 2>/dev/null; }
# part NAME CAP COMMAND...: run COMMAND with the smaller of CAP seconds and what the deadline leaves
# (less 15 s to pack up), its output in logs/NAME.log; the summary gets its status and time
part() {
    local name=$1 cap=$2 left; shift 2
    left=$((deadline - $(date +%s) - 15))
    [ "$left" -lt "$cap" ] && cap=$left
    if [ "$cap" -lt 20 ]; then say "== $name: NOT RUN (the deadline leaves ${cap}s)"; return 0; fi
    local t0=$(date +%s) rc=0
    timeout -k 10 "$cap" "$@" > "$logs/$name.log" 2>&1 || rc=$?
    say "== $name: exit $rc after $(( $(date +%s) - t0 ))s (limit ${cap}s)$([ "$rc" -eq 124 ] && echo ', TIMED OUT')"
    pack
    return 0
}
cd "$here" || exit 1
source .gpu-bundle/activate.sh
export ZINF=$here/zinf TESTS_BIN=$here/tests/unit MPIRUN=mpirun top_srcdir=$here
say "multi_gpu.sh at commit $(cat COMMIT 2>/dev/null || echo '?'), $(date -u +%FT%TZ)"
nvidia-smi -L | tee -a "$S"
nvidia-smi topo -m > "$logs/topo.txt" 2>&1
say "$(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) MemTotal, $(df -h /tmp | awk 'NR == 2 { print $4 " free on /tmp" }'), $(lscpu | grep -E '^(Model name|NUMA node\(s\))' | tr -s ' ' | tr '\n' ';')"
ngpu=$(nvidia-smi -L | grep -c '^GPU')

# 1. the GPU tests, at once (tiny models: sharing the GPUs costs time, not results): run.sh on 2
# visible GPUs without its op tests; multi.sh 4, the part run.sh adds from 4 GPUs; the op tests
# on the last GPU. Together they are run.sh on 4 GPUs, its 2-GPU runs placed on GPUs 0-1 instead.
tests() {
if [ "$ngpu" -ge 4 ]; then
    # run.sh alone on 2 GPUs took under 260 s; beside the other two it passed 235 s (2026-11-28)
    part check_cuda_2gpu 420 env CUDA_VISIBLE_DEVICES=0,1 SKIP_OPS=1 sh tests/cuda/run.sh &
    part check_cuda_ops 240 env CUDA_VISIBLE_DEVICES=3 tests/unit/test_backend_ops &
    part check_cuda_multi4 240 sh tests/cuda/multi.sh 4
    wait
else
    # run.sh whole (its op tests included) on 2 H200s took 457 s (2026-11-28)
    part check_cuda_${ngpu}gpu 560 sh tests/cuda/run.sh
fi
for f in "$logs"/check_cuda_*.log; do
    [ -f "$f" ] && say "$(basename "$f" .log): $(grep -E ': [0-9]+ checks' "$f" | tail -2 | tr '\n' ' ')$(grep -c '^FAIL' "$f") FAIL lines"
    grep -E '^FAIL|max relative|last 3 losses' "$f" | sed 's/^/   /' >> "$S"
done
}

# 2. the host AdamW with the ranks placed as offload_speed.sh places them: one process alone, then
# one per rank at once (shared memory bandwidth), at 2 and at 4 ranks
. jobs/bench/ranks.sh
adamw() {
    local np=$1
    (rank_place "$np"; echo "== $np rank(s): $PLACE, OMP_NUM_THREADS=$OMP_NUM_THREADS"
     echo "-- one process alone, best of rounds:"; tests/unit/test_cpu_adamw --bench 67108864 | grep -E 'threads|triad|^avx|^path'
     # 5 s of back-to-back steps, one rank alone, then every rank at once (the windows overlap)
     adamw_at_once 1 "$logs/adamw$np.alone"
     echo "-- one rank alone, sustained: $(cat "$logs/adamw$np.alone.0")"
     adamw_at_once "$np" "$logs/adamw$np.rank"
     for f in "$logs/adamw$np.rank".*; do echo "-- $f (all ranks at once, sustained): $(cat "$f")"; done)
}
adamw_part() {
    part adamw_ranks 90 bash -c "$(declare -f adamw rank_place adamw_at_once); here=$here logs=$logs; adamw 2; adamw 4"
    grep -E '^==|^--|triad|bf16' "$logs/adamw_ranks.log" | grep -v -E 'fp16|f32' | sed 's/^/   /' >> "$S"
}

# 3. the benchmarks, each a part: its log's lines go into the summary
bench() { # bench NAME CAP COMMAND...
    local name=$1
    part "$@"
    [ -f "$logs/$name.log" ] && sed 's/^/   /' "$logs/$name.log" >> "$S"
}
L8="--model llama-3.1-8b --T 4096 --steps 3 --peer-steps 2 --peer-timeout 130"
for p in $parts; do
    # shellcheck disable=SC2086 # $L8 is words
    case $p in
    tests) tests ;;
    adamw) adamw_part ;;
    zero3_np4) bench zero3_np4 150 sh jobs/bench/zero3_speed.sh --np 4 --steps 12 --policies "full none" ;;
    zero3_np2) bench zero3_np2 150 sh jobs/bench/zero3_speed.sh --np 2 --steps 12 --policies "full none" ;;
    offload_np2) bench offload_np2 200 sh jobs/bench/offload_speed.sh --np 2 --steps 8 ;;
    offload_np4) bench offload_np4 200 sh jobs/bench/offload_speed.sh --np 4 --steps 8 ;;
    offload_np2_t16) bench offload_np2_t16 120 env OMP_NUM_THREADS=16 sh jobs/bench/offload_speed.sh --np 2 --steps 8 --no-ds --no-torch ;;
    llama_off_np1_auto) bench llama_off_np1_auto 450 env CUDA_VISIBLE_DEVICES=0 sh jobs/bench/llama_offload.sh --model llama-3.1-8b --steps 4 --recompute auto --peer-steps 2 --peer-timeout 330 --no-torch ;;
    qwen_off_np1_auto) bench qwen_off_np1_auto 450 env CUDA_VISIBLE_DEVICES=0 sh jobs/bench/llama_offload.sh --model qwen3-8b --steps 4 --recompute auto --peer-steps 2 --peer-timeout 330 --no-torch ;;
    ds_build) bench ds_build 240 bash -c 'source .peers/activate-peers.sh && python3 -c "
from deepspeed.ops.op_builder import AsyncIOBuilder, CPUAdamBuilder
for b in (CPUAdamBuilder(), AsyncIOBuilder()):
    b.load(verbose=False)
    print(\"DeepSpeed op built:\", b.name)"' ;;
    llama_z3_np4) bench llama_z3_np4 290 sh jobs/bench/llama_offload.sh $L8 --np 4 --offload none --gas 4 ;;
    llama_z3_np2) bench llama_z3_np2 290 sh jobs/bench/llama_offload.sh $L8 --np 2 --offload none --gas 4 ;;
    llama_off_np2) bench llama_off_np2 400 sh jobs/bench/llama_offload.sh $L8 --np 2 --offload cpu --gas 8 ;;
    cap_qwen32b) bench cap_qwen32b 420 sh jobs/bench/capacity.sh --np "$ngpu" --model qwen2.5-32b --host-gib 320 --steps 1 --nvme /tmp/zinfcap ;;
    ds_cap_qwen32b) bench ds_cap_qwen32b 420 sh jobs/bench/capacity.sh --np "$ngpu" --model qwen2.5-32b --steps 1 --nvme /tmp/zinfcap --ds --no-zinf --ds-time 360 ;;
    cap_llama_max) bench cap_llama_max 540 sh jobs/bench/capacity.sh --np "$ngpu" --llama-hidden 8192 --llama-layers 56 --host-gib 380 --steps 1 --nvme /tmp/zinfcap ;;
    cap_20b_np2) bench cap_20b_np2 480 env CUDA_VISIBLE_DEVICES=0,1 sh jobs/bench/capacity.sh --np 2 --llama-hidden 5120 --llama-layers 60 --host-gib 150 --steps 1 --nvme /tmp/zinfcap ;;
    esac
done
say "done after $(( $(date +%s) - start ))s"
pack
