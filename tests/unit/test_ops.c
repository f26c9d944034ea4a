/* test_ops: the CPU backend's operations against finite differences, naive reference loops and
 * closed forms; the accumulate rule; AdamW against a scalar double-precision reference; sumsq;
 * determinism (repeat runs and different thread counts give the same bits). */
#include "kernels.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

static zinf_backend be;

/* ---------------------------------------------------------------- helpers */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* uniform in [-a, a) (splitmix64) */
static float frand(float a)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return a * (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *randv(int64_t n, float a)
{
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = frand(a);
    return p;
}

static float *zerov(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(float)); }

static float *dupv(const float *x, int64_t n)
{
    float *p = malloc((size_t)n * sizeof(float));
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}

static int32_t *randtok(int64_t n, int V)
{
    int32_t *t = malloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)((frand(0.5f) + 0.5f) * V) % V;
    return t;
}

/* the random projection loss L = sum(out * R), in double */
static double proj(const float *out, const float *R, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)out[i] * R[i];
    return s;
}

/* max |a-b| <= atol + rtol*|b| over n elements, as one check naming the worst element */
static void check_vec(const char *what, const float *a, const double *b, int64_t n, double rtol,
                      double atol)
{
    int64_t bad = 0, worst = 0;
    double wx = -1;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]), x = e - (atol + rtol * fabs(b[i]));
        if (x > 0) bad++;
        if (x > wx) wx = x, worst = i;
    }
    CHECK(bad == 0, "%s: %ld of %ld off; worst [%ld] got %.9g want %.9g", what, (long)bad,
          (long)n, (long)worst, n ? a[worst] : 0.0, n ? b[worst] : 0.0);
}

static void check_vecf(const char *what, const float *a, const float *b, int64_t n, double rtol,
                       double atol)
{
    double *bd = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) bd[i] = b[i];
    check_vec(what, a, bd, n, rtol, atol);
    free(bd);
}

static void check_bits(const char *what, const void *a, const void *b, size_t bytes)
{
    CHECK(memcmp(a, b, bytes) == 0, "%s: results differ between runs", what);
}

/* ---- finite differences: loss(ctx) runs the forward op from the current inputs and returns the
 * loss in double; every element of in is perturbed by +-FD_EPS and the central difference is
 * compared with the analytic gradient grad. */
#define FD_EPS 1e-3f
#define FD_RTOL 5e-3 /* the worst element sits at about 1/3 of these on the sizes below */
#define FD_ATOL 5e-4

typedef double (*loss_fn)(void *ctx);

static void check_fd(const char *what, loss_fn loss, void *ctx, float *in, const float *grad,
                     int64_t n)
{
    double *num = malloc((size_t)n * sizeof(double));
    for (int64_t k = 0; k < n; k++) {
        float x0 = in[k], xp = x0 + FD_EPS, xm = x0 - FD_EPS;
        in[k] = xp;
        double lp = loss(ctx);
        in[k] = xm;
        double lm = loss(ctx);
        in[k] = x0;
        num[k] = (lp - lm) / ((double)xp - xm); /* the step actually taken in fp32 */
    }
    char buf[128];
    snprintf(buf, sizeof buf, "fd %s", what);
    check_vec(buf, grad, num, n, FD_RTOL, FD_ATOL);
    free(num);
}

/* The accumulate rule: a second backward call into the same buffers doubles them. once is the
 * result of one call from zero, twice of two calls. (The input gradients of matmul_bwd and
 * attention_bwd are overwritten instead: a second call into garbage gives the first result.) */
static void check_doubled(const char *what, const float *once, const float *twice, int64_t n)
{
    double *want = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) want[i] = 2.0 * once[i];
    char buf[128];
    snprintf(buf, sizeof buf, "accumulate %s", what);
    check_vec(buf, twice, want, n, 1e-5, 1e-6);
    free(want);
}

/* Garbage (NaN and 1e30) in a buffer an operation must overwrite without reading. */
static void poison(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] = (i % 3) ? 1e30f : NAN;
}

/* small sizes for the gradient checks */
enum { B = 2, T = 5, C = 8, NH = 2, K = 6, OC = 7, V = 11, VP = 16, N = B * T };

/* ---------------------------------------------------------------- backend mechanics */

static void test_memory(void)
{
    CHECK(be.cdt == ZINF_F32 && strcmp(be.name, "cpu") == 0, "cdt %d name %s", be.cdt, be.name);
    for (int place = 0; place < 3; place++) {
        unsigned char *p = be.alloc(&be, (zinf_place)place, 1000);
        CHECK(p != NULL && (uintptr_t)p % 64 == 0, "alloc place %d: %p", place, (void *)p);
        int zero = 1;
        for (int i = 0; i < 1000; i++) zero &= p[i] == 0;
        CHECK(zero, "alloc place %d not zeroed", place);
        unsigned char src[1000];
        for (int i = 0; i < 1000; i++) src[i] = (unsigned char)i;
        CHECK(be.copy(&be, p, src, 1000, NULL) == 0 && memcmp(p, src, 1000) == 0, "copy");
        CHECK(be.memset0(&be, p + 10, 500, NULL) == 0 && p[9] == 9 && p[10] == 0 && p[509] == 0 &&
                  p[510] == (unsigned char)510,
              "memset0");
        be.free(&be, (zinf_place)place, p);
    }
    zinf_stream *s = be.stream_new(&be);
    zinf_event *e = be.event_new(&be);
    CHECK(s != NULL && e != NULL, "stream/event handles must be non-NULL");
    CHECK(be.event_record(&be, e, s) == 0 && be.stream_wait(&be, s, e) == 0 &&
              be.stream_sync(&be, s) == 0 && be.sync(&be) == 0,
          "stream/event calls return 0");
    be.event_free(&be, e);
    be.stream_free(&be, s);

    float a[5] = {1, 2, 3, 4, 5}, b[5];
    be.from_f32(&be, b, a, 5);
    CHECK(memcmp(a, b, sizeof a) == 0, "from_f32");
    memset(b, 0, sizeof b);
    be.to_f32(&be, b, a, 5);
    CHECK(memcmp(a, b, sizeof a) == 0, "to_f32");
}

/* ---------------------------------------------------------------- encoder */

struct enc { int32_t *tok; float *wte, *wpe, *out, *R; };

static double enc_loss(void *c_)
{
    struct enc *c = c_;
    be.encoder_fwd(&be, c->out, c->tok, c->wte, c->wpe, B, T, C);
    return proj(c->out, c->R, N * C);
}

