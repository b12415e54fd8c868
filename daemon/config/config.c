/* config.c -- quantd's settings: one table row per setting (INI section and key, environment
 * variable, flag, range, default, help) drives the defaults, the config file (config_file.c),
 * the environment, the flags, --help and the INI printed by check-config. Precedence: defaults
 * < file < environment < flags; the flags are scanned first (for --config, --help, --version
 * and the subcommand) and applied last. An empty environment variable counts as unset. A list
 * (source roots) from a higher source replaces the whole list of a lower one.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config_impl.h"
#include "quant.h" /* QUANT_MAX_THREADS */

#ifndef QD_VERSION
#error "QD_VERSION must be defined (the Makefile passes -DQD_VERSION=...)"
#endif

#define KIB      ((int64_t)1 << 10)
#define MIB      ((int64_t)1 << 20)
#define GIB      ((int64_t)1 << 30)
#define TIB      ((int64_t)1 << 40)
#define F(field) offsetof(qd_config, field)
#define STR_(x)  #x
#define STR(x)   STR_(x) /* a number macro as a string literal, for the help texts */

/* clang-format off */
static const char *const metrics_auth_words[] = {[QD_METRICS_OPEN] = "open",
                                                 [QD_METRICS_TOKEN] = "token", NULL};
#define DAY 86400

