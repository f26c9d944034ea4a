/* chat: supervised fine-tuning conversations as ms-swift reads and renders them.
 * Reading: JSONL in ms-swift's four layouts (messages / conversations, ShareGPT, Alpaca,
 * query-response-history) into one list of role+content messages; FILE#N sampling with
 * numpy's RandomState(seed).permutation (MT19937 and numpy's legacy bounded integers); the
 * validation split. Rendering: the built-in templates (ms-swift's names), each turning a
 * conversation into segments of text with a loss flag, then token ids and a per-token loss flag
 * by tokenizing each segment on its own, as ms-swift's Template.encode does. */
#ifndef ZINF_CHAT_H
#define ZINF_CHAT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tok.h"

typedef enum { ZINF_ROLE_SYSTEM, ZINF_ROLE_USER, ZINF_ROLE_ASSISTANT, ZINF_ROLE_TOOL } zinf_role;

typedef struct zinf_chat_msg {
    zinf_role role;
    char *content; /* malloc'd UTF-8 */
} zinf_chat_msg;

/* One conversation; where it came from, for messages that name it. */
typedef struct zinf_chat {
    zinf_chat_msg *m;
    int n, cap;
    int64_t line; /* 1-based line of the JSONL file */
} zinf_chat;

typedef struct zinf_chat_set {
    zinf_chat *row;
    int64_t n, cap;
    int64_t no_assistant; /* rows skipped for having no assistant turn */
    char *path;           /* the file read (without #N) */
} zinf_chat_set;

/* Read a JSONL file; spec is PATH or PATH#N (N > 0: ms-swift's sampling, see zinf_chat_sample).
 * Every line holds one object in one of the layouts; blank lines are skipped. Errors name the
 * file and line: a malformed line, invalid UTF-8 (with the byte offset in the line), a layout
 * not recognised, roles out of order, a role or feature not supported. A row without an assistant
 * turn is skipped and counted in no_assistant. */
int zinf_chat_read(const char *spec, uint32_t seed, zinf_chat_set *out);
void zinf_chat_set_free(zinf_chat_set *s);

/* ms-swift's `#N` rows of a dataset of len rows: N < len: RandomState(seed).permutation(len)[:N];
 * N >= len: every row N/len times in order, then permutation(len)[:N%len]. idx holds N entries. */
int zinf_chat_sample(int64_t len, int64_t n, uint32_t seed, int64_t *idx);
/* numpy.random.RandomState(seed).permutation(len), bit for bit. */
int zinf_chat_permutation(int64_t len, uint32_t seed, int64_t *perm);

/* --split_dataset_ratio: nval = max((int)(len*ratio), 1) rows of the permutation's head go to
 * validation (in that order), the rest, in permutation order, to training. ratio 0: no split. */
int zinf_chat_split(int64_t len, double ratio, uint32_t seed, int64_t **train, int64_t *ntrain,
                    int64_t **val, int64_t *nval);

/* ---------------------------------------------------------------- templates -------------- */
typedef struct zinf_template zinf_template;

/* A built-in template by ms-swift's name (qwen, qwen2_5, qwen3, llama3, llama3_2, chatml);
 * NULL with an error naming the template and listing the known ones. */
const zinf_template *zinf_template_find(const char *name);
const char *zinf_template_name(const zinf_template *t);
/* The names, comma-separated, for messages and --help. */
const char *zinf_template_names(void);
/* The template for a model directory: config.json's model_type and the features of
 * tokenizer_config.json's chat_template (no Jinja is run). */
int zinf_template_detect(const char *model_dir, const zinf_template **out);

typedef struct zinf_chat_opts {
    const char *system; /* --system: replaces the template's default system (NULL: keep) */
    const char *date;   /* llama3_2's "Today Date": "26 Jul 2024"; NULL: today (UTC) or
                         * ZINF_CHAT_DATE from the environment */
} zinf_chat_opts;

typedef struct zinf_segs {
    char **text;
    uint8_t *loss;
    int n, cap;
} zinf_segs;
void zinf_segs_free(zinf_segs *s);

/* The conversation as ms-swift's context list after neighbouring contexts of equal weight are
 * joined: text and whether it is trained. Empty texts are left out. */
int zinf_chat_render(const zinf_template *t, const zinf_chat *c, const zinf_chat_opts *o, zinf_segs *out);

/* Token ids and loss flags (1 = trained) of a conversation: each segment tokenized on its own
 * (added tokens matched, no post-processor), the end-of-turn tokens after every reply trained
 * (ms-swift's dynamic EOS), the first token never trained. ids and loss are appended. */
int zinf_chat_encode(const zinf_template *t, const zinf_tok *tok, const zinf_chat *c,
                     const zinf_chat_opts *o, zinf_ids *ids, uint8_t **loss, size_t *loss_cap);

/* ---------------------------------------------------------------- zinf data --sft ------- */
enum { ZINF_TRUNC_DELETE, ZINF_TRUNC_LEFT, ZINF_TRUNC_RIGHT };

typedef struct zinf_chat_data_opts {
    const char *input;         /* FILE[#N] */
    const char *val_input;     /* --val_dataset FILE[#N], or NULL */
    const char *tokenizer;     /* tokenizer.json or the model directory */
    const char *template_name; /* NULL: detected from the --tokenizer directory */
    const char *prefix;        /* --out */
    int64_t max_length;        /* 0: no limit */
    int truncation;            /* ZINF_TRUNC_* */
    double split_ratio;        /* --split_dataset_ratio */
    uint32_t seed;             /* --data_seed (ms-swift's 42) */
    zinf_chat_opts chat;
} zinf_chat_data_opts;

/* `zinf data --sft`: read, sample, split, render and tokenize, apply --max_length, and write the
 * SFT shards (sft.h); counts to out. An empty training set after filtering is an error; no shard
 * is left behind on failure. */
int zinf_chat_make_shards(const zinf_chat_data_opts *o, FILE *out);

#endif
