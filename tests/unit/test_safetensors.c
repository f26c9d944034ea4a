/* io/safetensors: a directory written and read back (F32, BF16, F16 values, every element and
 * ranges of them, vectors, 3-d and empty tensors, __metadata__, the 8-byte header padding); where
 * the writer cuts shards (a tensor that just fits, one that does not, one larger than the limit
 * alone) and the index it writes (names, weight_map, total_size, total_parameters), stale files of
 * an earlier export removed; a producer that gives too few bytes leaves no file; every malformed
 * header refused in one message naming the file and, where one is at fault, the tensor; an index
 * naming a missing shard; tensors missing from the index or from their shard; HF's size
 * spellings; 3000 mutated headers (and some cut short) each opened cleanly or refused in one line,
 * never a crash; the bulk reader (O_DIRECT through io/swap, aligned supersets of unaligned
 * ranges, slots smaller than a tensor, strided destinations, on its own thread too) in the build
 * directory, in /dev/shm and as on a file system without O_DIRECT, and a read failing in its
 * thread. The values checked are made here, from their bits, never read back from zinf. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "err.h"
#include "kernels.h"
#include "safetensors.h"

static char root[256];

/* value j of tensor i: distinct, of both signs, some not exact in 16 bits */
static float val(int i, int64_t j) { return (float)((i + 1) * 1000 + j) * (j % 2 ? -0.0137f : 0.0119f); }

static float rounded(zinf_dtype dt, float x)
{
    return dt == ZINF_BF16 ? zinf_bf16_to_f32(zinf_f32_to_bf16(x)) : dt == ZINF_F16 ? zinf_f16_to_f32(zinf_f32_to_f16(x)) : x;
}

static int64_t numel(const zinf_st_spec *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static int64_t nbytes(const zinf_st_spec *t) { return numel(t) * (t->dt == ZINF_F32 ? 4 : 2); }

/* the producer: values in pieces of 7 (so pieces never line up with anything); short_of drops
 * that many values of tensor short_i */
typedef struct prod {
    const zinf_st_spec *t;
    int short_i;
    int64_t short_of;
    int calls;
} prod;

static int produce(void *ctx, int i, zinf_st_sink *s)
{
    prod *p = ctx;
    p->calls++;
    int64_t n = numel(&p->t[i]) - (i == p->short_i ? p->short_of : 0);
    float b[7];
    for (int64_t j = 0; j < n; j += 7) {
        int64_t k = n - j < 7 ? n - j : 7;
        for (int64_t q = 0; q < k; q++) b[q] = val(i, j + q);
        int rc = zinf_st_sink_f32(s, b, k);
        if (rc) return rc;
    }
    return 0;
}

static zinf_st_spec spec(const char *name, zinf_dtype dt, int ndim, int64_t a, int64_t b, int64_t c)
{
    zinf_st_spec t = {.dt = dt, .ndim = ndim, .shape = {a, b, c}};
    snprintf(t.name, sizeof t.name, "%s", name);
    return t;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(p);
}

static char *mkd(const char *name)
{
    static char p[8][512];
    static int k;
    char *d = p[k++ % 8];
    snprintf(d, 512, "%s/%s", root, name);
    mkdir(d, 0755);
    return d;
}

/* the names in dir, sorted, space-separated */
static const char *listing(const char *dir)
{
    static char out[4096];
    struct dirent **e;
    int n = scandir(dir, &e, NULL, alphasort);
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        if (e[i]->d_name[0] != '.')
            snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", out[0] ? " " : "", e[i]->d_name);
        free(e[i]);
    }
    if (n >= 0) free(e);
    return out;
}

/* every tensor of t read back from dir: whole, and in ranges (first, n) that cross the 64 KiB
 * read buffer for the large one */
