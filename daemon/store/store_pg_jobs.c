/* store_pg_jobs.c -- the PostgreSQL engine's jobs: the FIFO queue (insert, a claim that skips rows
 * another instance has locked), progress, the one transaction that ends a job with its outputs
 * and report, cancel and delete guarded by state, requeue after a graceful stop, recovery of jobs
 * a dead process left running, and the reads behind GET /v1/jobs. The same rules as the SQLite
 * engine's store_sqlite_jobs.c, statement for statement.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "store_pg.h"

/* The column order read_job expects. */
#define JOB_COLS                                                                                   \
    "id, state, ruleset, rules, layout, source_kind, source_path, stats_model, created_ms, "       \
    "started_ms, finished_ms, tensors_done, tensors_total, bytes_done, bytes_total, error, "       \
    "attempts, outputs_removed_ms, unused_rules"

const qd_pg_stmt_def qd_pg_job_sql[] = {
    {QD_PGQ_JOB_INSERT, "INSERT INTO jobs (state, ruleset, rules, layout, source_kind, "
                        "source_path, stats_model, created_ms, unused_rules) "
                        "VALUES ($9, $1, $2, $3, $4, $5, $6, $7, $8) RETURNING id"},
    {QD_PGQ_JOB_GET, "SELECT " JOB_COLS " FROM jobs WHERE id = $1"},
    {QD_PGQ_JOB_STATE, "SELECT state FROM jobs WHERE id = $1"},
    {QD_PGQ_JOB_LIST_ALL, "SELECT " JOB_COLS " FROM jobs WHERE id > $1 ORDER BY id LIMIT $2"},
    {QD_PGQ_JOB_LIST_STATE,
     "SELECT " JOB_COLS " FROM jobs WHERE state = $2 AND id > $1 ORDER BY id LIMIT $3"},
    /* The oldest claimable job becomes running; a row another claimer holds is skipped, not
     * waited for, so claimers on several connections never serialize on one row. */
    {QD_PGQ_JOB_CLAIM,
     "UPDATE jobs SET state = 'running', started_ms = $1, attempts = attempts + 1, "
     "finished_ms = NULL, error = NULL, tensors_done = 0, tensors_total = 0, "
     "bytes_done = 0, bytes_total = 0 "
     "WHERE id = (SELECT id FROM jobs WHERE state IN ('queued', 'receiving') "
     "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
     "RETURNING " JOB_COLS},
    {QD_PGQ_JOB_PROGRESS, "UPDATE jobs SET tensors_done = $2, tensors_total = $3, "
                          "bytes_done = $4, bytes_total = $5 WHERE id = $1 AND state = 'running'"},
    {QD_PGQ_JOB_FINISH, "UPDATE jobs SET state = $2, finished_ms = $3, error = $4 "
                        "WHERE id = $1 AND state = 'running'"},
    {QD_PGQ_JOB_REQUEUE_ONE,
     "UPDATE jobs SET state = 'queued', started_ms = NULL, tensors_done = 0, tensors_total = 0, "
     "bytes_done = 0, bytes_total = 0, attempts = greatest(attempts - 1, 0) "
     "WHERE id = $1 AND state = 'running'"},
    {QD_PGQ_OUTPUT_INSERT,
     "INSERT INTO outputs (job_id, name, bytes, sha256) VALUES ($1, $2, $3, $4)"},
    {QD_PGQ_REPORT_INSERT, "INSERT INTO reports (job_id, body) VALUES ($1, $2)"},
    {QD_PGQ_JOB_CANCEL, "UPDATE jobs SET state = 'cancelled', finished_ms = $2 "
                        "WHERE id = $1 AND state = 'queued'"},
    {QD_PGQ_JOB_RECEIVED, "UPDATE jobs SET state = 'queued', unused_rules = $2 "
                          "WHERE id = $1 AND state = 'receiving'"},
    {QD_PGQ_JOB_SET_UNUSED,
     "UPDATE jobs SET unused_rules = $2 WHERE id = $1 AND unused_rules IS NULL"},
    {QD_PGQ_JOB_END_RECEIVING, "UPDATE jobs SET state = $2, finished_ms = $3, error = $4 "
                               "WHERE id = $1 AND state = 'receiving'"},
    {QD_PGQ_JOB_DELETE, /* outputs and reports go with it: ON DELETE CASCADE */
     "DELETE FROM jobs WHERE id = $1 AND state IN ('succeeded', 'failed', 'cancelled')"},
    {QD_PGQ_JOB_RUNNING_IDS, "SELECT id FROM jobs WHERE state = 'running' ORDER BY id"},
    {QD_PGQ_JOB_REQUEUE, "UPDATE jobs SET state = 'queued', started_ms = NULL, tensors_done = 0, "
                         "tensors_total = 0, bytes_done = 0, bytes_total = 0 "
                         "WHERE state = 'running' AND attempts < $1"},
    {QD_PGQ_JOB_INTERRUPT,
     "UPDATE jobs SET state = 'failed', finished_ms = $1, error = 'interrupted' "
     "WHERE state = 'running'"},
    {QD_PGQ_OUTPUTS, "SELECT name, bytes, sha256 FROM outputs WHERE job_id = $1 "
                     "ORDER BY name COLLATE \"C\""},
    {QD_PGQ_REPORT, "SELECT body FROM reports WHERE job_id = $1"},
    {QD_PGQ_COUNTS, "SELECT state, count(*) FROM jobs GROUP BY state"},
    /* Retention: succeeded jobs still holding outputs that ended before $1 (0: none by age), or
     * that are not among the $2 newest succeeded ones (0: no cap). */
    {QD_PGQ_JOB_EXPIRING,
     "SELECT id FROM jobs WHERE state = 'succeeded' AND outputs_removed_ms IS NULL AND "
     "(finished_ms < $1 OR ($2::bigint > 0 AND id < coalesce((SELECT min(k.id) FROM (SELECT id "
     "FROM jobs WHERE state = 'succeeded' ORDER BY id DESC LIMIT $2) AS k), 0))) ORDER BY id"},
    {QD_PGQ_JOB_OUTPUTS_REMOVED, "UPDATE jobs SET outputs_removed_ms = $2 "
                                 "WHERE id = $1 AND state = 'succeeded' AND "
                                 "outputs_removed_ms IS NULL"},
    {QD_PGQ_JOB_OWNERS, "SELECT id, state, outputs_removed_ms IS NOT NULL, "
                        "CASE WHEN source_kind = 'upload' THEN source_path END FROM jobs "
                        "ORDER BY id"},
};
const size_t qd_pg_job_sql_n = sizeof qd_pg_job_sql / sizeof qd_pg_job_sql[0];

