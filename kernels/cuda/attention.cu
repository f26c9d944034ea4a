/* attention: causal self-attention that never stores the T x T matrix (flash-attention 2 style).
 *
 * Layout (as kernels.h): qkv[B,T,W] rows pack q (NH heads) | k (NKV heads) | v (NKV heads) of hs
 * channels each, W = (NH + 2 NKV) hs; query head h reads kv head h / G, G = NH / NKV (grouped-query
 * attention; G = 1 is multi-head attention); out[B,T,C], C = NH hs; lse[B,NH,T] = natural
 * log-sum-exp of the scaled scores of each query row. AttnGeo below holds the offsets.
 *
 * Tried first for rows of one sample each: cuDNN's fused attention (attention_cudnn.cu), where it
 * loads and takes the shape. Then two implementations of zinf's own behind the same entry point:
 *  - fast path (bf16/fp16 compute, head size 64, and 128 where noted): tensor-core tiles (mma.sync m16n8k16, operands
 *    through ldmatrix from padded shared memory), fp32 accumulation and softmax in registers
 *    (base-2 exponentials).
 *      forward: one block of 4 warps per (128-query tile, b*h); each warp owns 32 query rows
 *      (two 16-row m-tiles sharing every K/V fragment it reads from shared memory), online
 *      softmax over 64-key tiles 0..diagonal (double buffered with cp.async; a warp skips the
 *      tiles wholly above its rows).
 *      backward: D_i = rowsum(dO o O) first; then one kernel with a block per (64-key tile,
 *      b*kv head), 4 warps of 16 keys, that walks the query tiles of each query head of the
 *      group in turn and accumulates dK and dV in registers (head size 64 or 128; at 128 the K
 *      and V fragments are reread from shared memory per tile, for want of registers), and one with a block per (128-query tile, b*h), 4 warps of 32 rows (two
 *      m-tiles sharing each K/V fragment, Q and dO fragments reloaded from shared memory), that
 *      walks the key tiles for dQ. Each output row belongs to exactly one block: no atomics, the
 *      result is deterministic. Scores and P are recomputed from lse.
 *  - Hopper (sm_90a) versions of the forward and the dQ kernel on wgmma, below, at head sizes
 *    64 and 128; same tiles and results up to rounding order. Head size 128 has no mma.sync
 *    forward or dQ kernel: off Hopper (or with a ZINF_ATTN_HOPPER bit clear) those take the
 *    generic path.
 *  - generic path (fp32, or any other head size up to 256): one warp per row (query row for the
 *    forward and dQ, key row for dK/dV), one key (query) at a time, the head's channels spread
 *    over the lanes. Slow, simple, and exact enough to match the CPU reference at fp32.
 * dqkv is overwritten, as kernels.h says: each of its elements is written by exactly one warp. */
#include <math.h>

#include <type_traits>

#include "cuda_backend.h"
#include "cuda_common.h"

#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

/* Where a head's rows are (in elements): q of head h of batch b at q(b, h) + i*W, its k and v at
 * k(b, h / G) and v(b, h / G) + j*W; out and dout rows C apart. */
/* tiles of r rows over n rows */
__device__ __forceinline__ int n_tiles(int n, int r) { return (n + r - 1) / r; }

/* A sequence the tiled kernels walk: a row (seq NULL) or one sample packed into a row. tok0 is its
 * first token (row * T + offset), len its length. */
struct Seq {
    int64_t tok0;
    int len, b, t0;
};
struct AttnGeo {
    int T, NH, NKV, hs, G;
    int64_t W, C;
    const int32_t *kvs; /* the rows' kv_start (zinf_attn_rows), NULL: one sample per row */
    const int32_t *seq; /* the samples (zinf_attn_rows), NULL: the rows */
    int nseq, max_len;  /* sequences (B, or the samples) and the longest */
    AttnGeo(int B, int T_, int NH_, int NKV_, int hs_, const zinf_attn_rows *r)
        : T(T_), NH(NH_), NKV(NKV_), hs(hs_), G(NH_ / NKV_), W((int64_t)(NH_ + 2 * NKV_) * hs_),
          C((int64_t)NH_ * hs_), kvs(r ? r->kv_start : nullptr), seq(r ? r->seq : nullptr),
          nseq(r ? r->nseq : B), max_len(r ? r->max_len : T_)
    {
    }
    __device__ __forceinline__ int64_t q(int b, int h) const { return (int64_t)b * T * W + (int64_t)h * hs; }
    __device__ __forceinline__ int64_t k(int b, int kh) const { return (int64_t)b * T * W + C + (int64_t)kh * hs; }
    __device__ __forceinline__ int64_t v(int b, int kh) const { return k(b, kh) + (int64_t)NKV * hs; }
    __device__ __forceinline__ int64_t o(int b, int h) const { return (int64_t)b * T * C + (int64_t)h * hs; }
    /* the first key the query of token (b, i) sees */
    __device__ __forceinline__ int kv0(int b, int i) const { return kvs ? kvs[(int64_t)b * T + i] : 0; }
    __device__ __forceinline__ Seq sq(int s) const
    {
        if (!seq) return Seq{(int64_t)s * T, T, s, 0};
        int64_t t0 = seq[2 * s];
        return Seq{t0, seq[2 * s + 1], (int)(t0 / T), (int)(t0 % T)};
    }
    /* the same offsets for the rows of sequence S: its token i at q(S, h) + i * W, and so on; lse
     * and D of its head h at l(S, h) + i */
    __device__ __forceinline__ int64_t q(const Seq &S, int h) const { return S.tok0 * W + (int64_t)h * hs; }
    __device__ __forceinline__ int64_t k(const Seq &S, int kh) const { return S.tok0 * W + C + (int64_t)kh * hs; }
    __device__ __forceinline__ int64_t v(const Seq &S, int kh) const { return k(S, kh) + (int64_t)NKV * hs; }
    __device__ __forceinline__ int64_t o(const Seq &S, int h) const { return S.tok0 * C + (int64_t)h * hs; }
    __device__ __forceinline__ int64_t l(const Seq &S, int h) const { return ((int64_t)S.b * NH + h) * T + S.t0; }
};

/* ===================================================================== shared: D = rowsum(dO o O) */

/* D[(b*NH + h)*T + i] = sum_d dout[b,i,h,d] * out[b,i,h,d]; one warp per row */
template <typename T> __global__ void attn_D_k(float *D, const T *dout, const T *out, int B, AttnGeo A)
{
    int64_t rowid = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32, hs = A.hs;
    if (rowid >= (int64_t)B * A.NH * A.T) return;
    int i = (int)(rowid % A.T);
    int64_t bh = rowid / A.T;
    int h = (int)(bh % A.NH), b = (int)(bh / A.NH);
    int64_t off = A.o(b, h) + (int64_t)i * A.C;
    float s = 0.0f;
    for (int d = lane; d < hs; d += 32) s += to_f(dout[off + d]) * to_f(out[off + d]);
    s = warp_sum(s);
    if (lane == 0) D[rowid] = s;
}

/* ===================================================================== generic path */

/* A generic kernel's warp: its row (query or key, by kernel) rowid = (b*NHR + h)*T + row of the
 * B*NHR*T rows, 4 warps per block (NHR: NH query heads, or NKV kv heads for dK/dV); valid is false
 * for the warps past the end. */
struct GRow {
    int64_t rowid, bh;
    int lane, row, h, b;
    bool valid;
    __device__ __forceinline__ GRow(int B, int T_, int NHR)
    {
        rowid = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
        lane = threadIdx.x % 32;
        valid = rowid < (int64_t)B * NHR * T_;
        row = (int)(rowid % T_);
        bh = rowid / T_;
        h = (int)(bh % NHR);
        b = (int)(bh / NHR);
    }
};

/* A head's row (channels d = lane + 32k < hs of the warp's lanes) into registers, 0 past hs; and
 * back out, times scale. */
template <typename T, int ND> __device__ __forceinline__ void g_load(float x[ND], const T *p, int lane, int hs)
{
#pragma unroll
    for (int k = 0; k < ND; k++) {
        int d = lane + 32 * k;
        x[k] = d < hs ? to_f(p[d]) : 0.0f;
    }
}
template <typename T, int ND>
__device__ __forceinline__ void g_store(T *p, const float x[ND], float scale, int lane, int hs)
{
#pragma unroll
    for (int k = 0; k < ND; k++) {
        int d = lane + 32 * k;
        if (d < hs) p[d] = from_f<T>(x[k] * scale);
    }
}

/* Both warp-wide dot products of the backward: s = sum a[k] x[d], dp = sum c[k] y[d] over the
 * lane's channels d = lane + 32k < hs, summed over the warp. */
