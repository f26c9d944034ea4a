/* adamw: the CPU's AdamW step, scalar, AVX2+F16C and AVX-512F, all giving the same bits (see
 * adamw.h for the arithmetic).
 *
 * Bit-identity rests on three things:
 *  - every path does the same IEEE operations on each element in the same order: the vector
 *    code is the scalar code with each operation widened, no reassociation, no reciprocals;
 *  - nothing is fused: the x86-64 baseline has no FMA, but the AVX2/AVX-512 functions do, and
 *    GCC contracts a*b+c into an FMA even across intrinsics (they are plain vector arithmetic
 *    to it), so contraction is switched off for this whole file;
 *  - division, square root and the fp16 conversion are correctly rounded in hardware (divps,
 *    sqrtps, vcvtps2ph with immediate rounding mode 0) exactly as sqrtf, / and
 *    zinf_f32_to_f16 are; bf16 rounding is integer arithmetic, the same on each path.
 *
 * Parallel split: chunks of 64K elements, their ends on 64-byte boundaries of p (m, v, g are
 * normally aligned alike), handed out to the OpenMP threads as they come free, every piece of a
 * call in one parallel region; inside a chunk each vector path runs scalar elements up to p's
 * next vector-aligned address, whole vectors, then a scalar tail. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#include "cpu/adamw.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define ZINF_ADAMW_X86 1
#include <immintrin.h>
#else
#define ZINF_ADAMW_X86 0
#endif

/* Below this many elements one thread does it all: an OpenMP team costs a few microseconds,
 * about what 64K elements take on one core. */
#define ADAMW_PAR_MIN 65536
#define ADAMW_CHUNK 65536 /* elements: about 2 MB of traffic, some 20 us of one core */
#define ADAMW_MAX_PIECES 64 /* pieces in one parallel region (a call with more takes several) */

#define INL static inline __attribute__((always_inline))

/* The step's constants, computed once in fp32 exactly as the reference computes them inline. */
typedef struct {
    float gs, wd, b1, omb1, b2, omb2, decay, lr, bc1, bc2, eps;
    int adamw;
} consts;

static consts consts_of(const zinf_adamw_args *a)
{
    consts c;
    c.gs = a->grad_scale;
    c.wd = a->weight_decay;
    c.b1 = a->beta1;
    c.omb1 = 1.0f - a->beta1;
    c.b2 = a->beta2;
    c.omb2 = 1.0f - a->beta2;
    c.decay = 1.0f - a->lr * a->weight_decay;
    c.lr = a->lr;
    c.bc1 = a->bias_correction1;
    c.bc2 = a->bias_correction2;
    c.eps = a->eps;
    c.adamw = a->adam_w_mode != 0;
    return c;
}

/* ---------------------------------------------------------------- scalar */

