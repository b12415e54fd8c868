/* test_stats_parse.c -- the statistics parsers called directly (a test case of the stats_api
 * suite): JSON posts and merge dumps read into the entries they mean (shapes from the nesting,
 * scalars, min/max, steps, names with escapes, entries sorted), every malformed post refused
 * with a message naming the activation and nothing handed out, and safetensors bodies in F32,
 * BF16, F16 and F64 read to the same entries as their JSON form; the importance statistic
 * mean_sq (SPEC section 9) in each form, and each of its rules.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "stats_internal.h"
#include "stats_parse.h"
#include "stats_testutil.h"

/* The parser's element limit is the store's. */
_Static_assert(QD_ACT_MAX_ELEMS == QD_STATS_MAX_ELEMS, "the parsers and the store disagree");

static qd_stat_post parse_ok(const char *body, bool merge)
{
    qd_stat_post p;
    qd_err err;
    qd_status st = qd_stats_parse_json(body, strlen(body), merge, &p, &err);
    ck_assert_msg(st == QD_OK, "%s: %s", body, err.message);
    return p;
}

static void assert_values(const double *got, const double *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "[%lld] %.17g != %.17g", (long long)i, got[i], want[i]);
}

START_TEST(test_json_updates)
{
    qd_stat_post p = parse_ok(" {\"step\": 1200, \"stats\": {\n"
                              "  \"layers/0/mlp/dot_general0_lhs\": {\"absmax\": [[1, 2.5, 3e0],"
                              " [4, 5, 6E-1]]},\n"
                              "  \"b\\/x\\u00e9\": {\"min\": -1.25, \"max\": 3},\n"
                              "  \"a\": {\"max\": [[[7]]], \"min\": [[[0]]]}}}\n",
                              false);
    ck_assert_int_eq(p.step, 1200);
    ck_assert(!p.merge);
    ck_assert_uint_eq(p.n, 3);
    ck_assert_ptr_null(p.model);
    /* sorted by name */
    ck_assert_str_eq(p.e[0].name, "a");
    ck_assert_str_eq(p.e[1].name, "b/x\xc3\xa9");
    ck_assert_str_eq(p.e[2].name, "layers/0/mlp/dot_general0_lhs");
    const qd_stat_entry *a = &p.e[0], *b = &p.e[1], *l = &p.e[2];
    ck_assert_int_eq(a->kind, QD_STAT_MINMAX);
    ck_assert_int_eq(a->rank, 3);
    ck_assert_int_eq(a->n, 1);
    ck_assert(a->a[0] == 0 && a->b[0] == 7);
    ck_assert_int_eq(b->kind, QD_STAT_MINMAX);
    ck_assert_int_eq(b->rank, 0);
    ck_assert_int_eq(b->n, 1);
    ck_assert(b->a[0] == -1.25 && b->b[0] == 3);
    ck_assert_int_eq(b->count, 1);
    ck_assert_int_eq(l->kind, QD_STAT_ABSMAX);
    ck_assert_int_eq(l->rank, 2);
    ck_assert_int_eq(l->shape[0], 2);
    ck_assert_int_eq(l->shape[1], 3);
    ck_assert_int_eq(l->n, 6);
    ck_assert_ptr_null(l->b);
    assert_values(l->a, (const double[]){1, 2.5, 3, 4, 5, 0.6}, 6);
    qd_stat_post_clear(&p);
    /* no step; numbers at the edges of a double; a name of 1024 bytes */
    p = parse_ok("{\"stats\":{\"s\":{\"absmax\":[1e-320,1.7976931348623157e308,-0.0]}},"
                 "\"step\":null}",
                 false);
    ck_assert_int_eq(p.step, -1);
    ck_assert(p.e[0].a[0] > 0 && p.e[0].a[1] == 1.7976931348623157e308);
    qd_stat_post_clear(&p);
    char body[1200];
    char name[1025];
    memset(name, 'n', 1024);
    name[1024] = '\0';
    snprintf(body, sizeof body, "{\"stats\":{\"%s\":{\"absmax\":1}}}", name);
    p = parse_ok(body, false);
    ck_assert_uint_eq(strlen(p.e[0].name), 1024);
    qd_stat_post_clear(&p);
    /* eight dimensions are allowed */
    p = parse_ok("{\"stats\":{\"d\":{\"absmax\":[[[[[[[[1,2]]]]]]]]}}}", false);
    ck_assert_int_eq(p.e[0].rank, 8);
    ck_assert_int_eq(p.e[0].shape[7], 2);
    qd_stat_post_clear(&p);
}
END_TEST

