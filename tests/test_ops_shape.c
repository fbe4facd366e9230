/*
 * test_ops_shape.c - reshape (a view), permute / transpose, cat and to:
 * values against index arithmetic done here, finite-difference gradients,
 * dtypes of results and gradients, and the errors.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- reshape */

static void test_reshape_shares_storage(void)
{
    amp_tensor *a = amp_arange(0, 6, 1, AMP_F32);
    amp_tensor *v = amp_reshape(a, AMP_SHAPE(2, 3));
    CHECK(v != NULL);
    CHECK(amp_tensor_data(v) == amp_tensor_data(a));
    ((float *)amp_tensor_data(v))[4] = 42; /* written through the view */
    CHECK_NEAR(amp_tensor_get(a, 4), 42, 0);
    ((float *)amp_tensor_data(a))[1] = -7; /* and read back through it */
    CHECK_NEAR(amp_tensor_get(v, 1), -7, 0);
    CHECK_EQ_INT(amp_tensor_dim(v, 0), 2);
    CHECK_EQ_INT(amp_tensor_dim(v, 1), 3);
    amp_tensor_free(a);
    /* The view keeps the storage alive after the original is gone. */
    CHECK_NEAR(amp_tensor_get(v, 4), 42, 0);
}

static void test_reshape_infers_minus_one(void)
{
    amp_tensor *a = amp_zeros(AMP_SHAPE(2, 3, 4), AMP_BF16);
    amp_tensor *v = amp_reshape(a, AMP_SHAPE(-1, 4));
    CHECK(v != NULL);
    CHECK_EQ_INT(amp_tensor_ndim(v), 2);
    CHECK_EQ_INT(amp_tensor_dim(v, 0), 6);
    CHECK_EQ_INT(amp_tensor_dtype(v), AMP_BF16);
    amp_tensor *s = amp_reshape(amp_reshape(a, AMP_SHAPE(24)), AMP_SHAPE(2, -1, 3));
    CHECK(s != NULL);
    CHECK_EQ_INT(amp_tensor_dim(s, 1), 4);
    amp_tensor_free(a);
}

/* A shape of AMP_MAX_DIMS (8) dims, and back. */
static void test_reshape_to_eight_dims(void)
{
    amp_tensor *a = amp_arange(0, 24, 1, AMP_F32);
    amp_tensor *v = amp_reshape(a, AMP_SHAPE(1, 2, 1, 3, 1, 2, 2, -1));
    CHECK(v != NULL && amp_tensor_ndim(v) == 8 && amp_tensor_dim(v, 7) == 1);
    amp_tensor *back = amp_reshape(v, AMP_SHAPE(24));
    for (int i = 0; back && i < 24; i++)
        CHECK(amp_tensor_get(back, i) == i);
    amp_tensor_free(a);
}

static void test_reshape_errors(void)
{
    amp_tensor *a = amp_zeros(AMP_SHAPE(2, 3), AMP_F32);
    CHECK(amp_reshape(a, AMP_SHAPE(4, -1)) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "cannot view shape [2, 3] (6 elements) as [4, -1]");
    CHECK(amp_reshape(a, AMP_SHAPE(5)) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "as [5]: the element counts do not match");
    CHECK(amp_reshape(a, AMP_SHAPE(-1, -1)) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "only one dim can be -1");
    CHECK(amp_reshape(a, AMP_SHAPE(-2, -3)) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "sizes must be >= 0 or -1");
    amp_tensor *e = amp_zeros(AMP_SHAPE(0, 3), AMP_F32);
    CHECK(amp_reshape(e, AMP_SHAPE(0, -1)) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "ambiguous");
    amp_tensor_free(a);
    amp_tensor_free(e);
}

static amp_tensor *reshape_fn(amp_tensor **in, void *ctx)
{
    (void)ctx;
    return amp_reshape(in[0], AMP_SHAPE(3, -1));
}

static void test_reshape_gradcheck(void)
{
    amp_tensor *in[1] = {test_uniform(AMP_SHAPE(2, 6), AMP_F32, -1, 1, 1)};
    amp_tensor_set_requires_grad(in[0], true);
    CHECK(gradcheck("reshape", reshape_fn, in, 1, NULL, 1e-2, 1e-3, 1e-3));
    amp_tensor_free(in[0]);
}

/* The gradient of a reshape is the seed reshaped back, in the input's
 * shape. */
