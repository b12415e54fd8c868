/* test_api.c -- the integration suite: the real quantd on an ephemeral loopback port, every
 * route's happy path and error statuses, uploads (valid, malformed, over the limit, concurrent),
 * jobs on server-side checkpoints under a source root, cancel of a running job, restarts with
 * queued, running and finished jobs, and the output byte-identical to the offline `quant`.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qdproc.h"
#include "store.h"
#include "qdtest.h"

#define SHARD1  "tests/data/stories260K-bf16-sharded/model-00001-of-00002.safetensors"
#define SHARDED "tests/data/stories260K-bf16-sharded"
#define RULES   "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]}"

static long long id_of(json_t *job)
{
    return (long long)json_integer_value(json_object_get(job, "id"));
}

static void expect(qdp *d, const char *method, const char *path, const char *body, long status,
                   const char *code)
{
    qdp_resp r = qdp_req(d, method, path, body ? "application/json" : NULL, body,
                         body ? strlen(body) : 0, NULL);
    ck_assert_msg(r.status == status, "%s %s: %ld, wanted %ld: %s", method, path, r.status, status,
                  r.body);
    if (code) {
        json_t *doc = qdp_json(&r);
        const char *got = json_string_value(json_object_get(json_object_get(doc, "error"), "code"));
        ck_assert_msg(got && strcmp(got, code) == 0, "%s %s: code %s, wanted %s", method, path,
                      got ? got : "(none)", code);
        ck_assert(json_string_length(json_object_get(json_object_get(doc, "error"), "message")) >
                  0);
        json_decref(doc);
    }
    qdp_resp_free(&r);
}

static void put_rules(qdp *d, const char *name, const char *body)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/rulesets/%s", name);
    qdp_resp r = qdp_req(d, "PUT", path, "application/json", body, strlen(body), NULL);
    ck_assert_msg(r.status == 201 || r.status == 200, "PUT %s: %ld %s", path, r.status, r.body);
    qdp_resp_free(&r);
}

/* Uploads file as a job with ruleset; returns the job id (expects 202). */
static long long upload_job(qdp *d, const char *ruleset, const char *file)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs?ruleset=%s", ruleset);
    qdp_resp r = qdp_upload(d, path, file);
    ck_assert_msg(r.status == 202, "upload: %ld %s", r.status, r.body);
    char *loc = qdp_header(&r, "location");
    json_t *j = qdp_json(&r);
    long long id = id_of(j);
    char want[64];
    snprintf(want, sizeof want, "/v1/jobs/%lld", id);
    ck_assert_str_eq(loc, want);
    /* the job exists from the shard's header on and runs while the body arrives: by the answer
     * (the body's end) a worker may have taken it, or finished it */
    const char *state = json_string_value(json_object_get(j, "state"));
    ck_assert_msg(strcmp(state, "queued") == 0 || strcmp(state, "running") == 0 ||
                      strcmp(state, "succeeded") == 0,
                  "state %s", state);
    free(loc);
    json_decref(j);
    qdp_resp_free(&r);
    return id;
}

/* ---- health, routing, rule sets ---------------------------------------------------------------
 */

START_TEST(test_health_and_routing)
{
    qdp d;
    qdp_start(&d, NULL);
    expect(&d, "GET", "/healthz", NULL, 200, NULL);
    expect(&d, "GET", "/readyz", NULL, 200, NULL);
    expect(&d, "GET", "/nope", NULL, 404, "not_found");
    qdp_resp r = qdp_req(&d, "PATCH", "/v1/jobs", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 405);
    char *allow = qdp_header(&r, "allow");
    ck_assert_str_eq(allow, "POST, GET, HEAD");
    free(allow);
    char *rid = qdp_header(&r, "x-request-id");
    ck_assert_ptr_nonnull(rid);
    ck_assert_uint_eq(strlen(rid), 16);
    free(rid);
    qdp_resp_free(&r);
    expect(&d, "GET", "/v1/jobs/abc", NULL, 404, "not_found");
    expect(&d, "GET", "/v1/jobs/99", NULL, 404, "not_found");
    expect(&d, "GET", "/v1/jobs?state=bogus", NULL, 400, "invalid");
    expect(&d, "GET", "/v1/jobs?limit=0", NULL, 400, "invalid");
    r = qdp_req(&d, "GET", "/metrics", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(
        r.body, "quantd_http_requests_total{route=\"/healthz\",method=\"GET\",status=\"200\"} 1"));
    ck_assert_ptr_nonnull(strstr(r.body, "quantd_jobs{state=\"queued\"} 0"));
    ck_assert_ptr_nonnull(strstr(r.body, "quantd_http_request_duration_seconds_bucket"));
    ck_assert_ptr_nonnull(strstr(r.body, "quantd_queue_depth 0"));
    qdp_resp_free(&r);
    qdp_stop(&d);
}
END_TEST

