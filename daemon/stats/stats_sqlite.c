/* stats_sqlite.c -- the statistics' SQLite engine, the writer's side (stats_engine.h): the
 * statistics writer's connection of the SQLite layer (db.h) with its statements, a group's
 * BEGIN IMMEDIATE ... COMMIT behind the write gate (fair turns with the job store's writes; one
 * writer holds the file, so a row read in the group is locked by the transaction itself), the
 * models' and activations' rows, and the Idempotency-Keys. The reader's side is
 * stats_sqlite_read.c, the table of operations at the end of this file.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats_engine.h"
#include "stats_sqlite.h"
#include "write_gate.h"

typedef enum w_stmt {
    W_MODEL_GET,
    W_MODEL_INSERT,
    W_MODEL_UPDATE,
    W_ROW_GET,
    W_ROW_INSERT,
    W_ROW_UPDATE,
    W_ROWS_DELETE,
    W_MODEL_BYTES,
    W_KEY_GET,
    W_KEY_PUT,
    W_KEY_PURGE,
    W_COUNT
} w_stmt;

static const qd_db_stmt_def writer_sql[] = {
    {W_MODEL_GET, "SELECT id, averaging, ema_constant, bootstrap_steps, posts, "
                  "stats_updated_ms, created_ms, updated_ms FROM stat_models WHERE name = ?1"},
    {W_MODEL_INSERT, "INSERT INTO stat_models (name, averaging, ema_constant, bootstrap_steps, "
                     "posts, stats_updated_ms, created_ms, updated_ms) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id"},
    {W_MODEL_UPDATE, "UPDATE stat_models SET averaging = ?2, ema_constant = ?3, "
                     "bootstrap_steps = ?4, posts = ?5, stats_updated_ms = ?6, updated_ms = ?7 "
                     "WHERE id = ?1"},
    /* the arrays part by part (a, b, sq), each sum, last, ema: the order of qd_stat_row_rec */
    {W_ROW_GET, "SELECT id, kind, shape, sq_len, count, created_ms, updated_ms, sum_a, last_a, "
                "ema_a, sum_b, last_b, ema_b, sum_sq, last_sq, ema_sq FROM stats "
                "WHERE model_id = ?1 AND name = ?2"},
    {W_ROW_INSERT, "INSERT INTO stats (model_id, name, kind, shape, sq_len, count, created_ms, "
                   "updated_ms, sum_a, last_a, ema_a, sum_b, last_b, ema_b, sum_sq, last_sq, "
                   "ema_sq) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                   "?14, ?15, ?16, ?17)"},
    {W_ROW_UPDATE, "UPDATE stats SET count = ?2, updated_ms = ?3, sum_a = ?4, last_a = ?5, "
                   "ema_a = ?6, sum_b = ?7, last_b = ?8, ema_b = ?9, sum_sq = ?10, "
                   "last_sq = ?11, ema_sq = ?12 WHERE id = ?1"},
    {W_ROWS_DELETE, "DELETE FROM stats WHERE model_id = ?1"},
    {W_MODEL_BYTES, "SELECT coalesce(sum(coalesce(length(sum_a), 0) + "
                    "coalesce(length(sum_b), 0) + coalesce(length(sum_sq), 0)), 0) "
                    "FROM stats WHERE model_id = ?1"},
    {W_KEY_GET, "SELECT fingerprint, activations, step, created_ms FROM stat_post_keys "
                "WHERE model_id = ?1 AND key = ?2 AND created_ms >= ?3"},
    {W_KEY_PUT, "INSERT OR REPLACE INTO stat_post_keys (model_id, key, fingerprint, activations, "
                "step, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"},
    {W_KEY_PURGE, "DELETE FROM stat_post_keys WHERE created_ms < ?1"},
};

typedef struct sq_writer {
    qd_db *db; /* the statistics writer's connection (db.h) */
    sqlite3_stmt *q[W_COUNT];
} sq_writer;

/* ---- helpers shared with the reader's side -----------------------------------------------------
 */

void qd_sqstat_model_cols(sqlite3_stmt *st, int at, qd_stat_model_rec *m)
{
    const unsigned char *avg = sqlite3_column_text(st, at);
    snprintf(m->averaging, sizeof m->averaging, "%s", avg ? (const char *)avg : "");
    m->ema_constant = sqlite3_column_double(st, at + 1);
    m->bootstrap_steps = sqlite3_column_int64(st, at + 2);
}

