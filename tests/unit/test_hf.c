/* zinf_hf_import (`zinf train --init_from`): an engine saved to a checkpoint and exported to
 * safetensors by `zinf ckpt export`, imported into a second engine initialised from another seed,
 * holds the first engine's parameters bit for bit (fp32), or their bf16/fp16 roundings, with
 * Adam's moments zero and the padded vocabulary rows zero; the same from the export in shards
 * (--max_shard_size), and from a directory where each c_attn weight is three HF tensors q, k, v
 * (a family whose hf_parts fuses them, as Llama's q|k|v), and written so by zinf_hf_write; names
 * without the "transformer." prefix are read too; a config field, a missing tensor, a shape or a dtype that do not fit are
 * refused naming the field or the tensor. (tests/mpi/hf_check.py checks the export itself against
 * transformers.) Runs on any world size: `mpirun -np 2 test_hf 3` splits every unit between two
 * ranks. Argument: the ZeRO stage (default 3). */
#define _GNU_SOURCE
#include <ftw.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "ckpt.h"
#include "ckpt_tool.h"
#include "comm.h"
#include "config.h"
#include "err.h"
#include "family.h"
#include "hf.h"
#include "kernels.h"
#include "model.h"
#include "safetensors.h"
#include "zero.h"

static zinf_comm comm;
static zinf_backend be;
static zinf_model model;
static zinf_config cfg;
static char dir[256];

static zinf_zero *engine(uint64_t seed)
{
    zinf_zero *z = NULL;
    if (zinf_zero_init(&z, &model, &cfg, &comm, &be, seed)) {
        fprintf(stderr, "zinf_zero_init: %s\n", zinf_errmsg());
        exit(1);
    }
    return z;
}

/* every unit's full parameters (gathered), concatenated */
static float *params_of(zinf_zero *z)
{
    float *p = malloc((size_t)model.num_params * 4), *q = p;
    for (int u = 0; u < model.nunits; u++) {
        if (zinf_zero_get_params(z, u, q)) {
            fprintf(stderr, "zinf_zero_get_params: %s\n", zinf_errmsg());
            exit(1);
        }
        q += model.units[u].numel;
    }
    return p;
}

/* how many of b's parameters differ from pa, bit for bit */
static int64_t differ(const float *pa, zinf_zero *b)
{
    float *pb = params_of(b);
    int64_t d = 0;
    for (int64_t i = 0; i < model.num_params; i++) d += memcmp(&pa[i], &pb[i], 4) != 0;
    free(pb);
    return d;
}

/* the largest of this rank's parts of Adam's m and v, in absolute value */
static float max_moment(zinf_zero *z)
{
    float mx = 0, *buf = malloc((size_t)model.num_params * 4);
    for (int u = 0; u < model.nunits; u++)
        for (int k = ZINF_CKPT_ADAM_M; k <= ZINF_CKPT_ADAM_V; k++) {
            int64_t lo, len;
            zinf_zero_ckpt_range(z, u, false, &lo, &len);
            zinf_zero_ckpt_get(z, u, (zinf_ckpt_state)k, buf);
            for (int64_t i = 0; i < len; i++) mx = fabsf(buf[i]) > mx ? fabsf(buf[i]) : mx;
        }
    free(buf);
    return mx;
}

/* make Adam's moments non-zero, so the import has something to clear */
static void dirty_moments(zinf_zero *z)
{
    float *buf = malloc((size_t)model.num_params * 4);
    for (int64_t i = 0; i < model.num_params; i++) buf[i] = 0.5f;
    for (int u = 0; u < model.nunits; u++) {
        zinf_zero_ckpt_set(z, u, ZINF_CKPT_ADAM_M, buf);
        zinf_zero_ckpt_set(z, u, ZINF_CKPT_ADAM_V, buf);
    }
    free(buf);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(p);
}

