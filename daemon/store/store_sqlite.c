/* store_sqlite.c -- the SQLite engine's frame and its table of operations (store_engine.h):
 * opening the database as its owner through the SQLite layer (db.c: the connection, its pragmas,
 * statements, transactions), refusing foreign or newer files, the embedded migrations in one
 * transaction, and the locked transaction and stepping helpers that store_sqlite_rulesets.c and
 * store_sqlite_jobs.c build on.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "migrations.h"
#include "store_sqlite.h"
#include "write_gate.h"

#define APPLICATION_ID 0x514E5444 /* "QNTD" in the file header: this file is quantd's */

/* ---- statement helpers ------------------------------------------------------------------------
 */

static qd_status bind_all(qd_sq *s, sqlite3_stmt *st, const char *op, qd_err *err,
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
        if (rc != SQLITE_OK) return qd_db_fail(s->db, err, op);
    }
    return QD_OK;
}

qd_status qd_sq_run(qd_sq *s, qd_query q, const char *op, qd_err *err, bool *row, const char *types,
                    ...)
{
    sqlite3_stmt *st = s->q[q];
    sqlite3_reset(st); /* its code repeats the last step's error, already reported */
    sqlite3_clear_bindings(st);
    va_list ap;
    va_start(ap, types);
    qd_status r = bind_all(s, st, op, err, types, ap);
    va_end(ap);
    return r == QD_OK ? qd_sq_next(s, q, op, err, row) : r;
}

qd_status qd_sq_next(qd_sq *s, qd_query q, const char *op, qd_err *err, bool *row)
{
    int rc = sqlite3_step(s->q[q]);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return qd_db_fail(s->db, err, op);
    if (row) *row = rc == SQLITE_ROW;
    return QD_OK;
}

qd_status qd_sq_col_text(qd_sq *s, qd_query q, int i, char **out, qd_err *err)
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

int64_t qd_sq_changes(qd_sq *s)
{
    return sqlite3_changes(qd_db_sqlite(s->db));
}

qd_status qd_sq_prepare(qd_sq *s, const qd_db_stmt_def *defs, size_t n, qd_err *err)
{
    return qd_db_prepare(s->db, defs, n, s->q, QD_Q_COUNT, err);
}

/* ---- transactions -----------------------------------------------------------------------------
 */

/* A statement left mid-rows keeps its read open; every call ends with all of them reset. */
static void reset_all(qd_sq *s)
{
    for (int i = 0; i < QD_Q_COUNT; i++)
        if (s->q[i] && sqlite3_stmt_busy(s->q[i])) sqlite3_reset(s->q[i]);
}

qd_status qd_sq_txn(qd_sq *s, bool write, qd_sq_txn_fn fn, void *ctx, qd_err *err)
{
    if (write) qd_write_gate_enter(); /* fair turns with the statistics writer */
    pthread_mutex_lock(&s->mu);
    qd_status st = qd_db_begin(s->db, write, err);
    if (st == QD_OK) {
        st = fn(s, ctx, err);
        reset_all(s);
        if (st == QD_OK) st = qd_db_commit(s->db, err);
        /* The failure is already in err; a failed rollback leaves nothing more to report. */
        if (st != QD_OK) qd_db_rollback(s->db);
        reset_all(s);
    }
    pthread_mutex_unlock(&s->mu);
    if (write) qd_write_gate_leave();
    return st;
}

/* ---- opening ----------------------------------------------------------------------------------
 */

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

static qd_status apply_one(qd_sq *s, const qd_migration *m, qd_err *err)
{
    sqlite3 *h = qd_db_sqlite(s->db);
    sqlite3_set_authorizer(h, migration_guard, NULL);
    int rc = sqlite3_exec(h, m->sql, NULL, NULL, NULL);
    sqlite3_set_authorizer(h, NULL, NULL);
    if (rc == SQLITE_OK) return QD_OK;
    return qd_fail(err, QD_DB, "migration %s: %s%s", m->name, sqlite3_errmsg(h),
                   rc == SQLITE_AUTH ? " (a migration may not BEGIN, COMMIT, SAVEPOINT or PRAGMA)"
                                     : "");
}

/* Refuses a file that is not ours (another program's database) or is newer than this binary;
 * sets s->version. */
