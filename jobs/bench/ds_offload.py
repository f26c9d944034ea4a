#!/usr/bin/env python3
"""DeepSpeed peer for jobs/bench/offload_speed.sh: the GPT-2 of torch_gpt2.py trained with DeepSpeed
ZeRO-3, the optimizer offloaded to the CPU (DeepSpeedCPUAdam, pinned memory), bf16, one
checkpointed forward per block (full recompute), the config sizes HF and ms-swift fill for "auto"
(reduce_bucket_size H^2, stage3_prefetch_bucket_size 0.9 H^2, stage3_param_persistence_threshold
10 H). Run under torchrun with DeepSpeed importable (../shared/gpu/PEERS.md). Prints one line on
rank 0: `deepspeed-offload tokens_per_s_per_gpu ms_per_step peak_gib`."""
import argparse
import os
import time

import deepspeed
import torch
from torch.utils.checkpoint import checkpoint

from torch_gpt2 import GPT, PRESETS, steady


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-1.5b")
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--gas", type=int, default=1)
    ap.add_argument("--no-recompute", dest="recompute", action="store_false")
    a = ap.parse_args()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    L, C, NH = PRESETS[a.model]
    torch.manual_seed(0)
    model = GPT(L, C, NH)
    for b in model.blocks if a.recompute else []:
        f = b.forward
        b.forward = lambda x, f=f: checkpoint(f, x, use_reentrant=False)
    cfg = {
        "train_micro_batch_size_per_gpu": a.micro,
        "gradient_accumulation_steps": a.gas,
        "gradient_clipping": a.clip,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
        "zero_optimization": {
            "stage": 3, "overlap_comm": True, "contiguous_gradients": True,
            "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "reduce_bucket_size": C * C, "stage3_prefetch_bucket_size": int(0.9 * C * C),
            "stage3_param_persistence_threshold": 10 * C,
        },
        "steps_per_print": 10 ** 9,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    rank = torch.distributed.get_rank()
    idx = torch.randint(0, 50257, (a.micro, a.T), device="cuda")
    tgt = torch.randint(0, 50257, (a.micro, a.T), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.gas):
            loss = engine(idx, tgt)
            engine.backward(loss)
            engine.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    dt = steady(times)
    if rank == 0:
        print(f"deepspeed-offload {a.gas * a.micro * a.T / dt:.0f} {1e3 * dt:.1f} "
              f"{torch.cuda.max_memory_allocated() / 2**30:.2f}", flush=True)


if __name__ == "__main__":
    main()
