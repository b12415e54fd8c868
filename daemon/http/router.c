/* router.c -- the route table (handler, body kind, precheck, the roles allowed) and path
 * matching ("{name}" = one non-empty segment); HEAD is served by the GET routes.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <string.h>

#include "handlers.h"
#include "router.h"

/* Who may call each route: QD_PUBLIC (no token), or the roles whose tokens are accepted. The
 * operator may do everything; a trainer posts and reads statistics; a reader reads jobs, their
 * reports and outputs. POST /v1/plans is the operator's, as job creation is: a plan opens a
 * server-side path under the source roots, shows the tensors of what is there, and may name a
 * stored rule set, which only the operator may read. */
#define ROUTE(method, pattern, handler, body, precheck, roles)                                     \
    {                                                                                              \
        method, pattern, handler, body, pattern, precheck, roles                                   \
    }
#define OPERATOR QD_R(QD_ROLE_OPERATOR)
#define TRAINING (QD_R(QD_ROLE_TRAINER) | OPERATOR)
#define READING  (QD_R(QD_ROLE_READER) | OPERATOR)

/* clang-format off */
const qd_route qd_routes[] = {
    ROUTE("GET",    "/healthz",                      qd_h_healthz,          QD_BODY_NONE,   NULL, QD_PUBLIC),
    ROUTE("GET",    "/readyz",                       qd_h_readyz,           QD_BODY_NONE,   NULL, QD_PUBLIC),
    ROUTE("GET",    "/metrics",                      qd_h_metrics,          QD_BODY_NONE,   NULL, QD_METRICS),
    ROUTE("GET",    "/v1/rulesets",                  qd_h_ruleset_list,     QD_BODY_NONE,   NULL, OPERATOR),
    ROUTE("PUT",    "/v1/rulesets/{name}",           qd_h_ruleset_put,      QD_BODY_JSON,   NULL, OPERATOR),
    ROUTE("GET",    "/v1/rulesets/{name}",           qd_h_ruleset_get,      QD_BODY_NONE,   NULL, OPERATOR),
    ROUTE("DELETE", "/v1/rulesets/{name}",           qd_h_ruleset_delete,   QD_BODY_NONE,   NULL, OPERATOR),
    ROUTE("POST",   "/v1/jobs",                      qd_h_job_create,       QD_BODY_UPLOAD, qd_h_job_precheck, OPERATOR),
    ROUTE("GET",    "/v1/jobs",                      qd_h_job_list,         QD_BODY_NONE,   NULL, READING),
    ROUTE("GET",    "/v1/jobs/{id}",                 qd_h_job_get,          QD_BODY_NONE,   NULL, READING),
    ROUTE("DELETE", "/v1/jobs/{id}",                 qd_h_job_delete,       QD_BODY_NONE,   NULL, OPERATOR),
    ROUTE("GET",    "/v1/jobs/{id}/output",          qd_h_job_output,       QD_BODY_NONE,   NULL, READING),
    ROUTE("GET",    "/v1/jobs/{id}/outputs",         qd_h_job_outputs,      QD_BODY_NONE,   NULL, READING),
    ROUTE("GET",    "/v1/jobs/{id}/outputs.tar",     qd_h_job_outputs_tar,  QD_BODY_NONE,   NULL, READING),
    ROUTE("GET",    "/v1/jobs/{id}/outputs/{name}",  qd_h_job_output_named, QD_BODY_NONE,   NULL, READING),
    ROUTE("PUT",    "/v1/jobs/{id}/inputs/{name}",   qd_h_job_input_put,    QD_BODY_INPUT,  qd_h_job_input_precheck, OPERATOR),
    ROUTE("GET",    "/v1/jobs/{id}/report",          qd_h_job_report,       QD_BODY_NONE,   NULL, READING),
    ROUTE("POST",   "/v1/plans",                     qd_h_plan_create,      QD_BODY_UPLOAD, qd_h_plan_precheck, OPERATOR),
    ROUTE("GET",    "/v1/models",                    qd_h_model_list,       QD_BODY_NONE,   NULL, TRAINING),
    ROUTE("PUT",    "/v1/models/{model}",            qd_h_model_put,        QD_BODY_JSON,   NULL, OPERATOR),
    ROUTE("GET",    "/v1/models/{model}",            qd_h_model_get,        QD_BODY_NONE,   NULL, TRAINING),
    ROUTE("POST",   "/v1/models/{model}/stats",      qd_h_stats_post,       QD_BODY_STATS,  qd_h_stats_precheck, TRAINING),
    ROUTE("GET",    "/v1/models/{model}/stats",      qd_h_stats_get,        QD_BODY_NONE,   NULL, TRAINING),
    ROUTE("DELETE", "/v1/models/{model}/stats",      qd_h_stats_delete,     QD_BODY_NONE,   NULL, OPERATOR),
    ROUTE("GET",    "/v1/models/{model}/scales",     qd_h_scales_get,       QD_BODY_NONE,   NULL, TRAINING),
    ROUTE("GET",    "/v1/models/{model}/imatrix",    qd_h_imatrix_get,      QD_BODY_NONE,   NULL, TRAINING),
    ROUTE("GET",    "/v1/tokens",                    qd_h_token_list,       QD_BODY_NONE,   NULL, OPERATOR),
    ROUTE("POST",   "/v1/tokens",                    qd_h_token_create,     QD_BODY_JSON,   NULL, OPERATOR),
    ROUTE("DELETE", "/v1/tokens/{name}",             qd_h_token_delete,     QD_BODY_NONE,   NULL, OPERATOR),
};
/* clang-format on */
const size_t qd_n_routes = sizeof qd_routes / sizeof qd_routes[0];

