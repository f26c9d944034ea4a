/* What every family shares: units, init, activation sizing, the loss; see model.h. The family
 * (family.h) is reached only through its table. */
#include "model.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "family.h"
#include "file.h"

/* ---------------------------------------------------------------- configs ------------------ */
const char *zinf_model_presets(void) { return zinf_family_presets(); }

static const zinf_family *family_of(const char *model_type, const char *src)
{
    const zinf_family *f = zinf_family_find(model_type);
    if (!f) zinf_err("%s: model_type %s is not supported (zinf has %s)", src, model_type, zinf_family_types());
    return f;
}

const char *zinf_model_positions_key(const zinf_model_cfg *c)
{
    const zinf_family *f = zinf_family_find(c->model_type[0] ? c->model_type : "gpt2");
    return f && f->positions_key ? f->positions_key : "n_positions";
}

/* zinf_model_describe's writer: fields separated by ", ", a new line (indent spaces) before a field
 * that would pass width */
typedef struct {
    FILE *out;
    int col, indent, width;
    const zinf_model_cfg *c;
} describer;

static void describe_put(describer *d, const char *field)
{
    int n = (int)strlen(field);
    if (d->col > d->indent && d->col + 2 + n > d->width) {
        fprintf(d->out, ",\n%*s", d->indent, "");
        d->col = d->indent;
    } else if (d->col > d->indent) {
        fputs(", ", d->out);
        d->col += 2;
    }
    fputs(field, d->out);
    d->col += n;
}

