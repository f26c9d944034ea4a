/* cpu: the reference backend. fp32 everywhere, OpenMP over independent rows, CBLAS (OpenBLAS) for
 * the matmuls. Memory of every place is ordinary host memory; streams and events are dummy handles
 * because every operation has finished when it returns (timed events just read the clock).
 *
 * Determinism: every reduction that feeds a parameter gradient or a norm runs in a fixed order
 * that does not depend on the thread count (parallel over output channels, rows sequential
 * inside; sumsq over a fixed number of chunks). No atomics anywhere. */
#include "kernels.h"
#include "cpu/adamw.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Below this many elements an OpenMP team costs more than it saves. */
#define PAR_MIN 4096
/* Channels per task in the channel-parallel reductions: 32 floats = two cache lines, so tasks
 * never write the same line. */
#define CH_BLOCK 32
/* sumsq splits its input into this many chunks whatever the thread count. */
#define SUMSQ_CHUNKS 256

#define NBLOCKS(n, b) (((n) + (b) - 1) / (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* ---------------------------------------------------------------- memory, streams, events */

static void *cpu_alloc(zinf_backend *be, zinf_place place, size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) return NULL;
    memset(p, 0, bytes);
    return p;
}

static void cpu_free(zinf_backend *be, zinf_place place, void *p) { free(p); }

static int cpu_copy(zinf_backend *be, void *dst, const void *src, size_t bytes, zinf_stream *s)
{
    if (bytes && dst != src) memcpy(dst, src, bytes);
    return 0;
}

static int cpu_memset0(zinf_backend *be, void *dst, size_t bytes, zinf_stream *s)
{
    if (bytes) memset(dst, 0, bytes);
    return 0;
}

/* Streams and events only need to be distinct from NULL; nothing is ever queued on them. */
static char dummy_stream, dummy_event;

static zinf_stream *cpu_stream_new(zinf_backend *be) { return (zinf_stream *)&dummy_stream; }
static void cpu_stream_free(zinf_backend *be, zinf_stream *s) {}
static int cpu_stream_sync(zinf_backend *be, zinf_stream *s) { return 0; }
static zinf_event *cpu_event_new(zinf_backend *be) { return (zinf_event *)&dummy_event; }

/* Timed events hold the monotonic clock at their recording: every operation here has finished
 * when it returns, so that is when everything issued before the event was done. */
typedef struct { double t; } cpu_timed_event;

static zinf_event *cpu_event_new_timed(zinf_backend *be) { return calloc(1, sizeof(cpu_timed_event)); }
static void cpu_event_free(zinf_backend *be, zinf_event *e)
{
    if (e && e != (zinf_event *)&dummy_event) free(e);
}
static int cpu_event_record(zinf_backend *be, zinf_event *e, zinf_stream *s)
{
    if (e && e != (zinf_event *)&dummy_event) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ((cpu_timed_event *)e)->t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    }
    return 0;
}
static double cpu_event_elapsed_ms(zinf_backend *be, zinf_event *a, zinf_event *b)
{
    if (!a || !b || a == (zinf_event *)&dummy_event || b == (zinf_event *)&dummy_event) return -1.0;
    return 1e3 * (((cpu_timed_event *)b)->t - ((cpu_timed_event *)a)->t);
}
static int cpu_stream_wait(zinf_backend *be, zinf_stream *s, zinf_event *e) { return 0; }
static int cpu_sync(zinf_backend *be) { return 0; }

/* ---------------------------------------------------------------- encoder */

static void cpu_encoder_fwd(zinf_backend *be, void *out_, const int32_t *tok, const void *wte_,
                            const void *wpe_, int B, int T, int C)
{
    float *out = out_;
    const float *wte = wte_, *wpe = wpe_;
    int64_t N = (int64_t)B * T;
#pragma omp parallel for if (N * C > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *e = wte + (int64_t)tok[n] * C, *p = wpe ? wpe + (n % T) * C : NULL;
        float *o = out + n * C;
        if (p)
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        else
            memcpy(o, e, (size_t)C * sizeof *o);
    }
}

