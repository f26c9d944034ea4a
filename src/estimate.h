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
 * top of estimate.c and in zinf-estimate(1). Activations are not in the table (DeepSpeed's
 * estimators leave them out too: they depend on batch size, sequence length and checkpointing);
 * zinf_estimate_print_acts gives them for a micro-batch (--micro-batch).
 * --precision fp32 counts fp32 training instead, as zinf's CPU backend does it (4 + 4 + 8 bytes
 * per parameter, no separate master), per unit with the padding, to the byte of what zero.c
 * allocates (zinf_estimate_rank_states_fp32). */
#ifndef ZINF_ESTIMATE_H
#define ZINF_ESTIMATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "model.h"

/* Where an offloaded state lives: same values as zinf_offload_device. */
enum { ZINF_EST_NONE = 0, ZINF_EST_CPU = 1, ZINF_EST_NVME = 2 };

/* The precision the states are counted in: the paper's mixed precision (16-bit params and grads,
 * fp32 master + m + v: 2 + 2 + 12 bytes per parameter; --precision mixed), fp32 training as
 * zinf's engine does it (4-byte params and grads, Adam m + v 8 bytes, no separate master: it is
 * the fp32 parameters themselves; the CPU backend, or a GPU run without bf16/fp16), or zinf's
 * engine with 16-bit compute (bf16/fp16 on a GPU: 16-bit params, fp32 gradient accumulators,
 * fp32 master + m + v: 2 + 4 + 12 bytes per parameter, per unit with the padding). */
enum { ZINF_EST_MIXED = 0, ZINF_EST_FP32 = 1, ZINF_EST_ENGINE16 = 2 };

/* The state categories of one rank, in the order (and with the meaning) of zinf_mem_kind in
 * zero.h, so that they can be compared with the mem_* bytes a run reports. */
enum {
    ZINF_EST_PARAM = 0,   /* full parameters (stages 0-2; stage 3 only while gathered) */
    ZINF_EST_PARAM_SHARD, /* stage 3: this rank's parameter shard */
    ZINF_EST_GRAD,        /* full gradients (stages 0-1; stages 2-3 only during the backward) */
    ZINF_EST_GRAD_ACC,    /* stages 2-3: gradient partition (fp32 accumulators in fp32 mode) */
    ZINF_EST_MASTER,      /* fp32 master weights (0 in fp32 mode: they alias the parameters) */
    ZINF_EST_ADAM,        /* Adam m and v */
    ZINF_EST_COMM,        /* bucket and staging buffers: 0 at rest */
    ZINF_EST_NKINDS
};

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
    double gpu_step_buffers;    /* the part of gpu_buffers that exists only while a step runs (the
                                 * buckets; at stage 3 the gathered units and a unit's gradient):
                                 * what "auto" recompute keeps free beside the activations */
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

/* The largest unit of the model (the grain zinf gathers by), the first in unit order of the
 * largest size, from the model's own layout (zinf_model_init without a backend); for GPT-2 the
 * embedding unit wte + wpe (padded_vocab x C + n_positions x C) or a block (12C^2 + 13C). *name
 * (may be NULL) is set to a static description ("transformer block"). Negative on error. */
int64_t zinf_estimate_largest_unit(const zinf_model_cfg *m, const char **name);

/* The model states one rank of a world of `world` ranks holds at rest (after a step), in bytes,
 * exactly as zinf's ZeRO engine allocates them: each unit of the model's layout (GPT-2's
 * embedding wte + wpe, each block, the final LayerNorm) is split on its own; from stage 1 on its n elements are padded to
 * pn = ceil(n / world) x world and each rank owns p = pn / world of them (stage 0: pn = p = n).
 * Summed over the units, for fp32 (the CPU backend; zero.c reports the same numbers):
 *   stage 0: param 4n, grad 4n, adam 8n
 *   stage 1: param 4pn, grad 4pn, adam 8p
 *   stage 2: param 4pn, grad_acc 4p, adam 8p       (full gradients only during the backward)
 *   stage 3: param_shard 4p, grad_acc 4p, adam 8p  (gathered units only while in use)
 * master is 0 (it aliases the fp32 parameters) and comm is 0 (buffers are freed at rest).
 * Returns 0 or ZINF_EINVAL (stage outside 0-3, world < 1, no model). */
int zinf_estimate_rank_states_fp32(const zinf_model_cfg *m, int stage, int world,
                                   int64_t bytes_out[ZINF_EST_NKINDS]);

/* The same per-unit accounting for any precision: fp32 as above; mixed as the paper counts
 * (16-bit param 2pn / param_shard 2p, grad 2pn / grad_acc 2p, master 4p, adam 8p; at stage 0
 * master 4n and adam 8n), i.e. the paper's formula plus the padding; the 16-bit engine's by
 * zero.c's rules (zinf_zero_grad_bytes: fp32 accumulators grad_acc 4pn / 4p, except the 16-bit
 * gradients themselves, grad 2n, at stage 0 on one rank with gas, the micro-steps a step, 1). */