/* one value under its key; an object's members as key.member, so that none is one long field */
static void describe_value(describer *d, const char *key, json_t *v)
{
    char field[512];
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.%s", key, k);
            describe_value(d, sub, x);
        }
        return;
    }
    if (json_is_null(v) || !strcmp(key, "padded_vocab")) return; /* unset; beside vocab_size */
    if (json_is_integer(v) && !strcmp(key, "vocab_size")) /* with the rows the tensors have */
        snprintf(field, sizeof field, "%s %lld (padded to %d)", key, (long long)json_integer_value(v),
                 d->c->padded_vocab);
    else if (json_is_integer(v)) snprintf(field, sizeof field, "%s %lld", key, (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(field, sizeof field, "%s %.10g", key, json_real_value(v));
    else if (json_is_boolean(v)) snprintf(field, sizeof field, "%s %s", key, json_is_true(v) ? "true" : "false");
    else if (json_is_string(v)) snprintf(field, sizeof field, "%s %s", key, json_string_value(v));
    else {
        char *val = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(field, sizeof field, "%s %s", key, val ? val : "?");
        free(val);
    }
    describe_put(d, field);
}

char *zinf_model_describe(const zinf_model_cfg *c, int indent, int width)
{
    const zinf_family *f = family_of(c->model_type[0] ? c->model_type : "gpt2", "the model");
    if (!f) return NULL;
    json_t *o = f->cfg_json(c);
    char *buf = NULL;
    size_t cap = 0;
    FILE *out = o ? open_memstream(&buf, &cap) : NULL;
    if (out) {
        /* the first line's prefix is the caller's: it counts as the indent */
        describer d = {out, indent, indent, width, c};
        const char *key;
        json_t *v;
        json_object_foreach(o, key, v) describe_value(&d, key, v);
    }
    json_decref(o);
    if (!out || fclose(out) || !buf) {
        free(buf);
        zinf_errc(ZINF_ENOMEM, "out of host memory");
        return NULL;
    }
    return buf;
}

/* the family of a config.json object (model_type, default gpt2) reads its fields into c */
int zinf_model_cfg_from_json(zinf_model_cfg *c, json_t *root, const char *src)
{
    memset(c, 0, sizeof *c);
    if (!json_is_object(root)) return zinf_err("%s: a model file must hold a JSON object", src);
    json_t *mt = json_object_get(root, "model_type");
    if (mt && !json_is_string(mt))
        return zinf_err("%s: model_type %s is not supported (zinf has %s)", src, "(not a string)",
                        zinf_family_types());
    /* without model_type the file is GPT-2's (zinf's own model files from before it); one that
     * spells the Llama family's sizes lacks it instead */
    static const char *const hf_keys[] = {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"};
    for (size_t i = 0; !mt && i < sizeof hf_keys / sizeof *hf_keys; i++)
        if (json_object_get(root, hf_keys[i]))
            return zinf_err("%s: no model_type, yet it gives %s: a file without model_type is read as GPT-2's; add "
                            "\"model_type\" (zinf has %s)", src, hf_keys[i], zinf_family_types());
    const zinf_family *f = family_of(mt ? json_string_value(mt) : NULL, src);
    if (!f) return ZINF_EINVAL;
    snprintf(c->name, sizeof c->name, "%s", src);
    snprintf(c->model_type, sizeof c->model_type, "%s", f->model_type);
    return f->cfg_from_hf(c, root, src);
}

int zinf_model_cfg_load(zinf_model_cfg *m, const char *name_or_path)
{
    memset(m, 0, sizeof *m);
    int found = zinf_family_preset(m, name_or_path);
    if (found) return found < 0 ? found : 0;
    struct stat st;
    if (stat(name_or_path, &st) != 0)
        return zinf_err("--model %s: not a preset (%s) and not a readable file or directory", name_or_path,
                        zinf_model_presets());
    /* a Hugging Face model directory: its config.json */
    char path[4096];
    snprintf(path, sizeof path, "%s%s", name_or_path, S_ISDIR(st.st_mode) ? "/config.json" : "");
    if (S_ISDIR(st.st_mode) && stat(path, &st) != 0)
        return zinf_err("--model %s: a directory without config.json (a Hugging Face model directory has one)",
                        name_or_path);
    char *text;
    size_t len;
    ZINF_TRY(zinf_read_file("--model", path, &text, &len)); /* a FIFO is refused, not waited on */
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    free(text);
    if (!root) return zinf_err("%s:%d:%d: malformed JSON: %s", path, je.line, je.column, je.text);
    int rc = zinf_model_cfg_from_json(m, root, path);
    json_decref(root);
    return rc;
}

int64_t zinf_model_num_params(const zinf_model_cfg *c)
{
    zinf_model m;
    int rc = zinf_model_init(&m, c, NULL);
    int64_t n = rc ? rc : m.num_params;
    zinf_model_free(&m);
    return n;
}

/* ---------------------------------------------------------------- layout ------------------- */
zinf_tensor_view *zinf_unit_add(zinf_unit *u, const char *name, int64_t rows, int64_t cols, bool decay, float std,
                                bool one)
{
    zinf_tensor_view *t = &u->t[u->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = u->numel;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->init_rows = rows;
    t->numel = rows * (cols ? cols : 1);
    t->decay = decay;
    t->init_std = std;
    t->init_one = one;
    t->trainable = true;
    u->numel += t->numel;
    return t;
}

int zinf_model_init(zinf_model *m, const zinf_model_cfg *c, zinf_backend *be)
{
    memset(m, 0, sizeof *m);
    m->c = *c;
    m->be = be;
    m->f = family_of(c->model_type, "the model");
    if (!m->f) return ZINF_EINVAL;
    m->nunits = m->f->nunits(c);
    m->units = calloc((size_t)m->nunits, sizeof *m->units);
    m->params = calloc((size_t)m->nunits, sizeof *m->params);
    m->grads = calloc((size_t)m->nunits, sizeof *m->grads);
    m->grad_fresh = calloc((size_t)m->nunits, sizeof *m->grad_fresh);
    if (!m->units || !m->params || !m->grads || !m->grad_fresh) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    ZINF_TRY(m->f->layout(m));
    for (int i = 0; i < m->nunits; i++) {
        zinf_unit *u = &m->units[i];
        u->trainable = true;
        for (int t = 0; t < u->ntensors; t++) u->trainable = u->trainable && u->t[t].trainable;
        m->num_params += u->numel;
    }
    int n = zinf_model_use_order(m, NULL, 0, &m->nfwd);
    ZINF_TRY(n);
    m->uses = malloc((size_t)(n > 0 ? n : 1) * sizeof *m->uses);
    if (!m->uses) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    m->nuses = zinf_model_use_order(m, m->uses, n, &m->nfwd);
    return 0;
}

int zinf_model_use_order(const zinf_model *m, zinf_use *out, int cap, int *nfwd)
{
    return m->f->use_order(m, out, cap, nfwd);
}

int64_t zinf_model_grad_live_max(const zinf_model *m)
{
    const zinf_use *seq = m->uses;
    const int nfwd = m->nfwd, n = m->nuses;
    int *last = malloc((size_t)(m->nunits > 0 ? m->nunits : 1) * sizeof *last);
    bool *live = calloc((size_t)(m->nunits > 0 ? m->nunits : 1), sizeof *live);
    int64_t cur = 0, most = 0;
    int rc = last && live ? 0 : zinf_errc(ZINF_ENOMEM, "out of host memory");
    for (int u = 0; !rc && u < m->nunits; u++) last[u] = -1;
    for (int i = nfwd; !rc && i < n; i++) last[seq[i].u] = i;
    /* a unit's gradient is taken at its first backward use and given up after its last */
    for (int i = nfwd; !rc && i < n; i++) {
        int u = seq[i].u;
        if (!m->units[u].trainable) continue;
        if (!live[u]) live[u] = true, cur += m->units[u].numel;
        if (cur > most) most = cur;
        if (i == last[u]) live[u] = false, cur -= m->units[u].numel;
    }
    free(last), free(live);
    return rc ? rc : most;
}

double zinf_model_flops_per_token(const zinf_model *m, int T) { return m->f->flops_per_token(m, T); }

/* Counter-based normal numbers: element i of tensor t of unit u depends on nothing else. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t tensor_key(uint64_t seed, int u, int t)
{
    return mix64(seed ^ mix64(((uint64_t)u << 40) ^ ((uint64_t)t << 32) ^ 0x5a17ULL));
}

/* element i of the tensor whose key tensor_key gives */
static float normal_at(uint64_t k, int64_t i)
{
    uint64_t a = mix64(k ^ mix64((uint64_t)i * 2)), b = mix64(k ^ mix64((uint64_t)i * 2 + 1));
    double u1 = ((double)(a >> 11) + 0.5) * 0x1.0p-53, u2 = (double)(b >> 11) * 0x1.0p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

void zinf_model_init_params(const zinf_model *m, int u, uint64_t seed, int64_t first, int64_t count,
                            float *out)
{
    const zinf_unit *un = &m->units[u];
    uint64_t key[ZINF_MAX_UNIT_TENSORS];
    for (int t = 0; t < un->ntensors; t++) key[t] = tensor_key(seed, u, t);
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
                int64_t row = tv->shape[1] ? i / tv->shape[1] : i;
                v = row >= tv->init_rows ? 0.0f : tv->init_std * normal_at(key[t], i);
            }
        }
        out[k] = v; /* elements past numel are the shard padding: zero */
    }
}

/* ---------------------------------------------------------------- activations -------------- */
void *zinf_carve(zinf_carver *c, size_t bytes)
{
    bytes = (bytes + 255) & ~(size_t)255;
    void *p = c->base ? c->base + c->off : NULL;
    c->off += bytes;
    return p;
}

int zinf_head_rows_env(int64_t *rows)
{
    const char *e = getenv("ZINF_HEAD_ROWS");
    *rows = 0;
    if (!e || !*e) return 0;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(e, &end, 10);
    if (errno || *end || end == e || v < 1)
        return zinf_err("ZINF_HEAD_ROWS=%s: expected the head's rows a chunk, an integer >= 1", e);
    *rows = v;
    return 0;
}

int64_t zinf_model_head_rows(int64_t N, int Vp, size_t es)
{
    int64_t fit = (int64_t)(ZINF_LOGITS_BUDGET / ((size_t)Vp * es)), cap = 0;
    if (fit < 1) fit = 1;
    if (zinf_head_rows_env(&cap)) zinf_err_clear(); /* refused at the start of a run (train's env_check) */
    else if (cap > 0 && cap < fit) fit = cap;
    return N <= fit ? N : fit;
}

/* the family's activations and scratch, then what every family has: logits, losses, tokens */
static void carve_all(zinf_model *m, zinf_carver *cv, zinf_carver *cg, size_t es)
{
    size_t N = (size_t)m->B * m->T;
    m->f->carve(m, cv, cg, es);
    m->head_rows = zinf_model_head_rows((int64_t)N, m->c.padded_vocab, es);
    m->logits = zinf_carve(cv, (size_t)m->head_rows * m->c.padded_vocab * es);
    /* in chunks, the head's weight gradient of the chunks a training forward runs (zinf_model_head) */
    m->head_dw = (int64_t)N > m->head_rows ? zinf_carve(cg, (size_t)m->c.padded_vocab * m->c.n_embd * es) : NULL;
    m->losses = zinf_carve(cv, N * 4);
    m->tokens = zinf_carve(cv, N * 4);
    m->targets = zinf_carve(cv, N * 4);
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
        return zinf_err("sequence length %d exceeds the model's %s %d", T, zinf_model_positions_key(&m->c),
                        m->c.n_positions);
    int nrc = recompute_count(&m->c, recompute, blocks);
    ZINF_TRY(nrc);
    m->B = B;
    m->T = T;
    m->recompute = nrc ? recompute : ZINF_RECOMPUTE_NONE;
    m->recompute_blocks = nrc;
    size_t es = zinf_dtype_size(m->be->cdt);
    m->host_losses = calloc((size_t)B * T, sizeof(float));
    if (!m->host_losses) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    ZINF_TRY(m->f->acts_init(m));
    ZINF_TRY(zinf_model_act_bytes_lean(&m->c, B, T, es, recompute, nrc, m->lean, &m->act_bytes, &m->grad_bytes));
    m->act_mem = m->be->alloc(m->be, ZINF_PLACE_DEVICE, m->act_bytes);
    m->grad_mem = m->be->alloc(m->be, ZINF_PLACE_DEVICE, m->grad_bytes);
    if (!m->act_mem || !m->grad_mem)
        return zinf_errc(ZINF_ENOMEM, "cannot allocate %.1f MiB of activations for B=%d T=%d",
                         (double)(m->act_bytes + m->grad_bytes) / 1048576.0, B, T);
    zinf_carver cv = {m->act_mem, 0}, cg = {m->grad_mem, 0};
    carve_all(m, &cv, &cg, es);
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
    return zinf_model_act_bytes_lean(c, B, T, es, recompute, blocks, false, acts, grads);
}

int zinf_model_act_bytes_lean(const zinf_model_cfg *c, int B, int T, size_t es, zinf_recompute recompute, int blocks,
                              bool lean, size_t *acts, size_t *grads)
{
    int nrc = recompute_count(c, recompute, blocks);
    ZINF_TRY(nrc);
    if (B < 1 || T < 1) return zinf_err("activations of %d x %d tokens: both must be at least 1", B, T);
    if ((int64_t)B * T > 1) {
        /* every buffer is the tokens N = B x T times a width, rounded up to 256 bytes (the head's
         * logits fewer rows, its weight gradient N-free), so one token's layout s1 bounds them all:
         * at most (N + 1) x s1 + Vp x C x es. Past 2^63 they would not fit the int64 counts that
         * report them, and the products in the families' carve would soon wrap in size_t. */
        size_t a1 = 0, g1 = 0;
        ZINF_TRY(zinf_model_act_bytes_lean(c, 1, 1, es, recompute, blocks, lean, &a1, &g1));
        const double bound = ((double)B * T + 1) * (double)(a1 + g1) +
                             (double)c->padded_vocab * c->n_embd * (double)es;
        if (bound > 0x1p63)
            return zinf_err("activations of %d x %d tokens: more than 2^63 bytes (%.3g)", B, T, bound);
    }
    zinf_model m = {.c = *c, .B = B, .T = T, .recompute = nrc ? recompute : ZINF_RECOMPUTE_NONE,
                    .recompute_blocks = nrc, .lean = lean};
    m.f = family_of(c->model_type, "the model");
    if (!m.f) return ZINF_EINVAL;
    int rc = m.f->acts_init(&m);
    if (!rc) {
        zinf_carver ca = {0}, cg = {0};
        carve_all(&m, &ca, &cg, es);
        *acts = ca.off;
        *grads = cg.off;
    }
    m.f->acts_free(&m);
    return rc;
}

/* the fewest blocks recomputed for which the activations, lean or not, fit `budget`; -1: none */
static int fit_blocks(const zinf_model_cfg *c, int B, int T, size_t es, zinf_recompute recompute, size_t budget,
                      bool lean, int *blocks, size_t *need)
{
    size_t a = 0, g = 0;
    *blocks = -1;
    /* each block kept instead of recomputed adds the same bytes, so the first count that fits is
     * the answer; n_layer is small enough to try them in turn */
    for (int n = 0; n <= c->n_layer; n++) {
        ZINF_TRY(zinf_model_act_bytes_lean(c, B, T, es, recompute, n, lean, &a, &g));
        if (a + g <= budget) {
            *blocks = n;
            return 0;
        }
    }
    *need = a + g;
    return 0;
}

bool zinf_lean_pays(const zinf_model_cfg *c, size_t es, int full_blocks, int lean_blocks)
{
    return (double)(full_blocks - lean_blocks) * 2.0 * (double)c->n_embd >
           (double)(c->n_layer - lean_blocks) * (double)es * ZINF_GPU_FLOP_PER_BYTE;
}

int zinf_model_recompute_fit(const zinf_model_cfg *c, int B, int T, size_t es, zinf_recompute recompute,
                             size_t budget, bool *lean, int *blocks)
{
    if (recompute == ZINF_RECOMPUTE_NONE) return zinf_err("internal: no recompute policy to fit");
    int nf = -1, nl = -1;
    size_t need = 0, lneed = 0;
    ZINF_TRY(fit_blocks(c, B, T, es, recompute, budget, false, &nf, &need));
    if (lean) {
        *lean = false;
        if (nf != 0) ZINF_TRY(fit_blocks(c, B, T, es, recompute, budget, true, &nl, &lneed));
        if (nl >= 0 && (nf < 0 || (nl < nf && zinf_lean_pays(c, es, nf, nl)))) {
            *lean = true;
            *blocks = nl;
            return 0;
        }
    }
    if (nf >= 0) {
        *blocks = nf;
        return 0;
    }
    /* nothing fits: the least the activations need, lean where the family has a lean form */
    bool leaner = lneed && lneed < need;
    return zinf_err("activations need %.2f GiB with every block recomputed%s, more than the %.2f GiB free for them",
                    (double)(leaner ? lneed : need) / 1073741824.0, leaner ? " and lean" : "",
                    (double)budget / 1073741824.0);
}

void zinf_model_free(zinf_model *m)
{
    if (m->be) {
        if (m->act_mem) m->be->free(m->be, ZINF_PLACE_DEVICE, m->act_mem);
        if (m->grad_mem) m->be->free(m->be, ZINF_PLACE_DEVICE, m->grad_mem);
    }
    if (m->f) m->f->acts_free(m);
    if (!m->ctx) {
        free(m->units);
        free(m->params);
        free(m->grads);
        free(m->grad_fresh);
        free(m->uses);
    }
    free(m->host_losses);
    memset(m, 0, sizeof *m);
}

int zinf_model_ctx_alloc(const zinf_model *m, zinf_model *ctx)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->c = m->c;
    ctx->f = m->f;
    ctx->be = m->be;
    ctx->nunits = m->nunits;
    ctx->units = m->units;
    ctx->num_params = m->num_params;
    ctx->params = m->params;
    ctx->grads = m->grads;
    ctx->grad_fresh = m->grad_fresh;
    ctx->uses = m->uses;
    ctx->nuses = m->nuses;
    ctx->nfwd = m->nfwd;
    ctx->ctx = true;
    ctx->lean = m->lean;
    int rc = zinf_model_alloc_acts_n(ctx, m->B, m->T, m->recompute, m->recompute_blocks);
    if (rc) zinf_model_free(ctx);
    return rc;
}

