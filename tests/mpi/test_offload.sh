#!/bin/sh
# ZeRO-Offload and ZeRO-Infinity on the CPU backend: every placement of the optimizer states
# (device, host, NVMe) and of the stage-3 parameter shards gives the same losses and the same
# parameters, bit for bit, as the run without offload at the same world size (the host step
# runs the same AdamW arithmetic on every element); the bytes land where the config puts them;
# the NVMe swapper's failures end the job with one line naming the file, the offset and errno.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
D="$TMP/add_train_*.bin"

# NVMe directories: on a file system with O_DIRECT where one is found (the io_uring engine),
# otherwise through the page cache (the psync engine); both engines run below either way
NV=""
for base in ${ZINF_TEST_NVME:-} /var/tmp "${TMPDIR:-/tmp}"; do
    [ -d "$base" ] || continue
    d=$(mktemp -d "$base/zinf-offload.XXXXXX") || continue
    if dd if=/dev/zero of="$d/probe" bs=4096 count=1 oflag=direct 2>/dev/null; then NV=$d; rm -f "$d/probe"; break; fi
    rm -rf "$d"
done
ENGINE=io_uring
if [ -z "$NV" ]; then
    NV=$(mktemp -d "$TMP/nvme.XXXXXX"); ENGINE=psync
    echo "no directory with O_DIRECT found: NVMe placements use the psync engine only"
fi
trap 'rm -rf "$TMP" "$NV"' EXIT
mkdir -p "$NV/a" "$NV/b"
# io_uring may be disabled (kernel.io_uring_disabled, seccomp): then psync carries the NVMe runs
if [ "$ENGINE" = io_uring ]; then
    OUTPUT=$("$ZINF" io-bench --path "$NV/a" --size 8M --block-sizes 1M --queue-depths 1 --parallelism 1 2>&1)
    case "$OUTPUT" in *io_uring_queue_init*)
        ENGINE=psync; echo "io_uring is not usable here: NVMe placements use the psync engine only" ;; esac
fi

# orun NAME NP STAGE ZERO-EXTRA [flags]: 3 steps of a global batch of 12, AdamW with decay
orun() {
    local name=$1 np=$2 stage=$3 extra=$4; shift 4
    printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": %d, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "zero_optimization": {"stage": %d, "sub_group_size": 0 %s}}\n' $((12 / np)) "$stage" "$extra" > "$TMP/$name.json"
    # a flag is given once (zinf refuses a repeated one): the default engine unless ARGS choose one
    local eng="--swap_engine $ENGINE"
    case " $* " in *" --swap_engine "*) eng="" ;; esac
    # shellcheck disable=SC2086
    mpi "$np" train --model test-mini --data "$D" --max_length 32 --max_steps 3 --logging_steps 1 \
        --config "$TMP/$name.json" --out "$TMP/$name" --seed 5 $eng "$@"
    expect_ok "$name"
}
# same NAME REF: the losses and gradient norms of every step are the same strings, and so is the
# parameters' hash
same() {
    if [ "$(metric "$TMP/$1/metrics.jsonl" loss)" = "$(metric "$TMP/$2/metrics.jsonl" loss)" ] &&
       [ "$(metric "$TMP/$1/metrics.jsonl" grad_norm)" = "$(metric "$TMP/$2/metrics.jsonl" grad_norm)" ]; then pass
    else fail "$1: losses or norms differ from $2"; paste "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" | head -3 >&2; fi
    [ -n "$H" ] && [ "$H" = "$(cat "$TMP/$2.hash")" ] && pass || fail "$1: parameters hash '$H' != $2's $(cat "$TMP/$2.hash")"
}
mem() { grep '"mem_param"' "$TMP/$1/metrics.jsonl" | tail -1 > "$TMP/$1.mem"; metric "$TMP/$1.mem" "$2"; }

OPT_CPU=', "offload_optimizer": {"device": "cpu"}'
OPT_NVME=', "offload_optimizer": {"device": "nvme", "nvme_path": "'$NV/a'"}'
PAR_CPU=', "offload_param": {"device": "cpu"}'
PAR_NVME=', "offload_param": {"device": "nvme", "nvme_path": "'$NV/b'", "max_in_cpu": 0}'

