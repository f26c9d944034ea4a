/* swap: striped O_DIRECT swap files, regions, asynchronous requests cut into block-sized pieces
 * that I/O threads run through an engine (io_uring or psync), and the pinned buffer pool.
 * The contract is at the top of swap.h; this file explains only how it is kept.
 *
 * Flow of a request: zinf_swap_submit cuts [offset, offset+len) of the region at stripe
 * boundaries into pieces (each inside one file), numbers them (for fault injection) and deals them
 * round-robin onto the queues of the I/O threads. A thread moves its queue to a private FIFO, starts
 * up to queue_depth pieces through the engine's queue/commit, reaps completions with reap, and
 * hands each result to piece_result: an error or a transfer without progress finishes the piece
 * with a message, a short transfer puts the rest back at the head of the FIFO, a full one finishes
 * the piece. When a request's last piece finishes, the request is done and waiters are woken.
 * Pieces that O_DIRECT cannot take as they are (offset, length or memory not 4096-aligned) are done
 * synchronously by the thread through its bounce buffer. */
#define _GNU_SOURCE
#include "swap.h"

#include "err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#define A ZINF_SWAP_ALIGN

enum { FAULT_NONE, FAULT_EIO, FAULT_SHORT, FAULT_EOF, FAULT_ENOSPC, FAULT_NODIRECT, FAULT_FREE };

typedef struct piece piece;
struct piece {
    piece *next;
    zinf_swap_req *req;
    int file;     /* index into sw->files */
    int write;
    int fixed;    /* pool buffer index for *_FIXED ops, or -1 */
    int fault;    /* FAULT_* aimed at this piece */
    int attempts; /* transfers started so far */
    int64_t foff; /* file offset of the piece's first byte */
    char *buf;
    size_t len, done;
};

struct zinf_swap_req {
    size_t left; /* pieces not finished (under sw->mu) */
    int done;
    int rc;
    char msg[512];
    size_t npieces;
    piece pieces[];
};

typedef struct {
    piece *head, *tail;
} fifo;

typedef struct worker worker;
typedef struct engine engine;

struct engine {
    const char *name;
    int (*setup)(worker *w);   /* on the opening thread; sets the message */
    void (*cleanup)(worker *w);
    void (*queue)(worker *w, piece *p); /* start the rest of p */
    void (*commit)(worker *w);          /* push what queue prepared to the kernel */
    int (*reap)(worker *w, piece **ps, long *res, int max); /* >= 1 completion, blocking */
};

struct worker {
    zinf_swap *sw;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    fifo q; /* pieces dealt to this thread (under mu) */
    int stop;
    char *bounce; /* block_size + 2*A bytes, A-aligned */
    struct io_uring ring;
    int ring_ok;
    piece **done_p; /* psync: completed, not yet reaped */
    long *done_res;
    int ndone;
};

typedef struct {
    int64_t off, size;
} extent;

typedef struct {
    char *path;
    char *dir;
    int fd;
    int linked;   /* the file has a name: made and not unlinked yet */
    int64_t eof;  /* a file that exists: its size (a read may pass it); a swap file: -1 */
} swapfile;

struct zinf_swap {
    zinf_swap_opts o;
    const engine *eng;
    int direct;
    int fault;
    long long fault_n;            /* the piece (eio, short, eof) or the bytes free (free) */
    int64_t capacity, file_bytes;
    swapfile *files;
    int nfiles;
    worker *workers;
    int nworkers;
    atomic_uint_fast64_t rr;      /* next worker to deal to */
    atomic_uint_fast64_t seq;     /* pieces numbered so far */
    atomic_uint_fast64_t nfixed, nbounced, ncontinued;
    pthread_mutex_t mu;           /* request completion */
    pthread_cond_t cv;
    pthread_mutex_t amu;          /* regions and pool */
    extent *free_ext;
    int nfree, capfree;
    char *slab;                   /* the pool */
    size_t *free_bufs, nfree_bufs;
    unsigned char *buf_out;
    size_t npinned;               /* buffers pinned through opts.pin */
    int mu_ok;
};

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static const char *opname(const piece *p) { return p->write ? "write" : "read"; }

/* ---------------------------------------------------------------- completion */

static void piece_finish(zinf_swap *sw, piece *p, int rc, const char *msg)
{
    zinf_swap_req *r = p->req;
    pthread_mutex_lock(&sw->mu);
    if (rc < 0 && r->rc == 0) {
        r->rc = rc;
        snprintf(r->msg, sizeof r->msg, "%s", msg);
    }
    if (--r->left == 0) {
        r->done = 1;
        pthread_cond_broadcast(&sw->cv);
    }
    pthread_mutex_unlock(&sw->mu);
}

static void fifo_push(fifo *f, piece *p)
{
    p->next = NULL;
    if (f->tail) f->tail->next = p;
    else f->head = p;
    f->tail = p;
}

static void fifo_push_front(fifo *f, piece *p)
{
    p->next = f->head;
    f->head = p;
    if (!f->tail) f->tail = p;
}

static piece *fifo_pop(fifo *f)
{
    piece *p = f->head;
    if (p) {
        f->head = p->next;
        if (!f->head) f->tail = NULL;
    }
    return p;
}

