/* test_pipeline.c -- the checkpoint engine end to end on generated files: what is quantized and
 * what is copied, bit equality with libquant on the whole tensor whatever the chunking (one- and
 * two-pass), sharded directories, atomic output on failure and cancel, the report, and the
 * dequantize round trip within the reported error.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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
    ck_gen_tensor t[] = {
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
    char *dir = ck_tmpdir(), *in = ck_join(dir, "in.safetensors"), *out = ck_join(dir, "out.st");
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
    ck_rmtree(dir);
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
    void *bytes = ck_read_file(out, len);
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
    char *dir = ck_tmpdir(), *in = ck_join(dir, "in.safetensors"), *out = ck_join(dir, "o");
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
    ck_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

START_TEST(test_failure_leaves_nothing)
{
    char *dir = ck_tmpdir(), *in = ck_join(dir, "in.safetensors"), *out = ck_join(dir, "out.st");
    float w[8 * 16];
    ck_fill(w, 128, 5, 1.0f);
    w[77] = NAN;
    ck_gen_tensor t[] = {{"a.weight", "F32", 2, {8, 16}, w, sizeof w}};
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
    ck_rmtree(dir);
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
    ck_gen_tensor s1[] = {
        {"model.layers.0.self_attn.q_proj.weight", "BF16", 2, {32, 64}, a, sizeof a},
        {"model.layers.0.input_layernorm.weight", "BF16", 1, {32}, norm, sizeof norm},
    };
    ck_gen_tensor s2[] = {
        {"model.layers.0.mlp.down_proj.weight", "BF16", 2, {64, 32}, b, sizeof b},
        {"lm_head.weight", "BF16", 2, {32, 64}, a, sizeof a},
    };
    char *p1 = ck_join(dir, "model-00001-of-00002.safetensors");
    char *p2 = ck_join(dir, "model-00002-of-00002.safetensors");
    ck_gen_file(p1, s1, 2, "{\"format\":\"pt\"}");
    ck_gen_file(p2, s2, 2, "{\"format\":\"pt\"}");
    const char *index =
        "{\"metadata\":{\"total_size\":12352},\"weight_map\":{"
        "\"model.layers.0.self_attn.q_proj.weight\":\"model-00001-of-00002.safetensors\","
        "\"model.layers.0.input_layernorm.weight\":\"model-00001-of-00002.safetensors\","
        "\"model.layers.0.mlp.down_proj.weight\":\"model-00002-of-00002.safetensors\","
        "\"lm_head.weight\":\"model-00002-of-00002.safetensors\"}}";
    char *ip = ck_join(dir, "model.safetensors.index.json");
    char *cp = ck_join(dir, "config.json");
    char *tp = ck_join(dir, "tokenizer.json");
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
    char *root = ck_tmpdir(), *in = ck_join(root, "in"), *out = ck_join(root, "out"),
         *back = ck_join(root, "back");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    make_sharded(in);
    quant_report *rep = NULL;
    quant_ck_error err;
    ck_assert_msg(ck_quantize(sharded_rules, in, out, NULL, &rep, &err) == QUANT_CK_OK, "%s",
                  err.message);
    ck_assert_int_eq(ck_count_entries(out), 5); /* 2 shards, index, config, tokenizer */
    char *idx_path = ck_join(out, "model.safetensors.index.json");
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
        char *src = ck_join(in, e->shard), *dst = ck_join(back, e->shard);
        size_t n, m;
        quant_st_tensor ti, to;
        void *a = tensor_bytes(src, e->name, &n, &ti);
        void *b = tensor_bytes(dst, e->name, &m, &to);
        ck_assert_int_eq(ti.rank, to.rank);
        if (e->quantized) {
            ck_assert_int_eq(to.dtype, QUANT_ST_F32);
            for (size_t k = 0; k < n / 2; k++) {
                double x = quant_bf16_to_f32(((uint16_t *)a)[k]), y = ((float *)b)[k];
                ck_assert_msg(fabs(x - y) <= e->max_abs_err, "%s[%zu]: %g vs %g (max %g)", e->name,
                              k, x, y, e->max_abs_err);
            }
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
    ck_rmtree(root);
    free(root);
    free(in);
    free(out);
    free(back);
}
END_TEST

