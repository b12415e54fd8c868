/* test_ctensors.c -- the compressed-tensors layout: tensor names, shapes and dtypes per scheme
 * (pack-quantized, int-quantized, float-quantized; channel, group, block, tensor), int32 packing
 * of codes (odd and word-straddling widths) and zero points, quantization_config in config.json,
 * and clear refusals of what the format cannot express.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ck_internal.h"
#include "ckutil.h"

typedef struct ct_case {
    const char *rules;
    int64_t rows, cols;
} ct_case;

/* Quantizes a one-weight file "layer.proj.weight" [rows, cols] (plus "lm_head.weight") in a
 * directory with config.json into `out`; returns the status, the report in `*rep` (NULL: none). */
static quant_ck_status ct_run_report(const char *root, const char *rules, int64_t rows,
                                     int64_t cols, quant_report **rep, quant_ck_error *err)
{
    char *in = kit_join(root, "in"), *out = kit_join(root, "out");
    kit_rmtree(in);
    kit_rmtree(out);
    ck_assert_int_eq(mkdir(in, 0755), 0);
    size_t n = (size_t)(rows * cols);
    float *w = malloc(n * sizeof *w), head[4 * 8];
    ck_fill(w, n, 21, 1.0f);
    ck_fill(head, 32, 22, 1.0f);
    kit_st_tensor t[] = {{"layer.proj.weight", "F32", 2, {rows, cols}, w, n * sizeof *w},
                         {"lm_head.weight", "F32", 2, {4, 8}, head, sizeof head}};
    char *shard = kit_join(in, "model.safetensors"), *cfg = kit_join(in, "config.json");
    ck_gen_file(shard, t, 2, NULL);
    ck_write_file(cfg, "{\"model_type\":\"llama\"}", 22);
    quant_ruleset *rs = NULL;
    ck_assert_int_eq(quant_ruleset_parse(rules, strlen(rules), "t", &rs, err), QUANT_CK_OK);
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.layout = QUANT_LAYOUT_CTENSORS;
    o.chunk_bytes = 64u << 10;
    quant_ck_status st = quant_quantize_path(rs, in, out, &o, rep, err);
    quant_ruleset_free(rs);
    free(w);
    free(shard);
    free(cfg);
    free(in);
    free(out);
    return st;
}

static quant_ck_status ct_run(const char *root, const char *rules, int64_t rows, int64_t cols,
                              quant_ck_error *err)
{
    return ct_run_report(root, rules, rows, cols, NULL, err);
}

static quant_st_tensor out_tensor(const char *root, const char *name, void **data)
{
    char *path = kit_join(root, "out/model.safetensors");
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_open(path, &f, &err) == QUANT_CK_OK, "%s", err.message);
    const quant_st_tensor *t = quant_st_find(f, name);
    ck_assert_msg(t != NULL, "no tensor %s", name);
    quant_st_tensor copy = *t;
    copy.name = NULL;
    if (data) {
        *data = malloc((size_t)quant_st_nbytes(t) + 1);
        ck_assert_int_eq(quant_st_read(f, t, 0, *data, (size_t)quant_st_nbytes(t), NULL),
                         QUANT_CK_OK);
    }
    ck_assert_str_eq(quant_st_meta(f, "format"), "pt");
    quant_st_close(f);
    free(path);
    return copy;
}

static json_t *qconfig(const char *root)
{
    char *path = kit_join(root, "out/config.json");
    json_t *cfg = json_load_file(path, 0, NULL);
    free(path);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_str_eq(json_string_value(json_object_get(cfg, "model_type")), "llama");
    json_t *qc = json_incref(json_object_get(cfg, "quantization_config"));
    json_decref(cfg);
    ck_assert_ptr_nonnull(qc);
    ck_assert_str_eq(json_string_value(json_object_get(qc, "quant_method")), "compressed-tensors");
    ck_assert_str_eq(json_string_value(json_object_get(qc, "quantization_status")), "compressed");
    return qc;
}

static void assert_shape(quant_st_tensor t, quant_st_dtype dtype, int rank, int64_t d0, int64_t d1)
{
    ck_assert_int_eq(t.dtype, dtype);
    ck_assert_int_eq(t.rank, rank);
    ck_assert_int_eq(t.shape[0], d0);
    if (rank > 1) ck_assert_int_eq(t.shape[1], d1);
}

