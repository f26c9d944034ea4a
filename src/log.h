/* log: rank-aware messages (rank 0 prints progress; every rank may also write its own log file)
 * and a monotonic clock. */
#ifndef ZINF_LOG_H
#define ZINF_LOG_H

#include <stdio.h>

/* Set once after MPI is up. per_rank_dir: when not NULL, each rank also appends every message to
 * <dir>/rank<R>.log. */
int zinf_log_init(int rank, const char *per_rank_dir);
void zinf_log_close(void);
/* Printed on rank 0 only (stdout), and to this rank's file. */
void zinf_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Printed on every rank (stderr) with a "zinf: warning: " prefix (rank 0 only unless all_ranks). */
void zinf_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double zinf_now(void); /* seconds, monotonic */

#endif