/* ---------------------------------------------------------------- forward / backward ------- */
int zinf_blocks_backward(zinf_model *m, const zinf_unit_hooks *h, void (*block)(zinf_model *m, int l))
{
    for (int l = m->c.n_layer - 1; l >= 0; l--) {
        ZINF_TRY(zinf_acquire(h, 1 + l, 1));
        block(m, l);
        ZINF_TRY(zinf_release(h, 1 + l, 1));
        ZINF_TRY(zinf_grad_ready(h, 1 + l));
    }
    return 0;
}

/* The batch into m: checked, its tokens and targets on the device, the family's forward_begin. */
static int forward_take(zinf_model *m, const zinf_batch *b)
{
    zinf_backend *be = m->be;
    if (b->B != m->B || b->T != m->T)
        return zinf_errc(ZINF_EINVAL, "internal: a batch of %d x %d tokens for activations of %d x %d", b->B, b->T,
                         m->B, m->T);
    int64_t N = (int64_t)m->B * m->T;
    const int32_t *tokens = b->tok, *targets = b->tgt;
    if (b->head_n && (targets || b->head_n < 0 || b->head_n > m->head_rows))
        return zinf_errc(ZINF_EINVAL, "internal: %lld head rows (at most %lld)%s", (long long)b->head_n,
                         (long long)m->head_rows, targets ? " with targets" : "");
    for (int64_t i = 0; i < b->head_n; i++)
        if (b->head_at[i] < 0 || b->head_at[i] >= N)
            return zinf_errc(ZINF_EINVAL, "internal: head row %lld of a batch of %lld tokens", (long long)b->head_at[i],
                             (long long)N);
    for (int64_t i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= m->c.vocab_size)
            return zinf_err("token %d at position %lld is outside the vocabulary (size %d)", tokens[i],
                            (long long)i, m->c.vocab_size);
    ZINF_TRY(be->copy(be, m->tokens, tokens, (size_t)N * 4, NULL));
    if (targets) ZINF_TRY(be->copy(be, m->targets, targets, (size_t)N * 4, NULL));
    m->logits_hold_grad = false;
    m->head_early = false;
    if (targets) {
        m->nvalid = 0;
        for (int64_t i = 0; i < N; i++) m->nvalid += targets[i] >= 0;
    }
    return m->f->forward_begin(m, b);
}

