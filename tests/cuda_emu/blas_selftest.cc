/*
 * blas_selftest.cc - checks cudaemu's cuBLASLt (cublaslt.cc) against
 * references computed here in double precision, with this file's own
 * number-format code: column-major addressing, transposes, ld > rows,
 * f32 / f16 / bf16 inputs into f32 and 16-bit outputs, alpha / beta,
 * in-place beta = 1 accumulation, strided batches, every epilogue with
 * and without bias (the GELU_AUX ones' aux matrix too: the pre-activation,
 * its ld and batch stride), TF32, rounding into 16 bits, the heuristic's
 * results, and the statuses and misuse reports for bad arguments. Elements
 * the product must not write (ld padding, batch gaps) are checked
 * untouched.
 * main returns 0 when everything passed, 1 otherwise (failures on stderr;
 * "cudaemu:" lines there are the emulator's expected diagnostics).
 *
 * Built apart from runtime.cc (which ends any process that had a misuse
 * with status 1, and this test commits misuse on purpose): this file
 * supplies emu.h's three functions over its own "device" memory - mmap'd
 * pages that are PROT_NONE outside a device_scope, so a host-side touch
 * of device memory faults - and counts emu::misuse calls.
 *   g++ -std=c++17 -Iinclude -I. blas_selftest.cc cublaslt.cc -o blas_selftest
 */
#include <cublasLt.h>

#include "emu.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

/* ---- Device memory and misuse reports ---- */

namespace {
struct Region {
    char *map, *p;
    size_t map_bytes, bytes;
};
std::vector<Region> regions;
int scope_depth, misuse_calls, misuse_seen_calls;

void protect_all(int prot)
{
    for (const Region &r : regions) /* the last page stays a guard */
        if (mprotect(r.map, r.map_bytes - (size_t)getpagesize(), prot) != 0)
            abort();
}
} // namespace

bool emu::device_range(const void *p, size_t bytes)
{
    for (const Region &r : regions)
        if ((const char *)p >= r.p && (const char *)p < r.p + r.bytes)
            return (size_t)((const char *)p - r.p) + bytes <= r.bytes;
    return false;
}

emu::device_scope::device_scope()
{
    if (scope_depth++ == 0)
        protect_all(PROT_READ | PROT_WRITE);
}

emu::device_scope::~device_scope()
{
    if (--scope_depth == 0)
        protect_all(PROT_NONE);
}

void emu::misuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("cudaemu: misuse: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    misuse_calls++;
}

/* Device memory: 256-byte aligned, ending less than 256 bytes before a
 * page that is never accessible. */
static void *dev_alloc(size_t bytes)
{
    const size_t page = (size_t)getpagesize(), rounded = (bytes + 255) / 256 * 256;
    const size_t map_bytes = (rounded + page - 1) / page * page + page;
    char *map = (char *)mmap(nullptr, map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        abort();
    char *p = map + map_bytes - page - rounded;
    regions.push_back(Region{map, p, map_bytes, bytes});
    if (scope_depth)
        mprotect(map, map_bytes - page, PROT_READ | PROT_WRITE);
    return p;
}

static void dev_free(void *p)
{
    for (size_t i = 0; i < regions.size(); i++)
        if (regions[i].p == p) {
            munmap(regions[i].map, regions[i].map_bytes);
            regions.erase(regions.begin() + (long)i);
            return;
        }
    abort();
}

static void to_dev(void *dst, const void *src, size_t n)
{
    emu::device_scope s;
    if (n)
        memcpy(dst, src, n);
}

static void from_dev(void *dst, const void *src, size_t n)
{
    emu::device_scope s;
    if (n)
        memcpy(dst, src, n);
}

/* Whether emu::misuse was called since the last asking. */
static bool misuse_seen()
{
    const bool seen = misuse_calls != misuse_seen_calls;
    misuse_seen_calls = misuse_calls;
    return seen;
}

/* ---- Checks ---- */

static int failures;

static void fail(const char *where, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(const char *where, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s: ", where);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    failures++;
}

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            fail(__func__, __VA_ARGS__);                                                                               \
    } while (0)

/* A call's status, and whether it reported a misuse, against expectation. */
static void expect(const char *what, cublasStatus_t got, cublasStatus_t want, bool want_misuse = false)
{
    const bool seen = misuse_seen();
    if (got != want)
        fail(what, "status %d, expected %d", (int)got, (int)want);
    if (seen != want_misuse)
        fail(what, want_misuse ? "no misuse reported" : "unexpected misuse report");
}

/* ---- Number formats, written independently of the emulator's ---- */

static size_t esize(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

/* 16-bit float parameters: explicit mantissa bits and exponent bias. */
static int mant_bits(cudaDataType t) { return t == CUDA_R_16F ? 10 : 7; }
static int exp_bias(cudaDataType t) { return t == CUDA_R_16F ? 15 : 127; }

static double decode16(uint16_t h, cudaDataType t)
{
    const int mb = mant_bits(t), eb = exp_bias(t), emax = (1 << (15 - mb)) - 1;
    const int e = (h >> mb) & emax, m = h & ((1 << mb) - 1);
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == emax)
        return m ? NAN : s * INFINITY;
    if (e == 0)
        return s * ldexp(m, 1 - eb - mb);
    return s * ldexp(1.0 + ldexp(m, -mb), e - eb);
}

/* Exact only: v must be 0, NaN or a normal number representable in t. */
static uint16_t encode16(double v, cudaDataType t)
{
    const int mb = mant_bits(t), eb = exp_bias(t);
    if (isnan(v))
        return (uint16_t)(0x7fff);
    if (v == 0)
        return signbit(v) ? 0x8000 : 0;
    int e;
    const double f = frexp(fabs(v), &e); /* v = f 2^e, f in [0.5, 1) */
    const double mant = (2 * f - 1) * (1 << mb);
    if (mant != floor(mant) || e - 1 + eb < 1 || e - 1 + eb >= (1 << (15 - mb)) - 1) {
        fprintf(stderr, "test bug: %g is not exact in a 16-bit type\n", v);
        abort();
    }
    return (uint16_t)((v < 0 ? 0x8000 : 0) | (e - 1 + eb) << mb | (int)mant);
}

/* TF32: 11 significant bits, to nearest, ties away from zero. */
static double tf32(double v)
{
    if (!isfinite(v) || v == 0)
        return v;
    int e;
    const double f = frexp(v, &e);
    return ldexp(round(ldexp(f, 11)), e - 11);
}

/* The spacing of t's values around v. */
static double ulp16(double v, cudaDataType t)
{
    int e;
    frexp(v, &e);
    return ldexp(1.0, (e - 1 > 1 - exp_bias(t) ? e - 1 : 1 - exp_bias(t)) - mant_bits(t));
}

/* v rounded to t: to nearest even (nearbyint's default), past the
 * largest finite value to infinity. */
static double round16(double v, cudaDataType t)
{
    if (!isfinite(v))
        return v;
    const double q = ulp16(v, t), r = nearbyint(v / q) * q;
    const double max = ldexp(2 - ldexp(1, -mant_bits(t)), exp_bias(t));
    return fabs(r) > max ? copysign(INFINITY, v) : r;
}

static double gelu_tanh(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / acos(-1.0)) * (x + 0.044715 * x * x * x)));
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform() /* in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

/* ---- A column-major matrix on the device, with its host image ---- */

