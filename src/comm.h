/* comm: MPI bootstrap (world rank and size, local rank, nodes) and the collectives the engine uses.
 * MPI is the rendezvous for everything. A failure on one rank ends the whole job with MPI_Abort
 * and that rank's message; failures every rank sees alike are agreed on first so the job prints
 * one line and exits cleanly. */
#ifndef ZINF_COMM_H
#define ZINF_COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"

typedef struct zinf_comm {
    MPI_Comm world;
    int rank, size;
    int local_rank, local_size; /* within the node (MPI_COMM_TYPE_SHARED) */
    int nnodes;
    double timeout_s;           /* a collective not done after this aborts the job (0 = never) */
    /* comms_logger counters */
    int64_t n_calls[4], bytes[4]; /* by zinf_coll kind */
    double wait_s;              /* time spent blocked in waits */
    /* device collectives (NCCL) when the backend's buffers are not host memory; NULL: MPI */
    zinf_backend *be;
    zinf_dcoll dev;
    bool has_dev;
    /* device collectives the compute stream was told to wait for, still watched for the timeout */
    struct zinf_watch { zinf_event *ev; double t0; char what[160]; } *watch;
    int nwatch, capwatch;
    /* a watchdog thread checks the watched collectives while the host is blocked elsewhere
     * (e.g. in a stream synchronisation behind a collective that never completes) */
    void *watchdog;             /* pthread state, NULL when not running */
} zinf_comm;

typedef enum { ZINF_COLL_ALLREDUCE = 0, ZINF_COLL_ALLGATHER, ZINF_COLL_REDUCE_SCATTER, ZINF_COLL_BCAST } zinf_coll;

/* A collective in flight. `what` names it in timeout and failure messages. */
typedef struct zinf_req {
    MPI_Request r;
    zinf_event *ev;             /* device collectives: done when this event is */
    bool active;
    char what[160];
} zinf_req;

int zinf_comm_init(zinf_comm *c, int *argc, char ***argv);
/* ZINF_COMM_TIMEOUT's value: seconds >= 0 into *out and 0, or -1 when s is not such a number. */
int zinf_comm_timeout_parse(const char *s, double *out);
/* 0 when ZINF_COMM_TIMEOUT is unset or such a number, else an error naming its value (zinf_comm_init
 * then kept 600 s). Every command that starts MPI checks it, so that a typo never means the default. */
int zinf_comm_check_env(void);
void zinf_comm_finalize(zinf_comm *c);
/* Print "zinf: error: <msg>" (with "rank R: " on multi-rank jobs) and MPI_Abort. */
_Noreturn void zinf_comm_abort(zinf_comm *c, const char *msg);
/* Every rank passes its status; when any failed, the lowest failing rank prints its message,
 * and every rank gets that rank's status back (others' rc becomes the same negative code). */
int zinf_comm_agree(zinf_comm *c, int rc);

/* In-place sum over all ranks (any count; split below INT_MAX internally). */
int zinf_comm_allreduce_sum_f32(zinf_comm *c, float *buf, int64_t n);
int zinf_comm_allreduce_sum_f64(zinf_comm *c, double *buf, int64_t n);
int zinf_comm_allreduce_max_f64(zinf_comm *c, double *buf, int64_t n);
/* a sum modulo 2^64 (the checkpoint's checksums) */
int zinf_comm_allreduce_sum_u64(zinf_comm *c, uint64_t *buf, int64_t n);
/* root's bytes to every rank; like the sums, nonblocking plus a wait with the collective timeout */
int zinf_comm_bcast(zinf_comm *c, void *buf, size_t bytes, int root);

/* Use the backend's device collectives (NCCL) for buffer collectives when it has them: rank 0
 * makes the id, MPI broadcasts it, every rank joins. A CPU backend keeps MPI. */
int zinf_comm_attach(zinf_comm *c, zinf_backend *be);
void zinf_comm_detach(zinf_comm *c);

/* Nonblocking collectives on buffers of the backend (count elements of dt per rank):
 * all-gather: every rank sends `count`; recv holds size x count in rank order (send may be this
 *   rank's own slot of recv: the gather then runs in place).
 * reduce-scatter: send holds size x count; rank r receives the sum of block r.
 * all-reduce: in place, sum. Over MPI only fp32 reduces (16-bit types gather as bits). */
int zinf_comm_iallgather(zinf_comm *c, const void *send, void *recv, int64_t count, zinf_dtype dt,
                         zinf_req *q, const char *what);
int zinf_comm_ireduce_scatter(zinf_comm *c, const void *send, void *recv, int64_t count,
                              zinf_dtype dt, zinf_req *q, const char *what);
int zinf_comm_iallreduce(zinf_comm *c, void *buf, int64_t count, zinf_dtype dt, zinf_req *q,
                         const char *what);
/* Finish a request; past comm->timeout_s the job is aborted with the rank and req->what.
 * A device collective is not waited for on the host: the backend's compute stream waits for it
 * (so work queued after this call sees its result) and the request is watched until
 * zinf_comm_drain, which the step calls once; the host keeps queueing work meanwhile. */
int zinf_comm_wait(zinf_comm *c, zinf_req *q);
/* Wait on the host for every watched device collective (with the timeout). */
int zinf_comm_drain(zinf_comm *c);
/* Log where the ranks run, for the first lines of a training log: each node's ranks with their
 * CPUs (each rank's affinity, condensed) and OpenMP threads, and a warning for a node whose ranks
 * run more threads than they have CPUs. Collective; rank 0 logs. */
int zinf_comm_log_placement(zinf_comm *c);
/* Progress and poll: 1 when done (and the request is finished), 0 when still running. */
int zinf_comm_test(zinf_comm *c, zinf_req *q);

#endif
