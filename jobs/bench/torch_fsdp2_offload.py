#!/usr/bin/env python3
"""Peer for jobs/bench/offload_speed.sh: GPT-2 trained with PyTorch FSDP2 (ZeRO-3) and CPU offload
of parameters, gradients and optimizer states (CPUOffloadPolicy(pin_memory=True)) with the fused
CPU AdamW, full activation recomputation per block, bf16 compute, on the same shapes as zinf.
Run under torchrun. Prints one line on rank 0: `fsdp2-offload tokens_per_s_per_gpu ms_per_step peak_gib`.
--clip 1.0 adds gradient clipping (off by default, as in the figure PEERS.md quotes); --gas N
accumulates N micro-batches per step; --no-recompute keeps the activations.
The process group has a CPU backend (gloo) beside NCCL: with the parameters and gradients
offloaded, clip_grad_norm_ all-reduces the norm of CPU tensors, which NCCL cannot do (at one rank
nothing is reduced, so only runs of 2 or more ranks with clipping need it)."""
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from torch_gpt2 import fsdp2_offload_step, offload_args, offload_model, time_steps


def main():
    a = offload_args(clip=0.0)
    dist.init_process_group("cpu:gloo,cuda:nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    model, _ = offload_model(a)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    off = CPUOffloadPolicy(pin_memory=True)
    for b in model.blocks:
        fully_shard(b, mp_policy=mp, offload_policy=off)
    fully_shard(model, mp_policy=mp, offload_policy=off)
    micro_step = fsdp2_offload_step(a, model, model)

    time_steps(a, micro_step, "fsdp2-offload")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
