/* The Llama family as transformers implements it (LlamaForCausalLM, Qwen2ForCausalLM,
 * Qwen3ForCausalLM, MistralForCausalLM): token embedding without positions, pre-RMSNorm blocks,
 * grouped-query attention with RoPE (HF's rotate-half pairing, Llama-3's frequency bands), SwiGLU,
 * a final RMSNorm and a head tied to the embedding or not. The four model_types differ only in
 * their config's rules (Qwen2's q/k/v biases, Qwen3's per-head q/k RMSNorm, Llama's
 * attention_bias and mlp_bias, Mistral's window); one set of functions serves them.
 *
 * Units: 0 the embedding; 1..L the blocks; L+1 the final norm, with the head when it is untied.
 * zinf fuses HF's q|k|v projections into one (NH + 2 NKV) hs x C weight, and gate|up into one
 * 2F x C weight, so a block runs two GEMMs where HF runs five; hf_parts maps them back. HF stores
 * q_proj and k_proj already in the rotate-half layout, so they load unpermuted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "family.h"

/* ---------------------------------------------------------------- config ------------------- */
typedef struct {
    const char *name, *type;
    int L, C, F, NH, NKV, hs, V, T;
    bool tie;
    double theta, eps;
    int rope;      /* ZINF_ROPE_DEFAULT or LLAMA3 (factor below, bands 1 and 4, original 8192) */
    double factor;
} preset;
/* Published shapes (config.json of each model; see README's model table) and two test models. */
static const preset presets[] = {
    {"llama-3.2-1b", "llama", 16, 2048, 8192, 32, 8, 64, 128256, 131072, true, 5e5, 1e-5, ZINF_ROPE_LLAMA3, 32},
    {"llama-3.2-3b", "llama", 28, 3072, 8192, 24, 8, 128, 128256, 131072, true, 5e5, 1e-5, ZINF_ROPE_LLAMA3, 32},
    {"llama-3.1-8b", "llama", 32, 4096, 14336, 32, 8, 128, 128256, 131072, false, 5e5, 1e-5, ZINF_ROPE_LLAMA3, 8},
    {"llama-3.1-70b", "llama", 80, 8192, 28672, 64, 8, 128, 128256, 131072, false, 5e5, 1e-5, ZINF_ROPE_LLAMA3, 8},
    {"qwen2.5-0.5b", "qwen2", 24, 896, 4864, 14, 2, 64, 151936, 32768, true, 1e6, 1e-6, ZINF_ROPE_DEFAULT, 0},
    {"qwen2.5-1.5b", "qwen2", 28, 1536, 8960, 12, 2, 128, 151936, 32768, true, 1e6, 1e-6, ZINF_ROPE_DEFAULT, 0},
    {"qwen2.5-7b", "qwen2", 28, 3584, 18944, 28, 4, 128, 152064, 32768, false, 1e6, 1e-6, ZINF_ROPE_DEFAULT, 0},
    {"qwen2.5-32b", "qwen2", 64, 5120, 27648, 40, 8, 128, 152064, 32768, false, 1e6, 1e-6, ZINF_ROPE_DEFAULT, 0},
    {"qwen2.5-72b", "qwen2", 80, 8192, 29568, 64, 8, 128, 152064, 32768, false, 1e6, 1e-6, ZINF_ROPE_DEFAULT, 0},
    {"qwen3-0.6b", "qwen3", 28, 1024, 3072, 16, 8, 128, 151936, 40960, true, 1e6, 1e-6, ZINF_ROPE_DEFAULT, 0},
    {"qwen3-8b", "qwen3", 36, 4096, 12288, 32, 8, 128, 151936, 40960, false, 1e6, 1e-6, ZINF_ROPE_DEFAULT, 0},
    {"qwen3-32b", "qwen3", 64, 5120, 25600, 64, 8, 128, 151936, 40960, false, 1e6, 1e-6, ZINF_ROPE_DEFAULT, 0},
    {"mistral-7b-v0.3", "mistral", 32, 4096, 14336, 32, 8, 128, 32768, 32768, false, 1e6, 1e-5, ZINF_ROPE_DEFAULT, 0},
    {"test-llama", "llama", 2, 64, 128, 4, 2, 16, 256, 64, false, 5e5, 1e-5, ZINF_ROPE_LLAMA3, 8}, /* tests */
    {"test-qwen3", "qwen3", 2, 64, 160, 4, 2, 32, 256, 64, true, 1e6, 1e-6, ZINF_ROPE_DEFAULT, 0},
};

static bool is(const zinf_model_cfg *c, const char *type) { return !strcmp(c->model_type, type); }

/* the fixed rules of each model_type, then the derived fields and their checks */
static int finish(zinf_model_cfg *c, const char *src)
{
    /* each size by the key config.json gives it under */
    const struct { const char *key; int v, least; } sz[] = {
        {"num_hidden_layers", c->n_layer, 1},       {"hidden_size", c->n_embd, 1},
        {"num_attention_heads", c->n_head, 1},      {"num_key_value_heads", c->n_kv_head, 1},
        {"head_dim", c->head_dim, 1},               {"intermediate_size", c->d_ff, 1},
        {"vocab_size", c->vocab_size, 2},           {"max_position_embeddings", c->n_positions, 1}};
    for (size_t i = 0; i < sizeof sz / sizeof *sz; i++)
        if (sz[i].v < sz[i].least)
            return zinf_err("%s: %s %d: expected %d or more", src, sz[i].key, sz[i].v, sz[i].least);
    if (c->n_head % c->n_kv_head)
        return zinf_err("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", src, c->n_head,
                        c->n_kv_head);
    if (c->head_dim % 2)
        return zinf_err("%s: head_dim %d is odd: RoPE rotates pairs of channels", src, c->head_dim);
    if (!(c->norm_eps > 0)) return zinf_err("%s: rms_norm_eps %g: expected a positive number", src, c->norm_eps);
    if (!(c->rope_theta > 0)) return zinf_err("%s: rope_theta %g: expected a positive number", src, c->rope_theta);
    c->padded_vocab = (c->vocab_size + 127) / 128 * 128;
    c->bias = c->qkv_bias || c->o_bias || c->mlp_bias;
    if (c->init_std <= 0) c->init_std = 0.02;
    return 0;
}

