/* test_quantize.c -- quantize / dequantize / fake-quant end to end (SPEC section 5): the literal
 * examples through the quantizer on every ISA, packed layouts, given scales and their errors,
 * non-finite input, stochastic rounding, output dtypes.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdlib.h>

#include "../testutil.h"

/* Quantizes a 1-D f32 vector with a given per-tensor scale of 1 on every ISA and checks codes. */
static void expect_given(quant_qtype q, bool pack, const float *x, int n, const void *want,
                         size_t want_bytes)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int k = tu_isas(isas);
    for (int i = 0; i < k; i++) {
        quant_ctx *ctx = tu_ctx(isas[i], 1);
        quant_how how;
        quant_error err;
        quant_how_init(&how, q);
        how.pack = pack;
        quant_tensor t;
        int64_t shape[1] = {n};
        quant_tensor_init(&t, QUANT_DTYPE_F32, 1, shape, (void *)x, NULL);
        uint8_t out[64];
        float one = 1.0f;
        ck_assert_int_eq(quant_qvalue_bytes(&how, 1, shape), (int64_t)want_bytes);
        ck_assert_int_eq(quant_quantize_with_scale(ctx, &how, &t, &one, NULL, out, &err), QUANT_OK);
        ck_assert_msg(memcmp(out, want, want_bytes) == 0, "%s on %s",
                      quant_qtype_traits_get(q)->name, quant_isa_name(isas[i]));
        quant_ctx_free(ctx);
    }
}

START_TEST(spec_examples_through_quantizer)
{
    const float i8[] = {1.2f, 3.5f, -127.5f, 129.0f, -1300.0f};
    const int8_t w8[] = {1, 4, -128, 127, -128};
    expect_given(QUANT_QTYPE_INT8, true, i8, 5, w8, 5);
    const float i4[] = {1.2f, 3.5f, 8.0f, -1300.0f};
    const int8_t w4[] = {1, 4, 7, -8};
    expect_given(QUANT_QTYPE_INT4, false, i4, 4, w4, 4);
    const uint8_t w4p[] = {0x41, 0x87}; /* 1 | 4<<4, 7 | -8<<4 */
    expect_given(QUANT_QTYPE_INT4, true, i4, 4, w4p, 2);
    const float i6[] = {1.2f, 3.5f, 129.0f, -1300.0f};
    const int8_t w6[] = {1, 4, 31, -32};
    expect_given(QUANT_QTYPE_INT6, true, i6, 4, w6, 4); /* > 4 bits: never packed */
    const float nf[] = {-1.0f, -0.5f, 0.0f, 0.8f, 1.0f};
    const uint8_t wnf[] = {0, 2, 7, 14, 15};
    expect_given(QUANT_QTYPE_NF4, false, nf, 5, wnf, 5);
    const uint8_t wnfp[] = {0x20, 0xe7, 0x0f}; /* odd length: last high nibble is 0 */
    expect_given(QUANT_QTYPE_NF4, true, nf, 5, wnfp, 3);
    const float e4[] = {1000.0f, -1000.0f, -1e-10f, 0.0f, 1.0f, 0.3f};
    const uint8_t we4[] = {0x7e, 0xfe, 0x80, 0x00, 0x38, 0x2a};
    expect_given(QUANT_QTYPE_FP8_E4M3FN, true, e4, 6, we4, 6);
    const int16_t w16[] = {1, 4, -128, 129, -1300};
    expect_given(QUANT_QTYPE_INT16, true, i8, 5, w16, sizeof w16);
    const float i2[] = {-3.0f, -1.6f, 0.4f, 0.6f, 9.0f};
    const uint8_t w2p[] = {0xee, 0x10, 0x01}; /* -2,-2 | 0,1 | 1 */
    expect_given(QUANT_QTYPE_INT2, true, i2, 5, w2p, 3);
}
END_TEST

