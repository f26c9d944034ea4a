/* The checkpoint file on disk: see ckpt_file.h and man/zinf-checkpoint.5. */
#include "ckpt_file.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "err.h"
#include "io/file.h"
#include "h5attr.h"
#include "zinf-build.h" /* PACKAGE_VERSION */

const char *const zinf_ckpt_group[3] = {"/master", "/optim/m", "/optim/v"};

/* ---------------------------------------------------------------- the root scalars --------- */
/* One row per root scalar: its name, kind (i: int64, u: uint64, d: double), field, the format
 * that introduced it, and its smallest legal value (ints). The writer, both readers and the
 * checksum walk this table. */
typedef struct {
    const char *name;
    char kind;
    size_t off;
    int since, until; /* the formats that hold it */
    int64_t lo, hi;
} attr_row;
#define BIG INT64_MAX
#define ROW(n, k, f, s, lo, hi) {n, k, offsetof(zinf_ckpt_attrs, f), s, ZINF_CKPT_FORMAT, lo, hi}
#define V1(n, i) {n, 'i', offsetof(zinf_ckpt_attrs, legacy) + (i) * sizeof(int64_t), 1, 1, 1, 1 << 30}
static const attr_row rows[] = {
    ROW("step", 'i', step, 1, 0, BIG),
    ROW("opt_steps", 'i', opt_steps, 1, 0, BIG),
    ROW("seed", 'u', seed, 1, 0, 0),
    ROW("train_batch_size", 'i', train_batch_size, 1, 1, BIG),
    ROW("max_length", 'i', max_length, 2, 1, 1 << 30),
    ROW("run_id", 'u', run_id, 2, 0, 0),
    ROW("consumed_samples", 'i', consumed_samples, 3, 0, BIG),
    ROW("loss_scale", 'd', loss_scale, 1, 0, 0),
    ROW("loss_scale_hysteresis", 'i', ls_hysteresis, 1, 0, BIG),
    ROW("loss_scale_iter", 'i', ls_iter, 1, 0, BIG),
    ROW("loss_scale_last_overflow_iter", 'i', ls_last_overflow, 1, -1, BIG),
    ROW("saved_world_size", 'i', saved_world_size, 1, 1, 1 << 30),
    V1("n_layer", 0), V1("n_embd", 1), V1("n_head", 2), V1("vocab_size", 3), V1("padded_vocab", 4),
    V1("n_positions", 5),
};
#define NROWS (sizeof rows / sizeof *rows)

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* set in a child process of zinf_ckpt_isolated: OpenMP's threads do not survive fork, and a
 * parallel region there would wait for them forever */
static bool serial_only;
void zinf_ckpt_serial_only(void) { serial_only = true; }

uint64_t zinf_ckpt_checksum(const float *x, int64_t first, int64_t n)
{
    uint64_t s = 0;
    /* a sum modulo 2^64: any split over threads gives the same value */
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > 65536 && !serial_only)
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], 4);
        s += mix64(((uint64_t)(first + i) << 32) ^ b ^ 0x9e3779b97f4a7c15ULL);
    }
    return s;
}

static uint64_t mix_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, b + i, n - i < 8 ? n - i : 8);
        h = mix64(h ^ w ^ (uint64_t)i);
    }
    return mix64(h ^ (uint64_t)n);
}

/* The checksum of the root scalars (names and bits), the writer's version and the config text. */
static uint64_t meta_sum(const zinf_ckpt_attrs *a, const char *cfg)
{
    uint64_t h = 0x6a09e667f3bcc908ULL;
    for (size_t i = 0; i < NROWS; i++) {
        h = mix_bytes(h, rows[i].name, strlen(rows[i].name));
        h = mix_bytes(h, (const char *)a + rows[i].off, 8);
    }
    h = mix_bytes(h, a->version, strlen(a->version));
    h = mix_bytes(h, a->model_type, strlen(a->model_type));
    h = mix_bytes(h, a->model_config, strlen(a->model_config));
    return mix_bytes(h, cfg ? cfg : "", cfg ? strlen(cfg) : 0);
}

/* what the model's readers name as the source of a missing or bad key: the stored config */
static void config_src(char *out, size_t cap, const zinf_ckpt_attrs *a, const char *src)
{
    snprintf(out, cap, a->format >= 2 ? "%s: its model_config attribute" : "%s", src);
}