/* The forward uses before the head's, of k models (a model and its contexts) at once: each
 * unit acquired once, each model's step of it, released. */
static int forward_uses(zinf_model *const *ms, int k, const zinf_unit_hooks *h)
{
    const zinf_model *m = ms[0];
    for (int i = 0; i < m->nfwd - 1; i++) { /* the last forward use is the head's */
        ZINF_TRY(zinf_acquire(h, m->uses[i].u, 0));
        for (int j = 0; j < k; j++) m->f->forward_use(ms[j], i);
        ZINF_TRY(zinf_release(h, m->uses[i].u, 0));
    }
    return 0;
}

int zinf_model_forward_layers(zinf_model *const *ms, int k, const zinf_batch *bs, const zinf_unit_hooks *h)
{
    for (int j = 0; j < k; j++) {
        if (!bs[j].tgt) return zinf_errc(ZINF_EINVAL, "internal: a training forward needs targets");
        ZINF_TRY(forward_take(ms[j], &bs[j]));
    }
    return forward_uses(ms, k, h);
}

bool zinf_grad_first_but(zinf_model *m, int u, const void *at, int64_t n)
{
    if (!zinf_grad_first(m, u)) return false;
    const size_t es = zinf_dtype_size(m->be->cdt);
    char *g = m->grads[u], *a = (char *)at, *end = g + (size_t)m->units[u].numel * es;
    if (a > g) m->be->memset0(m->be, g, (size_t)(a - g), NULL);
    if (a + (size_t)n * es < end) m->be->memset0(m->be, a + (size_t)n * es, (size_t)(end - (a + (size_t)n * es)), NULL);
    return true;
}

