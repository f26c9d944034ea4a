/* data: token shards, sequence indexing, the epoch shuffle and the per-rank batch layout.
 *
 * Shard file format (llm.c's, extended): a header of 256 little-endian int32 (1024 bytes) with
 * h[0] = 20240520 (magic), h[1] = version (1: uint16 tokens, 2: uint32 tokens), h[2] = number of
 * tokens n; then exactly n tokens. Nothing may follow them.
 * SFT shards (supervised fine-tuning samples) have version 3 (uint16 tokens) or 4 (uint32) and
 * h[3] = number of samples S; after the n tokens come n loss flags (uint8, 0 or 1), zero bytes up
 * to a multiple of 4, and S+1 int32 sample starts: start[0] = 0 < start[1] < ... < start[S] = n.
 * Sample k is tokens [start[k], start[k+1]). man/zinf-data.1 is the user's description.
 *
 * SFT rows: a row holds T tokens. Samples longer than T are dropped and counted (ms-swift's
 * --truncation_strategy delete). Without packing each sample fills one row and padding follows;
 * with packing the samples (numbered in file-name order, then by k) are grouped as ms-swift groups
 * them: chunks of ZINF_PACK_CHUNK samples in order, each packed by binpacking's to_constant_volume
 * (see pack_chunk), the last bin of every chunk but the final one carried into the next chunk.
 * In a row, sample tokens come in the bin's order; within a sample of length L at row offset o,
 * token j has pos j, kv_start o, and tgt = the next token when j + 1 < L and that token's loss
 * flag is set, else -1. The tail after the last sample is one pad run: token 0, tgt -1, pos
 * restarting at 0 and kv_start = the run's offset, so a pad token attends only to its own run.
 * Rows take the place of sequences in the stream below.
 *
 * Sequences: in a shard of n tokens, sequence i covers tokens [i*T, i*T+T] (T+1 tokens: the first
 * T are inputs, the last T targets), i = 0 .. (n-1)/T - 1. Sequences never span two shards. They
 * are numbered globally in file-name order, then by i.
 *
 * Stream: the training loop reads an endless stream of sequences. Position p belongs to epoch
 * e = p / N (N sequences in all) and reads sequence perm_e[p % N]. perm_e is a Fisher-Yates
 * shuffle driven by xoshiro256** whose state is filled by splitmix64 seeded with
 * seed ^ (e * 0x9E3779B97F4A7C15): for i = N-1 down to 1 swap perm[i] with perm[j], j uniform in
 * [0, i] (draws below 2^64 mod (i+1) are rejected, then j = draw mod (i+1)). Without shuffle
 * perm_e is the identity. A position therefore names one sequence for a given (data, T, seed),
 * which makes the stream position the whole of the data loader's training state. */
#define _GNU_SOURCE
#include "data.h"

#include "err.h"
#include "file.h"
#include "log.h"
#include "tok.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <glob.h>
#include <omp.h>
#include <libgen.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_BYTES ((int64_t)ZINF_DATA_HEADER_INTS * 4)
#define ZINF_PACK_CHUNK 1000 /* ms-swift's PACKING_BATCH_SIZE */

/* Bytes of an SFT shard's loss flags with their padding to a multiple of 4. */
static int64_t loss_bytes(int64_t ntok) { return (ntok + 3) / 4 * 4; }

/* One memory-mapped shard. */
typedef struct {
    char *path;
    void *map;         /* the whole file, PROT_READ, MAP_SHARED */
    size_t map_len;
    int64_t ntok;      /* tokens after the header */
    int tokbytes;      /* 2 (versions 1 and 3) or 4 (versions 2 and 4) */
    int64_t seq_first; /* global number of this shard's first sequence */
    int64_t nseq;      /* (ntok - 1) / T, or 0 when ntok < T + 1 */
    int sft;           /* version 3 or 4: loss flags and sample starts follow the tokens */
    int64_t nsamp;     /* SFT: samples (h[3]) */
    int64_t samp_first; /* SFT: global number of this shard's first sample */
    int64_t loss_off, start_off; /* SFT: byte offsets of the loss flags and the starts */
} shard;

struct zinf_data {
    shard *files;
    int nfiles;
    int T;
    int64_t nseq, ntok;
    uint64_t seed;
    int shuffle;
    int64_t *perm;      /* permutation of the cached epoch (shuffle only) */
    int64_t perm_epoch; /* which epoch perm holds; -1 = none yet */
    /* SFT shards: nseq counts rows; row r holds samples row_samp[row_first[r] .. row_first[r+1]) */
    int sft, packing;
    int64_t nsamp, ndropped; /* samples in the files; those longer than T, left out */
    int64_t nkept;           /* the tokens of the samples in rows (those of at most T tokens) */
    int64_t *row_first, *row_samp;
};

/* ---------------------------------------------------------------- PRNG for the epoch shuffle */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** (Blackman & Vigna). */
static uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform integer in [0, bound) without modulo bias (reject the short top range). */
static uint64_t uniform_below(uint64_t s[4], uint64_t bound)
{
    uint64_t threshold = (0 - bound) % bound; /* 2^64 mod bound */
    for (;;) {
        uint64_t r = xoshiro_next(s);
        if (r >= threshold) return r % bound;
    }
}

