/* kernels_neon.c -- AArch64 Advanced SIMD (NEON) kernels: absmax/minmax reductions, quantize to
 * int / fp8 / nf4 codes, dequantize of every code kind, bf16/f16 widening, nibble packing, and
 * the microscaling and linear scales.
 * Quantize, the one-pass absmax kernel, the fused MSE search and the error sums (errstats,
 * errstats_codes) are ../driver_body.h compiled on the 4-lane float and 2-lane double primitives
 * defined here, the same body as kernels_avx2.c's. Bit-identical to
 * kernels_generic.c: same IEEE division, same round-half-even, tails run the generic code.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <arm_neon.h>

#include "internal.h"
#include "numerics.h"

/* Lane order and the byte views of code vectors below assume little-endian lanes. */
#if defined(__ARM_BIG_ENDIAN)
#error "kernels_neon.c assumes little-endian AArch64"
#endif

/* b = x * r + z in the reciprocal path (../driver_body.h) must stay two roundings: the Makefile
 * builds with -ffp-contract=off, and GCC's vmulq_f32/vaddq_f32 are plain C operators that would
 * otherwise be fused. */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE uint32x4_t qd_abs_bits(float32x4_t v)
{
    return vandq_u32(vreinterpretq_u32_f32(v), vdupq_n_u32(0x7fffffffu));
}

/* True when every lane of the mask m (lanes all ones or zero) is set: the low halves of the
 * lanes, narrowed into one 64-bit word, are all ones. */
ALWAYS_INLINE bool all_set(uint32x4_t m)
{
    return vget_lane_u64(vreinterpret_u64_u16(vmovn_u32(m)), 0) == UINT64_MAX;
}

/* Prefetches the source of the next row for the 16 values at chunk offset j. */
ALWAYS_INLINE void qd_prefetch(const char *pf, int64_t pf_elem, int64_t j)
{
    if (!pf) return;
    __builtin_prefetch(pf + j * pf_elem, 0, 2);
    if (pf_elem > 4) __builtin_prefetch(pf + j * pf_elem + 64, 0, 2);
}

/* ---- reductions ------------------------------------------------------------------------------ */

