/* qtype.c -- the qtype traits table (one row per qtype, SPEC section 2), dtype facts and qtype
 * name parsing.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <float.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "numerics.h"
#include "quant_ggml.h"

const float quant_nf4_levels[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

#define INT_CONVERT(name, lo, hi)                                                                  \
    static int32_t name(float v)                                                                   \
    {                                                                                              \
        return qn_convert_int(v, (float)(lo), (float)(hi));                                        \
    }
INT_CONVERT(convert_int2, -2, 1)
INT_CONVERT(convert_int3, -4, 3)
INT_CONVERT(convert_int4, -8, 7)
INT_CONVERT(convert_int5, -16, 15)
INT_CONVERT(convert_int6, -32, 31)
INT_CONVERT(convert_int7, -64, 63)
INT_CONVERT(convert_int8, -128, 127)
INT_CONVERT(convert_int16, -32768, 32767)
INT_CONVERT(convert_uint4, 0, 15)
INT_CONVERT(convert_uint8, 0, 255)

static float level_int(int32_t code)
{
    return (float)code;
}

static int32_t convert_nf4(float v)
{
    return qn_nf4_index(v);
}

static float level_nf4(int32_t code)
{
    return quant_nf4_levels[code & 15];
}

static int32_t convert_e4m3(float v)
{
    return qn_quant_e4m3fn(v);
}

static float level_e4m3(int32_t code)
{
    return qn_fp8_to_f32((uint8_t)code, 3, 7, 0);
}

const float quant_e2m1_levels[16] = {
    0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f,
};

static int32_t convert_e2m1(float v)
{
    return qn_quant_e2m1(v);
}

static float level_e2m1(int32_t code)
{
    return qn_e2m1_to_f32((uint8_t)code);
}

static int32_t convert_e5m2(float v)
{
    return qn_quant_e5m2(v);
}

static float level_e5m2(int32_t code)
{
    return qn_fp8_to_f32((uint8_t)code, 2, 15, 1);
}

#define INT_ROW(q, nm, b, store, lo, hi, bnd, zpd, conv)                                           \
    [q] = {.name = nm,                                                                             \
           .bits = b,                                                                              \
           .kind = QUANT_CODE_INT,                                                                 \
           .storage = store,                                                                       \
           .packable = (b) <= 4,                                                                   \
           .symmetric_bound = bnd,                                                                 \
           .asymmetric_allowed = true,                                                             \
           .qmin = lo,                                                                             \
           .qmax = hi,                                                                             \
           .zero_point_dtype = zpd,                                                                \
           .convert = conv,                                                                        \
           .level = level_int}

/* Microscaling rows (SPEC 2b): element format, fixed tile, bound B, scale rule, OAS constant C
 * (60/31 and 12/7 rounded to float32: 1.9354838132858276, 1.7142857313156128). */
#define MX_ROW(q, nm, b, knd, store, bnd, tile, skind, c, conv, lvl)                               \
    [q] = {.name = nm,                                                                             \
           .bits = b,                                                                              \
           .kind = knd,                                                                            \
           .storage = store,                                                                       \
           .packable = (b) <= 4,                                                                   \
           .symmetric_bound = bnd,                                                                 \
           .asymmetric_allowed = false,                                                            \
           .qmin = 0,                                                                              \
           .qmax = 0,                                                                              \
           .zero_point_dtype = QUANT_DTYPE_I8,                                                     \
           .convert = conv,                                                                        \
           .level = lvl,                                                                           \
           .fixed_tile = tile,                                                                     \
           .scale_kind = skind,                                                                    \
           .scale_constant = c}
/* ggml's block types: codes and scales in one block; quant_ggml.h quantizes them. */
#define GGML_ROW(q, nm, b, block, gtype)                                                           \
    [q] = {.name = nm,                                                                             \
           .bits = b,                                                                              \
           .kind = QUANT_CODE_GGML,                                                                \
           .storage = QUANT_DTYPE_U8,                                                              \
           .packable = false,                                                                      \
           .symmetric_bound = 1.0f,                                                                \
           .asymmetric_allowed = false,                                                            \
           .zero_point_dtype = QUANT_DTYPE_I8,                                                     \
           .fixed_tile = block,                                                                    \
           .ggml_type = gtype}
