/* fuzz_shards: a deterministic mutation fuzzer for the token-shard reader (zinf_data_open /
 * zinf_data_read), run by `make check`.
 *
 * Each iteration writes 1-3 shard files by hand into a mkdtemp directory: a valid header
 * (256 little-endian int32: magic 20240520, version 1 = uint16 or 2 = uint32 tokens, count n)
 * and n tokens, then mutates some of them: the magic, the version, the count (off by one, by a
 * lot, negative, INT32_MAX), truncation (also below the 1024-byte header), extension, byte flips
 * anywhere, tokens at the vocabulary edges (255/256, 50256/50257, 65535, 69999/70000, 2^32-1).
 * It opens the glob "DIR/shard_*.bin" with T in {1, 7, 64} and vocab in {256, 50257, 70000}.
 *
 * Validity is computed here from the format spec (data.h), not from the reader: a file is valid
 * when size >= 1024, magic 20240520, version 1 or 2, count >= 0, size == 1024 + count*tokbytes
 * and every token < vocab; the set opens when every file is valid and there is at least one
 * sequence of T+1 tokens ((n-1)/T sequences in a shard of n >= T+1 tokens). Asserted:
 *  - open succeeds exactly when the set is valid;
 *  - a failure returns a negative status with a one-line message that names the first invalid
 *    file (glob order), or the pattern when no file has a sequence;
 *  - a success reports the number of files, tokens and sequences, and zinf_data_read returns
 *    exactly the tokens written (inputs and the targets shifted by one) at the first, last, a
 *    wrapped and random stream positions; with shuffle on, the N reads of epoch 0 are a
 *    permutation of the N sequences;
 *  - every 32nd iteration, zinf_data_write_shard writes the same bytes this test encodes.
 * Then SFT shards (version 3 = uint16, 4 = uint32 tokens; h[3] = S samples; after the tokens n loss
 * bytes, zero padding to a multiple of 4, S+1 int32 starts), one file each, encoded here and
 * mutated: the sample count, a start, a loss flag, the size, a byte anywhere. Valid when the
 * size is exactly 1024 + n*w + 4*ceil(n/4) + 4*(S+1), every flag 0 or 1, start[0] = 0, the
 * starts increase to start[S] = n, every token < vocab, and some sample has at most T tokens.
 * Asserted: open (one sample per row) succeeds exactly then, naming the file when not; the
 * sample and left-out counts; and each row holds its sample's tokens, the targets of the flagged
 * next tokens, positions from 0, and padding (token 0, target -1) after it.
 * Environment: ZINF_FUZZ_ITERS (default 5000), ZINF_FUZZ_SEED (default 1),
 * ZINF_FUZZ_SECONDS (wall-clock cap, default 15). */
#define _GNU_SOURCE
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../unit/check.h"
#include "data.h"
#include "err.h"

#include "rng.h"

#define HDR 1024
#define MAXF 3

typedef struct {
    unsigned char *p;
    size_t n, cap;
} file;

static void file_resize(file *f, size_t n)
{
    if (n > f->cap) {
        f->cap = n + 4096;
        f->p = realloc(f->p, f->cap);
        if (!f->p) {
            fprintf(stderr, "fuzz_shards: out of memory\n");
            exit(1);
        }
    }
    if (n > f->n) memset(f->p + f->n, 0, n - f->n);
    f->n = n;
}

static int32_t get32(const file *f, size_t at)
{
    int32_t x;
    memcpy(&x, f->p + at, 4);
    return x;
}

static void put32(file *f, size_t at, int32_t x) { memcpy(f->p + at, &x, 4); }

/* ------------------------------------------------------------ the format, independently */

typedef struct {
    bool ok_header;  /* size, magic, version, count all fine */
    int tokbytes;
    int64_t ntok;
    uint32_t max_tok; /* the largest token (valid header only) */
} shard_info;

