/* The training loop; the states, their partitioning and the reductions belong to zero.c. */
#include "ckpt.h"
#include "ckpt_tool.h"
#include "hf.h"
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "data.h"
#include "dataset.h"
#include "err.h"
#include "estimate.h"
#include "file.h"
#include "generate.h"
#include "kernels.h"
#include "log.h"
#include "model.h"
#include "monitor.h"
#include "optim.h"
#include "profile.h"
#include "progress.h"
#include "sched.h"
#include "zero.h"

/* the most micro-batches whose forwards run with micro-batch 0's under the last step's update */
#define ZINF_MAX_CTX 15

void zinf_train_opts_defaults(zinf_train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->model = "test-mini";
    o->out = "zinf-out";
    o->device = "cpu";
    o->seed = 1234;
    o->save_total_limit = 0;
    o->resume = NULL;
    o->max_new_tokens = 16;
    zinf_flags_defaults(&o->flags);
}

int zinf_backend_open(zinf_backend *be, const char *device, int local_rank, zinf_dtype cdt)
{
    if (strcmp(device, "cpu") == 0) return zinf_backend_cpu_init(be);
    if (strcmp(device, "cuda") != 0) return zinf_err("--device %s: expected cpu or cuda", device);
    int n = zinf_backend_cuda_count();
    if (!zinf_backend_cuda_built())
        return zinf_errc(ZINF_ENOTSUP, "--device cuda: this zinf was built without CUDA (configure "
                         "--with-cuda on a machine with nvcc and NCCL)");
    if (n <= 0) return zinf_errc(ZINF_ENOTSUP, "--device cuda: no CUDA device is visible");
    int rc = zinf_backend_cuda_init(be, local_rank % n, cdt);
    if (rc) rc = zinf_errc(rc, "--device cuda: GPU %d: %s", local_rank % n, zinf_backend_cuda_error());
    return rc;
}

void zinf_backend_close(zinf_backend *be)
{
    if (strcmp(be->name, "cpu") == 0) zinf_backend_cpu_free(be);
    else zinf_backend_cuda_free(be);
}

/* ---------------------------------------------------------------- config on every rank ----- */
int zinf_train_resolve_config(zinf_comm *comm, const char *config_path, const char *model,
                              zinf_flags *flags, zinf_config *cfg)
{
    if (model) {
        zinf_model_cfg mc;
        int rc = zinf_comm_agree(comm, zinf_model_cfg_load(&mc, model));
        if (rc) return rc;
        flags->hidden_size = mc.n_embd;
    }
    FILE *warn = comm->rank == 0 ? stderr : NULL;
    if (!config_path) return zinf_comm_agree(comm, zinf_config_default(cfg, flags, comm->size, warn));
    /* --deepspeed zero3 (ms-swift's names): the bundled file, read as any --config file */
    char builtin[4096];
    int b = zinf_config_builtin(config_path, builtin, sizeof builtin);
    ZINF_TRY(zinf_comm_agree(comm, b < 0 ? b : 0));
    if (b > 0) config_path = builtin;
    /* rank 0 reads the bytes and every rank parses the same bytes */
    char *buf = NULL;
    size_t len = 0;
    int rc = comm->rank == 0 ? zinf_read_file("--config", config_path, &buf, &len) : 0;
    rc = zinf_comm_agree(comm, rc);
    if (rc) return rc;
    uint64_t len64 = len;
    ZINF_TRY(zinf_comm_bcast(comm, &len64, sizeof len64, 0));
    if (comm->rank != 0) buf = malloc(len64 + 1);
    if (!buf) zinf_comm_abort(comm, "out of memory");
    ZINF_TRY(zinf_comm_bcast(comm, buf, len64, 0));
    rc = zinf_config_parse(cfg, buf, len64, config_path, flags, comm->size, warn);
    free(buf);
    return zinf_comm_agree(comm, rc);
}

/* ---------------------------------------------------------------- state -------------------- */
typedef struct fault { int rank, kind; int64_t step, micro; } fault; /* ZINF_FAULT; kind 0: none */

typedef struct run {
    zinf_comm *comm;
    const zinf_train_opts *o;
    zinf_config cfg;
    zinf_backend be;
    bool be_ok;
    zinf_model m;
    zinf_zero *z;
    zinf_data *train, *val;
    zinf_loss_scaler ls;
    FILE *metrics;           /* OUT/metrics.jsonl on rank 0, else NULL */
    char metrics_path[4200];
    int metrics_rc;          /* its first failed write (0: none); the run ends at the next logs_agreed */
    zinf_monitor *mon;       /* rank 0: the config's tensorboard and csv_monitor blocks (NULL: neither) */
    zinf_monitor *hfmon;     /* rank 0: --report_to tensorboard (NULL: not asked for) */
    int32_t *inp, *tgt;
    int32_t *pos, *kv; /* packed SFT rows: positions and sample starts (zinf_batch); else NULL */
    /* contexts for the forwards of micro-batches 1..nctx that run with micro-batch 0's under the
     * last step's update (train_step); inp, tgt, pos and kv hold 1 + nctx micro-batches */
    zinf_model ctx[ZINF_MAX_CTX];
    int nctx;
    int64_t *nk;             /* SFT data: this step's predicted tokens per micro-batch, else NULL */
    char dataset_glob[2][4400]; /* --dataset: the cached shards' train and val globs ("" none) */
    int64_t dataset_longer[2]; /* --dataset: training and validation samples over --max_length that its
                                * cache deleted or truncated (--truncation_strategy); -1 unknown (a
                                * cache without the counts) */
    int64_t opt_steps;       /* applied optimizer updates (Adam's t, the scheduler's step) */
    size_t dev_peak;         /* most device memory seen in use (backends that report it) */
    size_t dev_base;         /* device memory in use before the model's (CUDA context, libraries, NCCL) */
    int T;
    fault fault;
    /* wall_clock_breakdown: the backend's timed events on its compute stream at a pass's start,
     * forward end and backward end, after the reduction and norm, after the optimizer, and at
     * the step's start; tev_prev once a step has recorded its end */
    zinf_event *tev[6];
    bool tev_prev;
    bool ac;                 /* activation checkpointing: the config's block or --gradient_checkpointing */
    bool agreed;             /* the failure was agreed on by every rank and said once */
    bool said_overlap;       /* the overlapped host step has been announced */
    int64_t start_step;      /* steps done before this run: 0, or the checkpoint's step on resume */
    int64_t data_start;      /* the data stream's position at start_step: 0, or the checkpoint's
                              * consumed_samples (which any batch size continues from) */
    uint64_t run_id;         /* made by a fresh start, carried by checkpoints through resumptions */
    int lock_fd;             /* rank 0: the flock on --out, held until the process ends */
    size_t out_made;         /* rank 0: what of --out this run made (zinf_mkdir_p_made) */
    char *cfg_json;          /* the resolved config, stored in checkpoints */
    double t_start;          /* zinf_now() when this process began the run: elapsed time counts from here */
    zinf_progress prog;      /* step, evaluation and save times, for the time left */
    char resumed[4096];      /* the checkpoint this run resumes from, "" for a fresh start */
    zinf_hf_load hf_load;    /* what --init_from read */
    int64_t saved_step;      /* the step this run last saved a checkpoint at (-1: none) */
} run;

/* SIGUSR1 or SIGTERM (Slurm's warning before the time limit, preemption): finish the step, save
 * a checkpoint and stop (ZINF_TRAIN_STOPPED); before the first step, stop without a save. A
 * signal during a save stops the run right after it; a second signal changes nothing. The
 * handler only records the signal: the ranks agree on it where they are in step (stop_agreed). */
static volatile sig_atomic_t stop_signal;
static void on_stop_signal(int sig) { stop_signal = sig; }

void zinf_train_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    /* the start-up's reads and waits go on where they were; the loop looks at stop_signal */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The largest signal number any rank recorded (0: none). A signal may reach some ranks only, or
 * reach them at different moments; every rank takes the decision this returns. */
static int stop_agreed(run *r, int *sig)
{
    double s = stop_signal;
    ZINF_TRY(zinf_comm_allreduce_max_f64(r->comm, &s, 1));
    *sig = (int)s;
    return 0;
}

/* A stop asked for before this run's first step: there is nothing new to save, so the run ends
 * now (ZINF_TRAIN_STOPPED) and the checkpoint it started from, if any, stays as it is. Asked
 * before the load (loaded false), it also spares the load. */
static int stop_before_first_step(run *r, bool loaded)
{
    int sig;
    ZINF_TRY(stop_agreed(r, &sig));
    if (!sig) return 0;
    if (r->resumed[0] && !loaded)
        zinf_info("stopped by signal %d during the start-up, before loading %s: no checkpoint written; requeue "
                  "with --resume auto", sig, r->resumed);
    else if (r->resumed[0])
        zinf_info("stopped by signal %d before step %lld: no checkpoint written (no step done since %s); "
                  "requeue with --resume auto", sig, (long long)r->start_step + 1, r->resumed);
    else
        zinf_info("stopped by signal %d before step 1: no checkpoint written (no step done); requeue with "
                  "--resume auto", sig);
    return ZINF_TRAIN_STOPPED;
}

/* ZINF_FAULT="rank=R,step=S,kind=fail|hang|kill": make one rank fail, stall or die at the start
 * of step S (1-based), to test that the job ends with that rank's message, or with a collective
 * timeout, instead of hanging. S = 0 acts during the setup, just before the ranks join the device
 * communicator (NCCL), to test that joining has the timeout too. "kind=term,micro=M" (M >= 1):
 * rank R sends itself SIGTERM once micro-batch M of step S is done, to test a stop in the middle
 * of a step. Parsed once, early. */
static int fault_parse(fault *f)
{
    f->rank = -1;
    f->kind = 0;
    f->step = -1;
    f->micro = 0;
    const char *fe = getenv("ZINF_FAULT");
    if (!fe || !*fe) return 0;
    char kind[16] = "";
    long long fs = -1, fm = 0;
    int n = sscanf(fe, "rank=%d,step=%lld,kind=%15[a-z],micro=%lld", &f->rank, &fs, kind, &fm);
    if (n < 3) return zinf_err("ZINF_FAULT=%s: expected rank=R,step=S,kind=fail|hang|kill or kind=term,micro=M", fe);
    f->step = fs;
    f->micro = fm;
    f->kind = !strcmp(kind, "fail") ? 1 : !strcmp(kind, "hang") ? 2 : !strcmp(kind, "kill") ? 3
            : !strcmp(kind, "term") ? 4 : 0;
    if (!f->kind) return zinf_err("ZINF_FAULT: kind %s is not fail, hang, kill or term", kind);
    if ((f->kind == 4) != (n == 4) || (f->kind == 4 && fm < 1))
        return zinf_err("ZINF_FAULT=%s: kind term takes micro=M (M >= 1), the others none", fe);
    return 0;
}

/* After micro-batch k (0-based) of step S on this rank: ZINF_FAULT's kind=term signal */
static void fault_micro(const fault *f, int rank, int64_t step, int64_t k)
{
    if (f->kind == 4 && rank == f->rank && step == f->step && k + 1 == f->micro) raise(SIGTERM);
}

/* At step S (0: the setup) on this rank: the injected failure, or no return (hang, kill). */
static int fault_at(const fault *f, int rank, int64_t step)
{
    if (!f->kind || f->kind == 4 || rank != f->rank || step != f->step) return 0;
    if (f->kind == 1) {
        if (step == 0) return zinf_err("injected failure before joining the device communicator (ZINF_FAULT)");
        return zinf_err("injected failure at step %lld (ZINF_FAULT)", (long long)step);
    }
    if (f->kind == 2) for (;;) sleep(60);
    raise(SIGKILL);
    return 0;
}

/* ZINF_OUT_LOCK_WAIT: how long a run waits for another that holds its --out (default 60 s: a
 * requeued job's previous ranks may take that long to end). -1 when not a number >= 0. */
static int lock_wait(double *w)
{
    const char *e = getenv("ZINF_OUT_LOCK_WAIT");
    *w = 60.0;
    return e && *e ? zinf_comm_timeout_parse(e, w) : 0; /* the same rule: seconds >= 0 */
}

/* The environment variables whose values the layers below read without a way to report them. */
static int env_check(void)
{
    ZINF_TRY(zinf_comm_check_env());
    static const char *const switches[] = {"ZINF_GEMM_AUTOTUNE", "ZINF_ATTN_CUDNN"};
    for (size_t i = 0; i < sizeof switches / sizeof *switches; i++) {
        const char *s = getenv(switches[i]);
        if (zinf_env_switch(s) < 0) return zinf_err("%s=%s: expected 0, 1 or verbose", switches[i], s);
    }
    double w;
    if (lock_wait(&w)) return zinf_err("ZINF_OUT_LOCK_WAIT=%s: expected seconds >= 0", getenv("ZINF_OUT_LOCK_WAIT"));
    int64_t rows;
    return zinf_head_rows_env(&rows);
}

static void said_removed(const char *path)
{
    zinf_info("zinf: removed %s, left by an interrupted save", path);
}

/* Whether a directory of an NVMe swap (nvme_path, one directory a line) is on --out's file system. */
static bool swap_shares_fs(const zinf_config *c, const char *out)
{
    struct stat so, sd;
    if (stat(out, &so) != 0) return false;
    const zinf_offload_cfg *offs[2] = {&c->offload_optimizer, &c->offload_param};
    for (int i = 0; i < 2; i++) {
        if (offs[i]->device != ZINF_DEV_NVME) continue;
        char paths[sizeof offs[i]->nvme_path];
        snprintf(paths, sizeof paths, "%s", offs[i]->nvme_path);
        for (char *sv = NULL, *t = strtok_r(paths, "\n", &sv); t; t = strtok_r(NULL, "\n", &sv))
            if (stat(t, &sd) == 0 && sd.st_dev == so.st_dev) return true;
    }
    return false;
}

