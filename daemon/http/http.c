/* http.c -- the libmicrohttpd server: listening socket, thread pool with epoll, the URL's
 * escapes decoded without losing a %00 (and control characters in the URL refused), the access
 * handler that routes a request, enforces its body limit (413) and gathers the body in memory
 * (JSON, statistics posts; in one allocation when Content-Length is known) or streams it,
 * work that blocks handed to waiter threads with the connection suspended (qd_req_defer), and
 * the completion callback that logs the request and counts it.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "conns.h"
#include "defer.h"
#include "log.h"
#include "req_limits.h"
#include "router.h"
#include "tls.h"

/* Bytes of an over-limit body read and dropped before the connection is closed instead. */
#define QD_MAX_DISCARD ((size_t)64 << 20)
/* Waiter threads for deferred work: requests waiting at once for a commit (each group commit of
 * the statistics writer takes all of them), whatever the number of HTTP threads. */
#define QD_WAITERS 64

/* An upload checks the data directory's free space every this many bytes. */
#define QD_DISK_CHECK_EVERY ((uint64_t)64 << 20)

struct qd_http {
    struct MHD_Daemon *d;
    qd_app *app;
    qd_defer *waiters;
    qd_conns *guard;
};

static atomic_uint_fast64_t request_counter;

static double elapsed(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static qd_req *req_new(qd_http *h, struct MHD_Connection *conn, const char *method, const char *url)
{
    qd_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->http = h;
    r->app = h->app;
    r->conn = conn;
    r->method = method;
    r->url = url;
    r->upload_fd = -1;
    r->guard = qd_conn_of(conn);
    clock_gettime(CLOCK_MONOTONIC, &r->t0);
    uint64_t n = atomic_fetch_add(&request_counter, 1) + 1;
    snprintf(r->id, sizeof r->id, "%08x%08" PRIx64, (unsigned)getpid(), n & 0xffffffffu);
    return r;
}

void qd_req_free_body(qd_req *r)
{
    free(r->body);
    r->body = NULL;
    r->body_len = 0;
    r->body_cap = 0;
}

static void req_free(qd_req *r)
{
    if (r->sink_end) r->sink_end(r);
    if (r->upload_fd >= 0) close(r->upload_fd);
    if (r->upload_path) {
        unlink(r->upload_path); /* the handler renames what it keeps */
        free(r->upload_path);
    }
    if (r->defer_free) r->defer_free(r->defer_arg);
    free(r->body);
    qd_budget_release(r);
    free(r);
}

/* ---- the body ---------------------------------------------------------------------------------
 */

static bool is_octet_stream(const qd_req *r)
{
    const char *ct = qd_req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    return ct && strncmp(ct, "application/octet-stream", 24) == 0;
}

/* The setting that limits this request's body (QD_BODY_NONE: a route that takes none). */
static const char *body_limit_key(const qd_req *r)
{
    switch (r->route->body) {
    case QD_BODY_NONE:
        return "no_body";
    case QD_BODY_STATS:
        return "max_stats_body";
    case QD_BODY_INPUT:
        return "max_upload";
    default:
        return r->streaming ? "max_upload" : "max_json_body";
    }
}

/* 413, naming the setting (a route without a body: "takes no body"). */
static enum MHD_Result reply_too_large(qd_req *r, unsigned long long n)
{
    if (r->route->body == QD_BODY_NONE)
        return qd_reply_ec(r, QD_EC_TOO_LARGE, NULL, "%s %s takes no request body", r->method,
                           r->route->pattern);
    if (n)
        return qd_reply_ec_limit(r, QD_EC_TOO_LARGE, body_limit_key(r), 0,
                                 "body of %llu bytes is over this route's limit of %zu bytes (%s)",
                                 n, r->limit, body_limit_key(r));
    return qd_reply_ec_limit(r, QD_EC_TOO_LARGE, body_limit_key(r), 0,
                             "body is over this route's limit of %zu bytes (%s)", r->limit,
                             body_limit_key(r));
}

static size_t body_limit(const qd_req *r)
{
    const qd_config *cfg = r->app->cfg;
    switch (r->route->body) {
    case QD_BODY_NONE:
        return 0;
    case QD_BODY_STATS:
        return (size_t)cfg->max_stats_body;
    case QD_BODY_INPUT:
        return (size_t)cfg->max_upload;
    default:
        return r->streaming ? (size_t)cfg->max_upload : (size_t)cfg->max_json_body;
    }
}

/* A body gathered in memory whose Content-Length is known takes its share of max_body_memory
 * and gets its buffer at once (one allocation instead of doublings and copies; pages are
 * touched only as bytes arrive; when the allocation fails, body_chunk grows the buffer as
 * usual). Replies 503 when the budget cannot take it. */
static enum MHD_Result body_reserve(qd_req *r, unsigned long long n)
{
    if (r->streaming || n == 0) return MHD_YES;
    if (!qd_budget_take(r, n)) return qd_reply_budget(r, n); /* its NUL is not counted */
    r->body = malloc((size_t)n + 1);
    if (r->body) r->body_cap = (size_t)n + 1;
    return MHD_YES;
}

/* Decides how the body is taken; replies at once when Content-Length is over the route's limit
 * (413), over what the memory budget has left (503), or more than the disk can take (507). */
static enum MHD_Result body_begin(qd_req *r)
{
    r->streaming =
        (r->route->body == QD_BODY_UPLOAD && is_octet_stream(r)) || r->route->body == QD_BODY_INPUT;
    r->limit = body_limit(r);
    const char *cl = qd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno == 0 && *end == '\0' && n > r->limit) return reply_too_large(r, n);
        if (errno == 0 && *end == '\0' && body_reserve(r, n) != MHD_YES) return MHD_NO;
        if (r->replied) return MHD_YES;
    }
    if (!r->streaming || r->upload_fd >= 0 || r->sink_take)
        return MHD_YES; /* the precheck opened its file, or takes the bytes itself */
    size_t len = strlen(r->app->tmp_dir) + 32;
    r->upload_path = malloc(len);
    if (!r->upload_path) return MHD_NO;
    snprintf(r->upload_path, len, "%s/upload-XXXXXX", r->app->tmp_dir);
    r->upload_fd = mkostemp(r->upload_path, O_CLOEXEC);
    if (r->upload_fd < 0) {
        free(r->upload_path);
        r->upload_path = NULL;
        return qd_reply_ec(r, QD_EC_INTERNAL, NULL, "cannot create an upload file: %s",
                           strerror(errno));
    }
    return MHD_YES;
}

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* Why the rest of a body is dropped (libmicrohttpd cannot answer in the middle of a body): it
 * is answered at its end, or the connection is closed once too much has been thrown away. */