static shard_info inspect(const file *f)
{
    shard_info s = {0};
    if (f->n < HDR) return s;
    int32_t magic = get32(f, 0), version = get32(f, 4), count = get32(f, 8);
    if (magic != 20240520 || (version != 1 && version != 2) || count < 0) return s;
    int tb = version == 1 ? 2 : 4;
    if ((int64_t)f->n != HDR + (int64_t)count * tb) return s;
    s.ok_header = true;
    s.tokbytes = tb;
    s.ntok = count;
    for (int64_t i = 0; i < count; i++) {
        uint32_t t;
        if (tb == 2) {
            uint16_t u;
            memcpy(&u, f->p + HDR + 2 * i, 2);
            t = u;
        } else {
            memcpy(&t, f->p + HDR + 4 * i, 4);
        }
        if (t > s.max_tok) s.max_tok = t;
    }
    return s;
}

static uint32_t tok_at(const file *f, const shard_info *s, int64_t i)
{
    if (s->tokbytes == 2) {
        uint16_t u;
        memcpy(&u, f->p + HDR + 2 * i, 2);
        return u;
    }
    uint32_t t;
    memcpy(&t, f->p + HDR + 4 * i, 4);
    return t;
}

/* ------------------------------------------------------------ generating and mutating */

static const uint32_t EDGE[] = {0, 1, 255, 256, 50256, 50257, 65535, 65536, 69999, 70000, 70001,
                                1u << 20, 0x7fffffffu, 0x80000000u, 0xffffffffu};

static uint32_t random_token(void)
{
    switch (rndn(10)) {
    case 0: return EDGE[rndn(sizeof EDGE / sizeof EDGE[0])];
    case 1: return (uint32_t)rndn(70001);
    default: return (uint32_t)rndn(256);
    }
}

static void make_valid(file *f)
{
    static const int64_t NS[] = {0, 1, 2, 3, 7, 8, 9, 63, 64, 65, 66, 128, 129, 130, 200};
    int64_t n = rndn(2) ? NS[rndn(sizeof NS / sizeof NS[0])] : (int64_t)rndn(400);
    int version = rndn(3) ? 1 : 2;
    int tb = version == 1 ? 2 : 4;
    f->n = 0;
    file_resize(f, HDR + (size_t)n * tb);
    put32(f, 0, 20240520);
    put32(f, 4, version);
    put32(f, 8, (int32_t)n);
    if (rndn(8) == 0) /* junk in the reserved header ints must not matter */
        for (int k = 3; k < 256; k++) put32(f, 4 * k, (int32_t)rnd());
    bool rare = rndn(4) == 0; /* only some files get edge tokens, so many sets stay valid */
    for (int64_t i = 0; i < n; i++) {
        uint32_t t = rare ? random_token() : (uint32_t)rndn(256);
        if (tb == 2) {
            uint16_t u = (uint16_t)t;
            memcpy(f->p + HDR + 2 * i, &u, 2);
        } else {
            memcpy(f->p + HDR + 4 * i, &t, 4);
        }
    }
}

