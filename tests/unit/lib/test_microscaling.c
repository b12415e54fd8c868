/* test_microscaling.c -- the microscaling qtypes mxfp8, mxfp8_16, mxfp4, nvfp4 (SPEC 2b): the
 * e2m1 conversion, MX and NVFP4 scales against hand-computed values, round trips on a real
 * tensor, and every refusal (tile, method, scale dtype, global scale).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Expected scales were computed with a short python3 script that rounds every step to float32
 * with struct.pack('<f'): f32(x) = unpack('<f', pack('<f', x)); bf16 by adding 0x7fff plus the
 * lowest kept bit to the float32 bits and dropping the low 16; e4m3fn by the nearest value of
 * the 253 finite non-negative e4m3fn values (ties to the even code), after clipping to 448.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "../testutil.h"
#include "internal.h"

static const quant_qtype mx_qtypes[4] = {QUANT_QTYPE_MXFP8, QUANT_QTYPE_MXFP8_16, QUANT_QTYPE_MXFP4,
                                         QUANT_QTYPE_NVFP4};

START_TEST(traits_rows)
{
    static const struct {
        quant_qtype q;
        const char *name;
        int bits;
        int64_t tile;
        float bound;
        quant_dtype storage;
        quant_scale_kind kind;
        float c;
    } rows[] = {
        {QUANT_QTYPE_MXFP8, "mxfp8", 8, 32, 448.0f, QUANT_DTYPE_F8_E4M3, QUANT_SCALE_MX,
         1.9354838132858276f},
        {QUANT_QTYPE_MXFP8_16, "mxfp8_16", 8, 16, 448.0f, QUANT_DTYPE_F8_E4M3, QUANT_SCALE_MX,
         1.9354838132858276f},
        {QUANT_QTYPE_MXFP4, "mxfp4", 4, 32, 6.0f, QUANT_DTYPE_U8, QUANT_SCALE_MX,
         1.7142857313156128f},
        {QUANT_QTYPE_NVFP4, "nvfp4", 4, 16, 6.0f, QUANT_DTYPE_U8, QUANT_SCALE_NVFP4, 0.0f},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const quant_qtype_traits *t = quant_qtype_traits_get(rows[i].q);
        ck_assert_str_eq(t->name, rows[i].name);
        ck_assert_int_eq(t->bits, rows[i].bits);
        ck_assert_int_eq(t->fixed_tile, rows[i].tile);
        ck_assert_float_eq(t->symmetric_bound, rows[i].bound);
        ck_assert_int_eq(t->storage, rows[i].storage);
        ck_assert_int_eq(t->scale_kind, rows[i].kind);
        ck_assert_float_eq(t->scale_constant, rows[i].c);
        ck_assert(!t->asymmetric_allowed);
        ck_assert_int_eq(t->packable, rows[i].bits == 4);
        quant_qtype q;
        quant_error err;
        ck_assert_int_eq(quant_qtype_parse(rows[i].name, &q, &err), QUANT_OK);
        ck_assert_int_eq(q, rows[i].q);
    }
    /* the older qtypes have no fixed tile and linear scales */
    ck_assert_int_eq(quant_qtype_traits_get(QUANT_QTYPE_INT8)->fixed_tile, 0);
    ck_assert_int_eq(quant_qtype_traits_get(QUANT_QTYPE_NF4)->scale_kind, QUANT_SCALE_LINEAR);
}
END_TEST

/* SPEC 2b's literal e2m1 examples, plus clipping, the sign of zero and every level. */
START_TEST(e2m1_convert_and_levels)
{
    const quant_qtype_traits *t = quant_qtype_traits_get(QUANT_QTYPE_MXFP4);
    static const float ties[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    static const int tie_codes[7] = {0, 2, 2, 4, 4, 6, 6};
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(t->convert(ties[i]), tie_codes[i]);
        ck_assert_int_eq(t->convert(-ties[i]), tie_codes[i] | 8);
    }
    ck_assert_int_eq(t->convert(-0.1f), 8);
    ck_assert_int_eq(t->convert(-0.0f), 8);
    ck_assert_int_eq(t->convert(0.0f), 0);
    ck_assert_int_eq(t->convert(0.26f), 1);
    ck_assert_int_eq(t->convert(0.74f), 1);
    ck_assert_int_eq(t->convert(5.01f), 7);
    ck_assert_int_eq(t->convert(6.0f), 7);
    ck_assert_int_eq(t->convert(1e30f), 7);
    ck_assert_int_eq(t->convert(-7.0f), 15);
    static const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (int c = 0; c < 16; c++) {
        float want = (c & 8) ? -mags[c & 7] : mags[c & 7];
        ck_assert_float_eq(t->level(c), want);
        ck_assert_float_eq(quant_e2m1_levels[c], want);
        ck_assert_int_eq(signbit(t->level(c)) != 0, (c & 8) != 0); /* code 8 is -0 */
        ck_assert_int_eq(t->convert(t->level(c)), c);              /* every level is exact */
    }
    /* nearest for every value on a fine grid: no level is closer than the chosen one */
    for (int i = -1400; i <= 1400; i++) {
        float v = (float)i / 200.0f;
        float got = t->level(t->convert(v)), clipped = fminf(fmaxf(v, -6.0f), 6.0f);
        for (int c = 0; c < 16; c++)
            ck_assert(fabsf(got - clipped) <= fabsf(t->level(c) - clipped));
    }
}
END_TEST

