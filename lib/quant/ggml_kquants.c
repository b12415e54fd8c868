/* ggml_kquants.c -- ggml's K-quant block types q2_k, q3_k, q4_k, q5_k and q6_k: super-blocks of
 * 256 values in 16 or 8 sub-blocks whose scales (and mins) are 4-, 6- or 8-bit codes of one or
 * two fp16 super-block scales. Dequantizing is ggml's to_float to the bit. Quantizing without
 * importance is ggml's reference quantizer (its bytes); with importance it is ggml's weighted
 * quantizer, which fits the sub-block scales by the importance of their values as well.
 * As ggml's, a super-block whose largest |x| passes about 1e6 (q2_k), 4e6 (q4_k, q5_k), 7e6
 * (q3_k) or 2.6e8 (q6_k) gets an Inf fp16 scale (ggml's row validation refuses such rows).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <string.h>

#include "ggml_blocks.h"
#include "ggml_ksearch.h"

#define QK 256 /* values per super-block */

/* Block layouts (byte offsets), as ggml-common.h declares them. */
enum {
    Q2_SCALES = 0, /* 16 x (scale nibble | min nibble << 4) */
    Q2_QS = 16,    /* 64: 2-bit codes */
    Q2_D = 80,
    Q2_DMIN = 82,
    Q2_BYTES = 84,
    Q3_HMASK = 0,   /* 32: the codes' third bit */
    Q3_QS = 32,     /* 64: the codes' low two bits */
    Q3_SCALES = 96, /* 12: 16 x 6-bit scales, + 32 */
    Q3_D = 108,
    Q3_BYTES = 110,
    K4_D = 0, /* q4_k and q5_k */
    K4_DMIN = 2,
    K4_SCALES = 4, /* 12: 8 x (6-bit scale, 6-bit min) */
    Q4_QS = 16,    /* 128: 4-bit codes */
    Q4_BYTES = 144,
    Q5_QH = 16, /* 32: the codes' fifth bit */
    Q5_QS = 48, /* 128: the codes' low four bits */
    Q5_BYTES = 176,
    Q6_QL = 0,       /* 128: the codes' low four bits */
    Q6_QH = 128,     /* 64: the codes' top two bits */
    Q6_SCALES = 192, /* 16 x int8 */
    Q6_D = 208,
    Q6_BYTES = 210
};

static inline int clamp_int(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- packing shared by several types ------------------------------------------------------ */

/* 2-bit codes: in each 128-value half, byte l holds values l, l+32, l+64, l+96. */
static void pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int h = 0; h < QK; h += 128)
        for (int l = 0; l < 32; l++)
            qs[h / 4 + l] = (uint8_t)(L[h + l] | (L[h + l + 32] << 2) | (L[h + l + 64] << 4) |
                                      (L[h + l + 96] << 6));
}

static inline int get_2bit(const uint8_t *qs, int e)
{
    return (qs[e / 128 * 32 + e % 32] >> (2 * (e % 128 / 32))) & 3;
}