static void mutate(file *f)
{
    int32_t c = f->n >= 12 ? get32(f, 8) : 0;
    switch (rndn(9)) {
    case 0: { /* magic */
        static const int32_t M[] = {20240519, 20240521, 0, -20240520, 20240520 ^ (1 << 24), 1};
        if (f->n >= 4) put32(f, 0, rndn(4) ? M[rndn(6)] : (int32_t)rnd());
        break;
    }
    case 1: { /* version */
        static const int32_t V[] = {0, 1, 2, 3, -1, 256, 0x10001, INT32_MIN};
        if (f->n >= 8) put32(f, 4, V[rndn(8)]);
        break;
    }
    case 2: { /* count */
        int32_t d[] = {c + 1, c - 1, c + 2, c * 2, c / 2, -1, -c, INT32_MAX, INT32_MIN, 0,
                       (int32_t)(c + 512), (int32_t)((uint32_t)c | 0x80000000u)};
        if (f->n >= 12) put32(f, 8, d[rndn(sizeof d / sizeof d[0])]);
        break;
    }
    case 3: /* truncate, sometimes into the header */
        f->n = rndn(3) ? (f->n > HDR ? HDR + rndn(f->n - HDR) : rndn(f->n + 1)) : rndn(HDR + 1);
        break;
    case 4: /* extend */
        file_resize(f, f->n + 1 + rndn(rndn(2) ? 4 : 300));
        break;
    case 5: /* flip a byte anywhere */
        if (f->n) f->p[rndn(f->n)] ^= (unsigned char)(1u << rndn(8));
        break;
    case 6: /* a token at a vocabulary edge */
        if (f->n > HDR + 4) {
            size_t at = HDR + rndn(f->n - HDR - 3);
            uint32_t t = EDGE[rndn(sizeof EDGE / sizeof EDGE[0])];
            memcpy(f->p + at, &t, rndn(2) ? 2 : 4);
        }
        break;
    case 7: /* switch the version but keep the bytes (tokens reinterpreted) */
        if (f->n >= 12) {
            int32_t v = get32(f, 4);
            put32(f, 4, v == 1 ? 2 : 1);
            if (rndn(2)) put32(f, 8, v == 1 ? c / 2 : c * 2);
        }
        break;
    default: /* an empty or header-only file */
        f->n = rndn(2) ? 0 : HDR;
        if (f->n == HDR) put32(f, 0, 20240520), put32(f, 4, 1 + (int)rndn(2)), put32(f, 8, 0);
        break;
    }
}

/* ------------------------------------------------------------ checks */

static char dir[4096];
static long fails_printed, opens_ok, opens_failed;

static void describe(const file *fs, int nf)
{
    for (int k = 0; k < nf; k++) {
        const file *f = &fs[k];
        fprintf(stderr, "    shard_%d.bin: %zu bytes, header", k, f->n);
        for (int i = 0; i < 3 && (size_t)(4 * i + 4) <= f->n; i++) fprintf(stderr, " %d", get32(f, 4 * (size_t)i));
        fprintf(stderr, "\n");
    }
}

#define FCHECK(cond, ...)                                                                         \
    do {                                                                                          \
        check_count_++;                                                                           \
        if (!(cond)) {                                                                            \
            check_failures_++;                                                                    \
            if (fails_printed++ < 20) {                                                           \
                fprintf(stderr, "FAIL %s:%d: iteration %ld T %d vocab %d: ", __FILE__, __LINE__,  \
                        iter, T, vocab);                                                          \
                fprintf(stderr, __VA_ARGS__);                                                     \
                fputc('\n', stderr);                                                              \
                describe(fs, nf);                                                                 \
            }                                                                                     \
        }                                                                                         \
    } while (0)

/* compare one read of sequence g (global, file order) with the bytes written */
static bool seq_matches(const file *fs, const shard_info *si, int nf, int T, int64_t g,
                        const int32_t *x, const int32_t *y)
{
    for (int k = 0; k < nf; k++) {
        int64_t ns = si[k].ntok >= T + 1 ? (si[k].ntok - 1) / T : 0;
        if (g >= ns) {
            g -= ns;
            continue;
        }
        for (int i = 0; i < T; i++)
            if ((uint32_t)x[i] != tok_at(&fs[k], &si[k], g * T + i) ||
                (uint32_t)y[i] != tok_at(&fs[k], &si[k], g * T + i + 1))
                return false;
        return true;
    }
    return false;
}