START_TEST(test_w4a16_group)
{
    char *root = ck_tmpdir();
    quant_ck_error err;
    ck_assert_msg(ct_run(root,
                         "[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int4\","
                         "\"tile_size\":32}]",
                         64, 128, &err) == QUANT_CK_OK,
                  "%s", err.message);
    assert_shape(out_tensor(root, "layer.proj.weight_packed", NULL), QUANT_ST_I32, 2, 64, 16);
    assert_shape(out_tensor(root, "layer.proj.weight_scale", NULL), QUANT_ST_F32, 2, 64, 4);
    int64_t *shape;
    assert_shape(out_tensor(root, "layer.proj.weight_shape", (void **)&shape), QUANT_ST_I64, 1, 2,
                 0);
    ck_assert_int_eq(shape[0], 64);
    ck_assert_int_eq(shape[1], 128);
    free(shape);
    json_t *qc = qconfig(root);
    ck_assert_str_eq(json_string_value(json_object_get(qc, "format")), "pack-quantized");
    json_t *g = json_object_get(json_object_get(qc, "config_groups"), "group_0");
    json_t *wa = json_object_get(g, "weights");
    ck_assert_int_eq(json_integer_value(json_object_get(wa, "num_bits")), 4);
    ck_assert_str_eq(json_string_value(json_object_get(wa, "strategy")), "group");
    ck_assert_int_eq(json_integer_value(json_object_get(wa, "group_size")), 32);
    ck_assert(json_is_true(json_object_get(wa, "symmetric")));
    ck_assert(json_is_null(json_object_get(g, "input_activations")));
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(g, "targets"), 0)),
                     "layer.proj");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(qc, "ignore"), 0)),
                     "lm_head");
    json_decref(qc);
    /* dequantize reads the compressed-tensors layout back (test_ct_read.c: equal to the native
     * layout's bit for bit): P.weight F32 [64, 128], no weight_packed / weight_scale left */
    char *out = kit_join(root, "out"), *dq = kit_join(root, "dq");
    ck_assert_msg(quant_dequantize_path(out, dq, QUANT_ST_F32, 1, &err) == QUANT_CK_OK, "%s",
                  err.message);
    char *dqf = kit_join(dq, "model.safetensors");
    quant_st_file *f = NULL;
    ck_assert_msg(quant_st_open(dqf, &f, &err) == QUANT_CK_OK, "%s", err.message);
    const quant_st_tensor *t = quant_st_find(f, "layer.proj.weight");
    ck_assert_ptr_nonnull(t);
    assert_shape(*t, QUANT_ST_F32, 2, 64, 128);
    ck_assert_ptr_null(quant_st_find(f, "layer.proj.weight_packed"));
    ck_assert_ptr_null(quant_st_find(f, "layer.proj.weight_scale"));
    ck_assert_int_eq(f->n_tensors, 2);
    quant_st_close(f);
    free(dqf);
    free(out);
    free(dq);
    kit_rmtree(root);
    free(root);
}
END_TEST

START_TEST(test_w8a8_fp8_block_asym)
{
    char *root = ck_tmpdir();
    quant_ck_error err;
    ck_assert_msg(ct_run(root, "[{\"weight_qtype\":\"int8\",\"act_qtype\":\"int8\"}]", 16, 32,
                         &err) == QUANT_CK_OK,
                  "%s", err.message);
    assert_shape(out_tensor(root, "layer.proj.weight", NULL), QUANT_ST_I8, 2, 16, 32);
    assert_shape(out_tensor(root, "layer.proj.weight_scale", NULL), QUANT_ST_F32, 2, 16, 1);
    json_t *qc = qconfig(root);
    ck_assert_str_eq(json_string_value(json_object_get(qc, "format")), "int-quantized");
    json_t *g = json_object_get(json_object_get(qc, "config_groups"), "group_0");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(g, "weights"), "strategy")),
                     "channel");
    json_t *act = json_object_get(g, "input_activations");
    ck_assert(json_is_true(json_object_get(act, "dynamic")));
    ck_assert_str_eq(json_string_value(json_object_get(act, "strategy")), "token");
    json_decref(qc);

    ck_assert_msg(
        ct_run(root,
               "[{\"module_path\":\"layer.*\",\"weight_qtype\":\"float8_e4m3fn\",\"tile_size\":"
               "{\"0\":16,\"1\":16}}]",
               32, 64, &err) == QUANT_CK_OK,
        "%s", err.message);
    assert_shape(out_tensor(root, "layer.proj.weight", NULL), QUANT_ST_F8_E4M3, 2, 32, 64);
    assert_shape(out_tensor(root, "layer.proj.weight_scale", NULL), QUANT_ST_F32, 2, 2, 4);
    qc = qconfig(root);
    ck_assert_str_eq(json_string_value(json_object_get(qc, "format")), "float-quantized");
    json_t *wa = json_object_get(json_object_get(json_object_get(qc, "config_groups"), "group_0"),
                                 "weights");
    ck_assert_str_eq(json_string_value(json_object_get(wa, "strategy")), "block");
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(wa, "block_structure"), 1)),
                     16);
    json_decref(qc);

    /* asymmetric int4 weight-only: zero points packed along dim 0 into int32 */
    ck_assert_msg(ct_run(root,
                         "[{\"weight_qtype\":\"int4\",\"weight_calibration_method\":"
                         "\"minmax\"}]",
                         20, 16, &err) == QUANT_CK_OK,
                  "%s", err.message);
    assert_shape(out_tensor(root, "layer.proj.weight_zero_point", NULL), QUANT_ST_I32, 2, 3, 1);
    kit_rmtree(root);
    free(root);
}
END_TEST

