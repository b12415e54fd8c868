/* ggml_legacy.c -- ggml's legacy 32-value block types q8_0, q4_0, q4_1, q5_0 and q5_1: their
 * byte layouts, dequantization bit for bit as ggml's to_float, ggml's reference quantizers
 * (importance NULL; always for q8_0, whose ggml quantizer ignores importance) and, with
 * importance, ggml's weighted searches improved where that lowers the importance-weighted error
 * the quality contract measures (quantize_weighted below).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Layouts (little-endian fp16 d, m; nibble j of qs holds value j low, value j + 16 high):
 *   q8_0 {d; int8 qs[32]}            34 B   x = qs * d
 *   q4_0 {d; qs[16]}                 18 B   x = (q - 8) * d
 *   q4_1 {d; m; qs[16]}              20 B   x = q * d + m
 *   q5_0 {d; qh u32; qs[16]}         22 B   x = (q - 16) * d, bit 4 of value j in qh bit j
 *   q5_1 {d; m; qh u32; qs[16]}      24 B   x = q * d + m
 *
 * Every float operation below is written in ggml's order and, as the whole library, compiled
 * without contraction, so the same inputs give ggml's bytes. C leaves ggml's float to 8-bit
 * conversions undefined when a block's scale has an infinite reciprocal (its largest |x| below
 * about 2^-125, or 15 * 2^-128 between min and max for q4_1 / q5_1: the codes are then
 * computed from +-Inf and NaN) or, for q4_1 / q5_1, when max - min overflows; there this file
 * stores code 0, as an x86-64 build of ggml does. The fp16 scale of such a block is 0 (or Inf
 * beyond fp16's range, which no fp16 block can hold), so the codes do not change what it
 * dequantizes to.
 */
#include <float.h>
#include <math.h>

#include "ggml_blocks.h"

#define QK 32

/* ---- conversions and packing ---------------------------------------------------------------- */

/* ggml's float -> 8-bit code conversion, defined for every float: truncation toward zero for
 * the values its quantizers produce (|v| < 128), 0 for NaN and +-Inf (see the file comment). */
