/* test_data: shard round trips, sequence indexing, the epoch shuffle, the world-size-independent
 * batch layout, error messages for bad shards, and `zinf data` byte-level sharding.
 * Shards are written into a fresh mkdtemp directory, removed at the end. */
#define _GNU_SOURCE
#include "check.h"
#include "data.h"
#include "err.h"

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static const char *pth(const char *name)
{
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", dir, name);
    return b;
}

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Write a raw file: header ints h0..h2, then `nbytes` payload bytes (pattern). Built by hand so
 * the reader is checked against the format, not against our writer. */
static void write_raw(const char *path, int32_t magic, int32_t version, int32_t ntok,
                      const void *payload, size_t nbytes)
{
    int32_t h[ZINF_DATA_HEADER_INTS] = {0};
    h[0] = magic;
    h[1] = version;
    h[2] = ntok;
    FILE *f = fopen(path, "wb");
    fwrite(h, sizeof h, 1, f);
    if (nbytes) fwrite(payload, 1, nbytes, f);
    fclose(f);
}

static int errmsg_has(const char *s) { return strstr(zinf_errmsg(), s) != NULL; }

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* --------------------------------------------------------------------------------------------- */

static void test_round_trip(void)
{
    /* uint16: the writer's bytes must match the format exactly. */
    uint32_t tok[1000];
    for (int i = 0; i < 1000; i++) tok[i] = (uint32_t)(i * 37 % 50000);
    const char *p16 = pth("rt16.bin");
    CHECK(zinf_data_write_shard(p16, tok, 1000) == 0, "write: %s", zinf_errmsg());
    CHECK(!file_exists(pth("rt16.bin.tmp")), "tmp file left behind");
    FILE *f = fopen(p16, "rb");
    int32_t h[256];
    uint16_t body[1001];
    CHECK(fread(h, 4, 256, f) == 256, "header");
    size_t got = fread(body, 2, 1001, f);
    fclose(f);
    CHECK(h[0] == 20240520 && h[1] == 1 && h[2] == 1000, "header %d %d %d", h[0], h[1], h[2]);
    CHECK(got == 1000, "uint16 payload: %zu tokens", got);
    int same = 1;
    for (int i = 0; i < 1000; i++) same &= body[i] == tok[i];
    CHECK(same, "uint16 payload differs");

    /* Read back through the loader: T = 10 -> (1000-1)/10 = 99 sequences. */
    zinf_data *d;
    CHECK(zinf_data_open(&d, p16, 10, 50304, 0, 0) == 0, "open: %s", zinf_errmsg());
    CHECK(zinf_data_num_sequences(d) == 99, "nseq %lld", (long long)zinf_data_num_sequences(d));
    CHECK(zinf_data_num_tokens(d) == 1000, "ntok");
    CHECK(zinf_data_num_files(d) == 1, "nfiles");
    int32_t inp[99 * 10], tgt[99 * 10];
    CHECK(zinf_data_read(d, 0, 99, inp, tgt) == 0, "read");
    same = 1;
    for (int s = 0; s < 99; s++)
        for (int i = 0; i < 10; i++) {
            same &= inp[s * 10 + i] == (int32_t)tok[s * 10 + i];
            same &= tgt[s * 10 + i] == (int32_t)tok[s * 10 + i + 1];
        }
    CHECK(same, "inp/tgt are not tokens [i*T, i*T+T] shifted by one");
    zinf_data_close(d);

    /* uint32 variant: a token over 65535 switches to version 2. */
    for (int i = 0; i < 1000; i++) tok[i] = (uint32_t)(60000 + i * 97 % 40000);
    const char *p32 = pth("rt32.bin");
    CHECK(zinf_data_write_shard(p32, tok, 1000) == 0, "write32: %s", zinf_errmsg());
    struct stat st;
    stat(p32, &st);
    CHECK(st.st_size == 1024 + 4000, "uint32 size %lld", (long long)st.st_size);
    f = fopen(p32, "rb");
    CHECK(fread(h, 4, 256, f) == 256, "header");
    fclose(f);
    CHECK(h[1] == 2 && h[2] == 1000, "uint32 header %d %d", h[1], h[2]);
    CHECK(zinf_data_open(&d, p32, 8, 100000, 0, 0) == 0, "open32: %s", zinf_errmsg());
    CHECK(zinf_data_num_sequences(d) == 124, "nseq32 %lld", (long long)zinf_data_num_sequences(d));
    int32_t in2[124 * 8], tg2[124 * 8];
    zinf_data_read(d, 0, 124, in2, tg2);
    same = 1;
    for (int s = 0; s < 124; s++)
        for (int i = 0; i < 8; i++) {
            same &= in2[s * 8 + i] == (int32_t)tok[s * 8 + i];
            same &= tg2[s * 8 + i] == (int32_t)tok[s * 8 + i + 1];
        }
    CHECK(same, "uint32 round trip");
    zinf_data_close(d);
}

