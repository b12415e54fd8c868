/* dequant.c -- quant_dequantize_path(): a native-layout checkpoint back to float, for
 * evaluation. Each NAME.qvalue (+ .scale, + .zero_point) listed in the `quantization` metadata
 * becomes the float tensor NAME; every other tensor is copied. One tensor at a time (memory
 * follows the largest tensor, not the checkpoint); files and directories appear by rename only.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"

/* A quantized tensor found in a shard: its parts and how it was quantized. */
typedef struct dq_entry {
    const char *name;
    const quant_st_tensor *q, *scale, *zp;
    quant_how how;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
} dq_entry;

typedef struct dq_shard {
    quant_st_file *in;
    json_t *meta; /* the parsed `quantization` value, or NULL */
    size_t n;
    dq_entry *e;
} dq_shard;

static const quant_st_tensor *find_part(const quant_st_file *f, const char *name,
                                        const char *suffix)
{
    char buf[4096];
    if ((size_t)snprintf(buf, sizeof buf, "%s%s", name, suffix) >= sizeof buf) return NULL;
    return quant_st_find(f, buf);
}

static bool is_part(const dq_shard *s, const char *tensor)
{
    for (size_t i = 0; i < s->n; i++) {
        const dq_entry *e = &s->e[i];
        if (e->q->name == tensor || e->scale->name == tensor || (e->zp && e->zp->name == tensor))
            return true;
    }
    return false;
}

/* A microscaling qtype (SPEC 2b) whose tiled axis holds a single tile (dim == the fixed tile,
 * scale dim 1) looks reduced above: tile the last such axis. Any axis of scale dim 1 with that
 * length gives the same dequantized values (one scale covers them all). */
static void microscaling_tile(dq_entry *e)
{
    int64_t fixed = quant_qtype_traits_get(e->how.qtype)->fixed_tile;
    if (!fixed || e->how.n_tiles != 0) return;
    for (int a = e->rank - 1; a >= 0; a--)
        if (e->shape[a] == fixed && a < e->scale->rank && e->scale->shape[a] == 1) {
            e->how.tiles[e->how.n_tiles++] = (quant_tile){.axis = a, .size = fixed};
            return;
        }
}

/* The quant_how that reproduces the stored scale shape: an axis whose scale dim equals the
 * tensor's is channelwise, 1 is reduced, anything between is tiled. */
static quant_ck_status entry_how(dq_entry *e, const json_t *info, quant_ck_error *err)
{
    const char *qtype = json_string_value(json_object_get(info, "qtype"));
    quant_error qe;
    if (!qtype || quant_qtype_parse(qtype, &e->how.qtype, &qe) != QUANT_OK)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "tensor '%s': bad qtype in metadata",
                             e->name);
    quant_how_init(&e->how, e->how.qtype);
    e->how.pack = json_is_true(json_object_get(info, "packed"));
    e->how.calibration = e->zp ? "minmax" : "absmax";
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
        quant_st_nbytes(e->q) != (uint64_t)quant_qvalue_bytes(&e->how, e->rank, e->shape))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s': qvalue/scale shapes do not match the metadata", e->name);
    return QUANT_CK_OK;
}

static quant_ck_status parse_entry(dq_shard *s, const char *name, const json_t *info,
                                   quant_ck_error *err)
{
    dq_entry *e = &s->e[s->n];
    memset(e, 0, sizeof *e);
    e->name = name;
    e->q = find_part(s->in, name, ".qvalue");
    e->scale = find_part(s->in, name, ".scale");
    e->zp = find_part(s->in, name, ".zero_point");
    const json_t *shape = json_object_get(info, "orig_shape");
    e->rank = (int)json_array_size(shape);
    if (!e->q || !e->scale || !json_is_array(shape) || e->rank < 1 || e->rank > QUANT_MAX_RANK)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s': metadata lists it but .qvalue/.scale are missing or "
                             "orig_shape is bad",
                             name);
    for (int a = 0; a < e->rank; a++) {
        e->shape[a] = json_integer_value(json_array_get(shape, (size_t)a));
        if (e->shape[a] < 0)
            return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "tensor '%s': bad orig_shape", name);
    }
    quant_ck_status st = entry_how(e, info, err);
    if (st == QUANT_CK_OK) s->n++;
    return st;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A shard without our `quantization` metadata is copied as it is, unless it is plainly a
 * compressed-tensors shard: copying that would pass quantized codes off as float weights. */
