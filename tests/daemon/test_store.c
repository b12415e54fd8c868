/* test_store.c -- the job store (daemon/store/store*.c). Against both engines, one set of cases
 * run once per engine (SQLite on a file, PostgreSQL on a fresh database of the run's cluster,
 * pgtest.h): rule sets; the job queue (FIFO claim, progress, finish with outputs and report,
 * requeue, cancel, delete with its cascade, recovery after a crash, counts) and concurrent claims
 * from two connections; the tokens (issue, check, expiry, list, revoke). SQLite's own: every
 * migration applied to an empty database and the schema it leaves, upgrades from each earlier
 * version, refused files (newer, foreign, a failing migration changes nothing), the connection's
 * pragmas seen from outside, the write gate, and the busy timeout ([storage] busy_timeout) of the
 * store's and the tokens' connections. PostgreSQL's own cases are in test_store_pg.c.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "migrations.h"
#include "pgtest.h"
#include "qdtest.h"
#include "store.h"
#include "tokens.h"
#include "write_gate.h"

#define APPLICATION_ID 0x514E5444 /* store_sqlite.c's "QNTD" */

/* ---- fixture and helpers ----------------------------------------------------------------------
 */

/* The engine the case runs on; g_target is what it opens: g_path (SQLite) or a connection
 * string (PostgreSQL). */
static qd_store_kind g_kind;
static char *g_dir, *g_path, *g_target;
static qd_store *g_s;

static qd_store *open_ok(const char *target)
{
    qd_store *s = NULL;
    qd_err err = {{0}};
    qd_status st = qd_store_open_engine(g_kind, target, NULL, &s, &err);
    ck_assert_msg(st == QD_OK, "open (%s): %s", qd_store_kind_name(g_kind), err.message);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(qd_store_kind_of(s), g_kind);
    return s;
}

static void setup(void)
{
    g_kind = QD_STORE_SQLITE;
    g_dir = qdt_tmpdir();
    g_path = kit_join(g_dir, "quantd.db");
    g_target = g_path;
    g_s = open_ok(g_target);
}

static void setup_pg(void)
{
    g_kind = QD_STORE_POSTGRESQL;
    g_target = qdt_pg_new_db();
    g_s = open_ok(g_target);
}

static void teardown(void)
{
    qd_store_close(g_s);
    g_s = NULL;
    if (g_dir) kit_rmtree(g_dir);
    if (g_target != g_path) free(g_target);
    free(g_path);
    free(g_dir);
    g_dir = g_path = g_target = NULL;
}

/* A second, plain connection to look at the file from outside the store. */
static sqlite3 *raw_open(const char *path)
{
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

static void raw_exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
}

/* The first column of sql's first row as text ("" for NULL or no row); caller frees. */
static char *raw_text(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s: %s", sql,
                  sqlite3_errmsg(db));
    int rc = sqlite3_step(st);
    ck_assert_msg(rc == SQLITE_ROW || rc == SQLITE_DONE, "%s: %s", sql, sqlite3_errmsg(db));
    const unsigned char *t = rc == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
    char *out = strdup(t ? (const char *)t : "");
    sqlite3_finalize(st);
    ck_assert_ptr_nonnull(out);
    return out;
}

static long long raw_int(sqlite3 *db, const char *sql)
{
    char *t = raw_text(db, sql);
    long long v = strtoll(t, NULL, 10);
    free(t);
    return v;
}

static void expect_text(sqlite3 *db, const char *sql, const char *want)
{
    char *got = raw_text(db, sql);
    ck_assert_msg(strcmp(got, want) == 0, "%s\n got: %s\nwant: %s", sql, got, want);
    free(got);
}

/* Every schema object, one per line, in a fixed order. */
static char *schema_dump(const char *path)
{
    sqlite3 *db = raw_open(path);
    char *dump = raw_text(db, "SELECT group_concat(type || ' ' || name || ' ' || ifnull(sql, ''), "
                              "char(10)) FROM (SELECT * FROM sqlite_master ORDER BY type, name)");
    sqlite3_close(db);
    return dump;
}

/* sql on the case's database from outside the store (SQL both engines read alike). */
static void eng_exec(const char *sql)
{
    if (g_kind == QD_STORE_POSTGRESQL) {
        qdt_pg_exec(g_target, sql);
        return;
    }
    sqlite3 *db = raw_open(g_path);
    raw_exec(db, sql);
    sqlite3_close(db);
}

static long long eng_int(const char *sql)
{
    char *t = NULL;
    if (g_kind == QD_STORE_POSTGRESQL) {
        t = qdt_pg_text(g_target, sql);
    } else {
        sqlite3 *db = raw_open(g_path);
        t = raw_text(db, sql);
        sqlite3_close(db);
    }
    long long v = strtoll(t, NULL, 10);
    free(t);
    return v;
}

static int64_t add_job(qd_store *s, const char *source_path)
{
    qd_job j = {.rules = "{\"rules\":[]}",
                .layout = "native",
                .source_kind = "upload",
                .source_path = (char *)source_path};
    qd_err err;
    ck_assert_msg(qd_store_job_insert(s, &j, &err) == QD_OK, "%s", err.message);
    ck_assert_int_gt(j.id, 0);
    return j.id;
}

static int64_t claim_ok(qd_store *s)
{
    qd_job j;
    qd_err err;
    ck_assert_msg(qd_store_job_claim(s, &j, &err) == QD_OK, "%s", err.message);
    ck_assert_int_eq(j.state, QD_JOB_RUNNING);
    int64_t id = j.id;
    qd_job_clear(&j);
    return id;
}

static qd_job_state state_of(int64_t id)
{
    qd_job j;
    qd_err err;
    ck_assert_msg(qd_store_job_get(g_s, id, &j, &err) == QD_OK, "%s", err.message);
    qd_job_state st = j.state;
    qd_job_clear(&j);
    return st;
}

static void expect_status(qd_status got, qd_status want, const qd_err *err)
{
    ck_assert_msg(got == want, "status %d, want %d (%s)", got, want, err->message);
}

/* ---- schema and migrations --------------------------------------------------------------------
 */

/* The columns of a table as "name type notnull pk", in order. */
static void expect_columns(sqlite3 *db, const char *table, const char *want)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT group_concat(name || ' ' || type || ' ' || \"notnull\" || ' ' || pk, ',') "
             "FROM (SELECT * FROM pragma_table_info('%s') ORDER BY cid)",
             table);
    expect_text(db, sql, want);
}

START_TEST(test_schema_fresh)
{
    ck_assert_int_ge(qd_n_migrations, 1);
    ck_assert_int_eq(qd_store_migration_count(), qd_n_migrations);
    ck_assert_int_eq(qd_store_schema_version(g_s), qd_n_migrations);
    sqlite3 *db = raw_open(g_path);
    ck_assert_int_eq(raw_int(db, "PRAGMA user_version"), qd_n_migrations);
    ck_assert_int_eq(raw_int(db, "PRAGMA application_id"), APPLICATION_ID);
    expect_text(db, "PRAGMA journal_mode", "wal");
    expect_text(db,
                "SELECT group_concat(name) FROM (SELECT name FROM sqlite_master "
                "WHERE type = 'table' ORDER BY name)",
                "jobs,outputs,reports,rulesets,sqlite_sequence,stat_models,stat_post_keys,stats,"
                "tokens");
    expect_columns(db, "rulesets",
                   "name TEXT 1 1,body TEXT 1 0,created_ms INTEGER 1 0,updated_ms INTEGER 1 0");
    expect_columns(db, "jobs",
                   "id INTEGER 0 1,state TEXT 1 0,ruleset TEXT 0 0,rules TEXT 1 0,layout TEXT 1 0,"
                   "source_kind TEXT 1 0,source_path TEXT 1 0,stats_model TEXT 0 0,"
                   "created_ms INTEGER 1 0,started_ms INTEGER 0 0,finished_ms INTEGER 0 0,"
                   "tensors_done INTEGER 1 0,tensors_total INTEGER 1 0,bytes_done INTEGER 1 0,"
                   "bytes_total INTEGER 1 0,error TEXT 0 0,attempts INTEGER 1 0,outputs_removed_ms "
                   "INTEGER 0 0,unused_rules TEXT 0 0");
    expect_columns(db, "outputs",
                   "job_id INTEGER 1 1,name TEXT 1 2,bytes INTEGER 1 0,sha256 TEXT 1 0");
    expect_columns(db, "reports", "job_id INTEGER 0 1,body TEXT 1 0");
    expect_text(db,
                "SELECT group_concat(name) FROM (SELECT name FROM sqlite_master "
                "WHERE type = 'index' ORDER BY name)",
                "jobs_state_id,sqlite_autoindex_outputs_1,sqlite_autoindex_rulesets_1,"
                "sqlite_autoindex_stat_models_1,sqlite_autoindex_stats_1,"
                "sqlite_autoindex_tokens_1,sqlite_autoindex_tokens_2,stat_post_keys_created");
    expect_text(
        db,
        "SELECT group_concat(name) FROM (SELECT name FROM pragma_index_info('jobs_state_id') "
        "ORDER BY seqno)",
        "state,id");
    expect_text(db,
                "SELECT group_concat(\"table\" || '.' || \"to\" || ' ' || on_delete) "
                "FROM pragma_foreign_key_list('outputs')",
                "jobs.id CASCADE");
    expect_text(db,
                "SELECT group_concat(\"table\" || '.' || \"to\" || ' ' || on_delete) "
                "FROM pragma_foreign_key_list('reports')",
                "jobs.id CASCADE");
    expect_text(db, "SELECT count(*) FROM pragma_foreign_key_list('jobs')", "0");
    sqlite3_close(db);
}
END_TEST

