/* quant_ggml.h -- libquant public API for ggml's block types (llama.cpp's GGUF tensors): one
 * traits row per type, quantizing rows (with optional importance weights) and dequantizing them
 * bit for bit as ggml's to_float does.
 *
 * A ggml block type packs its scales with its codes: a row of n_per_row values (GGUF's ne[0],
 * the contraction axis) is n_per_row / block blocks of block_bytes each, and a tensor is its rows
 * back to back. Block sizes are ggml's (32 or 256); there are no other tilings. The type ids are
 * ggml's `enum ggml_type` values, which are file format.
 *
 * Quality contract: any scales and codes the block can express are
 * valid; the importance-weighted squared error sum_j w_j (x_j - dequant_j)^2 of a row must not
 * exceed that of ggml's own file quantizer (ggml_quantize_chunk) for the same row and
 * importance; importance NULL means every weight is 1. Where ggml's quantizer is a pure function
 * without a search (q8_0), the bytes are ggml's.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_GGML_H
#define QUANT_GGML_H

#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ggml's type ids (ggml.h `enum ggml_type`): stable, file format. Only those quantd reads or
 * writes are named here. */
typedef enum quant_ggml_type {
    QUANT_GGML_F32 = 0,
    QUANT_GGML_F16 = 1,
    QUANT_GGML_Q4_0 = 2,
    QUANT_GGML_Q4_1 = 3,
    QUANT_GGML_Q5_0 = 6,
    QUANT_GGML_Q5_1 = 7,
    QUANT_GGML_Q8_0 = 8,
    QUANT_GGML_Q2_K = 10,
    QUANT_GGML_Q3_K = 11,
    QUANT_GGML_Q4_K = 12,
    QUANT_GGML_Q5_K = 13,
    QUANT_GGML_Q6_K = 14,
    QUANT_GGML_IQ4_NL = 20,
    QUANT_GGML_IQ4_XS = 23,
    QUANT_GGML_BF16 = 30,
    QUANT_GGML_MXFP4 = 39,
    QUANT_GGML_TYPE_LIMIT = 64 /* every id quantd knows is below this */
} quant_ggml_type;

/* Quantizes `n` values of one row (n a multiple of the type's block) into n / block blocks at
 * `dst`. `importance` is NULL or n weights, finite and >= 0, for the same n values. Pure: the
 * same inputs give the same bytes on every ISA and thread count. */
typedef void (*quant_ggml_quantize_fn)(const float *x, void *dst, int64_t n,
                                       const float *importance);
/* Dequantizes n / block blocks at `src` into `n` floats, bit for bit ggml's to_float. */
typedef void (*quant_ggml_dequantize_fn)(const void *src, float *x, int64_t n);

/* One row per ggml type quantd knows (F32, F16 and BF16 included, with block 1). */
typedef struct quant_ggml_traits {
    quant_ggml_type type;      /* ggml's id */
    const char *name;          /* rule / CLI name, lower case: "q4_k", "iq4_nl", "f16" */
    const char *ggml_name;     /* ggml's name, as llama.cpp prints it: "Q4_K", "IQ4_NL", "F16" */
    int64_t block;             /* values per block (1 for F32/F16/BF16) */
    size_t block_bytes;        /* bytes per block */
    bool uses_importance;      /* ggml's quantizer for this type reads an imatrix */
    bool quantized;            /* a block type (not F32/F16/BF16) */
    quant_ggml_quantize_fn quantize_row;
    quant_ggml_dequantize_fn dequantize_row;
} quant_ggml_traits;

/*! quant_ggml_traits_get() :
 * @return : the traits row of ggml type id `type`, or NULL when quantd does not know it
 *           (ids ggml removed or types quantd neither reads nor writes). Static storage. */
QUANT_API const quant_ggml_traits *quant_ggml_traits_get(int type);

/*! quant_ggml_traits_by_name() :
 * @return : the row whose `name` (lower case) or `ggml_name` equals `name`, or NULL. */
QUANT_API const quant_ggml_traits *quant_ggml_traits_by_name(const char *name);

/*! quant_ggml_row_bytes() :
 * @return : bytes of one row of `n_per_row` values of `type`, or -1 when the type is unknown,
 *           n_per_row <= 0 or not a multiple of the type's block, or the size overflows. */
QUANT_API int64_t quant_ggml_row_bytes(int type, int64_t n_per_row);

/*! quant_ggml_quantize() :
 * Quantizes `nrows` rows of `n_per_row` float32 values (row-major at `x`) into `dst`
 * (nrows * quant_ggml_row_bytes() bytes). `importance` is NULL or n_per_row weights, finite and
 * >= 0, shared by every row (as llama.cpp's imatrix is). Rows are shared among ctx's workers;
 * the bytes do not depend on the thread count or ISA. `ctx` may be NULL (one thread).
 * @return : QUANT_OK, or QUANT_ERR_ARG (unknown or unquantized type, n_per_row not a multiple
 *           of the block: the message names the type and the row length), QUANT_ERR_NONFINITE
 *           (a NaN or Inf in x or importance, with its row and column). */
QUANT_API quant_status quant_ggml_quantize(quant_ctx *ctx, int type, const float *x,
                                           int64_t nrows, int64_t n_per_row,
                                           const float *importance, void *dst, quant_error *err);

/*! quant_ggml_dequantize() :
 * Dequantizes `nrows` rows of `n_per_row` values of `type` (F32, F16 and BF16 included) at
 * `src` into float32 at `x`, bit for bit as ggml's to_float.
 * @return : QUANT_OK, or QUANT_ERR_ARG as quant_ggml_quantize(). */
QUANT_API quant_status quant_ggml_dequantize(quant_ctx *ctx, int type, const void *src,
                                             int64_t nrows, int64_t n_per_row, float *x,
                                             quant_error *err);

/*! quant_ggml_row_error() :
 * The importance-weighted squared error sum_j w_j (x_j - y_j)^2 of one row of `n` values
 * quantized as `type` and dequantized again (w_j = 1 when importance is NULL), summed in
 * float64 in index order: the figure the quality contract above compares.
 * @return : the error, or NaN on an argument error or when out of memory. */
QUANT_API double quant_ggml_row_error(int type, const float *x, int64_t n,
                                      const float *importance);

#ifdef __cplusplus
}
#endif

#endif /* QUANT_GGML_H */
