/* stats_pg.c -- the statistics' PostgreSQL engine (stats_engine.h), the writer's side and the
 * frame both sides use: a libpq connection of the store's PostgreSQL layer (store_pg.h: the
 * masked server name, the schema version check) with the statistics' own named statements
 * prepared on it (again after a reset), parameters bound as text or binary and results read in
 * binary (the float64 arrays are bytea of the bytes SQLite stores; bigint and double precision
 * exact). A group is one READ COMMITTED transaction in which every model is locked
 * (SELECT ... FOR UPDATE) before anything of it is read or written, and every activation row
 * likewise: the groups of every instance touching one model run one after another, in the order
 * the database commits them. The reader's side is stats_pg_read.c, the table at the end.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats_pg.h"

static const qd_pgs_stmt_def writer_sql[] = {
    {QD_PGS_MODEL_GET, "SELECT id, averaging, ema_constant, bootstrap_steps, posts, "
                       "stats_updated_ms, created_ms, updated_ms FROM stat_models WHERE name = $1 "
                       "FOR UPDATE"},
    {QD_PGS_MODEL_INSERT, "INSERT INTO stat_models (name, averaging, ema_constant, "
                          "bootstrap_steps, posts, stats_updated_ms, created_ms, updated_ms) "
                          "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id"},
    {QD_PGS_MODEL_UPDATE, "UPDATE stat_models SET averaging = $2, ema_constant = $3, "
                          "bootstrap_steps = $4, posts = $5, stats_updated_ms = $6, "
                          "updated_ms = $7 WHERE id = $1"},
    /* the arrays part by part (a, b, sq), each sum, last, ema: the order of qd_stat_row_rec */
    {QD_PGS_ROW_GET, "SELECT id, kind, shape, sq_len, count, created_ms, updated_ms, sum_a, "
                     "last_a, ema_a, sum_b, last_b, ema_b, sum_sq, last_sq, ema_sq FROM stats "
                     "WHERE model_id = $1 AND name = $2 FOR UPDATE"},
    {QD_PGS_ROW_INSERT, "INSERT INTO stats (model_id, name, kind, shape, sq_len, count, "
                        "created_ms, updated_ms, sum_a, last_a, ema_a, sum_b, last_b, ema_b, "
                        "sum_sq, last_sq, ema_sq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
                        "$10, $11, $12, $13, $14, $15, $16, $17) RETURNING id"},
    {QD_PGS_ROW_UPDATE, "UPDATE stats SET count = $2, updated_ms = $3, sum_a = $4, last_a = $5, "
                        "ema_a = $6, sum_b = $7, last_b = $8, ema_b = $9, sum_sq = $10, "
                        "last_sq = $11, ema_sq = $12 WHERE id = $1"},
    {QD_PGS_ROWS_DELETE, "DELETE FROM stats WHERE model_id = $1"},
    {QD_PGS_MODEL_BYTES, "SELECT coalesce(sum(coalesce(octet_length(sum_a), 0) + "
                         "coalesce(octet_length(sum_b), 0) + coalesce(octet_length(sum_sq), 0)), "
                         "0)::bigint FROM stats WHERE model_id = $1"},
    {QD_PGS_KEY_GET, "SELECT fingerprint, activations, step, created_ms FROM stat_post_keys "
                     "WHERE model_id = $1 AND key = $2 AND created_ms >= $3"},
    {QD_PGS_KEY_PUT, "INSERT INTO stat_post_keys (model_id, key, fingerprint, activations, "
                     "step, created_ms) VALUES ($1, $2, $3, $4, $5, $6) "
                     "ON CONFLICT (model_id, key) DO UPDATE SET fingerprint = "
                     "EXCLUDED.fingerprint, activations = EXCLUDED.activations, step = "
                     "EXCLUDED.step, created_ms = EXCLUDED.created_ms"},
    {QD_PGS_KEY_PURGE, "DELETE FROM stat_post_keys WHERE created_ms < $1"},
};

/* ---- parameters -------------------------------------------------------------------------------
 */

void qd_pgs_text(qd_pgs_params *ps, const char *v)
{
    ps->v[ps->n] = v;
    ps->len[ps->n] = 0;
    ps->fmt[ps->n++] = 0;
}

void qd_pgs_int(qd_pgs_params *ps, int64_t v)
{
    snprintf(ps->num[ps->n], sizeof ps->num[ps->n], "%lld", (long long)v);
    qd_pgs_text(ps, ps->num[ps->n]);
}

