/* test_store_pg.c -- what only the PostgreSQL engine has (daemon/store/store_pg*.c), on the run's
 * cluster (pgtest.h): the schema its migrations leave; migrations applied once when several
 * openers race on a fresh database; a database newer than the binary, and another program's,
 * refused; passwords only through libpq's mechanisms and never in an error (a failed login, an
 * unknown database, a connection string libpq cannot parse); an unreachable server named
 * clearly; a connection the server dropped is reset by the next call; tokens shared by two
 * connections at once; the masking of connection strings. The cases both engines share are
 * test_store.c's. SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "migrations.h"
#include "pgtest.h"
#include "qdtest.h"
#include "store.h"
#include "store_pg.h"
#include "tokens.h"

#define SECRET "S3cret-Pw_9"

static char *g_db;

static void setup(void)
{
    g_db = qdt_pg_new_db();
}

static void teardown(void)
{
    free(g_db);
    g_db = NULL;
}

static qd_status open_pg(const char *conninfo, qd_store **s, qd_err *err)
{
    *s = NULL;
    memset(err, 0, sizeof *err);
    return qd_store_open_engine(QD_STORE_POSTGRESQL, conninfo, NULL, s, err);
}

static qd_store *open_ok(const char *conninfo)
{
    qd_store *s = NULL;
    qd_err err;
    ck_assert_msg(open_pg(conninfo, &s, &err) == QD_OK, "open: %s", err.message);
    return s;
}

static long long pg_int(const char *sql)
{
    char *t = qdt_pg_text(g_db, sql);
    long long v = strtoll(t, NULL, 10);
    free(t);
    return v;
}

/* ---- schema and migrations --------------------------------------------------------------------
 */

START_TEST(test_pg_schema_fresh)
{
    qd_store *s = open_ok(g_db);
    ck_assert_int_eq(qd_store_schema_version(s), qd_pg_n_migrations);
    ck_assert_int_eq(qd_store_migration_count_of(QD_STORE_POSTGRESQL), qd_pg_n_migrations);
    ck_assert_int_eq(pg_int("SELECT version FROM quantd_schema"), qd_pg_n_migrations);
    char *tables = qdt_pg_text(g_db, "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM "
                                     "pg_tables WHERE schemaname = current_schema()");
    ck_assert_str_eq(tables,
                     "jobs,outputs,quantd_schema,reports,rulesets,stat_models,stat_post_keys,"
                     "stats,tokens");
    free(tables);
    qd_err err;
    ck_assert_int_eq(qd_store_ping(s, &err), QD_OK);
    qd_store_close(s);
    s = open_ok(g_db); /* a second open finds nothing to do */
    ck_assert_int_eq(pg_int("SELECT count(*) FROM quantd_schema"), 1);
    qd_store_close(s);
}
END_TEST

#define RACERS 4

typedef struct racer {
    const char *conninfo;
    qd_status st;
    char message[512];
} racer;

static void *race_open(void *arg)
{
    racer *r = arg;
    qd_store *s = NULL;
    qd_err err = {{0}};
    r->st = qd_store_open_engine(QD_STORE_POSTGRESQL, r->conninfo, NULL, &s, &err);
    snprintf(r->message, sizeof r->message, "%s", err.message);
    qd_store_close(s);
    return NULL;
}

/* Instances starting together on an empty database: the advisory lock lets one apply the
 * migrations and the others find them applied (without it, the CREATE TABLEs collide). */
START_TEST(test_pg_migrations_race)
{
    for (int round = 0; round < 3; round++) {
        char *db = round == 0 ? strdup(g_db) : qdt_pg_new_db();
        racer r[RACERS];
        pthread_t t[RACERS];
        for (int i = 0; i < RACERS; i++) {
            r[i] = (racer){.conninfo = db};
            ck_assert_int_eq(pthread_create(&t[i], NULL, race_open, &r[i]), 0);
        }
        for (int i = 0; i < RACERS; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < RACERS; i++)
            ck_assert_msg(r[i].st == QD_OK, "round %d, opener %d: %s", round, i, r[i].message);
        char *v = qdt_pg_text(db, "SELECT count(*) || ' ' || max(version) FROM quantd_schema");
        char want[32];
        snprintf(want, sizeof want, "1 %d", qd_pg_n_migrations);
        ck_assert_str_eq(v, want);
        free(v);
        free(db);
    }
}
END_TEST

