/* GPT-2 (learned positions, pre-LayerNorm, GELU-tanh, tied embeddings, biases, vocabulary padded
 * to a multiple of 128) as a family (family.h): units - the embedding, each block, the final
 * LayerNorm; the head has no parameters of its own, its product reads the embedding unit's wte -
 * their tensors, forward and backward, and Hugging Face's GPT2LMHeadModel names.
 *
 * HF keeps the linear layers as Conv1D, whose weight is (in, out): the transpose of zinf's
 * (out, in). c_attn's output is q | k | v, each n_embd wide with head h at channels h*C/NH.., as
 * zinf's qkv rows, so the qkv weight needs the transpose and nothing else. HF's wte has the real
 * vocabulary's rows; zinf's has padded_vocab rows, the padding zero. The LM head is tied to wte
 * in both and is not stored. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "family.h"

/* The epsilon of the backends' LayerNorm (kernels.h, layernorm_fwd): HF's layer_norm_epsilon. */
#define LN_EPS 1e-5

/* ---------------------------------------------------------------- config ------------------- */
typedef struct { const char *name; int L, C, NH, V, T; } preset;
static const preset presets[] = {
    {"gpt2-124m", 12, 768, 12, 50257, 1024},
    {"gpt2-350m", 24, 1024, 16, 50257, 1024},
    {"gpt2-774m", 36, 1280, 20, 50257, 1024},
    {"gpt2-1.5b", 48, 1600, 25, 50257, 1024},
    {"test-tiny", 2, 32, 4, 256, 64},    /* unit tests */
    {"test-mini", 2, 64, 4, 256, 64},    /* MPI tests */
    {"test-small", 4, 128, 4, 256, 128}, /* the addition demo */
};

/* the derived fields and GPT-2's fixed values, after the five it reads */
static int finish(zinf_model_cfg *c, const char *src)
{
    if (c->n_layer < 1 || c->n_embd < 1 || c->n_head < 1 || c->vocab_size < 2 || c->n_positions < 1)
        return zinf_err("%s: n_layer, n_embd, n_head, n_positions must be positive and vocab_size >= 2",
                        src);
    if (c->n_embd % c->n_head)
        return zinf_err("%s: n_embd %d is not divisible by n_head %d", src, c->n_embd, c->n_head);
    snprintf(c->model_type, sizeof c->model_type, "gpt2");
    c->padded_vocab = (c->vocab_size + 127) / 128 * 128;
    c->n_kv_head = c->n_head;
    c->head_dim = c->n_embd / c->n_head;
    c->d_ff = 4 * c->n_embd;
    c->norm_eps = LN_EPS;
    c->rope_theta = 0;
    c->tie_embeddings = true;
    c->bias = true;
    return 0;
}

static int gpt2_preset(zinf_model_cfg *c, const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(presets[i].name, name)) continue;
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", presets[i].name);
        c->n_layer = presets[i].L, c->n_embd = presets[i].C, c->n_head = presets[i].NH;
        c->vocab_size = presets[i].V, c->n_positions = presets[i].T;
        ZINF_TRY(finish(c, name));
        return 1;
    }
    return 0;
}

static int json_int_field(json_t *o, const char *key, int *out, const char *src)
{
    json_t *v = json_object_get(o, key);
    if (!v) return zinf_err("%s lacks \"%s\"", src, key);
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > (1 << 30))
        return zinf_err("%s: \"%s\" must be an integer from 1 to 2^30 (1073741824)", src, key);
    *out = (int)json_integer_value(v);
    return 0;
}

/* GPT2Config fields that change the model from the one zinf trains: each present with another
 * value than zinf's is refused by name, never trained as a different model */
