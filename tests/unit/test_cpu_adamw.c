/* test_cpu_adamw: the CPU AdamW (kernels/cpu/adamw.c) on every path this machine has (scalar,
 * AVX2+F16C, AVX-512F), bit for bit against a plain scalar AdamW written here, and the fp32 ->
 * bf16/fp16 converters of kernels.h against an independent rounding (done in double with
 * nearbyint) and, for fp16, against the CPU's own F16C instruction.
 *
 *  1. converters: every bf16 and fp16 pattern widened (against ldexp) and narrowed back; every
 *     fp32 pattern whose low 16 bits are one of ~40 values that sit on, just off, or around the
 *     rounding ties of bf16, of fp16 normals and of every fp16 subnormal position (x all 65536
 *     high halves: all signs, exponents, NaN payloads, infinities, fp16 overflow at 65520);
 *  2. the same patterns through each path's own vector conversion: an AdamW step with lr = 0
 *     and no decay leaves p as it is and writes it to p16;
 *  3. AdamW steps on random data laced with zeros, -0, subnormals, huge values (overflowing
 *     g*g), Inf and NaN gradients (NaN with payloads and both signs): m, v, p and p16 (none, fp32,
 *     bf16, fp16) must equal the reference's bits, for n = 0, 1, 7, 15, 16, 17, 1000, 2^20+3, at
 *     start offsets 0..3 elements (and g/m/v offset differently from p), AdamW and Adam modes,
 *     with and without weight decay, bias corrections 1 and not, with 1 and 3 OpenMP threads
 *     on the long arrays (so ranges are cut between threads);
 *  4. the same with Inf/NaN also in p, m and v: there a NaN need only meet a NaN (which of two
 *     NaN payloads an x86 operation keeps depends on operand order, which the compiler chooses);
 *  5. the CPU backend's be->adamw is the same function (fp32 copy).
 * ZINF_CPU_ISA, when set, must cap the automatic choice.
 *
 * Usage: test_cpu_adamw               the checks (a few seconds)
 *        test_cpu_adamw --bench [N]    Gparam/s of each path on N parameters (default 2^25),
 *                                      beside a triad bandwidth measured in the same run with
 *                                      the same threads (OMP_NUM_THREADS), and the roofline
 *                                      that bandwidth allows at 30 bytes per parameter
 *        test_cpu_adamw --sustain S [N]  the automatic path's mean Gparam/s (bf16 copy) over S
 *                                      seconds of back-to-back steps: started in several processes
 *                                      at once, their windows overlap, so each figure is its rate
 *                                      while the others run (--bench's best of rounds is not: the
 *                                      processes' best rounds need not coincide) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off") /* the reference must not fuse either, whatever CFLAGS */
#endif
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

#include "check.h"
#include "cpu/adamw.h"
#include "kernels.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---------------------------------------------------------------- independent converters */

/* x rounded to a binary format with `prec` significant bits and smallest normal exponent emin,
 * ties to even, in double (exact: x has 24 bits); returns the rounded magnitude */
static double round_fmt(float x, int prec, int emin)
{
    double ax = fabs((double)x);
    if (ax == 0) return 0;
    int e = ilogb(ax);
    int qe = (e > emin ? e : emin) - (prec - 1);
    return ldexp(nearbyint(ldexp(ax, -qe)), qe);
}

static uint16_t ref_bf16(float x)
{
    uint32_t u = bits(x), sign = u >> 31;
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40u);
    if (isinf(x)) return (uint16_t)(sign << 15 | 0x7f80u);
    double r = round_fmt(x, 8, -126);
    if (r >= ldexp(1, 128)) return (uint16_t)(sign << 15 | 0x7f80u);
    uint32_t ru = bits((float)r); /* exact, with 16 zero low bits */
    return (uint16_t)(sign << 15 | ru >> 16);
}

static uint16_t ref_f16(float x)
{
    uint32_t u = bits(x), sign = (u >> 31) << 15;
    if (isnan(x)) return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    if (isinf(x)) return (uint16_t)(sign | 0x7c00u);
    double r = round_fmt(x, 11, -14);
    if (r >= 65536.0) return (uint16_t)(sign | 0x7c00u);
    if (r < ldexp(1, -14)) return (uint16_t)(sign | (uint32_t)ldexp(r, 24)); /* subnormal, 0 */
    int e = ilogb(r);
    uint32_t mant = (uint32_t)ldexp(r, 10 - e) - 1024u;
    return (uint16_t)(sign | (uint32_t)(e + 15) << 10 | mant);
}

static float ref_f16_to_f32(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float f;
    if (e == 0) f = ldexpf((float)m, -24);
    else if (e == 31) f = m ? from_bits(0x7f800000u | (uint32_t)m << 13) : INFINITY;
    else f = ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000u) ? -f : f;
}