template <typename T, int ND>
__device__ __forceinline__ void warp_dot2(float &s, float &dp, const float a[ND], const T *x, const float c[ND],
                                          const T *y, int lane, int hs)
{
    s = 0.0f;
    dp = 0.0f;
#pragma unroll
    for (int k = 0; k < ND; k++) {
        int d = lane + 32 * k;
        if (d < hs) {
            s += a[k] * to_f(x[d]);
            dp += c[k] * to_f(y[d]);
        }
    }
    s = warp_sum(s);
    dp = warp_sum(dp);
}

/* forward: one warp per query row; lane owns channels lane + 32*k (k < ND) */
template <typename T, int ND>
__global__ void attn_fwd_generic_k(T *out, float *lse, const T *qkv, int B, AttnGeo A, float scale)
{
    const GRow R(B, A.T, A.NH);
    if (!R.valid) return;
    const int lane = R.lane, hs = A.hs, i = R.row, h = R.h, b = R.b;
    const int64_t rowid = R.rowid, W = A.W;
    const T *kb = qkv + A.k(b, h / A.G), *vb = qkv + A.v(b, h / A.G);
    float q[ND], o[ND] = {};
    g_load<T, ND>(q, qkv + A.q(b, h) + i * W, lane, hs);
    float m = -INFINITY, l = 0.0f;
    for (int j = A.kv0(b, i); j <= i; j++) {
        const T *kr = kb + j * W, *vr = vb + j * W;
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < ND; k++) {
            int d = lane + 32 * k;
            if (d < hs) s += q[k] * to_f(kr[d]);
        }
        s = warp_sum(s) * scale;
        float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
#pragma unroll
        for (int k = 0; k < ND; k++) {
            int d = lane + 32 * k;
            o[k] = o[k] * corr + (d < hs ? p * to_f(vr[d]) : 0.0f);
        }
        m = mn;
    }
    g_store<T, ND>(out + A.o(b, h) + i * A.C, o, 1.0f / l, lane, hs);
    if (lane == 0) lse[rowid] = m + logf(l);
}

/* dQ: one warp per query row i, keys j = 0..i */
template <typename T, int ND>
__global__ void attn_bwd_dq_generic_k(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dv, int B,
                                      AttnGeo A, float scale)
{
    const GRow R(B, A.T, A.NH);
    if (!R.valid) return;
    const int lane = R.lane, hs = A.hs, i = R.row, h = R.h, b = R.b;
    const int64_t rowid = R.rowid, W = A.W;
    const T *kb = qkv + A.k(b, h / A.G), *vb = qkv + A.v(b, h / A.G);
    float q[ND], go[ND], dq[ND] = {};
    g_load<T, ND>(q, qkv + A.q(b, h) + i * W, lane, hs);
    g_load<T, ND>(go, dout + A.o(b, h) + i * A.C, lane, hs);
    float L = lse[rowid], Di = Dv[rowid];
    for (int j = A.kv0(b, i); j <= i; j++) {
        const T *kr = kb + j * W, *vr = vb + j * W;
        float s, dp;
        warp_dot2<T, ND>(s, dp, q, kr, go, vr, lane, hs);
        s *= scale;
        float p = expf(s - L), ds = p * (dp - Di) * scale;
#pragma unroll
        for (int k = 0; k < ND; k++) {
            int d = lane + 32 * k;
            if (d < hs) dq[k] += ds * to_f(kr[d]);
        }
    }
    g_store<T, ND>(dqkv + A.q(b, h) + i * W, dq, 1.0f, lane, hs);
}

/* dK, dV: one warp per key row j of kv head kh; the query heads of its group in order, each
 * with queries i = j..T-1 */
template <typename T, int ND>
__global__ void attn_bwd_dkv_generic_k(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dv,
                                       int B, AttnGeo A, float scale)
{
    const GRow R(B, A.T, A.NKV);
    if (!R.valid) return;
    const int lane = R.lane, hs = A.hs, j = R.row, kh = R.h, b = R.b, T_ = A.T;
    const int64_t W = A.W;
    float kk[ND], vv[ND], dk[ND] = {}, dv[ND] = {};
    g_load<T, ND>(kk, qkv + A.k(b, kh) + j * W, lane, hs);
    g_load<T, ND>(vv, qkv + A.v(b, kh) + j * W, lane, hs);
    for (int h = kh * A.G; h < kh * A.G + A.G; h++) {
        const T *qb = qkv + A.q(b, h), *ob = dout + A.o(b, h);
        const float *Lrow = lse + ((int64_t)b * A.NH + h) * T_, *Drow = Dv + ((int64_t)b * A.NH + h) * T_;
        for (int i = j; i < T_ && A.kv0(b, i) <= j; i++) { /* the queries of key j's sample */
            const T *qr = qb + i * W, *dor = ob + i * A.C;
            float s, dp;
            warp_dot2<T, ND>(s, dp, kk, qr, vv, dor, lane, hs);
            s *= scale;
            float p = expf(s - Lrow[i]), ds = p * (dp - Drow[i]) * scale;
#pragma unroll
            for (int k = 0; k < ND; k++) {
                int d = lane + 32 * k;
                if (d < hs) {
                    dk[k] += ds * to_f(qr[d]);
                    dv[k] += p * to_f(dor[d]);
                }
            }
        }
    }
    g_store<T, ND>(dqkv + A.k(b, kh) + j * W, dk, 1.0f, lane, hs);
    g_store<T, ND>(dqkv + A.v(b, kh) + j * W, dv, 1.0f, lane, hs);
}

/* ===================================================================== fast path: tensor cores */

#define FA_D 64   /* head size of the mma.sync forward and dQ kernels */
#define FA_BR 64  /* rows (queries or keys) per tile */
#define FA_LD 72  /* shared-memory row stride in elements: 144 bytes, conflict-free for ldmatrix */
#define FA_THREADS 128
/* the row stride for head size D (72 for 64, 136 for 128: rows 16 bytes apart modulo the 128
 * bytes of the banks, so ldmatrix's 8 rows hit distinct banks) */
#define FA_LDD(D) ((D) + 8)

/* mma.sync m16n8k16 with fp32 accumulators, and the packing of two fp32 values into one A
 * register, per 16-bit type (TY: the PTX type name) */
template <typename T> struct Mma;
#define ZINF_MMA(T, TY, T2, CVT2)                                                                 \
    template <> struct Mma<T> {                                                                   \
        static __device__ __forceinline__ void run(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) \
        {                                                                                         \
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 {%0,%1,%2,%3}, " \
                         "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                                \
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                         \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));        \
        }                                                                                         \
        static __device__ __forceinline__ uint32_t pack(float lo, float hi)                       \
        {                                                                                         \
            T2 v = CVT2(lo, hi);                                                                  \
            return *reinterpret_cast<uint32_t *>(&v);                                             \
        }                                                                                         \
    };
ZINF_MMA(__nv_bfloat16, "bf16", __nv_bfloat162, __floats2bfloat162_rn)
ZINF_MMA(__half, "f16", __half2, __floats2half2_rn)
#undef ZINF_MMA

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* Asynchronous copies (cp.async, sm_80+): rows at or past T are zero-filled (src-size 0). */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool pred)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Start copying rows r0..r0+ROWS-1 (channels 0..D-1) of a strided matrix into a
 * [ROWS][FA_LDD(D)] tile with NTHR threads; rows at or past T become zeros. 16-byte pieces;
 * complete after cp_async_wait and a barrier. */
template <int NTHR, int ROWS, int D = FA_D, typename T>
__device__ __forceinline__ void fa_load_rows(T *s, const T *g, int r0, int T_, int64_t stride)
{
    constexpr int PR = D / 8; /* pieces per row */
#pragma unroll
    for (int k = 0; k < ROWS * PR / NTHR; k++) {
        int idx = threadIdx.x + k * NTHR; /* row idx/PR, pack idx%PR */
        int r = idx / PR, cp = (idx % PR) * 8;
        bool in = r0 + r < T_;
        cp_async16(s + r * FA_LDD(D) + cp, g + (int64_t)(in ? r0 + r : 0) * stride + cp, in);
    }
}
template <typename T>
__device__ __forceinline__ void fa_load_tile(T *s, const T *g, int r0, int T_, int64_t stride)
{
    fa_load_rows<FA_THREADS, FA_BR>(s, g, r0, T_, stride);
}

__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* A operand (16 rows x D cols as D/16 k-steps) of this warp's 16 rows, from a tile */
template <int D = FA_D, typename T>
__device__ __forceinline__ void fa_frag_a(uint32_t f[][4], const T *s, int row0, int lane)
{
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
        ldsm_x4(f[ks], s + (row0 + (lane % 8) + ((lane / 8) & 1) * 8) * FA_LDD(D) + ks * 16 + (lane / 16) * 8);
}

