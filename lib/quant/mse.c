/* mse.c -- the MSE scale search of SPEC section 9 (mse[,n[,lo]], minmax_mse[,n[,lo]]): the exact
 * shrink factors r_k, and per scale group the n + 1 candidate quantizations, their importance-
 * weighted float64 errors in element order, and the winner (the smallest error, ties to the
 * smaller k). For integer codes without a zero point the kernel table's fused mse_int does all
 * candidates in one pass over a chunk of one row in L1 (codes by the same IEEE division, errors
 * summed in element order per candidate in vector lanes); otherwise the candidates quantize and
 * dequantize through the kernel table (the same kernels quant_quantize() uses, so SIMD and scalar
 * agree bit for bit), a chunk at a time, the error sums element by element in each group's order,
 * across groups in independent chains (mse_acc).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "numerics.h"

/* Elements of a row quantized per candidate at once: x, the dequantized values and the codes
 * (about 10 KiB) stay in L1 while the n + 1 candidates run over them. */
#define MSE_CHUNK 1024
#define MSE_BATCH QUANT_MSE_BATCH /* candidates whose error sums run side by side */

bool quant_plan_is_mse(const quant_plan *plan)
{
    return plan->method.kind == QUANT_CALIB_MSE || plan->method.kind == QUANT_CALIB_MINMAX_MSE;
}

/* ---- r_k: the float32 nearest to the exact rational (n - k + k * lo) / n ----------------------
 */

/* Shewchuk's exact two-sum. */
static void two_sum(double a, double b, double *s, double *e)
{
    double x = a + b, bv = x - a, av = x - bv;
    *s = x;
    *e = (a - av) + (b - bv);
}

/* Sign of (n - k) + k * lo - n * mu, exactly: the products are split by fma into exact pairs
 * (no underflow: lo is 0 or >= 2^-960, and mu >= 2^-9 as r >= 1/n), the five terms summed into a
 * non-overlapping expansion whose largest non-zero component has the sign of the sum. */
static int cmp_ratio(int k, int n, double lo, double mu)
{
    double p1 = (double)k * lo, p2 = fma((double)k, lo, -p1);
    double q1 = (double)n * mu, q2 = fma((double)n, mu, -q1);
    double terms[5] = {(double)(n - k), p1, p2, -q1, -q2};
    double e[5];
    int m = 0;
    for (int t = 0; t < 5; t++) { /* GROW-EXPANSION */
        double q = terms[t];
        for (int i = 0; i < m; i++) two_sum(q, e[i], &q, &e[i]);
        e[m++] = q;
    }
    for (int i = m - 1; i >= 0; i--) {
        if (e[i] > 0) return 1;
        if (e[i] < 0) return -1;
    }
    return 0;
}

static bool f32_odd(float f)
{
    return qn_bits(f) & 1u;
}

float quant_mse_ratio(int k, int n, double lo)
{
    if (n < 1 || n > QUANT_MSE_MAX_STEPS || k < 0 || k > n || !(lo >= 0.0 && lo <= 1.0)) return NAN;
    if (k == 0) return 1.0f;
    if (k == n) return (float)lo; /* one correct rounding of the double */
    /* 0 < k < n: r >= 1/n >= 2^-8, and k * lo / n < 2^-950 cannot move r across a float32
     * midpoint (r - k * lo / n = (n - k) / n has at most 8 significant bits), so it is dropped */
    if (lo < 0x1p-960) lo = 0.0;
    float f = (float)(((double)(n - k) + (double)k * lo) / (double)n);
    for (;;) { /* the approximation is within a few double ulps: at most one step each way */
        float up = nextafterf(f, 2.0f), down = nextafterf(f, 0.0f);
        int c_up = cmp_ratio(k, n, lo, ((double)f + (double)up) / 2); /* exact midpoints */
        if (c_up > 0 || (c_up == 0 && f32_odd(f))) {
            f = up;
            continue;
        }
        int c_down = cmp_ratio(k, n, lo, ((double)f + (double)down) / 2);
        if (c_down < 0 || (c_down == 0 && f32_odd(f))) {
            f = down;
            continue;
        }
        return f;
    }
}

/* ---- the search ------------------------------------------------------------------------------ */

typedef struct mse_run {
    quant_reader rd;
    const quant_calibration *cal; /* in: the plain calibration; out: the winners */
    int steps;                    /* n: candidates k = 0..n */
    float r[QUANT_MSE_MAX_STEPS + 1];
    /* per worker: candidate calibrations, scales, zero points and invalid flags
     * ((n + 1) x ncolgroups), errors (same), a chunk of x, dequantized values, weights, codes */
    float *ca, *cb, *cscale;
    int32_t *czp;
    unsigned char *invalid;
    double *err;
    float *x, *deq, *w;
    uint8_t *codes;
    double *err0, *errbest; /* per scale element */
    unsigned char *shrunk;
} mse_run;

/* Candidate k's scales for the ncolgroups groups of scale row s (at `base`), exactly as
 * quantizing would derive them; a group whose shrunk scale has no value in the scale dtype is
 * marked invalid (never wins: its error is +inf) and given scale 1 to keep the kernels sane. */
