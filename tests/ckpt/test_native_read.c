/* test_native_read.c -- quant_native_read(), the library's one reader of the native layout:
 * the parts, shapes and quant_how it recovers from a file the pipeline wrote (per-channel,
 * tiled and asymmetric tensors beside a copied one), a file without `quantization` metadata,
 * and every malformed entry refused with an error naming the file and the tensor.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckutil.h"
#include "quant_native.h"

static const quant_native_tensor *entry(const quant_native *n, const char *name)
{
    for (size_t i = 0; i < n->n; i++)
        if (strcmp(n->tensors[i].name, name) == 0) return &n->tensors[i];
    return NULL;
}

START_TEST(test_reads_pipeline_output)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "q");
    static float a[16 * 64], b[16 * 64], c[8];
    ck_fill(a, 16 * 64, 1, 1.0f);
    ck_fill(b, 16 * 64, 2, 1.0f);
    ck_fill(c, 8, 3, 1.0f);
    kit_st_tensor t[] = {{"a.weight", "F32", 2, {16, 64}, a, sizeof a},
                         {"b.weight", "F32", 2, {16, 64}, b, sizeof b},
                         {"c.bias", "F32", 1, {8}, c, sizeof c}};
    ck_gen_file(in, t, 3, NULL);
    quant_ck_error err;
    quant_ck_status st =
        ck_quantize("[{\"module_path\":\"a\",\"weight_qtype\":\"int8\"},"
                    " {\"module_path\":\"b\",\"weight_qtype\":\"int4\",\"tile_size\":32,"
                    "  \"weight_calibration_method\":\"minmax\"}]",
                    in, out, NULL, NULL, &err);
    ck_assert_msg(st == QUANT_CK_OK, "%s", err.message);
    quant_st_file *f;
    ck_assert_int_eq(quant_st_open(out, &f, &err), QUANT_CK_OK);
    quant_native n;
    ck_assert_msg(quant_native_read(f, &n, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert(n.has_metadata);
    ck_assert_uint_eq(n.n, 2);
    const quant_native_tensor *ea = entry(&n, "a.weight"), *eb = entry(&n, "b.weight");
    ck_assert_ptr_nonnull(ea);
    ck_assert_ptr_nonnull(eb);
    /* a: int8 per-channel (the output axis 0 channelwise, the input axis reduced) */
    ck_assert_str_eq(ea->orig_dtype, "F32");
    ck_assert_int_eq(ea->rank, 2);
    ck_assert_int_eq(ea->shape[0], 16);
    ck_assert_int_eq(ea->shape[1], 64);
    ck_assert_int_eq(ea->how.qtype, QUANT_QTYPE_INT8);
    ck_assert_int_eq(ea->how.n_channel_axes, 1);
    ck_assert_int_eq(ea->how.channel_axes[0], 0);
    ck_assert_int_eq(ea->how.n_tiles, 0);
    ck_assert_ptr_null(ea->zero_point);
    ck_assert(!ea->has_global_scale);
    /* b: int4 packed, tiles of 32 on axis 1, with a zero point */
    ck_assert_int_eq(eb->how.qtype, QUANT_QTYPE_INT4);
    ck_assert(eb->how.pack);
    ck_assert_int_eq(eb->how.n_tiles, 1);
    ck_assert_int_eq(eb->how.tiles[0].axis, 1);
    ck_assert_int_eq(eb->how.tiles[0].size, 32);
    ck_assert_ptr_nonnull(eb->zero_point);
    /* every part has its owner; the copied tensor has none */
    ck_assert_ptr_eq(quant_native_owner(&n, ea->qvalue), ea);
    ck_assert_ptr_eq(quant_native_owner(&n, ea->scale), ea);
    ck_assert_ptr_eq(quant_native_owner(&n, eb->zero_point), eb);
    ck_assert_ptr_null(quant_native_owner(&n, quant_st_find(f, "c.bias")));
    ck_assert_ptr_null(quant_native_owner(&n, NULL));
    quant_native_free(&n);
    quant_native_free(&n); /* freed twice: nothing left to free */
    quant_st_close(f);
    /* the input has no `quantization` metadata: no quantized tensor, every tensor plain */
    ck_assert_int_eq(quant_st_open(in, &f, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_native_read(f, &n, &err), QUANT_CK_OK);
    ck_assert(!n.has_metadata);
    ck_assert_uint_eq(n.n, 0);
    ck_assert_ptr_null(quant_native_owner(&n, &f->tensors[0]));
    quant_native_free(&n);
    quant_st_close(f);
    kit_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

/* Files of one int8 per-channel tensor w [4, 8] whose parts or metadata are wrong. */
typedef struct bad_case {
    const char *scale_dtype, *zp_dtype; /* zp_dtype NULL: no zero point */
    int64_t scale_rows;                 /* the scale's shape is [scale_rows, 1] */
    const char *meta;                   /* the `quantization` value */
    const char *want;                   /* in the message */
} bad_case;

#define ENTRY(x) "{\"format\":\"quantd.native/1\",\"tensors\":{\"w\":" x "}}"
#define GOOD     "{\"qtype\":\"int8\",\"orig_dtype\":\"F32\",\"orig_shape\":[4,8]}"

static const bad_case bad_cases[] = {
    {"F32", NULL, 4, "not json", "bad `quantization` metadata"},
    {"F32", NULL, 4, "{\"tensors\":[]}", "bad `quantization` metadata"},
    {"F32", NULL, 4, ENTRY("7"), "its entry is missing"},
    {"F32", NULL, 4, ENTRY("{\"qtype\":\"int9\",\"orig_shape\":[4,8]}"), "bad qtype"},
    {"F32", NULL, 4, ENTRY("{\"qtype\":\"int8\",\"orig_shape\":\"4x8\"}"), "orig_shape must be"},
    {"F32", NULL, 4, ENTRY("{\"qtype\":\"int8\",\"orig_shape\":[4,-8]}"), "orig_shape[1]"},
    {"F32", NULL, 4, ENTRY("{\"qtype\":\"int8\",\"orig_shape\":[4,9]}"), "do not match"},
    {"F32", NULL, 3, ENTRY(GOOD), "does not fit shape on axis 0"},
    {"I8", NULL, 4, ENTRY(GOOD), "scale dtype I8 is not a float"},
    {"F32", "F32", 4, ENTRY(GOOD), "zero_point must be I8, U8 or I16"},
};

static void write_bad(const char *path, const bad_case *c)
{
    static int8_t q[32];
    static float s[4];
    static int8_t z[16]; /* 4 I8, or 4 F32 for the F32 zero-point case */
    char meta[512];
    snprintf(meta, sizeof meta, "{\"quantization\":\"");
    size_t len = strlen(meta);
    for (const char *p = c->meta; *p && len + 3 < sizeof meta; p++) {
        if (*p == '"' || *p == '\\') meta[len++] = '\\';
        meta[len++] = *p;
    }
    snprintf(meta + len, sizeof meta - len, "\"}");
    kit_st_tensor t[3] = {{"w.qvalue", "I8", 2, {4, 8}, q, sizeof q},
                          {"w.scale",
                           c->scale_dtype,
                           2,
                           {c->scale_rows, 1},
                           s,
                           (size_t)c->scale_rows * (strcmp(c->scale_dtype, "I8") ? 4 : 1)},
                          {"w.zero_point", c->zp_dtype, 2, {4, 1}, z, 4}};
    if (c->zp_dtype && strcmp(c->zp_dtype, "F32") == 0) t[2].nbytes = 16;
    ck_gen_file(path, t, c->zp_dtype ? 3 : 2, meta);
}

/* A tensor whose name is 5000 bytes long is read back from the native output (its parts'
 * names are longer than any fixed buffer). */
START_TEST(test_reads_long_name)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "q");
    char *name = malloc(5001);
    memset(name, 'x', 4990);
    strcpy(name + 4990, "ab.weight");
    static float w[4 * 8];
    ck_fill(w, 32, 4, 1.0f);
    kit_st_tensor t[] = {{name, "F32", 2, {4, 8}, w, sizeof w}};
    ck_gen_file(in, t, 1, NULL);
    quant_ck_error err;
    ck_assert_msg(ck_quantize("[{\"weight_qtype\":\"int8\"}]", in, out, NULL, NULL, &err) ==
                      QUANT_CK_OK,
                  "%s", err.message);
    quant_st_file *f;
    ck_assert_int_eq(quant_st_open(out, &f, &err), QUANT_CK_OK);
    quant_native n;
    ck_assert_msg(quant_native_read(f, &n, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_uint_eq(n.n, 1);
    ck_assert_str_eq(n.tensors[0].name, name);
    quant_native_free(&n);
    quant_st_close(f);
    free(name);
    kit_rmtree(dir);
    free(dir);
    free(in);
    free(out);
}
END_TEST

START_TEST(test_refuses_malformed)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "bad.safetensors");
    for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
        write_bad(path, &bad_cases[i]);
        quant_st_file *f;
        quant_ck_error err;
        ck_assert_int_eq(quant_st_open(path, &f, &err), QUANT_CK_OK);
        quant_native n;
        quant_ck_status st = quant_native_read(f, &n, &err);
        ck_assert_msg(st == QUANT_CK_ERR_FORMAT, "case %zu: status %d", i, (int)st);
        ck_assert_msg(strstr(err.message, bad_cases[i].want) &&
                          strstr(err.message, "bad.safetensors"),
                      "case %zu: %s", i, err.message);
        ck_assert_ptr_null(n.tensors); /* nothing to free after a failure */
        quant_st_close(f);
    }
    /* and with the parts right, the same file reads */
    bad_case good = {"F32", "I8", 4, ENTRY(GOOD), NULL};
    write_bad(path, &good);
    quant_st_file *f;
    quant_ck_error err;
    ck_assert_int_eq(quant_st_open(path, &f, &err), QUANT_CK_OK);
    quant_native n;
    ck_assert_msg(quant_native_read(f, &n, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_uint_eq(n.n, 1);
    ck_assert_ptr_nonnull(n.tensors[0].zero_point);
    quant_native_free(&n);
    quant_st_close(f);
    kit_rmtree(dir);
    free(dir);
    free(path);
}
END_TEST

Suite *suite_native_read(void)
{
    Suite *s = suite_create("native_read");
    TCase *tc = tcase_create("native_read");
    tcase_add_test(tc, test_reads_pipeline_output);
    tcase_add_test(tc, test_refuses_malformed);
    tcase_add_test(tc, test_reads_long_name);
    suite_add_tcase(s, tc);
    return s;
}