/* The CHECK constraints hold against anyone writing the file. */
START_TEST(test_schema_checks)
{
    sqlite3 *db = raw_open(g_path);
    const char *bad[] = {
        "INSERT INTO jobs (state, rules, layout, source_kind, source_path, created_ms) "
        "VALUES ('paused', '{}', 'native', 'upload', 'x', 1)",
        "INSERT INTO jobs (state, rules, layout, source_kind, source_path, created_ms) "
        "VALUES ('queued', '{}', 'native', 'url', 'x', 1)",
        "INSERT INTO jobs (state, rules, layout, source_kind, source_path, created_ms) "
        "VALUES ('queued', NULL, 'native', 'path', 'x', 1)",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_int_eq(sqlite3_exec(db, bad[i], NULL, NULL, NULL), SQLITE_CONSTRAINT);
    raw_exec(db, "INSERT INTO jobs (state, rules, layout, source_kind, source_path, created_ms) "
                 "VALUES ('succeeded', '{}', 'native', 'path', 'x', 1)");
    const char *bad_out[] = {
        "INSERT INTO outputs VALUES (1, 'a', 1, 'ABCDEF')",
        "INSERT INTO outputs VALUES (1, 'a', -1, printf('%064d', 0))",
        "INSERT INTO outputs VALUES (1, 'a', 1, printf('%063d', 0) || 'G')",
    };
    for (size_t i = 0; i < sizeof bad_out / sizeof bad_out[0]; i++)
        ck_assert_int_eq(sqlite3_exec(db, bad_out[i], NULL, NULL, NULL), SQLITE_CONSTRAINT);
    raw_exec(db, "INSERT INTO outputs VALUES (1, 'a', 1, printf('%064d', 0))");
    sqlite3_close(db);
}
END_TEST

/* Upgrading a database left at any earlier version gives the same schema as a fresh one. */
START_TEST(test_migrations_stepwise)
{
    char *fresh = schema_dump(g_path);
    for (int k = 0; k <= qd_n_migrations; k++) {
        char name[32], sql[96];
        snprintf(name, sizeof name, "at-%d.db", k);
        char *path = kit_join(g_dir, name);
        sqlite3 *db = raw_open(path);
        raw_exec(db, "BEGIN");
        for (int i = 0; i < k; i++) raw_exec(db, qd_migrations[i].sql);
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d; PRAGMA application_id = %d", k,
                 k ? APPLICATION_ID : 0);
        raw_exec(db, sql);
        raw_exec(db, "COMMIT");
        sqlite3_close(db);
        qd_store *s = open_ok(path);
        ck_assert_int_eq(qd_store_schema_version(s), qd_n_migrations);
        qd_store_close(s);
        char *dump = schema_dump(path);
        ck_assert_msg(strcmp(dump, fresh) == 0, "from version %d:\n%s\nfresh:\n%s", k, dump, fresh);
        free(dump);
        free(path);
    }
    free(fresh);
}
END_TEST

START_TEST(test_reopen_idempotent)
{
    qd_err err;
    ck_assert_int_eq(qd_store_ruleset_put(g_s, "keep", "{\"rules\":[]}", NULL, &err), QD_OK);
    int64_t id = add_job(g_s, "a");
    char *before = schema_dump(g_path);
    for (int i = 0; i < 2; i++) {
        qd_store_close(g_s);
        g_s = open_ok(g_path);
        ck_assert_int_eq(qd_store_schema_version(g_s), qd_n_migrations);
    }
    char *after = schema_dump(g_path);
    ck_assert_str_eq(before, after);
    ck_assert_int_eq(qd_store_ruleset_get(g_s, "keep", NULL, NULL, NULL, &err), QD_OK);
    ck_assert_int_eq(state_of(id), QD_JOB_QUEUED);
    ck_assert_int_eq(qd_store_ping(g_s, &err), QD_OK);
    free(before);
    free(after);
}
END_TEST

static void expect_refused(const char *path, const char *needle)
{
    static char sentinel;
    qd_store *s = (qd_store *)&sentinel; /* must come back NULL */
    qd_err err = {{0}};
    ck_assert_int_eq(qd_store_open(path, &s, &err), QD_DB);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.message, needle), "message: %s", err.message);
}

START_TEST(test_newer_refused)
{
    qd_store_close(g_s);
    g_s = NULL;
    sqlite3 *db = raw_open(g_path);
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", qd_n_migrations + 1);
    raw_exec(db, sql);
    expect_refused(g_path, "newer than this quantd");
    ck_assert_int_eq(raw_int(db, "PRAGMA user_version"), qd_n_migrations + 1);
    sqlite3_close(db);
}
END_TEST

START_TEST(test_foreign_refused)
{
    char *other = kit_join(g_dir, "other.db"), *tagged = kit_join(g_dir, "tagged.db");
    sqlite3 *db = raw_open(other);
    raw_exec(db, "CREATE TABLE notes (x TEXT)");
    sqlite3_close(db);
    expect_refused(other, "not a quantd database");
    db = raw_open(other);
    expect_text(db, "SELECT group_concat(name) FROM sqlite_master", "notes");
    sqlite3_close(db);
    db = raw_open(tagged);
    raw_exec(db, "PRAGMA application_id = 1234");
    sqlite3_close(db);
    expect_refused(tagged, "not a quantd database");
    free(other);
    free(tagged);
}
END_TEST

/* A migration that fails half-way leaves the file as it was: one transaction. */
START_TEST(test_failed_migration_rolls_back)
{
    char *path = kit_join(g_dir, "clash.db"), sql[64];
    sqlite3 *db = raw_open(path);
    snprintf(sql, sizeof sql, "PRAGMA application_id = %d", APPLICATION_ID);
    raw_exec(db, sql);
    raw_exec(db, "CREATE TABLE reports (x)"); /* 0001 creates reports last */
    sqlite3_close(db);
    expect_refused(path, "migration 0001_init");
    db = raw_open(path);
    ck_assert_int_eq(raw_int(db, "PRAGMA user_version"), 0);
    expect_text(db, "SELECT group_concat(name) FROM sqlite_master", "reports");
    sqlite3_close(db);
    free(path);
}
END_TEST

static void *commit_later(void *p)
{
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    raw_exec(p, "COMMIT");
    return NULL;
}

/* busy_timeout: a write waits for another connection's transaction instead of failing. Foreign
 * keys on the store's connection are seen in test_job_delete (the cascade). */
START_TEST(test_busy_timeout)
{
    sqlite3 *db = raw_open(g_path);
    raw_exec(db, "BEGIN IMMEDIATE");
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, commit_later, db), 0);
    double t0 = kit_now();
    qd_err err;
    bool created = false;
    qd_status st = qd_store_ruleset_put(g_s, "waited", "{}", &created, &err);
    double waited = kit_now() - t0;
    pthread_join(t, NULL);
    sqlite3_close(db);
    expect_status(st, QD_OK, &err);
    ck_assert(created);
    ck_assert_msg(waited > 0.2, "waited %.3f s", waited);
}
END_TEST

START_TEST(test_open_errors)
{
    qd_store *s = NULL;
    qd_err err;
    ck_assert_int_eq(qd_store_open("", &s, &err), QD_INVALID);
    char *path = kit_join(g_dir, "no/such/dir/q.db");
    ck_assert_int_eq(qd_store_open(path, &s, &err), QD_DB);
    ck_assert_ptr_null(s);
    ck_assert_ptr_nonnull(strstr(err.message, path));
    free(path);
}
END_TEST

/* ---- rule sets --------------------------------------------------------------------------------
 */

