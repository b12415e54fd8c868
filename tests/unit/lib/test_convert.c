/* test_convert.c -- dtype conversions: every fp8 code of both formats round-trips, every
 * midpoint between neighbours rounds to even, f16/bf16 rounding, and the SIMD widening kernels
 * against the scalar ones over all 65536 half-precision codes.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>

#include "../testutil.h"
#include "internal.h"

typedef struct fp8_format {
    const char *name;
    float (*to_f32)(uint8_t);
    uint8_t (*from_f32)(float);
    uint8_t max_code; /* largest finite positive code */
    uint8_t overflow; /* what values past max + half an ulp become */
} fp8_format;

static const fp8_format formats[] = {
    {"e4m3fn", quant_e4m3fn_to_f32, quant_f32_to_e4m3fn, 0x7e, 0x7f},
    {"e5m2", quant_e5m2_to_f32, quant_f32_to_e5m2, 0x7b, 0x7c},
};

START_TEST(fp8_all_codes_round_trip)
{
    const fp8_format *f = &formats[_i];
    for (int c = 0; c < 256; c++) {
        float v = f->to_f32((uint8_t)c);
        uint8_t back = f->from_f32(v);
        if (isnan(v)) {
            ck_assert_msg(isnan(f->to_f32(back)), "%s NaN code %#x", f->name, c);
            continue;
        }
        if (isinf(v)) {
            ck_assert_msg(back == c, "%s inf code %#x -> %#x", f->name, c, back);
            continue;
        }
        ck_assert_msg(back == c, "%s code %#x = %a -> %#x", f->name, c, (double)v, back);
    }
}
END_TEST

START_TEST(fp8_midpoints_round_to_even)
{
    const fp8_format *f = &formats[_i];
    for (int sign = 0; sign < 2; sign++) {
        for (int c = 0; c < f->max_code; c++) {
            uint8_t lo = (uint8_t)(c | sign << 7), hi = (uint8_t)((c + 1) | sign << 7);
            float a = f->to_f32(lo), b = f->to_f32(hi);
            float mid = (a + b) / 2; /* exact: fp8 values carry at most 4 significant bits */
            uint8_t even = (c & 1) ? hi : lo;
            ck_assert_msg(f->from_f32(mid) == even, "%s mid(%#x,%#x) -> %#x", f->name, lo, hi,
                          f->from_f32(mid));
            ck_assert_int_eq(f->from_f32(nextafterf(mid, a)), lo);
            ck_assert_int_eq(f->from_f32(nextafterf(mid, b)), hi);
        }
        /* past the largest finite value */
        float top = f->to_f32(f->max_code);
        float half_ulp = (top - f->to_f32((uint8_t)(f->max_code - 1))) / 2;
        float edge = sign ? -(top + half_ulp) : top + half_ulp;
        uint8_t s = (uint8_t)(sign << 7);
        uint8_t at_edge = f->from_f32(edge);
        /* e4m3fn: the max code is even, so the tie stays finite; e5m2: 0x7c (inf) is even */
        ck_assert_int_eq(at_edge, (uint8_t)(s | ((f->max_code & 1) ? f->overflow : f->max_code)));
        ck_assert_int_eq(f->from_f32(nextafterf(edge, sign ? -INFINITY : INFINITY)),
                         (uint8_t)(s | f->overflow));
    }
}
END_TEST

START_TEST(fp8_quantizer_clips_and_keeps_negative_zero)
{
    const quant_qtype_traits *e4 = quant_qtype_traits_get(QUANT_QTYPE_FP8_E4M3FN);
    const quant_qtype_traits *e5 = quant_qtype_traits_get(QUANT_QTYPE_FP8_E5M2);
    ck_assert_int_eq(e4->convert(1000.0f), 0x7e);
    ck_assert_int_eq(e4->convert(-1000.0f), 0xfe);
    ck_assert_int_eq(e4->convert(INFINITY), 0x7e);
    ck_assert_int_eq(e5->convert(1e9f), 0x7b);
    ck_assert_int_eq(e5->convert(-INFINITY), 0xfb);
    ck_assert_int_eq(e4->convert(-1e-10f), 0x80);
    ck_assert_int_eq(e5->convert(-1e-10f), 0x80);
    ck_assert_int_eq(e4->convert(-0.0f), 0x80);
    ck_assert_int_eq(e4->convert(0.0f), 0x00);
    ck_assert_float_eq(e4->level(0x80), 0.0f);
    ck_assert(signbit(e4->level(0x80)));
    /* smallest subnormals */
    ck_assert_float_eq(quant_e4m3fn_to_f32(0x01), 0x1p-9f);
    ck_assert_float_eq(quant_e5m2_to_f32(0x01), 0x1p-16f);
    ck_assert(isnan(quant_e4m3fn_to_f32(0x7f)));
    ck_assert(isinf(quant_e5m2_to_f32(0x7c)));
    ck_assert_int_eq(quant_f32_to_e4m3fn(NAN) & 0x7f, 0x7f);
    ck_assert_int_eq(quant_f32_to_e4m3fn(INFINITY), 0x7f); /* no infinity in e4m3fn */
}
END_TEST

