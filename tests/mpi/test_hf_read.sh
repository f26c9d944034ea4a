#!/bin/sh
# --init_from's reads (io/safetensors' reader on io/swap: io_uring, O_DIRECT, aligned supersets of
# unaligned tensors, a bounded buffer) on the file systems a model may lie on: transformers' tiny
# models (tests/golden/llama) copied under the build directory (a disk file system: O_DIRECT) and
# into /dev/shm (tmpfs), and read as on a file system that refuses O_DIRECT (ZINF_SWAP_FAULT=
# nodirect: buffered pread). Each time the imported parameters give transformers' logits, loss and
# gradients (tests/unit/test_llama_golden against the golden numbers), and `zinf train --init_from`
# says which way it read and trains to the same parameters bit for bit.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
G=${GOLDEN:-${top_srcdir:-.}/tests/golden}
BIN=${top_builddir:-.}/tests/unit
[ -x "$BIN/test_llama_golden" ] || { echo "test_hf_read.sh: $BIN/test_llama_golden is not built"; exit 77; }
make_text "$TMP/add.txt" 600
run data --input "$TMP/add.txt" --out "$TMP/hv"
expect_ok "zinf data"

HERE=$(mktemp -d "${top_builddir:-.}/zinf-test-hfread.XXXXXX")
SHM=
[ -d /dev/shm ] && [ -w /dev/shm ] && SHM=$(mktemp -d /dev/shm/zinf-test-hfread.XXXXXX)
trap 'rm -rf "$TMP" "$HERE" ${SHM:+"$SHM"}' EXIT
H0=
for where in "$HERE" "$SHM"; do
    [ -n "$where" ] || { echo "test_hf_read.sh: /dev/shm cannot be written: the tmpfs case is skipped"; continue; }
    mkdir -p "$where/llama" && cp -r "$G"/llama/* "$where/llama/"
    # what this file system does with O_DIRECT, asked of dd rather than of zinf
    if dd if="$where/llama/qwen3/model-00001-of-00007.safetensors" of=/dev/null bs=4096 count=1 iflag=direct \
        2> /dev/null; then way=O_DIRECT; else
        way="buffered: the file system refuses O_DIRECT"
        echo "test_hf_read.sh: $where refuses O_DIRECT: only the buffered reads are checked there"
    fi
    for fault in "" nodirect; do
        [ -n "$fault" ] && want="buffered: the file system refuses O_DIRECT" || want=$way
        what="$where${fault:+ (ZINF_SWAP_FAULT=$fault)}"
        OUTPUT=$(ZINF_SWAP_FAULT=$fault GOLDEN=$where "$BIN/test_llama_golden" 2>&1); RC=$?
        expect_ok "$what: the imported models against transformers"
        expect_has "$what: the golden checks" "test_llama_golden: " " 0 failed"
        OUTPUT=$(ZINF_SWAP_FAULT=$fault "$MPIRUN" --oversubscribe -np 2 "$ZINF" train --model "$where/llama/qwen3" \
            --init_from "$where/llama/qwen3" --data "$TMP/hv_train_*.bin" --max_length 16 \
            --per_device_train_batch_size 2 --max_steps 2 --save_steps 0 --out "$TMP/o.$fault" --seed 5 2>&1); RC=$?
        expect_ok "$what: train --init_from"
        expect_has "$what: the way it read" "initial weights from $where/llama/qwen3 (Hugging Face qwen3 safetensors; " \
            "GB/s, $want; " " s of it waiting for the reads)"
        h=$(hash_of)
        [ -z "$H0" ] && H0=$h
        [ -n "$h" ] && [ "$h" = "$H0" ] && pass || fail "$what: parameter hash '$h' after 2 steps, the first way's '$H0'"
    done
done
finish