struct Matrix {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
    std::vector<uint8_t> img; /* every byte of the span, gaps included */
    void *dev = nullptr;

    Matrix(cudaDataType t, uint64_t r, uint64_t c, int64_t ld_, int32_t b = 1, int64_t gap = 0)
        : type(t), rows(r), cols(c), ld(ld_), batch(b)
    {
        const uint64_t one = r == 0 || c == 0 ? 0 : (c - 1) * ld + r;
        stride = (int64_t)one + gap;
        img.assign(one == 0 ? 0 : ((uint64_t)(b - 1) * stride + one) * esize(t), 0xc5);
        dev = dev_alloc(img.size());
    }
    ~Matrix() { dev_free(dev); }
    Matrix(const Matrix &) = delete;
    Matrix &operator=(const Matrix &) = delete;

    size_t at(uint64_t i, uint64_t j, int b) const { return ((uint64_t)b * stride + j * ld + i) * esize(type); }
    double get(uint64_t i, uint64_t j, int b = 0) const
    {
        if (type == CUDA_R_32F) {
            float f;
            memcpy(&f, &img[at(i, j, b)], 4);
            return f;
        }
        uint16_t h;
        memcpy(&h, &img[at(i, j, b)], 2);
        return decode16(h, type);
    }
    void set(uint64_t i, uint64_t j, int b, double v)
    {
        if (type == CUDA_R_32F) {
            const float f = (float)v;
            memcpy(&img[at(i, j, b)], &f, 4);
        } else {
            const uint16_t h = encode16(v, type);
            memcpy(&img[at(i, j, b)], &h, 2);
        }
    }
    /* Values exact in every type used here: multiples of 1/4 in [-2, 2]
     * (16-bit) or any float in [-1, 1). */
    void fill(bool small_ints)
    {
        for (int b = 0; b < batch; b++)
            for (uint64_t j = 0; j < cols; j++)
                for (uint64_t i = 0; i < rows; i++)
                    set(i, j, b, small_ints ? floor(uniform() * 8) / 4 : uniform());
    }
    void upload() { to_dev(dev, img.data(), img.size()); }
    void download() { from_dev(img.data(), dev, img.size()); }
    cublasLtMatrixLayout_t layout() const
    {
        cublasLtMatrixLayout_t l = nullptr;
        cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld);
        if (batch > 1) {
            cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
            cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
        }
        return l;
    }
};

static cublasLtHandle_t handle;
static void *workspace;
static const uint64_t kWorkspaceMax = 1 << 20;