static int llama_preset_of(zinf_model_cfg *c, const char *name, const char *type)
{
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        const preset *p = &presets[i];
        if (strcmp(p->name, name) || strcmp(p->type, type)) continue;
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", p->name);
        snprintf(c->model_type, sizeof c->model_type, "%s", p->type);
        c->n_layer = p->L, c->n_embd = p->C, c->d_ff = p->F, c->n_head = p->NH, c->n_kv_head = p->NKV;
        c->head_dim = p->hs, c->vocab_size = p->V, c->n_positions = p->T, c->tie_embeddings = p->tie;
        c->rope_theta = p->theta, c->norm_eps = p->eps, c->rope_type = p->rope, c->pad_token_id = -1;
        if (p->rope == ZINF_ROPE_LLAMA3) {
            c->rope_factor = p->factor, c->rope_low_freq_factor = 1, c->rope_high_freq_factor = 4;
            c->rope_original_max = 8192;
        }
        c->qkv_bias = is(c, "qwen2");
        c->qk_norm = is(c, "qwen3");
        ZINF_TRY(finish(c, name));
        return 1;
    }
    return 0;
}
static int shared_cfg_from_hf(zinf_model_cfg *c, json_t *o, const char *src);
/* each model_type's entry points: the shared code reads the type from c->model_type */
#define PRESET_FN(ty)                                                                             \
    static int ty##_preset(zinf_model_cfg *c, const char *name) { return llama_preset_of(c, name, #ty); } \
    static int ty##_cfg_from_hf(zinf_model_cfg *c, json_t *o, const char *src)                   \
    {                                                                                             \
        snprintf(c->model_type, sizeof c->model_type, "%s", #ty);                                \
        return shared_cfg_from_hf(c, o, src);                                                      \
    }
PRESET_FN(llama)
PRESET_FN(qwen2)
PRESET_FN(qwen3)
PRESET_FN(mistral)

/* -- reading config.json: each key's absence, null and type handled in one place -- */
static int get_int(json_t *o, const char *key, int dflt, int *out, const char *src)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (dflt < 0) return zinf_err("%s lacks \"%s\"", src, key);
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30))
        return zinf_err("%s: \"%s\" must be an integer from 0 to 2^30 (1073741824)", src, key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_num(json_t *o, const char *key, double dflt, double *out, const char *src)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return zinf_err("%s: \"%s\" must be a number", src, key);
    *out = json_number_value(v);
    return 0;
}

static int get_bool(json_t *o, const char *key, bool dflt, bool *out, const char *src)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v)) return zinf_err("%s: \"%s\" must be true or false", src, key);
    *out = json_is_true(v);
    return 0;
}

/* RoPE in both spellings transformers writes: 4.x rope_theta + rope_scaling {rope_type|type, ...},
 * 5.x rope_parameters {rope_type, rope_theta, ...}. A type zinf does not implement is one line. */
static int read_rope(zinf_model_cfg *c, json_t *o, const char *src)
{
    json_t *rp = json_object_get(o, "rope_parameters"), *rs = json_object_get(o, "rope_scaling");
    const char *where = "rope_parameters";
    json_t *p = rp && !json_is_null(rp) ? rp : NULL;
    if (!p && rs && !json_is_null(rs)) p = rs, where = "rope_scaling";
    if ((rp && !json_is_null(rp) && !json_is_object(rp)) || (rs && !json_is_null(rs) && !json_is_object(rs)))
        return zinf_err("%s: rope_parameters and rope_scaling must be objects or null", src);
    ZINF_TRY(get_num(o, "rope_theta", 10000.0, &c->rope_theta, src));
    c->rope_type = ZINF_ROPE_DEFAULT;
    /* RoPE over part of each head (transformers' partial_rotary_factor, top-level or in the rope
     * block), and multimodal RoPE sections: zinf rotates every dimension of a head as one */
    double prf = 1;
    ZINF_TRY(get_num(o, "partial_rotary_factor", 1, &prf, src));
    if (prf == 1 && p) ZINF_TRY(get_num(p, "partial_rotary_factor", 1, &prf, src));
    if (prf != 1)
        return zinf_err("%s: partial_rotary_factor %g: zinf's RoPE rotates the whole head (1.0)", src, prf);
    if (p && json_object_get(p, "mrope_section") && !json_is_null(json_object_get(p, "mrope_section")))
        return zinf_err("%s: %s.mrope_section: multimodal RoPE is not implemented", src, where);
    if (!p) return 0;
    /* both spellings (zinf's export and transformers 5 write them alike): they must say the same */
    if (p == rp && rs && !json_is_null(rs)) {
        json_t *ta = json_object_get(rp, "rope_type"), *tb = json_object_get(rs, "rope_type");
        if (!ta) ta = json_object_get(rp, "type");
        if (!tb) tb = json_object_get(rs, "type");
        const char *a = json_is_string(ta) ? json_string_value(ta) : "default",
                   *b = json_is_string(tb) ? json_string_value(tb) : "default";
        json_t *fa = json_object_get(rp, "factor"), *fb = json_object_get(rs, "factor");
        bool same_f = (!fa && !fb) || (json_is_number(fa) && json_is_number(fb) &&
                                       json_number_value(fa) == json_number_value(fb));
        if (strcmp(a, b) || !same_f)
            return zinf_err("%s: rope_parameters (%s) and rope_scaling (%s) disagree: give one of them, or both "
                            "alike", src, a, b);
    }
    if (json_object_get(p, "rope_theta")) ZINF_TRY(get_num(p, "rope_theta", c->rope_theta, &c->rope_theta, src));
    json_t *t = json_object_get(p, "rope_type");
    if (!t) t = json_object_get(p, "type");
    const char *ty = json_is_string(t) ? json_string_value(t) : t ? NULL : "default";
    if (!ty) return zinf_err("%s: %s.rope_type must be a string", src, where);
    /* every key of the block is one zinf reads for its type: anything else would be dropped
     * without a word (transformers warns of unrecognised keys and reads none of them either) */
    static const char *const common[] = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section"};
    static const char *const scaled[] = {"factor", "low_freq_factor", "high_freq_factor",
                                         "original_max_position_embeddings"};
    const size_t nscaled = !strcmp(ty, "llama3") ? 4 : !strcmp(ty, "linear") ? 1 : 0;
    const char *k;
    json_t *kv;
    json_object_foreach(p, k, kv) {
        bool known = false;
        for (size_t i = 0; i < sizeof common / sizeof *common && !known; i++) known = !strcmp(k, common[i]);
        for (size_t i = 0; i < nscaled && !known; i++) known = !strcmp(k, scaled[i]);
        /* an unimplemented type's keys: the type's own line below names it */
        if (!known && (!strcmp(ty, "default") || nscaled))
            return zinf_err("%s: %s.%s: not a key of %s RoPE (zinf reads %s%s)", src, where, k, ty,
                            nscaled == 4 ? "rope_type, rope_theta, factor, low_freq_factor, high_freq_factor and "
                                           "original_max_position_embeddings"
                            : nscaled    ? "rope_type, rope_theta and factor"
                                         : "rope_type and rope_theta",
                            "");
    }
    if (!strcmp(ty, "default")) return 0;
    char key[64];
    snprintf(key, sizeof key, "%s.factor", where);
    ZINF_TRY(get_num(p, "factor", 0, &c->rope_factor, src));
    if (!strcmp(ty, "linear")) {
        if (!(c->rope_factor >= 1)) return zinf_err("%s: %s %g: expected a number >= 1", src, key, c->rope_factor);
        c->rope_type = ZINF_ROPE_LINEAR;
        return 0;
    }
    if (strcmp(ty, "llama3"))
        return zinf_err("%s: %s.rope_type \"%s\": zinf implements default, linear and llama3 RoPE (not yarn, dynamic "
                        "or longrope scaling)", src, where, ty);
    c->rope_type = ZINF_ROPE_LLAMA3;
    /* transformers refuses llama3 scaling without any of its four keys; no default is guessed */
    static const char *const l3[] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    for (size_t i = 0; i < sizeof l3 / sizeof *l3; i++)
        if (!json_is_number(json_object_get(p, l3[i])))
            return zinf_err("%s: %s: llama3 scaling lacks %s (a number)", src, where, l3[i]);
    ZINF_TRY(get_num(p, "low_freq_factor", 1.0, &c->rope_low_freq_factor, src));
    ZINF_TRY(get_num(p, "high_freq_factor", 4.0, &c->rope_high_freq_factor, src));
    ZINF_TRY(get_int(p, "original_max_position_embeddings", 8192, &c->rope_original_max, src));
    if (!(c->rope_factor >= 1) || !(c->rope_high_freq_factor > c->rope_low_freq_factor) ||
        !(c->rope_low_freq_factor > 0) || c->rope_original_max < 1)
        return zinf_err("%s: %s: llama3 scaling needs factor >= 1, high_freq_factor > low_freq_factor > 0 and a "
                        "positive original_max_position_embeddings", src, where);
    return 0;
}

