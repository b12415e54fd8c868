/* test_calibrate.c -- calibration methods (SPEC section 3): parsing and its errors, absmax /
 * minmax / rms / fixed on hand-computed cases, per-channel, tiles (int and fraction), 2-D
 * blocks, strided and non-f32 inputs, non-finite detection and shape errors.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>

#include "../testutil.h"

static quant_ctx *ctx;

static void setup(void)
{
    ctx = tu_ctx(QUANT_ISA_AUTO, 2);
}

static void teardown(void)
{
    quant_ctx_free(ctx);
}

START_TEST(parse_methods)
{
    quant_calib_method m;
    quant_error err;
    ck_assert_int_eq(quant_calib_parse("absmax", &m, &err), QUANT_OK);
    ck_assert_int_eq(m.kind, QUANT_CALIB_ABSMAX);
    ck_assert(!m.has_factor && !m.asymmetric);
    ck_assert_int_eq(quant_calib_parse(NULL, &m, &err), QUANT_OK);
    ck_assert_int_eq(m.kind, QUANT_CALIB_ABSMAX);
    ck_assert_int_eq(quant_calib_parse("AbsMax, 0.9", &m, &err), QUANT_OK);
    ck_assert(m.has_factor && m.factor == 0.9);
    ck_assert_int_eq(quant_calib_parse("minmax", &m, &err), QUANT_OK);
    ck_assert(m.asymmetric);
    ck_assert_int_eq(quant_calib_parse("rms,3", &m, &err), QUANT_OK);
    ck_assert(m.kind == QUANT_CALIB_RMS && m.factor == 3.0);
    ck_assert_int_eq(quant_calib_parse("fixed,2", &m, &err), QUANT_OK);
    ck_assert(m.fixed_min == -2.0 && m.fixed_max == 2.0 && !m.asymmetric);
    ck_assert_int_eq(quant_calib_parse("fixed,-1,3", &m, &err), QUANT_OK);
    ck_assert(m.fixed_min == -1.0 && m.fixed_max == 3.0 && m.asymmetric);
    ck_assert_int_eq(quant_calib_parse("fixed,-2.5,2.5", &m, &err), QUANT_OK);
    ck_assert(!m.asymmetric);
    ck_assert_int_eq(quant_calib_parse("fixed,0,4", &m, &err), QUANT_OK);
    ck_assert(m.asymmetric);
}
END_TEST

START_TEST(parse_errors)
{
    static const char *bad[] = {
        "",
        "absmean",
        "rms",
        "rms,",
        "absmax,x",
        "absmax,1,2",
        "absmax,0",
        "minmax,-1",
        "fixed",
        "fixed,1,2",
        "fixed,-2,-1",
        "fixed,0",
        "fixed,-1,1,2",
        "fixed,nan",
        "absmax,inf",
        "rms,1,2",
    };
    quant_calib_method m;
    quant_error err;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(quant_calib_parse(bad[i], &m, &err) == QUANT_ERR_METHOD, "accepted \"%s\"",
                      bad[i]);
        ck_assert_msg(strlen(err.message) > 10, "no message for \"%s\"", bad[i]);
    }
    char longtext[300];
    memset(longtext, 'a', sizeof longtext - 1);
    longtext[sizeof longtext - 1] = '\0';
    ck_assert_int_eq(quant_calib_parse(longtext, &m, &err), QUANT_ERR_METHOD);
}
END_TEST

/* Calibrates a 2-D f32 tensor and returns the status. */
static quant_status calib2(const quant_how *how, float *x, int64_t r, int64_t c, float *a, float *b,
                           quant_error *err)
{
    quant_tensor t;
    int64_t shape[2] = {r, c};
    quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, x, NULL);
    quant_calibration cal = {false, a, a, b};
    return quant_calibrate(ctx, how, &t, &cal, err);
}