/* acc[16 x 64] += A[16 x D] * S^T where S is a [64][FA_LDD(D)] tile (its rows are the n index):
 * e.g. scores Q K^T with S = K. A from registers (a) or, when a is NULL, reread per k-step from
 * rows row0.. of the tile sa. */
template <int D = FA_D, typename T>
__device__ __forceinline__ void fa_mma_abt(float acc[8][4], const uint32_t (*a)[4], const T *s, int lane,
                                           const T *sa = nullptr, int row0 = 0)
{
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        uint32_t af[4];
        if (!a)
            ldsm_x4(af, sa + (row0 + (lane % 8) + ((lane / 8) & 1) * 8) * FA_LDD(D) + ks * 16 + (lane / 16) * 8);
        const uint32_t *ak = a ? a[ks] : af;
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            ldsm_x4(b, s + (np * 16 + (lane % 8) + (lane / 16) * 8) * FA_LDD(D) + ks * 16 + ((lane / 8) & 1) * 8);
            Mma<T>::run(acc[2 * np], ak, b[0], b[1]);
            Mma<T>::run(acc[2 * np + 1], ak, b[2], b[3]);
        }
    }
}

/* acc[16 x D] += P[16 x 64] * S where P is in accumulator layout (fp32, rounded to T here) and
 * S is a [64][FA_LDD(D)] tile whose rows are the k index: e.g. P V with S = V. */
