/* test_backend_ops: every operation of kernels.h on the CUDA backend, against the CPU reference
 * backend, for each compute dtype (fp32, bf16, fp16), with random inputs (the way ggml's
 * test-backend-ops does). Exits 77 (skip) when no CUDA device is visible.
 *
 * Inputs are drawn in fp32, rounded to the compute dtype on the host, and the CPU backend runs on
 * the rounded values, so the reference sees exactly what the GPU sees; only the GPU's arithmetic
 * and its output rounding differ. Gradients start from random values, not zeros, because every
 * backward accumulates (+=).
 *
 * Error measure (one line per op/dtype/tensor): err_i = |got_i - ref_i| / (|ref_i| + rms(ref)),
 * i.e. relative, with the tensor's rms as the floor for entries near zero (for fp16 outputs,
 * |got - ref| is first reduced by 2^-24, the smallest fp16 subnormal: tiny gradients such as
 * softmax probabilities times 1/N round to 0 there). Pass when max err_i <= tol. Tolerances:
 *   fp32: 1e-5 elementwise / short rows; 5e-5 long reductions (matmul over K up to 3072, dw/db
 *         over N = 4096 rows, softmax over 50257 columns, attention over 1024 keys);
 *   bf16: 1e-2 (2.5 ulp; attention's P and dS are rounded to bf16 for the tensor cores: 2e-2
 *         forward, 8e-2 backward, whose gradients are compared on their own (they overwrite
 *         dqkv) and sum up to 1024 rounded P or dS terms per element: the largest of 3.1M
 *         elements at the GPT-2 shape measured 2.7e-2 to 5.2e-2 over random draws, and 4.6e-3
 *         in fp16, 2^3 smaller as fp16's 3 extra mantissa bits predict);
 *   fp16: 5e-3 (attention 1e-2).
 * NaN/Inf in the output where the reference is finite always fails. Casts must be bit-exact
 * (round-to-nearest-even), and each backward run twice from the same inputs must give the same
 * bits (determinism); attention's also at T 4096 in 16-bit (without a CPU reference there), where
 * a kernel summing dQ's key tiles with atomics differs and at T 1024 need not. LayerNorm's mean/rstd, attention's lse and the xent losses are fp32 and
 * held to 1e-5 / 2e-5 in every dtype.
 *
 * Usage: test_backend_ops            all ops, small and GPT-2-sized shapes (~1.5 min on an H100
 *                                    box, mostly the CPU reference)
 *        test_backend_ops --small    small shapes only (seconds)
 *        test_backend_ops --bench-attn [B] [T]   attention alone at head sizes 128 and 64 (bf16)
 *        test_backend_ops --bench [B] [bf16|fp16] [gpt2-124m|gpt2-1.5b]
 *        test_backend_ops --bench-llama [B] [T] [llama-3.2-1b|qwen2.5-1.5b]   bf16, each op of a step
 *                                              no checks: per-op timings at GPT-2 shapes
 *                                    (bf16 unless fp16) and a whole training step's tokens/s;
 *                                    then steps held for ~8 s each (the clock the power limit
 *                                    allows): plain, with recompute, recompute keeping the
 *                                    attention output, and the recompute step's GEMMs alone
 *                                    and attention alone
 * ZINF_TEST_ATTN_HOPPER=bits picks which attention kernels take their wgmma version on a Hopper
 * GPU (1 forward, 2 dQ; default both), for timing them against the mma.sync ones. The
 * checks run the fast attention path three times there: through cuDNN where it loads
 * (ZINF_ATTN_CUDNN=0: not), with those wgmma kernels, then with none. --bench-attn times cuDNN's
 * attention and zinf's kernels one after the other. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_backend.h"
#include "kernels.h"

/* ---------------------------------------------------------------- host-side dtype handling */

/* the converters are kernels.h's zinf_f32_to_bf16 and friends, the ones the CPU kernels use */
static float round_to(zinf_dtype dt, float f)
{
    return dt == ZINF_BF16  ? zinf_bf16_to_f32(zinf_f32_to_bf16(f))
           : dt == ZINF_F16 ? zinf_f16_to_f32(zinf_f32_to_f16(f))
                            : f;
}

/* ---------------------------------------------------------------- random numbers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)((rng_u64() >> 40) * (1.0 / 16777216.0));
}
static int rng_int(int n) { return (int)(rng_u64() % (uint64_t)n); }

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* random values in [lo, hi], rounded to dt */
static float *hrand(zinf_dtype dt, int64_t n, float lo, float hi)
{
    float *x = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = round_to(dt, rng_uniform(lo, hi));
    return x;
}
/* n quiet NaNs: the starting content of a buffer an operation must overwrite without reading */
static float *nans(int64_t n)
{
    float *x = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}
static float *hcopy(const float *x, int64_t n)
{
    float *y = xmalloc((size_t)n * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* ---------------------------------------------------------------- device buffers */

typedef struct {
    zinf_backend *cpu, *gpu;
    zinf_dtype dt;
    const char *dn;
} ctx;

static size_t es(const ctx *c) { return zinf_dtype_size(c->dt); }

static void *dalloc(ctx *c, size_t bytes)
{
    void *p = c->gpu->alloc(c->gpu, ZINF_PLACE_DEVICE, bytes);
    if (!p) {
        fprintf(stderr, "device alloc of %zu bytes failed: %s\n", bytes, zinf_backend_cuda_error());
        exit(1);
    }
    return p;
}
static void dfree(ctx *c, void *p) { c->gpu->free(c->gpu, ZINF_PLACE_DEVICE, p); }

static void encode(zinf_dtype dt, void *dst, const float *src, int64_t n)
{
    if (dt == ZINF_F32) memcpy(dst, src, (size_t)n * 4);
    else
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = dt == ZINF_BF16 ? zinf_f32_to_bf16(src[i]) : zinf_f32_to_f16(src[i]);
}
static void decode(zinf_dtype dt, float *dst, const void *src, int64_t n)
{
    if (dt == ZINF_F32) memcpy(dst, src, (size_t)n * 4);
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = dt == ZINF_BF16 ? zinf_bf16_to_f32(((const uint16_t *)src)[i])
                                     : zinf_f16_to_f32(((const uint16_t *)src)[i]);
}

/* upload n floats as the compute dtype / as fp32 / as int32 */
static void *up(ctx *c, const float *h, int64_t n)
{
    void *d = dalloc(c, (size_t)n * es(c));
    void *tmp = xmalloc((size_t)n * es(c));
    encode(c->dt, tmp, h, n);
    CHECK(c->gpu->copy(c->gpu, d, tmp, (size_t)n * es(c), NULL) == 0, "upload: %s", zinf_backend_cuda_error());
    free(tmp);
    return d;
}
static void *upf(ctx *c, const float *h, int64_t n)
{
    void *d = dalloc(c, (size_t)n * 4);
    CHECK(c->gpu->copy(c->gpu, d, h, (size_t)n * 4, NULL) == 0, "upload: %s", zinf_backend_cuda_error());
    return d;
}
static int32_t *upi(ctx *c, const int32_t *h, int64_t n)
{
    void *d = dalloc(c, (size_t)n * 4);
    CHECK(c->gpu->copy(c->gpu, d, h, (size_t)n * 4, NULL) == 0, "upload: %s", zinf_backend_cuda_error());
    return d;
}
/* download n values of the compute dtype / fp32 (after a sync that reports op failures) */
static int gsync(ctx *c, const char *op)
{
    int rc = c->gpu->sync(c->gpu);
    CHECK(rc == 0, "%s [%s]: sync returned %d: %s", op, c->dn, rc, zinf_backend_cuda_error());
    return rc;
}
static float *down(ctx *c, const void *d, int64_t n)
{
    void *tmp = xmalloc((size_t)n * es(c));
    float *h = xmalloc((size_t)n * sizeof(float));
    CHECK(c->gpu->copy(c->gpu, tmp, d, (size_t)n * es(c), NULL) == 0, "download: %s", zinf_backend_cuda_error());
    decode(c->dt, h, tmp, n);
    free(tmp);
    return h;
}
static float *downf(ctx *c, const void *d, int64_t n)
{
    float *h = xmalloc((size_t)n * sizeof(float));
    CHECK(c->gpu->copy(c->gpu, h, d, (size_t)n * 4, NULL) == 0, "download: %s", zinf_backend_cuda_error());
    return h;
}
static void *down_raw(ctx *c, const void *d, size_t bytes)
{
    void *h = xmalloc(bytes);
    CHECK(c->gpu->copy(c->gpu, h, d, bytes, NULL) == 0, "download: %s", zinf_backend_cuda_error());
    return h;
}

/* ---------------------------------------------------------------- comparison */

static double tol_of(const ctx *c, double f32, double bf16, double f16)
{
    return c->dt == ZINF_F32 ? f32 : c->dt == ZINF_BF16 ? bf16 : f16;
}

/* One line per comparison; CHECKs the result. */
static void compare(const ctx *c, const char *op, const char *what, const float *got,
                    const float *ref, int64_t n, double tol)
{
    double ss = 0;
    int64_t nref_bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(ref[i])) ss += (double)ref[i] * ref[i];
        else nref_bad++;
    }
    double rms = n ? sqrt(ss / (double)n) : 0;
    /* fp16 cannot hold values below its smallest subnormal 2^-24: allow that much absolutely */
    double atol = c->dt == ZINF_F16 ? 5.9604645e-8 : 0.0;
    double maxrel = 0, maxabs = 0;
    int64_t at = -1, nbad = 0, first_bad = -1;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(ref[i])) {
            if (!(isnan(ref[i]) ? isnan(got[i]) : got[i] == ref[i])) {
                nbad++;
                if (first_bad < 0) first_bad = i;
            }
            continue;
        }
        if (!isfinite(got[i])) {
            nbad++;
            if (first_bad < 0) first_bad = i;
            continue;
        }
        double d = fabs((double)got[i] - ref[i]);
        double r = (d > atol ? d - atol : 0.0) / (fabs(ref[i]) + rms + 1e-30);
        if (d > maxabs) maxabs = d;
        if (r > maxrel) {
            maxrel = r;
            at = i;
        }
    }
    int ok = nbad == 0 && maxrel <= tol;
    printf("%-4s %-14s %-5s %-22s n=%-10lld rms=%-10.3g max_abs=%-10.3g max_rel=%-10.3g", ok ? "ok" : "FAIL",
           op, c->dn, what, (long long)n, rms, maxabs, maxrel);
    if (at >= 0) printf(" at %lld (got %.7g want %.7g)", (long long)at, got[at], ref[at]);
    if (nbad) printf(" NONFINITE x%lld first at %lld (got %g want %g)", (long long)nbad, (long long)first_bad,
                     got[first_bad], ref[first_bad]);
    printf(" tol=%.1e\n", tol);
    (void)nref_bad;
    CHECK(ok, "%s [%s] %s: max_rel %.3g > tol %.1e or %lld non-finite", op, c->dn, what, maxrel, tol,
          (long long)nbad);
}

/* Determinism: two byte buffers must be equal. */
static void same_bits(const ctx *c, const char *op, const char *what, const void *a, const void *b,
                      size_t bytes)
{
    int eq = memcmp(a, b, bytes) == 0;
    size_t at = 0;
    if (!eq)
        for (at = 0; at < bytes && ((const char *)a)[at] == ((const char *)b)[at]; at++) {}
    printf("%-4s %-14s %-5s %-22s deterministic%s", eq ? "ok" : "FAIL", op, c->dn, what,
           eq ? "\n" : "");
    if (!eq) printf(": runs differ first at byte %zu of %zu\n", at, bytes);
    CHECK(eq, "%s [%s] %s: two runs differ", op, c->dn, what);
}

/* ---------------------------------------------------------------- casts */

static void test_casts(ctx *c)
{
    const int64_t n = 100003;
    float *h = xmalloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        float r = rng_uniform(-1, 1);
        int e = rng_int(60) - 30;
        h[i] = ldexpf(r, e); /* wide exponent range: subnormals and overflow for fp16 */
    }
    float specials[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 1e30f, -1e30f,
                        INFINITY, -INFINITY, NAN, 5.96e-8f, 2.98e-8f, 1.0000001f, 3.0e-39f};
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) h[i] = specials[i];
    float *dsrc = upf(c, h, n);
    void *d16 = dalloc(c, n * es(c));
    float *dback = dalloc(c, n * 4);
    c->gpu->from_f32(c->gpu, d16, dsrc, n);
    c->gpu->to_f32(c->gpu, dback, d16, n);
    gsync(c, "casts");
    void *raw = down_raw(c, d16, n * es(c));
    float *back = downf(c, dback, n);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        float want = round_to(c->dt, h[i]);
        float got;
        decode(c->dt, &got, (const char *)raw + i * es(c), 1);
        int eq = isnan(want) ? isnan(got) && isnan(back[i])
                             : memcmp(&got, &want, 4) == 0 && memcmp(&back[i], &want, 4) == 0;
        if (!eq && bad++ == 0) first = i;
    }
    printf("%-4s %-14s %-5s %-22s n=%lld bit-exact RNE%s", bad ? "FAIL" : "ok", "from/to_f32", c->dn,
           "round trip", (long long)n, bad ? "" : "\n");
    if (bad) {
        float got;
        decode(c->dt, &got, (const char *)raw + first * es(c), 1);
        printf(": %lld differ, first at %lld: in %.9g got %.9g back %.9g want %.9g\n", (long long)bad,
               (long long)first, h[first], got, back[first], round_to(c->dt, h[first]));
    }
    CHECK(bad == 0, "casts [%s]: %lld values differ", c->dn, (long long)bad);
    /* scale_to in the compute dtype: round(a * x) once, into another buffer and in place (a = 1/3
     * rounds; a = 0.5 halves exactly, subnormals and the largest finite values included) */
    void *d16b = dalloc(c, n * es(c));
    const float as[2] = {1.0f / 3.0f, 0.5f};
    for (int k = 0; k < 2; k++) {
        void *dst = k ? d16 : d16b;
        c->gpu->scale_to(c->gpu, dst, d16, n, as[k]);
        gsync(c, "scale_to");
        void *sraw = down_raw(c, dst, n * es(c));
        int64_t sbad = 0;
        for (int64_t i = 0; i < n; i++) {
            float x, got, want;
            decode(c->dt, &x, (const char *)raw + i * es(c), 1);
            decode(c->dt, &got, (const char *)sraw + i * es(c), 1);
            want = round_to(c->dt, as[k] * x);
            if (isnan(want) ? !isnan(got) : memcmp(&got, &want, 4) != 0) sbad++;
        }
        printf("%-4s %-14s %-5s %-22s n=%lld a=%g%s, bit-exact\n", sbad ? "FAIL" : "ok", "scale_to", c->dn,
               k ? "in place" : "to another buffer", (long long)n, as[k], sbad ? " (differs)" : "");
        CHECK(sbad == 0, "scale_to [%s] a=%g: %lld values differ", c->dn, as[k], (long long)sbad);
        free(sraw);
    }
    dfree(c, d16b);
    free(raw);
    free(back);
    free(h);
    dfree(c, dsrc);
    dfree(c, d16);
    dfree(c, dback);
}

/* ---------------------------------------------------------------- memory, copies, streams */

