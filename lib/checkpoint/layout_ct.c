/* layout_ct.c -- the compressed-tensors output layout (vLLM / llm-compressor): which rule
 * combinations map to which scheme, which of them vLLM can serve, the output tensors of a
 * quantized Linear weight, and the int32 bit packing of pack-quantized codes and zero points.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Mapping (refused with QUANT_CK_ERR_UNSUPPORTED otherwise):
 *  - only rank-2 tensors named `P.weight`, contraction on the last axis (or both axes);
 *  - int2..int8 weights: int4 or int8 with an act_qtype -> `int-quantized` (P.weight I8,
 *    unpacked); weight-only, or another width with an act_qtype -> `pack-quantized`
 *    (P.weight_packed I32 + P.weight_shape I64[2]), densely packed (ceil(n*bits/32) words:
 *    compressed-tensors 0.18.0 or later for int3/5/6/7);
 *  - float8_e4m3fn weights -> `float-quantized` (P.weight F8_E4M3);
 *  - mxfp4 -> `mxfp4-pack-quantized` (P.weight_packed U8 [out, ceil(in/2)], two e2m1 codes a
 *    byte, element 2i in the low nibble; no weight_shape) and mxfp8 -> `mxfp8-quantized`
 *    (P.weight F8_E4M3 [out, in]), both with P.weight_scale U8 E8M0 = 127 + log2(scale) shaped
 *    [out, in/32] (compressed-tensors' compressors/mxfp4, compressors/mxfp8, mx_utils.py); one
 *    scale row per output row, so the input axis alone is contracted;
 *  - nvfp4 -> `nvfp4-pack-quantized` (the NVFP4A16 preset, compressed-tensors' compressors/nvfp4):
 *    P.weight_packed U8 [out, in/2] (element 2i in the low nibble, as its unpack_fp4_from_uint8
 *    reads), P.weight_scale F8_E4M3 [out, in/16] = s_b, P.weight_global_scale F32 [1] = g. g is
 *    SPEC 2b's g itself, not its reciprocal: compressed-tensors divides (scale / global_scale)
 *    and generate_gparam makes 448 * 6 / A; vLLM's W4A16Fp4 inverts it for its kernel. Members
 *    of a fused group (ct_fused.c) share the g of their largest A. W4A4 (the NVFP4 preset) needs
 *    a static input_global_scale per layer from activation statistics: refused;
 *  - mxfp8_16 has no compressed-tensors form at all (its mx formats have groups of 32);
 *  - scales P.weight_scale: tensor [1], channel [out,1], group [out,in/g], block [out/bh,in/bw];
 *  - asymmetric ints add P.weight_zero_point: int32 words packed along dim 0 for pack-quantized
 *    channel and group (compressed-tensors' PACK_ZP_STRATS), else I8 shaped like the scale;
 *  - act_qtype int8 / float8_e4m3fn -> dynamic per-token input activations;
 *  - with act_static_scale (SRQ): static per-tensor input activations, the activation scale of
 *    the weight's module path written as P.input_scale F32 [1] (and P.input_zero_point I8 [1]
 *    when asymmetric); a scale of more than one value, an activation without a quantized weight
 *    P.weight of its module path, two activations for one weight, or a weight without one are
 *    refused.
 *
 * What vLLM serves (its compressed_tensors.py _get_scheme_from_parts and schemes/); every other
 * combination compressed-tensors could store is refused by ct_refusals[] at plan time:
 *  - int2..int8 weight-only, channel or group, symmetric; int4/int8 also asymmetric -> WNA16
 *    (mixed-precision kernels: Marlin takes group sizes 32, 64, 128 and per channel, Machete 64
 *    and 128; another group size gets a warning, ck_ct_kernel_warning);
 *  - int8 weights + int8 activations, tensor or channel, symmetric -> W8A8Int8;
 *  - int4 weights + int8 dynamic per-token activations, channel or group, symmetric -> W4A8Int;
 *  - int2, int3, int5, int6, int7 weights + symmetric int8 dynamic per-token activations,
 *    channel or group, symmetric -> pack-quantized with input_activations, WNAMInt (the Humming
 *    kernel: any group size);
 *  - float8_e4m3fn weights, tensor / channel / block, symmetric, weight-only or with
 *    float8_e4m3fn activations -> W8A16Fp8 / W8A8Fp8;
 *  - mxfp4 weight-only -> W4A16Mxfp4 (_is_mxfp4: group 32, float, 4 bits, symmetric; the
 *    activations are not looked at);
 *  - mxfp8 weight-only -> W8A8Mxfp8 (_is_mxfp8: also scale_dtype torch.uint8), which quantizes
 *    the activations to mxfp8 at run time whatever the config says;
 *  - nvfp4 weight-only -> W4A16Fp4 (_is_fp4a16_nvfp4: tensor_group, group 16, float, 4 bits,
 *    symmetric, no input_activations); it takes max(weight_global_scale) over a fused layer.
 */
