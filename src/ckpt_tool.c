/* zinf ckpt info|verify|export: see ckpt_tool.h and man/zinf-ckpt.1. */
#include "h5attr.h"
#include "ckpt_tool.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "err.h"
#include "file.h"
#include "hf.h"
#include "model.h"
#include "safetensors.h"
#include "zinf-build.h" /* PACKAGE_VERSION */

/* Elements read per block: 4 MiB of fp32, whatever the model's size. A block is whole rows of a
 * tensor (or whole columns, for the transposes of the HF export), at least one.
 * ZINF_CKPT_BLOCK=N sets N elements instead: tests make blocks smaller than a tensor with it. */
#define BLOCK_ELEMS ((int64_t)1 << 20)
static int64_t block_elems(void)
{
    const char *e = getenv("ZINF_CKPT_BLOCK");
    long long v;
    return e && sscanf(e, "%lld", &v) == 1 && v > 0 ? (int64_t)v : BLOCK_ELEMS;
}

#define state_group zinf_ckpt_group

/* ---------------------------------------------------------------- the open checkpoint ------ */
typedef struct ck {
    zinf_ckf k; /* the open file, as zinf_ckf_open left it */
    char path[4096];
    hid_t f;
    zinf_model m; /* the unit layout (no memory, no backend) from the shape attributes */
    int64_t format, step, opt_steps, train_batch_size, saved_world_size;
    int64_t ls_hysteresis, ls_iter, ls_last_overflow, max_length, consumed_samples;
    uint64_t seed, run_id;
    double loss_scale;
    char version[64];
} ck;

static void ck_close(ck *c)
{
    if (c->f >= 0) H5Fclose(c->f);
    c->f = -1;
    zinf_model_free(&c->m);
}

int zinf_ckpt_open_spec(const char *spec, zinf_ckf *k)
{
    memset(k, 0, sizeof *k);
    k->f = -1;
    struct stat st;
    if (stat(spec, &st)) return zinf_errc(-errno, "%s: %s", spec, strerror(errno));
    /* zinf_ckpt_resolve reads "auto" as --resume's keyword: a path of that name is ./auto */
    char spec2[4096], path[4096];
    snprintf(spec2, sizeof spec2, "%s%s", strcmp(spec, "auto") ? "" : "./", spec);
    int rr = zinf_ckpt_resolve(spec2, NULL, path, sizeof path);
    if (rr < 0 || !path[0]) {
        if (S_ISDIR(st.st_mode))
            return zinf_errc(ZINF_EINVAL, "%s: no checkpoint in this directory (no latest file, no checkpoint-STEP.h5)", spec);
        return zinf_errc(ZINF_EIO, "%s: cannot read it: %s", spec, rr < 0 && rr > -1000 ? strerror(-rr) : "not a file");
    }
    return zinf_ckf_open(k, path);
}

/* Resolve spec (a file, or a directory and its `latest`), open the file and read its scalars and
 * model shape: zinf_ckf_open, the reader the training run's load uses too. */
static int ck_open(ck *c, const char *spec)
{
    memset(c, 0, sizeof *c);
    int rc = zinf_ckpt_open_spec(spec, &c->k);
    snprintf(c->path, sizeof c->path, "%s", c->k.path);
    c->f = c->k.f;
    if (rc) return rc;
    const zinf_ckpt_attrs *a = &c->k.a;
    c->format = a->format, c->step = a->step, c->opt_steps = a->opt_steps, c->train_batch_size = a->train_batch_size;
    c->saved_world_size = a->saved_world_size, c->ls_hysteresis = a->ls_hysteresis, c->ls_iter = a->ls_iter;
    c->ls_last_overflow = a->ls_last_overflow, c->seed = a->seed, c->loss_scale = a->loss_scale;
    c->max_length = a->max_length, c->run_id = a->run_id, c->consumed_samples = a->consumed_samples;
    snprintf(c->version, sizeof c->version, "%s", a->version);
    /* the model: its layout names and shapes every dataset the file must hold */
    zinf_model_cfg mc;
    ZINF_TRY(zinf_ckpt_attrs_model(a, &mc, c->path));
    return zinf_model_init(&c->m, &mc, NULL);
}

