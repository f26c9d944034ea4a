#!/usr/bin/env python3
"""Peers for jobs/bench/llama_offload.sh: Hugging Face transformers' LlamaForCausalLM or
Qwen3ForCausalLM of a published shape (hf_llama.py's config: random init, SDPA attention), each
decoder layer checkpointed (transformers' gradient checkpointing, non-reentrant: zinf's recompute
policy with "activation_checkpointing": {}; --checkpoint no: none), bf16, gradient clipping --clip, trained with
  --engine ds     DeepSpeed ZeRO-3 with the "auto" sizes HF and ms-swift fill (reduce_bucket_size
                  H^2, stage3_prefetch_bucket_size 0.9 H^2, stage3_param_persistence_threshold
                  10 H); --offload cpu: the optimizer offloaded to the CPU (DeepSpeedCPUAdam,
                  pinned memory); --offload none: the optimizer on the GPUs, DeepSpeed's FusedAdam,
                  or torch's fused AdamW (DeepSpeed's "torch_adam") where FusedAdam cannot build;
  --engine fsdp2  PyTorch FSDP2 (one fully_shard group per decoder layer, one for the rest; bf16
                  parameters, fp32 gradient reduction) with the fused AdamW: --offload cpu adds
                  CPUOffloadPolicy(pin_memory=True) and the AdamW steps on the CPU; --offload none
                  keeps everything on the GPUs and the AdamW steps there.
The model is made on the GPU in fp32 (fast random init) and handed to the engine, which shards it
(and with --offload cpu moves the fp32 states to the host). Run under torchrun, one process per
GPU. Prints one line on rank 0: `NAME tokens_per_s_per_gpu ms_per_step peak_gib` (NAME
deepspeed-offload, deepspeed, fsdp2-offload or fsdp2), and for --engine ds first
`deepspeed-adam WHICH` (FusedAdam, or torch-fused-AdamW and why FusedAdam did not build)."""
import argparse
import os

import torch
import torch.distributed as dist
import transformers

from hf_llama import config
from torch_gpt2 import ds_offload_config, fsdp2_offload_step, time_steps


def fused_adam_or_torch(ds):
    """DeepSpeed's own GPU AdamW for a config without offload: FusedAdam, built here (each rank
    loads the JIT-built op) so that a build failure is seen before the engine starts; where it
    cannot build, torch's fused AdamW through DeepSpeed's "torch_adam". Returns which, in words."""
    try:
        from deepspeed.ops.op_builder import FusedAdamBuilder

        FusedAdamBuilder().load()
        return "FusedAdam"
    except Exception as e:  # the build's own error, shortened to one line
        why = " ".join(str(e).split())[:200] or type(e).__name__
        ds["optimizer"]["params"].update(torch_adam=True, fused=True)
        return f"torch-fused-AdamW (DeepSpeed's FusedAdam did not build: {why})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=("ds", "fsdp2"), required=True)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--micro", type=int, default=1)
    ap.add_argument("--T", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--gas", type=int, default=8)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--offload", choices=("cpu", "none"), default="cpu")
    # DeepSpeed's offload_optimizer.ratio (ZeRO-3): this share of the optimizer states on the CPU
    ap.add_argument("--ratio", type=float, default=1.0)
    ap.add_argument("--checkpoint", choices=("yes", "no"), default="yes")
    # --engine ds: ZeRO-Infinity's parameter offload (offload_param cpu, pinned), the model built
    # sharded under deepspeed.zero.Init as transformers does for a ZeRO-3 config (capacity.sh --ds)
    ap.add_argument("--offload-param", choices=("cpu", "none"), default="none")
    a = ap.parse_args()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.manual_seed(0)
    cfg = config(a.model, a.T)
    cfg.use_cache = False
    if a.offload_param == "cpu":
        return infinity(a, cfg)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    if a.checkpoint == "yes":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    C = cfg.hidden_size
    if a.engine == "ds":
        import deepspeed

        ds = ds_offload_config(a, C)
        name = "deepspeed-offload"
        if a.offload == "none":
            name = "deepspeed"
            del ds["zero_optimization"]["offload_optimizer"]
        elif a.ratio < 1:
            ds["zero_optimization"]["offload_optimizer"]["ratio"] = a.ratio
            adam = fused_adam_or_torch(ds)
            if int(os.environ.get("RANK", 0)) == 0:
                print(f"deepspeed-adam {adam}", flush=True)
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)

        def micro_step(idx, tgt, last):
            engine.backward(engine(input_ids=idx, labels=tgt).loss)
            engine.step()  # DeepSpeed updates at the accumulation boundary only

        time_steps(a, micro_step, name)
        return
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    dist.init_process_group("cpu:gloo,cuda:nccl")
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kw = {"mp_policy": mp}
    if a.offload == "cpu":
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
    for layer in model.model.layers:
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    torch.cuda.empty_cache()
    # the fused AdamW steps where the sharded parameters are: the host with CPU offload, else the GPU
    micro_step = fsdp2_offload_step(a, model, lambda idx, tgt: model(input_ids=idx, labels=tgt).loss)

    time_steps(a, micro_step, "fsdp2-offload" if a.offload == "cpu" else "fsdp2")
    dist.destroy_process_group()


def host_used_gib():
    """The node's host memory in use, MemTotal - MemAvailable, in GiB."""
    m = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            m[k] = int(v.split()[0])
    return (m["MemTotal"] - m["MemAvailable"]) / 2**20


def infinity(a, cfg):
    """DeepSpeed ZeRO-3 with the optimizer (--offload) and the parameters in host memory, the model
    built under deepspeed.zero.Init, so that no GPU or rank ever holds it whole. Rank 0 prints
    `deepspeed-phase WHAT GiB` (the node's host memory in use) after each phase, so that a run
    stopped for memory says how far it came."""
    import deepspeed

    rank0 = int(os.environ.get("RANK", 0)) == 0

    def phase(what):
        if rank0:
            print(f"deepspeed-phase {what} {host_used_gib():.1f}", flush=True)

    phase("start")
    deepspeed.init_distributed()
    ds = ds_offload_config(a, cfg.hidden_size)
    ds["zero_optimization"]["offload_param"] = {"device": "cpu", "pin_memory": True}
    if a.offload == "none":
        del ds["zero_optimization"]["offload_optimizer"]
    with deepspeed.zero.Init(config_dict_or_path=ds):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    if a.checkpoint == "yes":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    phase("model-built")
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)
    phase("engine-initialized")

    def micro_step(idx, tgt, last):
        engine.backward(engine(input_ids=idx, labels=tgt).loss)
        engine.step()
        if last:
            phase("step-done")

    time_steps(a, micro_step, "deepspeed-infinity")


if __name__ == "__main__":
    main()
