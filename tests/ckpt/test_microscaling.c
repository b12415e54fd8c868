/* test_microscaling.c -- the microscaling qtypes (mxfp8, mxfp8_16, mxfp4, nvfp4; SPEC 2b) through
 * the checkpoint side: rule refusals (tile, method, scale dtype, static activations), plan-time
 * refusals (a dimension the tile does not divide; in the compressed-tensors layout mxfp8_16,
 * mxfp4 / mxfp8 / nvfp4 beyond the input axis or with activations, a fused q/k/v or gate/up
 * layer mixing nvfp4 with another scheme), the native
 * layout on the stories260K fixture through `quant quantize`, `quant dequantize` and
 * `quant inspect --json` (qvalue and scale dtypes and shapes, every scale recomputed here from the
 * input, nvfp4's global_scale, dequantized = level(q) * scale), and nvfp4 in a two-pass (chunked)
 * run; mxfp4, mxfp8 and nvfp4 in the compressed-tensors layout decoded as compressed-tensors
 * does and compared with the native output bit for bit, with their quantization_config; nvfp4's
 * global and block scales against numbers from compressed-tensors' formulas, and its fused
 * groups (one weight_global_scale for q/k/v and for gate/up, across shards).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckutil.h"
#include "quant_pipeline.h"
#include "quant_rules.h"

/* ---- rule refusals ------------------------------------------------------------------------- */

static void refused(const char *json, const char *want1, const char *want2)
{
    quant_ruleset *rs = NULL;
    quant_ck_error err;
    ck_assert_int_eq(quant_ruleset_parse(json, strlen(json), "r.json", &rs, &err),
                     QUANT_CK_ERR_RULES);
    ck_assert_msg(strstr(err.message, "rule 0") && strstr(err.message, want1) &&
                      strstr(err.message, want2),
                  "%s: %s", json, err.message);
}

START_TEST(rules_refuse_wrong_tiles_methods_scale_dtypes)
{
    static const char *const q[4] = {"mxfp8", "mxfp8_16", "mxfp4", "nvfp4"};
    static const char *const wrong_tile[4] = {"16", "32", "16", "32"};
    char json[256];
    for (int i = 0; i < 4; i++) {
#define RULE(extra) snprintf(json, sizeof json, "[{\"weight_qtype\": \"%s\", %s}]", q[i], extra)
        RULE("\"pack\": true");
        quant_ruleset *rs = NULL;
        quant_ck_error err;
        ck_assert_int_eq(quant_ruleset_parse(json, strlen(json), NULL, &rs, &err), QUANT_CK_OK);
        quant_ruleset_free(rs);
        char t[64];
        snprintf(t, sizeof t, "\"tile_size\": %s", wrong_tile[i]);
        RULE(t);
        refused(json, "tile_size", wrong_tile[i]);
        RULE("\"tile_size\": 0.5");
        refused(json, "tile_size", "fraction 0.5");
        RULE("\"tile_size\": {\"0\": 32, \"1\": 32}");
        refused(json, "tile_size", "2-D");
        RULE("\"tile_size\": {\"1\": 16}");
        refused(json, "tile_size", "object");
        RULE("\"weight_calibration_method\": \"minmax\"");
        refused(json, "weight_calibration_method", "minmax");
        RULE("\"weight_calibration_method\": \"fixed,2\"");
        refused(json, "weight_calibration_method", "fixed,2");
        RULE("\"scale_dtype\": \"bfloat16\"");
        refused(json, "scale_dtype", "bfloat16");
        RULE("\"scale_dtype\": \"float16\"");
        refused(json, "scale_dtype", "float16");
        RULE("\"stochastic_rounding\": true");
        refused(json, "stochastic_rounding", q[i]);
        snprintf(json, sizeof json,
                 "[{\"weight_qtype\": \"int8\", \"act_qtype\": \"%s\", \"act_static_scale\": "
                 "true}]",
                 q[i]);
        refused(json, "act_static_scale", q[i]);
#undef RULE
    }
    /* the fixed size itself is accepted */
    static const char ok[] = "[{\"weight_qtype\": \"nvfp4\", \"tile_size\": 16}, "
                             "{\"weight_qtype\": \"mxfp8\", \"tile_size\": 32, "
                             "\"weight_calibration_method\": \"rms,3\"}]";
    quant_ruleset *rs = NULL;
    quant_ck_error err;
    ck_assert_int_eq(quant_ruleset_parse(ok, strlen(ok), NULL, &rs, &err), QUANT_CK_OK);
    quant_ruleset_free(rs);
}
END_TEST

/* A dimension the tile does not divide (down_proj: 172 columns), and the compressed-tensors
 * layout: refused at plan time naming tensor and rule, nothing written. */
START_TEST(plan_time_refusals)
{
    char *tmp = ck_tmpdir(), *out = kit_join(tmp, "out");
    char *in = kit_join(ck_data_dir(), "stories260K-bf16-sharded");
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    quant_ck_error err;
    ck_assert_int_ne(
        ck_quantize("[{\"module_path\": \".*down_proj\", \"weight_qtype\": \"mxfp4\"}]", in, out,
                    &o, NULL, &err),
        QUANT_CK_OK);
    ck_assert_msg(strstr(err.message, "down_proj") && strstr(err.message, "rule 0") &&
                      strstr(err.message, "172"),
                  "%s", err.message);
    ck_assert_int_lt(access(out, F_OK), 0);
    /* compressed-tensors: mxfp8_16 has no form there, mxfp4 / mxfp8 / nvfp4 are per-group along
     * the input axis only, and vLLM serves them without activations (nvfp4 with activations is
     * W4A4, which needs an input_global_scale) */
    static const struct {
        const char *rule, *want1, *want2;
    } ct[] = {
        {"\"weight_qtype\": \"mxfp8_16\"", "no compressed-tensors form", "mxfp8_16"},
        {"\"weight_qtype\": \"nvfp4\", \"act_qtype\": \"int8\"", "W4A4Fp4", "input_global_scale"},
        {"\"weight_qtype\": \"nvfp4\", \"act_qtype\": \"float8_e4m3fn\"", "W4A16Fp4",
         "no act_qtype"},
        {"\"weight_qtype\": \"nvfp4\", \"contraction_axes\": [0, 1]", "tensor_group",
         "input (last) axis"},
        {"\"weight_qtype\": \"nvfp4\", \"contraction_axes\": [0]", "input (last) axis", "nvfp4"},
        /* q_proj alone: vLLM's qkv_proj layer would mix nvfp4 with unquantized k and v */
        {"\"weight_qtype\": \"nvfp4\"", "one layer with one scheme", "is not quantized"},
        {"\"weight_qtype\": \"mxfp4\", \"contraction_axes\": [0, 1]", "strategy group",
         "input (last) axis"},
        {"\"weight_qtype\": \"mxfp8\", \"act_qtype\": \"float8_e4m3fn\"", "vLLM", "no act_qtype"},
        {"\"weight_qtype\": \"mxfp4\", \"act_qtype\": \"int8\"", "W4A16Mxfp4", "no act_qtype"},
    };
    o.layout = QUANT_LAYOUT_CTENSORS;
    for (size_t i = 0; i < sizeof ct / sizeof ct[0]; i++) {
        char rules[160];
        snprintf(rules, sizeof rules, "[{\"module_path\": \".*q_proj\", %s}]", ct[i].rule);
        ck_assert_int_eq(ck_quantize(rules, in, out, &o, NULL, &err), QUANT_CK_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(err.message, ct[i].want1) && strstr(err.message, ct[i].want2) &&
                          strstr(err.message, "rule 0") && strstr(err.message, "q_proj"),
                      "%s", err.message);
        ck_assert_int_lt(access(out, F_OK), 0);
    }
    /* gate_proj nvfp4 and up_proj int4: one fused layer, two schemes */
    static const char mixed[] = "[{\"module_path\": \".*gate_proj\", \"weight_qtype\": \"nvfp4\"},"
                                " {\"module_path\": \".*up_proj\", \"weight_qtype\": \"int4\"}]";
    ck_assert_int_eq(ck_quantize(mixed, in, out, &o, NULL, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "gate_proj, up_proj") &&
                      strstr(err.message, "model.layers.0.mlp.up_proj.weight' is not nvfp4") &&
                      strstr(err.message, "quantize all of them with nvfp4, or none"),
                  "%s", err.message);
    ck_assert_int_lt(access(out, F_OK), 0);
    /* the native layout has no fused layers: each tensor keeps its own global scale */
    o.layout = QUANT_LAYOUT_NATIVE;
    ck_assert_msg(ck_quantize(mixed, in, out, &o, NULL, &err) == QUANT_CK_OK, "%s", err.message);
    kit_rmtree(tmp);
    free(tmp);
    free(out);
    free(in);
}
END_TEST

