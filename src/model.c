/* GPT-2 over the backend interface: unit layout, deterministic init, forward, backward. */
#include "model.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "file.h"

/* ---------------------------------------------------------------- configs ------------------ */
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

const char *zinf_model_presets(void)
{
    return "gpt2-124m gpt2-350m gpt2-774m gpt2-1.5b test-tiny test-mini test-small";
}

static int finish_cfg(zinf_model_cfg *m, const char *src)
{
    if (m->n_layer < 1 || m->n_embd < 1 || m->n_head < 1 || m->vocab_size < 2 || m->n_positions < 1)
        return zinf_err("%s: n_layer, n_embd, n_head, n_positions must be positive and vocab_size >= 2",
                        src);
    if (m->n_embd % m->n_head)
        return zinf_err("%s: n_embd %d is not divisible by n_head %d", src, m->n_embd, m->n_head);
    m->padded_vocab = (m->vocab_size + 127) / 128 * 128;
    return 0;
}

static int json_int_field(json_t *o, const char *key, int *out, const char *src)
{
    json_t *v = json_object_get(o, key);
    if (!v) return zinf_err("%s: model file lacks \"%s\"", src, key);
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > (1 << 30))
        return zinf_err("%s: \"%s\" must be a positive integer", src, key);
    *out = (int)json_integer_value(v);
    return 0;
}

int zinf_model_cfg_load(zinf_model_cfg *m, const char *name_or_path)
{
    memset(m, 0, sizeof *m);
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(presets[i].name, name_or_path) == 0) {
            snprintf(m->name, sizeof m->name, "%s", presets[i].name);
            m->n_layer = presets[i].L; m->n_embd = presets[i].C; m->n_head = presets[i].NH;
            m->vocab_size = presets[i].V; m->n_positions = presets[i].T;
            return finish_cfg(m, name_or_path);
        }
    }
    struct stat st;
    if (stat(name_or_path, &st) != 0)
        return zinf_err("--model %s: not a preset (%s) and not a readable file", name_or_path,
                        zinf_model_presets());
    char *text;
    size_t len;
    ZINF_TRY(zinf_read_file("--model", name_or_path, &text, &len)); /* a FIFO is refused, not waited on */
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    free(text);
    if (!root) return zinf_err("%s:%d:%d: malformed JSON: %s", name_or_path, je.line, je.column, je.text);
    int rc = 0;
    json_t *mt = json_object_get(root, "model_type");
    if (!json_is_object(root)) rc = zinf_err("%s: a model file must hold a JSON object", name_or_path);
    else if (mt && (!json_is_string(mt) || strcmp(json_string_value(mt), "gpt2") != 0))
        rc = zinf_err("%s: model_type %s is not supported (zinf has gpt2)", name_or_path,
                      json_is_string(mt) ? json_string_value(mt) : "(not a string)");
    if (!rc) rc = json_int_field(root, "n_layer", &m->n_layer, name_or_path);
    if (!rc) rc = json_int_field(root, "n_embd", &m->n_embd, name_or_path);
    if (!rc) rc = json_int_field(root, "n_head", &m->n_head, name_or_path);
    if (!rc) rc = json_int_field(root, "vocab_size", &m->vocab_size, name_or_path);
    if (!rc) rc = json_int_field(root, "n_positions", &m->n_positions, name_or_path);
    json_decref(root);
    if (rc) return rc;
    snprintf(m->name, sizeof m->name, "%s", name_or_path);
    return finish_cfg(m, name_or_path);
}

int64_t zinf_model_num_params(const zinf_model_cfg *m)
{
    int64_t C = m->n_embd, L = m->n_layer;
    int64_t block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
    return (int64_t)m->padded_vocab * C + (int64_t)m->n_positions * C + L * block + 2 * C;
}

