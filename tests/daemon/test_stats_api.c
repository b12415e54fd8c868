/* test_stats_api.c -- the stats_api suite: calibration statistics through the real quantd over
 * HTTP. Posts in JSON and safetensors (F32, BF16) read back with Qwix's averaging (one update
 * returns the value, 1 then 3 average to 2, nested shapes, scalars), merges of quant_stats
 * dumps, every malformed post refused with 400 naming the activation and nothing stored, shape
 * and kind conflicts (409) leaving counts unchanged, unknown models, the ?name= filter, EMA and
 * bootstrap settings against hand-computed values, SRQ scales and zero points per SPEC section 4
 * (?qtype= and ?ruleset=), concurrent posters ending with the exact count, durability across
 * kill -9, resets, and body limits; Idempotency-Keys (replays answered alike with
 * Idempotent-Replayed, conflicts, the window, racing retries, kill -9, bad keys answered before
 * the body, failed posts not recorded) and the per-model quota (507, stats_bytes); the importance
 * statistic mean_sq (SPEC section 9) in every post form, averaged exactly, its key set fixed by
 * the first post (409), bad values (400), across kill -9. The parsers' own test case
 * (test_stats_parse.c) runs here too.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"
#include "quant_srq.h"
#include "stats_testutil.h"

/* ---- helpers ----------------------------------------------------------------------------------
 */

/* ctype NULL: no Content-Type at all (libcurl would send a form type of its own). */
static qdp_resp post(qdp *d, const char *model, const char *query, const char *ctype,
                     const void *body, size_t len)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/models/%s/stats%s", model, query ? query : "");
    return qdp_req(d, "POST", path, ctype, body, len, ctype ? NULL : "Content-Type:");
}

static qdp_resp post_json(qdp *d, const char *model, const char *query, const char *body)
{
    return post(d, model, query, "application/json", body, strlen(body));
}

/* Posts and expects 200; returns the reply. */
static json_t *post_ok(qdp *d, const char *model, const char *query, const char *body)
{
    qdp_resp r = post_json(d, model, query, body);
    ck_assert_msg(r.status == 200, "POST %s: %ld %s (body %s)", model, r.status, r.body, body);
    json_t *doc = qdp_json(&r);
    qdp_resp_free(&r);
    return doc;
}

static void post_ok_quiet(qdp *d, const char *model, const char *body)
{
    json_decref(post_ok(d, model, NULL, body));
}

/* The reply is status with error code `code` and a message containing `in_message`. */
static void assert_error(qdp_resp *r, long status, const char *code, const char *in_message)
{
    ck_assert_msg(r->status == status, "%ld, wanted %ld: %s", r->status, status, r->body);
    json_t *doc = qdp_json(r);
    json_t *e = json_object_get(doc, "error");
    const char *got = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    ck_assert_msg(got && strcmp(got, code) == 0, "code %s, wanted %s (%s)", got, code, r->body);
    ck_assert_msg(msg && (!in_message || strstr(msg, in_message)), "message \"%s\" lacks \"%s\"",
                  msg, in_message);
    json_decref(doc);
    qdp_resp_free(r);
}

static void expect(qdp *d, const char *method, const char *path, long status, const char *code)
{
    qdp_resp r = qdp_req(d, method, path, NULL, NULL, 0, NULL);
    if (code) {
        assert_error(&r, status, code, NULL);
    } else {
        ck_assert_msg(r.status == status, "%s %s: %ld %s", method, path, r.status, r.body);
        qdp_resp_free(&r);
    }
}

static json_t *get_json(qdp *d, const char *path)
{
    qdp_resp r = qdp_req(d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "GET %s: %ld %s", path, r.status, r.body);
    json_t *doc = qdp_json(&r);
    qdp_resp_free(&r);
    return doc;
}

static json_t *get_stats(qdp *d, const char *model, const char *query)
{
    char path[512];
    snprintf(path, sizeof path, "/v1/models/%s/stats%s", model, query ? query : "");
    return get_json(d, path);
}

/* One activation of a GET .../stats document (borrowed), or NULL. */
static json_t *act(json_t *doc, const char *name)
{
    return json_object_get(json_object_get(doc, "stats"), name);
}

/* The activation's count, 0 when it is not stored. */
static long long count_of(qdp *d, const char *model, const char *name)
{
    json_t *doc = get_stats(d, model, NULL);
    long long n = (long long)json_integer_value(json_object_get(act(doc, name), "count"));
    json_decref(doc);
    return n;
}

static double num(json_t *v)
{
    ck_assert_msg(json_is_number(v), "not a number");
    return json_number_value(v);
}

/* list[i][j] of a rank-2 nested list. */
static double at2(json_t *list, size_t i, size_t j)
{
    return num(json_array_get(json_array_get(list, i), j));
}

static void assert_close(double got, double want)
{
    ck_assert_msg(fabs(got - want) <= 1e-12 * fmax(1, fabs(want)), "%.17g != %.17g", got, want);
}

/* ---- posts and reads --------------------------------------------------------------------------
 */

START_TEST(test_updates_and_readback)
{
    qdp d;
    qdp_start(&d, NULL);
    json_t *reply = post_ok(&d, "m-1", NULL,
                            "{\"step\": 1200, \"stats\": {\"layers/0/mlp/dot_general0_lhs\": "
                            "{\"absmax\": [[1, 2, 3], [4, 5, 6]]}, \"s\": {\"absmax\": 1}, "
                            "\"mm\": {\"min\": [-1, -2], \"max\": [3, 4]}}}");
    ck_assert_str_eq(json_string_value(json_object_get(reply, "model")), "m-1");
    ck_assert_int_eq(json_integer_value(json_object_get(reply, "activations")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(reply, "step")), 1200);
    json_decref(reply);
    /* one update returns the value */
    json_t *doc = get_stats(&d, "m-1", NULL);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "model")), "m-1");
    ck_assert_str_eq(json_string_value(json_object_get(doc, "averaging")), "simple");
    json_t *a = act(doc, "layers/0/mlp/dot_general0_lhs");
    ck_assert_int_eq(json_integer_value(json_object_get(a, "count")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(a, "kind")), "absmax");
    json_t *shape = json_object_get(a, "shape");
    ck_assert_int_eq(json_array_size(shape), 2);
    ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), 2);
    ck_assert_int_eq(json_integer_value(json_array_get(shape, 1)), 3);
    ck_assert(at2(json_object_get(a, "absmax"), 1, 2) == 6);
    ck_assert(at2(json_object_get(a, "sum_of_absmax"), 0, 1) == 2);
    ck_assert(json_is_false(json_object_get(a, "bootstrapping")));
    ck_assert(json_is_string(json_object_get(a, "updated_at")));
    json_t *s = act(doc, "s");
    ck_assert_int_eq(json_array_size(json_object_get(s, "shape")), 0);
    ck_assert(num(json_object_get(s, "absmax")) == 1); /* a scalar stays a bare number */
    json_t *mm = act(doc, "mm");
    ck_assert_str_eq(json_string_value(json_object_get(mm, "kind")), "minmax");
    ck_assert(num(json_array_get(json_object_get(mm, "min"), 1)) == -2);
    ck_assert(num(json_array_get(json_object_get(mm, "max"), 0)) == 3);
    ck_assert_ptr_nonnull(json_object_get(mm, "sum_of_min"));
    ck_assert_ptr_null(json_object_get(mm, "absmax"));
    json_decref(doc);
    /* 1 then 3 average to 2 (per element) */
    post_ok_quiet(&d, "m-1",
                  "{\"stats\": {\"layers/0/mlp/dot_general0_lhs\": {\"absmax\": [[3, 4, 5], "
                  "[6, 7, 8]]}, \"s\": {\"absmax\": 3}, \"mm\": {\"min\": [-3, 0], \"max\": "
                  "[5, 4]}}}");
    doc = get_stats(&d, "m-1", NULL);
    a = act(doc, "layers/0/mlp/dot_general0_lhs");
    ck_assert_int_eq(json_integer_value(json_object_get(a, "count")), 2);
    ck_assert(at2(json_object_get(a, "absmax"), 0, 0) == 2);
    ck_assert(at2(json_object_get(a, "absmax"), 1, 2) == 7);
    ck_assert(at2(json_object_get(a, "sum_of_absmax"), 1, 2) == 14);
    ck_assert(num(json_object_get(act(doc, "s"), "absmax")) == 2);
    ck_assert(num(json_array_get(json_object_get(act(doc, "mm"), "min"), 0)) == -2);
    ck_assert(num(json_array_get(json_object_get(act(doc, "mm"), "min"), 1)) == -1);
    ck_assert(num(json_array_get(json_object_get(act(doc, "mm"), "max"), 0)) == 4);
    json_decref(doc);
    /* ?name= is a full match */
    doc = get_stats(&d, "m-1", "?name=layers/.*");
    ck_assert_int_eq(json_object_size(json_object_get(doc, "stats")), 1);
    json_decref(doc);
    doc = get_stats(&d, "m-1", "?name=layers");
    ck_assert_int_eq(json_object_size(json_object_get(doc, "stats")), 0);
    json_decref(doc);
    doc = get_stats(&d, "m-1", "?name=s%7Cmm"); /* s|mm */
    ck_assert_int_eq(json_object_size(json_object_get(doc, "stats")), 2);
    json_decref(doc);
    expect(&d, "GET", "/v1/models/m-1/stats?name=%28", 400, "invalid");
    /* the model list and the model */
    doc = get_json(&d, "/v1/models");
    json_t *m = json_array_get(json_object_get(doc, "models"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(m, "name")), "m-1");
    ck_assert_int_eq(json_integer_value(json_object_get(m, "activations")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "posts")), 2);
    ck_assert(json_is_string(json_object_get(m, "updated_at")));
    json_decref(doc);
    doc = get_json(&d, "/v1/models/m-1");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "posts")), 2);
    json_decref(doc);
    qdp_stop(&d);
}
END_TEST

