/* weighted.h -- the contract quant keeps where its blocks are its own rather than ggml's (q4_0,
 * q4_1, q5_0, q5_1, iq4_nl and iq4_xs with an importance matrix): in every block, the error
 * weighted by the importance, sum of qw * (x - y)^2, is no larger than that of the block ggml's
 * quantizer wrote.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_LLAMACPP_WEIGHTED_H
#define QUANT_LLAMACPP_WEIGHTED_H

#include <stddef.h>
#include <stdint.h>

#include "quant_gguf.h"

typedef struct lc_weighted {
    uint64_t blocks; /* compared */
    uint64_t better; /* quant's error strictly lower */
} lc_weighted;

/*! lc_no_worse() :
 * Compares, block by block, the rows `ours` (quant's) and `theirs` (llama.cpp's) of tensor `t`
 * (both of t's type and shape) against the F32 tensor of the same name in `in`, the model both
 * quantized, weighing each column by `qw` (t->ne[0] values); counts into `*w`.
 * @return : 0 when no block of ours has a larger error (beyond a relative 1e-9), else -1 with
 *           the tensor, row, block and both errors in `msg` (or why the input could not be read).
 */
int lc_no_worse(const quant_gguf_file *in, const quant_gguf_tensor *t, const void *ours,
                const void *theirs, const float *qw, lc_weighted *w, char *msg, size_t msg_len);

#endif /* QUANT_LLAMACPP_WEIGHTED_H */
