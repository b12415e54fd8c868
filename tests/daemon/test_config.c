/* test_config.c -- the config suite: qd_config_load over defaults, INI files, QUANTD_*
 * variables and flags (precedence, every kind of bad value with the message naming its source,
 * unknown keys/sections/flags, sizes, listen addresses, source roots, subcommands, --help and
 * --version) and qd_config_print -> qd_config_load round trips. Every test starts with the
 * QUANTD_* variables unset but QUANTD_CONFIG naming an empty file, so a config installed on the
 * machine cannot leak in; the variables are restored afterwards.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "config_impl.h"
#include "jobs.h"
#include "qdtest.h"
#include "quant.h"

static const char *const env_vars[] = {
    "QUANTD_CONFIG",       "QUANTD_LISTEN",        "QUANTD_HTTP_THREADS",   "QUANTD_IDLE_TIMEOUT",
    "QUANTD_MAX_UPLOAD",   "QUANTD_MAX_JSON_BODY", "QUANTD_MAX_STATS_BODY", "QUANTD_DATA_DIR",
    "QUANTD_DB",           "QUANTD_WORKERS",       "QUANTD_QUANT_THREADS",  "QUANTD_MAX_ATTEMPTS",
    "QUANTD_SOURCE_ROOTS", "QUANTD_LOG_LEVEL",
};
#define N_ENV (sizeof env_vars / sizeof env_vars[0])

static char *saved_env[N_ENV];
static char *dir;        /* this test's temporary directory */
static char *empty_conf; /* DIR/empty.conf, named by QUANTD_CONFIG */

