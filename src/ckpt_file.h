/* The checkpoint file as it sits on disk (man/zinf-checkpoint.5), read and written with serial
 * HDF5: the root scalars, one table of them for the writer, the readers and their checksum; the
 * tensor datasets, each a contiguous float32 little-endian array whose byte offset the writer
 * hands to every rank. ckpt.c (save, and each rank's load of its own ranges) and ckpt_tool.c
 * (info, verify, export) both read a file through here, so they accept and refuse the same
 * files. No MPI: every call is one process's. */
#ifndef ZINF_CKPT_FILE_H
#define ZINF_CKPT_FILE_H

#include <hdf5.h>
#include <stdbool.h>
#include <stdint.h>

#include "model.h"

/* format 2 adds run_id, max_length, meta_checksum, and names the model by model_type and its
 * config's text (format 1: GPT-2's six integers); format 3 adds consumed_samples, the data
 * position, which a resume at another batch size needs; formats 1 and 2 still load (their
 * position is step x train_batch_size) */
#define ZINF_CKPT_FORMAT 3
#define ZINF_CKPT_FORMAT_MIN 1

extern const char *const zinf_ckpt_group[3]; /* "/master", "/optim/m", "/optim/v" */

/* The root scalars of a checkpoint. */
typedef struct zinf_ckpt_attrs {
    int64_t format;
    int64_t step;             /* training steps done */
    int64_t opt_steps;        /* optimizer updates applied (Adam's t, the scheduler's step) */
    uint64_t seed;            /* --seed: parameter initialisation and data order */
    int64_t train_batch_size; /* the data position is step x train_batch_size sequences */
    int64_t max_length;       /* tokens per sequence (0: not recorded, format 1) */
    int64_t consumed_samples; /* format 3: sequences of the data stream read by the steps done */
    uint64_t run_id;          /* made when a run starts fresh, kept across resumes (0: format 1) */
    double loss_scale;
    int64_t ls_hysteresis, ls_iter, ls_last_overflow;
    int64_t saved_world_size;
    int64_t legacy[ZINF_MODEL_LEGACY_NATTRS]; /* format 1: GPT-2's six integers (zinf_model_legacy_attrs) */
    char model_type[32];      /* format 2: the model's identity (zinf_model_identity) */
    char model_config[16384];
    char version[64];         /* the zinf that wrote it */
} zinf_ckpt_attrs;

/* An open checkpoint file. */
typedef struct zinf_ckf {
    char path[4096];
    hid_t f;
    zinf_ckpt_attrs a;
} zinf_ckf;

/* The model configuration the attributes describe (no memory, no backend needed to lay it out). */
int zinf_ckpt_attrs_model(const zinf_ckpt_attrs *a, zinf_model_cfg *mc, const char *src);
/* The attributes' model identity against the run's model: one line naming the first difference. */
int zinf_ckpt_attrs_check_model(const zinf_ckpt_attrs *a, const zinf_model_cfg *run, const char *src);
/* The run's model's identity into the attributes. */
int zinf_ckpt_attrs_set_model(zinf_ckpt_attrs *a, const zinf_model_cfg *mc);

/* Open a checkpoint read-only: its format, every root scalar present and in range, and (format
 * 2) their checksum, which also covers /meta/config. One error names the file and the attribute. */
int zinf_ckf_open(zinf_ckf *c, const char *path);
void zinf_ckf_close(zinf_ckf *c);

/* The stored config text (to free()), or NULL when the file has none. */
char *zinf_ckf_config(const zinf_ckf *c);

/* Open state k's dataset of tensor tv: it must exist, be float32 little-endian and have the
 * tensor's shape; *sum is its checksum attribute. */
int zinf_ckf_tensor(const zinf_ckf *c, int k, const zinf_tensor_view *tv, hid_t *d, uint64_t *sum);

/* Elements [a, b) of tensor tv's state-k dataset d into buf (serial, this process alone), checked
 * by zinf_ckf_values. */
int zinf_ckf_read(const zinf_ckf *c, int k, hid_t d, const zinf_tensor_view *tv, int64_t a, int64_t b, float *buf);

/* n values of state k (0 master, 1 first moment, 2 second moment) read from dataset dset of the
 * file at path, the first of them its element `first`: they must be what a run writes, finite,
 * and the second moments not negative. A checksum recomputed by whoever edited the file does not
 * catch a NaN; this does, and names the element. */
int zinf_ckf_values(const char *path, int k, const char *dset, const float *v, int64_t first, int64_t n);

/* The fp32 master values (the parameters; no optimizer state) of model m, unit by unit: put gets
 * unit u's numel values and must copy them before it returns. On this process alone, for
 * `zinf generate --checkpoint`. */
int zinf_ckf_read_params(const zinf_ckf *c, const zinf_model *m, int (*put)(void *ctx, int u, const float *vals),
                         void *ctx);

/* Every link of the three state groups is a tensor of model m. */
int zinf_ckf_no_extra(const zinf_ckf *c, const zinf_model *m);

/* Write a new checkpoint's layout to path (created or truncated): the root scalars and their
 * checksum, /meta/config, and every tensor's three datasets with their space allocated and not
 * written, their checksums 0 and their place in the model. offs[i] gets dataset i's byte offset
 * in the order unit, state, tensor; *size the bytes the file must hold. */
int zinf_ckf_create(const char *path, const zinf_ckpt_attrs *a, const char *cfg_json, const zinf_model *m,
                    int64_t *offs, int64_t *size);

/* Set the datasets' checksums (same order as offs) of a file zinf_ckf_create made. */
int zinf_ckf_set_sums(const char *path, const zinf_model *m, const uint64_t *sums);

/* No OpenMP parallel region from here on (a forked child's threads do not exist). */
void zinf_ckpt_serial_only(void);

/* bytes of a checkpoint of model m: the tensors' three fp32 states and an allowance for HDF5's
 * metadata and 1 MiB alignment */
int64_t zinf_ckpt_bytes(const zinf_model *m);

#endif
