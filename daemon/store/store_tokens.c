/* store_tokens.c -- access tokens in SQLite (migration 0003): a token is 256 random bits
 * (getrandom) written as "qdt_" + base64url; the table keeps its SHA-256 (nettle) only. A
 * request's token is hashed, looked up by that hash (nobody can steer a hash towards a stored
 * one, so the index lookup leaks nothing usable) and the hashes are compared again with
 * nettle's memeql_sec. One connection of its own (the SQLite layer's tokens role, db.h) behind
 * a mutex: checks never wait for the job store's or the statistics writer's transactions; writes
 * take their turn at the write gate.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <nettle/base64.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "db.h"
#include "http.h"
#include "tokens.h"
#include "write_gate.h"

#define TOKEN_PREFIX "qdt_"
#define DAY_MS       ((int64_t)86400 * 1000)

static const char *const role_names[QD_ROLE_COUNT] = {
    [QD_ROLE_TRAINER] = "trainer", [QD_ROLE_READER] = "reader", [QD_ROLE_OPERATOR] = "operator"};

const char *qd_role_name(qd_role r)
{
    return (unsigned)r < QD_ROLE_COUNT ? role_names[r] : "unknown";
}

bool qd_role_parse(const char *name, qd_role *out)
{
    for (int i = 0; name && i < QD_ROLE_COUNT; i++)
        if (strcmp(name, role_names[i]) == 0) {
            *out = (qd_role)i;
            return true;
        }
    return false;
}

typedef enum tok_stmt { T_CHECK, T_ANY, T_LIST, T_INSERT, T_DELETE, T_COUNT } tok_stmt;

static const qd_db_stmt_def tok_sql[] = {
    {T_CHECK, "SELECT name, role, created_ms, expires_ms, hash FROM tokens WHERE hash = ?1"},
    {T_ANY, "SELECT EXISTS (SELECT 1 FROM tokens)"},
    {T_LIST, "SELECT name, role, created_ms, expires_ms FROM tokens ORDER BY name"},
    {T_INSERT, "INSERT INTO tokens (name, role, hash, created_ms, expires_ms) "
               "VALUES (?1, ?2, ?3, ?4, ?5)"},
    {T_DELETE, "DELETE FROM tokens WHERE name = ?1"},
};

struct qd_tokens {
    qd_db *db;
    sqlite3_stmt *q[T_COUNT];
    pthread_mutex_t mu;
};

qd_status qd_tokens_open(const char *db_path, qd_tokens **out, qd_err *err)
{
    return qd_tokens_open_tuned(db_path, NULL, out, err);
}

qd_status qd_tokens_open_tuned(const char *db_path, const qd_db_tuning *tuning, qd_tokens **out,
                               qd_err *err)
{
    *out = NULL;
    qd_tokens *t = calloc(1, sizeof *t);
    if (!t) return qd_fail(err, QD_NOMEM, "out of memory");
    qd_status st = qd_db_open_tuned(db_path, QD_DB_TOKENS, tuning, &t->db, err);
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

void qd_tokens_close(qd_tokens *t)
{
    if (!t) return;
    qd_db_finalize(t->q, T_COUNT);
    qd_db_close(t->db);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* Statement k, reset and cleared (the caller holds the mutex). */
static sqlite3_stmt *stmt(qd_tokens *t, tok_stmt k)
{
    sqlite3_reset(t->q[k]);
    sqlite3_clear_bindings(t->q[k]);
    return t->q[k];
}

static qd_status dberr(qd_tokens *t, qd_err *err, const char *op)
{
    return qd_db_fail(t->db, err, op);
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

/* ---- issuing and revoking ---------------------------------------------------------------------
 */

static void sha256(const char *text, uint8_t digest[SHA256_DIGEST_SIZE])
{
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(text), (const uint8_t *)text);
    sha256_digest(&ctx, SHA256_DIGEST_SIZE, digest);
}

/* 256 random bits as "qdt_" + 43 base64url characters (no padding). */
static bool new_token(char token[QD_TOKEN_LEN + 1])
{
    uint8_t rnd[32];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return false;
    char b64[BASE64_ENCODE_LENGTH(32) + BASE64_ENCODE_FINAL_LENGTH + 1];
    struct base64_encode_ctx ctx;
    base64url_encode_init(&ctx);
    size_t n = base64_encode_update(&ctx, b64, sizeof rnd, rnd);
    n += base64_encode_final(&ctx, b64 + n); /* 44 characters, the last one padding */
    b64[n] = '\0';
    snprintf(token, QD_TOKEN_LEN + 1, TOKEN_PREFIX "%.43s", b64);
    explicit_bzero(rnd, sizeof rnd);
    return true;
}

