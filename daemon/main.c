/* main.c -- quantd's entry point: settings, subcommands (serve, migrate, check-config, token),
 * the start-up order (store, metrics, statistics, tokens and the exposure rule, data dir,
 * workers, housekeeping, HTTP), systemd readiness, and
 * signals: SIGTERM and SIGINT stop gracefully (no new connections, running jobs requeued,
 * database closed, exit 0), SIGHUP reloads the log level from the configuration and re-reads
 * the TLS certificate and key. Signals are taken with sigwait in the main thread; every other
 * thread has them blocked.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app.h"
#include "cmd_token.h"
#include "config.h"
#include "datalock.h"
#include "fsutil.h"
#include "http.h"
#include "janitor.h"
#include "jobs.h"
#include "log.h"
#include "notify.h"
#include "router.h"
#include "tokens.h"
#include "tls.h"

static int fail(const char *what, const qd_err *err)
{
    qd_log(QD_LOG_ERROR, what, "error", err->message, NULL);
    return 1;
}

static void write_port_file(const char *path, int port)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, path) != 0)
        qd_log(QD_LOG_WARN, "cannot write the port file", "path", path, NULL);
}

/* SIGHUP: what can change without a restart (the log level). */
static void reload(int argc, char **argv)
{
    qd_config cfg;
    qd_command cmd;
    bool exit_now;
    char msg[512];
    if (qd_config_load(&cfg, argc, argv, &cmd, &exit_now, stdout, msg, sizeof msg)) {
        qd_log_set_level(cfg.log_level);
        qd_log(QD_LOG_INFO, "configuration reloaded", "log_level", qd_log_level_name(cfg.log_level),
               NULL);
        qd_config_free(&cfg);
    } else {
        qd_log(QD_LOG_WARN, "configuration not reloaded", "error", msg, NULL);
    }
}

/* SIGHUP with HTTPS: the certificate and key files again; on failure the old pair serves on. */
static void reload_tls(qd_tls *tls)
{
    qd_err err;
    if (qd_tls_reload(tls, &err) == QD_OK)
        qd_tls_log(tls, "tls certificate reloaded");
    else
        qd_log(QD_LOG_WARN, "tls certificate not reloaded (the previous one stays in use)", "error",
               err.message, NULL);
}

static int wait_for_stop(qd_tls *tls, int argc, char **argv, const sigset_t *set)
{
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) != 0) continue;
        if (sig == SIGHUP) {
            qd_notify("RELOADING=1");
            reload(argc, argv);
            if (tls) reload_tls(tls);
            qd_notify("READY=1");
            continue;
        }
        return sig;
    }
}

/* Who may use the server: with no token at all it is open, which is fine on loopback only; a
 * non-loopback address without tokens starts only with --insecure (*insecure: then the
 * housekeeping thread warns whenever it has no token). */
