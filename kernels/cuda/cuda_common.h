/* cuda_common: what the CUDA backend's translation units share. The backend state (CudaImpl),
 * error recording, scratch memory, and the compute-type traits every templated kernel uses
 * (T in {float, __nv_bfloat16, __half}, fp32 arithmetic always). Internal to kernels/cuda/. */
#ifndef ZINF_CUDA_COMMON_H
#define ZINF_CUDA_COMMON_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <stdint.h>

extern "C" {
#include "kernels.h"
}

#define ZINF_CUDA_EINVAL (-1000)
#define ZINF_CUDA_EIO (-1001)
#define ZINF_CUDA_ENOMEM (-1002)
#define ZINF_CUDA_ENOTSUP (-1004)

struct MatmulCache; /* matmul.cu */

/* The backend's private state (be->impl). */
struct CudaImpl {
    int device;
    zinf_dtype cdt;
    int num_sms;
    int cc; /* compute capability, major * 10 + minor */
    cudaStream_t stream; /* the compute stream: every operation runs on it */
    cublasLtHandle_t lt;
    void *lt_ws; /* cuBLASLt workspace */
    size_t lt_ws_bytes;
    void *scratch; /* growable device scratch, used by one operation at a time (stream-ordered) */
    size_t scratch_bytes;
    double *host_sum; /* pinned: sumsq's result comes back through it */
    MatmulCache *mm;  /* cuBLASLt descriptors and algorithms per shape */
    void *dnn;        /* cuDNN's handle and attention plans per shape (attention_cudnn.cu) */
    /* the first failure since the last sync: a void operation records it here and sync() or
     * the next int-returning call reports it */
    int err;
    const char *err_op;
};

static inline CudaImpl *impl_of(zinf_backend *be) { return (CudaImpl *)be->impl; }

/* Record a failure (first one wins until reported); writes the global message too. Returns the
 * negative status to hand back. Defined in backend.cu. */
int zinf_cuda_fail(CudaImpl *im, const char *op, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* After a kernel launch / library call: record cudaGetLastError() under op name. Cheap (host
 * side only, no synchronization). */
static inline void zinf_cuda_check_launch(CudaImpl *im, const char *op)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        zinf_cuda_fail(im, op, ZINF_CUDA_EIO, "%s: %s (%s)", op, cudaGetErrorString(e),
                       cudaGetErrorName(e));
}
/* A device scratch buffer of at least bytes (grown on demand; NULL + recorded error on failure).
 * Valid until the next call; only for use by work queued on the compute stream. */
void *zinf_cuda_scratch(CudaImpl *im, size_t bytes, const char *op);

/* Attention through cuDNN (attention_cudnn.cu): false when it does not apply or cuDNN refuses the
 * shape (the caller runs zinf's kernels); true when it ran or its failure is recorded. Rows of
 * one sample each only (no zinf_attn_rows). */
bool zinf_cudnn_attn_fwd(CudaImpl *im, void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV,
                         int hs);
bool zinf_cudnn_attn_bwd(CudaImpl *im, void *dqkv, const void *dout, const void *qkv, const void *out,
                         const float *lse, int B, int T, int NH, int NKV, int hs);
void zinf_cudnn_free(CudaImpl *im);

/* -------------------------------------------------------------------- compute-type traits */

template <typename T> struct TypeOf;
template <> struct TypeOf<float> {
    static constexpr zinf_dtype dt = ZINF_F32;
};
template <> struct TypeOf<__nv_bfloat16> {
    static constexpr zinf_dtype dt = ZINF_BF16;
};
template <> struct TypeOf<__half> {
    static constexpr zinf_dtype dt = ZINF_F16;
};

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }

/* N values of T in one aligned vector access (N * sizeof(T) = 16 bytes for the fast paths). */
template <typename T, int N> struct alignas(sizeof(T) * N) Pack {
    T v[N];
};

