/* store_sqlite.h -- what the SQLite engine's files (store_sqlite*.c) share and nobody else sees:
 * the engine's handle (its owner connection of the SQLite layer, db.h), the table of prepared
 * statements, the helpers that run one locked transaction and step statements with checked binds
 * and errors, and the operations store_sqlite.c puts in the engine's table (store_engine.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STORE_SQLITE_H
#define QD_STORE_SQLITE_H

#include <pthread.h>
#include <sqlite3.h>

#include "db.h"
#include "store.h"
#include "store_engine.h"

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

typedef struct qd_sq qd_sq;

struct qd_sq {
    qd_db *db;          /* the owner connection (db.h): it created and migrated the file */
    pthread_mutex_t mu; /* held for the whole of every public call: one transaction at a time */
    int version;        /* user_version after the migrations */
    sqlite3_stmt *q[QD_Q_COUNT];
};

/* Prepares defs[0..n) (ids are qd_query values) into s->q (persistent statements). */
qd_status qd_sq_prepare(qd_sq *s, const qd_db_stmt_def *defs, size_t n, qd_err *err);
qd_status qd_sq_prepare_rulesets(qd_sq *s, qd_err *err);
qd_status qd_sq_prepare_jobs(qd_sq *s, qd_err *err);

/* One transaction under the store's mutex: BEGIN (IMMEDIATE when write), fn, COMMIT; ROLLBACK
 * when fn or the commit fails, so a failed call changes nothing. fn's status is returned. */
typedef qd_status (*qd_sq_txn_fn)(qd_sq *s, void *ctx, qd_err *err);
qd_status qd_sq_txn(qd_sq *s, bool write, qd_sq_txn_fn fn, void *ctx, qd_err *err);

/* Resets statement q, binds its parameters ?1..?n from types (one letter each: 't' a const char *
 * or NULL, 'i' an int64_t -- cast literals) and steps it once; *row (may be NULL) tells whether
 * it produced a row. Errors name op. */
qd_status qd_sq_run(qd_sq *s, qd_query q, const char *op, qd_err *err, bool *row, const char *types,
                    ...);
/* Steps q again (the next row). */
qd_status qd_sq_next(qd_sq *s, qd_query q, const char *op, qd_err *err, bool *row);

/* Column i of the current row of q as a malloc'd string (NULL for SQL NULL). */
qd_status qd_sq_col_text(qd_sq *s, qd_query q, int i, char **out, qd_err *err);
/* Rows changed by the last statement. */
int64_t qd_sq_changes(qd_sq *s);

/* The engine's operations (store_engine.h's table), each in the file of its concern. */
qd_status qd_sqlite_ping(void *cls, qd_err *err);
qd_status qd_sqlite_ruleset_put(void *cls, const char *name, const char *body, bool *created,
                                qd_err *err);
qd_status qd_sqlite_ruleset_get(void *cls, const char *name, char **body, int64_t *created_ms,
                                int64_t *updated_ms, qd_err *err);
qd_status qd_sqlite_ruleset_list(void *cls, json_t *arr, qd_err *err);
qd_status qd_sqlite_ruleset_delete(void *cls, const char *name, qd_err *err);
qd_status qd_sqlite_job_insert(void *cls, qd_job *j, qd_err *err);
qd_status qd_sqlite_job_get(void *cls, int64_t id, qd_job *out, qd_err *err);
qd_status qd_sqlite_job_list(void *cls, int state, int64_t after_id, int limit, qd_job **jobs,
                             size_t *n, qd_err *err);
qd_status qd_sqlite_job_claim(void *cls, qd_job *out, qd_err *err);
qd_status qd_sqlite_job_progress(void *cls, int64_t id, const int64_t v[4], qd_err *err);
qd_status qd_sqlite_job_finish(void *cls, int64_t id, qd_job_state state, const char *error,
                               const qd_output *outputs, size_t n_outputs, const char *report,
                               qd_err *err);
qd_status qd_sqlite_job_requeue(void *cls, int64_t id, qd_err *err);
qd_status qd_sqlite_job_received(void *cls, int64_t id, const char *unused_rules, qd_err *err);
qd_status qd_sqlite_job_set_unused(void *cls, int64_t id, const char *unused_rules, qd_err *err);
qd_status qd_sqlite_job_end_receiving(void *cls, int64_t id, qd_job_state state, const char *error,
                                      qd_err *err);
qd_status qd_sqlite_job_cancel_queued(void *cls, int64_t id, qd_err *err);
qd_status qd_sqlite_job_delete(void *cls, int64_t id, qd_err *err);
qd_status qd_sqlite_job_recover(void *cls, int max_attempts, int64_t **ids, size_t *n, qd_err *err);
qd_status qd_sqlite_job_outputs(void *cls, int64_t id, qd_output **out, size_t *n, qd_err *err);
qd_status qd_sqlite_job_report(void *cls, int64_t id, char **report, qd_err *err);
qd_status qd_sqlite_jobs_expiring(void *cls, int64_t before_ms, int keep, int64_t **ids, size_t *n,
                                  qd_err *err);
qd_status qd_sqlite_job_outputs_removed(void *cls, int64_t id, qd_err *err);
qd_status qd_sqlite_job_owners(void *cls, qd_job_owner_fn fn, void *ctx, qd_err *err);
qd_status qd_sqlite_job_counts(void *cls, int64_t counts[QD_JOB_STATE_COUNT], qd_err *err);
/* store_sqlite_tokens.c */
qd_status qd_sqlite_tokens_open(const char *path, const qd_db_tuning *tuning, void **cls,
                                qd_err *err);
void qd_sqlite_tokens_close(void *cls);
qd_status qd_sqlite_token_insert(void *cls, const qd_token_info *info,
                                 const uint8_t hash[QD_TOKEN_HASH_LEN], qd_err *err);
qd_status qd_sqlite_token_list(void *cls, qd_token_info **out, size_t *n, qd_err *err);
qd_status qd_sqlite_token_delete(void *cls, const char *name, qd_err *err);
qd_status qd_sqlite_token_any(void *cls, bool *any, qd_err *err);
qd_status qd_sqlite_token_lookup(void *cls, const uint8_t hash[QD_TOKEN_HASH_LEN], bool *found,
                                 qd_token_info *who, uint8_t stored[QD_TOKEN_HASH_LEN],
                                 qd_err *err);

#endif /* QD_STORE_SQLITE_H */
