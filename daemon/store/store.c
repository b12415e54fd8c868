/* store.c -- the store's frame: the job state names, opening the SQLite database
 * (pragmas, refusing foreign or newer files, the embedded migrations in one transaction),
 * prepared statements, and the locked transaction and stepping helpers that store_rulesets.c and
 * store_jobs.c build on.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "migrations.h"
#include "store_internal.h"
#include "write_gate.h"

/* RETURNING (the atomic claim) came with SQLite 3.35. */
#if SQLITE_VERSION_NUMBER < 3035000
#error "quantd needs SQLite 3.35 or newer"
#endif
#define MIN_SQLITE 3035000

#define BUSY_TIMEOUT_MS 5000
#define APPLICATION_ID  0x514E5444 /* "QNTD" in the file header: this file is quantd's */

static const char *const state_names[QD_JOB_STATE_COUNT] = {
    [QD_JOB_QUEUED] = "queued", [QD_JOB_RUNNING] = "running",     [QD_JOB_SUCCEEDED] = "succeeded",
    [QD_JOB_FAILED] = "failed", [QD_JOB_CANCELLED] = "cancelled", [QD_JOB_RECEIVING] = "receiving"};

const char *qd_job_state_name(qd_job_state s)
{
    return (unsigned)s < QD_JOB_STATE_COUNT ? state_names[s] : "unknown";
}

bool qd_job_state_parse(const char *name, qd_job_state *out)
{
    for (int i = 0; name && i < QD_JOB_STATE_COUNT; i++) {
        if (strcmp(name, state_names[i]) == 0) {
            *out = (qd_job_state)i;
            return true;
        }
    }
    return false;
}

int64_t qd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- statement helpers ------------------------------------------------------------------------
 */

qd_status qd_store_dberr(qd_store *s, qd_err *err, const char *op)
{
    int code = sqlite3_errcode(s->db) & 0xff;
    qd_status st = code == SQLITE_CONSTRAINT ? QD_INVALID : code == SQLITE_NOMEM ? QD_NOMEM : QD_DB;
    return qd_fail(err, st, "%s: %s", op, sqlite3_errmsg(s->db));
}

static qd_status bind_all(qd_store *s, sqlite3_stmt *st, const char *op, qd_err *err,
                          const char *types, va_list ap)
{
    int n = (int)strlen(types);
    if (n != sqlite3_bind_parameter_count(st))
        return qd_fail(err, QD_INVALID, "%s: %d values for %d parameters", op, n,
                       sqlite3_bind_parameter_count(st));
    for (int i = 0; i < n; i++) {
        int rc;
        if (types[i] == 'i') {
            rc = sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
        } else {
            const char *t = va_arg(ap, const char *);
            rc = t ? sqlite3_bind_text(st, i + 1, t, -1, SQLITE_TRANSIENT)
                   : sqlite3_bind_null(st, i + 1);
        }
        if (rc != SQLITE_OK) return qd_store_dberr(s, err, op);
    }
    return QD_OK;
}

qd_status qd_store_run(qd_store *s, qd_query q, const char *op, qd_err *err, bool *row,
                       const char *types, ...)
{
    sqlite3_stmt *st = s->q[q];
    sqlite3_reset(st); /* its code repeats the last step's error, already reported */
    sqlite3_clear_bindings(st);
    va_list ap;
    va_start(ap, types);
    qd_status r = bind_all(s, st, op, err, types, ap);
    va_end(ap);
    return r == QD_OK ? qd_store_next(s, q, op, err, row) : r;
}

qd_status qd_store_next(qd_store *s, qd_query q, const char *op, qd_err *err, bool *row)
{
    int rc = sqlite3_step(s->q[q]);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return qd_store_dberr(s, err, op);
    if (row) *row = rc == SQLITE_ROW;
    return QD_OK;
}

qd_status qd_store_col_text(qd_store *s, qd_query q, int i, char **out, qd_err *err)
{
    sqlite3_stmt *st = s->q[q];
    *out = NULL;
    if (sqlite3_column_type(st, i) == SQLITE_NULL) return QD_OK;
    const unsigned char *t = sqlite3_column_text(st, i);
    size_t len = (size_t)sqlite3_column_bytes(st, i);
    char *p = t ? malloc(len + 1) : NULL;
    if (!p) return qd_fail(err, QD_NOMEM, "out of memory reading a column");
    memcpy(p, t, len);
    p[len] = '\0';
    *out = p;
    return QD_OK;
}