void qd_pgs_int_or_null(qd_pgs_params *ps, int64_t v)
{
    if (v > 0)
        qd_pgs_int(ps, v);
    else
        qd_pgs_text(ps, NULL);
}

void qd_pgs_double(qd_pgs_params *ps, double v)
{
    snprintf(ps->num[ps->n], sizeof ps->num[ps->n], "%.17g", v);
    qd_pgs_text(ps, ps->num[ps->n]);
}

void qd_pgs_bytes(qd_pgs_params *ps, const void *v, int64_t len)
{
    ps->v[ps->n] = v;
    ps->len[ps->n] = v ? (int)len : 0;
    ps->fmt[ps->n++] = v ? 1 : 0;
}

/* ---- binary results ---------------------------------------------------------------------------
 */

static uint64_t be64(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 8) return 0;
    const unsigned char *b = (const unsigned char *)PQgetvalue(r, row, col);
    uint64_t u = 0;
    for (int i = 0; i < 8; i++) u = u << 8 | b[i];
    return u;
}

int64_t qd_pgs_col_int(const PGresult *r, int row, int col)
{
    return (int64_t)be64(r, row, col);
}

double qd_pgs_col_double(const PGresult *r, int row, int col)
{
    uint64_t u = be64(r, row, col);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

const char *qd_pgs_col_text(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

void qd_pgs_model_cols(const PGresult *r, int row, int at, qd_stat_model_rec *m)
{
    const char *avg = qd_pgs_col_text(r, row, at);
    snprintf(m->averaging, sizeof m->averaging, "%s", avg ? avg : "");
    m->ema_constant = qd_pgs_col_double(r, row, at + 1);
    m->bootstrap_steps = qd_pgs_col_int(r, row, at + 2);
}

void qd_pgs_row_cols(const PGresult *r, int row, int at, qd_stat_row_rec *rec)
{
    rec->kind = qd_pgs_col_text(r, row, at);
    rec->shape = qd_pgs_col_text(r, row, at + 1);
    rec->sq_len = qd_pgs_col_int(r, row, at + 2);
    rec->count = qd_pgs_col_int(r, row, at + 3);
    rec->created_ms = qd_pgs_col_int(r, row, at + 4);
    rec->updated_ms = qd_pgs_col_int(r, row, at + 5);
    for (int k = 0; k < QD_STAT_ARRAYS; k++) {
        int col = at + 6 + k;
        bool null = PQgetisnull(r, row, col);
        rec->arr[k] = null ? NULL : PQgetvalue(r, row, col);
        rec->arr_bytes[k] = null ? 0 : PQgetlength(r, row, col);
    }
}

void qd_pgs_key_cols(const PGresult *r, int row, qd_stat_key_rec *k)
{
    int len = PQgetisnull(r, row, 0) ? 0 : PQgetlength(r, row, 0);
    k->fingerprint_len = len;
    memset(k->fingerprint, 0, sizeof k->fingerprint);
    if (len == QD_FINGERPRINT_LEN) memcpy(k->fingerprint, PQgetvalue(r, row, 0), (size_t)len);
    k->activations = qd_pgs_col_int(r, row, 1);
    k->step = PQgetisnull(r, row, 2) ? -1 : qd_pgs_col_int(r, row, 2);
    k->created_ms = qd_pgs_col_int(r, row, 3);
}

/* ---- statements and transactions --------------------------------------------------------------
 */

/* libpq's message for r (or the connection's when r is NULL), one line. */
static void libpq_line(qd_pg *p, const PGresult *r, char *out, size_t cap)
{
    const char *m = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    snprintf(out, cap, "%s", m ? m : PQerrorMessage(p->conn));
    for (char *c = out; *c; c++)
        if (*c == '\n') *c = c[1] ? ' ' : '\0';
}

static qd_status fail(qd_pg *p, const PGresult *r, const char *op, qd_err *err)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    snprintf(p->sqlstate, sizeof p->sqlstate, "%s", state ? state : "");
    char msg[400];
    libpq_line(p, r, msg, sizeof msg);
    if (PQstatus(p->conn) != CONNECTION_OK)
        return qd_fail(err, QD_DB, "%s: the connection to PostgreSQL (%s) was lost: %s", op,
                       p->where, *msg ? msg : "no message");
    return qd_fail(err, QD_DB, "%s: PostgreSQL: %s", op, *msg ? msg : "no message");
}

static qd_status prepare_list(qd_pg *p, const qd_pgs_stmt_def *defs, size_t n, qd_err *err)
{
    for (size_t i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", (int)defs[i].id);
        PGresult *r = PQprepare(p->conn, name, defs[i].sql, 0, NULL);
        qd_status st = QD_OK;
        if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) {
            qd_err why = {{0}};
            fail(p, r, "preparing", &why);
            st = qd_fail(err, QD_DB, "%s \"%.60s\"", why.message, defs[i].sql);
        }
        PQclear(r);
        if (st != QD_OK) return st;
    }
    return QD_OK;
}

