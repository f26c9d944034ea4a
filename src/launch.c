#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_setaffinity, CPU_ALLOC */
#endif
#include "launch.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "err.h"
#include "file.h"

static int own_cpus(int **cpus, int *n);
static int core_key(int cpu);

/* slots per host, at most: more GPUs or cores than a node has is a typo, and each slot is a
 * rank of the mpirun command line (a million made a 7 MB line) */
#define MAX_SLOTS 4096

void zinf_launch_opts_defaults(zinf_launch_opts *o)
{
    memset(o, 0, sizeof *o);
    o->num_nodes = o->num_gpus = o->master_port = o->ssh_port = o->nnodes = o->node_rank = -1;
    o->bind_cores = -1;
    o->mpirun = "mpirun";
}

void zinf_launch_pool_free(zinf_launch_pool *pool)
{
    for (int i = 0; i < pool->n; i++) {
        free(pool->h[i].name);
        free(pool->h[i].slot);
    }
    free(pool->h);
    pool->h = NULL;
    pool->n = 0;
}

static int pool_add(zinf_launch_pool *pool, const char *name, size_t len, int nslots)
{
    zinf_launch_host *h = realloc(pool->h, (size_t)(pool->n + 1) * sizeof *h);
    if (!h) return zinf_errc(ZINF_ENOMEM, "out of memory");
    pool->h = h;
    h += pool->n;
    h->name = strndup(name, len);
    h->slot = malloc((size_t)nslots * sizeof *h->slot);
    if (!h->name || !h->slot) {
        free(h->name);
        free(h->slot);
        return zinf_errc(ZINF_ENOMEM, "out of memory");
    }
    h->nslots = h->n = nslots;
    for (int s = 0; s < nslots; s++) h->slot[s] = s;
    pool->n++;
    return 0;
}

static int find_host(const zinf_launch_pool *pool, const char *name, size_t len)
{
    for (int i = 0; i < pool->n; i++)
        if (strlen(pool->h[i].name) == len && !memcmp(pool->h[i].name, name, len)) return i;
    return -1;
}

/* A non-negative decimal below limit; false for anything else (signs, blanks, overflow). */
static bool parse_count(const char *s, size_t len, long limit, int *out)
{
    if (!len || len > 9) return false;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i])) return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v >= limit) return false;
    *out = (int)v;
    return true;
}

/* A host name mpirun's --host NAME:N,... and --include HOST:SLOT@... can carry: at most 255 bytes
 * (a DNS name's limit), printable ASCII, no ':' (an IPv6 address: OpenMPI takes none) nor ','. */
static int check_host_name(const char *h, size_t hl, const char *fname, int lineno)
{
    if (hl > 255)
        return zinf_err("%s:%d: host %.40s...: a name of %zu bytes, at most 255 (a DNS name's limit)", fname, lineno, h,
                        hl);
    for (size_t i = 0; i < hl; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c == ':')
            return zinf_err("%s:%d: host %.*s: a ':' (an IPv6 address?) cannot be passed in mpirun's --host NAME:N nor "
                            "named in --include HOST:SLOT; give the host's name", fname, lineno, (int)hl, h);
        if (c == ',')
            return zinf_err("%s:%d: host %.*s: a ',' separates hosts in mpirun's --host list; a host name has none",
                            fname, lineno, (int)hl, h);
        /* DeepSpeed's hostfile takes user@host (pdsh logs in as user), but its --include splits at
         * every '@' too, so it cannot name that host; OpenMPI's --host refuses it */
        if (c == '@')
            return zinf_err("%s:%d: host %.*s: mpirun's --host takes no user@ (OpenMPI refuses the name), and "
                            "--include/--exclude could not name it ('@' separates hosts there, as in DeepSpeed): set "
                            "the user in ~/.ssh/config (Host %.*s, User %.*s) and write the host alone", fname, lineno,
                            (int)hl, h, (int)(hl - i - 1), h + i + 1, (int)i, h);
        if (c < 0x21 || c > 0x7e)
            return zinf_err("%s:%d: host %.*s: byte %zu is 0x%02X: a host name is printable ASCII", fname, lineno,
                            (int)hl, h, i + 1, c);
    }
    return 0;
}

/* A name of this node whatever the machine: localhost, localhost.localdomain, or an IPv4 address
 * in 127.0.0.0/8 as the resolver reads one (127.0.0.1, 127.1, 2130706433 alike). */
static bool loopback(const char *h, size_t hl)
{
    if ((hl == 9 && !strncasecmp(h, "localhost", 9)) || (hl == 21 && !strncasecmp(h, "localhost.localdomain", 21)))
        return true;
    char name[256];
    struct in_addr a;
    if (hl >= sizeof name) return false;
    memcpy(name, h, hl);
    name[hl] = 0;
    return inet_aton(name, &a) && (ntohl(a.s_addr) >> 24) == 127;
}

/* The host of the pool that h names as well, or -1: the same name in other letter case (host
 * names ignore it), or both names of this node. *why says which. */
static int same_node(const zinf_launch_pool *pool, const char *h, size_t hl, const char **why)
{
    for (int i = 0; i < pool->n; i++) {
        const char *n = pool->h[i].name;
        *why = "host names ignore case";
        if (strlen(n) == hl && !strncasecmp(n, h, hl)) return i;
        *why = "both name this node";
        if (loopback(h, hl) && loopback(n, strlen(n))) return i;
    }
    return -1;
}