int64_t qd_store_changes(qd_store *s)
{
    return sqlite3_changes(s->db);
}

qd_status qd_store_prepare(qd_store *s, const qd_query_def *defs, size_t n, qd_err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (sqlite3_prepare_v3(s->db, defs[i].sql, -1, SQLITE_PREPARE_PERSISTENT, &s->q[defs[i].id],
                               NULL) != SQLITE_OK)
            return qd_fail(err, QD_DB, "preparing \"%.60s\": %s", defs[i].sql,
                           sqlite3_errmsg(s->db));
    }
    return QD_OK;
}

/* ---- transactions -----------------------------------------------------------------------------
 */

/* A statement left mid-rows keeps its read open; every call ends with all of them reset. */
static void reset_all(qd_store *s)
{
    for (int i = 0; i < QD_Q_COUNT; i++)
        if (s->q[i] && sqlite3_stmt_busy(s->q[i])) sqlite3_reset(s->q[i]);
}

qd_status qd_store_txn(qd_store *s, bool write, qd_txn_fn fn, void *ctx, qd_err *err)
{
    if (write) qd_write_gate_enter(); /* fair turns with the statistics writer */
    pthread_mutex_lock(&s->mu);
    qd_query begin = write ? QD_Q_BEGIN_WRITE : QD_Q_BEGIN_READ;
    qd_status st = qd_store_run(s, begin, "begin transaction", err, NULL, "");
    if (st == QD_OK) {
        st = fn(s, ctx, err);
        reset_all(s);
        if (st == QD_OK) st = qd_store_run(s, QD_Q_COMMIT, "commit", err, NULL, "");
        /* The failure is already in err; a failed rollback leaves nothing more to report. */
        if (st != QD_OK && !sqlite3_get_autocommit(s->db))
            qd_store_run(s, QD_Q_ROLLBACK, "rollback", NULL, NULL, "");
        reset_all(s);
    }
    pthread_mutex_unlock(&s->mu);
    if (write) qd_write_gate_leave();
    return st;
}

/* ---- opening ----------------------------------------------------------------------------------
 */

static qd_status exec(qd_store *s, const char *sql, const char *op, qd_err *err)
{
    return sqlite3_exec(s->db, sql, NULL, NULL, NULL) == SQLITE_OK ? QD_OK
                                                                   : qd_store_dberr(s, err, op);
}

/* The first column of the first row of sql: as text into buf (cap bytes) when buf, else as an
 * int into *num. No row is an error. */
static qd_status one_value(qd_store *s, const char *sql, int *num, char *buf, size_t cap,
                           qd_err *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return qd_store_dberr(s, err, sql);
    int rc = sqlite3_step(st);
    qd_status r = QD_OK;
    if (rc == SQLITE_ROW && buf) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        snprintf(buf, cap, "%s", t ? (const char *)t : "");
    } else if (rc == SQLITE_ROW) {
        *num = sqlite3_column_int(st, 0);
    } else {
        r = rc == SQLITE_DONE ? qd_fail(err, QD_DB, "%s: no result", sql)
                              : qd_store_dberr(s, err, sql);
    }
    sqlite3_finalize(st);
    return r;
}

static qd_status open_db(qd_store *s, const char *path, qd_err *err)
{
    if (sqlite3_libversion_number() < MIN_SQLITE)
        return qd_fail(err, QD_DB, "SQLite %s is too old: quantd needs 3.35 or newer",
                       sqlite3_libversion());
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
    int rc = sqlite3_open_v2(path, &s->db, flags, NULL);
    if (rc != SQLITE_OK)
        return qd_fail(err, QD_DB, "opening database %s: %s", path,
                       s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
    /* Defensive: no writable_schema tricks; untrusted schema: SQL functions with side effects
     * cannot hide in views or triggers of a file someone else prepared. */
    if (sqlite3_extended_result_codes(s->db, 1) != SQLITE_OK ||
        sqlite3_db_config(s->db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL) != SQLITE_OK ||
        sqlite3_db_config(s->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)NULL) != SQLITE_OK ||
        sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS) != SQLITE_OK)
        return qd_store_dberr(s, err, "configuring the connection");
    return QD_OK;
}