int zinf_ckpt_attrs_model(const zinf_ckpt_attrs *a, zinf_model_cfg *mc, const char *src)
{
    bool named = a->format >= 2;
    char s2[4200];
    config_src(s2, sizeof s2, a, src);
    ZINF_TRY(zinf_model_cfg_from_identity(mc, named ? a->model_type : NULL, a->model_config, a->legacy, s2));
    snprintf(mc->name, sizeof mc->name, "checkpoint");
    return 0;
}

int zinf_ckpt_attrs_check_model(const zinf_ckpt_attrs *a, const zinf_model_cfg *run, const char *src)
{
    return zinf_model_identity_check(run, a->format >= 2 ? a->model_type : NULL, a->model_config, a->legacy, src);
}

int zinf_ckpt_attrs_set_model(zinf_ckpt_attrs *a, const zinf_model_cfg *mc)
{
    char *text = NULL;
    ZINF_TRY(zinf_model_identity(mc, a->model_type, sizeof a->model_type, &text));
    int rc = strlen(text) < sizeof a->model_config
                 ? 0
                 : zinf_errc(ZINF_EINVAL, "the model's config text is longer than a checkpoint holds (%zu bytes)",
                             strlen(text));
    if (!rc) snprintf(a->model_config, sizeof a->model_config, "%s", text);
    free(text);
    return rc;
}

/* a fixed-length string attribute, cut to cap */
static int get_str(hid_t obj, const char *name, char *out, size_t cap)
{
    out[0] = 0;
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t ft = a >= 0 ? H5Aget_type(a) : -1;
    int rc = -1;
    if (ft >= 0 && H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft)) {
        size_t n = H5Tget_size(ft);
        char *s = calloc(n + 1, 1);
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, n);
        if (s && H5Aread(a, mt, s) >= 0) {
            snprintf(out, cap, "%s", s);
            rc = 0;
        }
        H5Tclose(mt);
        free(s);
    }
    if (ft >= 0) H5Tclose(ft);
    if (a >= 0) H5Aclose(a);
    return rc;
}

/* HDF5's own advisory file locks are off: zinf locks the output directory itself (ckpt.h), and
 * the ranks of a load open the same file at once, on file systems where flock may not exist. */
static hid_t fapl_new(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_alignment(fapl, 1 << 20, 1 << 20); /* datasets of 1 MiB or more start on 1 MiB bounds */
#if H5_VERSION_GE(1, 10, 7)
    H5Pset_file_locking(fapl, 0, 1);
#endif
    return fapl;
}

char *zinf_ckf_config(const zinf_ckf *c)
{
    if (H5Lexists(c->f, "/meta", H5P_DEFAULT) <= 0 || H5Lexists(c->f, "/meta/config", H5P_DEFAULT) <= 0) return NULL;
    hid_t d = H5Dopen2(c->f, "/meta/config", H5P_DEFAULT);
    if (d < 0) return NULL;
    hid_t ft = H5Dget_type(d);
    char *s = NULL;
    if (ft >= 0 && H5Tget_class(ft) == H5T_STRING) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        if (H5Tis_variable_str(ft)) {
            char *p = NULL;
            H5Tset_size(mt, H5T_VARIABLE);
            if (H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, &p) >= 0 && p) {
                s = strdup(p);
                H5free_memory(p);
            }
        } else {
            size_t n = H5Tget_size(ft);
            H5Tset_size(mt, n);
            s = calloc(n + 1, 1);
            if (s && H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, s) < 0) {
                free(s);
                s = NULL;
            }
        }
        H5Tclose(mt);
    }
    if (ft >= 0) H5Tclose(ft);
    H5Dclose(d);
    return s;
}

void zinf_ckf_close(zinf_ckf *c)
{
    if (c->f >= 0) H5Fclose(c->f);
    c->f = -1;
}

