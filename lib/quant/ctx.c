/* ctx.c -- contexts: the chosen kernel table ($QUANT_ISA or CPUID), the thread pool and the size
 * from which quantize stores its codes around the cache.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static quant_status isa_from_env(quant_isa *isa, quant_error *err)
{
    const char *env = getenv("QUANT_ISA");
    *isa = QUANT_ISA_AUTO;
    if (!env || !*env) return QUANT_OK;
    for (int i = 0; i < QUANT_ISA_COUNT; i++) {
        if (strcmp(env, quant_isa_name((quant_isa)i)) == 0) {
            *isa = (quant_isa)i;
            return QUANT_OK;
        }
    }
    return quant_fail(err, QUANT_ERR_ISA,
                      "QUANT_ISA=\"%.32s\" is not one of scalar, avx2, avx512, neon, auto", env);
}

/* CPUs this process may run on (its affinity mask), else the online CPUs. */
static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) n = CPU_COUNT(&set);
    return n < 1 ? 1 : n > QUANT_MAX_THREADS ? QUANT_MAX_THREADS : (int)n;
}

/* quant_ctx_options.stream_min_bytes resolved: 0 becomes the last-level cache size the C
 * library reports (glibc's sysconf: L3, else L2), else QUANT_STREAM_DEFAULT_BYTES. */
static int64_t stream_min_bytes(int64_t opt)
{
    if (opt != 0) return opt;
    long llc = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
    llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return llc > 0 ? (int64_t)llc : QUANT_STREAM_DEFAULT_BYTES;
}

quant_ctx *quant_ctx_new(const quant_ctx_options *opts, quant_error *err)
{
    quant_ctx_options o = {0, QUANT_ISA_AUTO, 0};
    if (opts) o = *opts;
    if (o.isa == QUANT_ISA_AUTO && isa_from_env(&o.isa, err) != QUANT_OK) return NULL;
    if (o.isa == QUANT_ISA_AUTO) o.isa = quant_isa_best();
    if ((unsigned)o.isa >= QUANT_ISA_COUNT) {
        quant_fail(err, QUANT_ERR_ISA, "ISA %d is out of range", (int)o.isa);
        return NULL;
    }
    const quant_kernels *k = quant_kernels_for(o.isa);
    if (!k) {
        quant_fail(err, QUANT_ERR_ISA, "ISA %s is not available on this CPU or in this build",
                   quant_isa_name(o.isa));
        return NULL;
    }
    if (o.threads == 0) o.threads = default_threads();
    quant_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        quant_fail(err, QUANT_ERR_NOMEM, "cannot allocate a context");
        return NULL;
    }
    ctx->k = k;
    ctx->stream_min_bytes = stream_min_bytes(o.stream_min_bytes);
    if (quant_pool_new(o.threads, &ctx->pool, err) != QUANT_OK) {
        free(ctx);
        return NULL;
    }
    return ctx;
}

void quant_ctx_free(quant_ctx *ctx)
{
    if (!ctx) return;
    quant_pool_free(ctx->pool);
    free(ctx);
}

quant_isa quant_ctx_isa(const quant_ctx *ctx)
{
    return ctx->k->isa;
}

int quant_ctx_threads(const quant_ctx *ctx)
{
    return quant_pool_threads(ctx->pool);
}
