/* test_gguf.c -- GGUF files: fixtures built byte by byte here (a builder of headers, pairs,
 * tensor infos and data); the reader on valid files (pairs of every value type and arrays of
 * each, typed accessors, tensors of F32/F16/BF16 read by range and by rows) and on every kind of
 * malformed file (each must fail as a format error naming the file, the byte offset and the
 * rule); the writer (pairs copied raw or set and replaced, tensors streamed in pieces or written
 * by pwrite, read back equal; its refusals; nothing left on disk after a failure; its SHA-256
 * against sha256sum); quant_gguf_dequantize_path; `quant inspect` / `quant dequantize` on a
 * GGUF file; and, when the file is there ($QUANT_STORIES_GGUF), a real model's GGUF (llama.cpp's
 * stories15M, F32) read and rewritten byte for byte.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ckutil.h"
#include "quant_gguf.h"

/* A real GGUF file (llama.cpp's converter's output for the stories15M model, all F32), used
 * only when present: $QUANT_STORIES_GGUF, else this path beside the checkout. */
#define STORIES_DEFAULT "../shared/data/stories15M/stories15M-f32.gguf"
#define NAME            "t.gguf"

/* ---- a byte builder ---------------------------------------------------------------------------
 */

typedef struct gb {
    unsigned char *p;
    size_t n, cap;
} gb;

static void gb_put(gb *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void gb_le(gb *b, uint64_t v, int n)
{
    unsigned char t[8];
    for (int i = 0; i < n; i++) t[i] = (unsigned char)(v >> (8 * i));
    gb_put(b, t, (size_t)n);
}

static void gb_str(gb *b, const char *s)
{
    gb_le(b, strlen(s), 8);
    gb_put(b, s, strlen(s));
}

static void gb_hdr(gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gb_put(b, "GGUF", 4);
    gb_le(b, version, 4);
    gb_le(b, n_tensors, 8);
    gb_le(b, n_kv, 8);
}

static void gb_kv_u32(gb *b, const char *key, uint32_t v)
{
    gb_str(b, key);
    gb_le(b, QUANT_GGUF_U32, 4);
    gb_le(b, v, 4);
}

static void gb_kv_str(gb *b, const char *key, const char *v)
{
    gb_str(b, key);
    gb_le(b, QUANT_GGUF_STRING, 4);
    gb_str(b, v);
}

static void gb_ti(gb *b, const char *name, uint32_t n_dims, const int64_t *ne, int32_t type,
                  uint64_t offset)
{
    gb_str(b, name);
    gb_le(b, n_dims, 4);
    for (uint32_t i = 0; i < n_dims; i++) gb_le(b, (uint64_t)ne[i], 8);
    gb_le(b, (uint32_t)type, 4);
    gb_le(b, offset, 8);
}

static void gb_pad(gb *b, size_t align)
{
    static const unsigned char zeros[256];
    gb_put(b, zeros, (align - b->n % align) % align);
}

/* n data bytes i * 7 + 1. */
static void gb_data(gb *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)(i * 7 + 1);
        gb_put(b, &c, 1);
    }
}

/* A valid file: one pair, tensors "a" (F32 [8]) and "b" (F16 ne {4, 2}). */
static void gb_valid(gb *b)
{
    gb_hdr(b, 3, 2, 1);
    gb_kv_str(b, "general.architecture", "llama");
    gb_ti(b, "a", 1, (int64_t[]){8}, QUANT_GGML_F32, 0);
    gb_ti(b, "b", 2, (int64_t[]){4, 2}, QUANT_GGML_F16, 32);
    gb_pad(b, 32);
    gb_data(b, 32);
    gb_data(b, 16);
    gb_pad(b, 32);
}

/* ---- helpers ------------------------------------------------------------------------------- */

static quant_gguf_file *open_buf(const gb *b)
{
    quant_gguf_file *f = NULL;
    quant_ck_error err;
    quant_ck_status st = quant_gguf_open_buffer(b->p, b->n, NAME, &f, &err);
    ck_assert_msg(st == QUANT_CK_OK, "%s", err.message);
    return f;
}

/* The bytes must be refused as a format error naming the file and a byte offset, with `want`
 * in the message: from memory and from a file on disk. */
static void expect_bad_n(const void *p, size_t n, const char *want)
{
    quant_gguf_file *f = (quant_gguf_file *)1;
    quant_ck_error err;
    quant_ck_status st = quant_gguf_open_buffer(n ? p : "", n, NAME, &f, &err);
    ck_assert_msg(st == QUANT_CK_ERR_FORMAT, "accepted or wrong status %d; want '%s'", st, want);
    ck_assert_ptr_null(f);
    ck_assert_msg(strncmp(err.message, NAME ": byte ", strlen(NAME ": byte ")) == 0, "%s",
                  err.message);
    ck_assert_msg(strstr(err.message, want), "'%s' lacks '%s'", err.message, want);

    char *dir = ck_tmpdir(), *path = kit_join(dir, NAME);
    ck_write_file(path, p, n);
    st = quant_gguf_open(path, &f, &err);
    ck_assert_int_eq(st, QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strncmp(err.message, path, strlen(path)) == 0 && strstr(err.message, want), "%s",
                  err.message);
    kit_rmtree(dir);
    free(path);
    free(dir);
}

static void expect_bad(gb *b, const char *want)
{
    expect_bad_n(b->p, b->n, want);
    free(b->p);
    *b = (gb){0};
}

/* ---- valid files --------------------------------------------------------------------------- */

