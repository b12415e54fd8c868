/* test_ct_read.c -- reading the compressed-tensors layout back (quant_ctensors.h, `quant
 * dequantize`): for every scheme the layout accepts, `quant dequantize` of the compressed-tensors
 * output equals `quant dequantize` of the native output of the same rules bit for bit (F32 and
 * BF16 outputs; BF16 and F16 weight_scale included), and the dequantized config.json has no
 * quantization_config; weights written by hand as llm-compressor would (an unpacked I8 zero
 * point of block and tensor strategies, no config.json: num_bits from the packed shape)
 * against (q - zp) * scale computed here; and the refusals, each naming the file, the tensor or
 * config group and what is unsupported, with nothing left at OUT: an unknown format (group and
 * top level), a quantization_status other than compressed, a missing scale or weight_shape, a
 * wrong packed shape (and compressed-tensors' older packing named), an ambiguous num_bits, a
 * format that does not hold the tensors, activation ordering, an E8M0 NaN scale.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckutil.h"
#include "quant_ctensors.h"

/* ---- running quant ------------------------------------------------------------------------- */

/* Runs `quant ARGS` with stdout into `outfile` and stderr into `errfile` (either NULL:
 * /dev/null); returns its exit status. */
static int run_quant_to(const char *const *args, const char *outfile, const char *errfile)
{
    const char *bin = getenv("QUANT_BIN");
    ck_assert_msg(bin && *bin && access(bin, X_OK) == 0, "QUANT_BIN must name the quant binary");
    return kit_run(bin, "quant", args, outfile, errfile);
}

static int run_quant(const char *const *args, const char *errfile)
{
    return run_quant_to(args, NULL, errfile);
}

static void dequantize_ok(const char *in, const char *out, const char *dtype)
{
    ck_assert_int_eq(
        run_quant((const char *const[]){"dequantize", "-q", "--dtype", dtype, in, out, NULL}, NULL),
        0);
}

/* ---- comparing two dequantized checkpoints ------------------------------------------------- */

static void *read_tensor(quant_st_file *f, const quant_st_tensor *t)
{
    size_t n = (size_t)quant_st_nbytes(t);
    void *buf = malloc(n + 1);
    ck_assert_ptr_nonnull(buf);
    quant_ck_error err;
    ck_assert_msg(quant_st_read(f, t, 0, buf, n, &err) == QUANT_CK_OK, "%s", err.message);
    return buf;
}

