/* model: what every model family shares. A model is a list of units - for GPT-2 the embedding,
 * each block, the final LayerNorm - each unit's parameters one flat buffer with tensors as views
 * at fixed offsets. model.c keeps the units, counter-based init, activation sizing (the carver),
 * the loss and the recompute fit; the architecture (tensor table, unit use order, activations,
 * forward and backward, Hugging Face names) is the family's, behind src/family.h, and the model
 * reaches it only through that table (src/models/registry.c maps model_type to it). Forward and
 * backward run on any backend; hooks around every unit use let ZeRO gather, release and reduce by
 * unit. */
#ifndef ZINF_MODEL_H
#define ZINF_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"

struct zinf_family;

/* The fields every family has come first; GPT-2 reads only those. The rest are for the families
 * after it (Llama, Qwen): 0 means the family's own value, and GPT-2's loader fills in its fixed
 * ones so that generic code may read them. */
typedef struct zinf_model_cfg {
    char name[64];       /* preset name or file */
    char model_type[32]; /* HF's model_type, naming the family; "" is "gpt2" (a config made by hand) */
    int n_layer;         /* blocks */
    int n_embd;          /* hidden size C */
    int n_head;          /* query heads */
    int vocab_size;      /* real vocabulary V */
    int padded_vocab;    /* Vp: V rounded up to a multiple of 128 */
    int n_positions;     /* maximum sequence length */
    int n_kv_head;       /* key/value heads (GQA); GPT-2: n_head */
    int head_dim;        /* GPT-2: n_embd / n_head */
    int d_ff;            /* the MLP's inner width; GPT-2: 4 n_embd */
    double norm_eps;     /* the norms' epsilon; GPT-2's LayerNorm: 1e-5 */
    double rope_theta;   /* RoPE base; 0 without RoPE (GPT-2: learned positions) */
    bool tie_embeddings; /* the head reads the token embedding; GPT-2: true */
    bool bias;           /* the linear layers have biases; GPT-2: true */
    /* the Llama family (llama, qwen2, qwen3, mistral); GPT-2 leaves them 0 */
    int rope_type;       /* ZINF_ROPE_*: how inv_freq is scaled */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor; /* llama3 (factor: also linear) */
    int rope_original_max; /* llama3's original_max_position_embeddings */
    bool qkv_bias;       /* q/k/v projections have biases (Qwen2; Llama's and Qwen3's attention_bias) */
    bool o_bias;         /* the output projection has one (Llama's and Qwen3's attention_bias) */
    bool mlp_bias;       /* gate/up/down have biases (Llama's mlp_bias) */
    bool qk_norm;        /* per-head RMSNorm of q and k before RoPE (Qwen3) */
    int sliding_window;  /* an active sliding attention window (0: none): refused when shorter than T */
    int pad_token_id;    /* its embedding row gets no gradient, as nn.Embedding's padding_idx (-1: none) */
    double init_std;     /* initializer_range */
} zinf_model_cfg;

enum { ZINF_ROPE_NONE = 0, ZINF_ROPE_DEFAULT, ZINF_ROPE_LLAMA3, ZINF_ROPE_LINEAR };

/* config.json's name for n_positions in c's family ("n_positions" for GPT-2,
 * "max_position_embeddings" for the Llama family), for messages about the limit. */
const char *zinf_model_positions_key(const zinf_model_cfg *c);

/* The model's shape for reports (zinf estimate, ckpt info): its family's fields under config.json's
 * names, in the family's order ("num_hidden_layers 16, hidden_size 2048, ..."; the padded vocabulary
 * beside vocab_size), cut into lines of at most `width` columns at a field, each line after the
 * first starting with `indent` spaces. NULL (and an error message) when it cannot be made. */
char *zinf_model_describe(const zinf_model_cfg *c, int indent, int width);

/* A preset (zinf_model_presets) or a JSON file with HF config.json names: model_type (default
 * "gpt2") names the family, which reads its fields (GPT-2: n_layer, n_embd, n_head, vocab_size,
 * n_positions). */
int zinf_model_cfg_load(zinf_model_cfg *m, const char *name_or_path);
/* The same from a parsed config.json object (jansson's); src names it in messages. */
struct json_t;
int zinf_model_cfg_from_json(zinf_model_cfg *m, struct json_t *config, const char *src);
/* The parameter count of the model's units, with the padded vocabulary rows; negative (and an
 * error message) when the layout cannot be built. */
int64_t zinf_model_num_params(const zinf_model_cfg *m);
/* The list of presets of every family, for --help. */
const char *zinf_model_presets(void);

#define ZINF_MAX_UNIT_TENSORS 12

