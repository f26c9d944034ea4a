#include "chat.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "file.h"
#include "sft.h"

/* ================================================================ messages ================= */
static const char *role_name[] = {"system", "user", "assistant", "tool"};

static int push_msg(zinf_chat *c, zinf_role role, const char *text, size_t len)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 8;
        zinf_chat_msg *p = realloc(c->m, (size_t)cap * sizeof *p);
        if (!p) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        c->m = p;
        c->cap = cap;
    }
    char *s = malloc(len + 1);
    if (!s) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    memcpy(s, text, len);
    s[len] = 0;
    c->m[c->n++] = (zinf_chat_msg){role, s, 0};
    return 0;
}

static void chat_free(zinf_chat *c)
{
    for (int i = 0; i < c->n; i++) free(c->m[i].content);
    free(c->m);
    *c = (zinf_chat){0};
}

void zinf_chat_set_free(zinf_chat_set *s)
{
    for (int64_t i = 0; i < s->n; i++) chat_free(&s->row[i]);
    free(s->row);
    free(s->path);
    *s = (zinf_chat_set){0};
}

/* ---------------------------------------------------------------- one JSONL row ----------- */
typedef struct rowctx {
    const char *file;
    int64_t line;
} rowctx;

static const char *str_of(json_t *o, const char *const *keys, const char **which)
{
    for (int i = 0; keys[i]; i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (v && !json_is_null(v)) {
            if (which) *which = keys[i];
            return json_is_string(v) ? json_string_value(v) : "";
        }
    }
    return NULL;
}

/* what a JSON value that should have been a string is, for an error line */
static const char *json_kind(const json_t *v)
{
    if (!v) return "missing";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    default: return "not text";
    }
}

/* A key's value when it is a string; a present value of another type is an error. */
static int get_str(const rowctx *r, json_t *o, const char *const *keys, const char **out)
{
    *out = NULL;
    for (int i = 0; keys[i]; i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (!v || json_is_null(v)) continue;
        if (json_is_array(v) && json_array_size(v) > 0 && json_is_string(json_array_get(v, 0))) {
            *out = json_string_value(json_array_get(v, 0)); /* ms-swift: a list response -> its first */
            return 0;
        }
        if (!json_is_string(v))
            return zinf_err("%s:%lld: \"%s\" is not a string", r->file, (long long)r->line, keys[i]);
        *out = json_string_value(v);
        return 0;
    }
    return 0;
}

static int role_of(const rowctx *r, int k, const char *s, zinf_role *out)
{
    static const struct { const char *name; int role; } map[] = {
        {"system", ZINF_ROLE_SYSTEM},     {"user", ZINF_ROLE_USER},          {"human", ZINF_ROLE_USER},
        {"assistant", ZINF_ROLE_ASSISTANT}, {"gpt", ZINF_ROLE_ASSISTANT},  {"bot", ZINF_ROLE_ASSISTANT},
        {"tool", ZINF_ROLE_TOOL},         {"tool_response", ZINF_ROLE_TOOL}, {"observation", ZINF_ROLE_TOOL},
        {"observations", ZINF_ROLE_TOOL}, {"function_response", ZINF_ROLE_TOOL},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(s, map[i].name)) {
            *out = (zinf_role)map[i].role;
            return 0;
        }
    if (!strcmp(s, "tool_call") || !strcmp(s, "function_call"))
        return zinf_errc(ZINF_ENOTSUP, "%s:%lld: message %d: role \"%s\" is not supported; write the call into the "
                         "assistant's content as the model emits it", r->file, (long long)r->line, k + 1, s);
    return zinf_err("%s:%lld: message %d: unknown role \"%s\" (expected system, user, assistant or tool)", r->file,
                    (long long)r->line, k + 1, s);
}

static int read_messages(const rowctx *r, json_t *arr, const char *key, zinf_chat *c)
{
    if (!json_is_array(arr)) return zinf_err("%s:%lld: \"%s\" is not an array", r->file, (long long)r->line, key);
    size_t k;
    json_t *e;
    json_array_foreach(arr, k, e) {
        if (!json_is_object(e))
            return zinf_err("%s:%lld: %s[%zu] is not an object", r->file, (long long)r->line, key, k);
        json_t *rv = json_object_get(e, "role");
        if (!rv) rv = json_object_get(e, "from");
        if (!rv) { /* ShareGPT pairs: {"human": ..., "assistant": ...} */
            static const char *const hk[] = {"human", "user", NULL}, *const ak[] = {"assistant", "gpt", NULL};
            const char *h, *a;
            ZINF_TRY(get_str(r, e, hk, &h));
            ZINF_TRY(get_str(r, e, ak, &a));
            if (!h && !a)
                return zinf_err("%s:%lld: %s[%zu] has no \"role\"/\"from\" and no \"human\"/\"assistant\"", r->file,
                                (long long)r->line, key, k);
            if (h) ZINF_TRY(push_msg(c, ZINF_ROLE_USER, h, strlen(h)));
            if (h) c->m[c->n - 1].src = (int)k + 1;
            if (a) ZINF_TRY(push_msg(c, ZINF_ROLE_ASSISTANT, a, strlen(a)));
            if (a) c->m[c->n - 1].src = (int)k + 1;
            continue;
        }
        if (!json_is_string(rv))
            return zinf_err("%s:%lld: message %zu: the role is not a string", r->file, (long long)r->line, k + 1);
        zinf_role role = ZINF_ROLE_USER;
        ZINF_TRY(role_of(r, (int)k, json_string_value(rv), &role));
        if (json_object_get(e, "tool_calls"))
            return zinf_errc(ZINF_ENOTSUP, "%s:%lld: message %zu: \"tool_calls\" is not supported; write the call "
                             "into the assistant's content as the model emits it", r->file, (long long)r->line, k + 1);
        /* ms-swift's per-message fields that change the text or the loss: refused, not ignored */
        static const char *const unsup[] = {"loss", "loss_scale", "reasoning_content", NULL};
        for (int u = 0; unsup[u]; u++)
            if (json_object_get(e, unsup[u]))
                return zinf_errc(ZINF_ENOTSUP, "%s:%lld: message %zu: \"%s\" is not supported (every reply is "
                                 "trained, as ms-swift's default --loss_scale trains it)", r->file, (long long)r->line,
                                 k + 1, unsup[u]);
        json_t *cv = json_object_get(e, "content");
        if (!cv) cv = json_object_get(e, "value");
        if (!json_is_string(cv))
            return zinf_err("%s:%lld: message %zu (%s): the content is %s, not a string", r->file, (long long)r->line,
                            k + 1, role_name[role], json_kind(cv));
        ZINF_TRY(push_msg(c, role, json_string_value(cv), json_string_length(cv)));
        c->m[c->n - 1].src = (int)k + 1;
    }
    return 0;
}

