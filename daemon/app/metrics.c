/* metrics.c -- counters and a latency histogram per route (a method and a pattern) and per
 * method of the requests that matched no route, updated with relaxed atomics and rendered in
 * the Prometheus text exposition format.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "store.h"

/* Status codes the daemon sends, each with its own counter; anything else counts as "other". */
static const unsigned statuses[] = {200, 201, 202, 204, 206, 304, 400, 401, 403, 404, 405,
                                    409, 410, 413, 415, 416, 422, 429, 500, 503, 507, 0};
#define N_STATUS (sizeof statuses / sizeof statuses[0]) /* last: other (0) */
static const double bounds[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define N_BUCKETS (sizeof bounds / sizeof bounds[0])

typedef struct route_counters {
    atomic_uint_fast64_t by_status[N_STATUS];
    atomic_uint_fast64_t bucket[N_BUCKETS]; /* non-cumulative; rendered cumulative */
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t sum_us;
} route_counters;

/* The methods unmatched requests are counted by (RFC 9110's and PATCH); any other is "other"
 * (last), so a client cannot add series. */
static const char *const unmatched_methods[] = {"GET",     "HEAD",    "POST",  "PUT",   "DELETE",
                                                "CONNECT", "OPTIONS", "TRACE", "PATCH", "other"};
#define N_UNMATCHED (sizeof unmatched_methods / sizeof unmatched_methods[0])

struct qd_metrics {
    const char *const *names, *const *methods;
    size_t n_routes;
    route_counters *routes; /* n_routes + N_UNMATCHED: then unmatched requests by method */
    atomic_uint_fast64_t bytes_quantized, tensors_quantized, upload_bytes;
    atomic_uint_fast64_t stats_posts, stats_activations, commits, commit_posts, stats_replays;
    atomic_uint_fast64_t commit_bucket[N_BUCKETS]; /* non-cumulative */
    atomic_uint_fast64_t commit_sum_us;
    atomic_uint_fast64_t connections_open; /* a gauge: the connection guard's count */
    atomic_uint_fast64_t limit_hits[];     /* by limit_names */
};

/* The limits that refuse requests or close connections (SECURITY.md), by configuration key. */
static const char *const limit_names[] = {
    "header_timeout", "body_min_rate",   "max_connections", "max_connections_per_ip",
    "max_json_body",  "max_stats_body",  "max_upload",      "max_body_memory",
    "min_free_disk",  "max_queued_jobs", "stats_quota",     "retention"};
#define N_LIMITS (sizeof limit_names / sizeof limit_names[0])

qd_metrics *qd_metrics_new(const char *const *route_names, const char *const *route_methods,
                           size_t n_routes)
{
    qd_metrics *m = calloc(1, sizeof *m + N_LIMITS * sizeof m->limit_hits[0]);
    if (!m) return NULL;
    m->routes = calloc(n_routes + N_UNMATCHED, sizeof *m->routes);
    if (!m->routes) {
        free(m);
        return NULL;
    }
    m->names = route_names;
    m->methods = route_methods;
    m->n_routes = n_routes;
    return m;
}

void qd_metrics_free(qd_metrics *m)
{
    if (!m) return;
    free(m->routes);
    free(m);
}

static void add(atomic_uint_fast64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static uint64_t get(atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* The counters of a route, or of an unmatched request's method. */
static route_counters *row_of(qd_metrics *m, size_t route, const char *method)
{
    if (route < m->n_routes) return &m->routes[route];
    size_t k = 0;
    while (k < N_UNMATCHED - 1 && !(method && strcmp(method, unmatched_methods[k]) == 0)) k++;
    return &m->routes[m->n_routes + k];
}

void qd_metrics_request(qd_metrics *m, size_t route, const char *method, unsigned status,
                        double seconds)
{
    route_counters *rc = row_of(m, route, method);
    size_t s = 0;
    while (s < N_STATUS - 1 && statuses[s] != status) s++;
    add(&rc->by_status[s], 1);
    size_t b = 0;
    while (b < N_BUCKETS && seconds > bounds[b]) b++;
    if (b < N_BUCKETS) add(&rc->bucket[b], 1);
    add(&rc->count, 1);
    add(&rc->sum_us, (uint64_t)(seconds * 1e6));
}

void qd_metrics_quantized(qd_metrics *m, uint64_t bytes, uint64_t tensors)
{
    add(&m->bytes_quantized, bytes);
    add(&m->tensors_quantized, tensors);
}

void qd_metrics_upload(qd_metrics *m, uint64_t bytes)
{
    add(&m->upload_bytes, bytes);
}

void qd_metrics_connections_open(qd_metrics *m, unsigned open)
{
    atomic_store_explicit(&m->connections_open, open, memory_order_relaxed);
}

void qd_metrics_stats_post(qd_metrics *m, uint64_t activations)
{
    add(&m->stats_posts, 1);
    add(&m->stats_activations, activations);
}

void qd_metrics_stats_replay(qd_metrics *m)
{
    add(&m->stats_replays, 1);
}

void qd_metrics_stats_commit(qd_metrics *m, uint64_t posts, double seconds)
{
    size_t b = 0;
    while (b < N_BUCKETS && seconds > bounds[b]) b++;
    if (b < N_BUCKETS) add(&m->commit_bucket[b], 1);
    add(&m->commits, 1);
    add(&m->commit_posts, posts);
    add(&m->commit_sum_us, (uint64_t)(seconds * 1e6));
}

void qd_metrics_limit(qd_metrics *m, const char *limit, uint64_t n)
{
    for (size_t i = 0; m && i < N_LIMITS; i++)
        if (strcmp(limit, limit_names[i]) == 0) add(&m->limit_hits[i], n);
}

/* ---- rendering --------------------------------------------------------------------------------
 */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool failed;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !b->failed; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) break;
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n) * 2;
        char *q = realloc(b->p, cap);
        if (!q) break;
        b->p = q;
        b->cap = cap;
    }
    b->failed = true;
}

