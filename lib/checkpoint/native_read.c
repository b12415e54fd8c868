/* native_read.c -- quant_native_read(): the native layout's `quantization` metadata (SPEC
 * section 7) matched with the tensors of a file. Each entry NAME needs NAME.qvalue and
 * NAME.scale (NAME.zero_point when asymmetric) and an orig_shape that those parts agree with;
 * the quant_how is recovered from the scale's shape: an axis whose scale dim equals the tensor's
 * is channelwise, 1 is reduced, anything between is tiled.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"
#include "quant_native.h"

/* NAME + suffix in `f` (any length of name: a header bounds them), NULL when absent (or out of
 * memory, which the caller reports as the part missing). */
static const quant_st_tensor *find_part(const quant_st_file *f, const char *name,
                                        const char *suffix)
{
    size_t n = strlen(name) + strlen(suffix) + 1;
    char *buf = malloc(n);
    if (!buf) return NULL;
    snprintf(buf, n, "%s%s", name, suffix);
    const quant_st_tensor *t = quant_st_find(f, buf);
    free(buf);
    return t;
}

/* A microscaling qtype (SPEC 2b) whose tiled axis holds a single tile (dim == the fixed tile,
 * scale dim 1) looks reduced: tile the last such axis. Any axis of scale dim 1 with that length
 * gives the same dequantized values (one scale covers them all). */
static void microscaling_tile(quant_native_tensor *e)
{
    int64_t fixed = quant_qtype_traits_get(e->how.qtype)->fixed_tile;
    if (!fixed || e->how.n_tiles != 0) return;
    for (int a = e->rank - 1; a >= 0; a--)
        if (e->shape[a] == fixed && a < e->scale->rank && e->scale->shape[a] == 1) {
            e->how.tiles[e->how.n_tiles++] = (quant_tile){.axis = a, .size = fixed};
            return;
        }
}

/* The quant_how that reproduces the stored scale shape, checked against the parts' sizes. */
static quant_ck_status entry_how(quant_native_tensor *e, const json_t *info, quant_ck_error *err)
{
    const char *qtype = json_string_value(json_object_get(info, "qtype"));
    quant_error qe;
    if (!qtype || quant_qtype_parse(qtype, &e->how.qtype, &qe) != QUANT_OK)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "tensor '%s': bad qtype in metadata",
                             e->name);
    quant_how_init(&e->how, e->how.qtype);
    e->how.pack = json_is_true(json_object_get(info, "packed"));
    e->how.calibration = e->zero_point ? "minmax" : "absmax";
    e->how.scale_dtype = QUANT_DTYPE_F32;
    for (int a = 0; a < e->rank; a++) {
        int64_t d = e->shape[a], s = a < e->scale->rank ? e->scale->shape[a] : 0;
        if (s == d && d > 1)
            e->how.channel_axes[e->how.n_channel_axes++] = a;
        else if (s > 1 && s < d && d % s == 0)
            e->how.tiles[e->how.n_tiles++] = (quant_tile){.axis = a, .size = d / s};
        else if (s != 1 && s != d)
            return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                                 "tensor '%s': scale shape does not fit shape on axis %d", e->name,
                                 a);
    }
    microscaling_tile(e);
    int64_t want[QUANT_MAX_RANK];
    if (e->scale->rank != e->rank ||
        quant_scale_shape(&e->how, e->rank, e->shape, want, &qe) != QUANT_OK ||
        memcmp(want, e->scale->shape, (size_t)e->rank * sizeof *want) != 0 ||
        quant_st_nbytes(e->qvalue) != (uint64_t)quant_qvalue_bytes(&e->how, e->rank, e->shape))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s': qvalue/scale shapes do not match the metadata", e->name);
    quant_dtype sd;
    if (!quant_st_to_quant_dtype(e->scale->dtype, &sd) || !quant_dtype_is_float(sd))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "tensor '%s': scale dtype %s is not a float",
                             e->name, quant_st_dtype_name(e->scale->dtype));
    quant_st_dtype zd = e->zero_point ? e->zero_point->dtype : QUANT_ST_I8;
    if (e->zero_point && (e->zero_point->rank != e->rank ||
                          memcmp(want, e->zero_point->shape, (size_t)e->rank * sizeof *want) ||
                          (zd != QUANT_ST_I8 && zd != QUANT_ST_U8 && zd != QUANT_ST_I16)))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s': zero_point must be I8, U8 or I16 shaped like its scale",
                             e->name);
    return QUANT_CK_OK;
}

