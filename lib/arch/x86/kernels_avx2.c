/* kernels_avx2.c -- AVX2 + FMA + F16C kernels: absmax/minmax reductions, the code kinds (int,
 * fp8, nf4, e2m1) and the 8-lane primitives (float, and double for the error sums) on which
 * ../driver_body.h builds quantize, the one-pass absmax kernel, the fused MSE search and the
 * error sums (errstats, errstats_codes); dequantize of integer codes, bf16/f16 widening,
 * packing, microscaling and linear scales. Bit-identical to kernels_generic.c: same IEEE
 * division, same round-half-even, tails run the generic code.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <float.h>
#include <immintrin.h>

#include "internal.h"
#include "numerics.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE __m256i qd_abs_bits(__m256 v)
{
    return _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff));
}

ALWAYS_INLINE uint32_t hmax_epi32(__m256i v)
{
    __m128i m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0x4e));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0xb1));
    return (uint32_t)_mm_cvtsi128_si32(m);
}

ALWAYS_INLINE float hmin_ps(__m256 v)
{
    __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_min_ps(m, _mm_shuffle_ps(m, m, 0x4e));
    m = _mm_min_ps(m, _mm_shuffle_ps(m, m, 0xb1));
    return _mm_cvtss_f32(m);
}

ALWAYS_INLINE float hmax_ps(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 0x4e));
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 0xb1));
    return _mm_cvtss_f32(m);
}

/* Prefetches the source of the next row for the 32 values at chunk offset j. */
ALWAYS_INLINE void qd_prefetch(const char *pf, int64_t pf_elem, int64_t j)
{
    if (!pf) return;
    _mm_prefetch(pf + j * pf_elem, _MM_HINT_T1);
    if (pf_elem > 2) _mm_prefetch(pf + j * pf_elem + 64, _MM_HINT_T1);
}

/* ---- reductions ------------------------------------------------------------------------------ */

