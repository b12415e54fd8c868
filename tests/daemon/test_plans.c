/* test_plans.c -- the plans suite, through the real quantd: POST /v1/plans on a checkpoint under
 * a source root answers 200 with the library's plan document (the one `quant plan --json`
 * prints) and its unused rules, creates no job; a path outside the roots is 403, a bad rule set
 * or a rule the checkpoint cannot take 422, with no server path in the message; a job created
 * with unused rules shows them from the start, runs to success, and its report lists them too;
 * an uploaded shard header (application/octet-stream) plans as the whole shard does.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdproc.h"
#include "qdtest.h"
#include "quant_pipeline.h"

#define SHARDED "tests/data/stories260K-bf16-sharded"

/* 0 matches nothing; 1 quantizes the projections; 2 is shadowed by 1; 3 is the first match of
 * the rank-1 layernorm weights only (copied, but used). */
#define RULES_ARRAY                                                                                \
    "[{\"module_path\":\"nothing\\\\.here\",\"weight_qtype\":\"int8\"},"                           \
    "{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"},"                                      \
    "{\"module_path\":\".*q_proj\",\"weight_qtype\":\"int4\"},"                                    \
    "{\"module_path\":\".*layernorm\",\"weight_qtype\":\"int8\"}]"

typedef struct plan_fixture {
    qdp d;
    char *src; /* the source root, holding stories/ */
} plan_fixture;

static void start(plan_fixture *f)
{
    f->src = qdt_tmpdir();
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp -r %s %s/stories", SHARDED, f->src);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
    qdp_start(&f->d, (const char *[]){"--source-root", f->src, NULL});
    const char *rs = "{\"rules\":" RULES_ARRAY "}";
    qdp_resp r = qdp_req(&f->d, "PUT", "/v1/rulesets/r", "application/json", rs, strlen(rs), NULL);
    ck_assert_int_lt(r.status, 300);
    qdp_resp_free(&r);
}

static void stop(plan_fixture *f)
{
    qdp_stop(&f->d);
    kit_rmtree(f->src);
    free(f->src);
}

/* POST `route` with {"ruleset": "r", "source": {"path": ROOT/rel}} (or `rules_field` instead of
 * the stored rule set when not NULL). */
static qdp_resp post(plan_fixture *f, const char *route, const char *rules_field, const char *rel)
{
    char body[8192];
    snprintf(body, sizeof body, "{%s,\"source\":{\"path\":\"%s/%s\"}}",
             rules_field ? rules_field : "\"ruleset\":\"r\"", f->src, rel);
    return qdp_req(&f->d, "POST", route, "application/json", body, strlen(body), NULL);
}

static void expect_unused_02(json_t *unused)
{
    ck_assert_msg(json_array_size(unused) == 2, "unused_rules: %zu", json_array_size(unused));
    ck_assert_int_eq(json_integer_value(json_array_get(unused, 0)), 0);
    ck_assert_int_eq(json_integer_value(json_array_get(unused, 1)), 2);
}

/* The library's plan of the fixture, as JSON. */
static json_t *library_plan(void)
{
    quant_ruleset *rs = NULL;
    quant_plan *p = NULL;
    quant_ck_error err;
    const char *rules = RULES_ARRAY;
    ck_assert_int_eq(quant_ruleset_parse(rules, strlen(rules), NULL, &rs, &err), QUANT_CK_OK);
    ck_assert_msg(quant_plan_path(rs, SHARDED, NULL, &p, &err) == QUANT_CK_OK, "%s", err.message);
    char *text = quant_plan_json(p);
    json_t *doc = json_loads(text, 0, NULL);
    free(text);
    quant_plan_free(p);
    quant_ruleset_free(rs);
    return doc;
}

START_TEST(test_plan_ok)
{
    plan_fixture f;
    start(&f);
    qdp_resp r = post(&f, "/v1/plans", NULL, "stories");
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    json_t *doc = qdp_json(&r);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "format")), "quantd.plan/1");
    json_t *summary = json_object_get(doc, "summary");
    expect_unused_02(json_object_get(summary, "unused_rules"));
    ck_assert_int_gt(json_integer_value(json_object_get(summary, "quantized")), 0);
    ck_assert(!strstr(r.body, f.src)); /* no server path */
    /* the document the library (and `quant plan --json`) gives for the same checkpoint */
    json_t *lib = library_plan();
    ck_assert_msg(json_equal(doc, lib), "the daemon's plan differs from the library's");
    json_decref(lib);
    /* a layernorm weight: copied for its rank, first matched by rule 3 */
    json_t *t, *norm = NULL;
    size_t i;
    json_array_foreach(json_object_get(doc, "tensors"), i,
                       t) if (strcmp(json_string_value(json_object_get(t, "name")),
                                     "model.layers.0.input_layernorm.weight") == 0) norm = t;
    ck_assert_ptr_nonnull(norm);
    ck_assert(json_is_null(json_object_get(norm, "rule")));
    ck_assert_int_eq(json_integer_value(json_object_get(norm, "first_match")), 3);
    ck_assert_str_eq(json_string_value(json_object_get(norm, "reason")), "rank < 2");
    json_decref(doc);
    qdp_resp_free(&r);
    /* inline rules and a single shard work the same; no job was created */
    r = post(&f, "/v1/plans", "\"rules\":" RULES_ARRAY, "stories/model-00001-of-00002.safetensors");
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    r = qdp_req(&f.d, "GET", "/v1/jobs", NULL, NULL, 0, NULL);
    doc = qdp_json(&r);
    ck_assert_uint_eq(json_array_size(json_object_get(doc, "jobs")), 0);
    json_decref(doc);
    qdp_resp_free(&r);
    stop(&f);
}
END_TEST

