/* calibrate.c -- calibration (SPEC section 3): the per-row reductions, the deterministic block
 * split that lets threads share one scale row, and the final absmax / min / max / rms values.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "numerics.h"

void quant_reader_init(quant_reader *rd, const quant_plan *plan, const quant_tensor *x,
                       const quant_kernels *k)
{
    rd->plan = plan;
    rd->x = x;
    rd->k = k;
    atomic_init(&rd->bad, INT64_MAX);
}

void quant_reader_bad(quant_reader *rd, int64_t row, int64_t c0, const float *x, int64_t n)
{
    int64_t j = 0;
    while (j < n && !qn_nonfinite(x[j])) j++;
    long long idx = row * rd->plan->ncols + c0 + j;
    long long cur = atomic_load(&rd->bad);
    while (idx < cur && !atomic_compare_exchange_weak(&rd->bad, &cur, idx)) {
    }
}

bool quant_reader_skip(quant_reader *rd, int64_t row)
{
    return row * rd->plan->ncols > atomic_load_explicit(&rd->bad, memory_order_relaxed);
}

quant_status quant_fail_nonfinite(quant_error *err, int64_t idx)
{
    quant_status st =
        quant_fail(err, QUANT_ERR_NONFINITE, "non-finite value (NaN or Inf) at flat index %lld",
                   (long long)idx);
    if (err) err->index = idx;
    return st;
}

/* rms: squares summed in float64, sequentially in column order (the same for every ISA). */
static int rms_acc(const float *x, int64_t n, int64_t c0, int64_t tile, double *sums)
{
    uint32_t seen = 0;
    for (int64_t j = 0; j < n; j++) {
        uint32_t a = qn_bits(x[j]) & 0x7fffffffu;
        seen = a > seen ? a : seen;
        sums[(c0 + j) / tile] += (double)x[j] * (double)x[j];
    }
    return seen >= 0x7f800000u;
}

void quant_reduce_init(const quant_plan *plan, int64_t n, float *a, float *b, double *sums)
{
    for (int64_t i = 0; i < n; i++) {
        if (plan->method.kind == QUANT_CALIB_RMS) {
            sums[i] = 0.0;
        } else {
            a[i] = 0.0f; /* absmax >= 0; min starts at 0 so min(min x, 0) comes for free */
            if (b) b[i] = 0.0f;
        }
    }
}

int quant_reduce_row(quant_reader *rd, int64_t row, float *scratch, float *a, float *b,
                     double *sums)
{
    const quant_plan *p = rd->plan;
    for (int64_t c0 = 0; c0 < p->ncols; c0 += QUANT_CHUNK) {
        int64_t n = p->ncols - c0 < QUANT_CHUNK ? p->ncols - c0 : QUANT_CHUNK;
        const float *x = quant_load_row(rd->k, rd->x, p, row, c0, n, scratch);
        int bad;
        switch (p->method.kind) {
        case QUANT_CALIB_MINMAX:
        case QUANT_CALIB_MINMAX_MSE:
            bad = rd->k->minmax(x, n, c0, p->col_tile, a, b);
            break;
        case QUANT_CALIB_RMS:
            bad = rms_acc(x, n, c0, p->col_tile, sums);
            break;
        default:
            bad = rd->k->absmax(x, n, c0, p->col_tile, a);
            break;
        }
        if (bad) {
            quant_reader_bad(rd, row, c0, x, n);
            return 1;
        }
    }
    return 0;
}

void quant_calib_fixed(const quant_plan *plan, const quant_calibration *out)
{
    if (plan->method.asymmetric) {
        out->min[0] = (float)plan->method.fixed_min;
        out->max[0] = (float)plan->method.fixed_max;
    } else {
        out->absmax[0] = (float)plan->method.fixed_max;
    }
}