static int shared_cfg_from_hf(zinf_model_cfg *c, json_t *o, const char *src)
{
    json_t *act = json_object_get(o, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu")))
        return zinf_err("%s: hidden_act %s: the %s family's MLP is SwiGLU (silu)", src,
                        json_is_string(act) ? json_string_value(act) : "(not a string)", c->model_type);
    ZINF_TRY(get_int(o, "num_hidden_layers", -1, &c->n_layer, src));
    ZINF_TRY(get_int(o, "hidden_size", -1, &c->n_embd, src));
    ZINF_TRY(get_int(o, "intermediate_size", -1, &c->d_ff, src));
    ZINF_TRY(get_int(o, "num_attention_heads", -1, &c->n_head, src));
    ZINF_TRY(get_int(o, "num_key_value_heads", c->n_head, &c->n_kv_head, src));
    ZINF_TRY(get_int(o, "vocab_size", -1, &c->vocab_size, src));
    ZINF_TRY(get_int(o, "max_position_embeddings", -1, &c->n_positions, src));
    if (c->n_head < 1) return zinf_err("%s: num_attention_heads must be positive", src);
    /* Qwen2's config has no head_dim (hidden / heads); the others may give one, or null */
    ZINF_TRY(get_int(o, "head_dim", is(c, "qwen2") ? c->n_embd / c->n_head : is(c, "qwen3") ? 128
                                                                                              : c->n_embd / c->n_head,
                     &c->head_dim, src));
    /* transformers' Qwen2 takes a head_dim only where it is hidden / heads */
    if (is(c, "qwen2") && c->head_dim != c->n_embd / c->n_head)
        return zinf_err("%s: head_dim %d: zinf's qwen2 heads are hidden_size / num_attention_heads = %d wide", src,
                        c->head_dim, c->n_embd / c->n_head);
    ZINF_TRY(get_num(o, "rms_norm_eps", 1e-6, &c->norm_eps, src));
    ZINF_TRY(get_num(o, "initializer_range", 0.02, &c->init_std, src));
    if (!(c->init_std > 0))
        return zinf_err("%s: initializer_range %g: expected a positive number (the initial weights' standard "
                        "deviation)", src, c->init_std);
    ZINF_TRY(get_bool(o, "tie_word_embeddings", false, &c->tie_embeddings, src));
    ZINF_TRY(read_rope(c, o, src));
    double drop = 0;
    ZINF_TRY(get_num(o, "attention_dropout", 0, &drop, src));
    if (drop != 0) return zinf_err("%s: attention_dropout %g: zinf trains without dropout", src, drop);
    /* Llama's pretraining_tp > 1: transformers 4.x cuts every projection into that many slices
     * (the same product up to rounding, in another order); zinf computes each one whole */
    int tp = 1;
    ZINF_TRY(get_int(o, "pretraining_tp", 1, &tp, src));
    if (tp != 1)
        return zinf_err("%s: pretraining_tp %d: zinf computes each projection whole (1), not in slices", src, tp);
    /* weights quantized by GPTQ, AWQ, bitsandbytes...: zinf trains 16- and 32-bit weights */
    json_t *q = json_object_get(o, "quantization_config");
    if (q && !json_is_null(q)) {
        json_t *qm = json_is_object(q) ? json_object_get(q, "quant_method") : NULL;
        return zinf_err("%s: quantization_config (%s): zinf trains unquantized weights; start from the "
                        "unquantized model", src, json_is_string(qm) ? json_string_value(qm) : "present");
    }
    bool attn_bias = false, mlp_bias = false;
    ZINF_TRY(get_bool(o, "attention_bias", false, &attn_bias, src));
    ZINF_TRY(get_bool(o, "mlp_bias", false, &mlp_bias, src));
    /* each model_type's own rule, as its modeling file hard-codes it */
    if (is(c, "qwen2")) c->qkv_bias = true, c->o_bias = false, c->mlp_bias = false;
    else if (is(c, "mistral")) c->qkv_bias = c->o_bias = c->mlp_bias = false;
    else c->qkv_bias = c->o_bias = attn_bias, c->mlp_bias = is(c, "llama") && mlp_bias;
    c->qk_norm = is(c, "qwen3");
    /* the sliding window: Qwen's configs carry one with use_sliding_window false, which is none */
    int win = 0;
    bool use = true;
    if (is(c, "qwen2") || is(c, "qwen3")) ZINF_TRY(get_bool(o, "use_sliding_window", false, &use, src));
    if (use && (is(c, "mistral") || is(c, "qwen2") || is(c, "qwen3"))) ZINF_TRY(get_int(o, "sliding_window", 0, &win, src));
    if (use && win && (is(c, "qwen2") || is(c, "qwen3"))) {
        int mwl = 0;
        ZINF_TRY(get_int(o, "max_window_layers", 0, &mwl, src));
        if (mwl >= c->n_layer) win = 0; /* no layer at or past max_window_layers: no window */
    }
    c->sliding_window = win;
    /* transformers 5's per-layer kinds: a sliding layer where zinf has no window would be one */
    json_t *lt = json_object_get(o, "layer_types");
    if (lt && json_is_array(lt) && json_array_size(lt) != (size_t)c->n_layer)
        return zinf_err("%s: layer_types has %zu entries for num_hidden_layers %d", src, json_array_size(lt),
                        c->n_layer);
    if (lt && json_is_array(lt) && !win) {
        size_t i;
        json_t *e;
        json_array_foreach(lt, i, e)
            if (!json_is_string(e) || strcmp(json_string_value(e), "full_attention"))
                return zinf_err("%s: layer_types[%zu] %s: zinf's attention is full_attention in every layer (no "
                                "sliding window is set)", src, i, json_is_string(e) ? json_string_value(e) : "(not a string)");
    }
    json_t *pad = json_object_get(o, "pad_token_id");
    c->pad_token_id = json_is_integer(pad) && json_integer_value(pad) >= 0 && json_integer_value(pad) < c->vocab_size
                          ? (int)json_integer_value(pad)
                          : -1;
    return finish(c, src);
}

/* The fields that fix the tensors and the arithmetic, under config.json's 4.x names: the model's
 * identity, which shared_cfg_from_hf reads back to the same config. */
static json_t *rope_json(const zinf_model_cfg *c)
{
    if (c->rope_type == ZINF_ROPE_DEFAULT) return json_null();
    json_t *r = json_object();
    json_object_set_new(r, "rope_type", json_string(c->rope_type == ZINF_ROPE_LINEAR ? "linear" : "llama3"));
    json_object_set_new(r, "factor", json_real(c->rope_factor));
    if (c->rope_type == ZINF_ROPE_LLAMA3) {
        json_object_set_new(r, "low_freq_factor", json_real(c->rope_low_freq_factor));
        json_object_set_new(r, "high_freq_factor", json_real(c->rope_high_freq_factor));
        json_object_set_new(r, "original_max_position_embeddings", json_integer(c->rope_original_max));
    }
    return r;
}

static json_t *llama_cfg_json(const zinf_model_cfg *c)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layer));
    json_object_set_new(o, "hidden_size", json_integer(c->n_embd));
    json_object_set_new(o, "intermediate_size", json_integer(c->d_ff));
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_head));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->n_kv_head));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->n_positions));
    json_object_set_new(o, "rms_norm_eps", json_real(c->norm_eps));
    json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(o, "rope_scaling", rope_json(c));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    if (is(c, "llama") || is(c, "qwen3")) json_object_set_new(o, "attention_bias", json_boolean(c->qkv_bias));
    if (is(c, "llama")) json_object_set_new(o, "mlp_bias", json_boolean(c->mlp_bias));
    if (c->pad_token_id >= 0) json_object_set_new(o, "pad_token_id", json_integer(c->pad_token_id));
    json_object_set_new(o, "padded_vocab", json_integer(c->padded_vocab));
    return o;
}

