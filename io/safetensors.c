/* safetensors files and directories, read and written: see safetensors.h and man/zinf-hf.5. */
#define _GNU_SOURCE /* O_DIRECTORY */
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "file.h"
#include "swap.h"

#define MAX_HEADER 100000000ull /* the format's limit (safetensors' MAX_HEADER_SIZE) */
#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"

/* ---------------------------------------------------------------- dtypes ------------------- */
/* every dtype the format defines, with its bits per element; zinf reads the three floats */
static const struct st_dtype {
    const char *name;
    int bits;
    int zdt; /* a zinf_dtype, or -1 */
} dtypes[] = {
    {"F32", 32, ZINF_F32},   {"BF16", 16, ZINF_BF16}, {"F16", 16, ZINF_F16}, {"F64", 64, -1},
    {"BOOL", 8, -1},         {"U8", 8, -1},           {"I8", 8, -1},         {"I16", 16, -1},
    {"U16", 16, -1},         {"I32", 32, -1},         {"U32", 32, -1},       {"I64", 64, -1},
    {"U64", 64, -1},         {"C64", 64, -1},         {"F8_E4M3", 8, -1},    {"F8_E5M2", 8, -1},
    {"F8_E8M0", 8, -1},      {"F8_E4M3FNUZ", 8, -1},  {"F8_E5M2FNUZ", 8, -1}, {"F4", 4, -1},
    {"F6_E2M3", 6, -1},      {"F6_E3M2", 6, -1},
};

static const struct st_dtype *dtype_by_name(const char *s)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(dtypes[i].name, s)) return &dtypes[i];
    return NULL;
}

static const char *dtype_name(zinf_dtype dt) { return dt == ZINF_BF16 ? "BF16" : dt == ZINF_F16 ? "F16" : "F32"; }

static void fmt_shape(char *b, size_t cap, const int64_t *shape, int ndim)
{
    size_t o = (size_t)snprintf(b, cap, "[");
    for (int i = 0; i < ndim && o < cap; i++) o += (size_t)snprintf(b + o, cap - o, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (o < cap) snprintf(b + o, cap - o, "]");
}

/* ---------------------------------------------------------------- one file ----------------- */
struct zinf_st_file {
    char path[4096];
    int fd;
    uint64_t size, data_start, data_len;
    json_t *hdr;
    int n;
    zinf_st_tensor *t; /* by data_offsets */
};

static int by_begin(const void *a, const void *b)
{
    const zinf_st_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

static uint64_t le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

/* all of [off, off + n) or an error naming the file */
static int pread_full(const zinf_st_file *f, void *buf, size_t n, uint64_t off, const char *what)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = pread(f->fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return zinf_errc(-errno, "%s: reading %s: %s", f->path, what, strerror(errno));
        if (r == 0) return zinf_errc(ZINF_EIO, "%s: %s ends past the end of the file (truncated since it was opened?)", f->path, what);
        got += (size_t)r;
    }
    return 0;
}

/* one header entry into t: dtype, shape, data_offsets and their agreement */
static int parse_entry(const zinf_st_file *f, const char *name, json_t *e, zinf_st_tensor *t)
{
    json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"), *off = json_object_get(e, "data_offsets");
    if (!json_is_object(e) || !json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) || json_array_size(off) != 2)
        return zinf_err("%s: tensor %s: the header entry lacks dtype, shape or data_offsets [begin, end]", f->path, name);
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = json_string_value(dt);
    const struct st_dtype *d = dtype_by_name(t->dtype);
    if (!d) return zinf_err("%s: tensor %s has dtype %s, which safetensors does not define", f->path, name, t->dtype);
    t->readable = d->zdt >= 0;
    t->dt = d->zdt >= 0 ? (zinf_dtype)d->zdt : ZINF_F32;
    if (json_array_size(sh) > ZINF_ST_MAX_DIMS)
        return zinf_err("%s: tensor %s has %zu dimensions, zinf reads at most %d", f->path, name, json_array_size(sh), ZINF_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(sh);
    t->numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        json_t *v = json_array_get(sh, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return zinf_err("%s: tensor %s: shape holds something other than a non-negative integer", f->path, name);
        t->shape[i] = json_integer_value(v);
        if (t->shape[i] && t->numel > (INT64_MAX / 64) / t->shape[i])
            return zinf_err("%s: tensor %s: shape too large", f->path, name);
        t->numel *= t->shape[i];
    }
    json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 || json_integer_value(en) < json_integer_value(b))
        return zinf_err("%s: tensor %s: data_offsets are not two integers 0 <= begin <= end", f->path, name);
    t->begin = (uint64_t)json_integer_value(b);
    t->end = (uint64_t)json_integer_value(en);
    uint64_t bits = (uint64_t)t->numel * (uint64_t)d->bits;
    if (bits % 8 || bits / 8 != t->end - t->begin) {
        char s[160];
        fmt_shape(s, sizeof s, t->shape, t->ndim);
        return zinf_err("%s: tensor %s: shape %s of %s is %llu%s bytes, its data_offsets [%llu,%llu] hold %llu", f->path,
                        name, s, t->dtype, (unsigned long long)(bits / 8), bits % 8 ? " and a fraction of" : "",
                        (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)(t->end - t->begin));
    }
    return 0;
}