static qd_status prepare_all(qd_pg *p, qd_err *err)
{
    qd_status st = prepare_list(p, writer_sql, sizeof writer_sql / sizeof writer_sql[0], err);
    return st == QD_OK ? prepare_list(p, qd_pgs_read_sql, qd_pgs_read_sql_n, err) : st;
}

qd_status qd_pgs_connect(const char *target, qd_pg **out, qd_err *err)
{
    qd_status st = qd_pg_connect(target, false, out, err);
    if (st == QD_OK && (st = prepare_all(*out, err)) != QD_OK) {
        qd_pg_disconnect(*out);
        *out = NULL;
    }
    return st;
}

qd_status qd_pgs_ensure(qd_pg *p, qd_err *err)
{
    if (PQstatus(p->conn) == CONNECTION_OK) return QD_OK;
    PQreset(p->conn);
    if (PQstatus(p->conn) != CONNECTION_OK) {
        char msg[400];
        libpq_line(p, NULL, msg, sizeof msg);
        return qd_fail(err, QD_DB, "PostgreSQL (%s) is unreachable: %s", p->where,
                       *msg ? msg : "no message");
    }
    return prepare_all(p, err);
}

qd_status qd_pgs_exec(qd_pg *p, const char *sql, const char *op, qd_err *err)
{
    PGresult *r = PQexec(p->conn, sql);
    qd_status st = r && PQresultStatus(r) == PGRES_COMMAND_OK ? QD_OK : fail(p, r, op, err);
    PQclear(r);
    return st;
}

void qd_pgs_rollback(qd_pg *p)
{
    if (PQtransactionStatus(p->conn) != PQTRANS_IDLE) PQclear(PQexec(p->conn, "ROLLBACK"));
}

qd_status qd_pgs_run(qd_pg *p, qd_pgs_query q, const qd_pgs_params *ps, const char *op,
                     PGresult **res, qd_err *err)
{
    if (res) *res = NULL;
    char name[16];
    snprintf(name, sizeof name, "s%d", (int)q);
    PGresult *r = PQexecPrepared(p->conn, name, ps ? ps->n : 0, ps ? ps->v : NULL,
                                 ps ? ps->len : NULL, ps ? ps->fmt : NULL, 1);
    ExecStatusType rs = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (rs != PGRES_TUPLES_OK && rs != PGRES_COMMAND_OK) {
        qd_status st = fail(p, r, op, err);
        PQclear(r);
        return st;
    }
    if (res)
        *res = r;
    else
        PQclear(r);
    return QD_OK;
}

/* ---- the writer's connection and the group's transaction ---------------------------------------
 */

static qd_status writer_open(const char *target, const qd_db_tuning *tuning, void **cls,
                             qd_err *err)
{
    (void)tuning; /* SQLite's busy timeout and page cache: PostgreSQL has its own settings */
    return qd_pgs_connect(target, (qd_pg **)cls, err);
}

static void pg_close(void *cls)
{
    qd_pg_disconnect(cls);
}

static qd_status group_begin(void *cls, qd_err *err)
{
    ((qd_pg *)cls)->sqlstate[0] = '\0'; /* the failure retryable reads is this group's */
    qd_status st = qd_pgs_ensure(cls, err);
    return st == QD_OK ? qd_pgs_exec(cls, "BEGIN", "BEGIN", err) : st;
}

static qd_status group_end(void *cls, bool commit, qd_err *err)
{
    qd_status st = commit ? qd_pgs_exec(cls, "COMMIT", "COMMIT", err) : QD_OK;
    qd_pgs_rollback(cls); /* after a failure or a failed COMMIT: nothing more to report */
    return st;
}

/* ---- models -----------------------------------------------------------------------------------
 */

