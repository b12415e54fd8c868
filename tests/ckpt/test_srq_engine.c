/* test_srq_engine.c -- the SRQ engine and its statistics reader (quant_srq.h): quant_srq_compute
 * against hand-computed SPEC section 4 values (symmetric and asymmetric, the average rounded to
 * float32 once, the tiny-scale rule), the first matching rule deciding, the skipped activations
 * with their rules and reasons, counts, name order, static_only and a fixed qtype, and its
 * refusals; quant_stats_parse on quantd's GET .../stats document (the averaged calibration taken
 * over the sums, mean_sq accepted and not used) and on Qwix dumps, flat and nested (sum / count);
 * the parser's errors, each naming the source, the activation and the key; the report's counts
 * and skipped list through a run; compressed-tensors' input_scale check left by a plan to the run
 * when the scales come later; and `quant quantize --stats` as a user runs it.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckutil.h"
#include "quant_srq.h"

/* An activation of n values (a, and b for min/max) with shape [n] and count 2. */
static quant_act_stat stat_of(const char *name, quant_stat_kind kind, int64_t n, const double *a,
                              const double *b)
{
    quant_act_stat s = {.name = name, .kind = kind, .rank = 1, .a = a, .b = b, .count = 2};
    s.shape[0] = n;
    return s;
}

static quant_srq *compute(const quant_act_stat *s, size_t n, const quant_ruleset *rs,
                          const quant_srq_options *o)
{
    quant_srq *srq = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_srq_compute(s, n, rs, o, &srq, &err) == QUANT_CK_OK, "%s", err.message);
    return srq;
}

/* ---- the engine ------------------------------------------------------------------------------ */

START_TEST(test_scales_values)
{
    const double abs_v[3] = {2.55, 0.0, 1e-30}, lo[2] = {-2.0, 0.5}, hi[2] = {4.0, 2.0};
    const double u_lo[2] = {-2.0, -1.0}, u_hi[2] = {4.0, 3.0};
    quant_act_stat s[3] = {stat_of("u/x/dot_general0_lhs", QUANT_STAT_MINMAX, 2, u_lo, u_hi),
                           stat_of("m/q/dot_general0_lhs", QUANT_STAT_ABSMAX, 3, abs_v, NULL),
                           stat_of("m/k/dot_general0_lhs", QUANT_STAT_MINMAX, 2, lo, hi)};
    s[0].count = 5;
    quant_ruleset *rs = ck_rules(
        "[{\"module_path\":\"m\\\\..*\",\"act_qtype\":\"int8\",\"act_static_scale\":true},"
        " {\"module_path\":\"u\\\\..*\",\"act_qtype\":\"uint8\",\"act_static_scale\":true}]");
    quant_srq *srq = compute(s, 3, rs, NULL);
    size_t n, n_skipped;
    const quant_static_act *a = quant_srq_acts(srq, &n);
    quant_srq_skipped(srq, &n_skipped);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(n_skipped, 0);
    /* name order: m/k, m/q, u/x */
    ck_assert_str_eq(a[0].name, "m/k/dot_general0_lhs");
    ck_assert_str_eq(a[1].name, "m/q/dot_general0_lhs");
    ck_assert_str_eq(a[2].name, "u/x/dot_general0_lhs");
    /* absmax / 127.5, the average rounded to float once; below sqrt(FLT_MIN) -> 1 */
    ck_assert_str_eq(a[1].tensor_base, "m.q.dot_general0_lhs");
    ck_assert_int_eq(a[1].qtype, QUANT_QTYPE_INT8);
    ck_assert_int_eq(a[1].rule, 0);
    ck_assert_int_eq(a[1].count, 2);
    ck_assert_int_eq(a[1].rank, 1);
    ck_assert_int_eq(a[1].shape[0], 3);
    ck_assert(a[1].scale[0] == (float)2.55 / 127.5f);
    ck_assert(a[1].scale[1] == 1.0f);
    ck_assert(a[1].scale[2] == 1.0f);
    ck_assert_ptr_null(a[1].zero_point);
    /* (max - min) / 255, zero point round(-128 - min / scale); a positive min counts as 0 */
    ck_assert(a[0].scale[0] == 6.0f / 255.0f);
    ck_assert_int_eq(a[0].zero_point[0], -43);
    ck_assert(a[0].scale[1] == 2.0f / 255.0f);
    ck_assert_int_eq(a[0].zero_point[1], -128);
    /* uint8: [0, 255]; 63.75 rounds to 64 */
    ck_assert_int_eq(a[2].qtype, QUANT_QTYPE_UINT8);
    ck_assert_int_eq(a[2].rule, 1);
    ck_assert_int_eq(a[2].count, 5);
    ck_assert(a[2].scale[0] == 6.0f / 255.0f);
    ck_assert_int_eq(a[2].zero_point[0], 85);
    ck_assert(a[2].scale[1] == 4.0f / 255.0f);
    ck_assert_int_eq(a[2].zero_point[1], 64);
    quant_srq_free(srq);
    quant_ruleset_free(rs);
}
END_TEST