/* The same statistics as JSON, as F32 safetensors and as BF16 safetensors read back alike. */
START_TEST(test_binary_posts)
{
    qdp d;
    qdp_start(&d, NULL);
    static const float v[6] = {1, 2.5, 3, 0.25, 1024, 0.5};
    float lo[2] = {-1.5f, -2}, hi[2] = {3, 0.75f};
    uint16_t *bf = stt_bf16(v, 6), *bf_lo = stt_bf16(lo, 2), *bf_hi = stt_bf16(hi, 2);
    kit_st_tensor f32[] = {{"layers/0/mlp/x/absmax", "F32", 2, {2, 3}, v, 24},
                           {"y/min", "F32", 1, {2}, lo, 8},
                           {"y/max", "F32", 1, {2}, hi, 8}};
    kit_st_tensor b16[] = {{"layers/0/mlp/x/absmax", "BF16", 2, {2, 3}, bf, 12},
                           {"y/min", "BF16", 1, {2}, bf_lo, 4},
                           {"y/max", "BF16", 1, {2}, bf_hi, 4}};
    size_t n1, n2;
    unsigned char *b1 = kit_st_build(f32, 3, NULL, &n1),
                  *b2 = kit_st_build(b16, 3, "{\"step\":\"9\"}", &n2);
    qdp_resp r = post(&d, "f32", "?step=7", "application/octet-stream", b1, n1);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    ck_assert_ptr_nonnull(strstr(r.body, "\"step\":7"));
    ck_assert_ptr_nonnull(strstr(r.body, "\"activations\":2"));
    qdp_resp_free(&r);
    r = post(&d, "bf16", NULL, "application/octet-stream", b2, n2);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    ck_assert_ptr_nonnull(strstr(r.body, "\"step\":9"));
    qdp_resp_free(&r);
    /* the step twice (metadata and query) */
    r = post(&d, "bf16", "?step=9", "application/octet-stream", b2, n2);
    assert_error(&r, 400, "invalid", "step");
    post_ok_quiet(&d, "json",
                  "{\"stats\":{\"layers/0/mlp/x\":{\"absmax\":[[1,2.5,3],[0.25,1024,0.5]]},"
                  "\"y\":{\"min\":[-1.5,-2],\"max\":[3,0.75]}}}");
    json_t *want = get_stats(&d, "json", NULL);
    const char *models[] = {"f32", "bf16"};
    for (int k = 0; k < 2; k++) {
        json_t *got = get_stats(&d, models[k], NULL);
        const char *names[] = {"layers/0/mlp/x", "y"};
        for (int i = 0; i < 2; i++) {
            json_t *g = act(got, names[i]), *w = act(want, names[i]);
            ck_assert_ptr_nonnull(g);
            json_object_del(g, "updated_at");
            json_object_del(w, "updated_at");
            ck_assert_msg(json_equal(g, w), "%s %s differs from JSON", models[k], names[i]);
        }
        json_decref(got);
    }
    json_decref(want);
    /* a binary post that is not valid safetensors, and one with a bad tensor */
    r = post(&d, "f32", NULL, "application/octet-stream", b1, n1 - 1);
    assert_error(&r, 400, "invalid_stats", "safetensors body: ");
    kit_st_tensor bad = {"x/mean", "F32", 1, {2}, lo, 8};
    size_t nb;
    unsigned char *b3 = kit_st_build(&bad, 1, NULL, &nb);
    r = post(&d, "f32", NULL, "application/octet-stream", b3, nb);
    assert_error(&r, 400, "invalid_stats", "activation 'x': tensor 'x/mean': unknown statistic");
    ck_assert_int_eq(count_of(&d, "f32", "y"), 1);
    /* merges are JSON dumps */
    r = post(&d, "f32", "?mode=merge", "application/octet-stream", b1, n1);
    assert_error(&r, 415, "unsupported_media_type", "mode=merge");
    free(b1);
    free(b2);
    free(b3);
    free(bf);
    free(bf_lo);
    free(bf_hi);
    qdp_stop(&d);
}
END_TEST

START_TEST(test_merge)
{
    qdp d;
    qdp_start(&d, NULL);
    /* two hosts' dumps: counts and sums add up */
    json_t *reply = post_ok(&d, "q", "?mode=merge",
                            "{\"stats\":{\"a\":{\"count\":4,\"sum_of_absmax\":[8,4]},"
                            "\"b\":{\"count\":2,\"sum_of_min\":-2,\"sum_of_max\":6}}}");
    ck_assert_int_eq(json_integer_value(json_object_get(reply, "activations")), 2);
    ck_assert(json_is_null(json_object_get(reply, "step")));
    json_decref(reply);
    json_decref(post_ok(&d, "q", "?mode=merge",
                        "{\"stats\":{\"a\":{\"count\":1,\"sum_of_absmax\":[7,1]}}}"));
    json_t *doc = get_stats(&d, "q", NULL);
    json_t *a = act(doc, "a");
    ck_assert_int_eq(json_integer_value(json_object_get(a, "count")), 5);
    ck_assert(num(json_array_get(json_object_get(a, "sum_of_absmax"), 0)) == 15);
    ck_assert(num(json_array_get(json_object_get(a, "absmax"), 0)) == 3);
    ck_assert(num(json_array_get(json_object_get(a, "absmax"), 1)) == 1);
    json_t *b = act(doc, "b");
    ck_assert(num(json_object_get(b, "min")) == -1);
    ck_assert(num(json_object_get(b, "max")) == 3);
    json_decref(doc);
    /* a plain update after a merge: one more in the count */
    post_ok_quiet(&d, "q", "{\"stats\":{\"a\":{\"absmax\":[3,7]}}}");
    doc = get_stats(&d, "q", NULL);
    a = act(doc, "a");
    ck_assert_int_eq(json_integer_value(json_object_get(a, "count")), 6);
    ck_assert(num(json_array_get(json_object_get(a, "sum_of_absmax"), 1)) == 12);
    ck_assert(num(json_array_get(json_object_get(a, "absmax"), 0)) == 3); /* 18 / 6 */
    ck_assert(num(json_array_get(json_object_get(a, "absmax"), 1)) == 2); /* 12 / 6 */
    json_decref(doc);
    /* a dump's keys in an update, an update's keys in a dump, a bad mode */
    qdp_resp r =
        post_json(&d, "q", NULL, "{\"stats\":{\"a\":{\"count\":1,\"sum_of_absmax\":[1,1]}}}");
    assert_error(&r, 400, "invalid_stats", "activation 'a': unknown key \"count\"");
    r = post_json(&d, "q", "?mode=merge", "{\"stats\":{\"a\":{\"absmax\":[1,1]}}}");
    assert_error(&r, 400, "invalid_stats", "activation 'a': unknown key \"absmax\"");
    r = post_json(&d, "q", "?mode=sum", "{\"stats\":{\"a\":{\"absmax\":[1,1]}}}");
    assert_error(&r, 400, "invalid", "mode");
    ck_assert_int_eq(count_of(&d, "q", "a"), 6);
    qdp_stop(&d);
}
END_TEST

/* Every malformed post: 400 naming the activation, and nothing of it stored. */
START_TEST(test_malformed_rejected)
{
    qdp d;
    qdp_start(&d, NULL);
    post_ok_quiet(&d, "m", "{\"stats\":{\"good\":{\"absmax\":[1,2]},\"bad\":{\"absmax\":[1,2]}}}");
    static const struct {
        const char *body, *want;
    } cases[] = {
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]},\"bad\":{\"absmax\":[[1,2],[3]]}}}",
         "activation 'bad': absmax is ragged"},
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]},\"bad\":{\"absmax\":[1,\"x\"]}}}",
         "activation 'bad': absmax must be a number"},
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]},\"bad\":{\"absmax\":[1,NaN]}}}",
         "activation 'bad': absmax holds NaN"},
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]},\"bad\":{\"absmax\":[1,1e400]}}}",
         "activation 'bad': absmax holds 1e400"},
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]},\"bad\":{\"absmax\":[]}}}",
         "activation 'bad': absmax holds an empty list"},
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]},\"bad\":{\"absmax\":[1,2],\"p99\":[1,2]}}}",
         "activation 'bad': unknown key \"p99\""},
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]},\"bad\":{\"absmax\":[1,2],\"min\":[0,0],"
         "\"max\":[1,1]}}}",
         "activation 'bad': has both absmax and min/max"},
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]},\"bad\":{\"min\":[1,2]}}}",
         "activation 'bad': has min without max"},
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]},\"bad\":{\"min\":[1,2],\"max\":[1,2,3]}}}",
         "activation 'bad': min has shape [2] but max has shape [3]"},
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]},\"bad\":{\"absmax\":[2,-1]}}}",
         "activation 'bad': absmax element 1 is -1; an absolute maximum is >= 0"},
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]},\"bad\":{\"min\":[3,0],\"max\":[-3,1]}}}",
         "activation 'bad': min element 0 is 3 but max element 0 is -3"},
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]}},\"extra\":1}", "unknown field \"extra\""},
        {"{\"stats\":{\"good\":{\"absmax\":[1,2]}}", "the body is not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qdp_resp r = post_json(&d, "m", NULL, cases[i].body);
        assert_error(&r, 400, "invalid_stats", cases[i].want);
    }
    ck_assert_int_eq(count_of(&d, "m", "good"), 1);
    ck_assert_int_eq(count_of(&d, "m", "bad"), 1);
    /* the request around the body */
    qdp_resp r = post(&d, "m", NULL, "text/plain", "x", 1);
    assert_error(&r, 415, "unsupported_media_type", "text/plain");
    r = post_json(&d, ".m", NULL, "{\"stats\":{\"a\":{\"absmax\":1}}}");
    assert_error(&r, 400, "invalid", "model names");
    r = post_json(&d, "m", "?step=-1", "{\"stats\":{\"a\":{\"absmax\":1}}}");
    assert_error(&r, 400, "invalid", "step");
    r = post_json(&d, "m", "?step=2", "{\"step\":2,\"stats\":{\"a\":{\"absmax\":1}}}");
    assert_error(&r, 400, "invalid", "the step comes both");
    r = post(&d, "m", NULL, NULL, "", 0);
    assert_error(&r, 400, "invalid_stats", "the body must be a JSON object");
    json_t *doc = get_json(&d, "/v1/models/m");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "posts")), 1);
    json_decref(doc);
    /* a post without Content-Type is read as JSON, with the step in the query */
    const char *plain = "{\"stats\":{\"good\":{\"absmax\":[3,4]}}}";
    r = post(&d, "m", "?step=5", NULL, plain, strlen(plain));
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    ck_assert_ptr_nonnull(strstr(r.body, "\"step\":5"));
    qdp_resp_free(&r);
    ck_assert_int_eq(count_of(&d, "m", "good"), 2);
    qdp_stop(&d);
}
END_TEST

