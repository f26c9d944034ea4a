#!/usr/bin/env python3
"""The reference for `zinf ckpt export`: load the exported directory with Hugging Face
transformers (AutoModelForCausalLM.from_pretrained: GPT-2 and the Llama family) and compute the validation loss zinf train
reports, on the same sequences, batched the same way. Prints the loss (one number) on stdout.

zinf's validation (src/train.c, evaluate; src/data.c): the shards of --val in file-name order, each
a 1024-byte header of 256 little-endian int32 (magic 20240520, version 1 = uint16 tokens, 2 =
uint32, token count) and the tokens; in a shard of n tokens, sequence i is tokens [i*T, i*T+T]
(T+1 tokens: T inputs, the targets shifted by one), i < (n-1)//T; sequences never span shards and
keep file order (no shuffle). The micro-batches are sequences [b*B, (b+1)*B) for
b < nseq // B (only whole batches); the loss is the mean over batches of each batch's mean
next-token cross-entropy.

usage: hf_check.py DIR 'VAL_GLOB' T B [swap_qk]

swap_qk: exchange the query and key thirds of every c_attn before evaluating: a model whose
attention matters then gives another loss, which shows that the comparison would see a
q | k | v layout that zinf and transformers read differently.
"""
import glob
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory; never the hub
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import numpy as np
import torch
import transformers

MAGIC = 20240520


def shard(path):
    with open(path, "rb") as f:
        raw = f.read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    if len(h) != 256 or h[0] != MAGIC or h[1] not in (1, 2):
        sys.exit(f"{path}: not a token shard")
    toks = np.frombuffer(raw[1024:], dtype="<u2" if h[1] == 1 else "<u4")
    if len(toks) != h[2]:
        sys.exit(f"{path}: {len(toks)} tokens, the header says {h[2]}")
    return toks.astype(np.int64)


def main():
    if len(sys.argv) not in (5, 6) or sys.argv[5:] not in ([], ["swap_qk"]):
        sys.exit(__doc__)
    model_dir, pattern, T, B = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    swap_qk = sys.argv[5:] == ["swap_qk"]
    seqs = []
    for path in sorted(glob.glob(pattern)):
        t = shard(path)
        seqs += [t[i * T:i * T + T + 1] for i in range(max(len(t) - 1, 0) // T)]
    nb = len(seqs) // B
    if nb < 1:
        sys.exit(f"{pattern}: {len(seqs)} sequences of {T} tokens, fewer than one batch of {B}")

    model, info = transformers.AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True,
                                                                    attn_implementation="eager")
    model = model.float().eval()
    # every stored tensor used, none missing (HF's causal-mask buffers are not parameters)
    missing = [k for k in info.get("missing_keys", []) if not k.endswith((".attn.bias", ".attn.masked_bias"))]
    bad = missing + list(info.get("unexpected_keys", [])) + list(info.get("mismatched_keys", []))
    if bad:
        sys.exit(f"{model_dir}: transformers reports missing, unexpected or mismatched tensors: {bad}")
    tied = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    if tied != bool(model.config.tie_word_embeddings):
        sys.exit(f"{model_dir}: the LM head is {'' if tied else 'not '}tied to the embedding, config.json says "
                 f"tie_word_embeddings {model.config.tie_word_embeddings}")

    V, C = model.config.vocab_size, model.config.hidden_size
    if swap_qk and model.config.model_type != "gpt2":
        sys.exit("swap_qk: a GPT-2 export only")
    if swap_qk:
        with torch.no_grad():
            for blk in model.transformer.h:
                w, b = blk.attn.c_attn.weight, blk.attn.c_attn.bias  # (C, 3C), (3C,): out = x @ w + b
                w.copy_(torch.cat([w[:, C:2 * C], w[:, :C], w[:, 2 * C:]], 1))
                b.copy_(torch.cat([b[C:2 * C], b[:C], b[2 * C:]]))
    losses = []
    with torch.no_grad():
        for b in range(nb):
            x = torch.from_numpy(np.stack(seqs[b * B:(b + 1) * B]))
            logits = model(input_ids=x[:, :T]).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V).float(), x[:, 1:].reshape(-1))
            losses.append(float(loss))
    print(f"{sum(losses) / len(losses):.9g}")
    print(f"hf_check: {nb} batches of {B} x {T} tokens, transformers {transformers.__version__}, "
          f"torch {torch.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