/* One object -> c->m in ms-swift's standard form (an optional system message first). */
static int read_row(const rowctx *r, json_t *o, zinf_chat *c)
{
    static const char *const sys_keys[] = {"system", "system_prompt", NULL};
    static const char *const msg_keys[] = {"messages", "conversations", "conversation", NULL};
    static const char *const q_keys[] = {"query", "prompt", "input", "instruction", "question", "problem", NULL};
    static const char *const a_keys[] = {"response", "answer", "output", "targets", "target", "answer_key",
                                         "answers", "solution", "text", "completion", "content", NULL};
    /* ms-swift's row fields that change the text (tools, media) or belong to other trainings
     * (preference pairs): refused, not ignored; other columns are ignored, as ms-swift drops them */
    static const char *const unsup[] = {"tools", "images", "videos", "audios", "objects", "rejected_response",
                                        "rejected_messages", "chosen", "rejected", "label", "channel",
                                        "chat_template_kwargs", NULL};
    for (int u = 0; unsup[u]; u++)
        if (json_object_get(o, unsup[u]) && !json_is_null(json_object_get(o, unsup[u])))
            return zinf_errc(ZINF_ENOTSUP, "%s:%lld: \"%s\" is not supported by zinf data --sft", r->file,
                             (long long)r->line, unsup[u]);
    const char *sys;
    ZINF_TRY(get_str(r, o, sys_keys, &sys));
    if (sys) ZINF_TRY(push_msg(c, ZINF_ROLE_SYSTEM, sys, strlen(sys)));
    const char *mk = NULL;
    str_of(o, msg_keys, &mk);
    if (mk) {
        int before = c->n;
        ZINF_TRY(read_messages(r, json_object_get(o, mk), mk, c));
        /* a system message in the list wins over the row's "system" */
        if (before == 1 && c->n > 1 && c->m[1].role == ZINF_ROLE_SYSTEM) {
            free(c->m[0].content);
            memmove(c->m, c->m + 1, (size_t)(c->n - 1) * sizeof *c->m);
            c->n--;
        }
        return 0;
    }
    const char *q = NULL, *a = NULL, *ins, *inp;
    static const char *const ins_k[] = {"instruction", NULL}, *const inp_k[] = {"input", NULL};
    ZINF_TRY(get_str(r, o, ins_k, &ins));
    ZINF_TRY(get_str(r, o, inp_k, &inp));
    char *joined = NULL;
    if (ins && inp) { /* Alpaca: instruction + "\n" + input when both are non-empty */
        if (*ins && *inp) {
            size_t a1 = strlen(ins), a2 = strlen(inp);
            if (!(joined = malloc(a1 + a2 + 2))) return zinf_errc(ZINF_ENOMEM, "out of host memory");
            memcpy(joined, ins, a1);
            joined[a1] = '\n';
            memcpy(joined + a1 + 1, inp, a2 + 1);
            q = joined;
        } else q = *ins ? ins : inp;
    } else ZINF_TRY(get_str(r, o, q_keys, &q));
    int rc = get_str(r, o, a_keys, &a);
    json_t *hist = json_object_get(o, "history");
    if (!rc && !q && !a && !hist) {
        rc = zinf_err("%s:%lld: no layout matches: expected \"messages\", \"conversations\", "
                      "\"instruction\"/\"output\" or \"query\"/\"response\"", r->file, (long long)r->line);
    }
    if (!rc && hist && !json_is_null(hist)) {
        size_t k;
        json_t *p;
        if (!json_is_array(hist)) rc = zinf_err("%s:%lld: \"history\" is not a list", r->file, (long long)r->line);
        else json_array_foreach(hist, k, p) {
            if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_string(json_array_get(p, 0)) ||
                !json_is_string(json_array_get(p, 1))) {
                rc = zinf_err("%s:%lld: history[%zu] is not a [query, response] pair of strings", r->file,
                              (long long)r->line, k);
                break;
            }
            json_t *hq = json_array_get(p, 0), *ha = json_array_get(p, 1);
            if ((rc = push_msg(c, ZINF_ROLE_USER, json_string_value(hq), json_string_length(hq))) ||
                (rc = push_msg(c, ZINF_ROLE_ASSISTANT, json_string_value(ha), json_string_length(ha))))
                break;
        }
    }
    if (!rc) rc = push_msg(c, ZINF_ROLE_USER, q ? q : "", q ? strlen(q) : 0);
    if (!rc && a) rc = push_msg(c, ZINF_ROLE_ASSISTANT, a, strlen(a));
    free(joined);
    return rc;
}

/* ms-swift's standard form: consecutive user (or assistant) messages joined, an assistant first is
 * answered to an empty user message, a tool message must follow an assistant or another tool, and
 * the conversation ends with an assistant message. *has_asst is false when there is none (the row
 * is skipped, not an error). */
static int normalize(const rowctx *r, zinf_chat *c, bool *has_asst)
{
    *has_asst = false;
    for (int i = 0; i < c->n; i++) *has_asst |= c->m[i].role == ZINF_ROLE_ASSISTANT;
    if (!*has_asst) return 0;
#define SRC(i) (c->m[i].src ? c->m[i].src : (i) + 1) /* the message's number in the row's list */
    for (int i = 1; i < c->n; i++)
        if (c->m[i].role == ZINF_ROLE_SYSTEM)
            return zinf_err("%s:%lld: roles out of order: message %d is a system message; only the first may be",
                            r->file, (long long)r->line, SRC(i));
    int s = c->n > 0 && c->m[0].role == ZINF_ROLE_SYSTEM;
    if (s < c->n && c->m[s].role == ZINF_ROLE_TOOL)
        return zinf_err("%s:%lld: roles out of order: message %d is a tool message that follows no assistant "
                        "message", r->file, (long long)r->line, SRC(s));
    for (int i = s + 1; i < c->n; i++)
        if (c->m[i].role == ZINF_ROLE_TOOL && c->m[i - 1].role == ZINF_ROLE_USER)
            return zinf_err("%s:%lld: roles out of order: message %d is a tool message after a user message",
                            r->file, (long long)r->line, SRC(i));
    if (s < c->n && c->m[s].role == ZINF_ROLE_ASSISTANT) { /* pretraining rows: an empty query */
        ZINF_TRY(push_msg(c, ZINF_ROLE_USER, "", 0));
        zinf_chat_msg u = c->m[c->n - 1];
        memmove(c->m + s + 1, c->m + s, (size_t)(c->n - 1 - s) * sizeof *c->m);
        c->m[s] = u;
    }
    int w = s, n0 = c->n;
    for (int i = s; i < n0; i++) {
        zinf_chat_msg *m = &c->m[i];
        if (w > s && (m->role == ZINF_ROLE_USER || m->role == ZINF_ROLE_ASSISTANT) && c->m[w - 1].role == m->role) {
            zinf_chat_msg *p = &c->m[w - 1]; /* joined with nothing between, as ms-swift does */
            size_t a = strlen(p->content), b = strlen(m->content);
            char *j = realloc(p->content, a + b + 1);
            if (!j) { /* keep the list whole for chat_free: the unjoined rest follows what is joined */
                memmove(c->m + w, c->m + i, (size_t)(n0 - i) * sizeof *c->m);
                c->n = w + (n0 - i);
                return zinf_errc(ZINF_ENOMEM, "out of host memory");
            }
            memcpy(j + a, m->content, b + 1);
            p->content = j;
            free(m->content);
            continue;
        }
        c->m[w++] = *m;
    }
    c->n = w;
    /* rounds: a query (a user message, or the tool messages after a reply), then a reply */
    for (int i = s; i < c->n;) {
        if (c->m[i].role == ZINF_ROLE_TOOL)
            while (i + 1 < c->n && c->m[i + 1].role == ZINF_ROLE_TOOL) i++;
        i++;
        if (i < c->n && c->m[i].role != ZINF_ROLE_ASSISTANT)
            return zinf_err("%s:%lld: roles out of order: message %d is a %s message after a %s message, not after "
                            "an assistant reply", r->file, (long long)r->line, SRC(i), role_name[c->m[i].role],
                            role_name[c->m[i - 1].role]);
        i++;
    }
#undef SRC
    if (c->m[c->n - 1].role != ZINF_ROLE_ASSISTANT)
        return zinf_err("%s:%lld: roles out of order: the conversation ends with a %s message, not an assistant reply",
                        r->file, (long long)r->line, role_name[c->m[c->n - 1].role]);
    return 0;
}