static qd_status check_identity(qd_sq *s, const char *path, qd_err *err)
{
    int app = 0, ver = 0, objects = 0;
    qd_status st = qd_db_int(s->db, "PRAGMA application_id", &app, err);
    if (st == QD_OK) st = qd_db_int(s->db, "PRAGMA user_version", &ver, err);
    if (st == QD_OK) st = qd_db_int(s->db, "SELECT count(*) FROM sqlite_master", &objects, err);
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
static qd_status stamp_version(qd_sq *s, qd_err *err)
{
    int violations = 0;
    qd_status st =
        qd_db_int(s->db, "SELECT count(*) FROM pragma_foreign_key_check", &violations, err);
    if (st != QD_OK) return st;
    if (violations)
        return qd_fail(err, QD_DB, "the migrations leave %d foreign key violations", violations);
    /* PRAGMA takes no bound parameters; both values are this program's own integers. */
    char sql[96];
    snprintf(sql, sizeof sql, "PRAGMA application_id = %d; PRAGMA user_version = %d",
             APPLICATION_ID, qd_n_migrations);
    return qd_db_exec(s->db, sql, "setting the schema version", err);
}

/* The pending migrations in one write transaction: all of them or, on any failure, nothing. */
static qd_status migrate(qd_sq *s, const char *path, qd_err *err)
{
    qd_status st = qd_db_exec(s->db, "PRAGMA foreign_keys = OFF", "PRAGMA foreign_keys", err);
    if (st == QD_OK) st = qd_db_begin(s->db, true, err);
    if (st != QD_OK) return st;
    st = check_identity(s, path, err);
    bool pending = st == QD_OK && s->version < qd_n_migrations;
    for (int i = s->version; pending && st == QD_OK && i < qd_n_migrations; i++)
        st = apply_one(s, &qd_migrations[i], err);
    if (st == QD_OK && pending) st = stamp_version(s, err);
    if (st == QD_OK) st = qd_db_commit(s->db, err);
    if (st != QD_OK) qd_db_rollback(s->db); /* nothing half-applied */
    if (st == QD_OK) s->version = qd_n_migrations;
    return st;
}

static qd_status enable_foreign_keys(qd_sq *s, qd_err *err)
{
    int on = 0;
    qd_status st = qd_db_exec(s->db, "PRAGMA foreign_keys = ON", "PRAGMA foreign_keys", err);
    if (st == QD_OK) st = qd_db_int(s->db, "PRAGMA foreign_keys", &on, err);
    if (st == QD_OK && on != 1) st = qd_fail(err, QD_DB, "this SQLite cannot enforce foreign keys");
    return st;
}

static const qd_db_stmt_def core_queries[] = {
    {QD_Q_PING, "SELECT 1"},
};

static qd_status prepare_all(qd_sq *s, qd_err *err)
{
    qd_status st =
        qd_sq_prepare(s, core_queries, sizeof core_queries / sizeof core_queries[0], err);
    if (st == QD_OK) st = qd_sq_prepare_rulesets(s, err);
    if (st == QD_OK) st = qd_sq_prepare_jobs(s, err);
    if (st == QD_OK) st = qd_db_prepared_all(s->db, s->q, QD_Q_COUNT, err);
    return st;
}

static void sqlite_close(void *cls)
{
    qd_sq *s = cls;
    if (!s) return;
    qd_db_finalize(s->q, QD_Q_COUNT);
    qd_db_close(s->db);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static qd_status sqlite_open(const char *path, const qd_db_tuning *tuning, void **out, qd_err *err)
{
    qd_sq *s = calloc(1, sizeof *s);
    if (!s) return qd_fail(err, QD_NOMEM, "out of memory");
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return qd_fail(err, QD_NOMEM, "cannot create the store's mutex");
    }
    qd_status st = qd_db_open_tuned(path, QD_DB_OWNER, tuning, &s->db, err);
    if (st == QD_OK) st = migrate(s, path, err);
    if (st == QD_OK) st = enable_foreign_keys(s, err);
    if (st == QD_OK) st = prepare_all(s, err);
    if (st != QD_OK) {
        sqlite_close(s);
        return st;
    }
    *out = s;
    return QD_OK;
}

static int sqlite_schema_version(void *cls)
{
    return ((qd_sq *)cls)->version;
}

static qd_status ping_fn(qd_sq *s, void *ctx, qd_err *err)
{
    bool row = false;
    (void)ctx;
    qd_status st = qd_sq_run(s, QD_Q_PING, "ping", err, &row, "");
    if (st == QD_OK && !row) st = qd_fail(err, QD_DB, "ping: no answer");
    return st;
}

qd_status qd_sqlite_ping(void *cls, qd_err *err)
{
    return qd_sq_txn(cls, false, ping_fn, NULL, err);
}

/* ---- the engine's table -----------------------------------------------------------------------
 */

const qd_store_ops qd_store_sqlite_ops = {
    .name = "sqlite",
    .open = sqlite_open,
    .close = sqlite_close,
    .schema_version = sqlite_schema_version,
    .ping = qd_sqlite_ping,
    .ruleset_put = qd_sqlite_ruleset_put,
    .ruleset_get = qd_sqlite_ruleset_get,
    .ruleset_list = qd_sqlite_ruleset_list,
    .ruleset_delete = qd_sqlite_ruleset_delete,
    .job_insert = qd_sqlite_job_insert,
    .job_get = qd_sqlite_job_get,
    .job_list = qd_sqlite_job_list,
    .job_claim = qd_sqlite_job_claim,
    .job_progress = qd_sqlite_job_progress,
    .job_finish = qd_sqlite_job_finish,
    .job_requeue = qd_sqlite_job_requeue,
    .job_received = qd_sqlite_job_received,
    .job_set_unused = qd_sqlite_job_set_unused,
    .job_end_receiving = qd_sqlite_job_end_receiving,
    .job_cancel_queued = qd_sqlite_job_cancel_queued,
    .job_delete = qd_sqlite_job_delete,
    .job_recover = qd_sqlite_job_recover,
    .job_outputs = qd_sqlite_job_outputs,
    .job_report = qd_sqlite_job_report,
    .jobs_expiring = qd_sqlite_jobs_expiring,
    .job_outputs_removed = qd_sqlite_job_outputs_removed,
    .job_owners = qd_sqlite_job_owners,
    .job_counts = qd_sqlite_job_counts,
    .tokens_open = qd_sqlite_tokens_open,
    .tokens_close = qd_sqlite_tokens_close,
    .token_insert = qd_sqlite_token_insert,
    .token_list = qd_sqlite_token_list,
    .token_delete = qd_sqlite_token_delete,
    .token_any = qd_sqlite_token_any,
    .token_lookup = qd_sqlite_token_lookup,
};