START_TEST(test_pg_newer_refused)
{
    qd_store_close(open_ok(g_db));
    char sql[96];
    snprintf(sql, sizeof sql, "UPDATE quantd_schema SET version = %d", qd_pg_n_migrations + 1);
    qdt_pg_exec(g_db, sql);
    qd_store *s = NULL;
    qd_err err;
    ck_assert_int_eq(open_pg(g_db, &s, &err), QD_DB);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.message, "newer than this quantd") != NULL, "%s", err.message);
    qd_tokens *t = NULL;
    ck_assert_int_eq(qd_tokens_open_engine(QD_STORE_POSTGRESQL, g_db, NULL, &t, &err), QD_DB);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(pg_int("SELECT version FROM quantd_schema"), qd_pg_n_migrations + 1);
}
END_TEST

START_TEST(test_pg_foreign_refused)
{
    qdt_pg_exec(g_db, "CREATE TABLE invoices (id int)");
    qd_store *s = NULL;
    qd_err err;
    ck_assert_int_eq(open_pg(g_db, &s, &err), QD_DB);
    ck_assert_msg(strstr(err.message, "not a quantd database") != NULL, "%s", err.message);
    ck_assert_int_eq(pg_int("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"), 1);
    /* the tokens' connection never migrates: an empty database is refused too */
    char *empty = qdt_pg_new_db();
    qd_tokens *t = NULL;
    ck_assert_int_eq(qd_tokens_open_engine(QD_STORE_POSTGRESQL, empty, NULL, &t, &err), QD_DB);
    ck_assert_msg(strstr(err.message, "open the store first") != NULL, "%s", err.message);
    free(empty);
}
END_TEST

/* Two instances' tokens connections on one database: a token issued through one is valid at the
 * other at once, and revoked through the other it is refused by the first at once (each check is
 * a query: nothing is cached). */
START_TEST(test_pg_tokens_shared)
{
    qd_store_close(open_ok(g_db));
    qd_tokens *a = NULL, *b = NULL;
    qd_err err;
    ck_assert_int_eq(qd_tokens_open_engine(QD_STORE_POSTGRESQL, g_db, NULL, &a, &err), QD_OK);
    ck_assert_int_eq(qd_tokens_open_engine(QD_STORE_POSTGRESQL, g_db, NULL, &b, &err), QD_OK);
    char token[QD_TOKEN_LEN + 1];
    qd_token_info info, who;
    ck_assert_int_eq(qd_tokens_create(a, "ci", QD_ROLE_TRAINER, 0, token, &info, &err), QD_OK);
    qd_token_check r = QD_TOKEN_UNKNOWN;
    ck_assert_int_eq(qd_tokens_check(b, token, &r, &who, &err), QD_OK);
    ck_assert_int_eq(r, QD_TOKEN_VALID);
    ck_assert_str_eq(who.name, "ci");
    ck_assert_int_eq(qd_tokens_revoke(b, "ci", &err), QD_OK);
    ck_assert_int_eq(qd_tokens_check(a, token, &r, &who, &err), QD_OK);
    ck_assert_int_eq(r, QD_TOKEN_UNKNOWN);
    qd_tokens_close(a);
    qd_tokens_close(b);
}
END_TEST

/* ---- passwords and reachability ---------------------------------------------------------------
 */

/* The database's owner becomes qdt_pw, who logs in with a password (pgtest.c's pg_hba.conf). */
static char *db_name(void)
{
    char *name = qdt_pg_text(g_db, "SELECT current_database()");
    return name;
}

static void make_password_user(void)
{
    char *admin = qdt_pg_conninfo("postgres", NULL, NULL);
    qdt_pg_exec(admin, "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
                       "'qdt_pw') THEN CREATE ROLE qdt_pw LOGIN PASSWORD '" SECRET "'; END IF; "
                       "END $$");
    char *name = db_name(), sql[128];
    snprintf(sql, sizeof sql, "ALTER DATABASE %s OWNER TO qdt_pw", name);
    qdt_pg_exec(admin, sql);
    free(name);
    free(admin);
}