template <int D = FA_D, typename T>
__device__ __forceinline__ void fa_mma_pb(float acc[][4], const float p[8][4], const T *s, int lane)
{
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
        uint32_t a[4];
        a[0] = Mma<T>::pack(p[2 * ks][0], p[2 * ks][1]);
        a[1] = Mma<T>::pack(p[2 * ks][2], p[2 * ks][3]);
        a[2] = Mma<T>::pack(p[2 * ks + 1][0], p[2 * ks + 1][1]);
        a[3] = Mma<T>::pack(p[2 * ks + 1][2], p[2 * ks + 1][3]);
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b[4];
            ldsm_x4_t(b, s + (ks * 16 + (lane % 8) + ((lane / 8) & 1) * 8) * FA_LDD(D) + dp * 16 + (lane / 16) * 8);
            Mma<T>::run(acc[2 * dp], a, b[0], b[1]);
            Mma<T>::run(acc[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

/* The same for two m-tiles (P: [2][8][4]) sharing each fragment of S. */
template <typename T>
__device__ __forceinline__ void fa_mma2_pb(float acc[2][8][4], const float p[2][8][4], const T *s, int lane)
{
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
        uint32_t a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            a[mt][0] = Mma<T>::pack(p[mt][2 * ks][0], p[mt][2 * ks][1]);
            a[mt][1] = Mma<T>::pack(p[mt][2 * ks][2], p[mt][2 * ks][3]);
            a[mt][2] = Mma<T>::pack(p[mt][2 * ks + 1][0], p[mt][2 * ks + 1][1]);
            a[mt][3] = Mma<T>::pack(p[mt][2 * ks + 1][2], p[mt][2 * ks + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < 4; dp++) {
            uint32_t b[4];
            ldsm_x4_t(b, s + (ks * 16 + (lane % 8) + ((lane / 8) & 1) * 8) * FA_LD + dp * 16 + (lane / 16) * 8);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                Mma<T>::run(acc[mt][2 * dp], a[mt], b[0], b[1]);
                Mma<T>::run(acc[mt][2 * dp + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

template <int NN = 8> __device__ __forceinline__ void zero_acc(float a[][4])
{
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) a[n][e] = 0.0f;
}

/* Accumulator element (n, e) of lane: row g + 8*(e >= 2), column n*8 + 2t + (e & 1). */

/* One 16-row m-tile's online-softmax step over a 64-key tile (scores s in accumulator layout,
 * keys key0.., rows row0..): scale to base 2, mask keys beyond the row when diag, update the
 * running maximum m and sum l of rows g and g + 8, rescale o (NN n-tiles: head size 8 NN), and
 * leave P = 2^(s - m) in s. m stays finite: every row sees the first key of each tile its warp
 * walks. */
template <int NN = 8>
__device__ __forceinline__ void fa_softmax_step(float s[8][4], float m[2], float l[2], float o[][4], int key0,
                                                int row0, bool diag, float scale_log2, int g, int t)
{
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float v = s[n][e] * scale_log2;
            if (diag && key0 + n * 8 + 2 * t + (e & 1) > row0 + g + 8 * (e >> 1)) v = -INFINITY;
            s[n][e] = v;
            mx[e >> 1] = fmaxf(mx[e >> 1], v);
        }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        float mn = fmaxf(m[r], mx[r]);
        corr[r] = fast_exp2(m[r] - mn);
        m[r] = mn;
        l[r] *= corr[r];
    }
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = fast_exp2(s[n][e] - m[e >> 1]);
            s[n][e] = p;
            l[e >> 1] += p;
            o[n][e] *= corr[e >> 1];
        }
#pragma unroll
    for (int n = 8; n < NN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[n][e] *= corr[e >> 1];
}

/* Rows row0 + g (+ 8) of a 16-row m-tile's accumulator, times scale, into dst (row stride ld,
 * one head's 8 NN columns) in the compute dtype; rows at or past T_ are skipped. */
template <int NN = 8, typename T>
__device__ __forceinline__ void fa_store_rows(T *dst, int64_t ld, const float a[][4], float scale, int row0, int T_,
                                              int g, int t)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + 8 * r;
        if (row >= T_) continue;
#pragma unroll
        for (int n = 0; n < NN; n++)
            *reinterpret_cast<uint32_t *>(dst + (int64_t)row * ld + n * 8 + 2 * t) =
                Mma<T>::pack(a[n][2 * r] * scale, a[n][2 * r + 1] * scale);
    }
}

/* The end of the forward for one 16-row m-tile: rows row0 + g (+ 8) of out (one head's 8 NN
 * columns, row stride C) = O / l, and their lse. */
template <int NN = 8, typename T>
__device__ __forceinline__ void fa_write_rows(T *out, float *lse_bh, const float o[][4], const float m[2],
                                              const float l[2], int row0, int T_, int64_t C, int g, int t)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float lr = l[r];
        lr += __shfl_xor_sync(0xffffffffu, lr, 1);
        lr += __shfl_xor_sync(0xffffffffu, lr, 2);
        const int row = row0 + g + 8 * r;
        if (row >= T_) continue;
        float inv = 1.0f / lr;
        T *orow = out + (int64_t)row * C;
#pragma unroll
        for (int n = 0; n < NN; n++)
            *reinterpret_cast<uint32_t *>(orow + n * 8 + 2 * t) = Mma<T>::pack(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        if (t == 0) lse_bh[row] = (m[r] + log2f(lr)) * LN2;
    }
}

/* forward: a block of 4 warps per (128-query tile, b*h); warp w owns queries q0 + 32w .. +31 as
 * two 16-row m-tiles that share every K / V fragment read from shared memory (half the
 * shared-memory traffic per mma of one m-tile per warp). Key tiles of 64, double buffered. */
#define FQ_ROWS 128
template <typename T>
__global__ void __launch_bounds__(FA_THREADS, 2)
flash_fwd_k(T *out, float *lse, const T *qkv, AttnGeo A, float scale_log2)
{
    __shared__ __align__(16) T sK[2][FA_BR * FA_LD], sV[2][FA_BR * FA_LD];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int h = blockIdx.y % A.NH;
    const Seq S = A.sq(blockIdx.y / A.NH);
    const int T_ = S.len, nqt = n_tiles(T_, FQ_ROWS);
    if ((int)blockIdx.x >= nqt) return;
    const int qt = nqt - 1 - blockIdx.x; /* the longest (diagonal-farthest) tiles first */
    const int64_t C3 = A.W, C = A.C;
    const T *base = qkv + A.q(S, h), *kb = qkv + A.k(S, h / A.G), *vb = qkv + A.v(S, h / A.G);
    const int q0 = qt * FQ_ROWS;
    const int kt_last = min(2 * qt + 1, (T_ - 1) / FA_BR);

    /* Q (128 rows) staged through buffers 1 of sK and sV; key tile 0 into buffers 0 */
    fa_load_tile(sK[1], base, q0, T_, C3);
    fa_load_tile(sV[1], base, q0 + FA_BR, T_, C3);
    cp_async_commit();
    fa_load_tile(sK[0], kb, 0, T_, C3);
    fa_load_tile(sV[0], vb, 0, T_, C3);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    uint32_t qf[2][4][4];
    {
        const T *sq = warp < 2 ? sK[1] : sV[1];
        fa_frag_a(qf[0], sq, (warp & 1) * 32, lane);
        fa_frag_a(qf[1], sq, (warp & 1) * 32 + 16, lane);
    }
    __syncthreads(); /* buffers 1 are free for the prefetch */

    const int w0 = q0 + warp * 32; /* this warp's first query row */
    float o[2][8][4], m[2][2], l[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        zero_acc(o[mt]);
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    for (int kt = 0; kt <= kt_last; kt++) {
        const int buf = kt & 1;
        if (kt < kt_last) { /* prefetch the next key tile into the other buffer */
            fa_load_tile(sK[buf ^ 1], kb, (kt + 1) * FA_BR, T_, C3);
            fa_load_tile(sV[buf ^ 1], vb, (kt + 1) * FA_BR, T_, C3);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (kt * FA_BR <= w0 + 31) { /* some key of the tile is visible to some row of the warp */
            float s[2][8][4];
            zero_acc(s[0]);
            zero_acc(s[1]);
            const T *sk = sK[buf];
#pragma unroll
            for (int ks = 0; ks < 4; ks++)
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t bb[4];
                    ldsm_x4(bb, sk + (np * 16 + (lane % 8) + (lane / 16) * 8) * FA_LD + ks * 16 + ((lane / 8) & 1) * 8);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        Mma<T>::run(s[mt][2 * np], qf[mt][ks], bb[0], bb[1]);
                        Mma<T>::run(s[mt][2 * np + 1], qf[mt][ks], bb[2], bb[3]);
                    }
                }
            const bool diag = kt * FA_BR + FA_BR - 1 > w0; /* some key beyond some row */
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
                fa_softmax_step(s[mt], m[mt], l[mt], o[mt], kt * FA_BR, w0 + mt * 16, diag, scale_log2, g, t);
            fa_mma2_pb(o, s, sV[buf], lane); /* O += P V */
        }
        __syncthreads(); /* everyone is done with buf before it is refilled */
    }
    T *ob = out + A.o(S, h);
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
        fa_write_rows(ob, lse + A.l(S, h), o[mt], m[mt], l[mt], w0 + mt * 16, T_, C, g, t);
}

/* dK, dV: a block per (key tile, b*kv head); warp w owns keys kt*64 + 16w.. ; walks query tiles
 * kt..last of each query head of the group in turn (one sequence of tiles, prefetched alike), so
 * the group's sum is in registers and in a fixed order. Computes the transposed quantities
 * S^T = K Q^T, P^T, dP^T = V dO^T. Head size D: at 64 the K and V fragments stay in registers
 * (staged through the second Q/dO buffers); at 128 they stay in shared memory (tiles sK, sV)
 * and are reread per product, since dK and dV alone take 128 registers. Dynamic shared memory:
 * DKV_SMEM_BYTES(D). */
#define DKV_SMEM_BYTES(D) ((size_t)((D) == 64 ? 4 : 6) * FA_BR * FA_LDD(D) * 2)
template <typename T, int D>
__global__ void __launch_bounds__(FA_THREADS, D == 64 ? 1 : 2)
flash_bwd_dkdv_k(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dv, AttnGeo A, float scale,
                 float scale_log2)
{
    constexpr bool KEEP = D == 64;
    constexpr int LD = FA_LDD(D), TILE = FA_BR * LD;
    extern __shared__ __align__(16) unsigned char dkv_smem[];
    T *sQ = reinterpret_cast<T *>(dkv_smem); /* [2][FA_BR][LD]: Q tiles, then dO tiles */
    T *sO = sQ + 2 * TILE;
    T *sK = KEEP ? sQ + TILE : sO + 2 * TILE, *sV = KEEP ? sO + TILE : sK + TILE;
    __shared__ __align__(8) float sL[2][FA_BR], sD[2][FA_BR];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int kh = blockIdx.y % A.NKV, G = A.G;
    const Seq S = A.sq(blockIdx.y / A.NKV);
    const int T_ = S.len, kt = blockIdx.x, nt_all = n_tiles(T_, FA_BR); /* small kt = most query tiles: first */
    if (kt >= nt_all) return;
    const int64_t C3 = A.W, C = A.C;
    const int nq = nt_all - kt, n_it = G * nq; /* query tiles per head; tiles of the group */

    /* K and V of this block's keys */
    uint32_t kf[KEEP ? D / 16 : 1][4], vf[KEEP ? D / 16 : 1][4];
    fa_load_rows<FA_THREADS, FA_BR, D>(sK, qkv + A.k(S, kh), kt * FA_BR, T_, C3);
    fa_load_rows<FA_THREADS, FA_BR, D>(sV, qkv + A.v(S, kh), kt * FA_BR, T_, C3);
    cp_async_commit();
    /* iteration it: query head kh*G + it / nq, query tile kt + it % nq */
    auto load_q = [&](int it, int buf) {
        const int h = kh * G + it / nq, qt = kt + it % nq;
        fa_load_rows<FA_THREADS, FA_BR, D>(sQ + buf * TILE, qkv + A.q(S, h), qt * FA_BR, T_, C3);
        fa_load_rows<FA_THREADS, FA_BR, D>(sO + buf * TILE, dout + A.o(S, h), qt * FA_BR, T_, C);
        if (threadIdx.x < FA_BR) {
            const int64_t row = A.l(S, h);
            int q = qt * FA_BR + threadIdx.x;
            sL[buf][threadIdx.x] = q < T_ ? lse[row + q] * LOG2E : INFINITY; /* padding rows: p = 0 */
            sD[buf][threadIdx.x] = q < T_ ? Dv[row + q] : 0.0f;
        }
        cp_async_commit();
    };
    load_q(0, 0);
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (KEEP) {
        fa_frag_a<D>(kf, sK, warp * 16, lane);
        fa_frag_a<D>(vf, sV, warp * 16, lane);
    }
    __syncthreads(); /* buffer 1 is free for the prefetch */

    float dk[D / 8][4], dv[D / 8][4];
    zero_acc<D / 8>(dk);
    zero_acc<D / 8>(dv);
    const int key[2] = {kt * FA_BR + warp * 16 + g, kt * FA_BR + warp * 16 + g + 8};
    for (int it = 0; it < n_it; it++) {
        const int buf = it & 1, qt = kt + it % nq;
        const T *sq = sQ + buf * TILE, *so = sO + buf * TILE;
        if (it + 1 < n_it) {
            load_q(it + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        float p[8][4], dp[8][4];
        zero_acc(p);
        zero_acc(dp);
        fa_mma_abt<D>(p, KEEP ? kf : nullptr, sq, lane, sK, warp * 16); /* S^T */
        const bool diag = qt == kt; /* earlier query tiles are not walked; later ones see every key */
#pragma unroll
        for (int n = 0; n < 8; n++) {
            /* the lse of this thread's two query columns of n-tile n, in one 8-byte read */
            const float2 L2 = *reinterpret_cast<const float2 *>(&sL[buf][n * 8 + 2 * t]);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int q = qt * FA_BR + n * 8 + 2 * t + (e & 1);
                float v = fast_exp2(p[n][e] * scale_log2 - ((e & 1) ? L2.y : L2.x));
                p[n][e] = diag && q < key[e >> 1] ? 0.0f : v;
            }
        }
        fa_mma_pb<D>(dv, p, so, lane);                                 /* dV += P^T dO */
        fa_mma_abt<D>(dp, KEEP ? vf : nullptr, so, lane, sV, warp * 16); /* dP^T = V dO^T */
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const float2 D2 = *reinterpret_cast<const float2 *>(&sD[buf][n * 8 + 2 * t]);
#pragma unroll
            for (int e = 0; e < 4; e++)
                dp[n][e] = p[n][e] * (dp[n][e] - ((e & 1) ? D2.y : D2.x)); /* dS^T without the scale */
        }
        fa_mma_pb<D>(dk, dp, sq, lane); /* dK += dS^T Q */
        __syncthreads();
    }
    fa_store_rows<D / 8>(dqkv + A.k(S, kh), C3, dk, scale, key[0] - g, T_, g, t);
    fa_store_rows<D / 8>(dqkv + A.v(S, kh), C3, dv, 1.0f, key[0] - g, T_, g, t);
}

/* acc[2][16 x 64] += A[2 m-tiles of 16 rows from row r0 of sa] * S^T: both m-tiles' A fragments
 * come from shared memory and share each B fragment (S a [64][FA_LD] tile, its rows the n index) */
template <typename T>
__device__ __forceinline__ void fa_mma2_abt(float acc[2][8][4], const T *sa, const T *sb, int r0, int lane)
{
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
        uint32_t a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
            ldsm_x4(a[mt], sa + (r0 + mt * 16 + (lane % 8) + ((lane / 8) & 1) * 8) * FA_LD + ks * 16 + (lane / 16) * 8);
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t bb[4];
            ldsm_x4(bb, sb + (np * 16 + (lane % 8) + (lane / 16) * 8) * FA_LD + ks * 16 + ((lane / 8) & 1) * 8);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                Mma<T>::run(acc[mt][2 * np], a[mt], bb[0], bb[1]);
                Mma<T>::run(acc[mt][2 * np + 1], a[mt], bb[2], bb[3]);
            }
        }
    }
}

