/* router.h -- the route table: method + path pattern ("{name}" matches one path segment) ->
 * handler, with what the route accepts as a body. The table is the single list of routes; the
 * OpenAPI test compares it with api/openapi.yaml.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_ROUTER_H
#define QD_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "http.h"
#include "tokens.h"

/* qd_route.roles: the roles (bits QD_R(role)) whose tokens may call a route. */
#define QD_R(role)  (1u << (role))
#define QD_PUBLIC   0u /* no token needed (/healthz, /readyz) */
#define QD_ANY_ROLE (QD_R(QD_ROLE_TRAINER) | QD_R(QD_ROLE_READER) | QD_R(QD_ROLE_OPERATOR))
/* Any token, or none when metrics_auth is "open". */
#define QD_R_METRICS_OPTION (1u << 8)
#define QD_METRICS          (QD_ANY_ROLE | QD_R_METRICS_OPTION)

typedef enum qd_body_kind {
    QD_BODY_NONE = 0, /* any body is refused with 413 */
    QD_BODY_JSON,     /* gathered in memory up to max_json_body */
    QD_BODY_UPLOAD,   /* application/octet-stream streamed to a file up to max_upload; JSON too */
    QD_BODY_STATS,    /* any body (safetensors or JSON) gathered in memory up to max_stats_body */
    QD_BODY_INPUT     /* any body streamed up to max_upload into the file the precheck opened */
} qd_body_kind;

typedef enum MHD_Result (*qd_handler)(qd_req *r);

struct qd_route {
    const char *method;
    const char *pattern;
    qd_handler handler;
    qd_body_kind body;
    const char *name; /* the metrics label: the pattern */
    /* Called once the headers are in, before any of the body is read (may be NULL): checks what
     * the URL and headers tell (query arguments, Content-Type, names that must exist) and
     * replies to refuse the request, so a bad request never costs its body. */
    qd_handler precheck;
    unsigned roles; /* QD_PUBLIC, or the QD_R() bits of the roles allowed */
};

extern const qd_route qd_routes[];
extern const size_t qd_n_routes;

/* The route for method + path (query string already removed), filling r->params; a HEAD gets the
 * path's GET route. NULL when none; then *path_known tells whether the path exists with another
 * method (405). */
const qd_route *qd_route_match(const char *method, const char *path, qd_req *r, bool *path_known);
/* "GET, HEAD, DELETE" for the Allow header of a 405, into buf (HEAD follows every GET). */
void qd_route_allow(const char *path, char *buf, size_t len);
/* The route's index in qd_routes. */
size_t qd_route_index(const qd_route *route);

#endif /* QD_ROUTER_H */
