#!/bin/sh
# `zinf estimate --precision fp32 --print-bytes` against the bytes a run measures: test-mini, one
# step at ZeRO stages 0-3 on 1, 2 and 3 ranks; every state category of the final memory record in
# metrics.jsonl (mem_param ... mem_comm) must equal the estimate to the byte, padding included,
# and the most the run held at once (mem_peak) stay within the estimate's states and buffers;
# and the activation bytes (mem_act, mem_act_grad) for each recompute choice, against the run
# and against the layout written out in the test.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
D="$TMP/add_train_*.bin"

KEYS="param param_shard grad grad_acc master adam comm"

for st in 0 1 2 3; do
    for np in 1 2 3; do
        name="s${st}w${np}"
        printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": %d,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
 "zero_optimization": {"stage": %d}}\n' $((12 / np)) "$st" > "$TMP/$name.json"
        mpi "$np" train --model test-mini --data "$D" --max_length 32 --max_steps 1 \
            --config "$TMP/$name.json" --out "$TMP/$name" --seed 3
        expect_ok "$name: train"
        [ "$RC" -eq 0 ] || continue
        M="$TMP/$name/metrics.jsonl"
        # the memory record is the last line carrying mem_param
        grep '"mem_param"' "$M" | tail -1 > "$TMP/$name.mem"
        if [ ! -s "$TMP/$name.mem" ]; then fail "$name: no memory record in metrics.jsonl"; continue; fi

        run estimate --model test-mini --precision fp32 --nodes 1 --gpus-per-node "$np" \
            --stage "$st" --print-bytes
        expect_ok "$name: estimate"
        [ "$RC" -eq 0 ] || continue
        EST=$OUTPUT
        [ "$(printf '%s\n' "$EST" | wc -l)" -eq 1 ] && pass || fail "$name: --print-bytes printed more than one line: $EST"

        for k in $KEYS; do
            got=$(metric "$TMP/$name.mem" "mem_$k")
            want=$(printf '%s\n' "$EST" | tr ' ' '\n' | sed -n "s/^$k=\([0-9]*\)\$/\1/p")
            if [ -z "$got" ] || [ -z "$want" ]; then
                fail "$name: $k missing (run '$got', estimate '$want')"
            elif [ "$got" -eq "$want" ]; then
                pass
            else
                fail "stage $st world $np: mem_$k measured $got bytes, estimate $want"
            fi
        done
        # 16-bit compute (--bf16, --fp16), as zero.c allocates it, from the elements this fp32 run
        # measured: 16-bit parameters (half the fp32 bytes), no 16-bit gradient at rest, fp32
        # gradient accumulators of the same elements as the fp32 gradients, an fp32 master of the
        # shard (half of Adam m + v) and Adam m + v: 2 + 4 + 12 bytes per element; except at stage
        # 0 on one rank with one micro-step a step (no --config: DeepSpeed's default), whose step
        # reads the 16-bit gradients themselves: 2 + 2 + 12
        g() { metric "$TMP/$name.mem" "mem_$1"; }
        if [ "$st" -eq 0 ] && [ "$np" -eq 1 ]; then grads16="grad=$(($(g grad) / 2)) grad_acc=0"
        else grads16="grad=0 grad_acc=$(($(g grad) + $(g grad_acc)))"; fi
        want16="param=$(($(g param) / 2)) param_shard=$(($(g param_shard) / 2)) $grads16 master=$(($(g adam) / 2)) adam=$(g adam) comm=0"
        for dt in bf16 fp16; do
            run estimate --model test-mini --$dt --nodes 1 --gpus-per-node "$np" --stage "$st" --print-bytes
            case "$OUTPUT" in
                "$want16 total="*) pass ;;
                *) fail "stage $st world $np --$dt: '$OUTPUT', the engine's 16-bit states are '$want16'" ;;
            esac
        done
        # without --bf16/--fp16 or a config saying 16-bit, the engine trains in fp32: the default
        run estimate --model test-mini --nodes 1 --gpus-per-node "$np" --stage "$st" --print-bytes
        [ "$OUTPUT" = "$EST" ] && pass || fail "stage $st world $np: the default '$OUTPUT' is not fp32's '$EST'"
        # the estimate's total is the sum of the categories, and nothing is left at rest in comm
        total=$(printf '%s\n' "$EST" | tr ' ' '\n' | sed -n 's/^total=\([0-9]*\)$/\1/p')
        sum=0
        for k in $KEYS; do sum=$((sum + $(metric "$TMP/$name.mem" "mem_$k"))); done
        [ "$total" = "$sum" ] && pass || fail "$name: estimate total $total != measured sum $sum"
        # the most the engine held at once (states, gradients in flight, buckets, gathered units:
        # mem_peak; the CPU backend keeps no cache) is within the estimate's states and buffers
        buffers=$(printf '%s\n' "$EST" | tr ' ' '\n' | sed -n 's/^buffers=\([0-9]*\)$/\1/p')
        peak=$(metric "$TMP/$name.mem" mem_peak)
        if [ -n "$buffers" ] && [ -n "$peak" ] && [ "$peak" -le $((total + buffers)) ]; then pass
        else fail "stage $st world $np: the run held $peak bytes at once, past the estimate's $total of states and ${buffers:-?} of buffers"; fi
    done