static int parse_header(zinf_st_file *f)
{
    unsigned char len8[8];
    if (f->size < 8)
        return zinf_err("%s: %llu bytes, shorter than the 8-byte header length: not a safetensors file", f->path,
                        (unsigned long long)f->size);
    ZINF_TRY(pread_full(f, len8, 8, 0, "the header length"));
    uint64_t n = le64(len8);
    if (n > f->size - 8 || n > MAX_HEADER)
        return zinf_err("%s: header length %llu does not fit the file's %llu bytes: not a safetensors file, or truncated",
                        f->path, (unsigned long long)n, (unsigned long long)f->size);
    char *h = malloc(n ? n : 1);
    if (!h) return zinf_errc(ZINF_ENOMEM, "%s: out of host memory for a %llu-byte header", f->path, (unsigned long long)n);
    int rc = pread_full(f, h, n, 8, "the header");
    json_error_t je;
    if (!rc) f->hdr = json_loadb(h, n, JSON_REJECT_DUPLICATES, &je);
    free(h);
    if (rc) return rc;
    if (!f->hdr && json_error_code(&je) == json_error_numeric_overflow) /* jansson's "too big integer" */
        return zinf_err("%s: the header holds a number past 2^63 (header byte %d), which no offset or shape in a "
                        "file can be: a corrupted file", f->path, je.position);
    if (!f->hdr) return zinf_err("%s: the header is not JSON: %s (header byte %d)", f->path, je.text, je.position);
    if (!json_is_object(f->hdr)) return zinf_err("%s: the header is JSON but not an object", f->path);
    f->data_start = 8 + n;
    f->data_len = f->size - 8 - n;

    json_t *meta = json_object_get(f->hdr, "__metadata__"), *v;
    const char *key;
    if (meta) {
        if (!json_is_object(meta)) return zinf_err("%s: __metadata__ is not an object", f->path);
        json_object_foreach(meta, key, v) if (!json_is_string(v))
            return zinf_err("%s: __metadata__ entry %s is not a string", f->path, key);
    }
    f->t = calloc(json_object_size(f->hdr) + 1, sizeof *f->t);
    if (!f->t) return zinf_errc(ZINF_ENOMEM, "%s: out of host memory", f->path);
    json_object_foreach(f->hdr, key, v) {
        if (!strcmp(key, "__metadata__")) continue;
        ZINF_TRY(parse_entry(f, key, v, &f->t[f->n]));
        f->n++;
    }
    qsort(f->t, (size_t)f->n, sizeof *f->t, by_begin);
    /* in offset order: the first tensor past the end names a truncated file; then overlaps */
    for (int i = 0; i < f->n; i++)
        if (f->t[i].end > f->data_len)
            return zinf_err("%s: tensor %s: data_offsets [%llu,%llu] end past the file's %llu bytes of data "
                            "(a truncated file?)", f->path, f->t[i].name, (unsigned long long)f->t[i].begin,
                            (unsigned long long)f->t[i].end, (unsigned long long)f->data_len);
    for (int i = 1; i < f->n; i++)
        if (f->t[i].begin < f->t[i - 1].end)
            return zinf_err("%s: tensors %s [%llu,%llu] and %s [%llu,%llu] overlap", f->path, f->t[i - 1].name,
                            (unsigned long long)f->t[i - 1].begin, (unsigned long long)f->t[i - 1].end, f->t[i].name,
                            (unsigned long long)f->t[i].begin, (unsigned long long)f->t[i].end);
    return 0;
}

