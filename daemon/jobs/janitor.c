/* janitor.c -- the housekeeping thread. Retention removes the output files of succeeded jobs
 * that ended more than job_retention ago or are older than the keep_outputs newest (the job's
 * row, report and outputs list stay; its files answer 410 from then on). The store records the
 * removal before the files go, so nothing is served half-removed; a crash in between leaves a
 * directory that the first pass after start-up removes. A server started --insecure on a
 * non-loopback address warns whenever it is open to all: at start without tokens, as soon as a
 * pass sees its last token gone, and every hour it stays so.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fsutil.h"
#include "janitor.h"
#include "log.h"
#include "tokens.h"

#define WARN_EVERY_S 3600

struct qd_janitor {
    qd_app *app;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    bool stopping, woken, insecure;
    int period_s;
};

/* Removes job id's output directory; logs a failure. */
static void remove_job_dir(qd_app *app, int64_t id)
{
    qd_err err;
    char *dir = qd_app_job_dir(app, id);
    if (dir && qd_rmtree(dir, &err) != QD_OK)
        qd_log(QD_LOG_WARN, "retention: cannot remove outputs", "error", err.message, NULL);
    free(dir);
}

size_t qd_janitor_sweep(qd_app *app)
{
    const qd_config *cfg = app->cfg;
    int64_t before = cfg->job_retention ? qd_now_ms() - cfg->job_retention * 1000 : 0;
    int64_t *ids = NULL;
    size_t n = 0, removed = 0;
    qd_err err;
    if (qd_store_jobs_expiring(app->store, before, cfg->keep_outputs, &ids, &n, &err) != QD_OK) {
        qd_log(QD_LOG_WARN, "retention pass failed", "error", err.message, NULL);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (qd_store_job_outputs_removed(app->store, ids[i], &err) != QD_OK) continue;
        remove_job_dir(app, ids[i]);
        char id[24];
        snprintf(id, sizeof id, "%lld", (long long)ids[i]);
        qd_log(QD_LOG_INFO, "retention: outputs removed", "job", id, NULL);
        removed++;
    }
    free(ids);
    return removed;
}

/* After a crash between recording a removal and removing the files. */
static void remove_leftovers(qd_app *app)
{
    int64_t *ids = NULL;
    size_t n = 0;
    qd_err err;
    if (qd_store_jobs_removed(app->store, &ids, &n, &err) != QD_OK) return;
    for (size_t i = 0; i < n; i++) remove_job_dir(app, ids[i]);
    free(ids);
}

static void warn_insecure(const qd_app *app)
{
    char port[16];
    snprintf(port, sizeof port, "%d", app->cfg->listen_port);
    qd_log(QD_LOG_WARN,
           "insecure: listening beyond loopback with no access tokens; anyone who reaches this "
           "address may do everything (create a token: quantd token create)",
           "host", app->cfg->listen_host, "port", port, NULL);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *janitor_main(void *arg)
{
    qd_janitor *j = arg;
    remove_leftovers(j->app);
    double last_warn = 0;
    bool was_open = false;
    pthread_mutex_lock(&j->mu);
    while (!j->stopping) {
        pthread_mutex_unlock(&j->mu);
        qd_janitor_sweep(j->app);
        /* open to all: when it starts so, when its last token goes, and every hour it stays so */
        bool any = true;
        qd_err err;
        bool open = j->insecure && qd_tokens_any(j->app->tokens, &any, &err) == QD_OK && !any;
        if (open && (!was_open || mono_s() - last_warn >= WARN_EVERY_S)) {
            warn_insecure(j->app);
            last_warn = mono_s();
        }
        was_open = open;
        pthread_mutex_lock(&j->mu);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += j->period_s;
        while (!j->stopping && !j->woken && pthread_cond_timedwait(&j->cv, &j->mu, &until) == 0) {
        }
        j->woken = false;
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

qd_status qd_janitor_start(qd_app *app, bool insecure, qd_janitor **out, qd_err *err)
{
    *out = NULL;
    qd_janitor *j = calloc(1, sizeof *j);
    if (!j) return qd_fail(err, QD_NOMEM, "out of memory");
    j->app = app;
    j->insecure = insecure;
    int64_t half = app->cfg->job_retention / 2;
    j->period_s = half > 0 && half < 60 ? (int)half : 60;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    bool ok = pthread_mutex_init(&j->mu, NULL) == 0 && pthread_cond_init(&j->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!ok || pthread_create(&j->thread, NULL, janitor_main, j) != 0) {
        free(j);
        return qd_fail(err, QD_NOMEM, "cannot start the housekeeping thread");
    }
    *out = j;
    return QD_OK;
}

void qd_janitor_wake(qd_janitor *j)
{
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    j->woken = true;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void qd_janitor_stop(qd_janitor *j)
{
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    j->stopping = true;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->thread, NULL);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}
