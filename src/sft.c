/* sft: tokenized supervised fine-tuning samples and their shards (sft.h). */
#include "sft.h"

#include "data.h"
#include "err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Tokens per shard at most; a shard ends at a sample boundary, so one longer sample gets one
 * shard of its own. */
#define SFT_SHARD_TOKENS ((int64_t)1 << 27)

/* Make room for *cap >= need elements of size sz at *p (doubling). */
static int grow(void **p, int64_t *cap, int64_t need, size_t sz)
{
    if (need <= *cap) return 0;
    int64_t c = *cap > 0 ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) return zinf_errc(ZINF_ENOMEM, "sft: out of memory for %lld elements", (long long)c);
    *p = q;
    *cap = c;
    return 0;
}

int zinf_sft_append(zinf_sft_samples *s, const int32_t *tok, const uint8_t *loss, int64_t n)
{
    if (n < 1) return zinf_err("sft: sample %lld has %lld tokens (a sample has at least one)", (long long)s->nsamples,
                               (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (loss[i] > 1)
            return zinf_err("sft: sample %lld, token %lld: loss flag %u is neither 0 nor 1", (long long)s->nsamples,
                            (long long)i, loss[i]);
    /* tok and loss share cap_tok: grow both before moving it */
    int64_t cap = s->cap_tok;
    ZINF_TRY(grow((void **)&s->tok, &cap, s->ntok + n, sizeof *s->tok));
    cap = s->cap_tok;
    ZINF_TRY(grow((void **)&s->loss, &cap, s->ntok + n, sizeof *s->loss));
    s->cap_tok = cap;
    ZINF_TRY(grow((void **)&s->start, &s->cap_samples, s->nsamples + 2, sizeof *s->start));
    if (s->nsamples == 0) s->start[0] = 0;
    memcpy(s->tok + s->ntok, tok, (size_t)n * sizeof *tok);
    memcpy(s->loss + s->ntok, loss, (size_t)n);
    s->ntok += n;
    s->start[++s->nsamples] = s->ntok;
    return 0;
}

void zinf_sft_free(zinf_sft_samples *s)
{
    if (!s) return;
    free(s->tok);
    free(s->loss);
    free(s->start);
    memset(s, 0, sizeof *s);
}

/* Every id of s in [0, vocab). */
static int check_ids(const zinf_sft_samples *s, const char *which, int32_t vocab)
{
    for (int64_t k = 0; k < s->nsamples; k++)
        for (int64_t i = s->start[k]; i < s->start[k + 1]; i++)
            if (s->tok[i] < 0 || s->tok[i] >= vocab)
                return zinf_err("sft: %s sample %lld, token %lld: id %d is outside the vocabulary of %d", which,
                                (long long)k, (long long)(i - s->start[k]), s->tok[i], vocab);
    return 0;
}

/* The shards of one set as <prefix>_<which>_NNNNNN.bin.part; their names are appended to
 * names[*nn] (each malloc'd, the final name; the file is that plus ".part"). */
static int write_set(const char *prefix, const char *which, const zinf_sft_samples *s, char **names, int *nn)
{
    for (int64_t k0 = 0, idx = 0; k0 < s->nsamples; idx++) {
        int64_t k1 = k0 + 1;
        while (k1 < s->nsamples && s->start[k1 + 1] - s->start[k0] <= SFT_SHARD_TOKENS) k1++;
        size_t len = strlen(prefix) + strlen(which) + 32;
        char *name = malloc(len), *part = malloc(len + 5);
        if (!name || !part) {
            free(name);
            free(part);
            return zinf_errc(ZINF_ENOMEM, "%s: out of memory", prefix);
        }
        snprintf(name, len, "%s_%s_%06lld.bin", prefix, which, (long long)idx);
        snprintf(part, len + 5, "%s.part", name);
        int rc = zinf_data_write_sft_shard(part, (const uint32_t *)(s->tok + s->start[k0]), s->loss + s->start[k0],
                                           s->start[k1] - s->start[k0], s->start + k0, k1 - k0);
        free(part);
        if (rc < 0) {
            free(name);
            return rc;
        }
        names[(*nn)++] = name;
        k0 = k1;
    }
    return 0;
}

int zinf_sft_write_shards(const char *prefix, const zinf_sft_samples *train, const zinf_sft_samples *val,
                          int32_t vocab_size)
{
    if (!train || train->nsamples < 1) return zinf_err("%s: no training samples to write", prefix);
    int has_val = val && val->nsamples > 0;
    ZINF_TRY(check_ids(train, "train", vocab_size));
    if (has_val) ZINF_TRY(check_ids(val, "val", vocab_size));
    /* at most one shard per sample */
    int64_t most = train->nsamples + (has_val ? val->nsamples : 0);
    char **names = calloc((size_t)most, sizeof *names);
    if (!names) return zinf_errc(ZINF_ENOMEM, "%s: out of memory", prefix);
    int nn = 0, rc = write_set(prefix, "train", train, names, &nn), ntrain = nn;
    if (!rc && has_val) rc = write_set(prefix, "val", val, names, &nn);
    /* every shard is whole under its .part name: now the final names, all or none */
    char part[8192];
    int renamed = 0;
    for (; !rc && renamed < nn; renamed++) {
        snprintf(part, sizeof part, "%s.part", names[renamed]);
        if (rename(part, names[renamed]) != 0) {
            int e = errno;
            rc = zinf_errc(-e, "%s: cannot rename %s into place: %s", names[renamed], part, strerror(e));
            break;
        }
    }
    /* the set replaces one written before under the prefix: its shards numbered past the new ones
     * (and its val shards, when no val set is written now) would otherwise join the new set */
    for (int set = 0; !rc && set < 2; set++) {
        const char *which = set ? "val" : "train";
        for (int64_t idx = set ? nn - ntrain : ntrain;; idx++) {
            snprintf(part, sizeof part, "%s_%s_%06lld.bin", prefix, which, (long long)idx);
            if (unlink(part) != 0) break;
        }
    }
    if (rc < 0) /* take back what was written: the shards renamed, the .part files not */
        for (int i = 0; i < nn; i++) {
            snprintf(part, sizeof part, "%s.part", names[i]);
            unlink(i < renamed ? names[i] : part);
        }
    for (int i = 0; i < nn; i++) free(names[i]);
    free(names);
    return rc;
}
