/* estimate: `zinf estimate` - how much GPU, host and NVMe memory the model states (parameters,
 * gradients, optimizer states) and ZeRO's working buffers take per GPU and per node, for every
 * ZeRO stage and offload choice, before anything is allocated. Pure arithmetic: no MPI, no
 * backend. The model-state part is the ZeRO paper's mixed-precision Adam accounting (K = 12):
 *
 *     16-bit parameters 2Psi, 16-bit gradients 2Psi, fp32 master + Adam m + v = 12Psi
 *     stage 0: 16Psi    stage 1: 4Psi + 12Psi/N    stage 2: 2Psi + 14Psi/N    stage 3: 16Psi/N
 *
 * per GPU, N = nodes x gpus_per_node. The buffers on top of that are defined (with the reasons,
 * and where the figures differ from DeepSpeed's estimate_zero{2,3}_model_states_mem_needs) at the
 * top of estimate.c and in zinf-estimate(1). Activations are not counted (DeepSpeed's estimators
 * leave them out too: they depend on batch size, sequence length and checkpointing). */
#ifndef ZINF_ESTIMATE_H
#define ZINF_ESTIMATE_H

#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "model.h"

/* Where an offloaded state lives: same values as zinf_offload_device. */
enum { ZINF_EST_NONE = 0, ZINF_EST_CPU = 1, ZINF_EST_NVME = 2 };

typedef struct zinf_mem_estimate {
    int stage;
    int offload_optimizer;      /* 0 none, 1 cpu, 2 nvme */
    int offload_param;          /* 0 none, 1 cpu, 2 nvme (stage 3 only) */
    /* where the bytes live */
    double gpu_bytes;           /* per GPU: model states kept on the GPU + GPU buffers */
    double cpu_bytes_per_node;  /* host memory of one node: its gpus_per_node ranks' shares */
    double nvme_bytes_per_node; /* NVMe of one node */
    /* what they are, per GPU (each counted once, wherever it lives) */
    double params, grads, optim; /* model states: their sum is the paper's formula exactly */
    double buffers;             /* working buffers = gpu_buffers + cpu_buffers */
    double gpu_buffers, cpu_buffers; /* per GPU */
} zinf_mem_estimate;

/* The model-state part alone, for a raw parameter count psi (so the paper's 7.5B example can be
 * checked): fills stage, offload_*, params, grads, optim and their placement in gpu_bytes,
 * cpu_bytes_per_node, nvme_bytes_per_node; buffers are 0. off_opt_ratio is the fraction of the
 * optimizer states that offload_optimizer moves (1.0; DeepSpeed's partial offload "ratio" < 1 is
 * stage 3 only). Returns 0 or ZINF_EINVAL for a combination DeepSpeed refuses (optimizer offload
 * needs stage >= 1, NVMe optimizer offload and parameter offload need stage 3). */
int zinf_estimate_states(double psi, int stage, int off_opt, int off_param, double off_opt_ratio,
                         int nodes, int gpus_per_node, zinf_mem_estimate *out);

/* Model states plus working buffers for model m. largest_layer_params: the biggest unit's
 * parameter count (zinf_estimate_largest_unit; <= 0 means compute it from m). cfg may be NULL:
 * the buffer sizes are then DeepSpeed's defaults. Returns 0 or ZINF_EINVAL. */
int zinf_estimate(const zinf_model_cfg *m, int stage, int off_opt, int off_param, int nodes,
                  int gpus_per_node, int64_t largest_layer_params, const zinf_config *cfg,
                  zinf_mem_estimate *out);

/* The largest unit of a GPT-2 model (the grain zinf gathers by): the embedding unit wte + wpe
 * (padded_vocab x C + n_positions x C), a block (12C^2 + 13C) or the final LayerNorm (2C).
 * *name (may be NULL) is set to a static description. */
int64_t zinf_estimate_largest_unit(const zinf_model_cfg *m, const char **name);

/* Print the header and the table: every valid stage x offload row, or, with cfg, only the row
 * of cfg's stage and offload devices (marked "*"). Returns 0 or ZINF_EINVAL / ZINF_EIO. */
int zinf_estimate_print(FILE *out, const zinf_model_cfg *m, const zinf_config *cfg_or_NULL,
                        int nodes, int gpus_per_node);

/* `zinf estimate --model M [--config C] [--nodes N] [--gpus-per-node G] [--help]`. argv[0] is
 * skipped (the program or subcommand name), and so is a following "estimate", so both
 * (argc, argv) of the process and (argc - 1, argv + 1) work. Prints "zinf: error: ..." and
 * returns 1 on bad input; 0 otherwise. Needs no MPI. */
int zinf_estimate_main(int argc, char **argv);

#endif
