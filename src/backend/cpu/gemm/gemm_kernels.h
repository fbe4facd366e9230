/*
 * gemm_kernels.h - the GEMM below its dispatcher (dispatch.c): the drivers
 * that run one product on a given kernel, and the interfaces between the
 * drivers and their micro-kernels and packers. Nothing here chooses a
 * path; dispatch.c does, and nothing here calls it.
 *
 *   gemm.c            the widening driver: any float dtypes, panels
 *                     widened to f32 while packing, f32 FMA micro-kernels
 *                     (AVX-512, AVX2 in gemm_x86.c; a portable C one)
 *   gemm_bf16.c       the drivers over 16-bit operands on native dot
 *                     products (bf16 pairs; the f16 split into bf16): a
 *                     blocked one, and a gemv for a few rows
 *   gemm_bf16_x86.c   their kernels: VDPBF16PS, AMX-BF16, and AMX on the
 *                     f16 split, whose packers are gemm_f16_split.c's
 *   gemv_f32.c        f32 products of a few rows with B transposed,
 *                     unpacked (AVX-512 and a portable kernel)
 */
#ifndef AMPC_GEMM_KERNELS_H
#define AMPC_GEMM_KERNELS_H

#include "backend/cpu/gemm/gemm_common.h"

/* ---- what both drivers share (gemm_common.c) ---- */

/* The error for packing buffers an M x N x K product could not have. */
amp_status gemm_packing_failed(int64_t M, int64_t N, int64_t K);

/* In how many slices a B block of n_panels panels goes to the threads:
 * 1 when A's m_panels panels keep the nt threads busy, else enough that
 * there are about 8 items a thread (at most one slice a panel). */
static inline int64_t gemm_b_slices(int64_t n_panels, int64_t m_panels, int nt)
{
    const int64_t want = 8 * (int64_t)nt;
    const int64_t slices = m_panels >= want ? 1 : (want + m_panels - 1) / m_panels;
    return slices > n_panels ? n_panels : slices;
}

/* ---- the widening driver (gemm.c) and its per-ISA kernels (gemm_x86.c) ---- */

/* gemm_lowp's product (gemm.h) on the f32 FMA kernels, in any float
 * dtypes: panels widened to f32 while packing, every product accumulated
 * in f32, each output rounded to C's dtype once; ep (NULL: none) runs
 * over each block of C as it becomes final. Sets gemm_path when a
 * micro-kernel runs (not for M, N or K of 0, or alpha 0). */
amp_status gemm_widen(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                      amp_dtype a_dt, int64_t lda, const void *B, amp_dtype b_dt, int64_t ldb, float beta, void *C,
                      amp_dtype c_dt, int64_t ldc, const gemm_epilogue *ep);

/* The micro-kernel gemm_widen runs on this CPU: "avx512 12x32", "avx2
 * 6x16" or "portable 4x16", honouring amp_cpu_limit. */
const char *gemm_widen_kernel_name(void);

/* One MR x NR tile: C = alpha * (a . b) + beta * C over kc steps, where a
 * is a packed panel a[k * MR + r] and b a packed panel b[k * NR + j]
 * (64-byte aligned). beta == 0 must not read C. */
typedef void (*gemm_micro_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                              float alpha, float beta);

typedef struct {
    int mr, nr;
    gemm_micro_fn micro;
    const char *name;
} gemm_kernel;

#if defined(__x86_64__)
extern const gemm_kernel gemm_kernel_avx512; /* 12 x 32, AVX-512F + FMA */
extern const gemm_kernel gemm_kernel_avx2;   /* 6 x 16, AVX2 + FMA */

/* gemm_x86.c (AVX-512F): pack w lines over kc steps into dst[k * R + r],
 * zeroing lines w .. R-1 (R <= 32), 16-bit values widened exactly to f32
 * on the way: _lines for lines at s + r * rs with unit stride along k,
 * _cols16 for element (r, k) at s[r + k * ks]. */
void gemm_pack_lines_avx512(const float *s, int64_t rs, int w, int R, int64_t kc, float *dst);
void gemm_pack_lines16_avx512(const uint16_t *s, bool bf16, int64_t rs, int w, int R, int64_t kc, float *dst);
void gemm_pack_cols16_avx512(const uint16_t *s, bool bf16, int64_t ks, int w, int R, int64_t kc, float *dst);
/* A 16-bit C tile, mr x nr (nr a multiple of 16), to and from an f32 tile
 * (row stride tl), with amp_convert's exact widening and rounding. */
void gemm_c16_widen_avx512(const uint16_t *c, int64_t ldc, bool bf16, int mr, int nr, float *t, int64_t tl);
void gemm_c16_round_avx512(const float *t, int64_t tl, int mr, int nr, bool bf16, uint16_t *c, int64_t ldc);
#endif

/* ---- 16-bit operands on native dot products (gemm_bf16.c, gemm_bf16_x86.c) ---- */

/* One MR x NR tile over kp pairs of k, all in f32: C = alpha * acc + beta
 * * C, beta == 0 not reading C. Each 32-bit word of a packed panel holds a
 * pair of bf16 along k, the even k in the low half. b is always pair-major,
 * b[p * NR + j] = (B[2p][j], B[2p+1][j]); a is pair-major, a[p * MR + r]
 * (VDPBF16PS), or row-major, a[r * kp + p] (AMX tiles). kp is a multiple
 * of the kernel's kpair. Panels are 64-byte aligned. */
typedef void (*gemm_bf16_micro_fn)(int64_t kp, const uint32_t *a, const uint32_t *b, float *c,
                                   int64_t ldc, float alpha, float beta);