/* ---------------------------------------------------------------- tensors ------------------ */
/* Open group/name: it must exist, be float32 little-endian, have the model's shape for it and a
 * checksum, which *want gets (zinf_ckf_tensor, as a run's load checks it). */
static int open_tensor(const ck *c, int k, const zinf_tensor_view *tv, hid_t *out, char *name, size_t cap,
                       uint64_t *want)
{
    snprintf(name, cap, "%s/%s", state_group[k], tv->name);
    return zinf_ckf_tensor(&c->k, k, tv, out, want);
}

/* rows [r0, r0+nr) x columns [c0, c0+nc) of a tensor into buf (nr x nc, row-major); a vector's
 * "rows" are its elements and nc is 1 */
static int read_block(hid_t d, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float *buf)
{
    hid_t fs = H5Dget_space(d);
    hsize_t st[2] = {(hsize_t)r0, (hsize_t)c0}, cnt[2] = {(hsize_t)nr, (hsize_t)nc};
    hsize_t mdim = (hsize_t)(nr * nc);
    hid_t ms = H5Screate_simple(1, &mdim, NULL);
    int rc = fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cnt, NULL) < 0 ||
                     H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf) < 0
                 ? -1
                 : 0;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

static int mismatch(const ck *c, const char *name)
{
    return zinf_errc(ZINF_EINVAL, "%s: dataset %s: checksum mismatch (the file is corrupted)", c->path, name);
}

static int64_t cols_of(const zinf_tensor_view *tv) { return tv->shape[1] ? tv->shape[1] : 1; }

/* Read a whole tensor in blocks of whole rows, checking its checksum against want; `each` (may be
 * NULL) sees every block: rows [r0, r0+nr) in buf. */
typedef int (*block_fn)(void *ctx, const zinf_tensor_view *tv, int64_t r0, int64_t nr, const float *buf);
static int scan_rows(const ck *c, int k, hid_t d, const char *name, const zinf_tensor_view *tv, uint64_t want,
                     float *buf, block_fn each, void *ctx)
{
    uint64_t sum = 0;
    int64_t C = cols_of(tv), R = tv->shape[0];
    int64_t h = block_elems() / C > 0 ? block_elems() / C : 1;
    for (int64_t r0 = 0; r0 < R; r0 += h) {
        int64_t nr = R - r0 < h ? R - r0 : h;
        if (read_block(d, r0, nr, 0, C, buf))
            return zinf_errc(ZINF_EIO, "%s: cannot read dataset %s (truncated file?)", c->path, name);
        sum += zinf_ckpt_checksum(buf, r0 * C, nr * C);
        ZINF_TRY(zinf_ckf_values(c->path, k, name, buf, r0 * C, nr * C));
        if (each) ZINF_TRY(each(ctx, tv, r0, nr, buf));
    }
    return sum == want ? 0 : mismatch(c, name);
}

static int count_tensors(const zinf_model *m)
{
    int n = 0;
    for (int u = 0; u < m->nunits; u++) n += m->units[u].ntensors;
    return n;
}

/* Elements in the largest block: a block's worth, or one row or one column of a tensor where
 * that is longer. */
static int64_t block_cap(const zinf_model *m)
{
    int64_t n = block_elems();
    for (int u = 0; u < m->nunits; u++)
        for (int t = 0; t < m->units[u].ntensors; t++) {
            const zinf_tensor_view *tv = &m->units[u].t[t];
            n = cols_of(tv) > n ? cols_of(tv) : n;
            n = tv->shape[0] > n ? tv->shape[0] : n;
        }
    return n;
}

