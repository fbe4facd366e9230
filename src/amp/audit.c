/*
 * audit.c - the precision audit's recorder (ampc.h, amp_audit_*): through
 * the node observer, an fp32 run's op values become the reference and a
 * 16-bit run's are compared against them, call site by call site.
 *
 * A call site is (forward or backward, module path, op name); its calls
 * are matched by order: the k-th call of a site in the compared run meets
 * the k-th call recorded. Two runs of the same model on the same batch
 * make the same calls in the same order per site, whatever autocast adds
 * between them: its casts (op "to") are the one op a 16-bit run has and
 * an fp32 run has not, so they are passed over. A checkpointed block's
 * recompute (a forward seen during backward) is the same forward again
 * and is passed over too; the nested backward's nodes are observed.
 *
 * The reference is kept widened to f32, one buffer per tensor, until the
 * next record or amp_audit_drop_reference: one step's worth.
 */
#include "autograd/graph.h"
#include "base/base.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One recorded call: its tensors widened (NULL where none). */
typedef struct {
    int n_t;
    float **v;
    int64_t *numel;
} ref_call;

typedef struct {
    amp_audit_site st;
    char *scope, *op;
    ref_call *refs;
    int n_refs, cap_refs;
    int next; /* the next reference a compared call meets */
} site;

struct amp_audit {
    site *sites;
    int n, cap;
    bool recording;
    bool active;
};

amp_audit *amp_audit_new(void)
{
    amp_audit *a = calloc(1, sizeof *a);
    if (!a)
        amp_set_error(AMP_ERR_MEMORY, "audit: out of memory");
    return a;
}

static void refs_free(site *s)
{
    for (int k = 0; k < s->n_refs; k++) {
        for (int i = 0; i < s->refs[k].n_t; i++)
            free(s->refs[k].v[i]);
        free(s->refs[k].v);
        free(s->refs[k].numel);
    }
    s->n_refs = 0;
    s->next = 0;
}

void amp_audit_drop_reference(amp_audit *a)
{
    for (int i = 0; a && i < a->n; i++)
        refs_free(&a->sites[i]);
}

void amp_audit_free(amp_audit *a)
{
    if (!a)
        return;
    amp_audit_stop(a);
    amp_audit_drop_reference(a);
    for (int i = 0; i < a->n; i++) {
        free(a->sites[i].refs);
        free(a->sites[i].scope);
        free(a->sites[i].op);
    }
    free(a->sites);
    free(a);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}

/* The site of (backward, scope, op), made at its first call; NULL (error
 * set) when out of memory. */
static site *site_of(amp_audit *a, bool backward, const char *scope, const char *op)
{
    for (int i = 0; i < a->n; i++) {
        site *s = &a->sites[i];
        if (s->st.backward == backward && strcmp(s->op, op) == 0 && strcmp(s->scope, scope) == 0)
            return s;
    }
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        site *g = realloc(a->sites, sizeof *g * (size_t)cap);
        if (!g)
            goto oom;
        a->sites = g;
        a->cap = cap;
        /* The public views point into the names, which did not move. */
    }
    site *s = &a->sites[a->n];
    memset(s, 0, sizeof *s);
    s->scope = dup_str(scope);
    s->op = dup_str(op);
    if (!s->scope || !s->op) {
        free(s->scope);
        free(s->op);
        goto oom;
    }
    s->st.scope = s->scope;
    s->st.op = s->op;
    s->st.backward = backward;
    s->st.dtype = AMP_F32;
    a->n++;
    return s;
oom:
    amp_set_error(AMP_ERR_MEMORY, "audit: out of memory for the call sites");
    return NULL;
}

/* t's values widened to f32 (malloc'd); NULL with an error on failure. */
static float *widen(const amp_tensor *t)
{
    int64_t n = amp_tensor_numel(t);
    float *v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
    if (!v) {
        amp_set_error(AMP_ERR_MEMORY, "audit: out of memory for %lld values", (long long)n);
        return NULL;
    }
    if (amp_tensor_copy_out(t, v, AMP_F32) != AMP_OK) {
        free(v);
        return NULL;
    }
    return v;
}

static bool is_float(const amp_tensor *t) { return t && amp_dtype_is_float(amp_tensor_dtype(t)); }

static amp_status record(site *s, amp_tensor *const *t, int n_t)
{
    if (s->n_refs == s->cap_refs) {
        int cap = s->cap_refs ? 2 * s->cap_refs : 4;
        ref_call *g = realloc(s->refs, sizeof *g * (size_t)cap);
        if (!g) {
            amp_set_error(AMP_ERR_MEMORY, "audit: out of memory for the reference");
            return AMP_ERR_MEMORY;
        }
        s->refs = g;
        s->cap_refs = cap;
    }
    ref_call *r = &s->refs[s->n_refs];
    r->n_t = n_t;
    r->v = calloc((size_t)(n_t > 0 ? n_t : 1), sizeof *r->v);
    r->numel = calloc((size_t)(n_t > 0 ? n_t : 1), sizeof *r->numel);
    if (!r->v || !r->numel) {
        free(r->v);
        free(r->numel);
        amp_set_error(AMP_ERR_MEMORY, "audit: out of memory for the reference");
        return AMP_ERR_MEMORY;
    }
    s->n_refs++; /* counted now: refs_free frees what was filled */
    for (int i = 0; i < n_t; i++) {
        if (!is_float(t[i]))
            continue;
        r->numel[i] = amp_tensor_numel(t[i]);
        if (!(r->v[i] = widen(t[i])))
            return amp_last_status();
    }
    return AMP_OK;
}

