/* rope: HF's rotate_half rotary embedding in place (kernels.h). One thread per (row, pair i):
 * it computes the angle pos * inv_freq[i] in fp32, its cosine and sine once (full-precision
 * sincosf: angles reach 1e5 radians at long contexts, where the fast intrinsics are wrong), and
 * rotates pair (i, i + hs/2) of each of the row's nh heads. Consecutive threads take consecutive
 * i, so each head's halves are read and written coalesced. */
#include "cuda_backend.h"
#include "cuda_common.h"

/* P pairs a thread (i .. i+P-1 of a row, P = 2 in one access each where the layout allows), each
 * pair's arithmetic the same whatever P */
template <typename T, int P>
__global__ void rope_k(T *x, int64_t N, int nh, int hs, int64_t stride, const int32_t *pos, int T_,
                       const float *inv_freq, int inverse)
{
    const int half = hs / 2, per = half / P;
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= N * per) return;
    const int64_t n = id / per;
    const int i = (int)(id % per) * P;
    const float p = (float)(pos ? pos[n] : (int32_t)(n % T_));
    float sn[P], c[P];
#pragma unroll
    for (int k = 0; k < P; k++) {
        sincosf(p * inv_freq[i + k], &sn[k], &c[k]);
        if (inverse) sn[k] = -sn[k];
    }
    T *r = x + n * stride + i;
    for (int h = 0; h < nh; h++, r += hs) {
        Pack<T, P> lo = load_pack<T, P>(r), hi = load_pack<T, P>(r + half);
#pragma unroll
        for (int k = 0; k < P; k++) {
            const float a = to_f(lo.v[k]), b = to_f(hi.v[k]);
            lo.v[k] = from_f<T>(a * c[k] - b * sn[k]);
            hi.v[k] = from_f<T>(b * c[k] + a * sn[k]);
        }
        store_pack<T, P>(r, lo);
        store_pack<T, P>(r + half, hi);
    }
}

void cu_rope(zinf_backend *be, void *x, int64_t N, int nh, int hs, int64_t stride, const int32_t *pos, int T_,
             const float *inv_freq, int inverse)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || nh <= 0 || hs < 2) return;
    if (hs % 2 || (!pos && T_ <= 0)) {
        zinf_cuda_fail(im, "rope", ZINF_CUDA_EINVAL, "rope: head size %d must be even, T %d positive", hs, T_);
        return;
    }
    ZINF_DISPATCH_CDT(im->cdt, {
        /* two pairs a thread: an even half, and every row and head start on a two-element boundary */
        if ((hs / 2) % 2 == 0 && stride % 2 == 0 && ((uintptr_t)x % (2 * sizeof(T))) == 0) {
            const int64_t n = N * (hs / 4);
            rope_k<T, 2><<<cdiv(n, 256), 256, 0, im->stream>>>((T *)x, N, nh, hs, stride, pos, T_, inv_freq, inverse);
        } else {
            const int64_t n = N * (hs / 2);
            rope_k<T, 1><<<cdiv(n, 256), 256, 0, im->stream>>>((T *)x, N, nh, hs, stride, pos, T_, inv_freq, inverse);
        }
    });
    zinf_cuda_check_launch(im, "rope");
}