START_TEST(per_channel_int8_by_hand)
{
    quant_ctx *ctx = tu_ctx(QUANT_ISA_AUTO, 2);
    /* absmax 127.5 and 255 give exact scales 1 and 2, so the halves below are exact ties */
    float x[6] = {1.0f, -127.5f, 2.5f, 255.0f, 1.5f, -3.0f};
    int8_t q[6];
    float scale[2];
    quant_how how;
    quant_error err;
    quant_how_init(&how, QUANT_QTYPE_INT8);
    how.n_channel_axes = 1;
    how.channel_axes[0] = 0;
    quant_tensor t;
    int64_t shape[2] = {2, 3};
    quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, x, NULL);
    ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, scale, NULL, &err), QUANT_OK);
    ck_assert_float_eq(scale[0], 1.0f);
    ck_assert_float_eq(scale[1], 2.0f);
    const int8_t want[6] = {1, -128, 2, 127, 1, -2}; /* ties to even; 127.5 -> 128 saturates */
    ck_assert_int_eq(memcmp(q, want, 6), 0);
    quant_ctx_free(ctx);
}
END_TEST

START_TEST(given_scale_errors)
{
    quant_ctx *ctx = tu_ctx(QUANT_ISA_AUTO, 1);
    float x[4] = {1, 2, 3, 4};
    int8_t q[4];
    quant_how how;
    quant_error err;
    quant_how_init(&how, QUANT_QTYPE_INT8);
    quant_tensor t;
    int64_t shape[1] = {4};
    quant_tensor_init(&t, QUANT_DTYPE_F32, 1, shape, x, NULL);
    float bad[3] = {0.0f, -1.0f, NAN};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(quant_quantize_with_scale(ctx, &how, &t, &bad[i], NULL, q, &err),
                         QUANT_ERR_ARG);
        ck_assert_ptr_nonnull(strstr(err.message, "scale[0]"));
    }
    float one = 1.0f;
    int32_t zp = 0;
    ck_assert_int_eq(quant_quantize_with_scale(ctx, &how, &t, &one, &zp, q, &err), QUANT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "symmetric")); /* absmax takes no zero point */
    how.calibration = "minmax";
    ck_assert(quant_how_asymmetric(&how));
    ck_assert_int_eq(quant_quantize_with_scale(ctx, &how, &t, &one, NULL, q, &err), QUANT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "no zero point"));
    zp = 300;
    ck_assert_int_eq(quant_quantize_with_scale(ctx, &how, &t, &one, &zp, q, &err), QUANT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "zero_point"));
    zp = -3;
    ck_assert_int_eq(quant_quantize_with_scale(ctx, &how, &t, &one, &zp, q, &err), QUANT_OK);
    ck_assert_int_eq(q[0], -2); /* 1 / 1 + (-3) */
    how.calibration = NULL;
    ck_assert(!quant_how_asymmetric(&how));
    zp = 0;
    how.qtype = QUANT_QTYPE_NF4;
    ck_assert_int_eq(quant_quantize_with_scale(ctx, &how, &t, &one, &zp, q, &err),
                     QUANT_ERR_ASYMMETRIC);
    how.qtype = QUANT_QTYPE_INT8;
    x[2] = NAN;
    ck_assert_int_eq(quant_quantize_with_scale(ctx, &how, &t, &one, NULL, q, &err),
                     QUANT_ERR_NONFINITE);
    ck_assert_int_eq(err.index, 2);
    ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, &one, NULL, &err), QUANT_ERR_NONFINITE);
    ck_assert_int_eq(err.index, 2);
    how.calibration = "fixed,4"; /* no calibration pass: the quantize pass must still catch it */
    ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, &one, NULL, &err), QUANT_ERR_NONFINITE);
    ck_assert_int_eq(err.index, 2);
    how.calibration = "minmax";
    ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, &one, NULL, &err), QUANT_ERR_ARG);
    ck_assert_int_eq(quant_quantize(NULL, &how, &t, q, &one, NULL, &err), QUANT_ERR_ARG);
    quant_ctx_free(ctx);
}
END_TEST

