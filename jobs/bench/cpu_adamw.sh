#!/bin/sh
# zinf's CPU AdamW (kernels/cpu/adamw.c, the host step of ZeRO-Offload) beside PyTorch's fused CPU
# AdamW on the same number of fp32 parameters, in the same run on the same host, and the host's
# memory roofline measured there (tests/unit/test_cpu_adamw --bench prints it).
#
# With --ranks N, the placement of N ranks on this node as zinf-launch places them (each bound to
# its share of the cores, OMP_NUM_THREADS as many): the rate of one rank alone on its share, and
# of every rank at once (each rank's host AdamW runs at the same time in an offloaded run, so they
# share the node's memory bandwidth), beside the same N ranks unbound (zinf-launch
# --bind_cores_to_rank false: each rank's OpenMP team over every core) and unbound with
# OMP_NUM_THREADS=1. Each figure is the mean over 5 s of back-to-back steps (test_cpu_adamw
# --sustain), so that ranks run at once overlap for the whole measurement (a best-of-rounds figure
# per rank does not: each rank's best round can fall where the others are idle, which showed two
# ranks at 5.9 and 4.8 Gparam/s where they sustain 2.4 each). A GPU node's run of it tells whether
# an offloaded run's per-rank host AdamW (its "host optimizer (ms)" line) runs at the rate its
# placement allows.
# Usage: jobs/bench/cpu_adamw.sh [--ranks N] [N parameters, default 2^26]
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
ranks=0
if [ "${1:-}" = --ranks ]; then
    ranks=${2:?--ranks needs a number}
    shift 2
fi
n=${1:-67108864}
bench=$here/tests/unit/test_cpu_adamw
[ -x "$bench" ] || { echo "cpu_adamw.sh: $bench is not built (make tests/unit/test_cpu_adamw)" >&2; exit 1; }
if [ "$ranks" -gt 0 ]; then
    launch=${ZINF_LAUNCH:-$here/zinf-launch}
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # the rate of one --sustain output: Gparam/s and the GB/s it moves
    rate() { sed -n 's/.* threads: \([0-9.]*\) Gparam\/s (\([0-9.]*\) GB\/s.*/\1 Gparam\/s (\2 GB\/s)/p' "$1"; }
    threads() { sed -n 's/.*, \([0-9]*\) threads:.*/\1/p' "$1"; }
    # place WHAT LAUNCH-FLAGS...: run the benchmark in every rank (or rank 0 only: ONLY=0)
    place() {
        what=$1
        shift
        rm -f "$tmp"/out.*
        "$launch" --nproc_per_node "$ranks" "$@" sh -c '
            [ -z "$3" ] || [ "$OMPI_COMM_WORLD_RANK" = "$3" ] || exit 0
            echo "cpus=$(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status) threads=${OMP_NUM_THREADS:-all}" > "$4.$OMPI_COMM_WORLD_RANK"
            exec "$1" --sustain 5 "$2" >> "$4.$OMPI_COMM_WORLD_RANK"' _ "$bench" "$n" "${ONLY:-}" "$tmp/out" > "$tmp/launch.log" 2>&1 ||
            { sed 's/^/  /' "$tmp/launch.log"; return 1; }
        for f in "$tmp"/out.*; do
            printf '%-58s rank %s on CPUs %-10s %3s threads: %s\n' "$what" "${f##*.}" \
                "$(sed -n '1s/cpus=\([^ ]*\).*/\1/p' "$f")" "$(threads "$f")" "$(rate "$f")"
        done
    }
    echo "CPU AdamW on $n fp32 parameters per rank, $ranks ranks on this node ($(nproc) CPUs), bf16 copy, best path, 5 s sustained"
    # the node's NUMA nodes and hardware threads per core: a share that spans NUMA nodes reads
    # part of its states from the other node's memory
    for d in /sys/devices/system/node/node[0-9]*; do
        [ -r "$d/cpulist" ] && printf '  NUMA %s: CPUs %s\n' "${d##*node}" "$(cat "$d/cpulist")"
    done
    printf '  hardware threads per core: %s\n' "$(lscpu 2>/dev/null | sed -n 's/^Thread(s) per core: *//p')"
    printf '  placement note: %s\n' "$("$launch" --dry-run --nproc_per_node "$ranks" true 2>&1 | sed -n "s/^zinf-launch: this node's ranks: //p")"
    ONLY=0 place "one rank alone, bound to its share (zinf-launch's default)"
    place "every rank at once, each bound to its share"
    (unset OMP_NUM_THREADS; place "every rank at once, unbound, a thread per CPU each" --bind_cores_to_rank false)
    OMP_NUM_THREADS=1 place "every rank at once, unbound, OMP_NUM_THREADS=1" --bind_cores_to_rank false
    "$bench" --sustain 5 "$n" > "$tmp/whole"
    printf '%-58s %29s %3s threads: %s\n' "one process alone over the whole node" "" \
        "$(threads "$tmp/whole")" "$(rate "$tmp/whole")"
    exit 0
fi
echo "CPU AdamW on $n fp32 parameters, $(nproc) cores"
"$bench" --bench "$n" | grep -v '^scalar'
if python3 -c 'import torch' 2>/dev/null; then
    python3 - "$n" <<'PY'
import sys, time, torch
n = int(sys.argv[1])
p = torch.nn.Parameter(torch.zeros(n))
p.grad = torch.randn(n) * 1e-3
opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.1, fused=True)
ts = []
for _ in range(7):
    t0 = time.perf_counter(); opt.step(); ts.append(time.perf_counter() - t0)
dt = sorted(ts[2:])[len(ts[2:]) // 2]
print(f"PyTorch {torch.__version__} fused CPU AdamW (fp32 parameters, no 16-bit copy): {1e3 * dt:.2f} ms/step, "
      f"{n / dt / 1e9:.3f} Gparam/s (median of 5 after 2 warm-up steps)")
PY
fi