START_TEST(test_refusals)
{
    static const struct {
        const char *rules, *expect;
    } cases[] = {
        {"[{\"weight_qtype\":\"nf4\"}]", "int2..int8 and float8_e4m3fn"},
        {"[{\"weight_qtype\":\"int16\"}]", "int2..int8 and float8_e4m3fn"},
        {"[{\"weight_qtype\":\"float8_e5m2\"}]", "int2..int8 and float8_e4m3fn"},
        {"[{\"weight_qtype\":\"int8\",\"contraction_axes\":[0]}]", "contraction axis"},
        {"[{\"weight_qtype\":\"int8\",\"act_qtype\":\"int4\"}]", "act_qtype"},
    };
    char *root = ck_tmpdir();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        quant_ck_error err;
        ck_assert_int_eq(ct_run(root, cases[i].rules, 16, 32, &err), QUANT_CK_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(err.message, cases[i].expect) != NULL, "case %zu: %s", i, err.message);
        char *out = kit_join(root, "out");
        ck_assert_int_eq(ck_count_entries(out), -1); /* no output directory */
        free(out);
    }
    kit_rmtree(root);
    free(root);
}
END_TEST

/* A planned asymmetric int4 weight-only layer.proj.weight [20, 16] with the given scale shape. */
typedef struct zp_case {
    int64_t s0, s1;
    ck_ct_strategy strategy;
    quant_st_dtype dtype;
    int rank;
    int64_t d0, d1;
} zp_case;

/* compressed-tensors packs the zero point (int32 words along dim 0, codes + 2^(b-1)) only for the
 * channel and group strategies; tensor and block keep it I8 shaped like the scale. These plans are
 * refused for vLLM (weight-only tensor / block), so the layout is checked below the refusals. */
