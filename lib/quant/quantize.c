/* quantize.c -- quantize drivers (SPEC section 5): with a given scale, and dynamic range, fused
 * into one pass over memory (scan a row while it is in cache, then quantize it) whenever each
 * scale row covers exactly one row of the input. On request the same pass takes the error sums
 * of quant_measure_error() (each span measured right after its codes are written, while both are
 * in cache: errstats_codes reads them with the input, no dequantized copy), with measure.c's work
 * items, spans and order: the same bits. SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "numerics.h"

/* The fused path prefetches the source about this far ahead (whole rows, at least the next one):
 * a short row (a bf16 one of 4096 values is 8 KiB) quantizes too fast for the next row alone to
 * arrive in time. */
#define PREFETCH_AHEAD_BYTES (16 << 10)

/* The one-pass kernel reads its source once, in order, and prefetches (into L1) this many bytes
 * ahead in that stream. Measured out of cache (BENCHMARKS.md, branch `ooc`): 6-8 KiB runs at
 * 1.3-1.6x the next-row distance that three-pass rows use (32 KiB for a row of 8192 f32, which
 * evicts the lines before they are read) and at 2.6x no software prefetch at all. */
#define ONEPASS_PREFETCH_BYTES (8 << 10)

typedef struct quant_run {
    quant_reader rd;
    const quant_how *how;
    uint8_t *q;
    const float *scale; /* given scales (NULL in the fused path) */
    const int32_t *zp;
    float *scale_out; /* fused path: scales written row by row */
    int32_t *zp_out;
    int64_t rows_per_item;
    float *scratch; /* threads x QUANT_CHUNK floats */
    uint8_t *codes; /* threads x QUANT_CHUNK bytes, staging for packed rows */
    /* fused path, per worker: accumulators and one row of calibration values */
    float *acc_a, *acc_b, *cal_a, *cal_b;
    double *acc_s;
    /* measuring: per item error sums (items x 3), per worker a dequantized span; NULL if not */
    double *err_partial;
    float *deq;
    atomic_llong bad_scale; /* smallest scale index whose scale failed, INT64_MAX if none */
    bool onepass;           /* fused path: rows go through the kernel set's one-pass kernel */
    bool stream; /* codes around the cache: quantize_stream (stream_shape, stream_wanted) */
} quant_run;

/* Columns c0.. of row `row` as contiguous bf16 the kernels read in registers (no widened copy
 * in scratch), or NULL when the input, the plan (symmetric integer codes, tiles of
 * QUANT_BF16_DIRECT_MIN_TILE and more) or the kernel set does not allow it. */
static const uint16_t *bf16_direct(const quant_reader *rd, int64_t row, int64_t c0)
{
    const quant_tensor *x = rd->x;
    const quant_plan *p = rd->plan;
    if (x->dtype != QUANT_DTYPE_BF16 || !rd->k->absmax_bf16 || !rd->k->quantize_bf16) return NULL;
    bool int_codes = p->kcode == QK_I8 || p->kcode == QK_U8 || p->kcode == QK_I16;
    if (!int_codes || p->method.asymmetric || p->col_tile < QUANT_BF16_DIRECT_MIN_TILE) return NULL;
    if (x->rank > 0 && x->strides[x->rank - 1] != 1 && x->shape[x->rank - 1] > 1) return NULL;
    return (const uint16_t *)(const void *)quant_row_address(x, row, c0);
}

/* quant_reduce_row for an absmax calibration of a bf16 row read in place; anything else goes
 * through quant_reduce_row. A non-finite value is located on the widened chunk. */
static int reduce_row(quant_reader *rd, int64_t row, float *scratch, float *a, float *b,
                      double *sums)
{
    const quant_plan *p = rd->plan;
    if (p->method.kind != QUANT_CALIB_ABSMAX || !bf16_direct(rd, row, 0))
        return quant_reduce_row(rd, row, scratch, a, b, sums);
    for (int64_t c0 = 0; c0 < p->ncols; c0 += QUANT_CHUNK) {
        int64_t n = p->ncols - c0 < QUANT_CHUNK ? p->ncols - c0 : QUANT_CHUNK;
        if (rd->k->absmax_bf16(bf16_direct(rd, row, c0), n, c0, p->col_tile, a)) {
            quant_reader_bad(rd, row, c0, quant_load_row(rd->k, rd->x, p, row, c0, n, scratch), n);
            return 1;
        }
    }
    return 0;
}

