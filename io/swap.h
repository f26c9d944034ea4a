/* swap: the NVMe swapper. Owns, for one rank: one swap file per directory of the swap path, the
 * regions carved out of the swap space, the I/O threads and their io_uring rings, and a pool of
 * pinned, 4096-aligned host buffers. It knows nothing of models: callers move bytes.
 *
 * FILES. zinf_swap_open creates "<dir>/zinf-swap-<tag>-r<rank>.swp" in every directory of
 * opts.paths (O_CREAT|O_TRUNC, mode 0600, O_DIRECT unless opts.buffered), preallocates it with
 * fallocate (ftruncate where the file system has no fallocate) and unlinks and closes it at
 * zinf_swap_close. Before creating anything the free space of every directory is checked with
 * statvfs (directories on one file system are summed); too little gives the one error
 * "too little space: need N bytes, DIR has M free". That check counts this handle's files only:
 * processes that share a file system must add each other's (zinf_swap_space_of says what each
 * would take, measured before any of them creates a file). A failed open leaves no file behind
 * (one made before the failure is unlinked). A file system without O_DIRECT (open fails
 * with EINVAL) gives an error that names the file and says to choose the psync engine with
 * buffered I/O (opts.buffered = 1).
 *
 * STRIPING. The swap space is one range of logical bytes [0, capacity), capacity rounded up to a
 * multiple of block_size x npaths. It is striped over the paths with stripe unit = block_size:
 * logical stripe k (bytes [k*bs, (k+1)*bs)) lives in file k % npaths at file offset
 * (k / npaths) * bs. A request is cut at stripe boundaries into pieces of at most block_size bytes,
 * so one block-sized request touches one disk and a large one touches all of them.
 *
 * REGIONS. zinf_swap_reserve hands out a region of the swap space (first fit; the byte count is
 * rounded up to 4096, so regions never share a 4096-byte block); zinf_swap_release gives it back.
 * Requests read or write bytes [offset, offset+len) of a region; any offset, length and buffer
 * address are allowed. The fast path needs offset, len and the buffer address to be multiples of
 * 4096 (pool buffers are): a piece that is not aligned that way on an O_DIRECT file goes through
 * the thread's aligned bounce buffer with synchronous pread/pwrite (a write of a partial 4096-byte
 * block is a read-modify-write of that block). In buffered mode every piece takes the fast path.
 *
 * ENGINES (a table, as fio has): "io_uring" (default): each I/O thread owns one ring of
 * queue_depth entries; pool buffers are registered with every ring and a piece whose memory lies
 * inside one pool buffer uses IORING_OP_{READ,WRITE}_FIXED. "psync": each I/O thread does the
 * pieces with pread/pwrite, one at a time; for tests, for file systems without O_DIRECT (with
 * buffered = 1) and for machines where io_uring is disabled.
 *
 * THE AIO KNOBS (DeepSpeed's "aio" block, same meanings):
 *   block_size            bytes per piece (and the stripe unit); a multiple of 4096. 1 MiB default.
 *   queue_depth           pieces in flight per ring at most. 8 default.
 *   intra_op_parallelism  I/O threads (each with its own ring); the pieces of every request are
 *                         dealt round-robin over them, so one request uses all of them. 1 default.
 *   single_submit         1: one io_uring_submit per piece; 0 (default): prepare up to queue_depth
 *                         pieces and submit them with one call.
 *   overlap_events        1 (default): as soon as one piece completes, new pieces are submitted
 *                         in its place (the ring stays full); 0: submit a batch of up to
 *                         queue_depth pieces, wait for all of them, then submit the next batch.
 * For psync, queue_depth only bounds the batch a thread takes at once; the rest is meaningless.
 *
 * REQUESTS. zinf_swap_submit returns at once with a request handle; zinf_swap_poll says whether it
 * has completed, zinf_swap_wait blocks until it has, returns its status and frees the handle
 * (every handle must be waited for exactly once, and before zinf_swap_close). A request completes
 * when all its pieces have. A short transfer is continued from where it stopped; a transfer that
 * makes no progress (end of file) or fails is reported, never truncated silently. Later pieces of
 * a failed request still run; the first failure is the request's status.
 *
 * ERRORS. Every function returns 0 (or a count where said) or a negative code: -errno of the
 * system call that failed (-EIO for an I/O error, -ENOSPC, -ENOENT, -ENOTDIR, -EINVAL, -EAGAIN for
 * an empty pool), ZINF_EIO for a transfer that stopped short, ZINF_EINVAL for bad arguments,
 * ZINF_ENOMEM. The message (zinf_errmsg() on the calling thread; zinf_swap_wait copies a worker's
 * message to the waiter's thread) names the file, the file offset and the errno text, e.g.
 * "swap read of /nvme/zinf-swap-optim-r3.swp at offset 1048576 (4096 bytes) failed: Input/output
 * error". Nothing here prints or exits.
 *
 * POOL. buffer_count buffers of buffer_size bytes (a multiple of 4096), one 4096-aligned slab
 * allocated at open, registered with io_uring as fixed buffers (io_uring engine) and, when
 * opts.pin is given, with the GPU: pin(ctx, ptr, bytes) once per buffer at open, unpin(ctx, ptr)
 * once per buffer at close. The pool never holds more than buffer_count x buffer_size bytes, and
 * open fails if that exceeds opts.pinned_limit (when nonzero). zinf_swap_buf_get does NOT block:
 * with every buffer handed out it fails with -EAGAIN and "swap pool: all N buffers of M bytes are
 * in use".
 *
 * FAULT INJECTION (tests). ZINF_SWAP_FAULT, read at open:
 *   "eio@N"     the N-th piece (1-based, counted in submission order over the handle's life)
 *               fails with EIO;
 *   "short@N"   the N-th piece transfers half its bytes at first (the rest must be continued);
 *   "eof@N"     the N-th piece transfers half, then nothing more (reported as a short transfer);
 *   "enospc"    the space check at open sees 0 bytes free;
 *   "nodirect"  the O_DIRECT open fails with EINVAL as on a file system without O_DIRECT;
 *   "free@N"    the space check (and zinf_swap_space_of) sees N bytes free.
 *
 * THREADS. zinf_swap_open and zinf_swap_close must not run concurrently with anything on the same
 * handle. Everything else (reserve, release, submit, poll, wait, read, write, buf_get, buf_put,
 * pinned_bytes) may be called from any number of threads at once; a given request handle is
 * polled/waited by one thread. Concurrent requests must not write the same 4096-byte block of the
 * swap space (regions never share one, so only overlapping requests within a region can). */
