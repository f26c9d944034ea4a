/* family: one model architecture behind one table. A family (src/models/<name>.c) owns what the
 * architecture is: its presets and its fields of HF's config.json, the tensor table of each unit
 * (zinf name, HF name and how HF stores it, shape, init, weight decay, trainable), the order in
 * which forward and backward use the units (the plan ZeRO's stage 3 follows), the activations it
 * carves, its forward and backward over a zinf_batch, and the config.json it exports.
 *
 * model.c holds what every family shares (units, counter-based init, the carver, activation
 * sizing, the loss and its gradient) and calls a family only through this table, never by name;
 * src/models/registry.c maps model_type to the table and is the only file that names every
 * family. zero.c, estimate.c, hf.c and the checkpoint read the model through model.h and this
 * table, so a new family is a new file in src/models/ and a line in the registry. */
#ifndef ZINF_FAMILY_H
#define ZINF_FAMILY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* ---------------------------------------------------------------- what model.c lends ------- */

/* Carve buffers from one allocation; base NULL measures (so the run, zinf estimate and the
 * recompute fit count activations through the same code). Each buffer is rounded to 256 bytes. */
typedef struct zinf_carver { char *base; size_t off; } zinf_carver;
void *zinf_carve(zinf_carver *c, size_t bytes);

/* Append a tensor of rows x cols (cols 0: a vector) to unit u at the unit's end; its init draws
 * normal(0, std) for every row (init_rows = rows: a family lowers it for padded rows), or ones, or
 * zeros when std is 0. Every tensor is trainable. */
zinf_tensor_view *zinf_unit_add(zinf_unit *u, const char *name, int64_t rows, int64_t cols, bool decay, float std,
                                bool one);

/* Unit u's first gradient write of the step (model.h's grad_fresh): true once, when grads[u] holds
 * nothing yet and was not zeroed; the caller then overwrites (matmul_bwd acc 0) or zeroes each
 * tensor of u it writes. */
static inline bool zinf_grad_first(zinf_model *m, int u)
{
    bool f = m->grad_fresh[u];
    m->grad_fresh[u] = false;
    return f;
}
/* zinf_grad_first for a writer that only accumulates: the whole unit is zeroed when it is first */
void zinf_grad_zero_first(zinf_model *m, int u);
/* zinf_grad_first for a writer that overwrites [at, at + n) elements of unit u itself: the rest of
 * the unit is zeroed when it is first; returns whether it was */
bool zinf_grad_first_but(zinf_model *m, int u, const void *at, int64_t n);

/* Tensor t of unit u in bufs (m->params or m->grads): its first compute-dtype element. */
static inline void *zinf_tp(const zinf_model *m, void **bufs, int u, int t)
{
    return (char *)bufs[u] + (size_t)m->units[u].t[t].offset * zinf_dtype_size(m->be->cdt);
}

/* Zero tensor t of unit u's gradient (t < 0: none, for a tensor the config leaves out). */
static inline void zinf_grad_zero_tensor(zinf_model *m, int u, int t)
{
    if (t >= 0)
        m->be->memset0(m->be, zinf_tp(m, m->grads, u, t), (size_t)m->units[u].t[t].numel * zinf_dtype_size(m->be->cdt),
                       NULL);
}

/* The hooks around a unit's use; no hooks (NULL) is a model that owns its parameters. */
static inline int zinf_acquire(const zinf_unit_hooks *h, int u, int phase)
{
    return h && h->acquire ? h->acquire(h->ctx, u, phase) : 0;
}
static inline int zinf_release(const zinf_unit_hooks *h, int u, int phase)
{
    return h && h->release ? h->release(h->ctx, u, phase) : 0;
}
static inline int zinf_grad_ready(const zinf_unit_hooks *h, int u)
{
    return h && h->grad_ready ? h->grad_ready(h->ctx, u) : 0;
}

/* The blocks' loop every family's backward runs: units L..1 (block(m, l) between its acquire and
 * release, then grad_ready). */
int zinf_blocks_backward(zinf_model *m, const zinf_unit_hooks *h, void (*block)(zinf_model *m, int l));

/* ---------------------------------------------------------------- the table ---------------- */

/* One HF tensor making up rows [row0, row0 + rows) of a zinf tensor (cols as zinf's). HF stores it
 * as (rows, cols), or transposed as (cols, rows) (GPT-2's Conv1D). A tensor fused in zinf from
 * several HF ones (Llama's q|k|v) has a part each; rows no part covers are zero (GPT-2's padded
 * vocabulary). */
#define ZINF_HF_MAX_PARTS 3
typedef struct zinf_hf_part {
    char name[128];
    int64_t row0, rows;
    bool transposed;
} zinf_hf_part;

