#!/usr/bin/env python3
"""Make tests/golden/llama/<model>/: tiny Llama-family models (llama, qwen2, qwen3, mistral) saved by
transformers' own save_pretrained as sharded safetensors, and golden.bin, the reference numbers
zinf's Llama-family tests compare against: logits, loss, every parameter's gradient under its HF
name, and the losses and final parameters of 10 AdamW steps (decay groups, clipping).

How the numbers are made. Each model is built by transformers (from_config, eager attention, float32)
and every tensor is randomised, biases and RMSNorm weights included (a fresh HF model has zero biases
and unit norm weights, which would leave those paths untested). It is saved with save_pretrained
(several shards and model.safetensors.index.json), loaded back with from_pretrained and converted to
float64 (model.double()); the golden numbers are that float64 model's, run on the CPU. transformers
keeps a few float32 islands inside a float64 model: RMSNorm's rsqrt(mean(x^2)+eps) is computed in
float32, the softmax of eager attention is float32, and the RoPE cos/sin tables are float32 (inv_freq
included). So the numbers are float32-accurate at those points (relative error ~1e-7), float64
elsewhere. Every model is also run through an independent float64 re-implementation written here from
the Llama math (llama.md section 1), and the script stops unless logits, loss and gradients agree
(relative 1e-5): the golden numbers are HF's, and the math they come from is checked.

Loss: mean cross-entropy of logits[b,t] against targets[b,t] over the positions whose target is not
IGNORE (-100, HF's ignore_index; zinf ignores any negative target). The targets are given per position
(no shift inside the loss), as in gpt2_tiny.bin; the script also checks that HF's own loss
(labels=tokens, shifted inside) equals this cross-entropy on the shifted tokens.

AdamW: torch.optim.AdamW(lr 1e-2, betas (0.9, 0.95), eps 1e-8), weight decay 0.1 on every tensor of
two or more dimensions (the embedding, lm_head, every projection matrix) and 0 on the rest (q/k/v
biases and all RMSNorm weights: input_layernorm, post_attention_layernorm, q_norm, k_norm, norm) -
zinf's rule, as gen_gpt2.py (decay on 2-D weights and embeddings only). Each step: forward, backward,
torch.nn.utils.clip_grad_norm_(all params, 1.0) (coefficient max_norm / (norm + 1e-6), at most 1),
step. A tied model has one embedding tensor (model.embed_tokens.weight), used by the input and the LM
head, with one gradient (the sum of both uses) and decay.

golden.bin layout (little-endian; every float is float32, every integer int32):
  int32  hdr[16]   magic 0x5A494E46, version 2, B, T, V (vocab_size), steps, ntensors, tied (0/1),
                   n_layer, hidden, n_head, n_kv_head, head_dim, intermediate, ignore_index (-100), 0
  char   model_type[16]                   NUL-padded ("llama", "qwen2", "qwen3", "mistral")
  float  hp[8]     lr, beta1, beta2, eps, weight_decay, clip, rms_norm_eps, rope_theta
  ntensors entries, in model.named_parameters() order (a tied lm_head.weight is not among them):
    int32 name_len; char name[name_len], then NULs up to a multiple of 4 bytes;
    int32 decay (1: weight decay applies); int32 ndim; int32 shape[ndim]
  int32  tokens[B*T]; int32 targets[B*T]   (targets may be -100: ignored)
  float  logits[B*T*V]; float loss
  float  grads: each tensor of the table in its order, numel values, row-major (HF shape, [out, in])
  float  losses[steps]                     the loss before each AdamW step (losses[0] == loss)
  float  params after the last step, the table's order and shapes
The initial parameters are not in golden.bin: they are the safetensors files beside it (float32, as
saved), so a test reads them through zinf's importer (or any safetensors reader).

Each directory also holds config_v5.json, a copy of the config.json transformers 5 wrote (rope_parameters
with rope_theta inside, dtype, layer_types for qwen), and config_v4.json, the same config in the
transformers 4.x spelling found in published checkpoints (top-level rope_theta, rope_scaling null or
the llama3 dict with rope_type, torch_dtype, no rope_parameters).

Run (see tests/golden/README.md for the versions used):
    python3 tests/golden/gen_llama.py tests/golden/llama [model ...]
"""
import json
import math
import os
import shutil
import struct
import sys

import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

STEPS, LR, BETAS, EPS, WD, CLIP = 10, 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0
IGNORE = -100
SHARD = "100KB"
B = 2

COMMON = dict(num_hidden_layers=2, hidden_size=64, pad_token_id=None, attention_dropout=0.0,
              initializer_range=0.02, hidden_act="silu")