static void expect_no_secret(const char *conninfo, const char *needle)
{
    qd_store *s = NULL;
    qd_err err;
    ck_assert_int_eq(open_pg(conninfo, &s, &err), QD_DB);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.message, needle) != NULL, "want \"%s\" in: %s", needle, err.message);
    ck_assert_msg(strstr(err.message, "S3cret") == NULL, "the password leaked: %s", err.message);
    ck_assert_msg(strstr(err.message, "S3c") == NULL, "part of the password leaked: %s",
                  err.message);
    qd_tokens *t = NULL;
    ck_assert_int_eq(qd_tokens_open_engine(QD_STORE_POSTGRESQL, conninfo, NULL, &t, &err), QD_DB);
    ck_assert_msg(strstr(err.message, "S3c") == NULL, "the password leaked: %s", err.message);
}

START_TEST(test_pg_password_never_in_errors)
{
    make_password_user();
    char *name = db_name();
    /* a wrong password: libpq's message names the user, ours the server, neither the password */
    char *wrong = qdt_pg_conninfo(name, "qdt_pw", "password=S3cret-wrong");
    expect_no_secret(wrong, "password authentication failed");
    ck_assert_ptr_nonnull(strstr(wrong, "S3cret-wrong"));
    /* the right password, a database that does not exist */
    char *nodb = qdt_pg_conninfo("no_such_db", "qdt_pw", "password=" SECRET);
    expect_no_secret(nodb, "no_such_db");
    /* a URI libpq cannot decode quotes the piece it stopped at: the password */
    char *uri = NULL;
    ck_assert(asprintf(&uri, "postgresql://qdt_pw:S3c%%ZZret@/%s?host=%s", name,
                       qdt_pg_socket_dir()) > 0);
    expect_no_secret(uri, "cannot connect to PostgreSQL");
    /* the same URI with a good password works: the string is libpq's own mechanism */
    free(uri);
    ck_assert(asprintf(&uri, "postgresql://qdt_pw:%s@/%s?host=%s", SECRET, name,
                       qdt_pg_socket_dir()) > 0);
    qd_store_close(open_ok(uri));
    free(uri);
    free(nodb);
    free(wrong);
    free(name);
}
END_TEST

/* PGPASSFILE: the password never appears in the connection string at all. */
START_TEST(test_pg_passfile)
{
    make_password_user();
    char *name = db_name();
    char *dir = qdt_tmpdir(), *passfile = kit_join(dir, "pgpass");
    const char *line = "*:*:*:qdt_pw:" SECRET "\n";
    ck_assert_int_eq(kit_write_file(passfile, line, strlen(line)), 0);
    ck_assert_int_eq(chmod(passfile, 0600), 0);
    char *conninfo = qdt_pg_conninfo(name, "qdt_pw", NULL);
    qd_store *s = NULL;
    qd_err err;
    ck_assert_int_eq(open_pg(conninfo, &s, &err), QD_DB); /* no password anywhere yet */
    ck_assert_msg(strstr(err.message, "password") != NULL, "%s", err.message);
    setenv("PGPASSFILE", passfile, 1);
    s = open_ok(conninfo);
    ck_assert_int_eq(qd_store_ping(s, &err), QD_OK);
    qd_store_close(s);
    unsetenv("PGPASSFILE");
    kit_rmtree(dir);
    free(conninfo);
    free(passfile);
    free(dir);
    free(name);
}
END_TEST

START_TEST(test_pg_unreachable)
{
    qd_store *s = NULL;
    qd_err err;
    ck_assert_int_eq(
        open_pg("host=/nonexistent/quantd-pg port=5499 dbname=q user=u password=" SECRET, &s, &err),
        QD_DB);
    ck_assert_msg(strstr(err.message, "cannot connect to PostgreSQL") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "host=/nonexistent/quantd-pg") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "port=5499") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "S3c") == NULL, "%s", err.message);
    ck_assert_int_eq(open_pg("", &s, &err), QD_INVALID);
}
END_TEST

