/* test_swap: the swapper's round trips on both engines over 1, 2 and 3 directories (O_DIRECT where
 * the temp file system has it, buffered always), the striping layout read back from the raw files,
 * many requests in flight, the pool and its bound, regions, and every error path with its exact
 * message: missing / non-directory path, too little space (injected, and a 1 MiB tmpfs when
 * mounting works), no O_DIRECT, EIO, short transfers continued, transfers stopping short, and
 * several threads sharing one handle.
 * Everything lives under a fresh mkdtemp directory, removed at the end, in the first of
 * $ZINF_TEST_SWAP_DIR, $TMPDIR, /var/tmp, /tmp, . whose file system takes O_DIRECT (else the first
 * writable one, and the O_DIRECT cases are skipped with a printed reason). */
#define _GNU_SOURCE
#include "check.h"
#include "err.h"
#include "swap.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <liburing.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

static char root[512]; /* mkdtemp directory */
static int have_direct;  /* root's file system takes O_DIRECT */
static char dirs[3][560]; /* root/d0 .. root/d2 */
static const char *dirp[3];

static int has(const char *s) { return strstr(zinf_errmsg(), s) != NULL; }

static uint64_t rng_s = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}
static void fill(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(rnd() >> 24);
}

static int probe_direct(const char *dir)
{
    char p[700];
    snprintf(p, sizeof p, "%s/.probe-direct", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0) return 0;
    void *b = aligned_alloc(4096, 4096);
    memset(b, 7, 4096);
    int ok = pwrite(fd, b, 4096, 0) == 4096;
    free(b);
    close(fd);
    unlink(p);
    return ok;
}

/* io_uring may be disabled (kernel.io_uring_disabled, a seccomp profile): its cases then run on
 * psync, and main says so */
static int have_uring = 1;
static const char *eng(const char *engine)
{
    return !have_uring && strcmp(engine, "io_uring") == 0 ? "psync" : engine;
}

static void base_opts(zinf_swap_opts *o, const char *engine, int npaths, int buffered)
{
    zinf_swap_opts_defaults(o);
    o->engine = eng(engine);
    o->paths = dirp;
    o->npaths = npaths;
    o->tag = "t";
    o->rank = 3;
    o->buffered = buffered;
    o->capacity = 4 << 20;
}

/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    const char *engine;
    int npaths;
    size_t bs;
    int qd, iop, single, overlap;
} cfg;

/* Odd-sized regions; whole writes, then many concurrent writes at odd offsets and lengths, reads
 * back whole and in pieces; every byte compared with a host mirror. */