START_TEST(test_plan_refused)
{
    plan_fixture f;
    start(&f);
    /* outside the source roots: 403, as job creation answers */
    const char *outside = "{\"ruleset\":\"r\",\"source\":{\"path\":\"/etc\"}}";
    qdp_resp r =
        qdp_req(&f.d, "POST", "/v1/plans", "application/json", outside, strlen(outside), NULL);
    ck_assert_msg(r.status == 403, "%ld %s", r.status, r.body);
    ck_assert_ptr_nonnull(strstr(r.body, "\"forbidden\""));
    qdp_resp_free(&r);
    /* a rule set that does not validate: 422 invalid_rules */
    r = post(&f, "/v1/plans", "\"rules\":[{\"module_path\":\".*\",\"weight_qtype\":\"int9\"}]",
             "stories");
    ck_assert_msg(r.status == 422 && strstr(r.body, "invalid_rules"), "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    /* a rule the checkpoint cannot take: 422 invalid_job naming tensor and rule, no server path */
    r = post(&f, "/v1/plans",
             "\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\",\"tile_size\":7}]",
             "stories");
    ck_assert_msg(r.status == 422 && strstr(r.body, "invalid_job") && strstr(r.body, "rule 0"),
                  "%ld %s", r.status, r.body);
    ck_assert_msg(!strstr(r.body, f.src), "%s", r.body);
    qdp_resp_free(&r);
    /* an unknown stored rule set, a missing entry under the root */
    r = post(&f, "/v1/plans", "\"ruleset\":\"nope\"", "stories");
    ck_assert_msg(r.status == 422 && strstr(r.body, "unknown_ruleset"), "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    r = post(&f, "/v1/plans", NULL, "missing");
    ck_assert_msg(r.status == 422 && strstr(r.body, "bad_source"), "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    r = post(&f, "/v1/plans", "\"ruleset\":\"r\",\"extra\":1", "stories");
    ck_assert_int_eq(r.status, 400);
    qdp_resp_free(&r);
    stop(&f);
}
END_TEST

/* Rules that need statistics (act_static_scale) plan without a stats_model: the plan marks their
 * tensors "needs_statistics" (and counts them), in both forms; a job without stats_model is
 * still refused such rules at creation. */
#define SRQ_RULES                                                                                  \
    "\"rules\":[{\"module_path\":\".*q_proj\",\"weight_qtype\":\"int8\",\"act_qtype\":\"int8\","   \
    "\"act_static_scale\":true},{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]"

START_TEST(test_plan_needs_statistics)
{
    plan_fixture f;
    start(&f);
    qdp_resp r = post(&f, "/v1/plans", SRQ_RULES, "stories");
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    json_t *doc = qdp_json(&r);
    json_t *t;
    size_t i, marked = 0;
    json_array_foreach(json_object_get(doc, "tensors"), i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        bool q = strstr(name, "q_proj.weight") != NULL;
        ck_assert_msg(json_is_true(json_object_get(t, "needs_statistics")) == q, "%s", name);
        marked += q;
    }
    ck_assert_uint_eq(marked, 5); /* one q_proj a layer */
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(doc, "summary"), "needs_statistics")),
        5);
    json_decref(doc);
    qdp_resp_free(&r);
    /* the upload form likewise */
    qdp_resp put = qdp_req(&f.d, "PUT", "/v1/rulesets/srq", "application/json", "{" SRQ_RULES "}",
                           strlen("{" SRQ_RULES "}"), NULL);
    ck_assert_int_lt(put.status, 300);
    qdp_resp_free(&put);
    r = qdp_upload(&f.d, "/v1/plans?ruleset=srq", SHARDED "/model-00001-of-00002.safetensors");
    ck_assert_msg(r.status == 200 && strstr(r.body, "\"needs_statistics\": true"), "%ld %s",
                  r.status, r.body);
    qdp_resp_free(&r);
    /* a job without stats_model: refused, naming the rule and how to give statistics */
    r = post(&f, "/v1/jobs", SRQ_RULES, "stories");
    ck_assert_msg(r.status == 422 && strstr(r.body, "act_static_scale") &&
                      strstr(r.body, "stats_model"),
                  "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    stop(&f);
}
END_TEST

