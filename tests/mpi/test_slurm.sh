#!/bin/sh
# The Slurm batch scripts of jobs/slurm/ on a real Slurm cluster of one node, private to this
# test (its own munged, slurmctld and slurmd, configuration, ports and state under $TMP):
#  1. train.sbatch (srun --mpi=pmix, 2 ranks) gets Slurm's warning signal mid-run: the job
#     checkpoints, zinf exits 75, the script requeues the job, Slurm starts it again, it resumes
#     from that checkpoint and finishes; every logged loss and the final parameters equal those
#     of the same training run straight under mpirun, bit for bit.
#  2. train-multinode-mpirun.sbatch (mpirun inside the allocation) with ZINF_MAX_REQUEUES=0:
#     the signal reaches the ranks through mpirun, and a 75 past the cap is not requeued.
#  3. train-multinode.sbatch (srun) finishes that job's run from its checkpoint, to the
#     reference's parameters.
#  4. A job the user cancels checkpoints on its SIGTERM, and stays cancelled.
#  5. train-multinode-mpirun.sbatch passes a SIGTERM of the batch shell on to its ranks as SIGUSR1.
#  6. A launcher that exits 0 without running zinf (no OUT/finished) fails the job, with a line.
# Before the cluster (0, under bash alone, with stand-ins for srun and scontrol): the ranks per
# node, a ZINF_MAX_REQUEUES that is no count refused before any launch, OUT/finished telling a
# finished run from an srun that exited 0 without one, and a stop before the launch that
# launches nothing and requeues as zinf's 75 would.
# Skipped (77) where it cannot run: not root, Slurm or munge missing (jobs/install-deps.sh
# installs them as root), or the daemons do not come up here.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
PATH=$PATH:/usr/sbin:/sbin
JOBS=$(cd "${top_srcdir:-.}/jobs" && pwd)

# ---- 0. zinf_job_setup alone, under bash with Slurm's variables and no Slurm ------------------
# setup_ranks VAR=VALUE...: its log line and ZINF_RANKS_PER_NODE, or its refusal
setup_ranks() {
    env -i PATH="$PATH" SLURM_JOB_ID=1 "$@" bash -c '. "$1/slurm/requeue.sh"; zinf_job_setup; echo "ranks=$ZINF_RANKS_PER_NODE"' _ "$JOBS" 2>&1
}
# --ntasks=6 on 3 nodes placed 2 per node (sbatch(1): SLURM_TASKS_PER_NODE=2(x3)): 2 ranks a node
OUTPUT=$(setup_ranks SLURM_JOB_NUM_NODES=3 SLURM_NTASKS=6 'SLURM_TASKS_PER_NODE=2(x3)')
expect_has "SLURM_TASKS_PER_NODE=2(x3)" "ranks=2"
# --ntasks=6 on 2 nodes placed 4 and 2: refused, not started as 3 a node
OUTPUT=$(setup_ranks SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=6 SLURM_TASKS_PER_NODE=4,2)
expect_has "SLURM_TASKS_PER_NODE=4,2" "placed the tasks unevenly"
[ "$(count_lines ranks=)" -eq 0 ] && pass || fail "zinf_job_setup took SLURM_TASKS_PER_NODE=4,2 as $OUTPUT"