/* What is stored decides shapes and kinds: a post that differs is 409 and stores nothing. */
START_TEST(test_conflicts)
{
    qdp d;
    qdp_start(&d, NULL);
    post_ok_quiet(&d, "c", "{\"stats\":{\"a\":{\"absmax\":[1,2]},\"m\":{\"min\":0,\"max\":1}}}");
    static const char *const bodies[] = {
        "{\"stats\":{\"a\":{\"absmax\":[1,2,3]}}}",
        "{\"stats\":{\"a\":{\"absmax\":[[1,2]]}}}",
        "{\"stats\":{\"a\":{\"absmax\":1}}}",
        "{\"stats\":{\"a\":{\"min\":[1,2],\"max\":[1,2]}}}",
        "{\"stats\":{\"m\":{\"absmax\":1}}}",
        /* the good part of a post goes with its bad part */
        ("{\"stats\":{\"new\":{\"absmax\":1},\"a\":{\"absmax\":[1,2]},"
         "\"m\":{\"min\":[0],\"max\":[1]}}}"),
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        qdp_resp r = post_json(&d, "c", NULL, bodies[i]);
        assert_error(&r, 409, "conflict", "activation ");
    }
    ck_assert_int_eq(count_of(&d, "c", "a"), 1);
    ck_assert_int_eq(count_of(&d, "c", "m"), 1);
    ck_assert_int_eq(count_of(&d, "c", "new"), 0);
    /* a merge is held to the same shapes */
    qdp_resp r = post_json(&d, "c", "?mode=merge",
                           "{\"stats\":{\"a\":{\"count\":2,\"sum_of_absmax\":[1,2,3]}}}");
    assert_error(&r, 409, "conflict", "activation ");
    ck_assert_int_eq(count_of(&d, "c", "a"), 1);
    qdp_stop(&d);
}
END_TEST

START_TEST(test_models_and_unknown)
{
    qdp d;
    qdp_start(&d, NULL);
    json_t *doc = get_json(&d, "/v1/models");
    ck_assert_int_eq(json_array_size(json_object_get(doc, "models")), 0);
    json_decref(doc);
    expect(&d, "GET", "/v1/models/nope", 404, "not_found");
    expect(&d, "GET", "/v1/models/nope/stats", 404, "not_found");
    expect(&d, "DELETE", "/v1/models/nope/stats", 404, "not_found");
    expect(&d, "GET", "/v1/models/nope/scales?qtype=int8", 404, "not_found");
    expect(&d, "GET", "/v1/models/.x/stats", 400, "invalid");
    expect(&d, "PATCH", "/v1/models/x/stats", 405, NULL);
    expect(&d, "DELETE", "/v1/models", 405, NULL);
    /* PUT creates (201) then replaces (200); an empty body means the defaults */
    const char *conf = "{\"averaging\":\"ema\",\"ema_constant\":0.25,\"bootstrap_steps\":3}";
    qdp_resp r = qdp_req(&d, "PUT", "/v1/models/m", "application/json", conf, strlen(conf), NULL);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    doc = qdp_json(&r);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "averaging")), "ema");
    ck_assert(num(json_object_get(doc, "ema_constant")) == 0.25);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "bootstrap_steps")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "activations")), 0);
    json_decref(doc);
    qdp_resp_free(&r);
    r = qdp_req(&d, "PUT", "/v1/models/m", NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    ck_assert_ptr_nonnull(strstr(r.body, "\"averaging\":\"simple\""));
    qdp_resp_free(&r);
    static const struct {
        const char *body, *field;
    } bad[] = {
        {"{\"averaging\":\"median\"}", "averaging"},
        {"{\"averaging\":1}", "averaging"},
        {"{\"ema_constant\":0}", "ema_constant"},
        {"{\"ema_constant\":1.5}", "ema_constant"},
        {"{\"ema_constant\":\"0.1\"}", "ema_constant"},
        {"{\"bootstrap_steps\":-1}", "bootstrap_steps"},
        {"{\"bootstrap_steps\":1.5}", "bootstrap_steps"},
        {"{\"averagin\":\"ema\"}", "averagin"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = qdp_req(&d, "PUT", "/v1/models/m", "application/json", bad[i].body, strlen(bad[i].body),
                    NULL);
        ck_assert_msg(r.status == 400, "%s: %ld", bad[i].body, r.status);
        doc = qdp_json(&r);
        ck_assert_str_eq(json_string_value(json_object_get(json_object_get(doc, "error"), "field")),
                         bad[i].field);
        json_decref(doc);
        qdp_resp_free(&r);
    }
    r = qdp_req(&d, "PUT", "/v1/models/m", "application/json", "[1]", 3, NULL);
    assert_error(&r, 400, "bad_json", NULL);
    expect(&d, "PUT", "/v1/models/.m", 400, "invalid");
    /* a model that exists without statistics */
    doc = get_stats(&d, "m", NULL);
    ck_assert_int_eq(json_object_size(json_object_get(doc, "stats")), 0);
    json_decref(doc);
    doc = get_json(&d, "/v1/models");
    ck_assert_int_eq(json_array_size(json_object_get(doc, "models")), 1);
    ck_assert(json_is_null(
        json_object_get(json_array_get(json_object_get(doc, "models"), 0), "updated_at")));
    json_decref(doc);
    qdp_stop(&d);
}
END_TEST

/* DELETE .../stats resets the statistics; the settings stay. */
START_TEST(test_delete_resets)
{
    qdp d;
    qdp_start(&d, NULL);
    const char *conf = "{\"averaging\":\"ema\"}";
    qdp_resp r = qdp_req(&d, "PUT", "/v1/models/r", "application/json", conf, strlen(conf), NULL);
    ck_assert_int_eq(r.status, 201);
    qdp_resp_free(&r);
    post_ok_quiet(&d, "r", "{\"stats\":{\"a\":{\"absmax\":[1,2]}}}");
    post_ok_quiet(&d, "r", "{\"stats\":{\"a\":{\"absmax\":[1,2]}}}");
    ck_assert_int_eq(count_of(&d, "r", "a"), 2);
    expect(&d, "DELETE", "/v1/models/r/stats", 204, NULL);
    json_t *doc = get_stats(&d, "r", NULL);
    ck_assert_int_eq(json_object_size(json_object_get(doc, "stats")), 0);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "averaging")), "ema");
    json_decref(doc);
    doc = get_json(&d, "/v1/models/r");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "activations")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "posts")), 0);
    json_decref(doc);
    /* after a reset any shape is welcome again */
    post_ok_quiet(&d, "r", "{\"stats\":{\"a\":{\"absmax\":[1,2,3]}}}");
    ck_assert_int_eq(count_of(&d, "r", "a"), 1);
    qdp_stop(&d);
}
END_TEST

/* ---- averaging settings -----------------------------------------------------------------------
 */

static double absmax0(qdp *d, const char *model, bool *bootstrapping)
{
    json_t *doc = get_stats(d, model, NULL);
    json_t *a = act(doc, "a");
    double v = num(json_array_get(json_object_get(a, "absmax"), 0));
    if (bootstrapping) *bootstrapping = json_is_true(json_object_get(a, "bootstrapping"));
    json_decref(doc);
    return v;
}

static void post_value(qdp *d, const char *model, double v)
{
    char body[128];
    snprintf(body, sizeof body, "{\"stats\":{\"a\":{\"absmax\":[%.17g]}}}", v);
    post_ok_quiet(d, model, body);
}

START_TEST(test_ema_and_bootstrap)
{
    qdp d;
    qdp_start(&d, NULL);
    const char *ema = "{\"averaging\":\"ema\",\"ema_constant\":0.25}";
    qdp_resp r = qdp_req(&d, "PUT", "/v1/models/e", "application/json", ema, strlen(ema), NULL);
    ck_assert_int_eq(r.status, 201);
    qdp_resp_free(&r);
    /* v1 = x1; v = v + c (x - v): 4 -> 4 + 0.25 (8 - 4) = 5 -> 5 + 0.25 (1 - 5) = 4 ->
     * 4 + 0.25 (10 - 4) = 5.5 */
    static const double xs[] = {4, 8, 1, 10}, want[] = {4, 5, 4, 5.5};
    for (int i = 0; i < 4; i++) {
        post_value(&d, "e", xs[i]);
        assert_close(absmax0(&d, "e", NULL), want[i]);
    }
    json_t *doc = get_stats(&d, "e", NULL);
    ck_assert(num(json_array_get(json_object_get(act(doc, "a"), "sum_of_absmax"), 0)) == 23);
    ck_assert_int_eq(json_integer_value(json_object_get(act(doc, "a"), "count")), 4);
    json_decref(doc);
    /* bootstrap_steps 2: the last post while count <= 2, then the average */
    const char *boot = "{\"bootstrap_steps\":2}";
    r = qdp_req(&d, "PUT", "/v1/models/b", "application/json", boot, strlen(boot), NULL);
    ck_assert_int_eq(r.status, 201);
    qdp_resp_free(&r);
    bool bs;
    post_value(&d, "b", 1);
    ck_assert(absmax0(&d, "b", &bs) == 1 && bs);
    post_value(&d, "b", 3);
    ck_assert(absmax0(&d, "b", &bs) == 3 && bs);
    post_value(&d, "b", 5);
    ck_assert(absmax0(&d, "b", &bs) == 3 && !bs);
    post_value(&d, "b", 11);
    ck_assert(absmax0(&d, "b", &bs) == 5 && !bs);
    qdp_stop(&d);
}
END_TEST

