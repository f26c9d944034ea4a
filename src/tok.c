/* tok: tokenizer.json byte-level BPE, encoded as Hugging Face `tokenizers` encodes it.
 *
 * Encode order (tokenizers' own): added tokens with normalized=false are cut out of the raw text
 * (leftmost-longest); each remaining segment is normalized (NFC or nothing) and cut at the added
 * tokens with normalized=true; each remaining part is split by the pre-tokenizer's regex stages
 * (the file's Split regex, ByteLevel's GPT-2 regex when use_regex), and each piece's UTF-8 bytes
 * go through BPE. Internally every vocabulary entry is held as the bytes it stands for (ByteLevel's
 * byte->char map undone once at load), so BPE runs on bytes and decoding is a concatenation.
 * A feature of the file this code does not run is refused at load with a line naming it. */
#include "tok.h"

#include "err.h"
#include "io/file.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#define MAX_STAGES 4     /* regex stages of the pre-tokenizer */
#define MAX_TEMPLATE 16  /* ids a TemplateProcessing adds before or after the text */
#define CACHE_SLOTS 16384
#define CACHE_KEY 32     /* pieces up to this many bytes are cached ... */
#define CACHE_IDS 15     /* ... when they encode to at most this many ids */
#define NAIVE_MAX 64     /* pieces of more symbols merge through a heap */

typedef struct { uint32_t off, len; } span; /* bytes in an arena; len 0 = absent */

/* Open-addressing map from byte strings to indices of a span table (slot -1 = empty). */
typedef struct {
    int32_t *slot;
    uint64_t mask;
} smap;

typedef struct {
    char *content;
    size_t len;
    int32_t id;
    bool special, normalized, lstrip, rstrip, single_word;
} added_tok;

typedef enum { SPLIT_ISOLATED, SPLIT_REMOVED } split_behavior;

typedef struct {
    pcre2_code *code;
    bool jit;
    split_behavior behavior;
} stage;

struct zinf_tok {
    char path[1024];
    uint64_t gen;           /* distinguishes this tokenizer's per-thread state from another's */
    /* vocabulary: id -> bytes; bytes -> id (BPE); other strings (not ByteLevel) -> id */
    char *arena;
    size_t arena_n, arena_cap;
    span *bytes;            /* [nid]: what the id decodes to */
    int32_t nid;            /* largest id + 1 */
    smap vmap;              /* byte-level vocabulary entries by their bytes */
    span *raw;              /* [nid]: vocabulary entries that are not ByteLevel strings */
    smap rmap;
    int32_t byte_id[256];   /* the id of each single byte, -1 if none */
    /* merges: (left id, right id) -> rank, merged id */
    uint64_t *mkey;
    int32_t *mrank, *mnew;
    uint64_t mmask;
    bool ignore_merges;
    int32_t unk;            /* -1: none */
    bool fuse_unk;
    /* added tokens */
    added_tok *added;
    int nadded;
    uint8_t first_raw[256], first_norm[256]; /* first bytes of added tokens, per kind: bit 0 a
                                              * token of one byte, bit 1 a longer one */
    uint8_t pair_raw[8192], pair_norm[8192]; /* bitmaps of the first two bytes of the longer ones */
    uint8_t first_lstrip[256];              /* first bytes of added tokens with lstrip */
    bool nfc;
    bool cuttable;          /* every stage's regex is one zinf_tok_next_cut knows, no added token
                             * holds a line break */
    bool cut_after_text;    /* GPT-2's regex: a cut also needs a non-space before the line break */
    stage stages[MAX_STAGES];
    int nstages;
    int32_t pre[MAX_TEMPLATE], post[MAX_TEMPLATE];
    int npre, npost;
};

/* ============================================================================ small pieces */

static uint64_t hash_bytes(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xff51afd7ed558ccdULL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x94d049bb133111ebULL;
    h ^= h >> 32;
    return h;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static int smap_init(smap *m, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n + 2) cap *= 2;
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot) return -1;
    memset(m->slot, 0xff, cap * sizeof *m->slot);
    m->mask = cap - 1;
    return 0;
}

/* The index whose span in keys equals s[0..n), or -1. */
static int32_t smap_get(const smap *m, const char *arena, const span *keys, const void *s, size_t n)
{
    if (!m->slot) return -1;
    for (uint64_t i = hash_bytes(s, n) & m->mask;; i = (i + 1) & m->mask) {
        int32_t k = m->slot[i];
        if (k < 0) return -1;
        if (keys[k].len == n && memcmp(arena + keys[k].off, s, n) == 0) return k;
    }
}

/* Insert index k (its key already in keys); an equal key keeps the first index. */
static void smap_put(smap *m, const char *arena, const span *keys, int32_t k)
{
    const void *s = arena + keys[k].off;
    size_t n = keys[k].len;
    for (uint64_t i = hash_bytes(s, n) & m->mask;; i = (i + 1) & m->mask) {
        int32_t o = m->slot[i];
        if (o < 0) {
            m->slot[i] = k;
            return;
        }
        if (keys[o].len == n && memcmp(arena + keys[o].off, s, n) == 0) return;
    }
}

static int arena_add(zinf_tok *t, const void *s, size_t n, span *out)
{
    if (t->arena_n + n > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 1 << 20;
        while (cap < t->arena_n + n) cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a) return zinf_errc(ZINF_ENOMEM, "%s: out of memory", t->path);
        t->arena = a;
        t->arena_cap = cap;
    }
    if (t->arena_n + n > UINT32_MAX) return zinf_errc(ZINF_ENOMEM, "%s: vocabulary too large", t->path);
    memcpy(t->arena + t->arena_n, s, n);
    out->off = (uint32_t)t->arena_n;
    out->len = (uint32_t)n;
    t->arena_n += n;
    return 0;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes map
 * in increasing order to U+0100 onwards. byte_of[cp] inverts it for cp < 0x144. */
static int16_t byte_of_cp[0x144];
static pthread_once_t byte_map_once = PTHREAD_ONCE_INIT;
static void byte_map_init(void)
{
    for (int i = 0; i < 0x144; i++) byte_of_cp[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        byte_of_cp[printable ? b : 256 + n++] = (int16_t)b;
    }
}

/* Decode one UTF-8 code point of s[0..n) (already valid); its length in *len. */
static int32_t utf8_cp(const uint8_t *s, size_t n, int *len)
{
    int32_t cp;
    *len = (int)utf8proc_iterate(s, (utf8proc_ssize_t)n, &cp);
    return cp;
}