static qd_status exposure(qd_app *app, bool *insecure, qd_err *err)
{
    const qd_config *cfg = app->cfg;
    bool loopback = false, any = false;
    qd_status st = qd_http_loopback(cfg, &loopback, err);
    if (st == QD_OK) st = qd_tokens_any(app->tokens, &any, err);
    if (st != QD_OK) return st;
    app->open_without_tokens = loopback || cfg->insecure;
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

static int serve(qd_app *app, int argc, char **argv, const sigset_t *set)
{
    qd_err err;
    const qd_config *cfg = app->cfg;
    if (cfg->tls_cert) {
        if (qd_tls_open(cfg->tls_cert, cfg->tls_key, cfg->tls_priorities, &app->tls, &err) != QD_OK)
            return fail("cannot set up tls", &err);
        qd_tls_log(app->tls, "tls certificate loaded");
    }
    bool insecure = false;
    if (qd_tokens_open(app->cfg->db_path, &app->tokens, &err) != QD_OK)
        return fail("cannot open the tokens", &err);
    if (exposure(app, &insecure, &err) != QD_OK) return fail("refusing to start", &err);
    static const char *names[64], *methods[64]; /* the metrics keep them */
    size_t n = qd_n_routes < 64 ? qd_n_routes : 64;
    for (size_t i = 0; i < n; i++) {
        names[i] = qd_routes[i].name;
        methods[i] = qd_routes[i].method;
    }
    app->metrics = qd_metrics_new(names, methods, n);
    if (!app->metrics) return fail("out of memory", &err);
    if (qd_stats_open(app->cfg->db_path, app->metrics, &app->stats, &err) != QD_OK)
        return fail("cannot open the statistics store", &err);
    qd_stats_configure(app->stats, app->cfg->stats_quota, app->cfg->idempotency_window);
    if (qd_app_dirs(app, &err) != QD_OK) return fail("data directory", &err);
    if (qd_jobs_start(app, &app->jobs, &err) != QD_OK) return fail("job workers", &err);
    if (qd_janitor_start(app, insecure, &app->janitor, &err) != QD_OK) {
        qd_jobs_stop(app->jobs);
        return fail("housekeeping", &err);
    }
    qd_http *http = NULL;
    int port = 0;
    if (qd_http_start(app, &http, &port, &err) != QD_OK) {
        qd_janitor_stop(app->janitor);
        qd_jobs_stop(app->jobs);
        return fail("http", &err);
    }
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    if (app->cfg->port_file) write_port_file(app->cfg->port_file, port);
    qd_log(QD_LOG_INFO, "listening", "host", app->cfg->listen_host, "port", p, "data_dir",
           app->cfg->data_dir, "tls", app->tls ? "on" : "off", "version", QD_VERSION, NULL);
    qd_notify("READY=1");
    int sig = wait_for_stop(app->tls, argc, argv, set);
    qd_log(QD_LOG_INFO, "stopping", "signal", strsignal(sig), NULL);
    qd_notify("STOPPING=1");
    qd_http_quiesce(http);
    qd_jobs_stop(app->jobs); /* running jobs are interrupted and queued again */
    qd_http_stop(http);
    qd_janitor_stop(app->janitor);
    qd_log(QD_LOG_INFO, "stopped", NULL);
    return 0;
}

int main(int argc, char **argv)
{
    if (qd_cmd_is_token(argc, argv)) return qd_cmd_token(argc, argv);
    qd_config cfg;
    qd_command cmd;
    bool exit_now = false;
    char msg[512];
    if (!qd_config_load(&cfg, argc, argv, &cmd, &exit_now, stdout, msg, sizeof msg)) {
        fprintf(stderr, "quantd: %s\n", msg);
        return 2;
    }
    int rc = 0;
    qd_log_set_level(cfg.log_level);
    if (exit_now || cmd == QD_CMD_CHECK_CONFIG) {
        if (cmd == QD_CMD_CHECK_CONFIG && !exit_now) qd_config_print(&cfg, stdout);
        qd_config_free(&cfg);
        return 0;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread exists */
    signal(SIGPIPE, SIG_IGN);
    qd_app app = {.cfg = &cfg};
    qd_err err;
    int lock_fd = -1; /* held until exit */
    if (qd_mkdir(cfg.data_dir, 0700, &err) != QD_OK ||
        qd_data_lock(cfg.data_dir, &lock_fd, &err) != QD_OK) {
        rc = fail("refusing to start", &err);
    } else if (qd_store_open(cfg.db_path, &app.store, &err) != QD_OK) {
        rc = fail("cannot open the store", &err);
    } else if (cmd == QD_CMD_MIGRATE) {
        printf("%s: schema version %d\n", cfg.db_path, qd_store_schema_version(app.store));
    } else {
        rc = serve(&app, argc, argv, &set);
    }
    qd_stats_close(app.stats); /* HTTP and jobs are stopped: the last queued posts commit */
    qd_tokens_close(app.tokens);
    qd_tls_free(app.tls); /* no handshake can run any more */
    qd_store_close(app.store);
    qd_metrics_free(app.metrics);
    qd_app_dirs_free(&app);
    qd_config_free(&cfg);
    if (lock_fd >= 0) close(lock_fd);
    return rc;
}
