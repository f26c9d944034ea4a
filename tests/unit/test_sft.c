/* test_sft: SFT samples, their shards and the rows the loader makes of them.
 *
 * Without arguments: the shard format's error cases (truncated, corrupt flags and starts, a token
 * beyond the vocabulary, a set empty after the length filter, mixed kinds, --packing on plain
 * shards), old shards read as before, and zinf_sft_write_shards leaving nothing behind on error.
 *
 * With arguments, for tests/mpi/test_sft_pack.sh, which holds the Python reference:
 *   test_sft rows SAMPLES DIR T VOCAB PACKING NFILES SEED
 * reads SAMPLES (a line "N", then one line per sample: "n tok0 loss0 tok1 loss1 ..."), writes them
 * as SFT shards under DIR (zinf_sft_write_shards when NFILES is 1, else NFILES shards written one
 * by one, to cross shard boundaries), opens them with T and PACKING and prints
 *   "rows R dropped D samples S", then per row r (stream position r, no shuffle) the lines
 *   "tok ...", "tgt ...", "pos ...", "kv ...", then "shuffled", then the same four lines for stream
 *   positions 0 .. 2R-1 read with the shuffle of SEED. */
#define _GNU_SOURCE
#include "check.h"
#include "data.h"
#include "err.h"
#include "sft.h"

#include <glob.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[4096];

static const char *pth(const char *name)
{
    static char buf[8][4352];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static int errmsg_has(const char *s) { return strstr(zinf_errmsg(), s) != NULL; }

/* How many files match pattern. */
static int count_glob(const char *pattern)
{
    glob_t g;
    int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    globfree(&g);
    return n;
}

/* Append sample k of a small deterministic set: length len, tokens (k*7 + i) % 50, loss on the
 * second half. */
static void add_sample(zinf_sft_samples *s, int k, int len)
{
    int32_t tok[256];
    uint8_t loss[256];
    for (int i = 0; i < len; i++) {
        tok[i] = (k * 7 + i) % 50;
        loss[i] = i >= len / 2;
    }
    CHECK(zinf_sft_append(s, tok, loss, len) == 0, "append: %s", zinf_errmsg());
}

static void write_bytes_at(const char *path, long off, const void *p, size_t n)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f && fseek(f, off, SEEK_SET) == 0 && fwrite(p, 1, n, f) == n, "patch %s", path);
    if (f) fclose(f);
}

