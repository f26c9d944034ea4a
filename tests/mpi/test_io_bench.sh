#!/bin/sh
# `zinf io-bench`: a quick sweep (8 settings) of 8 MiB on a directory under /var/tmp (a disk file
# system with O_DIRECT here; psync, buffered, where it has none), on one and on two striped paths:
# the table has one row per setting, every GB/s figure is a positive number, the best-sum line is
# the table's best row, the printed "aio" block is accepted by `zinf config show` and holds that
# row's values; no file is left behind; the errors (missing directory, a file as directory, a bad
# --block-sizes value, too little space, an injected EIO) are one line naming the cause.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

VT=$(mktemp -d "${ZINF_IOBENCH_DIR:-/var/tmp}/zinf-iobench.XXXXXX") || { echo "no directory under /var/tmp: skip"; exit 77; }
trap 'rm -rf "$TMP" "$VT"' EXIT
A="$VT/a"
B="$VT/b"
mkdir -p "$A" "$B"

ENGINE=io_uring
run io-bench --quick --size 8M --path "$A"
case "$OUTPUT" in
*"does not support O_DIRECT"* | *"io_uring_queue_init"*)
    echo "io_uring with O_DIRECT unusable on $VT, testing psync (buffered) instead: $(printf '%s\n' "$OUTPUT" | grep 'error:' | head -1)"
    ENGINE=psync
    run io-bench --quick --size 8M --path "$A" --engine psync
    ;;
esac
expect_ok "quick sweep, one path ($ENGINE)"

# rows: block_size queue_depth parallelism single_submit overlap_events write read
rows() { printf '%s\n' "$OUTPUT" | grep -E '^ *[0-9]+[KMG]? +[0-9]+ +[0-9]+ +(true|false) +(true|false) +[0-9.]+ +[0-9.]+ *$'; }
# size in bytes of a table block size (128K, 1M, 4096)
bytes() { awk -v s="$1" 'BEGIN { m = 1; u = substr(s, length(s)); if (u == "K") m = 1024; else if (u == "M") m = 1048576; else if (u == "G") m = 1073741824; if (m > 1) s = substr(s, 1, length(s) - 1); printf "%d\n", s * m }'; }

# check_sweep WHAT NROWS: the table, the figures, the best row and the aio block of $OUTPUT
check_sweep() {
    what=$1
    n=$(rows | wc -l)
    CHECKS=$((CHECKS + 1))
    [ "$n" -eq "$2" ] || fail "$what: $n table rows, expected $2"
    # every GB/s figure on the table, the reference and the best lines is a positive number
    bad=$( { rows | awk '{ print $6; print $7 }'
             printf '%s\n' "$OUTPUT" | grep -E 'GB/s' | grep -v '^ *block_size' | grep -v '^GB/s' |
                 grep -oE '(write|read) [^ ,]+ GB/s' | awk '{ print $2 }'; } |
           awk '!($1 ~ /^[0-9]+(\.[0-9]+)?$/ && $1 + 0 > 0) { print }')
    CHECKS=$((CHECKS + 1))
    [ -z "$bad" ] || fail "$what: GB/s figures that are not positive numbers: $bad"
    nfig=$(printf '%s\n' "$OUTPUT" | grep -cE '(write|read) [0-9.]+ GB/s')
    CHECKS=$((CHECKS + 1))
    [ "$nfig" -ge 4 ] || fail "$what: only $nfig reference/best lines with GB/s figures"
    expect_has "$what: reference" "reference, same run: one plain pwrite/pread loop of 8 MiB blocks" "best read:" "best write:"
    # the raw io_uring reference at depth, and the swapper held to it (where O_DIRECT exists)
    expect_has "$what: raw io_uring reference" "reference, same run: raw io_uring O_DIRECT, 8 MiB blocks, queue depth 8"
    case "$OUTPUT" in *"no raw figure"*) ;; *) expect_has "$what: against raw io_uring" "swapper at its best sum against raw io_uring at depth: write" ;; esac

    # the best-sum line is a table row with the table's largest write + read
    best=$(printf '%s\n' "$OUTPUT" | sed -n 's/^best sum: *block_size \([^,]*\), queue_depth \([0-9]*\), intra_op_parallelism \([0-9]*\), single_submit \([a-z]*\), overlap_events \([a-z]*\): write \([0-9.]*\) GB\/s, read \([0-9.]*\) GB\/s$/\1 \2 \3 \4 \5 \6 \7/p')
    CHECKS=$((CHECKS + 1))
    if [ -z "$best" ]; then fail "$what: no 'best sum:' line"; printf '%s\n' "$OUTPUT" | tail -15 >&2; return; fi
    set -- $best
    b_bs=$1 b_qd=$2 b_par=$3 b_ss=$4 b_oe=$5 b_w=$6 b_r=$7
    CHECKS=$((CHECKS + 1))
    rows | awk -v bs="$b_bs" -v qd="$b_qd" -v p="$b_par" -v ss="$b_ss" -v oe="$b_oe" -v w="$b_w" -v r="$b_r" \
        '$1 == bs && $2 == qd && $3 == p && $4 == ss && $5 == oe && $6 == w && $7 == r { f = 1 } END { exit !f }' ||
        fail "$what: best sum ($best) is not a row of the table"
    max=$(rows | awk '{ s = $6 + $7; if (s > m) m = s } END { printf "%.3f\n", m }')
    CHECKS=$((CHECKS + 1))
    close "$(awk -v a="$b_w" -v b="$b_r" 'BEGIN { printf "%.3f\n", a + b }')" "$max" 0.001 ||
        fail "$what: best sum $b_w + $b_r is not the table's largest sum $max"

    # the aio block: a config that holds it is accepted and carries the best row's values
    { echo '{"train_batch_size": 8,'; printf '%s\n' "$OUTPUT" | sed -n '/^"aio": {/,/^}/p'; echo '}'; } > "$TMP/aio.json"
    SAVED=$OUTPUT
    run config show "$TMP/aio.json"
    expect_ok "$what: zinf config show on the printed aio block"
    expect_has "$what: aio block values" "\"block_size\": $(bytes "$b_bs")," "\"queue_depth\": $b_qd," \
        "\"intra_op_parallelism\": $b_par," "\"single_submit\": $b_ss," "\"overlap_events\": $b_oe,"
    OUTPUT=$SAVED
}