typedef struct zinf_tensor_view {
    char name[64];      /* e.g. "blocks.3.attn.qkv.weight" */
    int64_t offset;     /* elements from the unit's start */
    int64_t numel;
    int64_t shape[2];   /* rows, cols (cols 0 for vectors) */
    int64_t init_rows;  /* rows drawn at init; the rest (GPT-2's padded vocabulary rows) are zero */
    bool decay;         /* weight decay applies (2-D weights and embeddings, not biases/LN) */
    float init_std;     /* normal(0, std); 0 with init_one/zero */
    bool init_one;      /* LayerNorm weights */
    bool trainable;     /* the optimizer updates it (every tensor today; frozen bases come with LoRA) */
} zinf_tensor_view;

typedef struct zinf_unit {
    char name[32];
    const char *what;   /* what the unit is, for messages: "transformer block" */
    int ntensors;
    zinf_tensor_view t[ZINF_MAX_UNIT_TENSORS];
    int64_t numel;
    bool trainable;     /* all its tensors are (a unit is all trainable or all frozen) */
} zinf_unit;

/* One use of a unit by forward (phase 0) or backward (phase 1). */
typedef struct zinf_use { int u, phase; } zinf_use;

/* A micro-batch: B rows of T tokens (host int32 arrays of B*T). tgt < 0 is not predicted; tgt
 * NULL: logits only. pos[i] (token i's position) and kv_start[i] (where in its row token i's
 * sample starts, the first token its attention sees) describe samples packed into rows: then
 * pos[i] = i % T - kv_start[i]. NULL is one sample per row (pos[i] = i % T, kv_start[i] = 0), the
 * only kind GPT-2 takes today: it refuses others. */
typedef struct zinf_batch {
    const int32_t *tok, *tgt, *pos, *kv_start;
    int B, T;
    /* logits only (tgt NULL), for generation: the head runs for rows head_at[0..head_n) alone
     * (indices into the B*T tokens), row head_at[i] landing in m->logits' row i, so a step costs
     * head_n rows of the vocabulary product instead of B*T; head_n 0 is every row */
    const int64_t *head_at;
    int64_t head_n;
} zinf_batch;

/* Called by forward/backward around each unit's use. `phase` 0 = forward, 1 = backward.
 * acquire: the unit's parameters must be usable at params[u] when it returns.
 * release: the unit is not needed until its next acquire.
 * grad_ready (backward only): the unit's gradient grads[u] is complete for this micro-step.
 * The use order is static, the family's: zinf_model_use_order. */
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
    const struct zinf_family *f; /* the architecture (family.h) */
    zinf_backend *be;
    int nunits;          /* GPT-2: L + 2 */
    zinf_unit *units;
    int64_t num_params;  /* sum of unit numel */
    void **params;       /* [nunits] compute-dtype unit buffers; set by the owner (ZeRO) */
    void **grads;        /* [nunits] compute-dtype gradient buffers; set by the owner */
    /* [nunits] all false unless the owner sets one: grads[u] then holds nothing of this step and was
     * not zeroed. The unit's first backward write takes the flag (zinf_grad_first) and overwrites
     * (matmul_bwd's acc 0) or zeroes what it writes; the product then reads no zeros. */
    bool *grad_fresh;

    /* activations for B x T */
    int B, T;
    zinf_recompute recompute; /* activation checkpointing policy (below) */
    int recompute_blocks;     /* blocks 0..recompute_blocks-1 are recomputed (NONE: 0) */
    void *act_mem, *grad_mem; size_t act_bytes, grad_bytes;
    void *acts;          /* the family's activations and gradient scratch (its own struct) */
    void *logits;        /* [head_rows, Vp]: all B*T rows, or one chunk of them (below) */
    int64_t head_rows;   /* the head's logits are computed this many rows at a time: B*T when they fit
                          * ZINF_LOGITS_BUDGET bytes, else fewer (a 152k vocabulary at 32k tokens) */
    float *losses;       /* [B*T] */
    int32_t *tokens, *targets; /* [B*T] in device memory */
    int64_t nvalid;      /* targets >= 0 in the last forward */
    bool logits_hold_grad; /* the last forward was a training one: the last chunk's logits (all of them when
                            * they fit at once) hold their loss gradient */
    void *head_dw;       /* [Vp, C] in the gradient scratch where the head runs in chunks: the weight
                          * gradient of the chunks before the last, which a training forward runs */
    bool head_early;     /* the last training forward ran those chunks' head backward */
    float *host_losses;
    zinf_use *uses;      /* zinf_model_use_order's list, made once: nuses uses, the first nfwd forward's
                          * (the last of them the head's); ZeRO's plan and the forward steps follow it */
    int nuses, nfwd;
    bool ctx;            /* a context (zinf_model_ctx_alloc): units, params and grads are its model's */
    bool lean;           /* the blocks that keep their activations keep neither norm's output nor the MLP's
                          * product: their backward recomputes them from what is kept (the Llama family;
                          * others keep them whatever this says). The same bits: the kernels are
                          * deterministic. */
} zinf_model;

