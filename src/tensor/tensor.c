/*
 * tensor.c - tensor creation, reference counting, accessors, the per-thread
 * pool of op results, and copies to and from user memory.
 *
 * Storage comes from the backend of the tensor's device (backend_of: the
 * CPU's caching allocator, the CUDA backend's), and what touches element
 * data (zeros, convert, fill, copies, get) goes through that backend's
 * memory primitives, one code path for every device. Host code reads
 * element data directly only on the CPU; other devices' data is staged
 * through a host copy.
 *
 * Tensor sits below autograd: a tensor's grad_fn is released through the
 * function the autograd layer installs (tensor_set_grad_fn_release), never
 * by a call up.
 */
#include "tensor/tensor.h"
#include "backend/backend.h"
#include "base/base.h"
#include "base/parallel.h"
#include "record/mem_ledger.h"
#include "dtype/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------ shapes */

int64_t shape_numel(amp_shape s)
{
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++)
        n *= s.d[i];
    return n;
}

bool shape_equal(amp_shape a, amp_shape b)
{
    if (a.ndim != b.ndim)
        return false;
    for (int i = 0; i < a.ndim; i++)
        if (a.d[i] != b.d[i])
            return false;
    return true;
}

int shape_dim(int ndim, int dim)
{
    if (dim < 0)
        dim += ndim;
    return (dim < 0 || dim >= ndim) ? -1 : dim;
}

const char *amp_shape_str(amp_shape s, char *buf, size_t n)
{
    size_t k = 0;
    if (n == 0)
        return buf;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < s.ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)s.d[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}

static amp_status check_shape(amp_shape s, const char *fn)
{
    if (s.ndim < 0 || s.ndim > AMP_MAX_DIMS)
        return amp_set_error(AMP_ERR_SHAPE, "%s: %d dims (at most %d)", fn, s.ndim, AMP_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++) {
        if (s.d[i] < 0)
            return amp_set_error(AMP_ERR_SHAPE, "%s: dim %d has negative size %lld", fn, i,
                                 (long long)s.d[i]);
        if (s.d[i] > 0 && n > INT64_MAX / 16 / s.d[i])
            return amp_set_error(AMP_ERR_SHAPE, "%s: shape too large", fn);
        n *= s.d[i];
    }
    return AMP_OK;
}

/* ------------------------------------------------------- construction */

amp_tensor *tensor_new(amp_shape shape, amp_dtype dt) { return tensor_new_on(shape, dt, AMP_CPU); }

amp_tensor *tensor_zeros(amp_shape shape, amp_dtype dt) { return tensor_zeros_on(shape, dt, AMP_CPU); }

amp_tensor *tensor_new_on(amp_shape shape, amp_dtype dt, amp_device dev)
{
    if (backend_check(dev, "tensor") != AMP_OK)
        return NULL;
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_fail_null(AMP_ERR_DTYPE, "tensor: invalid dtype %d", (int)dt);
    if (check_shape(shape, "tensor") != AMP_OK)
        return NULL;
    const amp_backend *be = backend_of(dev);
    amp_tensor *t = calloc(1, sizeof *t);
    amp_storage *s = calloc(1, sizeof *s);
    int64_t numel = shape_numel(shape);
    size_t nbytes = (size_t)numel * amp_dtype_size(dt);
    /* The block takes the thread's tensor category (workspace is for what
     * a backend allocates itself). */
    const amp_mem_category cat = mem_tensor_category();
    const amp_mem_category prev = mem_alloc_category_set(cat);
    void *data = t && s ? be->alloc(nbytes) : NULL;
    mem_alloc_category_set(prev);
    if (!t || !s || !data) {
        free(t);
        free(s);
        if (data)
            be->free(data);
        char why[256] = "";
        if (t && s) /* the allocator said why */
            snprintf(why, sizeof why, " (%s)", amp_last_error());
        return amp_fail_null(AMP_ERR_MEMORY, "tensor: out of memory for %lld elements on %s%s", (long long)numel,
                             amp_device_name(dev), why);
    }
    s->data = data;
    s->nbytes = nbytes;
    s->refcount = 1;
    s->device = dev;
    s->category = cat;
    t->shape = shape;
    t->numel = numel;
    t->dtype = dt;
    t->storage = s;
    t->refcount = 1;
    return t;
}

