/* test_pipeline.c -- the checkpoint engine end to end on generated files: what is quantized and
 * what is copied, bit equality with libquant on the whole tensor whatever the chunking (one- and
 * two-pass), sharded directories, atomic output on failure and cancel, the report, the
 * dequantize round trip within the reported error, and the stages' buffers (pre-faulted, reused).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE   700
#define _DEFAULT_SOURCE /* flock */
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ck_internal.h"
#include "ckutil.h"
#include "quant_pipeline.h"

/* The bytes of tensor `name` in `path` (caller frees); fails the test when missing. */
static void *tensor_bytes(const char *path, const char *name, size_t *n, quant_st_tensor *info)
{
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_open(path, &f, &err) == QUANT_CK_OK, "%s", err.message);
    const quant_st_tensor *t = quant_st_find(f, name);
    ck_assert_msg(t != NULL, "%s: no tensor %s", path, name);
    size_t len = (size_t)quant_st_nbytes(t);
    void *buf = malloc(len ? len : 1);
    ck_assert_int_eq(quant_st_read(f, t, 0, buf, len, &err), QUANT_CK_OK);
    if (n) *n = len;
    if (info) {
        *info = *t;
        info->name = NULL;
    }
    quant_st_close(f);
    return buf;
}

/* A file with a [rows, cols] f32 weight "m.w.weight", a rank-1 bias, an I64 tensor, and an
 * "emb.weight" no rule quantizes. Returns the weight data (caller frees). */
static float *make_model(const char *path, int64_t rows, int64_t cols, uint64_t seed)
{
    size_t n = (size_t)(rows * cols);
    float *w = malloc(n * sizeof *w), bias[8], emb[4 * 8];
    int64_t ids[3] = {7, -1, 1LL << 40};
    ck_fill(w, n, seed, 1.0f);
    ck_fill(bias, 8, seed + 1, 1.0f);
    ck_fill(emb, 32, seed + 2, 1.0f);
    kit_st_tensor t[] = {
        {"emb.weight", "F32", 2, {4, 8}, emb, sizeof emb},
        {"m.w.weight", "F32", 2, {rows, cols}, w, n * sizeof *w},
        {"m.w.bias", "F32", 1, {8}, bias, sizeof bias},
        {"ids", "I64", 1, {3}, ids, sizeof ids},
    };
    ck_gen_file(path, t, 4, "{\"format\":\"pt\",\"note\":\"kept\"}");
    return w;
}

START_TEST(test_quantized_and_copied)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.st");
    float *w = make_model(in, 16, 64, 1);
    quant_report *rep = NULL;
    quant_ck_error err;
    ck_assert_msg(ck_quantize("[{\"module_path\":\"m\\\\..*\",\"weight_qtype\":\"int8\"}]", in, out,
                              NULL, &rep, &err) == QUANT_CK_OK,
                  "%s", err.message);
    /* the weight: codes and scales equal libquant on the whole tensor */
    quant_how how;
    quant_how_init(&how, QUANT_QTYPE_INT8);
    how.n_channel_axes = 1;
    how.channel_axes[0] = 0;
    quant_tensor x;
    int64_t shape[2] = {16, 64};
    quant_tensor_init(&x, QUANT_DTYPE_F32, 2, shape, w, NULL);
    int8_t q[16 * 64];
    float scale[16];
    quant_ctx *ctx = quant_ctx_new(NULL, NULL);
    ck_assert_int_eq(quant_quantize(ctx, &how, &x, q, scale, NULL, NULL), QUANT_OK);
    quant_ctx_free(ctx);
    size_t n;
    quant_st_tensor info;
    void *got = tensor_bytes(out, "m.w.weight.qvalue", &n, &info);
    ck_assert_int_eq(info.dtype, QUANT_ST_I8);
    ck_assert_uint_eq(n, sizeof q);
    ck_assert_mem_eq(got, q, sizeof q);
    free(got);
    got = tensor_bytes(out, "m.w.weight.scale", &n, &info);
    ck_assert_int_eq(info.rank, 2);
    ck_assert_int_eq(info.shape[0], 16);
    ck_assert_int_eq(info.shape[1], 1);
    ck_assert_mem_eq(got, scale, sizeof scale);
    free(got);
    ck_assert(!ck_has_tensor(out, "m.w.weight.zero_point"));
    ck_assert(!ck_has_tensor(out, "m.w.weight"));
    /* copied byte for byte: rank 1, integer, no rule matched */
    const char *copied[] = {"m.w.bias", "ids", "emb.weight"};
    for (int i = 0; i < 3; i++) {
        void *a = tensor_bytes(in, copied[i], &n, NULL);
        size_t m;
        void *b = tensor_bytes(out, copied[i], &m, NULL);
        ck_assert_uint_eq(n, m);
        ck_assert_mem_eq(a, b, n);
        free(a);
        free(b);
    }
    /* metadata kept, quantization entry added */
    quant_st_file *f;
    ck_assert_int_eq(quant_st_open(out, &f, NULL), QUANT_CK_OK);
    ck_assert_str_eq(quant_st_meta(f, "note"), "kept");
    json_t *meta = json_loads(quant_st_meta(f, "quantization"), 0, NULL);
    ck_assert_ptr_nonnull(meta);
    json_t *e = json_object_get(json_object_get(meta, "tensors"), "m.w.weight");
    ck_assert_str_eq(json_string_value(json_object_get(e, "qtype")), "int8");
    ck_assert_str_eq(json_string_value(json_object_get(e, "orig_dtype")), "F32");
    ck_assert_int_eq(json_integer_value(json_object_get(e, "rule")), 0);
    json_decref(meta);
    quant_st_close(f);
    /* report: 4 entries, reasons */
    ck_assert_uint_eq(quant_report_count(rep), 4);
    const quant_report_entry *r0 = quant_report_entry_at(rep, 0);
    ck_assert_str_eq(r0->name, "emb.weight");
    ck_assert(!r0->quantized);
    ck_assert_str_eq(r0->reason, "no rule matched");
    const quant_report_entry *r1 = quant_report_entry_at(rep, 1);
    ck_assert(r1->quantized && r1->has_quality);
    ck_assert(r1->sqnr_db > 30 && r1->max_abs_err > 0);
    ck_assert_str_eq(quant_report_entry_at(rep, 2)->reason, "rank < 2");
    ck_assert_str_eq(quant_report_entry_at(rep, 3)->reason, "not a float tensor");
    char *text = quant_report_json(rep);
    json_t *doc = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(doc, "summary"), "quantized")), 1);
    json_decref(doc);
    free(text);
    quant_report_free(rep);
    free(w);
    kit_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

