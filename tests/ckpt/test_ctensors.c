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
 * directory with config.json into `out`; returns the status. */
static quant_ck_status ct_run(const char *root, const char *rules, int64_t rows, int64_t cols,
                              quant_ck_error *err)
{
    char *in = ck_join(root, "in"), *out = ck_join(root, "out");
    ck_rmtree(in);
    ck_rmtree(out);
    ck_assert_int_eq(mkdir(in, 0755), 0);
    size_t n = (size_t)(rows * cols);
    float *w = malloc(n * sizeof *w), head[4 * 8];
    ck_fill(w, n, 21, 1.0f);
    ck_fill(head, 32, 22, 1.0f);
    ck_gen_tensor t[] = {{"layer.proj.weight", "F32", 2, {rows, cols}, w, n * sizeof *w},
                         {"lm_head.weight", "F32", 2, {4, 8}, head, sizeof head}};
    char *shard = ck_join(in, "model.safetensors"), *cfg = ck_join(in, "config.json");
    ck_gen_file(shard, t, 2, NULL);
    ck_write_file(cfg, "{\"model_type\":\"llama\"}", 22);
    quant_ruleset *rs = NULL;
    ck_assert_int_eq(quant_ruleset_parse(rules, strlen(rules), "t", &rs, err), QUANT_CK_OK);
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.layout = QUANT_LAYOUT_CTENSORS;
    o.chunk_bytes = 64u << 10;
    quant_ck_status st = quant_quantize_path(rs, in, out, &o, NULL, err);
    quant_ruleset_free(rs);
    free(w);
    free(shard);
    free(cfg);
    free(in);
    free(out);
    return st;
}

static quant_st_tensor out_tensor(const char *root, const char *name, void **data)
{
    char *path = ck_join(root, "out/model.safetensors");
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
    char *path = ck_join(root, "out/config.json");
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
    /* dequantize reads the native layout only: a compressed-tensors checkpoint is refused */
    char *out = ck_join(root, "out"), *dq = ck_join(root, "dq");
    ck_assert_int_eq(quant_dequantize_path(out, dq, QUANT_ST_F32, 1, &err),
                     QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "compressed-tensors") != NULL, "%s", err.message);
    ck_assert_int_eq(ck_count_entries(root), 2); /* in, out: no dq, no partial directory */
    free(out);
    free(dq);
    ck_rmtree(root);
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
    ck_rmtree(root);
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
        char *out = ck_join(root, "out");
        ck_assert_int_eq(ck_count_entries(out), -1); /* no output directory */
        free(out);
    }
    ck_rmtree(root);
    free(root);
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

Suite *suite_ctensors(void)
{
    Suite *s = suite_create("ctensors");
    TCase *tc = tcase_create("ctensors");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_w4a16_group);
    tcase_add_test(tc, test_w8a8_fp8_block_asym);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_pack32);
    suite_add_tcase(s, tc);
    return s;
}