static void mx_scales(quant_qtype q, const float *absmax, int n, float *out)
{
    quant_how how;
    quant_how_init(&how, q);
    quant_calibration cal = {false, (float *)absmax, NULL, NULL};
    quant_error err;
    ck_assert_int_eq(quant_compute_scale(&how, &cal, n, out, NULL, &err), QUANT_OK);
}

/* MX scale = 2^floor(log2(bf16(f32(absmax / B) * C))) with the tiny rule (SPEC 2b). */
START_TEST(mx_scales_by_hand)
{
    /* mxfp4 (B 6, C 1.7142857313156128):
     *  6: s 1, s*C 1.7142857 -> bf16 1.7109375 -> 1
     *  12: s 2, s*C 3.4285715 -> bf16 3.421875 -> 2
     *  7: s f32(7/6) 1.1666666, s*C rounds to 2.0 in float32 -> 2 (without the bf16 step the
     *     floor would still see 2.0 here; 6.9 below checks the bf16 rounding itself)
     *  1: s 0.16666667, s*C 0.2857143 -> bf16 0.28515625 -> 0.25
     *  0: s 0 < 2^-63 -> s 1 -> 1
     *  1e-10: s 1.6666667e-11, s*C 2.857143e-11 -> 2^-36
     *  100: s 16.666666, s*C 28.571428 -> bf16 28.5 -> 16
     *  6.99: s 1.165, s*C 1.9971428 (float32) -> bf16 2.0 (1.99609375 is the midpoint between
     *     1.9921875 and 2.0) -> 2, where floor(log2(1.9971428)) alone would give 1 */
    static const float a4[8] = {6.0f, 12.0f, 7.0f, 1.0f, 0.0f, 1e-10f, 100.0f, 6.99f};
    static const float w4[8] = {1.0f, 2.0f, 2.0f, 0.25f, 1.0f, 0x1p-36f, 16.0f, 2.0f};
    float s[8];
    mx_scales(QUANT_QTYPE_MXFP4, a4, 8, s);
    for (int i = 0; i < 8; i++) ck_assert_msg(s[i] == w4[i], "mxfp4 %d: %a", i, (double)s[i]);
    /* mxfp8 and mxfp8_16 (B 448, C 1.9354838132858276):
     *  448: s 1, s*C 1.9354838 -> bf16 1.9375 -> 1
     *  449: s 1.0022321, s*C 1.9398041 -> bf16 1.9375 -> 1
     *  464: s 1.0357143, s*C 2.0046083 -> bf16 2.0 -> 2
     *  0: -> 1;  1e-10: -> 2^-42;  1: s 2^-8.8.., s*C 0.0043202 -> 2^-8
     *  3e5: s 669.64285, s*C 1296.0829 -> bf16 1296 -> 1024 */
    static const float a8[7] = {448.0f, 449.0f, 464.0f, 0.0f, 1e-10f, 1.0f, 3e5f};
    static const float w8[7] = {1.0f, 1.0f, 2.0f, 1.0f, 0x1p-42f, 0x1p-8f, 1024.0f};
    mx_scales(QUANT_QTYPE_MXFP8, a8, 7, s);
    for (int i = 0; i < 7; i++) ck_assert_msg(s[i] == w8[i], "mxfp8 %d: %a", i, (double)s[i]);
    mx_scales(QUANT_QTYPE_MXFP8_16, a8, 7, s);
    for (int i = 0; i < 7; i++) ck_assert_msg(s[i] == w8[i], "mxfp8_16 %d: %a", i, (double)s[i]);
    /* an absmax whose scale overflows (only through a factor) is a range error */
    quant_how how;
    quant_how_init(&how, QUANT_QTYPE_MXFP4);
    float big[1] = {INFINITY};
    quant_calibration cal = {false, big, NULL, NULL};
    quant_error err;
    ck_assert_int_eq(quant_compute_scale(&how, &cal, 1, s, NULL, &err), QUANT_ERR_RANGE);
}
END_TEST

