/* dequantize.c -- dequantize (level(q) - zero_point) * scale into F32/F16/BF16, and fake-quant
 * as dequantize(quantize(x)).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>

#include "internal.h"
#include "numerics.h"

typedef struct deq_run {
    const quant_plan *plan;
    const quant_kernels *k;
    const uint8_t *q;
    const float *scale;
    const int32_t *zp;
    quant_tensor *out;
    int64_t rows_per_item;
    float *scratch; /* threads x QUANT_CHUNK floats */
    uint8_t *codes; /* threads x QUANT_CHUNK bytes */
} deq_run;

static void store_row(quant_tensor *t, int64_t base, int64_t stride, const float *v, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        int64_t i = base + j * stride;
        switch (t->dtype) {
        case QUANT_DTYPE_F16:
            ((uint16_t *)t->data)[i] = qn_f32_to_f16(v[j]);
            break;
        case QUANT_DTYPE_BF16:
            ((uint16_t *)t->data)[i] = qn_f32_to_bf16(v[j]);
            break;
        default:
            ((float *)t->data)[i] = v[j];
            break;
        }
    }
}

void quant_dequantize_codes(const quant_kernels *k, const quant_plan *p, const void *codes,
                            const float *scale, const int32_t *zp, int64_t row, int64_t c0,
                            int64_t n, float *out)
{
    int64_t off = quant_plan_srow(p, row) * p->ncolgroups;
    quant_krow kr = {
        .kcode = p->kcode, .tile = p->col_tile, .scale = scale + off, .zp = zp ? zp + off : NULL};
    k->dequantize(&kr, codes, n, c0, out);
}

void quant_dequantize_span(const quant_kernels *k, const quant_plan *p, const uint8_t *q,
                           const float *scale, const int32_t *zp, int64_t row, int64_t c0,
                           int64_t n, uint8_t *codes, float *out)
{
    const uint8_t *src = q + row * p->qrow_bytes;
    const void *c = src + c0 * (int64_t)p->code_size;
    if (p->packed) {
        quant_unpack_nibbles(src + c0 / 2, 1, n, p->kcode == QK_I8, codes);
        c = codes;
    }
    quant_dequantize_codes(k, p, c, scale, zp, row, c0, n, out);
}

static void deq_item(void *arg, int64_t item, int worker)
{
    deq_run *run = arg;
    const quant_plan *p = run->plan;
    float *scratch = run->scratch + (int64_t)worker * QUANT_CHUNK;
    uint8_t *codes = run->codes + (int64_t)worker * QUANT_CHUNK;
    int64_t stride = run->out->rank ? run->out->strides[run->out->rank - 1] : 1;
    bool direct = run->out->dtype == QUANT_DTYPE_F32 && stride == 1;
    int64_t end = (item + 1) * run->rows_per_item;
    if (end > p->nrows) end = p->nrows;
    for (int64_t row = item * run->rows_per_item; row < end; row++) {
        int64_t base = quant_row_offset(run->out, row);
        for (int64_t c0 = 0; c0 < p->ncols; c0 += QUANT_CHUNK) {
            int64_t n = p->ncols - c0 < QUANT_CHUNK ? p->ncols - c0 : QUANT_CHUNK;
            float *dst = direct ? (float *)run->out->data + base + c0 : scratch;
            quant_dequantize_span(run->k, p, run->q, run->scale, run->zp, row, c0, n, codes, dst);
            if (!direct) store_row(run->out, base + c0 * stride, stride, scratch, n);
        }
    }
}

static quant_status check_output(const quant_tensor *out, quant_error *err)
{
    if (!out) return quant_fail(err, QUANT_ERR_ARG, "output tensor is NULL");
    if (out->dtype != QUANT_DTYPE_F32 && out->dtype != QUANT_DTYPE_F16 &&
        out->dtype != QUANT_DTYPE_BF16)
        return quant_fail(err, QUANT_ERR_DTYPE, "output dtype must be F32, F16 or BF16");
    quant_tensor probe = *out;
    probe.dtype = QUANT_DTYPE_F32; /* same shape and stride rules as an input */
    return quant_check_input(&probe, err);
}