int zinf_launch_parse_hostfile(const char *text, const char *fname, zinf_launch_pool *pool, FILE *notes)
{
    pool->h = NULL;
    pool->n = 0;
    int *line_of = NULL; /* where each host was named, for the duplicate message */
    int lineno = 0, rc = 0, same;
    const char *why;
    /* a UTF-8 byte order mark (Notepad's, PowerShell's) is no part of the first host's name */
    if (!strncmp(text, "\xEF\xBB\xBF", 3)) text += 3;
    for (const char *p = text; *p && !rc;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *next = eol ? eol + 1 : p + len;
        lineno++;
        /* a comment runs from any '#' to the line's end, as OpenMPI's hostfile reader takes it
         * (and DeepSpeed's regex reads "node1 slots=2#x" as 2 slots) */
        const char *hash = memchr(p, '#', len);
        if (hash) len = (size_t)(hash - p);
        while (len && isspace((unsigned char)*p)) p++, len--;
        while (len && isspace((unsigned char)p[len - 1])) len--;
        if (!len) { p = next; continue; }
        /* HOST slots=N [# comment] */
        size_t hl = 0;
        while (hl < len && !isspace((unsigned char)p[hl])) hl++;
        const char *s = p + hl;
        size_t rest = len - hl;
        while (rest && isspace((unsigned char)*s)) s++, rest--;
        size_t sl = 0;
        while (sl < rest && !isspace((unsigned char)s[sl])) sl++;
        int nslots = 0;
        if ((rc = check_host_name(p, hl, fname, lineno))) {
        } else if (sl < 6 || strncmp(s, "slots=", 6) != 0) {
            rc = zinf_err("%s:%d: expected 'HOST slots=N', got '%.*s'", fname, lineno, (int)len, p);
        } else if (!parse_count(s + 6, sl - 6, MAX_SLOTS + 1, &nslots) || nslots < 1) {
            rc = zinf_err("%s:%d: host %.*s: slots=%.*s: expected a whole number from 1 to %d", fname, lineno, (int)hl,
                          p, (int)(sl - 6), s + 6, MAX_SLOTS);
        } else if (find_host(pool, p, hl) >= 0) {
            rc = zinf_err("%s:%d: host %.*s is listed twice (first on line %d)", fname, lineno, (int)hl, p,
                          line_of[find_host(pool, p, hl)]);
        } else if ((same = same_node(pool, p, hl, &why)) >= 0) {
            /* DeepSpeed's _parse_hostfile compares the text alone and would start a second set of
             * ranks on that node's GPUs */
            rc = zinf_err("%s:%d: host %.*s is host %s of line %d (%s): list the node once, with all its slots", fname,
                          lineno, (int)hl, p, pool->h[same].name, line_of[same], why);
        } else {
            const char *tail = s + sl;
            size_t tl = rest - sl;
            while (tl && isspace((unsigned char)*tail)) tail++, tl--;
            if (tl && notes)
                fprintf(notes, "zinf-launch: %s:%d: '%.*s' after slots= is not used\n", fname, lineno, (int)tl, tail);
            int *lo = realloc(line_of, (size_t)(pool->n + 1) * sizeof *lo);
            if (!lo) rc = zinf_errc(ZINF_ENOMEM, "out of memory");
            else {
                line_of = lo;
                line_of[pool->n] = lineno;
                rc = pool_add(pool, p, hl, nslots);
            }
        }
        p = next;
    }
    free(line_of);
    if (!rc && !pool->n) rc = zinf_err("%s: names no hosts (lines are 'HOST slots=N')", fname);
    if (rc) zinf_launch_pool_free(pool);
    return rc;
}

static void host_names(const zinf_launch_pool *pool, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < pool->n && o + 1 < cap; i++) {
        int w = snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", pool->h[i].name);
        if (w < 0 || (size_t)w >= cap - o) {
            snprintf(buf + (cap > 5 ? cap - 5 : 0), cap > 5 ? 5 : cap, "...");
            break;
        }
        o += (size_t)w;
    }
}

/* Each host's slots, as DeepSpeed's parse_node_config_list leaves them: ascending whatever the
 * order written, a repeated slot once, blanks around a slot number ignored (Python's int()). */
int zinf_launch_filter(zinf_launch_pool *pool, const char *include, const char *exclude)
{
    if (include && exclude) return zinf_err("--include and --exclude exclude each other");
    const char *spec = include ? include : exclude, *flag = include ? "--include" : "--exclude";
    if (!spec) return 0;
    int nh = pool->n;
    bool *named = calloc((size_t)nh + 1, sizeof *named);
    char **keep = calloc((size_t)nh + 1, sizeof *keep); /* per host: slot chosen */
    int rc = 0;
    if (!named || !keep) rc = zinf_errc(ZINF_ENOMEM, "out of memory");
    for (int i = 0; i < nh && !rc; i++) {
        keep[i] = calloc((size_t)pool->h[i].nslots, 1);
        if (!keep[i]) rc = zinf_errc(ZINF_ENOMEM, "out of memory");
        /* exclude starts from what is chosen, include from nothing */
        for (int s = 0; s < pool->h[i].n && exclude && !rc; s++) keep[i][pool->h[i].slot[s]] = 1;
    }
    if (!*spec && !rc) rc = zinf_err("%s: empty (expected HOST[:SLOT,...][@HOST...])", flag);
    for (const char *p = spec; *p && !rc;) {
        const char *end = strchr(p, '@');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        size_t hl = colon ? (size_t)(colon - p) : len;
        int h = hl ? find_host(pool, p, hl) : -1;
        char names[512];
        if (!len || !hl) {
            rc = zinf_err("%s '%s': an empty host name", flag, spec);
        } else if (h < 0) {
            host_names(pool, names, sizeof names);
            rc = zinf_err("%s: host '%.*s' is not among the hosts (%s)", flag, (int)hl, p, names);
        } else if (named[h]) {
            rc = zinf_err("%s: host %s is named twice", flag, pool->h[h].name);
        } else {
            named[h] = true;
            zinf_launch_host *H = &pool->h[h];
            if (colon && colon + 1 == p + len)
                rc = zinf_err("%s: host %s: no slot after ':'", flag, H->name);
            for (int s = 0; !colon && s < H->nslots; s++) keep[h][s] = include ? 1 : 0; /* the whole host */
            for (const char *q = colon ? colon + 1 : p + len; q < p + len && !rc;) {
                const char *comma = memchr(q, ',', (size_t)(p + len - q));
                size_t sl = comma ? (size_t)(comma - q) : (size_t)(p + len - q);
                const char *d = q;
                size_t dl = sl;
                while (dl && isspace((unsigned char)*d)) d++, dl--;
                while (dl && isspace((unsigned char)d[dl - 1])) dl--;
                int s;
                if (!parse_count(d, dl, MAX_SLOTS, &s))
                    rc = zinf_err("%s: host %s: slot '%.*s' is not a whole number", flag, H->name, (int)sl, q);
                else if (s >= H->nslots)
                    rc = zinf_err("%s: host %s has slots 0-%d, not %d", flag, H->name, H->nslots - 1, s);
                else keep[h][s] = include ? 1 : 0;
                q += sl + (comma ? 1 : 0);
                if (comma && q == p + len) rc = zinf_err("%s: host %s: an empty slot after ','", flag, H->name);
            }
        }
        p += len + (end ? 1 : 0);
        if (end && !*p && !rc) rc = zinf_err("%s '%s': an empty host name after '@'", flag, spec);
    }
    int total = 0;
    for (int i = 0; i < nh && !rc; i++) {
        zinf_launch_host *H = &pool->h[i];
        H->n = 0;
        for (int s = 0; s < H->nslots; s++)
            if (keep[i][s]) H->slot[H->n++] = s;
        total += H->n;
    }
    if (!rc && !total) rc = zinf_err("%s '%s' leaves no slots to run on", flag, spec);
    for (int i = 0; i < nh && keep; i++) free(keep[i]);
    free(keep);
    free(named);
    return rc;
}

/* --num_nodes and --num_gpus: not given (-1) or at least 1 */
static int check_counts(int64_t num_nodes, int64_t num_gpus)
{
    if (num_nodes == 0 || num_nodes < -1) return zinf_err("--num_nodes must be at least 1");
    if (num_gpus == 0 || num_gpus < -1) return zinf_err("--num_gpus must be at least 1");
    return 0;
}