/* ---- scales recomputed here (SPEC 2b, written out again on purpose) ------------------------- */

static float bits_to_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float ref_mx(float absmax, float bound, double c)
{
    float s = absmax / bound;
    if (s < sqrtf(0x1p-126f)) s = 1.0f;
    float t = quant_bf16_to_f32(quant_f32_to_bf16(s * (float)c));
    return bits_to_f(f_to_bits(t) & 0xff800000u); /* 2^floor(log2 t) */
}

static float ref_nv(float absmax, float g)
{
    float v = (absmax / 6.0f) * g;
    float sb = quant_e4m3fn_to_f32(quant_f32_to_e4m3fn(v > 448.0f ? 448.0f : v));
    return (sb == 0.0f ? 0.125f : sb) / g;
}

/* The block's calibration as the rule says (absmax, absmax,0.9, rms,3). */
static float block_calib(const float *x, int64_t n, const char *method)
{
    float am = 0.0f;
    double ss = 0.0;
    for (int64_t j = 0; j < n; j++) {
        am = fabsf(x[j]) > am ? fabsf(x[j]) : am;
        ss += (double)x[j] * (double)x[j];
    }
    if (strcmp(method, "absmax,0.9") == 0) return am * 0.9f;
    if (strcmp(method, "rms,3") == 0) return (float)sqrt(ss / (double)n) * 3.0f;
    return am;
}

/* ---- the fixture through the quant binary ---------------------------------------------------- */

/* Runs quant ARGS with stdout into `out` (or /dev/null); returns its exit status. */
static int run_quant_to(const char *const *args, const char *out)
{
    const char *bin = getenv("QUANT_BIN");
    ck_assert_msg(bin && *bin && access(bin, X_OK) == 0, "QUANT_BIN must name the quant binary");
    return kit_run(bin, "quant", args, out, NULL);
}

static int run_quant(const char *const *args)
{
    return run_quant_to(args, NULL);
}

/* `rules` over `in` in the native layout (into `nat`) and in compressed-tensors' (into `ctd`),
 * and the native output dequantized into `deq`: what each compressed-tensors round trip
 * compares. */
