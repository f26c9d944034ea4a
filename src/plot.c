#include "plot.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"

extern char **environ;

#define PLOT_PATH (PATH_MAX + 128) /* a path and what this file adds to it (.svg, .tmp, svg:) */

/* A path built with printf: one that does not fit is an error, never a silently shorter name. */
__attribute__((format(printf, 3, 4))) static int pathf(char *dst, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap) return zinf_err("path too long: %.200s...", dst);
    return 0;
}

/* ---------------------------------------------------------------- reading ------------------ */
/* The values of one step line; NAN where the key is absent or null (JSON's stand-in for a value
 * that was not finite). */
enum { K_LOSS, K_VAL, K_NORM, K_LR, K_TPS, NKEYS };
static const char *const key_name[NKEYS] = {"loss", "val_loss", "grad_norm", "lr", "tokens_per_s"};

typedef struct {
    int64_t step;
    double v[NKEYS];
    unsigned has; /* bit k: key k is on the line, null or not */
} row;

typedef struct {
    char file[PLOT_PATH];     /* the metrics.jsonl read */
    char dir[PATH_MAX];       /* its directory, as given */
    char name[256];           /* the legend's name: the directory's own name */
    row *rows;                /* by step, increasing */
    size_t n, cap;
} prun;

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Where a run's metrics are and what it is called: the directory's name as the file system has it
 * (so `.` and `runs/a/` name the run, not the path). */
static int locate(const char *input, prun *r)
{
    struct stat st;
    if (stat(input, &st) != 0) return zinf_errc(-errno, "%s: %s", input, strerror(errno));
    size_t len = strlen(input);
    while (len > 1 && input[len - 1] == '/') len--; /* runs/a/ is runs/a */
    if (len >= sizeof r->dir) return zinf_err("%s: path too long", input);
    if (S_ISDIR(st.st_mode)) {
        memcpy(r->dir, input, len);
        r->dir[len] = 0;
        ZINF_TRY(pathf(r->file, sizeof r->file, "%s/metrics.jsonl", r->dir));
    } else {
        ZINF_TRY(pathf(r->file, sizeof r->file, "%s", input));
        const char *slash = strrchr(input, '/');
        if (!slash) snprintf(r->dir, sizeof r->dir, ".");
        else ZINF_TRY(pathf(r->dir, sizeof r->dir, "%.*s", slash == input ? 1 : (int)(slash - input), input));
    }
    char real[PATH_MAX];
    const char *base = r->dir;
    if (realpath(r->dir, real)) {
        const char *slash = strrchr(real, '/');
        base = slash && slash[1] ? slash + 1 : real;
    }
    snprintf(r->name, sizeof r->name, "%.255s", base);
    return 0;
}

static int push_row(prun *r, const row *x)
{
    /* a resumed run appends the steps after its checkpoint again: the later line wins, and so do
     * the lines after it, so the points before that step are the abandoned trajectory's */
    while (r->n > 0 && r->rows[r->n - 1].step >= x->step) r->n--;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 256;
        row *p = realloc(r->rows, cap * sizeof *p);
        if (!p) return zinf_errc(ZINF_ENOMEM, "out of host memory");
        r->rows = p;
        r->cap = cap;
    }
    r->rows[r->n++] = *x;
    return 0;
}

/* One line: a step line becomes a row; other objects (the summary with params_hash, the prompts
 * line) are skipped. *ok is false when the line is not JSON at all. */
static int parse_line(prun *r, const char *line, size_t len, long long lineno, bool *ok, char *why, size_t cap)
{
    json_error_t je;
    json_t *o = json_loadb(line, len, 0, &je);
    *ok = o != NULL;
    if (!o) {
        snprintf(why, cap, "%s", je.text);
        return 0;
    }
    int rc = 0;
    json_t *st = json_object_get(o, "step");
    if (!json_is_object(o)) rc = zinf_err("%s:%lld: a JSON %s where a line holds an object", r->file, lineno,
                                          json_is_array(o) ? "array" : "value");
    else if (st && !json_is_integer(st)) rc = zinf_err("%s:%lld: \"step\" is not an integer", r->file, lineno);
    else if (st) {
        row x = {.step = json_integer_value(st)};
        for (int k = 0; k < NKEYS && !rc; k++) {
            json_t *v = json_object_get(o, key_name[k]);
            x.v[k] = NAN;
            if (v) x.has |= 1u << k;
            if (json_is_number(v)) x.v[k] = json_number_value(v);
            else if (v && !json_is_null(v))
                rc = zinf_err("%s:%lld: \"%s\" is neither a number nor null", r->file, lineno, key_name[k]);
        }
        if (!rc) rc = push_row(r, &x);
    }
    json_decref(o);
    return rc;
}

