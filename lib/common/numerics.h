/* numerics.h -- scalar numeric primitives shared by every kernel: rounding, saturation, fp8 /
 * f16 / bf16 encodings, NF4 bucketing. The SIMD kernels call these for their tails, so a tail
 * and a scalar run are the same code.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_NUMERICS_H
#define QUANT_NUMERICS_H

#include <stdint.h>
#include <string.h>

static inline uint32_t qn_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float qn_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* True for NaN and +-Inf. */
static inline int qn_nonfinite(float f)
{
    return (qn_bits(f) & 0x7fffffffu) >= 0x7f800000u;
}

/* Round half to even under the default environment (rint is exact and honours RNE). */
static inline float qn_round_even(float v)
{
    return __builtin_rintf(v);
}

/* Round half to even, then saturate to [qmin, qmax]. NaN (never published: non-finite input is
 * an error before any code is kept) maps to 0 to keep the conversion defined. */
static inline int32_t qn_convert_int(float v, float qmin, float qmax)
{
    if (v != v) return 0;
    float r = qn_round_even(v);
    if (r < qmin) r = qmin;
    if (r > qmax) r = qmax;
    return (int32_t)r;
}

/* float32 -> fp8 with M mantissa bits and exponent bias `bias`, round to nearest even, no
 * clipping: values past the largest finite code become `overflow` (NaN for e4m3fn, Inf for
 * e5m2). NaN becomes `nan_code`. The sign of zero is kept. */
static inline uint8_t qn_f32_to_fp8(float f, int M, int bias, uint8_t max_code, uint8_t overflow,
                                    uint8_t nan_code)
{
    uint32_t bits = qn_bits(f);
    uint8_t sign = (uint8_t)((bits >> 24) & 0x80u);
    uint32_t abs = bits & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint8_t)(sign | nan_code);
    uint32_t min_normal = (uint32_t)(127 + 1 - bias) << 23;
    uint32_t code;
    if (abs < min_normal) {
        /* subnormal range: the code is round(|f| * 2^(bias - 1 + M)); 2^M means min normal */
        float scaled = qn_float(abs) * qn_float((uint32_t)(127 + bias - 1 + M) << 23);
        code = (uint32_t)qn_round_even(scaled);
    } else {
        int shift = 23 - M;
        uint32_t rounded = abs + ((1u << (shift - 1)) - 1u) + ((abs >> shift) & 1u);
        code = (rounded >> shift) - ((uint32_t)(127 - bias) << M);
    }
    if (code > max_code) code = overflow;
    return (uint8_t)(sign | code);
}

/* fp8 -> float32 (exact). */
static inline float qn_fp8_to_f32(uint8_t c, int M, int bias, int has_inf)
{
    uint32_t sign = (uint32_t)(c & 0x80u) << 24;
    uint32_t e = (c >> M) & ((1u << (7 - M)) - 1u);
    uint32_t m = c & ((1u << M) - 1u);
    uint32_t emax = (1u << (7 - M)) - 1u;
    if (has_inf && e == emax) return qn_float(sign | 0x7f800000u | (m ? 0x400000u : 0u));
    if (!has_inf && e == emax && m == (1u << M) - 1u) return qn_float(sign | 0x7fc00000u);
    if (e == 0) {
        float v = (float)m * qn_float((uint32_t)(127 + 1 - bias - M) << 23);
        return qn_float(sign | qn_bits(v));
    }
    return qn_float(sign | ((e - (uint32_t)bias + 127u) << 23) | (m << (23 - M)));
}

#define QN_E4M3_MAX 448.0f
#define QN_E5M2_MAX 57344.0f

static inline uint8_t qn_f32_to_e4m3fn(float f)
{
    return qn_f32_to_fp8(f, 3, 7, 0x7e, 0x7f, 0x7f);
}

static inline uint8_t qn_f32_to_e5m2(float f)
{
    return qn_f32_to_fp8(f, 2, 15, 0x7b, 0x7c, 0x7e);
}

/* Quantizer conversions: clip to the finite range first (NaN stays NaN and is never kept). */
static inline uint8_t qn_quant_e4m3fn(float v)
{
    if (v > QN_E4M3_MAX) v = QN_E4M3_MAX;
    if (v < -QN_E4M3_MAX) v = -QN_E4M3_MAX;
    return qn_f32_to_e4m3fn(v);
}

static inline uint8_t qn_quant_e5m2(float v)
{
    if (v > QN_E5M2_MAX) v = QN_E5M2_MAX;
    if (v < -QN_E5M2_MAX) v = -QN_E5M2_MAX;
    return qn_f32_to_e5m2(v);
}

/* float32 -> float16, round to nearest even; NaN keeps its top payload bits and is quieted
 * (as F16C's vcvtps2ph does). */
static inline uint16_t qn_f32_to_f16(float f)
{
    uint32_t bits = qn_bits(f);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t abs = bits & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to Inf */
    if (abs >= 0x38800000u) {                                  /* >= 2^-14: normal */
        uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);
        return (uint16_t)(sign | ((r >> 13) - (112u << 10)));
    }
    float scaled = qn_float(abs) * 16777216.0f; /* * 2^24: exact */
    return (uint16_t)(sign | (uint16_t)qn_round_even(scaled));
}

/* float16 -> float32 (exact; NaN quieted, payload kept). */
static inline float qn_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1f) return qn_float(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-08f; /* 2^-24 */
        return qn_float(sign | qn_bits(v));
    }
    return qn_float(sign | ((e + 112u) << 23) | (m << 13));
}

