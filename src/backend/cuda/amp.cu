/*
 * amp.cu - the grad scaler and the optimizers on the device, so that an
 * AMP iteration never waits for the GPU:
 *
 *   unscale  one multi-tensor launch over all of an optimizer's gradients:
 *            multiply by 1/scale (computed on the device, in double, from
 *            the scale tensor) and raise found_inf on any inf/NaN;
 *   step     one multi-tensor SGD or Adam/AdamW launch that reads found_inf
 *            and leaves everything (parameters, state, step counts) as it
 *            was when it is set, then a tiny launch that counts the step;
 *   update   one thread applies PyTorch's _amp_update_scale_ rule to the
 *            scale, the growth tracker and the history.
 *
 * And clip_grad_norm in its two halves (src/optim/clip.c and ZeRO-1's
 * src/dist/zero.c on CUDA gradients): grad_sumsq's multi-tensor launch
 * writes each chunk's sum of squares and one block adds them into a
 * device double; clip_by_sumsq's one block adds the parts (one, or one a
 * rank) and computes the total and the factor, and a multi-tensor launch
 * applies it. Nothing comes back to the host unless the caller reads the
 * total (a device double, or an f32 for amp_clip_grad_norm_tensor). And
 * the count of a tensor's inf/NaN elements, into a device int64.
 *
 * Multi-tensor launches: the host lists the tensors (pointers, sizes,
 * dtypes) in a struct passed by value as a kernel argument, as PyTorch's
 * multi_tensor_apply does - no copy to the device, so nothing the host
 * could wait for - MT_MAX tensors per launch (kernel arguments are limited
 * to 4 KiB), more tensors taking more launches. Each tensor is split into
 * chunks of CHUNK elements; block b finds its tensor by binary search over
 * the chunk offsets. The formulas are optim.c's and scaler.c's, element for
 * element.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/round_rule.h"
#include "backend/scaler_rule.h"

#include <math.h>
#include <string.h>
#include <vector>

#define CHUNK 4096

/* A tensor's place in a multi-tensor launch. */
struct mt_entry {
    cuda_param p;
    int64_t first_block;
};

/* The tensors of one launch, and its number of chunks: as many as fit
 * CUDA's 4 KiB of kernel arguments beside 256 bytes of the rest. */
constexpr int MT_MAX = (int)((4096 - 256 - 2 * sizeof(int64_t)) / sizeof(mt_entry));
struct mt_list {
    mt_entry e[MT_MAX];
    int n;
    int64_t blocks;
};
/* What a launch passes besides the list (pointers, an optimizer's options)
 * stays under 4 KiB with it. */
static_assert(sizeof(mt_list) + 256 <= 4096, "a tensor list must fit CUDA's 4 KiB of kernel arguments");

/* Splits v into launches of at most MT_MAX tensors, chunk offsets counted
 * from each launch's start. */
static std::vector<mt_list> lists_of(const std::vector<mt_entry> &v)
{
    std::vector<mt_list> out;
    for (size_t i = 0; i < v.size(); i++) {
        if (i % MT_MAX == 0) {
            mt_list l;
            memset(&l, 0, sizeof l);
            out.push_back(l);
        }
        mt_list &l = out.back();
        l.e[l.n] = v[i];
        l.e[l.n].first_block = l.blocks;
        l.blocks += (v[i].p.n + CHUNK - 1) / CHUNK;
        l.n++;
    }
    return out;
}

/* The grid of a launch over l's chunks. */
static unsigned grid_of(const mt_list &l) { return (unsigned)(l.blocks < 65535 * 16 ? l.blocks : 65535 * 16); }

/* The entry chunk b belongs to, copied. The list is a __grid_constant__
 * kernel argument: read where it lies (the constant bank), its address
 * taken by this reference without the compiler first copying the whole
 * list into each thread's local memory, which a plain by-value argument
 * whose address is taken would get. */
