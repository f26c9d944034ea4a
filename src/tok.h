/* tok: Hugging Face tokenizer.json, byte-level BPE (GPT-2, Llama-3, Qwen2/2.5/3), encoding and
 * decoding as the `tokenizers` library does.
 * Owns: loading the file (BPE model with its vocabulary and merge ranks, added tokens, the NFC
 * normalizer, the Split pre-tokenizer's own regex compiled with PCRE2, ByteLevel, the ByteLevel and
 * TemplateProcessing post-processors, the ByteLevel decoder), refusing any other feature by name,
 * and encoding text to ids from many threads at once with one loaded tokenizer. */
#ifndef ZINF_TOK_H
#define ZINF_TOK_H

#include <stddef.h>
#include <stdint.h>

typedef struct zinf_tok zinf_tok;
typedef struct zinf_ids { int32_t *id; size_t n, cap; } zinf_ids; /* grown with realloc */

/* path: a tokenizer.json file or a directory holding one. 0, or a negative status with the file
 * and the feature at fault in zinf_errmsg(). */
int zinf_tok_load(const char *path, zinf_tok **out);
void zinf_tok_free(zinf_tok *t);

enum {
    ZINF_TOK_SPECIAL = 1,    /* match added tokens written in the text (HF's default) */
    ZINF_TOK_ADD_SPECIAL = 2 /* apply the post-processor (e.g. Llama-3's BOS), HF add_special_tokens=True */
};
/* Without ZINF_TOK_SPECIAL, added tokens marked "special" in the file are encoded as plain text,
 * and the others (Qwen3's <think>, <tool_call>) are still matched: HF's encode_special_tokens. */

/* Append the ids of UTF-8 text[0..len) to out. Thread-safe: many threads may encode with one
 * zinf_tok. Invalid UTF-8 is refused with the byte offset in zinf_errmsg(). */
int zinf_tok_encode(const zinf_tok *t, const char *text, size_t len, unsigned flags, zinf_ids *out);
/* Decode ids to a malloc'd NUL-terminated UTF-8 string (*len without the NUL); a byte sequence
 * that is not UTF-8 becomes U+FFFD, as HF's decode does. */
int zinf_tok_decode(const zinf_tok *t, const int32_t *ids, size_t n, char **text, size_t *len);
int32_t zinf_tok_id(const zinf_tok *t, const char *token); /* an added or vocabulary token's id, -1 if none */
int32_t zinf_tok_vocab_size(const zinf_tok *t);            /* largest id + 1 */
void zinf_ids_free(zinf_ids *v);

/* The first offset at or after `from` where text[0..n) may be cut so that the ids of the two
 * parts, encoded apart, are those of the whole: just after a line break that a printable ASCII
 * character follows (and, with GPT-2's regex, one precedes), when the file's regexes are GPT-2's,
 * Llama-3's or Qwen's (no piece crosses such a point) and no added token holds a line break or
 * strips whitespace before that character; n when there is none, or when the file is not known
 * to allow cuts. NFC never reaches across a line break. */
size_t zinf_tok_next_cut(const zinf_tok *t, const char *text, size_t n, size_t from);

/* The offset of the first byte of s[0..n) that is not valid UTF-8 (as strict as Rust's str: no
 * overlong forms, surrogates or code points past U+10FFFF), or n when all of it is. */
size_t zinf_utf8_check(const char *s, size_t n);

#endif
