/* HDF5 checkpoints (man/zinf-checkpoint.5 specifies the file). One file per checkpoint, written
 * collectively over MPI-IO: each dataset holds one logical tensor at its full shape, written as
 * hyperslabs by the ranks whose shards cover it, so any world size and ZeRO stage can restart
 * from it. A save writes NAME.h5.tmp, syncs it, renames it and syncs the directory, then
 * replaces `latest` the same way: a save killed at any moment leaves the previous checkpoint
 * whole and `latest` naming it. */
#ifndef ZINF_CKPT_H
#define ZINF_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"
#include "config.h"
#include "model.h"
#include "optim.h"
#include "zero.h"

#define ZINF_CKPT_FORMAT 1

/* What the training loop needs besides the tensors to continue exactly. */
typedef struct zinf_ckpt_meta {
    int64_t step;             /* training steps done */
    int64_t opt_steps;        /* optimizer updates applied (Adam's t, the scheduler's step) */
    uint64_t seed;            /* --seed: parameter initialisation and data order */
    int64_t train_batch_size; /* the data position is step x train_batch_size sequences */
    zinf_loss_scaler ls;
} zinf_ckpt_meta;

/* Save the run's state as DIR/checkpoint-STEP.h5 and point DIR/latest at it; then keep only the
 * newest `keep` checkpoints (0: all). Collective. `cfg_json`: the resolved config, stored. An
 * error is agreed on by every rank and printed once (zinf_comm_agree), as for the load. */
int zinf_ckpt_save(const char *dir, zinf_comm *comm, const zinf_model *m, zinf_zero *z, const char *cfg_json,
                   const zinf_ckpt_meta *meta, int keep);

/* --resume SPEC: "auto" is DIR/latest's checkpoint, or "" when DIR has none (a fresh start); a
 * directory is its latest; a file is itself. */
int zinf_ckpt_resolve(const char *spec, const char *dir, char *path, size_t cap);

/* Load a checkpoint into the engine: the model's shapes must match; every dataset's checksum is
 * verified. Collective; an error is agreed on by every rank and printed once. */
int zinf_ckpt_load(const char *path, zinf_comm *comm, const zinf_model *m, zinf_zero *z, zinf_ckpt_meta *meta);

/* fsync a file or a directory (a rename is durable once its directory is synced) */
int zinf_fsync_path(const char *path, bool dir);

/* The checksum of n fp32 values that sit at logical indices first.. of a tensor: a sum over
 * elements, so the ranks' parts add up to the whole tensor's. */
uint64_t zinf_ckpt_checksum(const float *x, int64_t first, int64_t n);

#endif