static void roundtrip(const cfg *c, int buffered)
{
    char what[200];
    snprintf(what, sizeof what, "%s %s paths=%d bs=%zu qd=%d iop=%d single=%d overlap=%d",
             c->engine, buffered ? "buffered" : "O_DIRECT", c->npaths, c->bs, c->qd, c->iop,
             c->single, c->overlap);
    zinf_swap_opts o;
    base_opts(&o, c->engine, c->npaths, buffered);
    o.block_size = c->bs;
    o.queue_depth = c->qd;
    o.intra_op_parallelism = c->iop;
    o.single_submit = c->single;
    o.overlap_events = c->overlap;
    o.capacity = 3 << 20;
    o.buffer_count = 2;
    o.buffer_size = 256 << 10;
    zinf_swap *sw;
    int rc = zinf_swap_open(&sw, &o);
    CHECK(rc == 0, "%s: open: %s", what, zinf_errmsg());
    if (rc) return;
    int64_t unit = (int64_t)c->bs * c->npaths;
    CHECK(zinf_swap_capacity(sw) == ((3 << 20) + unit - 1) / unit * unit, "%s: capacity %lld", what,
          (long long)zinf_swap_capacity(sw));
    enum { NR = 5 };
    const int64_t sizes[NR] = {1, 4097, 100000, 333333, 12289};
    zinf_swap_region reg[NR];
    unsigned char *mirror[NR], *back = malloc(400000);
    for (int i = 0; i < NR; i++) {
        CHECK(zinf_swap_reserve(sw, sizes[i], &reg[i]) == 0, "%s: reserve: %s", what, zinf_errmsg());
        CHECK(reg[i].size == (sizes[i] + 4095) / 4096 * 4096 && reg[i].off % 4096 == 0,
              "%s: region %d = [%lld, +%lld)", what, i, (long long)reg[i].off,
              (long long)reg[i].size);
        mirror[i] = malloc((size_t)reg[i].size);
        fill(mirror[i], (size_t)reg[i].size);
    }
    /* whole regions, all in flight at once, from unaligned host memory for odd ones */
    zinf_swap_req *rq[64];
    for (int i = 0; i < NR; i++) {
        rc = zinf_swap_submit(sw, ZINF_SWAP_WRITE, &reg[i], 0, mirror[i], (size_t)reg[i].size, &rq[i]);
        CHECK(rc == 0, "%s: submit: %s", what, zinf_errmsg());
    }
    for (int i = 0; i < NR; i++)
        CHECK(zinf_swap_wait(sw, rq[i]) == 0, "%s: write %d: %s", what, i, zinf_errmsg());
    /* 48 random (offset, length) writes in flight together; within one region they do not overlap
     * (each region is cut into disjoint spans) so the mirror stays the truth */
    int nq = 0;
    unsigned char *src[48];
    for (int i = 0; i < NR; i++) {
        int64_t pos = 0, sz = reg[i].size;
        while (pos < sz && nq < 48) {
            int64_t gap = (int64_t)(rnd() % 5000), len = 1 + (int64_t)(rnd() % 70000);
            if (pos + gap >= sz) break;
            pos += gap;
            if (len > sz - pos) len = sz - pos;
            src[nq] = malloc((size_t)len + 1);
            unsigned char *s = src[nq] + (nq & 1); /* odd host addresses too */
            fill(s, (size_t)len);
            memcpy(mirror[i] + pos, s, (size_t)len);
            rc = zinf_swap_submit(sw, ZINF_SWAP_WRITE, &reg[i], pos, s, (size_t)len, &rq[nq]);
            CHECK(rc == 0, "%s: submit: %s", what, zinf_errmsg());
            nq++;
            pos += len;
            if (pos % 4096 && pos < sz) pos = (pos + 4095) / 4096 * 4096; /* no shared block */
        }
    }
    int polled = 0;
    for (int i = 0; i < nq; i++) polled += zinf_swap_poll(sw, rq[i]) >= 0;
    CHECK(polled == nq, "%s: poll", what);
    for (int i = 0; i < nq; i++) {
        CHECK(zinf_swap_wait(sw, rq[i]) == 0, "%s: write %d: %s", what, i, zinf_errmsg());
        free(src[i]);
    }
    for (int i = 0; i < NR; i++) {
        memset(back, 0xEE, (size_t)reg[i].size);
        CHECK(zinf_swap_read(sw, &reg[i], 0, back, (size_t)reg[i].size) == 0, "%s: read: %s", what,
              zinf_errmsg());
        CHECK(memcmp(back, mirror[i], (size_t)reg[i].size) == 0, "%s: region %d differs", what, i);
        /* odd pieces read back into odd host addresses */
        for (int k = 0; k < 6; k++) {
            int64_t off = (int64_t)(rnd() % (uint64_t)reg[i].size);
            size_t len = 1 + rnd() % (size_t)(reg[i].size - off);
            memset(back, 0xEE, len + 2 < 400000 ? len + 2 : 400000);
            CHECK(zinf_swap_read(sw, &reg[i], off, back + 1, len) == 0, "%s: read: %s", what,
                  zinf_errmsg());
            CHECK(memcmp(back + 1, mirror[i] + off, len) == 0, "%s: region %d [%lld, +%zu) differs",
                  what, i, (long long)off, len);
            CHECK(back[0] == 0xEE && (len + 2 > 400000 || back[len + 1] == 0xEE),
                  "%s: read wrote outside its buffer", what);
        }
    }
    zinf_swap_counts c0, c1;
    zinf_swap_get_counts(sw, &c0);
    CHECK(buffered ? c0.bounced == 0 : c0.bounced > 0,
          "%s: %llu of %llu pieces bounced", what, (unsigned long long)c0.bounced,
          (unsigned long long)c0.pieces);
    /* through a pool buffer (fixed buffers on io_uring): aligned, so nothing bounces */
    void *pb;
    CHECK(zinf_swap_buf_get(sw, &pb) == 0, "%s: buf_get: %s", what, zinf_errmsg());
    fill(pb, 196608);
    memcpy(mirror[3] + 8192, pb, 196608);
    CHECK(zinf_swap_write(sw, &reg[3], 8192, pb, 196608) == 0, "%s: pool write: %s", what,
          zinf_errmsg());
    memset(pb, 0, 256 << 10);
    CHECK(zinf_swap_read(sw, &reg[3], 0, pb, 256 << 10) == 0, "%s: pool read: %s", what,
          zinf_errmsg());
    CHECK(memcmp(pb, mirror[3], 256 << 10) == 0, "%s: pool round trip differs", what);
    CHECK(zinf_swap_buf_put(sw, pb) == 0, "%s: buf_put: %s", what, zinf_errmsg());
    zinf_swap_get_counts(sw, &c1);
    uint64_t np = c1.pieces - c0.pieces;
    CHECK(c1.bounced == c0.bounced && np >= 2, "%s: pool I/O bounced", what);
    CHECK(c1.fixed - c0.fixed == (strcmp(eng(c->engine), "io_uring") == 0 ? np : 0),
          "%s: %llu of %llu pool pieces used fixed buffers", what,
          (unsigned long long)(c1.fixed - c0.fixed), (unsigned long long)np);
    CHECK(c1.continued == 0, "%s: transfers continued without a fault", what);

    /* the layout on disk: logical byte a of the swap space is in file (a/bs) % npaths at
     * ((a/bs)/npaths)*bs + a%bs; read the raw files (buffered) and compare */
    int fds[3];
    for (int f = 0; f < c->npaths; f++) fds[f] = open(zinf_swap_file(sw, f), O_RDONLY);
    int layout_ok = 1;
    for (int i = 0; i < NR; i++) {
        for (int64_t a = reg[i].off; a < reg[i].off + reg[i].size; a += 997) {
            int64_t k = a / (int64_t)c->bs;
            unsigned char b = 0;
            if (pread(fds[k % c->npaths], &b, 1, (k / c->npaths) * (int64_t)c->bs + a % (int64_t)c->bs) != 1 ||
                b != mirror[i][a - reg[i].off])
                layout_ok = 0;
        }
    }
    CHECK(layout_ok, "%s: striping layout in the files is not the documented one", what);
    char names[3][2048];
    for (int f = 0; f < c->npaths; f++) {
        close(fds[f]);
        snprintf(names[f], sizeof names[f], "%s/zinf-swap-t-r3.swp", dirs[f]);
        CHECK(strcmp(zinf_swap_file(sw, f), names[f]) == 0, "%s: file name %s", what,
              zinf_swap_file(sw, f));
        struct stat st;
        CHECK(stat(names[f], &st) == 0 && st.st_size == zinf_swap_capacity(sw) / c->npaths &&
                  (int64_t)st.st_blocks * 512 >= st.st_size,
              "%s: %s not preallocated", what, names[f]);
    }
    for (int i = 0; i < NR; i++) {
        CHECK(zinf_swap_release(sw, &reg[i]) == 0, "%s: release: %s", what, zinf_errmsg());
        free(mirror[i]);
    }
    free(back);
    zinf_swap_close(sw);
    for (int f = 0; f < c->npaths; f++)
        CHECK(access(names[f], F_OK) != 0, "%s: %s left after close", what, names[f]);
}

