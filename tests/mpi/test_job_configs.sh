#!/bin/sh
# The ready-made files of jobs/: every DeepSpeed config in jobs/configs/ is accepted by
# `zinf config show` without a warning, resolves to the stage, offload devices, NVMe path and
# precision the file names, and trains 6 steps of test-mini on 2 ranks following an independent
# reference: a config written out here with the numbers that the flags give the "auto" values.
# Stage 0 must match it bit for bit, stages 1-3 within the reductions' summation order, and each
# offload variant bit for bit its stage without offload. The job scripts pass `sh -n`/`bash -n`,
# and shellcheck where it is installed; jobs/mpirun/train.sh runs the localhost hostfile example.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
SRC=$(cd "${top_srcdir:-.}" && pwd)
CONFIGS=$SRC/jobs/configs

# ---- the scripts: syntax under the shell that runs them, then shellcheck --------------------
for f in "$SRC"/jobs/*.sh "$SRC"/jobs/*/*.sh "$SRC"/jobs/*/*.sbatch; do
    case $(head -1 "$f") in
    '#!/bin/bash'* | '# shellcheck shell=bash'*) sh_=bash ;;
    *) sh_=sh ;;
    esac
    if $sh_ -n "$f" 2> "$TMP/syntax"; then pass; else fail "$sh_ -n ${f#"$SRC"/}: $(cat "$TMP/syntax")"; fi
done
if command -v shellcheck > /dev/null; then
    # the launch and job scripts are clean down to warnings; the benchmarks split words on purpose,
    # so they are held to errors only. -x follows requeue.sh from the source tree's top.
    if OUTPUT=$(cd "$SRC" && shellcheck -x -S warning jobs/slurm/*.sbatch jobs/slurm/requeue.sh jobs/mpirun/*.sh \
        jobs/install-deps.sh 2>&1); then pass; else fail "shellcheck (warnings) on the job scripts:"; printf '%s\n' "$OUTPUT" >&2; fi
    if OUTPUT=$(cd "$SRC" && shellcheck -S error jobs/bench/*.sh 2>&1); then pass; else
        fail "shellcheck (errors) on jobs/bench:"; printf '%s\n' "$OUTPUT" >&2; fi
else
    echo "$(basename "$0"): shellcheck is not installed: only the syntax of the scripts was checked"
fi

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
D="$TMP/add_train_*.bin"
mkdir -p "$TMP/nvme"

# the Llama benchmarks' FLOPs a token (jobs/bench/llama_flops.sh, from `zinf estimate`'s Psi and the
# shape a run logs) against the closed form for test-llama (vocabulary 256, hidden 64, MLP 128,
# 2 blocks of 4 query heads and 2 key/value heads of 16, untied): 6 (Psi - V C) + 12 L NH hs T,
# counting the query heads (the log line names kv_heads= after heads=)
mpi 1 train --model test-llama --data "$D" --max_length 32 --max_steps 1 --out "$TMP/fl"
expect_ok "test-llama, one step"
printf '%s\n' "$OUTPUT" > "$TMP/fl.log"
. "$SRC/jobs/bench/llama_flops.sh"
got=$(llama_flops "$ZINF" test-llama "$TMP/fl.log" 32)
want=$(awk 'BEGIN { V = 256; C = 64; F = 128; L = 2; NH = 4; KV = 2; hs = 16; T = 32
    psi = 2 * V * C + L * (2 * C + C * (NH + 2 * KV) * hs + NH * hs * C + 3 * C * F) + C
    printf "%.6g", 6 * (psi - V * C) + 12 * L * NH * hs * T }')
[ "$got" = "$want" ] && pass || fail "llama_flops: $got FLOPs a token for test-llama at T 32, the closed form $want"

# the hostfile example for one machine starts as many ranks as it has slots
OUTPUT=$(ZINF="$ZINF" sh "$SRC/jobs/mpirun/train.sh" "$SRC/jobs/mpirun/hostfile.localhost" --model test-mini --data "$D" \
    --max_length 32 --max_steps 1 --out "$TMP/hf" 2>&1); RC=$?
expect_ok "jobs/mpirun/train.sh with hostfile.localhost"
expect_has "jobs/mpirun/train.sh with hostfile.localhost" "on $(awk '!/^#/ && NF { sub(/slots=/, "", $2); s += $2 } END { print s }' \
    "$SRC/jobs/mpirun/hostfile.localhost") ranks"

# jval FILE BLOCK KEY: the value of KEY inside the object BLOCK of a JSON file written with each
# object's keys on lines of their own or one line ("-": anywhere), quotes removed; nothing when
# BLOCK or KEY is not there
jval() {
    awk -v b="\"$2\":" -v k="\"$3\":" '
        b == "\"-\":" || index($0, b) { on = 1 }
        on && match($0, k "[[:space:]]*[^,}[:space:]]+") {
            v = substr($0, RSTART + length(k), RLENGTH - length(k)); gsub(/[" \t]/, "", v); print v; exit }
        on && b != "\"-\":" { d += gsub(/\{/, "{") - gsub(/\}/, "}"); if (d <= 0) exit }' "$1"
}
# place_of STATE: where the training log's memory line puts STATE (device, host or NVMe)
place_of() {
    printf '%s\n' "$OUTPUT" | grep -m1 '^memory on rank 0' | tr '|' '\n' | grep -F "$1" |
        sed -n 's/.*\(device\|host\|NVMe\):.*/\1/p' | head -1
}
losses() { metric "$TMP/o.$1/metrics.jsonl" loss | tr -d ' ' | grep -v '^$'; }
phash() { sed -n 's/.*"params_hash": *"\([0-9a-f]*\)".*/\1/p' "$TMP/o.$1/metrics.jsonl"; }
# hf_flags CONFIG: the flags of a Hugging Face run that fill the config's "auto" values (a flag
# whose key has a number in the file would have to agree with it)
hf_flags() {
    [ "$(jval "$1" - train_micro_batch_size_per_gpu)" != auto ] || printf ' %s' --per_device_train_batch_size 4
    [ "$(jval "$1" - lr)" != auto ] || printf ' %s' --learning_rate 1e-3
    [ "$(jval "$1" - warmup_num_steps)" != auto ] || printf ' %s' --warmup_steps 2
}
train() { # train NAME CONFIG STEPS [flags]: STEPS steps on 2 ranks
    local n=$1 c=$2 steps=$3
    shift 3
    # psync: the swap files of the NVMe config live in $TMP, which may refuse O_DIRECT
    mpi 2 train --config "$c" --model test-mini --data "$D" --max_length 32 --max_steps "$steps" --logging_steps 1 \
        --seed 3 --out "$TMP/o.$n" --swap_engine psync "$@"
}

