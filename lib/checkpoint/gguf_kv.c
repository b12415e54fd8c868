/* gguf_kv.c -- GGUF key-value values: the value-type table (names, sizes) and the typed
 * accessors over a reader's pairs (exact types, as llama.cpp reads them; per-layer arrays; the
 * elements of numeric and string arrays decoded from the raw bytes).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <string.h>

#include "ck_internal.h"
#include "quant_gguf.h"

static const struct {
    const char *name;
    size_t size;
    bool is_signed;
} kv_types[QUANT_GGUF_TYPE_COUNT] = {
    [QUANT_GGUF_U8] = {"u8", 1, false},         [QUANT_GGUF_I8] = {"i8", 1, true},
    [QUANT_GGUF_U16] = {"u16", 2, false},       [QUANT_GGUF_I16] = {"i16", 2, true},
    [QUANT_GGUF_U32] = {"u32", 4, false},       [QUANT_GGUF_I32] = {"i32", 4, true},
    [QUANT_GGUF_F32] = {"f32", 4, false},       [QUANT_GGUF_BOOL] = {"bool", 1, false},
    [QUANT_GGUF_STRING] = {"string", 0, false}, [QUANT_GGUF_ARRAY] = {"array", 0, false},
    [QUANT_GGUF_U64] = {"u64", 8, false},       [QUANT_GGUF_I64] = {"i64", 8, true},
    [QUANT_GGUF_F64] = {"f64", 8, false},
};

const char *quant_gguf_type_name(int type)
{
    return type >= 0 && type < QUANT_GGUF_TYPE_COUNT ? kv_types[type].name : NULL;
}

size_t quant_gguf_type_size(int type)
{
    return type >= 0 && type < QUANT_GGUF_TYPE_COUNT ? kv_types[type].size : 0;
}

static uint64_t le(const unsigned char *b, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = v << 8 | b[i];
    return v;
}

/* The bytes of element i of a fixed-size pair (a scalar's value, or an array's element). */
static const unsigned char *element(const quant_gguf_kv *kv, uint64_t i)
{
    size_t size = kv ? quant_gguf_type_size(kv->elem) : 0;
    if (size == 0 || i >= kv->n) return NULL;
    size_t head = kv->type == QUANT_GGUF_ARRAY ? 12 : 0;
    return kv->raw + head + (size_t)i * size;
}

bool quant_gguf_kv_int(const quant_gguf_kv *kv, uint64_t i, int64_t *out)
{
    if (!kv || kv->elem == QUANT_GGUF_F32 || kv->elem == QUANT_GGUF_F64) return false;
    const unsigned char *p = element(kv, i);
    if (!p) return false;
    size_t size = quant_gguf_type_size(kv->elem);
    uint64_t v = le(p, size);
    if (kv->elem == QUANT_GGUF_BOOL) {
        *out = v != 0;
    } else if (kv_types[kv->elem].is_signed) {
        int shift = 64 - 8 * (int)size;
        *out = shift ? (int64_t)(v << shift) >> shift : (int64_t)v;
    } else {
        if (v > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v;
    }
    return true;
}

bool quant_gguf_kv_float(const quant_gguf_kv *kv, uint64_t i, double *out)
{
    if (!kv || (kv->elem != QUANT_GGUF_F32 && kv->elem != QUANT_GGUF_F64)) return false;
    const unsigned char *p = element(kv, i);
    if (!p) return false;
    if (kv->elem == QUANT_GGUF_F32) {
        uint32_t u = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &u, sizeof f);
        *out = f;
    } else {
        uint64_t u = le(p, 8);
        memcpy(out, &u, sizeof *out);
    }
    return true;
}

bool quant_gguf_kv_next_string(const quant_gguf_kv *kv, size_t *cursor, const char **s,
                               uint64_t *len)
{
    if (!kv || !cursor || kv->elem != QUANT_GGUF_STRING) return false;
    size_t at = *cursor;
    if (at == 0) at = kv->type == QUANT_GGUF_ARRAY ? 12 : 0;
    if (at + 8 > kv->raw_len) return false; /* the reader checked every length */
    uint64_t n = le(kv->raw + at, 8);
    *s = (const char *)kv->raw + at + 8;
    *len = n;
    *cursor = at + 8 + (size_t)n;
    return true;
}

/* The pair `key` of exactly scalar type `type`. */
static quant_ck_status scalar(const quant_gguf_file *f, const char *key, quant_gguf_type type,
                              const quant_gguf_kv **out, quant_ck_error *err)
{
    if (!f || !key) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_gguf_get: NULL argument");
    const quant_gguf_kv *kv = quant_gguf_find_kv(f, key);
    if (!kv)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: key '%s' is missing", f->path, key);
    if (kv->type != type)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: key '%s' is %s%s%s, not %s", f->path,
                             key, quant_gguf_type_name(kv->type),
                             kv->type == QUANT_GGUF_ARRAY ? " of " : "",
                             kv->type == QUANT_GGUF_ARRAY ? quant_gguf_type_name(kv->elem) : "",
                             quant_gguf_type_name(type));
    *out = kv;
    return QUANT_CK_OK;
}

