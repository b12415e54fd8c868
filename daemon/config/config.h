/* config.h -- quantd's settings: embedded defaults < INI file (inih) < environment (QUANTD_*) <
 * command-line flags, validated once; the subcommand to run; --help and --version text.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_CONFIG_H
#define QD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"

#define QD_MAX_SOURCE_ROOTS 16
#define QD_DEFAULT_CONFIG   "/etc/quantd/quantd.conf"

typedef enum qd_command {
    QD_CMD_SERVE = 0,   /* quantd [flags]: run the daemon */
    QD_CMD_MIGRATE,     /* quantd migrate: apply migrations and exit */
    QD_CMD_CHECK_CONFIG /* quantd check-config: validate and print the effective settings */
} qd_command;

/* Who may read GET /metrics. */
typedef enum qd_metrics_auth {
    QD_METRICS_OPEN = 0, /* anyone (the default: a scraper needs no token) */
    QD_METRICS_TOKEN = 1 /* any valid token, whatever its role */
} qd_metrics_auth;

typedef struct qd_config {
    char *config_path;      /* the INI file read, or NULL when none */
    char *listen_host;      /* "127.0.0.1" */
    int listen_port;        /* 8080; 0 = any free port (tests) */
    bool insecure;          /* a non-loopback listen without tokens may start (warned hourly) */
    int metrics_auth;       /* qd_metrics_auth, default open */
    char *tls_cert;         /* PEM certificate chain (HTTPS when set; with tls_key), or NULL */
    char *tls_key;          /* PEM private key, or NULL */
    char *tls_priorities;   /* GnuTLS priority string */
    char *data_dir;         /* "./var" */
    char *db_path;          /* default: DATA_DIR/quantd.db */
    int workers;            /* concurrent jobs, default 1 */
    int quant_threads;      /* libquant threads per job, default 0 = online CPUs / workers */
    int http_threads;       /* libmicrohttpd thread pool, default 4 */
    int64_t max_upload;     /* bytes, default 16 GiB */
    int64_t max_json_body;  /* bytes, default 4 MiB (rule sets, job requests) */
    int64_t max_stats_body; /* bytes, default 64 MiB (statistics posts, JSON or safetensors) */
    int idle_timeout;       /* seconds a connection may stay idle, default 60 */
    /* limits that hold under abuse (SECURITY.md) */
    int max_connections;         /* open connections, default 1000 */
    int max_conns_per_ip;        /* open connections from one address, default 128; 0 = none */
    int header_timeout;          /* seconds for a request's line and headers, default 10 */
    int body_timeout;            /* seconds of grace for a body before body_min_rate, default 20 */
    int64_t body_min_rate;       /* bytes/s a body must average after the grace, default 1K */
    int64_t max_body_memory;     /* bytes of request bodies held in memory at once, default 256M */
    int64_t min_free_disk;       /* bytes the data directory keeps free, default 1G */
    int max_queued_jobs;         /* queued jobs before 429, default 100; 0 = no cap */
    int64_t stats_quota;         /* bytes of statistics sums per model, default 1G */
    int64_t idempotency_window;  /* seconds an Idempotency-Key is remembered, default 1 day */
    int64_t stats_fold_interval; /* seconds before the statistics' delta log is folded, default
                                    1; 0 = no log (every group rewrites its sums) */
    int64_t stats_fold_bytes;    /* bytes of delta log that trigger a fold, default 64M */
    int64_t stats_busy_timeout;  /* seconds the statistics' SQLite connections wait for a lock,
                                    default 5 */
    int64_t store_busy_timeout;  /* seconds the job store's and the tokens' SQLite connections
                                    wait for a lock, default 5 */
    int64_t stats_page_cache;    /* bytes of the statistics writer's SQLite page cache, default
                                    16M */
    int max_attempts;      /* runs of a job interrupted by a crash before it fails, default 2 */
    int64_t job_retention; /* seconds a finished job keeps its outputs, default 7 days; 0 =
                              forever */
    int keep_outputs;      /* finished jobs that keep outputs, newest first; 0 = no cap */
    int64_t input_timeout; /* seconds a checkpoint job may wait for its files, default 1 h */
    int max_input_files;   /* files one checkpoint job may list, default 1000 */
    int max_input_name;    /* bytes of one of its file names, default 255 */
    char *source_roots[QD_MAX_SOURCE_ROOTS]; /* absolute, resolved (realpath) */
    int n_source_roots;
    qd_log_level log_level; /* default info */
    char *port_file;        /* write the bound port here once listening (tests), or NULL */
} qd_config;

/* Parses argv into cfg over the defaults, the config file (--config FILE, $QUANTD_CONFIG, or
 * QD_DEFAULT_CONFIG when it exists) and the environment, in that precedence. Prints --help /
 * --version to out and sets *exit_now (status 0). On a bad value writes a one-line message
 * naming the source (file:line, variable or flag) to msg and returns false. */
bool qd_config_load(qd_config *cfg, int argc, char **argv, qd_command *cmd, bool *exit_now,
                    FILE *out, char *msg, size_t msglen);
/* Writes the effective settings in INI form (check-config). */
void qd_config_print(const qd_config *cfg, FILE *out);
void qd_config_free(qd_config *cfg);
/* A byte count as the settings write it: "16G", "1536". */
void qd_config_size_text(int64_t bytes, char *buf, size_t len);
/* How a command-line argument of the settings consumes argv (for commands that take options of
 * their own beside the settings'): 1 when it is a setting's flag taking the next argument as its
 * value, 0 when it is a whole setting (--flag=value, a bare --insecure), -1 when not a setting. */
int qd_config_flag_arity(const char *arg);

#endif /* QD_CONFIG_H */