#include <math.h>
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

void *ck_ct_encode_nvfp4_scale(const float *scale, size_t n, float g)
{
    uint8_t *out = ck_buf_alloc(n);
    for (size_t i = 0; out && i < n; i++) {
        out[i] = quant_f32_to_e4m3fn(scale[i] * g);
        if (quant_e4m3fn_to_f32(out[i]) / g != scale[i]) {
            ck_buf_free(out, n);
            return NULL;
        }
    }
    return out;
}

/* compressed-tensors' compress_mx_scale: 127 + floor(log2(scale)) as U8. MX scales are powers of
 * two within 2^-127..2^127 (the tiny rule keeps them above 2^-63); anything else fails. */
void *ck_ct_encode_e8m0(const float *scale, size_t n)
{
    uint8_t *out = ck_buf_alloc(n);
    for (size_t i = 0; out && i < n; i++) {
        int e;
        float m = frexpf(scale[i], &e); /* scale = m * 2^e, m in [0.5, 1) */
        if (m != 0.5f || e - 1 < -127 || e - 1 > 127) {
            ck_buf_free(out, n);
            return NULL;
        }
        out[i] = (uint8_t)(127 + e - 1);
    }
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

bool ck_ct_is_mx(quant_qtype q)
{
    return q == QUANT_QTYPE_MXFP8 || q == QUANT_QTYPE_MXFP4;
}

/* Checks the tensor, qtype and axes against what the format can hold. */
static quant_ck_status ct_check(const ck_tensor_plan *tp, quant_ck_error *err)
{
    const quant_st_tensor *t = tp->in;
    size_t len = strlen(t->name);
    if (len < 8 || strcmp(t->name + len - 7, ".weight") != 0 || t->rank != 2)
        return unsupported(tp, err, "only rank-2 weights named <module>.weight are quantized");
    quant_qtype q = tp->how.qtype;
    if (q == QUANT_QTYPE_MXFP8_16)
        return unsupported(tp, err,
                           "mxfp8_16 has no compressed-tensors form (its mx formats have groups "
                           "of 32); use mxfp8, or the native layout");
    if (!(q <= QUANT_QTYPE_INT8 || q == QUANT_QTYPE_FP8_E4M3FN || ck_ct_is_mx(q) ||
          q == QUANT_QTYPE_NVFP4))
        return unsupported(tp, err,
                           "weight qtypes are int2..int8 and float8_e4m3fn, or mxfp8, mxfp4 and "
                           "nvfp4");
    if (ck_ct_is_mx(q) && ck_ct_strategy_of(tp) != CK_CT_GROUP)
        return unsupported(tp, err,
                           "mxfp8 and mxfp4 have one scale per 32 inputs of each output row "
                           "(strategy group); contract the input (last) axis alone");
    if (q == QUANT_QTYPE_NVFP4 && ck_ct_strategy_of(tp) != CK_CT_GROUP)
        return unsupported(tp, err,
                           "nvfp4 has one block scale per 16 inputs of each output row under the "
                           "global scale (strategy tensor_group); contract the input (last) "
                           "axis alone");
    if (q == QUANT_QTYPE_NVFP4 && tp->r->has_act_qtype)
        return unsupported(tp, err,
                           "vLLM serves nvfp4 weights with activations only as W4A4Fp4 (the "
                           "NVFP4 preset: nvfp4 activations under a static input_global_scale "
                           "per layer, which needs activation statistics this layout does not "
                           "turn into that scale); use no act_qtype (NVFP4A16, served by "
                           "W4A16Fp4), or the native layout");
    if (is_channel_axis(&tp->how, 1))
        return unsupported(tp, err, "the input (last) axis must be a contraction axis");
    if (tp->r->has_act_qtype && tp->r->act_qtype != QUANT_QTYPE_INT8 &&
        tp->r->act_qtype != QUANT_QTYPE_FP8_E4M3FN)
        return unsupported(tp, err, "act_qtype must be int8 or float8_e4m3fn");
    return QUANT_CK_OK;
}

/* ---- what vLLM can serve -------------------------------------------------------------------- */

ck_ct_strategy ck_ct_strategy_of(const ck_tensor_plan *tp)
{
    int64_t s0 = tp->scale_shape[0], s1 = tp->scale_shape[1];
    if (s0 == tp->in->shape[0]) return s1 == 1 ? CK_CT_CHANNEL : CK_CT_GROUP;
    return s0 == 1 && s1 == 1 ? CK_CT_TENSOR : CK_CT_BLOCK;
}

const char *ck_ct_strategy_name(ck_ct_strategy s)
{
    static const char *const names[] = {[CK_CT_TENSOR] = "tensor",
                                        [CK_CT_CHANNEL] = "channel",
                                        [CK_CT_GROUP] = "group",
                                        [CK_CT_BLOCK] = "block"};
    return names[s];
}

typedef enum { ACT_NONE, ACT_INT8, ACT_FP8 } ct_act;

/* A rule's scheme as vLLM's compressed-tensors scheme selection sees it. */
typedef enum { W_INT, W_FP8, W_MX, W_NVFP4 } ct_weight;

typedef struct ct_scheme {
    int bits;
    ct_weight w; /* intN, float8_e4m3fn, mxfp4 / mxfp8, or nvfp4 */
    ck_ct_strategy strategy;
    bool asym;
    ct_act act;
    bool act_static; /* static per-tensor input_scale (SRQ), else dynamic per token */
    bool act_asym;   /* the activations have a zero point */
} ct_scheme;

static bool channel_or_group(const ct_scheme *s)
{
    return s->strategy == CK_CT_CHANNEL || s->strategy == CK_CT_GROUP;
}

static bool int_w_fp8_act(const ct_scheme *s)
{
    return s->w == W_INT && s->act == ACT_FP8;
}

static bool fp8_w_int8_act(const ct_scheme *s)
{
    return s->w == W_FP8 && s->act == ACT_INT8;
}

/* WNAMInt (_is_wNaM_int): pack-quantized integer weights of any width, channel or group, with
 * integer activations, run by the Humming kernel. vLLM's code is clear for symmetric dynamic
 * per-token int8 activations over symmetric weights (it loads no weight zero point there);
 * static per-tensor input scales are read as a fake quantization in one form of its dispatch and
 * not matched in another, so they are refused. int4 and int8 with activations are written
 * int-quantized (W4A8Int, W8A8Int8). */
static bool wnam_unsupported(const ct_scheme *s)
{
    return s->w == W_INT && s->act == ACT_INT8 && s->bits != 4 && s->bits != 8 &&
           (s->asym || !channel_or_group(s) || s->act_static || s->act_asym);
}

static bool w8a8_not_symmetric_tensor_channel(const ct_scheme *s)
{
    return s->w == W_INT && s->bits == 8 && s->act == ACT_INT8 &&
           (s->asym || !(s->strategy == CK_CT_TENSOR || s->strategy == CK_CT_CHANNEL));
}

static bool w4a8_unsupported(const ct_scheme *s)
{
    return s->w == W_INT && s->bits == 4 && s->act == ACT_INT8 &&
           (s->asym || !channel_or_group(s) || s->act_static);
}

static bool weight_only_not_channel_group(const ct_scheme *s)
{
    return s->w == W_INT && s->act == ACT_NONE && !channel_or_group(s);
}

static bool weight_only_asym_bits(const ct_scheme *s)
{
    return s->w == W_INT && s->act == ACT_NONE && s->asym && s->bits != 4 && s->bits != 8;
}

static bool mx_with_act(const ct_scheme *s)
{
    return s->w == W_MX && s->act != ACT_NONE;
}

static bool fp8_group(const ct_scheme *s)
{
    return s->w == W_FP8 && s->strategy == CK_CT_GROUP;
}

/* What compressed-tensors can store but vLLM (compressed_tensors.py _get_scheme_from_parts and
 * schemes/) has no scheme for, or would serve as something else; the first match refuses.
 * int4 weights with int8 activations need W4A8Int's terms (symmetric, channel or group, dynamic
 * per token), other widths WNAMInt's; integer weights with float8_e4m3fn activations are refused
 * (the 8-bit checks ignore the activation type), and float8_e4m3fn weights have no group
 * scheme. */
static const struct {
    bool (*applies)(const ct_scheme *s);
    const char *why;   /* what vLLM does with it */
    const char *needs; /* what vLLM would need to serve it */
    const char *use;   /* what works today */
} ct_refusals[] = {
    {int_w_fp8_act,
     "vLLM checks only that activations have 8 bits and would serve them as int8 (W8A8Int8, "
     "W4A8Int)",
     "a scheme for integer weights with float8_e4m3fn activations",
     "act_qtype int8, or float8_e4m3fn weights"},
    {fp8_w_int8_act,
     "vLLM takes float8_e4m3fn weights with float8_e4m3fn activations only and would serve these "
     "weight-only (W8A16Fp8)",
     "a scheme for float8_e4m3fn weights with int8 activations",
     "act_qtype float8_e4m3fn, or none"},
    {wnam_unsupported,
     "vLLM's WNAMInt (Humming kernel) takes int2..int8 weights with symmetric per-channel or "
     "per-group scales and symmetric dynamic per-token int8 activations",
     "weight and activation zero points and one reading of static input scales in WNAMInt",
     "symmetric weight and activation calibration methods, a tile on the input axis only or "
     "none, and no act_static_scale, or no act_qtype (WNA16)"},
    {w8a8_not_symmetric_tensor_channel,
     "vLLM's W8A8Int8 takes symmetric int8 weights with a per-tensor or per-channel scale",
     "weight zero points and per-group or block scales in W8A8Int8",
     "a symmetric weight_calibration_method and no tile_size"},
    {w4a8_unsupported,
     "vLLM's W4A8Int takes symmetric int4 weights with a per-channel or per-group scale and "
     "dynamic per-token activations",
     "weight zero points, per-tensor or block scales, or static input scales in W4A8Int",
     "a symmetric weight_calibration_method, a tile on the input axis only or none, and no "
     "act_static_scale"},
    {weight_only_not_channel_group,
     "vLLM's weight-only scheme (WNA16) takes per-channel or per-group scales",
     "per-tensor and block scales in WNA16",
     "the default contraction on the input axis, or a tile_size on it alone"},
    {weight_only_asym_bits, "vLLM's WNA16 takes zero points for int4 and int8 only",
     "zero-point kernels for the other widths",
     "a symmetric weight_calibration_method, or int4 or int8"},
    {mx_with_act,
     "vLLM serves mxfp4 weight-only whatever the activations (W4A16Mxfp4) and quantizes mxfp8's "
     "activations to mxfp8 (W8A8Mxfp8)",
     "a scheme that reads the activations of mx weights", "no act_qtype"},
    {fp8_group,
     "vLLM takes float8_e4m3fn weights with a per-tensor, per-channel or block scale (W8A8Fp8, "
     "W8A16Fp8)",
     "a per-group float8_e4m3fn scheme", "no tile_size, or a 2-D tile_size"},
};

/* "no activations", or e.g. "int8 asymmetric dynamic per-token activations". */
static const char *act_desc(const ct_scheme *s, char *buf, size_t size)
{
    if (s->act == ACT_NONE) return "no activations";
    snprintf(buf, size, "%s%s %s activations", s->act == ACT_FP8 ? "float8_e4m3fn" : "int8",
             s->act_asym ? " asymmetric" : "",
             s->act_static ? "static per-tensor" : "dynamic per-token");
    return buf;
}

static bool act_asymmetric(const quant_rule *r)
{
    quant_calib_method m;
    return quant_calib_parse(r->act_calibration, &m, NULL) == QUANT_OK && m.asymmetric;
}

/* Refuses the rule of a planned weight when vLLM cannot serve its compressed-tensors form. */
static quant_ck_status ct_check_servable(const ck_tensor_plan *tp, quant_ck_error *err)
{
    const quant_rule *r = tp->r;
    const quant_qtype_traits *tr = quant_qtype_traits_get(tp->how.qtype);
    ct_scheme s = {.bits = tr->bits,
                   .w = ck_ct_is_mx(tp->how.qtype)                ? W_MX
                        : tp->how.qtype == QUANT_QTYPE_NVFP4      ? W_NVFP4
                        : tp->how.qtype == QUANT_QTYPE_FP8_E4M3FN ? W_FP8
                                                                  : W_INT,
                   .strategy = ck_ct_strategy_of(tp),
                   .asym = tp->asym,
                   .act = !r->has_act_qtype                        ? ACT_NONE
                          : r->act_qtype == QUANT_QTYPE_FP8_E4M3FN ? ACT_FP8
                                                                   : ACT_INT8,
                   .act_static = r->has_act_qtype && r->act_static_scale,
                   .act_asym = r->has_act_qtype && act_asymmetric(r)};
    char acts[96];
    for (size_t i = 0; i < sizeof ct_refusals / sizeof ct_refusals[0]; i++) {
        if (!ct_refusals[i].applies(&s)) continue;
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "tensor '%s' (rule %ld): compressed-tensors can store this but vLLM "
                             "has no scheme for it: %s weights, %s strategy, %s, with %s: %s; "
                             "vLLM would need %s; use %s",
                             tp->in->name, tp->rule, tr->name, ck_ct_strategy_name(s.strategy),
                             s.asym ? "asymmetric" : "symmetric", act_desc(&s, acts, sizeof acts),
                             ct_refusals[i].why, ct_refusals[i].needs, ct_refusals[i].use);
    }
    return QUANT_CK_OK;
}

