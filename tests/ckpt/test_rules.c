/* test_rules.c -- rule sets (SPEC section 6): defaults, every field, first match wins with
 * full-match regexes, module paths, one table of bad inputs (each error names rule and field),
 * and the quant_how a rule gives for a shape (axes, tiles, fractions, out-of-range axes).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckutil.h"
#include "quant_rules.h"

static quant_ruleset *parse_ok(const char *json)
{
    quant_ruleset *rs = NULL;
    quant_ck_error err;
    quant_ck_status st = quant_ruleset_parse(json, strlen(json), "rules.json", &rs, &err);
    ck_assert_msg(st == QUANT_CK_OK, "%s: %s", json, err.message);
    ck_assert_ptr_nonnull(rs);
    return rs;
}

static void assert_axes(int n, const int *axes, int want_n, const int *want)
{
    ck_assert_int_eq(n, want_n);
    for (int i = 0; i < n; i++) ck_assert_int_eq(axes[i], want[i]);
}

START_TEST(test_defaults)
{
    quant_ruleset *rs = parse_ok("[{}]");
    ck_assert_uint_eq(quant_ruleset_count(rs), 1);
    const quant_rule *r = quant_ruleset_rule(rs, 0);
    ck_assert_str_eq(r->module_path, ".*");
    ck_assert(!r->has_weight_qtype);
    ck_assert_str_eq(r->weight_calibration, "absmax");
    ck_assert_int_eq(r->n_tiles, 0);
    ck_assert(!r->tile_on_contraction);
    ck_assert(!r->has_act_qtype);
    ck_assert_str_eq(r->act_calibration, "absmax");
    ck_assert(!r->act_static_scale);
    assert_axes(r->n_act_batch_axes, r->act_batch_axes, 1, (const int[]){0});
    assert_axes(r->n_contraction_axes, r->contraction_axes, 1, (const int[]){-1});
    ck_assert_int_eq(r->scale_dtype, QUANT_DTYPE_F32);
    ck_assert(r->pack);
    ck_assert(!r->stochastic_rounding);
    ck_assert_uint_eq(r->sr_seed, 0);
    ck_assert_ptr_null(quant_ruleset_rule(rs, 1));
    quant_ruleset_free(rs);
    quant_ruleset_free(NULL);
}
END_TEST

START_TEST(test_every_field)
{
    quant_ruleset *rs = parse_ok(
        "{\"rules\": [{\"module_path\": \"model\\\\..*\", \"weight_qtype\": \"int4\","
        " \"weight_calibration_method\": \"minmax\", \"tile_size\": 64, \"act_qtype\": "
        "\"fp8_e4m3\","
        " \"act_calibration_method\": \"rms,3\", \"act_static_scale\": true,"
        " \"act_batch_axes\": [0, 1], \"contraction_axes\": [0, -1], \"scale_dtype\": \"bfloat16\","
        " \"pack\": false, \"stochastic_rounding\": 42},"
        " {\"scale_dtype\": \"float16\", \"stochastic_rounding\": true, \"tile_size\": 1.0,"
        "  \"act_batch_axes\": []},"
        " {\"stochastic_rounding\": 0, \"tile_size\": 1, \"scale_dtype\": \"float32\"},"
        " {\"weight_qtype\": \"int8\", \"tile_size\": {\"0\": 128, \"-1\": 0.25}}]}");
    ck_assert_uint_eq(quant_ruleset_count(rs), 4);
    const quant_rule *r = quant_ruleset_rule(rs, 0);
    ck_assert_str_eq(r->module_path, "model\\..*");
    ck_assert(r->has_weight_qtype);
    ck_assert_int_eq(r->weight_qtype, QUANT_QTYPE_INT4);
    ck_assert_str_eq(r->weight_calibration, "minmax");
    ck_assert_int_eq(r->n_tiles, 1);
    ck_assert(r->tile_on_contraction);
    ck_assert_int_eq(r->tiles[0].axis, -1); /* the last contraction axis as listed */
    ck_assert_int_eq(r->tiles[0].size, 64);
    ck_assert(r->has_act_qtype);
    ck_assert_int_eq(r->act_qtype, QUANT_QTYPE_FP8_E4M3FN);
    ck_assert_str_eq(r->act_calibration, "rms,3");
    ck_assert(r->act_static_scale);
    assert_axes(r->n_act_batch_axes, r->act_batch_axes, 2, (const int[]){0, 1});
    assert_axes(r->n_contraction_axes, r->contraction_axes, 2, (const int[]){0, -1});
    ck_assert_int_eq(r->scale_dtype, QUANT_DTYPE_BF16);
    ck_assert(!r->pack);
    ck_assert(r->stochastic_rounding);
    ck_assert_uint_eq(r->sr_seed, 42);

    r = quant_ruleset_rule(rs, 1);
    ck_assert_int_eq(r->scale_dtype, QUANT_DTYPE_F16);
    ck_assert(r->stochastic_rounding);
    ck_assert_uint_eq(r->sr_seed, 0);
    ck_assert_int_eq(r->n_act_batch_axes, 0);
    /* 1.0 (a real) is the fraction 1: one scale along the axis */
    ck_assert_int_eq(r->tiles[0].size, 0);
    ck_assert(r->tiles[0].fraction == 1.0);

    r = quant_ruleset_rule(rs, 2);
    ck_assert(r->stochastic_rounding);     /* an integer seed, even 0, turns it on */
    ck_assert_int_eq(r->tiles[0].size, 1); /* 1 (an integer) is tile length 1 */
    ck_assert_int_eq(r->scale_dtype, QUANT_DTYPE_F32);

    r = quant_ruleset_rule(rs, 3);
    ck_assert(!r->tile_on_contraction);
    ck_assert_int_eq(r->n_tiles, 2);
    ck_assert_int_eq(r->tiles[0].axis, 0);
    ck_assert_int_eq(r->tiles[0].size, 128);
    ck_assert_int_eq(r->tiles[1].axis, -1);
    ck_assert_int_eq(r->tiles[1].size, 0);
    ck_assert(r->tiles[1].fraction == 0.25);
    quant_ruleset_free(rs);
}
END_TEST

