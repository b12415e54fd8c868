/* test_scale.c -- scale and zero point (SPEC section 4) on hand-computed cases: the tiny-scale
 * rule, asymmetric zero points, scale dtypes, and Qwix's exact-quantization case.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <float.h>
#include <math.h>

#include "../testutil.h"

static quant_status scales(quant_qtype q, const char *method, quant_dtype sd, float *absmax,
                           float *mn, float *mx, int64_t n, float *scale, int32_t *zp,
                           quant_error *err)
{
    quant_how how;
    quant_how_init(&how, q);
    how.calibration = method;
    how.scale_dtype = sd;
    quant_calibration cal = {mn != NULL, absmax, mn, mx};
    return quant_compute_scale(&how, &cal, n, scale, zp, err);
}

START_TEST(symmetric_and_tiny_rule)
{
    float tiny = sqrtf(FLT_MIN);
    ck_assert_float_eq(tiny, 0x1p-63f);
    float absmax[5] = {127.5f, 0.0f, tiny * 127.5f, nextafterf(tiny, 0) * 127.5f, 1.0f};
    float s[5];
    quant_error err;
    ck_assert_int_eq(
        scales(QUANT_QTYPE_INT8, "absmax", QUANT_DTYPE_F32, absmax, NULL, NULL, 5, s, NULL, &err),
        QUANT_OK);
    ck_assert_float_eq(s[0], 1.0f);
    ck_assert_float_eq(s[1], 1.0f); /* zero range: scale 1 */
    ck_assert_float_eq(s[2], tiny); /* exactly tiny is kept */
    ck_assert_float_eq(s[3], 1.0f); /* below tiny becomes 1 */
    ck_assert_float_eq(s[4], 1.0f / 127.5f);
    float fp8[1] = {896.0f};
    ck_assert_int_eq(scales(QUANT_QTYPE_FP8_E4M3FN, "absmax", QUANT_DTYPE_F32, fp8, NULL, NULL, 1,
                            s, NULL, &err),
                     QUANT_OK);
    ck_assert_float_eq(s[0], 2.0f);
    float nf[1] = {0.75f};
    ck_assert_int_eq(
        scales(QUANT_QTYPE_NF4, "absmax", QUANT_DTYPE_F32, nf, NULL, NULL, 1, s, NULL, &err),
        QUANT_OK);
    ck_assert_float_eq(s[0], 0.75f);
    float i16[1] = {65536.0f};
    ck_assert_int_eq(
        scales(QUANT_QTYPE_INT16, "absmax", QUANT_DTYPE_F32, i16, NULL, NULL, 1, s, NULL, &err),
        QUANT_OK);
    ck_assert_float_eq(s[0], 2.0f); /* int16 bound is 32768 */
}
END_TEST

START_TEST(asymmetric_zero_point)
{
    float mn[3] = {-1.0f, 0.0f, -3.0f}, mx[3] = {3.0f, 0.0f, 0.0f}, s[3];
    int32_t zp[3];
    quant_error err;
    ck_assert_int_eq(
        scales(QUANT_QTYPE_INT8, "minmax", QUANT_DTYPE_F32, NULL, mn, mx, 3, s, zp, &err),
        QUANT_OK);
    ck_assert_float_eq(s[0], 4.0f / 255.0f);
    /* -128 - (-1 / (4/255)) = -128 + 63.75 = -64.25 -> -64 */
    ck_assert_int_eq(zp[0], (int32_t)rintf(-128.0f - (-1.0f / (4.0f / 255.0f))));
    ck_assert_int_eq(zp[0], -64);
    ck_assert_float_eq(s[1], 1.0f); /* empty range */
    ck_assert_int_eq(zp[1], -128);
    ck_assert_int_eq(zp[2], 127); /* all-negative range: zero point saturates at qmax */
    ck_assert_int_eq(
        scales(QUANT_QTYPE_UINT4, "minmax", QUANT_DTYPE_F32, NULL, mn, mx, 1, s, zp, &err),
        QUANT_OK);
    ck_assert_float_eq(s[0], 4.0f / 15.0f);
    ck_assert_int_eq(zp[0], 4); /* 0 + 3.75 -> 4 */
    ck_assert_int_eq(
        scales(QUANT_QTYPE_NF4, "absmax", QUANT_DTYPE_F32, NULL, mn, mx, 1, s, zp, &err),
        QUANT_ERR_ASYMMETRIC);
}
END_TEST