START_TEST(test_reads_valid)
{
    gb b = {0};
    gb_valid(&b);
    quant_gguf_file *f = open_buf(&b);
    ck_assert_int_eq(f->version, 3);
    ck_assert_int_eq(f->alignment, 32);
    ck_assert_uint_eq(f->n_kv, 1);
    ck_assert_uint_eq(f->n_tensors, 2);
    ck_assert_uint_eq(f->data_start % 32, 0);
    ck_assert_uint_eq(f->data_size, 64);
    const char *arch = NULL;
    quant_ck_error err;
    ck_assert_int_eq(quant_gguf_get_string(f, "general.architecture", &arch, &err), QUANT_CK_OK);
    ck_assert_str_eq(arch, "llama");
    uint32_t u;
    ck_assert_int_eq(quant_gguf_get_u32(f, "general.architecture", &u, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "key 'general.architecture' is string, not u32"), "%s",
                  err.message);
    ck_assert_int_eq(quant_gguf_get_u32(f, "llama.block_count", &u, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "is missing"), "%s", err.message);

    const quant_gguf_tensor *t = quant_gguf_find_tensor(f, "b");
    ck_assert_ptr_eq(t, &f->tensors[1]);
    ck_assert_ptr_null(quant_gguf_find_tensor(f, "c"));
    ck_assert_int_eq(t->type, QUANT_GGML_F16);
    ck_assert_int_eq(t->nrows, 2);
    ck_assert_uint_eq(t->row_bytes, 8);
    ck_assert_uint_eq(t->nbytes, 16);
    int64_t shape[4];
    ck_assert_int_eq(quant_gguf_shape(t, shape), 2);
    ck_assert(shape[0] == 2 && shape[1] == 4); /* ne reversed */
    unsigned char buf[16];
    ck_assert_int_eq(quant_gguf_read_rows(f, t, 1, 1, buf, &err), QUANT_CK_OK);
    for (int i = 0; i < 8; i++) ck_assert_uint_eq(buf[i], (unsigned char)((8 + i) * 7 + 1));
    ck_assert_int_eq(quant_gguf_read(f, t, 8, buf, 9, &err), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_gguf_read_rows(f, t, 1, 2, buf, &err), QUANT_CK_ERR_ARG);
    quant_gguf_close(f);
    free(b.p);
}
END_TEST

/* One scalar pair of every fixed-size type, a string, and an array of every element type. */
static void gb_every_type(gb *b, uint64_t n_tensors)
{
    static const char *const strs[] = {"", "x", "tokens"};
    gb_hdr(b, 2, n_tensors, 2 * 12 + 1);
    char key[32];
    for (int t = 0; t < QUANT_GGUF_TYPE_COUNT; t++) {
        if (t == QUANT_GGUF_ARRAY) continue;
        snprintf(key, sizeof key, "scalar.%s", quant_gguf_type_name(t));
        gb_str(b, key);
        gb_le(b, (uint32_t)t, 4);
        if (t == QUANT_GGUF_STRING)
            gb_str(b, "hello");
        else
            gb_le(b, t == QUANT_GGUF_F32 ? 0x3fc00000u /* 1.5f */ : (uint64_t)-3,
                  (int)quant_gguf_type_size(t));
        snprintf(key, sizeof key, "array.%s", quant_gguf_type_name(t));
        gb_str(b, key);
        gb_le(b, QUANT_GGUF_ARRAY, 4);
        gb_le(b, (uint32_t)t, 4);
        gb_le(b, 3, 8);
        for (int i = 0; i < 3; i++) {
            if (t == QUANT_GGUF_STRING)
                gb_str(b, strs[i]);
            else
                gb_le(b, (uint64_t)i, (int)quant_gguf_type_size(t));
        }
    }
    gb_kv_u32(b, "general.alignment", 64);
}

