#!/bin/sh
# The docs against the program, for every command there is and every page in man/, so that a
# command or page added later is checked without editing this file:
#
# 1. Every page renders without a warning: man --warnings=w, or groff -ww where man is missing
#    (w is every warning; man's --warnings=all leaves out undefined macros, "mac", among others).
# 2. Each command's page: a command is `zinf` itself, each command `zinf --help` lists, and the
#    program zinf-launch where the build has one. Its page is man/zinf.1 for zinf, else
#    man/zinf-SUB.1 (man/zinf-launch.1), else man/zinf-SUB.5 for a command that only serves the
#    file format of that page and has no page of its own (`config show` is in zinf-config(5)).
#    - every flag `CMD --help` prints (a help line that starts with --name, after the indent and
#      an optional "-x, ") appears in the page, and in README.md or a page of docs/ (docs/*.md,
#      where the README's longer sections live);
#    - every option the page documents appears in `CMD --help`: a documented option is the tag of
#      a .TP (or .TQ) item whose first word is --name (\fB\-\-name\fR, .BI \-\-name " V", ...);
#      a config key such as fp16.enabled is a tag too, but it does not start with --, so it is
#      not an option even when its text names the flag that fills it.
#    --a-b and --a_b are the same flag, as the command line takes them.
# 3. `zinf --help` (its "commands:" list), the .TP items of zinf(1)'s "Commands" subsection and
#    the commands in zinf(1)'s SYNOPSIS are the same list; `zinf --version` prints the version
#    configure gave the build; every page `zinf --help` names exists.
# 4. Every page in man/ is in dist_man_MANS (so make install and the tarball have it) and every
#    listed page exists; every docs/*.md is in EXTRA_DIST; every zinf page a SEE ALSO section names exists; zinf(1)'s SEE ALSO
#    names every other page, and README.md names every page as name(N).
# Every failure names the file (and line) and the flag, command or page missing.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
SRC=${top_srcdir:-.}
BUILD=${top_builddir:-.}
MAN=$SRC/man
README=$SRC/README.md