START_TEST(test_zero_point_layout)
{
    static const zp_case cases[] = {
        {1, 1, CK_CT_TENSOR, QUANT_ST_I8, 1, 1, 0},
        {2, 4, CK_CT_BLOCK, QUANT_ST_I8, 2, 2, 4},
        {20, 1, CK_CT_CHANNEL, QUANT_ST_I32, 2, 3, 1},
        {20, 2, CK_CT_GROUP, QUANT_ST_I32, 2, 3, 2},
    };
    char name[] = "layer.proj.weight";
    quant_st_tensor in = {.name = name, .dtype = QUANT_ST_F32, .rank = 2, .shape = {20, 16}};
    quant_rule rule = {.has_weight_qtype = true, .weight_qtype = QUANT_QTYPE_INT4};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const zp_case *c = &cases[i];
        ck_shard_plan sp;
        memset(&sp, 0, sizeof sp);
        ck_tensor_plan tp = {.in = &in, .quantize = true, .r = &rule, .asym = true};
        for (int k = 0; k < CK_OUT_ROLES; k++) tp.out[k] = -1;
        tp.how.qtype = QUANT_QTYPE_INT4;
        tp.how.scale_dtype = QUANT_DTYPE_F32;
        tp.scale_shape[0] = c->s0;
        tp.scale_shape[1] = c->s1;
        tp.scale_numel = c->s0 * c->s1;
        ck_assert_int_eq(ck_ct_strategy_of(&tp), c->strategy);
        quant_ck_error err;
        ck_assert_int_eq(ck_ct_tensor_outputs(&sp, &tp, &err), QUANT_CK_OK);
        ck_assert_int_ge(tp.out[CK_OUT_ZP], 0);
        const quant_st_out_tensor *o = &sp.out[tp.out[CK_OUT_ZP]];
        ck_assert_str_eq(o->name, "layer.proj.weight_zero_point");
        ck_assert_int_eq(o->dtype, c->dtype);
        ck_assert_int_eq(o->rank, c->rank);
        ck_assert_int_eq(o->shape[0], c->d0);
        if (c->rank > 1) ck_assert_int_eq(o->shape[1], c->d1);
        /* the scale has the same shape as an unpacked zero point */
        const quant_st_out_tensor *sc = &sp.out[tp.out[CK_OUT_SCALE]];
        ck_assert_int_eq(sc->rank, c->rank == 1 ? 1 : 2);
        int32_t zp[40];
        for (int k = 0; k < tp.scale_numel; k++) zp[k] = (k * 5) % 16 - 8;
        size_t len = 0;
        void *z = ck_encode_zero_point(&tp, zp, &len);
        ck_assert_ptr_nonnull(z);
        if (c->dtype == QUANT_ST_I8) {
            ck_assert_uint_eq(len, (size_t)tp.scale_numel);
            for (int k = 0; k < tp.scale_numel; k++) ck_assert_int_eq(((int8_t *)z)[k], zp[k]);
        } else {
            /* word w of column j holds rows 8w..8w+7 of that column, LSB first, + 8 */
            ck_assert_uint_eq(len, (size_t)(c->d0 * c->d1) * sizeof(uint32_t));
            const uint32_t *words = z;
            for (int64_t r = 0; r < c->s0; r++)
                for (int64_t j = 0; j < c->s1; j++) {
                    uint32_t w = words[(r / 8) * c->s1 + j];
                    int v = (int)((w >> ((r % 8) * 4)) & 0xfu) - 8;
                    ck_assert_int_eq(v, zp[r * c->s1 + j]);
                }
        }
        ck_buf_free(z, len);
        ck_plan_free(&sp);
    }
}
END_TEST

/* The end-to-end form of the above for channel (the only asymmetric int4 weight-only form vLLM
 * serves besides group): the zero point is packed, as before. */
START_TEST(test_zero_point_channel_run)
{
    char *root = ck_tmpdir();
    quant_ck_error err;
    ck_assert_msg(ct_run(root,
                         "[{\"weight_qtype\":\"int4\",\"weight_calibration_method\":\"minmax\","
                         "\"tile_size\":8}]",
                         20, 16, &err) == QUANT_CK_OK,
                  "%s", err.message);
    assert_shape(out_tensor(root, "layer.proj.weight_zero_point", NULL), QUANT_ST_I32, 2, 3, 2);
    json_t *qc = qconfig(root);
    json_t *wa = json_object_get(json_object_get(json_object_get(qc, "config_groups"), "group_0"),
                                 "weights");
    ck_assert_str_eq(json_string_value(json_object_get(wa, "strategy")), "group");
    ck_assert(json_is_false(json_object_get(wa, "symmetric")));
    json_decref(qc);
    kit_rmtree(root);
    free(root);
}
END_TEST

/* Rules compressed-tensors can store but vLLM has no scheme for (or would serve as something
 * else): refused at plan time, naming the rule, the scheme and the reason; nothing written. */