static float *block_buf(const zinf_model *m) { return malloc((size_t)block_cap(m) * 4); }

/* ---------------------------------------------------------------- info --------------------- */
static void fmt_bytes(char *b, size_t cap, double x)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (x >= 1024 && i < 4) x /= 1024, i++;
    snprintf(b, cap, i ? "%.1f %s" : "%.0f %s", x, u[i]);
}

int zinf_ckpt_info(const char *spec, FILE *out)
{
    ck c;
    int rc = ck_open(&c, spec);
    if (rc) {
        ck_close(&c);
        return rc;
    }
    const zinf_model_cfg *mc = &c.m.c;
    fprintf(out, "checkpoint       %s\n", c.path);
    fprintf(out, "format           %lld (written by zinf %s)\n", (long long)c.format, c.version[0] ? c.version : "?");
    fprintf(out, "step             %lld\n", (long long)c.step);
    fprintf(out, "optimizer steps  %lld\n", (long long)c.opt_steps);
    fprintf(out, "loss scale       %.17g (hysteresis %lld, iteration %lld, last overflow at %lld)\n", c.loss_scale,
            (long long)c.ls_hysteresis, (long long)c.ls_iter, (long long)c.ls_last_overflow);
    fprintf(out, "seed             %llu\n", (unsigned long long)c.seed);
    fprintf(out, "batch size       %lld sequences per step\n", (long long)c.train_batch_size);
    fprintf(out, "data position    %lld sequences read (the next step starts there)\n", (long long)c.consumed_samples);
    if (c.max_length) fprintf(out, "max length       %lld tokens per sequence\n", (long long)c.max_length);
    if (c.run_id) fprintf(out, "run id           %016llx\n", (unsigned long long)c.run_id);
    fprintf(out, "saved by         %lld rank%s\n", (long long)c.saved_world_size, c.saved_world_size == 1 ? "" : "s");
    char *shape = zinf_model_describe(mc, 17, 100);
    if (!shape) { /* the message is zinf_model_describe's; cli.c prints no part of the report */
        ck_close(&c);
        return ZINF_ENOMEM;
    }
    fprintf(out, "model            %s\n", shape);
    free(shape);
    char *cfg = zinf_ckf_config(&c.k);
    fprintf(out, "config:\n%s", cfg ? cfg : "(none stored)\n");
    if (cfg && cfg[0] && cfg[strlen(cfg) - 1] != '\n') fputc('\n', out);
    free(cfg);
    fprintf(out, "tensors (/master; /optim/m and /optim/v hold the same shapes):\n");
    fprintf(out, "  %-34s %-16s %-8s %14s\n", "name", "shape", "dtype", "bytes");
    int64_t params = 0, bytes = 0;
    for (int u = 0; u < c.m.nunits && !rc; u++)
        for (int t = 0; t < c.m.units[u].ntensors && !rc; t++) {
            const zinf_tensor_view *tv = &c.m.units[u].t[t];
            hid_t d;
            char name[128], shape[48];
            uint64_t want;
            rc = open_tensor(&c, 0, tv, &d, name, sizeof name, &want);
            if (rc) break;
            H5Dclose(d);
            if (tv->shape[1]) snprintf(shape, sizeof shape, "%lld x %lld", (long long)tv->shape[0], (long long)tv->shape[1]);
            else snprintf(shape, sizeof shape, "%lld", (long long)tv->shape[0]);
            fprintf(out, "  %-34s %-16s %-8s %14lld\n", tv->name, shape, "float32", (long long)tv->numel * 4);
            params += tv->numel;
            bytes += tv->numel * 4;
        }
    if (!rc) {
        struct stat st;
        char hb[32], fb[32];
        int64_t pad = (int64_t)(mc->padded_vocab - mc->vocab_size) * mc->n_embd;
        fmt_bytes(hb, sizeof hb, (double)bytes);
        fprintf(out, "parameters       %lld", (long long)params);
        if (pad) fprintf(out, " (%lld of them in the %d padded vocabulary rows)", (long long)pad, mc->padded_vocab - mc->vocab_size);
        fprintf(out, ", %s of fp32 in each of /master, /optim/m, /optim/v\n", hb);
        if (stat(c.path, &st)) rc = zinf_errc(-errno, "%s: %s", c.path, strerror(errno));
        else {
            fmt_bytes(fb, sizeof fb, (double)st.st_size);
            fprintf(out, "file bytes       %lld (%s)\n", (long long)st.st_size, fb);
        }
    }
    ck_close(&c);
    return rc;
}

