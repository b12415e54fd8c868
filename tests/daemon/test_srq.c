/* test_srq.c -- static-range quantization (SRQ) in quantd: qd_act_scales against hand-computed
 * SPEC section 4 values (symmetric and asymmetric, first rule decides, static_only, fixed qtype,
 * the tiny-scale rule, count 0 and refused qtypes), then the real quantd: statistics posted over
 * HTTP, a job with stats_model whose output holds ACT_scale and ACT_zero_point equal to the
 * hand-computed values, the activations no SRQ rule matched listed as skipped in the report, a
 * directory job putting each activation in its module's shard, and the refusals (unknown model,
 * SRQ rules without statistics, a model without statistics).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdproc.h"
#include "qdtest.h"
#include "quant_st.h"
#include "stats.h"

/* ---- qd_act_scales ------------------------------------------------------------------------------
 */

/* An averaged activation of `n` values (a, and b for min/max) with shape [n] and count 2. */
static qd_stat_avg make_avg(const char *name, qd_stat_kind kind, int64_t n, const double *a,
                            const double *b)
{
    qd_stat_avg s = {.name = (char *)name, .kind = kind, .rank = 1, .n = n, .count = 2};
    s.shape[0] = n;
    s.a = (double *)a;
    s.b = (double *)b;
    return s;
}

static quant_ruleset *rules_from(const char *json)
{
    quant_ruleset *rs = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_ruleset_parse(json, strlen(json), "test", &rs, &err) == QUANT_CK_OK, "%s",
                  err.message);
    return rs;
}

START_TEST(test_names)
{
    char *m = qd_act_module_path("layers/0/mlp/dot_general0_lhs");
    char *b = qd_act_tensor_base("layers/0/mlp/dot_general0_lhs");
    ck_assert_str_eq(m, "layers.0.mlp");
    ck_assert_str_eq(b, "layers.0.mlp.dot_general0_lhs");
    free(m);
    free(b);
    m = qd_act_module_path("model.layers.0/q_proj/dot_general0_lhs"); /* '.' and '/' mixed */
    ck_assert_str_eq(m, "model.layers.0.q_proj");
    free(m);
    m = qd_act_module_path("dot_general0_lhs");
    ck_assert_str_eq(m, "");
    free(m);
}
END_TEST

START_TEST(test_symmetric_and_asymmetric)
{
    const double abs_v[3] = {2.55, 0.0, 1e-30}, lo[2] = {-2.0, 0.5}, hi[2] = {4.0, 2.0};
    const double u_lo[2] = {-2.0, -1.0}, u_hi[2] = {4.0, 3.0};
    qd_stat_avg avg[3] = {make_avg("m/q/dot_general0_lhs", QD_STAT_ABSMAX, 3, abs_v, NULL),
                          make_avg("m/k/dot_general0_lhs", QD_STAT_MINMAX, 2, lo, hi),
                          make_avg("u/x/dot_general0_lhs", QD_STAT_MINMAX, 2, u_lo, u_hi)};
    quant_ruleset *rs = rules_from(
        "[{\"module_path\":\"m\\\\..*\",\"act_qtype\":\"int8\",\"act_static_scale\":true},"
        " {\"module_path\":\"u\\\\..*\",\"act_qtype\":\"uint8\",\"act_static_scale\":true}]");
    qd_act_scale *sc = NULL;
    char **skipped = NULL;
    size_t n = 0, n_skipped = 0;
    qd_err err;
    ck_assert_msg(qd_act_scales(avg, 3, rs, NULL, true, &sc, &n, &skipped, &n_skipped, &err) ==
                      QD_OK,
                  "%s", err.message);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(n_skipped, 0);
    /* absmax / 127.5, the average rounded to float once; below sqrt(FLT_MIN) -> 1 */
    ck_assert_str_eq(sc[0].tensor_base, "m.q.dot_general0_lhs");
    ck_assert_int_eq(sc[0].qtype, QUANT_QTYPE_INT8);
    ck_assert_int_eq(sc[0].rule, 0);
    ck_assert_int_eq(sc[0].count, 2);
    ck_assert_int_eq(sc[0].rank, 1);
    ck_assert_int_eq(sc[0].shape[0], 3);
    ck_assert(sc[0].scale[0] == (float)2.55 / 127.5f);
    ck_assert(sc[0].scale[1] == 1.0f);
    ck_assert(sc[0].scale[2] == 1.0f);
    ck_assert_ptr_null(sc[0].zero_point);
    /* (max - min) / 255, zero point round(-128 - min / scale); a positive min counts as 0 */
    ck_assert(sc[1].scale[0] == 6.0f / 255.0f);
    ck_assert_int_eq(sc[1].zero_point[0], -43); /* -128 + 85 */
    ck_assert(sc[1].scale[1] == 2.0f / 255.0f);
    ck_assert_int_eq(sc[1].zero_point[1], -128);
    /* uint8: [0, 255] */
    ck_assert_int_eq(sc[2].qtype, QUANT_QTYPE_UINT8);
    ck_assert_int_eq(sc[2].rule, 1);
    ck_assert(sc[2].scale[0] == 6.0f / 255.0f);
    ck_assert_int_eq(sc[2].zero_point[0], 85);
    ck_assert(sc[2].scale[1] == 4.0f / 255.0f);
    ck_assert_int_eq(sc[2].zero_point[1], 64); /* 63.75 rounds to 64 */
    qd_act_scales_free(sc, n);
    qd_strings_free(skipped, n_skipped);
    quant_ruleset_free(rs);
}
END_TEST