static void put_file(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(data, 1, n, fp) != n || fclose(fp)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* a safetensors file from a header object and data bytes (the header padded to 8 bytes) */
static void put_safetensors(const char *path, json_t *hdr, const void *data, size_t n)
{
    char *h = json_dumps(hdr, JSON_COMPACT);
    size_t hl = strlen(h), pl = (hl + 7) / 8 * 8;
    unsigned char *b = calloc(8 + pl + n + 1, 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)pl >> (8 * i));
    memcpy(b + 8, h, hl);
    memset(b + 8 + hl, ' ', pl - hl);
    if (n) memcpy(b + 8 + pl, data, n);
    put_file(path, b, 8 + pl + n);
    free(b);
    free(h);
}

static char *slurp(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc(*n + 1);
    if (fread(b, 1, *n, fp) != *n) *n = 0;
    fclose(fp);
    return b;
}

/* dir/NAME/ with config.json from the model (optionally one field changed) */
static void make_dir(const char *name, const char *field, int value, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", dir, name);
    if (comm.rank) {
        MPI_Barrier(comm.world);
        return;
    }
    mkdir(out, 0755);
    char *txt = zinf_hf_config_text(&model.c, ZINF_F32);
    json_t *o = json_loads(txt, 0, NULL);
    if (field) json_object_set_new(o, field, json_integer(value));
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", out);
    json_dump_file(o, p, 0);
    json_decref(o);
    free(txt);
    MPI_Barrier(comm.world);
}

static int import_into(zinf_zero *z, const char *d)
{
    zinf_err_clear();
    return zinf_hf_import(d, &comm, &model, z, NULL);
}

static bool msg_has(const char *s) { return strstr(zinf_errmsg(), s) != NULL; }

/* zinf_hf_write's source from memory: every unit's parameters concatenated (params_of); counts
 * the elements asked for per tensor, which must be the tensor's, each once */
typedef struct mem_src {
    const float *p;
    int64_t seen, bad;
} mem_src;
static int mem_begin(void *ctx, int u, int t)
{
    (void)u, (void)t;
    ((mem_src *)ctx)->seen = 0;
    return 0;
}
static int mem_block(void *ctx, int u, int t, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float *buf)
{
    mem_src *s = ctx;
    const zinf_tensor_view *tv = &model.units[u].t[t];
    int64_t base = 0, C = tv->shape[1] ? tv->shape[1] : 1;
    for (int v = 0; v < u; v++) base += model.units[v].numel;
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++) buf[r * nc + c] = s->p[base + tv->offset + (r0 + r) * C + c0 + c];
    s->seen += nr * nc;
    return 0;
}
static int mem_end(void *ctx, int u, int t)
{
    mem_src *s = ctx;
    s->bad += s->seen != model.units[u].t[t].numel;
    return 0;
}

/* d imported into b (its moments made non-zero first) gives pa bit for bit, moments zero */
static void import_same(zinf_zero *b, const char *d, const float *pa, const char *what)
{
    dirty_moments(b);
    CHECK(import_into(b, d) == 0, "%s: %s", what, zinf_errmsg());
    int64_t diff = differ(pa, b);
    CHECK(diff == 0, "%s: %lld of %lld parameters differ from the exported engine's", what, (long long)diff,
          (long long)model.num_params);
    CHECK(max_moment(b) == 0.0f, "%s: Adam's moments are not zero", what);
}

/* ---- a family whose qkv weight HF stores as three tensors, q, k and v (as Llama's), each
 * transposed like GPT-2's c_attn: the import assembles a fused tensor from its parts ---- */
static zinf_family fused;
static const zinf_family *gpt2;
static int fused_parts(const zinf_model *m, int u, int t, zinf_hf_part out[ZINF_HF_MAX_PARTS])
{
    int n = gpt2->hf_parts(m, u, t, out);
    const zinf_tensor_view *tv = &m->units[u].t[t];
    size_t k = strlen(tv->name);
    if (k < 15 || strcmp(tv->name + k - 15, "attn.qkv.weight")) return n;
    char base[128];
    snprintf(base, sizeof base, "%s", out[0].name);
    for (int j = 0; j < 3; j++) {
        snprintf(out[j].name, sizeof out[j].name, "%.100s.%c", base, "qkv"[j]);
        out[j].row0 = j * tv->shape[1], out[j].rows = tv->shape[1], out[j].transposed = true;
    }
    return 3;
}

