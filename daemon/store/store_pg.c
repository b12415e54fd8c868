/* store_pg.c -- the PostgreSQL engine's frame and its table of operations (store_engine.h):
 * connecting through libpq (a password only through libpq's own mechanisms; messages name the
 * server by its masked connection string), the migrations in migrations/postgresql/ applied once
 * under an advisory lock (instances starting together wait for each other; a database newer than
 * the binary is refused), the named prepared statements, and the helpers that run one statement
 * or one transaction under the connection's mutex, reconnecting a connection that broke.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "migrations.h"
#include "store_pg.h"

/* The advisory lock the migrations run under: "QNTD", as the SQLite file's application_id. */
#define MIGRATION_LOCK  "1364087876"
#define MAX_PARAMS      10
#define CONNECT_TIMEOUT "10" /* seconds, unless the string or PGCONNECT_TIMEOUT says otherwise */
#define LIBPQ_MSG_MAX   400

/* ---- errors -----------------------------------------------------------------------------------
 */

/* libpq's message for r (or the connection's when r is NULL), one line, password redacted. */
static void pq_message(qd_pg *p, const PGresult *r, char *out, size_t cap)
{
    const char *m = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (!m) m = PQerrorMessage(p->conn);
    snprintf(out, cap, "%s", m && *m ? m : "no message");
    for (char *c = out; *c; c++)
        if (*c == '\n') *c = *(c + 1) ? ' ' : '\0';
}

static qd_status pg_fail(qd_pg *p, const PGresult *r, qd_err *err, const char *op)
{
    char msg[LIBPQ_MSG_MAX];
    pq_message(p, r, msg, sizeof msg);
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    snprintf(p->sqlstate, sizeof p->sqlstate, "%s", state ? state : "");
    if (PQstatus(p->conn) != CONNECTION_OK)
        return qd_fail(err, QD_DB, "%s: the connection to PostgreSQL (%s) was lost: %s", op,
                       p->where, msg);
    bool constraint = state && strncmp(state, "23", 2) == 0;
    return qd_fail(err, constraint ? QD_INVALID : QD_DB, "%s: PostgreSQL: %s", op, msg);
}

/* ---- statements -------------------------------------------------------------------------------
 */

static qd_status run_va(qd_pg *p, qd_pg_query q, const char *op, qd_err *err, PGresult **res,
                        const char *types, va_list ap)
{
    int n = (int)strlen(types);
    if (n > MAX_PARAMS) return qd_fail(err, QD_INVALID, "%s: %d parameters", op, n);
    char nums[MAX_PARAMS][24], name[16];
    const char *values[MAX_PARAMS];
    int lengths[MAX_PARAMS] = {0}, formats[MAX_PARAMS] = {0};
    for (int i = 0; i < n; i++) {
        if (types[i] == 'i') {
            snprintf(nums[i], sizeof nums[i], "%lld", (long long)va_arg(ap, int64_t));
            values[i] = nums[i];
        } else if (types[i] == 'b') {
            values[i] = (const char *)va_arg(ap, const uint8_t *);
            lengths[i] = QD_TOKEN_HASH_LEN;
            formats[i] = 1;
        } else {
            values[i] = va_arg(ap, const char *);
        }
    }
    snprintf(name, sizeof name, "q%d", (int)q);
    PGresult *r = PQexecPrepared(p->conn, name, n, values, lengths, formats, 0);
    ExecStatusType rs = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (rs != PGRES_TUPLES_OK && rs != PGRES_COMMAND_OK) {
        qd_status st = pg_fail(p, r, err, op);
        PQclear(r);
        return st;
    }
    p->sqlstate[0] = '\0';
    if (res)
        *res = r;
    else
        PQclear(r);
    return QD_OK;
}

qd_status qd_pg_run(qd_pg *p, qd_pg_query q, const char *op, qd_err *err, PGresult **res,
                    const char *types, ...)
{
    if (res) *res = NULL;
    va_list ap;
    va_start(ap, types);
    qd_status st = run_va(p, q, op, err, res, types, ap);
    va_end(ap);
    return st;
}

int64_t qd_pg_changes(const PGresult *r)
{
    return strtoll(PQcmdTuples((PGresult *)r), NULL, 10);
}

