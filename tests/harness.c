/*
 * harness.c - see harness.h.
 */
#include "harness.h"

#include <stdarg.h>
#include <stdlib.h>

int harness_failures_in_test;
static int passed, failed, skipped;
static const char *current;
static bool current_skipped;

void harness_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  FAIL %s (%s:%d): ", current ? current : "?", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    harness_failures_in_test++;
}

void harness_skip(const char *why)
{
    current_skipped = true;
    printf("  SKIP %s: %s\n", current, why);
}

void harness_run(const char *name, void (*fn)(void))
{
    current = name;
    current_skipped = false;
    harness_failures_in_test = 0;
    amp_clear_error();
    fn();
    amp_temps_free();
    if (harness_failures_in_test) {
        failed++;
        printf("FAIL %s\n", name);
    } else if (current_skipped) {
        skipped++;
    } else {
        passed++;
        printf("ok   %s\n", name);
    }
    fflush(stdout);
}

/* The test harness_run_if runs, and what it must have first. */
static bool (*gate)(void);
static void (*gated)(void);

static void run_gated(void)
{
    if (gate())
        gated();
    else if (!current_skipped)
        harness_skip("what the test needs is missing here");
}

void harness_run_if(const char *name, bool (*ready)(void), void (*fn)(void))
{
    gate = ready;
    gated = fn;
    harness_run(name, run_gated);
}

int harness_done(void)
{
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

amp_tensor *test_uniform(amp_shape s, amp_dtype dt, double lo, double hi, uint64_t seed)
{
    amp_tensor *t = amp_empty(s, dt);
    if (!t)
        return NULL;
    int64_t n = amp_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * (double)(splitmix(&seed) >> 11) * 0x1p-53;
    if (dt == AMP_I32 || dt == AMP_I64) {
        int64_t *iv = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++)
            iv[i] = (int64_t)floor(v[i]);
        amp_tensor_copy_in(t, iv, AMP_I64);
        free(iv);
    } else {
        float *fv = malloc(sizeof(float) * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++)
            fv[i] = (float)v[i];
        amp_tensor_copy_in(t, fv, AMP_F32);
        free(fv);
    }
    free(v);
    return t;
}

double max_abs_diff(const amp_tensor *a, const amp_tensor *b)
{
    if (!a || !b || amp_tensor_numel(a) != amp_tensor_numel(b))
        return INFINITY;
    double m = 0;
    for (int64_t i = 0; i < amp_tensor_numel(a); i++) {
        double d = fabs(amp_tensor_get(a, i) - amp_tensor_get(b, i));
        if (!(d <= m))
            m = d; /* NaN propagates */
    }
    return m;
}

/* sum(w * out) in double. */
static double weighted(const amp_tensor *out, const double *w)
{
    double s = 0;
    for (int64_t i = 0; i < amp_tensor_numel(out); i++)
        s += w[i] * amp_tensor_get(out, i);
    return s;
}

bool gradcheck(const char *what, gc_fn fn, amp_tensor **in, int n, void *ctx, double eps, double atol,
               double rtol)
{
    int bad = 0;
    amp_tensor *out = fn(in, ctx);
    if (!out) {
        harness_fail(__FILE__, __LINE__, "%s: forward failed: %s", what, amp_last_error());
        return false;
    }
    int64_t m = amp_tensor_numel(out);
    double *w = malloc(sizeof(double) * (size_t)(m ? m : 1));
    uint64_t seed = 12345;
    for (int64_t i = 0; i < m; i++)
        w[i] = 0.5 + (double)(splitmix(&seed) >> 11) * 0x1p-53; /* in [0.5, 1.5) */
    amp_tensor *wt = amp_empty(amp_tensor_shape(out), amp_tensor_dtype(out));
    {
        float *wf = malloc(sizeof(float) * (size_t)(m ? m : 1));
        for (int64_t i = 0; i < m; i++)
            wf[i] = (float)w[i];
        amp_tensor_copy_in(wt, wf, AMP_F32);
        for (int64_t i = 0; i < m; i++)
            w[i] = (double)amp_tensor_get(wt, i); /* the weights as the gradient carries them */
        free(wf);
    }
    for (int i = 0; i < n; i++)
        amp_tensor_clear_grad(in[i]);
    if (amp_backward_with(out, wt) != AMP_OK) {
        harness_fail(__FILE__, __LINE__, "%s: backward failed: %s", what, amp_last_error());
        bad++;
    }
    amp_no_grad_begin();
    for (int i = 0; i < n && !bad; i++) {
        if (!amp_tensor_requires_grad(in[i]))
            continue;
        amp_tensor *g = amp_tensor_grad(in[i]);
        if (!g) {
            harness_fail(__FILE__, __LINE__, "%s: input %d got no gradient", what, i);
            bad++;
            continue;
        }
        float *x = amp_tensor_data(in[i]);
        for (int64_t j = 0; j < amp_tensor_numel(in[i]) && bad < 5; j++) {
            float x0 = x[j];
            x[j] = (float)(x0 + eps);
            double fp = weighted(fn(in, ctx), w);
            x[j] = (float)(x0 - eps);
            double fm = weighted(fn(in, ctx), w);
            x[j] = x0;
            double num = (fp - fm) / (2 * eps);
            double ana = amp_tensor_get(g, j);
            if (!(fabs(ana - num) <= atol + rtol * fabs(num))) {
                harness_fail(__FILE__, __LINE__, "%s: d/d in%d[%lld]: analytic %.7g, numeric %.7g",
                             what, i, (long long)j, ana, num);
                bad++;
            }
        }
    }
    amp_no_grad_end();
    amp_tensor_free(wt);
    free(w);
    amp_temps_free();
    return bad == 0;
}

int test_count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

char *test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) {
        p[n] = '\0';
        if (len)
            *len = (size_t)n;
    }
    return p;
}

void test_write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f)
        return;
    if (n)
        CHECK_MSG(fwrite(p, 1, n, f) == n, "cannot write %s", path);
    fclose(f);
}