START_TEST(test_json_merge)
{
    qd_stat_post p = parse_ok("{\"stats\": {\"x\": {\"count\": 4, \"sum_of_absmax\": [8, 4]},"
                              " \"y\": {\"sum_of_min\": -2, \"sum_of_max\": 6, \"count\": 2.0}}}",
                              true);
    ck_assert(p.merge);
    ck_assert_uint_eq(p.n, 2);
    ck_assert_int_eq(p.e[0].count, 4);
    ck_assert_int_eq(p.e[0].kind, QD_STAT_ABSMAX);
    assert_values(p.e[0].a, (const double[]){8, 4}, 2);
    ck_assert_int_eq(p.e[1].count, 2);
    ck_assert_int_eq(p.e[1].kind, QD_STAT_MINMAX);
    ck_assert(p.e[1].a[0] == -2 && p.e[1].b[0] == 6);
    qd_stat_post_clear(&p);
}
END_TEST

/* mean_sq beside absmax (whole, tiled or reduced last axis), beside min and max, or alone; zero
 * (also -0) is a mean of squares; in a merge its sum. */
START_TEST(test_json_mean_sq)
{
    qd_stat_post p =
        parse_ok("{\"stats\": {\"a\": {\"mean_sq\": [0.5, 2, 0, -0.0], \"absmax\": [[1, 2]]},"
                 " \"b\": {\"min\": [-1], \"mean_sq\": [4, 9], \"max\": [3]},"
                 " \"c\": {\"mean_sq\": [1, 2, 3]},"
                 " \"d\": {\"absmax\": 7, \"mean_sq\": [1]},"
                 " \"e\": {\"absmax\": [1, 2, 3]}}}",
                 false);
    ck_assert_uint_eq(p.n, 5);
    const qd_stat_entry *a = &p.e[0], *b = &p.e[1], *c = &p.e[2], *d = &p.e[3], *e = &p.e[4];
    ck_assert_int_eq(a->kind, QD_STAT_ABSMAX);
    ck_assert_int_eq(a->n, 2);
    ck_assert_int_eq(a->n_sq, 4);
    assert_values(a->sq, (const double[]){0.5, 2, 0, 0}, 4);
    ck_assert_int_eq(b->kind, QD_STAT_MINMAX);
    ck_assert_int_eq(b->n_sq, 2);
    assert_values(b->sq, (const double[]){4, 9}, 2);
    ck_assert(b->a[0] == -1 && b->b[0] == 3);
    ck_assert_int_eq(c->kind, QD_STAT_NONE);
    ck_assert_int_eq(c->n, 0);
    ck_assert_int_eq(c->rank, 0);
    ck_assert_ptr_null(c->a);
    ck_assert_ptr_null(c->b);
    ck_assert_int_eq(c->n_sq, 3);
    assert_values(c->sq, (const double[]){1, 2, 3}, 3);
    ck_assert_int_eq(d->n_sq, 1);
    ck_assert_int_eq(e->n_sq, 0);
    ck_assert_ptr_null(e->sq);
    qd_stat_post_clear(&p);
    p = parse_ok("{\"stats\": {\"x\": {\"count\": 4, \"sum_of_mean_sq\": [8, 4]},"
                 " \"y\": {\"sum_of_absmax\": [2], \"sum_of_mean_sq\": [6], \"count\": 2}}}",
                 true);
    ck_assert_int_eq(p.e[0].kind, QD_STAT_NONE);
    ck_assert_int_eq(p.e[0].count, 4);
    assert_values(p.e[0].sq, (const double[]){8, 4}, 2);
    ck_assert_int_eq(p.e[1].kind, QD_STAT_ABSMAX);
    ck_assert_int_eq(p.e[1].count, 2);
    assert_values(p.e[1].sq, (const double[]){6}, 1);
    qd_stat_post_clear(&p);
}
END_TEST

typedef struct bad_case {
    bool merge;
    const char *body;
    const char *want; /* in the message */
} bad_case;