__device__ __forceinline__ mt_entry find_entry(const mt_list &l, int64_t b)
{
    int lo = 0, hi = l.n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (l.e[mid].first_block <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    return l.e[lo];
}

/* The entries of the non-empty gradients g[0..n) into v; false with the
 * error set (naming `what` and the gradient) for a dtype other than f32 and
 * bf16 (and f16 when f16_ok). */
static bool buf_entries(const be_buf *g, int n, bool f16_ok, const char *what, std::vector<mt_entry> &v)
{
    for (int i = 0; i < n; i++) {
        if (g[i].n <= 0)
            continue;
        if (g[i].dt != AMP_F32 && g[i].dt != AMP_BF16 && !(f16_ok && g[i].dt == AMP_F16)) {
            amp_set_error(AMP_ERR_DTYPE, "%s: gradient %d has dtype %s (f32%s or bf16 only)", what, i,
                          amp_dtype_name(g[i].dt), f16_ok ? ", f16" : "");
            return false;
        }
        mt_entry e;
        memset(&e, 0, sizeof e);
        e.p.p = g[i].p;
        e.p.n = g[i].n;
        e.p.pdt = g[i].dt;
        v.push_back(e);
    }
    return true;
}

/* ------------------------------------------------------------- unscale */

__global__ void k_unscale(__grid_constant__ const mt_list l, const float *scale, float *found_inf)
{
    const float inv = (float)(1.0 / (double)*scale); /* PyTorch: the reciprocal in double */
    for (int64_t b = blockIdx.x; b < l.blocks; b += gridDim.x) {
        const mt_entry t = find_entry(l, b);
        const int64_t lo = (b - t.first_block) * CHUNK, hi = lo + CHUNK < t.p.n ? lo + CHUNK : t.p.n;
        int bad = 0;
        for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
            if (t.p.pdt == AMP_BF16) {
                uint16_t *g = (uint16_t *)t.p.p;
                bad |= (g[j] & 0x7F80u) == 0x7F80u;
                if (inv != 1.0f)
                    st_f32(g, AMP_BF16, j, ld_f32(g, AMP_BF16, j) * inv);
            } else {
                float *g = (float *)t.p.p;
                bad |= (__float_as_uint(g[j]) & 0x7F800000u) == 0x7F800000u;
                if (inv != 1.0f)
                    g[j] *= inv;
            }
        }
        if (__syncthreads_or(bad) && threadIdx.x == 0)
            *found_inf = 1.0f;
    }
}

extern "C" amp_status cuda_unscale(const be_buf *g, int n, const float *scale, float *found_inf)
{
    std::vector<mt_entry> v;
    if (!buf_entries(g, n, false, "cuda unscale", v))
        return amp_last_status();
    amp_status st = AMP_OK;
    for (const mt_list &l : lists_of(v)) {
        if (l.blocks == 0)
            continue;
        k_unscale<<<grid_of(l), CUDA_THREADS, 0, cuda_stream()>>>(l, scale, found_inf);
        if ((st = cuda_launched("unscale kernel")) != AMP_OK)
            break;
    }
    return st;
}

/* ------------------------------------------------------ clip_grad_norm */

/* What the scale launch reads: the factor, and whether it applies. */
struct clip_coef {
    float coef;
    int apply;
};

/* partial[b] = the sum of the squares of chunk b, in double (a float's
 * square is exact in double, as in clip.c's sum). */
__global__ void k_clip_sumsq(__grid_constant__ const mt_list l, double *partial)
{
    __shared__ double scratch[32];
    for (int64_t b = blockIdx.x; b < l.blocks; b += gridDim.x) {
        const mt_entry t = find_entry(l, b);
        const int64_t lo = (b - t.first_block) * CHUNK, hi = lo + CHUNK < t.p.n ? lo + CHUNK : t.p.n;
        double s = 0;
        for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
            const double v = (double)ld_f32(t.p.p, t.p.pdt, j);
            s += v * v;
        }
        s = block_sum(s, scratch);
        if (threadIdx.x == 0)
            partial[b] = s;
    }
}