INL void one(const consts *c, int aw, float *p, void *p16, zinf_dtype ty, const float *g, float *m,
             float *v, int64_t i)
{
    float gi = g[i] * c->gs, pi = p[i];
    if (!aw) gi = gi + c->wd * pi; /* Adam: L2 penalty in the gradient */
    float mi = c->b1 * m[i] + c->omb1 * gi;
    float vi = c->b2 * v[i] + c->omb2 * gi * gi;
    if (aw) pi = pi * c->decay; /* AdamW: decoupled decay, applied first */
    pi = pi - c->lr * (mi / c->bc1) / (sqrtf(vi / c->bc2) + c->eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    if (p16) {
        if (ty == ZINF_F32) ((float *)p16)[i] = pi;
        else if (ty == ZINF_BF16) ((uint16_t *)p16)[i] = zinf_f32_to_bf16(pi);
        else ((uint16_t *)p16)[i] = zinf_f32_to_f16(pi);
    }
}

INL void body_scalar(const consts *c, int aw, float *p, void *p16, zinf_dtype ty, const float *g,
                     float *m, float *v, int64_t i0, int64_t i1)
{
    for (int64_t i = i0; i < i1; i++) one(c, aw, p, p16, ty, g, m, v, i);
}

/* One function per path, whose body is inlined once per (p16 type, mode): both are constants
 * there, so the element loops carry no branches. */
#define SPECIALISE(NAME, BODY, ATTR)                                                              \
    static ATTR void NAME(const consts *c, float *p, void *p16, zinf_dtype ty, const float *g,    \
                          float *m, float *v, int64_t i0, int64_t i1)                            \
    {                                                                                            \
        if (!p16 && c->adamw) BODY(c, 1, p, NULL, ZINF_F32, g, m, v, i0, i1);                     \
        else if (!p16) BODY(c, 0, p, NULL, ZINF_F32, g, m, v, i0, i1);                            \
        else if (ty == ZINF_BF16 && c->adamw) BODY(c, 1, p, p16, ZINF_BF16, g, m, v, i0, i1);     \
        else if (ty == ZINF_BF16) BODY(c, 0, p, p16, ZINF_BF16, g, m, v, i0, i1);                 \
        else if (ty == ZINF_F16 && c->adamw) BODY(c, 1, p, p16, ZINF_F16, g, m, v, i0, i1);       \
        else if (ty == ZINF_F16) BODY(c, 0, p, p16, ZINF_F16, g, m, v, i0, i1);                   \
        else if (c->adamw) BODY(c, 1, p, p16, ZINF_F32, g, m, v, i0, i1);                         \
        else BODY(c, 0, p, p16, ZINF_F32, g, m, v, i0, i1);                                       \
    }

#define NOATTR
SPECIALISE(run_scalar, body_scalar, NOATTR)

/* ---------------------------------------------------------------- AVX2 + F16C */
#if ZINF_ADAMW_X86

#define T256 __attribute__((target("avx2,f16c")))
#define T512 __attribute__((target("avx512f")))

/* 8 floats to bf16, as zinf_f32_to_bf16: u + 0x7fff + lsb, top half; NaN: top half | quiet bit */
INL T256 __m128i bf16x8(__m256 x)
{
    __m256i u = _mm256_castps_si256(x);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    r = _mm256_srli_epi32(r, 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    /* each lane is <= 0xffff, so the unsigned saturating pack is a plain narrowing */
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

INL T256 void vec8(const consts *c, int aw, float *p, void *p16, zinf_dtype ty, const float *g,
                   float *m, float *v, int64_t i)
{
    __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), _mm256_set1_ps(c->gs));
    __m256 pi = _mm256_loadu_ps(p + i);
    if (!aw) gi = _mm256_add_ps(gi, _mm256_mul_ps(_mm256_set1_ps(c->wd), pi));
    __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(c->b1), _mm256_loadu_ps(m + i)),
                              _mm256_mul_ps(_mm256_set1_ps(c->omb1), gi));
    __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(c->b2), _mm256_loadu_ps(v + i)),
                              _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(c->omb2), gi), gi));
    if (aw) pi = _mm256_mul_ps(pi, _mm256_set1_ps(c->decay));
    __m256 num = _mm256_mul_ps(_mm256_set1_ps(c->lr), _mm256_div_ps(mi, _mm256_set1_ps(c->bc1)));
    __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(vi, _mm256_set1_ps(c->bc2))),
                               _mm256_set1_ps(c->eps));
    pi = _mm256_sub_ps(pi, _mm256_div_ps(num, den));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(p + i, pi);
    if (p16) {
        if (ty == ZINF_F32) _mm256_storeu_ps((float *)p16 + i, pi);
        else if (ty == ZINF_BF16) _mm_storeu_si128((__m128i *)((uint16_t *)p16 + i), bf16x8(pi));
        else _mm_storeu_si128((__m128i *)((uint16_t *)p16 + i), _mm256_cvtps_ph(pi, 0)); /* even */
    }
}

/* ty and the mode are constants after inlining into the specialised callers below */
INL T256 void body256(const consts *c, int aw, float *p, void *p16, zinf_dtype ty, const float *g,
                      float *m, float *v, int64_t i0, int64_t i1)
{
    int64_t i = i0;
    for (; i < i1 && ((uintptr_t)(p + i) & 31); i++) one(c, aw, p, p16, ty, g, m, v, i);
    for (; i + 8 <= i1; i += 8) vec8(c, aw, p, p16, ty, g, m, v, i);
    for (; i < i1; i++) one(c, aw, p, p16, ty, g, m, v, i);
}

SPECIALISE(run_avx2, body256, T256)

/* ---------------------------------------------------------------- AVX-512F */

/* 16 floats to bf16, as bf16x8 */
INL T512 __m256i bf16x16(__m512 x)
{
    __m512i u = _mm512_castps_si512(x);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r); /* truncating narrow; each lane is <= 0xffff */
}

