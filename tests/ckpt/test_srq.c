/* test_srq.c -- static activation scales (SRQ) in the pipeline: ACT_scale and ACT_zero_point in a
 * single file and across the shards of a directory (names, dtypes, shapes, values, the index,
 * the `quantization` metadata, the report), input_scale in the compressed-tensors layout, and
 * the refusals: act_static_scale without statistics, bad scales, zero points, rules and names,
 * and what compressed-tensors cannot express.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckutil.h"
#include "quant_pipeline.h"

#define SRQ_RULES                                                                                  \
    "[{\"module_path\":\"m\\\\.q\",\"weight_qtype\":\"int8\",\"act_qtype\":\"int8\","              \
    "\"act_static_scale\":true},"                                                                  \
    " {\"module_path\":\"m\\\\.k\",\"weight_qtype\":\"int8\",\"act_qtype\":\"int16\","             \
    "\"act_static_scale\":true},"                                                                  \
    " {\"module_path\":\"u\",\"act_qtype\":\"uint8\",\"act_static_scale\":true}]"

/* Tensor `name` of the safetensors file `path`: its header entry, and its bytes in *data (caller
 * frees) when data is not NULL. Fails the test when missing. */
static quant_st_tensor read_tensor(const char *path, const char *name, void **data)
{
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_open(path, &f, &err) == QUANT_CK_OK, "%s", err.message);
    const quant_st_tensor *t = quant_st_find(f, name);
    ck_assert_msg(t != NULL, "%s: no tensor %s", path, name);
    quant_st_tensor copy = *t;
    copy.name = NULL;
    if (data) {
        *data = malloc((size_t)quant_st_nbytes(t) + 1);
        ck_assert_int_eq(quant_st_read(f, t, 0, *data, (size_t)quant_st_nbytes(t), NULL),
                         QUANT_CK_OK);
    }
    quant_st_close(f);
    return copy;
}

/* The `quantization` metadata of a native output file, parsed. */
static json_t *quant_meta(const char *path)
{
    quant_st_file *f = NULL;
    ck_assert_int_eq(quant_st_open(path, &f, NULL), QUANT_CK_OK);
    const char *text = quant_st_meta(f, "quantization");
    ck_assert_ptr_nonnull(text);
    json_t *doc = json_loads(text, 0, NULL);
    quant_st_close(f);
    ck_assert_ptr_nonnull(doc);
    return doc;
}

static void expect_shape(const quant_st_tensor *t, int rank, const int64_t *shape)
{
    ck_assert_int_eq(t->rank, rank);
    for (int i = 0; i < rank; i++) ck_assert_int_eq(t->shape[i], shape[i]);
}

/* A model: m.q.weight [8, 16], m.k.weight [8, 16], m.q.bias [8], u.norm.weight [16]. */
static void make_model(const char *path)
{
    float q[8 * 16], k[8 * 16], bias[8], norm[16];
    ck_fill(q, 128, 1, 1.0f);
    ck_fill(k, 128, 2, 1.0f);
    ck_fill(bias, 8, 3, 1.0f);
    ck_fill(norm, 16, 4, 1.0f);
    kit_st_tensor t[] = {{"m.q.weight", "F32", 2, {8, 16}, q, sizeof q},
                         {"m.q.bias", "F32", 1, {8}, bias, sizeof bias},
                         {"m.k.weight", "F32", 2, {8, 16}, k, sizeof k},
                         {"u.norm.weight", "F32", 1, {16}, norm, sizeof norm}};
    ck_gen_file(path, t, 4, "{\"format\":\"pt\"}");
}

/* The activations of SRQ_RULES: a symmetric scalar (int8, rule 0), an asymmetric [1, 4] (int16,
 * rule 1) and an asymmetric [2] (uint8, rule 2; a module with no weight quantized). */
static const float sym_scale[1] = {0.03125f};
static const float k_scale[4] = {0.5f, 0.25f, 1.0f, 2.0f};
static const int32_t k_zp[4] = {-32768, -7, 0, 32767};
static const float u_scale[2] = {0.125f, 3.0f};
static const int32_t u_zp[2] = {0, 255};