const cfg_setting cfg_settings[] = {
    {NULL, "config", "QUANTD_CONFIG", "--config", "FILE", CFG_PATH, 0, 0, F(config_path), NULL,
     QD_DEFAULT_CONFIG " if it exists", "the INI config file to read", NULL},
    {"server", "listen", "QUANTD_LISTEN", "--listen", "HOST:PORT", CFG_LISTEN, 0, 0,
     F(listen_host), "127.0.0.1:8080", NULL,
     "address to listen on; [IPv6]:PORT; port 0 picks a free port", NULL},
    {"server", "insecure", "QUANTD_INSECURE", "--insecure", "[=BOOL]", CFG_BOOL, 0, 0, F(insecure),
     "false", NULL,
     "serve a non-loopback address with no tokens (everyone may do everything; warned hourly)", NULL},
    {"server", "metrics_auth", "QUANTD_METRICS_AUTH", "--metrics-auth", "open|token", CFG_CHOICE,
     0, 0, F(metrics_auth), "open", NULL, "GET /metrics for anyone, or for any valid token",
     metrics_auth_words},
    {"server", "http_threads", "QUANTD_HTTP_THREADS", "--http-threads", "N", CFG_INT, 1, 1024,
     F(http_threads), "4", NULL, "threads answering HTTP requests (1..1024)", NULL},
    {"server", "idle_timeout", "QUANTD_IDLE_TIMEOUT", "--idle-timeout", "SECONDS", CFG_INT, 1,
     86400, F(idle_timeout), "60", NULL, "close a connection idle this long (1..86400)", NULL},
    {"server", "max_upload", "QUANTD_MAX_UPLOAD", "--max-upload", "SIZE", CFG_SIZE, 1, 1024 * TIB,
     F(max_upload), "16G", NULL, "largest shard accepted by POST /v1/jobs (1..1024T)", NULL},
    {"server", "max_json_body", "QUANTD_MAX_JSON_BODY", "--max-json-body", "SIZE", CFG_SIZE, 1,
     GIB, F(max_json_body), "4M", NULL, "largest JSON request body (1..1G)", NULL},
    {"server", "max_stats_body", "QUANTD_MAX_STATS_BODY", "--max-stats-body", "SIZE", CFG_SIZE, 1,
     4 * GIB, F(max_stats_body), "64M", NULL,
     "largest statistics post, held in memory (1..4G)", NULL},
    {"tls", "cert", "QUANTD_TLS_CERT", "--tls-cert", "FILE", CFG_PATH, 0, 0, F(tls_cert), NULL,
     "none", "PEM certificate chain: serve HTTPS (with --tls-key; SIGHUP re-reads both)", NULL},
    {"tls", "key", "QUANTD_TLS_KEY", "--tls-key", "FILE", CFG_PATH, 0, 0, F(tls_key), NULL, "none",
     "PEM private key of --tls-cert (unencrypted)", NULL},
    {"tls", "priorities", "QUANTD_TLS_PRIORITIES", "--tls-priorities", "STRING", CFG_PATH, 0, 0,
     F(tls_priorities), "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2", NULL,
     "GnuTLS priority string: protocol versions and ciphers", NULL},
    {"limits", "max_connections", "QUANTD_MAX_CONNECTIONS", "--max-connections", "N", CFG_INT, 1,
     100000, F(max_connections), "1000", NULL, "open connections at once (1..100000)", NULL},
    {"limits", "max_connections_per_ip", "QUANTD_MAX_CONNECTIONS_PER_IP",
     "--max-connections-per-ip", "N", CFG_INT, 0, 100000, F(max_conns_per_ip), "128", NULL,
     "open connections from one client address; 0 = no limit (0..100000)", NULL},
    {"limits", "header_timeout", "QUANTD_HEADER_TIMEOUT", "--header-timeout", "SECONDS", CFG_INT,
     1, 3600, F(header_timeout), "10", NULL,
     "a new connection's request line and headers must arrive within this (1..3600)", NULL},
    {"limits", "body_timeout", "QUANTD_BODY_TIMEOUT", "--body-timeout", "SECONDS", CFG_INT, 1,
     3600, F(body_timeout), "20", NULL,
     "grace for a request body before --body-min-rate applies (1..3600)", NULL},
    {"limits", "body_min_rate", "QUANTD_BODY_MIN_RATE", "--body-min-rate", "SIZE", CFG_SIZE, 1,
     GIB, F(body_min_rate), "1K", NULL, "bytes per second a body must average (1..1G)", NULL},
    {"limits", "max_body_memory", "QUANTD_MAX_BODY_MEMORY", "--max-body-memory", "SIZE", CFG_SIZE,
     KIB, 64 * GIB, F(max_body_memory), "256M", NULL,
     "request bodies held in memory at once, all requests together; past it 503 (1K..64G)", NULL},
    {"limits", "min_free_disk", "QUANTD_MIN_FREE_DISK", "--min-free-disk", "SIZE", CFG_SIZE, 0,
     1024 * TIB, F(min_free_disk), "1G", NULL,
     "free space the data directory keeps: uploads and jobs that would eat into it get 507", NULL},
    {"limits", "max_queued_jobs", "QUANTD_MAX_QUEUED_JOBS", "--max-queued-jobs", "N", CFG_INT, 0,
     1000000, F(max_queued_jobs), "100", NULL, "queued jobs before new ones get 429; 0 = no cap", NULL},
    {"limits", "stats_quota", "QUANTD_STATS_QUOTA", "--stats-quota", "SIZE", CFG_SIZE, KIB,
     1024 * TIB, F(stats_quota), "1G", NULL,
     "float64 statistics sums one model may store (8 bytes a value; 1K..1024T)", NULL},
    {"storage", "data_dir", "QUANTD_DATA_DIR", "--data-dir", "DIR", CFG_PATH, 0, 0, F(data_dir),
     "./var", NULL, "uploads, job outputs and (by default) the database", NULL},
    {"storage", "db", "QUANTD_DB", "--db", "FILE", CFG_PATH, 0, 0, F(db_path), NULL,
     "DATA_DIR/quantd.db", "the SQLite database", NULL},
    {"storage", "busy_timeout", "QUANTD_BUSY_TIMEOUT", "--busy-timeout", "DURATION", CFG_DURATION,
     1, 3600, F(store_busy_timeout), "5s", NULL,
     "how long the job store's and the tokens' SQLite connections wait for another one's lock "
     "before failing (1s..1h)",
     NULL},
    {"jobs", "workers", "QUANTD_WORKERS", "--workers", "N", CFG_INT, 1, 256, F(workers), "1",
     NULL, "jobs run at the same time (1..256)", NULL},
    /* the pipeline's own limit (quant_pipeline_options.threads): refused here, at start, naming
     * the flag, and not by every job */
    {"jobs", "quant_threads", "QUANTD_QUANT_THREADS", "--quant-threads", "N", CFG_INT, 0,
     QUANT_MAX_THREADS, F(quant_threads), "0", NULL,
     ("threads per job; 0 = online CPUs / workers, at most " STR(QUANT_MAX_THREADS)
      " (0.." STR(QUANT_MAX_THREADS) ")"), NULL},
    {"jobs", "max_attempts", "QUANTD_MAX_ATTEMPTS", "--max-attempts", "N", CFG_INT, 1, 100,
     F(max_attempts), "2", NULL, "runs of a job cut short by a crash before it fails (1..100)", NULL},
    {"jobs", "retention", "QUANTD_JOB_RETENTION", "--job-retention", "DURATION", CFG_DURATION, 0,
     3650 * (int64_t)DAY, F(job_retention), "7d", NULL,
     "a succeeded job's output files are removed this long after it ended (its row and report stay); "
     "0 = never", NULL},
    {"jobs", "keep_outputs", "QUANTD_KEEP_OUTPUTS", "--keep-outputs", "N", CFG_INT, 0, 1000000,
     F(keep_outputs), "0", NULL,
     "succeeded jobs that keep their output files, newest first; older ones lose them; 0 = no cap", NULL},
    {"jobs", "input_timeout", "QUANTD_INPUT_TIMEOUT", "--input-timeout", "DURATION", CFG_DURATION,
     1, 7 * (int64_t)DAY, F(input_timeout), "1h", NULL,
     "a checkpoint job whose files have not all arrived this long after it was created fails "
     "(1s..7d)", NULL},
    {"jobs", "max_input_files", "QUANTD_MAX_INPUT_FILES", "--max-input-files", "N", CFG_INT, 1,
     100000, F(max_input_files), "1000", NULL,
     "files one checkpoint job may list (1..100000)", NULL},
    {"jobs", "max_input_name", "QUANTD_MAX_INPUT_NAME", "--max-input-name", "N", CFG_INT, 1, 255,
     F(max_input_name), "255", NULL, "bytes of a checkpoint job's file name (1..255)", NULL},
    {"jobs", "source_root", "QUANTD_SOURCE_ROOTS", "--source-root", "DIR", CFG_ROOTS, 0, 0,
     F(source_roots), NULL, "none",
     "a directory jobs may read checkpoints from; repeatable, at most 16", NULL},
    {"stats", "idempotency_window", "QUANTD_IDEMPOTENCY_WINDOW", "--idempotency-window",
     "DURATION", CFG_DURATION, 60, 365 * (int64_t)DAY, F(idempotency_window), "1d", NULL,
     "how long a statistics post's Idempotency-Key is remembered (1m..365d)", NULL},
    {"stats", "fold_interval", "QUANTD_STATS_FOLD_INTERVAL", "--stats-fold-interval", "DURATION",
     CFG_DURATION, 0, 3600, F(stats_fold_interval), "1s", NULL,
     "posts that only update stored activations are appended to the delta log and folded into "
     "the database this long after the log's first record; 0 = no log (0..1h)", NULL},
    {"stats", "fold_bytes", "QUANTD_STATS_FOLD_BYTES", "--stats-fold-bytes", "SIZE", CFG_SIZE,
     MIB, 16 * GIB, F(stats_fold_bytes), "64M", NULL,
     "the delta log is folded sooner once it holds this much (1M..16G)", NULL},
    {"stats", "busy_timeout", "QUANTD_STATS_BUSY_TIMEOUT", "--stats-busy-timeout", "DURATION",
     CFG_DURATION, 1, 3600, F(stats_busy_timeout), "5s", NULL,
     "how long the statistics' SQLite connections wait for another one's lock before failing "
     "(1s..1h)", NULL},
    {"stats", "page_cache", "QUANTD_STATS_PAGE_CACHE", "--stats-page-cache", "SIZE", CFG_SIZE,
     MIB, 16 * GIB, F(stats_page_cache), "16M", NULL,
     "SQLite page cache of the statistics writer's connection (1M..16G)", NULL},
    {"log", "level", "QUANTD_LOG_LEVEL", "--log-level", "LEVEL", CFG_LEVEL, 0, 0, F(log_level),
     "info", NULL, "least severe level logged: debug, info, warn or error", NULL},
    {NULL, "port_file", NULL, "--port-file", "FILE", CFG_PATH, 0, 0, F(port_file), NULL, "none",
     "write the bound port to FILE once listening (tests)", NULL},
};
/* clang-format on */
const size_t cfg_n_settings = sizeof cfg_settings / sizeof cfg_settings[0];