static bool has_bias(cublasLtEpilogue_t e)
{
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

static bool has_aux(cublasLtEpilogue_t e)
{
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

static bool is_gelu(cublasLtEpilogue_t e)
{
    return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || has_aux(e);
}

static double activate(cublasLtEpilogue_t e, double x)
{
    if (e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS)
        return x > 0 ? x : 0;
    if (is_gelu(e))
        return gelu_tanh(x);
    return x;
}

/* ---- Products checked against the reference ---- */

struct Case {
    const char *name;
    cudaDataType ab = CUDA_R_32F, cd = CUDA_R_32F;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    bool ta = false, tb = false;
    uint64_t m = 5, n = 3, k = 4;
    int64_t pad_a = 0, pad_b = 0, pad_c = 0, pad_d = 0; /* ld = rows + pad */
    int32_t batch = 1;
    int64_t gap = 0; /* batch stride = one matrix's span + gap */
    float alpha = 1, beta = 0;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    bool in_place = false; /* C is D */
    bool c_nan = false;    /* C holds NaN (with beta 0: must not be read) */
    bool c_ld0 = false;    /* C is one column, ld 0, broadcast */
    bool bias_per_batch = false; /* BIAS_BATCH_STRIDE m: a bias per batch */
    int64_t aux_ld = 8, aux_gap = 0; /* GELU_AUX: the aux matrix's ld, batch gap */
    bool aux_type = false;           /* set EPILOGUE_AUX_DATA_TYPE (to D's) */
};

static void run_case(const Case &cs)
{
    const bool small = cs.ab != CUDA_R_32F;
    const uint64_t ra = cs.ta ? cs.k : cs.m, ca = cs.ta ? cs.m : cs.k;
    const uint64_t rb = cs.tb ? cs.n : cs.k, cb = cs.tb ? cs.k : cs.n;
    Matrix A(cs.ab, ra, ca, (int64_t)ra + cs.pad_a, cs.batch, cs.gap);
    Matrix B(cs.ab, rb, cb, (int64_t)rb + cs.pad_b, cs.batch, cs.gap);
    Matrix D(cs.cd, cs.m, cs.n, (int64_t)cs.m + cs.pad_d, cs.batch, cs.gap);
    Matrix Csep(cs.cd, cs.m, cs.c_ld0 ? 1 : cs.n, (int64_t)cs.m + cs.pad_c, cs.batch, cs.gap);
    Matrix &C = cs.in_place ? D : Csep;
    Matrix bias(cs.cd, cs.m, 1, (int64_t)cs.m, cs.bias_per_batch ? cs.batch : 1);
    Matrix aux(cs.cd, cs.m, cs.n, cs.aux_ld > (int64_t)cs.m ? cs.aux_ld : (int64_t)cs.m, cs.batch, cs.aux_gap);
    A.fill(small);
    B.fill(small);
    C.fill(small);
    bias.fill(small);
    if (cs.c_nan)
        for (int b = 0; b < C.batch; b++)
            for (uint64_t j = 0; j < C.cols; j++)
                for (uint64_t i = 0; i < C.rows; i++)
                    C.set(i, j, b, NAN);
    const std::vector<uint8_t> before = D.img, aux_before = aux.img;
    std::vector<double> c0; /* C as it was (in place, D overwrites it) */
    for (int b = 0; b < C.batch; b++)
        for (uint64_t j = 0; j < C.cols; j++)
            for (uint64_t i = 0; i < C.rows; i++)
                c0.push_back(C.get(i, j, b));
    for (Matrix *x : {&A, &B, &Csep, &D, &bias, &aux})
        x->upload();

    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, cs.compute, CUDA_R_32F);
    const int32_t ta = cs.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = cs.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &cs.epilogue, sizeof cs.epilogue);
    if (has_bias(cs.epilogue))
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias.dev, sizeof bias.dev);
    if (cs.bias_per_batch)
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias.stride, sizeof bias.stride);
    if (has_aux(cs.epilogue)) {
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux.dev, sizeof aux.dev);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux.ld, sizeof aux.ld);
        if (cs.batch > 1)
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &aux.stride,
                                           sizeof aux.stride);
        const int32_t t = cs.cd;
        if (cs.aux_type)
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &t, sizeof t);
    }
    cublasLtMatrixLayout_t la = A.layout(), lb = B.layout(), ld = D.layout();
    cublasLtMatrixLayout_t lc = cs.in_place ? ld : Csep.layout();
    if (cs.c_ld0) { /* one stored column serves every column of C */
        const uint64_t n = cs.n;
        const int64_t zero = 0;
        cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_COLS, &n, sizeof n);
        cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_LD, &zero, sizeof zero);
    }
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceMax,
                                         sizeof kWorkspaceMax);
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    expect(cs.name, cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, ld, pref, 1, &heur, &found),
           CUBLAS_STATUS_SUCCESS);
    CHECK(found == 1, "%s: %d algos", cs.name, found);
    expect(cs.name,
           cublasLtMatmul(handle, desc, &cs.alpha, A.dev, la, B.dev, lb, &cs.beta, C.dev, lc, D.dev, ld, &heur.algo,
                          workspace, kWorkspaceMax, nullptr),
           CUBLAS_STATUS_SUCCESS);
    D.download();
    aux.download();

    const bool tf = cs.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    int bad = 0, tf32_visible = 0;
    for (int b = 0; b < cs.batch; b++)
        for (uint64_t j = 0; j < cs.n; j++)
            for (uint64_t i = 0; i < cs.m; i++) {
                double sum = 0, plain = 0, scale = 0;
                for (uint64_t q = 0; q < cs.k; q++) {
                    const double a = cs.ta ? A.get(q, i, b) : A.get(i, q, b);
                    const double v = cs.tb ? B.get(j, q, b) : B.get(q, j, b);
                    sum += (tf ? tf32(a) : a) * (tf ? tf32(v) : v);
                    plain += a * v;
                    scale += fabs(a * v);
                }
                const double c = cs.beta != 0 ? c0[((uint64_t)b * C.cols + (cs.c_ld0 ? 0 : j)) * C.rows + i] : 0;
                const double add = cs.beta * c + (has_bias(cs.epilogue) ? bias.get(i, 0, cs.bias_per_batch ? b : 0) : 0);
                const double pre = cs.alpha * sum + add;
                double want = activate(cs.epilogue, pre);
                scale = fabs(cs.alpha) * scale + fabs(add);
                /* f32 accumulation: about k roundings of the running sum. */
                double tol = (double)(cs.k + 4) * ldexp(scale, -24);
                const double pre_tol = tol;
                const bool gelu = is_gelu(cs.epilogue);
                if (cs.cd != CUDA_R_32F) /* small-integer data: exact, then one rounding */
                    tol = gelu ? ulp16(want, cs.cd) : 0;
                if (cs.cd != CUDA_R_32F && !gelu)
                    want = round16(want, cs.cd);
                const double got = D.get(i, j, b);
                if (!(fabs(got - want) <= tol) && bad++ < 3)
                    fail(cs.name, "D(%llu, %llu) batch %d = %.9g, expected %.9g (tolerance %.3g)",
                         (unsigned long long)i, (unsigned long long)j, b, got, want, tol);
                /* The aux: the GELU's input, rounded once into D's type. */
                const double got_pre = has_aux(cs.epilogue) ? aux.get(i, j, b) : 0;
                const double want_pre = cs.cd != CUDA_R_32F ? round16(pre, cs.cd) : pre;
                if (has_aux(cs.epilogue) && !(fabs(got_pre - want_pre) <= (cs.cd != CUDA_R_32F ? 0 : pre_tol)) &&
                    bad++ < 3)
                    fail(cs.name, "aux(%llu, %llu) batch %d = %.9g, expected %.9g", (unsigned long long)i,
                         (unsigned long long)j, b, got_pre, want_pre);
                tf32_visible += fabs(got - activate(cs.epilogue, cs.alpha * plain + add)) > tol;
            }
    /* Padding between columns and gaps between batches: untouched. */
    std::vector<uint8_t> element(D.img.size());
    for (int b = 0; b < cs.batch; b++)
        for (uint64_t j = 0; j < cs.n; j++)
            memset(&element[D.at(0, j, b)], 1, cs.m * esize(cs.cd));
    for (size_t x = 0; x < D.img.size(); x++)
        if (!element[x] && D.img[x] != before[x]) {
            fail(cs.name, "byte %zu of D's padding was written", x);
            break;
        }
    /* The aux: its padding and gaps untouched; wholly untouched without
     * an aux epilogue. */
    std::vector<uint8_t> written(aux.img.size());
    for (int b = 0; b < cs.batch && has_aux(cs.epilogue); b++)
        for (uint64_t j = 0; j < cs.n; j++)
            memset(&written[aux.at(0, j, b)], 1, cs.m * esize(cs.cd));
    for (size_t x = 0; x < aux.img.size(); x++)
        if (!written[x] && aux.img[x] != aux_before[x]) {
            fail(cs.name, "byte %zu of the aux outside its elements was written", x);
            break;
        }
    if (tf)
        CHECK(tf32_visible > 0, "%s: TF32 rounding made no difference", cs.name);
    cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {la, lb, ld})
        cublasLtMatrixLayoutDestroy(l);
    if (!cs.in_place)
        cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
}

