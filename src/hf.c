/* Hugging Face interchange through the model's family: see hf.h. */
#include "hf.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "io/file.h"
#include "family.h"
#include "log.h"
#include "safetensors.h"

/* ---------------------------------------------------------------- names -------------------- */
void zinf_hf_part_shape(const zinf_tensor_view *tv, const zinf_hf_part *p, int64_t shape[2])
{
    shape[0] = p->transposed ? tv->shape[1] : p->rows;
    shape[1] = p->transposed ? p->rows : tv->shape[1];
}

void zinf_hf_tensor(const zinf_model *m, int u, int t, char *name, size_t cap, int64_t shape[2], bool *transposed)
{
    zinf_hf_part part[ZINF_HF_MAX_PARTS];
    m->f->hf_parts(m, u, t, part);
    snprintf(name, cap, "%s", part[0].name);
    *transposed = part[0].transposed;
    zinf_hf_part_shape(&m->units[u].t[t], &part[0], shape);
}

int zinf_hf_list(const zinf_model *m, zinf_hf_item **out, int *n)
{
    int cap = 0;
    for (int u = 0; u < m->nunits; u++) cap += m->units[u].ntensors * ZINF_HF_MAX_PARTS;
    zinf_hf_item *it = calloc((size_t)(cap ? cap : 1), sizeof *it);
    *out = it, *n = 0;
    if (!it) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    for (int u = 0; u < m->nunits; u++)
        for (int t = 0; t < m->units[u].ntensors; t++) {
            zinf_hf_part part[ZINF_HF_MAX_PARTS];
            int np = m->f->hf_parts(m, u, t, part);
            for (int k = 0; k < np; k++, (*n)++) {
                zinf_hf_item *x = &it[*n];
                x->u = u, x->t = t, x->k = k, x->nparts = np, x->part = part[k];
                zinf_hf_part_shape(&m->units[u].t[t], &part[k], x->shape);
            }
        }
    return 0;
}

char *zinf_hf_config_text(const zinf_model_cfg *c, zinf_dtype dt)
{
    const zinf_family *f = zinf_family_find(c->model_type);
    return f ? f->hf_config(c, dt) : NULL;
}

