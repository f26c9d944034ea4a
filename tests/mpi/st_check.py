#!/usr/bin/env python3
"""A Hugging Face weights directory as `zinf ckpt export --format hf` writes it, read with Python's
standard library alone (json, struct; no torch, no safetensors package), from the format's
specification: model.safetensors, or shards model-0000K-of-0000N.safetensors (every one there,
numbered 1..N, no single file beside them) and model.safetensors.index.json written as transformers
writes it (json.dumps(indent=2, sort_keys=True) and a newline), whose weight_map names every
tensor's shard and whose metadata.total_size and total_parameters are the tensors' bytes and
elements. Each file: the header 8-aligned, __metadata__ {"format": "pt"}, the data covered by the
tensors back to back from 0 (no holes, nothing after), every dtype's size times the shape's count
the tensor's bytes, no name twice.

usage: st_check.py DIR [--max-shard BYTES] [--same-as DIR2] [--ckpt CKPT --vocab V]

--max-shard: the shards are cut as huggingface_hub cuts them, in order: a shard holds at most
  BYTES of tensors unless it holds one tensor alone, and a shard ends only where the next tensor
  would not fit (or a lone tensor is larger than BYTES).
--same-as: DIR2 (another export of the same checkpoint) has the same tensors, dtypes, shapes and
  bytes.
--ckpt: the values against the checkpoint's masters read with h5py (GPT-2's names: Conv1D weights
  transposed, wte without its padded rows beyond V): F32 bit for bit, BF16 as the masters' bits
  rounded to nearest even, computed here on the integers.

Prints "ok TENSORS SHARDS".
"""
import json
import os
import re
import struct
import sys

SIZE = {"F32": 4, "BF16": 2, "F16": 2}


def count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def read_dir(d):
    files = sorted(os.listdir(d))
    ip = os.path.join(d, "model.safetensors.index.json")
    idx = None
    if os.path.exists(ip):
        assert "model.safetensors" not in files, "model.safetensors beside the index"
        text = open(ip).read()
        idx = json.loads(text)
        assert text == json.dumps(idx, indent=2, sort_keys=True) + "\n", "the index is not as transformers writes it"
        shards = [f for f in files if re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f)]
        n = len(shards)
        assert n > 1 and shards == [f"model-{k:05d}-of-{n:05d}.safetensors" for k in range(1, n + 1)], shards
    else:
        assert "model.safetensors" in files, files
        assert not [f for f in files if re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f)], files
        shards = ["model.safetensors"]
    tensors, order, sizes = {}, [], []
    for s in shards:
        raw = open(os.path.join(d, s), "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        assert (8 + n) % 8 == 0, f"{s}: the data does not start 8-aligned"
        hdr = json.loads(raw[8:8 + n].decode("utf-8"))
        assert hdr.pop("__metadata__")["format"] == "pt", s
        data = raw[8 + n:]
        spans = sorted((e["data_offsets"], k) for k, e in hdr.items())
        assert spans[0][0][0] == 0 and spans[-1][0][1] == len(data), f"{s}: data not covered from 0 to its end"
        assert all(a[0][1] == b[0][0] for a, b in zip(spans, spans[1:])), f"{s}: holes or overlaps"
        names = []
        for (a, b), k in spans:
            e = hdr[k]
            assert k not in tensors, f"{k} twice"
            assert b - a == count(e["shape"]) * SIZE[e["dtype"]], f"{s}: {k}: shape and offsets disagree"
            tensors[k] = dict(file=s, dtype=e["dtype"], shape=e["shape"], data=data[a:b])
            names.append(k)
        order.append(names)
        sizes.append(len(data))
    if idx is not None:
        assert idx["weight_map"] == {k: v["file"] for k, v in tensors.items()}, "weight_map"
        md = idx["metadata"]
        assert md["total_size"] == sum(len(v["data"]) for v in tensors.values()), md
        assert md["total_parameters"] == sum(count(v["shape"]) for v in tensors.values()), md
    return tensors, order, sizes


def check_cuts(tensors, order, sizes, mx):
    for k, names in enumerate(order):
        assert sizes[k] <= mx or len(names) == 1, f"shard {k + 1}: {sizes[k]} bytes of {len(names)} tensors"
        if k + 1 < len(order):
            nxt = len(tensors[order[k + 1][0]]["data"])
            alone = sizes[k] > mx or nxt > mx
            assert alone or sizes[k] + nxt > mx, f"shard {k + 1} ends though {order[k + 1][0]} would fit"


def gpt2_master(name, V):
    """the master dataset of HF name, transposed or not, the rows kept"""
    m = re.fullmatch(r"transformer\.h\.(\d+)\.(.*)", name)
    if not m:
        top = {"transformer.wte.weight": "wte", "transformer.wpe.weight": "wpe", "transformer.ln_f.weight": "lnf.weight",
               "transformer.ln_f.bias": "lnf.bias"}
        return top[name], False, V if name == "transformer.wte.weight" else None
    l, rest = m.groups()
    parts = {"ln_1": "ln1", "ln_2": "ln2", "attn.c_attn": "attn.qkv", "attn.c_proj": "attn.proj", "mlp.c_fc": "mlp.fc",
             "mlp.c_proj": "mlp.proj"}
    mod, kind = rest.rsplit(".", 1)
    conv = mod not in ("ln_1", "ln_2") and kind == "weight"
    return f"blocks.{l}.{parts[mod]}.{kind}", conv, None


def check_values(tensors, ck, V):
    import h5py
    import numpy as np
    f = h5py.File(ck, "r")
    seen = set()
    for name, t in tensors.items():
        ds, conv, rows = gpt2_master(name, V)
        seen.add(ds)
        ref = np.asarray(f["master"][ds], dtype="<f4")
        if rows is not None:
            ref = ref[:rows]
        if conv:
            ref = ref.T
        assert list(ref.shape) == t["shape"], f"{name}: shape {t['shape']}, the master's {ref.shape}"
        bits = struct.unpack(f"<{ref.size}I", np.ascontiguousarray(ref).tobytes())
        if t["dtype"] == "F32":
            want = struct.pack(f"<{len(bits)}I", *bits)
        elif t["dtype"] == "BF16":
            want = struct.pack(f"<{len(bits)}H", *(((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF for u in bits))
        else:
            raise AssertionError(f"{name}: dtype {t['dtype']} not checked here")
        assert t["data"] == want, f"{name}: the {t['dtype']} values are not the masters'"
    masters = set()
    f["master"].visit(lambda n: masters.add(n) if isinstance(f["master"][n], h5py.Dataset) else None)
    assert seen == masters, f"masters not exported: {sorted(masters - seen)}"


def main():
    a = sys.argv[1:]
    if not a or a[0].startswith("-"):
        sys.exit(__doc__)
    d, opts = a[0], dict(zip(a[1::2], a[2::2]))
    tensors, order, sizes = read_dir(d)
    if "--max-shard" in opts:
        check_cuts(tensors, order, sizes, int(opts["--max-shard"]))
    if "--same-as" in opts:
        other, _, _ = read_dir(opts["--same-as"])
        assert set(other) == set(tensors), "another set of tensors"
        for k, t in tensors.items():
            o = other[k]
            assert (o["dtype"], o["shape"], o["data"]) == (t["dtype"], t["shape"], t["data"]), f"{k} differs"
    if "--ckpt" in opts:
        check_values(tensors, opts["--ckpt"], int(opts["--vocab"]))
    print("ok", len(tensors), len(order))


if __name__ == "__main__":
    main()
