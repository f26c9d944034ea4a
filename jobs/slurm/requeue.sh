# shellcheck shell=bash
# Sourced (by bash) from the batch scripts in jobs/slurm/; not a job script of its own.
#
# The requeue protocol shared by every zinf batch script:
#   1. Slurm sends SIGUSR1 to the batch shell before the time limit (#SBATCH --signal=B:USR1@T).
#   2. The shell passes SIGUSR1 on to the launcher (srun or mpirun), which passes it to the ranks.
#   3. Every rank finishes its step; the job writes a checkpoint and zinf exits with status 75.
#      A signal during the start-up (before the first step) ends it with 75 and no checkpoint:
#      the one it resumed from stays OUT/latest.
#   4. On 75 the shell runs `scontrol requeue` for its own job and exits 0. Slurm starts the same
#      script again, with SLURM_RESTART_COUNT one higher, and `--resume auto` continues from
#      OUT/latest.
#   5. Any other status is the job's status. After ZINF_MAX_REQUEUES requeues (default 10) a 75
#      is passed through, so a job that can never finish does not come back forever. A value
#      that is not a count (0 or more) is refused before anything is launched (exit 2).
#   6. Status 0 is a finished run only with its mark: zinf train writes OUT/finished (one JSON
#      line naming the step, renamed into place) when it ends with 0, and the shell removes that
#      file before each launch, so a mark found after the launcher returns is this start's. A
#      launcher that returns 0 without it (srun whose "task launch failed", a zinf that never ran)
#      is a failure: one line says so and the job exits 1. OUT is the --out (or --output_dir)
#      of the flags, default zinf-out, as zinf takes it.
#   7. A stop that reaches the shell before the launcher runs (during the set-up) launches
#      nothing: the shell acts as if zinf had stopped during its start-up, with 75 (step 4). One
#      that comes between the launch and the moment the shell knows the launcher's pid is passed
#      on as soon as it does. The batch scripts catch the two signals from their first line.
#
# Why "B:": without it Slurm signals only the job steps that srun started, never the batch step,
# and mpirun run from the script (with its ranks on the first node) lives in the batch step. With
# it only the shell is signalled, and the shell forwards, so one mechanism serves both launchers
# and the shell itself knows a stop was asked for.

# zinf_job_log MESSAGE...: one line on the job's standard error, marked as the script's own
zinf_job_log() { printf 'zinf-job %s: %s\n' "${SLURM_JOB_ID:-?}" "$*" >&2; }

# zinf_job_setup: set, for the launch line,
#   ZINF_BIN             the zinf to run: $ZINF, else SLURM_SUBMIT_DIR/zinf if built there, else PATH
#   ZINF_RANKS_PER_NODE  one rank per GPU: the job's tasks per node, which must equal its GPUs
#   OMP_NUM_THREADS      (and OPENBLAS_NUM_THREADS) the CPUs of one task, unless already set
# shellcheck disable=SC2034 # ZINF_BIN and ZINF_RANKS_PER_NODE are for the sourcing script
zinf_job_setup() {
    if [ -n "${ZINF:-}" ]; then ZINF_BIN=$ZINF
    elif [ -x "${SLURM_SUBMIT_DIR:-.}/zinf" ]; then ZINF_BIN=$SLURM_SUBMIT_DIR/zinf
    else ZINF_BIN=zinf; fi

    local nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
    if [ -n "${SLURM_NTASKS_PER_NODE:-}" ]; then
        ZINF_RANKS_PER_NODE=$SLURM_NTASKS_PER_NODE
    elif [ -n "${SLURM_TASKS_PER_NODE:-}" ]; then
        # the tasks Slurm placed on each node (sbatch(1)): "N" or "N(xM)" when every node has N,
        # "4,2" or "2(x3),1" when not; --ntasks alone may place them unevenly, which one count
        # per node for srun and mpirun cannot start
        case $SLURM_TASKS_PER_NODE in
        *,*)
            zinf_job_log "Slurm placed the tasks unevenly (SLURM_TASKS_PER_NODE=$SLURM_TASKS_PER_NODE): give the ranks per node with --ntasks-per-node (one per GPU)"
            exit 2 ;;
        esac
        ZINF_RANKS_PER_NODE=${SLURM_TASKS_PER_NODE%%(*}
    elif [ -n "${SLURM_NTASKS:-}" ] && [ $((SLURM_NTASKS % nodes)) -eq 0 ]; then
        ZINF_RANKS_PER_NODE=$((SLURM_NTASKS / nodes))
    else
        zinf_job_log "give the ranks per node with --ntasks-per-node (one per GPU)"
        exit 2
    fi
    # The batch step sees every GPU of the node: SLURM_GPUS_ON_NODE counts them. A rank count
    # other than the GPU count leaves GPUs idle or puts two ranks on one GPU, so it is refused.
    if [ -n "${SLURM_GPUS_ON_NODE:-}" ] && [ "$SLURM_GPUS_ON_NODE" != "$ZINF_RANKS_PER_NODE" ]; then
        zinf_job_log "the job has $SLURM_GPUS_ON_NODE GPUs per node but $ZINF_RANKS_PER_NODE tasks per node: submit with --ntasks-per-node=$SLURM_GPUS_ON_NODE (one rank per GPU)"
        exit 2
    fi
    # OpenMP and OpenBLAS threads: the CPUs Slurm gave one task, so that the ranks of a node do
    # not oversubscribe its cores (the host AdamW of offload runs on these threads).
    if [ -z "${OMP_NUM_THREADS:-}" ]; then
        if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
        else OMP_NUM_THREADS=$(( ${SLURM_CPUS_ON_NODE:-$ZINF_RANKS_PER_NODE} / ZINF_RANKS_PER_NODE )); fi
        [ "$OMP_NUM_THREADS" -ge 1 ] || OMP_NUM_THREADS=1
    fi
    export OMP_NUM_THREADS
    export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$OMP_NUM_THREADS}
    # the cap on requeues, checked now, since a 75 is the wrong time to find it unreadable
    case ${ZINF_MAX_REQUEUES-10} in
    '' | *[!0-9]* | ??????????*)
        zinf_job_log "ZINF_MAX_REQUEUES='${ZINF_MAX_REQUEUES-}' is not a count of requeues (0 to 999999999): set it to one, or unset it for the default 10"
        exit 2 ;;
    esac
    zinf_job_log "start $(( ${SLURM_RESTART_COUNT:-0} + 1 )) (SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0}) on $nodes node(s): $ZINF_RANKS_PER_NODE rank(s) per node, OMP_NUM_THREADS=$OMP_NUM_THREADS"
}

