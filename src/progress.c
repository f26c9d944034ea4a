#include "progress.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void zinf_progress_init(zinf_progress *p) { memset(p, 0, sizeof *p); }

void zinf_progress_add(zinf_progress *p, zinf_prog_kind kind, double seconds)
{
    if (!(seconds >= 0) || !isfinite(seconds)) return;
    int64_t n = ++p->n[kind];
    if (kind == ZINF_PROG_STEP) {
        /* the warm-up step is kept aside, never mixed into the mean of the steps after it */
        if (n == 1) {
            p->first_step = seconds;
            return;
        }
        n--;
    }
    double w = 1.0 / (double)n;
    if (kind == ZINF_PROG_STEP && w < ZINF_PROGRESS_ALPHA) w = ZINF_PROGRESS_ALPHA;
    p->mean[kind] += w * (seconds - p->mean[kind]);
}

double zinf_progress_eta(const zinf_progress *p, int64_t steps_left, int64_t evals_left, int64_t saves_left)
{
    double step = p->n[ZINF_PROG_STEP] > 1 ? p->mean[ZINF_PROG_STEP] : p->first_step;
    double t = (double)(steps_left > 0 ? steps_left : 0) * step;
    if (evals_left > 0) t += (double)evals_left * p->mean[ZINF_PROG_EVAL];
    if (saves_left > 0) t += (double)saves_left * p->mean[ZINF_PROG_SAVE];
    return t;
}

int64_t zinf_progress_events_left(int64_t done, int64_t total, int64_t every)
{
    if (every <= 0 || done >= total) return 0;
    /* multiples of every in (done, total], and the last step when it is not one */
    return total / every - done / every + (total % every != 0);
}

char *zinf_fmt_duration(double seconds, char *buf, size_t cap)
{
    if (!cap) return buf;
    if (!isfinite(seconds) || seconds < 0) {
        snprintf(buf, cap, "?");
        return buf;
    }
    /* each form rounds to its last unit; a carry that reaches the next unit moves to the next form */
    if (seconds < 59.5) {
        snprintf(buf, cap, "%llds", (long long)llround(seconds));
        return buf;
    }
    if (seconds < 3600 - 0.5) {
        long long s = llround(seconds);
        snprintf(buf, cap, "%lldm%02llds", s / 60, s % 60);
        return buf;
    }
    if (seconds < 86400 - 30) {
        long long m = llround(seconds / 60);
        snprintf(buf, cap, "%lldh%02lldm", m / 60, m % 60);
        return buf;
    }
    if (seconds >= (9999.0 * 24 + 23.5) * 3600) {
        snprintf(buf, cap, ">9999d");
        return buf;
    }
    long long h = llround(seconds / 3600);
    snprintf(buf, cap, "%lldd%02lldh", h / 24, h % 24);
    return buf;
}