amp_tensor *tensor_zeros_on(amp_shape shape, amp_dtype dt, amp_device dev)
{
    amp_tensor *t = tensor_new_on(shape, dt, dev);
    const uint64_t zero = 0;
    if (t && backend_of(dev)->fill(tensor_ptr(t), t->numel, &zero, amp_dtype_size(dt)) != AMP_OK) {
        amp_tensor_free(t);
        return NULL;
    }
    return t;
}

amp_tensor *tensor_view(const amp_tensor *src, amp_shape shape)
{
    amp_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return amp_fail_null(AMP_ERR_MEMORY, "tensor: out of memory");
    t->shape = shape;
    t->numel = shape_numel(shape);
    t->dtype = src->dtype;
    t->storage = src->storage;
    t->storage->refcount++;
    t->offset = src->offset;
    t->refcount = 1;
    return t;
}

amp_tensor *tensor_convert(const amp_tensor *src, amp_dtype dt)
{
    const amp_device dev = tensor_device(src);
    amp_tensor *t = tensor_new_on(src->shape, dt, dev);
    if (t && backend_of(dev)->convert(tensor_ptr(src), src->dtype, tensor_ptr(t), dt, src->numel) != AMP_OK) {
        amp_tensor_free(t);
        return NULL;
    }
    return t;
}

void tensor_store_f32(amp_tensor *t, const float *src)
{
    amp_convert(src, AMP_F32, tensor_ptr(t), t->dtype, (size_t)t->numel);
}

amp_tensor *amp_empty(amp_shape shape, amp_dtype dt) { return tensor_new(shape, dt); }
amp_tensor *amp_zeros(amp_shape shape, amp_dtype dt) { return tensor_zeros(shape, dt); }
amp_tensor *amp_ones(amp_shape shape, amp_dtype dt) { return amp_full(shape, dt, 1.0); }

amp_tensor *amp_full(amp_shape shape, amp_dtype dt, double value)
{
    amp_tensor *t = tensor_new(shape, dt);
    if (t)
        amp_tensor_fill(t, value);
    return t;
}

/* The fill value as one element of dt: f32 through (float), integers
 * saturated (NaN as 0), 16-bit floats rounded from the f32. */
static void fill_element(amp_dtype dt, double value, void *elem)
{
    float vf = (float)value;
    int64_t iv = isnan(value) ? 0 : (int64_t)fmax(fmin(value, 9.2e18), -9.2e18);
    int32_t i32 = (int32_t)iv;
    uint16_t h = dt == AMP_F16 ? amp_f32_to_f16(vf) : amp_f32_to_bf16(vf);
    switch (dt) {
    case AMP_F32: memcpy(elem, &vf, 4); break;
    case AMP_I32: memcpy(elem, &i32, 4); break;
    case AMP_I64: memcpy(elem, &iv, 8); break;
    default: memcpy(elem, &h, 2); break;
    }
}

amp_status amp_tensor_fill(amp_tensor *t, double value)
{
    if (!t)
        return amp_set_error(AMP_ERR_ARG, "fill: NULL tensor");
    tensor_bump(t);
    unsigned char elem[8];
    fill_element(t->dtype, value, elem);
    return backend_of(tensor_device(t))->fill(tensor_ptr(t), t->numel, elem, amp_dtype_size(t->dtype));
}

amp_tensor *amp_arange(double start, double end, double step, amp_dtype dt)
{
    if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step) ||
        (end - start) / step < 0)
        return amp_fail_null(AMP_ERR_ARG, "arange: bad range start=%g end=%g step=%g", start, end,
                             step);
    int64_t n = (int64_t)ceil((end - start) / step);
    amp_tensor *t = tensor_new(AMP_SHAPE(n), dt);
    if (!t)
        return NULL;
    double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!v) {
        amp_tensor_free(t);
        return amp_fail_null(AMP_ERR_MEMORY, "arange: out of memory");
    }
    for (int64_t i = 0; i < n; i++)
        v[i] = start + (double)i * step;
    for (int64_t i = 0; i < n; i++) {
        if (dt == AMP_I32 || dt == AMP_I64) {
            int64_t iv = (int64_t)v[i];
            amp_convert(&iv, AMP_I64, (char *)tensor_ptr(t) + (size_t)i * amp_dtype_size(dt), dt, 1);
        } else {
            float f = (float)v[i];
            amp_convert(&f, AMP_F32, (char *)tensor_ptr(t) + (size_t)i * amp_dtype_size(dt), dt, 1);
        }
    }
    free(v);
    return t;
}

