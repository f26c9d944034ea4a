/* ZeRO stages 0-3 on the collectives API (see zero.h for what each stage does). */
#include "zero.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "cpu/adamw.h"
#include "err.h"
#include "log.h"
#include "swap.h"

/* A shard state and its place: device memory (p), host memory (p; pinned when the block's
 * pin_memory says so), or a region of an NVMe swap file (r; p NULL). */
typedef struct zstate {
    void *p;
    zinf_at at;
    int64_t bytes;
    zinf_swap_region r;
    zinf_swap *sw;          /* NVMe: the swapper that holds r */
    bool pinned;            /* host: page-locked */
} zstate;

/* A stage-3 unit's gather: released; its NVMe shard being read (the all-gather starts when the
 * read is done); all-gather in flight; gathered. */
enum { G_RELEASED = 0, G_INFLIGHT = 1, G_GATHERED = 2, G_READING = 3 };

typedef struct zunit {
    int64_t n, pn, p, off;  /* numel, padded numel, shard size, this rank's shard start */
    void *full;             /* full parameters (pn); stage 3: only while gathered */
    zstate pshard;          /* stage 3: this rank's parameter shard (p), compute dtype */
    void *gfull;            /* full compute-dtype gradient (pn); transient unless it is the
                               fp32 accumulator itself (stages 0-1 with fp32 compute) or the
                               16-bit gradient the step reads (g16) */
    float *gacc;            /* fp32 gradient accumulator: the shard (p) at stages 2-3, the whole
                               unit (pn) at stages 0-1 with 16-bit compute */
    bool gacc_stale;        /* stages 0-1: gacc holds the last step's sum; the step's first
                               micro-step overwrites it instead of zeroing and adding */
    zstate master, m, v;    /* fp32 optimizer states of the shard (p) */
    bool master_alias;      /* master is the fp32 parameter store itself (fp32 compute, one place) */
    zinf_at opt_at;         /* where master, m and v live (offload_optimizer; ratio per unit) */
    int state;              /* stage 3: G_RELEASED, G_READING, G_INFLIGHT, G_GATHERED */
    zinf_swap_req *rreq;    /* G_READING: the NVMe read of the shard */
    int rbuf;               /* G_READING on a device backend: the host buffer read into, or -1 */
    bool persistent;        /* stage 3: at or below the persistence threshold: kept gathered */
    zinf_req greq;
    int rs_left;            /* stages 2-3: reduce-scatter pieces of the pass not yet finished */
    bool upd_wait;          /* stage 3: the host update that runs on into the next passes has not
                               released this unit yet (update_gate) */
    bool gacc_zero;         /* its gradient accumulator is zeroed at update_gate, not begin_step */
} zunit;

typedef struct pending {
    zinf_req q;
    int u;
    void *stage, *recv;     /* reduce-scatter staging (W x len) and result (len), compute dtype */
    int64_t dst, len;       /* into gacc[dst .. dst+len) */
    int64_t stage_bytes;
} pending;

/* one tile of the host optimizer step: [k0, k0+len) of unit u's shard */
typedef struct htile { int u; int64_t k0, len; } htile;

struct zinf_zero {
    zinf_model *m;
    const zinf_config *cfg;
    zinf_comm *comm;
    zinf_backend *be;
    int stage, W, rank, nunits;
    size_t es;              /* bytes per element of the compute dtype */
    bool f32;               /* compute dtype is fp32: masters alias parameters, gradients
                               accumulate in place */
    bool g16;               /* zinf_zero_grads16: the step reads the 16-bit gradients themselves */
    zunit *u;
    zinf_unit_hooks hooks;
    /* reductions in flight */
    pending *pend;
    int npend, cappend;
    int64_t rs_held;        /* reduce-scatter staging and results of the pending pieces, elements */
    int64_t rs_cap;         /* what they may hold beside a new piece: zinf_zero_reduce_elems */
    int64_t rs_peak;        /* the most rs_held ever */
    bool last_micro;        /* the pass in progress is the last micro-step of the step */
    /* stage-3 plan */
    const zinf_use *seq;    /* the model's use order (zinf_model's uses) */
    int *nextuse;
    int64_t *reuse_dist;
    int nseq_full, nseq_fwd, nseq, cursor;
    /* wall_clock_breakdown (timed events): event pairs around the compute stream's wait for a
     * gather, one pair per use in the plan (NULL otherwise); stall_used[k] once recorded */
    zinf_event **stall;
    bool *stall_used;
    int current;            /* unit in use, -1 none */
    int64_t live;           /* gathered or in-flight elements of non-persistent units */
    int64_t live_max_beyond;
    /* memory: device bytes by kind (mem), host and NVMe bytes by kind (mem_at) */
    int64_t mem[ZINF_MEM_NKINDS], mem_total, mem_peak;
    int64_t mem_at[ZINF_AT_N][ZINF_MEM_NKINDS];
    /* offload: the swappers of NVMe states, and the host step's pipeline (see host_step) */
    zinf_swap *swap_opt, *swap_par;
    int64_t tile;           /* elements per tile of the host optimizer step */
    int depth;              /* NVMe tile buffer sets: 1 + pipeline_read + pipeline_write */
    float *gbuf[2];         /* device backends: gradient tiles copied down (pinned) */
    void *pbuf[2];          /* device backends: updated 16-bit tiles on their way up (pinned) */
    zinf_stream *s_down, *s_up;
    zinf_event *ev_down[2], *ev_up[2];
    bool up_pending[2];
    /* the host step's tiles, in the order they are updated (room for every offloaded unit's),
     * and per unit whether its tiles are in the list, and (device backends) an event after the
     * last write of its gradient on the compute stream */
    htile *tl;
    int nt, captl;
    bool *tl_unit;
    zinf_event **gev;
    /* the host step overlapped with the backward pass (zinf_zero_overlap_step): a thread runs
     * host_step while the main thread appends each unit's tiles once its gradient is final */
    struct {
        bool able;          /* the placement allows it (init): host states, no NVMe, stage 2-3 */
        bool armed;         /* this step's update is under way on the thread */
        bool th_on, run, closed, done, quit;
        pthread_t th;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        zinf_adamw_args a;
        double wd;
        int rc;
        int nth;            /* the main thread's team size: a new thread starts from OMP_NUM_THREADS's */
        char msg[1024];
        /* stage 3: the update runs on into the next step's passes, which wait for each unit's
         * (update_gate) instead of for the whole update */
        bool into_next;     /* the placement allows it (init) */
        bool async;         /* the update under way is one zinf_zero_step returned from */
        bool *unit_done;    /* per unit: its tiles updated and (device backends) uev recorded */
        zinf_event **uev;   /* device backends: per unit, on s_up after its last tile's copy up */
        bool *uev_rec;
        zinf_zero_times t;  /* the thread's host_* times, added to z->t when the update is joined */
    } ov;
    void *parbuf;           /* NVMe parameter shards: the host buffer a shard is read into */
    /* device backends: host buffers the NVMe shards of prefetched units are read into
     * (offload_param.buffer_count of them, one largest shard each), each free once its copy up
     * (event) has completed */
    void **rbufs;
    zinf_event **rbuf_ev;
    bool *rbuf_busy, *rbuf_up;
    int nrbuf;
    int64_t rbuf_bytes;
    /* device backends: freed transient blocks kept for reuse by size (cudaMalloc/cudaFree in the
     * step would synchronise the device every time) */
    bool caching;
    bool poison;            /* ZINF_POISON_FRESH_GRADS: see grad_fresh */
    struct { void *p; int64_t bytes; } *cache;
    int ncache, capcache;
    int64_t cached;
    zinf_zero_times t;
    double wait0;
    float pre, post;        /* stages 0-1: gradient averaging factors around the fp32 all-reduce */
    float rs_pre, rs_post;  /* stages 2-3: around the compute-dtype reduce-scatter */
    const void **norm_x;    /* zinf_zero_reduce: each unit's gradient (or shard) for sumsq */
    int64_t *norm_n;
};

static int update_gate(zinf_zero *z, int u, bool wait);
static int update_settle(zinf_zero *z);

/* ---------------------------------------------------------------- memory ------------------- */
/* Zeroed when freshly allocated; a block reused from the cache is zeroed for gradients only
 * (parameters and staging are overwritten whole), unless `dirty`: a gradient the model's first
 * write fills (grad_fresh). */
static void *zalloc_k(zinf_zero *z, zinf_mem_kind k, int64_t bytes, bool dirty)
{
    void *p = NULL;
    for (int i = 0; z->caching && i < z->ncache; i++) {
        if (z->cache[i].bytes != bytes) continue;
        p = z->cache[i].p;
        z->cache[i] = z->cache[--z->ncache];
        z->cached -= bytes;
        if (k == ZINF_MEM_GRAD && !dirty && z->be->memset0(z->be, p, (size_t)bytes, NULL)) {
            z->be->free(z->be, ZINF_PLACE_DEVICE, p);
            return NULL;
        }
        break;
    }
    if (!p) p = z->be->alloc(z->be, ZINF_PLACE_DEVICE, (size_t)(bytes > 0 ? bytes : 1));
    if (!p && z->ncache) {
        /* blocks of other sizes may be what is missing: give the cache back and try again */
        z->be->sync(z->be);
        for (int i = 0; i < z->ncache; i++) z->be->free(z->be, ZINF_PLACE_DEVICE, z->cache[i].p);
        z->ncache = 0;
        z->cached = 0;
        p = z->be->alloc(z->be, ZINF_PLACE_DEVICE, (size_t)(bytes > 0 ? bytes : 1));
    }
    if (!p) return NULL;
    z->mem[k] += bytes;
    z->mem_total += bytes;
    if (z->mem_total + z->cached > z->mem_peak) z->mem_peak = z->mem_total + z->cached;
    return p;
}

static void *zalloc(zinf_zero *z, zinf_mem_kind k, int64_t bytes) { return zalloc_k(z, k, bytes, false); }

/* Unit u's full gradient holds nothing of this step and is not zeroed: the model's first write of
 * it overwrites or zeroes the unit's elements (model.h's grad_fresh), so that the products neither
 * read zeros nor wait for a memset; the padding past them, which no one writes, is zeroed here. */
static int grad_fresh(zinf_zero *z, int u)
{
    zunit *x = &z->u[u];
    const int64_t n = z->m->units[u].numel;
    z->m->grad_fresh[u] = true;
    if (z->poison) memset(x->gfull, 0xff, (size_t)n * z->es); /* all-ones bits: NaN in every dtype */
    return x->pn > n ? z->be->memset0(z->be, (char *)x->gfull + (size_t)n * z->es, (size_t)(x->pn - n) * z->es, NULL)
                     : 0;
}

/* A gradient still fresh when it is read (a unit whose backward wrote nothing) is zero. */
static int grad_settle(zinf_zero *z, int u)
{
    if (!z->m->grad_fresh[u]) return 0;
    z->m->grad_fresh[u] = false;
    return z->be->memset0(z->be, z->u[u].gfull, (size_t)z->u[u].pn * z->es, NULL);
}

static void zfree(zinf_zero *z, zinf_mem_kind k, void *p, int64_t bytes)
{
    if (!p) return;
    z->mem[k] -= bytes;
    z->mem_total -= bytes;
    if (z->caching && (k == ZINF_MEM_PARAM || k == ZINF_MEM_GRAD || k == ZINF_MEM_COMM)) {
        if (z->ncache == z->capcache) {
            int nc = z->capcache ? 2 * z->capcache : 32;
            void *np = realloc(z->cache, (size_t)nc * sizeof *z->cache);
            if (np) { z->cache = np; z->capcache = nc; }
        }
        if (z->ncache < z->capcache) {
            z->cache[z->ncache].p = p;
            z->cache[z->ncache++].bytes = bytes;
            z->cached += bytes;
            return;
        }
    }
    z->be->free(z->be, ZINF_PLACE_DEVICE, p);
}

/* Host memory for states and staging, pinned (page-locked) or pageable. */
static void *halloc(zinf_zero *z, zinf_mem_kind k, int64_t bytes, bool pin)
{
    void *p = z->be->alloc(z->be, pin ? ZINF_PLACE_PINNED : ZINF_PLACE_HOST, (size_t)(bytes > 0 ? bytes : 1));
    if (p) z->mem_at[ZINF_AT_HOST][k] += bytes;
    return p;
}

static void hfree(zinf_zero *z, zinf_mem_kind k, void *p, int64_t bytes, bool pin)
{
    if (!p) return;
    z->mem_at[ZINF_AT_HOST][k] -= bytes;
    z->be->free(z->be, pin ? ZINF_PLACE_PINNED : ZINF_PLACE_HOST, p);
}

#define NOMEM(z, what, u)                                                                         \
    zinf_errc(ZINF_ENOMEM, "rank %d: cannot allocate %s of unit %s", (z)->rank, (what),          \
              (z)->m->units[(u)].name)

/* The one place a shard state is allocated: device memory, host memory, or an NVMe region
 * (zeros: the swap files are fresh and preallocated, so unwritten bytes read as zero). `what`
 * of unit u names it in the error: out of memory, or the swapper's own reason. */
static int state_alloc(zinf_zero *z, zstate *s, zinf_mem_kind k, zinf_at at, int64_t bytes, bool pin,
                       zinf_swap *sw, const char *what, int u)
{
    memset(s, 0, sizeof *s);
    s->at = at;
    s->bytes = bytes;
    if (at == ZINF_AT_NVME) {
        s->sw = sw;
        ZINF_TRY(zinf_swap_reserve(sw, bytes, &s->r));
        z->mem_at[ZINF_AT_NVME][k] += bytes;
        return 0;
    }
    s->pinned = pin;
    s->p = at == ZINF_AT_DEVICE ? zalloc(z, k, bytes) : halloc(z, k, bytes, pin);
    return s->p ? 0 : NOMEM(z, what, u);
}