#if HAVE_X86 && defined(__GNUC__)
__attribute__((target("f16c"))) static uint16_t hw_f16(float x)
{
    return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), 0), 0);
}
static int have_f16c(void) { return __builtin_cpu_supports("f16c"); }
#else
static uint16_t hw_f16(float x) { return ref_f16(x); }
static int have_f16c(void) { return 0; }
#endif

/* Low 16 bits around the ties: bf16 (bit 15), fp16 normals (bit 12) and fp16 subnormals, whose
 * rounding bit is anywhere from bit 13 to 23 (bits 16.. come from the high half, which runs
 * through all values). */
static int tie_lows(uint16_t *lo)
{
    int k = 0;
    lo[k++] = 0;
    lo[k++] = 1;
    lo[k++] = 0xffff;
    lo[k++] = 0x5a5a;
    for (int b = 11; b <= 15; b++) {
        uint32_t t = 1u << b;
        lo[k++] = (uint16_t)(t - 1);
        lo[k++] = (uint16_t)t;
        lo[k++] = (uint16_t)(t + 1);
        lo[k++] = (uint16_t)(t | (t << 1 & 0xffff)); /* the tie with an odd kept bit */
        lo[k++] = (uint16_t)((t << 1) - 1);
        lo[k++] = (uint16_t)(t - 1 + (t << 1 & 0xffff));
    }
    return k;
}

static int64_t fill_patterns(float *x)
{
    uint16_t lo[64];
    int nl = tie_lows(lo);
    int64_t n = 0;
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (int k = 0; k < nl; k++) x[n++] = from_bits(hi << 16 | lo[k]);
    return n;
}
#define NPAT (65536 * 40)

static void test_converters(float *pat, int64_t npat)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536 && bad < 5; h++) {
        float f = zinf_bf16_to_f32((uint16_t)h);
        if (bits(f) != h << 16) { bad++; CHECK(0, "bf16 %04x widens to %08x", h, bits(f)); }
        uint16_t back = zinf_f32_to_bf16(f);
        uint16_t want = isnan(f) ? (uint16_t)(h | 0x40) : (uint16_t)h;
        if (back != want) { bad++; CHECK(0, "bf16 %04x round trip gives %04x", h, back); }
        float hf = zinf_f16_to_f32((uint16_t)h), hr = ref_f16_to_f32((uint16_t)h);
        if (bits(hf) != bits(hr)) { bad++; CHECK(0, "fp16 %04x widens to %a, not %a", h, hf, hr); }
        uint16_t hb = zinf_f32_to_f16(hf);
        want = isnan(hf) ? (uint16_t)(h | 0x200) : (uint16_t)h;
        if (hb != want) { bad++; CHECK(0, "fp16 %04x round trip gives %04x", h, hb); }
    }
    int hw = have_f16c();
    int64_t n_bf = 0, n_h = 0, n_hw = 0;
    for (int64_t i = 0; i < npat; i++) {
        float x = pat[i];
        uint16_t a = zinf_f32_to_bf16(x), b = ref_bf16(x);
        if (a != b && n_bf++ < 5) CHECK(0, "bf16(%08x) = %04x, want %04x", bits(x), a, b);
        a = zinf_f32_to_f16(x), b = ref_f16(x);
        if (a != b && n_h++ < 5) CHECK(0, "fp16(%08x) = %04x, want %04x", bits(x), a, b);
        if (hw && a != (b = hw_f16(x)) && n_hw++ < 5)
            CHECK(0, "fp16(%08x) = %04x, F16C gives %04x", bits(x), a, b);
    }
    CHECK(n_bf == 0 && n_h == 0 && n_hw == 0, "%lld bf16, %lld fp16, %lld F16C mismatches",
          (long long)n_bf, (long long)n_h, (long long)n_hw);
    /* named edges */
    CHECK(zinf_f32_to_f16(65519.996f) == 0x7bff, "65519.996 -> max half");
    CHECK(zinf_f32_to_f16(65520.0f) == 0x7c00, "65520 -> inf");
    CHECK(zinf_f32_to_f16(-65520.0f) == 0xfc00, "-65520 -> -inf");
    CHECK(zinf_f32_to_f16(ldexpf(1, -25)) == 0x0000, "2^-25 ties to 0");
    CHECK(zinf_f32_to_f16(nextafterf(ldexpf(1, -25), 1)) == 0x0001, "just above 2^-25 -> 1");
    CHECK(zinf_f32_to_f16(ldexpf(3, -25)) == 0x0002, "1.5 subnormal units tie to 2");
    CHECK(zinf_f32_to_f16(ldexpf(2047, -25)) == 0x0400, "1023.5 units: the smallest normal");
    CHECK(zinf_f32_to_f16(-0.0f) == 0x8000, "-0 stays -0");
    CHECK(zinf_f32_to_bf16(from_bits(0x7f7f8000u)) == 0x7f80, "halfway past max bf16 -> inf");
    CHECK(zinf_f32_to_bf16(from_bits(0x7f7f7fffu)) == 0x7f7f, "just below that -> max bf16");
    CHECK(zinf_f32_to_bf16(from_bits(0x00008000u)) == 0x0000, "subnormal tie to even 0");
    CHECK(zinf_f32_to_bf16(from_bits(0x00018000u)) == 0x0002, "subnormal tie to even 2");
    CHECK(zinf_f32_to_bf16(from_bits(0xff800001u)) == 0xffc0, "sNaN -> quiet NaN, sign kept");
    CHECK(zinf_f32_to_f16(from_bits(0xff800001u)) == 0xfe00, "sNaN -> quiet NaN, sign kept");
}