void qd_sqstat_row_cols(sqlite3_stmt *st, int at, qd_stat_row_rec *r)
{
    r->kind = (const char *)sqlite3_column_text(st, at);
    r->shape = (const char *)sqlite3_column_text(st, at + 1);
    r->sq_len = sqlite3_column_int64(st, at + 2); /* NULL reads as 0 */
    r->count = sqlite3_column_int64(st, at + 3);
    r->created_ms = sqlite3_column_int64(st, at + 4);
    r->updated_ms = sqlite3_column_int64(st, at + 5);
    for (int k = 0; k < QD_STAT_ARRAYS; k++) {
        int col = at + 6 + k;
        r->arr[k] = sqlite3_column_blob(st, col);
        r->arr_bytes[k] = sqlite3_column_bytes(st, col);
        if (sqlite3_column_type(st, col) == SQLITE_NULL) r->arr[k] = NULL;
    }
}

void qd_sqstat_key_cols(sqlite3_stmt *st, qd_stat_key_rec *k)
{
    const void *fp = sqlite3_column_blob(st, 0);
    int len = sqlite3_column_bytes(st, 0);
    k->fingerprint_len = fp ? len : 0;
    memset(k->fingerprint, 0, sizeof k->fingerprint);
    if (fp && len == QD_FINGERPRINT_LEN) memcpy(k->fingerprint, fp, QD_FINGERPRINT_LEN);
    k->activations = sqlite3_column_int64(st, 1);
    k->step = sqlite3_column_type(st, 2) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 2);
    k->created_ms = sqlite3_column_int64(st, 3);
}

/* Statement k, reset and with its bindings cleared. */
static sqlite3_stmt *stmt(sq_writer *w, w_stmt k)
{
    sqlite3_reset(w->q[k]);
    sqlite3_clear_bindings(w->q[k]);
    return w->q[k];
}

/* Steps st once: SQLITE_ROW or SQLITE_DONE, else -1 with the failure (naming op) in err. */
static int step(sq_writer *w, sqlite3_stmt *st, const char *op, qd_status *res, qd_err *err)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW || rc == SQLITE_DONE) return rc;
    *res = qd_db_fail(w->db, err, op);
    return -1;
}

/* Runs st (bound: bind_rc the bindings' result) to its end; the statement is reset after. */
static qd_status run(sq_writer *w, sqlite3_stmt *st, int bind_rc, const char *op, qd_err *err)
{
    qd_status res = QD_OK;
    if (bind_rc != SQLITE_OK)
        res = qd_db_fail(w->db, err, op);
    else
        step(w, st, op, &res, err);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st); /* SQLite lets go of the arrays, the key and the fingerprint */
    return res;
}

/* ---- the connection and the group's transaction -------------------------------------------------
 */

qd_db *qd_sqstat_writer_db(void *cls)
{
    return ((sq_writer *)cls)->db;
}

static void writer_close(void *cls)
{
    sq_writer *w = cls;
    if (!w) return;
    qd_db_finalize(w->q, W_COUNT);
    qd_db_close(w->db);
    free(w);
}

static qd_status writer_open(const char *target, const qd_db_tuning *tuning, void **cls,
                             qd_err *err)
{
    *cls = NULL;
    sq_writer *w = calloc(1, sizeof *w);
    if (!w) return qd_fail(err, QD_NOMEM, "out of memory");
    qd_status st = qd_db_open_tuned(target, QD_DB_STATS_WRITER, tuning, &w->db, err);
    if (st == QD_OK)
        st = qd_db_prepare(w->db, writer_sql, sizeof writer_sql / sizeof writer_sql[0], w->q,
                           W_COUNT, err);
    if (st == QD_OK) st = qd_db_prepared_all(w->db, w->q, W_COUNT, err);
    if (st != QD_OK) {
        writer_close(w);
        return st;
    }
    *cls = w;
    return QD_OK;
}

static qd_status group_begin(void *cls, qd_err *err)
{
    sq_writer *w = cls;
    qd_write_gate_enter(); /* fair turns with the job store's writes */
    qd_status st = qd_db_begin(w->db, true, err);
    if (st != QD_OK) qd_write_gate_leave();
    return st;
}

static qd_status group_end(void *cls, bool commit, qd_err *err)
{
    sq_writer *w = cls;
    qd_status st = commit ? qd_db_commit(w->db, err) : QD_OK;
    /* a failed COMMIT leaves the transaction open: it would keep the write lock */
    if (!commit || st != QD_OK) qd_db_rollback(w->db);
    qd_write_gate_leave();
    return st;
}

/* ---- models -----------------------------------------------------------------------------------
 */