static const char *const sections[] = {"server", "tls",   "limits", "storage",
                                       "jobs",   "stats", "log"};
const char cfg_sections_text[] = "server, tls, limits, storage, jobs, stats, log";

void cfg_fail(cfg_loader *L, const char *fmt, ...)
{
    if (L->failed) return;
    L->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->msg, L->msglen, fmt, ap);
    va_end(ap);
}

bool cfg_known_section(const char *section)
{
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        if (strcmp(sections[i], section) == 0) return true;
    return false;
}

const cfg_setting *cfg_find_key(const char *section, const char *key)
{
    for (size_t i = 0; i < cfg_n_settings; i++) {
        const cfg_setting *s = &cfg_settings[i];
        if (s->section && strcmp(s->section, section) == 0 && strcmp(s->key, key) == 0) return s;
    }
    return NULL;
}

static const cfg_setting *find_flag(const char *flag, size_t len)
{
    for (size_t i = 0; i < cfg_n_settings; i++)
        if (strncmp(cfg_settings[i].flag, flag, len) == 0 && cfg_settings[i].flag[len] == '\0')
            return &cfg_settings[i];
    return NULL;
}

static const cfg_setting *find_setting(const char *key)
{
    for (size_t i = 0; i < cfg_n_settings; i++)
        if (strcmp(cfg_settings[i].key, key) == 0) return &cfg_settings[i];
    return NULL;
}