/* ---- output tensors -------------------------------------------------------------------------- */

static long add_named(ck_shard_plan *sp, const char *module, const char *suffix,
                      quant_st_dtype dtype, int rank, const int64_t *shape)
{
    char name[4096];
    if ((size_t)snprintf(name, sizeof name, "%s.%s", module, suffix) >= sizeof name) return -1;
    return ck_plan_add_out(sp, name, dtype, rank, shape);
}

/* The zero point: compressed-tensors packs it (int32 words along dim 0, like the codes along dim
 * 1) only for the channel and group strategies of pack-quantized (PACK_ZP_STRATS in its
 * compressors/pack_quantized); otherwise it is I8 shaped like the scale. */
static long add_zero_point(ck_shard_plan *sp, ck_tensor_plan *tp, const char *module, int s_rank,
                           const int64_t *s_shape)
{
    ck_ct_strategy strategy = ck_ct_strategy_of(tp);
    tp->zp_packed =
        tp->codec == CK_CODEC_PACK32 && (strategy == CK_CT_CHANNEL || strategy == CK_CT_GROUP);
    if (!tp->zp_packed)
        return add_named(sp, module, "weight_zero_point", QUANT_ST_I8, s_rank, s_shape);
    int bits = quant_qtype_traits_get(tp->how.qtype)->bits;
    int64_t zshape[2] = {ck_pack32_words(s_shape[0], bits), s_shape[1]};
    return add_named(sp, module, "weight_zero_point", QUANT_ST_I32, 2, zshape);
}