/* Output bytes of a run with a given chunk size (mapped input for the small chunks). */
static void *run_file(const char *rules, const char *in, const char *out, size_t chunk, size_t *len)
{
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.chunk_bytes = chunk;
    o.map_input = chunk < (1u << 20);
    o.buffers = 2;
    quant_ck_error err;
    ck_assert_msg(ck_quantize(rules, in, out, &o, NULL, &err) == QUANT_CK_OK, "%s", err.message);
    void *bytes = kit_read_file(out, len);
    remove(out);
    return bytes;
}

/* The same output whatever the chunk size: per-channel, tiles, leading reduced axis (two-pass),
 * asymmetric, packed int4, stochastic rounding, bf16 scales. */
START_TEST(test_chunking_is_invisible)
{
    static const char *const rules[] = {
        "{\"weight_qtype\":\"int8\"}]",
        "{\"weight_qtype\":\"int4\",\"tile_size\":32}]",
        "{\"weight_qtype\":\"int8\",\"contraction_axes\":[0]}]",
        "{\"weight_qtype\":\"int8\",\"contraction_axes\":[0,1]}]",
        ("{\"weight_qtype\":\"uint8\",\"contraction_axes\":[0],\"weight_calibration_method\":"
         "\"minmax\"}]"),
        "{\"weight_qtype\":\"int4\",\"tile_size\":{\"0\":64,\"1\":32}}]",
        "{\"weight_qtype\":\"int8\",\"stochastic_rounding\":7,\"scale_dtype\":\"bfloat16\"}]",
        "{\"weight_qtype\":\"float8_e4m3fn\",\"contraction_axes\":[0]}]",
        "{\"weight_qtype\":\"nf4\",\"tile_size\":64}]",
        "{\"weight_qtype\":\"int8\",\"contraction_axes\":[0],\"tile_size\":0.25}]",
        "{\"weight_qtype\":\"int8\",\"weight_calibration_method\":\"fixed,-2,2\"}]",
    };
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "o");
    float *w = make_model(in, 512, 256, 3); /* 512 KiB weight */
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        size_t a_len, b_len;
        /* emb.weight [4, 8] fits none of the tilings: a null rule leaves it alone */
        char set[512];
        snprintf(set, sizeof set, "[{\"module_path\":\"emb\",\"weight_qtype\":null},%s", rules[r]);
        void *whole = run_file(set, in, out, 64u << 20, &a_len);
        void *chunked = run_file(set, in, out, 64u << 10, &b_len);
        ck_assert_msg(a_len == b_len && memcmp(whole, chunked, a_len) == 0,
                      "rule set %zu: chunked output differs", r);
        free(whole);
        free(chunked);
    }
    free(w);
    kit_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

START_TEST(test_failure_leaves_nothing)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.st");
    float w[8 * 16];
    ck_fill(w, 128, 5, 1.0f);
    w[77] = NAN;
    kit_st_tensor t[] = {{"a.weight", "F32", 2, {8, 16}, w, sizeof w}};
    ck_gen_file(in, t, 1, NULL);
    quant_ck_error err;
    ck_assert_int_eq(ck_quantize("[{\"weight_qtype\":\"int8\"}]", in, out, NULL, NULL, &err),
                     QUANT_CK_ERR_QUANT);
    ck_assert_msg(strstr(err.message, "a.weight") != NULL, "%s", err.message);
    ck_assert_int_eq(ck_count_entries(dir), 1); /* only the input: no output, no temp file */
    /* tile that does not divide: refused at planning */
    ck_assert_int_eq(
        ck_quantize("[{\"weight_qtype\":\"int8\",\"tile_size\":5}]", in, out, NULL, NULL, &err),
        QUANT_CK_ERR_QUANT);
    ck_assert_msg(strstr(err.message, "rule 0") != NULL, "%s", err.message);
    ck_assert_int_eq(ck_count_entries(dir), 1);
    /* cancelled before the start */
    w[77] = 1.0f;
    ck_gen_file(in, t, 1, NULL);
    atomic_int cancel;
    atomic_init(&cancel, 1);
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.cancel = &cancel;
    ck_assert_int_eq(ck_quantize("[{\"weight_qtype\":\"int8\"}]", in, out, &o, NULL, &err),
                     QUANT_CK_ERR_CANCELLED);
    ck_assert_int_eq(ck_count_entries(dir), 1);
    /* an existing output is not overwritten */
    ck_write_file(out, "x", 1);
    ck_assert_int_eq(ck_quantize("[{\"weight_qtype\":\"int8\"}]", in, out, NULL, NULL, &err),
                     QUANT_CK_ERR_ARG);
    ck_assert_msg(strstr(err.message, "exists") != NULL, "%s", err.message);
    kit_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