/* Round-to-nearest-even reference through double: the nearer of the two candidates, the even
 * one on a tie. */
static int nearer_or_even(double v, double a, double b, int a_even)
{
    double da = fabs(v - a), db = fabs(v - b);
    if (da < db) return 0;
    if (db < da) return 1;
    return a_even ? 0 : 1;
}

START_TEST(bf16_rounding_random)
{
    tu_rng r = {11};
    for (int k = 0; k < tu_iters(1000000); k++) {
        uint32_t u = (uint32_t)tu_next(&r);
        float f = qn_float(u);
        if (isnan(f)) {
            ck_assert(isnan(quant_bf16_to_f32(quant_f32_to_bf16(f))));
            continue;
        }
        uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
        uint16_t got = quant_f32_to_bf16(f);
        if ((lo & 0x7f80u) == 0x7f80u) { /* infinities */
            ck_assert_int_eq(got, lo);
            continue;
        }
        double hv = quant_bf16_to_f32(hi);
        if (isinf(hv)) hv = copysign(0x1p128, hv); /* where the next finite step would be */
        int pick = nearer_or_even(f, quant_bf16_to_f32(lo), hv, !(lo & 1));
        ck_assert_msg(got == (pick ? hi : lo), "bf16(%a) = %#x", (double)f, got);
    }
}
END_TEST

START_TEST(f16_all_codes_and_rounding)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        ck_assert_int_eq(quant_f32_to_f16(f), h);
    }
    ck_assert_int_eq(quant_f32_to_f16(65520.0f), 0x7c00);
    ck_assert_int_eq(quant_f32_to_f16(65519.996f), 0x7bff);
    ck_assert_int_eq(quant_f32_to_f16(0x1p-25f), 0x0000); /* tie to even: 0 */
    ck_assert_int_eq(quant_f32_to_f16(nextafterf(0x1p-25f, 1)), 0x0001);
    ck_assert_int_eq(quant_f32_to_f16(0x1.8p-24f), 0x0002); /* tie between 1 and 2 */
    ck_assert_int_eq(quant_f32_to_f16(-0.0f), 0x8000);
#ifdef __FLT16_MAX__
    tu_rng r = {5};
    for (int k = 0; k < tu_iters(1000000); k++) {
        float f = qn_float((uint32_t)tu_next(&r) & 0xbfffffffu); /* keep magnitudes sane */
        if (k & 1) f = ldexpf(f, -(int)tu_below(&r, 40));
        __extension__ _Float16 ref = f;
        uint16_t want;
        memcpy(&want, &ref, 2);
        if (isnan(f)) continue;
        ck_assert_msg(quant_f32_to_f16(f) == want, "f16(%a)", (double)f);
    }
#endif
}
END_TEST

START_TEST(widen_kernels_match_scalar)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int n = tu_isas(isas);
    static uint16_t all[65536];
    static float want[65536], got[65536];
    for (uint32_t h = 0; h < 65536; h++) all[h] = (uint16_t)h;
    for (int i = 0; i < n; i++) {
        const quant_kernels *k = quant_kernels_for(isas[i]);
        quant_kernels_generic.widen_f16(all, want, 65536);
        k->widen_f16(all, got, 65536);
        for (uint32_t h = 0; h < 65536; h++)
            ck_assert_msg(qn_bits(want[h]) == qn_bits(got[h]), "%s f16 %#x: %#x vs %#x",
                          quant_isa_name(isas[i]), h, qn_bits(want[h]), qn_bits(got[h]));
        quant_kernels_generic.widen_bf16(all, want, 65536);
        k->widen_bf16(all, got, 65536);
        ck_assert_int_eq(memcmp(want, got, sizeof want), 0);
    }
}
END_TEST

START_TEST(convert_api)
{
    double d[3] = {1.0 + 0x1p-30, -2.5, 1e300};
    float f[3];
    quant_error err;
    ck_assert_int_eq(quant_convert(QUANT_DTYPE_F64, d, QUANT_DTYPE_F32, f, 3, &err), QUANT_OK);
    ck_assert_float_eq(f[0], 1.0f);
    ck_assert_float_eq(f[1], -2.5f);
    ck_assert(isinf(f[2]));
    uint8_t e4[3];
    float in[3] = {448.0f, -0.001953125f, 0.3f};
    ck_assert_int_eq(quant_convert(QUANT_DTYPE_F32, in, QUANT_DTYPE_F8_E4M3, e4, 3, &err),
                     QUANT_OK);
    ck_assert_int_eq(e4[0], 0x7e);
    ck_assert_int_eq(e4[1], 0x81);
    uint16_t bf[3];
    ck_assert_int_eq(quant_convert(QUANT_DTYPE_F8_E4M3, e4, QUANT_DTYPE_BF16, bf, 3, &err),
                     QUANT_OK);
    ck_assert_float_eq(quant_bf16_to_f32(bf[0]), 448.0f);
    ck_assert_int_eq(quant_convert(QUANT_DTYPE_I8, e4, QUANT_DTYPE_F32, f, 3, &err),
                     QUANT_ERR_DTYPE);
    ck_assert_ptr_nonnull(strstr(err.message, "I8"));
    ck_assert_int_eq(quant_convert(QUANT_DTYPE_F32, NULL, QUANT_DTYPE_F32, f, 3, &err),
                     QUANT_ERR_ARG);
    ck_assert_int_eq(quant_dtype_size(QUANT_DTYPE_BF16), 2);
    ck_assert_str_eq(quant_dtype_name(QUANT_DTYPE_F8_E5M2), "F8_E5M2");
    ck_assert_ptr_null(quant_dtype_name(QUANT_DTYPE_COUNT));
}
END_TEST