static qd_status insert(qd_tokens *t, const qd_token_info *info, const uint8_t *hash, qd_err *err)
{
    sqlite3_stmt *q = stmt(t, T_INSERT);
    int rc = sqlite3_bind_text(q, 1, info->name, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_text(q, 2, qd_role_name(info->role), -1, SQLITE_STATIC);
    rc |= sqlite3_bind_blob(q, 3, hash, SHA256_DIGEST_SIZE, SQLITE_STATIC);
    rc |= sqlite3_bind_int64(q, 4, info->created_ms);
    rc |= info->expires_ms ? sqlite3_bind_int64(q, 5, info->expires_ms) : sqlite3_bind_null(q, 5);
    if (rc != SQLITE_OK) return dberr(t, err, "create token");
    rc = sqlite3_step(q);
    sqlite3_reset(q);
    if (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE)
        return qd_fail(err, QD_CONFLICT, "a token named '%s' exists (revoke it first)", info->name);
    return rc == SQLITE_DONE ? QD_OK : dberr(t, err, "create token");
}

qd_status qd_tokens_create(qd_tokens *t, const char *name, qd_role role, int64_t days,
                           char token[QD_TOKEN_LEN + 1], qd_token_info *info, qd_err *err)
{
    if (!name || !qd_valid_name(name))
        return qd_fail(err, QD_INVALID,
                       "token names are 1-64 characters of A-Z a-z 0-9 . _ - (not starting with "
                       "'.')");
    if ((unsigned)role >= QD_ROLE_COUNT)
        return qd_fail(err, QD_INVALID, "role must be trainer, reader or operator");
    if (days < 0 || days > QD_TOKEN_MAX_DAYS)
        return qd_fail(err, QD_INVALID, "expiry must be 1..%d days, or 0 for never",
                       QD_TOKEN_MAX_DAYS);
    if (!new_token(token)) return qd_fail(err, QD_IO, "getrandom failed");
    uint8_t hash[SHA256_DIGEST_SIZE];
    sha256(token, hash);
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", name);
    info->role = role;
    info->created_ms = qd_now_ms();
    info->expires_ms = days ? info->created_ms + days * DAY_MS : 0;
    qd_write_gate_enter();
    pthread_mutex_lock(&t->mu);
    qd_status st = insert(t, info, hash, err); /* one statement: its own transaction */
    pthread_mutex_unlock(&t->mu);
    qd_write_gate_leave();
    if (st != QD_OK) explicit_bzero(token, QD_TOKEN_LEN + 1);
    return st;
}

qd_status qd_tokens_revoke(qd_tokens *t, const char *name, qd_err *err)
{
    qd_write_gate_enter();
    pthread_mutex_lock(&t->mu);
    sqlite3_stmt *q = stmt(t, T_DELETE);
    qd_status st = QD_OK;
    if (sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_step(q) != SQLITE_DONE)
        st = dberr(t, err, "revoke token");
    else if (sqlite3_changes(qd_db_sqlite(t->db)) == 0)
        st = qd_fail(err, QD_NOT_FOUND, "no token named '%s'", name);
    sqlite3_reset(q);
    pthread_mutex_unlock(&t->mu);
    qd_write_gate_leave();
    return st;
}

/* ---- reading ----------------------------------------------------------------------------------
 */

qd_status qd_tokens_list(qd_tokens *t, qd_token_info **out, size_t *n, qd_err *err)
{
    *out = NULL;
    *n = 0;
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
    if (st == QD_OK && rc != SQLITE_DONE) st = dberr(t, err, "list tokens");
    sqlite3_reset(q);
    pthread_mutex_unlock(&t->mu);
    if (st != QD_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return st;
}

qd_status qd_tokens_any(qd_tokens *t, bool *any, qd_err *err)
{
    pthread_mutex_lock(&t->mu);
    sqlite3_stmt *q = stmt(t, T_ANY);
    qd_status st = QD_OK;
    if (sqlite3_step(q) == SQLITE_ROW)
        *any = sqlite3_column_int(q, 0) != 0;
    else
        st = dberr(t, err, "count tokens");
    sqlite3_reset(q);
    pthread_mutex_unlock(&t->mu);
    return st;
}

/* "qdt_" and 43 base64url characters: anything else is not one of ours (no lookup). */
static bool well_formed(const char *token)
{
    if (strlen(token) != QD_TOKEN_LEN || strncmp(token, TOKEN_PREFIX, 4) != 0) return false;
    return strspn(token + 4, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
           QD_TOKEN_LEN - 4;
}

qd_status qd_tokens_check(qd_tokens *t, const char *token, qd_token_check *result,
                          qd_token_info *who, qd_err *err)
{
    *result = QD_TOKEN_UNKNOWN;
    if (!well_formed(token)) return QD_OK;
    uint8_t hash[SHA256_DIGEST_SIZE];
    sha256(token, hash);
    pthread_mutex_lock(&t->mu);
    sqlite3_stmt *q = stmt(t, T_CHECK);
    qd_status st = QD_OK;
    int rc = sqlite3_bind_blob(q, 1, hash, sizeof hash, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(q);
    if (rc == SQLITE_ROW && sqlite3_column_bytes(q, 4) == SHA256_DIGEST_SIZE &&
        memeql_sec(sqlite3_column_blob(q, 4), hash, SHA256_DIGEST_SIZE)) {
        read_info(q, who);
        bool expired = who->expires_ms != 0 && qd_now_ms() >= who->expires_ms;
        *result = expired ? QD_TOKEN_EXPIRED : QD_TOKEN_VALID;
    } else if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        st = dberr(t, err, "check token");
    }
    sqlite3_reset(q);
    pthread_mutex_unlock(&t->mu);
    return st;
}
