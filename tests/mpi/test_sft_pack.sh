#!/bin/sh
# SFT rows against a Python reference written here from ms-swift's rules: samples longer than
# --max_length dropped and counted; without --packing one sample per row, padded; with it the
# samples grouped as ms-swift's packing groups them (chunks of 1000 samples, each packed by
# binpacking's to_constant_volume, the last bin of a chunk carried into the next), positions
# restarting at each sample, kv_start the row offset of the token's sample, targets the next
# token where its loss flag is set and it lies in the same sample, the pad run attending only to
# itself. Thousands of random samples (lengths 1, T, T+1 and in between, 16- and 32-bit token
# ids, one shard or several) must give the reference's rows exactly, in order without shuffle
# and as a permutation in every shuffled epoch. Where pip reaches PyPI, the reference's bins are
# also checked against binpacking 2.0.1 itself. Then a run of `zinf train` on padded SFT rows:
# the first loss is ln(256) and the loss falls to near 0 because only the flagged targets (all
# '\n') count, not the random prompt bytes or the padding.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

SFT="${top_builddir:-.}/tests/unit/test_sft"
[ -x "$SFT" ] || { echo "$SFT is not built (make check builds it)"; exit 77; }
command -v python3 >/dev/null || { echo "python3 is needed for the reference"; exit 77; }

PY="$TMP/py"
if python3 -m pip install -q --disable-pip-version-check --target "$PY" binpacking==2.0.1 > "$TMP/pip.log" 2>&1; then
    HAVE_BP=1
else
    HAVE_BP=0
    echo "pip cannot install binpacking 2.0.1 here: the reference is not cross-checked against it"
fi
export PYTHONPATH="$PY"

cat > "$TMP/ref.py" <<'PY'
import random, sys

CHUNK = 1000  # ms-swift's PACKING_BATCH_SIZE