/* A two-shard checkpoint with index, config and tokenizer; bf16 weights. */
static void make_sharded(const char *dir)
{
    uint16_t a[32 * 64], b[64 * 32], norm[32];
    float f[32 * 64];
    ck_fill(f, 32 * 64, 11, 0.05f);
    for (int i = 0; i < 32 * 64; i++) a[i] = b[i] = quant_f32_to_bf16(f[i]);
    for (int i = 0; i < 32; i++) norm[i] = quant_f32_to_bf16(1.0f);
    kit_st_tensor s1[] = {
        {"model.layers.0.self_attn.q_proj.weight", "BF16", 2, {32, 64}, a, sizeof a},
        {"model.layers.0.input_layernorm.weight", "BF16", 1, {32}, norm, sizeof norm},
    };
    kit_st_tensor s2[] = {
        {"model.layers.0.mlp.down_proj.weight", "BF16", 2, {64, 32}, b, sizeof b},
        {"lm_head.weight", "BF16", 2, {32, 64}, a, sizeof a},
    };
    char *p1 = kit_join(dir, "model-00001-of-00002.safetensors");
    char *p2 = kit_join(dir, "model-00002-of-00002.safetensors");
    ck_gen_file(p1, s1, 2, "{\"format\":\"pt\"}");
    ck_gen_file(p2, s2, 2, "{\"format\":\"pt\"}");
    const char *index =
        "{\"metadata\":{\"total_size\":12352},\"weight_map\":{"
        "\"model.layers.0.self_attn.q_proj.weight\":\"model-00001-of-00002.safetensors\","
        "\"model.layers.0.input_layernorm.weight\":\"model-00001-of-00002.safetensors\","
        "\"model.layers.0.mlp.down_proj.weight\":\"model-00002-of-00002.safetensors\","
        "\"lm_head.weight\":\"model-00002-of-00002.safetensors\"}}";
    char *ip = kit_join(dir, "model.safetensors.index.json");
    char *cp = kit_join(dir, "config.json");
    char *tp = kit_join(dir, "tokenizer.json");
    ck_write_file(ip, index, strlen(index));
    ck_write_file(cp, "{\"model_type\":\"llama\"}", 22);
    ck_write_file(tp, "{\"tok\":1}", 9);
    free(p1);
    free(p2);
    free(ip);
    free(cp);
    free(tp);
}

static const char *const sharded_rules =
    "[{\"module_path\":\"lm_head\",\"weight_qtype\":null},"
    "{\"module_path\":\".*(q_proj|down_proj)\",\"weight_qtype\":\"int4\",\"tile_size\":32}]";

