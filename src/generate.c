/* generate: `zinf generate` (generate.h). */
#include "generate.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chat.h"
#include "ckpt_file.h"
#include "ckpt_tool.h"
#include "err.h"
#include "io/file.h"
#include "hf.h"
#include "model.h"
#include "tok.h"
#include "train.h"

void zinf_gen_opts_defaults(zinf_gen_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = "cpu";
    o->max_new_tokens = 128;
    o->temperature = 0.0;
    o->top_p = 1.0;
    o->seed = 0;
}

/* ---------------------------------------------------------------- the sampler -------------- */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static const float *sort_keys;
static int by_prob_desc(const void *a, const void *b)
{
    float x = sort_keys[*(const int32_t *)a], y = sort_keys[*(const int32_t *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b; /* ties: the lower id first, as argmax */
}

int32_t zinf_gen_sample(const float *logits, int V, double temperature, double top_p, uint64_t *rng, float *prob,
                        int32_t *order)
{
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    /* softmax(logits / temperature) in double sums */
    double mx = logits[best], z = 0;
    for (int i = 0; i < V; i++) z += exp(((double)logits[i] - mx) / temperature);
    for (int i = 0; i < V; i++) {
        prob[i] = (float)(exp(((double)logits[i] - mx) / temperature) / z);
        order[i] = i;
    }
    sort_keys = prob;
    qsort(order, (size_t)V, sizeof *order, by_prob_desc);
    /* the nucleus: transformers removes the tokens whose probability, with that of every less
     * likely one, is at most 1 - top_p; the rest is a prefix of the descending order */
    int keep = V;
    if (top_p < 1.0) {
        double tail = 0;
        keep = 1;
        for (int k = V - 1; k >= 1; k--) {
            tail += prob[order[k]];
            if (tail > 1.0 - top_p) {
                keep = k + 1;
                break;
            }
        }
    }
    double mass = 0;
    for (int k = 0; k < keep; k++) mass += prob[order[k]];
    double u = (double)(splitmix64(rng) >> 11) * 0x1.0p-53 * mass, acc = 0;
    for (int k = 0; k < keep; k++) {
        acc += prob[order[k]];
        if (u < acc) return order[k];
    }
    return order[keep - 1];
}

/* ---------------------------------------------------------------- stop tokens -------------- */
typedef struct stops { int32_t id[16]; int n; } stops;

static void stop_add(stops *s, int64_t id)
{
    if (id < 0 || id > INT32_MAX) return;
    for (int i = 0; i < s->n; i++)
        if (s->id[i] == id) return;
    if (s->n < 16) s->id[s->n++] = (int32_t)id;
}

static bool is_stop(const stops *s, int32_t id)
{
    for (int i = 0; i < s->n; i++)
        if (s->id[i] == id) return true;
    return false;
}

static bool is_dir(const char *p)
{
    struct stat st;
    return p && !stat(p, &st) && S_ISDIR(st.st_mode);
}

/* DIR/name parsed into *o (path gets its path), or *o NULL when there is no such file */
static int json_beside(const char *dir, const char *name, char *path, size_t cap, json_t **o)
{
    snprintf(path, cap, "%s/%s", dir, name);
    struct stat st;
    *o = NULL;
    if (stat(path, &st)) return 0;
    ZINF_TRY(zinf_refuse_irregular(NULL, path));
    json_error_t je;
    if (!(*o = json_load_file(path, 0, &je)))
        return zinf_err("%s:%d:%d: malformed JSON: %s", path, je.line, je.column, je.text);
    return 0;
}

/* DIR/generation_config.json's eos_token_id (a number or a list), when the file is there */
static int stops_generation_config(stops *s, const char *dir)
{
    char path[4200];
    json_t *o;
    ZINF_TRY(json_beside(dir, "generation_config.json", path, sizeof path, &o));
    if (!o) return 0;
    json_t *e = json_object_get(o, "eos_token_id");
    int rc = 0;
    if (json_is_integer(e)) stop_add(s, json_integer_value(e));
    else if (json_is_array(e)) {
        size_t k;
        json_t *v;
        json_array_foreach(e, k, v) {
            if (json_is_integer(v)) stop_add(s, json_integer_value(v));
            else rc = zinf_err("%s: eos_token_id holds something other than token ids", path);
        }
    } else if (e && !json_is_null(e)) rc = zinf_err("%s: eos_token_id is neither a token id nor a list of them", path);
    json_decref(o);
    return rc;
}

/* DIR/tokenizer_config.json's eos_token ("<|im_end|>" or {"content": ...}), when the file is there */
static int stops_tokenizer_config(stops *s, const char *dir, const zinf_tok *tok)
{
    char path[4200];
    json_t *o;
    ZINF_TRY(json_beside(dir, "tokenizer_config.json", path, sizeof path, &o));
    if (!o) return 0;
    json_t *e = json_object_get(o, "eos_token");
    const char *name = json_is_string(e) ? json_string_value(e) : json_string_value(json_object_get(e, "content"));
    if (name) stop_add(s, zinf_tok_id(tok, name));
    json_decref(o);
    return 0;
}

/* ---------------------------------------------------------------- the prompt --------------- */
/* "1,2,3" into ids */
static int parse_ids(const char *s, zinf_ids *ids)
{
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ','))
            return zinf_err("--prompt_ids %s: expected token ids separated by commas, e.g. 1,2,3", s);
        if (ids->n == ids->cap) {
            size_t cap = ids->cap ? 2 * ids->cap : 64;
            int32_t *n = realloc(ids->id, cap * sizeof *n);
            if (!n) return zinf_errc(ZINF_ENOMEM, "out of host memory");
            ids->id = n, ids->cap = cap;
        }
        ids->id[ids->n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!ids->n) return zinf_err("--prompt_ids: no token ids given");
    return 0;
}

