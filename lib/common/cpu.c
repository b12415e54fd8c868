/* cpu.c -- instruction-set detection (CPUID, probed once per process) and the choice of kernel
 * table per ISA. The table pointers are the library's only global state.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>

#include "internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

static const char *const isa_names[QUANT_ISA_COUNT] = {
    [QUANT_ISA_AUTO] = "auto",     [QUANT_ISA_SCALAR] = "scalar", [QUANT_ISA_AVX2] = "avx2",
    [QUANT_ISA_AVX512] = "avx512", [QUANT_ISA_NEON] = "neon",
};

const char *quant_isa_name(quant_isa isa)
{
    return (unsigned)isa < QUANT_ISA_COUNT ? isa_names[isa] : NULL;
}

static bool cpu_has[QUANT_ISA_COUNT];
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static void probe(void)
{
    cpu_has[QUANT_ISA_SCALAR] = true;
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12),
         f16c = c & (1u << 29);
    if (!osxsave || !avx) return;
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return; /* the OS saves xmm and ymm state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    bool avx2 = b & (1u << 5);
    cpu_has[QUANT_ISA_AVX2] = avx2 && fma && f16c;
    bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));
    cpu_has[QUANT_ISA_AVX512] = cpu_has[QUANT_ISA_AVX2] && avx512 && (xcr0 & 0xe6) == 0xe6;
#elif defined(__aarch64__)
    cpu_has[QUANT_ISA_NEON] = true; /* Advanced SIMD is mandatory on AArch64 */
#endif
}

static const quant_kernels *built_kernels(quant_isa isa)
{
    switch (isa) {
    case QUANT_ISA_SCALAR:
        return &quant_kernels_generic;
#if defined(QUANT_BUILD_AVX2)
    case QUANT_ISA_AVX2:
        return &quant_kernels_avx2;
#endif
#if defined(QUANT_BUILD_AVX512)
    case QUANT_ISA_AVX512:
        return &quant_kernels_avx512;
#endif
#if defined(QUANT_BUILD_NEON)
    case QUANT_ISA_NEON:
        return &quant_kernels_neon;
#endif
    default:
        return NULL;
    }
}

bool quant_isa_supported(quant_isa isa)
{
    if ((unsigned)isa >= QUANT_ISA_COUNT || isa == QUANT_ISA_AUTO) return false;
    pthread_once(&probe_once, probe);
    return cpu_has[isa] && built_kernels(isa) != NULL;
}

const quant_kernels *quant_kernels_for(quant_isa isa)
{
    return quant_isa_supported(isa) ? built_kernels(isa) : NULL;
}

quant_isa quant_isa_best(void)
{
    static const quant_isa order[] = {QUANT_ISA_AVX512, QUANT_ISA_AVX2, QUANT_ISA_NEON};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (quant_isa_supported(order[i])) return order[i];
    return QUANT_ISA_SCALAR;
}