static void state_free(zinf_zero *z, zstate *s, zinf_mem_kind k)
{
    if (s->at == ZINF_AT_NVME) {
        if (s->sw && s->r.size) {
            zinf_swap_release(s->sw, &s->r);
            z->mem_at[ZINF_AT_NVME][k] -= s->bytes;
        }
    } else if (s->at == ZINF_AT_HOST) {
        hfree(z, k, s->p, s->bytes, s->pinned);
    } else {
        zfree(z, k, s->p, s->bytes);
    }
    memset(s, 0, sizeof *s);
}

/* ---------------------------------------------------------------- reductions --------------- */
static pending *push_pending(zinf_zero *z)
{
    if (z->npend == z->cappend) {
        int nc = z->cappend ? 2 * z->cappend : 16;
        pending *np = realloc(z->pend, (size_t)nc * sizeof *np);
        if (!np) return NULL;
        z->pend = np;
        z->cappend = nc;
    }
    pending *p = &z->pend[z->npend++];
    memset(p, 0, sizeof *p);
    return p;
}

static int tiles_add(zinf_zero *z, int u);

/* What a reduce-scatter piece of len elements a rank holds: its staging (W x len) and result */
static int64_t rs_elems(const zinf_zero *z, int64_t len) { return len * (z->W + 1); }

static int finish_pending(zinf_zero *z, pending *p)
{
    if (p->recv) {
        zunit *x = &z->u[p->u];
        z->be->acc_f32(z->be, x->gacc + p->dst, p->recv, p->len, z->rs_post);
        zfree(z, ZINF_MEM_COMM, p->stage, p->stage_bytes);
        zfree(z, ZINF_MEM_COMM, p->recv, p->len * (int64_t)z->es);
        z->rs_held -= rs_elems(z, p->len);
        /* the unit's gradient is final: with the step under way, its update may start */
        if (--x->rs_left == 0 && z->ov.armed && z->last_micro && x->opt_at != ZINF_AT_DEVICE)
            return tiles_add(z, p->u);
    }
    return 0;
}

/* Complete the first `wait_n` reductions (on a device the compute stream waits for them, the host
 * does not), then those of the rest that have finished, in issue order. */
static int progress_n(zinf_zero *z, int wait_n)
{
    int done = 0, rc = 0;
    for (int i = 0; i < z->npend; i++) {
        pending *p = &z->pend[i];
        if (i < wait_n && (rc = zinf_comm_wait(z->comm, &p->q))) break;
        if (i >= wait_n && !zinf_comm_test(z->comm, &p->q)) break; /* keep the order: stop at the first running */
        done++;
        if ((rc = finish_pending(z, p))) break;
    }
    if (done) {
        memmove(z->pend, z->pend + done, (size_t)(z->npend - done) * sizeof *z->pend);
        z->npend -= done;
    }
    return rc;
}

/* Complete finished reductions (all of them when wait_all), in issue order. */
static int progress(zinf_zero *z, bool wait_all) { return progress_n(z, wait_all ? z->npend : 0); }

/* Elements per rank in one collective over unit u's shard for a bucket of `bucket` elements
 * (reduce_bucket_size, allgather_bucket_size). DeepSpeed never moves less than one parameter (a
 * tensor) at a time, whatever the bucket size, down to 0; zinf's pieces cut the unit's flat shard,
 * so a piece is never smaller than the unit's largest tensor's share, bucket / W otherwise, and
 * at most the shard. */
static int64_t piece_len(const zinf_zero *z, int u, int64_t bucket)
{
    const zinf_unit *un = &z->m->units[u];
    int64_t big = 0;
    for (int t = 0; t < un->ntensors; t++) big = un->t[t].numel > big ? un->t[t].numel : big;
    int64_t q = bucket / z->W, floor = (big + z->W - 1) / z->W;
    if (q < floor) q = floor;
    if (q < 1) q = 1;
    return q < z->u[u].p ? q : z->u[u].p;
}

/* Stages 2-3: reduce-scatter unit u's full gradient into the owners' accumulators in pieces of
 * reduce_bucket_size elements (piece_len per rank), then drop the full gradient. The pieces in
 * flight hold at most zinf_zero_reduce_elems (the estimator's figure) beside the new one: older
 * reductions complete first (on a device the compute stream waits for them, the host does not),
 * so that a host running ahead of the device does not stack up one unit's staging per layer. */
static int reduce_scatter_unit(zinf_zero *z, int u)
{
    zunit *x = &z->u[u];
    char *g = x->gfull;
    size_t es = z->es;
    int64_t q = piece_len(z, u, z->cfg->reduce_bucket_size);
    if (z->W == 1) {
        /* one rank: the sum over one rank is the gradient itself (rs_pre and rs_post are 1), so it
         * goes straight into the accumulator, the same bits without the staging, the collective's
         * copy and its event */
        z->be->acc_f32(z->be, x->gacc, g, x->p, z->rs_post);
        zfree(z, ZINF_MEM_GRAD, x->gfull, x->pn * (int64_t)es);
        x->gfull = NULL;
        z->m->grads[u] = NULL;
        /* the unit's gradient is final: with the step under way, its update may start */
        if (z->ov.armed && z->last_micro && x->opt_at != ZINF_AT_DEVICE) return tiles_add(z, u);
        return 0;
    }
    for (int64_t lo = 0; lo < x->p; lo += q) {
        int64_t len = x->p - lo < q ? x->p - lo : q, need = rs_elems(z, len), held = z->rs_held;
        int n = 0;
        while (n < z->npend && held + need > z->rs_cap) held -= rs_elems(z, z->pend[n++].len);
        if (n) ZINF_TRY(progress_n(z, n));
        pending *p = push_pending(z);
        if (!p) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        p->u = u;
        p->dst = lo;
        p->len = len;
        p->stage_bytes = len * z->W * (int64_t)es;
        p->stage = zalloc(z, ZINF_MEM_COMM, p->stage_bytes);
        p->recv = zalloc(z, ZINF_MEM_COMM, len * (int64_t)es);
        if (!p->stage || !p->recv) {
            zfree(z, ZINF_MEM_COMM, p->stage, p->stage_bytes);
            zfree(z, ZINF_MEM_COMM, p->recv, len * (int64_t)es);
            z->npend--;
            return NOMEM(z, "a reduce-scatter bucket", u);
        }
        z->rs_held += need;
        if (z->rs_held > z->rs_peak) z->rs_peak = z->rs_held;
        x->rs_left++;
        /* each rank's piece into the staging buffer, divided on the way (rs_pre) */
        for (int r = 0; r < z->W; r++) {
            char *dst = (char *)p->stage + (size_t)r * len * es;
            const char *src = g + ((size_t)r * x->p + lo) * es;
            if (z->rs_pre != 1.0f) z->be->scale_to(z->be, dst, src, len, z->rs_pre);
            else z->be->copy(z->be, dst, src, (size_t)len * es, NULL);
        }
        char what[160];
        snprintf(what, sizeof what, "reduce-scatter of %s gradients [%lld, +%lld)", z->m->units[u].name,
                 (long long)lo, (long long)len);
        ZINF_TRY(zinf_comm_ireduce_scatter(z->comm, p->stage, p->recv, len, z->be->cdt, &p->q, what));
        if (!z->cfg->overlap_comm) ZINF_TRY(progress(z, true));
    }
    zfree(z, ZINF_MEM_GRAD, x->gfull, x->pn * (int64_t)es);
    x->gfull = NULL;
    z->m->grads[u] = NULL;
    return 0;
}

/* Stages 0-1: the fp32 accumulator of unit u's whole gradient. */
static float *acc01(zinf_zero *z, zunit *x)
{
    if (!x->gacc) return (float *)x->gfull;
    if (x->gacc_stale) { /* no gradient reached it this step (not expected): it sums nothing */
        z->be->memset0(z->be, x->gacc, (size_t)x->pn * 4, NULL);
        x->gacc_stale = false;
    }
    return x->gacc;
}

/* Stages 0-1 with 16-bit compute: add the micro-step's gradient into the fp32 accumulator and
 * drop it. */
static void accumulate_unit(zinf_zero *z, int u)
{
    zunit *x = &z->u[u];
    if (x->gacc_stale) z->be->to_f32(z->be, x->gacc, x->gfull, x->pn);
    else z->be->acc_f32(z->be, x->gacc, x->gfull, x->pn, 1.0f);
    x->gacc_stale = false;
    zfree(z, ZINF_MEM_GRAD, x->gfull, x->pn * (int64_t)z->es);
    x->gfull = NULL;
    z->m->grads[u] = NULL;
}

/* Stages 0-1: all-reduce unit u's full gradient in place. */
static int allreduce_unit(zinf_zero *z, int u)
{
    zunit *x = &z->u[u];
    if (z->W == 1) return 0;
    float *acc = acc01(z, x);
    if (z->pre != 1.0f) z->be->scale(z->be, acc, x->pn, z->pre);
    pending *p = push_pending(z);
    if (!p) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    p->u = u;
    char what[160];
    snprintf(what, sizeof what, "all-reduce of %s gradients", z->m->units[u].name);
    ZINF_TRY(zinf_comm_iallreduce(z->comm, acc, x->pn, ZINF_F32, &p->q, what));
    if (!z->cfg->overlap_comm) ZINF_TRY(progress(z, true));
    return 0;
}

/* ---------------------------------------------------------------- stage-3 gathers ---------- */
/* Where the all-gather of unit u sends this rank's shard from: the shard itself when the
 * collectives can read it (device memory, or host memory on a host-visible backend); otherwise
 * it is brought into its own slot of the gathered buffer `full`, and the all-gather runs in place.
 * An NVMe shard is read first (into that slot, or into the host buffer and then up). */
static int shard_source(zinf_zero *z, int u, char *full, const void **send)
{
    zunit *x = &z->u[u];
    size_t bytes = (size_t)x->p * z->es;
    char *mine = full + (size_t)x->off * z->es;
    zinf_backend *be = z->be;
    if (x->pshard.at == ZINF_AT_DEVICE || (x->pshard.at == ZINF_AT_HOST && be->host_visible)) {
        *send = x->pshard.p;
        return 0;
    }
    *send = mine;
    if (x->pshard.at == ZINF_AT_HOST) return be->copy(be, mine, x->pshard.p, bytes, NULL);
    if (be->host_visible) return zinf_swap_read(x->pshard.sw, &x->pshard.r, 0, mine, bytes);
    ZINF_TRY(zinf_swap_read(x->pshard.sw, &x->pshard.r, 0, z->parbuf, bytes));
    ZINF_TRY(be->copy(be, mine, z->parbuf, bytes, NULL));
    return be->sync(be); /* the host buffer is read into again for the next unit */
}

static int launch_gather(zinf_zero *z, int u, const void *send)
{
    zunit *x = &z->u[u];
    char what[160];
    snprintf(what, sizeof what, "all-gather of %s parameters", z->m->units[u].name);
    ZINF_TRY(zinf_comm_iallgather(z->comm, send, x->full, x->p, z->be->cdt, &x->greq, what));
    x->state = G_INFLIGHT;
    return 0;
}

/* A free host buffer for an NVMe shard's read (-1: none; the read is then done in place of the
 * gather, synchronously). A buffer whose copy up has completed is free again. */
static int rbuf_take(zinf_zero *z)
{
    for (int i = 0; i < z->nrbuf; i++) {
        if (z->rbuf_up[i] && z->be->event_query(z->be, z->rbuf_ev[i]) == 1) z->rbuf_busy[i] = z->rbuf_up[i] = false;
        if (!z->rbuf_busy[i]) {
            z->rbuf_busy[i] = true;
            return i;
        }
    }
    return -1;
}

/* The NVMe read of a prefetched unit has landed: up into its slot, then the all-gather. */
static int finish_read(zinf_zero *z, int u)
{
    zunit *x = &z->u[u];
    int rc = zinf_swap_wait(x->pshard.sw, x->rreq);
    x->rreq = NULL;
    char *mine = (char *)x->full + (size_t)x->off * z->es;
    if (!rc && x->rbuf >= 0) {
        rc = z->be->copy(z->be, mine, z->rbufs[x->rbuf], (size_t)x->p * z->es, NULL);
        if (!rc) rc = z->be->event_record(z->be, z->rbuf_ev[x->rbuf], NULL);
        z->rbuf_up[x->rbuf] = true; /* free once the copy is done */
        x->rbuf = -1;
    }
    ZINF_TRY(rc);
    return launch_gather(z, u, mine);
}

static int start_gather(zinf_zero *z, int u)
{
    zunit *x = &z->u[u];
    if (x->state) return 0;
    int g = update_gate(z, u, true);
    if (g < 0) return g;
    x->full = zalloc(z, ZINF_MEM_PARAM, x->pn * (int64_t)z->es);
    if (!x->full) return NOMEM(z, "gathered parameters", u);
    if (!x->persistent) z->live += x->n;
    if (x->pshard.at == ZINF_AT_NVME) {
        /* the read goes ahead on its own; the all-gather starts once it is done (finish_read) */
        char *mine = (char *)x->full + (size_t)x->off * z->es;
        x->rbuf = z->be->host_visible ? -1 : rbuf_take(z);
        if (z->be->host_visible || x->rbuf >= 0) {
            void *dst = x->rbuf >= 0 ? z->rbufs[x->rbuf] : mine;
            ZINF_TRY(zinf_swap_submit(x->pshard.sw, ZINF_SWAP_READ, &x->pshard.r, 0, dst, (size_t)x->p * z->es,
                                      &x->rreq));
            x->state = G_READING;
            return 0;
        }
    }
    const void *send;
    ZINF_TRY(shard_source(z, u, x->full, &send));
    return launch_gather(z, u, send);
}