START_TEST(test_bad_index)
{
    char *root = ck_tmpdir(), *in = ck_join(root, "in"), *out = ck_join(root, "out");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    make_sharded(in);
    char *ip = ck_join(in, "model.safetensors.index.json");
    const char *bad = "{\"weight_map\":{\"x\":\"../evil.safetensors\"}}";
    ck_write_file(ip, bad, strlen(bad));
    quant_ck_error err;
    ck_assert_int_eq(ck_quantize(sharded_rules, in, out, NULL, NULL, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "same directory") != NULL, "%s", err.message);
    const char *missing = "{\"weight_map\":{\"nope\":\"model-00001-of-00002.safetensors\"}}";
    ck_write_file(ip, missing, strlen(missing));
    ck_assert_int_eq(ck_quantize(sharded_rules, in, out, NULL, NULL, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "nope") != NULL, "%s", err.message);
    ck_assert_int_eq(ck_count_entries(root), 1); /* no output, no partial directory */
    free(ip);
    ck_rmtree(root);
    free(root);
    free(in);
    free(out);
}
END_TEST

/* rms calibration over a reduced axis 0 larger than a chunk (two passes): the per-chunk mean
 * squares are merged in double, so the scale is the whole-tensor one to float rounding. */
START_TEST(test_rms_two_pass)
{
    char *dir = ck_tmpdir(), *in = ck_join(dir, "in.safetensors"), *out = ck_join(dir, "o");
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
    ck_rmtree(dir);
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
    char *dir = ck_tmpdir(), *in = ck_join(dir, "in.safetensors"), *out = ck_join(dir, "o");
    char *name = repeat('a', 10000, "!.weight");
    float w[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8};
    ck_gen_tensor t[] = {{name, "F32", 2, {2, 4}, w, sizeof w}};
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
    ck_rmtree(dir);
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
    char *dir = ck_tmpdir(), *in = ck_join(dir, "in.safetensors"), *out = ck_join(dir, "o");
    enum { N = 200 };
    ck_gen_tensor *t = calloc(N, sizeof *t);
    char *names[N];
    float w[4] = {1, 2, 3, 4};
    for (int i = 0; i < N; i++) {
        char tail[32];
        snprintf(tail, sizeof tail, "b%d.weight", i);
        names[i] = repeat('a', 500, tail);
        t[i] = (ck_gen_tensor){names[i], "F32", 2, {2, 2}, w, sizeof w};
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
    /* a few of the same paths stay within the budget: copied, no rule matched */
    ck_gen_file(in, t, 4, NULL);
    quant_report *rep = NULL;
    ck_assert_msg(ck_quantize(rules, in, out, NULL, &rep, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_int_eq(quant_report_count(rep), 4);
    ck_assert_int_eq(quant_report_entry_at(rep, 0)->rule, -1);
    quant_report_free(rep);
    for (int i = 0; i < N; i++) free(names[i]);
    free(t);
    ck_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

/* ---- duplicate tensor names across shards ---------------------------------------------------- */

START_TEST(test_duplicate_across_shards)
{
    char *root = ck_tmpdir(), *in = ck_join(root, "in"), *out = ck_join(root, "out");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    float a[4 * 8], b[4 * 8];
    ck_fill(a, 32, 1, 1.0f);
    ck_fill(b, 32, 2, 1.0f);
    ck_gen_tensor s1[] = {{"x.weight", "F32", 2, {4, 8}, a, sizeof a},
                          {"y.weight", "F32", 2, {4, 8}, a, sizeof a}};
    ck_gen_tensor s2[] = {{"x.weight", "F32", 2, {4, 8}, b, sizeof b},
                          {"z.weight", "F32", 2, {4, 8}, b, sizeof b}};
    char *p1 = ck_join(in, "a.safetensors"), *p2 = ck_join(in, "b.safetensors");
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
    char *ip = ck_join(in, "model.safetensors.index.json");
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
    ck_rmtree(root);
    free(root);
    free(in);
    free(out);
}
END_TEST

/* Two shards whose outputs would share a name (a.safetensors' quantized m.weight becomes
 * m.weight.qvalue, a tensor b.safetensors already has): refused before any data is written. */
START_TEST(test_output_name_clash_across_shards)
{
    char *root = ck_tmpdir(), *in = ck_join(root, "in"), *out = ck_join(root, "out");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    float a[4 * 8];
    int8_t q[4 * 8] = {0};
    ck_fill(a, 32, 1, 1.0f);
    ck_gen_tensor s1[] = {{"m.weight", "F32", 2, {4, 8}, a, sizeof a}};
    ck_gen_tensor s2[] = {{"m.weight.qvalue", "I8", 2, {4, 8}, q, sizeof q}};
    char *p1 = ck_join(in, "a.safetensors"), *p2 = ck_join(in, "b.safetensors");
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
    ck_rmtree(root);
    free(root);
    free(in);
    free(out);
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
    suite_add_tcase(s, tc);
    return s;
}