/* Every tensor of shard `name` of directory a is in b's, with the same dtype, shape and bytes. */
static void same_tensors(const char *a, const char *b, const char *name, const char *what)
{
    char *pa = kit_join(a, name), *pb = kit_join(b, name);
    quant_st_file *fa = NULL, *fb = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_open(pa, &fa, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_msg(quant_st_open(pb, &fb, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_int_eq(fa->n_tensors, fb->n_tensors);
    for (size_t i = 0; i < fa->n_tensors; i++) {
        const quant_st_tensor *ta = &fa->tensors[i], *tb = quant_st_find(fb, ta->name);
        ck_assert_msg(tb != NULL, "%s: %s has no %s", what, pb, ta->name);
        ck_assert_int_eq(ta->dtype, tb->dtype);
        ck_assert_int_eq(ta->rank, tb->rank);
        for (int k = 0; k < ta->rank; k++) ck_assert_int_eq(ta->shape[k], tb->shape[k]);
        void *da = read_tensor(fa, ta), *db = read_tensor(fb, tb);
        ck_assert_msg(memcmp(da, db, (size_t)quant_st_nbytes(ta)) == 0, "%s: %s differs", what,
                      ta->name);
        free(da);
        free(db);
    }
    quant_st_close(fa);
    quant_st_close(fb);
    free(pa);
    free(pb);
}

/* config.json of a dequantized compressed-tensors checkpoint: the model's keys, no
 * quantization_config. */
static void check_stripped_config(const char *dir)
{
    char *p = kit_join(dir, "config.json");
    json_t *cfg = json_load_file(p, 0, NULL);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_str_eq(json_string_value(json_object_get(cfg, "model_type")), "llama");
    ck_assert_ptr_null(json_object_get(cfg, "quantization_config"));
    json_decref(cfg);
    free(p);
}

static const char *ct_format(const char *dir)
{
    static char fmt[64];
    char *p = kit_join(dir, "config.json");
    json_t *cfg = json_load_file(p, 0, NULL);
    ck_assert_ptr_nonnull(cfg);
    json_t *g = json_object_get(
        json_object_get(json_object_get(cfg, "quantization_config"), "config_groups"), "group_0");
    snprintf(fmt, sizeof fmt, "%s", json_string_value(json_object_get(g, "format")));
    json_decref(cfg);
    free(p);
    return fmt;
}

/* ---- every scheme the layout accepts ---------------------------------------------------------
 */

typedef struct scheme {
    const char *rule; /* fields of the rule for module path layer.* */
    const char *format;
} scheme;

/* What the compressed-tensors layout accepts (test_ctensors.c's test_vllm_accepts and
 * test_microscaling.c's round trips, widened to every width, strategy and zero point). */
static const scheme schemes[] = {
    {"\"weight_qtype\": \"int2\"", "pack-quantized"},
    {"\"weight_qtype\": \"int3\", \"tile_size\": 16", "pack-quantized"},
    {"\"weight_qtype\": \"int4\", \"tile_size\": 32", "pack-quantized"},
    {"\"weight_qtype\": \"int5\", \"tile_size\": 16", "pack-quantized"},
    {"\"weight_qtype\": \"int6\"", "pack-quantized"},
    {"\"weight_qtype\": \"int7\", \"tile_size\": 32", "pack-quantized"},
    {"\"weight_qtype\": \"int8\"", "pack-quantized"},
    {"\"weight_qtype\": \"int4\", \"tile_size\": 16, \"weight_calibration_method\": \"minmax\"",
     "pack-quantized"},
    {"\"weight_qtype\": \"int4\", \"weight_calibration_method\": \"minmax\"", "pack-quantized"},
    {"\"weight_qtype\": \"int8\", \"tile_size\": 32, \"weight_calibration_method\": \"minmax\"",
     "pack-quantized"},
    {"\"weight_qtype\": \"int4\", \"tile_size\": 32, \"scale_dtype\": \"bfloat16\"",
     "pack-quantized"},
    {"\"weight_qtype\": \"int8\", \"act_qtype\": \"int8\"", "int-quantized"},
    {"\"weight_qtype\": \"int8\", \"act_qtype\": \"int8\", \"contraction_axes\": [0, 1]",
     "int-quantized"},
    {"\"weight_qtype\": \"int8\", \"act_qtype\": \"int8\", \"scale_dtype\": \"float16\"",
     "int-quantized"},
    {"\"weight_qtype\": \"int4\", \"act_qtype\": \"int8\", \"tile_size\": 16", "int-quantized"},
    {"\"weight_qtype\": \"float8_e4m3fn\"", "float-quantized"},
    {"\"weight_qtype\": \"float8_e4m3fn\", \"contraction_axes\": [0, 1]", "float-quantized"},
    {"\"weight_qtype\": \"float8_e4m3fn\", \"act_qtype\": \"float8_e4m3fn\", \"tile_size\": "
     "{\"0\": 8, \"1\": 16}",
     "float-quantized"},
    {"\"weight_qtype\": \"mxfp4\"", "mxfp4-pack-quantized"},
    {"\"weight_qtype\": \"mxfp8\", \"weight_calibration_method\": \"rms,3\"", "mxfp8-quantized"},
    {"\"weight_qtype\": \"nvfp4\"", "nvfp4-pack-quantized"},
};

/* A directory `in` with config.json and model.safetensors: layer.proj.weight [24, 96] (rows of
 * different magnitudes) and lm_head.weight [4, 8], F32. */
static void make_input(const char *in)
{
    enum { R = 24, C = 96 };
    ck_assert_int_eq(mkdir(in, 0755), 0);
    static float w[R * C], head[32];
    ck_fill(w, R * C, 77, 1.0f);
    for (int j = 0; j < C; j++) w[3 * C + j] *= 1e-3f, w[5 * C + j] *= 40.0f;
    w[7 * C + 2] = -0.0f;
    ck_fill(head, 32, 78, 1.0f);
    kit_st_tensor t[] = {{"layer.proj.weight", "F32", 2, {R, C}, w, sizeof w},
                         {"lm_head.weight", "F32", 2, {4, 8}, head, sizeof head}};
    char *shard = kit_join(in, "model.safetensors"), *cfg = kit_join(in, "config.json");
    ck_gen_file(shard, t, 2, NULL);
    ck_write_file(cfg, "{\"model_type\":\"llama\"}", 22);
    free(shard);
    free(cfg);
}

START_TEST(ct_equals_native_every_scheme)
{
    char *tmp = ck_tmpdir(), *in = kit_join(tmp, "in"), *nat = kit_join(tmp, "n"),
         *ctd = kit_join(tmp, "c"), *dn = kit_join(tmp, "dn"), *dc = kit_join(tmp, "dc");
    make_input(in);
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        char rules[512];
        snprintf(rules, sizeof rules, "[{\"module_path\": \"layer.*\", %s}]", schemes[i].rule);
        quant_pipeline_options o;
        quant_pipeline_options_init(&o);
        quant_ck_error err;
        ck_assert_msg(ck_quantize(rules, in, nat, &o, NULL, &err) == QUANT_CK_OK, "%s: %s", rules,
                      err.message);
        o.layout = QUANT_LAYOUT_CTENSORS;
        ck_assert_msg(ck_quantize(rules, in, ctd, &o, NULL, &err) == QUANT_CK_OK, "%s: %s", rules,
                      err.message);
        ck_assert_str_eq(ct_format(ctd), schemes[i].format);
        static const char *const dtypes[2] = {"f32", "bf16"};
        for (int d = 0; d < 2; d++) {
            dequantize_ok(nat, dn, dtypes[d]);
            dequantize_ok(ctd, dc, dtypes[d]);
            same_tensors(dn, dc, "model.safetensors", rules);
            check_stripped_config(dc);
            kit_rmtree(dn);
            kit_rmtree(dc);
        }
        kit_rmtree(nat);
        kit_rmtree(ctd);
    }
    kit_rmtree(tmp);
    free(tmp);
    free(in);
    free(nat);
    free(ctd);
    free(dn);
    free(dc);
}
END_TEST

/* The stories260K fixture, two shards and an index: int4 tiles of 32, down_proj int8, and nvfp4
 * on the attention (fused q/k/v sharing one global scale): the compressed-tensors checkpoint
 * dequantizes to the native one's, shard by shard, and the index names the float tensors. The
 * nvfp4 members whose own max |x| is not their group's have other codes than the native layout's
 * (their g is the group's), so nvfp4 is checked on o_proj only, which is fused with nothing. */
START_TEST(ct_equals_native_fixture)
{
    char *tmp = ck_tmpdir(), *nat = kit_join(tmp, "n"), *ctd = kit_join(tmp, "c"),
         *dn = kit_join(tmp, "dn"), *dc = kit_join(tmp, "dc"),
         *in = kit_join(ck_data_dir(), "stories260K-bf16-sharded");
    static const char rules[] =
        "[{\"module_path\": \"model\\\\.embed_tokens|lm_head\", \"weight_qtype\": null},"
        " {\"module_path\": \".*o_proj\", \"weight_qtype\": \"nvfp4\"},"
        " {\"module_path\": \".*down_proj\", \"weight_qtype\": \"int8\"},"
        " {\"module_path\": \".*_proj\", \"weight_qtype\": \"int4\", \"tile_size\": 32}]";
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    quant_ck_error err;
    ck_assert_msg(ck_quantize(rules, in, nat, &o, NULL, &err) == QUANT_CK_OK, "%s", err.message);
    o.layout = QUANT_LAYOUT_CTENSORS;
    ck_assert_msg(ck_quantize(rules, in, ctd, &o, NULL, &err) == QUANT_CK_OK, "%s", err.message);
    dequantize_ok(nat, dn, "f32");
    dequantize_ok(ctd, dc, "f32");
    same_tensors(dn, dc, "model-00001-of-00002.safetensors", "fixture");
    same_tensors(dn, dc, "model-00002-of-00002.safetensors", "fixture");
    check_stripped_config(dc);
    char *idx = kit_join(dc, "model.safetensors.index.json");
    json_t *j = json_load_file(idx, 0, NULL);
    json_t *wm = json_object_get(j, "weight_map");
    ck_assert_ptr_nonnull(json_object_get(wm, "model.layers.0.self_attn.o_proj.weight"));
    ck_assert_ptr_null(json_object_get(wm, "model.layers.0.self_attn.o_proj.weight_packed"));
    ck_assert_ptr_null(json_object_get(wm, "model.layers.0.mlp.up_proj.weight_scale"));
    json_decref(j);
    free(idx);
    kit_rmtree(tmp);
    free(tmp);
    free(nat);
    free(ctd);
    free(dn);
    free(dc);
    free(in);
}
END_TEST

/* ---- written by hand, as llm-compressor would ------------------------------------------------
 */

/* Packs `n` codes of `bits` (values -2^(b-1)..) densely into words, LSB first (written out again
 * here from compressed-tensors' pack_to_int32). */
static void pack_dense(const int8_t *codes, int64_t n, int bits, uint32_t *w, int64_t words)
{
    memset(w, 0, (size_t)words * 4);
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)(codes[i] + (1 << (bits - 1))) & ((1u << bits) - 1u);
        int64_t bit = i * bits;
        w[bit / 32] |= v << (bit % 32);
        if (bit % 32 + bits > 32) w[bit / 32 + 1] |= v >> (32 - bit % 32);
    }
}