START_TEST(test_rulesets)
{
    qdp d;
    const char *extra[] = {"--max-json-body", "4096", NULL};
    qdp_start(&d, extra);
    qdp_resp r =
        qdp_req(&d, "PUT", "/v1/rulesets/int8", "application/json", RULES, strlen(RULES), NULL);
    ck_assert_int_eq(r.status, 201);
    json_t *doc = qdp_json(&r);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "name")), "int8");
    ck_assert_int_eq(json_array_size(json_object_get(doc, "rules")), 1);
    json_decref(doc);
    qdp_resp_free(&r);
    r = qdp_req(&d, "PUT", "/v1/rulesets/int8", "application/json", RULES, strlen(RULES), NULL);
    ck_assert_int_eq(r.status, 200);
    qdp_resp_free(&r);
    /* a bare list of rules: told to wrap it */
    const char *bare = "[{\"module_path\": \".*\", \"weight_qtype\": \"int8\"}]";
    r = qdp_req(&d, "PUT", "/v1/rulesets/bare", "application/json", bare, strlen(bare), NULL);
    ck_assert_msg(r.status == 400 && strstr(r.body, "{\\\"rules\\\": [...]} (wrap the list)"), "%s",
                  r.body);
    qdp_resp_free(&r);
    /* a job in another Content-Type (curl's default form type here): told which two it
     * takes, before any body */
    r = qdp_req(&d, "POST", "/v1/jobs?ruleset=int8", NULL, "x", 1, NULL);
    ck_assert_msg(r.status == 415 && strstr(r.body, "-T FILE") &&
                      strstr(r.body, "was application/x-www-form-urlencoded"),
                  "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    put_rules(&d, "b-2", "{\"rules\":[]}");
    r = qdp_req(&d, "GET", "/v1/rulesets", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    doc = qdp_json(&r);
    json_t *list = json_object_get(doc, "rulesets");
    ck_assert_int_eq(json_array_size(list), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(list, 0), "name")), "b-2");
    json_decref(doc);
    qdp_resp_free(&r);
    expect(&d, "GET", "/v1/rulesets/int8", NULL, 200, NULL);
    /* every bad input: a clear error and nothing stored */
    expect(&d, "PUT", "/v1/rulesets/x", "{\"rules\":[", 400, "bad_json");
    expect(&d, "PUT", "/v1/rulesets/x", "[1]", 400, "bad_json");
    /* an integer beyond 64 bits: the field and the limit named, not jansson's words */
    const char *huge =
        "{\"rules\":[{\"weight_qtype\":\"int8\",\"tile_size\":99999999999999999999}]}";
    r = qdp_req(&d, "PUT", "/v1/rulesets/x", "application/json", huge, strlen(huge), NULL);
    ck_assert_msg(r.status == 400 && strstr(r.body, "\"bad_json\"") &&
                      strstr(r.body, "field 'tile_size': integer 99999999999999999999 is out of "
                                     "range: integers must lie in -9223372036854775808.."
                                     "9223372036854775807") &&
                      !strstr(r.body, "too big"),
                  "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    expect(&d, "PUT", "/v1/rulesets/x", "{\"rulez\":[]}", 400, "invalid");
    expect(&d, "PUT", "/v1/rulesets/x", "{\"rules\":{}}", 400, "invalid");
    expect(&d, "PUT", "/v1/rulesets/x", "{\"rules\":[{\"weight_qtype\":\"int9\"}]}", 422,
           "invalid_rules");
    expect(&d, "PUT", "/v1/rulesets/x", "{\"rules\":[{\"module_path\":\"(\"}]}", 422,
           "invalid_rules");
    expect(&d, "PUT", "/v1/rulesets/.hidden", RULES, 400, "invalid");
    char big[8192];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    memcpy(big, RULES, strlen(RULES));
    expect(&d, "PUT", "/v1/rulesets/x", big, 413, "too_large");
    expect(&d, "GET", "/v1/rulesets/x", NULL, 404, "not_found");
    r = qdp_req(&d, "PUT", "/v1/rulesets/x", "text/plain", RULES, strlen(RULES), NULL);
    ck_assert_int_eq(r.status, 415);
    qdp_resp_free(&r);
    expect(&d, "DELETE", "/v1/rulesets/int8", NULL, 204, NULL);
    expect(&d, "DELETE", "/v1/rulesets/int8", NULL, 404, "not_found");
    expect(&d, "GET", "/v1/rulesets/int8", NULL, 404, "not_found");
    qdp_stop(&d);
}
END_TEST

/* ---- uploads ----------------------------------------------------------------------------------
 */

/* The offline `quant quantize` of SHARD1 with RULES: what the daemon must serve, byte for byte. */
static void *offline_output(const char *root, size_t *len)
{
    char *rules = kit_join(root, "rules.json"), *out = kit_join(root, "offline.safetensors");
    FILE *f = fopen(rules, "w");
    ck_assert_ptr_nonnull(f);
    fputs(RULES, f);
    fclose(f);
    const char *bin = getenv("QUANT_BIN") ? getenv("QUANT_BIN") : "build/bin/quant";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s quantize --quiet --rules %s %s %s", bin, rules, SHARD1, out);
    ck_assert_int_eq(system(cmd), 0);
    void *bytes = qdt_read_file(out, len);
    free(rules);
    free(out);
    return bytes;
}

