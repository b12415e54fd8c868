/* store.h -- quantd's job store: the rows the daemon keeps (rule sets, jobs, their outputs and
 * reports) behind one interface with two engines (store_engine.h): SQLite, the default, a file in
 * the data directory opened as its owner (the SQLite layer, db.h: WAL, busy_timeout,
 * synchronous=FULL; then foreign keys) with the migrations in migrations/NNNN_name.sql (embedded
 * in the binary, applied in order inside one transaction, tracked with PRAGMA user_version); and
 * PostgreSQL through libpq, with its own migrations in migrations/postgresql/ applied once under
 * an advisory lock. One connection behind a mutex; every call is one short transaction.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STORE_H
#define QD_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db.h"
#include "status.h"

/* Now as unix ms (CLOCK_REALTIME). */
int64_t qd_now_ms(void);

typedef struct qd_store qd_store;

/* The engines, as the interface names them. */
typedef enum qd_store_kind {
    QD_STORE_SQLITE = 0, /* a database file (the default) */
    QD_STORE_POSTGRESQL, /* a libpq connection string */
    QD_STORE_KIND_COUNT
} qd_store_kind;
/* "sqlite", "postgresql" ("unknown" out of range). */
const char *qd_store_kind_name(qd_store_kind kind);

/* Job states, as stored and as the API spells them. */
typedef enum qd_job_state {
    QD_JOB_QUEUED = 0,
    QD_JOB_RUNNING,
    QD_JOB_SUCCEEDED,
    QD_JOB_FAILED,
    QD_JOB_CANCELLED,
    QD_JOB_RECEIVING, /* a checkpoint job waiting for the files its client PUTs (0007) */
    QD_JOB_STATE_COUNT
} qd_job_state;
const char *qd_job_state_name(qd_job_state s);
/* Parses "queued" ... "cancelled", "receiving"; false when unknown. */
bool qd_job_state_parse(const char *name, qd_job_state *out);

typedef struct qd_job {
    int64_t id; /* assigned by qd_store_job_insert, FIFO order */
    qd_job_state state;
    char *ruleset;     /* rule set name, or NULL when rules were given inline */
    char *rules;       /* the rule set JSON document ({"rules":[...]}) the job runs with */
    char *layout;      /* "native" | "compressed-tensors" */
    char *source_kind; /* "upload" | "path" */
    char *source_path; /* the uploaded file in the data dir, or the server-side path */
    char *stats_model; /* or NULL */
    int64_t created_ms, started_ms, finished_ms; /* unix ms; 0 = not yet */
    int64_t tensors_done, tensors_total, bytes_done, bytes_total;
    char *error;                /* or NULL */
    int attempts;               /* times the job was started */
    int64_t outputs_removed_ms; /* when retention removed its outputs; 0 = kept */
    char *unused_rules; /* JSON array of the rules that are the first match of no tensor, decided
                           when the job was planned; NULL for jobs stored before (0005) */
} qd_job;

typedef struct qd_output {
    char *name; /* file name inside the job's output directory */
    int64_t bytes;
    char sha256[65]; /* lowercase hex */
} qd_output;

/* Frees the strings of a job / of n outputs and the array; NULL is a no-op. */
void qd_job_clear(qd_job *j);
void qd_outputs_free(qd_output *o, size_t n);

/* Opens (creating) the database at path, sets WAL, db.h's default busy_timeout (5 s), foreign_keys,
 * and applies the pending migrations. A database newer than the binary (user_version above the last
 * migration) is refused. */
qd_status qd_store_open(const char *path, qd_store **out, qd_err *err);
/* qd_store_open with the connection's busy timeout from tuning (NULL: db.h's default; config
 * [storage] busy_timeout). */
qd_status qd_store_open_tuned(const char *path, const qd_db_tuning *tuning, qd_store **out,
                              qd_err *err);
/* Opens the store of engine kind at target. SQLite: target is the database file, as
 * qd_store_open_tuned. PostgreSQL: target is a libpq connection string (a postgresql:// URI or
 * keyword=value pairs); a password comes only through libpq's own mechanisms (the string,
 * PGPASSFILE, a service file) and never appears in an error, which names the server by its masked
 * string. The schema's pending migrations (migrations/postgresql/) are applied in one transaction
 * under an advisory lock, so that instances opening together apply them once; a database newer than
 * the binary is refused. tuning is SQLite's (NULL: the defaults; PostgreSQL ignores it). */
qd_status qd_store_open_engine(qd_store_kind kind, const char *target, const qd_db_tuning *tuning,
                               qd_store **out, qd_err *err);
void qd_store_close(qd_store *s);
qd_store_kind qd_store_kind_of(const qd_store *s);
/* The schema version after open, and the number of migrations the binary carries (for SQLite's
 * user_version; qd_store_migration_count_of for either engine). */
int qd_store_schema_version(qd_store *s);
int qd_store_migration_count(void);
int qd_store_migration_count_of(qd_store_kind kind);
/* A trivial query: the database answers (for /readyz). */
qd_status qd_store_ping(qd_store *s, qd_err *err);

/* ---- rule sets (the body is the validated {"rules":[...]} JSON text) --------------------------
 */
qd_status qd_store_ruleset_put(qd_store *s, const char *name, const char *body, bool *created,
                               qd_err *err);
/* *body is malloc'd; times in unix ms. */
qd_status qd_store_ruleset_get(qd_store *s, const char *name, char **body, int64_t *created_ms,
                               int64_t *updated_ms, qd_err *err);