static quant_ck_status refuse_ctensors(const quant_st_file *in, quant_ck_error *err)
{
    for (size_t i = 0; i < in->n_tensors; i++) {
        const char *name = in->tensors[i].name;
        if (ends_with(name, ".weight_packed") || ends_with(name, ".weight_scale"))
            return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                                 "%s: tensor '%s' is compressed-tensors layout; dequantize reads "
                                 "the native layout only",
                                 in->path, name);
    }
    return QUANT_CK_OK;
}

static quant_ck_status shard_parse(dq_shard *s, quant_st_file *in, quant_ck_error *err)
{
    memset(s, 0, sizeof *s);
    s->in = in;
    const char *text = quant_st_meta(in, "quantization");
    if (!text) return refuse_ctensors(in, err);
    json_error_t je;
    s->meta = json_loads(text, 0, &je);
    json_t *tensors = json_object_get(s->meta, "tensors");
    if (!json_is_object(tensors))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: bad `quantization` metadata", in->path);
    s->e = calloc(json_object_size(tensors) + 1, sizeof *s->e);
    if (!s->e) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    const char *name;
    json_t *info;
    json_object_foreach(tensors, name, info)
    {
        quant_ck_status st = parse_entry(s, name, info, err);
        if (st != QUANT_CK_OK) {
            quant_ck_prefix(err, "%s", in->path);
            return st;
        }
    }
    return QUANT_CK_OK;
}

static void shard_free(dq_shard *s)
{
    json_decref(s->meta);
    free(s->e);
}

/* ---- writing ----------------------------------------------------------------------------------
 */

static quant_ck_status read_all(const quant_st_file *f, const quant_st_tensor *t, void **buf,
                                quant_ck_error *err)
{
    size_t n = (size_t)quant_st_nbytes(t);
    *buf = ck_buf_alloc(n);
    if (!*buf) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return quant_st_read(f, t, 0, *buf, n, err);
}