/* Python's os.path.join(dir, name), as DeepSpeed's monitors place their files */
static void monitor_dir(char *out, size_t cap, const char *dir, const char *name)
{
    size_t n = strlen(dir);
    if (!n || name[0] == '/') snprintf(out, cap, "%s", name);
    else snprintf(out, cap, "%s%s%s", dir, dir[n - 1] == '/' ? "" : "/", name);
}

/* host seconds (fwd, bwd) and, with timed events, the backend's seconds per part of the step */
typedef struct step_times { double fwd, bwd, gfwd, gbwd, greduce, gopt, gidle; zinf_zero_times z; } step_times;

static double tev_s(run *r, int a, int b)
{
    double ms = r->be.event_elapsed_ms(&r->be, r->tev[a], r->tev[b]);
    return ms > 0 ? 1e-3 * ms : 0.0;
}

/* Micro-batch j's rows in the step's host buffers (j > 0: the micro-batches whose forwards run with
 * micro-batch 0's, see train_step); pos and kv (zinf_batch's) for packed rows, else NULL. */
static zinf_batch batch_of(const run *r, int j)
{
    size_t N = (size_t)r->m.B * (size_t)r->m.T * (size_t)j;
    return (zinf_batch){.tok = r->inp + N, .tgt = r->tgt + N, .pos = r->pos ? r->pos + N : NULL,
                        .kv_start = r->kv ? r->kv + N : NULL, .B = r->m.B, .T = r->m.T};
}

/* Micro-batch k of this process's share of step `step` into slot j of the host buffers
 * (batch_of(r, j)). */
static int read_micro(run *r, int64_t step, int64_t k, int j)
{
    const zinf_config *c = &r->cfg;
    int64_t mb = c->train_micro_batch_size_per_gpu;
    int64_t pos = r->data_start + zinf_data_slice_start(step - r->start_step, c->train_batch_size, k, r->comm->rank,
                                                        r->comm->size, mb);
    size_t off = (size_t)mb * (size_t)r->T * (size_t)j;
    return zinf_data_read_rows(r->train, pos, mb, r->inp + off, r->tgt + off, r->pos ? r->pos + off : NULL,
                               r->kv ? r->kv + off : NULL);
}

/* One pass of the ZeRO hooks over model m (the run's, or a context): kind ZINF_PASS_FORWARD (b
 * with head_at/head_n for the logits of some rows alone), ZINF_PASS_TRAIN (forward and
 * backward), ZINF_PASS_TAIL (the head and the backward after zinf_model_forward_layers) or
 * ZINF_PASS_BODY (the forwards of the k micro-batches in ms/bs at once, up to their heads). */
static int pass_of(run *r, int kind, zinf_model *const *ms, const zinf_batch *bs, int k, float *loss, bool last_micro,
                   float dloss_scale, step_times *t)
{
    double t0 = zinf_now();
    bool tm = t && r->tev[0], backward = kind == ZINF_PASS_TRAIN || kind == ZINF_PASS_TAIL;
    zinf_model *m = ms[0];
    const zinf_unit_hooks *h = zinf_zero_hooks(r->z);
    ZINF_TRY(zinf_zero_begin_pass(r->z, kind, last_micro));
    if (tm) r->be.event_record(&r->be, r->tev[0], NULL);
    if (kind == ZINF_PASS_BODY) ZINF_TRY(zinf_model_forward_layers(ms, k, bs, h));
    else if (kind == ZINF_PASS_TAIL) ZINF_TRY(zinf_model_head(m, bs, h, dloss_scale, loss));
    else ZINF_TRY(zinf_model_forward_batch(m, bs, h, backward ? dloss_scale : 0.0f, loss));
    double t1 = zinf_now();
    if (tm) r->be.event_record(&r->be, r->tev[1], NULL);
    if (backward) ZINF_TRY(zinf_model_backward(m, h, dloss_scale));
    ZINF_TRY(zinf_zero_end_pass(r->z));
    if (tm) r->be.event_record(&r->be, r->tev[2], NULL);
    ZINF_TRY(r->be.sync(&r->be));
    if (t) {
        t->fwd += t1 - t0;
        t->bwd += zinf_now() - t1;
    }
    if (tm) {
        t->gfwd += tev_s(r, 0, 1);
        t->gbwd += tev_s(r, 1, 2);
    }
    if (r->tev[0]) zinf_zero_event_times(r->z, t != NULL);
    return 0;
}

static int pass(run *r, const zinf_batch *b, int kind, float *loss, bool last_micro, float dloss_scale, step_times *t)
{
    zinf_model *m = &r->m;
    return pass_of(r, kind, &m, b, 1, loss, last_micro, dloss_scale, t);
}

/* A failure every rank reaches at the same point with the same values (after the norm's
 * all-reduce): the ranks agree on it, one of them says it, and the job ends without an abort. */
static int agreed(run *r, int rc)
{
    r->agreed = true;
    return zinf_comm_agree(r->comm, rc);
}

/* One record of metrics.jsonl (`what` names it in the error), written and flushed at once. The
 * first write that fails (a full disk) is kept, with the file and errno, in r->metrics_rc, and
 * nothing more is written there; the part of the record that did reach the file is cut off
 * again, so that the file holds whole records and a resumed run appends after the last one. */
__attribute__((format(printf, 3, 4))) static void metrics_put(run *r, const char *what, const char *fmt, ...)
{
    if (!r->metrics || r->metrics_rc) return;
    off_t end = ftello(r->metrics);
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    int n = vfprintf(r->metrics, fmt, ap);
    va_end(ap);
    if (n < 0 || fflush(r->metrics)) {
        int e = errno ? errno : EIO;
        r->metrics_rc = zinf_errc(-e, "%s: cannot write %s: %s", r->metrics_path, what, strerror(e));
        if (end >= 0) (void)!ftruncate(fileno(r->metrics), end); /* at best; the error above is the one to say */
    }
}

/* The run's own files so far, on every rank: metrics.jsonl (rank 0) and, with --per_rank_logs,
 * each rank's log. A write that failed on any rank ends the run on all of them, said once by the
 * lowest such rank (an agreed failure). Collective. */
static int logs_agreed(run *r)
{
    int rc = r->metrics_rc ? r->metrics_rc : zinf_log_status();
    rc = zinf_comm_agree(r->comm, rc);
    if (rc) r->agreed = true;
    return rc;
}

/* Close metrics.jsonl and this rank's log at the end of a run (finished or stopped), as
 * logs_agreed but with the closes' own errors too. Collective. */
static int finish_logs(run *r)
{
    int rc = r->metrics_rc;
    int mrc = zinf_monitor_close(r->mon), hrc = zinf_monitor_close(r->hfmon);
    r->mon = r->hfmon = NULL;
    if (!rc) rc = mrc ? mrc : hrc;
    if (r->metrics) {
        errno = 0;
        if (fclose(r->metrics) && !rc) {
            int e = errno ? errno : EIO;
            rc = zinf_errc(-e, "%s: cannot write: %s", r->metrics_path, strerror(e));
        }
        r->metrics = NULL;
    }
    int lrc = zinf_log_close();
    if (!rc) rc = lrc;
    rc = zinf_comm_agree(r->comm, rc);
    if (rc) r->agreed = true;
    return rc;
}

/* abandoned: a stop signal (sig) was agreed on after micro-batch `after` of the step's gas: the
 * step stopped there, with nothing updated */
typedef struct step_result {
    double loss, norm, lr;
    bool skipped, abandoned;
    int sig;
    int64_t after;
    step_times t;
} step_result;

/* The AdamW arguments of the next update (Adam's step count r->opt_steps + 1), with the gradient
 * scale coef / loss scale. */
static zinf_adamw_args step_args(const run *r, double coef)
{
    const zinf_config *c = &r->cfg;
    double beta1 = zinf_sched_beta1(&c->sched, c->beta1, r->opt_steps);
    double beta2 = zinf_sched_beta2(&c->sched, c->beta2, r->opt_steps);
    double t = (double)(r->opt_steps + 1);
    return (zinf_adamw_args){
        .lr = (float)zinf_sched_lr(&c->sched, c->lr, r->opt_steps), .beta1 = (float)beta1,
        .beta2 = (float)beta2, .eps = (float)c->eps,
        .bias_correction1 = c->bias_correction ? (float)(1.0 - pow(beta1, t)) : 1.0f,
        .bias_correction2 = c->bias_correction ? (float)(1.0 - pow(beta2, t)) : 1.0f,
        .grad_scale = (float)(coef / r->ls.cur_scale), .adam_w_mode = c->adam_w_mode,
    };
}

/* Whether this step's update is known before its gradients are: no clipping (the coefficient
 * needs the global norm) and no skip on overflow (fp16 dynamic loss scaling, bf16's
 * check_grad_overflow). An overflow then ends the run (train_step), so an update begun early is
 * never one that should not have happened. */
static bool update_known_early(const run *r)
{
    const zinf_config *c = &r->cfg;
    return !(c->gradient_clipping > 0) && !r->ls.dynamic && !(c->bf16 && c->bf16_check_grad_overflow);
}

