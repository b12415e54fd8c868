/* http.h -- the HTTP layer between libmicrohttpd and the handlers: one qd_req per request
 * (route, path parameters, the body, gathered within the route's limit or streamed to a file),
 * the reply helpers every handler uses, and starting/stopping the server.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_HTTP_H
#define QD_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "app.h"
#include "error_codes.h"

#define QD_MAX_PARAMS    2
#define QD_MAX_PARAM_LEN 256 /* a checkpoint job's file name: up to 255 bytes */

typedef struct qd_route qd_route;
typedef struct qd_http qd_http;

typedef struct qd_conn qd_conn;

/* Why the rest of a body is being dropped (answered once it has ended). */
typedef enum qd_refusal {
    QD_REFUSE_NONE = 0,
    QD_REFUSE_TOO_LARGE, /* 413: over the route's body limit */
    QD_REFUSE_BUDGET,    /* 503: max_body_memory spent */
    QD_REFUSE_DISK,      /* 507: the disk would go below min_free_disk */
    QD_REFUSE_SINK       /* the sink refused the bytes: the route's handler answers */
} qd_refusal;

typedef struct qd_req {
    qd_app *app;
    struct MHD_Connection *conn;
    const char *method;
    const char *url;
    const qd_route *route; /* NULL: no route (the reply is already decided) */
    char params[QD_MAX_PARAMS][QD_MAX_PARAM_LEN];
    char id[20];           /* request id, also sent as X-Request-Id */
    char who[65];          /* the name of the request's token (logged), "" without one */
    const char *limit_hit; /* the setting that refused the request (logged), or NULL */
    struct timespec t0;
    unsigned status; /* of the queued reply, for the log and metrics */
    bool replied;
    /* a body gathered in memory (JSON, or a statistics post) up to limit bytes */
    char *body;
    size_t body_len, body_cap, limit;
    uint64_t budget; /* bytes of max_body_memory this request holds (req_limits.c) */
    /* an octet-stream body, streamed into a temporary file -- or into the file a route's precheck
     * opened itself (upload_fd set, upload_path NULL: PUT /v1/jobs/{id}/inputs/{name}), which
     * may watch the bytes: sink_wrote after each write (upload_bytes counts them; false: the rest
     * is dropped and the handler answers), sink_end when the request ends, whatever happened.
     * A precheck that sets sink_take gets the bytes instead of any file (none is made) until it
     * clears it: POST /v1/jobs holds a shard's header in memory until its job exists; false
     * refuses the rest (the handler answers), a write of its own that failed sets upload_failed */
    bool streaming;
    bool (*sink_take)(struct qd_req *r, const char *data, size_t n);
    bool (*sink_wrote)(struct qd_req *r);
    void (*sink_end)(struct qd_req *r);
    void *sink;
    int upload_fd;
    char *upload_path;
    uint64_t upload_bytes;
    bool upload_failed; /* a write failed: the reply is a 500 once the body is consumed */
    qd_refusal refused; /* refused mid-way: the reply comes once the body ends */
    size_t discarded;   /* bytes dropped since */
    qd_conn *guard;     /* the connection guard's record (conns.h), or NULL */
    /* work handed to a waiter thread (qd_req_defer) */
    qd_http *http;
    void (*defer_fn)(struct qd_req *r, void *arg);
    void *defer_arg; /* owned by the request: defer_free(defer_arg) at its end */
    void (*defer_free)(void *arg);
    bool deferred;        /* defer_fn has run: the handler is called again to reply */
    unsigned suspensions; /* times qd_req_defer suspended the connection (on its MHD thread) */
} qd_req;

/* Whether the configured listen address is a loopback one (127.0.0.0/8, ::1). */
qd_status qd_http_loopback(const qd_config *cfg, bool *loopback, qd_err *err);
/* Starts listening (loopback by default) with libmicrohttpd's thread pool, HTTPS when
 * app->tls is set; *port gets the bound port (useful when the configured port is 0). */
qd_status qd_http_start(qd_app *app, qd_http **out, int *port, qd_err *err);
/* Stops accepting new connections: each is refused at accept (in-flight requests finish). */
void qd_http_quiesce(qd_http *h);
/* Stops the server and frees it; NULL is a no-op. */
void qd_http_stop(qd_http *h);
/* The connection guard's counts (qd_conns_counts): open connections and client addresses
 * holding one; both 0 when no connection is open. */
void qd_http_conn_counts(qd_http *h, unsigned *open, unsigned *addresses);

/* ---- replies (each returns what the MHD access handler returns) ------------------------------ */

/* text (malloc'd) is stolen. Content-Type: content_type; one more header when name is not
 * NULL. */
enum MHD_Result qd_reply_text(qd_req *r, unsigned status, char *text, const char *content_type,
                              const char *name, const char *value);
/* body is stolen (decref'd). Sets Content-Type: application/json. */
enum MHD_Result qd_reply_json(qd_req *r, unsigned status, json_t *body);
/* The API error `ec` (error_codes.h: its word and HTTP status):
 * {"error":{"code":WORD,"message":...,"field":field or null}}; server paths are taken out of
 * the message and it is made valid UTF-8. */
enum MHD_Result qd_reply_ec(qd_req *r, qd_ec ec, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A limit was hit: {"error":{"code":WORD,"message":...,"field":null,"limit":limit}} where limit
 * names the configuration key (SECURITY.md lists them); Retry-After: retry_after seconds when
 * it is not 0 (503, 429). */
enum MHD_Result qd_reply_ec_limit(qd_req *r, qd_ec ec, const char *limit, unsigned retry_after,
                                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The error from a store call (qd_ec_of_status): 404 not_found, 409 conflict, 400 invalid, else
 * 500 internal. */
enum MHD_Result qd_reply_store_error(qd_req *r, qd_status st, const qd_err *err);
/* A finished response (headers added by the caller), queued with status. Destroys it. */
enum MHD_Result qd_reply(qd_req *r, unsigned status, struct MHD_Response *resp);
/* Empty body (204, 304). */
enum MHD_Result qd_reply_empty(qd_req *r, unsigned status);

/* Names of rule sets and models: 1-64 of [A-Za-z0-9._-], not starting with '.'. */
bool qd_valid_name(const char *s);

/* Request accessors. */
const char *qd_req_header(const qd_req *r, const char *name);
const char *qd_req_query(const qd_req *r, const char *name);
/* The body parsed as a JSON object; on failure replies 400 and returns NULL. */
json_t *qd_req_json(qd_req *r);
/* Frees the body gathered in memory, for a handler that has parsed it into something it holds
 * instead; the bytes r holds of max_body_memory stay until it changes them (qd_budget_resize)
 * or the request ends. */
void qd_req_free_body(qd_req *r);

/* For a handler whose work blocks (a statistics post waiting for its commit): the connection
 * is suspended and fn(r, arg) runs on one of the server's waiter threads, so no HTTP thread
 * waits; then the route's handler is called again with r->deferred true and replies (fn leaves
 * its results in arg). arg belongs to the request from now on: free_fn(arg) (may be NULL) when
 * the request ends, whatever happened. While the server stops, fn runs at once on the calling
 * thread. Returns what the handler returns. */
enum MHD_Result qd_req_defer(qd_req *r, void (*fn)(qd_req *r, void *arg), void *arg,
                             void (*free_fn)(void *arg));

#endif /* QD_HTTP_H */
