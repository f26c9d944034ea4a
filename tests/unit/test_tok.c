/* test_tok: the tokenizer.
 * Without arguments: checks that need no reference library: a hand-made tokenizer.json whose ids
 * are worked out in the comments, UTF-8 replacement on decode, and the one-line refusals (a model
 * that is not BPE, a missing file, a regex PCRE2 rejects, a normalizer or behavior zinf does not
 * run, invalid UTF-8).
 * With arguments, the tool tests/tok/test_tok.sh compares with Hugging Face tokenizers:
 *   test_tok ids TOKENIZER FILE FLAGS    each line of FILE (split at \n) -> its ids, one line each
 *   test_tok decode TOKENIZER FILE       each line of ids -> its text, one line each
 *   test_tok threads TOKENIZER FILE N    encode every line on N threads at once; 0 when every
 *                                        thread got the ids one thread gets */
#include "check.h"
#include "err.h"
#include "tok.h"

#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>
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

/* ---------------------------------------------------------------- the hand-made tokenizer */

/* GPT-2's byte -> character map, written out here on its own: bytes 33-126, 161-172 and 174-255
 * are themselves, the other 68 take U+0100, U+0101, ... in increasing byte order. */
static int char_of_byte(int b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    int k = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) k++;
    return 256 + k;
}

static void put_utf8(FILE *f, int cp)
{
    if (cp < 0x80) {
        if (cp == '"' || cp == '\\') fputc('\\', f);
        fputc(cp, f);
    } else if (cp < 0x800) {
        fputc(0xC0 | (cp >> 6), f);
        fputc(0x80 | (cp & 63), f);
    }
}

/* Vocabulary: byte b has id b; "ab" 256, "abc" 257, "abd" 258 (no merge makes it), " a" 259;
 * merges "a b" (rank 0), "ab c" (1), "Ġ a" (2); added <|bos|> 260 (special), <sep> 261 (not);
 * pre-tokenizer and post-processor as the arguments say. */
static char *write_tok(const char *dir, const char *name, const char *extra_model, const char *pre,
                       const char *post, const char *normalizer)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
               " \"added_tokens\": [{\"id\": 260, \"content\": \"<|bos|>\", \"special\": true, \"normalized\": false},\n"
               "   {\"id\": 261, \"content\": \"<sep>\", \"special\": false, \"normalized\": false}],\n"
               " \"normalizer\": %s, \"pre_tokenizer\": %s, \"post_processor\": %s,\n"
               " \"decoder\": {\"type\": \"ByteLevel\"},\n"
               " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null %s, \"vocab\": {",
            normalizer, pre, post, extra_model);
    for (int b = 0; b < 256; b++) {
        fputs(b ? ", \"" : "\"", f);
        put_utf8(f, char_of_byte(b));
        fprintf(f, "\": %d", b);
    }
    fprintf(f, ", \"ab\": 256, \"abc\": 257, \"abd\": 258, \"\xC4\xA0" "a\": 259},\n"
               "  \"merges\": [\"a b\", [\"ab\", \"c\"], \"\xC4\xA0 a\"]}}\n");
    fclose(f);
    return path;
}

static const char *BYTELEVEL = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}";
static const char *BOS_POST =
    "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<|bos|>\", \"type_id\": 0}},"
    " {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [],"
    " \"special_tokens\": {\"<|bos|>\": {\"id\": \"<|bos|>\", \"ids\": [260], \"tokens\": [\"<|bos|>\"]}}}";

/* encode text and compare with want[0..n) */
static void expect_ids(const zinf_tok *t, const char *text, unsigned flags, const int32_t *want, size_t n,
                       const char *what)
{
    zinf_ids v = {0};
    int rc = zinf_tok_encode(t, text, strlen(text), flags, &v);
    CHECK(rc == 0, "%s: encode failed: %s", what, zinf_errmsg());
    bool same = v.n == n && (n == 0 || memcmp(v.id, want, n * sizeof *want) == 0);
    CHECK(same, "%s: got %zu ids (first %d), want %zu (first %d)", what, v.n, v.n ? v.id[0] : -1, n,
          n ? want[0] : -1);
    zinf_ids_free(&v);
}

