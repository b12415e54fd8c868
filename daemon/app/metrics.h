/* metrics.h -- the counters and histograms behind GET /metrics (Prometheus text format 0.0.4):
 * requests by route, method and status, request latency by route and method, bytes and tensors
 * quantized, upload bytes, statistics posts, activations updated, replays of posts by
 * Idempotency-Key, the stats writer's commit latency and the connections open (a gauge the
 * connection guard sets). Job states and queue depth are read from the store at scrape time.
 * Lock-free updates. SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_METRICS_H
#define QD_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct qd_metrics qd_metrics;

/* route_names, route_methods: the router's route names and methods (index = route id),
 * n_routes of each (borrowed: they must outlive the metrics). A route is a method and a
 * pattern, so each route's series carry both labels and no two routes share a series. */
qd_metrics *qd_metrics_new(const char *const *route_names, const char *const *route_methods,
                           size_t n_routes);
void qd_metrics_free(qd_metrics *m);

/* route: a route id (the request counts with the route's method: a HEAD served by a GET route
 * counts as GET), or n_routes for requests that matched none, counted by their method (one of
 * the methods of RFC 9110 and PATCH, else "other"; method may be NULL). */
void qd_metrics_request(qd_metrics *m, size_t route, const char *method, unsigned status,
                        double seconds);
void qd_metrics_quantized(qd_metrics *m, uint64_t bytes, uint64_t tensors);
void qd_metrics_upload(qd_metrics *m, uint64_t bytes);
/* The connections open now (quantd_connections_open), set by the connection guard whenever its
 * count changes. */
void qd_metrics_connections_open(qd_metrics *m, unsigned open);
/* A stats post stored (its activations); a group commit of the stats writer (posts in it, and
 * how long the transaction took). */
void qd_metrics_stats_post(qd_metrics *m, uint64_t activations);
void qd_metrics_stats_commit(qd_metrics *m, uint64_t posts, double seconds);
/* A stats post answered as a replay of an earlier one with its Idempotency-Key. */
void qd_metrics_stats_replay(qd_metrics *m);

/* n requests refused or connections closed by `limit` (its configuration key; unknown keys are
 * not counted). */
void qd_metrics_limit(qd_metrics *m, const char *limit, uint64_t n);

/* Appends the exposition to a malloc'd string; job counts by state (QD_JOB_STATE_COUNT of them,
 * in qd_job_state order) come from the caller. NULL on allocation failure. */
char *qd_metrics_render(qd_metrics *m, const int64_t *job_counts);

#endif /* QD_METRICS_H */