static void test_reshape_backward_shape(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 3, 2), AMP_F32, -1, 1, 3);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor *y = amp_reshape(x, AMP_SHAPE(4, 3));
    amp_tensor *g = amp_arange(0, 12, 1, AMP_F32);
    amp_tensor *g2 = amp_reshape(g, AMP_SHAPE(4, 3));
    CHECK_OK(amp_backward_with(y, g2));
    amp_tensor *gx = amp_tensor_grad(x);
    CHECK(gx != NULL);
    CHECK_EQ_INT(amp_tensor_ndim(gx), 3);
    CHECK_EQ_INT(amp_tensor_dim(gx, 2), 2);
    for (int i = 0; gx && i < 12; i++)
        CHECK_NEAR(amp_tensor_get(gx, i), i, 0);
    amp_tensor_free(x);
    amp_tensor_free(g);
}

/* ------------------------------------------------------------- permute */

/* permute(src) by index arithmetic, read as doubles. */
static void naive_permute(const amp_tensor *src, const int *perm, double *out)
{
    amp_shape s = amp_tensor_shape(src);
    int nd = s.ndim;
    int64_t istr[AMP_MAX_DIMS], od[AMP_MAX_DIMS], idx[AMP_MAX_DIMS] = {0};
    int64_t st = 1;
    for (int d = nd - 1; d >= 0; d--) {
        istr[d] = st;
        st *= s.d[d];
    }
    for (int k = 0; k < nd; k++)
        od[k] = s.d[perm[k]];
    for (int64_t o = 0; o < st; o++) {
        int64_t off = 0;
        for (int k = 0; k < nd; k++)
            off += idx[k] * istr[perm[k]];
        out[o] = amp_tensor_get(src, off);
        for (int k = nd - 1; k >= 0; k--) {
            if (++idx[k] < od[k])
                break;
            idx[k] = 0;
        }
    }
}

static int check_permute(amp_tensor *x, const int *perm)
{
    amp_tensor *y = amp_permute(x, perm);
    CHECK(y != NULL);
    if (!y)
        return 1;
    int nd = amp_tensor_ndim(x), bad = 0;
    CHECK_EQ_INT(amp_tensor_dtype(y), amp_tensor_dtype(x));
    for (int k = 0; k < nd; k++)
        CHECK_EQ_INT(amp_tensor_dim(y, k), amp_tensor_dim(x, perm[k]));
    int64_t n = amp_tensor_numel(x);
    double *ref = malloc(sizeof(double) * (size_t)(n ? n : 1));
    naive_permute(x, perm, ref);
    for (int64_t i = 0; i < n && !bad; i++)
        if (amp_tensor_get(y, i) != ref[i]) {
            harness_fail(__FILE__, __LINE__, "permute ndim %d perm (%d %d %d %d) [%lld]: %g vs %g", nd,
                         perm[0], nd > 1 ? perm[1] : -1, nd > 2 ? perm[2] : -1, nd > 3 ? perm[3] : -1,
                         (long long)i, amp_tensor_get(y, i), ref[i]);
            bad = 1;
        }
    free(ref);
    return bad;
}

/* Every permutation of 4-D tensors with some size-1 dims (which the
 * kernel drops) and every one of a 3-D tensor, in three element sizes. */
static void test_permute_all_perms_match_index_arithmetic(void)
{
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_I64};
    const amp_shape shapes[3] = {AMP_SHAPE(2, 3, 4, 5), AMP_SHAPE(3, 1, 4, 2), AMP_SHAPE(1, 5, 1, 3)};
    for (int t = 0; t < 3; t++)
        for (int si = 0; si < 3; si++) {
            amp_tensor *x = test_uniform(shapes[si], dts[t], -100, 100, 7);
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++)
                    for (int c = 0; c < 4; c++) {
                        int d = 6 - a - b - c;
                        if (a == b || a == c || b == c || d < 0 || d > 3 || d == a || d == b || d == c)
                            continue;
                        int perm[4] = {a, b, c, d};
                        check_permute(x, perm);
                    }
            amp_tensor_free(x);
            amp_temps_free();
        }
    amp_tensor *x3 = test_uniform(AMP_SHAPE(3, 4, 5), AMP_F16, -10, 10, 8);
    const int p3[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int k = 0; k < 6; k++)
        check_permute(x3, p3[k]);
    amp_tensor_free(x3);
}

/* Sizes past the 32x32 tile, not multiples of it, so edge tiles run too;
 * then enough elements for the threaded path. */