static void test_memory(ctx *c)
{
    zinf_backend *g = c->gpu;
    const size_t n = 1 << 20, bytes = n * 4;
    int ok = 1;
    float *dev = g->alloc(g, ZINF_PLACE_DEVICE, bytes);
    float *pin = g->alloc(g, ZINF_PLACE_PINNED, bytes);
    float *hst = g->alloc(g, ZINF_PLACE_HOST, bytes);
    float *dev2 = g->alloc(g, ZINF_PLACE_DEVICE, bytes);
    CHECK(dev && pin && hst && dev2, "alloc failed: %s", zinf_backend_cuda_error());
    if (!dev || !pin || !hst || !dev2) return;
    /* zeroed */
    float *z = downf(c, dev, n);
    for (size_t i = 0; i < n; i++) ok &= z[i] == 0 && pin[i] == 0 && hst[i] == 0;
    free(z);
    CHECK(ok, "alloc: memory not zeroed");
    float *src = xmalloc(bytes);
    for (size_t i = 0; i < n; i++) src[i] = (float)i * 0.5f;
    /* pageable -> device (synchronous), device -> device, device -> pinned on a stream */
    zinf_stream *s = g->stream_new(g);
    zinf_event *e = g->event_new(g);
    CHECK(s && e, "stream/event creation failed: %s", zinf_backend_cuda_error());
    CHECK(g->copy(g, dev, src, bytes, NULL) == 0, "copy h->d: %s", zinf_backend_cuda_error());
    memset(src, 0, bytes); /* a synchronous copy no longer reads src */
    CHECK(g->copy(g, dev2, dev, bytes, NULL) == 0, "copy d->d");
    CHECK(g->event_record(g, e, NULL) == 0, "event_record");
    CHECK(g->stream_wait(g, s, e) == 0, "stream_wait");
    CHECK(g->copy(g, pin, dev2, bytes, s) == 0, "copy d->pinned async");
    CHECK(g->stream_sync(g, s) == 0, "stream_sync: %s", zinf_backend_cuda_error());
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= pin[i] == (float)i * 0.5f;
    CHECK(ok, "copy chain pageable->device->device->pinned lost data");
    /* pinned -> device on a stream, then the compute stream waits for it and scales */
    for (size_t i = 0; i < n; i++) pin[i] = (float)i;
    CHECK(g->copy(g, dev, pin, bytes, s) == 0, "copy pinned->d async");
    CHECK(g->event_record(g, e, s) == 0, "event_record on stream");
    CHECK(g->stream_wait(g, NULL, e) == 0, "compute waits on stream");
    g->scale(g, dev, (int64_t)n, 2.0f);
    /* memset0 of a device range and of pinned memory, then device -> pageable host */
    CHECK(g->memset0(g, dev + 100, 50 * 4, NULL) == 0, "memset0 device");
    CHECK(g->copy(g, hst, dev, bytes, NULL) == 0, "copy d->host");
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= hst[i] == ((i >= 100 && i < 150) ? 0.0f : 2.0f * (float)i);
    CHECK(ok, "stream/event ordering or memset0 on device wrong");
    CHECK(g->memset0(g, pin, bytes, NULL) == 0, "memset0 pinned");
    CHECK(g->memset0(g, hst + 7, 4, NULL) == 0, "memset0 host");
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= pin[i] == 0;
    ok &= hst[7] == 0 && hst[8] == 16.0f;
    CHECK(ok, "memset0 of pinned/host memory wrong");
    /* host -> host through the backend */
    CHECK(g->copy(g, src, hst, bytes, NULL) == 0, "copy host->host");
    CHECK(memcmp(src, hst, bytes) == 0, "copy host->host wrong");
    /* pinned -> pinned, async on a stream */
    for (size_t i = 0; i < n; i++) hst[i] = -(float)i;
    CHECK(g->copy(g, pin, hst, bytes, s) == 0, "copy host->pinned");
    CHECK(g->stream_sync(g, s) == 0, "stream_sync");
    CHECK(memcmp(pin, hst, bytes) == 0, "copy host->pinned wrong");
    CHECK(gsync(c, "memory") == 0, "sync");
    printf("%-4s %-14s %-5s %-22s\n", check_failures_ ? "?" : "ok", "memory/streams", c->dn,
           "alloc/copy/memset0/events");
    g->event_free(g, e);
    g->stream_free(g, s);
    g->free(g, ZINF_PLACE_DEVICE, dev);
    g->free(g, ZINF_PLACE_DEVICE, dev2);
    g->free(g, ZINF_PLACE_PINNED, pin);
    g->free(g, ZINF_PLACE_HOST, hst);
    free(src);
}


/* decode a downloaded raw buffer of the compute dtype */
static float *dec(const ctx *c, const void *raw, int64_t n)
{
    float *h = xmalloc((size_t)n * sizeof(float));
    decode(c->dt, h, raw, n);
    return h;
}

/* ---------------------------------------------------------------- encoder */

static void test_encoder(ctx *c, int B, int T, int C, int V)
{
    char nm[64];
    snprintf(nm, sizeof nm, "B%d T%d C%d V%d", B, T, C, V);
    int64_t N = (int64_t)B * T, nte = (int64_t)V * C, npe = (int64_t)T * C;
    int32_t *tok = xmalloc(N * 4);
    for (int64_t i = 0; i < N; i++) /* half the tokens from a set of 5: many repeats */
        tok[i] = (i % 2) ? rng_int(5) : rng_int(V);
    tok[0] = V - 1;
    float *wte = hrand(c->dt, nte, -1, 1), *wpe = hrand(c->dt, npe, -1, 1);
    float *out = xmalloc(N * C * 4);
    c->cpu->encoder_fwd(c->cpu, out, tok, wte, wpe, B, T, C);
    int32_t *dtok = upi(c, tok, N);
    void *dwte = up(c, wte, nte), *dwpe = up(c, wpe, npe);
    void *dout = dalloc(c, N * C * es(c));
    c->gpu->encoder_fwd(c->gpu, dout, dtok, dwte, dwpe, B, T, C);
    gsync(c, "encoder_fwd");
    float *got = down(c, dout, N * C);
    compare(c, "encoder_fwd", nm, got, out, N * C, tol_of(c, 1e-6, 1e-2, 5e-3));
    free(got);
    dfree(c, dwte);
    dfree(c, dwpe);
    /* backward: accumulate onto random gradients; twice on the GPU for determinism */
    float *gte = hrand(c->dt, nte, -1, 1), *gpe = hrand(c->dt, npe, -1, 1);
    float *gy = hrand(c->dt, N * C, -1, 1);
    void *dgy = up(c, gy, N * C);
    void *raw[2][2];
    for (int r = 0; r < 2; r++) {
        void *dgte = up(c, gte, nte), *dgpe = up(c, gpe, npe);
        c->gpu->encoder_bwd(c->gpu, dgte, dgpe, dgy, dtok, B, T, C);
        gsync(c, "encoder_bwd");
        raw[r][0] = down_raw(c, dgte, nte * es(c));
        raw[r][1] = down_raw(c, dgpe, npe * es(c));
        dfree(c, dgte);
        dfree(c, dgpe);
    }
    c->cpu->encoder_bwd(c->cpu, gte, gpe, gy, tok, B, T, C);
    float *g1 = dec(c, raw[0][0], nte), *g2 = dec(c, raw[0][1], npe);
    compare(c, "encoder_bwd", "dwte", g1, gte, nte, tol_of(c, 1e-6, 1e-2, 5e-3));
    compare(c, "encoder_bwd", "dwpe", g2, gpe, npe, tol_of(c, 1e-6, 1e-2, 5e-3));
    same_bits(c, "encoder_bwd", nm, raw[0][0], raw[1][0], nte * es(c));
    for (int r = 0; r < 2; r++) free(raw[r][0]), free(raw[r][1]);
    free(g1), free(g2), free(tok), free(wte), free(wpe), free(out), free(gte), free(gpe), free(gy);
    dfree(c, dtok), dfree(c, dout), dfree(c, dgy);
}

/* ---------------------------------------------------------------- layernorm */

static void test_layernorm(ctx *c, int64_t N, int C)
{
    char nm[64];
    snprintf(nm, sizeof nm, "N%lld C%d", (long long)N, C);
    float *x = hrand(c->dt, N * C, -2, 3), *w = hrand(c->dt, C, 0.5f, 1.5f), *b = hrand(c->dt, C, -1, 1);
    float *out = xmalloc(N * C * 4), *mean = xmalloc(N * 4), *rstd = xmalloc(N * 4);
    c->cpu->layernorm_fwd(c->cpu, out, mean, rstd, x, w, b, N, C);
    void *dx_ = up(c, x, N * C), *dw_ = up(c, w, C), *db_ = up(c, b, C);
    void *dout = dalloc(c, N * C * es(c));
    float *dmean = dalloc(c, N * 4), *drstd = dalloc(c, N * 4);
    c->gpu->layernorm_fwd(c->gpu, dout, dmean, drstd, dx_, dw_, db_, N, C);
    gsync(c, "layernorm_fwd");
    float *go = down(c, dout, N * C), *gm = downf(c, dmean, N), *gr = downf(c, drstd, N);
    compare(c, "layernorm_fwd", nm, go, out, N * C, tol_of(c, 1e-5, 1e-2, 5e-3));
    compare(c, "layernorm_fwd", "mean", gm, mean, N, tol_of(c, 1e-5, 1e-5, 1e-5));
    compare(c, "layernorm_fwd", "rstd", gr, rstd, N, tol_of(c, 1e-5, 1e-5, 1e-5));
    free(go), free(gm), free(gr);
    /* backward from the CPU's statistics (both sides get the same ones) */
    float *dy = hrand(c->dt, N * C, -1, 1);
    float *gx = hrand(c->dt, N * C, -1, 1), *gw = hrand(c->dt, C, -1, 1), *gb = hrand(c->dt, C, -1, 1);
    void *ddy = up(c, dy, N * C);
    float *cm = upf(c, mean, N), *cr = upf(c, rstd, N);
    void *raw[2][3];
    for (int r = 0; r < 2; r++) {
        void *dgx = up(c, gx, N * C), *dgw = up(c, gw, C), *dgb = up(c, gb, C);
        c->gpu->layernorm_bwd(c->gpu, dgx, dgw, dgb, ddy, dx_, dw_, cm, cr, N, C);
        gsync(c, "layernorm_bwd");
        raw[r][0] = down_raw(c, dgx, N * C * es(c));
        raw[r][1] = down_raw(c, dgw, C * es(c));
        raw[r][2] = down_raw(c, dgb, C * es(c));
        dfree(c, dgx), dfree(c, dgw), dfree(c, dgb);
    }
    c->cpu->layernorm_bwd(c->cpu, gx, gw, gb, dy, x, w, mean, rstd, N, C);
    float *h0 = dec(c, raw[0][0], N * C), *h1 = dec(c, raw[0][1], C), *h2 = dec(c, raw[0][2], C);
    compare(c, "layernorm_bwd", "dx", h0, gx, N * C, tol_of(c, 1e-5, 1e-2, 5e-3));
    compare(c, "layernorm_bwd", "dw", h1, gw, C, tol_of(c, 5e-5, 1e-2, 5e-3));
    compare(c, "layernorm_bwd", "db", h2, gb, C, tol_of(c, 5e-5, 1e-2, 5e-3));
    same_bits(c, "layernorm_bwd", "dx", raw[0][0], raw[1][0], N * C * es(c));
    same_bits(c, "layernorm_bwd", "dw", raw[0][1], raw[1][1], C * es(c));
    same_bits(c, "layernorm_bwd", "db", raw[0][2], raw[1][2], C * es(c));
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 3; k++) free(raw[r][k]);
    free(h0), free(h1), free(h2), free(x), free(w), free(b), free(out), free(mean), free(rstd);
    free(dy), free(gx), free(gw), free(gb);
    dfree(c, dx_), dfree(c, dw_), dfree(c, db_), dfree(c, dout), dfree(c, dmean), dfree(c, drstd);
    dfree(c, ddy), dfree(c, cm), dfree(c, cr);
}

/* ---------------------------------------------------------------- matmul */

static void test_matmul(ctx *c, int64_t N, int K, int OC, int bias, int with_dx)
{
    char nm[64];
    snprintf(nm, sizeof nm, "N%lld K%d OC%d%s%s", (long long)N, K, OC, bias ? " +b" : "",
             with_dx ? "" : " nodx");
    float *x = hrand(c->dt, N * K, -1, 1), *w = hrand(c->dt, (int64_t)OC * K, -1, 1);
    float *bb = bias ? hrand(c->dt, OC, -1, 1) : NULL;
    float *out = xmalloc(N * OC * 4);
    c->cpu->matmul_fwd(c->cpu, out, x, w, bb, N, K, OC);
    void *dx_ = up(c, x, N * K), *dw_ = up(c, w, (int64_t)OC * K), *db_ = bias ? up(c, bb, OC) : NULL;
    void *dout = dalloc(c, N * OC * es(c));
    { /* with the residual (cuBLASLt's C), into another buffer and in place; first, so that the
       * shape's algorithm is timed with a separate C and beta 1 */
        float *res = hrand(c->dt, N * OC, -1, 1), *ro = xmalloc(N * OC * 4);
        c->cpu->matmul_fwd_res(c->cpu, ro, x, w, bb, res, N, K, OC);
        void *dres = up(c, res, N * OC), *dres2 = up(c, res, N * OC);
        c->gpu->matmul_fwd_res(c->gpu, dout, dx_, dw_, db_, dres, N, K, OC);
        c->gpu->matmul_fwd_res(c->gpu, dres2, dx_, dw_, db_, dres2, N, K, OC);
        gsync(c, "matmul_fwd_res");
        float *g1 = down(c, dout, N * OC), *g2 = down(c, dres2, N * OC);
        compare(c, "matmul_fwd_res", nm, g1, ro, N * OC, tol_of(c, 2e-5, 1e-2, 5e-3));
        compare(c, "matmul_fwd_res", "in place", g2, ro, N * OC, tol_of(c, 2e-5, 1e-2, 5e-3));
        free(res), free(ro), free(g1), free(g2);
        dfree(c, dres), dfree(c, dres2);
    }
    c->gpu->matmul_fwd(c->gpu, dout, dx_, dw_, db_, N, K, OC);
    gsync(c, "matmul_fwd");
    float *go = down(c, dout, N * OC);
    compare(c, "matmul_fwd", nm, go, out, N * OC, tol_of(c, 2e-5, 1e-2, 5e-3));
    free(go);
    float *dy = hrand(c->dt, N * OC, -1, 1);
    float *gx = hrand(c->dt, N * K, -1, 1), *gw = hrand(c->dt, (int64_t)OC * K, -1, 1);
    float *gb = hrand(c->dt, OC, -1, 1);
    void *ddy = up(c, dy, N * OC);
    void *raw[2][3];
    float *nan_x = nans(N * K); /* dx is overwritten: a read of it would spread NaN */
    for (int r = 0; r < 2; r++) {
        void *dgx = with_dx ? up(c, nan_x, N * K) : NULL, *dgw = up(c, gw, (int64_t)OC * K);
        void *dgb = bias ? up(c, gb, OC) : NULL;
        c->gpu->matmul_bwd(c->gpu, dgx, dgw, dgb, ddy, dx_, dw_, N, K, OC, 1);
        gsync(c, "matmul_bwd");
        raw[r][0] = with_dx ? down_raw(c, dgx, N * K * es(c)) : NULL;
        raw[r][1] = down_raw(c, dgw, (size_t)OC * K * es(c));
        raw[r][2] = bias ? down_raw(c, dgb, OC * es(c)) : NULL;
        if (dgx) dfree(c, dgx);
        dfree(c, dgw);
        if (dgb) dfree(c, dgb);
    }
    free(nan_x);
    c->cpu->matmul_bwd(c->cpu, with_dx ? gx : NULL, gw, bias ? gb : NULL, dy, x, w, N, K, OC, 1);
    if (with_dx) {
        float *h = dec(c, raw[0][0], N * K);
        compare(c, "matmul_bwd", "dx", h, gx, N * K, tol_of(c, 2e-5, 1e-2, 5e-3));
        same_bits(c, "matmul_bwd", "dx", raw[0][0], raw[1][0], N * K * es(c));
        free(h);
    }
    float *h = dec(c, raw[0][1], (int64_t)OC * K);
    compare(c, "matmul_bwd", "dw", h, gw, (int64_t)OC * K, tol_of(c, 5e-5, 1e-2, 5e-3));
    same_bits(c, "matmul_bwd", "dw", raw[0][1], raw[1][1], (size_t)OC * K * es(c));
    free(h);
    if (bias) {
        h = dec(c, raw[0][2], OC);
        compare(c, "matmul_bwd", "dbias", h, gb, OC, tol_of(c, 5e-5, 1e-2, 5e-3));
        same_bits(c, "matmul_bwd", "dbias", raw[0][2], raw[1][2], OC * es(c));
        free(h);
    }
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 3; k++) free(raw[r][k]);
    { /* acc 0, a step's first write of the parameter gradients: dw and dbias are overwritten, so
       * NaN in them before (a gradient never zeroed) must not reach the result */
        float *nw = nans((int64_t)OC * K), *nb = nans(OC), *cw = nans((int64_t)OC * K), *cb = nans(OC);
        void *dgw = up(c, nw, (int64_t)OC * K), *dgb = bias ? up(c, nb, OC) : NULL;
        c->gpu->matmul_bwd(c->gpu, NULL, dgw, dgb, ddy, dx_, dw_, N, K, OC, 0);
        gsync(c, "matmul_bwd acc 0");
        c->cpu->matmul_bwd(c->cpu, NULL, cw, bias ? cb : NULL, dy, x, w, N, K, OC, 0);
        float *g = down(c, dgw, (int64_t)OC * K);
        compare(c, "matmul_bwd acc 0", "dw", g, cw, (int64_t)OC * K, tol_of(c, 5e-5, 1e-2, 5e-3));
        free(g);
        if (bias) {
            g = down(c, dgb, OC);
            compare(c, "matmul_bwd acc 0", "dbias", g, cb, OC, tol_of(c, 5e-5, 1e-2, 5e-3));
            free(g);
            dfree(c, dgb);
        }
        dfree(c, dgw);
        free(nw), free(nb), free(cw), free(cb);
    }
    free(x), free(w), free(bb), free(out), free(dy), free(gx), free(gw), free(gb);
    dfree(c, dx_), dfree(c, dw_), dfree(c, dout), dfree(c, ddy);
    if (db_) dfree(c, db_);
}