static qd_status model_lock(void *cls, qd_stat_model_rec *m, bool *found, qd_err *err)
{
    *found = false;
    qd_pgs_params ps = {0};
    qd_pgs_text(&ps, m->name);
    PGresult *r = NULL;
    qd_status st = qd_pgs_run(cls, QD_PGS_MODEL_GET, &ps, "read model", &r, err);
    if (st == QD_OK && PQntuples(r) == 1) {
        *found = true;
        m->id = qd_pgs_col_int(r, 0, 0);
        qd_pgs_model_cols(r, 0, 1, m);
        m->posts = qd_pgs_col_int(r, 0, 4);
        m->last_ms = qd_pgs_col_int(r, 0, 5);
        m->created_ms = qd_pgs_col_int(r, 0, 6);
        m->updated_ms = qd_pgs_col_int(r, 0, 7);
    }
    PQclear(r);
    return st;
}

static qd_status model_bytes(void *cls, int64_t model_id, int64_t *bytes, qd_err *err)
{
    qd_pgs_params ps = {0};
    qd_pgs_int(&ps, model_id);
    PGresult *r = NULL;
    qd_status st = qd_pgs_run(cls, QD_PGS_MODEL_BYTES, &ps, "read model size", &r, err);
    *bytes = st == QD_OK && PQntuples(r) == 1 ? qd_pgs_col_int(r, 0, 0) : 0;
    PQclear(r);
    return st;
}

/* averaging, ema_constant, bootstrap_steps, posts, stats_updated_ms (NULL for 0). */
static void model_params(qd_pgs_params *ps, const qd_stat_model_rec *m)
{
    qd_pgs_text(ps, m->averaging);
    qd_pgs_double(ps, m->ema_constant);
    qd_pgs_int(ps, m->bootstrap_steps);
    qd_pgs_int(ps, m->posts);
    qd_pgs_int_or_null(ps, m->last_ms);
}

static qd_status model_insert(void *cls, qd_stat_model_rec *m, qd_err *err)
{
    qd_pgs_params ps = {0};
    qd_pgs_text(&ps, m->name);
    model_params(&ps, m);
    qd_pgs_int(&ps, m->created_ms);
    qd_pgs_int(&ps, m->updated_ms);
    PGresult *r = NULL;
    qd_status st = qd_pgs_run(cls, QD_PGS_MODEL_INSERT, &ps, "write model", &r, err);
    if (st == QD_OK && PQntuples(r) != 1) st = qd_fail(err, QD_DB, "write model: no id");
    if (st == QD_OK) m->id = qd_pgs_col_int(r, 0, 0);
    PQclear(r);
    return st;
}

static qd_status model_update(void *cls, const qd_stat_model_rec *m, qd_err *err)
{
    qd_pgs_params ps = {0};
    qd_pgs_int(&ps, m->id);
    model_params(&ps, m);
    qd_pgs_int(&ps, m->updated_ms);
    return qd_pgs_run(cls, QD_PGS_MODEL_UPDATE, &ps, "write model", NULL, err);
}

/* ---- activations ------------------------------------------------------------------------------
 */

static qd_status row_lock(void *cls, int64_t model_id, const char *name, qd_stat_row_fn fn,
                          void *ctx, bool *found, qd_err *err)
{
    *found = false;
    qd_pgs_params ps = {0};
    qd_pgs_int(&ps, model_id);
    qd_pgs_text(&ps, name);
    PGresult *r = NULL;
    qd_status st = qd_pgs_run(cls, QD_PGS_ROW_GET, &ps, "read statistics", &r, err);
    if (st == QD_OK && PQntuples(r) == 1) {
        qd_stat_row_rec rec = {.id = qd_pgs_col_int(r, 0, 0), .model_id = model_id, .name = name};
        qd_pgs_row_cols(r, 0, 1, &rec);
        *found = true;
        st = fn(ctx, &rec, err);
    }
    PQclear(r);
    return st;
}

static void array_params(qd_pgs_params *ps, const qd_stat_row_rec *r)
{
    for (int k = 0; k < QD_STAT_ARRAYS; k++) qd_pgs_bytes(ps, r->arr[k], r->arr_bytes[k]);
}

static qd_status row_insert(void *cls, const qd_stat_row_rec *r, int64_t *id, qd_err *err)
{
    qd_pgs_params ps = {0};
    qd_pgs_int(&ps, r->model_id);
    qd_pgs_text(&ps, r->name);
    qd_pgs_text(&ps, r->kind);
    qd_pgs_text(&ps, r->shape);
    qd_pgs_int_or_null(&ps, r->sq_len);
    qd_pgs_int(&ps, r->count);
    qd_pgs_int(&ps, r->created_ms);
    qd_pgs_int(&ps, r->updated_ms);
    array_params(&ps, r);
    PGresult *res = NULL;
    qd_status st = qd_pgs_run(cls, QD_PGS_ROW_INSERT, &ps, "write statistics", &res, err);
    if (st == QD_OK && PQntuples(res) != 1) st = qd_fail(err, QD_DB, "write statistics: no id");
    if (st == QD_OK) *id = qd_pgs_col_int(res, 0, 0);
    PQclear(res);
    return st;
}

