/* ggml_table.c -- the ggml type traits table (one row per ggml type quantd reads or writes) and
 * the public row-wise quantize / dequantize / error entry points over it (quant_ggml.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ggml_blocks.h"
#include "internal.h"

/* ---- the float types: block 1 ------------------------------------------------------------ */

static void dequantize_f32(const void *src, float *x, int64_t n)
{
    memcpy(x, src, (size_t)n * sizeof *x);
}

static void dequantize_f16(const void *src, float *x, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) x[i] = qg_get_f16(p + 2 * i);
}

static void dequantize_bf16(const void *src, float *x, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        x[i] = qn_bf16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
}

static void quantize_f32(const float *x, void *dst, int64_t n, const float *importance)
{
    (void)importance;
    memcpy(dst, x, (size_t)n * sizeof *x);
}

static void quantize_f16(const float *x, void *dst, int64_t n, const float *importance)
{
    (void)importance;
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) qg_put_f16(p + 2 * i, x[i]);
}

static void quantize_bf16(const float *x, void *dst, int64_t n, const float *importance)
{
    (void)importance;
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t b = qn_f32_to_bf16(x[i]);
        p[2 * i] = (uint8_t)(b & 0xff);
        p[2 * i + 1] = (uint8_t)(b >> 8);
    }
}

/* ---- the table ------------------------------------------------------------------------------ */