/* g = f32(2688 * f32(1 / max(A, FLT_MIN))), inf/NaN -> 1 (python3, float32 at each step):
 *  A 3:    f32(1/3) 0.33333334, * 2688 = 896.00003 -> 896
 *  A 0.7:  f32(0.7) 0.69999999, f32(1/.) 1.4285715, * 2688 -> 3840
 *  A 1e30: 2.6880000085238546e-27 (0x1.a9ee3cp-89)
 *  A 0, 1e-37, FLT_MIN: 2688 * 2^126 (or more) overflows -> 1 */
START_TEST(nvfp4_global_scale_by_hand)
{
    ck_assert_float_eq(quant_nvfp4_global_scale(3.0f), 896.0f);
    ck_assert_float_eq(quant_nvfp4_global_scale(0.7f), 3840.0f);
    ck_assert_float_eq(quant_nvfp4_global_scale(1e30f), 0x1.a9ee3cp-89f);
    ck_assert_float_eq(quant_nvfp4_global_scale(0.0f), 1.0f);
    ck_assert_float_eq(quant_nvfp4_global_scale(1e-37f), 1.0f);
    ck_assert_float_eq(quant_nvfp4_global_scale(FLT_MIN), 1.0f);
    ck_assert_float_eq(quant_nvfp4_global_scale(NAN), 1.0f);
}
END_TEST

/* e_b = f32(s_b / g), s_b = e4m3fn(f32(absmax_b / 6) * g), 0 -> 0.125 (python3 as above):
 *  g 896:  absmax 3 -> 0.5 * 896 = 448 -> s_b 448, e_b 0.5
 *          absmax 0.1 -> 0.016666668 * 896 = 14.933 -> s_b 15, e_b 0x1.124924p-6
 *          absmax 0 -> s_b 0 -> 0.125, e_b 0x1.24924ap-13
 *          absmax 0.01 -> 1.4933 -> s_b 1.5, e_b 0x1.b6db6ep-10
 *  g 3840: absmax 0.01 -> 6.4 -> s_b 6.5, e_b 0x1.bbbbbcp-10
 *  g 1:    absmax 0.1 -> 0.016666668 -> s_b 0.017578125 (e4m3fn 9 * 2^-9), e_b the same */
START_TEST(nvfp4_block_scales_by_hand)
{
    quant_how how;
    quant_how_init(&how, QUANT_QTYPE_NVFP4);
    float a[4] = {3.0f, 0.1f, 0.0f, 0.01f}, s[4];
    quant_calibration cal = {false, a, NULL, NULL};
    quant_error err;
    ck_assert_int_eq(quant_compute_scale(&how, &cal, 4, s, NULL, &err), QUANT_ERR_ARG);
    ck_assert_msg(strstr(err.message, "global scale") != NULL, "%s", err.message);
    how.global_scale = 896.0f;
    ck_assert_int_eq(quant_compute_scale(&how, &cal, 4, s, NULL, &err), QUANT_OK);
    ck_assert_float_eq(s[0], 0.5f);
    ck_assert_float_eq(s[1], 0x1.124924p-6f);
    ck_assert_float_eq(s[2], 0x1.24924ap-13f);
    ck_assert_float_eq(s[3], 0x1.b6db6ep-10f);
    how.global_scale = 3840.0f;
    ck_assert_int_eq(quant_compute_scale(&how, &cal, 4, s, NULL, &err), QUANT_OK);
    ck_assert_float_eq(s[3], 0x1.bbbbbcp-10f);
    how.global_scale = 1.0f;
    ck_assert_int_eq(quant_compute_scale(&how, &cal, 4, s, NULL, &err), QUANT_OK);
    ck_assert_float_eq(s[1], 0.017578125f);
    ck_assert_float_eq(s[2], 0.125f);
}
END_TEST

static void mx_how(quant_how *how, quant_qtype q, const char *method)
{
    quant_how_init(how, q);
    how->calibration = method;
    how->channel_axes[how->n_channel_axes++] = 0;
    how->tiles[how->n_tiles++] =
        (quant_tile){.axis = 1, .size = quant_qtype_traits_get(q)->fixed_tile};
}