START_TEST(test_first_rule_decides)
{
    const double v[1] = {1.0};
    qd_stat_avg avg[5] = {make_avg("layers/0/mlp/dot_general0_lhs", QD_STAT_ABSMAX, 1, v, NULL),
                          make_avg("layers/1/attn/einsum0_lhs", QD_STAT_ABSMAX, 1, v, NULL),
                          make_avg("layers/2/foo/dot_general0_lhs", QD_STAT_ABSMAX, 1, v, NULL),
                          make_avg("other/dot_general0_lhs", QD_STAT_ABSMAX, 1, v, NULL),
                          make_avg("dot_general0_lhs", QD_STAT_ABSMAX, 1, v, NULL)};
    quant_ruleset *rs =
        rules_from("[{\"module_path\":\"layers\\\\.0\\\\.mlp\",\"act_qtype\":\"int8\","
                   "\"act_static_scale\":true},"
                   " {\"module_path\":\"layers\\\\.1\\\\..*\",\"act_qtype\":\"int4\"},"
                   " {\"module_path\":\"layers\\\\.2.*\",\"weight_qtype\":\"int8\"},"
                   " {\"module_path\":\".*\",\"act_qtype\":\"int16\",\"act_static_scale\":true}]");
    qd_act_scale *sc = NULL;
    char **skipped = NULL;
    size_t n = 0, n_skipped = 0;
    qd_err err;
    /* static_only: layers.1 matches a dynamic rule and layers.2 a rule without act_qtype; both
     * are skipped, not handed to the catch-all rule 3 */
    ck_assert_int_eq(qd_act_scales(avg, 5, rs, NULL, true, &sc, &n, &skipped, &n_skipped, &err),
                     QD_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(sc[0].name, "layers/0/mlp/dot_general0_lhs");
    ck_assert_int_eq(sc[0].rule, 0);
    ck_assert_str_eq(sc[1].name, "other/dot_general0_lhs");
    ck_assert_int_eq(sc[1].qtype, QUANT_QTYPE_INT16);
    ck_assert(sc[1].scale[0] == 1.0f / 32768.0f);
    ck_assert_str_eq(sc[2].name, "dot_general0_lhs"); /* module path "" matches ".*" */
    ck_assert_int_eq(sc[2].rule, 3);
    ck_assert_uint_eq(n_skipped, 2);
    ck_assert_str_eq(skipped[0], "layers/1/attn/einsum0_lhs");
    ck_assert_str_eq(skipped[1], "layers/2/foo/dot_general0_lhs");
    qd_act_scales_free(sc, n);
    qd_strings_free(skipped, n_skipped);
    /* without static_only the dynamic rule's act_qtype counts */
    ck_assert_int_eq(qd_act_scales(avg, 5, rs, NULL, false, &sc, &n, &skipped, &n_skipped, &err),
                     QD_OK);
    ck_assert_uint_eq(n, 4);
    ck_assert_int_eq(sc[1].qtype, QUANT_QTYPE_INT4);
    ck_assert(sc[1].scale[0] == 1.0f / 7.5f);
    ck_assert_uint_eq(n_skipped, 1);
    qd_act_scales_free(sc, n);
    qd_strings_free(skipped, n_skipped);
    /* a fixed qtype: every activation, rule -1 */
    quant_qtype fixed = QUANT_QTYPE_FP8_E4M3FN;
    ck_assert_int_eq(qd_act_scales(avg, 5, rs, &fixed, true, &sc, &n, &skipped, &n_skipped, &err),
                     QD_OK);
    ck_assert_uint_eq(n, 5);
    ck_assert_uint_eq(n_skipped, 0);
    ck_assert_int_eq(sc[4].rule, -1);
    ck_assert(sc[4].scale[0] == 1.0f / 448.0f);
    qd_act_scales_free(sc, n);
    qd_strings_free(skipped, n_skipped);
    quant_ruleset_free(rs);
}
END_TEST

START_TEST(test_refusals)
{
    const double lo[1] = {-1.0}, hi[1] = {1.0};
    qd_stat_avg avg[2] = {make_avg("a/ok", QD_STAT_MINMAX, 1, lo, hi),
                          make_avg("a/never", QD_STAT_MINMAX, 1, lo, hi)};
    avg[1].count = 0;
    qd_act_scale *sc = NULL;
    char **skipped = NULL;
    size_t n = 0, n_skipped = 0;
    qd_err err;
    quant_qtype q = QUANT_QTYPE_INT8;
    ck_assert_int_eq(qd_act_scales(avg, 2, NULL, &q, true, &sc, &n, &skipped, &n_skipped, &err),
                     QD_INVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "'a/never'"));
    ck_assert_ptr_nonnull(strstr(err.message, "count is 0"));
    ck_assert_ptr_null(sc);
    ck_assert_uint_eq(n, 0);
    /* min/max statistics on a qtype without zero points */
    avg[1].count = 1;
    q = QUANT_QTYPE_FP8_E4M3FN;
    ck_assert_int_eq(qd_act_scales(avg, 2, NULL, &q, true, &sc, &n, &skipped, &n_skipped, &err),
                     QD_INVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "'a/ok'"));
    ck_assert_ptr_nonnull(strstr(err.message, "float8_e4m3fn"));
    ck_assert_ptr_null(sc);
    /* two names that differ only in '/' against '.' would write the same tensors */
    qd_stat_avg twins[2] = {make_avg("a/b", QD_STAT_MINMAX, 1, lo, hi),
                            make_avg("a.b", QD_STAT_MINMAX, 1, lo, hi)};
    q = QUANT_QTYPE_INT8;
    ck_assert_int_eq(qd_act_scales(twins, 2, NULL, &q, true, &sc, &n, &skipped, &n_skipped, &err),
                     QD_INVALID);
    ck_assert_msg(strstr(err.message, "'a/b' and 'a.b'") != NULL, "%s", err.message);
    ck_assert_ptr_null(sc);
    /* neither a qtype nor rules */
    ck_assert_int_eq(qd_act_scales(avg, 2, NULL, NULL, true, &sc, &n, &skipped, &n_skipped, &err),
                     QD_INVALID);
    /* none at all is fine */
    q = QUANT_QTYPE_INT8;
    ck_assert_int_eq(qd_act_scales(NULL, 0, NULL, &q, true, &sc, &n, &skipped, &n_skipped, &err),
                     QD_OK);
    ck_assert_uint_eq(n, 0);
    qd_act_scales_free(sc, n);
    qd_strings_free(skipped, n_skipped);
}
END_TEST