static int to_code(float v)
{
    return v >= -128.0f && v < 128.0f ? (int)v : 0;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Codes L[0..31] (0..15) into 16 bytes: low nibble value j, high nibble value j + 16. */
static void pack_nibbles(uint8_t *qs, const uint8_t *L)
{
    for (int j = 0; j < QK / 2; j++) qs[j] = (uint8_t)((L[j] & 0x0f) | ((L[j + 16] & 0x0f) << 4));
}

/* 5-bit codes: the low nibbles as pack_nibbles, bit 4 of value j at bit j of qh. */
static void pack_5bit(uint8_t *qh, uint8_t *qs, const uint8_t *L)
{
    uint32_t h = 0;
    for (int j = 0; j < QK / 2; j++) {
        h |= (uint32_t)((L[j] & 0x10u) >> 4) << j;
        h |= (uint32_t)((L[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    pack_nibbles(qs, L);
    put_u32(qh, h);
}

static void unpack_5bit(const uint8_t *qh, const uint8_t *qs, int *q)
{
    uint32_t h = get_u32(qh);
    for (int j = 0; j < QK / 2; j++) {
        q[j] = (qs[j] & 0x0f) | (int)(((h >> j) << 4) & 0x10u);
        q[j + 16] = (qs[j] >> 4) | (int)((h >> (j + 12)) & 0x10u);
    }
}

/* ---- dequantization ------------------------------------------------------------------------- */

void qg_dequantize_q8_0(const void *src, float *x, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 34, x += QK) {
        float d = qg_get_f16(b);
        for (int j = 0; j < QK; j++) x[j] = (float)(int8_t)b[2 + j] * d;
    }
}

void qg_dequantize_q4_0(const void *src, float *x, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 18, x += QK) {
        float d = qg_get_f16(b);
        for (int j = 0; j < QK / 2; j++) {
            x[j] = (float)((b[2 + j] & 0x0f) - 8) * d;
            x[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
        }
    }
}

void qg_dequantize_q4_1(const void *src, float *x, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 20, x += QK) {
        float d = qg_get_f16(b), m = qg_get_f16(b + 2);
        for (int j = 0; j < QK / 2; j++) {
            x[j] = (float)(b[4 + j] & 0x0f) * d + m;
            x[j + 16] = (float)(b[4 + j] >> 4) * d + m;
        }
    }
}

void qg_dequantize_q5_0(const void *src, float *x, int64_t n)
{
    const uint8_t *b = src;
    int q[QK];
    for (int64_t i = 0; i < n / QK; i++, b += 22, x += QK) {
        float d = qg_get_f16(b);
        unpack_5bit(b + 2, b + 6, q);
        for (int j = 0; j < QK; j++) x[j] = (float)(q[j] - 16) * d;
    }
}

void qg_dequantize_q5_1(const void *src, float *x, int64_t n)
{
    const uint8_t *b = src;
    int q[QK];
    for (int64_t i = 0; i < n / QK; i++, b += 24, x += QK) {
        float d = qg_get_f16(b), m = qg_get_f16(b + 2);
        unpack_5bit(b + 4, b + 8, q);
        for (int j = 0; j < QK; j++) x[j] = (float)q[j] * d + m;
    }
}

/* ---- ggml's reference quantizers (no importance) -------------------------------------------- */

/* The signed value of largest magnitude (the first on ties), as q4_0 / q5_0 scale from. */
static float signed_max(const float *x)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

static void min_max(const float *x, float *mn, float *mx)
{
    *mn = FLT_MAX;
    *mx = -FLT_MAX;
    for (int j = 0; j < QK; j++) {
        if (x[j] < *mn) *mn = x[j];
        if (x[j] > *mx) *mx = x[j];
    }
}

static void ref_q8_0(const float *x, uint8_t *b)
{
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    float d = amax / 127;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    qg_put_f16(b, d);
    for (int j = 0; j < QK; j++) b[2 + j] = (uint8_t)to_code(roundf(x[j] * id));
}

/* q4_0 / q5_0: d = max / -(half), codes min(top, (int8)(x / d + half + 0.5)). */
static void ref_symmetric(const float *x, int half, uint8_t *d16, uint8_t *L)
{
    float d = signed_max(x) / (float)-half;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    qg_put_f16(d16, d);
    int top = 2 * half - 1;
    for (int j = 0; j < QK; j++) {
        int q = to_code(x[j] * id + ((float)half + 0.5f));
        L[j] = (uint8_t)(q < top ? q : top);
    }
}

/* q4_1 / q5_1: d = (max - min) / top, m = min, codes (x - min) / d + 0.5 truncated (q4_1
 * clamps to 15; ggml's q5_1 does not clamp, and pack_5bit keeps the low 5 bits). */
static void ref_affine(const float *x, int top, uint8_t *dm, uint8_t *L)
{
    float mn, mx;
    min_max(x, &mn, &mx);
    float d = (mx - mn) / (float)top;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    qg_put_f16(dm, d);
    qg_put_f16(dm + 2, mn);
    for (int j = 0; j < QK; j++) {
        float v = (x[j] - mn) * id + 0.5f;
        int q = to_code(v);
        L[j] = (uint8_t)(top == 15 && q > 15 ? 15 : q);
    }
}

/* ---- ggml's importance-weighted searches ---------------------------------------------------- */

/* One symmetric pass: codes l = clamp(nearest(iscale * x), -nmax, nmax - 1) into l, and the
 * weighted sums sum w x l and sum w l^2 of ggml's least-squares scale. */
static void symmetric_pass(int nmax, float iscale, const float *x, const float *w, int *l,
                           float *sumlx, float *suml2)
{
    float slx = 0.0f, sl2 = 0.0f; /* locals: the pointers may alias x and w */
    for (int i = 0; i < QK; i++) {
        int v = qg_nearest_int(iscale * x[i]);
        l[i] = v < -nmax ? -nmax : v > nmax - 1 ? nmax - 1 : v;
        slx += w[i] * x[i] * (float)l[i];
        sl2 += w[i] * (float)l[i] * (float)l[i];
    }
    *sumlx = slx;
    *suml2 = sl2;
}

/* Symmetric search (ggml's make_qx_quants with explicit weights when ntry is 9): the scale
 * -max / nmax, then -max / (nmax + 0.1 t) for t = -ntry..ntry but 0, keeping the best
 * least-squares fit; codes L = l + nmax; returns the scale. */
static float search_symmetric(int nmax, const float *x, const float *w, int ntry, uint8_t *L)
{
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < QK; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < QG_GROUP_MAX_EPS) {
        memset(L, 0, QK);
        return 0.0f;
    }
    int l[QK];
    float sumlx, suml2;
    symmetric_pass(nmax, (float)-nmax / max, x, w, l, &sumlx, &suml2);
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int i = 0; i < QK; i++) L[i] = (uint8_t)(l[i] + nmax);
    for (int t = -ntry; t <= ntry; t++) {
        if (t == 0) continue;
        symmetric_pass(nmax, -((float)nmax + 0.1f * (float)t) / max, x, w, l, &sumlx, &suml2);
        if (!(suml2 > 0 && sumlx * sumlx > best * suml2)) continue;
        scale = sumlx / suml2;
        best = scale * sumlx;
        for (int i = 0; i < QK; i++) L[i] = (uint8_t)(l[i] + nmax);
    }
    return scale;
}

/* Asymmetric search (ggml's make_qkx3_quants with explicit weights, rmin -0.9, rdelta 0.05,
 * 36 steps, squared error): inverse scales (nmax - 0.9 + 0.05 is) / range for is = 0..36, each
 * with its weighted least-squares scale and min (the min kept <= 0); codes L in [0, nmax];
 * returns the scale and *neg_min = -min. */
static float search_affine(int nmax, const float *x, const float *w, uint8_t *L, float *neg_min)
{
    float min = x[0], max = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < QK; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, QK);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale, best = 0.0f;
    for (int i = 0; i < QK; i++) {
        int l = qg_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        float diff = scale * (float)L[i] + min - x[i];
        best += w[i] * (diff * diff);
    }
    for (int is = 0; is <= 36; is++) {
        iscale = (-0.9f + 0.05f * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        uint8_t La[QK];
        for (int i = 0; i < QK; i++) {
            int l = qg_nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            La[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float s = (sum_w * sum_xl - sum_x * sum_l) / D;
        float m = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (m > 0) {
            m = 0;
            s = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < QK; i++) {
            float diff = s * (float)La[i] + m - x[i];
            err += w[i] * (diff * diff);
        }
        if (err < best) {
            memcpy(L, La, QK);
            best = err;
            scale = s;
            min = m;
        }
    }
    *neg_min = -min;
    return scale;
}

/* ---- the per-type block codecs -------------------------------------------------------------- */

/* One legacy type: its block size, reference quantizer, ggml's search (with ggml's weights w)
 * and the block dequantizer used to measure a candidate; its codes 0..ncodes-1 decode as
 * (code - zero) * d, or code * d + m with a min, 5-bit codes with qh before qs. */
typedef struct legacy_type {
    size_t bytes;
    void (*ref)(const float *x, uint8_t *b);
    void (*search)(const float *x, const float *w, bool wide, uint8_t *b);
    void (*dequantize)(const void *src, float *x, int64_t n);
    int ncodes, zero;
    bool has_min;
} legacy_type;

static void ref_q4_0(const float *x, uint8_t *b)
{
    uint8_t L[QK];
    ref_symmetric(x, 8, b, L);
    pack_nibbles(b + 2, L);
}

static void ref_q5_0(const float *x, uint8_t *b)
{
    uint8_t L[QK];
    ref_symmetric(x, 16, b, L);
    pack_5bit(b + 2, b + 6, L);
}

static void ref_q4_1(const float *x, uint8_t *b)
{
    uint8_t L[QK];
    ref_affine(x, 15, b, L);
    pack_nibbles(b + 4, L);
}

static void ref_q5_1(const float *x, uint8_t *b)
{
    uint8_t L[QK];
    ref_affine(x, 31, b, L);
    pack_5bit(b + 4, b + 8, L);
}

static void search_q4_0(const float *x, const float *w, bool wide, uint8_t *b)
{
    uint8_t L[QK];
    qg_put_f16(b, search_symmetric(8, x, w, wide ? 20 : 9, L));
    pack_nibbles(b + 2, L);
}

static void search_q5_0(const float *x, const float *w, bool wide, uint8_t *b)
{
    uint8_t L[QK];
    qg_put_f16(b, search_symmetric(16, x, w, wide ? 20 : 9, L));
    pack_5bit(b + 2, b + 6, L);
}

static void search_q4_1(const float *x, const float *w, bool wide, uint8_t *b)
{
    uint8_t L[QK];
    float neg_min;
    (void)wide; /* a wider affine search finds no lower errors */
    qg_put_f16(b, search_affine(15, x, w, L, &neg_min));
    qg_put_f16(b + 2, -neg_min);
    pack_nibbles(b + 4, L);
}

static void search_q5_1(const float *x, const float *w, bool wide, uint8_t *b)
{
    uint8_t L[QK];
    float neg_min;
    (void)wide;
    qg_put_f16(b, search_affine(31, x, w, L, &neg_min));
    qg_put_f16(b + 2, -neg_min);
    pack_5bit(b + 4, b + 8, L);
}

static const legacy_type type_q4_0 = {18, ref_q4_0, search_q4_0, qg_dequantize_q4_0, 16, 8, false};
static const legacy_type type_q4_1 = {20, ref_q4_1, search_q4_1, qg_dequantize_q4_1, 16, 0, true};
static const legacy_type type_q5_0 = {22, ref_q5_0, search_q5_0, qg_dequantize_q5_0, 32, 16, false};
static const legacy_type type_q5_1 = {24, ref_q5_1, search_q5_1, qg_dequantize_q5_1, 32, 0, true};

/* The codes of block b. */
static void block_codes(const legacy_type *t, const uint8_t *b, int *q)
{
    const uint8_t *codes = b + (t->has_min ? 4 : 2);
    if (t->ncodes == 32) {
        unpack_5bit(codes, codes + 4, q);
        return;
    }
    for (int j = 0; j < QK / 2; j++) {
        q[j] = codes[j] & 0x0f;
        q[j + 16] = codes[j] >> 4;
    }
}

/* Re-chooses every code of block b for its stored scale (and min): each value takes the code
 * whose decoded float is nearest, keeping its code on ties, so no value's error grows. */
static void polish(const legacy_type *t, const float *x, uint8_t *b)
{
    float d = qg_get_f16(b), m = t->has_min ? qg_get_f16(b + 2) : 0.0f, y[QK];
    if (d == 0.0f || !isfinite(d) || !isfinite(m)) return; /* nothing to choose between */
    uint8_t *codes = b + (t->has_min ? 4 : 2);
    uint8_t L[QK];
    t->dequantize(b, y, QK);
    int q[QK];
    block_codes(t, b, q);
    for (int j = 0; j < QK; j++) {
        double best = fabs((double)x[j] - (double)y[j]);
        L[j] = (uint8_t)q[j];
        /* the nearest code is within 2 of u's floor, or the end past which u lies */
        float u = (x[j] - m) / d + (float)t->zero;
        if (u != u) continue;
        int c0 = u < 0.0f ? 0 : u >= (float)t->ncodes ? t->ncodes - 1 : (int)u;
        for (int c = c0 - 1; c <= c0 + 2; c++) {
            if (c < 0 || c >= t->ncodes) continue;
            float v = t->has_min ? (float)c * d + m : (float)(c - t->zero) * d;
            double e = fabs((double)x[j] - (double)v);
            if (e < best) {
                best = e;
                L[j] = (uint8_t)c;
            }
        }
    }
    if (t->ncodes == 32)
        pack_5bit(codes, codes + 4, L);
    else
        pack_nibbles(codes, L);
}

/* ---- rows ----------------------------------------------------------------------------------- */

/* sum_j w_j (x_j - y_j)^2 of one block as stored in b, in float64 (the contract's measure). */
static double block_error(const legacy_type *t, const uint8_t *b, const float *x, const float *qw)
{
    float y[QK];
    t->dequantize(b, y, QK);
    double e = 0;
    for (int j = 0; j < QK; j++) {
        double d = (double)x[j] - (double)y[j];
        e += (double)qw[j] * d * d;
    }
    return e;
}

/* Into b: the weighted least-squares scale (and min) for b's codes, as fp16. Returns false
 * when the codes leave it undetermined. */
static bool refit(const legacy_type *t, const float *x, const float *qw, uint8_t *b)
{
    int q[QK];
    block_codes(t, b, q);
    double sw = 0, sl = 0, sl2 = 0, sx = 0, slx = 0;
    for (int j = 0; j < QK; j++) {
        double l = q[j] - t->zero, w = qw[j];
        sw += w;
        sl += w * l;
        sl2 += w * l * l;
        sx += w * x[j];
        slx += w * l * x[j];
    }
    if (!t->has_min) {
        if (!(sl2 > 0)) return false;
        qg_put_f16(b, (float)(slx / sl2));
        return true;
    }
    double det = sw * sl2 - sl * sl;
    if (!(det > 0)) return false;
    qg_put_f16(b, (float)((sw * slx - sx * sl) / det));
    qg_put_f16(b + 2, (float)((sl2 * sx - sl * slx) / det));
    return true;
}

/* Alternates refit and polish on block b while its weighted error drops (at most 4 rounds). */
static void refine(const legacy_type *t, const float *x, const float *qw, uint8_t *b)
{
    double err = block_error(t, b, x, qw);
    for (int round = 0; round < 4; round++) {
        uint8_t c[24];
        memcpy(c, b, t->bytes);
        if (!refit(t, x, qw, c)) return;
        polish(t, x, c);
        double e = block_error(t, c, x, qw);
        if (!(e < err * (1.0 - 1e-9))) return;
        memcpy(b, c, t->bytes);
        err = e;
    }
}

/* A row with importance: per block, ggml's search with its weights qw * sqrt(sigma2 + x^2)
 * (sigma2 the row's mean square), then the same search weighted by qw alone, which is the
 * contract's measure (for q4_0 / q5_0 wider: scales nmax +- 2 in 41 steps).
 * Both are polished (each code re-chosen for the stored fp16 scale, which ggml's search does
 * not see), and the second is kept only when its error is lower by more than float64 summation
 * could blur; then refine() fits the scale to the codes while that lowers the error. Every step
 * is kept only when it lowers the error, so a row's error never exceeds ggml's. */
static void quantize_weighted(const legacy_type *t, const float *x, uint8_t *dst, int64_t n,
                              const float *qw)
{
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; j++) sum_x2 += x[j] * x[j];
    float sigma2 = sum_x2 / (float)n;
    for (int64_t ib = 0; ib < n / QK; ib++, x += QK, qw += QK, dst += t->bytes) {
        float w[QK];
        for (int j = 0; j < QK; j++) w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
        t->search(x, w, false, dst);
        polish(t, x, dst);
        uint8_t alt[24];
        t->search(x, qw, true, alt);
        polish(t, x, alt);
        if (block_error(t, alt, x, qw) < block_error(t, dst, x, qw) * (1.0 - 1e-9))
            memcpy(dst, alt, t->bytes);
        refine(t, x, qw, dst);
    }
}

static void quantize_rows(const legacy_type *t, const float *x, void *dst, int64_t n,
                          const float *importance)
{
    uint8_t *b = dst;
    if (importance) {
        quantize_weighted(t, x, b, n, importance);
        return;
    }
    for (int64_t ib = 0; ib < n / QK; ib++) t->ref(x + ib * QK, b + ib * (int64_t)t->bytes);
}

/* q8_0 is ggml's reference quantizer with or without importance (ggml ignores it). */
void qg_quantize_q8_0(const float *x, void *dst, int64_t n, const float *importance)
{
    (void)importance;
    uint8_t *b = dst;
    for (int64_t ib = 0; ib < n / QK; ib++) ref_q8_0(x + ib * QK, b + ib * 34);
}

void qg_quantize_q4_0(const float *x, void *dst, int64_t n, const float *importance)
{
    quantize_rows(&type_q4_0, x, dst, n, importance);
}

void qg_quantize_q4_1(const float *x, void *dst, int64_t n, const float *importance)
{
    quantize_rows(&type_q4_1, x, dst, n, importance);
}

void qg_quantize_q5_0(const float *x, void *dst, int64_t n, const float *importance)
{
    quantize_rows(&type_q5_0, x, dst, n, importance);
}

void qg_quantize_q5_1(const float *x, void *dst, int64_t n, const float *importance)
{
    quantize_rows(&type_q5_1, x, dst, n, importance);
}
