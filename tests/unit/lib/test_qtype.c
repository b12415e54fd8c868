/* test_qtype.c -- the qtype traits table, name parsing and the convert() examples of SPEC
 * section 2, including the NF4 bucketing against its argmin definition.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>

#include "../testutil.h"

static const quant_qtype_traits *T(quant_qtype q)
{
    const quant_qtype_traits *t = quant_qtype_traits_get(q);
    ck_assert_ptr_nonnull(t);
    return t;
}

static void expect_codes(quant_qtype q, const float *in, const int32_t *want, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(T(q)->convert(in[i]) == want[i], "%s convert(%g) = %d, want %d", T(q)->name,
                      (double)in[i], T(q)->convert(in[i]), want[i]);
}

START_TEST(spec_int8_saturation)
{
    const float in[] = {1.2f, 3.5f, -127.5f, 129.0f, -1300.0f, INFINITY, -INFINITY};
    const int32_t want[] = {1, 4, -128, 127, -128, 127, -128};
    expect_codes(QUANT_QTYPE_INT8, in, want, 7);
}
END_TEST

START_TEST(spec_int4_int6_saturation)
{
    const float in4[] = {1.2f, 3.5f, 8.0f, -1300.0f};
    const int32_t want4[] = {1, 4, 7, -8};
    expect_codes(QUANT_QTYPE_INT4, in4, want4, 4);
    const float in6[] = {1.2f, 3.5f, 129.0f, -1300.0f};
    const int32_t want6[] = {1, 4, 31, -32};
    expect_codes(QUANT_QTYPE_INT6, in6, want6, 4);
}
END_TEST

START_TEST(spec_nf4_examples)
{
    const float in[] = {-1.0f, -0.5f, 0.0f, 0.8f, 1.0f};
    const int32_t want[] = {0, 2, 7, 14, 15};
    expect_codes(QUANT_QTYPE_NF4, in, want, 5);
}
END_TEST

START_TEST(round_half_even_and_uint_clip)
{
    const float in[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f};
    const int32_t want[] = {0, 2, 2, 0, -2, -2, 126};
    expect_codes(QUANT_QTYPE_INT8, in, want, 7);
    const float inu[] = {-3.0f, 0.5f, 15.5f, 300.0f};
    const int32_t wantu4[] = {0, 0, 15, 15};
    expect_codes(QUANT_QTYPE_UINT4, inu, wantu4, 4);
    const int32_t wantu8[] = {0, 0, 16, 255};
    expect_codes(QUANT_QTYPE_UINT8, inu, wantu8, 4);
    const float in16[] = {32767.5f, -32768.5f, 1e9f};
    const int32_t want16[] = {32767, -32768, 32767};
    expect_codes(QUANT_QTYPE_INT16, in16, want16, 3);
}
END_TEST

START_TEST(table_rows)
{
    static const struct {
        quant_qtype q;
        const char *name;
        int bits;
        float bound;
        int32_t qmin, qmax;
        bool asym, packable;
    } rows[] = {
        {QUANT_QTYPE_INT2, "int2", 2, 1.5f, -2, 1, true, true},
        {QUANT_QTYPE_INT3, "int3", 3, 3.5f, -4, 3, true, true},
        {QUANT_QTYPE_INT4, "int4", 4, 7.5f, -8, 7, true, true},
        {QUANT_QTYPE_INT5, "int5", 5, 15.5f, -16, 15, true, false},
        {QUANT_QTYPE_INT6, "int6", 6, 31.5f, -32, 31, true, false},
        {QUANT_QTYPE_INT7, "int7", 7, 63.5f, -64, 63, true, false},
        {QUANT_QTYPE_INT8, "int8", 8, 127.5f, -128, 127, true, false},
        {QUANT_QTYPE_INT16, "int16", 16, 32768.0f, -32768, 32767, true, false},
        {QUANT_QTYPE_UINT4, "uint4", 4, 15.5f, 0, 15, true, true},
        {QUANT_QTYPE_UINT8, "uint8", 8, 255.5f, 0, 255, true, false},
        {QUANT_QTYPE_NF4, "nf4", 4, 1.0f, 0, 15, false, true},
        {QUANT_QTYPE_FP8_E4M3FN, "float8_e4m3fn", 8, 448.0f, 0, 0, false, false},
        {QUANT_QTYPE_FP8_E5M2, "float8_e5m2", 8, 57344.0f, 0, 0, false, false},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const quant_qtype_traits *t = T(rows[i].q);
        ck_assert_str_eq(t->name, rows[i].name);
        ck_assert_int_eq(t->bits, rows[i].bits);
        ck_assert_float_eq(t->symmetric_bound, rows[i].bound);
        ck_assert_int_eq(t->asymmetric_allowed, rows[i].asym);
        ck_assert_int_eq(t->packable, rows[i].packable);
        if (t->kind == QUANT_CODE_INT) {
            ck_assert_int_eq(t->qmin, rows[i].qmin);
            ck_assert_int_eq(t->qmax, rows[i].qmax);
            ck_assert_float_eq(t->level(t->qmin), (float)t->qmin);
        }
    }
    ck_assert_ptr_null(quant_qtype_traits_get(QUANT_QTYPE_COUNT));
    ck_assert_ptr_null(quant_qtype_traits_get((quant_qtype)-1));
    ck_assert_float_eq(T(QUANT_QTYPE_NF4)->level(2), quant_nf4_levels[2]);
    ck_assert_float_eq(T(QUANT_QTYPE_FP8_E4M3FN)->level(0x7e), 448.0f);
    ck_assert_float_eq(T(QUANT_QTYPE_FP8_E5M2)->level(0x7b), 57344.0f);
}
END_TEST

START_TEST(parse_names_and_aliases)
{
    quant_qtype q;
    quant_error err;
    for (int i = 0; i < QUANT_QTYPE_COUNT; i++) {
        ck_assert_int_eq(quant_qtype_parse(T((quant_qtype)i)->name, &q, &err), QUANT_OK);
        ck_assert_int_eq(q, i);
    }
    ck_assert_int_eq(quant_qtype_parse("fp8_e4m3", &q, &err), QUANT_OK);
    ck_assert_int_eq(q, QUANT_QTYPE_FP8_E4M3FN);
    ck_assert_int_eq(quant_qtype_parse("fp8_e5m2", &q, &err), QUANT_OK);
    ck_assert_int_eq(q, QUANT_QTYPE_FP8_E5M2);
    ck_assert_int_eq(quant_qtype_parse("int9", &q, &err), QUANT_ERR_QTYPE);
    ck_assert_ptr_nonnull(strstr(err.message, "int9"));
    ck_assert_int_eq(quant_qtype_parse("INT8", &q, &err), QUANT_ERR_QTYPE);
    ck_assert_int_eq(quant_qtype_parse(NULL, &q, &err), QUANT_ERR_ARG);
    ck_assert_str_eq(quant_status_str(QUANT_ERR_QTYPE), "unknown qtype");
    ck_assert_str_eq(quant_status_str((quant_status)999), "unknown status");
}
END_TEST

/* ggml's block types are qtypes a rule can name, written by the gguf layout only: libquant's
 * own quantizer refuses them with a message that says where they belong. */
