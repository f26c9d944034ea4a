/* hf: interchange with Hugging Face transformers. Reads and writes through the model's family
 * (family.h), which owns HF's names, how HF stores each tensor (transposed, fused) and the
 * config.json; io/safetensors reads and writes the files; this file owns the list of a model's
 * HF tensors, how they are written from zinf's (parts, transposes) and `zinf train --init_from
 * DIR` (man/zinf-hf.5). */
#ifndef ZINF_HF_H
#define ZINF_HF_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"
#include "family.h"
#include "safetensors.h"
#include "model.h"
#include "zero.h"

/* Tensor t of unit u: HF's name ("transformer.h.3.attn.c_attn.weight"), its shape there (rows,
 * cols; cols 0 for a vector) and whether HF stores it transposed: the first of the family's parts
 * (GPT-2's tensors have one each). */
void zinf_hf_tensor(const zinf_model *m, int u, int t, char *name, size_t cap, int64_t shape[2], bool *transposed);

/* HF part p's shape there (rows, cols; cols 0 for a vector) as a part of zinf tensor tv */
void zinf_hf_part_shape(const zinf_tensor_view *tv, const zinf_hf_part *p, int64_t shape[2]);

/* One HF tensor of the model: part k of nparts of zinf tensor t of unit u, its shape there. */
typedef struct zinf_hf_item {
    int u, t, k, nparts;
    zinf_hf_part part;
    int64_t shape[2];
} zinf_hf_item;
/* Every HF tensor of the model, in the model's order (units, tensors, parts): *out to free(). A
 * tied head is no tensor of zinf's, so it is none of HF's either. */
int zinf_hf_list(const zinf_model *m, zinf_hf_item **out, int *n);

/* Where zinf_hf_write reads a model's values: block reads rows [r0, r0 + nr) x columns
 * [c0, c0 + nc) of zinf tensor t of unit u into buf (nr x nc, row-major; a vector's columns are
 * [0, 1)). begin (may be NULL) comes before a tensor's first block, end (may be NULL) after its
 * last; between them every element of the tensor is read exactly once, the rows HF lacks too. */
typedef struct zinf_hf_source {
    void *ctx;
    int (*begin)(void *ctx, int u, int t);
    int (*block)(void *ctx, int u, int t, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float *buf);
    int (*end)(void *ctx, int u, int t);
} zinf_hf_source;

/* The model's HF tensors (zinf_hf_list's: a fused tensor as its parts, a transposed one written
 * transposed, rows HF lacks left out) into dir through io/safetensors (zinf_st_write_dir: shards
 * of at most max_shard bytes, meta in each header), in values of dt, read from src in blocks of
 * about `block` elements (at least one row, or one column of a transposed part). */
int zinf_hf_write(const char *dir, const zinf_model *m, zinf_dtype dt, uint64_t max_shard, const char *const *meta,
                  int64_t block, const zinf_hf_source *src, zinf_st_written *res);

/* config.json for the model (the family's: GPT-2's a GPT2Config with zero dropouts); dt names
 * torch_dtype. A string to free(), NULL when out of memory. */
char *zinf_hf_config_text(const zinf_model_cfg *c, zinf_dtype dt);

/* generation_config.json for a config.json text: {"_from_model_config": true} and its special
 * token ids, as transformers makes one from a model config. A string to free(), NULL when the text
 * is not JSON or memory is out. */
char *zinf_hf_generation_config(const char *config_json);

/* What zinf_hf_import read, over all ranks: bytes from the files (4096-aligned supersets of the
 * ranges), bytes of the ranges, whether every rank read with O_DIRECT (a file system without it is
 * read through the page cache) and the seconds the import took (checks and agreement included). */
typedef struct zinf_hf_load {
    uint64_t read, wanted;
    bool direct;
    double seconds, wait_seconds; /* the whole import; rank 0's waits for its reads in it */
} zinf_hf_load;

/* `zinf train --init_from DIR`: the fp32 master weights from DIR/config.json and
 * DIR/model.safetensors, or the shards DIR/model.safetensors.index.json names (F32, BF16 or F16
 * tensors; names with or without the family's prefix, GPT-2's "transformer."; a fused tensor from
 * its parts), each rank reading only the bytes of its own part of each unit; Adam's m and v zero,
 * rows HF does not have (the padded vocabulary) zero, then the parameters from the masters. The
 * config's family and fields (GPT-2: n_layer, n_embd, n_head, n_positions, vocab_size) must be the
 * model's. Collective: every rank checks every tensor (present where the index puts it, dtype,
 * shape) before any state changes; a failure anywhere is agreed on (one message naming the file
 * and the field or tensor). The bytes are read through a zinf_st_reader (O_DIRECT, pipelined, a
 * bounded buffer) unit by unit, the next unit's reads in a thread while this one moves into the
 * shards (host memory: the read buffer and two units' parts); load (may be NULL) receives what
 * was read. */
int zinf_hf_import(const char *dir, zinf_comm *comm, const zinf_model *m, zinf_zero *z, zinf_hf_load *load);

/* The model's parameters from DIR (config.json, the safetensors files), read as zinf_hf_import
 * reads them but on this one process and without ZeRO or an optimizer: each unit u in turn, all
 * of its numel values in fp32 (rows HF lacks zero), handed to put, which must copy them before it
 * returns (one unit's host buffer is all this holds). For `zinf generate`. */
int zinf_hf_read_params(const char *dir, const zinf_model *m, int (*put)(void *ctx, int u, const float *vals),
                        void *ctx);

#endif
