#!/bin/sh
# Watching a run: the step log line's elapsed time and time left, metrics.jsonl's elapsed_s and
# eta_s; zinf plot on a trained run, on two runs together and on a hand-written metrics.jsonl
# whose every point must sit where the axis labels put it (tests/mpi/plot_check.py parses the
# SVG); XML escaping of run names and titles; the PNG through rsvg-convert or convert, a fake
# converter, a failing one and none; and the errors: missing file, malformed line, no step lines,
# unknown flag, several runs without --out.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
CHECK_PY="${top_srcdir:-.}/tests/mpi/plot_check.py"

make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add" --val_fraction 0.1
expect_ok "zinf data"
D="$TMP/add_train_*.bin"; VAL="$TMP/add_val_*.bin"
# trn OUT LR: 40 steps on 2 ranks, a log line every 2 steps, validation every 10
trn() {
    mpi 2 train --model test-mini --data "$D" --val "$VAL" --max_length 32 --max_steps 40 --logging_steps 2 \
        --eval_steps 10 --per_device_train_batch_size 4 --learning_rate "$2" --save_steps 0 --seed 3 --out "$TMP/$1"
}
steps() { grep -c '"step": ' "$1"; }

# --- 1. the log line and metrics.jsonl ---------------------------------------------------------
trn r1 3e-3
expect_ok "train r1"
M1="$TMP/r1/metrics.jsonl"
[ "$(count_lines ' elapsed, ')" -eq 21 ] && pass || fail "not every one of the 21 step log lines has 'elapsed, '"
printf '%s\n' "$OUTPUT" | grep -Eq '^step +40/40 \|.* \| [0-9][0-9a-z]* elapsed, 0s left$' && pass ||
    fail "the last step's log line does not end 'T elapsed, 0s left'"
printf '%s\n' "$OUTPUT" | grep -Eq '^step +10/40 \| loss [0-9.]+ \| val [0-9.]+ \|.* ms/step \| [0-9][0-9a-z]* elapsed, [0-9][0-9a-z]* left$' &&
    pass || fail "an evaluation step's log line lacks its times"
[ "$(metric "$M1" elapsed_s | wc -l)" -eq 21 ] && [ "$(metric "$M1" eta_s | wc -l)" -eq 21 ] && pass ||
    fail "metrics.jsonl: elapsed_s and eta_s not on each of the 21 step lines"
metric "$M1" elapsed_s | awk 'NR > 1 && $1 < prev { bad = 1 } { prev = $1 } END { exit bad || NR != 21 || prev <= 0 }' &&
    pass || fail "elapsed_s does not grow monotonically: $(metric "$M1" elapsed_s | tr '\n' ' ')"
awk -v e="$(metric "$M1" eta_s | tail -1)" 'BEGIN { exit !(e >= 0 && e <= 0.001) }' && pass ||
    fail "eta_s of the last step is $(metric "$M1" eta_s | tail -1), not 0"
# 30 steps left at step 10, 6 at step 34: whatever the noise of a shared machine, the first is more
E10=$(grep '"step": 10,' "$M1" | sed 's/.*"eta_s": \([0-9.]*\).*/\1/')
E34=$(grep '"step": 34,' "$M1" | sed 's/.*"eta_s": \([0-9.]*\).*/\1/')
awk -v a="$E10" -v b="$E34" 'BEGIN { exit !(a > b && b > 0) }' && pass || fail "eta_s at step 10 ($E10) is not above step 34's ($E34)"
# the keys other tests read are still there, in their order
head -1 "$M1" | grep -q '^{"step": 1, "loss": [0-9.]*, "lr": [0-9.e-]*, "grad_norm": [0-9.]*, "tokens_per_s": [0-9.]*, "ms_per_step": [0-9.]*, "loss_scale": 1, "skipped": false, "elapsed_s": [0-9.]*, "eta_s": [0-9.]*}$' &&
    pass || fail "the first metrics line changed its shape: $(head -1 "$M1")"

HAVE_PY=1
if ! command -v python3 >/dev/null 2>&1; then
    HAVE_PY=0
    echo "test_plot: no python3: the SVG is not parsed (the checks of its contents are skipped)"
