#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"

const char *zinf_file_kind(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    default: return "not a regular file";
    }
}

int zinf_open_regular(const char *what, const char *path, int *fd, struct stat *st)
{
    const char *w = what ? what : "", *sp = what ? " " : "";
    /* O_NONBLOCK: a FIFO's open returns at once instead of waiting for a writer */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) return zinf_errc(-errno, "%s%s%s: %s", w, sp, path, strerror(errno));
    if (fstat(f, st) != 0) {
        int e = errno;
        close(f);
        return zinf_errc(-e, "%s%s%s: cannot stat: %s", w, sp, path, strerror(e));
    }
    if (!S_ISREG(st->st_mode)) {
        close(f);
        return zinf_errc(S_ISDIR(st->st_mode) ? -EISDIR : ZINF_EINVAL, "%s%s%s: is %s, not a regular file", w, sp,
                         path, zinf_file_kind(st->st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0) fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    return 0;
}

int zinf_refuse_irregular(const char *what, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return 0;
    return zinf_errc(S_ISDIR(st.st_mode) ? -EISDIR : ZINF_EINVAL, "%s%s%s: is %s, not a regular file", what ? what : "",
                     what ? " " : "", path, zinf_file_kind(st.st_mode));
}

int zinf_read_file(const char *what, const char *path, char **buf, size_t *len)
{
    const char *w = what ? what : "", *sp = what ? " " : "";
    *buf = NULL;
    *len = 0;
    int fd;
    struct stat st;
    ZINF_TRY(zinf_open_regular(what, path, &fd, &st));
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return zinf_errc(-e, "%s%s%s: %s", w, sp, path, strerror(e));
    }
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

int zinf_mkdir_p_made(const char *path, size_t *made)
{
    char p[4096];
    *made = 0;
    if ((size_t)snprintf(p, sizeof p, "%s", path) >= sizeof p) return zinf_err("%s: the path is too long", path);
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        char keep = *s;
        *s = 0;
        if (!mkdir(p, 0755)) {
            if (!*made) *made = strlen(p);
        } else if (errno != EEXIST) {
            rc = zinf_errc(-errno, "cannot create %s: %s", p, strerror(errno));
            break;
        }
        *s = keep;
        if (!keep) break;
    }
    struct stat st;
    if (!rc && (stat(path, &st) || !S_ISDIR(st.st_mode)))
        rc = zinf_errc(ZINF_EINVAL, "%s is %s, not a directory", path, stat(path, &st) ? "missing" : zinf_file_kind(st.st_mode));
    if (rc) { /* nothing half-made */
        zinf_rmdir_made(path, *made);
        *made = 0;
    }
    return rc;
}

void zinf_rmdir_made(const char *path, size_t made)
{
    char p[4096];
    if (!made || (size_t)snprintf(p, sizeof p, "%s", path) >= sizeof p) return;
    size_t n = strlen(p);
    for (;;) {
        while (n > 1 && p[n - 1] == '/') n--; /* "a/b/" is "a/b" */
        p[n] = 0;
        if (n < made || rmdir(p)) return;     /* above what was made, or no longer empty */
        while (n > 0 && p[n - 1] != '/') n--; /* up one */
    }
}

int zinf_mkdir_p(const char *path)
{
    size_t made;
    return zinf_mkdir_p_made(path, &made);
}

int zinf_prefix_dir(const char *what, const char *prefix)
{
    char d[4096];
    const char *sl = strrchr(prefix, '/');
    if (!sl) snprintf(d, sizeof d, ".");
    else snprintf(d, sizeof d, "%.*s", sl == prefix ? 1 : (int)(sl - prefix), prefix);
    struct stat st;
    if (stat(d, &st))
        return zinf_errc(ZINF_EINVAL, "%s %s: the directory %s does not exist (the files are written beside the prefix)",
                         what, prefix, d);
    if (!S_ISDIR(st.st_mode))
        return zinf_errc(ZINF_EINVAL, "%s %s: %s is %s, not a directory", what, prefix, d, zinf_file_kind(st.st_mode));
    return 0;
}