static void both_layouts(const char *rules, const char *in, const char *nat, const char *ctd,
                         const char *deq)
{
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    quant_ck_error err;
    ck_assert_msg(ck_quantize(rules, in, nat, &o, NULL, &err) == QUANT_CK_OK, "%s", err.message);
    o.layout = QUANT_LAYOUT_CTENSORS;
    ck_assert_msg(ck_quantize(rules, in, ctd, &o, NULL, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_int_eq(run_quant((const char *const[]){"dequantize", "--quiet", nat, deq, NULL}), 0);
}

/* `quant inspect --json` of the first output shard: nvfp4 rows carry global_scale, the others
 * not; the qtype and the scale dtype are as written. */
static void check_inspect(const char *tmp, const char *out)
{
    char *shard = kit_join(out, "model-00001-of-00002.safetensors"), *js = kit_join(tmp, "i.json");
    ck_assert_int_eq(run_quant_to((const char *const[]){"inspect", "--json", shard, NULL}, js), 0);
    json_error_t je;
    json_t *doc = json_load_file(js, 0, &je);
    ck_assert_msg(doc != NULL, "%s", je.text);
    size_t i, nv = 0;
    json_t *row;
    json_array_foreach(json_object_get(doc, "tensors"), i, row)
    {
        const char *q = json_string_value(json_object_get(row, "qtype"));
        json_t *g = json_object_get(row, "global_scale");
        if (q && strcmp(q, "nvfp4") == 0) {
            ck_assert(json_is_number(g) && json_number_value(g) > 0);
            nv++;
        } else {
            ck_assert_ptr_null(g);
        }
        if (q) ck_assert_str_eq(json_string_value(json_object_get(row, "scale_dtype")), "F32");
    }
    ck_assert_int_eq(nv, 6); /* gate and up of layers 0..2 */
    json_decref(doc);
    free(shard);
    free(js);
}

static const char fixture_rules[] =
    "[{\"module_path\": \".*self_attn\\\\.(q|k)_proj\", \"weight_qtype\": \"mxfp8\"},\n"
    " {\"module_path\": \".*self_attn\\\\.v_proj\", \"weight_qtype\": \"mxfp8_16\",\n"
    "  \"weight_calibration_method\": \"rms,3\"},\n"
    " {\"module_path\": \".*self_attn\\\\.o_proj\", \"weight_qtype\": \"mxfp4\", \"tile_size\": "
    "32},\n"
    " {\"module_path\": \".*mlp\\\\.(gate|up)_proj\", \"weight_qtype\": \"nvfp4\",\n"
    "  \"weight_calibration_method\": \"absmax,0.9\"}]\n";

typedef struct part {
    const quant_st_tensor *t;
    void *raw;
} part;

static part read_part(quant_st_file *f, const char *name, const char *suffix)
{
    char full[256];
    snprintf(full, sizeof full, "%s%s", name, suffix);
    part p = {quant_st_find(f, full), NULL};
    ck_assert_msg(p.t != NULL, "%s: no %s", f->path, full);
    size_t n = (size_t)quant_st_nbytes(p.t);
    p.raw = malloc(n + 1);
    quant_ck_error err;
    ck_assert_msg(quant_st_read(f, p.t, 0, p.raw, n, &err) == QUANT_CK_OK, "%s", err.message);
    return p;
}

/* Checks one quantized tensor of the output against the input and the dequantized output. */
static void check_tensor(quant_st_file *in, quant_st_file *out, quant_st_file *deq,
                         const char *name, const json_t *info, int *seen)
{
    quant_qtype q;
    ck_assert_int_eq(quant_qtype_parse(json_string_value(json_object_get(info, "qtype")), &q, NULL),
                     QUANT_OK);
    const quant_qtype_traits *tr = quant_qtype_traits_get(q);
    seen[q - QUANT_QTYPE_MXFP8]++;
    const char *method = json_string_value(json_object_get(info, "calibration"));
    part x = read_part(in, name, ""), qv = read_part(out, name, ".qvalue"),
         sc = read_part(out, name, ".scale"), dq = read_part(deq, name, "");
    int64_t rows = x.t->shape[0], cols = x.t->shape[1], tile = tr->fixed_tile, ng = cols / tile;
    /* dtypes and shapes of the native layout */
    ck_assert_int_eq(qv.t->dtype, tr->bits == 4 ? QUANT_ST_U8 : QUANT_ST_F8_E4M3);
    ck_assert_int_eq(qv.t->shape[1], tr->bits == 4 ? cols / 2 : cols);
    ck_assert_int_eq(sc.t->dtype, QUANT_ST_F32);
    ck_assert_int_eq(sc.t->shape[0], rows);
    ck_assert_int_eq(sc.t->shape[1], ng);
    ck_assert_int_eq(dq.t->dtype, QUANT_ST_F32);
    float *xf = malloc((size_t)(rows * cols) * sizeof *xf);
    float amax = 0.0f;
    for (int64_t i = 0; i < rows * cols; i++) {
        xf[i] = quant_bf16_to_f32(((const uint16_t *)x.raw)[i]);
        amax = fabsf(xf[i]) > amax ? fabsf(xf[i]) : amax;
    }
    float g = 0.0f;
    const json_t *gj = json_object_get(info, "global_scale");
    if (q == QUANT_QTYPE_NVFP4) {
        /* g = f32(2688 * f32(1 / A)), A = max |x| of the whole tensor before the 0.9 factor */
        ck_assert_msg(json_is_number(gj), "%s: no global_scale", name);
        g = 2688.0f * (1.0f / amax);
        ck_assert_float_eq((float)json_number_value(gj), g);
    } else {
        ck_assert_ptr_null(gj);
    }
    const float *s = sc.raw;
    const uint8_t *codes = qv.raw;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < ng; b++) {
            const float *blk = xf + r * cols + b * tile;
            float cal = block_calib(blk, tile, method);
            float want = q == QUANT_QTYPE_NVFP4 ? ref_nv(cal, g)
                         : tr->bits == 8        ? ref_mx(cal, 448.0f, 60.0 / 31.0)
                                                : ref_mx(cal, 6.0f, 12.0 / 7.0);
            ck_assert_msg(s[r * ng + b] == want, "%s scale [%lld, %lld]: %a, want %a", name,
                          (long long)r, (long long)b, (double)s[r * ng + b], (double)want);
            for (int64_t j = 0; j < tile; j++) {
                int64_t c = b * tile + j, k = r * cols + c;
                int code = tr->bits == 8 ? codes[k]
                                         : (codes[r * (cols / 2) + c / 2] >> (4 * (c & 1))) & 15;
                float d = ((const float *)dq.raw)[k];
                ck_assert(d == tr->level(code) * want);
                ck_assert(code == tr->convert(xf[k] / want)); /* q = convert(x / scale) */
            }
        }
    free(xf);
    free(x.raw);
    free(qv.raw);
    free(sc.raw);
    free(dq.raw);
}

START_TEST(fixture_quantize_then_dequantize)
{
    char *tmp = ck_tmpdir(), *rules = kit_join(tmp, "rules.json"), *out = kit_join(tmp, "q"),
         *deq = kit_join(tmp, "d"), *in = kit_join(ck_data_dir(), "stories260K-bf16-sharded");
    ck_write_file(rules, fixture_rules, strlen(fixture_rules));
    ck_assert_int_eq(
        run_quant((const char *const[]){"quantize", "--rules", rules, "--quiet", in, out, NULL}),
        0);
    ck_assert_int_eq(run_quant((const char *const[]){"dequantize", "--quiet", out, deq, NULL}), 0);
    check_inspect(tmp, out);
    int seen[4] = {0};
    static const char *const shards[2] = {"model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors"};
    for (int s = 0; s < 2; s++) {
        char *pi = kit_join(in, shards[s]), *po = kit_join(out, shards[s]),
             *pd = kit_join(deq, shards[s]);
        quant_st_file *fi = NULL, *fo = NULL, *fd = NULL;
        quant_ck_error err;
        ck_assert(quant_st_open(pi, &fi, &err) == QUANT_CK_OK);
        ck_assert(quant_st_open(po, &fo, &err) == QUANT_CK_OK);
        ck_assert(quant_st_open(pd, &fd, &err) == QUANT_CK_OK);
        json_t *meta = json_loads(quant_st_meta(fo, "quantization"), 0, NULL);
        const char *name;
        json_t *info;
        json_object_foreach(json_object_get(meta, "tensors"), name, info)
            check_tensor(fi, fo, fd, name, info, seen);
        json_decref(meta);
        quant_st_close(fi);
        quant_st_close(fo);
        quant_st_close(fd);
        free(pi);
        free(po);
        free(pd);
    }
    /* five layers: q and k mxfp8, v mxfp8_16, o mxfp4, gate and up nvfp4 */
    ck_assert_int_eq(seen[0], 10);
    ck_assert_int_eq(seen[1], 5);
    ck_assert_int_eq(seen[2], 5);
    ck_assert_int_eq(seen[3], 10);
    kit_rmtree(tmp);
    free(tmp);
    free(rules);
    free(out);
    free(deq);
    free(in);
}
END_TEST

/* nvfp4 with both axes contracted: one scale row for the whole tensor, which exceeds a chunk,
 * so the run calibrates unit by unit then quantizes; the codes and scales must equal a run that
 * holds the tensor in one unit and libquant on the whole tensor, and g the whole tensor's. */
START_TEST(nvfp4_two_pass_equals_one_pass)
{
    enum { R = 512, C = 128 };
    char *tmp = ck_tmpdir(), *in = kit_join(tmp, "in.safetensors");
    float *x = malloc(R * C * sizeof *x);
    ck_fill(x, R * C, 7, 0.05f);
    x[300 * C + 5] = -2.5f; /* A */
    kit_st_tensor t = {"m.w", "F32", 2, {R, C}, x, R * C * sizeof *x};
    ck_gen_file(in, &t, 1, NULL);
    static const char rules[] = "[{\"weight_qtype\": \"nvfp4\", \"contraction_axes\": [0, 1], "
                                "\"pack\": false}]";
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    quant_ck_error err;
    o.chunk_bytes = 64 * 1024; /* 256 KiB tensor: four units per pass */
    char *a = kit_join(tmp, "a.safetensors"), *b = kit_join(tmp, "b.safetensors");
    ck_assert_msg(ck_quantize(rules, in, a, &o, NULL, &err) == QUANT_CK_OK, "%s", err.message);
    o.chunk_bytes = 16u << 20;
    ck_assert_msg(ck_quantize(rules, in, b, &o, NULL, &err) == QUANT_CK_OK, "%s", err.message);
    uint8_t *qa = NULL, *qb = NULL;
    float *sa = NULL, *sb = NULL;
    const char *files[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        quant_st_file *f = NULL;
        ck_assert(quant_st_open(files[k], &f, &err) == QUANT_CK_OK);
        part qv = read_part(f, "m.w", ".qvalue"), sc = read_part(f, "m.w", ".scale");
        ck_assert_int_eq(sc.t->shape[0], 1);
        ck_assert_int_eq(sc.t->shape[1], C / 16);
        ck_assert_int_eq(qv.t->dtype, QUANT_ST_U8); /* pack false: one e2m1 code per byte */
        ck_assert_int_eq(qv.t->shape[0], R);
        ck_assert_int_eq(qv.t->shape[1], C);
        json_t *meta = json_loads(quant_st_meta(f, "quantization"), 0, NULL);
        json_t *e = json_object_get(json_object_get(meta, "tensors"), "m.w");
        ck_assert_float_eq((float)json_number_value(json_object_get(e, "global_scale")),
                           quant_nvfp4_global_scale(2.5f));
        json_decref(meta);
        if (k == 0)
            qa = qv.raw, sa = sc.raw;
        else
            qb = qv.raw, sb = sc.raw;
        quant_st_close(f);
    }
    ck_assert_int_eq(memcmp(qa, qb, R * C), 0);
    ck_assert_int_eq(memcmp(sa, sb, (C / 16) * sizeof(float)), 0);
    /* libquant on the whole tensor */
    quant_ctx *ctx = quant_ctx_new(NULL, NULL);
    quant_how how;
    quant_how_init(&how, QUANT_QTYPE_NVFP4);
    how.pack = false;
    how.tiles[how.n_tiles++] = (quant_tile){.axis = 1, .size = 16};
    quant_tensor xt;
    int64_t shape[2] = {R, C};
    quant_tensor_init(&xt, QUANT_DTYPE_F32, 2, shape, x, NULL);
    uint8_t *q = malloc(R * C);
    float s[C / 16];
    quant_error qe;
    ck_assert_int_eq(quant_quantize(ctx, &how, &xt, q, s, NULL, &qe), QUANT_OK);
    ck_assert_int_eq(memcmp(q, qa, R * C), 0);
    ck_assert_int_eq(memcmp(s, sa, sizeof s), 0);
    quant_ctx_free(ctx);
    free(q);
    free(qa);
    free(qb);
    free(sa);
    free(sb);
    free(x);
    kit_rmtree(tmp);
    free(tmp);
    free(in);
    free(a);
    free(b);
}
END_TEST

/* ---- the compressed-tensors layout: mxfp4 and mxfp8 ------------------------------------------ */

/* compressed-tensors' decoding, written out again here: e2m1 code -> value (sign in bit 3; its
 * unpack_fp4_from_uint8 takes element 2i from the low nibble), E8M0 e -> 2^(e - 127)
 * (decompress_mx_scale), float8_e4m3fn as torch converts it; weight = value * scale. */
static float ct_e2m1(int code)
{
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (code & 8) ? -mag[code & 7] : mag[code & 7];
}

static float ct_decode(const part *data, const part *scale, int64_t r, int64_t c, bool fp4)
{
    int64_t cols = fp4 ? data->t->shape[1] * 2 : data->t->shape[1], ng = scale->t->shape[1];
    const uint8_t *d = data->raw;
    float v = fp4 ? ct_e2m1((d[r * (cols / 2) + c / 2] >> (4 * (c & 1))) & 15)
                  : quant_e4m3fn_to_f32(d[r * cols + c]);
    int e = ((const uint8_t *)scale->raw)[r * ng + c / 32];
    return v * ldexpf(1.0f, e - 127);
}

/* One weight of both outputs: names, dtypes, shapes, the same codes, and compressed-tensors'
 * decoding equal to `quant dequantize` of the native output bit for bit. */
static void check_ct_weight(quant_st_file *ct, quant_st_file *nat, quant_st_file *deq,
                            const char *module, bool fp4, int64_t rows, int64_t cols)
{
    char w[64];
    snprintf(w, sizeof w, "%s.weight", module);
    part d = read_part(ct, module, fp4 ? ".weight_packed" : ".weight"),
         s = read_part(ct, module, ".weight_scale"), qv = read_part(nat, w, ".qvalue"),
         dq = read_part(deq, w, "");
    ck_assert_int_eq(d.t->dtype, fp4 ? QUANT_ST_U8 : QUANT_ST_F8_E4M3);
    ck_assert_int_eq(d.t->rank, 2);
    ck_assert_int_eq(d.t->shape[0], rows);
    ck_assert_int_eq(d.t->shape[1], fp4 ? cols / 2 : cols);
    ck_assert_int_eq(s.t->dtype, QUANT_ST_U8);
    ck_assert_int_eq(s.t->rank, 2);
    ck_assert_int_eq(s.t->shape[0], rows);
    ck_assert_int_eq(s.t->shape[1], cols / 32);
    char absent[64];
    snprintf(absent, sizeof absent, "%s.weight_shape", module);
    ck_assert_ptr_null(quant_st_find(ct, absent));
    snprintf(absent, sizeof absent, "%s.weight_zero_point", module);
    ck_assert_ptr_null(quant_st_find(ct, absent));
    if (fp4) ck_assert_ptr_null(quant_st_find(ct, w)); /* mxfp8 keeps the name P.weight */
    ck_assert_int_eq(quant_st_nbytes(d.t), quant_st_nbytes(qv.t));
    ck_assert_int_eq(memcmp(d.raw, qv.raw, (size_t)quant_st_nbytes(d.t)), 0);
    const float *ref = dq.raw;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = ct_decode(&d, &s, r, c, fp4);
            ck_assert_msg(f_to_bits(v) == f_to_bits(ref[r * cols + c]), "%s [%lld, %lld]: %a != %a",
                          module, (long long)r, (long long)c, (double)v, (double)ref[r * cols + c]);
        }
    free(d.raw);
    free(s.raw);
    free(qv.raw);
    free(dq.raw);
}