static int train_step(run *r, int64_t step, step_result *out)
{
    const zinf_config *c = &r->cfg;
    int W = r->comm->size, rank = r->comm->rank;
    int64_t mb = c->train_micro_batch_size_per_gpu, gas = c->gradient_accumulation_steps;
    memset(out, 0, sizeof *out);
    if (r->tev[0]) r->be.event_record(&r->be, r->tev[5], NULL);
    ZINF_TRY(zinf_zero_begin_step(r->z));
    /* Each micro-batch's weight in the step's loss and gradient. Plain data: 1/gas (every
     * micro-batch predicts mb*T tokens). SFT data, whose loss flags and padding leave micro-batches
     * with different counts: the loss is the mean over every predicted token of the global batch
     * (all ranks, all micro-batches), as HF's Trainer computes it with num_items_in_batch; so the
     * counts are read first and summed over the ranks, and micro-batch k weighs W n_k / n (the
     * reduction then averages over the W ranks). */
    double n_all = 0;
    if (r->nk) {
        for (int k = 0; k < gas; k++) {
            ZINF_TRY(read_micro(r, step, k, 0));
            r->nk[k] = 0;
            for (int64_t i = 0; i < mb * r->T; i++) r->nk[k] += r->tgt[i] >= 0;
            n_all += (double)r->nk[k];
        }
        ZINF_TRY(zinf_comm_allreduce_sum_f64(r->comm, &n_all, 1));
    }
    /* With the last step's update still running on into this one (ZeRO-3, optimizer in host
     * memory), the forwards of the first K micro-batches run together, unit by unit behind the
     * update: micro-batch 0 in the run's activations, the others in contexts (setup). Their heads
     * and backward passes then follow one micro-batch after the other. Each micro-batch's forward
     * is the same arithmetic on the same parameters, and the gradients accumulate in the same
     * order, so the results are those of one micro-batch after the other. */
    int K = r->nctx > 0 && zinf_zero_update_running(r->z) ? (int)(gas < 1 + r->nctx ? gas : 1 + r->nctx) : 1;
    zinf_model *ms[ZINF_MAX_CTX + 1];
    zinf_batch bs[ZINF_MAX_CTX + 1];
    for (int j = 0; K > 1 && j < K; j++) {
        ZINF_TRY(read_micro(r, step, j, j));
        bs[j] = batch_of(r, j);
        ms[j] = j ? &r->ctx[j - 1] : &r->m;
    }
    if (K > 1) ZINF_TRY(pass_of(r, ZINF_PASS_BODY, ms, bs, K, NULL, false, 0, &out->t));
    double loss_sum = 0;
    for (int k = 0; k < gas; k++) {
        double wk = !r->nk ? 1.0 / (double)gas : n_all > 0 ? (double)W * (double)r->nk[k] / n_all : 0.0;
        bool tail = K > 1 && k < K;
        if (!tail) ZINF_TRY(read_micro(r, step, k, 0));
        if (k == gas - 1 && update_known_early(r)) {
            zinf_adamw_args a = step_args(r, 1.0);
            int on = zinf_zero_overlap_step(r->z, &a, c->weight_decay);
            ZINF_TRY(on);
            if (on && !r->said_overlap && rank == 0)
                zinf_info("the offloaded optimizer step runs during the backward pass, each unit's once its "
                          "gradient is final (gradient_clipping 0, no overflow skip)");
            r->said_overlap |= on > 0;
        }
        float loss = 0;
        float dls = r->nk ? (float)(r->ls.cur_scale * wk) : (float)(r->ls.cur_scale / (double)gas);
        zinf_model *mk = tail ? ms[k] : &r->m;
        zinf_batch b = tail ? bs[k] : batch_of(r, 0);
        ZINF_TRY(pass_of(r, tail ? ZINF_PASS_TAIL : ZINF_PASS_TRAIN, &mk, &b, 1, &loss, k == gas - 1, dls, &out->t));
        loss_sum += r->nk ? loss * wk : loss;
        /* A stop signal between micro-batches (on any rank: they agree) abandons the step: with many
         * micro-batches a step can outlast Slurm's KillWait between SIGTERM and SIGKILL. Nothing
         * has been updated (the update of the step starts with its last micro-batch), so the
         * parameters and optimizer states are the last step's end, what a save then holds; the
         * gradients summed so far are dropped, and a resumed run redoes the whole step. */
        if (k < gas - 1) {
            fault_micro(&r->fault, rank, step + 1, k);
            ZINF_TRY(stop_agreed(r, &out->sig));
            if (out->sig) {
                ZINF_TRY(zinf_zero_abandon_step(r->z));
                out->abandoned = true;
                out->after = k + 1;
                return 0;
            }
        }
    }
    double scaled_norm;
    ZINF_TRY(zinf_zero_reduce(r->z, &scaled_norm));
    double loss_all = r->nk ? loss_sum : loss_sum / (double)gas;
    ZINF_TRY(zinf_comm_allreduce_sum_f64(r->comm, &loss_all, 1));
    out->loss = loss_all / W;

    if (r->tev[0]) {
        /* the reduction part ends here, host work between the markers included */
        r->be.event_record(&r->be, r->tev[3], NULL);
        /* the device's idle time between the last step's (or evaluation's) end and this start */
        if (r->tev_prev) out->t.gidle = tev_s(r, 4, 5);
    }
    bool overflow = !isfinite(scaled_norm);
    out->norm = scaled_norm / r->ls.cur_scale;
    out->lr = zinf_sched_lr(&c->sched, c->lr, r->opt_steps);
    if (overflow && r->ls.dynamic && r->ls.cur_scale <= r->ls.min_scale &&
        (r->ls.delayed_shift == 1 || r->ls.cur_hysteresis == 1))
        /* DeepSpeed raises here too: nothing smaller to try */
        return agreed(r, zinf_errc(ZINF_EINVAL, "step %lld: the gradients overflow at the minimum fp16 loss "
                                   "scale %g (fp16.min_loss_scale); the run cannot continue", (long long)step + 1,
                                   r->ls.cur_scale));
    if (r->nk && n_all == 0) {
        /* no target of the global batch is trained: the loss, a mean over no token, has no value
         * and its gradient is 0 (the HF Trainer divides by the zero count and steps on NaN); the
         * step is skipped as an overflow is: no update, neither Adam's step count nor the
         * scheduler advance */
        out->skipped = true;
        out->loss = NAN;
        zinf_info("step %lld: no token of the step's batch is trained (every target masked, or cut off by "
                  "--max_length): step skipped", (long long)step + 1);
    } else if (overflow && r->ls.dynamic) {
        /* DeepSpeed: the step is skipped; neither Adam's step count nor the scheduler advance */
        out->skipped = true;
        zinf_loss_scaler_update(&r->ls, true);
        zinf_info("step %lld: gradient overflow, step skipped; loss scale now %g", (long long)step + 1,
                  r->ls.cur_scale);
    } else if (overflow && c->bf16 && c->bf16_check_grad_overflow) {
        /* DeepSpeed's bf16.check_grad_overflow (default true): the step is skipped, as an fp16
         * overflow is, with no loss scale to lower */
        out->skipped = true;
        zinf_info("step %lld: gradient overflow, step skipped (bf16.check_grad_overflow)", (long long)step + 1);
    } else if (overflow) {
        /* a cause zinf can name: the previous update's decoupled decay multiplied each decayed
         * weight by 1 - lr x weight_decay, which below -1 flips its sign and grows it (PyTorch's
         * AdamW diverges the same way) */
        char why[200] = "";
        double plr = r->opt_steps > 0 ? zinf_sched_lr(&c->sched, c->lr, r->opt_steps - 1) : 0;
        if (c->adam_w_mode && plr * c->weight_decay > 2)
            snprintf(why, sizeof why, "; AdamW's decay factor 1 - lr x weight_decay was %.3g (lr %g, weight_decay %g): "
                     "it flips the weights' sign and grows them", 1 - plr * c->weight_decay, plr, c->weight_decay);
        return agreed(r, zinf_errc(ZINF_EINVAL, "step %lld: the gradient norm is not finite (loss %g)%s%s",
                                   (long long)step + 1, out->loss, why,
                                   c->bf16 ? "; bf16.check_grad_overflow is false, so the step is not skipped" : ""));
    } else {
        zinf_adamw_args a = step_args(r, zinf_clip_coef(out->norm, c->gradient_clipping));
        r->opt_steps++;
        ZINF_TRY(zinf_zero_step(r->z, &a, c->weight_decay));
        zinf_loss_scaler_update(&r->ls, false);
    }
    if (r->tev[0]) {
        r->be.event_record(&r->be, r->tev[4], NULL);
        ZINF_TRY(r->be.sync(&r->be)); /* the optimizer's end waited for it already */
        out->t.greduce = tev_s(r, 2, 3);
        out->t.gopt = tev_s(r, 3, 4);
        r->tev_prev = true;
    }
    zinf_zero_times_take(r->z, &out->t.z);
    return 0;
}

/* --dataset: rank 0 makes (or finds) the SFT shards of the chat dataset in the cache, tokenized
 * with --tokenizer or the --model directory's tokenizer and its template, samples over the
 * sequence length T left out; every rank then reads the same globs. */
static int sft_dataset(run *r, const char *model, int T)
{
    const zinf_train_opts *o = r->o;
    zinf_comm *comm = r->comm;
    zinf_chat_data_opts d = o->sft;
    d.input = o->dataset, d.input_flag = "--dataset";
    d.max_length = T;
    struct stat st;
    int rc = 0;
    /* the tokenizer is --tokenizer's, else the model directory's; a preset or a config.json file
     * has none */
    bool named = d.tokenizer != NULL;
    if (!named) d.tokenizer = model;
    bool exists = d.tokenizer && stat(d.tokenizer, &st) == 0, dir = exists && S_ISDIR(st.st_mode);
    if (!named && !dir)
        rc = zinf_err("--dataset: --model %s is %s, which holds no tokenizer: give --tokenizer PATH (tokenizer.json or "
                      "a model directory)", model ? model : "(none)", exists ? "a config file" : "a preset");
    else if (named && exists && !dir && !strstr(d.tokenizer, ".json"))
        rc = zinf_err("--tokenizer %s: a tokenizer.json, or a model directory holding one, is needed", d.tokenizer);
    char cache[4400];
    snprintf(cache, sizeof cache, "%s/sft-cache", o->out);
    if (o->dataset_cache) snprintf(cache, sizeof cache, "%s", o->dataset_cache);
    bool made = false;
    double t0 = zinf_now();
    if (!rc && comm->rank == 0)
        rc = zinf_dataset_prepare(&d, cache, r->dataset_glob[0], r->dataset_glob[1], sizeof r->dataset_glob[0], &made,
                                  r->dataset_longer, NULL);
    ZINF_TRY(zinf_comm_agree(comm, rc));
    ZINF_TRY(zinf_comm_bcast(comm, r->dataset_glob, sizeof r->dataset_glob, 0));
    ZINF_TRY(zinf_comm_bcast(comm, r->dataset_longer, sizeof r->dataset_longer, 0));
    /* the validation samples over --max_length: the training ones are on the data line */
    char vl[160] = "";
    if (r->dataset_glob[1][0] && r->dataset_longer[1] >= 0)
        snprintf(vl, sizeof vl, "; validation samples longer than --max_length %d: %lld %s", T,
                 (long long)r->dataset_longer[1], d.truncation == ZINF_TRUNC_DELETE ? "left out" : "truncated to it");
    zinf_info("zinf: --dataset %s: SFT shards %s %s (%.1f s)%s", o->dataset, made ? "made in" : "found in",
              r->dataset_glob[0], zinf_now() - t0, vl);
    return 0;
}

/* ---------------------------------------------------------------- eval --------------------- */
static int evaluate(run *r, double *val_loss)
{
    zinf_model *m = &r->m;
    int W = r->comm->size, rank = r->comm->rank;
    int64_t B = m->B, nseq = zinf_data_num_sequences(r->val);
    int64_t nbatches = nseq / B; /* whole micro-batches; at least one is checked at open */
    double sum[2] = {0, 0};
    /* Every rank runs the same number of passes (stage 3 gathers in each): a rank without a
     * batch of its own in the last round repeats that round's first batch and does not count it. */
    for (int64_t b0 = 0; b0 < nbatches; b0 += W) {
        int64_t b = b0 + rank;
        bool mine = b < nbatches;
        ZINF_TRY(zinf_data_read_rows(r->val, (mine ? b : b0) * B, B, r->inp, r->tgt, r->pos, r->kv));
        float loss;
        zinf_batch vb = batch_of(r, 0);
        ZINF_TRY(pass(r, &vb, ZINF_PASS_FORWARD, &loss, false, 0, NULL));
        /* SFT data: the mean over every predicted token (micro-batches weigh by their counts) */
        double n = r->nk ? (double)r->m.nvalid : 1.0;
        if (mine) {
            sum[0] += loss * n;
            sum[1] += n;
        }
    }
    ZINF_TRY(zinf_comm_allreduce_sum_f64(r->comm, sum, 2));
    *val_loss = sum[1] > 0 ? sum[0] / sum[1] : NAN;
    /* the device worked on the evaluation: the next step's idle time starts after it */
    if (r->tev[0] && r->tev_prev) r->be.event_record(&r->be, r->tev[4], NULL);
    return 0;
}

/* One line of --eval_prompts, newline stripped: 1 for a blank line, 0 with line cut at the tab
 * (the prompt) and *answer after it, or an error naming the file, the line and what is wrong.
 * setup checks every line with it before the first step, check_prompts reads them with it. */
static int prompt_line(char *line, const char *path, int64_t lineno, int T, int64_t max_new, char **answer)
{
    if (!*line) return 1;
    char *tab = strchr(line, '\t');
    if (!tab) return zinf_err("%s:%lld: expected \"prompt<TAB>answer\"", path, (long long)lineno);
    *tab = 0;
    *answer = tab + 1;
    size_t pl = strlen(line);
    if (!pl) return zinf_err("%s:%lld: the prompt is empty (nothing before the tab)", path, (long long)lineno);
    if ((int64_t)pl + max_new > T)
        return zinf_err("%s:%lld: the prompt's %zu bytes and --max_new_tokens %lld exceed the sequence length %d",
                        path, (long long)lineno, pl, (long long)max_new, T);
    if (strlen(*answer) >= 255) return zinf_err("%s:%lld: the answer is longer than 254 bytes", path, (long long)lineno);
    return 0;
}

static int prompts_check(const char *path, int T, int64_t max_new)
{
    FILE *f = fopen(path, "r");
    if (!f) return zinf_errc(-errno, "--eval_prompts %s: %s", path, strerror(errno));
    char line[4096], *answer;
    int rc = 0;
    for (int64_t lineno = 1; !rc && fgets(line, sizeof line, f); lineno++) {
        line[strcspn(line, "\r\n")] = 0;
        rc = prompt_line(line, path, lineno, T, max_new, &answer);
        if (rc > 0) rc = 0;
    }
    fclose(f);
    return rc;
}

/* Greedy completion of each prompt; exact match of the text generated up to a newline. */
static int check_prompts(run *r, const char *path)
{
    zinf_model *m = &r->m;
    FILE *f = fopen(path, "r");
    if (!f) return zinf_errc(-errno, "--eval_prompts %s: %s", path, strerror(errno));
    char line[4096];
    int64_t total = 0, correct = 0, lineno = 0;
    int B = m->B, T = m->T, Vp = m->c.padded_vocab;
    /* one row of logits per prompt: the last position of each */
    float *logits = malloc((size_t)B * Vp * sizeof(float));
    float *dlogits = r->be.alloc(&r->be, ZINF_PLACE_DEVICE, (size_t)B * Vp * sizeof(float));
    int64_t *at = calloc((size_t)B, sizeof *at);
    int32_t *tok = calloc((size_t)B * T, sizeof(int32_t));
    int *len = calloc((size_t)B, sizeof(int)), *done = calloc((size_t)B, sizeof(int));
    char (*want)[256] = calloc((size_t)B, 256), (*got)[256] = calloc((size_t)B, 256);
    int rc = 0;
    if (!logits || !dlogits || !at || !tok || !len || !done || !want || !got) { rc = zinf_errc(ZINF_ENOMEM, "out of memory"); goto out; }
    int shown = 0;
    for (bool eof = false; !eof && !rc;) {
        int nb = 0;
        memset(tok, 0, (size_t)B * T * sizeof(int32_t));
        while (nb < B) {
            if (!fgets(line, sizeof line, f)) { eof = true; break; }
            lineno++;
            line[strcspn(line, "\r\n")] = 0;
            char *answer;
            int pr = prompt_line(line, path, lineno, T, r->o->max_new_tokens, &answer);
            if (pr > 0) continue;
            if (pr < 0) { rc = pr; break; }
            int pl = (int)strlen(line);
            for (int i = 0; i < pl; i++) tok[(int64_t)nb * T + i] = (unsigned char)line[i];
            len[nb] = pl;
            done[nb] = 0;
            got[nb][0] = 0;
            snprintf(want[nb], 256, "%s", answer);
            nb++;
        }
        if (rc || nb == 0) break;
        for (int64_t g = 0; g < r->o->max_new_tokens; g++) {
            for (int b = 0; b < nb; b++) at[b] = (int64_t)b * T + len[b] - 1;
            zinf_batch b = {.tok = tok, .B = r->m.B, .T = r->m.T, .head_at = at, .head_n = nb};
            ZINF_TRY(pass(r, &b, ZINF_PASS_FORWARD, NULL, false, 0, NULL));
            r->be.to_f32(&r->be, dlogits, m->logits, (int64_t)nb * Vp);
            ZINF_TRY(r->be.copy(&r->be, logits, dlogits, (size_t)nb * Vp * 4, NULL));
            ZINF_TRY(r->be.sync(&r->be));
            int active = 0;
            for (int b = 0; b < nb; b++) {
                if (done[b]) continue;
                int best = zinf_gen_sample(logits + (int64_t)b * Vp, m->c.vocab_size, 0.0, 1.0, NULL, NULL, NULL);
                if (best == '\n' || len[b] >= T) { done[b] = 1; continue; }
                tok[(int64_t)b * T + len[b]++] = best;
                size_t gl = strlen(got[b]);
                if (gl < 254) { got[b][gl] = (char)(best >= 32 && best < 127 ? best : '?'); got[b][gl + 1] = 0; }
                active++;
            }
            /* all ranks stop together (stage 3 gathers in every pass) */
            double act = active;
            ZINF_TRY(zinf_comm_allreduce_max_f64(r->comm, &act, 1));
            if (act == 0) break;
        }
        for (int b = 0; b < nb; b++) {
            bool ok = strcmp(got[b], want[b]) == 0;
            correct += ok;
            total++;
            if (shown < 8) {
                char prompt[256];
                int pl = 0;
                for (int i = 0; i < T && pl < 255; i++) {
                    int32_t t = tok[(int64_t)b * T + i];
                    if (i >= len[b] - (int)strlen(got[b])) break;
                    prompt[pl++] = (char)t;
                }
                prompt[pl] = 0;
                zinf_info("  %s%s   (expected %s) %s", prompt, got[b], want[b], ok ? "ok" : "WRONG");
                shown++;
            }
        }
    }
    if (!rc)
        zinf_info("held-out prompts: %lld/%lld exact (accuracy %.1f%%)", (long long)correct, (long long)total,
                  total ? 100.0 * (double)correct / (double)total : 0.0);
    if (!rc && total)
        metrics_put(r, "the prompts' record", "{\"prompts\": %lld, \"prompts_correct\": %lld, \"prompt_accuracy\": %.6f}\n",
                    (long long)total, (long long)correct, (double)correct / (double)total);
out:
    fclose(f);
    if (dlogits) r->be.free(&r->be, ZINF_PLACE_DEVICE, dlogits);
    free(logits); free(at); free(tok); free(len); free(done); free(want); free(got);
    return rc;
}