static int gpt2_fixed_fields(json_t *o, const char *src)
{
    json_t *v;
    if ((v = json_object_get(o, "activation_function")) && !json_is_null(v) &&
        (!json_is_string(v) || (strcmp(json_string_value(v), "gelu_new") && strcmp(json_string_value(v), "gelu_pytorch_tanh"))))
        return zinf_err("%s: activation_function %s: zinf's GPT-2 MLP is GELU with the tanh approximation (gelu_new)",
                        src, json_is_string(v) ? json_string_value(v) : "(not a string)");
    if ((v = json_object_get(o, "n_inner")) && !json_is_null(v)) {
        json_t *ne = json_object_get(o, "n_embd");
        if (!json_is_integer(v) || !json_is_integer(ne) || json_integer_value(v) != 4 * json_integer_value(ne))
            return zinf_err("%s: n_inner %lld: zinf's GPT-2 MLP is 4 x n_embd wide (n_inner null)", src,
                            json_is_integer(v) ? (long long)json_integer_value(v) : -1LL);
    }
    if ((v = json_object_get(o, "tie_word_embeddings")) && !json_is_true(v))
        return zinf_err("%s: tie_word_embeddings false: zinf's GPT-2 head is tied to wte", src);
    if ((v = json_object_get(o, "layer_norm_epsilon")) && (!json_is_number(v) || json_number_value(v) != LN_EPS))
        return zinf_err("%s: layer_norm_epsilon %g: zinf's GPT-2 LayerNorm uses 1e-05", src,
                        json_is_number(v) ? json_number_value(v) : NAN);
    const char *off[] = {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"};
    for (size_t i = 0; i < sizeof off / sizeof *off; i++)
        if ((v = json_object_get(o, off[i])) && json_is_true(v))
            return zinf_err("%s: %s true: zinf's GPT-2 does not implement it", src, off[i]);
    /* dropout given in the file (the published GPT-2 configs have 0.1): zinf trains without it */
    const char *drop[] = {"resid_pdrop", "embd_pdrop", "attn_pdrop"};
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
        if ((v = json_object_get(o, drop[i])) && !json_is_null(v) && (!json_is_number(v) || json_number_value(v) != 0))
            return zinf_err("%s: %s %g: zinf trains without dropout (write 0 to train this model as zinf does)", src,
                            drop[i], json_is_number(v) ? json_number_value(v) : NAN);
    if ((v = json_object_get(o, "scale_attn_weights")) && json_is_false(v))
        return zinf_err("%s: scale_attn_weights false: zinf's attention scales by 1/sqrt(head size)", src);
    return 0;
}

static int gpt2_cfg_from_hf(zinf_model_cfg *c, json_t *o, const char *src)
{
    ZINF_TRY(gpt2_fixed_fields(o, src));
    ZINF_TRY(json_int_field(o, "n_layer", &c->n_layer, src));
    ZINF_TRY(json_int_field(o, "n_embd", &c->n_embd, src));
    ZINF_TRY(json_int_field(o, "n_head", &c->n_head, src));
    ZINF_TRY(json_int_field(o, "vocab_size", &c->vocab_size, src));
    ZINF_TRY(json_int_field(o, "n_positions", &c->n_positions, src));
    return finish(c, src);
}

/* the five fields it reads, and the padded vocabulary it derives (the checkpoint's tensors have
 * its rows) */
static json_t *gpt2_cfg_json(const zinf_model_cfg *c)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "n_layer", json_integer(c->n_layer));
    json_object_set_new(o, "n_embd", json_integer(c->n_embd));
    json_object_set_new(o, "n_head", json_integer(c->n_head));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "n_positions", json_integer(c->n_positions));
    json_object_set_new(o, "padded_vocab", json_integer(c->padded_vocab));
    return o;
}

/* ---------------------------------------------------------------- the tensor table --------- */
/* One row per tensor of a unit: X(id, zinf name, HF name, rows, cols, decay, init, conv1d), in
 * the unit's order. rows and cols are expressions in C (n_embd), Vp (padded_vocab) and NP
 * (n_positions); cols 0 is a vector. init: ZERO, ONE, STD (normal(0, 0.02)) or RESID (normal(0,
 * 0.02/sqrt(2L)), the projections into the residual stream). conv1d: HF stores it transposed.
 * Every tensor is trainable. The enums, the layout and the HF names all come from these lists. */
