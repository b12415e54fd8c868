/* test_mse.c -- the MSE calibrations and weight_importance through the checkpoint engine
 * (SPEC 9): rule checks, mean_sq read from statistics files, importance resolved by module path
 * and contraction length (and the errors naming the weight when none or several match, or the
 * run has no statistics), the written scales equal to libquant's search with the same weights,
 * and the report's per-tensor errors. Also a tensor whose reduced axis 0 exceeds a chunk.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ckutil.h"
#include "quant_pipeline.h"
#include "quant_rules.h"
#include "quant_srq.h"

#define IMP_RULES                                                                                  \
    "[{\"module_path\":\"m\\\\.q\",\"weight_qtype\":\"int4\",\"tile_size\":16,"                    \
    "\"weight_calibration_method\":\"mse,10\",\"weight_importance\":true},"                        \
    " {\"module_path\":\"m\\\\.k\",\"weight_qtype\":\"int4\","                                     \
    "\"weight_calibration_method\":\"minmax_mse\"}]"

static void *tensor_bytes(const char *path, const char *name, size_t *n)
{
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_open(path, &f, &err) == QUANT_CK_OK, "%s", err.message);
    const quant_st_tensor *t = quant_st_find(f, name);
    ck_assert_msg(t != NULL, "%s: no tensor %s", path, name);
    size_t len = (size_t)quant_st_nbytes(t);
    void *buf = malloc(len ? len : 1);
    ck_assert_int_eq(quant_st_read(f, t, 0, buf, len, &err), QUANT_CK_OK);
    *n = len;
    quant_st_close(f);
    return buf;
}

/* m.q.weight and m.k.weight [8, 32] */
static void make_model(const char *path, float *q)
{
    static float k[8 * 32];
    ck_fill(q, 256, 11, 1.0f);
    ck_fill(k, 256, 12, 1.0f);
    kit_st_tensor t[] = {{"m.q.weight", "F32", 2, {8, 32}, q, 256 * sizeof(float)},
                         {"m.k.weight", "F32", 2, {8, 32}, k, sizeof k}};
    ck_gen_file(path, t, 2, NULL);
}

/* A Qwix dump with sum_of_mean_sq (count 2) for activation `act` of length `len`, plus `extra`
 * (JSON members, may be ""). */
static quant_stats *stats_for(const char *act, int len, const char *extra, float *avg)
{
    char json[4096];
    size_t at = (size_t)snprintf(json, sizeof json, "{%s\"%s\":{\"count\":2,\"sum_of_mean_sq\":[",
                                 extra, act);
    for (int i = 0; i < len; i++) {
        double v = (double)((i * 7) % 5) * 0.75; /* zeros included */
        if (avg) avg[i] = (float)(v / 2);
        at += (size_t)snprintf(json + at, sizeof json - at, "%s%g", i ? "," : "", v);
    }
    snprintf(json + at, sizeof json - at, "]}}");
    quant_stats *s = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_stats_parse(json, strlen(json), "stats.json", &s, &err) == QUANT_CK_OK,
                  "%s", err.message);
    return s;
}

static quant_ck_status run_with(quant_stats *s, const char *rules, const char *in, const char *out,
                                quant_report **rep, quant_ck_error *err)
{
    quant_ruleset *rs = ck_rules(rules);
    quant_srq *srq = NULL;
    size_t n = 0;
    const quant_act_stat *acts = s ? quant_stats_acts(s, &n) : NULL;
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    if (s) {
        ck_assert_msg(quant_srq_compute(acts, n, rs, NULL, &srq, err) == QUANT_CK_OK, "%s",
                      err->message);
        quant_srq_apply(srq, &o);
    }
    quant_ck_status st = quant_quantize_path(rs, in, out, &o, rep, err);
    quant_srq_free(srq);
    quant_ruleset_free(rs);
    return st;
}