static const bad_case bad_cases[] = {
    /* the values */
    {false, "{\"stats\":{\"r\":{\"absmax\":[[1,2],[3]]}}}", "activation 'r': absmax is ragged"},
    {false, "{\"stats\":{\"r\":{\"absmax\":[[1,2],3]}}}", "activation 'r': absmax is ragged"},
    {false, "{\"stats\":{\"r\":{\"absmax\":[1,[2]]}}}", "activation 'r': absmax is ragged"},
    {false, "{\"stats\":{\"r\":{\"absmax\":[[[1]],[2]]}}}", "activation 'r': absmax is ragged"},
    {false, "{\"stats\":{\"s\":{\"absmax\":[1,\"2\"]}}}",
     "activation 's': absmax must be a number or nested lists of numbers, not a string"},
    {false, "{\"stats\":{\"s\":{\"absmax\":[true]}}}", "activation 's': absmax must be a number"},
    {false, "{\"stats\":{\"s\":{\"absmax\":null}}}", "not null"},
    {false, "{\"stats\":{\"s\":{\"absmax\":{}}}}", "not an object"},
    {false, "{\"stats\":{\"n\":{\"absmax\":[1,NaN]}}}", "activation 'n': absmax holds NaN"},
    {false, "{\"stats\":{\"n\":{\"min\":[Infinity],\"max\":[1]}}}",
     "activation 'n': min holds Infinity"},
    {false, "{\"stats\":{\"n\":{\"absmax\":-Infinity}}}", "activation 'n': absmax holds -Infinity"},
    {false, "{\"stats\":{\"o\":{\"absmax\":[1e999]}}}", "activation 'o': absmax holds 1e999"},
    {false, "{\"stats\":{\"o\":{\"absmax\":-2e400}}}", "overflows a double"},
    {false, "{\"stats\":{\"e\":{\"absmax\":[]}}}", "activation 'e': absmax holds an empty list"},
    {false, "{\"stats\":{\"e\":{\"absmax\":[[1],[]]}}}", "activation 'e': absmax holds an empty"},
    {false, "{\"stats\":{\"d\":{\"absmax\":[[[[[[[[[1]]]]]]]]]}}}",
     "activation 'd': absmax has more than 8 dimensions"},
    {false, "{\"stats\":{\"x\":{\"absmax\":[01]}}}", "activation 'x': the body is not valid JSON"},
    {false, "{\"stats\":{\"x\":{\"absmax\":[1.]}}}", "activation 'x': absmax must be a number"},
    {false, "{\"stats\":{\"x\":{\"absmax\":[+1]}}}", "activation 'x': absmax must be a number"},
    {false, "{\"stats\":{\"x\":{\"absmax\":[1,]}}}", "activation 'x': absmax must be a number"},
    {false, "{\"stats\":{\"x\":{\"absmax\":[1 2]}}}", "',' or ']' expected at byte"},
    /* the keys of an activation */
    {false, "{\"stats\":{\"k\":{\"absmax\":[1],\"mean\":[1]}}}",
     "activation 'k': unknown key \"mean\" (an update takes absmax, or min and max, and/or "
     "mean_sq)"},
    {false, "{\"stats\":{\"k\":{\"count\":1,\"absmax\":[1]}}}",
     "activation 'k': unknown key \"count\""},
    {false, "{\"stats\":{\"k\":{\"absmax\":[1],\"absmax\":[2]}}}",
     "activation 'k': key \"absmax\" comes twice"},
    {false, "{\"stats\":{\"m\":{\"absmax\":[1],\"min\":[0],\"max\":[2]}}}",
     "activation 'm': has both absmax and min/max"},
    {false, "{\"stats\":{\"m\":{\"max\":[2],\"absmax\":[1]}}}", "activation 'm': has both"},
    {false, "{\"stats\":{\"m\":{\"min\":[0]}}}", "activation 'm': has min without max"},
    {false, "{\"stats\":{\"m\":{\"max\":[0]}}}", "activation 'm': has max without min"},
    {false, "{\"stats\":{\"m\":{}}}", "activation 'm': has no statistics"},
    {false, "{\"stats\":{\"m\":{\"min\":[0,1],\"max\":[[2,3]]}}}",
     "activation 'm': min has shape [2] but max has shape [1, 2]"},
    {false, "{\"stats\":{\"m\":{\"min\":0,\"max\":[1]}}}",
     "min has shape [] but max has shape [1]"},
    {false, "{\"stats\":{\"m\":[1]}}", "activation 'm': must be an object such as {\"absmax\""},
    {false, "{\"stats\":{\"m\":{\"absmax\" [1]}}}", "activation 'm': the body is not valid JSON"},
    /* mean_sq (SPEC section 9): shape [n], finite, >= 0, n a multiple of the range's last dim */
    {false, "{\"stats\":{\"q\":{\"mean_sq\":2}}}",
     "activation 'q': mean_sq has shape []; it holds one value per input feature"},
    {false, "{\"stats\":{\"q\":{\"mean_sq\":[[1,2]]}}}",
     "activation 'q': mean_sq has shape [1, 2]"},
    {false, "{\"stats\":{\"q\":{\"absmax\":[1],\"mean_sq\":[1,-0.5]}}}",
     "activation 'q': mean_sq value 1 is -0.5; a mean of squares is >= 0"},
    {false, "{\"stats\":{\"q\":{\"mean_sq\":[1,NaN]}}}", "activation 'q': mean_sq holds NaN"},
    {false, "{\"stats\":{\"q\":{\"mean_sq\":[Infinity]}}}",
     "activation 'q': mean_sq holds Infinity"},
    {false, "{\"stats\":{\"q\":{\"mean_sq\":[1e999]}}}", "overflows a double"},
    {false, "{\"stats\":{\"q\":{\"mean_sq\":[]}}}", "activation 'q': mean_sq holds an empty list"},
    {false, "{\"stats\":{\"q\":{\"absmax\":[[1,2,3]],\"mean_sq\":[1,2,3,4]}}}",
     "activation 'q': mean_sq has 4 values (input features) but absmax has shape [1, 3]"},
    {false, "{\"stats\":{\"q\":{\"min\":[0,0,0],\"max\":[1,1,1],\"mean_sq\":[1,2]}}}",
     "mean_sq has 2 values (input features) but min has shape [3]"},
    {false, "{\"stats\":{\"q\":{\"mean_sq\":[1],\"mean_sq\":[2]}}}", "key \"mean_sq\" comes twice"},
    {false, "{\"stats\":{\"q\":{\"sum_of_mean_sq\":[1]}}}", "unknown key \"sum_of_mean_sq\""},
    {false, "{\"stats\":{\"q\":{\"mean_sq\":[1],\"min\":[1]}}}", "has min without max"},
    {true, "{\"stats\":{\"q\":{\"count\":2,\"mean_sq\":[1]}}}",
     "unknown key \"mean_sq\" (a merge takes count with sum_of_absmax, or with sum_of_min and "
     "sum_of_max, and/or with sum_of_mean_sq)"},
    {true, "{\"stats\":{\"q\":{\"count\":2,\"sum_of_mean_sq\":[-1]}}}",
     "activation 'q': sum_of_mean_sq value 0 is -1; a mean of squares is >= 0"},
    {true, "{\"stats\":{\"q\":{\"count\":2,\"sum_of_mean_sq\":[[1]]}}}",
     "activation 'q': sum_of_mean_sq has shape [1, 1]"},
    {true, "{\"stats\":{\"q\":{\"sum_of_mean_sq\":[1]}}}", "a merge needs \"count\""},
    /* names and the stats object */
    {false, "{\"stats\":{\"a\":{\"absmax\":1},\"a\":{\"absmax\":2}}}",
     "activation 'a': comes twice in the post"},
    {false, "{\"stats\":{\"\":{\"absmax\":1}}}", "an activation name must not be empty"},
    {false, "{\"stats\":{\"a\\u0000b\":{\"absmax\":1}}}", "must not hold control characters"},
    {false, "{\"stats\":{\"a\\nb\":{\"absmax\":1}}}", "must not hold control characters"},
    {false, "{\"stats\":{\"a\\ud800\":{\"absmax\":1}}}", "a low surrogate"},
    {false, "{\"stats\":{\"a\\udc00\":{\"absmax\":1}}}", "a high surrogate before a low one"},
    {false, "{\"stats\":{\"a\\x\":{\"absmax\":1}}}", "one of \\\""},
    {false, "{\"stats\":{\"a\\u12\":{\"absmax\":1}}}", "four hex digits"},
    {false, "{\"stats\":{\"a\xff\":{\"absmax\":1}}}", "not valid UTF-8"},
    {false, "{\"stats\":{\"a\xc0\xaf\":{\"absmax\":1}}}", "not valid UTF-8"},
    {false, "{\"stats\":{\"a\xed\xa0\x80\":{\"absmax\":1}}}", "not valid UTF-8"},
    {false, "{\"stats\":{\"a\tb\":{\"absmax\":1}}}", "no control character in a string"},
    {false, "{\"stats\":{}}", "the post holds no activations"},
    {false, "{\"stats\":[]}", "\"stats\" must be an object of activations, not a list"},
    {false, "{\"stats\":{\"a\":{\"absmax\":1}}", "it ends where ',' or '}' was expected"},
    {false, "{\"stats\":{\"a\":{\"absmax\":1", "activation 'a': the body is not valid JSON"},
    {false, "{\"stats\":{\"a", "the closing '\"' of a string"},
    /* the document */
    {false, "", "the body must be a JSON object"},
    {false, "[1]", "the body must be a JSON object"},
    {false, "{}", "the body has no \"stats\" object"},
    {false, "{\"step\":1}", "the body has no \"stats\" object"},
    {false, "{\"stats\":{\"a\":{\"absmax\":1}},\"steps\":1}", "unknown field \"steps\""},
    {false, "{\"stats\":{\"a\":{\"absmax\":1}},\"stats\":{}}", "\"stats\" comes twice"},
    {false, "{\"step\":1,\"step\":2,\"stats\":{\"a\":{\"absmax\":1}}}", "\"step\" comes twice"},
    {false, "{\"step\":-1,\"stats\":{\"a\":{\"absmax\":1}}}", "\"step\" must be an integer"},
    {false, "{\"step\":1.5,\"stats\":{\"a\":{\"absmax\":1}}}", "\"step\" must be an integer"},
    {false, "{\"step\":\"1\",\"stats\":{\"a\":{\"absmax\":1}}}", "\"step\" must be an integer"},
    {false, "{\"step\":1000000000000000000,\"stats\":{\"a\":{\"absmax\":1}}}",
     "\"step\" must be an integer"},
    {false, "{\"stats\":{\"a\":{\"absmax\":1}}} x", "the end of the body expected at byte 29"},
    {false, "{\"stats\":{\"a\":{\"absmax\":1}}}{}", "the end of the body"},
    /* merges */
    {true, "{\"stats\":{\"c\":{\"sum_of_absmax\":[1]}}}",
     "activation 'c': a merge needs \"count\", an integer >= 1"},
    {true, "{\"stats\":{\"c\":{\"count\":0,\"sum_of_absmax\":[1]}}}",
     "activation 'c': count must be an integer from 1 to 2^53, not 0"},
    {true, "{\"stats\":{\"c\":{\"count\":1.5,\"sum_of_absmax\":[1]}}}",
     "count must be an integer from 1 to 2^53, not 1.5"},
    {true, "{\"stats\":{\"c\":{\"count\":\"3\",\"sum_of_absmax\":[1]}}}",
     "count must be an integer from 1 to 2^53, not a string"},
    {true, "{\"stats\":{\"c\":{\"count\":1e300,\"sum_of_absmax\":[1]}}}",
     "count must be an integer"},
    {true, "{\"stats\":{\"c\":{\"count\":2,\"count\":2,\"sum_of_absmax\":[1]}}}",
     "key \"count\" comes twice"},
    {true, "{\"stats\":{\"c\":{\"count\":2,\"absmax\":[1]}}}",
     "activation 'c': unknown key \"absmax\" (a merge takes count with sum_of_absmax"},
    {true, "{\"stats\":{\"c\":{\"count\":2,\"sum_of_min\":[1]}}}",
     "activation 'c': has sum_of_min without sum_of_max"},
    {true, "{\"stats\":{\"c\":{\"count\":2,\"sum_of_absmax\":[1],\"sum_of_max\":[1]}}}",
     "has both sum_of_absmax and sum_of_min/sum_of_max"},
    {true, "{\"stats\":{\"c\":{\"count\":2,\"sum_of_absmax\":[NaN]}}}",
     "activation 'c': sum_of_absmax holds NaN"},
    /* the values: an absolute maximum is >= 0, a minimum <= its maximum (sums in a merge too) */
    {false, "{\"stats\":{\"v\":{\"absmax\":-1}}}",
     "activation 'v': absmax element 0 is -1; an absolute maximum is >= 0"},
    {false, "{\"stats\":{\"v\":{\"absmax\":[[1,2],[3,-0.5]]}}}",
     "activation 'v': absmax element 3 is -0.5; an absolute maximum is >= 0"},
    {false, "{\"stats\":{\"v\":{\"min\":3,\"max\":-3}}}",
     "activation 'v': min element 0 is 3 but max element 0 is -3; a minimum is <= its maximum"},
    {false, "{\"stats\":{\"v\":{\"min\":[0,2],\"max\":[1,1],\"mean_sq\":[1,1]}}}",
     "activation 'v': min element 1 is 2 but max element 1 is 1"},
    {true, "{\"stats\":{\"v\":{\"count\":2,\"sum_of_absmax\":[-2]}}}",
     "activation 'v': sum_of_absmax element 0 is -2; an absolute maximum is >= 0"},
    {true, "{\"stats\":{\"v\":{\"count\":2,\"sum_of_min\":[1],\"sum_of_max\":[0]}}}",
     "activation 'v': sum_of_min element 0 is 1 but sum_of_max element 0 is 0"},
};

