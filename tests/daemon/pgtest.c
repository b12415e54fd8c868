/* pgtest.c -- the daemon tests' throwaway PostgreSQL (pgtest.h): finding Debian's binaries,
 * initdb and pg_ctl as an unprivileged user on a temporary directory, the watchdog that stops and
 * removes the cluster when the runner ends however it ends, and fresh databases over libpq.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pgtest.h"
#include "qdtest.h"

#define SUPERUSER   "quantd"
#define PROBLEM_MAX 1024

static struct {
    char bindir[512];
    char *dir;      /* the cluster's directory: data/, the socket, the logs */
    char *data;     /* dir/data */
    pid_t watchdog; /* stops and removes the cluster when `alive` closes */
    int alive;      /* the runner's end of the watchdog's pipe */
    uid_t uid;      /* who runs the server: the postgres user under root, else us */
    gid_t gid;
    bool as_other; /* the server runs as another user (through runuser) */
    char problem[PROBLEM_MAX];
} g_pg = {.watchdog = -1, .alive = -1};

bool qdt_pg_skipped(void)
{
    const char *v = getenv("QUANT_TEST_NO_POSTGRES");
    return v && *v && strcmp(v, "0") != 0;
}

const char *qdt_pg_socket_dir(void)
{
    return g_pg.problem[0] || !g_pg.dir ? NULL : g_pg.dir;
}

/* The suites that open PostgreSQL databases. */
static bool wanted(void)
{
    const char *suite = getenv("CK_RUN_SUITE");
    return !suite || !*suite || strcmp(suite, "store") == 0 || strcmp(suite, "store_pg") == 0 ||
           strcmp(suite, "stats_store") == 0;
}

__attribute__((format(printf, 1, 2))) static void problem(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_pg.problem, sizeof g_pg.problem, fmt, ap);
    va_end(ap);
}

/* QUANT_TEST_PG_BINDIR, else the newest /usr/lib/postgresql/VERSION/bin holding initdb. */
static bool find_bindir(void)
{
    const char *env = getenv("QUANT_TEST_PG_BINDIR");
    if (env && *env) {
        snprintf(g_pg.bindir, sizeof g_pg.bindir, "%s", env);
        return true;
    }
    glob_t gl;
    int best = -1;
    if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &gl) == 0) {
        for (size_t i = 0; i < gl.gl_pathc; i++) {
            int v = atoi(gl.gl_pathv[i] + strlen("/usr/lib/postgresql/"));
            if (v > best) {
                best = v;
                snprintf(g_pg.bindir, sizeof g_pg.bindir, "%.*s",
                         (int)(strlen(gl.gl_pathv[i]) - strlen("/initdb")), gl.gl_pathv[i]);
            }
        }
        globfree(&gl);
    }
    return best >= 0;
}

static const char *runuser_path(void)
{
    return access("/usr/sbin/runuser", X_OK) == 0 ? "/usr/sbin/runuser" : "/sbin/runuser";
}

/* Runs the cluster binary `tool` with args (NULL-terminated, at most 20) as the server's user;
 * output into log. Its exit code (kit_run's). */
static int run_tool(const char *tool, const char *const *args, const char *log)
{
    char bin[600];
    snprintf(bin, sizeof bin, "%s/%s", g_pg.bindir, tool);
    const char *argv[26];
    int n = 0;
    if (g_pg.as_other) {
        argv[n++] = "-u";
        argv[n++] = "postgres";
        argv[n++] = "--";
        argv[n++] = bin;
    }
    for (int i = 0; args[i] && n < 25; i++) argv[n++] = args[i];
    argv[n] = NULL;
    return g_pg.as_other ? kit_run(runuser_path(), "runuser", argv, log, log)
                         : kit_run(bin, tool, argv, log, log);
}

/* Who runs the server, and a directory it owns. */
static bool make_dir(void)
{
    g_pg.as_other = geteuid() == 0;
    g_pg.uid = geteuid();
    g_pg.gid = getegid();
    if (g_pg.as_other) {
        struct passwd *pw = getpwnam("postgres");
        if (!pw) {
            problem("the tests run as root and there is no postgres user to run PostgreSQL as "
                    "(scripts/install-deps installs Debian's postgresql package)");
            return false;
        }
        g_pg.uid = pw->pw_uid;
        g_pg.gid = pw->pw_gid;
    }
    /* Under /tmp whatever $TMPDIR says: the postgres user must reach it (a TMPDIR below a
     * private home would not do) and the socket's path must stay short (107 bytes at most). */
    char tmpl[] = "/tmp/quantd-pg-XXXXXX";
    g_pg.dir = mkdtemp(tmpl) ? strdup(tmpl) : NULL;
    if (!g_pg.dir) {
        problem("cannot make a temporary directory: %s", strerror(errno));
        return false;
    }
    g_pg.data = kit_join(g_pg.dir, "data");
    if (g_pg.as_other && chown(g_pg.dir, g_pg.uid, g_pg.gid) != 0) {
        problem("cannot give %s to the postgres user: %s", g_pg.dir, strerror(errno));
        return false;
    }
    return true;
}

/* Local connections as anyone but qdt_pw are trusted; qdt_pw must give its password (the
 * password cases). */
static bool write_hba(void)
{
    char *hba = kit_join(g_pg.data, "pg_hba.conf");
    const char *text = "local all qdt_pw scram-sha-256\nlocal all all trust\n";
    bool ok = kit_write_file(hba, text, strlen(text)) == 0 && chmod(hba, 0644) == 0;
    if (!ok) problem("cannot write %s: %s", hba, strerror(errno));
    free(hba);
    return ok;
}

