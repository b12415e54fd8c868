/* kernels_avx512.c -- AVX-512 (F/BW/VL/DQ) kernels: absmax/minmax reductions, the 16-lane
 * primitives on which ../driver_body.h builds the general quantize (its reciprocal path and tie
 * logic live there), the division path for symmetric integer tiles of 64 and more (also behind
 * quantize_bf16 and quantize_stream), the one-pass and MSE kernels, dequantize of every code
 * kind, bf16/f16 widening and nibble packing, with mask registers for tails. Bit-identical to
 * kernels_generic.c: same IEEE division, same round-half-even; rare shapes run the generic code.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <float.h>
#include <immintrin.h>
#include <math.h>

#include "../recip_contract.h"
#include "internal.h"
#include "numerics.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Round to nearest even, exceptions suppressed: for the instructions with embedded rounding. */
#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* vrangeps controls: min(|a|, |b|) with the sign of a, or with the sign cleared. */
#define RANGE_ABSMIN_SIGN_A 0x02
#define RANGE_ABSMIN_CLEAR  0x0a

#define SUB 2048 /* elements per block widened on the stack (bf16 sources of other shapes) */

/* Lanes [0, len) (all 16 when len >= 16). */
ALWAYS_INLINE __mmask16 lanes(int64_t len)
{
    return (__mmask16)((1u << (len < 16 ? len : 16)) - 1u);
}

ALWAYS_INLINE __m512i abs_bits(__m512 v)
{
    return _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
}

ALWAYS_INLINE bool is_int(quant_kcode kc)
{
    return qk_is_int(kc);
}

/* Prefetches the next row's source for the 64 values at chunk offset j: 64 * pf_elem bytes,
 * pf_elem being 2 (bf16, f16), 4 (f32) or 8 (f64). */
ALWAYS_INLINE void prefetch64(const char *pf, int64_t pf_elem, int64_t j)
{
    if (!pf) return;
    const char *p = pf + j * pf_elem;
    _mm_prefetch(p, _MM_HINT_T0);
    _mm_prefetch(p + 64, _MM_HINT_T0);
    if (pf_elem <= 2) return;
    _mm_prefetch(p + 128, _MM_HINT_T0);
    _mm_prefetch(p + 192, _MM_HINT_T0);
    if (pf_elem <= 4) return;
    for (int64_t off = 256; off < 64 * pf_elem; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

/* ---- reductions ------------------------------------------------------------------------------ */

/* max |x| bits over x[0..len): magnitudes of floats order like their bit patterns. */
ALWAYS_INLINE uint32_t seg_absmax_bits(const float *x, int64_t len)
{
    __m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
    int64_t j = 0;
    for (; j + 64 <= len; j += 64) {
        m0 = _mm512_max_epu32(m0, abs_bits(_mm512_loadu_ps(x + j)));
        m1 = _mm512_max_epu32(m1, abs_bits(_mm512_loadu_ps(x + j + 16)));
        m2 = _mm512_max_epu32(m2, abs_bits(_mm512_loadu_ps(x + j + 32)));
        m3 = _mm512_max_epu32(m3, abs_bits(_mm512_loadu_ps(x + j + 48)));
    }
    for (; j + 16 <= len; j += 16) m0 = _mm512_max_epu32(m0, abs_bits(_mm512_loadu_ps(x + j)));
    if (j < len) m1 = _mm512_max_epu32(m1, abs_bits(_mm512_maskz_loadu_ps(lanes(len - j), x + j)));
    return _mm512_reduce_max_epu32(
        _mm512_max_epu32(_mm512_max_epu32(m0, m1), _mm512_max_epu32(m2, m3)));
}

/* Transposing reduction: lane i of the result is the max over the lanes of v_i. Each step
 * halves the lanes per source while doubling the sources per register: 512-bit halves, 128-bit
 * quarters, 64-bit pairs, then single lanes; a final permutation restores the order. */
ALWAYS_INLINE __m512i max_halves(__m512i a, __m512i b)
{
    return _mm512_max_epu32(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xee));
}

ALWAYS_INLINE __m512i max_quarters(__m512i a, __m512i b)
{
    return _mm512_max_epu32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xdd));
}

ALWAYS_INLINE __m512i max_pairs(__m512i a, __m512i b)
{
    return _mm512_max_epu32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

ALWAYS_INLINE __m512i max_singles(__m512i a, __m512i b)
{
    __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
    return _mm512_max_epu32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0x88)),
                            _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0xdd)));
}

/* max |x| bits of one whole group (tile % 16 == 0), as a vector of partial maxima. */
ALWAYS_INLINE __m512i group_absmax(const float *x, int64_t tile)
{
    __m512i m = abs_bits(_mm512_loadu_ps(x));
    for (int64_t k = 16; k < tile; k += 16)
        m = _mm512_max_epu32(m, abs_bits(_mm512_loadu_ps(x + k)));
    return m;
}

/* max |x| bits of the 16 whole groups at x, lane i for group i. */
ALWAYS_INLINE __m512i absmax16_groups(const float *x, int64_t tile)
{
#define GM(i) group_absmax(x + (i)*tile, tile)
    __m512i t0 = max_halves(GM(0), GM(1)), t1 = max_halves(GM(2), GM(3));
    __m512i t2 = max_halves(GM(4), GM(5)), t3 = max_halves(GM(6), GM(7));
    __m512i t4 = max_halves(GM(8), GM(9)), t5 = max_halves(GM(10), GM(11));
    __m512i t6 = max_halves(GM(12), GM(13)), t7 = max_halves(GM(14), GM(15));
#undef GM
    __m512i u0 = max_quarters(t0, t1), u1 = max_quarters(t2, t3);
    __m512i u2 = max_quarters(t4, t5), u3 = max_quarters(t6, t7);
    __m512i y = max_singles(max_pairs(u0, u1), max_pairs(u2, u3));
    /* lane 4 q + p holds group 4 p + q */
    return _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), y);
}

/* Whole groups g.. from x[0..len) (len a multiple of 16 * tile), 16 at a time; returns the
 * largest new value. `tile` is a compile-time constant in the common cases. */
ALWAYS_INLINE __m512i absmax_batches(const float *x, int64_t len, int64_t tile, float *acc)
{
    __m512i seen = _mm512_setzero_si512();
    for (int64_t j = 0; j < len; j += 16 * tile, acc += 16) {
        __m512i m = _mm512_max_epu32(absmax16_groups(x + j, tile), _mm512_loadu_si512(acc));
        _mm512_storeu_si512(acc, m);
        seen = _mm512_max_epu32(seen, m);
    }
    return seen;
}

static int absmax_avx512(const float *x, int64_t n, int64_t c0, int64_t tile, float *acc)
{
    if (tile == 1) {
        __m512i seen = _mm512_setzero_si512();
        for (int64_t j = 0; j < n; j += 16) {
            __mmask16 m = lanes(n - j);
            __m512i a = abs_bits(_mm512_maskz_loadu_ps(m, x + j));
            a = _mm512_max_epu32(a, _mm512_maskz_loadu_epi32(m, acc + c0 + j));
            _mm512_mask_storeu_epi32(acc + c0 + j, m, a);
            seen = _mm512_max_epu32(seen, a); /* like generic, the old values count too */
        }
        return _mm512_reduce_max_epu32(seen) >= 0x7f800000u;
    }
    if (tile < 8) return quant_generic_absmax(x, n, c0, tile, acc);
    uint32_t seen = 0;
    int64_t g = c0 / tile, j = 0;
    if (tile % 16 == 0 && tile <= 512) { /* small tiles: a register reduction per 16 groups */
        int64_t lead = c0 % tile ? (g + 1) * tile - c0 : 0; /* a partial first group */
        if (lead > n) lead = n;
        if (lead) {
            uint32_t m = seg_absmax_bits(x, lead), prev = qn_bits(acc[g]);
            m = m > prev ? m : prev;
            acc[g++] = qn_float(m);
            seen = m;
            j = lead;
        }
        int64_t len = (n - j) / (16 * tile) * (16 * tile);
        __m512i s;
        if (tile == 32)
            s = absmax_batches(x + j, len, 32, acc + g);
        else if (tile == 64)
            s = absmax_batches(x + j, len, 64, acc + g);
        else if (tile == 128)
            s = absmax_batches(x + j, len, 128, acc + g);
        else
            s = absmax_batches(x + j, len, tile, acc + g);
        uint32_t sb = _mm512_reduce_max_epu32(s);
        seen = sb > seen ? sb : seen;
        j += len;
        g += len / tile;
    }
    for (; j < n; g++) {
        int64_t end = (g + 1) * tile - c0 < n ? (g + 1) * tile - c0 : n;
        uint32_t m = seg_absmax_bits(x + j, end - j), prev = qn_bits(acc[g]);
        m = m > prev ? m : prev;
        acc[g] = qn_float(m);
        seen = m > seen ? m : seen;
        j = end;
    }
    return seen >= 0x7f800000u;
}

/* Folds x[0..len) into *lo and *hi; returns nonzero on a non-finite value. min_ps(v, lo) is
 * generic's `v < lo ? v : lo` lane by lane (max alike); only the sign of a zero result may
 * differ, which calibration canonicalises. */
ALWAYS_INLINE int seg_minmax(const float *x, int64_t len, float *lo, float *hi)
{
    __m512 l0 = _mm512_set1_ps(*lo), h0 = _mm512_set1_ps(*hi), l1 = l0, h1 = h0;
    __m512i s0 = _mm512_setzero_si512(), s1 = s0;
    int64_t j = 0;
    for (; j + 32 <= len; j += 32) {
        __m512 v0 = _mm512_loadu_ps(x + j), v1 = _mm512_loadu_ps(x + j + 16);
        l0 = _mm512_min_ps(v0, l0);
        h0 = _mm512_max_ps(v0, h0);
        s0 = _mm512_max_epu32(s0, abs_bits(v0));
        l1 = _mm512_min_ps(v1, l1);
        h1 = _mm512_max_ps(v1, h1);
        s1 = _mm512_max_epu32(s1, abs_bits(v1));
    }
    for (; j < len; j += 16) {
        __mmask16 m = lanes(len - j);
        __m512 v = _mm512_maskz_loadu_ps(m, x + j);
        l0 = _mm512_mask_min_ps(l0, m, v, l0);
        h0 = _mm512_mask_max_ps(h0, m, v, h0);
        s0 = _mm512_max_epu32(s0, abs_bits(v));
    }
    *lo = _mm512_reduce_min_ps(_mm512_min_ps(l0, l1));
    *hi = _mm512_reduce_max_ps(_mm512_max_ps(h0, h1));
    return _mm512_reduce_max_epu32(_mm512_max_epu32(s0, s1)) >= 0x7f800000u;
}

static int minmax_avx512(const float *x, int64_t n, int64_t c0, int64_t tile, float *mn, float *mx)
{
    if (tile == 1) {
        __m512i seen = _mm512_setzero_si512();
        for (int64_t j = 0; j < n; j += 16) {
            __mmask16 m = lanes(n - j);
            __m512 v = _mm512_maskz_loadu_ps(m, x + j);
            __m512 lo = _mm512_maskz_loadu_ps(m, mn + c0 + j);
            __m512 hi = _mm512_maskz_loadu_ps(m, mx + c0 + j);
            _mm512_mask_storeu_ps(mn + c0 + j, m, _mm512_min_ps(v, lo));
            _mm512_mask_storeu_ps(mx + c0 + j, m, _mm512_max_ps(v, hi));
            seen = _mm512_max_epu32(seen, abs_bits(v));
        }
        return _mm512_reduce_max_epu32(seen) >= 0x7f800000u;
    }
    if (tile < 8) return quant_generic_minmax(x, n, c0, tile, mn, mx);
    int bad = 0;
    int64_t g = c0 / tile, end = (g + 1) * tile - c0;
    for (int64_t j = 0; j < n; g++, end += tile) {
        if (end > n) end = n;
        bad |= seg_minmax(x + j, end - j, mn + g, mx + g);
        j = end;
    }
    return bad;
}

/* ---- code conversions (16 lanes) ------------------------------------------------------------ */

/* Integer codes of scaled values: clip, then round half to even (the same as rounding first,
 * qmin and qmax being integers). */
ALWAYS_INLINE __m512i int_codes(__m512 v, __m512 qmin, __m512 qmax)
{
    return _mm512_cvt_roundps_epi32(_mm512_min_ps(qmax, _mm512_max_ps(qmin, v)), RNE);
}