for np in 1 2 3; do
    orun "ref3w$np" $np 3 ""
    hash_of > "$TMP/ref3w$np.hash"
    for opt in none cpu nvme; do
        for par in none cpu nvme; do
            [ $opt = none ] && [ $par = none ] && continue
            extra=""
            [ $opt = cpu ] && extra="$extra$OPT_CPU"
            [ $opt = nvme ] && extra="$extra$OPT_NVME"
            [ $par = cpu ] && extra="$extra$PAR_CPU"
            [ $par = nvme ] && extra="$extra$PAR_NVME"
            n="o${opt}p${par}w$np"
            orun "$n" $np 3 "$extra"
            H=$(hash_of); same "$n" "ref3w$np"
        done
    done
    # stages 1 and 2 take the optimizer on the CPU
    for st in 1 2; do
        orun "ref${st}w$np" $np $st ""
        hash_of > "$TMP/ref${st}w$np.hash"
        orun "c${st}w$np" $np $st "$OPT_CPU"
        H=$(hash_of); same "c${st}w$np" "ref${st}w$np"
    done
done

# --- without clipping and with no step that can be skipped, each unit's host update starts during
# --- the backward pass once its gradient is final (a thread): the same results, bit for bit, with
# --- gradient accumulation (micro-batch 2: 6, 3 and 2 micro-steps), in fp32 and in bf16 with
# --- check_grad_overflow false; with the overflow check (a step may be skipped) it waits
# ovrun NAME NP STAGE PRECISION-JSON ZERO-EXTRA
ovrun() {
    local name=$1 np=$2 stage=$3 prec=$4 extra=$5
    printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0, %s
 "wall_clock_breakdown": true, "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "zero_optimization": {"stage": %d, "sub_group_size": 0 %s}}\n' "$prec" "$stage" "$extra" > "$TMP/$name.json"
    mpi "$np" train --model test-mini --data "$D" --max_length 32 --max_steps 3 --logging_steps 1 \
        --config "$TMP/$name.json" --out "$TMP/$name" --seed 5
    expect_ok "$name"
    H=$(hash_of)
}
early() { printf '%s\n' "$OUTPUT" | sed -n 's/.*begun during the backward pass: \([0-9]* of [0-9]*\) units.*/\1/p' | sort -u | tr '\n' ' '; }
for np in 1 2 3; do
    for st in 2 3; do
        for prec in "" '"bf16": {"enabled": true, "check_grad_overflow": false},'; do
            n=ovref$st$np$(printf '%s' "$prec" | cksum | cut -c1-4)
            ovrun "$n" $np $st "$prec" ""
            printf '%s\n' "$H" > "$TMP/$n.hash"
            ovrun "${n}o" $np $st "$prec" "$OPT_CPU"
            same "${n}o" "$n"
            case "$OUTPUT" in *"runs during the backward pass"*) pass ;; *) fail "${n}o: the overlapped host step was not announced" ;; esac
            [ "$(early)" = "4 of 4 " ] && pass || fail "${n}o: units begun during the backward pass: '$(early)', want 4 of 4 on every step"
        done
    done
done
F32=ovref32$(printf '' | cksum | cut -c1-4)
sed 's/"gradient_clipping": 0,/"gradient_clipping": 0, "zinf_overlap_host_step": false,/' "$TMP/${F32}o.json" > "$TMP/ovoff.json"
mpi 2 train --model test-mini --data "$D" --max_length 32 --max_steps 3 --logging_steps 1 --config "$TMP/ovoff.json" --out "$TMP/ovoff" --seed 5
expect_ok "zinf_overlap_host_step false"
H=$(hash_of); same ovoff "$F32"
[ -z "$(early)" ] && pass || fail "zinf_overlap_host_step false: units still begun early: $(early)"
for prec in '"bf16": {"enabled": true},' '"fp16": {"enabled": true},'; do
    ovrun "ovskip$(printf '%s' "$prec" | cut -c2-5)" 2 3 "$prec" "$OPT_CPU"
    [ -z "$(early)" ] && pass || fail "$prec: a step that may be skipped began its update early: $(early)"