START_TEST(test_json_malformed)
{
    const bad_case *c = &bad_cases[_i];
    qd_stat_post p;
    qd_err err;
    memset(&p, 0x5a, sizeof p);
    qd_status st = qd_stats_parse_json(c->body, strlen(c->body), c->merge, &p, &err);
    ck_assert_msg(st == QD_INVALID, "case %d (%s): status %d", _i, c->body, st);
    ck_assert_msg(strstr(err.message, c->want), "case %d (%s): message \"%s\" lacks \"%s\"", _i,
                  c->body, err.message, c->want);
    ck_assert_uint_eq(p.n, 0); /* nothing handed out */
    ck_assert_ptr_null(p.e);
    ck_assert_ptr_null(p.model);
    qd_stat_post_clear(&p);
}
END_TEST

/* A body must be read within its length (not up to a NUL), and over 4 Mi elements is refused. */
START_TEST(test_json_lengths)
{
    const char *doc = "{\"stats\":{\"a\":{\"absmax\":12}}}";
    qd_stat_post p;
    qd_err err;
    ck_assert_int_eq(qd_stats_parse_json(doc, strlen(doc) - 4, false, &p, &err), QD_INVALID);
    char *copy = strdup(doc);
    copy[strlen(doc) - 4] = '9'; /* the number runs to the end of the buffer */
    ck_assert_int_eq(qd_stats_parse_json(copy, strlen(doc) - 3, false, &p, &err), QD_INVALID);
    free(copy);
    ck_assert_int_eq(qd_stats_parse_json(NULL, 0, false, &p, &err), QD_INVALID);
    size_t n = (size_t)QD_ACT_MAX_ELEMS + 1, cap = 64 + 2 * n;
    char *big = malloc(cap);
    size_t at = (size_t)snprintf(big, cap, "{\"stats\":{\"big\":{\"absmax\":[");
    for (size_t i = 0; i < n; i++) {
        big[at++] = '0';
        big[at++] = i + 1 < n ? ',' : ']';
    }
    at += (size_t)snprintf(big + at, cap - at, "}}}");
    ck_assert_int_eq(qd_stats_parse_json(big, at, false, &p, &err), QD_INVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "activation 'big': a statistic has more than"));
    /* one fewer fits */
    memcpy(big + at - 6, "]}}}", 4); /* "...,0,0]}}}" -> "...,0]}}}" */
    at -= 2;
    p = (qd_stat_post){0};
    qd_status st = qd_stats_parse_json(big, at, false, &p, &err);
    ck_assert_msg(st == QD_OK, "%s", err.message);
    ck_assert_int_eq(p.e[0].n, QD_ACT_MAX_ELEMS);
    qd_stat_post_clear(&p);
    free(big);
}
END_TEST