/* perm[0..n) := the permutation of epoch e for this seed. */
static void epoch_permutation(int64_t *perm, int64_t n, uint64_t seed, int64_t e)
{
    uint64_t sm = seed ^ ((uint64_t)e * 0x9E3779B97F4A7C15ull), s[4];
    for (int k = 0; k < 4; k++) s[k] = splitmix64(&sm);
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)uniform_below(s, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* ---------------------------------------------------------------- a shard that shrinks */
/* The shards are read through their mappings. A shard truncated after it was mapped (or whose
 * storage fails) makes the next load from a page past its new end raise SIGBUS, which would end
 * the process without a word. Every read of a mapping is therefore guarded: SIGBUS at an address
 * inside one of the shards being read jumps back to the guard, which returns an error naming
 * that shard.
 * Checking the size first (fstat at each read) would leave a window between the check and the
 * loads in which a truncation still kills the process; the guard catches the fault itself,
 * whenever it comes, and costs nothing on the way through but a sigsetjmp per read. The handler
 * is process-wide: a SIGBUS anywhere else (another address, another thread, or sent with kill)
 * goes to the handler that was there before (MPI's, or the default action). */
typedef struct bus_guard {
    sigjmp_buf env;
    const shard *files; /* the mappings this read may touch */
    int n;
    const shard *volatile hit; /* set by the handler: the one that faulted */
} bus_guard;
static _Thread_local bus_guard *volatile bus_cur; /* this thread's guarded read, if any */
static struct sigaction bus_prev;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;
static int bus_errno;

static void on_bus(int sig, siginfo_t *si, void *ctx)
{
    bus_guard *g = bus_cur;
    const char *a = si->si_addr;
    for (int i = 0; g && si->si_code > 0 && i < g->n; i++) {
        const char *lo = g->files[i].map;
        if (lo && a >= lo && a < lo + g->files[i].map_len) {
            g->hit = &g->files[i];
            siglongjmp(g->env, 1);
        }
    }
    /* not a shard's: the handler that was there before takes it (MPI's, say) */
    if ((bus_prev.sa_flags & SA_SIGINFO) && bus_prev.sa_sigaction) {
        bus_prev.sa_sigaction(sig, si, ctx);
        return;
    }
    if (bus_prev.sa_handler != SIG_DFL && bus_prev.sa_handler != SIG_IGN) {
        bus_prev.sa_handler(sig);
        return;
    }
    /* the default action: from the faulting load, run again once this returns, or for a signal
     * sent, from raise (blocked here, it arrives once this returns) */
    signal(SIGBUS, SIG_DFL);
    if (si->si_code <= 0) raise(sig);
}

static void bus_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &bus_prev)) bus_errno = errno;
}

/* The error of a guarded read that faulted in shard f. */
static int shard_fault(const shard *f)
{
    struct stat st;
    if (stat(f->path, &st) == 0 && (int64_t)st.st_size < (int64_t)f->map_len)
        return zinf_errc(ZINF_EIO, "%s: the shard was truncated while in use: %lld bytes now, %lld when it was "
                         "opened", f->path, (long long)st.st_size, (long long)f->map_len);
    return zinf_errc(ZINF_EIO, "%s: the shard's data cannot be read (SIGBUS in its mapping: the file "
                     "shrank or its storage failed after it was opened)", f->path);
}

/* Guard the loads from the mappings of files[0..n) between BUS_GUARD and BUS_UNGUARD in one
 * function: a fault in one of them makes the function return shard_fault's error for it. */
#define BUS_GUARD(files_, n_)                                                                     \
    bus_guard bus_g_;                                                                             \
    bus_g_.files = (files_);                                                                      \
    bus_g_.n = (n_);                                                                              \
    bus_g_.hit = NULL;                                                                            \
    if (sigsetjmp(bus_g_.env, 1)) { /* 1: the handler's blocking of SIGBUS is undone */           \
        bus_cur = NULL;                                                                           \
        return shard_fault(bus_g_.hit);                                                           \
    }                                                                                             \
    bus_cur = &bus_g_;                                                                            \
    atomic_signal_fence(memory_order_seq_cst) /* the loads come after it */
#define BUS_UNGUARD()                                                                             \
    do {                                                                                          \
        atomic_signal_fence(memory_order_seq_cst); /* the loads stay inside the guard */          \
        bus_cur = NULL;                                                                           \
    } while (0)

/* ---------------------------------------------------------------- opening */

static uint32_t token_at(const shard *f, int64_t i)
{
    const unsigned char *base = (const unsigned char *)f->map + HEADER_BYTES;
    if (f->tokbytes == 2) return ((const uint16_t *)base)[i];
    return ((const uint32_t *)base)[i];
}

/* Open path read-only and stat it; on failure nothing stays open. */
static int open_stat(const char *path, int *fd_out, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return zinf_errc(-errno, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, st) != 0) {
        int e = errno;
        close(fd);
        return zinf_errc(-e, "%s: cannot stat: %s", path, strerror(e));
    }
    *fd_out = fd;
    return 0;
}

static uint8_t loss_at(const shard *f, int64_t i)
{
    return ((const uint8_t *)f->map)[f->loss_off + i];
}

static int64_t start_at(const shard *f, int64_t k)
{
    return ((const int32_t *)((const char *)f->map + f->start_off))[k];
}

/* An SFT shard's loss flags and sample starts (f->ntok, f->nsamp, offsets set), guarded by the
 * caller. */
static int sft_check(const shard *f, const char *path)
{
    for (int64_t i = 0; i < f->ntok; i++)
        if (loss_at(f, i) > 1)
            return zinf_err("%s: loss flag %u of token %lld is neither 0 nor 1: a corrupt SFT shard", path,
                            loss_at(f, i), (long long)i);
    if (start_at(f, 0) != 0)
        return zinf_err("%s: sample start 0 is %lld, not 0: a corrupt SFT shard", path, (long long)start_at(f, 0));
    for (int64_t k = 1; k <= f->nsamp; k++)
        if (start_at(f, k) <= start_at(f, k - 1) || start_at(f, k) > f->ntok)
            return zinf_err("%s: sample start %lld is %lld after %lld (starts must increase up to the %lld tokens): "
                            "a corrupt SFT shard", path, (long long)k, (long long)start_at(f, k),
                            (long long)start_at(f, k - 1), (long long)f->ntok);
    if (start_at(f, f->nsamp) != f->ntok)
        return zinf_err("%s: the last sample ends at %lld, the shard has %lld tokens: a corrupt SFT shard", path,
                        (long long)start_at(f, f->nsamp), (long long)f->ntok);
    return 0;
}