static void cpu_encoder_bwd(zinf_backend *be, void *dwte_, void *dwpe_, const void *dout_,
                            const int32_t *tok, int B, int T, int C)
{
    float *dwte = dwte_, *dwpe = dwpe_;
    const float *dout = dout_;
    int64_t N = (int64_t)B * T;
    /* Tokens repeat, so rows of dwte receive several contributions: split the work over channel
     * blocks and walk the tokens in order inside each, which fixes the summation order. The
     * position gradient sums over the batch in order b = 0..B-1 the same way. */
#pragma omp parallel for if (N * C > PAR_MIN)
    for (int cb = 0; cb < NBLOCKS(C, CH_BLOCK); cb++) {
        int c0 = cb * CH_BLOCK, c1 = MIN(C, c0 + CH_BLOCK);
        for (int64_t n = 0; n < N; n++) {
            const float *d = dout + n * C;
            float *gte = dwte + (int64_t)tok[n] * C, *gpe = dwpe ? dwpe + (n % T) * C : NULL;
            for (int c = c0; c < c1; c++) gte[c] += d[c];
            if (gpe)
                for (int c = c0; c < c1; c++) gpe[c] += d[c];
        }
    }
}

/* dst rows (ld_dst apart) = src rows (ld_src apart), cols compute-dtype elements each */
static void cpu_copy_rows(zinf_backend *be, void *dst_, int64_t ld_dst, const void *src_, int64_t ld_src, int64_t rows,
                          int64_t cols)
{
    (void)be;
    float *dst = dst_;
    const float *src = src_;
#pragma omp parallel for if (rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) memcpy(dst + r * ld_dst, src + r * ld_src, (size_t)cols * sizeof *dst);
}

/* ---------------------------------------------------------------- layernorm */

static void cpu_layernorm_fwd(zinf_backend *be, void *out_, float *mean, float *rstd,
                              const void *x_, const void *w_, const void *b_, int64_t N, int C)
{
    float *out = out_;
    const float *x = x_, *w = w_, *b = b_;
#pragma omp parallel for if (N * C > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * C;
        double s = 0, ss = 0;
        for (int c = 0; c < C; c++) s += xr[c];
        double m = s / C;
        for (int c = 0; c < C; c++) ss += (xr[c] - m) * (xr[c] - m);
        float r = (float)(1.0 / sqrt(ss / C + 1e-5)); /* biased variance, as PyTorch */
        float *o = out + n * C;
        for (int c = 0; c < C; c++) o[c] = ((xr[c] - (float)m) * r) * w[c] + b[c];
        mean[n] = (float)m;
        rstd[n] = r;
    }
}

static void cpu_layernorm_bwd(zinf_backend *be, void *dx_, void *dw_, void *db_, const void *dout_,
                              const void *x_, const void *w_, const float *mean, const float *rstd,
                              int64_t N, int C)
{
    float *dx = dx_, *dw = dw_, *db = db_;
    const float *dout = dout_, *x = x_, *w = w_;
    /* input gradient: rows are independent */
#pragma omp parallel for if (N * C > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * C, *dr = dout + n * C;
        float m = mean[n], r = rstd[n];
        double sg = 0, sgn = 0; /* sums of dnorm and dnorm * norm */
        for (int c = 0; c < C; c++) {
            float g = dr[c] * w[c];
            sg += g;
            sgn += g * ((xr[c] - m) * r);
        }
        float mg = (float)(sg / C), mgn = (float)(sgn / C);
        float *dxr = dx + n * C;
        for (int c = 0; c < C; c++) {
            float norm = (xr[c] - m) * r;
            dxr[c] += (dr[c] * w[c] - mg - norm * mgn) * r;
        }
    }
    /* parameter gradients: a reduction over rows, parallel over channel blocks only */