static bool init_and_start(void)
{
    char *initlog = kit_join(g_pg.dir, "initdb.log"), *serverlog = kit_join(g_pg.dir, "server.log");
    const char *init[] = {"-D",        g_pg.data, "-U",   SUPERUSER,    "-A", "trust",
                          "--no-sync", "-E",      "UTF8", "--locale=C", NULL};
    bool ok = run_tool("initdb", init, initlog) == 0;
    if (!ok) problem("initdb failed; see %s", initlog);
    ok = ok && write_hba();
    char opts[700];
    snprintf(opts, sizeof opts,
             "-c listen_addresses='' -k %s -c fsync=off -c synchronous_commit=off "
             "-c full_page_writes=off -c wal_level=minimal -c max_wal_senders=0",
             g_pg.dir);
    const char *start[] = {"-D", g_pg.data, "-l", serverlog, "-w", "-t",
                           "60", "-o",      opts, "start",   NULL};
    if (ok && run_tool("pg_ctl", start, initlog) != 0) {
        problem("pg_ctl start failed; see %s and %s", initlog, serverlog);
        ok = false;
    }
    free(initlog);
    free(serverlog);
    return ok;
}

/* The watchdog: waits for the runner's end of the pipe to close (at qdt_pg_stop, or when the
 * runner dies), then stops the server and removes the directory. */
static void watch(int fd)
{
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    char c;
    while (read(fd, &c, 1) < 0 && errno == EINTR) {
    }
    const char *stop[] = {"-D", g_pg.data, "-m", "immediate", "-w", "stop", NULL};
    run_tool("pg_ctl", stop, NULL);
    kit_rmtree(g_pg.dir);
    _exit(0);
}

static bool start_watchdog(void)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return false;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return false;
    }
    if (pid == 0) {
        close(fds[1]);
        watch(fds[0]);
    }
    close(fds[0]);
    g_pg.watchdog = pid;
    g_pg.alive = fds[1];
    return true;
}

void qdt_pg_start(void)
{
    if (qdt_pg_skipped()) {
        fprintf(stderr, "pgtest: QUANT_TEST_NO_POSTGRES is set: the PostgreSQL cases are left "
                        "out\n");
        return;
    }
    if (!wanted()) return;
    double t0 = kit_now();
    char initdb[600];
    bool found = find_bindir();
    snprintf(initdb, sizeof initdb, "%s/initdb", g_pg.bindir);
    if (found && access(initdb, X_OK) != 0) {
        problem("PostgreSQL: %s cannot be run (QUANT_TEST_PG_BINDIR names the directory of "
                "initdb and pg_ctl)",
                initdb);
        return;
    }
    if (!found) {
        problem("PostgreSQL is not installed: no /usr/lib/postgresql/VERSION/bin/initdb (run "
                "scripts/install-deps, set QUANT_TEST_PG_BINDIR, or QUANT_TEST_NO_POSTGRES=1 to "
                "leave these cases out)");
        return;
    }
    if (!make_dir()) return;
    if (!start_watchdog()) {
        problem("cannot start the cluster's watchdog: %s", strerror(errno));
        kit_rmtree(g_pg.dir);
        return;
    }
    if (init_and_start())
        fprintf(stderr, "pgtest: PostgreSQL (%s) up in %.1f s on %s\n", g_pg.bindir, kit_now() - t0,
                g_pg.dir);
}

void qdt_pg_stop(void)
{
    if (g_pg.alive < 0) return;
    close(g_pg.alive);
    g_pg.alive = -1;
    int ws;
    while (waitpid(g_pg.watchdog, &ws, 0) < 0 && errno == EINTR) {
    }
    free(g_pg.data);
    free(g_pg.dir);
    g_pg.data = g_pg.dir = NULL;
}

/* ---- databases --------------------------------------------------------------------------------
 */

char *qdt_pg_conninfo(const char *db, const char *user, const char *extra)
{
    ck_assert_msg(!g_pg.problem[0] && g_pg.dir, "no PostgreSQL for this case: %s",
                  g_pg.problem[0] ? g_pg.problem : "the cluster was not started");
    char *s = NULL;
    ck_assert(asprintf(&s, "host=%s user=%s dbname=%s%s%s", g_pg.dir, user ? user : SUPERUSER, db,
                       extra ? " " : "", extra ? extra : "") > 0);
    return s;
}

static PGconn *connect_ok(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    ck_assert_msg(c && PQstatus(c) == CONNECTION_OK, "connect %s: %s", conninfo,
                  c ? PQerrorMessage(c) : "out of memory");
    return c;
}

void qdt_pg_exec(const char *conninfo, const char *sql)
{
    PGconn *c = connect_ok(conninfo);
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    ck_assert_msg(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
}

char *qdt_pg_text(const char *conninfo, const char *sql)
{
    PGconn *c = connect_ok(conninfo);
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
    char *out = strdup(PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    PQfinish(c);
    ck_assert_ptr_nonnull(out);
    return out;
}

char *qdt_pg_new_db(void)
{
    static int counter;
    char name[64], sql[128];
    snprintf(name, sizeof name, "qdt_%ld_%d", (long)getpid(), ++counter);
    char *admin = qdt_pg_conninfo("postgres", NULL, NULL);
    PGconn *c = connect_ok(admin);
    /* From 15 on, copying the template's files is about twice as fast as logging them. */
    snprintf(sql, sizeof sql, "CREATE DATABASE %s%s", name,
             PQserverVersion(c) >= 150000 ? " STRATEGY = FILE_COPY" : "");
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    free(admin);
    return qdt_pg_conninfo(name, NULL, NULL);
}
