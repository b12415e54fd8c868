/* plan_doc.c -- the public plan (quant_plan, SPEC section 10): taken from the shard plans the run
 * itself is driven by (plan.c), with each tensor's output tensors, dtypes and bytes, the totals,
 * the static activation scales, and the unused rules (the rules that are the first match of no
 * tensor); its JSON document, which `quant plan --json` and POST /v1/plans both print.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"

struct quant_plan {
    quant_layout layout;
    size_t n;
    quant_plan_entry *e;
    size_t n_acts;
    quant_plan_static *acts;
    size_t n_unused;
    long *unused;
    uint64_t bytes_in, bytes_out;
};

/* ---- unused rules ---------------------------------------------------------------------------- */

quant_ck_status ck_unused_rules(const ck_shard_plan *plans, size_t n_plans, size_t n_rules,
                                long **out, size_t *n, quant_ck_error *err)
{
    *out = NULL;
    *n = 0;
    bool *used = calloc(n_rules ? n_rules : 1, sizeof *used);
    if (!used) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t s = 0; s < n_plans; s++)
        for (size_t i = 0; i < plans[s].n; i++) {
            long k = plans[s].t[i].first_match;
            if (k >= 0 && (size_t)k < n_rules) used[k] = true;
        }
    size_t unused = 0;
    for (size_t k = 0; k < n_rules; k++) unused += !used[k];
    if (unused > 0 && !(*out = malloc(unused * sizeof **out))) {
        free(used);
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    for (size_t k = 0; k < n_rules; k++)
        if (!used[k]) (*out)[(*n)++] = (long)k;
    free(used);
    return QUANT_CK_OK;
}

/* ---- building the plan ----------------------------------------------------------------------- */

uint64_t ck_out_nbytes(const quant_st_out_tensor *t)
{
    /* the header was validated (st_read.c) and every planned shape derives from it: no overflow */
    uint64_t bits = (uint64_t)quant_st_dtype_bits(t->dtype);
    for (int i = 0; i < t->rank; i++) bits *= (uint64_t)t->shape[i];
    return bits / 8;
}

/* Copies `n` output tensors of `sp` (indices `idx`, -1 skipped) into a new array; names copied. */
static quant_plan_output *copy_outputs(const ck_shard_plan *sp, const long *idx, int n_idx,
                                       size_t *n_out, uint64_t *bytes)
{
    quant_plan_output *o = calloc((size_t)n_idx, sizeof *o);
    *n_out = 0;
    *bytes = 0;
    for (int k = 0; o && k < n_idx; k++) {
        if (idx[k] < 0) continue;
        const quant_st_out_tensor *t = &sp->out[idx[k]];
        quant_plan_output *d = &o[*n_out];
        if (!(d->name = strdup(t->name))) return o; /* freed by the caller with *n_out */
        d->dtype = t->dtype;
        d->rank = t->rank;
        memcpy(d->shape, t->shape, sizeof d->shape);
        d->bytes = ck_out_nbytes(t);
        *bytes += d->bytes;
        (*n_out)++;
    }
    return o;
}

static void outputs_free(const quant_plan_output *o, size_t n)
{
    for (size_t i = 0; o && i < n; i++) free((char *)o[i].name);
    free((void *)o);
}

/* One entry from a tensor's plan; false on OOM (what was copied is freed by quant_plan_free). */
static bool add_entry(quant_plan *p, const ck_shard_plan *sp, const ck_tensor_plan *tp)
{
    quant_plan_entry *e = &p->e[p->n++];
    const quant_st_tensor *t = tp->in;
    e->name = strdup(t->name);
    e->shard = strdup(sp->base);
    e->quantized = tp->quantize;
    e->reason = tp->reason; /* static strings */
    e->rule = tp->rule;
    e->first_match = tp->first_match;
    e->warning = tp->quantize ? ck_ct_kernel_warning(tp) : NULL; /* NULL: none */
    e->needs_statistics = tp->quantize && sp->stats_later &&
                          (tp->r->act_static_scale || (tp->r->weight_importance && !tp->imp));
    e->qtype = tp->how.qtype;
    e->dtype = t->dtype;
    e->rank = t->rank;
    memcpy(e->shape, t->shape, sizeof e->shape);
    if (tp->quantize) memcpy(e->scale_shape, tp->scale_shape, sizeof e->scale_shape);
    e->bytes_in = quant_st_nbytes(t);
    size_t n_out = 0;
    e->outputs = copy_outputs(sp, tp->out, CK_OUT_ROLES, &n_out, &e->bytes_out);
    e->n_outputs = n_out;
    p->bytes_in += e->bytes_in;
    p->bytes_out += e->bytes_out;
    size_t want = 0;
    for (int k = 0; k < CK_OUT_ROLES; k++) want += tp->out[k] >= 0;
    return e->name && e->shard && e->outputs && n_out == want;
}