/* quantization_config: one group per format, the MXFP4A16 / MXFP8A16 presets' weights. */
static void check_ct_group(const json_t *groups, const char *format, int bits, const char *target)
{
    const char *key;
    json_t *g;
    json_object_foreach((json_t *)groups, key, g)
    {
        if (strcmp(json_string_value(json_object_get(g, "format")), format) != 0) continue;
        json_t *wa = json_object_get(g, "weights");
        ck_assert_int_eq(json_integer_value(json_object_get(wa, "num_bits")), bits);
        ck_assert_str_eq(json_string_value(json_object_get(wa, "type")), "float");
        ck_assert_str_eq(json_string_value(json_object_get(wa, "strategy")), "group");
        ck_assert_int_eq(json_integer_value(json_object_get(wa, "group_size")), 32);
        ck_assert(json_is_true(json_object_get(wa, "symmetric")));
        ck_assert(json_is_false(json_object_get(wa, "dynamic")));
        ck_assert_str_eq(json_string_value(json_object_get(wa, "scale_dtype")), "torch.uint8");
        ck_assert(json_is_null(json_object_get(wa, "zp_dtype")));
        ck_assert(json_is_null(json_object_get(g, "input_activations")));
        json_t *targets = json_object_get(g, "targets");
        ck_assert_int_eq(json_array_size(targets), 1);
        ck_assert_str_eq(json_string_value(json_array_get(targets, 0)), target);
        return;
    }
    ck_abort_msg("no config group of format %s", format);
}

