/* err: error status codes and the per-thread error message.
 * Functions return 0 or a negative ZINF_E* / -errno and record what went wrong with zinf_err();
 * main (cli.c) prints the message and exits. The exceptions, where returning cannot work, are in
 * comm.c and train.c: zinf_comm_abort and the collective watchdog print before ending the job,
 * zinf_comm_agree prints an agreed error once on the failing rank, zinf_train_run a single rank's
 * unagreed one; main then prints nothing more (DESIGN.md section 5). */
#ifndef ZINF_ERR_H
#define ZINF_ERR_H

#include <errno.h>

enum {
    ZINF_EINVAL = -1000, /* bad input: config, flag, file contents */
    ZINF_EIO = -1001,    /* a read or write failed or came up short */
    ZINF_ENOMEM = -1002, /* an allocation failed */
    ZINF_ECOMM = -1003,  /* a collective failed or timed out */
    ZINF_ENOTSUP = -1004 /* asked for something this build does not do */
};

/* Record a message (printf-style); returns ZINF_EINVAL so callers can `return zinf_err(...)`. */
int zinf_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Same, returning the given code. */
int zinf_errc(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current message with context: "ctx: <old message>". Returns code. */
int zinf_err_prefix(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last message recorded on this thread ("" if none). */
const char *zinf_errmsg(void);
void zinf_err_clear(void);

/* Propagate a negative status. */
#define ZINF_TRY(expr)                                                                            \
    do {                                                                                          \
        int zinf_try_rc_ = (expr);                                                                \
        if (zinf_try_rc_ < 0) return zinf_try_rc_;                                                \
    } while (0)

#endif