/* dQ: a block of 4 warps per (128-query tile, b*h); warp w owns rows q0 + 32w .. +31 as two 16-row
 * m-tiles that share every K / V fragment read from shared memory, as the forward does. Q and dO
 * (128 rows each) stay in shared memory and their fragments are reloaded per key tile (the two
 * m-tiles' S, dP and dQ accumulators fill the registers); key tiles of 64, double buffered. */
#define DQ_SMEM_BYTES(T) ((size_t)(2 * FQ_ROWS + 4 * FA_BR) * FA_LD * sizeof(T))
template <typename T>
__global__ void __launch_bounds__(FA_THREADS)
flash_bwd_dq_k(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dv, AttnGeo A, float scale,
               float scale_log2)
{
    extern __shared__ __align__(16) unsigned char dq_smem[];
    T *sQ = reinterpret_cast<T *>(dq_smem); /* [FQ_ROWS][FA_LD] */
    T *sO = sQ + FQ_ROWS * FA_LD;            /* [FQ_ROWS][FA_LD] */
    T *sK = sO + FQ_ROWS * FA_LD;            /* [2][FA_BR][FA_LD] */
    T *sV = sK + 2 * FA_BR * FA_LD;          /* [2][FA_BR][FA_LD] */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int h = blockIdx.y % A.NH;
    const Seq S = A.sq(blockIdx.y / A.NH);
    const int T_ = S.len, nqt = n_tiles(T_, FQ_ROWS);
    if ((int)blockIdx.x >= nqt) return;
    const int qt = nqt - 1 - blockIdx.x; /* the longest tiles first */
    const int64_t C3 = A.W, C = A.C, lrow = A.l(S, h);
    const T *base = qkv + A.q(S, h), *kb = qkv + A.k(S, h / A.G), *vb = qkv + A.v(S, h / A.G);
    const T *obase = dout + A.o(S, h);
    const int q0 = qt * FQ_ROWS, w0 = q0 + warp * 32; /* this warp's first query row */
    const int kt_last = min(2 * qt + 1, (T_ - 1) / FA_BR);

    fa_load_rows<FA_THREADS, FQ_ROWS>(sQ, base, q0, T_, C3);
    fa_load_rows<FA_THREADS, FQ_ROWS>(sO, obase, q0, T_, (int64_t)C);
    fa_load_tile(sK, kb, 0, T_, C3);
    fa_load_tile(sV, vb, 0, T_, C3);
    cp_async_commit();
    float L2[2][2], Di[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = w0 + mt * 16 + g + 8 * r;
            bool ok = row < T_;
            L2[mt][r] = ok ? lse[lrow + row] * LOG2E : INFINITY; /* padding rows: p = 0 */
            Di[mt][r] = ok ? Dv[lrow + row] : 0.0f;
        }
    float dq[2][8][4];
    zero_acc(dq[0]);
    zero_acc(dq[1]);
    for (int kt = 0; kt <= kt_last; kt++) {
        const int buf = kt & 1;
        const T *sk = sK + buf * FA_BR * FA_LD, *sv = sV + buf * FA_BR * FA_LD;
        if (kt < kt_last) { /* prefetch the next key tile into the other buffer */
            fa_load_tile(sK + (buf ^ 1) * FA_BR * FA_LD, kb, (kt + 1) * FA_BR, T_, C3);
            fa_load_tile(sV + (buf ^ 1) * FA_BR * FA_LD, vb, (kt + 1) * FA_BR, T_, C3);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (kt * FA_BR <= w0 + 31) { /* some key of the tile is visible to some row of the warp */
            float p[2][8][4], dp[2][8][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                zero_acc(p[mt]);
                zero_acc(dp[mt]);
            }
            /* S = Q K^T and dP = dO V^T, each B fragment used by both m-tiles */
            fa_mma2_abt(p, sQ, sk, warp * 32, lane);
            fa_mma2_abt(dp, sO, sv, warp * 32, lane);
            /* dS = P o (dP - D), without the scale (applied at the end) */
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int n = 0; n < 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int key = kt * FA_BR + n * 8 + 2 * t + (e & 1);
                        int row = w0 + mt * 16 + g + 8 * (e >> 1);
                        float pv = fast_exp2(p[mt][n][e] * scale_log2 - L2[mt][e >> 1]);
                        if (key > row) pv = 0.0f;
                        dp[mt][n][e] = pv * (dp[mt][n][e] - Di[mt][e >> 1]);
                    }
            fa_mma2_pb(dq, dp, sk, lane); /* dQ += dS K */
        }
        __syncthreads(); /* everyone is done with buf before it is refilled */
    }
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
        fa_store_rows(dqkv + A.q(S, h), C3, dq[mt], scale, w0 + mt * 16, T_, g, t);
}

/* ===================================================================== Hopper kernels (sm_90a)
 *
 * The same algorithms with the products on the warpgroup tensor-core instruction (wgmma)
 * instead of per-warp mma.sync. A warpgroup (4 warps) owns a 64-row m-tile; the accumulators
 * keep mma.sync's m16n8 layout per warp (warp w of the warpgroup holds rows 16w..16w+15), so
 * the softmax code is shared. Operands that stay put (Q in the forward) are A fragments in
 * registers; tiles that stream (K, V) come through cp.async into 128-byte-swizzled shared
 * memory (a 128-byte row per key, its 16-byte pieces XOR-ed with the row index mod 8), which
 * wgmma reads directly: K-major for S = Q K^T, N-major (transposed) for O += P V and dQ += dS K.
 * The forward and dQ have Hopper versions; dK/dV stays on mma.sync: its wgmma version (four
 * 64x64 accumulators, 238 registers, so one block of two warpgroups per SM) ran 3% slower, with
 * nothing to overlap a warpgroup's exponentials with its own products (PERF-NOTES.md).
 * Head size D = 64 or 128: a K or V tile of 64 keys is D/64 swizzled sub-tiles of 64 channels
 * (8 KB each), S = Q K^T runs D/16 k-steps over them, and O (dQ) is D/64 accumulators of 64
 * columns, one m64n64 product each.
 * Built only for sm_90a (configure adds that target when 90 is in CUDA_ARCHS); other devices,
 * and the kernels whose bit is clear in zinf_cuda_attn_hopper (tests), take mma.sync (head size
 * 64) or the generic kernels (128). */
int zinf_cuda_attn_hopper = ZINF_ATTN_HOPPER_ALL;

#define H_BN 64                           /* keys per tile */
#define H_SUB_BYTES (H_BN * 64 * 2)       /* one swizzled sub-tile of 64 channels: 8 KB */
#define H_TILE_BYTES(D) (H_BN * (D) * 2)  /* one K or V tile: D/64 sub-tiles */
/* NWG warpgroups per block (1 or 2): 64 * NWG query rows, 128 * NWG threads */
#define H_ROWS(NWG) (64 * (NWG))
#define H_THREADS(NWG) (128 * (NWG))
/* forward: K/V double buffered, then Q staged padded (for ldmatrix into registers); dQ: Q and dO */
#define H_SMEM_BYTES(NWG, D) (1024 + 4 * H_TILE_BYTES(D) + H_ROWS(NWG) * FA_LDD(D) * 2)
#define HQ_SMEM_BYTES(NWG, D) (1024 + 4 * H_TILE_BYTES(D) + 2 * H_ROWS(NWG) * FA_LDD(D) * 2)

#if defined(ZINF_CUDA_SM90A) && (!defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL))
#define ZINF_HOPPER_ATTN 1

/* wgmma m64n64k16: d = A B + (accumulate ? d : 0), A (4 registers of 16-bit pairs per thread,
 * mma.sync's A layout per warp) from registers, B from shared memory through its descriptor;
 * TRANS_B = 1 reads B N-major (its rows are the k index). */