static void test_encoder(void)
{
    struct enc c = {randtok(N, V), randv(V * C, 1), randv(T * C, 1), zerov(N * C),
                    randv(N * C, 1)};
    c.tok[7] = c.tok[1] = c.tok[3]; /* the tied gradient must sum repeated tokens */
    enc_loss(&c);
    int ok = 1;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < C; k++)
            ok &= c.out[n * C + k] == c.wte[c.tok[n] * C + k] + c.wpe[(n % T) * C + k];
    CHECK(ok, "encoder_fwd != wte[tok] + wpe[t]");

    float *dwte = zerov(V * C), *dwpe = zerov(T * C);
    be.encoder_bwd(&be, dwte, dwpe, c.R, c.tok, B, T, C);
    check_fd("encoder dwte", enc_loss, &c, c.wte, dwte, V * C);
    check_fd("encoder dwpe", enc_loss, &c, c.wpe, dwpe, T * C);
    float *dwte1 = dupv(dwte, V * C), *dwpe1 = dupv(dwpe, T * C);
    be.encoder_bwd(&be, dwte, dwpe, c.R, c.tok, B, T, C);
    check_doubled("encoder dwte", dwte1, dwte, V * C);
    check_doubled("encoder dwpe", dwpe1, dwpe, T * C);
    free(c.tok), free(c.wte), free(c.wpe), free(c.out), free(c.R);
    free(dwte), free(dwpe), free(dwte1), free(dwpe1);
}

/* ---------------------------------------------------------------- layernorm */

struct ln { float *x, *w, *b, *out, *mean, *rstd, *R; };

static double ln_loss(void *c_)
{
    struct ln *c = c_;
    be.layernorm_fwd(&be, c->out, c->mean, c->rstd, c->x, c->w, c->b, N, C);
    return proj(c->out, c->R, N * C);
}

static void test_layernorm(void)
{
    struct ln c = {randv(N * C, 2), randv(C, 1), randv(C, 1), zerov(N * C), zerov(N), zerov(N),
                   randv(N * C, 1)};
    /* forward: statistics against a double loop; without the affine the rows are standardized */
    float *one = malloc(C * sizeof(float)), *zero = zerov(C);
    for (int k = 0; k < C; k++) one[k] = 1;
    be.layernorm_fwd(&be, c.out, c.mean, c.rstd, c.x, one, zero, N, C);
    double mean[N], rstd[N], *ref = malloc(N * C * sizeof(double));
    for (int n = 0; n < N; n++) {
        double s = 0, ss = 0, m, r;
        for (int k = 0; k < C; k++) s += c.x[n * C + k];
        m = s / C;
        for (int k = 0; k < C; k++) ss += (c.x[n * C + k] - m) * (c.x[n * C + k] - m);
        r = 1 / sqrt(ss / C + 1e-5);
        mean[n] = m, rstd[n] = r;
        double om = 0, ov = 0;
        for (int k = 0; k < C; k++) om += c.out[n * C + k];
        om /= C;
        for (int k = 0; k < C; k++) ov += (c.out[n * C + k] - om) * (c.out[n * C + k] - om);
        ov /= C;
        CHECK(fabs(om) < 1e-6 && fabs(ov * (1 + 1e-5 * r * r) - 1) < 1e-5,
              "layernorm row %d: mean %g var %g", n, om, ov);
        for (int k = 0; k < C; k++) ref[n * C + k] = (c.x[n * C + k] - m) * r * c.w[k] + c.b[k];
    }
    check_vec("layernorm mean", c.mean, mean, N, 1e-6, 1e-7);
    check_vec("layernorm rstd", c.rstd, rstd, N, 1e-6, 1e-7);
    ln_loss(&c);
    check_vec("layernorm out", c.out, ref, N * C, 1e-5, 1e-6);

    float *dx = zerov(N * C), *dw = zerov(C), *db = zerov(C);
    be.layernorm_bwd(&be, dx, dw, db, c.R, c.x, c.w, c.mean, c.rstd, N, C);
    float *x0 = dupv(c.x, N * C);
    check_fd("layernorm dx", ln_loss, &c, c.x, dx, N * C);
    check_fd("layernorm dw", ln_loss, &c, c.w, dw, C);
    check_fd("layernorm db", ln_loss, &c, c.b, db, C);
    ln_loss(&c); /* restore mean/rstd of the unperturbed input */
    float *dx1 = dupv(dx, N * C), *dw1 = dupv(dw, C), *db1 = dupv(db, C);
    be.layernorm_bwd(&be, dx, dw, db, c.R, x0, c.w, c.mean, c.rstd, N, C);
    check_doubled("layernorm dx", dx1, dx, N * C);
    check_doubled("layernorm dw", dw1, dw, C);
    check_doubled("layernorm db", db1, db, C);
    free(c.x), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(c.R);
    free(one), free(zero), free(ref), free(dx), free(dw), free(db), free(x0), free(dx1),
        free(dw1), free(db1);
}

/* ---------------------------------------------------------------- matmul */

struct mm { float *x, *w, *bias, *out, *R; };

static double mm_loss(void *c_)
{
    struct mm *c = c_;
    be.matmul_fwd(&be, c->out, c->x, c->w, c->bias, N, K, OC);
    return proj(c->out, c->R, N * OC);
}

/* The reference product in double: ref[n][o] = sum_k x[n][k] w[o][k] (+ bias[o]). */
static void ref_matmul(double *ref, const float *x, const float *w, const float *bias, int n_, int k_, int oc)
{
    for (int n = 0; n < n_; n++)
        for (int o = 0; o < oc; o++) {
            double s = bias ? bias[o] : 0;
            for (int k = 0; k < k_; k++) s += (double)x[n * k_ + k] * w[o * k_ + k];
            ref[n * oc + o] = s;
        }
}