/* Clip to +-max, then round to nearest even into an fp8 format with M mantissa bits and bias
 * `bias`. With a = |clipped value| and e its exponent, raised to the smallest normal exponent
 * emin = 1 - bias, c = 2^(e + 23 - M) has a float32 ulp of 2^(e - M), the fp8 spacing at a, so
 * the RNE sum a + c holds a rounded to the fp8 grid: bits(a + c) - bits(c) is the number of fp8
 * steps above zero in the binade (2^M..2^(M+1) for normals, 0..2^M for subnormals, where e is
 * emin). The code is that count plus (e - emin) << M. Equal to qn_quant_*(): the same clip and
 * the same round-half-even; the sign of zero is kept. */
ALWAYS_INLINE __m512i fp8_codes(__m512 v, float max, int M, int bias)
{
    const __m512 vmax = _mm512_set1_ps(max);
    const __m512i emin = _mm512_set1_epi32((127 + 1 - bias) << 23);
    __m512 a = _mm512_range_ps(v, vmax, RANGE_ABSMIN_CLEAR);
    __m512i ebits = _mm512_max_epu32(
        _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7f800000)), emin);
    __m512i c = _mm512_add_epi32(ebits, _mm512_set1_epi32((23 - M) << 23));
    __m512 s = _mm512_add_round_ps(a, _mm512_castsi512_ps(c), RNE);
    __m512i steps = _mm512_sub_epi32(_mm512_castps_si512(s), c);
    __m512i code =
        _mm512_add_epi32(steps, _mm512_srli_epi32(_mm512_sub_epi32(ebits, emin), 23 - M));
    __m512i sign = _mm512_srli_epi32(_mm512_castps_si512(v), 24);
    /* code | (sign & 0x80) */
    return _mm512_ternarylogic_epi32(code, sign, _mm512_set1_epi32(0x80), 0xf8);
}

/* NF4 by a 32-cell grid over [-1, 1): cell floor(16 v), v clamped to [-1, 1), lives in lane
 * cell & 31 of two-register tables (lanes 0..15: cells 0..15, lanes 16..31: cells -16..-1).
 * The thresholds are more than 1/16 apart, so a cell holds at most one: index(v) = the count of
 * thresholds in lower cells (NF4_BASE) + (v > the cell's threshold, +Inf when none). The tables
 * are those floor(16 T[i]) gives (kernels_exact_at_code_boundaries checks every threshold and
 * cell edge with its neighbours against the scalar index). *thr gets each lane's cell threshold;
 * every other threshold is at least 0.00166 (T12 = 0x1.00da06p-1 to 1/2) from the cell's edges, so
 * from v. */
#define NF4_BASE                                                                                   \
    7, 8, 9, 9, 10, 11, 11, 12, 12, 13, 13, 14, 14, 14, 15, 15, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3,   \
        4, 4, 5, 6, 6
ALWAYS_INLINE __m512i nf4_cell(__m512 v, __m512 *thr)
{
    const float *t = qn_nf4_thresholds;
    const __m512 thr_lo =
        _mm512_setr_ps(t[7], t[8], INFINITY, t[9], t[10], INFINITY, t[11], INFINITY, t[12],
                       INFINITY, t[13], INFINITY, INFINITY, t[14], INFINITY, INFINITY);
    const __m512 thr_hi =
        _mm512_setr_ps(INFINITY, INFINITY, t[0], INFINITY, INFINITY, INFINITY, t[1], INFINITY, t[2],
                       INFINITY, t[3], INFINITY, t[4], t[5], INFINITY, t[6]);
    static const int32_t base[32] = {NF4_BASE};
    /* 16 v is exact; |16 v| clipped to 15.5 with its sign puts v >= 15/16 in cell 15 and
     * v < -15/16 in cell -16, neither of which holds a threshold */
    __m512 u = _mm512_range_ps(_mm512_mul_ps(v, _mm512_set1_ps(16.0f)), _mm512_set1_ps(15.5f),
                               RANGE_ABSMIN_SIGN_A);
    __m512i cell = _mm512_cvt_roundps_epi32(u, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    *thr = _mm512_permutex2var_ps(thr_lo, cell, thr_hi);
    __m512i k =
        _mm512_permutex2var_epi32(_mm512_loadu_si512(base), cell, _mm512_loadu_si512(base + 16));
    __mmask16 above = _mm512_cmp_ps_mask(v, *thr, _CMP_GT_OQ);
    return _mm512_mask_sub_epi32(k, above, k, _mm512_set1_epi32(-1));
}
#undef NF4_BASE

ALWAYS_INLINE __m512i nf4_codes(__m512 v)
{
    __m512 thr;
    return nf4_cell(v, &thr);
}

/* e2m1 codes as qn_quant_e2m1, by the rounding add of fp8_codes: e2m1 is the float format with
 * M = 1, bias 1 and largest value 6, so |v| clipped to 6 and rounded to nearest even on its grid
 * gives the magnitude code; round-to-even is the midpoint list's tie rule (0.25 -> 0, 0.75 -> 2,
 * 1.25 -> 2, 1.75 -> 4, 2.5 -> 4, 3.5 -> 6, 5 -> 6). NaN gets magnitude 0, as the scalar path. */
ALWAYS_INLINE __m512i e2m1_codes(__m512 v)
{
    const __m512i emin = _mm512_set1_epi32(127 << 23);
    __m512 a = _mm512_range_ps(v, _mm512_set1_ps(6.0f), RANGE_ABSMIN_CLEAR);
    __m512i ebits = _mm512_max_epu32(
        _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7f800000)), emin);
    __m512i c = _mm512_add_epi32(ebits, _mm512_set1_epi32(22 << 23));
    __m512 s = _mm512_add_round_ps(a, _mm512_castsi512_ps(c), RNE);
    __m512i steps = _mm512_sub_epi32(_mm512_castps_si512(s), c);
    __m512i m = _mm512_add_epi32(steps, _mm512_srli_epi32(_mm512_sub_epi32(ebits, emin), 22));
    m = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), m);
    __m512i sign =
        _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 28), _mm512_set1_epi32(8));
    return _mm512_or_si512(m, sign);
}

/* Codes of scaled values, as int32 lanes. */
ALWAYS_INLINE __m512i codes16(quant_kcode kc, __m512 v, __m512 qmin, __m512 qmax)
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

/* Stores the lanes `m` of 16 codes at the kind's width. Every code is already within the
 * destination range (clipped integers, fp8 bytes, nf4 indices), so saturation never acts. */
ALWAYS_INLINE void store16(quant_kcode kc, uint8_t *dst, __mmask16 m, __m512i c)
{
    if (kc == QK_I16)
        _mm512_mask_cvtsepi32_storeu_epi16(dst, m, c);
    else if (kc == QK_I8)
        _mm512_mask_cvtsepi32_storeu_epi8(dst, m, c);
    else
        _mm512_mask_cvtusepi32_storeu_epi8(dst, m, c);
}

/* Stores 64 codes: two pack steps, then one permutation undoes their in-lane interleave. */
ALWAYS_INLINE void store64(quant_kcode kc, uint8_t *dst, __m512i a, __m512i b, __m512i c, __m512i d)
{
    __m512i ab = _mm512_packs_epi32(a, b), cd = _mm512_packs_epi32(c, d);
    if (kc == QK_I16) {
        const __m512i q = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
        _mm512_storeu_si512(dst, _mm512_permutexvar_epi64(q, ab));
        _mm512_storeu_si512(dst + 64, _mm512_permutexvar_epi64(q, cd));
        return;
    }
    __m512i bytes = kc == QK_I8 ? _mm512_packs_epi16(ab, cd) : _mm512_packus_epi16(ab, cd);
    const __m512i p = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_si512(dst, _mm512_permutexvar_epi32(p, bytes));
}

/* ---- the shared driver (../driver_body.h) on 16 lanes --------------------------------------- */

#define QD_W             16
#define QD_QUANTIZE_ONLY /* the one-pass and MSE kernels below are AVX-512's own */
typedef __m512 qd_vf;
typedef __m512i qd_vi;
typedef __mmask16 qd_vm; /* near lanes: one bit each */
#define qd_load  _mm512_loadu_ps
#define qd_store _mm512_storeu_ps
#define qd_set1  _mm512_set1_ps
#define qd_add   _mm512_add_ps
#define qd_sub   _mm512_sub_ps
#define qd_mul   _mm512_mul_ps
#define qd_div   _mm512_div_ps
#define qd_abs   _mm512_abs_ps
#define qd_cvt   _mm512_cvttps_epi32

ALWAYS_INLINE qd_vf qd_bcast(const float *p)
{
    return _mm512_set1_ps(*p);
}

/* Lane i = p[i / tile] (tile 2, 4 or 8): a masked load of the 16 / tile values, no read past. */
ALWAYS_INLINE qd_vf qd_spread(const float *p, const int64_t tile)
{
    const int shift = tile == 2 ? 1 : tile == 4 ? 2 : 3;
    __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << (16 / tile)) - 1), p);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_permutexvar_ps(_mm512_srlv_epi32(iota, _mm512_set1_epi32(shift)), v);
}

/* maxps / minps return their second operand when either is NaN: v second keeps a NaN. */
ALWAYS_INLINE qd_vf qd_clip_nan(qd_vf v, qd_vf lo, qd_vf hi)
{
    return _mm512_min_ps(hi, _mm512_max_ps(lo, v));
}

ALWAYS_INLINE qd_vf qd_rint(qd_vf v)
{
    return _mm512_roundscale_ps(v, RNE);
}

ALWAYS_INLINE qd_vm qd_near_none(void)
{
    return 0;
}

ALWAYS_INLINE qd_vm qd_note(qd_vm acc, qd_vf d, qd_vf limit)
{
    return acc | _mm512_cmp_ps_mask(d, limit, _CMP_NLT_UQ);
}

ALWAYS_INLINE bool qd_any(qd_vm acc)
{
    return acc != 0;
}

ALWAYS_INLINE qd_vf qd_zp(const int32_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_loadu_si512(p));
}

ALWAYS_INLINE qd_vi qd_codes(quant_kcode kc, qd_vf v, qd_vf qmin, qd_vf qmax)
{
    return codes16(kc, v, qmin, qmax);
}

ALWAYS_INLINE void qd_store_blk(quant_kcode kc, void *dst, qd_vi a, qd_vi b, qd_vi c, qd_vi d)
{
    store64(kc, dst, a, b, c, d);
}

ALWAYS_INLINE void qd_store_vec(quant_kcode kc, void *dst, qd_vi a)
{
    store16(kc, dst, 0xffff, a);
}

ALWAYS_INLINE void qd_prefetch(const char *pf, int64_t pf_elem, int64_t j)
{
    prefetch64(pf, pf_elem, j);
}

/* NF4 codes with the threshold that can flip them (nf4_cell). */
#define QD_NF4_RECIP
ALWAYS_INLINE qd_vi qd_nf4_cell(qd_vf v, qd_vf *thr)
{
    return nf4_cell(v, thr);
}

#include "../driver_body.h"

/* ---- quantize: the division path for long groups --------------------------------------------- */

/* Tiles from which symmetric integer codes take the division path (div_int_kc). */
#define DIV_MIN_TILE 64