START_TEST(absmax_minmax_rms_fixed_values)
{
    float x[4] = {1.0f, -3.0f, 2.0f, 0.5f};
    float a[2], b[2];
    quant_how how;
    quant_error err;
    quant_how_init(&how, QUANT_QTYPE_INT8);
    how.n_channel_axes = 1;
    how.channel_axes[0] = 0;
    ck_assert_int_eq(calib2(&how, x, 2, 2, a, b, &err), QUANT_OK);
    ck_assert_float_eq(a[0], 3.0f);
    ck_assert_float_eq(a[1], 2.0f);
    how.calibration = "absmax,0.5";
    ck_assert_int_eq(calib2(&how, x, 2, 2, a, b, &err), QUANT_OK);
    ck_assert_float_eq(a[0], 1.5f);
    ck_assert_float_eq(a[1], 1.0f);
    how.calibration = "minmax";
    ck_assert_int_eq(calib2(&how, x, 2, 2, a, b, &err), QUANT_OK);
    ck_assert_float_eq(a[0], -3.0f);
    ck_assert_float_eq(b[0], 1.0f);
    ck_assert_float_eq(a[1], 0.0f); /* min(min x, 0) with all x > 0 */
    ck_assert(!signbit(a[1]));
    ck_assert_float_eq(b[1], 2.0f);
    how.calibration = "minmax,2";
    ck_assert_int_eq(calib2(&how, x, 2, 2, a, b, &err), QUANT_OK);
    ck_assert_float_eq(a[0], -6.0f);
    ck_assert_float_eq(b[1], 4.0f);
    float y[4] = {3.0f, 4.0f, -5.0f, 0.0f};
    how.calibration = "rms,2";
    ck_assert_int_eq(calib2(&how, y, 2, 2, a, b, &err), QUANT_OK);
    ck_assert_float_eq(a[0], (float)sqrt(12.5) * 2.0f);
    ck_assert_float_eq(a[1], (float)sqrt(12.5) * 2.0f);
    float neg[2] = {-1.0f, -2.0f};
    how.n_channel_axes = 0;
    how.calibration = "minmax";
    ck_assert_int_eq(calib2(&how, neg, 1, 2, a, b, &err), QUANT_OK);
    ck_assert_float_eq(a[0], -2.0f);
    ck_assert_float_eq(b[0], 0.0f);
}
END_TEST

START_TEST(fixed_is_per_tensor)
{
    quant_how how;
    quant_error err;
    quant_how_init(&how, QUANT_QTYPE_INT8);
    how.n_channel_axes = 1;
    how.channel_axes[0] = 0;
    how.calibration = "fixed,-1,3";
    int64_t shape[2] = {4, 8}, ss[2];
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_OK);
    ck_assert(ss[0] == 1 && ss[1] == 1);
    float x[32] = {0}, a[1], b[1];
    ck_assert_int_eq(calib2(&how, x, 4, 8, a, b, &err), QUANT_OK);
    ck_assert_float_eq(a[0], -1.0f);
    ck_assert_float_eq(b[0], 3.0f);
    how.calibration = "fixed,2";
    ck_assert_int_eq(calib2(&how, x, 4, 8, a, b, &err), QUANT_OK);
    ck_assert_float_eq(a[0], 2.0f);
}
END_TEST

START_TEST(tiles_fraction_and_blocks)
{
    float x[16];
    for (int i = 0; i < 16; i++) x[i] = (float)(i % 2 ? -i : i);
    float a[16], b[16];
    quant_how how;
    quant_error err;
    quant_how_init(&how, QUANT_QTYPE_INT8);
    how.n_channel_axes = 1;
    how.channel_axes[0] = 0;
    how.n_tiles = 1;
    how.tiles[0] = (quant_tile){.axis = 1, .size = 4};
    ck_assert_int_eq(calib2(&how, x, 2, 8, a, b, &err), QUANT_OK); /* scale [2, 2] */
    ck_assert_float_eq(a[0], 3.0f);
    ck_assert_float_eq(a[1], 7.0f);
    ck_assert_float_eq(a[2], 11.0f);
    ck_assert_float_eq(a[3], 15.0f);
    how.tiles[0] = (quant_tile){.axis = -1, .size = 0, .fraction = 0.5}; /* round(8*0.5) = 4 */
    ck_assert_int_eq(calib2(&how, x, 2, 8, a, b, &err), QUANT_OK);
    ck_assert_float_eq(a[1], 7.0f);
    int64_t shape[2] = {2, 8}, ss[2];
    how.tiles[0] = (quant_tile){.axis = 1, .size = 0, .fraction = 1.0}; /* one shared scale */
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_OK);
    ck_assert(ss[0] == 2 && ss[1] == 1);
    how.tiles[0] = (quant_tile){.axis = 1, .size = 1}; /* per element */
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_OK);
    ck_assert(ss[0] == 2 && ss[1] == 8);
    ck_assert_int_eq(calib2(&how, x, 2, 8, a, b, &err), QUANT_OK);
    for (int i = 0; i < 16; i++) ck_assert_float_eq(a[i], fabsf(x[i]));
    /* 2-D blocks 2x4 over a [4, 4] tensor: {0: 2, 1: 2} gives scale [2, 2] */
    how.n_channel_axes = 0;
    how.n_tiles = 2;
    how.tiles[0] = (quant_tile){.axis = 0, .size = 2};
    how.tiles[1] = (quant_tile){.axis = 1, .size = 2};
    ck_assert_int_eq(calib2(&how, x, 4, 4, a, b, &err), QUANT_OK);
    ck_assert_float_eq(a[0], 5.0f);  /* rows 0-1, cols 0-1: 0,1,4,5 */
    ck_assert_float_eq(a[1], 7.0f);  /* 2,3,6,7 */
    ck_assert_float_eq(a[2], 13.0f); /* 8,9,12,13 */
    ck_assert_float_eq(a[3], 15.0f);
}
END_TEST