/* replace the first `from` in the file at path with `to` */
static void replace_in(const char *path, const char *from, const char *to)
{
    size_t len;
    char *j = slurp(path, &len), *m = strstr(j, from);
    CHECK(m != NULL, "%s: no %s to replace", path, from);
    FILE *f = fopen(path, "w");
    if (m) {
        fwrite(j, 1, (size_t)(m - j), f);
        fputs(to, f);
        fputs(m + strlen(from), f);
    }
    fclose(f);
    free(j);
}

static void expect_load_err(const char *path, const char *text, const char *what)
{
    zinf_tok *t = NULL;
    int rc = zinf_tok_load(path, &t);
    CHECK(rc < 0 && !t, "%s: loaded", what);
    CHECK(strstr(zinf_errmsg(), text) && !strchr(zinf_errmsg(), '\n'), "%s: message \"%s\" lacks \"%s\"",
          what, zinf_errmsg(), text);
}

static void unit_checks(void)
{
    char dir[] = "/tmp/zinf-test-tok.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    zinf_tok *t;
    const char *p = write_tok(dir, "plain.json", "", BYTELEVEL, "{\"type\": \"ByteLevel\"}", "null");
    CHECK(zinf_tok_load(p, &t) == 0, "load: %s", zinf_errmsg());
    if (!t) exit(1);
    CHECK(zinf_tok_vocab_size(t) == 262, "vocab size %d", zinf_tok_vocab_size(t));
    CHECK(zinf_tok_id(t, "ab") == 256 && zinf_tok_id(t, "<sep>") == 261 && zinf_tok_id(t, "\xC4\xA0") == 32 &&
              zinf_tok_id(t, "zz") == -1,
          "zinf_tok_id");
    /* GPT-2's regex: "abc" | " abd" | "<" ... ; "abc" -> a b c -> ab c -> abc = 257; " abd": Ġ a b d
     * -> (rank 0 "a b") Ġ ab d; "Ġ ab" is no merge, so [32, 256, 100] */
    expect_ids(t, "abc abd", 1, (int32_t[]){257, 32, 256, 100}, 4, "merges by rank");
    /* " a" alone: Ġ a -> merge 2 -> 259 */
    expect_ids(t, "x a", 1, (int32_t[]){120, 259}, 2, "merge of the space");
    /* added tokens: special matched only with ZINF_TOK_SPECIAL; <sep> (not special) always */
    expect_ids(t, "a<|bos|>b<sep>", 1, (int32_t[]){97, 260, 98, 261}, 4, "added tokens");
    expect_ids(t, "<|bos|><sep>", 0,
               (int32_t[]){'<', '|', 98, 111, 115, '|', '>', 261}, 8, "special tokens not matched");
    expect_ids(t, "", 3, NULL, 0, "empty text, no post-processor ids");
    /* invalid UTF-8: one line with the byte offset */
    zinf_ids v = {0};
    CHECK(zinf_tok_encode(t, "ab\xC3(", 4, 1, &v) < 0 && strstr(zinf_errmsg(), "invalid UTF-8 at byte 2"),
          "invalid UTF-8: %s", zinf_errmsg());
    CHECK(zinf_tok_encode(t, "\xED\xA0\x80", 3, 1, &v) < 0, "a surrogate is not UTF-8");
    CHECK(zinf_tok_encode(t, "\xC0\xAF", 2, 1, &v) < 0, "an overlong form is not UTF-8");
    CHECK(zinf_tok_encode(t, "\xF4\x90\x80\x80", 4, 1, &v) < 0, "past U+10FFFF is not UTF-8");
    /* decode: U+FFFD for each maximal invalid subpart (Unicode's rule, Python's errors="replace"):
     * E4 B8 (a truncated 3-byte form) is one, then 'a'; ED A0 80 is three; FF one */
    char *s;
    size_t n;
    CHECK(zinf_tok_decode(t, (int32_t[]){0xE4, 0xB8, 'a', 0xED, 0xA0, 0x80, 0xFF, 256}, 8, &s, &n) == 0, "decode");
    const char want[] = "\xEF\xBF\xBD" "a" "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "\xEF\xBF\xBD" "ab";
    CHECK(n == sizeof want - 1 && memcmp(s, want, n) == 0 && s[n] == 0, "decode replacement: %zu bytes", n);
    free(s);
    CHECK(zinf_tok_decode(t, (int32_t[]){262}, 1, &s, &n) < 0 && strstr(zinf_errmsg(), "id 262"), "decode of an unknown id");
    /* cuts: GPT-2's regex allows one after a line break that a printable ASCII character follows
     * and precedes, not before a space, a tab, another line break or a non-ASCII character, nor
     * after whitespace (" \n" then "x": \s+(?!\S) leaves the \n for a piece of its own in the
     * whole text, but takes " \n" together at the end of a part) */
    const char cuts[] = "ab\n cd\n\n\t\n\xC3\xA9\nx y \nz.\nw";
    CHECK(zinf_tok_next_cut(t, cuts, sizeof cuts - 1, 0) == 21, "next cut %zu",
          zinf_tok_next_cut(t, cuts, sizeof cuts - 1, 0));
    CHECK(zinf_tok_next_cut(t, cuts, sizeof cuts - 1, 14) == 21, "next cut after a space %zu",
          zinf_tok_next_cut(t, cuts, sizeof cuts - 1, 14));
    CHECK(zinf_tok_next_cut(t, cuts, sizeof cuts - 1, 21) == sizeof cuts - 1, "no cut left");
    zinf_tok_free(t);

    /* ignore_merges: a piece that is a vocabulary entry is that id without merging */
    p = write_tok(dir, "ignore.json", ", \"ignore_merges\": true", BYTELEVEL, BOS_POST, "null");
    CHECK(zinf_tok_load(p, &t) == 0, "load ignore_merges: %s", zinf_errmsg());
    if (t) {
        expect_ids(t, "abd", 1, (int32_t[]){258}, 1, "ignore_merges");
        expect_ids(t, "abd", 3, (int32_t[]){260, 258}, 2, "TemplateProcessing BOS");
        expect_ids(t, "", 3, (int32_t[]){260}, 1, "empty text with BOS");
        zinf_tok_free(t);
    }
    /* a Split with a literal String, behavior Removed, before ByteLevel without its regex:
     * "ab-c" -> "ab", "c" */
    p = write_tok(dir, "split.json", "",
                  "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"},"
                  " \"behavior\": \"Removed\", \"invert\": false}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}",
                  "null", "{\"type\": \"NFC\"}");
    CHECK(zinf_tok_load(p, &t) == 0, "load split: %s", zinf_errmsg());
    if (t) {
        expect_ids(t, "ab-c", 1, (int32_t[]){256, 99}, 2, "Split Removed");
        CHECK(zinf_tok_next_cut(t, "a\nb\nc", 5, 0) == 5, "a regex zinf does not know: no cut");
        zinf_tok_free(t);
    }
    /* Oniguruma's \uHHHH and \x{HHHH} in a regex, as tokenizers reads them: "-" and "c" split */
    p = write_tok(dir, "bsux.json", "",
                  "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\":"
                  " \"\\\\u002d|\\\\x{63}\"}, \"behavior\": \"Isolated\", \"invert\": false},"
                  " {\"type\": \"ByteLevel\", \"use_regex\": false}]}",
                  "null", "null");
    CHECK(zinf_tok_load(p, &t) == 0, "load \\u escapes: %s", zinf_errmsg());
    if (t) {
        expect_ids(t, "ab-abc", 1, (int32_t[]){256, '-', 256, 'c'}, 4, "\\u002d and \\x{63} in a Split regex");
        zinf_tok_free(t);
    }

    /* refusals, one line each naming the file and the feature */
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/none", dir);
    expect_load_err(missing, "none: cannot read the tokenizer: No such file or directory", "missing file");
    mkdir(missing, 0755);
    expect_load_err(missing, "none/tokenizer.json: cannot read the tokenizer", "directory without tokenizer.json");
    p = write_tok(dir, "wp.json", "", BYTELEVEL, "null", "null");
    replace_in(p, "\"BPE\"", "\"WordPiece\""); /* the same file with the model type changed */
    expect_load_err(p, "wp.json: model type WordPiece is not supported", "WordPiece");
    /* one id, two different tokens: two vocabulary entries, an added token and the vocabulary's,
     * two added tokens (one with a newline, shown as JSON writes it, on one line) */
    p = write_tok(dir, "dup1.json", "", BYTELEVEL, "null", "null");
    replace_in(p, "\"abd\": 258", "\"abd\": 257");
    expect_load_err(p, "dup1.json: id 257 is given to two different tokens: model.vocab \"abc\" and model.vocab \"abd\"",
                    "two vocabulary entries of one id");
    p = write_tok(dir, "dup2.json", "", BYTELEVEL, "null", "null");
    replace_in(p, "{\"id\": 261, \"content\": \"<sep>\"", "{\"id\": 258, \"content\": \"<sep>\"");
    expect_load_err(p, "dup2.json: id 258 is given to two different tokens: model.vocab \"abd\" and added_tokens[1] \"<sep>\"",
                    "an added token at a vocabulary entry's id");
    p = write_tok(dir, "dup3.json", "", BYTELEVEL, "null", "null");
    replace_in(p, "{\"id\": 261, \"content\": \"<sep>\"", "{\"id\": 260, \"content\": \"<s\\nep>\"");
    expect_load_err(p, "dup3.json: id 260 is given to two different tokens: added_tokens[0] \"<|bos|>\" and "
                    "added_tokens[1] \"<s\\nep>\"", "two added tokens of one id");
    /* an added token that repeats its vocabulary entry (text and id, as GPT-2's <|endoftext|>) is
     * the same token: loaded, and "abd" is still 258 both ways */
    p = write_tok(dir, "same.json", "", BYTELEVEL, "null", "null");
    replace_in(p, "{\"id\": 261, \"content\": \"<sep>\"", "{\"id\": 258, \"content\": \"abd\"");
    CHECK(zinf_tok_load(p, &t) == 0, "an added token repeating its vocabulary entry: %s", zinf_errmsg());
    if (t) {
        expect_ids(t, "abd", 0, (int32_t[]){258}, 1, "an added token repeating its vocabulary entry");
        char *d = NULL;
        size_t dn = 0;
        CHECK(zinf_tok_decode(t, (int32_t[]){258}, 1, &d, &dn) == 0 && dn == 3 && !memcmp(d, "abd", 3),
              "decode 258: \"%.*s\"", (int)dn, d ? d : "");
        free(d);
        zinf_tok_free(t);
    }
    /* or its bytes: " a" at the id of the vocabulary's "\u0120a" */
    p = write_tok(dir, "same2.json", "", BYTELEVEL, "null", "null");
    replace_in(p, "{\"id\": 261, \"content\": \"<sep>\"", "{\"id\": 259, \"content\": \" a\"");
    CHECK(zinf_tok_load(p, &t) == 0, "an added token of its vocabulary entry's bytes: %s", zinf_errmsg());
    if (t) zinf_tok_free(t);
    p = write_tok(dir, "re.json", "",
                  "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"[a-\"}, \"behavior\": \"Isolated\", \"invert\": false}",
                  "null", "null");
    expect_load_err(p, "re.json: pre_tokenizer Split regex rejected by PCRE2 at offset 3", "bad regex");
    p = write_tok(dir, "beh.json", "",
                  "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Contiguous\", \"invert\": false}",
                  "null", "null");
    expect_load_err(p, "beh.json: pre_tokenizer Split behavior \"Contiguous\" is not supported", "behavior");
    p = write_tok(dir, "nfkc.json", "", BYTELEVEL, "null", "{\"type\": \"NFKC\"}");
    expect_load_err(p, "nfkc.json: normalizer type NFKC is not supported", "NFKC");
    p = write_tok(dir, "drop.json", ", \"dropout\": 0.1", BYTELEVEL, "null", "null");
    expect_load_err(p, "drop.json: model dropout 0.1 is not supported", "dropout");
    p = write_tok(dir, "meta.json", "", "{\"type\": \"Metaspace\"}", "null", "null");
    expect_load_err(p, "meta.json: pre_tokenizer type Metaspace is not supported", "Metaspace");
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
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
    unit_checks();
    return check_done("test_tok");
}
