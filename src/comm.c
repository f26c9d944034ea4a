#include "comm.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "err.h"
#include "launch.h" /* CPU lists */
#include "log.h"

#define CHUNK ((int64_t)1 << 28)

static int mpi_fail(int code, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, s, &len);
    return zinf_errc(ZINF_ECOMM, "%s failed: %s", what, s);
}

int zinf_comm_init(zinf_comm *c, int *argc, char ***argv)
{
    memset(c, 0, sizeof *c);
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Init_thread");
    c->world = MPI_COMM_WORLD;
    /* errors come back as codes, so they can be reported with the rank and the collective */
    MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->world, &c->rank);
    MPI_Comm_size(c->world, &c->size);
    MPI_Comm local;
    MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &c->local_rank);
    MPI_Comm_size(local, &c->local_size);
    MPI_Comm_free(&local);
    c->timeout_s = 600; /* a bad ZINF_COMM_TIMEOUT keeps it; zinf_comm_check_env reports the value */
    const char *to = getenv("ZINF_COMM_TIMEOUT");
    if (to && *to) zinf_comm_timeout_parse(to, &c->timeout_s);
    int leader = c->local_rank == 0;
    MPI_Allreduce(&leader, &c->nnodes, 1, MPI_INT, MPI_SUM, c->world);
    return 0;
}

int zinf_comm_timeout_parse(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v >= 0) || isinf(v)) return -1;
    *out = v;
    return 0;
}

int zinf_comm_check_env(void)
{
    const char *s = getenv("ZINF_COMM_TIMEOUT");
    double t;
    if (s && *s && zinf_comm_timeout_parse(s, &t))
        return zinf_err("ZINF_COMM_TIMEOUT=%s: expected a number of seconds >= 0 (0 waits forever)", s);
    return 0;
}

void zinf_comm_finalize(zinf_comm *c)
{
    (void)c;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

_Noreturn void zinf_comm_abort(zinf_comm *c, const char *msg)
{
    char own[32] = "";
    if (c && c->size > 1) snprintf(own, sizeof own, "rank %d: ", c->rank);
    /* some messages already name the rank (those made for the multi-rank case) */
    fprintf(stderr, "zinf: error: %s%s\n", strncmp(msg, own, strlen(own)) ? own : "", msg);
    fflush(stderr);
    MPI_Abort(c ? c->world : MPI_COMM_WORLD, 1);
    exit(1);
}

/* Host wait for one request, aborting past the timeout (t0: when the wait began counting). */
static int wait_host(zinf_comm *c, zinf_req *q, double t0);

/* Both steps have the collective timeout: a rank that hangs or died before it reaches the same
 * agreement (during the setup, say) ends the job instead of holding the others here. */
int zinf_comm_agree(zinf_comm *c, int rc)
{
    int mine = rc < 0 ? c->rank : c->size, first = c->size;
    zinf_req q = {.ev = NULL, .active = true};
    snprintf(q.what, sizeof q.what, "the other ranks to agree on whether one of them failed");
    if (MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, c->world, &q.r) != MPI_SUCCESS)
        zinf_comm_abort(c, "MPI_Iallreduce failed while agreeing on an error");
    wait_host(c, &q, MPI_Wtime());
    if (first == c->size) return 0;
    int code = rc;
    q.active = true;
    if (MPI_Ibcast(&code, 1, MPI_INT, first, c->world, &q.r) != MPI_SUCCESS)
        zinf_comm_abort(c, "MPI_Ibcast failed while agreeing on an error");
    wait_host(c, &q, MPI_Wtime());
    if (c->rank == first) {
        fprintf(stderr, "zinf: error: %s\n", zinf_errmsg());
        fflush(stderr);
    }
    return code;
}