/* the producer of the fused directory: every tensor of src as it is, but the parts q, k, v of
 * each c_attn weight (C, 3C): part j is its columns [jC, (j+1)C) */
typedef struct fuse_src {
    const zinf_st_file *f;
    const zinf_st_spec *spec;
} fuse_src;
static int fuse_produce(void *ctx, int i, zinf_st_sink *s)
{
    const fuse_src *fs = ctx;
    const zinf_st_spec *t = &fs->spec[i];
    size_t n = strlen(t->name);
    bool part = n > 2 && t->name[n - 2] == '.';
    char src[128];
    snprintf(src, sizeof src, "%.*s", (int)(part ? n - 2 : n), t->name);
    const zinf_st_tensor *x = zinf_st_find(fs->f, src);
    if (!x) return zinf_err("%s: no %s", zinf_st_path(fs->f), src);
    float *v = malloc((size_t)x->numel * 4);
    int rc = zinf_st_read(fs->f, x, 0, x->numel, v);
    if (!part && !rc) rc = zinf_st_sink_f32(s, v, x->numel);
    int64_t C = x->shape[0], j = strchr("qkv", t->name[n - 1]) - "qkv";
    for (int64_t c = 0; part && c < C && !rc; c++) rc = zinf_st_sink_f32(s, v + c * 3 * C + j * C, C);
    free(v);
    return rc;
}