int zinf_ckf_open(zinf_ckf *c, const char *path)
{
    memset(c, 0, sizeof *c);
    c->f = -1;
    snprintf(c->path, sizeof c->path, "%s", path);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors become one message, not HDF5's stack dump */
    ZINF_TRY(zinf_refuse_irregular(NULL, path)); /* HDF5's open of a FIFO would wait for a writer */
    hid_t fapl = fapl_new();
    if (H5Fis_hdf5(path) > 0) c->f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (c->f < 0) return zinf_errc(ZINF_EIO, "%s: not a readable HDF5 file (truncated or not a checkpoint)", path);
    zinf_ckpt_attrs *a = &c->a;
    if (zinf_h5_get_num(c->f, "format_version", H5T_NATIVE_INT64, &a->format))
        return zinf_errc(ZINF_EINVAL, "%s: no format_version attribute: not a zinf checkpoint", path);
    if (a->format < ZINF_CKPT_FORMAT_MIN || a->format > ZINF_CKPT_FORMAT)
        return zinf_errc(ZINF_EINVAL, "%s: checkpoint format %lld, this zinf reads formats %d to %d", path,
                         (long long)a->format, ZINF_CKPT_FORMAT_MIN, ZINF_CKPT_FORMAT);
    get_str(c->f, "zinf_version", a->version, sizeof a->version);
    for (size_t i = 0; i < NROWS; i++) {
        const attr_row *r = &rows[i];
        void *p = (char *)a + r->off;
        if (r->since > a->format || r->until < a->format) continue; /* not in this format: stays 0 */
        hid_t mt = r->kind == 'i' ? H5T_NATIVE_INT64 : r->kind == 'u' ? H5T_NATIVE_UINT64 : H5T_NATIVE_DOUBLE;
        if (zinf_h5_get_num(c->f, r->name, mt, p))
            return zinf_errc(ZINF_EINVAL, "%s: attribute %s is missing", path, r->name);
        /* HDF5 converts 2.5 to 2 when a float is read as an integer: an integer is stored as one */
        if (zinf_h5_num_class(c->f, r->name) != (r->kind == 'd' ? H5T_FLOAT : H5T_INTEGER))
            return zinf_errc(ZINF_EINVAL, "%s: attribute %s is not stored as %s (the file was edited or is "
                                          "corrupted)", path, r->name, r->kind == 'd' ? "a float" : "an integer");
        if (r->kind == 'i' && (*(int64_t *)p < r->lo || *(int64_t *)p > r->hi))
            return zinf_errc(ZINF_EINVAL, "%s: attribute %s is %lld, out of range (the file was edited or is "
                                          "corrupted)", path, r->name, (long long)*(int64_t *)p);
        if (r->kind == 'd' && !zinf_loss_scale_ok(*(double *)p))
            return zinf_errc(ZINF_EINVAL, "%s: attribute %s is %g, not a normal positive float (the file was edited "
                                          "or is corrupted)", path, r->name, *(double *)p);
    }
    if (a->opt_steps > a->step)
        return zinf_errc(ZINF_EINVAL, "%s: attribute opt_steps %lld exceeds step %lld (the file was edited or is "
                                      "corrupted)", path, (long long)a->opt_steps, (long long)a->step);
    if (a->format >= 2) {
        if (get_str(c->f, "model_type", a->model_type, sizeof a->model_type) ||
            get_str(c->f, "model_config", a->model_config, sizeof a->model_config))
            return zinf_errc(ZINF_EINVAL, "%s: attribute model_type or model_config is missing", path);
        uint64_t want = 0;
        if (zinf_h5_get_num(c->f, "meta_checksum", H5T_NATIVE_UINT64, &want))
            return zinf_errc(ZINF_EINVAL, "%s: attribute meta_checksum is missing", path);
        char *cfg = zinf_ckf_config(c);
        uint64_t got = meta_sum(a, cfg);
        free(cfg);
        if (got != want)
            return zinf_errc(ZINF_EINVAL, "%s: the root attributes or /meta/config do not match their checksum "
                                          "(the file was edited or is corrupted)", path);
    }
    /* before format 3 every step read train_batch_size sequences */
    if (a->format < 3 && __builtin_mul_overflow(a->step, a->train_batch_size, &a->consumed_samples))
        return zinf_errc(ZINF_EINVAL, "%s: step %lld x train_batch_size %lld overflows (the file was edited or is "
                                      "corrupted)", path, (long long)a->step, (long long)a->train_batch_size);
    return 0;
}

/* ---------------------------------------------------------------- tensors ------------------ */
static hid_t file_space(const zinf_tensor_view *t)
{
    hsize_t dims[2] = {(hsize_t)t->shape[0], (hsize_t)t->shape[1]};
    return H5Screate_simple(t->shape[1] ? 2 : 1, dims, NULL);
}