static float *read_f32(const char *path, const char *name, int64_t n)
{
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_open(path, &f, &err) == QUANT_CK_OK, "%s", err.message);
    const quant_st_tensor *t = quant_st_find(f, name);
    ck_assert_msg(t != NULL, "%s: no %s", path, name);
    ck_assert_int_eq(t->dtype, QUANT_ST_F32);
    ck_assert_int_eq(quant_numel(t->rank, t->shape), n);
    float *v = read_tensor(f, t);
    quant_st_close(f);
    return v;
}

/* A weight "m.b" of 8 x 32 int4 codes (hand-made), pack-quantized in blocks [4, 16], asymmetric:
 * its four parts, with the zero point I8 shaped like the scale, in t[0..4). */
enum { HB_R = 8, HB_C = 32, HB_BH = 4, HB_BW = 16, HB_S0 = 2, HB_S1 = 2, HB_W = HB_C * 4 / 32 };
typedef struct hand_block {
    int8_t q[HB_R * HB_C];
    uint32_t packed[HB_R * HB_W];
    float scale[HB_S0 * HB_S1];
    int8_t zp[HB_S0 * HB_S1];
    int64_t shape[2];
} hand_block;

static void hand_block_parts(hand_block *b, const int8_t zp[HB_S0 * HB_S1], kit_st_tensor *t)
{
    for (int i = 0; i < HB_R * HB_C; i++) b->q[i] = (int8_t)((i * 7 + 3) % 16 - 8);
    for (int r = 0; r < HB_R; r++) pack_dense(b->q + r * HB_C, HB_C, 4, b->packed + r * HB_W, HB_W);
    const float scale[HB_S0 * HB_S1] = {0.5f, 0.25f, 1.5f, 0.125f};
    memcpy(b->scale, scale, sizeof scale);
    memcpy(b->zp, zp, sizeof b->zp);
    b->shape[0] = HB_R;
    b->shape[1] = HB_C;
    t[0] =
        (kit_st_tensor){"m.b.weight_packed", "I32", 2, {HB_R, HB_W}, b->packed, sizeof b->packed};
    t[1] = (kit_st_tensor){"m.b.weight_scale", "F32", 2, {HB_S0, HB_S1}, b->scale, sizeof b->scale};
    t[2] = (kit_st_tensor){"m.b.weight_zero_point", "I8", 2, {HB_S0, HB_S1}, b->zp, sizeof b->zp};
    t[3] = (kit_st_tensor){"m.b.weight_shape", "I64", 1, {2}, b->shape, sizeof b->shape};
}

/* Block [4, 16] asymmetric int4, pack-quantized, with the zero point I8 shaped like the scale
 * (compressed-tensors packs it only for channel and group), and a tensor-strategy one with scale
 * and zero point [1]; one file, no config.json: num_bits from the packed shape (32 inputs: 4
 * words fit int4 alone). Decoded (q - zp) * scale is computed here. */
