/* ops: the CUDA backend's non-GEMM, non-attention operations: encoder, layernorm, GELU, add,
 * fused softmax cross-entropy, AdamW, norms and vector helpers, casts, bias gradient.
 *
 * Every kernel is a template over the compute type T (float, __nv_bfloat16, __half) and computes
 * in fp32. Row kernels read 16-byte packs (VEC = 16 / sizeof(T) elements) when the row length
 * and the pointers allow, else single elements (VEC = 1): same code, two instantiations.
 *
 * Determinism: no floating-point atomics. Reductions over rows (layernorm dw/db, bias gradient)
 * are two-stage with a fixed chunking that depends only on the shape: stage 1 writes one fp32
 * partial per (chunk, channel), stage 2 sums the chunks in order and adds into the gradient. The
 * encoder backward sorts (token, position) pairs with a stable radix sort and sums each token's
 * rows in position order, which is the CPU reference's order too. */
#include <cub/cub.cuh>

#include "cuda_common.h"

#define EW_THREADS 256

/* grid for a grid-stride loop over n work items */
static unsigned ew_grid(CudaImpl *im, int64_t n)
{
    int64_t g = (n + EW_THREADS - 1) / EW_THREADS;
    int64_t cap = (int64_t)im->num_sms * 16;
    if (g > cap) g = cap;
    return (unsigned)(g < 1 ? 1 : g);
}

template <typename T> static inline int vec_of() { return 16 / (int)sizeof(T); }

/* ===================================================================== elementwise */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

struct GeluFwd {
    __device__ float operator()(float x, float, float) const
    {
        return 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
};
struct GeluBwd { /* a = x, b = dout, c = dx (accumulated) */
    __device__ float operator()(float x, float d, float acc) const
    {
        float t = tanhf(GELU_K * (x + 0.044715f * x * x * x));
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        return acc + d * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    }
};
struct AddOp {
    __device__ float operator()(float a, float b, float) const { return a + b; }
};

/* out[i] = f(a[i], b[i], c[i]); b and c may be NULL (read as 0). out may alias any input. */
template <typename T, int VEC, class F>
__global__ void map3_k(T *out, const T *a, const T *b, const T *c, int64_t n, F f)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t np = n / VEC;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < np; i += stride) {
        Pack<T, VEC> pa = load_pack<T, VEC>(a + i * VEC), pb, pc, po;
        if (b) pb = load_pack<T, VEC>(b + i * VEC);
        if (c) pc = load_pack<T, VEC>(c + i * VEC);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            po.v[k] = from_f<T>(f(to_f(pa.v[k]), b ? to_f(pb.v[k]) : 0.0f, c ? to_f(pc.v[k]) : 0.0f));
        store_pack<T, VEC>(out + i * VEC, po);
    }
    for (int64_t i = np * VEC + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = from_f<T>(f(to_f(a[i]), b ? to_f(b[i]) : 0.0f, c ? to_f(c[i]) : 0.0f));
}

template <typename T, class F>
static void map3(CudaImpl *im, const char *op, T *out, const T *a, const T *b, const T *c,
                 int64_t n, F f)
{
    if (n <= 0) return;
    bool vec = aligned16(out) && aligned16(a) && (!b || aligned16(b)) && (!c || aligned16(c));
    constexpr int V = 16 / sizeof(T);
    if (vec) map3_k<T, V><<<ew_grid(im, n / V), EW_THREADS, 0, im->stream>>>(out, a, b, c, n, f);
    else map3_k<T, 1><<<ew_grid(im, n), EW_THREADS, 0, im->stream>>>(out, a, b, c, n, f);
    zinf_cuda_check_launch(im, op);
}

void cu_gelu_fwd(zinf_backend *be, void *out, const void *x, int64_t n)
{
    CudaImpl *im = impl_of(be);
    ZINF_DISPATCH_CDT(im->cdt, map3<T>(im, "gelu_fwd", (T *)out, (const T *)x, (const T *)NULL,
                                       (const T *)NULL, n, GeluFwd()));
}

void cu_gelu_bwd(zinf_backend *be, void *dx, const void *x, const void *dout, int64_t n)
{
    CudaImpl *im = impl_of(be);
    ZINF_DISPATCH_CDT(im->cdt, map3<T>(im, "gelu_bwd", (T *)dx, (const T *)x, (const T *)dout,
                                       (const T *)dx, n, GeluBwd()));
}

void cu_add(zinf_backend *be, void *out, const void *a, const void *b, int64_t n)
{
    CudaImpl *im = impl_of(be);
    ZINF_DISPATCH_CDT(im->cdt, map3<T>(im, "add", (T *)out, (const T *)a, (const T *)b,
                                       (const T *)NULL, n, AddOp()));
}

/* ===================================================================== encoder */

/* out[n, c] = wte[tok[n], c] + wpe[n % T, c]; one thread per pack */
template <typename T, int VEC>
__global__ void encoder_fwd_k(T *out, const int32_t *tok, const T *wte, const T *wpe, int64_t N,
                              int T_, int C)
{
    int cp = C / VEC;
    int64_t total = N * cp, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int64_t n = i / cp;
        int c = (int)(i - n * cp) * VEC;
        Pack<T, VEC> e = load_pack<T, VEC>(wte + (int64_t)tok[n] * C + c);
        Pack<T, VEC> o;
        if (wpe) {
            Pack<T, VEC> p = load_pack<T, VEC>(wpe + (n % T_) * C + c);
#pragma unroll
            for (int k = 0; k < VEC; k++) o.v[k] = from_f<T>(to_f(e.v[k]) + to_f(p.v[k]));
        } else {
            o = e;
        }
        store_pack<T, VEC>(out + n * C + c, o);
    }
}

template <typename T>
static void encoder_fwd_t(CudaImpl *im, T *out, const int32_t *tok, const T *wte, const T *wpe,
                          int64_t N, int T_, int C)
{
    constexpr int V = 16 / sizeof(T);
    if (C % V == 0 && aligned16(out) && aligned16(wte) && (!wpe || aligned16(wpe)))
        encoder_fwd_k<T, V><<<ew_grid(im, N * C / V), EW_THREADS, 0, im->stream>>>(out, tok, wte, wpe, N, T_, C);
    else
        encoder_fwd_k<T, 1><<<ew_grid(im, N * C), EW_THREADS, 0, im->stream>>>(out, tok, wte, wpe, N, T_, C);
    zinf_cuda_check_launch(im, "encoder_fwd");
}