/* ---------------------------------------------------------------- the tensor table --------- */
/* Tensor ids of a block; a tensor the config does not have is left out of the unit, so ids are
 * looked up through the unit's own list (blk_t). */
enum { B_LN1, B_QKVW, B_QKVB, B_QN, B_KN, B_OW, B_OB, B_LN2, B_GUW, B_GUB, B_DW, B_DB, B_N };
static const char *const blk_name[B_N] = {
    "ln1.weight", "attn.qkv.weight", "attn.qkv.bias", "attn.q_norm.weight", "attn.k_norm.weight",
    "attn.proj.weight", "attn.proj.bias", "ln2.weight", "mlp.gate_up.weight", "mlp.gate_up.bias",
    "mlp.down.weight", "mlp.down.bias"};

/* which tensors a block has under config c */
static bool blk_has(const zinf_model_cfg *c, int id)
{
    switch (id) {
    case B_QKVB: return c->qkv_bias;
    case B_QN: case B_KN: return c->qk_norm;
    case B_OB: return c->o_bias;
    case B_GUB: case B_DB: return c->mlp_bias;
    default: return true;
    }
}

/* the index in a block unit of tensor id (the unit lists present ones in id order); -1 when absent */
static int blk_t(const zinf_model_cfg *c, int id)
{
    if (!blk_has(c, id)) return -1;
    int t = 0;
    for (int i = 0; i < id; i++) t += blk_has(c, i);
    return t;
}

enum { E_WTE = 0 };             /* unit 0 */
enum { H_NORM = 0, H_HEAD = 1 }; /* unit L+1 (H_HEAD when untied) */

static int llama_nunits(const zinf_model_cfg *c) { return c->n_layer + 2; }

static int llama_layout(zinf_model *m)
{
    const zinf_model_cfg *c = &m->c;
    const int L = c->n_layer;
    const int64_t C = c->n_embd, hs = c->head_dim, QKV = (int64_t)(c->n_head + 2 * c->n_kv_head) * hs;
    const int64_t A = (int64_t)c->n_head * hs, F = c->d_ff, Vp = c->padded_vocab;
    const float sd = (float)c->init_std;
    zinf_unit *u = &m->units[0];
    snprintf(u->name, sizeof u->name, "embed");
    u->what = "token embedding";
    zinf_unit_add(u, "embed", Vp, C, true, sd, false)->init_rows = c->vocab_size;
    for (int l = 0; l < L; l++) {
        u = &m->units[1 + l];
        snprintf(u->name, sizeof u->name, "blocks.%d", l);
        u->what = "transformer block";
        const int64_t rows[B_N] = {C, QKV, QKV, hs, hs, C, C, C, 2 * F, 2 * F, C, C};
        const int64_t cols[B_N] = {0, C, 0, 0, 0, A, 0, 0, C, 0, F, 0};
        for (int id = 0; id < B_N; id++) {
            if (!blk_has(c, id)) continue;
            char nm[64];
            snprintf(nm, sizeof nm, "blocks.%d.%s", l, blk_name[id]);
            bool norm = id == B_LN1 || id == B_LN2 || id == B_QN || id == B_KN;
            /* weights decay; biases and norms do not (the HF Trainer's rule) */
            zinf_unit_add(u, nm, rows[id], cols[id], cols[id] != 0, cols[id] ? sd : 0, norm);
        }
    }
    u = &m->units[L + 1];
    snprintf(u->name, sizeof u->name, "head");
    u->what = c->tie_embeddings ? "final norm" : "final norm and LM head";
    zinf_unit_add(u, "norm.weight", C, 0, false, 0, true);
    if (!c->tie_embeddings) zinf_unit_add(u, "lm_head", Vp, C, true, sd, false)->init_rows = c->vocab_size;
    return 0;
}

/* forward 0, 1..L, L+1 (the final norm), then the head's unit (0 when tied, else L+1 again: model.c
 * runs the head); backward: the head's unit, L+1, L..1, 0 */
static int llama_use_order(const zinf_model *m, zinf_use *out, int cap, int *nfwd)
{
    const int L = m->c.n_layer;
    const bool tied = m->c.tie_embeddings;
    int n = 0;
#define USE_(uu, ph)                                                                              \
    do {                                                                                          \
        if (out && n < cap) out[n] = (zinf_use){uu, ph};                                          \
        n++;                                                                                      \
    } while (0)
    USE_(0, 0);
    for (int l = 0; l < L; l++) USE_(1 + l, 0);
    USE_(L + 1, 0);
    USE_(tied ? 0 : L + 1, 0); /* the head */
    *nfwd = n;
    USE_(tied ? 0 : L + 1, 1); /* the head */
    USE_(L + 1, 1);
    for (int l = L - 1; l >= 0; l--) USE_(1 + l, 1);
    USE_(0, 1);
#undef USE_
    return n;
}

/* ---------------------------------------------------------------- activations -------------- */
typedef struct layer_acts {
    void *ln1, *pre, *qkv, *atty, *res2, *ln2, *gu, *h;
    float *ln1_rstd, *qk_rstd, *lse, *ln2_rstd;
} layer_acts;

typedef struct llama_acts {
    void **res;
    layer_acts *layers;
    void *lnf;
    float *lnf_rstd;
    int32_t *pos;                  /* device copy of the batch's positions (NULL: row offsets) */
    bool pos_given;
    int32_t *kvs, *seq;            /* device copies of the batch's sample starts and samples */
    zinf_attn_rows rows;           /* the packed samples the attention takes */
    bool packed;                   /* the batch packs several samples into a row */
    float *inv_freq;               /* [hs/2] in backend memory */
    void *d_res, *d_ln, *d_qkv, *d_pre, *d_atty, *d_gu, *d_h; /* gradient scratch */
    void *ln_s, *h_s; /* lean (m->lean): every block's norm outputs and MLP product, one at a time */
} llama_acts;

/* RoPE's inverse frequencies with the config's scaling (transformers' _compute_llama3_parameters
 * for llama3; linear divides them by the factor): computed on the host, in double, rounded once. */
