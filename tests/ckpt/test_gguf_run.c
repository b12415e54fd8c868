/* test_gguf_run.c -- the gguf_run suite: quant_quantize_path() with the gguf layout over small
 * GGUF models it writes itself (a Llama of 2 layers, rows of 256 and 512): every pair copied and
 * general.file_type / general.quantization_version set, each tensor's type as the mix and the
 * rules choose it, norms kept byte for byte, the quantized tensors within their type's error of
 * the input, importance from statistics (GGUF or Hugging Face module paths) and from imatrix
 * files (GGUF and legacy .dat) lowering the weighted error; refusals that name the rule, the
 * tensor and the limit, with nothing left behind.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "ckutil.h"
#include "quant_gguf.h"
#include "quant_imatrix.h"

#define DIM    256
#define HIDDEN 512
#define VOCAB  64
#define LAYERS 2

static const char *const layer_parts[] = {"attn_norm", "attn_q",      "attn_k",
                                          "attn_v",    "attn_output", "ffn_norm",
                                          "ffn_gate",  "ffn_up",      "ffn_down"};

/* ne[0] (row length) and ne[1] (rows) of a part; ne[1] == 1 for the 1-D norms. */
static void part_dims(const char *part, int64_t ne[2], int *n_dims)
{
    bool norm = strstr(part, "norm") != NULL;
    bool down = !strcmp(part, "ffn_down"),
         up = !strcmp(part, "ffn_gate") || !strcmp(part, "ffn_up");
    ne[0] = down ? HIDDEN : DIM;
    ne[1] = norm ? 1 : up ? HIDDEN : DIM;
    *n_dims = norm ? 1 : 2;
}

static void add_f32(quant_gguf_writer *w, const char *name, int n_dims, int64_t ne0, int64_t ne1)
{
    int64_t ne[2] = {ne0, ne1};
    quant_ck_error err;
    ck_assert_int_eq(quant_gguf_writer_add_tensor(w, name, n_dims, ne, QUANT_GGML_F32, NULL, &err),
                     QUANT_CK_OK);
}

static void put_f32(quant_gguf_writer *w, int64_t n, uint64_t seed)
{
    float *x = malloc((size_t)n * sizeof *x);
    ck_fill(x, (size_t)n, seed, 0.05f);
    quant_ck_error err;
    ck_assert_int_eq(quant_gguf_writer_write(w, x, (size_t)n * sizeof *x, &err), QUANT_CK_OK);
    free(x);
}