#define ZINF_WGMMA_RS(TY)                                                                         \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                     \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                      \
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                        \
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "             \
                 "{%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"                                     \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),        \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),      \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),  \
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),  \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),  \
                   "+f"(d[30]), "+f"(d[31])                                                       \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate),      \
                   "n"(TRANS_B))
template <typename T> struct Wgmma;
#define ZINF_WGMMA(T, TY)                                                                         \
    template <> struct Wgmma<T> {                                                                 \
        template <int TRANS_B>                                                                    \
        static __device__ __forceinline__ void rs(float *d, const uint32_t a[4], uint64_t desc_b, int accumulate) \
        {                                                                                         \
            ZINF_WGMMA_RS(TY);                                                                    \
        }                                                                                         \
    };
ZINF_WGMMA(__nv_bfloat16, "bf16")
ZINF_WGMMA(__half, "f16")
#undef ZINF_WGMMA
#undef ZINF_WGMMA_RS

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* After wg_wait0: tie the accumulators to this point, so that no use of them moves above the
 * wait. */
template <int NN = 8> __device__ __forceinline__ void wg_fence_regs(float (*a)[4])
{
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(a[n][e])::"memory");
}

/* Descriptor of a 128-byte-swizzled operand at shared address s: both strides 1024 bytes (8 rows
 * of 128 bytes; with 64-element rows the other stride is never used). */
__device__ __forceinline__ uint64_t wg_desc(uint32_t s)
{
    return (uint64_t)((s & 0x3FFFF) >> 4) | ((uint64_t)(1024 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}

/* Rows r0.. of a strided matrix (D channels) into D/64 swizzled [H_BN][64] sub-tiles; rows at or
 * past T become zeros. Complete after cp_async_wait, the proxy fence and a barrier. */
template <int NTHR, int D, typename T>
__device__ __forceinline__ void h_load_tile(uint8_t *s, const T *g, int r0, int T_, int64_t stride)
{
    constexpr int PR = D / 8; /* 16-byte pieces per row */
#pragma unroll
    for (int k = 0; k < H_BN * PR / NTHR; k++) {
        int idx = threadIdx.x + k * NTHR, r = idx / PR, cc = idx % PR, c = cc % 8;
        bool in = r0 + r < T_;
        cp_async16(s + (cc / 8) * H_SUB_BYTES + r * 128 + ((c ^ (r & 7)) << 4),
                   g + (int64_t)(in ? r0 + r : 0) * stride + cc * 8, in);
    }
}

/* Where a thread of the forward or dQ kernel stands: block (query tile qt of H_ROWS(NWG) rows,
 * the longest tiles first; b*h), warpgroup wg owning rows q0 + 64wg.., warp rows r0..r0+15, and
 * the key tiles to walk: 0..kt_last for the block, 0..kt_wg (its diagonal) for the warpgroup. */
template <int NWG> struct HGeo {
    int lane, warp, wg, g, t, qt, h, q0, kt_last, kt_wg, r0;
    bool idle; /* past the end of a shorter sequence: the block returns */
    __device__ __forceinline__ HGeo(int T_, int NH)
    {
        lane = threadIdx.x % 32;
        warp = threadIdx.x / 32;
        wg = warp / 4;
        g = lane / 4;
        t = lane % 4;
        const int nqt = n_tiles(T_, H_ROWS(NWG));
        idle = (int)blockIdx.x >= nqt;
        qt = nqt - 1 - (int)blockIdx.x;
        h = blockIdx.y % NH;
        q0 = qt * H_ROWS(NWG);
        kt_last = min(NWG * qt + NWG - 1, (T_ - 1) / H_BN);
        kt_wg = NWG * qt + wg;
        r0 = q0 + wg * 64 + (warp % 4) * 16;
    }
};

/* The key tiles of the forward and dQ kernels, double buffered: K tile kt at sm + buf *
 * H_TILE_BYTES(D), V two tiles further. h_kv_load starts tile kt into buffers buf (the caller
 * commits); h_kv_next, at the top of iteration kt, starts tile kt + 1 into the other buffers and
 * waits for tile kt, which then is ready for wgmma in every thread. kb, vb: the kv head's rows,
 * W apart. */
template <int NTHR, int D, typename T>
__device__ __forceinline__ void h_kv_load(uint8_t *sm, const T *kb, const T *vb, int kt, int buf, int T_, int64_t W)
{
    h_load_tile<NTHR, D>(sm + buf * H_TILE_BYTES(D), kb, kt * H_BN, T_, W);
    h_load_tile<NTHR, D>(sm + (2 + buf) * H_TILE_BYTES(D), vb, kt * H_BN, T_, W);
}
template <int NTHR, int D, typename T>
__device__ __forceinline__ void h_kv_next(uint8_t *sm, const T *kb, const T *vb, int kt, int kt_last, int T_,
                                          int64_t W)
{
    if (kt < kt_last) {
        h_kv_load<NTHR, D>(sm, kb, vb, kt + 1, (kt & 1) ^ 1, T_, W);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
    /* written through the generic proxy, read by wgmma through the async one */
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
}

/* Accumulators (m16n8 layout, 64 columns) as the A fragments of 4 k-steps, rounded to T. */
template <typename T> __device__ __forceinline__ void acc_to_a(uint32_t f[4][4], const float p[8][4])
{
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
        f[ks][0] = Mma<T>::pack(p[2 * ks][0], p[2 * ks][1]);
        f[ks][1] = Mma<T>::pack(p[2 * ks][2], p[2 * ks][3]);
        f[ks][2] = Mma<T>::pack(p[2 * ks + 1][0], p[2 * ks + 1][1]);
        f[ks][3] = Mma<T>::pack(p[2 * ks + 1][2], p[2 * ks + 1][3]);
    }
}

/* Issue acc (+)= A B over 64 k (4 wgmma k-steps) without waiting; B is the swizzled tile at
 * shared address sb, K-major (TRANS_B 0: step 32 bytes along its rows) or N-major (1: step 16
 * rows). Between wg_fence and wg_commit. */
template <typename T, int TRANS_B>
__device__ __forceinline__ void wg_issue64(float (&acc)[8][4], const uint32_t a[4][4], uint32_t sb, bool accumulate)
{
#pragma unroll
    for (int ks = 0; ks < 4; ks++)
        Wgmma<T>::template rs<TRANS_B>(&acc[0][0], a[ks], wg_desc(sb + ks * (TRANS_B ? 16 * 128 : 32)),
                                       accumulate || ks > 0);
}

/* Issue acc (+)= A B^T over D k (D/16 wgmma k-steps), B a K-major tile of D/64 swizzled
 * sub-tiles at shared address sb: scores Q K^T, dO V^T. Between wg_fence and wg_commit. */
template <typename T, int D>
__device__ __forceinline__ void wg_issue_qk(float (&acc)[8][4], const uint32_t (*a)[4], uint32_t sb, bool accumulate)
{
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
        Wgmma<T>::template rs<0>(&acc[0][0], a[ks], wg_desc(sb + (ks / 4) * H_SUB_BYTES + (ks % 4) * 32),
                                 accumulate || ks > 0);
}

/* Issue acc[16 x D] += P B, P[64 x 64] (A fragments) times a tile of D/64 N-major sub-tiles at sb:
 * one m64n64 product per 64 columns of acc. Between wg_fence and wg_commit. */
template <typename T, int D>
__device__ __forceinline__ void wg_issue_pv(float (*acc)[4], const uint32_t a[4][4], uint32_t sb)
{
#pragma unroll
    for (int c = 0; c < D / 64; c++)
        wg_issue64<T, 1>(*reinterpret_cast<float(*)[8][4]>(acc + 8 * c), a, sb + c * H_SUB_BYTES, true);
}

/* forward: a block of NWG warpgroups per tile of 64 * NWG queries, warpgroup wg owning rows
 * q0 + 64wg..; key tiles of 64, double buffered; a warpgroup stops at its diagonal tile. Run with
 * NWG = 2: at head size 64, 128 registers and 2 blocks per SM (one warpgroup per block timed the
 * same); at 128 (O is 64 registers, Q 32) one block per SM. */
template <typename T, int NWG, int D>
__global__ void __launch_bounds__(H_THREADS(NWG), D == 64 ? 4 / NWG : 1)
flash_fwd_sm90_k(T *out, float *lse, const T *qkv, AttnGeo A, float scale_log2)
{
    extern __shared__ uint8_t h_smem_raw[];
    /* K tiles at sm + buf * H_TILE_BYTES(D), V tiles two tiles further, then Q */
    uint8_t *sm = (uint8_t *)(((uintptr_t)h_smem_raw + 1023) & ~(uintptr_t)1023);
    T *sQ = (T *)(sm + 4 * H_TILE_BYTES(D));
    const Seq S = A.sq(blockIdx.y / A.NH);
    const int T_ = S.len;
    const HGeo<NWG> G(T_, A.NH);
    if (G.idle) return;
    const int lane = G.lane, g = G.g, t = G.t, h = G.h, q0 = G.q0;
    const int kt_last = G.kt_last, kt_wg = G.kt_wg, r0 = G.r0;
    const int64_t W = A.W, lrow = A.l(S, h);
    const T *kb = qkv + A.k(S, h / A.G), *vb = qkv + A.v(S, h / A.G);

    fa_load_rows<H_THREADS(NWG), H_ROWS(NWG), D>(sQ, qkv + A.q(S, h), q0, T_, W);
    h_kv_load<H_THREADS(NWG), D>(sm, kb, vb, 0, 0, T_, W);
    cp_async_commit();

    uint32_t qf[D / 16][4];
    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    zero_acc<D / 8>(o);
    for (int kt = 0; kt <= kt_last; kt++) {
        const int buf = kt & 1;
        h_kv_next<H_THREADS(NWG), D>(sm, kb, vb, kt, kt_last, T_, W);
        if (kt == 0) fa_frag_a<D>(qf, sQ, r0 - q0, lane);
        if (kt <= kt_wg) {
            const uint32_t ka = (uint32_t)__cvta_generic_to_shared(sm + buf * H_TILE_BYTES(D));
            float s[8][4];
            zero_acc(s);
            wg_fence();
            wg_issue_qk<T, D>(s, qf, ka, false); /* S = Q K^T */
            wg_commit();
            wg_wait0();
            wg_fence_regs(s);
            fa_softmax_step<D / 8>(s, m, l, o, kt * H_BN, r0, kt * H_BN + H_BN - 1 > r0, scale_log2, g, t);
            uint32_t pf[4][4];
            acc_to_a<T>(pf, s);
            wg_fence();
            wg_issue_pv<T, D>(o, pf, ka + 2 * H_TILE_BYTES(D)); /* O += P V */
            wg_commit();
            wg_wait0();
            wg_fence_regs<D / 8>(o);
        }
        __syncthreads(); /* everyone is done with buf before it is refilled */
    }
    fa_write_rows<D / 8>(out + A.o(S, h), lse + lrow, o, m, l, r0, T_, A.C, g, t);
}

/* dQ: a block of NWG warpgroups per 64 * NWG queries, warpgroup wg owning rows q0 + 64wg.. (Q
 * and dO as A fragments in registers); key tiles of 64, double buffered, up to each warpgroup's
 * diagonal. Run with NWG = 1: at head size 64 and 168 registers that fits 3 blocks (warpgroups)
 * per SM, where blocks of two fit one; the backward was 8% faster so (PERF-NOTES.md). At 128
 * (Q, dO 64 registers, dQ 64) two blocks per SM. */
template <typename T, int NWG, int D>
__global__ void __launch_bounds__(H_THREADS(NWG), (D == 64 ? 3 : 2) / NWG)
flash_bwd_dq_sm90_k(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dv, AttnGeo A, float scale,
                    float scale_log2)
{
    extern __shared__ uint8_t h_smem_raw[];
    /* K tiles at sm + buf * H_TILE_BYTES(D), V tiles two tiles further; then Q and dO padded */
    uint8_t *sm = (uint8_t *)(((uintptr_t)h_smem_raw + 1023) & ~(uintptr_t)1023);
    T *sQ = (T *)(sm + 4 * H_TILE_BYTES(D)), *sO = sQ + H_ROWS(NWG) * FA_LDD(D);
    const Seq S = A.sq(blockIdx.y / A.NH);
    const int T_ = S.len;
    const HGeo<NWG> G(T_, A.NH);
    if (G.idle) return;
    const int lane = G.lane, g = G.g, t = G.t, h = G.h, q0 = G.q0;
    const int kt_last = G.kt_last, kt_wg = G.kt_wg, r0 = G.r0;
    const int64_t W = A.W, lrow = A.l(S, h);
    const T *kb = qkv + A.k(S, h / A.G), *vb = qkv + A.v(S, h / A.G);

    fa_load_rows<H_THREADS(NWG), H_ROWS(NWG), D>(sQ, qkv + A.q(S, h), q0, T_, W);
    fa_load_rows<H_THREADS(NWG), H_ROWS(NWG), D>(sO, dout + A.o(S, h), q0, T_, A.C);
    h_kv_load<H_THREADS(NWG), D>(sm, kb, vb, 0, 0, T_, W);
    cp_async_commit();
    float L2[2], Di[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = r0 + g + 8 * r;
        bool ok = row < T_;
        L2[r] = ok ? lse[lrow + row] * LOG2E : INFINITY; /* padding rows: p = 0 */
        Di[r] = ok ? Dv[lrow + row] : 0.0f;
    }
    uint32_t qf[D / 16][4], of[D / 16][4];
    float dq[D / 8][4];
    zero_acc<D / 8>(dq);
    for (int kt = 0; kt <= kt_last; kt++) {
        const int buf = kt & 1;
        h_kv_next<H_THREADS(NWG), D>(sm, kb, vb, kt, kt_last, T_, W);
        if (kt == 0) {
            fa_frag_a<D>(qf, sQ, r0 - q0, lane);
            fa_frag_a<D>(of, sO, r0 - q0, lane);
        }
        if (kt <= kt_wg) {
            const uint32_t ka = (uint32_t)__cvta_generic_to_shared(sm + buf * H_TILE_BYTES(D));
            float p[8][4], dp[8][4];
            zero_acc(p);
            zero_acc(dp);
            wg_fence();
            wg_issue_qk<T, D>(p, qf, ka, false);                        /* S = Q K^T */
            wg_issue_qk<T, D>(dp, of, ka + 2 * H_TILE_BYTES(D), false); /* dP = dO V^T */
            wg_commit();
            wg_wait0();
            wg_fence_regs(p);
            wg_fence_regs(dp);
            const bool diag = kt * H_BN + H_BN - 1 > r0;
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float v = fast_exp2(p[n][e] * scale_log2 - L2[e >> 1]);
                    if (diag && kt * H_BN + n * 8 + 2 * t + (e & 1) > r0 + g + 8 * (e >> 1)) v = 0.0f;
                    dp[n][e] = v * (dp[n][e] - Di[e >> 1]); /* dS without the scale */
                }
            uint32_t sf[4][4];
            acc_to_a<T>(sf, dp);
            wg_fence();
            wg_issue_pv<T, D>(dq, sf, ka); /* dQ += dS K */
            wg_commit();
            wg_wait0();
            wg_fence_regs<D / 8>(dq);
        }
        __syncthreads(); /* everyone is done with buf before it is refilled */
    }
    fa_store_rows<D / 8>(dqkv + A.q(S, h), W, dq, scale, r0, T_, g, t);
}
#endif /* sm_90a */

/* ===================================================================== dispatch */

/* The tensor-core kernels: 16-bit compute, head size 64 or 128, 16-byte aligned rows (cp.async) */
static bool use_fast(CudaImpl *im, const AttnGeo &A, const void *a, const void *b, const void *c)
{
    return im->cdt != ZINF_F32 && (A.hs == FA_D || A.hs == 128) && aligned16(a) && aligned16(b) &&
           (!c || aligned16(c));
}

/* The wgmma kernel named by bit is built and runs on this device */
static bool use_hopper(CudaImpl *im, int bit)
{
#ifdef ZINF_HOPPER_ATTN
    return im->cc == 90 && (zinf_cuda_attn_hopper & bit);
#else
    (void)im, (void)bit;
    return false;
#endif
}

/* Raise kernel K's dynamic shared-memory limit, once per process (a process drives one GPU);
 * false after recording the failure. */
template <auto K> static bool smem_attr(CudaImpl *im, int bytes, const char *op)
{
    static bool set;
    if (set) return true;
    cudaError_t e = cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e == cudaSuccess) return set = true;
    zinf_cuda_fail(im, op, ZINF_CUDA_EIO, "%s: %s", op, cudaGetErrorString(e));
    return false;
}