/* ---------------------------------------------------------------- the file ---------------- */
static int push_row(zinf_chat_set *s, zinf_chat *c)
{
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 256;
        zinf_chat *p = realloc(s->row, (size_t)cap * sizeof *p);
        if (!p) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        s->row = p;
        s->cap = cap;
    }
    s->row[s->n++] = *c;
    return 0;
}

static int read_file_rows(const char *flag, const char *path, zinf_chat_set *s)
{
    char *buf;
    size_t len;
    ZINF_TRY(zinf_read_file(flag, path, &buf, &len));
    int rc = 0;
    int64_t lineno = 0;
    /* a UTF-8 byte order mark before the first line, as some editors write it (Hugging Face's
     * datasets reads past it too) */
    size_t at0 = len >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3) ? 3 : 0;
    for (size_t at = at0; at < len && !rc;) {
        const char *line = buf + at;
        const char *nl = memchr(line, '\n', len - at);
        size_t n = nl ? (size_t)(nl - line) : len - at;
        at += n + 1;
        lineno++;
        rowctx r = {path, lineno};
        size_t bad = zinf_utf8_check(line, n);
        if (bad < n) {
            rc = zinf_err("%s:%lld: invalid UTF-8 at byte %zu of the file (byte %zu of the line): 0x%02x", path,
                          (long long)lineno, (size_t)(line - buf) + bad, bad, (unsigned char)line[bad]);
            break;
        }
        const char *nul = memchr(line, 0, n);
        if (nul) {
            rc = zinf_err("%s:%lld: a NUL byte at byte %zu of the file (byte %zu of the line): not JSON text", path,
                          (long long)lineno, (size_t)(nul - buf), (size_t)(nul - line));
            break;
        }
        size_t k = 0;
        while (k < n && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) k++;
        if (k == n) continue; /* a blank line */
        json_error_t je;
        json_t *o = json_loadb(line, n, 0, &je);
        if (!o && strstr(je.text, "\\u0000")) { /* valid JSON, but a C string cannot hold it */
            rc = zinf_err("%s:%lld: a string holds \\u0000 (NUL) at column %d, which zinf's text handling does not "
                          "take", path, (long long)lineno, je.column);
            break;
        }
        if (!o) {
            rc = zinf_err("%s:%lld: malformed JSON at column %d: %s", path, (long long)lineno, je.column, je.text);
            break;
        }
        zinf_chat c = {.line = lineno};
        bool has = false;
        if (!json_is_object(o))
            rc = zinf_err("%s:%lld: a JSON %s where a line holds an object", path, (long long)lineno,
                          json_is_array(o) ? "array" : "value");
        if (!rc) rc = read_row(&r, o, &c);
        if (!rc) rc = normalize(&r, &c, &has);
        json_decref(o);
        if (!rc && has) rc = push_row(s, &c);
        else {
            if (!rc) s->no_assistant++;
            chat_free(&c);
        }
    }
    free(buf);
    return rc;
}

int zinf_chat_spec(const char *spec, char **path, int64_t *want)
{
    *path = NULL;
    *want = 0;
    const char *hash = strrchr(spec, '#');
    struct stat st;
    size_t plen = strlen(spec);
    /* a file of that very name is read whole, '#' and all */
    if (hash && stat(spec, &st) != 0) {
        const char *d = hash + 1;
        if (!*d || strspn(d, "0123456789") != strlen(d))
            return zinf_err("%s: no such file, and '%s' after its last '#' is not a sample count (FILE#N takes N as "
                            "decimal digits alone)", spec, d);
        int64_t v = 0;
        for (; *d; d++) {
            if (v > (INT64_MAX - (*d - '0')) / 10)
                return zinf_err("%s: the sample count after '#' is larger than %lld", spec, (long long)INT64_MAX);
            v = v * 10 + (*d - '0');
        }
        if (v == 0)
            return zinf_err("%s: the sample count after '#' is 0: give N >= 1, or the file alone for every sample", spec);
        *want = v;
        plen = (size_t)(hash - spec);
    }
    if (!(*path = strndup(spec, plen))) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    return 0;
}

int zinf_chat_read(const char *flag, const char *spec, zinf_chat_set *out)
{
    *out = (zinf_chat_set){0};
    ZINF_TRY(zinf_chat_spec(spec, &out->path, &out->want));
    int rc = read_file_rows(flag, out->path, out);
    if (rc) zinf_chat_set_free(out);
    return rc;
}

/* ================================================================ sampling ================= */
/* numpy's RandomState: MT19937 seeded from one integer (init_genrand); its legacy bounded integers
 * (random_interval, and randint's masked path, which is the same for 32-bit ranges): the smallest
 * all-ones mask >= max, 32-bit draws while max fits in 32 bits, rejection of values above max.
 * permutation(n) shuffles arange(n) from the last index down, j = interval(i). */
typedef struct { uint32_t mt[624]; int i; } mt19937;

static void mt_seed(mt19937 *g, uint32_t s)
{
    g->mt[0] = s;
    for (int i = 1; i < 624; i++) g->mt[i] = 1812433253u * (g->mt[i - 1] ^ (g->mt[i - 1] >> 30)) + (uint32_t)i;
    g->i = 624;
}

