/* store_sqlite_rulesets.c -- the SQLite engine's named rule sets: put (create or replace), get,
 * list (names with their times, for GET /v1/rulesets) and delete. The body is stored as given: the
 * handler has validated it. Jobs copy the rules they run with, so nothing here touches a job.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "store_engine.h"
#include "store_sqlite.h"

static const qd_db_stmt_def ruleset_queries[] = {
    {QD_Q_RS_INSERT, "INSERT INTO rulesets (name, body, created_ms, updated_ms) "
                     "VALUES (?1, ?2, ?3, ?3)"},
    {QD_Q_RS_UPDATE, "UPDATE rulesets SET body = ?2, updated_ms = ?3 WHERE name = ?1"},
    {QD_Q_RS_GET, "SELECT body, created_ms, updated_ms FROM rulesets WHERE name = ?1"},
    {QD_Q_RS_LIST, "SELECT name, created_ms, updated_ms FROM rulesets ORDER BY name"},
    {QD_Q_RS_DELETE, "DELETE FROM rulesets WHERE name = ?1"},
};

qd_status qd_sq_prepare_rulesets(qd_sq *s, qd_err *err)
{
    return qd_sq_prepare(s, ruleset_queries, sizeof ruleset_queries / sizeof ruleset_queries[0],
                         err);
}

/* ---- put --------------------------------------------------------------------------------------
 */

typedef struct put_ctx {
    const char *name, *body;
    bool created;
} put_ctx;

static qd_status put_fn(qd_sq *s, void *p, qd_err *err)
{
    put_ctx *c = p;
    int64_t now = qd_now_ms();
    qd_status st =
        qd_sq_run(s, QD_Q_RS_UPDATE, "replace rule set", err, NULL, "tti", c->name, c->body, now);
    c->created = st == QD_OK && qd_sq_changes(s) == 0;
    if (c->created)
        st = qd_sq_run(s, QD_Q_RS_INSERT, "create rule set", err, NULL, "tti", c->name, c->body,
                       now);
    return st;
}

qd_status qd_sqlite_ruleset_put(void *cls, const char *name, const char *body, bool *created,
                                qd_err *err)
{
    qd_sq *s = cls;
    put_ctx c = {name, body, false};
    qd_status st = qd_sq_txn(s, true, put_fn, &c, err);
    if (st == QD_OK && created) *created = c.created;
    return st;
}

/* ---- get --------------------------------------------------------------------------------------
 */

typedef struct get_ctx {
    const char *name;
    char **body;
    int64_t *created_ms, *updated_ms;
} get_ctx;

static qd_status get_fn(qd_sq *s, void *p, qd_err *err)
{
    get_ctx *c = p;
    bool row = false;
    qd_status st = qd_sq_run(s, QD_Q_RS_GET, "get rule set", err, &row, "t", c->name);
    if (st != QD_OK) return st;
    if (!row) return qd_fail(err, QD_NOT_FOUND, "rule set \"%s\" not found", c->name);
    sqlite3_stmt *q = s->q[QD_Q_RS_GET];
    if (c->created_ms) *c->created_ms = sqlite3_column_int64(q, 1);
    if (c->updated_ms) *c->updated_ms = sqlite3_column_int64(q, 2);
    return c->body ? qd_sq_col_text(s, QD_Q_RS_GET, 0, c->body, err) : QD_OK;
}

qd_status qd_sqlite_ruleset_get(void *cls, const char *name, char **body, int64_t *created_ms,
                                int64_t *updated_ms, qd_err *err)
{
    qd_sq *s = cls;
    get_ctx c = {name, body, created_ms, updated_ms};
    qd_status st = qd_sq_txn(s, false, get_fn, &c, err);
    if (st != QD_OK && body) {
        free(*body); /* read, then the commit failed */
        *body = NULL;
    }
    return st;
}

/* ---- list -------------------------------------------------------------------------------------
 */

/* Appends the current row of the list statement to arr. */
static qd_status append_row(sqlite3_stmt *q, json_t *arr, qd_err *err)
{
    const char *name = (const char *)sqlite3_column_text(q, 0);
    if (!name) return qd_fail(err, QD_NOMEM, "list rule sets: out of memory");
    return qd_store_ruleset_append(arr, name, sqlite3_column_int64(q, 1),
                                   sqlite3_column_int64(q, 2), err);
}

static qd_status list_fn(qd_sq *s, void *p, qd_err *err)
{
    json_t *arr = p;
    bool row = false;
    qd_status st = qd_sq_run(s, QD_Q_RS_LIST, "list rule sets", err, &row, "");
    while (st == QD_OK && row) {
        st = append_row(s->q[QD_Q_RS_LIST], arr, err);
        if (st == QD_OK) st = qd_sq_next(s, QD_Q_RS_LIST, "list rule sets", err, &row);
    }
    return st;
}

qd_status qd_sqlite_ruleset_list(void *cls, json_t *arr, qd_err *err)
{
    return qd_sq_txn(cls, false, list_fn, arr, err);
}

/* ---- delete -----------------------------------------------------------------------------------
 */

static qd_status delete_fn(qd_sq *s, void *p, qd_err *err)
{
    const char *name = p;
    qd_status st = qd_sq_run(s, QD_Q_RS_DELETE, "delete rule set", err, NULL, "t", name);
    if (st == QD_OK && qd_sq_changes(s) == 0)
        st = qd_fail(err, QD_NOT_FOUND, "rule set \"%s\" not found", name);
    return st;
}

qd_status qd_sqlite_ruleset_delete(void *cls, const char *name, qd_err *err)
{
    qd_sq *s = cls;
    return qd_sq_txn(s, true, delete_fn, (void *)name, err);
}
