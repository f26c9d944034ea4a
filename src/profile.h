/* profile: where a step's device time goes, operation by operation. Attached to a backend, it
 * puts a timed event before and after each operation the attaching thread issues (on the compute
 * stream, where every operation runs) and keeps each operation's calls, milliseconds and, for the
 * matrix products and attention, FLOPs. Operations other threads issue (the host update's) run
 * untimed. Backend-independent: the CPU backend's timed events hold the clock, so there it gives
 * each operation's wall time. The flops profiler's detailed report (flops_profiler.detailed) is
 * its one user. */
#ifndef ZINF_PROFILE_H
#define ZINF_PROFILE_H

#include "kernels.h" /* zinf_backend, zinf_op_prof */

/* One operation's totals since the profile was attached. */
typedef struct zinf_op_total {
    const char *name; /* the backend member's name: "matmul_bwd", "attention_fwd", ... */
    long calls;
    double ms;        /* device milliseconds between the events around its calls */
    double flops;     /* 0 where not counted (only the products and attention are) */
} zinf_op_total;

/* Attach a profile to be: from here on the operations this thread issues are timed. Returns 0,
 * or a negative status (no timed events on this backend, out of memory) with be untouched. */
int zinf_prof_attach(zinf_backend *be);
/* Wait for the device, add the elapsed time of every operation timed since the last collection
 * into the totals. Returns 0 or a negative status (an event that did not complete). */
int zinf_prof_collect(zinf_backend *be);
/* The totals of what zinf_prof_collect has added so far, ordered by time, most first: fills at
 * most cap entries (ZINF_PROF_OPS hold every operation) and returns how many operations ran (0
 * when no profile is attached). */
#define ZINF_PROF_OPS 32
int zinf_prof_totals(zinf_backend *be, zinf_op_total *out, int cap);
/* Restore be's operations and free the profile (nothing when none is attached). */
void zinf_prof_detach(zinf_backend *be);

/* FLOPs of one call as the profile counts them: a product of N x K by K x OC is 2 N K OC (its
 * backward that much for dx and again for dw); causal attention's forward 2 B NH T^2 hs (the
 * scores and the weighted sum, each half of the square), its backward 2.5 times that. */
double zinf_prof_matmul_flops(int64_t N, int64_t K, int64_t OC);
double zinf_prof_attention_flops(int64_t B, int64_t T, int64_t NH, int64_t hs, int backward);

#endif