START_TEST(test_first_rule_and_skipped)
{
    const double v[1] = {1.0};
    quant_act_stat s[6] = {stat_of("layers/0/mlp/dot_general0_lhs", QUANT_STAT_ABSMAX, 1, v, NULL),
                           stat_of("layers/1/attn/einsum0_lhs", QUANT_STAT_ABSMAX, 1, v, NULL),
                           stat_of("layers/2/foo/dot_general0_lhs", QUANT_STAT_ABSMAX, 1, v, NULL),
                           stat_of("other/dot_general0_lhs", QUANT_STAT_ABSMAX, 1, v, NULL),
                           stat_of("dot_general0_lhs", QUANT_STAT_ABSMAX, 1, v, NULL),
                           stat_of("zz/importance_only", QUANT_STAT_NONE, 2, NULL, NULL)};
    quant_ruleset *rs = ck_rules(
        "[{\"module_path\":\"layers\\\\.0\\\\.mlp\",\"act_qtype\":\"int8\","
        "\"act_static_scale\":true},"
        " {\"module_path\":\"layers\\\\.1\\\\..*\",\"act_qtype\":\"int4\"},"
        " {\"module_path\":\"layers\\\\.2.*\",\"weight_qtype\":\"int8\"},"
        " {\"module_path\":\"(?!layers).*\",\"act_qtype\":\"int16\",\"act_static_scale\":true}]");
    /* static_only (the default): layers.1 matches a dynamic rule and layers.2 a rule without
     * act_qtype; both are skipped, not handed to the catch-all rule 3; mean_sq alone gives none */
    quant_srq *srq = compute(s, 6, rs, NULL);
    size_t n, n_skipped;
    const quant_static_act *a = quant_srq_acts(srq, &n);
    const quant_skipped_act *k = quant_srq_skipped(srq, &n_skipped);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(a[0].name, "dot_general0_lhs"); /* module path "" matches rule 3 */
    ck_assert_int_eq(a[0].rule, 3);
    ck_assert_str_eq(a[1].name, "layers/0/mlp/dot_general0_lhs");
    ck_assert_int_eq(a[1].rule, 0);
    ck_assert_str_eq(a[2].name, "other/dot_general0_lhs");
    ck_assert_int_eq(a[2].qtype, QUANT_QTYPE_INT16);
    ck_assert(a[2].scale[0] == 1.0f / 32768.0f);
    ck_assert_uint_eq(n_skipped, 3);
    ck_assert_str_eq(k[0].name, "layers/1/attn/einsum0_lhs");
    ck_assert_int_eq(k[0].rule, 1);
    ck_assert_str_eq(k[0].reason, "rule 1, the first to match module path 'layers.1.attn', "
                                  "quantizes it dynamically (act_qtype int4 without "
                                  "act_static_scale)");
    ck_assert_str_eq(k[1].name, "layers/2/foo/dot_general0_lhs");
    ck_assert_int_eq(k[1].rule, 2);
    ck_assert_str_eq(k[1].reason,
                     "rule 2, the first to match module path 'layers.2.foo', has no act_qtype");
    ck_assert_str_eq(k[2].name, "zz/importance_only");
    ck_assert_int_eq(k[2].rule, 3);
    ck_assert_ptr_nonnull(strstr(k[2].reason, "mean_sq only"));
    quant_srq_free(srq);
    /* without static_only the dynamic rule's act_qtype counts */
    quant_srq_options o;
    quant_srq_options_init(&o);
    o.static_only = false;
    srq = compute(s, 6, rs, &o);
    a = quant_srq_acts(srq, &n);
    k = quant_srq_skipped(srq, &n_skipped);
    ck_assert_uint_eq(n, 4);
    ck_assert_str_eq(a[2].name, "layers/1/attn/einsum0_lhs");
    ck_assert_int_eq(a[2].qtype, QUANT_QTYPE_INT4);
    ck_assert(a[2].scale[0] == 1.0f / 7.5f);
    ck_assert_uint_eq(n_skipped, 2);
    quant_srq_free(srq);
    /* a fixed qtype: every activation with a calibration, rule -1 */
    o.fixed_qtype = true;
    o.qtype = QUANT_QTYPE_FP8_E4M3FN;
    srq = compute(s, 6, rs, &o);
    a = quant_srq_acts(srq, &n);
    k = quant_srq_skipped(srq, &n_skipped);
    ck_assert_uint_eq(n, 5);
    ck_assert_uint_eq(n_skipped, 1);
    ck_assert_int_eq(k[0].rule, -1);
    ck_assert_int_eq(a[4].rule, -1);
    ck_assert(a[4].scale[0] == 1.0f / 448.0f);
    quant_srq_free(srq);
    /* no rule at all matches */
    quant_ruleset *none = ck_rules("[{\"module_path\":\"nothing\",\"act_qtype\":\"int8\"}]");
    srq = compute(s, 1, none, NULL);
    k = quant_srq_skipped(srq, &n_skipped);
    ck_assert_uint_eq(n_skipped, 1);
    ck_assert_int_eq(k[0].rule, -1);
    ck_assert_str_eq(k[0].reason, "no rule matches module path 'layers.0.mlp'");
    quant_srq_free(srq);
    quant_ruleset_free(none);
    quant_ruleset_free(rs);
}
END_TEST