static void srq_acts(quant_static_act acts[3])
{
    acts[0] = (quant_static_act){.name = "m/q/dot_general0_lhs",
                                 .tensor_base = "m.q.dot_general0_lhs",
                                 .rule = 0,
                                 .qtype = QUANT_QTYPE_INT8,
                                 .rank = 0,
                                 .scale = sym_scale};
    acts[1] = (quant_static_act){.name = "m/k/dot_general0_lhs",
                                 .tensor_base = "m.k.dot_general0_lhs",
                                 .rule = 1,
                                 .qtype = QUANT_QTYPE_INT16,
                                 .rank = 2,
                                 .shape = {1, 4},
                                 .scale = k_scale,
                                 .zero_point = k_zp};
    acts[2] = (quant_static_act){.name = "u/einsum0_rhs",
                                 .tensor_base = "u.einsum0_rhs",
                                 .rule = 2,
                                 .qtype = QUANT_QTYPE_UINT8,
                                 .rank = 1,
                                 .shape = {2},
                                 .scale = u_scale,
                                 .zero_point = u_zp};
}

static void srq_options(quant_pipeline_options *o, const quant_static_act *acts, size_t n)
{
    quant_pipeline_options_init(o);
    o->chunk_bytes = 64u << 10;
    o->static_acts = acts;
    o->n_static_acts = n;
}

/* The three activations' tensors in `path`, with their values. */
static void expect_act_tensors(const char *path)
{
    void *data;
    quant_st_tensor t = read_tensor(path, "m.q.dot_general0_lhs_scale", &data);
    ck_assert_int_eq(t.dtype, QUANT_ST_F32);
    ck_assert_int_eq(t.rank, 0);
    ck_assert_mem_eq(data, sym_scale, sizeof sym_scale);
    free(data);
    ck_assert(!ck_has_tensor(path, "m.q.dot_general0_lhs_zero_point"));
    int64_t k_shape[2] = {1, 4}, u_shape[1] = {2};
    t = read_tensor(path, "m.k.dot_general0_lhs_scale", &data);
    ck_assert_int_eq(t.dtype, QUANT_ST_F32);
    expect_shape(&t, 2, k_shape);
    ck_assert_mem_eq(data, k_scale, sizeof k_scale);
    free(data);
    t = read_tensor(path, "m.k.dot_general0_lhs_zero_point", &data);
    ck_assert_int_eq(t.dtype, QUANT_ST_I16); /* SPEC section 7: I16 for int16 */
    expect_shape(&t, 2, k_shape);
    const int16_t want_k[4] = {-32768, -7, 0, 32767};
    ck_assert_mem_eq(data, want_k, sizeof want_k);
    free(data);
    t = read_tensor(path, "u.einsum0_rhs_scale", &data);
    expect_shape(&t, 1, u_shape);
    ck_assert_mem_eq(data, u_scale, sizeof u_scale);
    free(data);
    t = read_tensor(path, "u.einsum0_rhs_zero_point", &data);
    ck_assert_int_eq(t.dtype, QUANT_ST_U8); /* U8 for uints */
    const uint8_t want_u[2] = {0, 255};
    ck_assert_mem_eq(data, want_u, sizeof want_u);
    free(data);
}