void zinf_grad_zero_first(zinf_model *m, int u) { (void)zinf_grad_first_but(m, u, m->grads[u], 0); }

int zinf_model_forward_batch(zinf_model *m, const zinf_batch *b, const zinf_unit_hooks *h, float dloss_scale,
                             float *mean_loss)
{
    ZINF_TRY(forward_take(m, b));
    ZINF_TRY(forward_uses(&m, 1, h));
    return zinf_model_head(m, b, h, dloss_scale, mean_loss);
}

/* The loss of R rows of logits and, for a pass that trains (grad), their gradient in place. xent
 * leaves the logits as they are where the loss gradient is 0 (evaluation's form), so a training
 * pass whose loss weighs nothing (no trained token in the micro-batch, or a micro-batch of weight
 * 0 in the step) zeroes them: its gradient is 0, not the logits. */
static void head_loss(zinf_model *m, int64_t r0, int64_t R, float dloss, bool grad)
{
    zinf_backend *be = m->be;
    const int V = m->c.vocab_size, Vp = m->c.padded_vocab;
    be->xent(be, m->losses + r0, m->logits, m->targets + r0, R, V, Vp, grad ? dloss : 0.0f);
    if (grad && dloss == 0.0f) be->memset0(be, m->logits, (size_t)R * Vp * zinf_dtype_size(be->cdt), NULL);
}