/* The error sums of the span just quantized (columns c0.. of row `row`; x is its input as float32
 * or NULL when it was read as bf16 in place; `codes` the codes as the kernel wrote them, before
 * any packing: each in its nibble's range, so they are the bytes quant_unpack_nibbles gives back)
 * into its work item's partial sums. */
static void measure_span(quant_run *run, int64_t row, int64_t c0, int64_t n, const float *x,
                         const void *codes, int worker)
{
    const quant_plan *p = run->rd.plan;
    float *xs = run->scratch + (int64_t)worker * QUANT_CHUNK;
    bool bf16 = false;
    const void *src =
        x ? (const void *)x : quant_errstats_source(run->rd.k, run->rd.x, p, row, c0, n, xs, &bf16);
    const float *scale = run->scale ? run->scale : run->scale_out;
    const int32_t *zp = run->scale ? run->zp : run->zp_out;
    quant_errstats_codes(run->rd.k, p, codes, scale, zp, row, c0, n, src, bf16, xs,
                         run->deq + (int64_t)worker * QUANT_CHUNK,
                         run->err_partial + row / run->rows_per_item * 3);
}

/* The kernel arguments of a row with these scales (pf unset). */
static quant_krow row_krow(const quant_run *run, const float *scale, const int32_t *zp,
                           bool checked)
{
    const quant_plan *p = run->rd.plan;
    return (quant_krow){.kcode = p->kcode,
                        .tile = p->col_tile,
                        .scale = scale,
                        .zp = zp,
                        .qmin = (float)p->traits->qmin,
                        .qmax = (float)p->traits->qmax,
                        .pf = NULL,
                        .pf_elem = (int64_t)quant_dtype_size(run->rd.x->dtype),
                        .checked = checked};
}

/* quantize_stream's `stream`: the call is large (run->stream) and nothing reads the codes back at
 * once (no error sums). */
static bool codes_stream(const quant_run *run)
{
    return run->stream && !run->err_partial;
}

/* Quantizes one row with the scales of its scale row. `pre` is the row already widened into
 * scratch (when the row fits one chunk), or NULL. Returns nonzero on non-finite input. */
static int quantize_row(quant_run *run, int64_t row, int worker, const float *scale,
                        const int32_t *zp, const float *pre, bool prefetch, bool checked)
{
    const quant_plan *p = run->rd.plan;
    const quant_tensor *src = run->rd.x;
    bool contiguous = src->rank == 0 || src->strides[src->rank - 1] == 1;
    quant_krow kr = row_krow(run, scale, zp, checked);
    uint8_t *dst = run->q + row * p->qrow_bytes;
    float *scratch = run->scratch + (int64_t)worker * QUANT_CHUNK;
    uint8_t *codes = run->codes + (int64_t)worker * QUANT_CHUNK;
    for (int64_t c0 = 0; c0 < p->ncols; c0 += QUANT_CHUNK) {
        int64_t n = p->ncols - c0 < QUANT_CHUNK ? p->ncols - c0 : QUANT_CHUNK;
        const uint16_t *h = pre || run->how->stochastic ? NULL : bf16_direct(&run->rd, row, c0);
        const float *x =
            pre || h ? pre : quant_load_row(run->rd.k, run->rd.x, p, row, c0, n, scratch);
        void *out = p->packed ? (void *)codes : (void *)(dst + c0 * (int64_t)p->code_size);
        if (prefetch && contiguous) {
            int64_t row_bytes = p->ncols * kr.pf_elem;
            int64_t ahead = (PREFETCH_AHEAD_BYTES + row_bytes - 1) / row_bytes;
            if (row + ahead < p->nrows) kr.pf = quant_row_address(src, row + ahead, c0);
        }
        int bad;
        if (run->how->stochastic)
            bad = quant_generic_quantize_sr(
                &kr, x, n, c0, run->how->sr_key,
                run->how->sr_index_base + (uint64_t)(row * p->ncols + c0), out);
        else if (run->stream)
            bad = run->rd.k->quantize_stream(&kr, h ? (const void *)h : (const void *)x, h != NULL,
                                             n, c0, codes_stream(run), out);
        else if (h)
            bad = run->rd.k->quantize_bf16(&kr, h, n, c0, out);
        else
            bad = run->rd.k->quantize(&kr, x, n, c0, out);
        if (bad) {
            if (h) x = quant_load_row(run->rd.k, run->rd.x, p, row, c0, n, scratch);
            quant_reader_bad(&run->rd, row, c0, x, n);
            return 1;
        }
        if (p->packed) run->rd.k->pack(codes, n, dst + c0 / 2);
        if (run->err_partial) measure_span(run, row, c0, n, x, out, worker);
    }
    return 0;
}