/* The result of one transfer of the rest of p: bytes moved or -errno. */
static void piece_result(worker *w, fifo *pend, piece *p, long res)
{
    zinf_swap *sw = w->sw;
    size_t rest = p->len - p->done;
    int attempt = p->attempts - 1;
    if (p->fault == FAULT_EIO && attempt == 0) res = -EIO;
    if ((p->fault == FAULT_SHORT || p->fault == FAULT_EOF) && res > 0) {
        if (attempt == 0) res = res > 1 ? res / 2 : res;
        else if (p->fault == FAULT_EOF) res = 0;
    }
    const char *path = sw->files[p->file].path;
    long long off = (long long)(p->foff + (int64_t)p->done);
    int64_t eof = sw->files[p->file].eof;
    char msg[512];
    if (res >= 0 && !p->write && eof >= 0 && off + res >= eof) {
        p->done = p->len; /* an aligned superset of a file's last bytes: the file's end is the end */
        piece_finish(sw, p, 0, NULL);
    } else if (res < 0) {
        snprintf(msg, sizeof msg, "swap %s of %s at offset %lld (%zu bytes) failed: %s", opname(p),
                 path, off, rest, strerror((int)-res));
        piece_finish(sw, p, (int)res, msg);
    } else if (res == 0) {
        snprintf(msg, sizeof msg,
                 "short swap %s of %s at offset %lld: %zu of %zu bytes done, then no progress "
                 "(end of file)",
                 opname(p), path, (long long)p->foff, p->done, p->len);
        piece_finish(sw, p, ZINF_EIO, msg);
    } else if ((size_t)res < rest) {
        p->done += (size_t)res; /* continue from where it stopped */
        atomic_fetch_add(&sw->ncontinued, 1);
        fifo_push_front(pend, p);
    } else {
        p->done = p->len;
        piece_finish(sw, p, 0, NULL);
    }
}

/* ---------------------------------------------------------------- synchronous transfers */

/* Full pread/pwrite of n bytes (continuing short transfers); bytes moved (< n only at end of
 * file) or -errno. */
static long full_io(int fd, int write, char *buf, size_t n, int64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = write ? pwrite(fd, buf + got, n - got, off + (int64_t)got)
                          : pread(fd, buf + got, n - got, off + (int64_t)got);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (k == 0) break;
        got += (size_t)k;
    }
    return (long)got;
}

static int needs_bounce(const zinf_swap *sw, const piece *p)
{
    if (!sw->direct) return 0;
    int64_t off = p->foff + (int64_t)p->done;
    size_t n = p->len - p->done;
    uintptr_t m = (uintptr_t)(p->buf + p->done);
    return off % A != 0 || n % A != 0 || m % A != 0;
}

/* The rest of p through the bounce buffer: the enclosing A-aligned span is read (whole for a
 * read; only its partial first and last blocks for a write), patched, written. */
static long bounce_io(worker *w, piece *p)
{
    int fd = w->sw->files[p->file].fd;
    int64_t off = p->foff + (int64_t)p->done;
    size_t n = p->len - p->done;
    char *m = p->buf + p->done;
    int64_t a0 = off / A * A, a1 = round_up(off + (int64_t)n, A);
    size_t span = (size_t)(a1 - a0), head = (size_t)(off - a0);
    long k;
    if (!p->write) {
        k = full_io(fd, 0, w->bounce, span, a0);
        if (k < 0) return k;
        if ((size_t)k <= head) return 0;
        size_t got = (size_t)k - head < n ? (size_t)k - head : n;
        memcpy(m, w->bounce + head, got);
        return (long)got;
    }
    if (head) {
        k = full_io(fd, 0, w->bounce, A, a0);
        if (k < 0) return k;
        if (k < A) memset(w->bounce + k, 0, (size_t)(A - k));
    }
    if ((off + (int64_t)n) % A && (span > A || !head)) {
        k = full_io(fd, 0, w->bounce + span - A, A, a1 - A);
        if (k < 0) return k;
        if (k < A) memset(w->bounce + span - A + k, 0, (size_t)(A - k));
    }
    memcpy(w->bounce + head, m, n);
    k = full_io(fd, 1, w->bounce, span, a0);
    if (k < 0) return k;
    if ((size_t)k <= head) return 0;
    return (long)((size_t)k - head < n ? (size_t)k - head : n);
}

/* ---------------------------------------------------------------- engine: psync */

static int psync_setup(worker *w)
{
    int qd = w->sw->o.queue_depth;
    w->done_p = malloc((size_t)qd * sizeof *w->done_p);
    w->done_res = malloc((size_t)qd * sizeof *w->done_res);
    if (!w->done_p || !w->done_res) return zinf_errc(ZINF_ENOMEM, "swap: out of memory");
    return 0;
}

static void psync_cleanup(worker *w)
{
    free(w->done_p);
    free(w->done_res);
}

/* One pread/pwrite; a short count goes back through piece_result like io_uring's. */
static void psync_queue(worker *w, piece *p)
{
    int fd = w->sw->files[p->file].fd;
    ssize_t k;
    do {
        k = p->write ? pwrite(fd, p->buf + p->done, p->len - p->done, p->foff + (int64_t)p->done)
                     : pread(fd, p->buf + p->done, p->len - p->done, p->foff + (int64_t)p->done);
    } while (k < 0 && errno == EINTR);
    w->done_p[w->ndone] = p;
    w->done_res[w->ndone++] = k < 0 ? -errno : (long)k;
}

static void psync_commit(worker *w) { (void)w; }

static int psync_reap(worker *w, piece **ps, long *res, int max)
{
    int n = w->ndone < max ? w->ndone : max;
    memcpy(ps, w->done_p, (size_t)n * sizeof *ps);
    memcpy(res, w->done_res, (size_t)n * sizeof *res);
    memmove(w->done_p, w->done_p + n, (size_t)(w->ndone - n) * sizeof *ps);
    memmove(w->done_res, w->done_res + n, (size_t)(w->ndone - n) * sizeof *res);
    w->ndone -= n;
    return n;
}

/* ---------------------------------------------------------------- engine: io_uring */

