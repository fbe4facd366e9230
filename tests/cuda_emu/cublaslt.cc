/*
 * cublaslt.cc - cudaemu's cuBLASLt: the matrix products of ampc's CUDA
 * backend (src/backend/cuda/gemm.cu) computed on the CPU, with the argument
 * checks a GPU would otherwise answer with a fault, garbage or an error.
 * Semantics: NVIDIA's cuBLASLt documentation,
 * https://docs.nvidia.com/cuda/cublas/index.html (cuBLASLt API).
 *
 * Column-major, as cuBLASLt: element (i, j) of batch b of a layout {rows,
 * cols, ld, batch count, batch stride} is element b * stride + j * ld + i,
 * and per batch D = epilogue(alpha op(A) op(B) + beta C [+ bias]), op(A)
 * m x k, op(B) k x n, C and D m x n, the bias one value per row of D.
 *
 * Precision: f32 accumulation, one fused multiply-add per term in
 * increasing k: CUBLAS_COMPUTE_32F's arithmetic (its tensor-core kernels
 * too sum f32 products of exact 16-bit inputs); only the order differs
 * from a GPU, so the tolerances a GPU needs are needed here (double would
 * hide them). CUBLAS_COMPUTE_32F_FAST_TF32 first rounds each f32 element of
 * A and B to TF32 (10 explicit mantissa bits, to nearest, ties away, as
 * cvt.rna.tf32.f32). alpha acc + beta C, bias and activation are f32, then
 * one rounding into D's type (nearest even, NaN kept, overflow to inf).
 * beta == 0 does not read C. RELU sends NaN to 0 (as GPUs are reported to;
 * the docs say max(x, 0)); GELU is the tanh approximation. The GELU_AUX
 * forms also store the GELU's input (alpha acc + beta C + bias, f32) into
 * the aux matrix, rounded once into its type (EPILOGUE_AUX_DATA_TYPE,
 * default -1: D's type, the only one accepted here): element (i, j) of
 * batch b at b * AUX_BATCH_STRIDE + j * AUX_LD + i, D's shape.
 *
 * Supported (scale type R_32F, bias of D's type), a subset of the docs'
 * "Datatypes Supported" table of cublasLtMatmul; else NOT_SUPPORTED:
 *     computeType                         A = B     C = D
 *     COMPUTE_32F, COMPUTE_32F_PEDANTIC   R_32F     R_32F
 *                                         R_16F     R_16F or R_32F
 *                                         R_16BF    R_16BF or R_32F
 *     COMPUTE_32F_FAST_TF32               R_32F     R_32F
 * with epilogues DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS, GELU_AUX,
 * GELU_AUX_BIAS, column order, host pointer mode, TRANSA / TRANSB N or T.
 *
 * INVALID_VALUE, with a "cudaemu:" line on stderr: shapes of op(A), op(B),
 * C, D that disagree; ld < rows; batch counts that differ; D's batches
 * sharing memory; C == D with another layout; C and D of other types; a
 * *_BIAS epilogue without a bias or with one not aligned to its element;
 * a GELU_AUX epilogue whose EPILOGUE_AUX_LD is not a multiple of 8 or is
 * less than D's rows (docs, EPILOGUE_AUX_LD, for the GELU input: a
 * multiple of 8, at least D's rows; its default 0 fails that), whose
 * AUX_BATCH_STRIDE is not a multiple of 8 or makes the aux batches share
 * memory, whose AUX_DATA_TYPE is neither -1 nor D's type, whose aux is
 * not aligned to its element, or (cublasLtMatmul) NULL;
 * an algo not from the heuristic, or chosen for other types, transposes
 * or epilogue; a workspace smaller than the algo needs or not 256-byte
 * aligned; NULL or wrong-size arguments. Also through emu::misuse, as a
 * GPU would fault or silently go wrong: memory that is not device memory
 * over the whole extent touched; A, B, C, D less aligned than the
 * heuristic was told (PREF_MIN_ALIGNMENT_*_BYTES, 256 when unset), a bias
 * or an aux less aligned than when it saw it (docs: the heuristic takes
 * their alignment from the pointers); D sharing memory with A, B, or with
 * a C other than D itself; the aux sharing memory with A, B, C, D or the
 * bias; host-mode alpha / beta in device memory; destroyed
 * or unknown handles and descriptors. The heuristic gives one algo,
 * deterministically, asking min(MAX_WORKSPACE_BYTES, 4 KiB) of workspace
 * (overwritten by cublasLtMatmul); none (NOT_SUPPORTED) with the
 * environment's CUDAEMU_LT_REFUSE=all, or =epilogue for non-default
 * epilogues, so that callers' fallbacks get tested. Work is synchronous;
 * the stream is not used. CUDAEMU_VERBOSE=1 says why NOT_SUPPORTED.
 */
#include <cublasLt.h>

#include "emu.h"

