/* ggml_iq4.c -- ggml's 4-bit non-linear types iq4_nl (32-value blocks) and iq4_xs (256-value
 * super-blocks of eight 32-value sub-blocks with 6-bit scales): layouts, dequantization bit for
 * bit as ggml's to_float, and the quantizer llama-quantize uses for them (ggml's
 * quantize_row_iq4_nl_impl with 7 tries each side), with and without importance; with
 * importance ggml's block is improved where that lowers the importance-weighted error: codes
 * re-chosen for the stored fp16 scale, a second search weighted by the importance alone, and
 * the scales refitted to the codes.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Layouts (little-endian; nibble j of a 16-byte group holds value j low, value j + 16 high):
 *   iq4_nl {fp16 d; qs[16]}                                  18 B   x = d * levels[q]
 *   iq4_xs {fp16 d; u16 scales_h; scales_l[4]; qs[128]}     136 B   x = d * (ls - 32) * levels[q]
 * where sub-block ib's 6-bit ls has its low 4 bits in nibble ib % 2 of scales_l[ib / 2] and its
 * high 2 bits at bit 2 * ib of scales_h.
 *
 * The float operations of ggml's quantizer are written in its order, so without importance the
 * bytes are ggml's.
 */
#include <math.h>

#include "ggml_blocks.h"

#define SUB  32  /* values per scale */
#define XS   256 /* values per iq4_xs super-block */
#define NTRY 7   /* scale tries each side of the first guess */

/* ggml's non-linear levels (kvalues_iq4nl), ascending. */
static const int8_t levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1,    13,   25,  38,  53,  69,  89,  113};

/* The index of the level nearest v: ggml's binary search, ties to the upper index; NaN gives
 * the top index. */