START_TEST(test_every_kv_type)
{
    gb b = {0};
    gb_every_type(&b, 0);
    quant_gguf_file *f = open_buf(&b);
    quant_ck_error err;
    ck_assert_int_eq(f->version, 2);
    ck_assert_int_eq(f->alignment, 64);
    ck_assert_uint_eq(f->n_kv, 25);
    int64_t v;
    double d;
    const quant_gguf_kv *kv = quant_gguf_find_kv(f, "scalar.i8");
    ck_assert(quant_gguf_kv_int(kv, 0, &v) && v == -3);
    kv = quant_gguf_find_kv(f, "scalar.i64");
    ck_assert(quant_gguf_kv_int(kv, 0, &v) && v == -3);
    kv = quant_gguf_find_kv(f, "scalar.u16");
    ck_assert(quant_gguf_kv_int(kv, 0, &v) && v == 65533);
    kv = quant_gguf_find_kv(f, "scalar.u64"); /* 2^64 - 3 does not fit int64 */
    ck_assert(!quant_gguf_kv_int(kv, 0, &v));
    uint64_t u64;
    ck_assert_int_eq(quant_gguf_get_u64(f, "scalar.u64", &u64, &err), QUANT_CK_OK);
    ck_assert(u64 == (uint64_t)-3);
    float f32;
    ck_assert_int_eq(quant_gguf_get_f32(f, "scalar.f32", &f32, &err), QUANT_CK_OK);
    ck_assert(f32 == 1.5f);
    kv = quant_gguf_find_kv(f, "scalar.f64");
    ck_assert(quant_gguf_kv_float(kv, 0, &d) && isnan(d)); /* all ones */
    bool yes;
    ck_assert_int_eq(quant_gguf_get_bool(f, "scalar.bool", &yes, &err), QUANT_CK_OK);
    ck_assert(yes);
    int32_t i32;
    ck_assert_int_eq(quant_gguf_get_i32(f, "scalar.i32", &i32, &err), QUANT_CK_OK);
    ck_assert_int_eq(i32, -3);
    const char *s;
    ck_assert_int_eq(quant_gguf_get_string(f, "scalar.string", &s, &err), QUANT_CK_OK);
    ck_assert_str_eq(s, "hello");

    ck_assert_int_eq(quant_gguf_get_array(f, "array.string", QUANT_GGUF_STRING, &kv, &err),
                     QUANT_CK_OK);
    ck_assert_uint_eq(kv->n, 3);
    size_t cursor = 0;
    uint64_t len;
    ck_assert(quant_gguf_kv_next_string(kv, &cursor, &s, &len) && len == 0);
    ck_assert(quant_gguf_kv_next_string(kv, &cursor, &s, &len) && len == 1 && s[0] == 'x');
    ck_assert(quant_gguf_kv_next_string(kv, &cursor, &s, &len) && len == 6);
    ck_assert(memcmp(s, "tokens", 6) == 0);
    ck_assert(!quant_gguf_kv_next_string(kv, &cursor, &s, &len));
    ck_assert_int_eq(quant_gguf_get_array(f, "array.f32", QUANT_GGUF_I32, &kv, &err),
                     QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "an array of f32, not of i32"), "%s", err.message);
    ck_assert_int_eq(quant_gguf_get_array(f, "array.f64", QUANT_GGUF_TYPE_COUNT, &kv, &err),
                     QUANT_CK_OK);
    ck_assert(quant_gguf_kv_float(kv, 2, &d) && d > 0 && d < 1e-322); /* bits 2: subnormal */
    ck_assert(!quant_gguf_kv_float(kv, 3, &d));
    kv = quant_gguf_find_kv(f, "array.i16");
    ck_assert(quant_gguf_kv_int(kv, 2, &v) && v == 2);
    uint32_t u;
    ck_assert_int_eq(quant_gguf_get_u32_layer(f, "array.u32", 2, &u, &err), QUANT_CK_OK);
    ck_assert_uint_eq(u, 2);
    ck_assert_int_eq(quant_gguf_get_u32_layer(f, "array.u32", 3, &u, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_int_eq(quant_gguf_get_u32_layer(f, "general.alignment", 7, &u, &err), QUANT_CK_OK);
    ck_assert_uint_eq(u, 64);
    quant_gguf_close(f);
    free(b.p);
}
END_TEST

/* ---- malformed files ----------------------------------------------------------------------- */

START_TEST(test_bad_header)
{
    gb b = {0};
    gb_put(&b, "GGML", 4);
    gb_le(&b, 3, 4);
    gb_le(&b, 0, 8);
    gb_le(&b, 0, 8);
    expect_bad(&b, "bad magic 'GGML'");
    gb_hdr(&b, 1, 0, 0);
    expect_bad(&b, "version 1 is not supported");
    gb_hdr(&b, 4, 0, 0);
    expect_bad(&b, "version 4 is not supported");
    gb_hdr(&b, 0, 0, 0);
    expect_bad(&b, "version 0 is not supported");
    /* a big-endian writer's header: every field byte-swapped */
    gb_put(&b, "GGUF", 4);
    gb_le(&b, 0x03000000u, 4);
    gb_le(&b, 0x0100000000000000u, 8);
    gb_le(&b, 0x0100000000000000u, 8);
    expect_bad(&b, "looks byte-swapped");
    gb_hdr(&b, 3, 0, 0);
    b.n = 10;
    expect_bad(&b, "truncated: tensor count needs 8 bytes but the file ends at byte 10");
    gb_hdr(&b, 3, 0, 0);
    b.n = 6;
    expect_bad(&b, "truncated: the version needs 4 bytes");
    expect_bad_n("GG", 2, "truncated: the magic");
    gb_hdr(&b, 3, (uint64_t)1 << 40, 0);
    expect_bad(&b, "byte 24: tensor #0: truncated: the name needs 8 bytes"); /* a lying count */
    gb_hdr(&b, 3, 0, (uint64_t)-1);
    expect_bad(&b, "key-value count -1 is negative");
}
END_TEST

START_TEST(test_bad_kv)
{
    gb b = {0};
    gb_valid(&b);
    b.n = 24 + 8 + 20 + 2; /* inside the first pair's value type */
    expect_bad(&b, "key 'general.architecture': truncated: the value type needs 4 bytes");
    gb_valid(&b);
    b.n = 24 + 8 + 20 + 4 + 8 + 2; /* inside the string value */
    expect_bad(&b, "key 'general.architecture': the string length 5 runs past the end");
    gb_hdr(&b, 3, 0, 1);
    gb_le(&b, 1000, 8);
    gb_put(&b, "abc", 3);
    expect_bad(&b, "key #0: the key length 1000 runs past the end of the file");
    gb_hdr(&b, 3, 0, 1);
    gb_le(&b, (uint64_t)1 << 31, 8);
    expect_bad(&b, "exceeds the 1073741824-byte limit");
    gb_hdr(&b, 3, 0, 1);
    gb_kv_str(&b, "", "x");
    expect_bad(&b, "the key is empty");
    gb_hdr(&b, 3, 0, 1);
    gb_le(&b, 3, 8);
    gb_put(&b, "a\0b", 3);
    gb_le(&b, QUANT_GGUF_U8, 4);
    gb_le(&b, 0, 1);
    expect_bad(&b, "the key holds a NUL byte");
    gb_hdr(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_le(&b, 13, 4);
    gb_le(&b, 0, 8);
    expect_bad(&b, "key 'k': unknown value type 13");
    gb_hdr(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_le(&b, QUANT_GGUF_ARRAY, 4);
    gb_le(&b, QUANT_GGUF_ARRAY, 4);
    gb_le(&b, 1, 8);
    gb_le(&b, QUANT_GGUF_U8, 4);
    gb_le(&b, 1, 8);
    gb_le(&b, 0, 1);
    expect_bad(&b, "key 'k': an array of arrays (nested arrays are not supported)");
    gb_hdr(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_le(&b, QUANT_GGUF_ARRAY, 4);
    gb_le(&b, QUANT_GGUF_U32, 4);
    gb_le(&b, 1000, 8);
    gb_le(&b, 0, 8);
    expect_bad(&b, "key 'k': array of 1000 u32 runs past the end of the file");
    gb_hdr(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_le(&b, QUANT_GGUF_ARRAY, 4);
    gb_le(&b, QUANT_GGUF_STRING, 4);
    gb_le(&b, 2, 8);
    gb_str(&b, "ok");
    gb_le(&b, 99, 8);
    expect_bad(&b, "key 'k': the string length 99 runs past the end of the file");
    gb_hdr(&b, 3, 0, 2);
    gb_kv_u32(&b, "k", 1);
    gb_kv_u32(&b, "k", 2);
    expect_bad(&b, "byte 41: duplicate key 'k' (first at byte 24)");
}
END_TEST

START_TEST(test_bad_alignment)
{
    gb b = {0};
    gb_hdr(&b, 3, 0, 1);
    gb_str(&b, "general.alignment");
    gb_le(&b, QUANT_GGUF_I32, 4);
    gb_le(&b, 32, 4);
    expect_bad(&b, "key 'general.alignment': it is i32, not u32");
    gb_hdr(&b, 3, 0, 1);
    gb_kv_u32(&b, "general.alignment", 48);
    expect_bad(&b, "key 'general.alignment': 48 is not a power of two");
    gb_hdr(&b, 3, 0, 1);
    gb_kv_u32(&b, "general.alignment", 0);
    expect_bad(&b, "0 is not a power of two");
}
END_TEST

/* A file with one tensor info as given and `data` bytes of data. */
static void one_tensor(gb *b, const char *name, uint32_t n_dims, const int64_t *ne, int32_t type,
                       size_t data)
{
    gb_hdr(b, 3, 1, 0);
    gb_ti(b, name, n_dims, ne, type, 0);
    gb_pad(b, 32);
    gb_data(b, data);
}

START_TEST(test_bad_tensor_info)
{
    gb b = {0};
    gb_valid(&b);
    b.n = 24 + 8 + 20 + 4 + 8 + 5 + 8 + 1 + 4 + 3; /* inside tensor a's first dimension */
    expect_bad(&b, "tensor 'a': truncated: a dimension needs 8 bytes");
    char name[65];
    memset(name, 'n', 64);
    name[64] = '\0';
    one_tensor(&b, name, 1, (int64_t[]){1}, QUANT_GGML_F32, 4);
    expect_bad(&b, "name of 64 bytes is too long (< 64)");
    name[63] = '\0'; /* 63 bytes: allowed */
    one_tensor(&b, name, 1, (int64_t[]){1}, QUANT_GGML_F32, 4);
    quant_gguf_close(open_buf(&b));
    free(b.p);
    b = (gb){0};
    one_tensor(&b, "t", 5, (int64_t[]){1, 1, 1, 1, 1}, QUANT_GGML_F32, 4);
    expect_bad(&b, "tensor 't': n_dims 5 exceeds 4");
    one_tensor(&b, "t", 2, (int64_t[]){4, -2}, QUANT_GGML_F32, 64);
    expect_bad(&b, "tensor 't': ne[1] = -2 is negative");
    one_tensor(&b, "t", 2, (int64_t[]){(int64_t)1 << 32, (int64_t)1 << 31}, QUANT_GGML_F32, 0);
    expect_bad(&b, "elements overflow int64");
    one_tensor(&b, "t", 2, (int64_t[]){(int64_t)1 << 61, 1}, QUANT_GGML_F32, 0);
    expect_bad(&b, "its byte size overflows int64");
    one_tensor(&b, "t", 3, (int64_t[]){0, (int64_t)1 << 40, (int64_t)1 << 40}, QUANT_GGML_F32, 0);
    expect_bad(&b, "rows overflow int64"); /* no elements, but a row count that overflows */
    static const int32_t gone[] = {4, 5, 31, 36, 43, 1000, -1};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "ggml type id %d is unknown", gone[i]);
        one_tensor(&b, "t", 1, (int64_t[]){32}, gone[i], 64);
        expect_bad(&b, want);
    }
    gb_hdr(&b, 3, 1, 0);
    gb_le(&b, 1, 8);
    gb_put(&b, "\0", 1);
    gb_le(&b, 1, 4);
    expect_bad(&b, "tensor #0: the name holds a NUL byte");
}
END_TEST

/* ne[0] must be a multiple of the block of the type: checked with every block type of the
 * table (none until ggml's block types are in it: the loop then checks nothing). */
START_TEST(test_bad_row_length)
{
    gb b = {0};
    for (int id = 0; id < QUANT_GGML_TYPE_LIMIT; id++) {
        const quant_ggml_traits *tr = quant_ggml_traits_get(id);
        if (!tr || tr->block == 1) continue;
        one_tensor(&b, "t", 2, (int64_t[]){tr->block + 1, 1}, id, 4096);
        char want[96];
        snprintf(want, sizeof want, "ne[0] = %lld is not a multiple of %s's block of %lld",
                 (long long)tr->block + 1, tr->ggml_name, (long long)tr->block);
        expect_bad(&b, want);
        one_tensor(&b, "t", 2, (int64_t[]){tr->block, 2}, id, 2 * tr->block_bytes);
        quant_gguf_file *f = open_buf(&b);
        ck_assert_uint_eq(f->tensors[0].nbytes, 2 * tr->block_bytes);
        quant_gguf_close(f);
        free(b.p);
        b = (gb){0};
    }
}
END_TEST

START_TEST(test_bad_layout)
{
    gb b = {0};
    gb_hdr(&b, 3, 2, 0);
    gb_ti(&b, "a", 1, (int64_t[]){8}, QUANT_GGML_F32, 0);
    gb_ti(&b, "a", 1, (int64_t[]){8}, QUANT_GGML_F32, 32);
    gb_pad(&b, 32);
    gb_data(&b, 64);
    expect_bad(&b, "duplicate tensor name 'a' (first at byte 24)");
    /* out of order */
    gb_hdr(&b, 3, 2, 0);
    gb_ti(&b, "a", 1, (int64_t[]){8}, QUANT_GGML_F32, 32);
    gb_ti(&b, "b", 1, (int64_t[]){8}, QUANT_GGML_F32, 0);
    gb_pad(&b, 32);
    gb_data(&b, 64);
    expect_bad(&b, "tensor 'a': offset 32 should be 0");
    /* a gap */
    gb_hdr(&b, 3, 2, 0);
    gb_ti(&b, "a", 1, (int64_t[]){8}, QUANT_GGML_F32, 0);
    gb_ti(&b, "b", 1, (int64_t[]){8}, QUANT_GGML_F32, 64);
    gb_pad(&b, 32);
    gb_data(&b, 96);
    expect_bad(&b, "tensor 'b': offset 64 should be 32");
    /* misaligned: b right after a's 8 bytes */
    gb_hdr(&b, 3, 2, 0);
    gb_ti(&b, "a", 1, (int64_t[]){2}, QUANT_GGML_F32, 0);
    gb_ti(&b, "b", 1, (int64_t[]){2}, QUANT_GGML_F32, 8);
    gb_pad(&b, 32);
    gb_data(&b, 64);
    expect_bad(&b, "tensor 'b': offset 8 should be 32 (data is contiguous in tensor-info order");
    /* truncated in the data; and before the data section */
    gb_valid(&b);
    b.n -= 16 + 1; /* b's last byte is gone (with the tail padding) */
    expect_bad(&b, "tensor 'b': truncated: its 16 bytes end past the end of the file");
    gb_hdr(&b, 3, 2, 0); /* the file ends in a's padding, before b starts */
    gb_ti(&b, "a", 1, (int64_t[]){2}, QUANT_GGML_F32, 0);
    gb_ti(&b, "b", 1, (int64_t[]){2}, QUANT_GGML_F32, 32);
    gb_pad(&b, 32);
    gb_data(&b, 16);
    expect_bad(&b, "tensor 'b': truncated: its 8 bytes end past the end of the file");
    gb_valid(&b);
    b.n = 150; /* the infos end at byte 143; the data would start at 160 */
    expect_bad(&b, "truncated: the data section would start at byte");
    /* without the tail padding the file is accepted (as llama.cpp's loader does) */
    gb_valid(&b);
    b.n -= 16;
    quant_gguf_close(open_buf(&b));
    free(b.p);
}
END_TEST

/* ---- the writer ---------------------------------------------------------------------------- */

typedef struct wfix {
    char *dir, *path;
} wfix;

static wfix wfix_new(void)
{
    wfix x = {.dir = ck_tmpdir()};
    x.path = kit_join(x.dir, "out.gguf");
    return x;
}

static void wfix_free(wfix *x)
{
    kit_rmtree(x->dir);
    free(x->dir);
    free(x->path);
}

static quant_gguf_file *open_path(const char *path)
{
    quant_gguf_file *f = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_gguf_open(path, &f, &err) == QUANT_CK_OK, "%s", err.message);
    return f;
}

static void ok(quant_ck_status st, const quant_ck_error *err)
{
    ck_assert_msg(st == QUANT_CK_OK, "%s", err->message);
}

/* What sha256sum prints for `path`. */
static void sha256sum(const char *path, char hex[65])
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert(fscanf(p, "%64s", hex) == 1);
    pclose(p);
}

/* Every pair of a file with pairs of every type copied raw, file_type set in place and
 * quantization_version added; three tensors (F32, F16, BF16) streamed in pieces. */
START_TEST(test_write_round_trip)
{
    gb b = {0};
    gb_every_type(&b, 0);
    quant_gguf_file *in = open_buf(&b);
    wfix x = wfix_new();
    quant_gguf_writer *w = NULL;
    quant_ck_error err;
    ok(quant_gguf_writer_new(x.path, &w, &err), &err);
    ok(quant_gguf_writer_copy_kvs(w, in, &err), &err);
    ok(quant_gguf_writer_set_u32(w, "scalar.u32", 7, &err), &err); /* replaced in place */
    ok(quant_gguf_writer_set_u32(w, "general.quantization_version", 2, &err), &err);
    ok(quant_gguf_writer_set_strings(w, "tok", (const char *const[]){"a", "", "ccc"}, 3, &err),
       &err);
    ok(quant_gguf_writer_set_f32s(w, "scores", (const float[]){0.5f, -1}, 2, &err), &err);
    ok(quant_gguf_writer_set_i32s(w, "types", (const int32_t[]){-1, 5}, 2, &err), &err);
    ok(quant_gguf_writer_set_bool(w, "flag", false, &err), &err);
    ok(quant_gguf_writer_set_f32(w, "eps", 1e-5f, &err), &err);
    ok(quant_gguf_writer_set_i32(w, "neg", -9, &err), &err);
    ok(quant_gguf_writer_set_string(w, "name", "model", &err), &err);
    ck_assert(quant_gguf_writer_remove_kv(w, "scalar.i8"));
    ck_assert(!quant_gguf_writer_remove_kv(w, "scalar.i8"));
    static const int types[] = {QUANT_GGML_F32, QUANT_GGML_F16, QUANT_GGML_BF16};
    static const int64_t ne[][2] = {{5, 3}, {64, 2}, {3, 7}};
    size_t idx;
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        ok(quant_gguf_writer_add_tensor(w, name, 2, ne[i], types[i], &idx, &err), &err);
        ck_assert_uint_eq(idx, (size_t)i);
    }
    ok(quant_gguf_writer_begin(w, &err), &err);
    ok(quant_gguf_writer_hash(w, &err), &err); /* after begin, before the data */
    ck_assert_int_eq(quant_gguf_writer_set_u32(w, "late", 1, &err), QUANT_CK_ERR_ARG);
    unsigned char data[512];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 13 + 5);
    for (int i = 0; i < 3; i++) { /* each tensor in pieces of 7 bytes */
        uint64_t n = quant_gguf_writer_nbytes(w, (size_t)i);
        for (uint64_t off = 0; off < n; off += 7)
            ok(quant_gguf_writer_write(w, data + off, n - off < 7 ? n - off : 7, &err), &err);
    }
    ck_assert_int_eq(quant_gguf_writer_write(w, data, 1, &err), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_gguf_writer_pwrite(w, 0, 0, data, 1, &err), QUANT_CK_ERR_ARG);
    ok(quant_gguf_writer_commit(w, &err), &err);
    char hex[65], want[65];
    ck_assert(quant_gguf_writer_sha256(w, hex, NULL));
    quant_gguf_writer_free(w);
    sha256sum(x.path, want);
    ck_assert_str_eq(hex, want);

    quant_gguf_file *f = open_path(x.path);
    ck_assert_int_eq(f->version, 3);
    ck_assert_int_eq(f->alignment, 64); /* general.alignment copied: the layout follows it */
    ck_assert_uint_eq(f->n_kv, in->n_kv - 1 + 8);
    for (size_t i = 0, j = 0; i < in->n_kv; i++) { /* order and bytes kept */
        if (strcmp(in->kv[i].key, "scalar.i8") == 0) continue;
        const quant_gguf_kv *a = &in->kv[i], *c = &f->kv[j++];
        ck_assert_str_eq(a->key, c->key);
        if (strcmp(a->key, "scalar.u32") == 0) continue;
        ck_assert(a->type == c->type && a->raw_len == c->raw_len);
        ck_assert(memcmp(a->raw, c->raw, a->raw_len) == 0);
    }
    uint32_t u;
    ok(quant_gguf_get_u32(f, "scalar.u32", &u, &err), &err);
    ck_assert_uint_eq(u, 7);
    ok(quant_gguf_get_u32(f, "general.quantization_version", &u, &err), &err);
    ck_assert_uint_eq(u, 2);
    const quant_gguf_kv *kv = quant_gguf_find_kv(f, "tok");
    size_t cur = 0;
    const char *s;
    uint64_t len;
    ck_assert(quant_gguf_kv_next_string(kv, &cur, &s, &len) && len == 1 && *s == 'a');
    ck_assert(quant_gguf_kv_next_string(kv, &cur, &s, &len) && len == 0);
    ck_assert(quant_gguf_kv_next_string(kv, &cur, &s, &len) && len == 3);
    double d;
    ck_assert(quant_gguf_kv_float(quant_gguf_find_kv(f, "scores"), 1, &d) && d == -1);
    int64_t v;
    ck_assert(quant_gguf_kv_int(quant_gguf_find_kv(f, "types"), 0, &v) && v == -1);
    float e;
    ok(quant_gguf_get_f32(f, "eps", &e, &err), &err);
    ck_assert(e == 1e-5f);
    bool flag = true;
    ok(quant_gguf_get_bool(f, "flag", &flag, &err), &err);
    ck_assert(!flag);
    for (int i = 0; i < 3; i++) {
        const quant_gguf_tensor *t = &f->tensors[i];
        ck_assert_int_eq(t->type, types[i]);
        ck_assert(t->ne[0] == ne[i][0] && t->ne[1] == ne[i][1] && t->n_dims == 2);
        ck_assert_uint_eq(t->offset % 64, 0);
        unsigned char got[512];
        ok(quant_gguf_read(f, t, 0, got, t->nbytes, &err), &err);
        ck_assert(memcmp(got, data, t->nbytes) == 0);
    }
    ck_assert_uint_eq(f->file_size, f->data_start + f->data_size); /* the tail is padded */
    quant_gguf_close(f);
    quant_gguf_close(in);
    free(b.p);
    wfix_free(&x);
}
END_TEST