/* Blocking collectives are nonblocking ones plus a wait, so every one of them has the timeout. */
static int allreduce(zinf_comm *c, void *buf, int64_t n, MPI_Datatype t, size_t es, MPI_Op op,
                     const char *what)
{
    for (int64_t off = 0; off < n; off += CHUNK) {
        int cnt = (int)(n - off < CHUNK ? n - off : CHUNK);
        zinf_req q = {.active = true, .ev = NULL};
        snprintf(q.what, sizeof q.what, "%s", what);
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * (int64_t)es, cnt, t, op, c->world, &q.r);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
        c->n_calls[ZINF_COLL_ALLREDUCE]++;
        c->bytes[ZINF_COLL_ALLREDUCE] += (int64_t)cnt * (int64_t)es;
        ZINF_TRY(zinf_comm_wait(c, &q));
    }
    return 0;
}

static int start(zinf_comm *c, zinf_req *q, const char *what, zinf_coll kind, int64_t bytes)
{
    q->active = true;
    q->ev = NULL;
    snprintf(q->what, sizeof q->what, "%s", what);
    c->n_calls[kind]++;
    c->bytes[kind] += bytes;
    return 0;
}

/* ---- watchdog: the timeout of device collectives even while the host is blocked ---------- */
typedef struct watchdog {
    pthread_t th;
    pthread_mutex_t mu;
    volatile int stop;
} watchdog;

static pthread_mutex_t *watch_mu(zinf_comm *c) { return c->watchdog ? &((watchdog *)c->watchdog)->mu : NULL; }
static void lock(zinf_comm *c) { if (c->watchdog) pthread_mutex_lock(watch_mu(c)); }
static void unlock(zinf_comm *c) { if (c->watchdog) pthread_mutex_unlock(watch_mu(c)); }

/* Watch times are monotonic seconds (the watchdog thread may not call MPI_Wtime). */
static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void timed_out(zinf_comm *c, double el, const char *what)
{
    char msg[320];
    snprintf(msg, sizeof msg, "timed out after %.0f s waiting for %s (another rank is stuck or dead; "
             "ZINF_COMM_TIMEOUT sets the limit)", el, what);
    zinf_comm_abort(c, msg);
}

/* The watchdog thread makes no MPI call (MPI runs FUNNELED): on a timeout it prints the line
 * and ends the process, which makes mpirun/srun end the job. */
static void *watchdog_main(void *arg)
{
    zinf_comm *c = arg;
    watchdog *w = c->watchdog;
    while (!w->stop) {
        usleep(200000);
        pthread_mutex_lock(&w->mu);
        double now = mono_now();
        for (int i = 0; i < c->nwatch && c->timeout_s > 0; i++) {
            double el = now - c->watch[i].t0;
            /* only pending ones can be late; the main thread removes the finished ones */
            if (el > c->timeout_s && c->watch[i].ev && c->be->event_query(c->be, c->watch[i].ev) == 0) {
                fprintf(stderr, "zinf: error: rank %d: timed out after %.0f s waiting for %s (another rank "
                        "is stuck or dead; ZINF_COMM_TIMEOUT sets the limit)\n", c->rank, el, c->watch[i].what);
                fflush(stderr);
                _exit(1);
            }
        }
        pthread_mutex_unlock(&w->mu);
    }
    return NULL;
}

int zinf_comm_attach(zinf_comm *c, zinf_backend *be)
{
    c->be = be;
    if (strcmp(be->name, "cpu") == 0) return 0;
    /* rank 0's status and the id in one broadcast, with the collectives' timeout: a rank that
     * died or hangs before the setup ends the job instead of holding the others here */
    unsigned char msg[1 + ZINF_DCOLL_ID_BYTES] = {0}, *id = msg + 1;
    if (c->rank == 0) msg[0] = zinf_dcoll_id_get(be, id) != 0;
    zinf_req q = {.ev = NULL, .active = true};
    snprintf(q.what, sizeof q.what, "the broadcast of the device communicator id (NCCL)");
    int rc = MPI_Ibcast(msg, (int)sizeof msg, MPI_BYTE, 0, c->world, &q.r);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "broadcast");
    ZINF_TRY(wait_host(c, &q, MPI_Wtime()));
    if (msg[0]) return zinf_errc(ZINF_ECOMM, "cannot create the device communicator id (NCCL)");
    /* the join has the collectives' timeout; a rank that fails it ends the job itself, as the
     * others may be waiting in the join (or be gone) and could not agree on the error */
    rc = zinf_dcoll_init(be, id, c->rank, c->size, c->timeout_s, &c->dev);
    if (rc && c->size > 1) zinf_comm_abort(c, zinf_backend_cuda_error());
    if (rc) return zinf_errc(ZINF_ECOMM, "%s", zinf_backend_cuda_error());
    c->has_dev = true;
    watchdog *w = calloc(1, sizeof *w);
    if (!w) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    pthread_mutex_init(&w->mu, NULL);
    c->watchdog = w;
    if (pthread_create(&w->th, NULL, watchdog_main, c)) {
        c->watchdog = NULL;
        free(w);
        return zinf_errc(ZINF_ECOMM, "rank %d: cannot start the collective watchdog thread", c->rank);
    }
    return 0;
}