/* ---------------------------------------------------------------- layout ------------------- */
static void add_tensor(zinf_unit *u, const char *name, int64_t rows, int64_t cols, bool decay,
                       float std, bool one)
{
    zinf_tensor_view *t = &u->t[u->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = u->numel;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->numel = rows * (cols ? cols : 1);
    t->decay = decay;
    t->init_std = std;
    t->init_one = one;
    u->numel += t->numel;
}

int zinf_model_init(zinf_model *m, const zinf_model_cfg *c, zinf_backend *be)
{
    memset(m, 0, sizeof *m);
    m->c = *c;
    m->be = be;
    int L = c->n_layer;
    int64_t C = c->n_embd;
    m->nunits = L + 2;
    m->units = calloc((size_t)m->nunits, sizeof *m->units);
    m->params = calloc((size_t)m->nunits, sizeof *m->params);
    m->grads = calloc((size_t)m->nunits, sizeof *m->grads);
    if (!m->units || !m->params || !m->grads) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    const float std = 0.02f, pstd = 0.02f / sqrtf(2.0f * (float)L);
    zinf_unit *u = &m->units[0];
    snprintf(u->name, sizeof u->name, "embed");
    add_tensor(u, "wte", c->padded_vocab, C, true, std, false);
    add_tensor(u, "wpe", c->n_positions, C, true, std, false);
    for (int l = 0; l < L; l++) {
        u = &m->units[1 + l];
        snprintf(u->name, sizeof u->name, "blocks.%d", l);
        char nm[64];
#define T_(suffix, r, cc, dec, sd, one)                                                           \
    snprintf(nm, sizeof nm, "blocks.%d." suffix, l);                                              \
    add_tensor(u, nm, r, cc, dec, sd, one)
        T_("ln1.weight", C, 0, false, 0, true);
        T_("ln1.bias", C, 0, false, 0, false);
        T_("attn.qkv.weight", 3 * C, C, true, std, false);
        T_("attn.qkv.bias", 3 * C, 0, false, 0, false);
        T_("attn.proj.weight", C, C, true, pstd, false);
        T_("attn.proj.bias", C, 0, false, 0, false);
        T_("ln2.weight", C, 0, false, 0, true);
        T_("ln2.bias", C, 0, false, 0, false);
        T_("mlp.fc.weight", 4 * C, C, true, std, false);
        T_("mlp.fc.bias", 4 * C, 0, false, 0, false);
        T_("mlp.proj.weight", C, 4 * C, true, pstd, false);
        T_("mlp.proj.bias", C, 0, false, 0, false);
#undef T_
    }
    u = &m->units[L + 1];
    snprintf(u->name, sizeof u->name, "lnf"); /* the final LayerNorm only: the head reuses wte */
    add_tensor(u, "lnf.weight", C, 0, false, 0, true);
    add_tensor(u, "lnf.bias", C, 0, false, 0, false);
    for (int i = 0; i < m->nunits; i++) m->num_params += m->units[i].numel;
    return 0;
}

/* Counter-based normal numbers: element i of tensor t of unit u depends on nothing else. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static float normal_at(uint64_t seed, int u, int t, int64_t i)
{
    uint64_t k = mix64(seed ^ mix64(((uint64_t)u << 40) ^ ((uint64_t)t << 32) ^ 0x5a17ULL));
    uint64_t a = mix64(k ^ mix64((uint64_t)i * 2)), b = mix64(k ^ mix64((uint64_t)i * 2 + 1));
    double u1 = ((double)(a >> 11) + 0.5) * 0x1.0p-53, u2 = (double)(b >> 11) * 0x1.0p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

void zinf_model_init_params(const zinf_model *m, int u, uint64_t seed, int64_t first, int64_t count,
                            float *out)
{
    const zinf_unit *un = &m->units[u];
    /* every element depends on (seed, unit, tensor, index) alone: any split over threads gives
     * the same values (a 10B-parameter model is 10^10 normal draws) */
#pragma omp parallel for schedule(static) if (count > 65536)
    for (int64_t k = 0; k < count; k++) {
        int64_t e = first + k;
        float v = 0;
        if (e < un->numel) {
            int t = 0;
            while (t + 1 < un->ntensors && un->t[t + 1].offset <= e) t++;
            const zinf_tensor_view *tv = &un->t[t];
            int64_t i = e - tv->offset;
            if (tv->init_one) v = 1.0f;
            else if (tv->init_std > 0) {
                bool pad_row = (u == 0 && t == ZINF_T_WTE && i / tv->shape[1] >= m->c.vocab_size);
                v = pad_row ? 0.0f : tv->init_std * normal_at(seed, u, t, i);
            }
        }
        out[k] = v; /* elements past numel are the shard padding: zero */
    }
}

