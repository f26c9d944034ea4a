/* The Llama family's forward and backward on the CPU backend, against finite differences of the
 * loss: every tensor of test-llama (llama3 RoPE, GQA, untied), a Qwen3 (q/k norm, tied, explicit
 * head size) and a Llama with every bias (attention_bias, mlp_bias), all parameters random
 * (biases and norms too), targets with an ignored one, and positions given as a batch field.
 * Also: recomputation gives the same bits, positions equal to the row offsets give the bits of
 * none, the hooks follow the use order. (The golden test against transformers is
 * test_llama_golden.) */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "err.h"
#include "family.h"
#include "model.h"

#define NB 2
#define NT 8
#define N (NB * NT)

static uint64_t rng = 88172645463325252ULL;
static float urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

typedef struct { int n, u[256], ph[256]; } rec;
static int acq(void *ctx, int u, int ph)
{
    rec *r = ctx;
    if (r->n < 256) r->u[r->n] = u, r->ph[r->n] = ph;
    r->n++;
    return 0;
}

static double loss_of(zinf_model *m, const zinf_batch *b)
{
    float l = 0;
    if (zinf_model_forward_batch(m, b, NULL, 0.0f, &l)) return NAN;
    return l;
}

/* the largest |grads - ref| over every parameter, and the largest |ref| in *gmax */
static double grad_worst(const zinf_model *m, const float *ref, double *gmax)
{
    double worst = 0;
    int64_t o = 0;
    *gmax = 0;
    for (int u = 0; u < m->nunits; u++)
        for (int64_t i = 0; i < m->units[u].numel; i++, o++) {
            double d = fabs((double)((float *)m->grads[u])[i] - ref[o]);
            worst = d > worst ? d : worst;
            *gmax = fabs(ref[o]) > *gmax ? fabs(ref[o]) : *gmax;
        }
    return worst;
}

