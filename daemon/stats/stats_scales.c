/* stats_scales.c -- static activation scales (SRQ, SPEC sections 4 and 8) from averaged
 * calibration statistics: an activation's module path and output tensor base, its qtype (a fixed
 * one, or the act_qtype of the first rule matching its module path), and the scale and zero point
 * libquant's quant_compute_scale gives for the averaged calibration.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Precision: the store averages in float64 (sum / count, or the EMA); each averaged value is
 * rounded to float32 once here, where Qwix, whose sums are float32, would have divided in float32.
 * Min/max statistics are then treated as the `minmax` calibration treats them (SPEC section 3):
 * min(min, 0) and max(max, 0), so zero is always representable.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"

char *qd_act_tensor_base(const char *name)
{
    char *base = strdup(name);
    for (char *p = base; p && *p; p++)
        if (*p == '/') *p = '.';
    return base;
}

char *qd_act_module_path(const char *name)
{
    char *path = qd_act_tensor_base(name);
    if (!path) return NULL;
    char *last = strrchr(path, '.');
    if (last)
        *last = '\0';
    else
        path[0] = '\0';
    return path;
}

void qd_strings_free(char **s, size_t n)
{
    for (size_t i = 0; s && i < n; i++) free(s[i]);
    free(s);
}

static void act_scale_clear(qd_act_scale *a)
{
    free(a->name);
    free(a->tensor_base);
    free(a->scale);
    free(a->zero_point);
    memset(a, 0, sizeof *a);
}

void qd_act_scales_free(qd_act_scale *a, size_t n)
{
    for (size_t i = 0; a && i < n; i++) act_scale_clear(&a[i]);
    free(a);
}

/* The qtype of activation `name`: `fixed`, or the act_qtype of the first rule matching its module
 * path (with static_only, a rule with act_static_scale). The first match decides: a matching rule
 * without one leaves the activation unscaled (*found false), as for weights. */
static qd_status choose_qtype(const char *name, const quant_ruleset *rs, const quant_qtype *fixed,
                              bool static_only, quant_qtype *qtype, long *rule, bool *found,
                              qd_err *err)
{
    *found = false;
    *rule = -1;
    if (fixed) {
        *qtype = *fixed;
        *found = true;
        return QD_OK;
    }
    char *module = qd_act_module_path(name);
    if (!module) return qd_fail(err, QD_NOMEM, "out of memory");
    long index = -1;
    quant_ck_error ce;
    quant_ck_status cs = quant_ruleset_find(rs, module, &index, &ce); /* a match error is one */
    free(module);
    if (cs != QUANT_CK_OK)
        return qd_fail(err, cs == QUANT_CK_ERR_NOMEM ? QD_NOMEM : QD_INVALID, "activation '%s': %s",
                       name, ce.message);
    if (index < 0) return QD_OK;
    const quant_rule *r = quant_ruleset_rule(rs, (size_t)index);
    if (!r->has_act_qtype || (static_only && !r->act_static_scale)) return QD_OK;
    *qtype = r->act_qtype;
    *rule = index;
    *found = true;
    return QD_OK;
}

/* The averaged calibration as float32 (rounded once), min/max widened to include zero. */
static quant_calibration to_float_calibration(const qd_stat_avg *a, float *lo_or_abs, float *hi)
{
    bool minmax = a->kind == QD_STAT_MINMAX;
    for (int64_t i = 0; i < a->n; i++) {
        float v = (float)a->a[i];
        lo_or_abs[i] = minmax ? fminf(v, 0.0f) : v;
        if (minmax) hi[i] = fmaxf((float)a->b[i], 0.0f);
    }
    return (quant_calibration){.asymmetric = minmax,
                               .absmax = minmax ? NULL : lo_or_abs,
                               .min = minmax ? lo_or_abs : NULL,
                               .max = minmax ? hi : NULL};
}

