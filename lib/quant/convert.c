/* convert.c -- dtype conversions between float32 and f16, bf16, f64, fp8 e4m3fn / e5m2.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "internal.h"
#include "numerics.h"

float quant_f16_to_f32(uint16_t h)
{
    return qn_f16_to_f32(h);
}

uint16_t quant_f32_to_f16(float f)
{
    return qn_f32_to_f16(f);
}

float quant_bf16_to_f32(uint16_t b)
{
    return qn_bf16_to_f32(b);
}

uint16_t quant_f32_to_bf16(float f)
{
    return qn_f32_to_bf16(f);
}

float quant_e4m3fn_to_f32(uint8_t code)
{
    return qn_fp8_to_f32(code, 3, 7, 0);
}

uint8_t quant_f32_to_e4m3fn(float f)
{
    return qn_f32_to_e4m3fn(f);
}

float quant_e5m2_to_f32(uint8_t code)
{
    return qn_fp8_to_f32(code, 2, 15, 1);
}

uint8_t quant_f32_to_e5m2(float f)
{
    return qn_f32_to_e5m2(f);
}

/* ---- quant_convert: one loop per (source, destination) pair, picked from a table ------------- */

/* Each float dtype: its element type, its widening to float32 and its narrowing from it. Every
 * conversion goes through float32 (f64 -> f64 too: the API converts by way of float32). */
static inline float f32_in(float v)
{
    return v;
}
static inline float f64_in(double v)
{
    return (float)v;
}
static inline double f64_out(float v)
{
    return v;
}
static inline float e4m3_in(uint8_t c)
{
    return qn_fp8_to_f32(c, 3, 7, 0);
}
static inline float e5m2_in(uint8_t c)
{
    return qn_fp8_to_f32(c, 2, 15, 1);
}

#define CONV_DTYPES(X, ...)                                                                        \
    X(F32, float, f32_in, f32_in, __VA_ARGS__)                                                     \
    X(F16, uint16_t, qn_f16_to_f32, qn_f32_to_f16, __VA_ARGS__)                                    \
    X(BF16, uint16_t, qn_bf16_to_f32, qn_f32_to_bf16, __VA_ARGS__)                                 \
    X(F64, double, f64_in, f64_out, __VA_ARGS__)                                                   \
    X(F8_E4M3, uint8_t, e4m3_in, qn_f32_to_e4m3fn, __VA_ARGS__)                                    \
    X(F8_E5M2, uint8_t, e5m2_in, qn_f32_to_e5m2, __VA_ARGS__)
/* the same list, for the inner expansion (a macro does not expand inside itself) */
#define CONV_DTYPES2(X, ...)                                                                       \
    X(F32, float, f32_in, f32_in, __VA_ARGS__)                                                     \
    X(F16, uint16_t, qn_f16_to_f32, qn_f32_to_f16, __VA_ARGS__)                                    \
    X(BF16, uint16_t, qn_bf16_to_f32, qn_f32_to_bf16, __VA_ARGS__)                                 \
    X(F64, double, f64_in, f64_out, __VA_ARGS__)                                                   \
    X(F8_E4M3, uint8_t, e4m3_in, qn_f32_to_e4m3fn, __VA_ARGS__)                                    \
    X(F8_E5M2, uint8_t, e5m2_in, qn_f32_to_e5m2, __VA_ARGS__)

typedef void (*conv_loop)(const void *src, void *dst, int64_t n);

/* conv_S_D: n elements of dtype S into dtype D (destination first in the inner list). */
#define CONV_LOOP(D, DT, DIN, DOUT, S, ST, SIN, SOUT)                                              \
    static void conv_##S##_##D(const void *src, void *dst, int64_t n)                              \
    {                                                                                              \
        const ST *a = src;                                                                         \
        DT *b = dst;                                                                               \
        for (int64_t i = 0; i < n; i++) b[i] = DOUT(SIN(a[i]));                                    \
    }
#define CONV_LOOPS_FROM(S, ST, SIN, SOUT, unused) CONV_DTYPES2(CONV_LOOP, S, ST, SIN, SOUT)
CONV_DTYPES(CONV_LOOPS_FROM, 0)

#define CONV_ENTRY(D, DT, DIN, DOUT, S)             [QUANT_DTYPE_##S][QUANT_DTYPE_##D] = conv_##S##_##D,
#define CONV_ENTRIES_FROM(S, ST, SIN, SOUT, unused) CONV_DTYPES2(CONV_ENTRY, S)
static const conv_loop conv_table[QUANT_DTYPE_COUNT][QUANT_DTYPE_COUNT] = {
    CONV_DTYPES(CONV_ENTRIES_FROM, 0)};

quant_status quant_convert(quant_dtype src_dtype, const void *src, quant_dtype dst_dtype, void *dst,
                           int64_t n, quant_error *err)
{
    quant_error_clear(err);
    if (!quant_dtype_is_float(src_dtype) || !quant_dtype_is_float(dst_dtype))
        return quant_fail(err, QUANT_ERR_DTYPE, "conversion %s -> %s: both dtypes must be float",
                          quant_dtype_name(src_dtype) ? quant_dtype_name(src_dtype) : "?",
                          quant_dtype_name(dst_dtype) ? quant_dtype_name(dst_dtype) : "?");
    if (n < 0 || (n > 0 && (!src || !dst)))
        return quant_fail(err, QUANT_ERR_ARG, "conversion: bad count or NULL buffer");
    conv_table[src_dtype][dst_dtype](src, dst, n);
    return QUANT_OK;
}