static void given_item(void *arg, int64_t item, int worker)
{
    quant_run *run = arg;
    const quant_plan *p = run->rd.plan;
    int64_t end = (item + 1) * run->rows_per_item;
    if (end > p->nrows) end = p->nrows;
    for (int64_t row = item * run->rows_per_item; row < end; row++) {
        if (quant_reader_skip(&run->rd, row)) return;
        int64_t off = quant_plan_srow(p, row) * p->ncolgroups;
        if (quantize_row(run, row, worker, run->scale + off, run->zp ? run->zp + off : NULL, NULL,
                         false, false))
            return;
    }
}

/* The rows of x can be read in place as bf16 (contiguous along the last axis). */
static bool bf16_rows(const quant_tensor *x)
{
    return x->dtype == QUANT_DTYPE_BF16 &&
           (x->rank == 0 || x->strides[x->rank - 1] == 1 || x->shape[x->rank - 1] == 1);
}

/* The plan's calibration is minmax (asymmetric, with or without a factor): the one-pass
 * kernel's op->minmax rule. */
static bool onepass_minmax(const quant_plan *p)
{
    return p->method.kind == QUANT_CALIB_MINMAX && p->method.asymmetric;
}

/* The plan and kernel set allow a one-pass kernel (quant_quantize_absmax_fn's contract, or
 * quant_quantize_onepass_fn's for the microscaling rules, minmax integer rules and bf16 rows
 * read in place), and a symmetric input is not a bf16 row the division path reads in place
 * (bf16_direct: tiles of 64 and more). */
static bool onepass_allowed(const quant_run *run, const quant_plan *p)
{
    const quant_calib_method *m = &p->method;
    const quant_kernels *k = run->rd.k;
    if (run->how->scale_dtype != QUANT_DTYPE_F32 || run->how->stochastic ||
        !QUANT_ONEPASS_TILE_OK(p->col_tile) || p->ncols % p->col_tile != 0)
        return false;
    if (onepass_minmax(p))
        return k->quantize_onepass && p->traits->scale_kind == QUANT_SCALE_LINEAR &&
               (p->kcode == QK_I8 || p->kcode == QK_U8);
    if (bf16_direct(&run->rd, 0, 0) || m->kind != QUANT_CALIB_ABSMAX || m->asymmetric ||
        m->has_factor)
        return false;
    switch (p->traits->scale_kind) {
    case QUANT_SCALE_LINEAR:
        return (k->quantize_absmax || k->quantize_onepass) &&
               (p->kcode == QK_I8 || p->kcode == QK_U8 || p->kcode == QK_I16);
    case QUANT_SCALE_MX:
        return k->quantize_onepass && (p->kcode == QK_E4M3 || p->kcode == QK_E2M1) &&
               p->col_tile <= 32;
    case QUANT_SCALE_NVFP4:
        return k->quantize_onepass && p->kcode == QK_E2M1 && p->col_tile <= 32 &&
               p->global_scale > 0.0f && !qn_nonfinite(p->global_scale);
    default:
        return false;
    }
}