static void test_matmul(void)
{
    struct mm c = {randv(N * K, 1), randv(OC * K, 1), randv(OC, 1), zerov(N * OC),
                   randv(N * OC, 1)};
    double *ref = malloc(N * OC * sizeof(double));
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        float *bias = with_bias ? c.bias : NULL;
        ref_matmul(ref, c.x, c.w, bias, N, K, OC);
        memset(c.out, 0x7f, N * OC * sizeof(float)); /* the forward overwrites */
        be.matmul_fwd(&be, c.out, c.x, c.w, bias, N, K, OC);
        check_vec(with_bias ? "matmul_fwd bias" : "matmul_fwd", c.out, ref, N * OC, 1e-6, 1e-6);
        /* with the residual: out = res + x w^T (+ b), from a separate res and in place */
        float *res = randv(N * OC, 1);
        for (int i = 0; i < N * OC; i++) ref[i] += res[i];
        memset(c.out, 0x7f, N * OC * sizeof(float));
        be.matmul_fwd_res(&be, c.out, c.x, c.w, bias, res, N, K, OC);
        check_vec("matmul_fwd_res", c.out, ref, N * OC, 1e-6, 1e-6);
        be.matmul_fwd_res(&be, res, c.x, c.w, bias, res, N, K, OC);
        check_vec("matmul_fwd_res in place", res, ref, N * OC, 1e-6, 1e-6);
        free(res);
    }

    float *dx = zerov(N * K), *dw = zerov(OC * K), *db = zerov(OC);
    be.matmul_bwd(&be, dx, dw, db, c.R, c.x, c.w, N, K, OC, 1);
    check_fd("matmul dx", mm_loss, &c, c.x, dx, N * K);
    check_fd("matmul dw", mm_loss, &c, c.w, dw, OC * K);
    check_fd("matmul dbias", mm_loss, &c, c.bias, db, OC);
    float *dx1 = dupv(dx, N * K), *dw1 = dupv(dw, OC * K), *db1 = dupv(db, OC);
    poison(dx, N * K); /* dx is overwritten */
    be.matmul_bwd(&be, dx, dw, db, c.R, c.x, c.w, N, K, OC, 1);
    check_vecf("overwrite matmul dx", dx, dx1, N * K, 0, 0);
    check_doubled("matmul dw", dw1, dw, OC * K);
    check_doubled("matmul dbias", db1, db, OC);
    /* NULL dx and dbias are skipped; dw still accumulates */
    be.matmul_bwd(&be, NULL, dw, NULL, c.R, c.x, c.w, N, K, OC, 1);
    float *dw3 = dupv(dw1, OC * K);
    for (int i = 0; i < OC * K; i++) dw3[i] *= 3;
    check_vecf("matmul_bwd NULL dx/dbias", dw, dw3, OC * K, 1e-5, 1e-6);
    /* acc 0 (a step's first write of the gradients): dw and dbias are overwritten, whatever they
     * held, with the bits of the first accumulation from zeros */
    poison(dw, OC * K);
    poison(db, OC);
    be.matmul_bwd(&be, NULL, dw, db, c.R, c.x, c.w, N, K, OC, 0);
    check_vecf("matmul_bwd acc 0 dw", dw, dw1, OC * K, 0, 0);
    check_vecf("matmul_bwd acc 0 dbias", db, db1, OC, 0, 0);
    free(c.x), free(c.w), free(c.bias), free(c.out), free(c.R), free(ref);
    free(dx), free(dw), free(db), free(dx1), free(dw1), free(db1), free(dw3);
}

/* ---------------------------------------------------------------- attention */

struct att { float *qkv, *out, *lse, *R; int B, T, C, NH; };

static double att_loss(void *c_)
{
    struct att *c = c_;
    be.attention_fwd(&be, c->out, c->lse, c->qkv, c->B, c->T, c->NH, c->NH, c->C / c->NH, NULL);
    return proj(c->out, c->R, (int64_t)c->B * c->T * c->C);
}

/* softmax(Q K^T * scale + causal mask) V over the full T x T matrix, in double */
static void attention_naive(double *out, double *lse, const float *qkv, int b_, int t_, int c_,
                            int nh)
{
    int hs = c_ / nh;
    double *s = malloc((size_t)t_ * sizeof(double));
    for (int b = 0; b < b_; b++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < t_; i++) {
                const float *q = qkv + ((size_t)b * t_ + i) * 3 * c_ + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < t_; j++) {
                    const float *k = qkv + ((size_t)b * t_ + j) * 3 * c_ + c_ + h * hs;
                    double d = 0;
                    for (int e = 0; e < hs; e++) d += (double)q[e] * k[e];
                    s[j] = j > i ? -INFINITY : d / sqrt(hs);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j < t_; j++) sum += exp(s[j] - mx);
                lse[((size_t)b * nh + h) * t_ + i] = mx + log(sum);
                for (int e = 0; e < hs; e++) {
                    double o = 0;
                    for (int j = 0; j < t_; j++)
                        o += exp(s[j] - mx) / sum *
                             qkv[((size_t)b * t_ + j) * 3 * c_ + 2 * c_ + h * hs + e];
                    out[((size_t)b * t_ + i) * c_ + h * hs + e] = o;
                }
            }
    free(s);
}

static void test_attention(void)
{
    struct att c = {randv(N * 3 * C, 1.5f), zerov(N * C), zerov(B * NH * T), randv(N * C, 1),
                    B, T, C, NH};
    double *ro = malloc(N * C * sizeof(double)), *rl = malloc(B * NH * T * sizeof(double));
    attention_naive(ro, rl, c.qkv, B, T, C, NH);
    att_loss(&c);
    check_vec("attention_fwd out", c.out, ro, N * C, 1e-5, 1e-6);
    check_vec("attention_fwd lse", c.lse, rl, B * NH * T, 1e-5, 1e-6);

    float *dqkv = zerov(N * 3 * C);
    be.attention_bwd(&be, dqkv, c.R, c.qkv, c.out, c.lse, B, T, NH, NH, C / NH, NULL);
    float *qkv0 = dupv(c.qkv, N * 3 * C);
    check_fd("attention dqkv", att_loss, &c, c.qkv, dqkv, N * 3 * C);
    att_loss(&c);
    float *d1 = dupv(dqkv, N * 3 * C);
    poison(dqkv, N * 3 * C); /* dqkv is overwritten */
    be.attention_bwd(&be, dqkv, c.R, qkv0, c.out, c.lse, B, T, NH, NH, C / NH, NULL);
    check_vecf("overwrite attention dqkv", dqkv, d1, N * 3 * C, 0, 0);

    /* scores in the thousands: the forward must subtract the row maximum before exponentiating */
    for (int i = 0; i < N * 3 * C; i++) c.qkv[i] *= 40;
    attention_naive(ro, rl, c.qkv, B, T, C, NH);
    att_loss(&c);
    check_vec("attention_fwd out, large scores", c.out, ro, N * C, 1e-4, 1e-4);
    check_vec("attention_fwd lse, large scores", c.lse, rl, B * NH * T, 1e-5, 1e-3);
    free(c.qkv), free(c.out), free(c.lse), free(c.R), free(ro), free(rl), free(dqkv), free(qkv0),
        free(d1);
}

/* ---- grouped-query attention against float64 */

/* The loss sum(out * R) of causal grouped-query attention (kernels.h's layout) computed in double
 * from a double qkv; out and lse (when not NULL) receive the forward. */