START_TEST(test_sharded_round_trip)
{
    char *root = ck_tmpdir(), *in = kit_join(root, "in"), *out = kit_join(root, "out"),
         *back = kit_join(root, "back");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    make_sharded(in);
    quant_report *rep = NULL;
    quant_ck_error err;
    ck_assert_msg(ck_quantize(sharded_rules, in, out, NULL, &rep, &err) == QUANT_CK_OK, "%s",
                  err.message);
    ck_assert_int_eq(ck_count_entries(out), 5); /* 2 shards, index, config, tokenizer */
    char *idx_path = kit_join(out, "model.safetensors.index.json");
    json_t *idx = json_load_file(idx_path, 0, NULL);
    ck_assert_ptr_nonnull(idx);
    json_t *wm = json_object_get(idx, "weight_map");
    ck_assert_str_eq(
        json_string_value(json_object_get(wm, "model.layers.0.mlp.down_proj.weight.qvalue")),
        "model-00002-of-00002.safetensors");
    ck_assert_ptr_null(json_object_get(wm, "model.layers.0.mlp.down_proj.weight"));
    ck_assert_ptr_nonnull(json_object_get(wm, "lm_head.weight"));
    /* total_size = data bytes: q 32*32 + scale 32*2*4, norm 64, down 64*16 + 64*1*4, head 4096 */
    json_int_t total =
        json_integer_value(json_object_get(json_object_get(idx, "metadata"), "total_size"));
    ck_assert_int_eq(total, 1024 + 256 + 64 + 1024 + 256 + 4096);
    json_decref(idx);
    free(idx_path);
    /* dequantize: every tensor back within the reported max error */
    ck_assert_msg(quant_dequantize_path(out, back, QUANT_ST_F32, 0, &err) == QUANT_CK_OK, "%s",
                  err.message);
    for (size_t i = 0; i < quant_report_count(rep); i++) {
        const quant_report_entry *e = quant_report_entry_at(rep, i);
        char *src = kit_join(in, e->shard), *dst = kit_join(back, e->shard);
        size_t n, m;
        quant_st_tensor ti, to;
        void *a = tensor_bytes(src, e->name, &n, &ti);
        void *b = tensor_bytes(dst, e->name, &m, &to);
        ck_assert_int_eq(ti.rank, to.rank);
        if (e->quantized) {
            ck_assert_int_eq(to.dtype, QUANT_ST_F32);
            double worst = 0; /* the report's max error (taken by the quantize pass) is exact */
            for (size_t k = 0; k < n / 2; k++) {
                double x = quant_bf16_to_f32(((uint16_t *)a)[k]), y = ((float *)b)[k];
                ck_assert_msg(fabs(x - y) <= e->max_abs_err, "%s[%zu]: %g vs %g (max %g)", e->name,
                              k, x, y, e->max_abs_err);
                worst = fabs(x - y) > worst ? fabs(x - y) : worst;
            }
            ck_assert_msg(worst == e->max_abs_err, "%s: max error %a, reported %a", e->name, worst,
                          e->max_abs_err);
        } else {
            ck_assert_uint_eq(n, m);
            ck_assert_mem_eq(a, b, n);
        }
        free(a);
        free(b);
        free(src);
        free(dst);
    }
    quant_report_free(rep);
    kit_rmtree(root);
    free(root);
    free(in);
    free(out);
    free(back);
}
END_TEST

START_TEST(test_bad_index)
{
    char *root = ck_tmpdir(), *in = kit_join(root, "in"), *out = kit_join(root, "out");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    make_sharded(in);
    char *ip = kit_join(in, "model.safetensors.index.json");
    const char *bad = "{\"weight_map\":{\"x\":\"../evil.safetensors\"}}";
    ck_write_file(ip, bad, strlen(bad));
    quant_ck_error err;
    ck_assert_int_eq(ck_quantize(sharded_rules, in, out, NULL, NULL, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "same directory") != NULL, "%s", err.message);
    const char *missing = "{\"weight_map\":{\"nope\":\"model-00001-of-00002.safetensors\"}}";
    ck_write_file(ip, missing, strlen(missing));
    ck_assert_int_eq(ck_quantize(sharded_rules, in, out, NULL, NULL, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "nope") != NULL, "%s", err.message);
    /* a tensor of a shard the index leaves out: the directory and the tensor named */
    const char *short_by_one =
        "{\"weight_map\":{"
        "\"model.layers.0.self_attn.q_proj.weight\":\"model-00001-of-00002.safetensors\","
        "\"model.layers.0.input_layernorm.weight\":\"model-00001-of-00002.safetensors\","
        "\"lm_head.weight\":\"model-00002-of-00002.safetensors\"}}";
    ck_write_file(ip, short_by_one, strlen(short_by_one));
    ck_assert_int_eq(ck_quantize(sharded_rules, in, out, NULL, NULL, &err), QUANT_CK_ERR_FORMAT);
    char want[4200];
    snprintf(want, sizeof want,
             "%s/model.safetensors.index.json lists 3 tensors but its shards hold 4: tensor "
             "'model.layers.0.mlp.down_proj.weight' of model-00002-of-00002.safetensors is not in "
             "its weight_map; add it to the index, or remove it from the shard",
             in);
    ck_assert_str_eq(err.message, want);
    /* an integer beyond 64 bits: the field named, not jansson's "too big integer" */
    const char *big = "{\"metadata\":{\"total_size\":99999999999999999999},\"weight_map\":{}}";
    ck_write_file(ip, big, strlen(big));
    ck_assert_int_eq(ck_quantize(sharded_rules, in, out, NULL, NULL, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "field 'total_size': integer 99999999999999999999 is out of "
                                      "range: integers must lie in -9223372036854775808.."
                                      "9223372036854775807") &&
                      !strstr(err.message, "too big"),
                  "%s", err.message);
    ck_assert_int_eq(ck_count_entries(root), 1); /* no output, no partial directory */
    free(ip);
    kit_rmtree(root);
    free(root);
    free(in);
    free(out);
}
END_TEST

/* rms calibration over a reduced axis 0 larger than a chunk (two passes): the per-chunk mean
 * squares are merged in double, so the scale is the whole-tensor one to float rounding. */