/* nvfp4 -> weight_packed U8 (libquant's nibbles), weight_scale F8_E4M3 (s_b) and
 * weight_global_scale F32 [1] (g), no weight_shape (compressed-tensors' NVFP4PackedCompressor). */
static quant_ck_status nvfp4_outputs(ck_shard_plan *sp, ck_tensor_plan *tp, const char *module,
                                     quant_ck_error *err)
{
    const quant_st_tensor *t = tp->in;
    int64_t dshape[2] = {t->shape[0], (t->shape[1] + 1) / 2}, one = 1;
    tp->how.pack = true;
    tp->codec = CK_CODEC_RAW;
    tp->scale_e4m3 = true;
    tp->out[CK_OUT_DATA] = add_named(sp, module, "weight_packed", QUANT_ST_U8, 2, dshape);
    tp->out[CK_OUT_SCALE] =
        add_named(sp, module, "weight_scale", QUANT_ST_F8_E4M3, 2, tp->scale_shape);
    tp->out[CK_OUT_GSCALE] = add_named(sp, module, "weight_global_scale", QUANT_ST_F32, 1, &one);
    if (tp->out[CK_OUT_DATA] < 0 || tp->out[CK_OUT_SCALE] < 0 || tp->out[CK_OUT_GSCALE] < 0)
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return QUANT_CK_OK;
}

