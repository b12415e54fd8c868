/* h_plans.c -- POST /v1/plans: what a job would do (SPEC section 10), without creating it. Two
 * forms, told apart by Content-Type as for POST /v1/jobs:
 *  - JSON: the body POST /v1/jobs takes for a server-side checkpoint (ruleset | rules, layout,
 *    stats_model, source {"path"}), read by the same parser (qd_job_from_json: the path confined
 *    below a source root by qd_source_locate, as job creation confines it) and planned by the
 *    same call (qd_job_plan, the library's quant_plan_path);
 *  - application/octet-stream: a shard's header (its first 8 + N bytes; data after it may be
 *    cut short or absent), with ?ruleset=NAME[&layout=..][&stats_model=..] checked before the
 *    body as an upload job's are, validated with quant_st_open_header_fd and planned with
 *    quant_plan_file; messages name it model.safetensors, as an uploaded job's input.
 * Headers only, nothing written, no tensor data read. Rules that need statistics (act_static_scale,
 * weight_importance) are planned without a stats_model too, their tensors marked
 * "needs_statistics". The reply is the library's plan document (quant_plan_json), the one
 * `quant plan --json` prints.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handlers.h"
#include "job_source.h"
#include "req_limits.h"
#include "quant_pipeline.h"
#include "quant_st.h"

#define UPLOAD_NAME "model.safetensors"          /* what messages call an uploaded header */
#define HEADER_MAX  (8ull + QUANT_ST_MAX_HEADER) /* the most a header takes */

/* 200 with the plan, the 422 planning gives, or MHD_NO when out of memory. */
static enum MHD_Result reply_plan(qd_req *r, quant_ck_status st, const quant_plan *plan,
                                  const quant_ck_error *ck)
{
    if (st != QUANT_CK_OK && st != QUANT_CK_ERR_NOMEM)
        return qd_reply_ec(r, qd_plan_error_code(st), NULL, "%s", ck->message);
    char *text = st == QUANT_CK_OK ? quant_plan_json(plan) : NULL;
    return text ? qd_reply_text(r, MHD_HTTP_OK, text, "application/json", NULL, NULL) : MHD_NO;
}

static enum MHD_Result plan_from_json(qd_req *r)
{
    json_t *doc = qd_req_json(r);
    if (!doc) return MHD_YES;
    qd_job j;
    enum MHD_Result ret = MHD_YES;
    if (qd_job_from_json(r, doc, &j)) {
        quant_ck_error ck;
        quant_plan *plan = NULL;
        quant_ck_status st = qd_job_plan(r->app, &j, true, &plan, &ck);
        ret = reply_plan(r, st, plan, &ck);
        quant_plan_free(plan);
    }
    free(j.rules);
    free(j.source_path);
    json_decref(doc); /* after the reply: the job's strings live in doc */
    return r->replied ? MHD_YES : ret;
}

/* The uploaded header planned by `rules` for the query's layout and stats_model; *opened: it
 * is a valid safetensors header. */
static quant_ck_status plan_header(qd_req *r, const char *rules, quant_plan **plan, bool *opened,
                                   quant_ck_error *ck)
{
    *opened = false;
    quant_ruleset *rs = NULL;
    quant_st_file *f = NULL;
    quant_ck_status st = quant_ruleset_parse(rules, strlen(rules), "job rules", &rs, ck);
    int fd = st == QUANT_CK_OK ? dup(r->upload_fd) : -1;
    if (st == QUANT_CK_OK && fd < 0)
        st = quant_ck_fail(ck, QUANT_CK_ERR_NOMEM, "out of descriptors");
    if (st == QUANT_CK_OK) st = quant_st_open_header_fd(fd, UPLOAD_NAME, &f, ck);
    if (st == QUANT_CK_OK) {
        *opened = true;
        quant_pipeline_options o;
        quant_pipeline_options_init(&o);
        const char *layout = qd_req_query(r, "layout");
        if (layout) quant_layout_parse(layout, &o.layout);
        o.allow_static_acts = true; /* without stats_model: those tensors need statistics */
        st = quant_plan_file(rs, f, &o, plan, ck);
    }
    quant_st_close(f);
    quant_ruleset_free(rs);
    return st;
}

static enum MHD_Result plan_from_upload(qd_req *r)
{
    if (r->upload_bytes == 0) return qd_reply_ec(r, QD_EC_EMPTY_BODY, NULL, "the upload is empty");
    char *rules = qd_job_rules(r, qd_req_query(r, "ruleset"), NULL);
    if (!rules) return r->replied ? MHD_YES : MHD_NO;
    quant_ck_error ck;
    quant_plan *plan = NULL;
    bool opened;
    quant_ck_status st = plan_header(r, rules, &plan, &opened, &ck);
    /* a body that is no safetensors header is 422 bad_safetensors, as for an upload job */
    enum MHD_Result ret = st == QUANT_CK_ERR_FORMAT && !opened
                              ? qd_reply_ec(r, QD_EC_BAD_SAFETENSORS, NULL, "%s", ck.message)
                              : reply_plan(r, st, plan, &ck);
    quant_plan_free(plan);
    free(rules);
    return ret;
}

/* POST /v1/plans, before the body: an upload's query (layout, stats_model, ruleset) and its
 * Content-Length (a header takes at most 8 + QUANT_ST_MAX_HEADER bytes; 413 beyond, so that a
 * whole shard is never sent for its header), and the disk reserve. */
enum MHD_Result qd_h_plan_precheck(qd_req *r)
{
    qd_payload kind = qd_shard_or_json(r, "a shard's header as application/octet-stream "
                                          "('URL?ruleset=NAME'), or a plan of a server-side "
                                          "checkpoint as application/json");
    if (kind != QD_PAYLOAD_SHARD) return MHD_YES;
    enum MHD_Result ret;
    if (!qd_shard_query_ok(r, &ret)) return ret;
    const char *cl = qd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;
    if (n > HEADER_MAX)
        return qd_reply_ec_limit(r, QD_EC_TOO_LARGE, "max_upload", 0,
                                 "a plan takes a shard's header, at most %llu bytes (its first 8 "
                                 "bytes give the header's length N: send the first 8 + N bytes), "
                                 "not %llu bytes",
                                 HEADER_MAX, n);
    qd_limit_disk(r, n);
    return MHD_YES;
}

/* POST /v1/plans */
enum MHD_Result qd_h_plan_create(qd_req *r)
{
    return r->streaming ? plan_from_upload(r) : plan_from_json(r);
}