static quant_ck_status dequantize_entry(const dq_shard *s, const dq_entry *e, quant_ctx *ctx,
                                        quant_st_writer *w, size_t index, quant_st_dtype dtype,
                                        quant_ck_error *err)
{
    void *q = NULL, *sraw = NULL, *zraw = NULL, *out = NULL;
    size_t sn = (size_t)quant_numel(e->rank, e->scale->shape);
    float *scale = malloc(sn * sizeof *scale);
    int32_t *zp = e->zp ? malloc(sn * sizeof *zp) : NULL;
    size_t out_len = (size_t)quant_st_writer_nbytes(w, index);
    quant_ck_status st = scale && (!e->zp || zp) ? QUANT_CK_OK : QUANT_CK_ERR_NOMEM;
    if (st == QUANT_CK_OK) st = read_all(s->in, e->q, &q, err);
    if (st == QUANT_CK_OK) st = read_all(s->in, e->scale, &sraw, err);
    if (st == QUANT_CK_OK && e->zp) st = read_all(s->in, e->zp, &zraw, err);
    quant_dtype sdt, zdt = QUANT_DTYPE_I8, odt;
    quant_error qe;
    if (st == QUANT_CK_OK && (!quant_st_to_quant_dtype(e->scale->dtype, &sdt) ||
                              (e->zp && !quant_st_to_quant_dtype(e->zp->dtype, &zdt)) ||
                              quant_convert(sdt, sraw, QUANT_DTYPE_F32, scale, (int64_t)sn, &qe)))
        st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "tensor '%s': bad scale or zero_point dtype",
                           e->name);
    for (size_t i = 0; st == QUANT_CK_OK && zp && i < sn; i++)
        zp[i] = zdt == QUANT_DTYPE_I16  ? ((int16_t *)zraw)[i]
                : zdt == QUANT_DTYPE_U8 ? ((uint8_t *)zraw)[i]
                                        : ((int8_t *)zraw)[i];
    if (st == QUANT_CK_OK && !(out = ck_buf_alloc(out_len))) st = QUANT_CK_ERR_NOMEM;
    if (st == QUANT_CK_OK) {
        quant_st_to_quant_dtype(dtype, &odt);
        quant_tensor t;
        quant_tensor_init(&t, odt, e->rank, e->shape, out, NULL);
        if (quant_dequantize(ctx, &e->how, q, scale, zp, &t, &qe) != QUANT_OK)
            st = quant_ck_fail(err, QUANT_CK_ERR_QUANT, "tensor '%s': %s", e->name, qe.message);
    }
    if (st == QUANT_CK_OK) st = quant_st_writer_pwrite(w, index, 0, out, out_len, err);
    if (st == QUANT_CK_ERR_NOMEM) quant_ck_fail(err, st, "out of memory");
    ck_buf_free(q, e->q ? (size_t)quant_st_nbytes(e->q) : 0);
    ck_buf_free(sraw, (size_t)quant_st_nbytes(e->scale));
    ck_buf_free(zraw, e->zp ? (size_t)quant_st_nbytes(e->zp) : 0);
    ck_buf_free(out, out_len);
    free(scale);
    free(zp);
    return st;
}

static quant_ck_status copy_tensor(const quant_st_file *f, const quant_st_tensor *t,
                                   quant_st_writer *w, size_t index, quant_ck_error *err)
{
    const size_t step = 16u << 20;
    uint64_t total = quant_st_nbytes(t);
    void *buf = ck_buf_alloc(step);
    if (!buf) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    quant_ck_status st = QUANT_CK_OK;
    for (uint64_t off = 0; st == QUANT_CK_OK && off < total; off += step) {
        size_t n = total - off < step ? (size_t)(total - off) : step;
        st = quant_st_read(f, t, off, buf, n, err);
        if (st == QUANT_CK_OK) st = quant_st_writer_pwrite(w, index, off, buf, n, err);
    }
    ck_buf_free(buf, step);
    return st;
}

/* ---- one shard ---------------------------------------------------------------------------------
 */

typedef struct dq_out {
    quant_st_out_tensor *t;
    const dq_entry **entry;         /* per output: the quantized entry, or NULL (copy) */
    const quant_st_tensor **source; /* per output: the copied tensor */
    size_t n;
} dq_out;

static quant_ck_status plan_outputs(const dq_shard *s, quant_st_dtype dtype, dq_out *o,
                                    quant_ck_error *err)
{
    size_t cap = s->in->n_tensors + 1;
    o->t = calloc(cap, sizeof *o->t);
    o->entry = calloc(cap, sizeof *o->entry);
    o->source = calloc(cap, sizeof *o->source);
    if (!o->t || !o->entry || !o->source)
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < s->n; i++) {
        const dq_entry *e = &s->e[i];
        o->t[o->n] = (quant_st_out_tensor){.name = e->name, .dtype = dtype, .rank = e->rank};
        memcpy(o->t[o->n].shape, e->shape, sizeof e->shape);
        o->entry[o->n++] = e;
    }
    for (size_t i = 0; i < s->in->n_tensors; i++) {
        const quant_st_tensor *t = &s->in->tensors[i];
        if (is_part(s, t->name)) continue;
        o->t[o->n] = (quant_st_out_tensor){.name = t->name, .dtype = t->dtype, .rank = t->rank};
        memcpy(o->t[o->n].shape, t->shape, sizeof t->shape);
        o->source[o->n++] = t;
    }
    return QUANT_CK_OK;
}