/* The 6-bit scale and min of sub-block j of a q4_k / q5_k block (ggml's get_scale_min_k4). */
static void get_k4(const uint8_t *s, int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Stores sub-block j's codes; j ascending (the high bits are or-ed into earlier bytes). */
static void put_k4(uint8_t *s, int j, uint8_t ls, uint8_t lm)
{
    if (j < 4) {
        s[j] = ls;
        s[j + 4] = lm;
    } else {
        s[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
        s[j - 4] |= (uint8_t)((ls >> 4) << 6);
        s[j] |= (uint8_t)((lm >> 4) << 6);
    }
}

/* Sub-block j's 6-bit q3_k scale code (0..63, the scale + 32). */
static int get_q3_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    return lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

/* j ascending, scales zeroed first. */
static void put_q3_scale(uint8_t *s, int j, int l)
{
    if (j < 8)
        s[j] = (uint8_t)(l & 0xF);
    else
        s[j - 8] |= (uint8_t)((l & 0xF) << 4);
    s[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
}

/* The per-value weights of ggml's weighted quantizers: importance * sqrt(sigma2 + x^2). */
static void importance_weights(int n, const float *x, const float *imp, float sigma2, float *w)
{
    for (int l = 0; l < n; l++) w[l] = imp[l] * sqrtf(sigma2 + x[l] * x[l]);
}

static float sum_squares(const float *x, int n)
{
    float s = 0;
    for (int j = 0; j < n; j++) s += x[j] * x[j];
    return s;
}

static float sum_floats(const float *x, int n)
{
    float s = 0;
    for (int j = 0; j < n; j++) s += x[j];
    return s;
}

/* Codes of x ~ d * L - m per sub-block of `sub` values with a non-zero d (others keep theirs). */
static void requantize_affine(const float *x, int sub, int nmax, const float *d, const float *m,
                              uint8_t *L)
{
    for (int j = 0; j < QK / sub; j++) {
        if (!d[j]) continue;
        for (int i = 0; i < sub; i++)
            L[sub * j + i] =
                (uint8_t)clamp_int(qg_nearest_int((x[sub * j + i] + m[j]) / d[j]), 0, nmax);
    }
}

/* ---- q2_k ------------------------------------------------------------------------------------ */

static const qk_sweep q2_sweep_ref = {-0.5f, 0.1f, 15, true};
static const qk_sweep k_sweep_imp = {-0.9f, 0.05f, 36, false};

/* The 4-bit codes of 16 scales by max-scaling; @return : the fp16 super-block scale. */
static float q2_scale_codes(const float *v, uint8_t *s, int shift)
{
    float max = 0;
    for (int j = 0; j < 16; j++)
        if (v[j] > max) max = v[j];
    if (!(max > 0)) return 0.f;
    float iscale = 15.f / max;
    for (int j = 0; j < 16; j++)
        s[j] |= (uint8_t)((unsigned)qg_nearest_int(iscale * v[j]) << shift);
    return max / 15.f;
}

static void q2_fit_ref(const float *x, uint8_t *blk, uint8_t *L)
{
    float scales[16], mins[16], w[16];
    uint8_t aux[16];
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
        scales[j] = qk_fit_affine(16, 3, x + 16 * j, w, L + 16 * j, aux, &mins[j], &q2_sweep_ref);
    }
    memset(blk + Q2_SCALES, 0, 16);
    qg_put_f16(blk + Q2_D, q2_scale_codes(scales, blk + Q2_SCALES, 0));
    qg_put_f16(blk + Q2_DMIN, q2_scale_codes(mins, blk + Q2_SCALES, 4));
}

static void q2_fit_imp(const float *x, const float *imp, uint8_t *blk, uint8_t *L)
{
    float scales[16], mins[16], w[16], sw[16];
    uint8_t aux[16], ls[16], lm[16];
    float sigma2 = sum_squares(x, QK) / QK;
    for (int j = 0; j < 16; j++) {
        importance_weights(16, x + 16 * j, imp + 16 * j, sigma2, w);
        sw[j] = sum_floats(w, 16);
        scales[j] = qk_fit_affine(16, 3, x + 16 * j, w, L + 16 * j, aux, &mins[j], &k_sweep_imp);
    }
    qg_put_f16(blk + Q2_D, qk_fit_positive(16, 15, scales, sw, ls));
    qg_put_f16(blk + Q2_DMIN, qk_fit_positive(16, 15, mins, sw, lm));
    for (int j = 0; j < 16; j++) blk[Q2_SCALES + j] = (uint8_t)(ls[j] | (lm[j] << 4));
}

static void q2_block(const float *x, const float *imp, uint8_t *blk)
{
    uint8_t L[QK];
    if (imp)
        q2_fit_imp(x, imp, blk, L);
    else
        q2_fit_ref(x, blk, L);
    float dd = qg_get_f16(blk + Q2_D), dm = qg_get_f16(blk + Q2_DMIN), d[16], m[16];
    for (int j = 0; j < 16; j++) {
        d[j] = dd * (blk[Q2_SCALES + j] & 0xF);
        m[j] = dm * (blk[Q2_SCALES + j] >> 4);
    }
    requantize_affine(x, 16, 3, d, m, L);
    pack_2bit(L, blk + Q2_QS);
}

/* ---- q3_k ------------------------------------------------------------------------------------ */

/* The signed scale of largest magnitude (the first on ties). */
static float signed_max(const float *v, int n)
{
    float max = 0, amax = 0;
    for (int j = 0; j < n; j++)
        if (fabsf(v[j]) > amax) {
            amax = fabsf(v[j]);
            max = v[j];
        }
    return max;
}

static void q3_fit_ref(const float *x, uint8_t *blk, int8_t *L)
{
    float scales[16];
    for (int j = 0; j < 16; j++) scales[j] = qk_fit_signed_descent(16, 4, x + 16 * j, L + 16 * j);
    float max = signed_max(scales, 16);
    memset(blk + Q3_SCALES, 0, 12);
    if (!max) {
        qg_put_f16(blk + Q3_D, 0.f);
        return;
    }
    float iscale = -32.f / max;
    for (int j = 0; j < 16; j++) {
        int8_t l = (int8_t)qg_nearest_int(iscale * scales[j]);
        put_q3_scale(blk + Q3_SCALES, j, clamp_int(l, -32, 31) + 32);
    }
    qg_put_f16(blk + Q3_D, 1 / iscale);
}

static void q3_fit_imp(const float *x, const float *imp, uint8_t *blk, int8_t *L)
{
    float scales[16], w[16], sw[16];
    int8_t ls[16];
    float sigma2 = 2 * sum_squares(x, QK) / QK;
    for (int j = 0; j < 16; j++) {
        importance_weights(16, x + 16 * j, imp + 16 * j, sigma2, w);
        sw[j] = sum_floats(w, 16);
        scales[j] = qk_fit_signed(16, 4, x + 16 * j, w, L + 16 * j);
    }
    float d = qk_fit_signed(16, 32, scales, sw, ls);
    memset(blk + Q3_SCALES, 0, 12);
    for (int j = 0; j < 16; j++) put_q3_scale(blk + Q3_SCALES, j, ls[j]);
    qg_put_f16(blk + Q3_D, d);
}

/* Codes 0..7 into the high-bit mask (bit j / 32 of byte j % 32) and the 2-bit codes. */
static void q3_pack(int8_t *L, uint8_t *blk)
{
    uint8_t low[QK];
    memset(blk + Q3_HMASK, 0, 32);
    for (int j = 0; j < QK; j++) {
        if (L[j] > 3) blk[Q3_HMASK + j % 32] |= (uint8_t)(1u << (j / 32));
        low[j] = (uint8_t)(L[j] & 3);
    }
    pack_2bit(low, blk + Q3_QS);
}

static void q3_block(const float *x, const float *imp, uint8_t *blk)
{
    int8_t L[QK];
    if (imp)
        q3_fit_imp(x, imp, blk, L);
    else
        q3_fit_ref(x, blk, L);
    float dd = qg_get_f16(blk + Q3_D);
    for (int j = 0; j < 16; j++) {
        float d = dd * (get_q3_scale(blk + Q3_SCALES, j) - 32);
        if (!d) continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(clamp_int(qg_nearest_int(x[16 * j + i] / d), -4, 3) + 4);
    }
    q3_pack(L, blk);
}

/* ---- q4_k and q5_k: 8 sub-blocks of 32, 6-bit scales and mins ------------------------------ */

static const qk_sweep q4_sweep_ref = {-1.f, 0.1f, 20, false};
static const qk_sweep q5_sweep_ref = {-0.5f, 0.1f, 15, false};

static void k4_fit_ref(const float *x, int nmax, const qk_sweep *sweep, uint8_t *blk, uint8_t *L)
{
    float scales[8], mins[8], w[32];
    uint8_t aux[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float av_x = sqrtf(sum_squares(x + 32 * j, 32) / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = qk_fit_affine(32, nmax, x + 32 * j, w, L + 32 * j, aux, &mins[j], sweep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)qg_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)qg_nearest_int(inv_min * mins[j]);
        put_k4(blk + K4_SCALES, j, ls < 63 ? ls : 63, lm < 63 ? lm : 63);
    }
    qg_put_f16(blk + K4_D, max_scale / 63.f);
    qg_put_f16(blk + K4_DMIN, max_min / 63.f);
}

/* `cap`: clamp the scale codes to 63 (q5_k does, q4_k stores them as they come). */
static void k4_fit_imp(const float *x, const float *imp, int nmax, bool cap, uint8_t *blk,
                       uint8_t *L)
{
    float scales[8], mins[8], w[32], sw[8];
    uint8_t aux[32], ls[8], lm[8];
    float sigma2 = 2 * sum_squares(x, QK) / QK;
    for (int j = 0; j < 8; j++) {
        importance_weights(32, x + 32 * j, imp + 32 * j, sigma2, w);
        sw[j] = sum_floats(w, 32);
        scales[j] = qk_fit_affine(32, nmax, x + 32 * j, w, L + 32 * j, aux, &mins[j], &k_sweep_imp);
    }
    float d = qk_fit_positive(8, 63, scales, sw, ls);
    float m = qk_fit_positive(8, 63, mins, sw, lm);
    for (int j = 0; j < 8; j++)
        put_k4(blk + K4_SCALES, j, cap && ls[j] > 63 ? 63 : ls[j], cap && lm[j] > 63 ? 63 : lm[j]);
    qg_put_f16(blk + K4_D, d);
    qg_put_f16(blk + K4_DMIN, m);
}

/* The codes of one q4_k (nmax 15) or q5_k (nmax 31) super-block; `ref` is the type's sweep
 * without importance, `cap` as k4_fit_imp. */
static void k4_codes(const float *x, const float *imp, int nmax, const qk_sweep *ref, bool cap,
                     uint8_t *blk, uint8_t *L)
{
    if (imp)
        k4_fit_imp(x, imp, nmax, cap, blk, L);
    else
        k4_fit_ref(x, nmax, ref, blk, L);
    float dd = qg_get_f16(blk + K4_D), dm = qg_get_f16(blk + K4_DMIN), d[8], m[8];
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        get_k4(blk + K4_SCALES, j, &sc, &mn);
        d[j] = dd * sc;
        m[j] = dm * mn;
    }
    requantize_affine(x, 32, nmax, d, m, L);
}

static void q4_block(const float *x, const float *imp, uint8_t *blk)
{
    uint8_t L[QK];
    k4_codes(x, imp, 15, &q4_sweep_ref, false, blk, L);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            blk[Q4_QS + 32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + l + 32] << 4));
}

