/* The Llama family against Hugging Face transformers (tests/golden/gen_llama.py): for each tiny
 * model of tests/golden/llama/ (llama with llama3 RoPE and GQA, llama tied with an explicit head
 * size, qwen2 with biases, qwen3 with q/k norms at head size 128, mistral), its config.json in
 * both transformers spellings, its sharded safetensors imported through `--init_from`'s path
 * (zinf_hf_import into a ZeRO engine), then logits, loss and every gradient against the golden
 * numbers, and 10 AdamW steps with decay groups and clipping (each step's loss and the final
 * parameters). The golden tensors carry their HF names; zinf's are mapped to them through the
 * family's hf_parts, the same map import and export use. CPU backend, fp32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "config.h"
#include "err.h"
#include "family.h"
#include "hf.h"
#include "kernels.h"
#include "model.h"
#include "optim.h"
#include "zero.h"

static zinf_comm comm;

static int rd(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n ? 0 : -1; }

typedef struct { char name[128]; int decay; int64_t numel, off; } gten; /* a golden tensor */

static int find(const gten *g, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(g[i].name, name)) return i;
    return -1;
}

/* the golden's HF tensors (hf, in the file's order) into zinf's layout: each zinf tensor's HF parts,
 * found by name, to their rows; *missing counts parts the file lacks */
static void map(const zinf_model *m, float *zinf, const float *hf, const gten *g, int ng, int *missing)
{
    int64_t base = 0;
    for (int u = 0; u < m->nunits; base += m->units[u].numel, u++)
        for (int t = 0; t < m->units[u].ntensors; t++) {
            const zinf_tensor_view *tv = &m->units[u].t[t];
            zinf_hf_part parts[ZINF_HF_MAX_PARTS];
            int np = m->f->hf_parts(m, u, t, parts);
            int64_t cols = tv->shape[1] ? tv->shape[1] : 1;
            for (int p = 0; p < np; p++) {
                int i = find(g, ng, parts[p].name);
                if (i < 0) {
                    (*missing)++;
                    continue;
                }
                memcpy(zinf + base + tv->offset + parts[p].row0 * cols, hf + g[i].off,
                       (size_t)(parts[p].rows * cols) * 4);
            }
        }
}

