/* Hugging Face interchange through the model's family: see hf.h. */
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
#include "family.h"

/* ---------------------------------------------------------------- names -------------------- */
void zinf_hf_tensor(const zinf_model *m, int u, int t, char *name, size_t cap, int64_t shape[2], bool *transposed)
{
    const zinf_tensor_view *tv = &m->units[u].t[t];
    zinf_hf_part part[ZINF_HF_MAX_PARTS];
    m->f->hf_parts(m, u, t, part); /* the first part: a family with fused tensors exports by parts */
    snprintf(name, cap, "%s", part[0].name);
    *transposed = part[0].transposed;
    shape[0] = part[0].transposed ? tv->shape[1] : part[0].rows;
    shape[1] = part[0].transposed ? part[0].rows : tv->shape[1];
}

char *zinf_hf_config_text(const zinf_model_cfg *c, zinf_dtype dt)
{
    const zinf_family *f = zinf_family_find(c->model_type);
    return f ? f->hf_config(c, dt) : NULL;
}

/* ---------------------------------------------------------------- config.json -------------- */
/* The model DIR/config.json describes (its model_type's family reads its fields) must be the
 * run's. */
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
    zinf_model_cfg got;
    int rc = zinf_model_cfg_from_json(&got, o, path);
    json_decref(o);
    char key[64], want[128], has[128];
    int d = rc ? rc : zinf_model_cfg_diff(&got, c, key, sizeof key, has, want, sizeof has);
    if (d > 0) return zinf_err("%s: %s is %s, this run's model has %s", path, key, has, want);
    return d;
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

/* Find `name` (or the name without the family's prefix, as the headless model - GPT2Model -
 * saves it), check its dtype, shape and extent. */
static int st_find(const st_file *s, const char *name, const char *prefix, const int64_t shape[2], st_tensor *out)
{
    json_t *e = json_object_get(s->hdr, name);
    size_t np = strlen(prefix);
    if (!e && np && !strncmp(name, prefix, np)) e = json_object_get(s->hdr, name + np);
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

/* The elements of [a, b) of zinf tensor tv (counted from the tensor's start) that HF tensor src,
 * part p of it, holds, into dst (dst[0] is element a); the others are left alone. A transposed
 * part is read in bands of 16 zinf rows: each HF row then gives 16 neighbouring values, not one
 * per page. */
static void fill(const zinf_tensor_view *tv, const zinf_hf_part *p, const st_tensor *src, int64_t a, int64_t b,
                 float *dst)
{
    int64_t C = tv->shape[1] ? tv->shape[1] : 1;
    int64_t lo = p->row0 * C, s = a > lo ? a : lo, hi = (p->row0 + p->rows) * C, e = b < hi ? b : hi;
    if (s >= e) return;
    if (!p->transposed) {
        for (int64_t x = s; x < e; x++) dst[x - a] = st_at(src, x - lo);
        return;
    }
    int64_t R = p->rows, end = p->row0 + p->rows;
    for (int64_t r0 = s / C; r0 <= (e - 1) / C; r0 += 16) {
        int64_t r1 = r0 + 16 < end ? r0 + 16 : end;
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = r0; r < r1; r++) {
                int64_t x = r * C + c;
                if (x >= s && x < e) dst[x - a] = st_at(src, c * R + (r - p->row0));
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
    st_tensor *src = calloc((size_t)ntens * ZINF_HF_MAX_PARTS, sizeof *src);
    zinf_hf_part *part = calloc((size_t)ntens * ZINF_HF_MAX_PARTS, sizeof *part);
    int *nparts = calloc((size_t)ntens, sizeof *nparts);
    if (!rc && (!src || !part || !nparts)) rc = zinf_errc(ZINF_ENOMEM, "out of host memory");
    int64_t maxp = 1;
    for (int u = 0, i = 0; u < m->nunits && !rc; u++) {
        int64_t lo, len;
        zinf_zero_ckpt_range(z, u, false, &lo, &len);
        maxp = len > maxp ? len : maxp;
        for (int t = 0; t < m->units[u].ntensors && !rc; t++, i++) {
            const zinf_tensor_view *tv = &m->units[u].t[t];
            zinf_hf_part *pp = &part[(size_t)i * ZINF_HF_MAX_PARTS];
            nparts[i] = m->f->hf_parts(m, u, t, pp);
            for (int k = 0; k < nparts[i] && !rc; k++) {
                int64_t shape[2] = {pp[k].transposed ? tv->shape[1] : pp[k].rows,
                                    pp[k].transposed ? pp[k].rows : tv->shape[1]};
                rc = st_find(&sf, pp[k].name, m->f->hf_prefix, shape, &src[(size_t)i * ZINF_HF_MAX_PARTS + k]);
            }
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
            for (int k = 0; b > a && k < nparts[i]; k++)
                fill(tv, &part[(size_t)i * ZINF_HF_MAX_PARTS + k], &src[(size_t)i * ZINF_HF_MAX_PARTS + k],
                     a - tv->offset, b - tv->offset, buf + (a - lo));
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
    free(part);
    free(nparts);
    st_close(&sf);
    /* each agree above printed a failure once; only the last step is still to agree on */
    if (!rc) rc = zinf_comm_agree(comm, zinf_zero_ckpt_params_from_master(z));
    return rc;
}