/* ---------------------------------------------------------------- reference AdamW */

static void ref_adamw(float *p, void *p16, zinf_dtype ty, const float *g, float *m, float *v,
                      int64_t n, const zinf_adamw_args *a)
{
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * a->grad_scale, pi = p[i];
        if (!a->adam_w_mode) gi += a->weight_decay * pi;
        float mi = a->beta1 * m[i] + (1.0f - a->beta1) * gi;
        float vi = a->beta2 * v[i] + (1.0f - a->beta2) * gi * gi;
        if (a->adam_w_mode) pi *= 1.0f - a->lr * a->weight_decay;
        pi -= a->lr * (mi / a->bias_correction1) / (sqrtf(vi / a->bias_correction2) + a->eps);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (!p16) continue;
        if (ty == ZINF_F32) ((float *)p16)[i] = pi;
        else ((uint16_t *)p16)[i] = ty == ZINF_BF16 ? ref_bf16(pi) : ref_f16(pi);
    }
}

/* ---------------------------------------------------------------- random data */

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float unif(void) { return (float)((rnd() >> 40) * 0x1p-24) * 2.0f - 1.0f; }

/* kind: 0 p, 1 g, 2 m, 3 v; wild: Inf/NaN allowed in every array */
static float draw(int kind, int wild)
{
    uint64_t r = rnd() % 100;
    float s = (rnd() & 1) ? -1.0f : 1.0f, x;
    if (r < 70) x = unif() * ldexpf(1, (int)(rnd() % 16) - 12);
    else if (r < 75) x = 0.0f;
    else if (r < 80) x = -0.0f;
    else if (r < 85) x = s * from_bits((uint32_t)(rnd() % 0x7fffff) + 1); /* subnormal */
    else if (r < 88) x = s * ldexpf(1.0f + unif() * 0.5f, 100 + (int)(rnd() % 28)); /* huge */
    else if (r < 91) x = s * ldexpf(1.0f + unif() * 0.5f, -126 + (int)(rnd() % 20)); /* tiny */
    else if (r < 95) x = ldexpf(unif(), -(int)(rnd() % 30));
    else if (kind != 1 && !wild) x = unif();
    else if (r < 97) x = s * INFINITY;
    else if (r < 98) x = s * NAN;
    else x = from_bits((s < 0 ? 0xff800000u : 0x7f800000u) | (uint32_t)(rnd() % 0x7fffff + 1));
    if (kind == 3 && !wild && !isnan(x)) x = fabsf(x); /* v is never negative, but may be -0 */
    if (kind == 3 && !wild && r == 76) x = -0.0f;
    return x;
}

/* ---------------------------------------------------------------- AdamW checks */

#define OFFMAX 8
typedef struct {
    float *p0, *g0, *m0, *v0; /* inputs */
    float *p, *m, *v, *pr, *mr, *vr;
    void *p16, *p16r;
} bufs;

static void *xalloc(size_t bytes)
{
    void *q = NULL;
    if (posix_memalign(&q, 64, bytes)) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return q;
}

/* same bits, or (loose) both NaN */
static int64_t diff32(const float *a, const float *b, int64_t n, int loose, int64_t *first)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (bits(a[i]) == bits(b[i]) || (loose && isnan(a[i]) && isnan(b[i]))) continue;
        if (!bad++) *first = i;
    }
    return bad;
}
static int is_nan16(uint16_t h, zinf_dtype ty)
{
    return ty == ZINF_BF16 ? (h & 0x7fff) > 0x7f80 : (h & 0x7fff) > 0x7c00;
}

static const zinf_cpu_isa ISAS[] = {ZINF_CPU_ISA_SCALAR, ZINF_CPU_ISA_AVX2, ZINF_CPU_ISA_AVX512};
static const char *TY_NAME[] = {"none", "fp32", "bf16", "fp16"};

