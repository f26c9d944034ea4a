/* The model-family interface (src/family.h) on GPT-2: the use order ZeRO plans by is the order in
 * which forward and backward call the hooks; the layout and the HF names come from one tensor
 * table; a batch whose positions are the row offsets gives the loss and gradients of a batch
 * without them, and packed rows are refused; the model's identity, as a checkpoint records it,
 * reads back to the same model, accepts the six integers of checkpoints written before it, and
 * names the first field that differs; the random init is the same bits for any split and its
 * draws are standard normal (against the closed forms). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/err.h"
#include "check.h"
#include "ckpt_file.h"
#include "hf.h"
#include "kernels.h"
#include "model.h"

#define MAXUSE 256
typedef struct {
    zinf_use use[MAXUSE];
    int n;
    int ready_at[MAXUSE]; /* grad_ready(u): the number of uses before it, per unit */
    int nready[MAXUSE];
} rec;

static int acquire(void *ctx, int u, int phase)
{
    rec *r = ctx;
    if (r->n < MAXUSE) r->use[r->n] = (zinf_use){u, phase};
    r->n++;
    return 0;
}
static int release(void *ctx, int u, int phase)
{
    (void)ctx, (void)u, (void)phase;
    return 0;
}
static int grad_ready(void *ctx, int u)
{
    rec *r = ctx;
    r->ready_at[u] = r->n;
    r->nready[u]++;
    return 0;
}

static bool msg_has(const char *s) { return strstr(zinf_errmsg(), s) != NULL; }

