// NCCL behind zinf_dcoll: the device collectives src/comm.c uses when the backend is CUDA.
// The id is made here and broadcast by comm.c over MPI (this file never calls MPI). Every call
// runs on a communication stream of its own that first waits for the work already queued on the
// compute stream, so a collective sees the gradients the backward just wrote; completion is an
// event the caller polls (with its timeout) or makes the compute stream wait on.
#include <cuda_runtime.h>
#include <nccl.h>
#include <string.h>

#include "cuda_common.h"

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

// The communication stream waits for everything queued on the compute stream so far.
int order(Dcoll *d)
{
    if (cudaEventRecord(d->ready, d->compute) != cudaSuccess) return -1;
    if (cudaStreamWaitEvent(d->raw, d->ready, 0) != cudaSuccess) return -1;
    return 0;
}

int dc_allgather(void *ctx, const void *send, void *recv, int64_t count, zinf_dtype dt)
{
    Dcoll *d = (Dcoll *)ctx;
    if (order(d)) return -1;
    return ncclAllGather(send, recv, (size_t)count, nccl_type(dt), d->comm, d->raw) == ncclSuccess ? 0 : -1;
}

int dc_reduce_scatter(void *ctx, const void *send, void *recv, int64_t count, zinf_dtype dt)
{
    Dcoll *d = (Dcoll *)ctx;
    if (order(d)) return -1;
    return ncclReduceScatter(send, recv, (size_t)count, nccl_type(dt), ncclSum, d->comm, d->raw) == ncclSuccess
               ? 0 : -1;
}

int dc_allreduce(void *ctx, void *buf, int64_t count, zinf_dtype dt)
{
    Dcoll *d = (Dcoll *)ctx;
    if (order(d)) return -1;
    return ncclAllReduce(buf, buf, (size_t)count, nccl_type(dt), ncclSum, d->comm, d->raw) == ncclSuccess ? 0
                                                                                                          : -1;
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
    ncclCommDestroy(d->comm);
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
                               int size, zinf_dcoll *out)
{
    Dcoll *d = new Dcoll();
    d->be = be;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    d->stream = be->stream_new(be);
    if (!d->stream) { delete d; return -1; }
    d->raw = raw_stream(be, d->stream);
    d->compute = raw_stream(be, NULL);
    if (cudaEventCreateWithFlags(&d->ready, cudaEventDisableTiming) != cudaSuccess ||
        ncclCommInitRank(&d->comm, size, u, rank) != ncclSuccess) {
        be->stream_free(be, d->stream);
        delete d;
        return -1;
    }
    out->ctx = d;
    out->allgather = dc_allgather;
    out->reduce_scatter = dc_reduce_scatter;
    out->allreduce = dc_allreduce;
    out->record = dc_record;
    out->free = dc_free;
    return 0;
}