/* pwrite in any order, hashed: the SHA-256 is sha256sum's; a tensor short of bytes fails the
 * commit and leaves nothing. */
START_TEST(test_write_pwrite_hash)
{
    wfix x = wfix_new();
    quant_gguf_writer *w = NULL;
    quant_ck_error err;
    ok(quant_gguf_writer_new(x.path, &w, &err), &err);
    ok(quant_gguf_writer_hash(w, &err), &err);
    ok(quant_gguf_writer_add_tensor(w, "a", 1, (int64_t[]){100}, QUANT_GGML_F32, NULL, &err), &err);
    ok(quant_gguf_writer_add_tensor(w, "b", 1, (int64_t[]){0}, QUANT_GGML_F16, NULL, &err), &err);
    ok(quant_gguf_writer_add_tensor(w, "c", 3, (int64_t[]){3, 1, 2}, QUANT_GGML_BF16, NULL, &err),
       &err);
    ok(quant_gguf_writer_begin(w, &err), &err);
    unsigned char data[400];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i ^ 0x5a);
    ok(quant_gguf_writer_pwrite(w, 2, 6, data, 6, &err), &err);
    ok(quant_gguf_writer_pwrite(w, 0, 200, data, 200, &err), &err);
    ok(quant_gguf_writer_pwrite(w, 2, 0, data, 6, &err), &err);
    ck_assert_int_eq(quant_gguf_writer_pwrite(w, 2, 6, data, 7, &err), QUANT_CK_ERR_ARG);
    ck_assert_msg(strstr(err.message, "cannot write 7 bytes at offset 6 of its 12 bytes"), "%s",
                  err.message);
    ck_assert_int_eq(quant_gguf_writer_write(w, data, 1, &err), QUANT_CK_ERR_ARG);
    ok(quant_gguf_writer_pwrite(w, 0, 0, data, 200, &err), &err);
    ok(quant_gguf_writer_commit(w, &err), &err);
    char hex[65], want[65];
    uint64_t bytes = 0;
    ck_assert(quant_gguf_writer_sha256(w, hex, &bytes));
    quant_gguf_writer_free(w);
    sha256sum(x.path, want);
    ck_assert_str_eq(hex, want);
    quant_gguf_file *f = open_path(x.path);
    ck_assert_uint_eq(bytes, f->file_size);
    ck_assert_uint_eq(f->tensors[1].nbytes, 0);
    ck_assert_uint_eq(f->tensors[2].nrows, 2);
    quant_gguf_close(f);

    /* a tensor short of its bytes */
    ok(quant_gguf_writer_new(x.path, &w, &err), &err);
    ok(quant_gguf_writer_add_tensor(w, "a", 1, (int64_t[]){4}, QUANT_GGML_F32, NULL, &err), &err);
    ok(quant_gguf_writer_begin(w, &err), &err);
    ck_assert_int_eq(ck_count_entries(x.dir), 2); /* out.gguf and the temporary */
    ok(quant_gguf_writer_write(w, data, 15, &err), &err);
    ck_assert_int_eq(quant_gguf_writer_commit(w, &err), QUANT_CK_ERR_ARG);
    ck_assert_msg(strstr(err.message, "tensor 'a' got 15 of its 16 bytes"), "%s", err.message);
    quant_gguf_writer_free(w);
    ck_assert_int_eq(ck_count_entries(x.dir), 1);
    f = open_path(x.path); /* the first file is still there, untouched */
    ck_assert_uint_eq(f->n_tensors, 3);
    quant_gguf_close(f);
    wfix_free(&x);
}
END_TEST