/* max |x| bits over x[0..len): abs values of floats order like their bit patterns. */
static uint32_t seg_absmax_bits(const float *x, int64_t len)
{
    uint32x4_t m0 = vdupq_n_u32(0), m1 = m0, m2 = m0, m3 = m0;
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
        m0 = vmaxq_u32(m0, qd_abs_bits(vld1q_f32(x + j)));
        m1 = vmaxq_u32(m1, qd_abs_bits(vld1q_f32(x + j + 4)));
        m2 = vmaxq_u32(m2, qd_abs_bits(vld1q_f32(x + j + 8)));
        m3 = vmaxq_u32(m3, qd_abs_bits(vld1q_f32(x + j + 12)));
    }
    for (; j + 4 <= len; j += 4) m0 = vmaxq_u32(m0, qd_abs_bits(vld1q_f32(x + j)));
    uint32_t m = vmaxvq_u32(vmaxq_u32(vmaxq_u32(m0, m1), vmaxq_u32(m2, m3)));
    for (; j < len; j++) {
        uint32_t a = qn_bits(x[j]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

/* Lane i of the result is the max of the 4 lanes of m[i]: two rounds of pairwise max. */
ALWAYS_INLINE uint32x4_t qd_hmax_groups(const uint32x4_t m[4])
{
    return vpmaxq_u32(vpmaxq_u32(m[0], m[1]), vpmaxq_u32(m[2], m[3]));
}

/* Small tiles that start on a group boundary: 4 column groups at a time, each reduced to one
 * vector, then the 4 vectors reduced together (qd_hmax_groups). Returns the elements handled
 * (whole groups). */
static int64_t absmax_groups4(const float *x, int64_t n, int64_t c0, int64_t tile, float *acc,
                              uint32_t *seen)
{
    int64_t j = 0, g = c0 / tile;
    uint32x4_t worst = vdupq_n_u32(0);
    for (; j + 4 * tile <= n; j += 4 * tile, g += 4) {
        uint32x4_t m[4];
        for (int i = 0; i < 4; i++) {
            const float *xg = x + j + i * tile;
            uint32x4_t a = qd_abs_bits(vld1q_f32(xg));
            for (int64_t k = 4; k < tile; k += 4) a = vmaxq_u32(a, qd_abs_bits(vld1q_f32(xg + k)));
            m[i] = a;
        }
        uint32x4_t h = qd_hmax_groups(m);
        h = vmaxq_u32(h, vreinterpretq_u32_f32(vld1q_f32(acc + g)));
        vst1q_f32(acc + g, vreinterpretq_f32_u32(h));
        worst = vmaxq_u32(worst, h);
    }
    uint32_t w = vmaxvq_u32(worst);
    *seen = w > *seen ? w : *seen;
    return j;
}

static int absmax_neon(const float *x, int64_t n, int64_t c0, int64_t tile, float *acc)
{
    if (tile == 1) {
        uint32x4_t seen = vdupq_n_u32(0);
        int64_t j = 0;
        for (; j + 4 <= n; j += 4) {
            uint32x4_t a = qd_abs_bits(vld1q_f32(x + j));
            uint32x4_t m = vreinterpretq_u32_f32(vld1q_f32(acc + c0 + j));
            vst1q_f32(acc + c0 + j, vreinterpretq_f32_u32(vmaxq_u32(m, a)));
            seen = vmaxq_u32(seen, a);
        }
        int bad = vmaxvq_u32(seen) >= 0x7f800000u;
        return quant_generic_absmax(x + j, n - j, c0 + j, 1, acc) | bad;
    }
    if (tile < 4) return quant_generic_absmax(x, n, c0, tile, acc);
    uint32_t seen = 0;
    int64_t j = 0;
    if (tile % 4 == 0 && tile <= 256 && c0 % tile == 0)
        j = absmax_groups4(x, n, c0, tile, acc, &seen);
    int64_t g = (c0 + j) / tile, end = (g + 1) * tile - c0;
    for (; j < n; g++, end += tile) {
        if (end > n) end = n;
        uint32_t m = seg_absmax_bits(x + j, end - j), prev = qn_bits(acc[g]);
        m = m > prev ? m : prev;
        acc[g] = qn_float(m);
        seen = m > seen ? m : seen;
        j = end;
    }
    return seen >= 0x7f800000u;
}

static int minmax_neon(const float *x, int64_t n, int64_t c0, int64_t tile, float *mn, float *mx)
{
    if (tile == 1) {
        /* one value per group: the generic select (v < lo ? v : lo) lane by lane, so even the
         * sign of a zero matches */
        uint32x4_t seen = vdupq_n_u32(0);
        int64_t j = 0;
        for (; j + 4 <= n; j += 4) {
            float32x4_t v = vld1q_f32(x + j);
            float32x4_t lo = vld1q_f32(mn + c0 + j), hi = vld1q_f32(mx + c0 + j);
            vst1q_f32(mn + c0 + j, vbslq_f32(vcltq_f32(v, lo), v, lo));
            vst1q_f32(mx + c0 + j, vbslq_f32(vcgtq_f32(v, hi), v, hi));
            seen = vmaxq_u32(seen, qd_abs_bits(v));
        }
        int bad = vmaxvq_u32(seen) >= 0x7f800000u;
        return quant_generic_minmax(x + j, n - j, c0 + j, 1, mn, mx) | bad;
    }
    if (tile < 4) return quant_generic_minmax(x, n, c0, tile, mn, mx);
    /* NEON's fmin/fmax propagate NaN where the scalar select ignores it; a NaN makes the chunk
     * bad and its accumulators unused. Zeros may come out with the other sign (calibration
     * canonicalises them), as with AVX2. */
    int bad = 0;
    int64_t g = c0 / tile, end = (g + 1) * tile - c0;
    for (int64_t j = 0; j < n; g++, end += tile) {
        if (end > n) end = n;
        float32x4_t lo = vdupq_n_f32(mn[g]), hi = vdupq_n_f32(mx[g]);
        uint32x4_t seen = vdupq_n_u32(0);
        for (; j + 4 <= end; j += 4) {
            float32x4_t v = vld1q_f32(x + j);
            lo = vminq_f32(v, lo);
            hi = vmaxq_f32(v, hi);
            seen = vmaxq_u32(seen, qd_abs_bits(v));
        }
        mn[g] = vminvq_f32(lo);
        mx[g] = vmaxvq_f32(hi);
        bad |= vmaxvq_u32(seen) >= 0x7f800000u;
        bad |= quant_generic_minmax(x + j, end - j, c0 + j, tile, mn, mx);
        j = end;
    }
    return bad;
}

/* ---- quantize -------------------------------------------------------------------------------- */

/* qn_convert_int on 4 lanes: round half to even, clip, convert. A NaN stays NaN through NEON's
 * fmax/fmin and converts to 0, as the scalar code maps it. */
ALWAYS_INLINE uint32x4_t int_codes(float32x4_t v, float32x4_t qmin, float32x4_t qmax)
{
    float32x4_t r = vminq_f32(vmaxq_f32(vrndnq_f32(v), qmin), qmax);
    return vreinterpretq_u32_s32(vcvtq_s32_f32(r));
}

/* Clip to +-max, then round to nearest even into an fp8 format (M mantissa bits, bias), as
 * qn_quant_e4m3fn / qn_quant_e5m2 do for finite values. After the clip no code overflows. */
ALWAYS_INLINE uint32x4_t fp8_codes(float32x4_t v, float max, int M, int bias)
{
    v = vmaxq_f32(vminq_f32(v, vdupq_n_f32(max)), vdupq_n_f32(-max));
    uint32x4_t bits = vreinterpretq_u32_f32(v);
    uint32x4_t sign = vshrq_n_u32(vandq_u32(bits, vdupq_n_u32(0x80000000u)), 24);
    uint32x4_t abs = vandq_u32(bits, vdupq_n_u32(0x7fffffffu));
    /* normal range: round the float's mantissa to M bits with integer adds (ties to even) */
    const int shift = 23 - M;
    const int32x4_t down = vdupq_n_s32(-shift); /* vshlq by a negative count shifts right */
    uint32x4_t odd = vandq_u32(vshlq_u32(abs, down), vdupq_n_u32(1));
    uint32x4_t rounded = vaddq_u32(vaddq_u32(abs, vdupq_n_u32((1u << (shift - 1)) - 1u)), odd);
    uint32x4_t normal =
        vsubq_u32(vshlq_u32(rounded, down), vdupq_n_u32((uint32_t)(127 - bias) << M));
    /* subnormal range: the code is round(|v| * 2^(bias - 1 + M)) (FCVTNU rounds to even) */
    float32x4_t scaled = vmulq_f32(vreinterpretq_f32_u32(abs),
                                   vdupq_n_f32(qn_float((uint32_t)(127 + bias - 1 + M) << 23)));
    uint32x4_t sub = vcvtnq_u32_f32(scaled);
    uint32x4_t is_sub = vcltq_u32(abs, vdupq_n_u32((uint32_t)(127 + 1 - bias) << 23));
    return vorrq_u32(vbslq_u32(is_sub, sub, normal), sign);
}

/* NF4 index = number of thresholds below v, as a two-level search: two compares pick the
 * quarter q of the 16 levels (thresholds T7, then T3 or T11), three byte-table lookups give that
 * quarter's inner thresholds T[4q], T[4q+1], T[4q+2], and three compares count them. NaN compares
 * false everywhere and gives 0, as the scalar path does. */
ALWAYS_INLINE uint32x4_t nf4_codes(float32x4_t v)
{
    const float *t = qn_nf4_thresholds;
    const float inner[3][4] = {
        {t[0], t[4], t[8], t[12]}, {t[1], t[5], t[9], t[13]}, {t[2], t[6], t[10], t[14]}};
    uint32x4_t m1 = vcgtq_f32(v, vdupq_n_f32(t[7]));
    float32x4_t t2 = vbslq_f32(m1, vdupq_n_f32(t[11]), vdupq_n_f32(t[3]));
    uint32x4_t m2 = vcgtq_f32(v, t2);
    /* byte indices of float q of a 4-float table: 4q + {0, 1, 2, 3}, q = 2 * m1 + m2 */
    uint32x4_t idx =
        vorrq_u32(vandq_u32(m1, vdupq_n_u32(0x08080808u)), vandq_u32(m2, vdupq_n_u32(0x04040404u)));
    uint8x16_t bidx = vreinterpretq_u8_u32(vorrq_u32(idx, vdupq_n_u32(0x03020100u)));
    uint32x4_t cnt = vdupq_n_u32(0);
    for (int i = 0; i < 3; i++) {
        uint8x16_t tab = vreinterpretq_u8_f32(vld1q_f32(inner[i]));
        float32x4_t ti = vreinterpretq_f32_u8(vqtbl1q_u8(tab, bidx));
        cnt = vsubq_u32(cnt, vcgtq_f32(v, ti)); /* a true compare is -1 */
    }
    /* the low byte of each lane of idx is 4q */
    return vaddq_u32(vandq_u32(idx, vdupq_n_u32(0xffu)), cnt);
}

/* e2m1 codes as qn_quant_e2m1: the magnitude code counts the midpoints |v| passes (> for the
 * ties that go down to an even code, >= for those that go up), the sign bit becomes bit 3. NaN
 * compares false everywhere: magnitude 0, as the scalar path. */
ALWAYS_INLINE uint32x4_t e2m1_codes(float32x4_t v)
{
    float32x4_t a = vabsq_f32(v);
    uint32x4_t m = vdupq_n_u32(0);
#define E2M1_PAST(t, reached) /* a true compare is -1 */                                           \
    m = vsubq_u32(m, (reached) ? vcgeq_f32(a, vdupq_n_f32(t)) : vcgtq_f32(a, vdupq_n_f32(t)));
    QN_E2M1_MIDPOINTS(E2M1_PAST)
#undef E2M1_PAST
    uint32x4_t sign = vandq_u32(vshrq_n_u32(vreinterpretq_u32_f32(v), 28), vdupq_n_u32(8u));
    return vorrq_u32(m, sign);
}

ALWAYS_INLINE uint32x4_t qd_codes(quant_kcode kc, float32x4_t v, float32x4_t qmin, float32x4_t qmax)
{
    switch (kc) {
    case QK_E2M1:
        return e2m1_codes(v);
    case QK_E4M3:
        return fp8_codes(v, QN_E4M3_MAX, 3, 7);
    case QK_E5M2:
        return fp8_codes(v, QN_E5M2_MAX, 2, 15);
    case QK_NF4:
        return nf4_codes(v);
    default:
        return int_codes(v, qmin, qmax);
    }
}

/* Narrows 4 x 4 int32 codes to 16 codes of the kind's width (truncating, as the scalar casts
 * do) and stores them; stores go through byte vectors, so dst needs no alignment. */
ALWAYS_INLINE void qd_store_blk(quant_kcode kc, uint8_t *dst, uint32x4_t a, uint32x4_t b,
                                uint32x4_t c, uint32x4_t d)
{
    uint16x8_t ab = vmovn_high_u32(vmovn_u32(a), b), cd = vmovn_high_u32(vmovn_u32(c), d);
    if (kc == QK_I16) {
        vst1q_u8(dst, vreinterpretq_u8_u16(ab));
        vst1q_u8(dst + 16, vreinterpretq_u8_u16(cd));
        return;
    }
    vst1q_u8(dst, vmovn_high_u16(vmovn_u16(ab), cd));
}

ALWAYS_INLINE void qd_store_vec(quant_kcode kc, uint8_t *dst, uint32x4_t a)
{
    uint16x4_t h = vmovn_u32(a);
    if (kc == QK_I16) {
        vst1_u8(dst, vreinterpret_u8_u16(h));
        return;
    }
    uint32_t w = vget_lane_u32(vreinterpret_u32_u8(vmovn_u16(vcombine_u16(h, h))), 0);
    memcpy(dst, &w, sizeof w);
}

/* ---- the shared driver (../driver_body.h) on 4 lanes ---------------------------------------- */

#define QD_W 4
typedef float32x4_t qd_vf;
typedef uint32x4_t qd_vi;
typedef uint32x4_t qd_vm; /* lanes clear of a tie: all ones */
#define qd_load     vld1q_f32
#define qd_store    vst1q_f32
#define qd_set1     vdupq_n_f32
#define qd_bcast    vld1q_dup_f32
#define qd_add      vaddq_f32
#define qd_sub      vsubq_f32
#define qd_mul      vmulq_f32
#define qd_div      vdivq_f32
#define qd_abs      vabsq_f32
#define qd_rint     vrndnq_f32
#define qd_max_bits vmaxq_u32
#define qd_bits_f   vreinterpretq_f32_u32

/* Lane i = p[i / 2]: tile 2, the one power of two below 4 lanes (reads p[0], p[1] only). */
ALWAYS_INLINE qd_vf qd_spread(const float *p, const int64_t tile)
{
    (void)tile;
    float32x2_t v = vld1_f32(p);
    return vcombine_f32(vdup_lane_f32(v, 0), vdup_lane_f32(v, 1));
}

/* NEON's fmax/fmin return NaN for a NaN operand. */
ALWAYS_INLINE qd_vf qd_clip_nan(qd_vf v, qd_vf lo, qd_vf hi)
{
    return vminq_f32(vmaxq_f32(v, lo), hi);
}

ALWAYS_INLINE qd_vm qd_near_none(void)
{
    return vdupq_n_u32(UINT32_MAX);
}

/* Clears the lanes that are not clear of the tie (the ordered d < limit fails on NaN). */
ALWAYS_INLINE qd_vm qd_note(qd_vm acc, qd_vf d, qd_vf limit)
{
    return vandq_u32(acc, vcltq_f32(d, limit));
}

ALWAYS_INLINE bool qd_any(qd_vm acc)
{
    return !all_set(acc);
}

ALWAYS_INLINE qd_vi qd_cvt(qd_vf k)
{
    return vreinterpretq_u32_s32(vcvtq_s32_f32(k));
}

ALWAYS_INLINE qd_vf qd_zp(const int32_t *p)
{
    return vcvtq_f32_s32(vld1q_s32(p));
}

ALWAYS_INLINE qd_vf qd_tiny_one(qd_vf s)
{
    return vbslq_f32(vcltq_f32(s, vdupq_n_f32(QN_TINY_SCALE)), vdupq_n_f32(1.0f), s);
}

/* A byte table lookup: bytes 4i..4i+3 of s into every lane. */
ALWAYS_INLINE qd_vf qd_lane_of(qd_vf s, int64_t i)
{
    uint32x4_t idx = vdupq_n_u32(0x03020100u + 0x04040404u * (uint32_t)i);
    return vreinterpretq_f32_u8(vqtbl1q_u8(vreinterpretq_u8_f32(s), vreinterpretq_u8_u32(idx)));
}

/* FCVTNS rounds half to even as it converts. */
ALWAYS_INLINE qd_vi qd_bounded_codes(qd_vf v, qd_vi qmin, qd_vi qmax)
{
    int32x4_t c = vmaxq_s32(vcvtnq_s32_f32(v), vreinterpretq_s32_u32(qmin));
    return vreinterpretq_u32_s32(vminq_s32(c, vreinterpretq_s32_u32(qmax)));
}

/* quant_mse_int_fn's terms for 4 candidates (the 4 lanes of sv), as mse_lanes8.h computes
 * them for 8: the code by the IEEE division, clipped before the rounding (equal to rounding
 * then clipping, the bounds being integers), code * s in float32, and the float64 term
 * w * (e * e) added to each candidate's sum in element order. */
ALWAYS_INLINE void qd_mse_lanes(const float *x, const float *w, const bool unit, int64_t j,
                                int64_t end, const float *sv, double *av, qd_vf qmin, qd_vf qmax)
{
    const float32x4_t s = vld1q_f32(sv);
    float64x2_t a0 = vld1q_f64(av), a1 = vld1q_f64(av + 2);
    for (int64_t i = j; i < end; i++) {
        float32x4_t v = vminq_f32(vmaxq_f32(vdivq_f32(vdupq_n_f32(x[i]), s), qmin), qmax);
        float32x4_t d = vmulq_f32(vrndnq_f32(v), s);
        float64x2_t xd = vdupq_n_f64((double)x[i]);
        float64x2_t e0 = vsubq_f64(xd, vcvt_f64_f32(vget_low_f32(d)));
        float64x2_t e1 = vsubq_f64(xd, vcvt_high_f64_f32(d));
        e0 = vmulq_f64(e0, e0);
        e1 = vmulq_f64(e1, e1);
        if (!unit) {
            float64x2_t wd = vdupq_n_f64((double)w[i]);
            e0 = vmulq_f64(wd, e0);
            e1 = vmulq_f64(wd, e1);
        }
        a0 = vaddq_f64(a0, e0);
        a1 = vaddq_f64(a1, e1);
    }
    vst1q_f64(av, a0);
    vst1q_f64(av + 2, a1);
}

/* ---- dequantize ------------------------------------------------------------------------------ */

/* fp8 code -> float32 on 4 lanes, the bits of qn_fp8_to_f32: normal codes move their exponent
 * and mantissa into place, subnormal ones are m * 2^(1 - bias - M) (exact), and the top codes are
 * Inf / NaN without payload (e5m2) or NaN for 0x7f (e4m3fn). */
ALWAYS_INLINE float32x4_t fp8_levels(uint32x4_t c, int M, int bias, bool has_inf)
{
    uint32x4_t sign = vshlq_n_u32(vandq_u32(c, vdupq_n_u32(0x80u)), 24);
    uint32x4_t mag = vandq_u32(c, vdupq_n_u32(0x7fu));
    uint32x4_t normal =
        vaddq_u32(vshlq_u32(mag, vdupq_n_s32(23 - M)), vdupq_n_u32((uint32_t)(127 - bias) << 23));
    float32x4_t sub =
        vmulq_f32(vcvtq_f32_u32(mag), vdupq_n_f32(qn_float((uint32_t)(127 + 1 - bias - M) << 23)));
    uint32x4_t is_sub = vcltq_u32(mag, vdupq_n_u32(1u << M));
    uint32x4_t bits = vbslq_u32(is_sub, vreinterpretq_u32_f32(sub), normal);
    if (has_inf) {
        const uint32_t emax = (1u << (7 - M)) - 1u;
        uint32x4_t top = vcgeq_u32(mag, vdupq_n_u32(emax << M));
        uint32x4_t quiet =
            vandq_u32(vtstq_u32(mag, vdupq_n_u32((1u << M) - 1u)), vdupq_n_u32(0x400000u));
        bits = vbslq_u32(top, vorrq_u32(vdupq_n_u32(0x7f800000u), quiet), bits);
    } else {
        uint32x4_t nan = vceqq_u32(mag, vdupq_n_u32(0x7fu));
        bits = vbslq_u32(nan, vdupq_n_u32(0x7fc00000u), bits);
    }
    return vreinterpretq_f32_u32(vorrq_u32(bits, sign));
}

/* NF4 index or e2m1 code (low nibble) -> level, by a 64-byte table lookup: lane i reads bytes
 * 4k..4k+3 of the 16-float table. */
ALWAYS_INLINE float32x4_t nf4_levels(uint32x4_t c, uint8x16x4_t tab)
{
    uint32x4_t k = vandq_u32(c, vdupq_n_u32(15u));
    uint32x4_t idx = vmlaq_n_u32(vdupq_n_u32(0x03020100u), k, 0x04040404u);
    return vreinterpretq_f32_u8(vqtbl4q_u8(tab, vreinterpretq_u8_u32(idx)));
}

/* Levels of 4 codes given as unsigned 32-bit lanes (byte kinds) or int16 lanes widened. */
ALWAYS_INLINE float32x4_t levels4(quant_kcode kc, uint32x4_t c, uint8x16x4_t tab)
{
    switch (kc) {
    case QK_I8:
        return vcvtq_f32_s32(vshrq_n_s32(vshlq_n_s32(vreinterpretq_s32_u32(c), 24), 24));
    case QK_I16:
        return vcvtq_f32_s32(vshrq_n_s32(vshlq_n_s32(vreinterpretq_s32_u32(c), 16), 16));
    case QK_E4M3:
        return fp8_levels(c, 3, 7, false);
    case QK_E5M2:
        return fp8_levels(c, 2, 15, true);
    case QK_NF4:
    case QK_E2M1:
        return nf4_levels(c, tab);
    default:
        return vcvtq_f32_u32(c);
    }
}

/* Codes j..j+3 zero-extended to 32-bit lanes (the sign is restored by levels4). */
ALWAYS_INLINE uint32x4_t load_codes4(quant_kcode kc, const uint8_t *c)
{
    if (kc == QK_I16) return vmovl_u16(vreinterpret_u16_u8(vld1_u8(c)));
    uint32_t w;
    memcpy(&w, c, sizeof w);
    return vmovl_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(w)))));
}