done
sed 's/"gradient_clipping": 0,/"gradient_clipping": 1.0,/' "$TMP/${F32}o.json" > "$TMP/ovclip.json"
mpi 2 train --model test-mini --data "$D" --max_length 32 --max_steps 3 --logging_steps 1 --config "$TMP/ovclip.json" --out "$TMP/ovclip" --seed 5
expect_ok "clipping: no overlap"
[ -z "$(early)" ] && pass || fail "with clipping, updates began before the norm was known: $(early)"

# --- stage 3: the host update runs on into the next step's passes, each of which waits only for
# --- the units it uses; the parameters are those without offload, bit for bit, with clipping and
# --- without, with gradient accumulation; zinf_overlap_host_step false finishes it in its step;
# --- stage3_max_reuse_distance 0 gathers every unit again for the backward, so at 2 ranks the
# --- gathers ahead must pair up in the same order on both whatever each rank's update thread does
into() { printf '%s\n' "$OUTPUT" | grep -c "the last step's update, run on into this step's passes, which waited"; }
for np in 1 2; do
    for clip in 1.0 0; do
        for ov in "" ', "zinf_overlap_host_step": false'; do
            for off in "" "$OPT_CPU"; do
                n=inx$np${clip%.*}$(printf '%s%s' "$ov" "$off" | cksum | cut -c1-6)
                printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": %d, "gradient_clipping": %s,
 "wall_clock_breakdown": true, "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "bf16": {"enabled": true, "check_grad_overflow": false},
 "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0 %s} %s}\n' \
                    $((6 / np)) "$clip" "$off" "$ov" > "$TMP/$n.json"
                mpi $np train --model test-mini --data "$D" --max_length 32 --max_steps 4 --logging_steps 1 \
                    --config "$TMP/$n.json" --out "$TMP/$n" --seed 5
                expect_ok "$n"
                H=$(hash_of)
                if [ -z "$off" ]; then ref=$n; printf '%s\n' "$H" > "$TMP/$ref.hash"; continue; fi
                same "$n" "$ref"
                # steps 2-4 each join the update of the step before (step 1 has none to join)
                if [ -z "$ov" ]; then want=3; else want=0; fi
                [ "$(into)" = "$want" ] && pass ||
                    fail "$n: $(into) steps joined an update run on into them, want $want"
                # the CPU backend holds one context: micro-batches 0 and 1 run their forwards together
                case "$OUTPUT" in *"the forwards of 2 micro-batches of each step run together"*) got=1 ;; *) got=0 ;; esac
                [ "$got" = $((want > 0)) ] && pass || fail "$n: forwards together announced: $got, want $((want > 0))"
            done
        done
    done
done

# --- with gradient accumulation and an evaluation between steps the results are still those
# --- without offload
run data --random 3712 --vocab 256 --seed 9 --out "$TMP/val"
for off in "" "$OPT_CPU" "$OPT_NVME$PAR_NVME"; do
    n=acc$(printf '%s' "$off" | cksum | cut -c1-6)
    printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 3, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3 %s}}\n' "$off" > "$TMP/$n.json"
    mpi 2 train --model test-mini --data "$D" --val "$TMP/val_train_*.bin" --eval_steps 1 --max_length 32 --max_steps 3 \
        --logging_steps 1 --config "$TMP/$n.json" --out "$TMP/$n" --seed 5 --swap_engine "$ENGINE"
    expect_ok "accumulation and evaluation ($n)"
    H=$(hash_of)
    [ -z "$off" ] && { printf '%s\n' "$H" > "$TMP/accref.hash"; cp -r "$TMP/$n" "$TMP/accref"; continue; }
    same "$n" accref
    v=$(metric "$TMP/$n/metrics.jsonl" val_loss); [ -n "$v" ] && [ "$v" = "$(metric "$TMP/accref/metrics.jsonl" val_loss)" ] && pass || fail "$n: validation losses differ"
done