amp_tensor *amp_from_data(amp_shape shape, amp_dtype dt, const void *data)
{
    if (!data)
        return amp_fail_null(AMP_ERR_ARG, "from_data: NULL data");
    amp_tensor *t = tensor_new(shape, dt);
    if (t)
        memcpy(tensor_ptr(t), data, t->storage->nbytes);
    return t;
}

/* Box-Muller on Philox words: each counter gives four uniforms, two pairs.
 * Block k of four values comes from counter ctr + k alone, so the blocks
 * are filled in parallel with the same values on any number of threads
 * (a model's initialisation: 11M values of the width-384 gpt took 0.3 s
 * on one core). */
typedef struct {
    uint64_t seed, ctr, numel;
    double a, b;
    bool normal;
    float *v;
} random_job;

static void random_blocks(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const random_job *j = ctx;
    for (uint64_t k = (uint64_t)lo; k < (uint64_t)hi; k++) {
        uint32_t r[4];
        amp_philox(j->seed, 0, j->ctr + k, r);
        float x[4];
        if (j->normal) {
            for (int i = 0; i < 4; i += 2) {
                double u1 = ((double)(r[i] >> 8) + 1.0) / 16777217.0; /* (0, 1] */
                double u2 = (double)(r[i + 1] >> 8) / 16777216.0;
                double rad = sqrt(-2.0 * log(u1));
                x[i] = (float)(j->a + j->b * rad * cos(2.0 * M_PI * u2));
                x[i + 1] = (float)(j->a + j->b * rad * sin(2.0 * M_PI * u2));
            }
        } else {
            for (int i = 0; i < 4; i++)
                x[i] = (float)(j->a + (j->b - j->a) * amp_u32_to_unit(r[i]));
        }
        for (int i = 0; i < 4 && k * 4 + (uint64_t)i < j->numel; i++)
            j->v[k * 4 + (uint64_t)i] = x[i];
    }
}

static amp_tensor *random_tensor(amp_shape shape, amp_dtype dt, double a, double b, bool normal)
{
    if (!amp_dtype_is_float(dt))
        return amp_fail_null(AMP_ERR_DTYPE, "%s: dtype %s is not a float type",
                             normal ? "randn" : "rand", amp_dtype_name(dt));
    amp_tensor *t = tensor_new(shape, dt);
    if (!t)
        return NULL;
    float *v = amp_alloc((size_t)t->numel * sizeof(float));
    if (!v) {
        amp_tensor_free(t);
        return NULL;
    }
    const uint64_t blocks = ((uint64_t)t->numel + 3) / 4;
    random_job j = {.numel = (uint64_t)t->numel, .a = a, .b = b, .normal = normal, .v = v};
    j.ctr = amp_rng_reserve(blocks, &j.seed);
    amp_parallel_for((int64_t)blocks, 4096, random_blocks, &j);
    tensor_store_f32(t, v);
    amp_free(v);
    return t;
}

amp_tensor *amp_randn(amp_shape shape, amp_dtype dt, double mean, double std)
{
    return random_tensor(shape, dt, mean, std, true);
}

amp_tensor *amp_rand(amp_shape shape, amp_dtype dt, double low, double high)
{
    if (!(high >= low))
        return amp_fail_null(AMP_ERR_ARG, "rand: low %g > high %g", low, high);
    return random_tensor(shape, dt, low, high, false);
}

amp_tensor *amp_clone(const amp_tensor *src)
{
    if (!src)
        return NULL;
    return tensor_convert(src, src->dtype);
}

/* --------------------------------------------------- reference counting */

amp_tensor *amp_tensor_retain(amp_tensor *t)
{
    if (t)
        t->refcount++;
    return t;
}

