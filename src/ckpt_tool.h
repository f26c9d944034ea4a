/* ckpt_tool: `zinf ckpt info|verify|export` (man/zinf-ckpt.1). Reads a checkpoint written by
 * zinf_ckpt_save on one process, without MPI (HDF5's default file driver), one block of a tensor
 * at a time, so a checkpoint far larger than memory can be checked and converted:
 *   info:   the run's scalars, the model shape, the stored config and the tensors;
 *   verify: every dataset of /master, /optim/m and /optim/v against its checksum attribute;
 *   export: the fp32 master weights as a Hugging Face directory (config.json,
 *           generation_config.json, model.safetensors or shards and their index, through
 *           io/safetensors; man/zinf-hf.5) or as one HDF5 file of zinf's tensors, in fp32, bf16
 *           or fp16.
 * Every function reports to `out` and returns 0 or a negative status with the message recorded
 * (zinf_err): the file and the cause. */
#ifndef ZINF_CKPT_TOOL_H
#define ZINF_CKPT_TOOL_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt_file.h"
#include "kernels.h" /* zinf_dtype */

/* `spec` is a checkpoint file, or a directory whose `latest` names one (zinf_ckpt_resolve). */
/* Resolve spec and open the file read-only (zinf_ckf_open; zinf_ckf_close it, also after a
 * failure once k->f >= 0): one line naming spec when there is no checkpoint there. */
int zinf_ckpt_open_spec(const char *spec, zinf_ckf *k);
int zinf_ckpt_info(const char *spec, FILE *out);
int zinf_ckpt_verify(const char *spec, FILE *out);

/* ZINF_EXPORT_HF: `--format hf`, also spelled safetensors */
typedef enum { ZINF_EXPORT_HF = 0, ZINF_EXPORT_HDF5 = 1 } zinf_export_format;

typedef struct zinf_export_opts {
    zinf_export_format fmt;
    zinf_dtype dt;
    uint64_t max_shard; /* HF: the most bytes of tensor data in one shard; 0 is HF's "5GB" */
} zinf_export_opts;

/* Write dir/config.json, dir/generation_config.json and the weights (dir/model.safetensors, or
 * shards dir/model-0000K-of-0000N.safetensors and dir/model.safetensors.index.json when they pass
 * max_shard; a fused zinf tensor as its HF parts, a tied head left out), or dir/weights.h5 (dir is
 * created when missing). Each file is written as NAME.tmp and renamed once all are complete; on
 * failure no output file is left. Every tensor's checksum is checked as it is read: a corrupted
 * checkpoint exports nothing. */
/* The export runs in a child process (see zinf_ckpt_isolated), killed after timeout_s (0: never). */
int zinf_ckpt_export(const char *spec, const char *dir, const zinf_export_opts *x, FILE *out, double timeout_s);

#endif