int64_t qd_pg_int(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

qd_status qd_pg_text(const PGresult *r, int row, int col, char **out, qd_err *err)
{
    *out = NULL;
    if (PQgetisnull(r, row, col)) return QD_OK;
    *out = strdup(PQgetvalue(r, row, col));
    return *out ? QD_OK : qd_fail(err, QD_NOMEM, "out of memory reading a column");
}

/* Runs sql (no parameters, no rows wanted, or rows in *res when res is not NULL). */
static qd_status exec(qd_pg *p, const char *sql, const char *op, qd_err *err, PGresult **res)
{
    PGresult *r = PQexec(p->conn, sql);
    ExecStatusType rs = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (rs != PGRES_TUPLES_OK && rs != PGRES_COMMAND_OK) {
        qd_status st = pg_fail(p, r, err, op);
        PQclear(r);
        return st;
    }
    if (res)
        *res = r;
    else
        PQclear(r);
    return QD_OK;
}

static const qd_pg_stmt_def core_sql[] = {
    {QD_PGQ_PING, "SELECT 1"},
};

static qd_status prepare_list(qd_pg *p, const qd_pg_stmt_def *defs, size_t n, bool *seen,
                              qd_err *err)
{
    for (size_t i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "q%d", (int)defs[i].id);
        PGresult *r = PQprepare(p->conn, name, defs[i].sql, 0, NULL);
        qd_err why = {{0}};
        qd_status st = QD_OK;
        if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) st = pg_fail(p, r, &why, "preparing");
        PQclear(r);
        if (st != QD_OK) return qd_fail(err, st, "%s \"%.60s\"", why.message, defs[i].sql);
        seen[defs[i].id] = true;
    }
    return QD_OK;
}

/* Prepares every file's statements on the (new) connection; all of them must have SQL. */
static qd_status prepare_all(qd_pg *p, qd_err *err)
{
    bool seen[QD_PGQ_COUNT] = {false};
    const struct {
        const qd_pg_stmt_def *defs;
        size_t n;
    } lists[] = {{core_sql, sizeof core_sql / sizeof core_sql[0]},
                 {qd_pg_ruleset_sql, qd_pg_ruleset_sql_n},
                 {qd_pg_job_sql, qd_pg_job_sql_n},
                 {qd_pg_token_sql, qd_pg_token_sql_n}};
    qd_status st = QD_OK;
    for (size_t i = 0; st == QD_OK && i < sizeof lists / sizeof lists[0]; i++)
        st = prepare_list(p, lists[i].defs, lists[i].n, seen, err);
    for (int i = 0; st == QD_OK && i < QD_PGQ_COUNT; i++)
        if (!seen[i]) st = qd_fail(err, QD_INVALID, "PostgreSQL statement %d has no SQL", i);
    return st;
}

/* ---- calls ------------------------------------------------------------------------------------
 */

/* A connection that broke (the server restarted, the network failed) is reset once per call. */
static qd_status ensure_connected(qd_pg *p, qd_err *err)
{
    if (PQstatus(p->conn) == CONNECTION_OK) return QD_OK;
    PQreset(p->conn);
    if (PQstatus(p->conn) != CONNECTION_OK) {
        char msg[LIBPQ_MSG_MAX];
        pq_message(p, NULL, msg, sizeof msg);
        return qd_fail(err, QD_DB, "PostgreSQL (%s) is unreachable: %s", p->where, msg);
    }
    return prepare_all(p, err);
}