def gen(path, n, T, vocab, seed):
    """n random samples: lengths 1, T, T+1, 3T and uniform ones; loss flags in runs (prompt 0,
    reply 1) as chat templates make them, some samples all 0."""
    rng = random.Random(seed)
    samples = []
    fixed = [1, T, T + 1, 3 * T, 1, T, 2, T - 1]
    for k in range(n):
        L = fixed[k] if k < len(fixed) else (rng.randint(1, T + T // 4) if rng.random() < 0.9 else rng.randint(1, 3))
        tok = [rng.randrange(vocab) for _ in range(L)]
        if vocab > 65536 and L > 1:
            tok[rng.randrange(L)] = vocab - 1  # a 32-bit id
        cut = rng.randint(0, L)
        loss = [0] * cut + [1] * (L - cut)
        if rng.random() < 0.1:
            loss = [0] * L
        samples.append((tok, loss))
    with open(path, "w") as f:
        f.write("%d\n" % n)
        for tok, loss in samples:
            f.write("%d %s\n" % (len(tok), " ".join("%d %d" % p for p in zip(tok, loss))))
    return samples


def to_constant_volume(items, V):
    """binpacking 2.0.1: items (id, weight) by decreasing weight, ties in input order; each into the
    least-filled bin that still holds it (the first of equals), else into a new bin."""
    order = sorted(range(len(items)), key=lambda i: -items[i][1])
    bins, fill = [], []
    for i in order:
        w = items[i][1]
        fits = [b for b in range(len(bins)) if fill[b] + w <= V]
        if fits:
            b = min(fits, key=lambda b: (fill[b], b))
        else:
            bins.append([])
            fill.append(0)
            b = len(bins) - 1
        bins[b].append(items[i])
        fill[b] += w
    return bins


def groups(kept, T, packing, check_bp):
    if not packing:
        return [[it] for it in kept]
    out, carry, i = [], [], 0
    while True:
        new = kept[i:i + CHUNK]
        i += len(new)
        inp = carry + new
        bins = to_constant_volume(inp, T)
        if check_bp:
            import binpacking
            lib = binpacking.to_constant_volume(inp, T, weight_pos=1)
            assert [list(map(tuple, b)) for b in lib] == bins, "the reference's bins differ from binpacking's"
        if i >= len(kept):
            return out + bins
        out += bins[:-1]
        carry = bins[-1]


def rows(samples, T, packing, check_bp):
    kept = [(k, len(s[0])) for k, s in enumerate(samples) if len(s[0]) <= T]
    dropped = len(samples) - len(kept)
    res = []
    for g in groups(kept, T, packing, check_bp):
        tok, tgt, pos, kv = [], [], [], []
        for k, L in g:
            t, loss = samples[k]
            # ms-swift's labels (the token where its flag is set, else ignored), shifted by the model
            labels = [t[j] if loss[j] else -1 for j in range(L)]
            o = len(tok)
            tok += t
            tgt += labels[1:] + [-1]
            pos += list(range(L))
            kv += [o] * L
        o = len(tok)
        assert o <= T
        tok += [0] * (T - o)
        tgt += [-1] * (T - o)
        pos += list(range(T - o))
        kv += [o] * (T - o)
        res.append((tuple(tok), tuple(tgt), tuple(pos), tuple(kv)))
    return res, dropped


def parse(path, T):
    lines = open(path).read().split("\n")
    head = lines[0].split()
    R, D, S = int(head[1]), int(head[3]), int(head[5])
    def block(at, count):
        out = []
        for r in range(count):
            four = []
            for j, name in enumerate(("tok", "tgt", "pos", "kv")):
                f = lines[at + 4 * r + j].split()
                assert f[0] == name and len(f) == T + 1, "row %d line %s" % (r, name)
                four.append(tuple(int(x) for x in f[1:]))
            out.append(tuple(four))
        return out
    plain = block(1, R)
    assert lines[1 + 4 * R] == "shuffled"
    shuf = block(2 + 4 * R, 2 * R)
    return R, D, S, plain, shuf


def main():
    mode = sys.argv[1]
    if mode == "nrows":  # nrows SAMPLES T: packed rows of a samples file
        lines = open(sys.argv[2]).read().split("\n")[1:]
        T = int(sys.argv[3])
        kept = [(k, int(l.split()[0])) for k, l in enumerate(x for x in lines if x) if int(l.split()[0]) <= T]
        print(len(groups(kept, T, 1, 0)))
        return
    if mode == "gen":
        gen(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
        return
    # check SAMPLES OUT T VOCAB PACKING SEED CHECK_BP
    spath, opath, T, vocab, packing, seed, check_bp = sys.argv[2:9]
    T, vocab, packing, seed, check_bp = int(T), int(vocab), int(packing), int(seed), int(check_bp)
    samples = gen("/dev/null", *map(int, (sys.argv[9], T, vocab, seed)))
    want, dropped = rows(samples, T, packing, check_bp)
    R, D, S, plain, shuf = parse(opath, T)
    errs = []
    if S != len(samples): errs.append("samples %d, want %d" % (S, len(samples)))
    if D != dropped: errs.append("dropped %d, want %d" % (D, dropped))
    if R != len(want): errs.append("rows %d, want %d" % (R, len(want)))
    for r, (a, b) in enumerate(zip(plain, want)):
        if a != b:
            names = ("tok", "tgt", "pos", "kv")
            j = next(j for j in range(4) if a[j] != b[j])
            i = next(i for i in range(T) if a[j][i] != b[j][i])
            errs.append("row %d: %s[%d] = %d, want %d" % (r, names[j], i, a[j][i], b[j][i]))
            break
    for e in range(2):
        ep = shuf[e * R:(e + 1) * R]
        if sorted(ep) != sorted(want): errs.append("shuffled epoch %d is not a permutation of the rows" % e)
    if R > 8 and (shuf[:R] == want or shuf[:R] == shuf[R:]): errs.append("the shuffle did not reorder the rows")
    fill = sum(sum(1 for x in row[1] if x >= 0) for row in want)
    print("%d samples, %d dropped, %d rows, %d targets%s" % (S, D, R, fill, "; ERR " + "; ".join(errs) if errs else ""))
    sys.exit(1 if errs else 0)


main()
PY

N=2600
T=32
for v in "1 1 300 11" "1 3 70000 12" "0 2 70000 13" "0 1 300 14" "1 2 300 15"; do
    set -- $v
    packing=$1 nfiles=$2 vocab=$3 seed=$4
    case=p${packing}f${nfiles}v${vocab}
    mkdir -p "$TMP/$case"
    python3 "$TMP/ref.py" gen "$TMP/$case/samples.txt" $N $T $vocab $seed
    if ! "$SFT" rows "$TMP/$case/samples.txt" "$TMP/$case" $T $vocab $packing $nfiles 99 > "$TMP/$case/rows.txt" 2> "$TMP/$case/err"; then
        fail "$case: test_sft rows failed: $(cat "$TMP/$case/err")"
        continue
    fi
    bp=$HAVE_BP
    [ "$packing" = 1 ] || bp=0
    if out=$(python3 "$TMP/ref.py" check "$TMP/$case/samples.txt" "$TMP/$case/rows.txt" $T $vocab $packing $seed $bp $N 2>&1); then
        pass; echo "$case: $out"
    else
        fail "$case: rows differ from the reference: $out"
    fi
done
# 32-bit ids make version-4 shards, 16-bit ones version 3
v=$(od -An -t d4 -j 4 -N 4 "$TMP/p1f3v70000/sft_train_000000.bin" | tr -d ' ')
[ "$v" = 4 ] && pass || fail "a shard with ids >= 65536 has version '$v', want 4"
v=$(od -An -t d4 -j 4 -N 4 "$TMP/p1f1v300/sft_train_000000.bin" | tr -d ' ')
[ "$v" = 3 ] && pass || fail "a shard with 16-bit ids has version '$v', want 3"

# ---- training on padded SFT rows (one sample per row) ------------------------------------------
# prompts of random bytes (no loss) and one flagged token, '\n', the only target that counts
DROP=$(python3 - "$TMP/train.txt" <<'PY'
import random, sys
rng = random.Random(5)
n, drop = 400, 0
with open(sys.argv[1], "w") as f:
    f.write("%d\n" % n)
    for k in range(n):
        L = rng.randint(2, 32) if k % 10 else 40  # every tenth longer than --max_length 32
        drop += L > 32
        tok = [rng.randrange(32, 256) for _ in range(L - 1)] + [10]
        loss = [0] * (L - 1) + [1]
        f.write("%d %s\n" % (L, " ".join("%d %d" % p for p in zip(tok, loss))))
print(drop)
PY
)
[ "$DROP" = 40 ] && pass || fail "the generator dropped $DROP samples, want 40"
mkdir -p "$TMP/tr"
"$SFT" rows "$TMP/train.txt" "$TMP/tr" 32 256 0 1 1 > "$TMP/tr/rows.txt" 2> "$TMP/tr/err" || fail "train shards: $(cat "$TMP/tr/err")"
mpi 2 train --model test-mini --data "$TMP/tr/sft_train_*.bin" --val "$TMP/tr/sft_train_*.bin" --max_length 32 \
    --max_steps 30 --learning_rate 3e-3 --logging_steps 1 --eval_steps 30 --per_device_train_batch_size 4 \
    --seed 7 --out "$TMP/run"
expect_ok "zinf train on padded SFT rows"
expect_has "the data line" "400 SFT samples in 1 file, 40 longer than --max_length 32 left out, 360 rows of 32 tokens (one sample each, padded)"
# the share of the rows' positions that hold a sample's token, from the generator's lengths
fill() { awk -v rows="$1" '$1 <= 32 { n += $1 } END { printf "%.1f%%", 100 * n / (rows * 32) }' "$TMP/train.txt"; }
expect_has "the padded rows' fill" "(one sample each, padded), $(fill 360) of the positions filled"
M="$TMP/run/metrics.jsonl"
L1=$(metric "$M" loss | head -1)
# (within 3%: every counted target is the same token, so the small random logits do not average out)
close "$L1" 5.5452 0.03 && pass || fail "first loss $L1 is not ln(256)=5.5452 within 3%"
LN=$(metric "$M" loss | tail -1)
# were the prompt bytes (uniform over 224 values) or the padding counted, the loss could not fall
# below about ln(224)*0.9 = 4.9; with the '\n' targets alone it goes to near 0
awk -v a="$LN" 'BEGIN { exit !(a < 0.5) }' && pass || fail "the last loss $LN is not below 0.5: targets without a loss flag counted"
VL=$(metric "$M" val_loss | tail -1)
awk -v a="$VL" 'BEGIN { exit !(a < 0.5) }' && pass || fail "val_loss $VL is not below 0.5"

# the same samples packed: fewer rows; the model keeps attention within each sample (test-llama:
# GPT-2's learned positions take one sample per row, and it says so)
mpi 2 train --model test-mini --data "$TMP/tr/sft_train_*.bin" --max_length 32 --packing \
    --max_steps 2 --per_device_train_batch_size 4 --out "$TMP/runp0"
expect_err "GPT-2 on packed rows" "--packing: the gpt2 family takes one sample per row"
mpi 2 train --model test-llama --data "$TMP/tr/sft_train_*.bin" --max_length 32 --packing \
    --max_steps 30 --learning_rate 3e-3 --logging_steps 1 --per_device_train_batch_size 4 --seed 7 --out "$TMP/runp"
expect_ok "zinf train --packing"
ROWS=$(python3 "$TMP/ref.py" nrows "$TMP/train.txt" 32)
expect_has "the packed data line" "400 SFT samples in 1 file, 40 longer than --max_length 32 left out, $ROWS rows of 32 tokens (packed)"
expect_has "the packed rows' fill" "$ROWS rows of 32 tokens (packed), $(fill "$ROWS") of the positions filled"
M="$TMP/runp/metrics.jsonl"
L1=$(metric "$M" loss | head -1); LN=$(metric "$M" loss | tail -1)
close "$L1" 5.5452 0.03 && pass || fail "packed: first loss $L1 is not ln(256)=5.5452 within 3%"
awk -v a="$LN" 'BEGIN { exit !(a < 0.5) }' && pass || fail "packed: the last loss $LN is not below 0.5"

# ---- the loss is the token mean over the global batch (HF's num_items_in_batch) -----------------
# Samples whose replies (the flagged tail) vary from 1 to 20 tokens: micro-batches predict different
# numbers of tokens. The mean over every predicted token of the global batch does not depend on how
# the batch of 8 rows is split into ranks and micro-batches, so 1 rank x 1 micro-batch of 8,
# 2 ranks x 2 micro-batches of 2 and 4 ranks x 2 micro-batches of 1 follow one loss trajectory;
# the mean of each micro-batch's mean (the rule for plain data) would not. Validation likewise,
# over micro-batches of 8, 2 and 1.
python3 - "$TMP/tm.txt" <<'PY'
import random, sys
rng = random.Random(11)
with open(sys.argv[1], "w") as f:
    f.write("200\n")
    for k in range(200):
        L = rng.randint(4, 30)
        reply = rng.randint(1, min(20, L - 1))
        tok = [rng.randrange(32, 256) for _ in range(L)]
        loss = [0] * (L - reply) + [1] * reply
        f.write("%d %s\n" % (L, " ".join("%d %d" % p for p in zip(tok, loss))))
PY
mkdir -p "$TMP/tm"
"$SFT" rows "$TMP/tm.txt" "$TMP/tm" 32 256 0 1 1 > /dev/null 2> "$TMP/tm/err" || fail "token-mean shards: $(cat "$TMP/tm/err")"
tm_run() { # NAME NP MICRO GAS [--packing]
    local name=$1 np=$2 mb=$3 gas=$4; shift 4
    mpi "$np" train --model test-llama --data "$TMP/tm/sft_train_*.bin" --val "$TMP/tm/sft_train_*.bin" \
        --max_length 32 --max_steps 4 --learning_rate 1e-2 --logging_steps 1 --eval_steps 4 \
        --per_device_train_batch_size "$mb" --gradient_accumulation_steps "$gas" --seed 3 --out "$TMP/tm_$name" "$@"
    expect_ok "token mean: $name"
}
tm_run a 1 8 1
tm_run b 2 2 2
tm_run c 4 1 2
for r in b c; do
    metric "$TMP/tm_a/metrics.jsonl" loss > "$TMP/tm_a.loss"
    metric "$TMP/tm_$r/metrics.jsonl" loss > "$TMP/tm_$r.loss"
    paste -d' ' "$TMP/tm_a.loss" "$TMP/tm_$r.loss" > "$TMP/tm_$r.cmp"
    [ "$(wc -l < "$TMP/tm_$r.cmp")" -ge 4 ] || fail "token mean: run $r logged $(wc -l < "$TMP/tm_$r.cmp") losses"
    while read -r x y; do
        close "$x" "$y" 2e-5 && pass || fail "token mean: loss $y of the split $r differs from $x (1 rank, 1 micro-batch of 8)"
    done < "$TMP/tm_$r.cmp"
    va=$(metric "$TMP/tm_a/metrics.jsonl" val_loss | tail -1); vr=$(metric "$TMP/tm_$r/metrics.jsonl" val_loss | tail -1)
    close "$va" "$vr" 2e-5 && pass || fail "token mean: val_loss $vr of the split $r differs from $va"
done

# packed rows at ZeRO-3 with the optimizer in host memory: the host update runs on into the next
# step and that step's first micro-batches run their forwards together behind it, the second in
# a context with positions and sample starts of its own, lean on the CPU backend (its backward
# recomputes the norms' outputs and the MLP's product); the same bits as one after the other
# after the whole update (zinf_overlap_host_step false). Llama and Qwen3 (the q/k norms), every
# block kept, and the first recomputed (a recomputed block and a kept lean one in the context).
for model in test-llama test-qwen3; do
    for ac in "" ', "activation_checkpointing": {"zinf_recompute_blocks": 1}'; do
        for ov in "" ', "zinf_overlap_host_step": false'; do
            n=pk$(printf '%s%s%s' "$model" "$ac" "$ov" | cksum | cut -c1-6)
            printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}} %s%s}\n' "$ac" "$ov" > "$TMP/$n.json"
            mpi 2 train --model $model --data "$TMP/tm/sft_train_*.bin" --max_length 32 --packing --max_steps 4 \
                --logging_steps 1 --seed 3 --config "$TMP/$n.json" --out "$TMP/$n"
            expect_ok "packed rows, offload, $model ($n)"
            h=$(hash_of)
            if [ -z "$ov" ]; then
                expect_has "packed rows, $model: forwards together, lean" \
                    "the forwards of 2 micro-batches of each step run together" \
                    "; lean: their backward recomputes the norms' outputs and the MLP's product"
                hon=$h; metric "$TMP/$n/metrics.jsonl" loss > "$TMP/pk_on.loss"; continue
            fi
            metric "$TMP/$n/metrics.jsonl" loss > "$TMP/pk_off.loss"
            [ -n "$h" ] && [ "$h" = "$hon" ] && cmp -s "$TMP/pk_on.loss" "$TMP/pk_off.loss" && pass ||
                fail "packed rows, $model$ac: the forwards together behind the update give parameters $hon, one after the other $h"
        done
    done
done

finish