static qd_status row_update(void *cls, const qd_stat_row_rec *r, qd_err *err)
{
    qd_pgs_params ps = {0};
    qd_pgs_int(&ps, r->id);
    qd_pgs_int(&ps, r->count);
    qd_pgs_int(&ps, r->updated_ms);
    array_params(&ps, r);
    return qd_pgs_run(cls, QD_PGS_ROW_UPDATE, &ps, "write statistics", NULL, err);
}

static qd_status rows_delete(void *cls, int64_t model_id, qd_err *err)
{
    qd_pgs_params ps = {0};
    qd_pgs_int(&ps, model_id);
    return qd_pgs_run(cls, QD_PGS_ROWS_DELETE, &ps, "reset", NULL, err);
}

/* ---- Idempotency-Keys -------------------------------------------------------------------------
 */

static qd_status key_get(void *cls, int64_t model_id, const char *key, int64_t since_ms,
                         qd_stat_key_rec *k, bool *found, qd_err *err)
{
    *found = false;
    qd_pgs_params ps = {0};
    qd_pgs_int(&ps, model_id);
    qd_pgs_text(&ps, key);
    qd_pgs_int(&ps, since_ms);
    PGresult *r = NULL;
    qd_status st = qd_pgs_run(cls, QD_PGS_KEY_GET, &ps, "read Idempotency-Key", &r, err);
    if (st == QD_OK && PQntuples(r) == 1) {
        *found = true;
        qd_pgs_key_cols(r, 0, k);
    }
    PQclear(r);
    return st;
}

static qd_status key_put(void *cls, int64_t model_id, const char *key, const qd_stat_key_rec *k,
                         qd_err *err)
{
    qd_pgs_params ps = {0};
    qd_pgs_int(&ps, model_id);
    qd_pgs_text(&ps, key);
    qd_pgs_bytes(&ps, k->fingerprint, k->fingerprint_len);
    qd_pgs_int(&ps, k->activations);
    if (k->step >= 0)
        qd_pgs_int(&ps, k->step);
    else
        qd_pgs_text(&ps, NULL);
    qd_pgs_int(&ps, k->created_ms);
    return qd_pgs_run(cls, QD_PGS_KEY_PUT, &ps, "record Idempotency-Key", NULL, err);
}

static qd_status keys_purge(void *cls, int64_t before_ms, qd_err *err)
{
    qd_pgs_params ps = {0};
    qd_pgs_int(&ps, before_ms);
    return qd_pgs_run(cls, QD_PGS_KEY_PURGE, &ps, "purge Idempotency-Keys", NULL, err);
}

/* The SQLSTATEs of a database that gave way to another writer: serialization_failure,
 * deadlock_detected, unique_violation (a model or an activation another instance inserted
 * first; the group's values were checked, so no other key can be violated). */
static bool retryable(void *cls)
{
    const qd_pg *p = cls;
    static const char *const states[] = {"40001", "40P01", "23505"};
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++)
        if (strcmp(p->sqlstate, states[i]) == 0) return true;
    return false;
}

/* ---- the table ----------------------------------------------------------------------------------
 */

const qd_stats_ops qd_stats_pg_ops = {
    .name = "postgresql",
    .shared = true,
    .writer_open = writer_open,
    .writer_close = pg_close,
    .group_begin = group_begin,
    .group_end = group_end,
    .model_lock = model_lock,
    .model_bytes = model_bytes,
    .model_insert = model_insert,
    .model_update = model_update,
    .row_lock = row_lock,
    .row_insert = row_insert,
    .row_update = row_update,
    .rows_delete = rows_delete,
    .key_get = key_get,
    .key_put = key_put,
    .keys_purge = keys_purge,
    .retryable = retryable,
    .reader_open = qd_pgs_reader_open,
    .reader_close = qd_pgs_reader_close,
    .read_begin = qd_pgs_read_begin,
    .read_end = qd_pgs_read_end,
    .read_models = qd_pgs_read_models,
    .read_conf = qd_pgs_read_conf,
    .read_rows = qd_pgs_read_rows,
    .read_key = qd_pgs_read_key,
};
