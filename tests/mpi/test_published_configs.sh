#!/bin/sh
# The DeepSpeed configs that public projects ship (tests/fixtures/published, sources in
# SOURCES.tsv), run as their users run them. For each line of the MANIFEST there:
# `zinf config show` at a world size the file's batch numbers allow must accept it with no
# warning, accept it with only the warnings that are true, or refuse it; then an accepted one
# trains two steps of test-mini on the CPU backend, starting at the loss of an untrained byte
# model (ln 256) and ending with the same parameters on every rank.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
PUB=$FIXTURES/published
MANIFEST=$PUB/MANIFEST
LIMIT=${ZINF_PUBLISHED_TIMEOUT:-30} # seconds for one training run: a crawl is a failure too
TAB=$(printf '\t')
BROKEN="" # the configs that failed any check, for the summary
RELEASE_LIMITS='^$' # warnings this release gives for keys it does not implement yet: none

[ -r "$MANIFEST" ] || { echo "no $MANIFEST" >&2; exit 1; }

# bad FILE WHY: a failed check of one config, remembered for the summary
bad() {
    fail "$1: $2"
    case " $BROKEN " in *" $1 "*) ;; *) BROKEN="$BROKEN $1" ;; esac
}
# zlines PATH: zinf's own lines of $OUTPUT (not mpirun's), with PATH replaced by CONFIG so that
# a name like "..._torch_compile.json" cannot satisfy a search for "compile"
zlines() {
    printf '%s\n' "$OUTPUT" | grep '^zinf: ' |
        awk -v p="$1" '{ while (p != "" && (i = index($0, p)) > 0) $0 = substr($0, 1, i - 1) "CONFIG" substr($0, i + length(p)); print }'
}
# indent: the lines of a message after its first
indent() { sed 's/^/    /'; }
NL='
'
# tmpi NP args...: mpi with a time limit (exit 124 when it is reached)
tmpi() {
    local np=$1; shift
    OUTPUT=$(timeout "$LIMIT" "$MPIRUN" --oversubscribe -np "$np" "$ZINF" "$@" 2>&1); RC=$?
}

# ---- the corpus itself: every config has a MANIFEST line and a source, and nothing else does
grep -v '^#' "$MANIFEST" | grep -v '^$' > "$TMP/manifest"
cut -f1 "$TMP/manifest" | sort > "$TMP/listed"
(cd "$PUB" && ls *.json *.jsonc 2>/dev/null | sort) > "$TMP/present"
if cmp -s "$TMP/listed" "$TMP/present"; then pass; else
    fail "MANIFEST and the files differ: $(diff "$TMP/listed" "$TMP/present" | grep '^[<>]' | tr '\n' ' ')"
fi
grep -v '^#' "$PUB/SOURCES.tsv" | awk -F'\t' 'NF < 4 || length($4) != 40 || $4 !~ /^[0-9a-f]+$/ { print "bad SOURCES line: " $1 }' > "$TMP/srcbad"
grep -v '^#' "$PUB/SOURCES.tsv" | cut -f1 | sort > "$TMP/sourced"
if [ -s "$TMP/srcbad" ] || ! cmp -s "$TMP/sourced" "$TMP/present"; then
    fail "SOURCES.tsv: $(cat "$TMP/srcbad") $(diff "$TMP/sourced" "$TMP/present" | grep '^[<>]' | tr '\n' ' ')"
else pass; fi
awk -F'\t' 'NF != 7 { print "MANIFEST line with " NF " fields: " $1 }' "$TMP/manifest" > "$TMP/mbad"
if [ -s "$TMP/mbad" ]; then fail "$(cat "$TMP/mbad")"; else pass; fi

# ---- the tiny addition data every training run reads
make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
mkdir -p "$TMP/nvme"

