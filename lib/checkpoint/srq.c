/* srq.c -- quant_srq_compute(): static activation scales (SRQ, SPEC sections 4 and 8) from
 * averaged calibration statistics and a rule set, the one engine behind `quant quantize --stats`,
 * a quantd job's stats_model and GET /v1/models/{m}/scales. Per activation: module path -> first
 * matching rule -> its act_qtype -> SPEC section 4 on the average rounded once to float32 -> the
 * output tensor base; or skipped, with the reason.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Precision: averages come in float64 (quantd's store, or sum / count of a dump); each value is
 * rounded to float32 once here, where Qwix, whose sums are float32, divides in float32. Min/max
 * statistics are treated as the `minmax` calibration treats them (SPEC section 3): min(min, 0)
 * and max(max, 0), so zero is always representable.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"
#include "quant_srq.h"

struct quant_srq {
    size_t n, n_skipped;
    quant_static_act *acts;     /* name, tensor_base, scale, zero_point owned */
    quant_skipped_act *skipped; /* name, reason owned */
    size_t n_imp;
    quant_importance *imp; /* act, module_path, w owned: the activations with a mean_sq */
};

void quant_srq_options_init(quant_srq_options *o)
{
    *o = (quant_srq_options){.static_only = true, .qtype = QUANT_QTYPE_INT8};
}

void quant_srq_free(quant_srq *srq)
{
    if (!srq) return;
    for (size_t i = 0; i < srq->n; i++) {
        free((char *)srq->acts[i].name);
        free((char *)srq->acts[i].tensor_base);
        free((float *)srq->acts[i].scale);
        free((int32_t *)srq->acts[i].zero_point);
    }
    for (size_t i = 0; i < srq->n_skipped; i++) {
        free((char *)srq->skipped[i].name);
        free((char *)srq->skipped[i].reason);
    }
    for (size_t i = 0; i < srq->n_imp; i++) {
        free((char *)srq->imp[i].act);
        free((char *)srq->imp[i].module_path);
        free((float *)srq->imp[i].w);
    }
    free(srq->acts);
    free(srq->skipped);
    free(srq->imp);
    free(srq);
}

const quant_static_act *quant_srq_acts(const quant_srq *srq, size_t *n)
{
    if (n) *n = srq ? srq->n : 0;
    return srq ? srq->acts : NULL;
}

const quant_skipped_act *quant_srq_skipped(const quant_srq *srq, size_t *n)
{
    if (n) *n = srq ? srq->n_skipped : 0;
    return srq ? srq->skipped : NULL;
}

void quant_srq_apply(const quant_srq *srq, quant_pipeline_options *o)
{
    o->allow_static_acts = true;
    o->static_acts = quant_srq_acts(srq, &o->n_static_acts);
    o->skipped_acts = quant_srq_skipped(srq, &o->n_skipped_acts);
    o->importance_given = true;
    o->importance = srq->imp;
    o->n_importance = srq->n_imp;
}

/* An activation's mean_sq as the importance of the weights of its module path (SPEC 9): the
 * average rounded once to float32. */
static quant_ck_status add_importance(quant_srq *q, const quant_act_stat *a, quant_ck_error *err)
{
    if (!a->mean_sq) return QUANT_CK_OK;
    quant_importance *e = &q->imp[q->n_imp];
    size_t len = strlen(a->name) + 1;
    char *module = malloc(len);
    float *w = malloc((size_t)(a->mean_sq_len ? a->mean_sq_len : 1) * sizeof *w);
    char *act = strdup(a->name);
    if (!module || !w || !act) {
        free(module);
        free(w);
        free(act);
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    size_t cut = 0; /* the name less its last component, '/' read as '.' */
    for (size_t i = 0; i < len; i++) {
        module[i] = a->name[i] == '/' ? '.' : a->name[i];
        if (module[i] == '.') cut = i;
    }
    module[cut] = '\0';
    for (int64_t i = 0; i < a->mean_sq_len; i++) {
        double v = a->mean_sq[i];
        if (!(v >= 0) || (float)v > 3.4028234663852886e38f) {
            free(module);
            free(w);
            free(act);
            return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                 "activation '%s': mean_sq element %lld is %g (must be finite "
                                 "and >= 0 in float32)",
                                 a->name, (long long)i, v);
        }
        w[i] = (float)v;
    }
    *e = (quant_importance){.act = act, .module_path = module, .w = w, .n = a->mean_sq_len};
    q->n_imp++;
    return QUANT_CK_OK;
}