/* bf16 bit patterns (16 lanes) as float32: exact, the widening of widen_bf16_avx512. */
ALWAYS_INLINE __m512 bf16x16(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The 16 bf16 values at x (lanes m) as float32: the exact widening of widen_bf16_avx512. */
ALWAYS_INLINE __m512 bf16_load(const uint16_t *x, __mmask16 m)
{
    __m256i h =
        m == 0xffff ? _mm256_loadu_si256((const __m256i *)x) : _mm256_maskz_loadu_epi16(m, x);
    return bf16x16(h);
}

/* The 16 source values at element j (lanes m) as float32: bf16 widened in registers, or f32. */
ALWAYS_INLINE __m512 src_load(const void *x, bool bf16, int64_t j, __mmask16 m)
{
    if (bf16) return bf16_load((const uint16_t *)x + j, m);
    const float *f = (const float *)x + j;
    return m == 0xffff ? _mm512_loadu_ps(f) : _mm512_maskz_loadu_ps(m, f);
}

/* Codes asked to bypass the cache (quantize_stream's `stream`) do so when every 64-code step of
 * the chunk starts on a 64-byte boundary of `out`: out aligned, groups of whole steps (tile % 64
 * == 0) and a chunk starting on a step (c0 % 64 == 0). Other shapes store through the cache. */
ALWAYS_INLINE bool stream_ok(const quant_krow *r, bool stream, const uint8_t *out, int64_t c0)
{
    return stream && ((uintptr_t)out & 63) == 0 && r->tile % 64 == 0 && c0 % 64 == 0;
}

/* store64 with non-temporal stores (dst 64-byte aligned): no read for ownership of the lines;
 * the caller fences (sfence) before the codes are handed on. */
ALWAYS_INLINE void store64_nt(quant_kcode kc, uint8_t *dst, __m512i a, __m512i b, __m512i c,
                              __m512i d)
{
    __m512i ab = _mm512_packs_epi32(a, b), cd = _mm512_packs_epi32(c, d);
    if (kc == QK_I16) {
        const __m512i q = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
        _mm512_stream_si512((void *)dst, _mm512_permutexvar_epi64(q, ab));
        _mm512_stream_si512((void *)(dst + 64), _mm512_permutexvar_epi64(q, cd));
        return;
    }
    __m512i bytes = kc == QK_I8 ? _mm512_packs_epi16(ab, cd) : _mm512_packus_epi16(ab, cd);
    const __m512i p = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_stream_si512((void *)dst, _mm512_permutexvar_epi32(p, bytes));
}

/* The 64 codes of x[j..j + 64) divided by s, stored at out (through the cache or around it). */
ALWAYS_INLINE void div_step64(quant_kcode kc, const void *x, bool bf16, int64_t j, __m512 s,
                              __m512 qmin, __m512 qmax, bool nt, uint8_t *out)
{
    __m512i k0 = int_codes(_mm512_div_ps(src_load(x, bf16, j, 0xffff), s), qmin, qmax);
    __m512i k1 = int_codes(_mm512_div_ps(src_load(x, bf16, j + 16, 0xffff), s), qmin, qmax);
    __m512i k2 = int_codes(_mm512_div_ps(src_load(x, bf16, j + 32, 0xffff), s), qmin, qmax);
    __m512i k3 = int_codes(_mm512_div_ps(src_load(x, bf16, j + 48, 0xffff), s), qmin, qmax);
    if (nt)
        store64_nt(kc, out, k0, k1, k2, k3);
    else
        store64(kc, out, k0, k1, k2, k3);
}

/* Symmetric integer codes of x[0..n) (f32, or bf16 read in place), group by group, 64 values per
 * step, each code by the IEEE division (int_codes of x / s), so the codes are the scalar path's
 * by construction. For long groups (DIV_MIN_TILE and more) this replaces the reciprocal path
 * with its tie test per lane, which ran at about 0.6 of this speed out of cache and 0.7 in cache
 * on the cores measured (AMD Zen 4/5 class; BENCHMARKS.md, branch `ooc`): its extra
 * instructions per vector left fewer loads in flight. `nt`: the whole steps store around the
 * cache (stream_ok), fenced before returning. */
ALWAYS_INLINE void div_int_kc(quant_kcode kc, const quant_krow *r, const void *x, const bool bf16,
                              int64_t n, int64_t c0, uint8_t *out, const bool nt)
{
    const int64_t csize = kc == QK_I16 ? 2 : 1, tile = r->tile;
    const __m512 qmin = _mm512_set1_ps(r->qmin), qmax = _mm512_set1_ps(r->qmax);
    int64_t g = c0 / tile, end = (g + 1) * tile - c0;
    for (int64_t j = 0; j < n; g++, end += tile) {
        if (end > n) end = n;
        const __m512 s = _mm512_set1_ps(r->scale[g]);
        for (; j + 64 <= end; j += 64) {
            prefetch64(r->pf, r->pf_elem, j);
            div_step64(kc, x, bf16, j, s, qmin, qmax, nt, out + j * csize);
        }
        for (; j < end; j += 16) {
            __mmask16 m = lanes(end - j);
            store16(kc, out + j * csize, m,
                    int_codes(_mm512_maskz_div_ps(m, src_load(x, bf16, j, m), s), qmin, qmax));
        }
        j = end; /* the masked step may have gone past it */
    }
    if (nt) _mm_sfence();
}

/* div_int_kc with the store mode chosen at run time (two compiled bodies). */
ALWAYS_INLINE void div_int_any(quant_kcode kc, const quant_krow *r, const void *x, const bool bf16,
                               int64_t n, int64_t c0, bool stream, uint8_t *out)
{
    if (stream_ok(r, stream, out, c0))
        div_int_kc(kc, r, x, bf16, n, c0, out, true);
    else
        div_int_kc(kc, r, x, bf16, n, c0, out, false);
}

/* ---- quantize ------------------------------------------------------------------------------ */

/* Symmetric integer codes in tiles of DIV_MIN_TILE and more take the division path; every other
 * shape the shared driver (qd_quantize). */
ALWAYS_INLINE int quantize_kc(quant_kcode kc, const quant_krow *r, const float *x, int64_t n,
                              int64_t c0, void *codes)
{
    if (n <= 0) return 0;
    if (!is_int(kc) || r->zp || r->tile < DIV_MIN_TILE) return qd_quantize(r, x, n, c0, codes);
    /* the non-finite check is its own pass over the chunk, in cache, when it is needed at all */
    int bad = !r->checked && seg_absmax_bits(x, n) >= 0x7f800000u;
    div_int_any(kc, r, x, false, n, c0, false, codes);
    return bad;
}

static int quantize_avx512(const quant_krow *r, const float *x, int64_t n, int64_t c0, void *codes)
{
    switch (r->kcode) {
    case QK_I8:
        return quantize_kc(QK_I8, r, x, n, c0, codes);
    case QK_U8:
        return quantize_kc(QK_U8, r, x, n, c0, codes);
    case QK_I16:
        return quantize_kc(QK_I16, r, x, n, c0, codes);
    default:
        return qd_quantize(r, x, n, c0, codes);
    }
}

/* ---- dequantize ------------------------------------------------------------------------------ */

/* fp8 codes (int32 lanes) -> float32, exactly as qn_fp8_to_f32(). A normal code is its bits
 * shifted into place plus the exponent rebias; a subnormal one is built as the normal
 * 2^(1-bias) * (1 + m/2^M) minus 2^(1-bias) (exact), so no denormal operand is ever touched. */
ALWAYS_INLINE __m512 fp8_levels(__m512i c, int M, int bias, bool has_inf)
{
    __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7f));
    __m512i t =
        _mm512_add_epi32(_mm512_slli_epi32(mag, 23 - M), _mm512_set1_epi32((127 - bias) << 23));
    __mmask16 sub = _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(1 << M));
    t = _mm512_mask_add_epi32(t, sub, t, _mm512_set1_epi32(1 << 23));
    __m512 f = _mm512_castsi512_ps(t);
    f = _mm512_mask_sub_ps(f, sub, f, _mm512_castsi512_ps(_mm512_set1_epi32((128 - bias) << 23)));
    __m512i bits = _mm512_castps_si512(f);
    /* exponent all ones: e5m2 Inf, or a quiet NaN without payload; e4m3fn: only S.1111.111,
     * a NaN */
    __mmask16 nan = has_inf ? _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7c))
                            : _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f));
    if (has_inf)
        bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7c)),
                                     _mm512_set1_epi32(0x7f800000));
    bits = _mm512_mask_mov_epi32(bits, nan, _mm512_set1_epi32(0x7fc00000));
    /* bits | ((c << 24) & sign bit) */
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
        bits, _mm512_slli_epi32(c, 24), _mm512_set1_epi32((int)0x80000000u), 0xf8));
}

/* Levels of the 16 codes at c (lanes m). */
ALWAYS_INLINE __m512 levels16(quant_kcode kc, const uint8_t *c, __mmask16 m, __m512 table)
{
    if (kc == QK_I16)
        return _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(m, c)));
    __m128i b = _mm_maskz_loadu_epi8(m, c);
    switch (kc) {
    case QK_I8:
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    case QK_E4M3:
        return fp8_levels(_mm512_cvtepu8_epi32(b), 3, 7, false);
    case QK_E5M2:
        return fp8_levels(_mm512_cvtepu8_epi32(b), 2, 15, true);
    case QK_NF4: /* vpermps reads the low 4 index bits: code & 15 */
    case QK_E2M1:
        return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(b), table);
    default:
        return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
    }
}

/* out[0..16) lanes m = (level - z) * s, or level * s without a zero point. */
ALWAYS_INLINE void deq16(quant_kcode kc, const uint8_t *c, __mmask16 m, __m512 lv, __m512 s,
                         __m512 z, bool asym, float *out)
{
    __m512 l = levels16(kc, c, m, lv);
    if (asym) l = _mm512_sub_ps(l, z);
    if (m == 0xffff)
        _mm512_storeu_ps(out, _mm512_mul_ps(l, s));
    else
        _mm512_mask_storeu_ps(out, m, _mm512_mul_ps(l, s));
}

ALWAYS_INLINE void dequantize_kc(quant_kcode kc, const quant_krow *r, const uint8_t *codes,
                                 int64_t n, int64_t c0, float *out)
{
    const int64_t csize = kc == QK_I16 ? 2 : 1;
    const __m512 lv = kc == QK_NF4    ? _mm512_loadu_ps(quant_nf4_levels)
                      : kc == QK_E2M1 ? _mm512_loadu_ps(quant_e2m1_levels)
                                      : _mm512_setzero_ps();
    const bool asym = r->zp != NULL;
    if (r->tile == 1) {
        for (int64_t j = 0; j < n; j += 16) {
            __mmask16 m = lanes(n - j);
            __m512 z = asym ? _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(m, r->zp + c0 + j))
                            : _mm512_setzero_ps();
            deq16(kc, codes + j * csize, m, lv, _mm512_maskz_loadu_ps(m, r->scale + c0 + j), z,
                  asym, out + j);
        }
        return;
    }
    int64_t g = c0 / r->tile, end = (g + 1) * r->tile - c0;
    for (int64_t j = 0; j < n; g++, end += r->tile) {
        if (end > n) end = n;
        const __m512 s = _mm512_set1_ps(r->scale[g]);
        const __m512 z = _mm512_set1_ps(asym ? (float)r->zp[g] : 0.0f);
        for (; j + 32 <= end; j += 32) {
            deq16(kc, codes + j * csize, 0xffff, lv, s, z, asym, out + j);
            deq16(kc, codes + (j + 16) * csize, 0xffff, lv, s, z, asym, out + j + 16);
        }
        for (; j < end; j += 16)
            deq16(kc, codes + j * csize, lanes(end - j), lv, s, z, asym, out + j);
        j = end;
    }
}

static void dequantize_avx512(const quant_krow *r, const void *codes, int64_t n, int64_t c0,
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

/* Unmasked 32-element steps, then a masked tail (a mask per step costs twice the time). */
static void widen_bf16_avx512(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm512_storeu_ps(dst + i, bf16x16(_mm256_loadu_si256((const __m256i *)(src + i))));
        _mm512_storeu_ps(dst + i + 16,
                         bf16x16(_mm256_loadu_si256((const __m256i *)(src + i + 16))));
    }
    for (; i < n; i += 16) {
        __mmask16 m = lanes(n - i);
        _mm512_mask_storeu_ps(dst + i, m, bf16x16(_mm256_maskz_loadu_epi16(m, src + i)));
    }
}

/* vcvtph2ps is exact and quiets NaN keeping its payload, as qn_f16_to_f32() does. */
static void widen_f16_avx512(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
        _mm512_storeu_ps(dst + i + 16,
                         _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i + 16))));
    }
    for (; i < n; i += 16) {
        __mmask16 m = lanes(n - i);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
    }
}

/* ---- bf16 sources, widened in registers ------------------------------------------------------ */

/* Group shapes below this tile, and codes other than symmetric integers, widen blocks of SUB
 * values on the stack and run the float32 kernels (the same results by definition). */
#define BF16_MIN_TILE QUANT_BF16_DIRECT_MIN_TILE

/* max |x| bits of the bf16 values x[0..len), as a bf16 bit pattern (the float32 one >> 16). */
ALWAYS_INLINE uint32_t bf16_absmax_bits(const uint16_t *x, int64_t len)
{
    const __m512i mag = _mm512_set1_epi16(0x7fff);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
    int64_t j = 0;
    for (; j + 128 <= len; j += 128) {
        m0 = _mm512_max_epu16(m0, _mm512_and_si512(_mm512_loadu_si512(x + j), mag));
        m1 = _mm512_max_epu16(m1, _mm512_and_si512(_mm512_loadu_si512(x + j + 32), mag));
        m2 = _mm512_max_epu16(m2, _mm512_and_si512(_mm512_loadu_si512(x + j + 64), mag));
        m3 = _mm512_max_epu16(m3, _mm512_and_si512(_mm512_loadu_si512(x + j + 96), mag));
    }
    for (; j + 32 <= len; j += 32)
        m0 = _mm512_max_epu16(m0, _mm512_and_si512(_mm512_loadu_si512(x + j), mag));
    if (j < len) {
        __mmask32 t = (__mmask32)((1ull << (len - j)) - 1u);
        m1 = _mm512_max_epu16(m1, _mm512_and_si512(_mm512_maskz_loadu_epi16(t, x + j), mag));
    }
    __m512i m = _mm512_max_epu16(_mm512_max_epu16(m0, m1), _mm512_max_epu16(m2, m3));
    m = _mm512_max_epu32(_mm512_and_si512(m, _mm512_set1_epi32(0xffff)), _mm512_srli_epi32(m, 16));
    return _mm512_reduce_max_epu32(m);
}

