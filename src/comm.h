/* comm: MPI bootstrap (world rank and size, local rank, nodes) and the collectives the engine uses.
 * MPI is the rendezvous for everything. A failure on one rank ends the whole job with MPI_Abort
 * and that rank's message; failures every rank sees alike are agreed on first so the job prints
 * one line and exits cleanly. */
#ifndef ZINF_COMM_H
#define ZINF_COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

typedef struct zinf_comm {
    MPI_Comm world;
    int rank, size;
    int local_rank, local_size; /* within the node (MPI_COMM_TYPE_SHARED) */
    int nnodes;
} zinf_comm;

int zinf_comm_init(zinf_comm *c, int *argc, char ***argv);
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
int zinf_comm_bcast(zinf_comm *c, void *buf, size_t bytes, int root);
int zinf_comm_barrier(zinf_comm *c);

#endif
