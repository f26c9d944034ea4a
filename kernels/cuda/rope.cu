/* rope: HF's rotate_half rotary embedding in place (kernels.h). One thread per (row, pair i):
 * it computes the angle pos * inv_freq[i] in fp32, its cosine and sine once (full-precision
 * sincosf: angles reach 1e5 radians at long contexts, where the fast intrinsics are wrong), and
 * rotates pair (i, i + hs/2) of each of the row's nh heads. Consecutive threads take consecutive
 * i, so each head's halves are read and written coalesced. */
#include "cuda_backend.h"
#include "cuda_common.h"

template <typename T>
__global__ void rope_k(T *x, int64_t N, int nh, int hs, int64_t stride, const int32_t *pos, int T_,
                       const float *inv_freq, int inverse)
{
    const int half = hs / 2;
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= N * half) return;
    const int64_t n = id / half;
    const int i = (int)(id % half);
    const float p = (float)(pos ? pos[n] : (int32_t)(n % T_));
    float sn, c;
    sincosf(p * inv_freq[i], &sn, &c);
    if (inverse) sn = -sn;
    T *r = x + n * stride + i;
    for (int h = 0; h < nh; h++, r += hs) {
        const float a = to_f(r[0]), b = to_f(r[half]);
        r[0] = from_f<T>(a * c - b * sn);
        r[half] = from_f<T>(b * c + a * sn);
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
    const int64_t n = N * (hs / 2);
    ZINF_DISPATCH_CDT(im->cdt, rope_k<T><<<cdiv(n, 256), 256, 0, im->stream>>>((T *)x, N, nh, hs, stride, pos, T_,
                                                                              inv_freq, inverse));
    zinf_cuda_check_launch(im, "rope");
}