/* ---- safetensors bodies -----------------------------------------------------------------------
 */

static const float vals6[6] = {1, 2.5, 3, 0.25, 1024, 0};

START_TEST(test_st_dtypes)
{
    uint16_t *bf = stt_bf16(vals6, 6), *hf = stt_f16(vals6, 6);
    double d6[6];
    for (int i = 0; i < 6; i++) d6[i] = vals6[i];
    float lo = -1.5f, hi = 2;
    kit_st_tensor t[] = {
        {"layers/0/mlp/x/absmax", "F32", 2, {2, 3}, vals6, 24},
        {"layers/1/y/absmax", "BF16", 1, {6}, bf, 12},
        {"z/absmax", "F16", 3, {1, 6, 1}, hf, 12},
        {"w/absmax", "F64", 1, {6}, d6, 48},
        {"mm/max", "F32", 0, {0}, &hi, 4},
        {"mm/min", "F32", 0, {0}, &lo, 4},
    };
    size_t len;
    unsigned char *body = kit_st_build(t, 6, "{\"step\":\"42\",\"format\":\"pt\"}", &len);
    qd_stat_post p;
    qd_err err;
    qd_status st = qd_stats_parse_safetensors(body, len, &p, &err);
    ck_assert_msg(st == QD_OK, "%s", err.message);
    ck_assert_int_eq(p.step, 42);
    ck_assert_uint_eq(p.n, 5);
    ck_assert_str_eq(p.e[0].name, "layers/0/mlp/x");
    ck_assert_str_eq(p.e[1].name, "layers/1/y");
    ck_assert_str_eq(p.e[2].name, "mm");
    ck_assert_str_eq(p.e[3].name, "w");
    ck_assert_str_eq(p.e[4].name, "z");
    for (size_t i = 0; i < 5; i++) {
        if (i == 2) continue;
        ck_assert_int_eq(p.e[i].kind, QD_STAT_ABSMAX);
        ck_assert_int_eq(p.e[i].count, 1);
        ck_assert_int_eq(p.e[i].n, 6);
        assert_values(p.e[i].a, d6, 6); /* each value is exact in every dtype */
    }
    ck_assert_int_eq(p.e[0].rank, 2);
    ck_assert_int_eq(p.e[4].rank, 3);
    ck_assert_int_eq(p.e[2].kind, QD_STAT_MINMAX);
    ck_assert_int_eq(p.e[2].rank, 0);
    ck_assert(p.e[2].a[0] == -1.5 && p.e[2].b[0] == 2);
    qd_stat_post_clear(&p);
    /* the same statistics in JSON parse to the same entry */
    qd_stat_post q =
        parse_ok("{\"stats\":{\"layers/0/mlp/x\":{\"absmax\":[[1,2.5,3],[0.25,1024,0]]}}}", false);
    ck_assert_int_eq(q.e[0].rank, 2);
    assert_values(q.e[0].a, d6, 6);
    qd_stat_post_clear(&q);
    free(body);
    free(bf);
    free(hf);
}
END_TEST