/* ---------------------------------------------------------------- matmul + gelu */

/* matmul_gelu_fwd: pre and out against the CPU. off shifts pre by elements (an unaligned aux:
 * the unfused fallback), as does OC not divisible by 8. */
static void test_matmul_gelu(ctx *c, int64_t N, int K, int OC, int bias, int off)
{
    char nm[64];
    snprintf(nm, sizeof nm, "N%lld K%d OC%d%s%s", (long long)N, K, OC, bias ? " +b" : "",
             off ? " off" : "");
    float *x = hrand(c->dt, N * K, -1, 1), *w = hrand(c->dt, (int64_t)OC * K, -1, 1);
    float *bb = bias ? hrand(c->dt, OC, -1, 1) : NULL;
    float *pre = xmalloc(N * OC * 4), *out = xmalloc(N * OC * 4);
    c->cpu->matmul_gelu_fwd(c->cpu, out, pre, x, w, bb, N, K, OC);
    void *dx_ = up(c, x, N * K), *dw_ = up(c, w, (int64_t)OC * K), *db_ = bias ? up(c, bb, OC) : NULL;
    void *bpre = dalloc(c, (N * OC + off) * es(c)), *dout = dalloc(c, N * OC * es(c));
    void *dpre = (char *)bpre + off * es(c);
    c->gpu->matmul_gelu_fwd(c->gpu, dout, dpre, dx_, dw_, db_, N, K, OC);
    gsync(c, "matmul_gelu_fwd");
    float *gp = down(c, dpre, N * OC), *go = down(c, dout, N * OC);
    compare(c, "matmul_gelu_fwd", "pre", gp, pre, N * OC, tol_of(c, 2e-5, 1e-2, 5e-3));
    compare(c, "matmul_gelu_fwd", nm, go, out, N * OC, tol_of(c, 2e-5, 1e-2, 5e-3));
    free(gp), free(go), free(x), free(w), free(bb), free(pre), free(out);
    dfree(c, dx_), dfree(c, dw_), dfree(c, bpre), dfree(c, dout);
    if (db_) dfree(c, db_);
}

/* matmul_dgelu_bwd: dpre[N,K] = gelu'(pre) * (dout[N,OC] @ w[OC,K]), overwriting a dpre that starts
 * random; twice for determinism. off shifts pre (unaligned aux: the fallback). */
static void test_matmul_dgelu(ctx *c, int64_t N, int K, int OC, int off)
{
    char nm[64];
    snprintf(nm, sizeof nm, "N%lld K%d OC%d%s", (long long)N, K, OC, off ? " off" : "");
    float *dy = hrand(c->dt, N * OC, -1, 1), *w = hrand(c->dt, (int64_t)OC * K, -1, 1);
    float *pre = hrand(c->dt, N * K, -4, 4), *g0 = hrand(c->dt, N * K, -1, 1);
    float *ref = xmalloc(N * K * 4);
    c->cpu->matmul_dgelu_bwd(c->cpu, ref, dy, w, pre, N, K, OC);
    void *ddy = up(c, dy, N * OC), *dw_ = up(c, w, (int64_t)OC * K);
    void *bpre = dalloc(c, (N * K + off) * es(c)), *dpre = (char *)bpre + off * es(c);
    void *t = up(c, pre, N * K);
    c->gpu->copy(c->gpu, dpre, t, N * K * es(c), NULL);
    dfree(c, t);
    void *raw[2];
    for (int r = 0; r < 2; r++) {
        void *dg = up(c, g0, N * K); /* garbage the op must overwrite */
        c->gpu->matmul_dgelu_bwd(c->gpu, dg, ddy, dw_, dpre, N, K, OC);
        gsync(c, "matmul_dgelu_bwd");
        raw[r] = down_raw(c, dg, N * K * es(c));
        dfree(c, dg);
    }
    float *h = dec(c, raw[0], N * K);
    compare(c, "matmul_dgelu_bwd", nm, h, ref, N * K, tol_of(c, 2e-5, 1e-2, 5e-3));
    same_bits(c, "matmul_dgelu_bwd", nm, raw[0], raw[1], N * K * es(c));
    free(h), free(raw[0]), free(raw[1]), free(dy), free(w), free(pre), free(g0), free(ref);
    dfree(c, ddy), dfree(c, dw_), dfree(c, bpre);
}

/* The epilogue's GELU alone: w = I (K = OC) and no bias make pre = x exactly, so out = gelu(x) and,
 * with dout = 1, dpre = gelu'(x); held to gelu_fwd/gelu_bwd's tolerances. In fp32 (1e-5) that tells
 * the tanh approximation from the erf form (they differ by up to 4.7e-4); the distance to the erf
 * form is printed for the record. (fp32's backward is the unfused path: see matmul.cu.) */
static void test_gelu_epilogue(ctx *c, int64_t N, int K)
{
    char nm[64];
    snprintf(nm, sizeof nm, "w=I N%lld K%d", (long long)N, K);
    int64_t n = N * K;
    float *x = hrand(c->dt, n, -6, 6), *w = xmalloc((size_t)K * K * 4), *one = xmalloc(n * 4);
    for (int64_t i = 0; i < (int64_t)K * K; i++) w[i] = (i / K == i % K) ? 1.0f : 0.0f;
    for (int64_t i = 0; i < n; i++) one[i] = 1.0f;
    float *ref = xmalloc(n * 4), *dref = xmalloc(n * 4);
    c->cpu->gelu_fwd(c->cpu, ref, x, n);
    memset(dref, 0, n * 4);
    c->cpu->gelu_bwd(c->cpu, dref, x, one, n);
    void *dx_ = up(c, x, n), *dw_ = up(c, w, (int64_t)K * K), *done = up(c, one, n);
    void *dpre = dalloc(c, n * es(c)), *dout = dalloc(c, n * es(c)), *dg = dalloc(c, n * es(c));
    c->gpu->matmul_gelu_fwd(c->gpu, dout, dpre, dx_, dw_, NULL, N, K, K);
    c->gpu->matmul_dgelu_bwd(c->gpu, dg, done, dw_, dx_, N, K, K);
    gsync(c, "gelu epilogue");
    float *gp = down(c, dpre, n), *go = down(c, dout, n), *gd = down(c, dg, n);
    int exact = memcmp(gp, x, n * 4) == 0;
    printf("%-4s %-14s %-5s %-22s pre == x exactly\n", exact ? "ok" : "FAIL", "gelu epilogue", c->dn, nm);
    CHECK(exact, "gelu epilogue [%s]: pre != x with w = I", c->dn);
    compare(c, "gelu epilogue", "gelu(x)", go, ref, n, tol_of(c, 1e-5, 1e-2, 5e-3));
    compare(c, "gelu epilogue", "gelu'(x)", gd, dref, n, tol_of(c, 1e-5, 1e-2, 5e-3));
    double dt = 0, de = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = x[i], e = 0.5 * v * (1 + erf(v / sqrt(2.0)));
        double tt = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        dt = fmax(dt, fabs(go[i] - tt));
        de = fmax(de, fabs(go[i] - e));
    }
    printf("info %-14s %-5s %-22s max |out - gelu_tanh| = %.3g, max |out - gelu_erf| = %.3g\n",
           "gelu epilogue", c->dn, nm, dt, de);
    free(x), free(w), free(one), free(ref), free(dref), free(gp), free(go), free(gd);
    dfree(c, dx_), dfree(c, dw_), dfree(c, done), dfree(c, dpre), dfree(c, dout), dfree(c, dg);
}

/* ---------------------------------------------------------------- attention */
static int hopper_bits = ZINF_ATTN_HOPPER_ALL; /* the wgmma kernels checked (ZINF_TEST_ATTN_HOPPER) */
static int cudnn_on = 1;                        /* cuDNN's attention checked (ZINF_ATTN_CUDNN=0: not) */

/* Samples packed into rows: each row of T filled with samples whose lengths cycle through lens
 * (the last one cut at the row's end); the CPU's rows in host memory, the GPU's in device memory. */
typedef struct { zinf_attn_rows cpu, gpu; int32_t *kvs, *seq; void *dkvs, *dseq; } packing;
static void pack_rows(ctx *c, packing *pk, int B, int T, const int *lens, int nlens)
{
    pk->kvs = xmalloc((size_t)B * T * 4);
    pk->seq = xmalloc((size_t)B * T * 8);
    int nseq = 0, max_len = 0, k = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T;) {
            int len = lens[k++ % nlens];
            len = len < T - t ? len : T - t;
            pk->seq[2 * nseq] = b * T + t, pk->seq[2 * nseq + 1] = len, nseq++;
            max_len = len > max_len ? len : max_len;
            for (int i = 0; i < len; i++) pk->kvs[b * T + t + i] = t;
            t += len;
        }
    pk->dkvs = dalloc(c, (size_t)B * T * 4);
    pk->dseq = dalloc(c, (size_t)nseq * 8);
    CHECK(c->gpu->copy(c->gpu, pk->dkvs, pk->kvs, (size_t)B * T * 4, NULL) == 0 &&
              c->gpu->copy(c->gpu, pk->dseq, pk->seq, (size_t)nseq * 8, NULL) == 0,
          "upload: %s", zinf_backend_cuda_error());
    pk->cpu = (zinf_attn_rows){.kv_start = pk->kvs, .seq = pk->seq, .nseq = nseq, .max_len = max_len};
    pk->gpu = (zinf_attn_rows){.kv_start = pk->dkvs, .seq = pk->dseq, .nseq = nseq, .max_len = max_len};
}

/* Grouped-query attention (NKV kv heads of hs channels serving NH query heads; NKV = NH is
 * GPT-2's multi-head case); dq, dk and dv compared on their own. lens: samples packed into the
 * rows (pack_rows), NULL: one per row. */
static void test_attention_rows(ctx *c, int B, int T, int NH, int NKV, int hs, const int *lens, int nlens)
{
    char nm[64];
    snprintf(nm, sizeof nm, "B%d T%d NH%d NKV%d hs%d%s", B, T, NH, NKV, hs, lens ? " packed" : "");
    const int64_t N = (int64_t)B * T, W = (int64_t)(NH + 2 * NKV) * hs, C = (int64_t)NH * hs, nq = N * W,
                  nl = (int64_t)B * NH * T;
    packing pk = {0};
    if (lens) pack_rows(c, &pk, B, T, lens, nlens);
    const zinf_attn_rows *rc = lens ? &pk.cpu : NULL, *rg = lens ? &pk.gpu : NULL;
    float *qkv = hrand(c->dt, nq, -2, 2);
    float *out = xmalloc(N * C * 4), *lse = xmalloc(nl * 4);
    c->cpu->attention_fwd(c->cpu, out, lse, qkv, B, T, NH, NKV, hs, rc);
    void *dqkv_in = up(c, qkv, nq), *dout = dalloc(c, N * C * es(c));
    float *dlse = dalloc(c, nl * 4);
    c->gpu->attention_fwd(c->gpu, dout, dlse, dqkv_in, B, T, NH, NKV, hs, rg);
    gsync(c, "attention_fwd");
    float *go = down(c, dout, N * C), *gl = downf(c, dlse, nl);
    double tf = tol_of(c, 5e-5, 2e-2, 1e-2);
    compare(c, "attention_fwd", nm, go, out, N * C, tf);
    compare(c, "attention_fwd", "lse", gl, lse, nl, tol_of(c, 1e-5, 1e-3, 1e-3));
    /* backward: both sides get the GPU's out and lse and the same dout; dqkv is overwritten
     * (the GPU's starts as NaN, the CPU's as noise) */
    float *dy = hrand(c->dt, N * C, -1, 1), *gq = hrand(c->dt, nq, -1, 1), *nan_q = nans(nq);
    void *ddy = up(c, dy, N * C);
    void *raw[2];
    const long cudnn_before = zinf_cuda_attn_cudnn_runs;
    for (int r = 0; r < 2; r++) {
        void *dg = up(c, nan_q, nq);
        c->gpu->attention_bwd(c->gpu, dg, ddy, dqkv_in, dout, dlse, B, T, NH, NKV, hs, rg);
        gsync(c, "attention_bwd");
        raw[r] = down_raw(c, dg, nq * es(c));
        dfree(c, dg);
    }
    c->cpu->attention_bwd(c->cpu, gq, dy, qkv, go, gl, B, T, NH, NKV, hs, rc);
    float *h = dec(c, raw[0], nq);
    /* compare q, k, v parts separately for a precise diagnosis */
    const char *part[3] = {"dq", "dk", "dv"};
    const int64_t off[3] = {0, C, C + (int64_t)NKV * hs}, wid[3] = {C, (int64_t)NKV * hs, (int64_t)NKV * hs};
    float *gp = xmalloc(N * C * 4), *rp = xmalloc(N * C * 4);
    for (int p = 0; p < 3; p++) {
        const int64_t w = wid[p];
        for (int64_t n = 0; n < N; n++) {
            memcpy(gp + n * w, h + n * W + off[p], w * 4);
            memcpy(rp + n * w, gq + n * W + off[p], w * 4);
        }
        if (T == 1 && p < 2) { /* one key: the softmax has no gradient, dq = dk = 0 exactly */
            double mx = 0;
            for (int64_t i = 0; i < N * w; i++) mx = fmax(mx, fabs(gp[i]));
            printf("%-4s %-14s %-5s %-22s T=1: max |%s| = %.3g (exactly 0; bound 1e-5)\n", mx <= 1e-5 ? "ok" : "FAIL",
                   "attention_bwd", c->dn, nm, part[p], mx);
            CHECK(mx <= 1e-5, "attention_bwd [%s] %s: %s = %g with one key", c->dn, nm, part[p], mx);
            continue;
        }
        compare(c, "attention_bwd", part[p], gp, rp, N * w, tol_of(c, 5e-5, 8e-2, 1e-2));
    }
    /* zinf's kernels and the cuDNN engines zinf takes (none that cuDNN marks nondeterministic) */
    same_bits(c, "attention_bwd", zinf_cuda_attn_cudnn_runs == cudnn_before ? nm : "cuDNN rerun", raw[0], raw[1],
              nq * es(c));
    free(gp), free(rp), free(h), free(raw[0]), free(raw[1]);
    free(qkv), free(out), free(lse), free(go), free(gl), free(dy), free(gq), free(nan_q);
    dfree(c, dqkv_in), dfree(c, dout), dfree(c, dlse), dfree(c, ddy);
    if (lens) free(pk.kvs), free(pk.seq), dfree(c, pk.dkvs), dfree(c, pk.dseq);
}