int zinf_launch_limit(zinf_launch_pool *pool, int64_t num_nodes, int64_t num_gpus)
{
    int active = 0;
    for (int i = 0; i < pool->n; i++) active += pool->h[i].n > 0;
    ZINF_TRY(check_counts(num_nodes, num_gpus));
    if (num_nodes > active)
        return zinf_err("--num_nodes %lld: only %d host%s to run on", (long long)num_nodes, active,
                        active == 1 ? "" : "s");
    int kept = 0;
    for (int i = 0; i < pool->n; i++) {
        zinf_launch_host *H = &pool->h[i];
        if (!H->n) continue;
        if (num_nodes > 0 && kept >= num_nodes) { H->n = 0; continue; }
        kept++;
        if (num_gpus > 0) {
            if (num_gpus > H->nslots)
                return zinf_err("--num_gpus %lld: host %s has %d slot%s", (long long)num_gpus, H->name, H->nslots,
                                H->nslots == 1 ? "" : "s");
            H->n = (int)num_gpus;
            for (int s = 0; s < H->n; s++) H->slot[s] = s;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- the command -------------- */
typedef struct {
    char **v;
    int n, cap;
    int rc;
} argv_b;

static void push(argv_b *a, const char *s)
{
    if (a->rc) return;
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        char **v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) { a->rc = zinf_errc(ZINF_ENOMEM, "out of memory"); return; }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n] = strdup(s);
    if (!a->v[a->n]) { a->rc = zinf_errc(ZINF_ENOMEM, "out of memory"); return; }
    a->v[++a->n] = NULL;
}

static void pushf(argv_b *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pushf(argv_b *a, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof buf) {
        if (!a->rc) a->rc = zinf_err("an mpirun argument is longer than %zu bytes", sizeof buf - 1);
        return;
    }
    push(a, buf);
}

void zinf_launch_argv_free(char **argv)
{
    if (!argv) return;
    for (char **p = argv; *p; p++) free(*p);
    free(argv);
}

/* Split --launcher_args at blanks; '...' and "..." group, a backslash outside '' escapes. */
static int split_args(const char *s, argv_b *a)
{
    char *w = malloc(strlen(s) + 1);
    if (!w) return zinf_errc(ZINF_ENOMEM, "out of memory");
    while (*s) {
        while (isspace((unsigned char)*s)) s++;
        if (!*s) break;
        size_t n = 0;
        char q = 0;
        for (; *s && (q || !isspace((unsigned char)*s)); s++) {
            if (q == '\'' ) { if (*s == '\'') q = 0; else w[n++] = *s; }
            else if (*s == '\\' && s[1]) w[n++] = *++s;
            else if (q == '"') { if (*s == '"') q = 0; else w[n++] = *s; }
            else if (*s == '\'' || *s == '"') q = *s;
            else w[n++] = *s;
        }
        if (q) {
            free(w);
            return zinf_err("--launcher_args: an unterminated %c quote", q);
        }
        w[n] = 0;
        push(a, w);
    }
    free(w);
    return a->rc;
}

static bool exported_name(const char *name, size_t len)
{
    static const char *const prefix[] = {"NCCL_", "ZINF_", "UCX_", "OMP_"};
    static const char *const exact[] = {"PATH", "LD_LIBRARY_PATH", "OPENBLAS_NUM_THREADS"};
    for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++)
        if (len > strlen(prefix[i]) && !strncmp(name, prefix[i], strlen(prefix[i]))) return true;
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (len == strlen(exact[i]) && !strncmp(name, exact[i], len)) return true;
    return false;
}

static bool valid_name(const char *s, size_t len)
{
    if (!len || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
    for (size_t i = 1; i < len; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return false;
    return true;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* DeepSpeed's .deepspeed_env: NAME=VALUE per line, exported to every rank as given. */
static int env_file_exports(const char *path, argv_b *a, char ***names, int *nnames)
{
    FILE *f = fopen(path, "r");
    if (!f) return zinf_errc(-errno, "%s: %s", path, strerror(errno));
    char line[8192];
    int lineno = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') { rc = zinf_err("%s:%d: line too long", path, lineno); break; }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        const char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#') continue;
        const char *eq = strchr(p, '=');
        if (!eq || !valid_name(p, (size_t)(eq - p))) {
            rc = zinf_err("%s:%d: expected NAME=VALUE, got '%s'", path, lineno, p);
            break;
        }
        char **nv = realloc(*names, (size_t)(*nnames + 1) * sizeof *nv);
        if (!nv) { rc = zinf_errc(ZINF_ENOMEM, "out of memory"); break; }
        *names = nv;
        if (!(nv[*nnames] = strndup(p, (size_t)(eq - p)))) { rc = zinf_errc(ZINF_ENOMEM, "out of memory"); break; }
        (*nnames)++;
        push(a, "-x");
        push(a, p);
        rc = a->rc;
    }
    if (!rc && ferror(f)) rc = zinf_errc(ZINF_EIO, "%s: read error", path);
    fclose(f);
    return rc;
}

static int env_exports(const zinf_launch_opts *o, argv_b *a)
{
    char **fnames = NULL;
    int nf = 0, rc = 0;
    if (o->env_file) rc = env_file_exports(o->env_file, a, &fnames, &nf);
    int n = 0;
    for (char *const *e = o->environ; e && *e; e++) n++;
    char **names = calloc((size_t)n + 1, sizeof *names);
    int k = 0;
    if (!names && !rc) rc = zinf_errc(ZINF_ENOMEM, "out of memory");
    for (char *const *e = o->environ; e && *e && !rc; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : 0;
        if (!eq || !valid_name(*e, len) || !exported_name(*e, len)) continue;
        bool in_file = false;
        for (int i = 0; i < nf; i++) in_file |= strlen(fnames[i]) == len && !strncmp(fnames[i], *e, len);
        if (!in_file) names[k++] = *e;
    }
    if (!rc) {
        qsort(names, (size_t)k, sizeof *names, cmp_str);
        for (int i = 0; i < k; i++) {
            push(a, "-x");
            pushf(a, "%.*s", (int)(strchr(names[i], '=') - names[i]), names[i]);
        }
        rc = a->rc;
    }
    for (int i = 0; i < nf; i++) free(fnames[i]);
    free(fnames);
    free(names);
    return rc;
}

/* CUDA_VISIBLE_DEVICES of the launch node as CUDA reads it: its entries up to the first one that
 * starts with '-' (-1 hides that GPU and every one after it), none when it is set but empty. An
 * empty entry ("0,1," or "0,,1") or one after a hiding entry is an error: it would have been a
 * rank without a GPU, or a GPU that the ranks cannot see. */
static int split_cvd(const char *cvd, char ***ent, int *n)
{
    *ent = NULL;
    *n = 0;
    if (!cvd || !*cvd) return 0;
    int k = 0;
    for (const char *p = cvd, *hid = NULL;; k++) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (!len)
            return zinf_err("CUDA_VISIBLE_DEVICES '%s': entry %d is empty (GPU indices or UUIDs, separated by commas)",
                            cvd, k + 1);
        if (hid)
            return zinf_err("CUDA_VISIBLE_DEVICES '%s': CUDA sees no entry after '%.*s', so not '%.*s'", cvd,
                            (int)(strchrnul(hid, ',') - hid), hid, (int)len, p);
        if (*p == '-') hid = p;
        else {
            char **e = realloc(*ent, (size_t)(*n + 1) * sizeof *e);
            if (!e) return zinf_errc(ZINF_ENOMEM, "out of memory");
            *ent = e;
            if (!(e[*n] = strndup(p, len))) return zinf_errc(ZINF_ENOMEM, "out of memory");
            (*n)++;
        }
        if (!c) break;
        p = c + 1;
    }
    return 0;
}

