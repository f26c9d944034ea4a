/* Hugging Face GPT-2 interchange: see hf.h. */
#include "hf.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"

/* ---------------------------------------------------------------- names -------------------- */
/* HF's names of a block's tensors, in zinf's order within the unit (model.c, ZINF_T_LN1W..), and
 * which of them are Conv1D weights, stored (in, out) */
static const char *const block_names[ZINF_MAX_UNIT_TENSORS] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
static const bool block_conv1d[ZINF_MAX_UNIT_TENSORS] = {false, false, true,  false, true,  false,
                                                         false, false, true,  false, true,  false};

void zinf_hf_tensor(const zinf_model *m, int u, int t, char *name, size_t cap, int64_t shape[2], bool *transposed)
{
    const zinf_tensor_view *tv = &m->units[u].t[t];
    int L = m->c.n_layer;
    *transposed = false;
    shape[0] = tv->shape[0];
    shape[1] = tv->shape[1];
    if (u == 0) {
        snprintf(name, cap, "transformer.%s.weight", t == ZINF_T_WTE ? "wte" : "wpe");
        if (t == ZINF_T_WTE) shape[0] = m->c.vocab_size; /* without the padded rows */
    } else if (u == L + 1) {
        snprintf(name, cap, "transformer.ln_f.%s", t == ZINF_T_LNFW ? "weight" : "bias");
    } else {
        snprintf(name, cap, "transformer.h.%d.%s", u - 1, block_names[t]);
        if (block_conv1d[t]) {
            *transposed = true;
            shape[0] = tv->shape[1];
            shape[1] = tv->shape[0];
        }
    }
}

char *zinf_hf_config_text(const zinf_model_cfg *c, zinf_dtype dt)
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
    json_object_set_new(o, "layer_norm_epsilon", json_real(ZINF_HF_LN_EPS));
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

/* ---------------------------------------------------------------- config.json -------------- */
static int check_config(const char *dir, const zinf_model_cfg *c)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o) {
        if (access(path, R_OK)) return zinf_errc(-errno, "--init_from %s: %s", path, strerror(errno));
        return zinf_err("%s:%d:%d: malformed JSON: %s", path, je.line, je.column, je.text);
    }
    int rc = 0;
    json_t *mt = json_object_get(o, "model_type");
    if (!json_is_object(o)) rc = zinf_err("%s: not a JSON object", path);
    else if (mt && (!json_is_string(mt) || strcmp(json_string_value(mt), "gpt2")))
        rc = zinf_err("%s: model_type %s: zinf reads gpt2", path, json_is_string(mt) ? json_string_value(mt) : "(not a string)");
    struct { const char *key; int want; } f[] = {{"n_layer", c->n_layer}, {"n_embd", c->n_embd}, {"n_head", c->n_head},
                                                 {"n_positions", c->n_positions}, {"vocab_size", c->vocab_size}};
    for (size_t i = 0; i < sizeof f / sizeof *f && !rc; i++) {
        json_t *v = json_object_get(o, f[i].key);
        if (!v) rc = zinf_err("%s: %s is missing", path, f[i].key);
        else if (!json_is_integer(v)) rc = zinf_err("%s: %s is not an integer", path, f[i].key);
        else if (json_integer_value(v) != f[i].want)
            rc = zinf_err("%s: %s is %lld, this run's model has %d", path, f[i].key, (long long)json_integer_value(v),
                          f[i].want);
    }
    json_decref(o);
    return rc;
}

/* ---------------------------------------------------------------- safetensors -------------- */
/* The file: 8 bytes, the header's length n (little-endian); n bytes of JSON {name: {"dtype",
 * "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}; then the data, the offsets
 * counted from its start. Mapped read-only: a rank touches only the pages of its parts. */
typedef struct st_file {
    char path[4200];
    unsigned char *map;
    size_t size;
    const unsigned char *data;
    uint64_t data_len;
    json_t *hdr;
} st_file;

typedef struct st_tensor {
    const unsigned char *p; /* first byte */
    int es;                 /* element bytes: 4 (F32), 2 (BF16, F16) */
    zinf_dtype dt;
} st_tensor;

static void st_close(st_file *s)
{
    if (s->map) munmap(s->map, s->size);
    if (s->hdr) json_decref(s->hdr);
    s->map = NULL;
    s->hdr = NULL;
}

static uint64_t get_le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