static qd_status nomem(qd_err *err)
{
    return qd_fail(err, QD_NOMEM, "out of memory");
}

/* A job a failed call leaves behind: nothing to free, nothing to read. */
static void wipe(qd_job *j)
{
    qd_job_clear(j);
    memset(j, 0, sizeof *j);
}

/* Row i of r (JOB_COLS) into *j; on failure *j is left cleared. */
static qd_status read_job(const PGresult *r, int i, qd_job *j, qd_err *err)
{
    memset(j, 0, sizeof *j);
    j->id = qd_pg_int(r, i, 0);
    if (!qd_job_state_parse(PQgetvalue(r, i, 1), &j->state))
        return qd_fail(err, QD_DB, "job %lld: unreadable state", (long long)j->id);
    char **texts[] = {&j->ruleset,     &j->rules,       &j->layout,
                      &j->source_kind, &j->source_path, &j->stats_model};
    int64_t *nums[] = {&j->created_ms,    &j->started_ms, &j->finished_ms, &j->tensors_done,
                       &j->tensors_total, &j->bytes_done, &j->bytes_total};
    qd_status st = QD_OK;
    for (int c = 0; st == QD_OK && c < 6; c++) st = qd_pg_text(r, i, 2 + c, texts[c], err);
    for (int c = 0; c < 7; c++) *nums[c] = qd_pg_int(r, i, 8 + c); /* NULL reads 0 */
    if (st == QD_OK) st = qd_pg_text(r, i, 15, &j->error, err);
    j->attempts = (int)qd_pg_int(r, i, 16);
    j->outputs_removed_ms = qd_pg_int(r, i, 17);
    if (st == QD_OK) st = qd_pg_text(r, i, 18, &j->unused_rules, err);
    if (st != QD_OK) wipe(j);
    return st;
}

