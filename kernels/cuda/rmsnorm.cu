/* rmsnorm: out = x * rstd * w over groups of C elements, `heads` of them side by side in each of
 * N rows ld apart (kernels.h), and its backward. The kernels run over N * heads group rows, row
 * r = h * N + n at n * ld + h * C (grow), its rstd at r.
 *
 * Forward and the input gradient: one warp per group row, 16-byte packs when the row starts and C
 * allow them. The weight gradient is a fixed-order column reduction, as LayerNorm's: per chunk of
 * RMS_ROWS rows a block of 32 x 8 threads sums dout * x * rstd of 32 columns (the 8 warps
 * striding the rows, combined in order), then LayerNorm's second pass (cu_add_partials) adds the
 * chunks' partials in order into dw. No atomics: the same bits every run. 16-bit rows of 256 to
 * 2048 elements (a multiple of 256) take both gradients in one pass instead (rms_bwd_fused_k). */
#include "cuda_backend.h"
#include "cuda_common.h"

#define RMS_ROWS 256 /* rows per chunk of the weight-gradient partials */

/* where group row r (h * N + n) starts */
__device__ __forceinline__ int64_t grow(int64_t r, int64_t N, int C, int64_t ld)
{
    return (r % N) * ld + (r / N) * C;
}

template <typename T, int VEC>
__global__ void rms_fwd_k(T *out, float *rstd, const T *x, const T *w, int64_t R, int64_t N, int C, int64_t ld,
                          float eps)
{
    int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= R) return;
    const int64_t at = grow(row, N, C, ld);
    const T *xr = x + at;
    float ss = 0.0f;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        Pack<T, VEC> p = load_pack<T, VEC>(xr + c);
#pragma unroll
        for (int k = 0; k < VEC; k++) ss += to_f(p.v[k]) * to_f(p.v[k]);
    }
    float r = 1.0f / sqrtf(warp_sum(ss) / C + eps);
    T *o = out + at;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        Pack<T, VEC> p = load_pack<T, VEC>(xr + c), pw = load_pack<T, VEC>(w + c), po;
#pragma unroll
        for (int k = 0; k < VEC; k++) po.v[k] = from_f<T>((to_f(p.v[k]) * r) * to_f(pw.v[k]));
        store_pack<T, VEC>(o + c, po);
    }
    if (lane == 0) rstd[row] = r;
}

__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

/* One pack of VEC columns of a row's input gradient, added to gr: dx += (dout w - xhat mgn) rstd,
 * xhat = x rstd, mgn = mean(dout w xhat) over the row; both backward kernels' arithmetic, in one
 * order */
template <typename T, int VEC>
__device__ __forceinline__ void add_dx_pack(T *gr, const T *xr, const T *dr, const T *w, float r, float mgn)
{
    Pack<T, VEC> px = load_pack<T, VEC>(xr), pd = load_pack<T, VEC>(dr), pw = load_pack<T, VEC>(w),
                 pg = load_pack<T, VEC>(gr);
#pragma unroll
    for (int k = 0; k < VEC; k++)
        pg.v[k] = from_f<T>(to_f(pg.v[k]) + (to_f(pd.v[k]) * to_f(pw.v[k]) - (to_f(px.v[k]) * r) * mgn) * r);
    store_pack<T, VEC>(gr, pg);
}

/* dx += (dout w - xhat mean(dout w xhat)) rstd, xhat = x rstd; one warp per row */
template <typename T, int VEC>
__global__ void rms_bwd_dx_k(T *dx, const T *dout, const T *x, const T *w, const float *rstd, int64_t R, int64_t N,
                             int C, int64_t ld)
{
    int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= R) return;
    const int64_t at = grow(row, N, C, ld);
    const T *xr = x + at, *dr = dout + at;
    const float r = rstd[row];
    float s = 0.0f;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        Pack<T, VEC> px = load_pack<T, VEC>(xr + c), pd = load_pack<T, VEC>(dr + c), pw = load_pack<T, VEC>(w + c);
#pragma unroll
        for (int k = 0; k < VEC; k++) s += (to_f(pd.v[k]) * to_f(pw.v[k])) * (to_f(px.v[k]) * r);
    }
    const float mgn = warp_sum(s) / C;
    T *gr = dx + at;
    for (int c = lane * VEC; c < C; c += 32 * VEC) add_dx_pack<T, VEC>(gr + c, xr + c, dr + c, w + c, r, mgn);
}

/* part[chunk][c] = sum over the chunk's group rows of dout * x * rstd; block 32 x 8, the chunks on
 * the grid's x (2^31 - 1 of them: a y of 65535 chunks would cap N x heads at 16.7M rows) and the
 * 32-column blocks on its y */