/* nvfp4 derives g from the whole tensor, before the method's factor (SPEC 2b). */
START_TEST(nvfp4_quantize_derives_global_scale)
{
    float x[2][32] = {{0}};
    x[0][5] = -3.0f;  /* A = 3 -> g 896; block (0,0) absmax 3 */
    x[0][20] = 0.1f;  /* block (0,1) absmax 0.1 */
    x[1][31] = 0.01f; /* block (1,0) is all zero, block (1,1) absmax 0.01 */
    quant_tensor t;
    int64_t shape[2] = {2, 32};
    quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, x, NULL);
    quant_ctx *ctx = tu_ctx(QUANT_ISA_AUTO, 2);
    quant_how how;
    mx_how(&how, QUANT_QTYPE_NVFP4, "absmax");
    how.pack = false;
    uint8_t q[64];
    float s[4];
    quant_error err;
    ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, s, NULL, &err), QUANT_OK);
    ck_assert_float_eq(s[0], 0.5f);
    ck_assert_float_eq(s[1], 0x1.124924p-6f);
    ck_assert_float_eq(s[2], 0x1.24924ap-13f);
    ck_assert_float_eq(s[3], 0x1.b6db6ep-10f);
    ck_assert_int_eq(q[5], 8 | 7);   /* -3 / 0.5 = -6: magnitude code 7, negative */
    ck_assert_int_eq(q[20], 7);      /* 0.1 / e_b = 5.97 -> 6: code 7 */
    ck_assert_int_eq(q[32 + 31], 7); /* 0.01 / e_b = 5.97 -> 6: code 7 */
    ck_assert_int_eq(q[0], 0);
    /* the factor changes absmax_b only: absmax,0.5 keeps g 896, block (0,0) gets
     * e4m3fn(f32(1.5 / 6) * 896) = 224 -> e_b 0.25 */
    how.calibration = "absmax,0.5";
    ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, s, NULL, &err), QUANT_OK);
    ck_assert_float_eq(s[0], 0.25f);
    ck_assert_int_eq(q[5], 15); /* -3 / 0.25 = -12 clips to -6 */
    /* a given global scale is used as is */
    how.calibration = "absmax";
    how.global_scale = 1.0f;
    ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, s, NULL, &err), QUANT_OK);
    ck_assert_float_eq(s[1], 0.017578125f);
    float amax = 0;
    ck_assert_int_eq(quant_absmax_all(ctx, &t, &amax, &err), QUANT_OK);
    ck_assert_float_eq(amax, 3.0f);
    quant_ctx_free(ctx);
}
END_TEST

/* One nvfp4 quantize of x (2 rows of 64) under global scale g and `method` on every ISA and thread
 * count: it succeeds, every e_b is finite and positive, the error sums are finite, and codes,
 * scales and sums equal the scalar run's. */
static void nvfp4_finite_everywhere(const float *x, float g, const char *method)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    int64_t shape[2] = {2, 64};
    quant_tensor t;
    ck_assert_int_eq(quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, (void *)x, NULL), QUANT_OK);
    quant_how how;
    mx_how(&how, QUANT_QTYPE_NVFP4, method);
    how.pack = false;
    how.global_scale = g;
    uint8_t q0[128], q[128];
    float s0[8], s[8];
    quant_error_stats e0, e;
    quant_error err;
    quant_ctx *ctx = tu_ctx(QUANT_ISA_SCALAR, 1);
    quant_status st = quant_quantize_measured(ctx, &how, &t, q0, s0, NULL, &e0, &err);
    quant_ctx_free(ctx);
    ck_assert_msg(st == QUANT_OK, "g %a %s: %s", (double)g, method, err.message);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(s0[i] > 0.0f && isfinite(s0[i]), "g %a %s: e_b[%d] = %a", (double)g, method,
                      i, (double)s0[i]);
    ck_assert_msg(isfinite(e0.sum_sq_err) && isfinite(e0.max_abs_err), "g %a %s: sums %a %a",
                  (double)g, method, e0.sum_sq_err, e0.max_abs_err);
    for (int k = 0; k < nisa; k++)
        for (int threads = 1; threads <= 2; threads++) {
            ctx = tu_ctx(isas[k], threads);
            st = quant_quantize_measured(ctx, &how, &t, q, s, NULL, &e, &err);
            quant_ctx_free(ctx);
            ck_assert_msg(st == QUANT_OK, "%s/%d: %s", quant_isa_name(isas[k]), threads,
                          err.message);
            ck_assert_msg(memcmp(q, q0, sizeof q) == 0 && memcmp(s, s0, sizeof s) == 0 &&
                              memcmp(&e, &e0, sizeof e) == 0,
                          "g %a %s: %s/%d differs from scalar", (double)g, method,
                          quant_isa_name(isas[k]), threads);
        }
}

/* A given nvfp4 global scale must be finite and at least 2^-119, where 448 / g (the largest
 * e_b) still fits float32: subnormal ones, FLT_MIN and the float just below 2^-119 are refused
 * with an error naming the value and the limit; from 2^-119 to FLT_MAX every block scale, code
 * and error sum is finite on every ISA, for all-zero blocks (s_b 0.125), blocks near FLT_MAX
 * whose absmax times 3 overflows (s_b 448), subnormal inputs and ordinary ones. */
