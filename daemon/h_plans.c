/* h_plans.c -- POST /v1/plans: what a job would do (SPEC section 10), without creating it. The
 * body is the one POST /v1/jobs takes for a server-side checkpoint (ruleset | rules, layout,
 * stats_model, source {"path"}), read by the same parser (qd_job_from_json: the path confined
 * below a source root by qd_source_locate, as job creation confines it) and planned by the same
 * call (qd_job_plan, the library's quant_plan_path: headers only, nothing written). The reply is
 * the library's plan document (quant_plan_json), the one `quant plan --json` prints.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>

#include "handlers.h"
#include "job_source.h"

/* POST /v1/plans */
enum MHD_Result qd_h_plan_create(qd_req *r)
{
    json_t *doc = qd_req_json(r);
    if (!doc) return MHD_YES;
    qd_job j;
    enum MHD_Result ret = MHD_YES;
    if (qd_job_from_json(r, doc, &j)) {
        quant_ck_error ck;
        quant_plan *plan = NULL;
        quant_ck_status st = qd_job_plan(r->app, &j, &plan, &ck);
        char *text = st == QUANT_CK_OK ? quant_plan_json(plan) : NULL;
        if (st != QUANT_CK_OK && st != QUANT_CK_ERR_NOMEM)
            ret = qd_reply_error(r, 422, qd_plan_error_code(st), NULL, "%s", ck.message);
        else if (text)
            ret = qd_reply_text(r, MHD_HTTP_OK, text, "application/json", NULL, NULL);
        else
            ret = MHD_NO; /* out of memory */
        quant_plan_free(plan);
    }
    free(j.rules);
    free(j.source_path);
    json_decref(doc); /* after the reply: the job's strings live in doc */
    return r->replied ? MHD_YES : ret;
}