static char *write_file(const char *name, const char *text)
{
    char *path = kit_join(dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

static char *make_dir(const char *name)
{
    char *path = kit_join(dir, name);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    return path;
}

static void setup(void)
{
    for (size_t i = 0; i < N_ENV; i++) {
        const char *v = getenv(env_vars[i]);
        saved_env[i] = v ? strdup(v) : NULL;
        unsetenv(env_vars[i]);
    }
    dir = qdt_tmpdir();
    empty_conf = write_file("empty.conf", "");
    setenv("QUANTD_CONFIG", empty_conf, 1);
}

static void teardown(void)
{
    for (size_t i = 0; i < N_ENV; i++) {
        if (saved_env[i])
            setenv(env_vars[i], saved_env[i], 1);
        else
            unsetenv(env_vars[i]);
        free(saved_env[i]);
        saved_env[i] = NULL;
    }
    kit_rmtree(dir);
    free(dir);
    free(empty_conf);
}

/* One qd_config_load call and what it produced. */
typedef struct loaded {
    qd_config cfg;
    qd_command cmd;
    bool exit_now;
    bool ok;
    char msg[512];
    char *out; /* what went to the out stream */
} loaded;

static bool load_argv(loaded *r, const char *const *args)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = "quantd";
    for (size_t i = 0; args[i]; i++) {
        ck_assert_int_lt(argc, 63);
        argv[argc++] = (char *)args[i];
    }
    argv[argc] = NULL;
    size_t len = 0;
    r->out = NULL;
    FILE *out = open_memstream(&r->out, &len);
    ck_assert_ptr_nonnull(out);
    r->ok = qd_config_load(&r->cfg, argc, argv, &r->cmd, &r->exit_now, out, r->msg, sizeof r->msg);
    fclose(out);
    return r->ok;
}

#define LOAD(r, ...) load_argv((r), (const char *[]){__VA_ARGS__, NULL})

static void done(loaded *r)
{
    qd_config_free(&r->cfg);
    free(r->out);
}

/* Loads args (which must fail) and checks the message. */
static void expect_error(const char *const *args, const char *want)
{
    loaded r;
    ck_assert_msg(!load_argv(&r, args), "loading succeeded, expected '%s'", want);
    ck_assert_str_eq(r.msg, want);
    ck_assert_ptr_null(r.cfg.listen_host); /* freed and zeroed on failure */
    ck_assert_int_eq(r.cfg.n_source_roots, 0);
    done(&r);
}

#define EXPECT_ERROR(want, ...) expect_error((const char *[]){__VA_ARGS__, NULL}, (want))

/* A config file holding text must fail with "PATH:" + want. */
static void expect_file_error(const char *text, const char *want)
{
    char *path = write_file("bad.conf", text);
    char full[700];
    snprintf(full, sizeof full, "%s:%s", path, want);
    EXPECT_ERROR(full, "--config", path);
    free(path);
}

/* ---- defaults ---------------------------------------------------------------------------------
 */

START_TEST(test_defaults)
{
    loaded r;
    ck_assert_msg(LOAD(&r, NULL), "%s", r.msg);
    ck_assert(!r.exit_now);
    ck_assert_int_eq(r.cmd, QD_CMD_SERVE);
    ck_assert_str_eq(r.msg, "");
    ck_assert_str_eq(r.out, "");
    ck_assert_str_eq(r.cfg.config_path, empty_conf);
    ck_assert_str_eq(r.cfg.listen_host, "127.0.0.1");
    ck_assert_int_eq(r.cfg.listen_port, 8080);
    ck_assert_str_eq(r.cfg.data_dir, "./var");
    ck_assert_str_eq(r.cfg.db_path, "./var/quantd.db");
    ck_assert_int_eq(r.cfg.workers, 1);
    ck_assert_int_eq(r.cfg.quant_threads, 0);
    ck_assert_int_eq(r.cfg.http_threads, 4);
    ck_assert(r.cfg.max_upload == (int64_t)16 << 30);
    ck_assert(r.cfg.max_json_body == (int64_t)4 << 20);
    ck_assert(r.cfg.max_stats_body == (int64_t)64 << 20);
    ck_assert_int_eq(r.cfg.idle_timeout, 60);
    ck_assert_int_eq(r.cfg.max_attempts, 2);
    ck_assert_int_eq(r.cfg.n_source_roots, 0);
    ck_assert_int_eq(r.cfg.log_level, QD_LOG_INFO);
    ck_assert_ptr_null(r.cfg.port_file);
    done(&r);
}
END_TEST

/* Without QUANTD_CONFIG the default file is read only when it exists. */
START_TEST(test_default_file_optional)
{
    unsetenv("QUANTD_CONFIG");
    struct stat st;
    loaded r;
    bool present = stat(QD_DEFAULT_CONFIG, &st) == 0;
    if (present) {
        /* The machine has one: whatever it says, the path is reported when it loads. */
        if (LOAD(&r, NULL)) ck_assert_str_eq(r.cfg.config_path, QD_DEFAULT_CONFIG);
    } else {
        ck_assert_msg(LOAD(&r, NULL), "%s", r.msg);
        ck_assert_ptr_null(r.cfg.config_path);
    }
    done(&r);
    setenv("QUANTD_CONFIG", "", 1); /* empty counts as unset */
    if (!present) {
        ck_assert_msg(LOAD(&r, NULL), "%s", r.msg);
        ck_assert_ptr_null(r.cfg.config_path);
        done(&r);
    }
}
END_TEST

START_TEST(test_explicit_file_missing)
{
    char *missing = kit_join(dir, "nope.conf");
    char want[600];
    snprintf(want, sizeof want, "--config: %s: No such file or directory", missing);
    EXPECT_ERROR(want, "--config", missing);
    setenv("QUANTD_CONFIG", missing, 1);
    snprintf(want, sizeof want, "QUANTD_CONFIG: %s: No such file or directory", missing);
    EXPECT_ERROR(want, NULL);
    snprintf(want, sizeof want, "--config: %s: Is a directory", dir);
    EXPECT_ERROR(want, "--config", dir);
    EXPECT_ERROR("--config: must not be empty", "--config=");
    free(missing);
}
END_TEST

/* ---- precedence -------------------------------------------------------------------------------
 */

START_TEST(test_precedence)
{
    char *conf = write_file("p.conf", "[server]\n"
                                      "listen = 10.0.0.1:1000\n"
                                      "http_threads = 8\n"
                                      "max_upload = 1G\n"
                                      "max_json_body = 1M\n"
                                      "[storage]\n"
                                      "data_dir = /file/data\n"
                                      "[jobs]\n"
                                      "workers = 2\n"
                                      "max_attempts = 5\n"
                                      "[log]\n"
                                      "level = warn\n");
    loaded r;
    /* file over defaults */
    ck_assert_msg(LOAD(&r, "--config", conf), "%s", r.msg);
    ck_assert_str_eq(r.cfg.config_path, conf);
    ck_assert_str_eq(r.cfg.listen_host, "10.0.0.1");
    ck_assert_int_eq(r.cfg.listen_port, 1000);
    ck_assert_int_eq(r.cfg.http_threads, 8);
    ck_assert_int_eq(r.cfg.idle_timeout, 60);
    ck_assert(r.cfg.max_upload == (int64_t)1 << 30);
    ck_assert_str_eq(r.cfg.data_dir, "/file/data");
    ck_assert_str_eq(r.cfg.db_path, "/file/data/quantd.db");
    ck_assert_int_eq(r.cfg.workers, 2);
    ck_assert_int_eq(r.cfg.max_attempts, 5);
    ck_assert_int_eq(r.cfg.log_level, QD_LOG_WARN);
    done(&r);

    /* environment over file */
    setenv("QUANTD_CONFIG", conf, 1);
    setenv("QUANTD_LISTEN", "10.0.0.2:2000", 1);
    setenv("QUANTD_WORKERS", "3", 1);
    setenv("QUANTD_DATA_DIR", "/env/data", 1);
    setenv("QUANTD_MAX_UPLOAD", "2G", 1);
    setenv("QUANTD_LOG_LEVEL", "error", 1);
    setenv("QUANTD_HTTP_THREADS", "", 1); /* empty: unset */
    ck_assert_msg(LOAD(&r, NULL), "%s", r.msg);
    ck_assert_str_eq(r.cfg.config_path, conf);
    ck_assert_str_eq(r.cfg.listen_host, "10.0.0.2");
    ck_assert_int_eq(r.cfg.listen_port, 2000);
    ck_assert_int_eq(r.cfg.workers, 3);
    ck_assert_int_eq(r.cfg.http_threads, 8);
    ck_assert_int_eq(r.cfg.max_attempts, 5);
    ck_assert(r.cfg.max_upload == (int64_t)2 << 30);
    ck_assert(r.cfg.max_json_body == (int64_t)1 << 20);
    ck_assert_str_eq(r.cfg.db_path, "/env/data/quantd.db");
    ck_assert_int_eq(r.cfg.log_level, QD_LOG_ERROR);
    done(&r);

    /* flags over environment; the last of a repeated flag wins */
    ck_assert_msg(LOAD(&r, "--listen", "[::1]:3000", "--workers=4", "--workers", "6", "--data-dir",
                       "/flag/data", "--log-level", "debug", "--db", "/x.db"),
                  "%s", r.msg);
    ck_assert_str_eq(r.cfg.listen_host, "::1");
    ck_assert_int_eq(r.cfg.listen_port, 3000);
    ck_assert_int_eq(r.cfg.workers, 6);
    ck_assert(r.cfg.max_upload == (int64_t)2 << 30);
    ck_assert_str_eq(r.cfg.data_dir, "/flag/data");
    ck_assert_str_eq(r.cfg.db_path, "/x.db");
    ck_assert_int_eq(r.cfg.log_level, QD_LOG_DEBUG);
    done(&r);

    /* --config beats QUANTD_CONFIG */
    ck_assert_msg(LOAD(&r, "--config", empty_conf), "%s", r.msg);
    ck_assert_str_eq(r.cfg.config_path, empty_conf);
    ck_assert_int_eq(r.cfg.max_attempts, 2);
    ck_assert_int_eq(r.cfg.workers, 3);
    done(&r);
    free(conf);
}
END_TEST

/* An explicit db from a lower source beats the one derived from a higher source's data dir. */
START_TEST(test_db_path)
{
    char *conf = write_file("db.conf", "[storage]\ndb = /file/q.db\n");
    loaded r;
    ck_assert_msg(LOAD(&r, "--config", conf, "--data-dir", "/d"), "%s", r.msg);
    ck_assert_str_eq(r.cfg.db_path, "/file/q.db");
    done(&r);
    ck_assert_msg(LOAD(&r, "--data-dir", "/d/"), "%s", r.msg);
    ck_assert_str_eq(r.cfg.db_path, "/d/quantd.db");
    done(&r);
    setenv("QUANTD_DB", "env.db", 1);
    ck_assert_msg(LOAD(&r, "--data-dir", "/d"), "%s", r.msg);
    ck_assert_str_eq(r.cfg.db_path, "env.db");
    done(&r);
    free(conf);
}
END_TEST

/* ---- bad values -------------------------------------------------------------------------------
 */

/* --quant-threads takes what the pipeline takes (quant_pipeline_options.threads: 0..256), so a
 * bad value stops quantd at start instead of failing every job; the automatic value (online
 * CPUs / workers) is clamped to the same limit. */
START_TEST(test_quant_threads_limit)
{
    ck_assert_int_eq(QUANT_MAX_THREADS, 256);
    loaded r;
    ck_assert_msg(LOAD(&r, "--quant-threads", "256"), "%s", r.msg);
    ck_assert_int_eq(r.cfg.quant_threads, QUANT_MAX_THREADS);
    done(&r);
    EXPECT_ERROR("--quant-threads: must be 0..256, got 257", "--quant-threads", "257");
    ck_assert_msg(LOAD(&r, "--help"), "%s", r.msg);
    ck_assert_ptr_nonnull(strstr(r.out, "at most 256 (0..256)"));
    done(&r);
    static const struct {
        int quant_threads;
        long cpus;
        int workers, want;
    } cases[] = {
        {0, 8, 1, 8},      {0, 8, 2, 4},      {0, 8, 3, 2},      {0, 2, 4, 1},
        {0, 0, 1, 1},      {0, -1, 1, 1},     {0, 256, 1, 256},  {0, 257, 1, 256},
        {0, 1024, 1, 256}, {0, 1024, 2, 256}, {0, 1024, 4, 256}, {0, 1024, 8, 128},
        {5, 1024, 1, 5},   {256, 1, 1, 256},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(qd_jobs_threads(cases[i].quant_threads, cases[i].cpus, cases[i].workers) ==
                          cases[i].want,
                      "quant_threads %d, %ld CPUs, %d workers: %d, wanted %d",
                      cases[i].quant_threads, cases[i].cpus, cases[i].workers,
                      qd_jobs_threads(cases[i].quant_threads, cases[i].cpus, cases[i].workers),
                      cases[i].want);
}
END_TEST

START_TEST(test_bad_file_values)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"[jobs]\nworkers = 0\n", "2: workers: must be 1..256, got 0"},
        {"[jobs]\n\n; c\nworkers = 257\n", "4: workers: must be 1..256, got 257"},
        {"[jobs]\nworkers = two\n", "2: workers: must be an integer in 1..256, got 'two'"},
        {"[jobs]\nworkers =\n", "2: workers: must be an integer in 1..256, got ''"},
        {"[jobs]\nquant_threads = -1\n", "2: quant_threads: must be 0..256, got -1"},
        {"[jobs]\nquant_threads = 300\n", "2: quant_threads: must be 0..256, got 300"},
        {"[jobs]\nmax_attempts = 101\n", "2: max_attempts: must be 1..100, got 101"},
        {"[server]\nhttp_threads = 0\n", "2: http_threads: must be 1..1024, got 0"},
        {"[server]\nidle_timeout = 86401\n", "2: idle_timeout: must be 1..86400, got 86401"},
        {"[server]\nmax_upload = 0\n", "2: max_upload: must be 1..1024T, got 0"},
        {"[server]\nmax_json_body = 2G\n", "2: max_json_body: must be 1..1G, got 2G"},
        {"[server]\nmax_stats_body = 5G\n", "2: max_stats_body: must be 1..4G, got 5G"},
        {"[server]\nmax_upload = 1.5G\n",
         "2: max_upload: must be a size like 4096, 512K or 16G (K, M, G, T: powers of 1024), "
         "got '1.5G'"},
        {"[server]\nlisten = 127.0.0.1\n",
         "2: listen: must be HOST:PORT or [IPv6]:PORT, got '127.0.0.1'"},
        {"[server]\nlisten = 127.0.0.1:65536\n",
         "2: listen: port must be 0..65535, got '65536' in '127.0.0.1:65536'"},
        {"[storage]\ndata_dir =\n", "2: data_dir: must not be empty"},
        {"[storage]\ndb =\n", "2: db: must not be empty"},
        {"[log]\nlevel = verbose\n", "2: level: must be debug, info, warn or error, got 'verbose'"},
        {"[jobs]\nsource_root = /nonexistent-quantd-dir\n",
         "2: source_root: /nonexistent-quantd-dir: No such file or directory"},
        {"[jobs]\nsource_root = /dev/null\n", "2: source_root: /dev/null: not a directory"},
        {"[jobs]\nworkers = 2\nworkers = 3\n", "3: workers: set twice (first on line 2)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_file_error(cases[i].text, cases[i].want);
}
END_TEST

START_TEST(test_bad_env_values)
{
    static const struct {
        const char *var, *value, *want;
    } cases[] = {
        {"QUANTD_WORKERS", "0", "QUANTD_WORKERS: must be 1..256, got 0"},
        {"QUANTD_WORKERS", " 2", "QUANTD_WORKERS: must be an integer in 1..256, got ' 2'"},
        {"QUANTD_HTTP_THREADS", "9999", "QUANTD_HTTP_THREADS: must be 1..1024, got 9999"},
        {"QUANTD_IDLE_TIMEOUT", "0", "QUANTD_IDLE_TIMEOUT: must be 1..86400, got 0"},
        {"QUANTD_QUANT_THREADS", "x",
         "QUANTD_QUANT_THREADS: must be an integer in 0..256, got 'x'"},
        {"QUANTD_QUANT_THREADS", "257", "QUANTD_QUANT_THREADS: must be 0..256, got 257"},
        {"QUANTD_MAX_ATTEMPTS", "0", "QUANTD_MAX_ATTEMPTS: must be 1..100, got 0"},
        {"QUANTD_MAX_UPLOAD", "2000T", "QUANTD_MAX_UPLOAD: must be 1..1024T, got 2000T"},
        {"QUANTD_MAX_STATS_BODY", "0", "QUANTD_MAX_STATS_BODY: must be 1..4G, got 0"},
        {"QUANTD_MAX_JSON_BODY", "-1",
         "QUANTD_MAX_JSON_BODY: must be a size like 4096, 512K or 16G (K, M, G, T: powers of "
         "1024), got '-1'"},
        {"QUANTD_LISTEN", "localhost",
         "QUANTD_LISTEN: must be HOST:PORT or [IPv6]:PORT, got 'localhost'"},
        {"QUANTD_LOG_LEVEL", "trace",
         "QUANTD_LOG_LEVEL: must be debug, info, warn or error, got 'trace'"},
        {"QUANTD_DATA_DIR", "a\nb", "QUANTD_DATA_DIR: must not contain control characters"},
        {"QUANTD_DB", "x\ty", "QUANTD_DB: must not contain control characters"},
        {"QUANTD_SOURCE_ROOTS", "/:/nonexistent-quantd-dir",
         "QUANTD_SOURCE_ROOTS: /nonexistent-quantd-dir: No such file or directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv(cases[i].var, cases[i].value, 1);
        EXPECT_ERROR(cases[i].want, NULL);
        unsetenv(cases[i].var);
    }
}
END_TEST

START_TEST(test_bad_flag_values)
{
    EXPECT_ERROR("--workers: must be 1..256, got 0", "--workers", "0");
    EXPECT_ERROR("--workers: must be 1..256, got 99999999999999999999",
                 "--workers=99999999999999999999");
    EXPECT_ERROR("--workers: missing value (--workers N)", "--workers");
    EXPECT_ERROR("--max-upload: must be 1..1024T, got 0K", "--max-upload", "0K");
    EXPECT_ERROR("--max-json-body: must be 1..1G, got 1025M", "--max-json-body", "1025M");
    EXPECT_ERROR("--max-stats-body: must be 1..4G, got 4097M", "--max-stats-body", "4097M");
    EXPECT_ERROR("--http-threads: must be 1..1024, got 0", "--http-threads", "0");
    EXPECT_ERROR("--idle-timeout: must be an integer in 1..86400, got '5s'", "--idle-timeout",
                 "5s");
    EXPECT_ERROR("--quant-threads: must be 0..256, got 1025", "--quant-threads", "1025");
    EXPECT_ERROR("--quant-threads: must be 0..256, got 300", "--quant-threads", "300");
    EXPECT_ERROR("--max-attempts: must be 1..100, got 0", "--max-attempts", "0");
    EXPECT_ERROR("--log-level: must be debug, info, warn or error, got ''", "--log-level=");
    EXPECT_ERROR("--data-dir: must not be empty", "--data-dir", "");
    EXPECT_ERROR("--db: must not be empty", "--db", "");
    EXPECT_ERROR("--port-file: must not be empty", "--port-file=");
    EXPECT_ERROR("--source-root: must not be empty", "--source-root", "");
    /* the first bad value is the one reported */
    EXPECT_ERROR("--workers: must be 1..256, got 0", "--workers=0", "--listen", "x");
}
END_TEST

/* ---- unknown names ----------------------------------------------------------------------------
 */

START_TEST(test_unknown_names)
{
    expect_file_error("[server]\nport = 80\n", "2: unknown key 'port' in [server]");
    /* a near miss: the key it probably means, and where it belongs */
    expect_file_error("[jobs]\nworker = 2\n",
                      "2: unknown key 'worker' in [jobs] (did you mean 'workers' in [jobs]?)");
    expect_file_error(
        "[limits]\nmax-connections = 5\n",
        "2: unknown key 'max-connections' in [limits] (did you mean 'max_connections' "
        "in [limits]?)");
    expect_file_error("[server]\nmax_uplaod = 1G\n",
                      "2: unknown key 'max_uplaod' in [server] (did you mean 'max_upload' in "
                      "[server]?)");
    expect_file_error("[server]\nworkers = 2\n",
                      "2: unknown key 'workers' in [server] (it belongs in [jobs])");
    expect_file_error("listen = 1.2.3.4:5\n",
                      "1: key 'listen' outside a section (it belongs in [server])");
    /* a key two sections have: both named */
    expect_file_error("[jobs]\nbusy_timeout = 5s\n", "2: unknown key 'busy_timeout' in [jobs] (it "
                                                     "belongs in [storage] or [stats])");
    expect_file_error(
        "[server]\n[database]\npath = x\n",
        "2: unknown section [database] (known: server, tls, limits, storage, jobs, stats, log)");
    expect_file_error(
        "[Server]\n",
        "1: unknown section [Server] (known: server, tls, limits, storage, jobs, stats, log)");
    expect_file_error("[jobs]\nworkers = 2\njunk\n[log]\nlevel = bogus\n",
                      "3: cannot parse (expected [section] or key = value)");
    expect_file_error("[jobs]\nworkers = 0\njunk\n", "2: workers: must be 1..256, got 0");
    expect_file_error("[jobs\nworkers = 2\n",
                      "1: cannot parse (expected [section] or key = value)");
    /* inih's line buffer holds 200 bytes: longer lines are refused rather than split */
    char text[400];
    snprintf(text, sizeof text, "[storage]\ndata_dir = /%0250d\n", 0);
    expect_file_error(text, "2: line longer than 199 characters");

    EXPECT_ERROR("unknown option '--port' (see 'quantd --help')", "--port", "80");
    EXPECT_ERROR("unknown option '--work' (see 'quantd --help')", "--work=2");
    EXPECT_ERROR("unknown option '-w' (see 'quantd --help')", "-w", "2");
    EXPECT_ERROR("unknown option '--Workers' (see 'quantd --help')", "--Workers", "2");
    EXPECT_ERROR("--help takes no value", "--help=yes");
    EXPECT_ERROR("--version takes no value", "--version=1");
}
END_TEST

/* Comments, blanks, a UTF-8 byte-order mark, "key: value", inline comments. */
START_TEST(test_file_syntax)
{
    char *conf = write_file("s.conf", "\xEF\xBB\xBF; quantd\n"
                                      "# another comment\n"
                                      "\n"
                                      "[server]\n"
                                      "  listen   =   0.0.0.0:81   ; inline comment\n"
                                      "[jobs]\n"
                                      "workers: 7\n"
                                      "[log]\n"
                                      "[storage]\n");
    loaded r;
    ck_assert_msg(LOAD(&r, "--config", conf), "%s", r.msg);
    ck_assert_str_eq(r.cfg.listen_host, "0.0.0.0");
    ck_assert_int_eq(r.cfg.listen_port, 81);
    ck_assert_int_eq(r.cfg.workers, 7);
    done(&r);
    free(conf);
}
END_TEST

/* ---- sizes ------------------------------------------------------------------------------------
 */

START_TEST(test_sizes)
{
    static const struct {
        const char *text;
        int64_t bytes;
    } good[] = {
        {"1", 1},
        {"4096", 4096},
        {"1K", 1024},
        {"1k", 1024},
        {"3M", (int64_t)3 << 20},
        {"16G", (int64_t)16 << 30},
        {"16GiB", (int64_t)16 << 30},
        {"16GB", (int64_t)16 << 30},
        {"2T", (int64_t)2 << 40},
        {"1024T", (int64_t)1 << 50},
        {"100B", 100},
        {"007", 7},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        loaded r;
        ck_assert_msg(LOAD(&r, "--max-upload", good[i].text), "%s: %s", good[i].text, r.msg);
        ck_assert_msg(r.cfg.max_upload == good[i].bytes, "%s", good[i].text);
        done(&r);
    }
    static const char *const syntax[] = {"",     "G",  "1.5G", "1 G", "1P",  "1GG",
                                         "0x10", "+1", "-1",   "1Gi", "1iB", "1e6"};
    for (size_t i = 0; i < sizeof syntax / sizeof syntax[0]; i++) {
        char want[200];
        snprintf(want, sizeof want,
                 "--max-upload: must be a size like 4096, 512K or 16G (K, M, G, T: powers of "
                 "1024), got '%s'",
                 syntax[i]);
        expect_error((const char *[]){"--max-upload", syntax[i], NULL}, want);
    }
    /* overflow of int64 (digits, then multiplication) is a range error */
    static const char *const huge[] = {"9223372036854775808", "99999999999999999999999",
                                       "8589934592G", "1025T", "1125899906842625"};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        char want[200];
        snprintf(want, sizeof want, "--max-upload: must be 1..1024T, got %s", huge[i]);
        expect_error((const char *[]){"--max-upload", huge[i], NULL}, want);
    }
}
END_TEST

/* Durations (retention, the idempotency window), booleans, choices and the settings that must
 * agree with each other (issue 9). */
START_TEST(test_security_settings)
{
    static const struct {
        const char *text;
        int64_t seconds;
    } good[] = {{"0", 0},
                {"45", 45},
                {"90s", 90},
                {"15m", 900},
                {"36h", 129600},
                {"7d", 604800},
                {"3650d", 3650 * 86400LL}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        loaded r;
        ck_assert_msg(LOAD(&r, "--job-retention", good[i].text), "%s: %s", good[i].text, r.msg);
        ck_assert_msg(r.cfg.job_retention == good[i].seconds, "%s", good[i].text);
        done(&r);
    }
    static const char *const bad[] = {"", "d", "1w", "1.5h", "-1", "1 d", "1dd", "1D"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[200];
        snprintf(want, sizeof want,
                 "--job-retention: must be a duration like 30, 90s, 15m, 24h or 7d (seconds when "
                 "bare), got '%s'",
                 bad[i]);
        expect_error((const char *[]){"--job-retention", bad[i], NULL}, want);
    }
    EXPECT_ERROR("--job-retention: must be 0..3650d, got 3651d", "--job-retention", "3651d");
    EXPECT_ERROR("--idempotency-window: must be 1m..365d, got 59", "--idempotency-window", "59");
    /* the statistics' delta log: defaults, 0 turns it off, the bounds */
    loaded f;
    ck_assert_msg(LOAD(&f, "--stats-fold-interval", "0", "--stats-fold-bytes", "1M"), "%s", f.msg);
    ck_assert(f.cfg.stats_fold_interval == 0 && f.cfg.stats_fold_bytes == (int64_t)1 << 20);
    done(&f);
    ck_assert_msg(LOAD(&f, "--stats-fold-interval", "1h"), "%s", f.msg);
    ck_assert(f.cfg.stats_fold_interval == 3600 && f.cfg.stats_fold_bytes == (int64_t)64 << 20);
    done(&f);
    ck_assert_msg(LOAD(&f, "--data-dir", "/d"), "%s", f.msg);
    ck_assert(f.cfg.stats_fold_interval == 1);
    done(&f);
    EXPECT_ERROR("--stats-fold-interval: must be 0..1h, got 61m", "--stats-fold-interval", "61m");
    EXPECT_ERROR("--stats-fold-bytes: must be 1M..16G, got 512K", "--stats-fold-bytes", "512K");
    /* the statistics' SQLite connections: busy timeout and the writer's page cache */
    ck_assert_msg(LOAD(&f, "--data-dir", "/d"), "%s", f.msg);
    ck_assert(f.cfg.stats_busy_timeout == 5 && f.cfg.stats_page_cache == (int64_t)16 << 20);
    done(&f);
    ck_assert_msg(LOAD(&f, "--stats-busy-timeout", "2m", "--stats-page-cache", "256M"), "%s",
                  f.msg);
    ck_assert(f.cfg.stats_busy_timeout == 120 && f.cfg.stats_page_cache == (int64_t)256 << 20);
    done(&f);
    EXPECT_ERROR("--stats-busy-timeout: must be 1s..1h, got 0", "--stats-busy-timeout", "0");
    EXPECT_ERROR("--stats-busy-timeout: must be 1s..1h, got 61m", "--stats-busy-timeout", "61m");
    EXPECT_ERROR("--stats-page-cache: must be 1M..16G, got 512K", "--stats-page-cache", "512K");
    /* the job store's and the tokens' SQLite connections: busy timeout */
    ck_assert_msg(LOAD(&f, "--data-dir", "/d"), "%s", f.msg);
    ck_assert(f.cfg.store_busy_timeout == 5);
    done(&f);
    ck_assert_msg(LOAD(&f, "--busy-timeout", "90s"), "%s", f.msg);
    ck_assert(f.cfg.store_busy_timeout == 90);
    done(&f);
    EXPECT_ERROR("--busy-timeout: must be 1s..1h, got 0", "--busy-timeout", "0");
    EXPECT_ERROR("--busy-timeout: must be 1s..1h, got 3601", "--busy-timeout", "3601");
    EXPECT_ERROR("--stats-page-cache: must be 1M..16G, got 17G", "--stats-page-cache", "17G");
    /* a bare --insecure takes no value from the next argument */
    loaded r;
    ck_assert_msg(LOAD(&r, "--insecure", "migrate"), "%s", r.msg);
    ck_assert(r.cfg.insecure);
    done(&r);
    ck_assert_msg(LOAD(&r, "--insecure=no", "--metrics-auth", "token"), "%s", r.msg);
    ck_assert(!r.cfg.insecure);
    ck_assert_int_eq(r.cfg.metrics_auth, QD_METRICS_TOKEN);
    done(&r);
    EXPECT_ERROR("--insecure: must be true or false (yes/no, on/off, 1/0), got 'maybe'",
                 "--insecure=maybe");
    EXPECT_ERROR("--metrics-auth: must be open or token, got 'all'", "--metrics-auth", "all");
    EXPECT_ERROR("--tls-cert and --tls-key go together ([tls] cert and key): the key is missing",
                 "--tls-cert", "/c.pem");
    EXPECT_ERROR("--tls-cert and --tls-key go together ([tls] cert and key): the certificate is "
                 "missing",
                 "--tls-key", "/k.pem");
    EXPECT_ERROR("max_body_memory (64M) is below the largest body held in memory (max_stats_body "
                 "or max_json_body, 128M): such a body could never be taken",
                 "--max-body-memory", "64M", "--max-stats-body", "128M");
    /* the flag-arity helper `quantd token` uses to leave settings to the loader */
    ck_assert_int_eq(qd_config_flag_arity("--data-dir"), 1);
    ck_assert_int_eq(qd_config_flag_arity("--data-dir=/x"), 0);
    ck_assert_int_eq(qd_config_flag_arity("--insecure"), 0);
    ck_assert_int_eq(qd_config_flag_arity("--role"), -1);
}
END_TEST

/* ---- listen -----------------------------------------------------------------------------------
 */

START_TEST(test_listen)
{
    static const struct {
        const char *text, *host;
        int port;
    } good[] = {
        {"127.0.0.1:0", "127.0.0.1", 0},
        {"0.0.0.0:65535", "0.0.0.0", 65535},
        {"localhost:80", "localhost", 80},
        {"my-host.example.org:8443", "my-host.example.org", 8443},
        {"[::1]:8080", "::1", 8080},
        {"[::]:0", "::", 0},
        {"[fe80::1:2]:9", "fe80::1:2", 9},
        {"[::ffff:10.0.0.1]:1", "::ffff:10.0.0.1", 1},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        loaded r;
        ck_assert_msg(LOAD(&r, "--listen", good[i].text), "%s: %s", good[i].text, r.msg);
        ck_assert_str_eq(r.cfg.listen_host, good[i].host);
        ck_assert_int_eq(r.cfg.listen_port, good[i].port);
        done(&r);
    }
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"8080", "must be HOST:PORT or [IPv6]:PORT, got '8080'"},
        {"[::1]", "must be HOST:PORT or [IPv6]:PORT, got '[::1]'"},
        {"[::1]8080", "must be HOST:PORT or [IPv6]:PORT, got '[::1]8080'"},
        {"::1:8080", "an IPv6 address goes in brackets, e.g. [::1]:8080, got '::1:8080'"},
        {":8080", "host missing in ':8080' (0.0.0.0:PORT or [::]:PORT for all)"},
        {"[]:8080", "host missing in '[]:8080' (0.0.0.0:PORT or [::]:PORT for all)"},
        {"host:", "port must be 0..65535, got '' in 'host:'"},
        {"host:65536", "port must be 0..65535, got '65536' in 'host:65536'"},
        {"host:-1", "port must be 0..65535, got '-1' in 'host:-1'"},
        {"host:80x", "port must be 0..65535, got '80x' in 'host:80x'"},
        {"host:99999999999999999999", "port must be 0..65535, got '99999999999999999999' in "
                                      "'host:99999999999999999999'"},
        {"[zz]:1", "bad IPv6 address 'zz'"},
        {"[127.0.0.1]:1", "bad IPv6 address '127.0.0.1'"},
        {"1.2.3.256:1", "bad host '1.2.3.256' (a name, an IPv4 address or [IPv6])"},
        {"1.2.3.4.5:1", "bad host '1.2.3.4.5' (a name, an IPv4 address or [IPv6])"},
        {"bad_host:1", "bad host 'bad_host' (a name, an IPv4 address or [IPv6])"},
        {"a..b:1", "bad host 'a..b' (a name, an IPv4 address or [IPv6])"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[300];
        snprintf(want, sizeof want, "--listen: %s", bad[i].want);
        expect_error((const char *[]){"--listen", bad[i].text, NULL}, want);
    }
}
END_TEST

