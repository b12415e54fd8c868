/* test_ctx.c -- contexts: ISA choice ($QUANT_ISA, explicit, unavailable), thread counts, the
 * version check, and the thread pool itself.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>

#include "../testutil.h"

START_TEST(isa_selection)
{
    quant_error err;
    ck_assert(quant_isa_supported(QUANT_ISA_SCALAR));
    ck_assert(!quant_isa_supported(QUANT_ISA_AUTO));
    ck_assert(!quant_isa_supported(QUANT_ISA_COUNT));
    ck_assert(quant_isa_supported(quant_isa_best()));
    ck_assert_str_eq(quant_isa_name(QUANT_ISA_AVX2), "avx2");
    ck_assert_ptr_null(quant_isa_name(QUANT_ISA_COUNT));

    setenv("QUANT_ISA", "scalar", 1);
    quant_ctx *c = quant_ctx_new(NULL, &err);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(quant_ctx_isa(c), QUANT_ISA_SCALAR);
    ck_assert_int_ge(quant_ctx_threads(c), 1);
    quant_ctx_free(c);

    setenv("QUANT_ISA", "sse9", 1);
    ck_assert_ptr_null(quant_ctx_new(NULL, &err));
    ck_assert_int_eq(err.status, QUANT_ERR_ISA);
    ck_assert_ptr_nonnull(strstr(err.message, "sse9"));
    unsetenv("QUANT_ISA");

    quant_ctx_options o = {.threads = 1, .isa = QUANT_ISA_AUTO};
    c = quant_ctx_new(&o, &err);
    ck_assert_int_eq(quant_ctx_isa(c), quant_isa_best());
    quant_ctx_free(c);
    for (int i = QUANT_ISA_SCALAR; i < QUANT_ISA_COUNT; i++) {
        o.isa = (quant_isa)i;
        c = quant_ctx_new(&o, &err);
        ck_assert_int_eq(c != NULL, quant_isa_supported((quant_isa)i));
        if (!c) ck_assert_int_eq(err.status, QUANT_ERR_ISA);
        quant_ctx_free(c);
    }
    o.isa = QUANT_ISA_SCALAR;
    o.threads = -1;
    ck_assert_ptr_null(quant_ctx_new(&o, &err));
    ck_assert_int_eq(err.status, QUANT_ERR_ARG);
    o.threads = QUANT_MAX_THREADS + 1;
    ck_assert_ptr_null(quant_ctx_new(&o, &err));
    quant_ctx_free(NULL);
    ck_assert_int_eq(quant_version_number(), QUANT_VERSION_NUMBER);
}
END_TEST

START_TEST(many_threads_many_runs)
{
    /* 8 workers on any machine, many back-to-back runs: no lost or doubled items */
    quant_ctx *c = tu_ctx(QUANT_ISA_AUTO, 8);
    enum { R = 300, C = 40 };
    static float x[R * C], s1[R], s2[R];
    static int8_t q1[R * C], q2[R * C];
    tu_rng rng = {1};
    tu_fill(&rng, x, R * C, 1.0f, 1);
    quant_how how;
    quant_error err;
    quant_how_init(&how, QUANT_QTYPE_INT8);
    how.n_channel_axes = 1;
    quant_tensor t;
    int64_t shape[2] = {R, C};
    quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, x, NULL);
    quant_ctx *one = tu_ctx(QUANT_ISA_SCALAR, 1);
    ck_assert_int_eq(quant_quantize(one, &how, &t, q1, s1, NULL, &err), QUANT_OK);
    for (int k = 0; k < tu_iters(200); k++) {
        memset(q2, 0, sizeof q2);
        ck_assert_int_eq(quant_quantize(c, &how, &t, q2, s2, NULL, &err), QUANT_OK);
        ck_assert_int_eq(memcmp(q1, q2, sizeof q1), 0);
        ck_assert_int_eq(memcmp(s1, s2, sizeof s1), 0);
    }
    quant_ctx_free(one);
    quant_ctx_free(c);
}
END_TEST

Suite *suite_ctx(void)
{
    Suite *s = suite_create("ctx");
    TCase *tc = tcase_create("ctx");
    tcase_add_test(tc, isa_selection);
    tcase_add_test(tc, many_threads_many_runs);
    suite_add_tcase(s, tc);
    return s;
}
