#include "file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

int zinf_read_file(const char *what, const char *path, char **buf, size_t *len)
{
    const char *w = what ? what : "", *sp = what ? " " : "";
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return zinf_errc(-errno, "%s%s%s: %s", w, sp, path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b) {
            fclose(f);
            return zinf_errc(ZINF_ENOMEM, "out of memory reading %s", path);
        }
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break; /* one byte is always left for the NUL */
        cap *= 2;
        char *nb = realloc(b, cap);
        if (!nb) free(b);
        b = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return zinf_errc(ZINF_EIO, "%s%s%s: read error", w, sp, path);
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}