/* A ByteLevel string (every char in bytes_to_unicode's image) as the bytes it stands for;
 * false when some char is outside the image. out holds at least n bytes. */
static bool bytelevel_bytes(const char *s, size_t n, uint8_t *out, size_t *outn)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int l;
        int32_t cp = utf8_cp((const uint8_t *)s + i, n - i, &l);
        if (l <= 0 || cp < 0 || cp >= 0x144 || byte_of_cp[cp] < 0) return false;
        out[o++] = (uint8_t)byte_of_cp[cp];
        i += (size_t)l;
    }
    *outn = o;
    return true;
}

/* The length of the one UTF-8 sequence at s[0..n), or 0 when it is not valid, as strict as Rust's
 * str (no overlongs, surrogates or code points past U+10FFFF); then *bad is the length of its
 * maximal valid subpart (>= 1), which one U+FFFD replaces as Rust's from_utf8_lossy does. */
static size_t utf8_seq(const uint8_t *s, size_t n, size_t *bad)
{
    uint8_t c = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    *bad = 1;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    size_t k = 1;
    for (; k <= need && k < n; k++) {
        if (s[k] < lo || s[k] > hi) break;
        lo = 0x80;
        hi = 0xBF;
    }
    if (k == need + 1) return k;
    *bad = k;
    return 0;
}

size_t zinf_utf8_check(const char *text, size_t n)
{
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        size_t bad, l = utf8_seq(s + i, n - i, &bad);
        if (!l) return i;
        i += l;
    }
    return n;
}

/* Rust's char::is_whitespace (the White_Space property). */
static bool is_space_cp(int32_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* A word character for added tokens' single_word, as tokenizers tests it (Rust regex's Unicode
 * \w): Alphabetic (letters, letter numbers, and the Other_Alphabetic symbols: circled, squared
 * and negative Latin letters), marks, decimal digits, connector punctuation and the joiners. */
static bool is_word_cp(int32_t c)
{
    if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
        (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189))
        return true;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

/* The code point that ends at s[n) (s[0..n) valid UTF-8, n > 0). */
static int32_t last_cp(const uint8_t *s, size_t n)
{
    size_t i = n - 1;
    while (i > 0 && (s[i] & 0xC0) == 0x80) i--;
    int l;
    return utf8_cp(s + i, n - i, &l);
}

/* ============================================================================ ids */

static int ids_push(zinf_ids *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->id, cap * sizeof *p);
        if (!p) return zinf_errc(ZINF_ENOMEM, "tokenizer: out of memory for %zu ids", cap);
        v->id = p;
        v->cap = cap;
    }
    v->id[v->n++] = id;
    return 0;
}

void zinf_ids_free(zinf_ids *v)
{
    if (!v) return;
    free(v->id);
    v->id = NULL;
    v->n = v->cap = 0;
}

/* ============================================================================ merges */

static int32_t merge_find(const zinf_tok *t, int32_t a, int32_t b, int32_t *newid)
{
    if (!t->mkey) return INT32_MAX;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (uint64_t i = mix64(key) & t->mmask;; i = (i + 1) & t->mmask) {
        if (t->mrank[i] < 0) return INT32_MAX;
        if (t->mkey[i] == key) {
            *newid = t->mnew[i];
            return t->mrank[i];
        }
    }
}

/* A later equal pair overwrites an earlier one, as a HashMap collected from the list does. */
static void merge_put(zinf_tok *t, int32_t a, int32_t b, int32_t rank, int32_t newid)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (uint64_t i = mix64(key) & t->mmask;; i = (i + 1) & t->mmask) {
        if (t->mrank[i] < 0 || t->mkey[i] == key) {
            t->mkey[i] = key;
            t->mrank[i] = rank;
            t->mnew[i] = newid;
            return;
        }
    }
}

/* ============================================================================ per-thread state */

typedef struct {
    uint64_t hash;
    uint8_t klen, nids;
    uint8_t key[CACHE_KEY];
    int32_t ids[CACHE_IDS];
} cache_slot;

typedef struct {
    uint64_t gen;
    pcre2_match_data *md;
    pcre2_jit_stack *jstack;
    pcre2_match_context *mctx;
    cache_slot *cache;
    /* BPE scratch */
    int32_t *sym, *prev, *next, *rank, *len;
    size_t scap;
    struct heap_e { int32_t rank, pos, left, right; } *heap;
    size_t hcap;
} tls_state;

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static _Thread_local tls_state *tls;
static atomic_uint_fast64_t gen_counter = 1;

static void tls_release(tls_state *s)
{
    if (s->md) pcre2_match_data_free(s->md);
    if (s->mctx) pcre2_match_context_free(s->mctx);
    if (s->jstack) pcre2_jit_stack_free(s->jstack);
    s->md = NULL;
    s->mctx = NULL;
    s->jstack = NULL;
}

static void tls_destroy(void *p)
{
    tls_state *s = p;
    if (!s) return;
    tls_release(s);
    free(s->cache);
    free(s->sym);
    free(s->heap);
    free(s);
}

static void tls_key_init(void) { (void)pthread_key_create(&tls_key, tls_destroy); }

static tls_state *tls_get(const zinf_tok *t)
{
    if (!tls) {
        pthread_once(&tls_once, tls_key_init);
        tls = calloc(1, sizeof *tls);
        if (!tls) return NULL;
        tls->cache = calloc(CACHE_SLOTS, sizeof *tls->cache);
        if (!tls->cache) {
            free(tls);
            tls = NULL;
            return NULL;
        }
        pthread_setspecific(tls_key, tls);
    }
    if (tls->gen != t->gen) {
        tls_release(tls);
        memset(tls->cache, 0, CACHE_SLOTS * sizeof *tls->cache);
        /* one match block big enough for every stage's pattern */
        tls->md = pcre2_match_data_create(32, NULL);
        tls->mctx = pcre2_match_context_create(NULL);
        tls->jstack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
        if (!tls->md || !tls->mctx || !tls->jstack) {
            tls_release(tls);
            return NULL;
        }
        pcre2_jit_stack_assign(tls->mctx, NULL, tls->jstack);
        tls->gen = t->gen;
    }
    return tls;
}

static int scratch(tls_state *s, size_t n)
{
    if (n <= s->scap) return 0;
    size_t cap = n < 256 ? 256 : n * 2;
    int32_t *p = realloc(s->sym, 5 * cap * sizeof *p);
    if (!p) return -1;
    s->sym = p;
    s->prev = p + cap;
    s->next = p + 2 * cap;
    s->rank = p + 3 * cap;
    s->len = p + 4 * cap;
    s->scap = cap;
    return 0;
}

/* ============================================================================ BPE */