/* The prompt's text: the template's rendering of [system,] user up to the assistant header, or
 * the text as it is (--raw). *text to free(). */
static int prompt_text(const zinf_gen_opts *o, const zinf_template *t, char **text)
{
    if (o->raw) return (*text = strdup(o->prompt)) ? 0 : zinf_errc(ZINF_ENOMEM, "out of host memory");
    zinf_chat_msg msg = {.role = ZINF_ROLE_USER, .content = (char *)o->prompt};
    zinf_chat c = {.m = &msg, .n = 1, .cap = 1};
    zinf_chat_opts co = {.system = o->system};
    return zinf_chat_prompt(t, &c, &co, text);
}

/* ---------------------------------------------------------------- the model ---------------- */
typedef struct loader {
    zinf_model *m;
    float *stage; /* device fp32, the largest unit */
} loader;

/* unit u's fp32 values into its compute-dtype buffer on the device */
static int put_unit(void *ctx, int u, const float *vals)
{
    loader *l = ctx;
    zinf_backend *be = l->m->be;
    int64_t n = l->m->units[u].numel;
    ZINF_TRY(be->copy(be, l->stage, vals, (size_t)n * 4, NULL));
    be->from_f32(be, l->m->params[u], l->stage, n);
    return be->sync(be);
}

/* The checkpoint spec resolved and opened, its model config in mc */
static int open_checkpoint(const char *spec, zinf_ckf *k, zinf_model_cfg *mc)
{
    int rc = zinf_ckpt_open_spec(spec, k);
    if (rc) return zinf_err_prefix(rc, "--checkpoint");
    return zinf_ckpt_attrs_model(&k->a, mc, k->path);
}

typedef struct gen {
    zinf_backend be;
    bool be_ok;
    zinf_model m;
    zinf_ckf k;
    bool k_open;
    float *stage, *dlogits, *logits, *prob;
    int32_t *order, *tok;
    int vdraw; /* ids drawn from [0, vdraw): the model's vocabulary, or the tokenizer's where smaller */
} gen;

static void gen_free(gen *g)
{
    if (g->be_ok) {
        for (int u = 0; g->m.params && u < g->m.nunits; u++)
            if (g->m.params[u]) g->be.free(&g->be, ZINF_PLACE_DEVICE, g->m.params[u]);
        if (g->stage) g->be.free(&g->be, ZINF_PLACE_DEVICE, g->stage);
        if (g->dlogits) g->be.free(&g->be, ZINF_PLACE_DEVICE, g->dlogits);
    }
    zinf_model_free(&g->m);
    if (g->be_ok) zinf_backend_close(&g->be);
    if (g->k_open) zinf_ckf_close(&g->k);
    free(g->logits);
    free(g->prob);
    free(g->order);
    free(g->tok);
}

/* Greedy or sampled tokens after ids[0..n) until a stop token, max_new or the model's positions:
 * appended to *out (the stop token left out). */
