/* stats_testutil.c -- safetensors bodies built in memory for the statistics tests, and F32 values
 * narrowed to BF16 / F16 with libquant's conversions.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "stats_testutil.h"

/* Appends printf output to a growing string. */
static void appendf(char **s, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void appendf(char **s, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    ck_assert_int_ge(k, 0);
    char *p = realloc(*s, *len + (size_t)k + 1);
    ck_assert_ptr_nonnull(p);
    va_start(ap, fmt);
    vsnprintf(p + *len, (size_t)k + 1, fmt, ap);
    va_end(ap);
    *s = p;
    *len += (size_t)k;
}

unsigned char *stt_build(const stt_tensor *t, size_t n, const char *meta_json, size_t *len)
{
    char *h = NULL;
    size_t hl = 0, data = 0;
    appendf(&h, &hl, "{");
    if (meta_json) appendf(&h, &hl, "\"__metadata__\":%s%s", meta_json, n ? "," : "");
    for (size_t i = 0; i < n; i++) {
        appendf(&h, &hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", t[i].name,
                t[i].dtype);
        for (int d = 0; d < t[i].rank; d++)
            appendf(&h, &hl, "%s%" PRId64, d ? "," : "", t[i].shape[d]);
        appendf(&h, &hl, "],\"data_offsets\":[%zu,%zu]}", data, data + t[i].nbytes);
        data += t[i].nbytes;
    }
    appendf(&h, &hl, "}");
    while (hl % 8) appendf(&h, &hl, " ");
    *len = 8 + hl + data;
    unsigned char *out = malloc(*len ? *len : 1);
    ck_assert_ptr_nonnull(out);
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(out + 8, h, hl);
    size_t at = 8 + hl;
    for (size_t i = 0; i < n; i++) {
        if (t[i].nbytes) memcpy(out + at, t[i].data, t[i].nbytes);
        at += t[i].nbytes;
    }
    free(h);
    return out;
}

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