#define GPT2_EMBED(X)                                                                             \
    X(WTE, "wte", "wte.weight", Vp, C, true, STD, false)                                          \
    X(WPE, "wpe", "wpe.weight", NP, C, true, STD, false)
#define GPT2_BLOCK(X)                                                                             \
    X(LN1W, "ln1.weight", "ln_1.weight", C, 0, false, ONE, false)                                 \
    X(LN1B, "ln1.bias", "ln_1.bias", C, 0, false, ZERO, false)                                    \
    X(QKVW, "attn.qkv.weight", "attn.c_attn.weight", 3 * C, C, true, STD, true)                   \
    X(QKVB, "attn.qkv.bias", "attn.c_attn.bias", 3 * C, 0, false, ZERO, false)                    \
    X(PROJW, "attn.proj.weight", "attn.c_proj.weight", C, C, true, RESID, true)                   \
    X(PROJB, "attn.proj.bias", "attn.c_proj.bias", C, 0, false, ZERO, false)                      \
    X(LN2W, "ln2.weight", "ln_2.weight", C, 0, false, ONE, false)                                 \
    X(LN2B, "ln2.bias", "ln_2.bias", C, 0, false, ZERO, false)                                    \
    X(FCW, "mlp.fc.weight", "mlp.c_fc.weight", 4 * C, C, true, STD, true)                         \
    X(FCB, "mlp.fc.bias", "mlp.c_fc.bias", 4 * C, 0, false, ZERO, false)                          \
    X(FCPROJW, "mlp.proj.weight", "mlp.c_proj.weight", C, 4 * C, true, RESID, true)               \
    X(FCPROJB, "mlp.proj.bias", "mlp.c_proj.bias", C, 0, false, ZERO, false)
#define GPT2_LNF(X)                                                                               \
    X(LNFW, "lnf.weight", "ln_f.weight", C, 0, false, ONE, false)                                 \
    X(LNFB, "lnf.bias", "ln_f.bias", C, 0, false, ZERO, false)

#define ID_(id, zn, hn, r, c, dec, init, conv) T_##id,
enum { GPT2_EMBED(ID_) N_EMBED };
enum { GPT2_BLOCK(ID_) N_BLOCK };
enum { GPT2_LNF(ID_) N_LNF };
#undef ID_
_Static_assert(N_BLOCK <= ZINF_MAX_UNIT_TENSORS, "a block's tensors fit a unit");

typedef struct { const char *hf; bool conv1d; } hf_row;
#define HF_(id, zn, hn, r, c, dec, init, conv) {hn, conv},
static const hf_row hf_embed[] = {GPT2_EMBED(HF_)}, hf_block[] = {GPT2_BLOCK(HF_)}, hf_lnf[] = {GPT2_LNF(HF_)};
#undef HF_

enum { ZERO, ONE, STD, RESID };

static int gpt2_nunits(const zinf_model_cfg *c) { return c->n_layer + 2; }

static int gpt2_layout(zinf_model *m)
{
    const zinf_model_cfg *c = &m->c;
    const int L = c->n_layer;
    const int64_t C = c->n_embd, Vp = c->padded_vocab, NP = c->n_positions;
    const float sd[] = {[ZERO] = 0, [ONE] = 0, [STD] = 0.02f, [RESID] = 0.02f / sqrtf(2.0f * (float)L)};
    char nm[64];
#define ADD_(id, zn, hn, r, cc, dec, init, conv) zinf_unit_add(u, zn, r, cc, dec, sd[init], init == ONE);
#define BLOCK_(id, zn, hn, r, cc, dec, init, conv)                                                \
    snprintf(nm, sizeof nm, "blocks.%d.%s", l, zn);                                               \
    zinf_unit_add(u, nm, r, cc, dec, sd[init], init == ONE);
    zinf_unit *u = &m->units[0];
    snprintf(u->name, sizeof u->name, "embed");
    u->what = "embedding (wte+wpe)";
    GPT2_EMBED(ADD_)
    u->t[T_WTE].init_rows = c->vocab_size; /* the padded rows stay zero */
    for (int l = 0; l < L; l++) {
        u = &m->units[1 + l];
        snprintf(u->name, sizeof u->name, "blocks.%d", l);
        u->what = "transformer block";
        GPT2_BLOCK(BLOCK_)
    }
    u = &m->units[L + 1];
    snprintf(u->name, sizeof u->name, "lnf"); /* the final LayerNorm only: the head reuses wte */
    u->what = "final LayerNorm";
    GPT2_LNF(ADD_)
#undef BLOCK_
#undef ADD_
    return 0;
}