static double gqa_naive(double *out, double *lse, const double *qkv, const float *R, int b_, int t_,
                        int nh, int nkv, int hs)
{
    const int64_t W = (int64_t)(nh + 2 * nkv) * hs, C_ = (int64_t)nh * hs;
    double *p = malloc((size_t)t_ * sizeof(double)), L = 0;
    for (int b = 0; b < b_; b++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < t_; i++) {
                const double *q = qkv + ((int64_t)b * t_ + i) * W + (int64_t)h * hs;
                const int64_t ko = C_ + (int64_t)(h / (nh / nkv)) * hs, vo = ko + (int64_t)nkv * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((int64_t)b * t_ + j) * W + ko;
                    double d = 0;
                    for (int e = 0; e < hs; e++) d += q[e] * k[e];
                    p[j] = d / sqrt(hs);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= i; j++) sum += p[j] = exp(p[j] - mx);
                if (lse) lse[((int64_t)b * nh + h) * t_ + i] = mx + log(sum);
                for (int e = 0; e < hs; e++) {
                    double o = 0;
                    for (int j = 0; j <= i; j++) o += p[j] / sum * qkv[((int64_t)b * t_ + j) * W + vo + e];
                    int64_t oi = ((int64_t)b * t_ + i) * C_ + (int64_t)h * hs + e;
                    if (out) out[oi] = o;
                    L += o * R[oi];
                }
            }
    free(p);
    return L;
}

/* One shape: the forward against gqa_naive; dqkv against central differences of gqa_naive in
 * double (step 1e-5: truncation ~1e-10, so the fp32 backward's own rounding is what is seen);
 * dqkv overwritten; and the group rule: the same inputs with each kv head repeated for its query
 * heads (HF's repeat_kv) give the same bits forward, and dk, dv summed over the group. */
static void gqa_case(int b_, int t_, int nh, int nkv, int hs)
{
    const int64_t W = (int64_t)(nh + 2 * nkv) * hs, n = (int64_t)b_ * t_, nq = n * W, no = n * nh * hs,
                  nl = (int64_t)b_ * nh * t_;
    float *qkv = randv(nq, 1.5f), *out = zerov(no), *lse = zerov(nl), *R = randv(no, 1), *dqkv = zerov(nq);
    double *qd = malloc((size_t)nq * sizeof(double)), *ro = malloc((size_t)no * sizeof(double)),
           *rl = malloc((size_t)nl * sizeof(double)), *num = malloc((size_t)nq * sizeof(double));
    for (int64_t i = 0; i < nq; i++) qd[i] = qkv[i];
    char what[128];
    snprintf(what, sizeof what, "gqa B%d T%d NH%d NKV%d hs%d", b_, t_, nh, nkv, hs);
    gqa_naive(ro, rl, qd, R, b_, t_, nh, nkv, hs);
    be.attention_fwd(&be, out, lse, qkv, b_, t_, nh, nkv, hs, NULL);
    char buf[192];
    snprintf(buf, sizeof buf, "%s out", what);
    check_vec(buf, out, ro, no, 1e-5, 1e-6);
    snprintf(buf, sizeof buf, "%s lse", what);
    check_vec(buf, lse, rl, nl, 1e-5, 1e-6);

    poison(dqkv, nq); /* overwritten, never read */
    be.attention_bwd(&be, dqkv, R, qkv, out, lse, b_, t_, nh, nkv, hs, NULL);
    for (int64_t i = 0; i < nq; i++) {
        double x0 = qd[i];
        qd[i] = x0 + 1e-5;
        double lp = gqa_naive(NULL, NULL, qd, R, b_, t_, nh, nkv, hs);
        qd[i] = x0 - 1e-5;
        double lm = gqa_naive(NULL, NULL, qd, R, b_, t_, nh, nkv, hs);
        qd[i] = x0;
        num[i] = (lp - lm) / 2e-5;
    }
    snprintf(buf, sizeof buf, "%s dqkv vs float64 differences", what);
    check_vec(buf, dqkv, num, nq, 1e-4, 2e-6);

    if (nkv < nh) { /* the same with the kv heads repeated: multi-head attention */
        const int G = nh / nkv;
        const int64_t W2 = 3 * (int64_t)nh * hs;
        float *q2 = zerov(n * W2), *o2 = zerov(no), *l2 = zerov(nl), *d2 = zerov(n * W2);
        for (int64_t r = 0; r < n; r++) {
            memcpy(q2 + r * W2, qkv + r * W, (size_t)nh * hs * sizeof(float));
            for (int h = 0; h < nh; h++)
                for (int p = 1; p < 3; p++)
                    memcpy(q2 + r * W2 + ((int64_t)p * nh + h) * hs,
                           qkv + r * W + (int64_t)nh * hs + ((int64_t)(p - 1) * nkv + h / G) * hs,
                           (size_t)hs * sizeof(float));
        }
        be.attention_fwd(&be, o2, l2, q2, b_, t_, nh, nh, hs, NULL);
        snprintf(buf, sizeof buf, "%s = repeated kv heads, out", what);
        check_bits(buf, out, o2, (size_t)no * sizeof(float));
        snprintf(buf, sizeof buf, "%s = repeated kv heads, lse", what);
        check_bits(buf, lse, l2, (size_t)nl * sizeof(float));
        be.attention_bwd(&be, d2, R, q2, o2, l2, b_, t_, nh, nh, hs, NULL);
        double *want = calloc((size_t)nq, sizeof(double));
        for (int64_t r = 0; r < n; r++) {
            for (int64_t e = 0; e < (int64_t)nh * hs; e++) want[r * W + e] = d2[r * W2 + e];
            for (int h = 0; h < nh; h++)
                for (int p = 1; p < 3; p++)
                    for (int e = 0; e < hs; e++)
                        want[r * W + (int64_t)nh * hs + ((int64_t)(p - 1) * nkv + h / G) * hs + e] +=
                            d2[r * W2 + ((int64_t)p * nh + h) * hs + e];
        }
        snprintf(buf, sizeof buf, "%s dqkv = repeated kv heads' summed", what);
        check_vec(buf, dqkv, want, nq, 1e-5, 1e-6);
        free(q2), free(o2), free(l2), free(d2), free(want);
    }
    free(qkv), free(out), free(lse), free(R), free(dqkv), free(qd), free(ro), free(rl), free(num);
}

static void test_gqa(void)
{
    gqa_case(2, 5, 2, 2, 4);   /* multi-head, GPT-2's case */
    gqa_case(2, 5, 4, 2, 64);  /* groups of 2 */
    gqa_case(1, 6, 4, 1, 64);  /* one kv head */
    gqa_case(2, 4, 4, 2, 128); /* Llama-3 / Qwen head size */
    gqa_case(1, 5, 2, 1, 128);
    gqa_case(1, 3, 6, 3, 6);   /* odd head size */
}