START_TEST(ctensors_mx_equals_native)
{
    enum { RA = 6, CA = 96, RB = 5, CB = 64 };
    char *tmp = ck_tmpdir(), *in = kit_join(tmp, "in"), *nat = kit_join(tmp, "n"),
         *ctd = kit_join(tmp, "c"), *deq = kit_join(tmp, "d");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    float *a = malloc(RA * CA * sizeof *a), *b = malloc(RB * CB * sizeof *b), head[32];
    ck_fill(a, RA * CA, 31, 1.0f);
    ck_fill(b, RB * CB, 32, 1.0f);
    ck_fill(head, 32, 33, 1.0f);
    for (int j = 0; j < CA; j++) a[CA + j] *= 1e-3f, a[2 * CA + j] *= 300.0f; /* other scales */
    for (int j = 0; j < CB; j++) b[CB + j] *= 1e-4f, b[2 * CB + j] *= 2000.0f;
    a[3 * CA + 7] = -0.0f; /* the sign of zero is kept: code 8 */
    kit_st_tensor t[] = {{"a.proj.weight", "F32", 2, {RA, CA}, a, RA * CA * sizeof *a},
                         {"b.proj.weight", "F32", 2, {RB, CB}, b, RB * CB * sizeof *b},
                         {"lm_head.weight", "F32", 2, {4, 8}, head, sizeof head}};
    char *shard = kit_join(in, "model.safetensors"), *cfg = kit_join(in, "config.json");
    ck_gen_file(shard, t, 3, NULL);
    ck_write_file(cfg, "{\"model_type\":\"llama\"}", 22);
    static const char rules[] = "[{\"module_path\": \"a\\\\.proj\", \"weight_qtype\": \"mxfp4\", "
                                "\"weight_calibration_method\": \"rms,3\"},"
                                " {\"module_path\": \"b\\\\.proj\", \"weight_qtype\": \"mxfp8\"}]";
    quant_ck_error err;
    both_layouts(rules, in, nat, ctd, deq);
    char *pc = kit_join(ctd, "model.safetensors"), *pn = kit_join(nat, "model.safetensors"),
         *pd = kit_join(deq, "model.safetensors");
    quant_st_file *fc = NULL, *fn = NULL, *fd = NULL;
    ck_assert(quant_st_open(pc, &fc, &err) == QUANT_CK_OK);
    ck_assert(quant_st_open(pn, &fn, &err) == QUANT_CK_OK);
    ck_assert(quant_st_open(pd, &fd, &err) == QUANT_CK_OK);
    check_ct_weight(fc, fn, fd, "a.proj", true, RA, CA);
    check_ct_weight(fc, fn, fd, "b.proj", false, RB, CB);
    const uint8_t *packed = NULL;
    part pa = read_part(fc, "a.proj", ".weight_packed");
    packed = pa.raw;
    ck_assert_int_eq((packed[(3 * CA + 7) / 2] >> 4) & 15, 8);
    free(pa.raw);
    quant_st_close(fc);
    quant_st_close(fn);
    quant_st_close(fd);
    char *pcfg = kit_join(ctd, "config.json");
    json_t *root = json_load_file(pcfg, 0, NULL);
    json_t *qc = json_object_get(root, "quantization_config");
    ck_assert_str_eq(json_string_value(json_object_get(qc, "quant_method")), "compressed-tensors");
    ck_assert_str_eq(json_string_value(json_object_get(qc, "format")), "mixed-precision");
    json_t *groups = json_object_get(qc, "config_groups");
    ck_assert_int_eq(json_object_size(groups), 2);
    check_ct_group(groups, "mxfp4-pack-quantized", 4, "a.proj");
    check_ct_group(groups, "mxfp8-quantized", 8, "b.proj");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(qc, "ignore"), 0)),
                     "lm_head");
    json_decref(root);
    kit_rmtree(tmp);
    free(pcfg);
    free(pc);
    free(pn);
    free(pd);
    free(shard);
    free(cfg);
    free(a);
    free(b);
    free(tmp);
    free(in);
    free(nat);
    free(ctd);
    free(deq);
}
END_TEST

/* ---- the compressed-tensors layout: nvfp4 -----------------------------------------------------
 */

/* compressed-tensors' cast_to_fp4 (quantization/utils/fp4_utils.py), written out again: the e2m1
 * magnitude index of |v| after the clamp to [-6, 6], by its thresholds (<= 0.25 -> 0, < 0.75 ->
 * 0.5, <= 1.25 -> 1, < 1.75 -> 1.5, <= 2.5 -> 2, < 3.5 -> 3, <= 5 -> 4, else 6); its
 * pack_fp4_to_uint8 then adds signbit << 3. */
static int ct_cast_fp4(float v)
{
    static const float le[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    static const bool incl[7] = {true, false, true, false, true, false, true};
    float a = fabsf(v);
    int m = 0;
    while (m < 7 && !(incl[m] ? a <= le[m] : a < le[m])) m++;
    return (signbit(v) ? 8 : 0) | m;
}

typedef struct nv_ct {
    part packed, scale, global;
} nv_ct;

/* The three tensors of an nvfp4 weight, their dtypes and shapes, and no P.weight, P.weight_shape
 * or P.weight_zero_point. */
static nv_ct read_nv_ct(quant_st_file *ct, const char *module, int64_t rows, int64_t cols)
{
    nv_ct t = {read_part(ct, module, ".weight_packed"), read_part(ct, module, ".weight_scale"),
               read_part(ct, module, ".weight_global_scale")};
    ck_assert_int_eq(t.packed.t->dtype, QUANT_ST_U8);
    ck_assert_int_eq(t.packed.t->rank, 2);
    ck_assert_int_eq(t.packed.t->shape[0], rows);
    ck_assert_int_eq(t.packed.t->shape[1], cols / 2);
    ck_assert_int_eq(t.scale.t->dtype, QUANT_ST_F8_E4M3);
    ck_assert_int_eq(t.scale.t->rank, 2);
    ck_assert_int_eq(t.scale.t->shape[0], rows);
    ck_assert_int_eq(t.scale.t->shape[1], cols / 16);
    ck_assert_int_eq(t.global.t->dtype, QUANT_ST_F32);
    ck_assert_int_eq(t.global.t->rank, 1);
    ck_assert_int_eq(t.global.t->shape[0], 1);
    static const char *const absent[3] = {".weight", ".weight_shape", ".weight_zero_point"};
    for (int i = 0; i < 3; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s%s", module, absent[i]);
        ck_assert_msg(quant_st_find(ct, name) == NULL, "%s written", name);
    }
    return t;
}

/* One nvfp4 weight of a compressed-tensors output against its input `x` (rows x cols float32)
 * and the global scale g it must carry: each block scale byte is compressed-tensors'
 * calculate_qparams under g (f32(absmax / 6) * g, clamped to +-448, cast to e4m3fn, 0 -> 0.125),
 * each code its quantize (x / f32(s_b / g), cast_to_fp4, element 2i in the low nibble), and
 * its decoding (unpack, s_b through bfloat16 as its decompress_scale does, f32(s_b / g),
 * level * that) is returned in `dec` (rows x cols) for comparisons. */
static void check_nv_ct(quant_st_file *ct, const char *module, const float *x, int64_t rows,
                        int64_t cols, float g, float *dec)
{
    nv_ct t = read_nv_ct(ct, module, rows, cols);
    float gs;
    memcpy(&gs, t.global.raw, sizeof gs);
    ck_assert_msg(f_to_bits(gs) == f_to_bits(g), "%s: weight_global_scale %a, want %a", module,
                  (double)gs, (double)g);
    const uint8_t *sc = t.scale.raw, *pk = t.packed.raw;
    int64_t ng = cols / 16;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < ng; b++) {
            const float *blk = x + r * cols + b * 16;
            float am = 0.0f;
            for (int j = 0; j < 16; j++) am = fabsf(blk[j]) > am ? fabsf(blk[j]) : am;
            float v = (am / 6.0f) * g;
            uint8_t want = quant_f32_to_e4m3fn(v > 448.0f ? 448.0f : v);
            if (quant_e4m3fn_to_f32(want) == 0.0f) want = quant_f32_to_e4m3fn(0.125f);
            ck_assert_msg(sc[r * ng + b] == want, "%s scale [%lld, %lld]: 0x%02x, want 0x%02x",
                          module, (long long)r, (long long)b, sc[r * ng + b], want);
            float sb = quant_bf16_to_f32(quant_f32_to_bf16(quant_e4m3fn_to_f32(sc[r * ng + b])));
            float e = sb / g;
            for (int j = 0; j < 16; j++) {
                int64_t c = b * 16 + j;
                int code = (pk[r * (cols / 2) + c / 2] >> (4 * (c & 1))) & 15;
                float q = blk[j] / e;
                q = q > 6.0f ? 6.0f : q < -6.0f ? -6.0f : q;
                ck_assert_msg(code == ct_cast_fp4(q), "%s [%lld, %lld]: code %d, want %d", module,
                              (long long)r, (long long)c, code, ct_cast_fp4(q));
                dec[r * cols + c] = ct_e2m1(code) * e;
            }
        }
    free(t.packed.raw);
    free(t.scale.raw);
    free(t.global.raw);
}