static int absmax_bf16_avx512(const uint16_t *x, int64_t n, int64_t c0, int64_t tile, float *acc)
{
    if (tile < BF16_MIN_TILE) {
        float buf[SUB];
        int bad = 0;
        for (int64_t j = 0; j < n; j += SUB) {
            int64_t m = n - j < SUB ? n - j : SUB;
            widen_bf16_avx512(x + j, buf, m);
            bad |= absmax_avx512(buf, m, c0 + j, tile, acc);
        }
        return bad;
    }
    uint32_t seen = 0;
    for (int64_t j = 0, g = c0 / tile; j < n; g++) {
        int64_t end = (g + 1) * tile - c0 < n ? (g + 1) * tile - c0 : n;
        uint32_t m = bf16_absmax_bits(x + j, end - j) << 16, prev = qn_bits(acc[g]);
        m = m > prev ? m : prev;
        acc[g] = qn_float(m);
        seen = m > seen ? m : seen;
        j = end;
    }
    return seen >= 0x7f800000u;
}

/* Other shapes: blocks of SUB values widened on the stack, through quantize_avx512 (blocks keep
 * c0's alignment, so each takes the path the whole chunk would). */
static int quantize_bf16_widened(const quant_krow *r, const uint16_t *x, int64_t n, int64_t c0,
                                 uint8_t *out)
{
    const int64_t csize = r->kcode == QK_I16 ? 2 : 1;
    float buf[SUB];
    int bad = 0;
    for (int64_t j = 0; j < n; j += SUB) {
        int64_t m = n - j < SUB ? n - j : SUB;
        quant_krow rj = *r;
        if (r->pf) rj.pf = r->pf + j * r->pf_elem;
        widen_bf16_avx512(x + j, buf, m);
        bad |= quantize_avx512(&rj, buf, m, c0 + j, out + j * csize);
    }
    return bad;
}

static int quantize_bf16_avx512(const quant_krow *r, const uint16_t *x, int64_t n, int64_t c0,
                                void *codes)
{
    if (n <= 0) return 0;
    if (!is_int(r->kcode) || r->zp || r->tile < BF16_MIN_TILE)
        return quantize_bf16_widened(r, x, n, c0, codes);
    /* the non-finite check, when needed, is its own pass over the chunk, as in quantize_kc */
    int bad = !r->checked && bf16_absmax_bits(x, n) >= 0x7f80u;
    if (r->kcode == QK_I8)
        div_int_any(QK_I8, r, x, true, n, c0, false, codes);
    else if (r->kcode == QK_U8)
        div_int_any(QK_U8, r, x, true, n, c0, false, codes);
    else
        div_int_any(QK_I16, r, x, true, n, c0, false, codes);
    return bad;
}

/* ---- quantize with the codes streamed around the cache --------------------------------------- */

/* quant_quantize_stream_fn: symmetric integer codes in tiles of DIV_MIN_TILE and more take the
 * division path, whose whole steps may store around the cache (stream_ok); other shapes run
 * quantize (bf16: quantize_bf16), the same results. */
static int quantize_stream_avx512(const quant_krow *r, const void *x, bool bf16, int64_t n,
                                  int64_t c0, bool stream, void *codes)
{
    if (n <= 0) return 0;
    if (!is_int(r->kcode) || r->zp || r->tile < DIV_MIN_TILE)
        return bf16 ? quantize_bf16_avx512(r, x, n, c0, codes)
                    : quantize_avx512(r, x, n, c0, codes);
    /* the non-finite check, when needed, is its own pass over the chunk, as in quantize_kc */
    int bad = !r->checked &&
              (bf16 ? bf16_absmax_bits(x, n) >= 0x7f80u : seg_absmax_bits(x, n) >= 0x7f800000u);
    if (r->kcode == QK_I8)
        div_int_any(QK_I8, r, x, bf16, n, c0, stream, codes);
    else if (r->kcode == QK_U8)
        div_int_any(QK_U8, r, x, bf16, n, c0, stream, codes);
    else
        div_int_any(QK_I16, r, x, bf16, n, c0, stream, codes);
    return bad;
}

/* ---- packing -------------------------------------------------------------------------------- */

/* 64 codes -> 32 bytes: low nibble of code 2i plus code 2i+1 times 16, summed by vpmaddubsw,
 * narrowed by vpmovwb. In the masked tail a missing last partner loads as 0, leaving the lone
 * low nibble. */
ALWAYS_INLINE __m256i pack64(__m512i codes)
{
    __m512i v = _mm512_and_si512(codes, _mm512_set1_epi8(0x0f));
    return _mm512_cvtepi16_epi8(_mm512_maddubs_epi16(v, _mm512_set1_epi16(0x1001)));
}

static void pack_avx512(const uint8_t *codes, int64_t n, uint8_t *packed)
{
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        _mm256_storeu_si256((__m256i *)(packed + i / 2), pack64(_mm512_loadu_si512(codes + i)));
    if (i < n) {
        __mmask64 m = ((__mmask64)1 << (n - i)) - 1;
        __mmask32 out = (__mmask32)((1ull << ((n - i + 1) / 2)) - 1);
        _mm256_mask_storeu_epi8(packed + i / 2, out, pack64(_mm512_maskz_loadu_epi8(m, codes + i)));
    }
}

/* quant_generic_errstats with the 8 lanes in one vector (max_pd(a, b) is a > b ? a : b). */
static void errstats_avx512(const float *x, const float *d, int64_t n, double acc[3])
{
    __m512d sx = _mm512_setzero_pd(), se = sx, mx = sx;
    const __m512d sign = _mm512_set1_pd(-0.0);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512d xv = _mm512_cvtps_pd(_mm256_loadu_ps(x + j));
        __m512d e = _mm512_sub_pd(xv, _mm512_cvtps_pd(_mm256_loadu_ps(d + j)));
        sx = _mm512_add_pd(sx, _mm512_mul_pd(xv, xv));
        se = _mm512_add_pd(se, _mm512_mul_pd(e, e));
        mx = _mm512_max_pd(_mm512_andnot_pd(sign, e), mx);
    }
    double lsx[8], lse[8], lmx[8];
    _mm512_storeu_pd(lsx, sx);
    _mm512_storeu_pd(lse, se);
    _mm512_storeu_pd(lmx, mx);
    quant_errstats_finish(x + j, d + j, n - j, lsx, lse, lmx, acc);
}

/* ---- error sums straight from the codes ------------------------------------------------------ */

/* One errstats step: elements x/d (8 lanes) into the 8 double lanes, as errstats_avx512 does. */
ALWAYS_INLINE void err8(__m256 x, __m256 d, __m512d *sx, __m512d *se, __m512d *mx)
{
    __m512d xv = _mm512_cvtps_pd(x);
    __m512d e = _mm512_sub_pd(xv, _mm512_cvtps_pd(d));
    *sx = _mm512_add_pd(*sx, _mm512_mul_pd(xv, xv));
    *se = _mm512_add_pd(*se, _mm512_mul_pd(e, e));
    *mx = _mm512_max_pd(_mm512_andnot_pd(_mm512_set1_pd(-0.0), e), *mx);
}

/* The column group under the 16 lanes at element j for tiles of 16 and more: at most one group
 * boundary inside a step, so a step's scales are the group's or a blend with the next one. */
typedef struct errq_group {
    int64_t g, end; /* current group, its end relative to the chunk */
    __m512 s, z;    /* its scale and zero point in every lane */
} errq_group;

ALWAYS_INLINE __m512 errq_zp(const quant_krow *r, int64_t g)
{
    return _mm512_set1_ps(r->zp ? (float)r->zp[g] : 0.0f);
}

/* Scale and zero point of the 16 lanes at j (the lanes below n, for a tail). */
ALWAYS_INLINE void errq_step_scales(const quant_krow *r, errq_group *gr, int64_t j, int64_t n,
                                    int64_t c0, __mmask16 m, __m512 *s, __m512 *z)
{
    if (r->tile == 1) {
        *s = _mm512_maskz_loadu_ps(m, r->scale + c0 + j);
        *z = r->zp ? _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(m, r->zp + c0 + j))
                   : _mm512_setzero_ps();
        return;
    }
    if (j + 16 <= gr->end || gr->end >= n) {
        *s = gr->s;
        *z = gr->z;
        return;
    }
    __mmask16 first = lanes(gr->end - j);
    gr->g++;
    gr->end += r->tile;
    __m512 s1 = _mm512_set1_ps(r->scale[gr->g]), z1 = errq_zp(r, gr->g);
    *s = _mm512_mask_blend_ps(first, s1, gr->s);
    *z = _mm512_mask_blend_ps(first, z1, gr->z);
    gr->s = s1;
    gr->z = z1;
}

/* The 16 dequantized values at j (lanes m): (level - z) * s, or level * s, as deq16. */
ALWAYS_INLINE __m512 errq_deq16(quant_kcode kc, const uint8_t *c, __mmask16 m, __m512 lv, __m512 s,
                                __m512 z, bool asym)
{
    __m512 l = levels16(kc, c, m, lv);
    if (asym) l = _mm512_sub_ps(l, z);
    return _mm512_mul_ps(l, s);
}

/* One full step: the 16 elements at j into the lanes, 0..7 then 8..15. */
ALWAYS_INLINE void errq_step(quant_kcode kc, bool bf16, const void *x, const uint8_t *c, int64_t j,
                             __m512 lv, __m512 s, __m512 z, bool asym, __m512d *sx, __m512d *se,
                             __m512d *mx)
{
    __m512 d = errq_deq16(kc, c, 0xffff, lv, s, z, asym);
    __m512 xv = src_load(x, bf16, j, 0xffff);
    err8(_mm512_castps512_ps256(xv), _mm512_castps512_ps256(d), sx, se, mx);
    err8(_mm512_extractf32x8_ps(xv, 1), _mm512_extractf32x8_ps(d, 1), sx, se, mx);
}

ALWAYS_INLINE int errstats_codes_kc(quant_kcode kc, bool bf16, const quant_krow *r, const void *x,
                                    const uint8_t *codes, int64_t n, int64_t c0, double acc[3])
{
    if (r->tile != 1 && r->tile < 16) return 1;
    if (n <= 0) return 0; /* nothing to add, and no group's scale to read */
    const int64_t csize = kc == QK_I16 ? 2 : 1;
    const __m512 lv = kc == QK_NF4    ? _mm512_loadu_ps(quant_nf4_levels)
                      : kc == QK_E2M1 ? _mm512_loadu_ps(quant_e2m1_levels)
                                      : _mm512_setzero_ps();
    const bool asym = r->zp != NULL;
    errq_group gr = {0, 0, _mm512_setzero_ps(), _mm512_setzero_ps()};
    if (r->tile != 1) {
        gr.g = c0 / r->tile;
        gr.end = (gr.g + 1) * r->tile - c0;
        gr.s = _mm512_set1_ps(r->scale[gr.g]);
        gr.z = errq_zp(r, gr.g);
    }
    __m512d sx = _mm512_setzero_pd(), se = sx, mx = sx;
    __m512 s, z;
    int64_t j = 0;
    while (j + 16 <= n) {
        if (r->tile != 1 && j + 16 <= gr.end) { /* the steps inside one group */
            int64_t stop = gr.end < n ? gr.end : n;
            for (; j + 16 <= stop; j += 16)
                errq_step(kc, bf16, x, codes + j * csize, j, lv, gr.s, gr.z, asym, &sx, &se, &mx);
            continue;
        }
        errq_step_scales(r, &gr, j, n, c0, 0xffff, &s, &z);
        errq_step(kc, bf16, x, codes + j * csize, j, lv, s, z, asym, &sx, &se, &mx);
        j += 16;
    }
    float xt[16], dt[16];
    int64_t rest = n - j, off = 0;
    if (rest > 0) {
        __mmask16 m = lanes(rest);
        errq_step_scales(r, &gr, j, n, c0, m, &s, &z);
        __m512 d = errq_deq16(kc, codes + j * csize, m, lv, s, z, asym);
        __m512 xv = src_load(x, bf16, j, m);
        if (rest >= 8) {
            err8(_mm512_castps512_ps256(xv), _mm512_castps512_ps256(d), &sx, &se, &mx);
            off = 8;
        }
        _mm512_storeu_ps(xt, xv);
        _mm512_storeu_ps(dt, d);
    }
    double lsx[8], lse[8], lmx[8];
    _mm512_storeu_pd(lsx, sx);
    _mm512_storeu_pd(lse, se);
    _mm512_storeu_pd(lmx, mx);
    quant_errstats_finish(xt + off, dt + off, rest > 0 ? rest - off : 0, lsx, lse, lmx, acc);
    return 0;
}

