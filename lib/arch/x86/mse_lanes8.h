/* mse_lanes8.h -- the MSE search's inner loop over 8 candidates in 256-bit lanes, shared by the
 * AVX2 kernels (all their candidates) and the AVX-512 ones (a last batch of at most 8): for the
 * elements [j, end) of one column group, each lane's candidate code by the IEEE division x / s,
 * clipped before the rounding (equal to rounding then clipping as the bounds are integers, and it
 * keeps a huge quotient from the conversion's overflow), its float32 product code * s, and the
 * float64 term w * (e * e) added to the lane's sum in element order (SPEC section 9). Included by
 * kernels_avx2.c and kernels_avx512.c after they define ALWAYS_INLINE; AVX instructions only.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_MSE_LANES8_H
#define QUANT_MSE_LANES8_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

ALWAYS_INLINE void mse_int8(const float *x, const float *w, const bool unit, int64_t j, int64_t end,
                            __m256 s, __m256 qmin, __m256 qmax, __m256d *acc0, __m256d *acc1)
{
    __m256d a0 = *acc0, a1 = *acc1;
    for (int64_t i = j; i < end; i++) {
        __m256 v = _mm256_div_ps(_mm256_set1_ps(x[i]), s);
        v = _mm256_min_ps(_mm256_max_ps(v, qmin), qmax);
        __m256 d =
            _mm256_mul_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), s);
        __m256d xd = _mm256_set1_pd((double)x[i]), wd = _mm256_set1_pd(unit ? 1.0 : (double)w[i]);
        __m256d e0 = _mm256_sub_pd(xd, _mm256_cvtps_pd(_mm256_castps256_ps128(d)));
        __m256d e1 = _mm256_sub_pd(xd, _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1)));
        a0 = _mm256_add_pd(a0,
                           unit ? _mm256_mul_pd(e0, e0) : _mm256_mul_pd(wd, _mm256_mul_pd(e0, e0)));
        a1 = _mm256_add_pd(a1,
                           unit ? _mm256_mul_pd(e1, e1) : _mm256_mul_pd(wd, _mm256_mul_pd(e1, e1)));
    }
    *acc0 = a0;
    *acc1 = a1;
}

#endif
