/* The Llama family's configs as users bring them: config.json of published models in both
 * spellings transformers writes (4.x rope_theta/rope_scaling/torch_dtype, 5.x rope_parameters/
 * dtype), their parameter counts against a closed form written here and against the counts the
 * model cards publish, the identity a checkpoint stores read back to the same config, and every
 * value zinf does not implement refused with one line naming the key and value. */
#include <jansson.h>
#include <string.h>

#include "check.h"
#include "err.h"
#include "family.h"
#include "model.h"

static int parse(zinf_model_cfg *c, const char *json)
{
    json_error_t je;
    json_t *o = json_loads(json, 0, &je);
    if (!o) {
        fprintf(stderr, "bad test JSON: %s\n", je.text);
        return -1;
    }
    int rc = zinf_model_cfg_from_json(c, o, "config.json");
    json_decref(o);
    return rc;
}

/* The parameters of a Llama-family model, from the architecture as transformers defines it:
 * embedding V x C, per layer the two norms, q/k/v/o, gate/up/down, the optional biases and q/k
 * norms, then the final norm and an untied head. */
static int64_t closed_form(int64_t V, int64_t C, int64_t F, int64_t L, int64_t NH, int64_t NKV, int64_t hs, int tied,
                           int qkv_bias, int o_bias, int qk_norm)
{
    int64_t q = NH * hs, kv = NKV * hs;
    int64_t layer = 2 * C + C * (q + 2 * kv) + q * C + 3 * C * F;
    layer += qkv_bias ? q + 2 * kv : 0;
    layer += o_bias ? C : 0;
    layer += qk_norm ? 2 * hs : 0;
    return V * C + L * layer + C + (tied ? 0 : V * C);
}

static void expect_refused(const char *json, const char *want, const char *what)
{
    zinf_model_cfg c;
    int rc = parse(&c, json);
    CHECK(rc != 0, "%s: accepted", what);
    CHECK(rc != 0 && strstr(zinf_errmsg(), want), "%s: message '%s' lacks '%s'", what, zinf_errmsg(), want);
}

/* bytes of the activations and their gradient scratch, lean or not, with n blocks recomputed */
static size_t act_total(const zinf_model_cfg *c, int n, bool lean)
{
    size_t a = 0, g = 0;
    CHECK(zinf_model_act_bytes_lean(c, 1, 4096, 2, ZINF_RECOMPUTE_FULL, n, lean, &a, &g) == 0, "act bytes");
    return a + g;
}

/* the fewest recomputed blocks that fit, searched here; -1 none */
static int fewest(const zinf_model_cfg *c, size_t budget, bool lean)
{
    for (int n = 0; n <= c->n_layer; n++)
        if (act_total(c, n, lean) <= budget) return n;
    return -1;
}

/* "auto" with lean activations (zinf_model_recompute_fit), T 4096, bf16: at the Llama-3.1-8B shape
 * lean where only lean fits, and where it saves enough recomputed blocks by the rule written in
 * model.h (lean's elementwise work against a block's forward at 200 FLOPs a byte); full where
 * everything fits, and at hidden 64 where lean saves two blocks; never lean for GPT-2 */
