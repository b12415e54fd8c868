/* db.c -- quantd's one SQLite layer (db.h): the table of connection roles, opening and closing
 * a connection, persistent statements, one-value queries, transactions, and SQLite's errors as
 * qd_status and messages.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"

/* RETURNING (the job claim, a statistics model's id) came with SQLite 3.35. */
#if SQLITE_VERSION_NUMBER < 3035000
#error "quantd needs SQLite 3.35 or newer"
#endif
#define MIN_SQLITE 3035000

/* WAL: readers never wait for a writer, and a commit appends to one file. synchronous=FULL
 * rather than WAL's usual NORMAL: NORMAL never corrupts, but a power cut may take back the last
 * commits, and here a commit is a promise already made to a client (a 202 with a job id, a rule
 * set stored, a statistics post answered, a token shown once). FULL syncs the WAL at every
 * commit. The owner makes the file WAL (it is persistent: the file stays WAL); every other role
 * checks it is, since without it a reader would wait for the writer.
 *
 * The statistics writer's page cache (16 MiB unless tuned: config [stats] page_cache) holds a
 * group's rows (64 activations x 4096 floats: 6 MiB) and it checkpoints the WAL every 64 MiB rather
 * than every 4 MiB, so a group of large posts is not followed by a checkpoint each time. The owner
 * turns foreign keys on itself once the migrations (which run with them off) are done
 * (store_sqlite.c). A reader is query_only: it refuses any write. */
typedef struct role_def {
    const char *name;     /* in messages */
    int flags;            /* sqlite3_open_v2 */
    const char *journal;  /* its one-row answer must be "wal" */
    const char *pragmas;  /* run after the journal mode */
    int64_t cache_kib;    /* its page cache in KiB (PRAGMA cache_size = -N); 0: SQLite's default */
    qd_status constraint; /* what a failed constraint means on this connection (qd_db_fail) */
} role_def;

#define OPEN_RW (SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX)

static const role_def roles[QD_DB_ROLE_COUNT] = {
    [QD_DB_OWNER] = {"the job store",
                     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                     "PRAGMA journal_mode = WAL", "PRAGMA synchronous = FULL", 0, QD_INVALID},
    [QD_DB_STATS_WRITER] = {"the statistics writer", OPEN_RW, "PRAGMA journal_mode",
                            "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL; "
                            "PRAGMA wal_autocheckpoint = 16384",
                            QD_DB_STATS_PAGE_CACHE_KIB, QD_DB},
    [QD_DB_TOKENS] = {"the tokens", OPEN_RW, "PRAGMA journal_mode",
                      "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL", 0, QD_DB},
    [QD_DB_READER] = {"the statistics reader", OPEN_RW, "PRAGMA journal_mode",
                      "PRAGMA foreign_keys = ON; PRAGMA query_only = 1", 0, QD_DB},
};

/* The transaction statements every connection keeps prepared. */
enum { T_BEGIN_READ, T_BEGIN_WRITE, T_COMMIT, T_ROLLBACK, T_COUNT };

static const qd_db_stmt_def txn_sql[] = {
    {T_BEGIN_READ, "BEGIN"},
    {T_BEGIN_WRITE, "BEGIN IMMEDIATE"},
    {T_COMMIT, "COMMIT"},
    {T_ROLLBACK, "ROLLBACK"},
};

struct qd_db {
    sqlite3 *h;
    qd_db_role role;
    sqlite3_stmt *txn[T_COUNT];
};

const char *qd_db_role_name(qd_db_role role)
{
    return (unsigned)role < QD_DB_ROLE_COUNT ? roles[role].name : "an unknown role";
}

sqlite3 *qd_db_sqlite(const qd_db *db)
{
    return db->h;
}

/* ---- errors -----------------------------------------------------------------------------------
 */

qd_status qd_db_fail(qd_db *db, qd_err *err, const char *op)
{
    int code = sqlite3_errcode(db->h) & 0xff;
    qd_status st = code == SQLITE_NOMEM        ? QD_NOMEM
                   : code == SQLITE_CONSTRAINT ? roles[db->role].constraint
                                               : QD_DB;
    return qd_fail(err, st, "%s: %s", op, sqlite3_errmsg(db->h));
}

