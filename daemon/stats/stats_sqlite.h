/* stats_sqlite.h -- what the two files of the statistics' SQLite engine share (stats_sqlite.c:
 * the writer's side and the table; stats_sqlite_read.c: the reader's side): the reader's
 * operations and the decoding of a statement's columns into the engine's records.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STATS_SQLITE_H
#define QD_STATS_SQLITE_H

#include <sqlite3.h>

#include "stats_engine.h"

/* Columns at, at + 1, at + 2 of st: averaging, ema_constant, bootstrap_steps into *m. */
void qd_sqstat_model_cols(sqlite3_stmt *st, int at, qd_stat_model_rec *m);
/* Columns from at on: kind, shape, sq_len, count, created_ms, updated_ms, then the nine arrays
 * (sum_a, last_a, ema_a, sum_b, ...): pointers into st, valid until it steps or is reset. */
void qd_sqstat_row_cols(sqlite3_stmt *st, int at, qd_stat_row_rec *r);
/* Columns 0-3: fingerprint, activations, step, created_ms. */
void qd_sqstat_key_cols(sqlite3_stmt *st, qd_stat_key_rec *k);

/* The reader's side of qd_stats_sqlite_ops (stats_engine.h says what each does). */
qd_status qd_sqstat_reader_open(const char *target, const qd_db_tuning *tuning, void **cls,
                                qd_err *err);
void qd_sqstat_reader_close(void *cls);
qd_status qd_sqstat_read_begin(void *cls, qd_err *err);
qd_status qd_sqstat_read_end(void *cls, bool ok, qd_err *err);
qd_status qd_sqstat_read_models(void *cls, qd_stat_model_fn fn, void *ctx, qd_err *err);
qd_status qd_sqstat_read_conf(void *cls, qd_stat_model_rec *m, bool *found, qd_err *err);
qd_status qd_sqstat_read_rows(void *cls, int64_t model_id, qd_stat_row_fn fn, void *ctx,
                              qd_err *err);
qd_status qd_sqstat_read_key(void *cls, const char *model, const char *key, int64_t since_ms,
                             qd_stat_key_rec *k, bool *found, qd_err *err);

/* The SQLite connection of a writer's / a reader's cls (tests of its tuning). */
qd_db *qd_sqstat_writer_db(void *cls);
qd_db *qd_sqstat_reader_db(void *cls);

#endif /* QD_STATS_SQLITE_H */