done

# a bf16 config at stage 0 on one rank: its micro-steps a step decide whether the step reads the
# 16-bit gradients themselves (one: grad 2n, as the run above measured 4n in fp32) or sums them
# into fp32 accumulators (two: grad_acc 4n)
G32=$(metric "$TMP/s0w1.mem" mem_grad)
for mb in 12 6; do
    printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": %d, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 0}}\n' "$mb" > "$TMP/gas$mb.json"
    run estimate --model test-mini --config "$TMP/gas$mb.json" --print-bytes
    expect_ok "estimate, bf16 stage 0, micro-batch $mb of 12"
    if [ "$mb" -eq 12 ]; then want="grad=$((G32 / 2)) grad_acc=0"; else want="grad=0 grad_acc=$G32"; fi
    case "$OUTPUT" in
        *" $want "*) pass ;;
        *) fail "bf16 stage 0, micro-batch $mb of 12: expected '$want': $OUTPUT" ;;
    esac
done

# --precision mixed is the ZeRO paper's accounting: stage 0 world 1 is 2+2+12 bytes each
run estimate --model test-mini --stage 0 --print-bytes --precision mixed
expect_ok "mixed estimate"
P=$(metric "$TMP/s0w1.mem" mem_param)   # 4 bytes x Psi
case "$OUTPUT" in
    *"param=$((P / 2)) "*"grad=$((P / 2)) "*"master=$P adam=$((2 * P)) "*) pass ;;
    *) fail "mixed stage 0: expected 2Psi/2Psi/4Psi/8Psi with Psi = $((P / 4)): $OUTPUT" ;;
esac
# activations: --micro-batch B --seq-len T --recompute R against the bytes a run allocates
# (mem_act, mem_act_grad) and against the layout written out: every buffer rounded up to 256
# bytes; the residual stream (L+1 entries of N x C); per stored layer LN1, QKV (3C), attention
# output, mid residual, LN2, MLP pre- and post-GELU (4C each), four N-float LayerNorm statistics
# and the LSE (N x heads floats); under recompute one stored layer, plus, keeping attention, each
# other layer's attention output and LSE; then the final LayerNorm (and its two statistics), the
# logits (N x padded vocabulary), losses, tokens and targets. Gradient scratch: N x C x (1 + 1 +
# 3 + 1 + 4). test-mini: L=2, C=64, 4 heads, padded vocabulary 256; fp32 on the CPU.
act_ref() { # act_ref B T RECOMPUTE(0 none, 1 full, 2 keep)
    awk -v B="$1" -v T="$2" -v rc="$3" 'function r(x) { return int((x + 255) / 256) * 256 }
    BEGIN { L = 2; C = 64; NH = 4; Vp = 256; es = 4; N = B * T
        layer = 4 * r(N * C * es) + r(3 * N * C * es) + 2 * r(4 * N * C * es) + 4 * r(N * 4) + r(N * NH * 4)
        stored = rc == 0 ? L : 1
        a = (L + 1) * r(N * C * es) + stored * layer
        if (rc == 2) a += (L - 1) * (r(N * C * es) + r(N * NH * 4))
        a += r(N * C * es) + 2 * r(N * 4) + r(N * Vp * es) + 3 * r(N * 4)
        g = 3 * r(N * C * es) + r(3 * N * C * es) + r(4 * N * C * es)
        printf "act=%d act_grad=%d\n", a, g }'
}
k=0
for rc in none full keep-attention; do
    flags=""
    [ "$rc" = full ] && flags="--gradient_checkpointing"
    [ "$rc" = keep-attention ] && flags="--gradient_checkpointing --ac_keep_attention"
    mpi 1 train --model test-mini --data "$D" --max_length 32 --max_steps 1 --per_device_train_batch_size 4 \
        --out "$TMP/act$k" --seed 3 $flags
    expect_ok "activations, recompute $rc: train"
    got=$(grep '"mem_act"' "$TMP/act$k/metrics.jsonl" | tail -1 | sed 's/.*"mem_act": \([0-9]*\), "mem_act_grad": \([0-9]*\).*/act=\1 act_grad=\2/')
    run estimate --model test-mini --precision fp32 --stage 0 --print-bytes --micro-batch 4 --seq-len 32 --recompute "$rc"
    expect_ok "activations, recompute $rc: estimate"
    est=$(printf '%s\n' "$OUTPUT" | grep '^act=')
    want=$(act_ref 4 32 $k)
    [ "$got" = "$want" ] && pass || fail "recompute $rc: the run allocated '$got', the layout gives '$want'"
    [ "$est" = "$want" ] && pass || fail "recompute $rc: zinf estimate says '$est', the layout gives '$want'"
    k=$((k + 1))