/* forward 0, 1..L, L+1, 0 (the tied head reads wte); backward 0 (the head), L+1, L..1, 0 */
static int gpt2_use_order(const zinf_model *m, zinf_use *out, int cap, int *nfwd)
{
    const int L = m->c.n_layer;
    int n = 0;
#define USE_(uu, ph)                                                                              \
    do {                                                                                          \
        if (out && n < cap) out[n] = (zinf_use){uu, ph};                                          \
        n++;                                                                                      \
    } while (0)
    USE_(0, 0);
    for (int l = 0; l < L; l++) USE_(1 + l, 0);
    USE_(L + 1, 0);
    USE_(0, 0);
    *nfwd = n;
    USE_(0, 1);
    USE_(L + 1, 1);
    for (int l = L - 1; l >= 0; l--) USE_(1 + l, 1);
    USE_(0, 1);
#undef USE_
    return n;
}

/* ---------------------------------------------------------------- activations -------------- */
typedef struct layer_acts {
    void *ln1, *qkv, *atty, *res2, *ln2, *fch, *fchg;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lse;
} layer_acts;

typedef struct gpt2_acts {
    void **res;         /* the residual stream: res[l] is block l's input, res[L] the last output */
    layer_acts *layers; /* per layer (all alias one set when recomputing, except the attention
                         * output and LSE under ZINF_RECOMPUTE_KEEP_ATTN) */
    void *lnf;
    float *lnf_mean, *lnf_rstd;
    void *d_res, *d_ln, *d_qkv, *d_atty, *d_fch; /* gradient scratch */
} gpt2_acts;

static void gpt2_acts_free(zinf_model *m)
{
    gpt2_acts *A = m->acts;
    if (A) free(A->res), free(A->layers);
    free(A);
    m->acts = NULL;
}

static int gpt2_acts_init(zinf_model *m)
{
    gpt2_acts *A = calloc(1, sizeof *A);
    m->acts = A;
    if (A) {
        A->res = calloc((size_t)m->c.n_layer + 1, sizeof *A->res);
        A->layers = calloc((size_t)m->c.n_layer, sizeof *A->layers);
    }
    if (!A || !A->res || !A->layers) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    return 0;
}

static void carve_layer(zinf_carver *cv, layer_acts *a, size_t N, size_t C, size_t NH, size_t es)
{
    a->ln1 = zinf_carve(cv, N * C * es);
    a->qkv = zinf_carve(cv, N * 3 * C * es);
    a->atty = zinf_carve(cv, N * C * es);
    a->res2 = zinf_carve(cv, N * C * es);
    a->ln2 = zinf_carve(cv, N * C * es);
    a->fch = zinf_carve(cv, N * 4 * C * es);
    a->fchg = zinf_carve(cv, N * 4 * C * es);
    a->ln1_mean = zinf_carve(cv, N * 4);
    a->ln1_rstd = zinf_carve(cv, N * 4);
    a->ln2_mean = zinf_carve(cv, N * 4);
    a->ln2_rstd = zinf_carve(cv, N * 4);
    a->lse = zinf_carve(cv, N * NH * 4);
}

