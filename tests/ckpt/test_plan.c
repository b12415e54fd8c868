/* test_plan.c -- the plan suite (SPEC section 10): quant_plan_path() on generated files. Unused
 * rules are the rules that are the first match of no tensor (a rule matching nothing, a rule
 * shadowed by an earlier one), while a rule that is the first match only of a copied tensor
 * (rank 1, not a float) is used; indices are 0-based; the report of the run lists the same ones;
 * per tensor the plan gives rule or reason, qtype, scale shape and output tensors, and its bytes
 * are the run's; the plan reads no tensor data (a file whose data is NaN plans, though the run
 * refuses it) and a header without its data plans as the whole file does; its JSON document.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckutil.h"
#include "quant_pipeline.h"

/* [4, 8] f32 "a.proj.weight" and "b.proj.weight", rank-1 "n.norm.weight", I32 [2, 2]
 * "tok.ids" (not a float), and [4, 8] "emb.weight"; the two proj weights are NaN when `nan`. */
static void make_file(const char *path, bool nan)
{
    float w[32], b[32], e[32], norm[8];
    int32_t ids[4] = {1, 2, 3, 4};
    ck_fill(w, 32, 1, 1.0f);
    ck_fill(b, 32, 2, 1.0f);
    ck_fill(e, 32, 3, 1.0f);
    ck_fill(norm, 8, 4, 1.0f);
    if (nan)
        for (int i = 0; i < 32; i++) w[i] = b[i] = NAN;
    kit_st_tensor t[] = {
        {"a.proj.weight", "F32", 2, {4, 8}, w, sizeof w},
        {"b.proj.weight", "F32", 2, {4, 8}, b, sizeof b},
        {"n.norm.weight", "F32", 1, {8}, norm, sizeof norm},
        {"tok.ids", "I32", 2, {2, 2}, ids, sizeof ids},
        {"emb.weight", "F32", 2, {4, 8}, e, sizeof e},
    };
    ck_gen_file(path, t, 5, NULL);
}

/* Rules: 0 matches nothing; 1 quantizes a.proj; 2 is shadowed by 1 (a.proj only); 3 is the first
 * match of the rank-1 norm only; 4 the first match of the I32 tensor only; 5 quantizes b.proj
 * with int4 and a tile; 6 ".*" catches emb (null weight_qtype: copied, but used). */
static const char rules_json[] =
    "[{\"module_path\":\"nothing\\\\.here\",\"weight_qtype\":\"int8\"},"
    " {\"module_path\":\"a\\\\.proj\",\"weight_qtype\":\"int8\"},"
    " {\"module_path\":\"a\\\\..*\",\"weight_qtype\":\"int4\"},"
    " {\"module_path\":\"n\\\\.norm\",\"weight_qtype\":\"int8\"},"
    " {\"module_path\":\"tok\",\"weight_qtype\":\"int8\"},"
    " {\"module_path\":\"b\\\\.proj\",\"weight_qtype\":\"int4\",\"tile_size\":4,"
    "  \"weight_calibration_method\":\"minmax\"},"
    " {\"module_path\":\".*\"}]";

typedef struct fixture {
    char *dir, *in;
    quant_ruleset *rules;
    quant_plan *plan;
} fixture;

static void setup(fixture *f, bool nan)
{
    f->dir = ck_tmpdir();
    f->in = kit_join(f->dir, "in.safetensors");
    make_file(f->in, nan);
    f->rules = ck_rules(rules_json);
    quant_ck_error err;
    quant_ck_status st = quant_plan_path(f->rules, f->in, NULL, &f->plan, &err);
    ck_assert_msg(st == QUANT_CK_OK, "%s", err.message);
}

static void teardown(fixture *f)
{
    quant_plan_free(f->plan);
    quant_ruleset_free(f->rules);
    kit_rmtree(f->dir);
    free(f->dir);
    free(f->in);
}

static const quant_plan_entry *entry(const quant_plan *p, const char *name)
{
    for (size_t i = 0; i < quant_plan_count(p); i++)
        if (strcmp(quant_plan_entry_at(p, i)->name, name) == 0) return quant_plan_entry_at(p, i);
    ck_abort_msg("no plan entry %s", name);
    return NULL;
}