START_TEST(test_rms_two_pass)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "o");
    float *w = make_model(in, 512, 256, 4);
    const char *rules = "[{\"module_path\":\"m\\\\..*\",\"weight_qtype\":\"int8\","
                        "\"weight_calibration_method\":\"rms,3\",\"contraction_axes\":[0,1]}]";
    float scale[2];
    for (int k = 0; k < 2; k++) {
        quant_ck_error err;
        quant_pipeline_options o;
        quant_pipeline_options_init(&o);
        o.chunk_bytes = k ? 64u << 10 : 64u << 20;
        ck_assert_msg(ck_quantize(rules, in, out, &o, NULL, &err) == QUANT_CK_OK, "%s",
                      err.message);
        size_t n;
        float *s = tensor_bytes(out, "m.w.weight.scale", &n, NULL);
        ck_assert_uint_eq(n, sizeof(float));
        scale[k] = s[0];
        free(s);
        remove(out);
    }
    double sum = 0;
    for (int i = 0; i < 512 * 256; i++) sum += (double)w[i] * w[i];
    double want = 3.0 * sqrt(sum / (512 * 256)) / 127.5; /* int8 absmax maps to 127.5 (SPEC 4) */
    ck_assert_msg(fabs(scale[0] - want) <= 1e-6 * want, "whole %g vs %g", scale[0], want);
    ck_assert_msg(fabs(scale[1] - scale[0]) <= 1e-6 * scale[0], "chunked %g vs whole %g", scale[1],
                  scale[0]);
    free(w);
    kit_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

/* ---- regex matching: errors, not silent "no match"; a bounded run ------------------------- */

static char *repeat(char c, size_t n, const char *tail)
{
    char *s = malloc(n + strlen(tail) + 1);
    ck_assert_ptr_nonnull(s);
    memset(s, c, n);
    strcpy(s + n, tail);
    return s;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A pathological rule on a crafted 10k-character module path fails the run quickly, naming the
 * rule, its regex and the tensor; before, it counted as no match and the next rule took it. */
START_TEST(test_regex_match_error)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "o");
    char *name = repeat('a', 10000, "!.weight");
    float w[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8};
    kit_st_tensor t[] = {{name, "F32", 2, {2, 4}, w, sizeof w}};
    ck_gen_file(in, t, 1, NULL);
    quant_ck_error err;
    double t0 = seconds_now();
    quant_ck_status st = ck_quantize("[{\"module_path\":\"(a+)+$\",\"weight_qtype\":\"int8\"},"
                                     "{\"weight_qtype\":\"int4\"}]",
                                     in, out, NULL, NULL, &err);
    double took = seconds_now() - t0;
    ck_assert_msg(st == QUANT_CK_ERR_RULES, "status %d: %s", st, st ? err.message : "accepted");
    ck_assert_msg(strstr(err.message, "rule 0") && strstr(err.message, "(a+)+$") &&
                      strstr(err.message, "tensor 'aaaaaaaa") && strstr(err.message, "match limit"),
                  "%s", err.message);
    ck_assert_msg(took < 3.0, "took %.1f s", took);
    ck_assert_int_eq(ck_count_entries(dir), 1);
    free(name);
    kit_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

/* Matches that need more than their first try are charged to the run's budget: a rule needing
 * ~125000 steps (250000 with the JIT) on each of many distinct 500-byte module paths (within
 * the limit of one match) ends the run with a named error, quickly. */
