/* progress: how long a training run has taken and how long it will still take, for the step log
 * line and metrics.jsonl (elapsed_s, eta_s), and the compact duration format they are shown in.
 * Pure arithmetic on times the caller measured: no clock, no I/O, so the unit test can drive it. */
#ifndef ZINF_PROGRESS_H
#define ZINF_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

/* What a span of time was spent on. Steps are averaged over the recent past; evaluations and
 * checkpoint saves come every so many steps, so each has its own mean per occurrence. */
typedef enum { ZINF_PROG_STEP, ZINF_PROG_EVAL, ZINF_PROG_SAVE, ZINF_PROG_NKINDS } zinf_prog_kind;

typedef struct {
    double mean[ZINF_PROG_NKINDS]; /* seconds per occurrence */
    int64_t n[ZINF_PROG_NKINDS];   /* occurrences timed; the steps' mean leaves out the first */
    double first_step;             /* the first step's time, used only until a second is timed */
} zinf_progress;

/* Steps are averaged exponentially with this weight once 1/n falls below it (a plain mean until
 * then), so the estimate follows a run that speeds up or slows down within about 20 steps. */
#define ZINF_PROGRESS_ALPHA 0.05

void zinf_progress_init(zinf_progress *p);
/* Record that one step, evaluation or save took `seconds`. */
void zinf_progress_add(zinf_progress *p, zinf_prog_kind kind, double seconds);
/* Seconds left for steps_left more steps with evals_left evaluations and saves_left saves among
 * them: each kind's mean times its count. The first step of a process pays for warm-up (first
 * touches of memory, caches, lazy initialisation), so it stands for the step time only while no
 * other step has been timed. Kinds not timed yet count as free. Never negative. */
double zinf_progress_eta(const zinf_progress *p, int64_t steps_left, int64_t evals_left, int64_t saves_left);
/* Events at every `every` steps (and at the last step) after step `done` up to `total`: the
 * evaluations or saves still to come. 0 when every <= 0. */
int64_t zinf_progress_events_left(int64_t done, int64_t total, int64_t every);

/* A duration as people read it, at most two units: "45s", "3m07s", "2h05m", "3d04h" (rounded
 * to the last unit shown); "?" for a negative or non-finite time, ">9999d" past that.
 * Writes at most cap bytes into buf and returns buf; 16 bytes always suffice. */
char *zinf_fmt_duration(double seconds, char *buf, size_t cap);

#endif