/* ---- names ----------------------------------------------------------------------------------- */

/* The output tensor base: the name with '/' read as '.' (malloc'd). */
static char *tensor_base(const char *name)
{
    char *base = strdup(name);
    for (char *p = base; p && *p; p++)
        if (*p == '/') *p = '.';
    return base;
}

/* ---- one activation -------------------------------------------------------------------------- */

/* What the rules make of one activation: a qtype and rule, or a reason to skip it (malloc'd). */
typedef struct srq_choice {
    bool found;
    quant_qtype qtype;
    long rule;
    char *reason;
} srq_choice;

static quant_ck_status skip_reason(srq_choice *c, quant_ck_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static quant_ck_status skip_reason(srq_choice *c, quant_ck_error *err, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    c->found = false;
    c->reason = strdup(buf);
    return c->reason ? QUANT_CK_OK : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

/* The first rule matching the module path of `base` decides, as for weights: a matching rule
 * without an act_qtype (or, static_only, without act_static_scale) leaves the activation out. */
static quant_ck_status choose(const quant_act_stat *s, const char *base, const quant_ruleset *rules,
                              quant_rule_matcher *m, const quant_srq_options *o, srq_choice *c,
                              quant_ck_error *err)
{
    *c = (srq_choice){.rule = -1, .qtype = o->qtype};
    if (o->fixed_qtype) {
        c->found = true;
    } else {
        size_t cap = strlen(base) + 1;
        char *module = malloc(cap), sm[CK_SHORT_MAX];
        if (!module) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        quant_module_path(base, module, cap);
        quant_ck_status st = quant_rule_matcher_find(m, module, &c->rule, err);
        const quant_rule *r = c->rule >= 0 ? quant_ruleset_rule(rules, (size_t)c->rule) : NULL;
        const char *mod = ck_short_text(module, sm, sizeof sm);
        if (st != QUANT_CK_OK)
            quant_ck_prefix(err, "activation '%s'", s->name);
        else if (!r)
            st = skip_reason(c, err, "no rule matches module path '%s'", mod);
        else if (!r->has_act_qtype)
            st = skip_reason(c, err,
                             "rule %ld, the first to match module path '%s', has no act_qtype",
                             c->rule, mod);
        else if (o->static_only && !r->act_static_scale)
            st = skip_reason(c, err,
                             "rule %ld, the first to match module path '%s', quantizes it "
                             "dynamically (act_qtype %s without act_static_scale)",
                             c->rule, mod, quant_qtype_traits_get(r->act_qtype)->name);
        else
            *c = (srq_choice){.found = true, .qtype = r->act_qtype, .rule = c->rule};
        free(module);
        if (st != QUANT_CK_OK || !c->found) return st;
    }
    if (s->kind == QUANT_STAT_NONE)
        return skip_reason(c, err,
                           "its statistics give no calibration for a scale (no absmax, nor min "
                           "and max: mean_sq only)");
    return QUANT_CK_OK;
}

/* The averaged calibration as float32 (rounded once), min/max widened to include zero. */
static quant_calibration to_float(const quant_act_stat *s, int64_t n, float *lo_or_abs, float *hi)
{
    bool minmax = s->kind == QUANT_STAT_MINMAX;
    for (int64_t i = 0; i < n; i++) {
        float v = (float)s->a[i];
        lo_or_abs[i] = minmax ? fminf(v, 0.0f) : v;
        if (minmax) hi[i] = fmaxf((float)s->b[i], 0.0f);
    }
    return (quant_calibration){.asymmetric = minmax,
                               .absmax = minmax ? NULL : lo_or_abs,
                               .min = minmax ? lo_or_abs : NULL,
                               .max = minmax ? hi : NULL};
}

/* SPEC section 4 for one activation into *out (which owns what it gets, also on failure). */
static quant_ck_status scale_one(const quant_act_stat *s, char *base, const srq_choice *c,
                                 quant_static_act *out, quant_ck_error *err)
{
    int64_t n = quant_numel(s->rank, s->shape);
    size_t alloc = n > 0 ? (size_t)n : 1;
    bool minmax = s->kind == QUANT_STAT_MINMAX;
    float *scale = malloc(alloc * sizeof *scale), *lo = malloc(alloc * sizeof *lo);
    float *hi = minmax ? malloc(alloc * sizeof *hi) : NULL;
    int32_t *zp = minmax ? malloc(alloc * sizeof *zp) : NULL;
    *out = (quant_static_act){.name = strdup(s->name),
                              .tensor_base = base,
                              .rule = c->rule,
                              .qtype = c->qtype,
                              .rank = s->rank,
                              .scale = scale,
                              .zero_point = zp,
                              .count = s->count};
    memcpy(out->shape, s->shape, sizeof out->shape);
    quant_ck_status st = QUANT_CK_OK;
    if (!out->name || !scale || !lo || (minmax && (!hi || !zp))) {
        st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    } else {
        quant_calibration cal = to_float(s, n, lo, hi);
        quant_how how;
        quant_how_init(&how, c->qtype);
        how.calibration = minmax ? "minmax" : "absmax";
        quant_error qe;
        if (quant_compute_scale(&how, &cal, n, scale, zp, &qe) != QUANT_OK)
            st = quant_ck_fail(err, QUANT_CK_ERR_ARG, "activation '%s': act_qtype %s: %s", s->name,
                               quant_qtype_traits_get(c->qtype)->name, qe.message);
    }
    free(lo);
    free(hi);
    return st;
}

/* ---- checks ---------------------------------------------------------------------------------- */

static quant_ck_status check_stat(const quant_act_stat *s, quant_ck_error *err)
{
    if (!s->name) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "an activation without a name");
    bool shape_ok = s->rank >= 0 && s->rank <= QUANT_MAX_RANK;
    for (int i = 0; shape_ok && i < s->rank; i++) shape_ok = s->shape[i] >= 1;
    if (!shape_ok)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "activation '%s': a bad shape", s->name);
    if (s->kind != QUANT_STAT_NONE &&
        (!s->a || (s->kind == QUANT_STAT_MINMAX) != (s->b != NULL) || s->kind > QUANT_STAT_MINMAX))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "activation '%s': absmax, or min and max, must be given", s->name);
    if (s->count <= 0)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "activation '%s': count is %lld, there is no calibration to average",
                             s->name, (long long)s->count);
    return QUANT_CK_OK;
}