/* max |x| bits over x[0..len): abs values of floats order like their bit patterns. */
static uint32_t seg_absmax_bits(const float *x, int64_t len)
{
    __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
    int64_t j = 0;
    for (; j + 32 <= len; j += 32) {
        m0 = _mm256_max_epi32(m0, qd_abs_bits(_mm256_loadu_ps(x + j)));
        m1 = _mm256_max_epi32(m1, qd_abs_bits(_mm256_loadu_ps(x + j + 8)));
        m2 = _mm256_max_epi32(m2, qd_abs_bits(_mm256_loadu_ps(x + j + 16)));
        m3 = _mm256_max_epi32(m3, qd_abs_bits(_mm256_loadu_ps(x + j + 24)));
    }
    for (; j + 8 <= len; j += 8) m0 = _mm256_max_epi32(m0, qd_abs_bits(_mm256_loadu_ps(x + j)));
    uint32_t m = hmax_epi32(_mm256_max_epi32(_mm256_max_epi32(m0, m1), _mm256_max_epi32(m2, m3)));
    for (; j < len; j++) {
        uint32_t a = qn_bits(x[j]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

/* Lane i of the result is the max of the 8 lanes of v[i] (a transposing reduction). */
ALWAYS_INLINE __m256i qd_hmax_groups(const __m256i v[8])
{
    __m256i a0 =
        _mm256_max_epi32(_mm256_unpacklo_epi32(v[0], v[1]), _mm256_unpackhi_epi32(v[0], v[1]));
    __m256i a1 =
        _mm256_max_epi32(_mm256_unpacklo_epi32(v[2], v[3]), _mm256_unpackhi_epi32(v[2], v[3]));
    __m256i a2 =
        _mm256_max_epi32(_mm256_unpacklo_epi32(v[4], v[5]), _mm256_unpackhi_epi32(v[4], v[5]));
    __m256i a3 =
        _mm256_max_epi32(_mm256_unpacklo_epi32(v[6], v[7]), _mm256_unpackhi_epi32(v[6], v[7]));
    __m256i b0 = _mm256_max_epi32(_mm256_unpacklo_epi64(a0, a1), _mm256_unpackhi_epi64(a0, a1));
    __m256i b1 = _mm256_max_epi32(_mm256_unpacklo_epi64(a2, a3), _mm256_unpackhi_epi64(a2, a3));
    return _mm256_max_epi32(_mm256_permute2x128_si256(b0, b1, 0x20),
                            _mm256_permute2x128_si256(b0, b1, 0x31));
}

/* Small tiles that start on a group boundary: 8 column groups at a time, each reduced to one
 * vector, then the 8 vectors reduced together. Returns the elements handled (whole groups). */
static int64_t absmax_groups8(const float *x, int64_t n, int64_t c0, int64_t tile, float *acc,
                              uint32_t *seen)
{
    int64_t j = 0, g = c0 / tile;
    __m256i worst = _mm256_setzero_si256();
    for (; j + 8 * tile <= n; j += 8 * tile, g += 8) {
        __m256i m[8];
        for (int i = 0; i < 8; i++) {
            const float *xg = x + j + i * tile;
            __m256i a = qd_abs_bits(_mm256_loadu_ps(xg));
            for (int64_t k = 8; k < tile; k += 8)
                a = _mm256_max_epi32(a, qd_abs_bits(_mm256_loadu_ps(xg + k)));
            m[i] = a;
        }
        __m256i h =
            _mm256_max_epi32(qd_hmax_groups(m), _mm256_loadu_si256((const __m256i *)(acc + g)));
        _mm256_storeu_si256((__m256i *)(acc + g), h);
        worst = _mm256_max_epi32(worst, h);
    }
    uint32_t w = hmax_epi32(worst);
    *seen = w > *seen ? w : *seen;
    return j;
}

static int absmax_avx2(const float *x, int64_t n, int64_t c0, int64_t tile, float *acc)
{
    if (tile == 1) {
        __m256i seen = _mm256_setzero_si256();
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256i a = qd_abs_bits(_mm256_loadu_ps(x + j));
            __m256i m = _mm256_loadu_si256((const __m256i *)(acc + c0 + j));
            m = _mm256_max_epi32(m, a); /* accumulators hold non-negative floats: bits order */
            _mm256_storeu_si256((__m256i *)(acc + c0 + j), m);
            seen = _mm256_max_epi32(seen, m);
        }
        int bad = hmax_epi32(seen) >= 0x7f800000u;
        return quant_generic_absmax(x + j, n - j, c0 + j, 1, acc) | bad;
    }
    if (tile < 8) return quant_generic_absmax(x, n, c0, tile, acc);
    uint32_t seen = 0;
    int64_t j = 0;
    if (tile % 8 == 0 && tile <= 256 && c0 % tile == 0)
        j = absmax_groups8(x, n, c0, tile, acc, &seen);
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

static int minmax_avx2(const float *x, int64_t n, int64_t c0, int64_t tile, float *mn, float *mx)
{
    if (tile == 1) {
        __m256i seen = _mm256_setzero_si256();
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256 v = _mm256_loadu_ps(x + j);
            _mm256_storeu_ps(mn + c0 + j, _mm256_min_ps(v, _mm256_loadu_ps(mn + c0 + j)));
            _mm256_storeu_ps(mx + c0 + j, _mm256_max_ps(v, _mm256_loadu_ps(mx + c0 + j)));
            seen = _mm256_max_epi32(seen, qd_abs_bits(v));
        }
        int bad = hmax_epi32(seen) >= 0x7f800000u;
        return quant_generic_minmax(x + j, n - j, c0 + j, 1, mn, mx) | bad;
    }
    if (tile < 8) return quant_generic_minmax(x, n, c0, tile, mn, mx);
    int bad = 0;
    int64_t g = c0 / tile, end = (g + 1) * tile - c0;
    for (int64_t j = 0; j < n; g++, end += tile) {
        if (end > n) end = n;
        __m256 lo = _mm256_set1_ps(mn[g]), hi = _mm256_set1_ps(mx[g]);
        __m256i seen = _mm256_setzero_si256();
        for (; j + 8 <= end; j += 8) {
            __m256 v = _mm256_loadu_ps(x + j);
            lo = _mm256_min_ps(v, lo);
            hi = _mm256_max_ps(v, hi);
            seen = _mm256_max_epi32(seen, qd_abs_bits(v));
        }
        mn[g] = hmin_ps(lo);
        mx[g] = hmax_ps(hi);
        bad |= hmax_epi32(seen) >= 0x7f800000u;
        bad |= quant_generic_minmax(x + j, end - j, c0 + j, tile, mn, mx);
        j = end;
    }
    return bad;
}

/* ---- quantize -------------------------------------------------------------------------------- */

ALWAYS_INLINE __m256i int_codes(__m256 v, __m256 qmin, __m256 qmax)
{
    __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(_mm256_max_ps(r, qmin), qmax);
    return _mm256_cvttps_epi32(r);
}

/* Clip to +-max, then round to nearest even into an fp8 format (M mantissa bits, bias). */
ALWAYS_INLINE __m256i fp8_codes(__m256 v, float max, int M, int bias)
{
    v = _mm256_min_ps(v, _mm256_set1_ps(max));
    v = _mm256_max_ps(v, _mm256_set1_ps(-max));
    __m256i bits = _mm256_castps_si256(v);
    __m256i sign =
        _mm256_srli_epi32(_mm256_and_si256(bits, _mm256_set1_epi32((int)0x80000000u)), 24);
    __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const int shift = 23 - M;
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(abs, shift), _mm256_set1_epi32(1));
    __m256i rounded =
        _mm256_add_epi32(_mm256_add_epi32(abs, _mm256_set1_epi32((1 << (shift - 1)) - 1)), odd);
    __m256i normal =
        _mm256_sub_epi32(_mm256_srli_epi32(rounded, shift), _mm256_set1_epi32((127 - bias) << M));
    __m256 scaled =
        _mm256_mul_ps(_mm256_castsi256_ps(abs),
                      _mm256_castsi256_ps(_mm256_set1_epi32((127 + bias - 1 + M) << 23)));
    __m256i sub =
        _mm256_cvttps_epi32(_mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32((127 + 1 - bias) << 23), abs);
    return _mm256_or_si256(_mm256_blendv_epi8(normal, sub, is_sub), sign);
}

/* NF4 index = number of thresholds below v, as a two-level search: two compares pick the
 * quarter q of the 16 levels (thresholds T7, then T3 or T11), three table lookups give that
 * quarter's inner thresholds T[4q], T[4q+1], T[4q+2], and three compares count them. NaN compares
 * false everywhere and gives 0, as the scalar path does. */
ALWAYS_INLINE __m256i nf4_codes(__m256 v)
{
    const float *t = qn_nf4_thresholds;
    __m256 m1 = _mm256_cmp_ps(v, _mm256_set1_ps(t[7]), _CMP_GT_OQ);
    __m256 t2 = _mm256_blendv_ps(_mm256_set1_ps(t[3]), _mm256_set1_ps(t[11]), m1);
    __m256 m2 = _mm256_cmp_ps(v, t2, _CMP_GT_OQ);
    __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(m1), _mm256_set1_epi32(2)),
                                _mm256_and_si256(_mm256_castps_si256(m2), _mm256_set1_epi32(1)));
    const __m256 tab0 = _mm256_setr_ps(t[0], t[4], t[8], t[12], 0, 0, 0, 0);
    const __m256 tab1 = _mm256_setr_ps(t[1], t[5], t[9], t[13], 0, 0, 0, 0);
    const __m256 tab2 = _mm256_setr_ps(t[2], t[6], t[10], t[14], 0, 0, 0, 0);
    __m256i c0 =
        _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_permutevar8x32_ps(tab0, q), _CMP_GT_OQ));
    __m256i c1 =
        _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_permutevar8x32_ps(tab1, q), _CMP_GT_OQ));
    __m256i c2 =
        _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_permutevar8x32_ps(tab2, q), _CMP_GT_OQ));
    /* each true compare is -1 */
    return _mm256_sub_epi32(_mm256_slli_epi32(q, 2),
                            _mm256_add_epi32(_mm256_add_epi32(c0, c1), c2));
}