INL T512 void vec16(const consts *c, int aw, float *p, void *p16, zinf_dtype ty, const float *g,
                    float *m, float *v, int64_t i)
{
    __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), _mm512_set1_ps(c->gs));
    __m512 pi = _mm512_loadu_ps(p + i);
    if (!aw) gi = _mm512_add_ps(gi, _mm512_mul_ps(_mm512_set1_ps(c->wd), pi));
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(c->b1), _mm512_loadu_ps(m + i)),
                              _mm512_mul_ps(_mm512_set1_ps(c->omb1), gi));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(c->b2), _mm512_loadu_ps(v + i)),
                              _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(c->omb2), gi), gi));
    if (aw) pi = _mm512_mul_ps(pi, _mm512_set1_ps(c->decay));
    __m512 num = _mm512_mul_ps(_mm512_set1_ps(c->lr), _mm512_div_ps(mi, _mm512_set1_ps(c->bc1)));
    __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(vi, _mm512_set1_ps(c->bc2))),
                               _mm512_set1_ps(c->eps));
    pi = _mm512_sub_ps(pi, _mm512_div_ps(num, den));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    _mm512_storeu_ps(p + i, pi);
    if (p16) {
        __m256i *o = (__m256i *)((uint16_t *)p16 + i);
        if (ty == ZINF_F32) _mm512_storeu_ps((float *)p16 + i, pi);
        else if (ty == ZINF_BF16) _mm256_storeu_si256(o, bf16x16(pi));
        else _mm256_storeu_si256(o, _mm512_cvtps_ph(pi, 0)); /* 0: nearest even, not MXCSR's */
    }
}

INL T512 void body512(const consts *c, int aw, float *p, void *p16, zinf_dtype ty, const float *g,
                      float *m, float *v, int64_t i0, int64_t i1)
{
    int64_t i = i0;
    for (; i < i1 && ((uintptr_t)(p + i) & 63); i++) one(c, aw, p, p16, ty, g, m, v, i);
    for (; i + 16 <= i1; i += 16) vec16(c, aw, p, p16, ty, g, m, v, i);
    for (; i < i1; i++) one(c, aw, p, p16, ty, g, m, v, i);
}

SPECIALISE(run_avx512, body512, T512)

#endif /* ZINF_ADAMW_X86 */

/* ---------------------------------------------------------------- dispatch */

typedef void (*range_fn)(const consts *, float *, void *, zinf_dtype, const float *, float *,
                         float *, int64_t, int64_t);

int zinf_cpu_isa_supported(zinf_cpu_isa isa)
{
    switch (isa) {
    case ZINF_CPU_ISA_AUTO:
    case ZINF_CPU_ISA_SCALAR: return 1;
#if ZINF_ADAMW_X86
    case ZINF_CPU_ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case ZINF_CPU_ISA_AVX512: return __builtin_cpu_supports("avx512f");
#else
    case ZINF_CPU_ISA_AVX2:
    case ZINF_CPU_ISA_AVX512: return 0;
#endif
    }
    return 0;
}

const char *zinf_cpu_isa_name(zinf_cpu_isa isa)
{
    switch (isa) {
    case ZINF_CPU_ISA_AUTO: return "auto";
    case ZINF_CPU_ISA_SCALAR: return "scalar";
    case ZINF_CPU_ISA_AVX2: return "avx2";
    case ZINF_CPU_ISA_AVX512: return "avx512";
    }
    return "?";
}

static int auto_isa; /* 0 until resolved; then a zinf_cpu_isa (racing threads store the same) */

zinf_cpu_isa zinf_cpu_isa_auto(void)
{
    int isa = __atomic_load_n(&auto_isa, __ATOMIC_RELAXED);
    if (isa) return (zinf_cpu_isa)isa;
    int cap = ZINF_CPU_ISA_AVX512;
    const char *e = getenv("ZINF_CPU_ISA");
    if (e) {
        for (int k = ZINF_CPU_ISA_SCALAR; k <= ZINF_CPU_ISA_AVX512; k++)
            if (!strcmp(e, zinf_cpu_isa_name((zinf_cpu_isa)k))) cap = k;
    }
    isa = cap;
    while (isa > ZINF_CPU_ISA_SCALAR && !zinf_cpu_isa_supported((zinf_cpu_isa)isa)) isa--;
    __atomic_store_n(&auto_isa, isa, __ATOMIC_RELAXED);
    return (zinf_cpu_isa)isa;
}

