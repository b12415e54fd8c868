/* gguf_run.c -- the gguf layout's run over a GGUF input, in one pass and bounded memory: every
 * key-value pair copied (the tokenizer's included, llama.cpp's split keys dropped),
 * general.file_type and general.quantization_version set, the tensors in the input's order, each
 * either copied byte for byte (its type unchanged) or read a chunk of rows at a time, widened to
 * float32 (quant_ggml_dequantize) and quantized to its ggml type with its importance
 * (quant_ggml_quantize, the rows shared among the run's threads); the file built under a
 * temporary name and renamed into place, its SHA-256 taken while it is written when asked.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_internal.h"

/* Keys a split input carries that one output file must not (llama-quantize drops them too). */
static const char *const split_keys[] = {"split.no", "split.count", "split.tensors.count"};

typedef struct gguf_write {
    gguf_job *j;
    quant_gguf_writer *w;
    quant_ctx *ctx;
    size_t chunk;    /* input bytes per unit of work */
    void *raw, *out; /* one chunk of input rows, of output rows */
    float *f32;      /* the same rows as float32 */
    size_t raw_cap, out_cap, f32_cap;
    quant_progress progress;
} gguf_write;

static quant_ck_status nomem(quant_ck_error *err)
{
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

static quant_ck_status cancelled(const gguf_write *g, quant_ck_error *err)
{
    atomic_int *c = g->j->opts->cancel;
    if (c && atomic_load(c)) return quant_ck_fail(err, QUANT_CK_ERR_CANCELLED, "cancelled");
    return QUANT_CK_OK;
}

static void report_progress(gguf_write *g, uint64_t bytes)
{
    g->progress.bytes_done += bytes;
    if (g->j->opts->progress) g->j->opts->progress(g->j->opts->progress_user, &g->progress);
}

/* Grows buffer `*p` (capacity `*cap`) to at least `n` bytes. */
static bool reserve(void **p, size_t *cap, size_t n)
{
    if (n <= *cap) return true;
    void *q = realloc(*p, n);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

/* ---- the header ---------------------------------------------------------------------------------
 */

static quant_ck_status declare(gguf_write *g, const char *out, quant_ck_error *err)
{
    gguf_job *j = g->j;
    quant_ck_status st = quant_gguf_writer_new(out, &g->w, err);
    if (st == QUANT_CK_OK)
        st = j->f ? quant_gguf_writer_copy_kvs(g->w, j->f, err) : ck_gguf_hf_kvs(j, g->w, err);
    for (size_t k = 0; st == QUANT_CK_OK && k < sizeof split_keys / sizeof split_keys[0]; k++)
        quant_gguf_writer_remove_kv(g->w, split_keys[k]);
    if (st == QUANT_CK_OK)
        st = quant_gguf_writer_set_u32(g->w, "general.quantization_version", QUANT_GGUF_QNT_VERSION,
                                       err);
    /* Without a mix the file is no llama_ftype: llama.cpp guesses one from the tensors, as it
     * does for any file without the key. */
    if (st == QUANT_CK_OK && j->mix)
        st = quant_gguf_writer_set_u32(g->w, "general.file_type", j->mix->file_type, err);
    else if (st == QUANT_CK_OK)
        quant_gguf_writer_remove_kv(g->w, "general.file_type");
    for (size_t i = 0; st == QUANT_CK_OK && i < j->n; i++) {
        const gguf_src *t = &j->src[i];
        st = quant_gguf_writer_add_tensor(g->w, t->name, t->n_dims, t->ne, j->choice[i].type, NULL,
                                          err);
    }
    if (st == QUANT_CK_OK && j->opts->sha256) st = quant_gguf_writer_hash(g->w, err);
    if (st == QUANT_CK_OK) st = quant_gguf_writer_begin(g->w, err);
    return st;
}

/* ---- the data
 * ------------------------------------------------------------------------------------ */

/* `n` bytes of source `t` from byte `off` of its data, as they are. */
static quant_ck_status read_raw(const gguf_job *j, const gguf_src *t, uint64_t off, void *buf,
                                size_t n, quant_ck_error *err)
{
    return t->gt ? quant_gguf_read(j->f, t->gt, off, buf, n, err)
                 : quant_st_read(t->sf, t->st, off, buf, n, err);
}

/* A tensor whose type does not change: its bytes as they are, a chunk at a time. */
static quant_ck_status copy_tensor(gguf_write *g, const gguf_src *t, quant_ck_error *err)
{
    for (uint64_t off = 0; off < t->nbytes;) {
        size_t n = t->nbytes - off < g->chunk ? (size_t)(t->nbytes - off) : g->chunk;
        if (!reserve(&g->raw, &g->raw_cap, n)) return nomem(err);
        quant_ck_status st = read_raw(g->j, t, off, g->raw, n, err);
        if (st == QUANT_CK_OK) st = quant_gguf_writer_write(g->w, g->raw, n, err);
        if (st == QUANT_CK_OK) st = cancelled(g, err);
        if (st != QUANT_CK_OK) return st;
        off += n;
        report_progress(g, n);
    }
    return QUANT_CK_OK;
}

/* llama.cpp's converter's q/k order (LlamaModel.permute): in each head of hd rows, output row
 * 2i + p is input row p * hd / 2 + i. Rows [r0, r0 + n) hold whole heads. */
static void permute_heads(const float *in, float *out, int64_t n, int64_t row_len, int64_t hd)
{
    for (int64_t h = 0; h < n / hd; h++)
        for (int64_t r = 0; r < hd; r++) {
            int64_t i = r / 2, p = r % 2;
            memcpy(out + (h * hd + r) * row_len, in + (h * hd + p * (hd / 2) + i) * row_len,
                   (size_t)row_len * sizeof *out);
        }
}

/* Rows [r0, r0 + nrows) of a checkpoint tensor as float32 in g->f32: read, widened (through
 * g->out first when the rows are then put in llama.cpp's q/k order). */
static quant_ck_status load_st_rows(gguf_write *g, const gguf_src *t, int64_t r0, int64_t nrows,
                                    quant_ck_error *err)
{
    quant_dtype dt = QUANT_DTYPE_F32;
    quant_st_to_quant_dtype(t->st->dtype, &dt);
    size_t esize = quant_dtype_size(dt), n = (size_t)(nrows * t->ne[0]);
    if (!reserve(&g->raw, &g->raw_cap, n * esize)) return nomem(err);
    if (t->heads && !reserve(&g->out, &g->out_cap, n * sizeof(float))) return nomem(err);
    float *wide = t->heads ? (float *)g->out : g->f32;
    quant_ck_status st =
        quant_st_read(t->sf, t->st, (uint64_t)(r0 * t->ne[0]) * esize, g->raw, n * esize, err);
    if (st != QUANT_CK_OK) return st;
    quant_error qe;
    if (quant_convert(dt, g->raw, QUANT_DTYPE_F32, wide, (int64_t)n, &qe) != QUANT_OK)
        return quant_ck_fail(err, QUANT_CK_ERR_QUANT, "tensor '%s': %s", t->st->name, qe.message);
    if (t->heads) permute_heads(wide, g->f32, nrows, t->ne[0], t->ne[1] / t->heads);
    return QUANT_CK_OK;
}

/* Rows [r0, r0 + nrows) of `t` as float32 in g->f32. */
static quant_ck_status load_rows(gguf_write *g, const gguf_src *t, int64_t r0, int64_t nrows,
                                 quant_ck_error *err)
{
    size_t n_f32 = (size_t)(nrows * t->ne[0]) * sizeof(float);
    if (!reserve((void **)&g->f32, &g->f32_cap, n_f32)) return nomem(err);
    if (!t->gt) return load_st_rows(g, t, r0, nrows, err);
    size_t n_raw = (size_t)(nrows * (int64_t)t->gt->row_bytes);
    if (!reserve(&g->raw, &g->raw_cap, n_raw)) return nomem(err);
    quant_ck_status st = quant_gguf_read_rows(g->j->f, t->gt, r0, nrows, g->raw, err);
    if (st != QUANT_CK_OK) return st;
    quant_error qe;
    if (quant_ggml_dequantize(g->ctx, t->type, g->raw, nrows, t->ne[0], g->f32, &qe) != QUANT_OK)
        return quant_ck_fail(err, QUANT_CK_ERR_QUANT, "tensor '%s': %s", t->name, qe.message);
    return QUANT_CK_OK;
}

static quant_ck_status quantize_tensor(gguf_write *g, size_t i, quant_ck_error *err)
{
    const gguf_src *t = &g->j->src[i];
    int type = g->j->choice[i].type;
    int64_t out_row = quant_ggml_row_bytes(type, t->ne[0]);
    int64_t in_row = (int64_t)(t->ne[0] * sizeof(float));
    int64_t rows_per = (int64_t)g->chunk / (in_row > 0 ? in_row : 1);
    int64_t unit = t->heads ? t->ne[1] / t->heads : 1; /* whole heads when permuting */
    rows_per = rows_per / unit * unit;
    if (rows_per < unit) rows_per = unit;
    const quant_importance *imp = g->j->imp[i];
    for (int64_t r0 = 0; r0 < t->nrows; r0 += rows_per) {
        int64_t nrows = t->nrows - r0 < rows_per ? t->nrows - r0 : rows_per;
        quant_ck_status st = load_rows(g, t, r0, nrows, err);
        if (st != QUANT_CK_OK) return st;
        if (!reserve(&g->out, &g->out_cap, (size_t)(nrows * out_row))) return nomem(err);
        quant_error qe;
        if (quant_ggml_quantize(g->ctx, type, g->f32, nrows, t->ne[0], imp ? imp->w : NULL, g->out,
                                &qe) != QUANT_OK)
            return quant_ck_fail(err, QUANT_CK_ERR_QUANT, "tensor '%s': %s", t->name, qe.message);
        st = quant_gguf_writer_write(g->w, g->out, (size_t)(nrows * out_row), err);
        if (st == QUANT_CK_OK) st = cancelled(g, err);
        if (st != QUANT_CK_OK) return st;
        report_progress(g, t->nbytes / (uint64_t)(t->nrows ? t->nrows : 1) * (uint64_t)nrows);
    }
    return QUANT_CK_OK;
}

/* The dtype a GGUF input tensor reads as (a quantized one: its bytes). */
static quant_st_dtype input_dtype(int type)
{
    return type == QUANT_GGML_F16    ? QUANT_ST_F16
           : type == QUANT_GGML_BF16 ? QUANT_ST_BF16
           : type == QUANT_GGML_F32  ? QUANT_ST_F32
                                     : QUANT_ST_U8;
}

/* The tensor's shape in the user's (PyTorch) order: ne reversed. */
static int src_shape(const gguf_src *t, int64_t *shape)
{
    for (int d = 0; d < t->n_dims; d++) shape[d] = t->ne[t->n_dims - 1 - d];
    return t->n_dims;
}

/* Why a tensor was written as it came (the report's reason). */
static const char *kept_reason(const gguf_src *t, const quant_gguf_choice *c)
{
    if (c->why == QUANT_GGUF_KEPT) return t->n_dims < 2 ? "rank 1" : "llama.cpp never quantizes it";
    if (c->why == QUANT_GGUF_FALLBACK)
        return "no block type fits its row length: F16, as llama-quantize falls back";
    if (c->type != t->type)
        return c->type == QUANT_GGML_F16    ? "converted to F16"
               : c->type == QUANT_GGML_BF16 ? "converted to BF16"
                                            : "converted to F32";
    return "the mix and rules keep its type";
}

static quant_ck_status add_entry(gguf_write *g, size_t i, quant_ck_error *err)
{
    const gguf_job *j = g->j;
    const gguf_src *t = &j->src[i];
    const quant_gguf_choice *c = &j->choice[i];
    int q = ck_gguf_qtype_of(c->type);
    quant_report_entry e = {.name = t->name,
                            .shard = ck_basename(j->in),
                            .quantized = q >= 0 && c->type != t->type,
                            .rule = j->rule[i],
                            .qtype = q >= 0 ? (quant_qtype)q : QUANT_QTYPE_INT8,
                            .dtype = input_dtype(t->type),
                            .bytes_in = t->nbytes,
                            .bytes_out = (uint64_t)quant_ggml_row_bytes(c->type, t->ne[0]) *
                                         (uint64_t)t->nrows,
                            .importance_act = j->imp[i] ? j->imp[i]->act : NULL};
    e.rank = src_shape(t, e.shape);
    if (!e.quantized) e.reason = kept_reason(t, c);
    if (j->report && !ck_report_add_entry(j->report, &e)) return nomem(err);
    return QUANT_CK_OK;
}

static quant_ck_status write_all(gguf_write *g, quant_ck_error *err)
{
    gguf_job *j = g->j;
    g->progress.tensors_total = j->n;
    for (size_t i = 0; i < j->n; i++) g->progress.bytes_total += j->src[i].nbytes;
    g->progress.shard = ck_basename(j->in);
    for (size_t i = 0; i < j->n; i++) {
        const gguf_src *t = &j->src[i];
        bool copy = j->choice[i].type == t->type && t->raw && !t->heads;
        quant_ck_status st = copy ? copy_tensor(g, t, err) : quantize_tensor(g, i, err);
        if (st == QUANT_CK_OK) st = add_entry(g, i, err);
        if (st != QUANT_CK_OK) return st;
        g->progress.tensors_done++;
        report_progress(g, 0);
    }
    return QUANT_CK_OK;
}

static quant_ck_status publish(gguf_write *g, const char *out, quant_ck_error *err)
{
    quant_ck_status st = quant_gguf_writer_commit(g->w, err);
    if (st != QUANT_CK_OK) return st;
    char hex[65];
    uint64_t bytes = quant_gguf_writer_size(g->w);
    bool hashed = quant_gguf_writer_sha256(g->w, hex, &bytes);
    if (g->j->report &&
        !ck_report_add_output(g->j->report, ck_basename(out), bytes, hashed ? hex : NULL))
        return nomem(err);
    return QUANT_CK_OK;
}

static quant_ck_status run(gguf_job *j, const char *out, quant_ck_error *err)
{
    gguf_write g = {.j = j, .chunk = j->opts->chunk_bytes};
    quant_ctx_options co = {.threads = j->opts->threads};
    quant_error qe;
    g.ctx = quant_ctx_new(&co, &qe);
    quant_ck_status st =
        g.ctx ? QUANT_CK_OK : quant_ck_fail(err, QUANT_CK_ERR_QUANT, "%s", qe.message);
    if (st == QUANT_CK_OK) st = declare(&g, out, err);
    if (st == QUANT_CK_OK) st = write_all(&g, err);
    if (st == QUANT_CK_OK) st = publish(&g, out, err);
    quant_gguf_writer_free(g.w); /* removes the temporary of a run that failed */
    quant_ctx_free(g.ctx);
    free(g.raw);
    free(g.out);
    free(g.f32);
    return st;
}

/* ---- the plan -------------------------------------------------------------------------------- */

/* One plan entry: the tensor and its one output (the ggml type's bytes, rows x row bytes). */
static void plan_entry(const gguf_job *j, size_t i, quant_plan_entry *e, quant_plan_output *o)
{
    const gguf_src *t = &j->src[i];
    const quant_gguf_choice *c = &j->choice[i];
    int q = ck_gguf_qtype_of(c->type);
    uint64_t out_bytes = (uint64_t)quant_ggml_row_bytes(c->type, t->ne[0]) * (uint64_t)t->nrows;
    *o = (quant_plan_output){.name = t->name,
                             .dtype = QUANT_ST_U8,
                             .rank = 2,
                             .shape = {t->nrows, (int64_t)(out_bytes / (t->nrows ? t->nrows : 1))},
                             .bytes = out_bytes};
    *e = (quant_plan_entry){.name = t->name,
                            .shard = ck_basename(j->in),
                            .quantized = q >= 0 && c->type != t->type,
                            .rule = j->rule[i],
                            .first_match = j->rule[i],
                            .qtype = q >= 0 ? (quant_qtype)q : QUANT_QTYPE_INT8,
                            .dtype = input_dtype(t->type),
                            .bytes_in = t->nbytes,
                            .bytes_out = out_bytes,
                            .n_outputs = 1,
                            .outputs = o};
    e->rank = src_shape(t, e->shape);
    if (!e->quantized) e->reason = kept_reason(t, c);
    static const char *const by[] = {[QUANT_GGUF_KEPT] = NULL,
                                     [QUANT_GGUF_DEFAULT] = "mix",
                                     [QUANT_GGUF_MIX_RULE] = "mix rule",
                                     [QUANT_GGUF_MANUAL] = "rule",
                                     [QUANT_GGUF_FALLBACK] = "fallback"};
    e->chosen_by = by[c->why];
}

static quant_ck_status plan_doc(const gguf_job *j, quant_plan **out, quant_ck_error *err)
{
    quant_plan_entry *e = calloc(j->n ? j->n : 1, sizeof *e);
    quant_plan_output *o = calloc(j->n ? j->n : 1, sizeof *o);
    quant_ck_status st = e && o ? QUANT_CK_OK : nomem(err);
    for (size_t i = 0; st == QUANT_CK_OK && i < j->n; i++) plan_entry(j, i, &e[i], &o[i]);
    if (st == QUANT_CK_OK)
        st = ck_plan_doc_from_entries(QUANT_LAYOUT_GGUF, e, j->n, j->unused, j->n_unused, out, err);
    free(e);
    free(o);
    return st;
}

quant_ck_status ck_gguf_check(const quant_ruleset *rules, const char *in,
                              const quant_pipeline_options *opts, quant_plan **plan,
                              quant_ck_error *err)
{
    gguf_job j;
    quant_ck_status st = ck_gguf_plan(&j, rules, in, opts, err);
    if (st == QUANT_CK_OK && plan) st = plan_doc(&j, plan, err);
    ck_gguf_job_free(&j);
    return st;
}

quant_ck_status ck_gguf_quantize(const quant_ruleset *rules, const char *in, const char *out,
                                 const quant_pipeline_options *opts, quant_report **report,
                                 quant_ck_error *err)
{
    gguf_job j;
    quant_ck_status st = ck_gguf_plan(&j, rules, in, opts, err);
    quant_report *r = ck_report_new(QUANT_LAYOUT_GGUF, false);
    if (!r && st == QUANT_CK_OK) st = nomem(err);
    j.report = r;
    if (r && j.unused && !ck_report_set_unused(r, j.unused, NULL, j.n_unused) && st == QUANT_CK_OK)
        st = nomem(err);
    if (st == QUANT_CK_OK) st = run(&j, out, err);
    if (st != QUANT_CK_OK) ck_report_drop_outputs(r); /* nothing was published */
    ck_gguf_job_free(&j);
    if (report)
        *report = r;
    else
        quant_report_free(r);
    return st;
}