#define ERRQ_FNS(kc, name)                                                                         \
    static int name##_f32(const quant_krow *r, const void *x, const void *c, int64_t n,            \
                          int64_t c0, double acc[3])                                               \
    {                                                                                              \
        return errstats_codes_kc(kc, false, r, x, c, n, c0, acc);                                  \
    }                                                                                              \
    static int name##_bf16(const quant_krow *r, const void *x, const void *c, int64_t n,           \
                           int64_t c0, double acc[3])                                              \
    {                                                                                              \
        return errstats_codes_kc(kc, true, r, x, c, n, c0, acc);                                   \
    }
ERRQ_FNS(QK_I8, errq_i8)
ERRQ_FNS(QK_U8, errq_u8)
ERRQ_FNS(QK_I16, errq_i16)
ERRQ_FNS(QK_E4M3, errq_e4m3)
ERRQ_FNS(QK_E5M2, errq_e5m2)
ERRQ_FNS(QK_NF4, errq_nf4)
ERRQ_FNS(QK_E2M1, errq_e2m1)
#undef ERRQ_FNS

typedef int (*errq_fn)(const quant_krow *r, const void *x, const void *c, int64_t n, int64_t c0,
                       double acc[3]);
/* [code kind][x is bf16] */
static const errq_fn errq_table[QK_COUNT][2] = {
    [QK_I8] = {errq_i8_f32, errq_i8_bf16},       [QK_U8] = {errq_u8_f32, errq_u8_bf16},
    [QK_I16] = {errq_i16_f32, errq_i16_bf16},    [QK_E4M3] = {errq_e4m3_f32, errq_e4m3_bf16},
    [QK_E5M2] = {errq_e5m2_f32, errq_e5m2_bf16}, [QK_NF4] = {errq_nf4_f32, errq_nf4_bf16},
    [QK_E2M1] = {errq_e2m1_f32, errq_e2m1_bf16}};

/* errstats of x against dequantize's values, in registers: tiles of 1 and of 16 and more. */
static int errstats_codes_avx512(const quant_krow *r, const void *x, bool bf16, const void *codes,
                                 int64_t n, int64_t c0, double acc[3])
{
    if ((unsigned)r->kcode >= QK_COUNT) return 1;
    return errq_table[r->kcode][bf16](r, x, codes, n, c0, acc);
}

/* ---- microscaling scales --------------------------------------------------------------------- */

/* Lanes m of a hold a negative, NaN or infinite value (bits above FLT_MAX's). */
ALWAYS_INLINE bool any_unusual(__mmask16 m, __m512 a)
{
    return _mm512_mask_cmpgt_epu32_mask(m, _mm512_castps_si512(a), _mm512_set1_epi32(0x7f7fffff));
}

/* qn_mx_scale per lane of a (>= 0 and finite): s = a / B, the tiny rule, t = bf16(s * C) rounded
 * to nearest even (s * C is finite and positive, so the NaN case of qn_f32_to_bf16 never
 * applies), then the exponent. */
ALWAYS_INLINE __m512 mx_scale16(__m512 a, float bound, float c)
{
    __m512 s = _mm512_div_ps(a, _mm512_set1_ps(bound));
    s = _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(s, _mm512_set1_ps(QN_TINY_SCALE), _CMP_LT_OQ),
                           _mm512_set1_ps(1.0f));
    __m512i b = _mm512_castps_si512(_mm512_mul_ps(s, _mm512_set1_ps(c)));
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    b = _mm512_add_epi32(b, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    /* the bf16 truncation and the mantissa clear in one mask */
    return _mm512_castsi512_ps(_mm512_and_si512(b, _mm512_set1_epi32((int)0xff800000u)));
}

static int mx_scales_avx512(const float *absmax, int64_t n, float bound, float c, float *scale)
{
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = lanes(n - j);
        __m512 a = _mm512_maskz_loadu_ps(m, absmax + j);
        if (any_unusual(m, a)) return 1;
        _mm512_mask_storeu_ps(scale + j, m, mx_scale16(a, bound, c));
    }
    return 0;
}

/* qn_nvfp4_block_scale per lane of a (>= 0 and finite): e4m3fn(f32(a / 6) * g) by fp8_codes
 * (clip and round to nearest even, as qn_quant_e4m3fn), back to float by fp8_levels,
 * 0 -> 0.125, then / g. */
ALWAYS_INLINE __m512 nvfp4_scale16(__m512 a, __m512 gv)
{
    __m512 v = _mm512_mul_ps(_mm512_div_ps(a, _mm512_set1_ps(6.0f)), gv);
    __m512 sb = fp8_levels(fp8_codes(v, QN_E4M3_MAX, 3, 7), 3, 7, false);
    sb = _mm512_mask_mov_ps(sb, _mm512_cmp_ps_mask(sb, _mm512_setzero_ps(), _CMP_EQ_OQ),
                            _mm512_set1_ps(0.125f));
    return _mm512_div_ps(sb, gv);
}

static int nvfp4_scales_avx512(const float *absmax, int64_t n, float g, float *scale)
{
    const __m512 gv = _mm512_set1_ps(g);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = lanes(n - j);
        __m512 a = _mm512_maskz_loadu_ps(m, absmax + j);
        if (any_unusual(m, a)) return 1;
        _mm512_mask_storeu_ps(scale + j, m, nvfp4_scale16(a, gv));
    }
    return 0;
}

/* quant_generic_lin_scales, 16 lanes at a time: the same IEEE division and tiny rule; a result
 * that is not finite (NaN, or above FLT_MAX) makes it return nonzero. */
static int lin_scales_avx512(const float *absmax, int64_t n, float bound, float *scale)
{
    __mmask16 bad = 0;
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = lanes(n - j);
        __m512 s = _mm512_div_ps(_mm512_maskz_loadu_ps(m, absmax + j), _mm512_set1_ps(bound));
        s = _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(s, _mm512_set1_ps(QN_TINY_SCALE), _CMP_LT_OQ),
                               _mm512_set1_ps(1.0f));
        bad |= _mm512_mask_cmp_ps_mask(m, s, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
        _mm512_mask_storeu_ps(scale + j, m, s);
    }
    return bad != 0;
}

/* MSE search terms (SPEC 9), eight elements per vector, each the exact float64 formula. */
static void mse_terms_avx512(const float *x, const float *d, const float *w, int64_t n, double *t)
{
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512d e = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + j)),
                                  _mm512_cvtps_pd(_mm256_loadu_ps(d + j)));
        __m512d sq = _mm512_mul_pd(e, e);
        _mm512_storeu_pd(t + j, _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(w + j)), sq));
    }
    quant_generic_mse_terms(x + j, d + j, w + j, n - j, t + j);
}

static void mse_acc_avx512(const float *x, const float *d, int64_t ds, int nk, const float *w,
                           int64_t n, int64_t c0, int64_t tile, double *err, int64_t es)
{
    quant_mse_acc_with(mse_terms_avx512, x, d, ds, nk, w, n, c0, tile, err, es);
}
/* quant_mse_int_fn: 16 candidates per vector (x broadcast per element), each lane its own
 * candidate's code by the IEEE division (clipped before the rounding, which equals rounding then
 * clipping as the bounds are integers, and keeps a huge quotient from the conversion's
 * overflow), its float32 product, and its float64 sum in element order. */
ALWAYS_INLINE void mse_int16(const float *x, const float *w, const bool unit, int64_t j,
                             int64_t end, __m512 s, __m512 qmin, __m512 qmax, __m512d *acc0,
                             __m512d *acc1)
{
    __m512d a0 = *acc0, a1 = *acc1;
    for (int64_t i = j; i < end; i++) {
        __m512 v = _mm512_div_ps(_mm512_set1_ps(x[i]), s);
        v = _mm512_min_ps(_mm512_max_ps(v, qmin), qmax);
        __m512 d = _mm512_mul_ps(
            _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), s);
        __m512d xd = _mm512_set1_pd((double)x[i]), wd = _mm512_set1_pd(unit ? 1.0 : (double)w[i]);
        __m512d e0 = _mm512_sub_pd(xd, _mm512_cvtps_pd(_mm512_castps512_ps256(d)));
        __m512d e1 = _mm512_sub_pd(xd, _mm512_cvtps_pd(_mm512_extractf32x8_ps(d, 1)));
        a0 = _mm512_add_pd(a0,
                           unit ? _mm512_mul_pd(e0, e0) : _mm512_mul_pd(wd, _mm512_mul_pd(e0, e0)));
        a1 = _mm512_add_pd(a1,
                           unit ? _mm512_mul_pd(e1, e1) : _mm512_mul_pd(wd, _mm512_mul_pd(e1, e1)));
    }
    *acc0 = a0;
    *acc1 = a1;
}

/* The same for a last batch of at most 8 candidates: mse_lanes8.h. */
#include "mse_lanes8.h"

static void mse_int_avx512(const float *x, const float *w, int64_t n, int64_t c0, int64_t tile,
                           const float *scale, int nk, int64_t es, float qmin, float qmax,
                           double *err)
{
    const __m512 qn = _mm512_set1_ps(qmin), qx = _mm512_set1_ps(qmax);
    for (int64_t j = 0; j < n;) {
        int64_t g = (c0 + j) / tile, end = (g + 1) * tile - c0;
        if (end > n) end = n;
        for (int k0 = 0; k0 < nk; k0 += 16) {
            int m = nk - k0 < 16 ? nk - k0 : 16;
            float sv[16];
            double av[16];
            for (int b = 0; b < 16; b++) { /* spare lanes: scale 1, sums dropped */
                sv[b] = b < m ? scale[(k0 + b) * es + g] : 1.0f;
                av[b] = b < m ? err[(k0 + b) * es + g] : 0.0;
            }
            if (m <= 8) { /* a last few candidates: half the lanes (n = 20: 16 + 5) */
                __m256d a0 = _mm256_loadu_pd(av), a1 = _mm256_loadu_pd(av + 4);
                __m256 q0 = _mm512_castps512_ps256(qn), q1 = _mm512_castps512_ps256(qx);
                if (w)
                    mse_int8(x, w, false, j, end, _mm256_loadu_ps(sv), q0, q1, &a0, &a1);
                else /* all weights 1: 1 * (e * e) is e * e */
                    mse_int8(x, w, true, j, end, _mm256_loadu_ps(sv), q0, q1, &a0, &a1);
                _mm256_storeu_pd(av, a0);
                _mm256_storeu_pd(av + 4, a1);
            } else {
                __m512d a0 = _mm512_loadu_pd(av), a1 = _mm512_loadu_pd(av + 8);
                if (w)
                    mse_int16(x, w, false, j, end, _mm512_loadu_ps(sv), qn, qx, &a0, &a1);
                else
                    mse_int16(x, w, true, j, end, _mm512_loadu_ps(sv), qn, qx, &a0, &a1);
                _mm512_storeu_pd(av, a0);
                _mm512_storeu_pd(av + 8, a1);
            }
            for (int b = 0; b < m; b++) err[(k0 + b) * es + g] = av[b];
        }
        j = end;
    }
}

/* ---- quantize: one pass for symmetric absmax tiles ------------------------------------------ */

/* quant_quantize_absmax_fn: 16 groups at a time, reduced in registers (absmax16_groups), their
 * scales computed as lin_scales_avx512 does, then the groups quantized from L1 by the IEEE
 * division, so the codes are the scalar path's by construction and no tie needs a redo: on the
 * cores measured (AMD Zen 4) a 16-lane division costs less than the reciprocal path's tie test
 * and its bookkeeping (BENCHMARKS.md). */

/* One group's scale from its max |x| bits: the IEEE division and tiny rule of
 * quant_generic_lin_scales; *bad is set when the scale is not finite (NaN or Inf in the group
 * gives a NaN or Inf scale). */
ALWAYS_INLINE float onepass_scale(uint32_t amax, float bound, bool *bad)
{
    float s = qn_float(amax) / bound;
    s = s < QN_TINY_SCALE ? 1.0f : s;
    *bad |= !(s <= FLT_MAX);
    return s;
}

/* Clipped integer codes of the 16 values at x divided by s. |x / s| stays within the bound (a
 * few units in the last place past it), far inside int32, so the conversion is rint's. */
ALWAYS_INLINE __m512i onepass_codes(const float *x, __m512 s, __m512i qmin, __m512i qmax)
{
    __m512i c = _mm512_cvt_roundps_epi32(_mm512_div_ps(_mm512_loadu_ps(x), s), RNE);
    return _mm512_min_epi32(_mm512_max_epi32(c, qmin), qmax);
}