static void gpt2_carve(zinf_model *m, zinf_carver *cv, zinf_carver *cg, size_t es)
{
    gpt2_acts *A = m->acts;
    size_t N = (size_t)m->B * m->T, C = m->c.n_embd, NH = m->c.n_head, L = m->c.n_layer;
    for (size_t l = 0; l <= L; l++) A->res[l] = zinf_carve(cv, N * C * es);
    for (size_t l = 0; l < L; l++) {
        if (m->recompute == ZINF_RECOMPUTE_NONE || l == 0 || l >= (size_t)m->recompute_blocks) {
            carve_layer(cv, &A->layers[l], N, C, NH, es);
            continue;
        }
        A->layers[l] = A->layers[0]; /* the recomputed activations share one set */
        if (m->recompute == ZINF_RECOMPUTE_KEEP_ATTN) {
            A->layers[l].atty = zinf_carve(cv, N * C * es);
            A->layers[l].lse = zinf_carve(cv, N * NH * 4);
        }
    }
    A->lnf = zinf_carve(cv, N * C * es);
    A->lnf_mean = zinf_carve(cv, N * 4);
    A->lnf_rstd = zinf_carve(cv, N * 4);

    A->d_res = zinf_carve(cg, N * C * es);
    A->d_ln = zinf_carve(cg, N * C * es);
    A->d_qkv = zinf_carve(cg, N * 3 * C * es);
    A->d_atty = zinf_carve(cg, N * C * es);
    A->d_fch = zinf_carve(cg, N * 4 * C * es); /* d(fch): matmul_dgelu_bwd writes it directly */
}

/* ---------------------------------------------------------------- forward / backward ------- */
#define TP(bufs, u, t) zinf_tp(m, bufs, u, t)

/* Block l's forward. For the backward's recomputation (for_backward) it stops after the MLP's
 * GELU: the MLP projection (with the residual sum) produces only res[l+1], which the backward
 * never reads (it starts from d(res[l+1])), and that projection is a third of the block's
 * matrix FLOPs. Under KEEP_ATTN the recomputation also reuses the kept attention output. */
static void block_forward(zinf_model *m, int l, bool for_backward)
{
    zinf_backend *be = m->be;
    gpt2_acts *A = m->acts;
    layer_acts *a = &A->layers[l];
    int B = m->B, T = m->T, C = m->c.n_embd, NH = m->c.n_head;
    int64_t N = (int64_t)B * T;
    int u = 1 + l;
    void **P = m->params;
    be->layernorm_fwd(be, a->ln1, a->ln1_mean, a->ln1_rstd, A->res[l], TP(P, u, T_LN1W), TP(P, u, T_LN1B), N, C);
    be->matmul_fwd(be, a->qkv, a->ln1, TP(P, u, T_QKVW), TP(P, u, T_QKVB), N, C, 3 * C);
    if (!for_backward || m->recompute != ZINF_RECOMPUTE_KEEP_ATTN)
        be->attention_fwd(be, a->atty, a->lse, a->qkv, B, T, NH, NH, C / NH, NULL);
    /* res2 = res[l] + atty @ Wproj^T + bproj: the residual sum rides on the GEMM */
    be->matmul_fwd_res(be, a->res2, a->atty, TP(P, u, T_PROJW), TP(P, u, T_PROJB), A->res[l], N, C, C);
    be->layernorm_fwd(be, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, TP(P, u, T_LN2W), TP(P, u, T_LN2B), N, C);
    /* fch = ln2 @ Wfc^T + bfc, fchg = gelu(fch), in one GEMM with a GELU epilogue */
    be->matmul_gelu_fwd(be, a->fchg, a->fch, a->ln2, TP(P, u, T_FCW), TP(P, u, T_FCB), N, C, 4 * C);
    if (for_backward) return;
    be->matmul_fwd_res(be, A->res[l + 1], a->fchg, TP(P, u, T_FCPROJW), TP(P, u, T_FCPROJB), a->res2, N, 4 * C, C);
}

/* GPT-2's positions are the row offsets and its attention sees back to the row's start: one
 * sample per row. Packed rows wait for the kernels that take positions and sample starts. */
