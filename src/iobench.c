#define _GNU_SOURCE /* O_DIRECT, fallocate */
#include "iobench.h"

#include <liburing.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "swap.h"

#define MAXLIST 32
#define RAW_BLOCK ((int64_t)8 << 20)  /* the reference loop's block */
#define CHUNK ((int64_t)64 << 20)     /* one request (one pool buffer) at most this big... */
#define POOL_MAX ((int64_t)1 << 30)   /* ...and the pool at most this big */
#define WORDS (ZINF_SWAP_ALIGN / 8)   /* 64-bit words in a checked block */

void zinf_iobench_opts_defaults(zinf_iobench_opts *o) { memset(o, 0, sizeof *o); }

/* ---------------------------------------------------------------- parsing */

int zinf_iobench_parse_size(const char *what, const char *s, int64_t *out)
{
    const char *p = s;
    while (isspace((unsigned char)*p)) p++;
    if (!isdigit((unsigned char)*p)) return zinf_err("io-bench: %s: '%s' is not a size (e.g. 1G, 512K, 4096)", what, s);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno) return zinf_err("io-bench: %s: '%s' is too large", what, s);
    int shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I') && (end[1] == 'b' || end[1] == 'B')) end += 2;
    else if (*end == 'b' || *end == 'B') end++;
    if (*end) return zinf_err("io-bench: %s: '%s' is not a size (digits with K, M or G)", what, s);
    if (v == 0) return zinf_err("io-bench: %s: '%s' must be more than 0", what, s);
    if (v > ((unsigned long long)INT64_MAX >> shift)) return zinf_err("io-bench: %s: '%s' is too large", what, s);
    *out = (int64_t)(v << shift);
    return 0;
}

/* A comma list of sizes (sizes = 1) or of integers; each item checked against [lo, hi]. */
static int parse_list(const char *flag, const char *s, int sizes, int64_t lo, int64_t hi,
                      int64_t *v, int *n)
{
    *n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        if (len == 0) return zinf_err("io-bench: --%s '%s': an empty item", flag, s);
        if (len >= sizeof item) return zinf_err("io-bench: --%s: item '%.*s' is too long", flag, (int)len, p);
        if (*n >= MAXLIST) return zinf_err("io-bench: --%s: more than %d values", flag, MAXLIST);
        memcpy(item, p, len);
        item[len] = 0;
        int64_t x;
        if (sizes) {
            char name[80];
            snprintf(name, sizeof name, "--%s", flag);
            ZINF_TRY(zinf_iobench_parse_size(name, item, &x));
            if (x % ZINF_SWAP_ALIGN) return zinf_err("io-bench: --%s: '%s' is not a multiple of %d bytes", flag, item, ZINF_SWAP_ALIGN);
        } else {
            char *end;
            errno = 0;
            long long y = strtoll(item, &end, 10);
            if (errno || end == item || *end) return zinf_err("io-bench: --%s: '%s' is not an integer", flag, item);
            x = y;
        }
        if (x < lo || x > hi)
            return zinf_err("io-bench: --%s: %s is outside [%lld, %lld]", flag, item, (long long)lo, (long long)hi);
        for (int i = 0; i < *n; i++)
            if (v[i] == x) return zinf_err("io-bench: --%s: %s is given twice", flag, item);
        v[(*n)++] = x;
        if (!comma) return 0;
        p = comma + 1;
    }
}

