/* test_srq.c -- static-range quantization (SRQ) in quantd, which runs libquant-checkpoint's SRQ
 * engine (quant_srq_compute; its unit tests are in tests/ckpt/test_srq.c): the store's averages
 * seen as the engine's input (qd_stat_views), then the real quantd: statistics posted over HTTP,
 * a job with stats_model whose output holds ACT_scale and ACT_zero_point equal to the
 * hand-computed values, the activations no SRQ rule matched listed as skipped (with the reason)
 * in the report, a directory job putting each activation in its module's shard, the refusals
 * (unknown model, SRQ rules without statistics, a model without statistics), and the issue's
 * proof: `quant quantize --stats` on what GET .../stats returns (and on a Qwix dump posted with
 * ?mode=merge) writes the same bytes as the job with stats_model, in both layouts, for simple and
 * EMA averaging.
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

/* ---- qd_stat_views ------------------------------------------------------------------------------
 */

START_TEST(test_views)
{
    double a[2] = {1.5, 2.5}, b[2] = {3.0, 4.0};
    qd_stat_avg avg[2] = {
        {.name = "x/q/dot_general0_lhs", .kind = QD_STAT_ABSMAX, .rank = 1, .n = 2, .count = 3},
        {.name = "x/k/dot_general0_lhs", .kind = QD_STAT_MINMAX, .rank = 2, .n = 2, .count = 7}};
    avg[0].shape[0] = 2;
    avg[0].a = a;
    avg[1].shape[0] = 1;
    avg[1].shape[1] = 2;
    avg[1].a = a;
    avg[1].b = b;
    quant_act_stat *v = qd_stat_views(avg, 2);
    ck_assert_ptr_nonnull(v);
    ck_assert_str_eq(v[0].name, "x/q/dot_general0_lhs");
    ck_assert_int_eq(v[0].kind, QUANT_STAT_ABSMAX);
    ck_assert_int_eq(v[0].rank, 1);
    ck_assert_int_eq(v[0].shape[0], 2);
    ck_assert_ptr_eq(v[0].a, a);
    ck_assert_ptr_null(v[0].b);
    ck_assert_int_eq(v[0].count, 3);
    ck_assert_int_eq(v[1].kind, QUANT_STAT_MINMAX);
    ck_assert_int_eq(v[1].rank, 2);
    ck_assert_int_eq(v[1].shape[1], 2);
    ck_assert_ptr_eq(v[1].b, b);
    ck_assert_int_eq(v[1].count, 7);
    /* the engine takes them as they are */
    quant_srq_options o;
    quant_srq_options_init(&o);
    o.fixed_qtype = true;
    quant_srq *srq = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_srq_compute(v, 2, NULL, &o, &srq, &err) == QUANT_CK_OK, "%s", err.message);
    size_t n;
    const quant_static_act *acts = quant_srq_acts(srq, &n);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(acts[0].name, "x/k/dot_general0_lhs"); /* by name */
    ck_assert_ptr_nonnull(acts[0].zero_point);
    ck_assert(acts[1].scale[1] == 2.5f / 127.5f);
    quant_srq_free(srq);
    free(v);
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
    char path[64], *file = kit_join(d.root, "out.safetensors");
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
    json_t *sk = json_array_get(skipped, 0);
    ck_assert_str_eq(json_string_value(json_object_get(sk, "name")), DN_ACT);
    ck_assert_int_eq(json_integer_value(json_object_get(sk, "rule")), 2);
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(sk, "reason")), "no act_qtype"));
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
    char path[128], *s1 = kit_join(d.root, "s1"), *s2 = kit_join(d.root, "s2");
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
    kit_rmtree(src);
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
    char *up = kit_join(d.data_dir, "uploads");
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", up);
    ck_assert_int_eq(system(cmd), 0);
    free(up);
    /* SRQ rules without a stats_model: refused when asked for (planned), with the pipeline's
     * error, nothing kept */
    create_job(&d, "/v1/jobs?ruleset=srq", NULL, SHARD1, 422, "invalid_job");
    up = kit_join(d.data_dir, "uploads");
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", up);
    ck_assert_int_eq(system(cmd), 0);
    free(up);
    long long id;
    /* a model with settings but no statistics: refused at creation, saying so */
    request(&d, "PUT", "/v1/models/empty", "{\"averaging\": \"simple\"}", 201);
    qdp_resp r = qdp_upload(&d, "/v1/jobs?ruleset=srq&stats_model=empty", SHARD1);
    ck_assert_msg(r.status == 422 && strstr(r.body, "\"invalid_job\"") &&
                      strstr(r.body, "stats_model 'empty' has no statistics (reset, or never "
                                     "posted), and 6 weights of act_static_scale rules need them: "
                                     "'model.layers.0.mlp.up_proj' (rule 1)"),
                  "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    /* activations named unlike the module paths: refused at creation, naming the weights that
     * lack statistics, their rules and what the model's activations look like */
    request(
        &d, "POST", "/v1/models/flat/stats",
        "{\"stats\": {\"layers.0.attn.q\": {\"absmax\": 2}, \"layers.0.mlp.up\": {\"absmax\": 3}}}",
        200);
    r = qdp_upload(&d, "/v1/jobs?ruleset=srq&stats_model=flat", SHARD1);
    ck_assert_msg(r.status == 422 && strstr(r.body, "\"invalid_job\"") &&
                      strstr(r.body, "stats_model 'flat' has no statistics for the input of 6 "
                                     "weights quantized by act_static_scale rules: "
                                     "'model.layers.0.mlp.up_proj' (rule 1)") &&
                      strstr(r.body, "its 2 activations are named like 'layers.0.attn.q', "
                                     "'layers.0.mlp.up'") &&
                      strstr(r.body, "must be the weight's module path"),
                  "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    /* in compressed-tensors a model lacking only some is refused too (its run would fail) */
    post_stats(&d, "tiny");
    request(&d, "PUT", "/v1/rulesets/q8",
            "{\"rules\":[{\"module_path\":\".*self_attn\\\\.q_proj\",\"weight_qtype\":\"int8\","
            "\"act_qtype\":\"int8\",\"act_static_scale\":true}]}",
            201);
    r = qdp_upload(&d, "/v1/jobs?ruleset=q8&stats_model=tiny&layout=compressed-tensors", SHARD1);
    ck_assert_msg(r.status == 422 &&
                      strstr(r.body, "input of 2 weights quantized by act_static_scale rules: "
                                     "'model.layers.1.self_attn.q_proj' (rule 0), "
                                     "'model.layers.2.self_attn.q_proj' (rule 0)"),
                  "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    /* a stats_model but no SRQ rule: the job succeeds, every activation listed as skipped */
    request(&d, "PUT", "/v1/rulesets/plain",
            "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]}", 201);
    id = create_job(&d, "/v1/jobs?ruleset=plain&stats_model=tiny", NULL, SHARD1, 202, NULL);
    json_decref(wait_succeeded(&d, id));
    json_t *sa = report_srq(&d, id);
    ck_assert_int_eq(json_array_size(json_object_get(sa, "written")), 0);
    json_t *skipped = json_object_get(sa, "skipped");
    ck_assert_int_eq(json_array_size(skipped), 4);
    for (size_t i = 0; i < 4; i++)
        ck_assert_ptr_nonnull(
            strstr(json_string_value(json_object_get(json_array_get(skipped, i), "reason")),
                   "no act_qtype"));
    json_decref(sa);
    qdp_stop(&d);
}
END_TEST

/* ---- one engine, two front ends ---------------------------------------------------------------
 */

/* Every layer's q_proj (absmax, int8, one value) and up_proj (min/max, int8 asymmetric, one
 * value): per tensor, so the compressed-tensors layout can take them as input_scale. */
#define PROOF_RULES                                                                                \
    "[{\"module_path\":\".*self_attn\\\\.q_proj\",\"weight_qtype\":\"int8\","                      \
    "\"act_qtype\":\"int8\",\"act_static_scale\":true},"                                           \
    "{\"module_path\":\".*mlp\\\\.up_proj\",\"weight_qtype\":\"int8\",\"act_qtype\":\"int8\","     \
    "\"act_static_scale\":true},"                                                                  \
    "{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]"
#define PROOF_LAYERS 5

/* One post (update) for every layer: values that average to non-trivial floats. */
static void post_proof_stats(qdp *d, const char *model, int step)
{
    char body[8192], path[128];
    size_t at = (size_t)snprintf(body, sizeof body, "{\"step\": %d, \"stats\": {", step);
    for (int l = 0; l < PROOF_LAYERS; l++)
        at += (size_t)snprintf(
            body + at, sizeof body - at,
            "%s\"model/layers/%d/self_attn/q_proj/dot_general0_lhs\": {\"absmax\": [[%.9g]]}, "
            "\"model/layers/%d/mlp/up_proj/dot_general0_lhs\": {\"min\": [[%.9g]], \"max\": "
            "[[%.9g]]}, \"model/layers/%d/mlp/down_proj/dot_general0_lhs\": {\"absmax\": [[1]]}",
            l ? ", " : "", l, 1.37 * (l + 1) + 0.11 * step, l, -0.3 * (l + step),
            2.9 + 0.7 * l * step, l);
    snprintf(body + at, sizeof body - at, "}}");
    snprintf(path, sizeof path, "/v1/models/%s/stats", model);
    request(d, "POST", path, body, 200);
}

/* The same statistics as a Qwix quant_stats dump (counts and sums), nested by module. */
static void write_dump(const char *file)
{
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"model\": {\"layers\": {", f);
    for (int l = 0; l < PROOF_LAYERS; l++)
        fprintf(f,
                "%s\"%d\": {\"self_attn\": {\"q_proj\": {\"dot_general0_lhs\": {\"count\": 3, "
                "\"sum_of_absmax\": [[%.9g]]}}}, \"mlp\": {\"up_proj\": {\"dot_general0_lhs\": "
                "{\"count\": 3, \"sum_of_min\": [[%.9g]], \"sum_of_max\": [[%.9g]]}}}}",
                l ? ", " : "", l, 3.1 * l + 0.7, -0.9 * l, 7.3 + l);
    fputs("}}}", f);
    fclose(f);
}

static void same_bytes(const char *a, const char *b)
{
    size_t na, nb;
    void *x = qdt_read_file(a, &na), *y = qdt_read_file(b, &nb);
    ck_assert_msg(na == nb && memcmp(x, y, na) == 0, "%s and %s differ", a, b);
    free(x);
    free(y);
}

/* The job (a directory under the source root) with stats_model = model in `layout`, and `quant
 * quantize --stats stats_file` of the same directory: the same shards, index and report. */
static void compare_fronts(qdp *d, const char *src, const char *model, const char *layout,
                           const char *stats_file)
{
    char body[4096], path[256], cmd[8192];
    snprintf(body, sizeof body,
             "{\"rules\": " PROOF_RULES ", \"source\": {\"path\": \"%s/stories\"}, "
             "\"stats_model\": \"%s\", \"layout\": \"%s\"}",
             src, model, layout);
    long long id = create_job(d, "/v1/jobs", body, NULL, 202, NULL);
    json_decref(wait_succeeded(d, id));
    char *rules = kit_join(d->root, "proof-rules.json"), *out = kit_join(d->root, "cli-out");
    FILE *f = fopen(rules, "w");
    ck_assert_ptr_nonnull(f);
    fputs(PROOF_RULES, f);
    fclose(f);
    const char *bin = getenv("QUANT_BIN") ? getenv("QUANT_BIN") : "build/bin/quant";
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && %s quantize -q -l %s -r '%s' --stats '%s' '%s/stories' '%s'", out, bin,
             layout, rules, stats_file, src, out);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
    static const char *const files[] = {"model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors",
                                        "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char *mine = kit_join(out, files[i]), *theirs = kit_join(d->root, "job-file");
        snprintf(path, sizeof path, "/v1/jobs/%lld/outputs/%s", id, files[i]);
        download(d, path, theirs);
        same_bytes(mine, theirs);
        free(mine);
        free(theirs);
    }
    /* the reports: one document, written by the library for both */
    char *rep = kit_join(out, "quant-report.json");
    json_t *cli = json_load_file(rep, 0, NULL);
    snprintf(path, sizeof path, "/v1/jobs/%lld/report", id);
    qdp_resp r = qdp_req(d, "GET", path, NULL, NULL, 0, NULL);
    json_t *job = qdp_json(&r);
    qdp_resp_free(&r);
    ck_assert_ptr_nonnull(cli);
    ck_assert_msg(json_equal(cli, job), "reports differ for %s, %s", model, layout);
    json_t *sa = json_object_get(job, "static_activations");
    ck_assert_int_eq(json_array_size(json_object_get(sa, "written")), 2 * PROOF_LAYERS);
    json_decref(cli);
    json_decref(job);
    free(rep);
    free(rules);
    free(out);
}