/* float32 -> bfloat16, round to nearest even; NaN quieted. */
static inline uint16_t qn_f32_to_bf16(float f)
{
    uint32_t bits = qn_bits(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

static inline float qn_bf16_to_f32(uint16_t b)
{
    return qn_float((uint32_t)b << 16);
}

/* NF4: the largest float32 v whose float32 distance to level i is <= its distance to level
 * i+1, for i = 0..14 (found by exhaustive search over the floats between the two levels and
 * re-checked by the unit tests). index(v) = number of thresholds below v, which equals the
 * argmin over float32 |level - v| with ties to the lower index (Qwix's fp_to_nf4). */
static const float qn_nf4_thresholds[15] = {
    -0x1.b239b2p-1f, -0x1.38a4e2p-1f, -0x1.d709p-2f,  -0x1.5bd4eep-2f, -0x1.e079dap-3f,
    -0x1.1a7178p-3f, -0x1.74f0e2p-5f, 0x1.45f5fep-5f, 0x1.ec90c4p-4f,  0x1.a0cfcp-3f,
    0x1.2b05a8p-2f,  0x1.8ea7f2p-2f,  0x1.00da06p-1f, 0x1.491b5ep-1f,  0x1.b913b2p-1f,
};

static inline uint8_t qn_nf4_index(float v)
{
    /* branch-free binary search over the 15 thresholds (4 steps) */
    int lo = 0;
    if (v > qn_nf4_thresholds[lo + 7]) lo += 8;
    if (v > qn_nf4_thresholds[lo + 3]) lo += 4;
    if (v > qn_nf4_thresholds[lo + 1]) lo += 2;
    if (v > qn_nf4_thresholds[lo]) lo += 1; /* lo <= 14 here */
    return (uint8_t)lo;
}

/* e2m1 (fp4, SPEC 2b): code = sign << 3 | magnitude, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
 * Clip to +-6, round to the nearest magnitude, a tie to the even code: the magnitude code is
 * the number of midpoints below |v|, a midpoint counting when |v| passes it, or reaches it and
 * the code above it is even (0.75 -> 2, 1.75 -> 4, 3.5 -> 6; 0.25 -> 0, 1.25 -> 2, 2.5 -> 4,
 * 5 -> 6). Clipping needs no step: everything past 5 is code 7. The sign bit is kept, so -0.1
 * (and -0) give code 8. NaN (never kept: non-finite input is an error) gives a zero code. */
/* The midpoints, each as X(midpoint, reached): `reached` 1 when reaching it counts (the code
 * above is even), 0 when |v| must pass it. One list for the scalar path and the AVX2 and NEON
 * kernels; AVX-512 rounds to nearest even on the e2m1 grid instead, the same codes for every
 * float (checked over all 2^32 bit patterns; kernels_e2m1_sampled_floats in the unit tests). */
#define QN_E2M1_MIDPOINTS(X)                                                                       \
    X(0.25f, 0) X(0.75f, 1) X(1.25f, 0) X(1.75f, 1) X(2.5f, 0) X(3.5f, 1) X(5.0f, 0)

static inline uint8_t qn_quant_e2m1(float v)
{
    uint8_t sign = (uint8_t)((qn_bits(v) >> 28) & 8u);
    float a = qn_float(qn_bits(v) & 0x7fffffffu);
    int m = 0;
#define QN_E2M1_PAST(t, reached) m += (reached) ? a >= (t) : a > (t);
    QN_E2M1_MIDPOINTS(QN_E2M1_PAST)
#undef QN_E2M1_PAST
    return (uint8_t)(sign | (uint8_t)m);
}

static const float qn_e2m1_magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

static inline float qn_e2m1_to_f32(uint8_t code)
{
    float m = qn_e2m1_magnitudes[code & 7u];
    return (code & 8u) ? -m : m;
}

/* sqrt(FLT_MIN) = 2^-63 exactly: SPEC section 4's tiny-scale bound. */
#define QN_TINY_SCALE 0x1p-63f

/* MX scale (SPEC 2b, Qwix's Outlier Aware Scaling): s = absmax / B with the tiny rule,
 * t = bf16(f32(s * C)) (round to nearest even), scale = t with its mantissa cleared, i.e.
 * 2^floor(log2 t). s >= 2^-63 keeps t normal; absmax / B * C stays below FLT_MAX for both
 * bounds (448, 6) and both constants (< 2), so the result is a positive finite power of two. */
static inline float qn_mx_scale(float absmax, float bound, float c)
{
    float s = absmax / bound;
    if (s < QN_TINY_SCALE) s = 1.0f;
    float t = qn_bf16_to_f32(qn_f32_to_bf16(s * c));
    return qn_float(qn_bits(t) & 0xff800000u);
}

/* nvfp4's effective block scale (SPEC 2b): s_b = e4m3fn(f32(absmax / 6) * g), clipped to
 * +-448 and rounded to nearest even; s_b == 0 becomes 0.125; e_b = f32(s_b / g). */
static inline float qn_nvfp4_block_scale(float absmax, float g)
{
    float sb = qn_fp8_to_f32(qn_quant_e4m3fn((absmax / 6.0f) * g), 3, 7, 0);
    if (sb == 0.0f) sb = 0.125f;
    return sb / g;
}

#endif /* QUANT_NUMERICS_H */