#define FLOAT_ROW(T, nm, gnm, bytes, fn)                                                           \
    {.type = T,                                                                                    \
     .name = nm,                                                                                   \
     .ggml_name = gnm,                                                                             \
     .block = 1,                                                                                   \
     .block_bytes = bytes,                                                                         \
     .uses_importance = false,                                                                     \
     .quantized = false,                                                                           \
     .quantize_row = quantize_##fn,                                                                \
     .dequantize_row = dequantize_##fn}

/* A block type whose row functions are qg_quantize_<fn> / qg_dequantize_<fn> (ggml_blocks.h). */
#define PACKED_ROW(T, nm, gnm, blk, bytes, imp, fn)                                                \
    {.type = T,                                                                                    \
     .name = nm,                                                                                   \
     .ggml_name = gnm,                                                                             \
     .block = blk,                                                                                 \
     .block_bytes = bytes,                                                                         \
     .uses_importance = imp,                                                                       \
     .quantized = true,                                                                            \
     .quantize_row = qg_quantize_##fn,                                                             \
     .dequantize_row = qg_dequantize_##fn}

static const quant_ggml_traits ggml_rows[] = {
    FLOAT_ROW(QUANT_GGML_F32, "f32", "F32", 4, f32),
    FLOAT_ROW(QUANT_GGML_F16, "f16", "F16", 2, f16),
    FLOAT_ROW(QUANT_GGML_BF16, "bf16", "BF16", 2, bf16),
    /* legacy, non-linear 4-bit and MXFP4 blocks (ggml_legacy.c, ggml_iq4.c, ggml_mxfp4.c) */
    PACKED_ROW(QUANT_GGML_Q8_0, "q8_0", "Q8_0", 32, 34, false, q8_0),
    PACKED_ROW(QUANT_GGML_Q4_0, "q4_0", "Q4_0", 32, 18, true, q4_0),
    PACKED_ROW(QUANT_GGML_Q4_1, "q4_1", "Q4_1", 32, 20, true, q4_1),
    PACKED_ROW(QUANT_GGML_Q5_0, "q5_0", "Q5_0", 32, 22, true, q5_0),
    PACKED_ROW(QUANT_GGML_Q5_1, "q5_1", "Q5_1", 32, 24, true, q5_1),
    PACKED_ROW(QUANT_GGML_Q2_K, "q2_k", "Q2_K", 256, 84, true, q2_k),
    PACKED_ROW(QUANT_GGML_Q3_K, "q3_k", "Q3_K", 256, 110, true, q3_k),
    PACKED_ROW(QUANT_GGML_Q4_K, "q4_k", "Q4_K", 256, 144, true, q4_k),
    PACKED_ROW(QUANT_GGML_Q5_K, "q5_k", "Q5_K", 256, 176, true, q5_k),
    PACKED_ROW(QUANT_GGML_Q6_K, "q6_k", "Q6_K", 256, 210, true, q6_k),
    PACKED_ROW(QUANT_GGML_IQ4_NL, "iq4_nl", "IQ4_NL", 32, 18, true, iq4_nl),
    PACKED_ROW(QUANT_GGML_IQ4_XS, "iq4_xs", "IQ4_XS", 256, 136, true, iq4_xs),
    PACKED_ROW(QUANT_GGML_MXFP4, "mxfp4", "MXFP4", 32, 17, false, mxfp4),
};

#define N_ROWS ((int)(sizeof ggml_rows / sizeof ggml_rows[0]))

const quant_ggml_traits *quant_ggml_traits_get(int type)
{
    for (int i = 0; i < N_ROWS; i++)
        if ((int)ggml_rows[i].type == type) return &ggml_rows[i];
    return NULL;
}

const quant_ggml_traits *quant_ggml_traits_by_name(const char *name)
{
    if (!name) return NULL;
    for (int i = 0; i < N_ROWS; i++)
        if (!strcmp(ggml_rows[i].name, name) || !strcmp(ggml_rows[i].ggml_name, name))
            return &ggml_rows[i];
    return NULL;
}

int64_t quant_ggml_row_bytes(int type, int64_t n_per_row)
{
    const quant_ggml_traits *t = quant_ggml_traits_get(type);
    if (!t || n_per_row <= 0 || n_per_row % t->block) return -1;
    int64_t blocks = n_per_row / t->block;
    if (blocks > INT64_MAX / (int64_t)t->block_bytes) return -1;
    return blocks * (int64_t)t->block_bytes;
}

/* The row checks both directions share: a known type, a row length its block divides. */
static quant_status check_rows(int type, int64_t nrows, int64_t n_per_row,
                               const quant_ggml_traits **out, quant_error *err)
{
    const quant_ggml_traits *t = quant_ggml_traits_get(type);
    if (!t) return quant_fail(err, QUANT_ERR_ARG, "ggml type %d is not one quantd knows", type);
    if (nrows < 0) return quant_fail(err, QUANT_ERR_ARG, "%s: negative row count", t->name);
    if (quant_ggml_row_bytes(type, n_per_row) < 0)
        return quant_fail(err, QUANT_ERR_ARG,
                          "%s: a row of %lld values is not a whole number of its %lld-value "
                          "blocks",
                          t->name, (long long)n_per_row, (long long)t->block);
    if (nrows > 0 && n_per_row > INT64_MAX / nrows)
        return quant_fail(err, QUANT_ERR_ARG, "%s: %lld rows of %lld values overflow", t->name,
                          (long long)nrows, (long long)n_per_row);
    *out = t;
    return QUANT_OK;
}

/* Every value finite (and >= 0 when weights): the quantizers' searches assume both. */
static quant_status check_values(const char *what, const float *v, int64_t nrows,
                                 int64_t n_per_row, bool weights, quant_error *err)
{
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t c = 0; c < n_per_row; c++) {
            float f = v[r * n_per_row + c];
            if (isfinite(f) && (!weights || f >= 0)) continue;
            return quant_fail(err, QUANT_ERR_NONFINITE,
                              "%s value %g at row %lld, column %lld is not %s", what, (double)f,
                              (long long)r, (long long)c, weights ? "finite and >= 0" : "finite");
        }
    return QUANT_OK;
}

typedef struct ggml_run {
    const quant_ggml_traits *t;
    const float *x;
    float *xout;
    const void *src;
    void *dst;
    const float *importance;
    int64_t n_per_row, row_bytes, rows_per_item, nrows;
} ggml_run;

static void quantize_item(void *arg, int64_t item, int worker)
{
    (void)worker;
    const ggml_run *r = arg;
    int64_t r0 = item * r->rows_per_item, r1 = r0 + r->rows_per_item;
    if (r1 > r->nrows) r1 = r->nrows;
    for (int64_t row = r0; row < r1; row++)
        r->t->quantize_row(r->x + row * r->n_per_row, (uint8_t *)r->dst + row * r->row_bytes,
                           r->n_per_row, r->importance);
}

static void dequantize_item(void *arg, int64_t item, int worker)
{
    (void)worker;
    const ggml_run *r = arg;
    int64_t r0 = item * r->rows_per_item, r1 = r0 + r->rows_per_item;
    if (r1 > r->nrows) r1 = r->nrows;
    for (int64_t row = r0; row < r1; row++)
        r->t->dequantize_row((const uint8_t *)r->src + row * r->row_bytes,
                             r->xout + row * r->n_per_row, r->n_per_row);
}

static void run_rows(quant_ctx *ctx, ggml_run *run, quant_pool_fn fn)
{
    run->rows_per_item =
        run->n_per_row >= QUANT_ITEM_ELEMS ? 1 : QUANT_ITEM_ELEMS / run->n_per_row;
    int64_t items = (run->nrows + run->rows_per_item - 1) / run->rows_per_item;
    if (ctx)
        quant_pool_run(ctx->pool, items, fn, run);
    else
        for (int64_t i = 0; i < items; i++) fn(run, i, 0);
}

quant_status quant_ggml_quantize(quant_ctx *ctx, int type, const float *x, int64_t nrows,
                                 int64_t n_per_row, const float *importance, void *dst,
                                 quant_error *err)
{
    quant_error_clear(err);
    const quant_ggml_traits *t;
    QUANT_RETURN_IF_ERR(check_rows(type, nrows, n_per_row, &t, err));
    if (nrows == 0) return QUANT_OK;
    if (!x || !dst) return quant_fail(err, QUANT_ERR_ARG, "%s: x or dst is NULL", t->name);
    QUANT_RETURN_IF_ERR(check_values("x", x, nrows, n_per_row, false, err));
    if (importance)
        QUANT_RETURN_IF_ERR(check_values("importance", importance, 1, n_per_row, true, err));
    ggml_run run = {.t = t,
                    .x = x,
                    .dst = dst,
                    .importance = importance,
                    .n_per_row = n_per_row,
                    .row_bytes = quant_ggml_row_bytes(type, n_per_row),
                    .nrows = nrows};
    run_rows(ctx, &run, quantize_item);
    return QUANT_OK;
}

quant_status quant_ggml_dequantize(quant_ctx *ctx, int type, const void *src, int64_t nrows,
                                   int64_t n_per_row, float *x, quant_error *err)
{
    quant_error_clear(err);
    const quant_ggml_traits *t;
    QUANT_RETURN_IF_ERR(check_rows(type, nrows, n_per_row, &t, err));
    if (nrows == 0) return QUANT_OK;
    if (!src || !x) return quant_fail(err, QUANT_ERR_ARG, "%s: src or x is NULL", t->name);
    ggml_run run = {.t = t,
                    .src = src,
                    .xout = x,
                    .n_per_row = n_per_row,
                    .row_bytes = quant_ggml_row_bytes(type, n_per_row),
                    .nrows = nrows};
    run_rows(ctx, &run, dequantize_item);
    return QUANT_OK;
}

double quant_ggml_row_error(int type, const float *x, int64_t n, const float *importance)
{
    int64_t bytes = quant_ggml_row_bytes(type, n);
    if (bytes < 0 || !x) return NAN;
    const quant_ggml_traits *t = quant_ggml_traits_get(type);
    uint8_t *q = malloc((size_t)bytes);
    float *y = malloc((size_t)n * sizeof *y);
    double e = NAN;
    if (q && y) {
        t->quantize_row(x, q, n, importance);
        t->dequantize_row(q, y, n);
        e = 0;
        for (int64_t j = 0; j < n; j++) {
            double d = (double)x[j] - (double)y[j];
            e += (importance ? (double)importance[j] : 1.0) * d * d;
        }
    }
    free(q);
    free(y);
    return e;
}