START_TEST(stochastic_rounding)
{
    enum { N = 4096 };
    static float x[N];
    static int8_t q1[N], q2[N], q3[N], qs[N];
    for (int i = 0; i < N; i++) x[i] = 0.3f + (float)(i % 5);
    quant_how how;
    quant_error err;
    quant_how_init(&how, QUANT_QTYPE_INT8);
    how.stochastic = true;
    how.sr_key = quant_sr_key(42, "layers.0.w");
    quant_tensor t;
    int64_t shape[2] = {64, 64};
    quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, x, NULL);
    float one = 1.0f;
    quant_ctx *c1 = tu_ctx(QUANT_ISA_SCALAR, 1), *c2 = tu_ctx(QUANT_ISA_AUTO, 2);
    ck_assert_int_eq(quant_quantize_with_scale(c1, &how, &t, &one, NULL, q1, &err), QUANT_OK);
    ck_assert_int_eq(quant_quantize_with_scale(c2, &how, &t, &one, NULL, q2, &err), QUANT_OK);
    ck_assert_int_eq(memcmp(q1, q2, N), 0);
    long ups = 0;
    for (int i = 0; i < N; i++) {
        float fl = floorf(x[i]);
        ck_assert(q1[i] == (int8_t)fl || q1[i] == (int8_t)fl + 1);
        ups += q1[i] > fl;
    }
    ck_assert(ups > N * 0.25 && ups < N * 0.35); /* P(up) = 0.3 */
    /* a slice quantized with sr_index_base sees the same noise as in the whole tensor */
    quant_tensor half;
    int64_t hshape[2] = {32, 64};
    quant_tensor_init(&half, QUANT_DTYPE_F32, 2, hshape, x + N / 2, NULL);
    how.sr_index_base = N / 2;
    ck_assert_int_eq(quant_quantize_with_scale(c2, &how, &half, &one, NULL, qs, &err), QUANT_OK);
    ck_assert_int_eq(memcmp(qs, q1 + N / 2, N / 2), 0);
    how.sr_index_base = 0;
    how.sr_key = quant_sr_key(43, "layers.0.w");
    ck_assert_int_eq(quant_quantize_with_scale(c1, &how, &t, &one, NULL, q3, &err), QUANT_OK);
    ck_assert(memcmp(q1, q3, N) != 0);
    ck_assert(quant_sr_key(42, "a") != quant_sr_key(42, "b"));
    for (uint64_t i = 0; i < 100000; i++) {
        float v = quant_sr_noise(7, i);
        ck_assert(v >= -0.5f && v < 0.5f);
    }
    quant_ctx_free(c1);
    quant_ctx_free(c2);
}
END_TEST

