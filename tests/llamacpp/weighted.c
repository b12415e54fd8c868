/* weighted.c -- quant's own blocks no worse than ggml's by the importance-weighted error
 * (weighted.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weighted.h"

#define SLACK 1e-9 /* relative: float64 sums of the same terms in another order */

static double block_error(const float *x, const float *y, const float *qw, int64_t n)
{
    double e = 0;
    for (int64_t j = 0; j < n; j++) {
        double d = (double)x[j] - (double)y[j];
        e += (double)qw[j] * d * d;
    }
    return e;
}

/* Row `r`: x, quant's and llama.cpp's values, block by block. */
static int compare_row(const quant_gguf_tensor *t, int64_t r, const float *x, const float *yo,
                       const float *yt, const float *qw, lc_weighted *w, char *msg, size_t msg_len)
{
    int64_t blk = t->traits->block;
    for (int64_t b = 0; b < t->ne[0] / blk; b++) {
        double eo = block_error(x + b * blk, yo + b * blk, qw + b * blk, blk);
        double et = block_error(x + b * blk, yt + b * blk, qw + b * blk, blk);
        w->blocks++;
        w->better += eo < et;
        if (eo > et * (1 + SLACK)) {
            snprintf(msg, msg_len,
                     "tensor '%s' (%s): row %" PRId64 ", block %" PRId64
                     ": weighted error %.9g, llama.cpp's %.9g",
                     t->name, t->traits->name, r, b, eo, et);
            return -1;
        }
    }
    return 0;
}

int lc_no_worse(const quant_gguf_file *in, const quant_gguf_tensor *t, const void *ours,
                const void *theirs, const float *qw, lc_weighted *w, char *msg, size_t msg_len)
{
    const quant_gguf_tensor *src = quant_gguf_find_tensor(in, t->name);
    if (!src || src->type != QUANT_GGML_F32 || memcmp(src->ne, t->ne, sizeof t->ne)) {
        snprintf(msg, msg_len, "%s: no F32 tensor '%s' of its shape", in->path, t->name);
        return -1;
    }
    size_t n = (size_t)t->ne[0];
    float *x = malloc(3 * n * sizeof(float) + 1), *yo = x + n, *yt = x + 2 * n;
    int rc = x ? 0 : -1;
    if (!x) snprintf(msg, msg_len, "tensor '%s': out of memory", t->name);
    for (int64_t r = 0; r < t->nrows && !rc; r++) {
        quant_ck_error err;
        if (quant_gguf_read_rows(in, src, r, 1, x, &err)) {
            snprintf(msg, msg_len, "%s", err.message);
            rc = -1;
            break;
        }
        t->traits->dequantize_row((const char *)ours + r * t->row_bytes, yo, t->ne[0]);
        t->traits->dequantize_row((const char *)theirs + r * t->row_bytes, yt, t->ne[0]);
        rc = compare_row(t, r, x, yo, yt, qw, w, msg, msg_len);
    }
    free(x);
    return rc;
}