static bool heap_less(const struct heap_e *a, const struct heap_e *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(tls_state *s, size_t *n, struct heap_e e)
{
    if (*n == s->hcap) {
        size_t cap = s->hcap ? s->hcap * 2 : 256;
        struct heap_e *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return -1;
        s->heap = h;
        s->hcap = cap;
    }
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
    return 0;
}

static struct heap_e heap_pop(tls_state *s, size_t *n)
{
    struct heap_e top = s->heap[0], last = s->heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!heap_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (*n) s->heap[i] = last;
    return top;
}

/* The ids of one piece's bytes: merge the adjacent pair of lowest rank (leftmost on a tie) until
 * no pair merges. Symbols live in a linked list over their first byte's index. */
static int bpe_piece(const zinf_tok *t, tls_state *s, const uint8_t *p, size_t n, zinf_ids *out)
{
    if (t->ignore_merges && n > 1) {
        int32_t id = smap_get(&t->vmap, t->arena, t->bytes, p, n);
        if (id >= 0) return ids_push(out, id);
    }
    if (n == 1 && t->byte_id[p[0]] >= 0) return ids_push(out, t->byte_id[p[0]]);
    uint64_t h = 0;
    cache_slot *cs = NULL;
    if (n <= CACHE_KEY) {
        h = hash_bytes(p, n);
        cs = &s->cache[h & (CACHE_SLOTS - 1)];
        if (cs->hash == h && cs->klen == n && memcmp(cs->key, p, n) == 0) {
            for (int i = 0; i < cs->nids; i++) ZINF_TRY(ids_push(out, cs->ids[i]));
            return 0;
        }
    }
    if (scratch(s, n) < 0) return zinf_errc(ZINF_ENOMEM, "tokenizer: out of memory");
    int32_t *sym = s->sym, *prev = s->prev, *next = s->next, *rank = s->rank;
    size_t out0 = out->n;
    /* symbols: one per byte; a byte without a token is dropped (or is the unknown token) */
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[p[i]];
        if (id < 0) {
            if (t->unk < 0) continue;
            if (t->fuse_unk && m > 0 && sym[m - 1] == t->unk) continue;
            id = t->unk;
        }
        sym[m++] = id;
    }
    if (m == 0) return 0; /* no byte of the piece has a token */
    for (int i = 0; i < m; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < m ? i + 1 : -1;
    }
    int32_t nid;
    if (m <= NAIVE_MAX) {
        for (int i = 0; i + 1 < m; i++) rank[i] = merge_find(t, sym[i], sym[i + 1], &nid);
        if (m > 0) rank[m - 1] = INT32_MAX;
        for (;;) {
            int best = -1;
            int32_t br = INT32_MAX;
            for (int i = 0; i >= 0; i = next[i])
                if (rank[i] < br) {
                    br = rank[i];
                    best = i;
                }
            if (best < 0) break;
            int j = next[best];
            merge_find(t, sym[best], sym[j], &sym[best]);
            next[best] = next[j];
            if (next[j] >= 0) prev[next[j]] = best;
            rank[best] = next[best] >= 0 ? merge_find(t, sym[best], sym[next[best]], &nid) : INT32_MAX;
            if (prev[best] >= 0) rank[prev[best]] = merge_find(t, sym[prev[best]], sym[best], &nid);
        }
    } else {
        size_t hn = 0;
        for (int i = 0; i + 1 < m; i++) {
            int32_t r = merge_find(t, sym[i], sym[i + 1], &nid);
            if (r != INT32_MAX && heap_push(s, &hn, (struct heap_e){r, i, sym[i], sym[i + 1]}) < 0)
                return zinf_errc(ZINF_ENOMEM, "tokenizer: out of memory");
        }
        /* alive: prev/next consistent; a dead symbol has prev == -2 */
        while (hn) {
            struct heap_e e = heap_pop(s, &hn);
            int i = e.pos;
            if (prev[i] == -2 || sym[i] != e.left) continue;
            int j = next[i];
            if (j < 0 || sym[j] != e.right) continue;
            merge_find(t, sym[i], sym[j], &sym[i]);
            next[i] = next[j];
            if (next[j] >= 0) prev[next[j]] = i;
            prev[j] = -2;
            int32_t r;
            if (next[i] >= 0 && (r = merge_find(t, sym[i], sym[next[i]], &nid)) != INT32_MAX &&
                heap_push(s, &hn, (struct heap_e){r, i, sym[i], sym[next[i]]}) < 0)
                return zinf_errc(ZINF_ENOMEM, "tokenizer: out of memory");
            int q = prev[i];
            if (q >= 0 && (r = merge_find(t, sym[q], sym[i], &nid)) != INT32_MAX &&
                heap_push(s, &hn, (struct heap_e){r, q, sym[q], sym[i]}) < 0)
                return zinf_errc(ZINF_ENOMEM, "tokenizer: out of memory");
        }
    }
    for (int i = 0; i >= 0; i = next[i]) ZINF_TRY(ids_push(out, sym[i]));
    if (cs && out->n - out0 <= CACHE_IDS) {
        cs->hash = h;
        cs->klen = (uint8_t)n;
        memcpy(cs->key, p, n);
        cs->nids = (uint8_t)(out->n - out0);
        memcpy(cs->ids, out->id + out0, cs->nids * sizeof(int32_t));
    }
    return 0;
}

/* ============================================================================ pre-tokenizer */

