/* safetensors: Hugging Face's weight files, read and written; it knows files, headers, dtypes
 * and byte ranges, no models (man/zinf-hf.5).
 *
 * A file: 8 bytes, the header's length N (little-endian); N bytes of JSON {"__metadata__":
 * {str: str}, NAME: {"dtype", "shape", "data_offsets": [begin, end]}, ...}; then the data, the
 * offsets counted from its start, C order, little-endian. A directory holds one file,
 * model.safetensors, or shards model-0000K-of-0000N.safetensors and model.safetensors.index.json
 * ({"metadata": {"total_size": bytes, ...}, "weight_map": {NAME: shard file}}).
 *
 * Reading: zinf_st_open validates the whole header (every dtype one of the format's, shapes,
 * data_offsets that hold the shape's bytes, inside the file, no two overlapping) and keeps the
 * file open; zinf_st_read reads one element range of one tensor with pread, converted to fp32
 * through a small fixed buffer, so a caller reads only the bytes it needs and never a whole
 * file; a zinf_st_reader reads many ranges at once with O_DIRECT (below). Only F32, BF16 and F16
 * tensors can be read; the others are named and refused there.
 *
 * Writing: zinf_st_write_dir lays a list of tensors out into shards of at most max_shard bytes
 * (one larger tensor takes a shard of its own), asks a callback for each tensor's bytes in order
 * and writes every file as NAME.tmp, fsynced, renamed once all are complete; the index too when
 * there is more than one shard. */
#ifndef ZINF_SAFETENSORS_H
#define ZINF_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h" /* zinf_dtype and its roundings */

#define ZINF_ST_MAX_DIMS 8
/* HF's default max_shard_size, "5GB" (transformers 4.x; 5.x writes "50GB") */
#define ZINF_ST_DEFAULT_SHARD 5000000000ull