/* the hostfile's text; a NUL inside it or more than 64 MiB is not a hostfile */
static int read_text(const char *path, char **out)
{
    size_t n = 0;
    ZINF_TRY(zinf_read_file("hostfile", path, out, &n));
    int rc = n > (64u << 20) ? zinf_err("hostfile %s: larger than 64 MiB", path)
             : memchr(*out, 0, n) ? zinf_err("hostfile %s: not a text file", path) : 0;
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

static const char *env_of(char *const *env, const char *name);

static int build_pool(const zinf_launch_opts *o, zinf_launch_pool *pool, char ***cvd, int *ncvd, FILE *notes)
{
    if (o->hostfile) {
        char *text = NULL;
        ZINF_TRY(read_text(o->hostfile, &text));
        int rc = zinf_launch_parse_hostfile(text, o->hostfile, pool, notes);
        free(text);
        if (!rc && o->cuda_visible && notes)
            fprintf(notes, "zinf-launch: CUDA_VISIBLE_DEVICES is not used with a hostfile: its slots are GPU indices\n");
        return rc;
    }
    if (o->num_nodes > 1) return zinf_err("--num_nodes %lld needs a --hostfile", (long long)o->num_nodes);
    /* zinf-launch reads no Slurm allocation: inside one of several nodes, say where the ranks go */
    const char *sn = env_of(o->environ, "SLURM_JOB_NUM_NODES");
    if (sn && atoi(sn) > 1 && notes)
        fprintf(notes, "zinf-launch: this Slurm allocation has %d nodes and no --hostfile is given: the ranks start on "
                       "this node alone (srun, or the scripts in jobs/slurm/, start them on every node)\n", atoi(sn));
    /* this node: its GPUs, or the ones CUDA_VISIBLE_DEVICES lists (slot i is its i-th entry) */
    ZINF_TRY(split_cvd(o->cuda_visible, cvd, ncvd));
    int n = o->cuda_visible ? *ncvd : o->local_gpus;
    if (n <= 0) {
        if (o->num_gpus <= 0 && o->cuda_visible && o->local_gpus > 0)
            return zinf_err("CUDA_VISIBLE_DEVICES '%s' hides every GPU of this node: --num_gpus N starts N ranks here "
                            "(CPU backend: --device cpu)", o->cuda_visible);
        if (o->num_gpus <= 0)
            return zinf_err("no GPU found on this node: --num_gpus N starts N ranks here (CPU backend: --device cpu)");
        n = (int)o->num_gpus; /* CPU ranks: as many as asked */
    }
    return pool_add(pool, "localhost", strlen("localhost"), n);
}

/* ---------------------------------------------------------------- torchrun's spellings ----- */
static const char *env_of(char *const *env, const char *name)
{
    size_t l = strlen(name);
    for (; env && *env; env++)
        if (!strncmp(*env, name, l) && (*env)[l] == '=') return (*env)[l + 1] ? *env + l + 1 : NULL;
    return NULL;
}

/* One setting that can come from several places: the value and how it was given. */
typedef struct {
    int64_t v;     /* -1: not given */
    char how[96];  /* "--num_gpus 2", "NPROC_PER_NODE=2 (environment)" */
} setting;

#define EVERY_SLOT (-2) /* --nproc_per_node gpu / auto */

/* v given as how: agree with what s holds already, or an error naming both */
static int settle(setting *s, int64_t v, const char *how)
{
    if (v == -1) return 0;
    if (s->v != -1 && s->v != v) return zinf_err("%s and %s disagree: give one of them", s->how, how);
    if (s->v == -1) {
        s->v = v;
        snprintf(s->how, sizeof s->how, "%s", how);
    }
    return 0;
}

/* a count written as text (a flag's value or a variable), at least lo; gpu/auto where every_ok */
static int count_text(const char *t, const char *how, int64_t lo, bool every_ok, int64_t *out)
{
    int v;
    if (every_ok && (!strcmp(t, "gpu") || !strcmp(t, "auto"))) { *out = EVERY_SLOT; return 0; }
    if (every_ok && !strcmp(t, "cpu"))
        return zinf_err("%s: zinf runs one rank per GPU, or a number of CPU ranks: give that number", how);
    if (!parse_count(t, strlen(t), MAX_SLOTS * 16 + 1, &v) || v < lo)
        return zinf_err("%s: expected a whole number%s%s", how, lo ? " from 1" : " from 0", every_ok ? ", gpu or auto" : "");
    *out = v;
    return 0;
}

typedef struct { setting nproc, nnodes, node_rank, port; const char *addr, *addr_how; char addr_buf[96]; } torchrun_view;

static int torchrun_settle(const zinf_launch_opts *o, torchrun_view *t)
{
    char how[96];
    int64_t v;
    memset(t, 0, sizeof *t);
    t->nproc.v = t->nnodes.v = t->node_rank.v = t->port.v = -1;
    snprintf(how, sizeof how, "--num_gpus %lld", (long long)o->num_gpus);
    ZINF_TRY(settle(&t->nproc, o->num_gpus, how));
    if (o->nproc_per_node) {
        snprintf(how, sizeof how, "--nproc_per_node %s", o->nproc_per_node);
        ZINF_TRY(count_text(o->nproc_per_node, how, 1, true, &v));
        ZINF_TRY(settle(&t->nproc, v, how));
    }
    snprintf(how, sizeof how, "--num_nodes %lld", (long long)o->num_nodes);
    ZINF_TRY(settle(&t->nnodes, o->num_nodes, how));
    if (o->nnodes == 0 || o->nnodes < -1) return zinf_err("--nnodes must be at least 1");
    snprintf(how, sizeof how, "--nnodes %lld", (long long)o->nnodes);
    ZINF_TRY(settle(&t->nnodes, o->nnodes, how));
    if (o->node_rank < -1) return zinf_err("--node_rank %lld: expected 0 or more", (long long)o->node_rank);
    snprintf(how, sizeof how, "--node_rank %lld", (long long)o->node_rank);
    ZINF_TRY(settle(&t->node_rank, o->node_rank, how));
    snprintf(how, sizeof how, "--master_port %lld", (long long)o->master_port);
    ZINF_TRY(settle(&t->port, o->master_port, how));
    static const struct { const char *name; int64_t lo; bool every; int which; } vars[] = {
        {"NPROC_PER_NODE", 1, true, 0}, {"NNODES", 1, false, 1}, {"NODE_RANK", 0, false, 2}, {"MASTER_PORT", 1, false, 3}};
    for (size_t k = 0; k < sizeof vars / sizeof *vars; k++) {
        const char *e = env_of(o->environ, vars[k].name);
        if (!e) continue;
        snprintf(how, sizeof how, "%s=%.60s (environment)", vars[k].name, e);
        ZINF_TRY(count_text(e, how, vars[k].lo, vars[k].every, &v));
        if (vars[k].which == 3 && v > 65535) return zinf_err("%s: expected 1-65535", how);
        setting *s = vars[k].which == 0 ? &t->nproc : vars[k].which == 1 ? &t->nnodes : vars[k].which == 2 ? &t->node_rank : &t->port;
        ZINF_TRY(settle(s, v, how));
    }
    t->addr = o->master_addr;
    t->addr_how = "--master_addr";
    const char *ea = env_of(o->environ, "MASTER_ADDR");
    if (ea && o->master_addr && strcmp(ea, o->master_addr))
        return zinf_err("--master_addr %s and MASTER_ADDR=%s (environment) disagree: give one of them", o->master_addr, ea);
    if (ea && !t->addr) {
        t->addr = ea;
        t->addr_how = "MASTER_ADDR";
    }
    return 0;
}

char *zinf_launch_equivalent(const zinf_launch_opts *o, int64_t nnodes, int64_t nproc)
{
    argv_b a = {0};
    push(&a, "zinf-launch");
    push(&a, "--hostfile");
    push(&a, o->hostfile ? o->hostfile : "HOSTFILE");
    if (nnodes > 0) {
        push(&a, "--num_nodes");
        pushf(&a, "%lld", (long long)nnodes);
    }
    if (nproc > 0) {
        push(&a, "--num_gpus");
        pushf(&a, "%lld", (long long)nproc);
    }
    const struct { const char *flag, *v; } s[] = {{"--include", o->include}, {"--exclude", o->exclude},
                                                 {"--launcher_args", o->launcher_args},
                                                 {"--enable_each_rank_log", o->each_rank_log},
                                                 {"--bind_core_list", o->bind_core_list}};
    for (size_t k = 0; k < sizeof s / sizeof *s; k++)
        if (s[k].v) {
            push(&a, s[k].flag);
            push(&a, s[k].v);
        }
    if (o->ssh_port > 0) {
        push(&a, "--ssh_port");
        pushf(&a, "%lld", (long long)o->ssh_port);
    }
    if (o->bind_cores >= 0) pushf(&a, "--bind_cores_to_rank=%s", o->bind_cores ? "true" : "false");
    for (int k = 0; o->prog && o->prog[k]; k++) push(&a, o->prog[k]);
    char *line = a.rc ? NULL : zinf_launch_cmdline(a.v);
    zinf_launch_argv_free(a.v);
    return line;
}

/* the program each rank runs: PROGRAM, or `zinf-launch --rank_bind MODE PROGRAM` */
static void push_bind(argv_b *a, const zinf_launch_opts *o, const char *self_launch)
{
    if (o->bind_cores == 0) return;
    push(a, self_launch);
    push(a, "--rank_bind");
    push(a, o->bind_core_list ? o->bind_core_list : o->bind_cores == 1 ? "cores" : "auto");
}

/* Where the launcher sees the node (no hostfile), each of its ranks' share as the ranks will take
 * it, said in a note; a share the ranks would refuse (too few cores, a CPU the node lacks) is
 * refused here, before mpirun starts. */
static int local_plan(const zinf_launch_opts *o, int nlocal, FILE *notes)
{
    int *cpus = NULL, n = 0, *list = NULL, nlist = 0, rc = own_cpus(&cpus, &n);
    if (!rc && o->bind_core_list) rc = zinf_launch_parse_cpulist(o->bind_core_list, "--bind_core_list", &list, &nlist);
    int *core = rc ? NULL : malloc((size_t)(n ? n : 1) * sizeof *core);
    int *mine = rc ? NULL : malloc((size_t)(n ? n : 1) * sizeof *mine);
    if (!rc && (!core || !mine)) rc = zinf_errc(ZINF_ENOMEM, "out of memory");
    int ncore = 0;
    for (int i = 0; i < n && !rc; i++) {
        core[i] = core_key(cpus[i]);
        bool seen = false;
        for (int k = 0; k < i && !seen; k++) seen = core[k] == core[i];
        ncore += !seen;
    }
    char line[4096] = "", l[256], have[256];
    size_t off = 0;
    int threads = 1;
    for (int r = 0; r < nlocal && !rc; r++) {
        int nm = 0;
        rc = zinf_launch_share(cpus, core, n, list, nlist, r, nlocal, o->bind_cores == 1 || list, mine, &nm, &threads);
        zinf_launch_cpulist(mine, nm, l, sizeof l);
        if (!rc && off + 64 < sizeof line) off += (size_t)snprintf(line + off, sizeof line - off, "%s rank %d on CPUs %s", r ? "," : "", r, l);
    }
    const char *omp = env_of(o->environ, "OMP_NUM_THREADS");
    char t[64];
    if (omp) snprintf(t, sizeof t, "OMP_NUM_THREADS=%.20s as set", omp);
    else snprintf(t, sizeof t, "OMP_NUM_THREADS=%d", threads);
    zinf_launch_cpulist(cpus, n, have, sizeof have);
    if (rc == 1 && notes)
        fprintf(notes, "zinf-launch: this node's ranks: not bound, %d ranks on %d core%s (CPUs %s); %s\n", nlocal, ncore,
                ncore == 1 ? "" : "s", have, t);
    else if (!rc && notes) fprintf(notes, "zinf-launch: this node's ranks:%s; %s\n", line, t);
    free(cpus);
    free(core);
    free(mine);
    free(list);
    return rc < 0 ? rc : 0;
}

int zinf_launch_plan(const zinf_launch_opts *opts, char ***argv, int *nranks, FILE *notes)
{
    *argv = NULL;
    *nranks = 0;
    const zinf_launch_opts *o = opts;
    if (o->launcher && strcasecmp(o->launcher, "openmpi") != 0)
        return zinf_err("--launcher %s: zinf-launch runs OpenMPI's mpirun (--launcher openmpi); under Slurm "
                        "start the ranks with srun (jobs/slurm/)", o->launcher);
    if ((o->include || o->exclude) && (o->num_nodes >= 0 || o->num_gpus >= 0))
        return zinf_err("--num_nodes and --num_gpus cannot be combined with --include or --exclude");
    if (!o->prog || !o->prog[0]) return zinf_err("no program to launch (zinf-launch [flags] PROGRAM [ARGS...])");
    ZINF_TRY(check_counts(o->num_nodes, o->num_gpus)); /* before the pool, which --num_gpus sizes */
    if (o->ssh_port == 0 || o->ssh_port < -1 || o->ssh_port > 65535)
        return zinf_err("--ssh_port %lld: expected 1-65535", (long long)o->ssh_port);
    if (o->master_port == 0 || o->master_port < -1 || o->master_port > 65535)
        return zinf_err("--master_port %lld: expected 1-65535", (long long)o->master_port);
    /* torchrun's flags and environment give the same counts: one value each */
    torchrun_view t;
    ZINF_TRY(torchrun_settle(o, &t));
    if ((o->include || o->exclude) && (t.nproc.v != -1 || t.nnodes.v != -1))
        return zinf_err("%s cannot be combined with --include or --exclude", t.nproc.v != -1 ? t.nproc.how : t.nnodes.how);
    if (t.node_rank.v > 0 || (t.node_rank.v == 0 && t.nnodes.v > 1)) {
        char *eq = zinf_launch_equivalent(o, t.nnodes.v, t.nproc.v);
        if (notes) fprintf(notes, "zinf-launch: %s\n", eq ? eq : "zinf-launch --hostfile HOSTFILE ...");
        free(eq);
        char first[160] = "";
        if (t.addr) snprintf(first, sizeof first, ", %s (%s) first", t.addr, t.addr_how);
        return zinf_err("%s with %s is torchrun's start of one node at a time; zinf starts every node from one "
                        "place, once: run the command above on one node with a hostfile of 'HOST slots=N' lines naming "
                        "the nodes%s, or under Slurm submit jobs/slurm/train-multinode.sbatch",
                        t.nnodes.v > 0 ? t.nnodes.how : "one node", t.node_rank.how, first);
    }
    if (t.nnodes.v > 1 && !o->hostfile) {
        char *eq = zinf_launch_equivalent(o, t.nnodes.v, t.nproc.v);
        if (notes && o->num_nodes < 0) fprintf(notes, "zinf-launch: %s\n", eq ? eq : "zinf-launch --hostfile HOSTFILE ...");
        free(eq);
        return zinf_err("%s needs a --hostfile%s", t.nnodes.how,
                        o->num_nodes < 0 ? " naming the nodes (the command above), or Slurm "
                                           "(jobs/slurm/train-multinode.sbatch)" : "");
    }
    if (o->bind_cores == 0 && o->bind_core_list)
        return zinf_err("--bind_core_list %s with --bind_cores_to_rank false: the list is the cores to bind to; give one "
                        "of them", o->bind_core_list);
    if (o->bind_core_list) {
        int *l, nl;
        ZINF_TRY(zinf_launch_parse_cpulist(o->bind_core_list, "--bind_core_list", &l, &nl));
        free(l);
    }
    zinf_launch_opts eff = *o;
    eff.num_gpus = t.nproc.v == EVERY_SLOT ? -1 : t.nproc.v;
    eff.num_nodes = t.nnodes.v;
    o = &eff;
    zinf_launch_pool pool = {0};
    char **cvd = NULL;
    int ncvd = 0;
    int rc = build_pool(o, &pool, &cvd, &ncvd, notes);
    if (!rc) rc = zinf_launch_filter(&pool, o->include, o->exclude);
    if (!rc) rc = zinf_launch_limit(&pool, o->num_nodes, o->num_gpus);
    if (!rc && notes && (t.addr || t.port.v > 0))
        fprintf(notes, "zinf-launch: %s%s%s %s not used: MPI does the rendezvous\n", t.addr ? t.addr_how : "",
                t.addr && t.port.v > 0 ? " and " : "",
                t.port.v <= 0 ? "" : !strncmp(t.port.how, "--", 2) ? "--master_port" : "MASTER_PORT",
                t.addr && t.port.v > 0 ? "are" : "is");

    /* a host whose ranks are not on GPUs 0..k-1 in order gets its own CUDA_VISIBLE_DEVICES */
    int total = 0, hosts = 0;
    bool per_host = false;
    for (int i = 0; i < pool.n && !rc; i++) {
        zinf_launch_host *H = &pool.h[i];
        total += H->n;
        hosts += H->n > 0;
        for (int s = 0; s < H->n; s++) per_host |= H->slot[s] != s;
    }
    argv_b a = {0};
    push(&a, o->mpirun);
    if (!rc && !per_host) {
        pushf(&a, "-np");
        pushf(&a, "%d", total);
        /* one entry per host, however many: a cluster's hostfile can name thousands */
        size_t cap = 1, off = 0;
        for (int i = 0; i < pool.n; i++) cap += strlen(pool.h[i].name) + 16;
        char *hl = malloc(cap);
        if (!hl) rc = zinf_errc(ZINF_ENOMEM, "out of memory");
        for (int i = 0; i < pool.n && !rc; i++) {
            if (!pool.h[i].n) continue;
            off += (size_t)snprintf(hl + off, cap - off, "%s%s:%d", off ? "," : "", pool.h[i].name, pool.h[i].n);
        }
        push(&a, "--host");
        if (!rc) push(&a, hl);
        free(hl);
    }
    /* ranks fill each host's slots before the next host's, as DeepSpeed numbers them; mpirun binds
     * nothing: each rank's `zinf-launch --rank_bind` takes its share of the node's cores itself,
     * where it can see the node (its cores, its other ranks), and with --bind_cores_to_rank false
     * each rank runs an OpenMP team over all of them */
    push(&a, "--map-by");
    push(&a, "slot");
    push(&a, "--bind-to");
    push(&a, "none");
    if (o->ssh_port > 0) {
        push(&a, "--mca");
        push(&a, "plm_rsh_args");
        pushf(&a, "-p %lld", (long long)o->ssh_port);
    }
    if (o->each_rank_log) {
        push(&a, "--output-filename");
        push(&a, o->each_rank_log);
    }
    /* OpenMPI applies -x to the app context it stands in, so with one context per host every
     * context repeats the list */
    argv_b x = {0};
    if (!rc) rc = env_exports(o, &x);
    for (int k = 0; k < x.n && !rc && !per_host; k++) push(&a, x.v[k]);
    if (!rc && o->launcher_args) rc = split_args(o->launcher_args, &a);
    /* PROGRAM "zinf" is the zinf installed beside the launcher */
    char self_zinf[4096] = "";
    if (o->self_dir && !strcmp(o->prog[0], "zinf")) {
        snprintf(self_zinf, sizeof self_zinf, "%s/zinf", o->self_dir);
        if (access(self_zinf, X_OK) != 0) self_zinf[0] = 0;
    }
    /* and the zinf-launch beside the launcher binds each rank */
    char self_launch[4096] = "zinf-launch";
    if (o->self_dir) {
        snprintf(self_launch, sizeof self_launch, "%s/zinf-launch", o->self_dir);
        if (access(self_launch, X_OK) != 0) snprintf(self_launch, sizeof self_launch, "zinf-launch");
    }
    for (int i = 0, first = 1; i < pool.n && !rc && (per_host || first); i++) {
        zinf_launch_host *H = &pool.h[i];
        if (per_host) {
            if (!H->n) continue;
            if (!first) push(&a, ":");
            push(&a, "-np");
            pushf(&a, "%d", H->n);
            push(&a, "--host");
            pushf(&a, "%s:%d", H->name, H->n);
            for (int k = 0; k < x.n; k++) push(&a, x.v[k]);
            bool identity = true;
            for (int s = 0; s < H->n; s++) identity &= H->slot[s] == s;
            if (!identity) {
                char list[8192];
                size_t off = 0;
                for (int s = 0; s < H->n && !rc; s++) {
                    const char *dev = NULL;
                    char num[16];
                    if (ncvd) dev = cvd[H->slot[s]];
                    else { snprintf(num, sizeof num, "%d", H->slot[s]); dev = num; }
                    int w = snprintf(list + off, sizeof list - off, "%s%s", s ? "," : "", dev);
                    if (w < 0 || (size_t)w >= sizeof list - off) rc = zinf_err("CUDA_VISIBLE_DEVICES list too long");
                    else off += (size_t)w;
                }
                push(&a, "env");
                pushf(&a, "CUDA_VISIBLE_DEVICES=%s", list);
            }
        }
        first = 0;
        push_bind(&a, o, self_launch);
        push(&a, self_zinf[0] ? self_zinf : o->prog[0]);
        for (int k = 1; o->prog[k]; k++) push(&a, o->prog[k]);
    }
    if (!rc) rc = a.rc;
    if (!rc && notes) {
        fprintf(notes, "zinf-launch: %d rank%s on %d host%s:", total, total == 1 ? "" : "s", hosts, hosts == 1 ? "" : "s");
        for (int i = 0; i < pool.n; i++) {
            if (!pool.h[i].n) continue;
            fprintf(notes, " %s:", pool.h[i].name);
            for (int s = 0; s < pool.h[i].n; s++) fprintf(notes, "%s%d", s ? "," : "", pool.h[i].slot[s]);
        }
        fputc('\n', notes);
    }
    /* the ranks of this node, where no hostfile names others */
    if (!rc && !o->hostfile && o->bind_cores != 0 && pool.n == 1) rc = local_plan(o, pool.h[0].n, notes);
    for (int i = 0; i < ncvd; i++) free(cvd[i]);
    free(cvd);
    zinf_launch_argv_free(x.v);
    zinf_launch_pool_free(&pool);
    if (rc) {
        zinf_launch_argv_free(a.v);
        return rc;
    }
    *argv = a.v;
    *nranks = total;
    return 0;
}

char *zinf_launch_cmdline(char *const *argv)
{
    size_t cap = 1;
    for (char *const *p = argv; *p; p++) cap += 4 * strlen(*p) + 3;
    char *s = malloc(cap), *o = s;
    if (!s) return NULL;
    for (char *const *p = argv; *p; p++) {
        if (p != argv) *o++ = ' ';
        bool plain = **p != 0;
        for (const char *c = *p; *c; c++)
            plain &= isalnum((unsigned char)*c) || strchr("_./:=,@%+-", *c) != NULL;
        if (plain) {
            o = stpcpy(o, *p);
            continue;
        }
        *o++ = '\'';
        for (const char *c = *p; *c; c++) {
            if (*c == '\'') o = stpcpy(o, "'\\''");
            else *o++ = *c;
        }
        *o++ = '\'';
    }
    *o = 0;
    return s;
}

int zinf_launch_count_gpus(void)
{
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* ---------------------------------------------------------------- cores per rank ----------- */
/* CPU ids below this: a larger one is a typo (Linux's own limit is 8192 by default) */
#define MAX_CPU 65536

int zinf_launch_parse_cpulist(const char *s, const char *what, int **cpus, int *n)
{
    *cpus = NULL;
    *n = 0;
    if (!*s) return zinf_err("%s: empty (expected CPU numbers and ranges, e.g. 0-7,16-23)", what);
    int *v = NULL, nv = 0, cap = 0, last = -1;
    for (const char *p = s; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *dash = memchr(p, '-', len);
        int a = 0, b = 0;
        int rc = 0;
        if (!parse_count(p, dash ? (size_t)(dash - p) : len, MAX_CPU, &a) ||
            (dash && !parse_count(dash + 1, len - (size_t)(dash + 1 - p), MAX_CPU, &b)))
            rc = zinf_err("%s '%s': '%.*s' is not a CPU number or a range A-B of them (below %d)", what, s, (int)len, p,
                          MAX_CPU);
        else if (!dash) b = a;
        if (!rc && b < a) rc = zinf_err("%s '%s': the range %.*s ends before it starts", what, s, (int)len, p);
        if (!rc && a <= last)
            rc = zinf_err("%s '%s': %.*s: the entries must ascend without overlapping (as DeepSpeed's)", what, s,
                          (int)len, p);
        for (int c = a; !rc && c <= b; c++) {
            if (nv == cap) {
                cap = cap ? 2 * cap : 64;
                int *w = realloc(v, (size_t)cap * sizeof *w);
                if (!w) rc = zinf_errc(ZINF_ENOMEM, "out of memory");
                else v = w;
            }
            if (!rc) v[nv++] = c;
        }
        if (rc) {
            free(v);
            return rc;
        }
        last = b;
        p += len + (comma ? 1 : 0);
        if (comma && !*p) {
            free(v);
            return zinf_err("%s '%s': nothing after the last ','", what, s);
        }
    }
    *cpus = v;
    *n = nv;
    return 0;
}

void zinf_launch_cpulist(const int *cpus, int n, char *buf, size_t cap)
{
    size_t o = 0;
    if (!cap) return;
    buf[0] = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && cpus[j + 1] == cpus[j] + 1) j++;
        char one[32];
        if (j == i) snprintf(one, sizeof one, "%s%d", i ? "," : "", cpus[i]);
        else snprintf(one, sizeof one, "%s%d-%d", i ? "," : "", cpus[i], cpus[j]);
        size_t l = strlen(one);
        if (o + l + 5 > cap) { /* room for ",..." after it */
            snprintf(buf + o, cap - o, "%s...", i ? "," : "");
            return;
        }
        memcpy(buf + o, one, l + 1);
        o += l;
        i = j + 1;
    }
}