/* ---- subcommands, --help, --version ------------------------------------------------------------
 */

START_TEST(test_commands)
{
    static const struct {
        const char *args[4];
        qd_command cmd;
    } cases[] = {
        {{"serve"}, QD_CMD_SERVE},
        {{"migrate"}, QD_CMD_MIGRATE},
        {{"check-config"}, QD_CMD_CHECK_CONFIG},
        {{"--workers", "2", "migrate"}, QD_CMD_MIGRATE},
        {{"check-config", "--workers", "2"}, QD_CMD_CHECK_CONFIG},
        {{"--", "migrate"}, QD_CMD_MIGRATE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        loaded r;
        ck_assert_msg(load_argv(&r, cases[i].args), "%s", r.msg);
        ck_assert_int_eq(r.cmd, cases[i].cmd);
        ck_assert(!r.exit_now);
        done(&r);
    }
    EXPECT_ERROR("unknown command 'start' (see 'quantd --help')", "start");
    EXPECT_ERROR("unknown command '-' (see 'quantd --help')", "-");
    EXPECT_ERROR("unexpected argument 'now' (see 'quantd --help')", "migrate", "now");
    EXPECT_ERROR("unknown command '--workers' (see 'quantd --help')", "--", "--workers");
}
END_TEST

START_TEST(test_version)
{
    static const char *const forms[] = {"--version", "-V"};
    for (size_t i = 0; i < 2; i++) {
        loaded r;
        ck_assert_msg(LOAD(&r, "--workers", "3", forms[i]), "%s", r.msg);
        ck_assert(r.exit_now);
        ck_assert_str_eq(r.out, "quantd " QD_VERSION "\n");
        done(&r);
    }
}
END_TEST

START_TEST(test_help)
{
    /* --help is answered before the config file and the environment are read */
    setenv("QUANTD_CONFIG", "/nonexistent/quantd.conf", 1);
    setenv("QUANTD_WORKERS", "0", 1);
    static const char *const forms[] = {"--help", "-h"};
    for (size_t i = 0; i < 2; i++) {
        loaded r;
        ck_assert_msg(LOAD(&r, "check-config", forms[i]), "%s", r.msg);
        ck_assert(r.exit_now);
        ck_assert_int_eq(r.cmd, QD_CMD_CHECK_CONFIG);
        static const char *const want[] = {"usage: quantd [serve]",
                                           "quantd migrate",
                                           "quantd check-config",
                                           QD_DEFAULT_CONFIG,
                                           "--config FILE",
                                           "QUANTD_CONFIG",
                                           "--listen HOST:PORT",
                                           "default 127.0.0.1:8080",
                                           "file [server] listen",
                                           "QUANTD_LISTEN",
                                           "--http-threads N",
                                           "QUANTD_HTTP_THREADS",
                                           "--idle-timeout SECONDS",
                                           "QUANTD_IDLE_TIMEOUT",
                                           "--max-upload SIZE",
                                           "default 16G",
                                           "QUANTD_MAX_UPLOAD",
                                           "--max-json-body SIZE",
                                           "default 4M",
                                           "QUANTD_MAX_JSON_BODY",
                                           "--max-stats-body SIZE",
                                           "default 64M",
                                           "QUANTD_MAX_STATS_BODY",
                                           "--data-dir DIR",
                                           "default ./var",
                                           "QUANTD_DATA_DIR",
                                           "--db FILE",
                                           "default DATA_DIR/quantd.db",
                                           "QUANTD_DB",
                                           "--workers N",
                                           "default 1; file [jobs] workers",
                                           "QUANTD_WORKERS",
                                           "--quant-threads N",
                                           "QUANTD_QUANT_THREADS",
                                           "--max-attempts N",
                                           "default 2",
                                           "QUANTD_MAX_ATTEMPTS",
                                           "--source-root DIR",
                                           "QUANTD_SOURCE_ROOTS",
                                           "--log-level LEVEL",
                                           "default info; file [log] level",
                                           "QUANTD_LOG_LEVEL",
                                           "--port-file FILE",
                                           "-h, --help",
                                           "-V, --version",
                                           "quantd(8)"};
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
            ck_assert_msg(strstr(r.out, want[k]), "--help lacks '%s'", want[k]);
        /* every line fits a terminal */
        for (const char *line = r.out; *line;) {
            const char *nl = strchr(line, '\n');
            ck_assert_ptr_nonnull(nl);
            ck_assert_msg(nl - line <= 80, "help line too long: %.*s", (int)(nl - line), line);
            line = nl + 1;
        }
        done(&r);
    }
}
END_TEST

/* ---- source roots -----------------------------------------------------------------------------
 */

START_TEST(test_source_roots)
{
    char *a = make_dir("a"), *b = make_dir("b"), *c = make_dir("c");
    char *ra = realpath(a, NULL), *rb = realpath(b, NULL), *rc = realpath(c, NULL);
    char *link = kit_join(dir, "link");
    ck_assert_int_eq(symlink(a, link), 0);
    loaded r;

    /* repeated flags add up; a symlink and "x/../y" are stored resolved */
    char dotted[PATH_MAX];
    snprintf(dotted, sizeof dotted, "%s/../b", a);
    ck_assert_msg(LOAD(&r, "--source-root", link,
                       "--source-root="
                       "/",
                       "--source-root", dotted),
                  "%s", r.msg);
    ck_assert_int_eq(r.cfg.n_source_roots, 3);
    ck_assert_str_eq(r.cfg.source_roots[0], ra);
    ck_assert_str_eq(r.cfg.source_roots[1], "/");
    ck_assert_str_eq(r.cfg.source_roots[2], rb);
    done(&r);

    /* file, then env replaces the file's list, then flags replace env's */
    char text[3 * PATH_MAX];
    snprintf(text, sizeof text, "[jobs]\nsource_root = %s\nsource_root = %s\n", a, b);
    char *conf = write_file("roots.conf", text);
    ck_assert_msg(LOAD(&r, "--config", conf), "%s", r.msg);
    ck_assert_int_eq(r.cfg.n_source_roots, 2);
    ck_assert_str_eq(r.cfg.source_roots[1], rb);
    done(&r);
    snprintf(text, sizeof text, "%s::%s", c, b);
    setenv("QUANTD_SOURCE_ROOTS", text, 1);
    ck_assert_msg(LOAD(&r, "--config", conf), "%s", r.msg);
    ck_assert_int_eq(r.cfg.n_source_roots, 2);
    ck_assert_str_eq(r.cfg.source_roots[0], rc);
    ck_assert_str_eq(r.cfg.source_roots[1], rb);
    done(&r);
    ck_assert_msg(LOAD(&r, "--config", conf, "--source-root", a), "%s", r.msg);
    ck_assert_int_eq(r.cfg.n_source_roots, 1);
    ck_assert_str_eq(r.cfg.source_roots[0], ra);
    done(&r);

    /* nonexistent, not a directory */
    char *missing = kit_join(dir, "missing");
    char want[PATH_MAX + 100];
    snprintf(want, sizeof want, "--source-root: %s: No such file or directory", missing);
    EXPECT_ERROR(want, "--source-root", a, "--source-root", missing);
    snprintf(want, sizeof want, "--source-root: %s: not a directory", conf);
    EXPECT_ERROR(want, "--source-root", conf);

    /* at most QD_MAX_SOURCE_ROOTS */
    const char *many[2 * QD_MAX_SOURCE_ROOTS + 3];
    size_t n = 0;
    for (int i = 0; i <= QD_MAX_SOURCE_ROOTS; i++) many[n++] = "--source-root", many[n++] = a;
    many[n] = NULL;
    snprintf(want, sizeof want, "--source-root: at most %d source roots, %s is one too many",
             QD_MAX_SOURCE_ROOTS, a);
    expect_error(many, want);
    many[n - 2] = NULL;
    ck_assert_msg(load_argv(&r, many), "%s", r.msg);
    ck_assert_int_eq(r.cfg.n_source_roots, QD_MAX_SOURCE_ROOTS);
    done(&r);

    free(missing);
    free(conf);
    free(link);
    free(a), free(b), free(c), free(ra), free(rb), free(rc);
}
END_TEST

/* A relative root is resolved against the working directory. */
START_TEST(test_source_root_relative)
{
    char *a = make_dir("rel");
    char *ra = realpath(a, NULL);
    char cwd[PATH_MAX];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(dir), 0);
    loaded r;
    bool ok = LOAD(&r, "--source-root", "rel");
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_msg(ok, "%s", r.msg);
    ck_assert_str_eq(r.cfg.source_roots[0], ra);
    done(&r);
    free(a);
    free(ra);
}
END_TEST