static int uring_setup(worker *w)
{
    zinf_swap *sw = w->sw;
    int rc = io_uring_queue_init((unsigned)sw->o.queue_depth, &w->ring, 0);
    if (rc < 0)
        return zinf_errc(rc,
                         "swap: io_uring_queue_init (depth %d) failed: %s; io_uring may be "
                         "disabled here (kernel.io_uring_disabled, seccomp): choose the psync engine",
                         sw->o.queue_depth, strerror(-rc));
    w->ring_ok = 1;
    size_t nb = sw->o.buffer_count;
    if (nb) {
        struct iovec *iov = malloc(nb * sizeof *iov);
        if (!iov) return zinf_errc(ZINF_ENOMEM, "swap: out of memory");
        for (size_t i = 0; i < nb; i++) {
            iov[i].iov_base = sw->slab + i * sw->o.buffer_size;
            iov[i].iov_len = sw->o.buffer_size;
        }
        rc = io_uring_register_buffers(&w->ring, iov, (unsigned)nb);
        free(iov);
        if (rc < 0)
            return zinf_errc(rc,
                             "swap: io_uring_register_buffers (%zu buffers of %zu bytes) failed: "
                             "%s: io_uring locks them in memory and the locked-memory limit is "
                             "lower (raise `ulimit -l`, RLIMIT_MEMLOCK), or choose the psync engine",
                             nb, sw->o.buffer_size, strerror(-rc));
    }
    return 0;
}

static void uring_cleanup(worker *w)
{
    if (w->ring_ok) io_uring_queue_exit(&w->ring);
    w->ring_ok = 0;
}

static void uring_commit(worker *w)
{
    for (;;) {
        int rc = io_uring_submit(&w->ring);
        /* the prepared entries are already in the shared ring; a failed enter is retried */
        if (rc >= 0 || (rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)) return;
    }
}

static void uring_queue(worker *w, piece *p)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
    while (!sqe) { /* cannot happen with <= queue_depth in flight; be safe */
        uring_commit(w);
        sqe = io_uring_get_sqe(&w->ring);
    }
    int fd = w->sw->files[p->file].fd;
    char *m = p->buf + p->done;
    unsigned n = (unsigned)(p->len - p->done);
    uint64_t off = (uint64_t)(p->foff + (int64_t)p->done);
    if (p->fixed >= 0) {
        if (p->write) io_uring_prep_write_fixed(sqe, fd, m, n, off, p->fixed);
        else io_uring_prep_read_fixed(sqe, fd, m, n, off, p->fixed);
    } else {
        if (p->write) io_uring_prep_write(sqe, fd, m, n, off);
        else io_uring_prep_read(sqe, fd, m, n, off);
    }
    io_uring_sqe_set_data(sqe, p);
    if (p->fixed >= 0) atomic_fetch_add(&w->sw->nfixed, 1);
}

static int uring_reap(worker *w, piece **ps, long *res, int max)
{
    struct io_uring_cqe *cqe;
    int rc;
    do rc = io_uring_wait_cqe(&w->ring, &cqe);
    while (rc == -EINTR || rc == -EAGAIN);
    if (rc < 0) return rc;
    int n = 0;
    while (n < max && io_uring_peek_cqe(&w->ring, &cqe) == 0) {
        ps[n] = io_uring_cqe_get_data(cqe);
        res[n++] = cqe->res;
        io_uring_cqe_seen(&w->ring, cqe);
    }
    return n;
}

static const engine engines[] = {
    {"io_uring", uring_setup, uring_cleanup, uring_queue, uring_commit, uring_reap},
    {"psync", psync_setup, psync_cleanup, psync_queue, psync_commit, psync_reap},
};

/* ---------------------------------------------------------------- the I/O threads */

static void *worker_main(void *arg)
{
    worker *w = arg;
    zinf_swap *sw = w->sw;
    const engine *e = sw->eng;
    int qd = sw->o.queue_depth, inflight = 0;
    fifo pend = {0};
    piece **ps = malloc((size_t)qd * sizeof *ps);
    long *res = malloc((size_t)qd * sizeof *res);
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->q.head && !pend.head && inflight == 0 && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->q.head && !pend.head && inflight == 0) { /* stop, nothing left */
            pthread_mutex_unlock(&w->mu);
            break;
        }
        if (w->q.head) {
            if (pend.tail) pend.tail->next = w->q.head;
            else pend.head = w->q.head;
            pend.tail = w->q.tail;
            w->q.head = w->q.tail = NULL;
        }
        pthread_mutex_unlock(&w->mu);

        int queued = 0;
        piece *p;
        while (inflight < qd && (p = fifo_pop(&pend))) {
            p->attempts++;
            if (needs_bounce(sw, p)) {
                atomic_fetch_add(&sw->nbounced, 1);
                piece_result(w, &pend, p, bounce_io(w, p));
                continue;
            }
            e->queue(w, p);
            inflight++;
            queued++;
            if (sw->o.single_submit) e->commit(w);
        }
        if (queued && !sw->o.single_submit) e->commit(w);
        /* overlap_events: refill after the first completion; else drain the whole batch */
        int want = sw->o.overlap_events ? (inflight > 0) : inflight;
        while (want > 0) {
            int n = e->reap(w, ps, res, qd);
            if (n < 0) continue; /* io_uring_wait_cqe failed: nothing reaped; try again */
            for (int i = 0; i < n; i++) {
                inflight--;
                want--;
                piece_result(w, &pend, ps[i], res[i]);
            }
        }
    }
    free(ps);
    free(res);
    return NULL;
}

/* ---------------------------------------------------------------- open / close */

void zinf_swap_opts_defaults(zinf_swap_opts *o)
{
    memset(o, 0, sizeof *o);
    o->engine = "io_uring";
    o->tag = "swap";
    o->block_size = 1u << 20;
    o->queue_depth = 8;
    o->intra_op_parallelism = 1;
    o->overlap_events = 1;
}

