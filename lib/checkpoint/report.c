/* report.c -- the per-tensor report of a run: one entry per input tensor (rule, qtype, shapes,
 * bytes, SQNR and max error), the static activation scales written (SRQ) with their statistics'
 * counts and the activations skipped with their reasons, the unused rules (SPEC section 10), the
 * output files (size, SHA-256), its JSON form and the atomic write of quant-report.json.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"

struct quant_report {
    quant_layout layout;
    size_t n, cap;
    quant_report_entry *e;
    bool static_acts; /* the run allowed static activation scales */
    size_t n_acts, cap_acts;
    quant_report_static_act *acts;
    size_t n_skipped;
    quant_skipped_act *skipped; /* strings owned */
    size_t n_unused;
    long *unused; /* rules that are the first match of no tensor (set when the run is planned) */
    char **hints; /* per unused rule: the regex it probably meant, or NULL (owned) */
    size_t n_outs, cap_outs;
    quant_report_output *outs; /* the files written, in the order written */
};

quant_report *ck_report_new(quant_layout layout, bool static_acts)
{
    quant_report *r = calloc(1, sizeof *r);
    if (r) {
        r->layout = layout;
        r->static_acts = static_acts;
    }
    return r;
}

static void static_act_clear(quant_report_static_act *a)
{
    free((char *)a->name);
    free((char *)a->shard);
    free((char *)a->scale);
    free((char *)a->zero_point);
}

static void free_hints(char **hints, size_t n)
{
    for (size_t i = 0; hints && i < n; i++) free(hints[i]);
    free(hints);
}

void quant_report_free(quant_report *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        free((char *)r->e[i].name);
        free((char *)r->e[i].shard);
        free((char *)r->e[i].importance_act);
        free((char *)r->e[i].warning);
    }
    for (size_t i = 0; i < r->n_acts; i++) static_act_clear(&r->acts[i]);
    ck_report_drop_outputs(r);
    free(r->outs);
    free(r->acts);
    for (size_t i = 0; i < r->n_skipped; i++) {
        free((char *)r->skipped[i].name);
        free((char *)r->skipped[i].reason);
    }
    free(r->skipped);
    free(r->e);
    free(r->unused);
    free_hints(r->hints, r->n_unused);
    free(r);
}

size_t quant_report_static_count(const quant_report *r)
{
    return r ? r->n_acts : 0;
}

const quant_report_static_act *quant_report_static_at(const quant_report *r, size_t i)
{
    return r && i < r->n_acts ? &r->acts[i] : NULL;
}

size_t quant_report_skipped_count(const quant_report *r)
{
    return r ? r->n_skipped : 0;
}

const quant_skipped_act *quant_report_skipped_at(const quant_report *r, size_t i)
{
    return r && i < r->n_skipped ? &r->skipped[i] : NULL;
}

static char *strdup_or_null(const char *s, bool *ok)
{
    char *copy = s ? strdup(s) : NULL;
    if (s && !copy) *ok = false;
    return copy;
}

bool ck_report_set_skipped(quant_report *r, const quant_skipped_act *s, size_t n)
{
    r->skipped = calloc(n ? n : 1, sizeof *r->skipped);
    if (!r->skipped) return false;
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        quant_skipped_act *k = &r->skipped[r->n_skipped++];
        k->rule = s[i].rule;
        k->name = strdup_or_null(s[i].name, &ok);
        k->reason = strdup_or_null(s[i].reason, &ok);
    }
    return ok;
}

static bool add_static(quant_report *r, const char *shard, const ck_shard_plan *sp,
                       const ck_act_plan *ap)
{
    if (r->n_acts == r->cap_acts) {
        size_t cap = r->cap_acts ? r->cap_acts * 2 : 16;
        quant_report_static_act *a = realloc(r->acts, cap * sizeof *a);
        if (!a) return false;
        r->acts = a;
        r->cap_acts = cap;
    }
    const quant_static_act *in = ap->act;
    quant_report_static_act *a = &r->acts[r->n_acts];
    bool ok = true;
    *a = (quant_report_static_act){
        .rule = in->rule, .qtype = in->qtype, .rank = in->rank, .count = in->count};
    memcpy(a->shape, in->shape, sizeof a->shape);
    a->name = strdup_or_null(in->name ? in->name : in->tensor_base, &ok);
    a->shard = strdup_or_null(shard, &ok);
    a->scale = strdup_or_null(sp->out[ap->out_scale].name, &ok);
    a->zero_point = strdup_or_null(ap->out_zp >= 0 ? sp->out[ap->out_zp].name : NULL, &ok);
    if (!ok) {
        static_act_clear(a);
        return false;
    }
    r->n_acts++;
    return true;
}

bool ck_report_add_static(quant_report *r, const char *shard, const ck_shard_plan *sp)
{
    for (size_t i = 0; r && i < sp->n_acts; i++)
        if (!add_static(r, shard, sp, &sp->acts[i])) return false;
    return true;
}