/* Bytes of compute-dtype logits held at once; past it the head runs in row chunks. A training
 * forward computes each chunk's losses and loss gradient and runs the head backward of every chunk
 * but the last while its gradient is in the logits (into head_dw and the head input's gradient);
 * the backward runs the last chunk's and adds head_dw. A forward without a loss gradient (an
 * evaluation) computes the losses only, and a backward after it computes each chunk's logits
 * again. */
#define ZINF_LOGITS_BUDGET ((size_t)2 << 30)
/* The rows of logits held at once for N rows of Vp columns of es bytes: as many as the budget
 * holds, and no more than ZINF_HEAD_ROWS where that is set (for tests only: the chunked head at
 * tiny shapes, whose logits never reach the budget). */
int64_t zinf_model_head_rows(int64_t N, int Vp, size_t es);
/* ZINF_HEAD_ROWS: *rows 0 where it is unset or empty, else its value; an error (the message
 * naming it) for anything but an integer >= 1. */
int zinf_head_rows_env(int64_t *rows);

/* Build the unit layout of c's family (no parameter memory: the owner allocates params[u] and
 * grads[u]). be may be NULL for a model that is only a layout (estimate, ckpt tools). */
int zinf_model_init(zinf_model *m, const zinf_model_cfg *c, zinf_backend *be);
/* The order in which forward, then backward, use the units (ZeRO's stage-3 plan). With out NULL
 * only counts; else fills out[0..cap). Returns the number of uses of forward + backward (or a
 * negative error) and sets *nfwd to the number of forward's, which come first. */
int zinf_model_use_order(const zinf_model *m, zinf_use *out, int cap, int *nfwd);
/* The most gradient elements of units alive at once in a backward pass, in use order: ZeRO takes
 * a unit's full gradient at its first backward use and gives it up after its last (a tied
 * embedding's, from the head's backward to the embedding's, beside each block's). zinf estimate
 * counts it. Returns the count or a negative error. */
int64_t zinf_model_grad_live_max(const zinf_model *m);
/* Model FLOPs of one training token (forward and backward) at sequence length T. */
double zinf_model_flops_per_token(const zinf_model *m, int T);
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
/* zinf_model_act_bytes_n for a model whose `lean` is as given (zinf_model.lean) */
int zinf_model_act_bytes_lean(const zinf_model_cfg *c, int B, int T, size_t es, zinf_recompute recompute, int blocks,
                              bool lean, size_t *acts, size_t *grads);
int zinf_model_act_bytes_n(const zinf_model_cfg *c, int B, int T, size_t es, zinf_recompute recompute,
                           int blocks, size_t *acts, size_t *grads);
/* The fewest blocks to recompute under `recompute` (FULL or KEEP_ATTN) for the activations and
 * their gradient scratch to fit in `budget` bytes: *blocks in 0..n_layer. With `lean` non-NULL
 * the activations may be lean (zinf_model.lean) where the family has lean ones: *lean says
 * whether they are, and they are where that fits a run that otherwise does not, or recomputes
 * enough fewer blocks to pay for the kept blocks' elementwise recomputation (zinf_lean_pays).
 * When even recomputing every block does not fit, an error that says how much they need. */
int zinf_model_recompute_fit(const zinf_model_cfg *c, int B, int T, size_t es, zinf_recompute recompute,
                             size_t budget, bool *lean, int *blocks);
/* Whether lean activations that recompute `lean_blocks` of the blocks beat full ones that
 * recompute `full_blocks`: a kept lean block's backward recomputes its two RMSNorms and SwiGLU,
 * (4C + 3F) es bytes a token read and written, while a block's forward is about 2 (4C^2 + 3CF)
 * FLOPs a token; at a GPU's ZINF_GPU_FLOP_PER_BYTE (bf16 GEMM rate over memory bandwidth) the
 * former costs es ZINF_GPU_FLOP_PER_BYTE / (2C) of the latter. So lean pays where
 * (full_blocks - lean_blocks) 2C > (n_layer - lean_blocks) es ZINF_GPU_FLOP_PER_BYTE. (Lean, the
 * recomputed blocks' backward also recomputes their first RMSNorm, a third of that work; the rule
 * leaves it out. The balance is bf16's: in fp32 the GEMMs are slower and the rule errs to full.) */
