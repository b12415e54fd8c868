/* compute.c -- the compute stage: one unit of work at a time through libquant (its thread pool
 * does the math). Quantizes a row range (or calibrates it, in a two-pass tensor), measures the
 * error of the fake-quantized values against the input in the same pass
 * (quant_quantize_measured), and encodes the outputs (codes, scales, zero points) as the layout
 * stores them. SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"

static quant_ck_status qfail(quant_ck_error *err, const ck_unit *u, const quant_error *qe)
{
    return quant_ck_fail(err, QUANT_CK_ERR_QUANT, "tensor '%s': %s", u->tp->in->name, qe->message);
}

static quant_ck_status nomem(quant_ck_error *err)
{
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

static void state_clear(ck_tensor_state *st)
{
    free(st->scale);
    free(st->zp);
    free(st->absmax);
    free(st->min);
    free(st->max);
    free(st->sumsq);
    memset(st, 0, sizeof *st);
}

static quant_ck_status state_init(ck_tensor_state *st, const ck_tensor_plan *tp,
                                  quant_ck_error *err)
{
    state_clear(st);
    size_t n = (size_t)tp->scale_numel;
    st->scale = malloc(n * sizeof *st->scale);
    if (tp->asym) st->zp = malloc(n * sizeof *st->zp);
    if (tp->two_pass) {
        st->absmax = malloc(n * sizeof *st->absmax);
        st->min = malloc(n * sizeof *st->min);
        st->max = malloc(n * sizeof *st->max);
        st->sumsq = calloc(n, sizeof *st->sumsq);
    }
    bool ok = st->scale && (!tp->asym || st->zp) &&
              (!tp->two_pass || (st->absmax && st->min && st->max && st->sumsq));
    return ok ? QUANT_CK_OK : nomem(err);
}

/* ---- two-pass calibration: per-unit reductions merged exactly (max, min), rms via sums ------- */

static quant_ck_status calibrate_unit(ck_compute *c, ck_unit *u, const quant_tensor *x,
                                      quant_how *how, quant_ck_error *err)
{
    const ck_tensor_plan *tp = u->tp;
    ck_tensor_state *st = &c->st;
    quant_calib_method m;
    quant_error qe;
    if (quant_calib_parse(how->calibration, &m, &qe) != QUANT_OK) return qfail(err, u, &qe);
    if (m.kind == QUANT_CALIB_RMS) how->calibration = "rms,1"; /* the factor comes at the end */
    size_t n = (size_t)tp->scale_numel;
    float *a = malloc(n * sizeof *a), *lo = malloc(n * sizeof *lo), *hi = malloc(n * sizeof *hi);
    quant_calibration cal = {.asymmetric = m.asymmetric, .absmax = a, .min = lo, .max = hi};
    quant_status qs = a && lo && hi ? quant_calibrate(c->ctx, how, x, &cal, &qe) : QUANT_ERR_NOMEM;
    if (qs == QUANT_OK) {
        double per = (double)(u->rows * tp->row_elems) / (double)n;
        for (size_t i = 0; i < n; i++) {
            bool first = st->calib_units == 0;
            if (m.asymmetric) {
                st->min[i] = first || lo[i] < st->min[i] ? lo[i] : st->min[i];
                st->max[i] = first || hi[i] > st->max[i] ? hi[i] : st->max[i];
            } else if (m.kind == QUANT_CALIB_RMS) {
                st->sumsq[i] += (double)a[i] * (double)a[i] * per;
            } else {
                st->absmax[i] = first || a[i] > st->absmax[i] ? a[i] : st->absmax[i];
            }
        }
        st->calib_units++;
    }
    free(a);
    free(lo);
    free(hi);
    if (qs == QUANT_ERR_NOMEM) return nomem(err);
    if (qs != QUANT_OK) return qfail(err, u, &qe);
    if (!u->last) return QUANT_CK_OK;
    /* All of axis 0 seen: finish rms, then SPEC section 4 once for the whole tensor. */
    if (m.kind == QUANT_CALIB_RMS) {
        double total = (double)quant_numel(tp->in->rank, tp->in->shape) / (double)n;
        for (size_t i = 0; i < n; i++) {
            float r = (float)sqrt(st->sumsq[i] / total);
            st->absmax[i] = m.has_factor ? r * (float)m.factor : r;
        }
    }
    quant_calibration all = {
        .asymmetric = m.asymmetric, .absmax = st->absmax, .min = st->min, .max = st->max};
    if (quant_compute_scale(&tp->how, &all, (int64_t)n, st->scale, st->zp, &qe) != QUANT_OK)
        return qfail(err, u, &qe);
    return QUANT_CK_OK;
}