START_TEST(test_file_static_acts)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.st");
    make_model(in);
    quant_static_act acts[3];
    srq_acts(acts);
    quant_pipeline_options o;
    srq_options(&o, acts, 3);
    quant_report *rep = NULL;
    quant_ck_error err;
    ck_assert_msg(ck_quantize(SRQ_RULES, in, out, &o, &rep, &err) == QUANT_CK_OK, "%s",
                  err.message);
    expect_act_tensors(out);
    /* the weights are quantized as usual, and say their activations are static */
    ck_assert(ck_has_tensor(out, "m.q.weight.qvalue"));
    ck_assert(ck_has_tensor(out, "m.k.weight.scale"));
    json_t *meta = quant_meta(out);
    json_t *q = json_object_get(json_object_get(meta, "tensors"), "m.q.weight");
    ck_assert(json_is_true(json_object_get(q, "act_static")));
    ck_assert_str_eq(json_string_value(json_object_get(q, "act_qtype")), "int8");
    json_t *sa = json_object_get(meta, "static_activations");
    ck_assert_int_eq(json_object_size(sa), 3);
    json_t *k = json_object_get(sa, "m.k.dot_general0_lhs");
    ck_assert_str_eq(json_string_value(json_object_get(k, "qtype")), "int16");
    ck_assert_int_eq(json_integer_value(json_object_get(k, "rule")), 1);
    ck_assert(json_is_true(json_object_get(k, "asymmetric")));
    json_decref(meta);
    /* the report lists what was written */
    ck_assert_uint_eq(quant_report_static_count(rep), 3);
    const quant_report_static_act *ra = quant_report_static_at(rep, 1);
    ck_assert_str_eq(ra->name, "m/k/dot_general0_lhs");
    ck_assert_str_eq(ra->scale, "m.k.dot_general0_lhs_scale");
    ck_assert_str_eq(ra->zero_point, "m.k.dot_general0_lhs_zero_point");
    ck_assert_ptr_null(quant_report_static_at(rep, 0)->zero_point);
    char *text = quant_report_json(rep);
    json_t *doc = json_loads(text, 0, NULL);
    json_t *written = json_object_get(json_object_get(doc, "static_activations"), "written");
    ck_assert_int_eq(json_array_size(written), 3);
    json_t *w0 = json_array_get(written, 0);
    ck_assert_str_eq(json_string_value(json_object_get(w0, "name")), "m/q/dot_general0_lhs");
    ck_assert_str_eq(json_string_value(json_object_get(w0, "shard")), "in.safetensors");
    ck_assert_str_eq(json_string_value(json_object_get(w0, "scale")), "m.q.dot_general0_lhs_scale");
    ck_assert(json_is_null(json_object_get(w0, "zero_point")));
    ck_assert_int_eq(json_array_size(json_object_get(w0, "shape")), 0);
    json_decref(doc);
    free(text);
    quant_report_free(rep);
    kit_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

/* A two-shard checkpoint: shard 1 holds m.q.*, shard 2 m.k.* and u.norm.weight. */
static char *make_sharded(const char *root)
{
    char *in = kit_join(root, "in");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    float q[8 * 16], k[8 * 16], norm[16];
    ck_fill(q, 128, 1, 1.0f);
    ck_fill(k, 128, 2, 1.0f);
    ck_fill(norm, 16, 4, 1.0f);
    kit_st_tensor s1[] = {{"m.q.weight", "F32", 2, {8, 16}, q, sizeof q}};
    kit_st_tensor s2[] = {{"m.k.weight", "F32", 2, {8, 16}, k, sizeof k},
                          {"u.norm.weight", "F32", 1, {16}, norm, sizeof norm}};
    char *p1 = kit_join(in, "model-00001-of-00002.safetensors");
    char *p2 = kit_join(in, "model-00002-of-00002.safetensors");
    char *idx = kit_join(in, "model.safetensors.index.json");
    ck_gen_file(p1, s1, 1, NULL);
    ck_gen_file(p2, s2, 2, NULL);
    const char *index = "{\"metadata\":{\"total_size\":1088},\"weight_map\":{"
                        "\"m.q.weight\":\"model-00001-of-00002.safetensors\","
                        "\"m.k.weight\":\"model-00002-of-00002.safetensors\","
                        "\"u.norm.weight\":\"model-00002-of-00002.safetensors\"}}";
    ck_write_file(idx, index, strlen(index));
    free(p1);
    free(p2);
    free(idx);
    return in;
}