ALWAYS_INLINE int onepass_kc(quant_kcode kc, const quant_krow *r, const float *x, int64_t n,
                             int64_t c0, float bound, float *scale, uint8_t *out,
                             const int64_t tile)
{
    const int64_t csize = kc == QK_I16 ? 2 : 1;
    const __m512i qmin = _mm512_set1_epi32((int32_t)r->qmin);
    const __m512i qmax = _mm512_set1_epi32((int32_t)r->qmax);
    const __m512 bv = _mm512_set1_ps(bound);
    float *sg = scale + c0 / tile;
    __mmask16 badv = 0;
    int64_t j = 0;
    for (; j + 16 * tile <= n; j += 16 * tile, sg += 16) {
        __m512 s = _mm512_div_ps(_mm512_castsi512_ps(absmax16_groups(x + j, tile)), bv);
        s = _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(s, _mm512_set1_ps(QN_TINY_SCALE), _CMP_LT_OQ),
                               _mm512_set1_ps(1.0f));
        badv |= _mm512_cmp_ps_mask(s, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
        _mm512_storeu_ps(sg, s);
        for (int64_t k = 0; k < 16 * tile; k += 64) {
            prefetch64(r->pf, r->pf_elem, j + k);
            __m512 s0 = _mm512_permutexvar_ps(_mm512_set1_epi32((int)(k / tile)), s);
            __m512 s1 = _mm512_permutexvar_ps(_mm512_set1_epi32((int)((k + 16) / tile)), s);
            __m512 s2 = _mm512_permutexvar_ps(_mm512_set1_epi32((int)((k + 32) / tile)), s);
            __m512 s3 = _mm512_permutexvar_ps(_mm512_set1_epi32((int)((k + 48) / tile)), s);
            const float *xk = x + j + k;
            store64(kc, out + (j + k) * csize, onepass_codes(xk, s0, qmin, qmax),
                    onepass_codes(xk + 16, s1, qmin, qmax), onepass_codes(xk + 32, s2, qmin, qmax),
                    onepass_codes(xk + 48, s3, qmin, qmax));
        }
    }
    bool bad = badv != 0;
    for (; j < n; j += tile, sg++) { /* the last groups, fewer than 16 */
        *sg = onepass_scale(seg_absmax_bits(x + j, tile), bound, &bad);
        const __m512 s = _mm512_set1_ps(*sg);
        for (int64_t k = 0; k < tile; k += 16)
            store16(kc, out + (j + k) * csize, 0xffff, onepass_codes(x + j + k, s, qmin, qmax));
    }
    return bad;
}

#define ONEPASS_TILES(kc)                                                                          \
    (r->tile == 16   ? onepass_kc(kc, r, x, n, c0, bound, scale, codes, 16)                        \
     : r->tile == 32 ? onepass_kc(kc, r, x, n, c0, bound, scale, codes, 32)                        \
                     : onepass_kc(kc, r, x, n, c0, bound, scale, codes, 64))

static int quantize_absmax_avx512(const quant_krow *r, const float *x, int64_t n, int64_t c0,
                                  float bound, float *scale, void *codes)
{
    if (!QUANT_ONEPASS_TILE_OK(r->tile) || c0 % r->tile || n % r->tile) return 1;
    switch (r->kcode) {
    case QK_I8:
        return ONEPASS_TILES(QK_I8);
    case QK_U8:
        return ONEPASS_TILES(QK_U8);
    case QK_I16:
        return ONEPASS_TILES(QK_I16);
    default:
        return 1;
    }
}
#undef ONEPASS_TILES

/* ---- quantize: one pass, generalised (microscaling scales, bf16 read in place) -------------- */

/* quant_quantize_onepass_fn: as onepass_kc, 16 groups reduced in registers, their scales derived
 * in registers by the qtype's rule, then the groups' codes from L1, the source read once in
 * order. A bf16 source is widened in registers (exact), never copied.
 *
 * MX scales need no division per element. Claim: for s = 2^e a positive normal float32
 * (e in [-126, 127]) and any float32 x, fl(x * (1/s)) == fl(x / s) bit for bit. Proof: 1/s =
 * 2^-e lies in [2^-127, 2^126], and every power of two in that range is a float32 (2^-127 as a
 * subnormal), so r = 1/s is computed exactly and the real numbers x * r and x / s are equal.
 * IEEE 754 gives each operation the correctly rounded value of its exact real result in the
 * current rounding mode (round to nearest even here, no flush to zero: libquant never sets
 * FTZ/DAZ), so both return the rounding of the same real number: the same float, including a
 * subnormal or zero result (rounded once, gradually underflowing) and the sign of zero. SPEC
 * 2b's scale is 2^floor(log2 t) with t >= 2^-63 (the tiny rule) and t < 2^127 for finite input,
 * so every MX scale satisfies the claim; the kernel still checks it per group (mantissa bits
 * zero, exponent field 1..254) and declines a group that fails, the three-pass path then
 * dividing. Ties need no test at all: the product is the quotient, not an approximation of it.
 *
 * nvfp4's e_b = s_b / g is not a power of two: its codes take the IEEE division (16 lanes per
 * instruction, from L1, hidden behind the memory stream; BENCHMARKS.md). */

/* The 16 source values at element j: float32, or bf16 widened in registers. */
ALWAYS_INLINE __m512 op_load(const void *x, const bool bf16, int64_t j)
{
    if (bf16) return bf16x16(_mm256_loadu_si256((const __m256i *)((const uint16_t *)x + j)));
    return _mm512_loadu_ps((const float *)x + j);
}

/* max |x| bits of the group at element `at` (tile % 16 == 0), as 16 partial maxima. */
ALWAYS_INLINE __m512i op_group_absmax(const void *x, const bool bf16, int64_t at, int64_t tile)
{
    __m512i m = abs_bits(op_load(x, bf16, at));
    for (int64_t k = 16; k < tile; k += 16)
        m = _mm512_max_epu32(m, abs_bits(op_load(x, bf16, at + k)));
    return m;
}

/* max |x| bits of the 16 whole groups from element `at`, lane i for group i (absmax16_groups'
 * transposing reduction). */
ALWAYS_INLINE __m512i op_absmax16(const void *x, const bool bf16, int64_t at, int64_t tile)
{
#define GM(i) op_group_absmax(x, bf16, at + (i)*tile, tile)
    __m512i t0 = max_halves(GM(0), GM(1)), t1 = max_halves(GM(2), GM(3));
    __m512i t2 = max_halves(GM(4), GM(5)), t3 = max_halves(GM(6), GM(7));
    __m512i t4 = max_halves(GM(8), GM(9)), t5 = max_halves(GM(10), GM(11));
    __m512i t6 = max_halves(GM(12), GM(13)), t7 = max_halves(GM(14), GM(15));
#undef GM
    __m512i u0 = max_quarters(t0, t1), u1 = max_quarters(t2, t3);
    __m512i u2 = max_quarters(t4, t5), u3 = max_quarters(t6, t7);
    __m512i y = max_singles(max_pairs(u0, u1), max_pairs(u2, u3));
    return _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), y);
}

/* Scales of 16 groups from their max |x| bits `ab` by the rule `kind` (a compile-time constant)
 * into *s, and into *f what the codes use: 1/s for MX (exact, see above), s otherwise. Returns
 * the lanes that make the kernel decline: a non-finite max |x| or scale, or an MX scale that is
 * not a normal power of two. */
ALWAYS_INLINE __mmask16 op_scales16(const quant_scale_kind kind, __m512i ab,
                                    const quant_onepass *op, __m512 *s, __m512 *f)
{
    __mmask16 bad = _mm512_cmpge_epu32_mask(ab, _mm512_set1_epi32(0x7f800000));
    __m512 a = _mm512_castsi512_ps(ab);
    if (kind == QUANT_SCALE_MX) {
        *s = mx_scale16(a, op->bound, op->c);
        __m512i b = _mm512_castps_si512(*s);
        bad |= _mm512_test_epi32_mask(b, _mm512_set1_epi32(0x007fffff));
        bad |= _mm512_cmpgt_epu32_mask(_mm512_sub_epi32(b, _mm512_set1_epi32(1 << 23)),
                                       _mm512_set1_epi32(253 << 23));
        *f = _mm512_div_ps(_mm512_set1_ps(1.0f), *s);
        return bad;
    }
    if (kind == QUANT_SCALE_NVFP4) {
        *s = nvfp4_scale16(a, _mm512_set1_ps(op->g));
    } else {
        __m512 v = _mm512_div_ps(a, _mm512_set1_ps(op->bound));
        *s = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_set1_ps(QN_TINY_SCALE), _CMP_LT_OQ),
                                _mm512_set1_ps(1.0f));
    }
    *f = *s;
    return bad | _mm512_cmp_ps_mask(*s, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
}

/* e2m1_codes for finite v (a NaN makes the one-pass kernel decline, so its lanes need no
 * care): the same rounding add, the sign bit moved in by one ternary-logic op. */
ALWAYS_INLINE __m512i op_e2m1_codes(__m512 v)
{
    const __m512i emin = _mm512_set1_epi32(127 << 23);
    __m512 a = _mm512_range_ps(v, _mm512_set1_ps(6.0f), RANGE_ABSMIN_CLEAR);
    __m512i ebits = _mm512_max_epu32(
        _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7f800000)), emin);
    __m512i c = _mm512_add_epi32(ebits, _mm512_set1_epi32(22 << 23));
    __m512 s = _mm512_add_round_ps(a, _mm512_castsi512_ps(c), RNE);
    __m512i steps = _mm512_sub_epi32(_mm512_castps_si512(s), c);
    __m512i m = _mm512_add_epi32(steps, _mm512_srli_epi32(_mm512_sub_epi32(ebits, emin), 22));
    /* m | ((v >> 28) & 8) */
    return _mm512_ternarylogic_epi32(m, _mm512_srli_epi32(_mm512_castps_si512(v), 28),
                                     _mm512_set1_epi32(8), 0xf8);
}

/* Codes of the 16 values xv of a group whose factor is f (x * f for MX, x / f otherwise). */
ALWAYS_INLINE __m512i op_codes(quant_kcode kc, const quant_scale_kind kind, __m512 xv, __m512 f,
                               __m512i qmin, __m512i qmax)
{
    __m512 v = kind == QUANT_SCALE_MX ? _mm512_mul_ps(xv, f) : _mm512_div_ps(xv, f);
    if (kc == QK_E2M1) return op_e2m1_codes(v);
    if (kc == QK_E4M3) return fp8_codes(v, QN_E4M3_MAX, 3, 7);
    __m512i c = _mm512_cvt_roundps_epi32(v, RNE); /* |v| is within the bound: as onepass_codes */
    return _mm512_min_epi32(_mm512_max_epi32(c, qmin), qmax);
}

/* Stores 64 byte-sized codes (store64's packing) at dst, or with `pack` (e2m1, or minmax's int4 /
 * uint4) as 32 bytes of nibble pairs at dst (pack64: element 2i in the low nibble), without a
 * staging pass. The codes are narrowed with signed saturation: int4's negative codes keep their
 * low nibble, and e2m1's (0..15) and uint4's are unchanged. */
ALWAYS_INLINE void op_store64(quant_kcode kc, const bool pack, uint8_t *dst, __m512i a, __m512i b,
                              __m512i c, __m512i d)
{
    if (!pack) {
        store64(kc, dst, a, b, c, d);
        return;
    }
    __m512i bytes = _mm512_packs_epi16(_mm512_packs_epi32(a, b), _mm512_packs_epi32(c, d));
    const __m512i p = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm256_storeu_si256((__m256i *)dst, pack64(_mm512_permutexvar_epi32(p, bytes)));
}