/* k: the use in the stage-3 plan that needs unit u */
static int finish_gather(zinf_zero *z, int u, int k)
{
    zunit *x = &z->u[u];
    if (x->state == G_READING) ZINF_TRY(finish_read(z, u));
    if (x->state == G_INFLIGHT) {
        double t0 = zinf_now();
        zinf_event **ev = z->stall ? z->stall + 2 * k : NULL;
        if (ev) z->be->event_record(z->be, ev[0], NULL);
        ZINF_TRY(zinf_comm_wait(z->comm, &x->greq));
        if (ev) z->be->event_record(z->be, ev[1], NULL), z->stall_used[k] = true;
        z->t.gather += zinf_now() - t0;
        x->state = G_GATHERED;
    }
    z->m->params[u] = x->full;
    return 0;
}

static int release_unit(zinf_zero *z, int u)
{
    zunit *x = &z->u[u];
    if (!x->state) return 0;
    if (x->state == G_READING) {
        int rc = zinf_swap_wait(x->pshard.sw, x->rreq);
        x->rreq = NULL;
        if (x->rbuf >= 0) z->rbuf_busy[x->rbuf] = false;
        x->rbuf = -1;
        ZINF_TRY(rc);
    }
    if (x->state == G_INFLIGHT) ZINF_TRY(zinf_comm_wait(z->comm, &x->greq));
    zfree(z, ZINF_MEM_PARAM, x->full, x->pn * (int64_t)z->es);
    x->full = NULL;
    x->state = G_RELEASED;
    if (!x->persistent) z->live -= x->n;
    z->m->params[u] = NULL;
    return 0;
}

/* Make room so that gathered elements beyond the unit in use stay within max_live_parameters:
 * drop kept (not in-flight) units, farthest next use first. */
static int evict_for(zinf_zero *z, int k, int cur)
{
    int64_t limit = z->cfg->stage3_max_live_parameters;
    while (z->live - (z->u[cur].persistent ? 0 : z->u[cur].n) > limit) {
        int victim = -1, far = -1;
        for (int v = 0; v < z->nunits; v++) {
            if (v == cur || z->u[v].persistent || z->u[v].state != G_GATHERED) continue;
            int nu = z->nseq;
            for (int j = k + 1; j < z->nseq; j++) if (z->seq[j].u == v) { nu = j; break; }
            if (nu > far) { far = nu; victim = v; }
        }
        if (victim < 0) break; /* only in-flight prefetches remain; they were within budget */
        ZINF_TRY(release_unit(z, victim));
    }
    return 0;
}

static void track_live(zinf_zero *z, int cur)
{
    int64_t beyond = z->live - (z->u[cur].persistent ? 0 : z->u[cur].n);
    if (beyond > z->live_max_beyond) z->live_max_beyond = beyond;
}

static int prefetch(zinf_zero *z, int k, int cur)
{
    int64_t inflight = 0, cap = z->cfg->stage3_prefetch_bucket_size;
    int64_t limit = z->cfg->stage3_max_live_parameters;
    for (int v = 0; v < z->nunits; v++)
        if (z->u[v].state == G_INFLIGHT || z->u[v].state == G_READING) inflight += z->u[v].n;
    for (int j = k + 1; j < z->nseq; j++) {
        int v = z->seq[j].u;
        zunit *x = &z->u[v];
        if (x->state) continue;
        /* a unit the update still holds is not waited for here: the unit in use goes first. With
         * several ranks the look-ahead must not depend on when each rank's own update releases
         * its units (their all-gathers would pair up out of order): there it stops at any unit
         * not yet through the blocking gate of its use, which every rank passes at the same use */
        if (x->upd_wait && z->W > 1) break;
        int g = update_gate(z, v, false);
        if (g <= 0) return g;
        /* DeepSpeed's rule (partitioned_param_coordinator.py): fetch ahead while what is in
         * flight is below the bucket, so the first parameter ahead always goes, however large.
         * At zinf's grain, the unit: the next unit goes when nothing fills the bucket yet. HF's
         * "auto" (0.9 H^2) is below one block (12 H^2); under the old "fits whole" rule it never
         * prefetched a block. */
        if (inflight >= cap) break;
        if (z->live - (z->u[cur].persistent ? 0 : z->u[cur].n) + (x->persistent ? 0 : x->n) > limit) break;
        ZINF_TRY(start_gather(z, v));
        inflight += x->n;
    }
    return 0;
}

/* ---------------------------------------------------------------- hooks -------------------- */
static int hook_acquire(void *ctx, int u, int phase)
{
    zinf_zero *z = ctx;
    zunit *x = &z->u[u];
    ZINF_TRY(progress(z, false));
    if (z->stage == 3) {
        if (z->cursor >= z->nseq || z->seq[z->cursor].u != u || z->seq[z->cursor].phase != phase)
            return zinf_errc(ZINF_EINVAL, "internal: unit %s used out of the stage-3 plan (use %d)",
                             z->m->units[u].name, z->cursor);
        int k = z->cursor++;
        z->current = u;
        if (!x->state) ZINF_TRY(start_gather(z, u));
        /* units kept for reuse count too: keep the bound whether or not u was gathered already */
        ZINF_TRY(evict_for(z, k, u));
        ZINF_TRY(finish_gather(z, u, k));
        ZINF_TRY(prefetch(z, k, u));
        track_live(z, u);
    }
    /* transient full gradients (all but stages 0-1 with fp32 compute) start as nothing: the
     * model's first write fills them */
    if (phase == 1 && !x->gfull) {
        x->gfull = zalloc_k(z, ZINF_MEM_GRAD, x->pn * (int64_t)z->es, true);
        if (!x->gfull) return NOMEM(z, "the gradient", u);
        z->m->grads[u] = x->gfull;
        ZINF_TRY(grad_fresh(z, u));
    }
    return 0;
}

static int hook_release(void *ctx, int u, int phase)
{
    zinf_zero *z = ctx;
    if (z->stage != 3) return 0;
    zunit *x = &z->u[u];
    int k = z->cursor - 1;
    z->current = -1;
    if (x->persistent) return 0;
    int nk = z->nextuse[k];
    /* keep the unit when it is used again within max_reuse_distance elements of other units */
    if (nk >= 0 && z->reuse_dist[k] <= z->cfg->stage3_max_reuse_distance) return 0;
    return release_unit(z, u);
}

static int hook_grad_ready(void *ctx, int u)
{
    zinf_zero *z = ctx;
    double t0 = zinf_now();
    int rc = grad_settle(z, u);
    if (rc) return rc;
    if (z->stage >= 2) {
        rc = reduce_scatter_unit(z, u);
        /* with the step's update under way, the reductions of the units before this one complete
         * now, in stream order, so their host update can start: they have had this unit's backward
         * to run, and a host that runs ahead of the device would see them finish only at the end */
        if (!rc && z->ov.armed && z->last_micro) {
            int n = 0;
            while (n < z->npend && z->pend[n].u != u) n++;
            rc = progress_n(z, n);
        }
    } else {
        if (!z->f32 && !z->g16) accumulate_unit(z, u);
        if (z->last_micro && z->cfg->overlap_comm) rc = allreduce_unit(z, u);
    }
    z->t.reduce += zinf_now() - t0;
    return rc;
}

const zinf_unit_hooks *zinf_zero_hooks(zinf_zero *z) { return &z->hooks; }

/* ---------------------------------------------------------------- plan --------------------- */
/* the model's static order of unit uses (zinf_model_use_order): forward's first, then backward's */
static int build_plan(zinf_zero *z)
{
    int n = z->m->nuses;
    z->seq = z->m->uses;
    z->nseq_full = n;
    z->nseq_fwd = z->m->nfwd;
    z->nextuse = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    z->reuse_dist = calloc((size_t)(n > 0 ? n : 1), sizeof(int64_t));
    if (!z->nextuse || !z->reuse_dist) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    return 0;
}

/* next use and reuse distance for a plan of length len (forward only or forward + backward) */
static void plan_distances(zinf_zero *z, int len)
{
    for (int k = 0; k < len; k++) {
        z->nextuse[k] = -1;
        z->reuse_dist[k] = 0;
        int u = z->seq[k].u;
        for (int j = k + 1; j < len; j++) {
            if (z->seq[j].u == u) { z->nextuse[k] = j; break; }
        }
        if (z->nextuse[k] < 0) continue;
        /* distinct other units in between */
        char *seen = calloc((size_t)z->nunits, 1);
        for (int j = k + 1; j < z->nextuse[k]; j++) {
            int v = z->seq[j].u;
            if (!seen[v]) { seen[v] = 1; z->reuse_dist[k] += z->u[v].n; }
        }
        free(seen);
    }
}

/* ---------------------------------------------------------------- init / free -------------- */
static zinf_at at_of(zinf_offload_device d)
{
    return d == ZINF_DEV_CPU ? ZINF_AT_HOST : d == ZINF_DEV_NVME ? ZINF_AT_NVME : ZINF_AT_DEVICE;
}

static int64_t round4k(int64_t b) { return (b + 4095) / 4096 * 4096; }

/* The swapper options for the NVMe states of one offload block: nvme_path (one directory, or
 * several, one per line, striped, cut into list), the aio block, and --swap_engine (io_uring with
 * O_DIRECT, or psync through the page cache). */
static void swap_opts(const zinf_zero *z, zinf_swap_opts *so, char *paths, const char **list,
                      const char *tag, const zinf_offload_cfg *o, int64_t capacity, size_t nbuf,
                      size_t bufsize)
{
    const zinf_config *c = z->cfg;
    snprintf(paths, sizeof o->nvme_path, "%s", o->nvme_path);
    int n = 0;
    for (char *sv = NULL, *t = strtok_r(paths, "\n", &sv); t && n < 16; t = strtok_r(NULL, "\n", &sv))
        list[n++] = t;
    zinf_swap_opts_defaults(so);
    so->engine = c->swap_engine[0] ? c->swap_engine : "io_uring";
    so->buffered = strcmp(so->engine, "psync") == 0;
    so->unlink_early = 1; /* a job that is killed leaves no swap file */
    so->paths = list;
    so->npaths = n;
    so->tag = tag;
    so->rank = z->rank;
    so->capacity = capacity;
    so->block_size = (size_t)c->aio_block_size;
    so->queue_depth = (int)c->aio_queue_depth;
    so->intra_op_parallelism = (int)c->aio_intra_op_parallelism;
    so->single_submit = c->aio_single_submit;
    so->overlap_events = c->aio_overlap_events;
    so->buffer_count = nbuf;
    so->buffer_size = bufsize;
}

static const char *swap_key(const char *tag)
{
    return strcmp(tag, "optim") == 0 ? "offload_optimizer" : "offload_param";
}

static int open_swap(zinf_zero *z, zinf_swap **out, const zinf_swap_opts *so)
{
    int rc = zinf_swap_open(out, so);
    if (rc) {
        char why[512];
        snprintf(why, sizeof why, "%s", zinf_errmsg());
        return zinf_errc(rc, "rank %d: zero_optimization.%s.nvme_path: %s%s", z->rank, swap_key(so->tag), why,
                         strstr(why, "psync engine") ? " (zinf train --swap_engine psync)" : "");
    }
    z->mem_at[ZINF_AT_HOST][ZINF_MEM_STAGING] += (int64_t)zinf_swap_pinned_bytes(*out);
    return 0;
}

/* The ranks of a node that share a file system preallocate their swap files on it together, and
 * the swapper's own space check counts one rank's files (against a free space the others may have
 * taken already). So before any rank makes a file, every rank measures its directories, the
 * node's ranks exchange what each needs on which file system (st_dev, over the node's
 * shared-memory communicator; the exchange completes only after every rank measured), and a
 * file system that cannot hold all of their files is an error on each rank that uses it.
 * Collective over the world: every rank calls it (with nso 0 where it has no NVMe state). */