done
# lean activations (the Llama family): a ZeRO-3 run with the optimizer in host memory and two
# micro-batches a step runs lean on the CPU backend (the forwards together behind the update);
# its mem_act/mem_act_grad against the estimate's lean figures, and both against the layout:
# each carved block (every block, or the first and the kept ones) drops its two norm outputs
# (N x C) and SwiGLU's product (N x F), and one of each goes to the gradient scratch that the
# blocks share. A 3-block Llama (C 64, F 128), fp32, micro-batch 2 x 32 tokens (N 64): every
# block kept (3 carved), and 2 of 3 recomputed (the first's set shared, the third's: 2 carved).
printf '{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
 "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64}\n' > "$TMP/l3.json"
for rb in 0 2; do
    printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3,
 "offload_optimizer": {"device": "cpu"}}, "activation_checkpointing": {"zinf_recompute_blocks": %d}}\n' $rb > "$TMP/lean$rb.json"
    mpi 1 train --model "$TMP/l3.json" --data "$D" --max_length 32 --max_steps 1 --config "$TMP/lean$rb.json" \
        --out "$TMP/lean$rb" --seed 3
    expect_ok "lean activations, $rb of 3 blocks recomputed: train"
    expect_has "lean activations, $rb recomputed: the run is lean" "; lean: their backward recomputes"
    got=$(grep '"mem_act"' "$TMP/lean$rb/metrics.jsonl" | tail -1 | sed 's/.*"mem_act": \([0-9]*\), "mem_act_grad": \([0-9]*\).*/lean_act=\1 lean_act_grad=\2/')
    run estimate --model "$TMP/l3.json" --config "$TMP/lean$rb.json" --precision fp32 --print-bytes --micro-batch 2 --seq-len 32
    expect_ok "lean activations, $rb recomputed: estimate"
    est=$(printf '%s\n' "$OUTPUT" | sed -n 's/^act=\([0-9]*\) act_grad=\([0-9]*\) lean_act=\([0-9]*\) lean_act_grad=\([0-9]*\)$/\1 \2 \3 \4/p')
    read -r fa fg la lg <<EOT
$est
EOT
    carved=$(( rb == 0 ? 3 : 2 ))
    want="lean_act=$(( fa - carved * (2 * 64 * 64 * 4 + 64 * 128 * 4) )) lean_act_grad=$(( fg + 64 * 64 * 4 + 64 * 128 * 4 ))"
    [ -n "$est" ] && [ "lean_act=$la lean_act_grad=$lg" = "$want" ] && pass ||
        fail "lean, $rb recomputed: zinf estimate says '$est', the layout gives '$want'"
    [ "$got" = "$want" ] && pass || fail "lean, $rb recomputed: the run allocated '$got', the layout gives '$want'"
done
run estimate --model test-mini --recompute full
expect_err "--recompute without --micro-batch" "give --micro-batch too"
run estimate --model test-mini --micro-batch 4 --recompute some
expect_err "--recompute some" "--recompute some: expected none, full or keep-attention"
run estimate --model test-mini --micro-batch 0
expect_err "--micro-batch 0" "--micro-batch 0: expected a whole number from 1 to 1000000"
run estimate --model test-mini --micro-batch 4 --seq-len 65
expect_err "--seq-len beyond n_positions" "--seq-len 65 exceeds the model's n_positions 64"
# a Llama-family model's limit under the name its config.json gives it (llama-3.2-1b: 131072)
run estimate --model llama-3.2-1b --micro-batch 1 --seq-len 131073
expect_err "--seq-len beyond max_position_embeddings" "--seq-len 131073 exceeds the model's max_position_embeddings 131072"
run train --model llama-3.2-1b --max_length 131073 --data "$TMP/none_*.bin"
expect_err "--max_length beyond max_position_embeddings" "--max_length 131073 exceeds the model's max_position_embeddings 131072"
# a GPT-2 config.json integer out of range says the range (2e9 was "must be a positive integer")
printf '{"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "n_positions": 2000000000}\n' \
    > "$TMP/npos.json"