/* ---- print -> parse ---------------------------------------------------------------------------
 */

static char *print_to_string(const qd_config *cfg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    qd_config_print(cfg, f);
    fclose(f);
    return buf;
}

static void round_trip(const char *const *args)
{
    loaded r1, r2;
    ck_assert_msg(load_argv(&r1, args), "%s", r1.msg);
    char *printed = print_to_string(&r1.cfg);
    char *conf = write_file("printed.conf", printed);
    unsetenv("QUANTD_SOURCE_ROOTS");
    unsetenv("QUANTD_LOG_LEVEL");
    ck_assert_msg(LOAD(&r2, "--config", conf), "%s\n%s", r2.msg, printed);
    char *again = print_to_string(&r2.cfg);
    /* identical but for the first line, which names the file */
    ck_assert_str_eq(strchr(again, '\n'), strchr(printed, '\n'));
    const qd_config *a = &r1.cfg, *b = &r2.cfg;
    ck_assert_str_eq(a->listen_host, b->listen_host);
    ck_assert_int_eq(a->listen_port, b->listen_port);
    ck_assert_str_eq(a->data_dir, b->data_dir);
    ck_assert_str_eq(a->db_path, b->db_path);
    ck_assert_int_eq(a->workers, b->workers);
    ck_assert_int_eq(a->quant_threads, b->quant_threads);
    ck_assert_int_eq(a->http_threads, b->http_threads);
    ck_assert(a->max_upload == b->max_upload);
    ck_assert(a->max_json_body == b->max_json_body);
    ck_assert(a->max_stats_body == b->max_stats_body);
    ck_assert_int_eq(a->idle_timeout, b->idle_timeout);
    ck_assert_int_eq(a->max_attempts, b->max_attempts);
    ck_assert_int_eq(a->n_source_roots, b->n_source_roots);
    for (int i = 0; i < a->n_source_roots; i++)
        ck_assert_str_eq(a->source_roots[i], b->source_roots[i]);
    ck_assert_int_eq(a->log_level, b->log_level);
    ck_assert_int_eq(a->insecure, b->insecure);
    ck_assert_int_eq(a->metrics_auth, b->metrics_auth);
    ck_assert_str_eq(a->tls_priorities, b->tls_priorities);
    ck_assert(!a->tls_cert == !b->tls_cert && !a->tls_key == !b->tls_key);
    if (a->tls_cert) ck_assert_str_eq(a->tls_cert, b->tls_cert);
    ck_assert(a->max_body_memory == b->max_body_memory);
    ck_assert(a->body_min_rate == b->body_min_rate);
    ck_assert(a->job_retention == b->job_retention);
    ck_assert(a->idempotency_window == b->idempotency_window);
    ck_assert(a->stats_fold_interval == b->stats_fold_interval);
    ck_assert(a->stats_fold_bytes == b->stats_fold_bytes);
    ck_assert(a->stats_busy_timeout == b->stats_busy_timeout);
    ck_assert(a->store_busy_timeout == b->store_busy_timeout);
    ck_assert(a->stats_page_cache == b->stats_page_cache);
    ck_assert_int_eq(a->header_timeout, b->header_timeout);
    ck_assert_int_eq(a->keep_outputs, b->keep_outputs);
    ck_assert_int_eq(a->max_conns_per_ip, b->max_conns_per_ip);
    done(&r1);
    done(&r2);
    free(printed);
    free(again);
    free(conf);
}