int zinf_model_head(zinf_model *m, const zinf_batch *b, const zinf_unit_hooks *h, float dloss_scale,
                    float *mean_loss)
{
    zinf_backend *be = m->be;
    int64_t N = (int64_t)m->B * m->T;
    const int32_t *targets = b->tgt;
    float dloss = dloss_scale != 0.0f && m->nvalid ? dloss_scale / (float)m->nvalid : 0.0f;
    /* the head: all rows at once, or chunk by chunk; after a training forward the last chunk (the
     * only one when they are all at once) leaves its loss gradient in the logits, which the
     * backward takes first, recomputing only the chunks before it */
    const int hu = m->f->head_unit(m), C = m->c.n_embd, Vp = m->c.padded_vocab;
    const size_t es = zinf_dtype_size(be->cdt);
    const char *hin = m->f->head_in(m);
    ZINF_TRY(zinf_acquire(h, hu, 0));
    const void *W = m->f->head_w(m, m->params); /* where the acquire put it (ZeRO-3 gathers it) */
    if (b->head_n) { /* the rows asked for, one product each, no loss */
        for (int64_t i = 0; i < b->head_n; i++)
            be->matmul_fwd(be, (char *)m->logits + (size_t)i * Vp * es, hin + (size_t)b->head_at[i] * C * es, W, NULL,
                           1, C, Vp);
        ZINF_TRY(zinf_release(h, hu, 0));
        return be->sync(be);
    }
    /* a training forward in chunks runs each chunk's head backward but the last's at once, while
     * its loss gradient is in the logits: the input gradient's rows into head_din, the weight's
     * into head_dw, which the backward adds to the head's gradient. The backward then computes no
     * logits again. */
    const bool early = targets && dloss_scale != 0.0f && m->head_dw;
    char *din = early ? m->f->head_din(m) : NULL;
    int dw_acc = 0; /* the first chunk's product writes head_dw, the others add to it */
    for (int64_t r0 = 0; r0 < N; r0 += m->head_rows) {
        int64_t R = N - r0 < m->head_rows ? N - r0 : m->head_rows;
        bool last = r0 + R == N;
        be->matmul_fwd(be, m->logits, hin + (size_t)r0 * C * es, W, NULL, R, C, Vp);
        if (targets) head_loss(m, r0, R, dloss, dloss_scale != 0.0f && (last || early));
        if (early && !last) {
            be->matmul_bwd(be, din + (size_t)r0 * C * es, m->head_dw, NULL, m->logits, hin + (size_t)r0 * C * es, W, R,
                           C, Vp, dw_acc);
            dw_acc = 1;
        }
    }
    ZINF_TRY(zinf_release(h, hu, 0));
    if (!targets) return be->sync(be);
    m->logits_hold_grad = dloss_scale != 0.0f;
    m->head_early = early;
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
    zinf_batch b = {.tok = tokens, .tgt = targets, .B = m->B, .T = m->T};
    return zinf_model_forward_batch(m, &b, h, 0.0f, mean_loss);
}