char *zinf_hf_generation_config(const char *config_json)
{
    json_t *c = json_loads(config_json, 0, NULL), *g = json_object();
    char *s = NULL;
    if (c && g) {
        /* what GenerationConfig.from_model_config takes from a config without generation fields */
        json_object_set_new(g, "_from_model_config", json_true());
        const char *keys[] = {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            json_t *v = json_object_get(c, keys[i]);
            if (v && !json_is_null(v)) json_object_set(g, keys[i], v);
        }
        s = json_dumps(g, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    }
    if (c) json_decref(c);
    if (g) json_decref(g);
    return s;
}

/* ---------------------------------------------------------------- writing ------------------ */
/* The producer io/safetensors asks for each HF tensor's values in order (zinf_hf_list's: a zinf
 * tensor's parts one after another). A part is its rows of the zinf tensor, read in blocks of
 * whole rows, or for a transposed one (GPT-2's Conv1D) in blocks of whole columns of its rows,
 * written transposed. After the last part the rows no part covers (the padded vocabulary) are
 * read too, written nowhere, so the source sees every element once. */
typedef struct hf_wr {
    const zinf_model *m;
    const zinf_hf_item *it;
    const zinf_hf_source *src;
    int64_t block;
    float *buf, *tbuf;
} hf_wr;

static int wr_rows(hf_wr *w, const zinf_hf_item *x, int64_t r0, int64_t r1, zinf_st_sink *s)
{
    const zinf_tensor_view *tv = &w->m->units[x->u].t[x->t];
    int64_t C = tv->shape[1] ? tv->shape[1] : 1, h = w->block / C > 0 ? w->block / C : 1;
    for (int64_t r = r0; r < r1; r += h) {
        int64_t nr = r1 - r < h ? r1 - r : h;
        ZINF_TRY(w->src->block(w->src->ctx, x->u, x->t, r, nr, 0, C, w->buf));
        if (s) ZINF_TRY(zinf_st_sink_f32(s, w->buf, nr * C));
    }
    return 0;
}

static int wr_transposed(hf_wr *w, const zinf_hf_item *x, zinf_st_sink *s)
{
    const zinf_tensor_view *tv = &w->m->units[x->u].t[x->t];
    int64_t C = tv->shape[1], R = x->part.rows, c = w->block / R > 0 ? w->block / R : 1;
    for (int64_t j0 = 0; j0 < C; j0 += c) {
        int64_t nc = C - j0 < c ? C - j0 : c;
        ZINF_TRY(w->src->block(w->src->ctx, x->u, x->t, x->part.row0, R, j0, nc, w->buf));
        for (int64_t j = 0; j < nc; j++)
            for (int64_t r = 0; r < R; r++) w->tbuf[j * R + r] = w->buf[r * nc + j];
        ZINF_TRY(zinf_st_sink_f32(s, w->tbuf, nc * R));
    }
    return 0;
}

static int wr_produce(void *ctx, int i, zinf_st_sink *s)
{
    hf_wr *w = ctx;
    const zinf_hf_item *x = &w->it[i];
    if (x->k == 0 && w->src->begin) ZINF_TRY(w->src->begin(w->src->ctx, x->u, x->t));
    ZINF_TRY(x->part.transposed ? wr_transposed(w, x, s) : wr_rows(w, x, x->part.row0, x->part.row0 + x->part.rows, s));
    if (x->k < x->nparts - 1) return 0;
    int64_t R = w->m->units[x->u].t[x->t].shape[0];
    for (int64_t r = 0; r < R;) {
        int64_t next = R;
        bool covered = false;
        for (const zinf_hf_item *q = x - x->k; q <= x; q++) {
            if (r >= q->part.row0 && r < q->part.row0 + q->part.rows) covered = true, next = q->part.row0 + q->part.rows;
            else if (q->part.row0 > r && q->part.row0 < next) next = q->part.row0;
        }
        if (!covered) ZINF_TRY(wr_rows(w, x, r, next, NULL));
        r = next;
    }
    return w->src->end ? w->src->end(w->src->ctx, x->u, x->t) : 0;
}

int zinf_hf_write(const char *dir, const zinf_model *m, zinf_dtype dt, uint64_t max_shard, const char *const *meta,
                  int64_t block, const zinf_hf_source *src, zinf_st_written *res)
{
    zinf_hf_item *it = NULL;
    int n = 0;
    int rc = zinf_hf_list(m, &it, &n);
    /* a block: `block` elements, or one row or one column where that is longer */
    int64_t cap = block > 0 ? block : 1;
    for (int u = 0; u < m->nunits; u++)
        for (int t = 0; t < m->units[u].ntensors; t++) {
            const zinf_tensor_view *tv = &m->units[u].t[t];
            cap = tv->shape[0] > cap ? tv->shape[0] : cap;
            cap = tv->shape[1] > cap ? tv->shape[1] : cap;
        }
    zinf_st_spec *spec = rc ? NULL : calloc((size_t)n + 1, sizeof *spec);
    hf_wr w = {.m = m, .it = it, .src = src, .block = block > 0 ? block : 1};
    w.buf = rc ? NULL : malloc((size_t)cap * 4);
    w.tbuf = rc ? NULL : malloc((size_t)cap * 4);
    if (!rc && (!spec || !w.buf || !w.tbuf)) rc = zinf_errc(ZINF_ENOMEM, "out of host memory");
    for (int i = 0; i < n && !rc; i++) {
        snprintf(spec[i].name, sizeof spec[i].name, "%s", it[i].part.name);
        spec[i].dt = dt;
        spec[i].ndim = it[i].shape[1] ? 2 : 1;
        spec[i].shape[0] = it[i].shape[0], spec[i].shape[1] = it[i].shape[1];
    }
    if (!rc) rc = zinf_st_write_dir(dir, spec, n, max_shard, meta, wr_produce, &w, res);
    free(w.buf);
    free(w.tbuf);
    free(spec);
    free(it);
    return rc;
}

/* ---------------------------------------------------------------- config.json -------------- */
/* The model DIR/config.json describes (its model_type's family reads its fields) must be the
 * run's. */
static int check_config(const char *dir, const zinf_model_cfg *c)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    ZINF_TRY(zinf_refuse_irregular("--init_from", path));
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

/* ---------------------------------------------------------------- import ------------------- */
/* Find item x's HF tensor in the directory, under its name or the name without the family's prefix
 * (as the headless model, GPT2Model, saves it), and check its dtype and shape. */
static int find_part(const zinf_st_dir *sd, const char *prefix, const zinf_hf_item *x, const zinf_st_file **f,
                     const zinf_st_tensor **t)
{
    const char *name = x->part.name;
    size_t np = strlen(prefix);
    *t = zinf_st_dir_find(sd, name, f);
    if (!*t && np && !strncmp(name, prefix, np)) *t = zinf_st_dir_find(sd, name + np, f);
    if (!*t) return zinf_st_dir_missing(sd, name);
    const char *path = zinf_st_path(*f);
    if (!(*t)->readable)
        return zinf_err("%s: tensor %s has dtype %s; zinf reads F32, BF16 and F16", path, name, (*t)->dtype);
    int nd = x->shape[1] ? 2 : 1;
    bool same = (*t)->ndim == nd;
    for (int i = 0; i < nd && same; i++) same = (*t)->shape[i] == x->shape[i];
    if (same) return 0;
    char got[200] = "[", want[64];
    for (int i = 0; i < (*t)->ndim; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "", (long long)(*t)->shape[i]);
    snprintf(got + strlen(got), sizeof got - strlen(got), "]");
    if (nd == 2) snprintf(want, sizeof want, "[%lld,%lld]", (long long)x->shape[0], (long long)x->shape[1]);
    else snprintf(want, sizeof want, "[%lld]", (long long)x->shape[0]);
    return zinf_err("%s: tensor %s has shape %s, this model needs %s", path, name, got, want);
}

/* Queue on rd the elements of [a, b) of zinf tensor tv (counted from the tensor's start) that HF
 * tensor t, part p of it, holds, to be read into dst (dst[0] is element a); the others are left
 * alone. Only the bytes of those elements are read: one range, or for a transposed part (HF's row c
 * is zinf's column c) one range of each HF row, landing a column of dst apart. */
static int fill(zinf_st_reader *rd, const zinf_tensor_view *tv, const zinf_hf_part *p, const zinf_st_file *f,
                const zinf_st_tensor *t, int64_t a, int64_t b, float *dst)
{
    int64_t C = tv->shape[1] ? tv->shape[1] : 1;
    int64_t lo = p->row0 * C, s = a > lo ? a : lo, hi = (p->row0 + p->rows) * C, e = b < hi ? b : hi;
    if (s >= e) return 0;
    if (!p->transposed) return zinf_st_reader_add(rd, f, t, s - lo, e - s, dst + (s - a), 1);
    for (int64_t c = 0; c < C; c++) {
        /* zinf's rows r of column c with s <= r*C + c < e */
        int64_t r0 = s - c <= 0 ? 0 : (s - c + C - 1) / C, r1 = e - 1 - c < 0 ? 0 : (e - 1 - c) / C + 1;
        if (r1 > r0)
            ZINF_TRY(zinf_st_reader_add(rd, f, t, c * p->rows + (r0 - p->row0), r1 - r0, dst + (r0 * C + c - a), C));
    }
    return 0;
}

/* Elements [lo, lo + len) of unit u (a rank's part, or all of it) queued on the reader into b,
 * zeroed first (rows HF lacks stay zero); *i walks the items, which are in unit order. */
static int queue_unit(zinf_st_reader *rd, const zinf_model *m, int64_t lo, int64_t len, const zinf_hf_item *it, int n,
                      int *i, const zinf_st_file **sf, const zinf_st_tensor **st, int u, float *b)
{
    const zinf_unit *un = &m->units[u];
    memset(b, 0, (size_t)len * 4);
    for (; *i < n && it[*i].u == u; (*i)++) {
        const zinf_tensor_view *tv = &un->t[it[*i].t];
        int64_t a = lo > tv->offset ? lo : tv->offset;
        int64_t e = lo + len < tv->offset + tv->numel ? lo + len : tv->offset + tv->numel;
        if (e > a) ZINF_TRY(fill(rd, tv, &it[*i].part, sf[*i], st[*i], a - tv->offset, e - tv->offset, b + (a - lo)));
    }
    return 0;
}

/* Elements [lo, lo + len) of unit u, as read: a NaN or an infinity (a corrupted file: no
 * training step could use it) is one line naming the tensor and the element, before training;
 * dir, when not NULL, begins it */
static int finite_part(const zinf_model *m, int u, int64_t lo, const float *b, int64_t len, const char *dir)
{
    for (int64_t k = 0; k < len; k++) {
        if (isfinite(b[k])) continue;
        const zinf_unit *un = &m->units[u];
        int64_t at = lo + k;
        for (int t = 0; t < un->ntensors; t++)
            if (at >= un->t[t].offset && at < un->t[t].offset + un->t[t].numel)
                return zinf_err("%s%stensor %s holds %s at element %lld: the weights are corrupted", dir ? dir : "",
                                dir ? ": " : "", un->t[t].name, isnan(b[k]) ? "NaN" : b[k] > 0 ? "+Inf" : "-Inf",
                                (long long)(at - un->t[t].offset));
        return zinf_err("%s%sunit %s holds a value that is not finite at element %lld", dir ? dir : "", dir ? ": " : "",
                        un->name, (long long)at);
    }
    return 0;
}

/* A directory's HF tensors for model m: its config checked, every tensor of zinf_hf_list found and
 * its dtype and shape checked (sf[i], st[i] for item i). src_close undoes it, also after a failure. */
typedef struct hf_src {
    zinf_st_dir *sd;
    zinf_hf_item *it;
    int n;
    const zinf_st_file **sf;
    const zinf_st_tensor **st;
} hf_src;

static int src_open(hf_src *h, const char *dir, const zinf_model *m)
{
    *h = (hf_src){0};
    int rc = check_config(dir, &m->c);
    if (!rc) rc = zinf_st_dir_open(&h->sd, dir);
    if (!rc) rc = zinf_hf_list(m, &h->it, &h->n);
    if (!rc && (!(h->sf = calloc((size_t)h->n + 1, sizeof *h->sf)) || !(h->st = calloc((size_t)h->n + 1, sizeof *h->st))))
        rc = zinf_errc(ZINF_ENOMEM, "out of host memory");
    for (int i = 0; i < h->n && !rc; i++) rc = find_part(h->sd, m->f->hf_prefix, &h->it[i], &h->sf[i], &h->st[i]);
    return rc;
}

static void src_close(hf_src *h)
{
    free(h->sf);
    free(h->st);
    free(h->it);
    zinf_st_dir_close(h->sd);
    *h = (hf_src){0};
}

int zinf_hf_import(const char *dir, zinf_comm *comm, const zinf_model *m, zinf_zero *z, zinf_hf_load *load)
{
    double t0 = zinf_now();
    zinf_st_reader *rd = NULL;
    /* every tensor is found and checked, on every rank, before any state changes */
    hf_src h;
    int rc = src_open(&h, dir, m);
    zinf_st_dir *sd = h.sd;
    zinf_hf_item *it = h.it;
    int n = h.n;
    const zinf_st_file **sf = h.sf;
    const zinf_st_tensor **st = h.st;
    int64_t maxp = 1;
    for (int u = 0; u < m->nunits; u++) {
        int64_t lo, len;
        zinf_zero_ckpt_range(z, u, false, &lo, &len);
        maxp = len > maxp ? len : maxp;
    }
    /* two units' parts: one being read while the other moves into the shards */
    float *buf[2] = {rc ? NULL : malloc((size_t)maxp * 4), rc ? NULL : malloc((size_t)maxp * 4)};
    if (!rc && (!buf[0] || !buf[1])) rc = zinf_errc(ZINF_ENOMEM, "out of host memory for --init_from");
    if (!rc) rc = zinf_st_reader_open(&rd, sd, 0, 0);
    rc = zinf_comm_agree(comm, rc);
    double twait = 0;
    int i = 0;
    int64_t lo, len;
    if (!rc && m->nunits) zinf_zero_ckpt_range(z, 0, false, &lo, &len);
    if (!rc && m->nunits) rc = queue_unit(rd, m, lo, len, it, n, &i, sf, st, 0, buf[0]);
    if (!rc && m->nunits) rc = zinf_st_reader_start(rd);
    /* each rank its part of each unit: the masters from the files, Adam's moments zero */
    for (int u = 0; u < m->nunits && !rc; u++) {
        const zinf_unit *un = &m->units[u];
        double w0 = zinf_now();
        rc = zinf_st_reader_wait(rd);
        twait += zinf_now() - w0;
        /* the next unit's reads go on while this one moves into the shards */
        if (!rc && u + 1 < m->nunits) {
            zinf_zero_ckpt_range(z, u + 1, false, &lo, &len);
            rc = queue_unit(rd, m, lo, len, it, n, &i, sf, st, u + 1, buf[(u + 1) % 2]);
        }
        zinf_zero_ckpt_range(z, u, false, &lo, &len);
        if (!rc && u + 1 < m->nunits) rc = zinf_st_reader_start(rd);
        float *b = buf[u % 2];
        if (!rc) rc = finite_part(m, u, lo, b, len, NULL);
        if (!rc) rc = zinf_zero_ckpt_set(z, u, ZINF_CKPT_MASTER, b);
        memset(b, 0, (size_t)len * 4);
        if (!rc) rc = zinf_zero_ckpt_set(z, u, ZINF_CKPT_ADAM_M, b);
        if (!rc) rc = zinf_zero_ckpt_set(z, u, ZINF_CKPT_ADAM_V, b);
        if (rc) rc = zinf_err_prefix(rc, "--init_from %s: unit %s", dir, un->name);
        rc = zinf_comm_agree(comm, rc); /* keep the ranks in step (NVMe states move here) */
    }
    /* what the load read, over all ranks, and whether every rank read with O_DIRECT */
    uint64_t sums[3] = {0, 0, rd && !zinf_st_reader_direct(rd, NULL)};
    if (rd) zinf_st_reader_bytes(rd, &sums[0], &sums[1]);
    zinf_st_reader_close(rd); /* after the thread of a unit that was not waited for */
    free(buf[0]);
    free(buf[1]);
    src_close(&h);
    /* each agree above printed a failure once; only the last step is still to agree on */
    if (!rc) rc = zinf_comm_agree(comm, zinf_zero_ckpt_params_from_master(z));
    if (!rc) rc = zinf_comm_agree(comm, zinf_comm_allreduce_sum_u64(comm, sums, 3));
    if (!rc && load) *load = (zinf_hf_load){.read = sums[0], .wanted = sums[1], .direct = !sums[2],
                                            .seconds = zinf_now() - t0, .wait_seconds = twait};
    return rc;
}

int zinf_hf_read_params(const char *dir, const zinf_model *m, int (*put)(void *ctx, int u, const float *vals),
                        void *ctx)
{
    zinf_st_reader *rd = NULL;
    hf_src h;
    int rc = src_open(&h, dir, m);
    int64_t maxu = 1;
    for (int u = 0; u < m->nunits; u++) maxu = m->units[u].numel > maxu ? m->units[u].numel : maxu;
    float *buf = rc ? NULL : malloc((size_t)maxu * 4);
    if (!rc && !buf) rc = zinf_errc(ZINF_ENOMEM, "out of host memory for a unit of %lld parameters", (long long)maxu);
    if (!rc) rc = zinf_st_reader_open(&rd, h.sd, 0, 0);
    /* every unit whole, one after the other, through one unit's buffer: this process is the only
     * reader */
    for (int u = 0, i = 0; u < m->nunits && !rc; u++) {
        rc = queue_unit(rd, m, 0, m->units[u].numel, h.it, h.n, &i, h.sf, h.st, u, buf);
        if (!rc) rc = zinf_st_reader_run(rd);
        if (rc) rc = zinf_err_prefix(rc, "%s: unit %s", dir, m->units[u].name);
        if (!rc) rc = finite_part(m, u, 0, buf, m->units[u].numel, dir);
        if (!rc) rc = put(ctx, u, buf);
    }
    zinf_st_reader_close(rd);
    free(buf);
    src_close(&h);
    return rc;
}
