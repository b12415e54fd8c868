/* testutil.c -- helpers shared by the unit suites.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>

#include "testutil.h"

quant_ctx *tu_ctx(quant_isa isa, int threads)
{
    quant_ctx_options o = {.threads = threads, .isa = isa};
    quant_error err;
    quant_ctx *ctx = quant_ctx_new(&o, &err);
    ck_assert_msg(ctx != NULL, "quant_ctx_new(%s, %d): %s", quant_isa_name(isa), threads,
                  err.message);
    return ctx;
}

uint64_t tu_next(tu_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int64_t tu_below(tu_rng *r, int64_t n)
{
    return (int64_t)(tu_next(r) % (uint64_t)n);
}

float tu_normal(tu_rng *r, float spread)
{
    float s = 0;
    for (int i = 0; i < 4; i++) s += (float)(tu_next(r) >> 40) * 0x1p-24f;
    float v = (s - 2.0f) * spread;
    if (tu_below(r, 97) == 0) v *= 20.0f; /* outlier */
    return v;
}

void tu_fill(tu_rng *r, float *x, int64_t n, float spread, int special)
{
    for (int64_t i = 0; i < n; i++) {
        x[i] = tu_normal(r, spread);
        if (!special) continue;
        switch (tu_below(r, 40)) {
        case 0:
            x[i] = 0.0f;
            break;
        case 1:
            x[i] = -0.0f;
            break;
        case 2:
            x[i] = 1e-30f;
            break;
        case 3:
            x[i] = (float)(tu_below(r, 64) - 32) + 0.5f;
            break; /* exact halves */
        default:
            break;
        }
    }
}

int tu_isas(quant_isa *out)
{
    int n = 0;
    for (int i = QUANT_ISA_SCALAR; i < QUANT_ISA_COUNT; i++)
        if (quant_isa_supported((quant_isa)i)) out[n++] = (quant_isa)i;
    return n;
}

int tu_iters(int n)
{
    const char *quick = getenv("QUANT_TEST_QUICK");
    if (!quick || !*quick || *quick == '0') return n;
    return n / 8 > 0 ? n / 8 : 1;
}
