#include "log.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "err.h"

static int log_rank;
static FILE *log_file;

int zinf_log_init(int rank, const char *per_rank_dir)
{
    log_rank = rank;
    zinf_log_close();
    if (per_rank_dir && *per_rank_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank%d.log", per_rank_dir, rank);
        log_file = fopen(path, "a");
        if (!log_file) return zinf_errc(-errno, "cannot open per-rank log %s: %s", path, strerror(errno));
    }
    return 0;
}

void zinf_log_close(void)
{
    if (log_file) fclose(log_file);
    log_file = NULL;
}

static void emit(FILE *console, const char *prefix, const char *fmt, va_list ap)
{
    char buf[4096];
    vsnprintf(buf, sizeof buf, fmt, ap);
    if (console) {
        fprintf(console, "%s%s\n", prefix, buf);
        fflush(console);
    }
    if (log_file) {
        fprintf(log_file, "%s%s\n", prefix, buf);
        fflush(log_file);
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