/* Split s[0..n) by stage k's regex and pass each piece on to stage k+1, then BPE. */
static int pretok(const zinf_tok *t, tls_state *s, int k, const uint8_t *p, size_t n, zinf_ids *out)
{
    if (n == 0) return 0;
    if (k == t->nstages) return bpe_piece(t, s, p, n, out);
    const stage *st = &t->stages[k];
    size_t at = 0, gap = 0; /* search position; start of the text not yet passed on */
    while (at <= n) {
        int rc = st->jit ? pcre2_jit_match(st->code, p, n, at, 0, s->md, s->mctx)
                         : pcre2_match(st->code, p, n, at, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return zinf_err("%s: the pre-tokenizer's regex failed at byte %zu of a %zu-byte piece: %s",
                            t->path, at, n, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t a = ov[0], b = ov[1];
        if (b == a) { /* an empty match splits nothing: step over one character */
            if (a >= n) break;
            int l;
            utf8_cp(p + a, n - a, &l);
            at = a + (size_t)(l > 0 ? l : 1);
            continue;
        }
        if (a > gap) ZINF_TRY(pretok(t, s, k + 1, p + gap, a - gap, out));
        if (st->behavior == SPLIT_ISOLATED) ZINF_TRY(pretok(t, s, k + 1, p + a, b - a, out));
        gap = at = b;
    }
    if (gap < n) ZINF_TRY(pretok(t, s, k + 1, p + gap, n - gap, out));
    return 0;
}

/* ============================================================================ added tokens */

/* The leftmost-longest added token of kind `normalized` in s[from..n); its index and start, or
 * -1. */
static int find_added(const zinf_tok *t, const uint8_t *s, size_t n, size_t from, bool normalized,
                      size_t *start)
{
    const uint8_t *first = normalized ? t->first_norm : t->first_raw;
    const uint8_t *pair = normalized ? t->pair_norm : t->pair_raw;
    for (size_t i = from; i < n; i++) {
        uint8_t f = first[s[i]];
        if (!f) continue;
        unsigned two = i + 1 < n ? (unsigned)s[i] << 8 | s[i + 1] : 0;
        if (!(f & 1) && (i + 1 >= n || !(pair[two >> 3] >> (two & 7) & 1))) continue;
        int best = -1;
        for (int k = 0; k < t->nadded; k++) {
            const added_tok *a = &t->added[k];
            if (a->normalized != normalized) continue;
            if (a->len <= n - i && (best < 0 || a->len > t->added[best].len) &&
                memcmp(s + i, a->content, a->len) == 0)
                best = k;
        }
        if (best >= 0) {
            *start = i;
            return best;
        }
    }
    return -1;
}

static int encode_normalized(const zinf_tok *t, tls_state *s, const uint8_t *p, size_t n,
                             unsigned flags, zinf_ids *out);

/* Cut s[0..n) at added tokens of one kind; the parts between go to `rest`. */
static int cut_added(const zinf_tok *t, tls_state *s, const uint8_t *p, size_t n, unsigned flags,
                     bool normalized, zinf_ids *out)
{
    size_t done = 0, from = 0, a;
    int k;
    while ((k = find_added(t, p, n, from, normalized, &a)) >= 0) {
        const added_tok *tk = &t->added[k];
        size_t b = a + tk->len;
        from = b;
        /* a special token is found and passed over, as tokenizers' encode_special_tokens does:
         * no shorter added token is looked for inside it */
        if (tk->special && !(flags & ZINF_TOK_SPECIAL)) continue;
        int l;
        if (tk->single_word && ((a > 0 && is_word_cp(last_cp(p, a))) ||
                                (b < n && is_word_cp(utf8_cp(p + b, n - b, &l)))))
            continue;
        if (tk->lstrip)
            while (a > done) {
                size_t q = a - 1;
                while (q > done && (p[q] & 0xC0) == 0x80) q--;
                int l;
                if (!is_space_cp(utf8_cp(p + q, n - q, &l))) break;
                a = q;
            }
        if (tk->rstrip)
            while (b < n) {
                int l;
                if (!is_space_cp(utf8_cp(p + b, n - b, &l))) break;
                b += (size_t)l;
            }
        if (a > done) {
            if (normalized) ZINF_TRY(pretok(t, s, 0, p + done, a - done, out));
            else ZINF_TRY(encode_normalized(t, s, p + done, a - done, flags, out));
        }
        ZINF_TRY(ids_push(out, tk->id));
        done = from = b;
    }
    if (done < n) {
        if (normalized) ZINF_TRY(pretok(t, s, 0, p + done, n - done, out));
        else ZINF_TRY(encode_normalized(t, s, p + done, n - done, flags, out));
    }
    return 0;
}

/* True when NFC leaves s unchanged for sure: no code point from U+0300 on (the first combining
 * mark), so nothing composes, decomposes or reorders. */
static bool nfc_trivial(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] >= 0xCC) return false;
    return true;
}

/* A segment between raw added tokens: normalize it, then cut at normalized added tokens. */
static int encode_normalized(const zinf_tok *t, tls_state *s, const uint8_t *p, size_t n,
                             unsigned flags, zinf_ids *out)
{
    if (!t->nfc || nfc_trivial(p, n)) return cut_added(t, s, p, n, flags, true, out);
    utf8proc_uint8_t *nf = NULL;
    utf8proc_ssize_t m = utf8proc_map(p, (utf8proc_ssize_t)n, &nf, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (m < 0) return zinf_err("tokenizer: NFC failed: %s", utf8proc_errmsg(m));
    int rc = cut_added(t, s, nf, (size_t)m, flags, true, out);
    free(nf);
    return rc;
}

int zinf_tok_encode(const zinf_tok *t, const char *text, size_t len, unsigned flags, zinf_ids *out)
{
    const uint8_t *p = (const uint8_t *)text;
    size_t bad = zinf_utf8_check(text, len);
    if (bad < len) return zinf_err("invalid UTF-8 at byte %zu (0x%02x)", bad, p[bad]);
    tls_state *s = tls_get(t);
    if (!s) return zinf_errc(ZINF_ENOMEM, "tokenizer: out of memory for a thread's state");
    if (flags & ZINF_TOK_ADD_SPECIAL)
        for (int i = 0; i < t->npre; i++) ZINF_TRY(ids_push(out, t->pre[i]));
    ZINF_TRY(cut_added(t, s, p, len, flags, false, out));
    if (flags & ZINF_TOK_ADD_SPECIAL)
        for (int i = 0; i < t->npost; i++) ZINF_TRY(ids_push(out, t->post[i]));
    return 0;
}

/* ============================================================================ decode */

int zinf_tok_decode(const zinf_tok *t, const int32_t *ids, size_t n, char **text, size_t *len)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->nid || (!t->bytes[ids[i]].len && !t->raw[ids[i]].len))
            return zinf_err("decode: id %d (position %zu) is not in the vocabulary of %s", ids[i], i,
                            t->path);
        total += t->bytes[ids[i]].len + t->raw[ids[i]].len;
    }
    uint8_t *cat = malloc(total + 1);
    char *o = malloc(3 * total + 1); /* each bad byte becomes at most 3 bytes of U+FFFD */
    if (!cat || !o) {
        free(cat);
        free(o);
        return zinf_errc(ZINF_ENOMEM, "decode: out of memory");
    }
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        const span *sp = t->bytes[ids[i]].len ? &t->bytes[ids[i]] : &t->raw[ids[i]];
        memcpy(cat + c, t->arena + sp->off, sp->len);
        c += sp->len;
    }
    size_t w = 0;
    for (size_t i = 0; i < c;) {
        size_t bad, l = utf8_seq(cat + i, c - i, &bad);
        if (l) {
            memcpy(o + w, cat + i, l);
            w += l;
            i += l;
        } else {
            memcpy(o + w, "\xEF\xBF\xBD", 3);
            w += 3;
            i += bad;
        }
    }
    o[w] = 0;
    free(cat);
    *text = o;
    *len = w;
    return 0;
}

