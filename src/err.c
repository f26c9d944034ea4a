#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char errbuf[2048];

static int vset(int code, const char *fmt, va_list ap)
{
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    return code;
}

int zinf_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vset(ZINF_EINVAL, fmt, ap);
    va_end(ap);
    return rc;
}

int zinf_errc(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vset(code, fmt, ap);
    va_end(ap);
    return rc;
}

int zinf_err_prefix(int code, const char *fmt, ...)
{
    char old[sizeof errbuf], pre[512];
    memcpy(old, errbuf, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    size_t n = strlen(pre);
    if (n > sizeof errbuf - 3) n = sizeof errbuf - 3;
    memcpy(errbuf, pre, n);
    memcpy(errbuf + n, ": ", 2);
    size_t room = sizeof errbuf - n - 3, ol = strlen(old);
    if (ol > room) ol = room;
    memcpy(errbuf + n + 2, old, ol);
    errbuf[n + 2 + ol] = 0;
    return code;
}

const char *zinf_errmsg(void) { return errbuf; }
void zinf_err_clear(void) { errbuf[0] = 0; }
