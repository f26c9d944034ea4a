/* ZeRO stages 0-3 on the collectives API (see zero.h for what each stage does). */
#include "zero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "log.h"

typedef struct zunit {
    int64_t n, pn, p, off;  /* numel, padded numel, shard size, this rank's shard start */
    void *full;             /* full parameters (pn); stage 3: only while gathered */
    void *pshard;           /* stage 3: this rank's parameter shard (p) */
    void *gfull;            /* full compute-dtype gradient (pn); transient unless it is the
                               fp32 accumulator itself (stages 0-1 with fp32 compute) */
    float *gacc;            /* fp32 gradient accumulator: the shard (p) at stages 2-3, the whole
                               unit (pn) at stages 0-1 with 16-bit compute */
    bool gacc_stale;        /* stages 0-1: gacc holds the last step's sum; the step's first
                               micro-step overwrites it instead of zeroing and adding */
    float *master, *m, *v;  /* fp32 optimizer states of the shard (p) */
    bool master_owned;      /* false when master aliases the fp32 parameter shard */
    int state;              /* stage 3: 0 released, 1 gather in flight, 2 gathered */
    bool persistent;        /* stage 3: at or below the persistence threshold: kept gathered */
    zinf_req greq;
} zunit;

typedef struct pending {
    zinf_req q;
    int u;
    void *stage, *recv;     /* reduce-scatter staging (W x len) and result (len), compute dtype */
    int64_t dst, len;       /* into gacc[dst .. dst+len) */
    int64_t stage_bytes;
} pending;

typedef struct use { int u, phase; } use;

struct zinf_zero {
    zinf_model *m;
    const zinf_config *cfg;
    zinf_comm *comm;
    zinf_backend *be;
    int stage, W, rank, nunits;
    size_t es;              /* bytes per element of the compute dtype */
    bool f32;               /* compute dtype is fp32: masters alias parameters, gradients
                               accumulate in place */
    zunit *u;
    zinf_unit_hooks hooks;
    /* reductions in flight */
    pending *pend;
    int npend, cappend;
    bool last_micro;        /* the pass in progress is the last micro-step of the step */
    /* stage-3 plan */
    use *seq;
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
    /* memory */
    int64_t mem[ZINF_MEM_NKINDS], mem_total, mem_peak;
    /* device backends: freed transient blocks kept for reuse by size (cudaMalloc/cudaFree in the
     * step would synchronise the device every time) */
    bool caching;
    struct { void *p; int64_t bytes; } *cache;
    int ncache, capcache;
    int64_t cached;
    zinf_zero_times t;
    double wait0;
    float pre, post;        /* stages 0-1: gradient averaging factors around the fp32 all-reduce */
    float rs_pre, rs_post;  /* stages 2-3: around the compute-dtype reduce-scatter */
    const float **norm_x;   /* zinf_zero_reduce: each unit's gradient (or shard) for sumsq */
    int64_t *norm_n;
};

/* ---------------------------------------------------------------- memory ------------------- */
/* Zeroed when freshly allocated; a block reused from the cache is zeroed for gradients only
 * (parameters and staging are overwritten whole). */
