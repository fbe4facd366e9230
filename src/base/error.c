/*
 * error.c - the per-thread error message and status.
 *
 * Each thread keeps the last error. An op handed a NULL input does not set
 * one, so the first error of a chain survives to the check at its end.
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
