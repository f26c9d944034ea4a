/* Backend-independent helpers, and the CUDA entry points of a build without CUDA. */
#include "kernels.h"

#include <stddef.h>

#include "zinf-build.h" /* autoconf: ZINF_HAVE_CUDA */
#include "cuda/cuda_backend.h"

size_t zinf_dtype_size(zinf_dtype dt) { return dt == ZINF_F32 ? 4 : 2; }

const char *zinf_dtype_name(zinf_dtype dt)
{
    switch (dt) {
    case ZINF_F32: return "fp32";
    case ZINF_BF16: return "bf16";
    case ZINF_F16: return "fp16";
    }
    return "?";
}

#ifdef ZINF_HAVE_CUDA
int zinf_backend_cuda_built(void) { return 1; }
#else
int zinf_backend_cuda_built(void) { return 0; }
const char *zinf_backend_cuda_error(void) { return "this build has no CUDA backend"; }
int zinf_cuda_attn_hopper = ZINF_ATTN_HOPPER_ALL; /* read by nothing without the CUDA backend */
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
