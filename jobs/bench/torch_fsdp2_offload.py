#!/usr/bin/env python3
"""Peer for jobs/bench/offload_speed.sh: GPT-2 trained with PyTorch FSDP2 (ZeRO-3) and CPU offload
of parameters, gradients and optimizer states (CPUOffloadPolicy(pin_memory=True)) with the fused
CPU AdamW, full activation recomputation per block, bf16 compute, on the same shapes as zinf.
Run under torchrun. Prints one line on rank 0: `fsdp2-offload tokens_per_s_per_gpu ms_per_step peak_gib`.
--clip 1.0 adds gradient clipping (off by default, as in the figure PEERS.md quotes); --gas N
accumulates N micro-batches per step; --no-recompute keeps the activations."""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint

from torch_gpt2 import GPT, PRESETS, steady


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-1.5b")
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--clip", type=float, default=0.0)
    ap.add_argument("--gas", type=int, default=1)
    ap.add_argument("--no-recompute", dest="recompute", action="store_false")
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    L, C, NH = PRESETS[a.model]
    torch.manual_seed(0)
    model = GPT(L, C, NH)
    # full recompute: each block's forward is checkpointed
    for b in model.blocks if a.recompute else []:
        f = b.forward
        b.forward = lambda x, f=f: checkpoint(f, x, use_reentrant=False)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    off = CPUOffloadPolicy(pin_memory=True)
    for b in model.blocks:
        fully_shard(b, mp_policy=mp, offload_policy=off)
    fully_shard(model, mp_policy=mp, offload_policy=off)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    idx = torch.randint(0, 50257, (a.micro, a.T), device="cuda")
    tgt = torch.randint(0, 50257, (a.micro, a.T), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.gas):
            loss = model(idx, tgt) / a.gas
            loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    dt = steady(times)
    if rank == 0:
        print(f"fsdp2-offload {a.gas * a.micro * a.T / dt:.0f} {1e3 * dt:.1f} "
              f"{torch.cuda.max_memory_allocated() / 2**30:.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
