/* h_scales.c -- GET /v1/models/{model}/scales: the static activation scales (SRQ, SPEC sections
 * 4 and 8) a model's averaged calibration gives, for one qtype (?qtype=) or with each
 * activation's act_qtype from a stored rule set (?ruleset=, the first rule whose module_path
 * matches the activation's module path; ?static_only=true counts only act_static_scale rules,
 * as an SRQ job does), computed by the library's SRQ engine (quant_srq_compute) as a job's are.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "h_models.h"

/* What the query asks for: exactly one of qtype and ruleset. */
typedef struct scales_query {
    bool has_qtype;
    quant_qtype qtype;
    quant_ruleset *rs; /* owned */
    bool static_only;
    const char *name_regex;
} scales_query;

static bool bool_query(qd_req *r, const char *name, bool *out)
{
    const char *v = qd_req_query(r, name);
    *out = v && strcmp(v, "true") == 0;
    if (!v || *out || strcmp(v, "false") == 0) return true;
    qd_reply_ec(r, QD_EC_INVALID, name, "%s must be true or false", name);
    return false;
}

/* The stored rule set `name`, parsed. Replies 400/422 (or 500) on failure. */
static bool load_ruleset(qd_req *r, const char *name, quant_ruleset **rs)
{
    char *body = NULL;
    qd_err err;
    qd_status st = qd_store_ruleset_get(r->app->store, name, &body, NULL, NULL, &err);
    if (st == QD_NOT_FOUND) {
        qd_reply_ec(r, QD_EC_UNKNOWN_RULESET, "ruleset", "no rule set named '%.64s'", name);
        return false;
    }
    if (st != QD_OK) {
        qd_reply_store_error(r, st, &err);
        return false;
    }
    quant_ck_error ck;
    bool ok = quant_ruleset_parse(body, strlen(body), name, rs, &ck) == QUANT_CK_OK;
    free(body);
    if (!ok) qd_reply_ec(r, QD_EC_INVALID_RULES, "ruleset", "%s", ck.message);
    return ok;
}

static bool read_query(qd_req *r, scales_query *q)
{
    const char *qtype = qd_req_query(r, "qtype"), *ruleset = qd_req_query(r, "ruleset");
    *q = (scales_query){.name_regex = qd_req_query(r, "name")};
    if (!bool_query(r, "static_only", &q->static_only)) return false;
    if (!qtype == !ruleset) {
        qd_reply_ec(r, QD_EC_INVALID, "qtype",
                    "give exactly one of ?qtype=QTYPE and ?ruleset=NAME");
        return false;
    }
    if (ruleset) return load_ruleset(r, ruleset, &q->rs);
    quant_error qe;
    if (quant_qtype_parse(qtype, &q->qtype, &qe) != QUANT_OK) {
        qd_reply_ec(r, QD_EC_INVALID, "qtype", "%s", qe.message);
        return false;
    }
    q->has_qtype = true;
    return true;
}

static json_t *scale_json(const quant_static_act *s)
{
    const quant_qtype_traits *t = quant_qtype_traits_get(s->qtype);
    return json_pack("{s:s,s:o,s:o,s:I,s:s,s:o}", "tensor_base", s->tensor_base, "scale",
                     qd_json_floats(s->scale, s->rank, s->shape), "zero_point",
                     s->zero_point ? qd_json_int32s(s->zero_point, s->rank, s->shape) : json_null(),
                     "count", (json_int_t)s->count, "qtype", t ? t->name : "?", "rule",
                     s->rule >= 0 ? json_integer(s->rule) : json_null());
}

static json_t *scales_json(const char *model, const quant_srq *srq)
{
    size_t n, n_skipped;
    const quant_static_act *s = quant_srq_acts(srq, &n);
    const quant_skipped_act *k = quant_srq_skipped(srq, &n_skipped);
    json_t *scales = json_object(), *skip = json_array();
    for (size_t i = 0; scales && i < n; i++)
        json_object_set_new(scales, s[i].name, scale_json(&s[i]));
    for (size_t i = 0; skip && i < n_skipped; i++)
        json_array_append_new(skip, json_string(k[i].name));
    return json_pack("{s:s,s:o,s:o}", "model", model, "scales", scales, "skipped", skip);
}

/* The library's SRQ engine on the model's averages, as a job runs it (with static_only). */
static enum MHD_Result reply_scales(qd_req *r, const char *model, const scales_query *q,
                                    const qd_stat_avg *avg, size_t n)
{
    quant_srq_options o;
    quant_srq_options_init(&o);
    o.static_only = q->static_only;
    o.fixed_qtype = q->has_qtype;
    o.qtype = q->qtype;
    quant_act_stat *views = qd_stat_views(avg, n);
    quant_srq *srq = NULL;
    quant_ck_error ck;
    qd_err err;
    quant_ck_status st = views ? quant_srq_compute(views, n, q->rs, &o, &srq, &ck)
                               : quant_ck_fail(&ck, QUANT_CK_ERR_NOMEM, "out of memory");
    free(views);
    enum MHD_Result ret;
    if (st == QUANT_CK_OK)
        ret = qd_reply_json(r, MHD_HTTP_OK, scales_json(model, srq));
    else if (st == QUANT_CK_ERR_NOMEM)
        ret = qd_reply_store_error(r, qd_fail(&err, QD_NOMEM, "out of memory"), &err);
    else
        ret = qd_reply_ec(r, QD_EC_INVALID_SCALES, q->has_qtype ? "qtype" : "ruleset", "%s",
                          ck.message);
    quant_srq_free(srq);
    return ret;
}

/* GET /v1/models/{model}/scales?qtype=QTYPE | ?ruleset=NAME [&static_only=true] [&name=REGEX] */
enum MHD_Result qd_h_scales_get(qd_req *r)
{
    const char *model = qd_model_param(r);
    scales_query q;
    if (!model || !read_query(r, &q)) return r->replied ? MHD_YES : MHD_NO;
    qd_stat_avg *avg = NULL;
    size_t n = 0;
    qd_err err;
    qd_status st = qd_stats_read(r->app->stats, model, q.name_regex, &avg, &n, &err);
    enum MHD_Result ret;
    if (st == QD_INVALID)
        ret = qd_reply_ec(r, QD_EC_INVALID, "name", "%s", err.message);
    else if (st != QD_OK)
        ret = qd_reply_store_error(r, st, &err);
    else
        ret = reply_scales(r, model, &q, avg, n);
    qd_stat_avgs_free(avg, n);
    quant_ruleset_free(q.rs);
    return ret;
}
