/* backend: the CUDA backend's memory, streams, events, error reporting and its zinf_backend table.
 * The operations live in ops.cu (elementwise, norms, encoder, cross-entropy, optimizer),
 * matmul.cu (cuBLASLt) and attention.cu (flash attention).
 *
 * Errors: int-returning functions return 0 or a negative status; void operations record their
 * first failure in the CudaImpl, and the next sync()/stream_sync()/copy() returns it. The message
 * (which operation, which CUDA error) is read with zinf_backend_cuda_error(). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PIN_ALIGN ((size_t)2 << 20) /* 2 MiB: one huge page */

#include "cuda_backend.h"
#include "cuda_common.h"

static char g_errmsg[512];

extern "C" const char *zinf_backend_cuda_error(void) { return g_errmsg; }

int zinf_cuda_fail(CudaImpl *im, const char *op, int status, const char *fmt, ...)
{
    if (im && im->err) return im->err; /* keep the first failure: later ones are often fallout */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    if (im) {
        im->err = status;
        im->err_op = op;
    }
    return status;
}

/* Report (and clear) a recorded failure, and pick up asynchronous errors of finished kernels. */
static int take_err(CudaImpl *im, const char *op, cudaError_t e)
{
    if (e != cudaSuccess)
        zinf_cuda_fail(im, op, ZINF_CUDA_EIO, "%s: %s (%s)%s%s", op, cudaGetErrorString(e),
                       cudaGetErrorName(e), im->err_op ? "; last failing op: " : "",
                       im->err_op ? im->err_op : "");
    int rc = im->err;
    im->err = 0;
    im->err_op = NULL;
    return rc;
}

#define RET_CUDA(im, op, call)                                                                    \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) return take_err((im), (op), e_);                                   \
    } while (0)

void *zinf_cuda_scratch(CudaImpl *im, size_t bytes, const char *op)
{
    if (bytes <= im->scratch_bytes) return im->scratch;
    size_t want = bytes + bytes / 4 + (1u << 20);
    if (im->scratch) {
        cudaStreamSynchronize(im->stream); /* the old buffer may still be read by queued work */
        cudaFree(im->scratch);
        im->scratch = NULL;
        im->scratch_bytes = 0;
    }
    cudaError_t e = cudaMalloc(&im->scratch, want);
    if (e != cudaSuccess) {
        im->scratch = NULL;
        zinf_cuda_fail(im, op, ZINF_CUDA_ENOMEM, "%s: cannot allocate %zu bytes of scratch: %s", op,
                       want, cudaGetErrorString(e));
        return NULL;
    }
    im->scratch_bytes = want;
    return im->scratch;
}

static inline cudaStream_t stream_of(CudaImpl *im, zinf_stream *s)
{
    return s ? (cudaStream_t)s : im->stream;
}

/* ---------------------------------------------------------------- memory */

static void *cu_alloc(zinf_backend *be, zinf_place place, size_t bytes)
{
    CudaImpl *im = impl_of(be);
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    cudaSetDevice(im->device);
    switch (place) {
    case ZINF_PLACE_DEVICE:
        if (cudaMalloc(&p, n) != cudaSuccess) break;
        /* zero on the compute stream and wait, so that work on any stream sees zeros */
        if (cudaMemsetAsync(p, 0, n, im->stream) != cudaSuccess ||
            cudaStreamSynchronize(im->stream) != cudaSuccess) {
            cudaFree(p);
            p = NULL;
        }
        break;
    case ZINF_PLACE_PINNED: {
        /* page-locked host memory on 2 MiB pages where the kernel gives them (MADV_HUGEPAGE), then
         * registered with CUDA: the host AdamW streams five such arrays, and 4 KiB pages (what
         * cudaMallocHost gives) cost it TLB misses */
        size_t al = (n + PIN_ALIGN - 1) / PIN_ALIGN * PIN_ALIGN;
        if (posix_memalign(&p, PIN_ALIGN, al) != 0) { p = NULL; break; }
        madvise(p, al, MADV_HUGEPAGE);
        memset(p, 0, al);
        if (cudaHostRegister(p, al, cudaHostRegisterDefault) != cudaSuccess) {
            cudaGetLastError();
            free(p);
            p = NULL;
        }
        break;
    }
    case ZINF_PLACE_HOST:
        if (posix_memalign(&p, 64, n) != 0) p = NULL;
        else memset(p, 0, n);
        break;
    }
    if (!p) {
        cudaGetLastError(); /* clear a sticky-free allocation error */
        snprintf(g_errmsg, sizeof g_errmsg, "cuda alloc: cannot allocate %zu bytes of %s memory",
                 bytes, place == ZINF_PLACE_DEVICE ? "device" : place == ZINF_PLACE_PINNED ? "pinned" : "host");
    }
    return p;
}