START_TEST(test_dir_static_acts)
{
    char *root = ck_tmpdir(), *in = make_sharded(root), *out = kit_join(root, "out");
    quant_static_act acts[4];
    srq_acts(acts);
    /* a module no tensor belongs to: the last shard */
    static const float lone[1] = {4.0f};
    acts[3] = (quant_static_act){.tensor_base = "nowhere.dot_general0_lhs",
                                 .rule = -1,
                                 .qtype = QUANT_QTYPE_INT8,
                                 .scale = lone};
    quant_pipeline_options o;
    srq_options(&o, acts, 4);
    quant_report *rep = NULL;
    quant_ck_error err;
    ck_assert_msg(ck_quantize(SRQ_RULES, in, out, &o, &rep, &err) == QUANT_CK_OK, "%s",
                  err.message);
    char *s1 = kit_join(out, "model-00001-of-00002.safetensors");
    char *s2 = kit_join(out, "model-00002-of-00002.safetensors");
    ck_assert(ck_has_tensor(s1, "m.q.dot_general0_lhs_scale"));
    ck_assert(!ck_has_tensor(s2, "m.q.dot_general0_lhs_scale"));
    ck_assert(ck_has_tensor(s2, "m.k.dot_general0_lhs_zero_point"));
    ck_assert(!ck_has_tensor(s1, "m.k.dot_general0_lhs_scale"));
    ck_assert(ck_has_tensor(s2, "u.einsum0_rhs_scale"));
    ck_assert(ck_has_tensor(s2, "nowhere.dot_general0_lhs_scale"));
    void *data;
    read_tensor(s1, "m.q.dot_general0_lhs_scale", &data);
    ck_assert_mem_eq(data, sym_scale, sizeof sym_scale);
    free(data);
    /* each shard's metadata names its own activations */
    json_t *meta = quant_meta(s1);
    ck_assert_int_eq(json_object_size(json_object_get(meta, "static_activations")), 1);
    json_decref(meta);
    meta = quant_meta(s2);
    ck_assert_int_eq(json_object_size(json_object_get(meta, "static_activations")), 3);
    json_t *lone_meta =
        json_object_get(json_object_get(meta, "static_activations"), "nowhere.dot_general0_lhs");
    ck_assert(json_is_null(json_object_get(lone_meta, "rule")));
    json_decref(meta);
    /* the index lists them with their shards, and counts their bytes */
    char *idx = kit_join(out, "model.safetensors.index.json");
    json_t *index = json_load_file(idx, 0, NULL);
    ck_assert_ptr_nonnull(index);
    json_t *wm = json_object_get(index, "weight_map");
    ck_assert_str_eq(json_string_value(json_object_get(wm, "m.q.dot_general0_lhs_scale")),
                     "model-00001-of-00002.safetensors");
    ck_assert_str_eq(json_string_value(json_object_get(wm, "m.k.dot_general0_lhs_zero_point")),
                     "model-00002-of-00002.safetensors");
    ck_assert_str_eq(json_string_value(json_object_get(wm, "u.einsum0_rhs_zero_point")),
                     "model-00002-of-00002.safetensors");
    ck_assert_str_eq(json_string_value(json_object_get(wm, "nowhere.dot_general0_lhs_scale")),
                     "model-00002-of-00002.safetensors");
    /* weights: 2 x (128 codes + 8 scales * 4); norm 64; acts 4 + (16 + 8) + (8 + 2) + 4 */
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(index, "metadata"), "total_size")),
        2 * (128 + 32) + 64 + 4 + 24 + 10 + 4);
    json_decref(index);
    ck_assert_uint_eq(quant_report_static_count(rep), 4);
    ck_assert_str_eq(quant_report_static_at(rep, 0)->shard, "model-00001-of-00002.safetensors");
    ck_assert_str_eq(quant_report_static_at(rep, 3)->shard, "model-00002-of-00002.safetensors");
    quant_report_free(rep);
    free(idx);
    free(s1);
    free(s2);
    kit_rmtree(root);
    free(root);
    free(in);
    free(out);
}
END_TEST

/* ---- refusals -------------------------------------------------------------------------------- */