static void test_permute_large_tiles(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(70, 45), AMP_F32, -1, 1, 9);
    amp_tensor *y = amp_transpose(x, 0, 1);
    CHECK(y != NULL);
    for (int i = 0; y && i < 70; i++)
        for (int j = 0; j < 45; j++)
            if (amp_tensor_get(y, j * 70 + i) != amp_tensor_get(x, i * 45 + j)) {
                harness_fail(__FILE__, __LINE__, "transpose [%d, %d]", i, j);
                i = 70;
                break;
            }
    amp_tensor_free(x);
    amp_tensor *big = test_uniform(AMP_SHAPE(3, 67, 129, 5), AMP_BF16, -1, 1, 10);
    const int p[4] = {2, 0, 3, 1}, q[4] = {0, 2, 1, 3};
    CHECK(check_permute(big, p) == 0);
    CHECK(check_permute(big, q) == 0);
    amp_tensor_free(big);
}

typedef struct {
    int perm[4];
} perm_ctx;

static amp_tensor *permute_fn(amp_tensor **in, void *ctx)
{
    const perm_ctx *c = ctx;
    /* gradcheck weights each output element differently, so a wrong
     * inverse permutation puts gradients in the wrong places. */
    return amp_permute(in[0], c->perm);
}

static void test_permute_gradcheck(void)
{
    perm_ctx c3 = {{2, 0, 1}};
    amp_tensor *in3[1] = {test_uniform(AMP_SHAPE(2, 3, 4), AMP_F32, -1, 1, 11)};
    amp_tensor_set_requires_grad(in3[0], true);
    CHECK(gradcheck("permute 3-D", permute_fn, in3, 1, &c3, 1e-2, 1e-3, 1e-3));
    perm_ctx c4 = {{1, 3, 0, 2}};
    amp_tensor *in4[1] = {test_uniform(AMP_SHAPE(2, 3, 2, 4), AMP_F32, -1, 1, 13)};
    amp_tensor_set_requires_grad(in4[0], true);
    CHECK(gradcheck("permute 4-D", permute_fn, in4, 1, &c4, 1e-2, 1e-3, 1e-3));
    amp_tensor_free(in3[0]);
    amp_tensor_free(in4[0]);
}

static void test_permute_backward_keeps_dtype(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(3, 5), AMP_BF16, -1, 1, 15);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor *y = amp_transpose(x, 0, -1);
    amp_tensor *g = test_uniform(AMP_SHAPE(5, 3), AMP_BF16, -1, 1, 16);
    CHECK_OK(amp_backward_with(y, g));
    amp_tensor *gx = amp_tensor_grad(x);
    CHECK(gx != NULL);
    CHECK_EQ_INT(amp_tensor_dtype(gx), AMP_BF16);
    for (int i = 0; gx && i < 3; i++)
        for (int j = 0; j < 5; j++)
            CHECK_NEAR(amp_tensor_get(gx, i * 5 + j), amp_tensor_get(g, j * 3 + i), 0);
    amp_tensor_free(x);
    amp_tensor_free(g);
}

static void test_permute_errors(void)
{
    amp_tensor *x = amp_zeros(AMP_SHAPE(2, 3, 4), AMP_F32);
    const int dup[3] = {0, 0, 1}, out[3] = {0, 1, 3}, neg[3] = {-1, 0, 1};
    CHECK(amp_permute(x, dup) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "permute: dims (0, 0, 1) are not a permutation of 0..2");
    CHECK(amp_permute(x, out) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "(0, 1, 3) are not a permutation");
    amp_tensor *y = amp_permute(x, neg); /* -1 is the last dim, as in PyTorch */
    CHECK(y != NULL);
    CHECK_EQ_INT(amp_tensor_dim(y, 0), 4);
    CHECK(amp_permute(x, NULL) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "NULL dims");
    CHECK(amp_transpose(x, 0, 3) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "transpose: dims 0, 3 out of range");
    amp_tensor_free(x);
}

/* ----------------------------------------------------------------- cat */

/* cat by index arithmetic: element o of the output from its input. */
static double naive_cat(amp_tensor *const *ts, int n, int dim, amp_shape os, int64_t o)
{
    int64_t idx[AMP_MAX_DIMS];
    for (int k = os.ndim - 1; k >= 0; k--) {
        idx[k] = o % os.d[k];
        o /= os.d[k];
    }
    for (int i = 0; i < n; i++) {
        int64_t sz = amp_tensor_dim(ts[i], dim);
        if (idx[dim] < sz) {
            int64_t off = 0;
            for (int k = 0; k < os.ndim; k++)
                off = off * amp_tensor_dim(ts[i], k) + idx[k];
            return amp_tensor_get(ts[i], off);
        }
        idx[dim] -= sz;
    }
    return NAN;
}

static void check_cat(amp_tensor *const *ts, int n, int dim)
{
    amp_tensor *y = amp_cat(ts, n, dim);
    CHECK(y != NULL);
    if (!y)
        return;
    amp_shape os = amp_tensor_shape(y);
    for (int64_t o = 0; o < amp_tensor_numel(y); o++)
        if (amp_tensor_get(y, o) != naive_cat(ts, n, dim, os, o)) {
            harness_fail(__FILE__, __LINE__, "cat dim %d [%lld]", dim, (long long)o);
            break;
        }
}