int zinf_model_forward_train(zinf_model *m, const int32_t *tokens, const int32_t *targets,
                             const zinf_unit_hooks *h, float dloss_scale, float *mean_loss)
{
    if (!targets) return zinf_errc(ZINF_EINVAL, "internal: a training forward needs targets");
    zinf_batch b = {.tok = tokens, .tgt = targets, .B = m->B, .T = m->T};
    return zinf_model_forward_batch(m, &b, h, dloss_scale, mean_loss);
}

int zinf_model_backward(zinf_model *m, const zinf_unit_hooks *h, float dloss_scale)
{
    zinf_backend *be = m->be;
    int64_t N = (int64_t)m->B * m->T;
    const int hu = m->f->head_unit(m), C = m->c.n_embd, Vp = m->c.padded_vocab;
    const size_t es = zinf_dtype_size(be->cdt);
    const char *hin = m->f->head_in(m);
    char *din = m->f->head_din(m);
    float dloss = m->nvalid ? dloss_scale / (float)m->nvalid : 0.0f;
    ZINF_TRY(zinf_acquire(h, hu, 1));
    const void *W = m->f->head_w(m, m->params);
    void *dW = m->f->head_w(m, m->grads);
    /* the head's weight gradient is its unit's first write of the step where the owner left it
     * unzeroed: the first chunk's product overwrites it, and the rest of the unit is zeroed */
    bool first = zinf_grad_first_but(m, hu, dW, (int64_t)Vp * C);
    /* the chunks last to first: the last one's gradient is in the logits after a training forward;
     * the training forward ran the others' (head_early), and the weight's part of them is added
     * here; otherwise each one before the last has its logits computed again, then their gradient */
    for (int64_t r0 = (N - 1) / m->head_rows * m->head_rows; r0 >= 0; r0 -= m->head_rows) {
        int64_t R = N - r0 < m->head_rows ? N - r0 : m->head_rows;
        bool held = r0 + R == N && m->logits_hold_grad;
        if (!held && m->head_early) break;
        if (!held) {
            be->matmul_fwd(be, m->logits, hin + (size_t)r0 * C * es, W, NULL, R, C, Vp);
            head_loss(m, r0, R, dloss, true);
        }
        be->matmul_bwd(be, din + (size_t)r0 * C * es, dW, NULL, m->logits, hin + (size_t)r0 * C * es, W, R, C, Vp,
                       !first);
        first = false;
    }
    if (first) be->memset0(be, dW, (size_t)Vp * C * es, NULL); /* no chunk wrote it (none held) */
    if (m->head_early && m->logits_hold_grad) be->add(be, dW, dW, m->head_dw, (int64_t)Vp * C);
    m->logits_hold_grad = false;
    m->head_early = false;
    ZINF_TRY(zinf_release(h, hu, 1));
    return m->f->backward(m, h);
}