# show FILE NP OUTCOME SHOW_HAS flags...: config show, judged by the outcome
show() {
    local f=$1 np=$2 outcome=$3 has=$4 path="$PUB/$1"; shift 4
    # --device cuda: what a user sees on the GPUs the config was written for (the CPU backend's own
    # notices, such as "computes in fp32", are checked by the training run below instead)
    mpi "$np" config show "$path" --model test-mini --device cuda "$@"
    zlines "$path" > "$TMP/z"
    CHECKS=$((CHECKS + 1))
    case "$outcome" in
    refuse\ *)
        local want=${outcome#refuse }
        if [ "$RC" -eq 0 ]; then
            bad "$f" "accepted at world $np; it must be refused with '$want'${NL}$(grep -i warning "$TMP/z" | indent)"
        elif ! grep -i 'error' "$TMP/z" | grep -qF -- "$want"; then
            bad "$f" "refused, but not for '$want':${NL}$(head -6 "$TMP/z" | indent)"
        fi
        return ;;
    esac
    if [ "$RC" -ne 0 ]; then
        bad "$f" "config show at world $np exits $RC:${NL}$(grep -i error "$TMP/z" | head -6 | indent)"
        return
    fi
    # A warning that says what this release of zinf lacks is true for every config that asks for
    # it; it is listed here, not in the MANIFEST, and goes when the feature lands.
    grep -i 'warning' "$TMP/z" | grep -v -e "$RELEASE_LIMITS" > "$TMP/w"
    case "$outcome" in
    ok)
        if [ -s "$TMP/w" ]; then bad "$f" "warnings where DeepSpeed has none:${NL}$(indent < "$TMP/w")"; fi ;;
    warn\ *)
        awk -v subs="${outcome#warn }" '
            BEGIN { n = split(subs, s, "|") }
            { hit = 0; for (i = 1; i <= n; i++) if (index($0, s[i])) { hit = 1; seen[i] = 1 }
              if (!hit) print "    a warning that is not true: " $0 }
            END { for (i = 1; i <= n; i++) if (!seen[i]) print "    no warning about " s[i] }' "$TMP/w" > "$TMP/wbad"
        if [ -s "$TMP/wbad" ]; then bad "$f" "warnings:
$(cat "$TMP/wbad")"; fi ;;
    *) bad "$f" "MANIFEST outcome '$outcome' is not ok, warn or refuse" ;;
    esac
    # DeepSpeed's value for keys that have gone wrong
    if [ "$has" != - ]; then
        local rest=$has s
        while [ -n "$rest" ]; do
            s=${rest%%|*}
            case "$rest" in *"|"*) rest=${rest#*|} ;; *) rest="" ;; esac
            CHECKS=$((CHECKS + 1))
            case "$OUTPUT" in *"$s"*) ;; *) bad "$f" "resolved config lacks $s" ;; esac
        done
    fi
}

# trains FILE NP REWRITE flags...: two steps on the CPU backend
trains() {
    local f=$1 np=$2 rw=$3 cfg="$PUB/$1" out="$TMP/out.$1"; shift 3
    if [ "$rw" != - ]; then
        sed -e "$(printf '%s' "$rw" | sed "s|@TMP@|$TMP|g")" "$PUB/$f" > "$TMP/$f"
        if cmp -s "$PUB/$f" "$TMP/$f"; then bad "$f" "MANIFEST rewrite '$rw' changes nothing"; return; fi
        cfg="$TMP/$f"
    fi
    tmpi "$np" train --config "$cfg" --model test-mini --data "$TMP/add_train_*.bin" --max_length 32 \
        --max_steps 2 --logging_steps 1 --out "$out" "$@"
    CHECKS=$((CHECKS + 1))
    if [ "$RC" -eq 124 ]; then bad "$f" "training at world $np did not finish 2 steps in ${LIMIT}s"; return; fi
    if [ "$RC" -ne 0 ]; then
        # its error, or else how far it got and the signal that ended it
        zlines "$cfg" | grep -i error > "$TMP/e"
        [ -s "$TMP/e" ] || { zlines "$cfg" | grep -iv warning | tail -1
            printf '%s\n' "$OUTPUT" | grep -i 'signal:\|signal code' | head -2; } > "$TMP/e"
        bad "$f" "training at world $np exits $RC:${NL}$(head -6 "$TMP/e" | indent)"
        return
    fi
    CHECKS=$((CHECKS + 1))
    case "$OUTPUT" in *"parameters agree bit for bit across $np rank"*) ;;
        *) bad "$f" "ranks' parameters do not agree after training at world $np" ;; esac
    local l1
    l1=$(metric "$out/metrics.jsonl" loss 2>/dev/null | head -1)
    CHECKS=$((CHECKS + 1))
    if [ -z "$l1" ] || ! close "$l1" 5.5452 0.01; then bad "$f" "first loss '$l1' is not ln(256) = 5.5452 within 1%"; fi
}

while IFS="$TAB" read -r f snp tnp outcome flags rw has <&3; do
    [ "$flags" = - ] && flags=""
    # shellcheck disable=SC2086 # flags are words
    show "$f" "$snp" "$outcome" "$has" $flags
    case "$outcome" in refuse\ *) continue ;; esac
    # shellcheck disable=SC2086
    trains "$f" "$tnp" "$rw" $flags
done 3< "$TMP/manifest"

if [ -n "$BROKEN" ]; then
    echo "published configs that fail: $(printf '%s\n' $BROKEN | wc -l | tr -d ' ') of $(wc -l < "$TMP/manifest" | tr -d ' ')" >&2
    printf '  %s\n' $BROKEN >&2
fi
finish