static void test_roundtrips(void)
{
    const cfg cfgs[] = {
        /* one piece at a time */
        {"psync", 1, 4096, 1, 1, 0, 1},
        {"io_uring", 1, 4096, 1, 1, 0, 1},
        {"io_uring", 1, 4096, 1, 1, 1, 0},
        /* many pieces per ring, several rings */
        {"psync", 2, 8192, 4, 2, 0, 1},
        {"io_uring", 2, 8192, 4, 2, 1, 1},
        {"io_uring", 2, 65536, 32, 3, 0, 0},
        {"psync", 3, 65536, 8, 3, 1, 0},
        {"io_uring", 3, 4096, 64, 2, 0, 1},
        {"io_uring", 3, 1 << 20, 8, 1, 0, 1},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        roundtrip(&cfgs[i], 1);
        if (have_direct) roundtrip(&cfgs[i], 0);
    }
    if (!have_direct) printf("test_swap: O_DIRECT round trips skipped: %s has no O_DIRECT\n", root);
}

/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    size_t pinned, npin, nunpin;
    int fail_at;
} pinctx;

static int pin_cb(void *ctx, void *ptr, size_t bytes)
{
    pinctx *p = ctx;
    if (p->fail_at && (int)p->npin + 1 == p->fail_at) return -12;
    p->npin++;
    p->pinned += bytes;
    return ((uintptr_t)ptr % 4096) ? -1 : 0;
}
static void unpin_cb(void *ctx, void *ptr)
{
    pinctx *p = ctx;
    (void)ptr;
    p->nunpin++;
}