/* ---- quality: fake-quant error against the input, taken by the quantize pass ----------------- */

static void add_quality(ck_compute *c, const quant_error_stats *es)
{
    c->st.sum_x2 += es->sum_sq_x;
    c->st.sum_e2 += es->sum_sq_err;
    if (es->max_abs_err > c->st.max_err) c->st.max_err = es->max_abs_err;
}

/* ---- encoding the outputs -------------------------------------------------------------------- */

static quant_ck_status add_piece(ck_unit *u, long index, uint64_t offset, void *buf, size_t len,
                                 size_t alloc)
{
    ck_piece *p = &u->piece[u->n_pieces++];
    *p = (ck_piece){.index = index, .offset = offset, .buf = buf, .len = len, .alloc = alloc};
    return QUANT_CK_OK;
}

static quant_ck_status emit_codes(ck_unit *u, void *q, size_t qbytes, quant_ck_error *err)
{
    const ck_tensor_plan *tp = u->tp;
    if (tp->codec == CK_CODEC_RAW) {
        uint64_t row_bytes = qbytes / (uint64_t)u->rows;
        return add_piece(u, tp->out[CK_OUT_DATA], row_bytes * (uint64_t)u->row0, q, qbytes, qbytes);
    }
    int bits = quant_qtype_traits_get(tp->how.qtype)->bits;
    int64_t n = tp->in->shape[tp->in->rank - 1];
    int64_t rows = u->rows * (tp->row_elems / n);
    size_t len = (size_t)(rows * ck_pack32_words(n, bits)) * 4;
    void *packed = ck_buf_alloc(len);
    if (!packed) {
        ck_buf_free(q, qbytes);
        return nomem(err);
    }
    ck_pack32_rows(q, rows, n, bits, packed);
    ck_buf_free(q, qbytes);
    uint64_t row_bytes = len / (uint64_t)u->rows;
    return add_piece(u, tp->out[CK_OUT_DATA], row_bytes * (uint64_t)u->row0, packed, len, len);
}

/* compressed-tensors nvfp4: weight_scale as the e4m3fn block scales s_b, weight_global_scale g. */
static quant_ck_status emit_nvfp4_scales(ck_unit *u, const float *scale, size_t n,
                                         quant_ck_error *err)
{
    const ck_tensor_plan *tp = u->tp;
    float g = tp->how.global_scale;
    void *e = ck_ct_encode_nvfp4_scale(scale, n, g);
    if (!e)
        return quant_ck_fail(err, QUANT_CK_ERR_QUANT,
                             "tensor '%s' (rule %ld): an nvfp4 scale under global scale %g does "
                             "not come back from float8_e4m3fn (or out of memory)",
                             tp->in->name, tp->rule, (double)g);
    add_piece(u, tp->out[CK_OUT_SCALE], 0, e, n, n);
    float *gs = ck_buf_alloc(sizeof *gs);
    if (!gs) return nomem(err);
    *gs = g;
    return add_piece(u, tp->out[CK_OUT_GSCALE], 0, gs, sizeof *gs, sizeof *gs);
}

/* The scale (and zero point, and compressed-tensors' weight_shape) once the tensor is done. */
static quant_ck_status emit_params(ck_compute *c, ck_unit *u, quant_ck_error *err)
{
    const ck_tensor_plan *tp = u->tp;
    size_t n = (size_t)tp->scale_numel;
    if (tp->scale_e8m0) {
        void *e = ck_ct_encode_e8m0(c->st.scale, n);
        if (!e)
            return quant_ck_fail(err, QUANT_CK_ERR_QUANT,
                                 "tensor '%s' (rule %ld): a scale is not a power of two in "
                                 "2^-127..2^127, so E8M0 cannot hold it (or out of memory)",
                                 tp->in->name, tp->rule);
        add_piece(u, tp->out[CK_OUT_SCALE], 0, e, n, n);
        return QUANT_CK_OK;
    }
    if (tp->scale_e4m3) return emit_nvfp4_scales(u, c->st.scale, n, err);
    size_t ssize = quant_dtype_size(tp->how.scale_dtype);
    void *s = ck_buf_alloc(n * ssize);
    if (!s) return nomem(err);
    quant_convert(QUANT_DTYPE_F32, c->st.scale, tp->how.scale_dtype, s, (int64_t)n, NULL);
    add_piece(u, tp->out[CK_OUT_SCALE], 0, s, n * ssize, n * ssize);
    if (tp->out[CK_OUT_ZP] >= 0) {
        size_t len = 0;
        void *z = ck_encode_zero_point(tp, c->st.zp, &len);
        if (!z) return nomem(err);
        add_piece(u, tp->out[CK_OUT_ZP], 0, z, len, len);
    }
    if (tp->out[CK_OUT_SHAPE] >= 0) {
        int64_t *shape = ck_buf_alloc(2 * sizeof *shape);
        if (!shape) return nomem(err);
        shape[0] = tp->in->shape[0];
        shape[1] = tp->in->shape[1];
        add_piece(u, tp->out[CK_OUT_SHAPE], 0, shape, 2 * sizeof *shape, 2 * sizeof *shape);
    }
    return QUANT_CK_OK;
}