START_TEST(ct_hand_made_block_and_tensor_zero_points)
{
    enum { R = HB_R, C = HB_C, BH = HB_BH, BW = HB_BW, S1 = HB_S1, W = HB_W };
    hand_block hb;
    static const int8_t zp[HB_S0 * HB_S1] = {-3, 0, 5, -8};
    const int8_t *q = hb.q, tzp = 2;
    const float *scale = hb.scale, tscale = 0.75f;
    const uint32_t *packed = hb.packed;
    int64_t shape[2] = {R, C};
    kit_st_tensor t[] = {
        {0},
        {0},
        {0},
        {0},
        {"m.t.weight_packed", "I32", 2, {R, W}, packed, sizeof hb.packed},
        {"m.t.weight_scale", "F32", 1, {1}, &tscale, sizeof tscale},
        {"m.t.weight_zero_point", "I8", 1, {1}, &tzp, sizeof tzp},
        {"m.t.weight_shape", "I64", 1, {2}, shape, sizeof shape},
        {"m.t.input_scale", "F32", 1, {1}, &tscale, sizeof tscale},
    };
    hand_block_parts(&hb, zp, t);
    char *tmp = ck_tmpdir(), *in = kit_join(tmp, "in.safetensors"),
         *out = kit_join(tmp, "out.safetensors");
    ck_gen_file(in, t, sizeof t / sizeof t[0], "{\"format\": \"pt\"}");
    dequantize_ok(in, out, "f32");
    float *b = read_f32(out, "m.b.weight", R * C), *tt = read_f32(out, "m.t.weight", R * C);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            int k = (r / BH) * S1 + c / BW;
            ck_assert_float_eq(b[r * C + c], (float)(q[r * C + c] - zp[k]) * scale[k]);
            ck_assert_float_eq(tt[r * C + c], (float)(q[r * C + c] - tzp) * tscale);
        }
    /* the activation's scale is a plain tensor: copied */
    float *is = read_f32(out, "m.t.input_scale", 1);
    ck_assert_float_eq(is[0], tscale);
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert(quant_st_open(out, &f, &err) == QUANT_CK_OK);
    ck_assert_int_eq(f->n_tensors, 3);
    ck_assert_str_eq(quant_st_meta(f, "format"), "pt");
    quant_st_close(f);
    free(b);
    free(tt);
    free(is);
    kit_rmtree(tmp);
    free(tmp);
    free(in);
    free(out);
}
END_TEST

/* A zero point outside the qtype's range (50 for int4's -8..7) is refused, naming the file, the
 * tensor, the value and the range: the writer never makes one, and (q - zp) * scale would give
 * values no scheme of compressed-tensors means. */
START_TEST(ct_zero_point_out_of_range)
{
    hand_block hb;
    static const int8_t zp[HB_S0 * HB_S1] = {-3, 0, 50, -8};
    kit_st_tensor t[4];
    hand_block_parts(&hb, zp, t);
    char *tmp = ck_tmpdir(), *in = kit_join(tmp, "in.safetensors"),
         *out = kit_join(tmp, "out.safetensors"), *errf = kit_join(tmp, "err.txt");
    ck_gen_file(in, t, sizeof t / sizeof t[0], NULL);
    ck_assert_int_ne(
        run_quant((const char *const[]){"dequantize", "-q", "--dtype", "f32", in, out, NULL}, errf),
        0);
    char *msg = kit_read_file(errf, NULL);
    ck_assert_ptr_nonnull(msg);
    ck_assert_msg(strstr(msg, "in.safetensors: tensor 'm.b.weight': zero point 50 (scale 2) is "
                              "outside int4's range -8..7"),
                  "%s", msg);
    ck_assert_int_ne(access(out, F_OK), 0); /* nothing published */
    free(msg);
    kit_rmtree(tmp);
    free(tmp);
    free(in);
    free(out);
    free(errf);
}
END_TEST

/* A weight of one row, per tensor, asymmetric: its zero point is I8 [1] like its scale [1] (the
 * reader took a scale whose first dim equals the rows for channel or group, whose zero point is
 * packed, and refused it); per channel, as the writer stores it (scale [1], zero point packed
 * I32 [1, 1]), it stays packed. */
START_TEST(ct_one_row_tensor_zero_point)
{
    enum { C = 64, W = C * 4 / 32 };
    int8_t q[C];
    for (int i = 0; i < C; i++) q[i] = (int8_t)(i % 16 - 8);
    uint32_t packed[W];
    pack_dense(q, C, 4, packed, W);
    float tscale = 0.25f;
    int8_t tzp = -3;
    uint32_t czp = (uint32_t)(tzp + 8); /* packed: the int4 code of -3 */
    int64_t shape[2] = {1, C};
    kit_st_tensor t[] = {
        {"m.t.weight_packed", "I32", 2, {1, W}, packed, sizeof packed},
        {"m.t.weight_scale", "F32", 1, {1}, &tscale, sizeof tscale},
        {"m.t.weight_zero_point", "I8", 1, {1}, &tzp, sizeof tzp},
        {"m.t.weight_shape", "I64", 1, {2}, shape, sizeof shape},
        {"m.c.weight_packed", "I32", 2, {1, W}, packed, sizeof packed},
        {"m.c.weight_scale", "F32", 1, {1}, &tscale, sizeof tscale},
        {"m.c.weight_zero_point", "I32", 2, {1, 1}, &czp, sizeof czp},
        {"m.c.weight_shape", "I64", 1, {2}, shape, sizeof shape},
    };
    char *tmp = ck_tmpdir(), *in = kit_join(tmp, "in.safetensors"),
         *out = kit_join(tmp, "out.safetensors");
    ck_gen_file(in, t, sizeof t / sizeof t[0], "{\"format\": \"pt\"}");
    dequantize_ok(in, out, "f32");
    float *v = read_f32(out, "m.t.weight", C), *vc = read_f32(out, "m.c.weight", C);
    for (int c = 0; c < C; c++) {
        ck_assert_float_eq(v[c], (float)(q[c] - tzp) * tscale);
        ck_assert_float_eq(vc[c], (float)(q[c] - tzp) * tscale);
    }
    free(v);
    free(vc);
    kit_rmtree(tmp);
    free(tmp);
    free(in);
    free(out);
}
END_TEST