/* One block: *sumsq = the sum of the chunks' partial sums. */
__global__ void k_clip_sum_partials(const double *partial, int64_t blocks, double *sumsq)
{
    __shared__ double scratch[32];
    double s = 0;
    for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x)
        s += partial[b];
    s = block_sum(s, scratch);
    if (threadIdx.x == 0)
        *sumsq = s;
}

/* One block: the total = sqrt(the sum of the k parts) into *total (a
 * double) and/or *total_f32 (rounded once to f32, as clip.c does on the
 * host for amp_clip_grad_norm_tensor); then clip.c's factor max_norm /
 * (total + 1e-6), applied unless it is >= 1 (a NaN factor is applied:
 * PyTorch's clamp keeps the NaN). */
__global__ void k_clip_coef(const double *parts, int k, double max_norm, double *total, float *total_f32,
                            clip_coef *c)
{
    __shared__ double scratch[32];
    double s = 0;
    for (int b = threadIdx.x; b < k; b += blockDim.x)
        s += parts[b];
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) {
        const double t = sqrt(s), coef = max_norm / (t + 1e-6);
        if (total)
            *total = t;
        if (total_f32)
            *total_f32 = (float)t;
        c->coef = (float)coef;
        c->apply = !(coef >= 1.0);
    }
}

__global__ void k_clip_scale(__grid_constant__ const mt_list l, const clip_coef *c)
{
    if (!c->apply)
        return;
    const float coef = c->coef;
    for (int64_t b = blockIdx.x; b < l.blocks; b += gridDim.x) {
        const mt_entry t = find_entry(l, b);
        const int64_t lo = (b - t.first_block) * CHUNK, hi = lo + CHUNK < t.p.n ? lo + CHUNK : t.p.n;
        if (t.p.pdt == AMP_F32) {
            float *g = (float *)t.p.p;
            for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
                g[j] *= coef;
        } else {
            for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
                st_f32(t.p.p, t.p.pdt, j, ld_f32(t.p.p, t.p.pdt, j) * coef);
        }
    }
}

/* The chunks' partial sums (each launch's at its own offset in one scratch
 * block), then one block adds them into the device double *sumsq. */
extern "C" amp_status cuda_grad_sumsq(const be_buf *g, int n, double *sumsq)
{
    std::vector<mt_entry> v;
    if (!buf_entries(g, n, true, "cuda grad_sumsq", v))
        return amp_last_status();
    const std::vector<mt_list> lists = lists_of(v);
    int64_t blocks = 0;
    for (const mt_list &l : lists)
        blocks += l.blocks;
    double *partial = (double *)cuda_malloc((size_t)(blocks > 0 ? blocks : 1) * sizeof(double));
    if (!partial)
        return amp_last_status();
    cudaStream_t s = cuda_stream();
    amp_status st = AMP_OK;
    int64_t at = 0;
    for (const mt_list &l : lists) {
        if (l.blocks == 0)
            continue;
        k_clip_sumsq<<<grid_of(l), CUDA_THREADS, 0, s>>>(l, partial + at);
        at += l.blocks;
        if ((st = cuda_launched("grad_sumsq kernel")) != AMP_OK)
            break;
    }
    if (st == AMP_OK) { /* with no gradients: 0 */
        k_clip_sum_partials<<<1, CUDA_THREADS, 0, s>>>(partial, blocks, sumsq);
        st = cuda_launched("grad_sumsq sum kernel");
    }
    cuda_free(partial);
    return st;
}

/* One block makes the total and the factor from the parts, then one
 * multi-tensor launch per list applies it. */