/* ---------------------------------------------------------------- verify ------------------- */
/* Every dataset of the three state groups against its checksum, and no link beside the model's
 * tensors: what verify checks, and what export checks before it writes anything (a corrupted
 * checkpoint exports nothing). *count: the datasets. */
static int verify_all(ck *c, int *count)
{
    float *buf = block_buf(&c->m);
    if (!buf) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    int rc = 0, n = 0;
    for (int k = 0; k < 3 && !rc; k++) {
        for (int u = 0; u < c->m.nunits && !rc; u++)
            for (int t = 0; t < c->m.units[u].ntensors && !rc; t++, n++) {
                hid_t d;
                char name[128];
                uint64_t want;
                rc = open_tensor(c, k, &c->m.units[u].t[t], &d, name, sizeof name, &want);
                if (rc) break;
                rc = scan_rows(c, k, d, name, &c->m.units[u].t[t], want, buf, NULL, NULL);
                H5Dclose(d);
            }
    }
    /* every link of the state groups is one of the model's tensors */
    if (!rc) rc = zinf_ckf_no_extra(&c->k, &c->m);
    free(buf);
    if (count) *count = n;
    return rc;
}

int zinf_ckpt_verify(const char *spec, FILE *out)
{
    ck c;
    int n = 0, rc = ck_open(&c, spec);
    if (!rc) rc = verify_all(&c, &n);
    if (!rc) fprintf(out, "%s: %d datasets, checksums match\n", c.path, n);
    ck_close(&c);
    return rc;
}

/* ---------------------------------------------------------------- export: output files ----- */

/* ---------------------------------------------------------------- export: HF directory ---- */
/* hf.c's zinf_hf_write lays out HF's tensors and asks for blocks of zinf's; this source reads
 * them from /master and sums each dataset's checksum over its row pieces (every element is asked
 * for once, the rows HF lacks too), checked after the tensor's last block. */
typedef struct hf_in {
    const ck *c;
    hid_t d; /* the dataset being read, or -1 */
    char name[128];
    uint64_t want, sum;
} hf_in;

static int hf_begin(void *ctx, int u, int t)
{
    hf_in *o = ctx;
    o->sum = 0;
    return open_tensor(o->c, 0, &o->c->m.units[u].t[t], &o->d, o->name, sizeof o->name, &o->want);
}

static int hf_block(void *ctx, int u, int t, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float *buf)
{
    hf_in *o = ctx;
    int64_t C = cols_of(&o->c->m.units[u].t[t]);
    if (read_block(o->d, r0, nr, c0, nc, buf))
        return zinf_errc(ZINF_EIO, "%s: cannot read dataset %s (truncated file?)", o->c->path, o->name);
    for (int64_t r = 0; r < nr; r++) {
        o->sum += zinf_ckpt_checksum(buf + r * nc, (r0 + r) * C + c0, nc);
        ZINF_TRY(zinf_ckf_values(o->c->path, 0, o->name, buf + r * nc, (r0 + r) * C + c0, nc));
    }
    return 0;
}

static int hf_end(void *ctx, int u, int t)
{
    (void)u, (void)t;
    hf_in *o = ctx;
    H5Dclose(o->d);
    o->d = -1;
    return o->sum == o->want ? 0 : mismatch(o->c, o->name);
}