static enum MHD_Result discard(qd_req *r, qd_refusal why, size_t n)
{
    if (r->refused == QD_REFUSE_NONE) r->refused = why;
    r->discarded += n;
    return r->discarded > QD_MAX_DISCARD ? MHD_NO : MHD_YES;
}

/* An upload's bytes to its file; every QD_DISK_CHECK_EVERY bytes the disk must keep its
 * reserve. */
static enum MHD_Result upload_chunk(qd_req *r, const char *data, size_t n)
{
    uint64_t before = r->upload_bytes;
    if (r->sink_take) {
        if (!r->upload_failed && !r->sink_take(r, data, n)) {
            r->upload_bytes += n;
            return discard(r, QD_REFUSE_SINK, 0);
        }
    } else if (!r->upload_failed && !write_all(r->upload_fd, data, n)) {
        r->upload_failed = true;
    }
    r->upload_bytes += n;
    qd_metrics_upload(r->app->metrics, n);
    if (!r->upload_failed && r->sink_wrote && !r->sink_wrote(r))
        return discard(r, QD_REFUSE_SINK, 0);
    char why[256];
    if (before / QD_DISK_CHECK_EVERY != r->upload_bytes / QD_DISK_CHECK_EVERY &&
        !qd_disk_room(r->app, 0, why, sizeof why)) {
        r->upload_failed = true; /* the file is dropped at the request's end */
        return discard(r, QD_REFUSE_DISK, 0);
    }
    return MHD_YES;
}