# --- bytes by place: the optimizer's 12 bytes per shard element leave the device --------------
# (fp32 compute: the parameters are the master weights where both share a place)
P3=$(mem ref3w2 mem_param_shard)
A3=$(mem ref3w2 mem_adam)
[ "$(mem onvmepnonew2 mem_states_nvme)" -eq $((A3 + P3)) ] && pass || fail "optimizer on NVMe: $(mem onvmepnonew2 mem_states_nvme) NVMe bytes, want Adam $A3 + master $P3"
[ "$(mem onvmepnonew2 mem_states_device)" -eq $(( $(mem ref3w2 mem_states_device) - A3 )) ] && pass || fail "optimizer on NVMe: the device still holds Adam states"
[ "$(mem ocpupcpuw2 mem_states_host)" -eq $((A3 + P3)) ] && pass || fail "both on the host: $(mem ocpupcpuw2 mem_states_host) host bytes, want $((A3 + P3)) (one fp32 shard serves as parameters and master)"
[ "$(mem onvmepnvmew2 mem_states_nvme)" -eq $((A3 + P3)) ] && pass || fail "both on NVMe: $(mem onvmepnvmew2 mem_states_nvme) NVMe bytes, want $((A3 + P3))"
[ "$(mem onvmepnvmew2 mem_states_host)" -eq 0 ] && pass || fail "both on NVMe: host bytes $(mem onvmepnvmew2 mem_states_host)"

# --- the run's bytes by place are zinf estimate's, unit by unit (one placement rule for both) ---
for n in ref3w2 ocpupnonew2 onvmepnonew2 ononepcpuw2 onvmepnvmew2 ocpupnvmew2 c1w2 c2w2; do
    run estimate --model test-mini --precision fp32 --nodes 1 --gpus-per-node 2 --config "$TMP/$n.json" --print-bytes
    expect_ok "$n: estimate"
    for at in device host nvme; do
        want=$(printf '%s\n' "$OUTPUT" | tr ' ' '\n' | sed -n "s/^$at=\([0-9]*\)\$/\1/p")
        got=$(mem "$n" "mem_states_$at")
        [ -n "$want" ] && [ "$got" = "$want" ] && pass || fail "$n: $at holds $got bytes of model states, the estimate says '$want'"
    done
done

# --- the swapper's settings: the other engine, two striped paths, pipelined reads and writes,
# --- buffer_count 0, tiles of one tensor's share, max_in_cpu keeping some shards in host memory
other=psync; [ "$ENGINE" = psync ] && other=io_uring
for v in \
    "eng2|--swap_engine $other|$OPT_NVME$PAR_NVME" \
    "stripe||, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": [\"$NV/a\", \"$NV/b\"], \"pipeline_read\": true, \"pipeline_write\": true}" \
    "pipe||, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$NV/a\", \"pipeline_read\": true, \"buffer_count\": 0}$PAR_CPU" \
    "pipew||, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$NV/a\", \"pipeline_write\": true}" \
    "incpu||$OPT_CPU, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$NV/b\", \"max_in_cpu\": 30000}" \
    "ratio||, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.4}" \
    "aio||$OPT_NVME, \"aio\": {\"block_size\": 4096, \"queue_depth\": 1, \"intra_op_parallelism\": 3, \"single_submit\": true, \"overlap_events\": false}"; do
    name=${v%%|*}; rest=${v#*|}; flags=${rest%%|*}; extra=${rest#*|}
    if [ "$name" = eng2 ] && [ "$other" = io_uring ]; then continue; fi  # no O_DIRECT directory here
    # shellcheck disable=SC2086
    orun "$name" 2 3 "$extra" $flags
    H=$(hash_of); same "$name" ref3w2
done
# zinf_optimizer_host_bytes: NVMe offload keeps units' optimizer states in host memory up to the
# budget, each whole unit in order that still fits (the embedding's 10240 elements per rank =
# 122880 bytes, then no block of 24992, then the final LayerNorm's 64 = 768 bytes), the rest on
# NVMe; the estimate places them by the same rule
printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 6, "zinf_optimizer_host_bytes": 200000,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3, "sub_group_size": 0, "offload_optimizer": {"device": "nvme", "nvme_path": "%s"}}}\n' "$NV/a" > "$TMP/budget.json"
mpi 2 train --model test-mini --data "$D" --max_length 32 --max_steps 3 --logging_steps 1 --config "$TMP/budget.json" \
    --out "$TMP/budget" --seed 5 --swap_engine "$ENGINE"