#define ZINF_GPU_FLOP_PER_BYTE 200 /* H100/H200: ~800 TFLOP/s of bf16 GEMM, 3.4-4.8 TB/s */
bool zinf_lean_pays(const zinf_model_cfg *c, size_t es, int full_blocks, int lean_blocks);

/* Fill `out` (numel elements of unit u, fp32 host memory) with the deterministic initial values
 * of elements [first, first+count) of the unit: normal(0, 0.02) weights, 0.02/sqrt(2L) for the
 * residual projections, zero biases, unit LayerNorm weights, zero padded vocabulary rows. Each
 * element depends only on (seed, unit, tensor, index), so any shard can be made alone. */
void zinf_model_init_params(const zinf_model *m, int u, uint64_t seed, int64_t first, int64_t count,
                            float *out);

/* Forward of a batch b (b->B and b->T those of the activations). With dloss_scale != 0, the
 * training forward: the fused cross-entropy also leaves the loss gradient (scaled by dloss_scale
 * / the valid targets) in the logits for the backward that must follow. *mean_loss is the mean
 * over non-ignored targets (when targets given). */
int zinf_model_forward_batch(zinf_model *m, const zinf_batch *b, const zinf_unit_hooks *h, float dloss_scale,
                             float *mean_loss);
/* The training forward of k micro-batches at once, unit by unit: ms[0] a model and ms[1..k) its
 * contexts, bs[j] (with targets) ms[j]'s batch. Each unit is acquired once through h and every
 * micro-batch's step of it runs before it is released, so the forwards can follow units as they
 * become ready (ZeRO-3's update running on into the step). It stops before the head: each
 * zinf_model_head(ms[j], &bs[j], ...) and zinf_model_backward(ms[j], ...) follow, micro-batch by
 * micro-batch, with the results of zinf_model_forward_batch and the backward. */
int zinf_model_forward_layers(zinf_model *const *ms, int k, const zinf_batch *bs, const zinf_unit_hooks *h);
/* The head of a forward whose uses before it ran (zinf_model_forward_layers): the last part of
 * zinf_model_forward_batch, with the same arguments. */
int zinf_model_head(zinf_model *m, const zinf_batch *b, const zinf_unit_hooks *h, float dloss_scale,
                    float *mean_loss);
/* A context of m: activations of m's size, recompute policy and leanness of its own, the units,
 * parameters and gradients m's (freed with zinf_model_free, which leaves those to m). */
int zinf_model_ctx_alloc(const zinf_model *m, zinf_model *ctx);
/* Forward for tokens/targets (host int32 arrays of B*T; targets may be NULL: logits only): one
 * sample per row. Returns 0 or negative; *mean_loss is the mean over non-ignored targets (when
 * targets given). */
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

/* ---- the model's identity, as a checkpoint records it (no HDF5 here: ckpt.c reads and writes
 * the attributes, these say what they hold) ---- */

/* The model's identity: its model_type and the canonical text of its config, the family's fields
 * under HF's names in the family's order, compact JSON, e.g. {"n_layer":2,"n_embd":64,...}.
 * *config is to free(). */
int zinf_model_identity(const zinf_model_cfg *c, char *model_type, size_t cap, char **config);

/* Checkpoints written before model_type carry GPT-2's six integer attributes instead, in this
 * order: n_layer, n_embd, n_head, vocab_size, padded_vocab, n_positions. */
#define ZINF_MODEL_LEGACY_NATTRS 6
extern const char *const zinf_model_legacy_attrs[ZINF_MODEL_LEGACY_NATTRS];

/* The config a checkpoint names: from (model_type, config) as zinf_model_identity wrote them, or,
 * with model_type NULL, from the legacy attributes (a GPT-2). An identity that its family does
 * not write back to the same text is refused ("the model attributes disagree"); src names the
 * file in messages. */
int zinf_model_cfg_from_identity(zinf_model_cfg *c, const char *model_type, const char *config,
                                 const int64_t legacy[ZINF_MODEL_LEGACY_NATTRS], const char *src);
/* The checkpoint's identity (either form, as above) against the run's model: 0 when they are the
 * same model, else an error naming the first field that differs ("SRC: the checkpoint's model
 * has n_layer 3, this run's 2"). */
int zinf_model_identity_check(const zinf_model_cfg *run, const char *model_type, const char *config,
                              const int64_t legacy[ZINF_MODEL_LEGACY_NATTRS], const char *src);
/* The first of the family's config fields in which a and b differ: 1 with its HF name and both
 * values as JSON text, 0 when none does (a and b of one family), negative on error. */
int zinf_model_cfg_diff(const zinf_model_cfg *a, const zinf_model_cfg *b, char *key, size_t keycap, char *va,
                        char *vb, size_t valcap);

#endif