static int parse_both(const char *flag, const char *s, int64_t *v, int *n)
{
    if (!strcmp(s, "both")) { v[0] = 0; v[1] = 1; *n = 2; }
    else if (!strcmp(s, "true")) { v[0] = 1; *n = 1; }
    else if (!strcmp(s, "false")) { v[0] = 0; *n = 1; }
    else return zinf_err("io-bench: --%s '%s': expected both, true or false", flag, s);
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static void fmt_bytes(char *b, size_t n, int64_t x)
{
    if (x % ((int64_t)1 << 30) == 0) snprintf(b, n, "%lldG", (long long)(x >> 30));
    else if (x % ((int64_t)1 << 20) == 0) snprintf(b, n, "%lldM", (long long)(x >> 20));
    else if (x % 1024 == 0) snprintf(b, n, "%lldK", (long long)(x >> 10));
    else snprintf(b, n, "%lld", (long long)x);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The bytes written: every 4096-byte block holds, in word 0, a tag of its logical offset and this
 * run's seed, and in words 1..511 a fixed pseudo-random pattern. A block read back is right when
 * its word sum is the pattern's sum plus its tag, so a block from the wrong place, a stale block,
 * a zeroed or partly transferred block are all caught. */
typedef struct {
    uint64_t pat[WORDS];
    uint64_t patsum; /* sum of pat[1..] */
    uint64_t seed;
} pattern;

static uint64_t tag_of(const pattern *pt, int64_t off) { return ((uint64_t)off * 0x2545F4914F6CDD1Dull) ^ pt->seed; }

static void pattern_init(pattern *pt, uint64_t seed)
{
    uint64_t s = seed;
    pt->seed = splitmix(&s);
    pt->patsum = 0;
    pt->pat[0] = 0;
    for (int i = 1; i < WORDS; i++) pt->patsum += pt->pat[i] = splitmix(&s);
}

static void fill(const pattern *pt, char *buf, size_t len)
{
    for (size_t o = 0; o < len; o += ZINF_SWAP_ALIGN) memcpy(buf + o, pt->pat, ZINF_SWAP_ALIGN);
}

static void stamp(const pattern *pt, char *buf, size_t len, int64_t off)
{
    for (size_t o = 0; o < len; o += ZINF_SWAP_ALIGN) {
        uint64_t t = tag_of(pt, off + (int64_t)o);
        memcpy(buf + o, &t, 8);
    }
}

/* Offset within [off, off+len) of the first wrong block, or -1. */
static int64_t check(const pattern *pt, const char *buf, size_t len, int64_t off)
{
    for (size_t o = 0; o < len; o += ZINF_SWAP_ALIGN) {
        const uint64_t *w = (const uint64_t *)(const void *)(buf + o);
        uint64_t s = 0;
        for (int i = 0; i < WORDS; i++) s += w[i];
        uint64_t t = tag_of(pt, off + (int64_t)o);
        if (w[0] != t || s != pt->patsum + t) return off + (int64_t)o;
    }
    return -1;
}

/* ---------------------------------------------------------------- cleanup on signals */

/* The swap files of the swapper open now (pointers into it), unlinked by a fatal signal. */
static const char *volatile g_files[ZINF_IOBENCH_MAX_PATHS];
static volatile sig_atomic_t g_nfiles;

static void on_signal(int sig)
{
    for (int i = 0; i < g_nfiles; i++)
        if (g_files[i]) unlink(g_files[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

static const int g_sigs[] = {SIGINT, SIGTERM, SIGHUP};
#define NSIGS ((int)(sizeof g_sigs / sizeof g_sigs[0]))

static void track_files(zinf_swap *sw, int n)
{
    g_nfiles = 0;
    for (int i = 0; i < n; i++) g_files[i] = sw ? zinf_swap_file(sw, i) : NULL;
    g_nfiles = sw ? n : 0;
}

/* ---------------------------------------------------------------- one setting */

typedef struct {
    int64_t bs;
    int qd, par, ss, oe;
    double wr, rd; /* GB/s */
} row;

typedef struct {
    const char *const *paths;
    int npaths;
    const char *engine;
    int buffered;
    int64_t size;
} bench;

static int setting_err(int rc, const char *pass, const row *r, const char *msg)
{
    char b[32];
    fmt_bytes(b, sizeof b, r->bs);
    return zinf_errc(rc < 0 ? rc : ZINF_EIO,
                     "io-bench: %s (block_size %s, queue_depth %d, intra_op_parallelism %d, "
                     "single_submit %s, overlap_events %s): %s",
                     pass, b, r->qd, r->par, r->ss ? "true" : "false", r->oe ? "true" : "false", msg);
}

/* fsync every swap file (through a second descriptor: the swapper has no sync call); buffered:
 * then ask the kernel to drop their pages so the read pass goes to the disk. */
static int sync_files(zinf_swap *sw, const bench *b)
{
    for (int i = 0; i < b->npaths; i++) {
        const char *f = zinf_swap_file(sw, i);
        int fd = open(f, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return zinf_errc(-errno, "fsync of %s: cannot open: %s", f, strerror(errno));
        if (fsync(fd) != 0) {
            int e = errno;
            close(fd);
            return zinf_errc(-e, "fsync of %s failed: %s", f, strerror(e));
        }
        if (b->buffered) (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    return 0;
}

/* Where logical byte L of the swap space lives (for messages). */
static void locate(zinf_swap *sw, const bench *b, int64_t bs, int64_t L, const char **file,
                   int64_t *foff)
{
    int64_t k = L / bs;
    *file = zinf_swap_file(sw, (int)(k % b->npaths));
    *foff = (k / b->npaths) * bs + L % bs;
}

/* One pass over the region: chunk c (bytes [c*chunk, ...)) goes through pool buffer c % nbuf; up to
 * nbuf requests are in flight. Reads are checked as they complete. Every request is waited for,
 * also after a failure; the first failure is the result. */
static int pass(zinf_swap *sw, const bench *b, const row *r, int op, const zinf_swap_region *reg,
                char **bufs, int nbuf, int64_t chunk, const pattern *pt, double *secs)
{
    int64_t n = (b->size + chunk - 1) / chunk;
    zinf_swap_req *req[16] = {0};
    int64_t at[16] = {0};
    int rc = 0;
    char msg[1024] = "";
    const char *what = op == ZINF_SWAP_WRITE ? "write" : "read-back";
    double t0 = now();
    for (int64_t c = 0; c < n + nbuf; c++) {
        int s = (int)(c % nbuf);
        if (req[s]) { /* the request this buffer served earlier */
            int w = zinf_swap_wait(sw, req[s]);
            req[s] = NULL;
            if (w < 0 && rc == 0) {
                rc = w;
                snprintf(msg, sizeof msg, "%s", zinf_errmsg());
            }
            if (w == 0 && rc == 0 && op == ZINF_SWAP_READ) {
                size_t len = (size_t)(b->size - at[s] < chunk ? b->size - at[s] : chunk);
                int64_t bad = check(pt, bufs[s], len, at[s]);
                if (bad >= 0) {
                    const char *f;
                    int64_t foff;
                    locate(sw, b, r->bs, reg->off + bad, &f, &foff);
                    rc = ZINF_EIO;
                    snprintf(msg, sizeof msg,
                             "the %d bytes read at offset %lld of %s differ from what was written",
                             ZINF_SWAP_ALIGN, (long long)foff, f);
                }
            }
        }
        if (c >= n || rc) continue; /* after a failure: only drain */
        int64_t off = c * chunk;
        size_t len = (size_t)(b->size - off < chunk ? b->size - off : chunk);
        if (op == ZINF_SWAP_WRITE) stamp(pt, bufs[s], len, off);
        at[s] = off;
        int e = zinf_swap_submit(sw, op, reg, off, bufs[s], len, &req[s]);
        if (e < 0) {
            rc = e;
            snprintf(msg, sizeof msg, "%s", zinf_errmsg());
            req[s] = NULL;
        }
    }
    if (rc == 0 && op == ZINF_SWAP_WRITE) {
        rc = sync_files(sw, b);
        if (rc) snprintf(msg, sizeof msg, "%s", zinf_errmsg());
    }
    *secs = now() - t0;
    if (rc) return setting_err(rc, what, r, msg);
    return 0;
}

static int run_setting(const bench *b, row *r, uint64_t seed)
{
    /* requests of up to 64 MiB (a multiple of the block size); enough of them in flight to fill
     * every ring (block_size x queue_depth x intra_op_parallelism bytes), 2 at least, 16 or 1 GiB
     * at most */
    int64_t chunk = CHUNK >= r->bs ? CHUNK / r->bs * r->bs : r->bs;
    if (chunk > round_up(b->size, ZINF_SWAP_ALIGN)) chunk = round_up(b->size, ZINF_SWAP_ALIGN);
    int64_t nchunks = (b->size + chunk - 1) / chunk;
    int64_t want = r->bs * r->qd * r->par / chunk + 2;
    if (want > 16) want = 16;
    if (want * chunk > POOL_MAX) want = POOL_MAX / chunk > 2 ? POOL_MAX / chunk : 2;
    if (want > nchunks) want = nchunks;
    int nbuf = (int)want;

    zinf_swap_opts so;
    zinf_swap_opts_defaults(&so);
    so.engine = b->engine;
    so.paths = b->paths;
    so.npaths = b->npaths;
    so.tag = "iobench";
    so.rank = (int)getpid();
    so.capacity = b->size;
    so.block_size = (size_t)r->bs;
    so.queue_depth = r->qd;
    so.intra_op_parallelism = r->par;
    so.single_submit = r->ss;
    so.overlap_events = r->oe;
    so.buffered = b->buffered;
    so.buffer_count = (size_t)nbuf;
    so.buffer_size = (size_t)chunk;
    zinf_swap *sw = NULL;
    int rc = zinf_swap_open(&sw, &so);
    if (rc < 0) {
        /* the swapper's own message is the whole story (no O_DIRECT, no space, no io_uring) */
        return zinf_err_prefix(rc, "io-bench");
    }
    track_files(sw, b->npaths);
    zinf_swap_region reg;
    char *bufs[16];
    int got = 0;
    pattern pt;
    pattern_init(&pt, seed);
    if ((rc = zinf_swap_reserve(sw, b->size, &reg)) < 0) {
        rc = zinf_err_prefix(rc, "io-bench");
        goto out;
    }
    for (; got < nbuf; got++) {
        void *p;
        if ((rc = zinf_swap_buf_get(sw, &p)) < 0) {
            rc = zinf_err_prefix(rc, "io-bench");
            goto out;
        }
        bufs[got] = p;
        fill(&pt, bufs[got], (size_t)chunk);
    }
    double tw, tr;
    if ((rc = pass(sw, b, r, ZINF_SWAP_WRITE, &reg, bufs, nbuf, chunk, &pt, &tw)) < 0) goto out;
    if ((rc = pass(sw, b, r, ZINF_SWAP_READ, &reg, bufs, nbuf, chunk, &pt, &tr)) < 0) goto out;
    r->wr = (double)b->size / tw / 1e9;
    r->rd = (double)b->size / tr / 1e9;
out:
    for (int i = 0; i < got; i++) zinf_swap_buf_put(sw, bufs[i]);
    track_files(NULL, 0);
    zinf_swap_close(sw); /* unlinks the files */
    return rc;
}

/* ---------------------------------------------------------------- the raw reference */

/* One file in dir, written then read with plain pwrite/pread of 8 MiB, one at a time: O_DIRECT
 * where the file system has it, else buffered (*direct = 0). The file is unlinked as soon as it
 * is open, so no exit leaves it behind. */
static int raw_ref(const char *dir, int64_t bytes, int *direct, double *wr, double *rd)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/zinf-iobench-raw-%d.tmp", dir, (int)getpid());
    *direct = 1;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) {
        unlink(path);
        *direct = 0;
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
    if (fd < 0) return zinf_errc(-errno, "io-bench: reference file %s: cannot create: %s", path, strerror(errno));
    unlink(path);
    char *buf = aligned_alloc(ZINF_SWAP_ALIGN, (size_t)RAW_BLOCK);
    if (!buf) {
        close(fd);
        return zinf_errc(ZINF_ENOMEM, "io-bench: out of memory for the reference buffer");
    }
    pattern pt;
    pattern_init(&pt, (uint64_t)getpid() ^ 0x5eed);
    fill(&pt, buf, (size_t)RAW_BLOCK);
    int rc = 0;
    if (fallocate(fd, 0, 0, bytes) != 0 && errno != EOPNOTSUPP && errno != ENOSYS)
        rc = zinf_errc(-errno, "io-bench: reference file %s: preallocating %lld bytes failed: %s",
                       path, (long long)bytes, strerror(errno));
    double t0 = now();
    for (int64_t o = 0; o < bytes && rc == 0; o += RAW_BLOCK) {
        stamp(&pt, buf, (size_t)RAW_BLOCK, o);
        ssize_t k = pwrite(fd, buf, (size_t)RAW_BLOCK, o);
        if (k != (ssize_t)RAW_BLOCK)
            rc = zinf_errc(k < 0 ? -errno : ZINF_EIO, "io-bench: reference write of %s at offset %lld failed: %s",
                           path, (long long)o, k < 0 ? strerror(errno) : "short write");
    }
    if (rc == 0 && fsync(fd) != 0)
        rc = zinf_errc(-errno, "io-bench: fsync of the reference file %s failed: %s", path, strerror(errno));
    *wr = (double)bytes / (now() - t0) / 1e9;
    if (rc == 0 && !*direct) (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    t0 = now();
    for (int64_t o = 0; o < bytes && rc == 0; o += RAW_BLOCK) {
        ssize_t k = pread(fd, buf, (size_t)RAW_BLOCK, o);
        if (k != (ssize_t)RAW_BLOCK)
            rc = zinf_errc(k < 0 ? -errno : ZINF_EIO, "io-bench: reference read of %s at offset %lld failed: %s",
                           path, (long long)o, k < 0 ? strerror(errno) : "short read");
        else if (check(&pt, buf, (size_t)RAW_BLOCK, o) >= 0)
            rc = zinf_errc(ZINF_EIO, "io-bench: reference read of %s at offset %lld differs from what was written",
                           path, (long long)o);
    }
    *rd = (double)bytes / (now() - t0) / 1e9;
    free(buf);
    close(fd);
    return rc;
}

/* The raw disk at depth: one O_DIRECT file written then read with io_uring, 8 MiB blocks, RAW_QD
 * of them in flight from their own buffers, no swapper, no striping: what the swapper's best
 * setting is held to. Skipped (0 GB/s) without O_DIRECT or where io_uring is disabled. */
#define RAW_QD 8
static int raw_uring(const char *dir, int64_t bytes, double *wr, double *rd)
{
    *wr = *rd = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/zinf-iobench-uring-%d.tmp", dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) { unlink(path); return 0; }
    if (fd < 0) return zinf_errc(-errno, "io-bench: reference file %s: cannot create: %s", path, strerror(errno));
    unlink(path);
    struct io_uring ring;
    int rc = io_uring_queue_init(RAW_QD, &ring, 0);
    if (rc < 0) { close(fd); return 0; } /* io_uring disabled here (sysctl, seccomp): no raw figure */
    char *buf = aligned_alloc(ZINF_SWAP_ALIGN, (size_t)RAW_BLOCK * RAW_QD);
    if (!buf) rc = zinf_errc(ZINF_ENOMEM, "io-bench: out of memory for the reference buffers");
    else memset(buf, 0x5a, (size_t)RAW_BLOCK * RAW_QD);
    if (!rc && fallocate(fd, 0, 0, bytes) != 0 && errno != EOPNOTSUPP && errno != ENOSYS)
        rc = zinf_errc(-errno, "io-bench: reference file %s: preallocating failed: %s", path, strerror(errno));
    for (int pass = 0; pass < 2 && !rc; pass++) { /* 0 write, 1 read */
        double t0 = now();
        int64_t next = 0, done = 0;
        int inflight = 0;
        while (!rc && done < bytes) {
            while (inflight < RAW_QD && next < bytes) {
                struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
                char *b = buf + (size_t)((next / RAW_BLOCK) % RAW_QD) * RAW_BLOCK;
                if (pass == 0) io_uring_prep_write(sqe, fd, b, (unsigned)RAW_BLOCK, (uint64_t)next);
                else io_uring_prep_read(sqe, fd, b, (unsigned)RAW_BLOCK, (uint64_t)next);
                next += RAW_BLOCK;
                inflight++;
            }
            int s = io_uring_submit(&ring);
            if (s < 0) { rc = zinf_errc(s, "io-bench: io_uring_submit: %s", strerror(-s)); break; }
            struct io_uring_cqe *cqe;
            int w = io_uring_wait_cqe(&ring, &cqe);
            if (w < 0) { rc = zinf_errc(w, "io-bench: io_uring_wait_cqe: %s", strerror(-w)); break; }
            if (cqe->res != (int)RAW_BLOCK)
                rc = zinf_errc(cqe->res < 0 ? cqe->res : ZINF_EIO, "io-bench: raw io_uring %s of %s failed: %s",
                               pass ? "read" : "write", path, cqe->res < 0 ? strerror(-cqe->res) : "short transfer");
            io_uring_cqe_seen(&ring, cqe);
            inflight--;
            done += RAW_BLOCK;
        }
        while (inflight > 0) { /* after a failure: collect what is still in flight */
            struct io_uring_cqe *cqe;
            if (io_uring_wait_cqe(&ring, &cqe) < 0) break;
            io_uring_cqe_seen(&ring, cqe);
            inflight--;
        }
        if (!rc && pass == 0 && fsync(fd) != 0)
            rc = zinf_errc(-errno, "io-bench: fsync of the reference file %s failed: %s", path, strerror(errno));
        double gbs = (double)bytes / (now() - t0) / 1e9;
        if (pass == 0) *wr = gbs;
        else *rd = gbs;
    }
    free(buf);
    io_uring_queue_exit(&ring);
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------- the command */

static int check_paths(const bench *b, int64_t maxbs)
{
    struct stat st[ZINF_IOBENCH_MAX_PATHS];
    for (int i = 0; i < b->npaths; i++) {
        const char *d = b->paths[i];
        if (stat(d, &st[i]) != 0) return zinf_errc(-errno, "io-bench: --path %s: %s", d, strerror(errno));
        if (!S_ISDIR(st[i].st_mode)) return zinf_errc(-ENOTDIR, "io-bench: --path %s: not a directory", d);
        if (access(d, W_OK | X_OK) != 0)
            return zinf_errc(-errno, "io-bench: --path %s: not writable: %s", d, strerror(errno));
        for (int j = 0; j < i; j++)
            if (st[j].st_dev == st[i].st_dev && st[j].st_ino == st[i].st_ino)
                return zinf_err("io-bench: --path %s is the same directory as --path %s", d, b->paths[j]);
    }
    /* space, as the swapper will want it for the largest block size (capacity rounded up to
     * block_size x npaths, an equal share per directory; directories on one file system summed),
     * or the reference file, whichever is more */
    int64_t share = round_up(b->size, maxbs * b->npaths) / b->npaths;
    int64_t raw = round_up((b->size + b->npaths - 1) / b->npaths, RAW_BLOCK);
    for (int i = 0; i < b->npaths; i++) {
        int64_t need = 0;
        int first = -1;
        for (int j = 0; j < b->npaths; j++)
            if (st[j].st_dev == st[i].st_dev) {
                if (first < 0) first = j;
                need += share;
            }
        if (first != i) continue;
        if (raw > need) need = raw;
        struct statvfs vf;
        if (statvfs(b->paths[i], &vf) != 0)
            return zinf_errc(-errno, "io-bench: --path %s: statvfs failed: %s", b->paths[i], strerror(errno));
        int64_t avail = (int64_t)vf.f_bavail * (int64_t)vf.f_frsize;
        if (avail < need)
            return zinf_errc(-ENOSPC, "io-bench: too little space: need %lld bytes, %s has %lld free",
                             (long long)need, b->paths[i], (long long)avail);
    }
    return 0;
}

static void print_setting(FILE *out, const char *label, const row *r)
{
    char bs[32];
    fmt_bytes(bs, sizeof bs, r->bs);
    fprintf(out, "%-11s block_size %s, queue_depth %d, intra_op_parallelism %d, single_submit %s, "
                 "overlap_events %s: write %.3f GB/s, read %.3f GB/s\n",
            label, bs, r->qd, r->par, r->ss ? "true" : "false", r->oe ? "true" : "false", r->wr, r->rd);
}

int zinf_iobench_run(const zinf_iobench_opts *o, FILE *out)
{
    if (o->npaths < 1) return zinf_err("io-bench: --path DIR is required (repeat it to stripe over several)");
    if (o->npaths > ZINF_IOBENCH_MAX_PATHS)
        return zinf_err("io-bench: %d paths given, at most %d", o->npaths, ZINF_IOBENCH_MAX_PATHS);
    bench b = {.paths = o->paths, .npaths = o->npaths, .engine = o->engine ? o->engine : "io_uring"};
    if (strcmp(b.engine, "io_uring") && strcmp(b.engine, "psync"))
        return zinf_err("io-bench: --engine %s: expected io_uring or psync", b.engine);
    b.buffered = !strcmp(b.engine, "psync"); /* as zinf train's --swap_engine psync */
    ZINF_TRY(zinf_iobench_parse_size("--size", o->size ? o->size : o->quick ? "64M" : "1G", &b.size));
    if (b.size > ((int64_t)1 << 50)) return zinf_err("io-bench: --size %s: more than 1 PiB", o->size);
    b.size = round_up(b.size, ZINF_SWAP_ALIGN);

    int64_t bsv[MAXLIST], qdv[MAXLIST], parv[MAXLIST], ssv[2], oev[2];
    int nbs, nqd, npar, nss, noe;
    ZINF_TRY(parse_list("block-sizes", o->block_sizes ? o->block_sizes : o->quick ? "128K,1M" : "128K,256K,512K,1M,4M,8M",
                        1, ZINF_SWAP_ALIGN, (int64_t)1 << 30, bsv, &nbs));
    ZINF_TRY(parse_list("queue-depths", o->queue_depths ? o->queue_depths : o->quick ? "4,32" : "4,8,16,32,64",
                        0, 1, 4096, qdv, &nqd));
    ZINF_TRY(parse_list("parallelism", o->parallelism ? o->parallelism : "1,2", 0, 1, 256, parv, &npar));
    ZINF_TRY(parse_both("single-submit", o->single_submit ? o->single_submit : "false", ssv, &nss));
    ZINF_TRY(parse_both("overlap-events", o->overlap_events ? o->overlap_events : "true", oev, &noe));
    int64_t maxbs = 0;
    for (int i = 0; i < nbs; i++) if (bsv[i] > maxbs) maxbs = bsv[i];
    ZINF_TRY(check_paths(&b, maxbs));

    struct sigaction sa, old[NSIGS];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < NSIGS; i++) sigaction(g_sigs[i], &sa, &old[i]);

    int nrows = nbs * nqd * npar * nss * noe;
    row *rows = calloc((size_t)nrows, sizeof *rows);
    if (!rows) return zinf_errc(ZINF_ENOMEM, "io-bench: out of memory");
    char sz[32];
    fmt_bytes(sz, sizeof sz, b.size);
    fprintf(out, "zinf io-bench: %lld bytes (%s) written, fsync'ed and read back per setting through the "
                 "swapper's pool buffers, checked block by block; %d settings\n",
            (long long)b.size, sz, nrows);
    fprintf(out, "engine %s (%s); %d path%s, striped with stripe unit = block_size:", b.engine,
            b.buffered ? "pread/pwrite through the page cache, as zinf train --swap_engine psync"
                       : "O_DIRECT, fixed buffers",
            b.npaths, b.npaths > 1 ? "s" : "");
    for (int i = 0; i < b.npaths; i++) fprintf(out, " %s", b.paths[i]);
    fprintf(out, "\n");
    if (b.buffered)
        fprintf(out, "note: psync is buffered: the files' pages are dropped with posix_fadvise(DONTNEED) after "
                     "fsync, but unprivileged zinf cannot drop the page cache, so read GB/s may be (partly) "
                     "cached; queue_depth only bounds each thread's batch, single_submit and overlap_events "
                     "do nothing\n");
    fprintf(out, "GB/s = 1e9 bytes/s; write includes fsync\n\n");
    fprintf(out, "%10s %11s %11s %13s %14s %10s %10s\n", "block_size", "queue_depth", "parallelism",
            "single_submit", "overlap_events", "write_GB/s", "read_GB/s");
    fflush(out);

    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    int rc = 0, k = 0;
    for (int i = 0; i < nbs && !rc; i++)
        for (int j = 0; j < nqd && !rc; j++)
            for (int p = 0; p < npar && !rc; p++)
                for (int s = 0; s < nss && !rc; s++)
                    for (int e = 0; e < noe && !rc; e++) {
                        row *r = &rows[k];
                        *r = (row){.bs = bsv[i], .qd = (int)qdv[j], .par = (int)parv[p], .ss = (int)ssv[s], .oe = (int)oev[e]};
                        rc = run_setting(&b, r, seed + (uint64_t)k);
                        if (rc) break;
                        char bs[32];
                        fmt_bytes(bs, sizeof bs, r->bs);
                        fprintf(out, "%10s %11d %11d %13s %14s %10.3f %10.3f\n", bs, r->qd, r->par,
                                r->ss ? "true" : "false", r->oe ? "true" : "false", r->wr, r->rd);
                        fflush(out);
                        k++;
                    }
    if (rc) goto done;

    /* the reference: plain pwrite/pread of 8 MiB at queue depth 1, each path on its own */
    int64_t rawb = round_up((b.size + b.npaths - 1) / b.npaths, RAW_BLOCK);
    fmt_bytes(sz, sizeof sz, rawb);
    fprintf(out, "\nreference, same run: one plain pwrite/pread loop of 8 MiB blocks (no io_uring, queue "
                 "depth 1, write includes fsync), %s per path\n", sz);
    double rw = 0, rr = 0;
    for (int i = 0; i < b.npaths; i++) {
        int direct;
        double w = 0, r = 0;
        if ((rc = raw_ref(b.paths[i], rawb, &direct, &w, &r)) < 0) goto done;
        fprintf(out, "  %-40s %s: write %.3f GB/s, read %.3f GB/s%s\n", b.paths[i],
                direct ? "O_DIRECT" : "buffered", w, r,
                direct ? "" : " (no O_DIRECT here: the read may be cached)");
        rw += w;
        rr += r;
    }
    if (b.npaths > 1) fprintf(out, "  %-40s          write %.3f GB/s, read %.3f GB/s (sum over the paths)\n", "all", rw, rr);
    fprintf(out, "reference, same run: raw io_uring O_DIRECT, 8 MiB blocks, queue depth %d, one file per path, "
                 "no swapper, %s per path\n", RAW_QD, sz);
    double uw = 0, ur = 0;
    for (int i = 0; i < b.npaths; i++) {
        double w = 0, r = 0;
        if ((rc = raw_uring(b.paths[i], rawb, &w, &r)) < 0) goto done;
        if (w == 0) fprintf(out, "  %-40s no raw figure: no O_DIRECT or no io_uring here\n", b.paths[i]);
        else fprintf(out, "  %-40s io_uring: write %.3f GB/s, read %.3f GB/s\n", b.paths[i], w, r);
        uw += w;
        ur += r;
    }

    int bw = 0, br = 0, bsum = 0;
    for (int i = 1; i < nrows; i++) {
        if (rows[i].wr > rows[bw].wr) bw = i;
        if (rows[i].rd > rows[br].rd) br = i;
        if (rows[i].wr + rows[i].rd > rows[bsum].wr + rows[bsum].rd) bsum = i;
    }
    fprintf(out, "\n");
    print_setting(out, "best read:", &rows[br]);
    print_setting(out, "best write:", &rows[bw]);
    print_setting(out, "best sum:", &rows[bsum]);
    fprintf(out, "(raw disk reference above: write %.3f GB/s, read %.3f GB/s)\n", rw, rr);
    if (uw > 0 && ur > 0)
        fprintf(out, "swapper at its best sum against raw io_uring at depth: write %.0f%%, read %.0f%%\n",
                100.0 * rows[bsum].wr / uw, 100.0 * rows[bsum].rd / ur);
    const row *r = &rows[bsum];
    fprintf(out, "\nDeepSpeed \"aio\" block for the best sum (paste it into the config; zinf train reads it too):\n"
                 "\"aio\": {\n"
                 "  \"block_size\": %lld,\n"
                 "  \"queue_depth\": %d,\n"
                 "  \"intra_op_parallelism\": %d,\n"
                 "  \"single_submit\": %s,\n"
                 "  \"overlap_events\": %s\n"
                 "}\n",
            (long long)r->bs, r->qd, r->par, r->ss ? "true" : "false", r->oe ? "true" : "false");
done:
    fflush(out);
    free(rows);
    for (int i = 0; i < NSIGS; i++) sigaction(g_sigs[i], &old[i], NULL);
    return rc;
}
