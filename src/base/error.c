/*
 * error.c - the per-thread error message and status, and the warning
 * channel.
 *
 * Each thread keeps the last error. An op handed a NULL input does not set
 * one, so the first error of a chain survives to the check at its end.
 * Warnings (not errors: the call goes on) go to the user's handler.
 */
#include "base/base.h"

#include <stdio.h>

static _Thread_local amp_status last_status = AMP_OK;
static _Thread_local char last_msg[512];

static amp_status vset(amp_status st, const char *fmt, va_list ap)
{
    last_status = st;
    vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    return st;
}

amp_status amp_set_error(amp_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(st, fmt, ap);
    va_end(ap);
    return st;
}

void *amp_fail_null(amp_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(st, fmt, ap);
    va_end(ap);
    return NULL;
}

const char *amp_last_error(void) { return last_status == AMP_OK ? "" : last_msg; }
amp_status amp_last_status(void) { return last_status; }

void amp_clear_error(void)
{
    last_status = AMP_OK;
    last_msg[0] = '\0';
}

static amp_warning_fn warn_fn;
static void *warn_user;

void amp_set_warning_handler(amp_warning_fn fn, void *user)
{
    warn_fn = fn;
    warn_user = user;
}

void amp_warn(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (warn_fn)
        warn_fn(msg, warn_user);
    else
        fprintf(stderr, "ampc warning: %s\n", msg);
}