/* FILES THAT EXIST (a model's weights, read where they lie). zinf_swap_open_files opens the given
 * files read-only (O_DIRECT unless opts.buffered; opts.paths, tag, rank and capacity are not
 * used) with the same engines, I/O threads, pool and fixed buffers; it creates, preallocates and
 * unlinks nothing. zinf_swap_submit_file reads bytes [foff, foff+len) of file i, cut into pieces
 * of at most block_size bytes at block_size boundaries of the file. A read that passes the file's
 * end (an aligned superset of its last bytes) completes with the bytes the file has; the rest of
 * buf is left as it was. An O_DIRECT open refused with EINVAL (tmpfs) fails with -EINVAL and a
 * message naming the file, so that the caller can open again with buffered = 1 and the psync
 * engine; ZINF_SWAP_FAULT=nodirect makes it so on any file system. */
#ifndef ZINF_SWAP_H
#define ZINF_SWAP_H

#include <stddef.h>
#include <stdint.h>

#define ZINF_SWAP_ALIGN 4096

typedef struct zinf_swap zinf_swap;
typedef struct zinf_swap_req zinf_swap_req;

typedef struct {
    const char *engine;         /* "io_uring" or "psync"; NULL = "io_uring" */
    const char *const *paths;   /* npaths existing directories to stripe over */
    int npaths;
    const char *tag;            /* part of the file name; NULL = "swap" */
    int rank;                   /* part of the file name */
    int64_t capacity;           /* bytes of swap space wanted */
    size_t block_size;          /* 0 = 1 MiB */
    int queue_depth;            /* 0 = 8 */
    int intra_op_parallelism;   /* 0 = 1 */
    int single_submit;          /* 0 or 1 */
    int overlap_events;         /* 0 or 1; zinf_swap_opts_defaults sets 1 */
    int buffered;               /* 1: no O_DIRECT (page cache) */
    int unlink_early;           /* 1: unlink each file as soon as it is preallocated, so that a
                                   process that dies (SIGKILL, MPI_Abort) leaves nothing behind;
                                   the descriptor keeps the space until it is closed */
    size_t buffer_count;        /* pool buffers (may be 0) */
    size_t buffer_size;         /* bytes each, a multiple of 4096 */
    size_t pinned_limit;        /* 0 = no limit beyond buffer_count x buffer_size */
    int (*pin)(void *ctx, void *ptr, size_t bytes); /* optional: register with the GPU; 0 = ok */
    void (*unpin)(void *ctx, void *ptr);
    void *pin_ctx;
} zinf_swap_opts;