/* ---- statements -------------------------------------------------------------------------------
 */

qd_status qd_db_prepare(qd_db *db, const qd_db_stmt_def *defs, size_t n, sqlite3_stmt **out,
                        size_t count, qd_err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (defs[i].id < 0 || (size_t)defs[i].id >= count || !defs[i].sql)
            return qd_fail(err, QD_DB, "%s: internal: statement %d has no slot or no SQL",
                           roles[db->role].name, defs[i].id);
        if (sqlite3_prepare_v3(db->h, defs[i].sql, -1, SQLITE_PREPARE_PERSISTENT, &out[defs[i].id],
                               NULL) != SQLITE_OK)
            return qd_fail(err, QD_DB, "%s: preparing \"%.60s\": %s", roles[db->role].name,
                           defs[i].sql, sqlite3_errmsg(db->h));
    }
    return QD_OK;
}

qd_status qd_db_prepared_all(qd_db *db, sqlite3_stmt *const *out, size_t count, qd_err *err)
{
    for (size_t i = 0; i < count; i++)
        if (!out[i])
            return qd_fail(err, QD_DB, "%s: internal: statement %zu has no SQL",
                           roles[db->role].name, i);
    return QD_OK;
}

void qd_db_finalize(sqlite3_stmt **out, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        sqlite3_finalize(out[i]);
        out[i] = NULL;
    }
}

qd_status qd_db_exec(qd_db *db, const char *sql, const char *op, qd_err *err)
{
    return sqlite3_exec(db->h, sql, NULL, NULL, NULL) == SQLITE_OK ? QD_OK
                                                                   : qd_db_fail(db, err, op);
}

/* The first column of the first row of sql: as text into buf (cap bytes) when buf, else as an
 * int into *num. */
static qd_status one_value(qd_db *db, const char *sql, int *num, char *buf, size_t cap, qd_err *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db->h, sql, -1, &st, NULL) != SQLITE_OK) return qd_db_fail(db, err, sql);
    int rc = sqlite3_step(st);
    qd_status r = QD_OK;
    if (rc == SQLITE_ROW && buf) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        snprintf(buf, cap, "%s", t ? (const char *)t : "");
    } else if (rc == SQLITE_ROW) {
        *num = sqlite3_column_int(st, 0);
    } else {
        r = rc == SQLITE_DONE ? qd_fail(err, QD_DB, "%s: no result", sql)
                              : qd_db_fail(db, err, sql);
    }
    sqlite3_finalize(st);
    return r;
}

qd_status qd_db_int(qd_db *db, const char *sql, int *out, qd_err *err)
{
    return one_value(db, sql, out, NULL, 0, err);
}

qd_status qd_db_text(qd_db *db, const char *sql, char *buf, size_t cap, qd_err *err)
{
    return one_value(db, sql, NULL, buf, cap, err);
}

/* ---- transactions -----------------------------------------------------------------------------
 */

static qd_status run_txn(qd_db *db, int k, const char *op, qd_err *err)
{
    sqlite3_stmt *st = db->txn[k];
    int rc = sqlite3_step(st);
    qd_status r = rc == SQLITE_DONE ? QD_OK : qd_db_fail(db, err, op);
    sqlite3_reset(st); /* its code repeats the step's error, reported above */
    return r;
}

qd_status qd_db_begin(qd_db *db, bool write, qd_err *err)
{
    return write ? run_txn(db, T_BEGIN_WRITE, "begin a write transaction", err)
                 : run_txn(db, T_BEGIN_READ, "begin a read transaction", err);
}

qd_status qd_db_commit(qd_db *db, qd_err *err)
{
    return run_txn(db, T_COMMIT, "commit", err);
}

void qd_db_rollback(qd_db *db)
{
    if (!sqlite3_get_autocommit(db->h)) run_txn(db, T_ROLLBACK, "rollback", NULL);
}

/* ---- opening ----------------------------------------------------------------------------------
 */