/* e2m1 codes as qn_quant_e2m1: the magnitude code counts the midpoints |v| passes (> for the
 * ties that go down to an even code, >= for those that go up), the sign bit becomes bit 3. NaN
 * compares false everywhere: magnitude 0, as the scalar path. */
ALWAYS_INLINE __m256i e2m1_codes(__m256 v)
{
    __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    __m256i m = _mm256_setzero_si256();
#define E2M1_PAST(t, reached) /* each true compare is -1 */                                        \
    m = _mm256_sub_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(                                     \
                                a, _mm256_set1_ps(t), (reached) ? _CMP_GE_OQ : _CMP_GT_OQ)));
    QN_E2M1_MIDPOINTS(E2M1_PAST)
#undef E2M1_PAST
    __m256i sign =
        _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 28), _mm256_set1_epi32(8));
    return _mm256_or_si256(m, sign);
}

ALWAYS_INLINE __m256i qd_codes(quant_kcode kc, __m256 v, __m256 qmin, __m256 qmax)
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

/* Narrows 4 x 8 int32 codes to 32 codes of the kind's width and stores them. */
ALWAYS_INLINE void qd_store_blk(quant_kcode kc, void *dst, __m256i a, __m256i b, __m256i c,
                                __m256i d)
{
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    if (kc == QK_I16) {
        _mm256_storeu_si256((__m256i *)dst, _mm256_permute4x64_epi64(ab, 0xd8));
        _mm256_storeu_si256((__m256i *)dst + 1, _mm256_permute4x64_epi64(cd, 0xd8));
        return;
    }
    __m256i bytes = kc == QK_I8 ? _mm256_packs_epi16(ab, cd) : _mm256_packus_epi16(ab, cd);
    bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)dst, bytes);
}