static void run(const char *what, zinf_model_cfg *mc, zinf_backend *be)
{
    zinf_model m;
    CHECK(zinf_model_init(&m, mc, be) == 0, "%s: init: %s", what, zinf_errmsg());
    CHECK(zinf_model_alloc_acts(&m, NB, NT, ZINF_RECOMPUTE_NONE) == 0, "%s: acts: %s", what, zinf_errmsg());
    for (int u = 0; u < m.nunits; u++) {
        m.params[u] = calloc((size_t)m.units[u].numel, 4);
        m.grads[u] = calloc((size_t)m.units[u].numel, 4);
        float *p = m.params[u];
        for (int64_t i = 0; i < m.units[u].numel; i++) p[i] = 0.2f * urand();
        for (int t = 0; t < m.units[u].ntensors; t++) /* norms near one, as trained ones are */
            if (m.units[u].t[t].init_one)
                for (int64_t i = 0; i < m.units[u].t[t].numel; i++) p[m.units[u].t[t].offset + i] += 1.0f;
    }
    int32_t tok[N], tgt[N], pos[N];
    for (int i = 0; i < N; i++) tok[i] = (i * 37 + 11) % mc->vocab_size, tgt[i] = (i * 53 + 5) % mc->vocab_size;
    for (int i = 0; i < N; i++) pos[i] = (i % NT) * (1 + i / NT); /* row 1 at every other position */
    tgt[5] = -1;
    zinf_batch bt = {.tok = tok, .tgt = tgt, .pos = pos, .B = NB, .T = NT};

    /* analytic gradients, with hooks recording the order */
    rec r = {0};
    zinf_unit_hooks h = {.ctx = &r, .acquire = acq};
    float l0 = 0;
    CHECK(zinf_model_forward_batch(&m, &bt, &h, 1.0f, &l0) == 0, "%s: forward: %s", what, zinf_errmsg());
    CHECK(zinf_model_backward(&m, &h, 1.0f) == 0, "%s: backward: %s", what, zinf_errmsg());
    int nfwd = 0, nuse = zinf_model_use_order(&m, NULL, 0, &nfwd);
    zinf_use plan[256];
    zinf_model_use_order(&m, plan, 256, &nfwd);
    bool same = nuse == r.n;
    for (int i = 0; i < nuse && same && i < 256; i++) same = plan[i].u == r.u[i] && plan[i].phase == r.ph[i];
    CHECK(same, "%s: the hooks' order is not the use order (%d uses, %d calls)", what, nuse, r.n);

    /* finite differences on a sample of every tensor's elements */
    int bad = 0, checked = 0;
    for (int u = 0; u < m.nunits; u++)
        for (int t = 0; t < m.units[u].ntensors; t++) {
            const zinf_tensor_view *tv = &m.units[u].t[t];
            int64_t rows = tv->shape[0];
            for (int k = 0; k < 5; k++) {
                /* real rows only (the padded vocabulary rows take no gradient) */
                int64_t cols = tv->shape[1] ? tv->shape[1] : 1;
                int64_t real = tv->init_rows < rows ? tv->init_rows : rows;
                int64_t i = ((int64_t)(k * 7919 + t * 104729) % real) * cols + (k * 31 + 7) % cols;
                if (tv->init_rows < rows) i = (int64_t)tok[k] * cols + (k * 13) % cols; /* an embedded row */
                float *p = (float *)m.params[u] + tv->offset + i;
                float g = ((float *)m.grads[u])[tv->offset + i], keep = *p;
                const float e = 1e-2f;
                *p = keep + e;
                double lp = loss_of(&m, &bt);
                *p = keep - e;
                double lm = loss_of(&m, &bt);
                *p = keep;
                double fd = (lp - lm) / (2.0 * e);
                checked++;
                if (!(fabs(fd - g) <= 3e-3 + 3e-2 * fabs(fd))) {
                    if (bad++ < 8)
                        fprintf(stderr, "%s: %s[%lld]: analytic %.6g, finite difference %.6g\n", what, tv->name,
                                (long long)i, g, fd);
                }
            }
        }
    CHECK(bad == 0, "%s: %d of %d gradient elements differ from finite differences", what, bad, checked);

    /* positions equal to the row offsets are the same as none, bit for bit; others are not */
    for (int i = 0; i < N; i++) pos[i] = i % NT;
    double a = loss_of(&m, &bt);
    zinf_batch nb = {.tok = tok, .tgt = tgt, .B = NB, .T = NT};
    double b0 = loss_of(&m, &nb);
    CHECK(a == b0, "%s: positions = row offsets give %.9g, none %.9g", what, a, b0);
    CHECK(fabs(a - l0) > 1e-7, "%s: other relative positions change nothing (%.9g)", what, a);

    /* recomputing every block gives the same loss and gradients, bit for bit */
    float *g0 = NULL;
    int64_t np = m.num_params, o = 0;
    g0 = malloc((size_t)np * 4);
    for (int u = 0; u < m.nunits; u++) {
        memset(m.grads[u], 0, (size_t)m.units[u].numel * 4);
    }
    float la = 0, lb = 0;
    zinf_model_forward_batch(&m, &nb, NULL, 1.0f, &la);
    zinf_model_backward(&m, NULL, 1.0f);
    for (int u = 0; u < m.nunits; u++) memcpy(g0 + o, m.grads[u], (size_t)m.units[u].numel * 4), o += m.units[u].numel;
    for (int pol = ZINF_RECOMPUTE_FULL; pol <= ZINF_RECOMPUTE_KEEP_ATTN; pol++) {
        void **P = m.params, **G = m.grads;
        m.params = NULL, m.grads = NULL;
        zinf_model m2;
        CHECK(zinf_model_init(&m2, mc, be) == 0 && zinf_model_alloc_acts(&m2, NB, NT, (zinf_recompute)pol) == 0,
              "%s: recompute acts", what);
        for (int u = 0; u < m2.nunits; u++) {
            m2.params[u] = P[u];
            m2.grads[u] = G[u];
            memset(G[u], 0, (size_t)m2.units[u].numel * 4);
        }
        zinf_model_forward_batch(&m2, &nb, NULL, 1.0f, &lb);
        zinf_model_backward(&m2, NULL, 1.0f);
        bool eq = la == lb;
        o = 0;
        for (int u = 0; u < m2.nunits && eq; u++) eq = !memcmp(g0 + o, G[u], (size_t)m2.units[u].numel * 4), o += m2.units[u].numel;
        CHECK(eq, "%s: recompute policy %d changes the loss (%.9g vs %.9g) or the gradients", what, pol, la, lb);
        for (int u = 0; u < m2.nunits; u++) m2.params[u] = m2.grads[u] = NULL;
        zinf_model_free(&m2);
        m.params = P, m.grads = G;
    }
    /* the head in chunks of 5 rows (as for a large vocabulary): the same loss and gradients, with
     * the chunks before the last recomputed in the backward (no head_dw) and with their backward
     * run in the training forward (head_dw, as carve_all makes it where the head runs in chunks) */
    m.head_rows = 5;
    float *hdw = malloc((size_t)m.c.padded_vocab * m.c.n_embd * 4);
    for (int early = 0; early < 2; early++) {
        m.head_dw = early ? hdw : NULL;
        for (int u = 0; u < m.nunits; u++) memset(m.grads[u], 0, (size_t)m.units[u].numel * 4);
        float lc = 0;
        CHECK(zinf_model_forward_batch(&m, &nb, NULL, 1.0f, &lc) == 0 && zinf_model_backward(&m, NULL, 1.0f) == 0,
              "%s: chunked head: %s", what, zinf_errmsg());
        CHECK_CLOSE(lc, la, 1e-6, 0, "chunked head loss");
        double gmax, worst = grad_worst(&m, g0, &gmax);
        CHECK(worst <= 1e-5 * gmax, "%s: chunked head%s: gradients differ by %g (largest %g)", what,
              early ? ", its backward in the forward" : "", worst, gmax);
    }
    m.head_dw = NULL;
    free(hdw);
    m.head_rows = N;
    free(g0);
    for (int u = 0; u < m.nunits; u++) free(m.params[u]), free(m.grads[u]);
    zinf_model_free(&m);
}