/* one case: reference once, then every path from the same inputs */
static void run_case(bufs *b, int64_t n, int off_p, int off_o, int ty_k, const zinf_adamw_args *a,
                     int loose, const char *what)
{
    zinf_dtype ty = ty_k == 2 ? ZINF_BF16 : ty_k == 3 ? ZINF_F16 : ZINF_F32;
    size_t es = ty == ZINF_F32 ? 4 : 2;
    float *g = b->g0 + off_o;
    memcpy(b->pr + off_p, b->p0 + off_p, (size_t)n * 4);
    memcpy(b->mr + off_o, b->m0 + off_o, (size_t)n * 4);
    memcpy(b->vr + off_o, b->v0 + off_o, (size_t)n * 4);
    char *r16 = ty_k ? (char *)b->p16r + (size_t)off_p * es : NULL;
    ref_adamw(b->pr + off_p, r16, ty, g, b->mr + off_o, b->vr + off_o, n, a);
    for (size_t k = 0; k < sizeof ISAS / sizeof *ISAS; k++) {
        if (!zinf_cpu_isa_supported(ISAS[k])) continue;
        memcpy(b->p + off_p, b->p0 + off_p, (size_t)n * 4);
        memcpy(b->m + off_o, b->m0 + off_o, (size_t)n * 4);
        memcpy(b->v + off_o, b->v0 + off_o, (size_t)n * 4);
        char *o16 = ty_k ? (char *)b->p16 + (size_t)off_p * es : NULL;
        if (o16) memset(o16, 0xa5, (size_t)n * es);
        int rc = zinf_cpu_adamw_isa(ISAS[k], b->p + off_p, o16, ty, g, b->m + off_o, b->v + off_o,
                                    n, a);
        CHECK(rc == 0, "%s path: rc %d", zinf_cpu_isa_name(ISAS[k]), rc);
        int64_t first = 0, bad;
        const char *arr[] = {"p", "m", "v"};
        float *got[] = {b->p + off_p, b->m + off_o, b->v + off_o};
        float *want[] = {b->pr + off_p, b->mr + off_o, b->vr + off_o};
        for (int j = 0; j < 3; j++) {
            bad = diff32(got[j], want[j], n, loose, &first);
            CHECK(bad == 0,
                  "%s: %s path, n %lld, offsets %d/%d, p16 %s: %s differs at %lld elements, first "
                  "[%lld] %08x want %08x (p %a g %a m %a v %a)",
                  what, zinf_cpu_isa_name(ISAS[k]), (long long)n, off_p, off_o, TY_NAME[ty_k],
                  arr[j], (long long)bad, (long long)first, bad ? bits(got[j][first]) : 0,
                  bad ? bits(want[j][first]) : 0, (double)b->p0[off_p + first],
                  (double)g[first], (double)b->m0[off_o + first], (double)b->v0[off_o + first]);
        }
        if (!ty_k) continue;
        if (ty == ZINF_F32) bad = diff32((float *)o16, (float *)r16, n, loose, &first);
        else {
            const uint16_t *x = (const uint16_t *)o16, *y = (const uint16_t *)r16;
            bad = 0;
            for (int64_t i = 0; i < n; i++)
                if (x[i] != y[i] && !(loose && is_nan16(x[i], ty) && is_nan16(y[i], ty)))
                    if (!bad++) first = i;
        }
        CHECK(bad == 0,
              "%s: %s path, n %lld, offsets %d/%d: p16 %s differs at %lld elements, first [%lld]",
              what, zinf_cpu_isa_name(ISAS[k]), (long long)n, off_p, off_o, TY_NAME[ty_k],
              (long long)bad, (long long)first);
    }
}

static void fill(bufs *b, int64_t n, int wild)
{
    for (int64_t i = 0; i < n; i++) {
        b->p0[i] = draw(0, wild);
        b->g0[i] = draw(1, wild);
        b->m0[i] = draw(2, wild);
        b->v0[i] = draw(3, wild);
    }
}

/* Several pieces in one call (zinf_cpu_adamw_pieces: a tile's tensor pieces in one parallel
 * region): each piece gets exactly what the reference gives it with its own weight decay, and
 * the gaps between them are not touched; on every path. */