/* ---------------------------------------------------------------- RMSNorm */

enum { RLD = C + 3 }; /* rows with a gap after the C normalised elements */

/* heads groups of C side by side in each row, ld apart (Qwen3's per-head q/k norm) */
struct rms { float *x, *w, *out, *rstd, *R; int heads; int64_t ld; };

static double rms_loss(void *c_)
{
    struct rms *c = c_;
    be.rmsnorm_fwd(&be, c->out, c->rstd, c->x, c->w, N, c->heads, C, c->ld, 1e-5f);
    double s = 0;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < c->heads * C; k++) s += (double)c->out[n * c->ld + k] * c->R[n * c->ld + k];
    return s;
}

static void rms_case(int heads, int64_t ld)
{
    const int64_t n = N * ld;
    struct rms c = {randv(n, 2), randv(C, 1), zerov(n), zerov(N * heads), randv(n, 1), heads, ld};
    for (int64_t i = 0; i < n; i++) c.out[i] = 7.0f; /* the gaps must keep this */
    double *rstd = malloc((size_t)N * heads * sizeof(double)), *ref = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) ref[i] = 7.0;
    for (int h = 0; h < heads; h++)
        for (int r = 0; r < N; r++) {
            const int64_t o = r * ld + h * C;
            double ss = 0;
            for (int k = 0; k < C; k++) ss += (double)c.x[o + k] * c.x[o + k];
            rstd[h * N + r] = 1 / sqrt(ss / C + 1e-5);
            for (int k = 0; k < C; k++) ref[o + k] = c.x[o + k] * rstd[h * N + r] * c.w[k];
        }
    rms_loss(&c);
    char buf[96];
    snprintf(buf, sizeof buf, "rmsnorm heads %d ld %ld rstd", heads, (long)ld);
    check_vec(buf, c.rstd, rstd, N * heads, 1e-6, 1e-7);
    snprintf(buf, sizeof buf, "rmsnorm heads %d ld %ld out (and gaps untouched)", heads, (long)ld);
    check_vec(buf, c.out, ref, n, 1e-5, 1e-6);

    float *dx = zerov(n), *dw = zerov(C), *x0 = dupv(c.x, n);
    be.rmsnorm_bwd(&be, dx, dw, c.R, c.x, c.w, c.rstd, N, heads, C, ld);
    snprintf(buf, sizeof buf, "rmsnorm heads %d ld %ld dx (gaps 0)", heads, (long)ld);
    check_fd(buf, rms_loss, &c, c.x, dx, n);
    snprintf(buf, sizeof buf, "rmsnorm heads %d ld %ld dw", heads, (long)ld);
    check_fd(buf, rms_loss, &c, c.w, dw, C);
    rms_loss(&c); /* rstd of the unperturbed input */
    float *dx1 = dupv(dx, n), *dw1 = dupv(dw, C);
    be.rmsnorm_bwd(&be, dx, dw, c.R, x0, c.w, c.rstd, N, heads, C, ld);
    check_doubled("rmsnorm dx", dx1, dx, n);
    check_doubled("rmsnorm dw", dw1, dw, C);
    /* a frozen weight: dw NULL, dx accumulates as before */
    be.rmsnorm_bwd(&be, dx, NULL, c.R, x0, c.w, c.rstd, N, heads, C, ld);
    for (int64_t i = 0; i < n; i++) dx1[i] *= 3;
    check_vecf("rmsnorm_bwd dw NULL", dx, dx1, n, 1e-5, 1e-6);
    free(c.x), free(c.w), free(c.out), free(c.rstd), free(c.R), free(ref), free(rstd), free(dx), free(dw), free(x0),
        free(dx1), free(dw1);
}

static void test_rmsnorm(void)
{
    rms_case(1, C);
    rms_case(1, RLD);
    rms_case(3, 3 * C + 5); /* three heads in a row, then a part no norm touches (a v part) */
}

/* ---------------------------------------------------------------- RoPE */

/* Heads 0..RNH-1 of rows RSTRIDE apart are rotated; the rest of each row (a v part) is not. */
enum { RHS = 8, RNH = 3, RSTRIDE = RNH * RHS + 5 };

struct rp { float *x, *out, *R, *inv; const int32_t *pos; };

static double rope_loss(void *c_)
{
    struct rp *c = c_;
    memcpy(c->out, c->x, N * RSTRIDE * sizeof(float));
    be.rope(&be, c->out, N, RNH, RHS, RSTRIDE, c->pos, T, c->inv, 0);
    return proj(c->out, c->R, N * RSTRIDE);
}

static void rope_case(const int32_t *pos)
{
    const int64_t n = N * RSTRIDE;
    struct rp c = {randv(n, 1), zerov(n), randv(n, 1), zerov(RHS / 2), pos};
    for (int i = 0; i < RHS / 2; i++) c.inv[i] = (float)(1.0 / pow(10000.0, 2.0 * i / RHS)) * 3.0f;
    const char *pn = pos ? "pos given" : "pos = n % T";
    char buf[96];
    /* closed form: pair (i, i + hs/2) rotated by pos * inv_freq[i], in double */
    double *ref = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) ref[i] = c.x[i];
    for (int r = 0; r < N; r++) {
        double p = pos ? pos[r] : r % T;
        for (int h = 0; h < RNH; h++)
            for (int i = 0; i < RHS / 2; i++) {
                double ang = (double)(float)(p * c.inv[i]), a = c.x[r * RSTRIDE + h * RHS + i],
                       b = c.x[r * RSTRIDE + h * RHS + i + RHS / 2];
                ref[r * RSTRIDE + h * RHS + i] = a * cos(ang) - b * sin(ang);
                ref[r * RSTRIDE + h * RHS + i + RHS / 2] = b * cos(ang) + a * sin(ang);
            }
    }
    rope_loss(&c);
    snprintf(buf, sizeof buf, "rope (%s) against the closed form", pn);
    check_vec(buf, c.out, ref, n, 1e-5, 1e-6);
    /* the backward: rotating R by -angle is the gradient of sum(rope(x) * R) */
    float *g = dupv(c.R, n);
    be.rope(&be, g, N, RNH, RHS, RSTRIDE, pos, T, c.inv, 1);
    snprintf(buf, sizeof buf, "rope (%s) inverse = gradient", pn);
    check_fd(buf, rope_loss, &c, c.x, g, n);
    /* inverse is the exact transpose: <rope(y), z> = <y, rope_inverse(z)> */
    float *y = randv(n, 1), *z = randv(n, 1), *ry = dupv(y, n), *iz = dupv(z, n);
    be.rope(&be, ry, N, RNH, RHS, RSTRIDE, pos, T, c.inv, 0);
    be.rope(&be, iz, N, RNH, RHS, RSTRIDE, pos, T, c.inv, 1);
    double d1 = 0, d2 = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) d1 += (double)ry[i] * z[i], d2 += (double)y[i] * iz[i], mag += fabs(y[i] * z[i]);
    CHECK(fabs(d1 - d2) <= 1e-6 * mag, "rope (%s): <Ry, z> %.9g != <y, R^T z> %.9g", pn, d1, d2);
    /* and undoes the forward */
    be.rope(&be, ry, N, RNH, RHS, RSTRIDE, pos, T, c.inv, 1);
    snprintf(buf, sizeof buf, "rope (%s) inverse of forward", pn);
    check_vecf(buf, ry, y, n, 1e-6, 1e-6);
    free(c.x), free(c.out), free(c.R), free(c.inv), free(ref), free(g), free(y), free(z), free(ry), free(iz);
}