ALWAYS_INLINE int op_kc(quant_kcode kc, const quant_scale_kind kind, const bool bf16,
                        const bool pack, const quant_krow *r, const void *x, int64_t n, int64_t c0,
                        const quant_onepass *op, float *scale, uint8_t *out, const int64_t tile)
{
    const int64_t csize = kc == QK_I16 ? 2 : 1;
    const __m512i qmin = _mm512_set1_epi32((int32_t)r->qmin);
    const __m512i qmax = _mm512_set1_epi32((int32_t)r->qmax);
    float *sg = scale + c0 / tile;
    __mmask16 badv = 0;
    int64_t j = 0, batch = 16 * tile;
    /* software-pipelined: the next batch's max |x| and scales (a chain of dependent divisions
     * and conversions) are issued before this batch's codes, so they overlap */
    __m512 s = _mm512_setzero_ps(), f = s;
    if (batch <= n) badv |= op_scales16(kind, op_absmax16(x, bf16, 0, tile), op, &s, &f);
    for (; j + batch <= n; j += batch, sg += 16) {
        __m512 s_next = s, f_next = f;
        if (j + 2 * batch <= n)
            badv |= op_scales16(kind, op_absmax16(x, bf16, j + batch, tile), op, &s_next, &f_next);
        _mm512_storeu_ps(sg, s);
        for (int64_t k = 0; k < 16 * tile; k += 64) {
            prefetch64(r->pf, r->pf_elem, j + k);
            __m512 f0 = _mm512_permutexvar_ps(_mm512_set1_epi32((int)(k / tile)), f);
            __m512 f1 = _mm512_permutexvar_ps(_mm512_set1_epi32((int)((k + 16) / tile)), f);
            __m512 f2 = _mm512_permutexvar_ps(_mm512_set1_epi32((int)((k + 32) / tile)), f);
            __m512 f3 = _mm512_permutexvar_ps(_mm512_set1_epi32((int)((k + 48) / tile)), f);
            int64_t e = j + k;
            op_store64(kc, pack, out + (pack ? e / 2 : e * csize),
                       op_codes(kc, kind, op_load(x, bf16, e), f0, qmin, qmax),
                       op_codes(kc, kind, op_load(x, bf16, e + 16), f1, qmin, qmax),
                       op_codes(kc, kind, op_load(x, bf16, e + 32), f2, qmin, qmax),
                       op_codes(kc, kind, op_load(x, bf16, e + 48), f3, qmin, qmax));
        }
        s = s_next;
        f = f_next;
    }
    for (; j < n; j += tile, sg++) { /* the last groups, fewer than 16: one at a time */
        uint32_t a = _mm512_reduce_max_epu32(op_group_absmax(x, bf16, j, tile));
        badv |= op_scales16(kind, _mm512_set1_epi32((int)a), op, &s, &f);
        *sg = _mm512_cvtss_f32(s);
        uint8_t group[64];
        for (int64_t k = 0; k < tile; k += 16)
            store16(kc, pack ? group + k : out + (j + k) * csize, 0xffff,
                    op_codes(kc, kind, op_load(x, bf16, j + k), f, qmin, qmax));
        if (pack) pack_avx512(group, tile, out + j / 2);
    }
    return badv != 0;
}

/* bf16 rows, integer byte codes, tiles of 32 and more (a multiple of 32): 32 values per load,
 * never widened one by one. The even elements become float32 by a shift (bits << 16), the odd
 * ones by a mask (bits & 0xffff0000): exact, the same floats as bf16x16. max |x| runs on the
 * 16-bit halves (magnitudes of bf16 order like their bit patterns, as those of float32), the
 * transposing reduction keeping each half's maximum; the codes of the even and odd lanes are
 * interleaved back as (even & 0xff) | odd << 8 in each 32-bit lane and narrowed to 16 bits
 * (vpmovdw truncates: the two bytes in element order). */
ALWAYS_INLINE __m512i pair_halves(__m512i a, __m512i b)
{
    return _mm512_max_epu16(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xee));
}

ALWAYS_INLINE __m512i pair_quarters(__m512i a, __m512i b)
{
    return _mm512_max_epu16(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xdd));
}

ALWAYS_INLINE __m512i pair_pairs(__m512i a, __m512i b)
{
    return _mm512_max_epu16(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

ALWAYS_INLINE __m512i pair_singles(__m512i a, __m512i b)
{
    __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
    return _mm512_max_epu16(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0x88)),
                            _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0xdd)));
}

/* |x| of the group at element `at`, as 32 16-bit partial maxima. */
ALWAYS_INLINE __m512i pair_group(const uint16_t *x, int64_t at, int64_t tile)
{
    const __m512i mag = _mm512_set1_epi16(0x7fff);
    __m512i m = _mm512_and_si512(_mm512_loadu_si512(x + at), mag);
    for (int64_t k = 32; k < tile; k += 32)
        m = _mm512_max_epu16(m, _mm512_and_si512(_mm512_loadu_si512(x + at + k), mag));
    return m;
}

/* max |x| float32 bits of the 16 whole groups from element `at`, lane i for group i. */
ALWAYS_INLINE __m512i pair_absmax16(const uint16_t *x, int64_t at, int64_t tile)
{
#define GM(i) pair_group(x, at + (i)*tile, tile)
    __m512i t0 = pair_halves(GM(0), GM(1)), t1 = pair_halves(GM(2), GM(3));
    __m512i t2 = pair_halves(GM(4), GM(5)), t3 = pair_halves(GM(6), GM(7));
    __m512i t4 = pair_halves(GM(8), GM(9)), t5 = pair_halves(GM(10), GM(11));
    __m512i t6 = pair_halves(GM(12), GM(13)), t7 = pair_halves(GM(14), GM(15));
#undef GM
    __m512i u0 = pair_quarters(t0, t1), u1 = pair_quarters(t2, t3);
    __m512i u2 = pair_quarters(t4, t5), u3 = pair_quarters(t6, t7);
    __m512i y = pair_singles(pair_pairs(u0, u1), pair_pairs(u2, u3));
    y = _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), y);
    /* the larger half of each lane, as float32 bits */
    return _mm512_slli_epi32(_mm512_max_epu16(y, _mm512_srli_epi32(y, 16)), 16);
}

/* Clipped integer codes of v / s (as onepass_codes). */
ALWAYS_INLINE __m512i pair_codes(__m512 v, __m512 s, __m512i qmin, __m512i qmax)
{
    __m512i c = _mm512_cvt_roundps_epi32(_mm512_div_ps(v, s), RNE);
    return _mm512_min_epi32(_mm512_max_epi32(c, qmin), qmax);
}

ALWAYS_INLINE int pairs_kc(quant_kcode kc, const quant_krow *r, const uint16_t *x, int64_t n,
                           int64_t c0, const quant_onepass *op, float *scale, uint8_t *out,
                           const int64_t tile)
{
    const __m512i qmin = _mm512_set1_epi32((int32_t)r->qmin);
    const __m512i qmax = _mm512_set1_epi32((int32_t)r->qmax);
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u), low = _mm512_set1_epi32(0xff);
    float *sg = scale + c0 / tile;
    __mmask16 badv = 0;
    int64_t j = 0, batch = 16 * tile;
    __m512 s = _mm512_setzero_ps(), f = s; /* pipelined as in op_kc */
    if (batch <= n) badv |= op_scales16(QUANT_SCALE_LINEAR, pair_absmax16(x, 0, tile), op, &s, &f);
    for (; j + batch <= n; j += batch, sg += 16) {
        __m512 s_next = s, f_next = f;
        if (j + 2 * batch <= n)
            badv |= op_scales16(QUANT_SCALE_LINEAR, pair_absmax16(x, j + batch, tile), op, &s_next,
                                &f_next);
        _mm512_storeu_ps(sg, s);
        for (int64_t k = 0; k < 16 * tile; k += 32) {
            if (k % 64 == 0) prefetch64(r->pf, r->pf_elem, j + k);
            __m512i v = _mm512_loadu_si512(x + j + k);
            __m512 fk = _mm512_permutexvar_ps(_mm512_set1_epi32((int)(k / tile)), f);
            __m512i e = pair_codes(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), fk, qmin, qmax);
            __m512i o = pair_codes(_mm512_castsi512_ps(_mm512_and_si512(v, high)), fk, qmin, qmax);
            /* (e & 0xff) | o << 8 */
            __m512i w = _mm512_ternarylogic_epi32(e, _mm512_slli_epi32(o, 8), low, 0xec);
            _mm256_storeu_si256((__m256i *)(out + j + k), _mm512_cvtepi32_epi16(w));
        }
        s = s_next;
        f = f_next;
    }
    int bad = badv != 0;
    if (j < n) /* the last groups, fewer than 16 */
        bad |= op_kc(kc, QUANT_SCALE_LINEAR, true, false, r, x + j, n - j, c0 + j, op, scale,
                     out + j, tile);
    return bad;
}

/* ---- quantize: one pass, asymmetric (minmax calibration) ------------------------------------ */

/* quant_quantize_onepass_fn with op->minmax: as op_kc, 16 groups per batch, their min and max
 * reduced in registers (the transposing reduction of op_absmax16 on float min / max), the
 * scales and zero points derived in registers with the scalar path's operations in its order
 * (quant_reduce_finish, then quant_scale_range's asymmetric branch), then the codes from L1 by
 * the IEEE division plus the zero point, clipped and rounded as int_codes (the scalar
 * quant_generic_quantize's x / s + zp). The min and max of a group do not depend on the order
 * of the reduction, but for the sign of a zero, which lo = min(min x, 0) and hi = max(max x, 0)
 * make canonical (+0) as quant_reduce_finish does. A NaN is seen through the max |x| bits (the
 * float min and max drop it), an infinity through its scale. */

ALWAYS_INLINE __m512 mm_op(const bool hi, __m512 a, __m512 b)
{
    return hi ? _mm512_max_ps(a, b) : _mm512_min_ps(a, b);
}

ALWAYS_INLINE __m512 mm_halves(const bool hi, __m512 a, __m512 b)
{
    return mm_op(hi, _mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
}

ALWAYS_INLINE __m512 mm_quarters(const bool hi, __m512 a, __m512 b)
{
    return mm_op(hi, _mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xdd));
}

ALWAYS_INLINE __m512 mm_pairs(const bool hi, __m512 a, __m512 b)
{
    __m512d da = _mm512_castps_pd(a), db = _mm512_castps_pd(b);
    return mm_op(hi, _mm512_castpd_ps(_mm512_unpacklo_pd(da, db)),
                 _mm512_castpd_ps(_mm512_unpackhi_pd(da, db)));
}

ALWAYS_INLINE __m512 mm_singles(const bool hi, __m512 a, __m512 b)
{
    return mm_op(hi, _mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xdd));
}

/* One group at element `at`: its 16 partial minima and maxima; its |x| bits into *seen. */
ALWAYS_INLINE void mm_group(const void *x, const bool bf16, int64_t at, int64_t tile, __m512 *lo,
                            __m512 *hi, __m512i *seen)
{
    __m512 v = op_load(x, bf16, at);
    __m512 l = v, h = v;
    __m512i m = abs_bits(v);
    for (int64_t k = 16; k < tile; k += 16) {
        v = op_load(x, bf16, at + k);
        l = _mm512_min_ps(l, v);
        h = _mm512_max_ps(h, v);
        m = _mm512_max_epu32(m, abs_bits(v));
    }
    *lo = l;
    *hi = h;
    *seen = _mm512_max_epu32(*seen, m);
}

/* Groups 2i and 2i + 1 from `at`, merged by their halves (op_absmax16's first step). */
ALWAYS_INLINE void mm_pair(const void *x, const bool bf16, int64_t at, int64_t tile, __m512 *lo,
                           __m512 *hi, __m512i *seen)
{
    __m512 l0, h0, l1, h1;
    mm_group(x, bf16, at, tile, &l0, &h0, seen);
    mm_group(x, bf16, at + tile, tile, &l1, &h1, seen);
    *lo = mm_halves(false, l0, l1);
    *hi = mm_halves(true, h0, h1);
}

/* The min (lo) and max (hi) of the 16 whole groups from element `at`, lane i for group i. */
ALWAYS_INLINE void mm_minmax16(const void *x, const bool bf16, int64_t at, int64_t tile, __m512 *lo,
                               __m512 *hi, __m512i *seen)
{
    __m512 l[8], h[8];
    for (int i = 0; i < 8; i++) mm_pair(x, bf16, at + 2 * i * tile, tile, &l[i], &h[i], seen);
    __m512 ul0 = mm_quarters(false, l[0], l[1]), ul1 = mm_quarters(false, l[2], l[3]);
    __m512 ul2 = mm_quarters(false, l[4], l[5]), ul3 = mm_quarters(false, l[6], l[7]);
    __m512 uh0 = mm_quarters(true, h[0], h[1]), uh1 = mm_quarters(true, h[2], h[3]);
    __m512 uh2 = mm_quarters(true, h[4], h[5]), uh3 = mm_quarters(true, h[6], h[7]);
    __m512 yl = mm_singles(false, mm_pairs(false, ul0, ul1), mm_pairs(false, ul2, ul3));
    __m512 yh = mm_singles(true, mm_pairs(true, uh0, uh1), mm_pairs(true, uh2, uh3));
    const __m512i p = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    *lo = _mm512_permutexvar_ps(p, yl);
    *hi = _mm512_permutexvar_ps(p, yh);
}

/* Scales (*s) and zero points as float32 (*z) of 16 groups from their min and max; the lanes
 * whose scale is not positive and finite (the kernel then declines). The zero points as int32
 * into *zi. */
