/* global_scale.c -- nvfp4's global scale g in the pipeline (SPEC 2b). g comes from max |x| over
 * the whole tensor and the native layout records it in the header's metadata, so before the
 * first shard's header is written one pass reads each nvfp4 tensor of every shard, a chunk at a
 * time, and sets g in its plan (every unit then quantizes with that g); the native metadata is
 * then made again. In the compressed-tensors layout the members of a fused group (fuse_next,
 * ct_fused.c; they may lie in different shards) take g from the max |x| over the group instead,
 * as llm-compressor's update_fused_layer_weight_global_scales does (the minimum of the members'
 * g, which is g of the largest A): vLLM loads them as one layer with one global scale. The native
 * layout keeps each tensor's own g, as SPEC 2b defines it.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>

#include "ck_internal.h"

static bool needs_global_scale(const ck_tensor_plan *tp)
{
    return tp->quantize && quant_qtype_traits_get(tp->how.qtype)->scale_kind == QUANT_SCALE_NVFP4;
}

/* max |x| of rows [row0, row0 + rows) of the tensor, read into buf. */
static quant_ck_status chunk_absmax(ck_run *run, const ck_shard_plan *sp, const ck_tensor_plan *tp,
                                    int64_t row0, int64_t rows, void *buf, float *amax,
                                    quant_ck_error *err)
{
    uint64_t row_bytes = (uint64_t)tp->row_elems * quant_dtype_size(tp->in_dtype);
    quant_ck_status st = quant_st_read(sp->in, tp->in, row_bytes * (uint64_t)row0, buf,
                                       (size_t)(row_bytes * (uint64_t)rows), err);
    if (st != QUANT_CK_OK) return st; /* names the file */
    quant_tensor x;
    int64_t shape[2] = {rows, tp->row_elems};
    quant_error qe;
    quant_tensor_init(&x, tp->in_dtype, 2, shape, buf, NULL);
    if (quant_absmax_all(run->ctx, &x, amax, &qe) == QUANT_OK) return QUANT_CK_OK;
    if (qe.status == QUANT_ERR_NONFINITE)
        return quant_ck_fail(err, QUANT_CK_ERR_QUANT,
                             "%s: tensor '%s': non-finite value (NaN or Inf) at flat index %lld",
                             sp->in->path, tp->in->name,
                             (long long)(row0 * tp->row_elems + qe.index));
    return quant_ck_fail(err, QUANT_CK_ERR_QUANT, "%s: tensor '%s': %s", sp->in->path, tp->in->name,
                         qe.message);
}

static quant_ck_status tensor_amax(ck_run *run, const ck_shard_plan *sp, ck_tensor_plan *tp,
                                   quant_ck_error *err)
{
    int64_t d0 = tp->in->shape[0];
    uint64_t row_bytes = (uint64_t)tp->row_elems * quant_dtype_size(tp->in_dtype);
    uint64_t chunk = run->opts->chunk_bytes;
    int64_t step = row_bytes >= chunk ? 1 : (int64_t)(chunk / row_bytes);
    if (step > d0) step = d0;
    size_t len = (size_t)(row_bytes * (uint64_t)step);
    void *buf = ck_buf_alloc(len);
    if (!buf) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    float amax = 0.0f;
    quant_ck_status st = QUANT_CK_OK;
    for (int64_t r = 0; st == QUANT_CK_OK && r < d0; r += step) {
        float a = 0.0f;
        st = chunk_absmax(run, sp, tp, r, d0 - r < step ? d0 - r : step, buf, &a, err);
        if (a > amax) amax = a;
    }
    ck_buf_free(buf, len);
    tp->amax = amax;
    return st;
}

/* A of the tensor, or the max of A over its fused group. */
static float group_amax(const ck_tensor_plan *tp)
{
    float amax = tp->amax;
    for (const ck_tensor_plan *m = tp->fuse_next; m && m != tp; m = m->fuse_next)
        if (m->amax > amax) amax = m->amax;
    return amax;
}

/* max |x| of every nvfp4 tensor of one shard; true in *any when there is one. */
static quant_ck_status shard_amax(ck_run *run, ck_shard_plan *sp, bool *any, quant_ck_error *err)
{
    for (size_t i = 0; i < sp->n; i++) {
        if (!needs_global_scale(&sp->t[i])) continue;
        quant_ck_status st = tensor_amax(run, sp, &sp->t[i], err);
        if (st != QUANT_CK_OK) return st; /* the message names the file */
        *any = true;
    }
    return QUANT_CK_OK;
}

quant_ck_status ck_global_scales(ck_run *run, ck_shard_plan *plans, size_t n_plans,
                                 quant_ck_error *err)
{
    bool any = false;
    for (size_t s = 0; s < n_plans; s++) {
        quant_ck_status st = shard_amax(run, &plans[s], &any, err);
        if (st != QUANT_CK_OK) return st;
    }
    if (!any) return QUANT_CK_OK;
    for (size_t s = 0; s < n_plans; s++) {
        ck_shard_plan *sp = &plans[s];
        for (size_t i = 0; i < sp->n; i++)
            if (needs_global_scale(&sp->t[i]))
                sp->t[i].how.global_scale = quant_nvfp4_global_scale(group_amax(&sp->t[i]));
        if (!sp->quant_meta) continue;
        free(sp->quant_meta);
        sp->quant_meta = ck_native_metadata(sp);
        if (!sp->quant_meta) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    return QUANT_CK_OK;
}