static void q5_block(const float *x, const float *imp, uint8_t *blk)
{
    uint8_t L[QK];
    k4_codes(x, imp, 31, &q5_sweep_ref, true, blk, L);
    uint8_t *qh = blk + Q5_QH, *qs = blk + Q5_QS;
    memset(qh, 0, 32);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            int a = L[64 * c + l], b = L[64 * c + l + 32];
            qh[l] |= (uint8_t)(((a >> 4) & 1) << (2 * c) | ((b >> 4) & 1) << (2 * c + 1));
            qs[32 * c + l] = (uint8_t)((a & 15) | (b & 15) << 4);
        }
}

/* ---- q6_k ------------------------------------------------------------------------------------ */

static void q6_pack(const int8_t *L, uint8_t *blk)
{
    for (int h = 0; h < 2; h++) {
        uint8_t *ql = blk + Q6_QL + 64 * h, *qh = blk + Q6_QH + 32 * h;
        const int8_t *v = L + 128 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((v[l] & 0xF) | (v[l + 64] & 0xF) << 4);
            ql[l + 32] = (uint8_t)((v[l + 32] & 0xF) | (v[l + 96] & 0xF) << 4);
            qh[l] = (uint8_t)((v[l] >> 4) | (v[l + 32] >> 4) << 2 | (v[l + 64] >> 4) << 4 |
                              (v[l + 96] >> 4) << 6);
        }
    }
}