/* A state-guarded UPDATE or DELETE changed nothing: the job is missing, or not `want`. */
static qd_status miss(qd_pg *p, int64_t id, const char *want, qd_err *err)
{
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_JOB_STATE, "read job state", err, &r, "i", id);
    if (st == QD_OK)
        st = PQntuples(r) == 0 ? qd_fail(err, QD_NOT_FOUND, "job %lld not found", (long long)id)
                               : qd_fail(err, QD_CONFLICT, "job %lld is %s, not %s", (long long)id,
                                         PQgetvalue(r, 0, 0), want);
    PQclear(r);
    return st;
}

/* Runs a state-guarded change of one job (its parameters: id then types' others); QD_OK when it
 * changed a row, else miss's answer. */
typedef struct guarded_ctx {
    qd_pg_query q;
    const char *op, *want, *text;
    int64_t id, num;
    const char *types; /* "i", "ii", "it" or "itit" (state name, now, text) */
    qd_job_state state;
} guarded_ctx;

static qd_status guarded_fn(qd_pg *p, void *arg, qd_err *err)
{
    guarded_ctx *c = arg;
    PGresult *r = NULL;
    qd_status st;
    if (strcmp(c->types, "itit") == 0)
        st = qd_pg_run(p, c->q, c->op, err, &r, "itit", c->id, qd_job_state_name(c->state),
                       qd_now_ms(), c->text);
    else if (strcmp(c->types, "it") == 0)
        st = qd_pg_run(p, c->q, c->op, err, &r, "it", c->id, c->text);
    else if (strcmp(c->types, "ii") == 0)
        st = qd_pg_run(p, c->q, c->op, err, &r, "ii", c->id, c->num);
    else
        st = qd_pg_run(p, c->q, c->op, err, &r, "i", c->id);
    bool none = st == QD_OK && qd_pg_changes(r) == 0;
    PQclear(r);
    return none && c->want ? miss(p, c->id, c->want, err) : st;
}

/* ---- insert, get, list ------------------------------------------------------------------------
 */

static qd_status insert_fn(qd_pg *p, void *arg, qd_err *err)
{
    qd_job *j = arg;
    PGresult *r = NULL;
    j->created_ms = qd_now_ms();
    qd_status st = qd_pg_run(
        p, QD_PGQ_JOB_INSERT, "insert job", err, &r, "ttttttitt", j->ruleset, j->rules, j->layout,
        j->source_kind, j->source_path, j->stats_model, j->created_ms, j->unused_rules,
        qd_job_state_name(j->state == QD_JOB_RECEIVING ? QD_JOB_RECEIVING : QD_JOB_QUEUED));
    if (st == QD_OK && PQntuples(r) != 1) st = qd_fail(err, QD_DB, "insert job: no id returned");
    if (st == QD_OK) j->id = qd_pg_int(r, 0, 0);
    PQclear(r);
    return st;
}

qd_status qd_pg_job_insert(void *cls, qd_job *j, qd_err *err)
{
    qd_status st = qd_pg_call(cls, false, insert_fn, j, err);
    if (st == QD_OK && j->state != QD_JOB_RECEIVING) j->state = QD_JOB_QUEUED;
    return st;
}

typedef struct get_ctx {
    int64_t id;
    qd_job *out;
} get_ctx;