START_TEST(test_upload_round_trip)
{
    qdp d;
    qdp_start(&d, NULL);
    put_rules(&d, "int8", RULES);
    long long id = upload_job(&d, "int8", SHARD1);
    json_t *j = qdp_wait_job(&d, id, 60);
    ck_assert_msg(strcmp(json_string_value(json_object_get(j, "state")), "succeeded") == 0,
                  "job: %s", json_dumps(j, 0));
    json_t *progress = json_object_get(j, "progress");
    ck_assert_int_eq(json_integer_value(json_object_get(progress, "tensors_done")),
                     json_integer_value(json_object_get(progress, "tensors_total")));
    json_t *outs = json_object_get(j, "outputs");
    ck_assert_int_eq(json_array_size(outs), 1);
    const char *sha = json_string_value(json_object_get(json_array_get(outs, 0), "sha256"));
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(outs, 0), "name")),
                     "model.safetensors");
    size_t want_len;
    void *want = offline_output(d.root, &want_len);
    char path[128], etag[80], hdr[128];
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
    qdp_resp r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, want_len);
    ck_assert_int_eq(memcmp(r.body, want, want_len), 0); /* the daemon = the offline command */
    char *tag = qdp_header(&r, "etag");
    snprintf(etag, sizeof etag, "\"%s\"", sha);
    ck_assert_str_eq(tag, etag);
    free(tag);
    qdp_resp_free(&r);
    /* conditional and range requests */
    snprintf(hdr, sizeof hdr, "If-None-Match: %s", etag);
    r = qdp_req(&d, "GET", path, NULL, NULL, 0, hdr);
    ck_assert_int_eq(r.status, 304);
    qdp_resp_free(&r);
    r = qdp_req(&d, "GET", path, NULL, NULL, 0, "Range: bytes=8-15");
    ck_assert_int_eq(r.status, 206);
    ck_assert_uint_eq(r.len, 8);
    ck_assert_int_eq(memcmp(r.body, (char *)want + 8, 8), 0);
    char *cr = qdp_header(&r, "content-range");
    snprintf(hdr, sizeof hdr, "bytes 8-15/%zu", want_len);
    ck_assert_str_eq(cr, hdr);
    free(cr);
    qdp_resp_free(&r);
    r = qdp_req(&d, "GET", path, NULL, NULL, 0, "Range: bytes=-4");
    ck_assert_int_eq(r.status, 206);
    ck_assert_int_eq(memcmp(r.body, (char *)want + want_len - 4, 4), 0);
    qdp_resp_free(&r);
    /* If-Range: a range of this file only; another ETag gets the whole file */
    snprintf(hdr, sizeof hdr, "If-Range: \"%064d\"", 0);
    r = qdp_req_headers(&d, "GET", path, "Range: bytes=8-15", hdr);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, want_len);
    qdp_resp_free(&r);
    snprintf(hdr, sizeof hdr, "If-Range: %s", etag);
    r = qdp_req_headers(&d, "GET", path, "Range: bytes=8-15", hdr);
    ck_assert_int_eq(r.status, 206);
    ck_assert_uint_eq(r.len, 8);
    qdp_resp_free(&r);
    r = qdp_req(&d, "GET", path, NULL, NULL, 0, "Range: bytes=999999999-");
    ck_assert_int_eq(r.status, 416);
    qdp_resp_free(&r);
    /* by name, the report, and names that are not outputs */
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs/model.safetensors", id);
    r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, want_len);
    qdp_resp_free(&r);
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs/..", id);
    expect(&d, "GET", path, NULL, 404, "not_found");
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs/%%2e%%2e%%2fquantd.db", id);
    expect(&d, "GET", path, NULL, 404, NULL);
    /* every /v1/jobs/{id}... route reads the id the same way: only the plain decimal form names
     * the job (a sign, a leading zero or a blank is another, unknown, id) */
    static const char *const id_forms[][2] = {
        {"+", ""}, {"0", ""}, {"%20", ""}, {"", "%20"}, {"", ".0"}};
    static const char *const id_routes[] = {"", "/report", "/output", "/outputs/model.safetensors"};
    for (size_t f = 0; f < sizeof id_forms / sizeof *id_forms; f++)
        for (size_t k = 0; k < sizeof id_routes / sizeof *id_routes; k++) {
            char idtext[64];
            snprintf(idtext, sizeof idtext, "%s%lld%s", id_forms[f][0], id, id_forms[f][1]);
            snprintf(path, sizeof path, "/v1/jobs/%s%s", idtext, id_routes[k]);
            expect(&d, "GET", path, NULL, 404, "not_found");
        }
    snprintf(path, sizeof path, "/v1/jobs/%lld/report", id);
    r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    json_t *rep = qdp_json(&r);
    ck_assert_int_gt(json_array_size(json_object_get(rep, "tensors")), 10);
    json_decref(rep);
    qdp_resp_free(&r);
    free(want);
    json_decref(j);
    /* deleting a finished job removes it and its files */
    snprintf(path, sizeof path, "/v1/jobs/%lld", id);
    expect(&d, "DELETE", path, NULL, 204, NULL);
    expect(&d, "GET", path, NULL, 404, "not_found");
    char *dir = kit_join(d.data_dir, "jobs/1");
    ck_assert_int_ne(access(dir, F_OK), 0);
    free(dir);
    qdp_stop(&d);
}
END_TEST