static void test_errors(void)
{
    zinf_data *d = NULL;
    zinf_sft_samples s = {0};
    int lens[] = {5, 9, 3, 12};
    for (int k = 0; k < 4; k++) add_sample(&s, k, lens[k]);
    CHECK(s.ntok == 29 && s.nsamples == 4 && s.start[0] == 0 && s.start[4] == 29, "samples");

    /* a sample of no tokens, a loss flag of 2 */
    int32_t t1 = 1;
    uint8_t l2 = 2;
    CHECK(zinf_sft_append(&s, &t1, &l2, 0) < 0 && errmsg_has("at least one"), "empty sample: %s", zinf_errmsg());
    CHECK(zinf_sft_append(&s, &t1, &l2, 1) < 0 && errmsg_has("loss flag 2"), "flag 2: %s", zinf_errmsg());
    CHECK(s.nsamples == 4 && s.ntok == 29, "a refused sample changed the set");

    /* written, then read back: 4 samples, rows of 10 drop the one of 12 */
    const char *pre = pth("ok");
    CHECK(zinf_sft_write_shards(pre, &s, NULL, 50) == 0, "write: %s", zinf_errmsg());
    char shard[4400], old[4400];
    snprintf(shard, sizeof shard, "%s", pth("ok_train_000000.bin"));
    CHECK(count_glob(pth("ok*")) == 1, "one shard and nothing else: %d files", count_glob(pth("ok*")));
    CHECK(zinf_data_open(&d, shard, 10, 50, 0, 0) == 0, "open: %s", zinf_errmsg());
    if (d) {
        CHECK(zinf_data_is_sft(d) && zinf_data_num_samples(d) == 4 && zinf_data_num_dropped(d) == 1 &&
                  zinf_data_num_sequences(d) == 3, "counts");
        zinf_data_close(d);
        d = NULL;
    }
    struct stat st;
    CHECK(stat(shard, &st) == 0 && st.st_size == 1024 + 29 * 2 + 32 + 5 * 4, "size %lld", (long long)st.st_size);

    /* a token beyond the model's vocabulary: file, index, id, vocab */
    CHECK(zinf_data_open(&d, shard, 10, 30, 0, 0) < 0 && !d, "token >= vocab accepted");
    char want[8192];
    snprintf(want, sizeof want, "%s: token 30 at index 26 is >= vocab size 30", shard);
    CHECK(strcmp(zinf_errmsg(), want) == 0, "msg: %s", zinf_errmsg());
    /* and at write time: the set, sample, token, id, vocabulary; nothing written */
    CHECK(zinf_sft_write_shards(pth("v"), &s, NULL, 30) < 0, "write with an id >= vocab accepted");
    CHECK(strcmp(zinf_errmsg(), "sft: train sample 3, token 9: id 30 is outside the vocabulary of 30") == 0, "msg: %s",
          zinf_errmsg());
    CHECK(count_glob(pth("v*")) == 0, "a refused write left files");

    /* every filtered out: one line */
    CHECK(zinf_data_open(&d, shard, 2, 50, 0, 0) < 0 && !d, "empty set accepted");
    CHECK(errmsg_has("no SFT samples of at most --max_length 2 tokens") && errmsg_has("4 samples, 4 of them longer"),
          "msg: %s", zinf_errmsg());

    /* truncated: three bytes short */
    const char *tr = pth("trunc.bin");
    CHECK(zinf_sft_write_shards(pth("t"), &s, NULL, 50) == 0 && rename(pth("t_train_000000.bin"), tr) == 0, "copy");
    CHECK(truncate(tr, st.st_size - 3) == 0, "truncate");
    CHECK(zinf_data_open(&d, tr, 10, 50, 0, 0) < 0 && !d, "truncated shard accepted");
    snprintf(want, sizeof want, "%s: truncated: an SFT shard (version 3) of 29 tokens and 4 samples is %lld bytes, the "
             "file has %lld", tr, (long long)st.st_size, (long long)st.st_size - 3);
    CHECK(strcmp(zinf_errmsg(), want) == 0, "msg: %s", zinf_errmsg());

    /* a loss flag of 3 */
    const char *cf = pth("flag.bin");
    CHECK(zinf_sft_write_shards(pth("f"), &s, NULL, 50) == 0 && rename(pth("f_train_000000.bin"), cf) == 0, "copy");
    uint8_t three = 3;
    write_bytes_at(cf, 1024 + 58 + 6, &three, 1);
    CHECK(zinf_data_open(&d, cf, 10, 50, 0, 0) < 0 && !d, "flag 3 accepted");
    snprintf(want, sizeof want, "%s: loss flag 3 of token 6 is neither 0 nor 1: a corrupt SFT shard", cf);
    CHECK(strcmp(zinf_errmsg(), want) == 0, "msg: %s", zinf_errmsg());

    /* sample starts out of order */
    const char *cs = pth("starts.bin");
    CHECK(zinf_sft_write_shards(pth("s"), &s, NULL, 50) == 0 && rename(pth("s_train_000000.bin"), cs) == 0, "copy");
    int32_t bad = 20; /* start[2] = 20 > start[3] = 17 */
    write_bytes_at(cs, 1024 + 58 + 32 + 2 * 4, &bad, 4);
    CHECK(zinf_data_open(&d, cs, 10, 50, 0, 0) < 0 && !d, "bad starts accepted");
    snprintf(want, sizeof want, "%s: sample start 3 is 17 after 20 (starts must increase up to the 29 tokens): a "
             "corrupt SFT shard", cs);
    CHECK(strcmp(zinf_errmsg(), want) == 0, "msg: %s", zinf_errmsg());

    /* an old shard (version 1, written byte by byte here) reads as before, also through read_rows */
    snprintf(old, sizeof old, "%s", pth("old.bin"));
    FILE *f = fopen(old, "wb");
    int32_t h[256] = {ZINF_DATA_MAGIC, 1, 25};
    uint16_t tk[25];
    for (int i = 0; i < 25; i++) tk[i] = (uint16_t)(100 + i);
    CHECK(f && fwrite(h, 4, 256, f) == 256 && fwrite(tk, 2, 25, f) == 25, "write old");
    if (f) fclose(f);
    CHECK(zinf_data_open(&d, old, 8, 256, 0, 0) == 0, "old open: %s", zinf_errmsg());
    if (d) {
        CHECK(!zinf_data_is_sft(d) && zinf_data_num_sequences(d) == 3, "old: %lld sequences",
              (long long)zinf_data_num_sequences(d));
        int32_t x[24], y[24], p[24], kv[24];
        CHECK(zinf_data_read_rows(d, 0, 3, x, y, p, kv) == 0, "old read: %s", zinf_errmsg());
        for (int i = 0; i < 24; i++)
            CHECK(x[i] == 100 + i && y[i] == 101 + i && p[i] == i % 8 && kv[i] == 0, "old token %d", i);
        int32_t x2[24], y2[24];
        CHECK(zinf_data_read(d, 0, 3, x2, y2) == 0 && !memcmp(x, x2, sizeof x) && !memcmp(y, y2, sizeof y),
              "zinf_data_read");
        zinf_data_close(d);
        d = NULL;
    }
    /* packing wants SFT shards; one set is all one kind */
    CHECK(zinf_data_open_packing(&d, old, 8, 256, 0, 0, 1) < 0 && !d && errmsg_has("--packing needs SFT shards"),
          "packing plain: %s", zinf_errmsg());
    CHECK(symlink(shard, pth("mix_a.bin")) == 0 && symlink(old, pth("mix_b.bin")) == 0, "links");
    CHECK(zinf_data_open(&d, pth("mix_*.bin"), 8, 256, 0, 0) < 0 && !d, "mixed kinds accepted");
    CHECK(errmsg_has("mix_b.bin: a plain token shard, but") && errmsg_has("mix_a.bin is an SFT shard"), "msg: %s",
          zinf_errmsg());
    /* packed rows are read with their positions and starts */
    CHECK(zinf_data_open_packing(&d, shard, 10, 50, 0, 0, 1) == 0, "open packed: %s", zinf_errmsg());
    if (d) {
        int32_t x[10], y[10];
        CHECK(zinf_data_read(d, 0, 1, x, y) < 0 && errmsg_has("positions and sample starts"), "msg: %s",
              zinf_errmsg());
        zinf_data_close(d);
        d = NULL;
    }

    /* an unwritable place: an error, and no file (neither .part nor .tmp) */
    CHECK(mkdir(pth("ro"), 0555) == 0, "mkdir");
    if (geteuid() != 0) { /* root writes anyway */
        CHECK(zinf_sft_write_shards(pth("ro/x"), &s, NULL, 50) < 0 && errmsg_has("ro/x_train_000000.bin.part"),
              "write in a read-only directory: %s", zinf_errmsg());
        CHECK(count_glob(pth("ro/*")) == 0, "files left in ro/");
    }
    /* a failure after the train shard was written (the val shard's temporary name is taken by a
     * directory): the error names the val shard, and the train shard is gone too */
    CHECK(mkdir(pth("w_val_000000.bin.part.tmp"), 0755) == 0, "mkdir");
    CHECK(zinf_sft_write_shards(pth("w"), &s, &s, 50) < 0 && errmsg_has("w_val_000000.bin.part: cannot create"),
          "a failing val shard: %s", zinf_errmsg());
    CHECK(count_glob(pth("w_train*")) == 0 && count_glob(pth("w_val_000000.bin")) == 0 &&
              count_glob(pth("w_val_000000.bin.part")) == 0, "a failed write left shards");
    /* a val set of 0 samples writes no val shard; a train set of none is refused */
    zinf_sft_samples none = {0};
    CHECK(zinf_sft_write_shards(pth("tv"), &s, &none, 50) == 0 && count_glob(pth("tv*")) == 1, "empty val");
    CHECK(zinf_sft_write_shards(pth("tv2"), &s, &s, 50) == 0 && count_glob(pth("tv2_val_000000.bin")) == 1, "val");
    CHECK(zinf_sft_write_shards(pth("e"), &none, NULL, 50) < 0 && errmsg_has("no training samples"), "empty train");
    /* a new set under a prefix replaces the old one: no stale train shard past the new ones, no
     * stale val shards when none is written now */
    FILE *stale = fopen(pth("tv2_train_000001.bin"), "w");
    CHECK(stale && fclose(stale) == 0, "stale shard");
    CHECK(zinf_sft_write_shards(pth("tv2"), &s, NULL, 50) == 0, "rewrite: %s", zinf_errmsg());
    CHECK(count_glob(pth("tv2*")) == 1 && count_glob(pth("tv2_train_000000.bin")) == 1, "stale shards stayed: %d files",
          count_glob(pth("tv2*")));
    zinf_sft_free(&s);
    CHECK(s.tok == NULL && s.nsamples == 0, "free");
}