static void test_recompute_fit(void)
{
    zinf_model_cfg c;
    CHECK(zinf_model_cfg_load(&c, "llama-3.1-8b") == 0, "preset: %s", zinf_errmsg());
    const int L = c.n_layer;
    bool lean = true;
    int n = -1;
    /* every block kept at full size fits */
    CHECK(zinf_model_recompute_fit(&c, 1, 4096, 2, ZINF_RECOMPUTE_FULL, act_total(&c, 0, false), &lean, &n) == 0 &&
              n == 0 && !lean, "all kept: %d blocks, lean %d", n, lean);
    /* every block kept lean fits, full ones need nf recomputed: lean pays where nf 2C > L 2 200 */
    size_t b = act_total(&c, 0, true);
    int nf = fewest(&c, b, false);
    CHECK(nf > 0 && nf * 2 * 4096 > L * 2 * 200, "lean all kept: full needs %d recomputed", nf);
    CHECK(zinf_model_recompute_fit(&c, 1, 4096, 2, ZINF_RECOMPUTE_FULL, b, &lean, &n) == 0 && n == 0 && lean,
          "lean all kept: %d blocks, lean %d (full: %d)", n, lean, nf);
    /* at hidden 64 (test-llama, 2 blocks) lean's elementwise work weighs more against a block's
     * forward: a budget one byte short of every block kept needs both recomputed at full size
     * (the first recomputed block saves nothing: the recomputed ones share its set) and none lean,
     * and 2 x 2 x 64 < 2 x 2 x 200: full */
    zinf_model_cfg t;
    CHECK(zinf_model_cfg_load(&t, "test-llama") == 0, "test-llama preset");
    b = act_total(&t, 0, false) - 1;
    CHECK(fewest(&t, b, true) == 0 && fewest(&t, b, false) == 2, "test-llama: lean %d, full %d", fewest(&t, b, true),
          fewest(&t, b, false));
    CHECK(zinf_model_recompute_fit(&t, 1, 4096, 2, ZINF_RECOMPUTE_FULL, b, &lean, &n) == 0 && n == 2 && !lean,
          "test-llama: %d blocks, lean %d", n, lean);
    /* only lean fits: one byte short of every block recomputed at full size */
    b = act_total(&c, L, false) - 1;
    int nl = fewest(&c, b, true);
    CHECK(nl >= 0 && nl <= L, "only lean fits: lean needs %d", nl);
    CHECK(zinf_model_recompute_fit(&c, 1, 4096, 2, ZINF_RECOMPUTE_FULL, b, &lean, &n) == 0 && n == nl && lean,
          "only lean fits: %d blocks (want %d), lean %d", n, nl, lean);
    /* without the lean choice (NULL) the same budget fails, naming what every block needs */
    CHECK(zinf_model_recompute_fit(&c, 1, 4096, 2, ZINF_RECOMPUTE_FULL, b, NULL, &n) != 0 &&
              strstr(zinf_errmsg(), "with every block recomputed,"), "full alone: %s", zinf_errmsg());
    zinf_err_clear();
    /* the rule near its break-even: hidden 512 over 24 blocks, every budget from every block kept
     * to every block recomputed at full size, lean or full as blocks saved x 2C against blocks kept
     * lean x 2 bytes x 200, and the fewest blocks that fit either way (at hidden 512 a saved block
     * pays for about 2.6 kept lean ones, so the choice turns with the number kept) */
    zinf_model_cfg h = c;
    h.n_layer = 24, h.n_embd = 512, h.d_ff = 1536, h.n_head = 4, h.n_kv_head = 4, h.head_dim = 128;
    int leans = 0, fulls = 0, nlmax = 0;
    size_t top = act_total(&h, 0, false), bot = act_total(&h, h.n_layer, false);
    for (int k = 0; k <= 400; k++) {
        b = bot + (top - bot) / 400 * (size_t)k;
        int f = fewest(&h, b, false), l = fewest(&h, b, true);
        bool want = l >= 0 && (f < 0 || (l < f && (double)(f - l) * 2 * 512 > (double)(h.n_layer - l) * 2 * 200));
        CHECK(zinf_model_recompute_fit(&h, 1, 4096, 2, ZINF_RECOMPUTE_FULL, b, &lean, &n) == 0 && lean == want &&
                  n == (want ? l : f), "hidden 512, budget %zu: %d blocks, lean %d (full %d, lean %d)", b, n, lean, f, l);
        leans += want, fulls += !want && f > 0;
        if (want && l > nlmax) nlmax = l;
    }
    CHECK(leans > 0 && fulls > 0 && nlmax > 0, "hidden 512: %d lean, %d full with recomputation, lean up to %d recomputed",
          leans, fulls, nlmax);
    /* nothing fits: the message gives lean's need, the least */
    b = act_total(&c, L, true) - 1;
    CHECK(zinf_model_recompute_fit(&c, 1, 4096, 2, ZINF_RECOMPUTE_FULL, b, &lean, &n) != 0, "nothing fits");
    char want[64];
    snprintf(want, sizeof want, "need %.2f GiB with every block recomputed and lean", (double)(b + 1) / 1073741824.0);
    CHECK(strstr(zinf_errmsg(), want) != NULL, "nothing fits: '%s' lacks '%s'", zinf_errmsg(), want);
    zinf_err_clear();
    /* GPT-2: its activations have no lean form, so never lean, and its message does not say lean */
    zinf_model_cfg g;
    CHECK(zinf_model_cfg_load(&g, "gpt2-1.5b") == 0, "gpt2 preset");
    size_t a = 0, gg = 0;
    CHECK(zinf_model_act_bytes_lean(&g, 1, 1024, 2, ZINF_RECOMPUTE_FULL, 10, false, &a, &gg) == 0, "gpt2 bytes");
    CHECK(zinf_model_recompute_fit(&g, 1, 1024, 2, ZINF_RECOMPUTE_FULL, a + gg, &lean, &n) == 0 && n == 10 && !lean,
          "gpt2: %d blocks, lean %d", n, lean);
    CHECK(zinf_model_act_bytes_lean(&g, 1, 1024, 2, ZINF_RECOMPUTE_FULL, g.n_layer, false, &a, &gg) == 0, "gpt2");
    CHECK(zinf_model_recompute_fit(&g, 1, 1024, 2, ZINF_RECOMPUTE_FULL, a + gg - 1, &lean, &n) != 0 &&
              strstr(zinf_errmsg(), "with every block recomputed,") != NULL,
          "gpt2 nothing fits: %s", zinf_errmsg());
    zinf_err_clear();
}