bool ck_report_add_output(quant_report *r, const char *name, uint64_t bytes, const char *sha256)
{
    if (!r) return true;
    if (r->n_outs == r->cap_outs) {
        size_t cap = r->cap_outs ? r->cap_outs * 2 : 8;
        quant_report_output *o = realloc(r->outs, cap * sizeof *o);
        if (!o) return false;
        r->outs = o;
        r->cap_outs = cap;
    }
    bool ok = true;
    quant_report_output *o = &r->outs[r->n_outs];
    *o = (quant_report_output){.bytes = bytes};
    o->name = strdup_or_null(name, &ok);
    o->sha256 = strdup_or_null(sha256, &ok);
    if (!ok) {
        free((char *)o->name);
        free((char *)o->sha256);
        return false;
    }
    r->n_outs++;
    return true;
}

void ck_report_drop_outputs(quant_report *r)
{
    for (size_t i = 0; r && i < r->n_outs; i++) {
        free((char *)r->outs[i].name);
        free((char *)r->outs[i].sha256);
    }
    if (r) r->n_outs = 0;
}

size_t quant_report_output_count(const quant_report *r)
{
    return r ? r->n_outs : 0;
}

const quant_report_output *quant_report_output_at(const quant_report *r, size_t i)
{
    return r && i < r->n_outs ? &r->outs[i] : NULL;
}

bool ck_report_set_unused(quant_report *r, const long *unused, char **hints, size_t n)
{
    long *copy = n ? malloc(n * sizeof *copy) : NULL;
    if (n && !copy) {
        free_hints(hints, n);
        return false;
    }
    if (n) memcpy(copy, unused, n * sizeof *unused);
    free(r->unused);
    free_hints(r->hints, r->n_unused);
    r->unused = copy;
    r->hints = hints;
    r->n_unused = n;
    return true;
}

const char *quant_report_unused_hint(const quant_report *r, size_t i)
{
    return r && r->hints && i < r->n_unused ? r->hints[i] : NULL;
}

const long *quant_report_unused_rules(const quant_report *r, size_t *n)
{
    if (n) *n = r ? r->n_unused : 0;
    return r ? r->unused : NULL;
}

size_t quant_report_count(const quant_report *r)
{
    return r ? r->n : 0;
}

const quant_report_entry *quant_report_entry_at(const quant_report *r, size_t i)
{
    return r && i < r->n ? &r->e[i] : NULL;
}

/* Room for one more entry; the new one's slot, or NULL (NULL report, or out of memory). */
static quant_report_entry *next_entry(quant_report *r)
{
    if (!r) return NULL;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        quant_report_entry *e = realloc(r->e, cap * sizeof *e);
        if (!e) return NULL;
        r->e = e;
        r->cap = cap;
    }
    return &r->e[r->n];
}

quant_report_entry *ck_report_add_entry(quant_report *r, const quant_report_entry *src)
{
    quant_report_entry *e = next_entry(r);
    if (!e) return NULL;
    *e = *src;
    bool ok = true;
    e->name = strdup_or_null(src->name, &ok);
    e->shard = strdup_or_null(src->shard, &ok);
    e->importance_act = strdup_or_null(src->importance_act, &ok);
    e->warning = strdup_or_null(src->warning, &ok);
    if (!ok) {
        free((char *)e->name);
        free((char *)e->shard);
        free((char *)e->importance_act);
        free((char *)e->warning);
        return NULL;
    }
    r->n++;
    return e;
}

quant_report_entry *ck_report_add(quant_report *r, const char *shard, const ck_tensor_plan *tp)
{
    quant_report_entry *e = next_entry(r);
    if (!e) return NULL;
    memset(e, 0, sizeof *e);
    e->name = strdup(tp->in->name);
    e->shard = strdup(shard);
    if (!e->name || !e->shard) {
        free((char *)e->name);
        free((char *)e->shard);
        return NULL;
    }
    r->n++;
    e->quantized = tp->quantize;
    e->reason = tp->reason; /* static strings */
    e->rule = tp->rule;
    e->qtype = tp->how.qtype;
    e->dtype = tp->in->dtype;
    e->rank = tp->in->rank;
    memcpy(e->shape, tp->in->shape, sizeof e->shape);
    if (tp->quantize) memcpy(e->scale_shape, tp->scale_shape, sizeof e->scale_shape);
    if (tp->quantize && tp->imp) e->importance_act = strdup(tp->imp->act); /* NULL: not shown */
    if (tp->quantize) e->warning = ck_ct_kernel_warning(tp);               /* NULL: none */
    return e;
}

static json_t *dims(int rank, const int64_t *shape)
{
    json_t *a = json_array();
    for (int i = 0; a && i < rank; i++) json_array_append_new(a, json_integer(shape[i]));
    return a;
}

