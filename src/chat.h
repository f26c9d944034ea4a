/* chat: supervised fine-tuning conversations as ms-swift reads and renders them.
 * Reading: JSONL in ms-swift's four layouts (messages / conversations, ShareGPT, Alpaca,
 * query-response-history) into one list of role+content messages; FILE#N sampling with
 * numpy's RandomState(seed).permutation (MT19937 and numpy's legacy bounded integers); the
 * validation split. Rendering: the built-in templates (ms-swift's names), each turning a
 * conversation into segments of text with a loss flag, then token ids and a per-token loss flag
 * by tokenizing each segment on its own, as ms-swift's Template.encode does. */
#ifndef ZINF_CHAT_H
#define ZINF_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tok.h"

typedef enum { ZINF_ROLE_SYSTEM, ZINF_ROLE_USER, ZINF_ROLE_ASSISTANT, ZINF_ROLE_TOOL } zinf_role;

typedef struct zinf_chat_msg {
    zinf_role role;
    char *content; /* malloc'd UTF-8 */
    int src;       /* its number in the row's message list, for messages (0: made from other fields) */
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
    int64_t want;         /* N of PATH#N, else 0 */
    char *path;           /* the file read (without #N) */
} zinf_chat_set;

/* The file and the sample count of a dataset spec, PATH or PATH#N: a spec that names an existing
 * file is that file, read whole ('#' and all); otherwise the text after the last '#' must be
 * decimal digits alone, N >= 1 (no sign, blank or 0x; no overflow), PATH what precedes it, and
 * anything else is an error naming the spec. *path is malloc'd; *want is N, else 0. */
int zinf_chat_spec(const char *spec, char **path, int64_t *want);

/* Read a JSONL file; spec is PATH or PATH#N as zinf_chat_spec reads it (N kept in want for
 * zinf_chat_select).
 * Every line holds one object in one of the layouts; blank lines are skipped. Errors name the
 * file and line: a malformed line, invalid UTF-8 (its byte in the file and in the line), a layout
 * not recognised, roles out of order, a role or feature not supported. A row without an assistant
 * turn is skipped and counted in no_assistant. A file that cannot be read is named with flag, the
 * option that gave it (--input, --dataset, --val_dataset). */
int zinf_chat_read(const char *flag, const char *spec, zinf_chat_set *out);
void zinf_chat_set_free(zinf_chat_set *s);

/* The rows of a dataset of len rows that train and validation take, as ms-swift's
 * DatasetLoader.post_process picks them with data_seed: a RandomState(seed) rs;
 * ratio 0: sample_dataset(want): want < len: rs.permutation(len)[:want]; want >= len: every row
 * want/len times in order, then rs.permutation(len)[:want%len]; want 0 is len (all, in order).
 * ratio > 0: nval = max(int(min(len, want) * ratio), 1); datasets' train_test_split with
 * seed rs.randint(2**31-1): np.random.default_rng(seed).permutation(len), its first nval rows
 * are validation, the rest are sampled to want - nval training rows with rs as above. */
int zinf_chat_select(int64_t len, int64_t want, double ratio, uint32_t seed, int64_t **train, int64_t *ntrain,
                     int64_t **val, int64_t *nval);
/* numpy.random.RandomState(seed).permutation(len) and numpy.random.default_rng(seed).permutation(len),
 * bit for bit. */
int zinf_chat_permutation(int64_t len, uint32_t seed, int64_t *perm);
int zinf_chat_rng_permutation(int64_t len, uint64_t seed, int64_t *perm);

/* ---------------------------------------------------------------- templates -------------- */
typedef struct zinf_template zinf_template;

/* A built-in template by ms-swift's name (qwen, qwen2_5, qwen3, qwen3_nothinking, llama3, llama3_2,
 * chatml);
 * NULL with an error naming the template and listing the known ones. */
const zinf_template *zinf_template_find(const char *name);
const char *zinf_template_name(const zinf_template *t);
/* The template writes today's date (llama3_2's "Today Date") */
bool zinf_template_dated(const zinf_template *t);
/* The names, comma-separated, for messages and --help. */
const char *zinf_template_names(void);
/* The template for a model directory: config.json's model_type and the features of
 * tokenizer_config.json's chat_template (no Jinja is run). */
int zinf_template_detect(const char *model_dir, const zinf_template **out);

/* Every control token the template writes (<|...|>) is one token of tok (tok_name names it in the
 * error): a template of another model family's tokenizer would write its control tokens as text. */
int zinf_template_check(const zinf_template *t, const zinf_tok *tok, const char *tok_name);

typedef struct zinf_chat_opts {
    const char *system; /* --system: replaces the template's default system (NULL: keep) */
    const char *date;   /* llama3_2's "Today Date": "26 Jul 2024"; NULL: today (UTC) or
                         * ZINF_CHAT_DATE from the environment */
} zinf_chat_opts;

/* The date a dated template writes: o->date, else ZINF_CHAT_DATE, else today (UTC), "26 Nov 2026" */
void zinf_chat_date(const zinf_chat_opts *o, char *out, size_t cap);

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

/* The text a reply is generated from (`zinf generate`): conversation c, which ends with a user (or
 * tool) message, rendered as above, then the assistant header, as HF's apply_chat_template with
 * add_generation_prompt=True writes it; qwen3 adds the empty <think> block of thinking off
 * (enable_thinking=False). *text is malloc'd. */
int zinf_chat_prompt(const zinf_template *t, const zinf_chat *c, const zinf_chat_opts *o, char **text);
/* The id that ends a reply: the first token of the template's suffix (<|im_end|>, <|eot_id|>). */
int zinf_template_end_id(const zinf_template *t, const zinf_tok *tok, int32_t *id);

/* ---------------------------------------------------------------- zinf data --sft ------- */
enum { ZINF_TRUNC_DELETE, ZINF_TRUNC_LEFT, ZINF_TRUNC_RIGHT };

typedef struct zinf_chat_data_opts {
    const char *input;         /* FILE[#N] */
    const char *input_flag;    /* the option that gave it, for messages: "--input" (zinf data) or "--dataset" */
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
/* The options that gave o's files, as messages about them name them: the training set's
 * (input_flag, "--input" when unset) and the validation set's */
static inline const char *zinf_chat_input_flag(const zinf_chat_data_opts *o)
{
    return o->input_flag ? o->input_flag : "--input";
}
#define ZINF_CHAT_VAL_FLAG "--val_dataset"

/* The samples longer than --max_length, of the training and the validation set: deleted, or
 * truncated to it (as o->truncation says) */
typedef struct zinf_chat_counts {
    int64_t longer[2];
} zinf_chat_counts;

/* `zinf data --sft`: read, sample, split, render and tokenize, apply --max_length, and write the
 * SFT shards (sft.h); the report to out (may be NULL), the counts to counts (may be NULL). An
 * empty training set after filtering is an error; no shard is left behind on failure. */
int zinf_chat_make_shards(const zinf_chat_data_opts *o, FILE *out, zinf_chat_counts *counts);

#endif
