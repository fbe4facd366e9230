/*
 * tensor.c - tensor creation, reference counting, accessors, the per-thread
 * pool of op results, and copies to and from user memory.
 *
 * A CUDA tensor's storage comes from the CUDA backend's caching allocator;
 * the few functions here that touch element data (convert, fill, copies,
 * get) take a device branch through src/backend/cuda/cuda_backend.h, and
 * every CPU path is as it was.
 */
#include "tensor/tensor.h"
#include "autograd/graph.h"
#include "backend/cuda/cuda_backend.h"
#include "base/base.h"
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

amp_tensor *tensor_new(amp_shape shape, amp_dtype dt)
{
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_fail_null(AMP_ERR_DTYPE, "tensor: invalid dtype %d", (int)dt);
    if (check_shape(shape, "tensor") != AMP_OK)
        return NULL;
    amp_tensor *t = calloc(1, sizeof *t);
    amp_storage *s = calloc(1, sizeof *s);
    int64_t numel = shape_numel(shape);
    void *data = amp_alloc((size_t)numel * amp_dtype_size(dt));
    if (!t || !s || !data) {
        free(t);
        free(s);
        amp_free(data);
        return amp_fail_null(AMP_ERR_MEMORY, "tensor: out of memory for %lld elements",
                             (long long)numel);
    }
    s->data = data;
    s->nbytes = (size_t)numel * amp_dtype_size(dt);
    s->refcount = 1;
    s->device = AMP_CPU;
    t->shape = shape;
    t->numel = numel;
    t->dtype = dt;
    t->storage = s;
    t->refcount = 1;
    return t;
}

amp_tensor *tensor_zeros(amp_shape shape, amp_dtype dt)
{
    amp_tensor *t = tensor_new(shape, dt);
    if (t)
        memset(tensor_ptr(t), 0, t->storage->nbytes);
    return t;
}

amp_tensor *tensor_new_on(amp_shape shape, amp_dtype dt, amp_device dev)
{
    if (dev == AMP_CPU)
        return tensor_new(shape, dt);
    if (dev != AMP_CUDA)
        return amp_fail_null(AMP_ERR_DEVICE, "tensor: invalid device %d", (int)dev);
    if (cuda_device_count() < 1)
        return amp_fail_null(AMP_ERR_DEVICE, "tensor: cuda is not available (%s)", cuda_unavailable_reason());
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_fail_null(AMP_ERR_DTYPE, "tensor: invalid dtype %d", (int)dt);
    if (check_shape(shape, "tensor") != AMP_OK)
        return NULL;
    amp_tensor *t = calloc(1, sizeof *t);
    amp_storage *s = calloc(1, sizeof *s);
    int64_t numel = shape_numel(shape);
    void *data = t && s ? cuda_malloc((size_t)numel * amp_dtype_size(dt)) : NULL;
    if (!t || !s || !data) {
        free(t);
        free(s);
        return data || amp_last_status() == AMP_OK
                   ? amp_fail_null(AMP_ERR_MEMORY, "tensor: out of memory for %lld elements", (long long)numel)
                   : NULL; /* the device allocator said why */
    }
    s->data = data;
    s->nbytes = (size_t)numel * amp_dtype_size(dt);
    s->refcount = 1;
    s->device = AMP_CUDA;
    t->shape = shape;
    t->numel = numel;
    t->dtype = dt;
    t->storage = s;
    t->refcount = 1;
    return t;
}