int zinf_estimate_rank_states(const zinf_model_cfg *m, int precision, int stage, int world, int64_t gas,
                              int64_t bytes_out[ZINF_EST_NKINDS]);

/* zinf_estimate for either precision (zinf_estimate is precision ZINF_EST_MIXED). For fp32 the
 * model states are zinf_estimate_rank_states_fp32's exact bytes (params = param + param_shard,
 * grads = grad + grad_acc, optim = master + adam); an offloaded optimizer takes Adam m + v and an
 * fp32 master of the shard (4p) with it, unless the parameter shard is offloaded to the same
 * device (stage 3), where the master is that shard. Buffers in the compute dtype (buckets,
 * gathered units, the unit gradient) count 4 bytes per element instead of 2, and the fp32
 * gradient tile is counted only with optimizer offload (in fp32 the step needs no conversion). */
int zinf_estimate_prec(const zinf_model_cfg *m, int precision, int stage, int off_opt,
                       int off_param, int nodes, int gpus_per_node, int64_t largest_layer_params,
                       const zinf_config *cfg, zinf_mem_estimate *out);

/* Print the header and the table: every valid stage x offload row, or, with cfg, only the row
 * of cfg's stage and offload devices (marked "*"). Returns 0 or ZINF_EINVAL / ZINF_EIO. */
int zinf_estimate_print(FILE *out, const zinf_model_cfg *m, const zinf_config *cfg_or_NULL,
                        int nodes, int gpus_per_node);
/* The same in the given precision; stage >= 0 (only without a config) prints only that stage's
 * row without offload, -1 every row. */
int zinf_estimate_print_prec(FILE *out, const zinf_model_cfg *m, const zinf_config *cfg_or_NULL,
                             int nodes, int gpus_per_node, int precision, int stage);

/* One line "param=B param_shard=B grad=B grad_acc=B master=B adam=B comm=B total=B" (bytes,
 * zinf_estimate_rank_states), prefixed "stage=S " when prefix_stage; with a config, followed by
 * the same model states by place, " device=B host=B nvme=B", each unit placed by the engine's
 * own rule (zinf_zero_places; fp32: the master is the parameters where both share a place).
 * Returns 0 or an error. */
int zinf_estimate_print_bytes(FILE *out, const zinf_model_cfg *m, int precision, int stage,
                              int world, int prefix_stage, const zinf_config *cfg_or_NULL);
/* Activation memory per GPU for micro-batch micro of T tokens (recompute: 0 none, 1 full, 2
 * keep-attention; blocks: how many are recomputed, as activation_checkpointing.zinf_recompute_blocks
 * says, -1 every one): "act=A act_grad=G" when bytes, else a sentence, and under recompute what
 * each block kept instead of recomputed adds. The model's activation buffers only: the CUDA
 * backend's own scratch (which also grows with micro x T) is not in it. */
int zinf_estimate_print_acts(FILE *out, const zinf_model_cfg *m, int precision, int micro, int T,
                             int recompute, int blocks, int bytes);

/* What `zinf estimate` prints (cli.c fills it from the command line). */
typedef struct zinf_estimate_opts {
    const char *model;                /* preset or HF config.json; required */
    const char *config;               /* DeepSpeed config: only its row, its buffer sizes; or NULL */
    int64_t nodes, gpus_per_node;     /* 1 to 1000000 each; default 1 */
    const char *precision;            /* "mixed" (the paper's), "fp32", or NULL: what the engine
                                       * holds in the precision --bf16/--fp16 or the config pick, as
                                       * zinf train would (fp32 when neither says 16-bit) */
    bool bf16, fp16;                  /* --bf16, --fp16 as zinf train takes them */
    int64_t stage;                    /* with stage_set: only this stage's row (0-3), no offload */
    bool stage_set;
    bool print_bytes;                 /* exact bytes per rank instead of the table */
    int64_t micro_batch;              /* with micro_batch_set: also the activations (1 to 1000000) */
    bool micro_batch_set;
    int64_t seq_len;                  /* with seq_len_set: tokens per sequence; else n_positions */
    bool seq_len_set;
    const char *recompute;            /* "none", "full", "keep-attention"; NULL: none, or full
                                       * when the config has an activation_checkpointing block */
} zinf_estimate_opts;

void zinf_estimate_opts_defaults(zinf_estimate_opts *o);

/* Check the options and print the table (or the bytes, and the activations) to out; the config's
 * warnings go to notes (may be NULL). Needs no MPI. Returns 0, or an error whose message names
 * the flag at fault (as --name) and the value. */
int zinf_estimate_run(const zinf_estimate_opts *o, FILE *out, FILE *notes);

#endif