/* The labels of counter row i: route="..",method=".." (a route's, or unmatched by method). */
static void row_labels(const qd_metrics *m, size_t i, char *buf, size_t len)
{
    bool route = i < m->n_routes;
    snprintf(buf, len, "route=\"%s\",method=\"%s\"", route ? m->names[i] : "unmatched",
             route ? m->methods[i] : unmatched_methods[i - m->n_routes]);
}

static void render_counts(qd_metrics *m, sbuf *b)
{
    char labels[320], status[16];
    for (size_t i = 0; i < m->n_routes + N_UNMATCHED; i++)
        for (size_t s = 0; s < N_STATUS; s++) {
            uint64_t v = get(&m->routes[i].by_status[s]);
            if (!v) continue;
            row_labels(m, i, labels, sizeof labels);
            if (statuses[s])
                snprintf(status, sizeof status, "%u", statuses[s]);
            else
                snprintf(status, sizeof status, "other");
            put(b, "quantd_http_requests_total{%s,status=\"%s\"} %llu\n", labels, status,
                (unsigned long long)v);
        }
}

static void render_latency(qd_metrics *m, sbuf *b)
{
    char labels[320];
    for (size_t i = 0; i < m->n_routes + N_UNMATCHED; i++) {
        route_counters *rc = &m->routes[i];
        uint64_t count = get(&rc->count), cum = 0;
        if (!count) continue;
        row_labels(m, i, labels, sizeof labels);
        for (size_t k = 0; k < N_BUCKETS; k++) {
            cum += get(&rc->bucket[k]);
            put(b, "quantd_http_request_duration_seconds_bucket{%s,le=\"%g\"} %llu\n", labels,
                bounds[k], (unsigned long long)cum);
        }
        put(b, "quantd_http_request_duration_seconds_bucket{%s,le=\"+Inf\"} %llu\n", labels,
            (unsigned long long)count);
        put(b, "quantd_http_request_duration_seconds_sum{%s} %.6f\n", labels,
            (double)get(&rc->sum_us) * 1e-6);
        put(b, "quantd_http_request_duration_seconds_count{%s} %llu\n", labels,
            (unsigned long long)count);
    }
}

static void render_requests(qd_metrics *m, sbuf *b)
{
    put(b, "# HELP quantd_http_requests_total HTTP requests by route (method and pattern; "
           "unmatched: by method) and status.\n"
           "# TYPE quantd_http_requests_total counter\n");
    render_counts(m, b);
    put(b, "# HELP quantd_http_request_duration_seconds Request latency by route (method and "
           "pattern; unmatched: by method).\n"
           "# TYPE quantd_http_request_duration_seconds histogram\n");
    render_latency(m, b);
}

