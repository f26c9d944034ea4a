"""Reference for test_chat.sh: ms-swift's data path for `swift sft` written out in Python from its
rules (ms-swift 4.x: dataset/preprocessor/core.py, dataset/utils.py sample_dataset,
template/base.py _swift_encode, _simplify_context_list, _encode_context_list, _add_dynamic_eos;
templates/qwen.py, templates/llama.py, the hermes and llama3 tool formats; loss_scale default +
ignore_empty_think for qwen3), with numpy's RandomState for sampling and HF `tokenizers` for ids.

  chat_ref.py perm LEN SEED | gperm LEN SEED | select LEN N RATIO SEED
  chat_ref.py render SPEC TEMPLATE | encode SPEC TEMPLATE TOKENIZER_JSON
  chat_ref.py train-tokenizer OUT CORPUS...
  chat_ref.py compare A B        (JSON lines, value by value; prints the first difference)
  chat_ref.py hf-compare ZINF_RENDER SPEC TEMPLATE JINJA
      zinf's rendered text (its segments joined) against Hugging Face's Jinja chat template rendered
      with jinja2 as transformers' apply_chat_template renders it, on the rows where ms-swift and
      the Jinja template are meant to agree (hf_differs lists the known differences)
  chat_ref.py hf-prompt JINJA USER [SYSTEM]
      the generation prompt of one user message (and a system one): the Jinja template rendered
      with add_generation_prompt=True and enable_thinking=False (test_generate.sh)
"""
import json
import re
import sys

QWEN_SYS = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
CHATML = dict(prefix="", system_prefix="<|im_start|>system\n{{SYSTEM}}<|im_end|>\n",
              prompt="<|im_start|>user\n{{QUERY}}<|im_end|>\n<|im_start|>assistant\n",
              chat_sep="<|im_end|>\n", suffix="<|im_end|>\n", default_system=None, tool=None,
              thinking=False, dated=False)
L3 = dict(prefix="<|begin_of_text|>",
          system_prefix="<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{{SYSTEM}}<|eot_id|>",
          prompt="<|start_header_id|>user<|end_header_id|>\n\n{{QUERY}}<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n",
          chat_sep="<|eot_id|>", suffix="<|eot_id|>", default_system=None, tool="llama3", thinking=False,
          dated=False)
T = {
    "qwen": dict(CHATML, default_system="You are a helpful assistant.", tool="hermes"),
    "qwen2_5": dict(CHATML, default_system=QWEN_SYS, tool="hermes"),
    "qwen3": dict(CHATML, tool="hermes", thinking=True),
    "qwen3_nothinking": dict(CHATML, tool="hermes"),
    "chatml": dict(CHATML),
    "llama3": dict(L3),
    "llama3_2": dict(L3, dated=True),
}
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
           "<|end_header_id|>", "<|eot_id|>"]


class Bad(Exception):
    pass


# ---------------------------------------------------------------- reading ---------------------
ROLES = {"system": "system", "user": "user", "human": "user", "assistant": "assistant", "gpt": "assistant",
         "bot": "assistant", "tool": "tool", "tool_response": "tool", "observation": "tool",
         "observations": "tool", "function_response": "tool"}
Q_KEYS = ["query", "prompt", "input", "instruction", "question", "problem"]
A_KEYS = ["response", "answer", "output", "targets", "target", "answer_key", "answers", "solution", "text",
          "completion", "content"]


def first(o, keys):
    for k in keys:
        if o.get(k) is not None:
            v = o[k]
            return v[0] if isinstance(v, list) else v
    return None


def row_messages(o):
    msgs = []
    system = first(o, ["system", "system_prompt"])
    if system is not None:
        msgs.append(("system", system))
    key = next((k for k in ("messages", "conversations", "conversation") if o.get(k) is not None), None)
    if key:
        for e in o[key]:
            r = e.get("role", e.get("from"))
            if r is None:
                h, a = first(e, ["human", "user"]), first(e, ["assistant", "gpt"])
                if h is not None:
                    msgs.append(("user", h))
                if a is not None:
                    msgs.append(("assistant", a))
                continue
            msgs.append((ROLES[r], e.get("content", e.get("value"))))
        if len(msgs) > 1 and msgs[0][0] == "system" and msgs[1][0] == "system":
            msgs.pop(0)
        return msgs
    if o.get("instruction") is not None and o.get("input") is not None:
        i, x = o["instruction"], o["input"]
        q = i + "\n" + x if i and x else (i or x)
    else:
        q = first(o, Q_KEYS)
    a = first(o, A_KEYS)
    for hq, ha in o.get("history") or []:
        msgs += [("user", hq), ("assistant", ha)]
    msgs.append(("user", q or ""))
    if a is not None:
        msgs.append(("assistant", a))
    return msgs