/* ---- applying one value ---------------------------------------------------------------------- */

static bool set_string(char **field, const char *text, char *why, size_t whylen)
{
    if (*text == '\0') {
        snprintf(why, whylen, "must not be empty");
        return false;
    }
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            snprintf(why, whylen, "must not contain control characters");
            return false;
        }
    }
    char *copy = strdup(text);
    if (!copy) {
        snprintf(why, whylen, "out of memory");
        return false;
    }
    free(*field);
    *field = copy;
    return true;
}

static bool add_root(cfg_loader *L, const char *text, char *why, size_t whylen)
{
    qd_config *cfg = L->cfg;
    if (L->roots_layer != L->layer) { /* a new source replaces the list */
        for (int i = 0; i < cfg->n_source_roots; i++) free(cfg->source_roots[i]);
        cfg->n_source_roots = 0;
        L->roots_layer = L->layer;
    }
    struct stat st;
    char *real = NULL;
    if (*text == '\0')
        snprintf(why, whylen, "must not be empty");
    else if (cfg->n_source_roots == QD_MAX_SOURCE_ROOTS)
        snprintf(why, whylen, "at most %d source roots, %s is one too many", QD_MAX_SOURCE_ROOTS,
                 text);
    else if (!(real = realpath(text, NULL)) || stat(real, &st) != 0)
        snprintf(why, whylen, "%s: %s", text, strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        snprintf(why, whylen, "%s: not a directory", text);
    else {
        cfg->source_roots[cfg->n_source_roots++] = real;
        return true;
    }
    free(real);
    return false;
}

static bool apply_choice(const cfg_setting *s, const char *text, int *field, char *why,
                         size_t whylen)
{
    for (int i = 0; s->choices[i]; i++)
        if (strcmp(text, s->choices[i]) == 0) {
            *field = i;
            return true;
        }
    size_t at = (size_t)snprintf(why, whylen, "must be");
    for (int i = 0; s->choices[i] && at < whylen; i++)
        at += (size_t)snprintf(why + at, whylen - at, "%s %s",
                               i ? (s->choices[i + 1] ? "," : " or") : "", s->choices[i]);
    if (at < whylen) snprintf(why + at, whylen - at, ", got '%s'", text);
    return false;
}

bool cfg_apply(cfg_loader *L, const cfg_setting *s, const char *text, char *why, size_t whylen)
{
    char *base = (char *)L->cfg;
    int64_t v;
    qd_log_level level;
    switch (s->kind) {
    case CFG_INT:
        if (!cfg_parse_int(text, s->min, s->max, &v, why, whylen)) return false;
        *(int *)(base + s->off) = (int)v;
        return true;
    case CFG_SIZE:
        if (!cfg_parse_size(text, s->min, s->max, &v, why, whylen)) return false;
        *(int64_t *)(base + s->off) = v;
        return true;
    case CFG_LISTEN: {
        char *host;
        if (!cfg_parse_listen(text, &host, &L->cfg->listen_port, why, whylen)) return false;
        free(L->cfg->listen_host);
        L->cfg->listen_host = host;
        return true;
    }
    case CFG_PATH:
        return set_string((char **)(base + s->off), text, why, whylen);
    case CFG_ROOTS:
        return add_root(L, text, why, whylen);
    case CFG_LEVEL:
        if (!qd_log_level_parse(text, &level)) {
            snprintf(why, whylen, "must be debug, info, warn or error, got '%s'", text);
            return false;
        }
        *(qd_log_level *)(base + s->off) = level;
        return true;
    case CFG_BOOL:
        return cfg_parse_bool(text, (bool *)(base + s->off), why, whylen);
    case CFG_DURATION:
        if (!cfg_parse_duration(text, s->min, s->max, &v, why, whylen)) return false;
        *(int64_t *)(base + s->off) = v;
        return true;
    case CFG_CHOICE:
        return apply_choice(s, text, (int *)(base + s->off), why, whylen);
    }
    return false;
}

/* Applies text for s from a source named origin ("QUANTD_WORKERS", "--workers"). */
static bool apply_from(cfg_loader *L, const cfg_setting *s, const char *text, const char *origin)
{
    char why[512];
    if (cfg_apply(L, s, text, why, sizeof why)) return true;
    cfg_fail(L, "%s: %s", origin, why);
    return false;
}

/* ---- the sources ----------------------------------------------------------------------------- */

static bool apply_defaults(cfg_loader *L)
{
    L->layer = CFG_DEFAULT;
    for (size_t i = 0; i < cfg_n_settings && !L->failed; i++)
        if (cfg_settings[i].def) apply_from(L, &cfg_settings[i], cfg_settings[i].def, "default");
    return !L->failed;
}

/* QUANTD_SOURCE_ROOTS: directories separated by ':' (empty parts are skipped). */
static bool apply_env_roots(cfg_loader *L, const cfg_setting *s, const char *list)
{
    char *copy = strdup(list);
    if (!copy) {
        cfg_fail(L, "out of memory");
        return false;
    }
    char *save = NULL;
    for (char *dir = strtok_r(copy, ":", &save); dir && !L->failed;
         dir = strtok_r(NULL, ":", &save))
        apply_from(L, s, dir, s->env);
    free(copy);
    return !L->failed;
}

static bool apply_env(cfg_loader *L)
{
    L->layer = CFG_ENV;
    for (size_t i = 0; i < cfg_n_settings && !L->failed; i++) {
        const cfg_setting *s = &cfg_settings[i];
        if (!s->env || !s->section) continue; /* QUANTD_CONFIG was read by load_file */
        const char *v = getenv(s->env);
        if (!v || !*v) continue;
        if (s->kind == CFG_ROOTS)
            apply_env_roots(L, s, v);
        else
            apply_from(L, s, v, s->env);
    }
    return !L->failed;
}

/* A flag with its value, as found on the command line. */
typedef struct flag_arg {
    const cfg_setting *s;
    const char *value;
} flag_arg;

typedef struct argv_scan {
    flag_arg *flags;
    size_t n_flags;
    bool help, version, have_command;
} argv_scan;

static bool scan_command(cfg_loader *L, argv_scan *a, const char *arg, qd_command *cmd)
{
    static const struct {
        const char *name;
        qd_command cmd;
    } commands[] = {{"serve", QD_CMD_SERVE},
                    {"migrate", QD_CMD_MIGRATE},
                    {"check-config", QD_CMD_CHECK_CONFIG}};
    if (a->have_command) {
        cfg_fail(L, "unexpected argument '%s' (see 'quantd --help')", arg);
        return false;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(arg, commands[i].name) == 0) {
            *cmd = commands[i].cmd;
            a->have_command = true;
            return true;
        }
    }
    cfg_fail(L, "unknown command '%s' (see 'quantd --help')", arg);
    return false;
}