static void test_rope(void)
{
    rope_case(NULL);
    int32_t pos[N];
    for (int i = 0; i < N; i++) pos[i] = (i * 7919) % 4099; /* packed documents: any positions */
    rope_case(pos);
}

/* ---------------------------------------------------------------- SwiGLU */

enum { SF = 6 };

struct sw { float *gu, *out, *R; };

static double swiglu_loss(void *c_)
{
    struct sw *c = c_;
    be.swiglu_fwd(&be, c->out, c->gu, N, SF);
    return proj(c->out, c->R, N * SF);
}

static void test_swiglu(void)
{
    struct sw c = {randv(N * 2 * SF, 4), zerov(N * SF), randv(N * SF, 1)};
    double *ref = malloc(N * SF * sizeof(double));
    for (int r = 0; r < N; r++)
        for (int f = 0; f < SF; f++) {
            double g = c.gu[r * 2 * SF + f], u = c.gu[r * 2 * SF + SF + f];
            ref[r * SF + f] = g / (1 + exp(-g)) * u;
        }
    swiglu_loss(&c);
    check_vec("swiglu_fwd", c.out, ref, N * SF, 1e-6, 1e-7);
    float *dgu = zerov(N * 2 * SF);
    poison(dgu, N * 2 * SF); /* overwritten */
    be.swiglu_bwd(&be, dgu, c.R, c.gu, N, SF);
    check_fd("swiglu dgu", swiglu_loss, &c, c.gu, dgu, N * 2 * SF);
    free(c.gu), free(c.out), free(c.R), free(ref), free(dgu);
}

/* ---------------------------------------------------------------- gelu, add */

struct gl { float *x, *out, *R; };

static double gelu_loss(void *c_)
{
    struct gl *c = c_;
    be.gelu_fwd(&be, c->out, c->x, N * C);
    return proj(c->out, c->R, N * C);
}

static void test_gelu_add(void)
{
    struct gl c = {randv(N * C, 4), zerov(N * C), randv(N * C, 1)};
    double *ref = malloc(N * C * sizeof(double));
    for (int i = 0; i < N * C; i++) {
        double x = c.x[i];
        ref[i] = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    }
    gelu_loss(&c);
    check_vec("gelu_fwd", c.out, ref, N * C, 1e-5, 1e-6);
    float *dx = zerov(N * C);
    be.gelu_bwd(&be, dx, c.x, c.R, N * C);
    check_fd("gelu dx", gelu_loss, &c, c.x, dx, N * C);
    float *dx1 = dupv(dx, N * C);
    be.gelu_bwd(&be, dx, c.x, c.R, N * C);
    check_doubled("gelu dx", dx1, dx, N * C);

    int ok = 1;
    be.add(&be, dx, c.x, c.R, N * C);
    for (int i = 0; i < N * C; i++) ok &= dx[i] == c.x[i] + c.R[i];
    CHECK(ok, "add != a + b");
    free(c.x), free(c.out), free(c.R), free(ref), free(dx), free(dx1);
}

/* ---------------------------------------------------------------- matmul + gelu */

/* A two-layer MLP as model.c runs it: pre = x @ w1^T + b1, h = gelu(pre), out = h @ w2^T, with
 * x[N,K], w1[OC,K], w2[C,OC]; the loss is proj(out, R). */
struct mg { float *x, *w1, *b1, *w2, *pre, *h, *out, *R; };

static double mg_loss(void *c_)
{
    struct mg *c = c_;
    be.matmul_gelu_fwd(&be, c->h, c->pre, c->x, c->w1, c->b1, N, K, OC);
    be.matmul_fwd(&be, c->out, c->h, c->w2, NULL, N, OC, C);
    return proj(c->out, c->R, N * C);
}

/* the same through the unfused ops, perturbing pre directly: d loss / d pre */
static double mg_pre_loss(void *c_)
{
    struct mg *c = c_;
    be.gelu_fwd(&be, c->h, c->pre, N * OC);
    be.matmul_fwd(&be, c->out, c->h, c->w2, NULL, N, OC, C);
    return proj(c->out, c->R, N * C);
}