/* Check a mapped shard's header, size and tokens (f->map, f->map_len set), guarded. */
static int shard_check(shard *f, const char *path, int vocab_size)
{
    int64_t size = (int64_t)f->map_len;
    BUS_GUARD(f, 1);
    const int32_t *h = (const int32_t *)f->map;
    int rc = 0;
    int64_t ntok = h[2], nsamp = h[3];
    int version = h[1], sft = version == 3 || version == 4;
    int tokbytes = version == 1 || version == 3 ? 2 : version == 2 || version == 4 ? 4 : 0;
    if (h[0] != ZINF_DATA_MAGIC) {
        rc = zinf_err("%s: bad magic %d (expected %d): not a token shard (zinf data makes shards from text; "
                      "zinf-data(1) gives the format)", path, h[0], ZINF_DATA_MAGIC);
    } else if (!tokbytes) {
        rc = zinf_err("%s: unknown version %d (expected 1 or 2 for uint16 or uint32 tokens, 3 or 4 for SFT "
                      "samples of those)", path, version);
    } else if (ntok < 0) {
        rc = zinf_err("%s: negative token count %lld in the header", path, (long long)ntok);
    } else if (sft && nsamp < 0) {
        rc = zinf_err("%s: negative sample count %lld in the header", path, (long long)nsamp);
    } else if (!sft) {
        int64_t want = HEADER_BYTES + ntok * tokbytes;
        if (size < want)
            rc = zinf_err("%s: truncated: header says %lld tokens, so %lld bytes expected, file "
                          "has %lld",
                          path, (long long)ntok, (long long)want, (long long)size);
        else if (size > want)
            rc = zinf_err("%s: %lld bytes, expected %lld for the %lld tokens in the header "
                          "(%lld bytes of trailing data)",
                          path, (long long)size, (long long)want, (long long)ntok,
                          (long long)(size - want));
    } else {
        int64_t want = HEADER_BYTES + ntok * tokbytes + loss_bytes(ntok) + (nsamp + 1) * 4;
        if (size != want)
            rc = zinf_err("%s: %s: an SFT shard (version %d) of %lld tokens and %lld samples is %lld bytes, the "
                          "file has %lld", path, size < want ? "truncated" : "trailing data", version,
                          (long long)ntok, (long long)nsamp, (long long)want, (long long)size);
    }
    if (!rc) {
        f->ntok = ntok;
        f->tokbytes = tokbytes;
        f->sft = sft;
        f->nsamp = sft ? nsamp : 0;
        f->loss_off = HEADER_BYTES + ntok * tokbytes;
        f->start_off = f->loss_off + loss_bytes(ntok);
        if (sft) rc = sft_check(f, path);
    }
    /* Every token must index the embedding table; uint16 tokens need no check when vocab > 65535. */
    if (!rc && !(tokbytes == 2 && vocab_size > 65535)) {
        for (int64_t i = 0; i < ntok; i++) {
            uint32_t t = token_at(f, i);
            if (t >= (uint32_t)vocab_size) {
                rc = zinf_err("%s: token %u at index %lld is >= vocab size %d", path, t,
                              (long long)i, vocab_size);
                break;
            }
        }
    }
    BUS_UNGUARD();
    return rc;
}