static void check_set(long iter, const file *fs, int nf, const char *pattern, int T, int vocab,
                      bool do_shuffle)
{
    shard_info si[MAXF];
    int first_bad = -1;
    int64_t nseq = 0, ntok = 0;
    for (int k = 0; k < nf; k++) {
        si[k] = inspect(&fs[k]);
        bool ok = si[k].ok_header && si[k].max_tok < (uint32_t)vocab;
        if (!ok && first_bad < 0) first_bad = k;
        if (si[k].ok_header) {
            ntok += si[k].ntok;
            nseq += si[k].ntok >= T + 1 ? (si[k].ntok - 1) / T : 0;
        }
    }
    bool want_ok = first_bad < 0 && nseq > 0;

    zinf_data *d = NULL;
    zinf_err_clear();
    int rc = zinf_data_open(&d, pattern, T, vocab, 12345, 0);
    const char *msg = zinf_errmsg();
    FCHECK((rc == 0) == want_ok, "open returned %d, expected %s (%s)", rc,
           want_ok ? "success" : "failure", rc ? msg : "no message");
    if (rc == 0) opens_ok++;
    else opens_failed++;
    if (rc < 0) {
        FCHECK(d == NULL, "failed open left *out set");
        FCHECK(msg[0] && !strchr(msg, '\n'), "bad message: \"%s\"", msg);
        if (first_bad >= 0) {
            char path[4200];
            snprintf(path, sizeof path, "%s/shard_%d.bin", dir, first_bad);
            FCHECK(strstr(msg, path) != NULL, "message does not name %s: %s", path, msg);
        } else {
            FCHECK(strstr(msg, pattern) != NULL, "message does not name the pattern: %s", msg);
        }
    }
    if (rc != 0 || !d) return;

    FCHECK(zinf_data_num_files(d) == nf && zinf_data_num_tokens(d) == ntok &&
               zinf_data_num_sequences(d) == nseq,
           "files %d tokens %lld sequences %lld, expected %d %lld %lld", zinf_data_num_files(d),
           (long long)zinf_data_num_tokens(d), (long long)zinf_data_num_sequences(d), nf,
           (long long)ntok, (long long)nseq);
    int32_t *x = malloc(sizeof(int32_t) * (size_t)T * 3), *y = malloc(sizeof(int32_t) * (size_t)T * 3);
    int64_t pos[6] = {0, nseq - 1, nseq, (int64_t)rndn((size_t)nseq), (int64_t)rndn((size_t)nseq),
                      2 * nseq + (int64_t)rndn((size_t)nseq)};
    for (int p = 0; p < 6; p++) {
        int64_t count = 1 + (int64_t)rndn(3);
        int r = zinf_data_read(d, pos[p], count, x, y);
        FCHECK(r == 0, "read at %lld failed: %s", (long long)pos[p], zinf_errmsg());
        for (int64_t c = 0; r == 0 && c < count; c++) {
            int64_t g = (pos[p] + c) % nseq;
            FCHECK(seq_matches(fs, si, nf, T, g, x + c * T, y + c * T),
                   "stream position %lld (sequence %lld) reads other tokens than were written",
                   (long long)(pos[p] + c), (long long)g);
        }
    }
    zinf_data_close(d);

    if (do_shuffle && nseq <= 512) {
        int rs = zinf_data_open(&d, pattern, T, vocab, 777 + (uint64_t)iter, 1);
        FCHECK(rs == 0, "shuffled open failed: %s", zinf_errmsg());
        if (rs == 0) {
            bool *used = calloc((size_t)nseq, 1);
            for (int64_t p = 0; p < nseq; p++) {
                zinf_data_read(d, p, 1, x, y);
                int64_t g = 0;
                /* equal sequences are interchangeable, so the first unused match will do */
                while (g < nseq && (used[g] || !seq_matches(fs, si, nf, T, g, x, y))) g++;
                FCHECK(g < nseq, "shuffled epoch 0 position %lld is no unread sequence",
                       (long long)p);
                if (g >= nseq) break;
                used[g] = true;
            }
            free(used);
            zinf_data_close(d);
        }
    }
    free(x);
    free(y);
}

