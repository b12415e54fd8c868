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

static float load_f32(quant_dtype dtype, const void *src, int64_t i)
{
    switch (dtype) {
    case QUANT_DTYPE_F32:
        return ((const float *)src)[i];
    case QUANT_DTYPE_F16:
        return qn_f16_to_f32(((const uint16_t *)src)[i]);
    case QUANT_DTYPE_BF16:
        return qn_bf16_to_f32(((const uint16_t *)src)[i]);
    case QUANT_DTYPE_F64:
        return (float)((const double *)src)[i];
    case QUANT_DTYPE_F8_E4M3:
        return quant_e4m3fn_to_f32(((const uint8_t *)src)[i]);
    case QUANT_DTYPE_F8_E5M2:
        return quant_e5m2_to_f32(((const uint8_t *)src)[i]);
    default:
        return 0.0f;
    }
}

static void store_f32(quant_dtype dtype, void *dst, int64_t i, float v)
{
    switch (dtype) {
    case QUANT_DTYPE_F32:
        ((float *)dst)[i] = v;
        break;
    case QUANT_DTYPE_F16:
        ((uint16_t *)dst)[i] = qn_f32_to_f16(v);
        break;
    case QUANT_DTYPE_BF16:
        ((uint16_t *)dst)[i] = qn_f32_to_bf16(v);
        break;
    case QUANT_DTYPE_F64:
        ((double *)dst)[i] = v;
        break;
    case QUANT_DTYPE_F8_E4M3:
        ((uint8_t *)dst)[i] = qn_f32_to_e4m3fn(v);
        break;
    case QUANT_DTYPE_F8_E5M2:
        ((uint8_t *)dst)[i] = qn_f32_to_e5m2(v);
        break;
    default:
        break;
    }
}

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
    for (int64_t i = 0; i < n; i++) store_f32(dst_dtype, dst, i, load_f32(src_dtype, src, i));
    return QUANT_OK;
}
