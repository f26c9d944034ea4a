#!/bin/sh
# A stop signal (SIGUSR1: Slurm's warning; SIGTERM: preemption) at any moment of a run ends it
# with status 75, which a job script requeues on:
#  1. as soon as zinf can catch it (during MPI_Init or the config, before any step): 75, no
#     checkpoint, no step; on one rank of two only, the other rank stops too;
#  2. during the start-up of a resumed run, before its checkpoint is loaded or while it loads (on
#     one rank of two): 75 without a save, `latest` still names the checkpoint it resumed from,
#     and the next run goes on from there to the losses and parameters of an uninterrupted run;
#  3. during a periodic save (on one rank of two): 75 right after that save, no step after it and
#     no second save; resuming gives the uninterrupted run's losses and parameters;
#  4. between the micro-batches of a step (gradient accumulation): 75 without finishing the step,
#     the state of the step before it saved (unless saved already, or no step was done), and
#     resuming gives the uninterrupted run's losses and parameters.
# The moments are chosen by watching the ranks in /proc (the signals they catch, the files they
# have open, the shards they have mapped) and holding a rank with SIGSTOP while its signal is
# sent, so that the signal lands where it should however fast or slow the machine is.
. "${top_srcdir:-.}/tests/mpi/lib.sh"

ZBIN=$(readlink -f "$ZINF")
make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
D="$TMP/add_train_*.bin"
# large enough that a save or a load lasts a good part of a second (a 51 MB checkpoint)
printf '{"n_layer": 4, "n_embd": 256, "n_head": 4, "vocab_size": 256, "n_positions": 32}\n' > "$TMP/m.json"
printf '{"train_batch_size": 4, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_max_lr": 0.003}},
 "zero_optimization": {"stage": 2}}\n' > "$TMP/ds.json"
# trn NP OUT STEPS [flags]: train under mpirun (NP 0: a singleton, without mpirun); output in
# $OUTPUT, status in $RC
trn() {
    local np=$1 out=$2 steps=$3; shift 3
    set -- train --model "$TMP/m.json" --data "$D" --max_length 32 --max_steps "$steps" --logging_steps 1 \
        --config "$TMP/ds.json" --seed 5 --out "$TMP/$out" "$@"
    if [ "$np" = 0 ]; then ${TRN_EXEC:-} "$ZINF" "$@"; else ${TRN_EXEC:-} "$MPIRUN" --oversubscribe -np "$np" "$ZINF" "$@"; fi
}
fg() { OUTPUT=$(trn "$@" 2>&1); RC=$?; }
# bg NP OUT STEPS [flags]: start it in the background; $BG its pid (mpirun's, or the singleton's:
# the subshell execs it), output in OUT.log
bg() { (TRN_EXEC=exec; trn "$@") > "$TMP/$2.log" 2>&1 & BG=$!; }
# ended: wait for $BG; its status in $RC and its output in $OUTPUT
ended() { wait "$BG"; RC=$?; OUTPUT=$(cat "$TMP/$1.log"); }

# rank_pid RANK: the pid of rank RANK of the run started by bg (a child of its mpirun)
rank_pid() {
    local p
    for p in $(pgrep -P "$BG"); do
        [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$ZBIN" ] || continue
        tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" || continue
        echo "$p"
        return 0
    done
}
# catches PID SIG: the process has a handler for signal number SIG
catches() {
    local m
    m=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null)
    [ -n "$m" ] && [ $(((0x$m >> ($2 - 1)) & 1)) = 1 ]
}
# has_open PID TEXT: one of the process's open files has TEXT in its name
has_open() { ls -l "/proc/$1/fd" 2>/dev/null | grep -qF -- "$2"; }
# poll SECONDS COMMAND...: until COMMAND succeeds (every 5 ms); false after SECONDS
poll() {
    local end=$(($(date +%s) + $1))
    shift
    while ! "$@"; do
        [ "$(date +%s)" -le $end ] || return 1
        sleep 0.005
    done
}
# pid_of RANK: wait (30 s at most) for that rank of the run started by bg, into $P
pid_of() {
    local end=$(($(date +%s) + 30))
    while :; do
        P=$(rank_pid "$1")
        [ -n "$P" ] && return 0
        [ "$(date +%s)" -le $end ] || { fail "rank $1 did not start within 30 s"; return 1; }
        sleep 0.005
    done
}
# hold_and_signal PID SIG: stop the process, send SIG (pending while it is stopped), let it go on
hold_and_signal() { kill -STOP "$1"; kill -"$2" "$1"; }
resume_it() { kill -CONT "$1"; }
# signal_in_file OUT RANK SIG FILE: once rank RANK of the run started by bg has FILE open, send it
# SIG while it is held (so that the signal lands while the file is open), then wait for the end
signal_in_file() {
    pid_of "$2"
    poll 120 has_open "$P" "$4" || fail "rank $2 never opened $4"
    hold_and_signal "$P" "$3"
    has_open "$P" "$4" && pass || fail "rank $2 had closed $4 when it was sent SIG$3"
    resume_it "$P"
    ended "$1"
}