#pragma omp parallel for if (N * C > PAR_MIN)
    for (int cb = 0; cb < NBLOCKS(C, CH_BLOCK); cb++) {
        int c0 = cb * CH_BLOCK, c1 = MIN(C, c0 + CH_BLOCK);
        float aw[CH_BLOCK] = {0}, ab[CH_BLOCK] = {0};
        for (int64_t n = 0; n < N; n++) {
            const float *xr = x + n * C, *dr = dout + n * C;
            float m = mean[n], r = rstd[n];
            for (int c = c0; c < c1; c++) {
                aw[c - c0] += dr[c] * ((xr[c] - m) * r);
                ab[c - c0] += dr[c];
            }
        }
        for (int c = c0; c < c1; c++) {
            dw[c] += aw[c - c0];
            db[c] += ab[c - c0];
        }
    }
}

/* ---------------------------------------------------------------- matmul */

/* CBLAS takes int dimensions; the model's N = B*T and channel counts fit comfortably.
 * out = x @ w^T (+ bias) (+ res): out starts as res (+ bias) or bias, and the GEMM adds onto it. */
static void cpu_matmul_fwd_res(zinf_backend *be, void *out_, const void *x, const void *w,
                               const void *bias_, const void *res_, int64_t N, int K, int OC)
{
    float *out = out_;
    const float *bias = bias_, *res = res_;
    float beta = 0.0f;
    if (bias || res) {
#pragma omp parallel for if (N * OC > PAR_MIN)
        for (int64_t n = 0; n < N; n++) {
            float *o = out + n * OC;
            if (res && res != out) memcpy(o, res + n * OC, (size_t)OC * sizeof(float));
            if (bias && res)
                for (int c = 0; c < OC; c++) o[c] += bias[c];
            else if (bias)
                memcpy(o, bias, (size_t)OC * sizeof(float));
        }
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, OC, K, 1.0f, x, K, w, K, beta,
                out, OC);
}
static void cpu_matmul_fwd(zinf_backend *be, void *out, const void *x, const void *w,
                           const void *bias, int64_t N, int K, int OC)
{
    cpu_matmul_fwd_res(be, out, x, w, bias, NULL, N, K, OC);
}

static void cpu_matmul_bwd(zinf_backend *be, void *dx, void *dw, void *dbias_, const void *dout_,
                           const void *x, const void *w, int64_t N, int K, int OC, int acc)
{
    const float *dout = dout_;
    float *dbias = dbias_;
    /* overwrite as accumulating from zeros, so that the bits are those of the zeroed gradient
     * (0 + -0 is +0: the reference's rule) */
    if (!acc) {
        memset(dw, 0, (size_t)OC * K * sizeof(float));
        if (dbias) memset(dbias, 0, (size_t)OC * sizeof(float));
    }
    if (dx) /* dx[N,K] = dout[N,OC] @ w[OC,K] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, K, OC, 1.0f, dout, OC, w,
                    K, 0.0f, dx, K);
    /* dw[OC,K] += dout^T @ x[N,K] */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, K, (int)N, 1.0f, dout, OC, x, K, 1.0f,
                dw, K);
    if (dbias) {
#pragma omp parallel for if (N * OC > PAR_MIN)
        for (int ob = 0; ob < NBLOCKS(OC, CH_BLOCK); ob++) {
            int o0 = ob * CH_BLOCK, o1 = MIN(OC, o0 + CH_BLOCK);
            float acc[CH_BLOCK] = {0};
            for (int64_t n = 0; n < N; n++)
                for (int o = o0; o < o1; o++) acc[o - o0] += dout[n * OC + o];
            for (int o = o0; o < o1; o++) dbias[o] += acc[o - o0];
        }
    }
}

/* ---------------------------------------------------------------- attention */

/* a . b with eight independent partial sums, which the compiler can keep in vector registers
 * (a single running sum cannot be vectorized without reassociating); the order is fixed. */