/* True when x's elements lie row-major without gaps (its rows back to back). */
static bool dense(const quant_tensor *x)
{
    int64_t want = 1;
    for (int k = x->rank - 1; k >= 0; k--) {
        if (x->shape[k] > 1 && x->strides[k] != want) return false;
        want *= x->shape[k];
    }
    return true;
}

/* What the one-pass kernel prefetches while it quantizes the n values of row `row` from column
 * c0: the source ONEPASS_PREFETCH_BYTES further on when x is dense (NULL near its end), else the
 * same columns of the row PREFETCH_AHEAD_BYTES or more ahead. */
static const char *onepass_prefetch(const quant_tensor *x, const quant_plan *p, int64_t row,
                                    int64_t c0, int64_t n, int64_t elem)
{
    if (dense(x)) {
        int64_t at = (row * p->ncols + c0) * elem + ONEPASS_PREFETCH_BYTES;
        return at + n * elem <= p->numel * elem ? (const char *)x->data + at : NULL;
    }
    if (x->rank > 0 && x->strides[x->rank - 1] != 1) return NULL;
    int64_t ahead = (PREFETCH_AHEAD_BYTES + p->ncols * elem - 1) / (p->ncols * elem);
    return row + ahead < p->nrows ? quant_row_address(x, row + ahead, c0) : NULL;
}

/* The one-pass kernel's arguments for the plan's scale rule; `bf16` when it reads bf16 rows in
 * place; `zp` the row's zero points (minmax rules). */
static quant_onepass onepass_args(const quant_plan *p, bool bf16, int32_t *zp)
{
    const quant_calib_method *m = &p->method;
    return (quant_onepass){.bf16 = bf16,
                           .kind = p->traits->scale_kind,
                           .bound = p->traits->symmetric_bound,
                           .c = p->traits->scale_constant,
                           .g = p->global_scale,
                           .packed = false,
                           .minmax = onepass_minmax(p),
                           .factor = m->has_factor ? (float)m->factor : 1.0f,
                           .zp = zp};
}

/* Row `row` by the one-pass kernel, chunk by chunk (chunks hold whole groups), its scales into
 * `scale` (and zero points into `zp`, minmax rules): a bf16 row read in place when the kernel
 * set has quantize_onepass, other sources converted into scratch. Returns nonzero when the
 * kernel declined (a non-finite value or scale): the caller then redoes the row by the
 * three-pass path, which reports it. */
static int onepass_row(quant_run *run, int64_t row, int worker, float *scale, int32_t *zp)
{
    const quant_plan *p = run->rd.plan;
    const quant_tensor *src = run->rd.x;
    const quant_kernels *k = run->rd.k;
    quant_krow kr = {.kcode = p->kcode,
                     .tile = p->col_tile,
                     .qmin = (float)p->traits->qmin,
                     .qmax = (float)p->traits->qmax,
                     .pf_elem = (int64_t)quant_dtype_size(src->dtype),
                     .checked = false};
    bool in_place = k->quantize_onepass && bf16_rows(src);
    quant_onepass op = onepass_args(p, in_place, zp);
    bool general = k->quantize_onepass != NULL; /* else quantize_absmax (linear float32) */
    /* packed e2m1 (or minmax int4 / uint4) codes straight into the output, unless the error
     * sums need them unpacked */
    op.packed = general && p->packed && (p->kcode == QK_E2M1 || op.minmax) && !run->err_partial;
    bool staged = p->packed && !op.packed;
    uint8_t *dst = run->q + row * p->qrow_bytes;
    float *scratch = run->scratch + (int64_t)worker * QUANT_CHUNK;
    uint8_t *codes = run->codes + (int64_t)worker * QUANT_CHUNK;
    /* a chunk declined after earlier ones were measured: the three-pass redo measures the whole
     * row again, so the item's sums go back to what they were before this row */
    double *sums = run->err_partial ? run->err_partial + row / run->rows_per_item * 3 : NULL;
    double before[3] = {0, 0, 0};
    if (sums) memcpy(before, sums, sizeof before);
    for (int64_t c0 = 0; c0 < p->ncols; c0 += QUANT_CHUNK) {
        int64_t n = p->ncols - c0 < QUANT_CHUNK ? p->ncols - c0 : QUANT_CHUNK;
        const float *x = in_place ? NULL : quant_load_row(k, src, p, row, c0, n, scratch);
        const void *from = in_place ? (const void *)quant_row_address(src, row, c0) : x;
        void *out = staged      ? (void *)codes
                    : op.packed ? (void *)(dst + c0 / 2)
                                : (void *)(dst + c0 * (int64_t)p->code_size);
        kr.pf = onepass_prefetch(src, p, row, c0, n, kr.pf_elem);
        if (general ? k->quantize_onepass(&kr, from, n, c0, &op, scale, out)
                    : k->quantize_absmax(&kr, x, n, c0, op.bound, scale, out)) {
            if (sums) memcpy(sums, before, sizeof before);
            return 1;
        }
        if (staged) k->pack(codes, n, dst + c0 / 2);
        if (run->err_partial) measure_span(run, row, c0, n, x, out, worker);
    }
    return 0;
}