/* zinf_data_write_shard against this test's own encoding */
static void check_writer(long iter)
{
    int64_t n = (int64_t)rndn(300);
    uint32_t *t = malloc(sizeof *t * (size_t)(n + 1));
    bool wide = rndn(3) == 0;
    for (int64_t i = 0; i < n; i++) t[i] = wide ? random_token() : (uint32_t)rndn(65536);
    int version = 1;
    for (int64_t i = 0; i < n; i++)
        if (t[i] > 65535) version = 2;
    char path[4200];
    snprintf(path, sizeof path, "%s/written.bin", dir);
    int rc = zinf_data_write_shard(path, t, n);
    const int T = 0, vocab = 0;
    const file *fs = NULL;
    const int nf = 0;
    FCHECK(rc == 0, "write_shard: %s", zinf_errmsg());
    FILE *fp = fopen(path, "rb");
    file f = {0};
    file_resize(&f, HDR + 4 * (size_t)n + 16);
    size_t got = fp ? fread(f.p, 1, f.n, fp) : 0;
    if (fp) fclose(fp);
    f.n = got;
    shard_info s = inspect(&f);
    FCHECK(s.ok_header && s.ntok == n && s.tokbytes == (version == 1 ? 2 : 4),
           "written shard: %zu bytes, header ok %d, %lld tokens of %d bytes (wanted %lld, version %d)",
           got, s.ok_header, (long long)s.ntok, s.tokbytes, (long long)n, version);
    bool same = s.ok_header;
    for (int64_t i = 0; same && i < n; i++) same = tok_at(&f, &s, i) == t[i];
    FCHECK(same, "written tokens differ");
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FCHECK(access(tmp, F_OK) != 0, "write_shard left %s", tmp);
    unlink(path);
    free(f.p);
    free(t);
}

/* ------------------------------------------------------------ SFT shards */

typedef struct {
    int64_t n, S;
    int tb;
} sft_layout;

/* A valid SFT shard of random samples into f. */
static sft_layout make_sft(file *f)
{
    sft_layout L = {0, 1 + (int64_t)rndn(12), rndn(3) ? 2 : 4};
    int64_t len[16];
    for (int64_t k = 0; k < L.S; k++) L.n += len[k] = 1 + (int64_t)(rndn(4) ? rndn(20) : rndn(90));
    int64_t lb = (L.n + 3) / 4 * 4;
    f->n = 0;
    file_resize(f, HDR + (size_t)(L.n * L.tb + lb + 4 * (L.S + 1)));
    put32(f, 0, 20240520);
    put32(f, 4, L.tb == 2 ? 3 : 4);
    put32(f, 8, (int32_t)L.n);
    put32(f, 12, (int32_t)L.S);
    for (int64_t i = 0; i < L.n; i++) {
        uint32_t t = rndn(6) ? (uint32_t)rndn(256) : random_token();
        if (L.tb == 2) {
            uint16_t u = (uint16_t)t;
            memcpy(f->p + HDR + 2 * i, &u, 2);
        } else {
            memcpy(f->p + HDR + 4 * i, &t, 4);
        }
        f->p[HDR + L.n * L.tb + i] = (unsigned char)rndn(2);
    }
    int64_t at = 0;
    for (int64_t k = 0; k <= L.S; k++) {
        put32(f, (size_t)(HDR + L.n * L.tb + lb + 4 * k), (int32_t)at);
        if (k < L.S) at += len[k];
    }
    return L;
}

static void mutate_sft(file *f, const sft_layout *L)
{
    size_t starts = (size_t)(HDR + L->n * L->tb + (L->n + 3) / 4 * 4);
    switch (rndn(6)) {
    case 0: put32(f, 12, (int32_t)(L->S + (rndn(2) ? 1 : -1))); break;
    case 1: { /* a start moved */
        size_t at = starts + 4 * rndn((size_t)L->S + 1);
        if (at + 4 <= f->n) put32(f, at, get32(f, at) + (rndn(2) ? 1 : -1) * (1 + (int32_t)rndn(5)));
        break;
    }
    case 2: /* a loss flag */
        f->p[HDR + L->n * L->tb + rndn((size_t)L->n)] = (unsigned char)(rndn(2) ? 2 : 255);
        break;
    case 3: f->n = HDR + rndn(f->n - HDR); break;
    case 4: file_resize(f, f->n + 1 + rndn(8)); break;
    default: f->p[rndn(f->n)] ^= (unsigned char)(1u << rndn(8)); break;
    }
}