#define OAS_C_FP8 ((float)(60.0 / 31.0))
#define OAS_C_FP4 ((float)(12.0 / 7.0))

/* Symmetric bound B = qmax + 0.5 for integers (Qwix: the qmax bucket covers [qmax-0.5, qmax+0.5)),
 * except int16, where SPEC and Qwix use 32768 (the TFLite/QATv3 convention). */
static const quant_qtype_traits traits_table[QUANT_QTYPE_COUNT] = {
    INT_ROW(QUANT_QTYPE_INT2, "int2", 2, QUANT_DTYPE_I8, -2, 1, 1.5f, QUANT_DTYPE_I8, convert_int2),
    INT_ROW(QUANT_QTYPE_INT3, "int3", 3, QUANT_DTYPE_I8, -4, 3, 3.5f, QUANT_DTYPE_I8, convert_int3),
    INT_ROW(QUANT_QTYPE_INT4, "int4", 4, QUANT_DTYPE_I8, -8, 7, 7.5f, QUANT_DTYPE_I8, convert_int4),
    INT_ROW(QUANT_QTYPE_INT5, "int5", 5, QUANT_DTYPE_I8, -16, 15, 15.5f, QUANT_DTYPE_I8,
            convert_int5),
    INT_ROW(QUANT_QTYPE_INT6, "int6", 6, QUANT_DTYPE_I8, -32, 31, 31.5f, QUANT_DTYPE_I8,
            convert_int6),
    INT_ROW(QUANT_QTYPE_INT7, "int7", 7, QUANT_DTYPE_I8, -64, 63, 63.5f, QUANT_DTYPE_I8,
            convert_int7),
    INT_ROW(QUANT_QTYPE_INT8, "int8", 8, QUANT_DTYPE_I8, -128, 127, 127.5f, QUANT_DTYPE_I8,
            convert_int8),
    INT_ROW(QUANT_QTYPE_INT16, "int16", 16, QUANT_DTYPE_I16, -32768, 32767, 32768.0f,
            QUANT_DTYPE_I16, convert_int16),
    INT_ROW(QUANT_QTYPE_UINT4, "uint4", 4, QUANT_DTYPE_U8, 0, 15, 15.5f, QUANT_DTYPE_U8,
            convert_uint4),
    INT_ROW(QUANT_QTYPE_UINT8, "uint8", 8, QUANT_DTYPE_U8, 0, 255, 255.5f, QUANT_DTYPE_U8,
            convert_uint8),
    [QUANT_QTYPE_NF4] = {.name = "nf4",
                         .bits = 4,
                         .kind = QUANT_CODE_TABLE,
                         .storage = QUANT_DTYPE_U8,
                         .packable = true,
                         .symmetric_bound = 1.0f,
                         .asymmetric_allowed = false,
                         .qmin = 0,
                         .qmax = 15,
                         .zero_point_dtype = QUANT_DTYPE_U8,
                         .convert = convert_nf4,
                         .level = level_nf4},
    [QUANT_QTYPE_FP8_E4M3FN] = {.name = "float8_e4m3fn",
                                .bits = 8,
                                .kind = QUANT_CODE_FP8,
                                .storage = QUANT_DTYPE_F8_E4M3,
                                .packable = false,
                                .symmetric_bound = QN_E4M3_MAX,
                                .asymmetric_allowed = false,
                                .qmin = 0,
                                .qmax = 0,
                                .zero_point_dtype = QUANT_DTYPE_I8,
                                .convert = convert_e4m3,
                                .level = level_e4m3},
    [QUANT_QTYPE_FP8_E5M2] = {.name = "float8_e5m2",
                              .bits = 8,
                              .kind = QUANT_CODE_FP8,
                              .storage = QUANT_DTYPE_F8_E5M2,
                              .packable = false,
                              .symmetric_bound = QN_E5M2_MAX,
                              .asymmetric_allowed = false,
                              .qmin = 0,
                              .qmax = 0,
                              .zero_point_dtype = QUANT_DTYPE_I8,
                              .convert = convert_e5m2,
                              .level = level_e5m2},
    MX_ROW(QUANT_QTYPE_MXFP8, "mxfp8", 8, QUANT_CODE_FP8, QUANT_DTYPE_F8_E4M3, QN_E4M3_MAX, 32,
           QUANT_SCALE_MX, OAS_C_FP8, convert_e4m3, level_e4m3),
    MX_ROW(QUANT_QTYPE_MXFP8_16, "mxfp8_16", 8, QUANT_CODE_FP8, QUANT_DTYPE_F8_E4M3, QN_E4M3_MAX,
           16, QUANT_SCALE_MX, OAS_C_FP8, convert_e4m3, level_e4m3),
    [QUANT_QTYPE_MXFP4] = {.name = "mxfp4",
                           .bits = 4,
                           .kind = QUANT_CODE_FP4,
                           .storage = QUANT_DTYPE_U8,
                           .packable = true,
                           .symmetric_bound = 6.0f,
                           .asymmetric_allowed = false,
                           .zero_point_dtype = QUANT_DTYPE_I8,
                           .convert = convert_e2m1,
                           .level = level_e2m1,
                           .fixed_tile = 32,
                           .scale_kind = QUANT_SCALE_MX,
                           .scale_constant = OAS_C_FP4,
                           .ggml_type = QUANT_GGML_MXFP4},
    MX_ROW(QUANT_QTYPE_NVFP4, "nvfp4", 4, QUANT_CODE_FP4, QUANT_DTYPE_U8, 6.0f, 16,
           QUANT_SCALE_NVFP4, 0.0f, convert_e2m1, level_e2m1),
    GGML_ROW(QUANT_QTYPE_Q8_0, "q8_0", 8, 32, QUANT_GGML_Q8_0),
    GGML_ROW(QUANT_QTYPE_Q4_0, "q4_0", 4, 32, QUANT_GGML_Q4_0),
    GGML_ROW(QUANT_QTYPE_Q4_1, "q4_1", 4, 32, QUANT_GGML_Q4_1),
    GGML_ROW(QUANT_QTYPE_Q5_0, "q5_0", 5, 32, QUANT_GGML_Q5_0),
    GGML_ROW(QUANT_QTYPE_Q5_1, "q5_1", 5, 32, QUANT_GGML_Q5_1),
    GGML_ROW(QUANT_QTYPE_Q2_K, "q2_k", 2, 256, QUANT_GGML_Q2_K),
    GGML_ROW(QUANT_QTYPE_Q3_K, "q3_k", 3, 256, QUANT_GGML_Q3_K),
    GGML_ROW(QUANT_QTYPE_Q4_K, "q4_k", 4, 256, QUANT_GGML_Q4_K),
    GGML_ROW(QUANT_QTYPE_Q5_K, "q5_k", 5, 256, QUANT_GGML_Q5_K),
    GGML_ROW(QUANT_QTYPE_Q6_K, "q6_k", 6, 256, QUANT_GGML_Q6_K),
    GGML_ROW(QUANT_QTYPE_IQ4_NL, "iq4_nl", 4, 32, QUANT_GGML_IQ4_NL),
    GGML_ROW(QUANT_QTYPE_IQ4_XS, "iq4_xs", 4, 256, QUANT_GGML_IQ4_XS),
};