#include <inttypes.h>
#include <math.h>
#include <mutex>
#include <new>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unordered_map>
#include <vector>

namespace {

const cublasStatus_t OK = CUBLAS_STATUS_SUCCESS, INVALID = CUBLAS_STATUS_INVALID_VALUE,
                     UNSUPPORTED = CUBLAS_STATUS_NOT_SUPPORTED;

/* ---- Number formats ---- */

uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) /* zero or subnormal: m units of 2^-24 */
        return sign ? -ldexpf((float)m, -24) : ldexpf((float)m, -24);
    return float_of(sign | (e == 31 ? 0x7f800000 : (e + 112) << 23) | m << 13); /* bias 15 -> 127 */
}

uint16_t f32_to_f16(float f)
{
    const uint32_t x = bits_of(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax > 0x7f800000) /* NaN stays a quiet NaN */
        return (uint16_t)(sign | 0x7e00 | (ax >> 13 & 0x3ff));
    if (ax >= 0x477ff000) /* >= 65520, halfway past 65504: inf */
        return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000) /* below 2^-14: scaled exactly to units of 2^-24, rounded */
        return (uint16_t)(sign | (uint32_t)nearbyintf(float_of(ax) * 16777216.0f));
    const uint32_t r = ax - 0x38000000; /* bias 127 -> 15, then 23 -> 10 bits, ties to even */
    return (uint16_t)(sign | (r + 0xfff + (r >> 13 & 1)) >> 13);
}

uint16_t f32_to_bf16(float f)
{
    const uint32_t x = bits_of(f);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)(x >> 16 | 0x40);
    return (uint16_t)((x + 0x7fff + (x >> 16 & 1)) >> 16); /* ties to even; a carry reaches inf */
}

float to_tf32(float f)
{
    const uint32_t x = bits_of(f);
    return (x & 0x7f800000) == 0x7f800000 ? f : float_of((x + 0x1000) & ~0x1fffu); /* +half ulp, cut */
}

size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16F || t == CUDA_R_16BF ? 2 : 0; }

float load(cudaDataType t, const void *base, uint64_t i)
{
    uint32_t v = 0;
    memcpy(&v, (const char *)base + i * type_size(t), type_size(t)); /* little-endian */
    return t == CUDA_R_32F ? float_of(v) : t == CUDA_R_16F ? f16_to_f32((uint16_t)v) : float_of(v << 16);
}

void store(cudaDataType t, void *base, uint64_t i, float f)
{
    const uint32_t v = t == CUDA_R_32F ? bits_of(f) : t == CUDA_R_16F ? f32_to_f16(f) : f32_to_bf16(f);
    memcpy((char *)base + i * type_size(t), &v, type_size(t));
}

/* ---- Objects: plain structs behind the opaque pointers, registered
 * while alive so that a stale or foreign one is caught ---- */

enum Kind { HANDLE, LAYOUT, DESC, PREF };

struct Handle { int unused; };
struct Layout {
    cudaDataType type;
    int32_t order, batch;
    uint64_t rows, cols;
    int64_t ld, stride, plane;
};
struct Desc {
    cublasComputeType_t compute;
    cudaDataType scale;
    int32_t pointer_mode, ta, tb, tc, fill, bias_type; /* bias_type -1: D's */
    uint32_t epilogue;
    const void *bias;
    int64_t bias_stride;
    void *aux;                      /* the GELU_AUX output */
    int64_t aux_ld, aux_stride;     /* elements; default 0 */
    int32_t aux_type;               /* -1: D's */
};
struct Pref {
    uint64_t max_workspace, impl;
    uint32_t align[4], search, reduction; /* align: A, B, C, D */
    float waves;
};
/* What the heuristic writes into a cublasLtMatmulAlgo_t (no padding bytes). */
struct Algo {
    uint64_t magic, signature, workspace;
    uint32_t align[4], bias_align, aux_align;
};
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t), "Algo must fit cublasLtMatmulAlgo_t");
const uint64_t kAlgoMagic = 0x63756461656d754cull, kWorkspace = 4096;

std::mutex registry_mutex;
std::unordered_map<const void *, Kind> registry;

template <class T> T *live(const void *p, Kind k)
{
    std::lock_guard<std::mutex> g(registry_mutex);
    auto it = registry.find(p);
    return it != registry.end() && it->second == k ? (T *)const_cast<void *>(p) : nullptr;
}

/* A status, said on stderr when it is INVALID (a caller's bug) or when
 * CUDAEMU_VERBOSE is set (NOT_SUPPORTED is a refusal callers expect). */
