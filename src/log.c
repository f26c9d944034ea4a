#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "err.h"

static int log_rank;
static FILE *log_file;
static char log_path[4096];
static int log_errno; /* the first write error of log_file (0: none) */

int zinf_log_init(int rank, const char *per_rank_dir)
{
    log_rank = rank;
    zinf_log_close();
    log_errno = 0;
    if (per_rank_dir && *per_rank_dir) {
        snprintf(log_path, sizeof log_path, "%s/rank%d.log", per_rank_dir, rank);
        log_file = fopen(log_path, "a");
        if (!log_file) return zinf_errc(-errno, "cannot open per-rank log %s: %s", log_path, strerror(errno));
    }
    return 0;
}

int zinf_log_status(void)
{
    if (!log_errno) return 0;
    return zinf_errc(-log_errno, "%s: cannot write: %s", log_path, strerror(log_errno));
}

int zinf_log_close(void)
{
    if (log_file) {
        errno = 0;
        if (fclose(log_file) && !log_errno) log_errno = errno ? errno : EIO;
    }
    log_file = NULL;
    return zinf_log_status();
}

static void emit(FILE *console, const char *prefix, const char *fmt, va_list ap)
{
    char buf[4096];
    vsnprintf(buf, sizeof buf, fmt, ap);
    if (console) {
        fprintf(console, "%s%s\n", prefix, buf);
        fflush(console);
    }
    if (log_file && !log_errno) {
        errno = 0;
        if (fprintf(log_file, "%s%s\n", prefix, buf) < 0 || fflush(log_file)) log_errno = errno ? errno : EIO;
    }
}

void zinf_info(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(log_rank == 0 ? stdout : NULL, "", fmt, ap);
    va_end(ap);
}

void zinf_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(log_rank == 0 ? stderr : NULL, "zinf: warning: ", fmt, ap);
    va_end(ap);
}

double zinf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
