/* stats_pg.h -- what the two files of the statistics' PostgreSQL engine share (stats_pg.c: the
 * connection, statements, the writer's side and the table; stats_pg_read.c: the reader's side):
 * a connection of the store's PostgreSQL layer (store_pg.h) with the statistics' own named
 * statements, run with binary results (bytea arrays as they are stored, numbers exact), and the
 * decoding of a result's columns into the engine's records.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STATS_PG_H
#define QD_STATS_PG_H

#include <libpq-fe.h>

#include "stats_engine.h"
#include "store_pg.h"

/* Every statement of the statistics, prepared as "s<id>" on each connection (after a reset
 * too); each file lists its own SQL. */
typedef enum qd_pgs_query {
    /* stats_pg.c: the writer */
    QD_PGS_MODEL_GET,
    QD_PGS_MODEL_INSERT,
    QD_PGS_MODEL_UPDATE,
    QD_PGS_ROW_GET,
    QD_PGS_ROW_INSERT,
    QD_PGS_ROW_UPDATE,
    QD_PGS_ROWS_DELETE,
    QD_PGS_MODEL_BYTES,
    QD_PGS_KEY_GET,
    QD_PGS_KEY_PUT,
    QD_PGS_KEY_PURGE,
    /* stats_pg_read.c: the reads */
    QD_PGS_R_MODELS,
    QD_PGS_R_CONF,
    QD_PGS_R_ROWS,
    QD_PGS_R_KEY,
    QD_PGS_COUNT
} qd_pgs_query;

typedef struct qd_pgs_stmt_def {
    qd_pgs_query id;
    const char *sql;
} qd_pgs_stmt_def;

extern const qd_pgs_stmt_def qd_pgs_read_sql[];
extern const size_t qd_pgs_read_sql_n;

/* The most parameters a statement takes. */
#define QD_PGS_MAX_PARAMS 17

/* A statement's parameters: text (v NULL: SQL NULL) or binary (len bytes at v). */
typedef struct qd_pgs_params {
    int n;
    const char *v[QD_PGS_MAX_PARAMS];
    int len[QD_PGS_MAX_PARAMS];
    int fmt[QD_PGS_MAX_PARAMS];
    char num[QD_PGS_MAX_PARAMS][32]; /* the numbers' text */
} qd_pgs_params;

void qd_pgs_text(qd_pgs_params *ps, const char *v);
void qd_pgs_int(qd_pgs_params *ps, int64_t v);
void qd_pgs_int_or_null(qd_pgs_params *ps, int64_t v);            /* 0 (or below): NULL */
void qd_pgs_double(qd_pgs_params *ps, double v);                  /* exact: 17 significant digits */
void qd_pgs_bytes(qd_pgs_params *ps, const void *v, int64_t len); /* v NULL: NULL */

/* Connects to target (the schema must be this binary's: the job store migrated it) and prepares
 * the statistics' statements. */
qd_status qd_pgs_connect(const char *target, qd_pg **out, qd_err *err);
/* A connection that broke is reset and its statements prepared again (one try per call). */
qd_status qd_pgs_ensure(qd_pg *p, qd_err *err);
/* Runs sql (BEGIN, COMMIT, ...); errors name op. */
qd_status qd_pgs_exec(qd_pg *p, const char *sql, const char *op, qd_err *err);
/* Ends an open transaction (after a failure: nothing more to report). */
void qd_pgs_rollback(qd_pg *p);
/* Runs statement q with ps (NULL: none), binary results into *res (may be NULL: cleared here;
 * else the caller PQclears it). Errors name op, QD_DB (the values were checked before SQL). */
qd_status qd_pgs_run(qd_pg *p, qd_pgs_query q, const qd_pgs_params *ps, const char *op,
                     PGresult **res, qd_err *err);

/* Binary result cells: a bigint (NULL reads 0), a double precision, text (NULL for SQL NULL). */
int64_t qd_pgs_col_int(const PGresult *r, int row, int col);
double qd_pgs_col_double(const PGresult *r, int row, int col);
const char *qd_pgs_col_text(const PGresult *r, int row, int col);
/* Columns at, at + 1, at + 2: averaging, ema_constant, bootstrap_steps into *m. */
void qd_pgs_model_cols(const PGresult *r, int row, int at, qd_stat_model_rec *m);
/* Columns from at on: kind, shape, sq_len, count, created_ms, updated_ms, then the nine arrays:
 * pointers into r, valid until it is cleared. */
void qd_pgs_row_cols(const PGresult *r, int row, int at, qd_stat_row_rec *rec);
/* Columns 0-3: fingerprint, activations, step, created_ms. */
void qd_pgs_key_cols(const PGresult *r, int row, qd_stat_key_rec *k);

/* The reader's side of qd_stats_pg_ops (stats_engine.h says what each does). */
qd_status qd_pgs_reader_open(const char *target, const qd_db_tuning *tuning, void **cls,
                             qd_err *err);
void qd_pgs_reader_close(void *cls);
qd_status qd_pgs_read_begin(void *cls, qd_err *err);
qd_status qd_pgs_read_end(void *cls, bool ok, qd_err *err);
qd_status qd_pgs_read_models(void *cls, qd_stat_model_fn fn, void *ctx, qd_err *err);
qd_status qd_pgs_read_conf(void *cls, qd_stat_model_rec *m, bool *found, qd_err *err);
qd_status qd_pgs_read_rows(void *cls, int64_t model_id, qd_stat_row_fn fn, void *ctx, qd_err *err);
qd_status qd_pgs_read_key(void *cls, const char *model, const char *key, int64_t since_ms,
                          qd_stat_key_rec *k, bool *found, qd_err *err);

#endif /* QD_STATS_PG_H */