static void cu_free(zinf_backend *be, zinf_place place, void *p)
{
    if (!p) return;
    cudaSetDevice(impl_of(be)->device);
    switch (place) {
    case ZINF_PLACE_DEVICE: cudaFree(p); break;
    case ZINF_PLACE_PINNED: cudaHostUnregister(p); free(p); break;
    case ZINF_PLACE_HOST: free(p); break;
    }
}

/* Pageable host memory (not known to CUDA)? */
static bool is_pageable(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return true;
    }
    return a.type == cudaMemoryTypeUnregistered;
}

static bool is_host(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return true;
    }
    return a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
}

/* Asynchronous on the stream unless a side is pageable host memory: then the copy is finished
 * (and everything queued before it on the stream) when this returns. */
static int cu_copy(zinf_backend *be, void *dst, const void *src, size_t bytes, zinf_stream *s)
{
    CudaImpl *im = impl_of(be);
    if (im->err) return take_err(im, "copy", cudaSuccess); /* report an earlier failure first */
    if (!bytes || dst == src) return 0;
    cudaSetDevice(im->device);
    cudaStream_t st = stream_of(im, s);
    bool pd = is_pageable(dst), ps = is_pageable(src);
    if (pd && ps) { /* host to host: wait for the stream's earlier work, then memcpy */
        RET_CUDA(im, "copy", cudaStreamSynchronize(st));
        memcpy(dst, src, bytes);
        return 0;
    }
    RET_CUDA(im, "copy", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st));
    if (pd || ps) RET_CUDA(im, "copy", cudaStreamSynchronize(st));
    return 0;
}

static int cu_memset0(zinf_backend *be, void *dst, size_t bytes, zinf_stream *s)
{
    CudaImpl *im = impl_of(be);
    if (!bytes) return 0;
    cudaStream_t st = stream_of(im, s);
    if (is_host(dst)) { /* host memory: synchronous, after the stream's earlier work */
        RET_CUDA(im, "memset0", cudaStreamSynchronize(st));
        memset(dst, 0, bytes);
        return 0;
    }
    RET_CUDA(im, "memset0", cudaMemsetAsync(dst, 0, bytes, st));
    return 0;
}

/* ---------------------------------------------------------------- streams, events */

static zinf_stream *cu_stream_new(zinf_backend *be)
{
    cudaStream_t s = NULL;
    cudaSetDevice(impl_of(be)->device);
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        zinf_cuda_fail(impl_of(be), "stream_new", ZINF_CUDA_EIO, "stream_new: %s",
                       cudaGetErrorString(cudaGetLastError()));
        return NULL;
    }
    return (zinf_stream *)s;
}

static void cu_stream_free(zinf_backend *be, zinf_stream *s)
{
    (void)be;
    if (s) cudaStreamDestroy((cudaStream_t)s);
}

static int cu_stream_sync(zinf_backend *be, zinf_stream *s)
{
    CudaImpl *im = impl_of(be);
    RET_CUDA(im, "stream_sync", cudaStreamSynchronize(stream_of(im, s)));
    return take_err(im, "stream_sync", cudaGetLastError());
}

static zinf_event *event_new_flags(zinf_backend *be, unsigned flags)
{
    cudaEvent_t e = NULL;
    cudaSetDevice(impl_of(be)->device);
    if (cudaEventCreateWithFlags(&e, flags) != cudaSuccess) {
        zinf_cuda_fail(impl_of(be), "event_new", ZINF_CUDA_EIO, "event_new: %s",
                       cudaGetErrorString(cudaGetLastError()));
        return NULL;
    }
    return (zinf_event *)e;
}

static zinf_event *cu_event_new(zinf_backend *be)
{
    return event_new_flags(be, cudaEventDisableTiming);
}