static inline float dotf(const float *a, const float *b, int n)
{
    float acc[8] = {0};
    int e = 0;
    for (; e + 8 <= n; e += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[e + l] * b[e + l];
    for (; e < n; e++) acc[0] += a[e] * b[e];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* The scaled causal scores of one query against keys 0..n-1 of the same (b, h):
 * s[j] = scale * q . k_j, where k_j = k0 + j * stride. Forward and backward both call this, so
 * the backward recomputes bit-identical scores and gets p = exp(s - lse) from them. */
static void attn_scores(float *s, const float *q, const float *k0, int n, int hs, int64_t stride,
                        float scale)
{
    for (int j = 0; j < n; j++) s[j] = dotf(q, k0 + j * stride, hs) * scale;
}

/* Grouped-query layout (kernels.h): a qkv row is W = (NH + 2 NKV) hs wide, q head h at h*hs, its
 * kv head kh = h / (NH/NKV) at NH*hs + kh*hs (k) and (NH + NKV)*hs + kh*hs (v); out rows NH*hs.
 * Rows are processed one at a time with a scratch row of T scores (a VLA: T is small, and it
 * saves an allocation that could fail inside a void operation). */
static void cpu_attention_fwd(zinf_backend *be, void *out_, float *lse, const void *qkv_, int B,
                              int T, int NH, int NKV, int hs, const zinf_attn_rows *rows)
{
    const int32_t *kvs = rows ? rows->kv_start : NULL;
    float *out = out_;
    const float *qkv = qkv_;
    const int64_t W = (int64_t)(NH + 2 * NKV) * hs, C = (int64_t)NH * hs;
    const int G = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(3) if ((int64_t)B * NH * T * T * hs > PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                float s[T], acc[hs];
                const float *row0 = qkv + (int64_t)b * T * W;
                const float *q = row0 + i * W + h * hs;
                const int j0 = kvs ? kvs[(int64_t)b * T + i] : 0; /* the sample's first key */
                const float *k0 = row0 + C + (int64_t)(h / G) * hs, *v0 = k0 + (int64_t)NKV * hs;
                attn_scores(s + j0, q, k0 + j0 * W, i + 1 - j0, hs, W, scale);
                float mx = -INFINITY;
                for (int j = j0; j <= i; j++) mx = s[j] > mx ? s[j] : mx;
                double sum = 0; /* unnormalized weights exp(s - max), normalized at the end */
                for (int j = j0; j <= i; j++) sum += s[j] = expf(s[j] - mx);
                for (int e = 0; e < hs; e++) acc[e] = 0;
                for (int j = j0; j <= i; j++) {
                    const float *v = v0 + j * W;
                    for (int e = 0; e < hs; e++) acc[e] += s[j] * v[e];
                }
                float inv = (float)(1.0 / sum);
                float *o = out + ((int64_t)b * T + i) * C + h * hs;
                for (int e = 0; e < hs; e++) o[e] = acc[e] * inv;
                lse[((int64_t)b * NH + h) * T + i] = mx + (float)log(sum);
            }
}

/* dk_j and dv_j of kv head kh collect contributions from every query row i >= j of every query
 * head of its group, so each (b, kh) is one task that walks its heads in order and their rows in
 * order: the sums have a fixed order and tasks write disjoint channels. */
static void cpu_attention_bwd(zinf_backend *be, void *dqkv_, const void *dout_, const void *qkv_,
                              const void *out_, const float *lse, int B, int T, int NH, int NKV,
                              int hs, const zinf_attn_rows *rows)
{
    const int32_t *kvs = rows ? rows->kv_start : NULL;
    float *dqkv = dqkv_;
    const float *dout = dout_, *qkv = qkv_, *out = out_;
    const int64_t W = (int64_t)(NH + 2 * NKV) * hs, C = (int64_t)NH * hs, KV = (int64_t)NKV * hs;
    const int G = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) if ((int64_t)B * NH * T * T * hs > PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < NKV; kh++) {
            float s[T], dq[hs];
            const float *row0 = qkv + (int64_t)b * T * W, *k0 = row0 + C + kh * hs, *v0 = k0 + KV;
            float *drow0 = dqkv + (int64_t)b * T * W, *dk0 = drow0 + C + kh * hs, *dv0 = dk0 + KV;
            for (int i = 0; i < T; i++) { /* dqkv is overwritten: this task's channels start at 0 */
                for (int h = kh * G; h < kh * G + G; h++) memset(drow0 + i * W + h * hs, 0, (size_t)hs * sizeof(float));
                memset(dk0 + i * W, 0, (size_t)hs * sizeof(float));
                memset(dv0 + i * W, 0, (size_t)hs * sizeof(float));
            }
            for (int h = kh * G; h < kh * G + G; h++) {
                const float *lrow = lse + ((int64_t)b * NH + h) * T;
                for (int i = 0; i < T; i++) {
                    const float *q = row0 + i * W + h * hs;
                    const float *dor = dout + ((int64_t)b * T + i) * C + h * hs;
                    const float *orow = out + ((int64_t)b * T + i) * C + h * hs;
                    float D = dotf(dor, orow, hs); /* = sum_j p_ij dp_ij */
                    const int j0 = kvs ? kvs[(int64_t)b * T + i] : 0;
                    attn_scores(s + j0, q, k0 + j0 * W, i + 1 - j0, hs, W, scale);
                    for (int e = 0; e < hs; e++) dq[e] = 0;
                    for (int j = j0; j <= i; j++) {
                        const float *k = k0 + j * W, *v = v0 + j * W;
                        float *dk = dk0 + j * W, *dv = dv0 + j * W;
                        float p = expf(s[j] - lrow[i]);
                        float ds = p * (dotf(dor, v, hs) - D) * scale; /* includes the score scale */
                        for (int e = 0; e < hs; e++) {
                            dq[e] += ds * k[e];
                            dk[e] += ds * q[e];
                            dv[e] += p * dor[e];
                        }
                    }
                    float *dqr = drow0 + i * W + h * hs;
                    for (int e = 0; e < hs; e++) dqr[e] = dq[e];
                }
            }
        }
}

/* ---------------------------------------------------------------- RMSNorm, RoPE, SwiGLU */

static void cpu_rmsnorm_fwd(zinf_backend *be, void *out_, float *rstd, const void *x_, const void *w_,
                            int64_t N, int heads, int C, int64_t ld, float eps)
{
    float *out = out_;
    const float *x = x_, *w = w_;
#pragma omp parallel for collapse(2) if (N * heads * C > PAR_MIN)
    for (int h = 0; h < heads; h++)
        for (int64_t n = 0; n < N; n++) {
            const float *xr = x + n * ld + (int64_t)h * C;
            double ss = 0;
            for (int c = 0; c < C; c++) ss += (double)xr[c] * xr[c];
            float r = (float)(1.0 / sqrt(ss / C + (double)eps));
            float *o = out + n * ld + (int64_t)h * C;
            for (int c = 0; c < C; c++) o[c] = (xr[c] * r) * w[c];
            rstd[h * N + n] = r;
        }
}

/* y = x r w, r = (mean x^2 + eps)^-1/2: dx = r (g - xhat mean(g xhat)), g = dout w, xhat = x r */
static void cpu_rmsnorm_bwd(zinf_backend *be, void *dx_, void *dw_, const void *dout_, const void *x_,
                            const void *w_, const float *rstd, int64_t N, int heads, int C, int64_t ld)
{
    float *dx = dx_, *dw = dw_;
    const float *dout = dout_, *x = x_, *w = w_;
#pragma omp parallel for collapse(2) if (N * heads * C > PAR_MIN)
    for (int h = 0; h < heads; h++)
        for (int64_t n = 0; n < N; n++) {
            int64_t o = n * ld + (int64_t)h * C;
            const float *xr = x + o, *dr = dout + o;
            float r = rstd[h * N + n];
            double sgn = 0;
            for (int c = 0; c < C; c++) sgn += (dr[c] * w[c]) * (xr[c] * r);
            float mgn = (float)(sgn / C);
            float *dxr = dx + o;
            for (int c = 0; c < C; c++) dxr[c] += (dr[c] * w[c] - (xr[c] * r) * mgn) * r;
        }
    if (!dw) return;
    /* each group's sum over the rows is added into dw in turn */
#pragma omp parallel for if (N * heads * C > PAR_MIN)
    for (int cb = 0; cb < NBLOCKS(C, CH_BLOCK); cb++) {
        int c0 = cb * CH_BLOCK, c1 = MIN(C, c0 + CH_BLOCK);
        for (int h = 0; h < heads; h++) {
            float aw[CH_BLOCK] = {0};
            for (int64_t n = 0; n < N; n++) {
                int64_t o = n * ld + (int64_t)h * C;
                const float *xr = x + o, *dr = dout + o;
                float r = rstd[h * N + n];
                for (int c = c0; c < c1; c++) aw[c - c0] += dr[c] * (xr[c] * r);
            }
            for (int c = c0; c < c1; c++) dw[c] += aw[c - c0];
        }
    }
}

/* (a, b) = (x_i, x_{i+hs/2}) -> (a cos - b sin, b cos + a sin); inverse negates the angle */
static void cpu_rope(zinf_backend *be, void *x_, int64_t N, int nh, int hs, int64_t stride,
                     const int32_t *pos, int T, const float *inv_freq, int inverse)
{
    float *x = x_;
    const int half = hs / 2;
#pragma omp parallel for if (N * nh * hs > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        float p = (float)(pos ? pos[n] : (int32_t)(n % T));
        for (int i = 0; i < half; i++) {
            float ang = p * inv_freq[i], c = cosf(ang), sn = sinf(ang);
            if (inverse) sn = -sn;
            for (int h = 0; h < nh; h++) {
                float *r = x + n * stride + (int64_t)h * hs;
                float a = r[i], b = r[i + half];
                r[i] = a * c - b * sn;
                r[i + half] = b * c + a * sn;
            }
        }
    }
}