START_TEST(test_ruleset_crud)
{
    qd_err err;
    bool created = false;
    ck_assert_int_eq(qd_store_ruleset_put(g_s, "b", "{\"rules\":[1]}", &created, &err), QD_OK);
    ck_assert(created);
    ck_assert_int_eq(qd_store_ruleset_put(g_s, "a", "{\"rules\":[]}", &created, &err), QD_OK);
    ck_assert(created);
    char *body = NULL;
    int64_t c0 = 0, u0 = 0, c1 = 0, u1 = 0;
    ck_assert_int_eq(qd_store_ruleset_get(g_s, "b", &body, &c0, &u0, &err), QD_OK);
    ck_assert_str_eq(body, "{\"rules\":[1]}");
    ck_assert_int_eq(c0, u0);
    free(body);
    struct timespec ts = {0, 5 * 1000000L};
    nanosleep(&ts, NULL);
    ck_assert_int_eq(qd_store_ruleset_put(g_s, "b", "{\"rules\":[2]}", &created, &err), QD_OK);
    ck_assert(!created);
    ck_assert_int_eq(qd_store_ruleset_get(g_s, "b", &body, &c1, &u1, &err), QD_OK);
    ck_assert_str_eq(body, "{\"rules\":[2]}");
    ck_assert_int_eq(c1, c0);
    ck_assert_int_gt(u1, u0);
    free(body);
    ck_assert_int_eq(qd_store_ruleset_delete(g_s, "a", &err), QD_OK);
    expect_status(qd_store_ruleset_delete(g_s, "a", &err), QD_NOT_FOUND, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "\"a\""));
    static char sentinel;
    body = &sentinel;
    expect_status(qd_store_ruleset_get(g_s, "a", &body, NULL, NULL, &err), QD_NOT_FOUND, &err);
    ck_assert_ptr_null(body);
    ck_assert_int_eq(qd_store_ruleset_put(g_s, NULL, "{}", NULL, &err), QD_INVALID);
}
END_TEST

START_TEST(test_ruleset_list)
{
    qd_err err;
    const char *names[] = {"zeta", "Alpha", "alpha", "mid-1"};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(qd_store_ruleset_put(g_s, names[i], "{}", NULL, &err), QD_OK);
    eng_exec("UPDATE rulesets SET created_ms = 0, updated_ms = 1795442400123 WHERE name = 'alpha'");
    json_t *list = NULL;
    ck_assert_int_eq(qd_store_ruleset_list(g_s, &list, &err), QD_OK);
    char *text = json_dumps(list, JSON_COMPACT);
    ck_assert_ptr_nonnull(text);
    /* by name, bytewise */
    const char *order[] = {"Alpha", "alpha", "mid-1", "zeta"};
    ck_assert_uint_eq(json_array_size(list), 4);
    for (size_t i = 0; i < 4; i++) {
        json_t *o = json_array_get(list, i);
        ck_assert_str_eq(json_string_value(json_object_get(o, "name")), order[i]);
        const char *at = json_string_value(json_object_get(o, "created_at"));
        ck_assert_ptr_nonnull(at);
        ck_assert_uint_eq(strlen(at), 24);
        ck_assert(at[10] == 'T' && at[19] == '.' && at[23] == 'Z');
    }
    json_t *alpha = json_array_get(list, 1);
    ck_assert_str_eq(json_string_value(json_object_get(alpha, "created_at")),
                     "1970-01-01T00:00:00.000Z");
    ck_assert_str_eq(json_string_value(json_object_get(alpha, "updated_at")),
                     "2026-11-23T14:00:00.123Z");
    free(text);
    json_decref(list);
}
END_TEST

/* A job keeps its copy of the rules: replacing or deleting the rule set does not touch it. */
START_TEST(test_ruleset_delete_keeps_jobs)
{
    qd_err err;
    ck_assert_int_eq(qd_store_ruleset_put(g_s, "rs", "{\"rules\":[1]}", NULL, &err), QD_OK);
    qd_job j = {.ruleset = "rs",
                .rules = "{\"rules\":[1]}",
                .layout = "native",
                .source_kind = "path",
                .source_path = "/m"};
    ck_assert_int_eq(qd_store_job_insert(g_s, &j, &err), QD_OK);
    ck_assert_int_eq(qd_store_ruleset_delete(g_s, "rs", &err), QD_OK);
    qd_job got;
    ck_assert_int_eq(qd_store_job_get(g_s, j.id, &got, &err), QD_OK);
    ck_assert_str_eq(got.ruleset, "rs");
    ck_assert_str_eq(got.rules, "{\"rules\":[1]}");
    qd_job_clear(&got);
}
END_TEST

/* ---- jobs -------------------------------------------------------------------------------------
 */

START_TEST(test_job_insert_get)
{
    qd_err err;
    qd_job j = {.rules = "{\"rules\":[{\"a\":1}]}",
                .layout = "compressed-tensors",
                .source_kind = "path",
                .source_path = "/srv/models/llama",
                .stats_model = "llama-3"};
    int64_t before = (int64_t)time(NULL) * 1000 - 1000;
    ck_assert_int_eq(qd_store_job_insert(g_s, &j, &err), QD_OK);
    ck_assert_int_gt(j.created_ms, before);
    ck_assert_int_eq(j.state, QD_JOB_QUEUED);
    qd_job got;
    ck_assert_int_eq(qd_store_job_get(g_s, j.id, &got, &err), QD_OK);
    ck_assert_int_eq(got.id, j.id);
    ck_assert_int_eq(got.state, QD_JOB_QUEUED);
    ck_assert_ptr_null(got.ruleset);
    ck_assert_str_eq(got.rules, j.rules);
    ck_assert_str_eq(got.layout, "compressed-tensors");
    ck_assert_str_eq(got.source_kind, "path");
    ck_assert_str_eq(got.source_path, "/srv/models/llama");
    ck_assert_str_eq(got.stats_model, "llama-3");
    ck_assert_int_eq(got.created_ms, j.created_ms);
    ck_assert_int_eq(got.started_ms, 0);
    ck_assert_int_eq(got.finished_ms, 0);
    ck_assert_int_eq(got.tensors_total + got.bytes_total + got.attempts, 0);
    ck_assert_ptr_null(got.error);
    qd_job_clear(&got);
    ck_assert_ptr_null(got.rules);
    ck_assert_int_eq(got.id, j.id); /* clear frees the strings only */
    qd_job_clear(&got);             /* cleared twice is fine */
    expect_status(qd_store_job_get(g_s, j.id + 100, &got, &err), QD_NOT_FOUND, &err);
    qd_job bad = {.rules = "{}", .layout = "native", .source_kind = "url", .source_path = "x"};
    expect_status(qd_store_job_insert(g_s, &bad, &err), QD_INVALID, &err);
    bad.source_kind = NULL;
    expect_status(qd_store_job_insert(g_s, &bad, &err), QD_INVALID, &err);
}
END_TEST

/* ids are never reused, even after the newest job is deleted. */
START_TEST(test_job_ids_not_reused)
{
    qd_err err;
    int64_t a = add_job(g_s, "a");
    ck_assert_int_eq(qd_store_job_cancel_queued(g_s, a, &err), QD_OK);
    ck_assert_int_eq(qd_store_job_delete(g_s, a, &err), QD_OK);
    ck_assert_int_gt(add_job(g_s, "b"), a);
}
END_TEST

static void free_jobs(qd_job *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++) qd_job_clear(&jobs[i]);
    free(jobs);
}

/* Lists, checking the ids come back as want[0..n_want). */
static void expect_list(int state, int64_t after, int limit, const int64_t *want, size_t n_want)
{
    qd_job *jobs = NULL;
    size_t n = 99;
    qd_err err;
    ck_assert_msg(qd_store_job_list(g_s, state, after, limit, &jobs, &n, &err) == QD_OK, "%s",
                  err.message);
    ck_assert_uint_eq(n, n_want);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(jobs[i].id, want[i]);
        if (state >= 0) ck_assert_int_eq(jobs[i].state, state);
        ck_assert_ptr_nonnull(jobs[i].source_path);
    }
    free_jobs(jobs, n);
}

