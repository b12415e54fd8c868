/* main.c -- quantd's entry point: settings, subcommands (serve, migrate, check-config, token),
 * the data-directory lock and the store (app_run.c starts the rest), systemd readiness, and
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
#include "app_run.h"
#include "auth.h"
#include "cmd_token.h"
#include "config.h"
#include "datalock.h"
#include "fsutil.h"
#include "http.h"
#include "log.h"
#include "tokens.h"
#include "notify.h"
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

/* The source roots for the start-up line: "A:B" ("none" when there is none). */
static const char *roots_text(const qd_config *cfg, char *buf, size_t len)
{
    size_t at = 0;
    snprintf(buf, len, "none");
    for (int i = 0; i < cfg->n_source_roots && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ":" : "", cfg->source_roots[i]);
    return buf;
}

static int serve(qd_app *app, int argc, char **argv, const sigset_t *set)
{
    qd_err err;
    qd_http *http = NULL;
    int port = 0;
    const char *what = "";
    if (qd_app_start(app, &http, &port, &what, &err) != QD_OK) return fail(what, &err);
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    if (app->cfg->port_file) write_port_file(app->cfg->port_file, port);
    char roots[2048];
    bool any = true;
    qd_err terr;
    bool known = qd_tokens_any(app->tokens, &any, &terr) == QD_OK;
    qd_log(QD_LOG_INFO, "listening", "host", app->cfg->listen_host, "port", p, "data_dir",
           app->cfg->data_dir, "tls", app->tls ? "on" : "off", "auth",
           known ? qd_auth_mode(app, any) : "tokens", "source_roots",
           roots_text(app->cfg, roots, sizeof roots), "version", QD_VERSION, NULL);
    qd_notify("READY=1");
    int sig = wait_for_stop(app->tls, argc, argv, set);
    qd_log(QD_LOG_INFO, "stopping", "signal", strsignal(sig), NULL);
    qd_notify("STOPPING=1");
    qd_app_stop(app, http);
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
    const qd_db_tuning store_tuning = {.busy_timeout_ms = (int)(cfg.store_busy_timeout * 1000)};
    if (qd_mkdir(cfg.data_dir, 0700, &err) != QD_OK ||
        qd_data_lock(cfg.data_dir, &lock_fd, &err) != QD_OK) {
        rc = fail("refusing to start", &err);
    } else if (qd_store_open_tuned(cfg.db_path, &store_tuning, &app.store, &err) != QD_OK) {
        rc = fail("cannot open the store", &err);
    } else if (cmd == QD_CMD_MIGRATE) {
        printf("%s: schema version %d\n", cfg.db_path, qd_store_schema_version(app.store));
    } else {
        rc = serve(&app, argc, argv, &set);
    }
    qd_app_close(&app);
    qd_config_free(&cfg);
    if (lock_fd >= 0) close(lock_fd);
    return rc;
}