static int nearest_level(float v)
{
    if (v <= levels[0]) return 0;
    if (v >= levels[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < levels[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - levels[hi - 1] < levels[hi] - v ? hi - 1 : hi;
}

/* The levels q of a sub-block's values at inverse scale id: sum w q x and sum w q^2. */
static void index_pass(const float *x, const float *w, float id, float *sumqx, float *sumq2)
{
    float sqx = 0.0f, sq2 = 0.0f; /* locals: the pointers may alias x and w */
    for (int j = 0; j < SUB; j++) {
        float q = levels[nearest_level(id * x[j])];
        sqx += w[j] * q * x[j];
        sq2 += w[j] * q * q;
    }
    *sumqx = sqx;
    *sumq2 = sq2;
}

/* One 32-value sub-block's scale: the least-squares fit from max / 127, then from the inverse
 * scales (t - 127) / max, t = -ntry..ntry, keeping the largest (sum w q x)^2 / sum w q^2. A
 * sub-block whose largest |x| is below QG_GROUP_MAX_EPS gets 0. */
static float sub_scale(const float *x, const float *w, int ntry)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < SUB; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    if (amax < QG_GROUP_MAX_EPS) return 0.0f;
    float d = -max / (float)levels[0];
    float sumqx, sumq2;
    index_pass(x, w, 1 / d, &sumqx, &sumq2);
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int t = -ntry; t <= ntry; t++) {
        index_pass(x, w, (float)(t + levels[0]) / max, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* How a search weighs the values: ggml's way, or by the importance alone (the contract's). */
typedef enum weighting { GGML_WEIGHTS, IMPORTANCE_WEIGHTS } weighting;

/* The weights of a sub-block: ggml's are qw * sqrt(sigma2 + x^2) with importance, else x^2. */
static void sub_weights(const float *x, const float *qw, float sigma2, weighting how, float *w)
{
    for (int j = 0; j < SUB; j++) {
        if (how == IMPORTANCE_WEIGHTS)
            w[j] = qw[j];
        else
            w[j] = qw ? qw[j] * sqrtf(sigma2 + x[j] * x[j]) : x[j] * x[j];
    }
}

/* Tries of a search: ggml's 7 each side, or 15 for the search by importance alone. */
static int tries(weighting how)
{
    return how == GGML_WEIGHTS ? NTRY : 2 * NTRY + 1;
}

/* sum_j qw_j (x_j - y_j)^2 in float64 for n values decoded by `dequantize` from b. */
static double block_error(void (*dequantize)(const void *, float *, int64_t), const uint8_t *b,
                          const float *x, const float *qw, int n)
{
    float y[XS];
    dequantize(b, y, n);
    double e = 0;
    for (int j = 0; j < n; j++) {
        double d = (double)x[j] - (double)y[j];
        e += (double)qw[j] * d * d;
    }
    return e;
}

/* sigma2 of a (super-)block of n values: 2 * sum x^2 / n, summed as ggml does. */
static float block_sigma2(const float *x, int n)
{
    float s = 0;
    for (int j = 0; j < n; j++) s += x[j] * x[j];
    return s * (2.0f / (float)n);
}

/* Indices of a sub-block at the stored scale s (its fp32 value), packed into 16 bytes. */
static void pack_sub(const float *x, float s, uint8_t *qs)
{
    float id = s != 0.0f ? 1 / s : 0.0f;
    uint8_t L[SUB];
    for (int j = 0; j < SUB; j++) L[j] = (uint8_t)nearest_level(id * x[j]);
    for (int j = 0; j < SUB / 2; j++) qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

static void quantize_nl_block(const float *x, const float *qw, weighting how, uint8_t *b)
{
    float w[SUB];
    sub_weights(x, qw, block_sigma2(x, SUB), how, w);
    float d = sub_scale(x, w, tries(how));
    qg_put_f16(b, d);
    pack_sub(x, d, b + 2);
}

/* Re-chooses the level of each of the n values at qs (packed as pack_sub) for its stored
 * sub-block scale dl: the level whose decoded float dl * level is nearest, keeping the old one
 * on ties, so no value's error grows. */
static void polish_sub(const float *x, float dl, uint8_t *qs)
{
    if (dl == 0.0f || !isfinite(dl)) return; /* nothing to choose between */
    for (int j = 0; j < SUB; j++) {
        int shift = j < SUB / 2 ? 0 : 4;
        uint8_t *p = qs + j % (SUB / 2);
        int l = (*p >> shift) & 0xf;
        double best = fabs((double)x[j] - (double)(dl * (float)levels[l]));
        int k0 = nearest_level(x[j] / dl); /* the nearest is this one or a neighbour */
        for (int k = k0 > 0 ? k0 - 1 : 0; k <= k0 + 1 && k < 16; k++) {
            double e = fabs((double)x[j] - (double)(dl * (float)levels[k]));
            if (e < best) {
                best = e;
                l = k;
            }
        }
        *p = (uint8_t)((*p & (0xf0 >> shift)) | (l << shift));
    }
}

/* sum_j qw_j (x_j - dl * level_j)^2 in float64 over one sub-block packed at qs. */
static double sub_error(const float *x, const float *qw, float dl, const uint8_t *qs)
{
    double e = 0;
    for (int j = 0; j < SUB; j++) {
        float y = dl * (float)levels[(qs[j % 16] >> (j < 16 ? 0 : 4)) & 0xf];
        double diff = (double)x[j] - (double)y;
        e += (double)qw[j] * diff * diff;
    }
    return e;
}

/* Alternates the weighted least-squares scale for the block's levels (as fp16) with
 * polish_sub while the weighted error drops (at most 4 rounds). */
static void refine_nl(const float *x, const float *qw, uint8_t *b)
{
    double err = block_error(qg_dequantize_iq4_nl, b, x, qw, SUB);
    for (int round = 0; round < 4; round++) {
        double sqx = 0, sq2 = 0;
        for (int j = 0; j < SUB; j++) {
            double q = levels[(b[2 + j % 16] >> (j < 16 ? 0 : 4)) & 0xf];
            sqx += (double)qw[j] * q * x[j];
            sq2 += (double)qw[j] * q * q;
        }
        if (!(sq2 > 0)) return;
        uint8_t c[18];
        memcpy(c, b, 18);
        qg_put_f16(c, (float)(sqx / sq2));
        polish_sub(x, qg_get_f16(c), c + 2);
        double e = block_error(qg_dequantize_iq4_nl, c, x, qw, SUB);
        if (!(e < err * (1.0 - 1e-9))) return;
        memcpy(b, c, 18);
        err = e;
    }
}

/* With importance, each block is ggml's (its codes polished for the stored scale) unless the
 * search by importance alone has a weighted error lower by more than float64 summation could
 * blur; then refine_nl. Each step is kept only when it lowers the error, so a row's error is
 * never above ggml's. */
void qg_quantize_iq4_nl(const float *x, void *dst, int64_t n, const float *importance)
{
    uint8_t *b = dst;
    for (int64_t ib = 0; ib < n / SUB; ib++, x += SUB, b += 18) {
        const float *qw = importance ? importance + ib * SUB : NULL;
        quantize_nl_block(x, qw, GGML_WEIGHTS, b);
        if (!qw) continue;
        polish_sub(x, qg_get_f16(b), b + 2);
        uint8_t alt[18];
        quantize_nl_block(x, qw, IMPORTANCE_WEIGHTS, alt);
        polish_sub(x, qg_get_f16(alt), alt + 2);
        if (block_error(qg_dequantize_iq4_nl, alt, x, qw, SUB) <
            block_error(qg_dequantize_iq4_nl, b, x, qw, SUB) * (1.0 - 1e-9))
            memcpy(b, alt, 18);
        refine_nl(x, qw, b);
    }
}

/* Sub-block ib's 6-bit scale code ls of an iq4_xs block, and setting it. */
static int xs_scale_code(const uint8_t *b, int ib)
{
    unsigned scales_h = (unsigned)(b[2] | (b[3] << 8));
    return ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) | (int)(((scales_h >> (2 * ib)) & 3u) << 4);
}

static void xs_set_scale_code(uint8_t *b, int ib, int ls)
{
    unsigned scales_h = (unsigned)(b[2] | (b[3] << 8));
    scales_h = (scales_h & ~(3u << (2 * ib))) | (unsigned)(ls >> 4) << (2 * ib);
    b[2] = (uint8_t)(scales_h & 0xff);
    b[3] = (uint8_t)(scales_h >> 8);
    int shift = 4 * (ib % 2);
    b[4 + ib / 2] = (uint8_t)((b[4 + ib / 2] & (0xf0 >> shift)) | (ls & 0xf) << shift);
}

/* One iq4_xs super-block: sub-block scales as iq4_nl's, the super scale d = -(the signed
 * largest)/32, each sub-block's l = clamp(nearest(s / d), -32, 31), indices at d * l. */
static void quantize_xs_block(const float *x, const float *qw, weighting how, uint8_t *b)
{
    float sigma2 = block_sigma2(x, XS), scales[XS / SUB];
    float max_scale = 0.0f, amax_scale = 0.0f;
    for (int ib = 0; ib < XS / SUB; ib++) {
        float w[SUB];
        sub_weights(x + ib * SUB, qw ? qw + ib * SUB : NULL, sigma2, how, w);
        scales[ib] = sub_scale(x + ib * SUB, w, tries(how));
        if (fabsf(scales[ib]) > amax_scale) {
            amax_scale = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    float d = -max_scale / 32;
    float id = d != 0.0f ? 1 / d : 0.0f;
    qg_put_f16(b, d);
    uint16_t scales_h = 0;
    memset(b + 4, 0, 4);
    for (int ib = 0; ib < XS / SUB; ib++) {
        int l = qg_nearest_int(id * scales[ib]);
        l = l < -32 ? -32 : l > 31 ? 31 : l;
        pack_sub(x + ib * SUB, d * (float)l, b + 8 + 16 * ib);
        l += 32;
        b[4 + ib / 2] |= (uint8_t)((l & 0xf) << (4 * (ib % 2)));
        scales_h |= (uint16_t)((l >> 4) << (2 * ib));
    }
    b[2] = (uint8_t)(scales_h & 0xff);
    b[3] = (uint8_t)(scales_h >> 8);
}

/* polish_sub over the eight sub-blocks of an iq4_xs super-block at their stored scales. */
static void polish_xs(const float *x, uint8_t *b)
{
    float d = qg_get_f16(b);
    for (int ib = 0; ib < XS / SUB; ib++)
        polish_sub(x + ib * SUB, d * (float)(xs_scale_code(b, ib) - 32), b + 8 + 16 * ib);
}

/* The weighted least-squares super scale for the block's scale codes and levels, as fp16,
 * then per sub-block the scale code among its own and its two neighbours (each with
 * polish_sub) of the lowest weighted error. Returns false when the fit is undetermined. */
static bool refit_xs(const float *x, const float *qw, uint8_t *b)
{
    double sax = 0, sa2 = 0;
    for (int ib = 0; ib < XS / SUB; ib++) {
        int l = xs_scale_code(b, ib) - 32;
        for (int j = 0; j < SUB; j++) {
            double a = (double)l * levels[(b[8 + 16 * ib + j % 16] >> (j < 16 ? 0 : 4)) & 0xf];
            sax += (double)qw[ib * SUB + j] * a * x[ib * SUB + j];
            sa2 += (double)qw[ib * SUB + j] * a * a;
        }
    }
    if (!(sa2 > 0)) return false;
    qg_put_f16(b, (float)(sax / sa2));
    float d = qg_get_f16(b);
    for (int ib = 0; ib < XS / SUB; ib++) {
        const float *xb = x + ib * SUB, *wb = qw + ib * SUB;
        uint8_t *qs = b + 8 + 16 * ib;
        int ls = xs_scale_code(b, ib), best_ls = ls;
        uint8_t best_qs[SUB / 2];
        polish_sub(xb, d * (float)(ls - 32), qs);
        memcpy(best_qs, qs, sizeof best_qs);
        double best = sub_error(xb, wb, d * (float)(ls - 32), qs);
        for (int c = ls - 1; c <= ls + 1; c += 2) {
            if (c < 0 || c > 63) continue;
            uint8_t cq[SUB / 2];
            memcpy(cq, best_qs, sizeof cq);
            polish_sub(xb, d * (float)(c - 32), cq);
            double e = sub_error(xb, wb, d * (float)(c - 32), cq);
            if (e < best) {
                best = e;
                best_ls = c;
                memcpy(best_qs, cq, sizeof cq);
            }
        }
        xs_set_scale_code(b, ib, best_ls);
        memcpy(qs, best_qs, sizeof best_qs);
    }
    return true;
}

/* Alternates refit_xs while the weighted error drops (at most 4 rounds). */
static void refine_xs(const float *x, const float *qw, uint8_t *b)
{
    double err = block_error(qg_dequantize_iq4_xs, b, x, qw, XS);
    for (int round = 0; round < 4; round++) {
        uint8_t c[136];
        memcpy(c, b, sizeof c);
        if (!refit_xs(x, qw, c)) return;
        double e = block_error(qg_dequantize_iq4_xs, c, x, qw, XS);
        if (!(e < err * (1.0 - 1e-9))) return;
        memcpy(b, c, sizeof c);
        err = e;
    }
}

/* With importance, as iq4_nl's blocks, per super-block, refined by refine_xs. */
void qg_quantize_iq4_xs(const float *x, void *dst, int64_t n, const float *importance)
{
    uint8_t *b = dst;
    for (int64_t ib = 0; ib < n / XS; ib++, x += XS, b += 136) {
        const float *qw = importance ? importance + ib * XS : NULL;
        quantize_xs_block(x, qw, GGML_WEIGHTS, b);
        if (!qw) continue;
        polish_xs(x, b);
        uint8_t alt[136];
        quantize_xs_block(x, qw, IMPORTANCE_WEIGHTS, alt);
        polish_xs(x, alt);
        if (block_error(qg_dequantize_iq4_xs, alt, x, qw, XS) <
            block_error(qg_dequantize_iq4_xs, b, x, qw, XS) * (1.0 - 1e-9))
            memcpy(b, alt, 136);
        refine_xs(x, qw, b);
    }
}

void qg_dequantize_iq4_nl(const void *src, float *x, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t ib = 0; ib < n / SUB; ib++, b += 18, x += SUB) {
        float d = qg_get_f16(b);
        for (int j = 0; j < SUB / 2; j++) {
            x[j] = d * (float)levels[b[2 + j] & 0xf];
            x[j + 16] = d * (float)levels[b[2 + j] >> 4];
        }
    }
}

void qg_dequantize_iq4_xs(const void *src, float *x, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t ibl = 0; ibl < n / XS; ibl++, b += 136) {
        float d = qg_get_f16(b);
        for (int ib = 0; ib < XS / SUB; ib++, x += SUB) {
            float dl = d * (float)(xs_scale_code(b, ib) - 32);
            const uint8_t *qs = b + 8 + 16 * ib;
            for (int j = 0; j < SUB / 2; j++) {
                x[j] = dl * (float)levels[qs[j] & 0xf];
                x[j + 16] = dl * (float)levels[qs[j] >> 4];
            }
        }
    }
}