void quant_reduce_finish(const quant_plan *plan, int64_t n, const float *a, const float *b,
                         const double *sums, const quant_calibration *out, int64_t at)
{
    const quant_calib_method *m = &plan->method;
    float f = (float)m->factor;
    for (int64_t i = 0; i < n; i++) {
        switch (m->kind) {
        case QUANT_CALIB_MINMAX:
        case QUANT_CALIB_MINMAX_MSE: {
            float lo = a[i] < 0.0f ? a[i] : 0.0f; /* canonical +0 whatever the min saw */
            float hi = b[i] > 0.0f ? b[i] : 0.0f;
            out->min[at + i] = m->has_factor ? lo * f : lo;
            out->max[at + i] = m->has_factor ? hi * f : hi;
            break;
        }
        case QUANT_CALIB_RMS: {
            float rms = (float)sqrt(sums[i] / (double)plan->group_size);
            out->absmax[at + i] = rms * f;
            break;
        }
        default:
            out->absmax[at + i] = m->has_factor ? a[i] * f : a[i];
            break;
        }
    }
}

/* ---- the non-fused calibration over the whole tensor ----------------------------------------- */

/* Scale rows are split into blocks of member rows; block partials are merged in block order.
 * The split depends on the shape only, so results never depend on the thread count. */
#define CALIB_TARGET_ITEMS 64
#define CALIB_BLOCK_ELEMS  (1 << 18)

typedef struct calib_run {
    quant_reader rd;
    int64_t nblocks, rows_per_block;
    float *a, *b;
    double *sums;
    float *scratch;
} calib_run;

static void calib_item(void *arg, int64_t item, int worker)
{
    calib_run *run = arg;
    const quant_plan *p = run->rd.plan;
    int64_t srow = item / run->nblocks, blk = item % run->nblocks;
    int64_t off = item * p->ncolgroups;
    float *a = run->a ? run->a + off : NULL, *b = run->b ? run->b + off : NULL;
    double *sums = run->sums ? run->sums + off : NULL;
    quant_reduce_init(p, p->ncolgroups, a, b, sums);
    int64_t m_end = (blk + 1) * run->rows_per_block;
    if (m_end > p->members) m_end = p->members;
    for (int64_t m = blk * run->rows_per_block; m < m_end; m++) {
        int64_t row = quant_plan_member_row(p, srow, m);
        if (quant_reader_skip(&run->rd, row)) return;
        if (quant_reduce_row(&run->rd, row, run->scratch + (int64_t)worker * QUANT_CHUNK, a, b,
                             sums))
            return;
    }
}

/* Merges block partials of every scale row into block 0's slot, in block order. */
static void calib_merge(calib_run *run)
{
    const quant_plan *p = run->rd.plan;
    for (int64_t s = 0; s < p->nsrows; s++) {
        int64_t base = s * run->nblocks * p->ncolgroups;
        for (int64_t blk = 1; blk < run->nblocks; blk++) {
            int64_t off = base + blk * p->ncolgroups;
            for (int64_t g = 0; g < p->ncolgroups; g++) {
                if (run->sums) {
                    run->sums[base + g] += run->sums[off + g];
                } else if (run->b) {
                    if (run->a[off + g] < run->a[base + g]) run->a[base + g] = run->a[off + g];
                    if (run->b[off + g] > run->b[base + g]) run->b[base + g] = run->b[off + g];
                } else if (run->a[off + g] > run->a[base + g]) {
                    run->a[base + g] = run->a[off + g];
                }
            }
        }
    }
}

static void calib_blocks(const quant_plan *p, int64_t *nblocks, int64_t *rows_per_block)
{
    int64_t nb = 1;
    if (p->nsrows < CALIB_TARGET_ITEMS && p->members > 1) {
        int64_t want = CALIB_TARGET_ITEMS / p->nsrows;
        int64_t by_size = (p->members * p->ncols) / CALIB_BLOCK_ELEMS + 1;
        nb = want < by_size ? want : by_size;
        if (nb > p->members) nb = p->members;
        if (nb < 1) nb = 1;
    }
    *rows_per_block = (p->members + nb - 1) / nb;
    *nblocks = (p->members + *rows_per_block - 1) / *rows_per_block;
}