int main(int argc, char **argv)
{
    if (zinf_comm_init(&comm, &argc, &argv)) {
        fprintf(stderr, "%s\n", zinf_errmsg());
        return 1;
    }
    int stage = argc > 1 ? atoi(argv[1]) : 3, W = comm.size;
    if (comm.rank == 0) {
        snprintf(dir, sizeof dir, "%s/zinf-test-hf.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(dir)) return 1;
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, comm.world);

    char js[256];
    snprintf(js, sizeof js,
             "{\"train_batch_size\": %d, \"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": "
             "\"AdamW\", \"params\": {\"lr\": 0.001}}, \"zero_optimization\": {\"stage\": %d}}", W, stage);
    zinf_flags fl;
    zinf_flags_defaults(&fl);
    zinf_model_cfg mc;
    if (zinf_config_parse(&cfg, js, strlen(js), "test", &fl, W, NULL) || zinf_config_finalize_steps(&cfg, 10, &fl, NULL) ||
        zinf_backend_cpu_init(&be) || zinf_model_cfg_load(&mc, "test-tiny") || zinf_model_init(&model, &mc, &be)) {
        fprintf(stderr, "setup: %s\n", zinf_errmsg());
        return 1;
    }
    /* test-tiny has vocab_size 256 = padded_vocab: pad it so the padded rows are tested */
    mc.vocab_size = 200;
    mc.padded_vocab = 256;
    zinf_model_free(&model);
    zinf_model_init(&model, &mc, &be);

    /* engine A: saved, then exported by rank 0 as the ckpt tool does */
    zinf_zero *a = engine(11);
    zinf_ckpt_meta meta = {.step = 1, .opt_steps = 1, .seed = 11, .train_batch_size = W, .max_length = 16, .ls = {.cur_scale = 1}};
    CHECK(zinf_ckpt_save(dir, &comm, &model, a, "{}", &meta, 0) == 0, "save: %s", zinf_errmsg());
    float *pa = params_of(a);
    char ck[512], d32[512], d16[512], dbf[512], dsh[512];
    snprintf(ck, sizeof ck, "%s/checkpoint-1.h5", dir);
    snprintf(d32, sizeof d32, "%s/fp32", dir);
    snprintf(dbf, sizeof dbf, "%s/bf16", dir);
    snprintf(d16, sizeof d16, "%s/fp16", dir);
    snprintf(dsh, sizeof dsh, "%s/sharded", dir);
    int rc = 0;
    if (comm.rank == 0) {
        FILE *dn = fopen("/dev/null", "w");
        zinf_export_opts x32 = {ZINF_EXPORT_HF, ZINF_F32, 0}, xbf = {ZINF_EXPORT_HF, ZINF_BF16, 0},
                         x16 = {ZINF_EXPORT_HF, ZINF_F16, 0};
        /* shards of at most 20000 bytes: wte (25600 bytes) alone, the blocks' tensors several per shard */
        zinf_export_opts xsh = {ZINF_EXPORT_HF, ZINF_F32, 20000};
        rc = zinf_ckpt_export(ck, d32, &x32, dn, 0) || zinf_ckpt_export(ck, dbf, &xbf, dn, 0) ||
             zinf_ckpt_export(ck, d16, &x16, dn, 0) || zinf_ckpt_export(ck, dsh, &xsh, dn, 0);
        fclose(dn);
        CHECK(rc == 0, "export: %s", zinf_errmsg());
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, comm.world);
    if (rc) return check_done("test_hf");

    /* engine B from another seed, its moments made non-zero: after the import it is A */
    zinf_zero *b = engine(12);
    dirty_moments(b);
    CHECK(import_into(b, d32) == 0, "import fp32: %s", zinf_errmsg());
    float *pb = params_of(b);
    int64_t diff = 0;
    for (int64_t i = 0; i < model.num_params; i++) diff += memcmp(&pa[i], &pb[i], 4) != 0;
    CHECK(diff == 0, "fp32 import: %lld of %lld parameters differ from the exported engine's", (long long)diff,
          (long long)model.num_params);
    CHECK(max_moment(b) == 0.0f, "Adam moments after the import: max |m|,|v| = %g", max_moment(b));
    int64_t C = model.c.n_embd, pad_nonzero = 0;
    for (int64_t i = (int64_t)model.c.vocab_size * C; i < (int64_t)model.c.padded_vocab * C; i++) pad_nonzero += pb[i] != 0;
    CHECK(pad_nonzero == 0, "%lld padded vocabulary values are not zero", (long long)pad_nonzero);
    free(pb);

    /* the sharded export: the same parameters, each rank reading its ranges across the shards */
    char p0[600];
    snprintf(p0, sizeof p0, "%s/model.safetensors.index.json", dsh);
    CHECK(access(p0, F_OK) == 0, "the export with --max_shard_size 20000 wrote no %s", p0);
    import_same(b, dsh, pa, "import sharded");

    /* bf16 and fp16 files: the parameters are the roundings of A's */
    for (int k = 0; k < 2; k++) {
        dirty_moments(b);
        CHECK(import_into(b, k ? d16 : dbf) == 0, "import %s: %s", k ? "fp16" : "bf16", zinf_errmsg());
        pb = params_of(b);
        diff = 0;
        for (int64_t i = 0; i < model.num_params; i++) {
            float want = k ? zinf_f16_to_f32(zinf_f32_to_f16(pa[i])) : zinf_bf16_to_f32(zinf_f32_to_bf16(pa[i]));
            diff += want != pb[i];
        }
        CHECK(diff == 0, "%s import: %lld parameters are not the roundings of the exported ones", k ? "fp16" : "bf16",
              (long long)diff);
        CHECK(max_moment(b) == 0.0f, "Adam moments after the %s import are not zero", k ? "fp16" : "bf16");
        free(pb);
    }

    /* names as GPT2Model saves them (no "transformer." prefix) */
    char dnp[512], p[600];
    make_dir("noprefix", NULL, 0, dnp, sizeof dnp);
    if (comm.rank == 0) {
        size_t n = 0;
        snprintf(p, sizeof p, "%s/model.safetensors", d32);
        char *f = slurp(p, &n);
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | (unsigned char)f[i];
        json_t *h = json_loadb(f + 8, hl, 0, NULL), *h2 = json_object(), *v;
        const char *key;
        json_object_foreach(h, key, v) json_object_set(h2, strncmp(key, "transformer.", 12) ? key : key + 12, v);
        snprintf(p, sizeof p, "%s/model.safetensors", dnp);
        put_safetensors(p, h2, f + 8 + hl, n - 8 - hl);
        json_decref(h);
        json_decref(h2);
        free(f);
    }
    MPI_Barrier(comm.world);
    import_same(b, dnp, pa, "import without the prefix");

    /* a fused tensor from its parts: c_attn as three HF tensors q, k, v in 30000-byte shards */
    char dfu[512];
    make_dir("fused", NULL, 0, dfu, sizeof dfu);
    if (comm.rank == 0) {
        zinf_st_file *src = NULL;
        snprintf(p, sizeof p, "%s/model.safetensors", d32);
        rc = zinf_st_open(&src, p);
        zinf_st_spec spec[64];
        int n = 0;
        for (int i = 0; !rc && i < zinf_st_count(src); i++) {
            const zinf_st_tensor *x = zinf_st_at(src, i);
            bool qkv = strstr(x->name, "c_attn.weight") != NULL;
            for (int j = 0; j < (qkv ? 3 : 1); j++, n++) {
                snprintf(spec[n].name, sizeof spec[n].name, qkv ? "%s.%c" : "%s", x->name, "qkv"[j]);
                spec[n].dt = ZINF_F32, spec[n].ndim = x->ndim;
                spec[n].shape[0] = x->shape[0], spec[n].shape[1] = qkv ? x->shape[0] : x->shape[1];
            }
        }
        fuse_src fs = {src, spec};
        if (!rc) rc = zinf_st_write_dir(dfu, spec, n, 30000, NULL, fuse_produce, &fs, NULL);
        CHECK(rc == 0, "the fused directory: %s", zinf_errmsg());
        zinf_st_close(src);
    }
    MPI_Barrier(comm.world);
    gpt2 = model.f;
    fused = *gpt2;
    fused.hf_parts = fused_parts;
    model.f = &fused;
    import_same(b, dfu, pa, "import fused");
    /* and out: zinf_hf_write with this family writes q, k and v (in blocks of 100 elements, so
     * tensors come in many), which the import reads back to the same bits */
    char dfo[512];
    make_dir("fused_out", NULL, 0, dfo, sizeof dfo);
    if (comm.rank == 0) {
        mem_src ms = {.p = pa};
        zinf_hf_source src = {&ms, mem_begin, mem_block, mem_end};
        zinf_st_written w = {0};
        rc = zinf_hf_write(dfo, &model, ZINF_F32, 30000, NULL, 100, &src, &w);
        CHECK(rc == 0 && w.shards > 1 && ms.bad == 0, "zinf_hf_write with q, k, v: %d shards, %lld tensors not read once: %s",
              w.shards, (long long)ms.bad, rc ? zinf_errmsg() : "");
        zinf_st_dir *sd = NULL;
        const zinf_st_file *f;
        const zinf_st_tensor *x = zinf_st_dir_open(&sd, dfo) ? NULL : zinf_st_dir_find(sd, "transformer.h.1.attn.c_attn.weight.k", &f);
        int64_t C = model.c.n_embd;
        CHECK(x && x->ndim == 2 && x->shape[0] == C && x->shape[1] == C && !zinf_st_dir_find(sd, "transformer.h.1.attn.c_attn.weight", &f),
              "the written parts: k is not [%lld,%lld], or c_attn is there whole", (long long)C, (long long)C);
        zinf_st_dir_close(sd);
    }
    MPI_Barrier(comm.world);
    import_same(b, dfo, pa, "import the written parts");
    /* a part missing: named with the shard the index puts it in */
    CHECK(import_into(b, d32) < 0 && msg_has("fp32/model.safetensors: tensor transformer.h.0.attn.c_attn.weight.q is missing"),
          "fused from an unfused file: '%s'", zinf_errmsg());
    model.f = gpt2;

    /* refusals, each naming the field or the tensor */
    char bad[512];
    make_dir("layers", "n_layer", model.c.n_layer + 1, bad, sizeof bad);
    CHECK(import_into(b, bad) < 0 && msg_has("config.json: n_layer is 3, this run's model has 2"), "n_layer: '%s'",
          zinf_errmsg());
    make_dir("vocab", "vocab_size", model.c.padded_vocab, bad, sizeof bad);
    CHECK(import_into(b, bad) < 0 && msg_has("vocab_size is 256, this run's model has 200"), "vocab: '%s'", zinf_errmsg());
    make_dir("missing", NULL, 0, bad, sizeof bad);
    float wte[200 * 32] = {0};
    if (comm.rank == 0) {
        json_t *h = json_pack("{s:{s:s, s:[i,i], s:[i,i]}}", "transformer.wte.weight", "dtype", "F32", "shape", 200, 32,
                              "data_offsets", 0, (int)sizeof wte);
        snprintf(p, sizeof p, "%s/model.safetensors", bad);
        put_safetensors(p, h, wte, sizeof wte);
        json_decref(h);
    }
    MPI_Barrier(comm.world);
    CHECK(import_into(b, bad) < 0 && msg_has("model.safetensors: tensor transformer.wpe.weight is missing"),
          "missing tensor: '%s'", zinf_errmsg());
    make_dir("shape", NULL, 0, bad, sizeof bad);
    if (comm.rank == 0) {
        json_t *h = json_pack("{s:{s:s, s:[i,i], s:[i,i]}}", "transformer.wte.weight", "dtype", "F32", "shape", 32, 200,
                              "data_offsets", 0, (int)sizeof wte);
        snprintf(p, sizeof p, "%s/model.safetensors", bad);
        put_safetensors(p, h, wte, sizeof wte);
        json_decref(h);
    }
    MPI_Barrier(comm.world);
    CHECK(import_into(b, bad) < 0 && msg_has("tensor transformer.wte.weight has shape [32,200], this model needs [200,32]"),
          "shape: '%s'", zinf_errmsg());
    make_dir("dtype", NULL, 0, bad, sizeof bad);
    if (comm.rank == 0) {
        json_t *h = json_pack("{s:{s:s, s:[i,i], s:[i,i]}}", "transformer.wte.weight", "dtype", "I32", "shape", 200, 32,
                              "data_offsets", 0, (int)sizeof wte);
        snprintf(p, sizeof p, "%s/model.safetensors", bad);
        put_safetensors(p, h, wte, sizeof wte);
        json_decref(h);
    }
    MPI_Barrier(comm.world);
    CHECK(import_into(b, bad) < 0 && msg_has("transformer.wte.weight has dtype I32"), "dtype: '%s'", zinf_errmsg());
    make_dir("short", NULL, 0, bad, sizeof bad);
    if (comm.rank == 0) { /* the data cut short: offsets past the end */
        json_t *h = json_pack("{s:{s:s, s:[i,i], s:[i,i]}}", "transformer.wte.weight", "dtype", "F32", "shape", 200, 32,
                              "data_offsets", 0, (int)sizeof wte);
        snprintf(p, sizeof p, "%s/model.safetensors", bad);
        put_safetensors(p, h, wte, sizeof wte / 2);
        json_decref(h);
    }
    MPI_Barrier(comm.world);
    CHECK(import_into(b, bad) < 0 && msg_has("model.safetensors: tensor transformer.wte.weight: data_offsets [0,25600] end past the file's 12800 bytes"), "truncated: '%s'",
          zinf_errmsg());
    snprintf(bad, sizeof bad, "%s/none", dir);
    CHECK(import_into(b, bad) < 0 && msg_has("config.json: No such file"), "no directory: '%s'", zinf_errmsg());
    /* a refused import leaves the engine as it was */
    diff = differ(pa, b);
    CHECK(diff == 0, "the refused imports changed %lld parameters", (long long)diff);

    free(pa);
    zinf_zero_free(a);
    zinf_zero_free(b);
    MPI_Barrier(comm.world);
    if (comm.rank == 0) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    int fails = check_failures_;
    MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, comm.world);
    check_failures_ = fails;
    int ret = comm.rank == 0 ? check_done("test_hf") : (fails ? 1 : 0);
    zinf_comm_finalize(&comm);
    return ret;
}