qd_status qd_pg_call(qd_pg *p, bool txn, qd_pg_fn fn, void *ctx, qd_err *err)
{
    pthread_mutex_lock(&p->mu);
    qd_status st = ensure_connected(p, err);
    if (st == QD_OK && txn) st = exec(p, "BEGIN", "BEGIN", err, NULL);
    if (st == QD_OK) {
        st = fn(p, ctx, err);
        if (txn && st == QD_OK) st = exec(p, "COMMIT", "COMMIT", err, NULL);
        /* The failure is already in err; a failed rollback leaves nothing more to report. */
        if (txn && st != QD_OK && PQtransactionStatus(p->conn) != PQTRANS_IDLE)
            PQclear(PQexec(p->conn, "ROLLBACK"));
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* ---- migrations -------------------------------------------------------------------------------
 */

/* The schema's version under the lock: 0 for an empty schema; refuses a schema that holds tables
 * but no quantd_schema (another program's database) and one newer than this binary. */
static qd_status read_version(qd_pg *p, int *version, qd_err *err)
{
    PGresult *r = NULL;
    qd_status st = exec(p,
                        "SELECT to_regclass('quantd_schema') IS NOT NULL, (SELECT count(*) FROM "
                        "pg_tables WHERE schemaname = current_schema())",
                        "reading the schema version", err, &r);
    if (st != QD_OK) return st;
    bool ours = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    long long tables = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    PQclear(r);
    *version = 0;
    if (!ours && tables > 0)
        return qd_fail(err, QD_DB,
                       "PostgreSQL (%s): the schema holds %lld tables and no quantd_schema: not a "
                       "quantd database; refusing to touch it",
                       p->where, tables);
    if (!ours) return QD_OK;
    st = exec(p, "SELECT version FROM quantd_schema", "reading the schema version", err, &r);
    if (st != QD_OK) return st;
    bool one = PQntuples(r) == 1;
    *version = one ? (int)strtol(PQgetvalue(r, 0, 0), NULL, 10) : -1;
    PQclear(r);
    if (!one) return qd_fail(err, QD_DB, "PostgreSQL (%s): quantd_schema has no version", p->where);
    if (*version > qd_pg_n_migrations)
        return qd_fail(err, QD_DB,
                       "PostgreSQL (%s) is newer than this quantd: schema version %d, this quantd "
                       "knows up to %d; run a newer quantd",
                       p->where, *version, qd_pg_n_migrations);
    return QD_OK;
}

static qd_status apply_one(qd_pg *p, const qd_migration *m, qd_err *err)
{
    char op[96];
    snprintf(op, sizeof op, "migration %s", m->name);
    qd_status st = exec(p, m->sql, op, err, NULL);
    if (st == QD_OK && PQtransactionStatus(p->conn) != PQTRANS_INTRANS)
        st = qd_fail(err, QD_DB,
                     "migration %s ended the start-up transaction (a migration may not "
                     "BEGIN, COMMIT or ROLLBACK)",
                     m->name);
    return st;
}

static qd_status stamp_version(qd_pg *p, qd_err *err)
{
    char sql[160];
    snprintf(sql, sizeof sql,
             "INSERT INTO quantd_schema (version) VALUES (%d) ON CONFLICT (one) DO UPDATE SET "
             "version = EXCLUDED.version",
             qd_pg_n_migrations);
    return exec(p, sql, "setting the schema version", err, NULL);
}

/* The pending migrations in one transaction, after the advisory lock: an instance that opens at
 * the same time waits here, then finds them applied. All of them or, on any failure, nothing. */
static qd_status migrate(qd_pg *p, qd_err *err)
{
    qd_status st = exec(p, "BEGIN", "BEGIN", err, NULL);
    if (st == QD_OK)
        st = exec(p, "SELECT pg_advisory_xact_lock(" MIGRATION_LOCK ")",
                  "taking the migrations' lock", err, NULL);
    int version = 0;
    if (st == QD_OK) st = read_version(p, &version, err);
    bool pending = st == QD_OK && version < qd_pg_n_migrations;
    for (int i = version; pending && st == QD_OK && i < qd_pg_n_migrations; i++)
        st = apply_one(p, &qd_pg_migrations[i], err);
    if (st == QD_OK && pending) st = stamp_version(p, err);
    if (st == QD_OK) st = exec(p, "COMMIT", "COMMIT", err, NULL);
    if (st != QD_OK && PQtransactionStatus(p->conn) != PQTRANS_IDLE)
        PQclear(PQexec(p->conn, "ROLLBACK")); /* nothing half-applied */
    if (st == QD_OK) p->version = qd_pg_n_migrations;
    return st;
}

/* The tokens' connection does not migrate: the schema must be the one this binary knows. */
static qd_status check_version(qd_pg *p, qd_err *err)
{
    int version = 0;
    qd_status st = read_version(p, &version, err);
    if (st == QD_OK && version != qd_pg_n_migrations)
        st = qd_fail(err, QD_DB,
                     "PostgreSQL (%s): schema version %d, this quantd needs %d (open "
                     "the store first)",
                     p->where, version, qd_pg_n_migrations);
    if (st == QD_OK) p->version = version;
    return st;
}

/* ---- connecting -------------------------------------------------------------------------------
 */

static void no_notices(void *arg, const char *message)
{
    (void)arg, (void)message; /* the store's statements raise none worth a log line */
}

/* libpq's connection with quantd's defaults under target's own settings: target is expanded in
 * place of dbname, so what it says wins over the connect timeout given before it. */
static PGconn *open_conn(const char *target)
{
    const char *keys[4], *vals[4];
    int n = 0;
    if (!getenv("PGCONNECT_TIMEOUT")) keys[n] = "connect_timeout", vals[n++] = CONNECT_TIMEOUT;
    keys[n] = "fallback_application_name", vals[n++] = "quantd";
    keys[n] = "dbname", vals[n++] = target;
    keys[n] = NULL, vals[n] = NULL;
    return PQconnectdbParams(keys, vals, 1);
}

void qd_pg_disconnect(qd_pg *p)
{
    if (!p) return;
    PQfinish(p->conn);
    pthread_mutex_destroy(&p->mu);
    free(p->where);
    free(p);
}

static qd_status connect_fail(qd_pg *p, const char *target, qd_err *err)
{
    char raw[LIBPQ_MSG_MAX], msg[LIBPQ_MSG_MAX];
    const char *m = p->conn ? PQerrorMessage(p->conn) : "out of memory";
    snprintf(raw, sizeof raw, "%s", m && *m ? m : "no message");
    for (char *c = raw; *c; c++)
        if (*c == '\n') *c = *(c + 1) ? ' ' : '\0';
    qd_pg_redact(target, raw, msg, sizeof msg);
    return qd_fail(err, QD_DB, "cannot connect to PostgreSQL (%s): %s", p->where, msg);
}

qd_status qd_pg_connect(const char *target, bool migrate_schema, qd_pg **out, qd_err *err)
{
    *out = NULL;
    qd_pg *p = calloc(1, sizeof *p);
    if (!p) return qd_fail(err, QD_NOMEM, "out of memory");
    p->where = qd_pg_mask(target);
    if (!p->where || pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p->where);
        free(p);
        return qd_fail(err, QD_NOMEM, "out of memory");
    }
    p->conn = open_conn(target);
    qd_status st = QD_OK;
    if (!p->conn || PQstatus(p->conn) != CONNECTION_OK) st = connect_fail(p, target, err);
    if (st == QD_OK) PQsetNoticeProcessor(p->conn, no_notices, NULL);
    if (st == QD_OK) st = migrate_schema ? migrate(p, err) : check_version(p, err);
    if (st == QD_OK) st = prepare_all(p, err);
    if (st != QD_OK) {
        qd_pg_disconnect(p);
        return st;
    }
    *out = p;
    return QD_OK;
}

/* ---- the engine's frame -----------------------------------------------------------------------
 */

static qd_status pg_open(const char *target, const qd_db_tuning *tuning, void **cls, qd_err *err)
{
    (void)tuning; /* SQLite's busy timeout and page cache: PostgreSQL has its own settings */
    return qd_pg_connect(target, true, (qd_pg **)cls, err);
}

static qd_status pg_tokens_open(const char *target, const qd_db_tuning *tuning, void **cls,
                                qd_err *err)
{
    (void)tuning;
    return qd_pg_connect(target, false, (qd_pg **)cls, err);
}

static void pg_close(void *cls)
{
    qd_pg_disconnect(cls);
}

static int pg_schema_version(void *cls)
{
    return ((qd_pg *)cls)->version;
}

static qd_status ping_fn(qd_pg *p, void *ctx, qd_err *err)
{
    (void)ctx;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_PING, "ping", err, &r, "");
    if (st == QD_OK && PQntuples(r) != 1) st = qd_fail(err, QD_DB, "ping: no answer");
    PQclear(r);
    return st;
}