/* (level - z) * s, or level * s without a zero point, as the scalar code computes it. */
ALWAYS_INLINE float32x4_t dequant4(float32x4_t l, float32x4_t s, float32x4_t z, bool asym)
{
    if (asym) l = vsubq_f32(l, z);
    return vmulq_f32(l, s);
}

/* Dequantizes x[0..len) of one column group (scale s, zero point z) in blocks of 16 then 4;
 * returns the count handled. */
ALWAYS_INLINE int64_t dequantize_seg(quant_kcode kc, const uint8_t *codes, int64_t len,
                                     float32x4_t s, float32x4_t z, bool asym, uint8x16x4_t tab,
                                     float *out)
{
    const size_t csize = kc == QK_I16 ? 2 : 1;
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
        uint32x4_t c[4];
        if (kc == QK_I16) {
            uint16x8_t lo = vreinterpretq_u16_u8(vld1q_u8(codes + 2 * j));
            uint16x8_t hi = vreinterpretq_u16_u8(vld1q_u8(codes + 2 * j + 16));
            c[0] = vmovl_u16(vget_low_u16(lo)), c[1] = vmovl_high_u16(lo);
            c[2] = vmovl_u16(vget_low_u16(hi)), c[3] = vmovl_high_u16(hi);
        } else {
            uint8x16_t b = vld1q_u8(codes + j);
            uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_high_u8(b);
            c[0] = vmovl_u16(vget_low_u16(lo)), c[1] = vmovl_high_u16(lo);
            c[2] = vmovl_u16(vget_low_u16(hi)), c[3] = vmovl_high_u16(hi);
        }
        for (int i = 0; i < 4; i++)
            vst1q_f32(out + j + 4 * i, dequant4(levels4(kc, c[i], tab), s, z, asym));
    }
    for (; j + 4 <= len; j += 4)
        vst1q_f32(out + j,
                  dequant4(levels4(kc, load_codes4(kc, codes + j * csize), tab), s, z, asym));
    return j;
}