extern "C" amp_status cuda_clip_by_sumsq(const be_buf *g, int n, const double *parts, int k, double max_norm,
                                         double *total, float *total_f32)
{
    std::vector<mt_entry> v;
    if (!buf_entries(g, n, true, "cuda clip_by_sumsq", v))
        return amp_last_status();
    const std::vector<mt_list> lists = lists_of(v);
    clip_coef *c = (clip_coef *)cuda_malloc(sizeof(clip_coef));
    if (!c)
        return amp_last_status();
    cudaStream_t s = cuda_stream();
    k_clip_coef<<<1, CUDA_THREADS, 0, s>>>(parts, k, max_norm, total, total_f32, c);
    amp_status st = cuda_launched("clip_by_sumsq factor kernel");
    for (const mt_list &l : lists) {
        if (st != AMP_OK)
            break;
        if (l.blocks == 0)
            continue;
        k_clip_scale<<<grid_of(l), CUDA_THREADS, 0, s>>>(l, c);
        st = cuda_launched("clip_by_sumsq scale kernel");
    }
    cuda_free(c);
    return st;
}

/* -------------------------------------------------------------- update */

__global__ void k_scaler_update(float *scale, be_scaler_state *st, unsigned long long records, be_scaler_opts o)
{
    be_scaler_update_rule(scale, st, records, o);
}

extern "C" amp_status cuda_scaler_update(float *scale, be_scaler_state *st, uint64_t records, be_scaler_opts o)
{
    k_scaler_update<<<1, 1, 0, cuda_stream()>>>(scale, st, (unsigned long long)records, o);
    return cuda_launched("scaler update kernel");
}

__global__ void k_scaler_count(be_scaler_state *st, int rec)
{
    if (st->found_inf[rec] != 0.0f)
        st->skipped++;
    else
        st->steps++;
}

extern "C" amp_status cuda_scaler_count(be_scaler_state *st, int rec)
{
    if (rec < 0 || rec >= BE_SCALER_MAX_RECORDS)
        return amp_set_error(AMP_ERR_ARG, "cuda scaler: record %d out of range", rec);
    k_scaler_count<<<1, 1, 0, cuda_stream()>>>(st, rec);
    return cuda_launched("scaler count kernel");
}

/* ------------------------------------------------- non-finite count */

/* Each block counts its elements' inf/NaN (f16 and bf16 widen exactly) and
 * adds its count to *count. */
__global__ void k_count_nonfinite(const void *x, int dt, int64_t n, unsigned long long *count)
{
    __shared__ double scratch[32];
    double c = 0; /* exact: a block counts far fewer than 2^53 */
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        c += !isfinite(ld_f32(x, dt, i));
    c = block_sum(c, scratch);
    if (threadIdx.x == 0 && c > 0)
        atomicAdd(count, (unsigned long long)c);
}

extern "C" amp_status cuda_count_nonfinite(const void *x, amp_dtype dt, int64_t n, int64_t *count)
{
    if (dt != AMP_F32 && dt != AMP_F16 && dt != AMP_BF16)
        return amp_set_error(AMP_ERR_DTYPE, "cuda count_nonfinite: dtype %s (f32, f16 or bf16 only)",
                             amp_dtype_name(dt));
    const int64_t zero = 0;
    amp_status st = cuda_fill_pattern(count, 1, &zero, sizeof zero);
    if (st != AMP_OK || n <= 0)
        return st;
    k_count_nonfinite<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>(x, dt, n, (unsigned long long *)count);
    return cuda_launched("count_nonfinite kernel");
}

/* ---------------------------------------------------------- optimizers */

/* Counts the step: each listed parameter's counter, and the optimizer's
 * total when `total` (once per step, with the first list). */
__global__ void k_count_steps(__grid_constant__ const mt_list l, long long *steps, int n_counters, bool total,
                              const float *found_inf)
{
    if (found_inf && *found_inf != 0.0f)
        return;
    for (int k = threadIdx.x; k < l.n; k += blockDim.x)
        steps[l.e[k].p.index]++;
    if (threadIdx.x == 0 && total)
        steps[n_counters]++;
}

/* Stores v as element j of state buffer p in dtype sdt: rounded to
 * nearest-even, or, for bf16 with sr, stochastically with the bits of
 * (parameter index, step t, slot, j) as the CPU's (round_rule.h). */
