// NCCL behind zinf_dcoll: the device collectives src/comm.c uses when the backend is CUDA.
// The id is made here and broadcast by comm.c over MPI (this file never calls MPI). Every call
// runs on a communication stream of its own that first waits for the work already queued on the
// compute stream, so a collective sees the gradients the backward just wrote; completion is an
// event the caller polls (with its timeout) or makes the compute stream wait on.
//
// The communicator is non-blocking (ncclConfig_t.blocking = 0), so that joining it has the
// collective timeout: a rank that died before joining would otherwise keep the others inside
// ncclCommInitRank forever. On such a communicator any call may return ncclInProgress while NCCL
// finishes it on a thread of its own (the setup, and a collective's enqueue, which includes
// connecting to the peers the first time); settle() waits for that, with the same timeout.
#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_common.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "zinf needs NCCL 2.14 or newer (non-blocking communicators)"
#endif

namespace {

// Backend streams are cudaStream_t handles; NULL is the compute stream.
cudaStream_t raw_stream(zinf_backend *be, zinf_stream *s)
{
    return s ? (cudaStream_t)s : impl_of(be)->stream;
}

struct Dcoll {
    zinf_backend *be;
    ncclComm_t comm;
    zinf_stream *stream;   // the communication stream (a backend stream)
    cudaStream_t raw, compute;
    cudaEvent_t ready;     // recorded on the compute stream before each call
    double timeout_s;      // for calls NCCL finishes in the background; 0 = no limit
};

ncclDataType_t nccl_type(zinf_dtype dt)
{
    switch (dt) {
    case ZINF_F32: return ncclFloat32;
    case ZINF_BF16: return ncclBfloat16;
    case ZINF_F16: return ncclFloat16;
    }
    return ncclFloat32;
}

double mono_now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The result of a call on the non-blocking communicator, once NCCL has finished it: r itself
// unless it is ncclInProgress, else the communicator's state polled until it leaves
// ncclInProgress. Past timeout_s (0: never) it gives up, sets *late and returns ncclInProgress.
ncclResult_t settle(ncclComm_t comm, ncclResult_t r, double timeout_s, bool *late)
{
    *late = false;
    double t0 = mono_now();
    for (int i = 0; r == ncclInProgress; i++) {
        ncclResult_t st = ncclInProgress;
        ncclResult_t q = ncclCommGetAsyncError(comm, &st);
        if (q != ncclSuccess) return q;
        if (st != ncclInProgress) return st;
        if (timeout_s > 0 && mono_now() - t0 > timeout_s) {
            *late = true;
            return ncclInProgress;
        }
        // an enqueue takes microseconds, so yield first; a setup takes up to seconds, so then sleep
        if (i < 2000) sched_yield();
        else usleep(1000);
    }
    return r;
}

// The message for a failed NCCL call (what: the call), in the backend's error slot.
int nccl_fail(ncclResult_t r, bool late, double timeout_s, const char *what)
{
    if (late)
        return zinf_cuda_fail(NULL, what, ZINF_CUDA_EIO, "%s was still being set up after %g s (another rank "
                              "is stuck or dead; ZINF_COMM_TIMEOUT sets the limit)", what, timeout_s);
    const char *last = ncclGetLastError(NULL);
    return zinf_cuda_fail(NULL, what, ZINF_CUDA_EIO, "%s failed: %s%s%s%s", what, ncclGetErrorString(r),
                          last && *last ? " (" : "", last && *last ? last : "", last && *last ? ")" : "");
}

// After a collective was issued: 0 once NCCL has queued it on the communication stream, so that
// an event recorded there after it completes only when it does. A failed or late one aborts the
// communicator, which also stops NCCL's thread still connecting to a peer that never answers.
int issued(Dcoll *d, ncclResult_t r, const char *what)
{
    bool late = false;
    r = settle(d->comm, r, d->timeout_s, &late);
    if (r == ncclSuccess) return 0;
    int rc = nccl_fail(r, late, d->timeout_s, what);
    ncclCommAbort(d->comm);
    d->comm = NULL;
    return rc;
}

// The communication stream waits for everything queued on the compute stream so far.
int order(Dcoll *d)
{
    if (!d->comm)
        return zinf_cuda_fail(NULL, "nccl", ZINF_CUDA_EIO, "the NCCL communicator was aborted after an earlier "
                              "failure");
    cudaError_t e = cudaEventRecord(d->ready, d->compute);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(d->raw, d->ready, 0);
    if (e != cudaSuccess)
        return zinf_cuda_fail(NULL, "nccl", ZINF_CUDA_EIO, "ordering a collective after the compute stream: %s",
                              cudaGetErrorString(e));
    return 0;
}

int dc_allgather(void *ctx, const void *send, void *recv, int64_t count, zinf_dtype dt)
{
    Dcoll *d = (Dcoll *)ctx;
    if (order(d)) return -1;
    return issued(d, ncclAllGather(send, recv, (size_t)count, nccl_type(dt), d->comm, d->raw), "NCCL all-gather");
}

int dc_reduce_scatter(void *ctx, const void *send, void *recv, int64_t count, zinf_dtype dt)
{
    Dcoll *d = (Dcoll *)ctx;
    if (order(d)) return -1;
    return issued(d, ncclReduceScatter(send, recv, (size_t)count, nccl_type(dt), ncclSum, d->comm, d->raw),
                  "NCCL reduce-scatter");
}

int dc_allreduce(void *ctx, void *buf, int64_t count, zinf_dtype dt)
{
    Dcoll *d = (Dcoll *)ctx;
    if (order(d)) return -1;
    return issued(d, ncclAllReduce(buf, buf, (size_t)count, nccl_type(dt), ncclSum, d->comm, d->raw),
                  "NCCL all-reduce");
}

zinf_event *dc_record(void *ctx)
{
    Dcoll *d = (Dcoll *)ctx;
    zinf_event *e = d->be->event_new(d->be);
    if (!e) return NULL;
    if (d->be->event_record(d->be, e, d->stream)) {
        d->be->event_free(d->be, e);
        return NULL;
    }
    return e;
}

void dc_free(void *ctx)
{
    Dcoll *d = (Dcoll *)ctx;
    cudaStreamSynchronize(d->raw);
    if (d->comm) ncclCommDestroy(d->comm); // blocking even on a non-blocking communicator
    cudaEventDestroy(d->ready);
    d->be->stream_free(d->be, d->stream);
    delete d;
}

} // namespace