START_TEST(nvfp4_global_scale_limits)
{
    static const float refused[] = {0x1p-149f,        2e-40f,   FLT_MIN, 0x1p-120f,
                                    0x1.fffffep-120f, INFINITY, NAN,     -1.0f};
    static const float accepted[] = {0x1p-119f, 0x1p-100f, 1e-30f, 1.0f, 0x1p100f, FLT_MAX};
    static const char *methods[] = {"absmax", "absmax,3", "rms,2.5", "mse"};
    quant_how how;
    quant_error err;
    mx_how(&how, QUANT_QTYPE_NVFP4, "absmax");
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        how.global_scale = refused[i];
        ck_assert_int_eq(quant_how_check(&how, &err), QUANT_ERR_ARG);
        ck_assert_msg(strstr(err.message, "global scale") && strstr(err.message, "2^-119"), "%s",
                      err.message);
    }
    how.global_scale = FLT_MIN;
    ck_assert_int_eq(quant_how_check(&how, &err), QUANT_ERR_ARG);
    ck_assert_msg(strstr(err.message, "1.17549e-38"), "%s", err.message);
    float x[2][64] = {{0}};
    for (int j = 0; j < 16; j++) {
        x[0][16 + j] = (j % 2 ? -3e38f : 2.9e38f) / (float)(1 + j % 3); /* overflows times 3 */
        x[0][32 + j] = 1e-42f * (float)(j + 1);                         /* subnormal */
        x[1][j] = 0.25f * (float)(j - 8);
        x[1][48 + j] = 1e-20f * (float)(j + 1);
    }
    for (size_t i = 0; i < sizeof accepted / sizeof *accepted; i++) {
        how.global_scale = accepted[i];
        ck_assert_msg(quant_how_check(&how, &err) == QUANT_OK, "%s", err.message);
        for (size_t m = 0; m < sizeof methods / sizeof *methods; m++)
            nvfp4_finite_everywhere(&x[0][0], accepted[i], methods[m]);
    }
}
END_TEST

/* SPEC 2b's tie list through a whole mxfp4 quantize (scale 1: block absmax 6). */
START_TEST(mxfp4_codes_packed_and_unpacked)
{
    float x[32] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.1f, 6.0f, -6.0f};
    quant_tensor t;
    int64_t shape[2] = {1, 32};
    quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, x, NULL);
    quant_ctx *ctx = tu_ctx(QUANT_ISA_AUTO, 1);
    quant_how how;
    mx_how(&how, QUANT_QTYPE_MXFP4, NULL);
    how.pack = false;
    uint8_t q[32], p[16];
    float s[1];
    quant_error err;
    ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, s, NULL, &err), QUANT_OK);
    ck_assert_float_eq(s[0], 1.0f);
    static const uint8_t want[10] = {0, 2, 2, 4, 4, 6, 6, 8, 7, 15};
    for (int i = 0; i < 10; i++) ck_assert_int_eq(q[i], want[i]);
    how.pack = true;
    ck_assert_int_eq(quant_qvalue_bytes(&how, 2, shape), 16);
    ck_assert_int_eq(quant_quantize(ctx, &how, &t, p, s, NULL, &err), QUANT_OK);
    ck_assert_int_eq(p[0], 0x20); /* element 0 low nibble, element 1 high */
    ck_assert_int_eq(p[3], 0x86);
    ck_assert_int_eq(p[4], 0xf7);
    float d[32];
    quant_tensor o;
    quant_tensor_init(&o, QUANT_DTYPE_F32, 2, shape, d, NULL);
    ck_assert_int_eq(quant_dequantize(ctx, &how, p, s, NULL, &o, &err), QUANT_OK);
    ck_assert_float_eq(d[1], 1.0f);
    ck_assert_float_eq(d[4], 2.0f);
    ck_assert(d[7] == 0.0f && signbit(d[7]));
    ck_assert_float_eq(d[9], -6.0f);
    quant_ctx_free(ctx);
}
END_TEST

/* Every microscaling qtype on a real tensor, packed and not, on every ISA and 1..3 threads:
 * dequantize = level(q) * scale exactly, fake-quant equals the two steps, the error is bounded,
 * and every ISA/thread count gives the scalar bits. */