quant_status quant_calibrate_plan(quant_ctx *ctx, const quant_plan *p, const quant_tensor *x,
                                  const quant_calibration *out, quant_error *err)
{
    if (p->method.kind == QUANT_CALIB_FIXED) {
        quant_calib_fixed(p, out);
        return QUANT_OK;
    }
    calib_run run = {0};
    quant_reader_init(&run.rd, p, x, ctx->k);
    calib_blocks(p, &run.nblocks, &run.rows_per_block);
    if (p->numel == 0) run.nblocks = 1;
    int64_t slots = p->nsrows * run.nblocks * p->ncolgroups;
    int threads = quant_pool_threads(ctx->pool);
    quant_status st = QUANT_OK;
    if (p->method.kind == QUANT_CALIB_RMS) {
        run.sums = malloc((size_t)(slots ? slots : 1) * sizeof *run.sums);
    } else {
        run.a = malloc((size_t)(slots ? slots : 1) * sizeof *run.a);
        if (p->method.asymmetric) run.b = malloc((size_t)(slots ? slots : 1) * sizeof *run.b);
    }
    run.scratch = malloc((size_t)threads * QUANT_CHUNK * sizeof *run.scratch);
    if (!run.scratch || (!run.sums && !run.a) || (p->method.asymmetric && !run.b)) {
        st = quant_fail(err, QUANT_ERR_NOMEM, "cannot allocate calibration buffers");
        goto done;
    }
    if (p->numel == 0) {
        for (int64_t s = 0; s < p->nsrows; s++)
            quant_reduce_init(p, p->ncolgroups, run.a ? run.a + s * p->ncolgroups : NULL,
                              run.b ? run.b + s * p->ncolgroups : NULL,
                              run.sums ? run.sums + s * p->ncolgroups : NULL);
    } else {
        quant_pool_run(ctx->pool, p->nsrows * run.nblocks, calib_item, &run);
        long long bad = atomic_load(&run.rd.bad);
        if (bad != INT64_MAX) {
            st = quant_fail_nonfinite(err, bad);
            goto done;
        }
        calib_merge(&run);
    }
    for (int64_t s = 0; s < p->nsrows; s++) {
        int64_t off = s * run.nblocks * p->ncolgroups;
        quant_reduce_finish(p, p->ncolgroups, run.a ? run.a + off : NULL,
                            run.b ? run.b + off : NULL, run.sums ? run.sums + off : NULL, out,
                            s * p->ncolgroups);
    }
    if (quant_plan_is_mse(p)) st = quant_mse_search(ctx, p, x, out, err);
done:
    free(run.a);
    free(run.b);
    free(run.sums);
    free(run.scratch);
    return st;
}

quant_status quant_calibrate(quant_ctx *ctx, const quant_how *how, const quant_tensor *x,
                             quant_calibration *out, quant_error *err)
{
    quant_error_clear(err);
    if (!ctx || !out) return quant_fail(err, QUANT_ERR_ARG, "context or output is NULL");
    QUANT_RETURN_IF_ERR(quant_check_input(x, err));
    quant_plan p;
    QUANT_RETURN_IF_ERR(quant_plan_make(how, x->rank, x->shape, &p, err));
    out->asymmetric = p.method.asymmetric;
    if (p.method.asymmetric ? (!out->min || !out->max) : !out->absmax)
        return quant_fail(err, QUANT_ERR_ARG, "calibration output arrays are NULL");
    if (quant_plan_is_mse(&p) && p.traits->scale_kind == QUANT_SCALE_NVFP4 &&
        p.global_scale == 0.0f) { /* the search quantizes under the tensor's own g */
        float amax = 0.0f;
        QUANT_RETURN_IF_ERR(quant_absmax_all(ctx, x, &amax, err));
        p.global_scale = quant_nvfp4_global_scale(amax);
    }
    return quant_calibrate_plan(ctx, &p, x, out, err);
}

quant_status quant_absmax_all(quant_ctx *ctx, const quant_tensor *x, float *amax, quant_error *err)
{
    quant_error_clear(err);
    if (!ctx || !amax) return quant_fail(err, QUANT_ERR_ARG, "context or output is NULL");
    QUANT_RETURN_IF_ERR(quant_check_input(x, err));
    quant_how how; /* per-tensor absmax: one calibration value over every element */
    quant_how_init(&how, QUANT_QTYPE_INT8);
    quant_plan p;
    QUANT_RETURN_IF_ERR(quant_plan_make(&how, x->rank, x->shape, &p, err));
    quant_calibration out = {.asymmetric = false, .absmax = amax};
    return quant_calibrate_plan(ctx, &p, x, &out, err);
}