static json_t *finite_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *entry_json(const quant_report_entry *e)
{
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:s, s:o, s:I, s:I}", "name", e->name, "shard", e->shard,
                  "action", e->quantized ? "quantized" : "copied", "dtype",
                  quant_st_dtype_name(e->dtype), "shape", dims(e->rank, e->shape), "bytes_in",
                  (json_int_t)e->bytes_in, "bytes_out", (json_int_t)e->bytes_out);
    if (!o) return NULL;
    json_object_set_new(o, "rule", e->rule >= 0 ? json_integer(e->rule) : json_null());
    if (!e->quantized) {
        json_object_set_new(o, "reason", json_string(e->reason));
        return o;
    }
    json_object_set_new(o, "qtype", json_string(quant_qtype_traits_get(e->qtype)->name));
    json_object_set_new(o, "scale_shape", dims(e->rank, e->scale_shape));
    if (e->has_quality) {
        /* JSON has no infinity: an exact round trip reports null SQNR and max error 0. */
        json_object_set_new(o, "sqnr_db",
                            isfinite(e->sqnr_db) ? json_real(e->sqnr_db) : json_null());
        json_object_set_new(o, "max_abs_error", json_real(e->max_abs_err));
    }
    if (e->has_mse) {
        /* JSON has no infinity: null when k = 0's scale had no value in the scale dtype */
        json_t *m =
            json_pack("{s:o, s:o, s:I, s:I}", "error_before", finite_or_null(e->mse_err_before),
                      "error_after", finite_or_null(e->mse_err_after), "groups",
                      (json_int_t)e->mse_groups, "shrunk", (json_int_t)e->mse_shrunk);
        if (m && e->importance_act)
            json_object_set_new(m, "importance", json_string(e->importance_act));
        json_object_set_new(o, "mse", m);
    }
    if (e->warning) json_object_set_new(o, "warning", json_string(e->warning));
    return o;
}

static json_t *summary_json(const quant_report *r)
{
    uint64_t in = 0, out = 0, quantized = 0;
    double worst = INFINITY;
    for (size_t i = 0; i < r->n; i++) {
        const quant_report_entry *e = &r->e[i];
        in += e->bytes_in;
        out += e->bytes_out;
        quantized += e->quantized;
        if (e->has_quality && e->sqnr_db < worst) worst = e->sqnr_db;
    }
    json_t *unused = json_array();
    for (size_t i = 0; unused && i < r->n_unused; i++)
        json_array_append_new(unused, json_integer(r->unused[i]));
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:o, s:o}", "tensors", (json_int_t)r->n,
                     "quantized", (json_int_t)quantized, "copied", (json_int_t)(r->n - quantized),
                     "bytes_in", (json_int_t)in, "bytes_out", (json_int_t)out, "min_sqnr_db",
                     isfinite(worst) ? json_real(worst) : json_null(), "unused_rules", unused);
}

static json_t *rule_json(long rule)
{
    return rule >= 0 ? json_integer(rule) : json_null();
}

static json_t *static_act_json(const quant_report_static_act *a)
{
    json_t *o =
        json_pack("{s:s, s:s, s:o, s:s, s:o, s:s, s:o}", "name", a->name, "shard", a->shard, "rule",
                  rule_json(a->rule), "qtype", quant_qtype_traits_get(a->qtype)->name, "shape",
                  dims(a->rank, a->shape), "scale", a->scale, "zero_point",
                  a->zero_point ? json_string(a->zero_point) : json_null());
    if (o && a->count > 0) json_object_set_new(o, "count", json_integer(a->count));
    return o;
}

static json_t *skipped_json(const quant_skipped_act *k)
{
    return json_pack("{s:s, s:o, s:s}", "name", k->name ? k->name : "", "rule", rule_json(k->rule),
                     "reason", k->reason ? k->reason : "");
}

/* {"written": [...], "skipped": [...]}: the static activation scales of the run, and the
 * activations whose statistics gave none. */
static json_t *static_acts_json(const quant_report *r)
{
    json_t *written = json_array(), *skipped = json_array();
    for (size_t i = 0; written && i < r->n_acts; i++)
        json_array_append_new(written, static_act_json(&r->acts[i]));
    for (size_t i = 0; skipped && i < r->n_skipped; i++)
        json_array_append_new(skipped, skipped_json(&r->skipped[i]));
    return json_pack("{s:o, s:o}", "written", written, "skipped", skipped);
}

char *quant_report_json(const quant_report *r)
{
    if (!r) return NULL;
    json_t *tensors = json_array();
    for (size_t i = 0; tensors && i < r->n; i++)
        json_array_append_new(tensors, entry_json(&r->e[i]));
    json_t *root =
        json_pack("{s:s, s:s, s:o, s:o}", "format", "quantd.report/1", "layout",
                  quant_layout_name(r->layout), "tensors", tensors, "summary", summary_json(r));
    if (root && r->static_acts &&
        json_object_set_new(root, "static_activations", static_acts_json(r)) != 0) {
        json_decref(root);
        root = NULL;
    }
    char *text = root ? json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return text;
}

quant_ck_status quant_report_write(const quant_report *r, const char *path, quant_ck_error *err)
{
    char *text = quant_report_json(r);
    if (!text) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    quant_ck_status st = ck_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}