static void test_products()
{
    const cudaDataType F32 = CUDA_R_32F, F16 = CUDA_R_16F, BF16 = CUDA_R_16BF;
    std::vector<Case> cases;
    auto add = [&](Case c) { cases.push_back(c); };
    /* Column-major addressing, transposes, ld > rows. */
    for (int t = 0; t < 4; t++) {
        Case c;
        c.name = "f32 transposes with padded ld";
        c.ta = t & 1, c.tb = t & 2, c.pad_a = 3, c.pad_b = 2, c.pad_d = 1;
        add(c);
    }
    Case big;
    big.name = "f32 37x29x65";
    big.m = 37, big.n = 29, big.k = 65, big.ta = true, big.pad_d = 7;
    add(big);
    /* Types in and out (small integers: exact). */
    for (cudaDataType ab : {F16, BF16})
        for (cudaDataType cd : {ab, F32})
            for (int t = 0; t < 4; t++) {
                Case c;
                c.name = ab == F16 ? (cd == F32 ? "f16 -> f32" : "f16 -> f16") : (cd == F32 ? "bf16 -> f32" : "bf16 -> bf16");
                c.ab = ab, c.cd = cd, c.ta = t & 1, c.tb = t & 2, c.pad_a = 1, c.pad_d = 2, c.k = 9;
                add(c);
            }
    /* alpha, beta, C. */
    Case ab;
    ab.name = "alpha 0.5, beta -2, C apart with its own ld";
    ab.alpha = 0.5f, ab.beta = -2, ab.pad_c = 4, ab.pad_d = 1;
    add(ab);
    Case nan_c = ab;
    nan_c.name = "beta 0 does not read C";
    nan_c.beta = 0, nan_c.c_nan = true;
    add(nan_c);
    Case acc;
    acc.name = "in place, beta 1 accumulates";
    acc.beta = 1, acc.in_place = true, acc.pad_d = 2;
    add(acc);
    Case acc16 = acc;
    acc16.name = "bf16 -> bf16 in place, beta 1";
    acc16.ab = acc16.cd = BF16;
    add(acc16);
    Case bcast;
    bcast.name = "C broadcast (ld 0)";
    bcast.beta = 1, bcast.c_ld0 = true;
    add(bcast);
    Case k0;
    k0.name = "k = 0: D = beta C";
    k0.k = 0, k0.beta = 0.5f;
    add(k0);
    /* Strided batches. */
    Case sb;
    sb.name = "f32 strided batch with gaps";
    sb.batch = 3, sb.gap = 5, sb.ta = true, sb.pad_a = 2, sb.beta = 1;
    add(sb);
    Case sb16 = sb;
    sb16.name = "f16 -> f32 strided batch, in place";
    sb16.ab = F16, sb16.in_place = true;
    add(sb16);
    /* Every epilogue, f32 and 16-bit. */
    for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_BIAS,
                                 CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS})
        for (cudaDataType t : {F32, F16}) {
            Case c;
            c.name = "epilogue";
            c.epilogue = e, c.ab = c.cd = t, c.m = 7, c.n = 6, c.k = 5, c.pad_d = 1, c.beta = 1;
            add(c);
        }
    Case eb;
    eb.name = "relu + bias over batches (shared bias)";
    eb.epilogue = CUBLASLT_EPILOGUE_RELU_BIAS, eb.batch = 2, eb.ab = BF16;
    add(eb);
    Case ebb = eb;
    ebb.name = "bias + gelu, a bias per batch (BIAS_BATCH_STRIDE)";
    ebb.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS, ebb.batch = 3, ebb.ab = ebb.cd = F32, ebb.bias_per_batch = true;
    add(ebb);
    /* GELU_AUX: the pre-activation into aux (ld a multiple of 8, padded;
     * a batch stride a multiple of 8; the data type set or defaulted). */
    for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS})
        for (cudaDataType t : {F32, F16, BF16}) {
            Case c;
            c.name = e == CUBLASLT_EPILOGUE_GELU_AUX ? "gelu, pre-activation into aux"
                                                      : "bias + gelu, pre-activation into aux";
            c.epilogue = e, c.ab = c.cd = t, c.m = 7, c.n = 6, c.k = 5, c.pad_d = 1, c.beta = 1;
            c.aux_ld = t == F16 ? 16 : 8, c.aux_type = t == BF16;
            add(c);
        }
    Case ea;
    ea.name = "bias + gelu + aux over batches, f16 -> f32";
    ea.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, ea.batch = 3, ea.ab = F16, ea.m = 16, ea.n = 3, ea.k = 7;
    ea.aux_ld = 24, ea.aux_gap = 8, ea.bias_per_batch = true; /* stride 2 * 24 + 16 + 8 = 72 */
    add(ea);
    Case ek0;
    ek0.name = "k = 0 with gelu + bias";
    ek0.k = 0, ek0.beta = 1, ek0.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
    add(ek0);
    /* TF32 inputs. */
    Case tf;
    tf.name = "TF32 compute";
    tf.compute = CUBLAS_COMPUTE_32F_FAST_TF32, tf.m = 9, tf.n = 8, tf.k = 33, tf.tb = true, tf.beta = 1;
    add(tf);
    for (const Case &c : cases)
        run_case(c);
}

/* ---- A reusable valid problem for the argument checks ---- */

struct Setup {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    char *A, *B, *C, *D, *bias, *aux; /* 64 KiB each */
    float alpha = 1, beta = 0;
    cublasLtMatmulHeuristicResult_t heur;

    /* D (m x n) = A (m x k) B (k x n), no transposes. */
    explicit Setup(cudaDataType ab = CUDA_R_32F, cudaDataType cd = CUDA_R_32F, uint64_t m = 8, uint64_t n = 8,
                   uint64_t k = 8, cublasComputeType_t compute = CUBLAS_COMPUTE_32F)
    {
        A = (char *)dev_alloc(65536), B = (char *)dev_alloc(65536), C = (char *)dev_alloc(65536);
        D = (char *)dev_alloc(65536), bias = (char *)dev_alloc(65536), aux = (char *)dev_alloc(65536);
        cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F);
        cublasLtMatrixLayoutCreate(&la, ab, m, k, (int64_t)m);
        cublasLtMatrixLayoutCreate(&lb, ab, k, n, (int64_t)k);
        cublasLtMatrixLayoutCreate(&lc, cd, m, n, (int64_t)m);
        cublasLtMatrixLayoutCreate(&ld, cd, m, n, (int64_t)m);
        cublasLtMatmulPreferenceCreate(&pref);
    }
    ~Setup()
    {
        cublasLtMatmulPreferenceDestroy(pref);
        for (cublasLtMatrixLayout_t l : {la, lb, lc, ld})
            cublasLtMatrixLayoutDestroy(l);
        cublasLtMatmulDescDestroy(desc);
        for (char *p : {A, B, C, D, bias, aux})
            dev_free(p);
    }
    cublasStatus_t heuristic()
    {
        int found = 0;
        const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, ld, pref, 1, &heur, &found);
        return s == CUBLAS_STATUS_SUCCESS && found != 1 ? CUBLAS_STATUS_INTERNAL_ERROR : s;
    }
    cublasStatus_t run(const cublasLtMatmulAlgo_t *algo, void *ws = nullptr, size_t ws_bytes = 0)
    {
        return cublasLtMatmul(handle, desc, &alpha, A, la, B, lb, &beta, C, lc, D, ld, algo, ws, ws_bytes, nullptr);
    }
    template <class T> void set(cublasLtMatmulDescAttributes_t a, T v)
    {
        cublasLtMatmulDescSetAttribute(desc, a, &v, sizeof v);
    }
    template <class T> void pref_set(cublasLtMatmulPreferenceAttributes_t a, T v)
    {
        cublasLtMatmulPreferenceSetAttribute(pref, a, &v, sizeof v);
    }
    /* The GELU_AUX_BIAS epilogue with the aux at p, ld aux_ld. */
    void gelu_aux(void *p, int64_t aux_ld = 8)
    {
        set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
        set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void *)bias);
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p);
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld);
    }
};

template <class T> static void layout_set(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, T v)
{
    cublasLtMatrixLayoutSetAttribute(l, a, &v, sizeof v);
}

/* Heuristic and, with the heuristic's algo where it gave one (else
 * none), the product: both answer want. */
static void expect_both(const char *what, Setup &s, cublasStatus_t want)
{
    const cublasStatus_t h = s.heuristic();
    expect(what, h, want);
    expect(what, s.run(h == CUBLAS_STATUS_SUCCESS ? &s.heur.algo : nullptr), want);
}