static void expect_unused(const long *u, size_t n, const long *want, size_t n_want)
{
    ck_assert_uint_eq(n, n_want);
    for (size_t i = 0; i < n; i++) ck_assert_int_eq(u[i], want[i]);
}

START_TEST(test_unused_rules)
{
    fixture f;
    setup(&f, false);
    size_t n;
    const long *u = quant_plan_unused_rules(f.plan, &n);
    /* 0 matches nothing, 2 is shadowed by 1; 3 (rank 1 only), 4 (I32 only) and 6 (null
     * weight_qtype) are first matches, hence used; indices 0-based */
    expect_unused(u, n, (const long[]){0, 2}, 2);
    const quant_plan_entry *norm = entry(f.plan, "n.norm.weight");
    ck_assert(!norm->quantized);
    ck_assert_str_eq(norm->reason, "rank < 2");
    ck_assert_int_eq(norm->rule, -1);
    ck_assert_int_eq(norm->first_match, 3);
    const quant_plan_entry *ids = entry(f.plan, "tok.ids");
    ck_assert_str_eq(ids->reason, "not a float tensor");
    ck_assert_int_eq(ids->first_match, 4);
    const quant_plan_entry *emb = entry(f.plan, "emb.weight");
    ck_assert_str_eq(emb->reason, "rule has a null weight_qtype");
    ck_assert_int_eq(emb->rule, 6);
    ck_assert_int_eq(emb->first_match, 6);
    teardown(&f);
}
END_TEST

/* A rule set none of whose rules match: every index is unused. */
START_TEST(test_all_unused)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors");
    make_file(in, false);
    quant_ruleset *rs = ck_rules("[{\"module_path\":\"x\",\"weight_qtype\":\"int8\"},"
                                 "{\"module_path\":\"y\",\"weight_qtype\":\"int8\"}]");
    quant_plan *p = NULL;
    quant_ck_error err;
    /* a plan that quantizes nothing fails as the run would, unless allowed */
    ck_assert_int_eq(quant_plan_path(rs, in, NULL, &p, &err), QUANT_CK_ERR_RULES);
    ck_assert_msg(strstr(err.message, "nothing to quantize: the rules quantize none of the") &&
                      strstr(err.message, "rule 0 (module_path \"x\") matches no tensor; rule 1"),
                  "%s", err.message);
    ck_assert_ptr_null(p);
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.allow_nothing_quantized = true;
    ck_assert_int_eq(quant_plan_path(rs, in, &o, &p, &err), QUANT_CK_OK);
    size_t n;
    const long *u = quant_plan_unused_rules(p, &n);
    expect_unused(u, n, (const long[]){0, 1}, 2);
    for (size_t i = 0; i < quant_plan_count(p); i++) {
        ck_assert(!quant_plan_entry_at(p, i)->quantized);
        ck_assert_int_eq(quant_plan_entry_at(p, i)->first_match, -1);
    }
    quant_plan_free(p);
    quant_ruleset_free(rs);
    kit_rmtree(dir);
    free(dir);
    free(in);
}
END_TEST