static qd_status get_fn(qd_pg *p, void *arg, qd_err *err)
{
    get_ctx *c = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_JOB_GET, "get job", err, &r, "i", c->id);
    if (st == QD_OK && PQntuples(r) == 0)
        st = qd_fail(err, QD_NOT_FOUND, "job %lld not found", (long long)c->id);
    if (st == QD_OK) st = read_job(r, 0, c->out, err);
    PQclear(r);
    return st;
}

qd_status qd_pg_job_get(void *cls, int64_t id, qd_job *out, qd_err *err)
{
    memset(out, 0, sizeof *out);
    get_ctx c = {id, out};
    return qd_pg_call(cls, false, get_fn, &c, err);
}

typedef struct list_ctx {
    int state, limit;
    int64_t after;
    qd_job *jobs;
    size_t n;
} list_ctx;

static qd_status list_fn(qd_pg *p, void *arg, qd_err *err)
{
    list_ctx *c = arg;
    PGresult *r = NULL;
    qd_status st = c->state < 0
                       ? qd_pg_run(p, QD_PGQ_JOB_LIST_ALL, "list jobs", err, &r, "ii", c->after,
                                   (int64_t)c->limit)
                       : qd_pg_run(p, QD_PGQ_JOB_LIST_STATE, "list jobs", err, &r, "iti", c->after,
                                   qd_job_state_name((qd_job_state)c->state), (int64_t)c->limit);
    int rows = st == QD_OK ? PQntuples(r) : 0;
    if (rows > 0 && !(c->jobs = calloc((size_t)rows, sizeof *c->jobs))) st = nomem(err);
    for (int i = 0; st == QD_OK && i < rows; i++) {
        st = read_job(r, i, &c->jobs[c->n], err);
        if (st == QD_OK) c->n++;
    }
    PQclear(r);
    return st;
}

qd_status qd_pg_job_list(void *cls, int state, int64_t after_id, int limit, qd_job **jobs,
                         size_t *n, qd_err *err)
{
    list_ctx c = {state, limit, after_id, NULL, 0};
    qd_status st = qd_pg_call(cls, false, list_fn, &c, err);
    if (st != QD_OK) {
        for (size_t i = 0; i < c.n; i++) qd_job_clear(&c.jobs[i]);
        free(c.jobs);
        return st;
    }
    *jobs = c.jobs;
    *n = c.n;
    return QD_OK;
}

/* ---- the queue: claim, progress, finish -------------------------------------------------------
 */

static qd_status claim_fn(qd_pg *p, void *arg, qd_err *err)
{
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_JOB_CLAIM, "claim job", err, &r, "i", qd_now_ms());
    if (st == QD_OK && PQntuples(r) == 0) st = qd_fail(err, QD_NOT_FOUND, "no queued job");
    if (st == QD_OK) st = read_job(r, 0, arg, err);
    PQclear(r);
    return st;
}

qd_status qd_pg_job_claim(void *cls, qd_job *out, qd_err *err)
{
    memset(out, 0, sizeof *out);
    return qd_pg_call(cls, false, claim_fn, out, err);
}

typedef struct progress_ctx {
    int64_t id;
    const int64_t *v;
} progress_ctx;

static qd_status progress_fn(qd_pg *p, void *arg, qd_err *err)
{
    progress_ctx *c = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_JOB_PROGRESS, "job progress", err, &r, "iiiii", c->id,
                             c->v[0], c->v[1], c->v[2], c->v[3]);
    bool none = st == QD_OK && qd_pg_changes(r) == 0;
    PQclear(r);
    return none ? miss(p, c->id, "running", err) : st;
}

qd_status qd_pg_job_progress(void *cls, int64_t id, const int64_t v[4], qd_err *err)
{
    progress_ctx c = {id, v};
    return qd_pg_call(cls, false, progress_fn, &c, err);
}

typedef struct finish_ctx {
    int64_t id;
    qd_job_state state;
    const char *error, *report;
    const qd_output *outputs;
    size_t n;
} finish_ctx;