# ---- 0b. the batch script under bash, with stand-ins for srun and scontrol (no Slurm) ----------
# FAKE/srun logs its command line to FAKE_LOG and runs the command after its options (one task),
# or with FAKE_SRUN=noop says "task launch failed" and exits 0, as srun once did on a requeued
# start; FAKE/scontrol logs its command line, and for `show job` prints Command=FAKE_CMD, first
# sending FAKE_SIG (when set) to the batch shell: a signal before the script sources requeue.sh
FAKE=$TMP/fake
mkdir -p "$FAKE"
cat > "$FAKE/srun" <<'EOF'
#!/bin/bash
echo "srun $*" >> "$FAKE_LOG"
while [ $# -gt 0 ]; do case $1 in --*) shift ;; *) break ;; esac; done
if [ "${FAKE_SRUN:-}" = noop ]; then echo "srun: error: task launch failed" >&2; exit 0; fi
exec "$@"
EOF
cat > "$FAKE/scontrol" <<'EOF'
#!/bin/bash
echo "scontrol $*" >> "$FAKE_LOG"
if [ "$1 $2" = "show job" ]; then
    # the batch shell: the parent of the command substitution that runs this
    if [ -n "${FAKE_SIG:-}" ]; then kill -"$FAKE_SIG" "$(awk '{ print $4 }' "/proc/$PPID/stat")"; fi
    echo "   Command=$FAKE_CMD"
fi
EOF
chmod +x "$FAKE/srun" "$FAKE/scontrol"
ZABS=$(cd "$(dirname "$ZINF")" && pwd)/$(basename "$ZINF")
# job_run FLAGS...: train.sbatch FLAGS under bash as job 7, one task, environment VAR=VALUE words
# from JOBENV; its output in OUTPUT, its status in RC, what it ran in $TMP/fake.log
job_run() {
    : > "$TMP/fake.log"
    # shellcheck disable=SC2086 # JOBENV is words
    OUTPUT=$(cd "$TMP" && env -i PATH="$FAKE:$PATH" HOME="$TMP" FAKE_LOG="$TMP/fake.log" FAKE_CMD="$JOBS/slurm/train.sbatch" \
        SLURM_JOB_ID=7 SLURM_SUBMIT_DIR="$TMP" SLURM_NTASKS_PER_NODE=1 ZINF="$ZABS" OMP_NUM_THREADS=1 \
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 \
        $JOBENV bash "$JOBS/slurm/train.sbatch" "$@" 2>&1)
    RC=$?
}
launched() { grep -c '^srun ' "$TMP/fake.log"; }
make_text "$TMP/sm.txt" 300
run data --input "$TMP/sm.txt" --out "$TMP/sm"
expect_ok "zinf data (the stand-in srun's runs)"
set -- --model test-mini --data "$TMP/sm_train_*.bin" --max_length 32 --max_steps 3 --save_steps 2
# zinf finishes: its mark names the step, and the script says so
JOBENV= job_run "$@" --out "$TMP/j0"
expect_has "srun stand-in, zinf runs to the end" \
    "zinf-job 7: zinf finished ($TMP/j0/finished: {\"status\": \"finished\", \"step\": 3, \"start_step\": 0})"
[ "$RC" -eq 0 ] && [ "$(launched)" -eq 1 ] && pass || fail "a finished run: status $RC, $(launched) launches; want 0, 1"
# again with --output_dir=: resumed at its last step, nothing to train, finished all the same
JOBENV= job_run "$@" --output_dir="$TMP/j0"
expect_has "srun stand-in, --output_dir=, nothing left to train" \
    "zinf-job 7: zinf finished ($TMP/j0/finished: {\"status\": \"finished\", \"step\": 3, \"start_step\": 3})"
# srun exits 0 without starting zinf, with the previous start's mark in --out: a failure
JOBENV=FAKE_SRUN=noop job_run "$@" --out "$TMP/j0"
expect_has "srun stand-in whose launch failed" \
    "zinf-job 7: srun exited 0 but zinf wrote no $TMP/j0/finished in this start: its ranks did not run to the end (a launch that failed?); exiting 1"
[ "$RC" -eq 1 ] && [ "$(count_lines 'zinf finished')" -eq 0 ] && [ ! -e "$TMP/j0/finished" ] && pass ||
    fail "srun 0 without zinf: status $RC, output: $OUTPUT"
# a ZINF_MAX_REQUEUES that is no count is refused before anything runs
for v in ten "" -1 3x 1234567890; do
    JOBENV="ZINF_MAX_REQUEUES=$v" job_run "$@" --out "$TMP/j1"
    expect_has "ZINF_MAX_REQUEUES=$v" "zinf-job 7: ZINF_MAX_REQUEUES='$v' is not a count of requeues (0 to 999999999)"
    [ "$RC" -eq 2 ] && [ "$(launched)" -eq 0 ] && [ ! -e "$TMP/j1" ] && pass || fail "ZINF_MAX_REQUEUES=$v: status $RC, $(launched) launches; want 2, 0"
done
for v in 0 12; do
    OUTPUT=$(setup_ranks SLURM_NTASKS_PER_NODE=1 ZINF_MAX_REQUEUES=$v)
    expect_has "ZINF_MAX_REQUEUES=$v" "ranks=1"
done
# a stop before the launch: nothing is launched, and the job is requeued as after zinf's 75 (or,
# past the cap, ends with 75): during the script's own start (before it sources requeue.sh) ...
for sig in USR1 TERM; do
    JOBENV=FAKE_SIG=$sig job_run "$@" --out "$TMP/j2"
    expect_has "SIG$sig before requeue.sh" "zinf-job 7: got SIG$sig before the launcher runs: a stop is pending" \
        "zinf-job 7: not launching srun: a stop came before the launch; as zinf does on a stop during its start-up, the status is 75" \
        "zinf-job 7: zinf stopped on a signal and exited 75: asking Slurm to requeue the job (requeue 1 of at most 10)"
    [ "$RC" -eq 0 ] && [ "$(launched)" -eq 0 ] && [ "$(grep -c '^scontrol requeue Incomplete 7$' "$TMP/fake.log")" -eq 1 ] && pass ||
        fail "SIG$sig before the launch: status $RC, $(launched) launches, log: $(cat "$TMP/fake.log")"
done
JOBENV="FAKE_SIG=USR1 SLURM_RESTART_COUNT=2 ZINF_MAX_REQUEUES=2" job_run "$@" --out "$TMP/j2"
expect_has "SIGUSR1 before the launch, past the cap" "not launching srun" "the job was requeued 2 times already (ZINF_MAX_REQUEUES=2): not requeueing"
[ "$RC" -eq 75 ] && [ "$(launched)" -eq 0 ] && pass || fail "a stop before the launch past the cap: status $RC, $(launched) launches; want 75, 0"
# ... and after it sourced requeue.sh, before the launch line
OUTPUT=$(env -i PATH="$FAKE:$PATH" FAKE_LOG="$TMP/fake.log" SLURM_JOB_ID=7 SLURM_NTASKS_PER_NODE=1 ZINF="$ZABS" \
    bash -c '. "$1/slurm/requeue.sh"; kill -TERM $$; zinf_job_srun --out "$2"' _ "$JOBS" "$TMP/j3" 2>&1)
RC=$?
expect_has "SIGTERM after requeue.sh, before the launch" "got SIGTERM before the launcher runs" "not launching srun" "asking Slurm to requeue"
[ "$RC" -eq 0 ] && pass || fail "SIGTERM before the launch: status $RC; want 0"
STEPS=400 # long enough (several seconds) for the signal to land mid-run

skip() { echo "$(basename "$0"): skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "the Slurm daemons need root"
for b in munged slurmctld slurmd sbatch scontrol scancel squeue sinfo srun; do
    command -v "$b" > /dev/null || skip "$b is missing (jobs/install-deps.sh installs slurmctld slurmd slurm-client munge as root)"
done
case $ZINF in /*) ;; *) ZINF=$(pwd)/$ZINF ;; esac
export ZINF

# Stop every daemon this test started (by the pids they wrote) and remove $TMP, on every exit.
stop_pid() { # stop_pid PIDFILE
    local p
    p=$(cat "$1" 2>/dev/null) || return 0
    [ -n "$p" ] || return 0
    kill "$p" 2>/dev/null || return 0
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || return 0; sleep 0.3; done
    kill -KILL "$p" 2>/dev/null
}
cleanup() {
    set +e
    # jobs first (a client command waits long for a controller that is gone: ask only a live one)
    if [ -s "$TMP/slurmctld.pid" ] && kill -0 "$(cat "$TMP/slurmctld.pid")" 2>/dev/null; then
        jobs_left=$(squeue -h -o %i 2>/dev/null)
        if [ -n "$jobs_left" ]; then
            # shellcheck disable=SC2086 # job ids are words
            scancel --full $jobs_left 2>/dev/null
            for _ in $(seq 40); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.25; done
        fi
    fi
    stop_pid "$TMP/slurmd.pid"
    stop_pid "$TMP/slurmctld.pid"
    stop_pid "$TMP/munge/munged.pid"
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# port_free N: no TCP socket here, listening or connected, IPv4 or IPv6, has the local port N
port_free() {
    ! awk -v p="$(printf ':%04X' "$1")" 'FNR > 1 && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
# pick_ports TRY: PORT and PORT+1 free, below the kernel's range of ephemeral ports (whose ports
# any outgoing connection may hold by the time a daemon binds), from a start that differs by run
EPHEMERAL=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
pick_ports() {
    PORT=$((10000 + ($$ * 7 + $1 * 101) % (EPHEMERAL - 10002)))
    while ! port_free $PORT || ! port_free $((PORT + 1)); do PORT=$((10000 + (PORT - 9998) % (EPHEMERAL - 10002))); done
}
# alive PIDFILE: the daemon that wrote PIDFILE runs (or has not written it yet)
alive() { [ ! -s "$1" ] || kill -0 "$(cat "$1")" 2>/dev/null; }
# last_error: the last error line of the Slurm daemons' logs
last_error() { grep -h -E 'error|fatal' "$TMP/log/slurmctld.log" "$TMP/log/slurmd.log" "$TMP"/log/*.out 2>/dev/null | tail -1; }

# ---- the cluster: munged on a private socket and key, then slurmctld and one slurmd ----------
H=$(hostname -s)
# the node's CPUs: nproc, which would count OMP_NUM_THREADS instead; at least the 2 the jobs ask
# for (config_overrides makes slurmd take the configured count as it is)
CPUS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
[ "$CPUS" -ge 2 ] || CPUS=2
mkdir -p "$TMP/munge" "$TMP/state" "$TMP/spool" "$TMP/log"
chmod 700 "$TMP/munge"
dd if=/dev/urandom of="$TMP/munge/munge.key" bs=1024 count=1 2> /dev/null
chmod 400 "$TMP/munge/munge.key"
munged --force --socket="$TMP/munge/sock" --key-file="$TMP/munge/munge.key" --pid-file="$TMP/munge/munged.pid" \
    --log-file="$TMP/munge/munged.log" --seed-file="$TMP/munge/seed" > "$TMP/log/munged.out" 2>&1 ||
    skip "munged does not start here: $(tail -1 "$TMP/munge/munged.log" 2>/dev/null || cat "$TMP/log/munged.out")"
export SLURM_CONF="$TMP/slurm.conf"

# start_slurm: write slurm.conf for ports PORT and PORT+1, start slurmctld and slurmd, and wait
# (30 s at most, by the clock: a client command may wait 10 s for a controller that is not
# there) for the node to be idle; false, with both daemons stopped, when that does not happen
start_slurm() {
    # cred_expire is also how long a requeued job waits before it may start again (default
    # 120 s); sched_interval how often the scheduler looks at pending jobs (default 60 s)
    cat > "$SLURM_CONF" <<EOF
ClusterName=zinftest
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$TMP/munge/sock,cred_expire=5
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd.pid
SlurmctldLogFile=$TMP/log/slurmctld.log
SlurmdLogFile=$TMP/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobRequeue=1
ReturnToService=2
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
KillWait=5
MinJobAge=600
NodeName=$H NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=zinf Nodes=$H Default=YES MaxTime=INFINITE State=UP
EOF
    local end=$(($(date +%s) + 30))
    if slurmctld -f "$SLURM_CONF" > "$TMP/log/slurmctld.out" 2>&1 &&
        slurmd -f "$SLURM_CONF" -N "$H" > "$TMP/log/slurmd.out" 2>&1; then
        while [ "$(date +%s)" -lt $end ] && alive "$TMP/slurmctld.pid" && alive "$TMP/slurmd.pid"; do
            [ "$(sinfo -h -n "$H" -o %t 2>/dev/null)" = idle ] && return 0
            sleep 0.2
        done
    fi
    stop_pid "$TMP/slurmd.pid"
    stop_pid "$TMP/slurmctld.pid"
    rm -f "$TMP/slurmd.pid" "$TMP/slurmctld.pid"
    return 1
}
# another program may take a port between the look and the bind: then two more tries elsewhere
for try in 1 2 3; do
    pick_ports $try
    start_slurm && break
    case $(last_error) in *"Address already in use"*) [ $try -lt 3 ] && continue ;; esac
    skip "the Slurm daemons do not come up here: $(last_error)"
done
pass

# ---- data, config and the reference: the same training run under mpirun, not under Slurm -----
make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
# ZeRO stage 2 with a warmup that does not depend on the run length
printf '{"train_batch_size": 12, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 20, "warmup_max_lr": 0.003}},
 "zero_optimization": {"stage": 2}}\n' > "$TMP/ds.json"
set -- --model test-mini --data "$TMP/add_train_*.bin" --max_length 32 --max_steps $STEPS --logging_steps 1 \
    --config "$TMP/ds.json" --seed 5 --save_steps 100
mpi 2 train "$@" --out "$TMP/ref"
expect_ok "reference run under mpirun"
REF_HASH=$(sed -n 's/.*"params_hash": *"\([0-9a-f]*\)".*/\1/p' "$TMP/ref/metrics.jsonl")
[ -n "$REF_HASH" ] && pass || fail "the reference run's metrics.jsonl has no params_hash"

# steps DIR: the steps of DIR/metrics.jsonl on one line; losses DIR: "step loss" lines
steps() { metric "$TMP/$1/metrics.jsonl" step | tr '\n' ' '; }
losses() { sed -n 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/p' "$TMP/$1/metrics.jsonl"; }
phash() { sed -n 's/.*"params_hash": *"\([0-9a-f]*\)".*/\1/p' "$TMP/$1/metrics.jsonl"; }
# jobfield J KEY: KEY=value of scontrol show job J
jobfield() { scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
# wait_for SECONDS COMMAND...: poll until COMMAND succeeds; false after SECONDS
wait_for() {
    local n=$(($1 * 5))
    shift
    while ! "$@"; do
        n=$((n - 1))
        [ $n -gt 0 ] || return 1
        sleep 0.2
    done
}
# give_up WHAT: a job did not get where it should; say why Slurm thinks so, and stop the test
give_up() {
    fail "$1"
    echo "--- job $J: $(scontrol show job "$J" 2>/dev/null | grep -o 'JobState=[^ ]* Reason=[^ ]*')" >&2
    for f in "$TMP/job$N.out" "$TMP/log/slurmctld.log" "$TMP/log/slurmd.log"; do
        [ -f "$f" ] && { echo "--- $f:" >&2; tail -8 "$f" >&2; }
    done
    finish
    exit 1
}
logged_steps_ge() { [ "$(metric "$TMP/$1/metrics.jsonl" step 2>/dev/null | wc -l)" -ge "$2" ]; }
# job_state_is J GLOB...: job J's state matches one of the GLOBs
job_state_is() {
    local st g
    st=$(jobfield "$1" JobState)
    shift
    for g in "$@"; do
        # shellcheck disable=SC2254 # the argument is a pattern
        case $st in $g) return 0 ;; esac
    done
    return 1
}
ENDED="COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL OUT_OF_MEMORY BOOT_FAIL DEADLINE PREEMPTED"
# stopped_at OUTFILE: the step of "stopped by signal N after step S" in a job's output
stopped_at() { sed -n 's/^stopped by signal [0-9]* after step \([0-9]*\),.*/\1/p' "$1" | head -1; }
show_tail() { echo "--- $1:" >&2; tail -15 "$1" >&2; }

cd "$TMP" || exit 1
# ---- 1. warning signal -> checkpoint -> exit 75 -> requeue -> --resume auto -> done ---------
N=1
J=$(sbatch --parsable --ntasks-per-node=2 --output="$TMP/job1.out" "$JOBS/slurm/train.sbatch" "$@" --out "$TMP/run1")
J=${J%%;*}
[ -n "$J" ] && pass || fail "sbatch train.sbatch gave no job id"
wait_for 60 logged_steps_ge run1 5 || give_up "job $J logged no 5 steps in 60 s"
# what --signal=B:USR1@T sends before the time limit: SIGUSR1 to the batch shell alone
scancel --batch --signal=USR1 "$J"
wait_for 30 job_state_is "$J" 'PENDING*' 'REQUEUE*' || give_up "job $J was not requeued within 30 s of the signal"
S=$(stopped_at "$TMP/job1.out")
# right after the stop, before the requeued start: the checkpoint of step S is the latest
if [ -n "$S" ] && [ -f "$TMP/run1/checkpoint-$S.h5" ] && [ "$(cat "$TMP/run1/latest")" = "checkpoint-$S.h5" ]; then
    pass
else
    fail "job $J stopped at step '$S' but latest is '$(cat "$TMP/run1/latest" 2>/dev/null)'"; show_tail "$TMP/job1.out"
fi
[ -n "$S" ] && [ "$S" -lt $STEPS ] && pass || fail "the signal did not stop job $J before its last step (stopped at '$S')"
wait_for 60 job_state_is "$J" $ENDED || give_up "job $J did not finish within 60 s of its requeue"
OUTPUT=$(cat "$TMP/job1.out")
expect_has "job $J: first start" "zinf-job $J: start 1 (SLURM_RESTART_COUNT=0)" "got SIGUSR1" \
    "stopped by signal 10 after step $S, with a checkpoint" \
    "zinf-job $J: zinf stopped on a signal and exited 75: asking Slurm to requeue the job (requeue 1 of at most 10)"
expect_has "job $J: requeued start" "zinf-job $J: start 2 (SLURM_RESTART_COUNT=1)" \
    "zinf: resumed from $TMP/run1/checkpoint-$S.h5 after step $S" "step   $STEPS/$STEPS" \
    "zinf-job $J: zinf finished ($TMP/run1/finished: {\"status\": \"finished\", \"step\": $STEPS, \"start_step\": $S})"
[ "$(count_lines 'zinf-job '"$J"': start')" -eq 2 ] && pass || fail "job $J started $(count_lines "zinf-job $J: start") times, not twice"
[ "$(jobfield "$J" JobState)" = COMPLETED ] && [ "$(jobfield "$J" ExitCode)" = 0:0 ] && [ "$(jobfield "$J" Restarts)" = 1 ] &&
    pass || { fail "job $J: state $(jobfield "$J" JobState), exit code $(jobfield "$J" ExitCode), restarts $(jobfield "$J" Restarts); want COMPLETED, 0:0, 1"; show_tail "$TMP/job1.out"; }
# the requeued job's record: every step once, and the losses and parameters of the reference
[ "$(steps run1)" = "$(seq $STEPS | tr '\n' ' ')" ] && pass || fail "job $J: metrics.jsonl steps are not 1..$STEPS once each"
losses ref > "$TMP/ref.losses"
if [ "$(wc -l < "$TMP/ref.losses")" -eq $STEPS ] && [ "$(losses run1)" = "$(cat "$TMP/ref.losses")" ]; then pass; else
    fail "job $J: the losses (left) differ from the uninterrupted run's (right):"
    losses run1 | diff - "$TMP/ref.losses" | head -6 >&2
fi
[ "$(phash run1)" = "$REF_HASH" ] && pass || fail "job $J: params_hash $(phash run1), the uninterrupted run's $REF_HASH"

# ---- 2. mpirun inside the allocation; a 75 past ZINF_MAX_REQUEUES is passed through ------------
# mpirun_stop N SIG FLAGS...: job N, train-multinode-mpirun.sbatch FLAGS --out $TMP/runN with
# ZINF_MAX_REQUEUES=0, gets SIG in its batch shell alone after 5 steps; J, S (the step it stopped
# after) and OUTPUT (its output) once it has ended
mpirun_stop() {
    N=$1
    local sig=$2
    shift 2
    J=$(ZINF_MAX_REQUEUES=0 sbatch --parsable --nodes=1 --ntasks-per-node=2 --output="$TMP/job$N.out" \
        "$JOBS/slurm/train-multinode-mpirun.sbatch" "$@" --out "$TMP/run$N")
    J=${J%%;*}
    wait_for 60 logged_steps_ge "run$N" 5 || give_up "job $J logged no 5 steps in 60 s"
    scancel --batch --signal="$sig" "$J"
    wait_for 30 job_state_is "$J" $ENDED || give_up "job $J did not end within 30 s of SIG$sig"
    S=$(stopped_at "$TMP/job$N.out")
    OUTPUT=$(cat "$TMP/job$N.out")
}
mpirun_stop 2 USR1 "$@"
expect_has "job $J (mpirun)" "got SIGUSR1" "stopped by signal 10 after step $S" \
    "zinf stopped on a signal and exited 75, but the job was requeued 0 times already (ZINF_MAX_REQUEUES=0): not requeueing"
[ "$(jobfield "$J" JobState)" = FAILED ] && [ "$(jobfield "$J" ExitCode)" = 75:0 ] && [ "$(jobfield "$J" Restarts)" = 0 ] &&
    pass || { fail "job $J: state $(jobfield "$J" JobState), exit code $(jobfield "$J" ExitCode), restarts $(jobfield "$J" Restarts); want FAILED, 75:0, 0"; show_tail "$TMP/job2.out"; }
[ -n "$S" ] && [ "$(cat "$TMP/run2/latest" 2>/dev/null)" = "checkpoint-$S.h5" ] && pass ||
    fail "job $J stopped at step '$S', latest is '$(cat "$TMP/run2/latest" 2>/dev/null)'"

# ---- 3. srun on the nodes of the allocation, resubmitted by hand: goes on from that checkpoint -
# (from a copy of jobs/ whose path has a space: the scripts find requeue.sh from the path the
# job was submitted as, which scontrol show job prints whole)
N=3
mkdir -p "$TMP/a b" && cp -r "$JOBS" "$TMP/a b/jobs"
J=$(sbatch --parsable --nodes=1 --ntasks-per-node=2 --output="$TMP/job3.out" "$TMP/a b/jobs/slurm/train-multinode.sbatch" "$@" --out "$TMP/run2")
J=${J%%;*}
wait_for 60 job_state_is "$J" $ENDED || give_up "job $J did not end within 60 s"
OUTPUT=$(cat "$TMP/job3.out")
expect_has "job $J (srun, resubmitted)" "zinf: resumed from $TMP/run2/checkpoint-$S.h5 after step $S" \
    "zinf-job $J: zinf finished ($TMP/run2/finished: {\"status\": \"finished\", \"step\": $STEPS, \"start_step\": $S})"
[ "$(jobfield "$J" JobState)" = COMPLETED ] && pass || { fail "job $J: state $(jobfield "$J" JobState)"; show_tail "$TMP/job3.out"; }
[ "$(steps run2)" = "$(seq $STEPS | tr '\n' ' ')" ] && [ "$(losses run2)" = "$(cat "$TMP/ref.losses")" ] && [ "$(phash run2)" = "$REF_HASH" ] &&
    pass || fail "jobs 2 and 3 together: steps, losses or parameters differ from the uninterrupted run's"

# ---- 4. a job the user cancels checkpoints (SIGTERM) but is not requeued ---------------------
N=4
J=$(sbatch --parsable --ntasks-per-node=2 --output="$TMP/job4.out" "$JOBS/slurm/train.sbatch" "$@" --out "$TMP/run4")
J=${J%%;*}
wait_for 60 logged_steps_ge run4 5 || give_up "job $J logged no 5 steps in 60 s"
scancel "$J"
# until Slurm is done with it: neither pending (requeued), running nor completing
wait_for 30 eval '[ -z "$(squeue -h -j "$J" -o %T 2>/dev/null)" ]' || give_up "job $J was still known to squeue 30 s after scancel"
S=$(stopped_at "$TMP/job4.out")
OUTPUT=$(cat "$TMP/job4.out")
expect_has "job $J (cancelled)" "got SIGTERM" "stopped by signal"
[ "$(jobfield "$J" JobState)" = CANCELLED ] && [ "$(jobfield "$J" Restarts)" = 0 ] && [ "$(count_lines "zinf-job $J: start")" -eq 1 ] &&
    pass || { fail "job $J after scancel: state $(jobfield "$J" JobState), restarts $(jobfield "$J" Restarts); want CANCELLED, 0"; show_tail "$TMP/job4.out"; }
[ -n "$S" ] && [ "$(cat "$TMP/run4/latest" 2>/dev/null)" = "checkpoint-$S.h5" ] && pass ||
    fail "job $J cancelled at step '$S', latest is '$(cat "$TMP/run4/latest" 2>/dev/null)'"

# ---- 5. mpirun script: SIGTERM to the batch shell alone reaches the ranks as the script's SIGUSR1 -
# (mpirun answers a SIGTERM of its own by killing its ranks: "stopped by signal 10" shows that the
# shell passed it on as SIGUSR1, and that mpirun was not sent the SIGTERM)
mpirun_stop 5 TERM "$@"
expect_has "job $J (mpirun, SIGTERM)" "zinf-job $J: got SIGTERM: asking the ranks to finish their step and checkpoint" \
    "stopped by signal 10 after step $S, with a checkpoint" \
    "zinf stopped on a signal and exited 75, but the job was requeued 0 times already (ZINF_MAX_REQUEUES=0): not requeueing"
[ "$(jobfield "$J" JobState)" = FAILED ] && [ "$(jobfield "$J" ExitCode)" = 75:0 ] && [ -n "$S" ] &&
    [ "$(cat "$TMP/run5/latest" 2>/dev/null)" = "checkpoint-$S.h5" ] && [ ! -e "$TMP/run5/finished" ] && pass ||
    { fail "job $J after SIGTERM: state $(jobfield "$J" JobState), exit code $(jobfield "$J" ExitCode), stopped at '$S', latest '$(cat "$TMP/run5/latest" 2>/dev/null)'; want FAILED, 75:0, checkpoint-S.h5"; show_tail "$TMP/job5.out"; }

# ---- 6. srun returns 0 but zinf never ran (ZINF=/bin/true): no mark of a finish, a failed job ---
N=6
J=$(ZINF=/bin/true sbatch --parsable --ntasks-per-node=2 --output="$TMP/job6.out" "$JOBS/slurm/train.sbatch" "$@" --out "$TMP/run6")
J=${J%%;*}
wait_for 30 job_state_is "$J" $ENDED || give_up "job $J did not end within 30 s"
OUTPUT=$(cat "$TMP/job6.out")
expect_has "job $J (srun 0 without zinf)" \
    "zinf-job $J: srun exited 0 but zinf wrote no $TMP/run6/finished in this start: its ranks did not run to the end (a launch that failed?); exiting 1"
[ "$(jobfield "$J" JobState)" = FAILED ] && [ "$(jobfield "$J" ExitCode)" = 1:0 ] && [ "$(count_lines 'zinf finished')" -eq 0 ] && pass ||
    { fail "job $J: state $(jobfield "$J" JobState), exit code $(jobfield "$J" ExitCode); want FAILED, 1:0"; show_tail "$TMP/job6.out"; }

cd / || exit 1
finish