template <typename T, int N> __device__ __forceinline__ Pack<T, N> load_pack(const T *p)
{
    return *reinterpret_cast<const Pack<T, N> *>(p);
}
template <typename T, int N> __device__ __forceinline__ void store_pack(T *p, const Pack<T, N> &v)
{
    *reinterpret_cast<Pack<T, N> *>(p) = v;
}

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Run F.template operator()<T>() for the backend's compute type. */
#define ZINF_DISPATCH_CDT(cdt, ...)                                                               \
    do {                                                                                          \
        switch (cdt) {                                                                            \
        case ZINF_F32: { typedef float T; __VA_ARGS__; } break;                                   \
        case ZINF_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;                          \
        case ZINF_F16: { typedef __half T; __VA_ARGS__; } break;                                  \
        }                                                                                         \
    } while (0)

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static inline unsigned cdiv(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

/* ---- per-file entry points, called by backend.cu's dispatch table ---- */
/* ops.cu */
void cu_encoder_fwd(zinf_backend *be, void *out, const int32_t *tok, const void *wte,
                    const void *wpe, int B, int T, int C);
void cu_encoder_bwd(zinf_backend *be, void *dwte, void *dwpe, const void *dout, const int32_t *tok,
                    int B, int T, int C);
void cu_copy_rows(zinf_backend *be, void *dst, int64_t ld_dst, const void *src, int64_t ld_src, int64_t rows,
                  int64_t cols);
void cu_layernorm_fwd(zinf_backend *be, void *out, float *mean, float *rstd, const void *x,
                      const void *w, const void *b, int64_t N, int C);
void cu_layernorm_bwd(zinf_backend *be, void *dx, void *dw, void *db, const void *dout,
                      const void *x, const void *w, const float *mean, const float *rstd, int64_t N,
                      int C);
void cu_gelu_fwd(zinf_backend *be, void *out, const void *x, int64_t n);
void cu_gelu_bwd(zinf_backend *be, void *dx, const void *x, const void *dout, int64_t n);
void cu_add(zinf_backend *be, void *out, const void *a, const void *b, int64_t n);
void cu_xent(zinf_backend *be, float *losses, void *logits, const int32_t *tgt, int64_t N, int V,
             int Vp, float dloss);
void cu_adamw(zinf_backend *be, float *p, void *p16, const void *g, zinf_dtype gdt, float *m, float *v, int64_t n,
              const zinf_adamw_args *a);
double cu_sumsq(zinf_backend *be, int k, const void *const *x, const int64_t *n, zinf_dtype xdt);
void cu_scale(zinf_backend *be, float *x, int64_t n, float s);
void cu_axpy(zinf_backend *be, float *y, const float *x, int64_t n, float a);
void cu_acc_f32(zinf_backend *be, float *y, const void *x, int64_t n, float a);
void cu_scale_to(zinf_backend *be, void *y, const void *x, int64_t n, float a);
void cu_to_f32(zinf_backend *be, float *dst, const void *src, int64_t n);
void cu_from_f32(zinf_backend *be, void *dst, const float *src, int64_t n);
/* column sums of a [N, OC] matrix in T, added into dbias[OC] (T); deterministic. ops.cu */
void cu_bias_grad(CudaImpl *im, void *dbias, const void *dout, int64_t N, int OC);
/* dst[c] (T) += the sum over chunks k of part[k * C + c], in a fixed order (the column reductions'
 * second pass: LayerNorm's and RMSNorm's dw). ops.cu */
void cu_add_partials(CudaImpl *im, void *dst, const float *part, int nchunks, int C);
/* out[n, :] += bias (a fallback when cuBLASLt's bias epilogue cannot be used). ops.cu */
void cu_add_bias(CudaImpl *im, void *out, const void *bias, int64_t N, int OC);
/* matmul.cu */
int cu_matmul_init(CudaImpl *im);
void cu_matmul_free(CudaImpl *im);
void cu_matmul_fwd_res(zinf_backend *be, void *out, const void *x, const void *w, const void *bias,
                       const void *res, int64_t N, int K, int OC);
void cu_matmul_fwd(zinf_backend *be, void *out, const void *x, const void *w, const void *bias,
                   int64_t N, int K, int OC);
void cu_matmul_bwd(zinf_backend *be, void *dx, void *dw, void *dbias, const void *dout,
                   const void *x, const void *w, int64_t N, int K, int OC, int acc);
void cu_matmul_gelu_fwd(zinf_backend *be, void *out, void *pre, const void *x, const void *w,
                        const void *bias, int64_t N, int K, int OC);
void cu_matmul_dgelu_bwd(zinf_backend *be, void *dpre, const void *dout, const void *w,
                         const void *pre, int64_t N, int K, int OC);
/* attention.cu */
void cu_attention_fwd(zinf_backend *be, void *out, float *lse, const void *qkv, int B, int T, int NH,
                      int NKV, int hs, const zinf_attn_rows *rows);
void cu_attention_bwd(zinf_backend *be, void *dqkv, const void *dout, const void *qkv,
                      const void *out, const float *lse, int B, int T, int NH, int NKV, int hs,
                      const zinf_attn_rows *rows);
/* rmsnorm.cu */
void cu_rmsnorm_fwd(zinf_backend *be, void *out, float *rstd, const void *x, const void *w, int64_t N,
                    int heads, int C, int64_t ld, float eps);
void cu_rmsnorm_bwd(zinf_backend *be, void *dx, void *dw, const void *dout, const void *x, const void *w,
                    const float *rstd, int64_t N, int heads, int C, int64_t ld);
/* rope.cu */
void cu_rope(zinf_backend *be, void *x, int64_t N, int nh, int hs, int64_t stride, const int32_t *pos,
             int T, const float *inv_freq, int inverse);
/* swiglu.cu */
void cu_swiglu_fwd(zinf_backend *be, void *out, const void *gu, int64_t N, int F);
void cu_swiglu_bwd(zinf_backend *be, void *dgu, const void *dout, const void *gu, int64_t N, int F);

#endif