extern "C" zinf_event *zinf_cuda_event_new_timed(zinf_backend *be)
{
    return event_new_flags(be, cudaEventDefault);
}

extern "C" double zinf_cuda_elapsed_ms(zinf_event *a, zinf_event *b)
{
    float ms = 0;
    if (cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b) != cudaSuccess) {
        cudaGetLastError();
        return -1.0;
    }
    return ms;
}

static double cu_event_elapsed_ms(zinf_backend *be, zinf_event *a, zinf_event *b)
{
    (void)be;
    return zinf_cuda_elapsed_ms(a, b);
}

static void cu_event_free(zinf_backend *be, zinf_event *e)
{
    (void)be;
    if (e) cudaEventDestroy((cudaEvent_t)e);
}

/* 1 when the work before the event has finished, 0 while it runs, negative on a device error */
static int cu_event_query(zinf_backend *be, zinf_event *e)
{
    CudaImpl *im = impl_of(be);
    /* the collective watchdog calls this from its own thread: keep it on this rank's GPU
     * (a new thread's current device is 0) */
    cudaSetDevice(im->device);
    cudaError_t r = cudaEventQuery((cudaEvent_t)e);
    if (r == cudaSuccess) return 1;
    if (r == cudaErrorNotReady) {
        cudaGetLastError(); /* not an error: clear it */
        return 0;
    }
    return zinf_cuda_fail(im, "event_query", ZINF_CUDA_EIO, "event_query: %s", cudaGetErrorString(r));
}

static int cu_event_record(zinf_backend *be, zinf_event *e, zinf_stream *s)
{
    CudaImpl *im = impl_of(be);
    cudaSetDevice(im->device); /* the host step's thread records too (zero.c) */
    RET_CUDA(im, "event_record", cudaEventRecord((cudaEvent_t)e, stream_of(im, s)));
    return 0;
}

static int cu_stream_wait(zinf_backend *be, zinf_stream *s, zinf_event *e)
{
    CudaImpl *im = impl_of(be);
    cudaSetDevice(im->device);
    RET_CUDA(im, "stream_wait", cudaStreamWaitEvent(stream_of(im, s), (cudaEvent_t)e, 0));
    return 0;
}

/* The compute stream has drained; returns the first failure of any operation since the last
 * sync (launch errors and asynchronous kernel faults alike). */
static int cu_sync(zinf_backend *be)
{
    CudaImpl *im = impl_of(be);
    cudaSetDevice(im->device);
    RET_CUDA(im, "sync", cudaStreamSynchronize(im->stream));
    return take_err(im, "sync", cudaGetLastError());
}

/* Device memory in use on this GPU (all of it, the CUDA context included) and its size. */
static int cu_mem_info(zinf_backend *be, size_t *used, size_t *total)
{
    CudaImpl *im = impl_of(be);
    cudaSetDevice(im->device);
    size_t fr = 0, tot = 0;
    RET_CUDA(im, "mem_info", cudaMemGetInfo(&fr, &tot));
    *used = tot - fr;
    *total = tot;
    return 0;
}

static size_t cu_scratch_bytes(zinf_backend *be)
{
    CudaImpl *im = impl_of(be);
    return (im->scratch ? im->scratch_bytes : 0) + (im->lt_ws ? im->lt_ws_bytes : 0);
}

/* ---------------------------------------------------------------- init */

extern "C" int zinf_backend_cuda_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" void zinf_backend_cuda_free(zinf_backend *be)
{
    CudaImpl *im = be ? impl_of(be) : NULL;
    if (im) {
        cudaSetDevice(im->device);
        cudaStreamSynchronize(im->stream);
        cu_matmul_free(im);
        zinf_cudnn_free(im);
        if (im->lt) cublasLtDestroy(im->lt);
        if (im->lt_ws) cudaFree(im->lt_ws);
        if (im->scratch) cudaFree(im->scratch);
        if (im->host_sum) cudaFreeHost(im->host_sum);
        if (im->stream) cudaStreamDestroy(im->stream);
        free(im);
    }
    if (be) memset(be, 0, sizeof *be);
}