/* Three shards, T = 4, tokens = their global index (so a sequence is named by its first token):
 * a: 21 tokens -> 5 sequences, b: 3 tokens -> none, c: 40 tokens -> 9 sequences. */
enum { ST = 4, SN = 14 };
static int64_t seq_id[SN]; /* first token of each global sequence in unshuffled order */

static void make_set(void)
{
    uint32_t tok[64];
    int64_t base = 0, k = 0;
    const char *names[3] = {"set_a.bin", "set_b.bin", "set_c.bin"};
    const int ns[3] = {21, 3, 40};
    for (int f = 0; f < 3; f++) {
        for (int i = 0; i < ns[f]; i++) tok[i] = (uint32_t)(base + i);
        zinf_data_write_shard(pth(names[f]), tok, ns[f]);
        for (int i = 0; (i + 1) * ST + 1 <= ns[f]; i++) seq_id[k++] = base + i * ST;
        base += ns[f];
    }
}

/* Which global sequence (0..SN) does this input row hold? -1 if none. */
static int64_t which(const int32_t *row)
{
    for (int g = 0; g < SN; g++)
        if (seq_id[g] == row[0]) {
            for (int i = 0; i < ST; i++)
                if (row[i] != seq_id[g] + i) return -1;
            return g;
        }
    return -1;
}

static void read_ids(zinf_data *d, int64_t first, int64_t count, int64_t *ids)
{
    int32_t inp[64 * ST], tgt[64 * ST];
    CHECK(zinf_data_read(d, first, count, inp, tgt) == 0, "read: %s", zinf_errmsg());
    for (int64_t k = 0; k < count; k++) {
        ids[k] = which(inp + k * ST);
        CHECK(tgt[k * ST + ST - 1] == inp[k * ST + ST - 1] + 1, "target shift");
    }
}

static void test_sequences_and_shuffle(void)
{
    make_set();
    const char *pat = pth("set_*.bin");
    zinf_data *d, *d2, *d3;
    CHECK(zinf_data_open(&d, pat, ST, 50304, 0, 0) == 0, "open: %s", zinf_errmsg());
    CHECK(zinf_data_num_files(d) == 3, "files %d", zinf_data_num_files(d));
    CHECK(zinf_data_num_sequences(d) == SN, "nseq %lld", (long long)zinf_data_num_sequences(d));
    CHECK(zinf_data_num_tokens(d) == 64, "ntok");
    int64_t ids[3 * SN];
    read_ids(d, 0, 2 * SN, ids);
    int ident = 1;
    for (int k = 0; k < 2 * SN; k++) ident &= ids[k] == k % SN;
    CHECK(ident, "shuffle=0 must read sequences in file order, every epoch");
    zinf_data_close(d);

    CHECK(zinf_data_open(&d, pat, ST, 50304, 1234, 1) == 0, "open: %s", zinf_errmsg());
    CHECK(zinf_data_open(&d2, pat, ST, 50304, 1234, 1) == 0, "open: %s", zinf_errmsg());
    CHECK(zinf_data_open(&d3, pat, ST, 50304, 99, 1) == 0, "open: %s", zinf_errmsg());
    /* Three epochs in one read (crosses two boundaries inside the read). */
    read_ids(d, 0, 3 * SN, ids);
    for (int e = 0; e < 3; e++) {
        int64_t s[SN];
        memcpy(s, ids + e * SN, sizeof s);
        qsort(s, SN, sizeof s[0], cmp_i64);
        int perm = 1;
        for (int k = 0; k < SN; k++) perm &= s[k] == k;
        CHECK(perm, "epoch %d is not a permutation of the %d sequences", e, SN);
    }
    CHECK(memcmp(ids, ids + SN, SN * sizeof ids[0]) != 0, "epochs 0 and 1 identical");
    CHECK(memcmp(ids + SN, ids + 2 * SN, SN * sizeof ids[0]) != 0, "epochs 1 and 2 identical");
    int64_t same_ids[3 * SN], other[3 * SN];
    /* Same seed, read backwards one at a time (forces recomputing the cached epoch). */
    for (int64_t p = 3 * SN - 1; p >= 0; p--) read_ids(d2, p, 1, same_ids + p);
    CHECK(memcmp(ids, same_ids, sizeof ids) == 0, "same seed gives a different stream");
    read_ids(d3, 0, 3 * SN, other);
    CHECK(memcmp(ids, other, SN * sizeof ids[0]) != 0, "seeds 1234 and 99 give the same epoch 0");
    int shuffled = 0;
    for (int k = 0; k < SN; k++) shuffled |= ids[k] != k;
    CHECK(shuffled, "shuffle=1 kept file order");
    zinf_data_close(d);
    zinf_data_close(d2);
    zinf_data_close(d3);
}

