/* store_internal.h -- what store.c, store_rulesets.c and store_jobs.c share and nobody else
 * sees: the qd_store struct (its owner connection of the SQLite layer, db.h), the table of
 * prepared statements, and the helpers that run one locked transaction and step statements with
 * checked binds and errors.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STORE_INTERNAL_H
#define QD_STORE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>

#include "db.h"
#include "store.h"

/* Every statement the store runs after open, prepared once at open (a typo in SQL fails the
 * open, not a request). Each file lists its own SQL beside the code that uses it. */
typedef enum qd_query {
    /* store.c */
    QD_Q_PING,
    /* store_rulesets.c */
    QD_Q_RS_INSERT,
    QD_Q_RS_UPDATE,
    QD_Q_RS_GET,
    QD_Q_RS_LIST,
    QD_Q_RS_DELETE,
    /* store_jobs.c */
    QD_Q_JOB_INSERT,
    QD_Q_JOB_GET,
    QD_Q_JOB_STATE,
    QD_Q_JOB_LIST_ALL,
    QD_Q_JOB_LIST_STATE,
    QD_Q_JOB_CLAIM,
    QD_Q_JOB_PROGRESS,
    QD_Q_JOB_FINISH,
    QD_Q_JOB_REQUEUE_ONE,
    QD_Q_OUTPUT_INSERT,
    QD_Q_REPORT_INSERT,
    QD_Q_JOB_CANCEL,
    QD_Q_JOB_RECEIVED,
    QD_Q_JOB_END_RECEIVING,
    QD_Q_JOB_SET_UNUSED,
    QD_Q_JOB_DELETE,
    QD_Q_JOB_RUNNING_IDS,
    QD_Q_JOB_REQUEUE,
    QD_Q_JOB_INTERRUPT,
    QD_Q_OUTPUTS,
    QD_Q_REPORT,
    QD_Q_COUNTS,
    QD_Q_JOB_EXPIRING,
    QD_Q_JOB_OUTPUTS_REMOVED,
    QD_Q_JOB_OWNERS,
    QD_Q_COUNT
} qd_query;

struct qd_store {
    qd_db *db;          /* the owner connection (db.h): it created and migrated the file */
    pthread_mutex_t mu; /* held for the whole of every public call: one transaction at a time */
    int version;        /* user_version after the migrations */
    sqlite3_stmt *q[QD_Q_COUNT];
};

/* Prepares defs[0..n) (ids are qd_query values) into s->q (persistent statements). */
qd_status qd_store_prepare(qd_store *s, const qd_db_stmt_def *defs, size_t n, qd_err *err);
qd_status qd_store_prepare_rulesets(qd_store *s, qd_err *err);
qd_status qd_store_prepare_jobs(qd_store *s, qd_err *err);

/* One transaction under the store's mutex: BEGIN (IMMEDIATE when write), fn, COMMIT; ROLLBACK
 * when fn or the commit fails, so a failed call changes nothing. fn's status is returned. */
typedef qd_status (*qd_txn_fn)(qd_store *s, void *ctx, qd_err *err);
qd_status qd_store_txn(qd_store *s, bool write, qd_txn_fn fn, void *ctx, qd_err *err);

/* Resets statement q, binds its parameters ?1..?n from types (one letter each: 't' a const char *
 * or NULL, 'i' an int64_t -- cast literals) and steps it once; *row (may be NULL) tells whether
 * it produced a row. Errors name op. */
qd_status qd_store_run(qd_store *s, qd_query q, const char *op, qd_err *err, bool *row,
                       const char *types, ...);
/* Steps q again (the next row). */
qd_status qd_store_next(qd_store *s, qd_query q, const char *op, qd_err *err, bool *row);

/* Column i of the current row of q as a malloc'd string (NULL for SQL NULL). */
qd_status qd_store_col_text(qd_store *s, qd_query q, int i, char **out, qd_err *err);
/* Rows changed by the last statement. */
int64_t qd_store_changes(qd_store *s);

#endif /* QD_STORE_INTERNAL_H */