static uint32_t mt_next(mt19937 *g)
{
    if (g->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (g->mt[k] & 0x80000000u) | (g->mt[(k + 1) % 624] & 0x7fffffffu);
            g->mt[k] = g->mt[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1) ? 0x9908b0dfu : 0);
        }
        g->i = 0;
    }
    uint32_t y = g->mt[g->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* numpy's Generator (np.random.default_rng(seed)): PCG64 (XSL-RR, 128-bit LCG) whose state and
 * increment come from SeedSequence(seed).generate_state(4, uint64); 32-bit draws are the low, then
 * the high half of one 64-bit output. */
typedef struct { unsigned __int128 state, inc; int has32; uint32_t half; } pcg64;

typedef struct bitgen {
    mt19937 *mt;
    pcg64 *pcg;
} bitgen;

static uint64_t pcg_next64(pcg64 *g)
{
    const unsigned __int128 mult = ((unsigned __int128)2549297995355413924ull << 64) | 4865540595714422341ull;
    g->state = g->state * mult + g->inc;
    uint64_t x = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
    unsigned rot = (unsigned)(g->state >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static uint32_t next32(bitgen *b)
{
    if (b->mt) return mt_next(b->mt);
    pcg64 *g = b->pcg;
    if (g->has32) {
        g->has32 = 0;
        return g->half;
    }
    uint64_t v = pcg_next64(g);
    g->has32 = 1;
    g->half = (uint32_t)(v >> 32);
    return (uint32_t)v;
}

static uint64_t next64(bitgen *b)
{
    if (b->pcg) return pcg_next64(b->pcg);
    uint64_t hi = mt_next(b->mt); /* numpy's MT19937 next_uint64: the first draw is the high half */
    return hi << 32 | mt_next(b->mt);
}

static uint64_t interval(bitgen *b, uint64_t max)
{
    if (max == 0) return 0;
    uint64_t mask = max, v;
    for (int s = 1; s <= 32; s *= 2) mask |= mask >> s;
    if (max <= 0xffffffffu) {
        while ((v = (next32(b) & mask)) > max) {}
    } else {
        while ((v = (next64(b) & mask)) > max) {}
    }
    return v;
}

static void shuffle(bitgen *b, int64_t *perm, int64_t len)
{
    for (int64_t i = 0; i < len; i++) perm[i] = i;
    for (int64_t i = len - 1; i >= 1; i--) {
        int64_t j = (int64_t)interval(b, (uint64_t)i);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* SeedSequence's hash of the integer seed into a pool of four words, and generate_state */
static uint32_t ss_hashmix(uint32_t v, uint32_t *h)
{
    v ^= *h;
    *h *= 0x931e8875u;
    v *= *h;
    return v ^ (v >> 16);
}

static uint32_t ss_mix(uint32_t x, uint32_t y)
{
    uint32_t r = 0xca01f9ddu * x - 0x4973f715u * y;
    return r ^ (r >> 16);
}

static void pcg_seed(pcg64 *g, uint64_t seed)
{
    uint32_t ent[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, pool[4], h = 0x43b0d7e5u;
    int nent = seed >> 32 ? 2 : 1;
    for (int i = 0; i < 4; i++) pool[i] = ss_hashmix(i < nent ? ent[i] : 0, &h);
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 4; d++)
            if (s != d) pool[d] = ss_mix(pool[d], ss_hashmix(pool[s], &h));
    uint32_t w[8], hb = 0x8b51f9ddu;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % 4] ^ hb;
        hb *= 0x58f38dedu;
        v *= hb;
        w[i] = v ^ (v >> 16);
    }
    uint64_t st[4];
    for (int i = 0; i < 4; i++) st[i] = (uint64_t)w[2 * i] | (uint64_t)w[2 * i + 1] << 32;
    unsigned __int128 initstate = (unsigned __int128)st[0] << 64 | st[1];
    unsigned __int128 initseq = (unsigned __int128)st[2] << 64 | st[3];
    *g = (pcg64){0};
    g->inc = initseq << 1 | 1;
    pcg_next64(g);
    g->state += initstate;
    pcg_next64(g);
}

int zinf_chat_permutation(int64_t len, uint32_t seed, int64_t *perm)
{
    mt19937 mt;
    mt_seed(&mt, seed);
    bitgen b = {&mt, NULL};
    shuffle(&b, perm, len);
    return 0;
}

int zinf_chat_rng_permutation(int64_t len, uint64_t seed, int64_t *perm)
{
    pcg64 g;
    pcg_seed(&g, seed);
    bitgen b = {NULL, &g};
    shuffle(&b, perm, len);
    return 0;
}

/* ms-swift's sample_dataset: n of len rows, the RandomState b shared with the caller */
static int sample_rows(bitgen *b, int64_t len, int64_t n, int64_t *idx)
{
    if (len <= 0) return zinf_err("cannot take %lld samples from an empty dataset", (long long)n);
    int64_t k = 0;
    for (int64_t rep = 0; rep < n / len; rep++)
        for (int64_t i = 0; i < len; i++) idx[k++] = i;
    if (n % len) {
        int64_t *p = malloc((size_t)len * sizeof *p);
        if (!p) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        shuffle(b, p, len);
        for (int64_t i = 0; i < n % len; i++) idx[k++] = p[i];
        free(p);
    }
    return 0;
}

int zinf_chat_select(int64_t len, int64_t want, double ratio, uint32_t seed, int64_t **train, int64_t *ntrain,
                     int64_t **val, int64_t *nval)
{
    *train = *val = NULL;
    *ntrain = *nval = 0;
    if (!(ratio >= 0 && ratio < 1)) return zinf_err("--split_dataset_ratio %g: expected 0 <= ratio < 1", ratio);
    int64_t n = want > 0 ? want : len, nv = 0;
    if (ratio > 0) {
        nv = (int64_t)((double)(len < n ? len : n) * ratio);
        if (nv < 1) nv = 1;
        if (n - nv < 1 || len - nv < 1)
            return zinf_err("--split_dataset_ratio %g leaves no training sample of %lld", ratio, (long long)n);
    }
    mt19937 mt;
    mt_seed(&mt, seed);
    bitgen rs = {&mt, NULL};
    if ((uint64_t)n > SIZE_MAX / sizeof(int64_t) || (uint64_t)len > SIZE_MAX / sizeof(int64_t))
        return zinf_errc(ZINF_ENOMEM, "a list of %lld samples is more than memory can address", (long long)n);
    int64_t *t = malloc((size_t)(n - nv) * sizeof *t), *v = malloc((size_t)(nv ? nv : 1) * sizeof *v);
    int64_t *p = malloc((size_t)(len ? len : 1) * sizeof *p), *rest = p + nv;
    int rc = t && v && p ? 0 : zinf_errc(ZINF_ENOMEM, "out of host memory for a list of %lld samples", (long long)n);
    if (!rc && nv == 0) rc = sample_rows(&rs, len, n, t);
    else if (!rc) {
        /* datasets' train_test_split(test_size=nv, seed=get_seed(rs)): default_rng(seed).permutation,
         * its head for validation; then the training part sampled with rs */
        uint64_t s = interval(&rs, 2147483646u); /* RandomState.randint(2**31 - 1) */
        zinf_chat_rng_permutation(len, s, p);
        memcpy(v, p, (size_t)nv * sizeof *v);
        rc = sample_rows(&rs, len - nv, n - nv, t);
        for (int64_t i = 0; !rc && i < n - nv; i++) t[i] = rest[t[i]];
    }
    free(p);
    if (rc) {
        free(t);
        free(v);
        return rc;
    }
    *train = t;
    *ntrain = n - nv;
    *val = v;
    *nval = nv;
    return 0;
}

/* ================================================================ templates ================ */
enum { TOOL_NONE, TOOL_HERMES, TOOL_LLAMA3 };

struct zinf_template {
    const char *name;
    const char *prefix;        /* without a system message; may hold {{SYSTEM}} (llama3_2) */
    const char *system_prefix; /* with one ({{SYSTEM}}); NULL: the prefix holds it */
    const char *prompt;        /* {{QUERY}} */
    const char *chat_sep, *suffix;
    const char *default_system;
    int tool;                  /* how tool results are written (the format ms-swift picks for the model) */
    bool thinking;             /* qwen3: the empty <think> block on replies, untrained */
    bool dated;                /* llama3_2: "Today Date" in the prefix */
};

#define CHATML_SYS "<|im_start|>system\n{{SYSTEM}}<|im_end|>\n"
#define CHATML_PROMPT "<|im_start|>user\n{{QUERY}}<|im_end|>\n<|im_start|>assistant\n"
#define L3_SYS "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{{SYSTEM}}<|eot_id|>"
#define L3_PROMPT "<|start_header_id|>user<|end_header_id|>\n\n{{QUERY}}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
#define L3_DATED "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: {{DATE}}\n\n{{SYSTEM}}<|eot_id|>"

static const zinf_template templates[] = {
    {"qwen", "", CHATML_SYS, CHATML_PROMPT, "<|im_end|>\n", "<|im_end|>\n", "You are a helpful assistant.",
     TOOL_HERMES, false, false},
    {"qwen2_5", "", CHATML_SYS, CHATML_PROMPT, "<|im_end|>\n", "<|im_end|>\n",
     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", TOOL_HERMES, false, false},
    {"qwen3", "", CHATML_SYS, CHATML_PROMPT, "<|im_end|>\n", "<|im_end|>\n", NULL, TOOL_HERMES, true, false},
    {"qwen3_nothinking", "", CHATML_SYS, CHATML_PROMPT, "<|im_end|>\n", "<|im_end|>\n", NULL, TOOL_HERMES, false,
     false},
    {"llama3", "<|begin_of_text|>", L3_SYS, L3_PROMPT, "<|eot_id|>", "<|eot_id|>", NULL, TOOL_LLAMA3, false, false},
    {"llama3_2", L3_DATED, NULL, L3_PROMPT, "<|eot_id|>", "<|eot_id|>", NULL, TOOL_LLAMA3, false, true},
    {"chatml", "", CHATML_SYS, CHATML_PROMPT, "<|im_end|>\n", "<|im_end|>\n", NULL, TOOL_NONE, false, false},
};
#define NTEMPLATES (sizeof templates / sizeof *templates)

const char *zinf_template_names(void) { return "qwen, qwen2_5, qwen3, qwen3_nothinking, llama3, llama3_2, chatml"; }
bool zinf_template_dated(const zinf_template *t) { return t->dated; }

const char *zinf_template_name(const zinf_template *t) { return t->name; }

const zinf_template *zinf_template_find(const char *name)
{
    for (size_t i = 0; i < NTEMPLATES; i++)
        if (!strcmp(name, templates[i].name)) return &templates[i];
    /* ms-swift's other spellings of the same templates */
    if (!strcmp(name, "llama3_1")) return zinf_template_find("llama3_2");
    zinf_err("unknown template '%s' (built in: %s)", name, zinf_template_names());
    return NULL;
}

int zinf_template_detect(const char *dir, const zinf_template **out)
{
    char path[4200];
    json_error_t je;
    snprintf(path, sizeof path, "%s/config.json", dir);
    ZINF_TRY(zinf_refuse_irregular(NULL, path));
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) return zinf_err("%s: %s; give --template NAME (%s)", path, je.text, zinf_template_names());
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    char type[64];
    snprintf(type, sizeof type, "%s", mt ? mt : "");
    json_decref(cfg);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    ZINF_TRY(zinf_refuse_irregular(NULL, path));
    json_t *tc = json_load_file(path, 0, &je);
    const char *ct = NULL;
    if (tc) {
        json_t *v = json_object_get(tc, "chat_template");
        if (json_is_array(v)) { /* [{"name": "default", "template": ...}, ...] */
            size_t k;
            json_t *e;
            json_array_foreach(v, k, e) {
                const char *nm = json_string_value(json_object_get(e, "name"));
                if (nm && !strcmp(nm, "default")) ct = json_string_value(json_object_get(e, "template"));
            }
        } else ct = json_string_value(v);
    }
    const char *name = NULL;
#define HAS(s) (ct && strstr(ct, s))
    if (!strcmp(type, "qwen3") || !strcmp(type, "qwen3_moe")) {
        /* hybrid thinking (Qwen3-8B) switches with enable_thinking; Instruct-2507 has no <think>;
         * Thinking-2507 always thinks, which ms-swift's qwen3_thinking renders and zinf does not */
        if (HAS("enable_thinking") || !ct) name = "qwen3";
        else if (!HAS("<think>")) name = "qwen3_nothinking";
        else {
            json_decref(tc);
            return zinf_errc(ZINF_ENOTSUP, "%s: a Qwen3 thinking-only chat template (ms-swift's qwen3_thinking) is "
                             "not built in; give --template NAME (%s)", dir, zinf_template_names());
        }
    } else if (!strcmp(type, "qwen2") || !strcmp(type, "qwen2_moe"))
        name = HAS("You are Qwen, created by Alibaba Cloud") ? "qwen2_5" : "qwen";
    else if (!strcmp(type, "llama") && HAS("<|start_header_id|>"))
        name = HAS("Today Date") || HAS("date_string") ? "llama3_2" : "llama3";
    else if (HAS("<|im_start|>")) name = "chatml";
#undef HAS
    json_decref(tc);
    if (!name)
        return zinf_err("%s: no built-in template fits model_type '%s'%s; give --template NAME (%s)", dir, type,
                        ct ? " and its chat_template" : " (no chat_template in tokenizer_config.json)",
                        zinf_template_names());
    *out = zinf_template_find(name);
    return 0;
}

/* ---------------------------------------------------------------- rendering --------------- */
typedef struct sbuf { char *p; size_t n, cap; } sbuf;

static int sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}
static int sb_str(sbuf *b, const char *s) { return sb_add(b, s, strlen(s)); }

/* s with {{KEY}} replaced by val, appended to b */
static int sb_subst(sbuf *b, const char *s, const char *key, const char *val)
{
    const char *at = strstr(s, key);
    if (!at) return sb_str(b, s);
    ZINF_TRY(sb_add(b, s, (size_t)(at - s)));
    ZINF_TRY(sb_str(b, val));
    return sb_str(b, at + strlen(key));
}

/* ms-swift's context list before merging: (text, weight) in order; empty texts are kept, since in
 * _simplify_context_list an empty context of another weight still ends a run. */
typedef struct ctxl { sbuf *s; uint8_t *w; int n, cap; } ctxl;

static int ctx_push(ctxl *l, uint8_t w)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        sbuf *s = realloc(l->s, (size_t)cap * sizeof *s);
        if (!s) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        l->s = s;
        uint8_t *w2 = realloc(l->w, (size_t)cap);
        if (!w2) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        l->w = w2;
        l->cap = cap;
    }
    l->s[l->n] = (sbuf){0};
    ZINF_TRY(sb_add(&l->s[l->n], "", 0));
    l->w[l->n++] = w;
    return 0;
}