static void test_pool(void)
{
    const char *engines[2] = {"psync", "io_uring"};
    for (int e = 0; e < 2; e++) {
        zinf_swap_opts o;
        base_opts(&o, engines[e], 1, !have_direct);
        pinctx pc = {0};
        o.buffer_count = 4;
        o.buffer_size = 64 << 10;
        o.pinned_limit = 256 << 10;
        o.pin = pin_cb;
        o.unpin = unpin_cb;
        o.pin_ctx = &pc;
        zinf_swap *sw;
        int rc = zinf_swap_open(&sw, &o);
        CHECK(rc == 0, "%s: pool open: %s", engines[e], zinf_errmsg());
        if (rc) continue;
        CHECK(pc.npin == 4 && pc.pinned == 256 << 10, "%s: pin called %zu times, %zu bytes",
              engines[e], pc.npin, pc.pinned);
        CHECK(zinf_swap_pinned_bytes(sw) == 256 << 10 && zinf_swap_pinned_bytes(sw) <= o.pinned_limit,
              "%s: pinned bytes %zu", engines[e], zinf_swap_pinned_bytes(sw));
        void *b[5];
        int distinct = 1, aligned = 1;
        for (int i = 0; i < 4; i++) {
            CHECK(zinf_swap_buf_get(sw, &b[i]) == 0, "%s: get %d: %s", engines[e], i, zinf_errmsg());
            aligned &= (uintptr_t)b[i] % 4096 == 0;
            for (int j = 0; j < i; j++)
                distinct &= (char *)b[i] >= (char *)b[j] + (64 << 10) ||
                            (char *)b[j] >= (char *)b[i] + (64 << 10);
            CHECK(zinf_swap_pinned_bytes(sw) <= o.pinned_limit, "bound exceeded");
        }
        CHECK(distinct && aligned, "%s: pool buffers overlap or are unaligned", engines[e]);
        CHECK(zinf_swap_bufs_free(sw) == 0, "free count");
        rc = zinf_swap_buf_get(sw, &b[4]);
        CHECK(rc == -EAGAIN && b[4] == NULL, "%s: fifth get rc %d", engines[e], rc);
        CHECK(has("swap pool: all 4 buffers of 65536 bytes are in use"), "msg: %s", zinf_errmsg());
        CHECK(zinf_swap_pinned_bytes(sw) == 256 << 10, "pinned bytes grew");
        CHECK(zinf_swap_buf_put(sw, b[2]) == 0, "put: %s", zinf_errmsg());
        CHECK(zinf_swap_buf_put(sw, b[2]) < 0 && has("was not taken (put twice?)"), "double put: %s",
              zinf_errmsg());
        CHECK(zinf_swap_buf_put(sw, (char *)b[1] + 8) < 0 && has("is not a buffer of this pool"),
              "foreign put: %s", zinf_errmsg());
        CHECK(zinf_swap_buf_get(sw, &b[4]) == 0 && b[4] == b[2], "get after put");
        /* a pool buffer as the source of a write spanning two buffers: not fixed, still right */
        zinf_swap_region r;
        CHECK(zinf_swap_reserve(sw, 128 << 10, &r) == 0, "reserve: %s", zinf_errmsg());
        fill(b[0], 64 << 10);
        unsigned char *want = malloc(64 << 10);
        memcpy(want, b[0], 64 << 10);
        CHECK(zinf_swap_write(sw, &r, 0, b[0], 64 << 10) == 0, "write: %s", zinf_errmsg());
        memset(b[3], 0, 64 << 10);
        CHECK(zinf_swap_read(sw, &r, 0, b[3], 64 << 10) == 0, "read: %s", zinf_errmsg());
        CHECK(memcmp(b[3], want, 64 << 10) == 0, "%s: pool round trip differs", engines[e]);
        free(want);
        zinf_swap_close(sw);
        CHECK(pc.nunpin == 4, "%s: unpin called %zu times", engines[e], pc.nunpin);
    }
    /* the bound: a pool larger than it is refused up front */
    zinf_swap_opts o;
    base_opts(&o, "psync", 1, 1);
    o.buffer_count = 8;
    o.buffer_size = 1 << 20;
    o.pinned_limit = 4 << 20;
    zinf_swap *sw = NULL;
    int rc = zinf_swap_open(&sw, &o);
    CHECK(rc < 0 && sw == NULL, "over-bound pool opened");
    CHECK(has("swap pool: 8 buffers of 1048576 bytes (8388608 bytes) exceed the pinned bound of "
              "4194304 bytes"),
          "msg: %s", zinf_errmsg());
    /* a failing pin callback: open fails, the buffers pinned so far are unpinned */
    pinctx pc = {.fail_at = 3};
    base_opts(&o, "psync", 1, 1);
    o.buffer_count = 4;
    o.buffer_size = 4096;
    o.pin = pin_cb;
    o.unpin = unpin_cb;
    o.pin_ctx = &pc;
    rc = zinf_swap_open(&sw, &o);
    CHECK(rc == -12 && has("pinning buffer 2 of 4 (4096 bytes) failed: the pin callback returned -12"),
          "pin failure rc %d: %s", rc, zinf_errmsg());
    CHECK(pc.npin == 2 && pc.nunpin == 2, "pinned %zu unpinned %zu", pc.npin, pc.nunpin);
    char f[700];
    snprintf(f, sizeof f, "%s/zinf-swap-t-r3.swp", dirs[0]);
    CHECK(access(f, F_OK) != 0, "file left after failed open");
}

/* ---------------------------------------------------------------------------------------------- */

static void test_regions(void)
{
    zinf_swap_opts o;
    base_opts(&o, "psync", 1, 1);
    o.capacity = 1 << 20;
    o.block_size = 1 << 20;
    zinf_swap *sw;
    if (zinf_swap_open(&sw, &o) != 0) {
        CHECK(0, "open: %s", zinf_errmsg());
        return;
    }
    zinf_swap_region a, b, c, d;
    CHECK(zinf_swap_reserve(sw, 5000, &a) == 0 && a.off == 0 && a.size == 8192, "a");
    CHECK(zinf_swap_reserve(sw, 4096, &b) == 0 && b.off == 8192 && b.size == 4096, "b");
    CHECK(zinf_swap_reserve(sw, 1, &c) == 0 && c.off == 12288 && c.size == 4096, "c");
    int rc = zinf_swap_reserve(sw, 1 << 20, &d);
    CHECK(rc == -ENOSPC && has("no free region of 1048576 bytes (capacity 1048576, 1032192 free in 1 "
                               "pieces)"),
          "full: %d %s", rc, zinf_errmsg());
    CHECK(zinf_swap_reserve(sw, 0, &d) < 0 && has("0 bytes must be > 0"), "zero: %s", zinf_errmsg());
    CHECK(zinf_swap_release(sw, &b) == 0, "release b");
    CHECK(zinf_swap_release(sw, &b) < 0 && has("is not reserved (released twice?)"), "twice: %s",
          zinf_errmsg());
    CHECK(zinf_swap_reserve(sw, 4000, &d) == 0 && d.off == 8192, "first fit reuses the hole");
    CHECK(zinf_swap_release(sw, &d) == 0 && zinf_swap_release(sw, &a) == 0 &&
              zinf_swap_release(sw, &c) == 0,
          "release all: %s", zinf_errmsg());
    CHECK(zinf_swap_reserve(sw, 1 << 20, &d) == 0 && d.off == 0, "coalesced: %s", zinf_errmsg());
    zinf_swap_req *q;
    char buf[16];
    rc = zinf_swap_submit(sw, ZINF_SWAP_READ, &d, (1 << 20) - 8, buf, 16, &q);
    CHECK(rc < 0 && has("16 bytes at offset 1048568 exceed the region of 1048576 bytes"),
          "beyond: %s", zinf_errmsg());
    rc = zinf_swap_submit(sw, ZINF_SWAP_READ, &d, 0, buf, 0, &q);
    CHECK(rc == 0 && zinf_swap_poll(sw, q) == 1 && zinf_swap_wait(sw, q) == 0, "empty request");
    zinf_swap_close(sw);
}