static void pieces_case(bufs *b, const int64_t *len, int npc, int64_t gap, const zinf_adamw_args *a,
                        const char *what)
{
    zinf_adamw_piece pc[80];
    int64_t at[80], end = 1; /* the first piece starts one element past a 64-byte boundary */
    float wd[80];
    for (int k = 0; k < npc; k++) {
        at[k] = end;
        end += len[k] + gap;
        wd[k] = k % 3 == 1 ? 0.0f : 0.05f * (float)(1 + k % 2);
    }
    fill(b, end, 0);
    memcpy(b->pr, b->p0, (size_t)end * 4), memcpy(b->mr, b->m0, (size_t)end * 4), memcpy(b->vr, b->v0, (size_t)end * 4);
    for (int k = 0; k < npc; k++) {
        zinf_adamw_args ak = *a;
        ak.weight_decay = wd[k];
        ref_adamw(b->pr + at[k], (uint16_t *)b->p16r + at[k], ZINF_BF16, b->g0 + at[k], b->mr + at[k], b->vr + at[k],
                  len[k], &ak);
    }
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        if (!zinf_cpu_isa_supported(ISAS[i])) continue;
        memcpy(b->p, b->p0, (size_t)end * 4), memcpy(b->m, b->m0, (size_t)end * 4), memcpy(b->v, b->v0, (size_t)end * 4);
        memset(b->p16, 0xa5, (size_t)end * 2);
        for (int k = 0; k < npc; k++)
            pc[k] = (zinf_adamw_piece){b->p + at[k], (uint16_t *)b->p16 + at[k], b->g0 + at[k], b->m + at[k],
                                       b->v + at[k], len[k], wd[k]};
        zinf_adamw_args a2 = *a;
        a2.weight_decay = 7.0f; /* not read: each piece has its own */
        int rc = zinf_cpu_adamw_pieces_isa(ISAS[i], pc, npc, ZINF_BF16, &a2);
        CHECK(rc == 0, "%s: %s path: rc %d", what, zinf_cpu_isa_name(ISAS[i]), rc);
        int64_t first = 0, bad;
        const char *arr[] = {"p", "m", "v"};
        float *got[] = {b->p, b->m, b->v}, *want[] = {b->pr, b->mr, b->vr};
        for (int j = 0; j < 3; j++) {
            bad = diff32(got[j], want[j], end, 0, &first);
            CHECK(bad == 0, "%s: %s path, %d pieces: %s differs at %lld elements, first [%lld]", what,
                  zinf_cpu_isa_name(ISAS[i]), npc, arr[j], (long long)bad, (long long)first);
        }
        for (int k = 0; k < npc; k++)
            CHECK(!memcmp((uint16_t *)b->p16 + at[k], (uint16_t *)b->p16r + at[k], (size_t)len[k] * 2),
                  "%s: %s path: piece %d's bf16 copy differs", what, zinf_cpu_isa_name(ISAS[i]), k);
    }
}

static void test_pieces(bufs *b, const zinf_adamw_args *a)
{
    /* below and at the parallel minimum (65536), long ones with their own skew, empty, and a gap */
    static const int64_t mixed[] = {3, 70001, 0, 17, 200003, 65535, 65536, 1000};
    pieces_case(b, mixed, 8, 5, a, "mixed pieces");
    pieces_case(b, mixed, 8, 0, a, "mixed pieces, adjacent");
    /* more pieces than one region takes (64): small ones whose sum passes the minimum */
    int64_t many[70];
    for (int k = 0; k < 70; k++) many[k] = 1000 + 37 * k;
    pieces_case(b, many, 70, 3, a, "70 pieces");
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    omp_set_num_threads(3);
    pieces_case(b, mixed, 8, 5, a, "mixed pieces, 3 threads");
    pieces_case(b, many, 70, 3, a, "70 pieces, 3 threads");
    omp_set_num_threads(saved);
#endif
}