static range_fn fn_of(zinf_cpu_isa isa)
{
#if ZINF_ADAMW_X86
    if (isa == ZINF_CPU_ISA_AVX512) return run_avx512;
    if (isa == ZINF_CPU_ISA_AVX2) return run_avx2;
#endif
    (void)isa;
    return run_scalar;
}

/* A piece's chunks: below ADAMW_PAR_MIN elements one, the whole piece; otherwise chunks of
 * ADAMW_CHUNK elements cut at multiples of 16 from p's first 64-byte-aligned element (the first
 * chunk also takes the elements before it) */
static int64_t skew_of(const zinf_adamw_piece *q)
{
    return q->n < ADAMW_PAR_MIN ? 0 : (int64_t)((64 - ((uintptr_t)q->p & 63)) & 63) / 4;
}
static int64_t chunks_of(const zinf_adamw_piece *q)
{
    return q->n <= 0 ? 0 : q->n < ADAMW_PAR_MIN ? 1 : (q->n - skew_of(q) + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
}

int zinf_cpu_adamw_pieces_isa(zinf_cpu_isa isa, const zinf_adamw_piece *pc, int npc, zinf_dtype p16_type,
                              const zinf_adamw_args *a)
{
    if (isa == ZINF_CPU_ISA_AUTO) isa = zinf_cpu_isa_auto();
    if (!zinf_cpu_isa_supported(isa)) return -1004; /* ZINF_ENOTSUP */
    range_fn fn = fn_of(isa);
    for (int b = 0; b < npc; b += ADAMW_MAX_PIECES) { /* whole batches of pieces, one region each */
        int nb = npc - b < ADAMW_MAX_PIECES ? npc - b : ADAMW_MAX_PIECES;
        const zinf_adamw_piece *q = pc + b;
        consts c[ADAMW_MAX_PIECES];
        int64_t first[ADAMW_MAX_PIECES + 1], nel = 0; /* piece k's chunks are [first[k], first[k+1]) */
        first[0] = 0;
        for (int k = 0; k < nb; k++) {
            zinf_adamw_args ak = *a;
            ak.weight_decay = q[k].weight_decay;
            c[k] = consts_of(&ak);
            first[k + 1] = first[k] + chunks_of(&q[k]);
            nel += q[k].n > 0 ? q[k].n : 0;
        }
        int64_t nch = first[nb];
        /* Chunks are handed out to the threads as they come free: a thread that the kernel
         * preempts (for the thread driving the GPU, the driver's own threads) does fewer chunks
         * instead of holding up the rest, as an even static split would. One region for every
         * piece: waking the team once, not once a piece. The cuts change no result. */
#pragma omp parallel for schedule(dynamic, 1) if (nel >= ADAMW_PAR_MIN && nch > 1)
        for (int64_t i = 0; i < nch; i++) {
            int k = 0;
            while (first[k + 1] <= i) k++;
            const zinf_adamw_piece *x = &q[k];
            int64_t j = i - first[k], skew = skew_of(x);
            int64_t lo = j == 0 ? 0 : skew + j * ADAMW_CHUNK, hi = x->n < ADAMW_PAR_MIN ? x->n : skew + (j + 1) * ADAMW_CHUNK;
            fn(&c[k], x->p, x->p16, p16_type, x->g, x->m, x->v, lo, hi < x->n ? hi : x->n);
        }
    }
    return 0;
}

void zinf_cpu_adamw_pieces(const zinf_adamw_piece *pc, int npc, zinf_dtype p16_type, const zinf_adamw_args *a)
{
    zinf_cpu_adamw_pieces_isa(ZINF_CPU_ISA_AUTO, pc, npc, p16_type, a);
}

int zinf_cpu_adamw_isa(zinf_cpu_isa isa, float *p, void *p16, zinf_dtype p16_type, const float *g,
                       float *m, float *v, int64_t n, const zinf_adamw_args *a)
{
    zinf_adamw_piece one = {p, p16, g, m, v, n, a->weight_decay};
    return zinf_cpu_adamw_pieces_isa(isa, &one, 1, p16_type, a);
}

void zinf_cpu_adamw(float *p, void *p16, zinf_dtype p16_type, const float *g, float *m, float *v,
                    int64_t n, const zinf_adamw_args *a)
{
    zinf_cpu_adamw_isa(ZINF_CPU_ISA_AUTO, p, p16, p16_type, g, m, v, n, a);
}
