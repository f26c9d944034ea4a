#!/usr/bin/env python3
"""Check config_v4.json of each tests/golden/llama/<model>/ with transformers 4.x: copy the directory,
put config_v4.json in place of config.json, load it with AutoModelForCausalLM (float64, eager) and
compare its logits on golden.bin's tokens with golden.bin's logits.
Run (in an environment with transformers 4.57.6): python3 tests/golden/check_llama_v4.py tests/golden/llama
"""
import os
import shutil
import struct
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

root = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/llama"
print("torch", torch.__version__, "transformers", transformers.__version__)
tmp = tempfile.mkdtemp()
for name in sorted(os.listdir(root)):
    src = os.path.join(root, name)
    if not os.path.isdir(src):
        continue
    d = os.path.join(tmp, name)
    shutil.copytree(src, d)
    shutil.copy(os.path.join(src, "config_v4.json"), os.path.join(d, "config.json"))
    raw = open(os.path.join(src, "golden.bin"), "rb").read()
    h = struct.unpack_from("<16i", raw, 0)
    B, T, V, nt = h[2], h[3], h[4], h[6]
    off = 64 + 16 + 32
    for _ in range(nt):  # skip the tensor table
        n, = struct.unpack_from("<i", raw, off)
        off += 4 + (n + 3) // 4 * 4
        nd = struct.unpack_from("<2i", raw, off)[1]
        off += 8 + 4 * nd
    tok = np.frombuffer(raw, np.int32, B * T, off).reshape(B, T)
    off += 8 * B * T
    ref = torch.from_numpy(np.frombuffer(raw, np.float32, B * T * V, off).reshape(B, T, V).copy()).double()
    m = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", torch_dtype=torch.float64)
    with torch.no_grad():
        out = m(input_ids=torch.from_numpy(tok.astype(np.int64))).logits
    diff = (out - ref).abs().max().item()
    theta = getattr(m.config, "rope_theta", None)
    print(f"{name}: {type(m).__name__} rope_type {m.model.rotary_emb.rope_type} rope_theta {theta} "
          f"max |logits - golden| {diff:.3g}")
    assert diff < 1e-5, name
shutil.rmtree(tmp)