/* A JSON array of {"name","created_at","updated_at"} (ISO-8601 UTC strings), by name. */
qd_status qd_store_ruleset_list(qd_store *s, json_t **out, qd_err *err);
qd_status qd_store_ruleset_delete(qd_store *s, const char *name, qd_err *err);

/* ---- jobs --------------------------------------------------------------------------------------
 */
/* Inserts j in state j->state (queued, or receiving for a checkpoint job whose files are still
 * to come), created now; sets j->id and j->created_ms. */
qd_status qd_store_job_insert(qd_store *s, qd_job *j, qd_err *err);
qd_status qd_store_job_get(qd_store *s, int64_t id, qd_job *out, qd_err *err);
/* Jobs with id > after_id (0: from the start), optionally in one state (state < 0: any), oldest
 * first, at most limit; *jobs is an array of *n jobs (qd_job_clear each, then free). */
qd_status qd_store_job_list(qd_store *s, int state, int64_t after_id, int limit, qd_job **jobs,
                            size_t *n, qd_err *err);
/* Atomically takes the oldest queued or receiving job: state running, started now, attempts + 1.
 * QD_NOT_FOUND when the queue is empty. */
qd_status qd_store_job_claim(qd_store *s, qd_job *out, qd_err *err);
qd_status qd_store_job_progress(qd_store *s, int64_t id, int64_t tensors_done,
                                int64_t tensors_total, int64_t bytes_done, int64_t bytes_total,
                                qd_err *err);
/* Ends a running job in one transaction: state (succeeded, failed or cancelled), finished now,
 * error (or NULL), the outputs and the report JSON text (or NULL). QD_CONFLICT when the job is
 * not running. */
qd_status qd_store_job_finish(qd_store *s, int64_t id, qd_job_state state, const char *error,
                              const qd_output *outputs, size_t n_outputs, const char *report,
                              qd_err *err);
/* running -> queued again (started 0, progress 0, attempts - 1): a job interrupted by a
 * graceful stop runs again from the start without counting the attempt. QD_CONFLICT when not
 * running. */
qd_status qd_store_job_requeue(qd_store *s, int64_t id, qd_err *err);
/* receiving -> queued with the plan's unused rules (JSON text): every input has arrived.
 * QD_CONFLICT when not receiving. */
qd_status qd_store_job_received(qd_store *s, int64_t id, const char *unused_rules, qd_err *err);
/* The job's unused rules (JSON text) when it has none yet: a checkpoint job run while its files
 * arrived was not planned before its run; its report tells them. */
qd_status qd_store_job_set_unused(qd_store *s, int64_t id, const char *unused_rules, qd_err *err);
/* receiving -> failed (error) or cancelled (finished now). QD_CONFLICT when not receiving. */
qd_status qd_store_job_end_receiving(qd_store *s, int64_t id, qd_job_state state, const char *error,
                                     qd_err *err);
/* queued -> cancelled (finished now). QD_CONFLICT when not queued. */
qd_status qd_store_job_cancel_queued(qd_store *s, int64_t id, qd_err *err);
/* Deletes a finished job (succeeded/failed/cancelled) with its outputs and report;
 * QD_CONFLICT when queued or running. */
qd_status qd_store_job_delete(qd_store *s, int64_t id, qd_err *err);
/* At start-up: every job left running by a dead process goes back to queued (it is retried from
 * the start) when its attempts < max_attempts, else to failed with error "interrupted". *ids
 * gets the ids of all of them (malloc'd, *n entries) so the caller can remove partial files. */
qd_status qd_store_job_recover(qd_store *s, int max_attempts, int64_t **ids, size_t *n,
                               qd_err *err);
qd_status qd_store_job_outputs(qd_store *s, int64_t id, qd_output **out, size_t *n, qd_err *err);
/* *report is malloc'd JSON text; QD_NOT_FOUND when the job has none. */
qd_status qd_store_job_report(qd_store *s, int64_t id, char **report, qd_err *err);
/* Retention: the succeeded jobs whose outputs are still kept and that ended before before_ms
 * (0: none by age) or are older than the `keep` newest succeeded jobs (0: no cap). */
qd_status qd_store_jobs_expiring(qd_store *s, int64_t before_ms, int keep, int64_t **ids, size_t *n,
                                 qd_err *err);
/* Records that the job's outputs are gone (now); QD_CONFLICT when it is not a succeeded job
 * that still had them. */
qd_status qd_store_job_outputs_removed(qd_store *s, int64_t id, qd_err *err);
/* One job as the start-up sweep sees it (janitor.c): what it may own in the data directory. */
typedef struct qd_job_owner {
    int64_t id;
    qd_job_state state;
    bool outputs_removed;    /* retention removed its outputs */
    const char *upload_path; /* source_path of an upload job (valid during the call), else NULL */
} qd_job_owner;
/* Called once per job; a status other than QD_OK stops the walk and is returned. */
typedef qd_status (*qd_job_owner_fn)(void *ctx, const qd_job_owner *job, qd_err *err);
/* Every job, in id order, in one read transaction (a snapshot). */
qd_status qd_store_job_owners(qd_store *s, qd_job_owner_fn fn, void *ctx, qd_err *err);
/* Number of jobs in each state. */
qd_status qd_store_job_counts(qd_store *s, int64_t counts[QD_JOB_STATE_COUNT], qd_err *err);

#endif /* QD_STORE_H */