void cu_encoder_fwd(zinf_backend *be, void *out, const int32_t *tok, const void *wte,
                    const void *wpe, int B, int T_, int C)
{
    CudaImpl *im = impl_of(be);
    if ((int64_t)B * T_ * C <= 0) return;
    ZINF_DISPATCH_CDT(im->cdt, encoder_fwd_t<T>(im, (T *)out, tok, (const T *)wte, (const T *)wpe,
                                               (int64_t)B * T_, T_, C));
}

__global__ void iota_k(int32_t *v, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        v[i] = (int32_t)i;
}

/* One block per sorted index i; the block whose i starts a run of equal tokens sums the run's
 * rows (positions ascending, as the stable sort left them) onto the token's gradient row. */
template <typename T>
__global__ void encoder_wte_bwd_k(T *dwte, const T *dout, const int32_t *keys, const int32_t *rows,
                                  int64_t N, int C)
{
    int64_t i = blockIdx.x;
    int32_t tok = keys[i];
    if (i > 0 && keys[i - 1] == tok) return;
    int64_t end = i + 1;
    while (end < N && keys[end] == tok) end++;
    T *g = dwte + (int64_t)tok * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = to_f(g[c]);
        for (int64_t j = i; j < end; j++) acc += to_f(dout[(int64_t)rows[j] * C + c]);
        g[c] = from_f<T>(acc);
    }
}

/* dwpe[t, c] += sum over b (in order) of dout[b, t, c] */
template <typename T>
__global__ void encoder_wpe_bwd_k(T *dwpe, const T *dout, int B, int T_, int C)
{
    int64_t total = (int64_t)T_ * C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        float acc = to_f(dwpe[i]);
        for (int b = 0; b < B; b++) acc += to_f(dout[(int64_t)b * total + i]);
        dwpe[i] = from_f<T>(acc);
    }
}

void cu_encoder_bwd(zinf_backend *be, void *dwte, void *dwpe, const void *dout, const int32_t *tok,
                    int B, int T_, int C)
{
    CudaImpl *im = impl_of(be);
    int64_t N = (int64_t)B * T_;
    if (N <= 0 || C <= 0) return;
    /* scratch: sorted keys, rows in, rows out, cub's temporary storage */
    size_t tmp_bytes = 0;
    cub::DeviceRadixSort::SortPairs(NULL, tmp_bytes, (const int32_t *)NULL, (int32_t *)NULL,
                                    (const int32_t *)NULL, (int32_t *)NULL, (int)N, 0, 32, im->stream);
    size_t a = ((size_t)N * 4 + 255) & ~(size_t)255;
    char *s = (char *)zinf_cuda_scratch(im, 3 * a + tmp_bytes, "encoder_bwd");
    if (!s) return;
    int32_t *keys = (int32_t *)s, *rows_in = (int32_t *)(s + a), *rows = (int32_t *)(s + 2 * a);
    void *tmp = s + 3 * a;
    iota_k<<<ew_grid(im, N), EW_THREADS, 0, im->stream>>>(rows_in, N);
    cudaError_t e = cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, tok, keys, rows_in, rows, (int)N,
                                                    0, 32, im->stream);
    if (e != cudaSuccess) {
        zinf_cuda_fail(im, "encoder_bwd", ZINF_CUDA_EIO, "encoder_bwd: radix sort: %s",
                       cudaGetErrorString(e));
        return;
    }
    int threads = C >= 512 ? 512 : ((C + 31) / 32) * 32;
    ZINF_DISPATCH_CDT(im->cdt, {
        encoder_wte_bwd_k<T><<<(unsigned)N, threads, 0, im->stream>>>((T *)dwte, (const T *)dout, keys, rows, N, C);
        if (dwpe)
            encoder_wpe_bwd_k<T><<<ew_grid(im, (int64_t)T_ * C), EW_THREADS, 0, im->stream>>>((T *)dwpe, (const T *)dout, B, T_, C);
    });
    zinf_cuda_check_launch(im, "encoder_bwd");
}

/* ===================================================================== copy_rows */
void cu_copy_rows(zinf_backend *be, void *dst, int64_t ld_dst, const void *src, int64_t ld_src, int64_t rows,
                  int64_t cols)
{
    CudaImpl *im = impl_of(be);
    if (rows <= 0 || cols <= 0) return;
    size_t es = zinf_dtype_size(im->cdt);
    cudaError_t e = cudaMemcpy2DAsync(dst, (size_t)ld_dst * es, src, (size_t)ld_src * es, (size_t)cols * es,
                                      (size_t)rows, cudaMemcpyDeviceToDevice, im->stream);
    if (e != cudaSuccess)
        zinf_cuda_fail(im, "copy_rows", ZINF_CUDA_EIO, "copy_rows: %s", cudaGetErrorString(e));
}

/* ===================================================================== layernorm */

/* One warp per row; x is read three times (mean, variance, output), the later reads from L1. */
template <typename T, int VEC>
__global__ void ln_fwd_k(T *out, float *mean, float *rstd, const T *x, const T *w, const T *b,
                         int64_t N, int C)
{
    int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const T *xr = x + row * C;
    float s = 0.0f;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        Pack<T, VEC> p = load_pack<T, VEC>(xr + c);
#pragma unroll
        for (int k = 0; k < VEC; k++) s += to_f(p.v[k]);
    }
    float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        Pack<T, VEC> p = load_pack<T, VEC>(xr + c);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float d = to_f(p.v[k]) - m;
            v += d * d;
        }
    }
    float r = 1.0f / sqrtf(warp_sum(v) / C + 1e-5f); /* biased variance */
    T *o = out + row * C;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        Pack<T, VEC> p = load_pack<T, VEC>(xr + c), pw = load_pack<T, VEC>(w + c),
                     pb = load_pack<T, VEC>(b + c), po;
#pragma unroll
        for (int k = 0; k < VEC; k++)
            po.v[k] = from_f<T>(((to_f(p.v[k]) - m) * r) * to_f(pw.v[k]) + to_f(pb.v[k]));
        store_pack<T, VEC>(o + c, po);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

template <typename T>
static void ln_fwd_t(CudaImpl *im, T *out, float *mean, float *rstd, const T *x, const T *w,
                     const T *b, int64_t N, int C)
{
    constexpr int V = 16 / sizeof(T);
    unsigned grid = cdiv(N, 8);
    if (C % V == 0 && aligned16(out) && aligned16(x) && aligned16(w) && aligned16(b))
        ln_fwd_k<T, V><<<grid, 256, 0, im->stream>>>(out, mean, rstd, x, w, b, N, C);
    else
        ln_fwd_k<T, 1><<<grid, 256, 0, im->stream>>>(out, mean, rstd, x, w, b, N, C);
    zinf_cuda_check_launch(im, "layernorm_fwd");
}

