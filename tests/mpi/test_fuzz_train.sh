#!/bin/sh
# Accepted is not enough: a config the reader accepts must also train. fuzz_config writes a
# deterministic, diverse sample of accepted mutated configs (ZINF_FUZZ_EMIT_DIR, ZINF_FUZZ_EMIT_N:
# ZeRO stages 0-3, fp16/bf16, accumulation, schedulers, clipping, CPU offload, every zero size key
# at 0, 1, small and huge values) with the world size each was accepted at; each trains two steps
# of test-mini at that world size under `timeout`. Every run must either
#  - succeed: every logged loss finite, the first at the closed form ln(256) = 5.5452 of an
#    untrained byte-level model within 1% (as in test_seed_configs.sh), parameters equal bit for
#    bit across the ranks; or
#  - be refused with one "zinf: error:" line that is one of the refusals allowed below.
# A signal, an abort, heap corruption, a sanitizer report, a timeout, or a pathologically slow run
# (over ZINF_FUZZ_TRAIN_SLOW seconds, or a step over ZINF_FUZZ_TRAIN_SLOW_STEP_MS: a step of this
# 0.12M-parameter model takes 5-50 ms) fails; the config text and the tail of zinf's output are
# printed.
# Knobs: ZINF_FUZZ_TRAIN_N (configs, default 36), ZINF_FUZZ_TRAIN_TIMEOUT (seconds per run,
# default 60), ZINF_FUZZ_TRAIN_SLOW (default 20), ZINF_FUZZ_TRAIN_SLOW_STEP_MS (default 500),
# ZINF_FUZZ_TRAIN_VERBOSE=1 (a line per run), FUZZ_CONFIG (the fuzz_config binary).
. "${top_srcdir:-.}/tests/mpi/lib.sh"
: "${FUZZ_CONFIG:=${top_builddir:-.}/tests/fuzz/fuzz_config}"
N=${ZINF_FUZZ_TRAIN_N:-36}
LIMIT=${ZINF_FUZZ_TRAIN_TIMEOUT:-60}
SLOW=${ZINF_FUZZ_TRAIN_SLOW:-20}
SLOW_STEP=${ZINF_FUZZ_TRAIN_SLOW_STEP_MS:-500}
if [ ! -x "$FUZZ_CONFIG" ]; then echo "no $FUZZ_CONFIG: skipped"; exit 77; fi
if ! command -v timeout > /dev/null; then echo "no timeout(1): skipped"; exit 77; fi

# Refusals that are right for a config the reader accepts (matched against the error line).
allowed_refusal() {
    case "$1" in
    # an NVMe path the fuzzer made up, which does not exist on this machine
    "zinf: error: rank "*": zero_optimization.offload_"*".nvme_path: "*": cannot use: No such file or directory") return 0 ;;
    # AdamW with lr x weight_decay past 2 (weight_decay 1e308): the decay flips and grows the
    # weights, as in PyTorch; the stop names that cause
    "zinf: error: step "*": the gradient norm is not finite (loss "*"); AdamW's decay factor 1 - lr x weight_decay was "*": it flips the weights' sign and grows them"*) return 0 ;;
    esac
    return 1
}

now_ms() { date +%s%3N; }
T0=$(now_ms)
mkdir "$TMP/emit"
# no wall-clock cap: the sample is the same on a loaded machine
FUZZ_OUT=$(ZINF_FUZZ_SECONDS=300 ZINF_FUZZ_EMIT_DIR="$TMP/emit" ZINF_FUZZ_EMIT_N="$N" "$FUZZ_CONFIG" 2>&1); RC=$?
OUTPUT=$FUZZ_OUT
expect_ok "fuzz_config with ZINF_FUZZ_EMIT_DIR"
printf '%s\n' "$FUZZ_OUT" | grep -E '^fuzz_config: (emitted|seed)|not covered' | sed 's/^/  /'
INDEX="$TMP/emit/index.txt"
NE=$(wc -l < "$INDEX" 2>/dev/null || echo 0)
[ "$NE" -ge "$N" ] && pass || fail "fuzz_config emitted $NE configs, asked for $N"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"