START_TEST(importance_weighs_the_search)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.st");
    static float q[256];
    make_model(in, q);
    float avg[32];
    quant_stats *s = stats_for("m/q/dot_general0_lhs", 32, "", avg);
    quant_report *rep = NULL;
    quant_ck_error err;
    ck_assert_msg(run_with(s, IMP_RULES, in, out, &rep, &err) == QUANT_CK_OK, "%s", err.message);
    /* libquant's search with the averaged mean_sq, rounded to float32 */
    quant_how how;
    quant_how_init(&how, QUANT_QTYPE_INT4);
    how.n_channel_axes = 1;
    how.channel_axes[0] = 0;
    how.n_tiles = 1;
    how.tiles[0] = (quant_tile){.axis = 1, .size = 16};
    how.calibration = "mse,10";
    how.importance = avg;
    how.importance_len = 32;
    how.importance_axis = 1;
    quant_mse_result res;
    how.mse_out = &res;
    quant_tensor x;
    int64_t shape[2] = {8, 32};
    quant_tensor_init(&x, QUANT_DTYPE_F32, 2, shape, q, NULL);
    uint8_t codes[128];
    float scale[16], plain[16];
    quant_ctx *ctx = quant_ctx_new(NULL, NULL);
    ck_assert_int_eq(quant_quantize(ctx, &how, &x, codes, scale, NULL, NULL), QUANT_OK);
    how.importance = NULL;
    quant_mse_result unweighted;
    how.mse_out = &unweighted;
    ck_assert_int_eq(quant_quantize(ctx, &how, &x, codes, plain, NULL, NULL), QUANT_OK);
    quant_ctx_free(ctx);
    ck_assert_msg(memcmp(scale, plain, sizeof scale) != 0, "importance changed no scale");
    size_t n;
    float *got = tensor_bytes(out, "m.q.weight.scale", &n);
    ck_assert_uint_eq(n, sizeof scale);
    ck_assert_mem_eq(got, scale, sizeof scale);
    free(got);
    /* the report: the weighted errors and the activation that weighed them */
    const quant_report_entry *e = NULL;
    for (size_t i = 0; i < quant_report_count(rep); i++)
        if (strcmp(quant_report_entry_at(rep, i)->name, "m.q.weight") == 0)
            e = quant_report_entry_at(rep, i);
    ck_assert_ptr_nonnull(e);
    ck_assert(e->has_mse && e->mse_err_before == res.err_before &&
              e->mse_err_after == res.err_after && e->mse_groups == 16 &&
              e->mse_shrunk == res.shrunk);
    ck_assert_str_eq(e->importance_act, "m/q/dot_general0_lhs");
    char *json = quant_report_json(rep);
    json_t *doc = json_loads(json, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    json_t *tensors = json_object_get(doc, "tensors");
    size_t i;
    json_t *t;
    int seen = 0;
    json_array_foreach(tensors, i, t)
    {
        json_t *m = json_object_get(t, "mse");
        if (!m) continue;
        seen++;
        ck_assert(json_real_value(json_object_get(m, "error_after")) <=
                  json_real_value(json_object_get(m, "error_before")));
        const char *name = json_string_value(json_object_get(t, "name"));
        ck_assert_int_eq(json_object_get(m, "importance") != NULL, strcmp(name, "m.q.weight") == 0);
    }
    ck_assert_int_eq(seen, 2);
    json_decref(doc);
    free(json);
    quant_report_free(rep);
    quant_stats_free(s);
    kit_rmtree(dir);
    free(in);
    free(out);
    free(dir);
}
END_TEST

START_TEST(importance_resolution_errors)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.st");
    static float q[256];
    make_model(in, q);
    quant_ck_error err;
    /* no statistics at all */
    ck_assert_int_eq(run_with(NULL, IMP_RULES, in, out, NULL, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "weight 'm.q.weight'"), "%s", err.message);
    ck_assert_ptr_nonnull(strstr(err.message, "weight_importance"));
    /* an activation of the module, but of another length */
    quant_stats *s = stats_for("m/q/dot_general0_lhs", 16, "", NULL);
    ck_assert_int_eq(run_with(s, IMP_RULES, in, out, NULL, &err), QUANT_CK_ERR_ARG);
    ck_assert_msg(strstr(err.message, "weight 'm.q.weight'") &&
                      strstr(err.message, "no activation"),
                  "%s", err.message);
    quant_stats_free(s);
    /* another module's activation only */
    s = stats_for("m/k/dot_general0_lhs", 32, "", NULL);
    ck_assert_int_eq(run_with(s, IMP_RULES, in, out, NULL, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "no activation"));
    quant_stats_free(s);
    /* two activations of the module with the right length */
    s = stats_for("m/q/dot_general0_lhs", 32,
                  "\"m/q/dot_general1_lhs\":{\"count\":1,\"mean_sq\":[" /* 32 ones */
                  "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]},",
                  NULL);
    ck_assert_int_eq(run_with(s, IMP_RULES, in, out, NULL, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "weight 'm.q.weight'"));
    ck_assert_ptr_nonnull(strstr(err.message, "more than one"));
    quant_stats_free(s);
    kit_rmtree(dir);
    free(in);
    free(out);
    free(dir);
}
END_TEST

START_TEST(rule_checks)
{
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"[{\"weight_qtype\":\"int4\",\"weight_importance\":true}]", "weight_importance"},
        {"[{\"weight_qtype\":\"int4\",\"weight_calibration_method\":\"mse\","
         "\"weight_importance\":true,\"contraction_axes\":[0,1]}]",
         "single contraction axis"},
        {"[{\"weight_qtype\":\"int4\",\"weight_importance\":1}]", "weight_importance"},
        {"[{\"weight_qtype\":\"int4\",\"act_qtype\":\"int8\",\"act_calibration_method\":\"mse\"}]",
         "act_calibration_method"},
        {"[{\"weight_qtype\":\"int4\",\"weight_calibration_method\":\"mse\","
         "\"stochastic_rounding\":true}]",
         "stochastic"},
        {"[{\"weight_qtype\":\"int4\",\"weight_calibration_method\":\"mse,0\"}]", "1..256"},
        {"[{\"weight_qtype\":\"int4\",\"weight_calibration_method\":\"mse,4,2\"}]", "[0, 1]"},
        {"[{\"weight_qtype\":\"nf4\",\"weight_calibration_method\":\"minmax_mse\"}]", "asymmetric"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        quant_ruleset *rs = NULL;
        quant_ck_error err;
        ck_assert_int_eq(
            quant_ruleset_parse(bad[i].json, strlen(bad[i].json), "rules.json", &rs, &err),
            QUANT_CK_ERR_RULES);
        ck_assert_msg(strstr(err.message, bad[i].want) && strstr(err.message, "rule 0"),
                      "case %zu: %s", i, err.message);
    }
    quant_ruleset *rs = ck_rules("[{\"weight_qtype\":\"nvfp4\",\"weight_calibration_method\":"
                                 "\"mse,5,0.25\",\"weight_importance\":true}]");
    ck_assert(quant_ruleset_rule(rs, 0)->weight_importance);
    quant_ruleset_free(rs);
}
END_TEST

