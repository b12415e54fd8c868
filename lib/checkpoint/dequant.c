/* dequant.c -- quant_dequantize_path(): a quantized checkpoint back to float, for evaluation.
 * The reader is chosen per shard by its layout: the native one (a `quantization` metadata entry:
 * each NAME.qvalue (+ .scale, + .zero_point) becomes the float tensor NAME), or
 * compressed-tensors (a config.json whose quantization_config says so -- the directory's, or the
 * one beside a file -- or its tensor names: each
 * P.weight_packed or P.weight with P.weight_scale (+ zero point, global scale, weight_shape)
 * becomes P.weight); every other tensor is copied. A compressed-tensors directory's config.json
 * is written without its quantization_config. One tensor at a time (memory follows the largest
 * tensor, not the checkpoint); files and directories appear by rename only. A GGUF file (found
 * by its magic) goes to quant_gguf_dequantize_path().
 * SPDX-License-Identifier: Apache-2.0
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"
#include "quant_ctensors.h"
#include "quant_gguf.h"
#include "quant_native.h"

typedef struct dq_shard {
    quant_st_file *in;
    quant_native nat; /* its quantized tensors in the native layout */
    quant_ct ct;      /* or in compressed-tensors' */
} dq_shard;

/* The layout of a shard: our `quantization` metadata is the native one; a compressed-tensors
 * config.json beside it, or compressed-tensors weights in it, the other; else plain float. */
static quant_ck_status shard_parse(dq_shard *s, quant_st_file *in, const quant_ct_config *cfg,
                                   quant_ck_error *err)
{
    memset(s, 0, sizeof *s);
    s->in = in;
    if (quant_st_meta(in, "quantization")) return quant_native_read(in, &s->nat, err);
    if (cfg || quant_ct_looks_like(in)) return quant_ct_read(in, cfg, &s->ct, err);
    return QUANT_CK_OK;
}