/* Open and read one SFT file f (written as shard_0.bin) against the rules above. */
static void check_sft(long iter, const file *f, const char *pattern, int T, int vocab)
{
    const file *fs = f;
    const int nf = 1;
    /* the oracle */
    bool valid = f->n >= HDR && get32(f, 0) == 20240520 && (get32(f, 4) == 3 || get32(f, 4) == 4);
    int64_t n = valid ? get32(f, 8) : 0, S = valid ? get32(f, 12) : 0;
    int tb = valid && get32(f, 4) == 4 ? 4 : 2;
    valid = valid && n >= 0 && S >= 0 && (int64_t)f->n == HDR + n * tb + (n + 3) / 4 * 4 + 4 * (S + 1);
    size_t lo = (size_t)(HDR + n * tb), so = lo + (size_t)((n + 3) / 4 * 4);
    int64_t kept = 0;
    shard_info si = {.ok_header = true, .tokbytes = tb, .ntok = n};
    for (int64_t i = 0; valid && i < n; i++) valid = f->p[lo + i] <= 1 && tok_at(f, &si, i) < (uint32_t)vocab;
    for (int64_t k = 0; valid && k <= S; k++) {
        int32_t a = get32(f, so + 4 * (size_t)k);
        valid = k == 0 ? a == 0 : a > get32(f, so + 4 * (size_t)(k - 1)) && a <= n;
        if (valid && k > 0) kept += a - get32(f, so + 4 * (size_t)(k - 1)) <= T;
    }
    valid = valid && get32(f, so + 4 * (size_t)S) == n;
    bool want_ok = valid && kept > 0;

    zinf_data *d = NULL;
    zinf_err_clear();
    int rc = zinf_data_open(&d, pattern, T, vocab, 5, 0);
    const char *msg = zinf_errmsg();
    FCHECK((rc == 0) == want_ok, "SFT open returned %d, expected %s (%s)", rc, want_ok ? "success" : "failure",
           rc ? msg : "no message");
    if (rc < 0) {
        FCHECK(!d && msg[0] && !strchr(msg, '\n'), "bad failure: \"%s\"", msg);
        char path[4200];
        snprintf(path, sizeof path, "%s/shard_0.bin", dir);
        FCHECK(strstr(msg, valid ? pattern : path) != NULL, "message names neither the file nor the pattern: %s", msg);
    }
    if (rc != 0 || !d) return;
    FCHECK(zinf_data_num_samples(d) == S && zinf_data_num_dropped(d) == S - kept && zinf_data_num_sequences(d) == kept,
           "samples %lld dropped %lld rows %lld, expected %lld %lld %lld", (long long)zinf_data_num_samples(d),
           (long long)zinf_data_num_dropped(d), (long long)zinf_data_num_sequences(d), (long long)S,
           (long long)(S - kept), (long long)kept);
    int32_t *x = malloc(sizeof(int32_t) * (size_t)T * 4), *y = x + T, *p = y + T, *kv = p + T;
    int64_t r = 0;
    for (int64_t k = 0; k < S; k++) {
        int64_t a = get32(f, so + 4 * (size_t)k), len = get32(f, so + 4 * (size_t)(k + 1)) - a;
        if (len > T) continue;
        FCHECK(zinf_data_read_rows(d, r, 1, x, y, p, kv) == 0, "read row %lld: %s", (long long)r, zinf_errmsg());
        bool same = true;
        for (int64_t j = 0; j < T; j++) {
            bool in = j < len;
            int64_t want_y = in && j + 1 < len && f->p[lo + a + j + 1] ? (int64_t)tok_at(f, &si, a + j + 1) : -1;
            same &= x[j] == (in ? (int32_t)tok_at(f, &si, a + j) : 0) && y[j] == want_y &&
                    p[j] == (in ? j : j - len) && kv[j] == (in ? 0 : len);
        }
        FCHECK(same, "row %lld (sample %lld of %lld tokens) differs from the bytes written", (long long)r,
               (long long)k, (long long)len);
        r++;
    }
    free(x);
    zinf_data_close(d);
}