def normalize(msgs):
    """ms-swift's standard form; None when there is no assistant turn (the row is skipped)."""
    if not any(r == "assistant" for r, _ in msgs):
        return None
    s = 1 if msgs[0][0] == "system" else 0
    out = list(msgs[:s])
    rest = list(msgs[s:])
    if rest and rest[0][0] == "assistant":
        rest.insert(0, ("user", ""))
    for r, c in rest:
        if out[s:] and r in ("user", "assistant") and out[-1][0] == r:
            out[-1] = (r, out[-1][1] + c)
        else:
            out.append((r, c))
    return out


def read(spec):
    path, _, n = spec.partition("#")
    rows, skipped = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            m = normalize(row_messages(json.loads(line)))
            if m is None:
                skipped += 1
            else:
                rows.append(m)
    if n:
        rows = [rows[i] for i in select(len(rows), int(n), 0, 42)[0]]
    return rows, skipped


# ---------------------------------------------------------------- sampling -------------------
def perm(n, seed):
    import numpy as np
    return [int(x) for x in np.random.RandomState(seed).permutation(n)]


def gperm(n, seed):
    import numpy as np
    return [int(x) for x in np.random.default_rng(seed).permutation(n)]


def sample_dataset(length, n, rs):
    """ms-swift's sample_dataset (dataset/utils.py) on row numbers"""
    import numpy as np
    idx = list(np.tile(np.arange(length), n // length))
    if n % length:
        idx += list(rs.permutation(length)[:n % length])
    return [int(x) for x in idx]


def select(length, n, ratio, seed):
    """ms-swift's DatasetLoader.post_process with data_seed; datasets' train_test_split"""
    import numpy as np
    rs = np.random.RandomState(seed)
    n = n or length
    if ratio == 0:
        return sample_dataset(length, n, rs), []
    nv = max(int(min(length, n) * ratio), 1)
    s = rs.randint(np.iinfo(np.int32).max)  # ms-swift's get_seed
    p = [int(x) for x in np.random.default_rng(s).permutation(length)]
    val, rest = p[:nv], p[nv:]
    return [rest[i] for i in sample_dataset(len(rest), n - nv, rs)], val


# ---------------------------------------------------------------- rendering ------------------
def contexts(t, msgs, date="26 Jul 2024"):
    ctx = []  # (text, weight)
    system = t["default_system"]
    if msgs and msgs[0][0] == "system":
        system = msgs[0][1]
        msgs = msgs[1:]
    if t["dated"]:
        pre = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
               "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n" + (system or "") + "<|eot_id|>")
    elif system:
        pre = t["system_prefix"].replace("{{SYSTEM}}", system)
    else:
        pre = t["prefix"]
    ctx.append((pre, 0))
    i = 0
    while i < len(msgs):
        if i > 0:
            ctx.append((t["chat_sep"], 0))
        if msgs[i][0] == "user":
            ctx.append((t["prompt"].replace("{{QUERY}}", msgs[i][1]), 0))
            i += 1
        else:
            tools = []
            while i < len(msgs) and msgs[i][0] == "tool":
                tools.append(msgs[i][1])
                i += 1
            if t["tool"] == "hermes":
                q = "\n".join("<tool_response>\n" + c + "\n</tool_response>" for c in tools)
                ctx.append((t["prompt"].replace("{{QUERY}}", q), 0))
            elif t["tool"] == "llama3":
                ctx.append(("".join("<|start_header_id|>tool<|end_header_id|>\n\n" + c + "<|eot_id|>" for c in tools)
                            + "<|start_header_id|>assistant<|end_header_id|>\n\n", 0))
            else:
                raise Bad("no tool format")
        r = msgs[i][1]
        i += 1
        if t["thinking"]:
            if not r.startswith("<think>"):
                r = "<think>\n\n</think>\n\n" + r
            m = re.match(r"<think>\s*</think>\s*", r)
            if m:
                ctx.append((r[:m.end()], 0))
                r = r[m.end():]
        ctx.append((r, 1))
        if i == len(msgs) and not r.endswith(t["suffix"]):
            ctx.append((t["suffix"], 1))
    return ctx


def simplify(ctx):
    res, run, w = [], [], None
    for s, x in ctx:
        if x == w:
            run.append(s)
            continue
        if run and "".join(run):
            res.append(["".join(run), w])
        run, w = [s], x
    if run and "".join(run):
        res.append(["".join(run), w])
    return res


def encode(t, msgs, tk):
    ids, loss = [], []
    for s, w in simplify(contexts(t, msgs)):
        e = tk.encode(s, add_special_tokens=False).ids
        ids += e
        loss += [w] * len(e)
    suf = tk.encode(t["suffix"], add_special_tokens=False).ids
    start = 0
    for i in range(1, len(loss) + 1):
        if loss[i - 1] and i < len(loss) and not loss[i]:
            start = i
        elif start > 0 and not loss[i - 1] and (i == len(loss) or loss[i]):
            if i - start >= len(suf) and ids[start:start + len(suf)] == suf:
                loss[start:start + len(suf)] = [1] * len(suf)
    if loss:
        loss[0] = 0
    return {"ids": ids, "loss": loss}


def train_tokenizer(out, corpus):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, \
        processors, trainers
    qwen = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
            r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
    tk = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(qwen), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=False)
    tr = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    texts = [open(f, encoding="utf-8").read() for f in corpus]
    tk.train_from_iterator(texts, trainer=tr)
    tk.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in SPECIAL])
    tk.add_tokens([AddedToken(s, normalized=False, special=False) for s in ("<think>", "</think>")])
    tk.save(out)