/* ---------------------------------------------------------------- activations -------------- */
typedef struct zinf_layer_acts {
    void *ln1, *qkv, *atty, *res2, *ln2, *fch, *fchg;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lse;
} zinf_layer_acts;

/* Carve buffers from one allocation: pass base NULL to measure. */
typedef struct { char *base; size_t off; } carver;
static void *carve(carver *c, size_t bytes)
{
    bytes = (bytes + 255) & ~(size_t)255;
    void *p = c->base ? c->base + c->off : NULL;
    c->off += bytes;
    return p;
}

static void carve_layer(carver *cv, zinf_layer_acts *a, size_t N, size_t C, size_t NH,
                        size_t es)
{
    a->ln1 = carve(cv, N * C * es);
    a->qkv = carve(cv, N * 3 * C * es);
    a->atty = carve(cv, N * C * es);
    a->res2 = carve(cv, N * C * es);
    a->ln2 = carve(cv, N * C * es);
    a->fch = carve(cv, N * 4 * C * es);
    a->fchg = carve(cv, N * 4 * C * es);
    a->ln1_mean = carve(cv, N * 4);
    a->ln1_rstd = carve(cv, N * 4);
    a->ln2_mean = carve(cv, N * 4);
    a->ln2_rstd = carve(cv, N * 4);
    a->lse = carve(cv, N * NH * 4);
}

static void carve_acts(zinf_model *m, carver *cv, size_t es)
{
    size_t N = (size_t)m->B * m->T, C = m->c.n_embd, NH = m->c.n_head, L = m->c.n_layer;
    for (size_t l = 0; l <= L; l++) m->res[l] = carve(cv, N * C * es);
    for (size_t l = 0; l < L; l++) {
        if (m->recompute == ZINF_RECOMPUTE_NONE || l == 0 || l >= (size_t)m->recompute_blocks) {
            carve_layer(cv, &m->layers[l], N, C, NH, es);
            continue;
        }
        m->layers[l] = m->layers[0]; /* the recomputed activations share one set */
        if (m->recompute == ZINF_RECOMPUTE_KEEP_ATTN) {
            m->layers[l].atty = carve(cv, N * C * es);
            m->layers[l].lse = carve(cv, N * NH * 4);
        }
    }
    m->lnf = carve(cv, N * C * es);
    m->lnf_mean = carve(cv, N * 4);
    m->lnf_rstd = carve(cv, N * 4);
    m->logits = carve(cv, N * m->c.padded_vocab * es);
    m->losses = carve(cv, N * 4);
    m->tokens = carve(cv, N * 4);
    m->targets = carve(cv, N * 4);
}

static void carve_grads(zinf_model *m, carver *cv, size_t es)
{
    size_t N = (size_t)m->B * m->T, C = m->c.n_embd;
    m->d_res = carve(cv, N * C * es);
    m->d_ln = carve(cv, N * C * es);
    m->d_qkv = carve(cv, N * 3 * C * es);
    m->d_atty = carve(cv, N * C * es);
    m->d_fch = carve(cv, N * 4 * C * es); /* d(fch): matmul_dgelu_bwd writes it directly */
}

static int recompute_count(const zinf_model_cfg *c, zinf_recompute recompute, int blocks)
{
    if (recompute == ZINF_RECOMPUTE_NONE) return 0;
    if (blocks < 0 || blocks > c->n_layer)
        return zinf_err("%d blocks to recompute: the model has %d", blocks, c->n_layer);
    return blocks;
}

int zinf_model_alloc_acts(zinf_model *m, int B, int T, zinf_recompute recompute)
{
    return zinf_model_alloc_acts_n(m, B, T, recompute, m->c.n_layer);
}