static void one(const char *gdir, const char *name)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/llama/%s", gdir, name);
    /* the config in both spellings is the same model */
    zinf_model_cfg mc, m4;
    snprintf(path, sizeof path, "%s/config_v4.json", dir);
    CHECK(zinf_model_cfg_load(&mc, dir) == 0, "%s: config.json: %s", name, zinf_errmsg());
    CHECK(zinf_model_cfg_load(&m4, path) == 0, "%s: config_v4.json: %s", name, zinf_errmsg());
    char key[64], va[128], vb[128];
    CHECK(zinf_model_cfg_diff(&mc, &m4, key, sizeof key, va, vb, sizeof va) == 0,
          "%s: the 5.x and 4.x configs differ at %s: %s vs %s", name, key, va, vb);

    snprintf(path, sizeof path, "%s/golden.bin", dir);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return;
    int32_t h[16];
    char type[16];
    float hp[8];
    CHECK(!rd(f, h, sizeof h) && !rd(f, type, 16) && !rd(f, hp, sizeof hp) && h[0] == 0x5A494E46 && h[1] == 2,
          "%s: bad header", path);
    int B = h[2], T = h[3], V = h[4], steps = h[5], ng = h[6];
    CHECK(!strcmp(type, mc.model_type) && V == mc.vocab_size && h[8] == mc.n_layer && h[9] == mc.n_embd &&
              h[10] == mc.n_head && h[11] == mc.n_kv_head && h[12] == mc.head_dim && h[13] == mc.d_ff &&
              h[7] == mc.tie_embeddings,
          "%s: zinf reads the config as %s L%d C%d NH%d NKV%d hs%d F%d tied %d", name, mc.model_type, mc.n_layer,
          mc.n_embd, mc.n_head, mc.n_kv_head, mc.head_dim, mc.d_ff, mc.tie_embeddings);
    gten *g = calloc((size_t)ng, sizeof *g);
    int64_t total = 0;
    for (int i = 0; i < ng; i++) {
        int32_t len, nd, shp[4];
        rd(f, &len, 4);
        char buf[256] = "";
        rd(f, buf, (size_t)((len + 3) / 4 * 4));
        buf[len] = 0;
        snprintf(g[i].name, sizeof g[i].name, "%s", buf);
        rd(f, &g[i].decay, 4);
        rd(f, &nd, 4);
        rd(f, shp, (size_t)nd * 4);
        g[i].numel = 1;
        for (int k = 0; k < nd; k++) g[i].numel *= shp[k];
        g[i].off = total;
        total += g[i].numel;
    }
    int N = B * T;
    int32_t *tok = malloc((size_t)N * 4), *tgt = malloc((size_t)N * 4);
    float *lref = malloc((size_t)N * V * 4), lossref, *gh = malloc((size_t)total * 4), *losses = malloc((size_t)steps * 4),
          *ph = malloc((size_t)total * 4);
    CHECK(!rd(f, tok, (size_t)N * 4) && !rd(f, tgt, (size_t)N * 4) && !rd(f, lref, (size_t)N * V * 4) &&
              !rd(f, &lossref, 4) && !rd(f, gh, (size_t)total * 4) && !rd(f, losses, (size_t)steps * 4) &&
              !rd(f, ph, (size_t)total * 4),
          "%s: truncated", path);
    fclose(f);

    /* the model, its parameters imported from the sharded safetensors by a ZeRO engine */
    zinf_backend be;
    zinf_backend_cpu_init(&be);
    zinf_model m;
    CHECK(zinf_model_init(&m, &mc, &be) == 0, "%s: init: %s", name, zinf_errmsg());
    zinf_config cfg;
    zinf_flags fl;
    zinf_flags_defaults(&fl);
    const char *js = "{\"train_batch_size\": 1, \"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": "
                     "\"AdamW\", \"params\": {\"lr\": 0.001}}, \"zero_optimization\": {\"stage\": 3}}";
    CHECK(zinf_config_parse(&cfg, js, strlen(js), "test", &fl, 1, NULL) == 0 &&
              zinf_config_finalize_steps(&cfg, 10, &fl, NULL) == 0, "config: %s", zinf_errmsg());
    zinf_zero *z = NULL;
    CHECK(zinf_zero_init(&z, &m, &cfg, &comm, &be, 99) == 0, "%s: zero: %s", name, zinf_errmsg());
    CHECK(zinf_hf_import(dir, &comm, &m, z, NULL) == 0, "%s: import %s: %s", name, dir, zinf_errmsg());
    int64_t np = m.num_params;
    float *P = calloc((size_t)np, 4), *G = calloc((size_t)np, 4), *M = calloc((size_t)np, 4), *Vv = calloc((size_t)np, 4);
    int64_t off = 0;
    for (int u = 0; u < m.nunits; u++) {
        CHECK(zinf_zero_get_params(z, u, P + off) == 0, "get params: %s", zinf_errmsg());
        off += m.units[u].numel;
    }
    zinf_zero_free(z);
    off = 0;
    for (int u = 0; u < m.nunits; u++) m.params[u] = P + off, m.grads[u] = G + off, off += m.units[u].numel;
    CHECK(zinf_model_alloc_acts(&m, B, T, ZINF_RECOMPUTE_NONE) == 0, "%s: acts: %s", name, zinf_errmsg());
    /* every golden tensor has its place in zinf's layout, with the same decay */
    int missing = 0;
    float *gz = calloc((size_t)np, 4), *pz = calloc((size_t)np, 4);
    map(&m, gz, gh, g, ng, &missing);
    map(&m, pz, ph, g, ng, &missing);
    CHECK(missing == 0, "%s: %d of zinf's HF parts are not in the golden file", name, missing / 2);
    int nparts = 0, bad_decay = 0;
    for (int u = 0; u < m.nunits; u++)
        for (int t = 0; t < m.units[u].ntensors; t++) {
            zinf_hf_part parts[ZINF_HF_MAX_PARTS];
            int k = m.f->hf_parts(&m, u, t, parts);
            for (int p = 0; p < k; p++) {
                int i = find(g, ng, parts[p].name);
                nparts++;
                if (i >= 0 && g[i].decay != m.units[u].t[t].decay) bad_decay++;
            }
        }
    CHECK(nparts == ng, "%s: zinf has %d HF tensors, transformers %d", name, nparts, ng);
    CHECK(bad_decay == 0, "%s: %d tensors with another weight-decay group than transformers'", name, bad_decay);

    /* logits, loss, every gradient */
    CHECK(zinf_model_forward(&m, tok, NULL, NULL, NULL) == 0, "%s: forward: %s", name, zinf_errmsg());
    double md = 0, mx = 0;
    for (int64_t i = 0; i < N; i++)
        for (int v = 0; v < V; v++) {
            double d = fabs(((float *)m.logits)[i * mc.padded_vocab + v] - lref[i * V + v]);
            md = d > md ? d : md;
            mx = fabs(lref[i * V + v]) > mx ? fabs(lref[i * V + v]) : mx;
        }
    CHECK(md <= 1e-4 * (mx > 1 ? mx : 1), "%s: logits differ from transformers' by %g (largest %g)", name, md, mx);
    float loss;
    CHECK(zinf_model_forward(&m, tok, tgt, NULL, &loss) == 0, "%s: forward with targets", name);
    CHECK_CLOSE(loss, lossref, 1e-5, 1e-6, "loss");
    float loss0 = loss;
    memset(G, 0, (size_t)np * 4);
    CHECK(zinf_model_backward(&m, NULL, 1.0f) == 0, "%s: backward: %s", name, zinf_errmsg());
    for (int u = 0; u < m.nunits; u++)
        for (int t = 0; t < m.units[u].ntensors; t++) {
            const zinf_tensor_view *tv = &m.units[u].t[t];
            int64_t o = ((float *)m.grads[u] - G) + tv->offset;
            double d1 = 0, m1 = 0;
            for (int64_t i = 0; i < tv->numel; i++) {
                d1 = fabs(G[o + i] - gz[o + i]) > d1 ? fabs(G[o + i] - gz[o + i]) : d1;
                m1 = fabs(gz[o + i]) > m1 ? fabs(gz[o + i]) : m1;
            }
            CHECK(d1 <= 1e-3 * m1 + 1e-7, "%s: gradient of %s differs by %g (largest %g)", name, tv->name, d1, m1);
        }

    /* 10 AdamW steps as the trainer takes them: clip coefficient, decay by tensor */
    for (int s = 0; s < steps; s++) {
        memset(G, 0, (size_t)np * 4);
        CHECK(zinf_model_forward(&m, tok, tgt, NULL, &loss) == 0 && zinf_model_backward(&m, NULL, 1.0f) == 0,
              "%s: step %d", name, s);
        CHECK_CLOSE(loss, losses[s], 2e-4, 1e-5, "AdamW step loss");
        double norm = sqrt(zinf_sumsq1(&be, G, np));
        zinf_adamw_args a = {.lr = hp[0], .beta1 = hp[1], .beta2 = hp[2], .eps = hp[3],
                             .bias_correction1 = (float)(1 - pow(hp[1], s + 1)),
                             .bias_correction2 = (float)(1 - pow(hp[2], s + 1)),
                             .grad_scale = (float)zinf_clip_coef(norm, hp[5]), .adam_w_mode = 1};
        for (int u = 0; u < m.nunits; u++)
            for (int t = 0; t < m.units[u].ntensors; t++) {
                const zinf_tensor_view *tv = &m.units[u].t[t];
                int64_t o = ((float *)m.params[u] - P) + tv->offset;
                a.weight_decay = tv->decay ? hp[4] : 0.0f;
                be.adamw(&be, P + o, NULL, G + o, ZINF_F32, M + o, Vv + o, tv->numel, &a);
            }
    }
    /* the padded vocabulary rows are not HF's: compare the rest */
    double worst = 0, sum = 0;
    int64_t cnt = 0;
    for (int u = 0; u < m.nunits; u++)
        for (int t = 0; t < m.units[u].ntensors; t++) {
            const zinf_tensor_view *tv = &m.units[u].t[t];
            int64_t o = ((float *)m.params[u] - P) + tv->offset, cols = tv->shape[1] ? tv->shape[1] : 1;
            int64_t n = (tv->init_rows < tv->shape[0] ? tv->init_rows : tv->shape[0]) * cols;
            for (int64_t i = 0; i < n; i++, cnt++) {
                double d = fabs(P[o + i] - pz[o + i]);
                worst = d > worst ? d : worst;
                sum += d;
            }
        }
    CHECK(worst < 0.2 * hp[0], "%s: after %d AdamW steps the worst parameter differs by %g", name, steps, worst);
    /* Adam moves an element whose gradient is ~0 by up to lr on rounding noise alone (fp32 here,
     * fp64 there): Qwen3's 128-wide q/k norm weights have such gradients, hence a mean bound of
     * 1e-3 lr rather than GPT-2's 2e-4 lr */
    CHECK(sum / (double)cnt < 1e-3 * hp[0], "%s: after %d AdamW steps the mean difference is %g", name, steps,
          sum / cnt);
    printf("%s: logits within %.2g, loss %.6f (transformers %.6f), at step %d %.6f (transformers %.6f); parameters "
           "within %.2g (mean %.2g)\n", name, md, loss0, lossref, steps, loss, losses[steps - 1], worst,
           sum / (double)cnt);
    zinf_model_free(&m);
    zinf_backend_cpu_free(&be);
    free(P), free(G), free(M), free(Vv), free(gz), free(pz), free(g), free(tok), free(tgt), free(lref), free(gh),
        free(losses), free(ph);
}

int main(int argc, char **argv)
{
    if (zinf_comm_init(&comm, &argc, &argv)) {
        fprintf(stderr, "%s\n", zinf_errmsg());
        return 1;
    }
    const char *gdir = getenv("GOLDEN") ? getenv("GOLDEN") : "tests/golden";
    const char *models[] = {"llama3", "llama_tied", "qwen2", "qwen3", "mistral"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) one(gdir, models[i]);
    int rc = check_done("test_llama_golden");
    zinf_comm_finalize(&comm);
    return rc;
}