static void test_adamw(bufs *b, float *pat, int64_t npat)
{
    zinf_adamw_args args[6];
    int na = 0;
    for (int mode = 1; mode >= 0; mode--)
        for (int wd = 0; wd < 2; wd++)
            args[na++] = (zinf_adamw_args){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                                           .eps = 1e-8f, .weight_decay = wd ? 0.1f : 0.0f,
                                           .bias_correction1 = 0.1f,
                                           .bias_correction2 = 0.0019990005f,
                                           .grad_scale = 1.0f / 1024, .adam_w_mode = mode};
    /* no bias correction, a large step and no gradient scaling */
    args[na++] = (zinf_adamw_args){.lr = 0.5f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-6f,
                                   .weight_decay = 0.01f, .bias_correction1 = 1.0f,
                                   .bias_correction2 = 1.0f, .grad_scale = 1.0f, .adam_w_mode = 1};
    args[na] = args[na - 1];
    args[na++].adam_w_mode = 0;

    static const int64_t lens[] = {0, 1, 7, 15, 16, 17, 1000, (1 << 20) + 3};
    int nlen = sizeof lens / sizeof *lens;
    for (int li = 0; li < nlen; li++) {
        int64_t n = lens[li];
        int big = n > 100000;
        for (int wild = 0; wild < 2; wild++) {
            fill(b, n + OFFMAX, wild);
            for (int ai = 0; ai < na; ai++)
                for (int ty = 0; ty < 4; ty++)
                    for (int off = 0; off < 4; off++) {
                        if (big && off != 0 && off != 3) continue;
                        /* the long arrays: the four mode/decay combinations (two when wild) */
                        if (big && (ai > 3 || (wild && ai != 1 && ai != 2))) continue;
                        char what[64];
                        snprintf(what, sizeof what, "%s, args %d", wild ? "wild" : "finite p/m/v",
                                 ai);
                        run_case(b, n, off, off, ty, &args[ai], wild, what);
                        /* g, m, v skewed against p: no common alignment */
                        if (off == 3 && (!big || ty == 2))
                            run_case(b, n, 1, 6, ty, &args[ai], wild, what);
                    }
        }
    }
    test_pieces(b, &args[0]);
    test_pieces(b, &args[4]);
#ifdef _OPENMP
    /* the long arrays cut between 3 threads (make check runs with OMP_NUM_THREADS=1) */
    int saved = omp_get_max_threads();
    omp_set_num_threads(3);
    fill(b, lens[nlen - 1] + OFFMAX, 0);
    for (int ty = 0; ty < 4; ty++) {
        run_case(b, lens[nlen - 1], 0, 0, ty, &args[0], 0, "3 threads");
        run_case(b, lens[nlen - 1], 5, 2, ty, &args[3], 0, "3 threads");
    }
    omp_set_num_threads(saved);
#endif

    /* the conversion patterns through each path's own vector conversion: lr 0 leaves p as is
     * (p * 1 - 0), and p16 must be exactly the converter's result */
    zinf_adamw_args id = {.lr = 0.0f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                          .weight_decay = 0.0f, .bias_correction1 = 1.0f, .bias_correction2 = 1.0f,
                          .grad_scale = 1.0f, .adam_w_mode = 1};
    memcpy(b->p0, pat, (size_t)npat * 4);
    memset(b->g0, 0, (size_t)npat * 4);
    memset(b->m0, 0, (size_t)npat * 4);
    memset(b->v0, 0, (size_t)npat * 4);
    for (int ty = 2; ty < 4; ty++) run_case(b, npat, 0, 0, ty, &id, 0, "conversion patterns");
    /* and the reference there really is the converter applied to p */
    int64_t bad = 0;
    for (int64_t i = 0; i < npat; i++) {
        float x = pat[i]; /* the step's p * 1 quiets a signalling NaN */
        bad += isnan(x) ? bits(b->pr[i]) != (bits(x) | 0x400000u) : bits(b->pr[i]) != bits(x);
    }
    CHECK(bad == 0, "lr 0 changed p in %lld elements", (long long)bad);
}

static void test_backend(bufs *b)
{
    zinf_backend be;
    CHECK(zinf_backend_cpu_init(&be) == 0, "cpu backend init");
    zinf_adamw_args a = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                         .weight_decay = 0.1f, .bias_correction1 = 0.19f,
                         .bias_correction2 = 0.001999f, .grad_scale = 0.5f, .adam_w_mode = 1};
    int64_t n = 100003;
    fill(b, n, 0);
    memcpy(b->p, b->p0, (size_t)n * 4), memcpy(b->pr, b->p0, (size_t)n * 4);
    memcpy(b->m, b->m0, (size_t)n * 4), memcpy(b->mr, b->m0, (size_t)n * 4);
    memcpy(b->v, b->v0, (size_t)n * 4), memcpy(b->vr, b->v0, (size_t)n * 4);
    be.adamw(&be, b->p, b->p16, b->g0, ZINF_F32, b->m, b->v, n, &a);
    ref_adamw(b->pr, b->p16r, ZINF_F32, b->g0, b->mr, b->vr, n, &a);
    int64_t first = 0;
    CHECK(diff32(b->p, b->pr, n, 0, &first) == 0 && diff32(b->m, b->mr, n, 0, &first) == 0 &&
              diff32(b->v, b->vr, n, 0, &first) == 0 &&
              diff32(b->p16, b->p16r, n, 0, &first) == 0,
          "the CPU backend's adamw differs from the reference");
    zinf_backend_cpu_free(&be);
}