START_TEST(test_empty_and_null)
{
    static const char *const empty[] = {"[]", "{\"rules\": []}", " [ ] \n"};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        quant_ruleset *rs = parse_ok(empty[i]);
        ck_assert_uint_eq(quant_ruleset_count(rs), 0);
        ck_assert_int_eq(quant_ruleset_match(rs, "model.layers.0.mlp"), -1);
        quant_ruleset_free(rs);
    }
    quant_ruleset *rs = parse_ok("[{\"weight_qtype\": null, \"act_qtype\": null}]");
    const quant_rule *r = quant_ruleset_rule(rs, 0);
    ck_assert(!r->has_weight_qtype);
    ck_assert(!r->has_act_qtype);
    ck_assert_int_eq(quant_ruleset_match(rs, "anything"), 0); /* it matches, and keeps it */
    quant_how how;
    quant_ck_error err;
    int64_t shape[2] = {4, 4};
    ck_assert_int_eq(quant_rule_how(r, "w", 2, shape, &how, &err), QUANT_CK_ERR_ARG);
    quant_ruleset_free(rs);
    ck_assert_int_eq(quant_ruleset_match(NULL, "x"), -1);
    ck_assert_uint_eq(quant_ruleset_count(NULL), 0);
    ck_assert_int_eq(quant_ruleset_parse("[]", 2, NULL, NULL, &err), QUANT_CK_ERR_ARG);
}
END_TEST

START_TEST(test_first_match_wins)
{
    quant_ruleset *rs = parse_ok("[{\"module_path\": \"lm_head\", \"weight_qtype\": null},"
                                 " {\"module_path\": \"model\\\\.layers\\\\.0\\\\..*\","
                                 "  \"weight_qtype\": \"int8\"},"
                                 " {\"module_path\": \".*_proj\", \"weight_qtype\": \"int4\"},"
                                 " {\"weight_qtype\": \"nf4\"}]");
    ck_assert_int_eq(quant_ruleset_match(rs, "lm_head"), 0);
    ck_assert_int_eq(quant_ruleset_match(rs, "model.layers.0.mlp.up_proj"), 1);
    ck_assert_int_eq(quant_ruleset_match(rs, "model.layers.1.mlp.up_proj"), 2);
    ck_assert_int_eq(quant_ruleset_match(rs, "model.embed_tokens"), 3);
    ck_assert_int_eq(quant_ruleset_match(rs, ""), 3);
    quant_ruleset_free(rs);
}
END_TEST

/* module_path regex -> module path -> matches, with Python re.fullmatch semantics. */
static const struct {
    const char *json_pattern; /* as written inside the JSON string */
    const char *path;
    bool match;
} full_cases[] = {
    {"layers", "model.layers", false},  /* a suffix is not enough */
    {"model", "model.layers", false},   /* nor a prefix */
    {"model.*", "model.layers", true},  /* */
    {".*layers", "model.layers", true}, /* */
    {"a|b", "ab", false},               /* each alternative must span the whole path */
    {"a|b", "a", true},                 /* */
    {"a|b", "b", true},                 /* */
    {"a|ab", "ab", true},               /* backtracks into the longer alternative */
    {"x|y.*", "xz", false},             /* */
    {"q_proj|k_proj", "model.q_proj", false},
    {".*(q_proj|k_proj)", "model.layers.3.self_attn.k_proj", true},
    {"model\\\\.x", "modelYx", false}, /* an escaped dot is a dot */
    {"model.x", "model/x", true},      /* '/' separated paths match like '.' ones */
    {"model/layers/\\\\d+/mlp", "model/layers/12/mlp", true},
    {"model/layers/\\\\d+/mlp", "model/layers/12/mlp/up", false},
    {"a", "a\n", false},                  /* no trailing newline slack */
    {"a$", "a\n", false},                 /* */
    {"^a$", "a", true},                   /* */
    {"", "", true},                       /* a name without a separator has module path "" */
    {"", "a", false},                     /* */
    {"\\\\w+", "\xc3\xbc\xc3\x9f", true}, /* Unicode \w, as in Python str patterns */
    {"(?i)MODEL\\\\..*", "model.x", true},
};

