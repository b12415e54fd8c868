/* test_db.c -- the SQLite layer (daemon/store/db.c): each role's pragmas read back from its
 * connection (and as tuned), files that are not databases or not WAL refused naming the role, a
 * reader refusing writes, persistent statements from a table (bad SQL, missing ids), one-value
 * queries, transactions, and the status a failed constraint gives on each role.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _POSIX_C_SOURCE 200809L
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db.h"
#include "qdtest.h"

static char *g_dir, *g_path;

static void setup(void)
{
    g_dir = qdt_tmpdir();
    g_path = kit_join(g_dir, "quantd.db");
}

static void teardown(void)
{
    kit_rmtree(g_dir);
    free(g_path);
    free(g_dir);
}

static qd_db *open_ok(const char *path, qd_db_role role)
{
    qd_db *db = NULL;
    qd_err err = {{0}};
    qd_status st = qd_db_open(path, role, &db, &err);
    ck_assert_msg(st == QD_OK, "open as %s: %s", qd_db_role_name(role), err.message);
    ck_assert_ptr_nonnull(db);
    return db;
}

/* Opens path in role expecting failure st; err gets the message. */
static void open_fails(const char *path, qd_db_role role, qd_status st, qd_err *err)
{
    static char sentinel;
    qd_db *db = (qd_db *)&sentinel; /* must come back NULL */
    ck_assert_int_eq(qd_db_open(path, role, &db, err), st);
    ck_assert_ptr_null(db);
    ck_assert_msg(strstr(err->message, qd_db_role_name(role)), "%s", err->message);
}

static int int_of(qd_db *db, const char *sql)
{
    int v = -12345;
    qd_err err;
    ck_assert_msg(qd_db_int(db, sql, &v, &err) == QD_OK, "%s", err.message);
    return v;
}