static int by_name(const void *x, const void *y)
{
    const quant_act_stat *a = *(const quant_act_stat *const *)x;
    const quant_act_stat *b = *(const quant_act_stat *const *)y;
    return strcmp(a->name, b->name);
}

/* The activations checked and sorted by name (pointers into stats), no name twice. */
static quant_ck_status sorted(const quant_act_stat *stats, size_t n, const quant_act_stat ***out,
                              quant_ck_error *err)
{
    const quant_act_stat **v = calloc(n ? n : 1, sizeof *v);
    if (!v) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    quant_ck_status st = QUANT_CK_OK;
    for (size_t i = 0; st == QUANT_CK_OK && i < n; i++) {
        v[i] = &stats[i];
        st = check_stat(&stats[i], err);
    }
    if (st == QUANT_CK_OK) qsort(v, n, sizeof *v, by_name);
    for (size_t i = 1; st == QUANT_CK_OK && i < n; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            st = quant_ck_fail(err, QUANT_CK_ERR_ARG, "activation '%s' is given twice", v[i]->name);
    if (st != QUANT_CK_OK) {
        free(v);
        return st;
    }
    *out = v;
    return QUANT_CK_OK;
}

/* Two activations whose names differ only in '/' against '.' ("a/b" and "a.b") would write the
 * same output tensors: refused, naming both. */
static quant_ck_status distinct_bases(const quant_srq *q, quant_ck_error *err)
{
    for (size_t i = 0; i < q->n; i++)
        for (size_t k = i + 1; k < q->n; k++)
            if (strcmp(q->acts[i].tensor_base, q->acts[k].tensor_base) == 0)
                return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                     "activations '%s' and '%s' would both be written as %s_scale",
                                     q->acts[i].name, q->acts[k].name, q->acts[i].tensor_base);
    return QUANT_CK_OK;
}