static inline float sigmoid_f(float g) { return 1.0f / (1.0f + expf(-g)); }

static void cpu_swiglu_fwd(zinf_backend *be, void *out_, const void *gu_, int64_t N, int F)
{
    float *out = out_;
    const float *gu = gu_;
#pragma omp parallel for if (N * F > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *g = gu + n * 2 * F, *u = g + F;
        float *o = out + n * F;
        for (int f = 0; f < F; f++) o[f] = g[f] * sigmoid_f(g[f]) * u[f];
    }
}

/* d/dg [g sig(g) u] = u sig(g) (1 + g (1 - sig(g))); d/du = silu(g) */
static void cpu_swiglu_bwd(zinf_backend *be, void *dgu_, const void *dout_, const void *gu_, int64_t N,
                           int F)
{
    float *dgu = dgu_;
    const float *dout = dout_, *gu = gu_;
#pragma omp parallel for if (N * F > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *g = gu + n * 2 * F, *u = g + F, *d = dout + n * F;
        float *dg = dgu + n * 2 * F, *du = dg + F;
        for (int f = 0; f < F; f++) {
            float sg = sigmoid_f(g[f]);
            dg[f] = d[f] * u[f] * sg * (1.0f + g[f] * (1.0f - sg));
            du[f] = d[f] * g[f] * sg;
        }
    }
}