START_TEST(test_vllm_refusals)
{
#define BLOCK_TILE "\"tile_size\":{\"0\":8,\"1\":16}"
    static const struct {
        const char *rules, *scheme, *reason;
    } cases[] = {
        /* int8 weights with int8 activations: symmetric, tensor or channel only */
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int8\",\"act_qtype\":\"int8\",\"weight_"
         "calibration_method\":"
         "\"minmax\"}]",
         "int8 weights, channel strategy, asymmetric", "W8A8Int8 takes symmetric"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int8\",\"act_qtype\":\"int8\",\"tile_"
         "size\":16}]",
         "int8 weights, group strategy, symmetric", "per-tensor or per-channel"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int8\",\"act_qtype\":"
         "\"int8\"," BLOCK_TILE "}]",
         "int8 weights, block strategy", "W8A8Int8"},
        /* weight-only integers: channel or group only */
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int4\",\"contraction_axes\":[0,1]}]",
         "int4 weights, tensor strategy, symmetric, with no activations", "WNA16"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int8\",\"weight_calibration_method\":"
         "\"minmax\"," BLOCK_TILE "}]",
         "int8 weights, block strategy, asymmetric", "per-channel or per-group"},
        /* int2/3/5/6/7 with activations: WNAMInt's terms only */
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int3\",\"act_qtype\":\"int8\",\"weight_"
         "calibration_method\":\"minmax\"}]",
         "int3 weights, channel strategy, asymmetric, with int8 dynamic", "WNAMInt"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int6\",\"act_qtype\":\"int8\","
         "\"contraction_axes\":[0,1]}]",
         "int6 weights, tensor strategy", "per-channel or per-group"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int5\",\"act_qtype\":\"int8\",\"act_"
         "calibration_method\":\"minmax\",\"tile_size\":16}]",
         "int5 weights, group strategy, symmetric, with int8 asymmetric dynamic",
         "symmetric dynamic per-token"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int2\",\"act_qtype\":\"int8\","
         "\"weight_calibration_method\":\"minmax\",\"tile_size\":8}]",
         "int2 weights, group strategy, asymmetric", "zero points"},
        /* asymmetric weights of other than 4 or 8 bits */
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int3\",\"weight_calibration_method\":"
         "\"minmax\"}]",
         "int3 weights, channel strategy, asymmetric", "zero points for int4 and int8 only"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int2\",\"weight_calibration_method\":"
         "\"minmax\",\"tile_size\":8}]",
         "int2 weights, group strategy, asymmetric", "zero points for int4 and int8 only"},
        /* integer weights with fp8 activations, fp8 weights with int8 activations */
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int8\",\"act_qtype\":\"float8_e4m3fn\"}"
         "]",
         "int8 weights, channel strategy, symmetric, with float8_e4m3fn dynamic",
         "would serve them as int8"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int4\",\"act_qtype\":\"float8_e4m3fn\","
         "\"tile_size\":16}]",
         "int4 weights", "would serve them as int8"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"float8_e4m3fn\",\"act_qtype\":\"int8\"}"
         "]",
         "float8_e4m3fn weights, channel strategy, symmetric, with int8 dynamic",
         "weight-only (W8A16Fp8)"},
        /* found in vLLM beyond the first list: int4 with activations, fp8 group */
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int4\",\"act_qtype\":\"int8\",\"weight_"
         "calibration_method\":"
         "\"minmax\"}]",
         "int4 weights, channel strategy, asymmetric", "W4A8Int takes symmetric"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int4\",\"act_qtype\":\"int8\","
         "\"contraction_axes\":[0,1]}]",
         "int4 weights, tensor strategy", "per-channel or per-group"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"float8_e4m3fn\",\"tile_size\":16}]",
         "float8_e4m3fn weights, group strategy", "per-tensor, per-channel or block"},
    };
#undef BLOCK_TILE
    char *root = ck_tmpdir(), *out = kit_join(root, "out");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        quant_ck_error err;
        ck_assert_msg(ct_run(root, cases[i].rules, 16, 32, &err) == QUANT_CK_ERR_UNSUPPORTED,
                      "case %zu accepted", i);
        const char *m = err.message;
        ck_assert_msg(strstr(m, "tensor 'layer.proj.weight' (rule 0)") != NULL, "case %zu: %s", i,
                      m);
        ck_assert_msg(strstr(m, "vLLM has no scheme for it") != NULL, "case %zu: %s", i, m);
        ck_assert_msg(strstr(m, cases[i].scheme) != NULL, "case %zu: %s", i, m);
        ck_assert_msg(strstr(m, cases[i].reason) != NULL, "case %zu: %s", i, m);
        ck_assert_msg(strstr(m, "; use ") != NULL, "case %zu names no way out: %s", i, m);
        ck_assert_msg(strstr(m, "; vLLM would need ") != NULL, "case %zu names no need: %s", i, m);
        ck_assert_int_eq(ck_count_entries(out), -1); /* no output directory */
    }
    free(out);
    kit_rmtree(root);
    free(root);
}
END_TEST