/* Samples packed into rows (the supervised fine-tuning batch): the summed loss and every gradient
 * equal those of the samples run one by one, each alone at the start of a row with the rest of the
 * row padding that carries no loss. Row 0 packs samples of 3 and 5 tokens, row 1 one of 6 and a
 * padding run of 2 (its own sample, no loss). */
static double summed(zinf_model *m, const int32_t *tok, const int32_t *tgt, const int32_t *pos, const int32_t *kvs,
                     const char *what)
{
    zinf_batch b = {.tok = tok, .tgt = tgt, .pos = pos, .kv_start = kvs, .B = NB, .T = NT};
    int nvalid = 0;
    for (int i = 0; i < N; i++) nvalid += tgt[i] >= 0;
    float l = 0; /* dloss_scale nvalid: every predicted token's loss has weight one */
    CHECK(zinf_model_forward_batch(m, &b, NULL, (float)nvalid, &l) == 0 && zinf_model_backward(m, NULL, (float)nvalid) == 0,
          "%s: %s", what, zinf_errmsg());
    return (double)l * nvalid;
}

static void packed(const char *what, zinf_model_cfg *mc, zinf_backend *be)
{
    zinf_model m;
    CHECK(zinf_model_init(&m, mc, be) == 0 && zinf_model_alloc_acts(&m, NB, NT, ZINF_RECOMPUTE_NONE) == 0,
          "%s: init: %s", what, zinf_errmsg());
    int64_t total = 0;
    for (int u = 0; u < m.nunits; u++) {
        m.params[u] = calloc((size_t)m.units[u].numel, 4);
        m.grads[u] = calloc((size_t)m.units[u].numel, 4);
        float *p = m.params[u];
        for (int64_t i = 0; i < m.units[u].numel; i++) p[i] = 0.2f * urand();
        for (int t = 0; t < m.units[u].ntensors; t++)
            if (m.units[u].t[t].init_one)
                for (int64_t i = 0; i < m.units[u].t[t].numel; i++) p[m.units[u].t[t].offset + i] += 1.0f;
        total += m.units[u].numel;
    }
    /* the samples: (row, offset, length) when packed */
    const int sr[3] = {0, 0, 1}, so[3] = {0, 3, 0}, sl[3] = {3, 5, 6};
    int32_t sample_tok[3][NT], sample_tgt[3][NT];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < sl[k]; i++) {
            sample_tok[k][i] = (k * 29 + i * 37 + 11) % mc->vocab_size;
            sample_tgt[k][i] = i == sl[k] - 1 ? -1 : (k * 17 + i * 53 + 5) % mc->vocab_size;
        }
    sample_tgt[1][1] = -1; /* a prompt token inside a sample: no loss */
    int32_t tok[N], tgt[N], pos[N], kvs[N];
    for (int i = 0; i < N; i++) tok[i] = 7, tgt[i] = -1, pos[i] = 0, kvs[i] = 0;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < sl[k]; i++) {
            int at = sr[k] * NT + so[k] + i;
            tok[at] = sample_tok[k][i], tgt[at] = sample_tgt[k][i], pos[at] = i, kvs[at] = so[k];
        }
    for (int t = 6; t < NT; t++) pos[NT + t] = t - 6, kvs[NT + t] = 6; /* row 1's padding run */
    double lp = summed(&m, tok, tgt, pos, kvs, "packed");
    float *gp = malloc((size_t)total * sizeof *gp);
    for (int64_t u = 0, o = 0; u < m.nunits; o += m.units[u].numel, u++)
        memcpy(gp + o, m.grads[u], (size_t)m.units[u].numel * 4);

    /* one by one: samples 0 and 1 in rows 0 and 1, then sample 2 in row 0; gradients accumulate */
    for (int u = 0; u < m.nunits; u++) memset(m.grads[u], 0, (size_t)m.units[u].numel * 4);
    double ls = 0;
    for (int run = 0; run < 2; run++) {
        for (int i = 0; i < N; i++) tok[i] = 7, tgt[i] = -1;
        for (int r = 0; r < NB; r++) {
            int k = run * 2 + r;
            if (k > 2) break;
            for (int i = 0; i < sl[k]; i++) tok[r * NT + i] = sample_tok[k][i], tgt[r * NT + i] = sample_tgt[k][i];
        }
        ls += summed(&m, tok, tgt, NULL, NULL, "one by one");
    }
    CHECK(fabs(lp - ls) <= 1e-5 * fabs(ls), "%s: packed summed loss %.9g, one by one %.9g", what, lp, ls);
    double gmax, worst = grad_worst(&m, gp, &gmax);
    CHECK(gmax > 0 && worst <= 2e-6 * gmax, "%s: packed gradients differ from one by one by %g (largest %g)", what,
          worst, gmax);

    /* a sample start that is neither the token's own position nor its neighbour's is refused */
    kvs[NT + 7] = 3;
    zinf_batch bad = {.tok = tok, .tgt = tgt, .pos = pos, .kv_start = kvs, .B = NB, .T = NT};
    float l = 0;
    CHECK(zinf_model_forward_batch(&m, &bad, NULL, 1.0f, &l) != 0 && strstr(zinf_errmsg(), "row 1"),
          "%s: a broken sample start is refused by row (%s)", what, zinf_errmsg());
    free(gp);
    for (int u = 0; u < m.nunits; u++) free(m.params[u]), free(m.grads[u]);
    zinf_model_free(&m);
}