ALWAYS_INLINE void qd_store_vec(quant_kcode kc, void *dst, __m256i a)
{
    __m256i ab = _mm256_packs_epi32(a, a);
    if (kc == QK_I16) {
        _mm_storeu_si128((__m128i *)dst,
                         _mm256_castsi256_si128(_mm256_permute4x64_epi64(ab, 0xd8)));
        return;
    }
    __m256i bytes = kc == QK_I8 ? _mm256_packs_epi16(ab, ab) : _mm256_packus_epi16(ab, ab);
    bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm_storel_epi64((__m128i *)dst, _mm256_castsi256_si128(bytes));
}

/* ---- the shared driver (../driver_body.h) on 8 lanes ---------------------------------------- */

#define QD_W 8
typedef __m256 qd_vf;
typedef __m256i qd_vi;
typedef __m256 qd_vm; /* near lanes: all ones */
#define qd_load      _mm256_loadu_ps
#define qd_store     _mm256_storeu_ps
#define qd_set1      _mm256_set1_ps
#define qd_bcast     _mm256_broadcast_ss
#define qd_add       _mm256_add_ps
#define qd_sub       _mm256_sub_ps
#define qd_mul       _mm256_mul_ps
#define qd_div       _mm256_div_ps
#define qd_near_none _mm256_setzero_ps
#define qd_cvt       _mm256_cvttps_epi32
#define qd_max_bits  _mm256_max_epi32
#define qd_bits_f    _mm256_castsi256_ps

ALWAYS_INLINE qd_vf qd_abs(qd_vf a)
{
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a);
}

/* Lane i = p[i / tile] (tile 2 or 4), reading the 8 / tile values only. */
ALWAYS_INLINE qd_vf qd_spread(const float *p, const int64_t tile)
{
    __m128 v = tile == 2 ? _mm_loadu_ps(p) : _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)p));
    __m256i idx = _mm256_srlv_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                    _mm256_set1_epi32(tile == 2 ? 1 : 2));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), idx);
}

/* maxps / minps return their second operand when either is NaN: v second keeps a NaN. */
ALWAYS_INLINE qd_vf qd_clip_nan(qd_vf v, qd_vf lo, qd_vf hi)
{
    return _mm256_min_ps(hi, _mm256_max_ps(lo, v));
}