/* The smallest normal value of dt (IEEE 754: f16 2^-14; bf16 shares
 * f32's exponent range). */
static float min_normal(amp_dtype dt) { return dt == AMP_F16 ? 0x1p-14f : FLT_MIN; }

/* Adds n pairs (a audited, in dtype adt; s the reference) to st. */
static void compare_values(const float *a, const float *s, int64_t n, amp_dtype adt, amp_audit_site *st)
{
    float big = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(s[i]) && fabsf(s[i]) > big)
            big = fabsf(s[i]);
    /* Elements far below the tensor's scale are measured at that scale:
     * their own magnitude would make any rounding look like 100%. */
    const double floor_ = fmax(1e-3 * big, FLT_MIN), tiny = min_normal(adt);
    for (int64_t i = 0; i < n; i++) {
        const float x = a[i], r = s[i];
        if (isfinite(x) && isfinite(r)) {
            const double d = fabs((double)x - (double)r), rel = d / fmax(fabs((double)r), floor_);
            st->finite++;
            st->sum_rel += rel;
            if (rel > st->max_rel)
                st->max_rel = rel;
            st->sum_sq_diff += d * d;
            st->sum_sq_ref += (double)r * r;
        }
        if (x == 0 && r != 0 && fabsf(r) >= FLT_MIN)
            st->flushed++;
        if (x != 0 && fabsf(x) < tiny)
            st->subnormal++;
        if (isinf(x) && isfinite(r))
            st->overflow++;
    }
    st->values += n;
    st->dtype = adt;
}

static amp_status compare(site *s, amp_tensor *const *t, int n_t)
{
    s->st.calls++;
    if (s->next >= s->n_refs) {
        s->st.unmatched++;
        return AMP_OK;
    }
    const ref_call *r = &s->refs[s->next++];
    bool matched = r->n_t == n_t;
    for (int i = 0; matched && i < n_t; i++) {
        bool have = is_float(t[i]);
        if (have != (r->v[i] != NULL) || (have && amp_tensor_numel(t[i]) != r->numel[i]))
            matched = false;
    }
    if (!matched) {
        s->st.unmatched++;
        return AMP_OK;
    }
    for (int i = 0; i < n_t; i++) {
        if (!r->v[i])
            continue;
        float *v = widen(t[i]);
        if (!v)
            return amp_last_status();
        compare_values(v, r->v[i], r->numel[i], amp_tensor_dtype(t[i]), &s->st);
        free(v);
    }
    return AMP_OK;
}

static amp_status observe(void *ctx, const node *n, bool backward, amp_tensor *const *t, int n_t)
{
    amp_audit *a = ctx;
    if (!n->name || strcmp(n->name, "to") == 0 || (!backward && autograd_in_backward()))
        return AMP_OK;
    site *s = site_of(a, backward, n->scope ? n->scope : "", n->name);
    if (!s)
        return AMP_ERR_MEMORY;
    return a->recording ? record(s, t, n_t) : compare(s, t, n_t);
}

static amp_status start(amp_audit *a, bool recording)
{
    if (!a) {
        amp_set_error(AMP_ERR_ARG, "audit: NULL audit");
        return AMP_ERR_ARG;
    }
    if (autograd_observer && autograd_observer_ctx != a) {
        amp_set_error(AMP_ERR_STATE, "audit: another node observer is set (one at a time)");
        return AMP_ERR_STATE;
    }
    a->recording = recording;
    a->active = true;
    for (int i = 0; i < a->n; i++)
        a->sites[i].next = 0;
    autograd_set_observer(observe, a);
    return AMP_OK;
}

amp_status amp_audit_record(amp_audit *a)
{
    amp_audit_drop_reference(a);
    return start(a, true);
}

amp_status amp_audit_compare(amp_audit *a) { return start(a, false); }

void amp_audit_stop(amp_audit *a)
{
    if (a && a->active && autograd_observer_ctx == a)
        autograd_set_observer(NULL, NULL);
    if (a)
        a->active = false;
}

int amp_audit_num_sites(const amp_audit *a) { return a ? a->n : 0; }

const amp_audit_site *amp_audit_site_at(const amp_audit *a, int i)
{
    return a && i >= 0 && i < a->n ? &a->sites[i].st : NULL;
}

amp_status amp_audit_compare_tensors(const amp_tensor *audited, const amp_tensor *reference, amp_audit_site *into)
{
    if (!is_float(audited) || !is_float(reference) || !into) {
        amp_set_error(AMP_ERR_ARG, "audit_compare_tensors: needs two float tensors and a site");
        return AMP_ERR_ARG;
    }
    if (amp_tensor_numel(audited) != amp_tensor_numel(reference)) {
        amp_set_error(AMP_ERR_SHAPE, "audit_compare_tensors: %lld values against %lld",
                      (long long)amp_tensor_numel(audited), (long long)amp_tensor_numel(reference));
        return AMP_ERR_SHAPE;
    }
    float *a = widen(audited), *s = a ? widen(reference) : NULL;
    if (s) {
        into->calls++;
        compare_values(a, s, amp_tensor_numel(audited), amp_tensor_dtype(audited), into);
    }
    free(a);
    free(s);
    return s ? AMP_OK : amp_last_status();
}