/* The global batch of step s is the same multiset whatever the world size and micro split. */
static void test_world_independence(void)
{
    const char *pat = pth("set_*.bin");
    const int G = 12;
    const int cfg[7][3] = {{1, 12, 1}, {1, 4, 3}, {2, 6, 1}, {2, 2, 3},
                           {3, 4, 1},  {4, 3, 1}, {4, 1, 3}}; /* world, micro, grad_accum */
    /* SN = 14 sequences: steps 0..4 span positions 0..59, crossing epoch boundaries 14, 28, 42,
     * 56 (steps 1, 2, 3 and 4 each hold two epochs). */
    for (int64_t step = 0; step < 5; step++) {
        zinf_data *ref;
        zinf_data_open(&ref, pat, ST, 50304, 7, 1);
        int64_t want[12];
        read_ids(ref, step * G, G, want);
        zinf_data_close(ref);
        qsort(want, G, sizeof want[0], cmp_i64);
        for (int c = 0; c < 7; c++) {
            int world = cfg[c][0], mb = cfg[c][1], gas = cfg[c][2];
            CHECK(world * mb * gas == G, "config %d", c);
            int64_t got[12];
            int n = 0;
            for (int r = 0; r < world; r++) {
                zinf_data *d; /* each rank has its own loader (and epoch cache) */
                zinf_data_open(&d, pat, ST, 50304, 7, 1);
                for (int m = 0; m < gas; m++) {
                    int64_t first = zinf_data_slice_start(step, G, m, r, world, mb);
                    read_ids(d, first, mb, got + n);
                    n += mb;
                }
                zinf_data_close(d);
            }
            qsort(got, n, sizeof got[0], cmp_i64);
            CHECK(n == G && memcmp(got, want, sizeof want) == 0,
                  "step %lld world %d micro %d gas %d: batch differs from world 1",
                  (long long)step, world, mb, gas);
        }
    }
    /* Layout: j = (micro*world + rank)*micro_batch. */
    CHECK(zinf_data_slice_start(3, 12, 2, 1, 4, 1) == 36 + 9, "slice_start");
    CHECK(zinf_data_slice_start(5, 24, 1, 2, 3, 4) == 120 + 20, "slice_start");
}