int zinf_launch_share(const int *cpus, const int *core_of, int ncpu, const int *list, int nlist, int local_rank,
                      int local_size, bool strict, int *out, int *nout, int *threads)
{
    *nout = 0;
    *threads = 1;
    if (local_size < 1 || local_rank < 0 || local_rank >= local_size)
        return zinf_err("local rank %d of %d: not a rank of this node", local_rank, local_size);
    char have[256];
    if (list) {
        for (int k = 0; k < nlist; k++) {
            bool found = false;
            for (int i = 0; i < ncpu && !found; i++) found = cpus[i] == list[k];
            if (!found) {
                zinf_launch_cpulist(cpus, ncpu, have, sizeof have);
                return zinf_err("--bind_core_list: CPU %d is not among this node's CPUs (%s)", list[k], have);
            }
        }
        int per = nlist / local_size;
        if (per < 1)
            return zinf_err("--bind_core_list lists %d CPU%s for the %d ranks of this node: at least one each", nlist,
                            nlist == 1 ? "" : "s", local_size);
        for (int k = per * local_rank; k < per * (local_rank + 1); k++) out[(*nout)++] = list[k];
        *threads = per;
        return 0;
    }
    /* the cores in the order of their first CPU */
    int *core = malloc((size_t)(ncpu ? ncpu : 1) * sizeof *core), ncore = 0;
    if (!core) return zinf_errc(ZINF_ENOMEM, "out of memory");
    for (int i = 0; i < ncpu; i++) {
        bool seen = false;
        for (int k = 0; k < ncore && !seen; k++) seen = core[k] == core_of[i];
        if (!seen) core[ncore++] = core_of[i];
    }
    int per = ncore / local_size;
    if (per < 1) {
        free(core);
        zinf_launch_cpulist(cpus, ncpu, have, sizeof have);
        if (strict)
            return zinf_err("--bind_cores_to_rank: %d ranks on this node's %d core%s (CPUs %s): each rank needs a "
                            "core of its own", local_size, ncore, ncore == 1 ? "" : "s", have);
        return 1;
    }
    for (int i = 0; i < ncpu; i++) {
        int k = 0;
        while (core[k] != core_of[i]) k++;
        if (k >= per * local_rank && k < per * (local_rank + 1)) out[(*nout)++] = cpus[i];
    }
    free(core);
    *threads = per;
    return 0;
}