static void shard_free(dq_shard *s)
{
    quant_native_free(&s->nat);
    quant_ct_free(&s->ct);
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

static quant_ck_status dequantize_entry(const dq_shard *s, const quant_native_tensor *e,
                                        quant_ctx *ctx, quant_st_writer *w, size_t index,
                                        quant_st_dtype dtype, quant_ck_error *err)
{
    void *q = NULL, *sraw = NULL, *zraw = NULL, *out = NULL;
    size_t sn = (size_t)quant_numel(e->rank, e->scale->shape);
    float *scale = malloc(sn * sizeof *scale);
    int32_t *zp = e->zero_point ? malloc(sn * sizeof *zp) : NULL;
    size_t out_len = (size_t)quant_st_writer_nbytes(w, index);
    quant_ck_status st = scale && (!e->zero_point || zp) ? QUANT_CK_OK : QUANT_CK_ERR_NOMEM;
    if (st == QUANT_CK_OK) st = read_all(s->in, e->qvalue, &q, err);
    if (st == QUANT_CK_OK) st = read_all(s->in, e->scale, &sraw, err);
    if (st == QUANT_CK_OK && e->zero_point) st = read_all(s->in, e->zero_point, &zraw, err);
    quant_dtype sdt, zdt = QUANT_DTYPE_I8, odt;
    quant_error qe;
    if (st == QUANT_CK_OK &&
        (!quant_st_to_quant_dtype(e->scale->dtype, &sdt) ||
         (e->zero_point && !quant_st_to_quant_dtype(e->zero_point->dtype, &zdt)) ||
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
    ck_buf_free(q, (size_t)quant_st_nbytes(e->qvalue));
    ck_buf_free(sraw, (size_t)quant_st_nbytes(e->scale));
    ck_buf_free(zraw, e->zero_point ? (size_t)quant_st_nbytes(e->zero_point) : 0);
    ck_buf_free(out, out_len);
    free(scale);
    free(zp);
    return st;
}

static quant_ck_status dequantize_ct_entry(const dq_shard *s, const quant_ct_tensor *e,
                                           quant_ctx *ctx, quant_st_writer *w, size_t index,
                                           quant_st_dtype dtype, quant_ck_error *err)
{
    size_t out_len = (size_t)quant_st_writer_nbytes(w, index);
    void *out = ck_buf_alloc(out_len);
    quant_ck_status st = out ? quant_ct_dequantize(ctx, &s->ct, e, dtype, out, out_len, err)
                             : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    if (st == QUANT_CK_OK) st = quant_st_writer_pwrite(w, index, 0, out, out_len, err);
    ck_buf_free(out, out_len);
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
    const quant_native_tensor **entry; /* per output: the quantized entry, or NULL */
    const quant_ct_tensor **ct;        /* per output: the compressed-tensors weight, or NULL */
    const quant_st_tensor **source;    /* per output: the copied tensor (when both are NULL) */
    size_t n;
} dq_out;

static quant_ck_status plan_outputs(const dq_shard *s, quant_st_dtype dtype, dq_out *o,
                                    quant_ck_error *err)
{
    size_t cap = s->in->n_tensors + 1;
    o->t = calloc(cap, sizeof *o->t);
    o->entry = calloc(cap, sizeof *o->entry);
    o->ct = calloc(cap, sizeof *o->ct);
    o->source = calloc(cap, sizeof *o->source);
    if (!o->t || !o->entry || !o->ct || !o->source)
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < s->nat.n; i++) {
        const quant_native_tensor *e = &s->nat.tensors[i];
        o->t[o->n] = (quant_st_out_tensor){.name = e->name, .dtype = dtype, .rank = e->rank};
        memcpy(o->t[o->n].shape, e->shape, sizeof e->shape);
        o->entry[o->n++] = e;
    }
    for (size_t i = 0; i < s->ct.n; i++) {
        const quant_ct_tensor *e = &s->ct.tensors[i];
        o->t[o->n] = (quant_st_out_tensor){
            .name = e->name, .dtype = dtype, .rank = 2, .shape = {e->shape[0], e->shape[1]}};
        o->ct[o->n++] = e;
    }
    for (size_t i = 0; i < s->in->n_tensors; i++) {
        const quant_st_tensor *t = &s->in->tensors[i];
        if (quant_native_owner(&s->nat, t) || quant_ct_owner(&s->ct, t)) continue;
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
    free(o->ct);
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

static quant_ck_status dequantize_output(const dq_shard *s, const dq_out *o, size_t i,
                                         quant_ctx *ctx, quant_st_writer *w, quant_st_dtype dtype,
                                         quant_ck_error *err)
{
    if (o->entry[i]) return dequantize_entry(s, o->entry[i], ctx, w, i, dtype, err);
    if (o->ct[i]) return dequantize_ct_entry(s, o->ct[i], ctx, w, i, dtype, err);
    return copy_tensor(s->in, o->source[i], w, i, err);
}

static quant_ck_status dequantize_shard(quant_st_file *in, const char *path, quant_st_dtype dtype,
                                        const quant_ct_config *cfg, quant_ctx *ctx, ck_outdir *dir,
                                        quant_ck_error *err)
{
    dq_shard s;
    dq_out o = {0};
    quant_st_writer *w = NULL;
    quant_ck_status st = shard_parse(&s, in, cfg, err);
    if (st == QUANT_CK_OK) st = plan_outputs(&s, dtype, &o, err);
    if (st == QUANT_CK_OK) st = open_writer(in, &o, path, &w, err);
    for (size_t i = 0; st == QUANT_CK_OK && i < o.n; i++)
        st = dequantize_output(&s, &o, i, ctx, w, dtype, err);
    if (st == QUANT_CK_OK) st = quant_st_writer_commit(w, err);
    if (st == QUANT_CK_OK && dir)
        st = ck_outdir_add_shard(dir, ck_basename(in->path), o.t, o.n, err);
    quant_st_writer_free(w);
    out_free(&o);
    shard_free(&s);
    return st;
}

/* A directory's config.json (a file's: the one beside it): its compressed-tensors
 * quantization_config (*cfg, NULL when there is none) and, for a directory, the text the output
 * gets instead (*text, NULL: copied as it is). */
static quant_ck_status read_config(const ck_shards *shards, quant_ct_config **cfg, char **text,
                                   quant_ck_error *err)
{
    struct stat sb;
    char *raw = NULL, *shown = NULL;
    *cfg = NULL;
    *text = NULL;
    if (!shards->is_dir) return quant_ct_config_beside(shards->f[0]->path, cfg, err);
    if (!ck_stat_in(&shards->dir, "config.json", &sb)) return QUANT_CK_OK;
    quant_ck_status st =
        ck_read_small_in(&shards->dir, "config.json", CK_CONFIG_MAX, &raw, NULL, err);
    if (st == QUANT_CK_OK && !(shown = ck_shown_name(&shards->dir, "config.json")))
        st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    if (st == QUANT_CK_OK) st = quant_ct_config_parse(raw, shown, cfg, err);
    /* parsed already: stripping it can only run out of memory */
    if (st == QUANT_CK_OK && *cfg && !(*text = quant_ct_config_strip(raw, NULL)))
        st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    free(raw);
    free(shown);
    return st;
}

quant_ck_status quant_dequantize_path(const char *in, const char *out, quant_st_dtype dtype,
                                      int threads, quant_ck_error *err)
{
    if (!in || !out) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    if (dtype != QUANT_ST_F32 && dtype != QUANT_ST_BF16 && dtype != QUANT_ST_F16)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "output dtype must be F32, BF16 or F16");
    if (quant_gguf_sniff(in)) return quant_gguf_dequantize_path(in, out, dtype, threads, err);
    quant_ctx_options co = {.threads = threads, .isa = QUANT_ISA_AUTO};
    quant_error qe;
    quant_ctx *ctx = quant_ctx_new(&co, &qe);
    if (!ctx) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "libquant: %s", qe.message);
    ck_shards shards;
    ck_outdir dir = {0};
    ck_dir cwd = {.fd = AT_FDCWD, .shown = NULL, .nofollow = false};
    quant_ct_config *cfg = NULL;
    char *config_text = NULL;
    quant_ck_status st = ck_shards_open(&cwd, in, &shards, err);
    if (st == QUANT_CK_OK) st = read_config(&shards, &cfg, &config_text, err);
    if (st == QUANT_CK_OK) st = ck_check_output(out, shards.is_dir, err);
    if (st == QUANT_CK_OK && shards.is_dir) st = ck_outdir_begin(out, &dir, err);
    for (size_t i = 0; st == QUANT_CK_OK && i < shards.n; i++) {
        char *path = shards.is_dir ? ck_outdir_path(&dir, ck_basename(shards.f[i]->path)) : NULL;
        if (shards.is_dir && !path)
            st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        else
            st = dequantize_shard(shards.f[i], path ? path : out, dtype, cfg, ctx,
                                  shards.is_dir ? &dir : NULL, err);
        free(path);
    }
    if (st == QUANT_CK_OK && shards.is_dir)
        st = ck_outdir_finish(&dir, &shards, config_text, out, err);
    if (dir.tmp || dir.weight_map) ck_outdir_free(&dir);
    quant_ct_config_free(cfg);
    free(config_text);
    ck_shards_close(&shards);
    quant_ctx_free(ctx);
    ck_buf_trim();
    return st;
}