static int count_entries(const char *dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    ck_assert_int_eq(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

START_TEST(test_bad_uploads)
{
    qdp d;
    const char *extra[] = {"--max-upload", "300000", NULL}; /* shard 1 is 341 KB, 2 is 184 KB */
    qdp_start(&d, extra);
    put_rules(&d, "int8", RULES);
    /* malformed: 422 naming the problem, no job, no file kept */
    char *bad = kit_join(d.root, "bad.safetensors");
    FILE *f = fopen(bad, "wb");
    fputs("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":{\"dtype\":", f);
    fclose(f);
    qdp_resp r = qdp_upload(&d, "/v1/jobs?ruleset=int8", bad);
    ck_assert_msg(r.status == 422, "%ld %s", r.status, r.body);
    ck_assert_ptr_nonnull(strstr(r.body, "bad_safetensors"));
    qdp_resp_free(&r);
    /* over the limit: 413 (Content-Length known up front) */
    r = qdp_upload(&d, "/v1/jobs?ruleset=int8", SHARDED "/model-00001-of-00002.safetensors");
    ck_assert_int_eq(r.status, 413);
    qdp_resp_free(&r);
    /* over the limit mid-way (chunked, no Content-Length) */
    r = qdp_upload_mode(&d, "/v1/jobs?ruleset=int8", SHARDED "/model-00001-of-00002.safetensors",
                        true);
    ck_assert_int_eq(r.status, 413);
    qdp_resp_free(&r);
    /* a chunked upload within the limit is fine */
    long long chunked_id = 0;
    r = qdp_upload_mode(&d, "/v1/jobs?ruleset=int8", SHARDED "/model-00002-of-00002.safetensors",
                        true);
    ck_assert_msg(r.status == 202, "%ld %s", r.status, r.body);
    json_t *cj = qdp_json(&r);
    chunked_id = id_of(cj);
    json_decref(cj);
    qdp_resp_free(&r);
    cj = qdp_wait_job(&d, chunked_id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(cj, "state")), "succeeded");
    json_decref(cj);
    char dpath[64];
    snprintf(dpath, sizeof dpath, "/v1/jobs/%lld", chunked_id);
    expect(&d, "DELETE", dpath, NULL, 204, NULL);
    /* no or unknown rule set, bad layout, empty body */
    r = qdp_upload(&d, "/v1/jobs", SHARDED "/model-00002-of-00002.safetensors");
    ck_assert_int_eq(r.status, 400);
    qdp_resp_free(&r);
    r = qdp_upload(&d, "/v1/jobs?ruleset=nope", SHARDED "/model-00002-of-00002.safetensors");
    ck_assert_int_eq(r.status, 422);
    qdp_resp_free(&r);
    r = qdp_upload(&d, "/v1/jobs?ruleset=int8&layout=ggml",
                   SHARDED "/model-00002-of-00002.safetensors");
    ck_assert_int_eq(r.status, 400);
    qdp_resp_free(&r);
    /* the gguf layout reads GGUF files (or checkpoint directories), not an uploaded shard */
    r = qdp_upload(&d, "/v1/jobs?ruleset=int8&layout=gguf",
                   SHARDED "/model-00002-of-00002.safetensors");
    ck_assert_msg(r.status == 422 && strstr(r.body, "server-side source"), "%ld %s", r.status,
                  r.body);
    qdp_resp_free(&r);
    f = fopen(bad, "wb");
    fclose(f);
    r = qdp_upload(&d, "/v1/jobs?ruleset=int8", bad);
    ck_assert_int_eq(r.status, 400);
    qdp_resp_free(&r);
    r = qdp_req(&d, "GET", "/v1/jobs", NULL, NULL, 0, NULL);
    json_t *doc = qdp_json(&r);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "jobs")), 0);
    json_decref(doc);
    qdp_resp_free(&r);
    char *up = kit_join(d.data_dir, "uploads"), *tmp = kit_join(d.data_dir, "tmp");
    ck_assert_int_eq(count_entries(up), 0);
    ck_assert_int_eq(count_entries(tmp), 0);
    /* a job its rules cannot plan: refused when asked for (422 naming the upload's tensor and
     * rule), not accepted to fail later; nothing kept, no job */
    put_rules(&d, "tile5",
              "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\","
              "\"tile_size\":5}]}");
    qdp_resp r5 =
        qdp_upload(&d, "/v1/jobs?ruleset=tile5", SHARDED "/model-00002-of-00002.safetensors");
    ck_assert_msg(
        r5.status == 422 && strstr(r5.body, "\"invalid_job\"") &&
            strstr(r5.body, "\"14 tensors cannot be planned: model.safetensors: tensor ") &&
            strstr(r5.body, "tiled") && !strstr(r5.body, d.data_dir),
        "%ld %s", r5.status, r5.body);
    qdp_resp_free(&r5);
    /* a rule the layout cannot express (int16 in compressed-tensors): refused, not failed later */
    put_rules(&d, "i16", "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int16\"}]}");
    r5 = qdp_upload(&d, "/v1/jobs?ruleset=i16&layout=compressed-tensors",
                    SHARDED "/model-00002-of-00002.safetensors");
    ck_assert_msg(r5.status == 422 && strstr(r5.body, "\"invalid_job\"") &&
                      strstr(r5.body, "compressed-tensors"),
                  "%ld %s", r5.status, r5.body);
    qdp_resp_free(&r5);
    ck_assert_int_eq(count_entries(up), 0);
    r5 = qdp_req(&d, "GET", "/v1/jobs", NULL, NULL, 0, NULL);
    ck_assert_msg(strstr(r5.body, "\"jobs\":[]"), "%s", r5.body);
    qdp_resp_free(&r5);
    free(up);
    free(tmp);
    free(bad);
    qdp_stop(&d);
}
END_TEST