static void *zalloc(zinf_zero *z, zinf_mem_kind k, int64_t bytes)
{
    void *p = NULL;
    for (int i = 0; z->caching && i < z->ncache; i++) {
        if (z->cache[i].bytes != bytes) continue;
        p = z->cache[i].p;
        z->cache[i] = z->cache[--z->ncache];
        z->cached -= bytes;
        if (k == ZINF_MEM_GRAD && z->be->memset0(z->be, p, (size_t)bytes, NULL)) {
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

#define NOMEM(z, what, u)                                                                         \
    zinf_errc(ZINF_ENOMEM, "rank %d: cannot allocate %s of unit %s", (z)->rank, (what),          \
              (z)->m->units[(u)].name)

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

static void finish_pending(zinf_zero *z, pending *p)
{
    if (p->recv) {
        z->be->acc_f32(z->be, z->u[p->u].gacc + p->dst, p->recv, p->len, z->rs_post);
        zfree(z, ZINF_MEM_COMM, p->stage, p->stage_bytes);
        zfree(z, ZINF_MEM_COMM, p->recv, p->len * (int64_t)z->es);
    }
}

/* Complete finished reductions (all of them when wait_all), in issue order. */
static int progress(zinf_zero *z, bool wait_all)
{
    int done = 0;
    for (int i = 0; i < z->npend; i++) {
        pending *p = &z->pend[i];
        if (wait_all) ZINF_TRY(zinf_comm_wait(z->comm, &p->q));
        else if (!zinf_comm_test(z->comm, &p->q)) break; /* keep the order: stop at the first running */
        finish_pending(z, p);
        done++;
    }
    if (done) {
        memmove(z->pend, z->pend + done, (size_t)(z->npend - done) * sizeof *z->pend);
        z->npend -= done;
    }
    return 0;
}

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
 * reduce_bucket_size elements (piece_len per rank), then drop the full gradient. */
static int reduce_scatter_unit(zinf_zero *z, int u)
{
    zunit *x = &z->u[u];
    char *g = x->gfull;
    size_t es = z->es;
    int64_t q = piece_len(z, u, z->cfg->reduce_bucket_size);
    for (int64_t lo = 0; lo < x->p; lo += q) {
        int64_t len = x->p - lo < q ? x->p - lo : q;
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
static int start_gather(zinf_zero *z, int u)
{
    zunit *x = &z->u[u];
    if (x->state) return 0;
    x->full = zalloc(z, ZINF_MEM_PARAM, x->pn * (int64_t)z->es);
    if (!x->full) return NOMEM(z, "gathered parameters", u);
    char what[160];
    snprintf(what, sizeof what, "all-gather of %s parameters", z->m->units[u].name);
    ZINF_TRY(zinf_comm_iallgather(z->comm, x->pshard, x->full, x->p, z->be->cdt, &x->greq, what));
    x->state = 1;
    if (!x->persistent) z->live += x->n;
    return 0;
}

/* k: the use in the stage-3 plan that needs unit u */
static int finish_gather(zinf_zero *z, int u, int k)
{
    zunit *x = &z->u[u];
    if (x->state == 1) {
        double t0 = zinf_now();
        zinf_event **ev = z->stall ? z->stall + 2 * k : NULL;
        if (ev) z->be->event_record(z->be, ev[0], NULL);
        ZINF_TRY(zinf_comm_wait(z->comm, &x->greq));
        if (ev) z->be->event_record(z->be, ev[1], NULL), z->stall_used[k] = true;
        z->t.gather += zinf_now() - t0;
        x->state = 2;
    }
    z->m->params[u] = x->full;
    return 0;
}

static int release_unit(zinf_zero *z, int u)
{
    zunit *x = &z->u[u];
    if (!x->state) return 0;
    if (x->state == 1) ZINF_TRY(zinf_comm_wait(z->comm, &x->greq));
    zfree(z, ZINF_MEM_PARAM, x->full, x->pn * (int64_t)z->es);
    x->full = NULL;
    x->state = 0;
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
            if (v == cur || z->u[v].persistent || z->u[v].state != 2) continue;
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
    for (int v = 0; v < z->nunits; v++) if (z->u[v].state == 1) inflight += z->u[v].n;
    for (int j = k + 1; j < z->nseq; j++) {
        int v = z->seq[j].u;
        zunit *x = &z->u[v];
        if (x->state) continue;
        if (inflight + x->n > cap) break;
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
    /* transient full gradients (all but stages 0-1 with fp32 compute) start at zero */
    if (phase == 1 && !x->gfull) {
        x->gfull = zalloc(z, ZINF_MEM_GRAD, x->pn * (int64_t)z->es);
        if (!x->gfull) return NOMEM(z, "the gradient", u);
        z->m->grads[u] = x->gfull;
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
    int rc = 0;
    if (z->stage >= 2) rc = reduce_scatter_unit(z, u);
    else {
        if (!z->f32) accumulate_unit(z, u);
        if (z->last_micro && z->cfg->overlap_comm) rc = allreduce_unit(z, u);
    }
    z->t.reduce += zinf_now() - t0;
    return rc;
}

const zinf_unit_hooks *zinf_zero_hooks(zinf_zero *z) { return &z->hooks; }

/* ---------------------------------------------------------------- plan --------------------- */
static int build_plan(zinf_zero *z)
{
    int L = z->m->c.n_layer, n = 0;
    z->nseq_full = 2 * (L + 3);
    z->seq = calloc((size_t)z->nseq_full, sizeof *z->seq);
    z->nextuse = calloc((size_t)z->nseq_full, sizeof(int));
    z->reuse_dist = calloc((size_t)z->nseq_full, sizeof(int64_t));
    if (!z->seq || !z->nextuse || !z->reuse_dist) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    /* the static order of zinf_model_forward/backward (model.h) */
    z->seq[n++] = (use){0, 0};
    for (int l = 0; l < L; l++) z->seq[n++] = (use){1 + l, 0};
    z->seq[n++] = (use){L + 1, 0};
    z->seq[n++] = (use){0, 0};
    z->nseq_fwd = n;
    z->seq[n++] = (use){0, 1};
    z->seq[n++] = (use){L + 1, 1};
    for (int l = L - 1; l >= 0; l--) z->seq[n++] = (use){1 + l, 1};
    z->seq[n++] = (use){0, 1};
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
    z->f32 = be->cdt == ZINF_F32;
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
    z->u = calloc((size_t)z->nunits, sizeof *z->u);
    z->norm_x = calloc((size_t)z->nunits, sizeof *z->norm_x);
    z->norm_n = calloc((size_t)z->nunits, sizeof *z->norm_n);
    if (!z->u || !z->norm_x || !z->norm_n) return zinf_errc(ZINF_ENOMEM, "out of host memory");

    int64_t maxpn = 0, persist_total = 0;
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
        if (z->stage == 3 && x->n <= cfg->stage3_param_persistence_threshold &&
            persist_total + x->n <= cfg->stage3_model_persistence_threshold) {
            x->persistent = true;
            persist_total += x->n;
        }
    }
    float *host = malloc((size_t)maxpn * sizeof(float));
    float *dtmp = z->f32 ? NULL : be->alloc(be, ZINF_PLACE_DEVICE, (size_t)maxpn * sizeof(float));
    if (!host || (!z->f32 && !dtmp)) {
        free(host);
        return zinf_errc(ZINF_ENOMEM, "out of memory for initialisation");
    }
    int rc = 0;
    size_t es = z->es;
    for (int u = 0; u < z->nunits && !rc; u++) {
        zunit *x = &z->u[u];
        /* parameters: the whole unit below stage 3, this rank's shard at stage 3; the values
         * come from the counter-based initialiser, so a shard is made without the rest */
        int64_t first = z->stage == 3 ? x->off : 0, count = z->stage == 3 ? x->p : x->pn;
        void **store = z->stage == 3 ? &x->pshard : &x->full;
        *store = zalloc(z, z->stage == 3 ? ZINF_MEM_PARAM_SHARD : ZINF_MEM_PARAM, count * (int64_t)es);
        if (!*store) { rc = NOMEM(z, "parameters", u); break; }
        zinf_model_init_params(m, u, seed, first, count, host);
        if (z->f32) be->copy(be, *store, host, (size_t)count * 4, NULL);
        else {
            be->copy(be, dtmp, host, (size_t)count * 4, NULL);
            be->from_f32(be, *store, dtmp, count);
        }
        if (z->stage < 3) m->params[u] = x->full;
        char *pstore = z->stage == 3 ? (char *)x->pshard : (char *)x->full + (size_t)x->off * es;
        if (z->f32) {
            x->master = (float *)pstore; /* fp32 compute: the master weights are the parameters */
        } else {
            x->master = zalloc(z, ZINF_MEM_MASTER, x->p * 4);
            if (!x->master) { rc = NOMEM(z, "fp32 master weights", u); break; }
            x->master_owned = true;
            be->copy(be, x->master, z->stage == 3 ? dtmp : dtmp + x->off, (size_t)x->p * 4, NULL);
        }
        if (z->stage < 2 && z->f32) {
            x->gfull = zalloc(z, ZINF_MEM_GRAD, x->pn * 4); /* the accumulator, kept */
            if (!x->gfull) { rc = NOMEM(z, "gradients", u); break; }
            m->grads[u] = x->gfull;
        } else {
            int64_t na = z->stage < 2 ? x->pn : x->p;
            x->gacc = zalloc(z, ZINF_MEM_GRAD_ACC, na * 4);
            if (!x->gacc) { rc = NOMEM(z, "the gradient accumulator", u); break; }
        }
        x->m = zalloc(z, ZINF_MEM_ADAM, x->p * 4);
        x->v = zalloc(z, ZINF_MEM_ADAM, x->p * 4);
        if (!x->m || !x->v) rc = NOMEM(z, "Adam states", u);
        if (!rc) rc = be->sync(be); /* host and dtmp are reused by the next unit */
    }
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
    for (int i = 0; i < z->npend; i++) zinf_comm_wait(z->comm, &z->pend[i].q), finish_pending(z, &z->pend[i]);
    for (int k = 0; z->stall && k < 2 * z->nseq_full; k++)
        if (z->stall[k]) z->be->event_free(z->be, z->stall[k]);
    free(z->stall);
    free(z->stall_used);
    for (int u = 0; z->u && u < z->nunits; u++) {
        zunit *x = &z->u[u];
        if (x->state == 1) zinf_comm_wait(z->comm, &x->greq);
        zfree(z, ZINF_MEM_PARAM, x->full, x->pn * (int64_t)z->es);
        zfree(z, ZINF_MEM_PARAM_SHARD, x->pshard, x->p * (int64_t)z->es);
        zfree(z, ZINF_MEM_GRAD, x->gfull, x->pn * (int64_t)z->es);
        zfree(z, ZINF_MEM_GRAD_ACC, x->gacc, (z->stage < 2 ? x->pn : x->p) * 4);
        if (x->master_owned) zfree(z, ZINF_MEM_MASTER, x->master, x->p * 4);
        zfree(z, ZINF_MEM_ADAM, x->m, x->p * 4);
        zfree(z, ZINF_MEM_ADAM, x->v, x->p * 4);
    }
    for (int i = 0; i < z->ncache; i++) z->be->free(z->be, ZINF_PLACE_DEVICE, z->cache[i].p);
    free(z->cache);
    free(z->u);
    free(z->norm_x);
    free(z->norm_n);
    free(z->pend);
    free(z->seq);
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
        if (x->gfull && z->stage < 2) ZINF_TRY(z->be->memset0(z->be, x->gfull, (size_t)x->pn * 4, NULL));
        if (x->gacc && z->stage < 2) x->gacc_stale = true; /* see accumulate_unit */
        else if (x->gacc) ZINF_TRY(z->be->memset0(z->be, x->gacc, (size_t)x->p * 4, NULL));
    }
    return 0;
}

int zinf_zero_begin_pass(zinf_zero *z, int with_backward, int last_micro)
{
    z->last_micro = last_micro != 0;
    if (z->stage == 3) {
        z->nseq = with_backward ? z->nseq_full : z->nseq_fwd;
        plan_distances(z, z->nseq);
        z->cursor = 0;
    }
    return 0;
}

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
    return 0;
}

int zinf_zero_reduce(zinf_zero *z, double *norm)
{
    double t0 = zinf_now();
    if (z->stage < 2 && !(z->cfg->overlap_comm))
        for (int u = 0; u < z->nunits; u++) ZINF_TRY(allreduce_unit(z, u));
    ZINF_TRY(progress(z, true));
    ZINF_TRY(zinf_comm_drain(z->comm)); /* device collectives of the step, with the timeout */
    /* the squared norm of every unit's gradient in one backend call: one wait for the device */
    const float **xs = z->norm_x;
    int64_t *ns = z->norm_n;
    for (int u = 0; u < z->nunits; u++) {
        zunit *x = &z->u[u];
        if (z->stage < 2) {
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
    double s = z->be->sumsq(z->be, z->nunits, xs, ns);
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

int zinf_zero_step(zinf_zero *z, const zinf_adamw_args *a0, double weight_decay)
{
    double t0 = zinf_now();
    zinf_adamw_args a = *a0;
    /* One AdamW call per tensor piece of the shard (a tensor's decay is its own). DeepSpeed's
     * sub_group_size groups whole parameters and never splits one, and AdamW is elementwise, so
     * on the device the grouping changes no result; it sizes the offloaded optimizer's tiles. */
    for (int u = 0; u < z->nunits; u++) {
        zunit *x = &z->u[u];
        const zinf_unit *un = &z->m->units[u];
        const float *g = z->stage >= 2 ? x->gacc : acc01(z, x) + x->off;
        char *pstore = z->stage == 3 ? (char *)x->pshard : (char *)x->full + (size_t)x->off * z->es;
        /* this rank's range of the unit, cut by tensor (decay or not) */
        int64_t lo = x->off, hi = x->off + x->p < x->n ? x->off + x->p : x->n;
        for (int t = 0; t < un->ntensors; t++) {
            int64_t tlo = un->t[t].offset, thi = tlo + un->t[t].numel;
            int64_t a_ = lo > tlo ? lo : tlo, b_ = hi < thi ? hi : thi;
            a.weight_decay = un->t[t].decay ? (float)weight_decay : 0.0f;
            if (a_ >= b_) continue;
            int64_t k = a_ - x->off;
            z->be->adamw(z->be, x->master + k, z->f32 ? NULL : pstore + (size_t)k * z->es, g + k,
                         x->m + k, x->v + k, b_ - a_, &a);
        }
    }
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
    for (int k = 0; k < ZINF_MEM_NKINDS; k++) r->bytes[k] = z->mem[k];
    r->total = z->mem_total;
    r->peak = z->mem_peak;
    r->live_max_beyond_current = z->live_max_beyond;
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
                                                 "communication buffers"};
    char line[512];
    int n = snprintf(line, sizeof line, "memory on rank 0 (ZeRO stage %d, world %d):", z->stage, z->W);
    for (int k = 0; k < ZINF_MEM_NKINDS; k++)
        if (z->mem[k] && n < (int)sizeof line)
            n += snprintf(line + n, sizeof line - (size_t)n, " %s %.2f MiB;", names[k], (double)z->mem[k] / 1048576.0);
    if (z->cached && n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, " allocator cache %.2f MiB;", (double)z->cached / 1048576.0);
    if (n < (int)sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, " peak %.2f MiB", (double)z->mem_peak / 1048576.0);
    zinf_info("%s", line);
}

int zinf_zero_get_params(zinf_zero *z, int u, float *out)
{
    zunit *x = &z->u[u];
    zinf_backend *be = z->be;
    void *full = x->full;
    int rc = 0;
    if (z->stage == 3) {
        full = be->alloc(be, ZINF_PLACE_DEVICE, (size_t)x->pn * z->es);
        if (!full) return zinf_errc(ZINF_ENOMEM, "out of memory for a parameter check");
        zinf_req rq;
        rc = zinf_comm_iallgather(z->comm, x->pshard, full, x->p, be->cdt, &rq, "all-gather for a parameter check");
        if (!rc) rc = zinf_comm_wait(z->comm, &rq);
    }
    float *f = z->f32 ? full : be->alloc(be, ZINF_PLACE_DEVICE, (size_t)x->n * 4);
    if (!rc && !f) rc = zinf_errc(ZINF_ENOMEM, "out of memory for a parameter check");
    if (!rc && !z->f32) be->to_f32(be, f, full, x->n);
    if (!rc) rc = be->copy(be, out, f, (size_t)x->n * 4, NULL);
    if (!rc) rc = be->sync(be);
    if (f && f != full) be->free(be, ZINF_PLACE_DEVICE, f);
    if (z->stage == 3 && full) be->free(be, ZINF_PLACE_DEVICE, full);
    return rc;
}
