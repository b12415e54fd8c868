/* ggml_ksearch.c -- the scale searches of ggml's K-quant types (see ggml_ksearch.h): one
 * sub-block's codes with a signed scale or with a scale and a min, and the codes of a
 * super-block's positive sub-block scales. The arithmetic is float32 in the order ggml's
 * reference C evaluates it (the build never fuses a*b+c), so the codes are ggml's.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <string.h>

#include "ggml_blocks.h"
#include "ggml_ksearch.h"

static inline int clamp_int(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* The weight of element i: w[i], or x[i]^2 without weights. */
static inline float weight_at(const float *w, const float *x, int i)
{
    return w ? w[i] : x[i] * x[i];
}

/* ---- scale and min ------------------------------------------------------------------------ */

/* sum w * |err| or sum w * err^2 of x ~ scale * L + min. */
static float affine_error(int n, const float *x, const float *w, const uint8_t *L, float scale,
                          float min, bool mad)
{
    float e = 0;
    for (int i = 0; i < n; i++) {
        float diff = scale * L[i] + min - x[i];
        diff = mad ? fabsf(diff) : diff * diff;
        e += weight_at(w, x, i) * diff;
    }
    return e;
}

static void affine_round(int n, int nmax, const float *x, float iscale, float min, uint8_t *L)
{
    for (int i = 0; i < n; i++)
        L[i] = (uint8_t)clamp_int(qg_nearest_int(iscale * (x[i] - min)), 0, nmax);
}

float qk_fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, uint8_t *aux,
                    float *neg_min, const qk_sweep *sweep)
{
    float min = x[0], max = x[0];
    float sum_w = weight_at(w, x, 0);
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float wi = weight_at(w, x, i);
        sum_w += wi;
        sum_x += wi * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    affine_round(n, nmax, x, iscale, min, L);
    float best = affine_error(n, x, w, L, scale, min, sweep->mad);
    for (int k = 0; k <= sweep->nstep; k++) {
        iscale = (sweep->rmin + sweep->rdelta * k + nmax) / (max - min);
        affine_round(n, nmax, x, iscale, min, aux);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            float wi = weight_at(w, x, i);
            int l = aux[i];
            sum_l += wi * l;
            sum_l2 += wi * l * l;
            sum_xl += wi * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float e = affine_error(n, x, w, aux, this_scale, this_min, sweep->mad);
        if (e < best) {
            memcpy(L, aux, (size_t)n);
            best = e;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

/* ---- signed scale --------------------------------------------------------------------------- */

/* The element of largest |x| (the first on ties), signed; 0 when every |x| is 0. */
static float signed_absmax(int n, const float *x, float *amax)
{
    float max = 0;
    *amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > *amax) {
            *amax = ax;
            max = x[i];
        }
    }
    return max;
}

static inline int signed_code(int nmax, float iscale, float x)
{
    return clamp_int(qg_nearest_int(iscale * x), -nmax, nmax - 1);
}

/* Sums w x l and w l^2 over the codes l in -nmax..nmax-1 of x at `iscale`. */
static void signed_sums(int n, int nmax, const float *x, const float *w, float iscale, float *sumlx,
                        float *suml2)
{
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        int l = signed_code(nmax, iscale, x[i]);
        float wi = weight_at(w, x, i);
        slx += wi * x[i] * l;
        sl2 += wi * l * l;
    }
    *sumlx = slx;
    *suml2 = sl2;
}

/* The codes at `iscale`, stored plus `bias`. */
static void signed_codes(int n, int nmax, const float *x, float iscale, int bias, int8_t *L)
{
    for (int i = 0; i < n; i++) L[i] = (int8_t)(signed_code(nmax, iscale, x[i]) + bias);
}

