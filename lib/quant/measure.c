/* measure.c -- quant_measure_error(): how far fake-quant lands from the input (sum of squares of
 * the input and of the error, largest absolute error) in one parallel pass over the codes, with
 * no dequantized copy of the tensor. Each work item keeps its own partial sums and they are
 * added in item order, so the result does not depend on the thread count. Also the pieces the
 * quantize pass uses to take the same sums while it writes the codes (quant_quantize_measured):
 * the same work items, spans and order, so both give the same bits. A kernel set with
 * errstats_codes takes each span's sums straight from the codes and the input (bf16 read in
 * place), with no widened or dequantized copy.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>

#include "internal.h"

typedef struct measure_run {
    const quant_plan *plan;
    const quant_kernels *k;
    const quant_tensor *x;
    const uint8_t *q;
    const float *scale;
    const int32_t *zp;
    int64_t rows_per_item;
    float *scratch;  /* threads x 2 x QUANT_CHUNK floats: the input row, the dequantized row (the
                        path without errstats_codes) */
    uint8_t *codes;  /* threads x QUANT_CHUNK bytes (unpacked nibbles) */
    double *partial; /* nitems x 3: sum x^2, sum err^2, max |err| */
} measure_run;

int64_t quant_rows_per_item(const quant_plan *p)
{
    return p->ncols >= QUANT_ITEM_ELEMS ? 1 : QUANT_ITEM_ELEMS / (p->ncols ? p->ncols : 1);
}

void quant_errstats_sum(const double *partial, int64_t items, quant_error_stats *out)
{
    *out = (quant_error_stats){0};
    for (int64_t i = 0; i < items; i++) {
        const double *a = partial + i * 3;
        out->sum_sq_x += a[0];
        out->sum_sq_err += a[1];
        out->max_abs_err = a[2] > out->max_abs_err ? a[2] : out->max_abs_err;
    }
}

void quant_errstats_codes(const quant_kernels *k, const quant_plan *p, const void *codes,
                          const float *scale, const int32_t *zp, int64_t row, int64_t c0, int64_t n,
                          const void *x, bool bf16, float *xs, float *ds, double acc[3])
{
    if (k->errstats_codes) {
        int64_t off = quant_plan_srow(p, row) * p->ncolgroups;
        quant_krow kr = {.kcode = p->kcode,
                         .tile = p->col_tile,
                         .scale = scale + off,
                         .zp = zp ? zp + off : NULL};
        if (!k->errstats_codes(&kr, x, bf16, codes, n, c0, acc)) return;
    }
    const float *xf = x;
    if (bf16) {
        k->widen_bf16(x, xs, n);
        xf = xs;
    }
    quant_dequantize_codes(k, p, codes, scale, zp, row, c0, n, ds);
    k->errstats(xf, ds, n, acc);
}

const void *quant_errstats_source(const quant_kernels *k, const quant_tensor *x,
                                  const quant_plan *p, int64_t row, int64_t c0, int64_t n,
                                  float *xs, bool *bf16)
{
    *bf16 = k->errstats_codes && x->dtype == QUANT_DTYPE_BF16 &&
            (x->rank == 0 || x->strides[x->rank - 1] == 1 || x->shape[x->rank - 1] == 1);
    if (*bf16) return quant_row_address(x, row, c0);
    return quant_load_row(k, x, p, row, c0, n, xs);
}

static void measure_item(void *arg, int64_t item, int worker)
{
    measure_run *run = arg;
    const quant_plan *p = run->plan;
    float *xs = run->scratch + (int64_t)worker * 2 * QUANT_CHUNK, *ds = xs + QUANT_CHUNK;
    uint8_t *codes = run->codes + (int64_t)worker * QUANT_CHUNK;
    double *acc = run->partial + item * 3;
    int64_t end = (item + 1) * run->rows_per_item;
    if (end > p->nrows) end = p->nrows;
    for (int64_t row = item * run->rows_per_item; row < end; row++)
        for (int64_t c0 = 0; c0 < p->ncols; c0 += QUANT_CHUNK) {
            int64_t n = p->ncols - c0 < QUANT_CHUNK ? p->ncols - c0 : QUANT_CHUNK;
            bool bf16;
            const void *x = quant_errstats_source(run->k, run->x, p, row, c0, n, xs, &bf16);
            const uint8_t *src = run->q + row * p->qrow_bytes;
            const void *c = src + c0 * (int64_t)p->code_size;
            if (p->packed) {
                quant_unpack_nibbles(src + c0 / 2, 1, n, p->kcode == QK_I8, codes);
                c = codes;
            }
            quant_errstats_codes(run->k, p, c, run->scale, run->zp, row, c0, n, x, bf16, xs, ds,
                                 acc);
        }
}

quant_status quant_measure_error(quant_ctx *ctx, const quant_how *how, const quant_tensor *x,
                                 const void *q, const float *scale, const int32_t *zero_point,
                                 quant_error_stats *out, quant_error *err)
{
    quant_error_clear(err);
    if (!ctx || !x || !out) return quant_fail(err, QUANT_ERR_ARG, "context, input or out is NULL");
    *out = (quant_error_stats){0};
    QUANT_RETURN_IF_ERR(quant_check_input(x, err));
    quant_plan p;
    QUANT_RETURN_IF_ERR(quant_plan_make(how, x->rank, x->shape, &p, err));
    if (p.numel == 0) return QUANT_OK;
    if (!q || !scale) return quant_fail(err, QUANT_ERR_ARG, "q or scale is NULL");
    QUANT_RETURN_IF_ERR(quant_check_zero_point(&p, zero_point, err));
    QUANT_RETURN_IF_ERR(quant_check_zero_point_values(&p, zero_point, err));
    int threads = quant_pool_threads(ctx->pool);
    measure_run run = {&p, ctx->k, x, q, scale, zero_point, 0, NULL, NULL, NULL};
    run.rows_per_item = quant_rows_per_item(&p);
    int64_t items = (p.nrows + run.rows_per_item - 1) / run.rows_per_item;
    run.scratch = malloc((size_t)threads * 2 * QUANT_CHUNK * sizeof *run.scratch);
    run.codes = malloc((size_t)threads * QUANT_CHUNK);
    run.partial = calloc((size_t)items * 3, sizeof *run.partial);
    quant_status st = QUANT_OK;
    if (!run.scratch || !run.codes || !run.partial) {
        st = quant_fail(err, QUANT_ERR_NOMEM, "cannot allocate measuring buffers");
    } else {
        quant_pool_run(ctx->pool, items, measure_item, &run);
        quant_errstats_sum(run.partial, items, out);
    }
    free(run.scratch);
    free(run.codes);
    free(run.partial);
    return st;
}
