/* load.c -- reading rows of an input tensor as float32: straight from memory when the row is
 * contiguous float32, otherwise widened/gathered into a worker's bounded scratch buffer.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "internal.h"
#include "numerics.h"

int64_t quant_row_offset(const quant_tensor *x, int64_t row)
{
    int64_t off = 0;
    for (int k = x->rank - 2; k >= 0; k--) {
        off += (row % x->shape[k]) * x->strides[k];
        row /= x->shape[k];
    }
    return off;
}

const char *quant_row_address(const quant_tensor *x, int64_t row, int64_t c0)
{
    int64_t stride = x->rank ? x->strides[x->rank - 1] : 1;
    return (const char *)x->data +
           (quant_row_offset(x, row) + c0 * stride) * (int64_t)quant_dtype_size(x->dtype);
}

bool quant_rows_direct(const quant_tensor *x)
{
    return x->dtype == QUANT_DTYPE_F32 &&
           (x->rank == 0 || x->strides[x->rank - 1] == 1 || x->shape[x->rank - 1] <= 1);
}

static float load_one(quant_dtype dtype, const void *data, int64_t i)
{
    switch (dtype) {
    case QUANT_DTYPE_F32:
        return ((const float *)data)[i];
    case QUANT_DTYPE_F16:
        return qn_f16_to_f32(((const uint16_t *)data)[i]);
    case QUANT_DTYPE_BF16:
        return qn_bf16_to_f32(((const uint16_t *)data)[i]);
    default:
        return (float)((const double *)data)[i];
    }
}

const float *quant_load_row(const quant_kernels *k, const quant_tensor *x, const quant_plan *plan,
                            int64_t row, int64_t c0, int64_t n, float *scratch)
{
    (void)plan;
    int64_t base = quant_row_offset(x, row);
    int64_t stride = x->rank ? x->strides[x->rank - 1] : 1;
    if (quant_rows_direct(x)) return (const float *)x->data + base + c0 * stride;
    if (stride == 1) {
        const char *src = (const char *)x->data + (base + c0) * (int64_t)quant_dtype_size(x->dtype);
        if (x->dtype == QUANT_DTYPE_BF16) {
            k->widen_bf16((const uint16_t *)src, scratch, n);
            return scratch;
        }
        if (x->dtype == QUANT_DTYPE_F16) {
            k->widen_f16((const uint16_t *)src, scratch, n);
            return scratch;
        }
    }
    for (int64_t j = 0; j < n; j++)
        scratch[j] = load_one(x->dtype, x->data, base + (c0 + j) * stride);
    return scratch;
}

quant_status quant_check_input(const quant_tensor *x, quant_error *err)
{
    if (!x) return quant_fail(err, QUANT_ERR_ARG, "input tensor is NULL");
    if (x->dtype != QUANT_DTYPE_F32 && x->dtype != QUANT_DTYPE_F16 &&
        x->dtype != QUANT_DTYPE_BF16 && x->dtype != QUANT_DTYPE_F64)
        return quant_fail(err, QUANT_ERR_DTYPE,
                          "input dtype %s cannot be quantized (expected F32, F16, BF16 or F64)",
                          quant_dtype_name(x->dtype) ? quant_dtype_name(x->dtype) : "?");
    if (x->rank < 0 || x->rank > QUANT_MAX_RANK)
        return quant_fail(err, QUANT_ERR_ARG, "rank %d is outside 0..%d", x->rank, QUANT_MAX_RANK);
    int64_t numel = quant_numel(x->rank, x->shape);
    if (numel < 0) return quant_fail(err, QUANT_ERR_ARG, "shape has a negative dim or overflows");
    if (numel == 0) return QUANT_OK;
    if (!x->data) return quant_fail(err, QUANT_ERR_ARG, "input data is NULL");
    int64_t last = 0;
    for (int k = 0; k < x->rank; k++) {
        int64_t span = x->shape[k] - 1;
        if (x->strides[k] < 0 || (span > 0 && x->strides[k] > (INT64_MAX - last) / span))
            return quant_fail(err, QUANT_ERR_ARG, "stride %lld of axis %d is negative or overflows",
                              (long long)x->strides[k], k);
        last += span * x->strides[k];
    }
    return QUANT_OK;
}
