/* h_health.c -- GET /healthz (the process answers), GET /readyz (the database answers and the
 * data directory is writable), GET /metrics (Prometheus text).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handlers.h"

enum MHD_Result qd_h_healthz(qd_req *r)
{
    return qd_reply_json(r, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"));
}

enum MHD_Result qd_h_readyz(qd_req *r)
{
    qd_err err;
    if (qd_store_ping(r->app->store, &err) != QD_OK)
        return qd_reply_ec(r, QD_EC_NOT_READY, NULL, "database: %s", err.message);
    if (access(r->app->cfg->data_dir, W_OK) != 0 || access(r->app->tmp_dir, W_OK) != 0)
        return qd_reply_ec(r, QD_EC_NOT_READY, NULL, "data directory %s is not writable",
                           r->app->cfg->data_dir);
    return qd_reply_json(r, MHD_HTTP_OK, json_pack("{s:s}", "status", "ready"));
}

enum MHD_Result qd_h_metrics(qd_req *r)
{
    int64_t counts[QD_JOB_STATE_COUNT] = {0};
    qd_err err;
    if (qd_store_job_counts(r->app->store, counts, &err) != QD_OK)
        return qd_reply_store_error(r, QD_DB, &err);
    return qd_reply_text(r, MHD_HTTP_OK, qd_metrics_render(r->app->metrics, counts),
                         "text/plain; version=0.0.4", NULL, NULL);
}