# name: (config class, kwargs, T, seed). Choices, and why:
#  llama3:     llama3 RoPE scaling. head_dim 16, theta 5e5 gives wavelengths 2*pi*theta^(2i/16) of
#              6.3, 32.5, 168, 869, ...; with original_max_position_embeddings 64, low_freq_factor 1,
#              high_freq_factor 4 the bands are < 16 (kept: i=0), 16..64 (smoothed: i=1, smooth 0.33),
#              > 64 (divided by factor 8: i>=2), so every branch moves a frequency, and at T=32 the
#              angles of the divided ones differ by up to 0.5 rad. GQA 4 query / 2 kv heads (a kv head
#              index taken as h % 2 instead of h // 2 would show). Untied. intermediate 160 (2.5x).
#  llama_tied: tie_word_embeddings (no lm_head.weight in the files), explicit head_dim 32 != 64/4
#              (q_proj [128, 64], o_proj [64, 128]), GQA 4/2, plain RoPE (rope_type default).
#  qwen2:      q/k/v biases (Qwen2 hard-codes them), no o bias, GQA 4/2, untied, eps 1e-6, theta 1e6.
#  qwen3:      per-head q_norm/k_norm before RoPE, attention_bias false, tied, head_dim 128 (the GPU
#              kernels' 128 path; q_proj [256, 64]), GQA 2/1.
#  mistral:    sliding_window null (as v0.2+/v0.3: no window at all), GQA 4/2, untied, theta 1e6,
#              eps 1e-5, intermediate 192 (3x).
# Vocabulary sizes are no multiple of 128 (zinf pads the vocabulary), each different.
MODELS = {
    "llama3": (LlamaConfig, dict(COMMON, vocab_size=250, intermediate_size=160, num_attention_heads=4,
                                 num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                                 tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                                 rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                  "original_max_position_embeddings": 64}),
               32, 1001),
    "llama_tied": (LlamaConfig, dict(COMMON, vocab_size=200, intermediate_size=128, num_attention_heads=4,
                                     num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
                                     rms_norm_eps=1e-5, tie_word_embeddings=True, attention_bias=False,
                                     mlp_bias=False,
                                     rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
                   16, 1002),
    "qwen2": (Qwen2Config, dict(COMMON, vocab_size=230, intermediate_size=128, num_attention_heads=4,
                                num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6,
                                tie_word_embeddings=False, use_sliding_window=False,
                                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              16, 1003),
    "qwen3": (Qwen3Config, dict(COMMON, vocab_size=210, intermediate_size=128, num_attention_heads=2,
                                num_key_value_heads=1, head_dim=128, max_position_embeddings=128,
                                rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False,
                                use_sliding_window=False,
                                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              16, 1004),
    "mistral": (MistralConfig, dict(COMMON, vocab_size=270, intermediate_size=192, num_attention_heads=4,
                                    num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                                    tie_word_embeddings=False, sliding_window=None,
                                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
                16, 1005),
}


# ---------------------------------------------------------------------------------------------------
# config spellings

def config_v4(c5):
    """The transformers 4.x spelling of a config dict transformers 5 wrote: top-level rope_theta,
    rope_scaling (null for plain RoPE), torch_dtype (as published configs written by <= 4.55 have it;
    4.56+ write dtype), and the 4.x version it was checked with (README.md)."""
    c = {"transformers_version": "4.57.6"}
    for k, v in c5.items():
        if k == "rope_parameters":
            rp = dict(v)
            c["rope_theta"] = rp.pop("rope_theta")
            c["rope_scaling"] = None if rp.get("rope_type", "default") == "default" else rp
        elif k == "dtype":
            c["torch_dtype"] = v
        elif k != "transformers_version":
            c[k] = v
    return dict(sorted(c.items()))


# ---------------------------------------------------------------------------------------------------
# independent float64 reference (llama.md section 1), used only to check HF's numbers

def head_dim(cfg):  # Qwen2Config has no head_dim field: hidden / heads, as Qwen2Attention does
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def inv_freq64(cfg):
    d = head_dim(cfg)
    rp = cfg.rope_parameters
    inv = 1.0 / rp["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    if rp.get("rope_type", "default") == "llama3":
        f, lf, hf, L = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], rp["original_max_position_embeddings"]
        wl = 2 * math.pi / inv
        out = torch.where(wl > L / lf, inv / f, inv)
        smooth = (L / wl - lf) / (hf - lf)
        mid = (wl >= L / hf) & (wl <= L / lf)
        inv = torch.where(mid, (1 - smooth) * out / f + smooth * out, out)
    else:
        assert rp.get("rope_type", "default") == "default"
    return inv


def rms(x, w, eps):
    return w * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))


def ref_forward(P, cfg, tok):
    Bz, T = tok.shape
    h, Hq, Hkv, d = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, head_dim(cfg)
    eps = cfg.rms_norm_eps
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq64(cfg)[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rope(x):  # [B, H, T, d], rotate_half pairs (i, i + d/2)
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def lin(x, name):
        y = x @ P[name + ".weight"].T
        return y + P[name + ".bias"] if name + ".bias" in P else y

    x = P["model.embed_tokens.weight"][tok]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for l in range(cfg.num_hidden_layers):
        p = f"model.layers.{l}."
        a = rms(x, P[p + "input_layernorm.weight"], eps)
        q = lin(a, p + "self_attn.q_proj").view(Bz, T, Hq, d)
        k = lin(a, p + "self_attn.k_proj").view(Bz, T, Hkv, d)
        v = lin(a, p + "self_attn.v_proj").view(Bz, T, Hkv, d)
        if p + "self_attn.q_norm.weight" in P:
            q = rms(q, P[p + "self_attn.q_norm.weight"], eps)
            k = rms(k, P[p + "self_attn.k_norm.weight"], eps)
        q, k, v = rope(q.transpose(1, 2)), rope(k.transpose(1, 2)), v.transpose(1, 2)
        kv = torch.arange(Hq) // (Hq // Hkv)          # query head i reads kv head i // group
        s = (q @ k[:, kv].transpose(-1, -2)) / math.sqrt(d)
        o = (s.masked_fill(mask, float("-inf")).softmax(-1) @ v[:, kv]).transpose(1, 2).reshape(Bz, T, Hq * d)
        x = x + lin(o, p + "self_attn.o_proj")
        a = rms(x, P[p + "post_attention_layernorm.weight"], eps)
        x = x + lin(F.silu(lin(a, p + "mlp.gate_proj")) * lin(a, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms(x, P["model.norm.weight"], eps)
    head = P["lm_head.weight"] if "lm_head.weight" in P else P["model.embed_tokens.weight"]
    return x @ head.T


def xent(logits, targets):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V).double(), targets.reshape(-1), ignore_index=IGNORE)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


# ---------------------------------------------------------------------------------------------------

def read_golden(raw):
    """Parse golden.bin as the docstring lays it out (the layout's check, and an example reader)."""
    h = struct.unpack_from("<16i", raw, 0)
    assert h[0] == 0x5A494E46 and h[1] == 2
    Bz, T, V, steps, nt = h[2:7]
    off, g = 64 + 16 + 32, {"names": [], "shapes": [], "decay": []}
    for _ in range(nt):
        n, = struct.unpack_from("<i", raw, off)
        g["names"].append(raw[off + 4: off + 4 + n].decode())
        off += 4 + (n + 3) // 4 * 4
        dc, nd = struct.unpack_from("<2i", raw, off)
        g["decay"].append(dc)
        g["shapes"].append(struct.unpack_from(f"<{nd}i", raw, off + 8))
        off += 8 + 4 * nd
    numel = sum(math.prod(s) for s in g["shapes"])
    off += 4 * (2 * Bz * T + Bz * T * V + 1 + numel + steps + numel)
    assert off == len(raw), (off, len(raw))
    return g


def randomise(model, gen):
    """Every tensor random: matrices and embeddings N(0, 0.1), biases N(0, 0.1), norm weights 1 + N(0, 0.1)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def make(name, outdir):
    cls, kw, T, seed = MODELS[name]
    cfg = cls(**kw)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    randomise(model, gen)
    d = os.path.join(outdir, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    model.save_pretrained(d, max_shard_size=SHARD)

    # what transformers wrote: shards, index with metadata, no lm_head when tied
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        index = json.load(f)
    shards = sorted(set(index["weight_map"].values()))
    assert "metadata" in index and len(shards) >= 3, shards
    assert ("lm_head.weight" in index["weight_map"]) == (not cfg.tie_word_embeddings)
    with open(os.path.join(d, "config.json")) as f:
        c5 = json.load(f)
    assert "rope_parameters" in c5 and "rope_theta" not in c5, c5
    with open(os.path.join(d, "config_v5.json"), "w") as f:
        json.dump(c5, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(d, "config_v4.json"), "w") as f:
        json.dump(config_v4(c5), f, indent=2, sort_keys=True)
        f.write("\n")

    # the golden model is the one read back from the files, in float64
    m = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32)
    sd0, sd1 = model.state_dict(), m.state_dict()
    assert all(torch.equal(sd0[k], sd1[k]) for k in sd0), "round trip changed a tensor"
    if cfg.tie_word_embeddings:
        assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    m = m.double()
    m.train()  # dropout is 0 everywhere; train() only for form
    cfg = m.config
    V = cfg.vocab_size
    names = [n for n, _ in m.named_parameters()]
    params = [p for _, p in m.named_parameters()]
    assert ("lm_head.weight" in names) == (not cfg.tie_word_embeddings)

    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    tokens[0, 0] = V - 1       # the last vocabulary row, next to the padding, as input and as target
    targets[0, 1] = V - 1
    targets[1, 3] = IGNORE     # an ignored position

    # HF's own loss with its shift equals the plain cross-entropy on shifted tokens (HF computes it
    # from logits.float(), float32, hence the tolerance)
    with torch.no_grad():
        out = m(input_ids=tokens, labels=tokens)
        hl, pl = out.loss.item(), xent(out.logits[:, :-1], tokens[:, 1:]).item()
        assert abs(hl - pl) < 1e-6 * pl, (hl, pl)

    logits = m(input_ids=tokens).logits
    loss = xent(logits, targets)
    loss.backward()
    grads = [p.grad.detach().clone() for p in params]

    # the independent float64 reference agrees
    P = {n: p.detach().clone().requires_grad_() for n, p in m.named_parameters()}
    rl = ref_forward(P, cfg, tokens)
    rloss = xent(rl, targets)
    rloss.backward()
    checks = {"logits": rel(logits.detach(), rl.detach()), "loss": abs(loss.item() - rloss.item()) / loss.item()}
    for n, gr in zip(names, grads):
        checks["grad " + n] = rel(gr, P[n].grad)
    worst = max(checks.items(), key=lambda kv: kv[1])
    assert worst[1] < 1e-5, f"{name}: HF and the float64 reference differ: {worst}"

    # 10 AdamW steps on the same batch
    decay = [p.dim() >= 2 for p in params]
    opt = torch.optim.AdamW([{"params": [p for p, dc in zip(params, decay) if dc], "weight_decay": WD},
                             {"params": [p for p, dc in zip(params, decay) if not dc], "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        l = xent(m(input_ids=tokens).logits, targets)
        l.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        losses.append(l.item())
    assert losses[0] == loss.item()

    def f32(ts):
        return b"".join(t.detach().to(torch.float32).contiguous().numpy().tobytes() for t in ts)

    hd = head_dim(cfg)
    out = bytearray()
    out += struct.pack("<16i", 0x5A494E46, 2, B, T, V, STEPS, len(names), int(cfg.tie_word_embeddings),
                       cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                       hd, cfg.intermediate_size, IGNORE, 0)
    out += cfg.model_type.encode().ljust(16, b"\0")
    out += struct.pack("<8f", LR, BETAS[0], BETAS[1], EPS, WD, CLIP, cfg.rms_norm_eps,
                       cfg.rope_parameters["rope_theta"])
    for n, p, dc in zip(names, params, decay):
        nb = n.encode()
        out += struct.pack("<i", len(nb)) + nb.ljust((len(nb) + 3) // 4 * 4, b"\0")
        out += struct.pack(f"<{2 + p.dim()}i", int(dc), p.dim(), *p.shape)
    out += tokens.to(torch.int32).numpy().tobytes() + targets.to(torch.int32).numpy().tobytes()
    out += f32([logits]) + struct.pack("<f", loss.item())
    out += f32(grads)
    out += struct.pack(f"<{STEPS}f", *losses)
    out += f32(params)
    with open(os.path.join(d, "golden.bin"), "wb") as f:
        f.write(out)
    assert read_golden(bytes(out))["names"] == names


    nparam = sum(p.numel() for p in params)
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{name}: {cfg.model_type} V={V} h={cfg.hidden_size} I={cfg.intermediate_size} L={cfg.num_hidden_layers} "
          f"heads={cfg.num_attention_heads}/{cfg.num_key_value_heads} head_dim={hd} tied={cfg.tie_word_embeddings} "
          f"rope={cfg.rope_parameters} B={B} T={T} params={nparam} shards={len(shards)} bytes={size}")
    print(f"  loss {loss.item():.6f} (ln V {math.log(V):.4f}); losses {[round(x, 5) for x in losses]}")
    print(f"  HF vs float64 reference, worst relative difference: {worst[0]} {worst[1]:.2e}")


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/llama"
    names = sys.argv[2:] or list(MODELS)
    torch.set_num_threads(1)   # single-threaded CPU math: the same sums on any machine of the same build
    os.makedirs(outdir, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, python {sys.version.split()[0]}")
    for n in names:
        make(n, outdir)


if __name__ == "__main__":
    main()
