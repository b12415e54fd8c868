/* store_engine.h -- the one table of operations a store engine implements (the GNU Taler
 * exchange's database plugin is the model): the job store (rule sets, jobs, their outputs and
 * reports) and the tokens, each operation on the engine's own handle (`cls`). store.c and
 * store_tokens.c are the front that store.h and tokens.h promise: they validate arguments once for
 * every engine and call through this table. Two engines: SQLite (store_sqlite*.c; the default, a
 * file in the data directory) and PostgreSQL (store_pg*.c, libpq; several instances on one
 * database).
 *
 * Every operation is one short transaction of its own and follows store.h's contract for the
 * function of the same name: the same statuses (QD_NOT_FOUND, QD_CONFLICT, ...) and the same
 * ownership of what it returns. Arguments reach an engine already checked by the front (no NULL
 * rules, a final state where one is wanted, limits in range). Statements are prepared at open; an
 * error names the operation and never holds a password.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STORE_ENGINE_H
#define QD_STORE_ENGINE_H

#include "store.h"
#include "tokens.h"

/* A token's SHA-256, as stored. */
#define QD_TOKEN_HASH_LEN 32

typedef struct qd_store_ops {
    const char *name; /* "sqlite", "postgresql": how messages and tests name the engine */

    /* ---- the job store's connection ---- */
    /* Connects to target (a file path, a libpq connection string), applies the engine's pending
     * migrations (refusing a database newer than the binary) and prepares every statement. */
    qd_status (*open)(const char *target, const qd_db_tuning *tuning, void **cls, qd_err *err);
    void (*close)(void *cls);
    int (*schema_version)(void *cls);
    qd_status (*ping)(void *cls, qd_err *err);

    /* ---- rule sets ---- */
    qd_status (*ruleset_put)(void *cls, const char *name, const char *body, bool *created,
                             qd_err *err);
    qd_status (*ruleset_get)(void *cls, const char *name, char **body, int64_t *created_ms,
                             int64_t *updated_ms, qd_err *err);
    qd_status (*ruleset_list)(void *cls, json_t *arr, qd_err *err); /* appends to arr */
    qd_status (*ruleset_delete)(void *cls, const char *name, qd_err *err);

    /* ---- jobs ---- */
    qd_status (*job_insert)(void *cls, qd_job *j, qd_err *err);
    qd_status (*job_get)(void *cls, int64_t id, qd_job *out, qd_err *err);
    qd_status (*job_list)(void *cls, int state, int64_t after_id, int limit, qd_job **jobs,
                          size_t *n, qd_err *err);
    qd_status (*job_claim)(void *cls, qd_job *out, qd_err *err);
    qd_status (*job_progress)(void *cls, int64_t id, const int64_t v[4], qd_err *err);
    qd_status (*job_finish)(void *cls, int64_t id, qd_job_state state, const char *error,
                            const qd_output *outputs, size_t n_outputs, const char *report,
                            qd_err *err);
    qd_status (*job_requeue)(void *cls, int64_t id, qd_err *err);
    qd_status (*job_received)(void *cls, int64_t id, const char *unused_rules, qd_err *err);
    qd_status (*job_set_unused)(void *cls, int64_t id, const char *unused_rules, qd_err *err);
    qd_status (*job_end_receiving)(void *cls, int64_t id, qd_job_state state, const char *error,
                                   qd_err *err);
    qd_status (*job_cancel_queued)(void *cls, int64_t id, qd_err *err);
    qd_status (*job_delete)(void *cls, int64_t id, qd_err *err);
    qd_status (*job_recover)(void *cls, int max_attempts, int64_t **ids, size_t *n, qd_err *err);
    qd_status (*job_outputs)(void *cls, int64_t id, qd_output **out, size_t *n, qd_err *err);
    qd_status (*job_report)(void *cls, int64_t id, char **report, qd_err *err);
    /* keep: the cap, or 0 for none */
    qd_status (*jobs_expiring)(void *cls, int64_t before_ms, int keep, int64_t **ids, size_t *n,
                               qd_err *err);
    qd_status (*job_outputs_removed)(void *cls, int64_t id, qd_err *err);
    qd_status (*job_owners)(void *cls, qd_job_owner_fn fn, void *ctx, qd_err *err);
    qd_status (*job_counts)(void *cls, int64_t counts[QD_JOB_STATE_COUNT], qd_err *err);

    /* ---- tokens, on a connection of their own (checks never wait for the job store) ---- */
    qd_status (*tokens_open)(const char *target, const qd_db_tuning *tuning, void **cls,
                             qd_err *err);
    void (*tokens_close)(void *cls);
    /* QD_CONFLICT when the name or the hash is taken. info->expires_ms 0: never. */
    qd_status (*token_insert)(void *cls, const qd_token_info *info,
                              const uint8_t hash[QD_TOKEN_HASH_LEN], qd_err *err);
    qd_status (*token_list)(void *cls, qd_token_info **out, size_t *n, qd_err *err);
    /* QD_NOT_FOUND when there is no token of that name. */
    qd_status (*token_delete)(void *cls, const char *name, qd_err *err);
    qd_status (*token_any)(void *cls, bool *any, qd_err *err);
    /* The token stored under hash: *found, its row into *who and the hash as stored into stored
     * (the front compares it again in constant time). */
    qd_status (*token_lookup)(void *cls, const uint8_t hash[QD_TOKEN_HASH_LEN], bool *found,
                              qd_token_info *who, uint8_t stored[QD_TOKEN_HASH_LEN], qd_err *err);
} qd_store_ops;

/* The engine of kind (NULL out of range). */
const qd_store_ops *qd_store_engine_ops(qd_store_kind kind);

/* Appends {"name","created_at","updated_at"} (ISO-8601 UTC) to arr: one row of a rule set list,
 * built alike by every engine. */
qd_status qd_store_ruleset_append(json_t *arr, const char *name, int64_t created_ms,
                                  int64_t updated_ms, qd_err *err);

extern const qd_store_ops qd_store_sqlite_ops;
extern const qd_store_ops qd_store_pg_ops;

#endif /* QD_STORE_ENGINE_H */