/* The value sql gives on a plain connection: SQLite's compiled-in default. */
static int default_of(const char *sql)
{
    sqlite3 *h = NULL;
    ck_assert_int_eq(sqlite3_open(":memory:", &h), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    ck_assert_int_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    int v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

static void exec_ok(qd_db *db, const char *sql)
{
    qd_err err;
    ck_assert_msg(qd_db_exec(db, sql, sql, &err) == QD_OK, "%s", err.message);
}

/* ---- roles ------------------------------------------------------------------------------------
 */

/* What each role's connection says of itself; DEF: SQLite's default, read from a plain
 * connection (it depends on how SQLite was built). */
#define DEF (-99999)
static const struct {
    qd_db_role role;
    int synchronous, foreign_keys, cache_size, wal_autocheckpoint, query_only;
} want_pragmas[] = {
    /* the owner turns foreign keys on after its migrations (store_sqlite.c), not at open */
    {QD_DB_OWNER, 2, 0, DEF, DEF, 0},
    {QD_DB_STATS_WRITER, 2, 1, -16384, 16384, 0},
    {QD_DB_TOKENS, 2, 1, DEF, DEF, 0},
    {QD_DB_READER, DEF, 1, DEF, DEF, 1},
};

static void expect_pragma(qd_db *db, qd_db_role role, const char *pragma, int want)
{
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA %s", pragma);
    int w = want == DEF ? default_of(sql) : want;
    int got = int_of(db, sql);
    ck_assert_msg(got == w, "%s: %s is %d, want %d", qd_db_role_name(role), pragma, got, w);
}

START_TEST(test_role_pragmas)
{
    qd_db *owner = open_ok(g_path, QD_DB_OWNER); /* creates the file and makes it WAL */
    for (size_t i = 0; i < sizeof want_pragmas / sizeof want_pragmas[0]; i++) {
        qd_db_role role = want_pragmas[i].role;
        qd_db *db = role == QD_DB_OWNER ? owner : open_ok(g_path, role);
        char mode[16];
        qd_err err;
        ck_assert_int_eq(qd_db_text(db, "PRAGMA journal_mode", mode, sizeof mode, &err), QD_OK);
        ck_assert_str_eq(mode, "wal");
        expect_pragma(db, role, "synchronous", want_pragmas[i].synchronous);
        expect_pragma(db, role, "foreign_keys", want_pragmas[i].foreign_keys);
        expect_pragma(db, role, "cache_size", want_pragmas[i].cache_size);
        expect_pragma(db, role, "wal_autocheckpoint", want_pragmas[i].wal_autocheckpoint);
        expect_pragma(db, role, "query_only", want_pragmas[i].query_only);
        expect_pragma(db, role, "busy_timeout", 5000);
        expect_pragma(db, role, "trusted_schema", 0);
        int defensive = -1;
        ck_assert_int_eq(
            sqlite3_db_config(qd_db_sqlite(db), SQLITE_DBCONFIG_DEFENSIVE, -1, &defensive),
            SQLITE_OK);
        ck_assert_int_eq(defensive, 1);
        if (db != owner) qd_db_close(db);
    }
    qd_db_close(owner);
    qd_db_close(NULL); /* a no-op */
}
END_TEST

/* An open with tuning (config [stats] busy_timeout, page_cache) takes its busy timeout and page
 * cache; a field of 0 keeps the role's default; NULL is qd_db_open. */
START_TEST(test_tuning)
{
    qd_db *owner = open_ok(g_path, QD_DB_OWNER);
    qd_err err = {{0}};
    qd_db *db = NULL;
    qd_db_tuning t = {.busy_timeout_ms = 30000, .cache_kib = 262144};
    ck_assert_msg(qd_db_open_tuned(g_path, QD_DB_STATS_WRITER, &t, &db, &err) == QD_OK, "%s",
                  err.message);
    expect_pragma(db, QD_DB_STATS_WRITER, "busy_timeout", 30000);
    expect_pragma(db, QD_DB_STATS_WRITER, "cache_size", -262144);
    expect_pragma(db, QD_DB_STATS_WRITER, "wal_autocheckpoint", 16384); /* the rest as before */
    qd_db_close(db);
    t = (qd_db_tuning){.busy_timeout_ms = 1000};
    ck_assert_int_eq(qd_db_open_tuned(g_path, QD_DB_READER, &t, &db, &err), QD_OK);
    expect_pragma(db, QD_DB_READER, "busy_timeout", 1000);
    expect_pragma(db, QD_DB_READER, "cache_size", DEF);
    expect_pragma(db, QD_DB_READER, "query_only", 1);
    qd_db_close(db);
    t = (qd_db_tuning){0};
    ck_assert_int_eq(qd_db_open_tuned(g_path, QD_DB_STATS_WRITER, &t, &db, &err), QD_OK);
    expect_pragma(db, QD_DB_STATS_WRITER, "busy_timeout", QD_DB_BUSY_TIMEOUT_MS);
    expect_pragma(db, QD_DB_STATS_WRITER, "cache_size", -QD_DB_STATS_PAGE_CACHE_KIB);
    qd_db_close(db);
    ck_assert_int_eq(qd_db_open_tuned(g_path, QD_DB_STATS_WRITER, NULL, &db, &err), QD_OK);
    expect_pragma(db, QD_DB_STATS_WRITER, "cache_size", -QD_DB_STATS_PAGE_CACHE_KIB);
    qd_db_close(db);
    qd_db_close(owner);
}
END_TEST

START_TEST(test_role_names)
{
    const char *seen[QD_DB_ROLE_COUNT];
    for (int r = 0; r < QD_DB_ROLE_COUNT; r++) {
        seen[r] = qd_db_role_name((qd_db_role)r);
        ck_assert_msg(seen[r] && *seen[r], "role %d", r);
        for (int k = 0; k < r; k++) ck_assert_str_ne(seen[k], seen[r]);
    }
    ck_assert_str_eq(qd_db_role_name(QD_DB_ROLE_COUNT), "an unknown role");
    qd_err err;
    qd_db *db = NULL;
    ck_assert_int_eq(qd_db_open(g_path, QD_DB_ROLE_COUNT, &db, &err), QD_INVALID);
    ck_assert_ptr_null(db);
    open_fails("", QD_DB_READER, QD_INVALID, &err);
    open_fails(NULL, QD_DB_OWNER, QD_INVALID, &err);
}
END_TEST

/* ---- refused files ----------------------------------------------------------------------------
 */

/* Every role refuses a file that is not a database, naming the role and the file, and leaves it
 * as it was: no WAL or shared-memory file beside it. */
START_TEST(test_not_a_database)
{
    char *path = kit_join(g_dir, "notes.txt"), *wal = kit_join(g_dir, "notes.txt-wal");
    char text[8192];
    memset(text, 'x', sizeof text);
    ck_assert_int_eq(kit_write_file(path, text, sizeof text), 0);
    for (int r = 0; r < QD_DB_ROLE_COUNT; r++) {
        qd_err err = {{0}};
        open_fails(path, (qd_db_role)r, QD_DB, &err);
        ck_assert_msg(strstr(err.message, "file is not a database") && strstr(err.message, path),
                      "%s", err.message);
    }
    size_t n = 0;
    char *back = qdt_read_file(path, &n);
    ck_assert_uint_eq(n, sizeof text);
    ck_assert_int_eq(memcmp(back, text, n), 0);
    struct stat sb;
    ck_assert_int_ne(stat(wal, &sb), 0);
    free(back);
    free(wal);
    free(path);
}
END_TEST

/* Only the owner creates the file; the others need it to exist. */
START_TEST(test_missing_file)
{
    char *nodir = kit_join(g_dir, "no/such/dir/q.db");
    qd_err err;
    for (int r = 0; r < QD_DB_ROLE_COUNT; r++) {
        open_fails(nodir, (qd_db_role)r, QD_DB, &err);
        ck_assert_msg(strstr(err.message, "unable to open"), "%s", err.message);
    }
    struct stat sb;
    for (int r = QD_DB_OWNER + 1; r < QD_DB_ROLE_COUNT; r++) {
        open_fails(g_path, (qd_db_role)r, QD_DB, &err);
        ck_assert_int_ne(stat(g_path, &sb), 0);
    }
    qd_db_close(open_ok(g_path, QD_DB_OWNER));
    ck_assert_int_eq(stat(g_path, &sb), 0);
    free(nodir);
}
END_TEST

/* A database in rollback-journal mode: the owner makes it WAL, the others refuse it (a reader
 * would wait for the writer). */
START_TEST(test_not_wal)
{
    sqlite3 *h = NULL;
    ck_assert_int_eq(sqlite3_open(g_path, &h), SQLITE_OK);
    ck_assert_int_eq(
        sqlite3_exec(h, "PRAGMA journal_mode = DELETE; CREATE TABLE t (x)", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(h);
    qd_err err;
    for (int r = QD_DB_OWNER + 1; r < QD_DB_ROLE_COUNT; r++) {
        open_fails(g_path, (qd_db_role)r, QD_DB, &err);
        ck_assert_msg(strstr(err.message, "journal mode is \"delete\", not WAL"), "%s",
                      err.message);
    }
    qd_db *owner = open_ok(g_path, QD_DB_OWNER);
    qd_db *reader = open_ok(g_path, QD_DB_READER);
    qd_db_close(reader);
    qd_db_close(owner);
}
END_TEST

/* ---- the reader -------------------------------------------------------------------------------
 */

START_TEST(test_reader_refuses_writes)
{
    qd_db *owner = open_ok(g_path, QD_DB_OWNER);
    exec_ok(owner, "CREATE TABLE t (x INTEGER)");
    qd_db *reader = open_ok(g_path, QD_DB_READER);
    qd_err err;
    ck_assert_int_eq(qd_db_exec(reader, "INSERT INTO t VALUES (1)", "add a row", &err), QD_DB);
    ck_assert_msg(strncmp(err.message, "add a row: ", 11) == 0 && strstr(err.message, "readonly"),
                  "%s", err.message);
    ck_assert_msg(!strstr(err.message, g_dir), "%s", err.message);
    ck_assert_int_eq(qd_db_exec(reader, "CREATE TABLE u (y)", "add a table", &err), QD_DB);
    ck_assert_int_eq(int_of(owner, "SELECT count(*) FROM sqlite_master WHERE name = 'u'"), 0);
    ck_assert_int_eq(int_of(owner, "SELECT count(*) FROM t"), 0);
    /* it reads, and does not wait for an open write */
    ck_assert_int_eq(qd_db_begin(owner, true, &err), QD_OK);
    exec_ok(owner, "INSERT INTO t VALUES (7)");
    qd_db *r2 = open_ok(g_path, QD_DB_READER);
    ck_assert_int_eq(int_of(r2, "SELECT count(*) FROM t"), 0);
    ck_assert_int_eq(qd_db_commit(owner, &err), QD_OK);
    ck_assert_int_eq(int_of(r2, "SELECT count(*) FROM t"), 1);
    qd_db_close(r2);
    qd_db_close(reader);
    qd_db_close(owner);
}
END_TEST

/* ---- statements -------------------------------------------------------------------------------
 */

START_TEST(test_prepare)
{
    qd_db *db = open_ok(g_path, QD_DB_OWNER);
    sqlite3_stmt *q[3] = {0};
    qd_err err;
    const qd_db_stmt_def good[] = {{2, "SELECT 2"}, {0, "SELECT 40 + 2"}};
    ck_assert_int_eq(qd_db_prepare(db, good, 2, q, 3, &err), QD_OK);
    ck_assert_ptr_nonnull(q[0]);
    ck_assert_ptr_null(q[1]);
    ck_assert_int_eq(sqlite3_step(q[0]), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(q[0], 0), 42);
    sqlite3_reset(q[0]);
    /* the table left id 1 without SQL */
    ck_assert_int_eq(qd_db_prepared_all(db, q, 3, &err), QD_DB);
    ck_assert_msg(strstr(err.message, "statement 1 has no SQL"), "%s", err.message);
    /* bad SQL: the role, the SQL's start and SQLite's complaint */
    const qd_db_stmt_def bad[] = {{1, "SELEC count(*) FROM nowhere"}};
    ck_assert_int_eq(qd_db_prepare(db, bad, 1, q, 3, &err), QD_DB);
    ck_assert_msg(strstr(err.message, qd_db_role_name(QD_DB_OWNER)) &&
                      strstr(err.message, "preparing \"SELEC count(*) FROM nowhere\"") &&
                      strstr(err.message, "syntax error"),
                  "%s", err.message);
    ck_assert_ptr_null(q[1]);
    /* an id outside the array is refused before anything is written there */
    const qd_db_stmt_def outside[] = {{3, "SELECT 1"}};
    ck_assert_int_eq(qd_db_prepare(db, outside, 1, q, 3, &err), QD_DB);
    ck_assert_msg(strstr(err.message, "statement 3"), "%s", err.message);
    const qd_db_stmt_def fill[] = {{1, "SELECT 1"}};
    ck_assert_int_eq(qd_db_prepare(db, fill, 1, q, 3, &err), QD_OK);
    ck_assert_int_eq(qd_db_prepared_all(db, q, 3, &err), QD_OK);
    qd_db_finalize(q, 3);
    for (int i = 0; i < 3; i++) ck_assert_ptr_null(q[i]);
    qd_db_close(db);
}
END_TEST

START_TEST(test_one_value)
{
    qd_db *db = open_ok(g_path, QD_DB_OWNER);
    qd_err err;
    int v = 0;
    ck_assert_int_eq(qd_db_int(db, "SELECT 6 * 7", &v, &err), QD_OK);
    ck_assert_int_eq(v, 42);
    char buf[4];
    ck_assert_int_eq(qd_db_text(db, "SELECT 'abcdef'", buf, sizeof buf, &err), QD_OK);
    ck_assert_str_eq(buf, "abc");
    ck_assert_int_eq(qd_db_text(db, "SELECT NULL", buf, sizeof buf, &err), QD_OK);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(qd_db_int(db, "SELECT 1 WHERE 0", &v, &err), QD_DB);
    ck_assert_str_eq(err.message, "SELECT 1 WHERE 0: no result");
    ck_assert_int_eq(qd_db_int(db, "SELECT * FROM nowhere", &v, &err), QD_DB);
    ck_assert_str_eq(err.message, "SELECT * FROM nowhere: no such table: nowhere");
    /* a statement list runs whole */
    exec_ok(db, "CREATE TABLE t (x); INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)");
    ck_assert_int_eq(int_of(db, "SELECT sum(x) FROM t"), 3);
    qd_db_close(db);
}
END_TEST

/* ---- transactions and errors ------------------------------------------------------------------
 */

START_TEST(test_transactions)
{
    qd_db *db = open_ok(g_path, QD_DB_OWNER);
    qd_db *other = open_ok(g_path, QD_DB_TOKENS);
    exec_ok(db, "CREATE TABLE t (x)");
    qd_err err;
    ck_assert_int_eq(qd_db_begin(db, true, &err), QD_OK);
    exec_ok(db, "INSERT INTO t VALUES (1)");
    qd_db_rollback(db);
    ck_assert_int_eq(int_of(db, "SELECT count(*) FROM t"), 0);
    ck_assert_int_eq(qd_db_begin(db, true, &err), QD_OK);
    exec_ok(db, "INSERT INTO t VALUES (1)");
    ck_assert_int_eq(qd_db_commit(db, &err), QD_OK);
    ck_assert_int_eq(int_of(other, "SELECT count(*) FROM t"), 1);
    /* no transaction: commit fails naming itself, rollback does nothing */
    ck_assert_int_eq(qd_db_commit(db, &err), QD_DB);
    ck_assert_msg(strncmp(err.message, "commit: ", 8) == 0, "%s", err.message);
    qd_db_rollback(db);
    /* one transaction at a time */
    ck_assert_int_eq(qd_db_begin(db, false, &err), QD_OK);
    ck_assert_int_eq(qd_db_begin(db, false, &err), QD_DB);
    ck_assert_msg(strstr(err.message, "begin a read transaction: ") &&
                      strstr(err.message, "within a transaction"),
                  "%s", err.message);
    ck_assert_int_eq(qd_db_commit(db, &err), QD_OK);
    qd_db_close(other);
    qd_db_close(db);
}
END_TEST

/* A failed constraint: the owner's caller gave a bad row (QD_INVALID); elsewhere the database
 * refused what was checked before (QD_DB). The message names the operation, not the file. */
START_TEST(test_constraint_status)
{
    qd_db *owner = open_ok(g_path, QD_DB_OWNER);
    exec_ok(owner, "CREATE TABLE t (x INTEGER UNIQUE CHECK (x > 0)); INSERT INTO t VALUES (1)");
    static const struct {
        qd_db_role role;
        qd_status st;
    } cases[] = {{QD_DB_OWNER, QD_INVALID}, {QD_DB_STATS_WRITER, QD_DB}, {QD_DB_TOKENS, QD_DB}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qd_db *db = cases[i].role == QD_DB_OWNER ? owner : open_ok(g_path, cases[i].role);
        qd_err err;
        ck_assert_int_eq(qd_db_exec(db, "INSERT INTO t VALUES (1)", "add one", &err), cases[i].st);
        ck_assert_str_eq(err.message, "add one: UNIQUE constraint failed: t.x");
        ck_assert_int_eq(qd_db_exec(db, "INSERT INTO t VALUES (-1)", "add -1", &err), cases[i].st);
        ck_assert_msg(strstr(err.message, "CHECK constraint failed"), "%s", err.message);
        if (db != owner) qd_db_close(db);
    }
    ck_assert_int_eq(int_of(owner, "SELECT count(*) FROM t"), 1);
    qd_db_close(owner);
}
END_TEST

Suite *suite_db(void)
{
    Suite *s = suite_create("db");
    TCase *open = tcase_create("open");
    tcase_add_checked_fixture(open, setup, teardown);
    tcase_add_test(open, test_role_pragmas);
    tcase_add_test(open, test_role_names);
    tcase_add_test(open, test_tuning);
    tcase_add_test(open, test_not_a_database);
    tcase_add_test(open, test_missing_file);
    tcase_add_test(open, test_not_wal);
    suite_add_tcase(s, open);
    TCase *use = tcase_create("use");
    tcase_add_checked_fixture(use, setup, teardown);
    tcase_add_test(use, test_reader_refuses_writes);
    tcase_add_test(use, test_prepare);
    tcase_add_test(use, test_one_value);
    tcase_add_test(use, test_transactions);
    tcase_add_test(use, test_constraint_status);
    suite_add_tcase(s, use);
    return s;
}