template <typename T>
__global__ void rms_dw_part_k(float *part, const T *dout, const T *x, const float *rstd, int64_t R, int64_t N, int C,
                              int64_t ld)
{
    __shared__ float sm[8][32];
    const int c = blockIdx.y * 32 + threadIdx.x;
    const int64_t r0 = (int64_t)blockIdx.x * RMS_ROWS, r1 = r0 + RMS_ROWS < R ? r0 + RMS_ROWS : R;
    float acc = 0.0f;
    if (c < C)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
            const int64_t at = grow(r, N, C, ld) + c;
            acc += to_f(dout[at]) * (to_f(x[at]) * rstd[r]);
        }
    sm[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s = 0.0f;
#pragma unroll
        for (int y = 0; y < 8; y++) s += sm[y][threadIdx.x];
        part[(int64_t)blockIdx.x * C + c] = s;
    }
}

/* The input gradient and the weight gradient's partials in one pass, for 16-bit rows of C = 256 NP
 * (NP 1..8): rms_bwd_dx_k's arithmetic, in its order, for each group row, and each lane's columns
 * of dout * x * rstd summed in registers over the rows its warp takes; a block takes RMS_FROWS rows
 * (its 8 warps each every 8th), then adds its warps' sums in order into part[chunk]. x and dout
 * are read from memory once for both gradients instead of twice. */
#define RMS_FROWS 64
template <typename T, int NP>
__global__ void __launch_bounds__(256) rms_bwd_fused_k(T *dx, float *part, const T *dout, const T *x, const T *w,
                                                       const float *rstd, int64_t R, int64_t N, int C, int64_t ld)
{
    constexpr int VEC = 8;
    __shared__ float sm[8][32 * VEC];
    const int wp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t r0 = (int64_t)blockIdx.x * RMS_FROWS, r1 = r0 + RMS_FROWS < R ? r0 + RMS_FROWS : R;
    float acc[NP][VEC];
#pragma unroll
    for (int j = 0; j < NP; j++)
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[j][k] = 0.0f;
    for (int64_t row = r0 + wp; row < r1; row += 8) {
        const int64_t at = grow(row, N, C, ld);
        const T *xr = x + at, *dr = dout + at;
        const float r = rstd[row];
        float s = 0.0f;
        /* hints only: this row's dx, read after the row's sum, and the warp's next row's inputs
         * start on their way to L2 now, instead of one round trip after another */
#pragma unroll
        for (int j = 0; j < NP; j++) {
            const int c = (j * 32 + lane) * VEC;
            if (dx) prefetch_l2(dx + at + c);
            if (row + 8 < r1) {
                const int64_t nx = grow(row + 8, N, C, ld) + c;
                prefetch_l2(x + nx), prefetch_l2(dout + nx);
            }
        }
#pragma unroll
        for (int j = 0; j < NP; j++) {
            const int c = (j * 32 + lane) * VEC;
            Pack<T, VEC> px = load_pack<T, VEC>(xr + c), pd = load_pack<T, VEC>(dr + c), pw = load_pack<T, VEC>(w + c);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                s += (to_f(pd.v[k]) * to_f(pw.v[k])) * (to_f(px.v[k]) * r);
                acc[j][k] += to_f(pd.v[k]) * (to_f(px.v[k]) * r);
            }
        }
        if (!dx) continue;
        const float mgn = warp_sum(s) / C;
        T *gr = dx + at;
#pragma unroll
        for (int j = 0; j < NP; j++) {
            const int c = (j * 32 + lane) * VEC;
            add_dx_pack<T, VEC>(gr + c, xr + c, dr + c, w + c, r, mgn);
        }
    }
#pragma unroll
    for (int j = 0; j < NP; j++) {
#pragma unroll
        for (int k = 0; k < VEC; k++) sm[wp][lane * VEC + k] = acc[j][k];
        __syncthreads();
        float t = 0.0f;
#pragma unroll
        for (int y = 0; y < 8; y++) t += sm[y][threadIdx.x];
        part[(int64_t)blockIdx.x * C + j * 32 * VEC + threadIdx.x] = t;
        __syncthreads();
    }
}

template <typename T, int NP>
static void rms_bwd_fused_launch(CudaImpl *im, T *dx, float *part, const T *dout, const T *x, const T *w,
                                 const float *rstd, int64_t R, int64_t N, int C, int64_t ld, unsigned nchunks)
{
    rms_bwd_fused_k<T, NP><<<nchunks, 256, 0, im->stream>>>(dx, part, dout, x, w, rstd, R, N, C, ld);
}

/* 16-byte packs fit when C and ld are multiples of the pack and every pointer is aligned (a group
 * then starts on a pack too: it is C elements past its row's start) */
template <typename T> static bool rms_vec(int C, int64_t ld, const void *a, const void *b, const void *c, const void *d)
{
    constexpr int V = 16 / sizeof(T);
    return C % V == 0 && ld % V == 0 && aligned16(a) && aligned16(b) && aligned16(c) && (!d || aligned16(d));
}