/* Map one shard and check its header, size and tokens. On error nothing stays mapped. */
static int shard_open(shard *f, const char *path, int vocab_size)
{
    int fd;
    struct stat st;
    /* a regular file only: a FIFO would block, a directory cannot be mapped */
    ZINF_TRY(zinf_open_regular(NULL, path, &fd, &st));
    int64_t size = (int64_t)st.st_size;
    if (size < HEADER_BYTES) {
        close(fd);
        return zinf_err("%s: truncated: %lld bytes, shorter than the %lld-byte header", path,
                        (long long)size, (long long)HEADER_BYTES);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    int map_errno = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return zinf_errc(-map_errno, "%s: mmap failed: %s", path, strerror(map_errno));
    f->map = map;
    f->map_len = (size_t)size;
    f->path = strdup(path);
    int rc = f->path ? shard_check(f, path, vocab_size) : zinf_errc(ZINF_ENOMEM, "%s: out of memory", path);
    if (rc < 0) {
        munmap(map, (size_t)size);
        f->map = NULL;
        free(f->path);
        f->path = NULL;
        return rc;
    }
    return 0;
}

void zinf_data_close(zinf_data *d)
{
    if (!d) return;
    for (int i = 0; i < d->nfiles; i++) {
        if (d->files[i].map) munmap(d->files[i].map, d->files[i].map_len);
        free(d->files[i].path);
    }
    free(d->files);
    free(d->perm);
    free(d->row_first);
    free(d->row_samp);
    free(d);
}

/* ---------------------------------------------------------------- SFT rows */

typedef struct {
    int64_t id, len;
} pack_item;

/* Descending length, ties in input order (Python's stable sort on -length). */
static int cmp_item_desc(const void *a, const void *b)
{
    const pack_item *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* binpacking 2.0.1's to_constant_volume(items, T), the call ms-swift's packing makes: items by
 * decreasing length (ties keep their order); each goes to the least-filled bin it fits in (the
 * first such on ties), or opens a new bin when it fits in none. bin[i] := the bin of it[i] (it
 * sorted on return, bins numbered in opening order). Returns the number of bins. `fill` has room
 * for n bins; `rank` for n entries (the input order, which it[].id is replaced by for the sort). */
static int64_t pack_chunk(pack_item *it, int64_t n, int64_t T, int64_t *bin, int64_t *fill, int64_t *rank)
{
    for (int64_t i = 0; i < n; i++) { /* sort by (-len, input position) */
        rank[i] = it[i].id;
        it[i].id = i;
    }
    qsort(it, (size_t)n, sizeof *it, cmp_item_desc);
    for (int64_t i = 0; i < n; i++) it[i].id = rank[it[i].id];
    int64_t nb = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t b = -1;
        for (int64_t k = 0; k < nb; k++)
            if (fill[k] + it[i].len <= T && (b < 0 || fill[k] < fill[b])) b = k;
        if (b < 0) fill[b = nb++] = 0;
        fill[b] += it[i].len;
        bin[i] = b;
    }
    return nb;
}

/* Append the rows of bins [0, nb) of a packed chunk (it[i] in bin[i]) to d's rows, each bin's samples
 * in their packing order (a stable counting sort by bin; `at` has room for nb + 1 entries). */
static void emit_bins(zinf_data *d, const pack_item *it, const int64_t *bin, int64_t n, int64_t nb, int64_t *at,
                      int64_t *placed)
{
    memset(at, 0, (size_t)(nb + 1) * sizeof *at);
    for (int64_t i = 0; i < n; i++)
        if (bin[i] < nb) at[bin[i] + 1]++;
    for (int64_t b = 0; b < nb; b++) {
        at[b + 1] += at[b];
        d->row_first[++d->nseq] = *placed + at[b + 1];
    }
    for (int64_t i = 0; i < n; i++)
        if (bin[i] < nb) d->row_samp[*placed + at[bin[i]]++] = it[i].id;
    if (nb > 0) *placed = d->row_first[d->nseq];
}

/* Build d's rows from its SFT shards: drop and count samples longer than T, then one sample per
 * row, or packed as the file comment says. */
static int build_rows(zinf_data *d, const int64_t *len)
{
    int64_t T = d->T, n = d->nsamp;
    d->row_first = malloc((size_t)(n + 1) * sizeof *d->row_first);
    d->row_samp = malloc((size_t)(n > 0 ? n : 1) * sizeof *d->row_samp);
    pack_item *kept = malloc((size_t)(n > 0 ? n : 1) * sizeof *kept);
    if (!d->row_first || !d->row_samp || !kept) {
        free(kept);
        return zinf_errc(ZINF_ENOMEM, "data: out of memory for the rows of %lld samples", (long long)n);
    }
    int64_t nk = 0;
    for (int64_t g = 0; g < n; g++) {
        if (len[g] > T) d->ndropped++;
        else kept[nk++] = (pack_item){g, len[g]};
    }
    d->row_first[0] = 0;
    d->nseq = 0;
    int64_t placed = 0;
    if (!d->packing) {
        for (int64_t i = 0; i < nk; i++) {
            d->row_samp[placed++] = kept[i].id;
            d->row_first[++d->nseq] = placed;
        }
        free(kept);
        return 0;
    }
    /* ms-swift's loop: the carried samples (the last bin of the chunk before) and the next
     * ZINF_PACK_CHUNK samples are packed; all bins but the last become rows, unless the input is
     * finished, when all do. The carried bin holds at most T samples. */
    int64_t cap = ZINF_PACK_CHUNK + (T < nk ? T : nk);
    pack_item *it = malloc((size_t)cap * sizeof *it);
    int64_t *bin = malloc(((size_t)cap * 3 + 1) * sizeof *bin); /* bins, fills, scratch */
    if (!it || !bin) {
        free(kept);
        free(it);
        free(bin);
        return zinf_errc(ZINF_ENOMEM, "data: out of memory packing %lld samples", (long long)n);
    }
    int64_t m = 0;
    for (int64_t i = 0; i < nk;) {
        int64_t take = nk - i < ZINF_PACK_CHUNK ? nk - i : ZINF_PACK_CHUNK;
        memcpy(it + m, kept + i, (size_t)take * sizeof *it);
        m += take;
        i += take;
        int finished = i >= nk;
        int64_t nb = pack_chunk(it, m, T, bin, bin + cap, bin + 2 * cap);
        emit_bins(d, it, bin, m, finished ? nb : nb - 1, bin + 2 * cap, &placed);
        int64_t k = 0;
        if (!finished)
            for (int64_t j = 0; j < m; j++)
                if (bin[j] == nb - 1) it[k++] = it[j];
        m = k;
    }
    free(kept);
    free(it);
    free(bin);
    return 0;
}

/* len[g] := the length of global sample g, read from the mapped starts (guarded). */
static int sample_lengths(const zinf_data *d, int64_t *len)
{
    BUS_GUARD(d->files, d->nfiles);
    for (int i = 0; i < d->nfiles; i++) {
        const shard *f = &d->files[i];
        for (int64_t k = 0; k < f->nsamp; k++) len[f->samp_first + k] = start_at(f, k + 1) - start_at(f, k);
    }
    BUS_UNGUARD();
    return 0;
}

/* The rows of d's SFT shards. */
static int sft_rows(zinf_data *d, const char *pattern)
{
    int64_t *len = malloc((size_t)(d->nsamp > 0 ? d->nsamp : 1) * sizeof *len);
    if (!len) return zinf_errc(ZINF_ENOMEM, "data: out of memory for %lld sample lengths", (long long)d->nsamp);
    int rc = sample_lengths(d, len);
    if (!rc) rc = build_rows(d, len);
    d->nkept = 0;
    for (int64_t g = 0; !rc && g < d->nsamp; g++)
        if (len[g] <= d->T) d->nkept += len[g];
    free(len);
    if (!rc && d->nseq == 0)
        rc = zinf_err("no SFT samples of at most --max_length %d tokens in the files matching '%s' (%lld samples, "
                      "%lld of them longer)", d->T, pattern, (long long)d->nsamp, (long long)d->ndropped);
    return rc;
}

int zinf_data_open(zinf_data **out, const char *pattern, int T, int vocab_size, uint64_t seed,
                   int shuffle)
{
    return zinf_data_open_packing(out, pattern, T, vocab_size, seed, shuffle, 0);
}

int zinf_data_open_packing(zinf_data **out, const char *pattern, int T, int vocab_size, uint64_t seed,
                           int shuffle, int packing)
{
    *out = NULL;
    pthread_once(&bus_once, bus_install);
    if (bus_errno) return zinf_errc(-bus_errno, "data: cannot catch SIGBUS: %s", strerror(bus_errno));
    if (T < 1) return zinf_err("data: sequence length T = %d must be >= 1", T);
    if (vocab_size < 1) return zinf_err("data: vocab size %d must be >= 1", vocab_size);

    glob_t g;
    int grc = glob(pattern, 0, NULL, &g); /* glob sorts the names */
    if (grc == GLOB_NOMATCH)
        return zinf_err("no files match '%s' (zinf data makes token shards from text: zinf data --help)", pattern);
    if (grc != 0) {
        globfree(&g);
        return zinf_errc(ZINF_EIO, "glob '%s' failed (%s)", pattern,
                         grc == GLOB_NOSPACE ? "out of memory" : "read error");
    }

    int rc = 0;
    zinf_data *d = calloc(1, sizeof *d);
    if (d) d->files = calloc(g.gl_pathc, sizeof *d->files);
    if (!d || !d->files) {
        free(d);
        globfree(&g);
        return zinf_errc(ZINF_ENOMEM, "data: out of memory opening '%s'", pattern);
    }
    d->T = T;
    d->seed = seed;
    d->shuffle = shuffle;
    d->perm_epoch = -1;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        shard *f = &d->files[d->nfiles];
        rc = shard_open(f, g.gl_pathv[i], vocab_size);
        if (rc < 0) break;
        d->nfiles++;
        if (d->nfiles == 1) d->sft = f->sft;
        if (f->sft != d->sft) {
            rc = zinf_err("%s: %s, but %s is %s: a data set is all one kind", f->path,
                          f->sft ? "an SFT shard (loss flags, sample starts)" : "a plain token shard",
                          d->files[0].path, d->sft ? "an SFT shard" : "a plain token shard");
            break;
        }
        f->samp_first = d->nsamp;
        d->nsamp += f->nsamp;
        f->seq_first = d->nseq;
        f->nseq = f->sft ? 0 : f->ntok >= (int64_t)T + 1 ? (f->ntok - 1) / T : 0;
        d->nseq += f->nseq;
        d->ntok += f->ntok;
    }
    globfree(&g);
    d->packing = packing;
    if (rc == 0 && packing && !d->sft)
        rc = zinf_err("--packing needs SFT shards (loss flags and sample starts, zinf-data(1)); '%s' holds plain "
                      "token shards", pattern);
    if (rc == 0 && d->sft) rc = sft_rows(d, pattern);
    if (rc == 0 && d->nseq == 0)
        rc = zinf_err("no sequences of T+1 = %d tokens in the files matching '%s' (T = %d)",
                      T + 1, pattern, T);
    if (rc == 0 && shuffle) {
        d->perm = malloc((size_t)d->nseq * sizeof *d->perm);
        if (!d->perm)
            rc = zinf_errc(ZINF_ENOMEM, "data: out of memory for a %lld-sequence permutation",
                           (long long)d->nseq);
    }
    if (rc < 0) {
        zinf_data_close(d);
        return rc;
    }
    *out = d;
    return 0;
}