static bool add_static(quant_plan *p, const ck_shard_plan *sp, const ck_act_plan *ap)
{
    quant_plan_static *a = &p->acts[p->n_acts++];
    const quant_static_act *in = ap->act;
    a->name = strdup(in->name ? in->name : in->tensor_base);
    a->shard = strdup(sp->base);
    long idx[2] = {ap->out_scale, ap->out_zp};
    size_t n_out = 0;
    uint64_t bytes = 0;
    a->outputs = copy_outputs(sp, idx, 2, &n_out, &bytes);
    a->n_outputs = n_out;
    p->bytes_out += bytes;
    return a->name && a->shard && a->outputs && n_out == (size_t)(1 + (ap->out_zp >= 0));
}

static bool fill(quant_plan *p, const ck_shard_plan *plans, size_t n_plans)
{
    size_t n = 0, n_acts = 0;
    for (size_t s = 0; s < n_plans; s++) {
        n += plans[s].n;
        n_acts += plans[s].n_acts;
    }
    p->e = calloc(n ? n : 1, sizeof *p->e);
    p->acts = calloc(n_acts ? n_acts : 1, sizeof *p->acts);
    if (!p->e || !p->acts) return false;
    for (size_t s = 0; s < n_plans; s++) {
        for (size_t i = 0; i < plans[s].n; i++)
            if (!add_entry(p, &plans[s], &plans[s].t[i])) return false;
        for (size_t i = 0; i < plans[s].n_acts; i++)
            if (!add_static(p, &plans[s], &plans[s].acts[i])) return false;
    }
    return true;
}

quant_ck_status ck_plan_doc_new(quant_layout layout, const ck_shard_plan *plans, size_t n_plans,
                                const long *unused, size_t n_unused, quant_plan **out,
                                quant_ck_error *err)
{
    quant_plan *p = calloc(1, sizeof *p);
    *out = NULL;
    bool ok = p != NULL;
    if (ok) {
        p->layout = layout;
        p->n_unused = n_unused;
        p->unused = n_unused ? malloc(n_unused * sizeof *p->unused) : NULL;
        ok = !n_unused || p->unused;
    }
    if (ok && n_unused) memcpy(p->unused, unused, n_unused * sizeof *unused);
    if (ok) ok = fill(p, plans, n_plans);
    if (!ok) {
        quant_plan_free(p);
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    *out = p;
    return QUANT_CK_OK;
}

/* A deep copy of `src` (names and outputs copied; `reason` static) as the next entry. */
static bool copy_entry(quant_plan *p, const quant_plan_entry *src)
{
    quant_plan_entry *e = &p->e[p->n++];
    *e = *src;
    e->name = strdup(src->name);
    e->shard = strdup(src->shard);
    e->warning = src->warning ? strdup(src->warning) : NULL;
    quant_plan_output *o = calloc(src->n_outputs ? src->n_outputs : 1, sizeof *o);
    e->outputs = o;
    e->n_outputs = 0;
    for (size_t k = 0; o && k < src->n_outputs; k++) {
        o[k] = src->outputs[k];
        if (!(o[k].name = strdup(src->outputs[k].name))) break;
        e->n_outputs++;
    }
    p->bytes_in += e->bytes_in;
    p->bytes_out += e->bytes_out;
    return e->name && e->shard && o && e->n_outputs == src->n_outputs &&
           (e->warning || !src->warning);
}

quant_ck_status ck_plan_doc_from_entries(quant_layout layout, const quant_plan_entry *entries,
                                         size_t n, const long *unused, size_t n_unused,
                                         quant_plan **out, quant_ck_error *err)
{
    quant_plan *p = calloc(1, sizeof *p);
    *out = NULL;
    bool ok = p && (p->e = calloc(n ? n : 1, sizeof *p->e)) &&
              (p->acts = calloc(1, sizeof *p->acts)) &&
              (!n_unused || (p->unused = malloc(n_unused * sizeof *p->unused)));
    if (ok) {
        p->layout = layout;
        p->n_unused = n_unused;
        if (n_unused) memcpy(p->unused, unused, n_unused * sizeof *unused);
    }
    for (size_t i = 0; ok && i < n; i++) ok = copy_entry(p, &entries[i]);
    if (!ok) {
        quant_plan_free(p);
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    *out = p;
    return QUANT_CK_OK;
}

void quant_plan_free(quant_plan *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) {
        free((char *)p->e[i].name);
        free((char *)p->e[i].shard);
        outputs_free(p->e[i].outputs, p->e[i].n_outputs);
        free((char *)p->e[i].warning);
    }
    for (size_t i = 0; i < p->n_acts; i++) {
        free((char *)p->acts[i].name);
        free((char *)p->acts[i].shard);
        outputs_free(p->acts[i].outputs, p->acts[i].n_outputs);
    }
    free(p->e);
    free(p->acts);
    free(p->unused);
    free(p);
}

/* ---- reading it ------------------------------------------------------------------------------ */

size_t quant_plan_count(const quant_plan *p)
{
    return p ? p->n : 0;
}

const quant_plan_entry *quant_plan_entry_at(const quant_plan *p, size_t i)
{
    return p && i < p->n ? &p->e[i] : NULL;
}

size_t quant_plan_static_count(const quant_plan *p)
{
    return p ? p->n_acts : 0;
}

const quant_plan_static *quant_plan_static_at(const quant_plan *p, size_t i)
{
    return p && i < p->n_acts ? &p->acts[i] : NULL;
}

uint64_t quant_plan_bytes_in(const quant_plan *p)
{
    return p ? p->bytes_in : 0;
}

uint64_t quant_plan_bytes_out(const quant_plan *p)
{
    return p ? p->bytes_out : 0;
}

quant_layout quant_plan_layout(const quant_plan *p)
{
    return p ? p->layout : QUANT_LAYOUT_NATIVE;
}

const long *quant_plan_unused_rules(const quant_plan *p, size_t *n)
{
    if (n) *n = p ? p->n_unused : 0;
    return p ? p->unused : NULL;
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static json_t *dims(int rank, const int64_t *shape)
{
    json_t *a = json_array();
    for (int i = 0; a && i < rank; i++) json_array_append_new(a, json_integer(shape[i]));
    return a;
}

static json_t *rule_or_null(long rule)
{
    return rule >= 0 ? json_integer(rule) : json_null();
}

static json_t *outputs_json(const quant_plan_output *o, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_pack("{s:s, s:s, s:o, s:I}", "name", o[i].name, "dtype",
                                           quant_st_dtype_name(o[i].dtype), "shape",
                                           dims(o[i].rank, o[i].shape), "bytes",
                                           (json_int_t)o[i].bytes));
    return a;
}

static json_t *entry_json(const quant_plan_entry *e)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:o, s:s, s:o}", "name", e->name, "shard", e->shard,
                          "action", e->quantized ? "quantized" : "copied", "rule",
                          rule_or_null(e->rule), "first_match", rule_or_null(e->first_match),
                          "dtype", quant_st_dtype_name(e->dtype), "shape", dims(e->rank, e->shape));
    if (!o) return NULL;
    if (e->quantized && e->chosen_by) { /* gguf: scales live in the blocks */
        json_object_set_new(o, "qtype", json_string(quant_qtype_traits_get(e->qtype)->name));
        json_object_set_new(o, "chosen_by", json_string(e->chosen_by));
    } else if (e->quantized) {
        json_object_set_new(o, "qtype", json_string(quant_qtype_traits_get(e->qtype)->name));
        json_object_set_new(o, "scale_shape", dims(e->rank, e->scale_shape));
    } else {
        json_object_set_new(o, "reason", json_string(e->reason));
    }
    if (e->needs_statistics) json_object_set_new(o, "needs_statistics", json_true());
    json_object_set_new(o, "bytes_in", json_integer((json_int_t)e->bytes_in));
    json_object_set_new(o, "bytes_out", json_integer((json_int_t)e->bytes_out));
    json_object_set_new(o, "outputs", outputs_json(e->outputs, e->n_outputs));
    if (e->warning) json_object_set_new(o, "warning", json_string(e->warning));
    return o;
}