static quant_ck_status quantize_unit(ck_compute *c, ck_unit *u, const quant_tensor *x,
                                     const quant_how *how, quant_ck_error *err)
{
    const ck_tensor_plan *tp = u->tp;
    ck_tensor_state *st = &c->st;
    int64_t at = tp->two_pass ? 0 : u->row0 / tp->tile0 * (tp->scale_numel / tp->scale_shape[0]);
    float *scale = st->scale + at;
    int32_t *zp = st->zp ? st->zp + at : NULL;
    int64_t qb = quant_qvalue_bytes(how, x->rank, x->shape);
    void *q = qb >= 0 ? ck_buf_alloc((size_t)qb) : NULL;
    if (!q) return nomem(err);
    quant_error qe;
    quant_error_stats es, *esp = c->quality ? &es : NULL;
    quant_mse_result mse = {0};
    quant_how h = *how;
    h.mse_out = &mse;
    quant_status qs =
        tp->two_pass ? quant_quantize_with_scale_measured(c->ctx, how, x, scale, zp, q, esp, &qe)
                     : quant_quantize_measured(c->ctx, &h, x, q, scale, zp, esp, &qe);
    if (qs == QUANT_OK && mse.groups > 0) { /* an MSE search ran: its errors, unit by unit */
        st->mse = true;
        st->mse_before += mse.err_before;
        st->mse_after += mse.err_after;
        st->mse_groups += mse.groups;
        st->mse_shrunk += mse.shrunk;
    }
    if (qs != QUANT_OK) {
        ck_buf_free(q, (size_t)qb);
        return qfail(err, u, &qe);
    }
    if (esp) add_quality(c, esp);
    quant_ck_status st2 = emit_codes(u, q, (size_t)qb, err);
    if (st2 == QUANT_CK_OK && u->last) st2 = emit_params(c, u, err);
    return st2;
}

quant_ck_status ck_compute_unit(ck_compute *c, ck_unit *u, quant_ck_error *err)
{
    ck_tensor_plan *tp = u->tp;
    if (u->kind == CK_UNIT_COPY) {
        add_piece(u, tp->out[CK_OUT_DATA], u->in_off, u->in_buf, u->in_len, u->in_len);
        u->in_buf = NULL; /* the writer frees it now */
        return QUANT_CK_OK;
    }
    if (u->first) {
        quant_ck_status st = state_init(&c->st, tp, err);
        if (st != QUANT_CK_OK) return st;
    }
    quant_tensor x;
    int64_t shape[QUANT_MAX_RANK];
    memcpy(shape, tp->in->shape, sizeof shape);
    shape[0] = u->rows;
    quant_tensor_init(&x, tp->in_dtype, tp->in->rank, shape, u->in_buf, NULL);
    quant_how how = tp->how;
    how.sr_index_base = (uint64_t)(u->row0 * tp->row_elems);
    if (how.importance && how.importance_axis == 0) { /* units split axis 0 */
        how.importance += u->row0;
        how.importance_len = u->rows;
    }
    if (u->kind == CK_UNIT_CALIB) return calibrate_unit(c, u, &x, &how, err);
    return quantize_unit(c, u, &x, &how, err);
}

void ck_compute_finish(ck_compute *c, quant_report_entry *e)
{
    if (c->quality && e && e->quantized) {
        e->has_quality = true;
        e->max_abs_err = c->st.max_err;
        e->sqnr_db = c->st.sum_e2 > 0 ? 10.0 * log10(c->st.sum_x2 / c->st.sum_e2) : INFINITY;
    }
    if (e && e->quantized && c->st.mse) {
        e->has_mse = true;
        e->mse_err_before = c->st.mse_before;
        e->mse_err_after = c->st.mse_after;
        e->mse_groups = c->st.mse_groups;
        e->mse_shrunk = c->st.mse_shrunk;
    }
    state_clear(&c->st);
}

void ck_compute_destroy(ck_compute *c)
{
    state_clear(&c->st);
}