float quant_nvfp4_global_scale(float amax)
{
    float a = amax > FLT_MIN ? amax : FLT_MIN;
    float g = 2688.0f * (1.0f / a);
    return qn_nonfinite(g) ? 1.0f : g;
}

const quant_qtype_traits *quant_qtype_traits_get(quant_qtype qtype)
{
    if ((unsigned)qtype >= QUANT_QTYPE_COUNT) return NULL;
    return &traits_table[qtype];
}

/* Names other tools give our qtypes (the suggestion a refusal makes). */
static const struct {
    const char *name, *hint;
} qtype_hints[] = {
    {"fp8", "float8_e4m3fn"},
    {"float8", "float8_e4m3fn"},
    {"e4m3", "float8_e4m3fn"},
    {"fp8_e4m3fn", "float8_e4m3fn"},
    {"float8_e4m3", "float8_e4m3fn"},
    {"f8_e4m3", "float8_e4m3fn"},
    {"e5m2", "float8_e5m2"},
    {"f8_e5m2", "float8_e5m2"},
    {"fp4", "nvfp4 or mxfp4"},
    {"float4", "nvfp4 or mxfp4"},
    {"e2m1", "nvfp4 or mxfp4"},
    {"mxfp6", "mxfp8 or mxfp4"},
    {"w8a8", "int8 (weight_qtype and act_qtype)"},
    {"w4a16", "int4 (weight_qtype, no act_qtype)"},
};