def compare(a, b):
    la = [x for x in open(a, encoding="utf-8").read().splitlines()]
    lb = [x for x in open(b, encoding="utf-8").read().splitlines()]
    if len(la) != len(lb):
        print(f"{a}: {len(la)} lines, {b}: {len(lb)}")
        return 1
    for n, (x, y) in enumerate(zip(la, lb), 1):
        vx = json.loads(x) if x[:1] in "[{" else x
        vy = json.loads(y) if y[:1] in "[{" else y
        if vx != vy:
            print(f"line {n} differs:\n  zinf: {x[:600]}\n  ref:  {y[:600]}")
            return 1
    return 0


def hf_differs(name, m):
    """Why ms-swift's training text and the Jinja template's differ for this conversation, or None."""
    roles = [r for r, _ in m]
    if m and m[0][0] == "system" and m[0][1] == "":
        if name in ("qwen2_5", "qwen3", "qwen3_nothinking"):
            return "an empty system message: ms-swift writes no system turn, the Jinja template an empty one"
    if name == "qwen3" and roles.count("assistant") > 1:
        return "several replies: ms-swift writes the empty think block on every reply, Jinja after the last query only"
    if name == "llama3_2":
        if "tool" in roles:
            return "tool messages: ms-swift writes a tool header, Jinja an ipython one"
        if any(c != c.strip() for _, c in m):
            return "text with spaces at its ends: Jinja trims every message, ms-swift none"
    return None


def jinja_template(jinja_path):
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    # transformers' chat_template_utils: this environment, its tojson, raise_exception
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(open(jinja_path, encoding="utf-8").read())


def hf_prompt(jinja_path, user, system=None):
    """The generation prompt of [system,] user: apply_chat_template(add_generation_prompt=True) with
    thinking off (enable_thinking=False), as `zinf generate` writes it."""
    m = ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": user}]
    sys.stdout.write(jinja_template(jinja_path).render(messages=m, add_generation_prompt=True, enable_thinking=False,
                                                       bos_token="<|begin_of_text|>", date_string="26 Jul 2024"))
    return 0


def hf_compare(zinf_out, spec, name, jinja_path):
    tpl = jinja_template(jinja_path)
    rows, _ = read(spec)
    zl = [json.loads(x) for x in open(zinf_out, encoding="utf-8") if x.startswith("[")]
    if len(zl) != len(rows):
        print(f"zinf rendered {len(zl)} samples, the reference read {len(rows)}")
        return 1
    compared = 0
    for n, (m, segs) in enumerate(zip(rows, zl), 1):
        if hf_differs(name, m):
            continue
        text = tpl.render(messages=[{"role": r, "content": c} for r, c in m], add_generation_prompt=False,
                          bos_token="<|begin_of_text|>", date_string="26 Jul 2024")
        z = "".join(s for s, _ in segs)
        if z != text:
            print(f"sample {n}: zinf and the Jinja template differ:\n  zinf:  {z!r}\n  jinja: {text!r}")
            return 1
        compared += 1
    print(f"{name}: {compared} of {len(rows)} samples equal to {jinja_path.rsplit('/', 1)[-1]}")
    return 0 if compared else 1


def main(a):
    if a[0] == "perm":
        print(" ".join(map(str, perm(int(a[1]), int(a[2])))))
    elif a[0] == "gperm":
        print(" ".join(map(str, gperm(int(a[1]), int(a[2])))))
    elif a[0] == "select":
        t, v = select(int(a[1]), int(a[2]), float(a[3]), int(a[4]))
        print(" ".join(["train"] + list(map(str, t))))
        print(" ".join(["val"] + list(map(str, v))))
    elif a[0] in ("render", "encode"):
        rows, skipped = read(a[1])
        t = T[a[2]]
        tk = None
        if a[0] == "encode":
            from tokenizers import Tokenizer
            tk = Tokenizer.from_file(a[3])
        for m in rows:
            v = simplify(contexts(t, m)) if tk is None else encode(t, m, tk)
            print(json.dumps(v, ensure_ascii=True, separators=(",", ":")))
        print(f"skipped {skipped}")
    elif a[0] == "train-tokenizer":
        train_tokenizer(a[1], a[2:])
    elif a[0] == "compare":
        return compare(a[1], a[2])
    elif a[0] == "hf-compare":
        return hf_compare(a[1], a[2], a[3], a[4])
    elif a[0] == "hf-prompt":
        return hf_prompt(a[1], a[2], a[3] if len(a) > 3 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