static void ctx_free(ctxl *l)
{
    for (int i = 0; i < l->n; i++) free(l->s[i].p);
    free(l->s);
    free(l->w);
}

void zinf_segs_free(zinf_segs *s)
{
    for (int i = 0; i < s->n; i++) free(s->text[i]);
    free(s->text);
    free(s->loss);
    *s = (zinf_segs){0};
}

/* llama3_2's date: the one given, ZINF_CHAT_DATE, else today (UTC) as "26 Jul 2024" */
void zinf_chat_date(const zinf_chat_opts *o, char *out, size_t cap)
{
    const char *d = o && o->date ? o->date : getenv("ZINF_CHAT_DATE");
    if (d && *d) {
        snprintf(out, cap, "%s", d);
        return;
    }
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    static const char *const mon[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    snprintf(out, cap, "%02d %s %04d", tm.tm_mday, mon[tm.tm_mon], tm.tm_year + 1900);
    return;
}

/* Python's \s over ASCII and the Unicode spaces that appear in practice */
static size_t space_len(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    if (*u == ' ' || (*u >= 0x09 && *u <= 0x0d) || (*u >= 0x1c && *u <= 0x1f)) return 1;
    if (u[0] == 0xc2 && (u[1] == 0x85 || u[1] == 0xa0)) return 2;
    if (u[0] == 0xe3 && u[1] == 0x80 && u[2] == 0x80) return 3;
    if (u[0] == 0xe2 && u[1] == 0x80 && ((u[2] >= 0x80 && u[2] <= 0x8a) || u[2] == 0xa8 || u[2] == 0xa9 || u[2] == 0xaf))
        return 3;
    if (u[0] == 0xe2 && u[1] == 0x81 && u[2] == 0x9f) return 3;
    if (u[0] == 0xe1 && u[1] == 0x9a && u[2] == 0x80) return 3;
    return 0;
}

/* Length of the match of ^<think>\s*</think>\s* (ms-swift's ignore_empty_think), 0 if none. */
static size_t empty_think(const char *s)
{
    const char *p = s, *open = "<think>", *close = "</think>";
    size_t k;
    if (strncmp(p, open, strlen(open))) return 0;
    p += strlen(open);
    while ((k = space_len(p))) p += k;
    if (strncmp(p, close, strlen(close))) return 0;
    p += strlen(close);
    while ((k = space_len(p))) p += k;
    return (size_t)(p - s);
}

static int build_contexts(const zinf_template *t, const zinf_chat *c, const zinf_chat_opts *o, ctxl *l)
{
    int first = 0;
    const char *system = t->default_system;
    if (o && o->system) system = o->system;
    if (c->n > 0 && c->m[0].role == ZINF_ROLE_SYSTEM) {
        system = c->m[0].content;
        first = 1;
    }
    if (system && !*system) system = NULL;
    ZINF_TRY(ctx_push(l, 0));
    if (t->dated) {
        char date[64];
        zinf_chat_date(o, date, sizeof date);
        sbuf tmp = {0};
        int rc = sb_subst(&tmp, t->prefix, "{{DATE}}", date);
        if (!rc) rc = sb_subst(&l->s[l->n - 1], tmp.p, "{{SYSTEM}}", system ? system : "");
        free(tmp.p);
        ZINF_TRY(rc);
    } else if (system) ZINF_TRY(sb_subst(&l->s[l->n - 1], t->system_prefix, "{{SYSTEM}}", system));
    else ZINF_TRY(sb_str(&l->s[l->n - 1], t->prefix));
    /* rounds: a query (one user message, or the tool messages after a reply) and its reply */
    int i = first;
    bool after_reply = false;
    while (i < c->n) {
        if (after_reply) {
            ZINF_TRY(ctx_push(l, 0));
            ZINF_TRY(sb_str(&l->s[l->n - 1], t->chat_sep));
        }
        ZINF_TRY(ctx_push(l, 0));
        sbuf *q = &l->s[l->n - 1];
        if (c->m[i].role == ZINF_ROLE_USER) {
            ZINF_TRY(sb_subst(q, t->prompt, "{{QUERY}}", c->m[i].content));
            i++;
        } else { /* tool messages, grouped */
            if (t->tool == TOOL_NONE)
                return zinf_errc(ZINF_ENOTSUP, "the template %s has no tool-message format built in "
                                 "(ms-swift writes them in its ReAct format there); use a qwen or llama3 "
                                 "template", t->name);
            sbuf all = {0};
            int rc = 0;
            for (int k = 0; i < c->n && c->m[i].role == ZINF_ROLE_TOOL && !rc; i++, k++) {
                if (t->tool == TOOL_HERMES) {
                    if (k) rc = sb_str(&all, "\n");
                    if (!rc) rc = sb_str(&all, "<tool_response>\n");
                    if (!rc) rc = sb_str(&all, c->m[i].content);
                    if (!rc) rc = sb_str(&all, "\n</tool_response>");
                } else {
                    rc = sb_str(q, "<|start_header_id|>tool<|end_header_id|>\n\n");
                    if (!rc) rc = sb_str(q, c->m[i].content);
                    if (!rc) rc = sb_str(q, "<|eot_id|>");
                }
            }
            if (!rc && t->tool == TOOL_HERMES) rc = sb_subst(q, t->prompt, "{{QUERY}}", all.p ? all.p : "");
            if (!rc && t->tool == TOOL_LLAMA3) rc = sb_str(q, "<|start_header_id|>assistant<|end_header_id|>\n\n");
            free(all.p);
            ZINF_TRY(rc);
        }
        /* the reply (normalize guarantees one follows each query in a dataset); none after the
         * last query: the prompt a reply is generated from, which ends with the assistant header
         * (HF's add_generation_prompt) and, for qwen3, the empty think block of thinking off */
        if (i == c->n) return t->thinking ? sb_str(q, "<think>\n\n</think>\n\n") : 0;
        const char *r = c->m[i].content;
        i++;
        sbuf think = {0};
        if (t->thinking) {
            /* the non-thinking prefix on each reply that has no <think>, as ms-swift adds it in training;
             * then ignore_empty_think: ^<think>\s*</think>\s* of the reply is untrained (so the spaces
             * that open a reply go with it) */
            int rc = strncmp(r, "<think>", 7) ? sb_str(&think, "<think>\n\n</think>\n\n") : 0;
            if (!rc) rc = sb_str(&think, r);
            if (rc) {
                free(think.p);
                return rc;
            }
            r = think.p;
            size_t e = empty_think(r);
            rc = sb_add(&l->s[l->n - 1], r, e);
            if (rc) {
                free(think.p);
                return rc;
            }
            r += e;
        }
        int prc = ctx_push(l, 1);
        if (!prc) prc = sb_str(&l->s[l->n - 1], r);
        if (prc) {
            free(think.p);
            return prc;
        }
        after_reply = true;
        if (i == c->n) { /* the last reply ends with the suffix, trained, unless it already does */
            size_t rl = strlen(r), sl = strlen(t->suffix);
            if (!(rl >= sl && !strcmp(r + rl - sl, t->suffix))) {
                prc = ctx_push(l, 1);
                if (!prc) prc = sb_str(&l->s[l->n - 1], t->suffix);
            }
        }
        free(think.p);
        ZINF_TRY(prc);
    }
    return 0;
}

static int segs_push(zinf_segs *s, char *text, uint8_t loss)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        char **t = realloc(s->text, (size_t)cap * sizeof *t);
        if (!t) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        s->text = t;
        uint8_t *l = realloc(s->loss, (size_t)cap);
        if (!l) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        s->loss = l;
        s->cap = cap;
    }
    s->text[s->n] = text;
    s->loss[s->n++] = loss;
    return 0;
}