START_TEST(test_engine_refusals)
{
    const double lo[1] = {-1.0}, hi[1] = {1.0};
    quant_act_stat s[2] = {stat_of("a/ok", QUANT_STAT_MINMAX, 1, lo, hi),
                           stat_of("a/never", QUANT_STAT_MINMAX, 1, lo, hi)};
    s[1].count = 0;
    quant_srq *srq = (quant_srq *)1;
    quant_ck_error err;
    quant_srq_options o;
    quant_srq_options_init(&o);
    o.fixed_qtype = true;
    ck_assert_int_eq(quant_srq_compute(s, 2, NULL, &o, &srq, &err), QUANT_CK_ERR_ARG);
    ck_assert_str_eq(err.message, "activation 'a/never': count is 0, there is no calibration to "
                                  "average");
    ck_assert_ptr_null(srq);
    /* min/max statistics on a qtype without zero points */
    s[1].count = 1;
    o.qtype = QUANT_QTYPE_FP8_E4M3FN;
    ck_assert_int_eq(quant_srq_compute(s, 2, NULL, &o, &srq, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "'a/never'")); /* name order: never < ok */
    ck_assert_ptr_nonnull(strstr(err.message, "float8_e4m3fn"));
    /* two names that differ only in '/' against '.' would write the same tensors */
    quant_act_stat twins[2] = {stat_of("a/b", QUANT_STAT_MINMAX, 1, lo, hi),
                               stat_of("a.b", QUANT_STAT_MINMAX, 1, lo, hi)};
    o.qtype = QUANT_QTYPE_INT8;
    ck_assert_int_eq(quant_srq_compute(twins, 2, NULL, &o, &srq, &err), QUANT_CK_ERR_ARG);
    ck_assert_msg(strstr(err.message, "'a.b' and 'a/b'") != NULL, "%s", err.message);
    /* a name twice */
    quant_act_stat dup[2] = {twins[0], twins[0]};
    ck_assert_int_eq(quant_srq_compute(dup, 2, NULL, &o, &srq, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "given twice"));
    /* neither a qtype nor rules; no values */
    ck_assert_int_eq(quant_srq_compute(s, 2, NULL, NULL, &srq, &err), QUANT_CK_ERR_ARG);
    quant_act_stat bare = stat_of("a/c", QUANT_STAT_ABSMAX, 1, NULL, NULL);
    ck_assert_int_eq(quant_srq_compute(&bare, 1, NULL, &o, &srq, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_null(srq);
    /* none at all is fine */
    srq = compute(NULL, 0, NULL, &o);
    size_t n;
    quant_srq_acts(srq, &n);
    ck_assert_uint_eq(n, 0);
    quant_srq_free(srq);
}
END_TEST

/* ---- statistics files ------------------------------------------------------------------------ */

static quant_stats *parse(const char *json)
{
    quant_stats *s = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_stats_parse(json, strlen(json), "s.json", &s, &err) == QUANT_CK_OK, "%s",
                  err.message);
    return s;
}

START_TEST(test_parse_quantd)
{
    /* what GET /v1/models/m/stats returns (EMA: the calibration is not sum / count), with the
     * mean_sq keys a model may also carry */
    quant_stats *s = parse(
        "{\"model\":\"m\",\"averaging\":\"ema\",\"ema_constant\":0.25,\"bootstrap_steps\":0,"
        "\"stats\":{\"b/up/dot_general0_lhs\":{\"kind\":\"minmax\",\"count\":4,\"shape\":[1,2],"
        "\"updated_at\":\"2026-11-25T00:00:00Z\",\"bootstrapping\":false,"
        "\"sum_of_min\":[[-4,-8]],\"min\":[[-1.25,-2.5]],\"sum_of_max\":[[4,8]],"
        "\"max\":[[0.75,3]]},"
        "\"a/q/dot_general0_lhs\":{\"kind\":\"absmax\",\"count\":3,\"shape\":[],"
        "\"sum_of_absmax\":9,\"absmax\":2.5,\"sum_of_mean_sq\":[3,6],\"mean_sq\":[1,2]},"
        "\"c/imp\":{\"count\":2,\"shape\":[2],\"sum_of_mean_sq\":[2,4],\"mean_sq\":[1,2]}}}");
    size_t n;
    const quant_act_stat *a = quant_stats_acts(s, &n);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(a[0].name, "a/q/dot_general0_lhs");
    ck_assert_int_eq(a[0].kind, QUANT_STAT_ABSMAX);
    ck_assert_int_eq(a[0].rank, 0);
    ck_assert_int_eq(a[0].count, 3);
    ck_assert(a[0].a[0] == 2.5); /* the model's averaging, not 9 / 3 */
    ck_assert_ptr_null(a[0].b);
    ck_assert_str_eq(a[1].name, "b/up/dot_general0_lhs");
    ck_assert_int_eq(a[1].kind, QUANT_STAT_MINMAX);
    ck_assert_int_eq(a[1].rank, 2);
    ck_assert_int_eq(a[1].shape[1], 2);
    ck_assert(a[1].a[1] == -2.5 && a[1].b[0] == 0.75);
    ck_assert_int_eq(a[1].kind, QUANT_STAT_MINMAX);
    ck_assert_str_eq(a[2].name, "c/imp");
    ck_assert_int_eq(a[2].kind, QUANT_STAT_NONE);
    ck_assert_ptr_null(a[2].a);
    quant_stats_free(s);
    /* a merge post's body: {"stats": {ACT: {"count", "sum_of_..."}}} */
    s = parse("{\"stats\":{\"x/y\":{\"count\":4,\"sum_of_absmax\":[2,6]}}}");
    a = quant_stats_acts(s, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert(a[0].a[0] == 0.5 && a[0].a[1] == 1.5);
    quant_stats_free(s);
}
END_TEST

START_TEST(test_parse_qwix)
{
    /* flat and nested (Qwix's module tree): names joined with '/'; sum / count in float64 */
    quant_stats *s =
        parse("{\"layers/1/mlp/dot_general0_lhs\":{\"count\":3,\"sum_of_absmax\":[[0.3,0.6,0.9]]},"
              " \"layers\":{\"0\":{\"attn\":{\"einsum0_lhs\":{\"count\":2.0,\"sum_of_min\":[-1],"
              "\"sum_of_max\":[5]}}}}}");
    size_t n;
    const quant_act_stat *a = quant_stats_acts(s, &n);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(a[0].name, "layers/0/attn/einsum0_lhs");
    ck_assert_int_eq(a[0].kind, QUANT_STAT_MINMAX);
    ck_assert_int_eq(a[0].count, 2);
    ck_assert(a[0].a[0] == -0.5 && a[0].b[0] == 2.5);
    ck_assert_str_eq(a[1].name, "layers/1/mlp/dot_general0_lhs");
    ck_assert_int_eq(a[1].rank, 2);
    ck_assert_int_eq(a[1].shape[0], 1);
    ck_assert_int_eq(a[1].shape[1], 3);
    ck_assert(a[1].a[2] == 0.9 / 3.0);
    quant_stats_free(s);
    /* a module may carry a statistic's name: it holds objects, an activation does not */
    s = parse("{\"m\": {\"min\": {\"x\": {\"count\": 1, \"absmax\": 1}}}}");
    a = quant_stats_acts(s, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(a[0].name, "m/min/x");
    quant_stats_free(s);
    /* an activation without its count is named as one */
    quant_ck_error err;
    const char *text = "{\"m\": {\"x\": {\"absmax\": [1]}}}";
    ck_assert_int_eq(quant_stats_parse(text, strlen(text), "d.json", &s, &err),
                     QUANT_CK_ERR_FORMAT);
    ck_assert_str_eq(err.message, "d.json: activation 'm/x': has no \"count\"");
}
END_TEST

/* Each malformed statistics file and what its error must say. */
static const struct {
    const char *json;
    const char *want[3];
} bad_stats[] = {
    {"{\"a\": {\"count\": 1, \"absmax\": [1, \"x\"]}}",
     {"s.json: activation 'a': key \"absmax\": element [1] is a string, not a number"}},
    {"{\"a\": {\"count\": 1, \"absmax\": [[1], [2, 3]]}}",
     {"activation 'a': key \"absmax\"", "ragged", "[1]"}},
    {"{\"a\": {\"count\": 1, \"absmax\": []}}", {"key \"absmax\": holds an empty list"}},
    {"{\"a\": {\"count\": 0, \"sum_of_absmax\": [1]}}",
     {"activation 'a': key \"count\": is 0", "not initialized"}},
    {"{\"a\": {\"count\": 1.5, \"sum_of_absmax\": [1]}}", {"key \"count\": must be an integer"}},
    {"{\"a\": {\"count\": \"2\", \"sum_of_absmax\": [1]}}", {"key \"count\": is a string"}},
    {"{\"a\": {\"sum_of_absmax\": [1]}}", {"activation 'a': has no \"count\""}},
    {"{\"a\": {\"count\": 1, \"sum_of_absmx\": [1]}}",
     {"activation 'a': key \"sum_of_absmx\": unknown key"}},
    {"{\"a\": {\"count\": 1, \"min\": [1]}}", {"activation 'a': has \"min\" without \"max\""}},
    {"{\"a\": {\"count\": 1, \"min\": [1], \"max\": [1, 2]}}", {"different shapes"}},
    {"{\"a\": {\"count\": 1, \"absmax\": [1], \"min\": [1], \"max\": [2]}}", {"both"}},
    {"{\"a\": {\"count\": 1, \"mean\": [1]}}", {"key \"mean\": unknown key"}},
    {"{\"a\": {\"count\": 1}}", {"activation 'a': has no statistics"}},
    {"{\"a\": [1, 2]}", {"s.json: 'a' is a list, not an activation's object"}},
    {"{\"a\": {}}", {"'a' is an empty object"}},
    {"{}", {"s.json: holds no activation statistics"}},
    {"[1]", {"s.json: must be a JSON object"}},
    {"{\"a\": {\"count\": 1, \"absmax\": 1},}", {"s.json: line 1 column", "expected"}},
    {"{\"a\": {\"count\": 1, \"absmax\": 1, \"absmax\": 2}}", {"s.json: line 1", "duplicate"}},
    {"{\"a/b\": {\"count\": 1, \"absmax\": 1}, \"a\": {\"b\": {\"count\": 1, \"absmax\": 2}}}",
     {"activation 'a/b' comes twice"}},
    {"{\"model\": \"m\", \"stats\": {\"x\": {\"count\": 1, \"absmax\": 1}}, \"extra\": 1}",
     {"unknown top-level key \"extra\""}},
    {"{\"stats\": {\"x\": 3}}", {"activation 'x' is a number, not an object"}},
    {"{\"stats\": {\"x\": {\"count\": 1, \"absmax\": [1, 2], \"shape\": [3]}}}",
     {"activation 'x': key \"shape\": is not the shape of the values"}},
    {"{\"\": {\"count\": 1, \"absmax\": 1}}", {"must not be empty"}},
    {"{\"a\": {\"count\": 1, \"absmax\": [[[[[[[[[1]]]]]]]]]}}", {"more than 8 dimensions"}},
};

START_TEST(test_parse_errors)
{
    const char *json = bad_stats[_i].json;
    quant_stats *s = (quant_stats *)1;
    quant_ck_error err;
    ck_assert_int_eq(quant_stats_parse(json, strlen(json), "s.json", &s, &err),
                     QUANT_CK_ERR_FORMAT);
    ck_assert_ptr_null(s);
    for (int k = 0; k < 3 && bad_stats[_i].want[k]; k++)
        ck_assert_msg(strstr(err.message, bad_stats[_i].want[k]) != NULL,
                      "%s: message '%s' lacks '%s'", json, err.message, bad_stats[_i].want[k]);
}
END_TEST

START_TEST(test_load)
{
    char *root = ck_tmpdir(), *path = kit_join(root, "stats.json");
    const char *text = "{\"a/b\": {\"count\": 2, \"sum_of_absmax\": [4]}}";
    ck_write_file(path, text, strlen(text));
    quant_stats *s = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_stats_load(path, &s, &err) == QUANT_CK_OK, "%s", err.message);
    size_t n;
    ck_assert(quant_stats_acts(s, &n)[0].a[0] == 2.0);
    quant_stats_free(s);
    ck_assert_int_eq(quant_stats_load(root, &s, &err), QUANT_CK_ERR_IO); /* a directory */
    ck_assert_ptr_nonnull(strstr(err.message, root));
    char *missing = kit_join(root, "nope.json");
    ck_assert_int_eq(quant_stats_load(missing, &s, &err), QUANT_CK_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "nope.json: No such file"));
    free(missing);
    free(path);
    kit_rmtree(root);
    free(root);
}
END_TEST

/* ---- through a run, and through the command -------------------------------------------------- */

#define RUN_RULES                                                                                  \
    "[{\"module_path\":\"m\\\\.q\",\"weight_qtype\":\"int8\",\"act_qtype\":\"int8\","              \
    "\"act_static_scale\":true},{\"module_path\":\"m\\\\.k\",\"weight_qtype\":\"int8\"}]"
#define RUN_STATS                                                                                  \
    "{\"m\": {\"q\": {\"dot_general0_lhs\": {\"count\": 4, \"sum_of_absmax\": 51}},"               \
    " \"k\": {\"dot_general0_lhs\": {\"count\": 2, \"sum_of_absmax\": [1, 2]}}}}"

static void make_model(const char *path)
{
    float q[4 * 8], k[4 * 8];
    ck_fill(q, 32, 1, 1.0f);
    ck_fill(k, 32, 2, 1.0f);
    kit_st_tensor t[] = {{"m.q.weight", "F32", 2, {4, 8}, q, sizeof q},
                         {"m.k.weight", "F32", 2, {4, 8}, k, sizeof k}};
    ck_gen_file(path, t, 2, NULL);
}

START_TEST(test_run_report)
{
    char *root = ck_tmpdir(), *in = kit_join(root, "in.safetensors");
    char *out = kit_join(root, "out.safetensors");
    make_model(in);
    quant_stats *stats = parse(RUN_STATS);
    quant_ruleset *rs = ck_rules(RUN_RULES);
    size_t n;
    const quant_act_stat *acts = quant_stats_acts(stats, &n);
    quant_srq *srq = compute(acts, n, rs, NULL);
    quant_stats_free(stats); /* the scales own what they need */
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    quant_srq_apply(srq, &o);
    quant_report *rep = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_quantize_path(rs, in, out, &o, &rep, &err) == QUANT_CK_OK, "%s",
                  err.message);
    ck_assert_uint_eq(quant_report_static_count(rep), 1);
    ck_assert_int_eq(quant_report_static_at(rep, 0)->count, 4);
    ck_assert_uint_eq(quant_report_skipped_count(rep), 1);
    ck_assert_str_eq(quant_report_skipped_at(rep, 0)->name, "m/k/dot_general0_lhs");
    char *text = quant_report_json(rep);
    json_t *doc = json_loads(text, 0, NULL);
    json_t *sa = json_object_get(doc, "static_activations");
    json_t *w = json_array_get(json_object_get(sa, "written"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(w, "name")), "m/q/dot_general0_lhs");
    ck_assert_int_eq(json_integer_value(json_object_get(w, "count")), 4);
    json_t *k = json_array_get(json_object_get(sa, "skipped"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(k, "rule")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(k, "reason")),
                     "rule 1, the first to match module path 'm.k', has no act_qtype");
    json_decref(doc);
    free(text);
    /* 51 / 4 = 12.75, / 127.5 */
    quant_st_file *f = NULL;
    ck_assert_int_eq(quant_st_open(out, &f, NULL), QUANT_CK_OK);
    const quant_st_tensor *t = quant_st_find(f, "m.q.dot_general0_lhs_scale");
    ck_assert_ptr_nonnull(t);
    float scale;
    ck_assert_int_eq(quant_st_read(f, t, 0, &scale, sizeof scale, NULL), QUANT_CK_OK);
    ck_assert(scale == 12.75f / 127.5f);
    quant_st_close(f);
    quant_report_free(rep);
    quant_srq_free(srq);
    quant_ruleset_free(rs);
    free(in);
    free(out);
    kit_rmtree(root);
    free(root);
}
END_TEST