static void test_isa_choice(void)
{
    zinf_cpu_isa best = ZINF_CPU_ISA_SCALAR;
    for (int k = ZINF_CPU_ISA_SCALAR; k <= ZINF_CPU_ISA_AVX512; k++)
        if (zinf_cpu_isa_supported((zinf_cpu_isa)k)) best = (zinf_cpu_isa)k;
    const char *e = getenv("ZINF_CPU_ISA");
    zinf_cpu_isa want = best;
    if (e)
        for (int k = ZINF_CPU_ISA_SCALAR; k <= ZINF_CPU_ISA_AVX512; k++)
            if (!strcmp(e, zinf_cpu_isa_name((zinf_cpu_isa)k)))
                for (want = (zinf_cpu_isa)k; !zinf_cpu_isa_supported(want);) want--;
    CHECK(zinf_cpu_isa_auto() == want, "automatic path %s, want %s (ZINF_CPU_ISA=%s)",
          zinf_cpu_isa_name(zinf_cpu_isa_auto()), zinf_cpu_isa_name(want), e ? e : "");
    printf("paths on this CPU:");
    for (int k = ZINF_CPU_ISA_SCALAR; k <= ZINF_CPU_ISA_AVX512; k++)
        if (zinf_cpu_isa_supported((zinf_cpu_isa)k))
            printf(" %s", zinf_cpu_isa_name((zinf_cpu_isa)k));
    printf("; automatic: %s\n", zinf_cpu_isa_name(zinf_cpu_isa_auto()));
    /* a path the CPU lacks is refused, nothing written */
    for (int k = ZINF_CPU_ISA_SCALAR; k <= ZINF_CPU_ISA_AVX512; k++)
        if (!zinf_cpu_isa_supported((zinf_cpu_isa)k)) {
            float x = 1;
            zinf_adamw_args a = {.lr = 1, .beta1 = 0.9f, .beta2 = 0.9f, .bias_correction1 = 1,
                                 .bias_correction2 = 1, .grad_scale = 1, .adam_w_mode = 1};
            int rc = zinf_cpu_adamw_isa((zinf_cpu_isa)k, &x, NULL, ZINF_F32, &x, &x, &x, 1, &a);
            CHECK(rc == -1004 && x == 1,
                  "unsupported %s path not refused", zinf_cpu_isa_name((zinf_cpu_isa)k));
        }
}

/* ---------------------------------------------------------------- benchmark */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* The benchmarks' arrays (p, g, m, v at plausible values, p16 and c zero; p16 as wide as fp32 so
 * that every path fits), first touched in the same static split the kernels use; the step's
 * constants; the thread count */
typedef struct {
    float *p, *g, *m, *v, *p16, *c;
    zinf_adamw_args a;
    int nt;
} bench_bufs;
static void bench_init(bench_bufs *b, int64_t n)
{
    b->nt = 1;
#ifdef _OPENMP
    b->nt = omp_get_max_threads();
#endif
    float **all[] = {&b->p, &b->g, &b->m, &b->v, &b->p16, &b->c};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) *all[i] = xalloc((size_t)n * 4);
    float *p = b->p, *g = b->g, *m = b->m, *v = b->v, *p16 = b->p16, *c = b->c;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull;
        p[i] = (float)(h >> 40) * 0x1p-24f - 0.5f;
        g[i] = (float)((h >> 20) & 0xfffff) * 0x1p-20f - 0.5f;
        m[i] = 0.01f * g[i];
        v[i] = 1e-4f * g[i] * g[i];
        p16[i] = c[i] = 0;
    }
    b->a = (zinf_adamw_args){.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                             .weight_decay = 0.01f, .bias_correction1 = 0.5f,
                             .bias_correction2 = 0.01f, .grad_scale = 1.0f, .adam_w_mode = 1};
}
static void bench_free(bench_bufs *b)
{
    free(b->p), free(b->g), free(b->m), free(b->v), free(b->p16), free(b->c);
}

/* Best of ROUNDS, each round timing the triads and then every path once, so that on a shared
 * machine the bandwidth and the kernels meet the same weather. */