/* A region of the swap space: logical offset and size (multiples of 4096). */
typedef struct {
    int64_t off;
    int64_t size;
} zinf_swap_region;

enum { ZINF_SWAP_READ = 0, ZINF_SWAP_WRITE = 1 };

/* DeepSpeed's defaults: io_uring, 1 MiB blocks, depth 8, one thread, batched, overlapped. */
void zinf_swap_opts_defaults(zinf_swap_opts *o);

int zinf_swap_open(zinf_swap **out, const zinf_swap_opts *opts);

/* What zinf_swap_open with these options would take, per directory of opts->paths, measured now
 * and creating nothing: the directory's file system (st_dev), the bytes free there (statvfs
 * f_bavail x f_frsize) and the bytes of the file it would preallocate in it. For callers that
 * run several swappers on one file system at once (ranks of a node) and must check their sum. */
typedef struct {
    uint64_t dev;
    int64_t avail, need;
} zinf_swap_space;
int zinf_swap_space_of(const zinf_swap_opts *opts, zinf_swap_space *out);
/* Open files[0..nfiles) for reading (FILES THAT EXIST above). */
int zinf_swap_open_files(zinf_swap **out, const zinf_swap_opts *opts, const char *const *files, int nfiles);
/* Whether the files are open with O_DIRECT. */
int zinf_swap_direct(const zinf_swap *sw);
/* Start reading len bytes at offset foff of file i (of zinf_swap_open_files) into buf; wait for it
 * as for zinf_swap_submit's. */
int zinf_swap_submit_file(zinf_swap *sw, int i, int64_t foff, void *buf, size_t len, zinf_swap_req **out);
/* Stops the threads, unpins and frees the pool, unlinks and closes the files (files that exist
 * are closed, never unlinked). NULL is fine. */
void zinf_swap_close(zinf_swap *sw);

int64_t zinf_swap_capacity(const zinf_swap *sw); /* after rounding */
const char *zinf_swap_file(const zinf_swap *sw, int i); /* path of file i (0 <= i < npaths) */

int zinf_swap_reserve(zinf_swap *sw, int64_t bytes, zinf_swap_region *out);
int zinf_swap_release(zinf_swap *sw, const zinf_swap_region *r);

/* Start moving len bytes between buf and bytes [offset, offset+len) of region r. buf must stay
 * valid (and, for a write, unchanged) until the request is waited for. */
int zinf_swap_submit(zinf_swap *sw, int op, const zinf_swap_region *r, int64_t offset, void *buf,
                     size_t len, zinf_swap_req **out);
/* 1 when the request has completed (wait will not block), 0 while it is in flight. */
int zinf_swap_poll(zinf_swap *sw, zinf_swap_req *req);
/* Block until complete; the request's status; frees the handle. */
int zinf_swap_wait(zinf_swap *sw, zinf_swap_req *req);
/* submit + wait. */
int zinf_swap_read(zinf_swap *sw, const zinf_swap_region *r, int64_t offset, void *buf, size_t len);
int zinf_swap_write(zinf_swap *sw, const zinf_swap_region *r, int64_t offset, const void *buf,
                    size_t len);

/* Pool: take a free buffer (non-blocking, -EAGAIN when none) / give it back. */
int zinf_swap_buf_get(zinf_swap *sw, void **buf);
int zinf_swap_buf_put(zinf_swap *sw, void *buf);
size_t zinf_swap_buf_size(const zinf_swap *sw);
size_t zinf_swap_pinned_bytes(const zinf_swap *sw); /* bytes the pool holds pinned */
size_t zinf_swap_bufs_free(zinf_swap *sw);

/* How pieces went since open (for tests and benchmarks): all pieces; those that used a fixed
 * (registered) buffer; those done through the bounce buffer; transfers continued after a short
 * one. */
typedef struct {
    uint64_t pieces, fixed, bounced, continued;
} zinf_swap_counts;
void zinf_swap_get_counts(zinf_swap *sw, zinf_swap_counts *c);

#endif