START_TEST(test_write_refusals)
{
    wfix x = wfix_new();
    quant_gguf_writer *w = NULL;
    quant_ck_error err;
    ok(quant_gguf_writer_new(x.path, &w, &err), &err);
    char name[70];
    memset(name, 'x', 64);
    name[64] = '\0';
    ck_assert_int_eq(
        quant_gguf_writer_add_tensor(w, name, 1, (int64_t[]){1}, QUANT_GGML_F32, NULL, &err),
        QUANT_CK_ERR_ARG);
    ck_assert_msg(strstr(err.message, "a name of 64 bytes is too long"), "%s", err.message);
    ok(quant_gguf_writer_add_tensor(w, "a", 1, (int64_t[]){1}, QUANT_GGML_F32, NULL, &err), &err);
    ck_assert_int_eq(
        quant_gguf_writer_add_tensor(w, "a", 1, (int64_t[]){1}, QUANT_GGML_F32, NULL, &err),
        QUANT_CK_ERR_ARG);
    ck_assert_msg(strstr(err.message, "tensor name 'a' is used twice"), "%s", err.message);
    ck_assert_int_eq(
        quant_gguf_writer_add_tensor(w, "b", 5, (int64_t[]){1, 1, 1, 1, 1}, 0, NULL, &err),
        QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_gguf_writer_add_tensor(w, "b", 1, (int64_t[]){-1}, 0, NULL, &err),
                     QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_gguf_writer_add_tensor(w, "b", 1, (int64_t[]){4}, 4, NULL, &err),
                     QUANT_CK_ERR_ARG);
    ck_assert_msg(strstr(err.message, "ggml type id 4 is unknown"), "%s", err.message);
    ck_assert_int_eq(quant_gguf_writer_set_i32(w, "general.alignment", 32, &err), QUANT_CK_ERR_ARG);
    ck_assert_msg(strstr(err.message, "'general.alignment' must be u32, not i32"), "%s",
                  err.message);
    ck_assert_int_eq(quant_gguf_writer_set_u32(w, "general.alignment", 24, &err), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_gguf_writer_set_u32(w, "", 24, &err), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_gguf_writer_set_string(w, "k", NULL, &err), QUANT_CK_ERR_ARG);
    /* a piece running past its tensor */
    ok(quant_gguf_writer_begin(w, &err), &err);
    unsigned char data[8] = {0};
    ck_assert_int_eq(quant_gguf_writer_write(w, data, 5, &err), QUANT_CK_ERR_ARG);
    ck_assert_msg(strstr(err.message, "tensor 'a': a piece of 5 bytes runs past its end (4 of "
                                      "its 4 bytes left)"),
                  "%s", err.message);
    quant_gguf_writer_free(w); /* not committed: nothing left */
    ck_assert_int_eq(ck_count_entries(x.dir), 0);
    /* the target is a directory */
    ck_assert_int_eq(mkdir(x.path, 0755), 0);
    ok(quant_gguf_writer_new(x.path, &w, &err), &err);
    ck_assert_int_ne(quant_gguf_writer_begin(w, &err), QUANT_CK_OK);
    quant_gguf_writer_free(w);
    ck_assert_int_eq(ck_count_entries(x.dir), 1);
    wfix_free(&x);
}
END_TEST