/* ---- through quantd ---------------------------------------------------------------------------
 */

#define SHARD1  "tests/data/stories260K-bf16-sharded/model-00001-of-00002.safetensors"
#define SHARDED "tests/data/stories260K-bf16-sharded"
#define Q_ACT   "model/layers/0/self_attn/q_proj/dot_general0_lhs"
#define UP_ACT  "model/layers/0/mlp/up_proj/dot_general0_lhs"
#define DN_ACT  "model/layers/0/mlp/down_proj/dot_general0_lhs"
#define L3_ACT  "model/layers/3/self_attn/q_proj/dot_general0_lhs"
/* q_proj: int8 SRQ; up_proj: uint8 SRQ; every other proj int8 weights with no act_qtype */
#define SRQ_LIST                                                                                   \
    "[{\"module_path\":\".*self_attn\\\\.q_proj\",\"weight_qtype\":\"int8\","                      \
    "\"act_qtype\":\"int8\",\"act_static_scale\":true},"                                           \
    "{\"module_path\":\".*mlp\\\\.up_proj\",\"weight_qtype\":\"int8\",\"act_qtype\":\"uint8\","    \
    "\"act_static_scale\":true},"                                                                  \
    "{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]"
#define SRQ_RULES "{\"rules\":" SRQ_LIST "}"