#ifdef ZINF_HOPPER_ATTN
template <typename T, int NWG, int D>
static void hopper_fwd(CudaImpl *im, T *out, float *lse, const T *qkv, int B, const AttnGeo &A, float sl)
{
    if (!smem_attr<flash_fwd_sm90_k<T, NWG, D>>(im, H_SMEM_BYTES(NWG, D), "attention_fwd")) return;
    dim3 grid(cdiv(A.max_len, H_ROWS(NWG)), (unsigned)(A.nseq * A.NH));
    flash_fwd_sm90_k<T, NWG, D><<<grid, H_THREADS(NWG), H_SMEM_BYTES(NWG, D), im->stream>>>(out, lse, qkv, A, sl);
    zinf_cuda_check_launch(im, "attention_fwd");
}
template <typename T, int NWG, int D>
static void hopper_dq(CudaImpl *im, T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dv, int B,
                      const AttnGeo &A, float scale, float sl)
{
    if (!smem_attr<flash_bwd_dq_sm90_k<T, NWG, D>>(im, HQ_SMEM_BYTES(NWG, D), "attention_bwd")) return;
    dim3 grid(cdiv(A.max_len, H_ROWS(NWG)), (unsigned)(A.nseq * A.NH));
    flash_bwd_dq_sm90_k<T, NWG, D><<<grid, H_THREADS(NWG), HQ_SMEM_BYTES(NWG, D), im->stream>>>(dqkv, dout, qkv, lse,
                                                                                                Dv, A, scale, sl);
}
#endif