static int write_text_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    if (!fp) return zinf_errc(-errno, "%s: %s", path, strerror(errno));
    bool ok = fputs(text, fp) >= 0 && fputc('\n', fp) != EOF;
    ok = !fflush(fp) && ok && !fsync(fileno(fp));
    if (fclose(fp) || !ok) return zinf_errc(ZINF_EIO, "%s: cannot write (disk full?)", path);
    return 0;
}

/* config.json and generation_config.json as .tmp (renamed by the caller), then the weights
 * (io/safetensors renames its own files once all are complete) */
static int export_hf(const ck *c, const char *dir, zinf_dtype dt, uint64_t max_shard, char (*tmp)[4200], int *ntmp,
                     zinf_st_written *res)
{
    snprintf(tmp[0], sizeof tmp[0], "%s/config.json.tmp", dir);
    snprintf(tmp[1], sizeof tmp[1], "%s/generation_config.json.tmp", dir);
    *ntmp = 2;
    char *cfg = zinf_hf_config_text(&c->m.c, dt), *gen = cfg ? zinf_hf_generation_config(cfg) : NULL;
    int rc = !cfg || !gen ? zinf_errc(ZINF_ENOMEM, "out of host memory") : write_text_file(tmp[0], cfg);
    if (!rc) rc = write_text_file(tmp[1], gen);
    free(cfg);
    free(gen);
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)c->step);
    const char *meta[] = {"zinf_step", step, "zinf_version", PACKAGE_VERSION, NULL};
    hf_in in = {.c = c, .d = -1};
    zinf_hf_source src = {&in, hf_begin, hf_block, hf_end};
    if (!rc) rc = zinf_hf_write(dir, &c->m, dt, max_shard, meta, block_elems(), &src, res);
    if (in.d >= 0) H5Dclose(in.d);
    return rc;
}

/* ---------------------------------------------------------------- export: HDF5 ------------- */
/* IEEE binary16 as an HDF5 type: HDF5 has none predefined; h5py reads this one as float16 */
static hid_t half_type(void)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    if (t < 0) return -1;
    if (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, 15) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

typedef struct h5_out {
    hid_t d, mt;
    zinf_dtype dt;
    const char *path, *name;
    uint16_t *h16;
} h5_out;

static int h5_rows(void *ctx, const zinf_tensor_view *tv, int64_t r0, int64_t nr, const float *buf)
{
    h5_out *o = ctx;
    int64_t C = cols_of(tv), n = nr * C;
    const void *src = buf;
    if (o->dt != ZINF_F32) {
        for (int64_t i = 0; i < n; i++) o->h16[i] = o->dt == ZINF_BF16 ? zinf_f32_to_bf16(buf[i]) : zinf_f32_to_f16(buf[i]);
        src = o->h16;
    }
    hid_t fs = H5Dget_space(o->d);
    hsize_t st[2] = {(hsize_t)r0, 0}, cnt[2] = {(hsize_t)nr, (hsize_t)C}, mdim = (hsize_t)n;
    hid_t ms = H5Screate_simple(1, &mdim, NULL);
    int rc = fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cnt, NULL) < 0 ||
                     H5Dwrite(o->d, o->mt, ms, fs, H5P_DEFAULT, src) < 0
                 ? zinf_errc(ZINF_EIO, "%s: cannot write dataset %s (disk full?)", o->path, o->name)
                 : 0;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