int zinf_chat_render(const zinf_template *t, const zinf_chat *c, const zinf_chat_opts *o, zinf_segs *out)
{
    *out = (zinf_segs){0};
    ctxl l = {0};
    int rc = build_contexts(t, c, o, &l);
    /* join runs of equal weight; a run's text, when not empty, is one segment */
    sbuf run = {0};
    int w = -1;
    for (int i = 0; i <= l.n && !rc; i++) {
        if (i < l.n && l.w[i] == w) {
            rc = sb_add(&run, l.s[i].p, l.s[i].n);
            continue;
        }
        if (run.n) {
            rc = segs_push(out, run.p, (uint8_t)w);
            if (rc) break;
            run = (sbuf){0};
        }
        run.n = 0;
        if (i < l.n) {
            w = l.w[i];
            rc = sb_add(&run, l.s[i].p, l.s[i].n);
        }
    }
    free(run.p);
    ctx_free(&l);
    if (rc) zinf_segs_free(out);
    return rc;
}

int zinf_chat_encode(const zinf_template *t, const zinf_tok *tok, const zinf_chat *c, const zinf_chat_opts *o,
                     zinf_ids *ids, uint8_t **loss, size_t *loss_cap)
{
    zinf_segs sg;
    ids->n = 0;
    int rrc = zinf_chat_render(t, c, o, &sg);
    if (rrc) return zinf_err_prefix(rrc, "%lld", (long long)c->line); /* the caller puts the file first */
    int rc = 0;
    zinf_ids suf = {0};
    for (int i = 0; i < sg.n && !rc; i++) {
        size_t before = ids->n;
        rc = zinf_tok_encode(tok, sg.text[i], strlen(sg.text[i]), ZINF_TOK_SPECIAL, ids);
        if (!rc && *loss_cap < ids->cap) {
            uint8_t *p = realloc(*loss, ids->cap);
            if (!p) rc = zinf_errc(ZINF_ENOMEM, "out of host memory");
            else *loss = p, *loss_cap = ids->cap;
        }
        if (!rc) memset(*loss + before, sg.loss[i], ids->n - before);
    }
    if (!rc) rc = zinf_tok_encode(tok, t->suffix, strlen(t->suffix), ZINF_TOK_SPECIAL, &suf);
    if (!rc && ids->n) {
        /* ms-swift's _add_dynamic_eos: an untrained run right after trained tokens that starts with
         * the suffix's ids gets those trained (each turn's end-of-turn tokens) */
        uint8_t *L = *loss;
        const int32_t *id = ids->id;
        size_t n = ids->n, start = 0;
        for (size_t i = 1; i <= n; i++) {
            if (L[i - 1] && i < n && !L[i]) start = i;
            else if (start > 0 && !L[i - 1] && (i == n || L[i])) {
                if (i - start >= suf.n && !memcmp(id + start, suf.id, suf.n * sizeof *suf.id))
                    memset(L + start, 1, suf.n);
            }
        }
        L[0] = 0;
    }
    zinf_ids_free(&suf);
    zinf_segs_free(&sg);
    if (rc) zinf_err_prefix(rc, "%lld", (long long)c->line); /* the caller puts the file first */
    return rc;
}