START_TEST(test_cli_stats_equals_job)
{
    char *src = qdt_tmpdir(), cmd[4096];
    snprintf(cmd, sizeof cmd, "cp -r %s %s/stories", SHARDED, src);
    ck_assert_int_eq(system(cmd), 0);
    qdp d;
    const char *extra[] = {"--source-root", src, NULL};
    qdp_start(&d, extra);
    request(&d, "PUT", "/v1/models/ema", "{\"averaging\": \"ema\", \"ema_constant\": 0.3}", 201);
    for (int step = 1; step <= 3; step++) {
        post_proof_stats(&d, "simple", step);
        post_proof_stats(&d, "ema", step);
    }
    /* a Qwix dump: posted with ?mode=merge, and given to the command as it is */
    char *dump = kit_join(d.root, "dump.json");
    write_dump(dump);
    /* the daemon's merge takes flat names: the same dump, flattened, under "stats" */
    char flat[16384];
    size_t at = (size_t)snprintf(flat, sizeof flat, "{\"stats\": {");
    for (int l = 0; l < PROOF_LAYERS; l++)
        at += (size_t)snprintf(
            flat + at, sizeof flat - at,
            "%s\"model/layers/%d/self_attn/q_proj/dot_general0_lhs\": {\"count\": 3, "
            "\"sum_of_absmax\": [[%.9g]]}, \"model/layers/%d/mlp/up_proj/dot_general0_lhs\": "
            "{\"count\": 3, \"sum_of_min\": [[%.9g]], \"sum_of_max\": [[%.9g]]}",
            l ? ", " : "", l, 3.1 * l + 0.7, l, -0.9 * l, 7.3 + l);
    snprintf(flat + at, sizeof flat - at, "}}");
    request(&d, "POST", "/v1/models/merged/stats?mode=merge", flat, 200);
    static const char *const layouts[] = {"native", "compressed-tensors"};
    for (size_t k = 0; k < 2; k++) {
        for (int m = 0; m < 2; m++) {
            const char *model = m ? "ema" : "simple";
            char path[128], *file = kit_join(d.root, "stats.json");
            snprintf(path, sizeof path, "/v1/models/%s/stats", model);
            download(&d, path, file);
            compare_fronts(&d, src, model, layouts[k], file);
            free(file);
        }
        compare_fronts(&d, src, "merged", layouts[k], dump);
    }
    free(dump);
    qdp_stop(&d);
    kit_rmtree(src);
    free(src);
}
END_TEST