ALWAYS_INLINE void dequantize_kc(quant_kcode kc, const quant_krow *r, const uint8_t *codes,
                                 int64_t n, int64_t c0, float *out)
{
    const size_t csize = kc == QK_I16 ? 2 : 1;
    uint8x16x4_t tab = {{vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0)}};
    if (kc == QK_NF4 || kc == QK_E2M1)
        for (int i = 0; i < 4; i++)
            tab.val[i] = vreinterpretq_u8_f32(
                vld1q_f32((kc == QK_NF4 ? quant_nf4_levels : quant_e2m1_levels) + 4 * i));
    if (r->tile == 1) {
        int64_t j = 0;
        for (; j + 4 <= n; j += 4) {
            float32x4_t l = levels4(kc, load_codes4(kc, codes + j * csize), tab);
            float32x4_t z = r->zp ? vcvtq_f32_s32(vld1q_s32(r->zp + c0 + j)) : vdupq_n_f32(0);
            vst1q_f32(out + j, dequant4(l, vld1q_f32(r->scale + c0 + j), z, r->zp != NULL));
        }
        quant_generic_dequantize(r, codes + j * csize, n - j, c0 + j, out + j);
        return;
    }
    int64_t g = c0 / r->tile, end = (g + 1) * r->tile - c0;
    for (int64_t j = 0; j < n; g++, end += r->tile) {
        if (end > n) end = n;
        float32x4_t s = vdupq_n_f32(r->scale[g]);
        float32x4_t z = vdupq_n_f32(r->zp ? (float)r->zp[g] : 0.0f);
        if (r->zp)
            j += dequantize_seg(kc, codes + j * csize, end - j, s, z, true, tab, out + j);
        else
            j += dequantize_seg(kc, codes + j * csize, end - j, s, z, false, tab, out + j);
        quant_generic_dequantize(r, codes + j * csize, end - j, c0 + j, out + j);
        j = end;
    }
}