START_TEST(test_full_match)
{
    for (size_t i = 0; i < sizeof full_cases / sizeof full_cases[0]; i++) {
        char json[256];
        snprintf(json, sizeof json, "[{\"module_path\": \"%s\", \"weight_qtype\": \"int8\"}]",
                 full_cases[i].json_pattern);
        quant_ruleset *rs = parse_ok(json);
        long got = quant_ruleset_match(rs, full_cases[i].path);
        ck_assert_msg(got == (full_cases[i].match ? 0 : -1), "pattern %s on '%s': got %ld",
                      full_cases[i].json_pattern, full_cases[i].path, got);
        quant_ruleset_free(rs);
    }
}
END_TEST

static void *match_many(void *arg)
{
    const quant_ruleset *rs = arg;
    for (int i = 0; i < 2000; i++) {
        char path[64];
        snprintf(path, sizeof path, "model.layers.%d.mlp.%s", i, i % 2 ? "up_proj" : "norm");
        long want = i % 2 ? 0 : 1;
        if (quant_ruleset_match(rs, path) != want) return arg; /* non-NULL: a failure */
    }
    return NULL;
}

START_TEST(test_match_threads)
{
    quant_ruleset *rs = parse_ok("[{\"module_path\": \".*_proj\"}, {}]");
    pthread_t t[4];
    for (int i = 0; i < 4; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, match_many, rs), 0);
    for (int i = 0; i < 4; i++) {
        void *res = (void *)1;
        ck_assert_int_eq(pthread_join(t[i], &res), 0);
        ck_assert_msg(res == NULL, "thread %d saw a wrong match", i);
    }
    quant_ruleset_free(rs);
}
END_TEST

static char *repeat(char c, size_t n, const char *tail)
{
    char *s = malloc(n + strlen(tail) + 1);
    ck_assert_ptr_nonnull(s);
    memset(s, c, n);
    strcpy(s + n, tail);
    return s;
}

/* Python's re.fullmatch("(a|aa)+", "a" * 20000) matches: so must we (PCRE2's JIT stack of
 * 32 KiB once ended such a match with an error that counted as no match). */
START_TEST(test_match_long_path)
{
    quant_ruleset *rs = parse_ok("[{\"module_path\": \"(a|aa)+\"}, {}]");
    char *path = repeat('a', 20000, "");
    ck_assert_int_eq(quant_ruleset_match(rs, path), 0);
    quant_ruleset_free(rs);
    free(path);
    rs = parse_ok("[{\"module_path\": \"(?:a|aa)+b\"}, {}]");
    path = repeat('a', 20000, "b");
    ck_assert_int_eq(quant_ruleset_match(rs, path), 0);
    free(path);
    quant_ruleset_free(rs);
}
END_TEST

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A regex that backtracks without end on a crafted path fails quickly, as an error: never as
 * "no match" (which would hand the tensor to the next rule, here rule 2). */
START_TEST(test_match_pathological)
{
    quant_ruleset *rs = parse_ok("[{\"module_path\": \"x\"}, {\"module_path\": \"(a+)+$\"}, {}]");
    char *path = repeat('a', 10000, "!");
    double t0 = seconds_now();
    ck_assert_int_eq(quant_ruleset_match(rs, path), -2);
    ck_assert_msg(seconds_now() - t0 < 3.0, "took %.1f s", seconds_now() - t0);
    ck_assert_int_eq(quant_ruleset_match(rs, "model.x"), 2); /* an ordinary path still matches */
    free(path);
    quant_ruleset_free(rs);
}
END_TEST