static void test_unsupported_combinations()
{
    const cudaDataType F32 = CUDA_R_32F, F16 = CUDA_R_16F, BF16 = CUDA_R_16BF;
    const struct {
        const char *what;
        cudaDataType a, b, cd;
        cublasComputeType_t compute;
    } rows[] = {
        {"f16 A with bf16 B", F16, BF16, F32, CUBLAS_COMPUTE_32F},
        {"f16 into bf16", F16, F16, BF16, CUBLAS_COMPUTE_32F},
        {"f32 into f16", F32, F32, F16, CUBLAS_COMPUTE_32F},
        {"TF32 with f16 inputs", F16, F16, F16, CUBLAS_COMPUTE_32F_FAST_TF32},
        {"f64", CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F},
        {"16F compute", F16, F16, F16, CUBLAS_COMPUTE_16F},
    };
    for (const auto &r : rows) {
        Setup s(r.a, r.cd, 8, 8, 8, r.compute);
        layout_set(s.lb, CUBLASLT_MATRIX_LAYOUT_TYPE, (uint32_t)r.b);
        expect_both(r.what, s, CUBLAS_STATUS_NOT_SUPPORTED);
    }
    {
        Setup s;
        cublasLtMatmulDescDestroy(s.desc);
        cublasLtMatmulDescCreate(&s.desc, CUBLAS_COMPUTE_32F, CUDA_R_16F);
        expect_both("f16 scale type", s, CUBLAS_STATUS_NOT_SUPPORTED);
    }
    {
        Setup s(F16, F16);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
        s.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void *)s.bias);
        s.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, (int32_t)CUDA_R_32F);
        expect_both("f32 bias with f16 D", s, CUBLAS_STATUS_NOT_SUPPORTED);
    }
    {
        Setup s;
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_RELU_AUX);
        expect_both("RELU_AUX epilogue", s, CUBLAS_STATUS_NOT_SUPPORTED);
    }
    {
        Setup s;
        s.set(CUBLASLT_MATMUL_DESC_TRANSA, (int32_t)CUBLAS_OP_C);
        expect_both("conjugate transpose", s, CUBLAS_STATUS_NOT_SUPPORTED);
    }
    {
        Setup s;
        layout_set(s.la, CUBLASLT_MATRIX_LAYOUT_ORDER, (int32_t)CUBLASLT_ORDER_ROW);
        expect_both("row order", s, CUBLAS_STATUS_NOT_SUPPORTED);
    }
}

static void test_invalid_values()
{
    {
        Setup s; /* A is 8 x 8 */
        layout_set(s.la, CUBLASLT_MATRIX_LAYOUT_LD, (int64_t)7);
        expect_both("ld of A < rows", s, CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Setup s;
        layout_set(s.ld, CUBLASLT_MATRIX_LAYOUT_LD, (int64_t)4);
        expect_both("ld of D < rows", s, CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Setup s;
        layout_set(s.lb, CUBLASLT_MATRIX_LAYOUT_ROWS, (uint64_t)7); /* k of B != k of A */
        expect_both("inner dimensions differ", s, CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Setup s;
        layout_set(s.lc, CUBLASLT_MATRIX_LAYOUT_COLS, (uint64_t)7);
        expect_both("C not the shape of D", s, CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Setup s;
        layout_set(s.lc, CUBLASLT_MATRIX_LAYOUT_TYPE, (uint32_t)CUDA_R_16F);
        layout_set(s.la, CUBLASLT_MATRIX_LAYOUT_TYPE, (uint32_t)CUDA_R_16F);
        layout_set(s.lb, CUBLASLT_MATRIX_LAYOUT_TYPE, (uint32_t)CUDA_R_16F);
        expect_both("C and D of different types", s, CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Setup s;
        layout_set(s.la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, (int32_t)2);
        layout_set(s.la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, (int64_t)64);
        expect_both("batch counts differ", s, CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Setup s;
        for (cublasLtMatrixLayout_t l : {s.la, s.lb, s.lc, s.ld}) {
            layout_set(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, (int32_t)2);
            layout_set(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, (int64_t)64);
        }
        layout_set(s.ld, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, (int64_t)60);
        expect_both("D's batches overlap", s, CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Setup s;
        s.set(CUBLASLT_MATMUL_DESC_TRANSB, (int32_t)7);
        expect_both("TRANSB not an operation", s, CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Setup s;
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_RELU_BIAS);
        expect("bias epilogue without a bias: heuristic", s.heuristic(), CUBLAS_STATUS_SUCCESS);
        expect("bias epilogue without a bias: matmul", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE);
        s.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void *)(s.bias + 2)); /* f32 bias */
        expect_both("bias not aligned to its elements", s, CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        /* GELU_AUX (docs, EPILOGUE_AUX_LD / _BATCH_STRIDE / _DATA_TYPE):
         * ld a multiple of 8 and at least D's rows, the default 0 too;
         * the type D's; the pointer needed for the product. */
        Setup s; /* D is 8 x 8 f32 */
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (void *)s.aux);
        expect_both("aux ld left at 0", s, CUBLAS_STATUS_INVALID_VALUE);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)12);
        expect_both("aux ld not a multiple of 8", s, CUBLAS_STATUS_INVALID_VALUE);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)16);
        expect_both("aux ld 16", s, CUBLAS_STATUS_SUCCESS);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, (int32_t)CUDA_R_16F);
        expect_both("f16 aux with f32 D", s, CUBLAS_STATUS_INVALID_VALUE);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, (int32_t)CUDA_R_32F);
        expect_both("aux type set to D's", s, CUBLAS_STATUS_SUCCESS);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (void *)(s.aux + 2));
        expect_both("aux not aligned to its elements", s, CUBLAS_STATUS_INVALID_VALUE);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (void *)nullptr);
        expect("NULL aux: heuristic", s.heuristic(), CUBLAS_STATUS_SUCCESS);
        expect("NULL aux: matmul", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Setup s(CUDA_R_16BF, CUDA_R_16BF, 16, 4, 8); /* D is 16 x 4 */
        s.gelu_aux(s.aux, 8);
        expect_both("aux ld 8 < D's 16 rows", s, CUBLAS_STATUS_INVALID_VALUE);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)16);
        for (cublasLtMatrixLayout_t l : {s.la, s.lb, s.lc, s.ld}) {
            layout_set(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, (int32_t)2);
            layout_set(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, (int64_t)128);
        }
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, (int64_t)68);
        expect_both("aux batch stride not a multiple of 8", s, CUBLAS_STATUS_INVALID_VALUE);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, (int64_t)32);
        expect_both("aux batches overlapping", s, CUBLAS_STATUS_INVALID_VALUE);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, (int64_t)64);
        expect_both("aux batches apart", s, CUBLAS_STATUS_SUCCESS);
    }
    {
        Setup s;
        cublasLtMatmulHeuristicResult_t r;
        int n = 5;
        expect("NULL handle", cublasLtMatmulAlgoGetHeuristic(nullptr, s.desc, s.la, s.lb, s.lc, s.ld, s.pref, 1, &r, &n),
               CUBLAS_STATUS_NOT_INITIALIZED);
        CHECK(n == 0, "returnAlgoCount %d after a failed heuristic", n);
        expect("NULL desc", cublasLtMatmulAlgoGetHeuristic(handle, nullptr, s.la, s.lb, s.lc, s.ld, s.pref, 1, &r, &n),
               CUBLAS_STATUS_INVALID_VALUE);
        expect("0 algos requested", cublasLtMatmulAlgoGetHeuristic(handle, s.desc, s.la, s.lb, s.lc, s.ld, s.pref, 0, &r, &n),
               CUBLAS_STATUS_INVALID_VALUE);
        expect("NULL preference", cublasLtMatmulAlgoGetHeuristic(handle, s.desc, s.la, s.lb, s.lc, s.ld, nullptr, 1, &r, &n),
               CUBLAS_STATUS_INVALID_VALUE);
        const int64_t v = 2;
        expect("attribute of the wrong size", cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSA, &v, sizeof v),
               CUBLAS_STATUS_INVALID_VALUE);
        expect("NULL attribute value", cublasLtMatrixLayoutSetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_LD, nullptr, 8),
               CUBLAS_STATUS_INVALID_VALUE);
        expect("NULL handle: matmul", cublasLtMatmul(nullptr, s.desc, &s.alpha, s.A, s.la, s.B, s.lb, &s.beta, s.C, s.lc,
                                                     s.D, s.ld, nullptr, nullptr, 0, nullptr),
               CUBLAS_STATUS_NOT_INITIALIZED);
        expect("NULL alpha", cublasLtMatmul(handle, s.desc, nullptr, s.A, s.la, s.B, s.lb, &s.beta, s.C, s.lc, s.D, s.ld,
                                            nullptr, nullptr, 0, nullptr),
               CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Setup s;
        layout_set(s.lc, CUBLASLT_MATRIX_LAYOUT_LD, (int64_t)9);
        s.beta = 1;
        char *c = s.C;
        s.C = s.D; /* in place, but C's layout is not D's */
        expect("heuristic of out-of-place layouts", s.heuristic(), CUBLAS_STATUS_SUCCESS);
        expect("C == D with another layout", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE);
        s.C = c;
    }
}

