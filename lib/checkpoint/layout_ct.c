/* layout_ct.c -- the compressed-tensors output layout (vLLM / llm-compressor): which rule
 * combinations map to which scheme, the output tensors of a quantized Linear weight, and the
 * int32 bit packing of pack-quantized codes and zero points.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Mapping (refused with QUANT_CK_ERR_UNSUPPORTED otherwise):
 *  - only rank-2 tensors named `P.weight`, contraction on the last axis (or both axes);
 *  - int2..int8 weights: with an act_qtype -> `int-quantized` (P.weight I8, unpacked);
 *    weight-only -> `pack-quantized` (P.weight_packed I32 + P.weight_shape I64[2]);
 *  - float8_e4m3fn weights -> `float-quantized` (P.weight F8_E4M3);
 *  - scales P.weight_scale: tensor [1], channel [out,1], group [out,in/g], block [out/bh,in/bw];
 *  - asymmetric ints add P.weight_zero_point (I8, or for pack-quantized int32 words packed along
 *    dim 0);
 *  - act_qtype int8 / float8_e4m3fn -> dynamic per-token input activations;
 *  - with act_static_scale (SRQ): static per-tensor input activations, the activation scale of
 *    the weight's module path written as P.input_scale F32 [1] (and P.input_zero_point I8 [1]
 *    when asymmetric); a scale of more than one value, an activation without a quantized weight
 *    P.weight of its module path, two activations for one weight, or a weight without one are
 *    refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"

int64_t ck_pack32_words(int64_t n, int bits)
{
    return (n * bits + 31) / 32;
}

void ck_pack32_rows(const int8_t *codes, int64_t rows, int64_t n, int bits, uint32_t *out)
{
    int64_t words = ck_pack32_words(n, bits);
    uint32_t mask = bits == 32 ? 0xffffffffu : (1u << bits) - 1u;
    uint32_t offset = 1u << (bits - 1);
    for (int64_t r = 0; r < rows; r++) {
        const int8_t *c = codes + r * n;
        uint32_t *w = out + r * words;
        memset(w, 0, (size_t)words * sizeof *w);
        for (int64_t i = 0; i < n; i++) {
            uint32_t v = ((uint32_t)(int32_t)c[i] + offset) & mask;
            int64_t bit = i * bits;
            int shift = (int)(bit % 32);
            w[bit / 32] |= v << shift;
            if (shift + bits > 32) w[bit / 32 + 1] |= v >> (32 - shift);
        }
    }
}

void *ck_ct_pack_zero_point(const ck_tensor_plan *tp, const int32_t *zp, size_t *len)
{
    int bits = quant_qtype_traits_get(tp->how.qtype)->bits;
    int64_t s0 = tp->scale_shape[0], s1 = tp->scale_shape[1];
    int64_t words = ck_pack32_words(s0, bits);
    int8_t *column = malloc((size_t)s0);
    uint32_t *packed = malloc((size_t)words * sizeof *packed);
    *len = (size_t)(words * s1) * sizeof(uint32_t);
    uint32_t *out = column && packed ? ck_buf_alloc(*len) : NULL;
    for (int64_t j = 0; out && j < s1; j++) {
        for (int64_t i = 0; i < s0; i++) column[i] = (int8_t)zp[i * s1 + j];
        ck_pack32_rows(column, 1, s0, bits, packed);
        for (int64_t k = 0; k < words; k++) out[k * s1 + j] = packed[k];
    }
    free(column);
    free(packed);
    return out;
}

static quant_ck_status unsupported(const ck_tensor_plan *tp, quant_ck_error *err, const char *why)
{
    return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                         "tensor '%s' (rule %ld): the compressed-tensors layout cannot express "
                         "this: %s",
                         tp->in->name, tp->rule, why);
}

static bool is_channel_axis(const quant_how *how, int axis)
{
    for (int i = 0; i < how->n_channel_axes; i++)
        if (how->channel_axes[i] == axis || how->channel_axes[i] == axis - 2) return true;
    return false;
}

/* Checks the tensor, qtype and axes against what the format can hold. */
static quant_ck_status ct_check(const ck_tensor_plan *tp, quant_ck_error *err)
{
    const quant_st_tensor *t = tp->in;
    size_t len = strlen(t->name);
    if (len < 8 || strcmp(t->name + len - 7, ".weight") != 0 || t->rank != 2)
        return unsupported(tp, err, "only rank-2 weights named <module>.weight are quantized");
    quant_qtype q = tp->how.qtype;
    if (!(q <= QUANT_QTYPE_INT8 || q == QUANT_QTYPE_FP8_E4M3FN))
        return unsupported(tp, err, "weight qtypes are int2..int8 and float8_e4m3fn");
    if (is_channel_axis(&tp->how, 1))
        return unsupported(tp, err, "the input (last) axis must be a contraction axis");
    if (tp->r->has_act_qtype && tp->r->act_qtype != QUANT_QTYPE_INT8 &&
        tp->r->act_qtype != QUANT_QTYPE_FP8_E4M3FN)
        return unsupported(tp, err, "act_qtype must be int8 or float8_e4m3fn");
    return QUANT_CK_OK;
}

static long add_named(ck_shard_plan *sp, const char *module, const char *suffix,
                      quant_st_dtype dtype, int rank, const int64_t *shape)
{
    char name[4096];
    if ((size_t)snprintf(name, sizeof name, "%s.%s", module, suffix) >= sizeof name) return -1;
    return ck_plan_add_out(sp, name, dtype, rank, shape);
}