/* One option at argv[*i]; takes its value from the next argument when not given as --x=V. */
static bool scan_option(cfg_loader *L, argv_scan *a, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
        a->help = true;
        return true;
    }
    if (strcmp(arg, "-V") == 0 || strcmp(arg, "--version") == 0) {
        a->version = true;
        return true;
    }
    if (eq && (strncmp(arg, "--help=", len + 1) == 0 || strncmp(arg, "--version=", len + 1) == 0)) {
        cfg_fail(L, "%.*s takes no value", (int)len, arg);
        return false;
    }
    const cfg_setting *s = strncmp(arg, "--", 2) == 0 ? find_flag(arg, len) : NULL;
    if (!s) {
        cfg_fail(L, "unknown option '%.*s' (see 'quantd --help')", (int)len, arg);
        return false;
    }
    const char *value = eq ? eq + 1 : NULL;
    if (!value && s->kind == CFG_BOOL) value = "true"; /* --insecure: never takes the next word */
    if (!value && *i + 1 < argc) value = argv[++*i];
    if (!value) {
        cfg_fail(L, "%s: missing value (%s %s)", s->flag, s->flag, s->arg);
        return false;
    }
    a->flags[a->n_flags++] = (flag_arg){s, value};
    return true;
}

static bool scan_argv(cfg_loader *L, argv_scan *a, int argc, char **argv, qd_command *cmd)
{
    bool options = true;
    for (int i = 1; i < argc && !L->failed; i++) {
        const char *arg = argv[i];
        if (options && strcmp(arg, "--") == 0)
            options = false;
        else if (options && arg[0] == '-' && arg[1] != '\0')
            scan_option(L, a, argc, argv, &i);
        else
            scan_command(L, a, arg, cmd);
    }
    return !L->failed;
}