/* The heuristic: one algo, deterministic, workspace within the limit. */
static void test_heuristic()
{
    Setup s;
    expect("heuristic, no workspace allowed", s.heuristic(), CUBLAS_STATUS_SUCCESS);
    CHECK(s.heur.workspaceSize == 0 && s.heur.state == CUBLAS_STATUS_SUCCESS && s.heur.wavesCount > 0,
          "workspace %zu, state %d", s.heur.workspaceSize, (int)s.heur.state);
    s.pref_set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, (uint64_t)kWorkspaceMax);
    expect("heuristic", s.heuristic(), CUBLAS_STATUS_SUCCESS);
    const cublasLtMatmulHeuristicResult_t first = s.heur;
    CHECK(first.workspaceSize > 0 && first.workspaceSize <= kWorkspaceMax, "workspace %zu", first.workspaceSize);
    cublasLtMatmulHeuristicResult_t many[3];
    int n = 0;
    expect("heuristic, 3 requested",
           cublasLtMatmulAlgoGetHeuristic(handle, s.desc, s.la, s.lb, s.lc, s.ld, s.pref, 3, many, &n),
           CUBLAS_STATUS_SUCCESS);
    CHECK(n == 1 && memcmp(&many[0].algo, &first.algo, sizeof first.algo) == 0, "%d algos, or another algo", n);

    /* Workspace: too small, absent, misaligned, host memory, then right. */
    expect("workspace too small", s.run(&first.algo, workspace, first.workspaceSize - 1), CUBLAS_STATUS_INVALID_VALUE);
    expect("no workspace", s.run(&first.algo, nullptr, kWorkspaceMax), CUBLAS_STATUS_INVALID_VALUE);
    expect("workspace not 256-byte aligned", s.run(&first.algo, (char *)workspace + 16, kWorkspaceMax - 16),
           CUBLAS_STATUS_INVALID_VALUE);
    std::vector<char> host(kWorkspaceMax + 256);
    char *host_ws = (char *)(((uintptr_t)host.data() + 255) & ~(uintptr_t)255);
    expect("host workspace", s.run(&first.algo, host_ws, kWorkspaceMax), CUBLAS_STATUS_INVALID_VALUE, true);
    std::vector<uint8_t> ws(first.workspaceSize, 0);
    to_dev(workspace, ws.data(), ws.size());
    expect("workspace given", s.run(&first.algo, workspace, kWorkspaceMax), CUBLAS_STATUS_SUCCESS);
    from_dev(ws.data(), workspace, ws.size());
    CHECK(ws[0] != 0 && ws.back() != 0, "the algo's workspace was not used");

    /* An algo that is not the heuristic's, or was chosen for another problem. */
    cublasLtMatmulAlgo_t junk;
    memset(&junk, 0, sizeof junk);
    expect("made-up algo", s.run(&junk, workspace, kWorkspaceMax), CUBLAS_STATUS_INVALID_VALUE);
    s.set(CUBLASLT_MATMUL_DESC_TRANSA, (int32_t)CUBLAS_OP_T); /* A is square: still a product */
    expect("algo of another configuration", s.run(&first.algo, workspace, kWorkspaceMax), CUBLAS_STATUS_INVALID_VALUE);
}