/* Packs lines 0 .. w-1 (of R) over k 0 .. kc-1 of an operand whose element
 * (line q, k) is s[q * rs + k * ks] (rs or ks is 1) into kp pairs, in the
 * kernel's layout; zero words pad lines w .. R-1, an odd kc's last pair
 * and the pairs past kc. Returns whether the panel holds an infinity that
 * needs the kernel's pack_a_inf for A (only the f16 split's B packer says
 * so; every other packer returns false). */
typedef bool (*gemm_bf16_pack_fn)(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc,
                                  int64_t kp, uint32_t *dst);

/* A 16-bit C tile: the f32 tile t (mr x nr, row stride tl) gets beta * C
 * added first when add_beta, then is rounded into C (c, row stride ldc,
 * bf16 or f16) when store; bit-identical to amp_convert of the sum. */
typedef void (*gemm_bf16_finish_fn)(float *t, int64_t tl, int mr, int nr, uint16_t *c, int64_t ldc,
                                    bool is_bf16, bool add_beta, float beta, bool store);

/* Few rows without packing (gemm_bf16.c's gemv): out[i * ldo + j] =
 * sum_k a[i * lda + k] * b[j * ldb + k] in f32 for rows i < M (1 .. 4) of
 * a and lines j < n of b, both contiguous along k, on the kernel's dot
 * instruction (same exact products and subnormal flushing, another
 * summation order). */
typedef void (*gemm_bf16_rowdot_fn)(int M, int64_t K, const uint16_t *a, int64_t lda, const uint16_t *b,
                                    int64_t ldb, int64_t n, float *out, int64_t ldo);

typedef struct gemm_bf16_kernel {
    int mr, nr;
    int kpair;              /* kp is padded (with zero pairs) to a multiple of this */
    int kc, nc;             /* the blocking: k per B block (even), columns per B block */
    int a_words2k, b_words2k; /* 32-bit words per 2 k in packed A and B lines: 1 (0 reads
                             * as 1) for bf16 pairs; the f16 split (gemm_f16_split.c) packs
                             * 2 words per k of A (4) and 1 of B (2). kp counts A's words;
                             * B panels hold kp * b_words2k / a_words2k words per line. */
    double par_min;         /* multiply-adds below which one thread is faster */
    gemm_bf16_micro_fn micro;
    gemm_bf16_pack_fn pack_a, pack_b;
    gemm_bf16_pack_fn pack_a_inf; /* A for K blocks whose B panels hold an inf, or NULL */
    gemm_bf16_finish_fn finish16;
    gemm_bf16_rowdot_fn rowdot; /* the few-row path, or NULL (never for the f16 split) */
    void (*enter)(void);    /* per thread, before its first micro call (AMX tile config) */
    void (*leave)(void);    /* per thread, after its last one */
    const char *name;
} gemm_bf16_kernel;

/* gemm_lowp's product (M, N, K > 0, alpha != 0) on the given kernel,
 * whose packers read the 16-bit A and B: the blocked driver, for bf16
 * pairs and the f16 split alike. c_dt: f32, f16 or bf16. */
amp_status gemm_bf16_drive(const gemm_bf16_kernel *kern, bool trans_a, bool trans_b, int64_t M, int64_t N,
                           int64_t K, float alpha, const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                           float beta, void *C, amp_dtype c_dt, int64_t ldc, const gemm_epilogue *ep);

/* The most rows the gemv takes. */
#define GEMM_GEMV_MAX_M 8

/* The same product with B transposed and M <= GEMM_GEMV_MAX_M, on the
 * kernel's rowdot (not NULL) without packing: each output a dot product
 * of A's row with B's row where they lie. */
amp_status gemm_bf16_gemv(const gemm_bf16_kernel *kern, bool trans_a, int64_t M, int64_t N, int64_t K, float alpha,
                          const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta, void *C,
                          amp_dtype c_dt, int64_t ldc, const gemm_epilogue *ep);

/* The most rows the f32 gemv takes: its kernel's 4 at a time, so W is
 * read once. */
#define GEMM_F32_GEMV_MAX_M 4

/* C = alpha * A B^T + beta * C in f32 for 1 .. GEMM_F32_GEMV_MAX_M rows
 * of A (M x K, rows contiguous) and B [N x K] (gemv_f32.c): each output a
 * dot product of A's row with B's row where they lie, parallel over N;
 * ep runs on each finished strip of columns. */
amp_status gemm_f32_gemv(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const gemm_epilogue *ep);
/* Its kernel on this CPU: "avx512 gemv" or "c gemv". */
const char *gemm_f32_gemv_name(void);

#if defined(__x86_64__)
extern const gemm_bf16_kernel gemm_bf16_kernel_dot; /* 12 x 32, AVX512-BF16 */
extern const gemm_bf16_kernel gemm_bf16_kernel_amx; /* 32 x 32, AMX-BF16 */
/* AMX-BF16 on f16 operands split into bf16 (gemm_f16_split.c's packers):
 * 32 x 32, each B tile multiplied by the hi and the lo A tile. */
extern const gemm_bf16_kernel gemm_f16_kernel_amx;
/* gemm_f16_split.c's packers (gemm_bf16_pack_fn over f16 bits): AMX's
 * row-major A panel (nearest split, or the one for B blocks holding an
 * inf) and pair-major B panel of the split operands. */
bool gemm_f16_pack_a_split(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc, int64_t kp,
                           uint32_t *dst);
bool gemm_f16_pack_a_split_inf(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc, int64_t kp,
                               uint32_t *dst);
bool gemm_f16_pack_b_split(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc, int64_t kp,
                           uint32_t *dst);
/* Whether this CPU and OS let the process use AMX tiles (asks Linux for
 * the permission once). */
bool gemm_amx_usable(void);
#endif

#endif