static quant_ck_status check_args(const quant_act_stat *stats, size_t n, const quant_ruleset *rules,
                                  const quant_srq_options *o, quant_srq **out, quant_ck_error *err)
{
    if (!out || (n > 0 && !stats))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_srq_compute: NULL argument");
    if (!o->fixed_qtype && !rules)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_srq_compute: a qtype or rules needed");
    if (o->fixed_qtype && !quant_qtype_traits_get(o->qtype))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "unknown qtype %d", (int)o->qtype);
    return QUANT_CK_OK;
}

/* ---- the engine ------------------------------------------------------------------------------ */

/* One activation into q: a scale or a skip. */
static quant_ck_status one(quant_srq *q, const quant_act_stat *s, const quant_ruleset *rules,
                           quant_rule_matcher *m, const quant_srq_options *o, quant_ck_error *err)
{
    char *base = tensor_base(s->name);
    if (!base) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    srq_choice c;
    quant_ck_status st = choose(s, base, rules, m, o, &c, err);
    if (st == QUANT_CK_OK && c.found) return scale_one(s, base, &c, &q->acts[q->n++], err);
    free(base);
    if (st != QUANT_CK_OK) {
        free(c.reason);
        return st;
    }
    quant_skipped_act *k = &q->skipped[q->n_skipped++];
    *k = (quant_skipped_act){.name = strdup(s->name), .rule = c.rule, .reason = c.reason};
    return k->name ? QUANT_CK_OK : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

quant_ck_status quant_srq_compute(const quant_act_stat *stats, size_t n, const quant_ruleset *rules,
                                  const quant_srq_options *opts, quant_srq **out,
                                  quant_ck_error *err)
{
    quant_srq_options defaults;
    if (!opts) quant_srq_options_init(&defaults);
    const quant_srq_options *o = opts ? opts : &defaults;
    if (out) *out = NULL;
    quant_ck_status st = check_args(stats, n, rules, o, out, err);
    const quant_act_stat **v = NULL;
    if (st == QUANT_CK_OK) st = sorted(stats, n, &v, err);
    if (st != QUANT_CK_OK) return st;
    quant_srq *q = calloc(1, sizeof *q);
    quant_rule_matcher *m = rules ? quant_rule_matcher_new(rules) : NULL;
    if (q) q->acts = calloc(n ? n : 1, sizeof *q->acts);
    if (q) q->skipped = calloc(n ? n : 1, sizeof *q->skipped);
    if (q) q->imp = calloc(n ? n : 1, sizeof *q->imp);
    if (!q || !q->acts || !q->skipped || !q->imp || (rules && !m))
        st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == QUANT_CK_OK && i < n; i++) st = one(q, v[i], rules, m, o, err);
    for (size_t i = 0; st == QUANT_CK_OK && i < n; i++) st = add_importance(q, v[i], err);
    if (st == QUANT_CK_OK) st = distinct_bases(q, err);
    quant_rule_matcher_free(m);
    free(v);
    if (st != QUANT_CK_OK) {
        quant_srq_free(q);
        return st;
    }
    *out = q;
    return QUANT_CK_OK;
}