static void test_attention(ctx *c, int B, int T, int NH, int NKV, int hs)
{
    test_attention_rows(c, B, T, NH, NKV, hs, NULL, 0);
}

/* ---------------------------------------------------------------- RMSNorm, RoPE, SwiGLU */

/* N rows of `heads` groups of C, ld apart, the first group `off` elements into its row (the k heads
 * of a q|k|v row; off + heads C <= ld): every element outside the groups must come back as it
 * went in */
static void test_rmsnorm(ctx *c, int64_t N, int heads, int C, int64_t ld, int64_t off)
{
    char nm[80];
    snprintf(nm, sizeof nm, "N%lld heads%d C%d ld%lld off%lld", (long long)N, heads, C, (long long)ld, (long long)off);
    const int64_t n = N * ld, R = N * heads;
    const size_t o = (size_t)off * es(c);
    float *x = hrand(c->dt, n, -2, 3), *w = hrand(c->dt, C, 0.5f, 1.5f), *out = hrand(c->dt, n, -1, 1);
    float *rstd = xmalloc(R * 4);
    void *dx_ = up(c, x, n), *dw_ = up(c, w, C), *dout = up(c, out, n);
    float *drstd = dalloc(c, R * 4);
    c->cpu->rmsnorm_fwd(c->cpu, out + off, rstd, x + off, w, N, heads, C, ld, 1e-6f);
    c->gpu->rmsnorm_fwd(c->gpu, (char *)dout + o, drstd, (char *)dx_ + o, dw_, N, heads, C, ld, 1e-6f);
    gsync(c, "rmsnorm_fwd");
    float *go = down(c, dout, n), *gr = downf(c, drstd, R);
    compare(c, "rmsnorm_fwd", nm, go, out, n, tol_of(c, 1e-5, 1e-2, 5e-3));
    compare(c, "rmsnorm_fwd", "rstd", gr, rstd, R, tol_of(c, 1e-5, 1e-5, 1e-5));
    float *dy = hrand(c->dt, n, -1, 1), *gx = hrand(c->dt, n, -1, 1), *gw = hrand(c->dt, C, -1, 1);
    void *ddy = up(c, dy, n);
    float *cr = upf(c, rstd, R);
    void *raw[3][2];
    /* with dw, without (a frozen weight), with again: dx and dw the same bits each time */
    for (int r = 0; r < 3; r++) {
        void *dgx = up(c, gx, n), *dgw = up(c, gw, C);
        c->gpu->rmsnorm_bwd(c->gpu, (char *)dgx + o, r == 1 ? NULL : dgw, (char *)ddy + o, (char *)dx_ + o, dw_, cr, N,
                            heads, C, ld);
        gsync(c, "rmsnorm_bwd");
        raw[r][0] = down_raw(c, dgx, n * es(c));
        raw[r][1] = down_raw(c, dgw, C * es(c));
        dfree(c, dgx), dfree(c, dgw);
    }
    float *gw0 = hcopy(gw, C);
    c->cpu->rmsnorm_bwd(c->cpu, gx + off, gw, dy + off, x + off, w, rstd, N, heads, C, ld);
    float *h0 = dec(c, raw[0][0], n), *h1 = dec(c, raw[0][1], C), *h2 = dec(c, raw[1][1], C);
    compare(c, "rmsnorm_bwd", "dx (accumulated)", h0, gx, n, tol_of(c, 1e-5, 1e-2, 5e-3));
    compare(c, "rmsnorm_bwd", "dw (accumulated)", h1, gw, C, tol_of(c, 5e-5, 1e-2, 5e-3));
    compare(c, "rmsnorm_bwd", "dw NULL: dw untouched", h2, gw0, C, 0.0);
    same_bits(c, "rmsnorm_bwd", "dx", raw[0][0], raw[1][0], n * es(c));
    same_bits(c, "rmsnorm_bwd", "dw", raw[0][1], raw[2][1], C * es(c));
    for (int r = 0; r < 3; r++) free(raw[r][0]), free(raw[r][1]);
    free(x), free(w), free(out), free(rstd), free(go), free(gr), free(dy), free(gx), free(gw), free(gw0);
    free(h0), free(h1), free(h2);
    dfree(c, dx_), dfree(c, dw_), dfree(c, dout), dfree(c, drstd), dfree(c, ddy), dfree(c, cr);
}

/* nh heads of hs rotated in rows stride apart, positions n % T or given; forward and inverse */
static void test_rope(ctx *c, int64_t N, int nh, int hs, int64_t stride, int T, int with_pos, double theta)
{
    char nm[64];
    snprintf(nm, sizeof nm, "N%lld nh%d hs%d%s", (long long)N, nh, hs, with_pos ? " pos" : "");
    const int64_t n = N * stride;
    float *x = hrand(c->dt, n, -2, 2), *inv = xmalloc((size_t)hs / 2 * 4);
    for (int i = 0; i < hs / 2; i++) inv[i] = (float)(1.0 / pow(theta, 2.0 * i / hs));
    int32_t *pos = xmalloc((size_t)N * 4);
    for (int64_t i = 0; i < N; i++) pos[i] = with_pos ? rng_int(32768) : (int32_t)(i % T);
    void *dx = up(c, x, n);
    float *dinv = upf(c, inv, hs / 2);
    int32_t *dpos = with_pos ? upi(c, pos, N) : NULL;
    for (int inverse = 0; inverse < 2; inverse++) {
        float *ref = hcopy(x, n);
        c->cpu->rope(c->cpu, ref, N, nh, hs, stride, with_pos ? pos : NULL, T, inv, inverse);
        void *d = up(c, x, n);
        c->gpu->rope(c->gpu, d, N, nh, hs, stride, dpos, T, dinv, inverse);
        gsync(c, "rope");
        float *g = down(c, d, n);
        compare(c, "rope", inverse ? "inverse" : nm, g, ref, n, tol_of(c, 1e-5, 1e-2, 5e-3));
        free(ref), free(g);
        dfree(c, d);
    }
    free(x), free(inv), free(pos);
    dfree(c, dx), dfree(c, dinv);
    if (dpos) dfree(c, dpos);
}

static void test_swiglu(ctx *c, int64_t N, int F)
{
    char nm[64];
    snprintf(nm, sizeof nm, "N%lld F%d", (long long)N, F);
    float *gu = hrand(c->dt, N * 2 * F, -6, 6), *out = xmalloc(N * F * 4), *dy = hrand(c->dt, N * F, -1, 1);
    float *dgu = xmalloc(N * 2 * F * 4), *nan_g = nans(N * 2 * F);
    c->cpu->swiglu_fwd(c->cpu, out, gu, N, F);
    c->cpu->swiglu_bwd(c->cpu, dgu, dy, gu, N, F);
    void *dg_ = up(c, gu, N * 2 * F), *dout = dalloc(c, N * F * es(c)), *ddy = up(c, dy, N * F);
    void *ddg = up(c, nan_g, N * 2 * F); /* overwritten */
    c->gpu->swiglu_fwd(c->gpu, dout, dg_, N, F);
    c->gpu->swiglu_bwd(c->gpu, ddg, ddy, dg_, N, F);
    gsync(c, "swiglu");
    float *go = down(c, dout, N * F), *gg = down(c, ddg, N * 2 * F);
    compare(c, "swiglu_fwd", nm, go, out, N * F, tol_of(c, 1e-5, 1e-2, 5e-3));
    compare(c, "swiglu_bwd", nm, gg, dgu, N * 2 * F, tol_of(c, 1e-5, 1e-2, 5e-3));
    free(gu), free(out), free(dy), free(dgu), free(nan_g), free(go), free(gg);
    dfree(c, dg_), dfree(c, dout), dfree(c, ddy), dfree(c, ddg);
}

/* ---------------------------------------------------------------- gelu, add */

static void test_elementwise(ctx *c, int64_t n, int off)
{
    char nm[64];
    snprintf(nm, sizeof nm, "n%lld off%d", (long long)n, off);
    /* off shifts the device pointers by elements, to take the unaligned (scalar) path */
    float *x = hrand(c->dt, n, -5, 5), *y = hrand(c->dt, n, -3, 3), *g = hrand(c->dt, n, -1, 1);
    float *ref = xmalloc(n * 4);
    void *bx = dalloc(c, (n + off) * es(c)), *by = dalloc(c, (n + off) * es(c));
    void *bo = dalloc(c, (n + off) * es(c)), *bg = dalloc(c, (n + off) * es(c));
    char *dx_ = (char *)bx + off * es(c), *dy_ = (char *)by + off * es(c);
    char *do_ = (char *)bo + off * es(c), *dg_ = (char *)bg + off * es(c);
    void *t;
    t = up(c, x, n); c->gpu->copy(c->gpu, dx_, t, n * es(c), NULL); dfree(c, t);
    t = up(c, y, n); c->gpu->copy(c->gpu, dy_, t, n * es(c), NULL); dfree(c, t);
    c->cpu->gelu_fwd(c->cpu, ref, x, n);
    c->gpu->gelu_fwd(c->gpu, do_, dx_, n);
    gsync(c, "gelu_fwd");
    float *h = down(c, do_, n);
    compare(c, "gelu_fwd", nm, h, ref, n, tol_of(c, 1e-5, 1e-2, 5e-3));
    free(h);
    /* gelu_bwd accumulates into a random dx; twice for determinism */
    void *raw[2];
    for (int r = 0; r < 2; r++) {
        t = up(c, g, n); c->gpu->copy(c->gpu, dg_, t, n * es(c), NULL); dfree(c, t);
        c->gpu->gelu_bwd(c->gpu, dg_, dx_, dy_, n);
        gsync(c, "gelu_bwd");
        raw[r] = down_raw(c, dg_, n * es(c));
    }
    memcpy(ref, g, n * 4);
    c->cpu->gelu_bwd(c->cpu, ref, x, y, n);
    h = dec(c, raw[0], n);
    compare(c, "gelu_bwd", nm, h, ref, n, tol_of(c, 1e-5, 1e-2, 5e-3));
    same_bits(c, "gelu_bwd", nm, raw[0], raw[1], n * es(c));
    free(h), free(raw[0]), free(raw[1]);
    /* add, out of place and in place (out == a) */
    c->cpu->add(c->cpu, ref, x, y, n);
    c->gpu->add(c->gpu, do_, dx_, dy_, n);
    c->gpu->add(c->gpu, dx_, dx_, dy_, n);
    gsync(c, "add");
    h = down(c, do_, n);
    compare(c, "add", nm, h, ref, n, tol_of(c, 1e-6, 1e-2, 5e-3));
    free(h);
    h = down(c, dx_, n);
    compare(c, "add", "in place", h, ref, n, tol_of(c, 1e-6, 1e-2, 5e-3));
    free(h);
    free(x), free(y), free(g), free(ref);
    dfree(c, bx), dfree(c, by), dfree(c, bo), dfree(c, bg);
}

/* ---------------------------------------------------------------- cross-entropy */

static void test_xent(ctx *c, int64_t N, int V, int Vp, float dloss)
{
    char nm[64];
    snprintf(nm, sizeof nm, "N%lld V%d Vp%d d%g", (long long)N, V, Vp, dloss);
    float *lg = hrand(c->dt, N * Vp, -4, 4);
    for (int64_t n = 0; n < N; n++) /* garbage in the padded columns must not matter */
        for (int j = V; j < Vp; j++) lg[n * Vp + j] = round_to(c->dt, 100.0f);
    int32_t *tg = xmalloc(N * 4);
    for (int64_t n = 0; n < N; n++) tg[n] = (n % 7 == 3) ? -1 : rng_int(V);
    tg[0] = V - 1;
    if (N > 1) tg[1] = 0;
    if (N > 2) tg[2] = -1;
    float *loss = xmalloc(N * 4);
    void *dlg = up(c, lg, N * Vp);
    int32_t *dtg = upi(c, tg, N);
    float *dloss_ = dalloc(c, N * 4);
    void *raw[2];
    float *gl = NULL;
    for (int r = 0; r < 2; r++) {
        if (r) {
            dfree(c, dlg);
            dlg = up(c, lg, N * Vp);
        }
        c->gpu->xent(c->gpu, dloss_, dlg, dtg, N, V, Vp, dloss);
        gsync(c, "xent");
        raw[r] = down_raw(c, dlg, N * Vp * es(c));
        if (!r) gl = downf(c, dloss_, N);
    }
    float *lin = hcopy(lg, N * Vp);
    c->cpu->xent(c->cpu, loss, lg, tg, N, V, Vp, dloss);
    compare(c, "xent", nm, gl, loss, N, tol_of(c, 2e-5, 2e-5, 2e-5));
    float *h = dec(c, raw[0], N * Vp);
    if (dloss != 0.0f) {
        compare(c, "xent", "dlogits", h, lg, N * Vp, tol_of(c, 5e-5, 1e-2, 5e-3));
        same_bits(c, "xent", "dlogits", raw[0], raw[1], N * Vp * es(c));
    } else {
        int same = memcmp(h, lin, N * Vp * 4) == 0;
        printf("%-4s %-14s %-5s %-22s logits untouched with dloss 0\n", same ? "ok" : "FAIL", "xent", c->dn, nm);
        CHECK(same, "xent [%s]: logits changed with dloss = 0", c->dn);
    }
    free(h), free(raw[0]), free(raw[1]), free(lin), free(gl), free(lg), free(tg), free(loss);
    dfree(c, dlg), dfree(c, dtg), dfree(c, dloss_);
}

