/* ct_decode.c -- quant_ct_dequantize(): one compressed-tensors weight back to float. The codes
 * become libquant's (pack-quantized int32 words unpacked: element i of a row at bit i * b, LSB
 * first, minus 2^(b-1), as compressed-tensors' unpack_from_int32 reads them; I8, F8_E4M3 and
 * e2m1 pairs as they are), the scales float32 (E8M0 e -> 2^(e - 127); nvfp4 s_b -> f32(s_b / g),
 * which is what the writer checked would come back), the zero point int32 (unpacked along dim 0
 * when packed), then quant_dequantize() computes (level(q) - zero_point) * scale.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"
#include "ct_read.h"

/* Value i of a densely packed run of `bits`-bit fields whose word k is w[k * stride], minus the
 * offset 2^(bits-1). */
static int32_t dense_get(const uint32_t *w, int64_t stride, int64_t i, int bits)
{
    int64_t bit = i * bits, k = bit / 32;
    int shift = (int)(bit % 32);
    uint32_t v = w[k * stride] >> shift;
    if (shift + bits > 32) v |= w[(k + 1) * stride] << (32 - shift);
    v &= (1u << bits) - 1u;
    return (int32_t)v - (int32_t)(1u << (bits - 1));
}

/* A row of n densely packed codes (as dense_get reads them), streamed through a 64-bit
 * accumulator: each word is loaded once, and only the words the n codes occupy. */
static void unpack_row(const uint32_t *w, int64_t n, int bits, int8_t *out)
{
    uint64_t acc = 0;
    int have = 0;
    const uint64_t mask = (1u << bits) - 1u;
    const int32_t offset = 1 << (bits - 1);
    for (int64_t i = 0; i < n; i++) {
        if (have < bits) {
            acc |= (uint64_t)*w++ << have;
            have += 32;
        }
        out[i] = (int8_t)((int32_t)(acc & mask) - offset);
        acc >>= bits;
        have -= bits;
    }
}

static quant_ck_status read_whole(const quant_st_file *f, const quant_st_tensor *t, void **buf,
                                  quant_ck_error *err)
{
    size_t n = (size_t)quant_st_nbytes(t);
    *buf = malloc(n ? n : 1);
    if (!*buf) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return quant_st_read(f, t, 0, *buf, n, err);
}

/* The codes in libquant's layout: *codes points into *owned (to free) either way. */
static quant_ck_status codes_of(const quant_ct *c, const quant_ct_tensor *e, void **owned,
                                quant_ck_error *err)
{
    void *raw = NULL;
    quant_ck_status st = read_whole(c->file, e->data, &raw, err);
    if (st != QUANT_CK_OK || e->form != QUANT_CT_PACK32) {
        *owned = raw;
        return st;
    }
    int64_t rows = e->shape[0], in = e->shape[1], words = e->data->shape[1];
    size_t n = (size_t)(rows * in);
    int8_t *q = malloc(n > 0 ? n : 1);
    for (int64_t r = 0; q && r < rows; r++)
        unpack_row((const uint32_t *)raw + r * words, in, e->bits, q + r * in);
    free(raw);
    *owned = q;
    return q ? QUANT_CK_OK : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

static quant_ck_status e8m0_scales(const quant_ct *c, const quant_ct_tensor *e, const uint8_t *raw,
                                   size_t n, float *scale, quant_ck_error *err)
{
    for (size_t i = 0; i < n; i++) {
        if (raw[i] == 255)
            return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                                 "%s: tensor '%s': E8M0 scale %zu is 255 (NaN)", c->file->path,
                                 e->scale->name, i);
        scale[i] = ldexpf(1.0f, (int)raw[i] - 127);
    }
    return QUANT_CK_OK;
}

static quant_ck_status nvfp4_scales(const quant_ct *c, const quant_ct_tensor *e, const uint8_t *raw,
                                    size_t n, float *scale, quant_ck_error *err)
{
    float g;
    quant_ck_status st = quant_st_read(c->file, e->global_scale, 0, &g, sizeof g, err);
    if (st == QUANT_CK_OK && !(isfinite(g) && g > 0.0f))
        st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                           "%s: tensor '%s': global scale %g is not finite and positive",
                           c->file->path, e->global_scale->name, (double)g);
    for (size_t i = 0; st == QUANT_CK_OK && i < n; i++) {
        float sb = quant_e4m3fn_to_f32(raw[i]);
        if (isnan(sb))
            st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: tensor '%s': block scale %zu is NaN",
                               c->file->path, e->scale->name, i);
        scale[i] = sb / g;
    }
    return st;
}