static bool apply_flags(cfg_loader *L, const argv_scan *a)
{
    L->layer = CFG_FLAG;
    const cfg_setting *config = find_setting("config"); /* already read by load_file */
    for (size_t i = 0; i < a->n_flags && !L->failed; i++)
        if (a->flags[i].s != config)
            apply_from(L, a->flags[i].s, a->flags[i].value, a->flags[i].s->flag);
    return !L->failed;
}

/* The file named by the last --config, else $QUANTD_CONFIG, else the default if it exists. */
static bool load_file(cfg_loader *L, const argv_scan *a)
{
    const cfg_setting *s = find_setting("config");
    const char *path = NULL, *origin = NULL;
    for (size_t i = 0; i < a->n_flags; i++)
        if (a->flags[i].s == s) path = a->flags[i].value, origin = s->flag;
    if (!path && getenv(s->env) && *getenv(s->env)) path = getenv(s->env), origin = s->env;
    if (path && !apply_from(L, s, path, origin)) return false; /* sets config_path */
    return cfg_load_file(L, path ? path : QD_DEFAULT_CONFIG, origin);
}

/* Settings that must agree with each other. */
static bool check_together(cfg_loader *L)
{
    const qd_config *cfg = L->cfg;
    char a[32], b[32];
    if (!cfg->tls_cert != !cfg->tls_key)
        cfg_fail(L, "--tls-cert and --tls-key go together ([tls] cert and key): %s is missing",
                 cfg->tls_cert ? "the key" : "the certificate");
    int64_t body =
        cfg->max_stats_body > cfg->max_json_body ? cfg->max_stats_body : cfg->max_json_body;
    cfg_format_size(cfg->max_body_memory, a, sizeof a);
    cfg_format_size(body, b, sizeof b);
    if (!L->failed && cfg->max_body_memory < body)
        cfg_fail(L,
                 "max_body_memory (%s) is below the largest body held in memory "
                 "(max_stats_body or max_json_body, %s): such a body could never be taken",
                 a, b);
    return !L->failed;
}