/* ---- jobs on the server's disk -----------------------------------------------------------------
 */

static long long post_path_job(qdp *d, const char *body, long status)
{
    qdp_resp r = qdp_req(d, "POST", "/v1/jobs", "application/json", body, strlen(body), NULL);
    ck_assert_msg(r.status == status, "POST %s: %ld %s", body, r.status, r.body);
    long long id = 0;
    if (status == 202) {
        json_t *j = qdp_json(&r);
        id = id_of(j);
        json_decref(j);
    }
    qdp_resp_free(&r);
    return id;
}

/* A one-file compressed-tensors job's outputs: the shard and config.json beside it, whose
 * quantization_config names compressed-tensors (and whose model_type, when `model_type` is not
 * NULL, is kept from the source's config.json). */
static void ct_file_config(qdp *d, json_t *job, const char *model_type)
{
    json_t *outs = json_object_get(job, "outputs");
    ck_assert_msg(json_array_size(outs) == 2, "%s", json_dumps(outs, 0));
    bool seen = false;
    for (size_t i = 0; i < json_array_size(outs); i++) {
        const char *name = json_string_value(json_object_get(json_array_get(outs, i), "name"));
        seen |= name && strcmp(name, "config.json") == 0;
    }
    ck_assert(seen);
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs/config.json", id_of(job));
    qdp_resp r = qdp_req(d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    json_t *cfg = qdp_json(&r);
    json_t *qc = json_object_get(cfg, "quantization_config");
    ck_assert_str_eq(json_string_value(json_object_get(qc, "quant_method")), "compressed-tensors");
    if (model_type)
        ck_assert_str_eq(json_string_value(json_object_get(cfg, "model_type")), model_type);
    json_decref(cfg);
    qdp_resp_free(&r);
}

START_TEST(test_path_jobs)
{
    char *src = qdt_tmpdir(), cmd[4096], body[4096];
    snprintf(cmd, sizeof cmd, "cp -r %s %s/stories", SHARDED, src);
    ck_assert_int_eq(system(cmd), 0);
    const char *extra[] = {"--source-root", src, NULL};
    qdp d;
    qdp_start(&d, extra);
    put_rules(&d, "int8", RULES);
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"%s/stories\"}}", src);
    long long id = post_path_job(&d, body, 202);
    json_t *j = qdp_wait_job(&d, id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    ck_assert_int_eq(json_array_size(json_object_get(j, "outputs")), 4); /* shards, index, config */
    json_decref(j);
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
    expect(&d, "GET", path, NULL, 409, "several_outputs");
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs/model-00002-of-00002.safetensors", id);
    expect(&d, "GET", path, NULL, 200, NULL);
    /* inline rules, compressed-tensors */
    snprintf(body, sizeof body,
             "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}],\"layout\":"
             "\"compressed-tensors\",\"source\":{\"path\":\"%s/stories/"
             "model-00002-of-00002.safetensors\"}}",
             src);
    j = qdp_wait_job(&d, post_path_job(&d, body, 202), 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    ct_file_config(&d, j, "llama"); /* the source's config.json, quantization_config added */
    json_decref(j);
    /* the same file uploaded: config.json made anew beside model.safetensors */
    qdp_resp r = qdp_upload(&d, "/v1/jobs?ruleset=int8&layout=compressed-tensors",
                            SHARDED "/model-00002-of-00002.safetensors");
    ck_assert_msg(r.status == 202, "%ld %s", r.status, r.body);
    j = qdp_json(&r);
    qdp_resp_free(&r);
    json_t *up = qdp_wait_job(&d, id_of(j), 60);
    json_decref(j);
    ck_assert_str_eq(json_string_value(json_object_get(up, "state")), "succeeded");
    ct_file_config(&d, up, NULL);
    json_decref(up);
    /* refusals */
    post_path_job(&d, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"" SHARDED "\"}}", 403);
    post_path_job(&d, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"/etc/passwd\"}}", 403);
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"%s/nope\"}}", src);
    post_path_job(&d, body, 422);
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"%s/../\"}}", src);
    post_path_job(&d, body, 403);
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"%s\"},\"x\":1}", src);
    post_path_job(&d, body, 400);
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"rules\":[],\"source\":{\"path\":\"%s\"}}",
             src);
    post_path_job(&d, body, 400);
    snprintf(body, sizeof body,
             "{\"rules\":[{\"tile_size\":0}],\"source\":{\"path\":\"%s/stories\"}}", src);
    post_path_job(&d, body, 422);
    snprintf(body, sizeof body,
             "{\"ruleset\":\"int8\",\"stats_model\":\"m\",\"source\":{\"path\":\"%s/stories\"}}",
             src);
    post_path_job(&d, body, 422);
    post_path_job(&d, "{\"ruleset\":\"int8\",\"source\":\"x\"}", 400);
    post_path_job(&d, "{\"ruleset\":\"int8\"}", 400);
    qdp_stop(&d);
    qdp_start(&d, NULL); /* no source root: server-side paths are refused */
    put_rules(&d, "int8", RULES);
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"%s/stories\"}}", src);
    post_path_job(&d, body, 403);
    qdp_stop(&d);
    kit_rmtree(src);
    free(src);
}
END_TEST