# zinf_train_args ARGS...: ZINF_ARGS becomes `zinf train ARGS`, with "--resume auto" added unless
# ARGS choose a --resume, since every start of the job, the first and each requeue, must go on
# from OUT/latest; ZINF_FINISHED is OUT/finished, the mark of a finished run (step 6 above), OUT
# being --out or --output_dir (dashes or underscores, "=V" or " V", as zinf reads flags)
zinf_train_args() {
    local a resume=1 out=zinf-out next=0
    for a in "$@"; do
        if [ "$next" = 1 ]; then out=$a; next=0; continue; fi
        case $a in
        --resume|--resume=*) resume=0 ;;
        --out|--output[-_]dir) next=1 ;;
        --out=*|--output[-_]dir=*) out=${a#*=} ;;
        esac
    done
    ZINF_ARGS=("$ZINF_BIN" train "$@")
    if [ "$resume" = 1 ]; then ZINF_ARGS+=(--resume auto); fi
    ZINF_FINISHED=$out/finished
}

# zinf_job_srun ARGS...: the ranks as one srun job step, one per task. PMIx is the MPI rendezvous
# (Open MPI and Slurm both use libpmix; SLURM_MPI_TYPE chooses another plugin).
# --kill-on-bad-exit=0: the ranks leave with 75 together after a checkpoint, and a site default
# of 1 would kill the slower ones while they finish it. Slurm 22.05 and later no longer pass the
# job's --cpus-per-task on to srun, so it is given again.
zinf_job_srun() {
    zinf_job_setup
    zinf_train_args "$@"
    zinf_job_run srun --mpi="${SLURM_MPI_TYPE:-pmix}" --kill-on-bad-exit=0 \
        --ntasks-per-node="$ZINF_RANKS_PER_NODE" ${SLURM_CPUS_PER_TASK:+--cpus-per-task="$SLURM_CPUS_PER_TASK"} \
        "${ZINF_ARGS[@]}"
}