/* ---- refusals -------------------------------------------------------------------------------- */

/* A compressed-tensors directory `dir` (config.json `cfg`, one shard of `t`). */
static void make_ct_dir(const char *dir, const char *cfg, const kit_st_tensor *t, size_t n)
{
    kit_rmtree(dir);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    char *shard = kit_join(dir, "model.safetensors"), *c = kit_join(dir, "config.json");
    ck_gen_file(shard, t, n, "{\"format\": \"pt\"}");
    if (cfg) ck_write_file(c, cfg, strlen(cfg));
    free(shard);
    free(c);
}

/* quant_dequantize_path(in) fails with `status` and a message holding want1 and want2; nothing
 * at OUT. */
static void refused(const char *in, const char *out, quant_ck_status status, const char *want1,
                    const char *want2)
{
    quant_ck_error err;
    ck_assert_int_eq(quant_dequantize_path(in, out, QUANT_ST_F32, 1, &err), status);
    ck_assert_msg(strstr(err.message, want1) && strstr(err.message, want2),
                  "want '%s' and '%s': %s", want1, want2, err.message);
    ck_assert_int_lt(access(out, F_OK), 0);
}

#define QC(groups, top, status)                                                                    \
    "{\"model_type\": \"llama\", \"quantization_config\": {\"quant_method\": "                     \
    "\"compressed-tensors\", \"format\": \"" top "\", \"quantization_status\": \"" status          \
    "\", \"config_groups\": {" groups "}}}"
#define GROUP(fmt, bits)                                                                           \
    "\"group_0\": {\"targets\": [\"m.p\"], \"format\": \"" fmt                                     \
    "\", \"weights\": {\"num_bits\": " #bits ", \"type\": \"int\"}}"