void zinf_comm_detach(zinf_comm *c)
{
    if (c->be && c->nwatch) zinf_comm_drain(c);
    if (c->watchdog) {
        watchdog *w = c->watchdog;
        w->stop = 1;
        pthread_join(w->th, NULL);
        pthread_mutex_destroy(&w->mu);
        free(w);
        c->watchdog = NULL;
    }
    free(c->watch);
    c->watch = NULL;
    c->nwatch = c->capwatch = 0;
    if (c->has_dev && c->dev.free) c->dev.free(c->dev.ctx);
    c->has_dev = false;
    c->be = NULL;
}

static MPI_Datatype mpi_type(zinf_dtype dt) { return dt == ZINF_F32 ? MPI_FLOAT : MPI_UINT16_T; }

/* After a device collective was queued: its completion event. */
static int dev_started(zinf_comm *c, zinf_req *q, int rc, const char *what)
{
    if (rc)
        return zinf_errc(ZINF_ECOMM, "rank %d: %s failed to start: %s", c->rank, what, zinf_backend_cuda_error());
    q->ev = c->dev.record(c->dev.ctx);
    if (!q->ev) return zinf_errc(ZINF_ECOMM, "rank %d: %s: no completion event", c->rank, what);
    return 0;
}

static int too_big(int64_t count, const char *what)
{
    return count >= INT_MAX ? zinf_errc(ZINF_ECOMM, "%s: %lld elements exceed one call", what, (long long)count) : 0;
}

/* The MPI and device halves of the three buffer collectives; a request is active only once
 * its collective has started. */
static int iallgather(zinf_comm *c, const void *send, void *recv, int64_t count, zinf_dtype dt,
                      zinf_req *q, const char *what)
{
    if (c->has_dev) return dev_started(c, q, c->dev.allgather(c->dev.ctx, send, recv, count, dt), what);
    ZINF_TRY(too_big(count, what));
    /* in place: the send buffer is this rank's slot of the result */
    if (send == (const char *)recv + (size_t)c->rank * (size_t)count * zinf_dtype_size(dt)) send = MPI_IN_PLACE;
    int rc = MPI_Iallgather(send, (int)count, mpi_type(dt), recv, (int)count, mpi_type(dt), c->world, &q->r);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, what);
}

static int ireduce_scatter(zinf_comm *c, const void *send, void *recv, int64_t count, zinf_dtype dt,
                           zinf_req *q, const char *what)
{
    if (c->has_dev) return dev_started(c, q, c->dev.reduce_scatter(c->dev.ctx, send, recv, count, dt), what);
    ZINF_TRY(too_big(count, what));
    if (dt != ZINF_F32) return zinf_errc(ZINF_ENOTSUP, "%s: MPI reduces fp32 only", what);
    int rc = MPI_Ireduce_scatter_block(send, recv, (int)count, MPI_FLOAT, MPI_SUM, c->world, &q->r);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, what);
}

static int iallreduce(zinf_comm *c, void *buf, int64_t count, zinf_dtype dt, zinf_req *q, const char *what)
{
    if (c->has_dev) return dev_started(c, q, c->dev.allreduce(c->dev.ctx, buf, count, dt), what);
    ZINF_TRY(too_big(count, what));
    if (dt != ZINF_F32) return zinf_errc(ZINF_ENOTSUP, "%s: MPI reduces fp32 only", what);
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, c->world, &q->r);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, what);
}

