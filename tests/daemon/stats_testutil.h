/* stats_testutil.h -- what the statistics API tests share: safetensors bodies built in memory
 * (the binary form of a post), and the parser test case that the stats_api suite runs.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef STATS_TESTUTIL_H
#define STATS_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

/* One tensor of a body: raw little-endian data of the dtype ("F32", "BF16", ...). */
typedef struct stt_tensor {
    const char *name;
    const char *dtype;
    int rank;
    int64_t shape[8];
    const void *data;
    size_t nbytes;
} stt_tensor;

/* A safetensors file image of the n tensors in order (header padded to 8 with spaces);
 * meta_json is the __metadata__ object's text or NULL. malloc'd; *len gets its size. */
unsigned char *stt_build(const stt_tensor *t, size_t n, const char *meta_json, size_t *len);

/* n floats as BF16 / F16 (malloc'd, 2n bytes). */
uint16_t *stt_bf16(const float *v, size_t n);
uint16_t *stt_f16(const float *v, size_t n);

/* The parser tests (test_stats_parse.c): qd_stats_parse_json and qd_stats_parse_safetensors
 * called directly, every malformed case named. */
TCase *stt_tcase_parse(void);

#endif /* STATS_TESTUTIL_H */