extern "C" int zinf_dcoll_id_get(zinf_backend *be, unsigned char id[ZINF_DCOLL_ID_BYTES])
{
    (void)be;
    static_assert(sizeof(ncclUniqueId) <= ZINF_DCOLL_ID_BYTES, "NCCL id does not fit");
    ncclUniqueId u;
    if (ncclGetUniqueId(&u) != ncclSuccess) return -1;
    memset(id, 0, ZINF_DCOLL_ID_BYTES);
    memcpy(id, &u, sizeof u);
    return 0;
}

extern "C" int zinf_dcoll_init(zinf_backend *be, const unsigned char id[ZINF_DCOLL_ID_BYTES], int rank,
                               int size, double timeout_s, zinf_dcoll *out)
{
    Dcoll *d = new Dcoll();
    d->be = be;
    d->timeout_s = timeout_s;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    d->stream = be->stream_new(be);
    if (!d->stream) {
        delete d;
        return zinf_cuda_fail(NULL, "nccl", ZINF_CUDA_EIO, "no stream for the NCCL communicator");
    }
    d->raw = raw_stream(be, d->stream);
    d->compute = raw_stream(be, NULL);
    cudaError_t ce = cudaEventCreateWithFlags(&d->ready, cudaEventDisableTiming);
    if (ce != cudaSuccess) {
        be->stream_free(be, d->stream);
        delete d;
        return zinf_cuda_fail(NULL, "nccl", ZINF_CUDA_EIO, "no event for the NCCL communicator: %s",
                              cudaGetErrorString(ce));
    }
    // Non-blocking, so that a rank that never joins ends the wait after timeout_s.
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    d->comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&d->comm, size, u, rank, &cfg);
    bool late = false;
    if (d->comm) r = settle(d->comm, r, timeout_s, &late);
    if (r != ncclSuccess) {
        if (late)
            zinf_cuda_fail(NULL, "nccl", ZINF_CUDA_EIO, "NCCL communicator setup did not finish within %g s "
                           "(another rank may have failed before joining; ZINF_COMM_TIMEOUT sets the limit)",
                           timeout_s);
        else
            nccl_fail(r, false, timeout_s, "NCCL communicator setup");
        if (d->comm) ncclCommAbort(d->comm); // also stops the setup still waiting for the others
        cudaEventDestroy(d->ready);
        be->stream_free(be, d->stream);
        delete d;
        return ZINF_CUDA_EIO;
    }
    out->ctx = d;
    out->allgather = dc_allgather;
    out->reduce_scatter = dc_reduce_scatter;
    out->allreduce = dc_allreduce;
    out->record = dc_record;
    out->free = dc_free;
    return 0;
}