static void inv_freqs(const zinf_model_cfg *c, float *out)
{
    int half = c->head_dim / 2;
    for (int i = 0; i < half; i++) {
        /* transformers: 1 / theta^(arange(0, d, 2) / d), in fp32 */
        float inv = (float)(1.0 / pow(c->rope_theta, (double)(2 * i) / (double)c->head_dim));
        if (c->rope_type == ZINF_ROPE_LINEAR) inv = (float)(inv / c->rope_factor);
        if (c->rope_type == ZINF_ROPE_LLAMA3) {
            double f = c->rope_factor, lf = c->rope_low_freq_factor, hf = c->rope_high_freq_factor;
            double Lo = c->rope_original_max, wavelen = 2 * M_PI / inv;
            double low_wl = Lo / lf, high_wl = Lo / hf;
            double v = wavelen > low_wl ? inv / f : inv;
            if (!(wavelen < high_wl) && !(wavelen > low_wl)) {
                double smooth = (Lo / wavelen - lf) / (hf - lf);
                v = (1 - smooth) * v / f + smooth * v;
            }
            inv = (float)v;
        }
        out[i] = inv;
    }
}

static void llama_acts_free(zinf_model *m)
{
    llama_acts *A = m->acts;
    if (A) {
        if (A->inv_freq && m->be) m->be->free(m->be, ZINF_PLACE_DEVICE, A->inv_freq);
        free(A->res), free(A->layers);
    }
    free(A);
    m->acts = NULL;
}

static int llama_acts_init(zinf_model *m)
{
    llama_acts *A = calloc(1, sizeof *A);
    m->acts = A;
    if (A) {
        A->res = calloc((size_t)m->c.n_layer + 1, sizeof *A->res);
        A->layers = calloc((size_t)m->c.n_layer, sizeof *A->layers);
    }
    if (!A || !A->res || !A->layers) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    if (!m->be) return 0; /* a layout only (sizes) */
    int half = m->c.head_dim / 2;
    float host[4096];
    if (half > 4096) return zinf_err("head_dim %d: at most 8192", m->c.head_dim);
    inv_freqs(&m->c, host);
    A->inv_freq = m->be->alloc(m->be, ZINF_PLACE_DEVICE, (size_t)half * 4);
    if (!A->inv_freq) return zinf_errc(ZINF_ENOMEM, "out of device memory");
    ZINF_TRY(m->be->copy(m->be, A->inv_freq, host, (size_t)half * 4, NULL));
    return m->be->sync(m->be);
}

typedef struct dims { int64_t N, C, hs, NH, NKV, QKV, A, F; } dims;
static dims dims_of(const zinf_model *m)
{
    const zinf_model_cfg *c = &m->c;
    dims d = {(int64_t)m->B * m->T, c->n_embd, c->head_dim, c->n_head, c->n_kv_head, 0, 0, c->d_ff};
    d.QKV = (d.NH + 2 * d.NKV) * d.hs;
    d.A = d.NH * d.hs;
    return d;
}

/* A block's activations. Lean, the two norms' outputs and SwiGLU's product go to scratch that every
 * block shares (the backward recomputes them: two RMSNorms and a SwiGLU, elementwise, against the
 * GEMMs they feed): of a Llama-3.1-8B block's 544 MiB at 4096 tokens (its residual included), 176 MiB. */
static void carve_layer(const zinf_model *m, zinf_carver *cv, layer_acts *a, size_t es)
{
    const llama_acts *A = m->acts;
    dims d = dims_of(m);
    size_t N = (size_t)d.N;
    a->ln1 = m->lean ? A->ln_s : zinf_carve(cv, N * d.C * es);
    a->pre = m->c.qk_norm ? zinf_carve(cv, N * d.QKV * es) : NULL; /* q|k|v before the q/k norm */
    a->qkv = zinf_carve(cv, N * d.QKV * es);
    a->atty = zinf_carve(cv, N * d.A * es);
    a->res2 = zinf_carve(cv, N * d.C * es);
    a->ln2 = m->lean ? A->ln_s : zinf_carve(cv, N * d.C * es);
    a->gu = zinf_carve(cv, N * 2 * d.F * es);
    a->h = m->lean ? A->h_s : zinf_carve(cv, N * d.F * es);
    a->ln1_rstd = zinf_carve(cv, N * 4);
    a->qk_rstd = m->c.qk_norm ? zinf_carve(cv, N * (d.NH + d.NKV) * 4) : NULL;
    a->lse = zinf_carve(cv, N * d.NH * 4);
    a->ln2_rstd = zinf_carve(cv, N * 4);
}

static void llama_carve(zinf_model *m, zinf_carver *cv, zinf_carver *cg, size_t es)
{
    llama_acts *A = m->acts;
    dims d = dims_of(m);
    size_t N = (size_t)d.N, L = m->c.n_layer;
    A->ln_s = m->lean ? zinf_carve(cg, N * d.C * es) : NULL;
    A->h_s = m->lean ? zinf_carve(cg, N * d.F * es) : NULL;
    for (size_t l = 0; l <= L; l++) A->res[l] = zinf_carve(cv, N * d.C * es);
    for (size_t l = 0; l < L; l++) {
        if (m->recompute == ZINF_RECOMPUTE_NONE || l == 0 || l >= (size_t)m->recompute_blocks) {
            carve_layer(m, cv, &A->layers[l], es);
            continue;
        }
        A->layers[l] = A->layers[0]; /* the recomputed activations share one set */
        if (m->recompute == ZINF_RECOMPUTE_KEEP_ATTN) {
            A->layers[l].atty = zinf_carve(cv, N * d.A * es);
            A->layers[l].lse = zinf_carve(cv, N * d.NH * 4);
        }
    }
    A->lnf = zinf_carve(cv, N * d.C * es);
    A->lnf_rstd = zinf_carve(cv, N * 4);
    A->pos = zinf_carve(cv, N * 4);
    A->kvs = zinf_carve(cv, N * 4);
    A->seq = zinf_carve(cv, N * 2 * 4);
    A->d_res = zinf_carve(cg, N * d.C * es);
    A->d_ln = zinf_carve(cg, N * d.C * es);
    A->d_qkv = zinf_carve(cg, N * d.QKV * es);
    A->d_pre = m->c.qk_norm ? zinf_carve(cg, N * d.QKV * es) : NULL;
    A->d_atty = zinf_carve(cg, N * d.A * es);
    A->d_gu = zinf_carve(cg, N * 2 * d.F * es);
    A->d_h = zinf_carve(cg, N * d.F * es);
}

/* ---------------------------------------------------------------- forward / backward ------- */
#define TP(bufs, u, t) zinf_tp(m, bufs, u, t)
/* a block's tensor, or NULL when the config has none (a bias) */
static void *BT(const zinf_model *m, void **bufs, int u, int id)
{
    int t = blk_t(&m->c, id);
    return t < 0 ? NULL : zinf_tp(m, bufs, u, t);
}

static const int32_t *positions(const zinf_model *m)
{
    const llama_acts *A = m->acts;
    return A->pos_given ? A->pos : NULL;
}

static const zinf_attn_rows *attn_rows(const zinf_model *m)
{
    const llama_acts *A = m->acts;
    return A->packed ? &A->rows : NULL;
}

/* Block l's forward; for the backward's recomputation it stops after SwiGLU (the down projection
 * produces only res[l+1], which the backward never reads), and under KEEP_ATTN it reuses the kept
 * attention output. */