static int read_run(const char *input, prun *r)
{
    ZINF_TRY(locate(input, r));
    FILE *f = fopen(r->file, "r");
    if (!f) return zinf_errc(-errno, "%s: %s", r->file, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long long lineno = 0;
    int rc = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        bool complete = len > 0 && line[len - 1] == '\n';
        size_t i = 0;
        while (i < (size_t)len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n')) i++;
        if (i == (size_t)len) continue; /* blank */
        bool ok;
        char why[160];
        rc = parse_line(r, line, (size_t)len, lineno, &ok, why, sizeof why);
        /* a line without its newline at the end of the file is one a running job is writing now */
        if (!rc && !ok && complete) rc = zinf_err("%s:%lld: not JSON: %s", r->file, lineno, why);
    }
    if (!rc && ferror(f)) rc = zinf_errc(ZINF_EIO, "%s: %s", r->file, strerror(errno));
    free(line);
    fclose(f);
    ZINF_TRY(rc);
    if (r->n == 0)
        return zinf_err("%s: no step lines (nothing logged yet, or not a zinf train metrics.jsonl)", r->file);
    return 0;
}

/* ---------------------------------------------------------------- axes --------------------- */
typedef enum { FMT_DEC, FMT_SI, FMT_SCI } fmt_kind;

typedef struct {
    double lo, hi;    /* the axis' ends, data units */
    bool log;
    double tick[24];
    int nt;
    fmt_kind fmt;
    int dec;          /* FMT_DEC, FMT_SI: decimals */
    bool each_dec;    /* FMT_DEC: each label as many decimals as it needs (0.02, 0.5, 10 on one axis) */
    double unit;      /* FMT_SI: 1e3, 1e6 or 1e9 */
} axis;

/* The smallest 1, 2, 2.5 or 5 x 10^k at least raw; integer: no 2.5 below 10. */
static double nice_step(double raw, bool integer)
{
    double p = pow(10, floor(log10(raw)));
    double m = raw / p;
    bool quarter = !integer || p >= 10;
    return (m <= 1 + 1e-9 ? 1 : m <= 2 + 1e-9 ? 2 : m <= 2.5 + 1e-9 && quarter ? 2.5 : m <= 5 + 1e-9 ? 5 : 10) * p;
}

/* Decimals that show multiples of x (a tick step or a tick) exactly. */
static int decimals(double x)
{
    x = fabs(x);
    for (int d = 0; d < 12; d++) {
        double y = x * pow(10, d);
        if (fabs(y - round(y)) <= 1e-6 * y) return d;
    }
    return 12;
}

/* Ticks at round numbers; the ends move out to the ticks around the data, so the lowest and
 * highest lines of the grid frame it (a value axis a step further where the data would touch). */
static void axis_linear(axis *a, double lo, double hi, int maxticks, bool integer, bool zero)
{
    if (!(lo <= hi)) lo = 0, hi = 1;
    if (zero && lo > 0) lo = 0;
    if (zero && hi < 0) hi = 0;
    if (hi - lo <= 1e-12 * fmax(fabs(lo), fabs(hi))) { /* one value: a band around it */
        double d = lo != 0 ? fabs(lo) * 0.1 : 1;
        if (integer && d < 1) d = 1;
        lo -= d;
        hi += d;
        if (zero && lo < 0 && hi - d >= 0) lo = 0;
    }
    double step = nice_step((hi - lo) / (maxticks - 1), integer);
    if (integer && step < 1) step = 1;
    double k0, k1;
    for (;;) {
        k0 = floor(lo / step + 1e-9);
        k1 = ceil(hi / step - 1e-9);
        if (k1 - k0 + 1 <= maxticks || k1 - k0 + 1 <= 2) break;
        step = nice_step(step * 1.01, integer);
    }
    if (!integer) { /* values on the frame are hard to see: a step of room, except for a 0 that is the floor */
        double tol = 0.02 * (k1 - k0);
        if (k1 - hi / step < tol) k1++;
        if (lo / step - k0 < tol && !(zero && k0 == 0)) k0--;
    }
    a->log = false;
    a->lo = k0 * step;
    a->hi = k1 * step;
    a->nt = 0;
    for (double k = k0; k <= k1 && a->nt < (int)(sizeof a->tick / sizeof a->tick[0]); k++)
        a->tick[a->nt++] = k * step;
    double amax = fmax(fabs(a->lo), fabs(a->hi));
    if (amax >= 1e5 || amax < 1e-2) a->fmt = FMT_SCI;
    else a->fmt = FMT_DEC;
    a->dec = decimals(step);
    a->each_dec = false;
    a->unit = 1;
}

/* Ticks m x 10^e for the mantissas given, on every `every`-th decade, inside the axis; -1 when
 * more than maxticks. */
static int log_ticks(axis *a, const double *mant, int nm, int every, int maxticks)
{
    a->nt = 0;
    for (int e = (int)floor(log10(a->lo)) - 1; e <= (int)ceil(log10(a->hi)); e++) {
        if (((e % every) + every) % every) continue;
        for (int j = 0; j < nm; j++) {
            double t = mant[j] * pow(10, e);
            if (t < a->lo * (1 - 1e-12) || t > a->hi * (1 + 1e-12)) continue;
            if (a->nt == maxticks) return -1;
            a->tick[a->nt++] = t;
        }
    }
    return a->nt;
}

/* The data's ends a little apart; ticks at 1, 2 and 5 x 10^k (and 3 on a short axis), thinned to
 * 1 and 3, then to powers of ten on every decade or every few, until at most maxticks remain. A
 * range narrower than 1-2-5 can mark (a log scale asked for on values within a factor of 2 or so)
 * gets round linear steps. */
static void axis_log(axis *a, double lo, double hi, int maxticks)
{
    static const double m125[] = {1, 2, 5}, m1235[] = {1, 2, 3, 5}, m13[] = {1, 3}, m1[] = {1};
    double l0 = log10(lo), l1 = log10(hi), pad = 0.03 * (l1 - l0);
    a->log = true;
    a->lo = pow(10, l0 - pad);
    a->hi = pow(10, l1 + pad);
    a->fmt = a->lo < 1e-3 || a->hi >= 1e5 ? FMT_SCI : FMT_DEC;
    a->unit = 1;
    a->dec = 0;
    a->each_dec = true;
    int nt = log_ticks(a, m125, 3, 1, maxticks);
    if (nt >= 0 && nt < 4) { /* a decade or so: the 3s too, where that gives 4 labels */
        if (log_ticks(a, m1235, 4, 1, maxticks) >= 4) return;
        nt = log_ticks(a, m125, 3, 1, maxticks);
    }
    if (nt >= 0 && nt < 2) {
        double step = nice_step((a->hi - a->lo) / (maxticks - 1), false);
        a->nt = 0;
        for (double k = ceil(a->lo / step); k * step <= a->hi && a->nt < maxticks; k++) a->tick[a->nt++] = k * step;
        a->dec = decimals(step);
        a->each_dec = false;
        return;
    }
    if (nt < 0 && log_ticks(a, m13, 2, 1, maxticks) < 0)
        for (int every = 1; log_ticks(a, m1, 1, every, maxticks) < 0; every++) {}
}

/* tokens/s and step counts read better as 20k than 20000 or 2e4 (from `from` on). */
static void axis_si(axis *a, double from)
{
    double amax = fmax(fabs(a->lo), fabs(a->hi));
    if (amax < from || a->log) return;
    a->unit = amax >= 1e9 ? 1e9 : amax >= 1e6 ? 1e6 : 1e3;
    a->fmt = FMT_SI;
    a->dec = a->nt > 1 ? decimals((a->tick[1] - a->tick[0]) / a->unit) : 0;
}

static void fmt_tick(const axis *a, double v, char *buf, size_t cap)
{
    if (fabs(v) < 1e-12 * fmax(fabs(a->lo), fabs(a->hi))) {
        snprintf(buf, cap, "0");
        return;
    }
    if (a->fmt == FMT_SCI) {
        int e = (int)floor(log10(fabs(v)) + 1e-9);
        int n = snprintf(buf, cap, "%.2f", v / pow(10, e));
        while (n > 0 && buf[n - 1] == '0') buf[--n] = 0; /* 1.50 -> 1.5, 1.00 -> 1 */
        if (n > 0 && buf[n - 1] == '.') buf[--n] = 0;
        snprintf(buf + n, cap - (size_t)n, "e%d", e);
    } else if (a->fmt == FMT_SI) {
        const char *u = a->unit == 1e9 ? "G" : a->unit == 1e6 ? "M" : "k";
        snprintf(buf, cap, "%.*f%s", a->dec, v / a->unit, u);
    } else {
        /* a log axis has 0.02 and 50 on it: as many decimals as each tick needs */
        int dec = a->each_dec ? decimals(fabs(v)) : a->dec;
        snprintf(buf, cap, "%.*f", dec, v);
    }
}

static double axis_frac(const axis *a, double v)
{
    if (a->log) return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    return (v - a->lo) / (a->hi - a->lo);
}

/* ---------------------------------------------------------------- drawing ------------------ */
/* Distinct on white and for the common colour blindnesses in the first few; no yellow. */
static const char *const palette[ZINF_PLOT_MAX_RUNS] = {
    "#1f6fc5", "#e8590c", "#2b8a3e", "#c2255c", "#6741d9",
    "#0b7285", "#a0522d", "#5c940d", "#495057", "#d6336c",
};

#define FONT "DejaVu Sans, Helvetica, Arial, sans-serif"
#define W 1200
#define INK "#212529"
#define SOFT "#5f6b76"
#define GRID "#e6e9ec"
#define FRAME "#c3c9cf"

/* Width of a line of text in px, from the average advance of a sans-serif face; a little
 * generous so that labels laid out by it do not touch. */
static double text_w(const char *s, double size)
{
    double w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p & 0xC0) == 0x80) continue; /* UTF-8 continuation bytes: one glyph per character */
        w += strchr("il.,:;'|!() ", *p) ? 0.34 : (*p >= 'A' && *p <= 'Z') || *p == 'm' || *p == 'w' ? 0.74 : 0.62;
    }
    return w * size;
}