/* The database defaults to DATA_DIR/quantd.db. */
static bool finish(cfg_loader *L)
{
    qd_config *cfg = L->cfg;
    if (!check_together(L)) return false;
    if (cfg->db_path) return true;
    size_t n = strlen(cfg->data_dir);
    bool slash = n > 0 && cfg->data_dir[n - 1] == '/';
    cfg->db_path = malloc(n + sizeof "/quantd.db");
    if (!cfg->db_path) {
        cfg_fail(L, "out of memory");
        return false;
    }
    snprintf(cfg->db_path, n + sizeof "/quantd.db", "%s%squantd.db", cfg->data_dir,
             slash ? "" : "/");
    return true;
}

/* ---- help, print, free ----------------------------------------------------------------------- */

/* text indented by 6, words wrapped before column 80. */
static void help_words(FILE *out, const char *text)
{
    size_t col = 0;
    for (const char *p = text; *p;) {
        size_t word = strcspn(p, " ");
        if (col > 0 && col + 1 + word > 80) {
            fputc('\n', out);
            col = 0;
        }
        col += (size_t)fprintf(out, "%s%.*s", col == 0 ? "      " : " ", (int)word, p);
        p += word;
        p += strspn(p, " ");
    }
    fputc('\n', out);
}

static void print_help(FILE *out)
{
    fputs("usage: quantd [serve] [OPTION]...         run the daemon\n"
          "       quantd migrate [OPTION]...         apply the database migrations and exit\n"
          "       quantd check-config [OPTION]...    check the settings, print them as INI\n"
          "       quantd token create|list|revoke ... access tokens (quantd token --help)\n"
          "       quantd --help | --version\n"
          "\n"
          "Settings come from, each overriding the one before: built-in defaults, the\n"
          "config file, QUANTD_* environment variables (an empty one counts as unset),\n"
          "then the options. The config file is --config FILE, else $QUANTD_CONFIG, "
          "else\n" QD_DEFAULT_CONFIG " when it exists.\n"
          "\n"
          "options:\n",
          out);
    for (size_t i = 0; i < cfg_n_settings; i++) {
        const cfg_setting *s = &cfg_settings[i];
        fprintf(out, "  %s%s%s\n", s->flag, s->arg[0] == '[' ? "" : " ", s->arg);
        help_words(out, s->help);
        char where[3][160];
        int n = 0;
        snprintf(where[n++], sizeof where[0], "default %s", s->def ? s->def : s->def_help);
        if (s->section) snprintf(where[n++], sizeof where[0], "file [%s] %s", s->section, s->key);
        if (s->env) snprintf(where[n++], sizeof where[0], "env %s", s->env);
        size_t col = 6;
        fputs("      ", out);
        for (int k = 0; k < n; k++) { /* "; "-separated, a new line when the next would overflow */
            if (k > 0 && col + 2 + strlen(where[k]) > 80) {
                fputs(";\n      ", out);
                col = 6;
            } else if (k > 0) {
                fputs("; ", out);
                col += 2;
            }
            fputs(where[k], out);
            col += strlen(where[k]);
        }
        fputc('\n', out);
    }
    fputs("  -h, --help\n"
          "      print this help and exit\n"
          "  -V, --version\n"
          "      print the version and exit\n"
          "\n"
          "SIZE: bytes, or a number with K, M, G or T (powers of 1024), e.g. 16G.\n"
          "QUANTD_SOURCE_ROOTS holds directories separated by ':'. Source roots from a\n"
          "later source replace the whole list of an earlier one.\n"
          "See quantd(8).\n",
          out);
}