typedef struct st_bad {
    kit_st_tensor t[2];
    size_t n;
    const char *meta;
    const char *want;
} st_bad;

static const float one = 1, nan_value = NAN, two[2] = {1, 2};
static const int32_t int_one = 1;

static const st_bad st_bad_cases[] = {
    {{{"noslash", "F32", 0, {0}, &one, 4}}, 1, NULL, "tensor 'noslash' is not named ACTIVATION/"},
    {{{"/absmax", "F32", 0, {0}, &one, 4}}, 1, NULL, "tensor '/absmax' is not named"},
    {{{"a/mean", "F32", 0, {0}, &one, 4}},
     1,
     NULL,
     "activation 'a': tensor 'a/mean': unknown statistic 'mean'"},
    {{{"a/b/absmax", "I32", 0, {0}, &int_one, 4}},
     1,
     NULL,
     "activation 'a/b': tensor 'a/b/absmax' is I32; statistics are F32, BF16, F16 or F64"},
    {{{"a/absmax", "F32", 1, {2}, (const float[]){1, NAN}, 8}},
     1,
     NULL,
     "activation 'a': tensor 'a/absmax' holds a non-finite value at element 1"},
    {{{"a/absmax", "F32", 0, {0}, &nan_value, 4}}, 1, NULL, "non-finite value at element 0"},
    {{{"a/absmax", "F32", 2, {0, 3}, NULL, 0}},
     1,
     NULL,
     "activation 'a': tensor 'a/absmax' is empty"},
    {{{"a/min", "F32", 1, {2}, two, 8}, {"a/max", "F32", 2, {1, 2}, two, 8}},
     2,
     NULL,
     "activation 'a': min has shape [2] but max has shape [1, 2]"},
    {{{"a/min", "F32", 0, {0}, &one, 4}, {"a/absmax", "F32", 0, {0}, &one, 4}},
     2,
     NULL,
     "activation 'a': has both absmax and min/max"},
    {{{"a/max", "F32", 0, {0}, &one, 4}}, 1, NULL, "activation 'a': has max without min"},
    {{{"a\\u0001/absmax", "F32", 0, {0}, &one, 4}}, 1, NULL, "must not hold control characters"},
    {{{"a/absmax", "F32", 0, {0}, &one, 4}}, 1, "{\"step\":\"-3\"}", "__metadata__ step must be"},
    {{{"a/absmax", "F32", 0, {0}, &one, 4}}, 1, "{\"step\":\"\"}", "__metadata__ step must be"},
    {{{0}}, 0, NULL, "the post holds no activations"},
    {{{"a/mean_sq", "F32", 2, {1, 2}, two, 8}},
     1,
     NULL,
     "activation 'a': mean_sq has shape [1, 2]"},
    {{{"a/mean_sq", "F32", 0, {0}, &one, 4}}, 1, NULL, "activation 'a': mean_sq has shape []"},
    {{{"a/mean_sq", "F32", 1, {2}, (const float[]){1, -2}, 8}},
     1,
     NULL,
     "activation 'a': mean_sq value 1 is -2; a mean of squares is >= 0"},
    {{{"a/mean_sq", "F32", 1, {2}, (const float[]){NAN, 1}, 8}},
     1,
     NULL,
     "activation 'a': tensor 'a/mean_sq' holds a non-finite value at element 0"},
    {{{"a/absmax", "F32", 1, {2}, two, 8},
      {"a/mean_sq", "F32", 1, {3}, (const float[]){1, 2, 3}, 12}},
     2,
     NULL,
     "activation 'a': mean_sq has 3 values (input features) but absmax has shape [2]"},
    {{{"a/absmax", "F32", 1, {2}, (const float[]){1, -1}, 8}},
     1,
     NULL,
     "activation 'a': absmax element 1 is -1; an absolute maximum is >= 0"},
    {{{"a/min", "F32", 0, {0}, (const float[]){3}, 4},
      {"a/max", "F32", 0, {0}, (const float[]){-3}, 4}},
     2,
     NULL,
     "activation 'a': min element 0 is 3 but max element 0 is -3; a minimum is <= its maximum"},
};