/* The server ends the store's session: the call that finds out fails naming the lost
 * connection, and the next one reconnects by itself. */
START_TEST(test_pg_reconnects)
{
    qd_store *s = open_ok(g_db);
    qd_err err;
    ck_assert_int_eq(qd_store_ruleset_put(s, "r", "{}", NULL, &err), QD_OK);
    qdt_pg_exec(g_db, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                      "datname = current_database() AND pid <> pg_backend_pid()");
    qd_status st = qd_store_ping(s, &err);
    if (st != QD_OK) ck_assert_msg(strstr(err.message, "PostgreSQL") != NULL, "%s", err.message);
    char *body = NULL;
    ck_assert_msg(qd_store_ruleset_get(s, "r", &body, NULL, NULL, &err) == QD_OK, "%s",
                  err.message);
    ck_assert_str_eq(body, "{}");
    free(body);
    qd_store_close(s);
}
END_TEST

/* ---- connection strings -----------------------------------------------------------------------
 */

START_TEST(test_pg_mask_and_redact)
{
    char *m = qd_pg_mask("postgresql://ann:" SECRET "@db.example:5433/quantd?sslmode=require");
    ck_assert_ptr_nonnull(m);
    ck_assert_msg(strstr(m, "user=ann") && strstr(m, "host=db.example") && strstr(m, "port=5433") &&
                      strstr(m, "dbname=quantd") && strstr(m, "sslmode=require"),
                  "%s", m);
    ck_assert_msg(!strstr(m, "S3c"), "%s", m);
    free(m);
    m = qd_pg_mask("host=/run/pg dbname='a b' password='" SECRET "'");
    ck_assert_msg(strstr(m, "dbname='a b'") && !strstr(m, "S3c") && !strstr(m, "password"), "%s",
                  m);
    free(m);
    m = qd_pg_mask("postgresql://ann:S3c%ZZ@h/d");
    ck_assert_str_eq(m, "(a connection string libpq cannot parse)");
    free(m);
    m = qd_pg_mask("quantd");
    ck_assert_str_eq(m, "dbname=quantd");
    free(m);
    char out[128];
    qd_pg_redact("password = 'S3c ret' host=x", "bad S3c ret here, S3c ret", out, sizeof out);
    ck_assert_str_eq(out, "bad *** here, ***");
    qd_pg_redact("postgresql://u:S3c%41b@h/d", "token \"S3c%41b\" or S3cAb", out, sizeof out);
    ck_assert_str_eq(out, "token \"***\" or ***");
    qd_pg_redact("postgresql://u:pw@h/d", "pw", out, 3); /* no room for the mark */
    ck_assert_str_eq(out, "");
    qd_pg_redact("host=h", "nothing secret", out, sizeof out);
    ck_assert_str_eq(out, "nothing secret");
}
END_TEST

Suite *suite_store_pg(void)
{
    Suite *s = suite_create("store_pg");
    if (qdt_pg_skipped()) return s;
    TCase *schema = tcase_create("postgresql schema");
    tcase_add_checked_fixture(schema, setup, teardown);
    tcase_set_timeout(schema, 60);
    tcase_add_test(schema, test_pg_schema_fresh);
    tcase_add_test(schema, test_pg_migrations_race);
    tcase_add_test(schema, test_pg_newer_refused);
    tcase_add_test(schema, test_pg_foreign_refused);
    tcase_add_test(schema, test_pg_tokens_shared);
    suite_add_tcase(s, schema);
    TCase *conn = tcase_create("postgresql connections");
    tcase_add_checked_fixture(conn, setup, teardown);
    tcase_set_timeout(conn, 60);
    tcase_add_test(conn, test_pg_password_never_in_errors);
    tcase_add_test(conn, test_pg_passfile);
    tcase_add_test(conn, test_pg_unreachable);
    tcase_add_test(conn, test_pg_reconnects);
    tcase_add_test(conn, test_pg_mask_and_redact);
    suite_add_tcase(s, conn);
    return s;
}
