/* store_pg_rulesets.c -- the PostgreSQL engine's named rule sets: put (create or replace in one
 * statement: an upsert that tells which it did), get, list (names with their times, for
 * GET /v1/rulesets) and delete.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "store_pg.h"

const qd_pg_stmt_def qd_pg_ruleset_sql[] = {
    /* xmax = 0 on the returned row: it was inserted, not updated. */
    {QD_PGQ_RS_UPSERT, "INSERT INTO rulesets (name, body, created_ms, updated_ms) "
                       "VALUES ($1, $2, $3, $3) ON CONFLICT (name) DO UPDATE SET "
                       "body = EXCLUDED.body, updated_ms = EXCLUDED.updated_ms "
                       "RETURNING (xmax = 0)"},
    {QD_PGQ_RS_GET, "SELECT body, created_ms, updated_ms FROM rulesets WHERE name = $1"},
    {QD_PGQ_RS_LIST,
     "SELECT name, created_ms, updated_ms FROM rulesets ORDER BY name COLLATE \"C\""},
    {QD_PGQ_RS_DELETE, "DELETE FROM rulesets WHERE name = $1"},
};
const size_t qd_pg_ruleset_sql_n = sizeof qd_pg_ruleset_sql / sizeof qd_pg_ruleset_sql[0];

typedef struct put_ctx {
    const char *name, *body;
    bool created;
} put_ctx;

static qd_status put_fn(qd_pg *p, void *arg, qd_err *err)
{
    put_ctx *c = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_RS_UPSERT, "put rule set", err, &r, "tti", c->name, c->body,
                             qd_now_ms());
    if (st == QD_OK && PQntuples(r) != 1) st = qd_fail(err, QD_DB, "put rule set: no row");
    if (st == QD_OK) c->created = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    return st;
}

qd_status qd_pg_ruleset_put(void *cls, const char *name, const char *body, bool *created,
                            qd_err *err)
{
    put_ctx c = {name, body, false};
    qd_status st = qd_pg_call(cls, false, put_fn, &c, err);
    *created = c.created;
    return st;
}

typedef struct get_ctx {
    const char *name;
    char **body;
    int64_t *created_ms, *updated_ms;
} get_ctx;

static qd_status get_fn(qd_pg *p, void *arg, qd_err *err)
{
    get_ctx *c = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_RS_GET, "get rule set", err, &r, "t", c->name);
    if (st == QD_OK && PQntuples(r) == 0)
        st = qd_fail(err, QD_NOT_FOUND, "rule set \"%s\" not found", c->name);
    if (st == QD_OK) {
        if (c->created_ms) *c->created_ms = qd_pg_int(r, 0, 1);
        if (c->updated_ms) *c->updated_ms = qd_pg_int(r, 0, 2);
        if (c->body) st = qd_pg_text(r, 0, 0, c->body, err);
    }
    PQclear(r);
    return st;
}

qd_status qd_pg_ruleset_get(void *cls, const char *name, char **body, int64_t *created_ms,
                            int64_t *updated_ms, qd_err *err)
{
    get_ctx c = {name, body, created_ms, updated_ms};
    return qd_pg_call(cls, false, get_fn, &c, err);
}

static qd_status list_fn(qd_pg *p, void *arg, qd_err *err)
{
    json_t *arr = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_RS_LIST, "list rule sets", err, &r, "");
    for (int i = 0; st == QD_OK && i < PQntuples(r); i++)
        st = qd_store_ruleset_append(arr, PQgetvalue(r, i, 0), qd_pg_int(r, i, 1),
                                     qd_pg_int(r, i, 2), err);
    PQclear(r);
    return st;
}

qd_status qd_pg_ruleset_list(void *cls, json_t *arr, qd_err *err)
{
    return qd_pg_call(cls, false, list_fn, arr, err);
}

static qd_status delete_fn(qd_pg *p, void *arg, qd_err *err)
{
    const char *name = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_RS_DELETE, "delete rule set", err, &r, "t", name);
    if (st == QD_OK && qd_pg_changes(r) == 0)
        st = qd_fail(err, QD_NOT_FOUND, "rule set \"%s\" not found", name);
    PQclear(r);
    return st;
}

qd_status qd_pg_ruleset_delete(void *cls, const char *name, qd_err *err)
{
    return qd_pg_call(cls, false, delete_fn, (void *)name, err);
}