static void block_forward(zinf_model *m, int l, bool for_backward)
{
    zinf_backend *be = m->be;
    llama_acts *A = m->acts;
    layer_acts *a = &A->layers[l];
    const zinf_model_cfg *c = &m->c;
    dims d = dims_of(m);
    size_t es = zinf_dtype_size(be->cdt);
    int u = 1 + l;
    void **P = m->params;
    float eps = (float)c->norm_eps;
    be->rmsnorm_fwd(be, a->ln1, a->ln1_rstd, A->res[l], BT(m, P, u, B_LN1), d.N, 1, (int)d.C, d.C, eps);
    be->matmul_fwd(be, c->qk_norm ? a->pre : a->qkv, a->ln1, BT(m, P, u, B_QKVW), BT(m, P, u, B_QKVB), d.N, (int)d.C,
                   (int)d.QKV);
    if (c->qk_norm) { /* Qwen3: each q and k head normalised over its hs channels, then RoPE; the q
                        * heads in one call, the k heads in another (their rstd after the q heads') */
        int64_t k0 = d.NH * d.hs;
        be->rmsnorm_fwd(be, a->qkv, a->qk_rstd, a->pre, BT(m, P, u, B_QN), d.N, (int)d.NH, (int)d.hs, d.QKV, eps);
        be->rmsnorm_fwd(be, (char *)a->qkv + k0 * es, a->qk_rstd + d.NH * d.N, (char *)a->pre + k0 * es,
                        BT(m, P, u, B_KN), d.N, (int)d.NKV, (int)d.hs, d.QKV, eps);
        int64_t v0 = (d.NH + d.NKV) * d.hs;
        be->copy_rows(be, (char *)a->qkv + v0 * es, d.QKV, (char *)a->pre + v0 * es, d.QKV, d.N, d.NKV * d.hs);
    }
    be->rope(be, a->qkv, d.N, (int)(d.NH + d.NKV), (int)d.hs, d.QKV, positions(m), m->T, A->inv_freq, 0);
    /* the attention's backward reads q|k|v; under KEEP_ATTN its output and LSE are kept */
    if (!for_backward || m->recompute != ZINF_RECOMPUTE_KEEP_ATTN)
        be->attention_fwd(be, a->atty, a->lse, a->qkv, m->B, m->T, (int)d.NH, (int)d.NKV, (int)d.hs,
                          attn_rows(m));
    be->matmul_fwd_res(be, a->res2, a->atty, BT(m, P, u, B_OW), BT(m, P, u, B_OB), A->res[l], d.N, (int)d.A, (int)d.C);
    be->rmsnorm_fwd(be, a->ln2, a->ln2_rstd, a->res2, BT(m, P, u, B_LN2), d.N, 1, (int)d.C, d.C, eps);
    be->matmul_fwd(be, a->gu, a->ln2, BT(m, P, u, B_GUW), BT(m, P, u, B_GUB), d.N, (int)d.C, (int)(2 * d.F));
    be->swiglu_fwd(be, a->h, a->gu, d.N, (int)d.F);
    if (for_backward) return;
    be->matmul_fwd_res(be, A->res[l + 1], a->h, BT(m, P, u, B_DW), BT(m, P, u, B_DB), a->res2, d.N, (int)d.F,
                       (int)d.C);
}

/* The samples packed into the batch's rows, from its sample starts: each row a run of samples,
 * kv_start[t] either kv_start[t-1] (the same sample) or t (a new one). NULL or all zero: one
 * sample per row, the attention's default. */
static int take_samples(zinf_model *m, const zinf_batch *b)
{
    llama_acts *A = m->acts;
    const int T = b->T;
    int64_t N = (int64_t)b->B * T;
    A->packed = false;
    bool one = true;
    for (int64_t i = 0; i < N && b->kv_start && one; i++) one = b->kv_start[i] == 0;
    if (one) return 0;
    int32_t *seq = malloc((size_t)N * 2 * sizeof *seq);
    if (!seq) return zinf_errc(ZINF_ENOMEM, "out of memory for %lld sample starts", (long long)N);
    int nseq = 0, max_len = 0;
    for (int64_t i = 0; i < N; i++) {
        int t = (int)(i % T), k = b->kv_start[i];
        bool same = t > 0 && k == b->kv_start[i - 1];
        if (!same && k != t) {
            free(seq);
            return zinf_err("token %d of row %lld: its sample starts at %d, which is neither its own position "
                            "nor the start of the token before it (samples are contiguous runs of a row)",
                            t, (long long)(i / T), k);
        }
        if (!same) {
            seq[2 * nseq] = (int32_t)i;
            seq[2 * nseq + 1] = 0;
            nseq++;
        }
        int len = ++seq[2 * nseq - 1];
        max_len = len > max_len ? len : max_len;
    }
    int rc = m->be->copy(m->be, A->kvs, b->kv_start, (size_t)N * 4, NULL);
    if (rc == 0) rc = m->be->copy(m->be, A->seq, seq, (size_t)nseq * 2 * 4, NULL);
    free(seq);
    ZINF_TRY(rc);
    A->rows = (zinf_attn_rows){.kv_start = A->kvs, .seq = A->seq, .nseq = nseq, .max_len = max_len};
    A->packed = true;
    return 0;
}

/* positions: none (the row offsets), or the batch's; and the samples packed into the rows */
static int take_batch(zinf_model *m, const zinf_batch *b)
{
    llama_acts *A = m->acts;
    int64_t N = (int64_t)b->B * b->T;
    A->pos_given = false;
    ZINF_TRY(take_samples(m, b));
    bool offsets = true;
    for (int64_t i = 0; i < N && b->pos && offsets; i++) offsets = b->pos[i] == i % b->T;
    if (b->pos && !offsets) {
        for (int64_t i = 0; i < N; i++)
            if (b->pos[i] < 0 || b->pos[i] >= m->c.n_positions)
                return zinf_err("token %lld's position %d is outside 0..%d", (long long)i, b->pos[i],
                                m->c.n_positions - 1);
        ZINF_TRY(m->be->copy(m->be, A->pos, b->pos, (size_t)N * 4, NULL));
        A->pos_given = true;
    }
    return 0;
}

/* the head's weight: the embedding when tied */
static void *head_w(const zinf_model *m, void **bufs)
{
    int L = m->c.n_layer;
    return m->c.tie_embeddings ? TP(bufs, 0, E_WTE) : TP(bufs, L + 1, H_HEAD);
}

static int llama_forward_begin(zinf_model *m, const zinf_batch *b)
{
    if (m->c.sliding_window && m->T > m->c.sliding_window)
        return zinf_err("%s: sliding_window %d is shorter than the sequence length %d: zinf's attention has no window",
                        m->c.model_type, m->c.sliding_window, m->T);
    return take_batch(m, b);
}

/* use i of llama_use_order's forward: the embedding, the blocks, the final norm (the head,
 * model.c's, uses its unit next) */
static void llama_forward_use(zinf_model *m, int i)
{
    zinf_backend *be = m->be;
    llama_acts *A = m->acts;
    dims d = dims_of(m);
    int L = m->c.n_layer;
    void **P = m->params;
    if (i == 0) be->encoder_fwd(be, A->res[0], m->tokens, TP(P, 0, E_WTE), NULL, m->B, m->T, (int)d.C);
    else if (i <= L) block_forward(m, i - 1, false);
    else
        be->rmsnorm_fwd(be, A->lnf, A->lnf_rstd, A->res[L], TP(P, L + 1, H_NORM), d.N, 1, (int)d.C, d.C,
                        (float)m->c.norm_eps);
}