__attribute__((format(printf, 2, 3))) cublasStatus_t note(cublasStatus_t s, const char *fmt, ...)
{
    if (s == INVALID || getenv("CUDAEMU_VERBOSE")) {
        va_list ap;
        va_start(ap, fmt);
        fputs(s == INVALID ? "cudaemu: " : "cudaemu: not supported: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    return s;
}

/* What a GPU would fault on or get silently wrong: emu::misuse, INVALID. */
__attribute__((format(printf, 1, 2))) cublasStatus_t misused(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    emu::misuse("%s", msg);
    return INVALID;
}

template <class T, class H> cublasStatus_t make(H *out, Kind k, const T &init, const char *who)
{
    if (!out)
        return note(INVALID, "%s: NULL output pointer", who);
    T *o = new (std::nothrow) T(init);
    if (o) {
        std::lock_guard<std::mutex> g(registry_mutex);
        registry[o] = k;
    }
    *out = (H)o;
    return o ? OK : CUBLAS_STATUS_ALLOC_FAILED;
}

template <class T> cublasStatus_t destroy(const void *p, Kind k, const char *who)
{
    std::lock_guard<std::mutex> g(registry_mutex);
    auto it = registry.find(p);
    if (!p)
        return OK;
    if (it == registry.end() || it->second != k)
        return misused("%s: %p is not live (destroyed twice?)", who, p);
    registry.erase(it);
    delete (T *)const_cast<void *>(p);
    return OK;
}

/* Attributes: where each value goes in its object, and its size. */
struct Field {
    int attr;
    size_t offset, size;
};
#define FIELD(attr, T, member) Field{attr, offsetof(T, member), sizeof(T::member)}
const Field kLayoutFields[] = {
    FIELD(CUBLASLT_MATRIX_LAYOUT_TYPE, Layout, type), FIELD(CUBLASLT_MATRIX_LAYOUT_ORDER, Layout, order),
    FIELD(CUBLASLT_MATRIX_LAYOUT_ROWS, Layout, rows), FIELD(CUBLASLT_MATRIX_LAYOUT_COLS, Layout, cols),
    FIELD(CUBLASLT_MATRIX_LAYOUT_LD, Layout, ld),     FIELD(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, Layout, batch),
    FIELD(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, Layout, stride),
    FIELD(CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, Layout, plane)};
const Field kDescFields[] = {
    FIELD(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, Desc, compute), FIELD(CUBLASLT_MATMUL_DESC_SCALE_TYPE, Desc, scale),
    FIELD(CUBLASLT_MATMUL_DESC_POINTER_MODE, Desc, pointer_mode), FIELD(CUBLASLT_MATMUL_DESC_TRANSA, Desc, ta),
    FIELD(CUBLASLT_MATMUL_DESC_TRANSB, Desc, tb), FIELD(CUBLASLT_MATMUL_DESC_TRANSC, Desc, tc),
    FIELD(CUBLASLT_MATMUL_DESC_FILL_MODE, Desc, fill), FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE, Desc, epilogue),
    FIELD(CUBLASLT_MATMUL_DESC_BIAS_POINTER, Desc, bias),
    FIELD(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, Desc, bias_stride),
    FIELD(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, Desc, bias_type),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, Desc, aux),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, Desc, aux_ld),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, Desc, aux_stride),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, Desc, aux_type)};
const Field kPrefFields[] = {
    FIELD(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, Pref, max_workspace),
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, offsetof(Pref, align) + 0, 4},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, offsetof(Pref, align) + 4, 4},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, offsetof(Pref, align) + 8, 4},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, offsetof(Pref, align) + 12, 4},
    FIELD(CUBLASLT_MATMUL_PREF_SEARCH_MODE, Pref, search), FIELD(CUBLASLT_MATMUL_PREF_IMPL_MASK, Pref, impl),
    FIELD(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, Pref, reduction),
    FIELD(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, Pref, waves)};

/* Docs (the *SetAttribute functions): INVALID_VALUE when buf is NULL or
 * sizeInBytes is not the attribute's size. */
template <class T, size_t N>
cublasStatus_t set_field(const void *obj, Kind k, const Field (&fields)[N], int attr, const void *buf, size_t size,
                         const char *who)
{
    T *o = live<T>(obj, k);
    if (!o)
        return misused("%s: %p is not live (destroyed?)", who, obj);
    for (const Field &f : fields)
        if (f.attr == attr) {
            if (!buf || size != f.size)
                return note(INVALID, "%s: attribute %d: %zu bytes at %p, expected %zu", who, attr, size, buf, f.size);
            memcpy((char *)o + f.offset, buf, size);
            return OK;
        }
    return note(UNSUPPORTED, "%s: attribute %d is not emulated", who, attr);
}

/* ---- Layout geometry ---- */

/* Bytes from a matrix's first element to one past its last, all batches
 * (ld and strides >= 0); false on overflow. */
bool span(const Layout &l, uint64_t *bytes)
{
    uint64_t one, all;
    *bytes = 0;
    return l.rows == 0 || l.cols == 0 ||
           !(__builtin_mul_overflow(l.cols - 1, (uint64_t)l.ld, &one) || __builtin_add_overflow(one, l.rows, &one) ||
             __builtin_mul_overflow((uint64_t)(l.batch - 1), (uint64_t)l.stride, &all) ||
             __builtin_add_overflow(all, one, &all) || __builtin_mul_overflow(all, type_size(l.type), bytes));
}