static void request(qdp *d, const char *method, const char *path, const char *body, long status)
{
    qdp_resp r = qdp_req(d, method, path, body ? "application/json" : NULL, body,
                         body ? strlen(body) : 0, NULL);
    ck_assert_msg(r.status == status, "%s %s: %ld, wanted %ld: %s", method, path, r.status, status,
                  r.body);
    qdp_resp_free(&r);
}

/* Two updates per activation: the averages are q absmax [[2, 4]], up min [[-2, -1]] max
 * [[4, 3]], down absmax [[1]], layer 3 absmax [[8]]. */
static void post_stats(qdp *d, const char *model)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s/stats", model);
    request(d, "POST", path,
            "{\"step\": 1, \"stats\": {\"" Q_ACT "\": {\"absmax\": [[1, 3]]}, \"" UP_ACT
            "\": {\"min\": [[-1, -2]], \"max\": [[3, 2]]}, \"" DN_ACT
            "\": {\"absmax\": [[1]]}, \"" L3_ACT "\": {\"absmax\": [[6]]}}}",
            200);
    request(d, "POST", path,
            "{\"step\": 2, \"stats\": {\"" Q_ACT "\": {\"absmax\": [[3, 5]]}, \"" UP_ACT
            "\": {\"min\": [[-3, 0]], \"max\": [[5, 4]]}, \"" DN_ACT
            "\": {\"absmax\": [[1]]}, \"" L3_ACT "\": {\"absmax\": [[10]]}}}",
            200);
}

static long long job_id(json_t *job)
{
    return (long long)json_integer_value(json_object_get(job, "id"));
}

/* POSTs body (JSON) or uploads `file` to `path`; expects `status`; returns the job id or 0. */
static long long create_job(qdp *d, const char *path, const char *body, const char *file,
                            long status, const char *code)
{
    qdp_resp r = file ? qdp_upload(d, path, file)
                      : qdp_req(d, "POST", path, "application/json", body, strlen(body), NULL);
    ck_assert_msg(r.status == status, "POST %s: %ld, wanted %ld: %s", path, r.status, status,
                  r.body);
    json_t *doc = qdp_json(&r);
    long long id = status == 202 ? job_id(doc) : 0;
    if (code)
        ck_assert_str_eq(json_string_value(json_object_get(json_object_get(doc, "error"), "code")),
                         code);
    json_decref(doc);
    qdp_resp_free(&r);
    return id;
}

