/* plan.c -- decides, before any data is read, what every tensor of a shard becomes: copied (and
 * why) or quantized by which rule, with which output tensors, and how its rows are split into
 * units of work; then the static activation scales (SRQ) the shard holds. The output header
 * follows from this plan alone. A tensor that cannot be planned is recorded and the others are
 * planned still, so that the run's error names every one. Every tensor's first matching rule is
 * recorded, also for a
 * tensor its rank or dtype copies whatever the rules say: unused rules (SPEC section 10,
 * plan_doc.c) count every tensor.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"

long ck_plan_add_out(ck_shard_plan *sp, const char *name, quant_st_dtype dtype, int rank,
                     const int64_t *shape)
{
    if (sp->n_out == sp->cap_out) {
        size_t cap = sp->cap_out ? sp->cap_out * 2 : 64;
        quant_st_out_tensor *o = realloc(sp->out, cap * sizeof *o);
        if (!o) return -1;
        sp->out = o;
        char **names = realloc(sp->out_names, cap * sizeof *names);
        if (!names) return -1;
        sp->out_names = names;
        sp->cap_out = cap;
    }
    char *copy = strdup(name);
    if (!copy) return -1;
    quant_st_out_tensor *o = &sp->out[sp->n_out];
    memset(o, 0, sizeof *o);
    o->name = copy;
    o->dtype = dtype;
    o->rank = rank;
    if (rank > 0) memcpy(o->shape, shape, (size_t)rank * sizeof *shape);
    sp->out_names[sp->n_out] = copy;
    return (long)sp->n_out++;
}

/* Why a tensor is copied regardless of the rules, or NULL when rules decide. */
static const char *copy_reason(const quant_st_tensor *t, quant_dtype *qd)
{
    if (!quant_st_to_quant_dtype(t->dtype, qd) || !quant_dtype_is_float(*qd))
        return "not a float tensor";
    if (*qd == QUANT_DTYPE_F8_E4M3 || *qd == QUANT_DTYPE_F8_E5M2) return "already fp8";
    if (t->rank < 2) return "rank < 2";
    if (quant_numel(t->rank, t->shape) == 0) return "empty tensor";
    return NULL;
}

/* Splits a quantized tensor's axis 0 into units of about `chunk` input bytes. A unit covers
 * whole scale groups along axis 0 (one group at least, even when a group is larger than a chunk,
 * as with a big tile on axis 0). When axis 0 is reduced (one scale row for all of it) and the
 * tensor exceeds a chunk, a first pass calibrates chunk by chunk and a second quantizes. */
static void plan_units(ck_tensor_plan *tp, size_t chunk)
{
    const quant_st_tensor *t = tp->in;
    int64_t d0 = t->shape[0];
    tp->row_elems = quant_numel(t->rank - 1, t->shape + 1);
    uint64_t row_bytes = (uint64_t)tp->row_elems * quant_dtype_size(tp->in_dtype);
    tp->tile0 = d0 / tp->scale_shape[0];
    uint64_t group_bytes = row_bytes * (uint64_t)tp->tile0;
    tp->two_pass = group_bytes > chunk && tp->scale_shape[0] == 1;
    quant_calib_method m;
    if (tp->two_pass && quant_calib_parse(tp->how.calibration, &m, NULL) == QUANT_OK &&
        (m.kind == QUANT_CALIB_MSE || m.kind == QUANT_CALIB_MINMAX_MSE)) {
        /* an MSE search needs each scale group whole: axis 0 reduced means one unit */
        tp->two_pass = false;
        tp->unit_rows = d0;
        return;
    }
    if (tp->two_pass)
        tp->unit_rows = row_bytes >= chunk ? 1 : (int64_t)(chunk / row_bytes);
    else if (group_bytes >= chunk)
        tp->unit_rows = tp->tile0;
    else
        tp->unit_rows = (int64_t)(chunk / group_bytes) * tp->tile0;
    if (tp->unit_rows > d0) tp->unit_rows = d0;
}

/* Tile fractions resolve against the whole tensor: make them lengths before any chunking. */
static void resolve_tiles(ck_tensor_plan *tp)
{
    int rank = tp->in->rank;
    for (int i = 0; i < tp->how.n_tiles; i++) {
        quant_tile *tile = &tp->how.tiles[i];
        int a = tile->axis < 0 ? tile->axis + rank : tile->axis;
        tile->size = tp->in->shape[a] / tp->scale_shape[a];
        tile->fraction = 0;
    }
}