static void candidate_scales(const mse_run *run, int64_t base, float r, float *ca, float *cb,
                             float *scale, int32_t *zp, unsigned char *invalid)
{
    const quant_plan *p = run->rd.plan;
    int64_t ng = p->ncolgroups;
    for (int64_t g = 0; g < ng; g++) {
        invalid[g] = 0;
        if (p->method.asymmetric) {
            ca[g] = run->cal->min[base + g] * r;
            cb[g] = run->cal->max[base + g] * r;
        } else {
            ca[g] = run->cal->absmax[base + g] * r;
        }
    }
    quant_calibration c = {p->method.asymmetric, ca, ca, cb};
    if (quant_scale_range(run->rd.k, p, p->scale_dtype, &c, ng, scale, zp, base, NULL) == QUANT_OK)
        return;
    for (int64_t g = 0; g < ng; g++) {
        quant_calibration one = {p->method.asymmetric, ca + g, ca + g, cb + g};
        if (quant_scale_range(run->rd.k, p, p->scale_dtype, &one, 1, scale + g, zp ? zp + g : NULL,
                              base + g, NULL) != QUANT_OK) {
            invalid[g] = 1;
            scale[g] = 1.0f;
            if (zp) zp[g] = 0;
        }
    }
}

/* The importance of columns [c0, c0 + n) of row `row`: a pointer into plan->importance when it
 * follows the column, else `one` filled with the row's weight (or 1 without importance). */
static const float *row_weights(const quant_plan *p, int64_t row, int64_t c0, int64_t n, float *one)
{
    if (p->importance && p->imp_inner == 0 && p->imp_axis == p->rank - 1) return p->importance + c0;
    float w = 1.0f;
    if (p->importance) w = p->importance[(row / p->imp_inner) % p->shape[p->imp_axis]];
    for (int64_t j = 0; j < n; j++) one[j] = w;
    return one;
}

/* True when the kernel table's fused mse_int serves the plan: integer codes without a zero point
 * (quantize: clip(rint(x / s)); dequantize: code * s). */
static bool mse_fused(const mse_run *run)
{
    const quant_plan *p = run->rd.plan;
    return run->rd.k->mse_int && !p->method.asymmetric &&
           (p->kcode == QK_I8 || p->kcode == QK_U8 || p->kcode == QK_I16);
}

/* All candidates over columns [c0, c0 + n) of one member row, errors added into err: a batch of
 * candidates quantized and dequantized into their own buffers, then their sums side by side. */
static void chunk_candidates(mse_run *run, int worker, const float *x, const float *w, int64_t n,
                             int64_t c0)
{
    const quant_plan *p = run->rd.plan;
    const quant_kernels *kt = run->rd.k;
    int64_t ng = p->ncolgroups, woff = (int64_t)worker * (run->steps + 1) * ng;
    if (mse_fused(run)) { /* all candidates in one pass over the chunk, nothing stored */
        kt->mse_int(x, p->importance ? w : NULL, n, c0, p->col_tile, run->cscale + woff,
                    run->steps + 1, ng, (float)p->traits->qmin, (float)p->traits->qmax,
                    run->err + woff);
        return;
    }
    float *deq = run->deq + (int64_t)worker * MSE_BATCH * MSE_CHUNK;
    uint8_t *codes = run->codes + (int64_t)worker * MSE_CHUNK * 2;
    for (int k0 = 0; k0 <= run->steps; k0 += MSE_BATCH) {
        int nk = run->steps + 1 - k0 < MSE_BATCH ? run->steps + 1 - k0 : MSE_BATCH;
        for (int b = 0; b < nk; b++) {
            int k = k0 + b;
            quant_krow kr = {.kcode = p->kcode,
                             .tile = p->col_tile,
                             .scale = run->cscale + woff + k * ng,
                             .zp = p->method.asymmetric ? run->czp + woff + k * ng : NULL,
                             .qmin = (float)p->traits->qmin,
                             .qmax = (float)p->traits->qmax,
                             .pf_elem = 4,
                             .checked = true};
            kt->quantize(&kr, x, n, c0, codes);
            kt->dequantize(&kr, codes, n, c0, deq + b * MSE_CHUNK);
        }
        kt->mse_acc(x, deq, MSE_CHUNK, nk, w, n, c0, p->col_tile, run->err + woff + k0 * ng, ng);
    }
}