/* The reference and the weighted quantizer differ only in the sub-block weights: x^2, or the
 * importance itself (ggml's weighted q6_k does not mix in sigma2). */
static void q6_block(const float *x, const float *imp, uint8_t *blk)
{
    int8_t L[QK];
    float scales[16];
    for (int j = 0; j < 16; j++)
        scales[j] = qk_fit_signed(16, 32, x + 16 * j, imp ? imp + 16 * j : NULL, L + 16 * j);
    float max = signed_max(scales, 16);
    if (fabsf(max) < QG_GROUP_MAX_EPS) {
        memset(blk, 0, Q6_BYTES);
        return;
    }
    float iscale = -128.f / max;
    qg_put_f16(blk + Q6_D, 1 / iscale);
    int8_t *sc = (int8_t *)(blk + Q6_SCALES);
    for (int j = 0; j < 16; j++) {
        int l = qg_nearest_int(iscale * scales[j]);
        sc[j] = (int8_t)(l < 127 ? l : 127);
    }
    float dd = qg_get_f16(blk + Q6_D);
    for (int j = 0; j < 16; j++) {
        float d = dd * sc[j];
        if (!d) continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(clamp_int(qg_nearest_int(x[16 * j + i] / d), -32, 31) + 32);
    }
    q6_pack(L, blk);
}

/* ---- rows ----------------------------------------------------------------------------------- */

typedef void (*block_fn)(const float *x, const float *imp, uint8_t *blk);

static void quantize_blocks(block_fn fn, size_t bytes, const float *x, void *dst, int64_t n,
                            const float *importance)
{
    uint8_t *out = dst;
    for (int64_t b = 0; b < n / QK; b++)
        fn(x + b * QK, importance ? importance + b * QK : NULL, out + (size_t)b * bytes);
}