static void dequantize_neon(const quant_krow *r, const void *codes, int64_t n, int64_t c0,
                            float *out)
{
    switch (r->kcode) {
    case QK_I8:
        dequantize_kc(QK_I8, r, codes, n, c0, out);
        break;
    case QK_U8:
        dequantize_kc(QK_U8, r, codes, n, c0, out);
        break;
    case QK_I16:
        dequantize_kc(QK_I16, r, codes, n, c0, out);
        break;
    case QK_E4M3:
        dequantize_kc(QK_E4M3, r, codes, n, c0, out);
        break;
    case QK_E5M2:
        dequantize_kc(QK_E5M2, r, codes, n, c0, out);
        break;
    case QK_NF4:
        dequantize_kc(QK_NF4, r, codes, n, c0, out);
        break;
    case QK_E2M1:
        dequantize_kc(QK_E2M1, r, codes, n, c0, out);
        break;
    default:
        quant_generic_dequantize(r, codes, n, c0, out);
        break;
    }
}

/* ---- widening -------------------------------------------------------------------------------- */

static void widen_bf16_neon(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t v = vld1q_u16(src + i);
        vst1q_f32(dst + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(v), 16)));
        vst1q_f32(dst + i + 4, vreinterpretq_f32_u32(vshll_high_n_u16(v, 16)));
    }
    for (; i < n; i++) dst[i] = qn_bf16_to_f32(src[i]);
}