/* ---- the importance statistic mean_sq (SPEC section 9) ---------------------------------------
 */

/* list[i] of a flat list. */
static double at1(json_t *list, size_t i)
{
    return num(json_array_get(list, i));
}

/* Activation name's mean_sq average must be want[0..n), its sum sum[0..n), exactly. */
static void expect_sq(qdp *d, const char *model, const char *name, long long count,
                      const double *want, const double *sum, size_t n)
{
    json_t *doc = get_stats(d, model, NULL);
    json_t *a = act(doc, name);
    ck_assert_msg(a != NULL, "%s not stored", name);
    ck_assert_int_eq(json_integer_value(json_object_get(a, "count")), count);
    json_t *sq = json_object_get(a, "mean_sq"), *ss = json_object_get(a, "sum_of_mean_sq");
    ck_assert_uint_eq(json_array_size(sq), n);
    ck_assert_uint_eq(json_array_size(ss), n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(at1(sq, i) == want[i], "%s mean_sq[%zu] %.17g != %.17g", name, i, at1(sq, i),
                      want[i]);
        ck_assert_msg(at1(ss, i) == sum[i], "%s sum_of_mean_sq[%zu] %.17g != %.17g", name, i,
                      at1(ss, i), sum[i]);
    }
    json_decref(doc);
}

/* mean_sq in each post form (JSON update, safetensors, merge), read back with its keys; the
 * simple average exactly; mean_sq alone (kind "none", no shape, skipped by the scales). */
START_TEST(test_mean_sq_posts)
{
    qdp d;
    qdp_start(&d, NULL);
    post_ok_quiet(&d, "q",
                  "{\"stats\":{\"l/0/x\":{\"absmax\":[[1,2]],\"mean_sq\":[0.5,1,2,4]},"
                  "\"l/1/y\":{\"mean_sq\":[3,0]}}}");
    post_ok_quiet(&d, "q",
                  "{\"stats\":{\"l/0/x\":{\"absmax\":[[3,4]],\"mean_sq\":[1.5,1,0,4]},"
                  "\"l/1/y\":{\"mean_sq\":[1,1]}}}");
    json_t *doc = get_stats(&d, "q", NULL);
    json_t *x = act(doc, "l/0/x"), *y = act(doc, "l/1/y");
    ck_assert_str_eq(json_string_value(json_object_get(x, "kind")), "absmax");
    ck_assert(at2(json_object_get(x, "absmax"), 0, 1) == 3);
    ck_assert_str_eq(json_string_value(json_object_get(y, "kind")), "none");
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(y, "shape"), 0)), 2);
    ck_assert_uint_eq(json_array_size(json_object_get(y, "shape")), 1);
    ck_assert_ptr_null(json_object_get(y, "absmax"));
    /* the document is what the library's statistics reader takes (quant quantize --stats) */
    char *text = json_dumps(doc, JSON_COMPACT);
    quant_stats *qs = NULL;
    quant_ck_error qe;
    ck_assert_msg(quant_stats_parse(text, strlen(text), "stats.json", &qs, &qe) == QUANT_CK_OK,
                  "%s", qe.message);
    size_t n_acts = 0;
    const quant_act_stat *acts = quant_stats_acts(qs, &n_acts);
    ck_assert_uint_eq(n_acts, 2);
    ck_assert(acts[0].kind == QUANT_STAT_ABSMAX && acts[0].a[1] == 3 && acts[0].count == 2);
    ck_assert(acts[1].kind == QUANT_STAT_NONE && acts[1].count == 2);
    quant_stats_free(qs);
    free(text);
    json_decref(doc);
    expect_sq(&d, "q", "l/0/x", 2, (const double[]){1, 1, 1, 4}, (const double[]){2, 2, 2, 8}, 4);
    expect_sq(&d, "q", "l/1/y", 2, (const double[]){2, 0.5}, (const double[]){4, 1}, 2);
    /* the same in safetensors (F32 and BF16): the same statistics */
    static const float xa[2][2] = {{1, 2}, {3, 4}}, xq[2][4] = {{0.5f, 1, 2, 4}, {1.5f, 1, 0, 4}},
                       yq[2][2] = {{3, 0}, {1, 1}};
    for (int k = 0; k < 2; k++) {
        uint16_t *bq = stt_bf16(yq[k], 2);
        kit_st_tensor t[] = {{"l/0/x/absmax", "F32", 2, {1, 2}, xa[k], 8},
                             {"l/0/x/mean_sq", "F32", 1, {4}, xq[k], 16},
                             {"l/1/y/mean_sq", "BF16", 1, {2}, bq, 4}};
        size_t len;
        unsigned char *body = kit_st_build(t, 3, NULL, &len);
        qdp_resp r = post(&d, "st", NULL, "application/octet-stream", body, len);
        ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
        qdp_resp_free(&r);
        free(body);
        free(bq);
    }
    json_t *want = get_stats(&d, "q", NULL), *got = get_stats(&d, "st", NULL);
    const char *names[] = {"l/0/x", "l/1/y"};
    for (int i = 0; i < 2; i++) {
        json_t *g = act(got, names[i]), *w = act(want, names[i]);
        json_object_del(g, "updated_at");
        json_object_del(w, "updated_at");
        ck_assert_msg(json_equal(g, w), "safetensors %s differs from JSON", names[i]);
    }
    json_decref(want);
    json_decref(got);
    /* a merge adds counts and sums */
    json_decref(post_ok(&d, "q", "?mode=merge",
                        "{\"stats\":{\"l/0/x\":{\"count\":2,\"sum_of_absmax\":[[4,4]],"
                        "\"sum_of_mean_sq\":[2,0,4,0]},\"l/1/y\":{\"count\":4,"
                        "\"sum_of_mean_sq\":[4,7]}}}"));
    expect_sq(&d, "q", "l/0/x", 4, (const double[]){1, 0.5, 1.5, 2}, (const double[]){4, 2, 6, 8},
              4);
    expect_sq(&d, "q", "l/1/y", 6, (const double[]){8.0 / 6, 8.0 / 6}, (const double[]){8, 8}, 2);
    /* the quota counts 8 bytes per value of every sum: 2 + 4 + 2 */
    doc = get_json(&d, "/v1/models/q");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "stats_bytes")), 64);
    json_decref(doc);
    /* static scales: x has absmax; y has no range to scale and is skipped */
    doc = get_json(&d, "/v1/models/q/scales?qtype=int8");
    ck_assert_ptr_nonnull(json_object_get(json_object_get(doc, "scales"), "l/0/x"));
    json_t *skipped = json_object_get(doc, "skipped");
    ck_assert_uint_eq(json_array_size(skipped), 1);
    ck_assert_str_eq(json_string_value(json_array_get(skipped, 0)), "l/1/y");
    json_decref(doc);
    qdp_stop(&d);
}
END_TEST

/* EMA (c = 0.25) and bootstrap on mean_sq exactly as on absmax; kill -9 loses nothing answered. */
START_TEST(test_mean_sq_ema_and_kill)
{
    qdp d;
    qdp_start(&d, NULL);
    const char *ema = "{\"averaging\":\"ema\",\"ema_constant\":0.25,\"bootstrap_steps\":1}";
    qdp_resp r = qdp_req(&d, "PUT", "/v1/models/e", "application/json", ema, strlen(ema), NULL);
    ck_assert_int_eq(r.status, 201);
    qdp_resp_free(&r);
    /* 4 -> (bootstrapping: the last) -> 4 + 0.25 (8 - 4) = 5 -> 5 + 0.25 (1 - 5) = 4 */
    static const double xs[] = {4, 8, 1}, want[] = {4, 5, 4};
    double sum = 0;
    for (int i = 0; i < 3; i++) {
        char body[160];
        snprintf(body, sizeof body, "{\"stats\":{\"a\":{\"mean_sq\":[%g,%g]}}}", xs[i], 2 * xs[i]);
        post_ok_quiet(&d, "e", body);
        sum += xs[i];
        expect_sq(&d, "e", "a", i + 1, (const double[]){want[i], 2 * want[i]},
                  (const double[]){sum, 2 * sum}, 2);
        json_t *doc = get_stats(&d, "e", NULL);
        ck_assert_int_eq(json_is_true(json_object_get(act(doc, "a"), "bootstrapping")), i == 0);
        json_decref(doc);
    }
    ck_assert_int_eq(qdp_signal(&d, SIGKILL), 128 + SIGKILL);
    qdp_restart(&d, NULL);
    expect_sq(&d, "e", "a", 3, (const double[]){4, 8}, (const double[]){13, 26}, 2);
    post_ok_quiet(&d, "e", "{\"stats\":{\"a\":{\"mean_sq\":[8,0]}}}"); /* 4 + 0.25 (8 - 4) */
    expect_sq(&d, "e", "a", 4, (const double[]){5, 6}, (const double[]){21, 26}, 2);
    qdp_stop(&d);
}
END_TEST

/* The key set is fixed by the first post: another one is 409 naming the activation and the key,
 * nothing of the post applied; bad values and lengths are 400 naming the activation. */