static int one_sample_per_row(const zinf_batch *b)
{
    int64_t N = (int64_t)b->B * b->T;
    for (int64_t i = 0; i < N && (b->pos || b->kv_start); i++) {
        if (b->pos && b->pos[i] != i % b->T)
            return zinf_errc(ZINF_ENOTSUP, "gpt2: token %lld has position %d; GPT-2 takes one sample per row "
                                           "(position = offset in the row)", (long long)i, b->pos[i]);
        if (b->kv_start && b->kv_start[i] != 0)
            return zinf_errc(ZINF_ENOTSUP, "gpt2: token %lld's sample starts at %d in its row; GPT-2 takes one "
                                           "sample per row", (long long)i, b->kv_start[i]);
    }
    return 0;
}

static int gpt2_forward_begin(zinf_model *m, const zinf_batch *b)
{
    (void)m;
    return one_sample_per_row(b);
}

/* use i of gpt2_use_order's forward: the embedding, the blocks, the final LayerNorm (the head,
 * model.c's, reads wte: unit 0 again) */
static void gpt2_forward_use(zinf_model *m, int i)
{
    zinf_backend *be = m->be;
    gpt2_acts *A = m->acts;
    int B = m->B, T = m->T, C = m->c.n_embd, L = m->c.n_layer;
    void **P = m->params;
    if (i == 0) be->encoder_fwd(be, A->res[0], m->tokens, TP(P, 0, T_WTE), TP(P, 0, T_WPE), B, T, C);
    else if (i <= L) block_forward(m, i - 1, false);
    else
        be->layernorm_fwd(be, A->lnf, A->lnf_mean, A->lnf_rstd, A->res[L], TP(P, L + 1, T_LNFW),
                          TP(P, L + 1, T_LNFB), (int64_t)B * T, C);
}

static void block_backward(zinf_model *m, int l)
{
    zinf_backend *be = m->be;
    gpt2_acts *A = m->acts;
    layer_acts *a = &A->layers[l];
    int B = m->B, T = m->T, C = m->c.n_embd, NH = m->c.n_head;
    int64_t N = (int64_t)B * T;
    int u = 1 + l;
    void **P = m->params, **G = m->grads;
    if (l < m->recompute_blocks) block_forward(m, l, true); /* from the kept input */
    /* the block's first gradient write of the step (grad_fresh): the products overwrite their
     * weights' and biases' gradients, the LayerNorms' are zeroed to be added to */
    const bool first = zinf_grad_first(m, u);
    const int acc = !first;
    static const int ln[] = {T_LN1W, T_LN1B, T_LN2W, T_LN2B};
    for (int i = 0; first && i < 4; i++) zinf_grad_zero_tensor(m, u, ln[i]);
    /* d_res holds d(res[l+1]); it becomes d(res2), then d(res[l]) by accumulation. The input
     * gradients of the products and of attention overwrite their buffers: nothing is zeroed. */
    /* the MLP projection's weight gradients, then d(fch) = gelu'(fch) * (d_res @ Wp) in one GEMM
     * with a dGELU epilogue (it overwrites d_fch, so d_fch needs no zeroing) */
    be->matmul_bwd(be, NULL, TP(G, u, T_FCPROJW), TP(G, u, T_FCPROJB), A->d_res, a->fchg, TP(P, u, T_FCPROJW), N,
                   4 * C, C, acc);
    be->matmul_dgelu_bwd(be, A->d_fch, A->d_res, TP(P, u, T_FCPROJW), a->fch, N, 4 * C, C);
    be->matmul_bwd(be, A->d_ln, TP(G, u, T_FCW), TP(G, u, T_FCB), A->d_fch, a->ln2, TP(P, u, T_FCW), N, C, 4 * C, acc);
    be->layernorm_bwd(be, A->d_res, TP(G, u, T_LN2W), TP(G, u, T_LN2B), A->d_ln, a->res2, TP(P, u, T_LN2W),
                      a->ln2_mean, a->ln2_rstd, N, C);
    be->matmul_bwd(be, A->d_atty, TP(G, u, T_PROJW), TP(G, u, T_PROJB), A->d_res, a->atty, TP(P, u, T_PROJW), N, C,
                   C, acc);
    be->attention_bwd(be, A->d_qkv, A->d_atty, a->qkv, a->atty, a->lse, B, T, NH, NH, C / NH, NULL);
    be->matmul_bwd(be, A->d_ln, TP(G, u, T_QKVW), TP(G, u, T_QKVB), A->d_qkv, a->ln1, TP(P, u, T_QKVW), N, C,
                   3 * C, acc);
    be->layernorm_bwd(be, A->d_res, TP(G, u, T_LN1W), TP(G, u, T_LN1B), A->d_ln, A->res[l], TP(P, u, T_LN1W),
                      a->ln1_mean, a->ln1_rstd, N, C);
}

