/* The whole GPT-2 model on the CPU backend against PyTorch (tests/golden/gen_gpt2.py):
 * logits, loss, every parameter gradient, and 10 AdamW steps with decay groups and clipping. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/err.h"
#include "check.h"
#include "kernels.h"
#include "model.h"
#include "optim.h"

static int rd(FILE *f, void *p, size_t n)
{
    return fread(p, 1, n, f) == n ? 0 : -1;
}

int main(void)
{
    const char *dir = getenv("GOLDEN") ? getenv("GOLDEN") : "tests/golden";
    char path[4096];
    snprintf(path, sizeof path, "%s/gpt2_tiny.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); return 1; }
    int32_t h[16];
    float hp[5];
    if (rd(f, h, sizeof h) || rd(f, hp, sizeof hp) || h[0] != 0x5A494E46 || h[1] != 1) {
        fprintf(stderr, "%s: bad header\n", path);
        return 1;
    }
    zinf_model_cfg mc = {.n_layer = h[2], .n_embd = h[3], .n_head = h[4], .vocab_size = h[5],
                         .padded_vocab = h[6], .n_positions = h[7]};
    snprintf(mc.name, sizeof mc.name, "golden");
    int B = h[8], T = h[9], steps = h[10], V = h[5], Vp = h[6];
    float lr = hp[0], b1 = hp[1], b2 = hp[2], wd = hp[3], clip = hp[4];

    zinf_backend be;
    CHECK(zinf_backend_cpu_init(&be) == 0, "cpu backend");
    zinf_model m;
    CHECK(zinf_model_init(&m, &mc, &be) == 0, "model init");
    /* the units as the messages name them: the last holds the final LayerNorm and nothing else
     * (the head's product reads unit 0's wte) */
    const zinf_unit *last = &m.units[m.nunits - 1];
    CHECK(m.nunits == mc.n_layer + 2 && !strcmp(m.units[0].name, "embed") && !strcmp(m.units[1].name, "blocks.0") &&
              !strcmp(last->name, "lnf") && last->ntensors == 2 && !strcmp(last->t[0].name, "lnf.weight") &&
              !strcmp(last->t[1].name, "lnf.bias") && last->numel == 2 * (int64_t)mc.n_embd,
          "unit layout: %d units, last '%s' with %d tensors", m.nunits, last->name, last->ntensors);
    CHECK(zinf_model_alloc_acts(&m, B, T, ZINF_RECOMPUTE_NONE) == 0, "acts");
    int64_t np = m.num_params;
    float *p0 = malloc(np * 4), *gref = malloc(np * 4), *pfin = malloc(np * 4);
    int32_t *tok = malloc(B * T * 4), *tgt = malloc(B * T * 4);
    float *lref = malloc((size_t)B * T * V * 4), lossref, lossesref[64];
    if (rd(f, p0, np * 4) || rd(f, tok, B * T * 4) || rd(f, tgt, B * T * 4) ||
        rd(f, lref, (size_t)B * T * V * 4) || rd(f, &lossref, 4) || rd(f, gref, np * 4) ||
        rd(f, lossesref, steps * 4) || rd(f, pfin, np * 4)) {
        fprintf(stderr, "%s: truncated (parameter count %lld)\n", path, (long long)np);
        return 1;
    }
    fclose(f);
    /* unit buffers carved from one allocation each for params, grads, m, v */
    float *P = be.alloc(&be, ZINF_PLACE_DEVICE, np * 4), *G = be.alloc(&be, ZINF_PLACE_DEVICE, np * 4);
    float *M = be.alloc(&be, ZINF_PLACE_DEVICE, np * 4), *Vv = be.alloc(&be, ZINF_PLACE_DEVICE, np * 4);
    int64_t off = 0;
    for (int u = 0; u < m.nunits; u++) {
        m.params[u] = P + off;
        m.grads[u] = G + off;
        off += m.units[u].numel;
    }
    memcpy(P, p0, np * 4);

    /* modes: stored, recompute, recompute keeping attention, and recompute of the first half of
     * the blocks only (the rest stored) */
    for (int mi = 0; mi <= 3; mi++) {
        int recompute = mi == 3 ? ZINF_RECOMPUTE_FULL : mi;
        if (mi) {
            zinf_model_free(&m);
            CHECK(zinf_model_init(&m, &mc, &be) == 0, "model init");
            int blocks = mi == 3 ? (mc.n_layer + 1) / 2 : mc.n_layer;
            CHECK(zinf_model_alloc_acts_n(&m, B, T, (zinf_recompute)recompute, blocks) == 0, "acts");
            off = 0;
            for (int u = 0; u < m.nunits; u++) {
                m.params[u] = P + off;
                m.grads[u] = G + off;
                off += m.units[u].numel;
            }
            memcpy(P, p0, np * 4);
        }
        const char *mode = mi == 3 ? "first half recomputed" : recompute == ZINF_RECOMPUTE_KEEP_ATTN
                                                                   ? "recompute, attention kept"
                                                               : recompute ? "recompute" : "stored";
        /* forward: logits first (no targets), then the loss */
        CHECK(zinf_model_forward(&m, tok, NULL, NULL, NULL) == 0, "forward");
        double maxd = 0;
        for (int64_t i = 0; i < (int64_t)B * T; i++)
            for (int v = 0; v < V; v++) {
                double d = fabs(((float *)m.logits)[i * Vp + v] - lref[i * V + v]);
                if (d > maxd) maxd = d;
            }
        CHECK(maxd < 1e-4, "%s: logits differ from PyTorch by %g", mode, maxd);
        float loss;
        CHECK(zinf_model_forward(&m, tok, tgt, NULL, &loss) == 0, "forward");
        CHECK_CLOSE(loss, lossref, 1e-5, 1e-6, "loss");
        memset(G, 0, np * 4);
        CHECK(zinf_model_backward(&m, NULL, 1.0f) == 0, "backward");
        /* every tensor's gradient: max abs difference relative to the tensor's largest gradient */
        for (int u = 0; u < m.nunits; u++)
            for (int t = 0; t < m.units[u].ntensors; t++) {
                const zinf_tensor_view *tv = &m.units[u].t[t];
                const float *g = (float *)m.grads[u] + tv->offset;
                const float *gr = gref + ((float *)m.grads[u] - G) + tv->offset;
                double md = 0, mx = 0;
                for (int64_t i = 0; i < tv->numel; i++) {
                    double d = fabs(g[i] - gr[i]);
                    if (d > md) md = d;
                    if (fabs(gr[i]) > mx) mx = fabs(gr[i]);
                }
                CHECK(md <= 1e-3 * mx + 1e-7, "%s: grad %s: max diff %g (max |grad| %g)", mode, tv->name, md, mx);
            }
    }

    /* the training forward (loss gradient fused into the forward's cross-entropy) gives the same
     * loss and the same gradient bits as forward + backward */
    {
        float *g1 = malloc(np * 4), l0, l1;
        memcpy(P, p0, np * 4);
        memset(G, 0, np * 4);
        CHECK(zinf_model_forward(&m, tok, tgt, NULL, &l0) == 0, "forward");
        CHECK(zinf_model_backward(&m, NULL, 0.5f) == 0, "backward");
        memcpy(g1, G, np * 4);
        memset(G, 0, np * 4);
        CHECK(zinf_model_forward_train(&m, tok, tgt, NULL, 0.5f, &l1) == 0, "forward_train");
        CHECK(zinf_model_backward(&m, NULL, 123.0f) == 0, "backward after forward_train");
        CHECK(l0 == l1, "training forward loss %.9g != %.9g", l1, l0);
        CHECK(memcmp(g1, G, np * 4) == 0, "training forward: gradients differ from forward + backward");
        free(g1);
    }

    /* 10 AdamW steps on the same batch, as the trainer does them: clip coefficient, decay by tensor */
    memcpy(P, p0, np * 4);
    memset(M, 0, np * 4);
    memset(Vv, 0, np * 4);
    for (int s = 0; s < steps; s++) {
        float loss;
        memset(G, 0, np * 4);
        CHECK(zinf_model_forward(&m, tok, tgt, NULL, &loss) == 0, "forward");
        CHECK(zinf_model_backward(&m, NULL, 1.0f) == 0, "backward");
        CHECK_CLOSE(loss, lossesref[s], 2e-5, 1e-6, "AdamW step loss");
        double norm = sqrt(zinf_sumsq1(&be, G, np));
        zinf_adamw_args a = {.lr = lr, .beta1 = b1, .beta2 = b2, .eps = 1e-8f,
                             .bias_correction1 = (float)(1 - pow(b1, s + 1)),
                             .bias_correction2 = (float)(1 - pow(b2, s + 1)),
                             .grad_scale = (float)zinf_clip_coef(norm, clip), .adam_w_mode = 1};
        for (int u = 0; u < m.nunits; u++)
            for (int t = 0; t < m.units[u].ntensors; t++) {
                const zinf_tensor_view *tv = &m.units[u].t[t];
                int64_t o = ((float *)m.params[u] - P) + tv->offset;
                a.weight_decay = tv->decay ? wd : 0.0f;
                be.adamw(&be, P + o, NULL, G + o, ZINF_F32, M + o, Vv + o, tv->numel, &a);
            }
    }
    /* Adam normalises each update, so an element whose gradient is ~0 moves by up to lr on noise
     * alone (fp32 here, fp64 in the reference): bound the mean difference tightly and the worst
     * element by a fraction of one step of lr. */
    double md = 0, sd = 0;
    for (int64_t i = 0; i < np; i++) {
        double d = fabs(P[i] - pfin[i]);
        sd += d;
        if (d > md) md = d;
    }
    CHECK(md < 0.2 * lr, "parameters after %d AdamW steps: worst element differs by %g", steps, md);
    CHECK(sd / np < 2e-6, "parameters after %d AdamW steps: mean difference %g", steps, sd / np);
    printf("golden: after %d AdamW steps parameters differ by %.3g at most, %.3g on average\n", steps, md, sd / np);
    printf("golden: PyTorch loss %.6f, after %d AdamW steps %.6f\n", lossref, steps, lossesref[steps - 1]);
    zinf_model_free(&m);
    zinf_backend_cpu_free(&be);
    /* fitting a budget: nothing recomputed when everything fits; one byte less and the fewest
     * blocks that save anything, two (a single recomputed block keeps the one set it shares);
     * less than every block recomputed needs, an error that says so */
    {
        zinf_model_cfg c4 = mc;
        c4.n_layer = 4;
        size_t a0, g0, a4, g4;
        int blocks = -1;
        zinf_model_act_bytes_n(&c4, B, T, 4, ZINF_RECOMPUTE_FULL, 0, &a0, &g0);
        zinf_model_act_bytes_n(&c4, B, T, 4, ZINF_RECOMPUTE_FULL, 4, &a4, &g4);
        CHECK(zinf_model_recompute_fit(&c4, B, T, 4, ZINF_RECOMPUTE_FULL, a0 + g0, NULL, &blocks) == 0 && blocks == 0,
              "fit: all fits, got %d", blocks);
        CHECK(zinf_model_recompute_fit(&c4, B, T, 4, ZINF_RECOMPUTE_FULL, a0 + g0 - 1, NULL, &blocks) == 0 && blocks == 2,
              "fit: one byte short, got %d", blocks);
        CHECK(zinf_model_recompute_fit(&c4, B, T, 4, ZINF_RECOMPUTE_FULL, a4 + g4, NULL, &blocks) == 0 && blocks == 4,
              "fit: only all recomputed fits, got %d", blocks);
        CHECK(zinf_model_recompute_fit(&c4, B, T, 4, ZINF_RECOMPUTE_FULL, a4 + g4 - 1, NULL, &blocks) != 0 &&
                  strstr(zinf_errmsg(), "with every block recomputed"),
              "fit: nothing fits: %s", zinf_errmsg());
        CHECK(zinf_model_act_bytes_n(&c4, B, T, 4, ZINF_RECOMPUTE_FULL, 5, &a0, &g0) != 0, "5 of 4 blocks");
    }
    return check_done("test_gpt2_golden");
}
