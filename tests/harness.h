/*
 * harness.h - the tests' small framework: checks that report file and
 * line and go on, skips that say why, a closing "N passed, N failed" line,
 * a finite-difference gradient checker shared by the op tests, and small
 * helpers (random tensors, the largest difference of two tensors, a
 * file read or written whole, a substring counted).
 *
 * A test file defines static void test_*(void) functions and a main that
 * RUNs each (or RUN_IFs it, where it needs something the machine may lack)
 * and returns harness_done().
 */
#ifndef AMPC_HARNESS_H
#define AMPC_HARNESS_H

#include "ampc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

extern int harness_failures_in_test;

void harness_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void harness_run(const char *name, void (*fn)(void));
/* Marks the running test as skipped, with the reason. */
void harness_skip(const char *why);
/* Prints the closing line; the process's exit status. */
int harness_done(void);

#define RUN(fn) harness_run(#fn, fn)

/* SLOW_BUILD: a sanitized or unoptimized build, where a test may skip what
 * takes minutes there and checks nothing the sanitizers add to. */
#if defined(__SANITIZE_ADDRESS__) || !defined(__OPTIMIZE__)
#define SLOW_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define SLOW_BUILD 1
#endif
#endif

/* Runs fn as harness_run does when ready() holds; when not, the test is
 * skipped (ready says why through harness_skip; if it does not, a generic
 * reason is given). ready runs inside the test, so the skip is the test's. */
void harness_run_if(const char *name, bool (*ready)(void), void (*fn)(void));
#define RUN_IF(ready, fn) harness_run_if(#fn, ready, fn)

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond))                                                                  \
            harness_fail(__FILE__, __LINE__, "CHECK(%s) [last error: %s]", #cond,     \
                         amp_last_error());                                           \
    } while (0)

#define CHECK_MSG(cond, ...)                                                          \
    do {                                                                              \
        if (!(cond))                                                                  \
            harness_fail(__FILE__, __LINE__, __VA_ARGS__);                            \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                         \
    do {                                                                              \
        double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);                \
        if (!(fabs(a_ - b_) <= t_))                                                   \
            harness_fail(__FILE__, __LINE__, "%s = %.9g, %s = %.9g, |diff| %.3g > %.3g", \
                         #a, a_, #b, b_, fabs(a_ - b_), t_);                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                            \
    do {                                                                              \
        long long a_ = (long long)(a), b_ = (long long)(b);                           \
        if (a_ != b_)                                                                 \
            harness_fail(__FILE__, __LINE__, "%s = %lld, expected %s = %lld", #a, a_, #b, b_); \
    } while (0)

/* Checks that st is AMP_OK. */
#define CHECK_OK(st) CHECK_EQ_INT((st), AMP_OK)

/* Checks that the expression failed with status st and a message holding
 * the text needle. */
#define CHECK_ERROR(st, needle)                                                       \
    do {                                                                              \
        if (amp_last_status() != (st) || !strstr(amp_last_error(), (needle)))         \
            harness_fail(__FILE__, __LINE__, "expected error %d with \"%s\", got %d \"%s\"", \
                         (int)(st), (needle), (int)amp_last_status(), amp_last_error()); \
        amp_clear_error();                                                            \
    } while (0)

/* A function of the inputs for the gradient checker. */
typedef amp_tensor *(*gc_fn)(amp_tensor **in, void *ctx);

/* Checks the gradient of sum(w * fn(in)) (w fixed random weights) with
 * respect to every input that requires grad against central differences
 * with step eps, element by element: |analytic - numeric| <= atol +
 * rtol * |numeric|. Reports failures under the name what. Returns whether
 * all matched. Frees the thread's temporaries at the end. */
bool gradcheck(const char *what, gc_fn fn, amp_tensor **in, int n, void *ctx, double eps, double atol,
               double rtol);

/* A tensor of the given shape with uniform values in [lo, hi) from a
 * generator of its own (the global one is left alone). Caller owns it. */
amp_tensor *test_uniform(amp_shape s, amp_dtype dt, double lo, double hi, uint64_t seed);

/* Largest |a[i] - b[i]| over two tensors' values, read as double. */
double max_abs_diff(const amp_tensor *a, const amp_tensor *b);

/* The whole of the file at path, malloc'd and NUL-terminated, its length
 * in *len (when len is not NULL); NULL when it cannot be read. */
char *test_read_file(const char *path, size_t *len);

/* Writes the n bytes at p to the file at path (replacing it), checking
 * that it could. */
void test_write_file(const char *path, const void *p, size_t n);

/* How many times needle (not empty) occurs in s, without overlaps; 0 for
 * a NULL s. */
int test_count(const char *s, const char *needle);

#endif
