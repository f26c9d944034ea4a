#!/bin/sh
# `zinf train --dataset`, the one-command SFT path: a JSONL chat dataset rendered with a template
# and tokenized with the model directory's tokenizer into SFT shards, once, into a cache keyed by
# every input. Checked here: the cached shards are byte for byte those of the two-step path
# (`zinf data --sft`, whose ids and loss flags test_chat.sh holds to a Python reference); a second
# run with the same inputs finds them (and trains on the same data: the same first loss); a changed
# input (the system message, the dataset's bytes) makes a new set; a bad dataset is one line and
# leaves nothing in the cache, nor the directories made for it; the flags that belong to --dataset
# are refused without it; the start line's count of samples over --max_length (kept in the cache);
# FILE#N and file names with '#'; a tokenizer with two tokens at one id.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
CHAT="${top_srcdir:-.}/tests/chat/fixtures/chat.jsonl"

M=$TMP/model
tiny_chat_model "$M"
for i in 1 2 3 4 5 6; do cat "$CHAT"; done > "$TMP/data.jsonl"
C=$TMP/cache
TR="--model $M --template chatml --max_length 128 --max_steps 2 --logging_steps 1 --per_device_train_batch_size 2 --seed 5"

# shellcheck disable=SC2086 # $TR is words
mpi 2 train $TR --dataset "$TMP/data.jsonl" --dataset_cache "$C" --out "$TMP/o1"
expect_ok "train --dataset"
expect_has "made" "--dataset $TMP/data.jsonl: SFT shards made in $C/"
KEYS=$(ls "$C")
[ "$(echo "$KEYS" | wc -l)" = 1 ] && pass || fail "one set of shards expected in the cache, found: $KEYS"
case "$KEYS" in [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]) pass ;;
*) fail "the cache directory is not named by a 16-digit key: $KEYS" ;; esac
L1=$(metric "$TMP/o1/metrics.jsonl" loss | head -1)

# the two-step path makes the same bytes
mkdir -p "$TMP/two"
run data --sft --input "$TMP/data.jsonl" --tokenizer "$M" --template chatml --max_length 128 --out "$TMP/two/sft"
expect_ok "data --sft"
for f in "$C/$KEYS"/sft_*.bin; do
    cmp -s "$f" "$TMP/two/$(basename "$f")" && pass || fail "$(basename "$f") differs from zinf data --sft's"
done

# the same inputs again: found, and the same data (the same first loss, bit for bit)
# shellcheck disable=SC2086
mpi 2 train $TR --dataset "$TMP/data.jsonl" --dataset_cache "$C" --out "$TMP/o2"
expect_ok "train --dataset again"
expect_has "found" "SFT shards found in $C/$KEYS/sft_train_*.bin"
[ "$(metric "$TMP/o2/metrics.jsonl" loss | head -1)" = "$L1" ] && pass || fail "the cached shards gave another first loss"

# another system message, then other bytes in the file: new sets
# shellcheck disable=SC2086
mpi 2 train $TR --dataset "$TMP/data.jsonl" --dataset_cache "$C" --system "Be brief." --out "$TMP/o3"
expect_ok "train --dataset --system"
expect_has "made again" "SFT shards made in"
echo '{"messages": [{"role": "user", "content": "one more"}, {"role": "assistant", "content": "ok"}]}' >> "$TMP/data.jsonl"
# shellcheck disable=SC2086
mpi 2 train $TR --dataset "$TMP/data.jsonl" --dataset_cache "$C" --out "$TMP/o4"
expect_has "made for new bytes" "SFT shards made in"
[ "$(ls "$C" | wc -l)" = 3 ] && pass || fail "three sets expected in the cache: $(ls -a "$C")"

# a malformed line: one line naming file and line; nothing new in the cache, no temporary left
printf '%s\n' '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}' '{"messages": [' > "$TMP/bad.jsonl"
# shellcheck disable=SC2086
mpi 2 train $TR --dataset "$TMP/bad.jsonl" --dataset_cache "$C" --out "$TMP/o5"
expect_err "a malformed dataset" "$TMP/bad.jsonl:2"
[ "$(ls -a "$C" | wc -l)" = 5 ] && pass || fail "the failed dataset left something in the cache: $(ls -a "$C")"
[ "$(count_lines "bad.jsonl:2")" = 1 ] && pass || fail "the error is said $(count_lines "bad.jsonl:2") times"