START_TEST(test_st_malformed)
{
    const st_bad *c = &st_bad_cases[_i];
    size_t len;
    unsigned char *body = kit_st_build(c->t, c->n, c->meta, &len);
    qd_stat_post p;
    qd_err err;
    qd_status st = qd_stats_parse_safetensors(body, len, &p, &err);
    ck_assert_msg(st == QD_INVALID, "case %d: status %d", _i, st);
    ck_assert_msg(strstr(err.message, c->want), "case %d: message \"%s\" lacks \"%s\"", _i,
                  err.message, c->want);
    ck_assert_uint_eq(p.n, 0);
    ck_assert_ptr_null(p.e);
    free(body);
}
END_TEST

/* ACT/mean_sq alone or beside absmax, in any float dtype, reads as its JSON form does. */
START_TEST(test_st_mean_sq)
{
    static const float sq4[4] = {0.25f, 4, 0, 9};
    uint16_t *bf = stt_bf16(sq4, 4);
    kit_st_tensor t[] = {
        {"l/0/x/absmax", "F32", 2, {1, 2}, two, 8},
        {"l/0/x/mean_sq", "F32", 1, {4}, sq4, 16},
        {"l/1/y/mean_sq", "BF16", 1, {4}, bf, 8},
    };
    size_t len;
    unsigned char *body = kit_st_build(t, 3, NULL, &len);
    qd_stat_post p;
    qd_err err;
    qd_status st = qd_stats_parse_safetensors(body, len, &p, &err);
    ck_assert_msg(st == QD_OK, "%s", err.message);
    ck_assert_uint_eq(p.n, 2);
    ck_assert_int_eq(p.e[0].kind, QD_STAT_ABSMAX);
    ck_assert_int_eq(p.e[0].n, 2);
    ck_assert_int_eq(p.e[0].n_sq, 4);
    assert_values(p.e[0].sq, (const double[]){0.25, 4, 0, 9}, 4);
    ck_assert_int_eq(p.e[1].kind, QD_STAT_NONE);
    ck_assert_int_eq(p.e[1].n_sq, 4);
    assert_values(p.e[1].sq, (const double[]){0.25, 4, 0, 9}, 4);
    qd_stat_post_clear(&p);
    free(body);
    free(bf);
}
END_TEST