/* Calls f(first element, count) for each column of each batch. */
template <class F> void each_column(const Layout &l, F f)
{
    for (int64_t b = 0; b < l.batch; b++)
        for (uint64_t j = 0; j < l.cols; j++)
            f((uint64_t)(b * l.stride) + j * (uint64_t)l.ld, l.rows);
}

/* Whether two batches of l share an element (ld >= rows keeps the
 * columns of one batch apart). Exact: interleaved batches are fine. */
bool batches_overlap(const Layout &l)
{
    uint64_t bytes;
    if (l.batch < 2 || l.rows == 0 || l.cols == 0 || (uint64_t)l.stride >= (l.cols - 1) * l.ld + l.rows)
        return false;
    span(l, &bytes);
    std::vector<uint8_t> used(bytes / type_size(l.type));
    bool hit = false;
    each_column(l, [&](uint64_t first, uint64_t count) {
        for (uint64_t e = first; e < first + count; e++)
            hit |= used[e]++ != 0;
    });
    return hit;
}

/* Whether an element of (x, lx) shares a byte with one of (d, ld). */
bool shares_memory(const void *x, const Layout &lx, const void *d, const Layout &ld)
{
    uint64_t nx, nd;
    span(lx, &nx), span(ld, &nd);
    const uintptr_t x0 = (uintptr_t)x, d0 = (uintptr_t)d;
    if (nx == 0 || nd == 0 || x0 + nx <= d0 || d0 + nd <= x0)
        return false; /* the common case: apart */
    const size_t sx = type_size(lx.type), sd = type_size(ld.type);
    std::vector<uint8_t> mark(nd);
    each_column(ld, [&](uint64_t first, uint64_t count) { memset(&mark[first * sd], 1, count * sd); });
    bool hit = false;
    each_column(lx, [&](uint64_t first, uint64_t count) {
        for (uintptr_t p = x0 + first * sx; p < x0 + (first + count) * sx; p++)
            hit |= p >= d0 && p < d0 + nd && mark[p - d0];
    });
    return hit;
}

bool same_layout(const Layout &a, const Layout &b)
{
    return a.type == b.type && a.order == b.order && a.rows == b.rows && a.cols == b.cols && a.ld == b.ld &&
           a.batch == b.batch && (a.batch == 1 || a.stride == b.stride) && a.plane == b.plane;
}

uint32_t align_of(const void *p) /* the largest power of two dividing p, at most 256 */
{
    const uintptr_t v = (uintptr_t)p | 256;
    return (uint32_t)(v & (~v + 1));
}

/* ---- The problem a descriptor and four layouts describe ---- */

struct Problem {
    const Desc *desc;
    const Layout *a, *b, *c, *d;
    Layout aux_layout; /* the aux matrix, when aux: D's shape and batches */
    uint64_t m, n, k, signature;
    bool tf32, bias, aux; /* round inputs to TF32; the epilogue adds a bias; writes aux */
};

const struct {
    cublasComputeType_t compute;
    cudaDataType ab, cd;
} kSupported[] = {
    {CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F},  {CUBLAS_COMPUTE_32F, CUDA_R_16F, CUDA_R_16F},
    {CUBLAS_COMPUTE_32F, CUDA_R_16F, CUDA_R_32F},  {CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_16BF},
    {CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_32F}, {CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_32F},
};

/* What the heuristic and the product check alike: objects alive, types
 * in the table, shapes that agree, leading dimensions, batches. */