/* FCVT keeps a NaN's payload and quiets it (FPCR.DN is clear under Linux), as qn_f16_to_f32
 * does; subnormal halves widen exactly. */
static void widen_f16_neon(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(src + i));
        vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
        vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
    }
    for (; i < n; i++) dst[i] = qn_f16_to_f32(src[i]);
}

/* ---- packing -------------------------------------------------------------------------------- */

/* 32 codes -> 16 bytes: a de-interleaving load splits even and odd codes, then shift-left-and-
 * insert puts each odd code above the low nibble of its even neighbour. */
static void pack_neon(const uint8_t *codes, int64_t n, uint8_t *packed)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint8x16x2_t v = vld2q_u8(codes + i);
        vst1q_u8(packed + i / 2, vsliq_n_u8(v.val[0], v.val[1], 4));
    }
    quant_pack_nibbles(codes + i, 1, n - i, packed + i / 2);
}

/* MSE search terms (SPEC 9), two elements per vector, each the exact float64 formula. */
static void mse_terms_neon(const float *x, const float *d, const float *w, int64_t n, double *t)
{
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
        float64x2_t e = vsubq_f64(vcvt_f64_f32(vld1_f32(x + j)), vcvt_f64_f32(vld1_f32(d + j)));
        float64x2_t sq = vmulq_f64(e, e);
        vst1q_f64(t + j, vmulq_f64(vcvt_f64_f32(vld1_f32(w + j)), sq));
    }
    quant_generic_mse_terms(x + j, d + j, w + j, n - j, t + j);
}

