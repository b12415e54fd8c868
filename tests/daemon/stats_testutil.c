/* stats_testutil.c -- F32 values narrowed to BF16 / F16 with libquant's conversions, for the
 * statistics tests' safetensors bodies.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>

#include "quant.h"
#include "stats_testutil.h"

uint16_t *stt_bf16(const float *v, size_t n)
{
    uint16_t *h = malloc(n * 2 + 1);
    ck_assert_ptr_nonnull(h);
    for (size_t i = 0; i < n; i++) h[i] = quant_f32_to_bf16(v[i]);
    return h;
}

uint16_t *stt_f16(const float *v, size_t n)
{
    uint16_t *h = malloc(n * 2 + 1);
    ck_assert_ptr_nonnull(h);
    for (size_t i = 0; i < n; i++) h[i] = quant_f32_to_f16(v[i]);
    return h;
}