/* The kernel set has quantize_stream and the plan is a shape it is meant for: symmetric integer
 * codes, tiles of QUANT_STREAM_MIN_TILE and more, rows read in place (float32, or bf16 by
 * bf16_direct), no stochastic rounding. */
static bool stream_shape(const quant_run *run, const quant_plan *p)
{
    bool in_place = quant_rows_direct(run->rd.x) || bf16_direct(&run->rd, 0, 0);
    return run->rd.k->quantize_stream && in_place && !p->method.asymmetric &&
           !run->how->stochastic &&
           (p->kcode == QK_I8 || p->kcode == QK_U8 || p->kcode == QK_I16) &&
           p->col_tile >= QUANT_STREAM_MIN_TILE;
}

/* Fused: calibrate the row, derive its scales, quantize it while it is still in cache. */
static void fused_item(void *arg, int64_t item, int worker)
{
    quant_run *run = arg;
    const quant_plan *p = run->rd.plan;
    int64_t ng = p->ncolgroups, woff = (int64_t)worker * ng;
    float *a = run->acc_a ? run->acc_a + woff : NULL, *b = run->acc_b ? run->acc_b + woff : NULL;
    double *sums = run->acc_s ? run->acc_s + woff : NULL;
    quant_calibration cal = {p->method.asymmetric, run->cal_a + woff, run->cal_a + woff,
                             run->cal_b ? run->cal_b + woff : NULL};
    float *scratch = run->scratch + (int64_t)worker * QUANT_CHUNK;
    int64_t end = (item + 1) * run->rows_per_item;
    if (end > p->nrows) end = p->nrows;
    for (int64_t row = item * run->rows_per_item; row < end; row++) {
        if (quant_reader_skip(&run->rd, row)) return;
        int64_t off = quant_plan_srow(p, row) * ng;
        int32_t *zp_row = p->method.asymmetric ? run->zp_out + off : NULL;
        if (run->onepass && !onepass_row(run, row, worker, run->scale_out + off, zp_row)) continue;
        quant_reduce_init(p, ng, a, b, sums);
        if (reduce_row(&run->rd, row, scratch, a, b, sums)) return;
        quant_reduce_finish(p, ng, a, b, sums, &cal, 0);
        int32_t *zp = p->method.asymmetric ? run->zp_out + off : NULL;
        if (quant_scale_range(run->rd.k, p, run->how->scale_dtype, &cal, ng, run->scale_out + off,
                              zp, off, NULL) != QUANT_OK) {
            long long cur = atomic_load(&run->bad_scale);
            while (off < cur && !atomic_compare_exchange_weak(&run->bad_scale, &cur, off)) {
            }
            return;
        }
        /* the reduction left the row widened in scratch (unless it read it in place) */
        bool one_chunk = p->ncols <= QUANT_CHUNK && !quant_rows_direct(run->rd.x) &&
                         !(p->method.kind == QUANT_CALIB_ABSMAX && bf16_direct(&run->rd, row, 0));
        /* while this row is quantized from cache, pull a later one in (the next item's rows
         * too: with one thread it comes next); the reduction above already proved the row
         * finite */
        if (quantize_row(run, row, worker, run->scale_out + off, zp, one_chunk ? scratch : NULL,
                         true, true))
            return;
    }
}