static int started(zinf_req *q, int rc)
{
    q->active = rc == 0;
    return rc;
}

int zinf_comm_iallgather(zinf_comm *c, const void *send, void *recv, int64_t count, zinf_dtype dt,
                         zinf_req *q, const char *what)
{
    start(c, q, what, ZINF_COLL_ALLGATHER, count * (int64_t)zinf_dtype_size(dt) * c->size);
    return started(q, iallgather(c, send, recv, count, dt, q, what));
}

int zinf_comm_ireduce_scatter(zinf_comm *c, const void *send, void *recv, int64_t count,
                              zinf_dtype dt, zinf_req *q, const char *what)
{
    start(c, q, what, ZINF_COLL_REDUCE_SCATTER, count * (int64_t)zinf_dtype_size(dt) * c->size);
    return started(q, ireduce_scatter(c, send, recv, count, dt, q, what));
}

int zinf_comm_iallreduce(zinf_comm *c, void *buf, int64_t count, zinf_dtype dt, zinf_req *q,
                         const char *what)
{
    start(c, q, what, ZINF_COLL_ALLREDUCE, count * (int64_t)zinf_dtype_size(dt));
    return started(q, iallreduce(c, buf, count, dt, q, what));
}

/* A device collective's completion event: 1 (and the event freed) when done, 0 when pending; a
 * failure ends the job naming the collective. */
static int event_done(zinf_comm *c, zinf_event *ev, const char *what)
{
    int d = c->be->event_query(c->be, ev);
    if (d < 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s failed on the device", what);
        zinf_comm_abort(c, msg);
    }
    if (d) c->be->event_free(c->be, ev);
    return d;
}