void cu_layernorm_fwd(zinf_backend *be, void *out, float *mean, float *rstd, const void *x,
                      const void *w, const void *b, int64_t N, int C)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || C <= 0) return;
    ZINF_DISPATCH_CDT(im->cdt, ln_fwd_t<T>(im, (T *)out, mean, rstd, (const T *)x, (const T *)w,
                                           (const T *)b, N, C));
}

/* Rows per block in the layernorm backward; the dw/db partials are per chunk of this many rows. */
#define LN_ROWS 64

/* A block owns LN_ROWS rows and every channel: thread tid holds packs tid, tid + NT, ... (MAXP
 * of them) in registers. Per row: block-reduce the two sums, update dx (+=), and accumulate the
 * row's dw/db contributions in registers; at the end, write the chunk's partials. */
template <typename T, int VEC, int MAXP>
__global__ void ln_bwd_k(T *dx, float *part_w, float *part_b, const T *dout, const T *x, const T *w,
                         const float *mean, const float *rstd, int64_t N, int C)
{
    __shared__ float red[2][2][32];
    const int NT = blockDim.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32, nw = NT / 32;
    int64_t r0 = (int64_t)blockIdx.x * LN_ROWS, r1 = r0 + LN_ROWS < N ? r0 + LN_ROWS : N;
    float wv[MAXP][VEC], aw[MAXP][VEC], ab[MAXP][VEC];
#pragma unroll
    for (int p = 0; p < MAXP; p++) {
        int c = (p * NT + tid) * VEC;
        Pack<T, VEC> pw;
        if (c < C) pw = load_pack<T, VEC>(w + c);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            wv[p][k] = c < C ? to_f(pw.v[k]) : 0.0f;
            aw[p][k] = ab[p][k] = 0.0f;
        }
    }
    int par = 0;
    for (int64_t row = r0; row < r1; row++, par ^= 1) {
        float m = mean[row], r = rstd[row];
        float xv[MAXP][VEC], dv[MAXP][VEC];
        float sg = 0.0f, sgn = 0.0f;
#pragma unroll
        for (int p = 0; p < MAXP; p++) {
            int c = (p * NT + tid) * VEC;
            Pack<T, VEC> px, pd;
            if (c < C) {
                px = load_pack<T, VEC>(x + row * C + c);
                pd = load_pack<T, VEC>(dout + row * C + c);
            }
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                xv[p][k] = c < C ? (to_f(px.v[k]) - m) * r : 0.0f; /* the normalized x */
                dv[p][k] = c < C ? to_f(pd.v[k]) : 0.0f;
                float g = dv[p][k] * wv[p][k];
                sg += g;
                sgn += g * xv[p][k];
            }
        }
        sg = warp_sum(sg);
        sgn = warp_sum(sgn);
        if (lane == 0) {
            red[par][0][warp] = sg;
            red[par][1][warp] = sgn;
        }
        __syncthreads();
        sg = 0.0f;
        sgn = 0.0f;
        for (int i = 0; i < nw; i++) { /* fixed order */
            sg += red[par][0][i];
            sgn += red[par][1][i];
        }
        float mg = sg / C, mgn = sgn / C;
#pragma unroll
        for (int p = 0; p < MAXP; p++) {
            int c = (p * NT + tid) * VEC;
            if (c < C) {
                T *dxr = dx + row * C + c;
                Pack<T, VEC> po = load_pack<T, VEC>(dxr);
#pragma unroll
                for (int k = 0; k < VEC; k++)
                    po.v[k] = from_f<T>(to_f(po.v[k]) + (dv[p][k] * wv[p][k] - mg - xv[p][k] * mgn) * r);
                store_pack<T, VEC>(dxr, po);
            }
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                aw[p][k] += dv[p][k] * xv[p][k];
                ab[p][k] += dv[p][k];
            }
        }
    }
#pragma unroll
    for (int p = 0; p < MAXP; p++) {
        int c = (p * NT + tid) * VEC;
        if (c < C) {
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                part_w[blockIdx.x * (int64_t)C + c + k] = aw[p][k];
                part_b[blockIdx.x * (int64_t)C + c + k] = ab[p][k];
            }
        }
    }
}

/* One row of the warp-per-row LayerNorm backward (NP packs of VEC channels per lane): loads x,
 * dout and dx, reduces the row's two sums over the warp, writes dx += ..., and hands each
 * channel's dw/db terms to acc(p, k, dout * xhat, dout). wpack(p) gives lane's weight pack p. */
template <typename T, int VEC, int NP, typename WP, typename ACC>
__device__ __forceinline__ void ln_bwd_row(T *dx, const T *dout, const T *x, int64_t row, int C,
                                           float m, float r, int lane, WP wpack, ACC acc)
{
    Pack<T, VEC> px[NP], pd[NP], po[NP];
#pragma unroll
    for (int p = 0; p < NP; p++) { /* all loads first: NP x 3 in flight */
        int c = (p * 32 + lane) * VEC;
        if (c < C) {
            px[p] = load_pack<T, VEC>(x + row * C + c);
            pd[p] = load_pack<T, VEC>(dout + row * C + c);
            po[p] = load_pack<T, VEC>(dx + row * C + c);
        }
    }
    /* inputs stay packed in registers; normalized x and dout are recomputed per use */
    float sg = 0.0f, sgn = 0.0f;
#pragma unroll
    for (int p = 0; p < NP; p++) {
        int c = (p * 32 + lane) * VEC;
        if (c < C) {
            Pack<T, VEC> pw = wpack(p);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                float g = to_f(pd[p].v[k]) * to_f(pw.v[k]);
                sg += g;
                sgn += g * ((to_f(px[p].v[k]) - m) * r);
            }
        }
    }
    float mg = warp_sum(sg) / C, mgn = warp_sum(sgn) / C;
#pragma unroll
    for (int p = 0; p < NP; p++) {
        int c = (p * 32 + lane) * VEC;
        if (c < C) {
            Pack<T, VEC> pw = wpack(p);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                float xn = (to_f(px[p].v[k]) - m) * r, d = to_f(pd[p].v[k]);
                po[p].v[k] = from_f<T>(to_f(po[p].v[k]) + (d * to_f(pw.v[k]) - mg - xn * mgn) * r);
                acc(p, k, d * xn, d);
            }
            store_pack<T, VEC>(dx + row * C + c, po[p]);
        }
    }
}