/* WAL: readers (GET /v1/jobs, /metrics) never wait for the writer, and a commit appends to one
 * file. synchronous=FULL rather than WAL's usual NORMAL: NORMAL never corrupts, but a power cut
 * may take back the last commits, and here a commit is a promise already made to a client (a
 * 202 with a job id, a rule set stored, a job's outputs published). FULL syncs the WAL at every
 * commit; the store's writes are a few per job (progress updates are the worker's to throttle),
 * so the fsync is cheap beside the work each one records. */
static qd_status set_journal(qd_store *s, const char *path, qd_err *err)
{
    char mode[16];
    qd_status st = one_value(s, "PRAGMA journal_mode = WAL", NULL, mode, sizeof mode, err);
    if (st != QD_OK) return st;
    if (strcmp(mode, "wal") != 0)
        return qd_fail(err, QD_DB, "%s: cannot use WAL (journal_mode stays \"%s\")", path, mode);
    return exec(s, "PRAGMA synchronous = FULL", "PRAGMA synchronous", err);
}

/* While migrating: a migration is DDL only, never its own transaction or a pragma (either would
 * break the one-transaction promise or the version bookkeeping). */
static int migration_guard(void *ud, int action, const char *a, const char *b, const char *c,
                           const char *d)
{
    (void)ud, (void)a, (void)b, (void)c, (void)d;
    bool denied =
        action == SQLITE_TRANSACTION || action == SQLITE_SAVEPOINT || action == SQLITE_PRAGMA;
    return denied ? SQLITE_DENY : SQLITE_OK;
}

static qd_status apply_one(qd_store *s, const qd_migration *m, qd_err *err)
{
    sqlite3_set_authorizer(s->db, migration_guard, NULL);
    int rc = sqlite3_exec(s->db, m->sql, NULL, NULL, NULL);
    sqlite3_set_authorizer(s->db, NULL, NULL);
    if (rc == SQLITE_OK) return QD_OK;
    return qd_fail(err, QD_DB, "migration %s: %s%s", m->name, sqlite3_errmsg(s->db),
                   rc == SQLITE_AUTH ? " (a migration may not BEGIN, COMMIT, SAVEPOINT or PRAGMA)"
                                     : "");
}

/* Refuses a file that is not ours (another program's database) or is newer than this binary;
 * sets s->version. */
static qd_status check_identity(qd_store *s, const char *path, qd_err *err)
{
    int app = 0, ver = 0, objects = 0;
    qd_status st = one_value(s, "PRAGMA application_id", &app, NULL, 0, err);
    if (st == QD_OK) st = one_value(s, "PRAGMA user_version", &ver, NULL, 0, err);
    if (st == QD_OK)
        st = one_value(s, "SELECT count(*) FROM sqlite_master", &objects, NULL, 0, err);
    if (st != QD_OK) return st;
    if ((app != APPLICATION_ID && (app != 0 || ver != 0 || objects != 0)) || ver < 0)
        return qd_fail(err, QD_DB,
                       "%s is not a quantd database (application_id %#x, user_version %d, %d "
                       "schema objects); refusing to touch it",
                       path, (unsigned)app, ver, objects);
    if (ver > qd_n_migrations)
        return qd_fail(err, QD_DB,
                       "%s is newer than this quantd: schema version %d, this quantd knows up to "
                       "%d; run a newer quantd",
                       path, ver, qd_n_migrations);
    s->version = ver;
    return QD_OK;
}

/* After the pending migrations, still inside their transaction: foreign keys are off while
 * migrating (so a migration may rebuild a table), hence the explicit check; then the version. */
static qd_status stamp_version(qd_store *s, qd_err *err)
{
    int violations = 0;
    qd_status st =
        one_value(s, "SELECT count(*) FROM pragma_foreign_key_check", &violations, NULL, 0, err);
    if (st != QD_OK) return st;
    if (violations)
        return qd_fail(err, QD_DB, "the migrations leave %d foreign key violations", violations);
    /* PRAGMA takes no bound parameters; both values are this program's own integers. */
    char sql[96];
    snprintf(sql, sizeof sql, "PRAGMA application_id = %d; PRAGMA user_version = %d",
             APPLICATION_ID, qd_n_migrations);
    return exec(s, sql, "setting the schema version", err);
}

