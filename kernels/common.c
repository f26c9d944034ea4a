/* Backend-independent helpers, and the CUDA entry points of a build without CUDA. */
#include "kernels.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "zinf-build.h" /* autoconf: ZINF_HAVE_CUDA */
#include "cuda/cuda_backend.h"

size_t zinf_dtype_size(zinf_dtype dt) { return dt == ZINF_F32 ? 4 : 2; }

static size_t attn_ws_of(int64_t n, int64_t T, int64_t NH, int64_t NKV, int64_t hs)
{
    size_t t64 = (size_t)(T + 63) / 64 * 64;
    return (size_t)n * NH * (t64 * t64 * 2 + (NH != NKV ? (size_t)T * hs * 4 : 0));
}

int64_t zinf_attn_ws_samples(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs, size_t es)
{
    /* cuDNN's graphs are built for 16-bit compute and head sizes 64 and 128 only (attention_cudnn.cu) */
    if (B < 1 || es != 2 || (hs != 64 && hs != 128) || attn_ws_of(1, T, NH, NKV, hs) > ZINF_ATTN_WS_BUDGET)
        return 0;
    int64_t most = 1;
    while (most < B && attn_ws_of(most + 1, T, NH, NKV, hs) <= ZINF_ATTN_WS_BUDGET) most++;
    int64_t calls = (B + most - 1) / most;
    /* a call after the first starts at sample b0, its lse rows at b0 NH T floats, which cuDNN
     * needs 16-byte aligned as the first call's are */
    if (calls > 1 && NH * T % 4) return 0;
    return (B + calls - 1) / calls; /* calls of equal size, the last one no larger */
}

size_t zinf_attn_ws_bytes(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs, size_t es)
{
    return attn_ws_of(zinf_attn_ws_samples(B, T, NH, NKV, hs, es), T, NH, NKV, hs);
}

const char *zinf_dtype_name(zinf_dtype dt)
{
    switch (dt) {
    case ZINF_F32: return "fp32";
    case ZINF_BF16: return "bf16";
    case ZINF_F16: return "fp16";
    }
    return "?";
}

uint16_t zinf_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* carries into the exponent, up to inf, as it should */
    return (uint16_t)(u >> 16);
}

float zinf_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t zinf_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (ax >= 0x38800000u) { /* normal half: rebias the exponent, round off 13 bits */
        uint32_t h = (ax >> 13) - ((127u - 15u) << 10), rem = ax & 0x1fffu;
        h += rem > 0x1000u || (rem == 0x1000u && (h & 1u)); /* a carry moves up the exponent */
        return (uint16_t)(sign | h);
    }
    if (ax <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25, half the smallest subnormal: 0 */
    /* half subnormal: the value in units of 2^-24 is mant >> shift, rounded (1 may carry to the
     * smallest normal, 0x400, which is right) */
    uint32_t e = ax >> 23, mant = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e; /* 14..24 */
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    h += rem > half || (rem == half && (h & 1u));
    return (uint16_t)(sign | h);
}

float zinf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 31) u = sign | 0x7f800000u | (m << 13); /* inf, or NaN with its payload */
    else if (e) u = sign | ((e + 127u - 15u) << 23) | (m << 13);
    else if (!m) u = sign;
    else { /* subnormal: normalise */
        uint32_t s = 0;
        while (!(m & 0x400u)) m <<= 1, s++;
        u = sign | ((127u - 15u + 1u - s) << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#ifdef ZINF_HAVE_CUDA
int zinf_backend_cuda_built(void) { return 1; }
#else
int zinf_backend_cuda_built(void) { return 0; }
const char *zinf_backend_cuda_error(void) { return "this build has no CUDA backend"; }
int zinf_cuda_attn_hopper = ZINF_ATTN_HOPPER_ALL; /* read by nothing without the CUDA backend */
/* cuDNN's switches and counters (cuda_backend.h), which test_backend_ops names: without the CUDA
 * backend it skips before reading them, but it must link */
int zinf_cuda_attn_cudnn = 0;
int zinf_cuda_attn_cudnn_acc = 0;
long zinf_cuda_attn_cudnn_runs = 0;
int zinf_cuda_cudnn_version(void) { return 0; }
zinf_event *zinf_cuda_event_new_timed(zinf_backend *be);
double zinf_cuda_elapsed_ms(zinf_event *a, zinf_event *b);
zinf_event *zinf_cuda_event_new_timed(zinf_backend *be)
{
    (void)be;
    return NULL;
}
double zinf_cuda_elapsed_ms(zinf_event *a, zinf_event *b)
{
    (void)a; (void)b;
    return -1.0;
}
int zinf_backend_cuda_init(zinf_backend *be, int device, zinf_dtype cdt)
{
    (void)be; (void)device; (void)cdt;
    return -1004; /* ZINF_ENOTSUP; the caller words the message */
}
void zinf_backend_cuda_free(zinf_backend *be) { (void)be; }
int zinf_backend_cuda_count(void) { return 0; }
int zinf_dcoll_id_get(zinf_backend *be, unsigned char id[ZINF_DCOLL_ID_BYTES])
{
    (void)be; (void)id;
    return -1004;
}
int zinf_dcoll_init(zinf_backend *be, const unsigned char id[ZINF_DCOLL_ID_BYTES], int rank, int size,
                    double timeout_s, zinf_dcoll *out)
{
    (void)be; (void)id; (void)rank; (void)size; (void)timeout_s; (void)out;
    return -1004;
}
#endif