static qd_status model_lock(void *cls, qd_stat_model_rec *m, bool *found, qd_err *err)
{
    sq_writer *w = cls;
    *found = false;
    sqlite3_stmt *st = stmt(w, W_MODEL_GET);
    qd_status res = QD_OK;
    if (sqlite3_bind_text(st, 1, m->name, -1, SQLITE_STATIC) != SQLITE_OK)
        return qd_db_fail(w->db, err, "read model");
    int rc = step(w, st, "read model", &res, err);
    if (rc == SQLITE_ROW) {
        *found = true;
        m->id = sqlite3_column_int64(st, 0);
        qd_sqstat_model_cols(st, 1, m);
        m->posts = sqlite3_column_int64(st, 4);
        m->last_ms = sqlite3_column_int64(st, 5);
        m->created_ms = sqlite3_column_int64(st, 6);
        m->updated_ms = sqlite3_column_int64(st, 7);
    }
    /* reset on every way out: left mid-step it would hold its read open */
    sqlite3_reset(st);
    return res;
}

static qd_status model_bytes(void *cls, int64_t model_id, int64_t *bytes, qd_err *err)
{
    sq_writer *w = cls;
    sqlite3_stmt *st = stmt(w, W_MODEL_BYTES);
    qd_status res = QD_OK;
    if (sqlite3_bind_int64(st, 1, model_id) != SQLITE_OK)
        return qd_db_fail(w->db, err, "read model size");
    int rc = step(w, st, "read model size", &res, err);
    *bytes = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return res;
}

/* Binds the settings and counters from parameter at on: averaging, ema_constant,
 * bootstrap_steps, posts, stats_updated_ms (NULL for 0). */
static int bind_model(sqlite3_stmt *st, int at, const qd_stat_model_rec *m)
{
    int rc = sqlite3_bind_text(st, at, m->averaging, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_double(st, at + 1, m->ema_constant);
    rc |= sqlite3_bind_int64(st, at + 2, m->bootstrap_steps);
    rc |= sqlite3_bind_int64(st, at + 3, m->posts);
    rc |= m->last_ms ? sqlite3_bind_int64(st, at + 4, m->last_ms) : sqlite3_bind_null(st, at + 4);
    return rc;
}

static qd_status model_insert(void *cls, qd_stat_model_rec *m, qd_err *err)
{
    sq_writer *w = cls;
    sqlite3_stmt *st = stmt(w, W_MODEL_INSERT);
    int rc = sqlite3_bind_text(st, 1, m->name, -1, SQLITE_STATIC);
    rc |= bind_model(st, 2, m);
    rc |= sqlite3_bind_int64(st, 7, m->created_ms);
    rc |= sqlite3_bind_int64(st, 8, m->updated_ms);
    if (rc != SQLITE_OK) return qd_db_fail(w->db, err, "write model");
    qd_status res = QD_OK;
    int s = step(w, st, "write model", &res, err);
    if (s == SQLITE_ROW)
        m->id = sqlite3_column_int64(st, 0);
    else if (s == SQLITE_DONE)
        res = qd_fail(err, QD_DB, "write model: no id");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return res;
}

static qd_status model_update(void *cls, const qd_stat_model_rec *m, qd_err *err)
{
    sq_writer *w = cls;
    sqlite3_stmt *st = stmt(w, W_MODEL_UPDATE);
    int rc = sqlite3_bind_int64(st, 1, m->id);
    rc |= bind_model(st, 2, m);
    rc |= sqlite3_bind_int64(st, 7, m->updated_ms);
    return run(w, st, rc, "write model", err);
}

/* ---- activations ------------------------------------------------------------------------------
 */

static qd_status row_lock(void *cls, int64_t model_id, const char *name, qd_stat_row_fn fn,
                          void *ctx, bool *found, qd_err *err)
{
    sq_writer *w = cls;
    *found = false;
    sqlite3_stmt *st = stmt(w, W_ROW_GET);
    if (sqlite3_bind_int64(st, 1, model_id) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC) != SQLITE_OK)
        return qd_db_fail(w->db, err, "read statistics");
    qd_status res = QD_OK;
    if (step(w, st, "read statistics", &res, err) == SQLITE_ROW) {
        qd_stat_row_rec r = {.id = sqlite3_column_int64(st, 0), .model_id = model_id, .name = name};
        qd_sqstat_row_cols(st, 1, &r);
        *found = true;
        res = fn(ctx, &r, err);
    }
    sqlite3_reset(st);
    return res;
}

/* Binds the nine arrays from parameter at on; the arrays stay put until the statement is reset,
 * so SQLite reads them in place. */
static int bind_arrays(sqlite3_stmt *st, int at, const qd_stat_row_rec *r)
{
    int rc = SQLITE_OK;
    for (int k = 0; k < QD_STAT_ARRAYS; k++)
        rc |= r->arr[k] ? sqlite3_bind_blob64(st, at + k, r->arr[k],
                                              (sqlite3_uint64)r->arr_bytes[k], SQLITE_STATIC)
                        : sqlite3_bind_null(st, at + k);
    return rc;
}

