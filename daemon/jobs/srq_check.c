/* srq_check.c -- a job with a stats_model checked against the statistics it names when it is
 * created, not when it runs: a weight its plan quantizes by an act_static_scale rule takes the
 * statistics of its module's input (an activation whose name, '/' read as '.', less its last
 * component, is the weight's module path). A job whose model has them for none of those weights
 * (a naming mismatch, or no statistics at all), or in the compressed-tensors layout lacks any
 * (the run would fail), is refused (422) with the weights whose statistics are missing, their
 * rules, and the names the model's activations have.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_source.h"
#include "quant_srq.h"
#include "stats.h"

#define SHOWN_MAX 3 /* weights and activation names a message shows */

/* Whether `module` (a weight's module path) is the module path of one of the static scales. */
static bool has_scale(const quant_static_act *acts, size_t n, const char *module)
{
    for (size_t i = 0; i < n; i++) {
        size_t cap = strlen(acts[i].tensor_base) + 1;
        char *m = malloc(cap);
        bool hit = m && quant_module_path(acts[i].tensor_base, m, cap) && strcmp(m, module) == 0;
        free(m);
        if (hit) return true;
    }
    return false;
}

/* The weights of `plan` quantized by an act_static_scale rule that no scale is for: their count,
 * the first SHOWN_MAX of them into `text`; *covered gets how many have one. */
static size_t missing(const quant_plan *plan, const quant_ruleset *rs, const quant_static_act *acts,
                      size_t n_acts, char *text, size_t cap, size_t *covered)
{
    size_t count = 0, at = 0;
    *covered = 0;
    text[0] = '\0';
    for (size_t i = 0; i < quant_plan_count(plan); i++) {
        const quant_plan_entry *e = quant_plan_entry_at(plan, i);
        const quant_rule *r = e->quantized ? quant_ruleset_rule(rs, (size_t)e->rule) : NULL;
        if (!r || !r->act_static_scale) continue;
        char module[512];
        if (!quant_module_path(e->name, module, sizeof module)) continue;
        if (has_scale(acts, n_acts, module)) {
            ++*covered;
            continue;
        }
        if (count++ < SHOWN_MAX && at < cap)
            at += (size_t)snprintf(text + at, cap - at, "%s'%s' (rule %ld)", count > 1 ? ", " : "",
                                   module, e->rule);
    }
    return count;
}

/* The first SHOWN_MAX activation names of the model into `text`. */
static void names(const qd_stat_avg *avg, size_t n, char *text, size_t cap)
{
    size_t at = 0;
    text[0] = '\0';
    for (size_t i = 0; i < n && i < SHOWN_MAX && at < cap; i++)
        at += (size_t)snprintf(text + at, cap - at, "%s'%.120s'", i ? ", " : "", avg[i].name);
}

quant_ck_status qd_srq_check(const qd_app *app, const char *stats_model, const char *rules,
                             const quant_plan *plan, quant_ck_error *ck)
{
    if (!stats_model) return QUANT_CK_OK;
    quant_ruleset *rs = NULL;
    quant_ck_status st = quant_ruleset_parse(rules, strlen(rules), "job rules", &rs, ck);
    if (st != QUANT_CK_OK) return st;
    qd_stat_avg *avg = NULL;
    size_t n = 0;
    qd_err err;
    if (qd_stats_read(app->stats, stats_model, NULL, &avg, &n, &err) != QD_OK) {
        quant_ruleset_free(rs);
        return quant_ck_fail(ck, QUANT_CK_ERR_ARG, "stats_model '%s': %s", stats_model,
                             err.message);
    }
    quant_act_stat *views = n ? qd_stat_views(avg, n) : NULL;
    quant_srq *srq = NULL;
    if (n && !views)
        st = quant_ck_fail(ck, QUANT_CK_ERR_NOMEM, "out of memory");
    else if (n && (st = quant_srq_compute(views, n, rs, NULL, &srq, ck)) != QUANT_CK_OK)
        quant_ck_prefix(ck, "stats_model '%s'", stats_model);
    size_t n_acts = 0, covered = 0;
    const quant_static_act *acts = srq ? quant_srq_acts(srq, &n_acts) : NULL;
    char weights[400], seen[420];
    size_t lacking =
        st == QUANT_CK_OK ? missing(plan, rs, acts, n_acts, weights, sizeof weights, &covered) : 0;
    /* the native layout runs with some activations missing (those weights get no static scale);
     * compressed-tensors needs every one (the run would fail), and none at all is a mismatch */
    bool refuse = lacking && (covered == 0 || quant_plan_layout(plan) == QUANT_LAYOUT_CTENSORS);
    if (refuse && n == 0)
        st = quant_ck_fail(ck, QUANT_CK_ERR_ARG,
                           "stats_model '%s' has no statistics (reset, or never posted), and %zu "
                           "weight%s of act_static_scale rules need them: %s%s",
                           stats_model, lacking, lacking == 1 ? "" : "s", weights,
                           lacking > SHOWN_MAX ? ", ..." : "");
    else if (refuse) {
        names(avg, n, seen, sizeof seen);
        st = quant_ck_fail(
            ck, QUANT_CK_ERR_ARG,
            "stats_model '%s' has no statistics for the input of %zu weight%s quantized by "
            "act_static_scale rules: %s%s; its %zu activation%s named like %s%s. An activation's "
            "name, '/' read as '.', less its last component, must be the weight's module path "
            "('model/layers/0/self_attn/q_proj/dot_general0_lhs' for "
            "'model.layers.0.self_attn.q_proj.weight')",
            stats_model, lacking, lacking == 1 ? "" : "s", weights,
            lacking > SHOWN_MAX ? ", ..." : "", n, n == 1 ? " is" : "s are", seen,
            n > SHOWN_MAX ? ", ..." : "");
    }
    quant_srq_free(srq);
    free(views);
    qd_stat_avgs_free(avg, n);
    quant_ruleset_free(rs);
    return st;
}