static int gpt2_backward(zinf_model *m, const zinf_unit_hooks *h)
{
    zinf_backend *be = m->be;
    gpt2_acts *A = m->acts;
    int B = m->B, T = m->T, C = m->c.n_embd, L = m->c.n_layer;
    int64_t N = (int64_t)B * T;
    size_t es = zinf_dtype_size(be->cdt);
    void **P = m->params, **G = m->grads;
    /* the head's backward (model.c) left d(lnf) in d_ln */
    ZINF_TRY(zinf_acquire(h, L + 1, 1));
    be->memset0(be, A->d_res, (size_t)N * C * es, NULL);
    zinf_grad_zero_first(m, L + 1);
    be->layernorm_bwd(be, A->d_res, TP(G, L + 1, T_LNFW), TP(G, L + 1, T_LNFB), A->d_ln, A->res[L],
                      TP(P, L + 1, T_LNFW), A->lnf_mean, A->lnf_rstd, N, C);
    ZINF_TRY(zinf_release(h, L + 1, 1));
    ZINF_TRY(zinf_grad_ready(h, L + 1));
    ZINF_TRY(zinf_blocks_backward(m, h, block_backward));
    ZINF_TRY(zinf_acquire(h, 0, 1));
    zinf_grad_zero_first(m, 0); /* the head, which reads wte, wrote it first */
    be->encoder_bwd(be, TP(G, 0, T_WTE), TP(G, 0, T_WPE), A->d_res, m->tokens, B, T, C);
    ZINF_TRY(zinf_release(h, 0, 1));
    return zinf_grad_ready(h, 0);
}

/* the head reads the tied wte (unit 0), its input is the final LayerNorm's output */
static int gpt2_head_unit(const zinf_model *m) { (void)m; return 0; }
static void *gpt2_head_w(const zinf_model *m, void **bufs) { return TP(bufs, 0, T_WTE); }
static void *gpt2_head_in(const zinf_model *m) { return ((gpt2_acts *)m->acts)->lnf; }
static void *gpt2_head_din(const zinf_model *m) { return ((gpt2_acts *)m->acts)->d_ln; }

/* 6 per parameter (forward and backward of every product), and attention's two products of a
 * token with the T before it, 12 L C T */
static double gpt2_flops_per_token(const zinf_model *m, int T)
{
    return 6.0 * (double)m->num_params + 12.0 * m->c.n_layer * m->c.n_embd * (double)T;
}

/* ---------------------------------------------------------------- Hugging Face ------------- */
static int gpt2_hf_parts(const zinf_model *m, int u, int t, zinf_hf_part out[ZINF_HF_MAX_PARTS])
{
    const zinf_tensor_view *tv = &m->units[u].t[t];
    const int L = m->c.n_layer;
    const hf_row *r = u == 0 ? &hf_embed[t] : u == L + 1 ? &hf_lnf[t] : &hf_block[t];
    if (u == 0 || u == L + 1) snprintf(out[0].name, sizeof out[0].name, "transformer.%s", r->hf);
    else snprintf(out[0].name, sizeof out[0].name, "transformer.h.%d.%s", u - 1, r->hf);
    out[0].row0 = 0;
    out[0].rows = u == 0 && t == T_WTE ? m->c.vocab_size : tv->shape[0]; /* without the padded rows */
    out[0].transposed = r->conv1d;
    return 1;
}