/* Text as XML character data: markup escaped, and what XML 1.0 cannot hold (control characters,
 * bytes that are not UTF-8) replaced by '?', so that a run directory of any name gives a
 * well-formed file. */
static void xml_text(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        if (c == '&') fputs("&amp;", f);
        else if (c == '<') fputs("&lt;", f);
        else if (c == '>') fputs("&gt;", f);
        else if (c == '"') fputs("&quot;", f);
        else if (c == '\'') fputs("&apos;", f);
        else if (c < 0x20) fputc(c == '\t' ? ' ' : '?', f);
        else if (c < 0x80) fputc((int)c, f);
        else {
            int n = c >= 0xF0 && c <= 0xF4 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 && c < 0xE0 ? 1 : -1;
            int i = 1;
            for (; n > 0 && i <= n; i++) if ((p[i] & 0xC0) != 0x80) break;
            if (n < 0 || i <= n) { fputc('?', f); p++; continue; }
            fwrite(p, 1, (size_t)n + 1, f);
            p += n + 1;
            continue;
        }
        p++;
    }
}

typedef struct {
    const char *id, *title, *note; /* note: right of the title (units, what the values are) */
    int key;
    bool zero, si, logable;
} panel_def;

enum { NPANELS = 4 };
static const panel_def panels[NPANELS] = {
    {"loss", "Loss", NULL, K_LOSS, false, false, true},
    {"grad_norm", "Gradient norm", "before clipping", K_NORM, false, false, true},
    {"lr", "Learning rate", NULL, K_LR, true, false, false},
    {"tokens_per_s", "Throughput", "tokens/s", K_TPS, true, true, false},
};