# bad values of --dataset's flags: one line each, and no --out or cache left behind
touch "$TMP/afile"
run train --model "$M" --template chatml --max_length 128 --dataset "$TMP/data.jsonl" --dataset_cache "$TMP/afile" --out "$TMP/b1"
expect_err "--dataset_cache a file" "$TMP/afile is a regular file, not a directory"
# a file that is not there is named with the option that gave it (it said --input for both)
run train --model "$M" --template chatml --max_length 128 --dataset "$TMP/nosuch.jsonl" --out "$TMP/b4"
expect_err "a missing --dataset" "zinf: error: --dataset $TMP/nosuch.jsonl: No such file or directory"
run train --model "$M" --template chatml --max_length 128 --dataset "$TMP/data.jsonl" --val_dataset "$TMP/nosuch.jsonl" --out "$TMP/b5"
expect_err "a missing --val_dataset" "zinf: error: --val_dataset $TMP/nosuch.jsonl: No such file or directory"
run data --sft --tokenizer "$M" --template chatml --input "$TMP/nosuch.jsonl" --out "$TMP/b6"
expect_err "a missing --input" "zinf: error: --input $TMP/nosuch.jsonl: No such file or directory"
run train --model "$M" --template nosuch --max_length 128 --dataset "$TMP/data.jsonl" --out "$TMP/b2"
expect_err "an unknown --template" "--template: unknown template 'nosuch'"
run train --model "$M" --template chatml --truncation_strategy middle --dataset "$TMP/data.jsonl" --out "$TMP/b3"
expect_err "a bad --truncation_strategy" "--truncation_strategy middle: expected delete, left or right"
# no tokenizer: a preset or a config.json has none, and --tokenizer must name a tokenizer.json
run train --model test-llama --template chatml --dataset "$TMP/data.jsonl" --out "$TMP/b4"
expect_err "a preset and no --tokenizer" "--dataset: --model test-llama is a preset, which holds no tokenizer: give --tokenizer PATH"
run train --model "$M/config.json" --template chatml --dataset "$TMP/data.jsonl" --out "$TMP/b5"
expect_err "a config.json and no --tokenizer" "--dataset: --model $M/config.json is a config file, which holds no tokenizer"
cp "$M/config.json" "$TMP/tok.model"
run train --model "$M" --tokenizer "$TMP/tok.model" --template chatml --dataset "$TMP/data.jsonl" --out "$TMP/b6"
expect_err "--tokenizer not a tokenizer.json" "--tokenizer $TMP/tok.model: a tokenizer.json, or a model directory holding one, is needed"
[ ! -e "$TMP/b1" ] && [ ! -e "$TMP/b2" ] && [ ! -e "$TMP/b3" ] && [ ! -e "$TMP/b4" ] && [ ! -e "$TMP/b5" ] && [ ! -e "$TMP/b6" ] && pass ||
    fail "a refused run left its --out: $(ls -d "$TMP"/b? 2>/dev/null)"

# flags of --dataset without it; --data and --dataset together
run train --model "$M" --data "$TMP/x_*.bin" --template chatml --out "$TMP/o6"
expect_err "--template without --dataset" "go with --dataset"
run train --model "$M" --data "$TMP/x_*.bin" --dataset "$TMP/data.jsonl" --out "$TMP/o7"
expect_err "--data and --dataset" "--data and --dataset exclude each other"

# A micro-batch, a rank's share or a whole step with no trained token (L's reply cut off by
# --max_length 40 with --truncation_strategy right; S, 34 tokens, trains its 10): its gradient is
# 0, not the logits taken for one, and a step with none is skipped (no update, no Adam step). So
# one step on [S, L] with accumulation 2, or on two ranks, and three steps on [L, S, L] end with the
# parameters of one step on [S] alone, bit for bit.
LONG='{"messages": [{"role": "user", "content": "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"}, {"role": "assistant", "content": "yes"}]}'
SHORT='{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]}'
printf '%s\n' "$SHORT" > "$TMP/s.jsonl"
printf '%s\n' "$LONG" > "$TMP/l.jsonl"
printf '%s\n%s\n' "$SHORT" "$LONG" > "$TMP/sl.jsonl"
printf '%s\n%s\n%s\n' "$LONG" "$SHORT" "$LONG" > "$TMP/lsl.jsonl"
TZ0="--model $M --template chatml --max_length 40 --truncation_strategy right --logging_steps 1 --seed 3 --per_device_train_batch_size 1"
# shellcheck disable=SC2086 # $TZ0 is words
mpi 1 train $TZ0 --dataset "$TMP/s.jsonl" --out "$TMP/z1" --max_steps 1
expect_ok "one step on [S]"
H1=$(hash_of)
# shellcheck disable=SC2086
mpi 1 train $TZ0 --dataset "$TMP/sl.jsonl" --out "$TMP/z2" --max_steps 1 --gradient_accumulation_steps 2
[ -n "$H1" ] && [ "$(hash_of)" = "$H1" ] && [ "$(metric "$TMP/z2/metrics.jsonl" loss)" = "$(metric "$TMP/z1/metrics.jsonl" loss)" ] &&
    pass || fail "[S, L] with accumulation 2: hash $(hash_of), loss $(metric "$TMP/z2/metrics.jsonl" loss); [S] alone: $H1, $(metric "$TMP/z1/metrics.jsonl" loss)"