START_TEST(test_module_path)
{
    static const struct {
        const char *name, *module;
    } cases[] = {
        {"model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj"},
        {"model/layers/0/kernel", "model/layers/0"},
        {"a/b.c", "a/b"},
        {"a.b/c", "a.b"},
        {"weight", ""},
        {"", ""},
        {".weight", ""},
        {"a.", "a"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[64];
        ck_assert(quant_module_path(cases[i].name, out, sizeof out));
        ck_assert_str_eq(out, cases[i].module);
    }
    char small[4];
    ck_assert(quant_module_path("abc.d", small, sizeof small)); /* "abc" + NUL fits */
    ck_assert_str_eq(small, "abc");
    ck_assert(!quant_module_path("abcd.e", small, sizeof small));
    ck_assert(!quant_module_path("a.b", small, 0));
}
END_TEST

/* Bad rule sets: JSON text -> a substring of the message (after the "rules.json: " prefix). */
static const struct {
    const char *json;
    const char *want;
} bad_cases[] = {
    /* unknown fields */
    {"[{\"weight_qtyp\": \"int8\"}]",
     "rule 0: field 'weight_qtyp': unknown field, did you mean 'weight_qtype'?"},
    {"[{\"Module_Path\": \".*\"}]",
     "field 'Module_Path': unknown field, did you mean 'module_path'?"},
    {"[{\"scale_dype\": \"float32\"}]", "unknown field, did you mean 'scale_dtype'?"},
    {"[{\"contraction_axis\": [0]}]", "unknown field, did you mean 'contraction_axes'?"},
    {"[{}, {\"tile\": 32}]", "rule 1: field 'tile': unknown field (known: module_path, "},
    {"[{\"xyzzy\": 1}]", "field 'xyzzy': unknown field (known: module_path, weight_qtype, "},
    /* other tools' names for our fields */
    {"[{\"group_size\": 128}]", "rule 0: field 'group_size': unknown field, did you mean "
                                "'tile_size'?"},
    {"[{\"block_size\": 32}]", "field 'block_size': unknown field, did you mean 'tile_size'?"},
    {"[{\"bits\": 4}]", "field 'bits': unknown field, did you mean 'weight_qtype'?"},
    {"[{\"num_bits\": 8}]", "field 'num_bits': unknown field, did you mean 'weight_qtype'?"},
    {"[{\"symmetric\": false}]",
     "field 'symmetric': unknown field, did you mean 'weight_calibration_method'?"},
    {"[{\"targets\": [\"Linear\"]}]", "field 'targets': unknown field, did you mean "
                                      "'module_path'?"},
    /* wrong types, each field */
    {"[{\"module_path\": 1}]", "rule 0: field 'module_path': must be a string, not an integer"},
    {"[{\"module_path\": null}]", "rule 0: field 'module_path': must be a string, not null"},
    {"[{\"weight_qtype\": 8}]", "rule 0: field 'weight_qtype': must be a qtype name or null"},
    {"[{\"weight_calibration_method\": null}]",
     "rule 0: field 'weight_calibration_method': must be a string"},
    {"[{\"tile_size\": \"128\"}]", "rule 0: field 'tile_size': must be a positive integer, a "
                                   "number in (0, 1] or an object of axis -> size, not a string"},
    {"[{\"tile_size\": true}]", "field 'tile_size': must be a positive integer"},
    {"[{\"tile_size\": [128]}]", "field 'tile_size': must be a positive integer"},
    {"[{\"act_qtype\": [\"int8\"]}]", "rule 0: field 'act_qtype': must be a qtype name or null"},
    {"[{\"act_calibration_method\": 2}]", "rule 0: field 'act_calibration_method': must be a "
                                          "string"},
    {"[{\"act_static_scale\": \"yes\"}]", "rule 0: field 'act_static_scale': must be true or "
                                          "false, not a string"},
    {"[{\"act_batch_axes\": 0}]", "rule 0: field 'act_batch_axes': must be a list of axis"},
    {"[{\"act_batch_axes\": [0.5]}]", "field 'act_batch_axes': element 0 must be an integer"},
    {"[{\"contraction_axes\": -1}]", "rule 0: field 'contraction_axes': must be a list of axis"},
    {"[{\"contraction_axes\": [0, \"1\"]}]", "field 'contraction_axes': element 1 must be an "
                                             "integer, not a string"},
    {"[{\"contraction_axes\": []}]", "field 'contraction_axes': must name at least one axis"},
    {"[{\"contraction_axes\": [1, 1]}]", "field 'contraction_axes': axis 1 is repeated"},
    {"[{\"contraction_axes\": [8]}]", "field 'contraction_axes': axis 8 is out of range"},
    {"[{\"contraction_axes\": [-9]}]", "field 'contraction_axes': axis -9 is out of range"},
    {"[{\"contraction_axes\": [0,1,2,3,4,5,6,7,-1]}]", "field 'contraction_axes': names 9 axes"},
    {"[{\"scale_dtype\": 32}]", "rule 0: field 'scale_dtype': must be a string"},
    {"[{\"scale_dtype\": \"f32\"}]", "field 'scale_dtype': \"f32\" is not float32, bfloat16 or "
                                     "float16"},
    {"[{\"pack\": 1}]", "rule 0: field 'pack': must be true or false, not an integer"},
    {"[{\"pack\": null}]", "rule 0: field 'pack': must be true or false, not null"},
    {"[{\"stochastic_rounding\": \"yes\"}]", "field 'stochastic_rounding': must be true, false or "
                                             "a non-negative integer seed"},
    {"[{\"stochastic_rounding\": 1.5}]", "field 'stochastic_rounding': must be true, false"},
    {"[{\"stochastic_rounding\": -1}]", "field 'stochastic_rounding': seed -1 must be "
                                        "non-negative"},
    /* names */
    {"[{\"weight_qtype\": \"int9\"}]", "rule 0: field 'weight_qtype': unknown qtype \"int9\""},
    {"[{\"weight_qtype\": \"INT8\"}]",
     "field 'weight_qtype': unknown qtype \"INT8\", did you mean int8?"},
    {"[{\"act_qtype\": \"fp4\"}]",
     "rule 0: field 'act_qtype': unknown qtype \"fp4\", did you mean nvfp4 or mxfp4?"},
    {"[{\"weight_qtype\": \"int8\", \"tile_size\": 99999999999999999999}]",
     "field 'tile_size': integer 99999999999999999999 is out of range: integers must lie in "
     "-9223372036854775808..9223372036854775807 (64 bits)"},
    {"[{\"weight_qtype\": \"int8\", \"contraction_axes\": [-99999999999999999999]}]",
     "line 1, column 68: integer -99999999999999999999 is out of range"},
    {"[{\"weight_qtype\": \"fp8\"}]",
     "field 'weight_qtype': unknown qtype \"fp8\", did you mean float8_e4m3fn? (expected"},
    {"[{\"weight_qtype\": \"FP8_E4M3FN\"}]", "did you mean float8_e4m3fn?"},
    {"[{\"weight_calibration_method\": \"maxabs\"}]",
     "rule 0: field 'weight_calibration_method': unknown calibration method \"maxabs\""},
    {"[{\"weight_calibration_method\": \"rms\"}]",
     "field 'weight_calibration_method': calibration \"rms\": rms needs a factor"},
    {"[{\"act_calibration_method\": \"fixed\"}]", "rule 0: field 'act_calibration_method': "
                                                  "calibration \"fixed\": fixed needs a range"},
    /* asymmetric calibration on qtypes that forbid it */
    {"[{\"weight_qtype\": \"nf4\", \"weight_calibration_method\": \"minmax\"}]",
     "rule 0: field 'weight_calibration_method': calibration \"minmax\" is asymmetric, which nf4 "
     "does not allow"},
    {"[{\"weight_calibration_method\": \"fixed,-1,3\", \"weight_qtype\": \"float8_e5m2\"}]",
     "field 'weight_calibration_method': calibration \"fixed,-1,3\" is asymmetric"},
    {"[{\"act_qtype\": \"float8_e4m3fn\", \"act_calibration_method\": \"minmax\"}]",
     "rule 0: field 'act_calibration_method': calibration \"minmax\" is asymmetric"},
    /* tile_size */
    {"[{\"tile_size\": 0}]", "rule 0: field 'tile_size': tile length 0 must be positive"},
    {"[{\"tile_size\": -4}]", "rule 0: field 'tile_size': tile length -4 must be positive"},
    {"[{\"tile_size\": 1.5}]", "field 'tile_size': fraction 1.5 must be in (0, 1]"},
    {"[{\"tile_size\": 0.0}]", "field 'tile_size': fraction 0 must be in (0, 1]"},
    {"[{\"tile_size\": -0.5}]", "field 'tile_size': fraction -0.5 must be in (0, 1]"},
    {"[{\"tile_size\": 128.0}]", "field 'tile_size': fraction 128 must be in (0, 1] (a tile "
                                 "length is an integer)"},
    {"[{\"tile_size\": {\"x\": 64}}]", "rule 0: field 'tile_size': key \"x\" is not an axis index"},
    {"[{\"tile_size\": {\"01\": 64}}]", "field 'tile_size': key \"01\" is not an axis index"},
    {"[{\"tile_size\": {\"-0\": 64}}]", "field 'tile_size': key \"-0\" is not an axis index"},
    {"[{\"tile_size\": {\"+1\": 64}}]", "field 'tile_size': key \"+1\" is not an axis index"},
    {"[{\"tile_size\": {\" 1\": 64}}]", "field 'tile_size': key \" 1\" is not an axis index"},
    {"[{\"tile_size\": {\"\": 64}}]", "field 'tile_size': key \"\" is not an axis index"},
    {"[{\"tile_size\": {\"8\": 64}}]", "field 'tile_size': key \"8\" is not an axis index"},
    {"[{\"tile_size\": {\"-9\": 64}}]", "field 'tile_size': key \"-9\" is not an axis index"},
    {"[{\"tile_size\": {\"0\": 0}}]", "field 'tile_size': axis \"0\": tile length 0 must be "
                                      "positive"},
    {"[{\"tile_size\": {\"-1\": 2.0}}]", "field 'tile_size': axis \"-1\": fraction 2 must be in"},
    {"[{\"tile_size\": {\"0\": \"64\"}}]", "field 'tile_size': axis \"0\": must be a positive "
                                           "integer"},
    {"[{\"tile_size\": {}}]", "rule 0: field 'tile_size': an empty object tiles nothing"},
    /* across fields */
    {"[{\"act_static_scale\": true}]", "rule 0: field 'act_static_scale': true requires an "
                                       "act_qtype"},
    {"[{\"act_static_scale\": true, \"act_qtype\": null}]", "field 'act_static_scale': true "
                                                            "requires an act_qtype"},
    {"[{\"weight_qtype\": \"nf4\", \"stochastic_rounding\": true}]",
     "rule 0: field 'stochastic_rounding': stochastic rounding applies to integer qtypes only, "
     "not nf4"},
    {"[{}, {\"stochastic_rounding\": 3, \"weight_qtype\": \"fp8_e4m3\"}]",
     "rule 1: field 'stochastic_rounding': stochastic rounding applies to integer qtypes only"},
    /* duplicate keys: still named by rule and field */
    {"[{}, {\"pack\": true, \"pack\": false}]", "rule 1: field 'pack': given twice"},
    {"[1, {\"module_path\": \"a,[{b\", \"pack\": true,\n \"pack\": true}]",
     "rule 1: field 'pack': given twice"},
    {"{\"rules\": [{\"tile_size\": {\"0\": 1, \"0\": 2}}]}",
     "rule 0: field 'tile_size': key \"0\" given twice"},
    {"{\"rules\": [], \"rules\": []}", "duplicate object key"},
    /* regexes */
    {"[{\"module_path\": \"(\"}]", "rule 0: field 'module_path': bad regex \"(\": missing closing "
                                   "parenthesis at offset 1"},
    {"[{}, {\"module_path\": \"a)\"}]", "rule 1: field 'module_path': bad regex \"a)\": "},
    {"[{\"module_path\": \"[z-a]\"}]", "field 'module_path': bad regex \"[z-a]\": range out of "
                                       "order in character class at offset 3"},
    /* the top level and the rules themselves */
    {"3", "expected a list of rules or an object {\"rules\": [...]}, not an integer"},
    {"\"rules\"", "expected a list of rules or an object {\"rules\": [...]}, not a string"},
    {"null", "expected a list of rules or an object {\"rules\": [...]}, not null"},
    {"{\"rules\": {}}", "expected a list of rules or an object {\"rules\": [...]}, not an object"},
    {"{\"rules\": [], \"version\": 1}", "unknown top-level key \"version\" (only \"rules\", "
                                        "\"allow_nothing_quantized\" and \"gguf_mix\" are "
                                        "allowed)"},
    {"{\"rules\": [], \"allow_nothing_quantized\": 1}",
     "top-level key \"allow_nothing_quantized\": must be true or false, not an integer"},
    {"{\"rules\": [], \"gguf_mix\": \"Q4_K_X\"}", "\"gguf_mix\": must be the name of a "
                                                  "llama-quantize mix (Q8_0,"},
    {"{\"rules\": [], \"gguf_mix\": 15}", "\"gguf_mix\": must be the name"},
    {"{}", "missing top-level key \"rules\""},
    {"[1]", "rule 0: must be an object of fields, not an integer"},
    {"[{}, [\"int8\"]]", "rule 1: must be an object of fields, not a list"},
    /* not JSON */
    {"[{", "line 1, column 2: "},
    {"", "line 1, column 0: "},
    {"[{\"weight_qtype\": \"int8\"}] x", "line 1, column 28: end of file expected"},
};

START_TEST(test_bad_inputs)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const char *json = bad_cases[i].json;
        quant_ruleset *rs = (quant_ruleset *)&rs;
        quant_ck_error err;
        memset(&err, 0, sizeof err);
        quant_ck_status st = quant_ruleset_parse(json, strlen(json), "rules.json", &rs, &err);
        ck_assert_msg(st == QUANT_CK_ERR_RULES, "%s: status %d (%s)", json, st, err.message);
        ck_assert_int_eq(err.status, QUANT_CK_ERR_RULES);
        ck_assert_ptr_null(rs);
        ck_assert_msg(strncmp(err.message, "rules.json: ", 12) == 0, "%s: '%s'", json, err.message);
        ck_assert_msg(strstr(err.message, bad_cases[i].want) != NULL, "%s:\n got  '%s'\n want '%s'",
                      json, err.message, bad_cases[i].want);
    }
}
END_TEST