# step_lines: the progress lines of steps in $OUTPUT
step_lines() { printf '%s\n' "$OUTPUT" | grep -c '^step '; }
steps() { metric "$TMP/$1/metrics.jsonl" step | tr '\n' ' '; }
losses() { metric "$TMP/$1/metrics.jsonl" loss | tr '\n' ' '; }
ckpts() { (cd "$TMP/$1" 2>/dev/null && ls -d checkpoint-* 2>/dev/null | tr '\n' ' '); }
# status WHAT WANT: the exit status of the last run is WANT
status() { [ "$RC" = "$2" ] && pass || { fail "$1: exit $RC, want $2"; printf '%s\n' "$OUTPUT" | tail -6 >&2; }; }

# goes_on OUT WHAT: the run stopped in OUT, resumed to step 4, has every step once and the losses
# and parameters of the uninterrupted run, bit for bit
goes_on() {
    fg 2 "$1" 4 --save_steps 0 --resume auto
    expect_ok "resumed $2"
    expect_has "resumed $2" "zinf: resumed from $TMP/$1/checkpoint-2.h5 after step 2"
    [ "$(steps "$1")" = "1 2 3 4 " ] && [ "$(losses "$1")" = "$REF_LOSSES" ] && [ "$(hash_of)" = "$REF_HASH" ] && pass ||
        fail "$2: steps $(steps "$1"), losses $(losses "$1") (want $REF_LOSSES), hash $(hash_of) (want $REF_HASH)"
}

# the reference: 4 uninterrupted steps
fg 2 ref 4 --save_steps 0
expect_ok "the uninterrupted run"
REF_HASH=$(hash_of)
REF_LOSSES=$(losses ref)
[ -n "$REF_HASH" ] && [ "$(steps ref)" = "1 2 3 4 " ] && pass || fail "the reference run: hash '$REF_HASH', steps $(steps ref)"

# --- 1. as soon as the signal can be caught ----------------------------------------------------
# a singleton (no mpirun), SIGUSR1 at the first moment its handler is there
bg 0 early 4 --save_steps 1
poll 30 catches $BG 10 || fail "zinf never caught SIGUSR1"
kill -USR1 $BG
ended early
status "SIGUSR1 at the start" 75
expect_has "SIGUSR1 at the start" \
    "stopped by signal 10 before step 1: no checkpoint written (no step done); requeue with --resume auto"
[ "$(step_lines)" = 0 ] && [ -z "$(ckpts early)" ] && [ ! -e "$TMP/early/latest" ] && pass ||
    fail "SIGUSR1 at the start: a step ran or a checkpoint was written: $(ckpts early)"

# two ranks, SIGTERM to rank 1 alone, at the first moment it catches it: rank 0 stops as well
bg 2 early2 4 --save_steps 1
pid_of 1
poll 30 catches "$P" 15 || fail "rank 1 never caught SIGTERM"
kill -TERM "$P"
ended early2
status "SIGTERM to rank 1 at the start" 75
expect_has "SIGTERM to rank 1 at the start" "stopped by signal 15 before step 1: no checkpoint written"
[ "$(step_lines)" = 0 ] && [ -z "$(ckpts early2)" ] && pass ||
    fail "SIGTERM at the start: a step ran or a checkpoint was written: $(ckpts early2)"