/* ---------------------------------------------------------------- optimizer and vectors */

/* off: the device arrays start that many elements into their allocations (off 1: not 16-byte
 * aligned, the kernel's one-element path) */
static void test_adamw(ctx *c, int64_t n, int with_p16, int wmode, int off)
{
    char nm[64];
    snprintf(nm, sizeof nm, "n%lld p16=%d w=%d off=%d", (long long)n, with_p16, wmode, off);
    zinf_adamw_args a = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                         .bias_correction1 = 1 - 0.9f * 0.9f * 0.9f, .bias_correction2 = 1 - 0.95f * 0.95f * 0.95f,
                         .grad_scale = 0.5f, .adam_w_mode = wmode};
    float *p = hrand(ZINF_F32, n, -1, 1), *g = hrand(ZINF_F32, n, -2, 2);
    float *m = hrand(ZINF_F32, n, -0.1f, 0.1f), *v = hrand(ZINF_F32, n, 0, 0.01f);
    float *dp = (float *)dalloc(c, (n + off) * 4) + off, *dg = (float *)dalloc(c, (n + off) * 4) + off;
    float *dm = (float *)dalloc(c, (n + off) * 4) + off, *dv = (float *)dalloc(c, (n + off) * 4) + off;
    void *d16a = with_p16 ? dalloc(c, (n + off) * es(c)) : NULL;
    void *d16 = with_p16 ? (char *)d16a + (size_t)off * es(c) : NULL;
    for (int k = 0; k < 4; k++) /* the arrays' contents at the offset */
        c->gpu->copy(c->gpu, (float *[]){dp, dg, dm, dv}[k], (float *[]){p, g, m, v}[k], (size_t)n * 4, NULL);
    c->gpu->adamw(c->gpu, dp, d16, dg, ZINF_F32, dm, dv, n, &a);
    gsync(c, "adamw");
    c->cpu->adamw(c->cpu, p, NULL, g, ZINF_F32, m, v, n, &a);
    float *hp = downf(c, dp, n), *hm = downf(c, dm, n), *hv = downf(c, dv, n);
    compare(c, "adamw", "p", hp, p, n, 1e-6);
    compare(c, "adamw", "m", hm, m, n, 1e-6);
    compare(c, "adamw", "v", hv, v, n, 1e-6);
    /* each operation rounded alone on both sides (no fused multiply-add): the CPU's bits */
    int bits = !memcmp(hp, p, (size_t)n * 4) && !memcmp(hm, m, (size_t)n * 4) && !memcmp(hv, v, (size_t)n * 4);
    printf("%-4s %-14s %-5s %-22s p, m, v %s the CPU's\n", bits ? "ok" : "FAIL", "adamw", c->dn, nm,
           bits ? "have the bits of" : "DIFFER from");
    CHECK(bits, "adamw [%s %s]: p, m or v differ from the CPU's bits", c->dn, nm);
    if (with_p16) { /* p16 = the GPU's own fp32 result, rounded to nearest: bit-exact */
        float *h16 = down(c, d16, n);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += h16[i] != round_to(c->dt, hp[i]);
        printf("%-4s %-14s %-5s %-22s p16 == rne(p): %lld mismatches\n", bad ? "FAIL" : "ok", "adamw", c->dn, nm,
               (long long)bad);
        CHECK(bad == 0, "adamw [%s]: p16 differs from rounded p in %lld places", c->dn, (long long)bad);
        free(h16);
        dfree(c, d16a);
    }
    free(hp), free(hm), free(hv), free(p), free(g), free(m), free(v);
    dfree(c, dp - off), dfree(c, dg - off), dfree(c, dm - off), dfree(c, dv - off);
}

/* A gradient in the compute dtype (zero.c's one-rank stage-0 step reads it so): AdamW and the sum
 * of squares over it give the same bits as over its exact fp32 conversion, aligned (the vector
 * loop, 8-byte loads) and off by one element (the one-element path). */
static void test_grad16(ctx *c, int64_t n, int off)
{
    if (c->dt == ZINF_F32) return;
    char nm[64];
    snprintf(nm, sizeof nm, "n%lld off=%d", (long long)n, off);
    zinf_adamw_args a = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                         .bias_correction1 = 1 - 0.9f * 0.9f, .bias_correction2 = 1 - 0.95f * 0.95f,
                         .grad_scale = 0.25f, .adam_w_mode = 1};
    float *g = hrand(c->dt, n + off, -2, 2); /* values the compute dtype holds exactly */
    float *st[3] = {hrand(ZINF_F32, n, -1, 1), hrand(ZINF_F32, n, -0.1f, 0.1f), hrand(ZINF_F32, n, 0, 0.01f)};
    char *g16a = up(c, g, n + off);
    const void *g16 = g16a + (size_t)off * es(c);
    float *g32 = upf(c, g + off, n);
    void *raw[2][4];
    for (int k = 0; k < 2; k++) { /* k 0: fp32 gradient; 1: the 16-bit one */
        float *d[3];
        for (int j = 0; j < 3; j++) d[j] = upf(c, st[j], n);
        void *p16 = dalloc(c, (size_t)n * es(c));
        c->gpu->adamw(c->gpu, d[0], p16, k ? g16 : (const void *)g32, k ? c->dt : ZINF_F32, d[1], d[2], n, &a);
        gsync(c, "adamw");
        for (int j = 0; j < 3; j++) raw[k][j] = down_raw(c, d[j], (size_t)n * 4), dfree(c, d[j]);
        raw[k][3] = down_raw(c, p16, (size_t)n * es(c)), dfree(c, p16);
    }
    int same = 1;
    for (int j = 0; j < 4; j++) same &= memcmp(raw[0][j], raw[1][j], (size_t)n * (j < 3 ? 4 : es(c))) == 0;
    printf("%-4s %-14s %-5s %-22s 16-bit gradient: p, m, v, p16 %s the fp32 gradient's\n", same ? "ok" : "FAIL",
           "adamw", c->dn, nm, same ? "have the bits of" : "DIFFER from");
    CHECK(same, "adamw [%s %s]: a 16-bit gradient gives other bits than its fp32 value", c->dn, nm);
    const void *x16 = g16, *x32 = g32;
    double s16 = c->gpu->sumsq(c->gpu, 1, &x16, &n, c->dt), s32 = c->gpu->sumsq(c->gpu, 1, &x32, &n, ZINF_F32);
    /* two arrays in one call, the second of 16-bit length 0 */
    const void *xs[2] = {g16, g16};
    const int64_t ns[2] = {n, 0};
    double s2 = c->gpu->sumsq(c->gpu, 2, xs, ns, c->dt);
    double ref = 0;
    for (int64_t i = 0; i < n; i++) ref += (double)g[off + i] * g[off + i];
    int ok = memcmp(&s16, &s32, 8) == 0 && memcmp(&s16, &s2, 8) == 0 && fabs(s16 - ref) <= 1e-12 * ref;
    printf("%-4s %-14s %-5s %-22s 16-bit: %.17g, fp32: %.17g, want %.17g\n", ok ? "ok" : "FAIL", "sumsq", c->dn, nm,
           s16, s32, ref);
    CHECK(ok, "sumsq [%s %s]: 16-bit %.17g, fp32 %.17g, host %.17g", c->dn, nm, s16, s32, ref);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 4; j++) free(raw[k][j]);
    for (int j = 0; j < 3; j++) free(st[j]);
    free(g), dfree(c, g16a), dfree(c, g32);
}

static void test_vectors(ctx *c, int64_t n)
{
    char nm[64];
    snprintf(nm, sizeof nm, "n%lld", (long long)n);
    float *x = hrand(ZINF_F32, n, -3, 3), *y = hrand(ZINF_F32, n, -1, 1);
    float *dx_ = upf(c, x, n), *dy_ = upf(c, y, n);
    double s1 = zinf_sumsq1(c->gpu, dx_, n), s2 = zinf_sumsq1(c->gpu, dx_, n);
    double sr = zinf_sumsq1(c->cpu, x, n);
    double rel = fabs(s1 - sr) / sr;
    printf("%-4s %-14s %-5s %-22s got %.17g want %.17g rel %.3g; twice same bits: %s\n",
           rel <= 1e-12 && memcmp(&s1, &s2, 8) == 0 ? "ok" : "FAIL", "sumsq", c->dn, nm, s1, sr, rel,
           memcmp(&s1, &s2, 8) == 0 ? "yes" : "NO");
    CHECK(rel <= 1e-12, "sumsq [%s]: %.17g vs %.17g", c->dn, s1, sr);
    CHECK(memcmp(&s1, &s2, 8) == 0, "sumsq [%s]: not deterministic", c->dn);
    double s0 = zinf_sumsq1(c->gpu, dx_, 0);
    CHECK(s0 == 0.0, "sumsq of 0 elements = %g", s0);
    /* NaN and Inf propagate */
    float bad[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        c->gpu->copy(c->gpu, dx_ + n / 2, &bad[k], 4, NULL);
        double s = zinf_sumsq1(c->gpu, dx_, n);
        int ok = k == 0 ? isnan(s) : (isinf(s) && s > 0);
        printf("%-4s %-14s %-5s %-22s with one %s: %g\n", ok ? "ok" : "FAIL", "sumsq", c->dn, nm,
               k ? "Inf" : "NaN", s);
        CHECK(ok, "sumsq [%s]: %s did not propagate (%g)", c->dn, k ? "Inf" : "NaN", s);
    }
    c->gpu->copy(c->gpu, dx_, x, n * 4, NULL);
    /* scale, axpy */
    c->gpu->scale(c->gpu, dx_, n, 0.75f);
    c->gpu->axpy(c->gpu, dy_, dx_, n, -1.5f);
    gsync(c, "scale/axpy");
    c->cpu->scale(c->cpu, x, n, 0.75f);
    c->cpu->axpy(c->cpu, y, x, n, -1.5f);
    float *hx = downf(c, dx_, n), *hy = downf(c, dy_, n);
    compare(c, "scale", nm, hx, x, n, 1e-7);
    compare(c, "axpy", nm, hy, y, n, 1e-6);
    free(hx), free(hy), free(x), free(y);
    dfree(c, dx_), dfree(c, dy_);
}

/* ---------------------------------------------------------------- benchmark (--bench) */

/* Not a check: times each operation at GPT-2 124M shapes (B=16, T=1024, C=768, NH=12, L=12,
 * Vp=50304) in the compute dtype, then a whole training step issued the way src/model.c issues
 * it (forward, xent, backward, AdamW over all parameters), and prints tokens/s. */

static void bench_fill(ctx *c, void *d, int64_t n, float lo, float hi)
{
    const int64_t chunk = 1 << 22;
    int64_t m = n < chunk ? n : chunk;
    float *h = hrand(c->dt, m, lo, hi);
    void *t = up(c, h, m);
    for (int64_t i = 0; i < n; i += m)
        c->gpu->copy(c->gpu, (char *)d + i * es(c), t, (size_t)((n - i < m) ? n - i : m) * es(c), NULL);
    gsync(c, "bench fill");
    dfree(c, t);
    free(h);
}

typedef struct {
    zinf_backend *g;
    int B, T, C, NH, L, V, Vp, NKV, hs;
    int64_t N;
    void *x, *ln, *qkv, *att, *fch, *fchg, *logits, *res, *dres, *dln, *dqkv, *datt, *dfch, *dfchg;
    float *mean, *rstd, *lse, *losses;
    int32_t *tok;
    void *wte, *wpe, *lnw, *lnb, *wqkv, *bqkv, *wproj, *bproj, *wfc, *bfc, *wfp, *bfp;
    void *gwte, *gwpe, *glnw, *glnb, *gwqkv, *gbqkv, *gwproj, *gbproj, *gwfc, *gbfc, *gwfp, *gbfp;
    float *master, *gmaster, *mom, *var;
    int64_t nparams;
    void *p16;
} bstate;

typedef void (*bench_fn)(bstate *s);

static void b_enc_f(bstate *s) { s->g->encoder_fwd(s->g, s->res, s->tok, s->wte, s->wpe, s->B, s->T, s->C); }
static void b_enc_b(bstate *s) { s->g->encoder_bwd(s->g, s->gwte, s->gwpe, s->dres, s->tok, s->B, s->T, s->C); }
static void b_ln_f(bstate *s) { s->g->layernorm_fwd(s->g, s->ln, s->mean, s->rstd, s->res, s->lnw, s->lnb, s->N, s->C); }
static void b_ln_b(bstate *s) { s->g->layernorm_bwd(s->g, s->dres, s->glnw, s->glnb, s->dln, s->res, s->lnw, s->mean, s->rstd, s->N, s->C); }
static void b_qkv_f(bstate *s) { s->g->matmul_fwd(s->g, s->qkv, s->ln, s->wqkv, s->bqkv, s->N, s->C, 3 * s->C); }
static void b_qkv_b(bstate *s) { s->g->matmul_bwd(s->g, s->dln, s->gwqkv, s->gbqkv, s->dqkv, s->ln, s->wqkv, s->N, s->C, 3 * s->C, 1); }
static void b_att_f(bstate *s) { s->g->attention_fwd(s->g, s->att, s->lse, s->qkv, s->B, s->T, s->NH, s->NKV, s->hs, NULL); }
static void b_att_b(bstate *s) { s->g->attention_bwd(s->g, s->dqkv, s->datt, s->qkv, s->att, s->lse, s->B, s->T, s->NH, s->NKV, s->hs, NULL); }
static void b_proj_f(bstate *s) { s->g->matmul_fwd_res(s->g, s->x, s->att, s->wproj, s->bproj, s->res, s->N, s->C, s->C); }
static void b_proj_b(bstate *s) { s->g->matmul_bwd(s->g, s->datt, s->gwproj, s->gbproj, s->dres, s->att, s->wproj, s->N, s->C, s->C, 1); }
static void b_add(bstate *s) { s->g->add(s->g, s->res, s->res, s->x, s->N * s->C); }
static void b_fc_f(bstate *s) { s->g->matmul_fwd(s->g, s->fch, s->ln, s->wfc, s->bfc, s->N, s->C, 4 * s->C); }
static void b_fc_b(bstate *s) { s->g->matmul_bwd(s->g, s->dln, s->gwfc, s->gbfc, s->dfch, s->ln, s->wfc, s->N, s->C, 4 * s->C, 1); }
static void b_gelu_f(bstate *s) { s->g->gelu_fwd(s->g, s->fchg, s->fch, s->N * 4 * s->C); }
static void b_gelu_b(bstate *s) { s->g->gelu_bwd(s->g, s->dfch, s->fch, s->dfchg, s->N * 4 * s->C); }
static void b_fp_f(bstate *s) { s->g->matmul_fwd_res(s->g, s->res, s->fchg, s->wfp, s->bfp, s->x, s->N, 4 * s->C, s->C); }
static void b_fp_b(bstate *s) { s->g->matmul_bwd(s->g, s->dfchg, s->gwfp, s->gbfp, s->dres, s->fchg, s->wfp, s->N, 4 * s->C, s->C, 1); }
static void b_fcg_f(bstate *s) { s->g->matmul_gelu_fwd(s->g, s->fchg, s->fch, s->ln, s->wfc, s->bfc, s->N, s->C, 4 * s->C); }
static void b_fp_bw(bstate *s) { s->g->matmul_bwd(s->g, NULL, s->gwfp, s->gbfp, s->dres, s->fchg, s->wfp, s->N, 4 * s->C, s->C, 1); }
static void b_dgelu_b(bstate *s) { s->g->matmul_dgelu_bwd(s->g, s->dfch, s->dres, s->wfp, s->fch, s->N, 4 * s->C, s->C); }
static void b_head_f(bstate *s) { s->g->matmul_fwd(s->g, s->logits, s->ln, s->wte, NULL, s->N, s->C, s->Vp); }
static void b_head_b(bstate *s) { s->g->matmul_bwd(s->g, s->dln, s->gwte, NULL, s->logits, s->ln, s->wte, s->N, s->C, s->Vp, 1); }
static void b_xent_f(bstate *s) { s->g->xent(s->g, s->losses, s->logits, s->tok, s->N, s->V, s->Vp, 0.0f); }
static void b_xent_b(bstate *s) { s->g->xent(s->g, s->losses, s->logits, s->tok, s->N, s->V, s->Vp, 1.0f / (float)s->N); }
static void b_adamw(bstate *s)
{
    zinf_adamw_args a = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 1.0f, 1};
    s->g->adamw(s->g, s->master, s->p16, s->gmaster, ZINF_F32, s->mom, s->var, s->nparams, &a);
}
static void b_sumsq(bstate *s) { (void)zinf_sumsq1(s->g, s->gmaster, s->nparams); }

