/* st_dtype.c -- the safetensors dtype table: each dtype's name, bit width, the alignment the
 * writer gives it, and its libquant counterpart when it has one.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <string.h>

#include "quant_st.h"

typedef struct st_dtype_info {
    const char *name;
    int bits;
    int align;      /* bytes; 1 for sub-byte dtypes */
    bool has_quant; /* quant is meaningful */
    quant_dtype quant;
} st_dtype_info;

#define SUB(n, b)                                                                                  \
    {                                                                                              \
        .name = n, .bits = b, .align = 1                                                           \
    }
#define RAW(n, b)                                                                                  \
    {                                                                                              \
        .name = n, .bits = b, .align = (b) / 8                                                     \
    }
#define NUM(n, b, q)                                                                               \
    {                                                                                              \
        .name = n, .bits = b, .align = (b) / 8, .has_quant = true, .quant = q                      \
    }

static const st_dtype_info st_dtypes[QUANT_ST_DTYPE_COUNT] = {
    [QUANT_ST_BOOL] = RAW("BOOL", 8),
    [QUANT_ST_U8] = NUM("U8", 8, QUANT_DTYPE_U8),
    [QUANT_ST_I8] = NUM("I8", 8, QUANT_DTYPE_I8),
    [QUANT_ST_F8_E5M2] = NUM("F8_E5M2", 8, QUANT_DTYPE_F8_E5M2),
    [QUANT_ST_F8_E4M3] = NUM("F8_E4M3", 8, QUANT_DTYPE_F8_E4M3),
    [QUANT_ST_I16] = NUM("I16", 16, QUANT_DTYPE_I16),
    [QUANT_ST_U16] = RAW("U16", 16),
    [QUANT_ST_F16] = NUM("F16", 16, QUANT_DTYPE_F16),
    [QUANT_ST_BF16] = NUM("BF16", 16, QUANT_DTYPE_BF16),
    [QUANT_ST_I32] = NUM("I32", 32, QUANT_DTYPE_I32),
    [QUANT_ST_U32] = RAW("U32", 32),
    [QUANT_ST_F32] = NUM("F32", 32, QUANT_DTYPE_F32),
    [QUANT_ST_F64] = NUM("F64", 64, QUANT_DTYPE_F64),
    [QUANT_ST_I64] = RAW("I64", 64),
    [QUANT_ST_U64] = RAW("U64", 64),
    [QUANT_ST_C64] = RAW("C64", 64),
    [QUANT_ST_F4] = SUB("F4", 4),
    [QUANT_ST_F6_E2M3] = SUB("F6_E2M3", 6),
    [QUANT_ST_F6_E3M2] = SUB("F6_E3M2", 6),
    [QUANT_ST_F8_E8M0] = RAW("F8_E8M0", 8),
    [QUANT_ST_F8_E4M3FNUZ] = RAW("F8_E4M3FNUZ", 8),
    [QUANT_ST_F8_E5M2FNUZ] = RAW("F8_E5M2FNUZ", 8),
};

static const st_dtype_info *info(quant_st_dtype dtype)
{
    return (unsigned)dtype < QUANT_ST_DTYPE_COUNT ? &st_dtypes[dtype] : NULL;
}

const char *quant_st_dtype_name(quant_st_dtype dtype)
{
    return info(dtype) ? info(dtype)->name : NULL;
}

bool quant_st_dtype_parse(const char *name, quant_st_dtype *out)
{
    for (int i = 0; name && i < QUANT_ST_DTYPE_COUNT; i++) {
        if (strcmp(st_dtypes[i].name, name) != 0) continue;
        if (out) *out = (quant_st_dtype)i;
        return true;
    }
    return false;
}

int quant_st_dtype_bits(quant_st_dtype dtype)
{
    return info(dtype) ? info(dtype)->bits : 0;
}

int quant_st_dtype_align(quant_st_dtype dtype)
{
    return info(dtype) ? info(dtype)->align : 0;
}

bool quant_st_to_quant_dtype(quant_st_dtype dtype, quant_dtype *out)
{
    const st_dtype_info *d = info(dtype);
    if (!d || !d->has_quant) return false;
    if (out) *out = d->quant;
    return true;
}

quant_st_dtype quant_st_from_quant_dtype(quant_dtype dtype)
{
    for (int i = 0; i < QUANT_ST_DTYPE_COUNT; i++)
        if (st_dtypes[i].has_quant && st_dtypes[i].quant == dtype) return (quant_st_dtype)i;
    return QUANT_ST_DTYPE_COUNT;
}