static int64_t nitems(const quant_run *run, const quant_plan *p)
{
    return (p->nrows + run->rows_per_item - 1) / run->rows_per_item;
}

static quant_status run_alloc(quant_run *run, const quant_plan *p, int threads, bool fused,
                              bool measured, quant_error *err)
{
    run->rows_per_item = quant_rows_per_item(p);
    run->scratch = malloc((size_t)threads * QUANT_CHUNK * sizeof *run->scratch);
    run->codes = malloc((size_t)threads * QUANT_CHUNK);
    bool ok = run->scratch && run->codes;
    if (measured) {
        ok = ok && (run->deq = malloc((size_t)threads * QUANT_CHUNK * sizeof *run->deq));
        ok = ok && (run->err_partial = calloc((size_t)nitems(run, p) * 3, sizeof(double)));
    }
    if (fused) {
        size_t per = (size_t)threads * (size_t)(p->ncolgroups ? p->ncolgroups : 1);
        if (p->method.kind == QUANT_CALIB_RMS) {
            ok = ok && (run->acc_s = malloc(per * sizeof *run->acc_s));
        } else {
            ok = ok && (run->acc_a = malloc(per * sizeof *run->acc_a));
            if (p->method.asymmetric) ok = ok && (run->acc_b = malloc(per * sizeof *run->acc_b));
        }
        ok = ok && (run->cal_a = malloc(per * sizeof *run->cal_a));
        if (p->method.asymmetric) ok = ok && (run->cal_b = malloc(per * sizeof *run->cal_b));
    }
    atomic_init(&run->bad_scale, INT64_MAX);
    return ok ? QUANT_OK : quant_fail(err, QUANT_ERR_NOMEM, "cannot allocate quantize buffers");
}

static void run_free(quant_run *run)
{
    free(run->scratch);
    free(run->codes);
    free(run->acc_a);
    free(run->acc_b);
    free(run->acc_s);
    free(run->cal_a);
    free(run->cal_b);
    free(run->deq);
    free(run->err_partial);
}

static quant_status check_given_scale(const quant_plan *p, const float *scale, const int32_t *zp,
                                      quant_error *err)
{
    QUANT_RETURN_IF_ERR(quant_check_zero_point(p, zp, err));
    for (int64_t i = 0; i < p->scale_numel; i++) {
        if (!(scale[i] > 0.0f) || qn_nonfinite(scale[i]))
            return quant_fail(err, QUANT_ERR_ARG, "scale[%lld] = %g is not positive and finite",
                              (long long)i, (double)scale[i]);
        if (zp && (zp[i] < p->traits->qmin || zp[i] > p->traits->qmax))
            return quant_fail(err, QUANT_ERR_ARG, "zero_point[%lld] = %d is outside %s's [%d, %d]",
                              (long long)i, (int)zp[i], p->traits->name, (int)p->traits->qmin,
                              (int)p->traits->qmax);
    }
    return QUANT_OK;
}

/* Runs the rows of one pass (fused or with known scales) on the pool; fills err on non-finite
 * input, and *stats (when not NULL) with the error sums. The caller set up `run` and frees it. */
static quant_status run_pass(quant_ctx *ctx, quant_run *run, const quant_plan *p, bool fused,
                             quant_error_stats *stats, quant_error *err)
{
    quant_status st = run_alloc(run, p, quant_pool_threads(ctx->pool), fused, stats != NULL, err);
    if (st != QUANT_OK) return st;
    quant_pool_run(ctx->pool, nitems(run, p), fused ? fused_item : given_item, run);
    long long bad = atomic_load(&run->rd.bad);
    if (bad != INT64_MAX) return quant_fail_nonfinite(err, bad);
    if (stats) quant_errstats_sum(run->err_partial, nitems(run, p), stats);
    return QUANT_OK;
}