template <typename T>
static void rms_fwd_t(CudaImpl *im, T *out, float *rstd, const T *x, const T *w, int64_t N, int heads, int C,
                      int64_t ld, float eps)
{
    constexpr int V = 16 / sizeof(T);
    const int64_t R = N * heads;
    unsigned grid = cdiv(R, 8);
    if (rms_vec<T>(C, ld, out, x, w, NULL))
        rms_fwd_k<T, V><<<grid, 256, 0, im->stream>>>(out, rstd, x, w, R, N, C, ld, eps);
    else
        rms_fwd_k<T, 1><<<grid, 256, 0, im->stream>>>(out, rstd, x, w, R, N, C, ld, eps);
    zinf_cuda_check_launch(im, "rmsnorm_fwd");
}

template <typename T>
static void rms_bwd_t(CudaImpl *im, T *dx, T *dw, const T *dout, const T *x, const T *w, const float *rstd,
                      int64_t N, int heads, int C, int64_t ld)
{
    constexpr int V = 16 / sizeof(T);
    const int64_t R = N * heads;
    unsigned grid = cdiv(R, 8);
    /* 16-bit rows of 256 NP elements, NP 1..8: both gradients in one pass (rms_bwd_fused_k) */
    const int np = C % 256 == 0 ? C / 256 : 0;
    if constexpr (sizeof(T) == 2) if (dw && np >= 1 && np <= 8 && rms_vec<T>(C, ld, dout, x, w, dx)) {
        unsigned nchunks = cdiv(R, RMS_FROWS);
        float *part = (float *)zinf_cuda_scratch(im, (size_t)nchunks * C * sizeof(float), "rmsnorm_bwd");
        if (!part) return;
        switch (np) {
        case 1: rms_bwd_fused_launch<T, 1>(im, dx, part, dout, x, w, rstd, R, N, C, ld, nchunks); break;
        case 2: rms_bwd_fused_launch<T, 2>(im, dx, part, dout, x, w, rstd, R, N, C, ld, nchunks); break;
        case 3: rms_bwd_fused_launch<T, 3>(im, dx, part, dout, x, w, rstd, R, N, C, ld, nchunks); break;
        case 4: rms_bwd_fused_launch<T, 4>(im, dx, part, dout, x, w, rstd, R, N, C, ld, nchunks); break;
        case 5: rms_bwd_fused_launch<T, 5>(im, dx, part, dout, x, w, rstd, R, N, C, ld, nchunks); break;
        case 6: rms_bwd_fused_launch<T, 6>(im, dx, part, dout, x, w, rstd, R, N, C, ld, nchunks); break;
        case 7: rms_bwd_fused_launch<T, 7>(im, dx, part, dout, x, w, rstd, R, N, C, ld, nchunks); break;
        default: rms_bwd_fused_launch<T, 8>(im, dx, part, dout, x, w, rstd, R, N, C, ld, nchunks); break;
        }
        cu_add_partials(im, dw, part, (int)nchunks, C);
        zinf_cuda_check_launch(im, "rmsnorm_bwd");
        return;
    }
    if (dx) {
        if (rms_vec<T>(C, ld, dx, dout, x, w))
            rms_bwd_dx_k<T, V><<<grid, 256, 0, im->stream>>>(dx, dout, x, w, rstd, R, N, C, ld);
        else
            rms_bwd_dx_k<T, 1><<<grid, 256, 0, im->stream>>>(dx, dout, x, w, rstd, R, N, C, ld);
    }
    if (dw) {
        unsigned nchunks = cdiv(R, RMS_ROWS);
        float *part = (float *)zinf_cuda_scratch(im, (size_t)nchunks * C * sizeof(float), "rmsnorm_bwd");
        if (!part) return;
        rms_dw_part_k<T><<<dim3(nchunks, cdiv(C, 32)), dim3(32, 8), 0, im->stream>>>(part, dout, x, rstd, R, N, C, ld);
        cu_add_partials(im, dw, part, (int)nchunks, C);
    }
    zinf_cuda_check_launch(im, "rmsnorm_bwd");
}

void cu_rmsnorm_fwd(zinf_backend *be, void *out, float *rstd, const void *x, const void *w, int64_t N, int heads,
                    int C, int64_t ld, float eps)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || heads <= 0 || C <= 0) return;
    ZINF_DISPATCH_CDT(im->cdt, rms_fwd_t<T>(im, (T *)out, rstd, (const T *)x, (const T *)w, N, heads, C, ld, eps));
}

void cu_rmsnorm_bwd(zinf_backend *be, void *dx, void *dw, const void *dout, const void *x, const void *w,
                    const float *rstd, int64_t N, int heads, int C, int64_t ld)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || heads <= 0 || C <= 0) return;
    ZINF_DISPATCH_CDT(im->cdt, rms_bwd_t<T>(im, (T *)dx, (T *)dw, (const T *)dout, (const T *)x, (const T *)w, rstd,
                                            N, heads, C, ld));
}