fi
# svg_check SVG ARGS...: plot_check.py's checks, counted as this test's
svg_check() {
    [ "$HAVE_PY" -eq 1 ] || return 0
    local out
    out=$(python3 "$CHECK_PY" "$@" 2>&1); local rc=$?
    local n; n=$(printf '%s\n' "$out" | sed -n 's/^plot_check: \([0-9]*\) checks.*/\1/p')
    CHECKS=$((CHECKS + ${n:-1} - 1))
    if [ $rc -eq 0 ]; then pass; else fail "plot_check $1"; printf '%s\n' "$out" | tail -15 >&2; fi
}

# --- 2. one run, its own directory -------------------------------------------------------------
run plot "$TMP/r1" --png false
expect_ok "plot r1"
expect_has "plot r1 says where" "wrote $TMP/r1/loss.svg"
[ -s "$TMP/r1/loss.svg" ] && [ ! -e "$TMP/r1/loss.png" ] && [ ! -e "$TMP/r1/loss.svg.tmp" ] && pass ||
    fail "plot r1: no r1/loss.svg, or a PNG despite --png false, or a .tmp left"
svg_check "$TMP/r1/loss.svg" --run "$M1:r1:$(steps "$M1")" --title r1

# --- 3. two runs in one figure; the metrics file itself as input -------------------------------
trn r2 1e-3
expect_ok "train r2"
M2="$TMP/r2/metrics.jsonl"
run plot "$TMP/r1/" "$M2"
expect_err "two runs without --out" "--out is required with several runs"
run plot "$TMP/r1/" "$M2" --out "$TMP/both" --png false
expect_ok "plot r1 r2"
svg_check "$TMP/both.svg" --run "$M1:r1:$(steps "$M1")" --run "$M2:r2:$(steps "$M2")" --title "r1 vs r2"

# --- 4. a hand-written file: every point where the tick labels put it ---------------------------
# Steps 50 and 60 are written twice, as by a run resumed from its step-40 checkpoint: the later
# lines win and the first 50 and 60 (and the val_loss of 9.9) must not be drawn. A null loss,
# grad_norm and val_loss leave gaps; the summary and prompts lines are skipped; the last line is
# being written (no newline) and is left out. Losses span 2.5-4 (a linear axis), gradient norms
# 0.5-100 (a log axis, auto), tokens/s 12k-16.5k (k labels), the learning rate 1e-4-3e-4.
H="$TMP/hand/metrics.jsonl"
mkdir -p "$TMP/hand"
cat > "$H" <<'EOF'
{"step": 10, "loss": 4.0, "lr": 0.0001, "grad_norm": 100, "tokens_per_s": 12000, "ms_per_step": 10, "skipped": false}
{"step": 20, "loss": 3.5, "lr": 0.0002, "grad_norm": 30, "tokens_per_s": 15000, "val_loss": 3.6}
{"step": 30, "loss": null, "lr": 0.0003, "grad_norm": null, "tokens_per_s": 15500}
{"step": 40, "loss": 3.0, "lr": 0.0003, "grad_norm": 3, "tokens_per_s": 16000, "val_loss": null}
{"step": 50, "loss": 2.9, "lr": 0.0003, "grad_norm": 2, "tokens_per_s": 16000, "val_loss": 9.9}
{"step": 60, "loss": 2.8, "lr": 0.0003, "grad_norm": 2, "tokens_per_s": 16000}
{"step": 50, "loss": 2.75, "lr": 0.00025, "grad_norm": 1, "tokens_per_s": 16500, "val_loss": 2.85}

{"step": 60, "loss": 2.6, "lr": 0.0002, "grad_norm": 0.8, "tokens_per_s": 16200}
{"step": 70, "loss": 2.55, "lr": 0.00015, "grad_norm": 0.6, "tokens_per_s": 16100, "val_loss": 2.7}
{"step": 80, "loss": 2.5, "lr": 0.0001, "grad_norm": 0.5, "tokens_per_s": 16000}
{"params_hash": "0123456789abcdef", "mem_param": 1}
{"prompts": 3, "prompts_correct": 2, "prompt_accuracy": 0.6667}
EOF
printf '{"step": 90, "loss": 2.4' >> "$H"
run plot "$H" --png false --title 'hand <made> & "checked"'
expect_ok "plot the hand-written file"
svg_check "$TMP/hand/loss.svg" --run "$H:hand:8" --exact --title 'hand <made> & "checked"'
grep -q '<text class="title"[^>]*>hand &lt;made&gt; &amp; &quot;checked&quot;</text>' "$TMP/hand/loss.svg" && pass ||
    fail "the title is not escaped in the SVG"
