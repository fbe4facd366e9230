/*
 * gpt_cache.c - a gpt model's key/value cache for generation
 * (amp_gpt_cache_*, amp_gpt_forward_cached).
 *
 * Generating token by token with full forwards recomputes every earlier
 * position each time. The cache keeps each block's keys and values of the
 * positions seen so far; a forward then runs only the new positions: the
 * prompt once (the prefill), then one position per generated token, whose
 * attention is one query over the cached keys and values
 * (op_attention_cached). Inference only: the forward runs with grad
 * disabled and records no graph.
 *
 * Layout: per block a k and a v tensor [context, B, H, d] on the model's
 * device, in the dtype the block's fused qkv linear produces (bf16 / f16
 * under autocast, else the weights'), made at the first forward (and
 * made anew at the first forward after a reset that runs in another
 * dtype or on another device). The rows
 * of the positions held are a contiguous prefix, which the attention
 * reads in place (no gather); new rows are written after it by the
 * backend's permute ([B, T, H, d] -> [T, B, H, d]).
 *
 * Past the context: the model's learned positions end there, so a forward
 * that would pass context positions is refused (AMP_ERR_SHAPE, saying
 * so); the caller crops the sequence and refills a reset cache, as `ampc
 * generate` does (docs/generate.md).
 */
#include "nn/gpt_cache.h"
#include "nn/nn.h"

#include "backend/backend.h"
#include "base/base.h"
#include "ops/fused.h"
#include "tensor/tensor.h"

#include <stdlib.h>
#include <string.h>

struct amp_gpt_cache {
    const amp_module *model;
    int64_t batch, context, layers, heads, hd;
    int64_t len;          /* positions held */
    amp_tensor **k, **v;  /* [layers], each [context, B, H, hd] once made */
};

amp_gpt_cache *amp_gpt_cache_new(const amp_module *gpt, int64_t batch)
{
    if (!gpt || strcmp(gpt->kind, "gpt") != 0)
        return amp_fail_null(AMP_ERR_ARG, "gpt_cache_new: %s is not a gpt model (amp_model_gpt)",
                             gpt ? gpt->kind : "NULL");
    if (batch < 1 || batch > (INT64_C(1) << 20))
        return amp_fail_null(AMP_ERR_ARG, "gpt_cache_new: batch %lld is not in 1 .. 2^20", (long long)batch);
    amp_gpt_cache *c = calloc(1, sizeof *c);
    if (!c)
        return amp_fail_null(AMP_ERR_MEMORY, "gpt_cache_new: out of memory");
    c->model = gpt;
    c->batch = batch;
    c->context = gpt->cfg_i[1];
    c->layers = gpt->cfg_i[3];
    c->heads = gpt->cfg_i[4];
    c->hd = gpt->cfg_i[2] / gpt->cfg_i[4];
    c->k = calloc((size_t)c->layers, sizeof *c->k);
    c->v = calloc((size_t)c->layers, sizeof *c->v);
    if (!c->k || !c->v) {
        amp_gpt_cache_free(c);
        return amp_fail_null(AMP_ERR_MEMORY, "gpt_cache_new: out of memory");
    }
    return c;
}

void amp_gpt_cache_free(amp_gpt_cache *c)
{
    if (!c)
        return;
    for (int64_t i = 0; i < c->layers; i++) {
        if (c->k)
            amp_tensor_free(c->k[i]);
        if (c->v)
            amp_tensor_free(c->v[i]);
    }
    free(c->k);
    free(c->v);
    free(c);
}

int64_t amp_gpt_cache_len(const amp_gpt_cache *c) { return c ? c->len : 0; }

void amp_gpt_cache_reset(amp_gpt_cache *c)
{
    if (c)
        c->len = 0;
}

int64_t gpt_cache_pos(const amp_gpt_cache *kv) { return kv->len; }

/* The cache tensor of block `layer` in *slot for keys or values like x
 * [B, T, H, d] (made at first use; later ones must match its dtype and
 * device, except when the cache is empty: after a reset a slot of another
 * dtype or device is freed and made anew). */