static qd_status configure(qd_db *db, int busy_timeout_ms, qd_err *err)
{
    /* Defensive: no writable_schema tricks; untrusted schema: SQL functions with side effects
     * cannot hide in views or triggers of a file someone else prepared. */
    if (sqlite3_extended_result_codes(db->h, 1) != SQLITE_OK ||
        sqlite3_db_config(db->h, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL) != SQLITE_OK ||
        sqlite3_db_config(db->h, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)NULL) != SQLITE_OK ||
        sqlite3_busy_timeout(db->h, busy_timeout_ms) != SQLITE_OK)
        return qd_db_fail(db, err, "configuring the connection");
    return QD_OK;
}

static qd_status check_journal(qd_db *db, qd_err *err)
{
    char mode[16];
    qd_status st = qd_db_text(db, roles[db->role].journal, mode, sizeof mode, err);
    if (st == QD_OK && strcmp(mode, "wal") != 0)
        st = qd_fail(err, QD_DB, "the journal mode is \"%s\", not WAL", mode);
    return st;
}

/* The role's page cache, or the tuned one: PRAGMA cache_size = -KiB. */
static qd_status set_cache(qd_db *db, int64_t cache_kib, qd_err *err)
{
    if (cache_kib <= 0) return QD_OK;
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA cache_size = -%lld", (long long)cache_kib);
    return qd_db_exec(db, sql, "setting the page cache", err);
}

static qd_status open_conn(qd_db *db, const char *path, const qd_db_tuning *t, qd_err *err)
{
    int rc = sqlite3_open_v2(path, &db->h, roles[db->role].flags, NULL);
    if (rc != SQLITE_OK)
        return qd_fail(err, QD_DB, "opening: %s",
                       db->h ? sqlite3_errmsg(db->h) : sqlite3_errstr(rc));
    int busy = t && t->busy_timeout_ms > 0 ? t->busy_timeout_ms : QD_DB_BUSY_TIMEOUT_MS;
    qd_status st = configure(db, busy, err);
    if (st == QD_OK) st = check_journal(db, err);
    if (st == QD_OK) st = qd_db_exec(db, roles[db->role].pragmas, roles[db->role].pragmas, err);
    if (st == QD_OK)
        st = set_cache(db, t && t->cache_kib > 0 ? t->cache_kib : roles[db->role].cache_kib, err);
    if (st == QD_OK)
        st = qd_db_prepare(db, txn_sql, sizeof txn_sql / sizeof txn_sql[0], db->txn, T_COUNT, err);
    return st;
}

qd_status qd_db_open(const char *path, qd_db_role role, qd_db **out, qd_err *err)
{
    return qd_db_open_tuned(path, role, NULL, out, err);
}

qd_status qd_db_open_tuned(const char *path, qd_db_role role, const qd_db_tuning *tuning,
                           qd_db **out, qd_err *err)
{
    *out = NULL;
    if ((unsigned)role >= QD_DB_ROLE_COUNT)
        return qd_fail(err, QD_INVALID, "no database role %d", (int)role);
    if (!path || !*path) return qd_fail(err, QD_INVALID, "%s: no database path", roles[role].name);
    if (sqlite3_libversion_number() < MIN_SQLITE)
        return qd_fail(err, QD_DB, "SQLite %s is too old: quantd needs 3.35 or newer",
                       sqlite3_libversion());
    qd_db *db = calloc(1, sizeof *db);
    if (!db) return qd_fail(err, QD_NOMEM, "out of memory");
    db->role = role;
    qd_err why;
    qd_status st = open_conn(db, path, tuning, &why);
    if (st != QD_OK) {
        qd_fail(err, st, "%s, database %s: %s", roles[role].name, path, why.message);
        qd_db_close(db);
        return st;
    }
    *out = db;
    return QD_OK;
}

void qd_db_close(qd_db *db)
{
    if (!db) return;
    qd_db_finalize(db->txn, T_COUNT);
    sqlite3_close(db->h); /* the last connection also checkpoints and removes the WAL */
    free(db);
}