static enum MHD_Result body_chunk(qd_req *r, const char *data, size_t n)
{
    qd_conn_body_bytes(r->guard, n);
    size_t have = r->streaming ? (size_t)r->upload_bytes : r->body_len;
    if (r->refused != QD_REFUSE_NONE) return discard(r, r->refused, n);
    if (n > r->limit - have) return discard(r, QD_REFUSE_TOO_LARGE, n);
    if (r->streaming) return upload_chunk(r, data, n);
    if (r->body_len + n + 1 > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 4096;
        while (cap < r->body_len + n + 1) cap *= 2;
        if (!qd_budget_take(r, cap - r->body_cap)) return discard(r, QD_REFUSE_BUDGET, n);
        char *b = realloc(r->body, cap);
        if (!b) return MHD_NO;
        r->body = b;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return MHD_YES;
}

/* ---- deferred work ----------------------------------------------------------------------------
 */

/* On a waiter: the work, then the connection goes back to libmicrohttpd, which calls the
 * handler again. r may be gone as soon as it is resumed. */
static void run_deferred(void *arg)
{
    qd_req *r = arg;
    struct MHD_Connection *conn = r->conn;
    r->defer_fn(r, r->defer_arg);
    r->deferred = true;
    MHD_resume_connection(conn);
}

enum MHD_Result qd_req_defer(qd_req *r, void (*fn)(qd_req *r, void *arg), void *arg,
                             void (*free_fn)(void *arg))
{
    r->defer_fn = fn;
    r->defer_arg = arg;
    r->defer_free = free_fn;
    if (!qd_defer_begin(r->http->waiters)) { /* stopping: no more suspended connections */
        fn(r, arg);
        r->deferred = true;
        return r->route->handler(r);
    }
    r->suspensions++;
    MHD_suspend_connection(r->conn);
    qd_defer_run(r->http->waiters, run_deferred, r);
    return MHD_YES;
}

/* ---- the URL ----------------------------------------------------------------------------------
 *
 * libmicrohttpd decodes the %HH escapes of the path, and of each query argument's name and
 * value, in place before the access handler sees them; a decoded %00 then ends the string, so
 * "/v1/jobs/7%00/output" reached the router as "/v1/jobs/7". quantd decodes them itself
 * (MHD_OPTION_UNESCAPE_CALLBACK, called for the path and for every argument's name and value)
 * with libmicrohttpd's own decoder, then turns every NUL it produced into URL_NUL, a control
 * character, so nothing is cut. Before routing, a request whose path or arguments hold any
 * control character (0x00-0x1F, 0x7F: decoded, or sent raw if libmicrohttpd lets one through)
 * is refused with 400 invalid. The marker is the decoded text itself: no per-connection state
 * to keep in step with the request, and whatever put a control character there, it is refused.
 */

#define URL_NUL '\x1a' /* SUB, ASCII's substitute character: what a decoded %00 becomes */

static size_t unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    size_t n = MHD_http_unescape(s); /* the decoded length, NULs it decoded included */
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\0') s[i] = URL_NUL;
    return n;
}

static bool has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return true;
    return false;
}

static enum MHD_Result arg_has_control(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    (void)kind;
    bool *found = cls;
    *found = has_control(key) || (value && has_control(value));
    return *found ? MHD_NO : MHD_YES;
}

/* Whether the request's path or one of its query arguments holds a control character. */
static bool url_has_control(const qd_req *r)
{
    bool found = has_control(r->url);
    if (!found) MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, arg_has_control, &found);
    return found;
}

/* ---- the access handler -----------------------------------------------------------------------
 */

/* Whether the request announces a body (a Content-Length above 0, or chunked). */
static bool body_follows(const qd_req *r)
{
    const char *cl = qd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return (cl && strtoull(cl, NULL, 10) > 0) ||
           qd_req_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
}

/* The route, then who asks (auth.c), then what the headers tell (the route's precheck), then
 * how the body is taken: anything refused here costs no body. */
static enum MHD_Result admit(qd_req *r)
{
    if (!qd_auth_request(r)) return MHD_YES;
    enum MHD_Result ret = r->route->precheck ? r->route->precheck(r) : MHD_YES;
    return ret == MHD_YES && !r->replied ? body_begin(r) : ret;
}

static enum MHD_Result first_call(qd_req *r)
{
    if (url_has_control(r)) {
        qd_conn_busy(r->guard);
        return qd_reply_ec(r, QD_EC_INVALID, NULL,
                           "the URL holds a control character (an escape such as %%00 or "
                           "%%0A in the path or a query argument)");
    }
    /* RFC 9110 10.1.1: a client must not send 100-continue without content. libmicrohttpd
     * 0.9.75 sends "100 Continue" to such a request when the handler does not answer at once,
     * and then either drops the answer (GET) or, with more bytes behind it on the connection,
     * spins a pool thread at full CPU for good (found by tests/fuzz/fuzz_http.c): answer it
     * here, which libmicrohttpd handles like any early answer. */
    if (qd_req_header(r, MHD_HTTP_HEADER_EXPECT) && !body_follows(r)) {
        qd_conn_busy(r->guard);
        return qd_reply_ec(r, QD_EC_INVALID, "Expect",
                           "Expect: 100-continue is for a request with a body (Content-Length "
                           "over 0, or chunked); this one has none");
    }
    bool path_known;
    r->route = qd_route_match(r->method, r->url, r, &path_known);
    if (r->route) {
        enum MHD_Result ret = admit(r);
        qd_conn_headers_in(r->guard, !r->replied && body_follows(r));
        return ret;
    }
    qd_conn_busy(r->guard);
    if (!path_known) return qd_reply_ec(r, QD_EC_NOT_FOUND, NULL, "no route for %s", r->url);
    char allow[64];
    qd_route_allow(r->url, allow, sizeof allow);
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    qd_reply(r, MHD_HTTP_METHOD_NOT_ALLOWED, resp);
    return MHD_YES;
}