START_TEST(test_entries)
{
    fixture f;
    setup(&f, false);
    ck_assert_uint_eq(quant_plan_count(f.plan), 5);
    ck_assert_int_eq(quant_plan_layout(f.plan), QUANT_LAYOUT_NATIVE);
    const quant_plan_entry *a = entry(f.plan, "a.proj.weight");
    ck_assert(a->quantized);
    ck_assert_ptr_null(a->reason);
    ck_assert_int_eq(a->rule, 1);
    ck_assert_int_eq(a->qtype, QUANT_QTYPE_INT8);
    ck_assert_int_eq(a->scale_shape[0], 4);
    ck_assert_int_eq(a->scale_shape[1], 1);
    ck_assert_uint_eq(a->n_outputs, 2);
    ck_assert_str_eq(a->outputs[0].name, "a.proj.weight.qvalue");
    ck_assert_int_eq(a->outputs[0].dtype, QUANT_ST_I8);
    ck_assert_uint_eq(a->outputs[0].bytes, 32);
    ck_assert_str_eq(a->outputs[1].name, "a.proj.weight.scale");
    ck_assert_uint_eq(a->outputs[1].bytes, 16);
    ck_assert_uint_eq(a->bytes_in, 128);
    ck_assert_uint_eq(a->bytes_out, 48);
    /* int4, tile 4, minmax: packed U8 [4, 4], scale and zero point [4, 2] */
    const quant_plan_entry *b = entry(f.plan, "b.proj.weight");
    ck_assert_int_eq(b->rule, 5);
    ck_assert_int_eq(b->scale_shape[1], 2);
    ck_assert_uint_eq(b->n_outputs, 3);
    ck_assert_str_eq(b->outputs[0].name, "b.proj.weight.qvalue");
    ck_assert_int_eq(b->outputs[0].dtype, QUANT_ST_U8);
    ck_assert_int_eq(b->outputs[0].shape[1], 4);
    ck_assert_str_eq(b->outputs[2].name, "b.proj.weight.zero_point");
    ck_assert_uint_eq(b->bytes_out, 16 + 32 + 8);
    const quant_plan_entry *norm = entry(f.plan, "n.norm.weight");
    ck_assert_uint_eq(norm->n_outputs, 1);
    ck_assert_str_eq(norm->outputs[0].name, "n.norm.weight");
    ck_assert_uint_eq(norm->bytes_out, 32);
    ck_assert_uint_eq(quant_plan_bytes_in(f.plan), 128 * 3 + 32 + 16);
    ck_assert_uint_eq(quant_plan_bytes_out(f.plan), 48 + 56 + 32 + 16 + 128);
    teardown(&f);
}
END_TEST

/* The run does what the plan says: the report's rule, bytes and unused rules are the plan's. */
START_TEST(test_plan_matches_run)
{
    fixture f;
    setup(&f, false);
    char *out = kit_join(f.dir, "out.safetensors");
    quant_report *rep = NULL;
    quant_ck_error err;
    quant_ck_status st = quant_quantize_path(f.rules, f.in, out, NULL, &rep, &err);
    ck_assert_msg(st == QUANT_CK_OK, "%s", err.message);
    ck_assert_uint_eq(quant_report_count(rep), quant_plan_count(f.plan));
    for (size_t i = 0; i < quant_report_count(rep); i++) {
        const quant_report_entry *e = quant_report_entry_at(rep, i);
        const quant_plan_entry *p = entry(f.plan, e->name);
        ck_assert_int_eq(e->quantized, p->quantized);
        ck_assert_int_eq(e->rule, p->rule);
        ck_assert_uint_eq(e->bytes_in, p->bytes_in);
        ck_assert_msg(e->bytes_out == p->bytes_out, "%s: run %llu, plan %llu", e->name,
                      (unsigned long long)e->bytes_out, (unsigned long long)p->bytes_out);
    }
    size_t n;
    const long *u = quant_report_unused_rules(rep, &n);
    expect_unused(u, n, (const long[]){0, 2}, 2);
    char *text = quant_report_json(rep);
    json_t *doc = json_loads(text, 0, NULL);
    json_t *unused = json_object_get(json_object_get(doc, "summary"), "unused_rules");
    ck_assert_uint_eq(json_array_size(unused), 2);
    ck_assert_int_eq(json_integer_value(json_array_get(unused, 0)), 0);
    ck_assert_int_eq(json_integer_value(json_array_get(unused, 1)), 2);
    json_decref(doc);
    free(text);
    quant_report_free(rep);
    free(out);
    teardown(&f);
}
END_TEST

/* The plan reads headers only: a file whose tensor data is NaN plans, while the run refuses it
 * (non-finite input, SPEC section 5). */
START_TEST(test_no_data_read)
{
    fixture f;
    setup(&f, true);
    ck_assert(entry(f.plan, "a.proj.weight")->quantized);
    char *out = kit_join(f.dir, "out.safetensors");
    quant_ck_error err;
    quant_ck_status st = quant_quantize_path(f.rules, f.in, out, NULL, NULL, &err);
    ck_assert_int_ne(st, QUANT_CK_OK);
    ck_assert_msg(strstr(err.message, "a.proj.weight"), "%s", err.message);
    free(out);
    teardown(&f);
}
END_TEST

