/* layout_native.c -- the native output layout (SPEC section 7): NAME.qvalue, NAME.scale and, for
 * asymmetric calibrations, NAME.zero_point; static activation scales ACT_scale and
 * ACT_zero_point (SRQ); and the `quantization` metadata entry that tells a reader how each
 * tensor was quantized.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"

static long add_suffixed(ck_shard_plan *sp, const char *name, const char *suffix,
                         quant_st_dtype dtype, int rank, const int64_t *shape)
{
    size_t n = strlen(name) + strlen(suffix) + 1;
    char *full = malloc(n);
    if (!full) return -1;
    snprintf(full, n, "%s%s", name, suffix);
    long index = ck_plan_add_out(sp, full, dtype, rank, shape);
    free(full);
    return index;
}

quant_ck_status ck_native_outputs(ck_shard_plan *sp, ck_tensor_plan *tp, quant_ck_error *err)
{
    const quant_st_tensor *t = tp->in;
    const quant_qtype_traits *tr = quant_qtype_traits_get(tp->how.qtype);
    int64_t qshape[QUANT_MAX_RANK];
    memcpy(qshape, t->shape, sizeof qshape);
    quant_st_dtype qdtype = quant_st_from_quant_dtype(tr->storage);
    if (tp->how.pack && tr->packable) {
        qdtype = QUANT_ST_U8;
        qshape[t->rank - 1] = (qshape[t->rank - 1] + 1) / 2;
    }
    tp->codec = CK_CODEC_RAW;
    tp->out[CK_OUT_DATA] = add_suffixed(sp, t->name, ".qvalue", qdtype, t->rank, qshape);
    tp->out[CK_OUT_SCALE] =
        add_suffixed(sp, t->name, ".scale", quant_st_from_quant_dtype(tp->how.scale_dtype), t->rank,
                     tp->scale_shape);
    if (tp->asym)
        tp->out[CK_OUT_ZP] =
            add_suffixed(sp, t->name, ".zero_point",
                         quant_st_from_quant_dtype(tr->zero_point_dtype), t->rank, tp->scale_shape);
    if (tp->out[CK_OUT_DATA] < 0 || tp->out[CK_OUT_SCALE] < 0 ||
        (tp->asym && tp->out[CK_OUT_ZP] < 0))
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return QUANT_CK_OK;
}

quant_ck_status ck_native_act_outputs(ck_shard_plan *sp, ck_act_plan *ap, quant_ck_error *err)
{
    const quant_static_act *a = ap->act;
    ap->out_scale = add_suffixed(sp, a->tensor_base, "_scale", QUANT_ST_F32, a->rank, a->shape);
    if (a->zero_point) {
        quant_dtype zd = quant_qtype_traits_get(a->qtype)->zero_point_dtype;
        ap->out_zp = add_suffixed(sp, a->tensor_base, "_zero_point", quant_st_from_quant_dtype(zd),
                                  a->rank, a->shape);
    }
    if (ap->out_scale < 0 || (a->zero_point && ap->out_zp < 0))
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return QUANT_CK_OK;
}

static json_t *shape_json(int rank, const int64_t *shape)
{
    json_t *a = json_array();
    for (int i = 0; a && i < rank; i++) json_array_append_new(a, json_integer(shape[i]));
    return a;
}

static json_t *tensor_entry(const ck_tensor_plan *tp)
{
    const quant_rule *r = tp->r;
    const quant_qtype_traits *tr = quant_qtype_traits_get(tp->how.qtype);
    json_t *e =
        json_pack("{s:s, s:s, s:o, s:b, s:s, s:I}", "qtype", tr->name, "orig_dtype",
                  quant_st_dtype_name(tp->in->dtype), "orig_shape",
                  shape_json(tp->in->rank, tp->in->shape), "packed", tp->how.pack && tr->packable,
                  "calibration", r->weight_calibration, "rule", (json_int_t)tp->rule);
    if (e && tp->how.global_scale > 0.0f) /* nvfp4, once the pipeline has measured the tensor */
        json_object_set_new(e, "global_scale", json_real((double)tp->how.global_scale));
    if (e && r->has_act_qtype) {
        json_object_set_new(e, "act_qtype",
                            json_string(quant_qtype_traits_get(r->act_qtype)->name));
        json_object_set_new(e, "act_calibration", json_string(r->act_calibration));
        if (r->act_static_scale) json_object_set_new(e, "act_static", json_true());
    }
    return e;
}

/* "static_activations": {BASE: {"qtype", "rule", "asymmetric"}} for the shard's SRQ scales. */
static bool add_static_acts(const ck_shard_plan *sp, json_t *root)
{
    if (sp->n_acts == 0) return true;
    json_t *acts = json_object();
    if (!acts || json_object_set_new(root, "static_activations", acts) != 0) return false;
    for (size_t i = 0; i < sp->n_acts; i++) {
        const quant_static_act *a = sp->acts[i].act;
        json_t *e = json_pack("{s:s, s:o, s:b}", "qtype", quant_qtype_traits_get(a->qtype)->name,
                              "rule", a->rule >= 0 ? json_integer(a->rule) : json_null(),
                              "asymmetric", a->zero_point != NULL);
        if (!e || json_object_set_new(acts, a->tensor_base, e) != 0) return false;
    }
    return true;
}

char *ck_native_metadata(const ck_shard_plan *sp)
{
    json_t *tensors = json_object();
    json_t *root = json_pack("{s:s, s:o}", "format", "quantd.native/1", "tensors", tensors);
    if (!root) return NULL;
    for (size_t i = 0; i < sp->n; i++) {
        if (!sp->t[i].quantize) continue;
        json_t *e = tensor_entry(&sp->t[i]);
        if (!e || json_object_set_new(tensors, sp->t[i].in->name, e) != 0) {
            json_decref(root);
            return NULL;
        }
    }
    if (!add_static_acts(sp, root)) {
        json_decref(root);
        return NULL;
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return text;
}

void ck_store_zero_points(quant_dtype dtype, const int32_t *zp, size_t n, void *out)
{
    for (size_t i = 0; i < n; i++) {
        if (dtype == QUANT_DTYPE_I16)
            ((int16_t *)out)[i] = (int16_t)zp[i];
        else if (dtype == QUANT_DTYPE_U8)
            ((uint8_t *)out)[i] = (uint8_t)zp[i];
        else
            ((int8_t *)out)[i] = (int8_t)zp[i];
    }
}

void *ck_encode_zero_point(const ck_tensor_plan *tp, const int32_t *zp, size_t *len)
{
    if (tp->zp_packed) return ck_ct_pack_zero_point(tp, zp, len);
    quant_dtype dt = quant_qtype_traits_get(tp->how.qtype)->zero_point_dtype;
    size_t n = (size_t)tp->scale_numel;
    *len = n * quant_dtype_size(dt);
    void *out = ck_buf_alloc(*len);
    if (out) ck_store_zero_points(dt, zp, n, out);
    return out;
}