int32_t zinf_tok_id(const zinf_tok *t, const char *token)
{
    size_t n = strlen(token);
    for (int k = 0; k < t->nadded; k++)
        if (t->added[k].len == n && memcmp(t->added[k].content, token, n) == 0) return t->added[k].id;
    uint8_t *b = malloc(n + 1);
    size_t bn;
    int32_t id = -1;
    if (b && bytelevel_bytes(token, n, b, &bn)) id = smap_get(&t->vmap, t->arena, t->bytes, b, bn);
    free(b);
    if (id < 0) id = smap_get(&t->rmap, t->arena, t->raw, token, n);
    return id;
}

int32_t zinf_tok_vocab_size(const zinf_tok *t) { return t->nid; }

size_t zinf_tok_next_cut(const zinf_tok *t, const char *text, size_t n, size_t from)
{
    if (!t->cuttable) return n;
    for (size_t i = from > 0 ? from : 1; i + 1 < n; i++) {
        uint8_t c = (uint8_t)text[i + 1], b = (uint8_t)text[i - 1];
        if (text[i] == '\n' && c > 0x20 && c < 0x7f && !t->first_lstrip[c] &&
            (!t->cut_after_text || (b > 0x20 && b < 0x7f)))
            return i + 1;
    }
    return n;
}

/* ============================================================================ load */

void zinf_tok_free(zinf_tok *t)
{
    if (!t) return;
    free(t->arena);
    free(t->bytes);
    free(t->raw);
    free(t->vmap.slot);
    free(t->rmap.slot);
    free(t->mkey);
    free(t->mrank);
    free(t->mnew);
    for (int i = 0; i < t->nadded; i++) free(t->added[i].content);
    free(t->added);
    for (int i = 0; i < t->nstages; i++) pcre2_code_free(t->stages[i].code);
    free(t);
}

static const char *type_of(json_t *o)
{
    json_t *ty = json_is_object(o) ? json_object_get(o, "type") : NULL;
    return json_is_string(ty) ? json_string_value(ty) : NULL;
}

/* A key that must be absent, null, false, or equal to the value zinf runs. */
static bool is_off(json_t *v) { return !v || json_is_null(v) || json_is_false(v); }

/* GPT-2's pre-tokenizer regex, which ByteLevel applies when use_regex is true. */
static const char GPT2_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* The Split regexes of Qwen2/2.5/3, Llama-3 and Qwen3.5, as their tokenizer.json files write them.
 * With these, no piece runs from a line break into a printable ASCII character after it: the
 * optional lead of a letter run excludes \r and \n, the other runs exclude \s, and a whitespace
 * run that holds a line break is taken up to its last line break by \s*[\r\n]+ whether text
 * follows or not. GPT-2's regex has no \s*[\r\n]+: there \s+(?!\S) leaves the last character
 * of a run that text follows for the next piece, but takes all of it at the end of the text, so
 * a cut must also have a non-space before the line break (a run of one). zinf_tok_next_cut
 * relies on this. */
static const char *const KNOWN_RE[] = {
    GPT2_RE,
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

/* True when s[0..n) are hex digits. */
static bool all_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || (s[i] >= 'A' && s[i] <= 'F')))
            return false;
    return true;
}