START_TEST(test_static_rule_needs_stats)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.st");
    make_model(in);
    quant_ck_error err;
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    /* no statistics: refused offline, nothing written */
    ck_assert_int_eq(ck_quantize(SRQ_RULES, in, out, &o, NULL, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "act_static_scale"));
    ck_assert_ptr_nonnull(strstr(err.message, "m.q.weight"));
    ck_assert_int_eq(ck_count_entries(dir), 1);
    /* allowed with none at all: the weights alone, still marked static; the report says so */
    o.allow_static_acts = true;
    quant_report *rep = NULL;
    ck_assert_msg(ck_quantize(SRQ_RULES, in, out, &o, &rep, &err) == QUANT_CK_OK, "%s",
                  err.message);
    json_t *meta = quant_meta(out);
    ck_assert(json_is_true(json_object_get(
        json_object_get(json_object_get(meta, "tensors"), "m.k.weight"), "act_static")));
    ck_assert_ptr_null(json_object_get(meta, "static_activations"));
    json_decref(meta);
    char *text = quant_report_json(rep);
    json_t *doc = json_loads(text, 0, NULL);
    ck_assert_int_eq(
        json_array_size(json_object_get(json_object_get(doc, "static_activations"), "written")), 0);
    json_decref(doc);
    free(text);
    quant_report_free(rep);
    /* a run without static activations has no such key */
    remove(out);
    o.allow_static_acts = false;
    rep = NULL;
    ck_assert_int_eq(ck_quantize("[{\"module_path\":\"m\\\\..*\",\"weight_qtype\":\"int8\"}]", in,
                                 out, &o, &rep, &err),
                     QUANT_CK_OK);
    text = quant_report_json(rep);
    ck_assert_ptr_null(strstr(text, "static_activations"));
    free(text);
    quant_report_free(rep);
    kit_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

/* Runs SRQ_RULES on the model with one changed activation; expects `status` with `text` in the
 * message and nothing written. */
static void expect_refused(const quant_static_act *bad, size_t n, quant_ck_status status,
                           const char *text)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.st");
    make_model(in);
    quant_pipeline_options o;
    srq_options(&o, bad, n);
    quant_ck_error err;
    quant_ck_status st = ck_quantize(SRQ_RULES, in, out, &o, NULL, &err);
    ck_assert_msg(st == status, "status %d, wanted %d: %s", (int)st, (int)status,
                  st ? err.message : "");
    ck_assert_msg(strstr(err.message, text) != NULL, "'%s' not in: %s", text, err.message);
    ck_assert_int_eq(ck_count_entries(dir), 1);
    kit_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}