/* ---------------------------------------------------------------- the run ------------------ */
/* MemAvailable of /proc/meminfo in bytes, 0 where it cannot be read */
static double mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024.0;
}

/* On the CPU backend every state and activation is host memory: a model or micro-batch the node
 * cannot hold is one line now, with the figures, instead of the kernel's OOM killer after minutes
 * of allocation (zinf estimate --precision fp32 gives the same states, per rank and node). */
static int cpu_host_fit(run *r, const zinf_model_cfg *mc, zinf_comm *comm, zinf_recompute rp)
{
    double avail = mem_available();
    if (!(avail > 0) || strcmp(r->be.name, "cpu")) return 0;
    int local = comm->local_size > 0 ? comm->local_size : 1, nodes = comm->size / local > 0 ? comm->size / local : 1;
    const zinf_config *c = &r->cfg;
    zinf_mem_estimate e;
    size_t a = 0, g = 0;
    ZINF_TRY(zinf_estimate_prec(mc, ZINF_EST_FP32, (int)c->zero_stage, (int)c->offload_optimizer.device,
                                (int)c->offload_param.device, nodes, local, 0, c, &e));
    ZINF_TRY(zinf_model_act_bytes(mc, (int)c->train_micro_batch_size_per_gpu, r->T, 4, rp, &a, &g));
    double each = e.gpu_bytes + (double)(a + g), need = local * each + e.cpu_bytes_per_node;
    if (need <= avail) return 0;
    return zinf_errc(ZINF_ENOMEM, "the CPU backend needs about %.1f GiB of host memory on this node for %d rank%s "
                     "(%.1f GiB of states and buffers and %.1f GiB of activations a rank%s; zinf estimate --precision "
                     "fp32 gives the states), and MemAvailable is %.1f GiB: train on GPUs (--device cuda), with fewer "
                     "ranks a node, a smaller micro-batch or a smaller model",
                     need / 1073741824.0, local, local > 1 ? "s" : "", e.gpu_bytes / 1073741824.0,
                     (double)(a + g) / 1073741824.0,
                     e.cpu_bytes_per_node > 0 ? ", and the offloaded states beside them" : "", avail / 1073741824.0);
}

/* The device memory free now, and the reserve that activations must leave: what ZeRO allocates
 * only while a step runs (buckets, gathered units, a unit's gradient: zinf estimate's figure),
 * cuDNN's attention workspace, and 5% of the GPU (at least 1 GiB) for the rest (GEMM scratch,
 * NCCL, the allocator's slack). */
static int act_room(run *r, zinf_comm *comm, size_t *freeb, size_t *reserve)
{
    const zinf_model_cfg *mc = &r->m.c;
    size_t used = 0, total = 0, es = zinf_dtype_size(r->be.cdt);
    ZINF_TRY(r->be.mem_info(&r->be, &used, &total));
    zinf_mem_estimate e;
    *reserve = total / 20;
    if (*reserve < ((size_t)1 << 30)) *reserve = (size_t)1 << 30;
    *reserve += zinf_attn_ws_bytes(r->cfg.train_micro_batch_size_per_gpu, r->T, mc->n_head, mc->n_kv_head,
                                   mc->head_dim, es);
    if (!zinf_estimate_prec(mc, es == 4 ? ZINF_EST_FP32 : ZINF_EST_MIXED, (int)r->cfg.zero_stage, ZINF_EST_NONE,
                            ZINF_EST_NONE, 1, comm->size, 0, &r->cfg, &e))
        *reserve += (size_t)e.gpu_step_buffers;
    *freeb = total > used ? total - used : 0;
    return 0;
}

/* "; lean: ..." where the run is lean and that changes its activations (the Llama family) */
static const char *lean_words(const run *r)
{
    size_t a = 0, g = 0;
    if (!r->m.lean || zinf_model_act_bytes_lean(&r->m.c, r->m.B, r->m.T, zinf_dtype_size(r->be.cdt), r->m.recompute,
                                                r->m.recompute_blocks, false, &a, &g))
        return "";
    return a + g > r->m.act_bytes + r->m.grad_bytes
               ? "; lean: their backward recomputes the norms' outputs and the MLP's product"
               : "";
}

/* Where ZeRO lets the host update run on into the next step, a step's first micro-batches run their
 * forwards together behind it (train_step), as many as their activations fit the device memory
 * that "auto"'s reserve leaves (the first's included); lean (zinf_model.lean: the kept blocks'
 * norm outputs and MLP product recomputed in the backward), micro-batch 0's and the contexts',
 * where that fits more of them. On the CPU backend, which has no device memory to fit, lean, so
 * that its one context and micro-batch 0 run the lean backward. Before micro-batch 0's activations
 * are allocated; the ranks are lean where any of them is. */
static int choose_lean(run *r, zinf_comm *comm, zinf_recompute rp, int nrc)
{
    if (r->m.lean) return 0; /* "auto" chose it on every rank (recompute_blocks) */
    int64_t gas = r->cfg.gradient_accumulation_steps;
    int most = gas < 1 + ZINF_MAX_CTX ? (int)gas : 1 + ZINF_MAX_CTX, rc = 0;
    bool lean = false;
    if (zinf_zero_update_may_run_on(r->z) && most > 1) {
        lean = true;
        if (r->be.mem_info) {
            size_t a = 0, g = 0, la = 0, lg = 0, freeb = 0, reserve = 0, es = zinf_dtype_size(r->be.cdt);
            int B = (int)r->cfg.train_micro_batch_size_per_gpu;
            rc = zinf_model_act_bytes_lean(&r->m.c, B, r->T, es, rp, nrc, false, &a, &g);
            if (!rc) rc = zinf_model_act_bytes_lean(&r->m.c, B, r->T, es, rp, nrc, true, &la, &lg);
            if (!rc) rc = act_room(r, comm, &freeb, &reserve);
            size_t room = !rc && freeb > reserve ? freeb - reserve : 0, full = a + g ? room / (a + g) : 0,
                   thin = la + lg ? room / (la + lg) : 0;
            lean = thin > full && full < (size_t)most;
        }
    }
    ZINF_TRY(zinf_comm_agree(comm, rc));
    double any = lean;
    ZINF_TRY(zinf_comm_allreduce_max_f64(comm, &any, 1));
    r->m.lean = any > 0;
    return 0;
}

/* Contexts for the forwards that run together (choose_lean): as many of a step's other
 * micro-batches as fit the device memory left after micro-batch 0's activations and the reserve,
 * each with micro-batch 0's recompute policy, blocks and leanness; one on the CPU backend. The
 * ranks take the fewest any of them fits. */
static int forward_contexts(run *r, zinf_comm *comm)
{
    int64_t gas = r->cfg.gradient_accumulation_steps;
    int want = gas - 1 < ZINF_MAX_CTX ? (int)(gas - 1) : ZINF_MAX_CTX, n = 0, rc = 0;
    if (!zinf_zero_update_may_run_on(r->z) || want < 1) return 0;
    size_t each = r->m.act_bytes + r->m.grad_bytes, freeb = 0, reserve = 0;
    if (!r->be.mem_info) n = 1;
    else if (!(rc = act_room(r, comm, &freeb, &reserve)) && freeb > reserve && each)
        n = (freeb - reserve) / each < (size_t)want ? (int)((freeb - reserve) / each) : want;
    ZINF_TRY(zinf_comm_agree(comm, rc));
    /* a context the device cannot give after all (fragmentation) ends the count, not the run */
    for (int j = 0; j < n; j++) {
        if (zinf_model_ctx_alloc(&r->m, &r->ctx[j])) {
            zinf_err_clear();
            break;
        }
        r->nctx = j + 1;
    }
    double fewest = -(double)r->nctx;
    ZINF_TRY(zinf_comm_allreduce_max_f64(comm, &fewest, 1));
    n = (int)-fewest;
    while (r->nctx > n) zinf_model_free(&r->ctx[--r->nctx]);
    if (n)
        zinf_info("the forwards of %d micro-batches of each step run together, unit by unit behind the last "
                  "step's host update (%.2f GiB of activations for each after the first%s)", n + 1,
                  (double)each / 1073741824.0, lean_words(r));
    return 0;
}

/* How many blocks to recompute: every one, the count the config gives, or for "auto" the fewest
 * for which the activations fit in the device memory the ZeRO states left, less a reserve for
 * what is allocated later (GEMM workspaces, NCCL's buffers, the allocator's slack), lean where
 * that pays (zinf_model_recompute_fit; r->m.lean). The ranks take the largest count any of them
 * needs, so that their steps stay in step, and are lean if any of them is: lean with more
 * blocks recomputed holds less than what each rank chose. */
static int recompute_blocks(run *r, zinf_recompute rp, zinf_comm *comm, int *nrc)
{
    const zinf_model_cfg *mc = &r->m.c;
    int64_t v = r->cfg.zinf_recompute_blocks;
    int rc = 0;
    *nrc = 0;
    if (rp == ZINF_RECOMPUTE_NONE) return 0;
    if (v == -1) *nrc = mc->n_layer;
    else if (v >= 0 && v > mc->n_layer)
        rc = zinf_err("activation_checkpointing.zinf_recompute_blocks %lld: the model has %d blocks", (long long)v,
                      mc->n_layer);
    else if (v >= 0) *nrc = (int)v;
    else if (!r->be.mem_info) {
        zinf_info("activation checkpointing: zinf_recompute_blocks \"auto\" on the %s backend, which has no "
                  "device memory to fit: no block is recomputed", r->be.name);
    }
    bool autofit = v == ZINF_RECOMPUTE_AUTO && r->be.mem_info, lean = false;
    size_t freeb = 0, reserve = 0, es = zinf_dtype_size(r->be.cdt);
    if (autofit) {
        rc = act_room(r, comm, &freeb, &reserve);
        size_t budget = freeb > reserve ? freeb - reserve : 0;
        if (!rc)
            rc = zinf_model_recompute_fit(mc, (int)r->cfg.train_micro_batch_size_per_gpu, r->T, es, rp, budget, &lean,
                                          nrc);
        if (rc) rc = zinf_err_prefix(rc, "activation_checkpointing.zinf_recompute_blocks \"auto\"");
    }
    ZINF_TRY(zinf_comm_agree(comm, rc));
    /* every rank recomputes the most blocks any rank needs: the ranks' programs stay the same */
    double most[2] = {*nrc, lean};
    ZINF_TRY(zinf_comm_allreduce_max_f64(comm, most, 2));
    *nrc = (int)most[0];
    r->m.lean = most[1] > 0;
    if (autofit) { /* what the ranks agreed on, against rank 0's room */
        size_t a = 0, g = 0;
        zinf_model_act_bytes_lean(mc, (int)r->cfg.train_micro_batch_size_per_gpu, r->T, es, rp, *nrc, r->m.lean, &a,
                                  &g);
        zinf_info("activation checkpointing (auto): %.2f GiB of activations for %d recomputed block%s fit "
                  "the %.2f GiB free after the ZeRO states, less %.2f GiB kept in reserve%s",
                  (double)(a + g) / 1073741824.0, *nrc, *nrc == 1 ? "" : "s", (double)freeb / 1073741824.0,
                  (double)reserve / 1073741824.0,
                  r->m.lean ? "; lean (the kept blocks' backward recomputes the norms' outputs and the MLP's product), "
                              "which keeps more blocks than full activations would"
                            : "");
    }
    if (*nrc < mc->n_layer)
        zinf_info("activation checkpointing: recomputing %d of %d blocks (the first ones); the others keep their "
                  "activations", *nrc, mc->n_layer);
    return 0;
}

