/* cuda_backend: the extra C entry points of the CUDA backend, beyond what kernels.h declares
 * (zinf_backend_cuda_init/free/count). Plain C; no CUDA types, so src/ may include it. */
#ifndef ZINF_CUDA_BACKEND_H
#define ZINF_CUDA_BACKEND_H

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels.h"

/* The message of the CUDA backend's last failure ("" when none): why init failed (no device,
 * cuBLASLt refused, ...), or which operation failed and with what CUDA error, as returned by a
 * negative status from sync/copy/stream_sync. Valid until the next failure. */
const char *zinf_backend_cuda_error(void);

/* Benchmark helpers: an event that records time (be->event_new makes events without timing,
 * which are cheaper), freed with be->event_free; and the milliseconds between two such events
 * once both have completed (negative on error, e.g. an event without timing or not yet done). */
zinf_event *zinf_cuda_event_new_timed(zinf_backend *be);
double zinf_cuda_elapsed_ms(zinf_event *a, zinf_event *b);

/* Tests: which attention kernels take the wgmma (Hopper) version where it is built, as bits; a
 * clear bit takes the mma.sync kernel on a Hopper GPU too, so that one GPU checks both. */
#define ZINF_ATTN_HOPPER_FWD 1
#define ZINF_ATTN_HOPPER_DQ 2
#define ZINF_ATTN_HOPPER_ALL 3
extern int zinf_cuda_attn_hopper;

/* Attention through cuDNN's fused kernels where cuDNN 9 loads and takes the shape (rows of one
 * sample, bf16/fp16, head size 64 or 128): 1 on, 0 off (zinf's kernels), -1 (the start) from
 * ZINF_ATTN_CUDNN at first use ("0" off, "verbose" on and each plan or refusal on stderr; verbose
 * holds also where a test sets the switch). runs
 * counts the calls cuDNN ran; the version is cuDNN's (e.g. 91900), 0 when it is not used. */
extern int zinf_cuda_attn_cudnn;
/* The backward's dQ: 0 (the default) straight from dS K, which cuDNN sums in a fixed order (dP kept in
 * its workspace, B NH T^2 2 bytes); 1 through an fp32 accumulator to which the key tiles add with
 * atomics: faster, not the same bits from run to run (test_backend_ops --bench-attn times both) */
extern int zinf_cuda_attn_cudnn_acc;
extern long zinf_cuda_attn_cudnn_runs;
int zinf_cuda_cudnn_version(void);

#ifdef __cplusplus
}
#endif

#endif