int64_t zinf_data_num_sequences(const zinf_data *d) { return d->nseq; }
int64_t zinf_data_num_tokens(const zinf_data *d) { return d->ntok; }
int zinf_data_num_files(const zinf_data *d) { return d->nfiles; }
int zinf_data_is_sft(const zinf_data *d) { return d->sft; }
int zinf_data_is_packed(const zinf_data *d) { return d->packing; }
int64_t zinf_data_num_samples(const zinf_data *d) { return d->nsamp; }
int64_t zinf_data_num_dropped(const zinf_data *d) { return d->ndropped; }
int64_t zinf_data_num_row_tokens(const zinf_data *d) { return d->nkept; }

/* ---------------------------------------------------------------- reading */

/* The shard holding global sequence g (sample g when `sample`, SFT): the last shard whose first
 * sequence (sample) number is <= g. A shard without any shares that number with the next one (or
 * sits past the end), so it is never chosen. */
static const shard *shard_of(const zinf_data *d, int64_t g, int sample)
{
    int lo = 0, hi = d->nfiles - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if ((sample ? d->files[mid].samp_first : d->files[mid].seq_first) <= g) lo = mid;
        else hi = mid - 1;
    }
    return &d->files[lo];
}

/* Row r of SFT data into the T entries at x, y, pos, kv (pos, kv may be NULL), as the file comment
 * says. Called inside a guard. */
static void sft_row(const zinf_data *d, int64_t r, int32_t *x, int32_t *y, int32_t *pos, int32_t *kv)
{
    const int T = d->T;
    int o = 0;
    for (int64_t s = d->row_first[r]; s < d->row_first[r + 1]; s++) {
        const shard *f = shard_of(d, d->row_samp[s], 1);
        int64_t k = d->row_samp[s] - f->samp_first, a = start_at(f, k);
        int L = (int)(start_at(f, k + 1) - a);
        for (int j = 0; j < L; j++) {
            x[o + j] = (int32_t)token_at(f, a + j);
            y[o + j] = j + 1 < L && loss_at(f, a + j + 1) ? (int32_t)token_at(f, a + j + 1) : -1;
            if (pos) pos[o + j] = j;
            if (kv) kv[o + j] = o;
        }
        o += L;
    }
    for (int j = o; j < T; j++) { /* one pad run */
        x[j] = 0;
        y[j] = -1;
        if (pos) pos[j] = j - o;
        if (kv) kv[j] = o;
    }
}

int zinf_data_read(zinf_data *d, int64_t first, int64_t count, int32_t *inp, int32_t *tgt)
{
    return zinf_data_read_rows(d, first, count, inp, tgt, NULL, NULL);
}

int zinf_data_read_rows(zinf_data *d, int64_t first, int64_t count, int32_t *inp, int32_t *tgt, int32_t *pos,
                        int32_t *kv_start)
{
    if (first < 0 || count < 0)
        return zinf_err("data: bad read of %lld sequences at stream position %lld",
                        (long long)count, (long long)first);
    if (d->packing && (!pos || !kv_start))
        return zinf_err("data: packed SFT rows are read with their positions and sample starts");
    const int T = d->T;
    BUS_GUARD(d->files, d->nfiles);
    for (int64_t k = 0; k < count; k++) {
        int64_t p = first + k, e = p / d->nseq, q = p % d->nseq, g = q;
        if (d->shuffle) {
            /* A read can straddle an epoch boundary: refresh the cache whenever e changes. */
            if (e != d->perm_epoch) {
                epoch_permutation(d->perm, d->nseq, d->seed, e);
                d->perm_epoch = e;
            }
            g = d->perm[q];
        }
        int32_t *x = inp + k * T, *y = tgt + k * T;
        int32_t *ps = pos ? pos + k * T : NULL, *kv = kv_start ? kv_start + k * T : NULL;
        if (d->sft) {
            sft_row(d, g, x, y, ps, kv);
            continue;
        }
        const shard *f = shard_of(d, g, 0);
        int64_t t0 = (g - f->seq_first) * T;
        for (int i = 0; i < T; i++) {
            x[i] = (int32_t)token_at(f, t0 + i);
            y[i] = (int32_t)token_at(f, t0 + i + 1);
            if (ps) ps[i] = i;
            if (kv) kv[i] = 0;
        }
    }
    BUS_UNGUARD();
    return 0;
}

