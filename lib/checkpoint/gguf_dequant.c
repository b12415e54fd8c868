/* gguf_dequant.c -- quant_gguf_dequantize_path(): a GGUF file back to float tensors in a
 * safetensors file, every tensor through libquant's ggml dequantizer (F32, F16 and BF16 rows
 * included), names kept, shapes in the user's order (ne reversed). A bounded number of rows is in
 * memory at a time, so memory follows the chunk size, not the tensor; the output appears by
 * rename only.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"
#include "quant_gguf.h"

#define DQ_CHUNK (16u << 20) /* float32 bytes dequantized at a time (at least one row) */

/* One tensor's rows, chunk by chunk: read, dequantize, convert, write. */
static quant_ck_status dequantize_tensor(const quant_gguf_file *f, const quant_gguf_tensor *t,
                                         quant_ctx *ctx, quant_st_writer *w, size_t index,
                                         quant_dtype odt, quant_ck_error *err)
{
    int64_t ne0 = t->ne[0];
    if (ne0 == 0 || t->nrows == 0) return QUANT_CK_OK;
    size_t osize = quant_dtype_size(odt);
    int64_t per = (int64_t)(DQ_CHUNK / sizeof(float)) / ne0;
    if (per < 1) per = 1;
    if (per > t->nrows) per = t->nrows;
    size_t in_len = (size_t)((uint64_t)per * t->row_bytes), fl_len = (size_t)per * ne0 * 4;
    size_t out_len = (size_t)per * ne0 * osize;
    void *in = ck_buf_alloc(in_len), *fl = ck_buf_alloc(fl_len);
    void *out = odt == QUANT_DTYPE_F32 ? fl : ck_buf_alloc(out_len);
    quant_ck_status st = in && fl && out ? QUANT_CK_OK : QUANT_CK_ERR_NOMEM;
    if (st != QUANT_CK_OK) quant_ck_fail(err, st, "out of memory");
    for (int64_t r = 0; st == QUANT_CK_OK && r < t->nrows; r += per) {
        int64_t nr = t->nrows - r < per ? t->nrows - r : per;
        quant_error qe;
        st = quant_gguf_read_rows(f, t, r, nr, in, err);
        if (st == QUANT_CK_OK &&
            (quant_ggml_dequantize(ctx, t->type, in, nr, ne0, fl, &qe) != QUANT_OK ||
             (out != fl && quant_convert(QUANT_DTYPE_F32, fl, odt, out, nr * ne0, &qe))))
            st = quant_ck_fail(err, QUANT_CK_ERR_QUANT, "%s: tensor '%s': %s", f->path, t->name,
                               qe.message);
        if (st == QUANT_CK_OK)
            st = quant_st_writer_pwrite(w, index, (uint64_t)r * (uint64_t)ne0 * osize, out,
                                        (size_t)nr * ne0 * osize, err);
    }
    ck_buf_free(in, in_len);
    ck_buf_free(fl, fl_len);
    if (out != fl) ck_buf_free(out, out_len);
    return st;
}

/* The output tensors: same names, `dtype`, shapes reversed. */
static quant_ck_status plan(const quant_gguf_file *f, quant_st_dtype dtype,
                            quant_st_out_tensor **out, quant_ck_error *err)
{
    quant_st_out_tensor *o = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *o);
    if (!o) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < f->n_tensors; i++) {
        const quant_gguf_tensor *t = &f->tensors[i];
        int64_t shape[QUANT_GGUF_MAX_DIMS];
        o[i] = (quant_st_out_tensor){.name = t->name, .dtype = dtype};
        o[i].rank = quant_gguf_shape(t, shape);
        memcpy(o[i].shape, shape, (size_t)o[i].rank * sizeof *shape);
    }
    *out = o;
    return QUANT_CK_OK;
}

static quant_ck_status run(const quant_gguf_file *f, const char *out, quant_st_dtype dtype,
                           quant_ctx *ctx, quant_ck_error *err)
{
    quant_st_out_tensor *o = NULL;
    quant_st_writer *w = NULL;
    quant_dtype odt = QUANT_DTYPE_F32;
    quant_st_to_quant_dtype(dtype, &odt);
    quant_ck_status st = ck_check_output(out, false, err);
    if (st == QUANT_CK_OK) st = plan(f, dtype, &o, err);
    if (st == QUANT_CK_OK) st = quant_st_writer_new(out, o, f->n_tensors, NULL, NULL, 0, &w, err);
    for (size_t i = 0; st == QUANT_CK_OK && i < f->n_tensors; i++)
        st = dequantize_tensor(f, &f->tensors[i], ctx, w,
                               (size_t)quant_st_writer_index(w, f->tensors[i].name), odt, err);
    if (st == QUANT_CK_OK) st = quant_st_writer_commit(w, err);
    quant_st_writer_free(w);
    free(o);
    return st;
}

quant_ck_status quant_gguf_dequantize_path(const char *in, const char *out, quant_st_dtype dtype,
                                           int threads, quant_ck_error *err)
{
    if (!in || !out) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    if (dtype != QUANT_ST_F32 && dtype != QUANT_ST_BF16 && dtype != QUANT_ST_F16)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "output dtype must be F32, BF16 or F16");
    quant_ctx_options co = {.threads = threads, .isa = QUANT_ISA_AUTO};
    quant_error qe;
    quant_ctx *ctx = quant_ctx_new(&co, &qe);
    if (!ctx) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "libquant: %s", qe.message);
    quant_gguf_file *f = NULL;
    quant_ck_status st = quant_gguf_open(in, &f, err);
    if (st == QUANT_CK_OK) st = run(f, out, dtype, ctx, err);
    quant_gguf_close(f);
    quant_ctx_free(ctx);
    ck_buf_trim();
    return st;
}
