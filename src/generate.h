/* generate: `zinf generate`, a reply from a model, so that a user can talk to the model they
 * fine-tuned. Owns: reading the weights alone (a Hugging Face directory through hf.c, or a
 * checkpoint's masters through ckpt_file.c; no optimizer state, no ZeRO), the prompt (a chat
 * template's rendering up to the assistant header, chat.c's zinf_chat_prompt, or the raw text, or
 * token ids), the stop tokens (the template's end of turn, the tokenizer's EOS,
 * generation_config.json's eos_token_id), the decoding loop (one row of logits per token) and the
 * sampler (greedy, temperature, top-p). No KV cache: each token recomputes the whole prefix. */
#ifndef ZINF_GENERATE_H
#define ZINF_GENERATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct zinf_gen_opts {
    const char *model;         /* --model DIR: config.json, safetensors, tokenizer.json */
    const char *checkpoint;    /* --checkpoint PATH: a zinf checkpoint (file, or directory with latest) */
    const char *tokenizer;     /* --tokenizer PATH: tokenizer.json or its directory (default: --model) */
    const char *prompt;        /* --prompt TEXT: the user message */
    const char *prompt_ids;    /* --prompt_ids 1,2,3: the prompt as token ids (no template, no tokenizer) */
    const char *system;        /* --system TEXT */
    const char *template_name; /* --template NAME (default: detected from the model directory) */
    const char *device;        /* cpu or cuda */
    bool raw;                  /* --raw: the prompt text as it is, no template */
    bool show_prompt;          /* --show_prompt: print the prompt text and stop */
    int64_t max_new_tokens;    /* default 128 */
    double temperature;        /* 0: greedy (default) */
    double top_p;              /* nucleus sampling, default 1 */
    uint64_t seed;             /* the sampler's seed */
} zinf_gen_opts;

void zinf_gen_opts_defaults(zinf_gen_opts *o);

/* `zinf generate`: the reply, decoded, and a newline to out (with --prompt_ids: its ids, blank
 * separated; with --show_prompt: the prompt text alone). Errors name the flag, file or value. */
int zinf_generate(const zinf_gen_opts *o, FILE *out);

/* The next token from logits[0..V): the first largest with temperature 0; else a draw from
 * softmax(logits / temperature) restricted to its top-p nucleus (transformers' TopPLogitsWarper:
 * the most likely tokens until their probability reaches top_p, at least one), with the
 * generator *rng (splitmix64); prob and order are V floats and V ids of scratch (with temperature
 * 0, rng, prob and order are not used and may be NULL). */
int32_t zinf_gen_sample(const float *logits, int V, double temperature, double top_p, uint64_t *rng, float *prob,
                        int32_t *order);

#endif