/* ---------------------------------------------------------------------------------------------- */

static void test_open_errors(void)
{
    zinf_swap_opts o;
    zinf_swap *sw;
    char p[800], file[700];
    const char *one[1] = {p};

    base_opts(&o, "psync", 1, 1);
    o.paths = one;
    snprintf(p, sizeof p, "%s/missing", root);
    int rc = zinf_swap_open(&sw, &o);
    char want[900];
    snprintf(want, sizeof want, "swap path %s: cannot use: No such file or directory", p);
    CHECK(rc == -ENOENT && strcmp(zinf_errmsg(), want) == 0, "missing: %d %s", rc, zinf_errmsg());

    /* unwritable: a path under a regular file (root ignores permissions) */
    snprintf(file, sizeof file, "%s/plainfile", root);
    close(open(file, O_CREAT | O_WRONLY, 0600));
    snprintf(p, sizeof p, "%s/sub", file);
    rc = zinf_swap_open(&sw, &o);
    snprintf(want, sizeof want, "swap path %s: cannot use: Not a directory", p);
    CHECK(rc == -ENOTDIR && strcmp(zinf_errmsg(), want) == 0, "under file: %d %s", rc, zinf_errmsg());
    snprintf(p, sizeof p, "%s", file);
    rc = zinf_swap_open(&sw, &o);
    snprintf(want, sizeof want, "swap path %s: cannot use: Not a directory", p);
    CHECK(rc == -ENOTDIR && strcmp(zinf_errmsg(), want) == 0, "file: %d %s", rc, zinf_errmsg());
    unlink(file);

    base_opts(&o, "posixaio", 1, 1);
    CHECK(zinf_swap_open(&sw, &o) < 0 && has("unknown engine \"posixaio\" (io_uring or psync)"),
          "engine: %s", zinf_errmsg());
    base_opts(&o, "psync", 1, 1);
    o.block_size = 1000;
    CHECK(zinf_swap_open(&sw, &o) < 0 && has("block_size 1000 must be a multiple of 4096"), "bs: %s",
          zinf_errmsg());

    /* too little space, injected: 2 directories on one file system need both files */
    base_opts(&o, "psync", 2, 1);
    o.capacity = 3 << 20;
    setenv("ZINF_SWAP_FAULT", "enospc", 1);
    rc = zinf_swap_open(&sw, &o);
    unsetenv("ZINF_SWAP_FAULT");
    snprintf(want, sizeof want, "too little space: need 4194304 bytes, %s has 0 free", dirs[0]);
    CHECK(rc == -ENOSPC && has(want), "enospc: %d %s", rc, zinf_errmsg());
    setenv("ZINF_SWAP_FAULT", "eio@0", 1);
    CHECK(zinf_swap_open(&sw, &o) < 0 && has("ZINF_SWAP_FAULT=eio@0: expected"), "bad fault: %s",
          zinf_errmsg());
    unsetenv("ZINF_SWAP_FAULT");

    /* what a swapper would take, measured without making anything: the file system, the bytes
     * free (injected: free@N) and each directory's file (3 MiB over 2 paths of 1 MiB blocks is
     * 2 files of 2 MiB) */
    base_opts(&o, "psync", 2, 1);
    o.capacity = 3 << 20;
    setenv("ZINF_SWAP_FAULT", "free@1228800", 1);
    zinf_swap_space sp[2];
    rc = zinf_swap_space_of(&o, sp);
    struct stat st0;
    stat(dirs[0], &st0);
    CHECK(rc == 0 && sp[0].dev == (uint64_t)st0.st_dev && sp[0].dev == sp[1].dev && sp[0].avail == 1228800 &&
              sp[0].need == 2 << 20 && sp[1].need == 2 << 20,
          "space_of: rc %d dev %llu/%llu avail %lld need %lld %lld", rc, (unsigned long long)sp[0].dev,
          (unsigned long long)sp[1].dev, (long long)sp[0].avail, (long long)sp[0].need, (long long)sp[1].need);
    rc = zinf_swap_open(&sw, &o);
    unsetenv("ZINF_SWAP_FAULT");
    snprintf(want, sizeof want, "too little space: need 4194304 bytes, %s has 1228800 free (ZINF_SWAP_FAULT=free@N)",
             dirs[0]);
    CHECK(rc == -ENOSPC && strcmp(zinf_errmsg(), want) == 0, "free@N: %d %s", rc, zinf_errmsg());

    /* a set-up that fails after its file was made leaves no file (unlinked early or not): the
     * preallocation is refused by RLIMIT_FSIZE (EFBIG, SIGXFSZ ignored) */
    for (int early = 0; early < 2; early++) {
        struct rlimit old, lim;
        getrlimit(RLIMIT_FSIZE, &old);
        lim = old;
        lim.rlim_cur = 64 << 10;
        void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
        base_opts(&o, "psync", 1, 1);
        o.unlink_early = early;
        o.capacity = 1 << 20;
        setrlimit(RLIMIT_FSIZE, &lim);
        rc = zinf_swap_open(&sw, &o);
        setrlimit(RLIMIT_FSIZE, &old);
        signal(SIGXFSZ, prev);
        snprintf(want, sizeof want, "swap file %s/zinf-swap-t-r3.swp: preallocating 1048576 bytes failed: File too large",
                 dirs[0]);
        CHECK(rc == -EFBIG && strcmp(zinf_errmsg(), want) == 0, "EFBIG (unlink_early %d): %d %s", early, rc,
              zinf_errmsg());
        char f[700];
        snprintf(f, sizeof f, "%s/zinf-swap-t-r3.swp", dirs[0]);
        CHECK(access(f, F_OK) != 0, "a failed open (unlink_early %d) left %s behind", early, f);
        unlink(f);
    }

    /* too little space, really: a 1 MiB tmpfs */
    snprintf(p, sizeof p, "%s/tiny", root);
    mkdir(p, 0700);
    if (mount("tmpfs", p, "tmpfs", 0, "size=1M") == 0) {
        base_opts(&o, "psync", 1, 1);
        o.paths = one;
        o.capacity = 4 << 20;
        rc = zinf_swap_open(&sw, &o);
        struct statvfs vf;
        statvfs(p, &vf);
        snprintf(want, sizeof want, "too little space: need 4194304 bytes, %s has %lld free", p,
                 (long long)vf.f_bavail * (long long)vf.f_frsize);
        CHECK(rc == -ENOSPC && strcmp(zinf_errmsg(), want) == 0, "tiny tmpfs: %d %s", rc,
              zinf_errmsg());
        o.capacity = 512 << 10;
        o.block_size = 4096;
        rc = zinf_swap_open(&sw, &o);
        CHECK(rc == 0, "tiny tmpfs, small capacity: %s", zinf_errmsg());
        if (rc == 0) zinf_swap_close(sw);
        umount(p);
    } else {
        printf("test_swap: 1 MiB tmpfs check skipped: mount failed: %s\n", strerror(errno));
    }
    rmdir(p);

    /* no O_DIRECT: injected (exact message), then a real tmpfs where it lacks O_DIRECT */
    base_opts(&o, "io_uring", 1, 0);
    setenv("ZINF_SWAP_FAULT", "nodirect", 1);
    rc = zinf_swap_open(&sw, &o);
    unsetenv("ZINF_SWAP_FAULT");
    snprintf(want, sizeof want,
             "swap file %s/zinf-swap-t-r3.swp: this file system does not support O_DIRECT (open: "
             "Invalid argument); choose the psync engine with buffered I/O, or a disk file system",
             dirs[0]);
    CHECK(rc == -EINVAL && strcmp(zinf_errmsg(), want) == 0, "nodirect: %d %s", rc, zinf_errmsg());
    snprintf(p, sizeof p, "%s/zinf-swap-t-r3.swp", dirs[0]);
    CHECK(access(p, F_OK) != 0, "file left after failed open");
    struct statfs sf;
    const char *shm = "/dev/shm";
    if (statfs(shm, &sf) == 0 && sf.f_type == 0x01021994 /* TMPFS_MAGIC */ && access(shm, W_OK) == 0) {
        if (probe_direct(shm)) {
            printf("test_swap: tmpfs no-O_DIRECT check skipped: %s accepts O_DIRECT on this kernel "
                   "(the injected check above covers the message)\n",
                   shm);
        } else {
            const char *s1[1] = {shm};
            base_opts(&o, "io_uring", 1, 0);
            o.paths = s1;
            rc = zinf_swap_open(&sw, &o);
            CHECK(rc == -EINVAL && has("/dev/shm/zinf-swap-t-r3.swp: this file system does not "
                                       "support O_DIRECT") && has("choose the psync engine"),
                  "tmpfs: %d %s", rc, zinf_errmsg());
            o.engine = "psync";
            o.buffered = 1;
            rc = zinf_swap_open(&sw, &o);
            CHECK(rc == 0, "tmpfs buffered psync: %s", zinf_errmsg());
            if (rc == 0) zinf_swap_close(sw);
        }
    } else {
        printf("test_swap: tmpfs no-O_DIRECT check skipped: no writable tmpfs at %s\n", shm);
    }
}