/* A job with unused rules: the job says so from its creation, succeeds, and its report lists
 * them. */
START_TEST(test_job_unused_rules)
{
    plan_fixture f;
    start(&f);
    qdp_resp r = post(&f, "/v1/jobs", NULL, "stories");
    ck_assert_msg(r.status == 202, "%ld %s", r.status, r.body);
    json_t *job = qdp_json(&r);
    expect_unused_02(json_object_get(job, "unused_rules"));
    long long id = json_integer_value(json_object_get(job, "id"));
    json_decref(job);
    qdp_resp_free(&r);
    job = qdp_wait_job(&f.d, id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(job, "state")), "succeeded");
    expect_unused_02(json_object_get(job, "unused_rules"));
    json_decref(job);
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld/report", id);
    r = qdp_req(&f.d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    json_t *rep = qdp_json(&r);
    expect_unused_02(json_object_get(json_object_get(rep, "summary"), "unused_rules"));
    json_decref(rep);
    qdp_resp_free(&r);
    stop(&f);
}
END_TEST

/* A compressed-tensors group size no common vLLM kernel takes (16 here): the plan and the job's
 * report carry the warning on each such tensor, the job succeeds. */
START_TEST(test_ct_group_size_warning)
{
    plan_fixture f;
    start(&f);
    const char *rules = "\"layout\":\"compressed-tensors\",\"rules\":[{\"module_path\":\".*(q|k|v|"
                        "o)_proj\",\"weight_qtype\":\"int4\",\"tile_size\":16}]";
    qdp_resp r = post(&f, "/v1/plans", rules, "stories");
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    json_t *doc = qdp_json(&r), *t;
    size_t i, warned = 0;
    json_array_foreach(json_object_get(doc, "tensors"), i, t) if (json_object_get(t, "warning"))
        warned++;
    ck_assert_uint_eq(warned, 20); /* q, k, v, o of 5 layers */
    json_decref(doc);
    qdp_resp_free(&r);
    r = post(&f, "/v1/jobs", rules, "stories");
    ck_assert_msg(r.status == 202, "%ld %s", r.status, r.body);
    json_t *job = qdp_json(&r);
    long long id = json_integer_value(json_object_get(job, "id"));
    json_decref(job);
    qdp_resp_free(&r);
    job = qdp_wait_job(&f.d, id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(job, "state")), "succeeded");
    json_decref(job);
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld/report", id);
    r = qdp_req(&f.d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    doc = qdp_json(&r);
    warned = 0;
    json_array_foreach(json_object_get(doc, "tensors"), i, t)
    {
        const char *w = json_string_value(json_object_get(t, "warning"));
        if (!w) continue;
        ck_assert_msg(strstr(w, "WNA16") && strstr(w, "not 16"), "%s", w);
        warned++;
    }
    ck_assert_uint_eq(warned, 20);
    json_decref(doc);
    qdp_resp_free(&r);
    stop(&f);
}
END_TEST