START_TEST(test_regex_run_budget)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "o");
    enum { N = 200 };
    kit_st_tensor *t = calloc(N, sizeof *t);
    char *names[N];
    float w[4] = {1, 2, 3, 4};
    for (int i = 0; i < N; i++) {
        char tail[32];
        snprintf(tail, sizeof tail, "b%d.weight", i);
        names[i] = repeat('a', 500, tail);
        t[i] = (kit_st_tensor){names[i], "F32", 2, {2, 2}, w, sizeof w};
    }
    ck_gen_file(in, t, N, NULL);
    const char *rules = "[{\"module_path\":\"a*a*a*b\",\"weight_qtype\":\"int8\"}]";
    quant_ck_error err;
    double t0 = seconds_now();
    quant_ck_status st = ck_quantize(rules, in, out, NULL, NULL, &err);
    double took = seconds_now() - t0;
    ck_assert_msg(st == QUANT_CK_ERR_RULES, "status %d: %s", st, st ? err.message : "accepted");
    ck_assert_msg(strstr(err.message, "rule 0") && strstr(err.message, "a*a*a*b") &&
                      strstr(err.message, "budget") && strstr(err.message, "tensor 'aaaa"),
                  "%s", err.message);
    ck_assert_msg(took < 5.0, "took %.1f s", took);
    /* a few of the same paths stay within the budget: copied, no rule matched (allowed) */
    ck_gen_file(in, t, 4, NULL);
    quant_report *rep = NULL;
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.allow_nothing_quantized = true;
    ck_assert_msg(ck_quantize(rules, in, out, &o, &rep, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_int_eq(quant_report_count(rep), 4);
    ck_assert_int_eq(quant_report_entry_at(rep, 0)->rule, -1);
    quant_report_free(rep);
    for (int i = 0; i < N; i++) free(names[i]);
    free(t);
    kit_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

/* ---- duplicate tensor names across shards ---------------------------------------------------- */

START_TEST(test_duplicate_across_shards)
{
    char *root = ck_tmpdir(), *in = kit_join(root, "in"), *out = kit_join(root, "out");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    float a[4 * 8], b[4 * 8];
    ck_fill(a, 32, 1, 1.0f);
    ck_fill(b, 32, 2, 1.0f);
    kit_st_tensor s1[] = {{"x.weight", "F32", 2, {4, 8}, a, sizeof a},
                          {"y.weight", "F32", 2, {4, 8}, a, sizeof a}};
    kit_st_tensor s2[] = {{"x.weight", "F32", 2, {4, 8}, b, sizeof b},
                          {"z.weight", "F32", 2, {4, 8}, b, sizeof b}};
    char *p1 = kit_join(in, "a.safetensors"), *p2 = kit_join(in, "b.safetensors");
    ck_gen_file(p1, s1, 2, NULL);
    ck_gen_file(p2, s2, 2, NULL);
    const char *rules = "[{\"weight_qtype\":\"int8\"}]";
    quant_ck_error err;
    /* no index: both shards are read, and the name is in both */
    ck_assert_int_eq(ck_quantize(rules, in, out, NULL, NULL, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "'x.weight'") && strstr(err.message, "a.safetensors") &&
                      strstr(err.message, "b.safetensors"),
                  "%s", err.message);
    ck_assert_int_eq(quant_dequantize_path(in, out, QUANT_ST_F32, 1, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "'x.weight'"), "%s", err.message);
    /* an index naming one of the two shards: still refused, naming both */
    char *ip = kit_join(in, "model.safetensors.index.json");
    const char *index = "{\"weight_map\":{\"x.weight\":\"a.safetensors\",\"y.weight\":"
                        "\"a.safetensors\",\"z.weight\":\"b.safetensors\"}}";
    ck_write_file(ip, index, strlen(index));
    ck_assert_int_eq(ck_quantize(rules, in, out, NULL, NULL, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "'x.weight'") && strstr(err.message, "a.safetensors") &&
                      strstr(err.message, "b.safetensors"),
                  "%s", err.message);
    const char *index2 = "{\"weight_map\":{\"x.weight\":\"b.safetensors\",\"y.weight\":"
                         "\"a.safetensors\",\"z.weight\":\"b.safetensors\"}}";
    ck_write_file(ip, index2, strlen(index2));
    ck_assert_int_eq(ck_quantize(rules, in, out, NULL, NULL, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "'x.weight'") && strstr(err.message, "a.safetensors") &&
                      strstr(err.message, "b.safetensors"),
                  "%s", err.message);
    ck_assert_int_eq(ck_count_entries(root), 1); /* no output, no partial directory */
    free(ip);
    free(p1);
    free(p2);
    kit_rmtree(root);
    free(root);
    free(in);
    free(out);
}
END_TEST

/* Two shards whose outputs would share a name (a.safetensors' quantized m.weight becomes
 * m.weight.qvalue, a tensor b.safetensors already has): refused before any data is written. */
START_TEST(test_output_name_clash_across_shards)
{
    char *root = ck_tmpdir(), *in = kit_join(root, "in"), *out = kit_join(root, "out");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    float a[4 * 8];
    int8_t q[4 * 8] = {0};
    ck_fill(a, 32, 1, 1.0f);
    kit_st_tensor s1[] = {{"m.weight", "F32", 2, {4, 8}, a, sizeof a}};
    kit_st_tensor s2[] = {{"m.weight.qvalue", "I8", 2, {4, 8}, q, sizeof q}};
    char *p1 = kit_join(in, "a.safetensors"), *p2 = kit_join(in, "b.safetensors");
    ck_gen_file(p1, s1, 1, NULL);
    ck_gen_file(p2, s2, 1, NULL);
    quant_ck_error err;
    ck_assert_int_eq(ck_quantize("[{\"weight_qtype\":\"int8\"}]", in, out, NULL, NULL, &err),
                     QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "'m.weight.qvalue'") &&
                      strstr(err.message, "a.safetensors") && strstr(err.message, "b.safetensors"),
                  "%s", err.message);
    ck_assert_int_eq(ck_count_entries(root), 1);
    free(p1);
    free(p2);
    kit_rmtree(root);
    free(root);
    free(in);
    free(out);
}
END_TEST

/* ---- stale temporaries --------------------------------------------------------------------- */

typedef struct stale_log {
    int n;
    char path[16][512];
    bool removed[16], is_dir[16];
    char why[16][160];
} stale_log;

static void log_stale(void *user, const quant_stale_temp *t)
{
    stale_log *log = user;
    ck_assert_int_lt(log->n, 16);
    snprintf(log->path[log->n], sizeof log->path[0], "%s", t->path);
    log->removed[log->n] = t->removed;
    log->is_dir[log->n] = t->is_dir;
    snprintf(log->why[log->n], sizeof log->why[0], "%s", t->kept_why ? t->kept_why : "");
    log->n++;
}

/* The entry of `log` for `name` (-1 when absent). */
static int logged(const stale_log *log, const char *name)
{
    for (int i = 0; i < log->n; i++) {
        const char *slash = strrchr(log->path[i], '/');
        if (slash && strcmp(slash + 1, name) == 0) return i;
    }
    return -1;
}

/* A process id that no process has any more: a child that exited and was reaped. */
static pid_t dead_pid(void)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) _exit(0);
    ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
    return pid;
}

static char *temp_path(const char *dir, const char *base, const char *tag, long pid,
                       const char *suffix)
{
    char name[256];
    snprintf(name, sizeof name, "%s%s%ld-%s", base, tag, pid, suffix);
    return kit_join(dir, name);
}

