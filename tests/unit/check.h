/* check: the few assertion helpers the C unit tests share. A test binary exits 0 when every
 * check passed, 1 otherwise, 77 to skip (Automake's convention). */
#ifndef ZINF_CHECK_H
#define ZINF_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures_, check_count_;

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        check_count_++;                                                                           \
        if (!(cond)) {                                                                            \
            check_failures_++;                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                       \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fputc('\n', stderr);                                                                  \
        }                                                                                         \
    } while (0)

/* |a-b| <= atol + rtol*|b| */
#define CHECK_CLOSE(a, b, rtol, atol, what)                                                       \
    do {                                                                                          \
        double ca_ = (double)(a), cb_ = (double)(b);                                              \
        CHECK(fabs(ca_ - cb_) <= (atol) + (rtol)*fabs(cb_), "%s: got %.9g want %.9g", (what), ca_, \
              cb_);                                                                               \
    } while (0)

static inline int check_done(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, check_count_, check_failures_);
    return check_failures_ ? 1 : 0;
}

#endif
