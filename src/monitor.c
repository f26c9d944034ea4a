/* DeepSpeed's tensorboard and csv_monitor blocks: see monitor.h and zinf-config(5). */
#include "monitor.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "err.h"

/* ---------------------------------------------------------------- CRC-32C ------------------ */
uint32_t zinf_crc32c(const void *p, size_t n)
{
    static uint32_t table[256];
    static bool made;
    if (!made) { /* reflected polynomial 0x1EDC6F41 */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
        made = true;
    }
    const unsigned char *b = p;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ b[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t zinf_crc32c_masked(const void *p, size_t n)
{
    uint32_t c = zinf_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---------------------------------------------------------------- protobuf, by hand -------- */
/* A message being built: bytes appended, with the few wire types Event and Summary need. */
typedef struct { unsigned char b[1024]; size_t n; bool over; } pbuf;

static void pb_bytes(pbuf *m, const void *p, size_t n)
{
    if (m->n + n > sizeof m->b) { m->over = true; return; }
    memcpy(m->b + m->n, p, n);
    m->n += n;
}
static void pb_varint(pbuf *m, uint64_t v)
{
    unsigned char t[10];
    size_t k = 0;
    do {
        t[k++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_bytes(m, t, k);
}
static void pb_key(pbuf *m, unsigned field, unsigned wire) { pb_varint(m, (uint64_t)field << 3 | wire); }
static void pb_len(pbuf *m, unsigned field, const void *p, size_t n) /* wire type 2 */
{
    pb_key(m, field, 2);
    pb_varint(m, n);
    pb_bytes(m, p, n);
}
/* v's low n bytes, least significant first (TFRecord and protobuf are little-endian) */
static void le(unsigned char *t, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++) t[i] = (unsigned char)(v >> (8 * i));
}
/* a fixed-width field: wire type 1 (n = 8 bytes) or 5 (n = 4) */
static void pb_fixed(pbuf *m, unsigned field, uint64_t bits, size_t n)
{
    unsigned char t[8];
    le(t, bits, n);
    pb_key(m, field, n == 8 ? 1 : 5);
    pb_bytes(m, t, n);
}
static void pb_double(pbuf *m, unsigned field, double x)
{
    uint64_t u;
    memcpy(&u, &x, 8);
    pb_fixed(m, field, u, 8);
}
static void pb_float(pbuf *m, unsigned field, float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    pb_fixed(m, field, u, 4);
}

/* ---------------------------------------------------------------- the writers -------------- */
/* seconds since the epoch, the wall time an event carries */
static double wall_time(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

enum { MAX_TAGS = 16 };
struct zinf_monitor {
    FILE *tb;
    char tb_path[4200];
    char csv_dir[4096];
    char csv_tags[MAX_TAGS][128]; /* tags whose CSV header this process wrote */
    int ncsv;
    int rc;                       /* the first failure */
};

static int fail(zinf_monitor *m, const char *path)
{
    if (!m->rc) m->rc = zinf_errc(-errno, "%s: %s", path, strerror(errno));
    return m->rc;
}

/* one TFRecord: length, its masked CRC, the data, its masked CRC */
static int tb_record(zinf_monitor *m, const pbuf *e)
{
    if (e->over) return m->rc ? m->rc : (m->rc = zinf_err("%s: an event is too large", m->tb_path));
    unsigned char h[8], hc[4], dc[4];
    le(h, e->n, 8);
    le(hc, zinf_crc32c_masked(h, 8), 4);
    le(dc, zinf_crc32c_masked(e->b, e->n), 4);
    if (fwrite(h, 8, 1, m->tb) != 1 || fwrite(hc, 4, 1, m->tb) != 1 || fwrite(e->b, 1, e->n, m->tb) != e->n ||
        fwrite(dc, 4, 1, m->tb) != 1 || fflush(m->tb))
        return fail(m, m->tb_path);
    return 0;
}

int zinf_monitor_open(zinf_monitor **out, const char *tb_dir, const char *csv_dir)
{
    *out = NULL;
    if (!tb_dir && !csv_dir) return 0;
    zinf_monitor *m = calloc(1, sizeof *m);
    if (!m) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    if (csv_dir) snprintf(m->csv_dir, sizeof m->csv_dir, "%s", csv_dir);
    if (tb_dir) {
        char host[256] = "localhost";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        snprintf(m->tb_path, sizeof m->tb_path, "%s/events.out.tfevents.%010lld.%s.%ld.0", tb_dir,
                 (long long)time(NULL), host, (long)getpid());
        m->tb = fopen(m->tb_path, "wb");
        if (!m->tb) {
            int rc = zinf_errc(-errno, "%s: %s", m->tb_path, strerror(errno));
            free(m);
            return rc;
        }
        /* Event { wall_time = 1, file_version = 3 } */
        pbuf e = {.n = 0};
        pb_double(&e, 1, wall_time());
        pb_len(&e, 3, "brain.Event:2", 13);
        int rc = tb_record(m, &e);
        if (rc) {
            zinf_monitor_close(m);
            return rc;
        }
    }
    *out = m;
    return 0;
}

/* Python's repr of a float: the shortest digits that read back as the same double; positional
 * from 1e-4 up to 1e16 (a whole number with ".0"), an exponent outside */
static void py_float(char *buf, size_t cap, double v)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    const char *e = strchr(buf, 'e');
    int x = e ? atoi(e + 1) : 0;
    /* %g writes an exponent from its precision on (1e+06), Python's repr from 16 */
    if ((e && x >= 0 && x < 16) || (!e && !strpbrk(buf, ".ni"))) snprintf(buf, cap, "%.1f", v);
}

static int csv_event(zinf_monitor *m, const char *tag, double value, int64_t step)
{
    /* DeepSpeed's csvMonitor: the file is the tag with '/' and ' ' as '_'; the header's name
     * is the tag's last '/' part; Python's csv module ends lines with \r\n */
    char name[128], path[4300], num[64];
    snprintf(name, sizeof name, "%s", tag);
    for (char *p = name; *p; p++)
        if (*p == '/' || *p == ' ') *p = '_';
    snprintf(path, sizeof path, "%s/%s.csv", m->csv_dir, name);
    bool header = true;
    for (int i = 0; i < m->ncsv; i++) header = header && strcmp(m->csv_tags[i], tag) != 0;
    FILE *f = fopen(path, "a");
    if (!f) return fail(m, path);
    const char *last = strrchr(tag, '/');
    py_float(num, sizeof num, value);
    int bad = (header && fprintf(f, "step,%s\r\n", last ? last + 1 : tag) < 0) ||
              fprintf(f, "%lld,%s\r\n", (long long)step, num) < 0;
    if (fclose(f) || bad) return fail(m, path);
    if (header && m->ncsv < MAX_TAGS) snprintf(m->csv_tags[m->ncsv++], sizeof m->csv_tags[0], "%s", tag);
    return 0;
}

int zinf_monitor_scalar(zinf_monitor *m, const char *tag, double value, int64_t step)
{
    if (!m) return 0;
    if (m->rc) return m->rc;
    if (m->tb) {
        /* Event { wall_time = 1, step = 2, summary = 5 { value = 1 { tag = 1, simple_value = 2 } } } */
        pbuf v = {.n = 0}, s = {.n = 0}, e = {.n = 0};
        pb_len(&v, 1, tag, strlen(tag));
        pb_float(&v, 2, (float)value);
        pb_len(&s, 1, v.b, v.n);
        pb_double(&e, 1, wall_time());
        pb_key(&e, 2, 0);
        pb_varint(&e, (uint64_t)step);
        pb_len(&e, 5, s.b, s.n);
        e.over = e.over || v.over || s.over;
        ZINF_TRY(tb_record(m, &e));
    }
    if (m->csv_dir[0]) ZINF_TRY(csv_event(m, tag, value, step));
    return 0;
}

int zinf_monitor_close(zinf_monitor *m)
{
    if (!m) return 0;
    int rc = m->rc;
    if (m->tb && fclose(m->tb) && !rc) rc = zinf_errc(-errno, "%s: %s", m->tb_path, strerror(errno));
    free(m);
    return rc;
}
