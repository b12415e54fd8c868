/* stats_sqlite_read.c -- the statistics' SQLite engine, the reader's side (stats_engine.h): its
 * own connection of the SQLite layer (db.h's reader role: query_only; WAL, so it never waits for
 * the writer), one deferred read transaction per read (a snapshot), the models with their
 * counters and the bytes of sums each holds, one model's settings, a model's activations by name,
 * and the look-up of an Idempotency-Key in a statement of its own.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>

#include "stats_sqlite.h"

typedef enum r_stmt { R_MODELS, R_CONF, R_ROWS, R_KEY, R_COUNT } r_stmt;

static const qd_db_stmt_def read_sql[] = {
    {R_MODELS, "SELECT m.name, m.averaging, m.ema_constant, m.bootstrap_steps, m.posts, "
               "m.stats_updated_ms, (SELECT count(*) FROM stats s WHERE s.model_id = m.id), "
               "(SELECT coalesce(sum(coalesce(length(s.sum_a), 0) + coalesce(length(s.sum_b), 0) + "
               "coalesce(length(s.sum_sq), 0)), 0) FROM stats s WHERE s.model_id = m.id) "
               "FROM stat_models m ORDER BY m.name"},
    {R_CONF, "SELECT id, averaging, ema_constant, bootstrap_steps FROM stat_models "
             "WHERE name = ?1"},
    /* the name, then the columns qd_sqstat_row_cols decodes */
    {R_ROWS, "SELECT name, kind, shape, sq_len, count, created_ms, updated_ms, sum_a, last_a, "
             "ema_a, sum_b, last_b, ema_b, sum_sq, last_sq, ema_sq FROM stats "
             "WHERE model_id = ?1 ORDER BY name"},
    /* an Idempotency-Key of a model, remembered since ?3 */
    {R_KEY, "SELECT k.fingerprint, k.activations, k.step, k.created_ms FROM stat_post_keys k "
            "JOIN stat_models m ON m.id = k.model_id WHERE m.name = ?1 AND k.key = ?2 "
            "AND k.created_ms >= ?3"},
};

typedef struct sq_reader {
    qd_db *db;
    sqlite3_stmt *r[R_COUNT];
} sq_reader;

qd_db *qd_sqstat_reader_db(void *cls)
{
    return ((sq_reader *)cls)->db;
}

void qd_sqstat_reader_close(void *cls)
{
    sq_reader *rd = cls;
    if (!rd) return;
    qd_db_finalize(rd->r, R_COUNT);
    qd_db_close(rd->db);
    free(rd);
}

qd_status qd_sqstat_reader_open(const char *target, const qd_db_tuning *tuning, void **cls,
                                qd_err *err)
{
    *cls = NULL;
    sq_reader *rd = calloc(1, sizeof *rd);
    if (!rd) return qd_fail(err, QD_NOMEM, "out of memory");
    qd_db_tuning reader = {.busy_timeout_ms = tuning ? tuning->busy_timeout_ms : 0};
    qd_status st = qd_db_open_tuned(target, QD_DB_READER, &reader, &rd->db, err);
    if (st == QD_OK)
        st = qd_db_prepare(rd->db, read_sql, sizeof read_sql / sizeof read_sql[0], rd->r, R_COUNT,
                           err);
    if (st == QD_OK) st = qd_db_prepared_all(rd->db, rd->r, R_COUNT, err);
    if (st != QD_OK) {
        qd_sqstat_reader_close(rd);
        return st;
    }
    *cls = rd;
    return QD_OK;
}

qd_status qd_sqstat_read_begin(void *cls, qd_err *err)
{
    sq_reader *rd = cls;
    return qd_db_begin(rd->db, false, err);
}

qd_status qd_sqstat_read_end(void *cls, bool ok, qd_err *err)
{
    sq_reader *rd = cls;
    for (int i = 0; i < R_COUNT; i++) sqlite3_reset(rd->r[i]);
    qd_status st = qd_db_commit(rd->db, ok ? err : NULL);
    if (st != QD_OK) qd_db_rollback(rd->db);
    return st;
}

qd_status qd_sqstat_read_models(void *cls, qd_stat_model_fn fn, void *ctx, qd_err *err)
{
    sq_reader *rd = cls;
    sqlite3_stmt *st = rd->r[R_MODELS];
    sqlite3_reset(st);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        qd_stat_model_rec m = {.name = (const char *)sqlite3_column_text(st, 0)};
        qd_sqstat_model_cols(st, 1, &m);
        m.posts = sqlite3_column_int64(st, 4);
        m.last_ms = sqlite3_column_int64(st, 5);
        m.activations = sqlite3_column_int64(st, 6);
        m.stats_bytes = sqlite3_column_int64(st, 7);
        qd_status res = fn(ctx, &m, err);
        if (res != QD_OK) return res;
    }
    return rc == SQLITE_DONE ? QD_OK : qd_db_fail(rd->db, err, "list models");
}

qd_status qd_sqstat_read_conf(void *cls, qd_stat_model_rec *m, bool *found, qd_err *err)
{
    sq_reader *rd = cls;
    *found = false;
    sqlite3_stmt *st = rd->r[R_CONF];
    sqlite3_reset(st);
    if (sqlite3_bind_text(st, 1, m->name, -1, SQLITE_STATIC) != SQLITE_OK)
        return qd_db_fail(rd->db, err, "read model");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) return QD_OK;
    if (rc != SQLITE_ROW) return qd_db_fail(rd->db, err, "read model");
    *found = true;
    m->id = sqlite3_column_int64(st, 0);
    qd_sqstat_model_cols(st, 1, m);
    return QD_OK;
}

qd_status qd_sqstat_read_rows(void *cls, int64_t model_id, qd_stat_row_fn fn, void *ctx,
                              qd_err *err)
{
    sq_reader *rd = cls;
    sqlite3_stmt *st = rd->r[R_ROWS];
    sqlite3_reset(st);
    if (sqlite3_bind_int64(st, 1, model_id) != SQLITE_OK)
        return qd_db_fail(rd->db, err, "read statistics");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        qd_stat_row_rec r = {.model_id = model_id,
                             .name = (const char *)sqlite3_column_text(st, 0)};
        qd_sqstat_row_cols(st, 1, &r);
        qd_status res = fn(ctx, &r, err);
        if (res != QD_OK) return res;
    }
    return rc == SQLITE_DONE ? QD_OK : qd_db_fail(rd->db, err, "read statistics");
}

qd_status qd_sqstat_read_key(void *cls, const char *model, const char *key, int64_t since_ms,
                             qd_stat_key_rec *k, bool *found, qd_err *err)
{
    sq_reader *rd = cls;
    *found = false;
    sqlite3_stmt *st = rd->r[R_KEY];
    sqlite3_reset(st);
    qd_status res = QD_OK;
    int rc = SQLITE_ERROR;
    if (sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_int64(st, 3, since_ms) == SQLITE_OK)
        rc = sqlite3_step(st); /* one statement: its own read transaction */
    if (rc == SQLITE_ROW) {
        *found = true;
        qd_sqstat_key_cols(st, k);
    } else if (rc != SQLITE_DONE) {
        res = qd_db_fail(rd->db, err, "read Idempotency-Key");
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return res;
}