ALWAYS_INLINE qd_vf qd_rint(qd_vf v)
{
    return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

ALWAYS_INLINE qd_vm qd_note(qd_vm acc, qd_vf d, qd_vf limit)
{
    return _mm256_or_ps(acc, _mm256_cmp_ps(d, limit, _CMP_NLT_UQ));
}

ALWAYS_INLINE bool qd_any(qd_vm acc)
{
    return !_mm256_testz_ps(acc, acc);
}

ALWAYS_INLINE qd_vf qd_zp(const int32_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)p));
}

ALWAYS_INLINE qd_vf qd_tiny_one(qd_vf s)
{
    return _mm256_blendv_ps(s, _mm256_set1_ps(1.0f),
                            _mm256_cmp_ps(s, _mm256_set1_ps(QN_TINY_SCALE), _CMP_LT_OQ));
}

ALWAYS_INLINE qd_vf qd_lane_of(qd_vf s, int64_t i)
{
    return _mm256_permutevar8x32_ps(s, _mm256_set1_epi32((int)i));
}

/* Clipped as integers after the conversion: off the floating-point pipes the division and the
 * rounding use (a clip in floats costs the one-pass kernel about 10% on Zen 4). */
ALWAYS_INLINE qd_vi qd_bounded_codes(qd_vf v, qd_vi qmin, qd_vi qmax)
{
    return _mm256_min_epi32(_mm256_max_epi32(_mm256_cvttps_epi32(qd_rint(v)), qmin), qmax);
}

/* quant_mse_int_fn's 8 candidates (mse_lanes8.h, shared with kernels_avx512.c). */
#include "mse_lanes8.h"

ALWAYS_INLINE void qd_mse_lanes(const float *x, const float *w, const bool unit, int64_t j,
                                int64_t end, const float *sv, double *av, qd_vf qmin, qd_vf qmax)
{
    __m256d a0 = _mm256_loadu_pd(av), a1 = _mm256_loadu_pd(av + 4);
    mse_int8(x, w, unit, j, end, _mm256_loadu_ps(sv), qmin, qmax, &a0, &a1);
    _mm256_storeu_pd(av, a0);
    _mm256_storeu_pd(av + 4, a1);
}

/* ---- dequantize ------------------------------------------------------------------------------ */

ALWAYS_INLINE __m256 int_levels(quant_kcode kc, const uint8_t *c)
{
    __m256i v;
    if (kc == QK_I16)
        v = _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)c));
    else if (kc == QK_I8)
        v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)c));
    else
        v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)c));
    return _mm256_cvtepi32_ps(v);
}

ALWAYS_INLINE void dequantize_kc(quant_kcode kc, const quant_krow *r, const uint8_t *codes,
                                 int64_t n, int64_t c0, float *out)
{
    size_t csize = kc == QK_I16 ? 2 : 1;
    if (r->tile == 1) {
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256 l = int_levels(kc, codes + j * csize);
            if (r->zp)
                l = _mm256_sub_ps(
                    l, _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(r->zp + c0 + j))));
            _mm256_storeu_ps(out + j, _mm256_mul_ps(l, _mm256_loadu_ps(r->scale + c0 + j)));
        }
        quant_generic_dequantize(r, codes + j * csize, n - j, c0 + j, out + j);
        return;
    }
    int64_t g = c0 / r->tile, end = (g + 1) * r->tile - c0;
    for (int64_t j = 0; j < n; g++, end += r->tile) {
        if (end > n) end = n;
        __m256 s = _mm256_set1_ps(r->scale[g]);
        __m256 z = _mm256_set1_ps(r->zp ? (float)r->zp[g] : 0.0f);
        for (; j + 8 <= end; j += 8) {
            __m256 l = int_levels(kc, codes + j * csize);
            if (r->zp) l = _mm256_sub_ps(l, z);
            _mm256_storeu_ps(out + j, _mm256_mul_ps(l, s));
        }
        quant_generic_dequantize(r, codes + j * csize, end - j, c0 + j, out + j);
        j = end;
    }
}