/* Installed by the autograd layer before it makes the first node. */
static void (*grad_fn_release)(struct node *n);

void tensor_set_grad_fn_release(void (*release)(struct node *n)) { grad_fn_release = release; }

void amp_tensor_free(amp_tensor *t)
{
    if (!t || --t->refcount > 0)
        return;
    if (--t->storage->refcount == 0) {
        backend_of(t->storage->device)->free(t->storage->data);
        amp_tensor_free(t->storage->kept_cast);
        free(t->storage);
    }
    amp_tensor_free(t->grad);
    if (t->grad_fn && grad_fn_release)
        grad_fn_release(t->grad_fn);
    free(t);
}

/* ---------------------------------------------------------------- pool */

static _Thread_local amp_tensor **pool;
static _Thread_local size_t pool_len, pool_cap;

amp_tensor *pool_add(amp_tensor *t)
{
    if (!t)
        return NULL;
    if (pool_len == pool_cap) {
        size_t cap = pool_cap ? pool_cap * 2 : 256;
        amp_tensor **p = realloc(pool, cap * sizeof *p);
        if (!p) {
            amp_tensor_free(t);
            return amp_fail_null(AMP_ERR_MEMORY, "out of memory growing the tensor pool");
        }
        pool = p;
        pool_cap = cap;
    }
    pool[pool_len++] = t;
    return t;
}

void amp_temps_free(void)
{
    /* Newest first: results go before the inputs their graph holds. */
    while (pool_len > 0)
        amp_tensor_free(pool[--pool_len]);
    free(pool);
    pool = NULL;
    pool_cap = 0;
}

void pool_release_to(size_t mark)
{
    while (pool_len > mark)
        amp_tensor_free(pool[--pool_len]);
}

size_t amp_temps_count(void) { return pool_len; }

/* ------------------------------------------------------------ accessors */

amp_dtype amp_tensor_dtype(const amp_tensor *t) { return t ? t->dtype : AMP_DTYPE_COUNT; }
amp_device amp_tensor_device(const amp_tensor *t) { return t ? t->storage->device : AMP_DEVICE_COUNT; }
int amp_tensor_ndim(const amp_tensor *t) { return t ? t->shape.ndim : -1; }
amp_shape amp_tensor_shape(const amp_tensor *t) { return t ? t->shape : (amp_shape){0, {0}}; }
int64_t amp_tensor_numel(const amp_tensor *t) { return t ? t->numel : 0; }
/* The caller may write through the pointer: count it as a write. */
void *amp_tensor_data(amp_tensor *t)
{
    if (!t)
        return NULL;
    tensor_bump(t);
    return tensor_ptr(t);
}
const void *amp_tensor_cdata(const amp_tensor *t) { return t ? tensor_ptr(t) : NULL; }

int64_t amp_tensor_dim(const amp_tensor *t, int i)
{
    if (!t)
        return -1;
    int d = shape_dim(t->shape.ndim, i);
    if (d < 0) {
        amp_set_error(AMP_ERR_ARG, "dim: index %d out of range for %d dims", i, t->shape.ndim);
        return -1;
    }
    return t->shape.d[d];
}

/* t's data in host memory: t's own buffer on the CPU, else a host copy in
 * *tmp (free with amp_free; the copy waits for the device). NULL + error. */
static const void *host_data(const amp_tensor *t, void **tmp)
{
    *tmp = NULL;
    const amp_device dev = tensor_device(t);
    if (dev == AMP_CPU)
        return tensor_ptr(t);
    size_t nb = (size_t)t->numel * amp_dtype_size(t->dtype);
    if (!(*tmp = amp_alloc(nb)))
        return NULL;
    if (backend_of(dev)->copy(*tmp, AMP_CPU, tensor_ptr(t), dev, nb) != AMP_OK) {
        amp_free(*tmp);
        *tmp = NULL;
        return NULL;
    }
    return *tmp;
}

amp_status amp_tensor_copy_out(const amp_tensor *t, void *dst, amp_dtype dt)
{
    if (!t || !dst)
        return amp_set_error(AMP_ERR_ARG, "copy_out: NULL %s", t ? "destination" : "tensor");
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_set_error(AMP_ERR_DTYPE, "copy_out: invalid dtype %d", (int)dt);
    void *tmp;
    const void *src = host_data(t, &tmp);
    if (!src)
        return amp_last_status();
    amp_convert(src, t->dtype, dst, dt, (size_t)t->numel);
    amp_free(tmp);
    return AMP_OK;
}