/* one poll: 1 done, 0 pending; failures end the job naming the collective */
static int poll_req(zinf_comm *c, zinf_req *q)
{
    if (q->ev) {
        int d = event_done(c, q->ev, q->what);
        if (d) q->ev = NULL;
        return d;
    }
    int done = 0;
    if (MPI_Test(&q->r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s failed", q->what);
        zinf_comm_abort(c, msg);
    }
    return done;
}

int zinf_comm_test(zinf_comm *c, zinf_req *q)
{
    if (!q->active) return 1;
    int done = poll_req(c, q);
    if (done) q->active = false;
    return done;
}

/* Forget watched events that completed; abort on one older than the timeout. */
static void poll_watch(zinf_comm *c)
{
    lock(c);
    int k = 0;
    for (int i = 0; i < c->nwatch; i++) {
        struct zinf_watch *w = &c->watch[i];
        if (event_done(c, w->ev, w->what)) continue;
        double el = mono_now() - w->t0;
        if (c->timeout_s > 0 && el > c->timeout_s) timed_out(c, el, w->what);
        c->watch[k++] = *w;
    }
    c->nwatch = k;
    unlock(c);
}

int zinf_comm_drain(zinf_comm *c)
{
    double t0 = MPI_Wtime();
    for (int i = 0; i < c->nwatch; i++) {
        double pause = 1e-6;
        for (;;) {
            /* under the lock: the watchdog may be querying the same event */
            lock(c);
            struct zinf_watch *w = &c->watch[i];
            int d = w->ev ? c->be->event_query(c->be, w->ev) : 1;
            if (d > 0 && w->ev) {
                c->be->event_free(c->be, w->ev);
                w->ev = NULL;
            }
            double el = mono_now() - w->t0;
            char what[160];
            snprintf(what, sizeof what, "%s", w->what);
            unlock(c);
            if (d < 0) {
                char msg[256];
                snprintf(msg, sizeof msg, "%s failed on the device", what);
                zinf_comm_abort(c, msg);
            }
            if (d) break;
            if (c->timeout_s > 0 && el > c->timeout_s) timed_out(c, el, what);
            struct timespec ts = {0, (long)(pause * 1e9)};
            nanosleep(&ts, NULL);
            if (pause < 1e-3) pause *= 2;
        }
    }
    lock(c);
    c->nwatch = 0;
    unlock(c);
    c->wait_s += MPI_Wtime() - t0;
    return 0;
}

int zinf_comm_wait(zinf_comm *c, zinf_req *q)
{
    if (!q->active) return 0;
    if (q->ev && c->be && c->be->stream_wait) {
        if (c->be->stream_wait(c->be, NULL, q->ev))
            return zinf_errc(ZINF_ECOMM, "rank %d: %s: the compute stream cannot wait for it", c->rank, q->what);
        lock(c);
        if (c->nwatch == c->capwatch) {
            int nc = c->capwatch ? 2 * c->capwatch : 64;
            struct zinf_watch *nw = realloc(c->watch, (size_t)nc * sizeof *nw);
            if (!nw) { unlock(c); return zinf_errc(ZINF_ENOMEM, "out of host memory"); }
            c->watch = nw;
            c->capwatch = nc;
        }
        struct zinf_watch *w = &c->watch[c->nwatch];
        w->ev = q->ev;
        w->t0 = mono_now();
        snprintf(w->what, sizeof w->what, "%s", q->what);
        c->nwatch++;
        unlock(c);
        q->ev = NULL;
        q->active = false;
        poll_watch(c);
        return 0;
    }
    double t0 = MPI_Wtime();
    int rc = wait_host(c, q, t0);
    c->wait_s += MPI_Wtime() - t0;
    return rc;
}

static int wait_host(zinf_comm *c, zinf_req *q, double t0)
{
    double pause = 1e-6;
    for (;;) {
        if (poll_req(c, q)) break;
        double el = MPI_Wtime() - t0;
        if (c->timeout_s > 0 && el > c->timeout_s) timed_out(c, el, q->what);
        /* back off to 1 ms so a long wait does not spin a core the other ranks may need */
        struct timespec ts = {0, (long)(pause * 1e9)};
        nanosleep(&ts, NULL);
        if (pause < 1e-3) pause *= 2;
    }
    q->active = false;
    return 0;
}

int zinf_comm_allreduce_sum_f32(zinf_comm *c, float *buf, int64_t n)
{
    return allreduce(c, buf, n, MPI_FLOAT, 4, MPI_SUM, "all-reduce (sum, fp32)");
}

int zinf_comm_allreduce_sum_f64(zinf_comm *c, double *buf, int64_t n)
{
    return allreduce(c, buf, n, MPI_DOUBLE, 8, MPI_SUM, "all-reduce (sum, fp64)");
}

int zinf_comm_allreduce_max_f64(zinf_comm *c, double *buf, int64_t n)
{
    return allreduce(c, buf, n, MPI_DOUBLE, 8, MPI_MAX, "all-reduce (max, fp64)");
}

int zinf_comm_allreduce_sum_u64(zinf_comm *c, uint64_t *buf, int64_t n)
{
    return allreduce(c, buf, n, MPI_UINT64_T, 8, MPI_SUM, "all-reduce (sum, the checkpoint's checksums)");
}

/* Nonblocking plus a wait, as allreduce: the config's bytes go out during the setup, where a rank
 * that died or hangs must end the job within the time limit, not hold the others forever. */
int zinf_comm_bcast(zinf_comm *c, void *buf, size_t bytes, int root)
{
    char what[64];
    snprintf(what, sizeof what, "a broadcast from rank %d", root);
    for (size_t off = 0; off < bytes; off += (size_t)CHUNK) {
        int cnt = (int)(bytes - off < (size_t)CHUNK ? bytes - off : (size_t)CHUNK);
        zinf_req q;
        start(c, &q, what, ZINF_COLL_BCAST, cnt);
        int rc = MPI_Ibcast((char *)buf + off, cnt, MPI_BYTE, root, c->world, &q.r);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "broadcast");
        ZINF_TRY(zinf_comm_wait(c, &q));
    }
    return 0;
}

/* ---------------------------------------------------------------- placement ---------------- */
typedef struct {
    char host[64];
    char cpus[184]; /* condensed; ends in "..." when longer */
    int ncpu, threads;
    int online;     /* the node's CPUs online */
    int given;      /* OMP_NUM_THREADS is set */
    int lowered;    /* the thread count was lowered here (OMP_NUM_THREADS unset, CPUs shared) */
} placement;