static void dequantize_avx2(const quant_krow *r, const void *codes, int64_t n, int64_t c0,
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
    default:
        quant_generic_dequantize(r, codes, n, c0, out);
        break;
    }
}

/* ---- widening -------------------------------------------------------------------------------- */

static void widen_bf16_avx2(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    for (; i < n; i++) dst[i] = qn_bf16_to_f32(src[i]);
}

static void widen_f16_avx2(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = qn_f16_to_f32(src[i]);
}

/* ---- packing -------------------------------------------------------------------------------- */

/* 32 codes -> 16 bytes: low nibble of code 2i, plus code 2i+1 times 16, summed by maddubs. */
static void pack_avx2(const uint8_t *codes, int64_t n, uint8_t *packed)
{
    const __m256i nib = _mm256_set1_epi8(0x0f), weights = _mm256_set1_epi16(0x1001);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i v = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(codes + i)), nib);
        __m256i w = _mm256_maddubs_epi16(v, weights); /* lo + 16 * hi per 16-bit lane */
        __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storeu_si128((__m128i *)(packed + i / 2), b);
    }
    quant_pack_nibbles(codes + i, 1, n - i, packed + i / 2);
}

/* ---- the error sums of ../driver_body.h: 8 double lanes as two __m256d --------------------- */

typedef __m256d qd_vd;
#define qd_d_zero  _mm256_setzero_pd
#define qd_d_store _mm256_storeu_pd
#define qd_d_add   _mm256_add_pd
#define qd_d_sub   _mm256_sub_pd
#define qd_d_mul   _mm256_mul_pd
/* maxpd returns its second operand unless the first is greater: a > b ? a : b, NaN included. */
#define qd_d_max      _mm256_max_pd
#define qd_int_levels int_levels

ALWAYS_INLINE qd_vd qd_d_abs(qd_vd a)
{
    return _mm256_andnot_pd(_mm256_set1_pd(-0.0), a);
}

ALWAYS_INLINE qd_vd qd_d_lo(qd_vf v)
{
    return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}

ALWAYS_INLINE qd_vd qd_d_hi(qd_vf v)
{
    return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}

ALWAYS_INLINE qd_vm qd_lanes_below(int64_t k)
{
    return _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

ALWAYS_INLINE qd_vf qd_pick(qd_vm m, qd_vf a, qd_vf b)
{
    return _mm256_blendv_ps(b, a, m);
}

/* The 8 source values at j as float32: bf16 widened as widen_bf16_avx2 does, or f32. */
ALWAYS_INLINE qd_vf qd_src(const void *x, bool bf16, int64_t j)
{
    if (!bf16) return _mm256_loadu_ps((const float *)x + j);
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)x + j)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* The driver, compiled here: its error sums need int_levels above. */
#include "../driver_body.h"

/* ---- microscaling scales --------------------------------------------------------------------- */

/* Some lane of a holds a negative, NaN or infinite value (bits above FLT_MAX's, unsigned). */
ALWAYS_INLINE bool any_unusual(__m256 a)
{
    __m256i b = _mm256_castps_si256(a);
    __m256i big = _mm256_or_si256(_mm256_cmpgt_epi32(b, _mm256_set1_epi32(0x7f7fffff)),
                                  _mm256_cmpgt_epi32(_mm256_setzero_si256(), b));
    return !_mm256_testz_si256(big, big);
}