/* SPEC section 4 for one activation into *out (which owns what it gets, also on failure). */
static qd_status scale_one(const qd_stat_avg *a, quant_qtype qtype, long rule, qd_act_scale *out,
                           qd_err *err)
{
    size_t n = a->n > 0 ? (size_t)a->n : 0, alloc = n ? n : 1;
    bool minmax = a->kind == QD_STAT_MINMAX;
    *out =
        (qd_act_scale){.qtype = qtype, .rule = rule, .rank = a->rank, .n = a->n, .count = a->count};
    memcpy(out->shape, a->shape, sizeof out->shape);
    out->name = strdup(a->name);
    out->tensor_base = qd_act_tensor_base(a->name);
    out->scale = malloc(alloc * sizeof *out->scale);
    if (minmax) out->zero_point = malloc(alloc * sizeof *out->zero_point);
    float *lo = malloc(alloc * sizeof *lo), *hi = minmax ? malloc(alloc * sizeof *hi) : NULL;
    qd_status st = QD_OK;
    if (!out->name || !out->tensor_base || !out->scale || (minmax && !out->zero_point) || !lo ||
        (minmax && !hi)) {
        st = qd_fail(err, QD_NOMEM, "out of memory");
    } else {
        quant_calibration cal = to_float_calibration(a, lo, hi);
        quant_how how;
        quant_how_init(&how, qtype);
        how.calibration = minmax ? "minmax" : "absmax";
        quant_error qe;
        if (quant_compute_scale(&how, &cal, a->n, out->scale, out->zero_point, &qe) != QUANT_OK)
            st = qd_fail(err, QD_INVALID, "activation '%s': act_qtype %s: %s", a->name,
                         quant_qtype_traits_get(qtype)->name, qe.message);
    }
    free(lo);
    free(hi);
    return st;
}

/* Appends a copy of name to the skipped list (sized for every activation). */
static qd_status skip(char **skipped, size_t *n_skipped, const char *name, qd_err *err)
{
    char *copy = strdup(name);
    if (!copy) return qd_fail(err, QD_NOMEM, "out of memory");
    skipped[(*n_skipped)++] = copy;
    return QD_OK;
}

static qd_status scale_all(const qd_stat_avg *avg, size_t n, const quant_ruleset *rs,
                           const quant_qtype *fixed, bool static_only, qd_act_scale *out,
                           size_t *n_out, char **skipped, size_t *n_skipped, qd_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (avg[i].count <= 0)
            return qd_fail(err, QD_INVALID,
                           "activation '%s': count is 0, there is no calibration to average",
                           avg[i].name);
    for (size_t i = 0; i < n; i++) {
        quant_qtype qtype = QUANT_QTYPE_INT8;
        long rule;
        bool found;
        qd_status st =
            choose_qtype(avg[i].name, rs, fixed, static_only, &qtype, &rule, &found, err);
        if (st == QD_OK && !found) st = skip(skipped, n_skipped, avg[i].name, err);
        if (st == QD_OK && found) st = scale_one(&avg[i], qtype, rule, &out[(*n_out)++], err);
        if (st != QD_OK) return st;
    }
    return QD_OK;
}

/* Two activations whose names differ only in '/' against '.' ("a/b" and "a.b") would write
 * the same output tensors: refused, naming both. */
static qd_status distinct_bases(const qd_act_scale *s, size_t n, qd_err *err)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = i + 1; k < n; k++)
            if (strcmp(s[i].tensor_base, s[k].tensor_base) == 0)
                return qd_fail(err, QD_INVALID,
                               "activations '%s' and '%s' would both be written as %s_scale",
                               s[i].name, s[k].name, s[i].tensor_base);
    return QD_OK;
}

qd_status qd_act_scales(const qd_stat_avg *avg, size_t n, const quant_ruleset *rs,
                        const quant_qtype *fixed, bool static_only, qd_act_scale **out,
                        size_t *n_out, char ***skipped, size_t *n_skipped, qd_err *err)
{
    *out = NULL;
    *n_out = 0;
    *skipped = NULL;
    *n_skipped = 0;
    if (!fixed && !rs) return qd_fail(err, QD_INVALID, "a qtype or a rule set is needed");
    if (fixed && !quant_qtype_traits_get(*fixed))
        return qd_fail(err, QD_INVALID, "unknown qtype %d", (int)*fixed);
    qd_act_scale *scales = calloc(n ? n : 1, sizeof *scales);
    char **names = calloc(n ? n : 1, sizeof *names);
    size_t n_scales = 0, n_names = 0;
    qd_status st = scales && names ? scale_all(avg, n, rs, fixed, static_only, scales, &n_scales,
                                               names, &n_names, err)
                                   : qd_fail(err, QD_NOMEM, "out of memory");
    if (st == QD_OK) st = distinct_bases(scales, n_scales, err);
    if (st != QD_OK) {
        qd_act_scales_free(scales, n_scales);
        qd_strings_free(names, n_names);
        return st;
    }
    *out = scales;
    *n_out = n_scales;
    *skipped = names;
    *n_skipped = n_names;
    return QD_OK;
}
