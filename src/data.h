/* data: token shards in llm.c's format (256 x int32 header: magic 20240520, version 1 with uint16
 * tokens, or version 2 with uint32 tokens; header[2] = token count), memory-mapped, cut into
 * sequences of T+1 tokens, shuffled per epoch from the seed. The global batch of step s is the
 * same set of sequences whatever the world size and micro-batch split; rank r reads its slice.
 * SFT shards (versions 3 and 4: the tokens, a loss flag per token, the sample starts; data.c and
 * zinf-data(1)) are read as rows of T tokens holding whole samples, one per row or packed; rows
 * then play the part of sequences. */
#ifndef ZINF_DATA_H
#define ZINF_DATA_H

#include <stdint.h>
#include <stdio.h>

#define ZINF_DATA_MAGIC 20240520
#define ZINF_DATA_HEADER_INTS 256

typedef struct zinf_data zinf_data;

/* Open every file matching the glob pattern (sorted by name), validate headers and every token
 * (< vocab_size), and index sequences of T+1 tokens (windows start every T tokens within a shard).
 * shuffle: permute sequences each epoch from seed (train); 0 keeps file order (validation).
 * Errors name the file and, for a bad token, its index. */
int zinf_data_open(zinf_data **out, const char *pattern, int T, int vocab_size, uint64_t seed,
                   int shuffle);
/* As zinf_data_open; packing (SFT shards only) packs whole samples into the rows instead of one
 * per row. SFT samples longer than T are left out and counted (zinf_data_num_dropped). */
int zinf_data_open_packing(zinf_data **out, const char *pattern, int T, int vocab_size, uint64_t seed,
                           int shuffle, int packing);
void zinf_data_close(zinf_data *d);

int64_t zinf_data_num_sequences(const zinf_data *d);
int64_t zinf_data_num_tokens(const zinf_data *d);
int zinf_data_num_files(const zinf_data *d);
int zinf_data_is_sft(const zinf_data *d);
int zinf_data_is_packed(const zinf_data *d);
int64_t zinf_data_num_samples(const zinf_data *d); /* SFT: samples in the files */
int64_t zinf_data_num_dropped(const zinf_data *d); /* SFT: of them, those longer than T */
int64_t zinf_data_num_row_tokens(const zinf_data *d); /* SFT: the tokens of the samples in rows */

/* Sequences are numbered along an endless stream: position p is sequence perm_e[p mod N] of
 * epoch e = p / N. Fill inp[count*T] and tgt[count*T] (tgt = inp shifted by one) with the
 * sequences at stream positions first .. first+count-1. A shard truncated since the open makes
 * a read past its new end ZINF_EIO, naming the shard and both sizes (not a SIGBUS). */
int zinf_data_read(zinf_data *d, int64_t first, int64_t count, int32_t *inp, int32_t *tgt);
/* As zinf_data_read, also filling pos[count*T] and kv_start[count*T] (zinf_batch's) when not NULL.
 * Plain shards: pos = i, kv_start = 0. SFT rows: positions restart at each sample, kv_start is the
 * row offset where the token's sample starts, tgt is -1 where the next token carries no loss or
 * lies in another sample; the row's tail is one pad run (token 0, tgt -1, pos from 0, kv_start its
 * own first offset). Packed rows must be read with pos and kv_start; zinf_data_read reads plain and
 * one-sample rows (there, a pad token only follows the sample, so causal attention is the same). */
int zinf_data_read_rows(zinf_data *d, int64_t first, int64_t count, int32_t *inp, int32_t *tgt, int32_t *pos,
                        int32_t *kv_start);

/* Stream position of sequence j (0 <= j < global_batch) of optimizer step `step`, and the first
 * position of the slice that rank `rank` of `world` reads at micro-step `micro` of
 * `grad_accum` with `micro_batch` sequences: global layout j = (micro*world + rank)*micro_batch. */
int64_t zinf_data_slice_start(int64_t step, int64_t global_batch, int micro, int rank, int world,
                              int64_t micro_batch);

/* `zinf data`: turn a text file into byte-level shards (vocabulary 256, uint16 tokens).
 * Writes <prefix>_train_NNNNNN.bin and, when val_fraction > 0, <prefix>_val_000000.bin holding the
 * last val_fraction of the bytes (UTF-8 text split between characters). shard_tokens bounds the
 * tokens per train shard. Reports to out; a warning (a JSON Lines input, tokenised as its text) to
 * warn (may be NULL). */
int zinf_data_make_bytes(const char *text_path, const char *prefix, double val_fraction,
                         int64_t shard_tokens, FILE *out, FILE *warn);

/* `zinf data --tokenizer PATH`: the same with the ids of a tokenizer.json (tok.h) as tokens,
 * HF's encode of the whole file (added tokens in the text matched, no post-processor ids),
 * computed on all OpenMP threads with the same result for any thread count; uint32 tokens when an
 * id needs them. Invalid UTF-8 is refused with the file, line and byte. */
int zinf_data_make_tokens(const char *text_path, const char *tok_path, const char *prefix,
                          double val_fraction, int64_t shard_tokens, FILE *out);

/* `zinf data --random N`: one shard <prefix>_train_000000.bin of N tokens drawn uniformly from
 * [0, vocab) with the seed, for benchmarks and tests that need a real vocabulary size. */
int zinf_data_make_random(const char *prefix, int64_t ntokens, int vocab, uint64_t seed, FILE *out);

/* Write one shard (version 1 when every token < 65536, else version 2) atomically:
 * tmp file, fsync, rename. */
int zinf_data_write_shard(const char *path, const uint32_t *tokens, int64_t n);
/* Write one SFT shard (version 3, or 4 when a token >= 65536) atomically: tokens[0..n), loss[0..n),
 * nsamp samples whose starts are start[0..nsamp] (stored relative to start[0]; start[nsamp] -
 * start[0] = n). */
int zinf_data_write_sft_shard(const char *path, const uint32_t *tokens, const uint8_t *loss, int64_t n,
                              const int64_t *start, int64_t nsamp);

#endif
