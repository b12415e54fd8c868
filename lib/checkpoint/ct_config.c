/* ct_config.c -- compressed-tensors' `quantization_config` for config.json: one config group per
 * distinct (weights, input_activations, format) scheme with its target modules, the `ignore`
 * list of Linear-shaped weights left in float, and the merge into an existing config.json.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"

struct ck_ct_config {
    json_t *groups;  /* scheme key -> {"targets": [...], "weights":.., ...} in insertion order */
    json_t *ignore;  /* module paths */
    json_t *formats; /* format name -> true */
};

ck_ct_config *ck_ct_config_new(void)
{
    ck_ct_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return NULL;
    cfg->groups = json_object();
    cfg->ignore = json_array();
    cfg->formats = json_object();
    if (!cfg->groups || !cfg->ignore || !cfg->formats) {
        ck_ct_config_free(cfg);
        return NULL;
    }
    return cfg;
}

void ck_ct_config_free(ck_ct_config *cfg)
{
    if (!cfg) return;
    json_decref(cfg->groups);
    json_decref(cfg->ignore);
    json_decref(cfg->formats);
    free(cfg);
}

/* QuantizationArgs of the weights, from the planned scale shape. */
static json_t *weight_args(const ck_tensor_plan *tp)
{
    const quant_qtype_traits *tr = quant_qtype_traits_get(tp->how.qtype);
    int64_t out = tp->in->shape[0], in = tp->in->shape[1];
    int64_t s0 = tp->scale_shape[0], s1 = tp->scale_shape[1];
    bool fp = tr->kind == QUANT_CODE_FP8 || tr->kind == QUANT_CODE_FP4;
    json_t *a = json_pack("{s:i, s:s, s:b, s:b}", "num_bits", tr->bits, "type",
                          fp ? "float" : "int", "symmetric", !tp->asym, "dynamic", 0);
    if (!a) return NULL;
    if (ck_ct_is_mx(tp->how.qtype)) { /* the MXFP4A16 / MXFP8A16 presets: E8M0 scales as uint8 */
        json_object_set_new(a, "scale_dtype", json_string("torch.uint8"));
        json_object_set_new(a, "zp_dtype", json_null());
    }
    bool nvfp4 = tp->how.qtype == QUANT_QTYPE_NVFP4;
    if (nvfp4) { /* the NVFP4A16 preset: e4m3fn block scales under a per-tensor global scale */
        json_object_set_new(a, "scale_dtype", json_string("torch.float8_e4m3fn"));
        json_object_set_new(a, "zp_dtype", json_null());
    }
    ck_ct_strategy strategy = ck_ct_strategy_of(tp);
    json_object_set_new(a, "strategy",
                        json_string(nvfp4 ? "tensor_group" : ck_ct_strategy_name(strategy)));
    if (strategy == CK_CT_GROUP) {
        json_object_set_new(a, "group_size", json_integer(in / s1));
        json_object_set_new(a, "actorder", json_null());
    } else if (strategy == CK_CT_BLOCK) {
        json_object_set_new(a, "block_structure",
                            json_pack("[I, I]", (json_int_t)(out / s0), (json_int_t)(in / s1)));
    }
    return a;
}

/* Dynamic per-token input activations, or static per-tensor ones with an input_scale (SRQ:
 * symmetric unless the activation has a zero point). */
static json_t *act_args(const ck_tensor_plan *tp)
{
    const quant_rule *r = tp->r;
    if (!r->has_act_qtype) return json_null();
    const quant_qtype_traits *tr = quant_qtype_traits_get(r->act_qtype);
    bool asym;
    if (tp->static_act) {
        asym = tp->static_act->zero_point != NULL;
    } else {
        quant_calib_method m;
        asym = quant_calib_parse(r->act_calibration, &m, NULL) == QUANT_OK && m.asymmetric;
    }
    return json_pack("{s:i, s:s, s:b, s:s, s:b}", "num_bits", tr->bits, "type",
                     tr->kind == QUANT_CODE_FP8 ? "float" : "int", "symmetric", !asym, "strategy",
                     tp->static_act ? "tensor" : "token", "dynamic", !tp->static_act);
}

