/* ckpt_tool: `zinf ckpt info|verify|export` (man/zinf-ckpt.1). Reads a checkpoint written by
 * zinf_ckpt_save on one process, without MPI (HDF5's default file driver), one block of a tensor
 * at a time, so a checkpoint far larger than memory can be checked and converted:
 *   info:   the run's scalars, the model shape, the stored config and the tensors;
 *   verify: every dataset of /master, /optim/m and /optim/v against its checksum attribute;
 *   export: the fp32 master weights as a Hugging Face GPT-2 directory (config.json and
 *           model.safetensors) or as one HDF5 file of zinf's tensors, in fp32, bf16 or fp16.
 * Every function reports to `out` and returns 0 or a negative status with the message recorded
 * (zinf_err): the file and the cause. */
#ifndef ZINF_CKPT_TOOL_H
#define ZINF_CKPT_TOOL_H

#include <stdio.h>

#include "kernels.h" /* zinf_dtype */

/* `spec` is a checkpoint file, or a directory whose `latest` names one (zinf_ckpt_resolve). */
int zinf_ckpt_info(const char *spec, FILE *out);
int zinf_ckpt_verify(const char *spec, FILE *out);

typedef enum { ZINF_EXPORT_SAFETENSORS = 0, ZINF_EXPORT_HDF5 = 1 } zinf_export_format;

/* Write dir/config.json and dir/model.safetensors, or dir/weights.h5 (dir is created when
 * missing). Each file is written as NAME.tmp and renamed once complete; on failure no output
 * file is left. Every tensor's checksum is checked as it is read: a corrupted checkpoint exports
 * nothing. */
/* The export runs in a child process (see zinf_ckpt_isolated), killed after timeout_s (0: never). */
int zinf_ckpt_export(const char *spec, const char *dir, zinf_export_format fmt, zinf_dtype dt, FILE *out,
                     double timeout_s);

#endif