# no_files WHAT DIR...: nothing left behind
no_files() {
    what=$1; shift
    for d in "$@"; do
        CHECKS=$((CHECKS + 1))
        left=$(ls -A "$d")
        [ -z "$left" ] || fail "$what: left in $d: $left"
    done
}

check_sweep "one path" 8
no_files "one path" "$A"

run io-bench --quick --size 8M --engine "$ENGINE" --path "$A" --path="$B"
expect_ok "two paths"
expect_has "two paths: both named" "2 paths, striped" "$A" "$B" "(sum over the paths)"
check_sweep "two paths" 8
no_files "two paths" "$A" "$B"

# explicit lists: 2 x 1 x 1 x 2 x 2 = 8 rows, dash and underscore spellings
run io-bench --size 4M --engine "$ENGINE" --path "$A" --block-sizes 64K,512K --queue_depths 8 \
    --parallelism=1 --single-submit both --overlap_events both
expect_ok "explicit lists"
check_sweep "explicit lists" 8
no_files "explicit lists" "$A"

if [ "$ENGINE" = io_uring ]; then # the buffered engine, as train --swap_engine psync
    run io-bench --quick --size 8M --engine psync --path "$A"
    expect_ok "psync"
    expect_has "psync: says the reads may be cached" "psync is buffered" "may be (partly) cached"
    check_sweep "psync" 8
    no_files "psync" "$A"
fi

run io-bench --help
expect_ok "--help"
expect_has "--help" "--path S" "--block_sizes S" "--queue_depths S" "--parallelism S" "--single_submit S" \
    "--overlap_events S" "--quick" "--engine S" "--size S"

# fault SPEC args...: zinf with ZINF_SWAP_FAULT=SPEC (the swapper's fault injection)
fault() { f=$1; shift; OUTPUT=$(ZINF_SWAP_FAULT=$f "$ZINF" "$@" 2>&1); RC=$?; }

# errors: one line naming the cause, non-zero exit, nothing left behind
one_error() {
    CHECKS=$((CHECKS + 1))
    ne=$(printf '%s\n' "$OUTPUT" | grep -c 'error:')
    [ "$ne" -eq 1 ] || { fail "$1: $ne error lines, expected 1"; printf '%s\n' "$OUTPUT" | grep 'error:' >&2; }
}
run io-bench --quick --size 8M --path "$VT/missing"
expect_err "missing directory" "io-bench: --path $VT/missing: No such file or directory"
one_error "missing directory"
: > "$VT/file"
run io-bench --quick --size 8M --path "$VT/file"
expect_err "a file as directory" "io-bench: --path $VT/file: not a directory"
one_error "a file as directory"
rm -f "$VT/file"
run io-bench --quick --size 8M --path "$A" --block-sizes 128K,6K
expect_err "bad --block-sizes" "--block-sizes: '6K' is not a multiple of 4096 bytes"
one_error "bad --block-sizes"
run io-bench --quick --size 8M --path "$A" --block-sizes 128K,big
expect_err "bad --block-sizes value" "--block-sizes: 'big' is not a size"
run io-bench --quick --size 8M --path "$A" --queue-depths 4,0
expect_err "bad --queue-depths" "--queue-depths: 0 is outside [1, 4096]"
run io-bench --quick --size 8M --path "$A" --single-submit maybe
expect_err "bad --single-submit" "--single-submit 'maybe': expected both, true or false"
run io-bench --quick --size 1000T --path "$A"
expect_err "too little space" "too little space: need " "$A has "
one_error "too little space"
fault eio@3 io-bench --quick --size 8M --engine "$ENGINE" --path "$A"
expect_err "injected EIO" "swap write of $A/zinf-swap-iobench-r" ".swp at offset 262144 (131072 bytes) failed: Input/output error" \
    "block_size 128K, queue_depth 4"
one_error "injected EIO"
fault eof@5 io-bench --quick --size 8M --engine "$ENGINE" --path "$A" --path "$B"
expect_err "injected end of file, two paths" "short swap write of $A/zinf-swap-iobench-r" "at offset 262144"
one_error "injected end of file, two paths"
no_files "errors" "$A" "$B"

finish
