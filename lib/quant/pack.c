/* pack.c -- packing of <= 4-bit codes two per byte along the last axis (SPEC section 7).
 * SPDX-License-Identifier: Apache-2.0
 */
#include "internal.h"

void quant_pack_nibbles(const uint8_t *codes, int64_t rows, int64_t n, uint8_t *packed)
{
    int64_t out_n = (n + 1) / 2;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *in = codes + r * n;
        uint8_t *out = packed + r * out_n;
        int64_t i = 0;
        for (; i + 1 < n; i += 2)
            out[i / 2] = (uint8_t)((in[i] & 0x0fu) | (uint8_t)(in[i + 1] << 4));
        if (i < n) out[i / 2] = in[i] & 0x0fu;
    }
}

/* One row: a byte gives its low nibble then its high one. Written as two branch-free loops (one
 * per extension) so the compiler can vectorise them; the measure and dequantize passes run it on
 * every packed span. */
static void unpack_row(const uint8_t *in, int64_t n, bool sign_extend, uint8_t *out)
{
    int64_t pairs = n / 2;
    if (sign_extend) /* (v ^ 8) - 8 sign-extends the 4-bit v */
        for (int64_t j = 0; j < pairs; j++) {
            out[2 * j] = (uint8_t)(((in[j] & 0x0fu) ^ 0x08u) - 0x08u);
            out[2 * j + 1] = (uint8_t)(((unsigned)(in[j] >> 4) ^ 0x08u) - 0x08u);
        }
    else
        for (int64_t j = 0; j < pairs; j++) {
            out[2 * j] = in[j] & 0x0fu;
            out[2 * j + 1] = (uint8_t)(in[j] >> 4);
        }
    if (n & 1) {
        uint8_t v = in[pairs] & 0x0fu;
        out[n - 1] = sign_extend && (v & 0x08u) ? (uint8_t)(v | 0xf0u) : v;
    }
}

void quant_unpack_nibbles(const uint8_t *packed, int64_t rows, int64_t n, bool sign_extend,
                          uint8_t *codes)
{
    int64_t in_n = (n + 1) / 2;
    for (int64_t r = 0; r < rows; r++) unpack_row(packed + r * in_n, n, sign_extend, codes + r * n);
}