/* The answer to a body dropped on the way (discard). */
static enum MHD_Result refuse(qd_req *r)
{
    char why[256];
    switch (r->refused) {
    case QD_REFUSE_BUDGET:
        return qd_reply_budget(r, r->body_len + r->discarded);
    case QD_REFUSE_DISK:
        if (qd_disk_room(r->app, 0, why, sizeof why)) snprintf(why, sizeof why, "disk full");
        return qd_reply_ec_limit(r, QD_EC_INSUFFICIENT_STORAGE, "min_free_disk", 0, "%s", why);
    default:
        return reply_too_large(r, 0);
    }
}

/* A handler that neither replied nor suspended the connection (a bug): 500, logged. */
static enum MHD_Result unanswered(qd_req *r)
{
    qd_log(QD_LOG_ERROR, "a handler left a request unanswered", "request_id", r->id, "route",
           r->route->pattern, NULL);
    return qd_reply_ec(r, QD_EC_INTERNAL, NULL, "the server could not answer this request");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    (void)version;
    qd_req *r = *con_cls;
    if (!r) {
        r = req_new(cls, conn, method, url);
        if (!r) return MHD_NO;
        *con_cls = r;
        return first_call(r);
    }
    if (*data_size > 0) {
        size_t n = *data_size;
        *data_size = 0;
        return r->replied ? MHD_YES : body_chunk(r, data, n);
    }
    if (r->replied) return MHD_YES;
    qd_conn_busy(r->guard); /* the body is in: the server's turn */
    if (r->refused != QD_REFUSE_NONE && r->refused != QD_REFUSE_SINK) return refuse(r);
    if (r->upload_failed)
        return qd_reply_ec(r, QD_EC_INTERNAL, NULL, "writing the upload failed (disk full?)");
    unsigned suspensions = r->suspensions;
    enum MHD_Result ret = r->route->handler(r);
    if (ret == MHD_YES && !r->replied && r->suspensions == suspensions)
        return unanswered(r); /* libmicrohttpd would call the handler again, at once, for good */
    return ret;
}

/* How a request ended, for the log: "ok" unless the response was cut short. */
static const char *termination_name(enum MHD_RequestTerminationCode toe)
{
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK:
        return "ok";
    case MHD_REQUEST_TERMINATED_WITH_ERROR:
        return "error";
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
        return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
        return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR:
        return "read_error";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
        return "client_abort";
    default:
        return "other";
    }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    qd_app *app = ((qd_http *)cls)->app;
    qd_req *r = *con_cls;
    if (!r) return;
    double secs = elapsed(&r->t0);
    size_t route = r->route ? qd_route_index(r->route) : qd_n_routes;
    unsigned status = r->replied ? r->status : 0;
    qd_metrics_request(app->metrics, route, r->method, status, secs);
    char st[8], ms[24];
    snprintf(st, sizeof st, "%u", status);
    snprintf(ms, sizeof ms, "%.3f", secs * 1e3);
    qd_conn_request_done(r->guard);
    qd_log(toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? QD_LOG_INFO : QD_LOG_WARN, "request",
           "request_id", r->id, "method", r->method, "path", r->url, "route",
           r->route ? r->route->name : "-", "status", st, "duration_ms", ms, "token",
           r->who[0] ? r->who : "-", "end", termination_name(toe), r->limit_hit ? "limit" : NULL,
           r->limit_hit, NULL);
    req_free(r);
    *con_cls = NULL;
}

/* ---- start and stop ---------------------------------------------------------------------------
 */

static qd_status resolve(const qd_config *cfg, struct sockaddr_storage *ss, bool *v6, qd_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[8];
    snprintf(port, sizeof port, "%d", cfg->listen_port);
    int rc = getaddrinfo(cfg->listen_host, port, &hints, &ai);
    if (rc != 0)
        return qd_fail(err, QD_INVALID, "listen %s: %s", cfg->listen_host, gai_strerror(rc));
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    return QD_OK;
}

/* Every connection is a descriptor: the soft limit is raised towards max_connections plus room
 * for the database, uploads and outputs (as far as the hard limit allows; else a warning). */