/* Device memory and alignment faults: reported as misuse. */
static void test_misuse()
{
    {
        Setup s;
        expect("default alignment", s.heuristic(), CUBLAS_STATUS_SUCCESS);
        const cublasLtMatmulAlgo_t chosen_for_256 = s.heur.algo;
        s.A += 16;
        expect("A less aligned than the heuristic assumed", s.run(&chosen_for_256), CUBLAS_STATUS_INVALID_VALUE, true);
        expect("A misaligned, implicit heuristic", s.run(nullptr), CUBLAS_STATUS_INVALID_VALUE, true);
        s.pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, (uint32_t)16);
        expect("heuristic told of 16 bytes", s.heuristic(), CUBLAS_STATUS_SUCCESS);
        expect("A aligned as told", s.run(&s.heur.algo), CUBLAS_STATUS_SUCCESS);
        s.D += 4;
        expect("D less aligned than assumed", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE, true);
        s.A -= 16, s.D -= 4;
    }
    {
        Setup s;
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
        s.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void *)s.bias);
        expect("heuristic with an aligned bias", s.heuristic(), CUBLAS_STATUS_SUCCESS);
        s.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void *)(s.bias + 4));
        expect("bias moved to a less aligned place", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE, true);
    }
    {
        Setup s; /* the aux: D's 8 x 8 f32 with ld 8, 256 bytes */
        s.gelu_aux(s.aux);
        expect("heuristic with an aligned aux", s.heuristic(), CUBLAS_STATUS_SUCCESS);
        expect("aux as the heuristic saw it", s.run(&s.heur.algo), CUBLAS_STATUS_SUCCESS);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (void *)(s.aux + 4));
        expect("aux moved to a less aligned place", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE, true);
        std::vector<float> host(64);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (void *)host.data());
        expect("heuristic with a host aux", s.heuristic(), CUBLAS_STATUS_SUCCESS);
        expect("aux in host memory", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE, true);
        s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (void *)(s.aux + 65536 - 128));
        expect("heuristic with a short aux", s.heuristic(), CUBLAS_STATUS_SUCCESS);
        expect("aux runs past its allocation", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE, true);
        for (char *p : {s.D, s.A, s.C, s.bias}) {
            s.beta = p == s.C ? 1.0f : 0.0f; /* C is read only with beta != 0 */
            s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (void *)p);
            expect("heuristic with an aux over an operand", s.heuristic(), CUBLAS_STATUS_SUCCESS);
            expect("aux sharing memory with D, A, C or the bias", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE,
                   true);
        }
    }
    {
        Setup s;
        std::vector<float> host(64);
        char *saved = s.A;
        s.pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, (uint32_t)4);
        expect("heuristic", s.heuristic(), CUBLAS_STATUS_SUCCESS);
        s.A = (char *)host.data();
        expect("A in host memory", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE, true);
        s.A = saved + 65536 - 8 * 8 * 4 + 4; /* the last 4 bytes run past the allocation */
        expect("A runs past its allocation", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE, true);
        s.A = saved;
        float *dev_alpha = (float *)s.C;
        expect("alpha in device memory (host pointer mode)",
               cublasLtMatmul(handle, s.desc, dev_alpha, s.A, s.la, s.B, s.lb, &s.beta, s.C, s.lc, s.D, s.ld,
                              &s.heur.algo, nullptr, 0, nullptr),
               CUBLAS_STATUS_INVALID_VALUE, true);
    }
    {
        Setup s;
        s.beta = 1;
        s.pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, (uint32_t)16);
        expect("heuristic", s.heuristic(), CUBLAS_STATUS_SUCCESS);
        char *saved = s.D;
        s.D = s.A; /* D written over A while A is read */
        expect("D is A", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE, true);
        s.D = s.C + 64; /* out-of-place C overlapping D */
        expect("C overlaps D", s.run(&s.heur.algo), CUBLAS_STATUS_INVALID_VALUE, true);
        s.D = saved;
    }
    {
        Setup s;
        cublasLtMatrixLayout_t dead = s.lb;
        cublasLtMatrixLayoutDestroy(dead);
        expect("destroyed layout", s.heuristic(), CUBLAS_STATUS_INVALID_VALUE, true);
        expect("destroyed twice", cublasLtMatrixLayoutDestroy(dead), CUBLAS_STATUS_INVALID_VALUE, true);
        cublasLtMatrixLayoutCreate(&s.lb, CUDA_R_32F, 8, 8, 8);
    }
}

/* Interleaved batches that never share an element are not an overlap:
 * D's batch b is rows b*4 .. b*4+3 of an 8 x 8 matrix (stride 4, ld 8). */
static void test_interleaved_batches()
{
    Setup s(CUDA_R_32F, CUDA_R_32F, 4, 8, 2);
    for (cublasLtMatrixLayout_t l : {s.la, s.lb, s.lc, s.ld})
        layout_set(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, (int32_t)2);
    layout_set(s.la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, (int64_t)16);
    layout_set(s.lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, (int64_t)16);
    for (cublasLtMatrixLayout_t l : {s.lc, s.ld}) {
        layout_set(l, CUBLASLT_MATRIX_LAYOUT_LD, (int64_t)8);
        layout_set(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, (int64_t)4);
    }
    std::vector<float> a(32), b(32), d(64, -1);
    for (int i = 0; i < 32; i++)
        a[i] = (float)(i % 5), b[i] = (float)(i % 3) - 1;
    to_dev(s.A, a.data(), 128), to_dev(s.B, b.data(), 128), to_dev(s.D, d.data(), 256);
    expect("interleaved D batches", s.heuristic(), CUBLAS_STATUS_SUCCESS);
    expect("interleaved D batches", s.run(&s.heur.algo), CUBLAS_STATUS_SUCCESS);
    from_dev(d.data(), s.D, 256);
    for (int bt = 0; bt < 2; bt++)
        for (int j = 0; j < 8; j++)
            for (int i = 0; i < 4; i++) {
                const double want = a[bt * 16 + i] * b[bt * 16 + j * 2] + a[bt * 16 + 4 + i] * b[bt * 16 + j * 2 + 1];
                CHECK(d[bt * 4 + i + j * 8] == want, "D batch %d (%d, %d) = %g, expected %g", bt, i, j,
                      d[bt * 4 + i + j * 8], want);
            }
}

/* A 1 x 1 x 1 product whose value is alpha: D holds alpha rounded. */
static uint16_t round_through(cudaDataType t, float alpha, cublasComputeType_t compute = CUBLAS_COMPUTE_32F)
{
    Setup s(t, t, 1, 1, 1, compute);
    const uint16_t one = t == CUDA_R_16F ? 0x3c00 : 0x3f80;
    to_dev(s.A, &one, 2), to_dev(s.B, &one, 2);
    s.alpha = alpha;
    expect("rounding product", s.run(nullptr), CUBLAS_STATUS_SUCCESS);
    uint16_t d;
    from_dev(&d, s.D, 2);
    return d;
}

static void test_rounding()
{
    const struct {
        cudaDataType t;
        float value;
        uint16_t bits;
    } rows[] = {
        {CUDA_R_16F, 1 + 0x1p-11f, 0x3c00},      /* tie: to even */
        {CUDA_R_16F, 1 + 3 * 0x1p-11f, 0x3c02},  /* tie: to even, upward */
        {CUDA_R_16F, 1 + 0x1p-11f + 0x1p-20f, 0x3c01},
        {CUDA_R_16F, 65504, 0x7bff},             /* largest finite */
        {CUDA_R_16F, 65519, 0x7bff},
        {CUDA_R_16F, 65520, 0x7c00},             /* overflow to inf */
        {CUDA_R_16F, -1e6f, 0xfc00},
        {CUDA_R_16F, 0x1p-24f, 0x0001},          /* smallest subnormal */
        {CUDA_R_16F, 0x1p-25f, 0x0000},          /* tie: to even (zero) */
        {CUDA_R_16F, 3 * 0x1p-25f, 0x0002},
        {CUDA_R_16F, 0x1p-14f - 0x1p-25f, 0x0400}, /* subnormal rounds up to the smallest normal */
        {CUDA_R_16F, -0.0f, 0x8000},
        {CUDA_R_16BF, 1 + 0x1p-8f, 0x3f80},
        {CUDA_R_16BF, 1 + 3 * 0x1p-8f, 0x3f82},
        {CUDA_R_16BF, 3.4028235e38f, 0x7f80}, /* FLT_MAX rounds to inf */
        {CUDA_R_16BF, -0x1p-133f, 0x8001},    /* subnormal */
    };
    for (const auto &r : rows) {
        const uint16_t got = round_through(r.t, r.value);
        CHECK(got == r.bits, "%s of %a: 0x%04x, expected 0x%04x", r.t == CUDA_R_16F ? "f16" : "bf16", (double)r.value,
              got, r.bits);
    }
    for (cudaDataType t : {CUDA_R_16F, CUDA_R_16BF}) {
        const uint16_t got = round_through(t, NAN);
        CHECK(isnan(decode16(got, t)), "NaN became 0x%04x", got);
    }
}