static json_t *wait_succeeded(qdp *d, long long id)
{
    json_t *j = qdp_wait_job(d, id, 60);
    char *text = json_dumps(j, 0);
    ck_assert_msg(strcmp(json_string_value(json_object_get(j, "state")), "succeeded") == 0,
                  "job: %s", text);
    free(text);
    return j;
}

/* GET path into the file `dest` (expects 200). */
static void download(qdp *d, const char *path, const char *dest)
{
    qdp_resp r = qdp_req(d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "GET %s: %ld", path, r.status);
    FILE *f = fopen(dest, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(r.body, 1, r.len, f), r.len);
    fclose(f);
    qdp_resp_free(&r);
}

/* Tensor `name` of file `path`: dtype and shape checked, bytes into `out` (n bytes). */
static void read_tensor(const char *path, const char *name, quant_st_dtype dtype, int rank,
                        const int64_t *shape, void *out, size_t n)
{
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_open(path, &f, &err) == QUANT_CK_OK, "%s", err.message);
    const quant_st_tensor *t = quant_st_find(f, name);
    ck_assert_msg(t != NULL, "%s: no tensor %s", path, name);
    ck_assert_int_eq(t->dtype, dtype);
    ck_assert_int_eq(t->rank, rank);
    for (int i = 0; i < rank; i++) ck_assert_int_eq(t->shape[i], shape[i]);
    ck_assert_uint_eq(quant_st_nbytes(t), n);
    ck_assert_int_eq(quant_st_read(f, t, 0, out, n, NULL), QUANT_CK_OK);
    quant_st_close(f);
}

static bool has_tensor(const char *path, const char *name)
{
    quant_st_file *f = NULL;
    ck_assert_int_eq(quant_st_open(path, &f, NULL), QUANT_CK_OK);
    bool found = quant_st_find(f, name) != NULL;
    quant_st_close(f);
    return found;
}

/* The job report's "static_activations". */
static json_t *report_srq(qdp *d, long long id)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld/report", id);
    qdp_resp r = qdp_req(d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    json_t *doc = qdp_json(&r);
    qdp_resp_free(&r);
    json_t *sa = json_incref(json_object_get(doc, "static_activations"));
    json_decref(doc);
    ck_assert_ptr_nonnull(sa);
    return sa;
}