enum { SPACE_MAX = 32 }; /* two swappers of at most 16 directories */
static int check_node_space(zinf_zero *z, const zinf_swap_opts *so, int nso)
{
    zinf_swap_space mine[SPACE_MAX] = {{0}};
    const char *key[SPACE_MAX], *dir[SPACE_MAX];
    int n = 0, rc = 0;
    for (int s = 0; s < nso && !rc; s++) {
        rc = zinf_swap_space_of(&so[s], mine + n);
        if (rc) {
            char why[512];
            snprintf(why, sizeof why, "%s", zinf_errmsg());
            rc = zinf_errc(rc, "rank %d: zero_optimization.%s.nvme_path: %s", z->rank, swap_key(so[s].tag), why);
        }
        for (int i = 0; i < so[s].npaths && n < SPACE_MAX; i++) key[n] = swap_key(so[s].tag), dir[n++] = so[s].paths[i];
    }
    if (rc) n = 0; /* still in the exchange below, with nothing, so that no rank waits for this one */
    int64_t send[3 * SPACE_MAX] = {0};
    for (int i = 0; i < n; i++) {
        send[3 * i] = (int64_t)mine[i].dev;
        send[3 * i + 1] = mine[i].need;
        send[3 * i + 2] = 1;
    }
    MPI_Comm node;
    if (MPI_Comm_split_type(z->comm->world, MPI_COMM_TYPE_SHARED, z->rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return rc ? rc : zinf_errc(ZINF_ECOMM, "rank %d: cannot make the node's communicator", z->rank);
    int nn = 1;
    MPI_Comm_size(node, &nn);
    int64_t *all = malloc((size_t)nn * sizeof send);
    int mrc = all ? MPI_Allgather(send, 3 * SPACE_MAX, MPI_INT64_T, all, 3 * SPACE_MAX, MPI_INT64_T, node)
                  : MPI_ERR_NO_MEM;
    MPI_Comm_free(&node);
    if (!rc && mrc != MPI_SUCCESS) rc = zinf_errc(ZINF_ECOMM, "rank %d: the NVMe space exchange failed", z->rank);
    for (int i = 0; i < n && !rc; i++) {
        bool first = true;
        for (int j = 0; j < i; j++) first &= mine[j].dev != mine[i].dev;
        if (!first) continue; /* that file system was checked with its first directory */
        int64_t need = 0, own = 0;
        int ranks = 0;
        for (int r = 0; r < nn; r++) {
            bool uses = false;
            for (int e = 0; e < SPACE_MAX; e++) {
                const int64_t *x = all + (size_t)r * 3 * SPACE_MAX + 3 * e;
                if (!x[2] || (uint64_t)x[0] != mine[i].dev) continue;
                need += x[1];
                uses = true;
            }
            ranks += uses;
        }
        for (int j = 0; j < n; j++) own += mine[j].dev == mine[i].dev ? mine[j].need : 0;
        if (need > mine[i].avail)
            rc = zinf_errc(-ENOSPC, "rank %d: zero_optimization.%s.nvme_path: too little space: need %lld bytes, %s "
                           "has %lld free (the swap files of the %d ranks of this node on that file system; this "
                           "rank's take %lld)", z->rank, key[i], (long long)need, dir[i], (long long)mine[i].avail,
                           ranks, (long long)own);
    }
    free(all);
    return rc;
}

/* Where each unit's states live, the swappers of the NVMe ones, and the buffers of the host step.
 * offload_optimizer moves master, m and v (at stage 3 `ratio` of the shard's elements, whole
 * units in order); offload_param moves the stage-3 parameter shard, NVMe only beyond the first
 * max_in_cpu elements, which stay in host memory (DeepSpeed's meaning). */
bool zinf_zero_grads16(int stage, bool f32, int world, int64_t gas)
{
    return !f32 && stage == 0 && world == 1 && gas == 1;
}

int64_t zinf_zero_grad_bytes(int stage, bool f32, bool g16, size_t es, int64_t pn, int64_t p, zinf_mem_kind *kind)
{
    if (kind) *kind = (stage < 2 && f32) || g16 ? ZINF_MEM_GRAD : ZINF_MEM_GRAD_ACC;
    if (g16) return (int64_t)es * pn;
    return 4 * (stage < 2 ? pn : p);
}

int64_t zinf_zero_reduce_elems(int stage, int W, int64_t reduce_bucket, int64_t psi)
{
    int64_t b = reduce_bucket < psi ? reduce_bucket : psi;
    if (b < 0) b = 0;
    if (stage < 2) return b;
    return W > 1 ? b + b / W : 0; /* one rank adds the gradient into its accumulator in place */
}

void zinf_zero_places(const zinf_config *cfg, int stage, bool f32, int n, const int64_t *p,
                      zinf_unit_place *out)
{
    zinf_at oat = stage >= 1 ? at_of(cfg->offload_optimizer.device) : ZINF_AT_DEVICE;
    zinf_at pat = stage == 3 ? at_of(cfg->offload_param.device) : ZINF_AT_DEVICE;
    double total = 0;
    for (int u = 0; u < n; u++) total += (double)p[u];
    double want = (stage == 3 ? cfg->offload_optimizer.ratio : 1.0) * total;
    int64_t done = 0, in_cpu = 0, host_bytes = 0;
    for (int u = 0; u < n; u++) {
        zinf_unit_place *o = &out[u];
        o->opt = ZINF_AT_DEVICE;
        if (oat != ZINF_AT_DEVICE && (double)(done + p[u]) <= want * (1 + 1e-12)) {
            o->opt = oat;
            done += p[u];
            /* zinf_optimizer_host_bytes: NVMe offload keeps what fits in host memory there */
            int64_t b = 12 * p[u];
            if (oat == ZINF_AT_NVME && host_bytes + b <= cfg->zinf_optimizer_host_bytes) {
                o->opt = ZINF_AT_HOST;
                host_bytes += b;
            }
        }
        o->par = pat;
        if (pat == ZINF_AT_NVME && in_cpu + p[u] <= cfg->offload_param.max_in_cpu) {
            o->par = ZINF_AT_HOST;
            in_cpu += p[u];
        }
        o->master_alias = f32 && o->opt == o->par;
    }
}

static int plan_places(zinf_zero *z, int64_t maxp)
{
    const zinf_config *c = z->cfg;
    int64_t opt_nvme = 0, par_nvme = 0, maxpar = 0;
    bool any_host_opt = false;
    int64_t *ps = calloc((size_t)z->nunits + 1, sizeof *ps);
    zinf_unit_place *pl = calloc((size_t)z->nunits + 1, sizeof *pl);
    if (!ps || !pl) {
        free(ps);
        free(pl);
        return zinf_errc(ZINF_ENOMEM, "out of host memory");
    }
    for (int u = 0; u < z->nunits; u++) ps[u] = z->u[u].p;
    zinf_zero_places(c, z->stage, z->f32, z->nunits, ps, pl);
    for (int u = 0; u < z->nunits; u++) {
        zunit *x = &z->u[u];
        x->opt_at = pl[u].opt;
        x->pshard.at = pl[u].par;
        x->master_alias = pl[u].master_alias;
        any_host_opt |= x->opt_at != ZINF_AT_DEVICE;
        if (x->pshard.at == ZINF_AT_NVME) {
            par_nvme += round4k(x->p * (int64_t)z->es);
            if (x->p * (int64_t)z->es > maxpar) maxpar = x->p * (int64_t)z->es;
        }
        if (x->opt_at == ZINF_AT_NVME) opt_nvme += 3 * round4k(x->p * 4);
    }
    free(ps);
    free(pl);
    /* the host step's tile: sub_group_size elements, at least 2^18 (1 MiB of fp32) or the largest
     * tensor's share of a shard, whichever is smaller (DeepSpeed never splits a parameter, so
     * a tile needs no more to be as coarse as DeepSpeed's), at most 2^24 (64 MiB of fp32) or the
     * largest shard; a multiple of 1024 elements (4 KiB) */
    int64_t big = 0;
    for (int u = 0; u < z->nunits; u++)
        for (int k = 0; k < z->m->units[u].ntensors; k++)
            if (z->m->units[u].t[k].numel > big) big = z->m->units[u].t[k].numel;
    int64_t lo = (big + z->W - 1) / z->W;
    if (lo > (1 << 18)) lo = 1 << 18;
    int64_t t = c->sub_group_size;
    if (t < lo) t = lo;
    if (t > (1 << 24)) t = 1 << 24;
    if (t > maxp) t = maxp;
    z->tile = (t + 1023) / 1024 * 1024;
    z->depth = 1 + c->offload_optimizer.pipeline_read + c->offload_optimizer.pipeline_write;
    zinf_swap_opts so[2];
    char paths[2][sizeof c->offload_param.nvme_path];
    const char *list[2][16];
    int nso = 0;
    if (opt_nvme)
        swap_opts(z, &so[nso], paths[nso], list[nso], "optim", &c->offload_optimizer, opt_nvme,
                  3 * (size_t)z->depth, (size_t)z->tile * 4), nso++;
    if (par_nvme) swap_opts(z, &so[nso], paths[nso], list[nso], "param", &c->offload_param, par_nvme, 0, 0), nso++;
    /* a collective: decided by the config, the same on every rank, not by this rank's units */
    if (c->offload_optimizer.device == ZINF_DEV_NVME || c->offload_param.device == ZINF_DEV_NVME)
        ZINF_TRY(check_node_space(z, so, nso));
    for (int s = 0; s < nso; s++) ZINF_TRY(open_swap(z, s == 0 && opt_nvme ? &z->swap_opt : &z->swap_par, &so[s]));
    bool dev = !z->be->host_visible;
    /* the host step's tile list, and per unit an event for its gradient's last write */
    if (any_host_opt) {
        for (int u = 0; u < z->nunits; u++)
            if (z->u[u].opt_at != ZINF_AT_DEVICE) z->captl += (int)((z->u[u].p + z->tile - 1) / z->tile);
        z->tl = calloc((size_t)z->captl, sizeof *z->tl);
        z->tl_unit = calloc((size_t)z->nunits, sizeof *z->tl_unit);
        if (!z->tl || !z->tl_unit) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    }
    if (any_host_opt && dev) {
        z->gev = calloc((size_t)z->nunits, sizeof *z->gev);
        if (!z->gev) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        for (int u = 0; u < z->nunits; u++)
            if (!(z->gev[u] = z->be->event_new(z->be)))
                return zinf_errc(ZINF_ENOMEM, "rank %d: cannot create an event", z->rank);
    }
    /* the host step may run during the backward pass where its states are in host memory and
     * the gradients become final unit by unit (reduce-scatter): see zinf_zero_overlap_step */
    z->ov.able = any_host_opt && !opt_nvme && !par_nvme && z->stage >= 2 && c->zinf_overlap_host_step;
    /* at stage 3 every unit is gathered before use, so the next passes can wait for each unit's
     * update alone: the update runs on into them (update_gate) */
    z->ov.into_next = z->ov.able && z->stage == 3;
    if (z->ov.able) {
        z->ov.unit_done = calloc((size_t)z->nunits, sizeof *z->ov.unit_done);
        z->ov.uev_rec = calloc((size_t)z->nunits, sizeof *z->ov.uev_rec);
        if (!z->ov.unit_done || !z->ov.uev_rec) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    }
    if (z->ov.able && dev) {
        z->ov.uev = calloc((size_t)z->nunits, sizeof *z->ov.uev);
        if (!z->ov.uev) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        for (int u = 0; u < z->nunits; u++)
            if (!(z->ov.uev[u] = z->be->event_new(z->be)))
                return zinf_errc(ZINF_ENOMEM, "rank %d: cannot create an event", z->rank);
    }
    if (any_host_opt && dev) {
        z->s_down = z->be->stream_new(z->be);
        z->s_up = z->be->stream_new(z->be);
        if (!z->s_down || !z->s_up) return zinf_errc(ZINF_ENOMEM, "rank %d: cannot create copy streams", z->rank);
        for (int i = 0; i < 2; i++) {
            z->gbuf[i] = halloc(z, ZINF_MEM_STAGING, z->tile * 4, true);
            z->ev_down[i] = z->be->event_new(z->be);
            z->ev_up[i] = z->be->event_new(z->be);
            if (!z->gbuf[i] || !z->ev_down[i] || !z->ev_up[i])
                return zinf_errc(ZINF_ENOMEM, "rank %d: cannot allocate the offload staging buffers", z->rank);
        }
    }
    /* updated 16-bit tiles go up from a host buffer, or out to an NVMe parameter shard */
    if (any_host_opt && (dev || par_nvme))
        for (int i = 0; i < 2; i++)
            if (!(z->pbuf[i] = halloc(z, ZINF_MEM_STAGING, z->tile * (int64_t)z->es, true)))
                return zinf_errc(ZINF_ENOMEM, "rank %d: cannot allocate the offload staging buffers", z->rank);
    if (par_nvme && dev && !(z->parbuf = halloc(z, ZINF_MEM_STAGING, maxpar, true)))
        return zinf_errc(ZINF_ENOMEM, "rank %d: cannot allocate the parameter staging buffer", z->rank);
    /* prefetched NVMe shards are read into offload_param.buffer_count host buffers (0: every
     * read waits at the gather) */
    if (par_nvme && dev && c->offload_param.buffer_count > 0) {
        int nb = c->offload_param.buffer_count > 64 ? 64 : (int)c->offload_param.buffer_count;
        z->rbufs = calloc((size_t)nb, sizeof *z->rbufs);
        z->rbuf_ev = calloc((size_t)nb, sizeof *z->rbuf_ev);
        z->rbuf_busy = calloc((size_t)nb, sizeof *z->rbuf_busy);
        z->rbuf_up = calloc((size_t)nb, sizeof *z->rbuf_up);
        if (!z->rbufs || !z->rbuf_ev || !z->rbuf_busy || !z->rbuf_up) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        z->rbuf_bytes = maxpar;
        while (z->nrbuf < nb) {
            void *b = halloc(z, ZINF_MEM_STAGING, maxpar, true);
            zinf_event *e = b ? z->be->event_new(z->be) : NULL;
            if (!e) {
                hfree(z, ZINF_MEM_STAGING, b, maxpar, true);
                return zinf_errc(ZINF_ENOMEM, "rank %d: cannot allocate the parameter read buffers", z->rank);
            }
            z->rbufs[z->nrbuf] = b;
            z->rbuf_ev[z->nrbuf++] = e;
        }
    }
    return 0;
}

int zinf_zero_init(zinf_zero **out, zinf_model *m, const zinf_config *cfg, zinf_comm *comm,
                   zinf_backend *be, uint64_t seed)
{
    *out = NULL;
    zinf_zero *z = calloc(1, sizeof *z);
    if (!z) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    *out = z;
    z->m = m;
    z->cfg = cfg;
    z->comm = comm;
    z->be = be;
    z->stage = cfg->zero_stage;
    z->W = comm->size;
    z->rank = comm->rank;
    z->nunits = m->nunits;
    z->es = zinf_dtype_size(be->cdt);
    z->caching = strcmp(be->name, "cpu") != 0;
    /* tests: a fresh gradient holds NaN instead of what it held, so that a read before its first
     * write shows (host-visible backends) */
    const char *poison = getenv("ZINF_POISON_FRESH_GRADS");
    z->poison = be->host_visible && poison && *poison;
    z->f32 = be->cdt == ZINF_F32;
    z->g16 = zinf_zero_grads16(z->stage, z->f32, z->W, cfg->gradient_accumulation_steps);
    z->current = -1;
    z->hooks = (zinf_unit_hooks){z, hook_acquire, hook_release, hook_grad_ready};
    /* DeepSpeed's averaging: prescale divides by W before the reduction; otherwise
     * gradient_predivide_factor f divides before and f/W after */
    double f = cfg->gradient_predivide_factor;
    z->pre = cfg->prescale_gradients ? (float)(1.0 / z->W) : (float)(1.0 / f);
    z->post = cfg->prescale_gradients ? 1.0f : (float)(f / z->W);
    if (z->W == 1) z->pre = z->post = 1.0f;
    /* stages 2-3 follow DeepSpeed's ZeRO-3 reduce-scatter: the gradient, in the compute dtype, is
     * divided by the predivide factor and by W before the sum (so a 16-bit sum cannot overflow
     * where the average would not), and the shard is multiplied by the factor after */
    double fs = cfg->prescale_gradients ? 1.0 : f;
    z->rs_pre = z->W == 1 ? 1.0f : (float)(1.0 / ((double)z->W * fs));
    z->rs_post = z->W == 1 ? 1.0f : (float)fs;
    z->rs_cap = zinf_zero_reduce_elems(z->stage, z->W, cfg->reduce_bucket_size, zinf_model_num_params(&m->c));
    z->u = calloc((size_t)z->nunits, sizeof *z->u);
    z->norm_x = calloc((size_t)z->nunits, sizeof *z->norm_x);
    z->norm_n = calloc((size_t)z->nunits, sizeof *z->norm_n);
    if (!z->u || !z->norm_x || !z->norm_n) return zinf_errc(ZINF_ENOMEM, "out of host memory");

    int64_t maxpn = 0, maxp = 0, persist_total = 0;
    for (int u = 0; u < z->nunits; u++) {
        zunit *x = &z->u[u];
        x->n = m->units[u].numel;
        if (z->stage == 0) {
            x->pn = x->n;
            x->p = x->n;
            x->off = 0;
        } else {
            x->pn = (x->n + z->W - 1) / z->W * z->W;
            x->p = x->pn / z->W;
            x->off = (int64_t)z->rank * x->p;
        }
        if (x->pn > maxpn) maxpn = x->pn;
        if (x->p > maxp) maxp = x->p;
        if (z->stage == 3 && x->n <= cfg->stage3_param_persistence_threshold &&
            persist_total + x->n <= cfg->stage3_model_persistence_threshold) {
            x->persistent = true;
            persist_total += x->n;
        }
    }
    ZINF_TRY(plan_places(z, maxp));
    float *host = malloc((size_t)maxpn * sizeof(float));
    float *dtmp = z->f32 ? NULL : be->alloc(be, ZINF_PLACE_DEVICE, (size_t)maxpn * sizeof(float));
    /* 16-bit parameters made on the host for NVMe shards */
    void *h16 = !z->f32 && z->swap_par ? malloc((size_t)maxpn * z->es) : NULL;
    if (!host || (!z->f32 && !dtmp) || (!z->f32 && z->swap_par && !h16)) {
        free(host);
        free(h16);
        if (dtmp) be->free(be, ZINF_PLACE_DEVICE, dtmp);
        return zinf_errc(ZINF_ENOMEM, "out of memory for initialisation");
    }
    int rc = 0;
    size_t es = z->es;
    const zinf_offload_cfg *op = &cfg->offload_param, *oo = &cfg->offload_optimizer;
    for (int u = 0; u < z->nunits && !rc; u++) {
        zunit *x = &z->u[u];
        /* parameters: the whole unit below stage 3, this rank's shard at stage 3; the values
         * come from the counter-based initialiser, so a shard is made without the rest */
        int64_t first = z->stage == 3 ? x->off : 0, count = z->stage == 3 ? x->p : x->pn;
        zinf_model_init_params(m, u, seed, first, count, host);
        if (z->stage == 3) {
            rc = state_alloc(z, &x->pshard, ZINF_MEM_PARAM_SHARD, x->pshard.at, count * (int64_t)es,
                             op->pin_memory, z->swap_par, "the parameter shard", u);
            if (rc) break;
        } else {
            x->full = zalloc(z, ZINF_MEM_PARAM, count * (int64_t)es);
            if (!x->full) { rc = NOMEM(z, "parameters", u); break; }
            m->params[u] = x->full;
        }
        void *store = z->stage == 3 ? x->pshard.p : x->full; /* NULL: on NVMe */
        if (!z->f32) {
            be->copy(be, dtmp, host, (size_t)count * 4, NULL);
            if (store) be->from_f32(be, store, dtmp, count);
        }
        if (!store) { /* an NVMe shard: written once from the host */
            const void *src = host;
            if (!z->f32) {
                for (int64_t i = 0; i < count; i++)
                    ((uint16_t *)h16)[i] = be->cdt == ZINF_BF16 ? zinf_f32_to_bf16(host[i]) : zinf_f32_to_f16(host[i]);
                src = h16;
            }
            rc = zinf_swap_write(z->swap_par, &x->pshard.r, 0, src, (size_t)count * es);
            if (rc) break;
        } else if (z->f32) {
            be->copy(be, store, host, (size_t)count * 4, NULL);
        }
        /* the fp32 master: the parameters themselves where zinf_zero_places says so */
        const float *init = z->stage == 3 ? host : host + x->off;
        if (x->master_alias) {
            x->master = z->stage == 3 ? x->pshard
                                      : (zstate){.p = (char *)x->full + (size_t)x->off * 4, .at = ZINF_AT_DEVICE};
        } else {
            rc = state_alloc(z, &x->master, ZINF_MEM_MASTER, x->opt_at, x->p * 4, oo->pin_memory, z->swap_opt,
                             "fp32 master weights", u);
            if (rc) break;
            if (x->opt_at == ZINF_AT_NVME) rc = zinf_swap_write(z->swap_opt, &x->master.r, 0, init, (size_t)x->p * 4);
            else if (x->opt_at == ZINF_AT_HOST) memcpy(x->master.p, init, (size_t)x->p * 4);
            else if (z->f32) be->copy(be, x->master.p, init, (size_t)x->p * 4, NULL);
            else be->copy(be, x->master.p, z->stage == 3 ? dtmp : dtmp + x->off, (size_t)x->p * 4, NULL);
            if (rc) break;
        }
        zinf_mem_kind gk;
        int64_t gb = zinf_zero_grad_bytes(z->stage, z->f32, z->g16, z->es, x->pn, x->p, &gk);
        if (gk == ZINF_MEM_GRAD) {
            x->gfull = zalloc(z, ZINF_MEM_GRAD, gb); /* the gradient itself, kept */
            if (!x->gfull) { rc = NOMEM(z, "gradients", u); break; }
            m->grads[u] = x->gfull;
        } else {
            x->gacc = zalloc(z, ZINF_MEM_GRAD_ACC, gb);
            if (!x->gacc) { rc = NOMEM(z, "the gradient accumulator", u); break; }
        }
        rc = state_alloc(z, &x->m, ZINF_MEM_ADAM, x->opt_at, x->p * 4, oo->pin_memory, z->swap_opt, "Adam m", u);
        if (!rc) rc = state_alloc(z, &x->v, ZINF_MEM_ADAM, x->opt_at, x->p * 4, oo->pin_memory, z->swap_opt, "Adam v", u);
        if (!rc) rc = be->sync(be); /* host and dtmp are reused by the next unit */
    }
    free(h16);
    if (dtmp) be->free(be, ZINF_PLACE_DEVICE, dtmp);
    free(host);
    if (!rc && z->stage == 3) rc = build_plan(z);
    /* wall_clock_breakdown: time the compute stream's waits for stage-3 gathers on the backend */
    if (!rc && z->stage == 3 && cfg->wall_clock_breakdown && be->event_new_timed) {
        z->stall = calloc(2 * (size_t)z->nseq_full, sizeof *z->stall);
        z->stall_used = calloc((size_t)z->nseq_full, sizeof *z->stall_used);
        if (!z->stall || !z->stall_used) rc = zinf_errc(ZINF_ENOMEM, "out of host memory");
        for (int k = 0; !rc && k < 2 * z->nseq_full; k++)
            if (!(z->stall[k] = be->event_new_timed(be))) rc = zinf_errc(ZINF_ENOMEM, "cannot create timing events");
    }
    if (!rc) rc = be->sync(be);
    return rc;
}

void zinf_zero_free(zinf_zero *z)
{
    if (!z) return;
    z->ov.armed = false;
    if (z->ov.th_on) { /* a step left under way (the run failed): its tile list ends here */
        pthread_mutex_lock(&z->ov.mu);
        z->ov.quit = z->ov.closed = true;
        pthread_cond_broadcast(&z->ov.cv);
        pthread_mutex_unlock(&z->ov.mu);
        pthread_join(z->ov.th, NULL);
        pthread_mutex_destroy(&z->ov.mu);
        pthread_cond_destroy(&z->ov.cv);
        z->ov.th_on = false;
    }
    for (int i = 0; i < z->npend; i++) zinf_comm_wait(z->comm, &z->pend[i].q), finish_pending(z, &z->pend[i]);
    for (int k = 0; z->stall && k < 2 * z->nseq_full; k++)
        if (z->stall[k]) z->be->event_free(z->be, z->stall[k]);
    free(z->stall);
    free(z->stall_used);
    for (int u = 0; z->u && u < z->nunits; u++) {
        zunit *x = &z->u[u];
        if (x->state == G_INFLIGHT) zinf_comm_wait(z->comm, &x->greq);
        if (x->state == G_READING) zinf_swap_wait(x->pshard.sw, x->rreq);
        zfree(z, ZINF_MEM_PARAM, x->full, x->pn * (int64_t)z->es);
        zfree(z, ZINF_MEM_GRAD, x->gfull, x->pn * (int64_t)z->es);
        zfree(z, ZINF_MEM_GRAD_ACC, x->gacc, zinf_zero_grad_bytes(z->stage, z->f32, z->g16, z->es, x->pn, x->p, NULL));
        if (!x->master_alias) state_free(z, &x->master, ZINF_MEM_MASTER);
        state_free(z, &x->pshard, ZINF_MEM_PARAM_SHARD);
        state_free(z, &x->m, ZINF_MEM_ADAM);
        state_free(z, &x->v, ZINF_MEM_ADAM);
    }
    for (int i = 0; i < 2; i++) {
        hfree(z, ZINF_MEM_STAGING, z->gbuf[i], z->tile * 4, true);
        hfree(z, ZINF_MEM_STAGING, z->pbuf[i], z->tile * (int64_t)z->es, true);
        if (z->ev_down[i]) z->be->event_free(z->be, z->ev_down[i]);
        if (z->ev_up[i]) z->be->event_free(z->be, z->ev_up[i]);
    }
    for (int u = 0; z->gev && u < z->nunits; u++)
        if (z->gev[u]) z->be->event_free(z->be, z->gev[u]);
    free(z->gev);
    for (int u = 0; z->ov.uev && u < z->nunits; u++)
        if (z->ov.uev[u]) z->be->event_free(z->be, z->ov.uev[u]);
    free(z->ov.uev);
    free(z->ov.unit_done);
    free(z->ov.uev_rec);
    free(z->tl);
    free(z->tl_unit);
    if (z->parbuf) z->be->free(z->be, ZINF_PLACE_PINNED, z->parbuf);
    for (int i = 0; i < z->nrbuf; i++) {
        hfree(z, ZINF_MEM_STAGING, z->rbufs[i], z->rbuf_bytes, true);
        if (z->rbuf_ev[i]) z->be->event_free(z->be, z->rbuf_ev[i]);
    }
    free(z->rbufs);
    free(z->rbuf_ev);
    free(z->rbuf_busy);
    free(z->rbuf_up);
    if (z->s_down) z->be->stream_free(z->be, z->s_down);
    if (z->s_up) z->be->stream_free(z->be, z->s_up);
    zinf_swap_close(z->swap_opt);
    zinf_swap_close(z->swap_par);
    for (int i = 0; i < z->ncache; i++) z->be->free(z->be, ZINF_PLACE_DEVICE, z->cache[i].p);
    free(z->cache);
    free(z->u);
    free(z->norm_x);
    free(z->norm_n);
    free(z->pend);
    free(z->nextuse);
    free(z->reuse_dist);
    free(z);
}

/* ---------------------------------------------------------------- step --------------------- */
int zinf_zero_begin_step(zinf_zero *z)
{
    z->wait0 = z->comm->wait_s;
    for (int u = 0; u < z->nunits; u++) {
        zunit *x = &z->u[u];
        if (x->gfull && z->stage < 2) ZINF_TRY(grad_fresh(z, u)); /* the step's first backward fills it */
        if (x->gacc && z->stage < 2) x->gacc_stale = true; /* see accumulate_unit */
        else if (x->gacc && x->upd_wait) x->gacc_zero = true; /* its update still reads it: update_gate */
        else if (x->gacc) ZINF_TRY(z->be->memset0(z->be, x->gacc, (size_t)x->p * 4, NULL));
    }
    return 0;
}

int zinf_zero_begin_pass(zinf_zero *z, int kind, int last_micro)
{
    z->last_micro = last_micro != 0;
    if (z->stage == 3) {
        /* the plan's uses [cursor, nseq): the forward's, all, the forward's before the head's, or
         * the head's and the backward's */
        z->nseq = kind == ZINF_PASS_FORWARD ? z->nseq_fwd : kind == ZINF_PASS_BODY ? z->nseq_fwd - 1 : z->nseq_full;
        plan_distances(z, z->nseq);
        z->cursor = kind == ZINF_PASS_TAIL ? z->nseq_fwd - 1 : 0;
    }
    return 0;
}

/* The step's reductions in flight end, and its device collectives run (with the timeout) */
static int reductions_done(zinf_zero *z)
{
    ZINF_TRY(progress(z, true));
    return zinf_comm_drain(z->comm);
}

int zinf_zero_abandon_step(zinf_zero *z) { return reductions_done(z); }

bool zinf_zero_update_running(const zinf_zero *z) { return z->ov.async; }

bool zinf_zero_update_may_run_on(const zinf_zero *z) { return z->ov.into_next; }

int zinf_zero_end_pass(zinf_zero *z)
{
    double t0 = zinf_now();
    ZINF_TRY(progress(z, z->stage >= 2)); /* stage 0/1 all-reduces may run on into reduce() */
    z->t.reduce += zinf_now() - t0;
    if (z->stage == 3) {
        if (z->cursor != z->nseq)
            return zinf_errc(ZINF_EINVAL, "internal: pass ended after %d of %d planned unit uses",
                             z->cursor, z->nseq);
        for (int u = 0; u < z->nunits; u++)
            if (!z->u[u].persistent) ZINF_TRY(release_unit(z, u));
    }
    /* the pass used every unit, so an update that ran on into it has released them all */
    return z->ov.async ? update_settle(z) : 0;
}

int zinf_zero_reduce(zinf_zero *z, double *norm)
{
    double t0 = zinf_now();
    if (z->stage < 2 && !(z->cfg->overlap_comm))
        for (int u = 0; u < z->nunits; u++) ZINF_TRY(allreduce_unit(z, u));
    ZINF_TRY(reductions_done(z));
    for (int u = 0; u < z->nunits; u++) /* a unit no backward reached */
        if (z->u[u].gfull) ZINF_TRY(grad_settle(z, u));
    /* the squared norm of every unit's gradient in one backend call: one wait for the device */
    const void **xs = z->norm_x;
    int64_t *ns = z->norm_n;
    for (int u = 0; u < z->nunits; u++) {
        zunit *x = &z->u[u];
        if (z->g16) { /* stage 0 on one rank: the gradient as the backward left it */
            xs[u] = x->gfull;
            ns[u] = x->n;
        } else if (z->stage < 2) {
            float *acc = acc01(z, x);
            if (z->post != 1.0f) z->be->scale(z->be, acc, x->pn, z->post);
            /* stage 0 holds the whole gradient on every rank; stage 1 counts its own shard */
            xs[u] = acc + x->off;
            ns[u] = z->stage == 0 ? x->n : x->p;
        } else { /* averaged already, around the reduce-scatter */
            xs[u] = x->gacc;
            ns[u] = x->p;
        }
    }
    double s = z->be->sumsq(z->be, z->nunits, xs, ns, z->g16 ? z->be->cdt : ZINF_F32);
    if (z->stage >= 1) ZINF_TRY(zinf_comm_allreduce_sum_f64(z->comm, &s, 1));
    *norm = sqrt(s);
    z->t.reduce += zinf_now() - t0;
    return 0;
}

/* Stages 1-2: every rank's updated shard into every rank's full parameters, in pieces of
 * allgather_bucket_size elements (piece_len per rank). */
static int allgather_params(zinf_zero *z)
{
    for (int u = 0; u < z->nunits; u++) {
        zunit *x = &z->u[u];
        int64_t qq = piece_len(z, u, z->cfg->allgather_bucket_size);
        size_t es = z->es;
        char *full = x->full;
        char *stage = zalloc(z, ZINF_MEM_COMM, qq * z->W * (int64_t)es);
        if (!stage) return NOMEM(z, "an all-gather bucket", u);
        for (int64_t lo = 0; lo < x->p; lo += qq) {
            int64_t len = x->p - lo < qq ? x->p - lo : qq;
            zinf_req rq;
            char what[160];
            snprintf(what, sizeof what, "all-gather of updated %s parameters", z->m->units[u].name);
            int rc = zinf_comm_iallgather(z->comm, full + (size_t)(x->off + lo) * es, stage, len, z->be->cdt, &rq, what);
            if (!rc) rc = zinf_comm_wait(z->comm, &rq);
            if (rc) { zfree(z, ZINF_MEM_COMM, stage, qq * z->W * (int64_t)es); return rc; }
            for (int r = 0; r < z->W; r++)
                if (r != z->rank)
                    z->be->copy(z->be, full + ((size_t)r * x->p + lo) * es, stage + (size_t)r * len * es,
                                (size_t)len * es, NULL);
        }
        ZINF_TRY(z->be->sync(z->be));
        zfree(z, ZINF_MEM_COMM, stage, qq * z->W * (int64_t)es);
    }
    return 0;
}

/* ---------------------------------------------------------------- the host optimizer step ---- */
/* The optimizer on the host (offload_optimizer: cpu or nvme), in tiles of z->tile elements of one
 * unit's shard, in unit order. For each tile: its gradient (copied down through a pinned buffer on
 * a device backend, read in place on a host-visible one), its master, m and v (in host memory, or
 * read from NVMe into a set of pool buffers), zinf_cpu_adamw_pieces over its tensor pieces (one
 * parallel region), then the updated
 * 16-bit parameters go to the parameter store (up through a pinned buffer, into host memory, or
 * out to NVMe) and NVMe states are written back. Overlap: the next tile's gradient comes down
 * while this one is computed, the last one's parameters go up meanwhile; with pipeline_read the
 * next tile's NVMe states are read during this one's update, with pipeline_write this one's are
 * written during the next. Every element sees the same arithmetic as the device step, so the
 * results do not depend on the placement. */
/* one tile's NVMe states (master, m, v): pool buffers, and the requests in flight on each
 * state's own swapper (the master may be the parameter shard, on the parameters' swapper) */
typedef struct hset { float *b[3]; zinf_swap_req *rd[3], *wr[3]; zinf_swap *sw[3]; } hset;

static zstate *opt_state(zunit *x, int i) { return i == 0 ? &x->master : i == 1 ? &x->m : &x->v; }

/* The fp32 gradient of this rank's shard (the host step's tiles: never g16, which is stage 0) */
static float *grad_src(zinf_zero *z, zunit *x)
{
    return z->stage >= 2 ? x->gacc : acc01(z, x) + x->off;
}

static int wait_reqs(zinf_swap *const *sw, zinf_swap_req **rq, int n)
{
    int rc = 0;
    for (int i = 0; i < n; i++)
        if (rq[i]) {
            int r = zinf_swap_wait(sw[i], rq[i]);
            if (!rc) rc = r;
            rq[i] = NULL;
        }
    return rc;
}

static int tile_read(zinf_zero *z, const htile *t, hset *h)
{
    zunit *x = &z->u[t->u];
    if (x->opt_at != ZINF_AT_NVME) return 0;
    for (int i = 0; i < 3; i++) {
        zstate *st = opt_state(x, i);
        if (!h->b[i]) ZINF_TRY(zinf_swap_buf_get(z->swap_opt, (void **)&h->b[i]));
        h->sw[i] = st->sw;
        ZINF_TRY(zinf_swap_submit(st->sw, ZINF_SWAP_READ, &st->r, t->k0 * 4, h->b[i], (size_t)t->len * 4, &h->rd[i]));
    }
    return 0;
}

/* the tile's gradient down into pinned buffer `slot` (a unit's first tile waits for the last
 * write of its gradient on the compute stream) */
static int tile_down(zinf_zero *z, const htile *t, int slot)
{
    zunit *x = &z->u[t->u];
    int rc = t->k0 ? 0 : z->be->stream_wait(z->be, z->s_down, z->gev[t->u]);
    if (!rc) rc = z->be->copy(z->be, z->gbuf[slot], grad_src(z, x) + t->k0, (size_t)t->len * 4, z->s_down);
    if (!rc) rc = z->be->event_record(z->be, z->ev_down[slot], z->s_down);
    return rc;
}

/* Unit u's gradient is final: its tiles join the host step's list, after an event on the compute
 * stream that its first copy down waits for. */
static int tiles_add(zinf_zero *z, int u)
{
    zunit *x = &z->u[u];
    int rc = z->gev ? z->be->event_record(z->be, z->gev[u], NULL) : 0;
    if (z->ov.th_on) pthread_mutex_lock(&z->ov.mu);
    if (!rc && !z->tl_unit[u]) {
        for (int64_t k0 = 0; k0 < x->p; k0 += z->tile)
            z->tl[z->nt++] = (htile){u, k0, x->p - k0 < z->tile ? x->p - k0 : z->tile};
        z->tl_unit[u] = true;
    }
    if (z->ov.th_on) {
        pthread_cond_broadcast(&z->ov.cv);
        pthread_mutex_unlock(&z->ov.mu);
    }
    return rc;
}

/* The step's tile list emptied, once its update has ended. */
static void tiles_clear(zinf_zero *z)
{
    z->nt = 0;
    memset(z->tl_unit, 0, (size_t)z->nunits * sizeof *z->tl_unit);
}

/* Whether tile i is in the list. `live`: the list still grows (the overlapped step); with
 * `wait`, wait until tile i is listed or the list is closed. Listed tiles never change. */
static bool tile_avail(zinf_zero *z, int i, bool live, bool wait)
{
    if (!live) return i < z->nt;
    pthread_mutex_lock(&z->ov.mu);
    while (wait && i >= z->nt && !z->ov.closed) pthread_cond_wait(&z->ov.cv, &z->ov.mu);
    bool ok = i < z->nt;
    pthread_mutex_unlock(&z->ov.mu);
    return ok;
}

static int event_wait(zinf_backend *be, zinf_event *e)
{
    int d;
    while ((d = be->event_query(be, e)) == 0) sched_yield();
    return d < 0 ? zinf_errc(ZINF_EIO, "a copy between the device and the host failed") : 0;
}

static int host_step(zinf_zero *z, const zinf_adamw_args *a0, double weight_decay, bool live, zinf_zero_times *tt)
{
    zinf_backend *be = z->be;
    bool dev = !be->host_visible;
    hset set[3];
    memset(set, 0, sizeof set);
    int D = z->depth, rc = 0, ndown = 0; /* ndown: tiles whose gradient copy has been issued */
    bool pr = z->cfg->offload_optimizer.pipeline_read, pw = z->cfg->offload_optimizer.pipeline_write;
    if (!tile_avail(z, 0, live, true)) return 0;
    const htile *tl = z->tl;
    /* a live list holds no NVMe states (ov.able), so only the copies down look ahead there */
    rc = tile_read(z, &tl[0], &set[0]);
    for (int i = 0; !rc && tile_avail(z, i, live, true); i++) {
        const htile *t = &tl[i];
        zunit *x = &z->u[t->u];
        hset *h = &set[i % D];
        int slot = i & 1;
        bool next = tile_avail(z, i + 1, live, false);
        if (dev && ndown == i && (rc = tile_down(z, t, slot))) break;
        ndown += dev && ndown == i;
        /* ahead: the next tile's gradient, and its NVMe states with pipeline_read */
        if (dev && next && (rc = tile_down(z, &tl[i + 1], slot ^ 1))) break;
        ndown += dev && next;
        if (pr && next) {
            hset *hn = &set[(i + 1) % D];
            double tw0 = zinf_now();
            rc = wait_reqs(hn->sw, hn->wr, 3); /* its buffers' last writes */
            tt->host_io_wait += zinf_now() - tw0;
            if (rc || (rc = tile_read(z, &tl[i + 1], hn))) break;
        }
        double tw = zinf_now();
        if (x->opt_at == ZINF_AT_NVME && (rc = wait_reqs(h->sw, h->rd, 3))) break;
        double tc = zinf_now();
        tt->host_io_wait += tc - tw;
        if (dev && (rc = event_wait(be, z->ev_down[slot]))) break;
        tt->host_copy_wait += zinf_now() - tc;
        const float *g = dev ? z->gbuf[slot] : grad_src(z, x) + t->k0;
        float *st[3];
        for (int j = 0; j < 3; j++)
            st[j] = x->opt_at == ZINF_AT_NVME ? h->b[j] : (float *)opt_state(x, j)->p + t->k0;
        /* where the updated 16-bit parameters go */
        zinf_at pat = z->stage == 3 ? x->pshard.at : ZINF_AT_DEVICE;
        char *pdev = z->stage == 3 ? (char *)x->pshard.p : (char *)x->full + (size_t)x->off * z->es;
        void *p16 = NULL;
        if (x->master_alias) p16 = NULL;
        else if (pat == ZINF_AT_HOST || (pat == ZINF_AT_DEVICE && !dev)) p16 = pdev + (size_t)t->k0 * z->es;
        else {
            double tu = zinf_now();
            if (dev && z->up_pending[slot] && (rc = event_wait(be, z->ev_up[slot]))) break;
            tt->host_copy_wait += zinf_now() - tu;
            z->up_pending[slot] = false;
            p16 = z->pbuf[slot];
        }
        /* AdamW over the tensor pieces of [k0, k0+len) (a tensor's weight decay is its own), in
         * one parallel region */
        const zinf_unit *un = &z->m->units[t->u];
        int64_t lo = x->off + t->k0, hi = lo + t->len;
        if (hi > x->n) hi = x->n;
        zinf_adamw_piece pc[ZINF_MAX_UNIT_TENSORS];
        int npc = 0;
        for (int k = 0; k < un->ntensors; k++) {
            int64_t tlo = un->t[k].offset, thi = tlo + un->t[k].numel;
            int64_t a_ = lo > tlo ? lo : tlo, b_ = hi < thi ? hi : thi;
            if (a_ >= b_) continue;
            int64_t j = a_ - lo;
            pc[npc++] = (zinf_adamw_piece){st[0] + j, p16 ? (char *)p16 + (size_t)j * z->es : NULL, g + j, st[1] + j,
                                           st[2] + j, b_ - a_, un->t[k].decay ? (float)weight_decay : 0.0f};
        }
        double ta = zinf_now();
        zinf_cpu_adamw_pieces(pc, npc, be->cdt, a0);
        /* read by the main thread while the overlapped step runs (host_update) */
        double adam = tt->host_adam + (zinf_now() - ta);
        __atomic_store(&tt->host_adam, &adam, __ATOMIC_RELAXED);
        /* out: parameters up or to NVMe, NVMe states back */
        if (p16 == z->pbuf[slot] && p16) {
            if (pat == ZINF_AT_NVME) {
                rc = zinf_swap_write(x->pshard.sw, &x->pshard.r, t->k0 * (int64_t)z->es, p16,
                                     (size_t)t->len * z->es);
            } else {
                rc = be->copy(be, pdev + (size_t)t->k0 * z->es, p16, (size_t)t->len * z->es, z->s_up);
                if (!rc) rc = be->event_record(be, z->ev_up[slot], z->s_up);
                z->up_pending[slot] = true;
            }
            if (rc) break;
        }
        /* on the thread, a unit's last tile releases it to the passes that wait for it (update_gate):
         * its copies up are ordered before uev on s_up, its gradient's copies down have completed */
        if (live && t->k0 + t->len == x->p) {
            bool up = dev && p16 && p16 == z->pbuf[slot] && pat != ZINF_AT_NVME;
            if (up && (rc = be->event_record(be, z->ov.uev[t->u], z->s_up))) break;
            pthread_mutex_lock(&z->ov.mu);
            z->ov.uev_rec[t->u] = up;
            z->ov.unit_done[t->u] = true;
            pthread_cond_broadcast(&z->ov.cv);
            pthread_mutex_unlock(&z->ov.mu);
        }
        if (x->opt_at == ZINF_AT_NVME) {
            for (int j = 0; j < 3 && !rc; j++) {
                zstate *s3 = opt_state(x, j);
                h->sw[j] = s3->sw;
                rc = zinf_swap_submit(s3->sw, ZINF_SWAP_WRITE, &s3->r, t->k0 * 4, h->b[j], (size_t)t->len * 4,
                                      &h->wr[j]);
            }
            double tw2 = zinf_now();
            if (!rc && !pw) rc = wait_reqs(h->sw, h->wr, 3);
            tt->host_io_wait += zinf_now() - tw2;
        }
        /* without pipeline_read the next tile's states are read only now */
        if (!rc && !pr && next) {
            hset *hn = &set[(i + 1) % D];
            double tw0 = zinf_now();
            rc = wait_reqs(hn->sw, hn->wr, 3);
            tt->host_io_wait += zinf_now() - tw0;
            if (!rc) rc = tile_read(z, &tl[i + 1], hn);
        }
    }
    /* drain: every read and write, every copy */
    double td = zinf_now();
    for (int k = 0; k < 3; k++) {
        if (!z->swap_opt) break;
        int r1 = wait_reqs(set[k].sw, set[k].rd, 3), r2 = wait_reqs(set[k].sw, set[k].wr, 3);
        if (!rc) rc = r1 ? r1 : r2;
        for (int j = 0; j < 3; j++)
            if (set[k].b[j]) zinf_swap_buf_put(z->swap_opt, set[k].b[j]);
    }
    tt->host_io_wait += zinf_now() - td;
    if (dev) {
        int r1 = be->stream_sync(be, z->s_up), r2 = be->stream_sync(be, z->s_down);
        if (!rc) rc = r1 ? r1 : r2;
        z->up_pending[0] = z->up_pending[1] = false;
    }
    return rc;
}

/* The OpenMP team of the host step, out of the rank's nth threads: one fewer during the backward
 * pass (the main thread keeps the device fed meanwhile), and on a device backend after it too: the
 * rank's other threads (the CUDA driver's, NCCL's proxy, MPI's progress) then have a core,
 * instead of preempting the team's threads, whose parallel regions wait for the last (two ranks of
 * 32 cores on a 4xH200 node, 2026-11-28: AdamW 659 ms with 32 threads a rank, 353 ms with 31, 447
 * with 16). AdamW is elementwise: the team's size changes no result. */
static int host_team(const zinf_zero *z, int nth, bool during_backward)
{
    return (during_backward || !z->be->host_visible) && nth > 2 ? nth - 1 : nth;
}

/* The thread of the overlapped host step: one host_step per armed step, on a list that grows as
 * the backward pass finishes units. */
static void *ov_main(void *arg)
{
    zinf_zero *z = arg;
    const int nth = host_team(z, z->ov.nth, true);
    omp_set_num_threads(nth);
    pthread_mutex_lock(&z->ov.mu);
    for (;;) {
        while (!z->ov.run && !z->ov.quit) pthread_cond_wait(&z->ov.cv, &z->ov.mu);
        if (z->ov.quit) break;
        z->ov.run = false;
        z->ov.t.host_threads = nth; /* the main thread reads it after the step (ov.mu orders it) */
        zinf_adamw_args a = z->ov.a;
        double wd = z->ov.wd;
        pthread_mutex_unlock(&z->ov.mu);
        zinf_err_clear();
        int rc = host_step(z, &a, wd, true, &z->ov.t);
        pthread_mutex_lock(&z->ov.mu);
        z->ov.rc = rc;
        if (rc) snprintf(z->ov.msg, sizeof z->ov.msg, "%s", zinf_errmsg());
        z->ov.done = true;
        pthread_cond_broadcast(&z->ov.cv);
    }
    pthread_mutex_unlock(&z->ov.mu);
    return NULL;
}

/* Start the host step on the thread (created on first use) over the tile list as it stands and as
 * it grows; `closed`: the list is complete already. */
static int ov_arm(zinf_zero *z, const zinf_adamw_args *a, double weight_decay, bool closed)
{
    if (!z->ov.th_on) {
        if (pthread_mutex_init(&z->ov.mu, NULL)) return zinf_errc(ZINF_ENOMEM, "cannot create a mutex");
        if (pthread_cond_init(&z->ov.cv, NULL)) {
            pthread_mutex_destroy(&z->ov.mu);
            return zinf_errc(ZINF_ENOMEM, "cannot create a condition variable");
        }
        z->ov.run = z->ov.quit = false;
        z->ov.nth = omp_get_max_threads(); /* what zinf_comm_log_placement may have lowered */
        if (pthread_create(&z->ov.th, NULL, ov_main, z)) {
            pthread_cond_destroy(&z->ov.cv);
            pthread_mutex_destroy(&z->ov.mu);
            return zinf_errc(ZINF_ENOMEM, "rank %d: cannot start the host step's thread", z->rank);
        }
        z->ov.th_on = true;
    }
    pthread_mutex_lock(&z->ov.mu);
    z->ov.a = *a;
    z->ov.wd = weight_decay;
    z->ov.closed = closed;
    z->ov.done = false;
    z->ov.rc = 0;
    memset(z->ov.unit_done, 0, (size_t)z->nunits * sizeof *z->ov.unit_done);
    z->ov.run = z->ov.armed = true;
    pthread_cond_broadcast(&z->ov.cv);
    pthread_mutex_unlock(&z->ov.mu);
    return 0;
}

/* The update under way on the thread, if any, is joined: its failure is returned, its times join
 * the step's (an update that ran on into a step's passes counts in that step's), its tile list is
 * emptied, and the accumulators it left to zero are zeroed. Every entry point that reads or writes
 * the states, or starts the next update, comes through here. */
static int update_settle(zinf_zero *z)
{
    if (!z->ov.armed) return 0;
    pthread_mutex_lock(&z->ov.mu);
    z->ov.closed = true; /* whatever is listed is all this update has */
    pthread_cond_broadcast(&z->ov.cv);
    while (!z->ov.done) pthread_cond_wait(&z->ov.cv, &z->ov.mu);
    pthread_mutex_unlock(&z->ov.mu);
    z->ov.armed = false;
    int rc = z->ov.rc ? zinf_errc(z->ov.rc, "%s", z->ov.msg) : 0;
    z->t.host_adam += z->ov.t.host_adam;
    z->t.host_copy_wait += z->ov.t.host_copy_wait;
    z->t.host_io_wait += z->ov.t.host_io_wait;
    z->t.host_units += z->ov.t.host_units;
    z->t.host_units_early += z->ov.t.host_units_early;
    z->t.host_adam_early += z->ov.t.host_adam_early;
    z->t.host_threads = z->ov.t.host_threads;
    z->t.host_into_next += z->ov.async;
    memset(&z->ov.t, 0, sizeof z->ov.t);
    z->ov.async = false;
    tiles_clear(z);
    for (int u = 0; u < z->nunits; u++) {
        zunit *x = &z->u[u];
        x->upd_wait = false;
        if (x->gacc_zero && !rc) rc = z->be->memset0(z->be, x->gacc, (size_t)x->p * 4, NULL);
        x->gacc_zero = false;
    }
    return rc;
}

/* Stage 3, the update running on into the passes: unit u may be gathered once its update is done.
 * The compute stream then waits for its copies up, and its gradient accumulator (copied down by
 * then) is zeroed for the step under way. `wait` false: 1 when ready, 0 when not yet. */
static int update_gate(zinf_zero *z, int u, bool wait)
{
    zunit *x = &z->u[u];
    if (!x->upd_wait) return 1;
    double t0 = zinf_now();
    pthread_mutex_lock(&z->ov.mu);
    while (wait && !z->ov.unit_done[u] && !z->ov.done) pthread_cond_wait(&z->ov.cv, &z->ov.mu);
    bool ready = z->ov.unit_done[u], rec = z->ov.uev_rec[u];
    pthread_mutex_unlock(&z->ov.mu);
    z->t.update_wait += zinf_now() - t0;
    if (!ready && !wait) return 0;
    if (!ready) { /* the update ended without this unit: its failure */
        int rc = update_settle(z);
        return rc ? rc : zinf_errc(ZINF_EINVAL, "internal: the host update ended without unit %s", z->m->units[u].name);
    }
    x->upd_wait = false;
    if (rec) ZINF_TRY(z->be->stream_wait(z->be, NULL, z->ov.uev[u]));
    if (x->gacc_zero) ZINF_TRY(z->be->memset0(z->be, x->gacc, (size_t)x->p * 4, NULL));
    x->gacc_zero = false;
    return 1;
}

int zinf_zero_overlap_step(zinf_zero *z, const zinf_adamw_args *a, double weight_decay)
{
    if (!z->ov.able) return 0;
    ZINF_TRY(update_settle(z));
    ZINF_TRY(ov_arm(z, a, weight_decay, false));
    return 1;
}

/* This step's host update: on the thread, under way since the backward pass, or started now. At
 * stage 3 (ov.into_next) it runs on into the next step's passes, each of which waits only for the
 * units it uses (update_gate); otherwise it is finished here. The offloaded units not yet listed
 * are listed now, in unit order: the order the next forward uses them. */
static int host_update(zinf_zero *z, const zinf_adamw_args *a, double weight_decay)
{
    int rc = 0;
    if (!z->tl) return 0;
    int listed = 0, host = 0;
    for (int u = 0; u < z->nunits; u++) {
        listed += z->tl_unit[u];
        host += z->u[u].opt_at != ZINF_AT_DEVICE;
    }
    /* counted with the update's other times: those of one on the thread join z->t with it */
    zinf_zero_times *tt = z->ov.armed || z->ov.into_next ? &z->ov.t : &z->t;
    tt->host_units += host;
    tt->host_units_early += listed; /* listed during the passes (only this thread lists units) */
    if (z->ov.armed) {
        double adam;
        __atomic_load(&z->ov.t.host_adam, &adam, __ATOMIC_RELAXED);
        tt->host_adam_early += adam;
        if (memcmp(a, &z->ov.a, sizeof *a) || weight_decay != z->ov.wd)
            rc = zinf_errc(ZINF_EINVAL, "internal: the step's optimizer arguments changed after its update began");
    }
    for (int u = 0; u < z->nunits && !rc; u++)
        if (z->u[u].opt_at != ZINF_AT_DEVICE && !z->tl_unit[u]) rc = tiles_add(z, u);
    if (!rc && !z->ov.armed && z->ov.into_next) rc = ov_arm(z, a, weight_decay, true);
    if (!rc && z->ov.armed && z->ov.into_next) {
        pthread_mutex_lock(&z->ov.mu);
        z->ov.closed = true;
        pthread_cond_broadcast(&z->ov.cv);
        pthread_mutex_unlock(&z->ov.mu);
        z->ov.async = true;
        for (int u = 0; u < z->nunits; u++) z->u[u].upd_wait = z->u[u].opt_at != ZINF_AT_DEVICE;
        return 0;
    }
    if (z->ov.armed) {
        int r = update_settle(z);
        return rc ? rc : r;
    }
    if (!rc) {
        int nth = omp_get_max_threads(), team = host_team(z, nth, false);
        if (team != nth) omp_set_num_threads(team);
        z->t.host_threads = team;
        rc = host_step(z, a, weight_decay, false, &z->t);
        if (team != nth) omp_set_num_threads(nth);
    }
    tiles_clear(z);
    return rc;
}

int zinf_zero_step(zinf_zero *z, const zinf_adamw_args *a0, double weight_decay)
{
    double t0 = zinf_now();
    if (z->ov.async) ZINF_TRY(update_settle(z)); /* the last step's, if still under way */
    zinf_adamw_args a = *a0;
    /* One AdamW call per tensor piece of the shard (a tensor's decay is its own). DeepSpeed's
     * sub_group_size groups whole parameters and never splits one, and AdamW is elementwise, so
     * on the device the grouping changes no result; it sizes the offloaded optimizer's tiles. */
    for (int u = 0; u < z->nunits; u++) {
        zunit *x = &z->u[u];
        if (x->opt_at != ZINF_AT_DEVICE) continue; /* host_step's */
        const zinf_unit *un = &z->m->units[u];
        /* the shard's gradient: fp32, or the 16-bit one itself (g16: stage 0, so off is 0) */
        const char *g = z->g16 ? (const char *)x->gfull : (const char *)grad_src(z, x);
        const zinf_dtype gdt = z->g16 ? z->be->cdt : ZINF_F32;
        const size_t gsz = zinf_dtype_size(gdt);
        char *pstore = z->stage == 3 ? (char *)x->pshard.p : (char *)x->full + (size_t)x->off * z->es;
        /* a parameter shard the device cannot write (host memory of a device backend, NVMe): the
         * updated parameters go through device staging and are copied out after the unit */
        zinf_at pat = z->stage == 3 ? x->pshard.at : ZINF_AT_DEVICE;
        char *stage = NULL;
        if (!x->master_alias && pat != ZINF_AT_DEVICE && !(pat == ZINF_AT_HOST && z->be->host_visible)) {
            stage = zalloc(z, ZINF_MEM_COMM, x->p * (int64_t)z->es);
            if (!stage) return NOMEM(z, "the updated parameters' staging", u);
            pstore = stage;
        }
        /* this rank's range of the unit, cut by tensor (decay or not) */
        int64_t lo = x->off, hi = x->off + x->p < x->n ? x->off + x->p : x->n;
        for (int t = 0; t < un->ntensors; t++) {
            int64_t tlo = un->t[t].offset, thi = tlo + un->t[t].numel;
            int64_t a_ = lo > tlo ? lo : tlo, b_ = hi < thi ? hi : thi;
            a.weight_decay = un->t[t].decay ? (float)weight_decay : 0.0f;
            if (a_ >= b_) continue;
            int64_t k = a_ - x->off;
            z->be->adamw(z->be, (float *)x->master.p + k, x->master_alias ? NULL : pstore + (size_t)k * z->es,
                         g + (size_t)k * gsz, gdt, (float *)x->m.p + k, (float *)x->v.p + k, b_ - a_, &a);
        }
        if (stage) {
            size_t bytes = (size_t)x->p * z->es;
            int rc = 0;
            if (pat == ZINF_AT_HOST) rc = z->be->copy(z->be, x->pshard.p, stage, bytes, NULL);
            else if (z->be->host_visible) rc = zinf_swap_write(x->pshard.sw, &x->pshard.r, 0, stage, bytes);
            else {
                rc = z->be->copy(z->be, z->parbuf, stage, bytes, NULL);
                if (!rc) rc = z->be->sync(z->be);
                if (!rc) rc = zinf_swap_write(x->pshard.sw, &x->pshard.r, 0, z->parbuf, bytes);
            }
            if (!rc) rc = z->be->sync(z->be);
            zfree(z, ZINF_MEM_COMM, stage, x->p * (int64_t)z->es);
            ZINF_TRY(rc);
        }
    }
    ZINF_TRY(host_update(z, a0, weight_decay));
    ZINF_TRY(z->be->sync(z->be));
    if (z->stage == 1 || z->stage == 2) ZINF_TRY(allgather_params(z));
    if (z->stage == 3)
        for (int u = 0; u < z->nunits; u++)
            if (z->u[u].persistent) ZINF_TRY(release_unit(z, u)); /* stale: gathered again on use */
    z->t.optimizer += zinf_now() - t0;
    return 0;
}

/* ---------------------------------------------------------------- reports ------------------ */
void zinf_zero_mem(const zinf_zero *z, zinf_mem_report *r)
{
    memset(r, 0, sizeof *r);
    for (int k = 0; k < ZINF_MEM_NKINDS; k++) {
        r->at[ZINF_AT_DEVICE][k] = z->mem[k];
        r->at[ZINF_AT_HOST][k] = z->mem_at[ZINF_AT_HOST][k];
        r->at[ZINF_AT_NVME][k] = z->mem_at[ZINF_AT_NVME][k];
        r->bytes[k] = z->mem[k] + z->mem_at[ZINF_AT_HOST][k] + z->mem_at[ZINF_AT_NVME][k];
    }
    r->total = z->mem_total;
    r->peak = z->mem_peak;
    r->live_max_beyond_current = z->live_max_beyond;
    r->reduce_peak = z->rs_peak * (int64_t)z->es;
}

void zinf_zero_event_times(zinf_zero *z, bool count)
{
    for (int k = 0; z->stall && k < z->nseq_full; k++) {
        if (!z->stall_used[k]) continue;
        double ms = z->be->event_elapsed_ms(z->be, z->stall[2 * k], z->stall[2 * k + 1]);
        if (count && ms > 0) z->t.gather_stall_dev += 1e-3 * ms;
        z->stall_used[k] = false;
    }
}

void zinf_zero_times_take(zinf_zero *z, zinf_zero_times *t)
{
    *t = z->t;
    t->wait = z->comm->wait_s - z->wait0;
    memset(&z->t, 0, sizeof z->t);
    z->wait0 = z->comm->wait_s;
}

void zinf_zero_print_mem(const zinf_zero *z)
{
    static const char *names[ZINF_MEM_NKINDS] = {"parameters (full)", "parameter shard", "gradients (full)",
                                                 "gradient accumulators", "fp32 master", "Adam m+v",
                                                 "communication buffers", "offload staging"};
    static const char *places[ZINF_AT_N] = {"device", "host", "NVMe"};
    char line[1024];
    int n = snprintf(line, sizeof line, "memory on rank 0 (ZeRO stage %d, world %d):", z->stage, z->W);
    for (int at = 0; at < ZINF_AT_N; at++) {
        const int64_t *b = at == ZINF_AT_DEVICE ? z->mem : z->mem_at[at];
        int64_t sum = 0;
        for (int k = 0; k < ZINF_MEM_NKINDS; k++) sum += b[k];
        if (at != ZINF_AT_DEVICE && !sum) continue;
        if (n < (int)sizeof line) n += snprintf(line + n, sizeof line - (size_t)n, "%s %s:", at ? " |" : "", places[at]);
        for (int k = 0; k < ZINF_MEM_NKINDS; k++)
            if (b[k] && n < (int)sizeof line)
                n += snprintf(line + n, sizeof line - (size_t)n, " %s %.2f MiB;", names[k], (double)b[k] / 1048576.0);
    }
    if (z->cached && n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, " allocator cache %.2f MiB;", (double)z->cached / 1048576.0);
    if (n < (int)sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, " device peak %.2f MiB%s", (double)z->mem_peak / 1048576.0,
                 /* the CPU backend's device is the host: said so */
                 strcmp(z->be->name, "cpu") ? "" : " (the CPU backend's device memory is host memory)");
    zinf_info("%s", line);
    size_t pinned = 0;
    if (z->swap_opt) pinned += zinf_swap_pinned_bytes(z->swap_opt);
    if (z->swap_par) pinned += zinf_swap_pinned_bytes(z->swap_par);
    if (pinned) zinf_info("NVMe swap pools hold %.2f MiB of host buffers on rank 0 (page-locked when registered with io_uring)", (double)pinned / 1048576.0);
}

int zinf_zero_get_params(zinf_zero *z, int u, float *out)
{
    ZINF_TRY(update_settle(z));
    zunit *x = &z->u[u];
    zinf_backend *be = z->be;
    void *full = x->full;
    int rc = 0;
    if (z->stage == 3) {
        full = be->alloc(be, ZINF_PLACE_DEVICE, (size_t)x->pn * z->es);
        if (!full)
            return zinf_errc(ZINF_ENOMEM, "out of device memory (%.1f MiB) for the parameter check of unit %d",
                             (double)x->pn * (double)z->es / 1048576.0, u);
        zinf_req rq;
        const void *send;
        rc = shard_source(z, u, full, &send);
        if (!rc) rc = zinf_comm_iallgather(z->comm, send, full, x->p, be->cdt, &rq, "all-gather for a parameter check");
        if (!rc) rc = zinf_comm_wait(z->comm, &rq);
    }
    /* 16-bit values widen to fp32 in pieces of at most 16M elements: the device memory left at
     * the end of a run need not hold a whole unit in fp32 (an 8B's embedding is 2.1 GB) */
    const int64_t piece = z->f32 ? x->n : (x->n < ((int64_t)1 << 24) ? x->n : ((int64_t)1 << 24));
    float *f = z->f32 ? full : be->alloc(be, ZINF_PLACE_DEVICE, (size_t)piece * 4);
    if (!rc && !f)
        rc = zinf_errc(ZINF_ENOMEM, "out of device memory (%.1f MiB) for the parameter check of unit %d",
                       (double)piece * 4 / 1048576.0, u);
    for (int64_t k = 0; !rc && k < x->n; k += piece) {
        int64_t m = x->n - k < piece ? x->n - k : piece;
        if (!z->f32) be->to_f32(be, f, (const char *)full + (size_t)k * z->es, m);
        rc = be->copy(be, out + k, z->f32 ? f + k : f, (size_t)m * 4, NULL);
        if (!rc) rc = be->sync(be);
    }
    if (f && f != full) be->free(be, ZINF_PLACE_DEVICE, f);
    if (z->stage == 3 && full) be->free(be, ZINF_PLACE_DEVICE, full);
    return rc;
}

/* ---------------------------------------------------------------- checkpoints -------------- */
void zinf_zero_ckpt_range(const zinf_zero *z, int u, bool writer, int64_t *lo, int64_t *len)
{
    const zunit *x = &z->u[u];
    int64_t a = x->off, b = x->off + x->p < x->n ? x->off + x->p : x->n;
    if (z->stage == 0 && writer && z->rank != 0) b = a; /* every rank holds all: rank 0 writes */
    *lo = a;
    *len = b > a ? b - a : 0;
}

/* memcpy over the host's cores in pieces of 4 MiB: an 8B's states are 96 GB, and one thread
 * copies a few GB/s (the loads of a checkpoint or of --init_from move them all) */
static void par_copy(void *dst, const void *src, size_t bytes)
{
    const size_t piece = (size_t)4 << 20;
    int64_t n = (int64_t)((bytes + piece - 1) / piece);
#pragma omp parallel for schedule(static) if (n > 1)
    for (int64_t i = 0; i < n; i++) {
        size_t at = (size_t)i * piece, m = bytes - at < piece ? bytes - at : piece;
        if (src) memcpy((char *)dst + at, (const char *)src + at, m);
        else memset((char *)dst + at, 0, m);
    }
}

/* Move `len` fp32 elements at element `k0` of state s between the host buffer and the state's
 * place (to the state when `put`). */
static int state_move(zinf_zero *z, zstate *s, int64_t k0, int64_t len, float *buf, bool put)
{
    size_t bytes = (size_t)len * 4;
    if (!len) return 0;
    if (s->at == ZINF_AT_NVME)
        return put ? zinf_swap_write(s->sw, &s->r, k0 * 4, buf, bytes) : zinf_swap_read(s->sw, &s->r, k0 * 4, buf, bytes);
    float *p = (float *)s->p + k0;
    if (s->at == ZINF_AT_HOST || z->be->host_visible) {
        if (put) par_copy(p, buf, bytes);
        else par_copy(buf, p, bytes);
        return 0;
    }
    ZINF_TRY(put ? z->be->copy(z->be, p, buf, bytes, NULL) : z->be->copy(z->be, buf, p, bytes, NULL));
    return z->be->sync(z->be);
}

static zstate *ckpt_state(zunit *x, zinf_ckpt_state k)
{
    return k == ZINF_CKPT_MASTER ? &x->master : k == ZINF_CKPT_ADAM_M ? &x->m : &x->v;
}

int zinf_zero_ckpt_get(zinf_zero *z, int u, zinf_ckpt_state k, float *buf)
{
    ZINF_TRY(update_settle(z));
    int64_t lo, len;
    zinf_zero_ckpt_range(z, u, false, &lo, &len);
    return state_move(z, ckpt_state(&z->u[u], k), lo - z->u[u].off, len, buf, false);
}

int zinf_zero_ckpt_set(zinf_zero *z, int u, zinf_ckpt_state k, const float *buf)
{
    ZINF_TRY(update_settle(z));
    int64_t lo, len;
    zinf_zero_ckpt_range(z, u, false, &lo, &len);
    return state_move(z, ckpt_state(&z->u[u], k), lo - z->u[u].off, len, (float *)buf, true);
}

/* After the masters were set: every parameter store from its master, rounded to the compute
 * dtype as the AdamW kernels round (the 16-bit parameters are always the rounded masters), then
 * made visible as a step makes them. `tmp`: room for the largest shard in fp32. */
int zinf_zero_ckpt_params_from_master(zinf_zero *z)
{
    ZINF_TRY(update_settle(z));
    zinf_backend *be = z->be;
    int64_t maxp = 0;
    for (int u = 0; u < z->nunits; u++) maxp = z->u[u].p > maxp ? z->u[u].p : maxp;
    float *tmp = malloc((size_t)maxp * 4);
    uint16_t *h16 = malloc((size_t)maxp * 2);
    if (!tmp || !h16) {
        free(tmp);
        free(h16);
        return zinf_errc(ZINF_ENOMEM, "out of host memory");
    }
    int rc = 0;
    for (int u = 0; u < z->nunits && !rc; u++) {
        zunit *x = &z->u[u];
        if (x->master_alias) continue; /* the master is the parameter store */
        int64_t lo, len;
        zinf_zero_ckpt_range(z, u, false, &lo, &len);
        rc = zinf_zero_ckpt_get(z, u, ZINF_CKPT_MASTER, tmp);
        if (rc) break;
        const void *src = tmp;
        if (!z->f32) {
            bool bf = be->cdt == ZINF_BF16;
#pragma omp parallel for schedule(static) if (len > 65536)
            for (int64_t i = 0; i < len; i++) h16[i] = bf ? zinf_f32_to_bf16(tmp[i]) : zinf_f32_to_f16(tmp[i]);
            src = h16;
        }
        size_t bytes = (size_t)len * z->es;
        if (z->stage == 3 && x->pshard.at == ZINF_AT_NVME) {
            rc = zinf_swap_write(x->pshard.sw, &x->pshard.r, 0, src, bytes);
        } else {
            char *dst = z->stage == 3 ? (char *)x->pshard.p : (char *)x->full + (size_t)lo * z->es;
            if (be->host_visible || (z->stage == 3 && x->pshard.at == ZINF_AT_HOST)) memcpy(dst, src, bytes);
            else if (!(rc = be->copy(be, dst, src, bytes, NULL))) rc = be->sync(be);
        }
    }
    free(tmp);
    free(h16);
    if (!rc && (z->stage == 1 || z->stage == 2)) rc = allgather_params(z);
    if (!rc && z->stage == 3)
        for (int u = 0; u < z->nunits && !rc; u++)
            if (z->u[u].persistent) rc = release_unit(z, u); /* gathered again on use */
    if (!rc) rc = be->sync(be);
    return rc;
}
