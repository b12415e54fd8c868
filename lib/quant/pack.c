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

void quant_unpack_nibbles(const uint8_t *packed, int64_t rows, int64_t n, bool sign_extend,
                          uint8_t *codes)
{
    int64_t in_n = (n + 1) / 2;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *in = packed + r * in_n;
        uint8_t *out = codes + r * n;
        for (int64_t i = 0; i < n; i++) {
            uint8_t v = (uint8_t)((in[i / 2] >> ((i & 1) * 4)) & 0x0fu);
            if (sign_extend && (v & 0x08u)) v |= 0xf0u;
            out[i] = v;
        }
    }
}
