"""Reference for test_generate.sh: greedy generation with a Llama-family model (llama, qwen2,
qwen3, mistral) written here in numpy (float64) from the Llama math, reading a Hugging Face
directory's config.json, safetensors files (F32) and generation_config.json on its own.

  gen_ref.py greedy DIR IDS N     the greedy continuation of the comma-separated IDS, at most N
                                  tokens, stopping before generation_config.json's eos_token_id;
                                  printed as ids separated by blanks
  gen_ref.py chi2 DIR IDS TEMP FILE
                                  the first tokens drawn at temperature TEMP after IDS (FILE: one
                                  a line) against the softmax: Pearson's chi-square, 0 when it is
                                  below the 0.999 quantile
  gen_ref.py nucleus DIR IDS TEMP P
                                  the ids top-p P keeps after IDS at temperature TEMP
  gen_ref.py golden DIR K         golden.bin's first row: its first K tokens (comma-separated) and
                                  the argmax of transformers' logits at position K-1
"""
import glob
import json
import math
import os
import struct
import sys

import numpy as np


def load(d):
    P = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        raw = open(f, "rb").read()
        n, = struct.unpack_from("<Q", raw, 0)
        hdr = json.loads(raw[8:8 + n])
        for k, v in hdr.items():
            if k == "__metadata__":
                continue
            assert v["dtype"] == "F32", (k, v["dtype"])
            a, b = v["data_offsets"]
            P[k] = np.frombuffer(raw, "<f4", (b - a) // 4, 8 + n + a).reshape(v["shape"]).astype(np.float64)
    return P


def inv_freq(c, d):
    rp = c.get("rope_parameters") or dict(c.get("rope_scaling") or {}, rope_theta=c.get("rope_theta", 10000.0))
    inv = 1.0 / rp["rope_theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d)
    if rp.get("rope_type", "default") == "llama3":
        f, lf, hf, L = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], rp["original_max_position_embeddings"]
        wl = 2 * math.pi / inv
        out = np.where(wl > L / lf, inv / f, inv)
        smooth = (L / wl - lf) / (hf - lf)
        mid = (wl >= L / hf) & (wl <= L / lf)
        inv = np.where(mid, (1 - smooth) * out / f + smooth * out, out)
    return inv


def rms(x, w, eps):
    return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def forward(P, c, tok):
    T = len(tok)
    Hq, Hkv = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or c["hidden_size"] // Hq
    eps = c["rms_norm_eps"]
    ang = np.arange(T, dtype=np.float64)[:, None] * inv_freq(c, d)[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(x):  # [H, T, d]: the pairs (i, i + d/2)
        return x * cos + np.concatenate([-x[..., d // 2:], x[..., : d // 2]], -1) * sin

    def lin(x, name):
        y = x @ P[name + ".weight"].T
        return y + P[name + ".bias"] if name + ".bias" in P else y

    x = P["model.embed_tokens.weight"][tok]
    mask = np.triu(np.ones((T, T), bool), 1)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        a = rms(x, P[p + "input_layernorm.weight"], eps)
        q = lin(a, p + "self_attn.q_proj").reshape(T, Hq, d)
        k = lin(a, p + "self_attn.k_proj").reshape(T, Hkv, d)
        v = lin(a, p + "self_attn.v_proj").reshape(T, Hkv, d)
        if p + "self_attn.q_norm.weight" in P:
            q = rms(q, P[p + "self_attn.q_norm.weight"], eps)
            k = rms(k, P[p + "self_attn.k_norm.weight"], eps)
        q, k, v = rope(q.transpose(1, 0, 2)), rope(k.transpose(1, 0, 2)), v.transpose(1, 0, 2)
        kv = np.arange(Hq) // (Hq // Hkv)
        s = q @ k[kv].transpose(0, 2, 1) / math.sqrt(d)
        s = np.where(mask, -np.inf, s)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ v[kv]).transpose(1, 0, 2).reshape(T, Hq * d)
        x = x + lin(o, p + "self_attn.o_proj")
        a = rms(x, P[p + "post_attention_layernorm.weight"], eps)
        g = lin(a, p + "mlp.gate_proj")
        x = x + lin(g / (1 + np.exp(-g)) * lin(a, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms(x, P["model.norm.weight"], eps)
    head = P["lm_head.weight"] if "lm_head.weight" in P else P["model.embed_tokens.weight"]
    return x @ head.T


def greedy(d, ids, n):
    c = json.load(open(os.path.join(d, "config.json")))
    eos = set()
    gp = os.path.join(d, "generation_config.json")
    if os.path.exists(gp):
        e = json.load(open(gp)).get("eos_token_id")
        eos = set(e if isinstance(e, list) else [] if e is None else [e])
    P = load(d)
    tok, out = list(ids), []
    while len(out) < n and len(tok) < c["max_position_embeddings"]:
        nxt = int(np.argmax(forward(P, c, tok)[-1]))
        if nxt in eos:
            break
        out.append(nxt)
        tok.append(nxt)
    return out


def golden(d, k):
    raw = open(os.path.join(d, "golden.bin"), "rb").read()
    h = struct.unpack_from("<16i", raw, 0)
    B, T, V, nt = h[2], h[3], h[4], h[6]
    off = 64 + 16 + 32
    for _ in range(nt):
        n, = struct.unpack_from("<i", raw, off)
        off += 4 + (n + 3) // 4 * 4
        _, nd = struct.unpack_from("<2i", raw, off)
        off += 8 + 4 * nd
    tok = struct.unpack_from(f"<{B * T}i", raw, off)
    logits = np.frombuffer(raw, "<f4", B * T * V, off + 8 * B * T).reshape(B, T, V)
    k = min(k, T)
    return list(tok[:k]), int(np.argmax(logits[0, k - 1]))


def chi2(d, ids, temp, draws):
    """Pearson's chi-square of the drawn first tokens against softmax(logits / temp) of the
    reference forward: tokens expected 5 times or more are bins of their own, the rest one bin.
    Passes below the 0.999 quantile (Wilson-Hilferty); prints the statistic and the bins."""
    c = json.load(open(os.path.join(d, "config.json")))
    z = forward(load(d), c, ids)[-1] / temp
    p = np.exp(z - z.max())
    p /= p.sum()
    n = len(draws)
    counts = np.bincount(draws, minlength=len(p))
    big = p * n >= 5
    exp_ = list(p[big] * n) + [p[~big].sum() * n]
    obs = list(counts[big]) + [counts[~big].sum()]
    if exp_[-1] < 5:  # too few to be a bin: folded into the smallest one
        exp_[-2] += exp_.pop()
        obs[-2] += obs.pop()
    x2 = sum((o - e) ** 2 / e for o, e in zip(obs, exp_))
    k = len(exp_) - 1
    q = k * (1 - 2 / (9 * k) + 3.09 * math.sqrt(2 / (9 * k))) ** 3  # chi2(k) 0.999 quantile
    print(f"chi-square {x2:.2f} over {k} degrees of freedom, 0.999 quantile {q:.2f} ({n} draws)")
    return 0 if x2 < q and k >= 3 else 1


def nucleus(d, ids, temp, top_p):
    """The ids top-p keeps after IDS at temperature TEMP, as transformers' TopPLogitsWarper: sorted
    ascending, the tokens whose cumulative probability is at most 1 - top_p removed, one kept."""
    c = json.load(open(os.path.join(d, "config.json")))
    z = forward(load(d), c, ids)[-1] / temp
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(p, kind="stable")
    remove = np.cumsum(p[order]) <= 1 - top_p
    remove[-1] = False
    return sorted(int(i) for i in order[~remove])


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "greedy":
        print(" ".join(map(str, greedy(a[1], [int(x) for x in a[2].split(",")], int(a[3])))))
    elif a[0] == "golden":
        t, m = golden(a[1], int(a[2]))
        print(",".join(map(str, t)), m)
    elif a[0] == "nucleus":
        print(" ".join(map(str, nucleus(a[1], [int(x) for x in a[2].split(",")], float(a[3]), float(a[4])))))
    elif a[0] == "chi2":
        sys.exit(chi2(a[1], [int(x) for x in a[2].split(",")], float(a[3]),
                      [int(x) for x in open(a[4]).read().split()]))
    else:
        sys.exit(__doc__)