expect_ok "host budget"
H=$(hash_of); same budget ref3w2
[ "$(mem budget mem_states_host)" -eq 123648 ] && pass || fail "host budget: $(mem budget mem_states_host) host bytes, want 123648 (the embedding and the final LayerNorm)"
[ "$(mem budget mem_states_nvme)" -eq $((A3 + P3 - 123648)) ] && pass || fail "host budget: $(mem budget mem_states_nvme) NVMe bytes"
run estimate --model test-mini --precision fp32 --nodes 1 --gpus-per-node 2 --config "$TMP/budget.json" --print-bytes
case "$OUTPUT" in *"host=123648 nvme=$((A3 + P3 - 123648))"*) pass ;; *) fail "host budget estimate: $OUTPUT" ;; esac
# max_in_cpu 30000: the shards up to 30000 elements stay in host memory, the rest go to NVMe
[ "$(mem incpu mem_states_nvme)" -gt 0 ] && [ "$(mem incpu mem_states_host)" -gt 0 ] && pass || fail "max_in_cpu: host $(mem incpu mem_states_host) NVMe $(mem incpu mem_states_nvme)"
# ratio 0.4: part of the optimizer stays on the device
[ "$(mem ratio mem_states_host)" -gt 0 ] && [ "$(mem ratio mem_states_host)" -lt $((A3 + P3)) ] && pass || fail "ratio 0.4: host bytes $(mem ratio mem_states_host) of $((A3 + P3))"
# the swap pool's pinned bytes: 3 states x (1 + pipeline_read + pipeline_write) tiles of fp32
orun pool 1 3 ", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$NV/a\", \"pipeline_read\": true, \"pipeline_write\": true}"
pinned=$(printf '%s\n' "$OUTPUT" | sed -n 's/.*NVMe swap pools hold \([0-9.]*\) MiB.*/\1/p' | head -1)
# test-mini's largest tensor (16384 elements) is the tile on one rank: 9 x 16384 x 4 bytes
[ "$pinned" = "0.56" ] && pass || fail "pinned pool: '$pinned' MiB, want 0.56 (9 x 16384 x 4 bytes)"
[ "$(mem pool mem_staging_host)" -eq $((9 * 16384 * 4)) ] && pass || fail "staging bytes $(mem pool mem_staging_host)"
[ -z "$(find "$NV/a" "$NV/b" -type f)" ] && pass || fail "swap files left behind: $(find "$NV/a" "$NV/b" -type f)"

# --- failures: one line that names the cause, the job ends --------------------------------------
fails() { # fails WHAT ENV EXTRA TEXT...
    local what=$1 env=$2 extra=$3; shift 3
    printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 6, "zero_optimization": {"stage": 3 %s}}\n' "$extra" > "$TMP/f.json"
    OUTPUT=$(env $env timeout 60 "$MPIRUN" --oversubscribe -np 2 "$ZINF" train --model test-mini --data "$D" \
        --max_length 32 --max_steps 2 --config "$TMP/f.json" --out "$TMP/f" --swap_engine "$ENGINE" 2>&1); RC=$?
    expect_err "$what" "$@"
    [ "$RC" -ne 124 ] && pass || fail "$what: the job hung"
}
fails "missing nvme_path" "" ', "offload_optimizer": {"device": "nvme", "nvme_path": "'$NV/none'"}' \
    "offload_optimizer.nvme_path" "$NV/none" "No such file or directory"
touch "$NV/file"
fails "nvme_path is a file" "" ', "offload_param": {"device": "nvme", "nvme_path": "'$NV/file/sub'", "max_in_cpu": 0}' \
    "offload_param.nvme_path" "Not a directory"
fails "too little space" "ZINF_SWAP_FAULT=enospc" "$OPT_NVME" "too little space" "$NV/a"
# the two ranks of this node share the file system: 1228800 bytes free hold one rank's swap file
# (1 MiB, one aio block), not both; each rank's own check would pass, so the node's ranks add up
# their files before any makes one
fails "too little space for the node's ranks" "ZINF_SWAP_FAULT=free@1228800" "$OPT_NVME" \
    "zinf: error: rank 0: zero_optimization.offload_optimizer.nvme_path: too little space: need 2097152 bytes, $NV/a has 1228800 free (the swap files of the 2 ranks of this node on that file system; this rank's take 1048576)"