/* A 2-layer Llama GGUF at `path` (F32), with the keys llama.cpp reads and a small tokenizer. */
static void make_model(const char *path)
{
    quant_gguf_writer *w;
    quant_ck_error err;
    ck_assert_int_eq(quant_gguf_writer_new(path, &w, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_writer_set_string(w, "general.architecture", "llama", &err), 0);
    ck_assert_int_eq(quant_gguf_writer_set_u32(w, "llama.block_count", LAYERS, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_set_u32(w, "llama.embedding_length", DIM, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_set_u32(w, "llama.attention.head_count", 4, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_set_u32(w, "general.file_type", 0, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_set_u32(w, "split.count", 1, &err), 0);
    const char *tokens[] = {"<unk>", "<s>", "</s>", "a"};
    ck_assert_int_eq(quant_gguf_writer_set_strings(w, "tokenizer.ggml.tokens", tokens, 4, &err), 0);
    add_f32(w, "token_embd.weight", 2, DIM, VOCAB);
    add_f32(w, "output_norm.weight", 1, DIM, 1);
    add_f32(w, "output.weight", 2, DIM, VOCAB);
    for (int l = 0; l < LAYERS; l++)
        for (size_t p = 0; p < sizeof layer_parts / sizeof layer_parts[0]; p++) {
            char name[64];
            int64_t ne[2];
            int n_dims;
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, layer_parts[p]);
            part_dims(layer_parts[p], ne, &n_dims);
            add_f32(w, name, n_dims, ne[0], ne[1]);
        }
    ck_assert_int_eq(quant_gguf_writer_begin(w, &err), QUANT_CK_OK);
    put_f32(w, (int64_t)DIM * VOCAB, 1);
    put_f32(w, DIM, 2);
    put_f32(w, (int64_t)DIM * VOCAB, 3);
    uint64_t seed = 10;
    for (int l = 0; l < LAYERS; l++)
        for (size_t p = 0; p < sizeof layer_parts / sizeof layer_parts[0]; p++) {
            int64_t ne[2];
            int n_dims;
            part_dims(layer_parts[p], ne, &n_dims);
            put_f32(w, ne[0] * ne[1], seed++);
        }
    ck_assert_int_eq(quant_gguf_writer_commit(w, &err), QUANT_CK_OK);
    quant_gguf_writer_free(w);
}

typedef struct fixture {
    char *dir, *in, *out;
} fixture;

static void fixture_new(fixture *f)
{
    f->dir = ck_tmpdir();
    f->in = kit_join(f->dir, "model-f32.gguf");
    f->out = kit_join(f->dir, "out.gguf");
    make_model(f->in);
}

static void fixture_free(fixture *f)
{
    kit_rmtree(f->dir);
    free(f->dir);
    free(f->in);
    free(f->out);
}

static quant_ck_status run(const fixture *f, const char *rules, const char *mix,
                           quant_pipeline_options *o, quant_report **rep, quant_ck_error *err)
{
    quant_pipeline_options defaults;
    if (!o) {
        quant_pipeline_options_init(&defaults);
        o = &defaults;
    }
    o->layout = QUANT_LAYOUT_GGUF;
    o->gguf_mix = mix;
    if (!o->threads) o->threads = 2;
    return ck_quantize(rules, f->in, f->out, o, rep, err);
}

static const quant_gguf_tensor *tensor(const quant_gguf_file *g, const char *name)
{
    const quant_gguf_tensor *t = quant_gguf_find_tensor(g, name);
    ck_assert_msg(t != NULL, "no tensor %s", name);
    return t;
}

/* The relative error sum (x - y)^2 / sum x^2 of tensor `name` of `out` against `in`. */
static double rel_error(const char *in, const char *out, const char *name)
{
    quant_gguf_file *a, *b;
    quant_ck_error err;
    ck_assert_int_eq(quant_gguf_open(in, &a, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_open(out, &b, &err), QUANT_CK_OK);
    const quant_gguf_tensor *ta = tensor(a, name), *tb = tensor(b, name);
    int64_t n = ta->ne[0] * ta->nrows;
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    void *raw = malloc(tb->nbytes);
    ck_assert_int_eq(quant_gguf_read(a, ta, 0, x, (size_t)n * 4, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_read(b, tb, 0, raw, tb->nbytes, &err), QUANT_CK_OK);
    quant_error qe;
    ck_assert_int_eq(quant_ggml_dequantize(NULL, tb->type, raw, tb->nrows, tb->ne[0], y, &qe),
                     QUANT_OK);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        den += (double)x[i] * x[i];
    }
    free(x);
    free(y);
    free(raw);
    quant_gguf_close(a);
    quant_gguf_close(b);
    return num / den;
}

START_TEST(mix_q4_k_m_writes_llama_cpp_types)
{
    fixture f;
    fixture_new(&f);
    quant_report *rep = NULL;
    quant_ck_error err;
    ck_assert_int_eq(run(&f, "[]", "Q4_K_M", NULL, &rep, &err), QUANT_CK_OK);
    quant_gguf_file *g;
    ck_assert_int_eq(quant_gguf_open(f.out, &g, &err), QUANT_CK_OK);
    uint32_t v;
    ck_assert_int_eq(quant_gguf_get_u32(g, "general.file_type", &v, &err), QUANT_CK_OK);
    ck_assert_uint_eq(v, 15);
    ck_assert_int_eq(quant_gguf_get_u32(g, "general.quantization_version", &v, &err), 0);
    ck_assert_uint_eq(v, 2);
    ck_assert_ptr_null(quant_gguf_find_kv(g, "split.count"));
    ck_assert_ptr_nonnull(quant_gguf_find_kv(g, "tokenizer.ggml.tokens"));
    ck_assert_int_eq(tensor(g, "output.weight")->type, QUANT_GGML_Q6_K);
    ck_assert_int_eq(tensor(g, "token_embd.weight")->type, QUANT_GGML_Q4_K);
    ck_assert_int_eq(tensor(g, "output_norm.weight")->type, QUANT_GGML_F32);
    /* use_more_bits(i, 2): layer 0 no, layer 1 (>= 7 * 2 / 8) yes */
    ck_assert_int_eq(tensor(g, "blk.0.attn_v.weight")->type, QUANT_GGML_Q4_K);
    ck_assert_int_eq(tensor(g, "blk.1.attn_v.weight")->type, QUANT_GGML_Q6_K);
    ck_assert_int_eq(tensor(g, "blk.1.ffn_down.weight")->type, QUANT_GGML_Q6_K);
    ck_assert_int_eq(tensor(g, "blk.0.attn_q.weight")->type, QUANT_GGML_Q4_K);
    quant_gguf_close(g);
    ck_assert_double_lt(rel_error(f.in, f.out, "blk.0.attn_q.weight"), 0.01);
    ck_assert_double_lt(rel_error(f.in, f.out, "blk.1.attn_v.weight"), 0.001);
    ck_assert_double_eq(rel_error(f.in, f.out, "output_norm.weight"), 0.0);
    /* the report: one entry per tensor, the output with its size */
    ck_assert_uint_eq(quant_report_count(rep), 3 + LAYERS * 9);
    ck_assert_uint_eq(quant_report_output_count(rep), 1);
    ck_assert_str_eq(quant_report_output_at(rep, 0)->name, "out.gguf");
    quant_report_free(rep);
    fixture_free(&f);
}
END_TEST

/* A rule overrides the mix for the tensors it matches (module paths are GGUF's: blk.N.part). */
START_TEST(rules_override_the_mix)
{
    fixture f;
    fixture_new(&f);
    quant_ck_error err;
    const char *rules = "{\"gguf_mix\": \"Q4_0\", \"rules\": ["
                        "{\"module_path\": \"blk\\\\.0\\\\.attn_q\", \"weight_qtype\": \"q8_0\"},"
                        "{\"module_path\": \"blk\\\\.1\\\\.ffn_.*\", \"weight_qtype\": null},"
                        "{\"module_path\": \"nothing\", \"weight_qtype\": \"q4_k\"}]}";
    quant_report *rep = NULL;
    ck_assert_int_eq(run(&f, rules, NULL, NULL, &rep, &err), QUANT_CK_OK);
    quant_gguf_file *g;
    ck_assert_int_eq(quant_gguf_open(f.out, &g, &err), QUANT_CK_OK);
    ck_assert_int_eq(tensor(g, "blk.0.attn_q.weight")->type, QUANT_GGML_Q8_0);
    ck_assert_int_eq(tensor(g, "blk.0.attn_k.weight")->type, QUANT_GGML_Q4_0);
    ck_assert_int_eq(tensor(g, "blk.1.ffn_up.weight")->type, QUANT_GGML_F32);
    uint32_t v;
    ck_assert_int_eq(quant_gguf_get_u32(g, "general.file_type", &v, &err), QUANT_CK_OK);
    ck_assert_uint_eq(v, 2); /* the rule set's mix */
    quant_gguf_close(g);
    size_t n;
    const long *unused = quant_report_unused_rules(rep, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(unused[0], 2);
    quant_report_free(rep);
    /* the option's mix wins over the rule set's; no mix: only the rules' tensors change */
    unlink(f.out);
    ck_assert_int_eq(run(&f, rules, "Q8_0", NULL, NULL, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_open(f.out, &g, &err), QUANT_CK_OK);
    ck_assert_int_eq(tensor(g, "blk.0.attn_k.weight")->type, QUANT_GGML_Q8_0);
    quant_gguf_close(g);
    unlink(f.out);
    ck_assert_int_eq(run(&f, "[{\"module_path\": \".*attn_k\", \"weight_qtype\": \"iq4_xs\"}]",
                         NULL, NULL, NULL, &err),
                     QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_open(f.out, &g, &err), QUANT_CK_OK);
    ck_assert_int_eq(tensor(g, "blk.1.attn_k.weight")->type, QUANT_GGML_IQ4_XS);
    ck_assert_int_eq(tensor(g, "blk.1.attn_q.weight")->type, QUANT_GGML_F32);
    ck_assert_ptr_null(quant_gguf_find_kv(g, "general.file_type"));
    quant_gguf_close(g);
    fixture_free(&f);
}
END_TEST

/* What GGUF cannot hold is refused before anything is written, naming rule, tensor and the
 * nearest type; nothing is left at the output. */
START_TEST(refusals_name_rule_tensor_and_nearest_type)
{
    fixture f;
    fixture_new(&f);
    quant_ck_error err;
    static const struct {
        const char *rules, *want;
    } cases[] = {
        {"[{\"module_path\": \".*attn_q\", \"weight_qtype\": \"int8\"}]",
         "nearest GGUF type is q8_0"},
        {"[{\"module_path\": \".*attn_q\", \"weight_qtype\": \"nf4\"}]", "iq4_nl"},
        {"[{\"module_path\": \".*\", \"weight_qtype\": \"q4_0\", \"act_qtype\": \"int8\"}]",
         "act_qtype"},
        {"[{\"module_path\": \".*\", \"weight_qtype\": \"q4_0\", \"weight_calibration_method\": "
         "\"absmax,0.9\"}]",
         "weight_calibration"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_int_eq(run(&f, cases[i].rules, NULL, NULL, NULL, &err), QUANT_CK_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(err.message, cases[i].want), "%s", err.message);
        ck_assert_msg(strstr(err.message, "rule 0"), "%s", err.message);
        ck_assert_msg(strstr(err.message, "model-f32.gguf"), "%s", err.message);
        ck_assert_int_eq(access(f.out, F_OK), -1);
    }
    ck_assert_int_eq(ck_count_entries(f.dir), 1); /* the input only: no temporary left */
    /* what the rule parser refuses of a block type already: another tile, activations */
    quant_ruleset *rs = NULL;
    const char *bad_tile = "[{\"weight_qtype\": \"q4_0\", \"tile_size\": 64}]";
    ck_assert_int_eq(quant_ruleset_parse(bad_tile, strlen(bad_tile), "r", &rs, &err),
                     QUANT_CK_ERR_RULES);
    ck_assert_ptr_nonnull(strstr(err.message, "fixed tile of 32"));
    const char *act = "[{\"weight_qtype\": \"int8\", \"act_qtype\": \"q8_0\"}]";
    ck_assert_int_eq(quant_ruleset_parse(act, strlen(act), "r", &rs, &err), QUANT_CK_ERR_RULES);
    ck_assert_ptr_nonnull(strstr(err.message, "weights only"));
    /* weight_importance without statistics */
    ck_assert_int_eq(run(&f,
                         "[{\"module_path\": \".*attn_q\", \"weight_qtype\": \"q4_k\", "
                         "\"weight_calibration_method\": \"mse\", \"weight_importance\": true}]",
                         NULL, NULL, NULL, &err),
                     QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "weight_importance"));
    ck_assert_ptr_nonnull(strstr(err.message, "blk.0.attn_q"));
    /* nothing would change: refused unless allowed */
    ck_assert_int_eq(run(&f, "[{\"module_path\": \"attn_q\", \"weight_qtype\": \"q8_0\"}]", NULL,
                         NULL, NULL, &err),
                     QUANT_CK_ERR_RULES);
    ck_assert_ptr_nonnull(strstr(err.message, "nothing to quantize"));
    ck_assert_int_eq(
        run(&f, "{\"allow_nothing_quantized\": true, \"rules\": []}", NULL, NULL, NULL, &err),
        QUANT_CK_OK);
    unlink(f.out);
    /* an unknown mix; a safetensors input */
    ck_assert_int_eq(run(&f, "[]", "Q4_K_X", NULL, NULL, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "Q4_K_M"));
    fixture_free(&f);
}
END_TEST

/* Importance: from statistics named after GGUF or Hugging Face module paths; the weighted error
 * of a tensor quantized with it is below the one without. */
static double weighted_error(const fixture *f, const char *name, const float *w)
{
    quant_gguf_file *a, *b;
    quant_ck_error err;
    ck_assert_int_eq(quant_gguf_open(f->in, &a, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_open(f->out, &b, &err), QUANT_CK_OK);
    const quant_gguf_tensor *ta = tensor(a, name), *tb = tensor(b, name);
    int64_t n = ta->ne[0] * ta->nrows;
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    void *raw = malloc(tb->nbytes);
    ck_assert_int_eq(quant_gguf_read(a, ta, 0, x, (size_t)n * 4, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_read(b, tb, 0, raw, tb->nbytes, &err), QUANT_CK_OK);
    quant_error qe;
    ck_assert_int_eq(quant_ggml_dequantize(NULL, tb->type, raw, tb->nrows, tb->ne[0], y, &qe), 0);
    double e = 0;
    for (int64_t i = 0; i < n; i++) e += w[i % ta->ne[0]] * ((double)x[i] - y[i]) * (x[i] - y[i]);
    free(x);
    free(y);
    free(raw);
    quant_gguf_close(a);
    quant_gguf_close(b);
    return e;
}

START_TEST(importance_from_statistics_lowers_weighted_error)
{
    fixture f;
    fixture_new(&f);
    float w[DIM];
    for (int i = 0; i < DIM; i++) w[i] = i % 7 == 0 ? 50.0f : 0.01f;
    quant_ck_error err;
    ck_assert_int_eq(run(&f, "[]", "Q2_K", NULL, NULL, &err), QUANT_CK_OK);
    double plain = weighted_error(&f, "blk.0.attn_q.weight", w);
    double plain_k = weighted_error(&f, "blk.0.attn_k.weight", w);
    quant_importance imp[] = {
        {.act = "blk/0/attn_q", .module_path = "blk.0.attn_q", .w = w, .n = DIM},
        {.act = "k_proj", .module_path = "model.layers.0.self_attn.k_proj", .w = w, .n = DIM},
        {.act = "wrong length", .module_path = "blk.0.attn_v", .w = w, .n = DIM / 2},
    };
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.importance_given = true;
    o.importance = imp;
    o.n_importance = 3;
    quant_report *rep = NULL;
    unlink(f.out);
    ck_assert_int_eq(run(&f, "[]", "Q2_K", &o, &rep, &err), QUANT_CK_OK);
    ck_assert_double_lt(weighted_error(&f, "blk.0.attn_q.weight", w), plain);
    ck_assert_double_lt(weighted_error(&f, "blk.0.attn_k.weight", w), plain_k);
    bool seen = false;
    for (size_t i = 0; i < quant_report_count(rep); i++) {
        const quant_report_entry *e = quant_report_entry_at(rep, i);
        if (!strcmp(e->name, "blk.0.attn_k.weight")) {
            seen = true;
            ck_assert_str_eq(e->importance_act, "k_proj");
        }
        if (!strcmp(e->name, "blk.0.attn_v.weight")) ck_assert_ptr_null(e->importance_act);
    }
    ck_assert(seen);
    quant_report_free(rep);
    fixture_free(&f);
}
END_TEST

/* llama.cpp's imatrix files: the GGUF format (in_sum2 / counts, a zero count weighing 1) and the
 * legacy .dat (sums / ncall); malformed ones refused naming the file and entry. */
START_TEST(imatrix_files_gguf_and_dat)
{
    char *dir = ck_tmpdir(), *gg = kit_join(dir, "imatrix.gguf"), *dat = kit_join(dir, "i.dat");
    quant_gguf_writer *w;
    quant_ck_error err;
    ck_assert_int_eq(quant_gguf_writer_new(gg, &w, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_writer_set_string(w, "general.type", "imatrix", &err), 0);
    int64_t ne_s[2] = {4, 1}, ne_c[2] = {1, 1};
    ck_assert_int_eq(quant_gguf_writer_add_tensor(w, "blk.0.attn_q.weight.in_sum2", 2, ne_s,
                                                  QUANT_GGML_F32, NULL, &err),
                     0);
    ck_assert_int_eq(quant_gguf_writer_add_tensor(w, "blk.0.attn_q.weight.counts", 2, ne_c,
                                                  QUANT_GGML_F32, NULL, &err),
                     0);
    ck_assert_int_eq(
        quant_gguf_writer_add_tensor(w, "x.weight.in_sum2", 2, ne_s, QUANT_GGML_F32, NULL, &err),
        0);
    ck_assert_int_eq(
        quant_gguf_writer_add_tensor(w, "x.weight.counts", 2, ne_c, QUANT_GGML_F32, NULL, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_begin(w, &err), QUANT_CK_OK);
    float sums[4] = {2, 4, 6, 8}, count = 2.0f, zero = 0.0f;
    ck_assert_int_eq(quant_gguf_writer_write(w, sums, sizeof sums, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_write(w, &count, 4, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_write(w, sums, sizeof sums, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_write(w, &zero, 4, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_commit(w, &err), QUANT_CK_OK);
    quant_gguf_writer_free(w);
    quant_imatrix *m;
    ck_assert_int_eq(quant_imatrix_load(gg, &m, &err), QUANT_CK_OK);
    size_t n;
    const quant_importance *e = quant_imatrix_entries(m, &n);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(e[0].module_path, "blk.0.attn_q");
    ck_assert_str_eq(e[0].act, "blk.0.attn_q.weight");
    ck_assert_int_eq(e[0].n, 4);
    ck_assert(e[0].w[0] == 1.0f && e[0].w[3] == 4.0f);
    ck_assert(e[1].w[0] == 1.0f && e[1].w[3] == 1.0f); /* count 0: every column weighs 1 */
    quant_imatrix_free(m);

    /* legacy: 1 entry "a.weight", ncall 4, 2 values 8 and 12 */
    unsigned char buf[64];
    size_t len = 0;
    int32_t i32;
    float f32;
#define PUT(v) (memcpy(buf + len, &(v), 4), len += 4)
    i32 = 1, PUT(i32);
    i32 = 8, PUT(i32);
    memcpy(buf + len, "a.weight", 8), len += 8;
    i32 = 4, PUT(i32);
    i32 = 2, PUT(i32);
    f32 = 8, PUT(f32);
    f32 = 12, PUT(f32);
#undef PUT
    ck_write_file(dat, buf, len);
    ck_assert_int_eq(quant_imatrix_load(dat, &m, &err), QUANT_CK_OK);
    e = quant_imatrix_entries(m, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert(e[0].w[0] == 2.0f && e[0].w[1] == 3.0f);
    ck_assert_str_eq(e[0].module_path, "a");
    quant_imatrix_free(m);
    ck_write_file(dat, buf, len - 2); /* cut inside the values */
    ck_assert_int_eq(quant_imatrix_load(dat, &m, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "a.weight"));
    ck_assert_ptr_nonnull(strstr(err.message, "past the end"));
    ck_write_file(dat, "junk", 4);
    ck_assert_int_eq(quant_imatrix_load(dat, &m, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "not an importance matrix"));

    /* written back: Hugging Face module paths become GGUF weights; values exact */
    float wq[3] = {0.1f, 2.5f, 1e-7f}, wd[2] = {3, 4};
    quant_importance in[] = {
        {.act = "model/layers/0/self_attn/q_proj/x",
         .module_path = "model.layers.0.self_attn.q_proj",
         .w = wq,
         .n = 3},
        {.act = "d", .module_path = "blk.1.ffn_down", .w = wd, .n = 2},
    };
    char *out = kit_join(dir, "export.gguf");
    ck_assert_int_eq(quant_imatrix_write(out, in, 2, "run 7", &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_imatrix_load(out, &m, &err), QUANT_CK_OK);
    e = quant_imatrix_entries(m, &n);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(e[0].act, "blk.0.attn_q.weight"); /* sorted by name */
    ck_assert(e[0].n == 3 && e[0].w[1] == 2.5f && e[0].w[2] == 1e-7f);
    ck_assert_str_eq(e[1].act, "blk.1.ffn_down.weight");
    quant_imatrix_free(m);
    in[1].module_path = "blk.0.attn_q"; /* the same weight twice */
    ck_assert_int_eq(quant_imatrix_write(out, in, 2, NULL, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "both are weight blk.0.attn_q.weight"));
    free(out);
    kit_rmtree(dir);
    free(dir);
    free(gg);
    free(dat);
}
END_TEST

/* The output's temporaries are gone after a cancelled run, and the same inputs give the same
 * bytes whatever the thread count or chunk size. */
static atomic_int cancel_now = 1;

START_TEST(deterministic_and_cancellable)
{
    fixture f;
    fixture_new(&f);
    quant_ck_error err;
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.sha256 = true;
    quant_report *rep = NULL;
    ck_assert_int_eq(run(&f, "[]", "Q3_K_M", &o, &rep, &err), QUANT_CK_OK);
    char first[65];
    snprintf(first, sizeof first, "%s", quant_report_output_at(rep, 0)->sha256);
    quant_report_free(rep);
    unlink(f.out);
    quant_pipeline_options_init(&o);
    o.sha256 = true;
    o.chunk_bytes = 64 << 10;
    o.threads = 1;
    ck_assert_int_eq(run(&f, "[]", "Q3_K_M", &o, &rep, &err), QUANT_CK_OK);
    ck_assert_str_eq(quant_report_output_at(rep, 0)->sha256, first);
    quant_report_free(rep);
    unlink(f.out);
    quant_pipeline_options_init(&o);
    o.cancel = &cancel_now;
    ck_assert_int_eq(run(&f, "[]", "Q4_K_M", &o, NULL, &err), QUANT_CK_ERR_CANCELLED);
    ck_assert_int_eq(ck_count_entries(f.dir), 1);
    fixture_free(&f);
}
END_TEST

/* ---- a Hugging Face Llama checkpoint as the input ------------------------------------------ */

#define HF_DIM   64 /* 4 heads of 16; k/v 2 heads */
#define HF_KV    32
#define HF_VOCAB 4

/* DIR/hf: config.json and model.safetensors of a 1-layer Llama (tied embeddings); DIR/vocab.gguf
 * with a 4-token tokenizer. `config` replaces the default config.json when not NULL. */
static void make_hf(const char *dir, const char *config, const char *extra_tensor)
{
    char *hf = kit_join(dir, "hf"), *cfg = kit_join(hf, "config.json");
    char *st = kit_join(hf, "model.safetensors"), *voc = kit_join(dir, "vocab.gguf");
    mkdir(hf, 0755);
    const char *dflt = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
                       "\"intermediate_size\": 128, \"num_hidden_layers\": 1, "
                       "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 4, "
                       "\"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 128}";
    ck_write_file(cfg, config ? config : dflt, strlen(config ? config : dflt));
    static float emb[HF_VOCAB * HF_DIM], q[HF_DIM * HF_DIM], k[HF_KV * HF_DIM], v[HF_KV * HF_DIM],
        o[HF_DIM * HF_DIM], g[128 * HF_DIM], u[128 * HF_DIM], d[HF_DIM * 128];
    static uint16_t norm_bf16[HF_DIM];
    for (int i = 0; i < HF_DIM * HF_DIM; i++) q[i] = (float)(i / HF_DIM); /* row r holds r */
    for (int i = 0; i < HF_KV * HF_DIM; i++) k[i] = (float)(i / HF_DIM);
    ck_fill(emb, sizeof emb / 4, 1, 1);
    ck_fill(v, sizeof v / 4, 2, 1);
    ck_fill(o, sizeof o / 4, 3, 1);
    ck_fill(g, sizeof g / 4, 4, 1);
    ck_fill(u, sizeof u / 4, 5, 1);
    ck_fill(d, sizeof d / 4, 6, 1);
    for (int i = 0; i < HF_DIM; i++) norm_bf16[i] = 0x3fc0; /* 1.5 */
    kit_st_tensor t[] = {
        {"model.embed_tokens.weight", "F32", 2, {HF_VOCAB, HF_DIM}, emb, sizeof emb},
        {"model.layers.0.input_layernorm.weight", "BF16", 1, {HF_DIM}, norm_bf16, sizeof norm_bf16},
        {"model.layers.0.self_attn.q_proj.weight", "F32", 2, {HF_DIM, HF_DIM}, q, sizeof q},
        {"model.layers.0.self_attn.k_proj.weight", "F32", 2, {HF_KV, HF_DIM}, k, sizeof k},
        {"model.layers.0.self_attn.v_proj.weight", "F32", 2, {HF_KV, HF_DIM}, v, sizeof v},
        {"model.layers.0.self_attn.o_proj.weight", "F32", 2, {HF_DIM, HF_DIM}, o, sizeof o},
        {"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", 1, {8}, q, 32},
        {"model.layers.0.post_attention_layernorm.weight",
         "BF16",
         1,
         {HF_DIM},
         norm_bf16,
         sizeof norm_bf16},
        {"model.layers.0.mlp.gate_proj.weight", "F32", 2, {128, HF_DIM}, g, sizeof g},
        {"model.layers.0.mlp.up_proj.weight", "F32", 2, {128, HF_DIM}, u, sizeof u},
        {"model.layers.0.mlp.down_proj.weight", "F32", 2, {HF_DIM, 128}, d, sizeof d},
        {"model.norm.weight", "BF16", 1, {HF_DIM}, norm_bf16, sizeof norm_bf16},
        {extra_tensor ? extra_tensor : "lm_head.weight",
         "F32",
         2,
         {HF_VOCAB, HF_DIM},
         emb,
         sizeof emb},
    };
    ck_gen_file(st, t, sizeof t / sizeof t[0], NULL);
    quant_gguf_writer *w;
    quant_ck_error err;
    ck_assert_int_eq(quant_gguf_writer_new(voc, &w, &err), QUANT_CK_OK);
    const char *tokens[] = {"<unk>", "<s>", "</s>", "a"};
    ck_assert_int_eq(quant_gguf_writer_set_string(w, "general.architecture", "llama", &err), 0);
    ck_assert_int_eq(quant_gguf_writer_set_string(w, "tokenizer.ggml.model", "llama", &err), 0);
    ck_assert_int_eq(quant_gguf_writer_set_strings(w, "tokenizer.ggml.tokens", tokens, 4, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_begin(w, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_writer_commit(w, &err), QUANT_CK_OK);
    quant_gguf_writer_free(w);
    free(hf);
    free(cfg);
    free(st);
    free(voc);
}

static quant_ck_status run_hf(const char *dir, const char *mix, bool vocab, const char *out,
                              quant_ck_error *err)
{
    char *hf = kit_join(dir, "hf"), *voc = kit_join(dir, "vocab.gguf");
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.layout = QUANT_LAYOUT_GGUF;
    o.gguf_mix = mix;
    o.gguf_vocab = vocab ? voc : NULL;
    quant_ck_status st = ck_quantize("[]", hf, out, &o, NULL, err);
    free(hf);
    free(voc);
    return st;
}

START_TEST(hugging_face_llama_directory)
{
    char *dir = ck_tmpdir(), *out = kit_join(dir, "out.gguf");
    make_hf(dir, NULL, NULL);
    quant_ck_error err;
    ck_assert_int_eq(run_hf(dir, "F32", true, out, &err), QUANT_CK_OK);
    quant_gguf_file *g;
    ck_assert_int_eq(quant_gguf_open(out, &g, &err), QUANT_CK_OK);
    /* names, shapes in ggml order, norms as F32, inv_freq dropped */
    ck_assert_uint_eq(g->n_tensors, 12);
    const quant_gguf_tensor *q = tensor(g, "blk.0.attn_q.weight");
    ck_assert(q->ne[0] == HF_DIM && q->ne[1] == HF_DIM && q->type == QUANT_GGML_F32);
    ck_assert_int_eq(tensor(g, "blk.0.attn_k.weight")->ne[1], HF_KV);
    ck_assert_int_eq(tensor(g, "blk.0.ffn_down.weight")->ne[0], 128);
    ck_assert_int_eq(tensor(g, "blk.0.attn_norm.weight")->type, QUANT_GGML_F32);
    ck_assert_ptr_nonnull(tensor(g, "output.weight"));
    ck_assert_ptr_nonnull(tensor(g, "token_embd.weight"));
    ck_assert_ptr_null(quant_gguf_find_tensor(g, "blk.0.rotary_emb.inv_freq"));
    /* q rows in llama.cpp's order: head h (16 rows), output row 2i + p is input row 8p + i */
    float row[HF_DIM];
    for (int r = 0; r < HF_DIM; r++) {
        ck_assert_int_eq(quant_gguf_read(g, q, (uint64_t)r * HF_DIM * 4, row, sizeof row, &err), 0);
        int h = r / 16, i = (r % 16) / 2, p = r % 2;
        ck_assert_msg(row[0] == (float)(h * 16 + p * 8 + i), "row %d holds %g", r, row[0]);
    }
    const quant_gguf_tensor *k = tensor(g, "blk.0.attn_k.weight"); /* 2 heads */
    ck_assert_int_eq(quant_gguf_read(g, k, 1 * HF_DIM * 4, row, sizeof row, &err), 0);
    ck_assert(row[0] == 8.0f);
    float norm[HF_DIM];
    ck_assert_int_eq(
        quant_gguf_read(g, tensor(g, "output_norm.weight"), 0, norm, sizeof norm, &err), 0);
    ck_assert(norm[0] == 1.5f);
    /* the pairs: the architecture's with llama.cpp's types, the tokenizer's copied */
    uint32_t u;
    float f;
    const char *s;
    ck_assert_int_eq(quant_gguf_get_string(g, "general.architecture", &s, &err), 0);
    ck_assert_str_eq(s, "llama");
    ck_assert_int_eq(quant_gguf_get_u32(g, "llama.attention.head_count_kv", &u, &err), 0);
    ck_assert_uint_eq(u, 2);
    ck_assert_int_eq(quant_gguf_get_u32(g, "llama.rope.dimension_count", &u, &err), 0);
    ck_assert_uint_eq(u, 16);
    ck_assert_int_eq(quant_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f, &err), 0);
    ck_assert(f == 1e-6f);
    ck_assert_int_eq(quant_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u, &err), 0);
    ck_assert_ptr_nonnull(quant_gguf_find_kv(g, "tokenizer.ggml.tokens"));
    quant_gguf_close(g);
    /* quantized: permuting before or after quantizing is the same rows */
    unlink(out);
    ck_assert_int_eq(run_hf(dir, "Q8_0", true, out, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_open(out, &g, &err), QUANT_CK_OK);
    ck_assert_int_eq(tensor(g, "blk.0.attn_q.weight")->type, QUANT_GGML_Q8_0);
    quant_gguf_close(g);
    kit_rmtree(dir);
    free(dir);
    free(out);
}
END_TEST

START_TEST(hugging_face_refusals)
{
    char *dir = ck_tmpdir(), *out = kit_join(dir, "out.gguf");
    quant_ck_error err;
    make_hf(dir, NULL, NULL);
    ck_assert_int_eq(run_hf(dir, "Q8_0", false, out, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "--vocab-from"));
    ck_assert_ptr_nonnull(strstr(err.message, "cannot run a model without"));
    make_hf(dir, "{\"architectures\": [\"GPT2LMHeadModel\"]}", NULL);
    ck_assert_int_eq(run_hf(dir, "Q8_0", true, out, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "GPT2LMHeadModel"));
    ck_assert_ptr_nonnull(strstr(err.message, "convert_hf_to_gguf.py"));
    make_hf(dir,
            "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
            "\"intermediate_size\": 128, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
            "\"vocab_size\": 8}",
            NULL);
    ck_assert_int_eq(run_hf(dir, "Q8_0", true, out, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "4 tokens"));
    ck_assert_ptr_nonnull(strstr(err.message, "vocab_size is 8"));
    make_hf(dir,
            "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
            "\"intermediate_size\": 128, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
            "\"vocab_size\": 4, \"rope_scaling\": {\"rope_type\": \"llama3\"}}",
            NULL);
    ck_assert_int_eq(run_hf(dir, "Q8_0", true, out, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "rope_scaling"));
    make_hf(dir, NULL, "model.layers.0.mlp.router.weight");
    ck_assert_int_eq(run_hf(dir, "Q8_0", true, out, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "mlp.router.weight"));
    ck_assert_int_eq(access(out, F_OK), -1);
    kit_rmtree(dir);
    free(dir);
    free(out);
}
END_TEST

/* The plan says what the run does: per tensor the type, what chose it, the bytes. */
START_TEST(plan_matches_the_run)
{
    fixture f;
    fixture_new(&f);
    quant_ruleset *rs = ck_rules("[{\"module_path\": \"blk\\\\.0\\\\.attn_k\", "
                                 "\"weight_qtype\": \"q5_k\"}]");
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.layout = QUANT_LAYOUT_GGUF;
    o.gguf_mix = "Q4_K_S";
    quant_plan *plan = NULL;
    quant_ck_error err;
    ck_assert_int_eq(quant_plan_path(rs, f.in, &o, &plan, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_check_path(rs, f.in, &o, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_quantize_path(rs, f.in, f.out, &o, NULL, &err), QUANT_CK_OK);
    quant_gguf_file *g;
    ck_assert_int_eq(quant_gguf_open(f.out, &g, &err), QUANT_CK_OK);
    uint64_t out_bytes = 0;
    for (size_t i = 0; i < quant_plan_count(plan); i++) {
        const quant_plan_entry *e = quant_plan_entry_at(plan, i);
        const quant_gguf_tensor *t = tensor(g, e->name);
        ck_assert_uint_eq(e->bytes_out, t->nbytes);
        out_bytes += t->nbytes;
        if (e->quantized)
            ck_assert_int_eq(quant_qtype_traits_get(e->qtype)->ggml_type, t->type);
        else
            ck_assert_int_eq(t->type, QUANT_GGML_F32);
        if (!strcmp(e->name, "blk.0.attn_k.weight")) {
            ck_assert_str_eq(e->chosen_by, "rule");
            ck_assert_int_eq(e->rule, 0);
        } else if (!strcmp(e->name, "blk.0.attn_v.weight")) {
            ck_assert_str_eq(e->chosen_by, "mix rule"); /* Q4_K_S: the first 4 attn_v q5_k */
        } else if (!strcmp(e->name, "blk.0.attn_q.weight")) {
            ck_assert_str_eq(e->chosen_by, "mix");
        }
    }
    ck_assert_uint_eq(quant_plan_bytes_out(plan), out_bytes);
    char *json = quant_plan_json(plan);
    ck_assert_ptr_nonnull(strstr(json, "\"layout\": \"gguf\""));
    ck_assert_ptr_nonnull(strstr(json, "\"chosen_by\": \"mix rule\""));
    free(json);
    quant_gguf_close(g);
    quant_plan_free(plan);
    quant_ruleset_free(rs);
    fixture_free(&f);
}
END_TEST

/* `quant quantize --layout gguf`: --mix alone is enough; usage errors exit 2 naming the flag. */
static int quant_cli(const char *dir, const char *const *args, char **err_text)
{
    const char *bin = getenv("QUANT_BIN");
    ck_assert_msg(bin && *bin, "QUANT_BIN is not set");
    char *errp = kit_join(dir, ".stderr");
    int rc = kit_run(bin, "quant", args, NULL, errp);
    size_t n = 0;
    *err_text = kit_read_file(errp, &n);
    ck_assert_ptr_nonnull(*err_text);
    free(errp);
    return rc;
}

START_TEST(cli_mix_and_usage_errors)
{
    fixture f;
    fixture_new(&f);
    char *err = NULL;
    const char *ok[] = {"quantize", "-q", "--layout", "gguf", "--mix", "q4_k_m", f.in, f.out, NULL};
    ck_assert_int_eq(quant_cli(f.dir, ok, &err), 0);
    free(err);
    quant_gguf_file *g;
    quant_ck_error ce;
    ck_assert_int_eq(quant_gguf_open(f.out, &g, &ce), QUANT_CK_OK);
    ck_assert_int_eq(tensor(g, "output.weight")->type, QUANT_GGML_Q6_K);
    quant_gguf_close(g);
    static const struct {
        const char *args[14], *want;
    } bad[] = {
        {{"quantize", "--mix", "Q4_K_M", "a", "b", NULL},
         "--mix, --imatrix and --vocab-from go with --layout gguf"},
        {{"quantize", "--layout", "gguf", "a", "b", NULL}, "--mix or --rules is required"},
        {{"quantize", "--layout", "gguf", "--mix", "Q9", "a", "b", NULL}, "unknown mix 'Q9'"},
        {{"quantize", "--layout", "gguf", "--mix", "Q8_0", "--imatrix", "i", "--stats", "s", "a",
          "b", NULL},
         "choose one"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(quant_cli(f.dir, bad[i].args, &err), 2);
        ck_assert_msg(strstr(err, bad[i].want), "case %zu: %s", i, err);
        free(err);
    }
    fixture_free(&f);
}
END_TEST

Suite *suite_gguf_run(void)
{
    Suite *s = suite_create("gguf_run");
    TCase *tc = tcase_create("run");
    tcase_add_test(tc, mix_q4_k_m_writes_llama_cpp_types);
    tcase_add_test(tc, rules_override_the_mix);
    tcase_add_test(tc, refusals_name_rule_tensor_and_nearest_type);
    tcase_add_test(tc, importance_from_statistics_lowers_weighted_error);
    tcase_add_test(tc, imatrix_files_gguf_and_dat);
    tcase_add_test(tc, deterministic_and_cancellable);
    tcase_add_test(tc, cli_mix_and_usage_errors);
    tcase_add_test(tc, plan_matches_the_run);
    tcase_add_test(tc, hugging_face_llama_directory);
    tcase_add_test(tc, hugging_face_refusals);
    suite_add_tcase(s, tc);
    return s;
}