static int parse_fault(int *kind, long long *n)
{
    *kind = FAULT_NONE;
    *n = 0;
    const char *f = getenv("ZINF_SWAP_FAULT");
    if (!f || !*f) return 0;
    static const struct {
        const char *name;
        int kind, counted;
    } kinds[] = {{"eio", FAULT_EIO, 1},       {"short", FAULT_SHORT, 1},
                 {"eof", FAULT_EOF, 1},       {"enospc", FAULT_ENOSPC, 0},
                 {"nodirect", FAULT_NODIRECT, 0}, {"free", FAULT_FREE, 1}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t len = strlen(kinds[i].name);
        if (strncmp(f, kinds[i].name, len) != 0) continue;
        if (!kinds[i].counted && f[len] == 0) {
            *kind = kinds[i].kind;
            return 0;
        }
        char *end;
        if (kinds[i].counted && f[len] == '@') {
            errno = 0;
            long long v = strtoll(f + len + 1, &end, 10);
            if (*end == 0 && !errno && v >= (kinds[i].kind == FAULT_FREE ? 0 : 1) &&
                (kinds[i].kind == FAULT_FREE || v <= INT_MAX)) {
                *kind = kinds[i].kind;
                *n = v;
                return 0;
            }
        }
    }
    return zinf_err("ZINF_SWAP_FAULT=%s: expected eio@N, short@N, eof@N (N >= 1), enospc, "
                    "nodirect or free@BYTES",
                    f);
}

int zinf_swap_space_of(const zinf_swap_opts *o, zinf_swap_space *out)
{
    int fault;
    long long fault_n;
    ZINF_TRY(parse_fault(&fault, &fault_n));
    if (!o->paths || o->npaths < 1) return zinf_err("swap: no swap path given");
    int64_t bs = o->block_size ? (int64_t)o->block_size : 1 << 20, unit = bs * o->npaths;
    int64_t file_bytes = round_up(o->capacity, unit) / o->npaths;
    for (int i = 0; i < o->npaths; i++) {
        const char *d = o->paths[i];
        struct stat st;
        if (stat(d, &st) != 0) return zinf_errc(-errno, "swap path %s: cannot use: %s", d, strerror(errno));
        if (!S_ISDIR(st.st_mode)) return zinf_errc(-ENOTDIR, "swap path %s: cannot use: %s", d, strerror(ENOTDIR));
        struct statvfs vf;
        if (statvfs(d, &vf) != 0) return zinf_errc(-errno, "swap path %s: statvfs failed: %s", d, strerror(errno));
        out[i].dev = (uint64_t)st.st_dev;
        out[i].avail = fault == FAULT_ENOSPC ? 0
                       : fault == FAULT_FREE ? (int64_t)fault_n
                                             : (int64_t)vf.f_bavail * (int64_t)vf.f_frsize;
        out[i].need = file_bytes;
    }
    return 0;
}

static int check_space(zinf_swap *sw)
{
    int n = sw->o.npaths;
    zinf_swap_space *sp = calloc((size_t)n, sizeof *sp);
    if (!sp) return zinf_errc(ZINF_ENOMEM, "swap: out of memory");
    int rc = zinf_swap_space_of(&sw->o, sp);
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t need = 0, first = -1;
        for (int j = 0; j < n; j++)
            if (sp[j].dev == sp[i].dev) {
                if (first < 0) first = j;
                need += sp[j].need;
            }
        if (first != i) continue; /* that file system was checked with its first directory */
        if (sp[i].avail < need)
            rc = zinf_errc(-ENOSPC, "too little space: need %lld bytes, %s has %lld free%s",
                           (long long)need, sw->o.paths[i], (long long)sp[i].avail,
                           sw->fault == FAULT_ENOSPC ? " (ZINF_SWAP_FAULT=enospc)"
                           : sw->fault == FAULT_FREE ? " (ZINF_SWAP_FAULT=free@N)" : "");
    }
    free(sp);
    return rc;
}

static int create_file(zinf_swap *sw, int i)
{
    swapfile *f = &sw->files[i];
    const char *d = sw->o.paths[i];
    size_t n = strlen(d) + strlen(sw->o.tag) + 64;
    f->path = malloc(n);
    f->dir = strdup(d);
    if (!f->path || !f->dir) return zinf_errc(ZINF_ENOMEM, "swap: out of memory");
    snprintf(f->path, n, "%s/zinf-swap-%s-r%d.swp", d, sw->o.tag, sw->o.rank);
    int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | (sw->direct ? O_DIRECT : 0);
    if (sw->direct && sw->fault == FAULT_NODIRECT) {
        errno = EINVAL;
        f->fd = -1;
    } else {
        f->fd = open(f->path, flags, 0600);
    }
    if (f->fd < 0) {
        int e = errno;
        if (sw->direct && e == EINVAL) {
            unlink(f->path); /* O_CREAT may have made it before O_DIRECT was refused */
            return zinf_errc(-EINVAL,
                             "swap file %s: this file system does not support O_DIRECT (open: %s); "
                             "choose the psync engine with buffered I/O, or a disk file system",
                             f->path, strerror(e));
        }
        return zinf_errc(-e, "swap file %s: cannot create: %s", f->path, strerror(e));
    }
    f->linked = 1; /* from here on a failure unlinks it (zinf_swap_close) */
    int rc = fallocate(f->fd, 0, 0, sw->file_bytes);
    if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) rc = ftruncate(f->fd, sw->file_bytes);
    if (rc != 0) {
        int e = errno;
        if (e == ENOSPC) {
            struct statvfs vf;
            long long avail = statvfs(d, &vf) == 0 ? (long long)vf.f_bavail * (long long)vf.f_frsize
                                                   : -1;
            return zinf_errc(-e, "too little space: need %lld bytes, %s has %lld free (fallocate "
                                 "of %s: %s)",
                             (long long)sw->file_bytes, d, avail, f->path, strerror(e));
        }
        return zinf_errc(-e, "swap file %s: preallocating %lld bytes failed: %s", f->path,
                         (long long)sw->file_bytes, strerror(e));
    }
    if (sw->o.unlink_early) {
        if (unlink(f->path) != 0) {
            int e = errno;
            return zinf_errc(-e, "swap file %s: cannot unlink: %s", f->path, strerror(e));
        }
        f->linked = 0;
    }
    return 0;
}