/* ---- dequantizing and the real file ------------------------------------------------------- */

START_TEST(test_dequantize)
{
    wfix x = wfix_new();
    quant_gguf_writer *w = NULL;
    quant_ck_error err;
    ok(quant_gguf_writer_new(x.path, &w, &err), &err);
    ok(quant_gguf_writer_add_tensor(w, "h", 2, (int64_t[]){3, 2}, QUANT_GGML_F16, NULL, &err),
       &err);
    ok(quant_gguf_writer_add_tensor(w, "f", 1, (int64_t[]){2}, QUANT_GGML_F32, NULL, &err), &err);
    ok(quant_gguf_writer_begin(w, &err), &err);
    /* f16 1, -2, 0.5, 65504, 0, -0.25 */
    static const uint16_t h[] = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0000, 0xb400};
    static const float want_h[] = {1, -2, 0.5f, 65504, 0, -0.25f}, fv[] = {3.25f, -7};
    ok(quant_gguf_writer_write(w, h, sizeof h, &err), &err);
    ok(quant_gguf_writer_write(w, fv, sizeof fv, &err), &err);
    ok(quant_gguf_writer_commit(w, &err), &err);
    quant_gguf_writer_free(w);
    char *out = kit_join(x.dir, "out.bin"); /* found by the magic, not the name */
    ok(quant_dequantize_path(x.path, out, QUANT_ST_F32, 1, &err), &err);
    quant_st_file *st = NULL;
    ok(quant_st_open(out, &st, &err), &err);
    const quant_st_tensor *t = quant_st_find(st, "h");
    ck_assert(t && t->dtype == QUANT_ST_F32 && t->rank == 2);
    ck_assert(t->shape[0] == 2 && t->shape[1] == 3);
    float got[6];
    ok(quant_st_read(st, t, 0, got, sizeof got, &err), &err);
    ck_assert(memcmp(got, want_h, sizeof got) == 0);
    t = quant_st_find(st, "f");
    ok(quant_st_read(st, t, 0, got, 8, &err), &err);
    ck_assert(got[0] == 3.25f && got[1] == -7);
    quant_st_close(st);
    ck_assert_int_eq(quant_dequantize_path(x.path, out, QUANT_ST_F32, 1, &err), QUANT_CK_ERR_ARG);
    free(out);
    wfix_free(&x);
}
END_TEST