static int add_stage(zinf_tok *t, const char *pattern, size_t plen, bool literal, split_behavior b,
                     const char *what)
{
    bool known = false;
    for (size_t i = 0; i < sizeof KNOWN_RE / sizeof *KNOWN_RE; i++)
        known |= !literal && strlen(KNOWN_RE[i]) == plen && memcmp(KNOWN_RE[i], pattern, plen) == 0;
    if (!known) t->cuttable = false;
    if (!literal && plen == sizeof GPT2_RE - 1 && memcmp(pattern, GPT2_RE, plen) == 0) t->cut_after_text = true;
    if (t->nstages == MAX_STAGES)
        return zinf_err("%s: pre_tokenizer has more than %d splitting steps", t->path, MAX_STAGES);
    int ec;
    PCRE2_SIZE eo;
    /* tokenizers compiles with Oniguruma, where \uHHHH names a code point; PCRE2 spells it
     * \x{HHHH} (which Oniguruma takes too) */
    char *re = malloc(plen * 2 + 1);
    if (!re) return zinf_errc(ZINF_ENOMEM, "%s: out of memory", t->path);
    size_t rn = 0;
    for (size_t i = 0; i < plen; i++) {
        if (!literal && pattern[i] == '\\' && i + 6 <= plen && pattern[i + 1] == 'u' && all_hex(pattern + i + 2, 4)) {
            rn += (size_t)sprintf(re + rn, "\\x{%.4s}", pattern + i + 2);
            i += 5;
            continue;
        }
        re[rn++] = pattern[i];
        if (pattern[i] == '\\' && i + 1 < plen) re[rn++] = pattern[++i];
    }
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, rn, PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &ec,
                                  &eo, NULL);
    free(re);
    if (!c) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return zinf_err("%s: %s regex rejected by PCRE2 at offset %zu: %s", t->path, what, (size_t)eo,
                        (const char *)msg);
    }
    stage *st = &t->stages[t->nstages++];
    st->code = c;
    st->behavior = b;
    st->jit = pcre2_jit_compile(c, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

static int load_pre_one(zinf_tok *t, json_t *p, const char *where)
{
    const char *ty = type_of(p);
    if (!ty) return zinf_err("%s: %s has no \"type\"", t->path, where);
    if (!strcmp(ty, "ByteLevel")) {
        if (!is_off(json_object_get(p, "add_prefix_space")))
            return zinf_err("%s: %s ByteLevel add_prefix_space true is not supported", t->path, where);
        json_t *ur = json_object_get(p, "use_regex");
        if (!ur || json_is_true(ur)) return add_stage(t, GPT2_RE, sizeof GPT2_RE - 1, false, SPLIT_ISOLATED, "ByteLevel");
        return 0;
    }
    if (!strcmp(ty, "Split")) {
        json_t *pat = json_object_get(p, "pattern"), *re = json_object_get(pat, "Regex"),
               *str = json_object_get(pat, "String"), *beh = json_object_get(p, "behavior");
        if (!is_off(json_object_get(p, "invert")))
            return zinf_err("%s: %s Split invert true is not supported", t->path, where);
        const char *b = json_string_value(beh);
        split_behavior sb;
        if (b && !strcmp(b, "Isolated")) sb = SPLIT_ISOLATED;
        else if (b && !strcmp(b, "Removed")) sb = SPLIT_REMOVED;
        else
            return zinf_err("%s: %s Split behavior \"%s\" is not supported (Isolated, Removed)", t->path,
                            where, b ? b : "?");
        if (json_is_string(re))
            return add_stage(t, json_string_value(re), json_string_length(re), false, sb, "pre_tokenizer Split");
        if (json_is_string(str))
            return add_stage(t, json_string_value(str), json_string_length(str), true, sb, "pre_tokenizer Split");
        return zinf_err("%s: %s Split has no pattern Regex or String", t->path, where);
    }
    return zinf_err("%s: pre_tokenizer type %s is not supported (Split, ByteLevel, Sequence)", t->path, ty);
}

static int load_pre(zinf_tok *t, json_t *p)
{
    if (!p || json_is_null(p)) return zinf_err("%s: no pre_tokenizer: zinf runs byte-level BPE only", t->path);
    const char *ty = type_of(p);
    bool bytelevel = false;
    if (ty && !strcmp(ty, "Sequence")) {
        json_t *v;
        size_t i;
        json_array_foreach(json_object_get(p, "pretokenizers"), i, v) {
            ZINF_TRY(load_pre_one(t, v, "pre_tokenizer"));
            if (!strcmp(type_of(v), "ByteLevel")) bytelevel = true;
        }
    } else {
        ZINF_TRY(load_pre_one(t, p, "pre_tokenizer"));
        bytelevel = !strcmp(ty, "ByteLevel");
    }
    if (!bytelevel) return zinf_err("%s: the pre_tokenizer has no ByteLevel step: zinf runs byte-level BPE only", t->path);
    return 0;
}

static int load_norm(zinf_tok *t, json_t *n)
{
    if (!n || json_is_null(n)) return 0;
    const char *ty = type_of(n);
    if (ty && !strcmp(ty, "NFC")) {
        t->nfc = true;
        return 0;
    }
    if (ty && !strcmp(ty, "Sequence")) {
        json_t *v;
        size_t i;
        json_array_foreach(json_object_get(n, "normalizers"), i, v) ZINF_TRY(load_norm(t, v));
        return 0;
    }
    return zinf_err("%s: normalizer type %s is not supported (NFC, Sequence, null)", t->path, ty ? ty : "?");
}

static int load_post(zinf_tok *t, json_t *p)
{
    if (!p || json_is_null(p)) return 0;
    const char *ty = type_of(p);
    if (ty && !strcmp(ty, "ByteLevel")) return 0; /* it only trims offsets */
    if (ty && !strcmp(ty, "Sequence")) {
        json_t *v;
        size_t i;
        json_array_foreach(json_object_get(p, "processors"), i, v) ZINF_TRY(load_post(t, v));
        return 0;
    }
    if (ty && !strcmp(ty, "TemplateProcessing")) {
        json_t *single = json_object_get(p, "single"), *sp = json_object_get(p, "special_tokens"), *it;
        size_t i;
        bool seen = false;
        if (!json_is_array(single)) return zinf_err("%s: post_processor TemplateProcessing has no \"single\" list", t->path);
        json_array_foreach(single, i, it) {
            json_t *st = json_object_get(it, "SpecialToken"), *sq = json_object_get(it, "Sequence");
            if (sq) {
                const char *id = json_string_value(json_object_get(sq, "id"));
                if (!id || strcmp(id, "A") || seen)
                    return zinf_err("%s: post_processor TemplateProcessing single: only one $A is supported", t->path);
                seen = true;
                continue;
            }
            const char *name = json_string_value(json_object_get(st, "id"));
            json_t *ids = json_object_get(json_object_get(sp, name ? name : ""), "ids"), *x;
            if (!name || !json_is_array(ids))
                return zinf_err("%s: post_processor TemplateProcessing: special token %s has no ids in special_tokens",
                                t->path, name ? name : "?");
            size_t j;
            json_array_foreach(ids, j, x) {
                int *cnt = seen ? &t->npost : &t->npre;
                int32_t *dst = seen ? t->post : t->pre;
                if (*cnt == MAX_TEMPLATE)
                    return zinf_err("%s: post_processor TemplateProcessing adds more than %d ids", t->path, MAX_TEMPLATE);
                dst[(*cnt)++] = (int32_t)json_integer_value(x);
            }
        }
        if (!seen) return zinf_err("%s: post_processor TemplateProcessing single has no $A", t->path);
        return 0;
    }
    return zinf_err("%s: post_processor type %s is not supported (ByteLevel, TemplateProcessing, Sequence)",
                    t->path, ty ? ty : "?");
}

static int set_id(zinf_tok *t, int64_t id, const char *what, const char *name)
{
    if (id < 0 || id > INT32_MAX - 1)
        return zinf_err("%s: %s \"%s\" has id %lld, out of range", t->path, what, name, (long long)id);
    return 0;
}

/* where a token of an id was given, for ids_unique */
typedef struct tok_src { const char *s; size_t n; int64_t added; /* its index in added_tokens; -1: model.vocab */ } tok_src;

/* "model.vocab \"s\"" or "added_tokens[i] \"s\"", the text as JSON writes it (one line whatever it holds) */
static void say_src(const tok_src *w, char *out, size_t cap)
{
    json_t *j = json_stringn_nocheck(w->s, w->n);
    char *q = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    char where[48] = "model.vocab";
    if (w->added >= 0) snprintf(where, sizeof where, "added_tokens[%lld]", (long long)w->added);
    snprintf(out, cap, "%s %.200s%s", where, q ? q : "?", q && strlen(q) > 200 ? "..." : "");
    free(q);
    json_decref(j);
}

/* An added token a and the token b given before at its id are one: the same text, or b a
 * vocabulary entry whose byte-level text stands for a's bytes ("\u0120a" for " a") */
static bool same_token(const tok_src *b, const tok_src *a)
{
    uint8_t buf[4096];
    size_t bn;
    if (b->n == a->n && !memcmp(b->s, a->s, a->n)) return true;
    return b->added < 0 && b->n <= sizeof buf && bytelevel_bytes(b->s, b->n, buf, &bn) && bn == a->n &&
           !memcmp(buf, a->s, bn);
}

/* One id, one token. Two vocabulary entries of one id, or an added token with another text than
 * the vocabulary's (or another added token's) at its id, are refused, naming the id and both: HF's
 * tokenizers keeps one of them in its id-to-token map, so ids and decoding would disagree with
 * the encoding. An added token that repeats its own vocabulary entry (the same text and id, as
 * GPT-2's and many models' special tokens do, or its bytes) is the same token. */
static int ids_unique(zinf_tok *t, json_t *vocab, json_t *added)
{
    tok_src *by = calloc((size_t)t->nid + 1, sizeof *by);
    if (!by) return zinf_errc(ZINF_ENOMEM, "%s: out of memory", t->path);
    const char *key;
    json_t *v;
    size_t i;
    int rc = 0;
    tok_src w = {0}, *had = NULL;
    json_object_foreach(vocab, key, v) {
        w = (tok_src){key, strlen(key), -1};
        had = &by[json_integer_value(v)];
        if (had->s) break;
        *had = w;
        had = NULL;
    }
    if (!had)
        json_array_foreach(added, i, v) {
            json_t *c = json_object_get(v, "content");
            w = (tok_src){json_string_value(c), json_string_length(c), (int64_t)i};
            had = &by[json_integer_value(json_object_get(v, "id"))];
            if (!had->s) *had = w;
            else if (!same_token(had, &w)) break;
            had = NULL;
        }
    if (had) {
        char a[320], b[320];
        say_src(had, a, sizeof a);
        say_src(&w, b, sizeof b);
        rc = zinf_err("%s: id %td is given to two different tokens: %s and %s", t->path, had - by, a, b);
    }
    free(by);
    return rc;
}

static int load_model(zinf_tok *t, json_t *m, json_t *added)
{
    const char *ty = type_of(m);
    if (!ty || strcmp(ty, "BPE"))
        return zinf_err("%s: model type %s is not supported: zinf runs BPE only", t->path, ty ? ty : "(none)");
    json_t *v;
    if ((v = json_object_get(m, "dropout")) && !json_is_null(v) && json_number_value(v) != 0)
        return zinf_err("%s: model dropout %g is not supported", t->path, json_number_value(v));
    if (!is_off(json_object_get(m, "byte_fallback")))
        return zinf_err("%s: model byte_fallback true is not supported", t->path);
    const char *fix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        v = json_object_get(m, fix[i]);
        if (v && !json_is_null(v) && (!json_is_string(v) || json_string_length(v)))
            return zinf_err("%s: model %s is not supported (only empty)", t->path, fix[i]);
    }
    t->ignore_merges = json_is_true(json_object_get(m, "ignore_merges"));
    t->fuse_unk = json_is_true(json_object_get(m, "fuse_unk"));
    json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
    if (!json_is_object(vocab)) return zinf_err("%s: model has no vocab object", t->path);
    /* ids: the largest of vocabulary and added tokens */
    int64_t maxid = -1;
    const char *key;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v)) return zinf_err("%s: vocab entry \"%s\" is not an integer id", t->path, key);
        ZINF_TRY(set_id(t, json_integer_value(v), "vocab entry", key));
        if (json_integer_value(v) > maxid) maxid = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id"), *c = json_object_get(v, "content");
        if (!json_is_integer(id) || !json_is_string(c))
            return zinf_err("%s: added_tokens[%zu] lacks an integer id or a content string", t->path, i);
        ZINF_TRY(set_id(t, json_integer_value(id), "added token", json_string_value(c)));
        if (json_integer_value(id) > maxid) maxid = json_integer_value(id);
    }
    t->nid = (int32_t)(maxid + 1);
    ZINF_TRY(ids_unique(t, vocab, added));
    t->bytes = calloc((size_t)t->nid + 1, sizeof *t->bytes);
    t->raw = calloc((size_t)t->nid + 1, sizeof *t->raw);
    size_t nv = json_object_size(vocab);
    if (!t->bytes || !t->raw || smap_init(&t->vmap, nv) || smap_init(&t->rmap, 64))
        return zinf_errc(ZINF_ENOMEM, "%s: out of memory", t->path);
    uint8_t buf[4096];
    size_t nraw = 0;
    json_object_foreach(vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        size_t kl = strlen(key), bn;
        if (kl <= sizeof buf && bytelevel_bytes(key, kl, buf, &bn) && bn > 0) {
            ZINF_TRY(arena_add(t, buf, bn, &t->bytes[id]));
            smap_put(&t->vmap, t->arena, t->bytes, id);
        } else {
            ZINF_TRY(arena_add(t, key, kl, &t->raw[id]));
            nraw++;
        }
    }
    if (nraw) {
        free(t->rmap.slot);
        if (smap_init(&t->rmap, nraw)) return zinf_errc(ZINF_ENOMEM, "%s: out of memory", t->path);
        for (int32_t id = 0; id < t->nid; id++)
            if (t->raw[id].len) smap_put(&t->rmap, t->arena, t->raw, id);
    }
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        t->byte_id[b] = smap_get(&t->vmap, t->arena, t->bytes, &c, 1);
    }
    t->unk = -1;
    v = json_object_get(m, "unk_token");
    if (json_is_string(v)) {
        t->unk = smap_get(&t->rmap, t->arena, t->raw, json_string_value(v), json_string_length(v));
        size_t bn;
        if (t->unk < 0 && json_string_length(v) <= sizeof buf &&
            bytelevel_bytes(json_string_value(v), json_string_length(v), buf, &bn))
            t->unk = smap_get(&t->vmap, t->arena, t->bytes, buf, bn);
        if (t->unk < 0) return zinf_err("%s: model unk_token \"%s\" is not in the vocabulary", t->path, json_string_value(v));
    }
    /* merges: "a b" strings or [a, b] pairs; rank = position in the list */
    if (merges && !json_is_array(merges)) return zinf_err("%s: model merges is not a list", t->path);
    size_t nm = json_array_size(merges), cap = 16;
    while (cap < 2 * nm + 2) cap *= 2;
    t->mkey = malloc(cap * sizeof *t->mkey);
    t->mrank = malloc(cap * sizeof *t->mrank);
    t->mnew = malloc(cap * sizeof *t->mnew);
    if (!t->mkey || !t->mrank || !t->mnew) return zinf_errc(ZINF_ENOMEM, "%s: out of memory", t->path);
    memset(t->mrank, 0xff, cap * sizeof *t->mrank);
    t->mmask = cap - 1;
    uint8_t ab[2][2048], cat[4096];
    json_array_foreach(merges, i, v) {
        const char *part[2];
        size_t plen[2];
        if (json_is_string(v)) {
            const char *s = json_string_value(v), *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return zinf_err("%s: merges[%zu] \"%s\" is not two tokens separated by one space", t->path, i, s);
            part[0] = s;
            plen[0] = (size_t)(sp - s);
            part[1] = sp + 1;
            plen[1] = strlen(sp + 1);
        } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
                   json_is_string(json_array_get(v, 1))) {
            for (int k = 0; k < 2; k++) {
                part[k] = json_string_value(json_array_get(v, k));
                plen[k] = json_string_length(json_array_get(v, k));
            }
        } else
            return zinf_err("%s: merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", t->path, i);
        int32_t id[2];
        size_t bl[2];
        for (int k = 0; k < 2; k++) {
            if (plen[k] > sizeof ab[k] || !bytelevel_bytes(part[k], plen[k], ab[k], &bl[k]) ||
                (id[k] = smap_get(&t->vmap, t->arena, t->bytes, ab[k], bl[k])) < 0)
                return zinf_err("%s: merges[%zu]: token \"%.*s\" is not in the vocabulary", t->path, i,
                                (int)plen[k], part[k]);
        }
        memcpy(cat, ab[0], bl[0]);
        memcpy(cat + bl[0], ab[1], bl[1]);
        int32_t nid = smap_get(&t->vmap, t->arena, t->bytes, cat, bl[0] + bl[1]);
        if (nid < 0)
            return zinf_err("%s: merges[%zu]: \"%.*s%.*s\" is not in the vocabulary", t->path, i,
                            (int)plen[0], part[0], (int)plen[1], part[1]);
        merge_put(t, id[0], id[1], (int32_t)i, nid);
    }
    return 0;
}

