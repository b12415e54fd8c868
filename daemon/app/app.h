/* app.h -- the daemon's shared state: settings, store, job runner, metrics and the data
 * directory's layout. One qd_app per process, built by main.c and handed to the HTTP server and
 * the workers; everything in it is safe to use from any thread.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_APP_H
#define QD_APP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "metrics.h"
#include "stats.h"
#include "store.h"

typedef struct qd_jobs qd_jobs;
typedef struct qd_tokens qd_tokens;
typedef struct qd_janitor qd_janitor;
typedef struct qd_tls qd_tls;
typedef struct qd_inputs qd_inputs;
typedef struct qd_receiving qd_receiving;

typedef struct qd_app {
    const qd_config *cfg;
    qd_store *store;
    qd_jobs *jobs;
    qd_metrics *metrics;
    qd_stats *stats;         /* calibration statistics: their own connections and writer thread */
    qd_tokens *tokens;       /* access tokens: their own connection */
    qd_janitor *janitor;     /* housekeeping: retention, the insecure warning */
    qd_inputs *inputs;       /* checkpoint jobs' files while they arrive (inputs.h) */
    qd_receiving *receiving; /* their input_timeout watch (receiving.h) */
    /* no token needed while none exists: the server listens on loopback only, or --insecure */
    bool open_without_tokens;
    /* open now: open_without_tokens and no token seen yet; the first token ends it (logged) */
    _Atomic bool open_now;
    _Atomic uint64_t body_bytes; /* request bodies held in memory now (req_limits.c) */
    char *uploads_dir; /* DATA/uploads: validated shards waiting for (or used by) their job */
    char *jobs_dir;    /* DATA/jobs/ID/output: a job's published outputs */
    char *tmp_dir;     /* DATA/tmp: uploads while they stream in */
    qd_tls *tls;       /* HTTPS credentials (tls.h), or NULL: plain HTTP */
} qd_app;

/* Creates the data directory layout (0700 directories) and fills the paths; removes leftovers
 * of uploads that never became jobs. */
qd_status qd_app_dirs(qd_app *app, qd_err *err);
void qd_app_dirs_free(qd_app *app);
/* DATA/jobs/ID (malloc'd). */
char *qd_app_job_dir(const qd_app *app, int64_t id);

#endif /* QD_APP_H */