START_TEST(round_trip_real_tensor)
{
    enum { R = 6, C = 96 };
    static float x[R * C], d[R * C], f[R * C];
    tu_rng rng = {77};
    tu_fill(&rng, x, R * C, 2.0f, 0);
    quant_tensor t, o, fo;
    int64_t shape[2] = {R, C};
    quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, x, NULL);
    quant_tensor_init(&o, QUANT_DTYPE_F32, 2, shape, d, NULL);
    quant_tensor_init(&fo, QUANT_DTYPE_F32, 2, shape, f, NULL);
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    for (int k = 0; k < 4; k++)
        for (int pack = 0; pack < 2; pack++) {
            quant_how how;
            mx_how(&how, mx_qtypes[k], "absmax");
            how.pack = pack;
            const quant_qtype_traits *tr = quant_qtype_traits_get(mx_qtypes[k]);
            int64_t ng = C / tr->fixed_tile;
            uint8_t q[R * C], qref[R * C], codes[R * C];
            float s[R * C / 16], sref[R * C / 16];
            quant_error err;
            quant_ctx *ctx = tu_ctx(QUANT_ISA_SCALAR, 1);
            ck_assert_int_eq(quant_quantize(ctx, &how, &t, qref, sref, NULL, &err), QUANT_OK);
            ck_assert_int_eq(quant_dequantize(ctx, &how, qref, sref, NULL, &o, &err), QUANT_OK);
            ck_assert_int_eq(quant_fake_quant(ctx, &how, &t, &fo, &err), QUANT_OK);
            ck_assert_int_eq(memcmp(d, f, sizeof d), 0);
            if (tr->packable && pack)
                quant_unpack_nibbles(qref, R, C, false, codes);
            else
                memcpy(codes, qref, sizeof codes);
            for (int i = 0; i < R * C; i++) {
                float sc = sref[(i / C) * ng + (i % C) / tr->fixed_tile];
                ck_assert(d[i] == tr->level(codes[i]) * sc);
                /* fp4: half the widest gap (4..6) plus the OAS clip (absmax/scale < 7): 1 * scale;
                 * e4m3fn: 2^-4 relative, plus the clip (absmax/scale < 463): 16 * scale */
                float bound = tr->bits == 4 ? sc : fmaxf(fabsf(x[i]) * 0.0625f, 16.0f * sc);
                ck_assert_msg(fabsf(x[i] - d[i]) <= bound, "%s %d: %g vs %g", tr->name, i,
                              (double)x[i], (double)d[i]);
            }
            quant_error_stats es;
            ck_assert_int_eq(quant_measure_error(ctx, &how, &t, qref, sref, NULL, &es, &err),
                             QUANT_OK);
            double sqnr = 10.0 * log10(es.sum_sq_x / es.sum_sq_err);
            ck_assert_msg(sqnr > (tr->bits == 4 ? 12.0 : 25.0), "%s sqnr %g", tr->name, sqnr);
            quant_ctx_free(ctx);
            int64_t qb = quant_qvalue_bytes(&how, 2, shape);
            for (int i = 0; i < nisa; i++)
                for (int th = 1; th <= 3; th++) {
                    ctx = tu_ctx(isas[i], th);
                    memset(q, 0, sizeof q);
                    ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, s, NULL, &err), QUANT_OK);
                    ck_assert_int_eq(memcmp(q, qref, (size_t)qb), 0);
                    ck_assert_int_eq(memcmp(s, sref, (size_t)(R * ng) * 4), 0);
                    quant_ctx_free(ctx);
                }
        }
}
END_TEST

static quant_status plan_status(quant_qtype q, const char *method, quant_dtype sd, int ntiles,
                                int64_t tile, double fraction, int64_t cols, quant_error *err)
{
    quant_how how;
    quant_how_init(&how, q);
    how.calibration = method;
    how.scale_dtype = sd;
    how.channel_axes[how.n_channel_axes++] = 0;
    for (int i = 0; i < ntiles; i++)
        how.tiles[how.n_tiles++] = (quant_tile){.axis = 1 - i, .size = tile, .fraction = fraction};
    if (ntiles == 2) how.n_channel_axes = 0;
    int64_t shape[2] = {32, cols}, ss[2];
    return quant_scale_shape(&how, 2, shape, ss, err);
}