/* compressed-tensors: a plan whose scales statistics will give later (a quantd job with a
 * stats_model when it is submitted) leaves the "every act_static_scale weight has its
 * input_scale" check to the run; the run makes it, and passes with the engine's scales. */
START_TEST(test_ct_scales_later)
{
    char *root = ck_tmpdir(), *in = kit_join(root, "in.safetensors");
    char *out = kit_join(root, "out.safetensors");
    make_model(in);
    quant_ruleset *rs = ck_rules(RUN_RULES);
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.layout = QUANT_LAYOUT_CTENSORS;
    o.allow_static_acts = true;
    quant_ck_error err;
    ck_assert_msg(quant_check_path(rs, in, &o, &err) == QUANT_CK_OK, "%s", err.message);
    quant_plan *plan = NULL;
    ck_assert_msg(quant_plan_path(rs, in, &o, &plan, &err) == QUANT_CK_OK, "%s", err.message);
    quant_plan_free(plan);
    ck_assert_int_eq(quant_quantize_path(rs, in, out, &o, NULL, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "m.q.weight"));
    ck_assert_int_eq(access(out, F_OK), -1);
    quant_stats *stats = parse(RUN_STATS);
    size_t n;
    const quant_act_stat *acts = quant_stats_acts(stats, &n);
    quant_srq *srq = compute(acts, n, rs, NULL);
    quant_srq_apply(srq, &o);
    ck_assert_msg(quant_quantize_path(rs, in, out, &o, NULL, &err) == QUANT_CK_OK, "%s",
                  err.message);
    ck_assert(ck_has_tensor(out, "m.q.input_scale"));
    quant_srq_free(srq);
    quant_stats_free(stats);
    quant_ruleset_free(rs);
    free(in);
    free(out);
    kit_rmtree(root);
    free(root);
}
END_TEST