START_TEST(test_mean_sq_rejected)
{
    qdp d;
    qdp_start(&d, NULL);
    post_ok_quiet(&d, "k",
                  "{\"stats\":{\"both\":{\"absmax\":[1,2],\"mean_sq\":[1,2]},"
                  "\"plain\":{\"absmax\":[1,2]},\"alone\":{\"mean_sq\":[1]}}}");
    static const struct {
        const char *query, *body, *want;
    } conflicts[] = {
        {NULL, "{\"stats\":{\"new\":{\"absmax\":1},\"both\":{\"absmax\":[1,2]}}}",
         "activation both: its statistics are {absmax, mean_sq}, fixed by its first post; the post "
         "has {absmax} (without mean_sq)"},
        {NULL, "{\"stats\":{\"plain\":{\"absmax\":[1,2],\"mean_sq\":[1,1]}}}",
         "activation plain: its statistics are {absmax}, fixed by its first post; the post has "
         "{absmax, mean_sq} (with mean_sq)"},
        {NULL, "{\"stats\":{\"alone\":{\"absmax\":[1],\"mean_sq\":[1]}}}",
         "activation alone: its statistics are {mean_sq}"},
        {NULL, "{\"stats\":{\"both\":{\"absmax\":[1,2],\"mean_sq\":[1,2,3,4]}}}",
         "activation both: mean_sq has 4 values, the stored one 2"},
        {"?mode=merge",
         "{\"stats\":{\"new\":{\"count\":1,\"sum_of_mean_sq\":[1]},"
         "\"both\":{\"count\":3,\"sum_of_mean_sq\":[1,2]}}}",
         "activation both: its statistics are {absmax, mean_sq}, fixed by its first post; the "
         "post has {mean_sq} (without absmax)"},
    };
    for (size_t i = 0; i < sizeof conflicts / sizeof conflicts[0]; i++) {
        qdp_resp r = post_json(&d, "k", conflicts[i].query, conflicts[i].body);
        assert_error(&r, 409, "conflict", conflicts[i].want);
    }
    static const struct {
        const char *body, *want;
    } bad[] = {
        {"{\"stats\":{\"new\":{\"absmax\":1},\"both\":{\"absmax\":[1,2],\"mean_sq\":[1,-2]}}}",
         "activation 'both': mean_sq value 1 is -2; a mean of squares is >= 0"},
        {"{\"stats\":{\"both\":{\"absmax\":[1,2],\"mean_sq\":[NaN,2]}}}",
         "activation 'both': mean_sq holds NaN"},
        {"{\"stats\":{\"both\":{\"absmax\":[1,2],\"mean_sq\":[[1,2]]}}}",
         "activation 'both': mean_sq has shape [1, 2]"},
        {"{\"stats\":{\"both\":{\"absmax\":[1,2],\"mean_sq\":[1,2,3]}}}",
         "activation 'both': mean_sq has 3 values (input features) but absmax has shape [2]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qdp_resp r = post_json(&d, "k", NULL, bad[i].body);
        assert_error(&r, 400, "invalid_stats", bad[i].want);
    }
    kit_st_tensor t = {"both/mean_sq", "F32", 1, {2}, (const float[]){1, -1}, 8};
    size_t len;
    unsigned char *body = kit_st_build(&t, 1, NULL, &len);
    qdp_resp r = post(&d, "k", NULL, "application/octet-stream", body, len);
    assert_error(&r, 400, "invalid_stats", "activation 'both': mean_sq value 1 is -1");
    free(body);
    ck_assert_int_eq(count_of(&d, "k", "both"), 1);
    ck_assert_int_eq(count_of(&d, "k", "plain"), 1);
    ck_assert_int_eq(count_of(&d, "k", "alone"), 1);
    ck_assert_int_eq(count_of(&d, "k", "new"), 0);
    expect_sq(&d, "k", "both", 1, (const double[]){1, 2}, (const double[]){1, 2}, 2);
    /* a reset starts over */
    expect(&d, "DELETE", "/v1/models/k/stats", 204, NULL);
    post_ok_quiet(&d, "k", "{\"stats\":{\"both\":{\"absmax\":[1,2]}}}");
    ck_assert_int_eq(count_of(&d, "k", "both"), 1);
    qdp_stop(&d);
}
END_TEST

/* ---- scales -----------------------------------------------------------------------------------
 */

static json_t *scale_of(json_t *doc, const char *name)
{
    json_t *s = json_object_get(json_object_get(doc, "scales"), name);
    ck_assert_msg(s != NULL, "no scale for %s", name);
    return s;
}

static void assert_float(double got, float want)
{
    ck_assert_msg(got == (double)want, "%.9g != %.9g", got, (double)want);
}

START_TEST(test_scales)
{
    qdp d;
    qdp_start(&d, NULL);
    /* averaged: absmax [127.5, 255, 0, 10] and min/max (-1, 3), (0.5, 2) */
    post_ok_quiet(&d, "s",
                  "{\"stats\":{\"layers/0/mlp/x\":{\"absmax\":[[100,255],[0,4]]},"
                  "\"layers/1/attn/y\":{\"min\":[-2,1],\"max\":[2,2]},\"other\":{\"absmax\":1}}}");
    post_ok_quiet(&d, "s",
                  "{\"stats\":{\"layers/0/mlp/x\":{\"absmax\":[[155,255],[0,16]]},"
                  "\"layers/1/attn/y\":{\"min\":[0,0],\"max\":[4,2]},\"other\":{\"absmax\":3}}}");
    json_t *doc = get_json(&d, "/v1/models/s/scales?qtype=int8");
    /* SPEC 4, int8: symmetric scale = absmax / 127.5 (1 when below sqrt(FLT_MIN)) */
    json_t *x = scale_of(doc, "layers/0/mlp/x");
    ck_assert_str_eq(json_string_value(json_object_get(x, "qtype")), "int8");
    ck_assert(json_is_null(json_object_get(x, "zero_point")));
    ck_assert(json_is_null(json_object_get(x, "rule")));
    ck_assert_int_eq(json_integer_value(json_object_get(x, "count")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(x, "tensor_base")), "layers.0.mlp.x");
    json_t *sc = json_object_get(x, "scale");
    assert_float(at2(sc, 0, 0), 1.0f);
    assert_float(at2(sc, 0, 1), 2.0f);
    assert_float(at2(sc, 1, 0), 1.0f); /* absmax 0: scale 1 */
    assert_float(at2(sc, 1, 1), 10.0f / 127.5f);
    /* asymmetric: scale = (max - min) / 255, zero_point = convert(-128 - min / scale) */
    json_t *y = scale_of(doc, "layers/1/attn/y");
    float s0 = (3.0f - -1.0f) / 255.0f; /* min -1, max 3 */
    float s1 = (2.0f - 0.0f) / 255.0f;  /* min 0.5 widened to 0 */
    assert_float(num(json_array_get(json_object_get(y, "scale"), 0)), s0);
    assert_float(num(json_array_get(json_object_get(y, "scale"), 1)), s1);
    json_t *zp = json_object_get(y, "zero_point");
    ck_assert_int_eq(json_integer_value(json_array_get(zp, 0)), -64); /* -128 + 63.75, to even */
    ck_assert_int_eq(json_integer_value(json_array_get(zp, 1)), -128);
    json_t *o = scale_of(doc, "other");
    assert_float(num(json_object_get(o, "scale")), 2.0f / 127.5f);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "skipped")), 0);
    json_decref(doc);
    /* uint8 on the min/max: [0, 255], zero_point = convert(0 - min / scale) */
    doc = get_json(&d, "/v1/models/s/scales?qtype=uint8&name=layers/1/.*");
    ck_assert_int_eq(json_object_size(json_object_get(doc, "scales")), 1);
    y = scale_of(doc, "layers/1/attn/y");
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(y, "zero_point"), 0)), 64);
    json_decref(doc);
    /* with a rule set: the first rule matching the module path gives act_qtype */
    const char *rules =
        "{\"rules\":[{\"module_path\":\"layers\\\\.0\\\\..*\",\"act_qtype\":\"int4\","
        "\"act_static_scale\":true},{\"module_path\":\"layers\\\\.1\\\\..*\","
        "\"weight_qtype\":\"int8\"},{\"module_path\":\".*\",\"act_qtype\":\"int8\"}]}";
    qdp_resp r =
        qdp_req(&d, "PUT", "/v1/rulesets/srq", "application/json", rules, strlen(rules), NULL);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    doc = get_json(&d, "/v1/models/s/scales?ruleset=srq");
    x = scale_of(doc, "layers/0/mlp/x");
    ck_assert_str_eq(json_string_value(json_object_get(x, "qtype")), "int4");
    ck_assert_int_eq(json_integer_value(json_object_get(x, "rule")), 0);
    assert_float(at2(json_object_get(x, "scale"), 0, 0), 127.5f / 7.5f);
    o = scale_of(doc, "other"); /* module path "" matches ".*" */
    ck_assert_int_eq(json_integer_value(json_object_get(o, "rule")), 2);
    json_t *skipped = json_object_get(doc, "skipped");
    ck_assert_int_eq(json_array_size(skipped), 1); /* rule 1 has no act_qtype */
    ck_assert_str_eq(json_string_value(json_array_get(skipped, 0)), "layers/1/attn/y");
    json_decref(doc);
    doc = get_json(&d, "/v1/models/s/scales?ruleset=srq&static_only=true");
    ck_assert_int_eq(json_object_size(json_object_get(doc, "scales")), 1);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "skipped")), 2);
    json_decref(doc);
    /* errors */
    expect(&d, "GET", "/v1/models/s/scales", 400, "invalid");
    expect(&d, "GET", "/v1/models/s/scales?qtype=int8&ruleset=srq", 400, "invalid");
    expect(&d, "GET", "/v1/models/s/scales?qtype=int9", 400, "invalid");
    expect(&d, "GET", "/v1/models/s/scales?qtype=int8&static_only=yes", 400, "invalid");
    expect(&d, "GET", "/v1/models/s/scales?ruleset=none", 422, "unknown_ruleset");
    expect(&d, "GET", "/v1/models/s/scales?qtype=int8&name=%28", 400, "invalid");
    r = qdp_req(&d, "GET", "/v1/models/s/scales?qtype=nf4", NULL, NULL, 0, NULL);
    assert_error(&r, 422, "invalid_scales", "layers/1/attn/y"); /* min/max is asymmetric */
    qdp_stop(&d);
}
END_TEST

/* ---- concurrency, durability, limits ----------------------------------------------------------
 */

typedef struct poster {
    qdp *d;
    int id, posts, failures;
} poster;

static void *poster_thread(void *arg)
{
    poster *p = arg;
    char body[256];
    for (int i = 0; i < p->posts; i++) {
        snprintf(body, sizeof body,
                 "{\"step\":%d,\"stats\":{\"shared\":{\"absmax\":[1,%d]},\"own%d\":{\"min\":-1,"
                 "\"max\":%d}}}",
                 i, i, p->id, i);
        qdp_resp r = post_json(p->d, "conc", NULL, body);
        if (r.status != 200) p->failures++;
        qdp_resp_free(&r);
    }
    return NULL;
}