/* The decoded compressed-tensors weight equals `quant dequantize` of the native output (F32)
 * bit for bit, and the codes are the native qvalue bytes. */
static void same_as_native(quant_st_file *ct, quant_st_file *nat, quant_st_file *deq,
                           const char *module, const float *dec, int64_t rows, int64_t cols)
{
    char w[128];
    snprintf(w, sizeof w, "%s.weight", module);
    part qv = read_part(nat, w, ".qvalue"), dq = read_part(deq, w, ""),
         pk = read_part(ct, module, ".weight_packed");
    ck_assert_int_eq(dq.t->dtype, QUANT_ST_F32);
    ck_assert_int_eq(memcmp(pk.raw, qv.raw, (size_t)(rows * cols / 2)), 0);
    const float *ref = dq.raw;
    for (int64_t i = 0; i < rows * cols; i++)
        ck_assert_msg(f_to_bits(dec[i]) == f_to_bits(ref[i]), "%s [%lld]: %a != %a", module,
                      (long long)i, (double)dec[i], (double)ref[i]);
    free(qv.raw);
    free(dq.raw);
    free(pk.raw);
}

/* NVFP4A16 in quantization_config: compressed-tensors' preset as it serializes it. */
static void check_nv_config(const char *dir, size_t n_targets)
{
    char *pcfg = kit_join(dir, "config.json");
    json_t *root = json_load_file(pcfg, 0, NULL);
    ck_assert_ptr_nonnull(root);
    json_t *qc = json_object_get(root, "quantization_config");
    ck_assert_str_eq(json_string_value(json_object_get(qc, "format")), "nvfp4-pack-quantized");
    json_t *groups = json_object_get(qc, "config_groups");
    ck_assert_int_eq(json_object_size(groups), 1);
    json_t *g = json_object_get(groups, "group_0");
    ck_assert_str_eq(json_string_value(json_object_get(g, "format")), "nvfp4-pack-quantized");
    json_t *wa = json_object_get(g, "weights");
    ck_assert_int_eq(json_integer_value(json_object_get(wa, "num_bits")), 4);
    ck_assert_str_eq(json_string_value(json_object_get(wa, "type")), "float");
    ck_assert_str_eq(json_string_value(json_object_get(wa, "strategy")), "tensor_group");
    ck_assert_int_eq(json_integer_value(json_object_get(wa, "group_size")), 16);
    ck_assert(json_is_true(json_object_get(wa, "symmetric")));
    ck_assert(json_is_false(json_object_get(wa, "dynamic")));
    ck_assert_str_eq(json_string_value(json_object_get(wa, "scale_dtype")), "torch.float8_e4m3fn");
    ck_assert(json_is_null(json_object_get(wa, "zp_dtype")));
    ck_assert(json_is_null(json_object_get(g, "input_activations")));
    ck_assert_int_eq(json_array_size(json_object_get(g, "targets")), n_targets);
    json_decref(root);
    free(pcfg);
}

/* Global and block scales against numbers computed with compressed-tensors' own formulas:
 * generate_gparam (g = 448 * 6 / A, which torch evaluates as reciprocal(A) * 2688) and
 * calculate_qparams for tensor_group (f32(absmax / 6) * g, clamp to +-448, .to(float8_e4m3fn),
 * a zero scale replaced by float8_e4m3fn's eps 0.125). The expected values were computed off-line
 * by a Python script emulating those torch float32 operations (each op rounded to float32 with
 * struct, e4m3fn round-to-nearest-even by hand) for blocks whose absmax is, row by row,
 * 3.7, 0.01, 1e-6, 0.3 and 2.0, 0, 0.0703, 1.55 (float32): A = 3.7, g = 726.48645 =
 * 0x1.6b3e44p+9, f32(absmax / 6) * g = 447.99997, 1.2108107, 1.2108107e-4, 36.324322, 242.16216,
 * 0, 8.511999, 187.67566, so s_b = 448, 1.25, 0 -> 0.125, 36, 240, 0 -> 0.125, 9, 192 (e4m3fn
 * bytes 0x7e 0x3a 0x20 0x61 0x77 0x20 0x51 0x74). Then the codes and the decoding equal the native
 * layout's qvalue and `quant dequantize` bit for bit. */
START_TEST(ctensors_nvfp4_scales_and_round_trip)
{
    enum { R = 2, C = 64 };
    static const float bmax[R][4] = {{3.7f, 0.01f, 1e-6f, 0.3f}, {2.0f, 0.0f, 0.0703f, 1.55f}};
    static const uint8_t want_sb[R * 4] = {0x7e, 0x3a, 0x20, 0x61, 0x77, 0x20, 0x51, 0x74};
    const float want_g = 0x1.6b3e44p+9f;
    float x[R * C], dec[R * C];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) /* each block: bmax * (j - 8) / 8, absmax bmax at j = 0 */
            x[r * C + c] = bmax[r][c / 16] * ((float)(c % 16 - 8) / 8.0f);
    x[1 * C + 20] = -0.0f; /* the sign of zero is kept: code 8 */
    /* a tiny tensor: g = 2688 / 1e-35 is near FLT_MAX, so a zero block's e_b = 0.125 / g is a
     * float32 subnormal, which must still come back to s_b = 0.125 */
    float tiny[R * C];
    for (int i = 0; i < R * C; i++) tiny[i] = i < C ? x[i] * (1e-35f / 3.7f) : 0.0f;
    char *tmp = ck_tmpdir(), *in = kit_join(tmp, "in"), *nat = kit_join(tmp, "n"),
         *ctd = kit_join(tmp, "c"), *deq = kit_join(tmp, "d");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    kit_st_tensor t[2] = {{"m.proj.weight", "F32", 2, {R, C}, x, sizeof x},
                          {"t.proj.weight", "F32", 2, {R, C}, tiny, sizeof tiny}};
    char *shard = kit_join(in, "model.safetensors");
    ck_gen_file(shard, t, 2, NULL);
    static const char rules[] = "[{\"weight_qtype\": \"nvfp4\"}]";
    quant_ck_error err;
    both_layouts(rules, in, nat, ctd, deq);
    char *pc = kit_join(ctd, "model.safetensors"), *pn = kit_join(nat, "model.safetensors"),
         *pd = kit_join(deq, "model.safetensors");
    quant_st_file *fc = NULL, *fn = NULL, *fd = NULL;
    ck_assert(quant_st_open(pc, &fc, &err) == QUANT_CK_OK);
    ck_assert(quant_st_open(pn, &fn, &err) == QUANT_CK_OK);
    ck_assert(quant_st_open(pd, &fd, &err) == QUANT_CK_OK);
    ck_assert_float_eq(quant_nvfp4_global_scale(3.7f), want_g);
    check_nv_ct(fc, "m.proj", x, R, C, want_g, dec);
    part sc = read_part(fc, "m.proj", ".weight_scale");
    ck_assert_int_eq(memcmp(sc.raw, want_sb, sizeof want_sb), 0);
    free(sc.raw);
    part pk = read_part(fc, "m.proj", ".weight_packed");
    ck_assert_int_eq((((const uint8_t *)pk.raw)[(C + 20) / 2]) & 15, 8);
    free(pk.raw);
    same_as_native(fc, fn, fd, "m.proj", dec, R, C);
    float a_tiny = 0.0f;
    for (int i = 0; i < R * C; i++) a_tiny = fmaxf(a_tiny, fabsf(tiny[i]));
    float g_tiny = quant_nvfp4_global_scale(a_tiny);
    ck_assert(g_tiny > 1e38f && g_tiny < 3.4e38f);
    check_nv_ct(fc, "t.proj", tiny, R, C, g_tiny, dec);
    ck_assert(fpclassify(0.125f / g_tiny) == FP_SUBNORMAL); /* row 1: zero blocks */
    same_as_native(fc, fn, fd, "t.proj", dec, R, C);
    quant_st_close(fc);
    quant_st_close(fn);
    quant_st_close(fd);
    check_nv_config(ctd, 2);
    kit_rmtree(tmp);
    free(pc);
    free(pn);
    free(pd);
    free(shard);
    free(tmp);
    free(in);
    free(nat);
    free(ctd);
    free(deq);
}
END_TEST