int zinf_st_open(zinf_st_file **out, const char *path)
{
    *out = NULL;
    zinf_st_file *f = calloc(1, sizeof *f);
    if (!f) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    snprintf(f->path, sizeof f->path, "%s", path);
    /* a FIFO is refused at once instead of blocking the open */
    struct stat st;
    int rc = zinf_open_regular(NULL, path, &f->fd, &st);
    if (rc) {
        free(f);
        return rc;
    }
    f->size = (uint64_t)st.st_size, rc = parse_header(f);
    if (rc) {
        zinf_st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

void zinf_st_close(zinf_st_file *f)
{
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    if (f->hdr) json_decref(f->hdr);
    free(f->t);
    free(f);
}

const char *zinf_st_path(const zinf_st_file *f) { return f->path; }
int zinf_st_count(const zinf_st_file *f) { return f->n; }
const zinf_st_tensor *zinf_st_at(const zinf_st_file *f, int i) { return i >= 0 && i < f->n ? &f->t[i] : NULL; }

const zinf_st_tensor *zinf_st_find(const zinf_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

const char *zinf_st_meta(const zinf_st_file *f, const char *key)
{
    return json_string_value(json_object_get(json_object_get(f->hdr, "__metadata__"), key));
}

/* n little-endian values of dt at q into dst[0], dst[stride], ... as fp32. BF16 is the top half
 * of an fp32 (zinf_bf16_to_f32, written out here so that the loop vectorises); a reader's chunk (a
 * million values) is spread over the host's cores, zinf_st_read's 64 KiB stays on one. */
static void to_f32(const unsigned char *q, zinf_dtype dt, int64_t n, float *dst, int64_t stride)
{
    if (dt == ZINF_F32) {
#pragma omp parallel for schedule(static) if (n >= (1 << 18))
        for (int64_t i = 0; i < n; i++) {
            const unsigned char *p = q + 4 * i;
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            memcpy(&dst[i * stride], &u, 4);
        }
    } else if (dt == ZINF_BF16) {
#pragma omp parallel for schedule(static) if (n >= (1 << 18))
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = ((uint32_t)q[2 * i] | (uint32_t)q[2 * i + 1] << 8) << 16;
            memcpy(&dst[i * stride], &u, 4);
        }
    } else {
#pragma omp parallel for schedule(static) if (n >= (1 << 18))
        for (int64_t i = 0; i < n; i++) dst[i * stride] = zinf_f16_to_f32((uint16_t)(q[2 * i] | q[2 * i + 1] << 8));
    }
}

/* a range zinf_st_read (or a reader) can read, or the message that refuses it */
static int check_range(const zinf_st_file *f, const zinf_st_tensor *t, int64_t first, int64_t n)
{
    if (!t->readable) return zinf_err("%s: tensor %s has dtype %s; zinf reads F32, BF16 and F16", f->path, t->name, t->dtype);
    if (first < 0 || n < 0 || first > t->numel - n)
        return zinf_err("%s: tensor %s: elements [%lld, %lld) asked for, it has %lld", f->path, t->name, (long long)first,
                        (long long)(first + n), (long long)t->numel);
    return 0;
}

int zinf_st_read(const zinf_st_file *f, const zinf_st_tensor *t, int64_t first, int64_t n, float *dst)
{
    ZINF_TRY(check_range(f, t, first, n));
    int es = t->dt == ZINF_F32 ? 4 : 2;
    unsigned char b[1 << 16];
    char what[200];
    snprintf(what, sizeof what, "tensor %s", t->name);
    while (n > 0) {
        int64_t k = n < (int64_t)sizeof b / es ? n : (int64_t)sizeof b / es;
        ZINF_TRY(pread_full(f, b, (size_t)(k * es), f->data_start + t->begin + (uint64_t)(first * es), what));
        to_f32(b, t->dt, k, dst, 1);
        first += k, n -= k, dst += k;
    }
    return 0;
}

/* ---------------------------------------------------------------- a directory -------------- */
struct zinf_st_dir {
    char dir[4096], index[4200];
    json_t *weight_map; /* NULL: one file */
    int nf;
    zinf_st_file **f;
    char **base; /* each file's name in dir */
};

void zinf_st_dir_close(zinf_st_dir *d)
{
    if (!d) return;
    for (int i = 0; i < d->nf; i++) {
        zinf_st_close(d->f[i]);
        free(d->base[i]);
    }
    free(d->f);
    free(d->base);
    if (d->weight_map) json_decref(d->weight_map);
    free(d);
}

static int dir_add(zinf_st_dir *d, const char *base)
{
    for (int i = 0; i < d->nf; i++)
        if (!strcmp(d->base[i], base)) return 0;
    zinf_st_file **f = realloc(d->f, (size_t)(d->nf + 1) * sizeof *f);
    if (f) d->f = f;
    char **b = realloc(d->base, (size_t)(d->nf + 1) * sizeof *b);
    if (b) d->base = b;
    char *s = strdup(base);
    if (!f || !b || !s) {
        free(s);
        return zinf_errc(ZINF_ENOMEM, "out of host memory");
    }
    char path[8300];
    snprintf(path, sizeof path, "%s/%s", d->dir, base);
    int rc = 0;
    if (d->weight_map && access(path, F_OK))
        rc = zinf_errc(ZINF_EINVAL, "%s names shard %s, which is missing (%s)", d->index, base, strerror(errno));
    if (!rc) rc = zinf_st_open(&d->f[d->nf], path);
    if (rc) {
        free(s);
        return rc;
    }
    d->base[d->nf++] = s;
    return 0;
}

int zinf_st_dir_open(zinf_st_dir **out, const char *dir)
{
    *out = NULL;
    zinf_st_dir *d = calloc(1, sizeof *d);
    if (!d) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    snprintf(d->index, sizeof d->index, "%s/" INDEX_NAME, dir);
    int rc = 0;
    if (!access(d->index, F_OK)) {
        json_error_t je;
        rc = zinf_refuse_irregular(NULL, d->index);
        json_t *o = rc ? NULL : json_load_file(d->index, JSON_REJECT_DUPLICATES, &je);
        json_t *wm = json_object_get(o, "weight_map"), *v;
        const char *key;
        if (rc) {
        } else if (!o) rc = zinf_err("%s:%d:%d: malformed JSON: %s", d->index, je.line, je.column, je.text);
        else if (!json_is_object(wm)) rc = zinf_err("%s: no weight_map object", d->index);
        else {
            d->weight_map = json_incref(wm);
            json_object_foreach(wm, key, v) {
                const char *s = json_string_value(v);
                if (!s || !*s || strchr(s, '/') || !strcmp(s, "..") || !strcmp(s, "."))
                    rc = zinf_err("%s: weight_map's %s is not a file name in the directory", d->index, key);
                if (!rc) rc = dir_add(d, s);
                if (rc) break;
            }
        }
        if (o) json_decref(o);
    } else {
        char path[4200];
        snprintf(path, sizeof path, "%s/" SINGLE_NAME, dir);
        if (access(path, F_OK) && errno == ENOENT) {
            struct stat st;
            rc = stat(dir, &st) ? zinf_errc(-errno, "%s: %s", dir, strerror(errno))
                                : zinf_err("%s: neither %s nor " INDEX_NAME " is there", dir, SINGLE_NAME);
        } else rc = dir_add(d, SINGLE_NAME);
    }
    if (rc) {
        zinf_st_dir_close(d);
        return rc;
    }
    *out = d;
    return 0;
}

bool zinf_st_dir_sharded(const zinf_st_dir *d) { return d->weight_map != NULL; }
int zinf_st_dir_files(const zinf_st_dir *d) { return d->nf; }
const zinf_st_file *zinf_st_dir_file(const zinf_st_dir *d, int i) { return i >= 0 && i < d->nf ? d->f[i] : NULL; }

/* the file name must be in, or NULL: the index's entry, or the one file */
static int file_of(const zinf_st_dir *d, const char *name)
{
    if (!d->weight_map) return 0;
    const char *s = json_string_value(json_object_get(d->weight_map, name));
    for (int i = 0; s && i < d->nf; i++)
        if (!strcmp(d->base[i], s)) return i;
    return -1;
}

const zinf_st_tensor *zinf_st_dir_find(const zinf_st_dir *d, const char *name, const zinf_st_file **file)
{
    int i = file_of(d, name);
    const zinf_st_tensor *t = i >= 0 ? zinf_st_find(d->f[i], name) : NULL;
    *file = t ? d->f[i] : NULL;
    return t;
}

int zinf_st_dir_missing(const zinf_st_dir *d, const char *name)
{
    int i = file_of(d, name);
    if (i < 0) return zinf_err("%s: tensor %s is missing (its weight_map does not name it)", d->index, name);
    if (d->weight_map) return zinf_err("%s: tensor %s is missing (the index puts it there)", d->f[i]->path, name);
    return zinf_err("%s: tensor %s is missing", d->f[i]->path, name);
}

/* ---------------------------------------------------------------- reading in bulk ---------- */
typedef struct st_job {
    int file;
    zinf_dtype dt;
    int es;
    uint64_t off; /* the range's first byte in the file */
    int64_t n, stride;
    float *dst;
} st_job;

typedef struct st_slot {
    zinf_swap_req *req;
    char *buf;
    const st_job *j;
    int64_t e0, e1; /* the job's elements this chunk holds */
    size_t skip;    /* element e0's byte in buf */
} st_slot;

struct zinf_st_reader {
    const zinf_st_dir *d;
    zinf_swap *sw;
    bool direct;
    char why[512];
    char *buf; /* slots x slot bytes, aligned */
    size_t slot;
    int nslots;
    st_slot *s;
    st_job *jobs;
    int njobs, capjobs;
    uint64_t read, wanted;
    pthread_t th; /* zinf_st_reader_start's */
    bool running;
    int th_rc;
    char th_msg[1024];
};

#define ST_ALIGN ZINF_SWAP_ALIGN

void zinf_st_reader_close(zinf_st_reader *r)
{
    if (!r) return;
    if (r->running) zinf_st_reader_wait(r);
    zinf_swap_close(r->sw);
    free(r->buf);
    free(r->s);
    free(r->jobs);
    free(r);
}

int zinf_st_reader_open(zinf_st_reader **out, const zinf_st_dir *d, size_t buffer_bytes, int slots)
{
    *out = NULL;
    if (!buffer_bytes) buffer_bytes = 64u << 20;
    if (slots <= 0) slots = 16;
    size_t slot = buffer_bytes / (size_t)slots / ST_ALIGN * ST_ALIGN;
    if (slot < 3 * ST_ALIGN) return zinf_err("safetensors reader: %zu bytes in %d slots: a slot needs %d bytes at least",
                                              buffer_bytes, slots, 3 * ST_ALIGN);
    zinf_st_reader *r = calloc(1, sizeof *r);
    const char **paths = calloc((size_t)d->nf + 1, sizeof *paths);
    if (r) {
        r->d = d, r->slot = slot, r->nslots = slots;
        r->buf = aligned_alloc(ST_ALIGN, slot * (size_t)slots);
        r->s = calloc((size_t)slots, sizeof *r->s);
    }
    if (!r || !paths || !r->buf || !r->s) {
        free(paths);
        zinf_st_reader_close(r);
        return zinf_errc(ZINF_ENOMEM, "out of host memory for a %zu-byte read buffer", buffer_bytes);
    }
    for (int i = 0; i < d->nf; i++) paths[i] = d->f[i]->path;
    /* io_uring with O_DIRECT; without io_uring, psync with O_DIRECT; a file system without
     * O_DIRECT, psync through the page cache (threads in place of a ring's depth) */
    static const struct { const char *engine; int buffered, threads; } ways[] = {
        {"io_uring", 0, 1}, {"psync", 0, 4}, {"psync", 1, 4}};
    int rc = 0;
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        zinf_swap_opts o;
        zinf_swap_opts_defaults(&o);
        o.engine = ways[w].engine;
        o.buffered = ways[w].buffered;
        o.intra_op_parallelism = ways[w].threads;
        o.block_size = slot < (1u << 20) ? slot : 1u << 20;
        o.queue_depth = 32;
        rc = zinf_swap_open_files(&r->sw, &o, paths, d->nf);
        if (!rc) break;
        if (!ways[w].buffered) snprintf(r->why, sizeof r->why, "%s", zinf_errmsg());
        if (rc == -EINVAL && !ways[w].buffered) w = sizeof ways / sizeof ways[0] - 2; /* to the buffered way */
    }
    free(paths);
    if (rc) {
        zinf_st_reader_close(r);
        return rc;
    }
    r->direct = zinf_swap_direct(r->sw);
    *out = r;
    return 0;
}

bool zinf_st_reader_direct(const zinf_st_reader *r, const char **why)
{
    if (why) *why = r->direct ? "" : r->why;
    return r->direct;
}

void zinf_st_reader_bytes(const zinf_st_reader *r, uint64_t *read, uint64_t *wanted)
{
    *read = r->read;
    *wanted = r->wanted;
}

int zinf_st_reader_add(zinf_st_reader *r, const zinf_st_file *f, const zinf_st_tensor *t, int64_t first, int64_t n,
                       float *dst, int64_t stride)
{
    ZINF_TRY(check_range(f, t, first, n));
    int file = -1;
    for (int i = 0; i < r->d->nf && file < 0; i++)
        if (r->d->f[i] == f) file = i;
    if (file < 0) return zinf_err("%s: not a file of the reader's directory %s", f->path, r->d->dir);
    if (!n) return 0;
    if (r->njobs == r->capjobs) {
        int cap = r->capjobs ? 2 * r->capjobs : 64;
        st_job *j = realloc(r->jobs, (size_t)cap * sizeof *j);
        if (!j) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        r->jobs = j, r->capjobs = cap;
    }
    int es = t->dt == ZINF_F32 ? 4 : 2;
    r->jobs[r->njobs++] = (st_job){.file = file, .dt = t->dt, .es = es, .n = n, .stride = stride, .dst = dst,
                                   .off = f->data_start + t->begin + (uint64_t)first * (uint64_t)es};
    return 0;
}

/* the oldest chunk in flight: waited for, converted (when all went well so far), its slot free */
static int st_finish(zinf_st_reader *r, st_slot *s, int rc)
{
    int w = zinf_swap_wait(r->sw, s->req);
    s->req = NULL;
    if (!rc && w) rc = zinf_err_prefix(w, "%s", r->d->f[s->j->file]->path);
    if (!rc) to_f32((const unsigned char *)s->buf + s->skip, s->j->dt, s->e1 - s->e0, s->j->dst + s->e0 * s->j->stride,
                    s->j->stride);
    return rc;
}

int zinf_st_reader_run(zinf_st_reader *r)
{
    int rc = 0, head = 0, busy = 0;
    for (int k = 0; k < r->njobs && !rc; k++) {
        const st_job *j = &r->jobs[k];
        /* a chunk's aligned superset is at most its bytes plus one block on each side */
        int64_t per = (int64_t)(r->slot - 2 * ST_ALIGN) / j->es;
        for (int64_t e0 = 0; e0 < j->n && !rc; e0 += per) {
            if (busy == r->nslots) {
                rc = st_finish(r, &r->s[head], rc);
                head = (head + 1) % r->nslots, busy--;
                if (rc) break;
            }
            st_slot *s = &r->s[(head + busy) % r->nslots];
            int64_t e1 = j->n - e0 < per ? j->n : e0 + per;
            uint64_t b = j->off + (uint64_t)e0 * (uint64_t)j->es, e = j->off + (uint64_t)e1 * (uint64_t)j->es;
            uint64_t a0 = b / ST_ALIGN * ST_ALIGN, a1 = (e + ST_ALIGN - 1) / ST_ALIGN * ST_ALIGN;
            *s = (st_slot){.buf = r->buf + (size_t)((s - r->s)) * r->slot, .j = j, .e0 = e0, .e1 = e1,
                           .skip = (size_t)(b - a0)};
            rc = zinf_swap_submit_file(r->sw, j->file, (int64_t)a0, s->buf, (size_t)(a1 - a0), &s->req);
            if (rc) break;
            busy++;
            r->read += a1 - a0;
            r->wanted += e - b;
        }
    }
    for (; busy; busy--, head = (head + 1) % r->nslots) rc = st_finish(r, &r->s[head], rc);
    r->njobs = 0;
    return rc;
}

static void *st_thread(void *arg)
{
    zinf_st_reader *r = arg;
    r->th_rc = zinf_st_reader_run(r);
    if (r->th_rc) snprintf(r->th_msg, sizeof r->th_msg, "%s", zinf_errmsg()); /* the message is per thread */
    return NULL;
}

int zinf_st_reader_start(zinf_st_reader *r)
{
    if (r->running) return zinf_err("safetensors reader: started twice without a wait");
    int e = pthread_create(&r->th, NULL, st_thread, r);
    if (e) return zinf_errc(-e, "safetensors reader: cannot start its thread: %s", strerror(e));
    r->running = true;
    return 0;
}

int zinf_st_reader_wait(zinf_st_reader *r)
{
    if (!r->running) return 0;
    pthread_join(r->th, NULL);
    r->running = false;
    return r->th_rc ? zinf_errc(r->th_rc, "%s", r->th_msg) : 0;
}

/* ---------------------------------------------------------------- writing ------------------ */
struct zinf_st_sink {
    FILE *fp;
    const char *path;
    const zinf_st_spec *t;
    uint64_t left; /* bytes the tensor still needs */
};

int zinf_st_sink_bytes(zinf_st_sink *s, const void *bytes, size_t n)
{
    if (n > s->left)
        return zinf_err("%s: tensor %s: %zu more bytes given than its %llu left", s->path, s->t->name, n,
                        (unsigned long long)s->left);
    if (n && fwrite(bytes, 1, n, s->fp) != n) return zinf_errc(ZINF_EIO, "%s: write failed (disk full?)", s->path);
    s->left -= n;
    return 0;
}

int zinf_st_sink_f32(zinf_st_sink *s, const float *x, int64_t n)
{
    unsigned char b[1 << 14];
    zinf_dtype dt = s->t->dt;
    int es = dt == ZINF_F32 ? 4 : 2;
    while (n > 0) {
        int64_t k = n < (int64_t)sizeof b / es ? n : (int64_t)sizeof b / es;
        for (int64_t i = 0; i < k; i++) {
            uint32_t u;
            if (dt == ZINF_F32) memcpy(&u, &x[i], 4);
            else u = dt == ZINF_BF16 ? zinf_f32_to_bf16(x[i]) : zinf_f32_to_f16(x[i]);
            for (int j = 0; j < es; j++) b[i * es + j] = (unsigned char)(u >> (8 * j));
        }
        ZINF_TRY(zinf_st_sink_bytes(s, b, (size_t)(k * es)));
        x += k, n -= k;
    }
    return 0;
}

static uint64_t spec_bytes(const zinf_st_spec *t)
{
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (uint64_t)t->shape[i];
    return n * (t->dt == ZINF_F32 ? 4 : 2);
}

static json_t *shape_json(const zinf_st_spec *t)
{
    json_t *a = json_array();
    for (int i = 0; i < t->ndim; i++) json_array_append_new(a, json_integer(t->shape[i]));
    return a;
}

/* the header of tensors [a, b), padded with spaces to a multiple of 8 bytes (the data then starts
 * aligned, as safetensors' own writer does) */
static char *shard_header(const zinf_st_spec *t, int a, int b, const char *const *meta, size_t *len)
{
    json_t *h = json_object(), *m = json_object();
    json_object_set_new(m, "format", json_string("pt")); /* transformers 4.x refuses a file without it */
    for (int i = 0; meta && meta[i] && meta[i + 1]; i += 2) json_object_set_new(m, meta[i], json_string(meta[i + 1]));
    json_object_set_new(h, "__metadata__", m);
    uint64_t off = 0;
    for (int i = a; i < b; i++) {
        uint64_t n = spec_bytes(&t[i]);
        json_object_set_new(h, t[i].name, json_pack("{s:s, s:o, s:[I,I]}", "dtype", dtype_name(t[i].dt), "shape",
                                                    shape_json(&t[i]), "data_offsets", (json_int_t)off,
                                                    (json_int_t)(off + n)));
        off += n;
    }
    char *s = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    if (!s) return NULL;
    size_t n = strlen(s), padded = (n + 7) / 8 * 8;
    char *p = realloc(s, padded + 1);
    if (!p) {
        free(s);
        return NULL;
    }
    memset(p + n, ' ', padded - n);
    p[padded] = 0;
    *len = padded;
    return p;
}

/* fflush, fsync and fclose fp: 0, or an error naming path */
static int close_synced(FILE *fp, const char *path, int rc)
{
    bool ok = !fflush(fp) && !fsync(fileno(fp));
    if (fclose(fp) || !ok) return rc ? rc : zinf_errc(ZINF_EIO, "%s: cannot complete the file (disk full?)", path);
    return rc;
}

static int write_shard(const char *path, const zinf_st_spec *t, int a, int b, const char *const *meta,
                       zinf_st_producer produce, void *ctx)
{
    size_t hlen;
    char *hdr = shard_header(t, a, b, meta, &hlen);
    if (!hdr) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        int e = errno;
        free(hdr);
        return zinf_errc(-e, "%s: %s", path, strerror(e));
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int rc = fwrite(len8, 1, 8, fp) != 8 || fwrite(hdr, 1, hlen, fp) != hlen
                 ? zinf_errc(ZINF_EIO, "%s: write failed (disk full?)", path)
                 : 0;
    free(hdr);
    for (int i = a; i < b && !rc; i++) {
        zinf_st_sink s = {.fp = fp, .path = path, .t = &t[i], .left = spec_bytes(&t[i])};
        uint64_t all = s.left;
        rc = produce(ctx, i, &s);
        if (!rc && s.left)
            rc = zinf_err("%s: tensor %s: %llu of its %llu bytes were produced", path, t[i].name,
                          (unsigned long long)(all - s.left), (unsigned long long)all);
    }
    return close_synced(fp, path, rc);
}

static int write_index(const char *path, const zinf_st_spec *t, int n, const int *shard, int S, uint64_t total)
{
    json_t *o = json_object(), *m = json_object(), *wm = json_object();
    int64_t params = 0;
    for (int i = 0; i < n; i++) {
        char f[64];
        snprintf(f, sizeof f, "model-%05d-of-%05d.safetensors", shard[i] + 1, S);
        json_object_set_new(wm, t[i].name, json_string(f));
        params += (int64_t)(spec_bytes(&t[i]) / (t[i].dt == ZINF_F32 ? 4 : 2));
    }
    json_object_set_new(m, "total_parameters", json_integer(params));
    json_object_set_new(m, "total_size", json_integer((json_int_t)total));
    json_object_set_new(o, "metadata", m);
    json_object_set_new(o, "weight_map", wm);
    /* as transformers writes it: json.dumps(index, indent=2, sort_keys=True) + "\n" */
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    if (!s) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    FILE *fp = fopen(path, "w");
    int rc = 0;
    if (!fp) rc = zinf_errc(-errno, "%s: %s", path, strerror(errno));
    else rc = close_synced(fp, path, fputs(s, fp) < 0 || fputc('\n', fp) == EOF ? zinf_errc(ZINF_EIO, "%s: write failed (disk full?)", path) : 0);
    free(s);
    return rc;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return zinf_errc(-errno, "%s: %s", dir, strerror(errno));
    int rc = fsync(fd) ? zinf_errc(-errno, "%s: fsync: %s", dir, strerror(errno)) : 0;
    close(fd);
    return rc;
}

/* files of an earlier export this one does not have: a single file beside shards, an index
 * beside a single file, shards of another count */
static void remove_stale(const char *dir, int S)
{
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *e;
    char path[8300];
    while ((e = readdir(dp))) {
        int k, of, end = 0;
        bool stale = false;
        if (strlen(e->d_name) == 32 && sscanf(e->d_name, "model-%5d-of-%5d.safetensors%n", &k, &of, &end) == 2 &&
            end == 32)
            stale = S == 1 || of != S;
        else if (!strcmp(e->d_name, SINGLE_NAME)) stale = S > 1;
        else if (!strcmp(e->d_name, INDEX_NAME)) stale = S == 1;
        if (!stale) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(dp);
}

int zinf_st_write_dir(const char *dir, const zinf_st_spec *t, int n, uint64_t max_shard, const char *const *meta,
                      zinf_st_producer produce, void *ctx, zinf_st_written *res)
{
    if (!max_shard) max_shard = ZINF_ST_DEFAULT_SHARD;
    /* the shards: tensors in order, a new shard where the next would pass max_shard; a tensor
     * larger than max_shard alone (huggingface_hub's split_state_dict_into_shards, in order) */
    int *shard = malloc((size_t)(n ? n : 1) * sizeof *shard);
    if (!shard) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    int S = 0;
    uint64_t cur = 0, total = 0;
    bool open_shard = false;
    for (int i = 0; i < n; i++) {
        uint64_t b = spec_bytes(&t[i]);
        if (open_shard && cur + b > max_shard) open_shard = false;
        if (!open_shard) S++, cur = 0, open_shard = true;
        shard[i] = S - 1;
        cur += b, total += b;
        if (b > max_shard) open_shard = false;
    }
    if (!S) S = 1; /* no tensors: one empty file */
    int ntmp = 0, rc = 0;
    char(*tmp)[4200] = calloc((size_t)S + 1, sizeof *tmp);
    if (!tmp) rc = zinf_errc(ZINF_ENOMEM, "out of host memory");
    for (int s = 0, a = 0; s < S && !rc; s++) {
        int b = a;
        while (b < n && shard[b] == s) b++;
        if (S == 1) snprintf(tmp[s], sizeof tmp[s], "%s/" SINGLE_NAME ".tmp", dir);
        else snprintf(tmp[s], sizeof tmp[s], "%s/model-%05d-of-%05d.safetensors.tmp", dir, s + 1, S);
        ntmp++;
        rc = write_shard(tmp[s], t, a, b, meta, produce, ctx);
        a = b;
    }
    if (!rc && S > 1) {
        snprintf(tmp[S], sizeof tmp[S], "%s/" INDEX_NAME ".tmp", dir);
        ntmp++;
        rc = write_index(tmp[S], t, n, shard, S, total);
    }
    /* every file is complete: each .tmp takes its name, the index last */
    for (int i = 0; i < ntmp && !rc; i++) {
        char final[4200];
        snprintf(final, sizeof final, "%.*s", (int)(strlen(tmp[i]) - 4), tmp[i]);
        if (rename(tmp[i], final)) rc = zinf_errc(-errno, "rename %s: %s", tmp[i], strerror(errno));
    }
    if (rc)
        for (int i = 0; i < ntmp; i++) unlink(tmp[i]); /* nothing half-written stays */
    if (!rc) {
        remove_stale(dir, S);
        rc = fsync_dir(dir);
    }
    if (!rc && res) res->shards = S, res->total_size = total;
    free(tmp);
    free(shard);
    return rc;
}

int zinf_st_parse_size(const char *text, uint64_t *bytes)
{
    static const struct { const char *unit; uint64_t mul; } units[] = {
        {"", 1}, {"GIB", 1ull << 30}, {"MIB", 1ull << 20}, {"KIB", 1ull << 10},
        {"GB", 1000000000ull}, {"MB", 1000000ull}, {"KB", 1000ull},
    };
    char *end;
    errno = 0;
    unsigned long long v = text[0] >= '0' && text[0] <= '9' ? strtoull(text, &end, 10) : 0;
    if (!v || errno) goto bad;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].unit)) continue;
        /* HF's rule: a unit of decimal bytes ending in a lower-case b counts bits ("5Gb") */
        uint64_t div = strlen(units[i].unit) == 2 && end[1] == 'b' ? 8 : 1;
        if (v > UINT64_MAX / units[i].mul) goto bad;
        *bytes = v * units[i].mul / div;
        if (*bytes) return 0;
    }
bad:
    return zinf_err("%s: expected a positive size as Hugging Face spells it (\"5GB\", \"500MB\", \"2GiB\") or a "
                    "byte count", text);
}