/* weight_importance (SPEC 9): the one importance statistic whose module path is the weight's
 * and whose length is its contraction dim. Without statistics, a plan that expects them later
 * (allow_static_acts) leaves the weights at 1; a run is refused. */
static quant_ck_status plan_importance(ck_tensor_plan *tp, const quant_pipeline_options *o,
                                       quant_ck_error *err)
{
    const quant_st_tensor *t = tp->in;
    if (!tp->r->weight_importance) return QUANT_CK_OK;
    char buf[CK_SHORT_MAX];
    const char *shown = ck_short_text(t->name, buf, sizeof buf);
    if (!o->importance_given) {
        if (o->allow_static_acts) return QUANT_CK_OK;
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "weight '%s': rule %ld sets weight_importance, which needs "
                             "statistics with mean_sq (--stats, or a quantd job's stats_model); "
                             "this run has none",
                             shown, tp->rule);
    }
    int axis = tp->r->contraction_axes[0];
    if (axis < 0) axis += t->rank;
    int64_t dim = t->shape[axis];
    size_t cap = strlen(t->name) + 1;
    char *module = malloc(cap);
    if (!module) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    quant_module_path(t->name, module, cap);
    const quant_importance *found = NULL;
    size_t matches = 0;
    for (size_t i = 0; i < o->n_importance; i++) {
        const quant_importance *q = &o->importance[i];
        if (q->n == dim && strcmp(q->module_path, module) == 0) {
            if (!found) found = q;
            matches++;
        }
    }
    free(module);
    if (matches != 1)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "weight '%s': rule %ld sets weight_importance, and %s activation "
                             "of its module path has a mean_sq of length %lld (its contraction "
                             "dim)%s%s",
                             shown, tp->rule, matches ? "more than one" : "no", (long long)dim,
                             matches ? ": the first is " : "", matches ? found->act : "");
    tp->imp = found;
    tp->how.importance = found->w;
    tp->how.importance_len = found->n;
    tp->how.importance_axis = axis;
    return QUANT_CK_OK;
}

static quant_ck_status plan_quantized(ck_shard_plan *sp, ck_tensor_plan *tp, quant_layout layout,
                                      size_t chunk, const quant_pipeline_options *o,
                                      quant_ck_error *err)
{
    const quant_st_tensor *t = tp->in;
    if (tp->r->act_static_scale && !sp->static_ok)
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "tensor '%s': rule %ld sets act_static_scale, which needs calibration "
                             "statistics: give them with --stats STATS.json (quant quantize) or "
                             "stats_model (a quantd job); this run has none",
                             t->name, tp->rule);
    quant_ck_status st = quant_rule_how(tp->r, t->name, t->rank, t->shape, &tp->how, err);
    if (st != QUANT_CK_OK) {
        quant_ck_prefix(err, "tensor '%s': rule %ld", t->name, tp->rule);
        return st;
    }
    quant_error qe;
    if (quant_scale_shape(&tp->how, t->rank, t->shape, tp->scale_shape, &qe) != QUANT_OK)
        return quant_ck_fail(err, QUANT_CK_ERR_QUANT, "tensor '%s': rule %ld: %s", t->name,
                             tp->rule, qe.message);
    tp->scale_numel = quant_numel(t->rank, tp->scale_shape);
    st = plan_importance(tp, o, err);
    if (st != QUANT_CK_OK) return st;
    resolve_tiles(tp);
    tp->asym = quant_how_asymmetric(&tp->how);
    st = layout == QUANT_LAYOUT_CTENSORS ? ck_ct_outputs(sp, tp, err)
                                         : ck_native_outputs(sp, tp, err);
    if (st != QUANT_CK_OK) return st;
    plan_units(tp, chunk);
    return QUANT_CK_OK;
}

/* The first rule matching the tensor's module path (tp->first_match, -1 for none); a match error
 * names the tensor. */
static quant_ck_status match_rule(ck_tensor_plan *tp, quant_rule_matcher *m, quant_ck_error *err)
{
    const char *name = tp->in->name;
    size_t cap = strlen(name) + 1;
    char *module = malloc(cap);
    if (!module) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    quant_module_path(name, module, cap);
    quant_ck_status st = quant_rule_matcher_find(m, module, &tp->first_match, err);
    free(module);
    if (st != QUANT_CK_OK) {
        char shown[CK_SHORT_MAX];
        quant_ck_prefix(err, "tensor '%s'", ck_short_text(name, shown, sizeof shown));
    }
    return st;
}

