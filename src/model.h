/* model: GPT-2 (learned positions, pre-LayerNorm, GELU-tanh, tied embeddings, biases, vocabulary
 * padded to a multiple of 128) as a list of units - the embedding, each block, the final LayerNorm
 * (the head has no parameters of its own: its product reads the embedding unit's wte) - each
 * unit's parameters one flat buffer with tensors as views at fixed offsets. Forward and backward
 * run on any backend; hooks around every unit use let ZeRO gather, release and reduce by unit. */
#ifndef ZINF_MODEL_H
#define ZINF_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"

typedef struct zinf_model_cfg {
    char name[64];      /* preset name or file */
    int n_layer, n_embd, n_head;
    int vocab_size;     /* real vocabulary V */
    int padded_vocab;   /* Vp: V rounded up to a multiple of 128 */
    int n_positions;    /* maximum sequence length */
} zinf_model_cfg;

/* A preset (gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, test-tiny, test-small, test-mini) or a JSON
 * file with HF config.json names (model_type "gpt2", n_layer, n_embd, n_head, vocab_size,
 * n_positions). */
int zinf_model_cfg_load(zinf_model_cfg *m, const char *name_or_path);
/* Non-embedding + embedding parameter count, with the padded vocabulary rows. */
int64_t zinf_model_num_params(const zinf_model_cfg *m);
/* The list of presets, for --help. */
const char *zinf_model_presets(void);

#define ZINF_MAX_UNIT_TENSORS 12

typedef struct zinf_tensor_view {
    char name[64];      /* e.g. "blocks.3.attn.qkv.weight" */
    int64_t offset;     /* elements from the unit's start */
    int64_t numel;
    int64_t shape[2];   /* rows, cols (cols 0 for vectors) */
    bool decay;         /* weight decay applies (2-D weights and embeddings, not biases/LN) */
    float init_std;     /* normal(0, std); 0 with init_one/zero */
    bool init_one;      /* LayerNorm weights */
} zinf_tensor_view;

typedef struct zinf_unit {
    char name[32];
    int ntensors;
    zinf_tensor_view t[ZINF_MAX_UNIT_TENSORS];
    int64_t numel;
} zinf_unit;

/* Tensor indices inside units. */
enum { ZINF_T_WTE = 0, ZINF_T_WPE = 1 };
enum { ZINF_T_LN1W = 0, ZINF_T_LN1B, ZINF_T_QKVW, ZINF_T_QKVB, ZINF_T_PROJW, ZINF_T_PROJB,
       ZINF_T_LN2W, ZINF_T_LN2B, ZINF_T_FCW, ZINF_T_FCB, ZINF_T_FCPROJW, ZINF_T_FCPROJB };
enum { ZINF_T_LNFW = 0, ZINF_T_LNFB = 1 };

/* Called by forward/backward around each unit's use. `phase` 0 = forward, 1 = backward.
 * acquire: the unit's parameters must be usable at params[u] when it returns.
 * release: the unit is not needed until its next acquire.
 * grad_ready (backward only): the unit's gradient grads[u] is complete for this micro-step.
 * The use order is static: forward 0, 1..L, L+1, 0 (tied head); backward 0 (head), L+1, L..1, 0. */
typedef struct zinf_unit_hooks {
    void *ctx;
    int (*acquire)(void *ctx, int u, int phase);
    int (*release)(void *ctx, int u, int phase);
    int (*grad_ready)(void *ctx, int u);
} zinf_unit_hooks;

/* Activation checkpointing. FULL keeps each block's input (the residual stream) and recomputes the
 * block in the backward, up to the MLP's GELU. KEEP_ATTN also keeps each block's attention output
 * and log-sum-exp (per token C compute-dtype elements and n_head floats), so the recomputation
 * skips attention, the one product that runs far below the GEMMs' rate. All three give the same
 * bits: the kernels are deterministic. */
typedef enum { ZINF_RECOMPUTE_NONE, ZINF_RECOMPUTE_FULL, ZINF_RECOMPUTE_KEEP_ATTN } zinf_recompute;
/* Under FULL or KEEP_ATTN only the first `blocks` blocks may be recomputed; the later ones keep
 * every activation (their own set each), so a memory budget between none and all is met by
 * recomputing as few blocks as it needs. The bits are the same for every count. */