static bool present(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* What quant_remove_stale_temps removes (provably stale: ours by name and type, the user's,
 * unlocked, and a creator gone or 15 minutes without change), what it leaves with a word, and
 * what it leaves without one (a live run's, or not ours). */
START_TEST(test_stale_temps)
{
    char *dir = ck_tmpdir();
    long dead = (long)dead_pid(), me = (long)getpid();
    char *f_dead = temp_path(dir, "a.safetensors", ".quant-tmp-", dead, "Abc123");
    char *d_dead = temp_path(dir, "out", ".quant-partial-", dead, "Xyz789");
    char *f_live = temp_path(dir, "c.safetensors", ".quant-tmp-", me, "Abc123");
    char *f_old = temp_path(dir, "d.safetensors", ".quant-tmp-", me, "Abc123");
    char *f_locked = temp_path(dir, "e.safetensors", ".quant-tmp-", dead, "Abc123");
    char *f_link = temp_path(dir, "f.safetensors", ".quant-tmp-", dead, "Abc123");
    char *f_other = temp_path(dir, "g.safetensors", ".quant-tmp-", dead, "Abc123");
    char *not1 = temp_path(dir, "h.safetensors", ".quant-tmp-", dead, "Abc12");
    char *not2 = temp_path(dir, "i.safetensors", ".quant-tmp-", dead, "Abc123.bak");
    char *not3 = temp_path(dir, "j", ".quant-partial-", dead, "Abc123"); /* a file, not a dir */
    char *inner = kit_join(d_dead, "model.safetensors.quant-tmp-1-abcdef");
    /* a live-looking run's directory: old itself, but a shard inside written just now */
    char *d_busy = temp_path(dir, "busy", ".quant-partial-", me, "Xyz789");
    char *busy_shard = kit_join(d_busy, "a.safetensors.quant-tmp-1-abcdef");
    const char *files[] = {f_dead, f_live, f_old, f_locked, f_other, not1, not2, not3};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) ck_write_file(files[i], "x", 1);
    ck_assert_int_eq(mkdir(d_dead, 0755), 0);
    ck_write_file(inner, "y", 1);
    ck_assert_int_eq(symlink("nowhere", f_link), 0);
    struct timespec old[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    ck_assert_int_eq(utimensat(AT_FDCWD, f_old, old, 0), 0);
    ck_assert_int_eq(mkdir(d_busy, 0755), 0);
    ck_write_file(busy_shard, "z", 1);
    ck_assert_int_eq(utimensat(AT_FDCWD, d_busy, old, 0), 0);
    int lock = open(f_locked, O_RDONLY);
    ck_assert_int_eq(flock(lock, LOCK_EX), 0); /* a live run holds it */
    bool chowned = geteuid() == 0 && chown(f_other, 4242, 4242) == 0;

    stale_log log = {0};
    quant_ck_error err;
    ck_assert_int_eq(quant_remove_stale_temps(dir, log_stale, &log, &err), QUANT_CK_OK);
    const char *base_dead = strrchr(f_dead, '/') + 1, *base_dir = strrchr(d_dead, '/') + 1;
    const char *base_old = strrchr(f_old, '/') + 1, *base_live = strrchr(f_live, '/') + 1;
    int i = logged(&log, base_dead);
    ck_assert_msg(i >= 0 && log.removed[i] && !log.is_dir[i] && !present(f_dead), "%s", base_dead);
    i = logged(&log, base_dir);
    ck_assert_msg(i >= 0 && log.removed[i] && log.is_dir[i] && !present(d_dead), "%s", base_dir);
    i = logged(&log, base_old);
    ck_assert_msg(i >= 0 && log.removed[i] && !present(f_old), "%s", base_old);
    i = logged(&log, base_live);
    ck_assert_msg(i >= 0 && !log.removed[i] && present(f_live) &&
                      strstr(log.why[i], "process id is in use"),
                  "%s: %s", base_live, i >= 0 ? log.why[i] : "not reported");
    i = logged(&log, strrchr(d_busy, '/') + 1);
    ck_assert_msg(i >= 0 && !log.removed[i] && present(busy_shard) &&
                      strstr(log.why[i], "changed in the last 15 minutes"),
                  "%s", d_busy);
    ck_assert(present(f_locked) && logged(&log, strrchr(f_locked, '/') + 1) < 0);
    ck_assert(present(f_link) && logged(&log, strrchr(f_link, '/') + 1) < 0);
    for (int k = 0; k < 3; k++) {
        const char *p = k == 0 ? not1 : k == 1 ? not2 : not3;
        ck_assert_msg(present(p) && logged(&log, strrchr(p, '/') + 1) < 0, "%s", p);
    }
    i = logged(&log, strrchr(f_other, '/') + 1);
    if (chowned)
        ck_assert_msg(i >= 0 && !log.removed[i] && present(f_other) &&
                          strstr(log.why[i], "another user"),
                      "%s", f_other);
    ck_assert_int_eq(log.n, 6); /* 3 removed, f_live and d_busy left, f_other left or removed */
    /* the lock released (its run gone): removed the next time */
    close(lock);
    memset(&log, 0, sizeof log);
    ck_assert_int_eq(quant_remove_stale_temps(dir, log_stale, &log, &err), QUANT_CK_OK);
    ck_assert(!present(f_locked));
    /* a directory that does not exist holds nothing stale */
    char *missing = kit_join(dir, "missing");
    ck_assert_int_eq(quant_remove_stale_temps(missing, NULL, NULL, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_remove_stale_temps(NULL, NULL, NULL, &err), QUANT_CK_ERR_ARG);
    char *all[] = {f_dead, d_dead, f_live, f_old, f_locked, f_link, f_other,
                   not1,   not2,   not3,   inner, missing,  d_busy, busy_shard};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) free(all[k]);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* A run in progress (a writer open in another process) keeps its temporary: it is locked. */
START_TEST(test_stale_temps_spare_live_runs)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "m.safetensors");
    int ready[2], go[2]; /* child -> parent, parent -> child */
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(go), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        quant_st_out_tensor t = {"w", QUANT_ST_F32, 1, {2}};
        quant_st_writer *w = NULL;
        if (quant_st_writer_new(path, &t, 1, NULL, NULL, 0, &w, NULL) != QUANT_CK_OK) _exit(2);
        char c;
        if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) < 0) _exit(3); /* ready; wait */
        quant_st_writer_free(w);
        _exit(0);
    }
    char c;
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    ck_assert_int_eq(ck_count_entries(dir), 1);
    stale_log log = {0};
    struct timespec old[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    DIR *d = opendir(dir);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') { /* even 15 minutes old: the lock says it is alive */
            char *p = kit_join(dir, e->d_name);
            ck_assert_int_eq(utimensat(AT_FDCWD, p, old, 0), 0);
            free(p);
        }
    closedir(d);
    ck_assert_int_eq(quant_remove_stale_temps(dir, log_stale, &log, NULL), QUANT_CK_OK);
    ck_assert_int_eq(log.n, 0);
    ck_assert_int_eq(ck_count_entries(dir), 1);
    ck_assert_int_eq(write(go[1], "q", 1), 1);
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    ck_assert_int_eq(ck_count_entries(dir), 0);
    for (int k = 0; k < 2; k++) {
        close(ready[k]);
        close(go[k]);
    }
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