/* What vLLM does serve passes, with the format its scheme loads. */
START_TEST(test_vllm_accepts)
{
    static const struct {
        const char *rules, *format, *strategy;
    } cases[] = {
        /* WNA16: any width, channel or group; zero points for int4 and int8 */
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int3\",\"tile_size\":16}]",
         "pack-quantized", "group"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int8\",\"weight_calibration_method\":"
         "\"minmax\"}]",
         "pack-quantized", "channel"},
        /* W8A8Int8: per-tensor or per-channel */
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int8\",\"act_qtype\":\"int8\","
         "\"contraction_axes\":[0,1]}]",
         "int-quantized", "tensor"},
        /* WNAMInt: other widths with int8 dynamic per-token activations, pack-quantized */
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int3\",\"act_qtype\":\"int8\"}]",
         "pack-quantized", "channel"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int6\",\"act_qtype\":\"int8\",\"tile_"
         "size\":16}]",
         "pack-quantized", "group"},
        /* W4A8Int: channel or group, dynamic per token */
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int4\",\"act_qtype\":\"int8\",\"tile_"
         "size\":16}]",
         "int-quantized", "group"},
        /* W8A8Fp8 / W8A16Fp8: tensor, channel or block */
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"float8_e4m3fn\",\"act_qtype\":\"float8_"
         "e4m3fn\","
         "\"tile_size\":{\"0\":8,\"1\":16}}]",
         "float-quantized", "block"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"float8_e4m3fn\",\"contraction_axes\":[0,"
         "1]}]",
         "float-quantized", "tensor"},
        /* W4A16Fp4: nvfp4 weight-only, one e4m3fn scale per 16 inputs under a global scale */
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"nvfp4\"}]", "nvfp4-pack-quantized",
         "tensor_group"},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"nvfp4\",\"tile_size\":16,\"weight_"
         "calibration_method\":\"rms,3\"}]",
         "nvfp4-pack-quantized", "tensor_group"},
    };
    char *root = ck_tmpdir();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        quant_ck_error err;
        ck_assert_msg(ct_run(root, cases[i].rules, 16, 32, &err) == QUANT_CK_OK, "case %zu: %s", i,
                      err.message);
        json_t *qc = qconfig(root);
        ck_assert_str_eq(json_string_value(json_object_get(qc, "format")), cases[i].format);
        json_t *wa = json_object_get(
            json_object_get(json_object_get(qc, "config_groups"), "group_0"), "weights");
        ck_assert_str_eq(json_string_value(json_object_get(wa, "strategy")), cases[i].strategy);
        json_decref(qc);
    }
    kit_rmtree(root);
    free(root);
}
END_TEST

/* int2, int3, int5, int6, int7 weights with int8 dynamic per-token activations are written as
 * vLLM's WNAMInt loads them: pack-quantized weight_packed and weight_shape, input_activations in
 * the config group. */
START_TEST(test_wnam_tensors)
{
    char *root = ck_tmpdir();
    quant_ck_error err;
    ck_assert_msg(ct_run(root,
                         "[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int3\",\"act_qtype\":"
                         "\"int8\",\"tile_size\":16}]",
                         16, 32, &err) == QUANT_CK_OK,
                  "%s", err.message);
    assert_shape(out_tensor(root, "layer.proj.weight_packed", NULL), QUANT_ST_I32, 2, 16, 3);
    assert_shape(out_tensor(root, "layer.proj.weight_shape", NULL), QUANT_ST_I64, 1, 2, 0);
    assert_shape(out_tensor(root, "layer.proj.weight_scale", NULL), QUANT_ST_F32, 2, 16, 2);
    char *path = kit_join(root, "out/model.safetensors");
    quant_st_file *f = NULL;
    ck_assert_int_eq(quant_st_open(path, &f, &err), QUANT_CK_OK);
    ck_assert_ptr_null(quant_st_find(f, "layer.proj.weight")); /* not int-quantized */
    quant_st_close(f);
    free(path);
    json_t *qc = qconfig(root);
    json_t *g = json_object_get(json_object_get(qc, "config_groups"), "group_0");
    json_t *w = json_object_get(g, "weights"), *a = json_object_get(g, "input_activations");
    ck_assert_str_eq(json_string_value(json_object_get(qc, "format")), "pack-quantized");
    ck_assert_int_eq(json_integer_value(json_object_get(w, "num_bits")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(w, "group_size")), 16);
    ck_assert(json_is_true(json_object_get(w, "symmetric")));
    ck_assert_int_eq(json_integer_value(json_object_get(a, "num_bits")), 8);
    ck_assert_str_eq(json_string_value(json_object_get(a, "type")), "int");
    ck_assert_str_eq(json_string_value(json_object_get(a, "strategy")), "token");
    ck_assert(json_is_true(json_object_get(a, "dynamic")));
    ck_assert(json_is_true(json_object_get(a, "symmetric")));
    json_decref(qc);
    kit_rmtree(root);
    free(root);
}
END_TEST

