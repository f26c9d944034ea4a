#!/usr/bin/env python3
"""Make tests/golden/gpt2_tiny.bin: a tiny GPT-2 run in PyTorch (CPU, float64 math, stored as
float32) that zinf's test_gpt2_golden compares against - logits, loss, every parameter gradient,
and the losses and final parameters of 10 AdamW steps with weight-decay groups and clipping.

The model is written here from the GPT-2 definition (pre-LayerNorm blocks, GELU-tanh MLP, causal
attention, learned positions, LM head tied to the token embedding), independently of zinf.
Run: python3 tests/golden/gen_gpt2.py tests/golden/gpt2_tiny.bin
"""
import math
import struct
import sys

import torch
import torch.nn.functional as F

L, C, NH, V, MAXT, B, T = 2, 32, 4, 200, 32, 2, 16
VP = (V + 127) // 128 * 128
STEPS, LR, BETAS, EPS, WD, CLIP = 10, 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0
DT = torch.float64

torch.manual_seed(20240520)


def param(*shape, std=None, value=None):
    if value is not None:
        t = torch.full(shape, float(value), dtype=DT)
    else:
        t = torch.randn(*shape, dtype=DT) * std
    return t.requires_grad_()


# Parameters in zinf's unit order: embed (wte, wpe), blocks, head (lnf). Non-trivial LayerNorm
# weights and biases so their gradients are exercised.
wte = torch.randn(VP, C, dtype=DT) * 0.02
wte[V:] = 0.0                                   # padded vocabulary rows
wte.requires_grad_()
units = [[("wte", wte, True), ("wpe", param(MAXT, C, std=0.02), True)]]
for l in range(L):
    p = f"blocks.{l}."
    units.append([
        (p + "ln1.weight", (1 + 0.1 * torch.randn(C, dtype=DT)).requires_grad_(), False),
        (p + "ln1.bias", param(C, std=0.1), False),
        (p + "attn.qkv.weight", param(3 * C, C, std=0.1), True),
        (p + "attn.qkv.bias", param(3 * C, std=0.1), False),
        (p + "attn.proj.weight", param(C, C, std=0.1), True),
        (p + "attn.proj.bias", param(C, std=0.1), False),
        (p + "ln2.weight", (1 + 0.1 * torch.randn(C, dtype=DT)).requires_grad_(), False),
        (p + "ln2.bias", param(C, std=0.1), False),
        (p + "mlp.fc.weight", param(4 * C, C, std=0.1), True),
        (p + "mlp.fc.bias", param(4 * C, std=0.1), False),
        (p + "mlp.proj.weight", param(C, 4 * C, std=0.1), True),
        (p + "mlp.proj.bias", param(C, std=0.1), False),
    ])
units.append([("lnf.weight", (1 + 0.1 * torch.randn(C, dtype=DT)).requires_grad_(), False),
              ("lnf.bias", param(C, std=0.1), False)])
P = {name: t for u in units for name, t, _ in u}
params = [t for u in units for _, t, _ in u]

tokens = torch.randint(0, V, (B, T))
targets = torch.randint(0, V, (B, T))
targets[1, 3] = -1  # an ignored position (ignore_index), as zinf's xent treats negatives


def forward(tok, tgt):
    x = P["wte"][tok] + P["wpe"][:T]
    for l in range(L):
        p = f"blocks.{l}."
        h = F.layer_norm(x, (C,), P[p + "ln1.weight"], P[p + "ln1.bias"], eps=1e-5)
        qkv = h @ P[p + "attn.qkv.weight"].T + P[p + "attn.qkv.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(C // NH)
        att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ P[p + "attn.proj.weight"].T + P[p + "attn.proj.bias"]
        h = F.layer_norm(x, (C,), P[p + "ln2.weight"], P[p + "ln2.bias"], eps=1e-5)
        h = F.gelu(h @ P[p + "mlp.fc.weight"].T + P[p + "mlp.fc.bias"], approximate="tanh")
        x = x + h @ P[p + "mlp.proj.weight"].T + P[p + "mlp.proj.bias"]
    x = F.layer_norm(x, (C,), P["lnf.weight"], P["lnf.bias"], eps=1e-5)
    logits = (x @ P["wte"].T)[..., :V]          # padded columns never enter the softmax
    loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=-1)
    return logits, loss


def flat(ts):
    return torch.cat([t.detach().reshape(-1) for t in ts]).to(torch.float32)


out = bytearray()
out += struct.pack("<16i", 0x5A494E46, 1, L, C, NH, V, VP, MAXT, B, T, STEPS, 0, 0, 0, 0, 0)
out += struct.pack("<5f", LR, BETAS[0], BETAS[1], WD, CLIP)
out += flat(params).numpy().tobytes()
out += tokens.to(torch.int32).numpy().tobytes()
out += targets.to(torch.int32).numpy().tobytes()

logits, loss = forward(tokens, targets)
loss.backward()
out += logits.detach().to(torch.float32).numpy().tobytes()
out += struct.pack("<f", loss.item())
out += flat([t.grad for t in params]).numpy().tobytes()

# 10 steps of AdamW on the same batch: decay on 2-D weights and embeddings only (HF's grouping),
# global-norm clipping (coefficient max_norm / (norm + 1e-6), at most 1).
for t in params:
    t.grad = None
decay = [t for u in units for _, t, d in u if d]
nodecay = [t for u in units for _, t, d in u if not d]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": nodecay, "weight_decay": 0.0}],
                        lr=LR, betas=BETAS, eps=EPS)
losses = []
for step in range(STEPS):
    opt.zero_grad()
    _, loss = forward(tokens, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, CLIP)
    opt.step()
    losses.append(loss.item())
out += struct.pack(f"<{STEPS}f", *losses)
out += flat(params).numpy().tobytes()

with open(sys.argv[1] if len(sys.argv) > 1 else "gpt2_tiny.bin", "wb") as f:
    f.write(out)
print("losses", [round(x, 5) for x in losses])