static void raise_fd_limit(const qd_config *cfg)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)cfg->max_connections + 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < want) {
        char have[24], need[24];
        snprintf(have, sizeof have, "%llu", (unsigned long long)rl.rlim_cur);
        snprintf(need, sizeof need, "%llu", (unsigned long long)want);
        qd_log(QD_LOG_WARN,
               "the open-file limit is below max_connections + 256: connections past it fail",
               "limit", have, "wanted", need, NULL);
    }
}

qd_status qd_http_loopback(const qd_config *cfg, bool *loopback, qd_err *err)
{
    struct sockaddr_storage ss;
    bool v6 = false;
    qd_status st = resolve(cfg, &ss, &v6, err);
    if (st != QD_OK) return st;
    if (v6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)&ss)->sin6_addr;
        *loopback = IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    } else {
        *loopback = (ntohl(((const struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    }
    return QD_OK;
}

qd_status qd_http_start(qd_app *app, qd_http **out, int *port, qd_err *err)
{
    struct sockaddr_storage ss;
    bool v6 = false;
    qd_status st = resolve(app->cfg, &ss, &v6, err);
    if (st != QD_OK) return st;
    qd_http *h = calloc(1, sizeof *h);
    if (!h) return qd_fail(err, QD_NOMEM, "out of memory");
    h->app = app;
    st = qd_defer_start(QD_WAITERS, &h->waiters, err);
    if (st != QD_OK) {
        free(h);
        return st;
    }
    st = qd_conns_start(app->cfg, app->metrics, &h->guard, err);
    if (st != QD_OK) {
        qd_defer_free(h->waiters);
        free(h);
        return st;
    }
    raise_fd_limit(app->cfg);
    struct MHD_OptionItem tls_opts[QD_TLS_MHD_OPTIONS]; /* HTTPS when app->tls is set */
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME |
                     (v6 ? MHD_USE_IPv6 : 0) | qd_tls_mhd_options(app->tls, tls_opts);
    /* CONNECTION_MEMORY_LIMIT: an upload body arrives in pieces of about this pool's size; the
     * default 32 KiB meant a write(2) per 16 KiB. Pool pages are touched only as they are used.
     * The guard (conns.c) sees every connection start and end, and may refuse one at accept. */
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_SOCK_ADDR, 0, &ss},
        {MHD_OPTION_THREAD_POOL_SIZE, app->cfg->http_threads, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, app->cfg->idle_timeout, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, h},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)qd_conns_notify, h->guard},
        /* the guard enforces max_connections over all threads; libmicrohttpd's own limit is
         * split between its threads, so it gets room enough never to refuse first */
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)app->cfg->max_connections * app->cfg->http_threads,
         NULL},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)1 << 20, NULL},
        {MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)unescape, NULL},
        {MHD_OPTION_ARRAY, 0, tls_opts},
        {MHD_OPTION_END, 0, NULL},
    };
    h->d = MHD_start_daemon(flags, 0, qd_conns_accept, h->guard, on_request, h, MHD_OPTION_ARRAY,
                            opts, MHD_OPTION_END);
    if (!h->d) {
        qd_conns_stop(h->guard);
        qd_defer_free(h->waiters);
        free(h);
        return qd_fail(err, QD_IO, "cannot listen on %s:%d (address in use or not permitted)",
                       app->cfg->listen_host, app->cfg->listen_port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = info ? info->port : app->cfg->listen_port;
    *out = h;
    return QD_OK;
}

void qd_http_quiesce(qd_http *h)
{
    if (!h) return;
    /* The guard refuses every new connection from now on. Not MHD_quiesce_daemon: in 0.9.75,
     * with a thread pool on epoll, it deletes the listening socket from each worker's epoll set
     * while that worker may be deleting it too, and panics (abort) when it loses the race
     * ("Failed to remove listen FD from epoll set", seen at a SIGTERM in the tests). */
    qd_conns_refuse_all(h->guard);
}

void qd_http_stop(qd_http *h)
{
    if (!h) return;
    /* every suspended connection is resumed before the daemon stops (MHD's rule); requests that
     * come meanwhile on open connections run their deferred work on the HTTP thread */
    qd_defer_drain(h->waiters);
    MHD_stop_daemon(h->d);
    qd_conns_stop(h->guard);
    qd_defer_free(h->waiters);
    free(h);
}

void qd_http_conn_counts(qd_http *h, unsigned *open, unsigned *addresses)
{
    qd_conns_counts(h->guard, open, addresses);
}