cublasStatus_t examine(const char *who, cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                       cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                       Problem *p)
{
    static const char names[] = "ABCD";
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!live<Handle>(h, HANDLE))
        return misused("%s: handle %p is not live", who, (void *)h);
    if (!desc || !Adesc || !Bdesc || !Cdesc || !Ddesc)
        return note(INVALID, "%s: NULL descriptor or layout", who);
    if (!(p->desc = live<Desc>(desc, DESC)))
        return misused("%s: matmul descriptor %p is not live", who, (void *)desc);
    const Layout **ls[4] = {&p->a, &p->b, &p->c, &p->d};
    const cublasLtMatrixLayout_t hs[4] = {Adesc, Bdesc, Cdesc, Ddesc};
    for (int i = 0; i < 4; i++)
        if (!(*ls[i] = live<Layout>(hs[i], LAYOUT)))
            return misused("%s: layout of %c (%p) is not live", who, names[i], (void *)hs[i]);
    const Desc &s = *p->desc;
    const Layout &a = *p->a, &b = *p->b, &c = *p->c, &d = *p->d, *all[4] = {p->a, p->b, p->c, p->d};

    /* Types and modes: the table at the top. */
    if (c.type != d.type) /* docs: C and D have the same type */
        return note(INVALID, "%s: C (type %d) and D (type %d) differ", who, c.type, d.type);
    bool known = false;
    for (const auto &row : kSupported)
        known |= (row.compute == s.compute ||
                  (row.compute == CUBLAS_COMPUTE_32F && s.compute == CUBLAS_COMPUTE_32F_PEDANTIC)) &&
                 row.ab == a.type && row.ab == b.type && row.cd == d.type;
    if (!known || s.scale != CUDA_R_32F)
        return note(UNSUPPORTED, "%s: compute %d, scale %d, A %d, B %d, D %d", who, s.compute, s.scale, a.type, b.type,
                    d.type);
    bool orders = true;
    for (const Layout *l : all)
        orders &= l->order == CUBLASLT_ORDER_COL && l->plane == 0;
    const uint32_t e = s.epilogue;
    p->bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
              e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    p->aux = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    if (!orders || s.pointer_mode != CUBLASLT_POINTER_MODE_HOST || s.fill != CUBLAS_FILL_MODE_FULL ||
        s.tc != CUBLAS_OP_N || (s.bias_type != -1 && s.bias_type != (int32_t)d.type) ||
        !(p->bias || p->aux || e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_RELU ||
          e == CUBLASLT_EPILOGUE_GELU))
        return note(UNSUPPORTED, "%s: layout order, pointer mode, fill mode, TRANSC, bias type or epilogue %u", who, e);
    for (int32_t t : {s.ta, s.tb}) {
        if (t == CUBLAS_OP_C || t == CUBLAS_OP_CONJG)
            return note(UNSUPPORTED, "%s: conjugate transposes", who);
        if (t != CUBLAS_OP_N && t != CUBLAS_OP_T)
            return note(INVALID, "%s: TRANSA / TRANSB value %d is not a cublasOperation_t", who, t);
    }

    /* Shapes: op(A) m x k, op(B) k x n, C and D m x n. */
    const bool ta = s.ta == CUBLAS_OP_T, tb = s.tb == CUBLAS_OP_T;
    p->m = ta ? a.cols : a.rows, p->k = ta ? a.rows : a.cols, p->n = tb ? b.rows : b.cols;
    const uint64_t kb = tb ? b.cols : b.rows;
    if (kb != p->k || d.rows != p->m || d.cols != p->n || c.rows != p->m || c.cols != p->n)
        return note(INVALID,
                    "%s: op(A) %" PRIu64 "x%" PRIu64 ", op(B) %" PRIu64 "x%" PRIu64 ", C %" PRIu64 "x%" PRIu64
                    ", D %" PRIu64 "x%" PRIu64 " do not make a product",
                    who, p->m, p->k, kb, p->n, c.rows, c.cols, d.rows, d.cols);
    const bool c_is_d = Cdesc == Ddesc || same_layout(c, d);
    for (int i = 0; i < 4; i++) {
        const Layout &l = *all[i];
        uint64_t bytes;
        if (l.rows > INT32_MAX || l.cols > INT32_MAX || l.stride < 0 || s.bias_stride < 0)
            return note(UNSUPPORTED, "%s: %c: over 2^31 - 1 rows or columns, or a negative stride", who, names[i]);
        /* Docs (CUBLASLT_MATRIX_LAYOUT_LD): ld >= rows in column order; an
         * out-of-place C may have ld 0 (docs, cublasLtMatmul: broadcast). */
        if (l.ld < 0 || ((uint64_t)l.ld < l.rows && !(i == 2 && !c_is_d && l.ld == 0)))
            return note(INVALID, "%s: ld %" PRId64 " of %c is less than its %" PRIu64 " rows", who, l.ld, names[i],
                        l.rows);
        if (l.batch < 1 || l.batch != d.batch)
            return note(INVALID, "%s: batch count %d of %c, %d of D", who, l.batch, names[i], d.batch);
        if (!span(l, &bytes))
            return note(INVALID, "%s: %c spans more than 2^64 bytes", who, names[i]);
    }
    if (batches_overlap(d))
        return note(INVALID, "%s: batch stride %" PRId64 " makes D's batches share memory", who, d.stride);
    if (p->bias && (uintptr_t)s.bias % type_size(d.type))
        return note(INVALID, "%s: bias %p is not aligned to its %zu-byte elements", who, s.bias, type_size(d.type));
    if (p->aux) {
        /* Docs (EPILOGUE_AUX_LD, _BATCH_STRIDE, _DATA_TYPE): for the GELU
         * input, ld and batch stride in elements, multiples of 8, ld at
         * least D's rows; the type D's unless an fp8 case allows another. */
        if (s.aux_type != -1 && s.aux_type != (int32_t)d.type)
            return note(INVALID, "%s: EPILOGUE_AUX_DATA_TYPE %d with D of type %d", who, s.aux_type, d.type);
        p->aux_layout = Layout{d.type, CUBLASLT_ORDER_COL, d.batch, d.rows, d.cols, s.aux_ld, s.aux_stride, 0};
        const Layout &x = p->aux_layout;
        uint64_t bytes;
        if (x.ld % 8 || x.ld < 0 || (uint64_t)x.ld < x.rows)
            return note(INVALID, "%s: EPILOGUE_AUX_LD %" PRId64 " is not a multiple of 8 of at least D's %" PRIu64
                        " rows", who, x.ld, x.rows);
        if (x.batch > 1 && (x.stride % 8 || x.stride < 0 || batches_overlap(x)))
            return note(INVALID, "%s: EPILOGUE_AUX_BATCH_STRIDE %" PRId64 " is not a multiple of 8, or makes the "
                        "aux batches share memory", who, x.stride);
        if (!span(x, &bytes))
            return note(INVALID, "%s: the aux spans more than 2^64 bytes", who);
        if ((uintptr_t)s.aux % type_size(x.type))
            return note(INVALID, "%s: aux %p is not aligned to its %zu-byte elements", who, s.aux, type_size(x.type));
    }
    p->tf32 = s.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    /* What an algo is tied to (not the sizes): FNV-1a over these. */
    p->signature = 1469598103934665603ull;
    for (uint64_t f : {(uint64_t)s.compute, (uint64_t)a.type, (uint64_t)d.type, (uint64_t)e, (uint64_t)ta, (uint64_t)tb})
        p->signature = (p->signature ^ f) * 1099511628211ull;
    return OK;
}