/* Large statistics posts in a loop must not starve the job store's writers: they share the
 * database file, and a write that waited past SQLite's busy timeout would be a 500. */
typedef struct big_poster {
    qdp *d;
    const unsigned char *body;
    size_t len;
    atomic_int *stop;
    int posts, failures;
} big_poster;

static void *big_poster_thread(void *arg)
{
    big_poster *p = arg;
    while (!atomic_load(p->stop)) {
        qdp_resp r = post(p->d, "load", NULL, "application/octet-stream", p->body, p->len);
        if (r.status == 200)
            p->posts++;
        else
            p->failures++;
        qdp_resp_free(&r);
    }
    return NULL;
}

START_TEST(test_writers_take_turns)
{
    enum { ACTS = 64, N = 4096, THREADS = 4 };
    static float v[N];
    for (int i = 0; i < N; i++) v[i] = (float)(i % 97) * 0.01f;
    kit_st_tensor t[ACTS];
    char names[ACTS][32];
    for (int a = 0; a < ACTS; a++) {
        snprintf(names[a], sizeof names[a], "layers/%d/x/absmax", a);
        t[a] = (kit_st_tensor){names[a], "F32", 1, {N}, v, sizeof v};
    }
    size_t len;
    unsigned char *body = kit_st_build(t, ACTS, NULL, &len);
    qdp d;
    qdp_start(&d, NULL);
    atomic_int stop;
    atomic_init(&stop, 0);
    pthread_t th[THREADS];
    big_poster p[THREADS];
    for (int i = 0; i < THREADS; i++) {
        p[i] = (big_poster){&d, body, len, &stop, 0, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, big_poster_thread, &p[i]), 0);
    }
    for (int k = 0; k < 12; k++) {
        char path[64];
        snprintf(path, sizeof path, "/v1/rulesets/r%d", k);
        const char *rules = "{\"rules\":[]}";
        qdp_resp r = qdp_req(&d, "PUT", path, "application/json", rules, strlen(rules), NULL);
        ck_assert_msg(r.status == 201, "PUT %s while statistics pour in: %ld %s", path, r.status,
                      r.body);
        qdp_resp_free(&r);
    }
    atomic_store(&stop, 1);
    int posts = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(p[i].failures, 0);
        posts += p[i].posts;
    }
    ck_assert_int_gt(posts, 0);
    free(body);
    qdp_stop(&d);
}
END_TEST

START_TEST(test_concurrent_posters)
{
    qdp d;
    qdp_start(&d, NULL);
    enum { THREADS = 8, POSTS = 50 };
    pthread_t t[THREADS];
    poster p[THREADS];
    for (int i = 0; i < THREADS; i++) {
        p[i] = (poster){&d, i, POSTS, 0};
        ck_assert_int_eq(pthread_create(&t[i], NULL, poster_thread, &p[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++) ck_assert_int_eq(p[i].failures, 0);
    json_t *doc = get_stats(&d, "conc", NULL);
    json_t *shared = act(doc, "shared");
    ck_assert_int_eq(json_integer_value(json_object_get(shared, "count")), THREADS * POSTS);
    /* sum of i over 0..49, eight times */
    ck_assert(num(json_array_get(json_object_get(shared, "sum_of_absmax"), 1)) ==
              THREADS * (POSTS * (POSTS - 1) / 2));
    ck_assert(num(json_array_get(json_object_get(shared, "sum_of_absmax"), 0)) == THREADS * POSTS);
    for (int i = 0; i < THREADS; i++) {
        char name[16];
        snprintf(name, sizeof name, "own%d", i);
        ck_assert_int_eq(json_integer_value(json_object_get(act(doc, name), "count")), POSTS);
    }
    json_decref(doc);
    doc = get_json(&d, "/v1/models/conc");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "posts")), THREADS * POSTS);
    json_decref(doc);
    qdp_stop(&d);
}
END_TEST

/* Every answered post survives kill -9. */
START_TEST(test_durability)
{
    qdp d;
    qdp_start(&d, NULL);
    enum { N = 25 };
    for (int i = 0; i < N; i++) post_value(&d, "dur", i + 1);
    ck_assert_int_eq(qdp_signal(&d, SIGKILL), 128 + SIGKILL);
    qdp_restart(&d, NULL);
    json_t *doc = get_stats(&d, "dur", NULL);
    json_t *a = act(doc, "a");
    ck_assert_int_eq(json_integer_value(json_object_get(a, "count")), N);
    ck_assert(num(json_array_get(json_object_get(a, "sum_of_absmax"), 0)) == N * (N + 1) / 2);
    json_decref(doc);
    post_value(&d, "dur", 1);
    ck_assert_int_eq(count_of(&d, "dur", "a"), N + 1);
    qdp_stop(&d);
}
END_TEST

/* Posters that keep going while quantd stops: errors are expected, not test failures. */
typedef struct stopper {
    const char *base;
    atomic_int *go;
    int sent, acked;
} stopper;

static size_t discard(char *p, size_t size, size_t n, void *user)
{
    (void)p;
    (void)user;
    return size * n;
}

static void *stopper_thread(void *arg)
{
    stopper *s = arg;
    CURL *c = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models/stop/stats", s->base);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    const char *body = "{\"stats\":{\"a\":{\"absmax\":[1,2]}}}";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    while (atomic_load(s->go)) {
        s->sent++;
        long status = 0;
        if (curl_easy_perform(c) != CURLE_OK) break; /* the daemon is gone */
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (status == 200) s->acked++;
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return NULL;
}

/* SIGTERM while posts are waiting for their commits: quantd resumes every suspended request
 * before it stops, exits 0, and every answered post is stored. */
START_TEST(test_stop_while_posting)
{
    qdp d;
    qdp_start(&d, NULL);
    enum { THREADS = 16 };
    atomic_int go = 1;
    pthread_t t[THREADS];
    stopper s[THREADS];
    for (int i = 0; i < THREADS; i++) {
        s[i] = (stopper){d.base, &go, 0, 0};
        ck_assert_int_eq(pthread_create(&t[i], NULL, stopper_thread, &s[i]), 0);
    }
    usleep(300 * 1000);
    ck_assert_int_eq(qdp_signal(&d, SIGTERM), 0);
    atomic_store(&go, 0);
    int sent = 0, acked = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        sent += s[i].sent;
        acked += s[i].acked;
    }
    ck_assert_int_gt(acked, 0);
    qdp_restart(&d, NULL);
    long long stored = count_of(&d, "stop", "a");
    ck_assert_msg(stored >= acked && stored <= sent, "stored %lld, answered %d, sent %d", stored,
                  acked, sent);
    qdp_stop(&d);
}
END_TEST

/* Statistics posts have their own limit: a binary post over max_json_body goes through (and a
 * JSON one); one over max_stats_body is 413 and stores nothing. */
START_TEST(test_body_limits)
{
    qdp d;
    const char *extra[] = {"--max-json-body", "4096", "--max-stats-body", "8M", NULL};
    qdp_start(&d, extra);
    enum { ACTS = 64, ELEMS = 4096 };
    float *v = malloc(ACTS * ELEMS * sizeof *v);
    for (int i = 0; i < ACTS * ELEMS; i++) v[i] = (float)(i % 1000) * 0.5f;
    kit_st_tensor t[ACTS];
    char names[ACTS][32];
    for (int i = 0; i < ACTS; i++) {
        snprintf(names[i], sizeof names[i], "layers/%d/x/absmax", i);
        t[i] = (kit_st_tensor){names[i], "F32", 2, {4, ELEMS / 4}, v + i * ELEMS, ELEMS * 4};
    }
    size_t len;
    unsigned char *body = kit_st_build(t, ACTS, NULL, &len);
    ck_assert_uint_gt(len, 1u << 20);
    qdp_resp r = post(&d, "big", NULL, "application/octet-stream", body, len);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    json_t *doc = get_stats(&d, "big", "?name=layers/63/x");
    json_t *a = act(doc, "layers/63/x");
    ck_assert_int_eq(json_integer_value(json_object_get(a, "count")), 1);
    ck_assert(at2(json_object_get(a, "absmax"), 3, 1023) == v[63 * ELEMS + ELEMS - 1]);
    json_decref(doc);
    free(body);
    /* a JSON post over max_json_body but within max_stats_body */
    char *json = malloc(64 + 20 * 2000);
    size_t at = (size_t)sprintf(json, "{\"stats\":{\"j\":{\"absmax\":[");
    for (int i = 0; i < 2000; i++) at += (size_t)sprintf(json + at, "%s%d.125", i ? "," : "", i);
    strcpy(json + at, "]}}}");
    ck_assert_uint_gt(strlen(json), 4096);
    json_decref(post_ok(&d, "big", NULL, json));
    free(json);
    /* over the limit (small, so that the unread body fits the socket buffers) */
    ck_assert_int_eq(qdp_signal(&d, SIGTERM), 0);
    const char *small[] = {"--max-stats-body", "64K", NULL};
    qdp_restart(&d, small);
    kit_st_tensor huge = {"h/absmax", "F32", 1, {20000}, NULL, 80000};
    void *zeros = calloc(1, huge.nbytes);
    huge.data = zeros;
    body = kit_st_build(&huge, 1, NULL, &len);
    r = post(&d, "big", NULL, "application/octet-stream", body, len);
    assert_error(&r, 413, "too_large", NULL);
    ck_assert_int_eq(count_of(&d, "big", "h"), 0);
    free(body);
    free(zeros);
    free(v);
    qdp_stop(&d);
}
END_TEST

/* ---- Idempotency-Keys -------------------------------------------------------------------------
 */

/* A post with the header line `header` (e.g. "Idempotency-Key: K"). */
static qdp_resp post_with(qdp *d, const char *model, const char *query, const char *ctype,
                          const void *body, size_t len, const char *header)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/models/%s/stats%s", model, query ? query : "");
    return qdp_req(d, "POST", path, ctype, body, len, header);
}

