#include "launch.h"

#include <ctype.h>
#include <stdarg.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "err.h"
#include "file.h"

/* slots per host, at most: more GPUs or cores than a node has is a typo, and each slot is a
 * rank of the mpirun command line (a million made a 7 MB line) */
#define MAX_SLOTS 4096

void zinf_launch_opts_defaults(zinf_launch_opts *o)
{
    memset(o, 0, sizeof *o);
    o->num_nodes = o->num_gpus = o->master_port = o->ssh_port = -1;
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

int zinf_launch_parse_hostfile(const char *text, const char *fname, zinf_launch_pool *pool, FILE *notes)
{
    pool->h = NULL;
    pool->n = 0;
    int *line_of = NULL; /* where each host was named, for the duplicate message */
    int lineno = 0, rc = 0;
    for (const char *p = text; *p && !rc;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *next = eol ? eol + 1 : p + len;
        lineno++;
        while (len && isspace((unsigned char)*p)) p++, len--;
        while (len && isspace((unsigned char)p[len - 1])) len--;
        if (!len || *p == '#') { p = next; continue; }
        /* HOST slots=N [# comment] */
        size_t hl = 0;
        while (hl < len && !isspace((unsigned char)p[hl])) hl++;
        const char *s = p + hl;
        size_t rest = len - hl;
        while (rest && isspace((unsigned char)*s)) s++, rest--;
        size_t sl = 0;
        while (sl < rest && !isspace((unsigned char)s[sl])) sl++;
        int nslots = 0;
        if (sl < 6 || strncmp(s, "slots=", 6) != 0) {
            rc = zinf_err("%s:%d: expected 'HOST slots=N', got '%.*s'", fname, lineno, (int)len, p);
        } else if (!parse_count(s + 6, sl - 6, MAX_SLOTS + 1, &nslots) || nslots < 1) {
            rc = zinf_err("%s:%d: host %.*s: slots=%.*s: expected a whole number from 1 to %d", fname, lineno, (int)hl,
                          p, (int)(sl - 6), s + 6, MAX_SLOTS);
        } else if (find_host(pool, p, hl) >= 0) {
            rc = zinf_err("%s:%d: host %.*s is listed twice (first on line %d)", fname, lineno, (int)hl, p,
                          line_of[find_host(pool, p, hl)]);
        } else {
            const char *tail = s + sl;
            size_t tl = rest - sl;
            while (tl && isspace((unsigned char)*tail)) tail++, tl--;
            if (tl && *tail != '#' && notes)
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
    /* include: the order of the slots as written is the order of the ranks on the host */
    int **order = include && !rc ? calloc((size_t)nh + 1, sizeof *order) : NULL;
    int *norder = include && !rc ? calloc((size_t)nh + 1, sizeof *norder) : NULL;
    if (include && !rc && (!order || !norder)) rc = zinf_errc(ZINF_ENOMEM, "out of memory");
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
            if (include) {
                order[h] = malloc((size_t)H->nslots * sizeof **order);
                if (!order[h]) rc = zinf_errc(ZINF_ENOMEM, "out of memory");
            }
            if (colon && colon + 1 == p + len && !rc)
                rc = zinf_err("%s: host %s: no slot after ':'", flag, H->name);
            if (!colon && !rc) { /* the whole host */
                for (int s = 0; s < H->nslots; s++) {
                    keep[h][s] = include ? 1 : 0;
                    if (include) order[h][norder[h]++] = s;
                }
            }
            for (const char *q = colon ? colon + 1 : p + len; q < p + len && !rc;) {
                const char *comma = memchr(q, ',', (size_t)(p + len - q));
                size_t sl = comma ? (size_t)(comma - q) : (size_t)(p + len - q);
                int s;
                if (!parse_count(q, sl, MAX_SLOTS, &s))
                    rc = zinf_err("%s: host %s: slot '%.*s' is not a whole number", flag, H->name, (int)sl, q);
                else if (s >= H->nslots)
                    rc = zinf_err("%s: host %s has slots 0-%d, not %d", flag, H->name, H->nslots - 1, s);
                else if (include) {
                    if (!keep[h][s]) order[h][norder[h]++] = s; /* a repeated slot counts once */
                    keep[h][s] = 1;
                } else keep[h][s] = 0;
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
        if (include) {
            for (int k = 0; k < norder[i]; k++) H->slot[H->n++] = order[i][k];
        } else {
            for (int s = 0; s < H->nslots; s++)
                if (keep[i][s]) H->slot[H->n++] = s;
        }
        total += H->n;
    }
    if (!rc && !total) rc = zinf_err("%s '%s' leaves no slots to run on", flag, spec);
    for (int i = 0; i < nh; i++) {
        if (keep) free(keep[i]);
        if (order) free(order[i]);
    }
    free(keep);
    free(order);
    free(norder);
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

/* CUDA_VISIBLE_DEVICES of the launch node, split at commas (NULL when unset or empty). */
static int split_cvd(const char *cvd, char ***ent, int *n)
{
    *ent = NULL;
    *n = 0;
    if (!cvd || !*cvd) return 0;
    for (const char *p = cvd;; ) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        char **e = realloc(*ent, (size_t)(*n + 1) * sizeof *e);
        if (!e) return zinf_errc(ZINF_ENOMEM, "out of memory");
        *ent = e;
        if (!(e[*n] = strndup(p, len))) return zinf_errc(ZINF_ENOMEM, "out of memory");
        (*n)++;
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
    /* this node: its GPUs, or the ones CUDA_VISIBLE_DEVICES lists (slot i is its i-th entry) */
    ZINF_TRY(split_cvd(o->cuda_visible, cvd, ncvd));
    int n = *ncvd ? *ncvd : o->local_gpus;
    if (n <= 0) {
        if (o->num_gpus <= 0)
            return zinf_err("no GPU found on this node: --num_gpus N starts N ranks here (CPU backend: --device cpu)");
        n = (int)o->num_gpus; /* CPU ranks: as many as asked */
    }
    return pool_add(pool, "localhost", strlen("localhost"), n);
}

int zinf_launch_plan(const zinf_launch_opts *o, char ***argv, int *nranks, FILE *notes)
{
    *argv = NULL;
    *nranks = 0;
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
    zinf_launch_pool pool = {0};
    char **cvd = NULL;
    int ncvd = 0;
    int rc = build_pool(o, &pool, &cvd, &ncvd, notes);
    if (!rc) rc = zinf_launch_filter(&pool, o->include, o->exclude);
    if (!rc) rc = zinf_launch_limit(&pool, o->num_nodes, o->num_gpus);
    if (!rc && notes && (o->master_addr || o->master_port > 0))
        fprintf(notes, "zinf-launch: --master_addr and --master_port are not used: MPI does the rendezvous\n");

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
    /* ranks fill each host's slots before the next host's, as DeepSpeed numbers them; no binding:
     * each rank runs an OpenMP team over the node's cores */
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