static quant_ck_status orig_shape(quant_native_tensor *e, const json_t *shape, quant_ck_error *err)
{
    e->rank = (int)json_array_size(shape);
    if (!json_is_array(shape) || e->rank < 1 || e->rank > QUANT_MAX_RANK)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s': orig_shape must be a list of 1 to %d dimensions",
                             e->name, QUANT_MAX_RANK);
    for (int a = 0; a < e->rank; a++) {
        const json_t *d = json_array_get(shape, (size_t)a);
        e->shape[a] = json_is_integer(d) ? json_integer_value(d) : -1;
        if (e->shape[a] < 0)
            return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                                 "tensor '%s': orig_shape[%d] is not a size", e->name, a);
    }
    return QUANT_CK_OK;
}

static quant_ck_status parse_entry(quant_native *n, const char *name, const json_t *info,
                                   quant_ck_error *err)
{
    quant_native_tensor *e = &n->tensors[n->n];
    memset(e, 0, sizeof *e);
    e->name = name;
    e->qvalue = find_part(n->file, name, ".qvalue");
    e->scale = find_part(n->file, name, ".scale");
    e->zero_point = find_part(n->file, name, ".zero_point");
    if (!json_is_object(info) || !e->qvalue || !e->scale)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s': the metadata lists it but %s is missing", name,
                             !json_is_object(info) ? "its entry"
                             : !e->qvalue          ? ".qvalue"
                                                   : ".scale");
    e->orig_dtype = json_string_value(json_object_get(info, "orig_dtype"));
    const json_t *g = json_object_get(info, "global_scale");
    e->has_global_scale = json_is_number(g);
    e->global_scale = json_number_value(g);
    quant_ck_status st = orig_shape(e, json_object_get(info, "orig_shape"), err);
    if (st == QUANT_CK_OK) st = entry_how(e, info, err);
    if (st != QUANT_CK_OK) return st;
    /* distinct entries have distinct parts: NAME.scale never ends in .qvalue, and so on */
    n->owner_[e->qvalue - n->file->tensors] = e;
    n->owner_[e->scale - n->file->tensors] = e;
    if (e->zero_point) n->owner_[e->zero_point - n->file->tensors] = e;
    n->n++;
    return QUANT_CK_OK;
}

static quant_ck_status parse_all(quant_native *n, const char *text, quant_ck_error *err)
{
    json_error_t je;
    json_t *meta = json_loads(text, 0, &je);
    n->meta_ = meta;
    n->has_metadata = true;
    n->format = json_string_value(json_object_get(meta, "format"));
    json_t *tensors = json_object_get(meta, "tensors");
    if (!json_is_object(tensors))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "bad `quantization` metadata (a JSON object with \"tensors\")");
    n->tensors = calloc(json_object_size(tensors) + 1, sizeof *n->tensors);
    n->owner_ = calloc(n->file->n_tensors + 1, sizeof *n->owner_);
    if (!n->tensors || !n->owner_) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    const char *name;
    json_t *info;
    json_object_foreach(tensors, name, info)
    {
        quant_ck_status st = parse_entry(n, name, info, err);
        if (st != QUANT_CK_OK) return st;
    }
    return QUANT_CK_OK;
}

quant_ck_status quant_native_read(const quant_st_file *f, quant_native *out, quant_ck_error *err)
{
    if (!out) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    memset(out, 0, sizeof *out);
    if (!f) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    out->file = f;
    const char *text = quant_st_meta(f, "quantization");
    if (!text) return QUANT_CK_OK;
    quant_ck_status st = parse_all(out, text, err);
    if (st != QUANT_CK_OK) {
        quant_ck_prefix(err, "%s", f->path);
        quant_native_free(out);
    }
    return st;
}

const quant_native_tensor *quant_native_owner(const quant_native *n, const quant_st_tensor *t)
{
    if (!n || !n->owner_ || !t || t < n->file->tensors ||
        t >= n->file->tensors + n->file->n_tensors)
        return NULL;
    return n->owner_[t - n->file->tensors];
}

void quant_native_free(quant_native *n)
{
    if (!n) return;
    json_decref(n->meta_);
    free(n->tensors);
    free(n->owner_);
    memset(n, 0, sizeof *n);
}
