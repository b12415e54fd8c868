/* app_run.c -- the start-up order of a serving daemon (TLS, tokens and the exposure rule,
 * metrics, statistics, data directory, workers (after their recovery of interrupted jobs), the
 * start-up sweep of the data directory, housekeeping, HTTP), its stop order and the
 * release of what it holds. main.c adds settings, the data-directory lock and signals.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "app_run.h"

#include "inputs.h"
#include "janitor.h"
#include "receiving.h"
#include "jobs.h"
#include "log.h"
#include "router.h"
#include "tls.h"
#include "tokens.h"

/* Binding a non-loopback address without tokens starts only with --insecure (*insecure: then
 * the housekeeping thread warns whenever it has no token). */
static qd_status exposure(qd_app *app, bool *insecure, qd_err *err)
{
    const qd_config *cfg = app->cfg;
    bool loopback = false, any = false;
    qd_status st = qd_http_loopback(cfg, &loopback, err);
    if (st == QD_OK) st = qd_tokens_any(app->tokens, &any, err);
    if (st != QD_OK) return st;
    app->open_without_tokens = loopback || cfg->insecure;
    app->open_now = app->open_without_tokens && !any;
    *insecure = !loopback && cfg->insecure; /* warned whenever it has no token */
    if (!loopback && !any && !cfg->insecure)
        return qd_fail(err, QD_INVALID,
                       "%s is not a loopback address and there are no access tokens: create one "
                       "first (quantd token create --role operator --name NAME), or give "
                       "--insecure to let anyone who reaches it do everything",
                       cfg->listen_host);
    if (!loopback && !cfg->tls_cert)
        qd_log(QD_LOG_WARN,
               "plain HTTP beyond loopback: tokens and data cross the network in clear text "
               "(give --tls-cert and --tls-key, or put a TLS proxy in front)",
               "host", cfg->listen_host, NULL);
    return QD_OK;
}

/* The metrics label their series with the route table's names and methods. */
static qd_metrics *route_metrics(void)
{
    static const char *names[64], *methods[64]; /* the metrics keep them */
    size_t n = qd_n_routes < 64 ? qd_n_routes : 64;
    for (size_t i = 0; i < n; i++) {
        names[i] = qd_routes[i].name;
        methods[i] = qd_routes[i].method;
    }
    return qd_metrics_new(names, methods, n);
}

/* Everything before the threads: no part here needs stopping, only qd_app_close(). */
static qd_status open_parts(qd_app *app, bool *insecure, const char **what, qd_err *err)
{
    const qd_config *cfg = app->cfg;
    if (cfg->tls_cert) {
        *what = "cannot set up tls";
        qd_status st =
            qd_tls_open(cfg->tls_cert, cfg->tls_key, cfg->tls_priorities, &app->tls, err);
        if (st != QD_OK) return st;
        qd_tls_log(app->tls, "tls certificate loaded");
    }
    *what = "cannot open the tokens";
    const qd_db_tuning store_tuning = {.busy_timeout_ms = (int)(cfg->store_busy_timeout * 1000)};
    qd_status st = qd_tokens_open_tuned(cfg->db_path, &store_tuning, &app->tokens, err);
    if (st != QD_OK) return st;
    *what = "refusing to start";
    if ((st = exposure(app, insecure, err)) != QD_OK) return st;
    *what = "cannot set up metrics";
    if (!(app->metrics = route_metrics())) return qd_fail(err, QD_NOMEM, "out of memory");
    *what = "cannot open the statistics store";
    qd_db_tuning tuning = {.busy_timeout_ms = (int)(cfg->stats_busy_timeout * 1000),
                           .cache_kib = cfg->stats_page_cache / 1024};
    if ((st = qd_stats_open(cfg->db_path, app->metrics, &tuning, &app->stats, err)) != QD_OK)
        return st;
    qd_stats_configure(app->stats, cfg->stats_quota, cfg->idempotency_window);
    qd_stats_configure_log(app->stats, cfg->stats_fold_interval * 1000, cfg->stats_fold_bytes);
    *what = "data directory";
    if ((st = qd_app_dirs(app, err)) != QD_OK) return st;
    return qd_inputs_new(&app->inputs, err);
}

qd_status qd_app_start(qd_app *app, qd_http **http, int *port, const char **what, qd_err *err)
{
    bool insecure = false;
    *http = NULL;
    qd_status st = open_parts(app, &insecure, what, err);
    if (st != QD_OK) return st;
    *what = "job workers";
    if ((st = qd_jobs_start(app, &app->jobs, err)) != QD_OK) return st;
    qd_janitor_startup_sweep(app); /* after recovery, before any request: crash leftovers go */
    *what = "housekeeping";
    if ((st = qd_janitor_start(app, insecure, &app->janitor, err)) != QD_OK) {
        qd_jobs_stop(app->jobs);
        app->jobs = NULL;
        return st;
    }
    *what = "checkpoint jobs";
    if ((st = qd_receiving_start(app, &app->receiving, err)) != QD_OK) {
        qd_janitor_stop(app->janitor);
        qd_jobs_stop(app->jobs);
        app->janitor = NULL;
        app->jobs = NULL;
        return st;
    }
    *what = "http";
    if ((st = qd_http_start(app, http, port, err)) != QD_OK) {
        qd_receiving_stop(app->receiving);
        app->receiving = NULL;
        qd_janitor_stop(app->janitor);
        qd_jobs_stop(app->jobs);
        app->janitor = NULL;
        app->jobs = NULL;
        return st;
    }
    return QD_OK;
}

void qd_app_stop(qd_app *app, qd_http *http)
{
    qd_http_quiesce(http);
    qd_jobs_stop(app->jobs); /* running jobs are interrupted and queued again */
    qd_http_stop(http);
    qd_receiving_stop(app->receiving);
    qd_janitor_stop(app->janitor);
    app->receiving = NULL;
    app->jobs = NULL;
    app->janitor = NULL;
}

void qd_app_close(qd_app *app)
{
    qd_stats_close(app->stats); /* HTTP and jobs are stopped: the last queued posts commit */
    qd_tokens_close(app->tokens);
    qd_tls_free(app->tls); /* no handshake can run any more */
    qd_store_close(app->store);
    qd_inputs_free(app->inputs);
    app->inputs = NULL;
    qd_metrics_free(app->metrics);
    qd_app_dirs_free(app);
    app->stats = NULL;
    app->tokens = NULL;
    app->tls = NULL;
    app->store = NULL;
    app->metrics = NULL;
}