static int load_added(zinf_tok *t, json_t *added)
{
    size_t n = json_array_size(added), i;
    json_t *v;
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return zinf_errc(ZINF_ENOMEM, "%s: out of memory", t->path);
    json_array_foreach(added, i, v) {
        added_tok *a = &t->added[t->nadded];
        json_t *c = json_object_get(v, "content");
        a->len = json_string_length(c);
        if (!a->len) return zinf_err("%s: added_tokens[%zu] has empty content", t->path, i);
        a->content = malloc(a->len + 1);
        if (!a->content) return zinf_errc(ZINF_ENOMEM, "%s: out of memory", t->path);
        memcpy(a->content, json_string_value(c), a->len + 1);
        t->nadded++;
        a->id = (int32_t)json_integer_value(json_object_get(v, "id"));
        a->special = json_is_true(json_object_get(v, "special"));
        a->normalized = json_is_true(json_object_get(v, "normalized"));
        a->lstrip = json_is_true(json_object_get(v, "lstrip"));
        a->rstrip = json_is_true(json_object_get(v, "rstrip"));
        a->single_word = json_is_true(json_object_get(v, "single_word"));
        (a->normalized ? t->first_norm : t->first_raw)[(uint8_t)a->content[0]] |= a->len == 1 ? 1 : 2;
        if (a->len > 1) {
            unsigned two = (unsigned)(uint8_t)a->content[0] << 8 | (uint8_t)a->content[1];
            (a->normalized ? t->pair_norm : t->pair_raw)[two >> 3] |= (uint8_t)(1u << (two & 7));
        }
        if (a->lstrip) t->first_lstrip[(uint8_t)a->content[0]] = 1;
        if (memchr(a->content, '\n', a->len)) t->cuttable = false;
        /* an added token that is not in the vocabulary decodes to its content */
        if (!t->bytes[a->id].len && !t->raw[a->id].len) {
            uint8_t *b = malloc(a->len);
            size_t bn;
            if (!b) return zinf_errc(ZINF_ENOMEM, "%s: out of memory", t->path);
            int rc = bytelevel_bytes(a->content, a->len, b, &bn) ? arena_add(t, b, bn, &t->bytes[a->id])
                                                                 : arena_add(t, a->content, a->len, &t->raw[a->id]);
            free(b);
            ZINF_TRY(rc);
        }
    }
    return 0;
}

