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
#include "ckpt_file.h"
#include "config.h"
#include "model.h"
#include "optim.h"
#include "zero.h"

/* What the training loop needs besides the tensors to continue exactly. */
typedef struct zinf_ckpt_meta {
    int64_t step;             /* training steps done */
    int64_t opt_steps;        /* optimizer updates applied (Adam's t, the scheduler's step) */
    uint64_t seed;            /* --seed: parameter initialisation and data order */
    int64_t train_batch_size; /* sequences per step when it was saved */
    int64_t consumed_samples; /* the data position: sequences of the stream read so far (the next
                               * step reads from here); step x train_batch_size before format 3 */
    int64_t max_length;       /* tokens per sequence; 0 when the checkpoint did not record it */
    uint64_t run_id;          /* made when a run starts fresh, kept by its resumptions */
    zinf_loss_scaler ls;
} zinf_ckpt_meta;

/* Save the run's state as DIR/checkpoint-STEP.h5 and point DIR/latest at it; then keep only the
 * newest `keep` checkpoints of this run (0: all): those of another run_id, and any of a step past
 * this one, are never removed. Collective. Rank 0 lays the file out and reserves every dataset's
 * space before a byte of it is written, so a full disk fails there, cleanly; then each rank
 * writes its own ranges with pwrite, and the only collectives are zinf_comm's, each with the
 * time limit. `cfg_json`: the resolved config, stored. An error is agreed on by every rank and
 * printed once (zinf_comm_agree), as for the load; the .tmp file is removed. */
int zinf_ckpt_save(const char *dir, zinf_comm *comm, const zinf_model *m, zinf_zero *z, const char *cfg_json,
                   const zinf_ckpt_meta *meta, int keep);

/* --resume SPEC: "auto" is DIR/latest's checkpoint, or "" when DIR has none (a fresh start); a
 * directory is its latest; a file is itself. */
int zinf_ckpt_resolve(const char *spec, const char *dir, char *path, size_t cap);

/* Load a checkpoint into the engine: the model's shapes must match; the root scalars' and every
 * dataset's checksum is verified. Each rank reads its own ranges with serial HDF5 (no collective
 * I/O); the collectives are zinf_comm's, with the time limit. An error is agreed on by every rank
 * and printed once. */
int zinf_ckpt_load(const char *path, zinf_comm *comm, const zinf_model *m, zinf_zero *z, zinf_ckpt_meta *meta);

/* The resolved config a checkpoint stores (/meta/config), as zinf_config_print wrote it: a
 * malloc'd string, or NULL when the file cannot be read (the load says why). */
char *zinf_ckpt_stored_config(const char *path);

/* fsync a file or a directory (a rename is durable once its directory is synced) */
int zinf_fsync_path(const char *path, bool dir);

/* Rank 0's hold on an output directory for the whole run (flock of DIR/.zinf.lock, released
 * when the process ends): a second run into the same directory waits up to wait_s seconds for it
 * (a requeued job whose previous ranks are still ending), then fails naming the holder. Removes
 * what interrupted saves left (checkpoint-*.h5.tmp, latest.tmp), reporting each to `removed`
 * (may be NULL; one name per call). *fd: the lock's descriptor. */
int zinf_ckpt_lock_dir(const char *dir, double wait_s, int *fd, void (*removed)(const char *path));

/* A run refused before its first step in a directory it made: the lock file goes (called while
 * the lock is still held; the directories the run made go after it, zinf_rmdir_made). */
void zinf_ckpt_unlock_file(const char *dir);

/* Run fn(ctx, out) in a child process (fork) and bring back its status, message and out_bytes of
 * `out`. HDF5 1.10 cannot end after a file it writes failed to close (a full disk): the process
 * crashes at exit. Every HDF5 file zinf writes during a run is therefore written by a child: a
 * failure, even a crash, ends there, and the run reports it in one line. The child calls no MPI
 * and no OpenMP, and leaves through _exit. timeout_s > 0: the child is killed after that long. */
int zinf_ckpt_isolated(int (*fn)(void *ctx, void *out), void *ctx, void *out, size_t out_bytes, double timeout_s,
                       const char *what);

/* The newest checkpoint-STEP.h5 in DIR ("" when none), whichever run wrote it. */
void zinf_ckpt_newest(const char *dir, char *path, size_t cap);

/* A new run_id: time, pid and host mixed; never 0 (0 is a format-1 checkpoint's). */
uint64_t zinf_ckpt_new_run_id(void);

/* The checksum of n fp32 values that sit at logical indices first.. of a tensor: a sum over
 * elements, so the ranks' parts add up to the whole tensor's. */
uint64_t zinf_ckpt_checksum(const float *x, int64_t first, int64_t n);

#endif