/* The first 8 + header-length bytes of `path` written to `to`: a shard's header alone. */
static void write_header_only(const char *path, const char *to)
{
    FILE *in = fopen(path, "rb"), *out = fopen(to, "wb");
    ck_assert(in && out);
    unsigned char b[8];
    ck_assert_uint_eq(fread(b, 1, 8, in), 8);
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = len << 8 | b[i];
    char *header = malloc(len);
    ck_assert_uint_eq(fread(header, 1, len, in), len);
    ck_assert_uint_eq(fwrite(b, 1, 8, out), 8);
    ck_assert_uint_eq(fwrite(header, 1, len, out), len);
    free(header);
    fclose(in);
    fclose(out);
}

/* An uploaded header (application/octet-stream, ?ruleset=NAME) is planned like the shard it
 * heads: the whole shard gives the same document; a body that is no header is 422, a missing
 * rule set 400 before the body. */
START_TEST(test_plan_upload)
{
    plan_fixture f;
    start(&f);
    char *shard = kit_join(f.src, "stories/model-00001-of-00002.safetensors");
    char *hdr = kit_join(f.src, "header.bin"), *junk = kit_join(f.src, "junk.bin");
    write_header_only(shard, hdr);
    qdp_resp r = qdp_upload(&f.d, "/v1/plans?ruleset=r", hdr);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    json_t *doc = qdp_json(&r);
    expect_unused_02(json_object_get(json_object_get(doc, "summary"), "unused_rules"));
    json_t *first = json_array_get(json_object_get(doc, "tensors"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(first, "shard")), "model.safetensors");
    qdp_resp_free(&r);
    r = qdp_upload(&f.d, "/v1/plans?ruleset=r&layout=native", shard); /* the whole shard */
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    json_t *whole = qdp_json(&r);
    ck_assert_msg(json_equal(doc, whole), "the header and the whole shard plan differently");
    json_decref(whole);
    json_decref(doc);
    qdp_resp_free(&r);
    FILE *j = fopen(junk, "wb");
    fputs("not a safetensors header at all", j);
    fclose(j);
    r = qdp_upload(&f.d, "/v1/plans?ruleset=r", junk);
    ck_assert_msg(r.status == 422 && strstr(r.body, "bad_safetensors") &&
                      strstr(r.body, "model.safetensors") && !strstr(r.body, f.d.root),
                  "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    r = qdp_upload(&f.d, "/v1/plans", hdr);
    ck_assert_msg(r.status == 400, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    r = qdp_upload(&f.d, "/v1/plans?ruleset=nope", hdr);
    ck_assert_msg(r.status == 422 && strstr(r.body, "unknown_ruleset"), "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    r = qdp_upload(&f.d, "/v1/plans?ruleset=r&layout=ggml", hdr);
    ck_assert_int_eq(r.status, 400);
    qdp_resp_free(&r);
    r = qdp_upload(&f.d, "/v1/plans?ruleset=r&layout=gguf", hdr);
    ck_assert_msg(r.status == 422 && strstr(r.body, "server-side source"), "%ld %s", r.status,
                  r.body);
    qdp_resp_free(&r);
    r = qdp_req(&f.d, "POST", "/v1/plans", "text/plain", "x", 1, NULL);
    ck_assert_int_eq(r.status, 415);
    qdp_resp_free(&r);
    free(shard);
    free(hdr);
    free(junk);
    stop(&f);
}
END_TEST

Suite *suite_plans(void)
{
    Suite *s = suite_create("plans");
    TCase *tc = tcase_create("plans");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_plan_ok);
    tcase_add_test(tc, test_plan_refused);
    tcase_add_test(tc, test_plan_needs_statistics);
    tcase_add_test(tc, test_job_unused_rules);
    tcase_add_test(tc, test_plan_upload);
    tcase_add_test(tc, test_ct_group_size_warning);
    suite_add_tcase(s, tc);
    return s;
}