START_TEST(test_job_list)
{
    int64_t id[6];
    for (int i = 0; i < 6; i++) id[i] = add_job(g_s, "src");
    claim_ok(g_s); /* id[0] running */
    qd_err err;
    ck_assert_int_eq(qd_store_job_cancel_queued(g_s, id[3], &err), QD_OK);
    expect_list(-1, 0, 100, id, 6);
    expect_list(-1, id[1], 2, id + 2, 2);
    expect_list(-1, id[5], 10, NULL, 0);
    const int64_t queued[] = {id[1], id[2], id[4], id[5]};
    expect_list(QD_JOB_QUEUED, 0, 10, queued, 4);
    expect_list(QD_JOB_QUEUED, id[2], 1, queued + 2, 1);
    expect_list(QD_JOB_RUNNING, 0, 10, id, 1);
    expect_list(QD_JOB_CANCELLED, 0, 10, id + 3, 1);
    expect_list(QD_JOB_SUCCEEDED, 0, 10, NULL, 0);
    expect_list(-1, 0, 0, id, 1);   /* limit clamps up to 1 */
    expect_list(-1, 0, -50, id, 1); /* ... from below too */
    static qd_job sentinel;
    qd_job *jobs = &sentinel;
    size_t n = 7;
    expect_status(qd_store_job_list(g_s, QD_JOB_STATE_COUNT, 0, 10, &jobs, &n, &err), QD_INVALID,
                  &err);
    ck_assert_ptr_null(jobs);
    ck_assert_uint_eq(n, 0);
}
END_TEST

/* The upper clamp: 1000 of 1005 jobs. */
START_TEST(test_job_list_limit_max)
{
    eng_exec("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1005) "
             "INSERT INTO jobs (state, rules, layout, source_kind, source_path, created_ms) "
             "SELECT 'queued', '{}', 'native', 'upload', 'u' || i, i FROM n");
    qd_job *jobs = NULL;
    size_t n = 0;
    qd_err err;
    ck_assert_int_eq(qd_store_job_list(g_s, -1, 0, 5000, &jobs, &n, &err), QD_OK);
    ck_assert_uint_eq(n, 1000);
    ck_assert_int_eq(jobs[999].id, 1000);
    ck_assert_str_eq(jobs[999].source_path, "u1000");
    free_jobs(jobs, n);
}
END_TEST

START_TEST(test_job_claim_fifo)
{
    qd_err err;
    qd_job j;
    expect_status(qd_store_job_claim(g_s, &j, &err), QD_NOT_FOUND, &err);
    ck_assert_ptr_null(j.rules);
    int64_t a = add_job(g_s, "a"), b = add_job(g_s, "b"), c = add_job(g_s, "c");
    ck_assert_int_eq(qd_store_job_cancel_queued(g_s, b, &err), QD_OK);
    ck_assert_int_eq(qd_store_job_claim(g_s, &j, &err), QD_OK);
    ck_assert_int_eq(j.id, a);
    ck_assert_int_eq(j.state, QD_JOB_RUNNING);
    ck_assert_int_eq(j.attempts, 1);
    ck_assert_int_ge(j.started_ms, j.created_ms);
    ck_assert_str_eq(j.source_path, "a");
    qd_job_clear(&j);
    ck_assert_int_eq(claim_ok(g_s), c);
    expect_status(qd_store_job_claim(g_s, &j, &err), QD_NOT_FOUND, &err);
    ck_assert_int_eq(state_of(a), QD_JOB_RUNNING);
}
END_TEST

START_TEST(test_job_progress)
{
    qd_err err;
    int64_t a = add_job(g_s, "a"), b = add_job(g_s, "b");
    claim_ok(g_s);
    ck_assert_int_eq(qd_store_job_progress(g_s, a, 3, 10, 300, 1000, &err), QD_OK);
    qd_job j;
    ck_assert_int_eq(qd_store_job_get(g_s, a, &j, &err), QD_OK);
    ck_assert_int_eq(j.tensors_done, 3);
    ck_assert_int_eq(j.tensors_total, 10);
    ck_assert_int_eq(j.bytes_done, 300);
    ck_assert_int_eq(j.bytes_total, 1000);
    qd_job_clear(&j);
    expect_status(qd_store_job_progress(g_s, b, 1, 1, 1, 1, &err), QD_CONFLICT, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "queued"));
    expect_status(qd_store_job_progress(g_s, 999, 1, 1, 1, 1, &err), QD_NOT_FOUND, &err);
    expect_status(qd_store_job_progress(g_s, a, -1, 1, 1, 1, &err), QD_INVALID, &err);
}
END_TEST

static qd_output out(const char *name, int64_t bytes, char hex)
{
    qd_output o = {(char *)name, bytes, {0}};
    memset(o.sha256, hex, 64);
    return o;
}

START_TEST(test_job_finish)
{
    qd_err err;
    int64_t a = add_job(g_s, "a"), b = add_job(g_s, "b"), q = add_job(g_s, "q");
    claim_ok(g_s);
    claim_ok(g_s);
    qd_output outs[2] = {out("model-00002.safetensors", 20, 'b'),
                         out("model-00001.safetensors", 10, 'a')};
    const char *report = "{\"tensors\":[{\"name\":\"w\",\"rmse\":0.01}]}";
    ck_assert_int_eq(qd_store_job_finish(g_s, a, QD_JOB_SUCCEEDED, NULL, outs, 2, report, &err),
                     QD_OK);
    qd_job j;
    ck_assert_int_eq(qd_store_job_get(g_s, a, &j, &err), QD_OK);
    ck_assert_int_eq(j.state, QD_JOB_SUCCEEDED);
    ck_assert_int_ge(j.finished_ms, j.started_ms);
    ck_assert_ptr_null(j.error);
    qd_job_clear(&j);
    qd_output *o = NULL;
    size_t n = 0;
    ck_assert_int_eq(qd_store_job_outputs(g_s, a, &o, &n, &err), QD_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(o[0].name, "model-00001.safetensors"); /* by name */
    ck_assert_int_eq(o[0].bytes, 10);
    ck_assert_str_eq(o[1].sha256, outs[0].sha256);
    qd_outputs_free(o, n);
    char *r = NULL;
    ck_assert_int_eq(qd_store_job_report(g_s, a, &r, &err), QD_OK);
    ck_assert_str_eq(r, report);
    free(r);
    /* a failed job: its error, no outputs, no report */
    ck_assert_int_eq(
        qd_store_job_finish(g_s, b, QD_JOB_FAILED, "bad shard: truncated", NULL, 0, NULL, &err),
        QD_OK);
    ck_assert_int_eq(qd_store_job_get(g_s, b, &j, &err), QD_OK);
    ck_assert_str_eq(j.error, "bad shard: truncated");
    qd_job_clear(&j);
    ck_assert_int_eq(qd_store_job_outputs(g_s, b, &o, &n, &err), QD_OK);
    ck_assert_uint_eq(n, 0);
    qd_outputs_free(o, n);
    expect_status(qd_store_job_report(g_s, b, &r, &err), QD_NOT_FOUND, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "no report"));
    ck_assert_ptr_null(r);
    /* only a running job finishes, once, into a final state */
    expect_status(qd_store_job_finish(g_s, a, QD_JOB_FAILED, "x", NULL, 0, NULL, &err), QD_CONFLICT,
                  &err);
    expect_status(qd_store_job_finish(g_s, q, QD_JOB_SUCCEEDED, NULL, NULL, 0, NULL, &err),
                  QD_CONFLICT, &err);
    expect_status(qd_store_job_finish(g_s, 999, QD_JOB_SUCCEEDED, NULL, NULL, 0, NULL, &err),
                  QD_NOT_FOUND, &err);
    expect_status(qd_store_job_finish(g_s, q, QD_JOB_RUNNING, NULL, NULL, 0, NULL, &err),
                  QD_INVALID, &err);
    expect_status(qd_store_job_outputs(g_s, 999, &o, &n, &err), QD_NOT_FOUND, &err);
    expect_status(qd_store_job_report(g_s, 999, &r, &err), QD_NOT_FOUND, &err);
}
END_TEST

/* Finishing is one transaction: a bad output leaves the job running, with nothing recorded. */
START_TEST(test_job_finish_atomic)
{
    qd_err err;
    int64_t a = add_job(g_s, "a");
    claim_ok(g_s);
    qd_output dup[2] = {out("x", 1, 'a'), out("x", 2, 'b')};
    expect_status(qd_store_job_finish(g_s, a, QD_JOB_SUCCEEDED, NULL, dup, 2, "{}", &err),
                  QD_INVALID, &err);
    qd_output upper = out("y", 1, 'A');
    expect_status(qd_store_job_finish(g_s, a, QD_JOB_SUCCEEDED, NULL, &upper, 1, "{}", &err),
                  QD_INVALID, &err);
    ck_assert_int_eq(state_of(a), QD_JOB_RUNNING);
    qd_output *o = NULL;
    size_t n = 1;
    ck_assert_int_eq(qd_store_job_outputs(g_s, a, &o, &n, &err), QD_OK);
    ck_assert_uint_eq(n, 0);
    qd_outputs_free(o, n);
    char *r = NULL;
    expect_status(qd_store_job_report(g_s, a, &r, &err), QD_NOT_FOUND, &err);
    ck_assert_int_eq(qd_store_job_finish(g_s, a, QD_JOB_CANCELLED, NULL, NULL, 0, NULL, &err),
                     QD_OK);
    ck_assert_int_eq(state_of(a), QD_JOB_CANCELLED);
}
END_TEST