typedef struct { double x0, y0, x1, y1; } box; /* the plotting area, px */

typedef struct {
    FILE *f;
    const prun *runs;
    int nruns;
    axis x;
} fig;

static bool plottable(const axis *a, double v) { return isfinite(v) && (!a->log || v > 0); }

/* One series as a path: M starts each run of plottable points, so a null (an overflowed loss)
 * leaves a gap instead of a line across it. */
static void draw_series(fig *g, const box *b, const axis *y, int ri, int key, bool dashed)
{
    const prun *r = &g->runs[ri];
    fprintf(g->f, "<path class=\"series\" data-run=\"%d\" data-series=\"%s\" fill=\"none\" stroke=\"%s\" "
            "stroke-width=\"%s\" stroke-linejoin=\"round\" stroke-linecap=\"round\"%s d=\"", ri, key_name[key],
            palette[ri], dashed ? "1.6" : "1.9", dashed ? " stroke-dasharray=\"6 4\"" : "");
    bool pen = false;
    int npts = 0;
    double lx = 0, ly = 0;
    for (size_t i = 0; i < r->n; i++) {
        double v = r->rows[i].v[key];
        if (!(r->rows[i].has & 1u << key)) continue; /* validation is on some lines only: join those */
        if (!plottable(y, v)) {
            pen = false;
            continue;
        }
        lx = b->x0 + axis_frac(&g->x, (double)r->rows[i].step) * (b->x1 - b->x0);
        ly = b->y1 - axis_frac(y, v) * (b->y1 - b->y0);
        fprintf(g->f, "%s%s%.2f %.2f", npts ? " " : "", pen ? "L" : "M", lx, ly);
        pen = true;
        npts++;
    }
    fputs("\"/>\n", g->f);
    if (key == K_VAL) {
        fprintf(g->f, "<g class=\"markers\" data-run=\"%d\" data-series=\"%s\" fill=\"#ffffff\" stroke=\"%s\" "
                "stroke-width=\"1.6\">\n", ri, key_name[key], palette[ri]);
        for (size_t i = 0; i < r->n; i++) {
            double v = r->rows[i].v[key];
            if (!plottable(y, v)) continue;
            fprintf(g->f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.2\"/>\n",
                    b->x0 + axis_frac(&g->x, (double)r->rows[i].step) * (b->x1 - b->x0),
                    b->y1 - axis_frac(y, v) * (b->y1 - b->y0));
        }
        fputs("</g>\n", g->f);
    } else if (npts == 1) { /* a lone point draws no line: mark it */
        fprintf(g->f, "<circle class=\"lone\" cx=\"%.2f\" cy=\"%.2f\" r=\"2.6\" fill=\"%s\"/>\n", lx, ly,
                palette[ri]);
    }
}

/* The data's range over every run (for the loss, the validation loss too), and its least
 * positive value. */
static void data_range(const fig *g, const panel_def *p, double *lo, double *hi, double *minpos)
{
    *lo = *minpos = INFINITY;
    *hi = -INFINITY;
    for (int r = 0; r < g->nruns; r++)
        for (size_t i = 0; i < g->runs[r].n; i++)
            for (int k = p->key; k <= (p->key == K_LOSS ? K_VAL : p->key); k++) {
                double v = g->runs[r].rows[i].v[k];
                if (!isfinite(v)) continue;
                *lo = fmin(*lo, v);
                *hi = fmax(*hi, v);
                if (v > 0) *minpos = fmin(*minpos, v);
            }
}