static void mse_acc_neon(const float *x, const float *d, int64_t ds, int nk, const float *w,
                         int64_t n, int64_t c0, int64_t tile, double *err, int64_t es)
{
    quant_mse_acc_with(mse_terms_neon, x, d, ds, nk, w, n, c0, tile, err, es);
}

/* ---- the error sums of ../driver_body.h: 8 double lanes as four float64x2_t ---------------- */

typedef float64x2_t qd_vd;
#define qd_d_store  vst1q_f64
#define qd_d_add    vaddq_f64
#define qd_d_sub    vsubq_f64
#define qd_d_mul    vmulq_f64
#define qd_d_abs    vabsq_f64
#define qd_d_zero() vdupq_n_f64(0.0)
#define qd_d_hi     vcvt_high_f64_f32
#define qd_pick     vbslq_f32

/* a > b ? a : b by a compare and select: vmaxq_f64 would return a NaN operand. */
ALWAYS_INLINE qd_vd qd_d_max(qd_vd a, qd_vd b)
{
    return vbslq_f64(vcgtq_f64(a, b), a, b);
}

ALWAYS_INLINE qd_vd qd_d_lo(qd_vf v)
{
    return vcvt_f64_f32(vget_low_f32(v));
}

ALWAYS_INLINE qd_vm qd_lanes_below(int64_t k)
{
    const uint32_t lane[4] = {0, 1, 2, 3};
    return vcltq_u32(vld1q_u32(lane), vdupq_n_u32((uint32_t)k));
}

/* Levels of 4 integer codes, as dequantize_kc reads them (no table: integer kinds only). */
ALWAYS_INLINE qd_vf qd_int_levels(quant_kcode kc, const uint8_t *c)
{
    const uint8x16x4_t none = {{vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0)}};
    return levels4(kc, load_codes4(kc, c), none);
}

/* The 4 source values at j as float32: bf16 widened as widen_bf16_neon does, or f32. */
ALWAYS_INLINE qd_vf qd_src(const void *x, bool bf16, int64_t j)
{
    if (!bf16) return vld1q_f32((const float *)x + j);
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)x + j), 16));
}

