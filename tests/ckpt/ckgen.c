/* ckgen.c -- deterministic test data for the checkpoint suites (their safetensors files come from
 * the test kit's kit_st_write, not the library's writer, so a writer bug cannot hide itself).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckutil.h"

void ck_fill(float *x, size_t n, uint64_t seed, float s)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        float sum = 0;
        for (int k = 0; k < 4; k++) {
            z += 0x9e3779b97f4a7c15ull;
            uint64_t v = z;
            v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
            v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
            v ^= v >> 31;
            sum += (float)(v >> 40) / (float)(1u << 24) - 0.5f;
        }
        x[i] = sum * s;
    }
}