static void y_axis(const fig *g, const panel_def *p, zinf_plot_log log_y, int maxticks, axis *a)
{
    double lo, hi, minpos;
    data_range(g, p, &lo, &hi, &minpos);
    /* asked for, the values above 0 are drawn on it (the others leave gaps) */
    bool log = p->logable && (log_y == ZINF_PLOT_LOG_YES || (log_y == ZINF_PLOT_LOG_AUTO && lo > 0 && hi > 10 * lo));
    if (log && hi > minpos) axis_log(a, minpos, hi, maxticks);
    else axis_linear(a, lo, hi, maxticks, false, p->zero);
    if (p->si) axis_si(a, 1e3);
}

/* Longest y tick label of an axis, px, for the margin left of the plot. */
static double ylabel_w(const axis *a)
{
    double w = 0;
    for (int i = 0; i < a->nt; i++) {
        char t[32];
        fmt_tick(a, a->tick[i], t, sizeof t);
        w = fmax(w, text_w(t, 12));
    }
    return w;
}

static void draw_panel(fig *g, const panel_def *p, const box *b, const axis *y, bool any_val)
{
    FILE *f = g->f;
    fprintf(f, "<g class=\"panel\" id=\"panel-%s\">\n", p->id);
    /* grid, behind everything */
    fprintf(f, "<g class=\"grid\" stroke=\"%s\" stroke-width=\"1\" shape-rendering=\"crispEdges\">\n", GRID);
    for (int i = 0; i < y->nt; i++) {
        double py = b->y1 - axis_frac(y, y->tick[i]) * (b->y1 - b->y0);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", b->x0, py, b->x1, py);
    }
    for (int i = 0; i < g->x.nt; i++) {
        double px = b->x0 + axis_frac(&g->x, g->x.tick[i]) * (b->x1 - b->x0);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", px, b->y0, px, b->y1);
    }
    fputs("</g>\n", f);
    fprintf(f, "<rect class=\"plot-area\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" "
            "stroke=\"%s\" stroke-width=\"1\" shape-rendering=\"crispEdges\"/>\n", b->x0, b->y0, b->x1 - b->x0,
            b->y1 - b->y0, FRAME);
    /* tick labels: text y is the tick's pixel, centred on it by dy */
    fprintf(f, "<g font-size=\"12\" fill=\"%s\">\n", SOFT);
    for (int i = 0; i < y->nt; i++) {
        char t[32];
        fmt_tick(y, y->tick[i], t, sizeof t);
        fprintf(f, "<text class=\"ytick\" x=\"%.2f\" y=\"%.2f\" dy=\"0.35em\" text-anchor=\"end\">%s</text>\n",
                b->x0 - 8, b->y1 - axis_frac(y, y->tick[i]) * (b->y1 - b->y0), t);
    }
    for (int i = 0; i < g->x.nt; i++) {
        char t[32];
        fmt_tick(&g->x, g->x.tick[i], t, sizeof t);
        fprintf(f, "<text class=\"xtick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n",
                b->x0 + axis_frac(&g->x, g->x.tick[i]) * (b->x1 - b->x0), b->y1 + 18, t);
    }
    fprintf(f, "<text class=\"axis-label\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">step</text>\n",
            (b->x0 + b->x1) / 2, b->y1 + 36);
    fputs("</g>\n", f);
    fprintf(f, "<text class=\"panel-title\" x=\"%.2f\" y=\"%.2f\" font-size=\"14\" font-weight=\"bold\" "
            "fill=\"%s\">%s%s</text>\n", b->x0, b->y0 - 10, INK, p->title, y->log ? " (log scale)" : "");
    if (p->key == K_LOSS && any_val) {
        /* the key to the two line styles, in grey: colour says which run */
        double kx = b->x1 - text_w("validation", 12) - 34;
        double tx = kx - 10 - text_w("training", 12) - 34;
        double ky = b->y0 - 14;
        fprintf(f, "<g class=\"style-key\" font-size=\"12\" fill=\"%s\">\n"
                "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"1.9\"/>\n"
                "<text x=\"%.2f\" y=\"%.2f\" dy=\"0.35em\">training</text>\n"
                "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"1.6\" "
                "stroke-dasharray=\"6 4\"/>\n"
                "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.2\" fill=\"#ffffff\" stroke=\"%s\" stroke-width=\"1.6\"/>\n"
                "<text x=\"%.2f\" y=\"%.2f\" dy=\"0.35em\">validation</text>\n</g>\n",
                SOFT, tx, ky, tx + 26, ky, SOFT, tx + 32, ky, kx, ky, kx + 26, ky, SOFT, kx + 13, ky, SOFT,
                kx + 32, ky);
    } else if (p->note) {
        fprintf(f, "<text class=\"panel-note\" x=\"%.2f\" y=\"%.2f\" font-size=\"12\" fill=\"%s\" "
                "text-anchor=\"end\">%s</text>\n", b->x1, b->y0 - 10, SOFT, p->note);
    }
    for (int r = 0; r < g->nruns; r++) {
        draw_series(g, b, y, r, p->key, false);
        if (p->key == K_LOSS) {
            bool has_val = false;
            for (size_t i = 0; i < g->runs[r].n && !has_val; i++) has_val = isfinite(g->runs[r].rows[i].v[K_VAL]);
            if (has_val) draw_series(g, b, y, r, K_VAL, true);
        }
    }
    fputs("</g>\n", f);
}