/* The fast variant for rows that fit a warp's registers (NP packs per lane): a block of 4 warps
 * owns LN_ROWS rows, each warp every 4th row, with no block barrier per row. Each warp keeps its
 * dw/db contributions in registers; at the end the 4 warps' sums are added in warp order in
 * shared memory (C * 2 floats, dynamic) and written as the chunk's partials. */
#define LN_WARPS 4
template <typename T, int VEC, int NP>
__global__ void __launch_bounds__(LN_WARPS * 32)
ln_bwd_warp_k(T *dx, float *part_w, float *part_b, const T *dout, const T *x, const T *w,
              const float *mean, const float *rstd, int64_t N, int C)
{
    extern __shared__ float acc_sm[]; /* [2][C] */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int64_t r0 = (int64_t)blockIdx.x * LN_ROWS, r1 = r0 + LN_ROWS < N ? r0 + LN_ROWS : N;
    Pack<T, VEC> pw[NP];
    float aw[NP][VEC], ab[NP][VEC];
#pragma unroll
    for (int p = 0; p < NP; p++) {
        int c = (p * 32 + lane) * VEC;
        if (c < C) pw[p] = load_pack<T, VEC>(w + c);
#pragma unroll
        for (int k = 0; k < VEC; k++) aw[p][k] = ab[p][k] = 0.0f;
    }
    for (int64_t row = r0 + warp; row < r1; row += LN_WARPS)
        ln_bwd_row<T, VEC, NP>(dx, dout, x, row, C, mean[row], rstd[row], lane,
                               [&](int p) { return pw[p]; },
                               [&](int p, int k, float a, float b) { aw[p][k] += a; ab[p][k] += b; });
    for (int wi = 0; wi < LN_WARPS; wi++) { /* fixed order: warp 0 stores, 1..3 add */
        if (warp == wi) {
#pragma unroll
            for (int p = 0; p < NP; p++) {
                int c = (p * 32 + lane) * VEC;
                if (c < C)
#pragma unroll
                    for (int k = 0; k < VEC; k++) {
                        acc_sm[c + k] = (wi ? acc_sm[c + k] : 0.0f) + aw[p][k];
                        acc_sm[C + c + k] = (wi ? acc_sm[C + c + k] : 0.0f) + ab[p][k];
                    }
            }
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        part_w[blockIdx.x * (int64_t)C + c] = acc_sm[c];
        part_b[blockIdx.x * (int64_t)C + c] = acc_sm[C + c];
    }
}

/* The wide variant (rows of up to 64 values per lane, GPT-2 1.5B's C = 1600 among them): as
 * ln_bwd_warp_k, but each warp's dw/db sums live in shared memory ([warp][2][NP*VEC][32]: lane-
 * minor, so the per-row updates are conflict-free) instead of registers, which hold the row's
 * x, dout, dx and the weights. The warps' sums are added in warp order at the end. */
template <typename T, int VEC, int NP>
__global__ void __launch_bounds__(LN_WARPS * 32)
ln_bwd_wide_k(T *dx, float *part_w, float *part_b, const T *dout, const T *x, const T *w,
              const float *mean, const float *rstd, int64_t N, int C)
{
    extern __shared__ float wide_sm[];
    constexpr int NV = NP * VEC * 32; /* one warp's dw (or db) slots */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float *aw = wide_sm + (size_t)warp * 2 * NV, *ab = aw + NV;
    for (int i = lane; i < 2 * NV; i += 32) aw[i] = 0.0f;
    __syncwarp();
    int64_t r0 = (int64_t)blockIdx.x * LN_ROWS, r1 = r0 + LN_ROWS < N ? r0 + LN_ROWS : N;
    for (int64_t row = r0 + warp; row < r1; row += LN_WARPS) /* w is re-read per row (L1) */
        ln_bwd_row<T, VEC, NP>(dx, dout, x, row, C, mean[row], rstd[row], lane,
                               [&](int p) { return load_pack<T, VEC>(w + (p * 32 + lane) * VEC); },
                               [&](int p, int k, float a, float b) {
                                   aw[(p * VEC + k) * 32 + lane] += a;
                                   ab[(p * VEC + k) * 32 + lane] += b;
                               });
    __syncthreads();
    for (int i = threadIdx.x; i < NV; i += blockDim.x) { /* fixed order: warp 0, 1, ... */
        int l = i % 32, pk = i / 32, c = ((pk / VEC) * 32 + l) * VEC + pk % VEC;
        if (c >= C) continue;
        float sw = 0.0f, sb = 0.0f;
        for (int wi = 0; wi < LN_WARPS; wi++) {
            sw += wide_sm[(size_t)wi * 2 * NV + i];
            sb += wide_sm[(size_t)wi * 2 * NV + NV + i];
        }
        part_w[blockIdx.x * (int64_t)C + c] = sw;
        part_b[blockIdx.x * (int64_t)C + c] = sb;
    }
}

/* dst[c] += sum over chunks k of part[k][c], for up to two (dst, part) pairs (blockIdx.y).
 * Block = 32 channels x 32 chunk-lanes: lane y sums chunks y, y+32, ..., then the 32 lane sums are
 * added in order y = 0..31 (a fixed order: deterministic). */
template <typename T>
__global__ void __launch_bounds__(1024)
sum_partials_k(T *dst0, const float *part0, T *dst1, const float *part1, int nchunks, int C)
{
    __shared__ float sm[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    T *dst = blockIdx.y ? dst1 : dst0;
    const float *part = blockIdx.y ? part1 : part0;
    float acc = 0.0f;
    if (c < C)
        for (int k = threadIdx.y; k < nchunks; k += 32) acc += part[(int64_t)k * C + c];
    sm[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s = 0.0f;
        for (int y = 0; y < 32; y++) s += sm[y][threadIdx.x];
        dst[c] = from_f<T>(to_f(dst[c]) + s);
    }
}

void cu_add_partials(CudaImpl *im, void *dst, const float *part, int nchunks, int C)
{
    ZINF_DISPATCH_CDT(im->cdt, sum_partials_k<T><<<dim3(cdiv(C, 32), 1), dim3(32, 32), 0, im->stream>>>(
                                   (T *)dst, part, (T *)dst, part, nchunks, C));
}

template <typename T, int VEC>
static bool ln_bwd_launch(CudaImpl *im, T *dx, float *pw, float *pb, const T *dout, const T *x,
                          const T *w, const float *mean, const float *rstd, int64_t N, int C,
                          unsigned nchunks)
{
    int packs = C / VEC;
    int np = (packs + 31) / 32;
    size_t sm = (size_t)2 * C * sizeof(float);
    /* warp per row while a lane's share fits its registers (beyond 32 values they spill) */
#define LN_WARP_CASE(P)                                                                           \
    if constexpr (P * VEC <= 32) {                                                                \
        if (np <= P) {                                                                            \
            ln_bwd_warp_k<T, VEC, P><<<nchunks, LN_WARPS * 32, sm, im->stream>>>(dx, pw, pb, dout, x, w, mean, rstd, N, C); \
            return true;                                                                          \
        }                                                                                         \
    }
    LN_WARP_CASE(1)
    LN_WARP_CASE(2)
    LN_WARP_CASE(3)
    LN_WARP_CASE(4)
    LN_WARP_CASE(6)
    LN_WARP_CASE(8)
#undef LN_WARP_CASE
    /* then warp per row with the dw/db sums in shared memory, up to 64 values per lane (16-bit) */
#define LN_WIDE_CASE(P)                                                                           \
    if (np <= P) {                                                                                \
        size_t wsm = (size_t)LN_WARPS * 2 * P * VEC * 32 * sizeof(float);                         \
        if (cudaFuncSetAttribute(ln_bwd_wide_k<T, VEC, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                 (int)wsm) != cudaSuccess)                                        \
            return false;                                                                         \
        ln_bwd_wide_k<T, VEC, P><<<nchunks, LN_WARPS * 32, wsm, im->stream>>>(dx, pw, pb, dout, x, w, mean, rstd, N, C); \
        return true;                                                                              \
    }
    if constexpr (VEC == 8) {
        LN_WIDE_CASE(6)
        LN_WIDE_CASE(8)
    }
#undef LN_WIDE_CASE
    int nt = packs <= 128 ? 128 : packs <= 512 ? 256 : 512;
    int maxp = (packs + nt - 1) / nt;
#define LN_BWD_CASE(P)                                                                            \
    if (maxp <= P) {                                                                              \
        ln_bwd_k<T, VEC, P><<<nchunks, nt, 0, im->stream>>>(dx, pw, pb, dout, x, w, mean, rstd, N, C); \
        return true;                                                                              \
    }
    LN_BWD_CASE(1)
    LN_BWD_CASE(2)
    LN_BWD_CASE(4)
    LN_BWD_CASE(8)
    LN_BWD_CASE(16)
#undef LN_BWD_CASE
    return false;
}

template <typename T>
static void ln_bwd_t(CudaImpl *im, T *dx, T *dw, T *db, const T *dout, const T *x, const T *w,
                     const float *mean, const float *rstd, int64_t N, int C)
{
    unsigned nchunks = cdiv(N, LN_ROWS);
    float *part = (float *)zinf_cuda_scratch(im, (size_t)2 * nchunks * C * sizeof(float), "layernorm_bwd");
    if (!part) return;
    float *pw = part, *pb = part + (size_t)nchunks * C;
    constexpr int V = 16 / sizeof(T);
    bool ok;
    if (C % V == 0 && aligned16(dx) && aligned16(dout) && aligned16(x) && aligned16(w))
        ok = ln_bwd_launch<T, V>(im, dx, pw, pb, dout, x, w, mean, rstd, N, C, nchunks);
    else
        ok = ln_bwd_launch<T, 1>(im, dx, pw, pb, dout, x, w, mean, rstd, N, C, nchunks);
    if (!ok) {
        zinf_cuda_fail(im, "layernorm_bwd", ZINF_CUDA_ENOTSUP, "layernorm_bwd: C=%d is too large", C);
        return;
    }
    sum_partials_k<T><<<dim3(cdiv(C, 32), 2), dim3(32, 32), 0, im->stream>>>(dw, pw, db, pb, (int)nchunks, C);
    zinf_cuda_check_launch(im, "layernorm_bwd");
}

void cu_layernorm_bwd(zinf_backend *be, void *dx, void *dw, void *db, const void *dout,
                      const void *x, const void *w, const float *mean, const float *rstd, int64_t N,
                      int C)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || C <= 0) return;
    ZINF_DISPATCH_CDT(im->cdt, ln_bwd_t<T>(im, (T *)dx, (T *)dw, (T *)db, (const T *)dout,
                                           (const T *)x, (const T *)w, mean, rstd, N, C));
}