/* Step s reads stream positions [s*G, s*G + G). Sequence j of the step goes to micro-step
 * j / (world*micro_batch), rank (j / micro_batch) % world. Every layout with world*micro_batch*
 * grad_accum = G covers each j exactly once, so the set a step trains on depends only on s and G,
 * never on how it is split across ranks and micro-steps. */
int64_t zinf_data_slice_start(int64_t step, int64_t global_batch, int micro, int rank, int world,
                              int64_t micro_batch)
{
    return step * global_batch + ((int64_t)micro * world + rank) * micro_batch;
}

/* ---------------------------------------------------------------- writing */

/* write() all of buf, retrying short writes and EINTR. Returns 0 or -errno. */
static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (w == 0) return -EIO;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* fsync the directory holding path so the rename itself is durable. */
static int fsync_dir(const char *path)
{
    char *copy = strdup(path);
    if (!copy) return -ENOMEM;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0) return -errno;
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

/* Write n tokens to fd, as uint16 when narrow. Returns 0 or -errno. */
static int write_tokens(int fd, const uint32_t *tokens, int64_t n, int narrow)
{
    if (!narrow) return write_all(fd, tokens, (size_t)n * 4);
    /* Narrow to uint16 a chunk at a time. */
    enum { CHUNK = 1 << 16 };
    uint16_t *buf = malloc(CHUNK * sizeof *buf);
    if (!buf) return -ENOMEM;
    int rc = 0;
    for (int64_t i = 0; rc == 0 && i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        for (int64_t k = 0; k < m; k++) buf[k] = (uint16_t)tokens[i + k];
        rc = write_all(fd, buf, (size_t)m * 2);
    }
    free(buf);
    return rc;
}

/* The SFT part of a shard after its tokens: loss flags, their padding, the starts relative to
 * start[0]. Returns 0 or -errno. */
static int write_sft_tail(int fd, const uint8_t *loss, int64_t n, const int64_t *start, int64_t nsamp)
{
    static const uint8_t zero[4];
    int rc = write_all(fd, loss, (size_t)n);
    if (rc == 0) rc = write_all(fd, zero, (size_t)(loss_bytes(n) - n));
    enum { CHUNK = 1 << 14 };
    int32_t buf[CHUNK];
    for (int64_t k = 0; rc == 0 && k <= nsamp; k += CHUNK) {
        int64_t m = nsamp + 1 - k < CHUNK ? nsamp + 1 - k : CHUNK;
        for (int64_t j = 0; j < m; j++) buf[j] = (int32_t)(start[k + j] - start[0]);
        rc = write_all(fd, buf, (size_t)m * 4);
    }
    return rc;
}

/* One shard, plain (loss NULL) or SFT, written atomically: tmp file, fsync, rename. */
static int write_shard(const char *path, const uint32_t *tokens, int64_t n, const uint8_t *loss,
                       const int64_t *start, int64_t nsamp)
{
    if (n < 0 || n > INT32_MAX)
        return zinf_err("%s: %lld tokens do not fit a shard (at most %d)", path, (long long)n,
                        INT32_MAX);
    int narrow = 1;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] > 65535) {
            narrow = 0;
            break;
        }

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return zinf_errc(ZINF_ENOMEM, "%s: out of memory", path);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);

    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return zinf_errc(-e, "%s: cannot create %s.tmp: %s", path, path, strerror(e));
    }

    int32_t h[ZINF_DATA_HEADER_INTS] = {0};
    h[0] = ZINF_DATA_MAGIC;
    h[1] = (narrow ? 1 : 2) + (loss ? 2 : 0);
    h[2] = (int32_t)n;
    h[3] = loss ? (int32_t)nsamp : 0;
    int rc = write_all(fd, h, sizeof h);
    if (rc == 0) rc = write_tokens(fd, tokens, n, narrow);
    if (rc == 0 && loss) rc = write_sft_tail(fd, loss, n, start, nsamp);
    if (rc == 0 && fsync(fd) != 0) rc = -errno;
    if (close(fd) != 0 && rc == 0) rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0) rc = -errno;
    if (rc < 0) {
        unlink(tmp);
        free(tmp);
        return zinf_errc(rc, "%s: write failed: %s", path, strerror(-rc));
    }
    free(tmp);
    /* The file is complete under its final name; only the rename's durability is in doubt. */
    rc = fsync_dir(path);
    if (rc < 0) return zinf_errc(rc, "%s: fsync of the directory failed: %s", path, strerror(-rc));
    return 0;
}

int zinf_data_write_shard(const char *path, const uint32_t *tokens, int64_t n)
{
    return write_shard(path, tokens, n, NULL, NULL, 0);
}

int zinf_data_write_sft_shard(const char *path, const uint32_t *tokens, const uint8_t *loss, int64_t n,
                              const int64_t *start, int64_t nsamp)
{
    if (nsamp < 0 || nsamp >= INT32_MAX || start[nsamp] - start[0] != n)
        return zinf_err("%s: %lld samples ending at token %lld do not make a shard of %lld tokens", path,
                        (long long)nsamp, (long long)(nsamp >= 0 ? start[nsamp] - start[0] : -1), (long long)n);
    return write_shard(path, tokens, n, loss, start, nsamp);
}