START_TEST(stats_mean_sq)
{
    float avg[4];
    quant_stats *s = stats_for("a/x", 4, "", avg);
    size_t n = 0;
    const quant_act_stat *a = quant_stats_acts(s, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert(a[0].kind == QUANT_STAT_NONE && a[0].mean_sq_len == 4);
    for (int i = 0; i < 4; i++) ck_assert(a[0].mean_sq[i] == (double)avg[i]);
    quant_stats_free(s);
    static const char *bad[] = {
        "{\"a/x\":{\"count\":1,\"mean_sq\":[[1,2],[3,4]]}}",
        "{\"a/x\":{\"count\":1,\"mean_sq\":[1,-2]}}",
        "{\"a/x\":{\"count\":1,\"absmax\":1,\"mean_sq\":3}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        quant_ck_error err;
        ck_assert_int_eq(quant_stats_parse(bad[i], strlen(bad[i]), "s.json", &s, &err),
                         QUANT_CK_ERR_FORMAT);
        ck_assert_ptr_nonnull(strstr(err.message, "mean_sq"));
        ck_assert_ptr_nonnull(strstr(err.message, "'a/x'"));
    }
    /* absmax with mean_sq: both kept (SRQ and importance) */
    const char *both = "{\"a/x\":{\"count\":2,\"sum_of_absmax\":4,\"sum_of_mean_sq\":[2,6]}}";
    ck_assert_int_eq(quant_stats_parse(both, strlen(both), "s.json", &s, NULL), QUANT_CK_OK);
    a = quant_stats_acts(s, &n);
    ck_assert(a[0].kind == QUANT_STAT_ABSMAX && a[0].a[0] == 2.0 && a[0].mean_sq[1] == 3.0);
    quant_stats_free(s);
}
END_TEST

/* A per-tensor MSE search over a tensor larger than a chunk (axis 0 reduced): one unit, the same
 * scale as libquant on the whole tensor. */
START_TEST(reduced_axis0_one_unit)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.st");
    static float w[256 * 128];
    ck_fill(w, 256 * 128, 5, 1.0f);
    kit_st_tensor t[] = {{"m.w.weight", "F32", 2, {256, 128}, w, sizeof w}};
    ck_gen_file(in, t, 1, NULL);
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.chunk_bytes = 65536; /* half the tensor */
    quant_report *rep = NULL;
    quant_ck_error err;
    ck_assert_msg(ck_quantize("[{\"weight_qtype\":\"int3\",\"weight_calibration_method\":\"mse\","
                              "\"tile_size\":1.0,\"contraction_axes\":[0,1]}]",
                              in, out, &o, &rep, &err) == QUANT_CK_OK,
                  "%s", err.message);
    quant_how how;
    quant_how_init(&how, QUANT_QTYPE_INT3);
    how.calibration = "mse";
    quant_tensor x;
    int64_t shape[2] = {256, 128};
    quant_tensor_init(&x, QUANT_DTYPE_F32, 2, shape, w, NULL);
    static int8_t codes[256 * 128];
    float scale;
    how.pack = false;
    quant_ctx *ctx = quant_ctx_new(NULL, NULL);
    ck_assert_int_eq(quant_quantize(ctx, &how, &x, codes, &scale, NULL, NULL), QUANT_OK);
    quant_ctx_free(ctx);
    size_t n;
    float *got = tensor_bytes(out, "m.w.weight.scale", &n);
    ck_assert_uint_eq(n, sizeof scale);
    ck_assert_mem_eq(got, &scale, sizeof scale);
    free(got);
    ck_assert(quant_report_entry_at(rep, 0)->has_mse &&
              quant_report_entry_at(rep, 0)->mse_groups == 1);
    quant_report_free(rep);
    kit_rmtree(dir);
    free(in);
    free(out);
    free(dir);
}
END_TEST

Suite *suite_mse_ckpt(void)
{
    Suite *s = suite_create("mse_ckpt");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, importance_weighs_the_search);
    tcase_add_test(tc, importance_resolution_errors);
    tcase_add_test(tc, rule_checks);
    tcase_add_test(tc, stats_mean_sq);
    tcase_add_test(tc, reduced_axis0_one_unit);
    suite_add_tcase(s, tc);
    return s;
}