/* the CPUs of a node's ranks together, where their lists are whole; -1 when one is cut short */
static int union_cpus(const placement *p, int n)
{
    unsigned char *seen = calloc(65536 / 8, 1);
    int count = seen ? 0 : -1;
    for (int i = 0; i < n && count >= 0; i++) {
        int *v, nv;
        if (zinf_launch_parse_cpulist(p[i].cpus, "affinity", &v, &nv)) { count = -1; break; }
        for (int k = 0; k < nv; k++)
            if (v[k] < 65536 && !(seen[v[k] / 8] & (1u << (v[k] % 8)))) seen[v[k] / 8] |= (unsigned char)(1u << (v[k] % 8)), count++;
        free(v);
    }
    free(seen);
    return count;
}

/* a nonblocking collective, waited for with the timeout as every other; not one the comms logger
 * counts (it is not the model's) */
static int wait_setup(zinf_comm *c, MPI_Request r, int mrc, const char *what)
{
    if (mrc != MPI_SUCCESS) return mpi_fail(mrc, what);
    zinf_req q = {.r = r, .active = true};
    snprintf(q.what, sizeof q.what, "%s", what);
    return zinf_comm_wait(c, &q);
}

int zinf_comm_log_placement(zinf_comm *c)
{
    placement me = {{0}, {0}, 0, 1, (int)sysconf(_SC_NPROCESSORS_ONLN), 0, 0};
    if (gethostname(me.host, sizeof me.host - 1)) snprintf(me.host, sizeof me.host, "?");
    if (zinf_launch_affinity(me.cpus, sizeof me.cpus, &me.ncpu)) snprintf(me.cpus, sizeof me.cpus, "?");
#ifdef _OPENMP
    me.threads = omp_get_max_threads();
#endif
    const char *given = getenv("OMP_NUM_THREADS");
    me.given = given && *given;
    /* the node's ranks: where their threads outnumber the CPUs they share and no OMP_NUM_THREADS
     * says how many, each takes its part of them (unbound ranks of plain mpirun, a team over every
     * core in each, ran the host AdamW at down to half its rate and CPU steps 6-30 times slower) */
    MPI_Comm local;
    if (MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local) != MPI_SUCCESS)
        return zinf_errc(ZINF_ECOMM, "MPI_Comm_split_type failed");
    int nl = 0;
    MPI_Comm_size(local, &nl);
    placement *node = calloc((size_t)nl, sizeof *node);
    int rc = node ? 0 : zinf_errc(ZINF_ENOMEM, "out of host memory");
    MPI_Request r = MPI_REQUEST_NULL;
    if (!rc)
        rc = wait_setup(c, r, MPI_Iallgather(&me, (int)sizeof me, MPI_BYTE, node, (int)sizeof me, MPI_BYTE, local, &r),
                        "the all-gather of a node's ranks' CPUs and threads");
    MPI_Comm_free(&local);
    if (!rc) {
        int threads = 0, ncpu = union_cpus(node, nl);
        for (int k = 0; k < nl; k++) threads += node[k].threads;
        int share = ncpu > 0 ? ncpu / nl : 0;
        if (!me.given && ncpu > 0 && threads > ncpu && me.threads > (share > 1 ? share : 1)) {
            me.threads = share > 1 ? share : 1;
            me.lowered = 1;
#ifdef _OPENMP
            omp_set_num_threads(me.threads);
#endif
        }
    }
    free(node);
    ZINF_TRY(zinf_comm_agree(c, rc));

    placement *all = c->rank == 0 ? calloc((size_t)c->size, sizeof *all) : NULL;
    ZINF_TRY(zinf_comm_agree(c, c->rank == 0 && !all ? zinf_errc(ZINF_ENOMEM, "out of host memory") : 0));
    rc = wait_setup(c, r, MPI_Igather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0, c->world, &r),
                    "the gather of the ranks' CPUs and threads");
    if (rc || c->rank != 0) {
        free(all);
        return rc;
    }
    /* one line per node, ranks in order; nodes past the eighth are counted */
    bool *done = calloc((size_t)c->size, sizeof *done);
    int *on = malloc((size_t)c->size * sizeof *on);
    placement *nd = malloc((size_t)c->size * sizeof *nd);
    int lines = 0, more = 0;
    for (int r0 = 0; r0 < c->size && done && on && nd; r0++) {
        if (done[r0]) continue;
        int n = 0, lowered = 0;
        bool same = true;
        for (int k = r0; k < c->size; k++)
            if (!done[k] && !strcmp(all[k].host, all[r0].host)) {
                done[k] = true;
                nd[n] = all[k];
                on[n++] = k;
                same &= all[k].threads == all[r0].threads;
                lowered |= all[k].lowered;
            }
        int threads = 0;
        for (int k = 0; k < n; k++) threads += nd[k].threads;
        int ncpu = union_cpus(nd, n);
        if (ncpu > 0 && threads > ncpu)
            zinf_warn("%s: %d rank%s run %d OpenMP threads on %d CPU%s (OMP_NUM_THREADS=%s): the threads wait for each "
                      "other's cores (zinf-launch binds each rank to its share of the cores; under plain mpirun: "
                      "--map-by slot:PE=N --bind-to core -x OMP_NUM_THREADS=N)", all[r0].host, n, n == 1 ? "" : "s",
                      threads, ncpu, ncpu == 1 ? "" : "s", given ? given : "unset");
        /* ranks bound to one CPU each that chose no thread count: mpirun's default binding of one
         * or two ranks (a core each), which leaves zinf's host work one thread a rank (the random
         * init of a 1.5B model took 75 s so on a 16-core GPU node) */
        int widest = 0, chose = 0;
        for (int k = 0; k < n; k++) {
            widest = nd[k].ncpu > widest ? nd[k].ncpu : widest;
            chose |= nd[k].given;
        }
        if (!chose && widest == 1 && nd[0].online >= 2 * n)
            zinf_warn("%s: %s bound to one CPU of the node's %d and OMP_NUM_THREADS is unset: zinf's host work (the "
                      "random init, a host optimizer, the data) runs on one thread a rank (mpirun binds one or two "
                      "ranks to a core each unless told otherwise: --bind-to none, --map-by slot:PE=N --bind-to core "
                      "-x OMP_NUM_THREADS=N, or zinf-launch)", all[r0].host, n == 1 ? "its rank is" : "each of its ranks is",
                      nd[0].online);
        if (lines++ >= 8) { more++; continue; }
        char text[2048];
        size_t o = 0;
        if (same) o += (size_t)snprintf(text, sizeof text, "%d OpenMP thread%s each%s; CPUs of", nd[0].threads,
                                        nd[0].threads == 1 ? "" : "s",
                                        lowered ? " (OMP_NUM_THREADS unset: the CPUs the ranks share, split among them)"
                                                : "");
        for (int k = 0; k < n && o + 200 < sizeof text; k++) {
            if (k == 16) { o += (size_t)snprintf(text + o, sizeof text - o, " ..."); break; }
            if (same) o += (size_t)snprintf(text + o, sizeof text - o, "%s rank %d: %s", k ? "," : "", on[k], nd[k].cpus);
            else o += (size_t)snprintf(text + o, sizeof text - o, "%s rank %d: %s (%d OpenMP thread%s)", k ? "," : "",
                                       on[k], nd[k].cpus, nd[k].threads, nd[k].threads == 1 ? "" : "s");
        }
        zinf_info("zinf: %s: %d rank%s%s %s", all[r0].host, n, n == 1 ? "" : "s", same ? "," : ";", text);
    }
    if (more) zinf_info("zinf: ... and %d more node%s", more, more == 1 ? "" : "s");
    /* the OpenMP runtime binds the first thread to one place at the start, and every thread
     * started later inherits it */
    const char *pb = getenv("OMP_PROC_BIND");
    if (pb && *pb && strcasecmp(pb, "false"))
        zinf_warn("OMP_PROC_BIND=%s: the OpenMP runtime binds each rank's first thread to one place, and zinf's "
                  "other threads (NVMe I/O, the overlapped host step, CUDA's and NCCL's) start there and stay on "
                  "that core; leave it unset (zinf-launch binds each rank to its share of the cores)", pb);
    free(done);
    free(on);
    free(nd);
    free(all);
    return 0;
}