START_TEST(test_srq_upload_job)
{
    qdp d;
    qdp_start(&d, NULL);
    request(&d, "PUT", "/v1/rulesets/srq", SRQ_RULES, 201);
    post_stats(&d, "tiny");
    long long id = create_job(&d, "/v1/jobs?ruleset=srq&stats_model=tiny", NULL, SHARD1, 202, NULL);
    json_t *j = wait_succeeded(&d, id);
    ck_assert_str_eq(json_string_value(json_object_get(j, "stats_model")), "tiny");
    json_decref(j);
    char path[64], *file = qdt_join(d.root, "out.safetensors");
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
    download(&d, path, file);
    /* q_proj, absmax [[2, 4]], int8: scale = absmax / 127.5, no zero point */
    int64_t shape[2] = {1, 2};
    float scale[2];
    read_tensor(file, "model.layers.0.self_attn.q_proj.dot_general0_lhs_scale", QUANT_ST_F32, 2,
                shape, scale, sizeof scale);
    ck_assert(scale[0] == 2.0f / 127.5f);
    ck_assert(scale[1] == 4.0f / 127.5f);
    ck_assert(!has_tensor(file, "model.layers.0.self_attn.q_proj.dot_general0_lhs_zero_point"));
    /* up_proj, min [[-2, -1]] max [[4, 3]], uint8 [0, 255]: scale = (max - min) / 255,
     * zero point = round(0 - min / scale): 85 and 63.75 -> 64 */
    uint8_t zp[2];
    read_tensor(file, "model.layers.0.mlp.up_proj.dot_general0_lhs_scale", QUANT_ST_F32, 2, shape,
                scale, sizeof scale);
    ck_assert(scale[0] == 6.0f / 255.0f);
    ck_assert(scale[1] == 4.0f / 255.0f);
    read_tensor(file, "model.layers.0.mlp.up_proj.dot_general0_lhs_zero_point", QUANT_ST_U8, 2,
                shape, zp, sizeof zp);
    ck_assert_int_eq(zp[0], 85);
    ck_assert_int_eq(zp[1], 64);
    /* the down_proj rule has no act_qtype: left out; layer 3 is not in this shard, but its
     * module path matches the q_proj rule: written here (the last and only shard) */
    ck_assert(!has_tensor(file, "model.layers.0.mlp.down_proj.dot_general0_lhs_scale"));
    ck_assert(has_tensor(file, "model.layers.3.self_attn.q_proj.dot_general0_lhs_scale"));
    ck_assert(has_tensor(file, "model.layers.0.self_attn.q_proj.weight.qvalue"));
    json_t *sa = report_srq(&d, id);
    json_t *written = json_object_get(sa, "written"), *skipped = json_object_get(sa, "skipped");
    ck_assert_int_eq(json_array_size(written), 3);
    ck_assert_int_eq(json_array_size(skipped), 1);
    ck_assert_str_eq(json_string_value(json_array_get(skipped, 0)), DN_ACT);
    json_t *w;
    size_t i;
    bool seen_up = false;
    json_array_foreach(written, i, w)
    {
        ck_assert_int_eq(json_integer_value(json_object_get(w, "count")), 2);
        if (strcmp(json_string_value(json_object_get(w, "name")), UP_ACT) != 0) continue;
        seen_up = true;
        ck_assert_str_eq(json_string_value(json_object_get(w, "qtype")), "uint8");
        ck_assert_int_eq(json_integer_value(json_object_get(w, "rule")), 1);
        ck_assert_str_eq(json_string_value(json_object_get(w, "zero_point")),
                         "model.layers.0.mlp.up_proj.dot_general0_lhs_zero_point");
    }
    ck_assert(seen_up);
    json_decref(sa);
    free(file);
    qdp_stop(&d);
}
END_TEST

START_TEST(test_srq_dir_job)
{
    char *src = qdt_tmpdir(), cmd[4096], body[4096];
    snprintf(cmd, sizeof cmd, "cp -r %s %s/stories", SHARDED, src);
    ck_assert_int_eq(system(cmd), 0);
    qdp d;
    const char *extra[] = {"--source-root", src, NULL};
    qdp_start(&d, extra);
    post_stats(&d, "tiny");
    snprintf(body, sizeof body,
             "{\"rules\": " SRQ_LIST ", \"source\": {\"path\": \"%s/stories\"}, "
             "\"stats_model\": \"tiny\"}",
             src);
    long long id = create_job(&d, "/v1/jobs", body, NULL, 202, NULL);
    json_decref(wait_succeeded(&d, id));
    char path[128], *s1 = qdt_join(d.root, "s1"), *s2 = qdt_join(d.root, "s2");
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs/model-00001-of-00002.safetensors", id);
    download(&d, path, s1);
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs/model-00002-of-00002.safetensors", id);
    download(&d, path, s2);
    /* each activation in the shard of its module: layer 0 in the first, layer 3 in the second */
    ck_assert(has_tensor(s1, "model.layers.0.self_attn.q_proj.dot_general0_lhs_scale"));
    ck_assert(!has_tensor(s2, "model.layers.0.self_attn.q_proj.dot_general0_lhs_scale"));
    ck_assert(has_tensor(s2, "model.layers.3.self_attn.q_proj.dot_general0_lhs_scale"));
    int64_t one[2] = {1, 1};
    float scale;
    read_tensor(s2, "model.layers.3.self_attn.q_proj.dot_general0_lhs_scale", QUANT_ST_F32, 2, one,
                &scale, sizeof scale);
    ck_assert(scale == 8.0f / 127.5f);
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs/model.safetensors.index.json", id);
    qdp_resp r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    json_t *index = qdp_json(&r);
    qdp_resp_free(&r);
    json_t *wm = json_object_get(index, "weight_map");
    ck_assert_str_eq(json_string_value(json_object_get(
                         wm, "model.layers.0.mlp.up_proj.dot_general0_lhs_zero_point")),
                     "model-00001-of-00002.safetensors");
    ck_assert_str_eq(json_string_value(json_object_get(
                         wm, "model.layers.3.self_attn.q_proj.dot_general0_lhs_scale")),
                     "model-00002-of-00002.safetensors");
    json_decref(index);
    free(s1);
    free(s2);
    qdp_stop(&d);
    qdt_rmtree(src);
    free(src);
}
END_TEST