/* ---------------------------------------------------------------- elementwise */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

static void cpu_gelu_fwd(zinf_backend *be, void *out_, const void *x_, int64_t n)
{
    float *out = out_;
    const float *x = x_;
#pragma omp parallel for if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        out[i] = 0.5f * v * (1.0f + tanhf(GELU_K * (v + 0.044715f * v * v * v)));
    }
}

/* d gelu(v) / dv */
static inline float gelu_grad(float v)
{
    float t = tanhf(GELU_K * (v + 0.044715f * v * v * v));
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
}

static void cpu_gelu_bwd(zinf_backend *be, void *dx_, const void *x_, const void *dout_, int64_t n)
{
    float *dx = dx_;
    const float *x = x_, *dout = dout_;
#pragma omp parallel for if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) dx[i] += dout[i] * gelu_grad(x[i]);
}

/* ---------------------------------------------------------------- matmul + gelu */

/* The composition of the unfused operations, which is what the reference is. */
static void cpu_matmul_gelu_fwd(zinf_backend *be, void *out, void *pre, const void *x,
                                const void *w, const void *bias, int64_t N, int K, int OC)
{
    cpu_matmul_fwd(be, pre, x, w, bias, N, K, OC);
    cpu_gelu_fwd(be, out, pre, N * OC);
}