static void out_free(dq_out *o)
{
    free(o->t);
    free(o->entry);
    free(o->source);
}

static quant_ck_status open_writer(const quant_st_file *in, const dq_out *o, const char *path,
                                   quant_st_writer **w, quant_ck_error *err)
{
    const char **keys = calloc(in->n_meta + 1, sizeof *keys);
    const char **vals = calloc(in->n_meta + 1, sizeof *vals);
    size_t n = 0;
    for (size_t i = 0; keys && vals && i < in->n_meta; i++) {
        if (strcmp(in->meta_keys[i], "quantization") == 0) continue;
        keys[n] = in->meta_keys[i];
        vals[n++] = in->meta_values[i];
    }
    quant_ck_status st = keys && vals ? quant_st_writer_new(path, o->t, o->n, keys, vals, n, w, err)
                                      : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    free(keys);
    free(vals);
    return st;
}

static quant_ck_status dequantize_shard(quant_st_file *in, const char *path, quant_st_dtype dtype,
                                        quant_ctx *ctx, ck_outdir *dir, quant_ck_error *err)
{
    dq_shard s;
    dq_out o = {0};
    quant_st_writer *w = NULL;
    quant_ck_status st = shard_parse(&s, in, err);
    if (st == QUANT_CK_OK) st = plan_outputs(&s, dtype, &o, err);
    if (st == QUANT_CK_OK) st = open_writer(in, &o, path, &w, err);
    for (size_t i = 0; st == QUANT_CK_OK && i < o.n; i++)
        st = o.entry[i] ? dequantize_entry(&s, o.entry[i], ctx, w, i, dtype, err)
                        : copy_tensor(in, o.source[i], w, i, err);
    if (st == QUANT_CK_OK) st = quant_st_writer_commit(w, err);
    if (st == QUANT_CK_OK && dir)
        st = ck_outdir_add_shard(dir, ck_basename(in->path), o.t, o.n, err);
    quant_st_writer_free(w);
    out_free(&o);
    shard_free(&s);
    return st;
}

quant_ck_status quant_dequantize_path(const char *in, const char *out, quant_st_dtype dtype,
                                      int threads, quant_ck_error *err)
{
    if (!in || !out) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    if (dtype != QUANT_ST_F32 && dtype != QUANT_ST_BF16 && dtype != QUANT_ST_F16)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "output dtype must be F32, BF16 or F16");
    quant_ctx_options co = {.threads = threads, .isa = QUANT_ISA_AUTO};
    quant_error qe;
    quant_ctx *ctx = quant_ctx_new(&co, &qe);
    if (!ctx) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "libquant: %s", qe.message);
    ck_shards shards;
    ck_outdir dir = {0};
    ck_dir cwd = {.fd = AT_FDCWD, .shown = NULL, .nofollow = false};
    quant_ck_status st = ck_shards_open(&cwd, in, &shards, err);
    if (st == QUANT_CK_OK) st = ck_check_output(out, shards.is_dir, err);
    if (st == QUANT_CK_OK && shards.is_dir) st = ck_outdir_begin(out, &dir, err);
    for (size_t i = 0; st == QUANT_CK_OK && i < shards.n; i++) {
        char *path = shards.is_dir ? ck_outdir_path(&dir, ck_basename(shards.f[i]->path)) : NULL;
        if (shards.is_dir && !path)
            st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        else
            st = dequantize_shard(shards.f[i], path ? path : out, dtype, ctx,
                                  shards.is_dir ? &dir : NULL, err);
        free(path);
    }
    if (st == QUANT_CK_OK && shards.is_dir) st = ck_outdir_finish(&dir, &shards, NULL, out, err);
    if (dir.tmp || dir.weight_map) ck_outdir_free(&dir);
    ck_shards_close(&shards);
    quant_ctx_free(ctx);
    ck_buf_trim();
    return st;
}