/* True when the call's input and code bytes reach ctx->stream_min_bytes: its codes may then go
 * around the cache (quantize_stream's `stream`). Packed codes are staged in scratch, so never; nor
 * for bf16 input: out of cache it ran at 0.39-0.41 of the read-only pass against 0.49-0.57
 * without (BENCHMARKS.md, 2026-11-25), where float32 gains 5-10%. */
static bool stream_wanted(const quant_ctx *ctx, const quant_plan *p, const quant_tensor *x)
{
    if (ctx->stream_min_bytes < 0 || p->packed || x->dtype != QUANT_DTYPE_F32) return false;
    int64_t bytes = p->numel * ((int64_t)quant_dtype_size(x->dtype) + (int64_t)p->code_size);
    return bytes >= ctx->stream_min_bytes;
}

/* The quantize pass with known scales (shared by both public entry points). */
static quant_status quantize_given(quant_ctx *ctx, const quant_how *how, const quant_plan *p,
                                   const quant_tensor *x, const float *scale, const int32_t *zp,
                                   void *q, quant_error_stats *stats, quant_error *err)
{
    if (p->numel == 0) return QUANT_OK;
    quant_run run = {0};
    quant_reader_init(&run.rd, p, x, ctx->k);
    run.how = how;
    run.q = q;
    run.scale = scale;
    run.zp = zp;
    run.stream = stream_wanted(ctx, p, x) && stream_shape(&run, p);
    quant_status st = run_pass(ctx, &run, p, false, stats, err);
    run_free(&run);
    return st;
}

static quant_status check_args(quant_ctx *ctx, const quant_how *how, const quant_tensor *x,
                               quant_plan *p, quant_error *err)
{
    quant_error_clear(err);
    if (!ctx) return quant_fail(err, QUANT_ERR_ARG, "context is NULL");
    QUANT_RETURN_IF_ERR(quant_check_input(x, err));
    return quant_plan_make(how, x->rank, x->shape, p, err);
}

quant_status quant_quantize_with_scale_measured(quant_ctx *ctx, const quant_how *how,
                                                const quant_tensor *x, const float *scale,
                                                const int32_t *zero_point, void *q,
                                                quant_error_stats *stats, quant_error *err)
{
    if (stats) *stats = (quant_error_stats){0};
    quant_plan p;
    QUANT_RETURN_IF_ERR(check_args(ctx, how, x, &p, err));
    if (!scale || (!q && p.numel > 0)) return quant_fail(err, QUANT_ERR_ARG, "scale or q is NULL");
    QUANT_RETURN_IF_ERR(check_given_scale(&p, scale, zero_point, err));
    quant_status st = quantize_given(ctx, how, &p, x, scale, zero_point, q, stats, err);
    if (st != QUANT_OK && stats) *stats = (quant_error_stats){0};
    return st;
}

quant_status quant_quantize_with_scale(quant_ctx *ctx, const quant_how *how, const quant_tensor *x,
                                       const float *scale, const int32_t *zero_point, void *q,
                                       quant_error *err)
{
    return quant_quantize_with_scale_measured(ctx, how, x, scale, zero_point, q, NULL, err);
}

/* Two passes: calibrate everything, derive the scales, then quantize. */
static quant_status quantize_two_pass(quant_ctx *ctx, const quant_how *how, const quant_plan *p,
                                      const quant_tensor *x, void *q, float *scale, int32_t *zp,
                                      quant_error_stats *stats, quant_error *err)
{
    size_t n = (size_t)(p->scale_numel ? p->scale_numel : 1);
    quant_calibration cal = {p->method.asymmetric, NULL, NULL, NULL};
    cal.absmax = cal.min = malloc(n * sizeof(float));
    if (p->method.asymmetric) cal.max = malloc(n * sizeof(float));
    quant_status st = QUANT_OK;
    if (!cal.absmax || (p->method.asymmetric && !cal.max))
        st = quant_fail(err, QUANT_ERR_NOMEM, "cannot allocate calibration buffers");
    if (st == QUANT_OK) st = quant_calibrate_plan(ctx, p, x, &cal, err);
    if (st == QUANT_OK)
        st =
            quant_scale_range(ctx->k, p, how->scale_dtype, &cal, p->scale_numel, scale, zp, 0, err);
    if (st == QUANT_OK) st = quantize_given(ctx, how, p, x, scale, zp, q, stats, err);
    free(cal.absmax);
    free(cal.max);
    return st;
}