static int load_json(zinf_tok *t, json_t *root)
{
    if (!json_is_object(root)) return zinf_err("%s: the top level is not a JSON object", t->path);
    const char *off[] = {"truncation", "padding"};
    for (int i = 0; i < 2; i++)
        if (!is_off(json_object_get(root, off[i])))
            return zinf_err("%s: %s is set: zinf does not truncate or pad in the tokenizer", t->path, off[i]);
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added)) return zinf_err("%s: added_tokens is not a list", t->path);
    ZINF_TRY(load_norm(t, json_object_get(root, "normalizer")));
    ZINF_TRY(load_model(t, json_object_get(root, "model"), added));
    ZINF_TRY(load_added(t, added));
    ZINF_TRY(load_pre(t, json_object_get(root, "pre_tokenizer")));
    ZINF_TRY(load_post(t, json_object_get(root, "post_processor")));
    for (int i = 0; i < t->npre; i++)
        if (t->pre[i] < 0 || t->pre[i] >= t->nid)
            return zinf_err("%s: post_processor adds id %d, outside the vocabulary", t->path, t->pre[i]);
    for (int i = 0; i < t->npost; i++)
        if (t->post[i] < 0 || t->post[i] >= t->nid)
            return zinf_err("%s: post_processor adds id %d, outside the vocabulary", t->path, t->post[i]);
    json_t *d = json_object_get(root, "decoder");
    const char *dt = type_of(d);
    if (!dt || strcmp(dt, "ByteLevel"))
        return zinf_err("%s: decoder %s is not supported (ByteLevel)", t->path, dt ? dt : "null");
    return 0;
}

int zinf_tok_load(const char *path, zinf_tok **out)
{
    *out = NULL;
    pthread_once(&byte_map_once, byte_map_init);
    zinf_tok *t = calloc(1, sizeof *t);
    if (!t) return zinf_errc(ZINF_ENOMEM, "tokenizer: out of memory");
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(t->path, sizeof t->path, "%s/tokenizer.json", path);
    else
        snprintf(t->path, sizeof t->path, "%s", path);
    t->gen = atomic_fetch_add(&gen_counter, 1);
    t->cuttable = true;
    json_error_t je;
    int rc = zinf_refuse_irregular(NULL, t->path);
    json_t *root = rc ? NULL : json_load_file(t->path, 0, &je);
    if (rc) {
    } else if (!root) {
        if (access(t->path, R_OK) != 0)
            rc = zinf_errc(-errno, "%s: cannot read the tokenizer: %s", t->path, strerror(errno));
        else
            rc = zinf_err("%s:%d:%d: malformed JSON: %s", t->path, je.line, je.column, je.text);
    } else {
        rc = load_json(t, root);
        json_decref(root);
    }
    if (rc < 0) {
        zinf_tok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}