static int st_open(st_file *s, const char *dir)
{
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s/model.safetensors", dir);
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        char idx[4300];
        snprintf(idx, sizeof idx, "%s.index.json", s->path);
        if (e == ENOENT && !access(idx, F_OK))
            return zinf_errc(ZINF_ENOTSUP, "%s: missing; a sharded checkpoint (%s) is not supported: merge it into "
                                           "one file first", s->path, idx);
        return zinf_errc(-e, "--init_from %s: %s", s->path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st)) {
        int e = errno;
        close(fd);
        return zinf_errc(-e, "%s: cannot stat: %s", s->path, strerror(e));
    }
    s->size = (size_t)st.st_size;
    if (s->size < 8) {
        close(fd);
        return zinf_err("%s: %zu bytes, shorter than the 8-byte header length: not a safetensors file", s->path, s->size);
    }
    void *map = mmap(NULL, s->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file */
    if (map == MAP_FAILED) return zinf_errc(-e, "%s: mmap failed: %s", s->path, strerror(e));
    s->map = map;
    uint64_t n = get_le64(s->map);
    if (n > s->size - 8 || n > (100u << 20)) {
        st_close(s);
        return zinf_err("%s: header length %llu does not fit the file's %zu bytes: not a safetensors file "
                        "(or truncated)", s->path, (unsigned long long)n, s->size);
    }
    json_error_t je;
    s->hdr = json_loadb((const char *)s->map + 8, (size_t)n, 0, &je);
    if (!s->hdr || !json_is_object(s->hdr)) {
        st_close(s);
        return zinf_err("%s: the header is not a JSON object (%s)", s->path, s->hdr ? "another value" : je.text);
    }
    s->data = s->map + 8 + n;
    s->data_len = s->size - 8 - n;
    return 0;
}

/* Find `name` (or the name without "transformer.", as GPT2Model saves it), check its dtype, shape
 * and extent. */
static int st_find(const st_file *s, const char *name, const int64_t shape[2], st_tensor *out)
{
    json_t *e = json_object_get(s->hdr, name);
    if (!e && !strncmp(name, "transformer.", 12)) e = json_object_get(s->hdr, name + 12);
    if (!e) return zinf_err("%s: tensor %s is missing", s->path, name);
    json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"), *off = json_object_get(e, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) || json_array_size(off) != 2)
        return zinf_err("%s: tensor %s: the header entry lacks dtype, shape or data_offsets", s->path, name);
    const char *d = json_string_value(dt);
    if (!strcmp(d, "F32")) out->dt = ZINF_F32, out->es = 4;
    else if (!strcmp(d, "BF16")) out->dt = ZINF_BF16, out->es = 2;
    else if (!strcmp(d, "F16")) out->dt = ZINF_F16, out->es = 2;
    else return zinf_err("%s: tensor %s has dtype %s; zinf reads F32, BF16 and F16", s->path, name, d);
    size_t nd = shape[1] ? 2 : 1;
    bool same = json_array_size(sh) == nd;
    for (size_t i = 0; i < nd && same; i++) {
        json_t *v = json_array_get(sh, i);
        same = json_is_integer(v) && json_integer_value(v) == shape[i];
    }
    if (!same) {
        char *got = json_dumps(sh, JSON_COMPACT);
        int rc = nd == 2 ? zinf_err("%s: tensor %s has shape %s, this model needs [%lld,%lld]", s->path, name,
                                    got ? got : "?", (long long)shape[0], (long long)shape[1])
                         : zinf_err("%s: tensor %s has shape %s, this model needs [%lld]", s->path, name,
                                    got ? got : "?", (long long)shape[0]);
        free(got);
        return rc;
    }
    json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    int64_t numel = shape[0] * (shape[1] ? shape[1] : 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) - json_integer_value(b) != numel * out->es ||
        (uint64_t)json_integer_value(en) > s->data_len)
        return zinf_err("%s: tensor %s: data_offsets do not hold %lld %s values inside the file (truncated?)",
                        s->path, name, (long long)numel, d);
    out->p = s->data + json_integer_value(b);
    return 0;
}