static quant_ck_status plan_tensor(ck_shard_plan *sp, ck_tensor_plan *tp,
                                   const quant_ruleset *rules, quant_rule_matcher *m,
                                   const quant_pipeline_options *o, quant_ck_error *err)
{
    const quant_st_tensor *t = tp->in;
    for (int k = 0; k < CK_OUT_ROLES; k++) tp->out[k] = -1;
    tp->rule = -1;
    /* every tensor is matched, also one its rank or dtype copies: unused rules count them all */
    quant_ck_status st = match_rule(tp, m, err);
    if (st != QUANT_CK_OK) return st;
    tp->reason = copy_reason(t, &tp->in_dtype);
    if (!tp->reason) {
        tp->rule = tp->first_match;
        if (tp->rule < 0) {
            tp->reason = "no rule matched";
        } else {
            tp->r = quant_ruleset_rule(rules, (size_t)tp->rule);
            if (!tp->r->has_weight_qtype) tp->reason = "rule has a null weight_qtype";
        }
    }
    if (!tp->reason) {
        tp->quantize = true;
        return plan_quantized(sp, tp, o->layout, o->chunk_bytes, o, err);
    }
    tp->out[CK_OUT_DATA] = ck_plan_add_out(sp, t->name, t->dtype, t->rank, t->shape);
    if (tp->out[CK_OUT_DATA] < 0) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return QUANT_CK_OK;
}

/* The output tensors of the static activation scales placed in this shard. */
static quant_ck_status plan_acts(ck_shard_plan *sp, quant_layout layout,
                                 const quant_static_act *const *acts, size_t n_acts,
                                 bool acts_later, quant_ck_error *err)
{
    sp->acts = calloc(n_acts ? n_acts : 1, sizeof *sp->acts);
    if (!sp->acts) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n_acts; i++) {
        ck_act_plan *ap = &sp->acts[sp->n_acts++];
        *ap = (ck_act_plan){.act = acts[i], .out_scale = -1, .out_zp = -1};
        quant_ck_status st = layout == QUANT_LAYOUT_CTENSORS ? ck_ct_act_outputs(sp, ap, err)
                                                             : ck_native_act_outputs(sp, ap, err);
        if (st != QUANT_CK_OK) return st;
    }
    /* scales that come later (a plan before the statistics are read) cannot be checked yet */
    return layout == QUANT_LAYOUT_CTENSORS && !acts_later ? ck_ct_check_static(sp, err)
                                                          : QUANT_CK_OK;
}

quant_ck_status ck_plan_shard(ck_shard_plan *sp, quant_st_file *in, const quant_ruleset *rules,
                              quant_rule_matcher *m, const quant_pipeline_options *o,
                              const quant_static_act *const *acts, size_t n_acts, bool acts_later,
                              ck_plan_errors *pe, quant_ck_error *err)
{
    quant_layout layout = o->layout;
    memset(sp, 0, sizeof *sp);
    sp->in = in;
    sp->base = ck_basename(in->path);
    sp->n = in->n_tensors;
    sp->static_ok = o->allow_static_acts || o->n_static_acts > 0;
    sp->stats_later = acts_later;
    sp->t = calloc(sp->n ? sp->n : 1, sizeof *sp->t);
    if (!sp->t) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    size_t failed = pe->n;
    for (size_t i = 0; i < sp->n; i++) {
        sp->t[i].in = &in->tensors[i];
        quant_ck_status st = plan_tensor(sp, &sp->t[i], rules, m, o, err);
        if (st == QUANT_CK_OK) continue;
        quant_ck_prefix(err, "%s", in->path);
        if (!ck_plan_error_is_tensors(st)) return st;
        sp->t[i].quantize = false; /* half planned: nothing later may read it */
        ck_plan_errors_add(pe, in->tensors[i].name, err);
    }
    if (pe->n > failed) return QUANT_CK_OK; /* the run fails with every tensor named */
    sp->n_tensor_out = sp->n_out;
    quant_ck_status st = plan_acts(sp, layout, acts, n_acts, acts_later, err);
    if (st != QUANT_CK_OK) {
        quant_ck_prefix(err, "%s", in->path);
        return st;
    }
    if (layout == QUANT_LAYOUT_NATIVE) {
        sp->quant_meta = ck_native_metadata(sp);
        if (!sp->quant_meta) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    return QUANT_CK_OK;
}

void ck_plan_free(ck_shard_plan *sp)
{
    for (size_t i = 0; i < sp->n_out; i++) free(sp->out_names[i]);
    free(sp->out_names);
    free(sp->out);
    free(sp->t);
    free(sp->acts);
    free(sp->quant_meta);
    memset(sp, 0, sizeof *sp);
}