TRAINED=0 REFUSED=0 BAD=0
CRASH_RE='exited on signal|Segmentation fault|Aborted|core dumped|free\(\): |corrupted|double free|malloc\(\): |runtime error:|AddressSanitizer|stack smashing'
# show WHY F W DESC: a failed run: the reason, the config and the tail of zinf's output
show() {
    fail "$2 at world $3: $1"
    {
        echo "  features: $4"
        echo "  config ($2):"
        sed 's/^/    /' "$TMP/emit/$2"; echo
        # the lines that say what went wrong, wherever they are, then the tail
        printf '%s\n' "$OUTPUT" | grep -E "$CRASH_RE|^zinf: error:" | head -5 | sed 's/^/  key line: /'
        echo "  zinf output (tail):"
        printf '%s\n' "$OUTPUT" | tail -15 | sed 's/^/    /'
    } >&2
    BAD=$((BAD + 1))
}
mkdir -p "$TMP/nvme"
while read -r f w desc; do
    out="$TMP/out-${f%.json}"
    # an NVMe path the fuzzer made up becomes a scratch directory, so NVMe placements train too
    # (through the page cache: the scratch file system may lack O_DIRECT)
    sed 's|"nvme_path": *"[^"]*"|"nvme_path": "'"$TMP/nvme"'"|g' "$TMP/emit/$f" > "$TMP/emit/$f.run"
    t0=$(now_ms)
    # from $TMP: a config's relative paths (a monitor's empty output_path writes ./DeepSpeedJobName,
    # as DeepSpeed does) land there, not in the source tree
    OUTPUT=$(cd "$TMP" && timeout -k 5 "$LIMIT" "$MPIRUN" --oversubscribe -np "$w" "$ZINF" train --config "$TMP/emit/$f.run" \
        --model test-mini --data "$TMP/add_train_*.bin" --max_length 16 --max_steps 2 --logging_steps 1 --swap_engine psync \
        --out "$out" < /dev/null 2>&1); RC=$?
    ms=$(($(now_ms) - t0))
    step_ms=$(metric "$out/metrics.jsonl" ms_per_step 2>/dev/null | sort -g | tail -1)
    [ -n "${ZINF_FUZZ_TRAIN_VERBOSE:-}" ] && echo "  $f world $w: exit $RC, $ms ms, slowest step ${step_ms:--} ms; $desc"
    CHECKS=$((CHECKS + 1))
    if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then
        show "timed out after $LIMIT s (exit $RC)" "$f" "$w" "$desc"; continue
    fi
    if printf '%s\n' "$OUTPUT" | grep -Eq "$CRASH_RE"; then
        show "crashed (exit $RC, after $ms ms)" "$f" "$w" "$desc"; continue
    fi
    if [ "$ms" -gt $((SLOW * 1000)) ] || awk -v s="${step_ms:-0}" -v l="$SLOW_STEP" 'BEGIN { exit !(s > l) }'; then
        show "pathologically slow: $ms ms in all, slowest step ${step_ms:--} ms (exit $RC)" "$f" "$w" "$desc"
        continue
    fi
    if [ "$RC" -ne 0 ]; then
        errs=$(printf '%s\n' "$OUTPUT" | grep -c '^zinf: error:')
        line=$(printf '%s\n' "$OUTPUT" | grep '^zinf: error:' | head -1)
        if [ "$errs" -ne 1 ]; then
            show "exit $RC with $errs \"zinf: error:\" lines (one expected)" "$f" "$w" "$desc"
        elif ! allowed_refusal "$line"; then
            show "refused with an error that is not an allowed refusal: $line" "$f" "$w" "$desc"
        else
            REFUSED=$((REFUSED + 1))
        fi
        continue
    fi
    M="$out/metrics.jsonl"
    losses=$(metric "$M" loss 2>/dev/null | head -2 | tr '\n' ' ')
    set -- $losses
    L1=${1:-none}
    if [ "$#" -ne 2 ]; then
        show "trained but logged $# losses for 2 steps ($losses)" "$f" "$w" "$desc"
    elif ! printf '%s\n' "$@" | awk '!/^-?[0-9.]+([eE][-+]?[0-9]+)?$/ { bad = 1 } END { exit bad }'; then
        show "a loss is not finite: $losses" "$f" "$w" "$desc"
    elif ! close "$L1" 5.5452 0.01; then
        show "first loss $L1 is not ln(256) = 5.5452 within 1%" "$f" "$w" "$desc"
    else
        case "$OUTPUT" in
        *"parameters agree bit for bit across $w rank"*) TRAINED=$((TRAINED + 1)) ;;
        *) show "no \"parameters agree bit for bit across $w rank\"" "$f" "$w" "$desc" ;;
        esac
    fi
done < "$INDEX"
echo "$NE configs: $TRAINED trained, $REFUSED refused as allowed, $BAD failed, in $(( ($(now_ms) - T0) / 1000 )) s"
# the sample must mostly train, or it tests little
[ "$TRAINED" -ge $((NE * 3 / 4)) ] && pass || fail "only $TRAINED of $NE emitted configs trained"
finish