/* The warning of `name` in the report and in a plan of the same input, NULL when none (the two
 * must agree); the report's and plan's JSON carry it as "warning". */
static char *group_warning(const char *rules, int64_t cols)
{
    char *root = ck_tmpdir(), *in = kit_join(root, "in");
    quant_report *rep = NULL;
    quant_ck_error err;
    ck_assert_msg(ct_run_report(root, rules, 16, cols, &rep, &err) == QUANT_CK_OK, "%s",
                  err.message);
    const quant_report_entry *re = NULL;
    for (size_t i = 0; i < quant_report_count(rep); i++)
        if (strcmp(quant_report_entry_at(rep, i)->name, "layer.proj.weight") == 0)
            re = quant_report_entry_at(rep, i);
    ck_assert_ptr_nonnull(re);
    char *warning = re->warning ? strdup(re->warning) : NULL;
    char *text = quant_report_json(rep);
    ck_assert_int_eq(strstr(text, "\"warning\"") != NULL, warning != NULL);
    free(text);
    quant_report_free(rep);

    quant_ruleset *rs = NULL;
    ck_assert_int_eq(quant_ruleset_parse(rules, strlen(rules), "t", &rs, &err), QUANT_CK_OK);
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.layout = QUANT_LAYOUT_CTENSORS;
    quant_plan *plan = NULL;
    ck_assert_msg(quant_plan_path(rs, in, &o, &plan, &err) == QUANT_CK_OK, "%s", err.message);
    const quant_plan_entry *pe = NULL;
    for (size_t i = 0; i < quant_plan_count(plan); i++)
        if (strcmp(quant_plan_entry_at(plan, i)->name, "layer.proj.weight") == 0)
            pe = quant_plan_entry_at(plan, i);
    ck_assert_ptr_nonnull(pe);
    ck_assert_int_eq(pe->warning != NULL, warning != NULL);
    if (warning) ck_assert_str_eq(pe->warning, warning);
    text = quant_plan_json(plan);
    ck_assert_int_eq(strstr(text, "\"warning\"") != NULL, warning != NULL);
    free(text);
    quant_plan_free(plan);
    quant_ruleset_free(rs);
    free(in);
    kit_rmtree(root);
    free(root);
    return warning;
}

/* WNA16 with a group size none of vLLM's Marlin and Machete kernels takes is written, with a
 * warning in the run's report and the plan (which quant and quantd show); group sizes 32, 64,
 * 128, per-channel scales and WNAMInt (Humming: any group size) have none. */
START_TEST(test_group_size_warning)
{
    char *w = group_warning(
        "[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int4\",\"tile_size\":43}]", 86);
    ck_assert_ptr_nonnull(w);
    ck_assert_msg(strstr(w, "WNA16") && strstr(w, "Marlin") && strstr(w, "not 43") &&
                      strstr(w, "use tile_size 32, 64 or 128"),
                  "%s", w);
    free(w);
    w = group_warning("[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int3\",\"tile_size\":16,"
                      "\"weight_calibration_method\":\"absmax\"}]",
                      32);
    ck_assert_msg(w && strstr(w, "not 16"), "%s", w ? w : "no warning");
    free(w);
    static const struct {
        const char *rules;
        int64_t cols;
    } quiet[] = {
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int4\",\"tile_size\":32}]", 64},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int8\",\"tile_size\":128}]", 256},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int4\"}]", 86},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"int3\",\"act_qtype\":\"int8\",\"tile_"
         "size\":43}]",
         86},
        {"[{\"module_path\":\"layer.*\",\"weight_qtype\":\"float8_e4m3fn\",\"tile_size\":{\"0\":8,"
         "\"1\":43}}]",
         86},
    };
    for (size_t i = 0; i < sizeof quiet / sizeof quiet[0]; i++) {
        w = group_warning(quiet[i].rules, quiet[i].cols);
        ck_assert_msg(w == NULL, "case %zu: %s", i, w ? w : "");
    }
}
END_TEST