static qd_status row_insert(void *cls, const qd_stat_row_rec *r, int64_t *id, qd_err *err)
{
    sq_writer *w = cls;
    sqlite3_stmt *st = stmt(w, W_ROW_INSERT);
    int rc = sqlite3_bind_int64(st, 1, r->model_id);
    rc |= sqlite3_bind_text(st, 2, r->name, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_text(st, 3, r->kind, -1, SQLITE_STATIC);
    rc |= r->shape ? sqlite3_bind_text(st, 4, r->shape, -1, SQLITE_TRANSIENT)
                   : sqlite3_bind_null(st, 4);
    rc |= r->sq_len > 0 ? sqlite3_bind_int64(st, 5, r->sq_len) : sqlite3_bind_null(st, 5);
    rc |= sqlite3_bind_int64(st, 6, r->count);
    rc |= sqlite3_bind_int64(st, 7, r->created_ms);
    rc |= sqlite3_bind_int64(st, 8, r->updated_ms);
    rc |= bind_arrays(st, 9, r);
    qd_status res = run(w, st, rc, "write statistics", err);
    if (res == QD_OK) *id = sqlite3_last_insert_rowid(qd_db_sqlite(w->db));
    return res;
}

static qd_status row_update(void *cls, const qd_stat_row_rec *r, qd_err *err)
{
    sq_writer *w = cls;
    sqlite3_stmt *st = stmt(w, W_ROW_UPDATE);
    int rc = sqlite3_bind_int64(st, 1, r->id);
    rc |= sqlite3_bind_int64(st, 2, r->count);
    rc |= sqlite3_bind_int64(st, 3, r->updated_ms);
    rc |= bind_arrays(st, 4, r);
    return run(w, st, rc, "write statistics", err);
}

static qd_status rows_delete(void *cls, int64_t model_id, qd_err *err)
{
    sq_writer *w = cls;
    sqlite3_stmt *st = stmt(w, W_ROWS_DELETE);
    return run(w, st, sqlite3_bind_int64(st, 1, model_id), "reset", err);
}

/* ---- Idempotency-Keys -------------------------------------------------------------------------
 */

static qd_status key_get(void *cls, int64_t model_id, const char *key, int64_t since_ms,
                         qd_stat_key_rec *k, bool *found, qd_err *err)
{
    sq_writer *w = cls;
    *found = false;
    sqlite3_stmt *st = stmt(w, W_KEY_GET);
    if (sqlite3_bind_int64(st, 1, model_id) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, since_ms) != SQLITE_OK)
        return qd_db_fail(w->db, err, "read Idempotency-Key");
    qd_status res = QD_OK;
    if (step(w, st, "read Idempotency-Key", &res, err) == SQLITE_ROW) {
        *found = true;
        qd_sqstat_key_cols(st, k);
    }
    sqlite3_reset(st);
    return res;
}

static qd_status key_put(void *cls, int64_t model_id, const char *key, const qd_stat_key_rec *k,
                         qd_err *err)
{
    sq_writer *w = cls;
    sqlite3_stmt *st = stmt(w, W_KEY_PUT);
    int rc = sqlite3_bind_int64(st, 1, model_id);
    rc |= sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_blob(st, 3, k->fingerprint, k->fingerprint_len, SQLITE_STATIC);
    rc |= sqlite3_bind_int64(st, 4, k->activations);
    rc |= k->step >= 0 ? sqlite3_bind_int64(st, 5, k->step) : sqlite3_bind_null(st, 5);
    rc |= sqlite3_bind_int64(st, 6, k->created_ms);
    return run(w, st, rc, "record Idempotency-Key", err);
}

static qd_status keys_purge(void *cls, int64_t before_ms, qd_err *err)
{
    sq_writer *w = cls;
    sqlite3_stmt *st = stmt(w, W_KEY_PURGE);
    return run(w, st, sqlite3_bind_int64(st, 1, before_ms), "purge Idempotency-Keys", err);
}

/* ---- the table ----------------------------------------------------------------------------------
 */

const qd_stats_ops qd_stats_sqlite_ops = {
    .name = "sqlite",
    .writer_open = writer_open,
    .writer_close = writer_close,
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
    .reader_open = qd_sqstat_reader_open,
    .reader_close = qd_sqstat_reader_close,
    .read_begin = qd_sqstat_read_begin,
    .read_end = qd_sqstat_read_end,
    .read_models = qd_sqstat_read_models,
    .read_conf = qd_sqstat_read_conf,
    .read_rows = qd_sqstat_read_rows,
    .read_key = qd_sqstat_read_key,
};
