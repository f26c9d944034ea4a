/* dataset: `zinf train --dataset FILE[#N]`, the one-command path. A chat dataset in JSONL is
 * rendered with the model's chat template and tokenized with its tokenizer into SFT shards (chat.c,
 * sft.c) once, into a cache directory keyed by everything the shards depend on; a later run with
 * the same inputs reads the cached shards. The two-step path (`zinf data --sft`, then
 * `zinf train --data`) makes the same shards. */
#ifndef ZINF_DATASET_H
#define ZINF_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "chat.h"

/* The key of a set of shards: a 64-bit FNV-1a over the bytes of the dataset files, the tokenizer's
 * files (tokenizer.json; tokenizer_config.json and config.json, which choose the template), and
 * the options that change a token or a flag (template, system, date where the template writes it,
 * max_length, truncation, split ratio, seed, N of FILE#N). o->prefix is not read. */
int zinf_dataset_key(const zinf_chat_data_opts *o, unsigned long long *key);

/* The shards of o in cache_dir/KEY (made there first when absent: written under a temporary name
 * and renamed, so that a directory with the key's name is always whole; beside them
 * sft_counts.json, the counts of zinf_chat_make_shards). The globs of the training and validation
 * shards go to train and val (val "" when the set has none), each of cap bytes; *made says whether
 * they were made now; longer[0] and longer[1] are the numbers of training and validation samples
 * longer than o->max_length (deleted or truncated, as o->truncation says), -1 for a set made
 * before zinf kept the counts;
 * the report of making them goes to report (may be NULL). When the set cannot be made, the
 * directories made for cache_dir are taken back, and nothing else is left. */
int zinf_dataset_prepare(const zinf_chat_data_opts *o, const char *cache_dir, char *train, char *val, size_t cap,
                         bool *made, int64_t longer[2], FILE *report);

#endif