/* The whole file as a NUL-terminated string (malloc'd). */
static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_ptr_nonnull(fp);
    char *text = calloc(1, 1 << 20);
    ck_assert_ptr_nonnull(text);
    size_t n = fread(text, 1, (1 << 20) - 1, fp);
    text[n] = '\0';
    fclose(fp);
    return text;
}

/* `quant inspect` (text and --json) and `quant dequantize` on a GGUF file named without .gguf;
 * a malformed one fails with one line naming it. */
START_TEST(test_cli)
{
    const char *bin = getenv("QUANT_BIN");
    ck_assert_msg(bin && access(bin, X_OK) == 0, "QUANT_BIN must name the quant binary");
    gb b = {0};
    gb_hdr(&b, 3, 1, 3);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "llama.block_count", 2);
    gb_str(&b, "tokenizer.ggml.tokens");
    gb_le(&b, QUANT_GGUF_ARRAY, 4);
    gb_le(&b, QUANT_GGUF_STRING, 4);
    gb_le(&b, 100, 8);
    for (int i = 0; i < 100; i++) gb_str(&b, "tok");
    gb_ti(&b, "blk.0.w", 2, (int64_t[]){4, 3}, QUANT_GGML_BF16, 0);
    gb_pad(&b, 32);
    for (int i = 0; i < 12; i++) gb_le(&b, 0x3f80 + (uint64_t)i, 2); /* bf16 1, 1.0078125, ... */
    gb_pad(&b, 32);
    wfix x = wfix_new();
    char *in = kit_join(x.dir, "model.bin"), *out = kit_join(x.dir, "out.txt");
    char *errp = kit_join(x.dir, "err.txt"), *st = kit_join(x.dir, "dq.safetensors");
    ck_write_file(in, b.p, b.n);
    ck_assert_int_eq(kit_run(bin, "quant", (const char *[]){"inspect", in, NULL}, out, errp), 0);
    char *text = slurp(out);
    ck_assert_msg(strstr(text, "GGUF version 3, alignment 32, 1 tensors"), "%s", text);
    ck_assert_msg(strstr(text, "llama.block_count: u32 2"), "%s", text);
    ck_assert_msg(strstr(text, "tokenizer.ggml.tokens: array of 100 string\n"), "%s", text);
    ck_assert_msg(strstr(text, "blk.0.w  BF16  [3, 4]"), "%s", text);
    free(text);
    ck_assert_int_eq(
        kit_run(bin, "quant", (const char *[]){"inspect", "--json", in, NULL}, out, errp), 0);
    text = slurp(out);
    json_error_t je;
    json_t *root = json_loads(text, 0, &je);
    ck_assert_msg(root, "%s: %s", je.text, text);
    json_t *toks = json_object_get(json_object_get(root, "metadata"), "tokenizer.ggml.tokens");
    ck_assert_str_eq(json_string_value(json_object_get(toks, "element_type")), "string");
    ck_assert_int_eq(json_integer_value(json_object_get(toks, "length")), 100);
    ck_assert_ptr_null(json_object_get(toks, "values"));
    json_t *t0 = json_array_get(json_object_get(root, "tensors"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(t0, "ggml_type")), "BF16");
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(t0, "shape"), 0)), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(t0, "bytes")), 24);
    json_decref(root);
    free(text);
    ck_assert_int_eq(
        kit_run(bin, "quant", (const char *[]){"dequantize", "-q", in, st, NULL}, out, errp), 0);
    quant_st_file *sf = NULL;
    quant_ck_error err;
    ok(quant_st_open(st, &sf, &err), &err);
    float v[12];
    ok(quant_st_read(sf, &sf->tensors[0], 0, v, sizeof v, &err), &err);
    ck_assert(v[0] == 1.0f && v[11] == 1.0f + 11.0f / 128);
    quant_st_close(sf);
    b.p[4] = 4; /* version 4 */
    ck_write_file(in, b.p, b.n);
    ck_assert_int_eq(kit_run(bin, "quant", (const char *[]){"inspect", in, NULL}, out, errp), 1);
    text = slurp(errp);
    ck_assert_msg(strstr(text, "model.bin: byte 4: version 4 is not supported"), "%s", text);
    ck_assert_msg(strchr(text, '\n') == text + strlen(text) - 1, "%s", text);
    free(text);
    free(b.p);
    free(in);
    free(out);
    free(errp);
    free(st);
    wfix_free(&x);
}
END_TEST