/* One element of a float dtype at index i of buf, as float32 (the public scalar conversions). */
static float widen_one(quant_dtype dt, const void *buf, int i)
{
    switch (dt) {
    case QUANT_DTYPE_F32:
        return ((const float *)buf)[i];
    case QUANT_DTYPE_F16:
        return quant_f16_to_f32(((const uint16_t *)buf)[i]);
    case QUANT_DTYPE_BF16:
        return quant_bf16_to_f32(((const uint16_t *)buf)[i]);
    case QUANT_DTYPE_F64:
        return (float)((const double *)buf)[i];
    case QUANT_DTYPE_F8_E4M3:
        return quant_e4m3fn_to_f32(((const uint8_t *)buf)[i]);
    default:
        return quant_e5m2_to_f32(((const uint8_t *)buf)[i]);
    }
}

/* v narrowed into element i of buf. */
static void narrow_one(quant_dtype dt, void *buf, int i, float v)
{
    switch (dt) {
    case QUANT_DTYPE_F32:
        ((float *)buf)[i] = v;
        break;
    case QUANT_DTYPE_F16:
        ((uint16_t *)buf)[i] = quant_f32_to_f16(v);
        break;
    case QUANT_DTYPE_BF16:
        ((uint16_t *)buf)[i] = quant_f32_to_bf16(v);
        break;
    case QUANT_DTYPE_F64:
        ((double *)buf)[i] = v;
        break;
    case QUANT_DTYPE_F8_E4M3:
        ((uint8_t *)buf)[i] = quant_f32_to_e4m3fn(v);
        break;
    default:
        ((uint8_t *)buf)[i] = quant_f32_to_e5m2(v);
        break;
    }
}

/* quant_convert for every pair of float dtypes equals the element-wise narrow(widen(x)) of the
 * public scalar conversions, bit for bit, on values across every range (zeros of both signs,
 * subnormals, midpoints, overflow, infinities, NaN). */
START_TEST(convert_every_pair_matches_scalar)
{
    enum { N = 64 };
    float seed[N] = {0.0f,     -0.0f,    1.0f,  -1.0f,   0.5f,    448.0f,   464.0f,    -57344.0f,
                     65504.0f, 65520.0f, 1e-8f, -1e-40f, 3.4e38f, INFINITY, -INFINITY, NAN};
    for (int i = 16; i < N; i++) seed[i] = ldexpf((float)(i * 37 % 101) - 50.0f, i % 40 - 20) / 7;
    for (int s = 0; s <= QUANT_DTYPE_F8_E5M2; s++) {
        union {
            double d[N];
            float f[N];
            uint16_t h[N];
            uint8_t b[N];
        } src, got, want;
        for (int i = 0; i < N; i++) narrow_one((quant_dtype)s, &src, i, seed[i]);
        for (int d = 0; d <= QUANT_DTYPE_F8_E5M2; d++) {
            memset(&got, 0xa5, sizeof got);
            memset(&want, 0xa5, sizeof want);
            quant_error err;
            ck_assert_int_eq(quant_convert((quant_dtype)s, &src, (quant_dtype)d, &got, N, &err),
                             QUANT_OK);
            for (int i = 0; i < N; i++)
                narrow_one((quant_dtype)d, &want, i, widen_one((quant_dtype)s, &src, i));
            ck_assert_msg(memcmp(&got, &want, sizeof got) == 0, "%s -> %s",
                          quant_dtype_name((quant_dtype)s), quant_dtype_name((quant_dtype)d));
        }
    }
}
END_TEST

Suite *suite_convert(void)
{
    Suite *s = suite_create("convert");
    TCase *tc = tcase_create("fp8");
    tcase_add_loop_test(tc, fp8_all_codes_round_trip, 0, 2);
    tcase_add_loop_test(tc, fp8_midpoints_round_to_even, 0, 2);
    tcase_add_test(tc, fp8_quantizer_clips_and_keeps_negative_zero);
    suite_add_tcase(s, tc);
    TCase *tc2 = tcase_create("f16-bf16");
    tcase_add_test(tc2, bf16_rounding_random);
    tcase_add_test(tc2, f16_all_codes_and_rounding);
    tcase_add_test(tc2, widen_kernels_match_scalar);
    tcase_add_test(tc2, convert_api);
    tcase_add_test(tc2, convert_every_pair_matches_scalar);
    suite_add_tcase(s, tc2);
    return s;
}