/* mxfp4 -> weight_packed U8 (libquant's nibbles: element 2i low), mxfp8 -> weight F8_E4M3; both
 * with weight_scale U8 E8M0 and no weight_shape (compressed-tensors' MXFP4PackedCompressor and
 * MXFP8QuantizationCompressor). */
static quant_ck_status mx_outputs(ck_shard_plan *sp, ck_tensor_plan *tp, const char *module,
                                  quant_ck_error *err)
{
    const quant_st_tensor *t = tp->in;
    bool fp4 = tp->how.qtype == QUANT_QTYPE_MXFP4;
    int64_t dshape[2] = {t->shape[0], fp4 ? (t->shape[1] + 1) / 2 : t->shape[1]};
    tp->how.pack = fp4;
    tp->codec = CK_CODEC_RAW;
    tp->scale_e8m0 = true;
    tp->out[CK_OUT_DATA] = add_named(sp, module, fp4 ? "weight_packed" : "weight",
                                     fp4 ? QUANT_ST_U8 : QUANT_ST_F8_E4M3, 2, dshape);
    tp->out[CK_OUT_SCALE] = add_named(sp, module, "weight_scale", QUANT_ST_U8, 2, tp->scale_shape);
    if (tp->out[CK_OUT_DATA] < 0 || tp->out[CK_OUT_SCALE] < 0)
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return QUANT_CK_OK;
}