/* The qtype `name` probably means: a known alias, or a name that differs only in case (INT8),
 * or NULL. */
static const char *qtype_hint(const char *name)
{
    for (size_t i = 0; i < sizeof qtype_hints / sizeof qtype_hints[0]; i++)
        if (strcasecmp(name, qtype_hints[i].name) == 0) return qtype_hints[i].hint;
    for (int q = 0; q < QUANT_QTYPE_COUNT; q++)
        if (strcasecmp(name, traits_table[q].name) == 0) return traits_table[q].name;
    return NULL;
}

quant_status quant_qtype_parse(const char *name, quant_qtype *out, quant_error *err)
{
    if (!name || !out) return quant_fail(err, QUANT_ERR_ARG, "qtype name is NULL");
    for (int q = 0; q < QUANT_QTYPE_COUNT; q++) {
        if (strcmp(name, traits_table[q].name) == 0) {
            *out = (quant_qtype)q;
            return QUANT_OK;
        }
    }
    if (strcmp(name, "fp8_e4m3") == 0) {
        *out = QUANT_QTYPE_FP8_E4M3FN;
        return QUANT_OK;
    }
    if (strcmp(name, "fp8_e5m2") == 0) {
        *out = QUANT_QTYPE_FP8_E5M2;
        return QUANT_OK;
    }
    const char *near = qtype_hint(name);
    return quant_fail(err, QUANT_ERR_QTYPE,
                      "unknown qtype \"%.64s\"%s%s%s (expected int2..int8, int16, uint4, uint8, "
                      "nf4, float8_e4m3fn, float8_e5m2, mxfp8, mxfp8_16, mxfp4, nvfp4; for the "
                      "gguf layout also q8_0, q4_0, q4_1, q5_0, q5_1, q2_k..q6_k, iq4_nl, iq4_xs)",
                      name, near ? ", did you mean " : "", near ? near : "", near ? "?" : "");
}

/* ---- dtypes ---------------------------------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
    bool is_float;
} dtype_rows[QUANT_DTYPE_COUNT] = {
    [QUANT_DTYPE_F32] = {"F32", 4, true},         [QUANT_DTYPE_F16] = {"F16", 2, true},
    [QUANT_DTYPE_BF16] = {"BF16", 2, true},       [QUANT_DTYPE_F64] = {"F64", 8, true},
    [QUANT_DTYPE_F8_E4M3] = {"F8_E4M3", 1, true}, [QUANT_DTYPE_F8_E5M2] = {"F8_E5M2", 1, true},
    [QUANT_DTYPE_I8] = {"I8", 1, false},          [QUANT_DTYPE_U8] = {"U8", 1, false},
    [QUANT_DTYPE_I16] = {"I16", 2, false},        [QUANT_DTYPE_I32] = {"I32", 4, false},
};

const char *quant_dtype_name(quant_dtype dtype)
{
    return (unsigned)dtype < QUANT_DTYPE_COUNT ? dtype_rows[dtype].name : NULL;
}

size_t quant_dtype_size(quant_dtype dtype)
{
    return (unsigned)dtype < QUANT_DTYPE_COUNT ? dtype_rows[dtype].size : 0;
}

bool quant_dtype_is_float(quant_dtype dtype)
{
    return (unsigned)dtype < QUANT_DTYPE_COUNT && dtype_rows[dtype].is_float;
}