START_TEST(scale_dtype_rounds_before_zero_point)
{
    /* absmax 1.0 -> 1/127.5 = 0.00784313... = 2^-7 * 1.0039; bf16 keeps 7 fraction bits and
     * rounds 0.502 of a step up: 2^-7 * (1 + 1/128) */
    float absmax[1] = {1.0f}, s[1];
    quant_error err;
    ck_assert_int_eq(
        scales(QUANT_QTYPE_INT8, "absmax", QUANT_DTYPE_BF16, absmax, NULL, NULL, 1, s, NULL, &err),
        QUANT_OK);
    ck_assert_float_eq(s[0], 0x1.02p-7f);
    ck_assert_int_eq(
        scales(QUANT_QTYPE_INT8, "absmax", QUANT_DTYPE_F16, absmax, NULL, NULL, 1, s, NULL, &err),
        QUANT_OK);
    ck_assert_float_eq(s[0], quant_f16_to_f32(quant_f32_to_f16(1.0f / 127.5f)));
    float mn[1] = {-0.3f}, mx[1] = {1.0f};
    int32_t zp[1];
    ck_assert_int_eq(
        scales(QUANT_QTYPE_INT8, "minmax", QUANT_DTYPE_BF16, NULL, mn, mx, 1, s, zp, &err),
        QUANT_OK);
    float rounded = quant_bf16_to_f32(quant_f32_to_bf16(1.3f / 255.0f));
    ck_assert_float_eq(s[0], rounded);
    ck_assert_int_eq(zp[0], (int32_t)rintf(-128.0f - (-0.3f / rounded)));
    /* float16 cannot hold a scale of 1e-12 */
    float small[1] = {1e-10f};
    ck_assert_int_eq(
        scales(QUANT_QTYPE_INT8, "absmax", QUANT_DTYPE_F16, small, NULL, NULL, 1, s, NULL, &err),
        QUANT_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.message, "F16"));
    float huge[1] = {FLT_MAX};
    ck_assert_int_eq(
        scales(QUANT_QTYPE_INT8, "absmax", QUANT_DTYPE_F16, huge, NULL, NULL, 1, s, NULL, &err),
        QUANT_ERR_RANGE);
}
END_TEST

START_TEST(qwix_exact_quantization)
{
    float x[256], out[256], scale;
    int32_t zp;
    int8_t q[256];
    for (int i = 0; i < 256; i++) x[i] = (float)i / 255.0f;
    quant_isa isas[QUANT_ISA_COUNT];
    int n = tu_isas(isas);
    for (int k = 0; k < n; k++) {
        quant_ctx *ctx = tu_ctx(isas[k], 1);
        quant_how how;
        quant_error err;
        quant_how_init(&how, QUANT_QTYPE_INT8);
        how.calibration = "minmax";
        quant_tensor t, o;
        int64_t shape[1] = {256};
        quant_tensor_init(&t, QUANT_DTYPE_F32, 1, shape, x, NULL);
        quant_tensor_init(&o, QUANT_DTYPE_F32, 1, shape, out, NULL);
        ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, &scale, &zp, &err), QUANT_OK);
        ck_assert_int_eq(zp, -128);
        for (int i = 0; i < 256; i++) ck_assert_int_eq(q[i], i - 128);
        ck_assert_int_eq(quant_dequantize(ctx, &how, q, &scale, &zp, &o, &err), QUANT_OK);
        for (int i = 0; i < 256; i++) ck_assert(fabsf(out[i] - x[i]) <= 1e-6f);
        quant_ctx_free(ctx);
    }
}
END_TEST

START_TEST(compute_scale_errors)
{
    quant_how how;
    quant_error err;
    quant_how_init(&how, QUANT_QTYPE_INT8);
    float a[1] = {1.0f}, s[1];
    quant_calibration cal = {true, NULL, a, a};
    ck_assert_int_eq(quant_compute_scale(&how, &cal, 1, s, NULL, &err), QUANT_ERR_ARG);
    ck_assert_int_eq(quant_compute_scale(&how, NULL, 1, s, NULL, &err), QUANT_ERR_ARG);
    cal.asymmetric = false;
    cal.absmax = a;
    ck_assert_int_eq(quant_compute_scale(&how, &cal, -1, s, NULL, &err), QUANT_ERR_ARG);
    float inf[1] = {INFINITY};
    cal.absmax = inf;
    ck_assert_int_eq(quant_compute_scale(&how, &cal, 1, s, NULL, &err), QUANT_ERR_RANGE);
}
END_TEST

Suite *suite_scale(void)
{
    Suite *s = suite_create("scale");
    TCase *tc = tcase_create("formulas");
    tcase_add_test(tc, symmetric_and_tiny_rule);
    tcase_add_test(tc, asymmetric_zero_point);
    tcase_add_test(tc, scale_dtype_rounds_before_zero_point);
    tcase_add_test(tc, qwix_exact_quantization);
    tcase_add_test(tc, compute_scale_errors);
    suite_add_tcase(s, tc);
    return s;
}