static void read_back(const char *dir, const zinf_st_spec *t, int n)
{
    zinf_st_dir *d;
    int rc = zinf_st_dir_open(&d, dir);
    CHECK(rc == 0, "open %s: %s", dir, zinf_errmsg());
    if (rc) return;
    for (int i = 0; i < n; i++) {
        const zinf_st_file *f;
        const zinf_st_tensor *x = zinf_st_dir_find(d, t[i].name, &f);
        CHECK(x && f, "%s: %s not found", dir, t[i].name);
        if (!x) continue;
        bool same = x->ndim == t[i].ndim && x->numel == numel(&t[i]) && x->readable && x->dt == t[i].dt;
        for (int k = 0; k < t[i].ndim && same; k++) same = x->shape[k] == t[i].shape[k];
        CHECK(same, "%s: %s's dtype or shape read back differs", dir, t[i].name);
        int64_t m = numel(&t[i]);
        float *v = malloc((size_t)(m ? m : 1) * 4);
        CHECK(zinf_st_read(f, x, 0, m, v) == 0, "read %s: %s", t[i].name, zinf_errmsg());
        int64_t bad = 0;
        for (int64_t j = 0; j < m; j++) bad += memcmp(&v[j], &(float){rounded(t[i].dt, val(i, j))}, 4) != 0;
        CHECK(bad == 0, "%s: %lld of %lld values differ from what was written", t[i].name, (long long)bad, (long long)m);
        int64_t ranges[][2] = {{m / 3, m / 2}, {m - 1, 1}, {1, m - 2}, {m / 5, 0}};
        for (int r = 0; r < 4 && m > 2; r++) {
            int64_t a = ranges[r][0], k = ranges[r][1];
            memset(v, 0xff, (size_t)m * 4);
            CHECK(zinf_st_read(f, x, a, k, v) == 0, "read %s [%lld, +%lld): %s", t[i].name, (long long)a, (long long)k,
                  zinf_errmsg());
            bad = 0;
            for (int64_t j = 0; j < k; j++) bad += v[j] != rounded(t[i].dt, val(i, a + j));
            CHECK(bad == 0 && (k == m || ((uint32_t *)v)[k] == 0xffffffffu), "%s [%lld, +%lld): %lld wrong or too many",
                  t[i].name, (long long)a, (long long)k, (long long)bad);
        }
        zinf_err_clear();
        CHECK(zinf_st_read(f, x, m - 1, 2, v) < 0 && strstr(zinf_errmsg(), t[i].name), "a range past the end of %s: '%s'",
              t[i].name, zinf_errmsg());
        free(v);
    }
    zinf_st_dir_close(d);
}

/* A reader (O_DIRECT through io/swap, or buffered) on dir, which holds t[0..n): whole tensors,
 * ranges that start and end anywhere (the files' data and the tensors in it are not 4096-aligned;
 * the last tensor ends the file unaligned), one every third element (stride 3); with slots of
 * 12 KiB (2048 16-bit or 1024 32-bit elements a chunk), so that a tensor crosses many slots and
 * the 4 slots go round several times. Returns whether the reader read with O_DIRECT. */
static bool reader_check(const char *dir, const zinf_st_spec *t, int n, const char *where)
{
    zinf_st_dir *d;
    zinf_st_reader *r = NULL;
    bool direct = false;
    int rc = zinf_st_dir_open(&d, dir);
    CHECK(rc == 0, "%s: open %s: %s", where, dir, zinf_errmsg());
    if (rc) return false;
    rc = zinf_st_reader_open(&r, d, 4 * 12288, 4);
    CHECK(rc == 0, "%s: reader: %s", where, zinf_errmsg());
    if (rc) {
        zinf_st_dir_close(d);
        return false;
    }
    direct = zinf_st_reader_direct(r, NULL);
    int64_t cap = 1;
    for (int i = 0; i < n; i++) cap = numel(&t[i]) > cap ? numel(&t[i]) : cap;
    float **v = calloc((size_t)n, sizeof *v);
    uint64_t want = 0;
    for (int pass = 0; pass < 3; pass++) {
        /* pass 0: whole tensors; 1: [m/3 + 1, m - 1) of each; 2: from element 2 on, into every third float */
        int64_t A[16], K[16], st = pass == 2 ? 3 : 1;
        for (int i = 0; i < n; i++) {
            int64_t m = numel(&t[i]);
            A[i] = pass == 0 ? 0 : pass == 1 ? m / 3 + 1 : (m < 2 ? m : 2);
            K[i] = pass == 1 ? (m - 1 - A[i] > 0 ? m - 1 - A[i] : 0) : m - A[i];
            if (A[i] > m) A[i] = m;
            v[i] = malloc((size_t)(cap * 3 + 1) * 4);
            memset(v[i], 0xff, (size_t)(cap * 3 + 1) * 4);
            const zinf_st_file *f;
            const zinf_st_tensor *x = zinf_st_dir_find(d, t[i].name, &f);
            CHECK(x && zinf_st_reader_add(r, f, x, A[i], K[i], v[i], st) == 0, "%s: add %s: %s", where, t[i].name,
                  zinf_errmsg());
            want += (uint64_t)K[i] * (t[i].dt == ZINF_F32 ? 4 : 2);
        }
        /* pass 1 in the reader's own thread, the others on this one */
        if (pass == 1)
            CHECK(zinf_st_reader_start(r) == 0 && zinf_st_reader_wait(r) == 0, "%s: start/wait: %s", where, zinf_errmsg());
        else CHECK(zinf_st_reader_run(r) == 0, "%s: run: %s", where, zinf_errmsg());
        for (int i = 0; i < n; i++) {
            int64_t bad = 0;
            /* the range's values where they belong; nothing between them, nor past the range */
            for (int64_t j = 0; j <= K[i] * st; j++) {
                if (j % st == 0 && j / st < K[i]) bad += v[i][j] != rounded(t[i].dt, val(i, A[i] + j / st));
                else bad += ((uint32_t *)v[i])[j] != 0xffffffffu;
            }
            CHECK(bad == 0, "%s: pass %d: %s [%lld, +%lld) stride %lld: %lld values wrong", where, pass, t[i].name,
                  (long long)A[i], (long long)K[i], (long long)st, (long long)bad);
            free(v[i]);
        }
    }
    uint64_t rd, wd;
    zinf_st_reader_bytes(r, &rd, &wd);
    CHECK(wd == want && rd >= wd && rd % 4096 == 0, "%s: %llu bytes read for %llu wanted (%llu asked)", where,
          (unsigned long long)rd, (unsigned long long)wd, (unsigned long long)want);
    /* a range past a tensor's end is refused as zinf_st_read refuses it */
    const zinf_st_file *f;
    const zinf_st_tensor *x = zinf_st_dir_find(d, t[0].name, &f);
    zinf_err_clear();
    CHECK(zinf_st_reader_add(r, f, x, numel(&t[0]) - 1, 2, (float[2]){0}, 1) < 0 && strstr(zinf_errmsg(), t[0].name),
          "%s: a range past the end: '%s'", where, zinf_errmsg());
    free(v);
    zinf_st_reader_close(r);
    zinf_st_dir_close(d);
    return direct;
}