int main(void)
{
    zinf_backend be;
    CHECK(zinf_backend_cpu_init(&be) == 0, "cpu backend");
    zinf_model_cfg c;
    CHECK(zinf_model_cfg_load(&c, "test-llama") == 0, "test-llama: %s", zinf_errmsg());
    c.rope_theta = 10.0; /* angles that vary within 8 positions */
    c.rope_original_max = 16;
    run("test-llama", &c, &be);
    CHECK(zinf_model_cfg_load(&c, "test-qwen3") == 0, "test-qwen3: %s", zinf_errmsg());
    c.rope_theta = 10.0;
    run("test-qwen3", &c, &be);
    packed("test-qwen3 packed", &c, &be);
    json_error_t je;
    json_t *o = json_loads("{\"model_type\":\"llama\",\"hidden_size\":32,\"intermediate_size\":48,"
                           "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":1,"
                           "\"head_dim\":8,\"vocab_size\":100,\"max_position_embeddings\":32,\"rope_theta\":10.0,"
                           "\"attention_bias\":true,\"mlp_bias\":true,\"pad_token_id\":3}", 0, &je);
    CHECK(o && zinf_model_cfg_from_json(&c, o, "biases") == 0, "llama with biases: %s", zinf_errmsg());
    json_decref(o);
    CHECK(c.qkv_bias && c.o_bias && c.mlp_bias && c.pad_token_id == 3, "biases parsed");
    run("llama with biases, NKV 1", &c, &be);
    packed("llama with biases packed", &c, &be);
    zinf_backend_cpu_free(&be);
    return check_done("test_llama_grad");
}