grep -q 'Gradient norm (log scale)' "$TMP/hand/loss.svg" && ! grep -q 'Loss (log scale)' "$TMP/hand/loss.svg" && pass ||
    fail "auto log scale: expected it on the gradient norm (0.5-100) only, not on the loss (2.5-4)"
# --log_y false: the same points on linear axes, checked the same way
run plot "$H" --png false --log_y false --out "$TMP/hand-lin.svg"
expect_ok "--log_y false"
svg_check "$TMP/hand-lin.svg" --run "$H:hand:8" --exact
! grep -q 'log scale' "$TMP/hand-lin.svg" && pass || fail "--log_y false drew a log axis"

# a run directory whose name needs escaping, beside a trained run
W="$TMP/we&ird <run> \"q\" 'a'"
mkdir -p "$W"
cp "$H" "$W/metrics.jsonl"
run plot "$W" "$M1" --png false --out "$TMP/weird"
expect_ok "plot a run with XML characters in its name"
svg_check "$TMP/weird.svg" --run "$W/metrics.jsonl:we&ird <run> \"q\" 'a':8" --run "$M1:r1:$(steps "$M1")" --exact
grep -q '>we&amp;ird &lt;run&gt; &quot;q&quot; &apos;a&apos;<' "$TMP/weird.svg" && pass || fail "the run name is not escaped"

# --- 5. --out: a directory, a .png name, a prefix ----------------------------------------------
mkdir -p "$TMP/figs"
run plot "$H" --png false --out "$TMP/figs"
[ "$RC" -eq 0 ] && [ -s "$TMP/figs/loss.svg" ] && pass || fail "--out DIR: no DIR/loss.svg"
run plot "$H" --png false --out "$TMP/figs/x.png"
[ "$RC" -eq 0 ] && [ -s "$TMP/figs/x.svg" ] && pass || fail "--out x.png: no x.svg"
run plot "$H" --png false --out "$TMP/figs/pre"
[ "$RC" -eq 0 ] && [ -s "$TMP/figs/pre.svg" ] && pass || fail "--out prefix: no prefix.svg"