__device__ __forceinline__ void st_state(void *p, int sdt, int64_t j, float v, bool sr, int index, long long t,
                                         int slot)
{
    if (sr && sdt == AMP_BF16)
        ((uint16_t *)p)[j] = be_bf16_sr(v, be_sr_bits(index, t, slot, j));
    else
        st_f32(p, sdt, j, v);
}

__global__ void k_sgd(__grid_constant__ const mt_list l, const long long *steps, const float *found_inf,
                      cuda_sgd_opts o)
{
    if (found_inf && *found_inf != 0.0f)
        return;
    const float neg_lr = -o.lr;
    for (int64_t b = blockIdx.x; b < l.blocks; b += gridDim.x) {
        const mt_entry t = find_entry(l, b);
        const bool first = steps[t.p.index] == 0;
        const int64_t lo = (b - t.first_block) * CHUNK, hi = lo + CHUNK < t.p.n ? lo + CHUNK : t.p.n;
        void *buf = t.p.s0;
        const int sdt = t.p.sdt;
        for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
            float pj = t.p.master ? t.p.master[j] : ld_f32(t.p.p, t.p.pdt, j), gj = ld_f32(t.p.g, t.p.gdt, j);
            /* The CPU loop's order and roundings (sgd_range), explicitly
             * rounded: nvcc's contraction cannot change a bit. */
            const float wd = (float)t.p.weight_decay;
            if (wd != 0)
                gj = __fmaf_rn(pj, wd, gj);
            if (buf) {
                /* Updated in f32, stored in sdt (bf16 rounds to
                 * nearest-even): the f32 value serves this step, as in the
                 * CPU's scratch block. */
                float b = first ? gj : __fmaf_rn(gj, o.one_minus_dampening, __fmul_rn(ld_f32(buf, sdt, j), o.momentum));
                st_state(buf, sdt, j, b, o.sr, t.p.index, steps[t.p.index] + 1, 0);
                gj = o.nesterov ? __fmaf_rn(b, o.momentum, gj) : b;
            }
            const float np = __fmaf_rn(gj, neg_lr, pj);
            if (t.p.master)
                t.p.master[j] = np;
            st_state(t.p.p, t.p.pdt, j, np, o.wsr && !t.p.master, t.p.index, steps[t.p.index] + 1, WEIGHT_SR_SLOT);
        }
    }
}

/* Adam / AdamW in the CPU loop's order and roundings (src/backend/cpu/
 * optim.c adam_range, PyTorch's _single_tensor_adam on its CPU kernels):
 * every operation an explicitly rounded intrinsic, so that nvcc's
 * multiply-add contraction (--fmad) cannot change a bit. */