/* A graceful stop puts a running job back without counting the attempt. */
START_TEST(test_job_requeue)
{
    qd_err err;
    int64_t a = add_job(g_s, "a"), b = add_job(g_s, "b");
    ck_assert_int_eq(claim_ok(g_s), a);
    ck_assert_int_eq(qd_store_job_progress(g_s, a, 1, 2, 3, 4, &err), QD_OK);
    ck_assert_int_eq(qd_store_job_requeue(g_s, a, &err), QD_OK);
    qd_job j;
    ck_assert_int_eq(qd_store_job_get(g_s, a, &j, &err), QD_OK);
    ck_assert_int_eq(j.state, QD_JOB_QUEUED);
    ck_assert_int_eq(j.attempts, 0);
    ck_assert_int_eq(j.started_ms + j.tensors_done + j.tensors_total + j.bytes_done, 0);
    ck_assert_int_eq(j.bytes_total, 0);
    qd_job_clear(&j);
    expect_status(qd_store_job_requeue(g_s, a, &err), QD_CONFLICT, &err); /* queued */
    ck_assert_int_eq(claim_ok(g_s), a);                                   /* still first in line */
    ck_assert_int_eq(qd_store_job_get(g_s, a, &j, &err), QD_OK);
    ck_assert_int_eq(j.attempts, 1);
    qd_job_clear(&j);
    ck_assert_int_eq(qd_store_job_finish(g_s, a, QD_JOB_SUCCEEDED, NULL, NULL, 0, NULL, &err),
                     QD_OK);
    expect_status(qd_store_job_requeue(g_s, a, &err), QD_CONFLICT, &err); /* finished */
    expect_status(qd_store_job_requeue(g_s, 999, &err), QD_NOT_FOUND, &err);
    ck_assert_int_eq(state_of(b), QD_JOB_QUEUED);
}
END_TEST

START_TEST(test_job_cancel_queued)
{
    qd_err err;
    int64_t a = add_job(g_s, "a"), b = add_job(g_s, "b");
    claim_ok(g_s);
    expect_status(qd_store_job_cancel_queued(g_s, a, &err), QD_CONFLICT, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "running"));
    ck_assert_int_eq(qd_store_job_cancel_queued(g_s, b, &err), QD_OK);
    qd_job j;
    ck_assert_int_eq(qd_store_job_get(g_s, b, &j, &err), QD_OK);
    ck_assert_int_eq(j.state, QD_JOB_CANCELLED);
    ck_assert_int_gt(j.finished_ms, 0);
    ck_assert_int_eq(j.started_ms, 0);
    qd_job_clear(&j);
    expect_status(qd_store_job_cancel_queued(g_s, b, &err), QD_CONFLICT, &err);
    expect_status(qd_store_job_cancel_queued(g_s, 999, &err), QD_NOT_FOUND, &err);
}
END_TEST

/* Checkpoint jobs (0007): inserted receiving, claimable, then queued (received) or ended
 * failed / cancelled while receiving; nothing else moves a receiving job. */
START_TEST(test_job_receiving)
{
    qd_err err;
    qd_job j = {.rules = "{\"rules\":[]}",
                .layout = "native",
                .source_kind = "upload",
                .source_path = "r",
                .state = QD_JOB_RECEIVING};
    ck_assert_int_eq(qd_store_job_insert(g_s, &j, &err), QD_OK);
    int64_t a = j.id;
    ck_assert_int_eq(j.state, QD_JOB_RECEIVING);
    j.state = QD_JOB_RECEIVING;
    ck_assert_int_eq(qd_store_job_insert(g_s, &j, &err), QD_OK);
    int64_t b = j.id;
    j.state = QD_JOB_RECEIVING;
    ck_assert_int_eq(qd_store_job_insert(g_s, &j, &err), QD_OK);
    int64_t c = j.id;
    expect_status(qd_store_job_cancel_queued(g_s, a, &err), QD_CONFLICT, &err);
    ck_assert_int_eq(qd_store_job_received(g_s, a, "[1]", &err), QD_OK);
    expect_status(qd_store_job_received(g_s, a, "[]", &err), QD_CONFLICT, &err);
    qd_job got;
    ck_assert_int_eq(qd_store_job_get(g_s, a, &got, &err), QD_OK);
    ck_assert_int_eq(got.state, QD_JOB_QUEUED);
    ck_assert_str_eq(got.unused_rules, "[1]");
    qd_job_clear(&got);
    expect_status(qd_store_job_end_receiving(g_s, a, QD_JOB_FAILED, "x", &err), QD_CONFLICT, &err);
    expect_status(qd_store_job_end_receiving(g_s, b, QD_JOB_SUCCEEDED, "x", &err), QD_INVALID,
                  &err);
    ck_assert_int_eq(qd_store_job_end_receiving(g_s, b, QD_JOB_FAILED, "late", &err), QD_OK);
    ck_assert_int_eq(qd_store_job_get(g_s, b, &got, &err), QD_OK);
    ck_assert_int_eq(got.state, QD_JOB_FAILED);
    ck_assert_str_eq(got.error, "late");
    ck_assert_int_gt(got.finished_ms, 0);
    qd_job_clear(&got);
    ck_assert_int_eq(claim_ok(g_s), a); /* FIFO over queued and receiving */
    ck_assert_int_eq(claim_ok(g_s), c);
    ck_assert_int_eq(qd_store_job_end_receiving(g_s, c, QD_JOB_CANCELLED, NULL, &err), QD_CONFLICT);
    ck_assert(qd_job_state_parse("receiving", &got.state));
}
END_TEST

/* 0007 rebuilds the jobs table: rows, ids and AUTOINCREMENT's high-water mark survive it. */
START_TEST(test_migration_0007_keeps_jobs)
{
    char *path = kit_join(g_dir, "at-6.db");
    sqlite3 *db = raw_open(path);
    raw_exec(db, "BEGIN");
    for (int i = 0; i < 6; i++) raw_exec(db, qd_migrations[i].sql);
    raw_exec(db, "INSERT INTO jobs (state, rules, layout, source_kind, source_path, created_ms) "
                 "VALUES ('succeeded', '{}', 'native', 'path', '/a', 1), "
                 "('queued', '{}', 'native', 'path', '/b', 2), "
                 "('failed', '{}', 'native', 'path', '/c', 3)");
    raw_exec(db, "INSERT INTO outputs (job_id, name, bytes, sha256) VALUES (1, 'o', 1, '"
                 "0000000000000000000000000000000000000000000000000000000000000000')");
    raw_exec(db, "DELETE FROM jobs WHERE id = 3");
    char sql[96];
    snprintf(sql, sizeof sql, "PRAGMA user_version = 6; PRAGMA application_id = %d",
             APPLICATION_ID);
    raw_exec(db, sql);
    raw_exec(db, "COMMIT");
    sqlite3_close(db);
    qd_store *s = open_ok(path);
    qd_err err;
    qd_job j;
    ck_assert_int_eq(qd_store_job_get(s, 2, &j, &err), QD_OK);
    ck_assert_int_eq(j.state, QD_JOB_QUEUED);
    ck_assert_str_eq(j.source_path, "/b");
    qd_job_clear(&j);
    qd_output *o = NULL;
    size_t n = 0;
    ck_assert_int_eq(qd_store_job_outputs(s, 1, &o, &n, &err), QD_OK);
    ck_assert_uint_eq(n, 1);
    qd_outputs_free(o, n);
    ck_assert_int_eq(add_job(s, "d"), 4); /* 3 was handed out once */
    qd_store_close(s);
    free(path);
}
END_TEST

START_TEST(test_job_delete)
{
    qd_err err;
    int64_t a = add_job(g_s, "a"), b = add_job(g_s, "b"), c = add_job(g_s, "c");
    claim_ok(g_s);
    claim_ok(g_s);
    qd_output o1 = out("m.safetensors", 5, 'f');
    ck_assert_int_eq(qd_store_job_finish(g_s, a, QD_JOB_SUCCEEDED, NULL, &o1, 1, "{}", &err),
                     QD_OK);
    expect_status(qd_store_job_delete(g_s, b, &err), QD_CONFLICT, &err); /* running */
    expect_status(qd_store_job_delete(g_s, c, &err), QD_CONFLICT, &err); /* queued */
    ck_assert_ptr_nonnull(strstr(err.message, "queued"));
    expect_status(qd_store_job_delete(g_s, 999, &err), QD_NOT_FOUND, &err);
    ck_assert_int_eq(qd_store_job_delete(g_s, a, &err), QD_OK);
    qd_job j;
    expect_status(qd_store_job_get(g_s, a, &j, &err), QD_NOT_FOUND, &err);
    /* the cascade: foreign keys are on in the store's connection */
    ck_assert_int_eq(eng_int("SELECT count(*) FROM outputs"), 0);
    ck_assert_int_eq(eng_int("SELECT count(*) FROM reports"), 0);
    expect_status(qd_store_job_delete(g_s, a, &err), QD_NOT_FOUND, &err);
    ck_assert_int_eq(state_of(b), QD_JOB_RUNNING);
}
END_TEST