/* The backward of one block as model.c issues it, after the recomputation (when rc: 1 full,
 * 2 with the attention output kept); parts: 1 every op, 2 the GEMMs only, 3 attention only. */
static void b_block_bwd(bstate *s, int rc, int parts)
{
    int all = parts == 1, mm = parts != 3, att = parts != 2;
    if (rc) {
        if (all) b_ln_f(s);
        if (mm) b_qkv_f(s);
        if (att && rc == 1) b_att_f(s);
        if (mm) b_proj_f(s);
        if (all) b_ln_f(s);
        if (mm) b_fcg_f(s);
    }
    if (mm) b_fp_bw(s), b_dgelu_b(s), b_fc_b(s);
    if (all) b_ln_b(s);
    if (mm) b_proj_b(s);
    if (att) b_att_b(s);
    if (mm) b_qkv_b(s);
    if (all) b_ln_b(s);
}

/* A whole training step without data or communication: rc as above, parts as above. */
static void b_step_var(bstate *s, int rc, int parts)
{
    zinf_backend *g = s->g;
    size_t e = zinf_dtype_size(g->cdt);
    int all = parts == 1, mm = parts != 3, att = parts != 2;
    if (all) b_enc_f(s);
    for (int l = 0; l < s->L; l++) {
        if (all) b_ln_f(s);
        if (mm) b_qkv_f(s);
        if (att) b_att_f(s);
        if (mm) b_proj_f(s);
        if (all) b_ln_f(s);
        if (mm) b_fcg_f(s), b_fp_f(s);
    }
    if (all) b_ln_f(s);
    if (mm) b_head_f(s);
    if (all) b_xent_f(s), b_xent_b(s);
    if (mm) b_head_b(s);
    if (all) g->memset0(g, s->dres, (size_t)s->N * s->C * e, NULL), b_ln_b(s);
    for (int l = 0; l < s->L; l++) b_block_bwd(s, rc, parts);
    if (all) b_enc_b(s), b_sumsq(s), b_adamw(s);
}
static void b_step(bstate *s) { b_step_var(s, 0, 1); }
static void b_step_rc(bstate *s) { b_step_var(s, 1, 1); }
static void b_step_rc_keep(bstate *s) { b_step_var(s, 2, 1); }
static void b_step_rc_mm(bstate *s) { b_step_var(s, 1, 2); }
static void b_step_rc_att(bstate *s) { b_step_var(s, 1, 3); }

/* Steps issued back to back for several seconds, so that the GPU reaches the clock its power
 * limit allows under this load (short bursts run faster): the median of the last half. */
static double bench_sustained(ctx *c, bstate *s, bench_fn f, int steps)
{
    zinf_event *ev[65];
    if (steps > 64) steps = 64;
    for (int i = 0; i <= steps; i++) ev[i] = zinf_cuda_event_new_timed(c->gpu);
    f(s);
    gsync(c, "bench");
    c->gpu->event_record(c->gpu, ev[0], NULL);
    for (int i = 1; i <= steps; i++) {
        f(s);
        c->gpu->event_record(c->gpu, ev[i], NULL);
    }
    gsync(c, "bench");
    double ms[64];
    for (int i = 0; i < steps; i++) ms[i] = zinf_cuda_elapsed_ms(ev[i], ev[i + 1]);
    for (int i = 0; i <= steps; i++) c->gpu->event_free(c->gpu, ev[i]);
    int h = steps / 2, n = steps - h;
    for (int i = h; i < steps; i++) /* insertion sort of the second half */
        for (int j = i; j > h && ms[j] < ms[j - 1]; j--) { double t = ms[j]; ms[j] = ms[j - 1]; ms[j - 1] = t; }
    return ms[h + n / 2];
}

/* the best of reps timings of run(arg), after two warm-up calls (plans, scratch) */
static double time_best(ctx *c, void (*run)(void *), void *arg, int reps)
{
    zinf_event *e0 = zinf_cuda_event_new_timed(c->gpu), *e1 = zinf_cuda_event_new_timed(c->gpu);
    run(arg);
    run(arg);
    gsync(c, "bench");
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        c->gpu->event_record(c->gpu, e0, NULL);
        run(arg);
        c->gpu->event_record(c->gpu, e1, NULL);
        gsync(c, "bench");
        double ms = zinf_cuda_elapsed_ms(e0, e1);
        if (ms < best) best = ms;
    }
    c->gpu->event_free(c->gpu, e0);
    c->gpu->event_free(c->gpu, e1);
    return best;
}

typedef struct { bstate *s; bench_fn f; } bcall;
static void run_bcall(void *a) { ((bcall *)a)->f(((bcall *)a)->s); }
static double bench_time(ctx *c, bstate *s, bench_fn f, int reps)
{
    bcall a = {s, f};
    return time_best(c, run_bcall, &a, reps);
}

static void bench(ctx *c, int B, int xl)
{
    bstate s = {.g = c->gpu, .B = B, .T = 1024, .C = xl ? 1600 : 768, .NH = xl ? 25 : 12, .L = xl ? 48 : 12,
                .V = 50257, .Vp = 50304, .NKV = xl ? 25 : 12, .hs = 64};
    int64_t N = s.N = (int64_t)s.B * s.T, C = s.C, Vp = s.Vp;
    void **acts[] = {&s.x, &s.ln, &s.res, &s.dres, &s.dln, &s.att, &s.datt};
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) { *acts[i] = dalloc(c, N * C * es(c)); bench_fill(c, *acts[i], N * C, -1, 1); }
    s.qkv = dalloc(c, N * 3 * C * es(c)), bench_fill(c, s.qkv, N * 3 * C, -1, 1);
    s.dqkv = dalloc(c, N * 3 * C * es(c)), bench_fill(c, s.dqkv, N * 3 * C, -1, 1);
    void **big[] = {&s.fch, &s.fchg, &s.dfch, &s.dfchg};
    for (size_t i = 0; i < 4; i++) { *big[i] = dalloc(c, N * 4 * C * es(c)); bench_fill(c, *big[i], N * 4 * C, -1, 1); }
    s.logits = dalloc(c, N * Vp * es(c)), bench_fill(c, s.logits, N * Vp, -4, 4);
    s.mean = dalloc(c, N * 4), s.rstd = dalloc(c, N * 4), s.losses = dalloc(c, N * 4);
    s.lse = dalloc(c, (int64_t)B * s.NH * s.T * 4);
    int32_t *tok = xmalloc(N * 4);
    for (int64_t i = 0; i < N; i++) tok[i] = rng_int(s.V);
    s.tok = upi(c, tok, N);
    free(tok);
    struct { void **p, **g; int64_t n; } ws[] = {
        {&s.wte, &s.gwte, (int64_t)Vp * C}, {&s.wpe, &s.gwpe, 1024 * C}, {&s.lnw, &s.glnw, C},
        {&s.lnb, &s.glnb, C}, {&s.wqkv, &s.gwqkv, 3 * C * C}, {&s.bqkv, &s.gbqkv, 3 * C},
        {&s.wproj, &s.gwproj, C * C}, {&s.bproj, &s.gbproj, C}, {&s.wfc, &s.gwfc, 4 * C * C},
        {&s.bfc, &s.gbfc, 4 * C}, {&s.wfp, &s.gwfp, 4 * C * C}, {&s.bfp, &s.gbfp, C}};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
        *ws[i].p = dalloc(c, ws[i].n * es(c)), bench_fill(c, *ws[i].p, ws[i].n, -0.05f, 0.05f);
        *ws[i].g = dalloc(c, ws[i].n * es(c)), bench_fill(c, *ws[i].g, ws[i].n, -0.01f, 0.01f);
    }
    /* GPT-2's parameters (wte padded to Vp): 12 C^2 + 13 C per block, embeddings, final LayerNorm */
    s.nparams = (int64_t)s.L * (12 * C * C + 13 * C) + (Vp + 1024) * C + 2 * C;
    s.master = dalloc(c, s.nparams * 4), s.gmaster = dalloc(c, s.nparams * 4);
    s.mom = dalloc(c, s.nparams * 4), s.var = dalloc(c, s.nparams * 4);
    s.p16 = dalloc(c, s.nparams * es(c));
    struct { const char *name; bench_fn f; int per_step; double flop; } ops[] = {
        {"encoder_fwd", b_enc_f, 1, 0}, {"encoder_bwd", b_enc_b, 1, 0},
        {"layernorm_fwd", b_ln_f, 2 * s.L + 1, 0}, {"layernorm_bwd", b_ln_b, 2 * s.L + 1, 0},
        {"matmul_fwd qkv", b_qkv_f, s.L, 2.0 * N * C * 3 * C}, {"matmul_bwd qkv", b_qkv_b, s.L, 4.0 * N * C * 3 * C},
        {"attention_fwd", b_att_f, s.L, 2.0 * B * s.NH * (double)s.T * s.T * 64},
        {"attention_bwd", b_att_b, s.L, 5.0 * B * s.NH * (double)s.T * s.T * 64},
        {"matmul_fwd_res proj", b_proj_f, s.L, 2.0 * N * C * C}, {"matmul_bwd proj", b_proj_b, s.L, 4.0 * N * C * C},
        {"add", b_add, 0, 0},
        {"matmul_fwd fc", b_fc_f, 0, 2.0 * N * C * 4 * C}, {"matmul_bwd fc", b_fc_b, s.L, 4.0 * N * C * 4 * C},
        {"gelu_fwd", b_gelu_f, 0, 0}, {"gelu_bwd", b_gelu_b, 0, 0},
        {"matmul_gelu_fwd fc", b_fcg_f, s.L, 2.0 * N * C * 4 * C},
        {"matmul_fwd_res fcproj", b_fp_f, s.L, 2.0 * N * C * 4 * C}, {"matmul_bwd fcproj", b_fp_b, 0, 4.0 * N * C * 4 * C},
        {"matmul_bwd fcproj dw", b_fp_bw, s.L, 2.0 * N * C * 4 * C},
        {"matmul_dgelu_bwd", b_dgelu_b, s.L, 2.0 * N * C * 4 * C},
        {"matmul_fwd head", b_head_f, 1, 2.0 * N * C * Vp}, {"matmul_bwd head", b_head_b, 1, 4.0 * N * C * Vp},
        {"xent (loss)", b_xent_f, 1, 0}, {"xent (grad)", b_xent_b, 1, 0},
        {"sumsq all", b_sumsq, 1, 0}, {"adamw all", b_adamw, 1, 0},
    };
    printf("\nbench %s B=%d T=%d (N=%lld tokens), GPT-2 %s shapes (C=%d, %d heads, %d layers, %lld parameters)\n",
           c->dn, B, s.T, (long long)N, xl ? "1.5B" : "124M", s.C, s.NH, s.L, (long long)s.nparams);
    printf("%-20s %10s %6s %10s %9s\n", "op", "ms", "x/step", "ms/step", "TFLOP/s");
    double total = 0;
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        double ms = bench_time(c, &s, ops[i].f, 5);
        total += ms * ops[i].per_step;
        printf("%-20s %10.3f %6d %10.3f", ops[i].name, ms, ops[i].per_step, ms * ops[i].per_step);
        if (ops[i].flop > 0) printf(" %9.1f", ops[i].flop / ms / 1e9);
        printf("\n");
    }
    printf("%-20s %10s %6s %10.3f  -> %.0f tokens/s (sum of ops)\n", "sum", "", "", total, N / total * 1e3);
    double step = bench_time(c, &s, b_step, 3);
    printf("%-20s %10.3f %6s %10s  -> %.0f tokens/s (issued as model.c does, no data/comm)\n", "whole step", step, "",
           "", N / step * 1e3);
    /* the same with recompute, each held for several seconds: the sustained rate under the power
     * limit, for the whole step and for its GEMMs alone and its attention alone */
    struct { const char *name; bench_fn f; } sus[] = {
        {"step", b_step}, {"step, recompute", b_step_rc}, {"step, recompute keep-att", b_step_rc_keep},
        {"GEMMs of recompute step", b_step_rc_mm}, {"attention of rc step", b_step_rc_att}};
    for (size_t i = 0; i < sizeof sus / sizeof *sus; i++) {
        double one = bench_time(c, &s, sus[i].f, 1);
        int n = (int)(8000.0 / one);
        n = n < 8 ? 8 : n > 64 ? 64 : n;
        double ms = bench_sustained(c, &s, sus[i].f, n);
        printf("sustained %-26s %10.3f ms over %d steps -> %.0f tokens/s\n", sus[i].name, ms, n, N / ms * 1e3);
    }
    void **all[] = {&s.x, &s.ln, &s.res, &s.dres, &s.dln, &s.att, &s.datt, &s.qkv, &s.dqkv, &s.fch, &s.fchg,
                    &s.dfch, &s.dfchg, &s.logits, (void **)&s.mean, (void **)&s.rstd, (void **)&s.losses,
                    (void **)&s.lse, (void **)&s.tok, (void **)&s.master, (void **)&s.gmaster, (void **)&s.mom,
                    (void **)&s.var, &s.p16};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dfree(c, *all[i]);
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) dfree(c, *ws[i].p), dfree(c, *ws[i].g);
}

/* --bench-llama: each op of a Llama-family training step at a published shape (no recompute, one
 * GPU, stage 0: what jobs/bench/llama_speed.sh runs), timed alone, times its count in a step,
 * summed; then the MFU that sum would give by issue 21's count (6 (N - embedding) + 12 L NH hs T
 * FLOPs a token), to hold against the step a run measures (the difference: launch gaps, the
 * head's chunks, memsets and the rest the sum leaves out). */
