/* store_pg.h -- what the PostgreSQL engine's files (store_pg*.c) share and nobody else sees: the
 * engine's handle (one libpq connection behind a mutex, reconnected when it broke), the table of
 * named prepared statements, the helpers that run one statement or one transaction with checked
 * parameters and errors, the masking of connection strings, and the operations store_pg.c puts in
 * the engine's table (store_engine.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STORE_PG_H
#define QD_STORE_PG_H

#include <libpq-fe.h>
#include <pthread.h>

#include "store_engine.h"

/* Every statement the engine runs after open, prepared at connect as "q<id>" (a typo in SQL fails
 * the open, not a request). Each file lists its own SQL beside the code that uses it. */
typedef enum qd_pg_query {
    /* store_pg.c */
    QD_PGQ_PING,
    /* store_pg_rulesets.c */
    QD_PGQ_RS_UPSERT,
    QD_PGQ_RS_GET,
    QD_PGQ_RS_LIST,
    QD_PGQ_RS_DELETE,
    /* store_pg_jobs.c */
    QD_PGQ_JOB_INSERT,
    QD_PGQ_JOB_GET,
    QD_PGQ_JOB_STATE,
    QD_PGQ_JOB_LIST_ALL,
    QD_PGQ_JOB_LIST_STATE,
    QD_PGQ_JOB_CLAIM,
    QD_PGQ_JOB_PROGRESS,
    QD_PGQ_JOB_FINISH,
    QD_PGQ_JOB_REQUEUE_ONE,
    QD_PGQ_OUTPUT_INSERT,
    QD_PGQ_REPORT_INSERT,
    QD_PGQ_JOB_CANCEL,
    QD_PGQ_JOB_RECEIVED,
    QD_PGQ_JOB_END_RECEIVING,
    QD_PGQ_JOB_SET_UNUSED,
    QD_PGQ_JOB_DELETE,
    QD_PGQ_JOB_RUNNING_IDS,
    QD_PGQ_JOB_REQUEUE,
    QD_PGQ_JOB_INTERRUPT,
    QD_PGQ_OUTPUTS,
    QD_PGQ_REPORT,
    QD_PGQ_COUNTS,
    QD_PGQ_JOB_EXPIRING,
    QD_PGQ_JOB_OUTPUTS_REMOVED,
    QD_PGQ_JOB_OWNERS,
    /* store_pg_tokens.c */
    QD_PGQ_TOK_CHECK,
    QD_PGQ_TOK_ANY,
    QD_PGQ_TOK_LIST,
    QD_PGQ_TOK_INSERT,
    QD_PGQ_TOK_DELETE,
    QD_PGQ_COUNT
} qd_pg_query;

typedef struct qd_pg_stmt_def {
    qd_pg_query id;
    const char *sql;
} qd_pg_stmt_def;

/* Each file's statements (store_pg.c prepares them all at every connect). */
extern const qd_pg_stmt_def qd_pg_ruleset_sql[], qd_pg_job_sql[], qd_pg_token_sql[];
extern const size_t qd_pg_ruleset_sql_n, qd_pg_job_sql_n, qd_pg_token_sql_n;

typedef struct qd_pg {
    PGconn *conn;
    pthread_mutex_t mu; /* held for the whole of every call: one transaction at a time */
    char *where;        /* the masked connection string: how messages name the server */
    int version;        /* the schema version after the migrations */
    char sqlstate[6];   /* of the last failed statement, "" when none */
} qd_pg;

/* Connects to target (a libpq connection string) and prepares every statement; migrate: also
 * applies the pending migrations first (the job store's open; the tokens' connection only checks
 * that the schema is this binary's). A failure names the masked server and never the password. */
qd_status qd_pg_connect(const char *target, bool migrate, qd_pg **out, qd_err *err);
void qd_pg_disconnect(qd_pg *p); /* NULL is a no-op */

/* Runs statement q with parameters from types (one letter each: 't' a const char * or NULL, 'i'
 * an int64_t -- cast literals, 'b' a QD_TOKEN_HASH_LEN-byte hash sent as bytea); *res (may be
 * NULL: cleared here) gets the result, the caller PQclears it. Errors name op: a constraint the
 * database refused is QD_INVALID, everything else QD_DB; p->sqlstate keeps the failure's SQLSTATE
 * ("" after a success or a lost connection). */
qd_status qd_pg_run(qd_pg *p, qd_pg_query q, const char *op, qd_err *err, PGresult **res,
                    const char *types, ...);