/* A tensor of a fused-group run: its name, shard, and max |x|. */
typedef struct fused_t {
    const char *name;
    int shard;
    float amax;
} fused_t;

/* Fused groups across shards: q_proj in the first shard, k_proj and v_proj in the second, and
 * gate_proj / up_proj split the same way. q/k/v all carry g of the largest A of the three (k's),
 * gate/up g of gate's, o_proj its own; every code and block scale follows the shared g (checked as
 * compressed-tensors computes them), and the member whose own A is the group's decodes to the
 * native layout's `quant dequantize` bit for bit. The native layout keeps each tensor's own g. */
START_TEST(ctensors_nvfp4_fused_groups_across_shards)
{
    enum { R = 32, C = 32, N = 6 };
    static const fused_t t[N] = {
        {"model.layers.0.self_attn.q_proj.weight", 0, 1.0f},
        {"model.layers.0.mlp.gate_proj.weight", 0, 5.0f},
        {"model.layers.0.self_attn.k_proj.weight", 1, 3.0f},
        {"model.layers.0.self_attn.v_proj.weight", 1, 0.5f},
        {"model.layers.0.mlp.up_proj.weight", 1, 0.25f},
        {"model.layers.0.self_attn.o_proj.weight", 1, 2.0f},
    };
    static const float group_a[N] = {3.0f, 5.0f, 3.0f, 3.0f, 5.0f, 2.0f};
    static float x[N][R * C];
    for (int i = 0; i < N; i++) {
        ck_fill(x[i], R * C, 40 + (uint64_t)i, 0.1f);
        for (int k = 0; k < R * C; k++)
            x[i][k] = fmaxf(fminf(x[i][k], t[i].amax * 0.5f), -t[i].amax * 0.5f);
        x[i][7 * C + 3] = -t[i].amax;
    }
    char *tmp = ck_tmpdir(), *in = kit_join(tmp, "in"), *nat = kit_join(tmp, "n"),
         *ctd = kit_join(tmp, "c"), *deq = kit_join(tmp, "d");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    static const char *const shards[2] = {"model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors"};
    for (int s = 0; s < 2; s++) {
        kit_st_tensor g[N];
        size_t n = 0;
        for (int i = 0; i < N; i++)
            if (t[i].shard == s)
                g[n++] = (kit_st_tensor){t[i].name, "F32", 2, {R, C}, x[i], sizeof x[i]};
        char *p = kit_join(in, shards[s]);
        ck_gen_file(p, g, n, NULL);
        free(p);
    }
    static const char rules[] = "[{\"module_path\": \".*_proj\", \"weight_qtype\": \"nvfp4\"}]";
    quant_ck_error err;
    both_layouts(rules, in, nat, ctd, deq);
    float *dec = malloc(R * C * sizeof *dec);
    for (int i = 0; i < N; i++) {
        char *pc = kit_join(ctd, shards[t[i].shard]), *pn = kit_join(nat, shards[t[i].shard]),
             *pd = kit_join(deq, shards[t[i].shard]);
        quant_st_file *fc = NULL, *fn = NULL, *fd = NULL;
        ck_assert(quant_st_open(pc, &fc, &err) == QUANT_CK_OK);
        ck_assert(quant_st_open(pn, &fn, &err) == QUANT_CK_OK);
        ck_assert(quant_st_open(pd, &fd, &err) == QUANT_CK_OK);
        char module[64];
        snprintf(module, sizeof module, "%.*s", (int)strlen(t[i].name) - 7, t[i].name);
        float g = 2688.0f * (1.0f / group_a[i]); /* generate_gparam of the group's max */
        check_nv_ct(fc, module, x[i], R, C, g, dec);
        if (group_a[i] == t[i].amax) same_as_native(fc, fn, fd, module, dec, R, C);
        json_t *meta = json_loads(quant_st_meta(fn, "quantization"), 0, NULL);
        json_t *e = json_object_get(json_object_get(meta, "tensors"), t[i].name);
        ck_assert_float_eq((float)json_number_value(json_object_get(e, "global_scale")),
                           2688.0f * (1.0f / t[i].amax));
        json_decref(meta);
        quant_st_close(fc);
        quant_st_close(fn);
        quant_st_close(fd);
        free(pc);
        free(pn);
        free(pd);
    }
    check_nv_config(ctd, N);
    free(dec);
    kit_rmtree(tmp);
    free(tmp);
    free(in);
    free(nat);
    free(ctd);
    free(deq);
}
END_TEST

/* The other fused layers of vLLM's packed_modules_mapping: one expert's w1 + w3 (Mixtral) and
 * gate_proj + up_proj (FusedMoE's w13; w2 alone), DeepSeek's q_a_proj + kv_a_proj_with_mqa; a
 * '/'-separated path groups the same way; each expert is its own group. enc/attn has q_proj and
 * v_proj but no k_proj: given as one file, which may be one shard of several, that group is
 * refused (its k_proj could lie in another shard); given as the checkpoint directory it is what
 * there is, and q and v share their g. */