START_TEST(refusals)
{
    quant_error err;
    const quant_dtype F32 = QUANT_DTYPE_F32;
    for (int k = 0; k < 4; k++) {
        quant_qtype q = mx_qtypes[k];
        int64_t ft = quant_qtype_traits_get(q)->fixed_tile;
        ck_assert_int_eq(plan_status(q, "absmax", F32, 1, ft, 0, 64, &err), QUANT_OK);
        ck_assert_int_eq(plan_status(q, "absmax,0.9", F32, 1, ft, 0, 64, &err), QUANT_OK);
        ck_assert_int_eq(plan_status(q, "rms,3", F32, 1, ft, 0, 64, &err), QUANT_OK);
        /* tiles: none, another size, a fraction, 2-D, a dimension the tile does not divide */
        ck_assert_int_eq(plan_status(q, "absmax", F32, 0, 0, 0, 64, &err), QUANT_ERR_TILE);
        ck_assert_msg(strstr(err.message, quant_qtype_traits_get(q)->name), "%s", err.message);
        ck_assert_int_eq(plan_status(q, "absmax", F32, 1, ft * 2, 0, 64, &err), QUANT_ERR_TILE);
        ck_assert_int_eq(plan_status(q, "absmax", F32, 1, 0, 0.5, 64, &err), QUANT_ERR_TILE);
        ck_assert_int_eq(plan_status(q, "absmax", F32, 2, ft, 0, 64, &err), QUANT_ERR_TILE);
        ck_assert_int_eq(plan_status(q, "absmax", F32, 1, ft, 0, ft + 8, &err), QUANT_ERR_TILE);
        /* methods: minmax, fixed (symmetric or not) */
        ck_assert_int_eq(plan_status(q, "minmax", F32, 1, ft, 0, 64, &err), QUANT_ERR_METHOD);
        ck_assert_msg(strstr(err.message, "minmax"), "%s", err.message);
        ck_assert_int_eq(plan_status(q, "fixed,2", F32, 1, ft, 0, 64, &err), QUANT_ERR_METHOD);
        ck_assert_int_eq(plan_status(q, "fixed,-1,3", F32, 1, ft, 0, 64, &err), QUANT_ERR_METHOD);
        /* scale dtypes */
        ck_assert_int_eq(plan_status(q, "absmax", QUANT_DTYPE_BF16, 1, ft, 0, 64, &err),
                         QUANT_ERR_DTYPE);
        ck_assert_msg(strstr(err.message, "BF16"), "%s", err.message);
        ck_assert_int_eq(plan_status(q, "absmax", QUANT_DTYPE_F16, 1, ft, 0, 64, &err),
                         QUANT_ERR_DTYPE);
        /* stochastic rounding, and a global scale on anything but nvfp4 */
        quant_how how;
        mx_how(&how, q, "absmax");
        how.stochastic = true;
        ck_assert_int_eq(quant_how_check(&how, &err), QUANT_ERR_UNSUPPORTED);
        how.stochastic = false;
        how.global_scale = 2.0f;
        ck_assert_int_eq(quant_how_check(&how, &err),
                         q == QUANT_QTYPE_NVFP4 ? QUANT_OK : QUANT_ERR_ARG);
        how.global_scale = -1.0f;
        ck_assert_int_eq(quant_how_check(&how, &err), QUANT_ERR_ARG);
    }
}
END_TEST

/* The e2m1 kernels of every ISA against the scalar one on every tie, its neighbours, the levels,
 * both zeros and values past the clip, in chunks with tails and odd column offsets. */
START_TEST(e2m1_kernels_match_scalar)
{
    enum { N = 700 };
    static float x[N], scale[N], d1[N], d2[N];
    static uint8_t q1[N], q2[N];
    static const float mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    int n = 0;
    for (int i = 0; i < 7; i++)
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            x[n++] = (float)sgn * mid[i];
            x[n++] = (float)sgn * nextafterf(mid[i], 0.0f);
            x[n++] = (float)sgn * nextafterf(mid[i], 10.0f);
        }
    for (int c = 0; c < 16; c++) x[n++] = quant_e2m1_levels[c];
    x[n++] = 0.0f;
    x[n++] = -0.0f;
    x[n++] = 7.0f;
    x[n++] = -1e30f;
    x[n++] = 1e-40f;
    tu_rng rng = {5};
    while (n < N) x[n++] = tu_normal(&rng, 3.0f);
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    static const int64_t tiles[3] = {16, 32, 1};
    for (int ti = 0; ti < 3; ti++)
        for (int sc = 0; sc < 2; sc++) {
            for (int g = 0; g < N; g++) scale[g] = sc ? 0.5f : 1.0f;
            quant_krow kr = {QK_E2M1, tiles[ti], scale, NULL, 0.0f, 0.0f, NULL, 0, false};
            for (int64_t c0 = 0; c0 < 48; c0 += 16)
                for (int64_t len = N - 48; len <= N - 48 + 5; len++) {
                    ck_assert_int_eq(quant_generic_quantize(&kr, x, len, c0, q1), 0);
                    quant_generic_dequantize(&kr, q1, len, c0, d1);
                    for (int k = 0; k < nisa; k++) {
                        const quant_kernels *kk = quant_kernels_for(isas[k]);
                        memset(q2, 0xaa, sizeof q2);
                        ck_assert_int_eq(kk->quantize(&kr, x, len, c0, q2), 0);
                        ck_assert_msg(memcmp(q1, q2, (size_t)len) == 0, "%s tile %lld c0 %lld",
                                      quant_isa_name(isas[k]), (long long)tiles[ti], (long long)c0);
                        kk->dequantize(&kr, q1, len, c0, d2);
                        ck_assert_int_eq(memcmp(d1, d2, (size_t)len * 4), 0);
                    }
                }
        }
}
END_TEST

/* The scale kernels (mx_scales, nvfp4_scales, lin_scales) and the error sums of every ISA
 * against the scalar ones, bit for bit: absmax over zero, the tiny rule's edge, subnormals,
 * FLT_MAX, every binade from 2^-140 to 2^127 and random values, in lengths with every tail; a
 * negative, NaN or infinite absmax must make a SIMD version decline (nonzero) or give the scalar
 * bits. */