# --- 2. a resumed run's start-up: before the load, and during it -------------------------------
fg 2 ld 2 --save_steps 2
expect_ok "2 steps and a checkpoint"
[ "$(cat "$TMP/ld/latest" 2>/dev/null)" = checkpoint-2.h5 ] && pass || fail "no checkpoint-2.h5 named by latest"
cp -r "$TMP/ld" "$TMP/ld0"
# before the load: rank 0 held as soon as it catches SIGUSR1; when it has not mapped the shards
# yet, it is before the check that precedes the load (it may be past it on a slow machine: then
# the signal comes during the load, which is the case below)
bg 2 ld0 4 --save_steps 2 --resume auto
pid_of 0
poll 30 catches "$P" 10 || fail "rank 0 of the resumed run never caught SIGUSR1"
hold_and_signal "$P" USR1
early_enough=0
grep -qF add_train "/proc/$P/maps" 2>/dev/null || early_enough=1
resume_it "$P"
ended ld0
status "SIGUSR1 before the load" 75
if [ $early_enough = 1 ]; then
    echo "rank 0 was held before it mapped the shards: the signal came before the load"
    expect_has "SIGUSR1 before the load" "stopped by signal 10 during the start-up, before loading $TMP/ld0/checkpoint-2.h5: no checkpoint written; requeue with --resume auto"
    [ "$(count_lines 'resumed from')" = 0 ] && pass || fail "SIGUSR1 before the load: the checkpoint was loaded all the same"
else
    echo "rank 0 was held after it mapped the shards: the signal came before the load or during it"
    expect_has "SIGUSR1 (late) before the load" "stopped by signal 10 "
fi
[ "$(cat "$TMP/ld0/latest")" = checkpoint-2.h5 ] && [ "$(ckpts ld0)" = "checkpoint-2.h5 " ] && [ "$(steps ld0)" = "1 2 " ] &&
    pass || fail "SIGUSR1 before the load: latest $(cat "$TMP/ld0/latest"), $(ckpts ld0), steps $(steps ld0)"

# during the load, on rank 1 only: it is held while it has the checkpoint open, and signalled
bg 2 ld 4 --save_steps 2 --resume auto
signal_in_file ld 1 USR1 "$TMP/ld/checkpoint-2.h5"
status "SIGUSR1 to rank 1 during the load" 75
expect_has "SIGUSR1 during the load" "zinf: resumed from $TMP/ld/checkpoint-2.h5 after step 2" \
    "stopped by signal 10 before step 3: no checkpoint written (no step done since $TMP/ld/checkpoint-2.h5); requeue with --resume auto"
[ "$(step_lines)" = 0 ] && pass || fail "SIGUSR1 during the load: a step ran"
[ "$(cat "$TMP/ld/latest")" = checkpoint-2.h5 ] && [ "$(ckpts ld)" = "checkpoint-2.h5 " ] && [ "$(steps ld)" = "1 2 " ] &&
    pass || fail "SIGUSR1 during the load: latest $(cat "$TMP/ld/latest"), $(ckpts ld), steps $(steps ld)"
# the requeued run goes on from checkpoint-2.h5 to the uninterrupted run's numbers
goes_on ld "after the signal during the load"

# saved2 OUT WHAT: the run stopped after two steps, with checkpoint-2.h5 its one checkpoint, named
# by latest, and steps 1 and 2 logged
saved2() {
    [ "$(step_lines)" = 2 ] && [ "$(ckpts "$1")" = "checkpoint-2.h5 " ] && [ "$(cat "$TMP/$1/latest")" = checkpoint-2.h5 ] &&
        [ "$(steps "$1")" = "1 2 " ] && pass ||
        fail "$2: $(ckpts "$1"), latest $(cat "$TMP/$1/latest"), steps $(steps "$1")"
}

# --- 3. during a periodic save, on rank 1 only: stop right after it ----------------------------
bg 2 sv 1000 --save_steps 2
signal_in_file sv 1 TERM "$TMP/sv/checkpoint-2.h5" # the .tmp being written
status "SIGTERM to rank 1 during the save of step 2" 75
expect_has "SIGTERM during the save" "saved $TMP/sv/checkpoint-2.h5" \
    "stopped by signal 15 after step 2, with a checkpoint: requeue with --resume auto"
saved2 sv "SIGTERM during the save of step 2"
goes_on sv "after the signal during the save"

