/* recip_contract.h -- the exact-division contract of the SIMD quantize kernels, once for every
 * ISA file (driver_body.h, which kernels_avx512.c, kernels_avx2.c and kernels_neon.c compile): when
 * a kernel may multiply by a reciprocal instead of dividing, by how much a value must clear a
 * rounding tie for that to give the division's code, and what must be recomputed by the IEEE
 * division. SPDX-License-Identifier: Apache-2.0
 *
 * Integer codes without a divide per element. With r = fl(1/s), b = fl(x * r) (+ zero point)
 * differs from fl(x / s) (+ zero point) by less than (|x * r| + |b|) * 2^-21. b is clipped to
 * [qmin, qmax] before rounding (the same as clipping after, qmin and qmax being integers); a
 * clipped value is then exact, and an unclipped one rounds like the division's value unless it
 * lies within qk_int_margin() of a half-integer (2^-12 covers 8-bit values and zero points, 2^-11
 * uint8 with zero points up to 255, 2^-4 int16): such lanes ("near" lanes, |b - rint(b)| >=
 * qk_tie_limit()) are recomputed with the IEEE division. The reciprocal is only used when s is
 * in [QK_RECIP_SCALE_MIN, QK_RECIP_SCALE_MAX] (qk_recip_usable), so that r is a normal float;
 * otherwise a group's table holds NaN for r (driver_body.h's qd_group_tables), which makes every
 * lane near. A NaN b must count as near too:
 * each kernel orders its clip so that NaN propagates, and compares unordered.
 */
#ifndef QUANT_RECIP_CONTRACT_H
#define QUANT_RECIP_CONTRACT_H

#include <stdbool.h>

#include "internal.h"

#define QK_RECIP_SCALE_MIN 0x1p-126f
#define QK_RECIP_SCALE_MAX 0x1p126f

/* Integer code kinds: the ones the reciprocal path serves. */
static inline bool qk_is_int(quant_kcode kc)
{
    return kc == QK_I8 || kc == QK_U8 || kc == QK_I16;
}

/* How far from a half-integer b must be for the reciprocal's rounding to be the division's. */
static inline float qk_int_margin(quant_kcode kc)
{
    return kc == QK_I16 ? 0x1p-4f : kc == QK_U8 ? 0x1p-11f : 0x1p-12f;
}

/* |b - rint(b)| at or above this (or unordered) marks a lane for the division. */
static inline float qk_tie_limit(quant_kcode kc)
{
    return 0.5f - qk_int_margin(kc);
}

/* The scale's reciprocal may be used. */
static inline bool qk_recip_usable(float s)
{
    return s >= QK_RECIP_SCALE_MIN && s <= QK_RECIP_SCALE_MAX;
}

#endif /* QUANT_RECIP_CONTRACT_H */
