#!/usr/bin/env python3
"""DeepSpeed peer for jobs/bench/offload_speed.sh: the GPT-2 of torch_gpt2.py trained with DeepSpeed
ZeRO-3, the optimizer offloaded to the CPU (DeepSpeedCPUAdam, pinned memory), bf16, one
checkpointed forward per block (full recompute), the config sizes HF and ms-swift fill for "auto"
(reduce_bucket_size H^2, stage3_prefetch_bucket_size 0.9 H^2, stage3_param_persistence_threshold
10 H). Run under torchrun with DeepSpeed importable (../shared/gpu/PEERS.md). Prints one line on
rank 0: `deepspeed-offload tokens_per_s_per_gpu ms_per_step peak_gib`."""
import os

import deepspeed
import torch

from torch_gpt2 import ds_offload_config, offload_args, offload_model, time_steps


def main():
    a = offload_args(clip=1.0)
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    model, C = offload_model(a)
    cfg = ds_offload_config(a, C)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)

    def micro_step(idx, tgt, last):
        engine.backward(engine(idx, tgt))
        engine.step()  # DeepSpeed updates at the accumulation boundary only

    time_steps(a, micro_step, "deepspeed-offload")


if __name__ == "__main__":
    main()