static int decode(gen *g, const zinf_gen_opts *o, const stops *st, const int32_t *ids, int n, zinf_ids *out)
{
    zinf_model *m = &g->m;
    const int T = m->T, Vp = m->c.padded_vocab;
    memcpy(g->tok, ids, (size_t)n * sizeof *ids);
    uint64_t rng = o->seed;
    for (int64_t k = 0; k < o->max_new_tokens && n < T; k++) {
        /* the whole prefix again (no KV cache), the head for its last row alone */
        int64_t last = n - 1;
        zinf_batch b = {.tok = g->tok, .B = 1, .T = T, .head_at = &last, .head_n = 1};
        ZINF_TRY(zinf_model_forward_batch(m, &b, NULL, 0.0f, NULL));
        g->be.to_f32(&g->be, g->dlogits, m->logits, Vp);
        ZINF_TRY(g->be.copy(&g->be, g->logits, g->dlogits, (size_t)Vp * 4, NULL));
        ZINF_TRY(g->be.sync(&g->be));
        int32_t next = zinf_gen_sample(g->logits, g->vdraw, o->temperature, o->top_p, &rng, g->prob, g->order);
        if (is_stop(st, next)) break;
        if (out->n == out->cap) {
            size_t cap = out->cap ? 2 * out->cap : 64;
            int32_t *p = realloc(out->id, cap * sizeof *p);
            if (!p) return zinf_errc(ZINF_ENOMEM, "out of host memory");
            out->id = p, out->cap = cap;
        }
        out->id[out->n++] = next;
        g->tok[n++] = next;
    }
    return 0;
}

static int check_opts(const zinf_gen_opts *o)
{
    if (!o->model == !o->checkpoint) return zinf_err("generate: give --model DIR or --checkpoint PATH (one of them)");
    if (!o->prompt == !o->prompt_ids) return zinf_err("generate: give --prompt TEXT or --prompt_ids IDS (one of them)");
    if (o->checkpoint && !o->tokenizer && !o->prompt_ids)
        return zinf_err("generate: --checkpoint %s: a checkpoint holds no tokenizer; give --tokenizer PATH "
                        "(tokenizer.json or the model directory it came from)", o->checkpoint);
    if (o->raw && o->template_name) return zinf_err("generate: --raw and --template exclude each other");
    if (o->raw && o->system) return zinf_err("generate: --system needs a template; leave --raw out");
    if (o->prompt_ids && (o->raw || o->template_name || o->system || o->show_prompt))
        return zinf_err("generate: --prompt_ids is the prompt's ids as they are: no --raw, --template, --system "
                        "or --show_prompt");
    if (o->max_new_tokens < 1) return zinf_err("generate: --max_new_tokens %lld: expected 1 or more",
                                               (long long)o->max_new_tokens);
    if (!(o->temperature >= 0) || !isfinite(o->temperature))
        return zinf_err("generate: --temperature %g: expected 0 (greedy) or more", o->temperature);
    if (!(o->top_p > 0 && o->top_p <= 1)) return zinf_err("generate: --top_p %g: expected a number in (0, 1]", o->top_p);
    if (o->top_p < 1 && o->temperature == 0)
        return zinf_err("generate: --top_p %g samples, and --temperature 0 is greedy: give a temperature above 0",
                        o->top_p);
    return 0;
}

