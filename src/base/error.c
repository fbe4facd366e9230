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
#include <string.h>

/* Room for a message about two paths of PATH_MAX (4096) bytes and the
 * reason after them: a message cut short loses its reason, which comes
 * last. */
#define MSG_MAX 10240

static _Thread_local amp_status last_status = AMP_OK;
static _Thread_local char last_msg[MSG_MAX];

static amp_status vset(amp_status st, const char *fmt, va_list ap)
{
    /* Formatted aside first: an argument may be the last message itself
     * ("...: %s", amp_last_error()). */
    char msg[MSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    last_status = st;
    memcpy(last_msg, msg, strlen(msg) + 1);
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
    char msg[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (warn_fn)
        warn_fn(msg, warn_user);
    else
        fprintf(stderr, "ampc warning: %s\n", msg);
}