# The groff source as text: font changes and zero-width escapes dropped, \- and \(hy as '-'.
flatten() {
    sed -e 's/\\f\[[^]]*\]//g' -e 's/\\f([A-Za-z][A-Za-z]//g' -e 's/\\f[A-Za-z1-4]//g' \
        -e 's/\\(hy/-/g' -e 's/\\-/-/g' -e 's/\\&//g' -e 's/\\%//g' "$1"
}
# The --names in text on stdin, one per line, dashes as underscores (the flags' one spelling).
flag_names() {
    grep -oE '(^|[^A-Za-z0-9_-])--[A-Za-z0-9][A-Za-z0-9_-]*' | sed -e 's/^[^-]//' -e 's/^--//' \
        -e 's/-/_/g' -e 's/_*$//' | sort -u
}
# The flags a --help text on stdin prints: the lines that start (after the indent) with --name.
help_flags() {
    grep -E '^[[:space:]]+(-[A-Za-z], )?--[A-Za-z0-9]' | sed -E 's/^[[:space:]]+(-[A-Za-z], )?//' |
        awk '{ print $1 }' | flag_names
}
# "LINE NAME" for each option page $1 documents: .TP/.TQ tags whose first word is --name (words
# after it that are --names too, or ",", "|" and short flags, name more of the same item).
page_options() {
    flatten "$1" | awk '
        tag { t = $0; sub(/^\.[A-Za-z]+[ \t]*/, "", t); gsub(/"/, " ", t)
              n = split(t, w, /[ \t]+/)
              for (i = 1; i <= n; i++) {
                  if (w[i] == "" || w[i] == "," || w[i] == "|" || w[i] ~ /^-[A-Za-z],?$/) continue
                  if (w[i] !~ /^--[A-Za-z0-9]/) break
                  x = w[i]; sub(/^--/, "", x); sub(/[^A-Za-z0-9_-].*$/, "", x); gsub(/-/, "_", x)
                  sub(/_+$/, "", x); print NR, x
              } }
        { tag = $0 ~ /^\.T[PQ]([ \t]|$)/ }'
}
# "NAME N" for each page reference name(N) in a SEE ALSO section of page $1.
see_also() {
    flatten "$1" | awk '/^\.SH/ { on = $0 ~ /SEE ALSO/; next } on' | tr -d '"' |
        sed -E 's/^\.[A-Za-z]+[[:space:]]+//' |
        grep -oE '[A-Za-z0-9_.-]+[[:space:]]*\([1-9]\)' | sed -E 's/[[:space:]]*\(([1-9])\)/ \1/'
}

PAGES=$(ls "$MAN"/*.[1-9] 2>/dev/null)
[ -n "$PAGES" ] || { fail "no pages in $MAN"; finish; exit; }

# ---- 1. every page renders without a warning --------------------------------------------------
if command -v man >/dev/null 2>&1; then
    render() { LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings=w -l "$1" 2>&1 >/dev/null; }
    RENDER="man --warnings=w"
elif command -v groff >/dev/null 2>&1; then
    render() { groff -t -man -ww -z "$1" 2>&1; }
    RENDER="groff -ww"
else
    render() { :; }
    RENDER=""
    echo "test_docs.sh: neither man nor groff is installed: pages not rendered (jobs/install-deps.sh installs man-db)"
fi
for p in $PAGES; do
    [ -n "$RENDER" ] || break
    W=$(render "$p")
    [ -z "$W" ] && pass || fail "man/${p##*/}: $RENDER warns: $(printf '%s\n' "$W" | head -5 | tr '\n' '|')"
done

# ---- 2. each command's flags in its page and the README, and the page's options in --help -------
HELP=$("$ZINF" --help 2>&1) || fail "zinf --help exited $?"
CMDS=$(printf '%s\n' "$HELP" | awk '/^commands:/ { on = 1; next } on && /^$/ { exit } on && /^  [a-z]/ { print $1 }')
[ -n "$CMDS" ] && pass || fail "zinf --help lists no commands (a 'commands:' block of '  name  text' lines)"
# the README and the pages its longer sections moved to: a flag in one of them is documented, a
# flag in none of them fails
README_FLAGS=$(cat "$README" "$SRC"/docs/*.md | flag_names)

# check_cmd LABEL PAGE PROGRAM [ARGS...]: LABEL --help against PAGE, and README.md with docs/*.md
check_cmd() {
    local label=$1 page=$2; shift 2
    local out rc flags doc f
    out=$("$@" --help 2>&1); rc=$?
    [ "$rc" -eq 0 ] || { fail "$label --help exited $rc"; return; }
    flags=$(printf '%s\n' "$out" | help_flags)
    [ -n "$flags" ] || { fail "$label --help prints no flags (lines '  --name ...')"; return; }
    doc=$(flatten "$page" | flag_names)
    for f in $flags; do
        printf '%s\n' "$doc" | grep -qx -- "$f" && pass ||
            fail "man/${page##*/} lacks --$f, which $label --help prints"
        printf '%s\n' "$README_FLAGS" | grep -qx -- "$f" && pass ||
            fail "README.md and docs/*.md lack --$f, which $label --help prints"
    done
    page_options "$page" | while read -r line f; do
        printf '%s\n' "$flags" | grep -qx -- "$f" ||
            echo "man/${page##*/}:$line documents --$f as an option, but $label --help does not print it"
    done > "$TMP/rev"
    if [ -s "$TMP/rev" ]; then while read -r msg; do fail "$msg"; done < "$TMP/rev"; else pass; fi
}

check_cmd zinf "$MAN/zinf.1" "$ZINF"
for c in $CMDS; do
    if [ -f "$MAN/zinf-$c.1" ]; then page=$MAN/zinf-$c.1
    elif [ -f "$MAN/zinf-$c.5" ]; then page=$MAN/zinf-$c.5
    else fail "zinf $c has no page: man/zinf-$c.1 (or man/zinf-$c.5 for a file format's command)"; continue
    fi
    check_cmd "zinf $c" "$page" "$ZINF" "$c"
done
if [ -x "$BUILD/zinf-launch" ]; then
    if [ -f "$MAN/zinf-launch.1" ]; then check_cmd zinf-launch "$MAN/zinf-launch.1" "$BUILD/zinf-launch"
    else fail "zinf-launch is built but man/zinf-launch.1 does not exist"; fi
fi