static void render_stats(qd_metrics *m, sbuf *b)
{
    put(b,
        "# HELP quantd_stats_posts_total Statistics posts stored.\n"
        "# TYPE quantd_stats_posts_total counter\nquantd_stats_posts_total %llu\n",
        (unsigned long long)get(&m->stats_posts));
    put(b,
        "# HELP quantd_stats_activations_total Activations updated by stored posts.\n"
        "# TYPE quantd_stats_activations_total counter\nquantd_stats_activations_total %llu\n",
        (unsigned long long)get(&m->stats_activations));
    put(b,
        "# HELP quantd_stats_replays_total Posts answered as replays of an earlier post with "
        "their Idempotency-Key (nothing stored).\n"
        "# TYPE quantd_stats_replays_total counter\nquantd_stats_replays_total %llu\n",
        (unsigned long long)get(&m->stats_replays));
    put(b,
        "# HELP quantd_stats_commit_posts_total Posts carried by the stats writer's commits.\n"
        "# TYPE quantd_stats_commit_posts_total counter\nquantd_stats_commit_posts_total %llu\n",
        (unsigned long long)get(&m->commit_posts));
    put(b, "# HELP quantd_stats_commit_seconds Latency of the stats writer's group commits.\n"
           "# TYPE quantd_stats_commit_seconds histogram\n");
    uint64_t cum = 0;
    for (size_t k = 0; k < N_BUCKETS; k++) {
        cum += get(&m->commit_bucket[k]);
        put(b, "quantd_stats_commit_seconds_bucket{le=\"%g\"} %llu\n", bounds[k],
            (unsigned long long)cum);
    }
    put(b, "quantd_stats_commit_seconds_bucket{le=\"+Inf\"} %llu\n",
        (unsigned long long)get(&m->commits));
    put(b, "quantd_stats_commit_seconds_sum %.6f\nquantd_stats_commit_seconds_count %llu\n",
        (double)get(&m->commit_sum_us) * 1e-6, (unsigned long long)get(&m->commits));
}

char *qd_metrics_render(qd_metrics *m, const int64_t *job_counts)
{
    sbuf b = {.p = malloc(8192), .cap = 8192};
    if (!b.p) return NULL;
    b.p[0] = '\0';
    render_requests(m, &b);
    put(&b, "# HELP quantd_jobs Jobs by state.\n# TYPE quantd_jobs gauge\n");
    for (int s = 0; s < QD_JOB_STATE_COUNT; s++)
        put(&b, "quantd_jobs{state=\"%s\"} %lld\n", qd_job_state_name((qd_job_state)s),
            (long long)job_counts[s]);
    put(&b,
        "# HELP quantd_queue_depth Jobs waiting for a worker.\n# TYPE quantd_queue_depth "
        "gauge\nquantd_queue_depth %lld\n",
        (long long)job_counts[QD_JOB_QUEUED]);
    put(&b,
        "# HELP quantd_quantized_bytes_total Input bytes of finished jobs.\n"
        "# TYPE quantd_quantized_bytes_total counter\nquantd_quantized_bytes_total %llu\n",
        (unsigned long long)get(&m->bytes_quantized));
    put(&b,
        "# HELP quantd_quantized_tensors_total Tensors quantized by finished jobs.\n"
        "# TYPE quantd_quantized_tensors_total counter\nquantd_quantized_tensors_total %llu\n",
        (unsigned long long)get(&m->tensors_quantized));
    put(&b,
        "# HELP quantd_upload_bytes_total Bytes received in uploads.\n"
        "# TYPE quantd_upload_bytes_total counter\nquantd_upload_bytes_total %llu\n",
        (unsigned long long)get(&m->upload_bytes));
    render_stats(m, &b);
    put(&b,
        "# HELP quantd_connections_open Client connections open now (the scrape's own "
        "included).\n# TYPE quantd_connections_open gauge\nquantd_connections_open %llu\n",
        (unsigned long long)get(&m->connections_open));
    put(&b, "# HELP quantd_limit_hits_total Requests refused and connections closed, by the "
            "limit (configuration key) they hit.\n# TYPE quantd_limit_hits_total counter\n");
    for (size_t i = 0; i < N_LIMITS; i++)
        put(&b, "quantd_limit_hits_total{limit=\"%s\"} %llu\n", limit_names[i],
            (unsigned long long)get(&m->limit_hits[i]));
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