START_TEST(ct_refusals)
{
    enum { R = 4, C = 64 };
    static uint32_t packed[R * 24];
    static float scale[R * 4];
    static uint8_t e8[R * 2];
    for (int i = 0; i < R * 4; i++) scale[i] = 0.5f;
    int64_t shape[2] = {R, C};
    int32_t gidx[C] = {0};
    char *tmp = ck_tmpdir(), *in = kit_join(tmp, "in"), *out = kit_join(tmp, "out");
    /* a good int4 group-16 weight: P.weight_packed [4, 8], P.weight_scale [4, 4] */
    kit_st_tensor good[] = {
        {"m.p.weight_packed", "I32", 2, {R, 8}, packed, R * 8 * 4},
        {"m.p.weight_scale", "F32", 2, {R, 4}, scale, sizeof scale},
        {"m.p.weight_shape", "I64", 1, {2}, shape, sizeof shape},
        {"m.p.weight_g_idx", "I32", 1, {C}, gidx, sizeof gidx},
    };
    make_ct_dir(in, QC(GROUP("pack-quantized", 4), "pack-quantized", "compressed"), good, 3);
    quant_ck_error err;
    ck_assert_msg(quant_dequantize_path(in, out, QUANT_ST_F32, 1, &err) == QUANT_CK_OK, "%s",
                  err.message);
    kit_rmtree(out);
    /* unknown formats: the group's, the top level's */
    make_ct_dir(in, QC(GROUP("marlin-24", 4), "mixed-precision", "compressed"), good, 3);
    refused(in, out, QUANT_CK_ERR_UNSUPPORTED,
            "in/config.json: quantization_config group 'group_0' (targets 'm.p'): format "
            "'marlin-24'",
            "is not one quant dequantize reads");
    make_ct_dir(in,
                "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": "
                "\"sparse-bitmask\", \"config_groups\": {}}}",
                good, 3);
    refused(in, out, QUANT_CK_ERR_UNSUPPORTED, "(top level)", "'sparse-bitmask'");
    make_ct_dir(in, QC(GROUP("pack-quantized", 4), "pack-quantized", "frozen"), good, 3);
    refused(in, out, QUANT_CK_ERR_UNSUPPORTED, "quantization_status 'frozen'", "config.json");
    /* a format that does not store the weight this way */
    make_ct_dir(in, QC(GROUP("float-quantized", 8), "float-quantized", "compressed"), good, 3);
    refused(in, out, QUANT_CK_ERR_UNSUPPORTED,
            "tensor 'm.p.weight_packed' (I32): its config group 'group_0' says format "
            "'float-quantized'",
            "model.safetensors");
    /* missing parts: the scale, weight_shape */
    static const char *const cfg4 = QC(GROUP("pack-quantized", 4), "pack-quantized", "compressed");
    kit_st_tensor no_scale[] = {good[0], good[2]};
    make_ct_dir(in, cfg4, no_scale, 2);
    refused(in, out, QUANT_CK_ERR_FORMAT, "in/model.safetensors: tensor 'm.p.weight_packed'",
            "has no weight_scale");
    make_ct_dir(in, cfg4, good, 2);
    refused(in, out, QUANT_CK_ERR_FORMAT, "tensor 'm.p.weight_packed'", "needs m.p.weight_shape");
    /* activation ordering */
    make_ct_dir(in, cfg4, good, 4);
    refused(in, out, QUANT_CK_ERR_UNSUPPORTED, "tensor 'm.p.weight_g_idx'", "actorder");
    /* a wrong packed shape: 9 words a row for 64 int4 codes (8) */
    kit_st_tensor wide[] = {
        {"m.p.weight_packed", "I32", 2, {R, 9}, packed, R * 9 * 4}, good[1], good[2]};
    make_ct_dir(in, cfg4, wide, 3);
    refused(in, out, QUANT_CK_ERR_FORMAT, "tensor 'm.p.weight_packed': wrong packed shape [4, 9]",
            "take 8 int32 words");
    /* int3 in compressed-tensors' older layout: ceil(64 / 10) = 7 words, not ceil(192 / 32) = 6 */
    kit_st_tensor old[] = {
        {"m.p.weight_packed", "I32", 2, {R, 7}, packed, R * 7 * 4}, good[1], good[2]};
    make_ct_dir(in, QC(GROUP("pack-quantized", 3), "pack-quantized", "compressed"), old, 3);
    refused(in, out, QUANT_CK_ERR_FORMAT, "wrong packed shape", "whole codes a word up to 0.17.1");
    /* the same width written by a release that packs whole codes, with the dense word count:
     * refused by the config's version (int4 from it is read: both packings agree) */
    kit_st_tensor dense3[] = {
        {"m.p.weight_packed", "I32", 2, {R, 6}, packed, R * 6 * 4}, good[1], good[2]};
    make_ct_dir(in,
                "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", "
                "\"version\": \"0.12.2\", \"format\": \"pack-quantized\", \"config_groups\": "
                "{" GROUP("pack-quantized", 3) "}}}",
                dense3, 3);
    refused(in, out, QUANT_CK_ERR_UNSUPPORTED, "says compressed-tensors 0.12.2 wrote it",
            "packs int3 codes whole");
    make_ct_dir(in,
                "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", "
                "\"version\": \"0.12.2\", \"format\": \"pack-quantized\", \"config_groups\": "
                "{" GROUP("pack-quantized", 4) "}}}",
                good, 3);
    ck_assert_msg(quant_dequantize_path(in, out, QUANT_ST_F32, 1, &err) == QUANT_CK_OK, "%s",
                  err.message);
    kit_rmtree(out);
    /* no config.json: 1 word a row for 8 inputs fits int2, int3 and int4 */
    int64_t shape8[2] = {R, 8};
    kit_st_tensor narrow[] = {{"m.p.weight_packed", "I32", 2, {R, 1}, packed, R * 4},
                              {"m.p.weight_scale", "F32", 2, {R, 1}, scale, R * 4},
                              {"m.p.weight_shape", "I64", 1, {2}, shape8, sizeof shape8}};
    make_ct_dir(in, NULL, narrow, 3);
    refused(in, out, QUANT_CK_ERR_FORMAT, "num_bits is not known", "more than one width");
    /* a file of a checkpoint directory: the config.json beside it gives num_bits (8 int4 codes,
     * decoded: the packed words are zeros, so every value is (0 - 8) * 0.5) */
    make_ct_dir(in, cfg4, narrow, 3);
    char *file = kit_join(in, "model.safetensors"), *outf = kit_join(tmp, "out.safetensors");
    ck_assert_msg(quant_dequantize_path(file, outf, QUANT_ST_F32, 1, &err) == QUANT_CK_OK, "%s",
                  err.message);
    float *v = read_f32(outf, "m.p.weight", R * 8);
    for (int i = 0; i < R * 8; i++) ck_assert_float_eq(v[i], -4.0f);
    free(v);
    unlink(outf);
    free(file);
    free(outf);
    /* mxfp4 with an E8M0 scale of 255 (NaN) */
    e8[3] = 255;
    kit_st_tensor mx[] = {{"m.p.weight_packed", "U8", 2, {R, C / 2}, packed, R * C / 2},
                          {"m.p.weight_scale", "U8", 2, {R, 2}, e8, sizeof e8}};
    make_ct_dir(in, NULL, mx, 2);
    refused(in, out, QUANT_CK_ERR_FORMAT, "tensor 'm.p.weight_scale': E8M0 scale 3 is 255", "NaN");
    /* nvfp4 without its global scale */
    kit_st_tensor nv[] = {{"m.p.weight_packed", "U8", 2, {R, C / 2}, packed, R * C / 2},
                          {"m.p.weight_scale", "F8_E4M3", 2, {R, 4}, packed, R * 4}};
    make_ct_dir(in, NULL, nv, 2);
    refused(in, out, QUANT_CK_ERR_FORMAT, "tensor 'm.p.weight_packed': nvfp4",
            "needs m.p.weight_global_scale, and there is none");
    /* a config.json that is not JSON describes nothing: the tensors decide (here: none quantized,
     * copied; the config copied as it is) */
    kit_st_tensor plain[] = {{"m.p.weight", "F32", 2, {R, 4}, scale, sizeof scale}};
    make_ct_dir(in, "not json", plain, 1);
    ck_assert_msg(quant_dequantize_path(in, out, QUANT_ST_F32, 1, &err) == QUANT_CK_OK, "%s",
                  err.message);
    char *ocfg = kit_join(out, "config.json");
    size_t cl = 0;
    char *ctext = kit_read_file(ocfg, &cl);
    ck_assert(ctext && cl == 8 && memcmp(ctext, "not json", 8) == 0);
    free(ctext);
    free(ocfg);
    kit_rmtree(out);
    /* through the command: exit 1, the same message */
    make_ct_dir(in, NULL, mx, 2);
    char *errf = kit_join(tmp, "stderr");
    ck_assert_int_eq(run_quant((const char *const[]){"dequantize", in, out, NULL}, errf), 1);
    size_t n = 0;
    char *text = kit_read_file(errf, &n);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(strstr(text, "quant: ") && strstr(text, "E8M0 scale 3 is 255"), "%s", text);
    ck_assert_int_lt(access(out, F_OK), 0);
    free(text);
    free(errf);
    kit_rmtree(tmp);
    free(tmp);
    free(in);
    free(out);
}
END_TEST