int zinf_ckf_tensor(const zinf_ckf *c, int k, const zinf_tensor_view *tv, hid_t *out, uint64_t *sum)
{
    char name[160];
    snprintf(name, sizeof name, "%s/%s", zinf_ckpt_group[k], tv->name);
    *out = -1;
    if (H5Lexists(c->f, zinf_ckpt_group[k], H5P_DEFAULT) <= 0 || H5Lexists(c->f, name, H5P_DEFAULT) <= 0)
        return zinf_errc(ZINF_EINVAL, "%s: dataset %s is missing", c->path, name);
    hid_t d = H5Dopen2(c->f, name, H5P_DEFAULT);
    if (d < 0) return zinf_errc(ZINF_EINVAL, "%s: %s is not a readable dataset", c->path, name);
    hid_t fs = H5Dget_space(d), ft = H5Dget_type(d);
    hsize_t dims[2] = {0, 0};
    int nd = fs >= 0 ? H5Sget_simple_extent_ndims(fs) : -1;
    if (nd >= 1 && nd <= 2) H5Sget_simple_extent_dims(fs, dims, NULL);
    bool f32 = ft >= 0 && H5Tequal(ft, H5T_IEEE_F32LE) > 0;
    bool shape_ok = nd == (tv->shape[1] ? 2 : 1) && dims[0] == (hsize_t)tv->shape[0] &&
                    (nd == 1 || dims[1] == (hsize_t)tv->shape[1]);
    if (fs >= 0) H5Sclose(fs);
    if (ft >= 0) H5Tclose(ft);
    int rc = 0;
    if (!f32) rc = zinf_errc(ZINF_EINVAL, "%s: dataset %s is not float32 (little-endian)", c->path, name);
    else if (!shape_ok && tv->shape[1])
        rc = zinf_errc(ZINF_EINVAL, "%s: dataset %s is not %lld x %lld, the shape the model attributes give it",
                       c->path, name, (long long)tv->shape[0], (long long)tv->shape[1]);
    else if (!shape_ok)
        rc = zinf_errc(ZINF_EINVAL, "%s: dataset %s is not a vector of %lld, the shape the model attributes give it",
                       c->path, name, (long long)tv->shape[0]);
    else if (zinf_h5_get_num(d, "checksum", H5T_NATIVE_UINT64, sum))
        rc = zinf_errc(ZINF_EINVAL, "%s: dataset %s has no checksum (an incomplete save?)", c->path, name);
    if (rc) H5Dclose(d);
    else *out = d;
    return rc;
}

/* [a, b) of a tensor's flat elements as a hyperslab selection of its dataset: a partial first
 * row, whole rows, a partial last row (one run for a vector). */
static int select_flat(hid_t space, const zinf_tensor_view *t, int64_t a, int64_t b)
{
    if (a >= b) return H5Sselect_none(space) < 0 ? -1 : 0;
    if (!t->shape[1]) {
        hsize_t st = (hsize_t)a, cnt = (hsize_t)(b - a);
        return H5Sselect_hyperslab(space, H5S_SELECT_SET, &st, NULL, &cnt, NULL) < 0 ? -1 : 0;
    }
    int64_t C = t->shape[1];
    H5S_seloper_t op = H5S_SELECT_SET;
    while (a < b) {
        int64_t r = a / C, c = a % C;
        hsize_t st[2], cnt[2];
        if (c || b - a < C) { /* part of one row */
            int64_t e = b < (r + 1) * C ? b : (r + 1) * C;
            st[0] = (hsize_t)r, st[1] = (hsize_t)c, cnt[0] = 1, cnt[1] = (hsize_t)(e - a);
            a = e;
        } else { /* whole rows */
            int64_t nrow = (b - a) / C;
            st[0] = (hsize_t)r, st[1] = 0, cnt[0] = (hsize_t)nrow, cnt[1] = (hsize_t)C;
            a += nrow * C;
        }
        if (H5Sselect_hyperslab(space, op, st, NULL, cnt, NULL) < 0) return -1;
        op = H5S_SELECT_OR;
    }
    return 0;
}

int zinf_ckf_values(const char *path, int k, const char *dset, const float *v, int64_t first, int64_t n)
{
    bool bad = false;
    for (int64_t i = 0; i < n; i++) bad |= !isfinite(v[i]) || (k == 2 && v[i] < 0.0f);
    if (!bad) return 0;
    int64_t i = 0;
    while (isfinite(v[i]) && !(k == 2 && v[i] < 0.0f)) i++;
    return zinf_errc(ZINF_EINVAL, "%s: dataset %s holds %s at element %lld (the file was edited or is corrupted)", path,
                     dset, isnan(v[i]) ? "NaN" : isinf(v[i]) ? (v[i] > 0 ? "+Inf" : "-Inf") : "a negative second moment",
                     (long long)(first + i));
}