START_TEST(test_round_trip)
{
    round_trip((const char *[]){NULL});
    char *a = make_dir("root a");
    setenv("QUANTD_SOURCE_ROOTS", a, 1);
    setenv("QUANTD_LOG_LEVEL", "warning", 1);
    round_trip((const char *[]){"--listen",
                                "[2001:db8::7]:0",
                                "--max-upload",
                                "1536",
                                "--max-json-body",
                                "3K",
                                "--max-stats-body",
                                "3G",
                                "--max-body-memory",
                                "3G",
                                "--insecure",
                                "--metrics-auth",
                                "token",
                                "--tls-cert",
                                "/etc/q/cert.pem",
                                "--tls-key",
                                "/etc/q/key.pem",
                                "--header-timeout",
                                "3",
                                "--body-min-rate",
                                "1M",
                                "--job-retention",
                                "36h",
                                "--keep-outputs",
                                "7",
                                "--idempotency-window",
                                "90m",
                                "--stats-fold-interval",
                                "0",
                                "--stats-fold-bytes",
                                "8M",
                                "--max-connections-per-ip",
                                "0",
                                "--data-dir",
                                "/srv/q data",
                                "--workers",
                                "12",
                                "--quant-threads",
                                "3",
                                "--http-threads",
                                "2",
                                "--idle-timeout",
                                "5",
                                "--max-attempts",
                                "9",
                                "--db",
                                "rel/q.db",
                                "--busy-timeout",
                                "2m",
                                "--source-root",
                                "/",
                                "--source-root",
                                a,
                                NULL});
    /* values starting with ';' (inih reads "key = ;x" as an empty value and a comment) */
    round_trip((const char *[]){"--tls-cert", ";cert.pem", "--tls-key", ";", "--db", ";q.db",
                                "--tls-priorities", ";NORMAL", NULL});

    /* the printed form itself */
    loaded r;
    ck_assert_msg(
        LOAD(&r, "--max-upload", "1536", "--max-json-body", "2048K", "--source-root", "/"), "%s",
        r.msg);
    char *printed = print_to_string(&r.cfg);
    char head[PATH_MAX + 100];
    snprintf(head, sizeof head, "; quantd %s: effective settings (config file: %s)\n", QD_VERSION,
             empty_conf);
    ck_assert_int_eq(strncmp(printed, head, strlen(head)), 0);
    ck_assert_str_eq(printed + strlen(head), "[server]\n"
                                             "listen = 127.0.0.1:8080\n"
                                             "insecure = false\n"
                                             "metrics_auth = open\n"
                                             "http_threads = 4\n"
                                             "idle_timeout = 60\n"
                                             "max_upload = 1536\n"
                                             "max_json_body = 2M\n"
                                             "max_stats_body = 64M\n"
                                             "\n"
                                             "[tls]\n"
                                             "priorities = NORMAL:-VERS-ALL:+VERS-TLS1.3:"
                                             "+VERS-TLS1.2\n"
                                             "\n"
                                             "[limits]\n"
                                             "max_connections = 1000\n"
                                             "max_connections_per_ip = 128\n"
                                             "header_timeout = 10\n"
                                             "body_timeout = 20\n"
                                             "body_min_rate = 1K\n"
                                             "max_body_memory = 256M\n"
                                             "min_free_disk = 1G\n"
                                             "max_queued_jobs = 100\n"
                                             "stats_quota = 1G\n"
                                             "\n"
                                             "[storage]\n"
                                             "data_dir = ./var\n"
                                             "db = ./var/quantd.db\n"
                                             "busy_timeout = 5s\n"
                                             "\n"
                                             "[jobs]\n"
                                             "workers = 1\n"
                                             "quant_threads = 0\n"
                                             "max_attempts = 2\n"
                                             "retention = 7d\n"
                                             "keep_outputs = 0\n"
                                             "input_timeout = 1h\n"
                                             "max_input_files = 1000\n"
                                             "max_input_name = 255\n"
                                             "source_root = /\n"
                                             "\n"
                                             "[stats]\n"
                                             "idempotency_window = 1d\n"
                                             "fold_interval = 1s\n"
                                             "fold_bytes = 64M\n"
                                             "busy_timeout = 5s\n"
                                             "page_cache = 16M\n"
                                             "\n"
                                             "[log]\n"
                                             "level = info\n");
    free(printed);
    done(&r);
    free(a);
}
END_TEST

