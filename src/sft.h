/* sft: tokenized supervised fine-tuning samples in memory, and their shards.
 *
 * A sample is a run of tokens with a per-token loss flag; the shard format that stores them (the
 * token shard extended with the flags and the sample starts) is in data.c and zinf-data(1). */
#ifndef ZINF_SFT_H
#define ZINF_SFT_H

#include <stdint.h>

/* Tokenized SFT samples in memory, back to back. loss[i] = 1 when token i is a target of the
 * loss (it belongs to an assistant reply the template marks trainable), as ms-swift's labels:
 * label[i] = input_ids[i] where loss[i], else -100. The model at position i predicts token i+1,
 * so within a sample tgt[i] = tok[i+1] when loss[i+1], else -1; a sample's last token has tgt -1. */
typedef struct zinf_sft_samples {
    int32_t *tok; uint8_t *loss;  /* ntok each */
    int64_t *start;               /* nsamples + 1 offsets into tok; start[0] = 0 */
    int64_t ntok, nsamples, cap_tok, cap_samples;
} zinf_sft_samples;

/* Append one sample of n >= 1 tokens (loss flags 0 or 1). A zeroed struct is an empty set. */
int  zinf_sft_append(zinf_sft_samples *s, const int32_t *tok, const uint8_t *loss, int64_t n);
void zinf_sft_free(zinf_sft_samples *s);

/* Write PREFIX_train_000000.bin ... (and PREFIX_val_... when val is non-NULL and non-empty) in the
 * shard format extended with loss flags and sample starts; ids checked < vocab_size. Atomic (tmp+rename).
 * The shards replace a set written before under PREFIX: its further shards are removed. */
int  zinf_sft_write_shards(const char *prefix, const zinf_sft_samples *train,
                           const zinf_sft_samples *val, int32_t vocab_size);

#endif