/* How many of the n bytes at p (page-aligned) are in resident pages, in pages. */
static size_t resident_pages(const void *p, size_t n)
{
    size_t pages = (n + 4095) / 4096, count = 0;
    unsigned char *vec = malloc(pages);
    ck_assert_ptr_nonnull(vec);
    ck_assert_int_eq(mincore((void *)(uintptr_t)p, n, vec), 0);
    for (size_t i = 0; i < pages; i++) count += vec[i] & 1;
    free(vec);
    return count;
}

/* A chunk buffer comes zero-filled and pre-faulted: every page is resident before the first
 * store, so a kernel writing its codes takes no page fault (on a kernel with
 * MADV_POPULATE_WRITE, 5.14 and later; an older one only gets the zero fill checked). Residency
 * is read with mincore, not counted in faults: a sanitizer's shadow memory faults on its own. One
 * freed is handed out again for the same size, and ck_buf_trim empties the cache. */
START_TEST(test_buffers_prefaulted)
{
    ck_buf_trim();
    void *probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(probe, MAP_FAILED);
    bool populate = madvise(probe, 4096, MADV_POPULATE_WRITE) == 0;
    munmap(probe, 4096);
    const size_t sizes[] = {4096 * 3 + 1, (size_t)8 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k], pages = (n + 4095) / 4096;
        unsigned char *p = ck_buf_alloc(n);
        ck_assert_ptr_nonnull(p);
        if (populate)
            ck_assert_msg(resident_pages(p, n) == pages,
                          "%zu-byte buffer: %zu of %zu pages resident before the first store", n,
                          resident_pages(p, n), pages);
        unsigned long sum = 0;
        for (size_t i = 0; i < n; i += 4096) sum += p[i];
        ck_assert_uint_eq(sum, 0);
        memset(p, 0x5a, n);
        ck_buf_free(p, n);
        ck_assert_ptr_eq(ck_buf_alloc(n), p); /* the cached mapping again, as left */
        ck_assert_uint_eq(p[n - 1], 0x5a);
        ck_buf_free(p, n);
    }
    ck_buf_trim();
}
END_TEST

Suite *suite_pipeline(void)
{
    Suite *s = suite_create("pipeline");
    TCase *tc = tcase_create("pipeline");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_quantized_and_copied);
    tcase_add_test(tc, test_chunking_is_invisible);
    tcase_add_test(tc, test_rms_two_pass);
    tcase_add_test(tc, test_failure_leaves_nothing);
    tcase_add_test(tc, test_sharded_round_trip);
    tcase_add_test(tc, test_bad_index);
    tcase_add_test(tc, test_regex_match_error);
    tcase_add_test(tc, test_regex_run_budget);
    tcase_add_test(tc, test_duplicate_across_shards);
    tcase_add_test(tc, test_output_name_clash_across_shards);
    tcase_add_test(tc, test_stale_temps);
    tcase_add_test(tc, test_stale_temps_spare_live_runs);
    tcase_add_test(tc, test_buffers_prefaulted);
    suite_add_tcase(s, tc);
    return s;
}