/* ---------------------------------------------------------------- rows for the reference */

static void print_row(const char *what, const int32_t *v, int T)
{
    printf("%s", what);
    for (int i = 0; i < T; i++) printf(" %d", v[i]);
    printf("\n");
}

static int rows_mode(char **argv)
{
    const char *samples = argv[2], *out = argv[3];
    int T = atoi(argv[4]), vocab = atoi(argv[5]), packing = atoi(argv[6]), nfiles = atoi(argv[7]);
    uint64_t seed = strtoull(argv[8], NULL, 10);
    FILE *f = fopen(samples, "r");
    long long n;
    if (!f || fscanf(f, "%lld", &n) != 1) return fprintf(stderr, "%s: cannot read\n", samples), 1;
    zinf_sft_samples s = {0};
    int32_t *tok = malloc(1 << 20);
    uint8_t *loss = malloc(1 << 18);
    for (long long k = 0; k < n; k++) {
        int len, l;
        if (fscanf(f, "%d", &len) != 1) return fprintf(stderr, "%s: sample %lld\n", samples, k), 1;
        for (int i = 0; i < len; i++) {
            if (fscanf(f, "%d %d", &tok[i], &l) != 2) return fprintf(stderr, "%s: sample %lld\n", samples, k), 1;
            loss[i] = (uint8_t)l;
        }
        if (zinf_sft_append(&s, tok, loss, len)) return fprintf(stderr, "%s\n", zinf_errmsg()), 1;
    }
    fclose(f);
    char prefix[4200], pattern[4300];
    snprintf(prefix, sizeof prefix, "%s/sft", out);
    snprintf(pattern, sizeof pattern, "%s_train_*.bin", prefix);
    if (nfiles <= 1) {
        if (zinf_sft_write_shards(prefix, &s, NULL, vocab)) return fprintf(stderr, "%s\n", zinf_errmsg()), 1;
    } else { /* nfiles shards of about equal sample counts, written one by one */
        for (int i = 0; i < nfiles; i++) {
            int64_t a = s.nsamples * i / nfiles, b = s.nsamples * (i + 1) / nfiles;
            char path[4400];
            snprintf(path, sizeof path, "%s_train_%06d.bin", prefix, i);
            if (zinf_data_write_sft_shard(path, (const uint32_t *)(s.tok + s.start[a]), s.loss + s.start[a],
                                          s.start[b] - s.start[a], s.start + a, b - a))
                return fprintf(stderr, "%s\n", zinf_errmsg()), 1;
        }
    }
    zinf_sft_free(&s);
    for (int sh = 0; sh < 2; sh++) {
        zinf_data *d;
        if (zinf_data_open_packing(&d, pattern, T, vocab, seed, sh, packing))
            return fprintf(stderr, "%s\n", zinf_errmsg()), 1;
        int64_t R = zinf_data_num_sequences(d), count = sh ? 2 * R : R;
        if (!sh)
            printf("rows %lld dropped %lld samples %lld\n", (long long)R, (long long)zinf_data_num_dropped(d),
                   (long long)zinf_data_num_samples(d));
        else
            printf("shuffled\n");
        int32_t *x = malloc((size_t)T * 16), *y = x + T, *p = y + T, *kv = p + T;
        for (int64_t r = 0; r < count; r++) {
            if (zinf_data_read_rows(d, r, 1, x, y, p, kv)) return fprintf(stderr, "%s\n", zinf_errmsg()), 1;
            print_row("tok", x, T);
            print_row("tgt", y, T);
            print_row("pos", p, T);
            print_row("kv", kv, T);
        }
        free(x);
        zinf_data_close(d);
    }
    free(tok);
    free(loss);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 9 && !strcmp(argv[1], "rows")) return rows_mode(argv);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zinf-test-sft.XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    test_errors();
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "chmod -R u+w '%s' && rm -rf '%s'", dir, dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_done("test_sft");
}
