/* testutil.h -- helpers shared by the unit suites: contexts per ISA, deterministic random data,
 * bit comparison, and the suite constructors main.c runs.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_TESTUTIL_H
#define QUANT_TESTUTIL_H

#include <check.h>
#include <stdint.h>
#include <string.h>

#include "numerics.h"
#include "quant.h"

/* A context for `isa` with `threads` workers; fails the test on error. */
quant_ctx *tu_ctx(quant_isa isa, int threads);

/* splitmix64 stream. */
typedef struct tu_rng {
    uint64_t s;
} tu_rng;
uint64_t tu_next(tu_rng *r);
/* Uniform integer in [0, n). */
int64_t tu_below(tu_rng *r, int64_t n);
/* Roughly normal float32 with the given spread, plus occasional outliers. */
float tu_normal(tu_rng *r, float spread);
/* Fills x with tu_normal values; `special` != 0 also mixes in zeros, -0, tiny and exact halves. */
void tu_fill(tu_rng *r, float *x, int64_t n, float spread, int special);

/* n, or n / 8 (at least 1) when $QUANT_TEST_QUICK is set: for emulated runs (qemu). */
int tu_iters(int n);

/* ISAs this machine runs, scalar first; returns the count. */
int tu_isas(quant_isa *out);

Suite *suite_qtype(void);
Suite *suite_convert(void);
Suite *suite_calibrate(void);
Suite *suite_scale(void);
Suite *suite_quantize(void);
Suite *suite_pack(void);
Suite *suite_props(void);
Suite *suite_ctx(void);
Suite *suite_microscaling(void);
Suite *suite_mse(void);
Suite *suite_onepass(void);
Suite *suite_fold(void);
Suite *suite_errq(void);
Suite *suite_ggml_legacy(void);
Suite *suite_ggml_kquants(void);

#endif
