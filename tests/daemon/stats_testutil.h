/* stats_testutil.h -- what the statistics API tests share: BF16 / F16 values for the safetensors
 * bodies they build with the test kit's kit_st_build (the binary form of a post), and the parser
 * test case that the stats_api suite runs.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef STATS_TESTUTIL_H
#define STATS_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "kit.h"

/* n floats as BF16 / F16 (malloc'd, 2n bytes). */
uint16_t *stt_bf16(const float *v, size_t n);
uint16_t *stt_f16(const float *v, size_t n);

/* The parser tests (test_stats_parse.c): qd_stats_parse_json and qd_stats_parse_safetensors
 * called directly, every malformed case named. */
TCase *stt_tcase_parse(void);

#endif /* STATS_TESTUTIL_H */
