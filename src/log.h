/* log: rank-aware messages (rank 0 prints progress; every rank may also write its own log file)
 * and a monotonic clock. */
#ifndef ZINF_LOG_H
#define ZINF_LOG_H

#include <stdio.h>

/* Set once after MPI is up. per_rank_dir: when not NULL, each rank also appends every message to
 * <dir>/rank<R>.log. */
int zinf_log_init(int rank, const char *per_rank_dir);
/* 0, or the first failed write or flush of this rank's log file (a full disk) as an error naming
 * the file and errno; the messages after it are not written there. The training loop checks it
 * at every step, since zinf_info cannot return it. */
int zinf_log_status(void);
/* Close this rank's log file: 0, or zinf_log_status's error (a failed close included). */
int zinf_log_close(void);
/* Printed on rank 0 only (stdout), and to this rank's file. */
void zinf_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Printed on every rank (stderr) with a "zinf: warning: " prefix (rank 0 only unless all_ranks). */
void zinf_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double zinf_now(void); /* seconds, monotonic */

#endif