/* The last finite value of a key in a run, NAN if none. */
static double last_value(const prun *r, int key)
{
    for (size_t i = r->n; i-- > 0;)
        if (isfinite(r->rows[i].v[key])) return r->rows[i].v[key];
    return NAN;
}

/* The legend entry's grey detail: where the run is now. */
static void run_detail(const prun *r, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "step %lld", (long long)r->rows[r->n - 1].step);
    double l = last_value(r, K_LOSS), v = last_value(r, K_VAL);
    if (isfinite(l) && n > 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, " \xc2\xb7 loss %.4g", l);
    if (isfinite(v) && n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, " \xc2\xb7 val %.4g", v);
}

typedef struct { double x, w; int row; } legend_slot;

/* Entries left to right, wrapped to the width, each row centred. Returns the rows used. */
static int legend_layout(const prun *runs, int n, legend_slot *s)
{
    const double maxw = W - 80, gap = 28;
    int row = 0;
    double used = 0;
    for (int i = 0; i < n; i++) {
        char d[96];
        run_detail(&runs[i], d, sizeof d);
        s[i].w = 30 + text_w(runs[i].name, 13) + 8 + text_w(d, 12);
        if (used > 0 && used + gap + s[i].w > maxw) { row++; used = 0; }
        s[i].x = used + (used > 0 ? gap : 0);
        s[i].row = row;
        used = s[i].x + s[i].w;
    }
    for (int r = 0; r <= row; r++) {
        double width = 0;
        for (int i = 0; i < n; i++) if (s[i].row == r) width = s[i].x + s[i].w;
        for (int i = 0; i < n; i++) if (s[i].row == r) s[i].x += (W - width) / 2;
    }
    return n ? row + 1 : 0;
}

static void default_title(const prun *runs, int n, char *buf, size_t cap)
{
    if (n == 1) { snprintf(buf, cap, "%s", runs[0].name); return; }
    size_t len = 0;
    for (int i = 0; i < n; i++) len += strlen(runs[i].name) + 2;
    if (len > 70) { snprintf(buf, cap, "%d runs", n); return; }
    size_t at = 0;
    for (int i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i == 0 ? "" : i == n - 1 ? " vs " : ", ", runs[i].name);
}

static void write_svg(FILE *f, const prun *runs, int n, const char *title, zinf_plot_log log_y)
{
    legend_slot slot[ZINF_PLOT_MAX_RUNS];
    int lrows = legend_layout(runs, n, slot);
    const double top = 76 + 24.0 * lrows, ph = 330, gapx = 36, gapy = 28;
    const double H = top + 2 * ph + gapy + 8;
    fig g = {.f = f, .runs = runs, .nruns = n};

    /* the step axis, shared by the four panels */
    double xlo = INFINITY, xhi = -INFINITY;
    int64_t smax = 1;
    for (int r = 0; r < n; r++) {
        xlo = fmin(xlo, (double)runs[r].rows[0].step);
        xhi = fmax(xhi, (double)runs[r].rows[runs[r].n - 1].step);
        int64_t s = runs[r].rows[runs[r].n - 1].step;
        smax = s > smax ? s : smax;
    }
    char widest[32]; /* the longest step label there can be: digits, or 3 and a decimal and k or M */
    snprintf(widest, sizeof widest, "%lld", smax < 10000 ? (long long)smax : 888LL);
    if (smax >= 10000) strcat(widest, ".8k");
    /* panel cells: two columns; the y labels' width sets each column's left margin */
    const double cellw = (W - 2 * 24 - gapx) / 2;
    int xmax = (int)((cellw - 80) / (text_w(widest, 12) + 30));
    xmax = xmax < 3 ? 3 : xmax > 9 ? 9 : xmax;
    /* steps from 1 read best from 0 */
    axis_linear(&g.x, xlo >= 0 && xlo <= 0.25 * xhi ? 0 : xlo, xhi, xmax, true, false);
    axis_si(&g.x, 1e4);

    axis y[NPANELS];
    bool any_val = false;
    for (int r = 0; r < n; r++) any_val |= isfinite(last_value(&runs[r], K_VAL));
    for (int p = 0; p < NPANELS; p++) y_axis(&g, &panels[p], log_y, 7, &y[p]);
    box b[NPANELS];
    for (int p = 0; p < NPANELS; p++) {
        int col = p % 2, rowi = p / 2;
        double lw = fmax(ylabel_w(&y[col]), ylabel_w(&y[col + 2]));
        double cx = 24 + col * (cellw + gapx), cy = top + rowi * (ph + gapy);
        b[p] = (box){cx + lw + 12, cy + 30, cx + cellw - 8, cy + ph - 44};
    }

    double title_size = fmax(10, fmin(20, 20 * (W - 60) / text_w(title, 20))); /* a long title shrinks to fit */
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" viewBox=\"0 0 %d %.0f\" "
            "font-family=\"%s\">\n<title>", W, H, W, H, FONT);
    xml_text(f, title);
    fprintf(f, "</title>\n<rect width=\"%d\" height=\"%.0f\" fill=\"#ffffff\"/>\n"
            "<text class=\"title\" x=\"%d\" y=\"38\" text-anchor=\"middle\" font-size=\"%.1f\" font-weight=\"bold\" "
            "fill=\"%s\">", W, H, W / 2, title_size, INK);
    xml_text(f, title);
    fputs("</text>\n<g class=\"legend\">\n", f);
    for (int i = 0; i < n; i++) {
        char d[96];
        run_detail(&runs[i], d, sizeof d);
        double lx = slot[i].x, ly = 64 + 24.0 * slot[i].row;
        fprintf(f, "<g class=\"legend-entry\" data-run=\"%d\">\n<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" "
                "y2=\"%.2f\" stroke=\"%s\" stroke-width=\"3\" stroke-linecap=\"round\"/>\n"
                "<text x=\"%.2f\" y=\"%.2f\" dy=\"0.35em\" font-size=\"13\" fill=\"%s\">", i, lx + 2, ly, lx + 22,
                ly, palette[i], lx + 30, ly, INK);
        xml_text(f, runs[i].name);
        fprintf(f, "<tspan dx=\"8\" font-size=\"12\" fill=\"%s\">%s</tspan></text>\n</g>\n", SOFT, d);
    }
    fputs("</g>\n", f);
    for (int p = 0; p < NPANELS; p++) draw_panel(&g, &panels[p], &b[p], &y[p], any_val);
    fputs("</svg>\n", f);
}