float activate(uint32_t epilogue, float x)
{
    if (epilogue == CUBLASLT_EPILOGUE_RELU || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS)
        return x > 0.0f ? x : 0.0f; /* NaN -> 0 */
    if (epilogue == CUBLASLT_EPILOGUE_GELU || epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
        epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        const double v = x; /* 0.79788... = sqrt(2 / pi) */
        return (float)(0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
    }
    return x;
}

/* The product, device memory open. op(A) is packed by rows and op(B) by
 * columns (f32, TF32-rounded if asked): each dot product reads
 * contiguous memory. Element (i, j) of C is read before D's is written,
 * so C == D in place is safe. */
void multiply(const Problem &p, float alpha, float beta, const void *A, const void *B, const void *C, void *D)
{
    const Layout &a = *p.a, &b = *p.b, &c = *p.c, &d = *p.d;
    const uint64_t m = p.m, n = p.n, k = p.k;
    const bool ta = p.desc->ta == CUBLAS_OP_T, tb = p.desc->tb == CUBLAS_OP_T;
    std::vector<float> pa(m * k), pb(n * k);
    for (int64_t bt = 0; bt < d.batch; bt++) {
        const uint64_t oa = bt * a.stride, ob = bt * b.stride, oc = bt * c.stride, od = bt * d.stride;
        for (uint64_t q = 0; q < k; q++) {
            for (uint64_t i = 0; i < m; i++) {
                const float v = load(a.type, A, oa + (ta ? q + i * a.ld : i + q * a.ld));
                pa[i * k + q] = p.tf32 ? to_tf32(v) : v;
            }
            for (uint64_t j = 0; j < n; j++) {
                const float v = load(b.type, B, ob + (tb ? j + q * b.ld : q + j * b.ld));
                pb[j * k + q] = p.tf32 ? to_tf32(v) : v;
            }
        }
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                float acc = 0.0f;
                for (uint64_t q = 0; q < k; q++)
                    acc = fmaf(pa[i * k + q], pb[j * k + q], acc);
                float x = alpha * acc;
                if (beta != 0.0f) /* beta 0: C is not read (it may hold NaN) */
                    x = fmaf(beta, load(c.type, C, oc + i + j * c.ld), x);
                if (p.bias)
                    x += load(d.type, p.desc->bias, bt * p.desc->bias_stride + i);
                if (p.aux) /* the GELU's input, before the activation */
                    store(p.aux_layout.type, p.desc->aux, bt * p.aux_layout.stride + i + j * p.aux_layout.ld, x);
                store(d.type, D, od + i + j * d.ld, activate(p.desc->epilogue, x));
            }
    }
}

} // namespace