void qg_quantize_q2_k(const float *x, void *dst, int64_t n, const float *importance)
{
    quantize_blocks(q2_block, Q2_BYTES, x, dst, n, importance);
}

void qg_quantize_q3_k(const float *x, void *dst, int64_t n, const float *importance)
{
    quantize_blocks(q3_block, Q3_BYTES, x, dst, n, importance);
}

void qg_quantize_q4_k(const float *x, void *dst, int64_t n, const float *importance)
{
    quantize_blocks(q4_block, Q4_BYTES, x, dst, n, importance);
}

void qg_quantize_q5_k(const float *x, void *dst, int64_t n, const float *importance)
{
    quantize_blocks(q5_block, Q5_BYTES, x, dst, n, importance);
}

void qg_quantize_q6_k(const float *x, void *dst, int64_t n, const float *importance)
{
    quantize_blocks(q6_block, Q6_BYTES, x, dst, n, importance);
}

/* ---- dequantization: per value, the products in ggml's order ------------------------------ */

void qg_dequantize_q2_k(const void *src, float *x, int64_t n)
{
    for (const uint8_t *blk = src; n > 0; n -= QK, blk += Q2_BYTES, x += QK) {
        float d = qg_get_f16(blk + Q2_D), dmin = qg_get_f16(blk + Q2_DMIN);
        for (int j = 0; j < 16; j++) {
            uint8_t sc = blk[Q2_SCALES + j];
            float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
            for (int e = 16 * j; e < 16 * j + 16; e++) x[e] = dl * get_2bit(blk + Q2_QS, e) - ml;
        }
    }
}

void qg_dequantize_q3_k(const void *src, float *x, int64_t n)
{
    for (const uint8_t *blk = src; n > 0; n -= QK, blk += Q3_BYTES, x += QK) {
        float d = qg_get_f16(blk + Q3_D);
        for (int j = 0; j < 16; j++) {
            float dl = d * (get_q3_scale(blk + Q3_SCALES, j) - 32);
            for (int e = 16 * j; e < 16 * j + 16; e++) {
                int high = (blk[Q3_HMASK + e % 32] >> (e / 32)) & 1;
                x[e] = dl * (get_2bit(blk + Q3_QS, e) - (high ? 0 : 4));
            }
        }
    }
}

/* q4_k (bits 4) and q5_k (bits 5): value e is the low nibble of byte e % 32 of its 64-value
 * chunk (first half) or the high nibble (second half), plus its qh bit for q5_k. */
static void dequantize_k4(const uint8_t *blk, const uint8_t *qs, const uint8_t *qh, float *x)
{
    float d = qg_get_f16(blk + K4_D), dmin = qg_get_f16(blk + K4_DMIN);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        get_k4(blk + K4_SCALES, j, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        const uint8_t *q = qs + 32 * (j / 2);
        for (int l = 0; l < 32; l++) {
            int v = (j & 1) ? q[l] >> 4 : q[l] & 0xF;
            if (qh && (qh[l] >> j) & 1) v += 16;
            x[32 * j + l] = d1 * v - m1;
        }
    }
}

void qg_dequantize_q4_k(const void *src, float *x, int64_t n)
{
    for (const uint8_t *blk = src; n > 0; n -= QK, blk += Q4_BYTES, x += QK)
        dequantize_k4(blk, blk + Q4_QS, NULL, x);
}

void qg_dequantize_q5_k(const void *src, float *x, int64_t n)
{
    for (const uint8_t *blk = src; n > 0; n -= QK, blk += Q5_BYTES, x += QK)
        dequantize_k4(blk, blk + Q5_QS, blk + Q5_QH, x);
}

void qg_dequantize_q6_k(const void *src, float *x, int64_t n)
{
    for (const uint8_t *blk = src; n > 0; n -= QK, blk += Q6_BYTES, x += QK) {
        float d = qg_get_f16(blk + Q6_D);
        const int8_t *sc = (const int8_t *)(blk + Q6_SCALES);
        for (int e = 0; e < QK; e++) {
            int h = e / 128, r = e % 128, l = r % 32, k = r / 32; /* k: which of 4 values */
            uint8_t lo = blk[Q6_QL + 64 * h + l + 32 * (k & 1)];
            int v =
                ((k < 2 ? lo & 0xF : lo >> 4) | ((blk[Q6_QH + 32 * h + l] >> (2 * k)) & 3) << 4);
            x[e] = d * sc[e / 16] * (v - 32);
        }
    }
}