static void test_matmul_gelu(void)
{
    struct mg c = {randv(N * K, 1), randv(OC * K, 1), randv(OC, 1), randv(C * OC, 1),
                   zerov(N * OC), zerov(N * OC), zerov(N * C), randv(N * C, 1)};
    /* forward: the definition in double, and the composition matmul_fwd + gelu_fwd */
    double *rpre = malloc(N * OC * sizeof(double)), *rh = malloc(N * OC * sizeof(double));
    float *cpre = zerov(N * OC), *ch = zerov(N * OC);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        float *bias = with_bias ? c.b1 : NULL;
        ref_matmul(rpre, c.x, c.w1, bias, N, K, OC);
        for (int i = 0; i < N * OC; i++) {
            double s = rpre[i];
            rh[i] = 0.5 * s * (1 + tanh(sqrt(2 / M_PI) * (s + 0.044715 * s * s * s)));
        }
        memset(c.pre, 0x7f, N * OC * sizeof(float)); /* both outputs are overwritten */
        memset(c.h, 0x7f, N * OC * sizeof(float));
        be.matmul_gelu_fwd(&be, c.h, c.pre, c.x, c.w1, bias, N, K, OC);
        check_vec(with_bias ? "matmul_gelu_fwd pre, bias" : "matmul_gelu_fwd pre", c.pre, rpre,
                  N * OC, 1e-6, 1e-6);
        check_vec(with_bias ? "matmul_gelu_fwd out, bias" : "matmul_gelu_fwd out", c.h, rh, N * OC,
                  1e-5, 1e-6);
        be.matmul_fwd(&be, cpre, c.x, c.w1, bias, N, K, OC);
        be.gelu_fwd(&be, ch, cpre, N * OC);
        check_vecf("matmul_gelu_fwd pre == matmul_fwd", c.pre, cpre, N * OC, 1e-6, 1e-7);
        check_vecf("matmul_gelu_fwd out == gelu_fwd(matmul_fwd)", c.h, ch, N * OC, 1e-6, 1e-7);
    }

    /* backward: dpre = gelu'(pre) * (R @ w2), overwriting whatever dpre held */
    mg_loss(&c);
    float *dpre = malloc(N * OC * sizeof(float));
    for (int i = 0; i < N * OC; i++) dpre[i] = NAN; /* not read */
    be.matmul_dgelu_bwd(&be, dpre, c.R, c.w2, c.pre, N, OC, C);
    /* the composition: dh = R @ w2 (matmul_bwd's dx), dpre = gelu_bwd(pre, dh), from zeros */
    float *dh = zerov(N * OC), *dw2 = zerov(C * OC), *comp = zerov(N * OC);
    be.matmul_bwd(&be, dh, dw2, NULL, c.R, c.h, c.w2, N, OC, C, 1);
    be.gelu_bwd(&be, comp, c.pre, dh, N * OC);
    check_vecf("matmul_dgelu_bwd == gelu_bwd(matmul_bwd dx)", dpre, comp, N * OC, 1e-5, 1e-6);
    float *dpre1 = dupv(dpre, N * OC);
    be.matmul_dgelu_bwd(&be, dpre, c.R, c.w2, c.pre, N, OC, C);
    check_bits("matmul_dgelu_bwd overwrites (a second call gives the same)", dpre, dpre1,
               N * OC * sizeof(float));
    float *pre0 = dupv(c.pre, N * OC);
    check_fd("matmul_dgelu dpre", mg_pre_loss, &c, c.pre, dpre, N * OC);
    memcpy(c.pre, pre0, N * OC * sizeof(float));

    /* the whole MLP's first layer as model.c differentiates it: dpre, then matmul_bwd(x, w1, b1) */
    float *dx = zerov(N * K), *dw1 = zerov(OC * K), *db1 = zerov(OC);
    be.matmul_bwd(&be, dx, dw1, db1, dpre, c.x, c.w1, N, K, OC, 1);
    check_fd("matmul_gelu dx", mg_loss, &c, c.x, dx, N * K);
    check_fd("matmul_gelu dw", mg_loss, &c, c.w1, dw1, OC * K);
    check_fd("matmul_gelu dbias", mg_loss, &c, c.b1, db1, OC);
    free(c.x), free(c.w1), free(c.b1), free(c.w2), free(c.pre), free(c.h), free(c.out), free(c.R);
    free(rpre), free(rh), free(cpre), free(ch), free(dpre), free(dh), free(dw2), free(comp);
    free(dpre1), free(pre0), free(dx), free(dw1), free(db1);
}

/* ---------------------------------------------------------------- cross-entropy */

struct xe { float *logits, *losses; int32_t *tgt; float dloss; };

static double xent_loss(void *c_)
{
    struct xe *c = c_;
    be.xent(&be, c->losses, c->logits, c->tgt, N, V, VP, 0.0f); /* dloss 0: logits untouched */
    double s = 0;
    for (int n = 0; n < N; n++) s += c->losses[n];
    return s * c->dloss;
}

static void test_xent(void)
{
    struct xe c = {randv(N * VP, 3), zerov(N), randtok(N, V), 0.37f};
    c.tgt[2] = -1, c.tgt[7] = -100; /* ignored rows */
    for (int n = 0; n < N; n++) /* huge padded logits must not enter the softmax */
        for (int j = V; j < VP; j++) c.logits[n * VP + j] = 1e4f;
    float *before = dupv(c.logits, N * VP);
    double ref[N];
    for (int n = 0; n < N; n++) {
        const float *x = c.logits + n * VP;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        for (int j = 0; j < V; j++) s += exp(x[j] - mx);
        ref[n] = c.tgt[n] < 0 ? 0 : -(x[c.tgt[n]] - mx - log(s));
    }
    xent_loss(&c);
    check_vec("xent losses", c.losses, ref, N, 1e-6, 1e-6);
    check_bits("xent with dloss 0 leaves logits", c.logits, before, N * VP * sizeof(float));

    float *g = dupv(c.logits, N * VP);
    be.xent(&be, c.losses, g, c.tgt, N, V, VP, c.dloss);
    check_vec("xent losses (with gradient)", c.losses, ref, N, 1e-6, 1e-6);
    check_fd("xent dlogits", xent_loss, &c, c.logits, g, N * VP);
    int pad0 = 1, ign0 = 1;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < VP; j++) {
            if (j >= V) pad0 &= g[n * VP + j] == 0;
            if (c.tgt[n] < 0) ign0 &= g[n * VP + j] == 0;
        }
    CHECK(pad0, "xent: padded columns must get zero gradient");
    CHECK(ign0, "xent: ignored rows must get zero gradient");
    free(c.logits), free(c.losses), free(c.tgt), free(before), free(g);
}

/* ---------------------------------------------------------------- adamw */

static void test_adamw(void)
{
    enum { n = 37 };
    for (int mode = 0; mode < 2; mode++) {
        float *p = randv(n, 1), *m = zerov(n), *v = zerov(n), *p16 = zerov(n);
        double rp[n], rm[n] = {0}, rv[n] = {0};
        for (int i = 0; i < n; i++) rp[i] = p[i];
        zinf_adamw_args a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.1f, .grad_scale = 0.5f, .adam_w_mode = mode};
        for (int t = 1; t <= 3; t++) {
            float *g = randv(n, 2);
            a.bias_correction1 = 1.0f - powf(a.beta1, (float)t);
            a.bias_correction2 = 1.0f - powf(a.beta2, (float)t);
            be.adamw(&be, p, p16, g, ZINF_F32, m, v, n, &a);
            /* torch.optim.Adam / AdamW, scalar, double */
            double b1 = a.beta1, b2 = a.beta2, lr = a.lr, wd = a.weight_decay;
            for (int i = 0; i < n; i++) {
                double gi = (double)g[i] * a.grad_scale;
                if (!mode) gi += wd * rp[i];
                rm[i] = b1 * rm[i] + (1 - b1) * gi;
                rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
                if (mode) rp[i] *= 1 - lr * wd;
                double mh = rm[i] / (1 - pow(b1, t)), vh = rv[i] / (1 - pow(b2, t));
                rp[i] -= lr * mh / (sqrt(vh) + a.eps);
            }
            free(g);
        }
        check_vec(mode ? "adamw p" : "adam(L2) p", p, rp, n, 1e-5, 1e-6);
        check_vec(mode ? "adamw m" : "adam(L2) m", m, rm, n, 1e-5, 1e-6);
        check_vec(mode ? "adamw v" : "adam(L2) v", v, rv, n, 1e-5, 1e-7);
        check_bits("adamw p16 == p", p16, p, n * sizeof(float));
        /* p16 NULL is allowed */
        float *g = randv(n, 1);
        be.adamw(&be, p, NULL, g, ZINF_F32, m, v, n, &a);
        CHECK(memcmp(p16, p, n * sizeof(float)) != 0, "adamw with p16 NULL still updates p");
        free(p), free(m), free(v), free(p16), free(g);
    }
}