extern "C" {

/* ---- Handle, layouts, descriptors, preferences ---- */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle)
{
    return make(lightHandle, HANDLE, Handle{0}, "cublasLtCreate");
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle)
{
    if (!lightHandle)
        return note(INVALID, "cublasLtDestroy: NULL handle");
    return destroy<Handle>(lightHandle, HANDLE, "cublasLtDestroy");
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld)
{
    if ((int)type < CUDA_R_32F || type > CUDA_R_8F_E5M2)
        return note(INVALID, "cublasLtMatrixLayoutCreate: unknown type %d", (int)type);
    return make(matLayout, LAYOUT, Layout{type, CUBLASLT_ORDER_COL, 1, rows, cols, ld, 0, 0},
                "cublasLtMatrixLayoutCreate");
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout)
{
    return destroy<Layout>(matLayout, LAYOUT, "cublasLtMatrixLayoutDestroy");
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes)
{
    return set_field<Layout>(matLayout, LAYOUT, kLayoutFields, attr, buf, sizeInBytes,
                             "cublasLtMatrixLayoutSetAttribute");
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType)
{
    if (computeType < CUBLAS_COMPUTE_16F || computeType > CUBLAS_COMPUTE_32F_FAST_TF32 || (int)scaleType < CUDA_R_32F ||
        scaleType > CUDA_R_8F_E5M2)
        return note(INVALID, "cublasLtMatmulDescCreate: unknown compute type %d or scale type %d", (int)computeType,
                    (int)scaleType);
    return make(matmulDesc, DESC,
                Desc{computeType, scaleType, CUBLASLT_POINTER_MODE_HOST, CUBLAS_OP_N, CUBLAS_OP_N, CUBLAS_OP_N,
                     CUBLAS_FILL_MODE_FULL, -1, CUBLASLT_EPILOGUE_DEFAULT, nullptr, 0, nullptr, 0, 0, -1},
                "cublasLtMatmulDescCreate");
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)
{
    return destroy<Desc>(matmulDesc, DESC, "cublasLtMatmulDescDestroy");
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes)
{
    return set_field<Desc>(matmulDesc, DESC, kDescFields, attr, buf, sizeInBytes, "cublasLtMatmulDescSetAttribute");
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    /* Docs: no workspace allowed, and 256-byte alignment, unless told. */
    return make(pref, PREF, Pref{0, ~0ull, {256, 256, 256, 256}, 0, 7, 0.0f}, "cublasLtMatmulPreferenceCreate");
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    return destroy<Pref>(pref, PREF, "cublasLtMatmulPreferenceDestroy");
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t sizeInBytes)
{
    return set_field<Pref>(pref, PREF, kPrefFields, attr, buf, sizeInBytes, "cublasLtMatmulPreferenceSetAttribute");
}