/* dpre = gelu'(pre) * (dout @ w), overwriting dpre (beta 0: its old contents are not read) */
static void cpu_matmul_dgelu_bwd(zinf_backend *be, void *dpre_, const void *dout, const void *w,
                                 const void *pre_, int64_t N, int K, int OC)
{
    float *dpre = dpre_;
    const float *pre = pre_;
    if (N <= 0 || K <= 0) return;
    if (OC <= 0) {
        memset(dpre, 0, (size_t)N * K * sizeof(float));
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, K, OC, 1.0f, dout, OC, w, K,
                0.0f, dpre, K);
    int64_t n = N * K;
#pragma omp parallel for if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) dpre[i] *= gelu_grad(pre[i]);
}

static void cpu_add(zinf_backend *be, void *out_, const void *a_, const void *b_, int64_t n)
{
    float *out = out_;
    const float *a = a_, *b = b_;
#pragma omp parallel for if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* ---------------------------------------------------------------- cross-entropy */

static void cpu_xent(zinf_backend *be, float *losses, void *logits_, const int32_t *tgt, int64_t N,
                     int V, int Vp, float dloss)
{
    float *logits = logits_;
#pragma omp parallel for if (N * Vp > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        float *x = logits + n * Vp;
        int t = tgt[n]; /* < 0: ignored; otherwise the caller guarantees t < V */
        if (t < 0) {
            losses[n] = 0.0f;
            if (dloss != 0.0f) memset(x, 0, (size_t)Vp * sizeof(float));
            continue;
        }
        float mx = -INFINITY;
        for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        double sum = 0;
        for (int j = 0; j < V; j++) sum += exp((double)x[j] - mx);
        double logsum = log(sum);
        losses[n] = (float)(logsum - ((double)x[t] - mx));
        if (dloss != 0.0f) {
            for (int j = 0; j < V; j++) {
                double p = exp((double)x[j] - mx - logsum);
                x[j] = (float)((p - (j == t)) * dloss);
            }
            for (int j = V; j < Vp; j++) x[j] = 0.0f;
        }
    }
}

/* ---------------------------------------------------------------- optimizer and vectors */

/* the compute dtype is fp32 here, so p16 (when given) is an fp32 copy, and the gradient is fp32
 * whichever of the two gdt names */
static void cpu_adamw(zinf_backend *be, float *p, void *p16, const void *g, zinf_dtype gdt, float *m, float *v,
                      int64_t n, const zinf_adamw_args *a)
{
    (void)gdt;
    zinf_cpu_adamw(p, p16, ZINF_F32, (const float *)g, m, v, n, a);
}

/* A fixed number of chunks, each summed in double, then the chunk sums added in order: the result
 * is the same bits whatever the thread count. NaN and Inf propagate through the sums. */