int zinf_generate(const zinf_gen_opts *o, FILE *out)
{
    ZINF_TRY(check_opts(o));
    const char *tokpath = o->tokenizer ? o->tokenizer : o->model;
    /* where tokenizer_config.json and generation_config.json may be: the model directory, or the
     * --tokenizer directory */
    const char *meta_dir = o->model ? o->model : is_dir(o->tokenizer) ? o->tokenizer : NULL;
    const zinf_template *t = NULL;
    if (o->prompt && !o->raw) {
        if (o->template_name) {
            if (!(t = zinf_template_find(o->template_name))) return zinf_err_prefix(ZINF_EINVAL, "generate: --template");
        } else if (meta_dir) ZINF_TRY(zinf_template_detect(meta_dir, &t));
        else return zinf_err("generate: --tokenizer %s is a file, so no template can be detected; give --template NAME "
                             "(%s) or --raw", o->tokenizer, zinf_template_names());
    }
    char *text = NULL;
    if (o->prompt) ZINF_TRY(prompt_text(o, t, &text));
    if (o->show_prompt) {
        fputs(text, out);
        free(text);
        return fflush(out) ? zinf_errc(-errno, "writing the prompt: %s", strerror(errno)) : 0;
    }

    gen g = {0};
    zinf_tok *tok = NULL;
    zinf_ids ids = {0}, reply = {0};
    stops st = {0};
    zinf_model_cfg mc;
    int rc = 0;
    if (o->prompt) {
        rc = zinf_tok_load(tokpath, &tok);
        if (!rc && t) rc = zinf_template_check(t, tok, tokpath);
        if (!rc) rc = zinf_tok_encode(tok, text, strlen(text), ZINF_TOK_SPECIAL | (o->raw ? ZINF_TOK_ADD_SPECIAL : 0), &ids);
        if (!rc && t) {
            int32_t e;
            rc = zinf_template_end_id(t, tok, &e);
            stop_add(&st, e);
        }
        if (!rc && meta_dir) rc = stops_tokenizer_config(&st, meta_dir, tok);
    } else rc = parse_ids(o->prompt_ids, &ids);
    if (!rc && meta_dir) rc = stops_generation_config(&st, meta_dir);
    free(text);

    /* the model: its config, the backend, the parameters alone */
    if (!rc && o->model) rc = zinf_model_cfg_load(&mc, o->model);
    if (!rc && o->checkpoint) {
        rc = open_checkpoint(o->checkpoint, &g.k, &mc);
        g.k_open = g.k.f >= 0;
    }
    for (size_t i = 0; !rc && i < ids.n; i++)
        if (ids.id[i] >= mc.vocab_size)
            rc = zinf_err("generate: the prompt's token %d (at %zu) is outside the model's vocabulary (size %d)",
                          ids.id[i], i, mc.vocab_size);
    if (!rc && !ids.n) rc = zinf_err("generate: the prompt is empty: no token to continue from");
    if (!rc && (int64_t)ids.n >= mc.n_positions)
        rc = zinf_err("generate: the prompt is %zu tokens, and the model takes %d positions: no room for a reply",
                      ids.n, mc.n_positions);
    if (!rc) {
        rc = zinf_backend_open(&g.be, o->device, 0, ZINF_BF16);
        g.be_ok = !rc;
    }
    if (!rc) rc = zinf_model_init(&g.m, &mc, &g.be);
    int T = (int)((int64_t)ids.n + o->max_new_tokens < mc.n_positions ? (int64_t)ids.n + o->max_new_tokens
                                                                        : mc.n_positions);
    if (!rc) rc = zinf_model_alloc_acts(&g.m, 1, T, ZINF_RECOMPUTE_NONE);
    const size_t es = g.be_ok ? zinf_dtype_size(g.be.cdt) : 4;
    int64_t maxu = 1;
    for (int u = 0; !rc && u < g.m.nunits; u++) {
        maxu = g.m.units[u].numel > maxu ? g.m.units[u].numel : maxu;
        if (!(g.m.params[u] = g.be.alloc(&g.be, ZINF_PLACE_DEVICE, (size_t)g.m.units[u].numel * es)))
            rc = zinf_errc(ZINF_ENOMEM, "out of device memory for the parameters of unit %s", g.m.units[u].name);
    }
    if (!rc) {
        const int Vp = mc.padded_vocab;
        g.stage = g.be.alloc(&g.be, ZINF_PLACE_DEVICE, (size_t)maxu * 4);
        g.dlogits = g.be.alloc(&g.be, ZINF_PLACE_DEVICE, (size_t)Vp * 4);
        g.logits = malloc((size_t)Vp * 4);
        g.prob = malloc((size_t)Vp * 4);
        g.order = malloc((size_t)Vp * 4);
        g.tok = calloc((size_t)T, 4);
        if (!g.stage || !g.dlogits || !g.logits || !g.prob || !g.order || !g.tok)
            rc = zinf_errc(ZINF_ENOMEM, "out of memory for generation");
    }
    loader l = {.m = &g.m, .stage = g.stage};
    if (!rc && o->model) rc = zinf_hf_read_params(o->model, &g.m, put_unit, &l);
    if (!rc && o->checkpoint) rc = zinf_ckf_read_params(&g.k, &g.m, put_unit, &l);
    if (g.stage) { /* the largest unit in fp32: needed for the load only */
        g.be.free(&g.be, ZINF_PLACE_DEVICE, g.stage);
        g.stage = NULL;
    }
    /* a model's rows past its tokenizer's ids (Qwen's 151936 against 151669) decode to nothing:
     * they are never drawn, so that a reply always decodes */
    g.vdraw = mc.vocab_size;
    if (tok && zinf_tok_vocab_size(tok) < g.vdraw) g.vdraw = zinf_tok_vocab_size(tok);
    if (!rc) rc = decode(&g, o, &st, ids.id, (int)ids.n, &reply);
    if (!rc && o->prompt_ids) {
        for (size_t i = 0; i < reply.n; i++) fprintf(out, "%s%d", i ? " " : "", reply.id[i]);
        fputc('\n', out);
    } else if (!rc) {
        char *s = NULL;
        size_t n = 0;
        rc = zinf_tok_decode(tok, reply.id, reply.n, &s, &n);
        if (!rc) {
            fwrite(s, 1, n, out);
            fputc('\n', out);
        }
        free(s);
    }
    if (!rc && fflush(out)) rc = zinf_errc(-errno, "writing the reply: %s", strerror(errno));
    gen_free(&g);
    zinf_tok_free(tok);
    zinf_ids_free(&ids);
    zinf_ids_free(&reply);
    return rc;
}