typedef struct {
    zinf_backend *g;
    int B, T, C, F, NH, NKV, hs, L, V, Vp, QKV, A;
    int64_t N;
    void *x, *ln, *qkv, *att, *gu, *h, *logits, *res, *dres, *dln, *dqkv, *datt, *dgu, *dh;
    float *rstd, *lse, *losses, *inv;
    int32_t *tok;
    void *wte, *nw, *wqkv, *bqkv, *wo, *wgu, *wd, *gwte, *gnw, *gwqkv, *gbqkv, *gwo, *gwgu, *gwd;
    float *master, *gmaster, *mom, *var;
    int64_t nparams;
    void *p16;
} lstate;
typedef void (*lbench_fn)(lstate *s);
static void l_enc_f(lstate *s) { s->g->encoder_fwd(s->g, s->res, s->tok, s->wte, NULL, s->B, s->T, s->C); }
static void l_enc_b(lstate *s) { s->g->encoder_bwd(s->g, s->gwte, NULL, s->dres, s->tok, s->B, s->T, s->C); }
static void l_rms_f(lstate *s) { s->g->rmsnorm_fwd(s->g, s->ln, s->rstd, s->res, s->nw, s->N, 1, s->C, s->C, 1e-5f); }
static void l_rms_b(lstate *s) { s->g->rmsnorm_bwd(s->g, s->dres, s->gnw, s->dln, s->res, s->nw, s->rstd, s->N, 1, s->C, s->C); }
static void l_qkv_f(lstate *s) { s->g->matmul_fwd(s->g, s->qkv, s->ln, s->wqkv, s->bqkv, s->N, s->C, s->QKV); }
static void l_qkv_b(lstate *s) { s->g->matmul_bwd(s->g, s->dln, s->gwqkv, s->gbqkv, s->dqkv, s->ln, s->wqkv, s->N, s->C, s->QKV, 1); }
static void l_rope_f(lstate *s) { s->g->rope(s->g, s->qkv, s->N, s->NH + s->NKV, s->hs, s->QKV, NULL, s->T, s->inv, 0); }
static void l_rope_b(lstate *s) { s->g->rope(s->g, s->dqkv, s->N, s->NH + s->NKV, s->hs, s->QKV, NULL, s->T, s->inv, 1); }
static void l_att_f(lstate *s) { s->g->attention_fwd(s->g, s->att, s->lse, s->qkv, s->B, s->T, s->NH, s->NKV, s->hs, NULL); }
static void l_att_b(lstate *s) { s->g->attention_bwd(s->g, s->dqkv, s->datt, s->qkv, s->att, s->lse, s->B, s->T, s->NH, s->NKV, s->hs, NULL); }
static void l_o_f(lstate *s) { s->g->matmul_fwd_res(s->g, s->x, s->att, s->wo, NULL, s->res, s->N, s->A, s->C); }
static void l_o_b(lstate *s) { s->g->matmul_bwd(s->g, s->datt, s->gwo, NULL, s->dres, s->att, s->wo, s->N, s->A, s->C, 1); }
static void l_gu_f(lstate *s) { s->g->matmul_fwd(s->g, s->gu, s->ln, s->wgu, NULL, s->N, s->C, 2 * s->F); }
static void l_gu_b(lstate *s) { s->g->matmul_bwd(s->g, s->dln, s->gwgu, NULL, s->dgu, s->ln, s->wgu, s->N, s->C, 2 * s->F, 1); }
static void l_sw_f(lstate *s) { s->g->swiglu_fwd(s->g, s->h, s->gu, s->N, s->F); }
static void l_sw_b(lstate *s) { s->g->swiglu_bwd(s->g, s->dgu, s->dh, s->gu, s->N, s->F); }
static void l_d_f(lstate *s) { s->g->matmul_fwd_res(s->g, s->res, s->h, s->wd, NULL, s->x, s->N, s->F, s->C); }
static void l_d_b(lstate *s) { s->g->matmul_bwd(s->g, s->dh, s->gwd, NULL, s->dres, s->h, s->wd, s->N, s->F, s->C, 1); }
static void l_head_f(lstate *s) { s->g->matmul_fwd(s->g, s->logits, s->ln, s->wte, NULL, s->N, s->C, s->Vp); }
static void l_head_b(lstate *s) { s->g->matmul_bwd(s->g, s->dln, s->gwte, NULL, s->logits, s->ln, s->wte, s->N, s->C, s->Vp, 1); }
static void l_xent_f(lstate *s) { s->g->xent(s->g, s->losses, s->logits, s->tok, s->N, s->V, s->Vp, 0.0f); }
static void l_xent_b(lstate *s) { s->g->xent(s->g, s->losses, s->logits, s->tok, s->N, s->V, s->Vp, 1.0f / (float)s->N); }
static void l_sumsq(lstate *s) { (void)zinf_sumsq1(s->g, s->gmaster, s->nparams); }
static void l_adamw(lstate *s)
{
    zinf_adamw_args a = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 1.0f, 1};
    s->g->adamw(s->g, s->master, s->p16, s->gmaster, ZINF_F32, s->mom, s->var, s->nparams, &a);
}

typedef struct { lstate *s; lbench_fn f; } lcall;
static void run_lcall(void *a) { ((lcall *)a)->f(((lcall *)a)->s); }
static double lbench_time(ctx *c, lstate *s, lbench_fn f, int reps)
{
    lcall a = {s, f};
    return time_best(c, run_lcall, &a, reps);
}

static void bench_llama(ctx *c, int B, int T, int qwen)
{
    /* Llama-3.2-1B (tied, 32 heads of 64 over 8 KV heads) or Qwen2.5-1.5B (tied, 12 heads of 128
     * over 2, q/k/v biases), as their config.json give them */
    lstate s = {.g = c->gpu, .B = B, .T = T, .C = qwen ? 1536 : 2048, .F = qwen ? 8960 : 8192, .NH = qwen ? 12 : 32,
                .NKV = qwen ? 2 : 8, .hs = qwen ? 128 : 64, .L = qwen ? 28 : 16, .V = qwen ? 151936 : 128256};
    s.Vp = (s.V + 127) / 128 * 128, s.QKV = (s.NH + 2 * s.NKV) * s.hs, s.A = s.NH * s.hs;
    const int64_t N = s.N = (int64_t)B * T, C = s.C, F = s.F;
    struct { void **p; int64_t n; } bufs[] = {
        {&s.x, N * C}, {&s.ln, N * C}, {&s.res, N * C}, {&s.dres, N * C}, {&s.dln, N * C}, {&s.att, N * s.A},
        {&s.datt, N * s.A}, {&s.qkv, N * s.QKV}, {&s.dqkv, N * s.QKV}, {&s.gu, N * 2 * F}, {&s.dgu, N * 2 * F},
        {&s.h, N * F}, {&s.dh, N * F}, {&s.logits, N * s.Vp}};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        *bufs[i].p = dalloc(c, bufs[i].n * es(c)), bench_fill(c, *bufs[i].p, bufs[i].n, -1, 1);
    s.rstd = dalloc(c, N * 4), s.losses = dalloc(c, N * 4), s.lse = dalloc(c, (int64_t)B * s.NH * T * 4);
    float *inv = xmalloc((size_t)s.hs / 2 * 4);
    for (int i = 0; i < s.hs / 2; i++) inv[i] = (float)pow(500000.0, -2.0 * i / s.hs);
    s.inv = upf(c, inv, s.hs / 2);
    free(inv);
    int32_t *tok = xmalloc(N * 4);
    for (int64_t i = 0; i < N; i++) tok[i] = rng_int(s.V);
    s.tok = upi(c, tok, N);
    free(tok);
    struct { void **p, **g; int64_t n; } ws[] = {
        {&s.wte, &s.gwte, (int64_t)s.Vp * C}, {&s.nw, &s.gnw, C}, {&s.wqkv, &s.gwqkv, (int64_t)s.QKV * C},
        {&s.bqkv, &s.gbqkv, s.QKV}, {&s.wo, &s.gwo, C * s.A}, {&s.wgu, &s.gwgu, 2 * F * C}, {&s.wd, &s.gwd, C * F}};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
        *ws[i].p = dalloc(c, ws[i].n * es(c)), bench_fill(c, *ws[i].p, ws[i].n, -0.05f, 0.05f);
        *ws[i].g = dalloc(c, ws[i].n * es(c)), bench_fill(c, *ws[i].g, ws[i].n, -0.01f, 0.01f);
    }
    if (!qwen) dfree(c, s.bqkv), dfree(c, s.gbqkv), s.bqkv = s.gbqkv = NULL;
    /* the parameters: per block two norms, q|k|v (and its bias), o, gate|up, down; the tied
     * embedding (padded) and the final norm */
    int64_t blk = 2 * C + (int64_t)s.QKV * C + (qwen ? s.QKV : 0) + (int64_t)s.A * C + 3 * C * F;
    s.nparams = s.L * blk + (int64_t)s.Vp * C + C;
    s.master = dalloc(c, s.nparams * 4), s.gmaster = dalloc(c, s.nparams * 4);
    s.mom = dalloc(c, s.nparams * 4), s.var = dalloc(c, s.nparams * 4);
    s.p16 = dalloc(c, s.nparams * es(c));
    const int L = s.L;
    const double tq = 2.0 * B * s.NH * (double)T * T * s.hs; /* QK^T and PV over the causal half */
    struct { const char *name; lbench_fn f; int per_step; double flop; } ops[] = {
        {"encoder_fwd", l_enc_f, 1, 0}, {"encoder_bwd", l_enc_b, 1, 0},
        {"rmsnorm_fwd", l_rms_f, 2 * L + 1, 0}, {"rmsnorm_bwd", l_rms_b, 2 * L + 1, 0},
        {"matmul_fwd qkv", l_qkv_f, L, 2.0 * N * C * s.QKV}, {"matmul_bwd qkv", l_qkv_b, L, 4.0 * N * C * s.QKV},
        {"rope", l_rope_f, L, 0}, {"rope (inverse)", l_rope_b, L, 0},
        {"attention_fwd", l_att_f, L, tq}, {"attention_bwd", l_att_b, L, 2.5 * tq},
        {"matmul_fwd_res o", l_o_f, L, 2.0 * N * s.A * C}, {"matmul_bwd o", l_o_b, L, 4.0 * N * s.A * C},
        {"matmul_fwd gate|up", l_gu_f, L, 2.0 * N * C * 2 * F}, {"matmul_bwd gate|up", l_gu_b, L, 4.0 * N * C * 2 * F},
        {"swiglu_fwd", l_sw_f, L, 0}, {"swiglu_bwd", l_sw_b, L, 0},
        {"matmul_fwd_res down", l_d_f, L, 2.0 * N * F * C}, {"matmul_bwd down", l_d_b, L, 4.0 * N * F * C},
        {"matmul_fwd head", l_head_f, 1, 2.0 * N * C * s.Vp}, {"matmul_bwd head", l_head_b, 1, 4.0 * N * C * s.Vp},
        {"xent (loss)", l_xent_f, 1, 0}, {"xent (grad)", l_xent_b, 1, 0},
        {"sumsq all", l_sumsq, 1, 0}, {"adamw all", l_adamw, 1, 0},
    };
    const double per_token = 6.0 * (double)(s.nparams - (int64_t)s.Vp * C) + 12.0 * L * s.NH * s.hs * (double)T;
    printf("\nbench-llama %s B=%d T=%d (N=%lld tokens), %s shape (C=%d, F=%d, %d heads of %d over %d, %d layers, "
           "vocabulary %d, %lld parameters; %.4g FLOPs a token by issue 21's count)\n",
           c->dn, B, T, (long long)N, qwen ? "Qwen2.5-1.5B" : "Llama-3.2-1B", s.C, s.F, s.NH, s.hs, s.NKV, L, s.V,
           (long long)s.nparams, per_token);
    printf("%-20s %10s %6s %10s %9s\n", "op", "ms", "x/step", "ms/step", "TFLOP/s");
    double total = 0, gemm = 0;
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        double ms = lbench_time(c, &s, ops[i].f, 5);
        total += ms * ops[i].per_step;
        if (ops[i].flop > 0 && strncmp(ops[i].name, "matmul", 6) == 0) gemm += ms * ops[i].per_step;
        printf("%-20s %10.3f %6d %10.3f", ops[i].name, ms, ops[i].per_step, ms * ops[i].per_step);
        if (ops[i].flop > 0) printf(" %9.1f", ops[i].flop / ms / 1e9);
        printf("\n");
    }
    printf("%-20s %10s %6s %10.3f  -> %.0f tokens/s, %.1f%% MFU by the count (sum of ops; GEMMs %.3f ms)\n", "sum", "",
           "", total, N / total * 1e3, per_token * N / (total * 1e-3) / 989e12 * 100, gemm);
    void **all[] = {&s.x, &s.ln, &s.res, &s.dres, &s.dln, &s.att, &s.datt, &s.qkv, &s.dqkv, &s.gu, &s.dgu, &s.h,
                    &s.dh, &s.logits, (void **)&s.rstd, (void **)&s.losses, (void **)&s.lse, (void **)&s.inv,
                    (void **)&s.tok, (void **)&s.master, (void **)&s.gmaster, (void **)&s.mom, (void **)&s.var,
                    &s.p16};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dfree(c, *all[i]);
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) dfree(c, *ws[i].p), dfree(c, *ws[i].g);
}

/* Attention alone on random inputs of one shape: qkv and the output's gradient filled, the
 * output, lse and dqkv the kernels' own */
static bstate attn_state(ctx *c, int B, int T, int NH, int NKV, int hs)
{
    bstate s = {.g = c->gpu, .B = B, .T = T, .NH = NH, .NKV = NKV, .hs = hs};
    const int64_t N = (int64_t)B * T, W = (int64_t)(NH + 2 * NKV) * hs, C = (int64_t)NH * hs;
    s.qkv = dalloc(c, N * W * es(c)), bench_fill(c, s.qkv, N * W, -1, 1);
    s.dqkv = dalloc(c, N * W * es(c));
    s.att = dalloc(c, N * C * es(c)), s.datt = dalloc(c, N * C * es(c)), bench_fill(c, s.datt, N * C, -1, 1);
    s.lse = dalloc(c, (int64_t)B * NH * T * 4);
    return s;
}

static void attn_state_free(ctx *c, bstate *s)
{
    dfree(c, s->qkv), dfree(c, s->dqkv), dfree(c, s->att), dfree(c, s->datt), dfree(c, s->lse);
}

/* The backward twice on the same inputs (after a forward): the same bits, or (same 0) only
 * whether they were. At long sequences dQ sums many key tiles, where a kernel adding them with
 * atomics differs; cuDNN's engine for the accumulated form did at T 4096 and not at 1024. */
static void attn_reruns(ctx *c, bstate *s, const char *nm, int same)
{
    const size_t bytes = (size_t)s->B * s->T * (s->NH + 2 * s->NKV) * s->hs * es(c);
    void *r[2];
    for (int k = 0; k < 2; k++) b_att_b(s), r[k] = down_raw(c, s->dqkv, bytes);
    if (same)
        same_bits(c, "attention_bwd", nm, r[0], r[1], bytes);
    else
        printf("     rerun: %s\n", memcmp(r[0], r[1], bytes) ? "other bits" : "the same bits");
    free(r[0]), free(r[1]);
}