int zinf_ckf_read(const zinf_ckf *c, int k, hid_t d, const zinf_tensor_view *tv, int64_t a, int64_t b, float *buf)
{
    if (b <= a) return 0;
    hid_t fs = file_space(tv);
    hsize_t cnt = (hsize_t)(b - a);
    hid_t ms = H5Screate_simple(1, &cnt, NULL);
    int rc = fs < 0 || ms < 0 || select_flat(fs, tv, a, b) || H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf) < 0;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (rc) return zinf_errc(ZINF_EIO, "%s: cannot read a part of tensor %s (truncated file?)", c->path, tv->name);
    char dset[160];
    snprintf(dset, sizeof dset, "%s/%s", zinf_ckpt_group[k], tv->name);
    return zinf_ckf_values(c->path, k, dset, buf, a, b - a);
}

/* H5Literate callback: a link of a state group that is no tensor of the model */
typedef struct { const zinf_model *m; char extra[128]; } extra_ctx;
static herr_t find_extra(hid_t g, const char *name, const H5L_info_t *info, void *p)
{
    (void)g, (void)info;
    extra_ctx *x = p;
    for (int u = 0; u < x->m->nunits; u++)
        for (int t = 0; t < x->m->units[u].ntensors; t++)
            if (!strcmp(x->m->units[u].t[t].name, name)) return 0;
    snprintf(x->extra, sizeof x->extra, "%s", name);
    return 1; /* stop: one is enough to name */
}

int zinf_ckf_no_extra(const zinf_ckf *c, const zinf_model *m)
{
    for (int k = 0; k < 3; k++) {
        extra_ctx x = {.m = m};
        hid_t g = H5Lexists(c->f, zinf_ckpt_group[k], H5P_DEFAULT) > 0 ? H5Gopen2(c->f, zinf_ckpt_group[k], H5P_DEFAULT) : -1;
        if (g < 0) return zinf_errc(ZINF_EINVAL, "%s: group %s is missing", c->path, zinf_ckpt_group[k]);
        hsize_t idx = 0;
        H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, find_extra, &x);
        H5Gclose(g);
        if (x.extra[0])
            return zinf_errc(ZINF_EINVAL, "%s: %s/%s is not a tensor of the model the attributes describe", c->path,
                             zinf_ckpt_group[k], x.extra);
    }
    return 0;
}