static qd_status finish_fn(qd_pg *p, void *arg, qd_err *err)
{
    finish_ctx *c = arg;
    guarded_ctx g = {QD_PGQ_JOB_FINISH, "finish job", "running", c->error, c->id, 0, "itit",
                     c->state};
    qd_status st = guarded_fn(p, &g, err);
    for (size_t i = 0; st == QD_OK && i < c->n; i++) {
        const qd_output *o = &c->outputs[i];
        st = qd_pg_run(p, QD_PGQ_OUTPUT_INSERT, "record job output", err, NULL, "itit", c->id,
                       o->name, o->bytes, o->sha256);
    }
    if (st == QD_OK && c->report)
        st = qd_pg_run(p, QD_PGQ_REPORT_INSERT, "record job report", err, NULL, "it", c->id,
                       c->report);
    return st;
}

qd_status qd_pg_job_finish(void *cls, int64_t id, qd_job_state state, const char *error,
                           const qd_output *outputs, size_t n_outputs, const char *report,
                           qd_err *err)
{
    finish_ctx c = {id, state, error, report, outputs, n_outputs};
    return qd_pg_call(cls, true, finish_fn, &c, err);
}

/* ---- requeue, cancel, receive, delete ---------------------------------------------------------
 */

static qd_status guarded(void *cls, guarded_ctx g, qd_err *err)
{
    return qd_pg_call(cls, false, guarded_fn, &g, err);
}

qd_status qd_pg_job_requeue(void *cls, int64_t id, qd_err *err)
{
    return guarded(cls,
                   (guarded_ctx){QD_PGQ_JOB_REQUEUE_ONE, "requeue job", "running", NULL, id, 0, "i",
                                 QD_JOB_QUEUED},
                   err);
}

qd_status qd_pg_job_received(void *cls, int64_t id, const char *unused_rules, qd_err *err)
{
    return guarded(cls,
                   (guarded_ctx){QD_PGQ_JOB_RECEIVED, "job received", "receiving", unused_rules, id,
                                 0, "it", QD_JOB_QUEUED},
                   err);
}

qd_status qd_pg_job_set_unused(void *cls, int64_t id, const char *unused_rules, qd_err *err)
{
    /* no row changed: the job already has its unused rules (or is gone), as SQLite's */
    return guarded(cls,
                   (guarded_ctx){QD_PGQ_JOB_SET_UNUSED, "set unused rules", NULL, unused_rules, id,
                                 0, "it", QD_JOB_QUEUED},
                   err);
}

qd_status qd_pg_job_end_receiving(void *cls, int64_t id, qd_job_state state, const char *error,
                                  qd_err *err)
{
    return guarded(cls,
                   (guarded_ctx){QD_PGQ_JOB_END_RECEIVING, "end receiving job", "receiving", error,
                                 id, 0, "itit", state},
                   err);
}

qd_status qd_pg_job_cancel_queued(void *cls, int64_t id, qd_err *err)
{
    return guarded(cls,
                   (guarded_ctx){QD_PGQ_JOB_CANCEL, "cancel job", "queued", NULL, id, qd_now_ms(),
                                 "ii", QD_JOB_CANCELLED},
                   err);
}

qd_status qd_pg_job_delete(void *cls, int64_t id, qd_err *err)
{
    return guarded(
        cls,
        (guarded_ctx){QD_PGQ_JOB_DELETE, "delete job", "finished", NULL, id, 0, "i", QD_JOB_QUEUED},
        err);
}

qd_status qd_pg_job_outputs_removed(void *cls, int64_t id, qd_err *err)
{
    return guarded(cls,
                   (guarded_ctx){QD_PGQ_JOB_OUTPUTS_REMOVED, "record removed outputs",
                                 "succeeded with outputs", NULL, id, qd_now_ms(), "ii",
                                 QD_JOB_SUCCEEDED},
                   err);
}

/* ---- id lists: recovery and retention ---------------------------------------------------------
 */