/* ---- cancel, restarts, concurrency -------------------------------------------------------------
 */

/* A big path job (1 GiB of F32) under root/src; returns its id. */
static long long big_job(qdp *d, const char *src, const char *name)
{
    char file[1024], body[2048];
    snprintf(file, sizeof file, "%s/%s", src, name);
    if (access(file, F_OK) != 0) qdt_make_big(file, 8, 8192);
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"%s\"}}", file);
    return post_path_job(d, body, 202);
}

static const char **with_root(const char *src, const char **buf)
{
    buf[0] = "--workers";
    buf[1] = "1";
    buf[2] = "--source-root";
    buf[3] = src;
    buf[4] = NULL;
    return buf;
}

START_TEST(test_cancel_running)
{
    char *src = qdt_tmpdir();
    const char *args[5];
    setenv("QUANTD_QUANT_THREADS", "1", 1);
    qdp d;
    qdp_start(&d, with_root(src, args));
    put_rules(&d, "int8", RULES);
    long long id = big_job(&d, src, "big.safetensors");
    json_decref(qdp_wait_state(&d, id, "running", 30));
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", id);
    qdp_resp r = qdp_req(&d, "DELETE", path, NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 202, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    json_t *j = qdp_wait_job(&d, id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "cancelled");
    json_decref(j);
    char *dir = kit_join(d.data_dir, "jobs/1");
    ck_assert_int_ne(access(dir, F_OK), 0); /* nothing published, nothing left */
    free(dir);
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
    expect(&d, "GET", path, NULL, 409, "not_ready");
    /* a queued job is cancelled at once */
    long long a = big_job(&d, src, "big.safetensors"), b = big_job(&d, src, "big.safetensors");
    snprintf(path, sizeof path, "/v1/jobs/%lld", b);
    r = qdp_req(&d, "DELETE", path, NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    j = qdp_json(&r);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "cancelled");
    json_decref(j);
    qdp_resp_free(&r);
    snprintf(path, sizeof path, "/v1/jobs/%lld", a);
    r = qdp_req(&d, "DELETE", path, NULL, NULL, 0, NULL);
    qdp_resp_free(&r);
    json_decref(qdp_wait_job(&d, a, 60));
    qdp_stop(&d);
    unsetenv("QUANTD_QUANT_THREADS");
    kit_rmtree(src);
    free(src);
}
END_TEST

START_TEST(test_restarts)
{
    char *src = qdt_tmpdir();
    const char *args[5];
    qdp d;
    qdp_start(&d, with_root(src, args));
    put_rules(&d, "int8", RULES);
    long long done = upload_job(&d, "int8", SHARD1);
    json_t *j = qdp_wait_job(&d, done, 60);
    const char *sha = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "sha256"));
    char etag[80];
    snprintf(etag, sizeof etag, "\"%s\"", sha);
    json_decref(j);
    /* graceful stop with one job running and one queued: exit 0, both run after the restart */
    long long b = big_job(&d, src, "big.safetensors"), c = big_job(&d, src, "big.safetensors");
    json_decref(qdp_wait_state(&d, b, "running", 30));
    ck_assert_int_eq(qdp_signal(&d, SIGTERM), 0);
    qdp_restart(&d, with_root(src, args));
    j = qdp_wait_job(&d, b, 120);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "attempts")), 1); /* not counted */
    json_decref(j);
    j = qdp_wait_job(&d, c, 120);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    json_decref(j);
    /* kill -9 while running: retried from the start, never served half-written */
    long long k = big_job(&d, src, "big.safetensors");
    json_decref(qdp_wait_state(&d, k, "running", 30));
    ck_assert_int_eq(qdp_signal(&d, SIGKILL), 128 + SIGKILL);
    qdp_restart(&d, with_root(src, args));
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", k);
    qdp_resp r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 409);
    qdp_resp_free(&r);
    j = qdp_wait_job(&d, k, 120);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "attempts")), 2);
    json_decref(j);
    /* the first job's output survived both restarts */
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", done);
    r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    char *tag = qdp_header(&r, "etag");
    ck_assert_str_eq(tag, etag);
    free(tag);
    qdp_resp_free(&r);
    qdp_stop(&d);
    kit_rmtree(src);
    free(src);
}
END_TEST