static void test_cat_values(void)
{
    amp_tensor *a = test_uniform(AMP_SHAPE(2, 3, 4), AMP_F32, -1, 1, 20);
    amp_tensor *b = test_uniform(AMP_SHAPE(2, 1, 4), AMP_F32, -1, 1, 21);
    amp_tensor *c = test_uniform(AMP_SHAPE(2, 5, 4), AMP_F32, -1, 1, 22);
    amp_tensor *mid[3] = {a, b, c};
    check_cat(mid, 3, 1);
    amp_tensor *y = amp_cat(mid, 3, -2);
    CHECK(y && amp_tensor_dim(y, 1) == 9 && amp_tensor_dim(y, 0) == 2);
    amp_tensor *d = test_uniform(AMP_SHAPE(3, 3, 4), AMP_F32, -1, 1, 23);
    amp_tensor *first[2] = {a, d};
    check_cat(first, 2, 0);
    amp_tensor *e = test_uniform(AMP_SHAPE(2, 3, 2), AMP_F32, -1, 1, 24);
    amp_tensor *last[2] = {a, e};
    check_cat(last, 2, 2);
    amp_tensor *one[1] = {a};
    check_cat(one, 1, 0);
    amp_tensor *big[2] = {test_uniform(AMP_SHAPE(300, 64, 3), AMP_F32, -1, 1, 25),
                          test_uniform(AMP_SHAPE(300, 64, 2), AMP_F32, -1, 1, 26)};
    check_cat(big, 2, 2); /* many rows: the threaded path */
    amp_tensor *all[7] = {a, b, c, d, e, big[0], big[1]};
    for (int i = 0; i < 7; i++)
        amp_tensor_free(all[i]);
}

typedef struct {
    int dim;
} cat_ctx;

static amp_tensor *cat_fn(amp_tensor **in, void *ctx)
{
    const cat_ctx *c = ctx;
    return amp_cat(in, 3, c->dim);
}

static void test_cat_gradcheck(void)
{
    cat_ctx c0 = {0};
    amp_tensor *in0[3] = {test_uniform(AMP_SHAPE(2, 3), AMP_F32, -1, 1, 30),
                          test_uniform(AMP_SHAPE(1, 3), AMP_F32, -1, 1, 31),
                          test_uniform(AMP_SHAPE(3, 3), AMP_F32, -1, 1, 32)};
    for (int i = 0; i < 3; i++)
        amp_tensor_set_requires_grad(in0[i], true);
    CHECK(gradcheck("cat dim 0", cat_fn, in0, 3, &c0, 1e-2, 1e-3, 1e-3));
    cat_ctx c1 = {1};
    amp_tensor *in1[3] = {test_uniform(AMP_SHAPE(2, 2, 3), AMP_F32, -1, 1, 34),
                          test_uniform(AMP_SHAPE(2, 1, 3), AMP_F32, -1, 1, 35),
                          test_uniform(AMP_SHAPE(2, 3, 3), AMP_F32, -1, 1, 36)};
    amp_tensor_set_requires_grad(in1[0], true);
    amp_tensor_set_requires_grad(in1[2], true); /* in1[1] gets none */
    CHECK(gradcheck("cat dim 1", cat_fn, in1, 3, &c1, 1e-2, 1e-3, 1e-3));
    CHECK(amp_tensor_grad(in1[1]) == NULL);
    for (int i = 0; i < 3; i++) {
        amp_tensor_free(in0[i]);
        amp_tensor_free(in1[i]);
    }
}

/* PyTorch's promotion: f32 wins, f16 + bf16 -> f32, same stays; each
 * gradient comes back in its own input's dtype. */