static json_t *unused_json(const long *unused, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(unused[i]));
    return a;
}

static json_t *summary_json(const quant_plan *p)
{
    size_t quantized = 0, stats = 0;
    for (size_t i = 0; i < p->n; i++) {
        quantized += p->e[i].quantized;
        stats += p->e[i].needs_statistics;
    }
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:o, s:I}", "tensors", (json_int_t)p->n,
                     "quantized", (json_int_t)quantized, "copied", (json_int_t)(p->n - quantized),
                     "bytes_in", (json_int_t)p->bytes_in, "bytes_out", (json_int_t)p->bytes_out,
                     "unused_rules", unused_json(p->unused, p->n_unused), "needs_statistics",
                     (json_int_t)stats);
}

static json_t *statics_json(const quant_plan *p)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < p->n_acts; i++)
        json_array_append_new(a, json_pack("{s:s, s:s, s:o}", "name", p->acts[i].name, "shard",
                                           p->acts[i].shard, "outputs",
                                           outputs_json(p->acts[i].outputs, p->acts[i].n_outputs)));
    return a;
}

char *quant_plan_json(const quant_plan *p)
{
    if (!p) return NULL;
    json_t *tensors = json_array();
    for (size_t i = 0; tensors && i < p->n; i++)
        json_array_append_new(tensors, entry_json(&p->e[i]));
    json_t *root =
        json_pack("{s:s, s:s, s:o, s:o}", "format", "quantd.plan/1", "layout",
                  quant_layout_name(p->layout), "tensors", tensors, "summary", summary_json(p));
    if (root && p->n_acts > 0 &&
        json_object_set_new(root, "static_activations", statics_json(p)) != 0) {
        json_decref(root);
        root = NULL;
    }
    char *text = root ? json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return text;
}
