/* ggml_ksearch.h -- libquant's internal header for the scale searches of ggml's K-quant types
 * (ggml_kquants.c): the code and scale of one sub-block, signed or with a min, and the 4/6-bit
 * codes of a super-block's sub-block scales. Every sum is a float32 accumulation in element
 * order and every rounding ggml's nearest_int, so the results are ggml's to the bit.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_GGML_KSEARCH_H
#define QUANT_GGML_KSEARCH_H

#include <stdbool.h>
#include <stdint.h>

/* The sweep of an asymmetric search: inverse scales (nmax + rmin + rdelta * k) / (max - min)
 * for k = 0..nstep, each scored by sum w |err| (mad) or sum w err^2. */
typedef struct qk_sweep {
    float rmin, rdelta;
    int nstep;
    bool mad;
} qk_sweep;

/* Codes L[i] in 0..nmax for x[i] ~ scale * L[i] - *neg_min (min <= 0, so *neg_min >= 0), by
 * the weighted least-squares fit of (scale, min) at each inverse scale of the sweep.
 * `w` NULL weighs x^2. `aux` is n bytes of scratch. @return : the scale (0: all codes 0). */
float qk_fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, uint8_t *aux,
                    float *neg_min, const qk_sweep *sweep);

/* Codes L[i] in 0..2 nmax - 1 for x[i] ~ scale * (L[i] - nmax), the inverse scale swept over
 * -(nmax + k / 10) / max, k = -9..9, keeping the best weighted fit (`w` NULL weighs x^2).
 * @return : the scale (0 and every code 0 when max |x| < QG_GROUP_MAX_EPS). */
float qk_fit_signed(int n, int nmax, const float *x, const float *w, int8_t *L);

/* As qk_fit_signed with x^2 weights, but from the one inverse scale -nmax / max, then up to 5
 * passes re-rounding each code alone while the fit improves. */
float qk_fit_signed_descent(int n, int nmax, const float *x, int8_t *L);

/* Codes L[i] in 0..nmax for non-negative x[i] ~ scale * L[i] (a super-block's sub-block scales
 * or mins), weighted by w: the best of nine inverse scales (nmax + k / 10) / max, then up to 5
 * passes re-rounding each code alone. As ggml, a negative x[i] wraps its code modulo 256.
 * @return : the scale (0 and every code 0 when max x < QG_GROUP_MAX_EPS). */
float qk_fit_positive(int n, int nmax, const float *x, const float *w, uint8_t *L);

#endif /* QUANT_GGML_KSEARCH_H */