/* ---------------------------------------------------------------------------------------------- */

/* One 6-piece write and read (block 4096, region at 0 of one file) under a fault. */
static void test_faults(void)
{
    const char *engines[2] = {"psync", "io_uring"};
    for (int e = 0; e < 2; e++)
        for (int buffered = 0; buffered < 2; buffered++) {
            if (!buffered && !have_direct) continue;
            char what[64];
            snprintf(what, sizeof what, "%s %s", engines[e], buffered ? "buffered" : "O_DIRECT");
            char file[700];
            snprintf(file, sizeof file, "%s/zinf-swap-t-r3.swp", dirs[0]);
            zinf_swap_opts o;
            base_opts(&o, engines[e], 1, buffered);
            o.block_size = 4096;
            o.queue_depth = 4;
            size_t n = 6 * 4096 - 100;
            unsigned char *data = malloc(n), *back = malloc(n);
            fill(data, n);

            /* eio@3 on the write: piece 3 is file offset 8192 */
            setenv("ZINF_SWAP_FAULT", "eio@3", 1);
            zinf_swap *sw;
            int rc = zinf_swap_open(&sw, &o);
            unsetenv("ZINF_SWAP_FAULT");
            CHECK(rc == 0, "%s: open: %s", what, zinf_errmsg());
            if (rc) continue;
            zinf_swap_region r;
            zinf_swap_reserve(sw, (int64_t)n, &r);
            rc = zinf_swap_write(sw, &r, 0, data, n);
            char want[900];
            snprintf(want, sizeof want,
                     "swap write of %s at offset 8192 (4096 bytes) failed: Input/output error", file);
            CHECK(rc == -EIO && strcmp(zinf_errmsg(), want) == 0, "%s: eio write: %d %s", what, rc,
                  zinf_errmsg());
            /* later requests are unaffected: the fault hit one piece */
            CHECK(zinf_swap_write(sw, &r, 0, data, n) == 0, "%s: rewrite: %s", what, zinf_errmsg());
            CHECK(zinf_swap_read(sw, &r, 0, back, n) == 0 && memcmp(back, data, n) == 0,
                  "%s: data after eio", what);
            zinf_swap_close(sw);

            /* eio@2 on a read at region offset 5000: pieces [5000,8192), [8192,12288) ... */
            setenv("ZINF_SWAP_FAULT", "eio@2", 1);
            rc = zinf_swap_open(&sw, &o);
            unsetenv("ZINF_SWAP_FAULT");
            zinf_swap_reserve(sw, (int64_t)n, &r);
            rc = zinf_swap_read(sw, &r, 5000, back, 10000);
            snprintf(want, sizeof want,
                     "swap read of %s at offset 8192 (4096 bytes) failed: Input/output error", file);
            CHECK(rc == -EIO && strcmp(zinf_errmsg(), want) == 0, "%s: eio read: %d %s", what, rc,
                  zinf_errmsg());
            zinf_swap_close(sw);

            /* short@5: the 5th piece moves half its bytes; the rest is continued, data intact */
            setenv("ZINF_SWAP_FAULT", "short@5", 1);
            rc = zinf_swap_open(&sw, &o);
            unsetenv("ZINF_SWAP_FAULT");
            zinf_swap_reserve(sw, (int64_t)n, &r);
            CHECK(zinf_swap_write(sw, &r, 0, data, n) == 0, "%s: write: %s", what, zinf_errmsg());
            memset(back, 0, n);
            rc = zinf_swap_read(sw, &r, 0, back, n); /* pieces 7..12: the 5th is not here */
            CHECK(rc == 0 && memcmp(back, data, n) == 0, "%s: short write continued: %s", what,
                  zinf_errmsg());
            zinf_swap_close(sw);
            setenv("ZINF_SWAP_FAULT", "short@2", 1);
            rc = zinf_swap_open(&sw, &o);
            unsetenv("ZINF_SWAP_FAULT");
            zinf_swap_reserve(sw, (int64_t)n, &r);
            CHECK(zinf_swap_write(sw, &r, 0, data, n) == 0, "%s: write: %s", what, zinf_errmsg());
            zinf_swap_close(sw);
            setenv("ZINF_SWAP_FAULT", "short@10", 1);
            rc = zinf_swap_open(&sw, &o);
            unsetenv("ZINF_SWAP_FAULT");
            zinf_swap_reserve(sw, (int64_t)n, &r);
            CHECK(zinf_swap_write(sw, &r, 0, data, n) == 0, "%s: write: %s", what, zinf_errmsg());
            memset(back, 0, n);
            rc = zinf_swap_read(sw, &r, 0, back, n); /* pieces 7..12: the 4th of them is short */
            CHECK(rc == 0 && memcmp(back, data, n) == 0, "%s: short read continued: %s", what,
                  zinf_errmsg());
            zinf_swap_counts cc;
            zinf_swap_get_counts(sw, &cc);
            CHECK(cc.pieces == 12 && cc.continued == 1, "%s: %llu pieces, %llu continued", what,
                  (unsigned long long)cc.pieces, (unsigned long long)cc.continued);
            zinf_swap_close(sw);

            /* eof@8: the read's 2nd piece (file offset 4096) moves 2048 bytes, then nothing */
            setenv("ZINF_SWAP_FAULT", "eof@8", 1);
            rc = zinf_swap_open(&sw, &o);
            unsetenv("ZINF_SWAP_FAULT");
            zinf_swap_reserve(sw, (int64_t)n, &r);
            CHECK(zinf_swap_write(sw, &r, 0, data, n) == 0, "%s: write: %s", what, zinf_errmsg());
            rc = zinf_swap_read(sw, &r, 0, back, n);
            snprintf(want, sizeof want,
                     "short swap read of %s at offset 4096: 2048 of 4096 bytes done, then no "
                     "progress (end of file)",
                     file);
            CHECK(rc == ZINF_EIO && strcmp(zinf_errmsg(), want) == 0, "%s: eof: %d %s", what, rc,
                  zinf_errmsg());
            zinf_swap_close(sw);
            free(data);
            free(back);
        }
}