/* systemd/quantd.conf (tests run from the repository root): as shipped it changes nothing, and
 * with every setting uncommented (but the examples that have no default: source_root and the
 * TLS certificate and key) it still equals the defaults. */
START_TEST(test_shipped_conf)
{
    const char *shipped = "systemd/quantd.conf";
    FILE *f = fopen(shipped, "r");
    ck_assert_msg(f, "%s not found: run the tests from the repository root", shipped);
    loaded defaults, as_is, uncommented;
    ck_assert_msg(LOAD(&defaults, NULL), "%s", defaults.msg);
    ck_assert_msg(LOAD(&as_is, "--config", shipped), "%s", as_is.msg);
    char *path = kit_join(dir, "uncommented.conf");
    FILE *w = fopen(path, "w");
    ck_assert_ptr_nonnull(w);
    char line[256];
    int settings = 0;
    while (fgets(line, sizeof line, f)) {
        bool setting = line[0] == ';' && line[1] >= 'a' && line[1] <= 'z';
        bool example = strncmp(line, ";source_root", 12) == 0 || strncmp(line, ";cert ", 6) == 0 ||
                       strncmp(line, ";key ", 5) == 0;
        if (setting && !example) {
            fputs(line + 1, w);
            settings++;
        } else {
            fputs(line, w);
        }
    }
    fclose(f);
    ck_assert_int_eq(fclose(w), 0);
    int keys = 0; /* every key of the file but the three examples */
    for (size_t i = 0; i < cfg_n_settings; i++) keys += cfg_settings[i].section != NULL;
    ck_assert_int_eq(settings, keys - 3);
    ck_assert_msg(LOAD(&uncommented, "--config", path), "%s", uncommented.msg);
    char *p0 = print_to_string(&defaults.cfg), *p1 = print_to_string(&as_is.cfg);
    char *p2 = print_to_string(&uncommented.cfg);
    ck_assert_str_eq(strchr(p1, '\n'), strchr(p0, '\n'));
    ck_assert_str_eq(strchr(p2, '\n'), strchr(p0, '\n'));
    free(p0), free(p1), free(p2), free(path);
    done(&defaults), done(&as_is), done(&uncommented);
}
END_TEST