quant_ck_status quant_ct_scales(const quant_ct *c, const quant_ct_tensor *e, float *scale, size_t n,
                                quant_ck_error *err)
{
    if (!c || !e || !scale || n != (size_t)quant_numel(e->scale->rank, e->scale->shape))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "quant_ct_scales: NULL argument, or not the scale's length");
    void *raw = NULL;
    quant_ck_status st = read_whole(c->file, e->scale, &raw, err);
    quant_dtype sdt;
    quant_error qe;
    if (st != QUANT_CK_OK) {
        /* read_whole said why */
    } else if (e->form == QUANT_CT_MXFP4 || e->form == QUANT_CT_MXFP8) {
        st = e8m0_scales(c, e, raw, n, scale, err);
    } else if (e->form == QUANT_CT_NVFP4) {
        st = nvfp4_scales(c, e, raw, n, scale, err);
    } else if (!quant_st_to_quant_dtype(e->scale->dtype, &sdt) ||
               quant_convert(sdt, raw, QUANT_DTYPE_F32, scale, (int64_t)n, &qe) != QUANT_OK) {
        st =
            quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: tensor '%s': scale dtype %s not converted",
                          c->file->path, e->scale->name, quant_st_dtype_name(e->scale->dtype));
    }
    free(raw);
    return st;
}

static int32_t zp_value(const void *raw, quant_st_dtype d, size_t i)
{
    switch (d) {
    case QUANT_ST_U8:
        return ((const uint8_t *)raw)[i];
    case QUANT_ST_I16:
        return ((const int16_t *)raw)[i];
    case QUANT_ST_I32:
        return ((const int32_t *)raw)[i];
    default:
        return ((const int8_t *)raw)[i];
    }
}

static quant_ck_status zero_points_of(const quant_ct *c, const quant_ct_tensor *e, int32_t *zp,
                                      quant_ck_error *err)
{
    void *raw = NULL;
    quant_ck_status st = read_whole(c->file, e->zero_point, &raw, err);
    int64_t s0 = e->scale->rank == 2 ? e->scale->shape[0] : 1;
    int64_t s1 = e->scale->rank == 2 ? e->scale->shape[1] : 1;
    for (int64_t r = 0; st == QUANT_CK_OK && r < s0; r++)
        for (int64_t j = 0; j < s1; j++)
            zp[r * s1 + j] = e->zp_packed
                                 ? dense_get((const uint32_t *)raw + j, s1, r, e->bits)
                                 : zp_value(raw, e->zero_point->dtype, (size_t)(r * s1 + j));
    free(raw);
    return st;
}

quant_ck_status quant_ct_dequantize(quant_ctx *ctx, const quant_ct *c, const quant_ct_tensor *e,
                                    quant_st_dtype dtype, void *out, size_t out_len,
                                    quant_ck_error *err)
{
    quant_dtype odt;
    if (!ctx || !c || !e || !out || !quant_st_to_quant_dtype(dtype, &odt) ||
        (odt != QUANT_DTYPE_F32 && odt != QUANT_DTYPE_BF16 && odt != QUANT_DTYPE_F16) ||
        out_len != (size_t)(e->shape[0] * e->shape[1]) * (odt == QUANT_DTYPE_F32 ? 4u : 2u))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "quant_ct_dequantize: NULL argument, or a wrong dtype or length");
    size_t sn = (size_t)quant_numel(e->scale->rank, e->scale->shape);
    float *scale = malloc(sn * sizeof *scale);
    int32_t *zp = e->zero_point ? malloc(sn * sizeof *zp) : NULL;
    void *codes = NULL;
    quant_ck_status st = scale && (!e->zero_point || zp)
                             ? QUANT_CK_OK
                             : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    if (st == QUANT_CK_OK) st = codes_of(c, e, &codes, err);
    if (st == QUANT_CK_OK) st = quant_ct_scales(c, e, scale, sn, err);
    if (st == QUANT_CK_OK && zp) st = zero_points_of(c, e, zp, err);
    quant_error qe;
    quant_tensor t;
    if (st == QUANT_CK_OK) {
        quant_tensor_init(&t, odt, 2, e->shape, out, NULL);
        if (quant_dequantize(ctx, &e->how, codes, scale, zp, &t, &qe) != QUANT_OK)
            st = quant_ck_fail(err, QUANT_CK_ERR_QUANT, "%s: tensor '%s': %s", c->file->path,
                               e->name, qe.message);
    }
    free(codes);
    free(scale);
    free(zp);
    return st;
}