START_TEST(ctensors_nvfp4_fused_moe_and_mla)
{
    enum { R = 4, C = 32, N = 11 };
    static const fused_t t[N] = {
        {"model.layers.0.block_sparse_moe.experts.0.w1.weight", 0, 1.0f},
        {"model.layers.0.block_sparse_moe.experts.0.w3.weight", 0, 4.0f},
        {"model.layers.0.block_sparse_moe.experts.0.w2.weight", 0, 2.0f},
        {"model.layers.0.block_sparse_moe.experts.1.w1.weight", 0, 0.5f},
        {"model.layers.0.block_sparse_moe.experts.1.w3.weight", 0, 0.25f},
        {"model.layers.1.mlp.experts.7.gate_proj.weight", 0, 0.125f},
        {"model.layers.1.mlp.experts.7.up_proj.weight", 0, 8.0f},
        {"model.layers.1.self_attn.q_a_proj.weight", 0, 3.0f},
        {"model.layers.1.self_attn.kv_a_proj_with_mqa.weight", 0, 6.0f},
        {"enc/attn/q_proj.weight", 0, 1.5f},
        {"enc/attn/v_proj.weight", 0, 2.5f},
    };
    static const float group_a[N] = {4.0f, 4.0f, 2.0f, 0.5f, 0.5f, 8.0f,
                                     8.0f, 6.0f, 6.0f, 2.5f, 2.5f};
    static float x[N][R * C];
    kit_st_tensor g[N];
    for (int i = 0; i < N; i++) {
        ck_fill(x[i], R * C, 60 + (uint64_t)i, 0.05f);
        for (int k = 0; k < R * C; k++)
            x[i][k] = fmaxf(fminf(x[i][k], t[i].amax * 0.5f), -t[i].amax * 0.5f);
        x[i][2 * C + 9] = t[i].amax;
        g[i] = (kit_st_tensor){t[i].name, "F32", 2, {R, C}, x[i], sizeof x[i]};
    }
    char *tmp = ck_tmpdir(), *dir = kit_join(tmp, "in"), *out = kit_join(tmp, "o");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    char *in = kit_join(dir, "model.safetensors"), *shard = kit_join(out, "model.safetensors");
    ck_gen_file(in, g, N, NULL);
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.layout = QUANT_LAYOUT_CTENSORS;
    quant_ck_error err;
    static const char rules[] = "[{\"weight_qtype\": \"nvfp4\"}]";
    ck_assert_int_eq(ck_quantize(rules, in, out, &o, NULL, &err), QUANT_CK_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "tensor 'enc/attn/q_proj.weight' (rule 0)") &&
                      strstr(err.message, "k_proj is not in this file") &&
                      strstr(err.message, "quantize the checkpoint directory"),
                  "%s", err.message);
    ck_assert_int_lt(access(out, F_OK), 0);
    ck_assert_msg(ck_quantize(rules, dir, out, &o, NULL, &err) == QUANT_CK_OK, "%s", err.message);
    quant_st_file *f = NULL;
    ck_assert(quant_st_open(shard, &f, &err) == QUANT_CK_OK);
    float dec[R * C];
    for (int i = 0; i < N; i++) {
        char module[96];
        snprintf(module, sizeof module, "%.*s", (int)strlen(t[i].name) - 7, t[i].name);
        check_nv_ct(f, module, x[i], R, C, 2688.0f * (1.0f / group_a[i]), dec);
    }
    quant_st_close(f);
    kit_rmtree(tmp);
    free(tmp);
    free(dir);
    free(in);
    free(shard);
    free(out);
}
END_TEST

/* The stories260K fixture (two shards): every q/k/v/o/gate/up weight nvfp4 in compressed-tensors;
 * per layer q, k and v carry one identical weight_global_scale, that of the largest max |x| of the
 * three (read from the input here), and gate and up likewise; o its own. Every code and scale
 * follows that g as compressed-tensors computes them. */
START_TEST(ctensors_nvfp4_fixture_groups)
{
    char *tmp = ck_tmpdir(), *out = kit_join(tmp, "c"),
         *in = kit_join(ck_data_dir(), "stories260K-bf16-sharded");
    static const char rules[] =
        "[{\"module_path\": \".*(q|k|v|o|gate|up)_proj\", \"weight_qtype\": \"nvfp4\", "
        "\"weight_calibration_method\": \"absmax\"}]";
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.layout = QUANT_LAYOUT_CTENSORS;
    quant_ck_error err;
    ck_assert_msg(ck_quantize(rules, in, out, &o, NULL, &err) == QUANT_CK_OK, "%s", err.message);
    static const char *const shards[2] = {"model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors"};
    static const char *const members[6] = {"self_attn.q_proj", "self_attn.k_proj",
                                           "self_attn.v_proj", "self_attn.o_proj",
                                           "mlp.gate_proj",    "mlp.up_proj"};
    static const int group[6] = {0, 0, 0, 1, 2, 2};
    int checked = 0;
    for (int s = 0; s < 2; s++) {
        char *pi = kit_join(in, shards[s]), *po = kit_join(out, shards[s]);
        quant_st_file *fi = NULL, *fo = NULL;
        ck_assert(quant_st_open(pi, &fi, &err) == QUANT_CK_OK);
        ck_assert(quant_st_open(po, &fo, &err) == QUANT_CK_OK);
        for (int layer = 0; layer < 5; layer++) {
            char module[6][96];
            float *x[6] = {0}, amax[3] = {0};
            int64_t rows[6] = {0}, cols[6] = {0};
            snprintf(module[0], sizeof module[0], "model.layers.%d.%s", layer, members[0]);
            char w0[128];
            snprintf(w0, sizeof w0, "%s.weight", module[0]);
            if (!quant_st_find(fi, w0)) continue; /* the layer lies in the other shard */
            for (int m = 0; m < 6; m++) {
                snprintf(module[m], sizeof module[m], "model.layers.%d.%s", layer, members[m]);
                part p = read_part(fi, module[m], ".weight");
                rows[m] = p.t->shape[0], cols[m] = p.t->shape[1];
                x[m] = malloc((size_t)(rows[m] * cols[m]) * sizeof(float));
                for (int64_t k = 0; k < rows[m] * cols[m]; k++) {
                    x[m][k] = quant_bf16_to_f32(((const uint16_t *)p.raw)[k]);
                    amax[group[m]] = fmaxf(amax[group[m]], fabsf(x[m][k]));
                }
                free(p.raw);
            }
            for (int m = 0; m < 6; m++) {
                float *dec = malloc((size_t)(rows[m] * cols[m]) * sizeof *dec);
                check_nv_ct(fo, module[m], x[m], rows[m], cols[m],
                            2688.0f * (1.0f / amax[group[m]]), dec);
                free(dec);
                free(x[m]);
                checked++;
            }
        }
        quant_st_close(fi);
        quant_st_close(fo);
        free(pi);
        free(po);
    }
    ck_assert_int_eq(checked, 30);
    check_nv_config(out, 30);
    kit_rmtree(tmp);
    free(tmp);
    free(out);
    free(in);
}
END_TEST

Suite *suite_microscaling_ckpt(void)
{
    Suite *s = suite_create("microscaling");
    TCase *tc = tcase_create("spec2b");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rules_refuse_wrong_tiles_methods_scale_dtypes);
    tcase_add_test(tc, plan_time_refusals);
    tcase_add_test(tc, fixture_quantize_then_dequantize);
    tcase_add_test(tc, nvfp4_two_pass_equals_one_pass);
    tcase_add_test(tc, ctensors_mx_equals_native);
    tcase_add_test(tc, ctensors_nvfp4_scales_and_round_trip);
    tcase_add_test(tc, ctensors_nvfp4_fused_groups_across_shards);
    tcase_add_test(tc, ctensors_nvfp4_fixture_groups);
    tcase_add_test(tc, ctensors_nvfp4_fused_moe_and_mla);
    suite_add_tcase(s, tc);
    return s;
}