/* What the run would fail with first is the plan's error, naming the tensor and rule. */
START_TEST(test_plan_errors)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors");
    make_file(in, false);
    quant_ruleset *rs = ck_rules("[{\"module_path\":\".*\",\"weight_qtype\":\"int8\","
                                 "\"tile_size\":3}]");
    quant_plan *p = (quant_plan *)1;
    quant_ck_error err;
    ck_assert_int_ne(quant_plan_path(rs, in, NULL, &p, &err), QUANT_CK_OK);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(err.message, "a.proj.weight") && strstr(err.message, "rule 0"), "%s",
                  err.message);
    /* every tensor the tile does not fit is named, not only the first */
    char want[4200];
    snprintf(want, sizeof want,
             "3 tensors cannot be planned: %s: tensor 'a.proj.weight': rule 0: axis 1 of size 8 "
             "cannot be tiled by 3 (not a divisor); the same for 'b.proj.weight', 'emb.weight'",
             in);
    ck_assert_str_eq(err.message, want);
    ck_assert_int_eq(quant_plan_path(rs, in, NULL, NULL, &err), QUANT_CK_ERR_ARG);
    quant_ruleset_free(rs);
    /* different reasons are grouped, each with its tensors */
    rs = ck_rules("[{\"module_path\":\"a\\\\.proj\",\"weight_qtype\":\"int8\",\"tile_size\":16},"
                  "{\"module_path\":\".*\",\"weight_qtype\":\"int8\",\"tile_size\":3}]");
    ck_assert_int_ne(quant_plan_path(rs, in, NULL, &p, &err), QUANT_CK_OK);
    ck_assert_msg(strstr(err.message, "3 tensors cannot be planned: ") &&
                      strstr(err.message, "tensor 'a.proj.weight': rule 0: tile 16 is larger than "
                                          "axis 1 (size 8)") &&
                      strstr(err.message, "; 'b.proj.weight', 'emb.weight': axis 1 of size 8 "
                                          "cannot be tiled by 3 (not a divisor)"),
                  "%s", err.message);
    quant_ruleset_free(rs);
    kit_rmtree(dir);
    free(dir);
    free(in);
}
END_TEST

/* A 5000-character tensor name is shortened in the message (its first bytes and its length), so
 * the reason after it survives the message's 1 KiB. */
START_TEST(test_long_name_keeps_reason)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors");
    char *name = malloc(5001);
    memset(name, 'x', 4990);
    strcpy(name + 4990, "ab.weight");
    float w[32];
    ck_fill(w, 32, 9, 1.0f);
    kit_st_tensor t[] = {{name, "F32", 2, {4, 8}, w, sizeof w}};
    ck_gen_file(in, t, 1, NULL);
    quant_ruleset *rs = ck_rules("[{\"weight_qtype\":\"int8\",\"tile_size\":3}]");
    quant_plan *p = NULL;
    quant_ck_error err;
    ck_assert_int_ne(quant_plan_path(rs, in, NULL, &p, &err), QUANT_CK_OK);
    ck_assert_msg(strstr(err.message, "xxx...[4999 bytes]': rule 0: axis 1 of size 8 cannot be "
                                      "tiled by 3 (not a divisor)"),
                  "%s", err.message);
    ck_assert_uint_lt(strlen(err.message), 400);
    quant_ruleset_free(rs);
    free(name);
    kit_rmtree(dir);
    free(dir);
    free(in);
}
END_TEST

START_TEST(test_json)
{
    fixture f;
    setup(&f, false);
    char *text = quant_plan_json(f.plan);
    json_error_t je;
    json_t *doc = json_loads(text, 0, &je);
    ck_assert_msg(doc, "%s", je.text);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "format")), "quantd.plan/1");
    ck_assert_str_eq(json_string_value(json_object_get(doc, "layout")), "native");
    json_t *summary = json_object_get(doc, "summary");
    ck_assert_int_eq(json_integer_value(json_object_get(summary, "tensors")), 5);
    ck_assert_int_eq(json_integer_value(json_object_get(summary, "quantized")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(summary, "bytes_out")),
                     (json_int_t)quant_plan_bytes_out(f.plan));
    json_t *unused = json_object_get(summary, "unused_rules");
    ck_assert_uint_eq(json_array_size(unused), 2);
    ck_assert_int_eq(json_integer_value(json_array_get(unused, 1)), 2);
    json_t *t = json_array_get(json_object_get(doc, "tensors"), 2); /* n.norm.weight */
    ck_assert_str_eq(json_string_value(json_object_get(t, "name")), "n.norm.weight");
    ck_assert_str_eq(json_string_value(json_object_get(t, "action")), "copied");
    ck_assert(json_is_null(json_object_get(t, "rule")));
    ck_assert_int_eq(json_integer_value(json_object_get(t, "first_match")), 3);
    ck_assert_str_eq(json_string_value(json_object_get(t, "reason")), "rank < 2");
    t = json_array_get(json_object_get(doc, "tensors"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(t, "qtype")), "int8");
    ck_assert_uint_eq(json_array_size(json_object_get(t, "outputs")), 2);
    ck_assert_ptr_null(json_object_get(doc, "static_activations"));
    json_decref(doc);
    free(text);
    teardown(&f);
}
END_TEST