run estimate --model "$TMP/npos.json" --stage 3
expect_err "n_positions 2e9" "$TMP/npos.json: \"n_positions\" must be an integer from 1 to 2^30 (1073741824)"
# the footer's possessive: one GPU's, several GPUs' (it said "1 GPU' host")
run estimate --model test-mini --stage 3
expect_has "one GPU's shares" "per node = 1 GPU's host and NVMe shares"
run estimate --model test-mini --stage 3 --gpus-per-node 4
expect_has "four GPUs' shares" "per node = 4 GPUs' host and NVMe shares"
# bad values are refused
run estimate --model test-mini --precision fp16
expect_err "--precision fp16" "--precision fp16"
run estimate --model test-mini --stage 4
expect_err "--stage 4" "--stage 4"
run estimate --model test-mini --bf16 --precision fp32
expect_err "--bf16 with --precision fp32" "--precision fp32 and --bf16 disagree"
run estimate --model test-mini --bf16 --fp16
expect_err "--bf16 with --fp16" "--bf16 and --fp16 exclude each other"
# a config's bf16 block picks the engine's 16-bit figures, as train would: the same line as --bf16
printf '{"train_batch_size": 4, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}\n' > "$TMP/b16.json"
run estimate --model test-mini --config "$TMP/b16.json" --gpus-per-node 2 --print-bytes
C16=${OUTPUT%% device=*}
run estimate --model test-mini --bf16 --stage 2 --gpus-per-node 2 --print-bytes
[ -n "$C16" ] && [ "$C16" = "$OUTPUT" ] && pass || fail "config bf16 '$C16' differs from --bf16 '$OUTPUT'"

# whether the states fit this machine: its host memory (pages x page size, from getconf) against
# each row's CPU column, the free space of the config's nvme_path (statvfs, from stat -f) against
# the NVMe column; a row that needs more is marked
HOST=$(awk -v p="$(getconf _PHYS_PAGES)" -v s="$(getconf PAGE_SIZE)" 'BEGIN { printf "%.2f", p * s / 2^30 }')
printf '{"train_batch_size": 8, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3,
  "offload_optimizer": {"device": "nvme", "nvme_path": "%s"}, "offload_param": {"device": "cpu"}}}\n' "$TMP" > "$TMP/nv.json"
for model in test-mini llama-3.1-70b; do
    run estimate --model "$model" --config "$TMP/nv.json"
    expect_ok "estimate $model on this machine"
    FREE=$(stat -f -c '%a %S' "$TMP" | awk '{ printf "%.2f", $1 * $2 / 2^30 }')
    row=$(printf '%s\n' "$OUTPUT" | grep '^  \*')
    cpu=$(printf '%s\n' "$row" | awk '{ print $7 }') nv=$(printf '%s\n' "$row" | awk '{ print $8 }')
    wh=$(awk -v a="$cpu" -v b="$HOST" 'BEGIN { print (a > b) ? "host!" : "" }')
    wd=$(awk -v a="$nv" -v b="$FREE" 'BEGIN { print (a > b) ? "disk!" : "" }')
    case "$row" in *host!*) gh=host! ;; *) gh= ;; esac
    case "$row" in *disk!*) gd=disk! ;; *) gd= ;; esac
    [ "$gh $gd" = "$wh $wd" ] && pass || fail "$model: row '$row' marked '$gh $gd', CPU $cpu GiB of $HOST, NVMe $nv GiB of $FREE free"
    expect_has "$model: host memory line" "this machine has $HOST GiB of host memory"
    expect_has "$model: free space line" "$TMP has "
done

# a unit past 2^31 elements (wpe of 10^6 positions x 4096 plus wte: (10^6 + 256) x 4096 =
# 4097048576) is counted, not cut to an int (the estimate failed with an empty message)
printf '{"model_type": "gpt2", "n_layer": 2, "n_embd": 4096, "n_head": 32, "vocab_size": 256, "n_positions": 1000000}\n' > "$TMP/wide.json"
run estimate --model "$TMP/wide.json" --stage 3
expect_ok "a unit of 4097048576 elements"
expect_has "a unit of 4097048576 elements" "largest unit: embedding (wte+wpe), 4097048576 (4097.0M)"
# activations past 2^63 bytes: the one error line, and no half report before it
printf '{"model_type": "gpt2", "n_layer": 2, "n_embd": 131072, "n_head": 1024, "vocab_size": 256, "n_positions": 1000000}\n' > "$TMP/huge.json"
run estimate --model "$TMP/huge.json" --stage 3 --micro-batch 1000000 --seq-len 1000000
expect_err "activations past 2^63 bytes" "zinf: error: activations of 1000000 x 1000000 tokens: more than 2^63 bytes"
[ "$(printf '%s\n' "$OUTPUT" | wc -l)" = 1 ] && pass || fail "a failed estimate printed more than its error: $OUTPUT"

finish