int main(void)
{
    zinf_backend be;
    CHECK(zinf_backend_cpu_init(&be) == 0, "cpu backend");
    zinf_model_cfg mc;
    CHECK(zinf_model_cfg_load(&mc, "test-tiny") == 0, "test-tiny: %s", zinf_errmsg());
    /* the loader fills in GPT-2's fixed values of the fields later families read */
    CHECK(!strcmp(mc.model_type, "gpt2") && mc.n_kv_head == mc.n_head && mc.head_dim * mc.n_head == mc.n_embd &&
              mc.d_ff == 4 * mc.n_embd && mc.tie_embeddings && mc.bias && mc.rope_theta == 0,
          "gpt2 fixed fields: type '%s' kv %d hd %d ff %d", mc.model_type, mc.n_kv_head, mc.head_dim, mc.d_ff);
    mc.vocab_size = 200; /* padded to 256: the padded rows are zero and not HF's */

    zinf_model m;
    CHECK(zinf_model_init(&m, &mc, &be) == 0, "init: %s", zinf_errmsg());
    /* a config made by hand, without model_type, is a GPT-2 of the same layout */
    zinf_model_cfg hand = {.n_layer = mc.n_layer, .n_embd = mc.n_embd, .n_head = mc.n_head,
                           .vocab_size = mc.vocab_size, .padded_vocab = mc.padded_vocab, .n_positions = mc.n_positions};
    CHECK(zinf_model_num_params(&hand) == m.num_params, "hand-made config: %lld parameters, want %lld",
          (long long)zinf_model_num_params(&hand), (long long)m.num_params);

    /* --- the tensor table: zinf's names, HF's names and orientation, trainable, init rows ------- */
    const int64_t C = mc.n_embd;
    const zinf_unit *b1 = &m.units[2];
    CHECK(m.nunits == mc.n_layer + 2 && b1->ntensors == 12 && !strcmp(b1->t[2].name, "blocks.1.attn.qkv.weight") &&
              b1->t[2].shape[0] == 3 * C && b1->t[2].shape[1] == C && b1->trainable && b1->t[2].trainable,
          "block 1: %d tensors, tensor 2 '%s'", b1->ntensors, b1->t[2].name);
    CHECK(!strcmp(m.units[0].t[0].name, "wte") && m.units[0].t[0].init_rows == 200 && m.units[0].t[0].shape[0] == 256,
          "wte: init rows %lld of %lld", (long long)m.units[0].t[0].init_rows, (long long)m.units[0].t[0].shape[0]);
    char name[128];
    int64_t shape[2];
    bool tr;
    zinf_hf_tensor(&m, 2, 2, name, sizeof name, shape, &tr);
    CHECK(!strcmp(name, "transformer.h.1.attn.c_attn.weight") && tr && shape[0] == C && shape[1] == 3 * C,
          "HF qkv: %s [%lld,%lld] %d", name, (long long)shape[0], (long long)shape[1], tr);
    zinf_hf_tensor(&m, 2, 11, name, sizeof name, shape, &tr);
    CHECK(!strcmp(name, "transformer.h.1.mlp.c_proj.bias") && !tr && shape[0] == C && shape[1] == 0, "HF: %s", name);
    zinf_hf_tensor(&m, 0, 0, name, sizeof name, shape, &tr);
    CHECK(!strcmp(name, "transformer.wte.weight") && !tr && shape[0] == 200 && shape[1] == C, "HF wte: %s [%lld]",
          name, (long long)shape[0]);
    zinf_hf_tensor(&m, m.nunits - 1, 1, name, sizeof name, shape, &tr);
    CHECK(!strcmp(name, "transformer.ln_f.bias"), "HF lnf: %s", name);

    /* --- random init: any split of a unit (the ranks' shards) gives the same bits, padded rows are
     * zero, and the drawn values over every unit, each divided by its tensor's std, follow a
     * standard normal: mean, variance and the shares beyond 1 and 2 sigma against the closed forms */
    {
        double n = 0, sum = 0, sq = 0, out1 = 0, out2 = 0;
        int split_ok = 1, pad_ok = 1;
        for (int u = 0; u < m.nunits; u++) {
            const zinf_unit *un = &m.units[u];
            int64_t ne = un->numel, cut = (ne / 3) | 1; /* odd: a Box-Muller pair is cut in two */
            float *a = malloc((size_t)ne * 4), *b = malloc((size_t)ne * 4 + 8);
            zinf_model_init_params(&m, u, 7, 0, ne, a);
            zinf_model_init_params(&m, u, 7, 0, cut, b);
            zinf_model_init_params(&m, u, 7, cut, ne - cut + 2, b + cut); /* 2 past the end: padding */
            split_ok &= !memcmp(a, b, (size_t)ne * 4) && b[ne] == 0 && b[ne + 1] == 0;
            for (int t = 0; t < un->ntensors; t++) {
                const zinf_tensor_view *tv = &un->t[t];
                int64_t end = t + 1 < un->ntensors ? un->t[t + 1].offset : ne;
                if (tv->init_one || tv->init_std <= 0) continue;
                for (int64_t i = tv->offset; i < end; i++) {
                    int64_t row = tv->shape[1] ? (i - tv->offset) / tv->shape[1] : i - tv->offset;
                    if (row >= tv->init_rows) { pad_ok &= a[i] == 0; continue; }
                    double z = a[i] / tv->init_std;
                    n++, sum += z, sq += z * z, out1 += fabs(z) > 1, out2 += fabs(z) > 2;
                }
            }
            free(a);
            free(b);
        }
        double mean = sum / n, var = sq / n - mean * mean, p1 = erfc(1 / sqrt(2.0)), p2 = erfc(2 / sqrt(2.0));
        CHECK(split_ok, "init: a unit made in two pieces differs from the unit made whole");
        CHECK(pad_ok, "init: the padded vocabulary rows are not zero");
        CHECK(n > 20000 && fabs(mean) < 5 / sqrt(n) && fabs(var - 1) < 5 * sqrt(2 / n) &&
                  fabs(out1 / n - p1) < 5 * sqrt(p1 * (1 - p1) / n) && fabs(out2 / n - p2) < 5 * sqrt(p2 * (1 - p2) / n),
              "init: %.0f draws, mean %.4g, variance %.4g, beyond 1 sigma %.4f (want %.4f), beyond 2 %.4f (want %.4f)", n,
              mean, var, out1 / n, p1, out2 / n, p2);
    }

    /* --- parameters, a batch ------------------------------------------------------------------ */
    const int B = 2, T = 8, N = B * T;
    CHECK(zinf_model_alloc_acts(&m, B, T, ZINF_RECOMPUTE_NONE) == 0, "acts: %s", zinf_errmsg());
    for (int u = 0; u < m.nunits; u++) {
        m.params[u] = calloc((size_t)m.units[u].numel, 4);
        m.grads[u] = calloc((size_t)m.units[u].numel, 4);
        zinf_model_init_params(&m, u, 7, 0, m.units[u].numel, m.params[u]);
    }
    int32_t tok[16], tgt[16], pos[16], kv[16];
    for (int i = 0; i < N; i++) tok[i] = (i * 37 + 11) % 200, tgt[i] = (i * 53 + 5) % 200, pos[i] = i % T, kv[i] = 0;
    tgt[3] = -1;

    /* --- the use order is the hooks' order ---------------------------------------------------- */
    rec r = {.n = 0};
    zinf_unit_hooks h = {.ctx = &r, .acquire = acquire, .release = release, .grad_ready = grad_ready};
    float l0 = 0, l1 = 0;
    CHECK(zinf_model_forward_train(&m, tok, tgt, &h, 1.0f, &l0) == 0, "forward: %s", zinf_errmsg());
    int after_fwd = r.n;
    CHECK(zinf_model_backward(&m, &h, 1.0f) == 0, "backward: %s", zinf_errmsg());
    int nfwd = -1, n = zinf_model_use_order(&m, NULL, 0, &nfwd);
    zinf_use plan[MAXUSE];
    CHECK(n > 0 && n <= MAXUSE && zinf_model_use_order(&m, plan, n, &nfwd) == n, "use order: %d", n);
    CHECK(n == r.n && nfwd == after_fwd, "the plan has %d uses (%d forward), the pass made %d (%d forward)", n, nfwd,
          r.n, after_fwd);
    int same = n == r.n;
    for (int k = 0; same && k < n; k++) same = plan[k].u == r.use[k].u && plan[k].phase == r.use[k].phase;
    CHECK(same, "the pass used the units in another order than zinf_model_use_order");
    for (int u = 0; u < m.nunits; u++) {
        int last = -1;
        for (int k = 0; k < r.n; k++)
            if (r.use[k].u == u) last = k;
        CHECK(r.nready[u] == 1 && r.ready_at[u] == last + 1, "unit %d: grad_ready %d times, after use %d (last %d)", u,
              r.nready[u], r.ready_at[u], last);
    }

    /* --- positions that are the row offsets: the same bits; packed rows: refused --------------- */
    int64_t np = m.num_params;
    float *g0 = malloc((size_t)np * 4), *g1 = malloc((size_t)np * 4);
    for (int u = 0, o = 0; u < m.nunits; o += (int)m.units[u].numel, u++)
        memcpy(g0 + o, m.grads[u], (size_t)m.units[u].numel * 4), memset(m.grads[u], 0, (size_t)m.units[u].numel * 4);
    zinf_batch bt = {.tok = tok, .tgt = tgt, .pos = pos, .kv_start = kv, .B = B, .T = T};
    CHECK(zinf_model_forward_batch(&m, &bt, NULL, 1.0f, &l1) == 0 && zinf_model_backward(&m, NULL, 1.0f) == 0,
          "batch with positions: %s", zinf_errmsg());
    for (int u = 0, o = 0; u < m.nunits; o += (int)m.units[u].numel, u++)
        memcpy(g1 + o, m.grads[u], (size_t)m.units[u].numel * 4);
    CHECK(l0 == l1 && !memcmp(g0, g1, (size_t)np * 4), "row-offset positions: loss %.9g vs %.9g, or gradients differ",
          l1, l0);
    pos[9] = 0; /* a second sample starting at token 1 of row 1 */
    CHECK(zinf_model_forward_batch(&m, &bt, NULL, 0.0f, &l1) == ZINF_ENOTSUP && msg_has("one sample per row"),
          "packed positions: '%s'", zinf_errmsg());
    pos[9] = 1, kv[10] = 2;
    CHECK(zinf_model_forward_batch(&m, &bt, NULL, 0.0f, &l1) == ZINF_ENOTSUP && msg_has("sample starts at 2"),
          "packed kv_start: '%s'", zinf_errmsg());
    bt.B = 1;
    CHECK(zinf_model_forward_batch(&m, &bt, NULL, 0.0f, &l1) < 0, "a batch of another size is refused");

    /* --- identity ------------------------------------------------------------------------------ */
    char type[32], *text = NULL;
    CHECK(zinf_model_identity(&mc, type, sizeof type, &text) == 0 && !strcmp(type, "gpt2") && text &&
              !strcmp(text, "{\"n_layer\":2,\"n_embd\":32,\"n_head\":4,\"vocab_size\":200,\"n_positions\":64,"
                            "\"padded_vocab\":256}"),
          "identity: %s %s", type, text ? text : "(null)");
    zinf_model_cfg back;
    char key[64], va[128], vb[128];
    CHECK(zinf_model_cfg_from_identity(&back, type, text, NULL, "ck.h5") == 0 &&
              zinf_model_cfg_diff(&back, &mc, key, sizeof key, va, vb, sizeof va) == 0 && back.padded_vocab == 256,
          "identity reads back: %s", zinf_errmsg());
    CHECK(zinf_model_identity_check(&mc, type, text, NULL, "ck.h5") == 0, "identity check: %s", zinf_errmsg());
    /* a checkpoint's stored config that lacks a key is named as what it is, not as a config.json */
    {
        zinf_ckpt_attrs a = {.format = ZINF_CKPT_FORMAT};
        snprintf(a.model_type, sizeof a.model_type, "llama");
        snprintf(a.model_config, sizeof a.model_config, "{\"num_hidden_layers\":2}");
        zinf_model_cfg got;
        CHECK(zinf_ckpt_attrs_model(&a, &got, "ck.h5") != 0 &&
                  strstr(zinf_errmsg(), "ck.h5: its model_config attribute lacks \"hidden_size\"") &&
                  !strstr(zinf_errmsg(), "config.json"),
              "a stored config without hidden_size: '%s'", zinf_errmsg());
    }
    int64_t legacy[ZINF_MODEL_LEGACY_NATTRS] = {2, 32, 4, 200, 256, 64};
    CHECK(!strcmp(zinf_model_legacy_attrs[4], "padded_vocab") &&
              zinf_model_identity_check(&mc, NULL, NULL, legacy, "old.h5") == 0,
          "an old checkpoint's six integers: %s", zinf_errmsg());
    legacy[0] = 3;
    CHECK(zinf_model_identity_check(&mc, NULL, NULL, legacy, "old.h5") < 0 &&
              msg_has("old.h5: the checkpoint's model has n_layer 3, this run's 2"),
          "another depth: '%s'", zinf_errmsg());
    legacy[0] = 2, legacy[4] = 384;
    CHECK(zinf_model_identity_check(&mc, NULL, NULL, legacy, "old.h5") < 0 && msg_has("the model attributes disagree"),
          "padded_vocab that is not vocab_size's: '%s'", zinf_errmsg());
    char *wide = strdup(text);
    memcpy(strstr(wide, "\"n_embd\":32") + 9, "64", 2);
    CHECK(zinf_model_identity_check(&mc, "gpt2", wide, NULL, "ck.h5") < 0 &&
              msg_has("ck.h5: the checkpoint's model has n_embd 64, this run's 32"),
          "another width: '%s'", zinf_errmsg());
    CHECK(zinf_model_identity_check(&mc, "mamba", text, NULL, "ck.h5") < 0 && msg_has("model_type mamba is not supported"),
          "another family: '%s'", zinf_errmsg());
    CHECK(zinf_model_identity_check(&mc, "gpt2", "[1]", NULL, "ck.h5") < 0 && msg_has("not a JSON object"),
          "a config that is not an object: '%s'", zinf_errmsg());
    free(wide);
    free(text);

    for (int u = 0; u < m.nunits; u++) free(m.params[u]), free(m.grads[u]);
    free(g0), free(g1);
    zinf_model_free(&m);
    zinf_backend_cpu_free(&be);
    return check_done("test_family");
}