int zinf_chat_prompt(const zinf_template *t, const zinf_chat *c, const zinf_chat_opts *o, char **text)
{
    *text = NULL;
    if (c->n < 1 || (c->m[c->n - 1].role != ZINF_ROLE_USER && c->m[c->n - 1].role != ZINF_ROLE_TOOL))
        return zinf_errc(ZINF_EINVAL, "internal: a generation prompt ends with a user or tool message");
    zinf_segs sg;
    ZINF_TRY(zinf_chat_render(t, c, o, &sg));
    sbuf all = {0};
    int rc = sb_str(&all, ""); /* an empty prompt is "", not NULL */
    for (int i = 0; i < sg.n && !rc; i++) rc = sb_str(&all, sg.text[i]);
    zinf_segs_free(&sg);
    if (rc) free(all.p);
    else *text = all.p;
    return rc;
}

int zinf_template_check(const zinf_template *t, const zinf_tok *tok, const char *tok_name)
{
    const char *parts[] = {t->prefix, t->system_prefix, t->prompt, t->chat_sep, t->suffix};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        for (const char *p = parts[i] ? strstr(parts[i], "<|") : NULL; p; p = strstr(p + 2, "<|")) {
            const char *e = strstr(p + 2, "|>");
            if (!e) break;
            size_t n = (size_t)(e + 2 - p);
            zinf_ids v = {0};
            int rc = zinf_tok_encode(tok, p, n, ZINF_TOK_SPECIAL, &v);
            size_t got = v.n;
            zinf_ids_free(&v);
            ZINF_TRY(rc);
            if (got != 1)
                return zinf_err("--template %s: %s has no token %.*s, which the template writes: it would be "
                                "written as %zu tokens of text; give the template of the tokenizer's model", t->name,
                                tok_name, (int)n, p, got);
        }
    return 0;
}

int zinf_template_end_id(const zinf_template *t, const zinf_tok *tok, int32_t *id)
{
    zinf_ids v = {0};
    int rc = zinf_tok_encode(tok, t->suffix, strlen(t->suffix), ZINF_TOK_SPECIAL, &v);
    *id = !rc && v.n ? v.id[0] : -1;
    zinf_ids_free(&v);
    return rc;
}

/* ================================================================ zinf data --sft ========== */
typedef struct enc_row { int32_t *id; uint8_t *loss; size_t n; int rc; char *err; } enc_row;

/* Encode the rows pick[0..n) (all cores), apply --max_length, append the kept ones to s. */
static int encode_set(const zinf_chat_data_opts *o, const zinf_chat_opts *co, const zinf_template *t,
                      const zinf_tok *tok, const zinf_chat_set *cs, const int64_t *pick, int64_t n,
                      zinf_sft_samples *s, int64_t *dropped, int64_t *cut)
{
    enc_row *r = calloc((size_t)(n ? n : 1), sizeof *r);
    if (!r) return zinf_errc(ZINF_ENOMEM, "%s: out of host memory for the encodings of %lld samples", cs->path, (long long)n);
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < n; i++) {
        zinf_ids ids = {0};
        uint8_t *loss = NULL;
        size_t cap = 0;
        const zinf_chat *c = &cs->row[pick[i]];
        r[i].rc = zinf_chat_encode(t, tok, c, co, &ids, &loss, &cap);
        if (r[i].rc) r[i].err = strdup(zinf_errmsg()); /* this thread's message, for the caller's */
        r[i].id = ids.id;
        r[i].loss = loss;
        r[i].n = ids.n;
    }
    int rc = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!rc && r[i].rc) rc = zinf_errc(r[i].rc, "%s:%s", cs->path, r[i].err ? r[i].err : "out of host memory");
        free(r[i].err);
        int64_t len = (int64_t)r[i].n, off = 0;
        if (!rc && o->max_length > 0 && len > o->max_length) {
            if (o->truncation == ZINF_TRUNC_DELETE) len = 0;
            else {
                if (o->truncation == ZINF_TRUNC_LEFT) off = len - o->max_length;
                len = o->max_length;
                r[i].loss[off] = 0; /* a sample's first token is never a target */
                ++*cut;
            }
            if (!len) ++*dropped;
        }
        if (!rc && len > 0) rc = zinf_sft_append(s, r[i].id + off, r[i].loss + off, len);
        free(r[i].id);
        free(r[i].loss);
    }
    free(r);
    return rc;
}