# ---- 3. zinf --help, --version and zinf(1) agree on the commands ------------------------------
Z1=$(flatten "$MAN/zinf.1")
SS=$(printf '%s\n' "$Z1" | awk '/^\.SS Commands/ { on = 1; next } on && /^\.S[HS]/ { on = 0 }
    on && tag { t = $0; sub(/^\.[A-Za-z]+[ \t]*/, "", t); gsub(/"/, "", t); split(t, w, /[ \t]+/); print w[1] }
    { tag = $0 ~ /^\.TP/ }' | sort -u)
SYN=$(printf '%s\n' "$Z1" | awk '/^\.SH/ { on = $0 ~ /SYNOPSIS/; next } on && /^\.B zinf [a-z]/ { print $3 }' | sort -u)
HC=$(printf '%s\n' "$CMDS" | sort -u)
for c in $HC; do
    printf '%s\n' "$SS" | grep -qx -- "$c" && pass || fail "man/zinf.1: zinf --help lists '$c', the Commands subsection has no .TP item for it"
    printf '%s\n' "$SYN" | grep -qx -- "$c" && pass || fail "man/zinf.1: zinf --help lists '$c', the SYNOPSIS has no '.B zinf $c' line"
done
for c in $SS; do
    printf '%s\n' "$HC" | grep -qx -- "$c" && pass || fail "man/zinf.1 Commands has '$c', zinf --help does not list it"
done
for c in $SYN; do
    printf '%s\n' "$HC" | grep -qx -- "$c" && pass || fail "man/zinf.1 SYNOPSIS has 'zinf $c', zinf --help does not list it"
done
V=$("$ZINF" --version 2>&1); rc=$?
want=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "$BUILD/zinf-build.h" 2>/dev/null)
[ "$rc" -eq 0 ] && [ "$V" = "zinf ${want:-${V#zinf }}" ] && pass || fail "zinf --version printed '$V' (exit $rc), expected 'zinf $want'"
for ref in $(printf '%s\n' "$HELP" | grep -oE 'zinf[A-Za-z0-9_-]*\([1-9]\)' | sed -E 's/\(([1-9])\)/.\1/'); do
    [ -f "$MAN/$ref" ] && pass || fail "zinf --help names ${ref%.*}(${ref##*.}), but man/$ref does not exist"
done

# ---- 4. dist_man_MANS, SEE ALSO and the README name every page, and only pages that exist ------
# The words of Makefile.am's variable $1 (its continued lines joined), one per line.
am_list() {
    sed -e ':a' -e '/\\$/{N;s/\\\n//;ba' -e '}' "$SRC/Makefile.am" |
        sed -n "s/^$1[[:space:]]*+*=//p" | tr -s ' \t' '\n' | sed '/^$/d'
}
DIST=$(am_list dist_man_MANS)
for p in $PAGES; do
    printf '%s\n' "$DIST" | grep -qx -- "man/${p##*/}" && pass || fail "Makefile.am: dist_man_MANS lacks man/${p##*/}"
done
for d in $DIST; do
    [ -f "$SRC/$d" ] && pass || fail "Makefile.am: dist_man_MANS lists $d, which does not exist"
done
# the README's pages in docs/ are in EXTRA_DIST, so the tarball's README links to pages it has
XDIST=$(am_list EXTRA_DIST)
for d in "$SRC"/docs/*.md; do
    [ -f "$d" ] || continue
    printf '%s\n' "$XDIST" | grep -qx -- "docs/${d##*/}" && pass || fail "Makefile.am: EXTRA_DIST lacks docs/${d##*/}"
done
for p in $PAGES; do
    see_also "$p" > "$TMP/see"
    while read -r name sec; do
        case "$name" in zinf*) ;; *) continue ;; esac
        [ -f "$MAN/$name.$sec" ] && pass || fail "man/${p##*/}: SEE ALSO names $name($sec), but man/$name.$sec does not exist"
    done < "$TMP/see"
done
see_also "$MAN/zinf.1" | tr ' ' '.' > "$TMP/see1"
for p in $PAGES; do
    b=${p##*/}
    [ "$b" = zinf.1 ] && continue
    grep -qx -- "$b" "$TMP/see1" && pass || fail "man/zinf.1: SEE ALSO does not name ${b%.*}(${b##*.})"
    grep -qF -- "${b%.*}(${b##*.})" "$README" && pass || fail "README.md does not name ${b%.*}(${b##*.})"
done

finish