/* ===================================================================== bias */

#define BIAS_ROWS 256 /* rows per chunk of the bias-gradient partials */

/* part[chunk][c] = sum of dout[r][c] over the chunk's rows; block = 32 x 8 threads, each thread
 * a pack of VEC columns, the 8 warps striding the chunk's rows, combined in a fixed order. */
template <typename T, int VEC>
__global__ void bias_part_k(float *part, const T *dout, int64_t N, int OC)
{
    __shared__ float sm[8][32 * VEC];
    int c = (blockIdx.x * 32 + threadIdx.x) * VEC;
    int64_t r0 = (int64_t)blockIdx.y * BIAS_ROWS, r1 = r0 + BIAS_ROWS < N ? r0 + BIAS_ROWS : N;
    float acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) acc[k] = 0.0f;
    if (c < OC)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
            Pack<T, VEC> p = load_pack<T, VEC>(dout + r * OC + c);
#pragma unroll
            for (int k = 0; k < VEC; k++) acc[k] += to_f(p.v[k]);
        }
#pragma unroll
    for (int k = 0; k < VEC; k++) sm[threadIdx.y][threadIdx.x * VEC + k] = acc[k];
    __syncthreads();
    for (int i = threadIdx.y * 32 + threadIdx.x; i < 32 * VEC; i += 256) {
        int cc = blockIdx.x * 32 * VEC + i;
        if (cc >= OC) continue;
        float s = 0.0f;
        for (int y = 0; y < 8; y++) s += sm[y][i];
        part[(int64_t)blockIdx.y * OC + cc] = s;
    }
}