/* FILE#N: the N samples' lists alone (the pick, the encodings, the starts, one token each at
 * least) must fit in this machine's memory. A huge N is refused here, naming the spec, rather
 * than by an allocation that fails later without a name (or, memory overcommitted, by the
 * kernel killing the process once the lists are filled). */
static int samples_fit(const zinf_chat_set *cs)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double per = 2 * sizeof(int64_t) + sizeof(enc_row) + sizeof(int32_t) + 1, need = (double)cs->want * per,
           mem = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (cs->want > 0 && mem > 0 && need > mem)
        return zinf_errc(ZINF_ENOMEM, "%s#%lld: %lld samples of a dataset of %lld: their lists alone take %.3g GB, "
                         "more than this machine's %.3g GB of memory", cs->path, (long long)cs->want,
                         (long long)cs->want, (long long)cs->n, need / 1e9, mem / 1e9);
    return 0;
}

static int64_t trained(const zinf_sft_samples *s)
{
    int64_t k = 0;
    for (int64_t i = 0; i < s->ntok; i++) k += s->loss[i];
    return k;
}

int zinf_chat_make_shards(const zinf_chat_data_opts *o, FILE *out, zinf_chat_counts *counts)
{
    const zinf_template *t = NULL;
    if (o->template_name) {
        if (!(t = zinf_template_find(o->template_name))) return zinf_err_prefix(ZINF_EINVAL, "--template");
    } else {
        struct stat st;
        if (stat(o->tokenizer, &st) || !S_ISDIR(st.st_mode))
            return zinf_err("data: --template NAME is needed when --tokenizer is not a model directory (%s)",
                            zinf_template_names());
        ZINF_TRY(zinf_template_detect(o->tokenizer, &t));
    }
    if (o->split_ratio < 0 || o->split_ratio >= 1)
        return zinf_err("data: --split_dataset_ratio %g: expected 0 <= ratio < 1", o->split_ratio);
    zinf_tok *tok = NULL;
    zinf_chat_set tr = {0}, va = {0};
    zinf_sft_samples train = {0}, val = {0};
    int64_t *ti = NULL, *vi = NULL, nt = 0, nv = 0, drop_t = 0, drop_v = 0, cut_t = 0, cut_v = 0;
    int rc = zinf_chat_read(zinf_chat_input_flag(o), o->input, &tr);
    if (!rc && tr.n == 0)
        rc = zinf_err("%s: the dataset is empty after filtering (%lld samples without an assistant turn)", tr.path,
                      (long long)tr.no_assistant);
    if (!rc) rc = samples_fit(&tr);
    if (!rc && o->val_input) {
        /* ms-swift loads --val_dataset on its own, sampled like a training set without a split */
        if (o->split_ratio > 0 && out)
            zinf_warn("--split_dataset_ratio %g is ignored: --val_dataset is given", o->split_ratio);
        int64_t *none = NULL, nn;
        rc = zinf_chat_read(ZINF_CHAT_VAL_FLAG, o->val_input, &va);
        if (!rc && va.n == 0)
            rc = zinf_err("%s: the dataset is empty after filtering (%lld samples without an assistant turn)",
                          va.path, (long long)va.no_assistant);
        if (!rc) rc = samples_fit(&va);
        if (!rc) rc = zinf_chat_select(tr.n, tr.want, 0, o->seed, &ti, &nt, &none, &nn);
        free(none);
        none = NULL;
        if (!rc) rc = zinf_chat_select(va.n, va.want, 0, o->seed, &vi, &nv, &none, &nn);
        free(none);
    } else if (!rc) rc = zinf_chat_select(tr.n, tr.want, o->split_ratio, o->seed, &ti, &nt, &vi, &nv);
    if (!rc) rc = zinf_tok_load(o->tokenizer, &tok);
    if (!rc) rc = zinf_template_check(t, tok, o->tokenizer);
    /* one date for the whole run (ms-swift fixes it when the template is made) */
    char date[64];
    zinf_chat_opts co = o->chat;
    zinf_chat_date(&co, date, sizeof date);
    co.date = date;
    if (!rc) rc = encode_set(o, &co, t, tok, &tr, ti, nt, &train, &drop_t, &cut_t);
    if (!rc) rc = encode_set(o, &co, t, tok, o->val_input ? &va : &tr, vi, nv, &val, &drop_v, &cut_v);
    const char *how = o->truncation == ZINF_TRUNC_LEFT ? "left" : o->truncation == ZINF_TRUNC_RIGHT ? "right" : "delete";
    if (!rc && train.nsamples == 0)
        rc = zinf_err("%s: no training sample is left after filtering (%lld without an assistant turn, %lld longer "
                      "than --max_length %lld deleted)", tr.path, (long long)tr.no_assistant, (long long)drop_t,
                      (long long)o->max_length);
    /* samples are kept whatever their replies lost to --truncation_strategy left or right; a set
     * with no trained token at all has nothing to learn (every step's loss would be a mean over no
     * token) */
    if (!rc && trained(&train) == 0)
        rc = zinf_err("%s: no token of the %lld training samples is trained: --max_length %lld with "
                      "--truncation_strategy %s cut off every reply", tr.path, (long long)train.nsamples,
                      (long long)o->max_length, how);
    /* a validation set that filtering emptied would be evaluated as none, without a word */
    if (!rc && o->val_input && val.nsamples == 0)
        rc = zinf_err("%s: no validation sample is left after filtering (%lld without an assistant turn, %lld longer "
                      "than --max_length %lld deleted)", va.path, (long long)va.no_assistant, (long long)drop_v,
                      (long long)o->max_length);
    if (!rc) rc = zinf_sft_write_shards(o->prefix, &train, val.nsamples ? &val : NULL, zinf_tok_vocab_size(tok));
    if (!rc && counts) *counts = (zinf_chat_counts){.longer = {drop_t + cut_t, drop_v + cut_v}};
    if (!rc && out) {
        fprintf(out, "template %s, tokenizer %s (vocabulary %d)\n", t->name, o->tokenizer, zinf_tok_vocab_size(tok));
        fprintf(out, "%s: %lld samples read, %lld skipped without an assistant turn\n", tr.path,
                (long long)(tr.n + tr.no_assistant), (long long)tr.no_assistant);
        if (o->val_input)
            fprintf(out, "%s: %lld samples read, %lld skipped without an assistant turn\n", va.path,
                    (long long)(va.n + va.no_assistant), (long long)va.no_assistant);
        fprintf(out, "--max_length %lld, --truncation_strategy %s: %lld samples longer%s\n", (long long)o->max_length,
                how, (long long)(drop_t + drop_v + cut_t + cut_v),
                o->truncation == ZINF_TRUNC_DELETE ? ", deleted" : ", truncated");
        fprintf(out, "train: %lld samples, %lld tokens, %lld trained\n", (long long)train.nsamples,
                (long long)train.ntok, (long long)trained(&train));
        if (val.nsamples)
            fprintf(out, "val: %lld samples, %lld tokens, %lld trained\n", (long long)val.nsamples,
                    (long long)val.ntok, (long long)trained(&val));
    }
    free(ti);
    free(vi);
    zinf_sft_free(&train);
    zinf_sft_free(&val);
    zinf_chat_set_free(&tr);
    zinf_chat_set_free(&va);
    if (tok) zinf_tok_free(tok);
    return rc;
}