START_TEST(test_message_without_source)
{
    quant_ck_error err;
    quant_ruleset *rs = NULL;
    const char *json = "[{\"pack\": 0}]";
    ck_assert_int_eq(quant_ruleset_parse(json, strlen(json), NULL, &rs, &err), QUANT_CK_ERR_RULES);
    ck_assert_str_eq(err.message, "rule 0: field 'pack': must be true or false, not an integer");
    ck_assert_int_eq(quant_ruleset_parse(json, strlen(json), NULL, &rs, NULL), QUANT_CK_ERR_RULES);
    /* the length is honoured: the text need not be NUL-terminated */
    ck_assert_int_eq(quant_ruleset_parse("[]xyz", 2, NULL, &rs, &err), QUANT_CK_OK);
    quant_ruleset_free(rs);
}
END_TEST

START_TEST(test_load)
{
    char *dir = ck_tmpdir();
    char *path = kit_join(dir, "rules.json");
    const char *text = "{\"rules\": [{\"module_path\": \".*proj\", \"weight_qtype\": \"int4\"}]}";
    ck_write_file(path, text, strlen(text));
    quant_ruleset *rs = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_ruleset_load(path, &rs, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_uint_eq(quant_ruleset_count(rs), 1);
    ck_assert_int_eq(quant_ruleset_match(rs, "a.up_proj"), 0);
    quant_ruleset_free(rs);

    const char *bad = "[{\"weight_qtype\": \"int4\", \"tile_size\": 0}]";
    ck_write_file(path, bad, strlen(bad));
    ck_assert_int_eq(quant_ruleset_load(path, &rs, &err), QUANT_CK_ERR_RULES);
    ck_assert_ptr_null(rs);
    ck_assert_ptr_nonnull(strstr(err.message, "rules.json: rule 0: field 'tile_size': "));
    ck_assert_ptr_nonnull(strstr(err.message, dir)); /* the path, as given */

    char *missing = kit_join(dir, "missing.json");
    ck_assert_int_eq(quant_ruleset_load(missing, &rs, &err), QUANT_CK_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "missing.json"));
    ck_assert_int_eq(quant_ruleset_load(dir, &rs, &err), QUANT_CK_ERR_IO); /* a directory */
    free(missing);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

/* ---- quant_rule_how ------------------------------------------------------------------------- */

/* Parses one rule, builds its how for `shape` and returns the status; fills the scale shape. */
static quant_ck_status how_for(const char *rule, int rank, const int64_t *shape, quant_how *how,
                               int64_t *scale_shape, quant_ck_error *err)
{
    char json[512];
    snprintf(json, sizeof json, "[%s]", rule);
    quant_ruleset *rs = parse_ok(json);
    const quant_rule *r = quant_ruleset_rule(rs, 0);
    quant_ck_status st = quant_rule_how(r, "model.w", rank, shape, how, err);
    if (st == QUANT_CK_OK) {
        quant_error qe;
        ck_assert_int_eq(quant_scale_shape(how, rank, shape, scale_shape, &qe), QUANT_OK);
        ck_assert_ptr_eq(how->calibration, r->weight_calibration);
        how->calibration = NULL; /* the rule set is freed below */
    }
    quant_ruleset_free(rs);
    return st;
}

static void assert_scale(const char *rule, int rank, const int64_t *shape, const int64_t *want)
{
    quant_how how;
    quant_ck_error err;
    int64_t got[QUANT_MAX_RANK];
    quant_ck_status st = how_for(rule, rank, shape, &how, got, &err);
    ck_assert_msg(st == QUANT_CK_OK, "%s: %s", rule, err.message);
    for (int i = 0; i < rank; i++)
        ck_assert_msg(got[i] == want[i], "%s: scale dim %d is %lld, want %lld", rule, i,
                      (long long)got[i], (long long)want[i]);
}

START_TEST(test_how_shapes)
{
    const int64_t s256x512[2] = {256, 512};
    /* HF [out, in]: per output channel */
    assert_scale("{\"weight_qtype\": \"int8\"}", 2, s256x512, (const int64_t[]){256, 1});
    assert_scale("{\"weight_qtype\": \"int4\", \"tile_size\": 128}", 2, s256x512,
                 (const int64_t[]){256, 4});
    assert_scale("{\"weight_qtype\": \"float8_e4m3fn\", \"tile_size\": {\"0\": 128, \"1\": 128}}",
                 2, s256x512, (const int64_t[]){2, 4});
    assert_scale("{\"weight_qtype\": \"int8\", \"tile_size\": {\"-1\": 256}}", 2, s256x512,
                 (const int64_t[]){256, 2});
    /* a tiled non-contraction axis is not channelwise */
    assert_scale("{\"weight_qtype\": \"int8\", \"tile_size\": {\"0\": 64}}", 2, s256x512,
                 (const int64_t[]){4, 1});
    assert_scale("{\"weight_qtype\": \"int8\", \"contraction_axes\": [0]}", 2,
                 (const int64_t[]){64, 32}, (const int64_t[]){1, 32});
    assert_scale("{\"weight_qtype\": \"int8\", \"contraction_axes\": [0, 1]}", 2, s256x512,
                 (const int64_t[]){1, 1});
    /* fractions: round(dim * f); 1.0 is one scale, 1 is one element */
    assert_scale("{\"weight_qtype\": \"int8\", \"tile_size\": 0.5}", 2, (const int64_t[]){8, 16},
                 (const int64_t[]){8, 2});
    assert_scale("{\"weight_qtype\": \"int8\", \"tile_size\": 1.0}", 2, (const int64_t[]){8, 16},
                 (const int64_t[]){8, 1});
    assert_scale("{\"weight_qtype\": \"int8\", \"tile_size\": 1}", 2, (const int64_t[]){8, 16},
                 (const int64_t[]){8, 16});
    assert_scale("{\"weight_qtype\": \"int8\", \"tile_size\": {\"0\": 0.25, \"1\": 4}}", 2,
                 (const int64_t[]){8, 16}, (const int64_t[]){4, 4});
    /* a numeric tile goes to the last contraction axis as listed */
    assert_scale("{\"weight_qtype\": \"int8\", \"contraction_axes\": [1, 0], \"tile_size\": 4}", 2,
                 (const int64_t[]){8, 16}, (const int64_t[]){2, 1});
    assert_scale("{\"weight_qtype\": \"int8\", \"contraction_axes\": [0, 1], \"tile_size\": 4}", 2,
                 (const int64_t[]){8, 16}, (const int64_t[]){1, 4});
    /* rank 3 (stacked experts [e, out, in]) and a conv-like rank 4 */
    assert_scale("{\"weight_qtype\": \"int4\", \"tile_size\": 8}", 3, (const int64_t[]){2, 8, 16},
                 (const int64_t[]){2, 8, 2});
    assert_scale("{\"weight_qtype\": \"int8\", \"contraction_axes\": [1, 2, 3]}", 4,
                 (const int64_t[]){16, 3, 3, 3}, (const int64_t[]){16, 1, 1, 1});
    /* fixed calibration: one scale */
    assert_scale("{\"weight_qtype\": \"int8\", \"weight_calibration_method\": \"fixed,2\"}", 2,
                 s256x512, (const int64_t[]){1, 1});
}
END_TEST

START_TEST(test_how_fields)
{
    quant_how how;
    quant_ck_error err;
    int64_t ss[2], shape[2] = {16, 32};
    ck_assert_int_eq(how_for("{\"weight_qtype\": \"uint4\", \"weight_calibration_method\": "
                             "\"minmax\", \"scale_dtype\": \"bfloat16\", \"pack\": false, "
                             "\"stochastic_rounding\": 7, \"tile_size\": 16}",
                             2, shape, &how, ss, &err),
                     QUANT_CK_OK);
    ck_assert_int_eq(how.qtype, QUANT_QTYPE_UINT4);
    ck_assert_int_eq(how.scale_dtype, QUANT_DTYPE_BF16);
    ck_assert(!how.pack);
    ck_assert(how.stochastic);
    ck_assert_uint_eq(how.sr_key, quant_sr_key(7, "model.w"));
    ck_assert_uint_eq(how.sr_index_base, 0);
    assert_axes(how.n_channel_axes, how.channel_axes, 1, (const int[]){0});
    ck_assert_int_eq(how.n_tiles, 1);
    ck_assert_int_eq(how.tiles[0].axis, 1); /* normalised against the rank */
    ck_assert_int_eq(how.tiles[0].size, 16);

    ck_assert_int_eq(how_for("{\"weight_qtype\": \"int8\", \"stochastic_rounding\": true}", 2,
                             shape, &how, ss, &err),
                     QUANT_CK_OK);
    ck_assert_uint_eq(how.sr_key, quant_sr_key(0, "model.w"));
    ck_assert_int_eq(how_for("{\"weight_qtype\": \"int8\"}", 2, shape, &how, ss, &err),
                     QUANT_CK_OK);
    ck_assert(!how.stochastic);
    ck_assert(how.pack);
    ck_assert_int_eq(how.scale_dtype, QUANT_DTYPE_F32);
}
END_TEST

/* Rules that parse but do not fit a shape: QUANT_CK_ERR_QUANT and a message. */
static const struct {
    const char *rule;
    int rank;
    int64_t shape[4];
    const char *want;
} how_bad[] = {
    {"{\"weight_qtype\": \"int8\", \"tile_size\": 100}", 2, {256, 512}, "not a divisor"},
    {"{\"weight_qtype\": \"int8\", \"tile_size\": {\"0\": 3}}", 2, {256, 512}, "not a divisor"},
    {"{\"weight_qtype\": \"int8\", \"tile_size\": 1024}",
     2,
     {256, 512},
     "tile 1024 is larger than axis 1 (size 512): a tile must fit in its axis"},
    {"{\"weight_qtype\": \"int8\", \"tile_size\": 0.01}",
     2,
     {8, 16},
     "tile size 0 for axis 1 must be positive"},
    {"{\"weight_qtype\": \"int8\", \"contraction_axes\": [2]}",
     2,
     {8, 16},
     "contraction axis 2 is out of range for rank 2"},
    {"{\"weight_qtype\": \"int8\", \"contraction_axes\": [-3]}",
     2,
     {8, 16},
     "contraction axis -3 is out of range for rank 2"},
    {"{\"weight_qtype\": \"int8\", \"contraction_axes\": [-1, 1]}",
     2,
     {8, 16},
     "contraction axis 1 names axis 1 again (rank 2)"},
    {"{\"weight_qtype\": \"int8\", \"tile_size\": {\"3\": 4}}",
     2,
     {8, 16},
     "tile_size axis 3 is out of range for rank 2"},
    {"{\"weight_qtype\": \"int8\", \"tile_size\": {\"-1\": 4, \"1\": 4}}",
     2,
     {8, 16},
     "tile_size axis 1 names axis 1 again (rank 2)"},
    {"{\"weight_qtype\": \"int8\", \"contraction_axes\": [2], \"tile_size\": 4}",
     2,
     {8, 16},
     "contraction axis 2 is out of range for rank 2"},
    {"{\"weight_qtype\": \"int8\"}", 0, {0}, "contraction axis -1 is out of range for rank 0"},
};

START_TEST(test_how_errors)
{
    for (size_t i = 0; i < sizeof how_bad / sizeof how_bad[0]; i++) {
        quant_how how;
        quant_ck_error err;
        int64_t ss[4];
        quant_ck_status st =
            how_for(how_bad[i].rule, how_bad[i].rank, how_bad[i].shape, &how, ss, &err);
        ck_assert_msg(st == QUANT_CK_ERR_QUANT, "%s: status %d", how_bad[i].rule, st);
        ck_assert_msg(strstr(err.message, how_bad[i].want) != NULL, "%s:\n got  '%s'\n want '%s'",
                      how_bad[i].rule, err.message, how_bad[i].want);
    }
    quant_ruleset *rs = parse_ok("[{\"weight_qtype\": \"int8\"}]");
    quant_how how;
    quant_ck_error err;
    int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    ck_assert_int_eq(quant_rule_how(quant_ruleset_rule(rs, 0), "w", 9, shape, &how, &err),
                     QUANT_CK_ERR_QUANT);
    ck_assert_int_eq(quant_rule_how(NULL, "w", 2, shape, &how, &err), QUANT_CK_ERR_ARG);
    quant_ruleset_free(rs);
}
END_TEST

Suite *suite_rules(void)
{
    Suite *s = suite_create("rules");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_every_field);
    tcase_add_test(tc, test_empty_and_null);
    tcase_add_test(tc, test_first_match_wins);
    tcase_add_test(tc, test_full_match);
    tcase_add_test(tc, test_match_threads);
    tcase_add_test(tc, test_match_long_path);
    tcase_add_test(tc, test_match_pathological);
    tcase_add_test(tc, test_module_path);
    tcase_add_test(tc, test_bad_inputs);
    tcase_add_test(tc, test_message_without_source);
    tcase_add_test(tc, test_load);
    tcase_add_test(tc, test_how_shapes);
    tcase_add_test(tc, test_how_fields);
    tcase_add_test(tc, test_how_errors);
    suite_add_tcase(s, tc);
    return s;
}
