/* noise.c -- the counter-based generator behind stochastic rounding: noise depends only on
 * (seed, tensor name, element index), never on threads or chunking.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "internal.h"

/* splitmix64's finaliser: a bijective 64-bit mixer with full avalanche. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t quant_sr_key(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the name */
    if (name)
        for (const unsigned char *p = (const unsigned char *)name; *p; p++)
            h = (h ^ *p) * 0x100000001b3ull;
    return mix64(mix64(seed) ^ h);
}

float quant_sr_noise(uint64_t key, uint64_t index)
{
    uint64_t z = mix64(key + (index + 1) * 0x9e3779b97f4a7c15ull);
    /* top 24 bits -> [0, 1) in steps of 2^-24, then shift to [-0.5, 0.5): both exact */
    return (float)(z >> 40) * 0x1p-24f - 0.5f;
}
