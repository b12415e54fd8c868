/* router.c -- the route table and path matching ("{name}" = one non-empty segment).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <string.h>

#include "handlers.h"
#include "router.h"

const qd_route qd_routes[] = {
    {"GET", "/healthz", qd_h_healthz, QD_BODY_NONE, "/healthz", NULL},
    {"GET", "/readyz", qd_h_readyz, QD_BODY_NONE, "/readyz", NULL},
    {"GET", "/metrics", qd_h_metrics, QD_BODY_NONE, "/metrics", NULL},
    {"GET", "/v1/rulesets", qd_h_ruleset_list, QD_BODY_NONE, "/v1/rulesets", NULL},
    {"PUT", "/v1/rulesets/{name}", qd_h_ruleset_put, QD_BODY_JSON, "/v1/rulesets/{name}", NULL},
    {"GET", "/v1/rulesets/{name}", qd_h_ruleset_get, QD_BODY_NONE, "/v1/rulesets/{name}", NULL},
    {"DELETE", "/v1/rulesets/{name}", qd_h_ruleset_delete, QD_BODY_NONE, "/v1/rulesets/{name}", NULL},
    {"POST", "/v1/jobs", qd_h_job_create, QD_BODY_UPLOAD, "/v1/jobs", NULL},
    {"GET", "/v1/jobs", qd_h_job_list, QD_BODY_NONE, "/v1/jobs", NULL},
    {"GET", "/v1/jobs/{id}", qd_h_job_get, QD_BODY_NONE, "/v1/jobs/{id}", NULL},
    {"DELETE", "/v1/jobs/{id}", qd_h_job_delete, QD_BODY_NONE, "/v1/jobs/{id}", NULL},
    {"GET", "/v1/jobs/{id}/output", qd_h_job_output, QD_BODY_NONE, "/v1/jobs/{id}/output", NULL},
    {"GET", "/v1/jobs/{id}/outputs/{name}", qd_h_job_output_named, QD_BODY_NONE,
     "/v1/jobs/{id}/outputs/{name}", NULL},
    {"GET", "/v1/jobs/{id}/report", qd_h_job_report, QD_BODY_NONE, "/v1/jobs/{id}/report", NULL},
    {"GET", "/v1/models", qd_h_model_list, QD_BODY_NONE, "/v1/models", NULL},
    {"PUT", "/v1/models/{model}", qd_h_model_put, QD_BODY_JSON, "/v1/models/{model}", NULL},
    {"GET", "/v1/models/{model}", qd_h_model_get, QD_BODY_NONE, "/v1/models/{model}", NULL},
    {"POST", "/v1/models/{model}/stats", qd_h_stats_post, QD_BODY_STATS,
     "/v1/models/{model}/stats", qd_h_stats_precheck},
    {"GET", "/v1/models/{model}/stats", qd_h_stats_get, QD_BODY_NONE, "/v1/models/{model}/stats", NULL},
    {"DELETE", "/v1/models/{model}/stats", qd_h_stats_delete, QD_BODY_NONE,
     "/v1/models/{model}/stats", NULL},
    {"GET", "/v1/models/{model}/scales", qd_h_scales_get, QD_BODY_NONE,
     "/v1/models/{model}/scales", NULL},
};
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

const qd_route *qd_route_match(const char *method, const char *path, qd_req *r, bool *path_known)
{
    *path_known = false;
    for (size_t i = 0; i < qd_n_routes; i++) {
        if (!match(qd_routes[i].pattern, path, NULL)) continue;
        *path_known = true;
        if (strcmp(qd_routes[i].method, method) != 0) continue;
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
        int k = snprintf(buf + at, len - at, "%s%s", at ? ", " : "", qd_routes[i].method);
        if (k < 0) break;
        at += (size_t)k;
    }
}

size_t qd_route_index(const qd_route *route)
{
    return (size_t)(route - qd_routes);
}