static qd_status migrate(qd_store *s, const char *path, qd_err *err)
{
    qd_status st = exec(s, "PRAGMA foreign_keys = OFF", "PRAGMA foreign_keys", err);
    if (st == QD_OK) st = exec(s, "BEGIN IMMEDIATE", "starting the migration", err);
    if (st != QD_OK) return st;
    st = check_identity(s, path, err);
    bool pending = st == QD_OK && s->version < qd_n_migrations;
    for (int i = s->version; pending && st == QD_OK && i < qd_n_migrations; i++)
        st = apply_one(s, &qd_migrations[i], err);
    if (st == QD_OK && pending) st = stamp_version(s, err);
    if (st == QD_OK) st = exec(s, "COMMIT", "committing the migration", err);
    if (st != QD_OK && !sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL); /* nothing half-applied */
    if (st == QD_OK) s->version = qd_n_migrations;
    return st;
}

static qd_status enable_foreign_keys(qd_store *s, qd_err *err)
{
    int on = 0;
    qd_status st = exec(s, "PRAGMA foreign_keys = ON", "PRAGMA foreign_keys", err);
    if (st == QD_OK) st = one_value(s, "PRAGMA foreign_keys", &on, NULL, 0, err);
    if (st == QD_OK && on != 1) st = qd_fail(err, QD_DB, "this SQLite cannot enforce foreign keys");
    return st;
}

static const qd_query_def core_queries[] = {
    {QD_Q_BEGIN_READ, "BEGIN"}, {QD_Q_BEGIN_WRITE, "BEGIN IMMEDIATE"},
    {QD_Q_COMMIT, "COMMIT"},    {QD_Q_ROLLBACK, "ROLLBACK"},
    {QD_Q_PING, "SELECT 1"},
};

static qd_status prepare_all(qd_store *s, qd_err *err)
{
    qd_status st =
        qd_store_prepare(s, core_queries, sizeof core_queries / sizeof core_queries[0], err);
    if (st == QD_OK) st = qd_store_prepare_rulesets(s, err);
    if (st == QD_OK) st = qd_store_prepare_jobs(s, err);
    for (int i = 0; st == QD_OK && i < QD_Q_COUNT; i++)
        if (!s->q[i]) st = qd_fail(err, QD_DB, "internal: statement %d has no SQL", i);
    return st;
}

qd_status qd_store_open(const char *path, qd_store **out, qd_err *err)
{
    *out = NULL;
    if (!path || !*path) return qd_fail(err, QD_INVALID, "no database path");
    qd_store *s = calloc(1, sizeof *s);
    if (!s) return qd_fail(err, QD_NOMEM, "out of memory");
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return qd_fail(err, QD_NOMEM, "cannot create the store's mutex");
    }
    qd_status st = open_db(s, path, err);
    if (st == QD_OK) st = set_journal(s, path, err);
    if (st == QD_OK) st = migrate(s, path, err);
    if (st == QD_OK) st = enable_foreign_keys(s, err);
    if (st == QD_OK) st = prepare_all(s, err);
    if (st != QD_OK) {
        qd_store_close(s);
        return st;
    }
    *out = s;
    return QD_OK;
}

void qd_store_close(qd_store *s)
{
    if (!s) return;
    for (int i = 0; i < QD_Q_COUNT; i++) sqlite3_finalize(s->q[i]);
    sqlite3_close(s->db); /* the last connection also checkpoints and removes the WAL */
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int qd_store_schema_version(qd_store *s)
{
    return s->version;
}

int qd_store_migration_count(void)
{
    return qd_n_migrations;
}

static qd_status ping_fn(qd_store *s, void *ctx, qd_err *err)
{
    bool row = false;
    (void)ctx;
    qd_status st = qd_store_run(s, QD_Q_PING, "ping", err, &row, "");
    if (st == QD_OK && !row) st = qd_fail(err, QD_DB, "ping: no answer");
    return st;
}

qd_status qd_store_ping(qd_store *s, qd_err *err)
{
    return qd_store_txn(s, false, ping_fn, NULL, err);
}