/* element i of a tensor (little-endian on disk; memcpy: the data need not be aligned) */
static inline float st_at(const st_tensor *t, int64_t i)
{
    const unsigned char *q = t->p + i * t->es;
    if (t->es == 4) {
        uint32_t u = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    uint16_t h = (uint16_t)(q[0] | q[1] << 8);
    return t->dt == ZINF_BF16 ? zinf_bf16_to_f32(h) : zinf_f16_to_f32(h);
}

/* Elements [a, b) of zinf tensor tv (counted from the tensor's start) into dst[0..b-a), from the
 * HF tensor src. A transposed tensor is read in bands of 16 zinf rows: each HF row then gives 16
 * neighbouring values, not one per page. Rows of wte beyond the HF tensor's (the padding) are 0. */
static void fill(const zinf_tensor_view *tv, const st_tensor *src, bool transposed, int64_t hf_rows, int64_t a,
                 int64_t b, float *dst)
{
    int64_t C = tv->shape[1] ? tv->shape[1] : 1, R = tv->shape[0];
    if (!transposed) {
        int64_t end = hf_rows * C; /* elements the HF tensor has */
        for (int64_t e = a; e < b; e++) dst[e - a] = e < end ? st_at(src, e) : 0.0f;
        return;
    }
    for (int64_t r0 = a / C; r0 <= (b - 1) / C; r0 += 16) {
        int64_t r1 = r0 + 16 < R ? r0 + 16 : R;
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = r0; r < r1; r++) {
                int64_t e = r * C + c;
                if (e >= a && e < b) dst[e - a] = st_at(src, c * R + r);
            }
    }
}

/* ---------------------------------------------------------------- import ------------------- */
int zinf_hf_import(const char *dir, zinf_comm *comm, const zinf_model *m, zinf_zero *z)
{
    st_file sf = {0};
    int rc = check_config(dir, &m->c);
    if (!rc) rc = st_open(&sf, dir);
    /* every tensor is found and checked before any state changes */
    int ntens = 0;
    for (int u = 0; u < m->nunits; u++) ntens += m->units[u].ntensors;
    st_tensor *src = calloc((size_t)ntens, sizeof *src);
    bool *tr = calloc((size_t)ntens, sizeof *tr);
    int64_t *rows = calloc((size_t)ntens, sizeof *rows);
    if (!rc && (!src || !tr || !rows)) rc = zinf_errc(ZINF_ENOMEM, "out of host memory");
    int64_t maxp = 1;
    for (int u = 0, i = 0; u < m->nunits && !rc; u++) {
        int64_t lo, len;
        zinf_zero_ckpt_range(z, u, false, &lo, &len);
        maxp = len > maxp ? len : maxp;
        for (int t = 0; t < m->units[u].ntensors && !rc; t++, i++) {
            char name[128];
            int64_t shape[2];
            zinf_hf_tensor(m, u, t, name, sizeof name, shape, &tr[i]);
            rows[i] = shape[0];
            rc = st_find(&sf, name, shape, &src[i]);
        }
    }
    float *buf = rc ? NULL : malloc((size_t)maxp * 4);
    if (!rc && !buf) rc = zinf_errc(ZINF_ENOMEM, "out of host memory for --init_from");
    rc = zinf_comm_agree(comm, rc);
    /* each rank its part of each unit: the masters from the file, Adam's moments zero */
    for (int u = 0, i = 0; u < m->nunits && !rc; u++) {
        const zinf_unit *un = &m->units[u];
        int64_t lo, len;
        zinf_zero_ckpt_range(z, u, false, &lo, &len);
        memset(buf, 0, (size_t)maxp * 4);
        for (int t = 0; t < un->ntensors; t++, i++) {
            const zinf_tensor_view *tv = &un->t[t];
            int64_t a = lo > tv->offset ? lo : tv->offset;
            int64_t b = lo + len < tv->offset + tv->numel ? lo + len : tv->offset + tv->numel;
            if (b > a) fill(tv, &src[i], tr[i], rows[i], a - tv->offset, b - tv->offset, buf + (a - lo));
        }
        rc = zinf_zero_ckpt_set(z, u, ZINF_CKPT_MASTER, buf);
        memset(buf, 0, (size_t)maxp * 4);
        if (!rc) rc = zinf_zero_ckpt_set(z, u, ZINF_CKPT_ADAM_M, buf);
        if (!rc) rc = zinf_zero_ckpt_set(z, u, ZINF_CKPT_ADAM_V, buf);
        if (rc) rc = zinf_err_prefix(rc, "--init_from %s: unit %s", dir, un->name);
        rc = zinf_comm_agree(comm, rc); /* keep the ranks in step (NVMe states move here) */
    }
    free(buf);
    free(src);
    free(tr);
    free(rows);
    st_close(&sf);
    /* each agree above printed a failure once; only the last step is still to agree on */
    if (!rc) rc = zinf_comm_agree(comm, zinf_zero_ckpt_params_from_master(z));
    return rc;
}