static void test_errors(void)
{
    zinf_data *d = NULL;
    uint16_t pay[100];
    for (int i = 0; i < 100; i++) pay[i] = (uint16_t)i;

    const char *p = pth("bad_magic.bin");
    write_raw(p, 12345, 1, 100, pay, 200);
    CHECK(zinf_data_open(&d, p, 8, 50304, 0, 0) < 0 && !d, "wrong magic accepted");
    CHECK(errmsg_has(p) && errmsg_has("magic") && errmsg_has("12345"), "msg: %s", zinf_errmsg());

    p = pth("trunc.bin");
    write_raw(p, ZINF_DATA_MAGIC, 1, 100, pay, 150);
    CHECK(zinf_data_open(&d, p, 8, 50304, 0, 0) < 0, "truncated accepted");
    CHECK(errmsg_has(p) && errmsg_has("truncated") && errmsg_has("1224") && errmsg_has("1174"),
          "msg: %s", zinf_errmsg());

    p = pth("hdr_only.bin");
    write_raw(p, ZINF_DATA_MAGIC, 1, 0, NULL, 0);
    CHECK(truncate(p, 1000) == 0, "truncate");
    CHECK(zinf_data_open(&d, p, 8, 50304, 0, 0) < 0, "short header accepted");
    CHECK(errmsg_has(p) && errmsg_has("truncated"), "msg: %s", zinf_errmsg());

    p = pth("over.bin");
    write_raw(p, ZINF_DATA_MAGIC, 1, 90, pay, 200);
    CHECK(zinf_data_open(&d, p, 8, 50304, 0, 0) < 0, "oversize accepted");
    CHECK(errmsg_has(p) && errmsg_has("1204") && errmsg_has("1224"), "msg: %s", zinf_errmsg());

    p = pth("ver.bin");
    write_raw(p, ZINF_DATA_MAGIC, 3, 100, pay, 200);
    CHECK(zinf_data_open(&d, p, 8, 50304, 0, 0) < 0, "version 3 accepted");
    CHECK(errmsg_has(p) && errmsg_has("version 3"), "msg: %s", zinf_errmsg());

    uint32_t big[200];
    for (int i = 0; i < 200; i++) big[i] = (uint32_t)i;
    big[123] = 70000;
    p = pth("vocab.bin");
    zinf_data_write_shard(p, big, 200);
    CHECK(zinf_data_open(&d, p, 8, 50304, 0, 0) < 0, "token >= vocab accepted");
    char want[600];
    snprintf(want, sizeof want, "%s: token 70000 at index 123 is >= vocab size 50304", p);
    CHECK(strcmp(zinf_errmsg(), want) == 0, "msg: %s", zinf_errmsg());
    /* uint16 file with vocab 256 (bytes) and a token 300. */
    big[123] = 300;
    p = pth("vocab16.bin");
    zinf_data_write_shard(p, big, 200);
    CHECK(zinf_data_open(&d, p, 8, 256, 0, 0) < 0, "uint16 token >= vocab accepted");
    CHECK(errmsg_has(p) && errmsg_has("token 300 at index 123"), "msg: %s", zinf_errmsg());

    p = pth("nothing_*.bin");
    CHECK(zinf_data_open(&d, p, 8, 50304, 0, 0) < 0, "empty glob accepted");
    snprintf(want, sizeof want, "no files match '%s' (zinf data makes token shards from text: zinf data --help)", p);
    CHECK(strcmp(zinf_errmsg(), want) == 0, "msg: %s", zinf_errmsg());

    /* Too short: 8 tokens, T = 8 needs 9. One short file among good ones is fine. */
    p = pth("short_1.bin");
    zinf_data_write_shard(p, big, 8);
    const char *pat = pth("short_*.bin");
    CHECK(zinf_data_open(&d, pat, 8, 50304, 0, 0) < 0, "too-short data accepted");
    CHECK(errmsg_has(pat) && errmsg_has("T = 8"), "msg: %s", zinf_errmsg());
    zinf_data_write_shard(pth("short_2.bin"), big, 9);
    CHECK(zinf_data_open(&d, pat, 8, 50304, 0, 0) == 0, "open: %s", zinf_errmsg());
    if (d) {
        CHECK(zinf_data_num_sequences(d) == 1 && zinf_data_num_files(d) == 2, "short files");
        zinf_data_close(d);
    }

    /* Writing into a missing directory fails cleanly. */
    p = pth("no_such_dir/x.bin");
    CHECK(zinf_data_write_shard(p, big, 10) < 0, "write into missing dir succeeded");
    CHECK(errmsg_has(p) && errmsg_has("No such file"), "msg: %s", zinf_errmsg());
    CHECK(!file_exists(pth("no_such_dir/x.bin.tmp")) && !file_exists(p), "leftover");

    /* A write that fails part way (file size limit, like a full disk) leaves nothing behind. */
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        static uint32_t many[100000];
        p = pth("toolarge.bin");
        int rc = zinf_data_write_shard(p, many, 100000);
        setrlimit(RLIMIT_FSIZE, &old);
        CHECK(rc < 0, "write past the size limit succeeded");
        CHECK(errmsg_has(p) && errmsg_has("write failed"), "msg: %s", zinf_errmsg());
        CHECK(!file_exists(p) && !file_exists(pth("toolarge.bin.tmp")), "partial file left");
    }
    signal(SIGXFSZ, oldsig);
}