# shellcheck disable=SC2086
mpi 2 train $TZ0 --dataset "$TMP/sl.jsonl" --out "$TMP/z3" --max_steps 1
[ "$(hash_of)" = "$H1" ] && pass || fail "[S, L] on two ranks: hash $(hash_of), [S] alone $H1"
# shellcheck disable=SC2086
mpi 1 train $TZ0 --dataset "$TMP/lsl.jsonl" --out "$TMP/z4" --max_steps 3
expect_ok "three steps on [L, S, L]"
[ "$(hash_of)" = "$H1" ] && [ "$(count_lines "no token of the step's batch is trained")" = 2 ] &&
    [ "$(metric "$TMP/z4/metrics.jsonl" skipped | tr '\n' ' ')" = "$(metric "$TMP/z4/metrics.jsonl" loss | sed 's/^null$/true/; s/^[0-9].*/false/' | tr '\n' ' ')" ] &&
    pass || fail "[L, S, L]: hash $(hash_of) (want $H1), $(count_lines "no token of the step's batch is trained") skipped steps said, skipped $(metric "$TMP/z4/metrics.jsonl" skipped | tr '\n' ' ')"
# a training set whose every reply is cut off, and a validation set that filtering empties: refused
run data --sft --input "$TMP/l.jsonl" --tokenizer "$M" --template chatml --max_length 40 --truncation_strategy right --out "$TMP/z5"
expect_err "every reply cut off" "$TMP/l.jsonl: no token of the 1 training samples is trained: --max_length 40 with --truncation_strategy right cut off every reply"
run data --sft --input "$TMP/s.jsonl" --val_dataset "$TMP/l.jsonl" --tokenizer "$M" --template chatml --max_length 40 --out "$TMP/z6"
expect_err "a validation set emptied" "$TMP/l.jsonl: no validation sample is left after filtering (0 without an assistant turn, 1 longer than --max_length 40 deleted)"
[ -z "$(ls "$TMP" | grep -E '^z[56]_')" ] && pass || fail "a refused set left shards: $(ls "$TMP" | grep -E '^z[56]_')"
# a template whose control tokens the tokenizer lacks (llama3's with a ChatML tokenizer) would write
# them as text: refused
run data --sft --input "$TMP/s.jsonl" --tokenizer "$M" --template llama3 --max_length 40 --out "$TMP/z7"
expect_err "llama3's template with a ChatML tokenizer" "--template llama3: $M has no token <|begin_of_text|>, which the template writes"

# The start of a --dataset run counts the samples over --max_length that the cache deleted (the
# shards no longer hold them), made or found, as zinf data --sft counts them: every third sample of
# ten is L (over 40 tokens), the others S (34). A cache made before the count was kept (no
# sft_counts.json) says the number is unknown; with --truncation_strategy right they are truncated.
awk -v l="$LONG" -v s="$SHORT" 'BEGIN { for (i = 1; i <= 10; i++) print (i % 3 ? s : l) }' > "$TMP/mix.jsonl"
NL=$(grep -c twenty "$TMP/mix.jsonl")
NS=$(($(wc -l < "$TMP/mix.jsonl") - NL))
TD="--model $M --template chatml --max_length 40 --max_steps 1 --per_device_train_batch_size 1 --dataset $TMP/mix.jsonl"
mkdir -p "$TMP/mix"
run data --sft --input "$TMP/mix.jsonl" --tokenizer "$M" --template chatml --max_length 40 --out "$TMP/mix/sft"
expect_has "zinf data --sft counts them" "--max_length 40, --truncation_strategy delete: $NL samples longer, deleted"
for k in 1 2; do
    # shellcheck disable=SC2086 # $TD is words
    mpi 1 train $TD --dataset_cache "$TMP/mixc" --out "$TMP/m$k"
    expect_ok "train --dataset, deleted samples ($k)"
    expect_has "the count of deleted samples ($k)" "$NS SFT samples in 1 file, $NL longer than --max_length 40 left out, $NS rows"
done
expect_has "found the second time" "SFT shards found in"
rm "$TMP"/mixc/*/sft_counts.json
# shellcheck disable=SC2086
mpi 1 train $TD --dataset_cache "$TMP/mixc" --out "$TMP/m3"
expect_has "a cache without counts" "$NS SFT samples in 1 file, an unknown number longer than --max_length 40 left out (the cache was made by a zinf that did not keep the count: remove its directory to make it again and count them), $NS rows"
# shellcheck disable=SC2086
mpi 1 train $TD --truncation_strategy right --out "$TMP/m4"
expect_has "truncated samples" "$((NS + NL)) SFT samples in 1 file, 0 longer than --max_length 40 left out, $NL truncated to it"
# the validation set's own count, on the --dataset line (mix.jsonl as --val_dataset beside s.jsonl)
# shellcheck disable=SC2086
mpi 1 train $TD --val_dataset "$TMP/mix.jsonl" --out "$TMP/m5"
expect_has "the validation set's count" "; validation samples longer than --max_length 40: $NL left out"

# FILE#N: a file that has the whole name is read whole, '#' and all; else only decimal digits
# after the last '#' are a count (test_chat.sh has the refusals)
printf '%s\n%s\n%s\n' "$SHORT" "$SHORT" "$SHORT" > "$TMP/h#2"
cp "$TMP/h#2" "$TMP/h#x.jsonl"
mkdir "$TMP/hs"
for spec in "h#2:3" "h#2#2:2" "h#x.jsonl:3" "h#x.jsonl#5:5"; do
    run data --sft --input "$TMP/${spec%:*}" --tokenizer "$M" --template chatml --out "$TMP/hs/h"
    expect_has "--input ${spec%:*}" "train: ${spec##*:} samples"
done
# a huge N: one line naming the spec, before any list of N samples is made
mpi 1 train --model "$M" --template chatml --dataset "$TMP/s.jsonl#99999999999" --out "$TMP/n1"
expect_err "a huge N" "$TMP/s.jsonl#99999999999: 99999999999 samples of a dataset of 1: their lists alone take"
[ "$(count_lines "error")" = 1 ] && pass || fail "a huge N: $(count_lines "error") error lines"

# a refused --dataset leaves nothing it made: not OUT, its sft-cache, nor a --dataset_cache's
# directories; an OUT that was there stays as it was
# shellcheck disable=SC2086 # $TR is words
mpi 1 train $TR --dataset "$TMP/bad.jsonl" --out "$TMP/r1"
expect_err "a malformed dataset, default cache" "$TMP/bad.jsonl:2"
mkdir "$TMP/r2" && touch "$TMP/r2/keep"
# shellcheck disable=SC2086 # $TR is words
mpi 1 train $TR --dataset "$TMP/bad.jsonl" --out "$TMP/r2"
expect_err "a malformed dataset, OUT there" "$TMP/bad.jsonl:2"
# shellcheck disable=SC2086 # $TR is words
mpi 1 train $TR --dataset "$TMP/bad.jsonl" --dataset_cache "$TMP/r3/a/b" --out "$TMP/r4"
expect_err "a malformed dataset, a new --dataset_cache" "$TMP/bad.jsonl:2"
[ ! -e "$TMP/r1" ] && [ "$(ls -A "$TMP/r2")" = keep ] && [ ! -e "$TMP/r3" ] && [ ! -e "$TMP/r4" ] && pass ||
    fail "a refused run left: $(ls -RA "$TMP/r1" "$TMP/r2" "$TMP/r3" "$TMP/r4" 2>&1 | tr '\n' ' ')"

# a tokenizer with two different tokens at one id: one line naming the id and both, nothing left
mkdir "$TMP/dup"
cp "$M/config.json" "$TMP/dup/"
sed 's/{"id": 634, "content": "<|im_end|>"/{"id": 633, "content": "<|im_end|>"/' "$M/tokenizer.json" > "$TMP/dup/tokenizer.json"
mpi 1 train --model "$TMP/dup" --template chatml --max_length 128 --dataset "$TMP/s.jsonl" --out "$TMP/d1"
expect_err "one id, two tokens" "$TMP/dup/tokenizer.json: id 633 is given to two different tokens: added_tokens[0] \"<|im_start|>\" and added_tokens[1] \"<|im_end|>\""
[ "$(count_lines "error")" = 1 ] && [ ! -e "$TMP/d1" ] && pass || fail "one id, two tokens: $OUTPUT; $(ls -A "$TMP/d1" 2>&1)"
finish