START_TEST(fake_quant_equals_two_steps_and_out_dtypes)
{
    quant_ctx *ctx = tu_ctx(QUANT_ISA_AUTO, 2);
    enum { R = 16, C = 96 };
    static float x[R * C], fq[R * C], dq[R * C], scale[R * 3];
    static uint8_t q[R * C];
    static uint16_t half[R * C], bhalf[R * C];
    int32_t zp[R * 3];
    tu_rng rng = {3};
    tu_fill(&rng, x, R * C, 2.0f, 1);
    static const quant_qtype qs[] = {QUANT_QTYPE_INT8, QUANT_QTYPE_INT4, QUANT_QTYPE_NF4,
                                     QUANT_QTYPE_FP8_E4M3FN, QUANT_QTYPE_UINT8};
    for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++) {
        quant_how how;
        quant_error err;
        quant_how_init(&how, qs[k]);
        how.n_channel_axes = 1;
        how.channel_axes[0] = 0;
        how.n_tiles = 1;
        how.tiles[0] = (quant_tile){.axis = 1, .size = 32};
        if (qs[k] == QUANT_QTYPE_UINT8) how.calibration = "minmax";
        quant_tensor t, o;
        int64_t shape[2] = {R, C};
        quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, x, NULL);
        quant_tensor_init(&o, QUANT_DTYPE_F32, 2, shape, fq, NULL);
        ck_assert_int_eq(quant_fake_quant(ctx, &how, &t, &o, &err), QUANT_OK);
        int32_t *z = qs[k] == QUANT_QTYPE_UINT8 ? zp : NULL;
        ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, scale, z, &err), QUANT_OK);
        o.data = dq;
        ck_assert_int_eq(quant_dequantize(ctx, &how, q, scale, z, &o, &err), QUANT_OK);
        ck_assert_int_eq(memcmp(fq, dq, sizeof fq), 0);
        o.dtype = QUANT_DTYPE_F16;
        o.data = half;
        ck_assert_int_eq(quant_dequantize(ctx, &how, q, scale, z, &o, &err), QUANT_OK);
        o.dtype = QUANT_DTYPE_BF16;
        o.data = bhalf;
        ck_assert_int_eq(quant_dequantize(ctx, &how, q, scale, z, &o, &err), QUANT_OK);
        for (int i = 0; i < R * C; i++) {
            ck_assert_int_eq(half[i], quant_f32_to_f16(dq[i]));
            ck_assert_int_eq(bhalf[i], quant_f32_to_bf16(dq[i]));
        }
        o.dtype = QUANT_DTYPE_I8;
        ck_assert_int_eq(quant_dequantize(ctx, &how, q, scale, z, &o, &err), QUANT_ERR_DTYPE);
        /* the zero point must come exactly with an asymmetric calibration */
        int32_t zz[R * 3] = {0};
        o.dtype = QUANT_DTYPE_F32;
        o.data = dq;
        if (z) {
            ck_assert_int_eq(quant_dequantize(ctx, &how, q, scale, NULL, &o, &err), QUANT_ERR_ARG);
        } else {
            ck_assert_int_eq(quant_dequantize(ctx, &how, q, scale, zz, &o, &err),
                             qs[k] == QUANT_QTYPE_NF4 || qs[k] == QUANT_QTYPE_FP8_E4M3FN
                                 ? QUANT_ERR_ASYMMETRIC
                                 : QUANT_ERR_ARG);
        }
    }
    quant_ctx_free(ctx);
}
END_TEST

START_TEST(error_quality_is_sane)
{
    /* int8 per-channel on smooth data: every dequantized value within scale/2 of the input */
    quant_ctx *ctx = tu_ctx(QUANT_ISA_AUTO, 2);
    enum { R = 8, C = 300 };
    static float x[R * C], y[R * C], scale[R];
    static int8_t q[R * C];
    tu_rng rng = {9};
    tu_fill(&rng, x, R * C, 1.0f, 0);
    quant_how how;
    quant_error err;
    quant_how_init(&how, QUANT_QTYPE_INT8);
    how.n_channel_axes = 1;
    how.channel_axes[0] = 0;
    quant_tensor t, o;
    int64_t shape[2] = {R, C};
    quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, x, NULL);
    quant_tensor_init(&o, QUANT_DTYPE_F32, 2, shape, y, NULL);
    ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, scale, NULL, &err), QUANT_OK);
    ck_assert_int_eq(quant_dequantize(ctx, &how, q, scale, NULL, &o, &err), QUANT_OK);
    for (int i = 0; i < R * C; i++) ck_assert(fabsf(x[i] - y[i]) <= scale[i / C] * 0.5001f);
    quant_ctx_free(ctx);
}
END_TEST

/* quant_measure_error: the same bits on every ISA and thread count, and equal (to rounding of the
 * sums) to the error of quant_fake_quant computed naively; bf16 input and odd row lengths too. */