ALWAYS_INLINE __mmask16 mm_scales16(__m512 lo, __m512 hi, const quant_onepass *op, __m512 qminf,
                                    __m512 qmaxf, __m512 *s, __m512 *z, __m512i *zi)
{
    const __m512 zero = _mm512_setzero_ps(), f = _mm512_set1_ps(op->factor);
    /* quant_reduce_finish: lo = a < 0 ? a : +0, hi = b > 0 ? b : +0, times the factor */
    lo = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(lo, zero, _CMP_LT_OQ), lo);
    hi = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(hi, zero, _CMP_GT_OQ), hi);
    lo = _mm512_mul_ps(lo, f);
    hi = _mm512_mul_ps(hi, f);
    /* quant_scale_range: s = (max - min) / (qmax - qmin), the tiny rule; float32 scales */
    __m512 v = _mm512_div_ps(_mm512_sub_ps(hi, lo), _mm512_sub_ps(qmaxf, qminf));
    *s = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_set1_ps(QN_TINY_SCALE), _CMP_LT_OQ),
                            _mm512_set1_ps(1.0f));
    __mmask16 bad = _mm512_cmp_ps_mask(*s, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ) |
                    _mm512_cmp_ps_mask(*s, zero, _CMP_NGT_UQ);
    /* qn_convert_int(qmin - min / s): NaN -> 0, else clipped and rounded half to even */
    __m512 w = _mm512_sub_ps(qminf, _mm512_div_ps(lo, *s));
    w = _mm512_mask_mov_ps(w, _mm512_cmp_ps_mask(w, w, _CMP_UNORD_Q), zero);
    *zi = int_codes(w, qminf, qmaxf);
    *z = _mm512_cvtepi32_ps(*zi);
    return bad;
}

/* Codes of the 16 values xv of a group with scale s and zero point z (float32). */
ALWAYS_INLINE __m512i mm_codes(__m512 xv, __m512 s, __m512 z, __m512 qminf, __m512 qmaxf)
{
    return int_codes(_mm512_add_ps(_mm512_div_ps(xv, s), z), qminf, qmaxf);
}

/* The group at element j alone (the last groups of a chunk, fewer than 16): lanes all equal. */
ALWAYS_INLINE __mmask16 mm_tail_group(const void *x, const bool bf16, int64_t j, int64_t tile,
                                      const quant_onepass *op, __m512 qminf, __m512 qmaxf,
                                      __m512 *s, __m512 *z, __m512i *zi, __m512i *seen)
{
    __m512 l, h;
    mm_group(x, bf16, j, tile, &l, &h, seen);
    __m512 lo = _mm512_set1_ps(_mm512_reduce_min_ps(l));
    __m512 hi = _mm512_set1_ps(_mm512_reduce_max_ps(h));
    return mm_scales16(lo, hi, op, qminf, qmaxf, s, z, zi);
}

ALWAYS_INLINE int mm_kc(quant_kcode kc, const bool bf16, const bool pack, const quant_krow *r,
                        const void *x, int64_t n, int64_t c0, const quant_onepass *op, float *scale,
                        uint8_t *out, const int64_t tile)
{
    const __m512 qminf = _mm512_set1_ps(r->qmin), qmaxf = _mm512_set1_ps(r->qmax);
    float *sg = scale + c0 / tile;
    int32_t *zg = op->zp + c0 / tile;
    __mmask16 badv = 0;
    __m512i seen = _mm512_setzero_si512();
    int64_t j = 0, batch = 16 * tile;
    /* software-pipelined as op_kc: the next batch's reduction and scales before these codes */
    __m512 s = _mm512_set1_ps(1.0f), z = _mm512_setzero_ps(), lo, hi;
    __m512i zi = _mm512_setzero_si512();
    if (batch <= n) {
        mm_minmax16(x, bf16, 0, tile, &lo, &hi, &seen);
        badv |= mm_scales16(lo, hi, op, qminf, qmaxf, &s, &z, &zi);
    }
    for (; j + batch <= n; j += batch, sg += 16, zg += 16) {
        __m512 s_next = s, z_next = z;
        __m512i zi_next = zi;
        if (j + 2 * batch <= n) {
            mm_minmax16(x, bf16, j + batch, tile, &lo, &hi, &seen);
            badv |= mm_scales16(lo, hi, op, qminf, qmaxf, &s_next, &z_next, &zi_next);
        }
        _mm512_storeu_ps(sg, s);
        _mm512_storeu_si512(zg, zi);
        for (int64_t k = 0; k < batch; k += 64) {
            prefetch64(r->pf, r->pf_elem, j + k);
            __m512i i0 = _mm512_set1_epi32((int)(k / tile)),
                    i1 = _mm512_set1_epi32((int)((k + 16) / tile));
            __m512i i2 = _mm512_set1_epi32((int)((k + 32) / tile)),
                    i3 = _mm512_set1_epi32((int)((k + 48) / tile));
            int64_t e = j + k;
            op_store64(kc, pack, out + (pack ? e / 2 : e),
                       mm_codes(op_load(x, bf16, e), _mm512_permutexvar_ps(i0, s),
                                _mm512_permutexvar_ps(i0, z), qminf, qmaxf),
                       mm_codes(op_load(x, bf16, e + 16), _mm512_permutexvar_ps(i1, s),
                                _mm512_permutexvar_ps(i1, z), qminf, qmaxf),
                       mm_codes(op_load(x, bf16, e + 32), _mm512_permutexvar_ps(i2, s),
                                _mm512_permutexvar_ps(i2, z), qminf, qmaxf),
                       mm_codes(op_load(x, bf16, e + 48), _mm512_permutexvar_ps(i3, s),
                                _mm512_permutexvar_ps(i3, z), qminf, qmaxf));
        }
        s = s_next;
        z = z_next;
        zi = zi_next;
    }
    for (; j < n; j += tile, sg++, zg++) { /* the last groups, fewer than 16: one at a time */
        badv |= mm_tail_group(x, bf16, j, tile, op, qminf, qmaxf, &s, &z, &zi, &seen);
        *sg = _mm512_cvtss_f32(s);
        *zg = _mm_cvtsi128_si32(_mm512_castsi512_si128(zi));
        uint8_t group[64];
        for (int64_t k = 0; k < tile; k += 16)
            store16(kc, pack ? group + k : out + j + k, 0xffff,
                    mm_codes(op_load(x, bf16, j + k), s, z, qminf, qmaxf));
        if (pack) pack_avx512(group, tile, out + j / 2);
    }
    return badv != 0 || _mm512_reduce_max_epu32(seen) >= 0x7f800000u;
}

#define MM_TILES(kc, bf, pk)                                                                       \
    (r->tile == 16   ? mm_kc(kc, bf, pk, r, x, n, c0, op, scale, codes, 16)                        \
     : r->tile == 32 ? mm_kc(kc, bf, pk, r, x, n, c0, op, scale, codes, 32)                        \
                     : mm_kc(kc, bf, pk, r, x, n, c0, op, scale, codes, 64))
#define MM_PACKED(kc, bf) (op->packed ? MM_TILES(kc, bf, true) : MM_TILES(kc, bf, false))
#define MM_SOURCES(kc)    (op->bf16 ? MM_PACKED(kc, true) : MM_PACKED(kc, false))

/* The minmax rule: int8 / uint8 codes (int4 / uint4 by their qmin and qmax, packed or not). */
static int quantize_minmax_avx512(const quant_krow *r, const void *x, int64_t n, int64_t c0,
                                  const quant_onepass *op, float *scale, void *codes)
{
    if (!op->zp) return 1;
    if (op->packed && (r->qmin < -8.0f || r->qmax > 15.0f)) return 1; /* nibbles only */
    switch (r->kcode) {
    case QK_I8:
        return MM_SOURCES(QK_I8);
    case QK_U8:
        return MM_SOURCES(QK_U8);
    default:
        return 1;
    }
}
#undef MM_SOURCES
#undef MM_PACKED
#undef MM_TILES

#define OP_TILES(kc, kind, bf, pk)                                                                 \
    (r->tile == 16   ? op_kc(kc, kind, bf, pk, r, x, n, c0, op, scale, codes, 16)                  \
     : r->tile == 32 ? op_kc(kc, kind, bf, pk, r, x, n, c0, op, scale, codes, 32)                  \
                     : op_kc(kc, kind, bf, pk, r, x, n, c0, op, scale, codes, 64))
/* the microscaling tiles (16, 32; 64 declined before) */
#define OP_MX_TILES(kc, kind, bf, pk)                                                              \
    (r->tile == 16 ? op_kc(kc, kind, bf, pk, r, x, n, c0, op, scale, codes, 16)                    \
                   : op_kc(kc, kind, bf, pk, r, x, n, c0, op, scale, codes, 32))
#define OP_SOURCES(kc, kind, pk)                                                                   \
    (op->bf16 ? OP_MX_TILES(kc, kind, true, pk) : OP_MX_TILES(kc, kind, false, pk))
#define OP_E2M1(kind)                                                                              \
    (op->packed ? OP_SOURCES(QK_E2M1, kind, true) : OP_SOURCES(QK_E2M1, kind, false))

/* The code kinds each rule serves: integers under linear scales (int8 / uint8, int4 / uint4
 * packed or not, with minmax), e4m3fn and e2m1 under MX scales, e2m1 under nvfp4's. */
static int quantize_onepass_avx512(const quant_krow *r, const void *x, int64_t n, int64_t c0,
                                   const quant_onepass *op, float *scale, void *codes)
{
    if (!QUANT_ONEPASS_TILE_OK(r->tile) || c0 % r->tile || n % r->tile) return 1;
    if (op->minmax)
        return op->kind == QUANT_SCALE_LINEAR
                   ? quantize_minmax_avx512(r, x, n, c0, op, scale, codes)
                   : 1;
    if (op->packed && r->kcode != QK_E2M1) return 1;
    if (op->kind == QUANT_SCALE_LINEAR) {
        if (!op->bf16) { /* the pipelined kernel (onepass_kc stays quantize_absmax) */
            switch (r->kcode) {
            case QK_I8:
                return OP_TILES(QK_I8, QUANT_SCALE_LINEAR, false, false);
            case QK_U8:
                return OP_TILES(QK_U8, QUANT_SCALE_LINEAR, false, false);
            case QK_I16:
                return OP_TILES(QK_I16, QUANT_SCALE_LINEAR, false, false);
            default:
                return 1;
            }
        }
        const uint16_t *h = x;
        switch (r->kcode) {
        case QK_I8:
            if (r->tile == 32) return pairs_kc(QK_I8, r, h, n, c0, op, scale, codes, 32);
            if (r->tile == 64) return pairs_kc(QK_I8, r, h, n, c0, op, scale, codes, 64);
            return OP_TILES(QK_I8, QUANT_SCALE_LINEAR, true, false);
        case QK_U8:
            if (r->tile == 32) return pairs_kc(QK_U8, r, h, n, c0, op, scale, codes, 32);
            if (r->tile == 64) return pairs_kc(QK_U8, r, h, n, c0, op, scale, codes, 64);
            return OP_TILES(QK_U8, QUANT_SCALE_LINEAR, true, false);
        case QK_I16:
            return OP_TILES(QK_I16, QUANT_SCALE_LINEAR, true, false);
        default:
            return 1;
        }
    }
    if (r->tile == 64) return 1;
    if (op->kind == QUANT_SCALE_NVFP4) {
        if (r->kcode != QK_E2M1 || !(op->g > 0.0f && op->g <= FLT_MAX)) return 1;
        return OP_E2M1(QUANT_SCALE_NVFP4);
    }
    if (op->kind != QUANT_SCALE_MX) return 1;
    if (r->kcode == QK_E4M3) return OP_SOURCES(QK_E4M3, QUANT_SCALE_MX, false);
    if (r->kcode == QK_E2M1) return OP_E2M1(QUANT_SCALE_MX);
    return 1;
}
#undef OP_E2M1
#undef OP_SOURCES
#undef OP_MX_TILES
#undef OP_TILES

const quant_kernels quant_kernels_avx512 = {
    .isa = QUANT_ISA_AVX512,
    .absmax = absmax_avx512,
    .minmax = minmax_avx512,
    .quantize = quantize_avx512,
    .dequantize = dequantize_avx512,
    .widen_bf16 = widen_bf16_avx512,
    .widen_f16 = widen_f16_avx512,
    .pack = pack_avx512,
    .errstats = errstats_avx512,
    .mx_scales = mx_scales_avx512,
    .nvfp4_scales = nvfp4_scales_avx512,
    .lin_scales = lin_scales_avx512,
    .absmax_bf16 = absmax_bf16_avx512,
    .quantize_bf16 = quantize_bf16_avx512,
    .mse_acc = mse_acc_avx512,
    .quantize_absmax = quantize_absmax_avx512,
    .mse_int = mse_int_avx512,
    .quantize_onepass = quantize_onepass_avx512,
    .quantize_stream = quantize_stream_avx512,
    .errstats_codes = errstats_codes_avx512,
};