START_TEST(contraction_on_leading_axis)
{
    /* [in=3, out=2] layout: channelwise axis 1, reduce over axis 0 */
    float x[6] = {1.0f, -2.0f, -4.0f, 0.5f, 2.0f, 1.0f};
    float a[2], b[2];
    quant_how how;
    quant_error err;
    quant_how_init(&how, QUANT_QTYPE_INT8);
    how.n_channel_axes = 1;
    how.channel_axes[0] = -1;
    ck_assert_int_eq(calib2(&how, x, 3, 2, a, b, &err), QUANT_OK);
    ck_assert_float_eq(a[0], 4.0f);
    ck_assert_float_eq(a[1], 2.0f);
    how.calibration = "minmax";
    ck_assert_int_eq(calib2(&how, x, 3, 2, a, b, &err), QUANT_OK);
    ck_assert_float_eq(a[0], -4.0f);
    ck_assert_float_eq(b[0], 2.0f);
    ck_assert_float_eq(a[1], -2.0f);
    ck_assert_float_eq(b[1], 1.0f);
}
END_TEST

START_TEST(shape_errors)
{
    quant_how how;
    quant_error err;
    int64_t shape[2] = {64, 172}, ss[2];
    quant_how_init(&how, QUANT_QTYPE_INT4);
    how.n_channel_axes = 1;
    how.channel_axes[0] = 0;
    how.n_tiles = 1;
    how.tiles[0] = (quant_tile){.axis = 1, .size = 128};
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_TILE);
    ck_assert_ptr_nonnull(strstr(err.message, "172"));
    ck_assert_ptr_nonnull(strstr(err.message, "128"));
    how.tiles[0] = (quant_tile){.axis = 1, .size = 0, .fraction = 1.5};
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_TILE);
    how.tiles[0] = (quant_tile){.axis = 1, .size = -4};
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_TILE);
    how.tiles[0] = (quant_tile){.axis = 0, .size = 4};
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_AXIS);
    ck_assert_ptr_nonnull(strstr(err.message, "both"));
    how.n_tiles = 0;
    how.channel_axes[0] = 2;
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_AXIS);
    how.n_channel_axes = 2;
    how.channel_axes[0] = 0;
    how.channel_axes[1] = -2;
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_AXIS);
    how.n_channel_axes = 0;
    how.calibration = "minmax";
    how.qtype = QUANT_QTYPE_NF4;
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_ASYMMETRIC);
    ck_assert_ptr_nonnull(strstr(err.message, "nf4"));
    how.qtype = QUANT_QTYPE_FP8_E4M3FN;
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_ASYMMETRIC);
    how.calibration = "fixed,-1,2";
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_ASYMMETRIC);
    how.calibration = "fixed,2";
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_OK);
    how.calibration = "bogus";
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_METHOD);
    how.calibration = NULL;
    how.qtype = (quant_qtype)99;
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_QTYPE);
    how.qtype = QUANT_QTYPE_INT8;
    how.scale_dtype = QUANT_DTYPE_I8;
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_DTYPE);
    how.scale_dtype = QUANT_DTYPE_F32;
    ck_assert_int_eq(quant_scale_shape(&how, 9, shape, ss, &err), QUANT_ERR_ARG);
    how.stochastic = true;
    how.qtype = QUANT_QTYPE_NF4;
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, &err), QUANT_ERR_UNSUPPORTED);
}
END_TEST

START_TEST(nonfinite_first_index)
{
    static float x[64 * 40];
    for (int i = 0; i < 64 * 40; i++) x[i] = (float)(i % 7) - 3.0f;
    x[1000] = NAN;
    x[2000] = INFINITY;
    x[1999] = -INFINITY;
    static const char *methods[] = {"absmax", "minmax", "rms,1"};
    for (int t = 1; t <= 2; t++) {
        for (int m = 0; m < 3; m++) {
            for (int per_channel = 0; per_channel < 2; per_channel++) {
                quant_how how;
                quant_error err;
                quant_how_init(&how, QUANT_QTYPE_INT8);
                how.calibration = methods[m];
                how.n_channel_axes = per_channel;
                float a[64], b[64];
                quant_ctx *c = tu_ctx(QUANT_ISA_AUTO, t);
                quant_tensor tensor;
                int64_t shape[2] = {64, 40};
                quant_tensor_init(&tensor, QUANT_DTYPE_F32, 2, shape, x, NULL);
                quant_calibration cal = {false, a, a, b};
                ck_assert_int_eq(quant_calibrate(c, &how, &tensor, &cal, &err),
                                 QUANT_ERR_NONFINITE);
                ck_assert_int_eq(err.index, 1000);
                ck_assert_ptr_nonnull(strstr(err.message, "1000"));
                quant_ctx_free(c);
            }
        }
    }
}
END_TEST