typedef struct upl {
    qdp *d;
    long long id;
} upl;

static void *upload_thread(void *arg)
{
    upl *u = arg;
    qdp_resp r = qdp_upload(u->d, "/v1/jobs?ruleset=int8", SHARD1);
    if (r.status == 202) {
        json_t *j = json_loadb(r.body, r.len, 0, NULL);
        u->id = (long long)json_integer_value(json_object_get(j, "id"));
        json_decref(j);
    }
    qdp_resp_free(&r);
    return NULL;
}

START_TEST(test_concurrent_uploads)
{
    qdp d;
    const char *extra[] = {"--workers", "2", NULL};
    qdp_start(&d, extra);
    put_rules(&d, "int8", RULES);
    enum { N = 6 };
    pthread_t t[N];
    upl u[N];
    for (int i = 0; i < N; i++) {
        u[i] = (upl){&d, 0};
        ck_assert_int_eq(pthread_create(&t[i], NULL, upload_thread, &u[i]), 0);
    }
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    const char *first = NULL;
    json_t *jobs[N];
    for (int i = 0; i < N; i++) {
        ck_assert_int_gt(u[i].id, 0);
        for (int k = 0; k < i; k++) ck_assert_int_ne(u[i].id, u[k].id);
        jobs[i] = qdp_wait_job(&d, u[i].id, 120);
        ck_assert_str_eq(json_string_value(json_object_get(jobs[i], "state")), "succeeded");
        const char *sha = json_string_value(
            json_object_get(json_array_get(json_object_get(jobs[i], "outputs"), 0), "sha256"));
        if (!first) first = sha;
        ck_assert_str_eq(sha, first); /* same input, same rules: the same bytes */
    }
    for (int i = 0; i < N; i++) json_decref(jobs[i]);
    qdp_resp r = qdp_req(&d, "GET", "/v1/jobs?state=succeeded&limit=4", NULL, NULL, 0, NULL);
    json_t *page = qdp_json(&r);
    ck_assert_int_eq(json_array_size(json_object_get(page, "jobs")), 4);
    long long next = (long long)json_integer_value(json_object_get(page, "next_after"));
    json_decref(page);
    qdp_resp_free(&r);
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs?state=succeeded&limit=4&after=%lld", next);
    r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    page = qdp_json(&r);
    ck_assert_int_eq(json_array_size(json_object_get(page, "jobs")), 2);
    ck_assert(json_is_null(json_object_get(page, "next_after")));
    json_decref(page);
    qdp_resp_free(&r);
    r = qdp_req(&d, "GET", "/metrics", NULL, NULL, 0, NULL);
    ck_assert_ptr_nonnull(strstr(r.body, "quantd_jobs{state=\"succeeded\"} 6"));
    ck_assert_ptr_null(strstr(r.body, "quantd_upload_bytes_total 0\n"));
    qdp_resp_free(&r);
    qdp_stop(&d);
}
END_TEST

/* ---- the command line, and signals ------------------------------------------------------------
 */