static void test_make_bytes(void)
{
    /* 1000 bytes of every value 0..255. */
    unsigned char text[1000];
    for (int i = 0; i < 1000; i++) text[i] = (unsigned char)(i * 7 + i / 256);
    const char *tp = pth("input.txt");
    FILE *f = fopen(tp, "wb");
    fwrite(text, 1, 1000, f);
    fclose(f);

    char prefix[400];
    snprintf(prefix, sizeof prefix, "%s/mb", dir);
    char *log = NULL;
    size_t loglen = 0;
    FILE *out = open_memstream(&log, &loglen);
    CHECK(zinf_data_make_bytes(tp, prefix, 0.1, 400, out, NULL) == 0, "make_bytes: %s", zinf_errmsg());
    fclose(out);
    /* 900 train bytes in shards of 400, 400, 100; 100 validation bytes. */
    int nl = 0;
    for (size_t i = 0; i < loglen; i++) nl += log[i] == '\n';
    CHECK(nl == 4, "expected 4 report lines, got:\n%s", log);
    CHECK(log && strstr(log, "mb_train_000002.bin 100 tokens") && strstr(log, "mb_val_000000.bin"),
          "report:\n%s", log);
    free(log);
    CHECK(!file_exists(pth("mb_train_000003.bin")), "extra shard");

    /* Train + val read back (T = 1: every token but the last of each shard is an input). */
    zinf_data *d;
    CHECK(zinf_data_open(&d, pth("mb_train_*.bin"), 1, 256, 0, 0) == 0, "open: %s", zinf_errmsg());
    CHECK(zinf_data_num_files(d) == 3 && zinf_data_num_tokens(d) == 900, "train tokens %lld",
          (long long)zinf_data_num_tokens(d));
    zinf_data_close(d);
    int32_t got[1000];
    int n = 0;
    const char *parts[4] = {"mb_train_000000.bin", "mb_train_000001.bin", "mb_train_000002.bin",
                            "mb_val_000000.bin"};
    for (int k = 0; k < 4; k++) {
        int T = 1;
        CHECK(zinf_data_open(&d, pth(parts[k]), T, 256, 0, 0) == 0, "open: %s", zinf_errmsg());
        int64_t ns = zinf_data_num_sequences(d), nt = zinf_data_num_tokens(d);
        CHECK(nt == (k < 2 ? 400 : 100), "%s: %lld tokens", parts[k], (long long)nt);
        int32_t inp[400], tgt[400];
        zinf_data_read(d, 0, ns, inp, tgt);
        for (int64_t i = 0; i < ns; i++) got[n++] = inp[i];
        got[n++] = tgt[ns - 1];
        zinf_data_close(d);
    }
    int same = n == 1000;
    for (int i = 0; same && i < 1000; i++) same &= got[i] == text[i];
    CHECK(same, "bytes read back differ from the text");

    /* No validation split, one shard. */
    snprintf(prefix, sizeof prefix, "%s/one", dir);
    CHECK(zinf_data_make_bytes(tp, prefix, 0, 0, NULL, NULL) == 0, "make_bytes: %s", zinf_errmsg());
    CHECK(file_exists(pth("one_train_000000.bin")) && !file_exists(pth("one_train_000001.bin")) &&
              !file_exists(pth("one_val_000000.bin")),
          "one shard, no val");

    /* UTF-8 text splits between characters: "a" and 333 three-byte characters (U+20AC, E2 82 AC),
     * 1000 bytes; 10% nominally splits at byte 900, the third byte of the character that starts
     * at 898 (1 + 3 x 299), so validation starts there: 102 bytes, the first a lead byte */
    {
        unsigned char u[1000];
        u[0] = 'a';
        for (int i = 0; i < 333; i++) u[1 + 3 * i] = 0xE2, u[2 + 3 * i] = 0x82, u[3 + 3 * i] = 0xAC;
        const char *up = pth("utf8.txt");
        FILE *uf = fopen(up, "wb");
        fwrite(u, 1, sizeof u, uf);
        fclose(uf);
        snprintf(prefix, sizeof prefix, "%s/u8", dir);
        CHECK(zinf_data_make_bytes(up, prefix, 0.1, 0, NULL, NULL) == 0, "make_bytes utf8: %s", zinf_errmsg());
        zinf_data *dv;
        CHECK(zinf_data_open(&dv, pth("u8_val_000000.bin"), 1, 256, 0, 0) == 0, "open: %s", zinf_errmsg());
        int32_t vi[2], vt[2];
        zinf_data_read(dv, 0, 1, vi, vt);
        CHECK(zinf_data_num_tokens(dv) == 102 && vi[0] == 0xE2, "utf8 split: %lld validation tokens, first %d",
              (long long)zinf_data_num_tokens(dv), vi[0]);
        zinf_data_close(dv);
    }

    /* A JSON Lines input (ms-swift's dataset format) is tokenised as text, with one warning line;
     * plain text that merely contains braces draws none */
    {
        const char *texts[2] = {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\r\n{\"messages\": []}\n",
                                "{braces} are text here\nand more text\n"};
        for (int k = 0; k < 2; k++) {
            const char *jp = pth(k ? "braces.txt" : "chat.jsonl");
            FILE *jf = fopen(jp, "wb");
            fputs(texts[k], jf);
            fclose(jf);
            char *wb = NULL;
            size_t wl = 0;
            FILE *w = open_memstream(&wb, &wl);
            snprintf(prefix, sizeof prefix, "%s/js%d", dir, k);
            CHECK(zinf_data_make_bytes(jp, prefix, 0, 0, NULL, w) == 0, "make_bytes %s: %s", jp, zinf_errmsg());
            fclose(w);
            int warned = wb && strstr(wb, "looks like JSON Lines") && strstr(wb, jp) != NULL;
            CHECK(warned == (k == 0), "%s: warning '%s'", jp, wb ? wb : "");
            free(wb);
        }
    }

    /* Errors: missing input, empty input, bad fraction. */
    CHECK(zinf_data_make_bytes(pth("missing.txt"), prefix, 0, 0, NULL, NULL) < 0, "missing input");
    CHECK(errmsg_has("missing.txt") && errmsg_has("No such file"), "msg: %s", zinf_errmsg());
    fclose(fopen(pth("empty.txt"), "wb"));
    CHECK(zinf_data_make_bytes(pth("empty.txt"), prefix, 0, 0, NULL, NULL) < 0, "empty input");
    CHECK(errmsg_has("empty.txt") && errmsg_has("empty"), "msg: %s", zinf_errmsg());
    CHECK(zinf_data_make_bytes(tp, prefix, 1.0, 0, NULL, NULL) < 0, "val_fraction 1 accepted");
    CHECK(errmsg_has("val_fraction"), "msg: %s", zinf_errmsg());
}

/* A shard truncated after zinf_data_open (another job rewriting the data, a full disk while it
 * was being copied) makes a read past its new end an error naming the shard, not a SIGBUS; the
 * reads before that point, and later reads, still work. A SIGBUS that is not a shard's still
 * ends the process (in a child). */
static void test_truncated_while_open(void)
{
    enum { N = 20000, T = 10 };
    static uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)(i % 251);
    const char *p = pth("shrinks.bin");
    CHECK(zinf_data_write_shard(p, tok, N) == 0, "write: %s", zinf_errmsg());
    zinf_data *d = NULL;
    CHECK(zinf_data_open(&d, p, T, 256, 0, 0) == 0, "open: %s", zinf_errmsg());
    if (!d) return;
    CHECK(truncate(p, 4096) == 0, "truncate");
    int32_t inp[4 * T], tgt[4 * T];
    /* sequence 0 (tokens 0..10) lies in the first page, which is still there */
    CHECK(zinf_data_read(d, 0, 1, inp, tgt) == 0 && inp[3] == 3 && tgt[3] == 4, "read in the first page: %s",
          zinf_errmsg());
    char want[600];
    snprintf(want, sizeof want, "%s: the shard was truncated while in use: 4096 bytes now, %d when it was opened", p,
             1024 + 2 * N);
    for (int again = 0; again < 2; again++) { /* the second time: SIGBUS is caught again */
        zinf_err_clear();
        int rc = zinf_data_read(d, 1000, 2, inp, tgt); /* tokens 10000.., byte 21024: past the end */
        CHECK(rc == ZINF_EIO, "read past the new end: rc %d", rc);
        CHECK(strcmp(zinf_errmsg(), want) == 0, "msg: '%s', want '%s'", zinf_errmsg(), want);
        CHECK(zinf_data_read(d, 1, 2, inp, tgt) == 0 && inp[0] == 10, "read in the first page after the fault");
    }
    /* not a shard's: the default action, as without zinf_data_open */
    for (int kind = 0; kind < 2; kind++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            if (kind == 0) raise(SIGBUS);
            const char *q = pth("other.bin");
            FILE *f = fopen(q, "wb");
            fwrite(tok, 1, 8192, f);
            fclose(f);
            int fd = open(q, O_RDONLY);
            volatile const char *m = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
            if (truncate(q, 0) == 0 && m != MAP_FAILED) (void)m[4096];
            _exit(0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "%s: status %#x, want death by SIGBUS",
              kind ? "a fault in another mapping" : "raise(SIGBUS)", st);
    }
    zinf_data_close(d);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/zinf_data_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_sequences_and_shuffle();
    test_world_independence();
    test_errors();
    test_make_bytes();
    test_truncated_while_open();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_done("test_data");
}