/* qd_config_free leaves a zeroed struct: calling it again (or after a failed load) is safe. */
START_TEST(test_free_twice)
{
    loaded r;
    ck_assert(LOAD(&r, "--port-file", "/tmp/p", "--source-root", "/"));
    ck_assert_str_eq(r.cfg.port_file, "/tmp/p");
    qd_config_free(&r.cfg);
    qd_config_free(&r.cfg);
    ck_assert_ptr_null(r.cfg.db_path);
    free(r.out);
    ck_assert(!LOAD(&r, "--workers", "0"));
    qd_config_free(&r.cfg);
    free(r.out);
    qd_config_free(NULL);
}
END_TEST

Suite *suite_config(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_default_file_optional);
    tcase_add_test(tc, test_explicit_file_missing);
    tcase_add_test(tc, test_precedence);
    tcase_add_test(tc, test_db_path);
    tcase_add_test(tc, test_bad_file_values);
    tcase_add_test(tc, test_bad_env_values);
    tcase_add_test(tc, test_bad_flag_values);
    tcase_add_test(tc, test_quant_threads_limit);
    tcase_add_test(tc, test_unknown_names);
    tcase_add_test(tc, test_file_syntax);
    tcase_add_test(tc, test_sizes);
    tcase_add_test(tc, test_security_settings);
    tcase_add_test(tc, test_listen);
    tcase_add_test(tc, test_commands);
    tcase_add_test(tc, test_version);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_source_roots);
    tcase_add_test(tc, test_source_root_relative);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_shipped_conf);
    tcase_add_test(tc, test_free_twice);
    suite_add_tcase(s, tc);
    return s;
}