# --- 6. the PNG --------------------------------------------------------------------------------
png_sig() { [ "$(head -c 8 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }
# a real converter, where one works here (the SVG of step 2 as the input)
REAL=""
if command -v rsvg-convert >/dev/null 2>&1 && rsvg-convert -o "$TMP/probe.png" "$TMP/r1/loss.svg" 2>/dev/null; then REAL=rsvg-convert
elif command -v convert >/dev/null 2>&1 && convert "$TMP/r1/loss.svg" "png:$TMP/probe.png" 2>/dev/null; then REAL=convert; fi
if [ -n "$REAL" ]; then
    run plot "$TMP/r1" --png
    expect_ok "--png with $REAL"
    png_sig "$TMP/r1/loss.png" && pass || fail "$REAL: r1/loss.png does not start with the PNG signature"
else
    echo "test_plot: no working rsvg-convert or convert: the real PNG is not checked"
fi
# a fake converter: zinf runs it without a shell (a name with spaces and $(...) stays one
# argument) and renames its output into place
mkdir -p "$TMP/bin" "$TMP/bad" "$TMP/none" "$TMP/o u t"
cat > "$TMP/bin/rsvg-convert" <<'EOF'
#!/bin/sh
# stands in for rsvg-convert: -o OUT SVG; records the SVG argument in $FAKE_ARG (builtins only:
# PATH has nothing else), writes a PNG signature
while [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done
printf '%s\n' "$1" > "$FAKE_ARG"
printf '\211PNG\r\n\032\nfake' > "$out"
EOF
printf '#!/bin/sh\necho "cannot render: no fonts" >&2\nexit 3\n' > "$TMP/bad/rsvg-convert"
chmod +x "$TMP/bin/rsvg-convert" "$TMP/bad/rsvg-convert"
FIG='$(touch pwned) fig'
OUTPUT=$(cd "$TMP/o u t" && FAKE_ARG="$TMP/svg-arg" PATH="$TMP/bin" "$ZINF" plot "$H" --png --out "$FIG" 2>&1); RC=$?
expect_ok "--png with a fake rsvg-convert"
png_sig "$TMP/o u t/$FIG.png" && [ "$(cat "$TMP/svg-arg")" = "$FIG.svg" ] && [ ! -e "$TMP/o u t/pwned" ] && pass ||
    fail "fake converter: no PNG '$FIG.png', or it got another SVG path, or a shell ran"
expect_has "fake converter: both files said" "wrote $FIG.svg" "wrote $FIG.png"
OUTPUT=$(PATH="$TMP/bad" "$ZINF" plot "$H" --out "$TMP/figs/b" 2>&1); RC=$?
expect_ok "a failing converter without --png: the SVG alone"
expect_has "a failing converter: one note" "zinf: note: no PNG:" "cannot render: no fonts"
[ -s "$TMP/figs/b.svg" ] && [ ! -e "$TMP/figs/b.png" ] && [ ! -e "$TMP/figs/b.png.tmp" ] && pass ||
    fail "a failing converter left a PNG or a .tmp, or no SVG"
OUTPUT=$(PATH="$TMP/bad" "$ZINF" plot "$H" --png --out "$TMP/figs/b" 2>&1); RC=$?
expect_err "a failing converter with --png" "--png:" "cannot render: no fonts"
OUTPUT=$(PATH="$TMP/none" "$ZINF" plot "$H" --out "$TMP/figs/n" 2>&1); RC=$?
expect_ok "no converter: the SVG alone"
[ "$(printf '%s\n' "$OUTPUT" | grep -c 'zinf: note: no PNG: neither rsvg-convert nor ImageMagick')" -eq 1 ] && pass ||
    fail "no converter: not one note line: $OUTPUT"
OUTPUT=$(PATH="$TMP/none" "$ZINF" plot "$H" --png --out "$TMP/figs/n" 2>&1); RC=$?
expect_err "no converter with --png" "--png: neither rsvg-convert nor ImageMagick's convert is on PATH" "$TMP/figs/n.svg"

# --- 7. errors: one line naming the file (and line) ---------------------------------------------
errline() { [ "$(printf '%s\n' "$OUTPUT" | grep -c 'zinf: error:')" -eq 1 ] && pass || fail "$1: not one error line"; }
run plot "$TMP/missing"
expect_err "a missing run" "zinf: error: $TMP/missing: No such file or directory"
errline "a missing run"
mkdir -p "$TMP/nometrics"
run plot "$TMP/nometrics"
expect_err "a directory without metrics.jsonl" "$TMP/nometrics/metrics.jsonl: No such file or directory"
printf '{"step": 1, "loss": 5.5, "lr": 0.001}\n{"step": 2, "loss": 5.4, "lr": 0.001}\n{"step": 3, "loss": 5.3, lr: 0.001}\n{"step": 4}\n' > "$TMP/bad.jsonl"
run plot "$TMP/bad.jsonl"
expect_err "a malformed line" "zinf: error: $TMP/bad.jsonl:3: not JSON"
errline "a malformed line"
printf '{"step": 1, "loss": "high"}\n' > "$TMP/str.jsonl"
run plot "$TMP/str.jsonl"
expect_err "a string loss" "$TMP/str.jsonl:1: \"loss\" is neither a number nor null"
printf '{"params_hash": "00", "mem_param": 1}\n' > "$TMP/nosteps.jsonl"
run plot "$TMP/nosteps.jsonl"
expect_err "no step lines" "$TMP/nosteps.jsonl: no step lines"
: > "$TMP/empty.jsonl"
run plot "$TMP/empty.jsonl"
expect_err "an empty file" "$TMP/empty.jsonl: no step lines"
run plot "$H" --out "$TMP/nodir/"
expect_err "--out DIR/ that is not a directory" "--out $TMP/nodir/: no such directory"
run plot "$TMP/r1" --colour red
expect_err "an unknown flag" "plot: unknown flag --colour"
run plot "$TMP/r1" --log_y sometimes
expect_err "a bad --log_y" "--log_y sometimes: expected auto, true or false"
run plot
expect_err "no run" "plot: no run given"
run plot --help
expect_ok "plot --help"
expect_has "plot --help lists the flags" "--out" "--title" "--png" "--log_y" "--help"
run --help
expect_has "zinf --help lists plot" "  plot " "zinf-plot(1)"

finish