quant_ck_status ck_ct_outputs(ck_shard_plan *sp, ck_tensor_plan *tp, quant_ck_error *err)
{
    quant_ck_status st = ct_check(tp, err);
    if (st != QUANT_CK_OK) return st;
    const quant_st_tensor *t = tp->in;
    char module[4096];
    if (strlen(t->name) >= sizeof module) return unsupported(tp, err, "name too long");
    quant_module_path(t->name, module, sizeof module);
    int bits = quant_qtype_traits_get(tp->how.qtype)->bits;
    bool is_float = tp->how.qtype == QUANT_QTYPE_FP8_E4M3FN;
    bool packed = !is_float && !tp->r->has_act_qtype;
    tp->how.pack = false;
    tp->codec = packed ? CK_CODEC_PACK32 : CK_CODEC_RAW;
    int64_t s_shape[2] = {tp->scale_shape[0], tp->scale_shape[1]};
    int s_rank = s_shape[0] == 1 && s_shape[1] == 1 ? 1 : 2;
    if (packed) {
        int64_t pshape[2] = {t->shape[0], ck_pack32_words(t->shape[1], bits)};
        int64_t two = 2;
        tp->out[CK_OUT_DATA] = add_named(sp, module, "weight_packed", QUANT_ST_I32, 2, pshape);
        tp->out[CK_OUT_SHAPE] = add_named(sp, module, "weight_shape", QUANT_ST_I64, 1, &two);
    } else {
        tp->out[CK_OUT_DATA] =
            add_named(sp, module, "weight", is_float ? QUANT_ST_F8_E4M3 : QUANT_ST_I8, 2, t->shape);
    }
    tp->out[CK_OUT_SCALE] =
        add_named(sp, module, "weight_scale", quant_st_from_quant_dtype(tp->how.scale_dtype),
                  s_rank, s_shape);
    if (tp->asym) {
        int64_t zshape[2] = {packed ? ck_pack32_words(s_shape[0], bits) : s_shape[0], s_shape[1]};
        tp->out[CK_OUT_ZP] = add_named(sp, module, "weight_zero_point",
                                       packed ? QUANT_ST_I32 : QUANT_ST_I8, s_rank, zshape);
    }
    if (tp->out[CK_OUT_DATA] < 0 || tp->out[CK_OUT_SCALE] < 0 ||
        (tp->asym && tp->out[CK_OUT_ZP] < 0) || (packed && tp->out[CK_OUT_SHAPE] < 0))
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return QUANT_CK_OK;
}

/* ---- static activation scales (SRQ) -> input_scale ------------------------------------------- */

static quant_ck_status act_unsupported(const quant_static_act *a, quant_ck_error *err,
                                       const char *why, const char *module)
{
    return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                         "static activation '%s': the compressed-tensors layout cannot express "
                         "this: %s (module '%s')",
                         a->name ? a->name : a->tensor_base, why, module);
}

static ck_tensor_plan *find_weight(ck_shard_plan *sp, const char *module)
{
    size_t len = strlen(module);
    for (size_t i = 0; i < sp->n; i++) {
        const char *name = sp->t[i].in->name;
        if (strncmp(name, module, len) == 0 && strcmp(name + len, ".weight") == 0) return &sp->t[i];
    }
    return NULL;
}

quant_ck_status ck_ct_act_outputs(ck_shard_plan *sp, ck_act_plan *ap, quant_ck_error *err)
{
    const quant_static_act *a = ap->act;
    char module[4096];
    if (!quant_module_path(a->tensor_base, module, sizeof module))
        return act_unsupported(a, err, "name too long", "");
    ck_tensor_plan *tp = find_weight(sp, module);
    if (!tp || !tp->quantize || !tp->r->act_static_scale)
        return act_unsupported(a, err,
                               "input_scale belongs to a weight <module>.weight quantized by a "
                               "rule with act_static_scale, and there is none",
                               module);
    if (tp->static_act)
        return act_unsupported(
            a, err, "a weight has one input_scale, and two activations map to it", module);
    if (quant_numel(a->rank, a->shape) != 1)
        return act_unsupported(a, err, "input_scale is per tensor (one value)", module);
    if (a->qtype != tp->r->act_qtype)
        return act_unsupported(a, err, "its qtype is not the weight rule's act_qtype", module);
    int64_t one = 1;
    ap->out_scale = add_named(sp, module, "input_scale", QUANT_ST_F32, 1, &one);
    if (a->zero_point) ap->out_zp = add_named(sp, module, "input_zero_point", QUANT_ST_I8, 1, &one);
    if (ap->out_scale < 0 || (a->zero_point && ap->out_zp < 0))
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    tp->static_act = a;
    return QUANT_CK_OK;
}

quant_ck_status ck_ct_check_static(const ck_shard_plan *sp, quant_ck_error *err)
{
    for (size_t i = 0; i < sp->n; i++) {
        const ck_tensor_plan *tp = &sp->t[i];
        if (tp->quantize && tp->r->act_static_scale && !tp->static_act)
            return unsupported(tp, err,
                               "its rule sets act_static_scale, but no static activation scale "
                               "of its module path was given for input_scale");
    }
    return QUANT_CK_OK;
}
