/* swiglu: out[N,F] = silu(gate) * up over gu rows packing gate|up (kernels.h), and its backward
 * (dgu overwritten). Elementwise and bound by bytes: one thread per VEC columns of a row, 16-byte
 * packs when F and the pointers allow them. silu(g) = g * sigmoid(g), fp32 arithmetic. */
#include "cuda_backend.h"
#include "cuda_common.h"

__device__ __forceinline__ float sigmoid_f(float g) { return 1.0f / (1.0f + expf(-g)); }

template <typename T, int VEC> __global__ void swiglu_fwd_k(T *out, const T *gu, int64_t N, int F)
{
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, per = F / VEC;
    if (id >= N * per) return;
    const int64_t n = id / per;
    const int f = (int)(id % per) * VEC;
    const Pack<T, VEC> g = load_pack<T, VEC>(gu + n * 2 * F + f), u = load_pack<T, VEC>(gu + n * 2 * F + F + f);
    Pack<T, VEC> o;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        const float gv = to_f(g.v[k]);
        o.v[k] = from_f<T>(gv * sigmoid_f(gv) * to_f(u.v[k]));
    }
    store_pack<T, VEC>(out + n * F + f, o);
}

/* dgate = dout u sig(g) (1 + g (1 - sig(g))), dup = dout silu(g) */
template <typename T, int VEC> __global__ void swiglu_bwd_k(T *dgu, const T *dout, const T *gu, int64_t N, int F)
{
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, per = F / VEC;
    if (id >= N * per) return;
    const int64_t n = id / per;
    const int f = (int)(id % per) * VEC;
    const Pack<T, VEC> g = load_pack<T, VEC>(gu + n * 2 * F + f), u = load_pack<T, VEC>(gu + n * 2 * F + F + f),
                       d = load_pack<T, VEC>(dout + n * F + f);
    Pack<T, VEC> dg, du;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        const float gv = to_f(g.v[k]), sg = sigmoid_f(gv), dv = to_f(d.v[k]);
        dg.v[k] = from_f<T>(dv * to_f(u.v[k]) * sg * (1.0f + gv * (1.0f - sg)));
        du.v[k] = from_f<T>(dv * gv * sg);
    }
    store_pack<T, VEC>(dgu + n * 2 * F + f, dg);
    store_pack<T, VEC>(dgu + n * 2 * F + F + f, du);
}

template <typename T> static bool sw_vec(int F, const void *a, const void *b, const void *c)
{
    return F % (16 / sizeof(T)) == 0 && aligned16(a) && aligned16(b) && (!c || aligned16(c));
}

void cu_swiglu_fwd(zinf_backend *be, void *out, const void *gu, int64_t N, int F)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || F <= 0) return;
    ZINF_DISPATCH_CDT(im->cdt, {
        constexpr int V = 16 / sizeof(T);
        if (sw_vec<T>(F, out, gu, NULL))
            swiglu_fwd_k<T, V><<<cdiv(N * (F / V), 256), 256, 0, im->stream>>>((T *)out, (const T *)gu, N, F);
        else
            swiglu_fwd_k<T, 1><<<cdiv(N * F, 256), 256, 0, im->stream>>>((T *)out, (const T *)gu, N, F);
    });
    zinf_cuda_check_launch(im, "swiglu_fwd");
}

void cu_swiglu_bwd(zinf_backend *be, void *dgu, const void *dout, const void *gu, int64_t N, int F)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || F <= 0) return;
    ZINF_DISPATCH_CDT(im->cdt, {
        constexpr int V = 16 / sizeof(T);
        if (sw_vec<T>(F, dgu, dout, gu))
            swiglu_bwd_k<T, V><<<cdiv(N * (F / V), 256), 256, 0, im->stream>>>((T *)dgu, (const T *)dout,
                                                                              (const T *)gu, N, F);
        else
            swiglu_bwd_k<T, 1><<<cdiv(N * F, 256), 256, 0, im->stream>>>((T *)dgu, (const T *)dout, (const T *)gu, N,
                                                                        F);
    });
    zinf_cuda_check_launch(im, "swiglu_bwd");
}