/* Read the whole file into a malloc'd buffer. */
static int slurp(const char *path, unsigned char **buf, int64_t *len)
{
    *buf = NULL;
    *len = 0;
    int fd = -1;
    struct stat st;
    ZINF_TRY(open_stat(path, &fd, &st));
    size_t cap = st.st_size > 0 ? (size_t)st.st_size : 4096, n = 0;
    unsigned char *b = malloc(cap);
    for (;;) {
        if (!b) {
            close(fd);
            return zinf_errc(ZINF_ENOMEM, "%s: out of memory reading it", path);
        }
        if (n == cap) { /* the file grew, or is a pipe: make room */
            unsigned char *nb = realloc(b, cap * 2);
            if (!nb) free(b);
            b = nb;
            cap *= 2;
            continue;
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(b);
            close(fd);
            return zinf_errc(-e, "%s: read failed: %s", path, strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    *buf = b;
    *len = (int64_t)n;
    return 0;
}

/* A view of tokens [off, off+m) of some source, in buf (which holds m) or in the source itself. */
typedef const uint32_t *(*token_view)(const void *src, int64_t off, int64_t m, uint32_t *buf);

static const uint32_t *bytes_view(const void *src, int64_t off, int64_t m, uint32_t *buf)
{
    const unsigned char *b = (const unsigned char *)src + off;
    for (int64_t i = 0; i < m; i++) buf[i] = b[i];
    return buf;
}

static const uint32_t *tokens_view(const void *src, int64_t off, int64_t m, uint32_t *buf)
{
    (void)m;
    (void)buf;
    return (const uint32_t *)src + off;
}

/* Whether b[0..n) is UTF-8 by its structure: each lead byte followed by as many continuation
 * bytes (10xxxxxx) as it announces */
static bool utf8_text(const unsigned char *b, int64_t n)
{
    for (int64_t i = 0; i < n;) {
        int k = b[i] < 0x80 ? 0 : (b[i] & 0xE0) == 0xC0 ? 1 : (b[i] & 0xF0) == 0xE0 ? 2 : (b[i] & 0xF8) == 0xF0 ? 3 : -1;
        if (k < 0 || (k > 0 && i + k >= n)) return false;
        for (int j = 1; j <= k; j++)
            if ((b[i + j] & 0xC0) != 0x80) return false;
        i += k + 1;
    }
    return true;
}

/* Whether a text is JSON Lines: its first non-blank byte opens an object and its first line
 * ends closing one */
static bool looks_jsonl(const unsigned char *b, int64_t n)
{
    int64_t i = 0, e;
    while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n')) i++;
    if (i >= n || b[i] != '{') return false;
    for (e = i; e < n && b[e] != '\n'; e++) {}
    while (e > i && (b[e - 1] == '\r' || b[e - 1] == ' ' || b[e - 1] == '\t')) e--;
    return e > i && b[e - 1] == '}';
}

/* Write n tokens of src as <prefix>_train_NNNNNN.bin shards of at most shard_tokens and, when
 * val_fraction > 0, <prefix>_val_000000.bin holding the last val_fraction of them (at least one
 * token when asked for); report each file to out. what names the input in messages, unit its
 * tokens ("bytes", "tokens"). */
static int write_split(const char *what, const char *unit, const char *prefix, const void *src,
                       token_view view, int64_t n, double val_fraction, int64_t shard_tokens,
                       FILE *out, const unsigned char *utf8)
{
    if (n == 0) return zinf_err("%s: empty input, nothing to tokenize", what);
    int64_t nval = (int64_t)((double)n * val_fraction);
    if (val_fraction > 0 && nval == 0) nval = 1;
    int64_t ntrain = n - nval;
    /* UTF-8 bytes (utf8, the tokens themselves) are split between characters, never inside one
     * (the validation part then begins a few bytes earlier) */
    if (utf8 && nval > 0)
        while (ntrain > 0 && (utf8[ntrain] & 0xC0) == 0x80) ntrain--, nval++;
    if (ntrain < 1)
        return zinf_err("%s: %lld %s is too little to split off a validation part", what, (long long)n, unit);
    if (shard_tokens <= 0 || shard_tokens > ntrain) shard_tokens = ntrain;
    if (shard_tokens > INT32_MAX) shard_tokens = INT32_MAX;
    int64_t bufn = shard_tokens > nval ? shard_tokens : nval;
    uint32_t *buf = view == tokens_view ? NULL : malloc((size_t)bufn * sizeof *buf);
    char *path = malloc(strlen(prefix) + 32);
    int rc = 0;
    if ((!buf && view != tokens_view) || !path) rc = zinf_errc(ZINF_ENOMEM, "%s: out of memory", what);
    for (int64_t s = 0, off = 0; rc == 0 && off < ntrain; s++, off += shard_tokens) {
        int64_t m = ntrain - off < shard_tokens ? ntrain - off : shard_tokens;
        sprintf(path, "%s_train_%06lld.bin", prefix, (long long)s);
        rc = zinf_data_write_shard(path, view(src, off, m, buf), m);
        if (rc == 0 && out) fprintf(out, "%s %lld tokens\n", path, (long long)m);
    }
    if (rc == 0 && nval > 0) {
        sprintf(path, "%s_val_000000.bin", prefix);
        rc = zinf_data_write_shard(path, view(src, ntrain, nval, buf), nval);
        if (rc == 0 && out) fprintf(out, "%s %lld tokens\n", path, (long long)nval);
    }
    free(path);
    free(buf);
    return rc;
}

int zinf_data_make_bytes(const char *text_path, const char *prefix, double val_fraction,
                         int64_t shard_tokens, FILE *out, FILE *warn)
{
    if (!(val_fraction >= 0 && val_fraction < 1))
        return zinf_err("--val_fraction %g must be in [0, 1)", val_fraction);
    unsigned char *text;
    int64_t n;
    ZINF_TRY(slurp(text_path, &text, &n));
    if (warn && n > 0 && looks_jsonl(text, n))
        fprintf(warn, "zinf: warning: %s looks like JSON Lines (ms-swift's dataset format): zinf data makes a "
                      "token of every byte, braces and keys included, with no chat template; give it plain "
                      "text, or a chat dataset to zinf data --sft\n", text_path);
    int rc = write_split(text_path, "bytes", prefix, text, bytes_view, n, val_fraction, shard_tokens, out,
                         utf8_text(text, n) ? text : NULL);
    free(text);
    return rc;
}

/* The text is cut into pieces of about CUT_BYTES, each encoded on its own (in parallel), at the
 * points the tokenizer says leave the ids of the whole file unchanged (zinf_tok_next_cut), so that
 * the shards do not depend on the thread count. */
#define CUT_BYTES (64 * 1024)

int zinf_data_make_tokens(const char *text_path, const char *tok_path, const char *prefix,
                          double val_fraction, int64_t shard_tokens, FILE *out)
{
    if (!(val_fraction >= 0 && val_fraction < 1))
        return zinf_err("--val_fraction %g must be in [0, 1)", val_fraction);
    zinf_tok *tok;
    ZINF_TRY(zinf_tok_load(tok_path, &tok));
    unsigned char *text = NULL;
    int64_t n;
    int rc = slurp(text_path, &text, &n);
    size_t bad = rc ? 0 : zinf_utf8_check((const char *)text, (size_t)n);
    if (rc == 0 && (int64_t)bad < n) {
        int64_t line = 1, col0 = 0;
        for (size_t i = 0; i < bad; i++)
            if (text[i] == '\n') {
                line++;
                col0 = (int64_t)i + 1;
            }
        rc = zinf_err("%s:%lld: invalid UTF-8 at byte %zu of the file (byte %lld of the line): 0x%02x",
                      text_path, (long long)line, bad, (long long)((int64_t)bad - col0 + 1), text[bad]);
    }
    /* cut points, then each piece's ids */
    int64_t ncut = 0, cap = n / CUT_BYTES + 2, *cut = rc ? NULL : malloc((size_t)cap * sizeof *cut);
    if (!rc && !cut) rc = zinf_errc(ZINF_ENOMEM, "%s: out of memory", text_path);
    if (!rc) {
        cut[ncut++] = 0;
        for (int64_t at = 0; at < n;) {
            at = (int64_t)zinf_tok_next_cut(tok, (const char *)text, (size_t)n,
                                            (size_t)(at + CUT_BYTES < n ? at + CUT_BYTES : n));
            if (ncut == cap) break; /* cannot happen: cuts are CUT_BYTES apart */
            cut[ncut++] = at;
        }
    }
    int64_t npieces = ncut > 0 ? ncut - 1 : 0;
    zinf_ids *ids = rc ? NULL : calloc((size_t)npieces + 1, sizeof *ids);
    char (*msg)[256] = rc ? NULL : calloc((size_t)npieces + 1, sizeof *msg);
    if (!rc && (!ids || !msg)) rc = zinf_errc(ZINF_ENOMEM, "%s: out of memory", text_path);
    double t0 = zinf_now();
    int nthreads = 1;
    if (!rc) {
#pragma omp parallel
#pragma omp single
        nthreads = omp_get_num_threads();
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t i = 0; i < npieces; i++)
            if (zinf_tok_encode(tok, (const char *)text + cut[i], (size_t)(cut[i + 1] - cut[i]),
                                ZINF_TOK_SPECIAL, &ids[i]) < 0)
                snprintf(msg[i], sizeof msg[i], "%s", zinf_errmsg());
        for (int64_t i = 0; i < npieces && !rc; i++)
            if (msg[i][0]) rc = zinf_err("%s: %s", text_path, msg[i]);
    }
    double secs = zinf_now() - t0;
    int64_t total = 0;
    for (int64_t i = 0; !rc && i < npieces; i++) total += (int64_t)ids[i].n;
    uint32_t *all = rc ? NULL : malloc((size_t)(total ? total : 1) * sizeof *all);
    if (!rc && !all) rc = zinf_errc(ZINF_ENOMEM, "%s: out of memory for %lld tokens", text_path, (long long)total);
    if (!rc) {
        int64_t k = 0;
        for (int64_t i = 0; i < npieces; i++)
            for (size_t j = 0; j < ids[i].n; j++) all[k++] = (uint32_t)ids[i].id[j];
        rc = write_split(text_path, "tokens", prefix, all, tokens_view, total, val_fraction, shard_tokens, out, NULL);
        if (!rc && out)
            fprintf(out, "%s: %lld bytes -> %lld tokens, encoded in %.3f s on %d threads (%.2f MB/s per thread)\n",
                    text_path, (long long)n, (long long)total, secs, nthreads,
                    secs > 0 ? (double)n / secs / nthreads / 1e6 : 0.0);
    }
    for (int64_t i = 0; ids && i < npieces; i++) zinf_ids_free(&ids[i]);
    free(all);
    free(ids);
    free(msg);
    free(cut);
    free(text);
    zinf_tok_free(tok);
    return rc;
}

int zinf_data_make_random(const char *prefix, int64_t ntokens, int vocab, uint64_t seed, FILE *out)
{
    if (ntokens < 2) return zinf_err("data: --random needs at least 2 tokens, got %lld", (long long)ntokens);
    if (vocab < 2) return zinf_err("data: --vocab must be at least 2, got %d", vocab);
    uint32_t *tok = malloc((size_t)ntokens * sizeof *tok);
    if (!tok) return zinf_errc(ZINF_ENOMEM, "data: out of memory for %lld tokens", (long long)ntokens);
    uint64_t x = seed ^ 0x2545F4914F6CDD1DULL;
    for (int64_t i = 0; i < ntokens; i++) {
        /* splitmix64, then a multiply-shift into [0, vocab) */
        x += 0x9e3779b97f4a7c15ULL;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        tok[i] = (uint32_t)(((z >> 32) * (uint64_t)vocab) >> 32);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s_train_000000.bin", prefix);
    int rc = zinf_data_write_shard(path, tok, ntokens);
    free(tok);
    if (!rc && out) fprintf(out, "%s %lld tokens\n", path, (long long)ntokens);
    return rc;
}
