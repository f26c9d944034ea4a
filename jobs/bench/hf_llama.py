#!/usr/bin/env python3
"""Reference for jobs/bench/llama_speed.sh: Hugging Face transformers training a Llama-family model
of a published shape on the same GPU (random init from the config, SDPA attention, fp32 master
weights with bf16 autocast, fused AdamW, B x T tokens per step), eager and under torch.compile.
Prints one line per mode: `hf MODE tokens_per_s ms_per_step peak_gib`, or `hf MODE failed: ERROR`.
With --save DIR it trains nothing: the model, random init in bf16 on the GPU, is written to DIR by
save_pretrained (transformers' default shard size), as a user's downloaded checkpoint is laid out
(jobs/bench/load_speed.sh), and one line `saved DIR BYTES` is printed."""
import argparse
import time
import traceback

import torch
import transformers

SHAPES = {  # model_type, hidden, intermediate, layers, heads, kv heads, head_dim, vocab, tied, theta, llama3 factor
    "llama-3.2-1b": ("llama", 2048, 8192, 16, 32, 8, 64, 128256, True, 5e5, 32.0),
    "llama-3.2-3b": ("llama", 3072, 8192, 28, 24, 8, 128, 128256, True, 5e5, 32.0),
    "llama-3.1-8b": ("llama", 4096, 14336, 32, 32, 8, 128, 128256, False, 5e5, 8.0),
    "qwen2.5-0.5b": ("qwen2", 896, 4864, 24, 14, 2, 64, 151936, True, 1e6, 0),
    "qwen2.5-1.5b": ("qwen2", 1536, 8960, 28, 12, 2, 128, 151936, True, 1e6, 0),
    "qwen3-0.6b": ("qwen3", 1024, 3072, 28, 16, 8, 128, 151936, True, 1e6, 0),
    "qwen3-8b": ("qwen3", 4096, 12288, 36, 32, 8, 128, 151936, False, 1e6, 0),
    "qwen2.5-32b": ("qwen2", 5120, 27648, 64, 40, 8, 128, 152064, False, 1e6, 0),
}


def config(name, T):
    if name.endswith(".json"):  # an HF config.json (capacity.sh's Llama shapes)
        cfg = transformers.AutoConfig.from_pretrained(name, attn_implementation="sdpa")
        cfg.max_position_embeddings = max(T, cfg.max_position_embeddings)
        return cfg
    mt, h, i, L, nh, nkv, hd, V, tied, theta, factor = SHAPES[name]
    kw = dict(hidden_size=h, intermediate_size=i, num_hidden_layers=L, num_attention_heads=nh,
              num_key_value_heads=nkv, head_dim=hd, vocab_size=V, tie_word_embeddings=tied,
              max_position_embeddings=max(T, 4096), attn_implementation="sdpa")
    rope = {"rope_type": "default", "rope_theta": theta}
    if factor:
        rope = {"rope_type": "llama3", "rope_theta": theta, "factor": factor, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    cfg = transformers.AutoConfig.for_model(mt, **kw)
    cfg.rope_parameters = rope
    return cfg


def run(name, B, T, steps, compiled):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config(name, T)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    step_fn = model
    if compiled:
        step_fn = torch.compile(model)
    x = torch.randint(0, model.config.vocab_size, (B, T + 1), device="cuda")
    times = []
    torch.cuda.reset_peak_memory_stats()
    for s in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = step_fn(input_ids=x[:, :T], labels=x[:, :T])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    half = sorted(times[len(times) // 2:])
    dt = half[len(half) // 2]
    return B * T / dt, 1e3 * dt, torch.cuda.max_memory_allocated() / 2**30


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--T", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--save", metavar="DIR")
    a = ap.parse_args()
    if a.save:
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = transformers.AutoModelForCausalLM.from_config(config(a.model, a.T), dtype=torch.bfloat16)
        model.save_pretrained(a.save)
        print(f"saved {a.save} {sum(p.numel() * p.element_size() for p in model.parameters())}", flush=True)
        return
    for mode in a.modes.split(","):
        try:
            tps, ms, peak = run(a.model, a.micro, a.T, a.steps, mode == "compile")
            print(f"hf {mode} {tps:.0f} {ms:.1f} {peak:.1f}", flush=True)
        except Exception as e:  # the peer's own error, not a wrapper's
            msg = "".join(traceback.format_exception_only(type(e), e)).strip().replace("\n", " | ")
            print(f"hf {mode} failed: {msg[:400]}", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
