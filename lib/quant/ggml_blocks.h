/* ggml_blocks.h -- libquant's internal header for ggml's block types: the per-type row
 * quantizers and dequantizers the traits table (ggml_table.c) points at, and the helpers they
 * share (ggml's rounding, fp16 scales, the empty-group threshold).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_GGML_BLOCKS_H
#define QUANT_GGML_BLOCKS_H

#include <stdint.h>
#include <string.h>

#include "numerics.h"
#include "quant_ggml.h"

/* A (sub)block whose largest |x| is below this is stored as all zero (ggml's GROUP_MAX_EPS). */
#define QG_GROUP_MAX_EPS 1e-15f

/* ggml's nearest_int: round half to even by the 1.5 * 2^23 trick, for |f| <= 4194303. */
static inline int qg_nearest_int(float f)
{
    float val = f + 12582912.0f;
    uint32_t i = qn_bits(val);
    return (int)(i & 0x007fffffu) - 0x00400000;
}

/* fp16 scales: round to nearest even (ggml's software GGML_FP32_TO_FP16), and back exactly.
 * Stored little-endian, as GGUF is. */
static inline void qg_put_f16(uint8_t *p, float f)
{
    uint16_t h = qn_f32_to_f16(f);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

static inline float qg_get_f16(const uint8_t *p)
{
    return qn_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* Row quantizers and dequantizers, one pair per type (see quant_ggml_quantize_fn). */
#define QG_DECLARE(t)                                                                              \
    void qg_quantize_##t(const float *x, void *dst, int64_t n, const float *importance);         \
    void qg_dequantize_##t(const void *src, float *x, int64_t n);

/* ggml_legacy.c */
QG_DECLARE(q8_0)
QG_DECLARE(q4_0)
QG_DECLARE(q4_1)
QG_DECLARE(q5_0)
QG_DECLARE(q5_1)
/* ggml_iq4.c */
QG_DECLARE(iq4_nl)
QG_DECLARE(iq4_xs)
/* ggml_mxfp4.c */
QG_DECLARE(mxfp4)
/* ggml_kquants.c */
QG_DECLARE(q2_k)
QG_DECLARE(q3_k)
QG_DECLARE(q4_k)
QG_DECLARE(q5_k)
QG_DECLARE(q6_k)

#undef QG_DECLARE

#endif /* QUANT_GGML_BLOCKS_H */