template <typename T> static void bias_grad_t(CudaImpl *im, T *dbias, const T *dout, int64_t N, int OC)
{
    unsigned nchunks = cdiv(N, BIAS_ROWS);
    float *part = (float *)zinf_cuda_scratch(im, (size_t)nchunks * OC * sizeof(float), "bias_grad");
    if (!part) return;
    constexpr int V = 16 / sizeof(T);
    if (OC % V == 0 && aligned16(dout))
        bias_part_k<T, V><<<dim3(cdiv(OC, 32 * V), nchunks), dim3(32, 8), 0, im->stream>>>(part, dout, N, OC);
    else
        bias_part_k<T, 1><<<dim3(cdiv(OC, 32), nchunks), dim3(32, 8), 0, im->stream>>>(part, dout, N, OC);
    sum_partials_k<T><<<dim3(cdiv(OC, 32), 1), dim3(32, 32), 0, im->stream>>>(dbias, part, dbias, part, (int)nchunks, OC);
    zinf_cuda_check_launch(im, "matmul_bwd(dbias)");
}

void cu_bias_grad(CudaImpl *im, void *dbias, const void *dout, int64_t N, int OC)
{
    ZINF_DISPATCH_CDT(im->cdt, bias_grad_t<T>(im, (T *)dbias, (const T *)dout, N, OC));
}

template <typename T> __global__ void add_bias_k(T *out, const T *bias, int64_t N, int OC)
{
    int64_t total = N * OC;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = from_f<T>(to_f(out[i]) + to_f(bias[i % OC]));
}

void cu_add_bias(CudaImpl *im, void *out, const void *bias, int64_t N, int OC)
{
    ZINF_DISPATCH_CDT(im->cdt, add_bias_k<T><<<ew_grid(im, N * OC), EW_THREADS, 0, im->stream>>>(
                                   (T *)out, (const T *)bias, N, OC));
    zinf_cuda_check_launch(im, "matmul_fwd(bias)");
}

/* ===================================================================== cross-entropy */

#define XENT_THREADS 512

struct MaxSum {
    float m, s;
};
/* merge two (max, sum) pairs kept in base 2: sum is of 2^(v - max) */
__device__ __forceinline__ MaxSum ms_combine(MaxSum a, MaxSum b)
{
    float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.0f};
    return {m, a.s * exp2f(a.m - m) + b.s * exp2f(b.m - m)};
}

/* One block per row: an online max / sum of exp over the first V columns, block-combined in a
 * fixed order; the loss; then (dloss != 0) the gradient over all Vp columns, in place (the row
 * is read a second time; keeping it on chip instead (registers or shared memory, 100 KB for
 * GPT-2) allows only one or two rows per SM and measured slower). */
template <typename T, int VEC>
__global__ void __launch_bounds__(XENT_THREADS) xent_k(float *losses, T *logits, const int32_t *tgt,
                                                       int V, int Vp, float dloss)
{
    __shared__ MaxSum sm[XENT_THREADS / 32];
    __shared__ float s_logsum;
    int64_t row = blockIdx.x;
    T *x = logits + row * Vp;
    int t = tgt[row];
    if (t < 0) { /* ignored row */
        if (threadIdx.x == 0) losses[row] = 0.0f;
        if (dloss != 0.0f)
            for (int c = threadIdx.x * VEC; c < Vp; c += XENT_THREADS * VEC) {
                Pack<T, VEC> z;
#pragma unroll
                for (int k = 0; k < VEC; k++) z.v[k] = from_f<T>(0.0f);
                store_pack<T, VEC>(x + c, z);
            }
        return;
    }
    /* base-2 units (m = max * log2 e): one ex2 per element; max merged once per pack */
    const float L2E = 1.4426950408889634f;
    MaxSum a = {-INFINITY, 0.0f};
    for (int c = threadIdx.x * VEC; c < V; c += XENT_THREADS * VEC) {
        Pack<T, VEC> p = load_pack<T, VEC>(x + c);
        float pm = -INFINITY;
#pragma unroll
        for (int k = 0; k < VEC; k++)
            if (c + k < V) pm = fmaxf(pm, to_f(p.v[k]) * L2E);
        float mn = fmaxf(a.m, pm), sum = 0.0f;
        if (mn == -INFINITY) continue; /* only -inf so far: nothing to add */
#pragma unroll
        for (int k = 0; k < VEC; k++)
            if (c + k < V) sum += exp2f(to_f(p.v[k]) * L2E - mn);
        a.s = a.s * exp2f(a.m - mn) + sum;
        a.m = mn;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        MaxSum b = {__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o)};
        a = ms_combine(a, b);
    }
    if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
        MaxSum r = sm[0];
        for (int i = 1; i < XENT_THREADS / 32; i++) r = ms_combine(r, sm[i]);
        float lse2 = r.m + log2f(r.s); /* log2 sum_j 2^(x_j log2 e) */
        s_logsum = lse2;
        losses[row] = (lse2 - to_f(x[t]) * L2E) * 0.6931471805599453f;
    }
    __syncthreads();
    if (dloss == 0.0f) return;
    float lse2 = s_logsum;
    for (int c = threadIdx.x * VEC; c < Vp; c += XENT_THREADS * VEC) {
        Pack<T, VEC> p = load_pack<T, VEC>(x + c);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int j = c + k;
            float g = 0.0f;
            if (j < V) g = (exp2f(to_f(p.v[k]) * L2E - lse2) - (j == t ? 1.0f : 0.0f)) * dloss;
            p.v[k] = from_f<T>(g);
        }
        store_pack<T, VEC>(x + c, p);
    }
}

void cu_xent(zinf_backend *be, float *losses, void *logits, const int32_t *tgt, int64_t N, int V,
             int Vp, float dloss)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0) return;
    ZINF_DISPATCH_CDT(im->cdt, {
        constexpr int VV = 16 / sizeof(T);
        if (Vp % VV == 0 && aligned16(logits))
            xent_k<T, VV><<<(unsigned)N, XENT_THREADS, 0, im->stream>>>(losses, (T *)logits, tgt, V, Vp, dloss);
        else
            xent_k<T, 1><<<(unsigned)N, XENT_THREADS, 0, im->stream>>>(losses, (T *)logits, tgt, V, Vp, dloss);
    });
    zinf_cuda_check_launch(im, "xent");
}

/* ===================================================================== optimizer, vectors */

/* cpu/adamw.h's arithmetic, each operation rounded on its own (the _rn intrinsics: the compiler
 * fuses no multiply-add, whatever the code around it), so every instantiation gives the CPU's
 * bits, and a 16-bit gradient those of its fp32 value */