/* The first column of every row of r as ids (malloc'd, *n entries). */
static qd_status read_ids(const PGresult *r, int64_t **ids, size_t *n, qd_err *err)
{
    int rows = PQntuples(r);
    *ids = NULL;
    *n = 0;
    if (rows == 0) return QD_OK;
    if (!(*ids = malloc((size_t)rows * sizeof **ids))) return nomem(err);
    for (int i = 0; i < rows; i++) (*ids)[i] = qd_pg_int(r, i, 0);
    *n = (size_t)rows;
    return QD_OK;
}

typedef struct ids_ctx {
    int64_t a, b; /* recovery: max_attempts; retention: before_ms, keep */
    int64_t *ids;
    size_t n;
} ids_ctx;

static qd_status recover_fn(qd_pg *p, void *arg, qd_err *err)
{
    ids_ctx *c = arg;
    const char *op = "recover jobs";
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_JOB_RUNNING_IDS, op, err, &r, "");
    if (st == QD_OK) st = read_ids(r, &c->ids, &c->n, err);
    PQclear(r);
    /* Retry first; whatever is still running has used up its attempts. */
    if (st == QD_OK) st = qd_pg_run(p, QD_PGQ_JOB_REQUEUE, op, err, NULL, "i", c->a);
    if (st == QD_OK) st = qd_pg_run(p, QD_PGQ_JOB_INTERRUPT, op, err, NULL, "i", qd_now_ms());
    return st;
}

qd_status qd_pg_job_recover(void *cls, int max_attempts, int64_t **ids, size_t *n, qd_err *err)
{
    ids_ctx c = {max_attempts, 0, NULL, 0};
    qd_status st = qd_pg_call(cls, true, recover_fn, &c, err);
    if (st != QD_OK) {
        free(c.ids);
        return st;
    }
    *ids = c.ids;
    *n = c.n;
    return QD_OK;
}

static qd_status expiring_fn(qd_pg *p, void *arg, qd_err *err)
{
    ids_ctx *c = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_JOB_EXPIRING, "list job ids", err, &r, "ii", c->a, c->b);
    if (st == QD_OK) st = read_ids(r, &c->ids, &c->n, err);
    PQclear(r);
    return st;
}

qd_status qd_pg_jobs_expiring(void *cls, int64_t before_ms, int keep, int64_t **ids, size_t *n,
                              qd_err *err)
{
    ids_ctx c = {before_ms, keep, NULL, 0};
    qd_status st = qd_pg_call(cls, false, expiring_fn, &c, err);
    *ids = c.ids;
    *n = c.n;
    return st;
}

/* ---- outputs, report, counts, owners ----------------------------------------------------------
 */

typedef struct outputs_ctx {
    int64_t id;
    qd_output *o;
    size_t n;
} outputs_ctx;

static qd_status read_outputs(const PGresult *r, outputs_ctx *c, qd_err *err)
{
    int rows = PQntuples(r);
    if (rows > 0 && !(c->o = calloc((size_t)rows, sizeof *c->o))) return nomem(err);
    for (int i = 0; i < rows; i++) {
        const char *sha = PQgetvalue(r, i, 2);
        if (strlen(sha) != 64) return qd_fail(err, QD_DB, "job output: unreadable sha256");
        memcpy(c->o[i].sha256, sha, 65);
        c->o[i].bytes = qd_pg_int(r, i, 1);
        qd_status st = qd_pg_text(r, i, 0, &c->o[i].name, err);
        if (st != QD_OK) return st;
        c->n++;
    }
    return QD_OK;
}

static qd_status outputs_fn(qd_pg *p, void *arg, qd_err *err)
{
    outputs_ctx *c = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_JOB_STATE, "job outputs", err, &r, "i", c->id);
    if (st == QD_OK && PQntuples(r) == 0)
        st = qd_fail(err, QD_NOT_FOUND, "job %lld not found", (long long)c->id);
    PQclear(r);
    r = NULL;
    if (st == QD_OK) st = qd_pg_run(p, QD_PGQ_OUTPUTS, "job outputs", err, &r, "i", c->id);
    if (st == QD_OK) st = read_outputs(r, c, err);
    PQclear(r);
    return st;
}