START_TEST(measure_error_matches_fake_quant)
{
    enum { R = 70, C = 1003 }; /* the lane tail; 32 rows per work item: three items */
    static float x[R * C], fq[R * C], scale[R * 17];
    static uint16_t xb[R * C];
    static uint8_t q[R * C];
    int32_t zp[R * 17];
    tu_rng rng = {17};
    tu_fill(&rng, x, R * C, 3.0f, 1);
    for (int i = 0; i < R * C; i++) xb[i] = quant_f32_to_bf16(x[i]);
    quant_isa isas[QUANT_ISA_COUNT];
    int n_isa = tu_isas(isas);
    static const quant_qtype qs[] = {QUANT_QTYPE_INT8, QUANT_QTYPE_INT4, QUANT_QTYPE_UINT8};
    for (size_t k = 0; k < 3; k++)
        for (int bf = 0; bf < 2; bf++) {
            quant_how how;
            quant_error err;
            quant_how_init(&how, qs[k]);
            how.n_channel_axes = 1;
            how.channel_axes[0] = 0;
            how.pack = qs[k] == QUANT_QTYPE_INT4;
            if (qs[k] == QUANT_QTYPE_UINT8) how.calibration = "minmax";
            int32_t *z = qs[k] == QUANT_QTYPE_UINT8 ? zp : NULL;
            quant_tensor t, o;
            int64_t shape[2] = {R, C};
            quant_tensor_init(&t, bf ? QUANT_DTYPE_BF16 : QUANT_DTYPE_F32, 2, shape,
                              bf ? (void *)xb : (void *)x, NULL);
            quant_tensor_init(&o, QUANT_DTYPE_F32, 2, shape, fq, NULL);
            quant_ctx *ctx = tu_ctx(QUANT_ISA_SCALAR, 1);
            ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, scale, z, &err), QUANT_OK);
            ck_assert_int_eq(quant_dequantize(ctx, &how, q, scale, z, &o, &err), QUANT_OK);
            quant_error_stats want;
            ck_assert_int_eq(quant_measure_error(ctx, &how, &t, q, scale, z, &want, &err),
                             QUANT_OK);
            quant_ctx_free(ctx);
            double sx = 0, se = 0, mx = 0;
            for (int i = 0; i < R * C; i++) {
                double xv = bf ? quant_bf16_to_f32(xb[i]) : x[i], e = xv - fq[i];
                sx += xv * xv;
                se += e * e;
                mx = fabs(e) > mx ? fabs(e) : mx;
            }
            ck_assert(mx > 0 && want.max_abs_err == mx);
            ck_assert(fabs(want.sum_sq_x - sx) <= 1e-12 * sx);
            ck_assert(fabs(want.sum_sq_err - se) <= 1e-12 * se);
            for (int i = 0; i < n_isa; i++)
                for (int threads = 1; threads <= 3; threads += 2) {
                    quant_error_stats got;
                    ctx = tu_ctx(isas[i], threads);
                    ck_assert_int_eq(quant_measure_error(ctx, &how, &t, q, scale, z, &got, &err),
                                     QUANT_OK);
                    quant_ctx_free(ctx);
                    ck_assert_msg(memcmp(&got, &want, sizeof got) == 0, "%s, %d threads",
                                  quant_isa_name(isas[i]), threads);
                }
        }
}
END_TEST

Suite *suite_quantize(void)
{
    Suite *s = suite_create("quantize");
    TCase *tc = tcase_create("end-to-end");
    tcase_add_test(tc, spec_examples_through_quantizer);
    tcase_add_test(tc, per_channel_int8_by_hand);
    tcase_add_test(tc, given_scale_errors);
    tcase_add_test(tc, stochastic_rounding);
    tcase_add_test(tc, fake_quant_equals_two_steps_and_out_dtypes);
    tcase_add_test(tc, error_quality_is_sane);
    tcase_add_test(tc, measure_error_matches_fake_quant);
    suite_add_tcase(s, tc);
    return s;
}