int zinf_model_alloc_acts_n(zinf_model *m, int B, int T, zinf_recompute recompute, int blocks)
{
    if (T > m->c.n_positions)
        return zinf_err("sequence length %d exceeds the model's n_positions %d", T, m->c.n_positions);
    int nrc = recompute_count(&m->c, recompute, blocks);
    ZINF_TRY(nrc);
    m->B = B;
    m->T = T;
    m->recompute = nrc ? recompute : ZINF_RECOMPUTE_NONE;
    m->recompute_blocks = nrc;
    size_t es = zinf_dtype_size(m->be->cdt);
    m->res = calloc((size_t)m->c.n_layer + 1, sizeof *m->res);
    m->layers = calloc((size_t)m->c.n_layer, sizeof *m->layers);
    m->host_losses = calloc((size_t)B * T, sizeof(float));
    if (!m->res || !m->layers || !m->host_losses) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    ZINF_TRY(zinf_model_act_bytes_n(&m->c, B, T, es, recompute, nrc, &m->act_bytes, &m->grad_bytes));
    m->act_mem = m->be->alloc(m->be, ZINF_PLACE_DEVICE, m->act_bytes);
    m->grad_mem = m->be->alloc(m->be, ZINF_PLACE_DEVICE, m->grad_bytes);
    if (!m->act_mem || !m->grad_mem)
        return zinf_errc(ZINF_ENOMEM, "cannot allocate %.1f MiB of activations for B=%d T=%d",
                         (double)(m->act_bytes + m->grad_bytes) / 1048576.0, B, T);
    carver cv = {m->act_mem, 0}, cg = {m->grad_mem, 0};
    carve_acts(m, &cv, es);
    carve_grads(m, &cg, es);
    return 0;
}

int zinf_model_act_bytes(const zinf_model_cfg *c, int B, int T, size_t es, zinf_recompute recompute,
                         size_t *acts, size_t *grads)
{
    return zinf_model_act_bytes_n(c, B, T, es, recompute, c->n_layer, acts, grads);
}

int zinf_model_act_bytes_n(const zinf_model_cfg *c, int B, int T, size_t es, zinf_recompute recompute,
                           int blocks, size_t *acts, size_t *grads)
{
    int nrc = recompute_count(c, recompute, blocks);
    ZINF_TRY(nrc);
    zinf_model m = {.c = *c, .B = B, .T = T, .recompute = nrc ? recompute : ZINF_RECOMPUTE_NONE,
                    .recompute_blocks = nrc};
    m.res = calloc((size_t)c->n_layer + 1, sizeof *m.res);
    m.layers = calloc((size_t)c->n_layer, sizeof *m.layers);
    if (!m.res || !m.layers) {
        free(m.res), free(m.layers);
        return zinf_errc(ZINF_ENOMEM, "out of host memory");
    }
    carver ca = {0}, cg = {0};
    carve_acts(&m, &ca, es);
    carve_grads(&m, &cg, es);
    *acts = ca.off;
    *grads = cg.off;
    free(m.res), free(m.layers);
    return 0;
}

int zinf_model_recompute_fit(const zinf_model_cfg *c, int B, int T, size_t es, zinf_recompute recompute,
                             size_t budget, int *blocks)
{
    size_t a = 0, g = 0;
    if (recompute == ZINF_RECOMPUTE_NONE) return zinf_err("internal: no recompute policy to fit");
    /* each block kept instead of recomputed adds the same bytes, so the first count that fits is
     * the answer; n_layer is small enough to try them in turn */
    for (int n = 0; n <= c->n_layer; n++) {
        ZINF_TRY(zinf_model_act_bytes_n(c, B, T, es, recompute, n, &a, &g));
        if (a + g <= budget) {
            *blocks = n;
            return 0;
        }
    }
    return zinf_err("activations need %.2f GiB with every block recomputed, more than the %.2f GiB free for them",
                    (double)(a + g) / 1073741824.0, (double)budget / 1073741824.0);
}