int main(void)
{
    const uint32_t one = 1;
    unsigned char lo;
    memcpy(&lo, &one, 1);
    if (lo != 1) {
        printf("fuzz_shards: the shard format is little-endian and this host is not; skipped\n");
        return 77;
    }
    long iters = 5000;
    double max_s = 15;
    uint64_t seed = fuzz_options(&iters, &max_s);

    const char *tmpd = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zinf-fuzz-shards-XXXXXX", tmpd && *tmpd ? tmpd : "/tmp");
    if (!mkdtemp(dir)) {
        perror("fuzz_shards: mkdtemp");
        return 1;
    }
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s/shard_*.bin", dir);

    static const int TS[] = {1, 7, 64}, VOCABS[] = {256, 50257, 70000};
    file fs[MAXF] = {{0}};
    long iter, opened = 0, valid_sets = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (iter = 0; iter < iters; iter++) {
        if ((iter & 63) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec) > max_s) {
                printf("fuzz_shards: time cap of %.0f s reached after %ld of %ld iterations\n",
                       max_s, iter, iters);
                break;
            }
        }
        int nf = rndn(3) ? 1 : 2 + (int)rndn(MAXF - 1);
        for (int k = 0; k < nf; k++) {
            make_valid(&fs[k]);
            if (rndn(5) >= 2) { /* 60% of files mutated, 1-3 times */
                int nm = 1 + (int)rndn(3);
                for (int m = 0; m < nm; m++) mutate(&fs[k]);
            }
            char path[4200];
            snprintf(path, sizeof path, "%s/shard_%d.bin", dir, k);
            FILE *fp = fopen(path, "wb");
            if (!fp || (fs[k].n && fwrite(fs[k].p, 1, fs[k].n, fp) != fs[k].n) || fclose(fp)) {
                perror(path);
                return 1;
            }
        }
        for (int ti = 0; ti < 3; ti++)
            for (int vi = 0; vi < 3; vi++) {
                check_set(iter, fs, nf, pattern, TS[ti], VOCABS[vi], rndn(4) == 0);
                opened++;
            }
        bool all_ok = true;
        for (int k = 0; k < nf; k++) all_ok &= inspect(&fs[k]).ok_header;
        valid_sets += all_ok;
        if (iter % 32 == 0) check_writer(iter);
        for (int k = 0; k < nf; k++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/shard_%d.bin", dir, k);
            unlink(path);
        }
    }
    /* SFT shards: a fifth of the iterations, in the same time cap */
    long sft_iters = 0;
    for (long k = 0; k < iters / 5; k++, sft_iters++) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec) > max_s) break;
        sft_layout L = make_sft(&fs[0]);
        if (rndn(5) >= 2) mutate_sft(&fs[0], &L);
        char path[4200];
        snprintf(path, sizeof path, "%s/shard_0.bin", dir);
        FILE *fp = fopen(path, "wb");
        if (!fp || (fs[0].n && fwrite(fs[0].p, 1, fs[0].n, fp) != fs[0].n) || fclose(fp)) {
            perror(path);
            return 1;
        }
        for (int ti = 0; ti < 3; ti++) check_sft(k, &fs[0], pattern, TS[ti], VOCABS[rndn(3)]);
        unlink(path);
    }
    /* T and vocab out of range are refused before any file is read */
    {
        const int T = 0, vocab = 256, nf = 0;
        const file *fs_none = NULL;
        zinf_data *d = NULL;
        {
            const file *fs = fs_none; /* FCHECK describes no files here */
            FCHECK(zinf_data_open(&d, pattern, 0, 256, 1, 0) < 0 && !d, "T = 0 accepted");
            FCHECK(zinf_data_open(&d, pattern, 7, 0, 1, 0) < 0 && !d, "vocab 0 accepted");
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    for (int k = 0; k < MAXF; k++) free(fs[k].p);
    rmdir(dir);
    printf("fuzz_shards: seed %llu, %ld iterations (%ld opens: %ld succeeded, %ld refused; %ld sets "
           "with all headers valid), %ld SFT shards, in %.1f s\n",
           (unsigned long long)seed, iter, opened, opens_ok, opens_failed, valid_sets, sft_iters, secs);
    return check_done("fuzz_shards");
}