START_TEST(scale_kernels_match_scalar)
{
    enum { N = 331 };
    static float a[N], s1[N], s2[N], d[N];
    int n = 0;
    a[n++] = 0.0f;
    a[n++] = 0x1p-149f;
    a[n++] = FLT_MIN;
    a[n++] = FLT_MAX;
    a[n++] = 0x1p-63f * 6.0f;
    a[n++] = nextafterf(0x1p-63f * 6.0f, 0.0f);
    a[n++] = 448.0f * 6.0f;
    for (int e = -140; e <= 127 && n < 200; e += 2)
        a[n++] = ldexpf(1.0f + (float)(e & 7) / 8.0f, e);
    tu_rng rng = {11};
    while (n < N) a[n] = fabsf(tu_normal(&rng, 3.0f)), n++;
    for (int i = 0; i < N; i++) d[i] = a[(i * 7) % N] * 0.999f;
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    static const float globals[4] = {1.0f, 0x1p-20f, 2688.0f / 3.0f, 0x1p20f};
    for (int k = 0; k < nisa; k++) {
        const quant_kernels *kk = quant_kernels_for(isas[k]);
        const char *isa = quant_isa_name(isas[k]);
        for (int len = N - 20; len <= N; len++) {
            quant_generic_mx_scales(a, len, 6.0f, 1.0f, s1);
            ck_assert_int_eq(kk->mx_scales(a, len, 6.0f, 1.0f, s2), 0);
            ck_assert_msg(memcmp(s1, s2, (size_t)len * 4) == 0, "%s mx_scales len %d", isa, len);
            for (int g = 0; g < 4; g++) {
                quant_generic_nvfp4_scales(a, len, globals[g], s1);
                ck_assert_int_eq(kk->nvfp4_scales(a, len, globals[g], s2), 0);
                ck_assert_msg(memcmp(s1, s2, (size_t)len * 4) == 0, "%s nvfp4_scales g %g", isa,
                              (double)globals[g]);
            }
            int r1 = quant_generic_lin_scales(a, len, 127.5f, s1);
            int r2 = kk->lin_scales(a, len, 127.5f, s2);
            ck_assert_int_eq(r1, r2);
            ck_assert_msg(memcmp(s1, s2, (size_t)len * 4) == 0, "%s lin_scales len %d", isa, len);
            double e1[3] = {0}, e2[3] = {0};
            quant_generic_errstats(a, d, len, e1);
            kk->errstats(a, d, len, e2);
            ck_assert_msg(memcmp(e1, e2, sizeof e1) == 0, "%s errstats len %d", isa, len);
        }
        /* an unusual absmax: declined, or the scalar bits */
        static const float odd[3] = {-1.0f, INFINITY, NAN};
        for (int o = 0; o < 3; o++)
            for (int at = 0; at < 9; at++) {
                float b[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
                b[at] = odd[o];
                float t1[9], t2[9];
                quant_generic_mx_scales(b, 9, 6.0f, 1.0f, t1);
                if (kk->mx_scales(b, 9, 6.0f, 1.0f, t2) == 0)
                    ck_assert_msg(memcmp(t1, t2, sizeof t1) == 0, "%s mx odd %d", isa, at);
                quant_generic_nvfp4_scales(b, 9, 1.0f, t1);
                if (kk->nvfp4_scales(b, 9, 1.0f, t2) == 0)
                    ck_assert_msg(memcmp(t1, t2, sizeof t1) == 0, "%s nvfp4 odd %d", isa, at);
            }
        /* error sums with a NaN in x and in d: the running max keeps the scalar rule */
        float xs[19], ds[19];
        for (int i = 0; i < 19; i++) xs[i] = ds[i] = (float)i;
        ds[3] = NAN;
        ds[11] = 100.0f; /* after the NaN, in its lane */
        double e1[3] = {0}, e2[3] = {0};
        quant_generic_errstats(xs, ds, 19, e1);
        kk->errstats(xs, ds, 19, e2);
        ck_assert_msg(e1[2] == e2[2] && isnan(e1[1]) && isnan(e2[1]), "%s errstats NaN", isa);
    }
}
END_TEST

Suite *suite_microscaling(void)
{
    Suite *s = suite_create("microscaling");
    TCase *tc = tcase_create("spec2b");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, traits_rows);
    tcase_add_test(tc, e2m1_convert_and_levels);
    tcase_add_test(tc, mx_scales_by_hand);
    tcase_add_test(tc, nvfp4_global_scale_by_hand);
    tcase_add_test(tc, nvfp4_block_scales_by_hand);
    tcase_add_test(tc, nvfp4_quantize_derives_global_scale);
    tcase_add_test(tc, nvfp4_global_scale_limits);
    tcase_add_test(tc, mxfp4_codes_packed_and_unpacked);
    tcase_add_test(tc, round_trip_real_tensor);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, e2m1_kernels_match_scalar);
    tcase_add_test(tc, scale_kernels_match_scalar);
    suite_add_tcase(s, tc);
    return s;
}