__global__ void k_adam(__grid_constant__ const mt_list l, const long long *steps, const float *found_inf,
                       cuda_adam_opts a)
{
    if (found_inf && *found_inf != 0.0f)
        return;
    const float eps = (float)a.eps;
    const float w1 = (float)(1.0 - a.beta1), b2 = (float)a.beta2, w2 = (float)(1.0 - a.beta2);
    /* ATen's lerp: m + w1 (g - m) for w1 < 0.5, else g + (w1 - 1)(g - m) */
    const bool low = w1 < 0.5f;
    const float lw = low ? w1 : w1 - 1.0f;
    for (int64_t b = blockIdx.x; b < l.blocks; b += gridDim.x) {
        const mt_entry t = find_entry(l, b);
        /* the parameter's own weight decay (its group's) */
        const double wdd = t.p.weight_decay;
        const float wd = (float)wdd, decay = (float)(1.0 - a.lr * wdd);
        const bool l2 = !a.decoupled && wdd != 0, dec = a.decoupled && wdd != 0;
        const double step = (double)(steps[t.p.index] + 1);
        const double bc1 = 1.0 - pow(a.beta1, step), bc2 = 1.0 - pow(a.beta2, step);
        const float neg_step = (float)(-(a.lr / bc1)), bc2_sqrt = (float)sqrt(bc2);
        const int64_t lo = (b - t.first_block) * CHUNK, hi = lo + CHUNK < t.p.n ? lo + CHUNK : t.p.n;
        void *m = t.p.s0, *v = t.p.s1, *vmax = t.p.s2;
        const int sdt = t.p.sdt;
        for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
            float pj = t.p.master ? t.p.master[j] : ld_f32(t.p.p, t.p.pdt, j), gj = ld_f32(t.p.g, t.p.gdt, j);
            if (dec)
                pj = __fmul_rn(pj, decay);
            if (l2)
                gj = __fmaf_rn(pj, wd, gj);
            /* The state is loaded once, updated in f32 (the f32 values
             * serve this step, as in the CPU's scratch block) and stored
             * in sdt (bf16 rounds to nearest-even). */
            float mj = ld_f32(m, sdt, j);
            const float d = __fsub_rn(gj, mj);
            mj = __fmaf_rn(lw, d, low ? mj : gj);
            const long long tt = steps[t.p.index] + 1;
            st_state(m, sdt, j, mj, a.sr, t.p.index, tt, 0);
            float vv = __fmaf_rn(__fmul_rn(w2, gj), gj, __fmul_rn(ld_f32(v, sdt, j), b2));
            st_state(v, sdt, j, vv, a.sr, t.p.index, tt, 1);
            if (vmax) {
                float vm = ld_f32(vmax, sdt, j);
                if (!(vm >= vv))
                    vm = vv;
                st_state(vmax, sdt, j, vm, a.sr, t.p.index, tt, 2);
                vv = vm;
            }
            const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vv), bc2_sqrt), eps);
            const float np = __fadd_rn(pj, __fdiv_rn(__fmul_rn(neg_step, mj), denom));
            if (t.p.master)
                t.p.master[j] = np;
            st_state(t.p.p, t.p.pdt, j, np, a.wsr && !t.p.master, t.p.index, tt, WEIGHT_SR_SLOT);
        }
    }
}

/* The launches over p[0..n). */
static std::vector<mt_list> param_lists(const cuda_param *p, int n)
{
    std::vector<mt_entry> v;
    for (int i = 0; i < n; i++) {
        mt_entry e;
        memset(&e, 0, sizeof e);
        e.p = p[i];
        v.push_back(e);
    }
    return lists_of(v);
}

/* The update kernel over every list, then the counts (after all updates:
 * an update reads its parameters' counters). */
template <class Opts>
static amp_status step_lists(const std::vector<mt_list> &lists, void (*update)(mt_list, const long long *,
                                                                               const float *, Opts),
                             Opts o, int64_t *steps, int n_counters, const float *found_inf, const char *what)
{
    cudaStream_t s = cuda_stream();
    for (const mt_list &l : lists) {
        if (l.blocks == 0)
            continue;
        update<<<grid_of(l), CUDA_THREADS, 0, s>>>(l, (const long long *)steps, found_inf, o);
        amp_status st = cuda_launched(what);
        if (st != AMP_OK)
            return st;
    }
    for (size_t i = 0; i < lists.size(); i++) {
        k_count_steps<<<1, CUDA_THREADS, 0, s>>>(lists[i], (long long *)steps, n_counters, i == 0, found_inf);
        amp_status st = cuda_launched("step count kernel");
        if (st != AMP_OK)
            return st;
    }
    return AMP_OK;
}

extern "C" amp_status cuda_sgd_step(const cuda_param *p, int n, int64_t *steps, int n_counters,
                                    const float *found_inf, cuda_sgd_opts o)
{
    if (n <= 0)
        return AMP_OK;
    return step_lists(param_lists(p, n), k_sgd, o, steps, n_counters, found_inf, "sgd kernel");
}

extern "C" amp_status cuda_adam_step(const cuda_param *p, int n, int64_t *steps, int n_counters,
                                     const float *found_inf, cuda_adam_opts o)
{
    if (n <= 0)
        return AMP_OK;
    return step_lists(param_lists(p, n), k_adam, o, steps, n_counters, found_inf, "adam kernel");
}