float qk_fit_signed(int n, int nmax, const float *x, const float *w, int8_t *L)
{
    float amax, max = signed_absmax(n, x, &amax);
    if (amax < QG_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float sumlx, suml2;
    signed_codes(n, nmax, x, -nmax / max, nmax, L);
    signed_sums(n, nmax, x, w, -nmax / max, &sumlx, &suml2);
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int k = -9; k <= 9; k++) {
        if (k == 0) continue;
        float iscale = -(nmax + 0.1f * k) / max;
        signed_sums(n, nmax, x, w, iscale, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            signed_codes(n, nmax, x, iscale, nmax, L);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* One pass of re-rounding each signed code alone (x^2 weights); @return : codes changed. */
static int signed_descent_pass(int n, int nmax, const float *x, int8_t *L, float *sumlx,
                               float *suml2)
{
    float sx = *sumlx, s2 = *suml2; /* locals: stores to L may not alias them */
    int changed = 0;
    for (int i = 0; i < n; i++) {
        float w = x[i] * x[i];
        float slx = sx - w * x[i] * L[i];
        if (!(slx > 0)) continue;
        float sl2 = s2 - w * L[i] * L[i];
        int l = clamp_int(qg_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (l == L[i]) continue;
        slx += w * x[i] * l;
        sl2 += w * l * l;
        if (sl2 > 0 && slx * slx * s2 > sx * sx * sl2) {
            L[i] = (int8_t)l;
            sx = slx;
            s2 = sl2;
            changed++;
        }
    }
    *sumlx = sx;
    *suml2 = s2;
    return changed;
}

float qk_fit_signed_descent(int n, int nmax, const float *x, int8_t *L)
{
    float amax, max = signed_absmax(n, x, &amax);
    if (amax < QG_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float sumlx, suml2;
    signed_codes(n, nmax, x, -nmax / max, 0, L);
    signed_sums(n, nmax, x, NULL, -nmax / max, &sumlx, &suml2);
    for (int pass = 0; pass < 5; pass++)
        if (!signed_descent_pass(n, nmax, x, L, &sumlx, &suml2)) break;
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ---- positive scales ------------------------------------------------------------------------ */

/* sum w (x - scale * min(nmax, round(iscale * x)))^2. */
static float positive_error(int n, int nmax, const float *x, const float *w, float iscale)
{
    float scale = 1 / iscale;
    float e = 0;
    for (int i = 0; i < n; i++) {
        int l = qg_nearest_int(iscale * x[i]);
        if (l > nmax) l = nmax;
        float diff = x[i] - scale * l;
        e += w[i] * diff * diff;
    }
    return e;
}

/* One pass of re-rounding each positive code alone; @return : codes changed. */
static int positive_descent_pass(int n, int nmax, const float *x, const float *w, uint8_t *L,
                                 float *sumlx, float *suml2)
{
    float sx = *sumlx, s2 = *suml2; /* locals: stores to L may not alias them */
    int changed = 0;
    for (int i = 0; i < n; i++) {
        float slx = sx - w[i] * x[i] * L[i];
        float sl2 = s2 - w[i] * L[i] * L[i];
        if (!(slx > 0 && sl2 > 0)) continue;
        int l = qg_nearest_int(x[i] * sl2 / slx);
        if (l > nmax) l = nmax;
        if (l == L[i]) continue;
        slx += w[i] * x[i] * l;
        sl2 += w[i] * l * l;
        if (slx * slx * s2 > sx * sx * sl2) {
            L[i] = (uint8_t)l;
            sx = slx;
            s2 = sl2;
            changed++;
        }
    }
    *sumlx = sx;
    *suml2 = s2;
    return changed;
}

float qk_fit_positive(int n, int nmax, const float *x, const float *w, uint8_t *L)
{
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < QG_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    /* The plain inverse scale is scored with its codes unclamped (as ggml does). */
    float iscale = nmax / max;
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)qg_nearest_int(iscale * x[i]);
        float diff = x[i] - scale * L[i];
        best += w[i] * diff * diff;
    }
    for (int k = -4; k <= 4; k++) {
        if (k == 0) continue;
        float iscale_k = (0.1f * k + nmax) / max;
        float e = positive_error(n, nmax, x, w, iscale_k);
        if (e < best) {
            best = e;
            iscale = iscale_k;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = qg_nearest_int(iscale * x[i]);
        if (l > nmax) l = nmax;
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * l;
        suml2 += w[i] * l * l;
    }
    for (int pass = 0; pass < 5; pass++)
        if (!positive_descent_pass(n, nmax, x, w, L, &sumlx, &suml2)) break;
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}
