/* imatrix_read.h -- an importance matrix in llama.cpp's GGUF imatrix format read as the
 * llama-quantize tool hands it to llama_model_quantize: per weight, in_sum2 / counts for each
 * column, 1 for every column where the count is 0.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_LLAMACPP_IMATRIX_READ_H
#define QUANT_LLAMACPP_IMATRIX_READ_H

#include <stddef.h>

#include "ggml_abi.h"

/*! lc_imatrix_read() : the entries of `path` into `*out`, a list ending with a NULL name (free
 * with lc_imatrix_free(), also after a failure).
 * @return : 0, or -1 with a message naming the file and entry in `msg`. */
int lc_imatrix_read(const char *path, lc_imatrix_data **out, char *msg, size_t msg_len);

/*! lc_imatrix_find() : the entry of weight `name`, or NULL. */
const lc_imatrix_data *lc_imatrix_find(const lc_imatrix_data *list, const char *name);

/*! lc_imatrix_free() : frees a list; NULL is a no-op. */
void lc_imatrix_free(lc_imatrix_data *list);

#endif /* QUANT_LLAMACPP_IMATRIX_READ_H */
