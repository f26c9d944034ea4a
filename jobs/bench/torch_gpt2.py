#!/usr/bin/env python3
"""Reference for jobs/bench/gpt2_speed.sh: GPT-2 training throughput in PyTorch on the same GPU,
same shapes (bf16 autocast, fused AdamW, B x T tokens per step), eager and torch.compile.
Prints one line per mode: `torch MODE tokens_per_s ms_per_step peak_gib`."""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

PRESETS = {"gpt2-124m": (12, 768, 12), "gpt2-350m": (24, 1024, 16), "gpt2-774m": (36, 1280, 20),
           "gpt2-1.5b": (48, 1600, 25)}


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V=50304, T=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1))


def steady(times):
    """The step time: the median of the steps after the first third (warm-up)."""
    tail = sorted(times[len(times) // 3:])
    return tail[len(tail) // 2]


def offload_args(clip):
    """The command line of the offload peers (torch_fsdp2_offload.py, ds_offload.py)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-1.5b")
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--clip", type=float, default=clip)
    ap.add_argument("--gas", type=int, default=1)
    ap.add_argument("--no-recompute", dest="recompute", action="store_false")
    return ap.parse_args()


def offload_model(a):
    """The peers' model on the host, each block's forward checkpointed unless --no-recompute."""
    L, C, NH = PRESETS[a.model]
    torch.manual_seed(0)
    model = GPT(L, C, NH)
    for b in model.blocks if a.recompute else []:
        f = b.forward
        b.forward = lambda x, f=f: checkpoint(f, x, use_reentrant=False)
    return model, C


def time_steps(a, micro_step, name):
    """Time a.steps steps of a.gas micro-steps (micro_step(idx, tgt) runs one) on random tokens
    and print `name tokens_per_s_per_gpu ms_per_step peak_gib` on rank 0."""
    idx = torch.randint(0, 50257, (a.micro, a.T), device="cuda")
    tgt = torch.randint(0, 50257, (a.micro, a.T), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k in range(a.gas):
            micro_step(idx, tgt, k == a.gas - 1)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    dt = steady(times)
    if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        print(f"{name} {a.gas * a.micro * a.T / dt:.0f} {1e3 * dt:.1f} "
              f"{torch.cuda.max_memory_allocated() / 2**30:.2f}", flush=True)


def ds_offload_config(a, C):
    """The DeepSpeed config of the offload peers (ds_offload.py, hf_llama_offload.py): ZeRO-3, the
    optimizer on the CPU (DeepSpeedCPUAdam, pinned), bf16, the sizes HF and ms-swift fill for
    "auto" at hidden size C."""
    return {
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


def fsdp2_offload_step(a, model, loss_of):
    """The fused AdamW of the FSDP2 peers (torch_fsdp2_offload.py, hf_llama_offload.py), which
    steps where the sharded parameters are (the CPU with CPUOffloadPolicy, else the GPU), and their
    micro-step: loss_of(idx, tgt) / gas backward; at the last micro-step of a step clipping
    (a.clip > 0), the step and zeroed gradients."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)

    def micro_step(idx, tgt, last):
        (loss_of(idx, tgt) / a.gas).backward()
        if last:
            if a.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            opt.step()
            opt.zero_grad(set_to_none=True)

    return micro_step


def run(mode, args):
    L, C, NH = PRESETS[args.model]
    torch.manual_seed(0)
    model = GPT(L, C, NH).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    fwd = torch.compile(model) if mode == "compile" else model

    def micro_step(idx, tgt, last):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    time_steps(args, micro_step, f"torch {mode}")
    del model, opt, fwd
    torch.cuda.empty_cache()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-124m")
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--modes", default="eager,compile")
    ap.set_defaults(gas=1)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    for m in a.modes.split(","):
        run(m, a)