static void block_backward(zinf_model *m, int l)
{
    zinf_backend *be = m->be;
    llama_acts *A = m->acts;
    layer_acts *a = &A->layers[l];
    const zinf_model_cfg *c = &m->c;
    dims d = dims_of(m);
    size_t es = zinf_dtype_size(be->cdt);
    int u = 1 + l;
    void **P = m->params, **G = m->grads;
    float eps = (float)c->norm_eps;
    if (l < m->recompute_blocks) block_forward(m, l, true); /* from the kept input */
    else if (m->lean) { /* what a lean block did not keep: the MLP's input and its product */
        be->rmsnorm_fwd(be, a->ln2, a->ln2_rstd, a->res2, BT(m, P, u, B_LN2), d.N, 1, (int)d.C, d.C, eps);
        be->swiglu_fwd(be, a->h, a->gu, d.N, (int)d.F);
    }
    /* the block's first gradient write of the step (grad_fresh): the products overwrite their
     * weights' and biases' gradients, the norms' are zeroed to be added to */
    const bool first = zinf_grad_first(m, u);
    const int acc = !first;
    static const int norms[] = {B_LN1, B_LN2, B_QN, B_KN};
    for (int i = 0; first && i < 4; i++) zinf_grad_zero_tensor(m, u, blk_t(c, norms[i]));
    /* d_res holds d(res[l+1]); it becomes d(res2), then d(res[l]) by accumulation */
    be->matmul_bwd(be, A->d_h, BT(m, G, u, B_DW), BT(m, G, u, B_DB), A->d_res, a->h, BT(m, P, u, B_DW), d.N, (int)d.F,
                   (int)d.C, acc);
    be->swiglu_bwd(be, A->d_gu, A->d_h, a->gu, d.N, (int)d.F);
    be->matmul_bwd(be, A->d_ln, BT(m, G, u, B_GUW), BT(m, G, u, B_GUB), A->d_gu, a->ln2, BT(m, P, u, B_GUW), d.N,
                   (int)d.C, (int)(2 * d.F), acc);
    be->rmsnorm_bwd(be, A->d_res, BT(m, G, u, B_LN2), A->d_ln, a->res2, BT(m, P, u, B_LN2), a->ln2_rstd, d.N, 1, (int)d.C,
                    d.C);
    be->matmul_bwd(be, A->d_atty, BT(m, G, u, B_OW), BT(m, G, u, B_OB), A->d_res, a->atty, BT(m, P, u, B_OW), d.N,
                   (int)d.A, (int)d.C, acc);
    be->attention_bwd(be, A->d_qkv, A->d_atty, a->qkv, a->atty, a->lse, m->B, m->T, (int)d.NH, (int)d.NKV, (int)d.hs,
                      attn_rows(m));
    be->rope(be, A->d_qkv, d.N, (int)(d.NH + d.NKV), (int)d.hs, d.QKV, positions(m), m->T, A->inv_freq, 1);
    void *dpre = A->d_qkv;
    if (c->qk_norm) { /* through each head's norm; v's gradient passes unchanged */
        dpre = A->d_pre;
        be->memset0(be, dpre, (size_t)d.N * d.QKV * es, NULL);
        int64_t k0 = d.NH * d.hs;
        be->rmsnorm_bwd(be, dpre, BT(m, G, u, B_QN), A->d_qkv, a->pre, BT(m, P, u, B_QN), a->qk_rstd, d.N, (int)d.NH,
                        (int)d.hs, d.QKV);
        be->rmsnorm_bwd(be, (char *)dpre + k0 * es, BT(m, G, u, B_KN), (char *)A->d_qkv + k0 * es,
                        (char *)a->pre + k0 * es, BT(m, P, u, B_KN), a->qk_rstd + d.NH * d.N, d.N, (int)d.NKV,
                        (int)d.hs, d.QKV);
        int64_t v0 = (d.NH + d.NKV) * d.hs;
        be->copy_rows(be, (char *)dpre + v0 * es, d.QKV, (char *)A->d_qkv + v0 * es, d.QKV, d.N, d.NKV * d.hs);
    }
    if (m->lean) /* the attention's input, into the scratch that held the MLP's */
        be->rmsnorm_fwd(be, a->ln1, a->ln1_rstd, A->res[l], BT(m, P, u, B_LN1), d.N, 1, (int)d.C, d.C, eps);
    be->matmul_bwd(be, A->d_ln, BT(m, G, u, B_QKVW), BT(m, G, u, B_QKVB), dpre, a->ln1, BT(m, P, u, B_QKVW), d.N,
                   (int)d.C, (int)d.QKV, acc);
    be->rmsnorm_bwd(be, A->d_res, BT(m, G, u, B_LN1), A->d_ln, A->res[l], BT(m, P, u, B_LN1), a->ln1_rstd, d.N, 1,
                    (int)d.C, d.C);
}

static int llama_head_unit(const zinf_model *m) { return m->c.tie_embeddings ? 0 : m->c.n_layer + 1; }
static void *llama_head_w(const zinf_model *m, void **bufs) { return head_w(m, bufs); }
static void *llama_head_in(const zinf_model *m) { return ((llama_acts *)m->acts)->lnf; }
static void *llama_head_din(const zinf_model *m) { return ((llama_acts *)m->acts)->d_ln; }

static int llama_backward(zinf_model *m, const zinf_unit_hooks *h)
{
    zinf_backend *be = m->be;
    llama_acts *A = m->acts;
    dims d = dims_of(m);
    int L = m->c.n_layer;
    size_t es = zinf_dtype_size(be->cdt);
    void **P = m->params, **G = m->grads;
    /* the head's backward (model.c) left d(lnf) in d_ln */
    ZINF_TRY(zinf_acquire(h, L + 1, 1));
    be->memset0(be, A->d_res, (size_t)d.N * d.C * es, NULL);
    zinf_grad_zero_first(m, L + 1); /* untied, the head wrote it first */
    be->rmsnorm_bwd(be, A->d_res, TP(G, L + 1, H_NORM), A->d_ln, A->res[L], TP(P, L + 1, H_NORM), A->lnf_rstd, d.N, 1,
                    (int)d.C, d.C);
    ZINF_TRY(zinf_release(h, L + 1, 1));
    ZINF_TRY(zinf_grad_ready(h, L + 1));
    ZINF_TRY(zinf_blocks_backward(m, h, block_backward));
    ZINF_TRY(zinf_acquire(h, 0, 1));
    zinf_grad_zero_first(m, 0); /* tied, the head wrote it first */
    be->encoder_bwd(be, TP(G, 0, E_WTE), NULL, A->d_res, m->tokens, m->B, m->T, (int)d.C);
    /* nn.Embedding's padding_idx: the pad token's row gets no gradient */
    if (m->c.pad_token_id >= 0)
        be->memset0(be, (char *)TP(G, 0, E_WTE) + (size_t)m->c.pad_token_id * d.C * es, (size_t)d.C * es, NULL);
    ZINF_TRY(zinf_release(h, 0, 1));
    return zinf_grad_ready(h, 0);
}

/* 6 per parameter outside the embedding (the count the and MFU figures use), and
 * attention's two products of a token with the T before it: 12 L NH hs T */