static int export_hdf5(const ck *c, const char *dir, zinf_dtype dt, float *buf, char (*tmp)[4200], int *ntmp)
{
    snprintf(tmp[0], sizeof tmp[0], "%s/weights.h5.tmp", dir);
    *ntmp = 1;
    const char *dname = dt == ZINF_BF16 ? "bf16" : dt == ZINF_F16 ? "fp16" : "fp32";
    hid_t f = H5Fcreate(tmp[0], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return zinf_errc(ZINF_EIO, "%s: cannot create the file (is the directory writable?)", tmp[0]);
    /* file and memory types: the 16-bit values are made by zinf's rounding and written as bits */
    hid_t ft = dt == ZINF_F32 ? H5Tcopy(H5T_IEEE_F32LE) : dt == ZINF_BF16 ? H5Tcopy(H5T_STD_U16LE) : half_type();
    hid_t mt = dt == ZINF_F32 ? H5Tcopy(H5T_NATIVE_FLOAT) : dt == ZINF_BF16 ? H5Tcopy(H5T_NATIVE_UINT16) : half_type();
    uint16_t *h16 = malloc((size_t)block_cap(&c->m) * 2);
    const zinf_model_cfg *mc = &c->m.c;
    int rc = 0;
    if (ft < 0 || mt < 0) rc = zinf_errc(ZINF_EIO, "%s: cannot make the %s HDF5 type", tmp[0], dname);
    else if (!h16) rc = zinf_errc(ZINF_ENOMEM, "out of host memory");
    else if (zinf_h5_attr_str(f, "format", "zinf-weights") | zinf_h5_attr_i64(f, "format_version", 1) | zinf_h5_attr_str(f, "dtype", dname) |
             zinf_h5_attr_str(f, "source", c->path) | zinf_h5_attr_i64(f, "step", c->step) | zinf_h5_attr_str(f, "zinf_version", PACKAGE_VERSION) |
             zinf_h5_attr_i64(f, "n_layer", mc->n_layer) | zinf_h5_attr_i64(f, "n_embd", mc->n_embd) | zinf_h5_attr_i64(f, "n_head", mc->n_head) |
             zinf_h5_attr_i64(f, "vocab_size", mc->vocab_size) | zinf_h5_attr_i64(f, "padded_vocab", mc->padded_vocab) |
             zinf_h5_attr_i64(f, "n_positions", mc->n_positions))
        rc = zinf_errc(ZINF_EIO, "%s: cannot write the file's attributes", tmp[0]);
    for (int u = 0; u < c->m.nunits && !rc; u++)
        for (int t = 0; t < c->m.units[u].ntensors && !rc; t++) {
            const zinf_tensor_view *tv = &c->m.units[u].t[t];
            char name[128];
            hid_t d;
            uint64_t want;
            rc = open_tensor(c, 0, tv, &d, name, sizeof name, &want);
            if (rc) break;
            hsize_t dims[2] = {(hsize_t)tv->shape[0], (hsize_t)tv->shape[1]};
            hid_t fs = H5Screate_simple(tv->shape[1] ? 2 : 1, dims, NULL);
            h5_out o = {.mt = mt, .dt = dt, .path = tmp[0], .name = tv->name, .h16 = h16};
            o.d = H5Dcreate2(f, tv->name, ft, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            if (o.d < 0 || zinf_h5_attr_str(o.d, "dtype", dname) | zinf_h5_attr_i64(o.d, "unit_index", u) | zinf_h5_attr_i64(o.d, "unit_offset", tv->offset))
                rc = zinf_errc(ZINF_EIO, "%s: cannot create dataset %s (disk full?)", tmp[0], tv->name);
            if (!rc) rc = scan_rows(c, 0, d, name, tv, want, buf, h5_rows, &o);
            if (o.d >= 0) H5Dclose(o.d);
            H5Sclose(fs);
            H5Dclose(d);
        }
    free(h16);
    if (ft >= 0) H5Tclose(ft);
    if (mt >= 0) H5Tclose(mt);
    if (H5Fclose(f) < 0 && !rc) rc = zinf_errc(ZINF_EIO, "%s: cannot complete the file (disk full?)", tmp[0]);
    if (!rc) rc = zinf_fsync_path(tmp[0], false);
    return rc;
}

/* ---------------------------------------------------------------- export ------------------- */
static int export_run(const char *spec, const char *dir, const zinf_export_opts *x, FILE *out)
{
    ck c;
    int rc = ck_open(&c, spec);
    if (!rc) rc = verify_all(&c, NULL);
    /* the files are renamed into place one after the other once all are written: a name that a
     * rename cannot take (a directory of that name) is refused before anything is written, so that
     * no file is replaced by a failed export */
    static const char *const finals[] = {"config.json", "generation_config.json", "model.safetensors",
                                         "model.safetensors.index.json", "weights.h5"};
    for (size_t i = 0; i < sizeof finals / sizeof *finals && !rc; i++) {
        char p[4300];
        snprintf(p, sizeof p, "%s/%s", dir, finals[i]);
        rc = zinf_refuse_irregular("--out", p);
    }
    if (!rc && (rc = zinf_mkdir_p(dir))) rc = zinf_err_prefix(rc, "--out %s", dir);
    float *buf = rc || x->fmt != ZINF_EXPORT_HDF5 ? NULL : block_buf(&c.m); /* hf.c has its own */
    if (!rc && x->fmt == ZINF_EXPORT_HDF5 && !buf) rc = zinf_errc(ZINF_ENOMEM, "out of host memory");
    char tmp[2][4200];
    int ntmp = 0;
    zinf_st_written w = {0};
    if (!rc)
        rc = x->fmt == ZINF_EXPORT_HDF5 ? export_hdf5(&c, dir, x->dt, buf, tmp, &ntmp)
                                        : export_hf(&c, dir, x->dt, x->max_shard, tmp, &ntmp, &w);
    /* every file is complete: each .tmp takes its name */
    for (int i = 0; i < ntmp && !rc; i++) {
        char final[4200];
        snprintf(final, sizeof final, "%.*s", (int)(strlen(tmp[i]) - 4), tmp[i]);
        if (rename(tmp[i], final)) rc = zinf_errc(-errno, "rename %s: %s", tmp[i], strerror(errno));
    }
    if (!rc && ntmp) rc = zinf_fsync_path(dir, true);
    if (rc)
        for (int i = 0; i < ntmp; i++) unlink(tmp[i]); /* nothing half-written stays */
    if (!rc) {
        const char *dn = x->dt == ZINF_BF16 ? "bf16" : x->dt == ZINF_F16 ? "fp16" : "fp32";
        if (x->fmt == ZINF_EXPORT_HDF5)
            fprintf(out, "%s (step %lld): wrote %s/weights.h5 (%d tensors, %s)\n", c.path, (long long)c.step, dir,
                    count_tensors(&c.m), dn);
        else if (w.shards == 1)
            fprintf(out, "%s (step %lld): wrote %s/config.json, generation_config.json and model.safetensors "
                    "(%llu bytes of %s)\n", c.path, (long long)c.step, dir, (unsigned long long)w.total_size, dn);
        else
            fprintf(out, "%s (step %lld): wrote %s/config.json, generation_config.json, %d shards "
                    "model-0000K-of-%05d.safetensors and model.safetensors.index.json (%llu bytes of %s)\n", c.path,
                    (long long)c.step, dir, w.shards, w.shards, (unsigned long long)w.total_size, dn);
    }
    free(buf);
    ck_close(&c);
    return rc;
}

/* The export runs in a child process (zinf_ckpt_isolated): HDF5 cannot end a process after a
 * file it wrote failed to close, as on a full disk. */
typedef struct export_job {
    const char *spec, *dir;
    const zinf_export_opts *x;
    FILE *out;
} export_job;
static int export_child(void *ctx, void *res)
{
    (void)res;
    const export_job *j = ctx;
    return export_run(j->spec, j->dir, j->x, j->out);
}

int zinf_ckpt_export(const char *spec, const char *dir, const zinf_export_opts *x, FILE *out, double timeout_s)
{
    export_job j = {spec, dir, x, out};
    return zinf_ckpt_isolated(export_child, &j, NULL, 0, timeout_s, dir);
}