static void test_cat_promotes_dtypes(void)
{
    const amp_dtype pairs[4][3] = {{AMP_F16, AMP_BF16, AMP_F32},
                                   {AMP_BF16, AMP_F32, AMP_F32},
                                   {AMP_F16, AMP_F16, AMP_F16},
                                   {AMP_F32, AMP_F16, AMP_F32}};
    for (int k = 0; k < 4; k++) {
        amp_tensor *ts[2] = {test_uniform(AMP_SHAPE(2, 3), pairs[k][0], -4, 4, 40 + k),
                             test_uniform(AMP_SHAPE(2, 2), pairs[k][1], -4, 4, 50 + k)};
        amp_tensor_set_requires_grad(ts[0], true);
        amp_tensor_set_requires_grad(ts[1], true);
        amp_tensor *y = amp_cat(ts, 2, 1);
        CHECK(y != NULL);
        CHECK_EQ_INT(amp_tensor_dtype(y), pairs[k][2]);
        check_cat(ts, 2, 1); /* every 16-bit value is exact in f32 */
        amp_tensor *g = test_uniform(AMP_SHAPE(2, 5), pairs[k][2], -1, 1, 60 + k);
        CHECK_OK(amp_backward_with(y, g));
        for (int i = 0; i < 2; i++) {
            amp_tensor *gi = amp_tensor_grad(ts[i]);
            CHECK(gi != NULL);
            CHECK_EQ_INT(amp_tensor_dtype(gi), pairs[k][i]);
            /* The slice of g, rounded to the input's dtype. */
            for (int r = 0; gi && r < 2; r++)
                for (int j = 0; j < amp_tensor_dim(gi, 1); j++) {
                    float gv = (float)amp_tensor_get(g, r * 5 + (i ? 3 : 0) + j);
                    amp_tensor *one = amp_from_data(AMP_SHAPE(1), AMP_F32, &gv);
                    amp_tensor *r16 = amp_clone(amp_to(one, pairs[k][i]));
                    CHECK_NEAR(amp_tensor_get(gi, r * amp_tensor_dim(gi, 1) + j), amp_tensor_get(r16, 0), 0);
                    amp_tensor_free(one);
                    amp_tensor_free(r16);
                }
        }
        amp_tensor_free(ts[0]);
        amp_tensor_free(ts[1]);
        amp_tensor_free(g);
    }
}

static void test_cat_integers(void)
{
    int64_t a[4] = {1, 2, 3, 4}, b[2] = {-5, 1LL << 40};
    amp_tensor *ts[2] = {amp_from_data(AMP_SHAPE(2, 2), AMP_I64, a),
                         amp_from_data(AMP_SHAPE(2, 1), AMP_I64, b)};
    amp_tensor *y = amp_cat(ts, 2, 1);
    CHECK(y != NULL);
    CHECK_EQ_INT(amp_tensor_dtype(y), AMP_I64);
    const int64_t want[6] = {1, 2, -5, 3, 4, 1LL << 40};
    for (int i = 0; y && i < 6; i++)
        CHECK_EQ_INT(((const int64_t *)amp_tensor_cdata(y))[i], want[i]);
    amp_tensor *i32 = amp_zeros(AMP_SHAPE(2, 1), AMP_I32);
    amp_tensor *f = amp_zeros(AMP_SHAPE(2, 1), AMP_F32);
    amp_tensor *mix1[2] = {ts[0], i32}, *mix2[2] = {ts[0], f};
    CHECK(amp_cat(mix1, 2, 1) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "tensor 1 has dtype i32 but tensor 0 has i64");
    CHECK(amp_cat(mix2, 2, 1) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "tensor 1 has dtype f32");
    amp_tensor_free(ts[0]);
    amp_tensor_free(ts[1]);
    amp_tensor_free(i32);
    amp_tensor_free(f);
}

static void test_cat_errors(void)
{
    amp_tensor *a = amp_zeros(AMP_SHAPE(2, 3), AMP_F32), *b = amp_zeros(AMP_SHAPE(2, 4), AMP_F32);
    amp_tensor *c = amp_zeros(AMP_SHAPE(3, 4), AMP_F32), *d = amp_zeros(AMP_SHAPE(6), AMP_F32);
    amp_tensor *s = amp_zeros(AMP_SHAPE(), AMP_F32);
    amp_tensor *t1[3] = {a, b, c};
    CHECK(amp_cat(t1, 3, 1) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "cat: tensor 2 has shape [3, 4] but tensor 0 has [2, 3]");
    CHECK(amp_cat(t1, 2, 0) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE,
                "tensor 1 has shape [2, 4] but tensor 0 has [2, 3] (sizes must match except in dim 0)");
    amp_tensor *t2[2] = {a, d};
    CHECK(amp_cat(t2, 2, 0) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "tensor 1 has shape [6]");
    CHECK(amp_cat(t1, 2, 2) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "dim 2 out of range for 2 dims");
    amp_tensor *t3[1] = {s};
    CHECK(amp_cat(t3, 1, 0) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "zero-dimensional");
    CHECK(amp_cat(t1, 0, 0) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "at least one");
    amp_tensor *all[5] = {a, b, c, d, s};
    for (int i = 0; i < 5; i++)
        amp_tensor_free(all[i]);
}

/* -------------------------------------------------------------- narrow */

/* narrow by index arithmetic over every dim, start and length of a
 * [3, 4, 5] tensor: element o of the result is x at idx[dim] + start. */