START_TEST(test_bad_static_acts)
{
    quant_static_act acts[3];
    static const float zero[1] = {0.0f}, nan[1] = {__builtin_nanf("")};
    static const int32_t zp_big[4] = {0, 0, 0, 40000}, zp_one[1] = {3};
    srq_acts(acts);
    acts[0].scale = zero;
    expect_refused(acts, 3, QUANT_CK_ERR_ARG, "scale element 0 is 0");
    acts[0].scale = nan;
    expect_refused(acts, 3, QUANT_CK_ERR_ARG, "not positive and finite");
    srq_acts(acts);
    acts[1].zero_point = zp_big;
    expect_refused(acts, 3, QUANT_CK_ERR_ARG, "zero point element 3 is 40000");
    srq_acts(acts);
    acts[0].qtype = QUANT_QTYPE_FP8_E4M3FN;
    acts[0].rule = -1;
    acts[0].zero_point = zp_one;
    expect_refused(acts, 3, QUANT_CK_ERR_ARG, "symmetric only");
    srq_acts(acts);
    acts[0].rule = 7;
    expect_refused(acts, 3, QUANT_CK_ERR_ARG, "no rule 7");
    srq_acts(acts);
    acts[0].qtype = QUANT_QTYPE_INT4;
    expect_refused(acts, 3, QUANT_CK_ERR_ARG, "not the act_qtype of rule 0");
    srq_acts(acts);
    acts[0].tensor_base = "";
    expect_refused(acts, 3, QUANT_CK_ERR_ARG, "m/q/dot_general0_lhs");
    /* two activations with one output name, or one taking an input tensor's name */
    srq_acts(acts);
    acts[2].tensor_base = acts[0].tensor_base;
    acts[2].rule = 0;
    acts[2].qtype = QUANT_QTYPE_INT8;
    acts[2].zero_point = NULL;
    expect_refused(acts, 3, QUANT_CK_ERR_ARG, "'m.q.dot_general0_lhs_scale' is already");
    /* an activation whose BASE_scale is the name of an input tensor */
    srq_acts(acts);
    acts[0].tensor_base = "u.norm";
    acts[0].rule = -1;
    acts[0].name = NULL;
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.st");
    float v[4] = {1, 2, 3, 4};
    kit_st_tensor t[] = {{"u.norm_scale", "F32", 1, {4}, v, sizeof v}};
    ck_gen_file(in, t, 1, NULL);
    quant_pipeline_options o;
    srq_options(&o, acts, 1);
    quant_ck_error err;
    ck_assert_int_eq(ck_quantize(SRQ_RULES, in, out, &o, NULL, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "output tensor 'u.norm_scale' is already"));
    ck_assert_int_eq(ck_count_entries(dir), 1);
    kit_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

/* ---- compressed-tensors: input_scale ----------------------------------------------------------
 */

#define CT_RULES                                                                                   \
    "[{\"module_path\":\"layer\\\\.proj\",\"weight_qtype\":\"int8\",\"act_qtype\":\"int8\","       \
    "\"act_static_scale\":true}]"

/* A directory with config.json and one shard: layer.proj.weight [8, 16], lm_head.weight [4, 8]. */
static char *make_ct_input(const char *root)
{
    char *in = kit_join(root, "in");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    float w[8 * 16], head[4 * 8];
    ck_fill(w, 128, 5, 1.0f);
    ck_fill(head, 32, 6, 1.0f);
    kit_st_tensor t[] = {{"layer.proj.weight", "F32", 2, {8, 16}, w, sizeof w},
                         {"lm_head.weight", "F32", 2, {4, 8}, head, sizeof head}};
    char *shard = kit_join(in, "model.safetensors"), *cfg = kit_join(in, "config.json");
    ck_gen_file(shard, t, 2, NULL);
    ck_write_file(cfg, "{\"model_type\":\"llama\"}", 22);
    free(shard);
    free(cfg);
    return in;
}

static quant_ck_status ct_run(const char *root, const char *rules, const quant_static_act *acts,
                              size_t n, bool allow, quant_ck_error *err)
{
    char *in = kit_join(root, "in"), *out = kit_join(root, "out");
    kit_rmtree(out);
    quant_pipeline_options o;
    srq_options(&o, acts, n);
    o.layout = QUANT_LAYOUT_CTENSORS;
    o.allow_static_acts = allow;
    quant_ck_status st = ck_quantize(rules, in, out, &o, NULL, err);
    free(in);
    free(out);
    return st;
}

START_TEST(test_ct_input_scale)
{
    char *root = ck_tmpdir(), *in = make_ct_input(root);
    static const float s[1] = {0.0625f};
    static const int32_t zp[1] = {-5};
    quant_static_act act = {.name = "layer/proj/dot_general0_lhs",
                            .tensor_base = "layer.proj.dot_general0_lhs",
                            .rule = 0,
                            .qtype = QUANT_QTYPE_INT8,
                            .rank = 2,
                            .shape = {1, 1},
                            .scale = s};
    quant_ck_error err;
    ck_assert_msg(ct_run(root, CT_RULES, &act, 1, false, &err) == QUANT_CK_OK, "%s", err.message);
    char *shard = kit_join(root, "out/model.safetensors"),
         *cfgp = kit_join(root, "out/config.json");
    void *data;
    quant_st_tensor t = read_tensor(shard, "layer.proj.input_scale", &data);
    int64_t one = 1;
    ck_assert_int_eq(t.dtype, QUANT_ST_F32);
    expect_shape(&t, 1, &one);
    ck_assert_mem_eq(data, s, sizeof s);
    free(data);
    ck_assert(!ck_has_tensor(shard, "layer.proj.input_zero_point"));
    ck_assert(!ck_has_tensor(shard, "layer.proj.dot_general0_lhs_scale"));
    json_t *cfg = json_load_file(cfgp, 0, NULL);
    json_t *g = json_object_get(
        json_object_get(json_object_get(cfg, "quantization_config"), "config_groups"), "group_0");
    json_t *ia = json_object_get(g, "input_activations");
    ck_assert_str_eq(json_string_value(json_object_get(ia, "strategy")), "tensor");
    ck_assert(json_is_false(json_object_get(ia, "dynamic")));
    ck_assert(json_is_true(json_object_get(ia, "symmetric")));
    json_decref(cfg);
    /* asymmetric: input_zero_point I8 [1], symmetric false */
    act.zero_point = zp;
    ck_assert_msg(ct_run(root, CT_RULES, &act, 1, false, &err) == QUANT_CK_OK, "%s", err.message);
    t = read_tensor(shard, "layer.proj.input_zero_point", &data);
    ck_assert_int_eq(t.dtype, QUANT_ST_I8);
    expect_shape(&t, 1, &one);
    ck_assert_int_eq(((int8_t *)data)[0], -5);
    free(data);
    cfg = json_load_file(cfgp, 0, NULL);
    g = json_object_get(
        json_object_get(json_object_get(cfg, "quantization_config"), "config_groups"), "group_0");
    ck_assert(json_is_false(json_object_get(json_object_get(g, "input_activations"), "symmetric")));
    json_decref(cfg);
    free(shard);
    free(cfgp);
    kit_rmtree(root);
    free(root);
    free(in);
}
END_TEST

START_TEST(test_ct_refusals)
{
    char *root = ck_tmpdir(), *in = make_ct_input(root), *out = kit_join(root, "out");
    static const float s2[2] = {0.5f, 0.25f}, s1[1] = {0.5f};
    quant_static_act act = {.tensor_base = "layer.proj.dot_general0_lhs",
                            .rule = 0,
                            .qtype = QUANT_QTYPE_INT8,
                            .rank = 1,
                            .shape = {2},
                            .scale = s2};
    quant_ck_error err;
    /* more than one value */
    ck_assert_int_eq(ct_run(root, CT_RULES, &act, 1, false, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "per tensor"));
    ck_assert_int_eq(access(out, F_OK), -1);
    /* no weight of that module */
    act.shape[0] = 1;
    act.scale = s1;
    act.tensor_base = "attn.einsum0_lhs";
    act.rule = -1;
    ck_assert_int_eq(ct_run(root, CT_RULES, &act, 1, false, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "'attn.weight'"));
    /* a weight that is not quantized by an act_static_scale rule */
    act.tensor_base = "lm_head.dot_general0_lhs";
    ck_assert_int_eq(ct_run(root, CT_RULES, &act, 1, false, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "lm_head"));
    /* two activations for one weight */
    quant_static_act two[2] = {act, act};
    two[0].tensor_base = "layer.proj.dot_general0_lhs";
    two[1].tensor_base = "layer.proj.dot_general1_lhs";
    two[0].rule = two[1].rule = 0;
    ck_assert_int_eq(ct_run(root, CT_RULES, two, 2, false, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "two activations"));
    /* an SRQ weight without its activation */
    ck_assert_int_eq(ct_run(root, CT_RULES, NULL, 0, true, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "layer.proj.weight"));
    ck_assert_ptr_nonnull(strstr(err.message, "input_scale"));
    ck_assert_int_eq(access(out, F_OK), -1);
    kit_rmtree(root);
    free(root);
    free(in);
    free(out);
}
END_TEST

Suite *suite_srq_ckpt(void)
{
    Suite *s = suite_create("srq_ckpt");
    TCase *tc = tcase_create("srq");
    tcase_add_test(tc, test_file_static_acts);
    tcase_add_test(tc, test_dir_static_acts);
    tcase_add_test(tc, test_static_rule_needs_stats);
    tcase_add_test(tc, test_bad_static_acts);
    tcase_add_test(tc, test_ct_input_scale);
    tcase_add_test(tc, test_ct_refusals);
    suite_add_tcase(s, tc);
    return s;
}
