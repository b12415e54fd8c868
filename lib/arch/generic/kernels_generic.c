/* kernels_generic.c -- the scalar reference kernels: reductions, quantize, dequantize, widening.
 * Every SIMD kernel must produce exactly these bits.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <float.h>
#include <math.h>

#include "internal.h"
#include "numerics.h"

/* End (exclusive, relative to the chunk) of the column group that holds chunk element j. */
static inline int64_t group_end(int64_t j, int64_t n, int64_t c0, int64_t tile)
{
    int64_t end = ((c0 + j) / tile + 1) * tile - c0;
    return end < n ? end : n;
}

int quant_generic_absmax(const float *x, int64_t n, int64_t c0, int64_t tile, float *acc)
{
    uint32_t seen = 0;
    for (int64_t j = 0; j < n;) {
        int64_t g = (c0 + j) / tile, end = group_end(j, n, c0, tile);
        uint32_t m = qn_bits(acc[g]);
        for (; j < end; j++) {
            uint32_t a = qn_bits(x[j]) & 0x7fffffffu;
            m = a > m ? a : m;
        }
        acc[g] = qn_float(m);
        seen = m > seen ? m : seen;
    }
    return seen >= 0x7f800000u;
}

int quant_generic_minmax(const float *x, int64_t n, int64_t c0, int64_t tile, float *mn, float *mx)
{
    uint32_t seen = 0;
    for (int64_t j = 0; j < n;) {
        int64_t g = (c0 + j) / tile, end = group_end(j, n, c0, tile);
        float lo = mn[g], hi = mx[g];
        for (; j < end; j++) {
            float v = x[j];
            uint32_t a = qn_bits(v) & 0x7fffffffu;
            seen = a > seen ? a : seen;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        mn[g] = lo;
        mx[g] = hi;
    }
    return seen >= 0x7f800000u;
}

/* Stores the code of scaled value v at codes[j]. */
static inline void put_code(quant_kcode kc, void *codes, int64_t j, float v, float qmin, float qmax)
{
    switch (kc) {
    case QK_I8:
        ((int8_t *)codes)[j] = (int8_t)qn_convert_int(v, qmin, qmax);
        break;
    case QK_U8:
        ((uint8_t *)codes)[j] = (uint8_t)qn_convert_int(v, qmin, qmax);
        break;
    case QK_I16:
        ((int16_t *)codes)[j] = (int16_t)qn_convert_int(v, qmin, qmax);
        break;
    case QK_E4M3:
        ((uint8_t *)codes)[j] = qn_quant_e4m3fn(v);
        break;
    case QK_E5M2:
        ((uint8_t *)codes)[j] = qn_quant_e5m2(v);
        break;
    case QK_NF4:
        ((uint8_t *)codes)[j] = qn_nf4_index(v);
        break;
    case QK_E2M1:
        ((uint8_t *)codes)[j] = qn_quant_e2m1(v);
        break;
    default:
        break;
    }
}

/* The scalar quantizer; `sr` (a constant at each call) adds the stochastic-rounding noise of
 * element index0 + j after the zero point. */
static inline int quantize_impl(const quant_krow *r, const float *x, int64_t n, int64_t c0,
                                void *codes, const bool sr, uint64_t key, uint64_t index0)
{
    uint32_t seen = 0;
    for (int64_t j = 0; j < n;) {
        int64_t g = (c0 + j) / r->tile, end = group_end(j, n, c0, r->tile);
        float s = r->scale[g];
        bool asym = r->zp != NULL;
        float z = asym ? (float)r->zp[g] : 0.0f;
        for (; j < end; j++) {
            uint32_t a = qn_bits(x[j]) & 0x7fffffffu;
            seen = a > seen ? a : seen;
            float v = x[j] / s;
            if (asym) v = v + z;
            if (sr) v = v + quant_sr_noise(key, index0 + (uint64_t)j);
            put_code(r->kcode, codes, j, v, r->qmin, r->qmax);
        }
    }
    return seen >= 0x7f800000u;
}

int quant_generic_quantize(const quant_krow *r, const float *x, int64_t n, int64_t c0, void *codes)
{
    return quantize_impl(r, x, n, c0, codes, false, 0, 0);
}

int quant_generic_quantize_sr(const quant_krow *r, const float *x, int64_t n, int64_t c0,
                              uint64_t key, uint64_t index0, void *codes)
{
    return quantize_impl(r, x, n, c0, codes, true, key, index0);
}

static inline float code_level(quant_kcode kc, const void *codes, int64_t j)
{
    switch (kc) {
    case QK_I8:
        return (float)((const int8_t *)codes)[j];
    case QK_U8:
        return (float)((const uint8_t *)codes)[j];
    case QK_I16:
        return (float)((const int16_t *)codes)[j];
    case QK_E4M3:
        return qn_fp8_to_f32(((const uint8_t *)codes)[j], 3, 7, 0);
    case QK_E5M2:
        return qn_fp8_to_f32(((const uint8_t *)codes)[j], 2, 15, 1);
    case QK_NF4:
        return quant_nf4_levels[((const uint8_t *)codes)[j] & 15u];
    case QK_E2M1:
        return qn_e2m1_to_f32(((const uint8_t *)codes)[j]);
    default:
        return 0.0f;
    }
}

void quant_generic_dequantize(const quant_krow *r, const void *codes, int64_t n, int64_t c0,
                              float *out)
{
    for (int64_t j = 0; j < n;) {
        int64_t g = (c0 + j) / r->tile, end = group_end(j, n, c0, r->tile);
        float s = r->scale[g];
        if (r->zp) {
            float z = (float)r->zp[g];
            for (; j < end; j++) out[j] = (code_level(r->kcode, codes, j) - z) * s;
        } else {
            for (; j < end; j++) out[j] = code_level(r->kcode, codes, j) * s;
        }
    }
}

static void widen_bf16(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = qn_bf16_to_f32(src[i]);
}

static void widen_f16(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = qn_f16_to_f32(src[i]);
}

static void pack_row(const uint8_t *codes, int64_t n, uint8_t *packed)
{
    quant_pack_nibbles(codes, 1, n, packed);
}

void quant_errstats_finish(const float *x, const float *d, int64_t n, double *sx, double *se,
                           double *mx, double acc[3])
{
    for (int64_t l = 0; l < n; l++) {
        double xv = x[l], e = xv - (double)d[l], ae = fabs(e);
        sx[l] += xv * xv;
        se[l] += e * e;
        mx[l] = ae > mx[l] ? ae : mx[l];
    }
    for (int l = 0; l < QUANT_ERR_LANES; l++) {
        acc[0] += sx[l];
        acc[1] += se[l];
        acc[2] = mx[l] > acc[2] ? mx[l] : acc[2];
    }
}

void quant_generic_errstats(const float *x, const float *d, int64_t n, double acc[3])
{
    double sx[QUANT_ERR_LANES] = {0}, se[QUANT_ERR_LANES] = {0}, mx[QUANT_ERR_LANES] = {0};
    int64_t j = 0;
    for (; j + QUANT_ERR_LANES <= n; j += QUANT_ERR_LANES)
        for (int l = 0; l < QUANT_ERR_LANES; l++) {
            double xv = x[j + l], e = xv - (double)d[j + l], ae = fabs(e);
            sx[l] += xv * xv;
            se[l] += e * e;
            mx[l] = ae > mx[l] ? ae : mx[l];
        }
    quant_errstats_finish(x + j, d + j, n - j, sx, se, mx, acc);
}

/* Element j of x (float32, or bf16 widened) and its code dequantized (group g) as
 * quant_generic_dequantize does. */
static inline float src_value(const void *x, bool bf16, int64_t j)
{
    return bf16 ? qn_bf16_to_f32(((const uint16_t *)x)[j]) : ((const float *)x)[j];
}

static inline float deq_value(const quant_krow *r, const void *codes, int64_t j, int64_t g)
{
    float s = r->scale[g];
    if (r->zp) return (code_level(r->kcode, codes, j) - (float)r->zp[g]) * s;
    return code_level(r->kcode, codes, j) * s;
}

/* quant_generic_errstats of x against quant_generic_dequantize's values, a lane group at a time
 * (element j's column group followed along, no division per element). */
int quant_generic_errstats_codes(const quant_krow *r, const void *x, bool bf16, const void *codes,
                                 int64_t n, int64_t c0, double acc[3])
{
    double sx[QUANT_ERR_LANES] = {0}, se[QUANT_ERR_LANES] = {0}, mx[QUANT_ERR_LANES] = {0};
    float xt[QUANT_ERR_LANES], dt[QUANT_ERR_LANES];
    int64_t g = c0 / r->tile, end = (g + 1) * r->tile - c0, j = 0;
    for (; j < n; j += QUANT_ERR_LANES) {
        int64_t m = n - j < QUANT_ERR_LANES ? n - j : QUANT_ERR_LANES;
        for (int64_t l = 0; l < m; l++) {
            if (j + l == end) {
                g++;
                end += r->tile;
            }
            xt[l] = src_value(x, bf16, j + l);
            dt[l] = deq_value(r, codes, j + l, g);
        }
        if (m < QUANT_ERR_LANES) break;
        for (int l = 0; l < QUANT_ERR_LANES; l++) {
            double xv = xt[l], e = xv - (double)dt[l], ae = fabs(e);
            sx[l] += xv * xv;
            se[l] += e * e;
            mx[l] = ae > mx[l] ? ae : mx[l];
        }
    }
    quant_errstats_finish(xt, dt, n - j, sx, se, mx, acc);
    return 0;
}

void quant_generic_mse_terms(const float *x, const float *d, const float *w, int64_t n, double *t)
{
    for (int64_t j = 0; j < n; j++) {
        double e = (double)x[j] - (double)d[j];
        t[j] = (double)w[j] * (e * e);
    }
}

/* The ordered sums of one block's terms t[k][0..n) (nk candidates, row stride MSE_TERMS_BLOCK),
 * group run by group run; the candidates' chains are independent and run side by side. */
static void mse_sums(const double *t, int nk, int64_t n, int64_t c0, int64_t tile, double *err,
                     int64_t es)
{
    for (int64_t j = 0; j < n;) {
        int64_t g = (c0 + j) / tile, end = (g + 1) * tile - c0;
        if (end > n) end = n;
        double a[QUANT_MSE_BATCH];
        for (int k = 0; k < nk; k++) a[k] = err[k * es + g];
        if (nk == QUANT_MSE_BATCH) { /* eight chains in registers */
            double a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
            double a4 = a[4], a5 = a[5], a6 = a[6], a7 = a[7];
            const double *t0 = t + j;
            for (int64_t i = 0; i < end - j; i++) {
                a0 += t0[i];
                a1 += t0[MSE_TERMS_BLOCK + i];
                a2 += t0[2 * MSE_TERMS_BLOCK + i];
                a3 += t0[3 * MSE_TERMS_BLOCK + i];
                a4 += t0[4 * MSE_TERMS_BLOCK + i];
                a5 += t0[5 * MSE_TERMS_BLOCK + i];
                a6 += t0[6 * MSE_TERMS_BLOCK + i];
                a7 += t0[7 * MSE_TERMS_BLOCK + i];
            }
            a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3;
            a[4] = a4, a[5] = a5, a[6] = a6, a[7] = a7;
        } else {
            for (int64_t i = j; i < end; i++)
                for (int k = 0; k < nk; k++) a[k] += t[k * MSE_TERMS_BLOCK + i];
        }
        for (int k = 0; k < nk; k++) err[k * es + g] = a[k];
        j = end;
    }
}

void quant_mse_acc_with(quant_mse_terms_fn terms, const float *x, const float *d, int64_t ds,
                        int nk, const float *w, int64_t n, int64_t c0, int64_t tile, double *err,
                        int64_t es)
{
    double t[QUANT_MSE_BATCH * MSE_TERMS_BLOCK];
    for (int64_t b = 0; b < n; b += MSE_TERMS_BLOCK) {
        int64_t m = n - b < MSE_TERMS_BLOCK ? n - b : MSE_TERMS_BLOCK;
        for (int k = 0; k < nk; k++)
            terms(x + b, d + k * ds + b, w + b, m, t + k * MSE_TERMS_BLOCK);
        mse_sums(t, nk, m, c0 + b, tile, err, es);
    }
}

void quant_generic_mse_acc(const float *x, const float *d, int64_t ds, int nk, const float *w,
                           int64_t n, int64_t c0, int64_t tile, double *err, int64_t es)
{
    quant_mse_acc_with(quant_generic_mse_terms, x, d, ds, nk, w, n, c0, tile, err, es);
}

void quant_generic_mse_int(const float *x, const float *w, int64_t n, int64_t c0, int64_t tile,
                           const float *scale, int nk, int64_t es, float qmin, float qmax,
                           double *err)
{
    for (int64_t j = 0; j < n;) {
        int64_t g = (c0 + j) / tile, end = group_end(j, n, c0, tile);
        for (int k = 0; k < nk; k++) {
            float s = scale[k * es + g];
            double a = err[k * es + g];
            for (int64_t i = j; i < end; i++) {
                float d = (float)qn_convert_int(x[i] / s, qmin, qmax) * s;
                double e = (double)x[i] - (double)d;
                a += (double)(w ? w[i] : 1.0f) * (e * e);
            }
            err[k * es + g] = a;
        }
        j = end;
    }
}

int quant_generic_mx_scales(const float *absmax, int64_t n, float bound, float c, float *scale)
{
    for (int64_t i = 0; i < n; i++) scale[i] = qn_mx_scale(absmax[i], bound, c);
    return 0;
}

int quant_generic_nvfp4_scales(const float *absmax, int64_t n, float g, float *scale)
{
    for (int64_t i = 0; i < n; i++) scale[i] = qn_nvfp4_block_scale(absmax[i], g);
    return 0;
}

int quant_generic_lin_scales(const float *absmax, int64_t n, float bound, float *scale)
{
    for (int64_t i = 0; i < n; i++) {
        float s = absmax[i] / bound;
        scale[i] = s < QN_TINY_SCALE ? 1.0f : s;
    }
    bool finite = true;
    for (int64_t i = 0; i < n; i++) finite &= scale[i] <= FLT_MAX;
    return !finite;
}

const quant_kernels quant_kernels_generic = {
    .isa = QUANT_ISA_SCALAR,
    .absmax = quant_generic_absmax,
    .minmax = quant_generic_minmax,
    .quantize = quant_generic_quantize,
    .dequantize = quant_generic_dequantize,
    .widen_bf16 = widen_bf16,
    .widen_f16 = widen_f16,
    .pack = pack_row,
    .errstats = quant_generic_errstats,
    .mx_scales = quant_generic_mx_scales,
    .nvfp4_scales = quant_generic_nvfp4_scales,
    .lin_scales = quant_generic_lin_scales,
    .mse_acc = quant_generic_mse_acc,
    .mse_int = quant_generic_mse_int,
    .errstats_codes = quant_generic_errstats_codes,
};