static amp_tensor *slot_for(amp_gpt_cache *kv, amp_tensor **slot, const amp_tensor *x, const char *what)
{
    if (*slot && kv->len == 0 && ((*slot)->dtype != x->dtype || tensor_device(*slot) != tensor_device(x))) {
        amp_tensor_free(*slot);
        *slot = NULL;
    }
    if (!*slot) {
        *slot = tensor_new_on(AMP_SHAPE(kv->context, kv->batch, kv->heads, kv->hd), x->dtype, tensor_device(x));
        if (*slot)
            tensor_set_category(*slot, AMP_MEM_ACTIVATIONS);
        return *slot;
    }
    if ((*slot)->dtype != x->dtype || tensor_device(*slot) != tensor_device(x))
        return amp_fail_null(AMP_ERR_DTYPE,
                             "gpt cache: the cache holds %s %s on %s; this forward made %s ones on %s (the precision "
                             "or device changed between calls: reset the cache)",
                             amp_dtype_name((*slot)->dtype), what, amp_device_name(tensor_device(*slot)),
                             amp_dtype_name(x->dtype), amp_device_name(tensor_device(x)));
    return *slot;
}

/* Rows len .. len+T-1 of cache [context, B, H, d] = x [B, T, H, d]. */
static amp_status append(amp_gpt_cache *kv, amp_tensor *cache, const amp_tensor *x)
{
    const int64_t B = x->shape.d[0], T = x->shape.d[1], H = x->shape.d[2], D = x->shape.d[3];
    const int64_t od[4] = {T, B, H, D}, ist[4] = {H * D, T * H * D, D, 1};
    const size_t es = amp_dtype_size(x->dtype);
    void *dst = (char *)tensor_ptr(cache) + (size_t)(kv->len * B * H * D) * es;
    BACKEND_CALL(backend_of(tensor_device(x)), "gpt cache", permute, tensor_ptr(x), dst, es, 4, od, ist);
    tensor_bump(cache);
    return AMP_OK;
}

amp_tensor *gpt_cache_attend(amp_gpt_cache *kv, int64_t layer, amp_tensor *q, amp_tensor *k, amp_tensor *v)
{
    if (!q || !k || !v)
        return NULL;
    amp_tensor *kc = slot_for(kv, &kv->k[layer], k, "keys");
    amp_tensor *vc = kc ? slot_for(kv, &kv->v[layer], v, "values") : NULL;
    if (!vc || append(kv, kc, k) != AMP_OK || append(kv, vc, v) != AMP_OK)
        return NULL;
    /* The held prefix and the new rows, in place: [len + T, B, H, d]. */
    const amp_shape s = AMP_SHAPE(kv->len + k->shape.d[1], kv->batch, kv->heads, kv->hd);
    amp_tensor *kp = tensor_view(kc, s), *vp = kp ? tensor_view(vc, s) : NULL;
    amp_tensor *out = vp ? op_attention_cached(q, kp, vp) : NULL;
    amp_tensor_free(kp);
    amp_tensor_free(vp);
    return out;
}

amp_tensor *amp_gpt_forward_cached(amp_module *gpt, amp_gpt_cache *c, amp_tensor *idx)
{
    if (!gpt || !c || !idx)
        return amp_fail_null(AMP_ERR_ARG, "gpt_forward_cached: %s is NULL",
                             !gpt ? "the model" : !c ? "the cache" : "idx");
    if (c->model != gpt)
        return amp_fail_null(AMP_ERR_ARG, "gpt_forward_cached: the cache was made for another model");
    if (amp_tensor_ndim(idx) != 2 || amp_tensor_dim(idx, 0) != c->batch) {
        char b[96];
        return amp_fail_null(AMP_ERR_SHAPE, "gpt_forward_cached: input %s is not [%lld, T] (the cache's batch)",
                             amp_shape_str(amp_tensor_shape(idx), b, sizeof b), (long long)c->batch);
    }
    amp_no_grad_begin();
    amp_tensor *y = gpt_forward_at(gpt, idx, c);
    amp_no_grad_end();
    if (y)
        c->len += amp_tensor_dim(idx, 1);
    return y;
}