__device__ __forceinline__ void adamw_one(float &pi, float &mi, float &vi, float g, const zinf_adamw_args &a)
{
    float gi = __fmul_rn(g, a.grad_scale);
    if (!a.adam_w_mode) gi = __fadd_rn(gi, __fmul_rn(a.weight_decay, pi)); /* Adam: L2 penalty in the gradient */
    mi = __fadd_rn(__fmul_rn(a.beta1, mi), __fmul_rn(__fsub_rn(1.0f, a.beta1), gi));
    vi = __fadd_rn(__fmul_rn(a.beta2, vi), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, a.beta2), gi), gi));
    if (a.adam_w_mode) pi = __fmul_rn(pi, __fsub_rn(1.0f, __fmul_rn(a.lr, a.weight_decay))); /* decoupled, first */
    pi = __fsub_rn(pi, __fdiv_rn(__fmul_rn(a.lr, __fdiv_rn(mi, a.bias_correction1)),
                                 __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, a.bias_correction2)), a.eps)));
}

/* Elements [first, n), one per thread per iteration: unaligned arrays and the vector loop's tail.
 * G, the gradient's type: float, or the compute dtype T read as its exact fp32 value. */
template <typename T, typename G>
__global__ void adamw_k(float *p, T *p16, const G *g, float *m, float *v, int64_t first, int64_t n,
                        zinf_adamw_args a)
{
    for (int64_t i = first + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float pi = p[i], mi = m[i], vi = v[i];
        adamw_one(pi, mi, vi, to_f(g[i]), a);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (p16) p16[i] = from_f<T>(pi);
    }
}

/* four gradient elements from 16 bytes (fp32) or 8 (16-bit) */
__device__ __forceinline__ float4 load4(const float *g, int64_t i) { return ((const float4 *)g)[i]; }
template <typename H> __device__ __forceinline__ float4 load4(const H *g, int64_t i)
{
    uint2 r = ((const uint2 *)g)[i];
    H h[4];
    memcpy(h, &r, sizeof r);
    return make_float4(to_f(h[0]), to_f(h[1]), to_f(h[2]), to_f(h[3]));
}

/* Four elements per thread per iteration in 16-byte loads and stores (the same arithmetic per
 * element as adamw_k): AdamW moves 30 bytes per parameter (28 with a 16-bit gradient) and is
 * bound by them */
template <typename T, typename G>
__global__ void adamw4_k(float4 *p, T *p16, const G *g, float4 *m, float4 *v, int64_t n4, zinf_adamw_args a)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        float4 P = p[i], G4 = load4(g, i), M = m[i], V = v[i];
        adamw_one(P.x, M.x, V.x, G4.x, a);
        adamw_one(P.y, M.y, V.y, G4.y, a);
        adamw_one(P.z, M.z, V.z, G4.z, a);
        adamw_one(P.w, M.w, V.w, G4.w, a);
        m[i] = M;
        v[i] = V;
        p[i] = P;
        if (p16) { /* the four in one 8-byte (16-bit) or 16-byte (fp32) store */
            Pack<T, 4> o;
            o.v[0] = from_f<T>(P.x), o.v[1] = from_f<T>(P.y), o.v[2] = from_f<T>(P.z), o.v[3] = from_f<T>(P.w);
            store_pack<T, 4>(p16 + 4 * i, o);
        }
    }
}

template <typename T, typename G>
static void adamw_launch(CudaImpl *im, float *p, void *p16, const G *g, float *m, float *v, int64_t n,
                         const zinf_adamw_args *a)
{
    bool vec = aligned16(p) && aligned16(m) && aligned16(v) && ((uintptr_t)g % (4 * sizeof(G))) == 0 &&
               ((uintptr_t)p16 % (4 * sizeof(T))) == 0;
    int64_t n4 = vec ? n / 4 : 0;
    if (n4 > 0)
        adamw4_k<T, G><<<ew_grid(im, n4), EW_THREADS, 0, im->stream>>>((float4 *)p, (T *)p16, g, (float4 *)m,
                                                                       (float4 *)v, n4, *a);
    if (4 * n4 < n)
        adamw_k<T, G><<<ew_grid(im, n - 4 * n4), EW_THREADS, 0, im->stream>>>(p, (T *)p16, g, m, v, 4 * n4, n, *a);
}

void cu_adamw(zinf_backend *be, float *p, void *p16, const void *g, zinf_dtype gdt, float *m, float *v, int64_t n,
              const zinf_adamw_args *a)
{
    CudaImpl *im = impl_of(be);
    if (n <= 0) return;
    if (gdt != ZINF_F32 && gdt != im->cdt) {
        zinf_cuda_fail(im, "adamw", ZINF_CUDA_EINVAL, "adamw: a gradient of dtype %d in a backend computing in %d",
                       (int)gdt, (int)im->cdt);
        return;
    }
    ZINF_DISPATCH_CDT(im->cdt, {
        if (gdt == ZINF_F32)
            adamw_launch<T, float>(im, p, p16, (const float *)g, m, v, n, a);
        else
            adamw_launch<T, T>(im, p, p16, (const T *)g, m, v, n, a);
    });
    zinf_cuda_check_launch(im, "adamw");
}

#define SUMSQ_BLOCKS 256 /* fixed, so the summation order depends on n only */

/* Thread t of the grid takes the chunks of 8 elements t, t + G, t + 2G, ... (G the grid's threads),
 * each element of a chunk in order: whole chunks of an aligned array in 16- or 32-byte loads, two
 * at a time, the rest one element at a time, the same order either way, so the sum depends on n
 * alone (and a 16-bit array sums to the bits of its fp32 conversion). */
#define SUMSQ_CHUNK 8
template <typename X> __device__ __forceinline__ void sumsq_add(double &s, const Pack<X, SUMSQ_CHUNK> &p)
{
#pragma unroll
    for (int k = 0; k < SUMSQ_CHUNK; k++) {
        double v = to_f(p.v[k]);
        s += v * v;
    }
}
template <typename X>
__global__ void sumsq_part_k(double *part, const X *x, int64_t n, bool vec)
{
    __shared__ double sm[EW_THREADS / 32];
    double s = 0.0;
    const int64_t G = (int64_t)SUMSQ_BLOCKS * EW_THREADS, full = vec ? n / SUMSQ_CHUNK : 0,
                  chunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; q + G < full; q += 2 * G) { /* two loads in flight, added in order */
        Pack<X, SUMSQ_CHUNK> a = load_pack<X, SUMSQ_CHUNK>(x + q * SUMSQ_CHUNK),
                             b = load_pack<X, SUMSQ_CHUNK>(x + (q + G) * SUMSQ_CHUNK);
        sumsq_add(s, a);
        sumsq_add(s, b);
    }
    for (; q < full; q += G) sumsq_add(s, load_pack<X, SUMSQ_CHUNK>(x + q * SUMSQ_CHUNK));
    for (; q < chunks; q += G)
        for (int64_t i = q * SUMSQ_CHUNK; i < n && i < (q + 1) * SUMSQ_CHUNK; i++) {
            double v = to_f(x[i]);
            s += v * v;
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int i = 0; i < EW_THREADS / 32; i++) t += sm[i];
        part[blockIdx.x] = t;
    }
}