static double cpu_sumsq1(const float *x, int64_t n)
{
    double part[SUMSQ_CHUNKS];
    int64_t len = NBLOCKS(n, SUMSQ_CHUNKS);
#pragma omp parallel for if (n > PAR_MIN)
    for (int k = 0; k < SUMSQ_CHUNKS; k++) {
        int64_t i0 = k * len, i1 = MIN(n, i0 + len);
        double s = 0;
        for (int64_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
        part[k] = s;
    }
    double s = 0;
    for (int k = 0; k < SUMSQ_CHUNKS; k++) s += part[k];
    return s;
}
/* xdt: fp32, the compute dtype here, either way */
static double cpu_sumsq(zinf_backend *be, int k, const void *const *x, const int64_t *n, zinf_dtype xdt)
{
    (void)xdt;
    double s = 0;
    for (int i = 0; i < k; i++) s += cpu_sumsq1((const float *)x[i], n[i]);
    return s;
}

static void cpu_scale(zinf_backend *be, float *x, int64_t n, float s)
{
#pragma omp parallel for if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

static void cpu_axpy(zinf_backend *be, float *y, const float *x, int64_t n, float a)
{
#pragma omp parallel for if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* the compute dtype is fp32 here, so accumulating it is axpy */
static void cpu_acc_f32(zinf_backend *be, float *y, const void *x, int64_t n, float a)
{
    cpu_axpy(be, y, (const float *)x, n, a);
}

static void cpu_scale_to(zinf_backend *be, void *y, const void *x, int64_t n, float a)
{
    float *yy = y;
    const float *xx = x;
#pragma omp parallel for if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) yy[i] = a * xx[i];
}

static int cpu_event_query(zinf_backend *be, zinf_event *e) { return 1; }

static void cpu_to_f32(zinf_backend *be, float *dst, const void *src, int64_t n)
{
    if (n > 0 && dst != src) memcpy(dst, src, (size_t)n * sizeof(float));
}

static void cpu_from_f32(zinf_backend *be, void *dst, const float *src, int64_t n)
{
    if (n > 0 && dst != src) memcpy(dst, src, (size_t)n * sizeof(float));
}

/* ---------------------------------------------------------------- init */

int zinf_backend_cpu_init(zinf_backend *be)
{
    *be = (zinf_backend){
        .name = "cpu",
        .cdt = ZINF_F32,
        .impl = NULL,
        .host_visible = 1,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .copy = cpu_copy,
        .memset0 = cpu_memset0,
        .stream_new = cpu_stream_new,
        .stream_free = cpu_stream_free,
        .stream_sync = cpu_stream_sync,
        .event_new = cpu_event_new,
        .event_new_timed = cpu_event_new_timed,
        .event_elapsed_ms = cpu_event_elapsed_ms,
        .event_free = cpu_event_free,
        .event_record = cpu_event_record,
        .stream_wait = cpu_stream_wait,
        .event_query = cpu_event_query,
        .sync = cpu_sync,
        .encoder_fwd = cpu_encoder_fwd,
        .encoder_bwd = cpu_encoder_bwd,
        .copy_rows = cpu_copy_rows,
        .layernorm_fwd = cpu_layernorm_fwd,
        .layernorm_bwd = cpu_layernorm_bwd,
        .matmul_fwd = cpu_matmul_fwd,
        .matmul_fwd_res = cpu_matmul_fwd_res,
        .matmul_bwd = cpu_matmul_bwd,
        .attention_fwd = cpu_attention_fwd,
        .attention_bwd = cpu_attention_bwd,
        .rmsnorm_fwd = cpu_rmsnorm_fwd,
        .rmsnorm_bwd = cpu_rmsnorm_bwd,
        .rope = cpu_rope,
        .swiglu_fwd = cpu_swiglu_fwd,
        .swiglu_bwd = cpu_swiglu_bwd,
        .matmul_gelu_fwd = cpu_matmul_gelu_fwd,
        .matmul_dgelu_bwd = cpu_matmul_dgelu_bwd,
        .gelu_fwd = cpu_gelu_fwd,
        .gelu_bwd = cpu_gelu_bwd,
        .add = cpu_add,
        .xent = cpu_xent,
        .adamw = cpu_adamw,
        .sumsq = cpu_sumsq,
        .scale = cpu_scale,
        .axpy = cpu_axpy,
        .acc_f32 = cpu_acc_f32,
        .scale_to = cpu_scale_to,
        .to_f32 = cpu_to_f32,
        .from_f32 = cpu_from_f32,
    };
    return 0;
}

void zinf_backend_cpu_free(zinf_backend *be) { memset(be, 0, sizeof *be); }