/* One f32 product a * b, computed with the given compute type. */
static float product(float a, float b, cublasComputeType_t compute, cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT)
{
    Setup s(CUDA_R_32F, CUDA_R_32F, 1, 1, 1, compute);
    to_dev(s.A, &a, 4), to_dev(s.B, &b, 4);
    s.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
    expect("single product", s.run(nullptr), CUBLAS_STATUS_SUCCESS);
    float d;
    from_dev(&d, s.D, 4);
    return d;
}

static void test_tf32_and_nan()
{
    const cublasComputeType_t TF32 = CUBLAS_COMPUTE_32F_FAST_TF32, F32 = CUBLAS_COMPUTE_32F;
    CHECK(product(1 + 0x1p-12f, 1, TF32) == 1, "below half an ulp: down");
    CHECK(product(1, 1 + 0x1p-12f, TF32) == 1, "B is rounded too");
    CHECK(product(1 + 0x1p-11f, 1, TF32) == 1 + 0x1p-10f, "tie: away from zero");
    CHECK(product(-(1 + 0x1p-11f), 1, TF32) == -(1 + 0x1p-10f), "tie: away from zero (negative)");
    CHECK(product(1 + 0x1p-12f, 1, F32) == 1 + 0x1p-12f, "32F keeps every bit");
    CHECK(product(1 + 0x1p-12f, 1, CUBLAS_COMPUTE_32F_PEDANTIC) == 1 + 0x1p-12f, "32F_PEDANTIC keeps every bit");
    CHECK(isnan(product(NAN, 1, F32)), "NaN through the default epilogue");
    CHECK(product(NAN, 1, F32, CUBLASLT_EPILOGUE_RELU) == 0, "relu of NaN is 0 (as GPUs do)");
    CHECK(product(-2, 1, F32, CUBLASLT_EPILOGUE_RELU) == 0 && product(3, 1, F32, CUBLASLT_EPILOGUE_RELU) == 3, "relu");
}

/* gemm.cu's use: a row-major C [M, N] = op(A) op(B) as the column-major
 * Cᵀ = op(B)ᵀ op(A)ᵀ, B passed first. */
static void test_row_major_as_ampc_calls_it()
{
    const int64_t M = 3, N = 4, K = 5;
    for (int t = 0; t < 4; t++) {
        const bool ta = t & 1, tb = t & 2;
        std::vector<float> a(M * K), b(K * N), c(M * N);
        for (auto *v : {&a, &b})
            for (float &x : *v)
                x = (float)floor(uniform() * 8);
        const int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
        Setup s;
        to_dev(s.A, a.data(), a.size() * 4), to_dev(s.B, b.data(), b.size() * 4);
        for (cublasLtMatrixLayout_t l : {s.la, s.lb, s.lc})
            cublasLtMatrixLayoutDestroy(l);
        cublasLtMatrixLayoutCreate(&s.la, CUDA_R_32F, tb ? K : N, tb ? N : K, ldb);
        cublasLtMatrixLayoutCreate(&s.lb, CUDA_R_32F, ta ? M : K, ta ? K : M, lda);
        cublasLtMatrixLayoutCreate(&s.lc, CUDA_R_32F, N, M, ldc);
        s.set(CUBLASLT_MATMUL_DESC_TRANSA, (int32_t)(tb ? CUBLAS_OP_T : CUBLAS_OP_N));
        s.set(CUBLASLT_MATMUL_DESC_TRANSB, (int32_t)(ta ? CUBLAS_OP_T : CUBLAS_OP_N));
        cublasLtMatmulHeuristicResult_t r;
        int n = 0;
        expect("row-major heuristic",
               cublasLtMatmulAlgoGetHeuristic(handle, s.desc, s.la, s.lb, s.lc, s.lc, s.pref, 1, &r, &n),
               CUBLAS_STATUS_SUCCESS);
        expect("row-major matmul",
               cublasLtMatmul(handle, s.desc, &s.alpha, s.B, s.la, s.A, s.lb, &s.beta, s.C, s.lc, s.C, s.lc, &r.algo,
                              nullptr, 0, nullptr),
               CUBLAS_STATUS_SUCCESS);
        from_dev(c.data(), s.C, c.size() * 4);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double want = 0;
                for (int64_t q = 0; q < K; q++)
                    want += (double)(ta ? a[q * lda + i] : a[i * lda + q]) * (tb ? b[j * ldb + q] : b[q * ldb + j]);
                CHECK(c[i * ldc + j] == want, "ta %d tb %d: C[%lld][%lld] = %g, expected %g", ta, tb, (long long)i,
                      (long long)j, c[i * ldc + j], want);
            }
    }
}

/* CUDAEMU_LT_REFUSE: the heuristic finds nothing (all, or epilogues). */
static void test_refusal_knob()
{
    Setup s;
    setenv("CUDAEMU_LT_REFUSE", "epilogue", 1);
    expect("default epilogue, refusing epilogues", s.heuristic(), CUBLAS_STATUS_SUCCESS);
    s.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_RELU);
    expect("relu epilogue, refusing epilogues", s.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
    s.gelu_aux(s.aux);
    expect("gelu aux epilogue, refusing epilogues", s.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
    unsetenv("CUDAEMU_LT_REFUSE");
    expect("gelu aux epilogue, refusing nothing", s.heuristic(), CUBLAS_STATUS_SUCCESS);
    setenv("CUDAEMU_LT_REFUSE", "all", 1);
    s.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT);
    expect("refusing all", s.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
    unsetenv("CUDAEMU_LT_REFUSE");
    expect("refusing nothing", s.heuristic(), CUBLAS_STATUS_SUCCESS);
}

int main()
{
    if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS)
        return 1;
    workspace = dev_alloc(kWorkspaceMax);
    misuse_seen();
    test_products();
    test_unsupported_combinations();
    test_invalid_values();
    test_heuristic();
    test_misuse();
    test_interleaved_batches();
    test_rounding();
    test_tf32_and_nan();
    test_row_major_as_ampc_calls_it();
    test_refusal_knob();
    dev_free(workspace);
    expect("destroy", cublasLtDestroy(handle), CUBLAS_STATUS_SUCCESS);
    if (failures)
        fprintf(stderr, "blas_selftest: %d failure(s)\n", failures);
    else
        printf("blas_selftest: all passed\n");
    return failures ? 1 : 0;
}