static int run_quantd(const char *args, char *out, size_t len)
{
    const char *bin = getenv("QUANTD_BIN") ? getenv("QUANTD_BIN") : "build/bin/quantd";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", bin, args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

START_TEST(test_commands_and_signals)
{
    char out[8192], args[2048];
    ck_assert_int_eq(run_quantd("--version", out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "quantd "));
    ck_assert_int_eq(run_quantd("--help", out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "--source-root"));
    ck_assert_int_eq(run_quantd("--config /dev/null --workers 0", out, sizeof out), 2);
    ck_assert_ptr_nonnull(strstr(out, "--workers"));
    ck_assert_int_eq(run_quantd("--config /dev/null --bogus", out, sizeof out), 2);
    char *dir = qdt_tmpdir();
    snprintf(args, sizeof args, "migrate --config /dev/null --data-dir %s/var", dir);
    ck_assert_int_eq(run_quantd(args, out, sizeof out), 0);
    char want[64];
    snprintf(want, sizeof want, "schema version %d", qd_store_migration_count());
    ck_assert_msg(strstr(out, want) != NULL, "%s", out);
    snprintf(args, sizeof args, "check-config --config /dev/null --data-dir %s/var", dir);
    ck_assert_int_eq(run_quantd(args, out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "[server]"));
    kit_rmtree(dir);
    free(dir);
    /* SIGHUP reloads and keeps serving; SIGINT stops like SIGTERM */
    qdp d;
    qdp_start(&d, NULL);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    expect(&d, "GET", "/healthz", NULL, 200, NULL);
    ck_assert_int_eq(qdp_signal(&d, SIGINT), 0);
    qdp_stop(&d);
}
END_TEST

/* A job whose rules quantize nothing is refused at creation (422 invalid_job, naming the rule
 * and what it probably meant), an upload and a path job alike, unless the rule set or the job
 * allows it; GET of a rule set shows the flag. */
START_TEST(test_nothing_quantized)
{
    char *src = qdt_tmpdir(), cmd[4096], body[4096];
    snprintf(cmd, sizeof cmd, "cp -r %s %s/stories", SHARDED, src);
    ck_assert_int_eq(system(cmd), 0);
    const char *extra[] = {"--source-root", src, NULL};
    qdp d;
    qdp_start(&d, extra);
    put_rules(&d, "bare", "{\"rules\":[{\"module_path\":\"q_proj\",\"weight_qtype\":\"int8\"}]}");
    qdp_resp r = qdp_upload(&d, "/v1/jobs?ruleset=bare", SHARD1);
    ck_assert_msg(r.status == 422 && strstr(r.body, "\"invalid_job\"") &&
                      strstr(r.body, "nothing to quantize") &&
                      strstr(r.body, "rule 0 (module_path \\\"q_proj\\\") matches no tensor: did "
                                     "you mean '.*q_proj'?"),
                  "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    snprintf(body, sizeof body, "{\"ruleset\":\"bare\",\"source\":{\"path\":\"%s/stories\"}}", src);
    r = qdp_req(&d, "POST", "/v1/jobs", "application/json", body, strlen(body), NULL);
    ck_assert_msg(r.status == 422 && strstr(r.body, "did you mean '.*q_proj'?"), "%ld %s", r.status,
                  r.body);
    qdp_resp_free(&r);
    /* the job allows it: accepted, and it copies */
    snprintf(body, sizeof body,
             "{\"ruleset\":\"bare\",\"allow_nothing_quantized\":true,\"source\":{\"path\":"
             "\"%s/stories\"}}",
             src);
    r = qdp_req(&d, "POST", "/v1/jobs", "application/json", body, strlen(body), NULL);
    ck_assert_msg(r.status == 202, "%ld %s", r.status, r.body);
    json_t *j = qdp_json(&r);
    qdp_resp_free(&r);
    json_t *done = qdp_wait_job(&d, id_of(j), 60);
    ck_assert_str_eq(json_string_value(json_object_get(done, "state")), "succeeded");
    json_decref(done);
    json_decref(j);
    expect(&d, "POST", "/v1/jobs",
           "{\"ruleset\":\"bare\",\"allow_nothing_quantized\":1,\"source\":{\"path\":\"/x\"}}", 400,
           "invalid");
    /* the rule set allows it: an upload is accepted; GET shows the flag */
    put_rules(&d, "bare",
              "{\"allow_nothing_quantized\":true,\"rules\":[{\"module_path\":\"q_proj\","
              "\"weight_qtype\":\"int8\"}]}");
    r = qdp_req(&d, "GET", "/v1/rulesets/bare", NULL, NULL, 0, NULL);
    ck_assert_msg(strstr(r.body, "\"allow_nothing_quantized\":true"), "%s", r.body);
    qdp_resp_free(&r);
    r = qdp_upload(&d, "/v1/jobs?ruleset=bare", SHARD1);
    ck_assert_msg(r.status == 202, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    qdp_stop(&d);
    kit_rmtree(src);
    free(src);
}
END_TEST

Suite *suite_api(void)
{
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("daemon");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_health_and_routing);
    tcase_add_test(tc, test_commands_and_signals);
    tcase_add_test(tc, test_rulesets);
    tcase_add_test(tc, test_upload_round_trip);
    tcase_add_test(tc, test_bad_uploads);
    tcase_add_test(tc, test_path_jobs);
    tcase_add_test(tc, test_nothing_quantized);
    tcase_add_test(tc, test_cancel_running);
    tcase_add_test(tc, test_restarts);
    tcase_add_test(tc, test_concurrent_uploads);
    suite_add_tcase(s, tc);
    return s;
}