static int setup_pool(zinf_swap *sw)
{
    size_t nb = sw->o.buffer_count, bs = sw->o.buffer_size;
    if (!nb) return 0;
    sw->slab = aligned_alloc(A, nb * bs);
    sw->free_bufs = malloc(nb * sizeof *sw->free_bufs);
    sw->buf_out = calloc(nb, 1);
    if (!sw->slab || !sw->free_bufs || !sw->buf_out)
        return zinf_errc(ZINF_ENOMEM, "swap pool: cannot allocate %zu buffers of %zu bytes", nb, bs);
    for (size_t i = 0; i < nb; i++) sw->free_bufs[i] = nb - 1 - i; /* get hands out 0 first */
    sw->nfree_bufs = nb;
    if (sw->o.pin) {
        for (size_t i = 0; i < nb; i++) {
            int rc = sw->o.pin(sw->o.pin_ctx, sw->slab + i * bs, bs);
            if (rc != 0)
                return zinf_errc(rc < 0 ? rc : ZINF_EINVAL,
                                 "swap pool: pinning buffer %zu of %zu (%zu bytes) failed: the pin "
                                 "callback returned %d",
                                 i, nb, bs, rc);
            sw->npinned++;
        }
    }
    return 0;
}

void zinf_swap_close(zinf_swap *sw)
{
    if (!sw) return;
    for (int i = 0; i < sw->nworkers; i++) {
        worker *w = &sw->workers[i];
        if (w->started) {
            pthread_mutex_lock(&w->mu);
            w->stop = 1;
            pthread_cond_signal(&w->cv);
            pthread_mutex_unlock(&w->mu);
            pthread_join(w->th, NULL);
        }
        if (sw->eng) sw->eng->cleanup(w);
        free(w->bounce);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    free(sw->workers);
    for (size_t i = 0; i < sw->npinned; i++)
        sw->o.unpin(sw->o.pin_ctx, sw->slab + i * sw->o.buffer_size);
    free(sw->slab);
    free(sw->free_bufs);
    free(sw->buf_out);
    for (int i = 0; i < sw->nfiles; i++) {
        swapfile *f = &sw->files[i];
        if (f->fd >= 0) close(f->fd);
        /* a failed open, too, leaves no file: one that was made keeps no name */
        if (f->linked) unlink(f->path);
        free(f->path);
        free(f->dir);
    }
    free(sw->files);
    free(sw->free_ext);
    if (sw->mu_ok) {
        pthread_mutex_destroy(&sw->mu);
        pthread_cond_destroy(&sw->cv);
        pthread_mutex_destroy(&sw->amu);
    }
    free(sw);
}

/* files: the files exist (zinf_swap_open_files), no paths or capacity to check */
static int check_opts(const zinf_swap_opts *o, int files)
{
    if (!files && (!o->paths || o->npaths < 1)) return zinf_err("swap: no swap path given");
    for (int i = 0; !files && i < o->npaths; i++)
        if (!o->paths[i] || !*o->paths[i]) return zinf_err("swap: swap path %d is empty", i);
    if (!files && o->capacity <= 0) return zinf_err("swap: capacity %lld must be > 0", (long long)o->capacity);
    if (o->block_size % A != 0 || o->block_size > (1u << 30))
        return zinf_err("swap: block_size %zu must be a multiple of %d, at most 1 GiB", o->block_size,
                        A);
    if (o->queue_depth < 1 || o->queue_depth > 4096)
        return zinf_err("swap: queue_depth %d must be in [1, 4096]", o->queue_depth);
    if (o->intra_op_parallelism < 1 || o->intra_op_parallelism > 256)
        return zinf_err("swap: intra_op_parallelism %d must be in [1, 256]",
                        o->intra_op_parallelism);
    if (o->buffer_count && (o->buffer_size == 0 || o->buffer_size % A != 0))
        return zinf_err("swap pool: buffer_size %zu must be a positive multiple of %d",
                        o->buffer_size, A);
    if (o->buffer_count > (1u << 16))
        return zinf_err("swap pool: buffer_count %zu is above 65536", o->buffer_count);
    if (o->buffer_count && o->buffer_size > SIZE_MAX / o->buffer_count)
        return zinf_err("swap pool: %zu x %zu bytes overflows", o->buffer_count, o->buffer_size);
    if (o->pinned_limit && o->buffer_count * o->buffer_size > o->pinned_limit)
        return zinf_err("swap pool: %zu buffers of %zu bytes (%zu bytes) exceed the pinned bound of "
                        "%zu bytes",
                        o->buffer_count, o->buffer_size, o->buffer_count * o->buffer_size,
                        o->pinned_limit);
    if (!o->pin != !o->unpin) return zinf_err("swap pool: pin and unpin must be given together");
    return 0;
}

/* The handle both opens share: options with their defaults, checked; the engine; the fault. */
static int swap_new(zinf_swap **out, const zinf_swap_opts *opts, int files)
{
    *out = NULL;
    zinf_swap_opts o = *opts;
    if (!o.engine) o.engine = "io_uring";
    if (!o.tag) o.tag = "swap";
    if (!o.block_size) o.block_size = 1u << 20;
    if (!o.queue_depth) o.queue_depth = 8;
    if (!o.intra_op_parallelism) o.intra_op_parallelism = 1;
    o.single_submit = !!o.single_submit;
    o.overlap_events = !!o.overlap_events;
    ZINF_TRY(check_opts(&o, files));
    const engine *eng = NULL;
    for (size_t i = 0; i < sizeof engines / sizeof engines[0]; i++)
        if (strcmp(o.engine, engines[i].name) == 0) eng = &engines[i];
    if (!eng) return zinf_err("swap: unknown engine \"%s\" (io_uring or psync)", o.engine);

    zinf_swap *sw = calloc(1, sizeof *sw);
    if (!sw) return zinf_errc(ZINF_ENOMEM, "swap: out of memory");
    sw->o = o;
    sw->direct = !o.buffered;
    pthread_mutex_init(&sw->mu, NULL);
    pthread_cond_init(&sw->cv, NULL);
    pthread_mutex_init(&sw->amu, NULL);
    sw->mu_ok = 1;
    *out = sw;
    int rc = parse_fault(&sw->fault, &sw->fault_n);
    if (rc < 0) return rc;
    sw->eng = eng;
    return 0;
}

/* The pool, the I/O threads and their engines, once the files are open. */
static int swap_start(zinf_swap *sw)
{
    const engine *eng = sw->eng;
    const zinf_swap_opts o = sw->o;
    int rc = setup_pool(sw);
    if (rc < 0) return rc;
    sw->workers = calloc((size_t)o.intra_op_parallelism, sizeof *sw->workers);
    if (!sw->workers) return zinf_errc(ZINF_ENOMEM, "swap: out of memory");
    for (int i = 0; i < o.intra_op_parallelism; i++) {
        worker *w = &sw->workers[i];
        w->sw = sw;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        sw->nworkers = i + 1;
        w->bounce = aligned_alloc(A, o.block_size + 2 * A);
        if (!w->bounce) return zinf_errc(ZINF_ENOMEM, "swap: out of memory");
        if ((rc = eng->setup(w)) < 0) return rc;
    }
    for (int i = 0; i < sw->nworkers; i++) {
        worker *w = &sw->workers[i];
        int e = pthread_create(&w->th, NULL, worker_main, w);
        if (e != 0) return zinf_errc(-e, "swap: cannot start I/O thread %d: %s", i, strerror(e));
        w->started = 1;
    }
    return 0;
}

int zinf_swap_open(zinf_swap **out, const zinf_swap_opts *opts)
{
    zinf_swap *sw;
    int rc = swap_new(&sw, opts, 0);
    if (rc < 0) goto fail;
    zinf_swap_opts o = sw->o;

    int64_t unit = (int64_t)o.block_size * o.npaths;
    sw->capacity = round_up(o.capacity, unit);
    sw->file_bytes = sw->capacity / o.npaths;
    if ((rc = check_space(sw)) < 0) goto fail;

    sw->files = calloc((size_t)o.npaths, sizeof *sw->files);
    sw->free_ext = malloc(16 * sizeof *sw->free_ext);
    if (!sw->files || !sw->free_ext) {
        rc = zinf_errc(ZINF_ENOMEM, "swap: out of memory");
        goto fail;
    }
    sw->capfree = 16;
    sw->free_ext[0] = (extent){0, sw->capacity};
    sw->nfree = 1;
    for (int i = 0; i < o.npaths; i++) {
        sw->files[i].fd = -1;
        sw->files[i].eof = -1;
        sw->nfiles = i + 1;
        if ((rc = create_file(sw, i)) < 0) goto fail;
    }
    if ((rc = swap_start(sw)) < 0) goto fail;
    *out = sw;
    return 0;
fail:
    zinf_swap_close(sw);
    return rc;
}

int zinf_swap_open_files(zinf_swap **out, const zinf_swap_opts *opts, const char *const *files, int nfiles)
{
    *out = NULL;
    zinf_swap *sw;
    int rc = swap_new(&sw, opts, 1);
    if (rc == 0 && nfiles < 1) rc = zinf_err("swap: no file to read");
    if (rc == 0 && !(sw->files = calloc((size_t)nfiles, sizeof *sw->files)))
        rc = zinf_errc(ZINF_ENOMEM, "swap: out of memory");
    for (int i = 0; rc == 0 && i < nfiles; i++) {
        swapfile *f = &sw->files[i];
        f->fd = -1;
        sw->nfiles = i + 1;
        if (!(f->path = strdup(files[i]))) {
            rc = zinf_errc(ZINF_ENOMEM, "swap: out of memory");
            break;
        }
        if (sw->direct && sw->fault == FAULT_NODIRECT) errno = EINVAL;
        else f->fd = open(f->path, O_RDONLY | O_CLOEXEC | (sw->direct ? O_DIRECT : 0));
        struct stat st;
        if (f->fd < 0 && sw->direct && errno == EINVAL)
            rc = zinf_errc(-EINVAL, "%s: this file system does not support O_DIRECT (open: %s%s)", f->path,
                           strerror(EINVAL), sw->fault == FAULT_NODIRECT ? ", ZINF_SWAP_FAULT=nodirect" : "");
        else if (f->fd < 0 || fstat(f->fd, &st) != 0) rc = zinf_errc(-errno, "%s: %s", f->path, strerror(errno));
        else f->eof = (int64_t)st.st_size;
    }
    if (rc == 0) rc = swap_start(sw);
    if (rc < 0) {
        zinf_swap_close(sw);
        return rc;
    }
    *out = sw;
    return 0;
}

int zinf_swap_direct(const zinf_swap *sw) { return sw->direct; }

int64_t zinf_swap_capacity(const zinf_swap *sw) { return sw->capacity; }

const char *zinf_swap_file(const zinf_swap *sw, int i)
{
    return i >= 0 && i < sw->nfiles ? sw->files[i].path : NULL;
}

/* ---------------------------------------------------------------- regions */

int zinf_swap_reserve(zinf_swap *sw, int64_t bytes, zinf_swap_region *out)
{
    if (bytes <= 0) return zinf_err("swap reserve: %lld bytes must be > 0", (long long)bytes);
    int64_t need = round_up(bytes, A);
    pthread_mutex_lock(&sw->amu);
    int64_t total = 0;
    for (int i = 0; i < sw->nfree; i++) {
        extent *e = &sw->free_ext[i];
        if (e->size >= need) {
            *out = (zinf_swap_region){e->off, need};
            e->off += need;
            e->size -= need;
            if (e->size == 0) {
                memmove(e, e + 1, (size_t)(sw->nfree - i - 1) * sizeof *e);
                sw->nfree--;
            }
            pthread_mutex_unlock(&sw->amu);
            return 0;
        }
        total += e->size;
    }
    int nfree = sw->nfree;
    pthread_mutex_unlock(&sw->amu);
    return zinf_errc(-ENOSPC,
                     "swap reserve: no free region of %lld bytes (capacity %lld, %lld free in %d "
                     "pieces)",
                     (long long)need, (long long)sw->capacity, (long long)total, nfree);
}

int zinf_swap_release(zinf_swap *sw, const zinf_swap_region *r)
{
    int64_t a = r->off, b = r->off + r->size;
    if (a < 0 || r->size <= 0 || a % A || r->size % A || b > sw->capacity)
        return zinf_err("swap release: [%lld, %lld) is not a region of this swap space",
                        (long long)a, (long long)b);
    pthread_mutex_lock(&sw->amu);
    int i = 0;
    while (i < sw->nfree && sw->free_ext[i].off < a) i++;
    extent *prev = i > 0 ? &sw->free_ext[i - 1] : NULL, *next = i < sw->nfree ? &sw->free_ext[i] : NULL;
    if ((prev && prev->off + prev->size > a) || (next && next->off < b)) {
        pthread_mutex_unlock(&sw->amu);
        return zinf_err("swap release: [%lld, %lld) is not reserved (released twice?)",
                        (long long)a, (long long)b);
    }
    int joins_prev = prev && prev->off + prev->size == a, joins_next = next && next->off == b;
    if (joins_prev && joins_next) {
        prev->size += r->size + next->size;
        memmove(next, next + 1, (size_t)(sw->nfree - i - 1) * sizeof *next);
        sw->nfree--;
    } else if (joins_prev) {
        prev->size += r->size;
    } else if (joins_next) {
        next->off = a;
        next->size += r->size;
    } else {
        if (sw->nfree == sw->capfree) {
            extent *ne = realloc(sw->free_ext, (size_t)sw->capfree * 2 * sizeof *ne);
            if (!ne) {
                pthread_mutex_unlock(&sw->amu);
                return zinf_errc(ZINF_ENOMEM, "swap: out of memory");
            }
            sw->free_ext = ne;
            sw->capfree *= 2;
        }
        memmove(&sw->free_ext[i + 1], &sw->free_ext[i], (size_t)(sw->nfree - i) * sizeof(extent));
        sw->free_ext[i] = (extent){a, r->size};
        sw->nfree++;
    }
    pthread_mutex_unlock(&sw->amu);
    return 0;
}

/* ---------------------------------------------------------------- requests */

/* Pool buffer index holding [m, m+n) entirely, or -1. */
static int fixed_index(const zinf_swap *sw, const char *m, size_t n)
{
    if (!sw->slab || sw->eng != &engines[0]) return -1;
    size_t bs = sw->o.buffer_size, total = bs * sw->o.buffer_count;
    if (m < sw->slab || m >= sw->slab + total) return -1;
    size_t rel = (size_t)(m - sw->slab), idx = rel / bs;
    return rel + n <= (idx + 1) * bs ? (int)idx : -1;
}

static int submit_pieces(zinf_swap *sw, int op, int file, int64_t a, void *buf, size_t len, zinf_swap_req **out);

int zinf_swap_submit(zinf_swap *sw, int op, const zinf_swap_region *r, int64_t offset, void *buf,
                     size_t len, zinf_swap_req **out)
{
    *out = NULL;
    if (op != ZINF_SWAP_READ && op != ZINF_SWAP_WRITE)
        return zinf_err("swap submit: op %d is neither read nor write", op);
    if (r->off < 0 || r->size < 0 || r->off + r->size > sw->capacity)
        return zinf_err("swap submit: region [%lld, +%lld) lies outside the swap space of %lld "
                        "bytes",
                        (long long)r->off, (long long)r->size, (long long)sw->capacity);
    if (offset < 0 || (int64_t)len > r->size || offset > r->size - (int64_t)len)
        return zinf_err("swap submit: %zu bytes at offset %lld exceed the region of %lld bytes",
                        len, (long long)offset, (long long)r->size);
    if (len && !buf) return zinf_err("swap submit: no buffer for %zu bytes", len);
    return submit_pieces(sw, op, -1, r->off + offset, buf, len, out);
}

int zinf_swap_submit_file(zinf_swap *sw, int i, int64_t foff, void *buf, size_t len, zinf_swap_req **out)
{
    *out = NULL;
    if (i < 0 || i >= sw->nfiles || sw->files[i].eof < 0)
        return zinf_err("swap submit: %d is not a file of zinf_swap_open_files", i);
    if (foff < 0 || (len && !buf)) return zinf_err("swap submit: offset %lld, %zu bytes", (long long)foff, len);
    return submit_pieces(sw, ZINF_SWAP_READ, i, foff, buf, len, out);
}

/* [a, a + len) cut at block_size boundaries into pieces dealt to the I/O threads: of the striped
 * swap space (file < 0: logical bytes) or of one file (its offsets) */
static int submit_pieces(zinf_swap *sw, int op, int file, int64_t a, void *buf, size_t len, zinf_swap_req **out)
{
    int64_t bs = (int64_t)sw->o.block_size, np = sw->o.npaths;
    int64_t end = a + (int64_t)len;
    size_t npieces = len ? (size_t)((end - 1) / bs - a / bs + 1) : 0;
    zinf_swap_req *q = calloc(1, sizeof *q + npieces * sizeof(piece));
    if (!q) return zinf_errc(ZINF_ENOMEM, "swap submit: out of memory for %zu pieces", npieces);
    q->npieces = q->left = npieces;
    if (npieces == 0) {
        q->done = 1;
        *out = q;
        return 0;
    }
    uint64_t first = atomic_fetch_add(&sw->seq, npieces) + 1;
    char *m = buf;
    for (size_t i = 0; i < npieces; i++) {
        piece *p = &q->pieces[i];
        int64_t k = a / bs, within = a % bs, n = bs - within < end - a ? bs - within : end - a;
        p->req = q;
        p->write = op == ZINF_SWAP_WRITE;
        p->file = file >= 0 ? file : (int)(k % np);
        p->foff = file >= 0 ? a : (k / np) * bs + within;
        p->buf = m;
        p->len = (size_t)n;
        p->fixed = fixed_index(sw, m, (size_t)n);
        if (sw->fault >= FAULT_EIO && sw->fault <= FAULT_EOF && first + i == (uint64_t)sw->fault_n) p->fault = sw->fault;
        a += n;
        m += n;
    }
    uint64_t w0 = atomic_fetch_add(&sw->rr, npieces);
    for (size_t i = 0; i < npieces; i++) {
        worker *w = &sw->workers[(w0 + i) % (uint64_t)sw->nworkers];
        pthread_mutex_lock(&w->mu);
        fifo_push(&w->q, &q->pieces[i]);
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    *out = q;
    return 0;
}

int zinf_swap_poll(zinf_swap *sw, zinf_swap_req *req)
{
    pthread_mutex_lock(&sw->mu);
    int d = req->done;
    pthread_mutex_unlock(&sw->mu);
    return d;
}

int zinf_swap_wait(zinf_swap *sw, zinf_swap_req *req)
{
    if (!req) return 0;
    pthread_mutex_lock(&sw->mu);
    while (!req->done) pthread_cond_wait(&sw->cv, &sw->mu);
    pthread_mutex_unlock(&sw->mu);
    int rc = req->rc;
    if (rc < 0) zinf_errc(rc, "%s", req->msg);
    free(req);
    return rc;
}

int zinf_swap_read(zinf_swap *sw, const zinf_swap_region *r, int64_t offset, void *buf, size_t len)
{
    zinf_swap_req *q;
    ZINF_TRY(zinf_swap_submit(sw, ZINF_SWAP_READ, r, offset, buf, len, &q));
    return zinf_swap_wait(sw, q);
}

int zinf_swap_write(zinf_swap *sw, const zinf_swap_region *r, int64_t offset, const void *buf,
                    size_t len)
{
    zinf_swap_req *q;
    ZINF_TRY(zinf_swap_submit(sw, ZINF_SWAP_WRITE, r, offset, (void *)buf, len, &q));
    return zinf_swap_wait(sw, q);
}

/* ---------------------------------------------------------------- pool */

int zinf_swap_buf_get(zinf_swap *sw, void **buf)
{
    *buf = NULL;
    pthread_mutex_lock(&sw->amu);
    if (sw->nfree_bufs == 0) {
        pthread_mutex_unlock(&sw->amu);
        return zinf_errc(-EAGAIN, "swap pool: all %zu buffers of %zu bytes are in use",
                         sw->o.buffer_count, sw->o.buffer_size);
    }
    size_t i = sw->free_bufs[--sw->nfree_bufs];
    sw->buf_out[i] = 1;
    pthread_mutex_unlock(&sw->amu);
    *buf = sw->slab + i * sw->o.buffer_size;
    return 0;
}

int zinf_swap_buf_put(zinf_swap *sw, void *buf)
{
    char *m = buf;
    size_t bs = sw->o.buffer_size, nb = sw->o.buffer_count;
    if (!sw->slab || m < sw->slab || m >= sw->slab + nb * bs || (size_t)(m - sw->slab) % bs)
        return zinf_err("swap pool: %p is not a buffer of this pool", buf);
    size_t i = (size_t)(m - sw->slab) / bs;
    pthread_mutex_lock(&sw->amu);
    if (!sw->buf_out[i]) {
        pthread_mutex_unlock(&sw->amu);
        return zinf_err("swap pool: buffer %zu (%p) was not taken (put twice?)", i, buf);
    }
    sw->buf_out[i] = 0;
    sw->free_bufs[sw->nfree_bufs++] = i;
    pthread_mutex_unlock(&sw->amu);
    return 0;
}

size_t zinf_swap_buf_size(const zinf_swap *sw) { return sw->o.buffer_size; }

size_t zinf_swap_pinned_bytes(const zinf_swap *sw)
{
    return sw->slab ? sw->o.buffer_count * sw->o.buffer_size : 0;
}

size_t zinf_swap_bufs_free(zinf_swap *sw)
{
    pthread_mutex_lock(&sw->amu);
    size_t n = sw->nfree_bufs;
    pthread_mutex_unlock(&sw->amu);
    return n;
}

void zinf_swap_get_counts(zinf_swap *sw, zinf_swap_counts *c)
{
    c->pieces = atomic_load(&sw->seq);
    c->fixed = atomic_load(&sw->nfixed);
    c->bounced = atomic_load(&sw->nbounced);
    c->continued = atomic_load(&sw->ncontinued);
}
