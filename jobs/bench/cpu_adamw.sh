#!/bin/sh
# zinf's CPU AdamW (kernels/cpu/adamw.c, the host step of ZeRO-Offload) beside PyTorch's fused CPU
# AdamW on the same number of fp32 parameters, in the same run on the same host, and the host's
# memory roofline measured there (tests/unit/test_cpu_adamw --bench prints it).
# Usage: jobs/bench/cpu_adamw.sh [N parameters, default 2^26]
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
n=${1:-67108864}
echo "CPU AdamW on $n fp32 parameters, $(nproc) cores"
"$here/tests/unit/test_cpu_adamw" --bench "$n" | grep -v '^scalar'
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