static quant_status dequantize_plan(quant_ctx *ctx, const quant_plan *p, const void *q,
                                    const float *scale, const int32_t *zp, quant_tensor *out,
                                    quant_error *err)
{
    if (p->numel == 0) return QUANT_OK;
    int threads = quant_pool_threads(ctx->pool);
    deq_run run = {p, ctx->k, q, scale, zp, out, 0, NULL, NULL};
    run.rows_per_item = p->ncols >= (1 << 15) ? 1 : (1 << 15) / p->ncols;
    run.scratch = malloc((size_t)threads * QUANT_CHUNK * sizeof *run.scratch);
    run.codes = malloc((size_t)threads * QUANT_CHUNK);
    quant_status st = QUANT_OK;
    if (!run.scratch || !run.codes)
        st = quant_fail(err, QUANT_ERR_NOMEM, "cannot allocate dequantize buffers");
    else
        quant_pool_run(ctx->pool, (p->nrows + run.rows_per_item - 1) / run.rows_per_item, deq_item,
                       &run);
    free(run.scratch);
    free(run.codes);
    return st;
}

quant_status quant_dequantize(quant_ctx *ctx, const quant_how *how, const void *q,
                              const float *scale, const int32_t *zero_point, quant_tensor *out,
                              quant_error *err)
{
    quant_error_clear(err);
    if (!ctx) return quant_fail(err, QUANT_ERR_ARG, "context is NULL");
    QUANT_RETURN_IF_ERR(check_output(out, err));
    quant_plan p;
    QUANT_RETURN_IF_ERR(quant_plan_make(how, out->rank, out->shape, &p, err));
    if (p.numel > 0 && (!q || !scale)) return quant_fail(err, QUANT_ERR_ARG, "q or scale is NULL");
    QUANT_RETURN_IF_ERR(quant_check_zero_point(&p, zero_point, err));
    QUANT_RETURN_IF_ERR(quant_check_zero_point_values(&p, zero_point, err));
    return dequantize_plan(ctx, &p, q, scale, zero_point, out, err);
}

quant_status quant_fake_quant(quant_ctx *ctx, const quant_how *how, const quant_tensor *x,
                              quant_tensor *out, quant_error *err)
{
    quant_error_clear(err);
    if (!ctx || !x) return quant_fail(err, QUANT_ERR_ARG, "context or input is NULL");
    QUANT_RETURN_IF_ERR(check_output(out, err));
    if (out->rank != x->rank)
        return quant_fail(err, QUANT_ERR_ARG, "output rank differs from input");
    for (int i = 0; i < x->rank; i++)
        if (out->shape[i] != x->shape[i])
            return quant_fail(err, QUANT_ERR_ARG, "output shape differs from input at axis %d", i);
    quant_plan p;
    QUANT_RETURN_IF_ERR(quant_check_input(x, err));
    QUANT_RETURN_IF_ERR(quant_plan_make(how, x->rank, x->shape, &p, err));
    int64_t qbytes = quant_qvalue_bytes(how, x->rank, x->shape);
    if (qbytes < 0) return quant_fail(err, QUANT_ERR_ARG, "tensor too large to quantize");
    void *q = malloc((size_t)(qbytes ? qbytes : 1));
    float *scale = malloc((size_t)(p.scale_numel ? p.scale_numel : 1) * sizeof *scale);
    int32_t *zp = p.method.asymmetric
                      ? malloc((size_t)(p.scale_numel ? p.scale_numel : 1) * sizeof *zp)
                      : NULL;
    quant_status st = QUANT_OK;
    if (!q || !scale || (p.method.asymmetric && !zp))
        st = quant_fail(err, QUANT_ERR_NOMEM, "cannot allocate fake-quant buffers");
    if (st == QUANT_OK) st = quant_quantize(ctx, how, x, q, scale, zp, err);
    if (st == QUANT_OK) st = dequantize_plan(ctx, &p, q, scale, zp, out, err);
    free(q);
    free(scale);
    free(zp);
    return st;
}
