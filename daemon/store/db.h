/* db.h -- quantd's one SQLite layer, under the job store (store*.c), the tokens
 * (store_tokens.c) and the statistics (stats_*.c): opening a connection to the data directory's
 * database in a named role (its open flags and pragmas from one table; busy timeout, defensive
 * mode and the WAL check for all), preparing a table of persistent statements, one-value queries
 * and statement lists, BEGIN / BEGIN IMMEDIATE / COMMIT / ROLLBACK, and turning SQLite's error
 * into a qd_status and a message that names the operation.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_DB_H
#define QD_DB_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Who a connection is for; each role is one row of db.c's table. */
typedef enum qd_db_role {
    QD_DB_OWNER, /* the job store: creates the file, makes it WAL, migrates (store_sqlite.c) */
    QD_DB_STATS_WRITER, /* the statistics writer's group commits (stats_group.c) */
    QD_DB_TOKENS,       /* token checks, issuing and revoking (store_tokens.c) */
    QD_DB_READER,       /* the statistics' reads (stats_read.c): query_only */
    QD_DB_ROLE_COUNT
} qd_db_role;

/* "the job store", "the statistics writer", ...: how messages name the role. */
const char *qd_db_role_name(qd_db_role role);

typedef struct qd_db qd_db;

/* Opens a connection to path in role: the role's open flags (only the owner creates the file),
 * extended result codes, defensive mode, an untrusted schema, a busy timeout
 * (QD_DB_BUSY_TIMEOUT_MS; qd_db_open_tuned takes another), the journal mode (the owner sets WAL;
 * every other role refuses a file that is not WAL), the role's pragmas, and the transaction
 * statements. A failure names the role and the path (connections are opened at start-up or by
 * `quantd token`: the message is the operator's, never a client's) and leaves *out NULL. */
qd_status qd_db_open(const char *path, qd_db_role role, qd_db **out, qd_err *err);

/* The defaults a connection gets: the busy timeout of every role, and the statistics writer's
 * page cache (config [storage] busy_timeout tunes the job store's and the tokens' connections,
 * [stats] busy_timeout and page_cache the statistics' connections). */
#define QD_DB_BUSY_TIMEOUT_MS      5000
#define QD_DB_STATS_PAGE_CACHE_KIB 16384

/* What an open may change from its role's defaults; a field of 0 keeps the default. */
typedef struct qd_db_tuning {
    int busy_timeout_ms; /* how long it waits for another connection's lock before SQLITE_BUSY */
    int64_t cache_kib;   /* its page cache, KiB (PRAGMA cache_size = -cache_kib) */
} qd_db_tuning;

/* qd_db_open with tuning (NULL: the defaults, as qd_db_open). */
qd_status qd_db_open_tuned(const char *path, qd_db_role role, const qd_db_tuning *tuning,
                           qd_db **out, qd_err *err);
/* Finalizes the transaction statements and closes (the caller finalized its own); NULL is a
 * no-op. */
void qd_db_close(qd_db *db);
sqlite3 *qd_db_sqlite(const qd_db *db);

/* The error of the last SQLite call on db as "op: SQLite's message" (no path: what a request
 * gets back, through the HTTP layer's filter, is op and SQLite's words): QD_NOMEM for SQLITE_NOMEM,
 * for a failed constraint the role's status (the owner's CHECKs and keys validate its caller's
 * rows: QD_INVALID; on every other connection the values were checked before SQL, so a
 * constraint is the database refusing: QD_DB), else QD_DB. */
qd_status qd_db_fail(qd_db *db, qd_err *err, const char *op);

/* One persistent statement: out[id] gets sql prepared. */
typedef struct qd_db_stmt_def {
    int id;
    const char *sql;
} qd_db_stmt_def;

/* Prepares defs[0..n) into out[] (count slots; an id outside them is refused). A failure names
 * the role and the SQL's start; the statements prepared so far stay in out[] for
 * qd_db_finalize. */
qd_status qd_db_prepare(qd_db *db, const qd_db_stmt_def *defs, size_t n, sqlite3_stmt **out,
                        size_t count, qd_err *err);
/* QD_OK when every one of out[0..count) was prepared, else names the first id without SQL. */
qd_status qd_db_prepared_all(qd_db *db, sqlite3_stmt *const *out, size_t count, qd_err *err);
/* Finalizes out[0..count) and sets them NULL. */
void qd_db_finalize(sqlite3_stmt **out, size_t count);

/* Runs sql (one statement or a list; no rows wanted); errors name op. */
qd_status qd_db_exec(qd_db *db, const char *sql, const char *op, qd_err *err);
/* The first column of the first row of sql as an int / as text into buf (cap bytes, cut to fit).
 * No row is QD_DB "sql: no result". */
qd_status qd_db_int(qd_db *db, const char *sql, int *out, qd_err *err);
qd_status qd_db_text(qd_db *db, const char *sql, char *buf, size_t cap, qd_err *err);

/* BEGIN (a read: deferred) or BEGIN IMMEDIATE (a write: takes the write lock now, so the
 * transaction never fails half-way on SQLITE_BUSY), COMMIT, and ROLLBACK when a transaction is
 * open (after a failure, already reported: nothing more to say). */
qd_status qd_db_begin(qd_db *db, bool write, qd_err *err);
qd_status qd_db_commit(qd_db *db, qd_err *err);
void qd_db_rollback(qd_db *db);

#endif /* QD_DB_H */