START_TEST(test_srq_refusals)
{
    char cmd[1024];
    qdp d;
    qdp_start(&d, NULL);
    request(&d, "PUT", "/v1/rulesets/srq", SRQ_RULES, 201);
    /* an unknown model: 422 before anything is stored, for uploads and JSON jobs */
    create_job(&d, "/v1/jobs?ruleset=srq&stats_model=nope", NULL, SHARD1, 422,
               "unknown_stats_model");
    create_job(&d, "/v1/jobs", "{\"ruleset\": \"srq\", \"stats_model\": \"nope\"}", NULL, 422,
               "unknown_stats_model");
    create_job(&d, "/v1/jobs", "{\"ruleset\": \"srq\", \"stats_model\": 7}", NULL, 400, "invalid");
    char *up = qdt_join(d.data_dir, "uploads");
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", up);
    ck_assert_int_eq(system(cmd), 0);
    free(up);
    /* SRQ rules without a stats_model: refused when asked for (planned), with the pipeline's
     * error, nothing kept */
    create_job(&d, "/v1/jobs?ruleset=srq", NULL, SHARD1, 422, "invalid_job");
    up = qdt_join(d.data_dir, "uploads");
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", up);
    ck_assert_int_eq(system(cmd), 0);
    free(up);
    long long id;
    json_t *j;
    /* a model with settings but no statistics: the job fails saying so */
    request(&d, "PUT", "/v1/models/empty", "{\"averaging\": \"simple\"}", 201);
    id = create_job(&d, "/v1/jobs?ruleset=srq&stats_model=empty", NULL, SHARD1, 202, NULL);
    j = qdp_wait_job(&d, id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "failed");
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(j, "error")), "empty"));
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(j, "error")), "no statistics"));
    json_decref(j);
    /* a stats_model but no SRQ rule: the job succeeds, every activation listed as skipped */
    post_stats(&d, "tiny");
    request(&d, "PUT", "/v1/rulesets/plain",
            "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]}", 201);
    id = create_job(&d, "/v1/jobs?ruleset=plain&stats_model=tiny", NULL, SHARD1, 202, NULL);
    json_decref(wait_succeeded(&d, id));
    json_t *sa = report_srq(&d, id);
    ck_assert_int_eq(json_array_size(json_object_get(sa, "written")), 0);
    ck_assert_int_eq(json_array_size(json_object_get(sa, "skipped")), 4);
    json_decref(sa);
    qdp_stop(&d);
}
END_TEST

Suite *suite_srq(void)
{
    Suite *s = suite_create("srq");
    TCase *unit = tcase_create("scales");
    tcase_add_test(unit, test_names);
    tcase_add_test(unit, test_symmetric_and_asymmetric);
    tcase_add_test(unit, test_first_rule_decides);
    tcase_add_test(unit, test_refusals);
    suite_add_tcase(s, unit);
    TCase *api = tcase_create("jobs");
    tcase_set_timeout(api, 120);
    tcase_add_test(api, test_srq_upload_job);
    tcase_add_test(api, test_srq_dir_job);
    tcase_add_test(api, test_srq_refusals);
    suite_add_tcase(s, api);
    return s;
}