/* Bit packing: element i of a row at bit i*b, LSB first, offset by 2^(b-1); rows padded. */
START_TEST(test_pack32)
{
    for (int bits = 2; bits <= 8; bits++) {
        int8_t codes[2 * 21];
        int lo = -(1 << (bits - 1)), span = 1 << bits;
        for (int i = 0; i < 42; i++) codes[i] = (int8_t)(lo + (i * 7 + bits) % span);
        int64_t words = ck_pack32_words(21, bits);
        ck_assert_int_eq(words, (21 * bits + 31) / 32);
        uint32_t packed[2 * 6];
        ck_pack32_rows(codes, 2, 21, bits, packed);
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < 21; i++) {
                uint64_t bit = (uint64_t)i * (uint64_t)bits, v = 0;
                for (int k = 0; k < bits; k++) {
                    uint64_t b = bit + (uint64_t)k;
                    v |= (uint64_t)((packed[r * words + (int64_t)(b / 32)] >> (b % 32)) & 1u) << k;
                }
                ck_assert_int_eq((int)v, codes[r * 21 + i] - lo);
            }
        /* padding bits of the last word are zero */
        uint64_t used = 21u * (unsigned)bits;
        if (used % 32) ck_assert_uint_eq(packed[words - 1] >> (used % 32), 0);
    }
}
END_TEST

/* One safetensors file in the compressed-tensors layout: config.json is written beside the output
 * (the input's config.json merged, as for a directory; a new one without it), recorded in the
 * report; an output whose directory already holds a config.json (the input's own, here) is
 * refused before any work and leaves nothing. */
START_TEST(test_file_writes_config)
{
    char *root = ck_tmpdir(), *in = kit_join(root, "in"), *out = kit_join(root, "out");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    ck_assert_int_eq(mkdir(out, 0755), 0);
    float w[16 * 32];
    ck_fill(w, 16 * 32, 5, 1.0f);
    kit_st_tensor t[] = {{"layer.proj.weight", "F32", 2, {16, 32}, w, sizeof w}};
    char *shard = kit_join(in, "model.safetensors"), *cfg = kit_join(in, "config.json");
    ck_gen_file(shard, t, 1, NULL);
    ck_write_file(cfg, "{\"model_type\":\"llama\"}", 22);
    quant_ruleset *rs = ck_rules("[{\"weight_qtype\":\"int8\"}]");
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.layout = QUANT_LAYOUT_CTENSORS;
    o.sha256 = true;
    quant_ck_error err;
    quant_report *rep = NULL;
    char *dst = kit_join(out, "model.safetensors");
    ck_assert_msg(quant_quantize_path(rs, shard, dst, &o, &rep, &err) == QUANT_CK_OK, "%s",
                  err.message);
    json_t *qc = qconfig(root); /* out/config.json: model_type kept, quantization_config added */
    ck_assert_str_eq(
        json_string_value(json_array_get(
            json_object_get(json_object_get(json_object_get(qc, "config_groups"), "group_0"),
                            "targets"),
            0)),
        "layer.proj");
    json_decref(qc);
    ck_assert_uint_eq(quant_report_output_count(rep), 2);
    const quant_report_output *ro = quant_report_output_at(rep, 1);
    ck_assert_str_eq(ro->name, "config.json");
    ck_assert_ptr_nonnull(ro->sha256);
    quant_report_free(rep);
    /* the output beside the input: its config.json would be replaced, so the run is refused */
    char *beside = kit_join(in, "q.safetensors");
    ck_assert_int_eq(quant_quantize_path(rs, shard, beside, &o, NULL, &err), QUANT_CK_ERR_ARG);
    ck_assert_msg(strstr(err.message, "config.json already exists") &&
                      strstr(err.message, "beside the output file"),
                  "%s", err.message);
    struct stat sb;
    ck_assert_int_ne(stat(beside, &sb), 0);
    ck_assert_int_eq(ck_count_entries(in), 2);
    quant_ruleset_free(rs);
    free(beside);
    free(dst);
    free(shard);
    free(cfg);
    free(in);
    free(out);
    kit_rmtree(root);
    free(root);
}
END_TEST

Suite *suite_ctensors(void)
{
    Suite *s = suite_create("ctensors");
    TCase *tc = tcase_create("ctensors");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_w4a16_group);
    tcase_add_test(tc, test_w8a8_fp8_block_asym);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_pack32);
    tcase_add_test(tc, test_zero_point_layout);
    tcase_add_test(tc, test_zero_point_channel_run);
    tcase_add_test(tc, test_vllm_refusals);
    tcase_add_test(tc, test_vllm_accepts);
    tcase_add_test(tc, test_wnam_tensors);
    tcase_add_test(tc, test_group_size_warning);
    tcase_add_test(tc, test_file_writes_config);
    suite_add_tcase(s, tc);
    return s;
}