/* config.json as a GPT2Config with zero dropouts */
static char *gpt2_hf_config(const zinf_model_cfg *c, zinf_dtype dt)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("GPT2LMHeadModel"));
    json_object_set_new(o, "architectures", arch);
    json_object_set_new(o, "model_type", json_string("gpt2"));
    json_object_set_new(o, "n_layer", json_integer(c->n_layer));
    json_object_set_new(o, "n_embd", json_integer(c->n_embd));
    json_object_set_new(o, "n_head", json_integer(c->n_head));
    json_object_set_new(o, "n_inner", json_null()); /* 4 x n_embd, as zinf's MLP */
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size)); /* the real vocabulary */
    json_object_set_new(o, "n_positions", json_integer(c->n_positions));
    json_object_set_new(o, "n_ctx", json_integer(c->n_positions));
    json_object_set_new(o, "activation_function", json_string("gelu_new")); /* GELU, tanh approximation */
    json_object_set_new(o, "layer_norm_epsilon", json_real(LN_EPS));
    json_object_set_new(o, "initializer_range", json_real(0.02));
    json_object_set_new(o, "tie_word_embeddings", json_true());
    json_object_set_new(o, "scale_attn_weights", json_true()); /* 1/sqrt(head size), as zinf */
    json_object_set_new(o, "scale_attn_by_inverse_layer_idx", json_false());
    json_object_set_new(o, "reorder_and_upcast_attn", json_false());
    /* zinf trains without dropout; HF's defaults of 0.1 would make the exported model another one */
    json_object_set_new(o, "resid_pdrop", json_real(0.0));
    json_object_set_new(o, "embd_pdrop", json_real(0.0));
    json_object_set_new(o, "attn_pdrop", json_real(0.0));
    json_object_set_new(o, "summary_first_dropout", json_real(0.0));
    /* zinf has no special tokens; GPT-2's <|endoftext|> is its last token, so the last token here
     * too (HF's default, 50256, lies outside a smaller vocabulary) */
    json_object_set_new(o, "bos_token_id", json_integer(c->vocab_size - 1));
    json_object_set_new(o, "eos_token_id", json_integer(c->vocab_size - 1));
    json_object_set_new(o, "torch_dtype", json_string(dt == ZINF_BF16 ? "bfloat16" : dt == ZINF_F16 ? "float16"
                                                                                                    : "float32"));
    json_object_set_new(o, "use_cache", json_true());
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15)); /* 1e-05, not 1.0000000000000001e-05 */
    json_decref(o);
    return s;
}

const zinf_family zinf_family_gpt2 = {
    .model_type = "gpt2",
    .presets = "gpt2-124m gpt2-350m gpt2-774m gpt2-1.5b test-tiny test-mini test-small",
    .packed_rows = false, /* its learned positions are the row offsets */
    .positions_key = "n_positions",
    .preset = gpt2_preset,
    .cfg_from_hf = gpt2_cfg_from_hf,
    .cfg_json = gpt2_cfg_json,
    .nunits = gpt2_nunits,
    .layout = gpt2_layout,
    .use_order = gpt2_use_order,
    .acts_init = gpt2_acts_init,
    .acts_free = gpt2_acts_free,
    .carve = gpt2_carve,
    .forward_begin = gpt2_forward_begin,
    .forward_use = gpt2_forward_use,
    .backward = gpt2_backward,
    .head_unit = gpt2_head_unit,
    .head_w = gpt2_head_w,
    .head_in = gpt2_head_in,
    .head_din = gpt2_head_din,
    .flops_per_token = gpt2_flops_per_token,
    .hf_prefix = "transformer.",
    .hf_parts = gpt2_hf_parts,
    .hf_config = gpt2_hf_config,
};