extern "C" int zinf_backend_cuda_init(zinf_backend *be, int device, zinf_dtype cdt)
{
    memset(be, 0, sizeof *be);
    int n = zinf_backend_cuda_count();
    if (n <= 0) {
        snprintf(g_errmsg, sizeof g_errmsg, "no CUDA device visible");
        return ZINF_CUDA_ENOTSUP;
    }
    if (device < 0 || device >= n) {
        snprintf(g_errmsg, sizeof g_errmsg, "CUDA device %d out of range (%d visible)", device, n);
        return ZINF_CUDA_EINVAL;
    }
    if (cdt != ZINF_F32 && cdt != ZINF_BF16 && cdt != ZINF_F16) {
        snprintf(g_errmsg, sizeof g_errmsg, "unknown compute dtype %d", (int)cdt);
        return ZINF_CUDA_EINVAL;
    }
    CudaImpl *im = (CudaImpl *)calloc(1, sizeof *im);
    if (!im) return ZINF_CUDA_ENOMEM;
    im->device = device;
    im->cdt = cdt;
    be->impl = im;
    cudaError_t e;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&im->host_sum, sizeof(double))) != cudaSuccess) {
        snprintf(g_errmsg, sizeof g_errmsg, "CUDA device %d: %s", device, cudaGetErrorString(e));
        cudaGetLastError();
        zinf_backend_cuda_free(be);
        return ZINF_CUDA_ENOTSUP;
    }
    im->num_sms = prop.multiProcessorCount;
    im->cc = prop.major * 10 + prop.minor;
    if (prop.major < 8) {
        snprintf(g_errmsg, sizeof g_errmsg,
                 "CUDA device %d (%s) has compute capability %d.%d; zinf needs 8.0 or newer",
                 device, prop.name, prop.major, prop.minor);
        zinf_backend_cuda_free(be);
        return ZINF_CUDA_ENOTSUP;
    }
    int rc = cu_matmul_init(im);
    if (rc) {
        zinf_backend_cuda_free(be);
        return rc;
    }
    be->name = "cuda";
    be->cdt = cdt;
    be->alloc = cu_alloc;
    be->free = cu_free;
    be->copy = cu_copy;
    be->memset0 = cu_memset0;
    be->stream_new = cu_stream_new;
    be->stream_free = cu_stream_free;
    be->stream_sync = cu_stream_sync;
    be->event_new = cu_event_new;
    be->event_new_timed = zinf_cuda_event_new_timed;
    be->event_elapsed_ms = cu_event_elapsed_ms;
    be->event_free = cu_event_free;
    be->event_record = cu_event_record;
    be->event_query = cu_event_query;
    be->stream_wait = cu_stream_wait;
    be->sync = cu_sync;
    be->mem_info = cu_mem_info;
    be->scratch_bytes = cu_scratch_bytes;
    be->encoder_fwd = cu_encoder_fwd;
    be->encoder_bwd = cu_encoder_bwd;
    be->copy_rows = cu_copy_rows;
    be->layernorm_fwd = cu_layernorm_fwd;
    be->layernorm_bwd = cu_layernorm_bwd;
    be->matmul_fwd = cu_matmul_fwd;
    be->matmul_fwd_res = cu_matmul_fwd_res;
    be->matmul_bwd = cu_matmul_bwd;
    be->matmul_gelu_fwd = cu_matmul_gelu_fwd;
    be->matmul_dgelu_bwd = cu_matmul_dgelu_bwd;
    be->attention_fwd = cu_attention_fwd;
    be->attention_bwd = cu_attention_bwd;
    be->rmsnorm_fwd = cu_rmsnorm_fwd;
    be->rmsnorm_bwd = cu_rmsnorm_bwd;
    be->rope = cu_rope;
    be->swiglu_fwd = cu_swiglu_fwd;
    be->swiglu_bwd = cu_swiglu_bwd;
    be->gelu_fwd = cu_gelu_fwd;
    be->gelu_bwd = cu_gelu_bwd;
    be->add = cu_add;
    be->xent = cu_xent;
    be->adamw = cu_adamw;
    be->sumsq = cu_sumsq;
    be->scale = cu_scale;
    be->axpy = cu_axpy;
    be->acc_f32 = cu_acc_f32;
    be->scale_to = cu_scale_to;
    be->to_f32 = cu_to_f32;
    be->from_f32 = cu_from_f32;
    g_errmsg[0] = 0;
    return 0;
}
