/* stats_pg_read.c -- the statistics' PostgreSQL engine, the reader's side (stats_engine.h): its
 * own connection (stats_pg.c's frame), one REPEATABLE READ READ ONLY transaction per read (a
 * snapshot: what every instance committed before it), the models with their counters and the
 * bytes of sums each holds, one model's settings, a model's activations by name (in byte order,
 * as SQLite sorts them), and the look-up of an Idempotency-Key in a statement of its own.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "stats_pg.h"

const qd_pgs_stmt_def qd_pgs_read_sql[] = {
    {QD_PGS_R_MODELS,
     "SELECT m.name, m.averaging, m.ema_constant, m.bootstrap_steps, m.posts, "
     "m.stats_updated_ms, (SELECT count(*) FROM stats s WHERE s.model_id = m.id), "
     "(SELECT coalesce(sum(coalesce(octet_length(s.sum_a), 0) + "
     "coalesce(octet_length(s.sum_b), 0) + coalesce(octet_length(s.sum_sq), 0)), 0)::bigint "
     "FROM stats s WHERE s.model_id = m.id) FROM stat_models m ORDER BY m.name COLLATE \"C\""},
    {QD_PGS_R_CONF, "SELECT id, averaging, ema_constant, bootstrap_steps FROM stat_models "
                    "WHERE name = $1"},
    /* the name, then the columns qd_pgs_row_cols decodes */
    {QD_PGS_R_ROWS, "SELECT name, kind, shape, sq_len, count, created_ms, updated_ms, sum_a, "
                    "last_a, ema_a, sum_b, last_b, ema_b, sum_sq, last_sq, ema_sq FROM stats "
                    "WHERE model_id = $1 ORDER BY name COLLATE \"C\""},
    /* an Idempotency-Key of a model, remembered since $3 */
    {QD_PGS_R_KEY, "SELECT k.fingerprint, k.activations, k.step, k.created_ms "
                   "FROM stat_post_keys k JOIN stat_models m ON m.id = k.model_id "
                   "WHERE m.name = $1 AND k.key = $2 AND k.created_ms >= $3"},
};
const size_t qd_pgs_read_sql_n = sizeof qd_pgs_read_sql / sizeof qd_pgs_read_sql[0];

qd_status qd_pgs_reader_open(const char *target, const qd_db_tuning *tuning, void **cls,
                             qd_err *err)
{
    (void)tuning;
    return qd_pgs_connect(target, (qd_pg **)cls, err);
}

void qd_pgs_reader_close(void *cls)
{
    qd_pg_disconnect(cls);
}

qd_status qd_pgs_read_begin(void *cls, qd_err *err)
{
    qd_status st = qd_pgs_ensure(cls, err);
    return st == QD_OK
               ? qd_pgs_exec(cls, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "BEGIN", err)
               : st;
}

qd_status qd_pgs_read_end(void *cls, bool ok, qd_err *err)
{
    qd_status st = ok ? qd_pgs_exec(cls, "COMMIT", "COMMIT", err) : QD_OK;
    qd_pgs_rollback(cls);
    return st;
}

qd_status qd_pgs_read_models(void *cls, qd_stat_model_fn fn, void *ctx, qd_err *err)
{
    PGresult *r = NULL;
    qd_status st = qd_pgs_run(cls, QD_PGS_R_MODELS, NULL, "list models", &r, err);
    for (int i = 0; st == QD_OK && i < PQntuples(r); i++) {
        qd_stat_model_rec m = {.name = qd_pgs_col_text(r, i, 0)};
        qd_pgs_model_cols(r, i, 1, &m);
        m.posts = qd_pgs_col_int(r, i, 4);
        m.last_ms = qd_pgs_col_int(r, i, 5);
        m.activations = qd_pgs_col_int(r, i, 6);
        m.stats_bytes = qd_pgs_col_int(r, i, 7);
        st = fn(ctx, &m, err);
    }
    PQclear(r);
    return st;
}

qd_status qd_pgs_read_conf(void *cls, qd_stat_model_rec *m, bool *found, qd_err *err)
{
    *found = false;
    qd_pgs_params ps = {0};
    qd_pgs_text(&ps, m->name);
    PGresult *r = NULL;
    qd_status st = qd_pgs_run(cls, QD_PGS_R_CONF, &ps, "read model", &r, err);
    if (st == QD_OK && PQntuples(r) == 1) {
        *found = true;
        m->id = qd_pgs_col_int(r, 0, 0);
        qd_pgs_model_cols(r, 0, 1, m);
    }
    PQclear(r);
    return st;
}

qd_status qd_pgs_read_rows(void *cls, int64_t model_id, qd_stat_row_fn fn, void *ctx, qd_err *err)
{
    qd_pgs_params ps = {0};
    qd_pgs_int(&ps, model_id);
    PGresult *r = NULL;
    qd_status st = qd_pgs_run(cls, QD_PGS_R_ROWS, &ps, "read statistics", &r, err);
    for (int i = 0; st == QD_OK && i < PQntuples(r); i++) {
        qd_stat_row_rec rec = {.model_id = model_id, .name = qd_pgs_col_text(r, i, 0)};
        qd_pgs_row_cols(r, i, 1, &rec);
        st = fn(ctx, &rec, err);
    }
    PQclear(r);
    return st;
}

qd_status qd_pgs_read_key(void *cls, const char *model, const char *key, int64_t since_ms,
                          qd_stat_key_rec *k, bool *found, qd_err *err)
{
    *found = false;
    qd_status st = qd_pgs_ensure(cls, err);
    if (st != QD_OK) return st;
    qd_pgs_params ps = {0};
    qd_pgs_text(&ps, model);
    qd_pgs_text(&ps, key);
    qd_pgs_int(&ps, since_ms);
    PGresult *r = NULL;
    st = qd_pgs_run(cls, QD_PGS_R_KEY, &ps, "read Idempotency-Key", &r, err);
    if (st == QD_OK && PQntuples(r) == 1) {
        *found = true;
        qd_pgs_key_cols(r, 0, k);
    }
    PQclear(r);
    return st;
}
