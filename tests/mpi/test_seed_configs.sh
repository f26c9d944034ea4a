#!/bin/sh
# Every DeepSpeed config from the project's source documents (tests/fixtures) is accepted at the
# world size its batch numbers imply, or with its "auto" values filled from the flags.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

show() { # show NP FILE flags... ; check the resolved batch numbers
    local np=$1 f=$2; shift 2
    mpi "$np" config show "$FIXTURES/$f" --model test-mini "$@"
    expect_ok "$f at world $np"
}
show 4 seed-zero3-cpu-offload-fp16.json
expect_has "offload-fp16" '"train_batch_size": 32' '"stage": 3' '"initial_scale_power": 16'
show 1 seed-zero3-commented.jsonc
expect_has "commented (32 = 4 x 8 x 1)" '"train_batch_size": 32' '"gradient_accumulation_steps": 8'
show 4 seed-zero3-cpu-optimizer-64.json
expect_has "64 at world 4" '"train_micro_batch_size_per_gpu": 4' '"reduce_bucket_size": 500000000'
show 2 seed-zero3-auto-template.json --per_device_train_batch_size 1 --gradient_accumulation_steps 2
expect_has "auto template at world 2" '"train_batch_size": 4'
show 2 seed-zero3-offload-both.json --per_device_train_batch_size 2
expect_has "offload-both" '"train_batch_size": 4' '"stage3_param_persistence_threshold": 1000000'
# and the wrong world size is refused with the numbers
mpi 3 config show "$FIXTURES/seed-zero3-cpu-offload-fp16.json" --model test-mini
expect_err "offload-fp16 at world 3" "32" "world size 3"
# ... and each trains there: two steps of the test model on the CPU backend, the first loss at the
# closed form ln(256) of an untrained model, parameters equal across ranks afterwards
make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
trains() { # trains NP FILE flags...
    local np=$1 f=$2; shift 2
    mpi "$np" train --config "$FIXTURES/$f" --model test-mini --data "$TMP/add_train_*.bin" --max_length 32 \
        --max_steps 2 --logging_steps 1 --out "$TMP/$f.out" "$@"
    expect_ok "$f trains at world $np"
    expect_has "$f trains at world $np" "parameters agree bit for bit across $np rank"
    L1=$(metric "$TMP/$f.out/metrics.jsonl" loss | head -1)
    close "$L1" 5.5452 0.01 && pass || fail "$f: first loss $L1 is not ln(256) within 1%"
}
trains 4 seed-zero3-cpu-offload-fp16.json
expect_has "fp16 on the CPU backend is said" "fp16.enabled: the CPU backend computes in fp32"
trains 1 seed-zero3-commented.jsonc
trains 2 seed-zero3-cpu-optimizer-64.json
trains 2 seed-zero3-auto-template.json --per_device_train_batch_size 1 --gradient_accumulation_steps 2
trains 2 seed-zero3-offload-both.json --per_device_train_batch_size 2
finish