/* out = sum over arrays j < k of (sum of array j's SUMSQ_BLOCKS partials, in order), in order */
__global__ void sumsq_final_k(double *out, const double *part, int k)
{
    double t = 0.0;
    for (int j = 0; j < k; j++) {
        double tj = 0.0;
        for (int i = 0; i < SUMSQ_BLOCKS; i++) tj += part[(int64_t)j * SUMSQ_BLOCKS + i];
        t += tj;
    }
    *out = t;
}

double cu_sumsq(zinf_backend *be, int k, const void *const *x, const int64_t *n, zinf_dtype xdt)
{
    CudaImpl *im = impl_of(be);
    if (k <= 0) return 0.0;
    if (xdt != ZINF_F32 && xdt != im->cdt) {
        zinf_cuda_fail(im, "sumsq", ZINF_CUDA_EINVAL, "sumsq: arrays of dtype %d in a backend computing in %d",
                       (int)xdt, (int)im->cdt);
        return NAN;
    }
    double *part = (double *)zinf_cuda_scratch(im, ((size_t)k * SUMSQ_BLOCKS + 1) * sizeof(double), "sumsq");
    if (!part) return NAN;
    for (int j = 0; j < k; j++) {
        double *pj = part + (size_t)j * SUMSQ_BLOCKS;
        int64_t nj = n[j] > 0 ? n[j] : 0;
        if (xdt == ZINF_F32)
            sumsq_part_k<float><<<SUMSQ_BLOCKS, EW_THREADS, 0, im->stream>>>(pj, (const float *)x[j], nj,
                                                                             ((uintptr_t)x[j] & 31u) == 0);
        else
            ZINF_DISPATCH_CDT(im->cdt, {
                sumsq_part_k<T><<<SUMSQ_BLOCKS, EW_THREADS, 0, im->stream>>>(
                    pj, (const T *)x[j], nj, ((uintptr_t)x[j] % (SUMSQ_CHUNK * sizeof(T))) == 0);
            });
    }
    double *total = part + (size_t)k * SUMSQ_BLOCKS;
    sumsq_final_k<<<1, 1, 0, im->stream>>>(total, part, k);
    zinf_cuda_check_launch(im, "sumsq");
    cudaError_t e = cudaMemcpyAsync(im->host_sum, total, sizeof(double), cudaMemcpyDeviceToHost, im->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(im->stream);
    if (e != cudaSuccess) {
        zinf_cuda_fail(im, "sumsq", ZINF_CUDA_EIO, "sumsq: %s", cudaGetErrorString(e));
        return NAN;
    }
    return *im->host_sum;
}

__global__ void scale_k(float *x, int64_t n, float s)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

void cu_scale(zinf_backend *be, float *x, int64_t n, float s)
{
    CudaImpl *im = impl_of(be);
    if (n <= 0) return;
    scale_k<<<ew_grid(im, n), EW_THREADS, 0, im->stream>>>(x, n, s);
    zinf_cuda_check_launch(im, "scale");
}

__global__ void axpy_k(float *y, const float *x, int64_t n, float a)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += a * x[i];
}

void cu_axpy(zinf_backend *be, float *y, const float *x, int64_t n, float a)
{
    CudaImpl *im = impl_of(be);
    if (n <= 0) return;
    axpy_k<<<ew_grid(im, n), EW_THREADS, 0, im->stream>>>(y, x, n, a);
    zinf_cuda_check_launch(im, "axpy");
}

/* y (fp32) += a * x with x in the compute dtype: gradients into fp32 accumulators */
template <typename T> __global__ void acc_f32_k(float *y, const T *x, int64_t n, float a)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += a * to_f(x[i]);
}

void cu_acc_f32(zinf_backend *be, float *y, const void *x, int64_t n, float a)
{
    CudaImpl *im = impl_of(be);
    if (n <= 0) return;
    ZINF_DISPATCH_CDT(im->cdt, acc_f32_k<T><<<ew_grid(im, n), EW_THREADS, 0, im->stream>>>(y, (const T *)x, n, a));
    zinf_cuda_check_launch(im, "acc_f32");
}

/* y = a * x in the compute dtype, rounded once */
template <typename T> __global__ void scale_to_k(T *y, const T *x, int64_t n, float a)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = from_f<T>(a * to_f(x[i]));
}

void cu_scale_to(zinf_backend *be, void *y, const void *x, int64_t n, float a)
{
    CudaImpl *im = impl_of(be);
    if (n <= 0) return;
    ZINF_DISPATCH_CDT(im->cdt, scale_to_k<T><<<ew_grid(im, n), EW_THREADS, 0, im->stream>>>((T *)y, (const T *)x, n, a));
    zinf_cuda_check_launch(im, "scale_to");
}

template <typename D, typename S> __global__ void convert_k(D *dst, const S *src, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = from_f<D>(to_f(src[i]));
}

void cu_to_f32(zinf_backend *be, float *dst, const void *src, int64_t n)
{
    CudaImpl *im = impl_of(be);
    if (n <= 0 || (void *)dst == src) return;
    if (im->cdt == ZINF_F32) {
        cudaMemcpyAsync(dst, src, (size_t)n * 4, cudaMemcpyDefault, im->stream);
    } else {
        ZINF_DISPATCH_CDT(im->cdt, convert_k<float, T><<<ew_grid(im, n), EW_THREADS, 0, im->stream>>>(
                                       dst, (const T *)src, n));
    }
    zinf_cuda_check_launch(im, "to_f32");
}

void cu_from_f32(zinf_backend *be, void *dst, const float *src, int64_t n)
{
    CudaImpl *im = impl_of(be);
    if (n <= 0 || dst == (const void *)src) return;
    if (im->cdt == ZINF_F32) {
        cudaMemcpyAsync(dst, src, (size_t)n * 4, cudaMemcpyDefault, im->stream);
    } else {
        ZINF_DISPATCH_CDT(im->cdt, convert_k<T, float><<<ew_grid(im, n), EW_THREADS, 0, im->stream>>>(
                                       (T *)dst, src, n));
    }
    zinf_cuda_check_launch(im, "from_f32");
}