/* ---------------------------------------------------------------------------------------------- */

/* Several threads share one handle: each reserves its own region, takes a pool buffer, and runs
 * write/read round trips (some aligned from the pool, some odd from the heap), then releases. */
typedef struct {
    zinf_swap *sw;
    int id, bad;
} thr;

static void *thread_main(void *arg)
{
    thr *t = arg;
    uint64_t s = 0x1234567ull * (uint64_t)(t->id + 1);
    for (int it = 0; it < 20; it++) {
        zinf_swap_region r;
        size_t n = 4096 * (1 + (size_t)(it % 7)) + (size_t)(it * 37 % 4096);
        if (zinf_swap_reserve(t->sw, (int64_t)n, &r) != 0) {
            t->bad++;
            continue;
        }
        void *pb = NULL;
        int got = zinf_swap_buf_get(t->sw, &pb) == 0; /* may find none free: -EAGAIN, fine */
        unsigned char *src = got ? pb : malloc(n), *dst = malloc(n);
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            src[i] = (unsigned char)s;
        }
        if (zinf_swap_write(t->sw, &r, 0, src, n) != 0 || zinf_swap_read(t->sw, &r, 0, dst, n) != 0 ||
            memcmp(src, dst, n) != 0)
            t->bad++;
        if (got) zinf_swap_buf_put(t->sw, pb);
        else free(src);
        free(dst);
        if (zinf_swap_release(t->sw, &r) != 0) t->bad++;
    }
    return NULL;
}