/* ---------------------------------------------------------------- identity ----------------- */
const char *const zinf_model_legacy_attrs[ZINF_MODEL_LEGACY_NATTRS] = {"n_layer",    "n_embd",       "n_head",
                                                                       "vocab_size", "padded_vocab", "n_positions"};

/* the family's fields of c as JSON text: compact, in the family's order */
static char *config_text(const zinf_family *f, const zinf_model_cfg *c)
{
    json_t *o = f->cfg_json(c);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return s;
}

int zinf_model_identity(const zinf_model_cfg *c, char *model_type, size_t cap, char **config)
{
    const zinf_family *f = family_of(c->model_type, "the model");
    if (!f) return ZINF_EINVAL;
    snprintf(model_type, cap, "%s", f->model_type);
    *config = config_text(f, c);
    return *config ? 0 : zinf_errc(ZINF_ENOMEM, "out of host memory");
}

int zinf_model_cfg_from_identity(zinf_model_cfg *c, const char *model_type, const char *config,
                                 const int64_t legacy[ZINF_MODEL_LEGACY_NATTRS], const char *src)
{
    memset(c, 0, sizeof *c);
    json_t *given = NULL;
    if (model_type) {
        json_error_t je;
        given = json_loads(config ? config : "", 0, &je);
        if (!json_is_object(given)) {
            json_decref(given);
            return zinf_err("%s: the model's config is not a JSON object (%s)", src, given ? "another value" : je.text);
        }
    } else { /* before model_type: GPT-2's six integers, which are its identity's fields */
        given = json_object();
        for (int i = 0; given && i < ZINF_MODEL_LEGACY_NATTRS; i++)
            json_object_set_new(given, zinf_model_legacy_attrs[i], json_integer(legacy[i]));
        if (!given) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    }
    const zinf_family *f = family_of(model_type, src);
    int rc = f ? f->cfg_from_hf(c, given, src) : ZINF_EINVAL;
    /* the family must write the same fields back: nothing missing, nothing derived otherwise */
    json_t *back = rc ? NULL : f->cfg_json(c);
    if (!rc && (!json_equal(given, back) || c->n_layer > (1 << 16))) {
        char *s = json_dumps(given, JSON_COMPACT | JSON_PRESERVE_ORDER);
        rc = zinf_errc(ZINF_EINVAL, "%s: the model attributes disagree (%s)", src, s ? s : "?");
        free(s);
    }
    json_decref(back);
    json_decref(given);
    if (!rc) snprintf(c->name, sizeof c->name, "%s", src);
    return rc;
}

int zinf_model_cfg_diff(const zinf_model_cfg *a, const zinf_model_cfg *b, char *key, size_t keycap, char *va,
                        char *vb, size_t valcap)
{
    const zinf_family *fa = family_of(a->model_type, "the model"), *fb = family_of(b->model_type, "the model");
    if (!fa || !fb) return ZINF_EINVAL;
    if (fa != fb) {
        snprintf(key, keycap, "model_type");
        snprintf(va, valcap, "%s", fa->model_type);
        snprintf(vb, valcap, "%s", fb->model_type);
        return 1;
    }
    json_t *ja = fa->cfg_json(a), *jb = fb->cfg_json(b);
    int rc = ja && jb ? 0 : zinf_errc(ZINF_ENOMEM, "out of host memory");
    const char *k;
    json_t *v;
    json_object_foreach(ja, k, v) { /* in the family's order: the first field that differs */
        json_t *w = json_object_get(jb, k);
        if (rc || json_equal(v, w)) continue;
        char *sa = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT), *sb = w ? json_dumps(w, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        snprintf(key, keycap, "%s", k);
        snprintf(va, valcap, "%s", sa ? sa : "?");
        snprintf(vb, valcap, "%s", sb ? sb : "(none)");
        free(sa), free(sb);
        rc = 1;
    }
    json_decref(ja);
    json_decref(jb);
    return rc;
}

int zinf_model_identity_check(const zinf_model_cfg *run, const char *model_type, const char *config,
                              const int64_t legacy[ZINF_MODEL_LEGACY_NATTRS], const char *src)
{
    zinf_model_cfg got;
    ZINF_TRY(zinf_model_cfg_from_identity(&got, model_type, config, legacy, src));
    char key[64], va[128], vb[128];
    int d = zinf_model_cfg_diff(&got, run, key, sizeof key, va, vb, sizeof va);
    ZINF_TRY(d);
    if (d) return zinf_errc(ZINF_EINVAL, "%s: the checkpoint's model has %s %s, this run's %s", src, key, va, vb);
    return 0;
}
