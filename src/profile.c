/* profile: each operation of a backend timed between two events on the compute stream
 * (profile.h). The profile keeps a copy of the backend as attached and puts a wrapper in place of
 * each operation; a wrapper records an event, calls the operation it replaced and records another.
 * Events are made as the first step needs them and reused after each collection. */
#include "profile.h"

#include <pthread.h>
#include <stdlib.h>

#include "err.h"

/* the operations, in kernels.h's order */
#define OPS(X)                                                                                           \
    X(encoder_fwd) X(encoder_bwd) X(copy_rows) X(layernorm_fwd) X(layernorm_bwd) X(matmul_fwd)          \
    X(matmul_fwd_res) X(matmul_bwd) X(attention_fwd) X(attention_bwd) X(rmsnorm_fwd) X(rmsnorm_bwd)      \
    X(rope) X(swiglu_fwd) X(swiglu_bwd) X(matmul_gelu_fwd) X(matmul_dgelu_bwd) X(gelu_fwd) X(gelu_bwd)  \
    X(add) X(xent) X(adamw) X(sumsq) X(scale) X(axpy) X(acc_f32) X(scale_to) X(to_f32) X(from_f32)
#define ENUM(n) OP_##n,
#define NAME(n) #n,
enum { OPS(ENUM) OP_COUNT };
static const char *const op_name[OP_COUNT] = {OPS(NAME)};
_Static_assert(OP_COUNT <= ZINF_PROF_OPS, "ZINF_PROF_OPS must hold every operation");

typedef struct {
    int op;
    double flops;
    zinf_event *a, *b;
} rec;

struct zinf_op_prof {
    zinf_backend orig; /* the backend as attached: its operations, restored by detach */
    pthread_t owner;   /* the thread whose operations are timed */
    int depth;         /* an operation that calls another through the backend is timed once */
    int err;           /* an event could not be made: nothing more is timed */
    rec *recs;         /* n timed calls since the last collection; made holds events */
    int n, made;
    long calls[OP_COUNT];
    double ms[OP_COUNT], flops[OP_COUNT];
};

double zinf_prof_matmul_flops(int64_t N, int64_t K, int64_t OC) { return 2.0 * (double)N * (double)K * (double)OC; }

double zinf_prof_attention_flops(int64_t B, int64_t T, int64_t NH, int64_t hs, int backward)
{
    double f = 2.0 * (double)B * (double)NH * (double)T * (double)T * (double)hs;
    return backward ? 2.5 * f : f;
}

static rec *next_rec(zinf_op_prof *p, zinf_backend *be)
{
    if (p->n == p->made) {
        int cap = p->made ? 2 * p->made : 256;
        rec *r = realloc(p->recs, (size_t)cap * sizeof *r);
        if (!r) return NULL;
        p->recs = r;
        for (; p->made < cap; p->made++) {
            rec *x = &p->recs[p->made];
            x->a = p->orig.event_new_timed(be);
            x->b = x->a ? p->orig.event_new_timed(be) : NULL;
            if (!x->b) {
                if (x->a) p->orig.event_free(be, x->a);
                return NULL;
            }
        }
    }
    return &p->recs[p->n];
}

static rec *begin(zinf_backend *be, int op, double flops)
{
    zinf_op_prof *p = be->prof;
    if (!pthread_equal(pthread_self(), p->owner)) return NULL;
    if (p->depth++ || p->err) return NULL;
    rec *r = next_rec(p, be);
    if (!r || p->orig.event_record(be, r->a, NULL)) {
        p->err = 1;
        return NULL;
    }
    r->op = op;
    r->flops = flops;
    return r;
}

static void end(zinf_backend *be, rec *r)
{
    zinf_op_prof *p = be->prof;
    if (!pthread_equal(pthread_self(), p->owner)) return;
    p->depth--;
    if (!r) return;
    if (p->orig.event_record(be, r->b, NULL)) p->err = 1;
    else p->n++;
}