/* Runs `quant ARGS` in root with stderr into root/err; returns the exit status. */
static int run_quant(const char *root, const char *args)
{
    const char *bin = getenv("QUANT_BIN");
    ck_assert_msg(bin && *bin, "QUANT_BIN is not set: it must name the quant binary to test");
    char cwd[4096], cmd[16384];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    bool rel = *bin != '/';
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s%s%s' %s 2>err", root, rel ? cwd : "", rel ? "/" : "",
             bin, args);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char *err_text(const char *root)
{
    char *path = kit_join(root, "err");
    size_t n;
    char *text = kit_read_file(path, &n);
    free(path);
    return text;
}

START_TEST(test_cli_stats)
{
    char *root = ck_tmpdir(), *p;
    p = kit_join(root, "in.safetensors");
    make_model(p);
    free(p);
    p = kit_join(root, "rules.json");
    ck_write_file(p, RUN_RULES, strlen(RUN_RULES));
    free(p);
    p = kit_join(root, "stats.json");
    ck_write_file(p, RUN_STATS, strlen(RUN_STATS));
    free(p);
    ck_assert_int_eq(run_quant(root, "quantize -r rules.json --stats stats.json in.safetensors "
                                     "out.safetensors"),
                     0);
    char *text = err_text(root);
    ck_assert_msg(strstr(text, "static activation scales: 1 written, 1 activation skipped") != NULL,
                  "%s", text);
    free(text);
    p = kit_join(root, "out.safetensors");
    ck_assert(ck_has_tensor(p, "m.q.dot_general0_lhs_scale"));
    ck_assert(!ck_has_tensor(p, "m.k.dot_general0_lhs_scale"));
    free(p);
    /* without --stats the act_static_scale rule is refused */
    ck_assert_int_eq(run_quant(root, "quantize -q -r rules.json in.safetensors o2.safetensors"), 1);
    /* a bad statistics file: exit 1, the message names the file, activation and key */
    p = kit_join(root, "bad.json");
    const char *bad = "{\"m/q/x\": {\"count\": 1, \"absmax\": [true]}}";
    ck_write_file(p, bad, strlen(bad));
    free(p);
    ck_assert_int_eq(run_quant(root, "quantize -q -r rules.json -s bad.json in.safetensors "
                                     "o3.safetensors"),
                     1);
    text = err_text(root);
    ck_assert_msg(strstr(text, "quant: bad.json: activation 'm/q/x': key \"absmax\": element [0] "
                               "is a boolean, not a number") != NULL,
                  "%s", text);
    free(text);
    /* an engine refusal names the file too */
    p = kit_join(root, "zp.json");
    const char *fp8 = "{\"m/q/x\": {\"count\": 1, \"min\": -1, \"max\": 1}}";
    ck_write_file(p, fp8, strlen(fp8));
    free(p);
    p = kit_join(root, "fp8.json");
    const char *r8 = "[{\"module_path\":\"m\\\\.q\",\"weight_qtype\":\"int8\","
                     "\"act_qtype\":\"float8_e4m3fn\",\"act_static_scale\":true}]";
    ck_write_file(p, r8, strlen(r8));
    free(p);
    ck_assert_int_eq(run_quant(root, "quantize -q -r fp8.json --stats zp.json in.safetensors "
                                     "o4.safetensors"),
                     1);
    text = err_text(root);
    ck_assert_msg(strstr(text, "quant: zp.json: activation 'm/q/x': act_qtype float8_e4m3fn") !=
                      NULL,
                  "%s", text);
    free(text);
    p = kit_join(root, "o4.safetensors");
    ck_assert_int_eq(access(p, F_OK), -1);
    free(p);
    kit_rmtree(root);
    free(root);
}
END_TEST

Suite *suite_srq_engine(void)
{
    Suite *s = suite_create("srq_engine");
    TCase *tc = tcase_create("engine");
    tcase_add_test(tc, test_scales_values);
    tcase_add_test(tc, test_first_rule_and_skipped);
    tcase_add_test(tc, test_engine_refusals);
    suite_add_tcase(s, tc);
    TCase *files = tcase_create("stats_file");
    tcase_add_test(files, test_parse_quantd);
    tcase_add_test(files, test_parse_qwix);
    tcase_add_loop_test(files, test_parse_errors, 0, (int)(sizeof bad_stats / sizeof *bad_stats));
    tcase_add_test(files, test_load);
    suite_add_tcase(s, files);
    TCase *run = tcase_create("run");
    tcase_add_test(run, test_run_report);
    tcase_add_test(run, test_ct_scales_later);
    tcase_add_test(run, test_cli_stats);
    suite_add_tcase(s, run);
    return s;
}