static void print_value(const qd_config *cfg, const cfg_setting *s, FILE *out)
{
    const char *base = (const char *)cfg;
    char buf[600];
    switch (s->kind) {
    case CFG_INT:
        fprintf(out, "%s = %d\n", s->key, *(const int *)(base + s->off));
        break;
    case CFG_SIZE:
        cfg_format_size(*(const int64_t *)(base + s->off), buf, sizeof buf);
        fprintf(out, "%s = %s\n", s->key, buf);
        break;
    case CFG_LISTEN:
        cfg_format_listen(cfg->listen_host, cfg->listen_port, buf, sizeof buf);
        fprintf(out, "%s = %s\n", s->key, buf);
        break;
    case CFG_PATH: {
        /* "key =;x" for a value starting with ';': inih reads " ;" as a comment's start */
        const char *v = *(char *const *)(base + s->off);
        if (v) fprintf(out, "%s =%s%s\n", s->key, v[0] == ';' ? "" : " ", v);
        break;
    }
    case CFG_ROOTS:
        for (int i = 0; i < cfg->n_source_roots; i++)
            fprintf(out, "%s = %s\n", s->key, cfg->source_roots[i]);
        break;
    case CFG_LEVEL:
        fprintf(out, "%s = %s\n", s->key, qd_log_level_name(cfg->log_level));
        break;
    case CFG_BOOL:
        fprintf(out, "%s = %s\n", s->key, *(const bool *)(base + s->off) ? "true" : "false");
        break;
    case CFG_DURATION:
        cfg_format_duration(*(const int64_t *)(base + s->off), buf, sizeof buf);
        fprintf(out, "%s = %s\n", s->key, buf);
        break;
    case CFG_CHOICE:
        fprintf(out, "%s = %s\n", s->key, s->choices[*(const int *)(base + s->off)]);
        break;
    }
}

void qd_config_print(const qd_config *cfg, FILE *out)
{
    fprintf(out, "; quantd %s: effective settings (config file: %s)\n", QD_VERSION,
            cfg->config_path ? cfg->config_path : "none");
    const char *section = NULL;
    for (size_t i = 0; i < cfg_n_settings; i++) {
        const cfg_setting *s = &cfg_settings[i];
        if (!s->section) continue;
        if (!section || strcmp(section, s->section) != 0)
            fprintf(out, "%s[%s]\n", section ? "\n" : "", s->section);
        section = s->section;
        print_value(cfg, s, out);
    }
}

void qd_config_size_text(int64_t bytes, char *buf, size_t len)
{
    cfg_format_size(bytes, buf, len);
}

int qd_config_flag_arity(const char *arg)
{
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    const cfg_setting *s = strncmp(arg, "--", 2) == 0 ? find_flag(arg, len) : NULL;
    if (!s) return -1;
    return eq || s->kind == CFG_BOOL ? 0 : 1;
}

void qd_config_free(qd_config *cfg)
{
    if (!cfg) return;
    free(cfg->config_path);
    free(cfg->listen_host);
    free(cfg->data_dir);
    free(cfg->db_path);
    free(cfg->port_file);
    free(cfg->tls_cert);
    free(cfg->tls_key);
    free(cfg->tls_priorities);
    for (int i = 0; i < cfg->n_source_roots; i++) free(cfg->source_roots[i]);
    memset(cfg, 0, sizeof *cfg);
}

bool qd_config_load(qd_config *cfg, int argc, char **argv, qd_command *cmd, bool *exit_now,
                    FILE *out, char *msg, size_t msglen)
{
    memset(cfg, 0, sizeof *cfg);
    *cmd = QD_CMD_SERVE;
    *exit_now = false;
    if (msglen) msg[0] = '\0';
    cfg_loader L = {.cfg = cfg, .msg = msg, .msglen = msglen};
    argv_scan a = {.flags = calloc((size_t)(argc > 0 ? argc : 1), sizeof(flag_arg))};
    if (!a.flags) {
        snprintf(msg, msglen, "out of memory");
        return false;
    }
    bool ok = scan_argv(&L, &a, argc, argv, cmd) && apply_defaults(&L);
    if (ok && (a.help || a.version)) {
        if (a.help)
            print_help(out);
        else
            fputs("quantd " QD_VERSION "\n", out);
        *exit_now = true;
    } else {
        ok = ok && load_file(&L, &a) && apply_env(&L) && apply_flags(&L, &a) && finish(&L);
    }
    free(a.flags);
    if (!ok) qd_config_free(cfg);
    return ok;
}
