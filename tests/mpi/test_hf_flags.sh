#!/bin/sh
# ms-swift's spellings: --deepspeed NAME (zero0 ... zero3_offload) resolves to the bundled copy of
# ms-swift's built-in config, whose resolved form must equal that of the published file
# (tests/fixtures/published/swift--NAME.json, fetched from ms-swift) with the same flags, and
# trains as that file does; --deepspeed FILE is --config FILE. --torch_dtype fills the precision
# blocks' "auto" as ms-swift does (bfloat16 -> bf16, float16 -> fp16, float32 -> neither), and a
# config or flag that says otherwise is one line naming both.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

F="--model test-mini --per_device_train_batch_size 2 --gradient_accumulation_steps 2"
for n in zero0 zero1 zero2 zero2_offload zero3 zero3_offload; do
    # shellcheck disable=SC2086
    run config show "$n" $F
    expect_ok "config show $n"
    printf '%s\n' "$OUTPUT" | grep -v '"source"\|^zinf' > "$TMP/$n.named"
    # shellcheck disable=SC2086
    run config show "$FIXTURES/published/swift--$n.json" $F
    expect_ok "config show swift--$n.json"
    printf '%s\n' "$OUTPUT" | grep -v '"source"\|^zinf' > "$TMP/$n.file"
    if [ -s "$TMP/$n.named" ] && cmp -s "$TMP/$n.named" "$TMP/$n.file"; then pass
    else fail "--deepspeed $n resolves unlike ms-swift's $n.json"; diff "$TMP/$n.named" "$TMP/$n.file" | head >&2; fi
done

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
D="$TMP/add_train_*.bin"
T="--model test-mini --data $D --max_length 32 --per_device_train_batch_size 2 --max_steps 3 --logging_steps 1 --save_steps 0"
# shellcheck disable=SC2086
mpi 2 train $T --deepspeed zero3_offload --out "$TMP/named"
expect_ok "train --deepspeed zero3_offload"
# shellcheck disable=SC2086
mpi 2 train $T --deepspeed "$FIXTURES/published/swift--zero3_offload.json" --out "$TMP/file"
expect_ok "train --deepspeed FILE"
a=$(metric "$TMP/named/metrics.jsonl" loss | tr '\n' ' ') b=$(metric "$TMP/file/metrics.jsonl" loss | tr '\n' ' ')
[ -n "$a" ] && [ "$a" = "$b" ] && pass || fail "--deepspeed zero3_offload losses '$a' differ from the published file's '$b'"
# shellcheck disable=SC2086
mpi 1 train $T --deepspeed zero3 --config "$FIXTURES/published/swift--zero3.json" --out "$TMP/both"
expect_err "--deepspeed and --config" "--deepspeed and --config set the same thing"

# --torch_dtype: the precision blocks' "auto", as ms-swift sets bf16/fp16 from it
jv() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(str(d['bf16']['enabled']).lower(), str(d['fp16']['enabled']).lower())" "$1"; }
for p in "bfloat16 true false" "float16 false true" "float32 false false"; do
    # shellcheck disable=SC2086
    set -- $p
    "$ZINF" config show zero2 --model test-mini --torch_dtype "$1" > "$TMP/dt.json" 2>/dev/null
    got=$(jv "$TMP/dt.json" 2>/dev/null)
    [ "$got" = "$2 $3" ] && pass || fail "--torch_dtype $1: bf16/fp16 enabled '$got', want '$2 $3'"
done
printf '{"train_batch_size": 4, "bf16": {"enabled": true}}\n' > "$TMP/b.json"
run config show "$TMP/b.json" --torch_dtype float16
expect_err "explicit bf16 and --torch_dtype float16" "bf16.enabled is true in the config but --torch_dtype float16 needs it false"
run config show zero2 --model test-mini --torch_dtype bfloat16 --bf16 false
expect_err "--torch_dtype and --bf16 disagree" "--torch_dtype bfloat16 and --bf16 false disagree"
run config show zero2 --model test-mini --torch_dtype int4
expect_err "--torch_dtype int4" "--torch_dtype int4: expected bfloat16, float16 or float32"
finish