/* ---------------------------------------------------------------- files -------------------- */
static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static int out_paths(const zinf_plot_opts *o, const prun *runs, char *svg, char *png, size_t cap)
{
    char base[PLOT_PATH];
    if (!o->out) {
        if (o->ninputs > 1)
            return zinf_err("plot: --out is required with several runs (the figure belongs to none of them)");
        ZINF_TRY(pathf(base, sizeof base, "%s/loss", runs[0].dir));
    } else if (is_dir(o->out)) {
        ZINF_TRY(pathf(base, sizeof base, "%s%sloss", o->out, ends_with(o->out, "/") ? "" : "/"));
    } else {
        size_t len = strlen(o->out);
        if (!len) return zinf_err("plot: --out is empty");
        if (o->out[len - 1] == '/') return zinf_err("plot: --out %s: no such directory", o->out);
        if (ends_with(o->out, ".svg") || ends_with(o->out, ".png")) len -= 4;
        ZINF_TRY(pathf(base, sizeof base, "%.*s", (int)len, o->out));
    }
    ZINF_TRY(pathf(svg, cap, "%s.svg", base));
    return pathf(png, cap, "%s.png", base);
}

static int write_file_svg(const char *path, const prun *runs, int n, const char *title, zinf_plot_log log_y)
{
    char tmp[PLOT_PATH];
    ZINF_TRY(pathf(tmp, sizeof tmp, "%s.tmp", path));
    FILE *f = fopen(tmp, "w");
    if (!f) return zinf_errc(-errno, "%s: %s", path, strerror(errno));
    write_svg(f, runs, n, title, log_y);
    int rc = ferror(f) ? zinf_errc(ZINF_EIO, "%s: write failed", tmp) : 0;
    if (fclose(f) && !rc) rc = zinf_errc(-errno, "%s: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path)) rc = zinf_errc(-errno, "%s: %s", path, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}

/* An executable called name in a directory of PATH (an empty entry is the current directory). */
static bool on_path(const char *name, char *out, size_t cap)
{
    const char *path = getenv("PATH");
    if (!path) return false;
    for (const char *p = path;;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        snprintf(out, cap, "%.*s/%s", (int)(len ? len : 1), len ? p : ".", name);
        struct stat st;
        if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return true;
        if (!end) return false;
        p = end + 1;
    }
}

/* Run argv[0] (a path) without a shell; its stderr is collected for the message when it fails. */
static int spawn(char *const argv[], char *msg, size_t cap)
{
    int fd[2];
    if (pipe(fd)) return zinf_errc(-errno, "pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 2);
    posix_spawn_file_actions_addclose(&fa, fd[0]);
    posix_spawn_file_actions_addclose(&fa, fd[1]);
    pid_t pid;
    int e = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fd[1]);
    if (e) {
        close(fd[0]);
        snprintf(msg, cap, "%s", strerror(e));
        return -1;
    }
    size_t got = 0;
    char chunk[512];
    ssize_t k;
    while ((k = read(fd[0], chunk, sizeof chunk)) != 0) { /* to the end, so the child never blocks */
        if (k < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (ssize_t i = 0; i < k && got + 1 < cap; i++) msg[got++] = chunk[i] == '\n' ? ' ' : chunk[i];
    }
    close(fd[0]);
    msg[got] = 0;
    while (got > 0 && msg[got - 1] == ' ') msg[--got] = 0;
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    if (!got) snprintf(msg, cap, WIFEXITED(st) ? "exit status %d" : "killed by signal %d",
                       WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    return -1;
}

/* The PNG beside the SVG. Returns 0 (written), 1 (not written, *why says so) or a negative status. */
static int write_png(const char *svg, const char *png, char *why, size_t cap)
{
    char exe[PLOT_PATH], tmp[PLOT_PATH], in[PLOT_PATH], out_im[PLOT_PATH], msg[400];
    ZINF_TRY(pathf(tmp, sizeof tmp, "%s.tmp", png));
    ZINF_TRY(pathf(in, sizeof in, "svg:%s", svg));         /* ImageMagick: the format, whatever the name */
    ZINF_TRY(pathf(out_im, sizeof out_im, "png:%s", tmp));
    bool rsvg = on_path("rsvg-convert", exe, sizeof exe);
    if (!rsvg && !on_path("convert", exe, sizeof exe)) {
        snprintf(why, cap, "neither rsvg-convert nor ImageMagick's convert is on PATH");
        return 1;
    }
    char *rsvg_argv[] = {exe, "-f", "png", "-b", "white", "-o", tmp, (char *)svg, NULL};
    char *im_argv[] = {exe, "-background", "white", in, out_im, NULL};
    if (spawn(rsvg ? rsvg_argv : im_argv, msg, sizeof msg)) {
        unlink(tmp);
        snprintf(why, cap, "%s failed: %s", exe, msg);
        return 1;
    }
    /* a converter that says it succeeded yet wrote no PNG is a failure too */
    unsigned char sig[8] = {0};
    FILE *f = fopen(tmp, "rb");
    size_t got = f ? fread(sig, 1, sizeof sig, f) : 0;
    if (f) fclose(f);
    if (got != 8 || memcmp(sig, "\x89PNG\r\n\x1a\n", 8)) {
        unlink(tmp);
        snprintf(why, cap, "%s wrote no PNG", exe);
        return 1;
    }
    if (rename(tmp, png)) {
        int e = errno;
        unlink(tmp);
        return zinf_errc(-e, "%s: %s", png, strerror(e));
    }
    return 0;
}

int zinf_plot(const zinf_plot_opts *o, FILE *out, FILE *note)
{
    if (o->ninputs < 1) return zinf_err("plot: no run given: zinf plot RUN_DIR|METRICS_FILE... (see zinf plot --help)");
    if (o->ninputs > ZINF_PLOT_MAX_RUNS)
        return zinf_err("plot: %d runs given, at most %d fit one figure", o->ninputs, ZINF_PLOT_MAX_RUNS);
    prun *runs = calloc((size_t)o->ninputs, sizeof *runs);
    if (!runs) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    int rc = 0, n = 0;
    for (; n < o->ninputs && !rc; n++) rc = read_run(o->inputs[n], &runs[n]);
    /* two runs of one name (runs/a/x and runs/b/x) are told apart by their paths */
    for (int i = 0; i < n && !rc; i++)
        for (int j = 0; j < n; j++)
            if (i != j && !strcmp(runs[i].name, runs[j].name) && strcmp(runs[i].dir, runs[j].dir)) {
                snprintf(runs[i].name, sizeof runs[i].name, "%s", runs[i].dir);
                break;
            }
    char svg[PLOT_PATH], png[PLOT_PATH], title[256];
    if (!rc) rc = out_paths(o, runs, svg, png, sizeof svg);
    if (!rc) {
        if (o->title) snprintf(title, sizeof title, "%s", o->title);
        else default_title(runs, n, title, sizeof title);
        rc = write_file_svg(svg, runs, n, title, o->log_y);
    }
    if (!rc) {
        fprintf(out, "wrote %s\n", svg);
        char why[PLOT_PATH + 500];
        int prc = o->png == ZINF_PLOT_PNG_NO ? 0 : write_png(svg, png, why, sizeof why);
        if (prc < 0) rc = prc;
        else if (prc == 0 && o->png != ZINF_PLOT_PNG_NO) fprintf(out, "wrote %s\n", png);
        else if (prc > 0 && o->png == ZINF_PLOT_PNG_YES) rc = zinf_err("plot: --png: %s (the SVG is %s)", why, svg);
        else if (prc > 0) fprintf(note, "zinf: note: no PNG: %s; the SVG is %s\n", why, svg);
    }
    for (int i = 0; i < o->ninputs; i++) free(runs[i].rows);
    free(runs);
    return rc;
}