static void test_narrow_values(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(3, 4, 5), AMP_F32, -1, 1, 70);
    int bad = 0, runs = 0;
    for (int dim = -3; dim < 3; dim++) {
        const int d = dim < 0 ? dim + 3 : dim;
        const int64_t size = amp_tensor_dim(x, d);
        for (int64_t start = 0; start <= size; start++)
            for (int64_t len = 0; start + len <= size; len++) {
                amp_tensor *y = amp_narrow(x, dim, start, len);
                CHECK(y != NULL);
                if (!y)
                    continue;
                runs++;
                CHECK_EQ_INT(amp_tensor_dim(y, d), len);
                amp_shape ys = amp_tensor_shape(y);
                for (int64_t o = 0; o < amp_tensor_numel(y); o++) {
                    int64_t idx[3], r = o;
                    for (int k = 2; k >= 0; k--) {
                        idx[k] = r % ys.d[k];
                        r /= ys.d[k];
                    }
                    idx[d] += start;
                    if (amp_tensor_get(y, o) != amp_tensor_get(x, (idx[0] * 4 + idx[1]) * 5 + idx[2]))
                        bad++;
                }
            }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(runs, 2 * (4 * 5 / 2 + 5 * 6 / 2 + 6 * 7 / 2)); /* (size+1)(size+2)/2 per dim, twice */
    /* Integers and 16-bit dtypes are copied as they are. */
    int64_t iv[6] = {1, 2, 3, 4, 5, 1LL << 40};
    amp_tensor *xi = amp_from_data(AMP_SHAPE(2, 3), AMP_I64, iv);
    amp_tensor *yi = amp_narrow(xi, 1, 1, 2);
    const int64_t want[4] = {2, 3, 5, 1LL << 40};
    for (int i = 0; yi && i < 4; i++)
        CHECK_EQ_INT(((const int64_t *)amp_tensor_cdata(yi))[i], want[i]);
    amp_tensor *h = amp_clone(amp_to(x, AMP_BF16));
    amp_tensor *yh = amp_narrow(h, -1, 2, 3);
    CHECK(yh && amp_tensor_dtype(yh) == AMP_BF16);
    for (int64_t o = 0; yh && o < amp_tensor_numel(yh); o++)
        if (amp_tensor_get(yh, o) != amp_tensor_get(h, o / 3 * 5 + 2 + o % 3))
            bad++;
    CHECK_EQ_INT(bad, 0);
    amp_tensor_free(x);
    amp_tensor_free(xi);
    amp_tensor_free(h);
}

typedef struct {
    int dim;
    int64_t start, len;
} narrow_ctx;

static amp_tensor *narrow_fn(amp_tensor **in, void *ctx)
{
    const narrow_ctx *c = ctx;
    return amp_narrow(in[0], c->dim, c->start, c->len);
}

/* Three narrows of one tensor (the gpt's q, k, v of a fused qkv) combined
 * non-linearly: the gradients of all three meet in one input. */
static amp_tensor *qkv_fn(amp_tensor **in, void *ctx)
{
    (void)ctx;
    amp_tensor *q = amp_narrow(in[0], -1, 0, 2), *k = amp_narrow(in[0], -1, 2, 2), *v = amp_narrow(in[0], -1, 4, 2);
    return amp_mul(amp_mul(q, k), amp_tanh(v));
}

static void test_narrow_gradcheck(void)
{
    const narrow_ctx cs[4] = {{0, 1, 2}, {1, 0, 1}, {-1, 2, 2}, {2, 0, 4}};
    for (int i = 0; i < 4; i++) {
        amp_tensor *x = test_uniform(AMP_SHAPE(3, 3, 4), AMP_F32, -1, 1, 80 + (uint64_t)i);
        amp_tensor_set_requires_grad(x, true);
        char name[64];
        snprintf(name, sizeof name, "narrow dim %d [%lld, +%lld)", cs[i].dim, (long long)cs[i].start,
                 (long long)cs[i].len);
        CHECK(gradcheck(name, narrow_fn, &x, 1, (void *)&cs[i], 1e-2, 1e-3, 1e-3));
        amp_tensor_free(x);
    }
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 3, 6), AMP_F32, -1, 1, 90);
    amp_tensor_set_requires_grad(x, true);
    CHECK(gradcheck("q, k, v narrows of one tensor", qkv_fn, &x, 1, NULL, 1e-2, 1e-3, 1e-3));
    amp_tensor_free(x);
}