int main(void)
{
    zinf_model_cfg c;
    /* Qwen2.5-0.5B, transformers 4.x spelling (rope_theta, rope_scaling null, torch_dtype), with
     * Qwen's inactive window */
    const char *qwen25 = "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151643,"
                         "\"eos_token_id\":151643,\"hidden_act\":\"silu\",\"hidden_size\":896,\"initializer_range\":0.02,"
                         "\"intermediate_size\":4864,\"max_position_embeddings\":32768,\"max_window_layers\":24,"
                         "\"model_type\":\"qwen2\",\"num_attention_heads\":14,\"num_hidden_layers\":24,"
                         "\"num_key_value_heads\":2,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,"
                         "\"sliding_window\":32768,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\","
                         "\"transformers_version\":\"4.40.1\",\"use_cache\":true,\"use_sliding_window\":false,"
                         "\"vocab_size\":151936}";
    CHECK(parse(&c, qwen25) == 0, "qwen2.5-0.5b: %s", zinf_errmsg());
    CHECK(c.head_dim == 64 && c.qkv_bias && !c.o_bias && c.tie_embeddings && c.sliding_window == 0 &&
              c.rope_type == ZINF_ROPE_DEFAULT && c.rope_theta == 1e6 && c.norm_eps == 1e-6,
          "qwen2.5-0.5b fields: hs %d bias %d/%d tie %d window %d", c.head_dim, c.qkv_bias, c.o_bias, c.tie_embeddings,
          c.sliding_window);
    int64_t n = zinf_model_num_params(&c);
    CHECK(n == closed_form(151936, 896, 4864, 24, 14, 2, 64, 1, 1, 0, 0), "qwen2.5-0.5b: %lld parameters",
          (long long)n);
    CHECK_CLOSE(n / 1e9, 0.494, 0.002, 0, "qwen2.5-0.5b against its card's 0.49B");

    /* Llama-3.2-1B, 4.x spelling with llama3 scaling (factor 32), tied, head_dim written */
    const char *l32 = "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
                      "\"bos_token_id\":128000,\"eos_token_id\":128001,\"head_dim\":64,\"hidden_act\":\"silu\","
                      "\"hidden_size\":2048,\"initializer_range\":0.02,\"intermediate_size\":8192,"
                      "\"max_position_embeddings\":131072,\"mlp_bias\":false,\"model_type\":\"llama\","
                      "\"num_attention_heads\":32,\"num_hidden_layers\":16,\"num_key_value_heads\":8,"
                      "\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,\"rope_scaling\":{\"factor\":32.0,"
                      "\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,\"original_max_position_embeddings\":8192,"
                      "\"rope_type\":\"llama3\"},\"rope_theta\":500000.0,\"tie_word_embeddings\":true,"
                      "\"torch_dtype\":\"bfloat16\",\"vocab_size\":128256}";
    CHECK(parse(&c, l32) == 0, "llama-3.2-1b: %s", zinf_errmsg());
    CHECK(c.rope_type == ZINF_ROPE_LLAMA3 && c.rope_factor == 32 && c.rope_original_max == 8192 &&
              c.rope_high_freq_factor == 4 && !c.qkv_bias && c.tie_embeddings,
          "llama-3.2-1b rope %d factor %g", c.rope_type, c.rope_factor);
    /* the reports' model line (zinf estimate, ckpt info): the published config.json's values under
     * its own names, whole fields on lines of at most 100 columns after a 12-column indent */
    char *desc = zinf_model_describe(&c, 12, 100);
    CHECK(desc != NULL, "describe: %s", zinf_errmsg());
    static const char *const l32_fields[] = {
        "num_hidden_layers 16", "hidden_size 2048", "intermediate_size 8192", "num_attention_heads 32",
        "num_key_value_heads 8", "head_dim 64", "vocab_size 128256 (padded to 128256)",
        "max_position_embeddings 131072", "rms_norm_eps 1e-05", "rope_theta 500000", "rope_scaling.rope_type llama3",
        "rope_scaling.factor 32", "rope_scaling.original_max_position_embeddings 8192", "tie_word_embeddings true"};
    for (size_t i = 0; desc && i < sizeof l32_fields / sizeof *l32_fields; i++)
        CHECK(strstr(desc, l32_fields[i]) != NULL, "describe lacks '%s': %s", l32_fields[i], desc);
    int lines = 0;
    for (const char *p = desc; p && *p; lines++) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        /* the first line follows the caller's 12-column prefix */
        CHECK((lines ? 0 : 12) + len <= 100, "describe line %d is %zu columns: %.*s", lines, len, (int)len, p);
        CHECK(!lines || (len > 12 && strncmp(p, "            ", 12) == 0 && p[12] != ' '), "line %d's indent: %.*s",
              lines, (int)len, p);
        p = e ? e + 1 : p + len;
    }
    CHECK(lines >= 2, "describe: %d lines", lines);
    free(desc);
    n = zinf_model_num_params(&c);
    CHECK(n == closed_form(128256, 2048, 8192, 16, 32, 8, 64, 1, 0, 0, 0), "llama-3.2-1b: %lld", (long long)n);
    CHECK_CLOSE(n / 1e9, 1.236, 0.002, 0, "llama-3.2-1b against 1.24B");
    /* the same in the 5.x spelling: rope_parameters carries theta and the scaling; dtype */
    const char *l32v5 = "{\"model_type\":\"llama\",\"head_dim\":64,\"hidden_size\":2048,\"intermediate_size\":8192,"
                        "\"max_position_embeddings\":131072,\"num_attention_heads\":32,\"num_hidden_layers\":16,"
                        "\"num_key_value_heads\":8,\"rms_norm_eps\":1e-05,\"rope_parameters\":{\"factor\":32.0,"
                        "\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,\"original_max_position_embeddings\":8192,"
                        "\"rope_theta\":500000.0,\"rope_type\":\"llama3\"},\"tie_word_embeddings\":true,"
                        "\"dtype\":\"bfloat16\",\"vocab_size\":128256}";
    zinf_model_cfg c5;
    CHECK(parse(&c5, l32v5) == 0, "llama-3.2-1b v5: %s", zinf_errmsg());
    char key[64], va[128], vb[128];
    c5.pad_token_id = c.pad_token_id;
    CHECK(zinf_model_cfg_diff(&c, &c5, key, sizeof key, va, vb, sizeof va) == 0,
          "the 4.x and 5.x spellings differ at %s (%s, %s)", key, va, vb);
    CHECK(c5.rope_theta == 5e5, "v5 rope_theta %g", c5.rope_theta);

    /* Qwen3-8B (5.x spelling, head_dim 128, q/k norm, untied) and Llama-3.1-8B, Mistral-7B v0.3 */
    const char *q3 = "{\"model_type\":\"qwen3\",\"attention_bias\":false,\"head_dim\":128,\"hidden_size\":4096,"
                     "\"intermediate_size\":12288,\"max_position_embeddings\":40960,\"max_window_layers\":36,"
                     "\"num_attention_heads\":32,\"num_hidden_layers\":36,\"num_key_value_heads\":8,"
                     "\"rms_norm_eps\":1e-06,\"rope_parameters\":{\"rope_theta\":1000000,\"rope_type\":\"default\"},"
                     "\"sliding_window\":null,\"tie_word_embeddings\":false,\"use_sliding_window\":false,"
                     "\"vocab_size\":151936,\"dtype\":\"bfloat16\"}";
    CHECK(parse(&c, q3) == 0, "qwen3-8b: %s", zinf_errmsg());
    n = zinf_model_num_params(&c);
    CHECK(c.qk_norm && !c.tie_embeddings && c.head_dim == 128, "qwen3-8b fields");
    CHECK(n == closed_form(151936, 4096, 12288, 36, 32, 8, 128, 0, 0, 0, 1), "qwen3-8b: %lld", (long long)n);
    CHECK_CLOSE(n / 1e9, 8.191, 0.001, 0, "qwen3-8b against its card's 8.2B");
    zinf_model_cfg p;
    CHECK(zinf_family_preset(&p, "qwen3-8b") == 1 && zinf_model_num_params(&p) == n, "the qwen3-8b preset");
    CHECK(zinf_family_preset(&p, "llama-3.1-8b") == 1, "llama-3.1-8b preset");
    n = zinf_model_num_params(&p);
    CHECK(n == closed_form(128256, 4096, 14336, 32, 32, 8, 128, 0, 0, 0, 0), "llama-3.1-8b: %lld", (long long)n);
    CHECK_CLOSE(n / 1e9, 8.030, 0.001, 0, "llama-3.1-8b against 8.03B");
    const char *mis = "{\"model_type\":\"mistral\",\"hidden_size\":4096,\"intermediate_size\":14336,"
                      "\"max_position_embeddings\":32768,\"num_attention_heads\":32,\"num_hidden_layers\":32,"
                      "\"num_key_value_heads\":8,\"rms_norm_eps\":1e-05,\"rope_theta\":1000000.0,"
                      "\"sliding_window\":null,\"tie_word_embeddings\":false,\"vocab_size\":32768}";
    CHECK(parse(&c, mis) == 0 && c.sliding_window == 0 && c.head_dim == 128, "mistral v0.3: %s", zinf_errmsg());
    CHECK_CLOSE(zinf_model_num_params(&c) / 1e9, 7.248, 0.001, 0, "mistral-7b-v0.3 against 7.25B");
    /* Mistral v0.1's window is active: parsed and recorded, refused where T exceeds it */
    const char *mis1 = "{\"model_type\":\"mistral\",\"hidden_size\":4096,\"intermediate_size\":14336,"
                       "\"max_position_embeddings\":32768,\"num_attention_heads\":32,\"num_hidden_layers\":32,"
                       "\"num_key_value_heads\":8,\"rms_norm_eps\":1e-05,\"rope_theta\":10000.0,"
                       "\"sliding_window\":4096,\"vocab_size\":32000}";
    CHECK(parse(&c, mis1) == 0 && c.sliding_window == 4096, "mistral v0.1 window %d", c.sliding_window);

    /* the identity a checkpoint stores reads back to the same config, for every preset */
    const char *names[] = {"llama-3.2-1b", "llama-3.1-8b", "qwen2.5-0.5b", "qwen2.5-7b", "qwen3-0.6b", "qwen3-8b",
                           "mistral-7b-v0.3", "test-llama", "test-qwen3"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        CHECK(zinf_family_preset(&p, names[i]) == 1, "preset %s", names[i]);
        char type[32], *text = NULL;
        CHECK(zinf_model_identity(&p, type, sizeof type, &text) == 0, "identity of %s", names[i]);
        zinf_model_cfg back;
        int rc = zinf_model_cfg_from_identity(&back, type, text, NULL, "identity");
        CHECK(rc == 0, "%s: identity %s does not read back: %s", names[i], text, zinf_errmsg());
        CHECK(rc || zinf_model_identity_check(&p, type, text, NULL, "x") == 0, "%s: identity check", names[i]);
        free(text);
    }

    /* refused, each naming the key and the value */
    expect_refused("{\"model_type\":\"qwen3_moe\",\"hidden_size\":64}", "model_type qwen3_moe is not supported",
                   "a mixture-of-experts model_type");
    expect_refused("{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                   "\"num_attention_heads\":4,\"vocab_size\":300,\"max_position_embeddings\":64,"
                   "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0,\"original_max_position_embeddings\":32768}}",
                   "rope_scaling.rope_type \"yarn\"", "yarn scaling");
    expect_refused("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                   "\"num_attention_heads\":4,\"vocab_size\":300,\"max_position_embeddings\":64,"
                   "\"rope_parameters\":{\"rope_type\":\"dynamic\",\"factor\":2.0,\"rope_theta\":10000}}",
                   "rope_parameters.rope_type \"dynamic\"", "dynamic scaling");
    expect_refused("{\"model_type\":\"llama\",\"hidden_act\":\"gelu\",\"hidden_size\":64}", "hidden_act gelu",
                   "another activation");
    expect_refused("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                   "\"num_attention_heads\":4,\"vocab_size\":300,\"max_position_embeddings\":64,"
                   "\"attention_dropout\":0.1}", "attention_dropout 0.1", "dropout");
    expect_refused("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                   "\"num_attention_heads\":6,\"num_key_value_heads\":4,\"vocab_size\":300,"
                   "\"max_position_embeddings\":64}", "num_attention_heads 6 is not a multiple of num_key_value_heads 4",
                   "uneven groups");
    expect_refused("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                   "\"vocab_size\":300,\"max_position_embeddings\":64}", "lacks \"intermediate_size\"",
                   "a missing size");
    /* each size and constant at an impossible value, and what transformers refuses or a user's
     * hand-written file gets wrong: one line naming the key */
    const char *base = "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                       "\"vocab_size\":300,\"max_position_embeddings\":64";
    const struct { const char *type, *extra, *want; } bad[] = {
        {"llama", "\"num_key_value_heads\":0", "num_key_value_heads 0: expected 1 or more"},
        {"llama", "\"head_dim\":0", "head_dim 0: expected 1 or more"},
        {"llama", "\"rms_norm_eps\":0", "rms_norm_eps 0: expected a positive number"},
        {"llama", "\"rope_theta\":-1", "rope_theta -1: expected a positive number"},
        {"qwen2", "\"intermediate_size\":0", "intermediate_size 0: expected 1 or more"},
        {"llama", "\"vocab_size\":1", "vocab_size 1: expected 2 or more"},
        {"llama", "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}", "rope_scaling: llama3 scaling lacks low_freq_factor"},
        {"llama", "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000},"
                  "\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0}",
         "rope_parameters (default) and rope_scaling (linear) disagree"},
        {"llama", "\"initializer_range\":-1", "initializer_range -1: expected a positive number"},
        {"llama", "\"layer_types\":[\"full_attention\"]", "layer_types has 1 entries for num_hidden_layers 2"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        /* parse() loads without JSON_REJECT_DUPLICATES: the bad value, after the base's, wins */
        char js[512];
        snprintf(js, sizeof js, "{\"model_type\":\"%s\",%s,%s}", bad[i].type, base, bad[i].extra);
        expect_refused(js, bad[i].want, bad[i].extra);
    }
    /* both spellings alike, as zinf's export and transformers 5 write them: read */
    zinf_model_cfg both;
    char js2[512];
    snprintf(js2, sizeof js2, "{\"model_type\":\"llama\",%s,\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":2.0,"
             "\"rope_theta\":10000},\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0}}", base);
    CHECK(parse(&both, js2) == 0 && both.rope_type == ZINF_ROPE_LINEAR && both.rope_factor == 2.0,
          "both spellings alike: %s", zinf_errmsg());
    /* a Llama-family file without model_type is not read as GPT-2's */
    expect_refused("{\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                   "\"vocab_size\":300}", "no model_type, yet it gives hidden_size: a file without model_type is read as "
                   "GPT-2's; add \"model_type\"", "no model_type");
    test_recompute_fit();
    return check_done("test_llama_cfg");
}