/* whether this file system takes O_DIRECT (asked here, not through zinf) */
static bool takes_direct(const char *dir, int shards)
{
    char p[600];
    snprintf(p, sizeof p, "%s/model-00001-of-%05d.safetensors", dir, shards);
    int fd = open(p, O_RDONLY | O_DIRECT);
    if (fd >= 0) close(fd);
    return fd >= 0;
}

/* a raw file: the 8-byte length of hdr (as given, unpadded unless it is), hdr, then n data bytes */
static void put_raw(const char *path, uint64_t hlen, const char *hdr, size_t data)
{
    FILE *fp = fopen(path, "wb");
    unsigned char l[8];
    for (int i = 0; i < 8; i++) l[i] = (unsigned char)(hlen >> (8 * i));
    fwrite(l, 1, 8, fp);
    fwrite(hdr, 1, strlen(hdr), fp);
    for (size_t i = 0; i < data; i++) fputc((int)(i * 37 & 0xff), fp);
    fclose(fp);
}

/* zinf_st_open on a file of header hdr and n data bytes must fail with a message holding each of
 * the NULL-terminated texts */
static void refused(const char *what, uint64_t hlen, const char *hdr, size_t data, const char *const *want)
{
    char path[512];
    snprintf(path, sizeof path, "%s/bad.safetensors", root);
    put_raw(path, hlen, hdr, data);
    zinf_st_file *f = NULL;
    zinf_err_clear();
    int rc = zinf_st_open(&f, path);
    bool all = rc < 0 && !f && strstr(zinf_errmsg(), path) && !strchr(zinf_errmsg(), '\n');
    for (int i = 0; want[i]; i++) all = all && strstr(zinf_errmsg(), want[i]);
    CHECK(all, "%s: rc %d, '%s'", what, rc, zinf_errmsg());
    zinf_st_close(f);
}
#define REFUSED(what, hdr, data, ...) \
    refused(what, strlen(hdr), hdr, data, (const char *const[]){__VA_ARGS__, NULL})

static json_t *load_index(const char *dir)
{
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    return json_load_file(p, 0, NULL);
}