/* The gradient: gout in the slice, exact zeros elsewhere, in gout's dtype. */
static void test_narrow_backward_places_the_slice(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 6), AMP_BF16, -1, 1, 91);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor *y = amp_narrow(x, 1, 3, 2);
    amp_tensor *g = test_uniform(AMP_SHAPE(2, 2), AMP_BF16, -1, 1, 92);
    CHECK_OK(amp_backward_with(y, g));
    amp_tensor *gx = amp_tensor_grad(x);
    CHECK(gx != NULL && amp_tensor_dtype(gx) == AMP_BF16);
    for (int r = 0; gx && r < 2; r++)
        for (int c = 0; c < 6; c++)
            CHECK_NEAR(amp_tensor_get(gx, r * 6 + c), c == 3 || c == 4 ? amp_tensor_get(g, r * 2 + c - 3) : 0.0, 0);
    amp_tensor_free(x);
    amp_tensor_free(g);
}

static void test_narrow_errors(void)
{
    amp_tensor *x = amp_zeros(AMP_SHAPE(2, 3), AMP_F32);
    CHECK(amp_narrow(x, 2, 0, 1) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "narrow: dim 2 out of range for 2 dims");
    CHECK(amp_narrow(x, -3, 0, 1) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "dim -3 out of range");
    CHECK(amp_narrow(x, 1, 2, 2) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "elements [2, 2 + 2) are not within dim 1 of size 3");
    CHECK(amp_narrow(x, 1, -1, 1) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "elements [-1, -1 + 1) are not within dim 1");
    CHECK(amp_narrow(x, 0, 0, -1) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "not within dim 0 of size 2");
    CHECK(amp_narrow(NULL, 0, 0, 1) == NULL);
    amp_tensor *s = amp_zeros(AMP_SHAPE(), AMP_F32);
    CHECK(amp_narrow(s, 0, 0, 1) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "dim 0 out of range for 0 dims");
    amp_tensor_free(x);
    amp_tensor_free(s);
}

/* ------------------------------------------------------------------ to */

static void test_to_rounds_like_scalar_conversions(void)
{
    const float v[5] = {1.0f, 3.14159265f, -65519.0f, 1e-6f, 70000.0f};
    amp_tensor *x = amp_from_data(AMP_SHAPE(5), AMP_F32, v);
    amp_tensor *b = amp_to(x, AMP_BF16), *h = amp_to(x, AMP_F16);
    CHECK(b && h);
    CHECK_EQ_INT(amp_tensor_dtype(b), AMP_BF16);
    CHECK_EQ_INT(amp_tensor_dtype(h), AMP_F16);
    for (int i = 0; b && h && i < 5; i++) {
        CHECK_EQ_INT(((const uint16_t *)amp_tensor_cdata(b))[i], amp_f32_to_bf16(v[i]));
        CHECK_EQ_INT(((const uint16_t *)amp_tensor_cdata(h))[i], amp_f32_to_f16(v[i]));
    }
    /* f16 -> bf16 goes through f32 exactly. */
    amp_tensor *hb = amp_to(h, AMP_BF16);
    for (int i = 0; hb && i < 5; i++)
        CHECK_EQ_INT(((const uint16_t *)amp_tensor_cdata(hb))[i],
                     amp_f32_to_bf16(amp_f16_to_f32(amp_f32_to_f16(v[i]))));
    amp_tensor_free(x);
}

static void test_to_same_dtype_is_a_copy(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(4), AMP_F32, -1, 1, 70);
    amp_tensor *y = amp_to(x, AMP_F32);
    CHECK(y != NULL && y != x);
    CHECK(amp_tensor_data(y) != amp_tensor_data(x));
    CHECK_NEAR(max_abs_diff(x, y), 0, 0);
    ((float *)amp_tensor_data(y))[0] = 99;
    CHECK(amp_tensor_get(x, 0) != 99);
    amp_tensor_free(x);
}

/* The autocast pattern: an f32 parameter used in bf16 gets its gradient
 * back in f32. */
static void test_to_backward_returns_input_dtype(void)
{
    amp_tensor *w = test_uniform(AMP_SHAPE(2, 3), AMP_F32, -1, 1, 71);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor *wb = amp_to(w, AMP_BF16);
    CHECK(amp_tensor_requires_grad(wb));
    const float gv[6] = {1.5f, -2, 0.25f, 3, 1e-3f, -0.5f};
    amp_tensor *g = amp_empty(AMP_SHAPE(2, 3), AMP_BF16);
    amp_tensor_copy_in(g, gv, AMP_F32);
    CHECK_OK(amp_backward_with(wb, g));
    amp_tensor *gw = amp_tensor_grad(w);
    CHECK(gw != NULL);
    CHECK_EQ_INT(amp_tensor_dtype(gw), AMP_F32);
    for (int i = 0; gw && i < 6; i++)
        CHECK_NEAR(amp_tensor_get(gw, i), amp_bf16_to_f32(amp_f32_to_bf16(gv[i])), 0);
    amp_tensor_free(w);
    amp_tensor_free(g);
}