amp_tensor *tensor_zeros_on(amp_shape shape, amp_dtype dt, amp_device dev)
{
    if (dev == AMP_CPU)
        return tensor_zeros(shape, dt);
    amp_tensor *t = tensor_new_on(shape, dt, dev);
    const uint64_t zero = 0;
    if (t && cuda_fill_pattern(tensor_ptr(t), t->numel, &zero, amp_dtype_size(dt)) != AMP_OK) {
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
    if (tensor_on_cuda(src)) {
        amp_tensor *t = tensor_new_on(src->shape, dt, AMP_CUDA);
        if (t && cuda_convert(tensor_ptr(src), src->dtype, tensor_ptr(t), dt, src->numel) != AMP_OK) {
            amp_tensor_free(t);
            return NULL;
        }
        return t;
    }
    amp_tensor *t = tensor_new(src->shape, dt);
    if (t)
        amp_convert(tensor_ptr(src), src->dtype, tensor_ptr(t), dt, (size_t)src->numel);
    return t;
}

const float *tensor_as_f32(const amp_tensor *t, float **tmp)
{
    *tmp = NULL;
    if (tensor_on_cuda(t))
        return amp_fail_null(AMP_ERR_DEVICE,
                             "a CUDA tensor reached a CPU-only code path (it has no CUDA implementation yet; "
                             "move the tensor to the CPU with amp_to_device)");
    if (t->dtype == AMP_F32)
        return tensor_f32(t);
    *tmp = amp_alloc((size_t)t->numel * sizeof(float));
    if (*tmp)
        amp_convert(tensor_ptr(t), t->dtype, *tmp, AMP_F32, (size_t)t->numel);
    return *tmp;
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

/* The fill value as one element of dt (CPU fill's conversions), for the
 * device fill. */
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
    if (tensor_on_cuda(t)) {
        unsigned char elem[8];
        fill_element(t->dtype, value, elem);
        return cuda_fill_pattern(tensor_ptr(t), t->numel, elem, amp_dtype_size(t->dtype));
    }
    float vf = (float)value;
    switch (t->dtype) {
    case AMP_F32:
        for (int64_t i = 0; i < t->numel; i++)
            tensor_f32(t)[i] = vf;
        break;
    case AMP_I32:
    case AMP_I64: {
        int64_t iv = isnan(value) ? 0 : (int64_t)fmax(fmin(value, 9.2e18), -9.2e18);
        for (int64_t i = 0; i < t->numel; i++) {
            if (t->dtype == AMP_I32)
                ((int32_t *)tensor_ptr(t))[i] = (int32_t)iv;
            else
                ((int64_t *)tensor_ptr(t))[i] = iv;
        }
        break;
    }
    default: {
        uint16_t h = t->dtype == AMP_F16 ? amp_f32_to_f16(vf) : amp_f32_to_bf16(vf);
        for (int64_t i = 0; i < t->numel; i++)
            ((uint16_t *)tensor_ptr(t))[i] = h;
    }
    }
    return AMP_OK;
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

/* Box-Muller on Philox words: each counter gives four uniforms, two pairs. */
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
    uint64_t seed, blocks = ((uint64_t)t->numel + 3) / 4;
    uint64_t ctr = amp_rng_reserve(blocks, &seed);
    for (uint64_t k = 0; k < blocks; k++) {
        uint32_t r[4];
        amp_philox(seed, 0, ctr + k, r);
        float x[4];
        if (normal) {
            for (int j = 0; j < 4; j += 2) {
                double u1 = ((double)(r[j] >> 8) + 1.0) / 16777217.0; /* (0, 1] */
                double u2 = (double)(r[j + 1] >> 8) / 16777216.0;
                double rad = sqrt(-2.0 * log(u1));
                x[j] = (float)(a + b * rad * cos(2.0 * M_PI * u2));
                x[j + 1] = (float)(a + b * rad * sin(2.0 * M_PI * u2));
            }
        } else {
            for (int j = 0; j < 4; j++)
                x[j] = (float)(a + (b - a) * amp_u32_to_unit(r[j]));
        }
        for (int j = 0; j < 4 && k * 4 + (uint64_t)j < (uint64_t)t->numel; j++)
            v[k * 4 + (uint64_t)j] = x[j];
    }
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

void amp_tensor_free(amp_tensor *t)
{
    if (!t || --t->refcount > 0)
        return;
    if (--t->storage->refcount == 0) {
        if (t->storage->device == AMP_CUDA)
            cuda_free(t->storage->data);
        else
            amp_free(t->storage->data);
        free(t->storage);
    }
    amp_tensor_free(t->grad);
    node_release(t->grad_fn);
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

amp_status amp_tensor_copy_out(const amp_tensor *t, void *dst, amp_dtype dt)
{
    if (!t || !dst)
        return amp_set_error(AMP_ERR_ARG, "copy_out: NULL %s", t ? "destination" : "tensor");
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_set_error(AMP_ERR_DTYPE, "copy_out: invalid dtype %d", (int)dt);
    if (tensor_on_cuda(t)) {
        /* Device to host in the tensor's dtype (this waits for the GPU), then
         * the CPU's conversion. */
        size_t nb = (size_t)t->numel * amp_dtype_size(t->dtype);
        void *tmp = amp_alloc(nb);
        amp_status st = tmp ? cuda_copy(tmp, AMP_CPU, tensor_ptr(t), AMP_CUDA, nb) : AMP_ERR_MEMORY;
        if (st == AMP_OK)
            amp_convert(tmp, t->dtype, dst, dt, (size_t)t->numel);
        amp_free(tmp);
        return st;
    }
    amp_convert(tensor_ptr(t), t->dtype, dst, dt, (size_t)t->numel);
    return AMP_OK;
}

amp_status amp_tensor_copy_in(amp_tensor *t, const void *src, amp_dtype dt)
{
    if (!t || !src)
        return amp_set_error(AMP_ERR_ARG, "copy_in: NULL %s", t ? "source" : "tensor");
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_set_error(AMP_ERR_DTYPE, "copy_in: invalid dtype %d", (int)dt);
    tensor_bump(t);
    if (tensor_on_cuda(t)) {
        size_t nb = (size_t)t->numel * amp_dtype_size(t->dtype);
        void *tmp = amp_alloc(nb);
        if (!tmp)
            return AMP_ERR_MEMORY;
        amp_convert(src, dt, tmp, t->dtype, (size_t)t->numel);
        amp_status st = cuda_copy(tensor_ptr(t), AMP_CUDA, tmp, AMP_CPU, nb);
        amp_free(tmp);
        return st;
    }
    amp_convert(src, dt, tensor_ptr(t), t->dtype, (size_t)t->numel);
    return AMP_OK;
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
    if (tensor_on_cuda(t)) {
        /* One element to the host (this waits for the GPU). */
        size_t es = amp_dtype_size(t->dtype);
        unsigned char elem[8];
        if (cuda_copy(elem, AMP_CPU, (const char *)tensor_ptr(t) + (size_t)i * es, AMP_CUDA, es) != AMP_OK)
            return NAN;
        if (t->dtype == AMP_I64) {
            int64_t v;
            memcpy(&v, elem, 8);
            return (double)v;
        }
        return (double)load_f32(elem, t->dtype, 0);
    }
    if (t->dtype == AMP_I64)
        return (double)((const int64_t *)tensor_ptr(t))[i];
    return (double)load_f32(tensor_ptr(t), t->dtype, (size_t)i);
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