template <typename T> static void attn_fwd_t(CudaImpl *im, T *out, float *lse, const T *qkv, int B, const AttnGeo &A)
{
    const int hs = A.hs;
    float scale = 1.0f / sqrtf((float)hs);
    if constexpr (!std::is_same<T, float>::value) {
        if (use_fast(im, A, out, qkv, NULL) && (hs == FA_D || use_hopper(im, ZINF_ATTN_HOPPER_FWD))) {
#ifdef ZINF_HOPPER_ATTN
            if (use_hopper(im, ZINF_ATTN_HOPPER_FWD)) {
                if (hs == 128)
                    hopper_fwd<T, 2, 128>(im, out, lse, qkv, B, A, scale * LOG2E);
                else
                    hopper_fwd<T, 2, 64>(im, out, lse, qkv, B, A, scale * LOG2E);
                return;
            }
#endif
            dim3 grid(cdiv(A.max_len, FQ_ROWS), (unsigned)(A.nseq * A.NH));
            flash_fwd_k<T><<<grid, FA_THREADS, 0, im->stream>>>(out, lse, qkv, A, scale * LOG2E);
            zinf_cuda_check_launch(im, "attention_fwd");
            return;
        }
    }
    unsigned grid = cdiv((int64_t)B * A.NH * A.T, 4);
#define FWD_CASE(ND)                                                                              \
    if (hs <= 32 * ND) {                                                                          \
        attn_fwd_generic_k<T, ND><<<grid, 128, 0, im->stream>>>(out, lse, qkv, B, A, scale);      \
        zinf_cuda_check_launch(im, "attention_fwd");                                              \
        return;                                                                                   \
    }
    FWD_CASE(1)
    FWD_CASE(2)
    FWD_CASE(4)
    FWD_CASE(8)
#undef FWD_CASE
    zinf_cuda_fail(im, "attention_fwd", ZINF_CUDA_ENOTSUP, "attention_fwd: head size %d > 256", hs);
}

template <typename T, int D>
static bool dkdv_launch(CudaImpl *im, T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dv, int B,
                        const AttnGeo &A, float scale, float sl)
{
    if (!smem_attr<flash_bwd_dkdv_k<T, D>>(im, (int)DKV_SMEM_BYTES(D), "attention_bwd")) return false;
    dim3 grid(cdiv(A.max_len, FA_BR), (unsigned)(A.nseq * A.NKV));
    flash_bwd_dkdv_k<T, D><<<grid, FA_THREADS, DKV_SMEM_BYTES(D), im->stream>>>(dqkv, dout, qkv, lse, Dv, A, scale, sl);
    return true;
}

/* dQ by the generic kernel, alone (head size 128 off Hopper) */
template <typename T>
static void dq_generic(CudaImpl *im, T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dv, int B,
                       const AttnGeo &A, float scale)
{
    unsigned grid = cdiv((int64_t)B * A.NH * A.T, 4);
    attn_bwd_dq_generic_k<T, 4><<<grid, 128, 0, im->stream>>>(dqkv, dout, qkv, lse, Dv, B, A, scale);
}

template <typename T>
static void attn_bwd_t(CudaImpl *im, T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse, int B,
                       const AttnGeo &A)
{
    const int hs = A.hs;
    float scale = 1.0f / sqrtf((float)hs);
    int64_t rows = (int64_t)B * A.NH * A.T;
    float *D = (float *)zinf_cuda_scratch(im, (size_t)rows * sizeof(float), "attention_bwd");
    if (!D) return;
    attn_D_k<T><<<cdiv(rows, 8), 256, 0, im->stream>>>(D, dout, out, B, A);
    if constexpr (!std::is_same<T, float>::value) {
        if (use_fast(im, A, dqkv, dout, qkv)) {
            const float sl = scale * LOG2E;
            bool q_done = false;
#ifdef ZINF_HOPPER_ATTN
            if (use_hopper(im, ZINF_ATTN_HOPPER_DQ)) {
                if (hs == 128)
                    hopper_dq<T, 1, 128>(im, dqkv, dout, qkv, lse, D, B, A, scale, sl);
                else
                    hopper_dq<T, 1, 64>(im, dqkv, dout, qkv, lse, D, B, A, scale, sl);
                q_done = true;
            }
#endif
            if (!(hs == 128 ? dkdv_launch<T, 128>(im, dqkv, dout, qkv, lse, D, B, A, scale, sl)
                            : dkdv_launch<T, 64>(im, dqkv, dout, qkv, lse, D, B, A, scale, sl)))
                return;
            if (!q_done && hs == 128) {
                dq_generic<T>(im, dqkv, dout, qkv, lse, D, B, A, scale);
            } else if (!q_done) {
                if (!smem_attr<flash_bwd_dq_k<T>>(im, (int)DQ_SMEM_BYTES(T), "attention_bwd")) return;
                dim3 gq(cdiv(A.max_len, FQ_ROWS), (unsigned)(A.nseq * A.NH));
                flash_bwd_dq_k<T><<<gq, FA_THREADS, DQ_SMEM_BYTES(T), im->stream>>>(dqkv, dout, qkv, lse, D, A, scale,
                                                                                    sl);
            }
            zinf_cuda_check_launch(im, "attention_bwd");
            return;
        }
    }
    unsigned grid = cdiv(rows, 4), kgrid = cdiv((int64_t)B * A.NKV * A.T, 4);
#define BWD_CASE(ND)                                                                              \
    if (hs <= 32 * ND) {                                                                          \
        attn_bwd_dkv_generic_k<T, ND><<<kgrid, 128, 0, im->stream>>>(dqkv, dout, qkv, lse, D, B, A, scale); \
        attn_bwd_dq_generic_k<T, ND><<<grid, 128, 0, im->stream>>>(dqkv, dout, qkv, lse, D, B, A, scale);   \
        zinf_cuda_check_launch(im, "attention_bwd");                                              \
        return;                                                                                   \
    }
    BWD_CASE(1)
    BWD_CASE(2)
    BWD_CASE(4)
    BWD_CASE(8)
#undef BWD_CASE
    zinf_cuda_fail(im, "attention_bwd", ZINF_CUDA_ENOTSUP, "attention_bwd: head size %d > 256", hs);
}

/* The shapes the kernels take: positive sizes, NKV dividing NH */
static bool attn_shape_ok(CudaImpl *im, const char *op, int B, int T_, int NH, int NKV, int hs)
{
    if (B > 0 && T_ > 0 && NH > 0 && NKV > 0 && hs > 0 && NH % NKV == 0) return true;
    if ((int64_t)B * T_ <= 0 && NH > 0 && NKV > 0 && hs > 0) return false; /* nothing to do */
    zinf_cuda_fail(im, op, ZINF_CUDA_EINVAL, "%s: NH %d, NKV %d, hs %d (NKV must divide NH)", op, NH, NKV, hs);
    return false;
}

void cu_attention_fwd(zinf_backend *be, void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV,
                      int hs, const zinf_attn_rows *rows)
{
    CudaImpl *im = impl_of(be);
    if (!attn_shape_ok(im, "attention_fwd", B, T_, NH, NKV, hs)) return;
    if (!rows && zinf_cudnn_attn_fwd(im, out, lse, qkv, B, T_, NH, NKV, hs)) return;
    const AttnGeo A(B, T_, NH, NKV, hs, rows);
    ZINF_DISPATCH_CDT(im->cdt, attn_fwd_t<T>(im, (T *)out, lse, (const T *)qkv, B, A));
}

void cu_attention_bwd(zinf_backend *be, void *dqkv, const void *dout, const void *qkv, const void *out,
                      const float *lse, int B, int T_, int NH, int NKV, int hs, const zinf_attn_rows *rows)
{
    CudaImpl *im = impl_of(be);
    if (!attn_shape_ok(im, "attention_bwd", B, T_, NH, NKV, hs)) return;
    if (!rows && zinf_cudnn_attn_bwd(im, dqkv, dout, qkv, out, lse, B, T_, NH, NKV, hs)) return;
    const AttnGeo A(B, T_, NH, NKV, hs, rows);
    ZINF_DISPATCH_CDT(im->cdt, attn_bwd_t<T>(im, (T *)dqkv, (const T *)dout, (const T *)qkv, (const T *)out, lse,
                                             B, A));
}