/* A JSON post with Idempotency-Key: key. */
static qdp_resp post_key(qdp *d, const char *model, const char *query, const char *body,
                         const char *key)
{
    char h[512];
    snprintf(h, sizeof h, "Idempotency-Key: %s", key);
    return post_with(d, model, query, "application/json", body, strlen(body), h);
}

static bool was_replayed(const qdp_resp *r)
{
    char *v = qdp_header(r, "idempotent-replayed");
    bool yes = v && strcmp(v, "true") == 0;
    free(v);
    return yes;
}

/* Posts with the key, expects 200 and whether it was a replay; returns the body (malloc'd). */
static char *post_key_ok(qdp *d, const char *model, const char *query, const char *body,
                         const char *key, bool replay)
{
    qdp_resp r = post_key(d, model, query, body, key);
    ck_assert_msg(r.status == 200, "POST %s key %s: %ld %s", model, key, r.status, r.body);
    ck_assert_msg(was_replayed(&r) == replay, "key %s: replayed %d, wanted %d", key,
                  was_replayed(&r), replay);
    char *text = strdup(r.body);
    qdp_resp_free(&r);
    return text;
}

static long long model_int(qdp *d, const char *model, const char *field)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s", model);
    json_t *doc = get_json(d, path);
    long long v = (long long)json_integer_value(json_object_get(doc, field));
    json_decref(doc);
    return v;
}

/* Runs sql on quantd's database (another writer: it waits its turn). */
static void db_exec(qdp *d, const char *sql)
{
    char *path = kit_join(d->data_dir, "quantd.db");
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    char *msg = NULL;
    ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK, "%s: %s", sql, msg);
    sqlite3_close(db);
    free(path);
}

/* The same key and body again: the first answer, byte for byte, with Idempotent-Replayed, and
 * nothing counted twice (JSON, safetensors and merges alike); keys are per model. */
START_TEST(test_idem_replay)
{
    qdp d;
    qdp_start(&d, NULL);
    const char *body = "{\"step\":12,\"stats\":{\"a\":{\"absmax\":[1,2]},\"b\":{\"absmax\":3}}}";
    char *first = post_key_ok(&d, "m", NULL, body, "run-7-12", false);
    char *again = post_key_ok(&d, "m", NULL, body, "run-7-12", true);
    ck_assert_str_eq(again, first);
    ck_assert_str_eq(first, "{\"model\":\"m\",\"activations\":2,\"step\":12}");
    free(again);
    free(first);
    ck_assert_int_eq(count_of(&d, "m", "a"), 1);
    ck_assert_int_eq(model_int(&d, "m", "posts"), 1);
    /* a new key is a new post; the same key on another model too */
    free(post_key_ok(&d, "m", NULL, body, "run-7-13", false));
    free(post_key_ok(&d, "other", NULL, body, "run-7-12", false));
    ck_assert_int_eq(count_of(&d, "m", "a"), 2);
    /* the step from the query is part of the answer kept */
    const char *nostep = "{\"stats\":{\"a\":{\"absmax\":[1,2]}}}";
    first = post_key_ok(&d, "m", "?step=5", nostep, "q5", false);
    again = post_key_ok(&d, "m", "?step=5", nostep, "q5", true);
    ck_assert_str_eq(again, "{\"model\":\"m\",\"activations\":1,\"step\":5}");
    ck_assert_str_eq(again, first);
    free(again);
    free(first);
    /* a merge, and a safetensors post */
    const char *dump = "{\"stats\":{\"a\":{\"count\":2,\"sum_of_absmax\":[2,4]}}}";
    free(post_key_ok(&d, "m", "?mode=merge", dump, "merge-1", false));
    free(post_key_ok(&d, "m", "?mode=merge", dump, "merge-1", true));
    ck_assert_int_eq(count_of(&d, "m", "a"), 5);
    static const float v[2] = {1, 2};
    kit_st_tensor t = {"a/absmax", "F32", 1, {2}, v, 8};
    size_t len;
    unsigned char *bin = kit_st_build(&t, 1, "{\"step\":\"9\"}", &len);
    for (int k = 0; k < 2; k++) {
        qdp_resp r =
            post_with(&d, "m", NULL, "application/octet-stream", bin, len, "Idempotency-Key: st-9");
        ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
        ck_assert_int_eq(was_replayed(&r), k == 1);
        ck_assert_str_eq(r.body, "{\"model\":\"m\",\"activations\":1,\"step\":9}");
        qdp_resp_free(&r);
    }
    free(bin);
    ck_assert_int_eq(count_of(&d, "m", "a"), 6);
    ck_assert_int_eq(model_int(&d, "m", "posts"), 5);
    /* /metrics counts the replays */
    qdp_resp r = qdp_req(&d, "GET", "/metrics", NULL, NULL, 0, NULL);
    ck_assert_ptr_nonnull(strstr(r.body, "\nquantd_stats_replays_total 4\n"));
    qdp_resp_free(&r);
    qdp_stop(&d);
}
END_TEST

/* The key of a post with another post (body, step, mode or media type): 409 naming the key,
 * nothing stored. */
START_TEST(test_idem_conflict)
{
    qdp d;
    qdp_start(&d, NULL);
    const char *body = "{\"stats\":{\"a\":{\"absmax\":[1,2]}}}";
    free(post_key_ok(&d, "m", NULL, body, "k-1", false));
    qdp_resp r = post_key(&d, "m", NULL, "{\"stats\":{\"a\":{\"absmax\":[1,3]}}}", "k-1");
    ck_assert_msg(r.status == 409, "%ld %s", r.status, r.body);
    json_t *doc = qdp_json(&r);
    json_t *e = json_object_get(doc, "error");
    ck_assert_str_eq(json_string_value(json_object_get(e, "field")), "Idempotency-Key");
    ck_assert_msg(!was_replayed(&r), "a conflict is no replay");
    json_decref(doc);
    assert_error(&r, 409, "idempotency_conflict", "Idempotency-Key 'k-1' was used");
    r = post_key(&d, "m", "?step=3", body, "k-1");
    assert_error(&r, 409, "idempotency_conflict", "for a different post at 20");
    r = post_key(&d, "m", "?mode=merge",
                 "{\"stats\":{\"a\":{\"count\":1,\"sum_of_absmax\":[1,2]}}}", "k-1");
    assert_error(&r, 409, "idempotency_conflict", "k-1");
    /* a valid safetensors post under a key a JSON post took */
    static const float v[2] = {1, 2};
    kit_st_tensor t = {"a/absmax", "F32", 1, {2}, v, 8};
    size_t len;
    unsigned char *bin = kit_st_build(&t, 1, NULL, &len);
    r = post_with(&d, "m", NULL, "application/octet-stream", bin, len, "Idempotency-Key: k-1");
    assert_error(&r, 409, "idempotency_conflict", "k-1");
    free(bin);
    ck_assert_int_eq(count_of(&d, "m", "a"), 1);
    ck_assert_int_eq(model_int(&d, "m", "posts"), 1);
    /* the original post is still a replay */
    free(post_key_ok(&d, "m", NULL, body, "k-1", true));
    qdp_stop(&d);
}
END_TEST

/* A key is remembered for --idempotency-window (60 s here): 59 s later a retry is a replay, 61 s
 * later the key is free again (the row's age is changed in the database, not waited for). */
START_TEST(test_idem_window)
{
    qdp d;
    const char *extra[] = {"--idempotency-window", "60", NULL};
    qdp_start(&d, extra);
    const char *body = "{\"stats\":{\"a\":{\"absmax\":[1,2]}}}";
    free(post_key_ok(&d, "w", NULL, body, "k", false));
    db_exec(&d, "UPDATE stat_post_keys SET created_ms = created_ms - 59000");
    free(post_key_ok(&d, "w", NULL, body, "k", true));
    db_exec(&d, "UPDATE stat_post_keys SET created_ms = created_ms - 2000");
    free(post_key_ok(&d, "w", NULL, body, "k", false));
    ck_assert_int_eq(count_of(&d, "w", "a"), 2);
    /* the key now stands for the second post */
    free(post_key_ok(&d, "w", NULL, body, "k", true));
    ck_assert_int_eq(count_of(&d, "w", "a"), 2);
    qdp_stop(&d);
}
END_TEST

typedef struct key_poster {
    qdp *d;
    pthread_barrier_t *go;
    int rounds;
    atomic_int *stored; /* per round: posts answered as stored (not replayed) */
    int failures;
} key_poster;

static void *key_poster_thread(void *arg)
{
    key_poster *p = arg;
    const char *body = "{\"stats\":{\"a\":{\"absmax\":[1,2]},\"b\":{\"min\":-1,\"max\":1}}}";
    for (int i = 0; i < p->rounds; i++) {
        char key[32];
        snprintf(key, sizeof key, "round-%d", i);
        pthread_barrier_wait(p->go);
        qdp_resp r = post_key(p->d, "conc", NULL, body, key);
        if (r.status != 200 || !strstr(r.body, "\"activations\":2"))
            p->failures++;
        else if (!was_replayed(&r))
            atomic_fetch_add(&p->stored[i], 1);
        qdp_resp_free(&r);
    }
    return NULL;
}

/* Posts with one key sent at once by several threads (a retry racing its original): each key
 * counts once, every answer is 200, all but one of them replays. */
