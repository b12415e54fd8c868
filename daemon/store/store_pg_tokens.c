/* store_pg_tokens.c -- the PostgreSQL engine's tokens: the rows behind tokens.h (store_tokens.c
 * makes, hashes and compares the tokens; here they are only stored and found by their SHA-256,
 * a bytea sent in binary). The tokens have a connection of their own (store_pg.c's, without
 * migrating), so that checks never wait for the job store's transactions.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_pg.h"

const qd_pg_stmt_def qd_pg_token_sql[] = {
    {QD_PGQ_TOK_CHECK, "SELECT name, role, created_ms, expires_ms, hash FROM tokens "
                       "WHERE hash = $1"},
    {QD_PGQ_TOK_ANY, "SELECT EXISTS (SELECT 1 FROM tokens)"},
    {QD_PGQ_TOK_LIST, "SELECT name, role, created_ms, expires_ms FROM tokens "
                      "ORDER BY name COLLATE \"C\""},
    {QD_PGQ_TOK_INSERT, "INSERT INTO tokens (name, role, hash, created_ms, expires_ms) "
                        "VALUES ($1, $2, $3, $4, $5)"},
    {QD_PGQ_TOK_DELETE, "DELETE FROM tokens WHERE name = $1"},
};
const size_t qd_pg_token_sql_n = sizeof qd_pg_token_sql / sizeof qd_pg_token_sql[0];

/* Row i of a CHECK or LIST result into *info. */
static void read_info(const PGresult *r, int i, qd_token_info *info)
{
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", PQgetvalue(r, i, 0));
    if (!qd_role_parse(PQgetvalue(r, i, 1), &info->role))
        info->role = QD_ROLE_READER; /* the CHECK constraint makes this unreachable */
    info->created_ms = qd_pg_int(r, i, 2);
    info->expires_ms = qd_pg_int(r, i, 3);
}

typedef struct insert_ctx {
    const qd_token_info *info;
    const uint8_t *hash;
} insert_ctx;

static qd_status insert_fn(qd_pg *p, void *arg, qd_err *err)
{
    insert_ctx *c = arg;
    const qd_token_info *info = c->info;
    qd_status st =
        info->expires_ms
            ? qd_pg_run(p, QD_PGQ_TOK_INSERT, "create token", err, NULL, "ttbii", info->name,
                        qd_role_name(info->role), c->hash, info->created_ms, info->expires_ms)
            : qd_pg_run(p, QD_PGQ_TOK_INSERT, "create token", err, NULL, "ttbit", info->name,
                        qd_role_name(info->role), c->hash, info->created_ms, (const char *)NULL);
    if (st != QD_OK && strcmp(p->sqlstate, "23505") == 0) /* unique_violation */
        return qd_fail(err, QD_CONFLICT, "a token named '%s' exists (revoke it first)", info->name);
    return st;
}

qd_status qd_pg_token_insert(void *cls, const qd_token_info *info,
                             const uint8_t hash[QD_TOKEN_HASH_LEN], qd_err *err)
{
    insert_ctx c = {info, hash};
    return qd_pg_call(cls, false, insert_fn, &c, err);
}

static qd_status delete_fn(qd_pg *p, void *arg, qd_err *err)
{
    const char *name = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_TOK_DELETE, "revoke token", err, &r, "t", name);
    if (st == QD_OK && qd_pg_changes(r) == 0)
        st = qd_fail(err, QD_NOT_FOUND, "no token named '%s'", name);
    PQclear(r);
    return st;
}

qd_status qd_pg_token_delete(void *cls, const char *name, qd_err *err)
{
    return qd_pg_call(cls, false, delete_fn, (void *)name, err);
}

typedef struct list_ctx {
    qd_token_info **out;
    size_t *n;
} list_ctx;

static qd_status list_fn(qd_pg *p, void *arg, qd_err *err)
{
    list_ctx *c = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_TOK_LIST, "list tokens", err, &r, "");
    int rows = st == QD_OK ? PQntuples(r) : 0;
    if (rows > 0) {
        *c->out = calloc((size_t)rows, sizeof **c->out);
        if (!*c->out) st = qd_fail(err, QD_NOMEM, "out of memory");
    }
    for (int i = 0; st == QD_OK && i < rows; i++) read_info(r, i, &(*c->out)[(*c->n)++]);
    PQclear(r);
    return st;
}

qd_status qd_pg_token_list(void *cls, qd_token_info **out, size_t *n, qd_err *err)
{
    list_ctx c = {out, n};
    return qd_pg_call(cls, false, list_fn, &c, err);
}

static qd_status any_fn(qd_pg *p, void *arg, qd_err *err)
{
    bool *any = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_TOK_ANY, "count tokens", err, &r, "");
    if (st == QD_OK) *any = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    return st;
}

qd_status qd_pg_token_any(void *cls, bool *any, qd_err *err)
{
    return qd_pg_call(cls, false, any_fn, any, err);
}

typedef struct lookup_ctx {
    const uint8_t *hash;
    bool *found;
    qd_token_info *who;
    uint8_t *stored;
} lookup_ctx;

static qd_status lookup_fn(qd_pg *p, void *arg, qd_err *err)
{
    lookup_ctx *c = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_TOK_CHECK, "check token", err, &r, "b", c->hash);
    if (st == QD_OK && PQntuples(r) == 1) {
        size_t len = 0;
        unsigned char *h = PQunescapeBytea((const unsigned char *)PQgetvalue(r, 0, 4), &len);
        if (!h) st = qd_fail(err, QD_NOMEM, "check token: out of memory");
        if (h && len == QD_TOKEN_HASH_LEN) {
            read_info(r, 0, c->who);
            memcpy(c->stored, h, QD_TOKEN_HASH_LEN);
            *c->found = true;
        }
        PQfreemem(h);
    }
    PQclear(r);
    return st;
}

qd_status qd_pg_token_lookup(void *cls, const uint8_t hash[QD_TOKEN_HASH_LEN], bool *found,
                             qd_token_info *who, uint8_t stored[QD_TOKEN_HASH_LEN], qd_err *err)
{
    lookup_ctx c = {hash, found, who, stored};
    return qd_pg_call(cls, false, lookup_fn, &c, err);
}