/* The driver, compiled here: its error sums need levels4 and load_codes4 above. */
#include "../driver_body.h"

/* ---- scales ---------------------------------------------------------------------------------- */

/* Some lane of a is negative, NaN or infinite (its bits, unsigned, above FLT_MAX's). */
ALWAYS_INLINE bool any_unusual(float32x4_t a)
{
    return vmaxvq_u32(vreinterpretq_u32_f32(a)) > 0x7f7fffffu;
}

/* qn_mx_scale per lane (a >= 0 and finite): s = a / B, the tiny rule, bf16(s * C) rounded to
 * nearest even by integer adds (s * C is finite and positive), then the exponent alone: the
 * bf16 truncation and the mantissa clear are one mask. */
ALWAYS_INLINE float32x4_t mx_scale4(float32x4_t a, float bound, float c)
{
    float32x4_t s = qd_tiny_one(vdivq_f32(a, vdupq_n_f32(bound)));
    uint32x4_t b = vreinterpretq_u32_f32(vmulq_f32(s, vdupq_n_f32(c)));
    uint32x4_t odd = vandq_u32(vshrq_n_u32(b, 16), vdupq_n_u32(1u));
    b = vaddq_u32(b, vaddq_u32(odd, vdupq_n_u32(0x7fffu)));
    return vreinterpretq_f32_u32(vandq_u32(b, vdupq_n_u32(0xff800000u)));
}

/* qn_nvfp4_block_scale per lane (a >= 0 and finite): the e4m3fn code of f32(a / 6) * g by
 * fp8_codes (clip, round to nearest even), its value by fp8_levels, 0 -> 0.125, then / g. */
ALWAYS_INLINE float32x4_t nvfp4_scale4(float32x4_t a, float32x4_t g)
{
    float32x4_t v = vmulq_f32(vdivq_f32(a, vdupq_n_f32(6.0f)), g);
    float32x4_t sb = fp8_levels(fp8_codes(v, QN_E4M3_MAX, 3, 7), 3, 7, false);
    sb = vbslq_f32(vceqq_f32(sb, vdupq_n_f32(0.0f)), vdupq_n_f32(0.125f), sb);
    return vdivq_f32(sb, g);
}

static int mx_scales_neon(const float *absmax, int64_t n, float bound, float c, float *scale)
{
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        float32x4_t a = vld1q_f32(absmax + j);
        if (any_unusual(a)) return 1;
        vst1q_f32(scale + j, mx_scale4(a, bound, c));
    }
    for (; j < n; j++) {
        if (qn_bits(absmax[j]) > 0x7f7fffffu) return 1;
        scale[j] = qn_mx_scale(absmax[j], bound, c);
    }
    return 0;
}

static int nvfp4_scales_neon(const float *absmax, int64_t n, float g, float *scale)
{
    const float32x4_t gv = vdupq_n_f32(g);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        float32x4_t a = vld1q_f32(absmax + j);
        if (any_unusual(a)) return 1;
        vst1q_f32(scale + j, nvfp4_scale4(a, gv));
    }
    for (; j < n; j++) {
        if (qn_bits(absmax[j]) > 0x7f7fffffu) return 1;
        scale[j] = qn_nvfp4_block_scale(absmax[j], g);
    }
    return 0;
}

/* quant_generic_lin_scales, 4 lanes at a time: the same IEEE division and tiny rule; a result
 * that is not finite (NaN, or above FLT_MAX) makes it return nonzero. */
static int lin_scales_neon(const float *absmax, int64_t n, float bound, float *scale)
{
    uint32x4_t ok = vdupq_n_u32(~0u);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        float32x4_t s = qd_tiny_one(vdivq_f32(vld1q_f32(absmax + j), vdupq_n_f32(bound)));
        ok = vandq_u32(ok, vcleq_f32(s, vdupq_n_f32(FLT_MAX))); /* NaN compares false */
        vst1q_f32(scale + j, s);
    }
    int tail = quant_generic_lin_scales(absmax + j, n - j, bound, scale + j);
    return tail || vminvq_u32(ok) == 0;
}

const quant_kernels quant_kernels_neon = {
    .isa = QUANT_ISA_NEON,
    .absmax = absmax_neon,
    .minmax = minmax_neon,
    .quantize = qd_quantize,
    .dequantize = dequantize_neon,
    .widen_bf16 = widen_bf16_neon,
    .widen_f16 = widen_f16_neon,
    .pack = pack_neon,
    .errstats = qd_errstats,
    .mx_scales = mx_scales_neon,
    .nvfp4_scales = nvfp4_scales_neon,
    .lin_scales = lin_scales_neon,
    .mse_acc = mse_acc_neon,
    .quantize_absmax = qd_quantize_absmax,
    .mse_int = qd_mse_int,
    .errstats_codes = qd_errstats_codes,
};
