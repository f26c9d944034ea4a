/* iobench: `zinf io-bench`, the "aio" tuner (DeepSpeed's ds_nvme_tune for zinf's swapper). Owns the
 * sweep over block_size x queue_depth x intra_op_parallelism x single_submit x overlap_events: for
 * each setting a swapper (io/swap.h) is opened on the given directories, `size` bytes are written
 * from its pool buffers and fsync'ed, then read back and checked block by block, each pass timed;
 * then one plain O_DIRECT pwrite/pread loop of 8 MiB blocks per directory gives the raw disk speed
 * beside it. The table, the best settings and a DeepSpeed "aio" block go to `out`. Nothing is left
 * on disk on any return (the swapper unlinks its files at close; the reference file is unlinked as
 * soon as it is open; SIGINT/SIGTERM/SIGHUP unlink the swap files before the default action). */
#ifndef ZINF_IOBENCH_H
#define ZINF_IOBENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define ZINF_IOBENCH_MAX_PATHS 64

typedef struct {
    const char *const *paths; /* npaths directories; the swap space is striped over them */
    int npaths;
    /* the flags as given (NULL = default); parsed and checked by zinf_iobench_run */
    const char *size;           /* bytes with K/M/G (binary); default 1G, 64M with quick */
    const char *engine;         /* io_uring (O_DIRECT, default) or psync (buffered, as train's) */
    const char *block_sizes;    /* comma list with K/M/G; default 128K,256K,512K,1M,4M,8M */
    const char *queue_depths;   /* default 4,8,16,32,64 */
    const char *parallelism;    /* intra_op_parallelism values; default 1,2 */
    const char *single_submit;  /* both|true|false; default false */
    const char *overlap_events; /* both|true|false; default true */
    bool quick;                 /* defaults of a small sweep: 128K,1M x 4,32 x 1,2 */
} zinf_iobench_opts;

void zinf_iobench_opts_defaults(zinf_iobench_opts *o);

/* Parse "64M", "1G", "4096", "128K" (K/M/G/T = 2^10.., an optional trailing B or iB) into bytes > 0.
 * what names the flag in the error. */
int zinf_iobench_parse_size(const char *what, const char *s, int64_t *out);

/* Run the sweep; 0 or a negative code with zinf_err's one-line message. */
int zinf_iobench_run(const zinf_iobench_opts *o, FILE *out);

#endif