# ---- the reference: what those flags make of the "auto" values, written out by hand ----------
printf '{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0}},
 "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3,
   "warmup_num_steps": 2, "total_num_steps": 6, "warmup_type": "linear"}},
 "zero_optimization": {"stage": 0}}\n' > "$TMP/ref.json"
train ref "$TMP/ref.json" 6
expect_ok "reference run"
[ "$(losses ref | wc -l)" -eq 6 ] && pass || fail "the reference run logged $(losses ref | wc -l) losses, not 6"

n_configs=0
for f in "$CONFIGS"/*.json; do
    n=$(basename "$f" .json)
    n_configs=$((n_configs + 1))
    cfg=$f
    # an NVMe config names a path on the machine it was written for: point it into $TMP
    if grep -q '"nvme_path"' "$f"; then
        sed "s|\"nvme_path\": \"[^\"]*\"|\"nvme_path\": \"$TMP/nvme\"|" "$f" > "$TMP/$n.json"
        cfg=$TMP/$n.json
    fi

    # config show: no warning (as on the GPUs it is written for), and the file's own choices
    run config show "$cfg" --model test-mini --device cuda
    expect_ok "$n: config show"
    if printf '%s\n' "$OUTPUT" | grep -qi 'warning:'; then fail "$n: config show warns: $(printf '%s\n' "$OUTPUT" | grep -i 'warning:')"; else pass; fi
    printf '%s\n' "$OUTPUT" | grep -v '^zinf: ' > "$TMP/$n.show"
    stage=$(jval "$cfg" - stage)
    # what the file says, or DeepSpeed's default where it says nothing
    od=$(jval "$cfg" offload_optimizer device) pd=$(jval "$cfg" offload_param device)
    op=$(jval "$cfg" offload_optimizer nvme_path) pp=$(jval "$cfg" offload_param nvme_path)
    bf=$(jval "$cfg" bf16 enabled)
    for want in "zero_optimization stage ${stage:-0}" "offload_optimizer device ${od:-none}" \
        "offload_param device ${pd:-none}" "offload_optimizer nvme_path ${op:-null}" \
        "offload_param nvme_path ${pp:-null}" "bf16 enabled ${bf:-false}"; do
        # shellcheck disable=SC2086 # three words
        set -- $want
        got=$(jval "$TMP/$n.show" "$1" "$2")
        [ "$got" = "$3" ] && pass || fail "$n: config show resolves $1.$2 to '$got', the file says '$3'"
    done

    # a short training run: 6 steps, or 10 past a warmup of its own
    w=$(jval "$cfg" - warmup_num_steps)
    case $w in '' | auto | *[!0-9]*) steps=6 ;; *) steps=$((w > 6 ? w + 10 : 6)) ;; esac
    # shellcheck disable=SC2046 # flags are words
    train "$n" "$cfg" "$steps" $(hf_flags "$cfg")
    expect_ok "$n: training on 2 ranks"
    expect_has "$n: training on 2 ranks" "ZeRO stage ${stage:-0}" "parameters agree bit for bit across 2 ranks"
    case $od in
    cpu) want=host ;;
    nvme) want=NVMe ;;
    *) want=device ;;
    esac
    [ "$(place_of 'Adam m+v')" = "$want" ] && pass || fail "$n: Adam m+v in $(place_of 'Adam m+v') memory, the file asks for $want"
    [ "$pd" != cpu ] || { [ "$(place_of 'parameter shard')" = host ] && pass ||
        fail "$n: parameter shards in $(place_of 'parameter shard') memory, the file asks for host"; }

    # against the reference (the demo config has numbers of its own: it only has to train)
    case $n in zero*) ;; *) continue ;; esac
    got=$(losses "$n" | tr '\n' ' ') want=$(losses ref | tr '\n' ' ')
    if [ "${stage:-0}" = 0 ]; then
        [ "$got" = "$want" ] && [ "$(phash "$n")" = "$(phash ref)" ] && pass ||
            fail "$n: losses $got and parameters differ from the reference's ($want)"
    else
        ok=1
        for i in 1 2 3 4 5 6; do
            close "$(echo "$got" | cut -d' ' -f$i)" "$(echo "$want" | cut -d' ' -f$i)" 1e-5 || ok=0
        done
        [ $ok = 1 ] && pass || fail "$n: losses $got, the reference's $want (1e-5)"
    fi
done
# every stage and offload choice has its file, resolving to what its name says, and an offload
# variant computes the same bits as its stage without offload
for c in "zero0 0 none none" "zero1 1 none none" "zero2 2 none none" "zero3 3 none none" \
    "zero2-offload-optimizer 2 cpu none" "zero3-offload-optimizer 3 cpu none" \
    "zero3-offload-optimizer-params 3 cpu cpu" "zero3-nvme 3 nvme nvme"; do
    # shellcheck disable=SC2086 # four words
    set -- $c
    n=$1
    [ -f "$CONFIGS/$n.json" ] || { fail "jobs/configs/$n.json is missing"; continue; }
    got="$(jval "$TMP/$n.show" zero_optimization stage) $(jval "$TMP/$n.show" offload_optimizer device) $(jval "$TMP/$n.show" offload_param device)"
    [ "$got" = "$2 $3 $4" ] && pass || fail "$n.json resolves to stage, optimizer and parameter devices '$got', not '$2 $3 $4'"
    base=${n%%-*}
    [ "$base" != "$n" ] || continue
    [ -n "$(phash "$n")" ] && [ "$(phash "$n")" = "$(phash "$base")" ] && pass ||
        fail "$n: parameters $(phash "$n"), $base's $(phash "$base")"
done
# every jobs/configs file that the job scripts, the README, docs/ and the man pages name exists
for ref in $(cd "$SRC" && grep -rhoE "jobs/configs/[A-Za-z0-9_./-]+\.json" jobs README.md docs man DESIGN.md run-demo.sh | sort -u); do
    [ -f "$SRC/$ref" ] && pass || fail "$ref is named in the sources but does not exist"
done
echo "$(basename "$0"): $n_configs configs in jobs/configs"
finish