int main(void)
{
    snprintf(root, sizeof root, "%s/zinf-test-st.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) return 1;

    /* ---- round trip: one file -------------------------------------------------------------- */
    zinf_st_spec t[] = {
        spec("emb.weight", ZINF_F32, 2, 100, 200, 0), /* 80000 bytes: over the 64 KiB read buffer */
        spec("h.0.b", ZINF_BF16, 1, 33, 0, 0),        spec("h.0.w3", ZINF_F16, 3, 3, 5, 7),
        spec("empty", ZINF_F32, 2, 0, 4, 0),          spec("h.1.f16", ZINF_F16, 2, 10, 10, 0),
        spec("lnf", ZINF_BF16, 1, 5, 0, 0),
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    int64_t total = 0;
    for (int i = 0; i < nt; i++) total += nbytes(&t[i]);
    char *one = mkd("one");
    prod p = {.t = t, .short_i = -1};
    const char *meta[] = {"zinf_step", "7", NULL};
    zinf_st_written w = {0};
    CHECK(zinf_st_write_dir(one, t, nt, 0, meta, produce, &p, &w) == 0, "write: %s", zinf_errmsg());
    CHECK(w.shards == 1 && w.total_size == (uint64_t)total && p.calls == nt, "one file: %d shards, %llu bytes, %d calls",
          w.shards, (unsigned long long)w.total_size, p.calls);
    CHECK(!strcmp(listing(one), "model.safetensors"), "one file: the directory holds '%s'", listing(one));
    read_back(one, t, nt);
    {
        char path[600];
        snprintf(path, sizeof path, "%s/model.safetensors", one);
        zinf_st_file *f;
        CHECK(zinf_st_open(&f, path) == 0, "open: %s", zinf_errmsg());
        CHECK(zinf_st_count(f) == nt && !strcmp(zinf_st_meta(f, "format"), "pt") && !strcmp(zinf_st_meta(f, "zinf_step"), "7"),
              "count %d, __metadata__ format and zinf_step", zinf_st_count(f));
        /* in the file: the data right after the header, padded to 8, tensors back to back in order */
        FILE *fp = fopen(path, "rb");
        unsigned char l[8];
        CHECK(fread(l, 1, 8, fp) == 8, "read the length");
        fclose(fp);
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | l[i];
        struct stat st;
        stat(path, &st);
        CHECK(hl % 8 == 0 && (uint64_t)st.st_size == 8 + hl + (uint64_t)total, "header %llu bytes, file %lld",
              (unsigned long long)hl, (long long)st.st_size);
        uint64_t off = 0;
        for (int i = 0; i < nt; i++) {
            const zinf_st_tensor *x = zinf_st_find(f, t[i].name);
            CHECK(x && x->begin == off && x->end == off + (uint64_t)nbytes(&t[i]), "%s is not at [%llu, ...)", t[i].name,
                  (unsigned long long)off);
            off += (uint64_t)nbytes(&t[i]);
        }
        CHECK(zinf_st_find(f, "nonesuch") == NULL, "a name not there is found");
        zinf_st_close(f);
    }

    /* ---- shards ---------------------------------------------------------------------------- */
    /* 400 + 400 + 200 bytes: within 1000 one shard holds all three (the limit itself fits); at
     * 999 the third starts the second */
    zinf_st_spec s3[] = {spec("a", ZINF_F32, 1, 100, 0, 0), spec("b", ZINF_F32, 1, 100, 0, 0), spec("c", ZINF_BF16, 1, 100, 0, 0)};
    char *d1000 = mkd("s1000"), *d999 = mkd("s999");
    p = (prod){.t = s3, .short_i = -1};
    CHECK(zinf_st_write_dir(d1000, s3, 3, 1000, NULL, produce, &p, &w) == 0 && w.shards == 1, "1000: %d shards, %s", w.shards,
          zinf_errmsg());
    CHECK(zinf_st_write_dir(d999, s3, 3, 999, NULL, produce, &p, &w) == 0 && w.shards == 2, "999: %d shards, %s", w.shards,
          zinf_errmsg());
    CHECK(!strcmp(listing(d999), "model-00001-of-00002.safetensors model-00002-of-00002.safetensors "
                                 "model.safetensors.index.json"), "999: '%s'", listing(d999));
    json_t *ix = load_index(d999), *wm = json_object_get(ix, "weight_map"), *md = json_object_get(ix, "metadata");
    CHECK(json_object_size(wm) == 3 && !strcmp(json_string_value(json_object_get(wm, "a")), "model-00001-of-00002.safetensors") &&
              !strcmp(json_string_value(json_object_get(wm, "b")), "model-00001-of-00002.safetensors") &&
              !strcmp(json_string_value(json_object_get(wm, "c")), "model-00002-of-00002.safetensors"),
          "999: weight_map");
    CHECK(json_integer_value(json_object_get(md, "total_size")) == 1000 &&
              json_integer_value(json_object_get(md, "total_parameters")) == 300, "999: metadata");
    json_decref(ix);
    read_back(d999, s3, 3);
    /* a tensor larger than the limit takes a shard of its own, the next starts another */
    zinf_st_spec big[] = {spec("x", ZINF_F32, 1, 25, 0, 0), spec("y", ZINF_F32, 2, 50, 10, 0), spec("z", ZINF_F16, 1, 10, 0, 0),
                          spec("zz", ZINF_F16, 1, 10, 0, 0)};
    char *dbig = mkd("big");
    p = (prod){.t = big, .short_i = -1};
    CHECK(zinf_st_write_dir(dbig, big, 4, 1000, NULL, produce, &p, &w) == 0 && w.shards == 3 && w.total_size == 100 + 2000 + 40,
          "big: %d shards, %llu bytes: %s", w.shards, (unsigned long long)w.total_size, zinf_errmsg());
    ix = load_index(dbig);
    wm = json_object_get(ix, "weight_map");
    CHECK(!strcmp(json_string_value(json_object_get(wm, "x")), "model-00001-of-00003.safetensors") &&
              !strcmp(json_string_value(json_object_get(wm, "y")), "model-00002-of-00003.safetensors") &&
              !strcmp(json_string_value(json_object_get(wm, "z")), "model-00003-of-00003.safetensors") &&
              !strcmp(json_string_value(json_object_get(wm, "zz")), "model-00003-of-00003.safetensors"),
          "big: weight_map");
    json_decref(ix);
    read_back(dbig, big, 4);
    /* the index as transformers writes it: indent 2, keys sorted, a newline at the end */
    {
        char path[600], buf[4096] = {0};
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dbig);
        FILE *fp = fopen(path, "r");
        size_t n = fread(buf, 1, sizeof buf - 1, fp);
        fclose(fp);
        const char *want = "{\n  \"metadata\": {\n    \"total_parameters\": 545,\n    \"total_size\": 2140\n  },\n"
                           "  \"weight_map\": {\n    \"x\": \"model-00001-of-00003.safetensors\",\n";
        CHECK(n > 0 && !strncmp(buf, want, strlen(want)) && buf[n - 1] == '\n' && buf[n - 2] == '}', "index text:\n%s", buf);
    }
    /* re-exports into the same directory leave no stale file: 3 shards -> 2 -> 1 */
    CHECK(zinf_st_write_dir(dbig, big, 4, 2100, NULL, produce, &p, &w) == 0 && w.shards == 2, "big again: %d shards", w.shards);
    CHECK(!strcmp(listing(dbig), "model-00001-of-00002.safetensors model-00002-of-00002.safetensors "
                                 "model.safetensors.index.json"), "2 shards over 3: '%s'", listing(dbig));
    read_back(dbig, big, 4);
    CHECK(zinf_st_write_dir(dbig, big, 4, 0, NULL, produce, &p, &w) == 0 && w.shards == 1, "big once more: %d", w.shards);
    CHECK(!strcmp(listing(dbig), "model.safetensors"), "1 over 2 shards: '%s'", listing(dbig));
    read_back(dbig, big, 4);

    /* a producer that gives too few bytes: refused naming the tensor, no file left */
    char *dshort = mkd("short");
    p = (prod){.t = big, .short_i = 2, .short_of = 1};
    zinf_err_clear();
    CHECK(zinf_st_write_dir(dshort, big, 4, 1000, NULL, produce, &p, &w) < 0 &&
              strstr(zinf_errmsg(), "model-00003-of-00003.safetensors.tmp: tensor z: 18 of its 20 bytes were produced"),
          "short producer: '%s'", zinf_errmsg());
    CHECK(!strcmp(listing(dshort), ""), "a failed write left '%s'", listing(dshort));

    /* ---- malformed files ------------------------------------------------------------------- */
    const char *ok = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
    REFUSED("a valid file cut short", ok, 20, "tensor t: data_offsets [0,24] end past the file's 20 bytes of data");
    REFUSED("bad JSON", "{\"t\":{\"dtype\":\"F32\",", 0, "the header is not JSON");
    REFUSED("a duplicate name", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "the header is not JSON",
            "duplicate");
    REFUSED("JSON, not an object", "[1,2,3]", 0, "not an object");
    REFUSED("offsets past the end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 12,
            "tensor b: data_offsets [8,16] end past the file's 12 bytes of data (a truncated file?)");
    REFUSED("overlapping", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                           "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[8,16]}}", 16,
            "tensors a [0,16] and b [8,16] overlap");
    REFUSED("unknown dtype", "{\"t\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
            "tensor t has dtype Q7, which safetensors does not define");
    REFUSED("shape and offsets disagree", "{\"t\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24,
            "tensor t: shape [2,3] of BF16 is 12 bytes, its data_offsets [0,24] hold 24");
    REFUSED("offsets backwards", "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8,
            "tensor t: data_offsets are not two integers 0 <= begin <= end");
    REFUSED("no data_offsets", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor t: the header entry lacks");
    REFUSED("a negative dimension", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
            "tensor t: shape holds something other than a non-negative integer");
    /* 2^64 + 1: past what jansson (and any file) holds; named as such, not as jansson's words */
    REFUSED("an offset past 2^63", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,18446744073709551617]}}",
            8, "the header holds a number past 2^63 (header byte");
    REFUSED("__metadata__ not strings", "{\"__metadata__\":{\"format\":1}}", 0, "__metadata__ entry format is not a string");
    refused("a header longer than the file", 1000, ok, 24, (const char *const[]){"header length 1000 does not fit", NULL});
    refused("a header longer than the format allows", 200000000ull, ok, 24,
            (const char *const[]){"header length 200000000 does not fit", NULL});
    {
        char path[512];
        snprintf(path, sizeof path, "%s/tiny.safetensors", root);
        FILE *fp = fopen(path, "wb");
        fputs("abc", fp);
        fclose(fp);
        zinf_st_file *f;
        CHECK(zinf_st_open(&f, path) < 0 && strstr(zinf_errmsg(), "3 bytes, shorter than the 8-byte header length"),
              "3 bytes: '%s'", zinf_errmsg());
        /* a dtype the format has and zinf does not read: the file opens, the read is refused */
        snprintf(path, sizeof path, "%s/i64.safetensors", root);
        const char *i64 = "{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}";
        put_raw(path, strlen(i64), i64, 16);
        CHECK(zinf_st_open(&f, path) == 0, "I64: %s", zinf_errmsg());
        float v[2];
        const zinf_st_tensor *x = f ? zinf_st_find(f, "ids") : NULL;
        CHECK(x && !x->readable && zinf_st_read(f, x, 0, 2, v) < 0 &&
                  strstr(zinf_errmsg(), "i64.safetensors: tensor ids has dtype I64; zinf reads F32, BF16 and F16"),
              "I64 read: '%s'", zinf_errmsg());
        zinf_st_close(f);
    }

    /* ---- directories ----------------------------------------------------------------------- */
    char path[600], *dmiss = mkd("missing");
    p = (prod){.t = s3, .short_i = -1};
    zinf_st_write_dir(dmiss, s3, 3, 999, NULL, produce, &p, &w);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dmiss);
    unlink(path);
    zinf_st_dir *d = NULL;
    zinf_err_clear();
    CHECK(zinf_st_dir_open(&d, dmiss) < 0 && !d &&
              strstr(zinf_errmsg(), "missing/model.safetensors.index.json names shard model-00002-of-00002.safetensors, which is missing"),
          "missing shard: '%s'", zinf_errmsg());
    /* a tensor the index does not name; one it puts in a shard that lacks it */
    char *dwm = mkd("weightmap");
    zinf_st_write_dir(dwm, s3, 3, 999, NULL, produce, &p, &w);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dwm);
    ix = load_index(dwm);
    json_object_set_new(json_object_get(ix, "weight_map"), "d", json_string("model-00001-of-00002.safetensors"));
    json_dump_file(ix, path, JSON_INDENT(2));
    json_decref(ix);
    CHECK(zinf_st_dir_open(&d, dwm) == 0 && zinf_st_dir_sharded(d) && zinf_st_dir_files(d) == 2, "weightmap: %s", zinf_errmsg());
    if (d) {
        const zinf_st_file *f;
        CHECK(zinf_st_dir_find(d, "c", &f) && strstr(zinf_st_path(f), "model-00002-of-00002"), "c is not in the second shard");
        CHECK(!zinf_st_dir_find(d, "e", &f) && !f && zinf_st_dir_missing(d, "e") < 0 &&
                  strstr(zinf_errmsg(), "weightmap/model.safetensors.index.json: tensor e is missing (its weight_map does not name it)"),
              "e: '%s'", zinf_errmsg());
        CHECK(!zinf_st_dir_find(d, "d", &f) && zinf_st_dir_missing(d, "d") < 0 &&
                  strstr(zinf_errmsg(), "weightmap/model-00001-of-00002.safetensors: tensor d is missing (the index puts it there)"),
              "d: '%s'", zinf_errmsg());
        zinf_st_dir_close(d);
    }
    CHECK(zinf_st_dir_open(&d, one) == 0 && !zinf_st_dir_sharded(d) && zinf_st_dir_missing(d, "q") < 0 &&
              strstr(zinf_errmsg(), "one/model.safetensors: tensor q is missing"), "one file, q: '%s'", zinf_errmsg());
    zinf_st_dir_close(d);
    d = NULL;
    char *dnone = mkd("none");
    CHECK(zinf_st_dir_open(&d, dnone) < 0 && strstr(zinf_errmsg(), "none: neither model.safetensors nor model.safetensors.index.json"),
          "empty directory: '%s'", zinf_errmsg());
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dnone);
    FILE *fp = fopen(path, "w");
    fputs("{\"weight_map\": {\"a\": \"../x.safetensors\"}}", fp);
    fclose(fp);
    CHECK(zinf_st_dir_open(&d, dnone) < 0 && strstr(zinf_errmsg(), "weight_map's a is not a file name in the directory"),
          "a path in the index: '%s'", zinf_errmsg());
    fp = fopen(path, "w");
    fputs("{\"weight_map\": ", fp);
    fclose(fp);
    CHECK(zinf_st_dir_open(&d, dnone) < 0 && strstr(zinf_errmsg(), "model.safetensors.index.json:1:") &&
              strstr(zinf_errmsg(), "malformed JSON"), "a broken index: '%s'", zinf_errmsg());

    /* ---- mutations: 3000 copies of a valid file with bytes of the header or its length changed
     * (a fixed LCG, so every run tries the same): each opens, and then every readable tensor reads
     * whole, or is refused in one line naming the file; never a crash (run under valgrind too) */
    {
        char src[600], mut[600];
        snprintf(src, sizeof src, "%s/model.safetensors", one);
        snprintf(mut, sizeof mut, "%s/mut.safetensors", root);
        FILE *in = fopen(src, "rb");
        fseek(in, 0, SEEK_END);
        long sz = ftell(in);
        fseek(in, 0, SEEK_SET);
        unsigned char *orig = malloc((size_t)sz), *b = malloc((size_t)sz);
        CHECK(fread(orig, 1, (size_t)sz, in) == (size_t)sz, "read %s", src);
        fclose(in);
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | orig[i];
        uint64_t rng = 12345;
        int opened = 0, bad = 0;
        float *v = malloc(20000 * 4);
        for (int k = 0; k < 3000; k++) {
            memcpy(b, orig, (size_t)sz);
            int nm = 1 + (int)(k % 4);
            for (int m = 0; m < nm; m++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                uint64_t at = (rng >> 33) % (8 + hl);
                const char *pick = "0123456789[]{},:\"-. eE";
                b[at] = k % 3 ? (unsigned char)pick[(rng >> 20) % strlen(pick)] : (unsigned char)(rng >> 24);
            }
            long len = k % 50 == 7 ? sz - 1 - (long)((rng >> 40) % 64) : sz; /* sometimes cut short too */
            FILE *fp = fopen(mut, "wb");
            fwrite(b, 1, (size_t)len, fp);
            fclose(fp);
            zinf_st_file *f = NULL;
            zinf_err_clear();
            if (zinf_st_open(&f, mut)) {
                bad += !strstr(zinf_errmsg(), mut) || strchr(zinf_errmsg(), '\n') != NULL;
                continue;
            }
            opened++;
            for (int i = 0; i < zinf_st_count(f); i++) {
                const zinf_st_tensor *x = zinf_st_at(f, i);
                if (x->readable && x->numel <= 20000 && zinf_st_read(f, x, 0, x->numel, v)) bad++;
            }
            zinf_st_close(f);
        }
        CHECK(bad == 0 && opened > 0 && opened < 3000, "mutations: %d opened, %d refused without naming the file or "
              "failed a read after a clean open", opened, bad);
        free(v);
        free(orig);
        free(b);
    }

    /* ---- the bulk reader: O_DIRECT in the build directory, tmpfs, and buffered ------------------ */
    {
        zinf_st_spec rt[] = {
            spec("a.bf16", ZINF_BF16, 1, 3, 0, 0),         /* 6 bytes: everything after is 2-aligned only */
            spec("b.f32", ZINF_F32, 2, 100, 200, 0),       /* 80000 bytes: 79 chunks of 12 KiB slots */
            spec("c.f16", ZINF_F16, 2, 37, 129, 0),        spec("d.bf16", ZINF_BF16, 2, 301, 71, 0),
            spec("e.f32", ZINF_F32, 1, 5, 0, 0),           spec("f.bf16", ZINF_BF16, 1, 4097, 0, 0),
        };
        int nr = (int)(sizeof rt / sizeof rt[0]);
        /* shards of 90000 bytes: a and b (b from byte 6 of the data), c, d, e, f (f ends its file unaligned) */
        char here[512], shm[512];
        snprintf(here, sizeof here, "zinf-test-st-direct.XXXXXX");
        snprintf(shm, sizeof shm, "/dev/shm/zinf-test-st.XXXXXX");
        const char *dirs[2] = {mkdtemp(here), access("/dev/shm", W_OK) ? NULL : mkdtemp(shm)};
        for (int k = 0; k < 2; k++) {
            if (!dirs[k]) {
                printf("test_safetensors: %s: cannot make a directory there; that case is skipped\n",
                       k ? "/dev/shm" : "the build directory");
                continue;
            }
            prod rp = {.t = rt, .short_i = -1};
            zinf_st_written rw = {0};
            CHECK(zinf_st_write_dir(dirs[k], rt, nr, 90000, NULL, produce, &rp, &rw) == 0 && rw.shards == 2,
                  "reader files: %s (%d shards)", zinf_errmsg(), rw.shards);
            bool can = takes_direct(dirs[k], rw.shards), got = reader_check(dirs[k], rt, nr, dirs[k]);
            CHECK(got == can, "%s: the reader read %s, the file system %s O_DIRECT", dirs[k], got ? "with O_DIRECT" : "buffered",
                  can ? "takes" : "refuses");
            if (!can)
                printf("test_safetensors: %s refuses O_DIRECT: the buffered fallback was checked there, not O_DIRECT\n",
                       dirs[k]);
            /* a file system without O_DIRECT, on any machine: the open refused as tmpfs before Linux 6.6 does */
            setenv("ZINF_SWAP_FAULT", "nodirect", 1);
            got = reader_check(dirs[k], rt, nr, "ZINF_SWAP_FAULT=nodirect");
            CHECK(!got, "ZINF_SWAP_FAULT=nodirect: the reader still used O_DIRECT");
            /* a read that fails in the reader's thread: its message comes back to the waiter */
            setenv("ZINF_SWAP_FAULT", "eio@2", 1);
            zinf_st_dir *d;
            zinf_st_reader *r = NULL;
            float *v = malloc(20000 * 4);
            CHECK(zinf_st_dir_open(&d, dirs[k]) == 0 && zinf_st_reader_open(&r, d, 4 * 12288, 4) == 0, "eio: %s",
                  zinf_errmsg());
            const zinf_st_file *f;
            const zinf_st_tensor *x = r ? zinf_st_dir_find(d, "b.f32", &f) : NULL;
            zinf_err_clear();
            CHECK(x && zinf_st_reader_add(r, f, x, 0, 20000, v, 1) == 0 && zinf_st_reader_start(r) == 0 &&
                      zinf_st_reader_wait(r) < 0 && strstr(zinf_errmsg(), "Input/output error") &&
                      strstr(zinf_errmsg(), "model-0000"),
                  "%s: a read failing with EIO in the reader's thread: '%s'", dirs[k], zinf_errmsg());
            zinf_st_reader_close(r);
            zinf_st_dir_close(d);
            free(v);
            unsetenv("ZINF_SWAP_FAULT");
            nftw(dirs[k], rm_one, 16, FTW_DEPTH | FTW_PHYS);
        }
    }

    /* ---- sizes as HF spells them ----------------------------------------------------------- */
    struct { const char *s; uint64_t v; } sizes[] = {
        {"5GB", 5000000000ull}, {"500MB", 500000000ull}, {"2GiB", 2ull << 30}, {"100KB", 100000}, {"3kib", 3072},
        {"5Gb", 625000000ull},  {"8mb", 1000000},          {"123", 123},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint64_t v = 0;
        CHECK(zinf_st_parse_size(sizes[i].s, &v) == 0 && v == sizes[i].v, "%s: %llu", sizes[i].s, (unsigned long long)v);
    }
    const char *badsz[] = {"0", "5TB", "GB", "-1", "5 GB", "1.5GB", "", "99999999999GB"};
    for (size_t i = 0; i < sizeof badsz / sizeof badsz[0]; i++) {
        uint64_t v = 0;
        zinf_err_clear();
        CHECK(zinf_st_parse_size(badsz[i], &v) < 0 && strstr(zinf_errmsg(), "expected a positive size"), "'%s' taken as %llu",
              badsz[i], (unsigned long long)v);
    }

    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return check_done("test_safetensors");
}