/* ---------------------------------------------------------------- sumsq, scale, axpy */

static void test_vectors(void)
{
    const int64_t sizes[] = {0, 1, 255, 257, 1000, 100003};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int64_t n = sizes[s];
        float *x = randv(n, 3);
        double ref = 0;
        for (int64_t i = 0; i < n; i++) ref += (double)x[i] * x[i];
        double got = zinf_sumsq1(&be, x, n);
        CHECK_CLOSE(got, ref, 1e-12, 0, "sumsq");
        if (n > 1) {
            x[n / 2] = NAN;
            CHECK(isnan(zinf_sumsq1(&be, x, n)), "sumsq must propagate NaN (n=%ld)", (long)n);
            x[n / 2] = INFINITY;
            CHECK(isinf(zinf_sumsq1(&be, x, n)), "sumsq must propagate Inf (n=%ld)", (long)n);
        }
        free(x);
    }

    float *x = randv(1000, 1), *y = randv(1000, 1), *y0 = dupv(y, 1000), *x0 = dupv(x, 1000);
    float *z = randv(1000, 1);
    be.axpy(&be, y, x, 1000, -0.75f);
    be.scale_to(&be, z, x, 1000, 1.0f / 3.0f);
    be.scale(&be, x, 1000, 3.0f);
    int ok = 1;
    for (int i = 0; i < 1000; i++)
        ok &= y[i] == y0[i] + -0.75f * x0[i] && x[i] == x0[i] * 3.0f && z[i] == x0[i] * (1.0f / 3.0f);
    CHECK(ok, "axpy/scale/scale_to");
    be.scale_to(&be, x, x, 1000, 0.5f); /* in place */
    ok = 1;
    for (int i = 0; i < 1000; i++) ok &= x[i] == x0[i] * 3.0f * 0.5f;
    CHECK(ok, "scale_to in place");
    free(x), free(y), free(y0), free(x0), free(z);
}

/* ---------------------------------------------------------------- determinism */

/* Runs every op with a reduction on sizes big enough to go parallel, writing all outputs to out
 * (which must be zeroed): the same bits must come back on every run and every thread count. */
enum { DB = 4, DT = 64, DC = 64, DNH = 4, DK = 48, DV = 50, DN = DB * DT };
enum {
    D_OUT = DN * DC, D_LSE = DB * DNH * DT, D_QKV = DN * 3 * DC, D_DX = DN * DK, D_DW = DC * DK,
    D_TOTAL = D_OUT + D_LSE + D_QKV + DV * DC + DT * DC + DN * DC + 2 * DC + D_DX + D_DW + DC + 1
};

static void det_run(float *o, const float *qkv, const float *dout, const float *x,
                    const int32_t *tok, const float *xk)
{
    float *out = o, *lse = out + D_OUT, *dqkv = lse + D_LSE, *dwte = dqkv + D_QKV,
          *dwpe = dwte + DV * DC, *dx = dwpe + DT * DC, *dw = dx + DN * DC, *db = dw + DC,
          *mdx = db + DC, *mdw = mdx + D_DX, *mdb = mdw + D_DW, *ss = mdb + DC;
    be.attention_fwd(&be, out, lse, qkv, DB, DT, DNH, DNH, DC / DNH, NULL);
    be.attention_bwd(&be, dqkv, dout, qkv, out, lse, DB, DT, DNH, DNH, DC / DNH, NULL);
    be.encoder_bwd(&be, dwte, dwpe, dout, tok, DB, DT, DC);
    float *mean = zerov(DN), *rstd = zerov(DN), *lo = zerov(DN * DC);
    be.layernorm_fwd(&be, lo, mean, rstd, x, qkv, qkv + DC, DN, DC);
    be.layernorm_bwd(&be, dx, dw, db, dout, x, qkv, mean, rstd, DN, DC);
    be.matmul_bwd(&be, mdx, mdw, mdb, dout, xk, x, DN, DK, DC, 1);
    *ss = (float)zinf_sumsq1(&be, qkv, D_QKV);
    free(mean), free(rstd), free(lo);
}

static void test_determinism(void)
{
    float *qkv = randv(D_QKV, 1), *dout = randv(DN * DC, 1), *x = randv(DN * DC, 1),
          *xk = randv(D_DX, 1);
    int32_t *tok = randtok(DN, 7); /* few distinct tokens: many collisions in dwte */
    float *r0 = zerov(D_TOTAL), *r1 = zerov(D_TOTAL), *r2 = zerov(D_TOTAL);
    int threads = omp_get_max_threads();
    det_run(r0, qkv, dout, x, tok, xk);
    det_run(r1, qkv, dout, x, tok, xk);
    check_bits("repeat run", r0, r1, D_TOTAL * sizeof(float));
    omp_set_num_threads(1);
    det_run(r2, qkv, dout, x, tok, xk);
    check_bits("1 thread vs default", r0, r2, D_TOTAL * sizeof(float));
    memset(r2, 0, D_TOTAL * sizeof(float));
    omp_set_num_threads(3);
    det_run(r2, qkv, dout, x, tok, xk);
    check_bits("3 threads vs default", r0, r2, D_TOTAL * sizeof(float));
    omp_set_num_threads(threads);
    free(qkv), free(dout), free(x), free(xk), free(tok), free(r0), free(r1), free(r2);
}

int main(void)
{
    if (zinf_backend_cpu_init(&be) != 0) {
        fprintf(stderr, "cpu backend init failed\n");
        return 1;
    }
    test_memory();
    test_encoder();
    test_layernorm();
    test_matmul();
    test_attention();
    test_gqa();
    test_rmsnorm();
    test_rope();
    test_swiglu();
    test_gelu_add();
    test_matmul_gelu();
    test_xent();
    test_adamw();
    test_vectors();
    test_determinism();
    zinf_backend_cpu_free(&be);
    return check_done("test_ops");
}
