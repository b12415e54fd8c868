/* store_sqlite_tokens.c -- the SQLite engine's tokens (migration 0003): the rows behind tokens.h
 * (store_tokens.c makes, hashes and compares the tokens; here they are only stored and found by
 * their SHA-256). One connection of its own (the SQLite layer's tokens role, db.h) behind a
 * mutex: checks never wait for the job store's or the statistics writer's transactions; writes
 * take their turn at the write gate.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "store_sqlite.h"
#include "write_gate.h"

typedef enum tok_stmt { T_CHECK, T_ANY, T_LIST, T_INSERT, T_DELETE, T_COUNT } tok_stmt;

static const qd_db_stmt_def tok_sql[] = {
    {T_CHECK, "SELECT name, role, created_ms, expires_ms, hash FROM tokens WHERE hash = ?1"},
    {T_ANY, "SELECT EXISTS (SELECT 1 FROM tokens)"},
    {T_LIST, "SELECT name, role, created_ms, expires_ms FROM tokens ORDER BY name"},
    {T_INSERT, "INSERT INTO tokens (name, role, hash, created_ms, expires_ms) "
               "VALUES (?1, ?2, ?3, ?4, ?5)"},
    {T_DELETE, "DELETE FROM tokens WHERE name = ?1"},
};

typedef struct sq_tokens {
    qd_db *db;
    sqlite3_stmt *q[T_COUNT];
    pthread_mutex_t mu;
} sq_tokens;

qd_status qd_sqlite_tokens_open(const char *path, const qd_db_tuning *tuning, void **out,
                                qd_err *err)
{
    sq_tokens *t = calloc(1, sizeof *t);
    if (!t) return qd_fail(err, QD_NOMEM, "out of memory");
    qd_status st = qd_db_open_tuned(path, QD_DB_TOKENS, tuning, &t->db, err);
    if (st == QD_OK)
        st = qd_db_prepare(t->db, tok_sql, sizeof tok_sql / sizeof tok_sql[0], t->q, T_COUNT, err);
    if (st == QD_OK) st = qd_db_prepared_all(t->db, t->q, T_COUNT, err);
    if (st != QD_OK || pthread_mutex_init(&t->mu, NULL) != 0) {
        qd_db_finalize(t->q, T_COUNT);
        qd_db_close(t->db);
        free(t);
        return st != QD_OK ? st : qd_fail(err, QD_NOMEM, "cannot create the tokens' mutex");
    }
    *out = t;
    return QD_OK;
}

void qd_sqlite_tokens_close(void *cls)
{
    sq_tokens *t = cls;
    if (!t) return;
    qd_db_finalize(t->q, T_COUNT);
    qd_db_close(t->db);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* Statement k, reset and cleared (the caller holds the mutex). */
static sqlite3_stmt *stmt(sq_tokens *t, tok_stmt k)
{
    sqlite3_reset(t->q[k]);
    sqlite3_clear_bindings(t->q[k]);
    return t->q[k];
}

/* The row of T_CHECK or T_LIST at the cursor into *info. */
static void read_info(sqlite3_stmt *q, qd_token_info *info)
{
    memset(info, 0, sizeof *info);
    const unsigned char *name = sqlite3_column_text(q, 0);
    snprintf(info->name, sizeof info->name, "%s", name ? (const char *)name : "");
    if (!qd_role_parse((const char *)sqlite3_column_text(q, 1), &info->role))
        info->role = QD_ROLE_READER; /* the CHECK constraint makes this unreachable */
    info->created_ms = sqlite3_column_int64(q, 2);
    info->expires_ms = sqlite3_column_int64(q, 3);
}