START_TEST(dtypes_strides_rank0_empty)
{
    float x[6] = {1.5f, -2.0f, 3.25f, -0.5f, 8.0f, 0.25f};
    uint16_t bf[6], h[6];
    double d[6];
    for (int i = 0; i < 6; i++) {
        bf[i] = quant_f32_to_bf16(x[i]);
        h[i] = quant_f32_to_f16(x[i]);
        d[i] = x[i];
    }
    quant_how how;
    quant_error err;
    quant_how_init(&how, QUANT_QTYPE_INT8);
    how.n_channel_axes = 1;
    how.channel_axes[0] = 0;
    int64_t shape[2] = {2, 3};
    void *bufs[4] = {x, bf, h, d};
    quant_dtype dts[4] = {QUANT_DTYPE_F32, QUANT_DTYPE_BF16, QUANT_DTYPE_F16, QUANT_DTYPE_F64};
    for (int k = 0; k < 4; k++) {
        quant_tensor t;
        quant_tensor_init(&t, dts[k], 2, shape, bufs[k], NULL);
        float a[2];
        quant_calibration cal = {false, a, NULL, NULL};
        ck_assert_int_eq(quant_calibrate(ctx, &how, &t, &cal, &err), QUANT_OK);
        ck_assert_float_eq(a[0], 3.25f);
        ck_assert_float_eq(a[1], 8.0f);
    }
    /* transposed view of x: shape [3, 2], strides [1, 3]; channels are x's columns */
    quant_tensor t;
    int64_t tshape[2] = {3, 2};
    quant_tensor_init(&t, QUANT_DTYPE_F32, 2, tshape, x, NULL);
    t.strides[0] = 1;
    t.strides[1] = 3;
    float a[3];
    quant_calibration cal = {false, a, NULL, NULL};
    ck_assert_int_eq(quant_calibrate(ctx, &how, &t, &cal, &err), QUANT_OK);
    ck_assert_float_eq(a[0], 1.5f);
    ck_assert_float_eq(a[1], 8.0f);
    ck_assert_float_eq(a[2], 3.25f);
    t.strides[0] = -1;
    ck_assert_int_eq(quant_calibrate(ctx, &how, &t, &cal, &err), QUANT_ERR_ARG);
    /* rank 0 */
    float scalar = -7.0f;
    quant_tensor_init(&t, QUANT_DTYPE_F32, 0, NULL, &scalar, NULL);
    how.n_channel_axes = 0;
    ck_assert_int_eq(quant_calibrate(ctx, &how, &t, &cal, &err), QUANT_OK);
    ck_assert_float_eq(a[0], 7.0f);
    /* empty: [0, 4] per-tensor gives absmax 0 */
    int64_t eshape[2] = {0, 4};
    quant_tensor_init(&t, QUANT_DTYPE_F32, 2, eshape, NULL, NULL);
    a[0] = 99.0f;
    ck_assert_int_eq(quant_calibrate(ctx, &how, &t, &cal, &err), QUANT_OK);
    ck_assert_float_eq(a[0], 0.0f);
    /* integer input is refused */
    int8_t ints[6] = {0};
    quant_tensor_init(&t, QUANT_DTYPE_I8, 2, shape, ints, NULL);
    ck_assert_int_eq(quant_calibrate(ctx, &how, &t, &cal, &err), QUANT_ERR_DTYPE);
    ck_assert_int_eq(quant_tensor_init(&t, QUANT_DTYPE_F32, 9, shape, x, &err), QUANT_ERR_ARG);
}
END_TEST

Suite *suite_calibrate(void)
{
    Suite *s = suite_create("calibrate");
    TCase *tc = tcase_create("methods");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, parse_methods);
    tcase_add_test(tc, parse_errors);
    tcase_add_test(tc, absmax_minmax_rms_fixed_values);
    tcase_add_test(tc, fixed_is_per_tensor);
    tcase_add_test(tc, tiles_fraction_and_blocks);
    tcase_add_test(tc, contraction_on_leading_axis);
    tcase_add_test(tc, shape_errors);
    tcase_add_test(tc, nonfinite_first_index);
    tcase_add_test(tc, dtypes_strides_rank0_empty);
    suite_add_tcase(s, tc);
    return s;
}