qd_status qd_pg_job_outputs(void *cls, int64_t id, qd_output **out, size_t *n, qd_err *err)
{
    outputs_ctx c = {id, NULL, 0};
    qd_status st = qd_pg_call(cls, true, outputs_fn, &c, err);
    if (st != QD_OK) {
        qd_outputs_free(c.o, c.n);
        return st;
    }
    *out = c.o;
    *n = c.n;
    return QD_OK;
}

typedef struct report_ctx {
    int64_t id;
    char **report;
} report_ctx;

static qd_status report_fn(qd_pg *p, void *arg, qd_err *err)
{
    report_ctx *c = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_REPORT, "job report", err, &r, "i", c->id);
    bool found = st == QD_OK && PQntuples(r) == 1;
    if (found) st = qd_pg_text(r, 0, 0, c->report, err);
    PQclear(r);
    if (st != QD_OK || found) return st;
    r = NULL;
    st = qd_pg_run(p, QD_PGQ_JOB_STATE, "job report", err, &r, "i", c->id);
    bool job = st == QD_OK && PQntuples(r) == 1;
    PQclear(r);
    if (st != QD_OK) return st;
    return job ? qd_fail(err, QD_NOT_FOUND, "job %lld has no report", (long long)c->id)
               : qd_fail(err, QD_NOT_FOUND, "job %lld not found", (long long)c->id);
}

qd_status qd_pg_job_report(void *cls, int64_t id, char **report, qd_err *err)
{
    report_ctx c = {id, report};
    qd_status st = qd_pg_call(cls, true, report_fn, &c, err);
    if (st != QD_OK) {
        free(*report);
        *report = NULL;
    }
    return st;
}

static qd_status counts_fn(qd_pg *p, void *arg, qd_err *err)
{
    int64_t *counts = arg;
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_COUNTS, "count jobs", err, &r, "");
    for (int i = 0; st == QD_OK && i < PQntuples(r); i++) {
        qd_job_state state;
        if (!qd_job_state_parse(PQgetvalue(r, i, 0), &state))
            st = qd_fail(err, QD_DB, "count jobs: unreadable state");
        else
            counts[state] = qd_pg_int(r, i, 1);
    }
    PQclear(r);
    return st;
}

qd_status qd_pg_job_counts(void *cls, int64_t counts[QD_JOB_STATE_COUNT], qd_err *err)
{
    return qd_pg_call(cls, false, counts_fn, counts, err);
}

typedef struct owners_ctx {
    qd_job_owner_fn fn;
    void *ctx;
} owners_ctx;

static qd_status owners_fn(qd_pg *p, void *arg, qd_err *err)
{
    owners_ctx *c = arg;
    const char *op = "list job owners";
    PGresult *r = NULL;
    qd_status st = qd_pg_run(p, QD_PGQ_JOB_OWNERS, op, err, &r, "");
    for (int i = 0; st == QD_OK && i < PQntuples(r); i++) {
        qd_job_owner o = {.id = qd_pg_int(r, i, 0),
                          .outputs_removed = strcmp(PQgetvalue(r, i, 2), "t") == 0,
                          .upload_path = PQgetisnull(r, i, 3) ? NULL : PQgetvalue(r, i, 3)};
        if (!qd_job_state_parse(PQgetvalue(r, i, 1), &o.state))
            st = qd_fail(err, QD_DB, "%s: job %lld has an unreadable state", op, (long long)o.id);
        else
            st = c->fn(c->ctx, &o, err);
    }
    PQclear(r);
    return st;
}

qd_status qd_pg_job_owners(void *cls, qd_job_owner_fn fn, void *ctx, qd_err *err)
{
    owners_ctx c = {fn, ctx};
    return qd_pg_call(cls, false, owners_fn, &c, err);
}