static int setup(run *r)
{
    const zinf_train_opts *o = r->o;
    zinf_comm *comm = r->comm;
    int rc;
    zinf_log_init(comm->rank, NULL); /* rank 0 prints; the per-rank files are opened below */
    if (!o->data == !o->dataset)
        return zinf_comm_agree(comm, zinf_err(o->data ? "train: --data and --dataset exclude each other"
                                                      : "train: --data (a glob of token shards) or --dataset (a JSONL chat "
                                                        "dataset) is required"));
    ZINF_TRY(zinf_comm_agree(comm, fault_parse(&r->fault)));
    ZINF_TRY(zinf_comm_agree(comm, env_check()));
    zinf_flags flags = o->flags;
    ZINF_TRY(zinf_train_resolve_config(comm, o->config_path, o->model, &flags, &r->cfg));
    /* the compute dtype follows the config's fp16/bf16 blocks; the CPU backend is fp32 */
    zinf_dtype cdt = r->cfg.bf16 ? ZINF_BF16 : r->cfg.fp16 ? ZINF_F16 : ZINF_F32;
    rc = zinf_backend_open(&r->be, o->device, comm->local_rank, cdt);
    ZINF_TRY(zinf_comm_agree(comm, rc));
    r->be_ok = true;
    /* one rank failing here ends the job like one failing mid-run: the others are joining */
    rc = fault_at(&r->fault, comm->rank, 0);
    if (rc && comm->size > 1) zinf_comm_abort(comm, zinf_errmsg());
    if (rc) return zinf_comm_agree(comm, rc);
    ZINF_TRY(zinf_comm_agree(comm, zinf_comm_attach(comm, &r->be)));
    size_t dev_total = 0;
    if (r->be.mem_info && r->be.mem_info(&r->be, &r->dev_base, &dev_total)) r->dev_base = 0;

    zinf_model_cfg mc;
    ZINF_TRY(zinf_comm_agree(comm, zinf_model_cfg_load(&mc, o->model)));
    r->T = r->cfg.seq_len > 0 ? (int)r->cfg.seq_len : mc.n_positions;
    if (r->T > mc.n_positions)
        return zinf_comm_agree(comm, zinf_err("--max_length %d exceeds the model's %s %d", r->T,
                                              zinf_model_positions_key(&mc), mc.n_positions));
    if (mc.sliding_window && r->T > mc.sliding_window)
        return zinf_comm_agree(comm, zinf_err("%s: sliding_window %d is shorter than --max_length %d: zinf's "
                                              "attention has no window (give --max_length %d or less)", mc.name,
                                              mc.sliding_window, r->T, mc.sliding_window));
    if (o->report_to && strcmp(o->report_to, "tensorboard") && strcmp(o->report_to, "none"))
        return zinf_comm_agree(comm, zinf_err("--report_to %s: zinf reports to tensorboard or none (nothing leaves the "
                                              "machine; metrics.jsonl has every logged step)", o->report_to));
    if (o->logging_dir && !(o->report_to && !strcmp(o->report_to, "tensorboard")))
        return zinf_comm_agree(comm, zinf_err("--logging_dir %s: it is where --report_to tensorboard writes; give that "
                                              "too, or leave it out", o->logging_dir));
    if (o->swap_engine && strcmp(o->swap_engine, "io_uring") && strcmp(o->swap_engine, "psync"))
        return zinf_comm_agree(comm, zinf_err("--swap_engine %s: expected io_uring or psync", o->swap_engine));
    snprintf(r->cfg.swap_engine, sizeof r->cfg.swap_engine, "%s", o->swap_engine ? o->swap_engine : "io_uring");
    if (o->swap_engine && r->cfg.offload_optimizer.device != ZINF_DEV_NVME && r->cfg.offload_param.device != ZINF_DEV_NVME)
        zinf_warn("--swap_engine %s has no effect: the config offloads nothing to NVMe", o->swap_engine);
    if (o->save_total_limit > 0 && r->cfg.save_steps == 0 && r->cfg.save_strategy != ZINF_IVAL_EPOCH)
        zinf_warn("--save_total_limit %lld: this run saves no checkpoint but where a signal stops it (--save_steps 0 "
                  "or --save_strategy no), so it has nothing to keep or remove", (long long)o->save_total_limit);
    rc = zinf_config_notices(&r->cfg, r->be.name, comm->rank == 0 ? stderr : NULL);
    r->ac = r->cfg.activation_checkpointing || (o->gradient_checkpointing_set && o->gradient_checkpointing);
    if (!rc && o->gradient_checkpointing_set && !o->gradient_checkpointing && r->cfg.activation_checkpointing)
        rc = zinf_err("--gradient_checkpointing false: the config's activation_checkpointing block asks for "
                      "recomputation; remove one of the two");
    if (!rc && o->ac_keep_attention && !r->ac)
        rc = zinf_err("--ac_keep_attention: neither an activation_checkpointing block nor "
                      "--gradient_checkpointing asks for recomputation, so every activation is kept already");
    ZINF_TRY(zinf_comm_agree(comm, rc));

    if (o->prompts) { /* every line, before training, not after it; said once */
        /* the check computes one row of logits per prompt of a micro-batch, all at once */
        int64_t B = r->cfg.train_micro_batch_size_per_gpu;
        if (zinf_model_head_rows(B * r->T, mc.padded_vocab, zinf_dtype_size(r->be.cdt)) < B)
            return zinf_comm_agree(comm, zinf_err("--eval_prompts: the prompt check holds one row of logits for "
                                                  "each of the %lld prompts of a micro-batch, more than a "
                                                  "vocabulary of %d leaves room for: leave --eval_prompts out",
                                                  (long long)B, mc.vocab_size));
        ZINF_TRY(zinf_comm_agree(comm, comm->rank == 0 ? prompts_check(o->prompts, r->T, o->max_new_tokens) : 0));
    }
    const zinf_family *fam = zinf_family_find(mc.model_type);
    if (o->packing && fam && !fam->packed_rows)
        return zinf_comm_agree(comm, zinf_err("--packing: the %s family takes one sample per row (its learned positions "
                                              "are the row offsets); train without --packing, which pads each sample's row",
                                              mc.model_type));
    const char *data = o->data, *val = o->val;
    if (o->dataset) {
        ZINF_TRY(sft_dataset(r, o->model, r->T));
        data = r->dataset_glob[0];
        if (!val && r->dataset_glob[1][0]) val = r->dataset_glob[1];
    }
    double topen = zinf_now();
    rc = zinf_data_open_packing(&r->train, data, r->T, mc.vocab_size, o->seed, 1, o->packing);
    topen = zinf_now() - topen;
    if (!rc && val) {
        rc = zinf_data_open_packing(&r->val, val, r->T, mc.vocab_size, o->seed, 0, o->packing);
        if (!rc && zinf_data_num_sequences(r->val) < r->cfg.train_micro_batch_size_per_gpu)
            rc = zinf_err("--val %s: %lld sequences of %d tokens, fewer than one micro-batch (%lld)", val,
                          (long long)zinf_data_num_sequences(r->val), r->T,
                          (long long)r->cfg.train_micro_batch_size_per_gpu);
    }
    /* an evaluation asked for with nothing to evaluate on: none, as ms-swift turns its eval_strategy
     * off without a validation set, and said, not silent (HF's Trainer refuses an eval_strategy
     * without an eval_dataset) */
    const zinf_flags *fl = &o->flags;
    bool asked = fl->eval_steps_set || (fl->eval_strategy_set && r->cfg.eval_strategy != ZINF_IVAL_NO);
    if (!rc && !val && asked) {
        char what[96];
        if (fl->eval_strategy_set && r->cfg.eval_strategy != ZINF_IVAL_NO)
            snprintf(what, sizeof what, "--eval_strategy %s", fl->eval_strategy);
        else snprintf(what, sizeof what, "--eval_steps %lld", (long long)fl->eval_steps);
        zinf_warn("%s: no validation data (--val, --val_dataset or --split_dataset_ratio): the run evaluates nothing",
                  what);
    }
    ZINF_TRY(zinf_comm_agree(comm, rc));

    /* total optimizer steps: --max_steps, else epochs over the training sequences */
    int64_t nseq = zinf_data_num_sequences(r->train), total = r->cfg.max_steps;
    /* the data is one stream that wraps: a step's batch larger than the data repeats sequences in it */
    if (nseq < r->cfg.train_batch_size)
        zinf_warn("%s: %lld sequence%s of %d tokens, fewer than one step's batch of %lld (micro %lld x accumulation "
                  "%lld x world %d): each step repeats sequences", data, (long long)nseq, nseq == 1 ? "" : "s", r->T,
                  (long long)r->cfg.train_batch_size, (long long)r->cfg.train_micro_batch_size_per_gpu,
                  (long long)r->cfg.gradient_accumulation_steps, comm->size);
    if (total <= 0) total = (int64_t)ceil(r->cfg.num_train_epochs * (double)nseq / (double)r->cfg.train_batch_size);
    if (total < 1) total = 1;
    ZINF_TRY(zinf_comm_agree(comm, zinf_config_finalize_steps(&r->cfg, total, &flags, comm->rank == 0 ? stderr : NULL)));
    r->cfg.max_steps = total;

    zinf_recompute rp = !r->ac ? ZINF_RECOMPUTE_NONE
                        : o->ac_keep_attention ? ZINF_RECOMPUTE_KEEP_ATTN : ZINF_RECOMPUTE_FULL;
    ZINF_TRY(zinf_comm_agree(comm, cpu_host_fit(r, &mc, comm, rp)));
    rc = zinf_model_init(&r->m, &mc, &r->be);
    /* the activations come after the ZeRO states, so that "auto" sees what memory is left */
    double tz = zinf_now();
    if (!rc) rc = zinf_zero_init(&r->z, &r->m, &r->cfg, comm, &r->be, o->seed);
    tz = zinf_now() - tz;
    int nrc = 0;
    if (!rc) rc = recompute_blocks(r, rp, comm, &nrc);
    if (!rc) rc = choose_lean(r, comm, rp, nrc);
    if (!rc) rc = zinf_model_alloc_acts_n(&r->m, (int)r->cfg.train_micro_batch_size_per_gpu, r->T, rp, nrc);
    ZINF_TRY(zinf_comm_agree(comm, rc));
    ZINF_TRY(forward_contexts(r, comm));
    size_t N = (size_t)r->cfg.train_micro_batch_size_per_gpu * (size_t)r->T * (size_t)(1 + r->nctx);
    r->inp = malloc(N * 4);
    r->tgt = malloc(N * 4);
    /* packed rows carry each token's position and sample start; plain and one-sample rows need
     * neither (a pad run only follows its row's sample, so causal attention already keeps it out) */
    if (o->packing) {
        r->pos = malloc(N * 4);
        r->kv = malloc(N * 4);
    }
    if (!rc && zinf_data_is_sft(r->train) &&
        !(r->nk = calloc((size_t)r->cfg.gradient_accumulation_steps, sizeof *r->nk)))
        rc = zinf_errc(ZINF_ENOMEM, "out of host memory");
    if (!rc && (!r->inp || !r->tgt || (o->packing && (!r->pos || !r->kv)))) rc = zinf_errc(ZINF_ENOMEM, "out of host memory");
    ZINF_TRY(zinf_comm_agree(comm, rc));
    zinf_loss_scaler_init(&r->ls, &r->cfg);
    if (r->cfg.wall_clock_breakdown && r->be.event_new_timed)
        for (int i = 0; i < 6; i++)
            if (!(r->tev[i] = r->be.event_new_timed(&r->be))) rc = zinf_errc(ZINF_ENOMEM, "cannot create timing events");
    ZINF_TRY(zinf_comm_agree(comm, rc));

    /* --out: rank 0 makes it and holds its lock for the whole run before anything in it is read or
     * written (and only once the flags, config and model were found good: a run refused for them
     * leaves no directory behind); what an interrupted save left there goes */
    rc = comm->rank == 0 ? zinf_mkdir_p_made(o->out, &r->out_made) : 0;
    if (!rc && comm->rank == 0) {
        double w;
        lock_wait(&w);
        rc = zinf_ckpt_lock_dir(o->out, w, &r->lock_fd, said_removed);
    }
    /* an earlier run's mark of its end goes: from here on it can only be this run's */
    if (!rc && comm->rank == 0) {
        char fin[4200];
        snprintf(fin, sizeof fin, "%s/" ZINF_FINISHED_FILE, o->out);
        if (unlink(fin) && errno != ENOENT)
            rc = zinf_errc(-errno, "cannot remove %s (an earlier run's mark that it finished): %s", fin, strerror(errno));
    }
    ZINF_TRY(zinf_comm_agree(comm, rc));
    /* --resume: the newest complete checkpoint (auto) or the one named; rank 0 finds it. A fresh
     * run does not start where another run's checkpoints are, unless told to (HF's
     * --overwrite_output_dir): its `latest` would hide them, and --resume auto would later
     * continue one or the other by accident. */
    char ck[4096] = "";
    rc = comm->rank == 0 ? zinf_ckpt_resolve(o->resume, o->out, ck, sizeof ck) : 0;
    if (!rc && comm->rank == 0 && !ck[0] && !o->overwrite_output_dir) {
        char other[4096];
        zinf_ckpt_newest(o->out, other, sizeof other);
        if (other[0])
            rc = zinf_err("--out %s holds another run's checkpoints (%s): continue it with --resume auto, or start a "
                          "new run there with --overwrite_output_dir", o->out, other);
    }
    /* a checkpoint needs room: say so now, not after the training it would keep. zinf_zero_init
     * has preallocated the node's NVMe swap files, so on a file system they share with --out the
     * free space is what they leave: the swap's needs and the checkpoint's are counted together.
     * With --save_steps 0 the only save is the one a stopping signal asks for: a warning, unless
     * --no_signal_save gives that save up */
    if (!rc && comm->rank == 0 && !(r->cfg.save_steps == 0 && o->no_signal_save)) {
        struct statvfs sv;
        int64_t need = zinf_ckpt_bytes(&r->m);
        double avail = 0;
        if (!statvfs(o->out, &sv) && (avail = (double)sv.f_bavail * (double)sv.f_frsize) < (double)need) {
            const char *sw = swap_shares_fs(&r->cfg, o->out) ? " after the NVMe swap files this node preallocated there" : "";
            if (r->cfg.save_steps > 0)
                rc = zinf_err("--out %s: a checkpoint of this model takes %.3g GB and its file system has %.3g GB "
                              "free%s (free space, or --save_steps 0 to train without periodic checkpoints)",
                              o->out, (double)need / 1e9, avail / 1e9, sw);
            else
                zinf_warn("--out %s: a checkpoint of this model takes %.3g GB and its file system has %.3g GB free%s: "
                          "the save a stop by SIGUSR1 or SIGTERM makes would fail (free space, or --no_signal_save "
                          "to stop without saving)", o->out, (double)need / 1e9, avail / 1e9, sw);
        }
    }
    ZINF_TRY(zinf_comm_agree(comm, rc));
    ZINF_TRY(zinf_comm_bcast(comm, ck, sizeof ck, 0));
    snprintf(r->resumed, sizeof r->resumed, "%s", ck);
    /* a stop asked for during the start-up so far: the load (minutes for a large model) is not
     * worth starting; one asked for during the load is the loop's to act on */
    rc = stop_before_first_step(r, false);
    if (rc) return rc;
    double tload = zinf_now();
    if (o->init_from && !ck[0]) /* a resumed run has its weights already */
        ZINF_TRY(zinf_hf_import(o->init_from, comm, &r->m, r->z, &r->hf_load));
    if (ck[0]) {
        zinf_ckpt_meta meta;
        ZINF_TRY(zinf_ckpt_load(ck, comm, &r->m, r->z, &meta));
        if (meta.seed != o->seed)
            rc = zinf_err("%s: saved with --seed %llu, this run has %llu: the data order would change", ck,
                          (unsigned long long)meta.seed, (unsigned long long)o->seed);
        else if (meta.max_length && meta.max_length != r->T)
            rc = zinf_err("%s: saved with --max_length %lld, this run has %d: the data position would not carry "
                          "over", ck, (long long)meta.max_length, r->T);
        else if (meta.step > r->cfg.max_steps)
            rc = zinf_err("%s: the checkpoint is at step %lld, past this run's --max_steps %lld", ck,
                          (long long)meta.step, (long long)r->cfg.max_steps);
        ZINF_TRY(zinf_comm_agree(comm, rc));
        r->start_step = meta.step;
        r->data_start = meta.consumed_samples;
        r->opt_steps = meta.opt_steps;
        /* another global batch (another world size, micro-batch or accumulation): the data goes on
         * from the next sequence not yet read, the schedule from the step; said once */
        if (meta.train_batch_size != r->cfg.train_batch_size)
            zinf_warn("%s: saved with train_batch_size %lld, this run has %lld (micro %lld x accumulation %lld x "
                      "world %d): the data continues from sequence %lld, the next not yet read, and the "
                      "learning-rate schedule from step %lld", ck, (long long)meta.train_batch_size,
                      (long long)r->cfg.train_batch_size, (long long)r->cfg.train_micro_batch_size_per_gpu,
                      (long long)r->cfg.gradient_accumulation_steps, comm->size, (long long)meta.consumed_samples,
                      (long long)meta.step);
        r->run_id = meta.run_id;
        r->ls.cur_scale = meta.ls.cur_scale;
        r->ls.cur_hysteresis = meta.ls.cur_hysteresis;
        r->ls.cur_iter = meta.ls.cur_iter;
        r->ls.last_overflow_iter = meta.ls.last_overflow_iter;
    } else {
        r->run_id = zinf_ckpt_new_run_id();
        ZINF_TRY(zinf_comm_bcast(comm, &r->run_id, sizeof r->run_id, 0));
    }
    tload = zinf_now() - tload;
    {
        size_t n = 0;
        FILE *ms = open_memstream(&r->cfg_json, &n);
        if (!ms) return zinf_comm_agree(comm, zinf_errc(ZINF_ENOMEM, "out of host memory"));
        zinf_config_print(&r->cfg, ms);
        fclose(ms);
    }
    /* a resume under another config: the keys that changed, in one line */
    if (ck[0] && comm->rank == 0) {
        char *old = zinf_ckpt_stored_config(ck), changed[1024];
        int nd = old ? zinf_config_diff(old, r->cfg_json, changed, sizeof changed) : 0;
        if (nd > 0) zinf_warn("%s was saved under another config; %d key%s changed: %s", ck, nd, nd > 1 ? "s" : "", changed);
        free(old);
    }
    rc = 0;
    if (comm->rank == 0) {
        snprintf(r->metrics_path, sizeof r->metrics_path, "%s/metrics.jsonl", o->out);
        r->metrics = fopen(r->metrics_path, ck[0] ? "a" : "w"); /* a resumed run appends */
        if (!r->metrics) rc = zinf_errc(-errno, "%s: %s", r->metrics_path, strerror(errno));
        /* DeepSpeed's monitors write to os.path.join(output_path, job_name) */
        char tb[4096], csv[4096];
        monitor_dir(tb, sizeof tb, r->cfg.tensorboard_output_path, r->cfg.tensorboard_job_name);
        monitor_dir(csv, sizeof csv, r->cfg.csv_monitor_output_path, r->cfg.csv_monitor_job_name);
        bool tbon = r->cfg.tensorboard_enabled, csvon = r->cfg.csv_monitor_enabled;
        if (!rc && tbon) rc = zinf_mkdir_p(tb);
        if (!rc && csvon) rc = zinf_mkdir_p(csv);
        if (!rc) rc = zinf_monitor_open(&r->mon, tbon ? tb : NULL, csvon ? csv : NULL);
        /* --report_to tensorboard: HF's TensorBoardCallback, in --logging_dir or, as HF's default,
         * OUT/runs/MonDD_HH-MM-SS_HOST */
        if (!rc && o->report_to && !strcmp(o->report_to, "tensorboard")) {
            char ld[4096], host[256] = "localhost", when[64];
            time_t t = time(NULL);
            struct tm tm;
            gethostname(host, sizeof host - 1);
            host[sizeof host - 1] = 0;
            strftime(when, sizeof when, "%b%d_%H-%M-%S", localtime_r(&t, &tm));
            if (o->logging_dir) snprintf(ld, sizeof ld, "%s", o->logging_dir);
            else snprintf(ld, sizeof ld, "%s/runs/%s_%s", o->out, when, host);
            rc = zinf_mkdir_p(ld);
            if (!rc) rc = zinf_monitor_open(&r->hfmon, ld, NULL);
            if (!rc) zinf_info("zinf: TensorBoard scalars (--report_to) in %s", ld);
        }
    }
    ZINF_TRY(zinf_comm_agree(comm, rc));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/logs", o->out);
    rc = comm->rank == 0 && o->per_rank_logs ? zinf_mkdir_p(dir) : 0;
    ZINF_TRY(zinf_comm_agree(comm, rc));
    ZINF_TRY(zinf_comm_agree(comm, zinf_log_init(comm->rank, o->per_rank_logs ? dir : NULL)));
    const zinf_config *c = &r->cfg;
    zinf_info("zinf: %s (%.2fM parameters, L=%d C=%d heads=%d V=%d T=%d kv_heads=%d head_dim=%d, %s) on %d rank%s, "
              "%s backend (%s)", mc.name, (double)r->m.num_params / 1e6, mc.n_layer, mc.n_embd, mc.n_head,
              mc.vocab_size, r->T, mc.n_kv_head, mc.head_dim, mc.model_type, comm->size, comm->size > 1 ? "s" : "",
              r->be.name, zinf_dtype_name(r->be.cdt));
    ZINF_TRY(zinf_comm_agree(comm, zinf_comm_log_placement(comm)));
    zinf_info("zinf: batch %lld = micro %lld x accumulation %lld x world %d; %lld steps; %s lr %g; "
              "ZeRO stage %d%s", (long long)c->train_batch_size, (long long)c->train_micro_batch_size_per_gpu,
              (long long)c->gradient_accumulation_steps, comm->size, (long long)total,
              c->sched.type ? zinf_sched_name(c->sched.type) : "constant", c->lr, c->zero_stage,
              !r->ac ? "" : o->ac_keep_attention
                  ? ", activation checkpointing (attention outputs kept)" : ", activation checkpointing");
    zinf_info("zinf: activations %.2f MiB, their gradients %.2f MiB per rank", (double)r->m.act_bytes / 1048576.0,
              (double)r->m.grad_bytes / 1048576.0);
    int64_t rows = (int64_t)r->m.B * r->m.T;
    if (r->m.head_rows < rows) /* the logits would pass ZINF_LOGITS_BUDGET (or ZINF_HEAD_ROWS) */
        zinf_info("zinf: the head computes its logits in %lld chunks of at most %lld rows (%.2f GiB each); a training "
                  "forward runs each chunk's backward but the last's", (long long)((rows + r->m.head_rows - 1) / r->m.head_rows),
                  (long long)r->m.head_rows,
                  (double)r->m.head_rows * r->m.c.padded_vocab * zinf_dtype_size(r->be.cdt) / 1073741824.0);
    zinf_zero_print_mem(r->z);
    /* where a large model's start-up goes (minutes for 32B on 4 GPUs): the states' allocation,
     * page-locking, NVMe files and random init, then the weights' or checkpoint's read */
    char rd[96] = "";
    if (ck[0] || o->init_from)
        snprintf(rd, sizeof rd, ", %s read in %.1f s", ck[0] ? "the checkpoint" : "the weights", tload);
    zinf_info("zinf: start-up %.1f s: ZeRO states allocated and initialized in %.1f s on rank 0%s",
              zinf_now() - r->t_start, tz, rd);
    if (zinf_data_is_sft(r->train)) {
        /* the samples over T: those the shards hold, left out here, and those --dataset's cache
         * deleted (or truncated) before the shards were written */
        char longer[320];
        int64_t out = zinf_data_num_dropped(r->train), cut = 0;
        bool del = o->sft.truncation == ZINF_TRUNC_DELETE;
        if (r->dataset_longer[0] < 0)
            snprintf(longer, sizeof longer, "an unknown number longer than --max_length %d %s (the cache was made by "
                     "a zinf that did not keep the count: remove its directory to make it again and count them)",
                     r->T, del ? "left out" : "truncated to it");
        else {
            if (del) out += r->dataset_longer[0];
            else cut = r->dataset_longer[0];
            int n = snprintf(longer, sizeof longer, "%lld longer than --max_length %d left out", (long long)out, r->T);
            if (cut) snprintf(longer + n, sizeof longer - (size_t)n, ", %lld truncated to it", (long long)cut);
        }
        zinf_info("zinf: data %s: %lld SFT samples in %d file%s, %s, %lld rows of %d tokens (%s), %.1f%% of the "
                  "positions filled, read and grouped in %.2f s", data, (long long)zinf_data_num_samples(r->train),
                  zinf_data_num_files(r->train), zinf_data_num_files(r->train) > 1 ? "s" : "", longer,
                  (long long)nseq, r->T, o->packing ? "packed" : "one sample each, padded",
                  100.0 * (double)zinf_data_num_row_tokens(r->train) / ((double)nseq * r->T), topen);
    } else
        zinf_info("zinf: data %s: %lld sequences of %d tokens in %d file%s", data, (long long)nseq, r->T,
                  zinf_data_num_files(r->train), zinf_data_num_files(r->train) > 1 ? "s" : "");
    if (ck[0]) zinf_info("zinf: resumed from %s after step %lld (read in %.2f s)", ck, (long long)r->start_step, tload);
    if (ck[0] && r->start_step == r->cfg.max_steps)
        zinf_info("zinf: %s is at --max_steps %lld already: nothing to train", ck, (long long)r->cfg.max_steps);
    else if (o->init_from && ck[0]) /* a requeued job's command line: the checkpoint's weights go on */
        zinf_info("zinf: --init_from %s not read: the run resumed from %s, whose weights it continues", o->init_from,
                  ck);
    else if (o->init_from) {
        const zinf_hf_load *l = &r->hf_load;
        zinf_info("zinf: initial weights from %s (Hugging Face %s safetensors; %.3f GB read in %.2f s, %.2f GB/s, %s; "
                  "%.2f s of it waiting for the reads)",
                  o->init_from, r->m.c.model_type, (double)l->read / 1e9, l->seconds,
                  l->seconds > 0 ? (double)l->read / 1e9 / l->seconds : 0.0,
                  l->direct ? "O_DIRECT" : "buffered: the file system refuses O_DIRECT", l->wait_seconds);
    }
    return 0;
}