#define ROUNDS 7
static int bench(int64_t n)
{
    bench_bufs B;
    bench_init(&B, n);
    const int nt = B.nt;
    float *p = B.p, *g = B.g, *m = B.m, *v = B.v, *p16 = B.p16, *c = B.c;
    const zinf_adamw_args a = B.a;
    static const int tys[] = {2, 3, 0};
    enum { NT = 3, NI = 3 };
    double best[NI][NT], best_tr = 1e30, best_ip = 1e30;
    for (int k = 0; k < NI; k++)
        for (int t = 0; t < NT; t++) best[k][t] = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        /* STREAM triad, a = b + s*c, counted as STREAM counts: 12 bytes per element (the
         * write-allocate read of a is not counted, nor is that of AdamW's p16) */
        double t0 = now();
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) c[i] = g[i] + 0.5f * p16[i];
        double t = now() - t0;
        if (t < best_tr) best_tr = t;
        /* in place, a += s*b, the way AdamW updates p, m, v (no write-allocate): for context */
        t0 = now();
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) c[i] += 0.5f * p16[i];
        t = now() - t0;
        if (t < best_ip) best_ip = t;
        for (int k = 0; k < NI; k++) {
            if (!zinf_cpu_isa_supported(ISAS[k])) continue;
            for (int ti = 0; ti < NT; ti++) {
                zinf_dtype ty = tys[ti] == 2 ? ZINF_BF16 : tys[ti] == 3 ? ZINF_F16 : ZINF_F32;
                t0 = now();
                zinf_cpu_adamw_isa(ISAS[k], p, tys[ti] ? p16 : NULL, ty, g, m, v, n, &a);
                t = now() - t0;
                if (t < best[k][ti]) best[k][ti] = t;
            }
        }
    }
    double bw = 12.0 * (double)n / best_tr;
    printf("CPU AdamW, n = %lld parameters, %d threads, best of %d rounds\n", (long long)n, nt,
           ROUNDS);
    printf("triad bandwidth (a = b + s*c, 12 bytes/element): %.2f GB/s; in place (a += s*b): "
           "%.2f GB/s\n", bw / 1e9, 12.0 * (double)n / best_ip / 1e9);
    double bw_ip = 12.0 * (double)n / best_ip;
    printf("%-7s %-5s %9s %9s %9s %8s %10s %8s %8s\n", "path", "p16", "ms/step", "Gparam/s",
           "roofline", "of roof", "(in place", "of it)", "GB/s");
    for (int k = 0; k < NI; k++) {
        if (!zinf_cpu_isa_supported(ISAS[k])) continue;
        for (int ti = 0; ti < NT; ti++) {
            double bytes = 28.0 + (tys[ti] ? 2 : 0);
            double gps = (double)n / best[k][ti] / 1e9, roof = bw / bytes / 1e9;
            double roof_ip = bw_ip / bytes / 1e9;
            printf("%-7s %-5s %9.2f %9.3f %9.3f %7.0f%% %10.3f %7.0f%% %8.2f\n",
                   zinf_cpu_isa_name(ISAS[k]), TY_NAME[tys[ti]], best[k][ti] * 1e3, gps, roof,
                   100 * gps / roof, roof_ip, 100 * gps / roof_ip, gps * bytes);
        }
    }
    printf("(roofline = triad bandwidth / bytes moved per parameter: 30 with a 16-bit copy "
           "(p, g, m, v read, p, m, v written, p16 written), 28 without; the in-place roofline "
           "uses the a += s*b bandwidth, which like AdamW's p, m, v pays no write-allocate)\n");
    bench_free(&B);
    return 0;
}

/* --sustain: steps of the automatic path (bf16 copy, as the offloaded optimizer runs it) back to
 * back for `secs` seconds after one warm-up step; the mean over the window */
static int sustain(double secs, int64_t n)
{
    bench_bufs B;
    bench_init(&B, n);
    float *p = B.p, *g = B.g, *m = B.m, *v = B.v, *p16 = B.p16;
    const zinf_adamw_args a = B.a;
    zinf_cpu_adamw(p, p16, ZINF_BF16, g, m, v, n, &a);
    int steps = 0;
    double t0 = now(), t = 0;
    do {
        zinf_cpu_adamw(p, p16, ZINF_BF16, g, m, v, n, &a);
        steps++;
        t = now() - t0;
    } while (t < secs);
    double gps = (double)n * steps / t / 1e9;
    printf("sustained %s bf16, n = %lld parameters, %d threads: %.3f Gparam/s (%.1f GB/s at 30 "
           "bytes a parameter) over %.2f s, %d steps\n", zinf_cpu_isa_name(zinf_cpu_isa_auto()),
           (long long)n, B.nt, gps, gps * 30, t, steps);
    bench_free(&B);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "--bench"))
        return bench(argc >= 3 ? strtoll(argv[2], NULL, 0) : (int64_t)1 << 25);
    if (argc >= 3 && !strcmp(argv[1], "--sustain") && atof(argv[2]) > 0)
        return sustain(atof(argv[2]), argc >= 4 ? strtoll(argv[3], NULL, 0) : (int64_t)1 << 26);
    if (argc >= 2) {
        fprintf(stderr, "usage: %s [--bench [N] | --sustain SECONDS [N]]\n", argv[0]);
        return 2;
    }
    test_isa_choice();
    int64_t cap = NPAT > (1 << 20) + 3 + OFFMAX ? NPAT : (1 << 20) + 3 + OFFMAX;
    float *pat = xalloc((size_t)NPAT * 4);
    int64_t npat = fill_patterns(pat);
    CHECK(npat <= NPAT, "pattern count %lld", (long long)npat);
    test_converters(pat, npat);
    bufs b;
    float **f32s[] = {&b.p0, &b.g0, &b.m0, &b.v0, &b.p, &b.m, &b.v, &b.pr, &b.mr, &b.vr};
    for (size_t i = 0; i < sizeof f32s / sizeof *f32s; i++) *f32s[i] = xalloc((size_t)cap * 4);
    b.p16 = xalloc((size_t)cap * 4);
    b.p16r = xalloc((size_t)cap * 4);
    test_adamw(&b, pat, npat);
    test_backend(&b);
    for (size_t i = 0; i < sizeof f32s / sizeof *f32s; i++) free(*f32s[i]);
    free(b.p16), free(b.p16r), free(pat);
    return check_done("test_cpu_adamw");
}