/* This process's CPUs, ascending; *n of them. */
static int own_cpus(int **cpus, int *n)
{
    *cpus = NULL;
    *n = 0;
    for (int size = 1024; size <= MAX_CPU; size *= 4) {
        cpu_set_t *set = CPU_ALLOC(size);
        if (!set) return zinf_errc(ZINF_ENOMEM, "out of memory");
        size_t bytes = CPU_ALLOC_SIZE(size);
        if (sched_getaffinity(0, bytes, set) != 0) {
            int e = errno;
            CPU_FREE(set);
            if (e == EINVAL) continue; /* more CPUs than the set holds */
            return zinf_errc(-e, "sched_getaffinity: %s", strerror(e));
        }
        int cnt = CPU_COUNT_S(bytes, set);
        int *v = malloc((size_t)(cnt ? cnt : 1) * sizeof *v);
        if (!v) {
            CPU_FREE(set);
            return zinf_errc(ZINF_ENOMEM, "out of memory");
        }
        for (int c = 0; c < size && *n < cnt; c++)
            if (CPU_ISSET_S(c, bytes, set)) v[(*n)++] = c;
        CPU_FREE(set);
        *cpus = v;
        return 0;
    }
    return zinf_err("sched_getaffinity: more than %d CPUs", MAX_CPU);
}