#define ORIG (be->prof->orig)
/* W(name, flops, parameters..., arguments...): the wrapper of a void operation */
#define W(name, FLOPS, PARAMS, ARGS)                                                                     \
    static void w_##name PARAMS                                                                          \
    {                                                                                                    \
        rec *r_ = begin(be, OP_##name, FLOPS);                                                           \
        ORIG.name ARGS;                                                                                  \
        end(be, r_);                                                                                     \
    }

W(encoder_fwd, 0, (zinf_backend *be, void *out, const int32_t *tok, const void *wte, const void *wpe, int B, int T, int C),
  (be, out, tok, wte, wpe, B, T, C))
W(encoder_bwd, 0, (zinf_backend *be, void *dwte, void *dwpe, const void *dout, const int32_t *tok, int B, int T, int C),
  (be, dwte, dwpe, dout, tok, B, T, C))
W(copy_rows, 0, (zinf_backend *be, void *dst, int64_t ld_dst, const void *src, int64_t ld_src, int64_t rows, int64_t cols),
  (be, dst, ld_dst, src, ld_src, rows, cols))
W(layernorm_fwd, 0, (zinf_backend *be, void *out, float *mean, float *rstd, const void *x, const void *w, const void *b,
                     int64_t N, int C),
  (be, out, mean, rstd, x, w, b, N, C))
W(layernorm_bwd, 0, (zinf_backend *be, void *dx, void *dw, void *db, const void *dout, const void *x, const void *w,
                     const float *mean, const float *rstd, int64_t N, int C),
  (be, dx, dw, db, dout, x, w, mean, rstd, N, C))
W(matmul_fwd, zinf_prof_matmul_flops(N, K, OC),
  (zinf_backend *be, void *out, const void *x, const void *w, const void *bias, int64_t N, int K, int OC),
  (be, out, x, w, bias, N, K, OC))
W(matmul_fwd_res, zinf_prof_matmul_flops(N, K, OC),
  (zinf_backend *be, void *out, const void *x, const void *w, const void *bias, const void *res, int64_t N, int K, int OC),
  (be, out, x, w, bias, res, N, K, OC))
W(matmul_bwd, zinf_prof_matmul_flops(N, K, OC) * ((dx != NULL) + (dw != NULL)),
  (zinf_backend *be, void *dx, void *dw, void *dbias, const void *dout, const void *x, const void *w, int64_t N, int K,
   int OC, int acc),
  (be, dx, dw, dbias, dout, x, w, N, K, OC, acc))
/* packed rows attend within their samples, far less than T^2 a row: not counted */
W(attention_fwd, rows ? 0 : zinf_prof_attention_flops(B, T, NH, hs, 0),
  (zinf_backend *be, void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV, int hs,
   const zinf_attn_rows *rows),
  (be, out, lse, qkv, B, T, NH, NKV, hs, rows))
W(attention_bwd, rows ? 0 : zinf_prof_attention_flops(B, T, NH, hs, 1),
  (zinf_backend *be, void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse, int B, int T,
   int NH, int NKV, int hs, const zinf_attn_rows *rows),
  (be, dqkv, dout, qkv, out, lse, B, T, NH, NKV, hs, rows))
W(rmsnorm_fwd, 0, (zinf_backend *be, void *out, float *rstd, const void *x, const void *w, int64_t N, int heads, int C,
                   int64_t ld, float eps),
  (be, out, rstd, x, w, N, heads, C, ld, eps))
W(rmsnorm_bwd, 0, (zinf_backend *be, void *dx, void *dw, const void *dout, const void *x, const void *w,
                   const float *rstd, int64_t N, int heads, int C, int64_t ld),
  (be, dx, dw, dout, x, w, rstd, N, heads, C, ld))
W(rope, 0, (zinf_backend *be, void *x, int64_t N, int nh, int hs, int64_t stride, const int32_t *pos, int T,
            const float *inv_freq, int inverse),
  (be, x, N, nh, hs, stride, pos, T, inv_freq, inverse))
W(swiglu_fwd, 0, (zinf_backend *be, void *out, const void *gu, int64_t N, int F), (be, out, gu, N, F))
W(swiglu_bwd, 0, (zinf_backend *be, void *dgu, const void *dout, const void *gu, int64_t N, int F), (be, dgu, dout, gu, N, F))
W(matmul_gelu_fwd, zinf_prof_matmul_flops(N, K, OC),
  (zinf_backend *be, void *out, void *pre, const void *x, const void *w, const void *bias, int64_t N, int K, int OC),
  (be, out, pre, x, w, bias, N, K, OC))
W(matmul_dgelu_bwd, zinf_prof_matmul_flops(N, K, OC),
  (zinf_backend *be, void *dpre, const void *dout, const void *w, const void *pre, int64_t N, int K, int OC),
  (be, dpre, dout, w, pre, N, K, OC))
W(gelu_fwd, 0, (zinf_backend *be, void *out, const void *x, int64_t n), (be, out, x, n))
W(gelu_bwd, 0, (zinf_backend *be, void *dx, const void *x, const void *dout, int64_t n), (be, dx, x, dout, n))
W(add, 0, (zinf_backend *be, void *out, const void *a, const void *b, int64_t n), (be, out, a, b, n))
W(xent, 0, (zinf_backend *be, float *losses, void *logits, const int32_t *tgt, int64_t N, int V, int Vp, float dloss),
  (be, losses, logits, tgt, N, V, Vp, dloss))
W(adamw, 0, (zinf_backend *be, float *p, void *p16, const void *g, zinf_dtype gdt, float *m, float *v,
             int64_t n, const zinf_adamw_args *a),
  (be, p, p16, g, gdt, m, v, n, a))
W(scale, 0, (zinf_backend *be, float *x, int64_t n, float s), (be, x, n, s))
W(axpy, 0, (zinf_backend *be, float *y, const float *x, int64_t n, float a), (be, y, x, n, a))
W(acc_f32, 0, (zinf_backend *be, float *y, const void *x, int64_t n, float a), (be, y, x, n, a))
W(scale_to, 0, (zinf_backend *be, void *y, const void *x, int64_t n, float a), (be, y, x, n, a))
W(to_f32, 0, (zinf_backend *be, float *dst, const void *src, int64_t n), (be, dst, src, n))
W(from_f32, 0, (zinf_backend *be, void *dst, const float *src, int64_t n), (be, dst, src, n))

static double w_sumsq(zinf_backend *be, int k, const void *const *x, const int64_t *n, zinf_dtype xdt)
{
    rec *r = begin(be, OP_sumsq, 0);
    double s = ORIG.sumsq(be, k, x, n, xdt);
    end(be, r);
    return s;
}
#undef W
#undef ORIG

int zinf_prof_attach(zinf_backend *be)
{
    if (be->prof) return zinf_errc(ZINF_EINVAL, "an operation profile is already attached");
    if (!be->event_new_timed || !be->event_elapsed_ms)
        return zinf_errc(ZINF_EINVAL, "the %s backend has no timed events to profile its operations with", be->name);
    zinf_op_prof *p = calloc(1, sizeof *p);
    if (!p) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    p->orig = *be;
    p->owner = pthread_self();
    be->prof = p;
    /* each operation the backend has (a backend may leave one it lacks NULL) */
#define SET(n) if (be->n) be->n = w_##n;
    OPS(SET)
#undef SET
    return 0;
}

int zinf_prof_collect(zinf_backend *be)
{
    zinf_op_prof *p = be->prof;
    if (!p) return 0;
    int rc = p->orig.sync(be);
    for (int i = 0; i < p->n && !rc; i++) {
        rec *r = &p->recs[i];
        double ms = p->orig.event_elapsed_ms(be, r->a, r->b);
        if (ms < 0) {
            rc = zinf_errc(ZINF_EIO, "the operation profile's events of %s did not complete", op_name[r->op]);
            break;
        }
        p->calls[r->op]++;
        p->ms[r->op] += ms;
        p->flops[r->op] += r->flops;
    }
    p->n = 0;
    if (!rc && p->err) rc = zinf_errc(ZINF_ENOMEM, "the operation profile could not make or record its events");
    return rc;
}

static int by_ms(const void *a, const void *b)
{
    double x = ((const zinf_op_total *)a)->ms, y = ((const zinf_op_total *)b)->ms;
    return (x < y) - (x > y);
}

int zinf_prof_totals(zinf_backend *be, zinf_op_total *out, int cap)
{
    zinf_op_prof *p = be->prof;
    if (!p) return 0;
    zinf_op_total all[OP_COUNT];
    int k = 0;
    for (int i = 0; i < OP_COUNT; i++)
        if (p->calls[i]) all[k++] = (zinf_op_total){op_name[i], p->calls[i], p->ms[i], p->flops[i]};
    qsort(all, (size_t)k, sizeof all[0], by_ms);
    for (int i = 0; i < k && i < cap; i++) out[i] = all[i];
    return k;
}

void zinf_prof_detach(zinf_backend *be)
{
    zinf_op_prof *p = be->prof;
    if (!p) return;
    zinf_backend orig = p->orig;
    *be = orig; /* the operations as they were; nothing else of the backend changes while it runs */
    be->prof = NULL;
    for (int i = 0; i < p->made; i++) {
        orig.event_free(be, p->recs[i].a);
        orig.event_free(be, p->recs[i].b);
    }
    free(p->recs);
    free(p);
}