# zinf_job_mpirun ARGS...: the ranks started by Open MPI's mpirun, which reads the nodes and
# slots from the Slurm allocation and starts its daemons on the other nodes through Slurm; for
# sites whose srun has no MPI plugin that matches their Open MPI. mpirun binds nothing; each rank
# runs `zinf-launch --rank_bind auto` (the one beside zinf, else on PATH), which binds it to its
# share of the CPUs the job has on its node and keeps OMP_NUM_THREADS (set above) for its team.
zinf_job_mpirun() {
    zinf_job_setup
    zinf_train_args "$@"
    local launch=zinf-launch
    case $ZINF_BIN in */*) [ ! -x "$(dirname "$ZINF_BIN")/zinf-launch" ] || launch=$(dirname "$ZINF_BIN")/zinf-launch ;; esac
    ZINF_ARGS=("$launch" --rank_bind auto "${ZINF_ARGS[@]}")
    local nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}} v xs=()
    # the thread counts and search paths for the ranks on the other nodes; only those that are
    # set, since mpirun warns about each -x variable that is not
    for v in OMP_NUM_THREADS OPENBLAS_NUM_THREADS PATH LD_LIBRARY_PATH; do
        if [ -n "${!v+set}" ]; then xs+=(-x "$v"); fi
    done
    zinf_job_run mpirun -np $((nodes * ZINF_RANKS_PER_NODE)) --map-by "ppr:$ZINF_RANKS_PER_NODE:node" \
        --bind-to none "${xs[@]}" "${ZINF_ARGS[@]}"
}

# Stop requests that reach the batch shell: Slurm's warning (USR1, from --signal=B:USR1@T or
# `scancel --batch --signal=USR1`) and SIGTERM (preemption, scancel, the time limit). Both are
# passed on as SIGUSR1, because mpirun answers SIGTERM by killing its ranks, while it (and srun)
# forward SIGUSR1 to them; zinf treats the two signals alike. One that comes while no launcher's
# pid is known is kept (_zinf_pending) for zinf_job_run (step 7 above).
_zinf_stop() {
    _zinf_woken=1
    if [ -n "${_zinf_launcher:-}" ]; then
        zinf_job_log "got SIG$1: asking the ranks to finish their step and checkpoint"
        kill -USR1 "$_zinf_launcher" 2>/dev/null || true
    else
        _zinf_pending=1
        zinf_job_log "got SIG$1 before the launcher runs: a stop is pending"
    fi
}
_zinf_woken=0 _zinf_pending=0 _zinf_launcher=
trap '_zinf_stop USR1' USR1
trap '_zinf_stop TERM' TERM
# a signal the batch script caught before it sourced this file
if [ -n "${_zinf_early_sig:-}" ]; then _zinf_stop "$_zinf_early_sig"; fi

# zinf_job_run LAUNCHER ARGS...: run the launch line with the requeue protocol (above), then exit
# with the job's status: 0 after a requeue or a finished run, otherwise the launcher's.
zinf_job_run() {
    local st=0 again
    # the mark of a finished run must be this start's (step 6 above)
    if [ -n "${ZINF_FINISHED:-}" ] && ! rm -f "$ZINF_FINISHED"; then
        zinf_job_log "cannot remove $ZINF_FINISHED, an earlier start's mark that zinf finished: not launching"
        exit 1
    fi
    if [ "$_zinf_pending" = 1 ]; then
        zinf_job_log "not launching $1: a stop came before the launch; as zinf does on a stop during its start-up, the status is 75"
        st=75 _zinf_woken=0
    else
        _zinf_woken=0
        # A shell runs its traps only between commands, so the launcher runs in the background
        # and the shell waits for it: a trapped signal ends the `wait` at once.
        "$@" &
        _zinf_launcher=$!
        # a stop trapped between the launch and the line above had no pid to go to
        if [ "$_zinf_pending" = 1 ]; then
            zinf_job_log "passing the pending stop on to $1"
            kill -USR1 "$_zinf_launcher" 2>/dev/null || true
        fi
        wait "$_zinf_launcher" || st=$?
    fi
    # A signal ends `wait` early with 128+signal while the launcher runs on: wait again. A second
    # wait on a launcher whose status was already collected answers 127; the first status stands.
    while [ "$_zinf_woken" = 1 ]; do
        _zinf_woken=0
        again=0
        wait "$_zinf_launcher" 2>/dev/null || again=$?
        [ "$again" -eq 127 ] || st=$again
    done
    trap - USR1 TERM
    _zinf_launcher=

    case $st in
    0)
        if [ -n "${ZINF_FINISHED:-}" ] && [ ! -f "$ZINF_FINISHED" ]; then
            zinf_job_log "$1 exited 0 but zinf wrote no $ZINF_FINISHED in this start: its ranks did not run to the end (a launch that failed?); exiting 1"
            exit 1
        fi
        zinf_job_log "zinf finished${ZINF_FINISHED:+ ($ZINF_FINISHED: $(cat "$ZINF_FINISHED" 2>/dev/null))}"
        exit 0 ;;
    75)
        local restarts=${SLURM_RESTART_COUNT:-0} max=${ZINF_MAX_REQUEUES:-10}
        if [ "$restarts" -ge "$max" ]; then
            zinf_job_log "zinf stopped on a signal and exited 75, but the job was requeued $restarts times already (ZINF_MAX_REQUEUES=$max): not requeueing; resubmit to go on"
            exit 75
        fi
        zinf_job_log "zinf stopped on a signal and exited 75: asking Slurm to requeue the job (requeue $((restarts + 1)) of at most $max)"
        # "Incomplete" requeues only a job that is still running: a job the user cancelled (whose
        # SIGTERM also made zinf checkpoint) or one past its time limit stays ended.
        if scontrol requeue Incomplete "$SLURM_JOB_ID"; then
            exit 0
        fi
        zinf_job_log "scontrol requeue failed (the job was cancelled, ran out of time or was submitted with --no-requeue): exiting 75; resubmit to go on"
        exit 75 ;;
    *)
        zinf_job_log "zinf exited $st"
        exit "$st" ;;
    esac
}