/* compressed-tensors: the plan names that layout's output tensors. */
START_TEST(test_ctensors_layout)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors");
    make_file(in, false);
    quant_ruleset *rs = ck_rules("[{\"module_path\":\"a\\\\.proj\",\"weight_qtype\":\"int8\"}]");
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.layout = QUANT_LAYOUT_CTENSORS;
    quant_plan *p = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_plan_path(rs, in, &o, &p, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_int_eq(quant_plan_layout(p), QUANT_LAYOUT_CTENSORS);
    const quant_plan_entry *a = entry(p, "a.proj.weight");
    ck_assert(a->quantized);
    bool scale = false;
    for (size_t i = 0; i < a->n_outputs; i++)
        scale = scale || strcmp(a->outputs[i].name, "a.proj.weight_scale") == 0;
    ck_assert_msg(scale, "no a.proj.weight_scale among %zu outputs", a->n_outputs);
    quant_plan_free(p);
    quant_ruleset_free(rs);
    kit_rmtree(dir);
    free(dir);
    free(in);
}
END_TEST

/* The first 8 + header-length bytes of `path` into `to`: a header without its data. */
static void write_header_only(const char *path, const char *to)
{
    size_t n = 0;
    unsigned char *bytes = kit_read_file(path, &n);
    ck_assert_ptr_nonnull(bytes);
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = len << 8 | bytes[i];
    ck_write_file(to, bytes, (size_t)(8 + len));
    free(bytes);
}

/* A header alone plans (quant_st_open_header_fd + quant_plan_file) as the whole file does, while
 * quant_st_open refuses it as truncated. */
START_TEST(test_header_only)
{
    fixture f;
    setup(&f, false);
    char *hdr = kit_join(f.dir, "header.bin");
    write_header_only(f.in, hdr);
    quant_st_file *st = NULL;
    quant_ck_error err;
    ck_assert_int_eq(quant_st_open(hdr, &st, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "truncated"), "%s", err.message);
    int fd = open(hdr, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_msg(quant_st_open_header_fd(fd, "in.safetensors", &st, &err) == QUANT_CK_OK, "%s",
                  err.message);
    quant_plan *p = NULL;
    ck_assert_msg(quant_plan_file(f.rules, st, NULL, &p, &err) == QUANT_CK_OK, "%s", err.message);
    char *a = quant_plan_json(p), *b = quant_plan_json(f.plan);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    quant_plan_free(p);
    /* reading data it does not hold fails */
    float x;
    const quant_st_tensor *t = quant_st_find(st, "a.proj.weight");
    ck_assert_int_ne(quant_st_read(st, t, 0, &x, sizeof x, &err), QUANT_CK_OK);
    quant_st_close(st);
    ck_assert_int_eq(quant_plan_file(f.rules, NULL, NULL, &p, &err), QUANT_CK_ERR_ARG);
    teardown(&f);
    free(hdr);
}
END_TEST

Suite *suite_plan(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, test_unused_rules);
    tcase_add_test(tc, test_all_unused);
    tcase_add_test(tc, test_entries);
    tcase_add_test(tc, test_plan_matches_run);
    tcase_add_test(tc, test_no_data_read);
    tcase_add_test(tc, test_plan_errors);
    tcase_add_test(tc, test_long_name_keeps_reason);
    tcase_add_test(tc, test_json);
    tcase_add_test(tc, test_ctensors_layout);
    tcase_add_test(tc, test_header_only);
    suite_add_tcase(s, tc);
    return s;
}