/* Hostile files: a weights.num_bits that is no integer of 1..64 (a huge one used to wrap to a
 * width the reader decodes: 2^32 + 4 was read as int4), and weights that hold no elements. */
START_TEST(ct_hostile_bits_and_empty_weights)
{
    enum { R = 4, C = 64 };
    static uint32_t packed[R * 8];
    static float scale[R * 4];
    for (int i = 0; i < R * 4; i++) scale[i] = 0.5f;
    int64_t shape[2] = {R, C};
    char *tmp = ck_tmpdir(), *in = kit_join(tmp, "in"), *out = kit_join(tmp, "out");
    kit_st_tensor good[] = {
        {"m.p.weight_packed", "I32", 2, {R, 8}, packed, R * 8 * 4},
        {"m.p.weight_scale", "F32", 2, {R, 4}, scale, sizeof scale},
        {"m.p.weight_shape", "I64", 1, {2}, shape, sizeof shape},
    };
    static const char *const bad_bits[] = {"4294967300", "-4", "0", "65", "4.5", "\"4\"", "true"};
    for (size_t i = 0; i < sizeof bad_bits / sizeof bad_bits[0]; i++) {
        char cfg[512];
        snprintf(cfg, sizeof cfg,
                 "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", "
                 "\"format\": \"pack-quantized\", \"config_groups\": {\"group_0\": "
                 "{\"targets\": [\"m.p\"], \"weights\": {\"num_bits\": %s}}}}}",
                 bad_bits[i]);
        make_ct_dir(in, cfg, good, 3);
        refused(in, out, QUANT_CK_ERR_FORMAT,
                "in/config.json: quantization_config group 'group_0': weights.num_bits",
                "not an integer from 1 to 64");
    }
    /* num_bits null is no num_bits: the packed shape decides (8 words a row: int4 only) */
    make_ct_dir(in,
                "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", "
                "\"format\": \"pack-quantized\", \"config_groups\": {\"group_0\": "
                "{\"targets\": [\"m.p\"], \"weights\": {\"num_bits\": null}}}}}",
                good, 3);
    quant_ck_error err;
    ck_assert_msg(quant_dequantize_path(in, out, QUANT_ST_F32, 1, &err) == QUANT_CK_OK, "%s",
                  err.message);
    kit_rmtree(out);
    /* int8 and mxfp4 weights of no rows or no columns */
    kit_st_tensor rows0[] = {{"m.p.weight", "I8", 2, {0, 16}, packed, 0},
                             {"m.p.weight_scale", "F32", 1, {1}, scale, 4}};
    make_ct_dir(in, NULL, rows0, 2);
    refused(in, out, QUANT_CK_ERR_FORMAT, "tensor 'm.p.weight': shape [0, 16]", "holds no weights");
    kit_st_tensor cols0[] = {{"m.p.weight", "I8", 2, {4, 0}, packed, 0},
                             {"m.p.weight_scale", "F32", 1, {1}, scale, 4}};
    make_ct_dir(in, NULL, cols0, 2);
    refused(in, out, QUANT_CK_ERR_FORMAT, "tensor 'm.p.weight': shape [4, 0]", "holds no weights");
    kit_st_tensor mx0[] = {{"m.p.weight_packed", "U8", 2, {0, 16}, packed, 0},
                           {"m.p.weight_scale", "U8", 2, {0, 1}, packed, 0}};
    make_ct_dir(in, NULL, mx0, 2);
    refused(in, out, QUANT_CK_ERR_FORMAT, "tensor 'm.p.weight_packed': shape [0, 16]",
            "holds no weights");
    /* a P.weight beside P.weight_packed: refused reading the input (it named only the output's
     * duplicate name, and quant inspect listed two rows P.weight) */
    static float plain[R * C];
    kit_st_tensor both[] = {
        good[0], good[1], good[2], {"m.p.weight", "F32", 2, {R, C}, plain, sizeof plain}};
    make_ct_dir(in, NULL, both, 4);
    refused(in, out, QUANT_CK_ERR_FORMAT,
            "in/model.safetensors: tensor 'm.p.weight' beside m.p.weight_packed", "hold it twice");
    /* a scale with no value (E8M0 255) is refused naming the file, the tensor and the scale */
    static uint8_t e8[R * 2] = {127, 127, 127, 255};
    kit_st_tensor mx[] = {{"m.p.weight_packed", "U8", 2, {R, C / 2}, packed, R * C / 2},
                          {"m.p.weight_scale", "U8", 2, {R, 2}, e8, sizeof e8}};
    make_ct_dir(in, NULL, mx, 2);
    refused(in, out, QUANT_CK_ERR_FORMAT,
            "in/model.safetensors: tensor 'm.p.weight_scale': E8M0 scale 3 is 255", "NaN");
    /* a FIFO named config.json beside a file is refused (it used to block in open for ever) */
    make_ct_dir(in, NULL, good, 3);
    char *fifo = kit_join(in, "config.json"), *file = kit_join(in, "model.safetensors");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    quant_ct_config *cfg = (quant_ct_config *)1;
    ck_assert_int_eq(quant_ct_config_beside(file, &cfg, &err), QUANT_CK_ERR_IO);
    ck_assert_ptr_null(cfg);
    ck_assert_msg(strstr(err.message, "in/config.json: not a regular file"), "%s", err.message);
    refused(file, out, QUANT_CK_ERR_IO, "in/config.json", "not a regular file");
    free(fifo);
    free(file);
    kit_rmtree(tmp);
    free(tmp);
    free(in);
    free(out);
}
END_TEST

/* ---- quant inspect --------------------------------------------------------------------------- */

/* `quant inspect --json` of dir/model.safetensors: its row named `name` (a new reference) and
 * the document's "quantization" (its format in `qformat`). */