/* The stories15M GGUF (llama.cpp's converter's output), when the file is on this machine: its
 * pairs and tensors, and copied through the writer it comes out byte for byte the same. */
START_TEST(test_stories15m)
{
    const char *path = getenv("QUANT_STORIES_GGUF");
    if (!path || !*path) path = STORIES_DEFAULT;
    if (access(path, R_OK) != 0) return; /* not on this machine: nothing to check */
    quant_gguf_file *f = open_path(path);
    quant_ck_error err;
    ck_assert_uint_eq(f->n_tensors, 56);
    const char *arch;
    ok(quant_gguf_get_string(f, "general.architecture", &arch, &err), &err);
    ck_assert_str_eq(arch, "llama");
    uint32_t u;
    ok(quant_gguf_get_u32(f, "llama.block_count", &u, &err), &err);
    ck_assert_uint_eq(u, 6);
    ok(quant_gguf_get_u32_layer(f, "llama.feed_forward_length", 5, &u, &err), &err);
    ck_assert_uint_eq(u, 768);
    const quant_gguf_kv *tok;
    ok(quant_gguf_get_array(f, "tokenizer.ggml.tokens", QUANT_GGUF_STRING, &tok, &err), &err);
    ck_assert_uint_eq(tok->n, 32000);
    const quant_gguf_tensor *t = quant_gguf_find_tensor(f, "token_embd.weight");
    ck_assert(t && t->n_dims == 2 && t->ne[0] == 288 && t->ne[1] == 32000);
    t = quant_gguf_find_tensor(f, "blk.0.ffn_down.weight");
    ck_assert(t && t->ne[0] == 768 && t->ne[1] == 288 && t->type == QUANT_GGML_F32);

    wfix x = wfix_new();
    quant_gguf_writer *w = NULL;
    ok(quant_gguf_writer_new(x.path, &w, &err), &err);
    ok(quant_gguf_writer_copy_kvs(w, f, &err), &err);
    for (size_t i = 0; i < f->n_tensors; i++)
        ok(quant_gguf_writer_add_tensor(w, f->tensors[i].name, f->tensors[i].n_dims,
                                        f->tensors[i].ne, f->tensors[i].type, NULL, &err),
           &err);
    ok(quant_gguf_writer_begin(w, &err), &err);
    enum { PIECE = 1 << 20 };
    unsigned char *buf = malloc(PIECE);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < f->n_tensors; i++)
        for (uint64_t off = 0; off < f->tensors[i].nbytes; off += PIECE) {
            size_t n = f->tensors[i].nbytes - off < PIECE ? f->tensors[i].nbytes - off : PIECE;
            ok(quant_gguf_read(f, &f->tensors[i], off, buf, n, &err), &err);
            ok(quant_gguf_writer_write(w, buf, n, &err), &err);
        }
    ok(quant_gguf_writer_commit(w, &err), &err);
    quant_gguf_writer_free(w);
    free(buf);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", path, x.path);
    ck_assert_msg(system(cmd) == 0, "the copy differs from %s", path);
    quant_gguf_close(f);
    wfix_free(&x);
}
END_TEST

Suite *suite_gguf(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("gguf");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_reads_valid);
    tcase_add_test(tc, test_every_kv_type);
    tcase_add_test(tc, test_bad_header);
    tcase_add_test(tc, test_bad_kv);
    tcase_add_test(tc, test_bad_alignment);
    tcase_add_test(tc, test_bad_tensor_info);
    tcase_add_test(tc, test_bad_row_length);
    tcase_add_test(tc, test_bad_layout);
    tcase_add_test(tc, test_write_round_trip);
    tcase_add_test(tc, test_write_pwrite_hash);
    tcase_add_test(tc, test_write_refusals);
    tcase_add_test(tc, test_dequantize);
    tcase_add_test(tc, test_cli);
    tcase_add_test(tc, test_stories15m);
    suite_add_tcase(s, tc);
    return s;
}