static void test_threads(void)
{
    const char *engines[2] = {"psync", "io_uring"};
    for (int e = 0; e < 2; e++) {
        zinf_swap_opts o;
        base_opts(&o, engines[e], 2, !have_direct);
        o.block_size = 8192;
        o.queue_depth = 4;
        o.intra_op_parallelism = 2;
        o.buffer_count = 2;
        o.buffer_size = 64 << 10;
        zinf_swap *sw;
        if (zinf_swap_open(&sw, &o) != 0) {
            CHECK(0, "%s: open: %s", engines[e], zinf_errmsg());
            continue;
        }
        pthread_t th[4];
        thr t[4];
        for (int i = 0; i < 4; i++) {
            t[i] = (thr){sw, i, 0};
            pthread_create(&th[i], NULL, thread_main, &t[i]);
        }
        int bad = 0;
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            bad += t[i].bad;
        }
        CHECK(bad == 0, "%s: %d failed round trips from 4 threads", engines[e], bad);
        CHECK(zinf_swap_bufs_free(sw) == 2, "%s: pool buffers not all back", engines[e]);
        zinf_swap_region all;
        CHECK(zinf_swap_reserve(sw, zinf_swap_capacity(sw), &all) == 0 && all.off == 0,
              "%s: regions did not coalesce back to the whole space", engines[e]);
        zinf_swap_close(sw);
    }
}

/* ---------------------------------------------------------------------------------------------- */

static int pick_root(void)
{
    const char *cands[] = {getenv("ZINF_TEST_SWAP_DIR"), getenv("TMPDIR"), "/var/tmp", "/tmp", "."};
    char first_ok[512] = "";
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        if (!cands[i] || !*cands[i]) continue;
        char t[512];
        snprintf(t, sizeof t, "%s/zinf-swap-test-XXXXXX", cands[i]);
        if (!mkdtemp(t)) continue;
        if (probe_direct(t)) {
            if (first_ok[0]) rmdir(first_ok);
            snprintf(root, sizeof root, "%s", t);
            have_direct = 1;
            return 0;
        }
        if (!first_ok[0]) snprintf(first_ok, sizeof first_ok, "%s", t);
        else rmdir(t);
    }
    if (!first_ok[0]) return -1;
    snprintf(root, sizeof root, "%s", first_ok);
    return 0;
}

int main(void)
{
    if (pick_root() != 0) {
        printf("test_swap: skipped: no writable temp directory\n");
        return 77;
    }
    for (int i = 0; i < 3; i++) {
        snprintf(dirs[i], sizeof dirs[i], "%s/d%d", root, i);
        mkdir(dirs[i], 0700);
        dirp[i] = dirs[i];
    }
    printf("test_swap: temp dir %s (%s)\n", root, have_direct ? "O_DIRECT" : "no O_DIRECT");
    struct io_uring probe;
    int ur = io_uring_queue_init(1, &probe, 0);
    if (ur < 0) {
        have_uring = 0;
        printf("test_swap: io_uring is not usable here (%s): its cases run on the psync engine\n", strerror(-ur));
    } else {
        io_uring_queue_exit(&probe);
    }
    test_roundtrips();
    test_pool();
    test_regions();
    test_open_errors();
    test_faults();
    test_threads();
    for (int i = 0; i < 3; i++) rmdir(dirs[i]);
    CHECK(rmdir(root) == 0, "temp dir not empty at the end: %s", strerror(errno));
    return check_done("test_swap");
}