static qd_status pg_ping(void *cls, qd_err *err)
{
    return qd_pg_call(cls, false, ping_fn, NULL, err);
}

const qd_store_ops qd_store_pg_ops = {
    .name = "postgresql",
    .open = pg_open,
    .close = pg_close,
    .schema_version = pg_schema_version,
    .ping = pg_ping,
    .ruleset_put = qd_pg_ruleset_put,
    .ruleset_get = qd_pg_ruleset_get,
    .ruleset_list = qd_pg_ruleset_list,
    .ruleset_delete = qd_pg_ruleset_delete,
    .job_insert = qd_pg_job_insert,
    .job_get = qd_pg_job_get,
    .job_list = qd_pg_job_list,
    .job_claim = qd_pg_job_claim,
    .job_progress = qd_pg_job_progress,
    .job_finish = qd_pg_job_finish,
    .job_requeue = qd_pg_job_requeue,
    .job_received = qd_pg_job_received,
    .job_set_unused = qd_pg_job_set_unused,
    .job_end_receiving = qd_pg_job_end_receiving,
    .job_cancel_queued = qd_pg_job_cancel_queued,
    .job_delete = qd_pg_job_delete,
    .job_recover = qd_pg_job_recover,
    .job_outputs = qd_pg_job_outputs,
    .job_report = qd_pg_job_report,
    .jobs_expiring = qd_pg_jobs_expiring,
    .job_outputs_removed = qd_pg_job_outputs_removed,
    .job_owners = qd_pg_job_owners,
    .job_counts = qd_pg_job_counts,
    .tokens_open = pg_tokens_open,
    .tokens_close = pg_close,
    .token_insert = qd_pg_token_insert,
    .token_list = qd_pg_token_list,
    .token_delete = qd_pg_token_delete,
    .token_any = qd_pg_token_any,
    .token_lookup = qd_pg_token_lookup,
};