/* Not safetensors at all: the reader's own message, naming the body. */
START_TEST(test_st_not_safetensors)
{
    qd_stat_post p;
    qd_err err;
    ck_assert_int_eq(qd_stats_parse_safetensors("", 0, &p, &err), QD_INVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "the body is empty"));
    ck_assert_int_eq(qd_stats_parse_safetensors(NULL, 0, &p, &err), QD_INVALID);
    const char *json = "{\"stats\":{}}";
    ck_assert_int_eq(qd_stats_parse_safetensors(json, strlen(json), &p, &err), QD_INVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "safetensors body: not a safetensors file ("));
    kit_st_tensor t = {"a/absmax", "F32", 1, {2}, two, 8};
    size_t len;
    unsigned char *body = kit_st_build(&t, 1, NULL, &len);
    ck_assert_int_eq(qd_stats_parse_safetensors(body, len - 1, &p, &err), QD_INVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "truncated"));
    free(body);
}
END_TEST

TCase *stt_tcase_parse(void)
{
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_json_updates);
    tcase_add_test(tc, test_json_merge);
    tcase_add_test(tc, test_json_mean_sq);
    tcase_add_loop_test(tc, test_json_malformed, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(tc, test_json_lengths);
    tcase_add_test(tc, test_st_dtypes);
    tcase_add_loop_test(tc, test_st_malformed, 0,
                        (int)(sizeof st_bad_cases / sizeof st_bad_cases[0]));
    tcase_add_test(tc, test_st_mean_sq);
    tcase_add_test(tc, test_st_not_safetensors);
    return tc;
}