static quant_status quantize_fused(quant_ctx *ctx, const quant_how *how, const quant_plan *p,
                                   const quant_tensor *x, void *q, float *scale, int32_t *zp,
                                   quant_error_stats *stats, quant_error *err)
{
    quant_run run = {0};
    quant_reader_init(&run.rd, p, x, ctx->k);
    run.how = how;
    run.q = q;
    run.scale_out = scale;
    run.zp_out = zp;
    run.onepass = onepass_allowed(&run, p);
    run.stream = stream_wanted(ctx, p, x) && stream_shape(&run, p);
    quant_status st = run_pass(ctx, &run, p, true, stats, err);
    long long bad_scale = atomic_load(&run.bad_scale);
    if (st == QUANT_OK && bad_scale != INT64_MAX) {
        /* rerun the first failing scale row alone to report it */
        int64_t row = bad_scale / p->ncolgroups;
        quant_reduce_init(p, p->ncolgroups, run.acc_a, run.acc_b, run.acc_s);
        quant_reduce_row(&run.rd, quant_plan_member_row(p, row, 0), run.scratch, run.acc_a,
                         run.acc_b, run.acc_s);
        quant_calibration cal = {p->method.asymmetric, run.cal_a, run.cal_a, run.cal_b};
        quant_reduce_finish(p, p->ncolgroups, run.acc_a, run.acc_b, run.acc_s, &cal, 0);
        st = quant_scale_range(ctx->k, p, how->scale_dtype, &cal, p->ncolgroups, scale + bad_scale,
                               zp ? zp + bad_scale : NULL, bad_scale, err);
    }
    run_free(&run);
    return st;
}

/* nvfp4 without a given global scale: g from max |x| over the whole tensor (SPEC 2b). */
static quant_status derive_global_scale(quant_ctx *ctx, const quant_tensor *x, quant_plan *p,
                                        quant_error *err)
{
    if (p->traits->scale_kind != QUANT_SCALE_NVFP4 || p->global_scale != 0.0f) return QUANT_OK;
    float amax = 0.0f;
    QUANT_RETURN_IF_ERR(quant_absmax_all(ctx, x, &amax, err));
    p->global_scale = quant_nvfp4_global_scale(amax);
    return QUANT_OK;
}

quant_status quant_quantize_measured(quant_ctx *ctx, const quant_how *how, const quant_tensor *x,
                                     void *q, float *scale, int32_t *zero_point,
                                     quant_error_stats *stats, quant_error *err)
{
    if (stats) *stats = (quant_error_stats){0};
    quant_plan p;
    QUANT_RETURN_IF_ERR(check_args(ctx, how, x, &p, err));
    QUANT_RETURN_IF_ERR(derive_global_scale(ctx, x, &p, err));
    if (!scale || (!q && p.numel > 0)) return quant_fail(err, QUANT_ERR_ARG, "scale or q is NULL");
    if (p.method.asymmetric && !zero_point)
        return quant_fail(err, QUANT_ERR_ARG, "zero_point is NULL for an asymmetric calibration");
    if (!p.method.asymmetric) zero_point = NULL; /* symmetric: the caller's buffer is not used */
    quant_status st;
    if (p.members == 1 && p.numel > 0 && p.method.kind != QUANT_CALIB_FIXED &&
        !quant_plan_is_mse(&p)) /* the MSE search runs after the calibration pass */
        st = quantize_fused(ctx, how, &p, x, q, scale, zero_point, stats, err);
    else
        st = quantize_two_pass(ctx, how, &p, x, q, scale, zero_point, stats, err);
    if (st != QUANT_OK && stats) *stats = (quant_error_stats){0};
    return st;
}

quant_status quant_quantize(quant_ctx *ctx, const quant_how *how, const quant_tensor *x, void *q,
                            float *scale, int32_t *zero_point, quant_error *err)
{
    return quant_quantize_measured(ctx, how, x, q, scale, zero_point, NULL, err);
}
