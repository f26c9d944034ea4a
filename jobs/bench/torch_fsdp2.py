#!/usr/bin/env python3
"""Peer for jobs/bench/zero3_speed.sh: GPT-2 trained with PyTorch FSDP2 (ZeRO-3: parameters,
gradients and optimizer states sharded over the GPUs) with bf16 parameters and fp32 gradient
reduction (MixedPrecisionPolicy), the fused CUDA AdamW on the fp32 shards, gradient clipping 1.0,
and each block's forward recomputed in the backward unless --no-recompute. Run under torchrun.
Prints one line on rank 0: `fsdp2 tokens_per_s_per_gpu ms_per_step peak_gib`, or
`fsdp2 oom - - -` when the step does not fit in GPU memory."""
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from torch_gpt2 import offload_args, offload_model, time_steps


def main():
    a = offload_args(clip=1.0)
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.backends.cuda.matmul.allow_tf32 = True
    model, _ = offload_model(a)
    model = model.cuda()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for b in model.blocks:
        fully_shard(b, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)

    def micro_step(idx, tgt, last):
        (model(idx, tgt) / a.gas).backward()
        if last:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            opt.step()
            opt.zero_grad(set_to_none=True)

    try:
        time_steps(a, micro_step, "fsdp2")
    except torch.OutOfMemoryError:
        if dist.get_rank() == 0:
            print("fsdp2 oom - - -", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