/* ---------------------------------------------------------------- writing ------------------ */
/* a string dataset (no size limit, unlike an attribute) */
static int write_text(hid_t f, const char *name, const char *text)
{
    hid_t ty = H5Tcopy(H5T_C_S1);
    H5Tset_size(ty, strlen(text) + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t d = H5Dcreate2(f, name, ty, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = d < 0 || H5Dwrite(d, ty, H5S_ALL, H5S_ALL, H5P_DEFAULT, text) < 0 ? -1 : 0;
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp);
    H5Tclose(ty);
    return rc;
}

int zinf_ckf_create(const char *path, const zinf_ckpt_attrs *a0, const char *cfg_json, const zinf_model *m,
                    int64_t *offs, int64_t *size)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    zinf_ckpt_attrs a = *a0;
    a.format = ZINF_CKPT_FORMAT;
    snprintf(a.version, sizeof a.version, "%s", PACKAGE_VERSION);
    const char *cfg = cfg_json ? cfg_json : "{}";
    hid_t fapl = fapl_new();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0) return zinf_errc(ZINF_EIO, "%s: cannot create the checkpoint file (is the directory writable?)", path);
    int e = zinf_h5_attr_i64(f, "format_version", a.format) | zinf_h5_attr_str(f, "zinf_version", a.version);
    e |= zinf_h5_attr_str(f, "model_type", a.model_type) | zinf_h5_attr_str(f, "model_config", a.model_config);
    for (size_t i = 0; i < NROWS && !e; i++) {
        const void *p = (const char *)&a + rows[i].off;
        if (rows[i].until < a.format) continue;
        e |= rows[i].kind == 'i'   ? zinf_h5_attr_i64(f, rows[i].name, *(const int64_t *)p)
             : rows[i].kind == 'u' ? zinf_h5_attr_u64(f, rows[i].name, *(const uint64_t *)p)
                                   : zinf_h5_attr_f64(f, rows[i].name, *(const double *)p);
    }
    e |= zinf_h5_attr_u64(f, "meta_checksum", meta_sum(&a, cfg));
    const char *groups[] = {"/meta", "/master", "/optim", "/optim/m", "/optim/v"};
    for (int i = 0; i < 5 && !e; i++) {
        hid_t g = H5Gcreate2(f, groups[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        e |= g < 0;
        if (g >= 0) H5Gclose(g);
    }
    e |= !e && write_text(f, "/meta/config", cfg);
    /* the datasets: contiguous, their space allocated now and never filled, so that each rank
     * writes its bytes at a known offset and the space can be reserved before anything is */
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    int64_t end = 0;
    int di = 0;
    for (int u = 0; u < m->nunits && !e; u++)
        for (int k = 0; k < 3 && !e; k++)
            for (int t = 0; t < m->units[u].ntensors && !e; t++, di++) {
                const zinf_tensor_view *tv = &m->units[u].t[t];
                char name[160];
                snprintf(name, sizeof name, "%s/%s", zinf_ckpt_group[k], tv->name);
                hid_t fs = file_space(tv);
                hid_t d = H5Dcreate2(f, name, H5T_IEEE_F32LE, fs, H5P_DEFAULT, dcpl, H5P_DEFAULT);
                haddr_t ad = d >= 0 ? H5Dget_offset(d) : HADDR_UNDEF;
                e |= d < 0 || ad == HADDR_UNDEF || zinf_h5_attr_u64(d, "checksum", 0) ||
                     zinf_h5_attr_i64(d, "unit_index", u) || zinf_h5_attr_i64(d, "unit_offset", tv->offset);
                if (ad != HADDR_UNDEF) {
                    offs[di] = (int64_t)ad;
                    if ((int64_t)ad + tv->numel * 4 > end) end = (int64_t)ad + tv->numel * 4;
                }
                if (d >= 0) H5Dclose(d);
                H5Sclose(fs);
            }
    H5Pclose(dcpl);
    if (H5Fclose(f) < 0) e = 1;
    *size = end;
    return e ? zinf_errc(ZINF_EIO, "%s: cannot write the checkpoint's layout (disk full?)", path) : 0;
}

int zinf_ckf_set_sums(const char *path, const zinf_model *m, const uint64_t *sums)
{
    hid_t fapl = fapl_new();
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, fapl);
    H5Pclose(fapl);
    if (f < 0) return zinf_errc(ZINF_EIO, "%s: cannot reopen the checkpoint to write its checksums", path);
    int e = 0, di = 0;
    for (int u = 0; u < m->nunits && !e; u++)
        for (int k = 0; k < 3 && !e; k++)
            for (int t = 0; t < m->units[u].ntensors && !e; t++, di++) {
                char name[160];
                snprintf(name, sizeof name, "%s/%s", zinf_ckpt_group[k], m->units[u].t[t].name);
                hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
                hid_t at = d >= 0 ? H5Aopen(d, "checksum", H5P_DEFAULT) : -1;
                e |= at < 0 || H5Awrite(at, H5T_NATIVE_UINT64, &sums[di]) < 0;
                if (at >= 0) H5Aclose(at);
                if (d >= 0) H5Dclose(d);
            }
    if (H5Fclose(f) < 0) e = 1;
    return e ? zinf_errc(ZINF_EIO, "%s: cannot write the datasets' checksums (disk full?)", path) : 0;
}

int64_t zinf_ckpt_bytes(const zinf_model *m)
{
    int64_t n = 0, nd = 0;
    for (int u = 0; u < m->nunits; u++)
        for (int t = 0; t < m->units[u].ntensors; t++) n += m->units[u].t[t].numel, nd++;
    return 12 * n + 3 * nd * 1024 + (1 << 16);
}

int zinf_ckf_read_params(const zinf_ckf *c, const zinf_model *m, int (*put)(void *ctx, int u, const float *vals),
                         void *ctx)
{
    int64_t maxu = 1;
    for (int u = 0; u < m->nunits; u++) maxu = m->units[u].numel > maxu ? m->units[u].numel : maxu;
    float *buf = malloc((size_t)maxu * 4);
    if (!buf) return zinf_errc(ZINF_ENOMEM, "out of host memory for a unit of %lld parameters", (long long)maxu);
    int rc = 0;
    for (int u = 0; u < m->nunits && !rc; u++) {
        for (int t = 0; t < m->units[u].ntensors && !rc; t++) {
            const zinf_tensor_view *tv = &m->units[u].t[t];
            hid_t d;
            uint64_t sum;
            rc = zinf_ckf_tensor(c, 0, tv, &d, &sum);
            if (!rc) rc = zinf_ckf_read(c, 0, d, tv, 0, tv->numel, buf + tv->offset);
            if (d >= 0) H5Dclose(d);
        }
        if (!rc) rc = put(ctx, u, buf);
    }
    free(buf);
    return rc;
}
