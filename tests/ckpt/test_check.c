/* test_check.c -- the check suite: quant_check_path() refuses what quant_quantize_path() would
 * refuse before reading tensor data (a rule the layout cannot express, a tile that does not
 * divide, an act_static_scale rule without statistics, a bad checkpoint, a link under a confined
 * input), with the same message, accepts what it would run, and writes nothing.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckutil.h"
#include "quant_pipeline.h"

#define STORIES "stories260K-bf16-sharded"

/* quant_check_path and quant_quantize_path of rules on `in` agree: both OK, or the same
 * status and message; returns the status. */
static quant_ck_status both_agree(const char *rules_json, const char *in, quant_layout layout)
{
    quant_ruleset *rs = ck_rules(rules_json);
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.layout = layout;
    quant_ck_error a, b;
    quant_ck_status sa = quant_check_path(rs, in, &o, &a);
    char *dir = ck_tmpdir(), *out = kit_join(dir, "out");
    quant_ck_status sb = quant_quantize_path(rs, in, out, &o, NULL, &b);
    ck_assert_int_eq(sa, sb);
    if (sa != QUANT_CK_OK) ck_assert_str_eq(a.message, b.message);
    kit_rmtree(dir);
    free(dir);
    free(out);
    quant_ruleset_free(rs);
    return sa;
}

START_TEST(test_check_agrees)
{
    char *in = kit_join(ck_data_dir(), STORIES);
    ck_assert_int_eq(both_agree("[{\"module_path\": \".*proj\", \"weight_qtype\": \"int8\"}]", in,
                                QUANT_LAYOUT_NATIVE),
                     QUANT_CK_OK);
    ck_assert_int_eq(both_agree("[{\"module_path\": \".*proj\", \"weight_qtype\": \"int16\"}]", in,
                                QUANT_LAYOUT_CTENSORS),
                     QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_int_ne(both_agree("[{\"module_path\": \".*proj\", \"weight_qtype\": \"int8\", "
                                "\"tile_size\": 5}]",
                                in, QUANT_LAYOUT_NATIVE),
                     QUANT_CK_OK);
    ck_assert_int_ne(both_agree("[{\"module_path\": \".*proj\", \"weight_qtype\": \"int8\", "
                                "\"act_qtype\": \"int8\", \"act_static_scale\": true}]",
                                in, QUANT_LAYOUT_NATIVE),
                     QUANT_CK_OK);
    char *bad = kit_join(ck_data_dir(), "bad");
    ck_assert_int_ne(both_agree("[]", bad, QUANT_LAYOUT_NATIVE), QUANT_CK_OK);
    free(bad);
    free(in);
}
END_TEST

/* A check writes nothing: the checkpoint's directory and its parent hold what they held (no
 * temporary, no partial output); NULL arguments are refused. */
START_TEST(test_check_writes_nothing)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "stories"), cmd[4096];
    snprintf(cmd, sizeof cmd, "cp -r '%s/%s' '%s'", ck_data_dir(), STORIES, in);
    ck_assert_int_eq(system(cmd), 0);
    int files = ck_count_entries(in), beside = ck_count_entries(dir);
    quant_ruleset *rs = ck_rules("[{\"module_path\": \".*\", \"weight_qtype\": \"int4\"}]");
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.layout = QUANT_LAYOUT_CTENSORS; /* reads config.json too */
    quant_ck_error err;
    ck_assert_int_eq(quant_check_path(rs, in, &o, &err), QUANT_CK_OK);
    ck_assert_int_eq(ck_count_entries(in), files);
    ck_assert_int_eq(ck_count_entries(dir), beside);
    ck_assert_int_eq(quant_check_path(NULL, in, NULL, &err), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_check_path(rs, NULL, NULL, &err), QUANT_CK_ERR_ARG);
    quant_ruleset_free(rs);
    kit_rmtree(dir);
    free(dir);
    free(in);
}
END_TEST

Suite *suite_check(void)
{
    Suite *s = suite_create("check");
    TCase *tc = tcase_create("check");
    tcase_add_test(tc, test_check_agrees);
    tcase_add_test(tc, test_check_writes_nothing);
    suite_add_tcase(s, tc);
    return s;
}