/* qn_mx_scale per lane (see kernels_avx512.c). */
ALWAYS_INLINE __m256 mx_scale8(__m256 a, float bound, float c)
{
    __m256 s = _mm256_div_ps(a, _mm256_set1_ps(bound));
    s = qd_tiny_one(s);
    __m256i b = _mm256_castps_si256(_mm256_mul_ps(s, _mm256_set1_ps(c)));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    b = _mm256_add_epi32(b, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    return _mm256_castsi256_ps(_mm256_and_si256(b, _mm256_set1_epi32((int)0xff800000u)));
}

/* qn_nvfp4_block_scale per lane: the e4m3fn code of f32(a / 6) * g (>= 0) by fp8_codes, its
 * value (a normal code c >= 8 is c << 20 rebiased; a subnormal one c * 2^-9, exact), 0 ->
 * 0.125, then / g. */
ALWAYS_INLINE __m256 nvfp4_scale8(__m256 a, __m256 g)
{
    __m256 v = _mm256_mul_ps(_mm256_div_ps(a, _mm256_set1_ps(6.0f)), g);
    __m256i code = fp8_codes(v, QN_E4M3_MAX, 3, 7);
    __m256 normal = _mm256_castsi256_ps(
        _mm256_add_epi32(_mm256_slli_epi32(code, 20), _mm256_set1_epi32((127 - 7) << 23)));
    __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(code), _mm256_set1_ps(0x1p-9f));
    __m256 sb = _mm256_blendv_ps(
        normal, sub, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), code)));
    sb = _mm256_blendv_ps(sb, _mm256_set1_ps(0.125f),
                          _mm256_cmp_ps(sb, _mm256_setzero_ps(), _CMP_EQ_OQ));
    return _mm256_div_ps(sb, g);
}

static int mx_scales_avx2(const float *absmax, int64_t n, float bound, float c, float *scale)
{
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 a = _mm256_loadu_ps(absmax + j);
        if (any_unusual(a)) return 1;
        _mm256_storeu_ps(scale + j, mx_scale8(a, bound, c));
    }
    return quant_generic_mx_scales(absmax + j, n - j, bound, c, scale + j);
}

static int nvfp4_scales_avx2(const float *absmax, int64_t n, float g, float *scale)
{
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 a = _mm256_loadu_ps(absmax + j);
        if (any_unusual(a)) return 1;
        _mm256_storeu_ps(scale + j, nvfp4_scale8(a, _mm256_set1_ps(g)));
    }
    return quant_generic_nvfp4_scales(absmax + j, n - j, g, scale + j);
}

/* quant_generic_lin_scales, 8 lanes at a time (see kernels_avx512.c). */
static int lin_scales_avx2(const float *absmax, int64_t n, float bound, float *scale)
{
    __m256 bad = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 s = _mm256_div_ps(_mm256_loadu_ps(absmax + j), _mm256_set1_ps(bound));
        s = qd_tiny_one(s);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(s, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));
        _mm256_storeu_ps(scale + j, s);
    }
    int tail = quant_generic_lin_scales(absmax + j, n - j, bound, scale + j);
    return tail || !_mm256_testz_ps(bad, bad);
}

/* MSE search terms (SPEC 9), four elements per vector, each the exact float64 formula. */
static void mse_terms_avx2(const float *x, const float *d, const float *w, int64_t n, double *t)
{
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        __m256d e = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + j)),
                                  _mm256_cvtps_pd(_mm_loadu_ps(d + j)));
        __m256d sq = _mm256_mul_pd(e, e);
        _mm256_storeu_pd(t + j, _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(w + j)), sq));
    }
    quant_generic_mse_terms(x + j, d + j, w + j, n - j, t + j);
}

static void mse_acc_avx2(const float *x, const float *d, int64_t ds, int nk, const float *w,
                         int64_t n, int64_t c0, int64_t tile, double *err, int64_t es)
{
    quant_mse_acc_with(mse_terms_avx2, x, d, ds, nk, w, n, c0, tile, err, es);
}
const quant_kernels quant_kernels_avx2 = {
    .isa = QUANT_ISA_AVX2,
    .absmax = absmax_avx2,
    .minmax = minmax_avx2,
    .quantize = qd_quantize,
    .dequantize = dequantize_avx2,
    .widen_bf16 = widen_bf16_avx2,
    .widen_f16 = widen_f16_avx2,
    .pack = pack_avx2,
    .errstats = qd_errstats,
    .mx_scales = mx_scales_avx2,
    .nvfp4_scales = nvfp4_scales_avx2,
    .lin_scales = lin_scales_avx2,
    .mse_acc = mse_acc_avx2,
    .quantize_absmax = qd_quantize_absmax,
    .mse_int = qd_mse_int,
    .errstats_codes = qd_errstats_codes,
};