typedef struct zinf_family {
    const char *model_type; /* HF's model_type: "gpt2" */
    const char *presets;    /* its preset names, space-separated */
    /* forward takes samples packed into rows (zinf_batch's pos and kv_start); false: one sample
     * per row, and a run with --packing is refused before it starts */
    bool packed_rows;
    /* config.json's name for n_positions, for messages about it ("n_positions",
     * "max_position_embeddings") */
    const char *positions_key;

    /* -- config -- */
    /* Preset `name` into c (all of c: name, model_type, the fields); 1 when found, 0 when the
     * family has no such preset. */
    int (*preset)(zinf_model_cfg *c, const char *name);
    /* The family's fields from a config.json object (HF's names); c arrives zeroed with name set.
     * Fills the derived fields (padded_vocab, the family's fixed values) and checks them; src names
     * the file in messages. */
    int (*cfg_from_hf)(zinf_model_cfg *c, json_t *config, const char *src);
    /* The fields that make the model what it is, under HF's names, in the family's order (a new
     * reference): the model's identity in checkpoints. cfg_from_hf reads it back to the same c. */
    json_t *(*cfg_json)(const zinf_model_cfg *c);

    /* -- units -- */
    int (*nunits)(const zinf_model_cfg *c);
    /* m->units[0..nunits) zeroed: name them and add their tensors (zinf_unit_add). */
    int (*layout)(zinf_model *m);
    /* as zinf_model_use_order (model.h): the order forward and backward below follow */
    int (*use_order)(const zinf_model *m, zinf_use *out, int cap, int *nfwd);

    /* -- activations (m->B, m->T, m->recompute, m->recompute_blocks set) -- */
    /* the family's host-side activation state in m->acts; acts_free(m) undoes it (also when
     * acts_init failed half way, and twice) */
    int (*acts_init)(zinf_model *m);
    void (*acts_free)(zinf_model *m);
    /* carve its activations from acts and its gradient scratch from grads (measuring when their
     * base is NULL); model.c then carves the logits, losses, tokens and targets from acts */
    void (*carve)(zinf_model *m, zinf_carver *acts, zinf_carver *grads, size_t es);

    /* -- compute -- */
    /* The forward, in steps that model.c drives: forward_begin takes the batch (m->tokens holds
     * b->tok on the device already: positions, packed samples, checks), then forward_use(m, i)
     * runs use i of use_order's forward uses but the last, with its unit acquired by the caller,
     * the last of them leaving the head's input (head_in). The head is model.c's (in row chunks
     * when the logits would not fit): its unit's use is use_order's last forward one and first
     * backward one. Steps, so that model.c may run several micro-batches' forwards unit by unit
     * (zinf_model_forward_layers). */
    int (*forward_begin)(zinf_model *m, const zinf_batch *b);
    void (*forward_use)(zinf_model *m, int i);
    /* from the head input's gradient in head_din (model.c's head backward wrote it): gradients
     * accumulate into m->grads, in use_order's backward order after the head through h,
     * grad_ready after each unit's last use */
    int (*backward)(zinf_model *m, const zinf_unit_hooks *h);
    /* the head: the unit whose use gives its weight, the weight [padded_vocab, n_embd] in bufs
     * (params or grads), and its input and input-gradient buffers [N, n_embd] */
    int (*head_unit)(const zinf_model *m);
    void *(*head_w)(const zinf_model *m, void **bufs);
    void *(*head_in)(const zinf_model *m);
    void *(*head_din)(const zinf_model *m);
    /* model FLOPs of one training token at sequence length T */
    double (*flops_per_token)(const zinf_model *m, int T);

    /* -- Hugging Face -- */
    const char *hf_prefix; /* the prefix the headless model's names lack ("transformer.") */
    /* the HF tensors of tensor t of unit u; returns how many (1..ZINF_HF_MAX_PARTS) */
    int (*hf_parts)(const zinf_model *m, int u, int t, zinf_hf_part out[ZINF_HF_MAX_PARTS]);
    /* config.json for the model with torch_dtype dt: a string to free(), NULL when out of memory */
    char *(*hf_config)(const zinf_model_cfg *c, zinf_dtype dt);
} zinf_family;

/* ---------------------------------------------------------------- the registry ------------- */
/* src/models/registry.c. The family of model_type; NULL or "" is "gpt2" (configs made by hand
 * and checkpoints from before model_type). NULL when zinf has no such family. */
const zinf_family *zinf_family_find(const char *model_type);
/* Every family's model_type, for messages: "gpt2". */
const char *zinf_family_types(void);
/* Preset `name` of any family into c: 1 when found, 0 when none has it. */
int zinf_family_preset(zinf_model_cfg *c, const char *name);
/* Every family's presets, space-separated. */
const char *zinf_family_presets(void);

#endif