# --- 4. between the micro-batches of a step: the step is abandoned --------------------------------
# gradient accumulation 4 (16 sequences a step, 2 per micro-batch on 2 ranks), ZeRO-3 with the
# optimizer in host memory, whose update runs on into the next step's forwards: the stop comes
# after micro-batch M of step S (ZINF_FAULT kind=term sends SIGTERM to one rank there), the step
# is dropped with nothing updated, and the state of the step before it is what a checkpoint holds
printf '{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}\n' > "$TMP/ga.json"
mstep() { # mstep OUT STEPS FAULT [flags]: two ranks, gradient accumulation 4; output in $OUTPUT
    local out=$1 steps=$2 f=$3; shift 3
    OUTPUT=$(ZINF_FAULT=$f "$MPIRUN" --oversubscribe -np 2 "$ZINF" train --model test-mini --data "$D" \
        --max_length 32 --max_steps "$steps" --logging_steps 1 --config "$TMP/ga.json" --seed 5 --out "$TMP/$out" "$@" 2>&1)
    RC=$?
}
mstep gref 4 "" --save_steps 0
expect_ok "4 uninterrupted steps of 4 micro-batches"
GREF_HASH=$(hash_of)
GREF_LOSSES=$(losses gref)
# goes_on_g OUT CKPT WHAT: resumed from CKPT to step 4, the uninterrupted run's losses and bits
goes_on_g() {
    mstep "$1" 4 "" --save_steps 0 --resume auto
    expect_has "resumed $3" "zinf: resumed from $TMP/$1/$2"
    [ "$(losses "$1")" = "$GREF_LOSSES" ] && [ "$(hash_of)" = "$GREF_HASH" ] && [ -n "$GREF_HASH" ] && pass ||
        fail "$3: losses $(losses "$1") (want $GREF_LOSSES), hash $(hash_of) (want $GREF_HASH)"
}
# after micro-batch 2 of step 3, on rank 1: the end of step 2 is saved
mstep mid 4 "rank=1,step=3,kind=term,micro=2" --save_steps 0
status "SIGTERM after micro-batch 2 of step 3" 75
expect_has "SIGTERM after micro-batch 2 of step 3" "saved $TMP/mid/checkpoint-2.h5" \
    "stopped by signal 15 during step 3, after micro-batch 2 of 4: the step is abandoned; with a checkpoint of step 2: requeue with --resume auto"
saved2 mid "SIGTERM in step 3"
goes_on_g mid checkpoint-2.h5 "after a stop in the middle of step 3"
# after micro-batch 3 of step 3, on rank 0, where step 2's end was saved already: no second save
mstep mid2 4 "rank=0,step=3,kind=term,micro=3" --save_steps 2
status "SIGTERM after micro-batch 3 of step 3, step 2 saved" 75
expect_has "SIGTERM in step 3, step 2 saved" \
    "stopped by signal 15 during step 3, after micro-batch 3 of 4: the step is abandoned; checkpoint-2.h5, saved at that step's end, holds the state: requeue with --resume auto"
[ "$(count_lines "saved $TMP/mid2/checkpoint")" = 1 ] && [ "$(ckpts mid2)" = "checkpoint-2.h5 " ] && pass ||
    fail "SIGTERM in step 3 with step 2 saved: $(ckpts mid2), $(count_lines "saved $TMP/mid2/checkpoint") saves"
goes_on_g mid2 checkpoint-2.h5 "after a stop in step 3 with step 2 saved"
# in the run's first step: nothing done, nothing saved
mstep mid3 4 "rank=1,step=1,kind=term,micro=1" --save_steps 1
status "SIGTERM after micro-batch 1 of step 1" 75
expect_has "SIGTERM in step 1" \
    "stopped by signal 15 during step 1, after micro-batch 1 of 4: the step is abandoned; no checkpoint written (no step done); requeue with --resume auto"
[ "$(step_lines)" = 0 ] && [ -z "$(ckpts mid3)" ] && [ ! -e "$TMP/mid3/latest" ] && pass ||
    fail "SIGTERM in step 1: a step ran or a checkpoint was written: $(ckpts mid3)"
# --no_signal_save: stopped, and the last periodic checkpoint stays the last
mstep mid4 4 "rank=1,step=4,kind=term,micro=1" --save_steps 2 --no_signal_save
status "SIGTERM in step 4, --no_signal_save" 75
expect_has "SIGTERM in step 4, --no_signal_save" \
    "stopped by signal 15 during step 4, after micro-batch 1 of 4: the step is abandoned; no checkpoint written (--no_signal_save): a requeue continues from the last one"
[ "$(ckpts mid4)" = "checkpoint-2.h5 " ] && [ "$(steps mid4)" = "1 2 3 " ] && pass ||
    fail "SIGTERM in step 4, --no_signal_save: $(ckpts mid4), steps $(steps mid4)"
# the injection itself: kind term needs its micro-batch, the others take none
mstep bad 1 "rank=1,step=1,kind=term"
expect_err "ZINF_FAULT kind=term without micro" "kind term takes micro=M (M >= 1), the others none"
mstep bad 1 "rank=1,step=1,kind=fail,micro=2"
expect_err "ZINF_FAULT kind=fail with micro" "kind term takes micro=M (M >= 1), the others none"

finish