int zinf_launch_affinity(char *buf, size_t cap, int *n)
{
    int *cpus;
    ZINF_TRY(own_cpus(&cpus, n));
    zinf_launch_cpulist(cpus, *n, buf, cap);
    free(cpus);
    return 0;
}

/* the core a CPU is a hardware thread of: its package and core id from /sys, else the CPU itself */
static int core_key(int cpu)
{
    int id[2] = {-1, -1};
    static const char *const what[2] = {"physical_package_id", "core_id"};
    for (int k = 0; k < 2; k++) {
        char path[128];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, what[k]);
        FILE *f = fopen(path, "r");
        if (!f) return MAX_CPU + cpu;
        if (fscanf(f, "%d", &id[k]) != 1) id[k] = -1;
        fclose(f);
    }
    if (id[0] < 0 || id[1] < 0) return MAX_CPU + cpu;
    return id[0] * MAX_CPU + id[1] % MAX_CPU;
}

static int local_env(const char *name, int *v)
{
    const char *s = getenv(name);
    if (!s || !parse_count(s, strlen(s), MAX_SLOTS * 16, v))
        return zinf_err("--rank_bind: %s is %s%s%s: this mode runs in the ranks of the mpirun command zinf-launch "
                        "builds (Open MPI sets it)", name, s ? "'" : "not set", s ? s : "", s ? "'" : "");
    return 0;
}