/* The reruns at T 4096 in the op tests (make check-cuda), whichever kernels the switches pick */
static void test_attention_reruns(ctx *c, int B, int T, int NH, int NKV, int hs)
{
    bstate s = attn_state(c, B, T, NH, NKV, hs);
    b_att_f(&s);
    char nm[64];
    snprintf(nm, sizeof nm, "B%d T%d NH%d NKV%d hs%d", B, T, NH, NKV, hs);
    attn_reruns(c, &s, nm, 1);
    attn_state_free(c, &s);
}

/* --bench-attn [B] [T]: attention alone at Llama-sized heads (head size 128, grouped 32/8 and not)
 * beside head size 64 at the same width, with the kernels each ZINF_TEST_ATTN_HOPPER setting
 * picks; FLOPs counted causal (half the square): forward 2 B NH T^2 hs, backward 2.5x that. */
static void bench_attn(ctx *c, int B, int T, int same)
{
    const int shapes[][3] = {{32, 8, 128}, {32, 32, 128}, {64, 16, 64}, {64, 64, 64}};
    printf("\nbench attention %s B=%d T=%d (causal; TFLOP/s with the causal half)\n", c->dn, B, T);
    printf("%-24s %10s %9s %10s %9s\n", "shape", "fwd ms", "TFLOP/s", "bwd ms", "TFLOP/s");
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        bstate s = attn_state(c, B, T, shapes[i][0], shapes[i][1], shapes[i][2]);
        double fl = 2.0 * B * s.NH * (double)T * T * s.hs;
        double f = bench_time(c, &s, b_att_f, 5), b = bench_time(c, &s, b_att_b, 5);
        char nm[48];
        snprintf(nm, sizeof nm, "NH%d NKV%d hs%d", s.NH, s.NKV, s.hs);
        printf("%-24s %10.3f %9.1f %10.3f %9.1f\n", nm, f, fl / f / 1e9, b, 2.5 * fl / b / 1e9);
        attn_reruns(c, &s, nm, same); /* cuDNN's accumulated dQ (same 0) only says whether they differ */
        attn_state_free(c, &s);
    }
}

/* ---------------------------------------------------------------- main */

static void run_all(ctx *c, int big)
{
    test_casts(c);
    test_memory(c);
    test_encoder(c, 2, 7, 24, 50);
    test_encoder(c, 3, 5, 13, 7); /* odd C: scalar path */
    if (big) test_encoder(c, 4, 1024, 768, 50257);
    test_layernorm(c, 5, 24);
    test_layernorm(c, 7, 33);
    test_layernorm(c, 3, 1600);
    test_layernorm(c, 300, 1600); /* the wide warp-per-row kernel in 16-bit, a partial last chunk */
    test_layernorm(c, 130, 2048);
    if (big) test_layernorm(c, 4096, 768);
    test_matmul(c, 7, 24, 40, 1, 1);
    test_matmul(c, 64, 33, 17, 1, 1);
    test_matmul(c, 5, 16, 8, 0, 0);
    if (big) {
        test_matmul(c, 4096, 768, 2304, 1, 1);
        test_matmul(c, 4096, 3072, 768, 1, 1);
        test_matmul(c, 1024, 768, 50304, 0, 1);
    }
    test_gelu_epilogue(c, 256, 64);
    test_matmul_gelu(c, 7, 24, 40, 1, 0);
    test_matmul_gelu(c, 64, 32, 16, 0, 0);
    test_matmul_gelu(c, 64, 33, 17, 1, 0); /* OC % 8 != 0: unfused */
    test_matmul_gelu(c, 16, 24, 40, 1, 1); /* unaligned pre: unfused */
    test_matmul_dgelu(c, 7, 40, 24, 0);
    test_matmul_dgelu(c, 64, 17, 33, 0);   /* K % 8 != 0: unfused */
    test_matmul_dgelu(c, 16, 40, 24, 1);   /* unaligned pre: unfused */
    if (big) {
        test_matmul_gelu(c, 4096, 768, 3072, 1, 0);
        test_matmul_dgelu(c, 4096, 3072, 768, 0);
    }
    /* attention: generic head sizes, then the fast path (hs 64 and 128) over T */
    test_attention(c, 2, 7, 4, 4, 8);     /* hs 8 */
    test_attention(c, 1, 64, 2, 2, 8);    /* hs 8 */
    test_attention(c, 2, 33, 4, 4, 16);   /* hs 16 */
    test_attention(c, 2, 33, 4, 2, 16);   /* hs 16, grouped */
    test_attention(c, 1, 70, 6, 2, 96);   /* hs 96, grouped: generic */
    const int glens[] = {5, 1, 17, 40};
    test_attention_rows(c, 2, 70, 6, 2, 96, glens, 4); /* generic, packed */
    test_attention_rows(c, 2, 33, 4, 2, 16, glens, 4);
    /* the fast path three times: through cuDNN where it loads (rows of one sample; packed rows
     * take zinf's kernels), then zinf's own on a Hopper GPU: its wgmma kernels, then the mma.sync
     * ones (hs 128: the generic forward and dQ beside the mma.sync dK/dV) */
    for (int pass = 0; pass < 3; pass++) {
        zinf_cuda_attn_cudnn = pass == 0 && cudnn_on;
        zinf_cuda_attn_hopper = pass == 2 ? 0 : hopper_bits;
        const long runs0 = zinf_cuda_attn_cudnn_runs;
        int Ts[] = {1, 7, 64, 100, 256};
        for (int i = 0; i < 5; i++) test_attention(c, 2, Ts[i], 2, 2, 64);
        for (int i = 0; i < 5; i++) test_attention(c, 2, Ts[i], 4, 2, 64);  /* groups of 2 */
        for (int i = 0; i < 5; i++) test_attention(c, 1, Ts[i], 4, 1, 128); /* one kv head */
        test_attention(c, 2, 100, 4, 4, 128);
        test_attention(c, 1, 130, 8, 2, 128);
        /* samples packed into rows: lengths across tile edges (64, 128), of one token, longer
         * than a tile, and a row's last sample cut short */
        const int lens[] = {1, 65, 130, 7, 64, 200, 3, 128, 33};
        test_attention_rows(c, 2, 300, 4, 2, 64, lens, 9);
        test_attention_rows(c, 2, 300, 4, 1, 128, lens, 9);
        test_attention_rows(c, 1, 257, 2, 2, 64, lens + 2, 7);
        if (big) {
            test_attention(c, 4, 1024, 12, 12, 64);
            test_attention(c, 2, 1024, 8, 2, 128);
            if (c->dt != ZINF_F32) { /* no CPU reference at this length: the reruns' bits only */
                /* cuDNN's workspace bound splits these 3 samples into calls of 2 and 1 (test_estimate) */
                test_attention_reruns(c, 3, 4096, 48, 12, 128);
                test_attention_reruns(c, 2, 4096, 16, 16, 64);
            }
        } else {
            test_attention(c, 1, 1024, 2, 2, 64);
            test_attention(c, 1, 512, 4, 1, 128);
        }
        if (pass == 0 && zinf_cuda_cudnn_version() > 0 && c->dt != ZINF_F32) {
            /* cuDNN loaded: it must have taken these shapes, or the fast path silently is not it */
            long ran = zinf_cuda_attn_cudnn_runs - runs0;
            printf("%-4s %-14s %-5s cuDNN %d ran %ld attention calls\n", ran > 0 ? "ok" : "FAIL", "attention",
                   c->dn, zinf_cuda_cudnn_version(), ran);
            CHECK(ran > 0, "attention [%s]: cuDNN %d loaded but ran none of the calls (ZINF_ATTN_CUDNN=verbose says why)",
                  c->dn, zinf_cuda_cudnn_version());
        }
    }
    zinf_cuda_attn_cudnn = cudnn_on;
    zinf_cuda_attn_hopper = hopper_bits;
    test_rmsnorm(c, 7, 1, 24, 24, 0);
    test_rmsnorm(c, 33, 1, 128, 128 * 3, 0); /* one head's norm inside a packed row: hs 128, ld = the row */
    test_rmsnorm(c, 300, 1, 64, 64 * 6 + 8, 0);
    test_rmsnorm(c, 5, 1, 13, 17, 0);        /* odd: scalar path */
    test_rmsnorm(c, 600, 1, 2048, 2048, 0);
    test_rmsnorm(c, 130, 1, 1536, 1536, 0);          /* one pass for both gradients: 6 x 256 */
    test_rmsnorm(c, 70, 2, 256, 256 * 3, 256);       /* the same, 2 groups a row at an offset */
    /* Qwen3's q heads and k heads, each set in one call: 16 heads of 128 at the start of a q|k|v
     * row of 32 heads, and the 8 k heads after them; 3 heads of 64 (900 group rows, dw chunks
     * across the heads); an offset off the 16-byte packs, and the scalar path */
    test_rmsnorm(c, 37, 16, 128, 128 * 32, 0);
    test_rmsnorm(c, 37, 8, 128, 128 * 32, 128 * 16);
    test_rmsnorm(c, 300, 3, 64, 64 * 5, 64);
    test_rmsnorm(c, 21, 2, 64, 64 * 4, 3);
    test_rmsnorm(c, 9, 4, 13, 13 * 4 + 3, 1); /* odd: scalar path */
    test_rope(c, 7 * 5, 3, 64, 3 * 64 + 64, 5, 0, 10000.0);
    test_rope(c, 100, 6, 128, 10 * 128, 50, 1, 1e6);
    test_rope(c, 9, 2, 6, 20, 3, 1, 500000.0);
    test_swiglu(c, 7, 40);
    test_swiglu(c, 33, 17); /* scalar path */
    if (big) test_swiglu(c, 1024, 5632);
    test_elementwise(c, 1001, 0);
    test_elementwise(c, 4099, 1);
    if (big) test_elementwise(c, (int64_t)4096 * 3072, 0);
    test_xent(c, 9, 50, 64, 0.0f);
    test_xent(c, 9, 50, 64, 0.25f);
    test_xent(c, 6, 37, 41, 1.0f); /* Vp not a multiple of 8: scalar path */
    if (big) {
        test_xent(c, 4096, 50257, 50304, 0.0f);
        test_xent(c, 4096, 50257, 50304, 1.0f / 4096);
    }
    test_adamw(c, 1000003, 1, 1, 0);
    test_adamw(c, 1001, 0, 0, 0);
    test_adamw(c, 4099, 1, 1, 1);
    test_grad16(c, 1000003, 0);
    test_grad16(c, 4099, 1);
    test_vectors(c, 10000019);
    test_vectors(c, 77);
}

/* GPU 0 in dtype dt for a benchmark; nonzero (said on stderr) where it cannot start */
static int bench_gpu(zinf_backend *gpu, zinf_dtype dt)
{
    if (zinf_backend_cuda_init(gpu, 0, dt) == 0) return 0;
    fprintf(stderr, "cuda init: %s\n", zinf_backend_cuda_error());
    return 1;
}

int main(int argc, char **argv)
{
    int big = !(argc > 1 && strcmp(argv[1], "--small") == 0);
    int do_bench = argc > 1 && strcmp(argv[1], "--bench") == 0; /* --bench [B] [fp16]: timings only */
    int do_bench_attn = argc > 1 && strcmp(argv[1], "--bench-attn") == 0;
    int do_bench_llama = argc > 1 && strcmp(argv[1], "--bench-llama") == 0;
    /* timing the attention versions against each other: ZINF_TEST_ATTN_HOPPER=bits (cuda_backend.h) */
    const char *hop = getenv("ZINF_TEST_ATTN_HOPPER");
    if (hop && *hop) zinf_cuda_attn_hopper = hopper_bits = atoi(hop);
    cudnn_on = zinf_env_switch(getenv("ZINF_ATTN_CUDNN")) != 0;
    if (zinf_backend_cuda_count() <= 0) {
        const char *why = zinf_backend_cuda_error();
        printf("test_backend_ops: no CUDA device%s%s%s; skipped\n", *why ? " (" : "", why, *why ? ")" : "");
        return 77;
    }
    zinf_backend cpu;
    if (zinf_backend_cpu_init(&cpu) != 0) {
        fprintf(stderr, "cpu backend init failed\n");
        return 1;
    }
    zinf_dtype dts[3] = {ZINF_F32, ZINF_BF16, ZINF_F16};
    if (do_bench_attn) {
        zinf_backend gpu;
        if (bench_gpu(&gpu, ZINF_BF16)) return 1;
        ctx c = {&cpu, &gpu, ZINF_BF16, "bf16"};
        /* cuDNN with dQ accumulated (atomics), cuDNN as zinf runs it, zinf's own kernels */
        for (int dnn = cudnn_on && zinf_cuda_cudnn_version() > 0 ? 2 : 0; dnn >= 0; dnn--) {
            zinf_cuda_attn_cudnn = dnn > 0;
            zinf_cuda_attn_cudnn_acc = dnn == 2;
            printf("\n%s", dnn == 2 ? "cuDNN's fused attention, dQ accumulated with atomics"
                            : dnn ? "cuDNN's fused attention" : "zinf's kernels");
            bench_attn(&c, argc > 2 ? atoi(argv[2]) : 4, argc > 3 ? atoi(argv[3]) : 4096, dnn != 2);
        }
        zinf_cuda_attn_cudnn_acc = 0;
        zinf_backend_cuda_free(&gpu);
        return check_done("test_backend_ops --bench-attn");
    }
    if (do_bench_llama) {
        zinf_backend gpu;
        if (bench_gpu(&gpu, ZINF_BF16)) return 1;
        ctx c = {&cpu, &gpu, ZINF_BF16, "bf16"};
        bench_llama(&c, argc > 2 ? atoi(argv[2]) : 4, argc > 3 ? atoi(argv[3]) : 4096,
                    argc > 4 && strcmp(argv[4], "qwen2.5-1.5b") == 0);
        zinf_backend_cuda_free(&gpu);
        return check_done("test_backend_ops --bench-llama");
    }
    if (do_bench) {
        zinf_backend gpu;
        zinf_dtype dt = argc > 3 && strcmp(argv[3], "fp16") == 0 ? ZINF_F16 : ZINF_BF16;
        if (bench_gpu(&gpu, dt)) return 1;
        ctx c = {&cpu, &gpu, dt, zinf_dtype_name(dt)};
        bench(&c, argc > 2 ? atoi(argv[2]) : 16, argc > 4 && strcmp(argv[4], "gpt2-1.5b") == 0);
        zinf_backend_cuda_free(&gpu);
        return check_done("test_backend_ops --bench");
    }
    for (int i = 0; i < 3; i++) {
        zinf_backend gpu;
        int rc = zinf_backend_cuda_init(&gpu, 0, dts[i]);
        CHECK(rc == 0, "cuda init (%s): %d %s", zinf_dtype_name(dts[i]), rc, zinf_backend_cuda_error());
        if (rc) continue;
        ctx c = {&cpu, &gpu, dts[i], zinf_dtype_name(dts[i])};
        rng_state = 0x9E3779B97F4A7C15ull + (uint64_t)i;
        run_all(&c, big);
        CHECK(gpu.sync(&gpu) == 0, "final sync (%s): %s", c.dn, zinf_backend_cuda_error());
        zinf_backend_cuda_free(&gpu);
    }
    zinf_backend_cpu_free(&cpu);
    return check_done("test_backend_ops");
}