typedef struct zinf_model {
    zinf_model_cfg c;
    zinf_backend *be;
    int nunits;          /* L + 2 */
    zinf_unit *units;
    int64_t num_params;  /* sum of unit numel */
    void **params;       /* [nunits] compute-dtype unit buffers; set by the owner (ZeRO) */
    void **grads;        /* [nunits] compute-dtype gradient buffers; set by the owner */

    /* activations for B x T */
    int B, T;
    zinf_recompute recompute; /* activation checkpointing policy (below) */
    int recompute_blocks;     /* blocks 0..recompute_blocks-1 are recomputed (NONE: 0) */
    void *act_mem, *grad_mem; size_t act_bytes, grad_bytes;
    void *encoded;       /* residual stream entries: res[l] is block l's input, res[L] the last */
    void **res;
    struct zinf_layer_acts *layers; /* per layer (all alias one set when recomputing, except the
                                     * attention output and LSE under ZINF_RECOMPUTE_KEEP_ATTN) */
    void *lnf; float *lnf_mean, *lnf_rstd;
    void *logits;        /* [B*T, Vp] */
    float *losses;       /* [B*T] */
    int32_t *tokens, *targets; /* [B*T] in device memory */
    int64_t nvalid;      /* targets >= 0 in the last forward */
    bool logits_hold_grad; /* the last forward was zinf_model_forward_train */
    /* gradient scratch */
    void *d_res, *d_ln, *d_qkv, *d_atty, *d_fch;
    float *host_losses;
} zinf_model;

/* Build the unit layout (no parameter memory: the owner allocates params[u]/grads[u]). */
int zinf_model_init(zinf_model *m, const zinf_model_cfg *c, zinf_backend *be);
/* Allocate activations for micro-batch B and sequence length T, every block recomputed under
 * FULL or KEEP_ATTN; the _n form recomputes the first `blocks` (0..n_layer) only. */
int zinf_model_alloc_acts(zinf_model *m, int B, int T, zinf_recompute recompute);
int zinf_model_alloc_acts_n(zinf_model *m, int B, int T, zinf_recompute recompute, int blocks);
void zinf_model_free(zinf_model *m);
/* The bytes zinf_model_alloc_acts allocates for activations and for their gradient scratch, for
 * a model of config c, micro-batch B, sequence length T and es-byte compute elements, without a
 * backend (zinf estimate). */
int zinf_model_act_bytes(const zinf_model_cfg *c, int B, int T, size_t es, zinf_recompute recompute,
                         size_t *acts, size_t *grads);
int zinf_model_act_bytes_n(const zinf_model_cfg *c, int B, int T, size_t es, zinf_recompute recompute,
                           int blocks, size_t *acts, size_t *grads);
/* The fewest blocks to recompute under `recompute` (FULL or KEEP_ATTN) for the activations and
 * their gradient scratch to fit in `budget` bytes: *blocks in 0..n_layer. When even recomputing
 * every block does not fit, an error that says how much they need. */
int zinf_model_recompute_fit(const zinf_model_cfg *c, int B, int T, size_t es, zinf_recompute recompute,
                             size_t budget, int *blocks);

/* Fill `out` (numel elements of unit u, fp32 host memory) with the deterministic initial values
 * of elements [first, first+count) of the unit: normal(0, 0.02) weights, 0.02/sqrt(2L) for the
 * residual projections, zero biases, unit LayerNorm weights, zero padded vocabulary rows. Each
 * element depends only on (seed, unit, tensor, index), so any shard can be made alone. */
void zinf_model_init_params(const zinf_model *m, int u, uint64_t seed, int64_t first, int64_t count,
                            float *out);

/* Forward for tokens/targets (host int32 arrays of B*T; targets may be NULL: logits only).
 * Returns 0 or negative; *mean_loss is the mean over non-ignored targets (when targets given). */
int zinf_model_forward(zinf_model *m, const int32_t *tokens, const int32_t *targets,
                       const zinf_unit_hooks *h, float *mean_loss);
/* Forward of a training micro-step: as zinf_model_forward with targets, but the fused
 * cross-entropy also leaves the loss gradient (scaled by dloss_scale) in the logits, so the
 * backward that must follow starts from it (one pass over the logits instead of two). */
int zinf_model_forward_train(zinf_model *m, const int32_t *tokens, const int32_t *targets,
                             const zinf_unit_hooks *h, float dloss_scale, float *mean_loss);
/* Backward after a forward with targets: gradients ACCUMULATE into grads[u], scaled by
 * dloss_scale (d mean_loss multiplier: e.g. loss_scale / grad_accum; ignored after
 * zinf_model_forward_train, which applied it). */
int zinf_model_backward(zinf_model *m, const zinf_unit_hooks *h, float dloss_scale);

#endif