/* Rows an UPDATE or DELETE result changed. */
int64_t qd_pg_changes(const PGresult *r);
/* Cell (row, col) as an int64 (NULL reads 0) / as a malloc'd string (NULL for SQL NULL). */
int64_t qd_pg_int(const PGresult *r, int row, int col);
qd_status qd_pg_text(const PGresult *r, int row, int col, char **out, qd_err *err);

/* One call under the mutex: reconnects a broken connection first, then fn inside BEGIN ... COMMIT
 * when txn (ROLLBACK when fn or the commit fails: a failed call changes nothing), else fn alone
 * (one statement: its own transaction). fn's status is returned. */
typedef qd_status (*qd_pg_fn)(qd_pg *p, void *ctx, qd_err *err);
qd_status qd_pg_call(qd_pg *p, bool txn, qd_pg_fn fn, void *ctx, qd_err *err);

/* ---- connection strings (store_pg_conninfo.c) ---- */
/* A description of target for messages, malloc'd: its keywords but the password as
 * "key=value" pairs (host, port, dbname, user, ...), or "(a connection string libpq cannot
 * parse)" when it does not parse. NULL only when out of memory. */
char *qd_pg_mask(const char *target);
/* Copies msg into out (cap bytes) with every occurrence of target's password replaced by
 * "***" (a password found by its keyword, password=, or in a URI's user:password@). */
void qd_pg_redact(const char *target, const char *msg, char *out, size_t cap);

/* ---- the engine's operations ---- */
qd_status qd_pg_ruleset_put(void *cls, const char *name, const char *body, bool *created,
                            qd_err *err);
qd_status qd_pg_ruleset_get(void *cls, const char *name, char **body, int64_t *created_ms,
                            int64_t *updated_ms, qd_err *err);
qd_status qd_pg_ruleset_list(void *cls, json_t *arr, qd_err *err);
qd_status qd_pg_ruleset_delete(void *cls, const char *name, qd_err *err);
qd_status qd_pg_job_insert(void *cls, qd_job *j, qd_err *err);
qd_status qd_pg_job_get(void *cls, int64_t id, qd_job *out, qd_err *err);
qd_status qd_pg_job_list(void *cls, int state, int64_t after_id, int limit, qd_job **jobs,
                         size_t *n, qd_err *err);
qd_status qd_pg_job_claim(void *cls, qd_job *out, qd_err *err);
qd_status qd_pg_job_progress(void *cls, int64_t id, const int64_t v[4], qd_err *err);
qd_status qd_pg_job_finish(void *cls, int64_t id, qd_job_state state, const char *error,
                           const qd_output *outputs, size_t n_outputs, const char *report,
                           qd_err *err);
qd_status qd_pg_job_requeue(void *cls, int64_t id, qd_err *err);
qd_status qd_pg_job_received(void *cls, int64_t id, const char *unused_rules, qd_err *err);
qd_status qd_pg_job_set_unused(void *cls, int64_t id, const char *unused_rules, qd_err *err);
qd_status qd_pg_job_end_receiving(void *cls, int64_t id, qd_job_state state, const char *error,
                                  qd_err *err);
qd_status qd_pg_job_cancel_queued(void *cls, int64_t id, qd_err *err);
qd_status qd_pg_job_delete(void *cls, int64_t id, qd_err *err);
qd_status qd_pg_job_recover(void *cls, int max_attempts, int64_t **ids, size_t *n, qd_err *err);
qd_status qd_pg_job_outputs(void *cls, int64_t id, qd_output **out, size_t *n, qd_err *err);
qd_status qd_pg_job_report(void *cls, int64_t id, char **report, qd_err *err);
qd_status qd_pg_jobs_expiring(void *cls, int64_t before_ms, int keep, int64_t **ids, size_t *n,
                              qd_err *err);
qd_status qd_pg_job_outputs_removed(void *cls, int64_t id, qd_err *err);
qd_status qd_pg_job_owners(void *cls, qd_job_owner_fn fn, void *ctx, qd_err *err);
qd_status qd_pg_job_counts(void *cls, int64_t counts[QD_JOB_STATE_COUNT], qd_err *err);
qd_status qd_pg_token_insert(void *cls, const qd_token_info *info,
                             const uint8_t hash[QD_TOKEN_HASH_LEN], qd_err *err);
qd_status qd_pg_token_list(void *cls, qd_token_info **out, size_t *n, qd_err *err);
qd_status qd_pg_token_delete(void *cls, const char *name, qd_err *err);
qd_status qd_pg_token_any(void *cls, bool *any, qd_err *err);
qd_status qd_pg_token_lookup(void *cls, const uint8_t hash[QD_TOKEN_HASH_LEN], bool *found,
                             qd_token_info *who, uint8_t stored[QD_TOKEN_HASH_LEN], qd_err *err);

#endif /* QD_STORE_PG_H */