amp_status amp_tensor_copy_in(amp_tensor *t, const void *src, amp_dtype dt)
{
    if (!t || !src)
        return amp_set_error(AMP_ERR_ARG, "copy_in: NULL %s", t ? "source" : "tensor");
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_set_error(AMP_ERR_DTYPE, "copy_in: invalid dtype %d", (int)dt);
    tensor_bump(t);
    const amp_device dev = tensor_device(t);
    if (dev == AMP_CPU) {
        amp_convert(src, dt, tensor_ptr(t), t->dtype, (size_t)t->numel);
        return AMP_OK;
    }
    /* Converted on the host, then one copy to the device. */
    size_t nb = (size_t)t->numel * amp_dtype_size(t->dtype);
    void *tmp = amp_alloc(nb);
    if (!tmp)
        return amp_last_status();
    amp_convert(src, dt, tmp, t->dtype, (size_t)t->numel);
    amp_status st = backend_of(dev)->copy(tensor_ptr(t), dev, tmp, AMP_CPU, nb);
    amp_free(tmp);
    return st;
}

double amp_tensor_get(const amp_tensor *t, int64_t i)
{
    if (!t) {
        amp_set_error(AMP_ERR_ARG, "get: NULL tensor");
        return NAN;
    }
    if (i < 0 || i >= t->numel) {
        amp_set_error(AMP_ERR_ARG, "get: index %lld out of range for %lld elements", (long long)i,
                      (long long)t->numel);
        return NAN;
    }
    /* One element to the host (on a device, this waits for it). */
    const amp_device dev = tensor_device(t);
    const size_t es = amp_dtype_size(t->dtype);
    const char *at = (const char *)tensor_ptr(t) + (size_t)i * es;
    unsigned char elem[8];
    if (backend_of(dev)->copy(elem, AMP_CPU, at, dev, es) != AMP_OK)
        return NAN;
    if (t->dtype == AMP_I64) {
        int64_t v;
        memcpy(&v, elem, 8);
        return (double)v;
    }
    return (double)load_f32(elem, t->dtype, 0);
}

double amp_item(const amp_tensor *t)
{
    if (t && t->numel != 1) {
        char b[96];
        amp_set_error(AMP_ERR_SHAPE, "item: tensor of shape %s has %lld elements, not 1",
                      amp_shape_str(t->shape, b, sizeof b), (long long)t->numel);
        return NAN;
    }
    return amp_tensor_get(t, 0);
}

/* The category a storage's block is counted in: its own, but activations
 * for temporaries that a graph node keeps. */
static amp_mem_category counted_as(const amp_storage *s)
{
    return s->category == AMP_MEM_TEMPORARIES && s->graph_holds > 0 ? AMP_MEM_ACTIVATIONS
                                                                     : (amp_mem_category)s->category;
}

/* Sets s's category and holds, and retags its block when the category it
 * is counted in moved. */
static void recount(amp_storage *s, int category, int holds)
{
    amp_mem_category before = counted_as(s);
    s->category = category;
    s->graph_holds = holds;
    amp_mem_category after = counted_as(s);
    const amp_backend *be = backend_of(s->device);
    if (after != before && be->mem_retag)
        be->mem_retag(s->data, after);
}

void tensor_set_category(amp_tensor *t, amp_mem_category c)
{
    if (!t || c < 0 || c >= AMP_MEM_CATEGORY_COUNT)
        return;
    recount(t->storage, c, t->storage->graph_holds);
}

void tensor_graph_hold(amp_tensor *t)
{
    if (t)
        recount(t->storage, t->storage->category, t->storage->graph_holds + 1);
}

void tensor_graph_release(amp_tensor *t)
{
    /* A storage swapped under a held tensor (amp_tensor_move) was never
     * held itself: nothing to let go. */
    if (t && t->storage->graph_holds > 0)
        recount(t->storage, t->storage->category, t->storage->graph_holds - 1);
}
