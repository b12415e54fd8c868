/* quant_imatrix.h -- llama.cpp's importance matrices (imatrix files) as importance statistics:
 * the GGUF format (W.in_sum2 / W.counts per weight W) and the legacy .dat, read into one entry
 * per weight whose values are llama-quantize's (in_sum2 / counts, or sums / ncall), the mean of
 * the squared activations of each input column: SPEC 9's mean_sq.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_IMATRIX_H
#define QUANT_IMATRIX_H

#include <stddef.h>

#include "quant_pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct quant_imatrix quant_imatrix;

/* Largest legacy file read whole (a 70B model's imatrix is a few MiB). */
#define QUANT_IMATRIX_DAT_MAX (1ull << 30)

/*! quant_imatrix_load() :
 * Reads the imatrix file `path`: a GGUF file (by its magic) with general.type "imatrix" or the
 * imatrix.* keys, or a legacy .dat. Entries whose counts are zero weigh every column 1, as
 * llama-quantize does. Entries of more than one matrix (a model's experts) are refused: one
 * weight vector per tensor is what quantd applies.
 * @return : QUANT_CK_OK with `*out` (free with quant_imatrix_free()); QUANT_CK_ERR_FORMAT naming
 *           the file and entry (truncated, a sum without its counts, non-finite or negative
 *           values, ...); QUANT_CK_ERR_IO; QUANT_CK_ERR_NOMEM. */
QUANT_API quant_ck_status quant_imatrix_load(const char *path, quant_imatrix **out,
                                             quant_ck_error *err);

/*! quant_imatrix_entries() :
 * The entries as importance statistics for quant_pipeline_options (importance_given, importance,
 * n_importance): `act` is the weight's name as the file gives it ("blk.0.attn_q.weight"),
 * `module_path` that name without its last component. Owned by the imatrix. */
QUANT_API const quant_importance *quant_imatrix_entries(const quant_imatrix *m, size_t *n);

/*! quant_imatrix_write() :
 * Writes importance statistics (module paths as Hugging Face's Llama names them or as GGUF does)
 * as a llama.cpp imatrix file in the GGUF format at `path` (published by rename): for each
 * entry the weight W = its GGUF module path + ".weight" ("model.layers.0.self_attn.q_proj" ->
 * "blk.0.attn_q.weight"; other names as they are), W.in_sum2 = its values and W.counts = 1, so
 * that llama.cpp's value, in_sum2 / counts, is the entry's value exactly; general.type
 * "imatrix", imatrix.datasets [`dataset`], imatrix.chunk_count and imatrix.chunk_size 1.
 * Tensors are sorted by name, as llama-imatrix writes them.
 * @return : QUANT_CK_OK; QUANT_CK_ERR_ARG naming two entries that map to one weight, or a name
 *           GGUF cannot hold; QUANT_CK_ERR_IO / QUANT_CK_ERR_ACCESS as the GGUF writer. */
QUANT_API quant_ck_status quant_imatrix_write(const char *path, const quant_importance *e, size_t n,
                                              const char *dataset, quant_ck_error *err);

/*! quant_imatrix_free() : NULL is a no-op. */
QUANT_API void quant_imatrix_free(quant_imatrix *m);

#ifdef __cplusplus
}
#endif
#endif /* QUANT_IMATRIX_H */