/* weight_importance (SPEC 9) from a job's stats_model: the posted mean_sq weighs q_proj's MSE
 * search, the report names the activation, and `quant quantize --stats` on what GET .../stats
 * returns writes the same bytes and report. Without stats_model the job is refused at creation,
 * naming the weight. */
#define IMP_RULES                                                                                  \
    "[{\"module_path\":\"model\\\\.layers\\\\.0\\\\.self_attn\\\\.q_proj\","                       \
    "\"weight_qtype\":\"int4\",\"tile_size\":32,\"weight_calibration_method\":\"mse\","            \
    "\"weight_importance\":true}]"

START_TEST(test_importance_job)
{
    qdp d;
    qdp_start(&d, NULL);
    char body[4096], path[128];
    size_t at = (size_t)snprintf(body, sizeof body, "{\"stats\": {\"" Q_ACT "\": {\"mean_sq\": [");
    for (int i = 0; i < 64; i++)
        at += (size_t)snprintf(body + at, sizeof body - at, "%s%.3g", i ? ", " : "",
                               0.25 * (i % 5) + (i == 7 ? 9.0 : 0.0));
    snprintf(body + at, sizeof body - at, "]}}}");
    request(&d, "POST", "/v1/models/imp/stats", body, 200);
    snprintf(body, sizeof body, "{\"rules\": %s}", IMP_RULES);
    request(&d, "PUT", "/v1/rulesets/imp", body, 201);
    create_job(&d, "/v1/jobs?ruleset=imp", NULL, SHARD1, 422, "invalid_job");
    long long id = create_job(&d, "/v1/jobs?ruleset=imp&stats_model=imp", NULL, SHARD1, 202, NULL);
    json_decref(wait_succeeded(&d, id));
    char *job_out = kit_join(d.root, "job.safetensors"), *stats = kit_join(d.root, "imp.json");
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
    download(&d, path, job_out);
    download(&d, "/v1/models/imp/stats", stats);
    char *rules = kit_join(d.root, "imp-rules.json"), *out = kit_join(d.root, "cli.safetensors");
    FILE *f = fopen(rules, "w");
    ck_assert_ptr_nonnull(f);
    fputs(IMP_RULES, f);
    fclose(f);
    char cmd[4096];
    const char *bin = getenv("QUANT_BIN") ? getenv("QUANT_BIN") : "build/bin/quant";
    snprintf(cmd, sizeof cmd, "%s quantize -q -r '%s' --stats '%s' '%s' '%s'", bin, rules, stats,
             SHARD1, out);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
    same_bytes(out, job_out);
    snprintf(path, sizeof path, "/v1/jobs/%lld/report", id);
    qdp_resp r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    json_t *job = qdp_json(&r);
    qdp_resp_free(&r);
    json_t *t, *mse = NULL;
    size_t i;
    json_array_foreach(json_object_get(job, "tensors"), i, t)
    {
        if (json_object_get(t, "mse")) mse = json_object_get(t, "mse");
    }
    ck_assert_ptr_nonnull(mse);
    ck_assert_str_eq(json_string_value(json_object_get(mse, "importance")), Q_ACT);
    json_decref(job);
    free(job_out);
    free(stats);
    free(rules);
    free(out);
    qdp_stop(&d);
}
END_TEST

Suite *suite_srq(void)
{
    Suite *s = suite_create("srq");
    TCase *unit = tcase_create("views");
    tcase_add_test(unit, test_views);
    suite_add_tcase(s, unit);
    TCase *api = tcase_create("jobs");
    tcase_set_timeout(api, 120);
    tcase_add_test(api, test_srq_upload_job);
    tcase_add_test(api, test_srq_dir_job);
    tcase_add_test(api, test_srq_refusals);
    tcase_add_test(api, test_cli_stats_equals_job);
    tcase_add_test(api, test_importance_job);
    suite_add_tcase(s, api);
    return s;
}