static double llama_flops_per_token(const zinf_model *m, int T)
{
    double emb = (double)m->c.padded_vocab * m->c.n_embd;
    return 6.0 * ((double)m->num_params - emb) + 12.0 * m->c.n_layer * m->c.n_head * m->c.head_dim * (double)T;
}

/* ---------------------------------------------------------------- Hugging Face ------------- */
static int llama_hf_parts(const zinf_model *m, int u, int t, zinf_hf_part out[ZINF_HF_MAX_PARTS])
{
    const zinf_model_cfg *c = &m->c;
    const zinf_tensor_view *tv = &m->units[u].t[t];
    const int L = c->n_layer;
    memset(out, 0, sizeof(zinf_hf_part) * ZINF_HF_MAX_PARTS);
    if (u == 0 || (u == L + 1 && t == H_HEAD)) {
        snprintf(out[0].name, sizeof out[0].name, "%s", u == 0 ? "model.embed_tokens.weight" : "lm_head.weight");
        out[0].rows = c->vocab_size; /* without the padded rows */
        return 1;
    }
    if (u == L + 1) {
        snprintf(out[0].name, sizeof out[0].name, "model.norm.weight");
        out[0].rows = tv->shape[0];
        return 1;
    }
    int id = 0;
    while (id < B_N && blk_t(c, id) != t) id++;
    const char *p = "model.layers";
    int l = u - 1;
    int64_t q = (int64_t)c->n_head * c->head_dim, kv = (int64_t)c->n_kv_head * c->head_dim;
    const char *w = id == B_QKVW || id == B_GUW || id == B_OW || id == B_DW ? "weight" : "bias";
    if (id == B_QKVW || id == B_QKVB) {
        const char *nm[3] = {"q_proj", "k_proj", "v_proj"};
        int64_t r0[3] = {0, q, q + kv}, n[3] = {q, kv, kv};
        for (int i = 0; i < 3; i++) {
            snprintf(out[i].name, sizeof out[i].name, "%s.%d.self_attn.%s.%s", p, l, nm[i], w);
            out[i].row0 = r0[i], out[i].rows = n[i];
        }
        return 3;
    }
    if (id == B_GUW || id == B_GUB) {
        const char *nm[2] = {"gate_proj", "up_proj"};
        for (int i = 0; i < 2; i++) {
            snprintf(out[i].name, sizeof out[i].name, "%s.%d.mlp.%s.%s", p, l, nm[i], w);
            out[i].row0 = i * c->d_ff, out[i].rows = c->d_ff;
        }
        return 2;
    }
    const char *one = id == B_LN1 ? "input_layernorm.weight" : id == B_LN2 ? "post_attention_layernorm.weight"
                    : id == B_QN ? "self_attn.q_norm.weight" : id == B_KN ? "self_attn.k_norm.weight"
                    : id == B_OW ? "self_attn.o_proj.weight" : id == B_OB ? "self_attn.o_proj.bias"
                    : id == B_DW ? "mlp.down_proj.weight" : "mlp.down_proj.bias";
    snprintf(out[0].name, sizeof out[0].name, "%s.%d.%s", p, l, one);
    out[0].rows = tv->shape[0];
    return 1;
}

/* config.json as transformers 5 writes it, with 4.x's spellings beside (rope_theta, rope_scaling,
 * torch_dtype), so that either version loads it the same */
static char *llama_hf_config(const zinf_model_cfg *c, zinf_dtype dt)
{
    json_t *o = json_object();
    if (!o) return NULL;
    const char *arch = is(c, "qwen2") ? "Qwen2ForCausalLM" : is(c, "qwen3") ? "Qwen3ForCausalLM"
                     : is(c, "mistral") ? "MistralForCausalLM" : "LlamaForCausalLM";
    json_t *a = json_array();
    json_array_append_new(a, json_string(arch));
    json_object_set_new(o, "architectures", a);
    json_object_set_new(o, "model_type", json_string(c->model_type));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_t *id = llama_cfg_json(c);
    json_object_del(id, "padded_vocab");
    json_object_update(o, id);
    json_decref(id);
    json_t *rp = json_object();
    json_object_set_new(rp, "rope_type", json_string(c->rope_type == ZINF_ROPE_LLAMA3 ? "llama3"
                                                     : c->rope_type == ZINF_ROPE_LINEAR ? "linear" : "default"));
    json_object_set_new(rp, "rope_theta", json_real(c->rope_theta));
    json_t *rs = rope_json(c);
    if (json_is_object(rs)) json_object_update(rp, rs);
    json_object_del(rp, "rope_type");
    json_object_set_new(rp, "rope_type", json_string(c->rope_type == ZINF_ROPE_LLAMA3 ? "llama3"
                                                     : c->rope_type == ZINF_ROPE_LINEAR ? "linear" : "default"));
    json_decref(rs);
    json_object_set_new(o, "rope_parameters", rp);
    json_object_set_new(o, "attention_dropout", json_real(0.0));
    json_object_set_new(o, "initializer_range", json_real(c->init_std));
    if (is(c, "qwen2") || is(c, "qwen3")) {
        json_object_set_new(o, "use_sliding_window", json_false());
        json_object_set_new(o, "sliding_window", json_null());
    }
    if (is(c, "mistral")) json_object_set_new(o, "sliding_window", json_null());
    const char *dn = dt == ZINF_BF16 ? "bfloat16" : dt == ZINF_F16 ? "float16" : "float32";
    json_object_set_new(o, "dtype", json_string(dn));
    json_object_set_new(o, "torch_dtype", json_string(dn));
    json_object_set_new(o, "use_cache", json_true());
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(o);
    return s;
}

#define FAMILY(ty, list)                                                                          \
    const zinf_family zinf_family_##ty = {                                                        \
        .model_type = #ty,                                                                        \
        .presets = list,                                                                          \
        .packed_rows = true,                                                                      \
        .positions_key = "max_position_embeddings",                                              \
        .preset = ty##_preset,                                                                    \
        .cfg_from_hf = ty##_cfg_from_hf,                                                          \
        .cfg_json = llama_cfg_json,                                                               \
        .nunits = llama_nunits,                                                                   \
        .layout = llama_layout,                                                                   \
        .use_order = llama_use_order,                                                             \
        .acts_init = llama_acts_init,                                                             \
        .acts_free = llama_acts_free,                                                             \
        .carve = llama_carve,                                                                     \
        .forward_begin = llama_forward_begin,                                                     \
        .forward_use = llama_forward_use,                                                         \
        .backward = llama_backward,                                                               \
        .head_unit = llama_head_unit,                                                             \
        .head_w = llama_head_w,                                                                   \
        .head_in = llama_head_in,                                                                 \
        .head_din = llama_head_din,                                                               \
        .flops_per_token = llama_flops_per_token,                                                 \
        .hf_prefix = "model.",                                                                    \
        .hf_parts = llama_hf_parts,                                                               \
        .hf_config = llama_hf_config,                                                             \
    };
FAMILY(llama, "llama-3.2-1b llama-3.2-3b llama-3.1-8b llama-3.1-70b test-llama")
FAMILY(qwen2, "qwen2.5-0.5b qwen2.5-1.5b qwen2.5-7b qwen2.5-32b qwen2.5-72b")
FAMILY(qwen3, "qwen3-0.6b qwen3-8b qwen3-32b test-qwen3")
FAMILY(mistral, "mistral-7b-v0.3")
