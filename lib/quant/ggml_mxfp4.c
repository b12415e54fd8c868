/* ggml_mxfp4.c -- ggml's MXFP4 block (32 values: one E8M0 scale byte, then 16 bytes of 4-bit
 * E2M1 codes, nibble j holding value j low and value j + 16 high): dequantization bit for bit
 * as ggml's to_float and ggml's reference quantizer, which is also its file quantizer (it reads
 * no importance).
 * SPDX-License-Identifier: Apache-2.0
 *
 * ggml stores E2M1 values doubled (levels below) and halves the scale: a value is
 * levels[q] * 2^(e - 128); e = 0 and 1 are the float32 subnormals 2^-128 and 2^-127.
 * The scale of a block with largest magnitude amax > 0 is e = floor(log2(amax)) - 2 + 127, with
 * log2 rounded to float32 before the floor as ggml's log2f call does: for amax just below a
 * power of two the rounded logarithm is that power's exponent, and e is one higher than the
 * float's exponent field says. This file rounds the float64 logarithm to float32 instead of
 * calling log2f: for every positive float32 its floor equals that of glibc's log2f (compared
 * over all 2^31 of them; the tests compare the values next to every power of two), and any
 * float64 log2 good to a few float64 ulps gives the same e, so the bytes do not depend on the C
 * library's log2f. Extremes, defined here where ggml's C is not:
 *   - amax = 0: e = 0 and every code 0, as ggml;
 *   - amax < 2^-125 (e would be -1 .. -24; ggml's conversion to uint8_t is undefined there and
 *     an x86-64 build wraps it to 0xff .. 0xe8, a huge scale that flushes the block to zero,
 *     and 0xff is refused by ggml's own row validation): e = 0, the smallest scale, whose
 *     levels reach 12 * 2^-128 > amax;
 *   - the largest e any finite float reaches is 253, so e = 0xff (NaN in E8M0) is never stored.
 * Each value takes the level with the smallest |level * d - x|, the first on ties.
 */
#include <math.h>

#include "ggml_blocks.h"

#define QK 32

/* ggml's kvalues_mxfp4: E2M1 doubled, index 8 is -0. */
static const int8_t levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e - 128) as a float32 (ggml's GGML_E8M0_TO_FP32_HALF). */
static float e8m0_half(uint8_t e)
{
    return qn_float(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* The scale byte of a block whose largest magnitude is amax (see the file comment). */
static uint8_t block_exponent(float amax)
{
    if (!(amax > 0.0f)) return 0;
    float lg = (float)log2((double)amax);
    int e = (int)floorf(lg) - 2 + 127;
    return (uint8_t)(e < 0 ? 0 : e);
}

/* The first level index with the smallest |levels[i] * d - x|. */
static uint8_t nearest_level(float x, float d)
{
    int best = 0;
    float best_err = fabsf((float)levels[0] * d - x);
    for (int i = 1; i < 16; i++) {
        float err = fabsf((float)levels[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return (uint8_t)best;
}

void qg_quantize_mxfp4(const float *x, void *dst, int64_t n, const float *importance)
{
    (void)importance;
    uint8_t *b = dst;
    for (int64_t ib = 0; ib < n / QK; ib++, x += QK, b += 17) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        uint8_t e = block_exponent(amax);
        float d = e8m0_half(e);
        b[0] = e;
        for (int j = 0; j < QK / 2; j++)
            b[1 + j] = (uint8_t)(nearest_level(x[j], d) | (nearest_level(x[j + 16], d) << 4));
    }
}

void qg_dequantize_mxfp4(const void *src, float *x, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t ib = 0; ib < n / QK; ib++, b += 17, x += QK) {
        float d = e8m0_half(b[0]);
        for (int j = 0; j < QK / 2; j++) {
            x[j] = (float)levels[b[1 + j] & 0x0f] * d;
            x[j + 16] = (float)levels[b[1 + j] >> 4] * d;
        }
    }
}