static void teardown(run *r)
{
    if (r->lock_fd >= 0) close(r->lock_fd);
    free(r->cfg_json);
    if (r->metrics) fclose(r->metrics);
    zinf_monitor_close(r->mon);
    zinf_monitor_close(r->hfmon);
    for (int i = 0; i < 6; i++)
        if (r->tev[i]) r->be.event_free(&r->be, r->tev[i]);
    zinf_zero_free(r->z);
    for (int j = 0; j < r->nctx; j++) zinf_model_free(&r->ctx[j]);
    zinf_model_free(&r->m);
    if (r->train) zinf_data_close(r->train);
    if (r->val) zinf_data_close(r->val);
    free(r->inp);
    free(r->tgt);
    free(r->pos);
    free(r->kv);
    free(r->nk);
    if (r->be_ok) {
        zinf_comm_detach(r->comm);
        zinf_backend_close(&r->be);
    }
    zinf_log_close();
}

static void json_num(char *buf, size_t cap, double x)
{
    if (isfinite(x)) snprintf(buf, cap, "%.7g", x);
    else snprintf(buf, cap, "null");
}

/* a line of the flops profiler's report: to flops_profiler.output_file where one is open (rank
 * 0's), else to the log */
static void prof_out(FILE *fp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void prof_out(FILE *fp, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (fp) fprintf(fp, "%s\n", line);
    else zinf_info("%s", line);
}

/* The flops profiler's report of step `done` (wall time dt): its FLOPs, and with
 * flops_profiler.detailed the step's n operations t (zinf_prof_totals; NULL without), most time
 * first, beside the step's wall time; what they leave is the time between them (copies,
 * collectives, waits for the host, launches). */
static void log_flops_profile(run *r, int64_t done, double dt, double flops, int64_t tokens, const zinf_op_total *t,
                              int n)
{
    const char *file = r->cfg.flops_profiler_output_file;
    FILE *fp = NULL;
    if (file[0] && r->comm->rank == 0 && !(fp = fopen(file, "w")))
        zinf_warn("flops_profiler.output_file %s: %s; the report goes to the log", file, strerror(errno));
    prof_out(fp, "flops profiler: step %lld: %.3g FLOPs (6N + 12LCT per token x %lld tokens), %.3g FLOP/s",
             (long long)done, flops, (long long)tokens, flops / dt);
    if (t) {
        double sum = 0;
        prof_out(fp, "flops profiler: the step's operations on rank 0 (%s backend; device ms between events "
                     "around each call, calls, share of the step's %.2f ms; the products' and attention's "
                     "FLOPs and rate):", r->be.name, 1e3 * dt);
        for (int i = 0; i < n; i++) {
            char tf[64] = "";
            if (t[i].flops > 0 && t[i].ms > 0)
                snprintf(tf, sizeof tf, " | %.0f FLOPs, %.4g TFLOP/s", t[i].flops, t[i].flops / (1e9 * t[i].ms));
            prof_out(fp, "  op %-16s %10.3f ms | %6ld calls | %5.1f%%%s", t[i].name, t[i].ms, t[i].calls,
                     100.0 * t[i].ms / (1e3 * dt), tf);
            sum += t[i].ms;
        }
        prof_out(fp, "  operations %.3f ms of the step's %.3f ms; between them %.3f ms", sum, 1e3 * dt,
                 1e3 * dt - sum);
    }
    if (fp) {
        int bad = ferror(fp);
        if (fclose(fp) || bad) zinf_warn("flops_profiler.output_file %s: the report could not be written in full", file);
        else zinf_info("flops profiler: step %lld's report written to %s", (long long)done, file);
    }
}

/* The log line (and the breakdowns the config asks for) and the metrics.jsonl record of step
 * `done`; tps and ms: over the steps since the last one logged. A failed write of the record is
 * kept in r->metrics_rc for logs_agreed. */
static void log_step(run *r, const step_result *s, int64_t done, double val_loss, bool eval_now, double tps,
                     double ms)
{
    const zinf_config *c = &r->cfg;
    int64_t total = c->max_steps;
    char vbuf[64] = "", el[16], left[16];
    if (eval_now) snprintf(vbuf, sizeof vbuf, " | val %.4f", val_loss);
    /* the time left: the recent step time for the steps to come, plus the mean evaluation and
     * save for each still due; the steps' average leaves out this process's warm-up step */
    double elapsed = zinf_now() - r->t_start;
    double eta = zinf_progress_eta(&r->prog, total - done,
                                   r->val && c->eval_strategy != ZINF_IVAL_NO ? zinf_progress_events_left(done, total, c->eval_steps) : 0,
                                   zinf_progress_events_left(done, total, c->save_steps));
    zinf_info("step %5lld/%lld | loss %.4f%s | lr %.3e | norm %.4f | %.0f tok/s | %.1f ms/step | "
              "%s elapsed, %s left%s", (long long)done, (long long)total, s->loss, vbuf, s->lr, s->norm, tps, ms,
              zinf_fmt_duration(elapsed, el, sizeof el), zinf_fmt_duration(eta, left, sizeof left),
              s->skipped ? " | skipped" : "");
    if (c->wall_clock_breakdown)
        zinf_info("  time (ms): fwd %.2f | bwd %.2f | gather %.2f | reduce %.2f | optimizer %.2f | "
                  "comm wait %.2f", 1e3 * s->t.fwd, 1e3 * s->t.bwd, 1e3 * s->t.z.gather, 1e3 * s->t.z.reduce,
                  1e3 * s->t.z.optimizer, 1e3 * s->t.z.wait);
    const zinf_zero_times *zt = &s->t.z;
    if (c->wall_clock_breakdown && (zt->host_units_early > 0 || zt->host_adam > 0)) {
        /* the host update joined during this step: its own, or (host_into_next) the step before's,
         * which ran on into this step's passes */
        char line[640];
        size_t n = (size_t)snprintf(line, sizeof line, "  host optimizer (ms): AdamW %.2f", 1e3 * zt->host_adam);
#define LINE_ADD(...) n += (size_t)snprintf(line + n, n < sizeof line ? sizeof line - n : 0, __VA_ARGS__)
        if (zt->host_units_early > 0) LINE_ADD(", %.2f of it during the backward pass", 1e3 * zt->host_adam_early);
        LINE_ADD(" | waiting for device copies %.2f", 1e3 * zt->host_copy_wait);
        if (zt->host_units_early > 0)
            LINE_ADD(" | begun during the backward pass: %d of %d units", zt->host_units_early, zt->host_units);
        else
            LINE_ADD(" | waiting for NVMe %.2f", 1e3 * zt->host_io_wait);
        if (zt->host_into_next > 0)
            LINE_ADD(" | the last step's update, run on into this step's passes, which waited %.2f for it",
                     1e3 * zt->update_wait);
        else if (zt->host_units_early > 0)
            LINE_ADD(" | finished %.2f after it", 1e3 * zt->optimizer);
        else
            LINE_ADD(" | the rest %.2f", 1e3 * (zt->optimizer - zt->host_adam - zt->host_copy_wait - zt->host_io_wait));
        LINE_ADD(" | %d thread%s", zt->host_threads, zt->host_threads == 1 ? "" : "s");
#undef LINE_ADD
        zinf_info("%s", line);
    }
    if (c->wall_clock_breakdown && r->tev[0])
        zinf_info("  device time (ms): fwd %.2f | bwd %.2f | reduce and norm %.2f | optimizer %.2f | "
                  "idle before the step %.2f | waiting for gathers %.2f", 1e3 * s->t.gfwd, 1e3 * s->t.gbwd,
                  1e3 * s->t.greduce, 1e3 * s->t.gopt, 1e3 * s->t.gidle, 1e3 * s->t.z.gather_stall_dev);
    if (c->comms_logger_enabled) {
        const zinf_comm *cm = r->comm;
        zinf_info("  comms (rank 0, so far): all-reduce %lld calls %.1f MiB | all-gather %lld calls %.1f MiB | "
                  "reduce-scatter %lld calls %.1f MiB", (long long)cm->n_calls[ZINF_COLL_ALLREDUCE],
                  (double)cm->bytes[ZINF_COLL_ALLREDUCE] / 1048576.0, (long long)cm->n_calls[ZINF_COLL_ALLGATHER],
                  (double)cm->bytes[ZINF_COLL_ALLGATHER] / 1048576.0,
                  (long long)cm->n_calls[ZINF_COLL_REDUCE_SCATTER],
                  (double)cm->bytes[ZINF_COLL_REDUCE_SCATTER] / 1048576.0);
    }
    if (r->metrics) {
        /* JSON has no NaN or Inf: a loss or norm that overflowed is null */
        char norm[32], loss[32], vl[32] = "", what[64];
        json_num(norm, sizeof norm, s->norm);
        json_num(loss, sizeof loss, s->loss);
        if (eval_now) {
            snprintf(vl, sizeof vl, ", \"val_loss\": ");
            json_num(vl + strlen(vl), sizeof vl - strlen(vl), val_loss);
        }
        snprintf(what, sizeof what, "the record of step %lld", (long long)done);
        metrics_put(r, what, "{\"step\": %lld, \"loss\": %s, \"lr\": %.7g, \"grad_norm\": %s, \"tokens_per_s\": %.1f, "
                    "\"ms_per_step\": %.3f, \"loss_scale\": %.17g, \"skipped\": %s%s, \"elapsed_s\": %.3f, "
                    "\"eta_s\": %.3f}\n", (long long)done, loss, s->lr, norm, tps, ms, r->ls.cur_scale,
                    s->skipped ? "true" : "false", vl, elapsed, eta);
    }
}

/* The checkpoint of the state after `done` steps (and, with
 * stage3_gather_16bit_weights_on_model_save, its HF directory); r->saved_step = done */
static int save_checkpoint(run *r, int64_t done)
{
    const zinf_config *c = &r->cfg;
    zinf_ckpt_meta meta = {.step = done, .opt_steps = r->opt_steps, .seed = r->o->seed,
                           .train_batch_size = c->train_batch_size, .max_length = r->T,
                           .consumed_samples = r->data_start + (done - r->start_step) * c->train_batch_size,
                           .run_id = r->run_id, .ls = r->ls};
    double ts = zinf_now();
    int rc = zinf_ckpt_save(r->o->out, r->comm, &r->m, r->z, r->cfg_json, &meta, (int)r->o->save_total_limit);
    if (rc) {
        r->agreed = true; /* every rank has it, printed once */
        return rc;
    }
    r->saved_step = done;
    zinf_progress_add(&r->prog, ZINF_PROG_SAVE, zinf_now() - ts);
    zinf_info("saved %s/checkpoint-%lld.h5 in %.2f s", r->o->out, (long long)done, zinf_now() - ts);
    /* DeepSpeed's stage3_gather_16bit_weights_on_model_save (zinf: at any stage): the weights
     * in the compute dtype as well, as the Hugging Face directory ms-swift users get from
     * DeepSpeed (config.json, safetensors), read from the file just written: no rank holds
     * the whole model */
    if (c->stage3_gather_16bit_weights_on_model_save) {
        char ck[4200], wd[4200];
        snprintf(ck, sizeof ck, "%s/checkpoint-%lld.h5", r->o->out, (long long)done);
        snprintf(wd, sizeof wd, "%s/checkpoint-%lld.weights", r->o->out, (long long)done);
        zinf_export_opts x = {.fmt = ZINF_EXPORT_HF, .dt = r->be.cdt};
        int erc = r->comm->rank == 0 ? zinf_ckpt_export(ck, wd, &x, stdout, r->comm->timeout_s) : 0;
        ZINF_TRY(zinf_comm_agree(r->comm, erc));
    }
    return 0;
}

/* A stop signal agreed on in the middle of step done + 1 (train_step abandoned it after micro-batch
 * `after`): the state is the end of step `done`, saved unless this run did no step (the checkpoint
 * it started from holds it), a save at that step's end holds it already, or --no_signal_save. */
static int stop_mid_step(run *r, int64_t done, const step_result *s)
{
    char what[160];
    snprintf(what, sizeof what, "stopped by signal %d during step %lld, after micro-batch %lld of %lld: the step is "
             "abandoned", s->sig, (long long)done + 1, (long long)s->after,
             (long long)r->cfg.gradient_accumulation_steps);
    if (done == r->start_step)
        zinf_info("%s; no checkpoint written (no step done%s%s); requeue with --resume auto", what,
                  r->resumed[0] ? " since " : "", r->resumed);
    else if (r->saved_step == done)
        zinf_info("%s; checkpoint-%lld.h5, saved at that step's end, holds the state: requeue with --resume auto",
                  what, (long long)done);
    else if (r->o->no_signal_save)
        zinf_info("%s; no checkpoint written (--no_signal_save): a requeue continues from the last one", what);
    else {
        ZINF_TRY(save_checkpoint(r, done));
        zinf_info("%s; with a checkpoint of step %lld: requeue with --resume auto", what, (long long)done);
    }
    return ZINF_TRAIN_STOPPED;
}

static int loop(run *r)
{
    const zinf_config *c = &r->cfg;
    int64_t total = c->max_steps, tokens_per_step = c->train_batch_size * r->T;
    double flops_per_token = zinf_model_flops_per_token(&r->m, r->T);
    double window_t = 0;
    int64_t window_steps = 0;
    /* what the start-up wrote to the logs, then a stop asked for during it */
    ZINF_TRY(logs_agreed(r));
    int rc = stop_before_first_step(r, true);
    if (rc) return rc;
    for (int64_t step = r->start_step; step < total; step++) {
        double t0 = zinf_now();
        ZINF_TRY(fault_at(&r->fault, r->comm->rank, step + 1)); /* ZINF_FAULT (see fault_parse) */
        step_result s;
        /* flops_profiler.detailed: each operation of the profile step timed on the device */
        bool prof = c->flops_profiler_enabled && c->flops_profiler_detailed && step + 1 == c->flops_profiler_profile_step;
        if (prof && zinf_prof_attach(&r->be)) {
            zinf_warn("flops profiler: no per-operation times: %s", zinf_errmsg());
            prof = false;
        }
        rc = train_step(r, step, &s);
        double dt = zinf_now() - t0; /* the step's, not the collection's after it */
        /* the step's operations, taken before the profile goes: nothing after the step is timed */
        zinf_op_total ops[ZINF_PROF_OPS];
        int nops = 0;
        if (!rc && prof) rc = zinf_prof_collect(&r->be);
        if (!rc && prof) nops = zinf_prof_totals(&r->be, ops, ZINF_PROF_OPS);
        zinf_prof_detach(&r->be);
        if (rc) return rc;
        if (s.abandoned) return stop_mid_step(r, step, &s);
        window_t += dt;
        window_steps++;
        zinf_progress_add(&r->prog, ZINF_PROG_STEP, dt);
        int64_t done = step + 1;
        if (r->mon && !r->metrics_rc) {
            /* every step, as DeepSpeed's engine writes them, at the samples read so far */
            int64_t samples = r->data_start + (done - r->start_step) * c->train_batch_size;
            int mrc = zinf_monitor_scalar(r->mon, "Train/Samples/train_loss", s.loss, samples);
            if (!mrc) mrc = zinf_monitor_scalar(r->mon, "Train/Samples/lr", s.lr, samples);
            if (!mrc && c->fp16) mrc = zinf_monitor_scalar(r->mon, "Train/Samples/loss_scale", r->ls.cur_scale, samples);
            if (mrc) r->metrics_rc = mrc;
        }
        /* the end of an epoch: this step's sequences reach past a multiple of the data's */
        int64_t nseq = zinf_data_num_sequences(r->train), pos = r->data_start + (done - r->start_step) * c->train_batch_size;
        bool epoch_end = pos / nseq > (pos - c->train_batch_size) / nseq;
        bool log_now = done == total || (c->logging_strategy == ZINF_IVAL_STEPS && (done == 1 || done % c->logging_steps == 0)) ||
                       (c->logging_strategy == ZINF_IVAL_EPOCH && (done == 1 || epoch_end));
        bool eval_now = r->val && c->eval_strategy != ZINF_IVAL_NO &&
                        (done == total || (c->eval_strategy == ZINF_IVAL_STEPS ? done % c->eval_steps == 0 : epoch_end));
        double val_loss = NAN;
        if (eval_now) {
            double te = zinf_now();
            ZINF_TRY(evaluate(r, &val_loss));
            zinf_progress_add(&r->prog, ZINF_PROG_EVAL, zinf_now() - te);
        }
        if (c->flops_profiler_enabled && done == c->flops_profiler_profile_step)
            log_flops_profile(r, done, dt, flops_per_token * (double)tokens_per_step, tokens_per_step,
                              prof ? ops : NULL, nops);
        if (r->be.mem_info) {
            size_t used = 0, tot = 0;
            if (!r->be.mem_info(&r->be, &used, &tot) && used > r->dev_peak) r->dev_peak = used;
        }
        /* a signal on any rank stops every rank after this step, with a checkpoint */
        int sig;
        ZINF_TRY(stop_agreed(r, &sig));
        bool save_now = (sig > 0 && !r->o->no_signal_save) ||
                        (c->save_strategy == ZINF_IVAL_STEPS && c->save_steps > 0 && (done % c->save_steps == 0 || done == total)) ||
                        (c->save_strategy == ZINF_IVAL_EPOCH && (epoch_end || done == total));
        if (save_now) {
            ZINF_TRY(save_checkpoint(r, done));
            /* a signal that came during the save: the checkpoint just written holds this step's
             * state, so the run stops here rather than after one more step and a second save */
            if (!sig) ZINF_TRY(stop_agreed(r, &sig));
        }
        /* the step a signal stops at is the last of this run: logged like the last step, so that
         * metrics.jsonl of a run and its resumption has every logged step */
        if (sig > 0) log_now = true;
        if (r->hfmon && !r->metrics_rc && (log_now || eval_now)) {
            /* HF's TensorBoardCallback: the logged values at the global step */
            double epoch = (double)(r->data_start + (done - r->start_step) * c->train_batch_size) /
                           (double)zinf_data_num_sequences(r->train);
            int mrc = 0;
            if (log_now) {
                mrc = zinf_monitor_scalar(r->hfmon, "train/loss", s.loss, done);
                if (!mrc) mrc = zinf_monitor_scalar(r->hfmon, "train/grad_norm", s.norm, done);
                if (!mrc) mrc = zinf_monitor_scalar(r->hfmon, "train/learning_rate", s.lr, done);
                if (!mrc) mrc = zinf_monitor_scalar(r->hfmon, "train/epoch", epoch, done);
            }
            if (!mrc && eval_now) mrc = zinf_monitor_scalar(r->hfmon, "eval/loss", val_loss, done);
            if (mrc) r->metrics_rc = mrc;
        }
        if (log_now || eval_now) {
            log_step(r, &s, done, val_loss, eval_now, (double)tokens_per_step * (double)window_steps / window_t,
                     1e3 * window_t / (double)window_steps);
            window_t = 0;
            window_steps = 0;
        }
        /* a write of metrics.jsonl or of a rank's log that failed (a full disk) ends the run now,
         * on every rank, with nothing saved beyond what was due */
        ZINF_TRY(logs_agreed(r));
        if (sig > 0) {
            zinf_info("stopped by signal %d after step %lld, %s", sig, (long long)done,
                      save_now ? "with a checkpoint: requeue with --resume auto"
                               : "without a checkpoint (--no_signal_save): a requeue continues from the last one");
            return ZINF_TRAIN_STOPPED;
        }
    }
    return 0;
}

/* The model states (parameters, gradients, master, Adam) held in one place: the estimate's column. */
static int64_t states_at(const zinf_mem_report *mr, zinf_at at)
{
    int64_t s = 0;
    for (int k = 0; k < ZINF_MEM_NKINDS; k++)
        if (k != ZINF_MEM_COMM && k != ZINF_MEM_STAGING) s += mr->at[at][k];
    return s;
}

/* Every rank's view of the full parameters must be the same bits: hash them and compare. */
static int check_params_agree(run *r)
{
    zinf_model *m = &r->m;
    uint64_t h = 1469598103934665603ULL;
    int64_t maxn = 0;
    for (int u = 0; u < m->nunits; u++) maxn = m->units[u].numel > maxn ? m->units[u].numel : maxn;
    float *buf = malloc((size_t)maxn * 4);
    int rc = buf ? 0 : zinf_errc(ZINF_ENOMEM, "out of host memory");
    /* each unit's bits through the checkpoint's checksum, on every core (a byte at a time on one
     * thread, this check took minutes at the end of a 32B run: each rank reads the whole model,
     * 131 GB in fp32), folded in unit order */
    for (int u = 0; u < m->nunits && !rc; u++) {
        rc = zinf_zero_get_params(r->z, u, buf);
        if (!rc) h = (h ^ zinf_ckpt_checksum(buf, 0, m->units[u].numel)) * 1099511628211ULL;
    }
    free(buf);
    ZINF_TRY(rc);
    double mine[2] = {(double)(h >> 32), (double)(h & 0xffffffffu)}, lo[2], hi[2];
    memcpy(lo, mine, sizeof lo);
    memcpy(hi, mine, sizeof hi);
    for (int i = 0; i < 2; i++) lo[i] = -lo[i];
    ZINF_TRY(zinf_comm_allreduce_max_f64(r->comm, hi, 2));
    ZINF_TRY(zinf_comm_allreduce_max_f64(r->comm, lo, 2));
    bool same = hi[0] == -lo[0] && hi[1] == -lo[1];
    if (!same) return zinf_errc(ZINF_ECOMM, "the ranks' parameters differ after training (ZeRO stage %d)",
                                r->cfg.zero_stage);
    zinf_info("parameters agree bit for bit across %d rank%s (hash %016llx)", r->comm->size,
              r->comm->size > 1 ? "s" : "", (unsigned long long)h);
    zinf_mem_report mr;
    zinf_zero_mem(r->z, &mr);
    zinf_zero_print_mem(r->z);
    if (r->be.mem_info) {
        /* what the peak holds, as far as zinf knows it: the rest is the libraries' own (cuBLAS,
         * cuDNN, NCCL allocate as they go) and the allocator's rounding */
        const double G = 1073741824.0;
        size_t acts = r->m.act_bytes + r->m.grad_bytes, scr = r->be.scratch_bytes ? r->be.scratch_bytes(&r->be) : 0;
        double known = (double)r->dev_base + (double)mr.peak + (double)acts + (double)scr;
        zinf_info("peak GPU memory %.2f GiB in use on rank 0 (cudaMemGetInfo after each step): %.2f in use before "
                  "the run's own (CUDA context, libraries, NCCL), ZeRO's blocks at most %.2f (its cache included), "
                  "activations %.2f, the backend's workspace and scratch %.2f, the rest %.2f",
                  (double)r->dev_peak / G, (double)r->dev_base / G, (double)mr.peak / G, (double)acts / G,
                  (double)scr / G, ((double)r->dev_peak - known) / G);
    }
    {
        metrics_put(r, "the final record", "{\"params_hash\": \"%016llx\", \"mem_param\": %lld, \"mem_param_shard\": %lld, "
                "\"mem_grad\": %lld, \"mem_grad_acc\": %lld, \"mem_master\": %lld, \"mem_adam\": %lld, "
                "\"mem_comm\": %lld, \"mem_peak\": %lld, \"live_max_beyond_current\": %lld, \"mem_reduce_peak\": %lld, "
                "\"mem_act\": %lld, \"mem_act_grad\": %lld, \"mem_states_device\": %lld, \"mem_states_host\": %lld, "
                "\"mem_states_nvme\": %lld, \"mem_staging_host\": %lld}\n",
                (unsigned long long)h, (long long)mr.bytes[ZINF_MEM_PARAM], (long long)mr.bytes[ZINF_MEM_PARAM_SHARD],
                (long long)mr.bytes[ZINF_MEM_GRAD], (long long)mr.bytes[ZINF_MEM_GRAD_ACC],
                (long long)mr.bytes[ZINF_MEM_MASTER], (long long)mr.bytes[ZINF_MEM_ADAM],
                (long long)mr.bytes[ZINF_MEM_COMM], (long long)mr.peak, (long long)mr.live_max_beyond_current,
                (long long)mr.reduce_peak, (long long)r->m.act_bytes, (long long)r->m.grad_bytes, (long long)states_at(&mr, ZINF_AT_DEVICE),
                (long long)states_at(&mr, ZINF_AT_HOST), (long long)states_at(&mr, ZINF_AT_NVME),
                (long long)mr.at[ZINF_AT_HOST][ZINF_MEM_STAGING]);
    }
    return 0;
}

/* OUT/finished (ZINF_FINISHED_FILE) at the end of a run that succeeded: rank 0 writes it as a
 * temporary file and renames it into place, so that a reader sees all of it or none. Collective. */
static int write_finished(run *r)
{
    int rc = 0;
    if (r->comm->rank == 0) {
        char tmp[4200], fin[4200];
        snprintf(tmp, sizeof tmp, "%s/" ZINF_FINISHED_FILE ".tmp", r->o->out);
        snprintf(fin, sizeof fin, "%s/" ZINF_FINISHED_FILE, r->o->out);
        FILE *fp = fopen(tmp, "w");
        if (!fp) rc = zinf_errc(-errno, "%s: %s", tmp, strerror(errno));
        else {
            errno = 0;
            bool ok = fprintf(fp, "{\"status\": \"finished\", \"step\": %lld, \"start_step\": %lld}\n",
                              (long long)r->cfg.max_steps, (long long)r->start_step) > 0;
            ok = !fflush(fp) && ok && !fsync(fileno(fp));
            int e = errno ? errno : EIO;
            if (fclose(fp) || !ok) {
                unlink(tmp);
                rc = zinf_errc(-e, "%s: cannot write: %s", tmp, strerror(e));
            } else if (rename(tmp, fin)) {
                rc = zinf_errc(-errno, "rename %s: %s", tmp, strerror(errno));
                unlink(tmp);
            } else rc = zinf_fsync_path(r->o->out, true);
        }
    }
    rc = zinf_comm_agree(r->comm, rc);
    if (rc) r->agreed = true;
    return rc;
}

int zinf_train_run(zinf_comm *comm, const zinf_train_opts *o)
{
    run r;
    memset(&r, 0, sizeof r);
    r.lock_fd = -1;
    r.saved_step = -1;
    r.comm = comm;
    r.o = o;
    r.t_start = zinf_now();
    zinf_progress_init(&r.prog);
    int rc = setup(&r);
    if (rc) { /* a refused start (--init_from's weights, the data, a stop): an --out it made goes again */
        if (r.out_made && r.lock_fd >= 0) {
            zinf_ckpt_unlock_file(o->out);
            zinf_rmdir_made(o->out, r.out_made);
        }
        teardown(&r);
        return rc;
    }
    rc = loop(&r);
    /* the contexts' activations go back before the end-of-run checks, which gather whole units */
    while (r.nctx > 0) zinf_model_free(&r.ctx[--r.nctx]);
    if (rc == ZINF_TRAIN_STOPPED) {
        int lrc = finish_logs(&r); /* a stopped run's logs are as complete as a finished one's */
        teardown(&r);
        return lrc ? lrc : rc;
    }
    if (!rc) rc = check_params_agree(&r);
    if (!rc && o->prompts) rc = check_prompts(&r, o->prompts);
    if (!rc) rc = finish_logs(&r);
    if (!rc) rc = write_finished(&r);
    if (rc && !r.agreed && comm->size > 1) zinf_comm_abort(comm, zinf_errmsg()); /* one rank failing mid-run */
    if (rc && !r.agreed) fprintf(stderr, "zinf: error: %s\n", zinf_errmsg());
    teardown(&r);
    return rc;
}