quant_ck_status ck_ct_tensor_outputs(ck_shard_plan *sp, ck_tensor_plan *tp, quant_ck_error *err)
{
    const quant_st_tensor *t = tp->in;
    char module[4096];
    if (strlen(t->name) >= sizeof module) return unsupported(tp, err, "name too long");
    quant_module_path(t->name, module, sizeof module);
    if (ck_ct_is_mx(tp->how.qtype)) return mx_outputs(sp, tp, module, err);
    if (tp->how.qtype == QUANT_QTYPE_NVFP4) return nvfp4_outputs(sp, tp, module, err);
    int bits = quant_qtype_traits_get(tp->how.qtype)->bits;
    bool is_float = tp->how.qtype == QUANT_QTYPE_FP8_E4M3FN;
    /* int4 and int8 with activations are int-quantized (W4A8Int, W8A8Int8); the other widths
     * with activations are pack-quantized (WNAMInt reads weight_packed) */
    bool packed = !is_float && (!tp->r->has_act_qtype || (bits != 4 && bits != 8));
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
    if (tp->asym) tp->out[CK_OUT_ZP] = add_zero_point(sp, tp, module, s_rank, s_shape);
    if (tp->out[CK_OUT_DATA] < 0 || tp->out[CK_OUT_SCALE] < 0 ||
        (tp->asym && tp->out[CK_OUT_ZP] < 0) || (packed && tp->out[CK_OUT_SHAPE] < 0))
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return QUANT_CK_OK;
}

/* ---- kernels and group sizes ------------------------------------------------------------- */

/* The group sizes vLLM's Marlin kernel takes (MARLIN_SUPPORTED_GROUP_SIZES: 32, 64, 128, and -1
 * for per channel); Machete takes 64 and 128 of them. */
static bool marlin_group_size(int64_t g)
{
    return g == 32 || g == 64 || g == 128;
}

/* The group size of a weight-only integer weight served by WNA16 when no Marlin kernel takes
 * it, else 0. */
static int64_t odd_group_size(const ck_tensor_plan *tp)
{
    if (tp->how.qtype > QUANT_QTYPE_INT8 || tp->r->has_act_qtype) return 0;
    if (ck_ct_strategy_of(tp) != CK_CT_GROUP) return 0;
    int64_t g = tp->in->shape[1] / tp->scale_shape[1];
    return marlin_group_size(g) ? 0 : g;
}

char *ck_ct_kernel_warning(const ck_tensor_plan *tp)
{
    int64_t g = tp->ct_group_warn ? odd_group_size(tp) : 0;
    if (g == 0) return NULL;
    char text[512];
    snprintf(text, sizeof text,
             "vLLM has a scheme for this rule (WNA16), but its Marlin kernel takes group sizes 32, "
             "64 and 128 (or per channel) and Machete 64 and 128, not %lld: only its Exllama "
             "kernel (int4 or int8, float16 activations) or Humming kernel (CUDA, with the "
             "optional humming package) can serve it, and vLLM refuses the layer when loading "
             "where neither can; use tile_size 32, 64 or 128",
             (long long)g);
    return strdup(text);
}

quant_ck_status ck_ct_outputs(ck_shard_plan *sp, ck_tensor_plan *tp, quant_ck_error *err)
{
    quant_ck_status st = ct_check(tp, err);
    if (st == QUANT_CK_OK) st = ct_check_servable(tp, err);
    if (st != QUANT_CK_OK) return st;
    tp->ct_group_warn = odd_group_size(tp) != 0;
    return ck_ct_tensor_outputs(sp, tp, err);
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