/* ---- Heuristic and product ---- */

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount)
{
    const char *who = "cublasLtMatmulAlgoGetHeuristic";
    if (returnAlgoCount)
        *returnAlgoCount = 0;
    if (requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount || !preference)
        return note(INVALID, "%s: requestedAlgoCount %d, or a NULL result array, count or preference", who,
                    requestedAlgoCount);
    Problem p;
    const cublasStatus_t s = examine(who, lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &p);
    if (s != OK)
        return s;
    const Pref *pr = live<Pref>(preference, PREF);
    if (!pr)
        return misused("%s: preference %p is not live", who, (void *)preference);
    /* CUDAEMU_LT_REFUSE=all (or =epilogue: only non-default epilogues)
     * finds no algo, as a GPU may: the callers' fallback paths run. */
    const char *refuse = getenv("CUDAEMU_LT_REFUSE");
    if (refuse && (!strcmp(refuse, "all") ||
                   (!strcmp(refuse, "epilogue") && p.desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT)))
        return note(UNSUPPORTED, "%s: refused (CUDAEMU_LT_REFUSE=%s)", who, refuse);
    /* The bias and the aux are not touched here, but their addresses set
     * the alignment the algo may assume (docs, BIAS_POINTER and
     * EPILOGUE_AUX_POINTER). */
    const Algo a = {kAlgoMagic, p.signature, pr->max_workspace < kWorkspace ? pr->max_workspace : kWorkspace,
                    {pr->align[0], pr->align[1], pr->align[2], pr->align[3]}, align_of(p.desc->bias),
                    align_of(p.desc->aux)};
    cublasLtMatmulHeuristicResult_t &r = heuristicResultsArray[0];
    memset(&r, 0, sizeof r);
    memcpy(&r.algo, &a, sizeof a);
    r.workspaceSize = a.workspace;
    r.state = OK;
    r.wavesCount = 1.0f;
    *returnAlgoCount = 1;
    return OK;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream)
{
    const char *who = "cublasLtMatmul";
    (void)stream; /* the work is done before returning */
    Problem p;
    const cublasStatus_t s = examine(who, lightHandle, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &p);
    if (s != OK)
        return s;
    if (!alpha || !beta)
        return note(INVALID, "%s: NULL alpha or beta", who);
    if (emu::device_range(alpha, 0) || emu::device_range(beta, 0))
        return misused("%s: alpha or beta is device memory, but the pointer mode is HOST", who);
    float al, be;
    memcpy(&al, alpha, 4), memcpy(&be, beta, 4);

    /* The algo: the heuristic's, for this configuration. NULL means an
     * implicit heuristic with default preferences (docs, cublasLtMatmul). */
    Algo a = {kAlgoMagic, p.signature, 0, {256, 256, 256, 256}, align_of(p.desc->bias), align_of(p.desc->aux)};
    if (algo)
        memcpy(&a, algo, sizeof a);
    if (a.magic != kAlgoMagic || a.signature != p.signature)
        return note(INVALID, "%s: algo %p is not from the heuristic, or was chosen for other types, transposes or "
                    "epilogue", who, (const void *)algo);
    /* Docs: INVALID_VALUE for less workspace than the algo needs; the
     * workspace 256-byte aligned. */
    if (workspaceSizeInBytes < a.workspace || (a.workspace && !workspace) || (uintptr_t)workspace % 256)
        return note(INVALID, "%s: workspace %p of %zu bytes (256-byte aligned?), the algo needs %" PRIu64, who,
                    workspace, workspaceSizeInBytes, a.workspace);
    if (p.m == 0 || p.n == 0)
        return OK;
    const bool reads_ab = p.k > 0, reads_c = be != 0.0f;
    const void *bias = p.desc->bias;
    void *aux = p.desc->aux;
    if (!D || (reads_ab && (!A || !B)) || (reads_c && !C) || (p.bias && !bias) || (p.aux && !aux))
        return note(INVALID, "%s: NULL A, B, C, D, bias or aux (%p %p %p %p %p %p)", who, A, B, C, D, bias, aux);
    if (C == D && reads_c && !(Cdesc == Ddesc || same_layout(*p.c, *p.d))) /* docs: in place, Cdesc == Ddesc */
        return note(INVALID, "%s: C == D (in place) needs the same layout for both", who);

    /* Device memory over each whole extent touched; the alignment the
     * algo was chosen for; no input sharing memory with D. */
    const struct {
        char name;
        const void *ptr;
        const Layout *l;
        bool used;
        uint32_t align;
    } mats[4] = {{'A', A, p.a, reads_ab, a.align[0]}, {'B', B, p.b, reads_ab, a.align[1]},
                 {'C', C, p.c, reads_c, a.align[2]}, {'D', D, p.d, true, a.align[3]}};
    for (const auto &x : mats) {
        uint64_t bytes;
        span(*x.l, &bytes);
        if (x.used && !emu::device_range(x.ptr, bytes))
            return misused("%s: %c (%p, %" PRIu64 " bytes) is not device memory", who, x.name, x.ptr, bytes);
        if (x.used && x.align && (uintptr_t)x.ptr % x.align)
            return misused("%s: %c (%p) is less aligned than the algo's %u bytes "
                           "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)", who, x.name, x.ptr, x.align, x.name);
        if (x.used && x.name != 'D' && !(x.name == 'C' && C == D) && shares_memory(x.ptr, *x.l, D, *p.d))
            return misused("%s: D (%p) shares memory with %c (%p)", who, D, x.name, x.ptr);
    }
    const size_t bias_bytes = p.bias ? ((p.d->batch - 1) * p.desc->bias_stride + p.m) * type_size(p.d->type) : 0;
    if (p.bias && !emu::device_range(bias, bias_bytes))
        return misused("%s: bias (%p, %zu bytes) is not device memory", who, bias, bias_bytes);
    if (p.bias && align_of(bias) < a.bias_align)
        return misused("%s: bias %p is less aligned than the %u bytes it had for the heuristic", who, bias,
                       a.bias_align);
    if (p.aux) {
        const Layout &x = p.aux_layout;
        uint64_t bytes;
        span(x, &bytes);
        if (!emu::device_range(aux, bytes))
            return misused("%s: aux (%p, %" PRIu64 " bytes) is not device memory", who, aux, bytes);
        if (align_of(aux) < a.aux_align)
            return misused("%s: aux %p is less aligned than the %u bytes it had for the heuristic", who, aux,
                           a.aux_align);
        /* The aux is written: no operand may share memory with it. */
        for (const auto &o : mats)
            if (o.used && shares_memory(aux, x, o.ptr, *o.l))
                return misused("%s: aux (%p) shares memory with %c (%p)", who, aux, o.name, o.ptr);
        const Layout bl = {p.d->type, CUBLASLT_ORDER_COL, p.d->batch, p.m, 1, (int64_t)p.m, p.desc->bias_stride, 0};
        if (p.bias && shares_memory(aux, x, bias, bl))
            return misused("%s: aux (%p) shares memory with the bias (%p)", who, aux, bias);
    }
    if (a.workspace && !emu::device_range(workspace, a.workspace))
        return misused("%s: workspace (%p, %" PRIu64 " bytes) is not device memory", who, workspace, a.workspace);

    try {
        emu::device_scope scope;
        if (a.workspace) /* the algo's scratch: nothing survives in it */
            memset(workspace, 0xa5, a.workspace);
        multiply(p, al, be, A, B, C, D);
    } catch (const std::bad_alloc &) {
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    return OK;
}

} // extern "C"