START_TEST(ggml_block_qtypes_only_in_gguf)
{
    static const struct {
        const char *name;
        int ggml_type;
        int64_t block;
    } rows[] = {{"q8_0", 8, 32},   {"q4_0", 2, 32},   {"q4_1", 3, 32},    {"q5_0", 6, 32},
                {"q5_1", 7, 32},   {"q2_k", 10, 256}, {"q3_k", 11, 256},  {"q4_k", 12, 256},
                {"q5_k", 13, 256}, {"q6_k", 14, 256}, {"iq4_nl", 20, 32}, {"iq4_xs", 23, 256}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        quant_qtype q;
        quant_error err;
        ck_assert_int_eq(quant_qtype_parse(rows[i].name, &q, &err), QUANT_OK);
        ck_assert_int_eq(T(q)->kind, QUANT_CODE_GGML);
        ck_assert_int_eq(T(q)->ggml_type, rows[i].ggml_type);
        ck_assert_int_eq(T(q)->fixed_tile, rows[i].block);
        quant_how how;
        quant_how_init(&how, q);
        ck_assert_int_eq(quant_how_check(&how, &err), QUANT_ERR_UNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(err.message, "only the gguf layout"));
        ck_assert_ptr_nonnull(strstr(err.message, rows[i].name));
    }
    ck_assert_int_eq(T(QUANT_QTYPE_MXFP4)->ggml_type, 39);
    ck_assert_int_eq(T(QUANT_QTYPE_INT8)->ggml_type, 0);
}
END_TEST

/* Qwix: argmin over float32 |level - v|, first index on ties. */
static int nf4_argmin(float v)
{
    int best = 0;
    float bd = fabsf(quant_nf4_levels[0] - v);
    for (int i = 1; i < 16; i++) {
        float d = fabsf(quant_nf4_levels[i] - v);
        if (d < bd) {
            bd = d;
            best = i;
        }
    }
    return best;
}

START_TEST(nf4_matches_argmin_around_every_threshold)
{
    const quant_qtype_traits *t = T(QUANT_QTYPE_NF4);
    for (int i = 0; i < 15; i++) {
        /* walk 4096 floats either side of the midpoint of levels i and i+1 */
        float mid = (quant_nf4_levels[i] + quant_nf4_levels[i + 1]) / 2;
        float v = mid;
        for (int k = 0; k < 4096; k++) v = nextafterf(v, -2.0f);
        for (int k = 0; k < 8192; k++, v = nextafterf(v, 2.0f))
            ck_assert_msg(t->convert(v) == nf4_argmin(v), "nf4(%a) = %d, argmin %d", (double)v,
                          t->convert(v), nf4_argmin(v));
    }
    tu_rng r = {7};
    for (int k = 0; k < tu_iters(200000); k++) {
        float v = tu_normal(&r, 1.5f);
        ck_assert_int_eq(t->convert(v), nf4_argmin(v));
    }
    ck_assert_int_eq(t->convert(-5.0f), 0);
    ck_assert_int_eq(t->convert(5.0f), 15);
}
END_TEST

Suite *suite_qtype(void)
{
    Suite *s = suite_create("qtype");
    TCase *tc = tcase_create("traits");
    tcase_add_test(tc, spec_int8_saturation);
    tcase_add_test(tc, spec_int4_int6_saturation);
    tcase_add_test(tc, spec_nf4_examples);
    tcase_add_test(tc, round_half_even_and_uint_clip);
    tcase_add_test(tc, table_rows);
    tcase_add_test(tc, parse_names_and_aliases);
    tcase_add_test(tc, ggml_block_qtypes_only_in_gguf);
    tcase_add_test(tc, nf4_matches_argmin_around_every_threshold);
    suite_add_tcase(s, tc);
    return s;
}