static amp_tensor *to_fn(amp_tensor **in, void *ctx)
{
    (void)ctx;
    return amp_to(amp_to(in[0], AMP_F32), AMP_F32);
}

static void test_to_gradcheck(void)
{
    amp_tensor *in[1] = {test_uniform(AMP_SHAPE(5), AMP_F32, -1, 1, 72)};
    amp_tensor_set_requires_grad(in[0], true);
    CHECK(gradcheck("to", to_fn, in, 1, NULL, 1e-2, 1e-3, 1e-3));
    amp_tensor_free(in[0]);
}

static void test_to_integers(void)
{
    const float v[4] = {2.9f, -2.9f, 0.5f, 100.0f};
    amp_tensor *x = amp_from_data(AMP_SHAPE(4), AMP_F32, v);
    amp_tensor *i = amp_to(x, AMP_I64);
    CHECK(i != NULL);
    CHECK_EQ_INT(amp_tensor_dtype(i), AMP_I64);
    const int64_t want[4] = {2, -2, 0, 100}; /* truncation toward zero */
    for (int k = 0; i && k < 4; k++)
        CHECK_EQ_INT(((const int64_t *)amp_tensor_cdata(i))[k], want[k]);
    amp_tensor *f = amp_to(amp_to(i, AMP_I32), AMP_BF16);
    CHECK(f != NULL);
    for (int k = 0; f && k < 4; k++)
        CHECK_NEAR(amp_tensor_get(f, k), (double)want[k], 0);
    CHECK(amp_to(x, (amp_dtype)17) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "invalid dtype 17");
    amp_tensor_free(x);
}


/* A cast big enough to be split over threads in blocks (with a partial
 * last block): every element as amp_convert gives it, both ways, and the
 * gradient comes back in the input's dtype the same way. */
static void test_to_large_tensor_blocks(void)
{
    const int64_t n = 3 * 65536 + 777;
    amp_tensor *x = test_uniform(AMP_SHAPE(n), AMP_F32, -70000, 70000, 161);
    amp_tensor_set_requires_grad(x, true);
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        amp_tensor *y = amp_to(x, dts[d]);
        CHECK(y && amp_tensor_dtype(y) == dts[d]);
        uint16_t *want = malloc((size_t)n * sizeof(uint16_t));
        amp_convert(amp_tensor_data(x), AMP_F32, want, dts[d], (size_t)n);
        CHECK(y && memcmp(amp_tensor_data(y), want, (size_t)n * sizeof(uint16_t)) == 0);
        amp_tensor_clear_grad(x);
        CHECK_OK(amp_backward_with(y, y)); /* d(to)/dx = the gradient, widened */
        amp_tensor *g = amp_tensor_grad(x);
        float *wide = malloc((size_t)n * sizeof(float));
        amp_convert(want, dts[d], wide, AMP_F32, (size_t)n);
        CHECK(g && amp_tensor_dtype(g) == AMP_F32 && memcmp(amp_tensor_data(g), wide, (size_t)n * sizeof(float)) == 0);
        free(want);
        free(wide);
        amp_temps_free();
    }
    amp_tensor_free(x);
}

int main(void)
{
    RUN(test_reshape_shares_storage);
    RUN(test_reshape_infers_minus_one);
    RUN(test_reshape_to_eight_dims);
    RUN(test_reshape_errors);
    RUN(test_reshape_gradcheck);
    RUN(test_reshape_backward_shape);
    RUN(test_permute_all_perms_match_index_arithmetic);
    RUN(test_permute_large_tiles);
    RUN(test_permute_gradcheck);
    RUN(test_permute_backward_keeps_dtype);
    RUN(test_permute_errors);
    RUN(test_cat_values);
    RUN(test_cat_gradcheck);
    RUN(test_cat_promotes_dtypes);
    RUN(test_cat_integers);
    RUN(test_cat_errors);
    RUN(test_narrow_values);
    RUN(test_narrow_gradcheck);
    RUN(test_narrow_backward_places_the_slice);
    RUN(test_narrow_errors);
    RUN(test_to_rounds_like_scalar_conversions);
    RUN(test_to_same_dtype_is_a_copy);
    RUN(test_to_backward_returns_input_dtype);
    RUN(test_to_gradcheck);
    RUN(test_to_integers);
    RUN(test_to_large_tensor_blocks);
    return harness_done();
}