START_TEST(test_idem_concurrent)
{
    enum { THREADS = 8, ROUNDS = 10 };
    qdp d;
    qdp_start(&d, NULL);
    pthread_barrier_t go;
    ck_assert_int_eq(pthread_barrier_init(&go, NULL, THREADS), 0);
    atomic_int stored[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) atomic_init(&stored[i], 0);
    pthread_t t[THREADS];
    key_poster p[THREADS];
    for (int i = 0; i < THREADS; i++) {
        p[i] = (key_poster){&d, &go, ROUNDS, stored, 0};
        ck_assert_int_eq(pthread_create(&t[i], NULL, key_poster_thread, &p[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(p[i].failures, 0);
    }
    pthread_barrier_destroy(&go);
    for (int i = 0; i < ROUNDS; i++)
        ck_assert_msg(atomic_load(&stored[i]) == 1, "round %d stored %d times", i,
                      atomic_load(&stored[i]));
    ck_assert_int_eq(count_of(&d, "conc", "a"), ROUNDS);
    ck_assert_int_eq(count_of(&d, "conc", "b"), ROUNDS);
    ck_assert_int_eq(model_int(&d, "conc", "posts"), ROUNDS);
    qdp_stop(&d);
}
END_TEST

/* A post answered, then kill -9: its key was committed with it, so the retry after the restart
 * is a replay and the post counts once. */
START_TEST(test_idem_kill9)
{
    qdp d;
    qdp_start(&d, NULL);
    const char *body = "{\"step\":3,\"stats\":{\"a\":{\"absmax\":[1,2]}}}";
    char *first = post_key_ok(&d, "k9", NULL, body, "job-1-3", false);
    ck_assert_int_eq(qdp_signal(&d, SIGKILL), 128 + SIGKILL);
    qdp_restart(&d, NULL);
    char *again = post_key_ok(&d, "k9", NULL, body, "job-1-3", true);
    ck_assert_str_eq(again, first);
    free(first);
    free(again);
    ck_assert_int_eq(count_of(&d, "k9", "a"), 1);
    free(post_key_ok(&d, "k9", NULL, body, "job-1-4", false));
    ck_assert_int_eq(count_of(&d, "k9", "a"), 2);
    qdp_stop(&d);
}
END_TEST

/* A raw request whose headers announce a body never sent: the answer must come before it. */
static char *answer_without_body(qdp *d, const char *key)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "POST /v1/models/m/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: 1000000000\r\n"
                     "Idempotency-Key: %s\r\n\r\n",
                     key);
    ck_assert_int_eq(write(fd, req, (size_t)n), n);
    char *buf = calloc(1, 8192);
    size_t have = 0;
    ssize_t got;
    while (have < 8191 && (got = read(fd, buf + have, 8191 - have)) > 0) {
        have += (size_t)got;
        if (strstr(buf, "\r\n\r\n") && strchr(strstr(buf, "\r\n\r\n"), '}')) break;
    }
    close(fd);
    return buf;
}

/* Bad keys are 400 before the body is read; a 255-byte key is fine. */
START_TEST(test_idem_bad_keys)
{
    qdp d;
    qdp_start(&d, NULL);
    const char *body = "{\"stats\":{\"a\":{\"absmax\":[1,2]}}}";
    char long_key[300], header[320];
    memset(long_key, 'k', sizeof long_key);
    long_key[256] = '\0';
    snprintf(header, sizeof header, "Idempotency-Key: %s", long_key);
    const char *bad[] = {"Idempotency-Key;", /* curl's way of sending an empty value */
                         header, "Idempotency-Key: a b", "Idempotency-Key: a\x01z",
                         "Idempotency-Key: caf\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qdp_resp r = post_with(&d, "m", NULL, "application/json", body, strlen(body), bad[i]);
        ck_assert_msg(r.status == 400, "key %zu: %ld %s", i, r.status, r.body);
        json_t *doc = qdp_json(&r);
        json_t *e = json_object_get(doc, "error");
        ck_assert_str_eq(json_string_value(json_object_get(e, "field")), "Idempotency-Key");
        json_decref(doc);
        assert_error(&r, 400, "invalid", "Idempotency-Key");
    }
    expect(&d, "GET", "/v1/models/m", 404, "not_found");
    long_key[255] = '\0';
    free(post_key_ok(&d, "m", NULL, body, long_key, false));
    free(post_key_ok(&d, "m", NULL, body, long_key, true));
    /* answered from the headers: the gigabyte announced is never read */
    char *answer = answer_without_body(&d, "a\"b c");
    ck_assert_msg(strncmp(answer, "HTTP/1.1 400", 12) == 0 &&
                      strstr(answer, "\"field\":\"Idempotency-Key\""),
                  "%.400s", answer);
    free(answer);
    ck_assert_int_eq(count_of(&d, "m", "a"), 1);
    qdp_stop(&d);
}
END_TEST

/* A post that fails (malformed: 400; not fitting what is stored: 409) records nothing: the
 * retry with a good body and the same key is applied. */
START_TEST(test_idem_failed_post_not_recorded)
{
    qdp d;
    qdp_start(&d, NULL);
    qdp_resp r = post_key(&d, "f", NULL, "{\"stats\":{\"a\":{\"absmax\":[1,\"x\"]}}}", "k");
    assert_error(&r, 400, "invalid_stats", "activation 'a'");
    const char *good = "{\"stats\":{\"a\":{\"absmax\":[1,2]}}}";
    free(post_key_ok(&d, "f", NULL, good, "k", false));
    free(post_key_ok(&d, "f", NULL, good, "k", true));
    r = post_key(&d, "f", NULL, "{\"stats\":{\"a\":{\"absmax\":[1,2,3]}}}", "k2");
    assert_error(&r, 409, "conflict", "activation a");
    free(post_key_ok(&d, "f", NULL, "{\"stats\":{\"a\":{\"absmax\":[3,4]}}}", "k2", false));
    ck_assert_int_eq(count_of(&d, "f", "a"), 2);
    qdp_stop(&d);
}
END_TEST

/* ---- the quota on stored statistics -----------------------------------------------------------
 */

/* {"stats":{NAME:{"absmax":[n values]}, ...}} for the names given (NULL-terminated). */
static char *absmax_body(int n, const char *const *names)
{
    char *b = malloc(64 + 8 * (size_t)n * 4);
    size_t at = (size_t)sprintf(b, "{\"stats\":{");
    for (int k = 0; names[k]; k++) {
        at += (size_t)sprintf(b + at, "%s\"%s\":{\"absmax\":[", k ? "," : "", names[k]);
        for (int i = 0; i < n; i++) at += (size_t)sprintf(b + at, "%s%d", i ? "," : "", i % 10);
        at += (size_t)sprintf(b + at, "]}");
    }
    strcpy(b + at, "}}");
    return b;
}

/* --stats-quota 1K: a and b of 64 values fill it; a post adding c is 507 naming stats_quota and
 * stores nothing of itself (nor records its key); updates go on; a reset frees the quota. */
START_TEST(test_quota)
{
    qdp d;
    const char *extra[] = {"--stats-quota", "1K", NULL};
    qdp_start(&d, extra);
    const char *ab[] = {"a", "b", NULL}, *ac[] = {"a", "c", NULL}, *a[] = {"a", NULL};
    char *both = absmax_body(64, ab), *with_c = absmax_body(64, ac), *only_a = absmax_body(64, a);
    post_ok_quiet(&d, "q", both);
    ck_assert_int_eq(model_int(&d, "q", "stats_bytes"), 1024);
    json_t *list = get_json(&d, "/v1/models");
    json_t *m = json_array_get(json_object_get(list, "models"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "stats_bytes")), 1024);
    json_decref(list);
    qdp_resp r = post_key(&d, "q", NULL, with_c, "over");
    ck_assert_msg(r.status == 507, "%ld %s", r.status, r.body);
    json_t *doc = qdp_json(&r);
    json_t *e = json_object_get(doc, "error");
    ck_assert_str_eq(json_string_value(json_object_get(e, "limit")), "stats_quota");
    ck_assert(json_is_null(json_object_get(e, "field")));
    json_decref(doc);
    assert_error(&r, 507, "quota_exceeded",
                 "model 'q' would hold 1536 bytes of statistics, over stats_quota (1K); delete "
                 "its statistics or raise stats_quota");
    ck_assert_int_eq(count_of(&d, "q", "a"), 1);
    ck_assert_int_eq(count_of(&d, "q", "c"), 0);
    /* updates of what is stored keep its size */
    post_ok_quiet(&d, "q", only_a);
    post_ok_quiet(&d, "q", both);
    ck_assert_int_eq(count_of(&d, "q", "a"), 3);
    ck_assert_int_eq(model_int(&d, "q", "stats_bytes"), 1024);
    /* a reset frees it; the refused post's key was not recorded */
    expect(&d, "DELETE", "/v1/models/q/stats", 204, NULL);
    ck_assert_int_eq(model_int(&d, "q", "stats_bytes"), 0);
    free(post_key_ok(&d, "q", NULL, with_c, "over", false));
    ck_assert_int_eq(model_int(&d, "q", "stats_bytes"), 1024);
    ck_assert_int_eq(count_of(&d, "q", "c"), 1);
    free(both);
    free(with_c);
    free(only_a);
    qdp_stop(&d);
}
END_TEST

Suite *suite_stats_api(void)
{
    Suite *s = suite_create("stats_api");
    suite_add_tcase(s, stt_tcase_parse());
    TCase *tc = tcase_create("daemon");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_updates_and_readback);
    tcase_add_test(tc, test_binary_posts);
    tcase_add_test(tc, test_merge);
    tcase_add_test(tc, test_malformed_rejected);
    tcase_add_test(tc, test_conflicts);
    tcase_add_test(tc, test_models_and_unknown);
    tcase_add_test(tc, test_delete_resets);
    tcase_add_test(tc, test_ema_and_bootstrap);
    tcase_add_test(tc, test_scales);
    tcase_add_test(tc, test_mean_sq_posts);
    tcase_add_test(tc, test_mean_sq_ema_and_kill);
    tcase_add_test(tc, test_mean_sq_rejected);
    tcase_add_test(tc, test_concurrent_posters);
    tcase_add_test(tc, test_writers_take_turns);
    tcase_add_test(tc, test_durability);
    tcase_add_test(tc, test_stop_while_posting);
    tcase_add_test(tc, test_body_limits);
    suite_add_tcase(s, tc);
    TCase *keys = tcase_create("keys and quota");
    tcase_set_timeout(keys, 300);
    tcase_add_test(keys, test_idem_replay);
    tcase_add_test(keys, test_idem_conflict);
    tcase_add_test(keys, test_idem_window);
    tcase_add_test(keys, test_idem_concurrent);
    tcase_add_test(keys, test_idem_kill9);
    tcase_add_test(keys, test_idem_bad_keys);
    tcase_add_test(keys, test_idem_failed_post_not_recorded);
    tcase_add_test(keys, test_quota);
    suite_add_tcase(s, keys);
    return s;
}