static json_t *inspect_row(const char *tmp, const char *dir, const char *name, char *qformat)
{
    char *shard = kit_join(dir, "model.safetensors"), *js = kit_join(tmp, "inspect.json");
    ck_assert_int_eq(
        run_quant_to((const char *const[]){"inspect", "--json", shard, NULL}, js, NULL), 0);
    json_error_t je;
    json_t *doc = json_load_file(js, 0, &je), *found = NULL;
    ck_assert_msg(doc != NULL, "%s", je.text);
    snprintf(qformat, 64, "%s",
             json_string_value(json_object_get(json_object_get(doc, "quantization"), "format")));
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(doc, "tensors"), i, row)
    {
        if (strcmp(json_string_value(json_object_get(row, "name")), name) == 0)
            found = json_incref(row);
        ck_assert_msg(!strstr(json_string_value(json_object_get(row, "name")), "weight_scale"),
                      "a part listed as a row");
    }
    ck_assert_msg(found != NULL, "no row %s", name);
    json_decref(doc);
    free(shard);
    free(js);
    return found;
}

/* A compressed-tensors weight is one row P.weight like the native layout's NAME: the same shape,
 * qtype and scale range (the effective scale: E8M0 and nvfp4's s_b / g decoded), nvfp4's global
 * scale, plus its format; no original dtype (compressed-tensors does not record it). */
START_TEST(ct_inspect_rows)
{
    static const struct {
        const char *rule, *qtype, *format;
    } cases[] = {
        {"\"weight_qtype\": \"int4\", \"tile_size\": 32", "int4", "pack-quantized"},
        {"\"weight_qtype\": \"mxfp4\"", "mxfp4", "mxfp4-pack-quantized"},
        {"\"weight_qtype\": \"nvfp4\"", "nvfp4", "nvfp4-pack-quantized"},
        {"\"weight_qtype\": \"int8\", \"act_qtype\": \"int8\"", "int8", "int-quantized"},
    };
    char *tmp = ck_tmpdir(), *in = kit_join(tmp, "in"), *nat = kit_join(tmp, "n"),
         *ctd = kit_join(tmp, "c");
    make_input(in);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char rules[256], qf[64];
        snprintf(rules, sizeof rules, "[{\"module_path\": \"layer.*\", %s}]", cases[i].rule);
        quant_pipeline_options o;
        quant_pipeline_options_init(&o);
        quant_ck_error err;
        ck_assert_msg(ck_quantize(rules, in, nat, &o, NULL, &err) == QUANT_CK_OK, "%s",
                      err.message);
        o.layout = QUANT_LAYOUT_CTENSORS;
        ck_assert_msg(ck_quantize(rules, in, ctd, &o, NULL, &err) == QUANT_CK_OK, "%s",
                      err.message);
        json_t *rn = inspect_row(tmp, nat, "layer.proj.weight", qf);
        json_t *rc = inspect_row(tmp, ctd, "layer.proj.weight", qf);
        ck_assert_str_eq(qf, "compressed-tensors");
        ck_assert_str_eq(json_string_value(json_object_get(rc, "qtype")), cases[i].qtype);
        ck_assert_str_eq(json_string_value(json_object_get(rc, "format")), cases[i].format);
        ck_assert(json_is_null(json_object_get(rc, "dtype")) || !json_object_get(rc, "dtype"));
        ck_assert(json_equal(json_object_get(rc, "shape"), json_object_get(rn, "shape")));
        static const char *const same[] = {"qtype", "scale_min", "scale_max", "global_scale"};
        for (int k = 0; k < 4; k++)
            ck_assert_msg(json_equal(json_object_get(rc, same[k]), json_object_get(rn, same[k])) ||
                              (!json_object_get(rc, same[k]) && !json_object_get(rn, same[k])),
                          "%s: %s differs", rules, same[k]);
        json_t *head = inspect_row(tmp, ctd, "lm_head.weight", qf);
        ck_assert(json_is_null(json_object_get(head, "qtype")) || !json_object_get(head, "qtype"));
        json_decref(head);
        json_decref(rn);
        json_decref(rc);
        kit_rmtree(nat);
        kit_rmtree(ctd);
    }
    kit_rmtree(tmp);
    free(tmp);
    free(in);
    free(nat);
    free(ctd);
}
END_TEST

START_TEST(ct_dequantize_help)
{
    char *tmp = ck_tmpdir(), *outf = kit_join(tmp, "help");
    const char *bin = getenv("QUANT_BIN");
    ck_assert_ptr_nonnull(bin);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' dequantize --help > '%s'", bin, outf);
    ck_assert_int_eq(system(cmd), 0);
    size_t n = 0;
    char *text = kit_read_file(outf, &n);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(strstr(text, "compressed-tensors") && strstr(text, "nvfp4-pack-quantized") &&
                      strstr(text, "loses its quantization_config"),
                  "%s", text);
    free(text);
    kit_rmtree(tmp);
    free(tmp);
    free(outf);
}
END_TEST

Suite *suite_ct_read(void)
{
    Suite *s = suite_create("ct_read");
    TCase *tc = tcase_create("ct_read");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ct_equals_native_every_scheme);
    tcase_add_test(tc, ct_equals_native_fixture);
    tcase_add_test(tc, ct_hand_made_block_and_tensor_zero_points);
    tcase_add_test(tc, ct_one_row_tensor_zero_point);
    tcase_add_test(tc, ct_zero_point_out_of_range);
    tcase_add_test(tc, ct_refusals);
    tcase_add_test(tc, ct_hostile_bits_and_empty_weights);
    tcase_add_test(tc, ct_inspect_rows);
    tcase_add_test(tc, ct_dequantize_help);
    suite_add_tcase(s, tc);
    return s;
}