/* Matches path against pattern; fills params (when not NULL) with the {segments}. */
static bool match(const char *pattern, const char *path, char params[][QD_MAX_PARAM_LEN])
{
    int n = 0;
    while (*pattern && *path) {
        if (*pattern == '{') {
            const char *end = strchr(path, '/');
            size_t len = end ? (size_t)(end - path) : strlen(path);
            if (len == 0 || len >= QD_MAX_PARAM_LEN || n >= QD_MAX_PARAMS) return false;
            if (params) {
                memcpy(params[n], path, len);
                params[n][len] = '\0';
            }
            n++;
            path += len;
            pattern = strchr(pattern, '}') + 1;
        } else if (*pattern++ != *path++) {
            return false;
        }
    }
    return *pattern == '\0' && *path == '\0';
}

/* Whether a route of route_method serves a request of method: the same method, or HEAD on a GET
 * route. The table has no HEAD rows (the OpenAPI test compares it with the spec's operations):
 * a HEAD runs the GET handler, with the same roles, and libmicrohttpd sends the reply's headers
 * (Content-Length of the body it would have sent included) and never its body. */
static bool serves(const char *route_method, const char *method)
{
    return strcmp(route_method, method) == 0 || (strcmp(method, MHD_HTTP_METHOD_HEAD) == 0 &&
                                                 strcmp(route_method, MHD_HTTP_METHOD_GET) == 0);
}

const qd_route *qd_route_match(const char *method, const char *path, qd_req *r, bool *path_known)
{
    *path_known = false;
    for (size_t i = 0; i < qd_n_routes; i++) {
        if (!match(qd_routes[i].pattern, path, NULL)) continue;
        *path_known = true;
        if (!serves(qd_routes[i].method, method)) continue;
        match(qd_routes[i].pattern, path, r->params);
        return &qd_routes[i];
    }
    return NULL;
}

void qd_route_allow(const char *path, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < qd_n_routes && at < len; i++) {
        if (!match(qd_routes[i].pattern, path, NULL)) continue;
        const char *m = qd_routes[i].method;
        bool get = strcmp(m, MHD_HTTP_METHOD_GET) == 0;
        int k = snprintf(buf + at, len - at, "%s%s%s", at ? ", " : "", m, get ? ", HEAD" : "");
        if (k < 0) break;
        at += (size_t)k;
    }
}

size_t qd_route_index(const qd_route *route)
{
    return (size_t)(route - qd_routes);
}