int zinf_launch_rank_bind(const char *mode, FILE *notes)
{
    bool strict = !strcmp(mode, "cores"), listed = !strict && strcmp(mode, "auto") != 0;
    int lr, ls;
    ZINF_TRY(local_env("OMPI_COMM_WORLD_LOCAL_RANK", &lr));
    ZINF_TRY(local_env("OMPI_COMM_WORLD_LOCAL_SIZE", &ls));
    int *list = NULL, nlist = 0, *cpus = NULL, n = 0;
    if (listed) ZINF_TRY(zinf_launch_parse_cpulist(mode, "--bind_core_list", &list, &nlist));
    int rc = own_cpus(&cpus, &n);
    int *core = rc ? NULL : malloc((size_t)(n ? n : 1) * sizeof *core);
    int *mine = rc ? NULL : malloc((size_t)(n ? n : 1) * sizeof *mine);
    if (!rc && (!core || !mine)) rc = zinf_errc(ZINF_ENOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) core[i] = core_key(cpus[i]);
    int nmine = 0, threads = 1;
    if (!rc) rc = zinf_launch_share(cpus, core, n, list, nlist, lr, ls, strict || listed, mine, &nmine, &threads);
    if (rc == 1) { /* more ranks than cores: unbound, one thread each */
        rc = 0;
        if (notes && lr == 0) {
            char have[256];
            zinf_launch_cpulist(cpus, n, have, sizeof have);
            fprintf(notes, "zinf-launch: %d ranks on this node's CPUs %s, fewer cores than ranks: not bound, %s\n", ls,
                    have, getenv("OMP_NUM_THREADS") ? "OMP_NUM_THREADS as set" : "1 OpenMP thread each");
        }
    } else if (!rc) {
        int top = mine[nmine - 1] + 1;
        cpu_set_t *set = CPU_ALLOC(top);
        if (!set) rc = zinf_errc(ZINF_ENOMEM, "out of memory");
        else {
            size_t bytes = CPU_ALLOC_SIZE(top);
            CPU_ZERO_S(bytes, set);
            for (int i = 0; i < nmine; i++) CPU_SET_S(mine[i], bytes, set);
            if (sched_setaffinity(0, bytes, set) != 0) rc = zinf_errc(-errno, "sched_setaffinity: %s", strerror(errno));
            CPU_FREE(set);
        }
        /* OMP_PROC_BIND and OMP_PLACES stay unset: with them, the OpenMP runtime binds the initial
         * thread to the first place when the program starts, and every thread it creates later
         * (NVMe I/O, the overlapped host step, the CUDA driver's and NCCL's) inherits that one
         * core; bound to the rank's share, the team's threads spread over its cores anyway */
    }
    char t[16];
    snprintf(t, sizeof t, "%d", threads);
    if (!rc && !getenv("OMP_NUM_THREADS") && setenv("OMP_NUM_THREADS", t, 1)) rc = zinf_errc(-errno, "setenv");
    free(list);
    free(cpus);
    free(core);
    free(mine);
    return rc;
}