START_TEST(test_job_recover)
{
    qd_err err;
    int64_t *ids = NULL;
    size_t n = 9;
    int64_t old = add_job(g_s, "old"); /* three attempts, then interrupted */
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(claim_ok(g_s), old);
        if (i < 2) {
            ck_assert_int_eq(qd_store_job_recover(g_s, 10, &ids, &n, &err), QD_OK);
            ck_assert_uint_eq(n, 1);
            free(ids);
        }
    }
    int64_t fresh = add_job(g_s, "fresh"), queued = add_job(g_s, "queued");
    int64_t done = add_job(g_s, "done");
    ck_assert_int_eq(claim_ok(g_s), fresh);
    ck_assert_int_eq(qd_store_job_progress(g_s, fresh, 1, 2, 3, 4, &err), QD_OK);
    /* a finished job is left alone */
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE jobs SET state = 'succeeded' WHERE id = %lld",
             (long long)done);
    eng_exec(sql);
    ck_assert_int_eq(qd_store_job_recover(g_s, 3, &ids, &n, &err), QD_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(ids[0], old);
    ck_assert_int_eq(ids[1], fresh);
    free(ids);
    qd_job j;
    ck_assert_int_eq(qd_store_job_get(g_s, old, &j, &err), QD_OK);
    ck_assert_int_eq(j.state, QD_JOB_FAILED);
    ck_assert_str_eq(j.error, "interrupted");
    ck_assert_int_gt(j.finished_ms, 0);
    qd_job_clear(&j);
    ck_assert_int_eq(qd_store_job_get(g_s, fresh, &j, &err), QD_OK);
    ck_assert_int_eq(j.state, QD_JOB_QUEUED);
    ck_assert_int_eq(j.attempts, 1);
    ck_assert_int_eq(j.started_ms + j.tensors_done + j.bytes_total, 0);
    qd_job_clear(&j);
    ck_assert_int_eq(state_of(queued), QD_JOB_QUEUED);
    ck_assert_int_eq(state_of(done), QD_JOB_SUCCEEDED);
    /* the retried job goes first again (FIFO by id), and nothing is left to recover */
    ck_assert_int_eq(claim_ok(g_s), fresh);
    ck_assert_int_eq(qd_store_job_finish(g_s, fresh, QD_JOB_SUCCEEDED, NULL, NULL, 0, NULL, &err),
                     QD_OK);
    ck_assert_int_eq(qd_store_job_recover(g_s, 3, &ids, &n, &err), QD_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(ids);
    expect_status(qd_store_job_recover(g_s, -1, &ids, &n, &err), QD_INVALID, &err);
}
END_TEST

/* What owns the data directory's entries (the start-up sweep's snapshot): every job in id order
 * with its state, whether retention removed its outputs and, for an upload job only, its
 * source_path; a callback's error stops the walk and is returned. */
typedef struct owners_seen {
    char text[512];
    int calls, fail_at;
} owners_seen;

static qd_status note_owner(void *ctx, const qd_job_owner *o, qd_err *err)
{
    owners_seen *seen = ctx;
    if (++seen->calls == seen->fail_at) return qd_fail(err, QD_NOMEM, "stop at %d", seen->calls);
    size_t at = strlen(seen->text);
    snprintf(seen->text + at, sizeof seen->text - at, "%lld %s %d %s;", (long long)o->id,
             qd_job_state_name(o->state), o->outputs_removed,
             o->upload_path ? o->upload_path : "-");
    return QD_OK;
}

START_TEST(test_job_owners)
{
    qd_err err;
    owners_seen seen = {0};
    ck_assert_int_eq(qd_store_job_owners(g_s, note_owner, &seen, &err), QD_OK);
    ck_assert_int_eq(seen.calls, 0);
    int64_t a = add_job(g_s, "/d/uploads/aa/model.safetensors");
    int64_t b = add_job(g_s, "/d/uploads/bb/inputs");
    qd_job p = {.rules = "{\"rules\":[]}",
                .layout = "native",
                .source_kind = "path",
                .source_path = "/srv/models/m"};
    ck_assert_int_eq(qd_store_job_insert(g_s, &p, &err), QD_OK);
    ck_assert_int_eq(claim_ok(g_s), a);
    ck_assert_int_eq(qd_store_job_finish(g_s, a, QD_JOB_SUCCEEDED, NULL, NULL, 0, NULL, &err),
                     QD_OK);
    ck_assert_int_eq(qd_store_job_outputs_removed(g_s, a, &err), QD_OK);
    ck_assert_int_eq(qd_store_job_owners(g_s, note_owner, &seen, &err), QD_OK);
    char want[512];
    snprintf(want, sizeof want,
             "%lld succeeded 1 /d/uploads/aa/model.safetensors;%lld queued 0 "
             "/d/uploads/bb/inputs;%lld queued 0 -;",
             (long long)a, (long long)b, (long long)p.id);
    ck_assert_str_eq(seen.text, want);
    ck_assert_int_eq(seen.calls, 3);
    seen = (owners_seen){.fail_at = 2};
    expect_status(qd_store_job_owners(g_s, note_owner, &seen, &err), QD_NOMEM, &err);
    ck_assert_str_eq(err.message, "stop at 2");
    ck_assert_int_eq(seen.calls, 2);
    /* the store is usable after a walk that stopped */
    ck_assert_int_eq(state_of(b), QD_JOB_QUEUED);
}
END_TEST

START_TEST(test_job_counts)
{
    qd_err err;
    int64_t counts[QD_JOB_STATE_COUNT];
    ck_assert_int_eq(qd_store_job_counts(g_s, counts, &err), QD_OK);
    for (int i = 0; i < QD_JOB_STATE_COUNT; i++) ck_assert_int_eq(counts[i], 0);
    int64_t id[5];
    for (int i = 0; i < 5; i++) id[i] = add_job(g_s, "x");
    claim_ok(g_s);
    claim_ok(g_s);
    ck_assert_int_eq(qd_store_job_finish(g_s, id[0], QD_JOB_FAILED, "e", NULL, 0, NULL, &err),
                     QD_OK);
    ck_assert_int_eq(qd_store_job_cancel_queued(g_s, id[4], &err), QD_OK);
    ck_assert_int_eq(qd_store_job_counts(g_s, counts, &err), QD_OK);
    ck_assert_int_eq(counts[QD_JOB_QUEUED], 2);
    ck_assert_int_eq(counts[QD_JOB_RUNNING], 1);
    ck_assert_int_eq(counts[QD_JOB_SUCCEEDED], 0);
    ck_assert_int_eq(counts[QD_JOB_FAILED], 1);
    ck_assert_int_eq(counts[QD_JOB_CANCELLED], 1);
}
END_TEST

/* ---- concurrency ------------------------------------------------------------------------------
 */

#define N_JOBS    100
#define N_THREADS 4

typedef struct claimer {
    qd_store *s;
    int64_t ids[N_JOBS];
    int n, failures;
    char message[512];
} claimer;

/* Claims and finishes until the queue is empty; asserts nothing (Check asserts belong to the
 * main thread), records what happened. */
static void *claim_loop(void *p)
{
    claimer *c = p;
    for (;;) {
        qd_job j;
        qd_err err;
        qd_status st = qd_store_job_claim(c->s, &j, &err);
        if (st == QD_NOT_FOUND) break;
        if (st == QD_OK && c->n < N_JOBS) c->ids[c->n++] = j.id;
        if (st == QD_OK)
            st = qd_store_job_finish(c->s, j.id, QD_JOB_SUCCEEDED, NULL, NULL, 0, NULL, &err);
        qd_job_clear(&j);
        if (st != QD_OK) {
            c->failures++;
            snprintf(c->message, sizeof c->message, "%s", err.message);
            break;
        }
    }
    return NULL;
}

/* Four threads over two connections (two per store, as a second process would be): every job is
 * claimed exactly once. */
START_TEST(test_concurrent_claims)
{
    qd_store *other = open_ok(g_target);
    int64_t first = 0;
    for (int i = 0; i < N_JOBS; i++) {
        int64_t id = add_job(g_s, "c");
        if (i == 0) first = id;
    }
    static claimer c[N_THREADS];
    pthread_t t[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        memset(&c[i], 0, sizeof c[i]);
        c[i].s = i % 2 ? other : g_s;
        ck_assert_int_eq(pthread_create(&t[i], NULL, claim_loop, &c[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) pthread_join(t[i], NULL);
    qd_store_close(other);
    int seen[N_JOBS] = {0}, total = 0;
    for (int i = 0; i < N_THREADS; i++) {
        ck_assert_msg(c[i].failures == 0, "thread %d: %s", i, c[i].message);
        for (int k = 0; k < c[i].n; k++) {
            int64_t slot = c[i].ids[k] - first;
            ck_assert(slot >= 0 && slot < N_JOBS);
            seen[slot]++;
            total++;
        }
    }
    ck_assert_int_eq(total, N_JOBS);
    for (int i = 0; i < N_JOBS; i++)
        ck_assert_msg(seen[i] == 1, "job %d claimed %d times", i, seen[i]);
    int64_t counts[QD_JOB_STATE_COUNT];
    qd_err err;
    ck_assert_int_eq(qd_store_job_counts(g_s, counts, &err), QD_OK);
    ck_assert_int_eq(counts[QD_JOB_SUCCEEDED], N_JOBS);
}
END_TEST

/* ---- small pieces -----------------------------------------------------------------------------
 */

START_TEST(test_state_names_and_errors)
{
    const char *names[] = {"queued", "running", "succeeded", "failed", "cancelled", "receiving"};
    for (int i = 0; i < QD_JOB_STATE_COUNT; i++) {
        qd_job_state s = QD_JOB_STATE_COUNT;
        ck_assert_str_eq(qd_job_state_name((qd_job_state)i), names[i]);
        ck_assert(qd_job_state_parse(names[i], &s));
        ck_assert_int_eq(s, i);
    }
    qd_job_state s = QD_JOB_FAILED;
    ck_assert(!qd_job_state_parse("Queued", &s));
    ck_assert(!qd_job_state_parse("", &s));
    ck_assert(!qd_job_state_parse(NULL, &s));
    ck_assert_int_eq(s, QD_JOB_FAILED);
    ck_assert_str_eq(qd_job_state_name(QD_JOB_STATE_COUNT), "unknown");
    qd_err err;
    ck_assert_int_eq(qd_fail(&err, QD_CONFLICT, "job %d is %s", 7, "running"), QD_CONFLICT);
    ck_assert_str_eq(err.message, "job 7 is running");
    ck_assert_int_eq(qd_fail(NULL, QD_IO, "nobody reads %s", "this"), QD_IO);
    char longer[600];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    qd_fail(&err, QD_IO, "%s", longer);
    ck_assert_uint_eq(strlen(err.message), sizeof err.message - 1);
    qd_job_clear(NULL);
    qd_outputs_free(NULL, 0);
}
END_TEST

/* The write gate lets writers in by arrival: with the gate held, threads that queue one after
 * another get it in that order. */
typedef struct gate_waiter {
    int id;
    int *order, *n;
    pthread_mutex_t *mu;
} gate_waiter;

static void *gate_thread(void *arg)
{
    gate_waiter *w = arg;
    qd_write_gate_enter();
    pthread_mutex_lock(w->mu);
    w->order[(*w->n)++] = w->id;
    pthread_mutex_unlock(w->mu);
    qd_write_gate_leave();
    return NULL;
}

START_TEST(test_write_gate_fifo)
{
    enum { N = 6 };
    int order[N], n = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_t t[N];
    gate_waiter w[N];
    qd_write_gate_enter();
    for (int i = 0; i < N; i++) {
        w[i] = (gate_waiter){i, order, &n, &mu};
        ck_assert_int_eq(pthread_create(&t[i], NULL, gate_thread, &w[i]), 0);
        while (qd_write_gate_depth() < (unsigned long)i + 2) { /* thread i holds its ticket */
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    qd_write_gate_leave();
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    ck_assert_int_eq(n, N);
    for (int i = 0; i < N; i++) ck_assert_int_eq(order[i], i);
}
END_TEST

static double mono_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* [storage] busy_timeout reaches the job store's and the tokens' connections: with another
 * connection holding the write lock, a write waits about the configured second, not the built-in
 * five, then fails naming the lock; without the lock the same writes succeed. */
START_TEST(test_busy_timeout_tuned)
{
    qd_store_close(g_s); /* the fixture's connection (default timeout) stays out of the way */
    g_s = NULL;
    const qd_db_tuning one_second = {.busy_timeout_ms = 1000};
    qd_err err = {{0}};
    qd_store *s = NULL;
    qd_tokens *t = NULL;
    ck_assert_msg(qd_store_open_tuned(g_path, &one_second, &s, &err) == QD_OK, "%s", err.message);
    ck_assert_msg(qd_tokens_open_tuned(g_path, &one_second, &t, &err) == QD_OK, "%s", err.message);
    sqlite3 *locker = raw_open(g_path);
    ck_assert_int_eq(sqlite3_exec(locker, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    bool created = false;
    double t0 = mono_now();
    ck_assert(qd_store_ruleset_put(s, "r", "[]", &created, &err) != QD_OK);
    double waited_store = mono_now() - t0;
    ck_assert_msg(strstr(err.message, "locked") != NULL, "%s", err.message);
    char token[QD_TOKEN_LEN + 1];
    qd_token_info info;
    t0 = mono_now();
    ck_assert(qd_tokens_create(t, "ops", QD_ROLE_READER, 0, token, &info, &err) != QD_OK);
    double waited_tokens = mono_now() - t0;
    ck_assert_msg(strstr(err.message, "locked") != NULL, "%s", err.message);
    /* at least the timeout; well under the built-in 5 s */
    ck_assert_msg(waited_store >= 0.9 && waited_store < 4.0, "store waited %.2f s", waited_store);
    ck_assert_msg(waited_tokens >= 0.9 && waited_tokens < 4.0, "tokens waited %.2f s",
                  waited_tokens);
    ck_assert_int_eq(sqlite3_exec(locker, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(locker);
    ck_assert_msg(qd_store_ruleset_put(s, "r", "[]", &created, &err) == QD_OK, "%s", err.message);
    ck_assert_msg(qd_tokens_create(t, "ops", QD_ROLE_READER, 0, token, &info, &err) == QD_OK, "%s",
                  err.message);
    qd_tokens_close(t);
    qd_store_close(s);
}
END_TEST

/* Retention's choice, the same on both engines: by age (ended before), by count (older than the
 * `keep` newest succeeded jobs), both, neither; a job whose outputs are gone is not chosen again.
 * And a job's unused rules are set once. */
static void expect_expiring(int64_t before_ms, int keep, const int64_t *want, size_t n_want)
{
    int64_t *ids = NULL;
    size_t n = 99;
    qd_err err;
    ck_assert_msg(qd_store_jobs_expiring(g_s, before_ms, keep, &ids, &n, &err) == QD_OK, "%s",
                  err.message);
    ck_assert_msg(n == n_want, "before %lld keep %d: %zu ids, want %zu", (long long)before_ms, keep,
                  n, n_want);
    for (size_t i = 0; i < n; i++) ck_assert_int_eq(ids[i], want[i]);
    free(ids);
}

START_TEST(test_jobs_expiring)
{
    qd_err err;
    int64_t id[5];
    for (int i = 0; i < 5; i++) id[i] = add_job(g_s, "r");
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(claim_ok(g_s), id[i]);
        ck_assert_int_eq(qd_store_job_finish(g_s, id[i], i == 4 ? QD_JOB_FAILED : QD_JOB_SUCCEEDED,
                                             NULL, NULL, 0, NULL, &err),
                         QD_OK);
        char sql[96];
        snprintf(sql, sizeof sql, "UPDATE jobs SET finished_ms = %d WHERE id = %lld",
                 (i + 1) * 1000, (long long)id[i]);
        eng_exec(sql);
    }
    expect_expiring(2500, 0, id, 2);
    expect_expiring(0, 2, id, 2);
    expect_expiring(0, 3, id, 1);
    expect_expiring(0, 0, NULL, 0);
    expect_expiring(3500, 1, id, 3);
    expect_expiring(0, 9, NULL, 0);
    ck_assert_int_eq(qd_store_job_outputs_removed(g_s, id[0], &err), QD_OK);
    expect_status(qd_store_job_outputs_removed(g_s, id[0], &err), QD_CONFLICT, &err);
    expect_status(qd_store_job_outputs_removed(g_s, id[4], &err), QD_CONFLICT, &err);
    expect_status(qd_store_job_outputs_removed(g_s, 999, &err), QD_NOT_FOUND, &err);
    expect_expiring(2500, 0, id + 1, 1);
    qd_job j;
    ck_assert_int_eq(qd_store_job_get(g_s, id[0], &j, &err), QD_OK);
    ck_assert_int_gt(j.outputs_removed_ms, 0);
    qd_job_clear(&j);
    /* unused rules: set when the job has none, kept after */
    ck_assert_int_eq(qd_store_job_set_unused(g_s, id[1], "[2]", &err), QD_OK);
    ck_assert_int_eq(qd_store_job_set_unused(g_s, id[1], "[3]", &err), QD_OK);
    ck_assert_int_eq(qd_store_job_get(g_s, id[1], &j, &err), QD_OK);
    ck_assert_str_eq(j.unused_rules, "[2]");
    qd_job_clear(&j);
}
END_TEST

/* ---- tokens -----------------------------------------------------------------------------------
 */

static qd_tokens *tokens_ok(void)
{
    qd_tokens *t = NULL;
    qd_err err = {{0}};
    ck_assert_msg(qd_tokens_open_engine(g_kind, g_target, NULL, &t, &err) == QD_OK, "%s",
                  err.message);
    return t;
}

static qd_token_check check(qd_tokens *t, const char *token, qd_token_info *who)
{
    qd_token_check r = QD_TOKEN_VALID;
    qd_err err;
    ck_assert_msg(qd_tokens_check(t, token, &r, who, &err) == QD_OK, "%s", err.message);
    return r;
}

/* Issue, check (the hash looked up, the role and name back), the same name twice, list by name,
 * expiry, revoke: on the tokens' own connection. */
START_TEST(test_tokens)
{
    qd_tokens *t = tokens_ok();
    qd_err err;
    bool any = true;
    ck_assert_int_eq(qd_tokens_any(t, &any, &err), QD_OK);
    ck_assert(!any);
    char ops[QD_TOKEN_LEN + 1], ci[QD_TOKEN_LEN + 1];
    qd_token_info info, who;
    ck_assert_msg(qd_tokens_create(t, "ops", QD_ROLE_OPERATOR, 0, ops, &info, &err) == QD_OK, "%s",
                  err.message);
    ck_assert_uint_eq(strlen(ops), QD_TOKEN_LEN);
    ck_assert_int_eq(info.expires_ms, 0);
    ck_assert_int_eq(qd_tokens_create(t, "ci", QD_ROLE_TRAINER, 30, ci, &info, &err), QD_OK);
    ck_assert_int_eq(info.expires_ms - info.created_ms, (int64_t)30 * 86400 * 1000);
    char again[QD_TOKEN_LEN + 1];
    expect_status(qd_tokens_create(t, "ops", QD_ROLE_READER, 0, again, &info, &err), QD_CONFLICT,
                  &err);
    ck_assert_ptr_nonnull(strstr(err.message, "'ops' exists"));
    expect_status(qd_tokens_create(t, ".x", QD_ROLE_READER, 0, again, &info, &err), QD_INVALID,
                  &err);
    ck_assert_int_eq(check(t, ops, &who), QD_TOKEN_VALID);
    ck_assert_str_eq(who.name, "ops");
    ck_assert_int_eq(who.role, QD_ROLE_OPERATOR);
    ck_assert_int_eq(check(t, ci, &who), QD_TOKEN_VALID);
    ck_assert_int_eq(who.role, QD_ROLE_TRAINER);
    char wrong[QD_TOKEN_LEN + 1];
    memcpy(wrong, ops, sizeof wrong);
    wrong[10] = wrong[10] == 'A' ? 'B' : 'A';
    ck_assert_int_eq(check(t, wrong, &who), QD_TOKEN_UNKNOWN);
    ck_assert_int_eq(check(t, "qdt_short", &who), QD_TOKEN_UNKNOWN);
    qd_token_info *list = NULL;
    size_t n = 0;
    ck_assert_int_eq(qd_tokens_list(t, &list, &n, &err), QD_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(list[0].name, "ci");
    ck_assert_str_eq(list[1].name, "ops");
    free(list);
    /* made 10 ms ago, expired 1 ms after: in the past however fast this runs */
    eng_exec("UPDATE tokens SET created_ms = created_ms - 10, expires_ms = created_ms - 9 WHERE "
             "name = 'ci'");
    ck_assert_int_eq(check(t, ci, &who), QD_TOKEN_EXPIRED);
    ck_assert_str_eq(who.name, "ci");
    ck_assert_int_eq(qd_tokens_revoke(t, "ops", &err), QD_OK);
    ck_assert_int_eq(check(t, ops, &who), QD_TOKEN_UNKNOWN);
    expect_status(qd_tokens_revoke(t, "ops", &err), QD_NOT_FOUND, &err);
    ck_assert_int_eq(qd_tokens_any(t, &any, &err), QD_OK);
    ck_assert(any); /* the expired one still locks the server */
    ck_assert_int_eq(eng_int("SELECT count(*) FROM tokens WHERE name = 'ci'"), 1);
    qd_tokens_close(t);
}
END_TEST

/* The cases every engine runs, as TCases named "<group> <engine>" (Check keeps the names). */
typedef struct engine_cases {
    const char *rulesets, *jobs, *tokens;
    void (*fixture)(void);
} engine_cases;

static const engine_cases sqlite_cases = {"rulesets sqlite", "jobs sqlite", "tokens sqlite", setup};
static const engine_cases pg_cases = {"rulesets postgresql", "jobs postgresql", "tokens postgresql",
                                      setup_pg};

static void add_engine_cases(Suite *s, const engine_cases *e)
{
    void (*fixture)(void) = e->fixture;
    TCase *rs = tcase_create(e->rulesets);
    tcase_add_checked_fixture(rs, fixture, teardown);
    tcase_add_test(rs, test_ruleset_crud);
    tcase_add_test(rs, test_ruleset_list);
    tcase_add_test(rs, test_ruleset_delete_keeps_jobs);
    suite_add_tcase(s, rs);
    TCase *jobs = tcase_create(e->jobs);
    tcase_add_checked_fixture(jobs, fixture, teardown);
    tcase_set_timeout(jobs, 60);
    tcase_add_test(jobs, test_job_insert_get);
    tcase_add_test(jobs, test_job_ids_not_reused);
    tcase_add_test(jobs, test_job_list);
    tcase_add_test(jobs, test_job_list_limit_max);
    tcase_add_test(jobs, test_job_claim_fifo);
    tcase_add_test(jobs, test_job_progress);
    tcase_add_test(jobs, test_job_finish);
    tcase_add_test(jobs, test_job_finish_atomic);
    tcase_add_test(jobs, test_job_requeue);
    tcase_add_test(jobs, test_job_cancel_queued);
    tcase_add_test(jobs, test_job_receiving);
    tcase_add_test(jobs, test_job_delete);
    tcase_add_test(jobs, test_job_recover);
    tcase_add_test(jobs, test_job_owners);
    tcase_add_test(jobs, test_job_counts);
    tcase_add_test(jobs, test_jobs_expiring);
    tcase_add_test(jobs, test_concurrent_claims);
    suite_add_tcase(s, jobs);
    TCase *tok = tcase_create(e->tokens);
    tcase_add_checked_fixture(tok, fixture, teardown);
    tcase_add_test(tok, test_tokens);
    suite_add_tcase(s, tok);
}

Suite *suite_store(void)
{
    Suite *s = suite_create("store");
    TCase *schema = tcase_create("schema");
    tcase_add_checked_fixture(schema, setup, teardown);
    tcase_add_test(schema, test_schema_fresh);
    tcase_add_test(schema, test_schema_checks);
    tcase_add_test(schema, test_migrations_stepwise);
    tcase_add_test(schema, test_reopen_idempotent);
    tcase_add_test(schema, test_newer_refused);
    tcase_add_test(schema, test_foreign_refused);
    tcase_add_test(schema, test_failed_migration_rolls_back);
    tcase_add_test(schema, test_busy_timeout);
    tcase_add_test(schema, test_open_errors);
    suite_add_tcase(s, schema);
    TCase *busy = tcase_create("busy timeout");
    tcase_add_checked_fixture(busy, setup, teardown);
    tcase_set_timeout(busy, 30); /* two writes wait out a 1 s lock */
    tcase_add_test(busy, test_busy_timeout_tuned);
    suite_add_tcase(s, busy);
    TCase *sq = tcase_create("sqlite");
    tcase_add_checked_fixture(sq, setup, teardown);
    tcase_add_test(sq, test_migration_0007_keeps_jobs);
    tcase_add_test(sq, test_state_names_and_errors);
    tcase_add_test(sq, test_write_gate_fifo);
    suite_add_tcase(s, sq);
    add_engine_cases(s, &sqlite_cases);
    if (!qdt_pg_skipped()) add_engine_cases(s, &pg_cases);
    return s;
}