[ "$(count_lines 'zinf: error')" -eq 1 ] && pass || fail "too little space for the node's ranks: not one error line"
if [ "$ENGINE" = io_uring ]; then
    fails "no O_DIRECT" "ZINF_SWAP_FAULT=nodirect" "$OPT_NVME" "does not support O_DIRECT" "--swap_engine psync"
fi
fails "an I/O error" "ZINF_SWAP_FAULT=eio@5" "$OPT_NVME" "swap read of $NV/a/zinf-swap-optim-r" "at offset" "Input/output error"
fails "a short read" "ZINF_SWAP_FAULT=eof@7" "$OPT_NVME" "short swap read of $NV/a/zinf-swap-optim-r" "no progress"
# a rank killed mid-run (SIGKILL: no cleanup runs) leaves no swap file either: they are unlinked
# as soon as they are made
OUTPUT=$(ZINF_FAULT="rank=1,step=2,kind=kill" timeout 120 "$MPIRUN" --oversubscribe -np 2 "$ZINF" train --model test-mini \
    --data "$D" --max_length 32 --max_steps 3 --config "$TMP/onvmepnvmew2.json" --out "$TMP/k" --swap_engine "$ENGINE" \
    --comm_timeout 20 2>&1); RC=$?
[ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && pass || fail "a killed rank: exit $RC (124 = hung)"
[ -z "$(find "$NV/a" "$NV/b" -type f)" ] && pass || fail "swap files left behind after failures: $(find "$NV/a" "$NV/b" -type f)"
# a rank that fails or hangs at the start of a step while its last step's host update still runs
# on into it (stage 3, optimizer in host memory): the job ends with the failing rank's line, or
# with the other rank's timeout naming what it waited for, not with a hang
OUTPUT=$(ZINF_FAULT="rank=1,step=3,kind=fail" timeout 120 "$MPIRUN" --oversubscribe -np 2 "$ZINF" train --model test-mini \
    --data "$D" --max_length 32 --max_steps 4 --config "$TMP/ocpupnonew2.json" --out "$TMP/uf" --comm_timeout 5 2>&1); RC=$?
expect_err "a rank that fails with its update under way" "rank 1: injected failure at step 3"
OUTPUT=$(ZINF_FAULT="rank=0,step=3,kind=hang" timeout 120 "$MPIRUN" --oversubscribe -np 2 "$ZINF" train --model test-mini \
    --data "$D" --max_length 32 --max_steps 4 --config "$TMP/ocpupnonew2.json" --out "$TMP/uh" --comm_timeout 5 2>&1); RC=$?
expect_err "a rank that hangs with its update under way" "rank 1: timed out after" "waiting for"
# a short transfer that goes on is continued: the run is the reference
OUTPUT=$(ZINF_SWAP_FAULT=short@3 "$MPIRUN" --oversubscribe -np 2 "$ZINF" train --model test-mini --data "$D" --max_length 32 \
    --max_steps 3 --logging_steps 1 --config "$TMP/onvmepnonew2.json" --out "$TMP/short" --seed 5 --swap_engine "$ENGINE" 2>&1); RC=$?
expect_ok "short transfer continued"
H=$(hash_of); same short ref3w2
# wall_clock_breakdown splits the host optimizer step: AdamW, waits for copies and for NVMe
sed 's/"gradient_clipping"/"wall_clock_breakdown": true, "gradient_clipping"/' "$TMP/onvmepnonew2.json" > "$TMP/wcb.json"
# and names the host AdamW's OpenMP team: on the CPU backend the rank's whole team
OMP_NUM_THREADS=2 mpi 2 train --model test-mini --data "$D" --max_length 32 --max_steps 2 --logging_steps 1 \
    --config "$TMP/wcb.json" --out "$TMP/wcb" --swap_engine "$ENGINE"
expect_has "host step breakdown" "host optimizer (ms): AdamW" "waiting for NVMe" "the rest" "| 2 threads"
mpi 1 train --model test-mini --data "$D" --max_steps 1 --out "$TMP/x" --swap_engine spdk
expect_err "bad --swap_engine" "--swap_engine spdk" "io_uring or psync"

finish