/* ---------------------------------------------------------------- reading ------------------ */
typedef struct zinf_st_tensor {
    const char *name;    /* into the parsed header: valid while the file is open */
    const char *dtype;   /* the format's name: "BF16", "I64", ... */
    bool readable;       /* F32, BF16 or F16: dt holds it */
    zinf_dtype dt;
    int ndim;
    int64_t shape[ZINF_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* data_offsets, from the data's start */
} zinf_st_tensor;

typedef struct zinf_st_file zinf_st_file;

/* Open and validate path; 0, or a negative status and one message naming path and, where one is
 * at fault, the tensor (a truncated file: the first tensor whose data_offsets pass its end). */
int zinf_st_open(zinf_st_file **out, const char *path);
void zinf_st_close(zinf_st_file *f);
const char *zinf_st_path(const zinf_st_file *f);
int zinf_st_count(const zinf_st_file *f);
const zinf_st_tensor *zinf_st_at(const zinf_st_file *f, int i); /* in data_offsets order */
const zinf_st_tensor *zinf_st_find(const zinf_st_file *f, const char *name); /* NULL: none */
/* one entry of __metadata__, NULL when absent */
const char *zinf_st_meta(const zinf_st_file *f, const char *key);
/* Elements [first, first + n) of t (C order), as fp32, into dst. A tensor zinf cannot read (not
 * F32, BF16, F16) or a range past its end is refused naming the file and the tensor. */
int zinf_st_read(const zinf_st_file *f, const zinf_st_tensor *t, int64_t first, int64_t n, float *dst);

/* A directory: DIR/model.safetensors.index.json and the shards its weight_map names (every one
 * must exist: a missing one is named), or else DIR/model.safetensors. */
typedef struct zinf_st_dir zinf_st_dir;
int zinf_st_dir_open(zinf_st_dir **out, const char *dir);
void zinf_st_dir_close(zinf_st_dir *d);
bool zinf_st_dir_sharded(const zinf_st_dir *d);
int zinf_st_dir_files(const zinf_st_dir *d);
const zinf_st_file *zinf_st_dir_file(const zinf_st_dir *d, int i);
/* The tensor `name` and its file; NULL (and *file NULL) when the directory lacks it. Sharded, the
 * tensor is looked for only in the shard the index names for it. */
const zinf_st_tensor *zinf_st_dir_find(const zinf_st_dir *d, const char *name, const zinf_st_file **file);
/* Record the message for a tensor zinf_st_dir_find did not find, naming it and the file it should
 * be in (the index's shard, or model.safetensors), and return ZINF_EINVAL. */
int zinf_st_dir_missing(const zinf_st_dir *d, const char *name);

/* ---------------------------------------------------------------- reading in bulk ---------- */
/* A reader reads many element ranges of a directory's tensors, converted to fp32, through
 * io/swap's engine on the directory's files (zinf_swap_open_files): io_uring with O_DIRECT, each
 * range cut into chunks that fit one slot of an aligned buffer (buffer_bytes in `slots` slots),
 * each chunk read as its 4096-aligned superset (the data of a safetensors file starts anywhere)
 * and converted from its offset in the slot; up to `slots` chunks are in flight while the oldest
 * is converted. A file system that refuses O_DIRECT (tmpfs) is read with buffered pread (the psync
 * engine) instead, with the same values; so is a machine without io_uring. Host memory: the
 * buffer, whatever the ranges add up to. One caller at a time (start/wait below hand it to a
 * thread and back). */
typedef struct zinf_st_reader zinf_st_reader;
/* buffer_bytes 0: 64 MiB; slots 0: 16; a slot holds at least 3 x 4096 bytes */
int zinf_st_reader_open(zinf_st_reader **out, const zinf_st_dir *d, size_t buffer_bytes, int slots);
void zinf_st_reader_close(zinf_st_reader *r);
/* Queue elements [first, first + n) of tensor t of file f (one of the directory's) for the next
 * run: element first + j goes to dst[j * stride]. Refused as zinf_st_read refuses. */
int zinf_st_reader_add(zinf_st_reader *r, const zinf_st_file *f, const zinf_st_tensor *t, int64_t first, int64_t n,
                       float *dst, int64_t stride);
/* Read and convert everything queued, then forget it; 0, or the first failure's status and
 * message (every read in flight is waited for first). */
int zinf_st_reader_run(zinf_st_reader *r);
/* The same in a thread of its own: start returns at once (0, or why no thread started); wait
 * joins it and returns what run would have, the message on the caller's thread. Between them the
 * reader and the destinations queued are the thread's: queue nothing, touch no destination. */
int zinf_st_reader_start(zinf_st_reader *r);
int zinf_st_reader_wait(zinf_st_reader *r);
/* true: O_DIRECT; false: buffered, and why (the open's refusal) in *why when why is not NULL */
bool zinf_st_reader_direct(const zinf_st_reader *r, const char **why);
/* bytes read from the files (the aligned supersets) and bytes of the ranges asked for, so far */
void zinf_st_reader_bytes(const zinf_st_reader *r, uint64_t *read, uint64_t *wanted);

/* ---------------------------------------------------------------- writing ------------------ */
typedef struct zinf_st_spec {
    char name[128];
    zinf_dtype dt;
    int ndim;
    int64_t shape[ZINF_ST_MAX_DIMS];
} zinf_st_spec;

/* Where a producer puts a tensor's bytes: every tensor must receive exactly its size. */
typedef struct zinf_st_sink zinf_st_sink;
int zinf_st_sink_bytes(zinf_st_sink *s, const void *bytes, size_t n);
/* n values, rounded to the tensor's dtype (to nearest even), little-endian */
int zinf_st_sink_f32(zinf_st_sink *s, const float *x, int64_t n);

/* Produce all bytes of tensor i, in order, into s; 0 or a negative status with its message. */
typedef int (*zinf_st_producer)(void *ctx, int i, zinf_st_sink *s);

typedef struct zinf_st_written {
    int shards;          /* 1: model.safetensors, no index */
    uint64_t total_size; /* the tensors' bytes, as the index's metadata.total_size */
} zinf_st_written;

/* Write tensors t[0..n) into dir (which exists): shards of at most max_shard bytes of data each
 * (0: ZINF_ST_DEFAULT_SHARD), tensors in the order given, each shard's header with __metadata__
 * {"format": "pt"} and the pairs of meta (key, value, ..., NULL; may be NULL). One shard is
 * model.safetensors; more are model-0000K-of-0000N.safetensors and model.safetensors.index.json.
 * Files of an earlier export that the new one does not have (model.safetensors, the index, shards
 * of another count) are removed after the renames. On failure every file this call made is gone. */
int zinf_st_write_dir(const char *dir, const zinf_st_spec *t, int n, uint64_t max_shard, const char *const *meta,
                      zinf_st_producer produce, void *ctx, zinf_st_written *res);

/* HF's spellings of a size ("5GB" = 5e9 bytes, "500MB", "2GiB", "100KB", "5Gb" bits): 0 or
 * ZINF_EINVAL with a message "TEXT: expected ..." (callers prefix what it is). A plain integer is
 * bytes. */
int zinf_st_parse_size(const char *text, uint64_t *bytes);

#endif