static const char *format_of(const ck_tensor_plan *tp)
{
    if (tp->how.qtype == QUANT_QTYPE_MXFP4) return "mxfp4-pack-quantized";
    if (tp->how.qtype == QUANT_QTYPE_MXFP8) return "mxfp8-quantized";
    if (tp->how.qtype == QUANT_QTYPE_NVFP4) return "nvfp4-pack-quantized";
    if (tp->how.qtype == QUANT_QTYPE_FP8_E4M3FN) return "float-quantized";
    return tp->codec == CK_CODEC_PACK32 ? "pack-quantized" : "int-quantized";
}

static bool is_linear_weight(const quant_st_tensor *t)
{
    size_t len = strlen(t->name);
    quant_dtype d;
    return t->rank == 2 && len > 7 && strcmp(t->name + len - 7, ".weight") == 0 &&
           quant_st_to_quant_dtype(t->dtype, &d) && quant_dtype_is_float(d);
}

static quant_ck_status add_target(ck_ct_config *cfg, const ck_tensor_plan *tp, const char *module)
{
    json_t *scheme = json_pack("{s:o, s:o, s:s}", "weights", weight_args(tp), "input_activations",
                               act_args(tp), "format", format_of(tp));
    char *key = scheme ? json_dumps(scheme, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
    json_t *group = key ? json_object_get(cfg->groups, key) : NULL;
    if (key && !group) {
        json_object_set_new(scheme, "targets", json_array());
        json_object_set(cfg->groups, key, scheme);
        group = scheme;
    }
    bool ok = group &&
              json_array_append_new(json_object_get(group, "targets"), json_string(module)) == 0 &&
              json_object_set_new(cfg->formats, format_of(tp), json_true()) == 0;
    free(key);
    json_decref(scheme);
    return ok ? QUANT_CK_OK : QUANT_CK_ERR_NOMEM;
}

quant_ck_status ck_ct_config_add(ck_ct_config *cfg, const ck_tensor_plan *tp, quant_ck_error *err)
{
    if (!tp->quantize && !is_linear_weight(tp->in)) return QUANT_CK_OK;
    char module[4096];
    if (!quant_module_path(tp->in->name, module, sizeof module))
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED, "tensor name too long: '%.64s...'",
                             tp->in->name);
    quant_ck_status st =
        tp->quantize
            ? add_target(cfg, tp, module)
            : (json_array_append_new(cfg->ignore, json_string(module)) == 0 ? QUANT_CK_OK
                                                                            : QUANT_CK_ERR_NOMEM);
    return st == QUANT_CK_OK ? st : quant_ck_fail(err, st, "out of memory");
}

static json_t *config_json(const ck_ct_config *cfg)
{
    json_t *groups = json_object();
    const char *key;
    json_t *g;
    size_t i = 0;
    json_object_foreach(cfg->groups, key, g)
    {
        char name[32];
        snprintf(name, sizeof name, "group_%zu", i++);
        json_object_set(groups, name, g);
    }
    const char *format = "dense";
    if (json_object_size(cfg->formats) == 1) {
        void *it = json_object_iter(cfg->formats);
        format = json_object_iter_key(it);
    } else if (json_object_size(cfg->formats) > 1) {
        format = "mixed-precision";
    }
    return json_pack("{s:s, s:s, s:s, s:o, s:O, s:n, s:o}", "quant_method", "compressed-tensors",
                     "format", format, "quantization_status", "compressed", "config_groups", groups,
                     "ignore", cfg->ignore, "kv_cache_scheme", "sparsity_config", json_object());
}

char *ck_ct_config_apply(const ck_ct_config *cfg, const char *text, quant_ck_error *err)
{
    json_error_t je;
    json_t *root = text ? json_loads(text, 0, &je) : json_object();
    if (!root || !json_is_object(root)) {
        quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "config.json: %s",
                      root ? "not a JSON object" : je.text);
        json_decref(root);
        return NULL;
    }
    json_t *qc = config_json(cfg);
    char *out = NULL;
    if (qc && json_object_set_new(root, "quantization_config", qc) == 0)
        out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!out) quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return out;
}