static qd_status insert(sq_tokens *t, const qd_token_info *info, const uint8_t *hash, qd_err *err)
{
    sqlite3_stmt *q = stmt(t, T_INSERT);
    int rc = sqlite3_bind_text(q, 1, info->name, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_text(q, 2, qd_role_name(info->role), -1, SQLITE_STATIC);
    rc |= sqlite3_bind_blob(q, 3, hash, QD_TOKEN_HASH_LEN, SQLITE_STATIC);
    rc |= sqlite3_bind_int64(q, 4, info->created_ms);
    rc |= info->expires_ms ? sqlite3_bind_int64(q, 5, info->expires_ms) : sqlite3_bind_null(q, 5);
    if (rc != SQLITE_OK) return qd_db_fail(t->db, err, "create token");
    rc = sqlite3_step(q);
    sqlite3_reset(q);
    if (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE)
        return qd_fail(err, QD_CONFLICT, "a token named '%s' exists (revoke it first)", info->name);
    return rc == SQLITE_DONE ? QD_OK : qd_db_fail(t->db, err, "create token");
}

qd_status qd_sqlite_token_insert(void *cls, const qd_token_info *info,
                                 const uint8_t hash[QD_TOKEN_HASH_LEN], qd_err *err)
{
    sq_tokens *t = cls;
    qd_write_gate_enter();
    pthread_mutex_lock(&t->mu);
    qd_status st = insert(t, info, hash, err); /* one statement: its own transaction */
    pthread_mutex_unlock(&t->mu);
    qd_write_gate_leave();
    return st;
}

qd_status qd_sqlite_token_delete(void *cls, const char *name, qd_err *err)
{
    sq_tokens *t = cls;
    qd_write_gate_enter();
    pthread_mutex_lock(&t->mu);
    sqlite3_stmt *q = stmt(t, T_DELETE);
    qd_status st = QD_OK;
    if (sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_step(q) != SQLITE_DONE)
        st = qd_db_fail(t->db, err, "revoke token");
    else if (sqlite3_changes(qd_db_sqlite(t->db)) == 0)
        st = qd_fail(err, QD_NOT_FOUND, "no token named '%s'", name);
    sqlite3_reset(q);
    pthread_mutex_unlock(&t->mu);
    qd_write_gate_leave();
    return st;
}

qd_status qd_sqlite_token_list(void *cls, qd_token_info **out, size_t *n, qd_err *err)
{
    sq_tokens *t = cls;
    size_t cap = 0;
    qd_status st = QD_OK;
    pthread_mutex_lock(&t->mu);
    sqlite3_stmt *q = stmt(t, T_LIST);
    int rc;
    while (st == QD_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            qd_token_info *grown = realloc(*out, cap * sizeof *grown);
            if (!grown) {
                st = qd_fail(err, QD_NOMEM, "out of memory");
                break;
            }
            *out = grown;
        }
        read_info(q, &(*out)[(*n)++]);
    }
    if (st == QD_OK && rc != SQLITE_DONE) st = qd_db_fail(t->db, err, "list tokens");
    sqlite3_reset(q);
    pthread_mutex_unlock(&t->mu);
    return st;
}

qd_status qd_sqlite_token_any(void *cls, bool *any, qd_err *err)
{
    sq_tokens *t = cls;
    pthread_mutex_lock(&t->mu);
    sqlite3_stmt *q = stmt(t, T_ANY);
    qd_status st = QD_OK;
    if (sqlite3_step(q) == SQLITE_ROW)
        *any = sqlite3_column_int(q, 0) != 0;
    else
        st = qd_db_fail(t->db, err, "count tokens");
    sqlite3_reset(q);
    pthread_mutex_unlock(&t->mu);
    return st;
}

qd_status qd_sqlite_token_lookup(void *cls, const uint8_t hash[QD_TOKEN_HASH_LEN], bool *found,
                                 qd_token_info *who, uint8_t stored[QD_TOKEN_HASH_LEN], qd_err *err)
{
    sq_tokens *t = cls;
    pthread_mutex_lock(&t->mu);
    sqlite3_stmt *q = stmt(t, T_CHECK);
    qd_status st = QD_OK;
    int rc = sqlite3_bind_blob(q, 1, hash, QD_TOKEN_HASH_LEN, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(q);
    if (rc == SQLITE_ROW && sqlite3_column_bytes(q, 4) == QD_TOKEN_HASH_LEN) {
        read_info(q, who);
        memcpy(stored, sqlite3_column_blob(q, 4), QD_TOKEN_HASH_LEN);
        *found = true;
    } else if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        st = qd_db_fail(t->db, err, "check token");
    }
    sqlite3_reset(q);
    pthread_mutex_unlock(&t->mu);
    return st;
}