quant_ck_status quant_gguf_get_u32(const quant_gguf_file *f, const char *key, uint32_t *out,
                                   quant_ck_error *err)
{
    const quant_gguf_kv *kv;
    quant_ck_status st = scalar(f, key, QUANT_GGUF_U32, &kv, err);
    if (st == QUANT_CK_OK) *out = (uint32_t)le(kv->raw, 4);
    return st;
}

quant_ck_status quant_gguf_get_i32(const quant_gguf_file *f, const char *key, int32_t *out,
                                   quant_ck_error *err)
{
    const quant_gguf_kv *kv;
    quant_ck_status st = scalar(f, key, QUANT_GGUF_I32, &kv, err);
    if (st == QUANT_CK_OK) *out = (int32_t)(uint32_t)le(kv->raw, 4);
    return st;
}

quant_ck_status quant_gguf_get_u64(const quant_gguf_file *f, const char *key, uint64_t *out,
                                   quant_ck_error *err)
{
    const quant_gguf_kv *kv;
    quant_ck_status st = scalar(f, key, QUANT_GGUF_U64, &kv, err);
    if (st == QUANT_CK_OK) *out = le(kv->raw, 8);
    return st;
}

quant_ck_status quant_gguf_get_f32(const quant_gguf_file *f, const char *key, float *out,
                                   quant_ck_error *err)
{
    const quant_gguf_kv *kv;
    quant_ck_status st = scalar(f, key, QUANT_GGUF_F32, &kv, err);
    double d = 0;
    if (st == QUANT_CK_OK && quant_gguf_kv_float(kv, 0, &d)) *out = (float)d;
    return st;
}

quant_ck_status quant_gguf_get_bool(const quant_gguf_file *f, const char *key, bool *out,
                                    quant_ck_error *err)
{
    const quant_gguf_kv *kv;
    quant_ck_status st = scalar(f, key, QUANT_GGUF_BOOL, &kv, err);
    if (st == QUANT_CK_OK) *out = kv->raw[0] != 0; /* any non-zero byte, as ggml reads it */
    return st;
}

quant_ck_status quant_gguf_get_string(const quant_gguf_file *f, const char *key, const char **out,
                                      quant_ck_error *err)
{
    const quant_gguf_kv *kv;
    quant_ck_status st = scalar(f, key, QUANT_GGUF_STRING, &kv, err);
    if (st == QUANT_CK_OK) *out = kv->str;
    return st;
}

quant_ck_status quant_gguf_get_array(const quant_gguf_file *f, const char *key, int elem,
                                     const quant_gguf_kv **out, quant_ck_error *err)
{
    const quant_gguf_kv *kv;
    quant_ck_status st = scalar(f, key, QUANT_GGUF_ARRAY, &kv, err);
    if (st != QUANT_CK_OK) return st;
    if (elem != QUANT_GGUF_TYPE_COUNT && (int)kv->elem != elem)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: key '%s' is an array of %s, not of %s",
                             f->path, key, quant_gguf_type_name(kv->elem),
                             quant_gguf_type_name(elem) ? quant_gguf_type_name(elem) : "?");
    *out = kv;
    return QUANT_CK_OK;
}

quant_ck_status quant_gguf_get_u32_layer(const quant_gguf_file *f, const char *key, uint64_t layer,
                                         uint32_t *out, quant_ck_error *err)
{
    if (!f || !key)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_gguf_get_u32_layer: NULL argument");
    const quant_gguf_kv *kv = quant_gguf_find_kv(f, key);
    if (!kv || kv->type != QUANT_GGUF_ARRAY) return quant_gguf_get_u32(f, key, out, err);
    int64_t v = -1;
    if (kv->elem != QUANT_GGUF_U32 && kv->elem != QUANT_GGUF_I32)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: key '%s' is an array of %s, not of u32 or i32", f->path, key,
                             quant_gguf_type_name(kv->elem));
    if (layer >= kv->n)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: key '%s' has %" PRIu64 " values, none for layer %" PRIu64,
                             f->path, key, kv->n, layer);
    if (!quant_gguf_kv_int(kv, layer, &v) || v < 0)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: key '%s': layer %" PRIu64 "'s value %" PRId64 " is negative",
                             f->path, key, layer, v);
    *out = (uint32_t)v;
    return QUANT_CK_OK;
}