/* One scale row: every candidate's error per group, then each group's winner. */
static void mse_item(void *arg, int64_t s, int worker)
{
    mse_run *run = arg;
    const quant_plan *p = run->rd.plan;
    int64_t ng = p->ncolgroups, base = s * ng;
    int64_t woff = (int64_t)worker * (run->steps + 1) * ng;
    for (int k = 0; k <= run->steps; k++)
        candidate_scales(run, base, run->r[k], run->ca + woff + k * ng, run->cb + woff + k * ng,
                         run->cscale + woff + k * ng, run->czp + woff + k * ng,
                         run->invalid + woff + k * ng);
    double *err = run->err + woff;
    memset(err, 0, (size_t)((run->steps + 1) * ng) * sizeof *err);
    float *scratch = run->x + (int64_t)worker * MSE_CHUNK;
    float *one = run->w + (int64_t)worker * MSE_CHUNK;
    for (int64_t m = 0; m < p->members; m++) { /* member rows in row-major order in the group */
        int64_t row = quant_plan_member_row(p, s, m);
        for (int64_t c0 = 0; c0 < p->ncols; c0 += MSE_CHUNK) {
            int64_t n = p->ncols - c0 < MSE_CHUNK ? p->ncols - c0 : MSE_CHUNK;
            const float *x = quant_load_row(run->rd.k, run->rd.x, p, row, c0, n, scratch);
            chunk_candidates(run, worker, x, row_weights(p, row, c0, n, one), n, c0);
        }
    }
    for (int64_t g = 0; g < ng; g++) {
        int best = 0;
        double best_err = run->invalid[woff + g] ? INFINITY : err[g];
        for (int k = 1; k <= run->steps; k++) {
            double e = run->invalid[woff + k * ng + g] ? INFINITY : err[k * ng + g];
            if (e < best_err) { /* strictly smaller: a tie keeps the smaller k */
                best = k;
                best_err = e;
            }
        }
        if (run->err0) { /* the report's per-group figures, summed in scale order at the end */
            run->err0[base + g] = run->invalid[woff + g] ? INFINITY : err[g];
            run->errbest[base + g] = best_err;
            run->shrunk[base + g] = best > 0;
        }
        if (p->method.asymmetric) {
            run->cal->min[base + g] = run->ca[woff + best * ng + g];
            run->cal->max[base + g] = run->cb[woff + best * ng + g];
        } else {
            run->cal->absmax[base + g] = run->ca[woff + best * ng + g];
        }
    }
}

static void mse_free(mse_run *run)
{
    free(run->ca);
    free(run->cb);
    free(run->cscale);
    free(run->czp);
    free(run->invalid);
    free(run->err);
    free(run->x);
    free(run->deq);
    free(run->w);
    free(run->codes);
    free(run->err0);
    free(run->errbest);
    free(run->shrunk);
}

static bool mse_alloc(mse_run *run, const quant_plan *p, int threads)
{
    size_t per = (size_t)(run->steps + 1) * (size_t)p->ncolgroups * (size_t)threads;
    size_t chunk = (size_t)MSE_CHUNK * (size_t)threads;
    size_t ns = (size_t)(p->scale_numel ? p->scale_numel : 1);
    run->ca = malloc(per * sizeof *run->ca);
    run->cb = malloc(per * sizeof *run->cb);
    run->cscale = malloc(per * sizeof *run->cscale);
    run->czp = malloc(per * sizeof *run->czp);
    run->invalid = malloc(per);
    run->err = malloc(per * sizeof *run->err);
    run->x = malloc(chunk * sizeof *run->x);
    run->deq = malloc(chunk * MSE_BATCH * sizeof *run->deq);
    run->w = malloc(chunk * sizeof *run->w);
    run->codes = malloc(chunk * 2);
    bool report = p->mse_out != NULL; /* per-group figures only when reported */
    run->err0 = report ? malloc(ns * sizeof *run->err0) : NULL;
    run->errbest = report ? malloc(ns * sizeof *run->errbest) : NULL;
    run->shrunk = report ? malloc(ns) : NULL;
    return run->ca && run->cb && run->cscale && run->czp && run->invalid && run->err && run->x &&
           run->deq && run->w && run->codes &&
           (!report || (run->err0 && run->errbest && run->shrunk));
}

quant_status quant_mse_search(quant_ctx *ctx, const quant_plan *p, const quant_tensor *x,
                              const quant_calibration *out, quant_error *err)
{
    if (p->mse_out) memset(p->mse_out, 0, sizeof *p->mse_out);
    if (p->numel == 0) return QUANT_OK; /* nothing to weigh: the plain calibration stands */
    mse_run run = {.steps = p->method.mse_steps, .cal = out};
    for (int k = 0; k <= run.steps; k++) run.r[k] = quant_mse_ratio(k, run.steps, p->method.mse_lo);
    quant_reader_init(&run.rd, p, x, ctx->k);
    if (!mse_alloc(&run, p, quant_pool_threads(ctx->pool))) {
        mse_free(&run);
        return quant_fail(err, QUANT_ERR_NOMEM, "cannot allocate the MSE search buffers");
    }
    quant_pool_run(ctx->pool, p->nsrows, mse_item, &run);
    if (p->mse_out) {
        quant_mse_result *r = p->mse_out;
        r->groups = p->scale_numel;
        for (int64_t i = 0; i < p->scale_numel; i++) { /* in scale order */
            r->err_before += run.err0[i];
            r->err_after += run.errbest[i];
            r->shrunk += run.shrunk[i];
        }
    }
    mse_free(&run);
    return QUANT_OK;
}