void zinf_model_free(zinf_model *m)
{
    if (m->be) {
        if (m->act_mem) m->be->free(m->be, ZINF_PLACE_DEVICE, m->act_mem);
        if (m->grad_mem) m->be->free(m->be, ZINF_PLACE_DEVICE, m->grad_mem);
    }
    free(m->units);
    free(m->params);
    free(m->grads);
    free(m->res);
    free(m->layers);
    free(m->host_losses);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- forward / backward ------- */
static inline void *tp(const zinf_model *m, void **bufs, int u, int t)
{
    return (char *)bufs[u] + (size_t)m->units[u].t[t].offset * zinf_dtype_size(m->be->cdt);
}

#define HOOK(h, fn, ...) ((h) && (h)->fn ? (h)->fn((h)->ctx, __VA_ARGS__) : 0)

/* Block l's forward. For the backward's recomputation (for_backward) it stops after the MLP's
 * GELU: the MLP projection (with the residual sum) produces only res[l+1], which the backward
 * never reads (it starts from d(res[l+1])), and that projection is a third of the block's
 * matrix FLOPs. Under KEEP_ATTN the recomputation also reuses the kept attention output. */
static void block_forward(zinf_model *m, int l, bool for_backward)
{
    zinf_backend *be = m->be;
    zinf_layer_acts *a = &m->layers[l];
    int B = m->B, T = m->T, C = m->c.n_embd, NH = m->c.n_head;
    int64_t N = (int64_t)B * T;
    int u = 1 + l;
    void **P = m->params;
    be->layernorm_fwd(be, a->ln1, a->ln1_mean, a->ln1_rstd, m->res[l], tp(m, P, u, ZINF_T_LN1W),
                      tp(m, P, u, ZINF_T_LN1B), N, C);
    be->matmul_fwd(be, a->qkv, a->ln1, tp(m, P, u, ZINF_T_QKVW), tp(m, P, u, ZINF_T_QKVB), N, C, 3 * C);
    if (!for_backward || m->recompute != ZINF_RECOMPUTE_KEEP_ATTN)
        be->attention_fwd(be, a->atty, a->lse, a->qkv, B, T, C, NH);
    /* res2 = res[l] + atty @ Wproj^T + bproj: the residual sum rides on the GEMM */
    be->matmul_fwd_res(be, a->res2, a->atty, tp(m, P, u, ZINF_T_PROJW), tp(m, P, u, ZINF_T_PROJB), m->res[l],
                       N, C, C);
    be->layernorm_fwd(be, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, tp(m, P, u, ZINF_T_LN2W),
                      tp(m, P, u, ZINF_T_LN2B), N, C);
    /* fch = ln2 @ Wfc^T + bfc, fchg = gelu(fch), in one GEMM with a GELU epilogue */
    be->matmul_gelu_fwd(be, a->fchg, a->fch, a->ln2, tp(m, P, u, ZINF_T_FCW), tp(m, P, u, ZINF_T_FCB),
                        N, C, 4 * C);
    if (for_backward) return;
    be->matmul_fwd_res(be, m->res[l + 1], a->fchg, tp(m, P, u, ZINF_T_FCPROJW), tp(m, P, u, ZINF_T_FCPROJB),
                       a->res2, N, 4 * C, C);
}

static int forward(zinf_model *m, const int32_t *tokens, const int32_t *targets,
                   const zinf_unit_hooks *h, float dloss_scale, float *mean_loss)
{
    zinf_backend *be = m->be;
    int B = m->B, T = m->T, C = m->c.n_embd, L = m->c.n_layer;
    int64_t N = (int64_t)B * T;
    for (int64_t i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= m->c.vocab_size)
            return zinf_err("token %d at position %lld is outside the vocabulary (size %d)", tokens[i],
                            (long long)i, m->c.vocab_size);
    ZINF_TRY(be->copy(be, m->tokens, tokens, (size_t)N * 4, NULL));
    if (targets) ZINF_TRY(be->copy(be, m->targets, targets, (size_t)N * 4, NULL));

    ZINF_TRY(HOOK(h, acquire, 0, 0));
    be->encoder_fwd(be, m->res[0], m->tokens, tp(m, m->params, 0, ZINF_T_WTE),
                    tp(m, m->params, 0, ZINF_T_WPE), B, T, C);
    ZINF_TRY(HOOK(h, release, 0, 0));
    for (int l = 0; l < L; l++) {
        ZINF_TRY(HOOK(h, acquire, 1 + l, 0));
        block_forward(m, l, false);
        ZINF_TRY(HOOK(h, release, 1 + l, 0));
    }
    ZINF_TRY(HOOK(h, acquire, L + 1, 0));
    be->layernorm_fwd(be, m->lnf, m->lnf_mean, m->lnf_rstd, m->res[L], tp(m, m->params, L + 1, ZINF_T_LNFW),
                      tp(m, m->params, L + 1, ZINF_T_LNFB), N, C);
    ZINF_TRY(HOOK(h, release, L + 1, 0));
    ZINF_TRY(HOOK(h, acquire, 0, 0));
    be->matmul_fwd(be, m->logits, m->lnf, tp(m, m->params, 0, ZINF_T_WTE), NULL, N, C, m->c.padded_vocab);
    ZINF_TRY(HOOK(h, release, 0, 0));
    m->logits_hold_grad = false;
    if (!targets) return be->sync(be);
    m->nvalid = 0;
    for (int64_t i = 0; i < N; i++) m->nvalid += targets[i] >= 0;
    float dloss = dloss_scale != 0.0f && m->nvalid ? dloss_scale / (float)m->nvalid : 0.0f;
    be->xent(be, m->losses, m->logits, m->targets, N, m->c.vocab_size, m->c.padded_vocab, dloss);
    m->logits_hold_grad = dloss_scale != 0.0f;
    ZINF_TRY(be->copy(be, m->host_losses, m->losses, (size_t)N * 4, NULL));
    ZINF_TRY(be->sync(be));
    double s = 0;
    for (int64_t i = 0; i < N; i++)
        if (targets[i] >= 0) s += m->host_losses[i];
    if (mean_loss) *mean_loss = m->nvalid ? (float)(s / (double)m->nvalid) : 0.0f;
    return 0;
}

int zinf_model_forward(zinf_model *m, const int32_t *tokens, const int32_t *targets,
                       const zinf_unit_hooks *h, float *mean_loss)
{
    return forward(m, tokens, targets, h, 0.0f, mean_loss);
}

int zinf_model_forward_train(zinf_model *m, const int32_t *tokens, const int32_t *targets,
                             const zinf_unit_hooks *h, float dloss_scale, float *mean_loss)
{
    if (!targets) return zinf_errc(ZINF_EINVAL, "internal: a training forward needs targets");
    return forward(m, tokens, targets, h, dloss_scale, mean_loss);
}

static void block_backward(zinf_model *m, int l)
{
    zinf_backend *be = m->be;
    zinf_layer_acts *a = &m->layers[l];
    int B = m->B, T = m->T, C = m->c.n_embd, NH = m->c.n_head;
    int64_t N = (int64_t)B * T;
    int u = 1 + l;
    void **P = m->params, **G = m->grads;
    if (l < m->recompute_blocks) block_forward(m, l, true); /* from the kept input */
    /* d_res holds d(res[l+1]); it becomes d(res2), then d(res[l]) by accumulation. The input
     * gradients of the products and of attention overwrite their buffers: nothing is zeroed. */
    /* the MLP projection's weight gradients, then d(fch) = gelu'(fch) * (d_res @ Wp) in one GEMM
     * with a dGELU epilogue (it overwrites d_fch, so d_fch needs no zeroing) */
    be->matmul_bwd(be, NULL, tp(m, G, u, ZINF_T_FCPROJW), tp(m, G, u, ZINF_T_FCPROJB), m->d_res,
                   a->fchg, tp(m, P, u, ZINF_T_FCPROJW), N, 4 * C, C);
    be->matmul_dgelu_bwd(be, m->d_fch, m->d_res, tp(m, P, u, ZINF_T_FCPROJW), a->fch, N, 4 * C, C);
    be->matmul_bwd(be, m->d_ln, tp(m, G, u, ZINF_T_FCW), tp(m, G, u, ZINF_T_FCB), m->d_fch, a->ln2,
                   tp(m, P, u, ZINF_T_FCW), N, C, 4 * C);
    be->layernorm_bwd(be, m->d_res, tp(m, G, u, ZINF_T_LN2W), tp(m, G, u, ZINF_T_LN2B), m->d_ln, a->res2,
                      tp(m, P, u, ZINF_T_LN2W), a->ln2_mean, a->ln2_rstd, N, C);
    be->matmul_bwd(be, m->d_atty, tp(m, G, u, ZINF_T_PROJW), tp(m, G, u, ZINF_T_PROJB), m->d_res, a->atty,
                   tp(m, P, u, ZINF_T_PROJW), N, C, C);
    be->attention_bwd(be, m->d_qkv, m->d_atty, a->qkv, a->atty, a->lse, B, T, C, NH);
    be->matmul_bwd(be, m->d_ln, tp(m, G, u, ZINF_T_QKVW), tp(m, G, u, ZINF_T_QKVB), m->d_qkv, a->ln1,
                   tp(m, P, u, ZINF_T_QKVW), N, C, 3 * C);
    be->layernorm_bwd(be, m->d_res, tp(m, G, u, ZINF_T_LN1W), tp(m, G, u, ZINF_T_LN1B), m->d_ln, m->res[l],
                      tp(m, P, u, ZINF_T_LN1W), a->ln1_mean, a->ln1_rstd, N, C);
}

int zinf_model_backward(zinf_model *m, const zinf_unit_hooks *h, float dloss_scale)
{
    zinf_backend *be = m->be;
    int B = m->B, T = m->T, C = m->c.n_embd, L = m->c.n_layer;
    int64_t N = (int64_t)B * T;
    size_t es = zinf_dtype_size(be->cdt);
    /* the loss gradient replaces the logits (already, after a training forward) */
    if (!m->logits_hold_grad) {
        float dloss = m->nvalid ? dloss_scale / (float)m->nvalid : 0.0f;
        be->xent(be, m->losses, m->logits, m->targets, N, m->c.vocab_size, m->c.padded_vocab, dloss);
    }
    m->logits_hold_grad = false;
    ZINF_TRY(HOOK(h, acquire, 0, 1));
    be->matmul_bwd(be, m->d_ln, tp(m, m->grads, 0, ZINF_T_WTE), NULL, m->logits, m->lnf,
                   tp(m, m->params, 0, ZINF_T_WTE), N, C, m->c.padded_vocab);
    ZINF_TRY(HOOK(h, release, 0, 1));
    ZINF_TRY(HOOK(h, acquire, L + 1, 1));
    be->memset0(be, m->d_res, (size_t)N * C * es, NULL);
    be->layernorm_bwd(be, m->d_res, tp(m, m->grads, L + 1, ZINF_T_LNFW), tp(m, m->grads, L + 1, ZINF_T_LNFB),
                      m->d_ln, m->res[L], tp(m, m->params, L + 1, ZINF_T_LNFW), m->lnf_mean, m->lnf_rstd, N, C);
    ZINF_TRY(HOOK(h, release, L + 1, 1));
    ZINF_TRY(HOOK(h, grad_ready, L + 1));
    for (int l = L - 1; l >= 0; l--) {
        ZINF_TRY(HOOK(h, acquire, 1 + l, 1));
        block_backward(m, l);
        ZINF_TRY(HOOK(h, release, 1 + l, 1));
        ZINF_TRY(HOOK(h, grad_ready, 1 + l));
    }
    ZINF_TRY(HOOK(h, acquire, 0, 1));
    be->encoder_bwd(be, tp(m, m->grads, 0, ZINF_T_WTE), tp(m, m->grads, 0, ZINF_T_WPE), m->d_res, m->tokens,
                    B, T, C);
    ZINF_TRY(HOOK(h, release, 0, 1));
    ZINF_TRY(HOOK(h, grad_ready, 0));
    return 0;
}
