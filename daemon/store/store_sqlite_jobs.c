/* store_sqlite_jobs.c -- the SQLite engine's jobs: the FIFO queue (insert, atomic claim), progress,
 * the one transaction that ends a job with its outputs and report, cancel and delete guarded by
 * state, requeue after a graceful stop, recovery of jobs a dead process left running, and the reads
 * behind GET /v1/jobs.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "store_sqlite.h"

/* The column order read_job expects. */
#define JOB_COLS                                                                                   \
    "id, state, ruleset, rules, layout, source_kind, source_path, stats_model, created_ms, "       \
    "started_ms, finished_ms, tensors_done, tensors_total, bytes_done, bytes_total, error, "       \
    "attempts, outputs_removed_ms, unused_rules"

static const qd_db_stmt_def job_queries[] = {
    {QD_Q_JOB_INSERT, "INSERT INTO jobs (state, ruleset, rules, layout, source_kind, source_path, "
                      "stats_model, created_ms, unused_rules) "
                      "VALUES (?9, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id"},
    {QD_Q_JOB_GET, "SELECT " JOB_COLS " FROM jobs WHERE id = ?1"},
    {QD_Q_JOB_STATE, "SELECT state FROM jobs WHERE id = ?1"},
    {QD_Q_JOB_LIST_ALL, "SELECT " JOB_COLS " FROM jobs WHERE id > ?1 ORDER BY id LIMIT ?2"},
    {QD_Q_JOB_LIST_STATE,
     "SELECT " JOB_COLS " FROM jobs WHERE state = ?2 AND id > ?1 ORDER BY id LIMIT ?3"},
    /* One statement: the oldest queued job becomes running, whoever else is claiming. A job
     * claimed again after recovery starts from nothing. A receiving job is claimed like a queued
     * one: its run reads its files as they arrive (quant_pipeline_options.input_wait). */
    {QD_Q_JOB_CLAIM, "UPDATE jobs SET state = 'running', started_ms = ?1, attempts = attempts + 1, "
                     "finished_ms = NULL, error = NULL, tensors_done = 0, tensors_total = 0, "
                     "bytes_done = 0, bytes_total = 0 "
                     "WHERE id = (SELECT id FROM jobs WHERE state IN ('queued', 'receiving') "
                     "ORDER BY id LIMIT 1) "
                     "RETURNING " JOB_COLS},
    {QD_Q_JOB_PROGRESS, "UPDATE jobs SET tensors_done = ?2, tensors_total = ?3, bytes_done = ?4, "
                        "bytes_total = ?5 WHERE id = ?1 AND state = 'running'"},
    {QD_Q_JOB_FINISH, "UPDATE jobs SET state = ?2, finished_ms = ?3, error = ?4 "
                      "WHERE id = ?1 AND state = 'running'"},
    /* A graceful stop interrupted it: the attempt does not count. */
    {QD_Q_JOB_REQUEUE_ONE, "UPDATE jobs SET state = 'queued', started_ms = NULL, tensors_done = 0, "
                           "tensors_total = 0, bytes_done = 0, bytes_total = 0, "
                           "attempts = max(attempts - 1, 0) WHERE id = ?1 AND state = 'running'"},
    {QD_Q_OUTPUT_INSERT,
     "INSERT INTO outputs (job_id, name, bytes, sha256) VALUES (?1, ?2, ?3, ?4)"},
    {QD_Q_REPORT_INSERT, "INSERT INTO reports (job_id, body) VALUES (?1, ?2)"},
    {QD_Q_JOB_CANCEL, "UPDATE jobs SET state = 'cancelled', finished_ms = ?2 "
                      "WHERE id = ?1 AND state = 'queued'"},
    {QD_Q_JOB_RECEIVED, "UPDATE jobs SET state = 'queued', unused_rules = ?2 "
                        "WHERE id = ?1 AND state = 'receiving'"},
    {QD_Q_JOB_SET_UNUSED,
     "UPDATE jobs SET unused_rules = ?2 WHERE id = ?1 AND unused_rules IS NULL"},
    {QD_Q_JOB_END_RECEIVING, "UPDATE jobs SET state = ?2, finished_ms = ?3, error = ?4 "
                             "WHERE id = ?1 AND state = 'receiving'"},
    {QD_Q_JOB_DELETE, /* outputs and reports go with it: ON DELETE CASCADE */
     "DELETE FROM jobs WHERE id = ?1 AND state IN ('succeeded', 'failed', 'cancelled')"},
    {QD_Q_JOB_RUNNING_IDS, "SELECT id FROM jobs WHERE state = 'running' ORDER BY id"},
    {QD_Q_JOB_REQUEUE, "UPDATE jobs SET state = 'queued', started_ms = NULL, tensors_done = 0, "
                       "tensors_total = 0, bytes_done = 0, bytes_total = 0 "
                       "WHERE state = 'running' AND attempts < ?1"},
    {QD_Q_JOB_INTERRUPT,
     "UPDATE jobs SET state = 'failed', finished_ms = ?1, error = 'interrupted' "
     "WHERE state = 'running'"},
    {QD_Q_OUTPUTS, "SELECT name, bytes, sha256 FROM outputs WHERE job_id = ?1 ORDER BY name"},
    {QD_Q_REPORT, "SELECT body FROM reports WHERE job_id = ?1"},
    {QD_Q_COUNTS, "SELECT state, count(*) FROM jobs GROUP BY state"},
    /* Retention: succeeded jobs still holding outputs that ended before ?1 (0: none by age),
     * or that are not among the ?2 newest succeeded ones (-1: no cap). */
    {QD_Q_JOB_EXPIRING,
     "SELECT id FROM jobs WHERE state = 'succeeded' AND outputs_removed_ms IS NULL AND "
     "(finished_ms < ?1 OR id < coalesce((SELECT min(id) FROM (SELECT id FROM jobs "
     "WHERE state = 'succeeded' ORDER BY id DESC LIMIT ?2)), 0)) ORDER BY id"},
    {QD_Q_JOB_OUTPUTS_REMOVED, "UPDATE jobs SET outputs_removed_ms = ?2 "
                               "WHERE id = ?1 AND state = 'succeeded' AND "
                               "outputs_removed_ms IS NULL"},
    {QD_Q_JOB_OWNERS,
     "SELECT id, state, outputs_removed_ms IS NOT NULL, "
     "CASE WHEN source_kind = 'upload' THEN source_path END FROM jobs ORDER BY id"},
};

qd_status qd_sq_prepare_jobs(qd_sq *s, qd_err *err)
{
    return qd_sq_prepare(s, job_queries, sizeof job_queries / sizeof job_queries[0], err);
}

/* A job a failed call leaves behind: nothing to free, nothing to read. */
static void wipe(qd_job *j)
{
    qd_job_clear(j);
    memset(j, 0, sizeof *j);
}

static qd_status nomem(qd_err *err)
{
    return qd_fail(err, QD_NOMEM, "out of memory");
}

/* arr, holding n of cap elements of size elem, with room for one more: arr itself, or a larger
 * copy (NULL when out of memory; arr is then untouched). */
static void *reserve(void *arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return arr;
    size_t want = *cap ? *cap * 2 : 16;
    void *p = realloc(arr, want * elem);
    if (p) *cap = want;
    return p;
}

/* The current row of q (JOB_COLS) into *j; on failure *j is left cleared. */
static qd_status read_job(qd_sq *s, qd_query q, qd_job *j, qd_err *err)
{
    sqlite3_stmt *st = s->q[q];
    memset(j, 0, sizeof *j);
    j->id = sqlite3_column_int64(st, 0);
    const char *state = (const char *)sqlite3_column_text(st, 1);
    if (!state || !qd_job_state_parse(state, &j->state))
        return qd_fail(err, QD_DB, "job %lld: unreadable state", (long long)j->id);
    char **texts[] = {&j->ruleset,     &j->rules,       &j->layout,
                      &j->source_kind, &j->source_path, &j->stats_model};
    int64_t *nums[] = {&j->created_ms,    &j->started_ms, &j->finished_ms, &j->tensors_done,
                       &j->tensors_total, &j->bytes_done, &j->bytes_total};
    qd_status r = QD_OK;
    for (int i = 0; r == QD_OK && i < 6; i++) r = qd_sq_col_text(s, q, 2 + i, texts[i], err);
    for (int i = 0; i < 7; i++) *nums[i] = sqlite3_column_int64(st, 8 + i); /* NULL reads 0 */
    if (r == QD_OK) r = qd_sq_col_text(s, q, 15, &j->error, err);
    j->attempts = sqlite3_column_int(st, 16);
    j->outputs_removed_ms = sqlite3_column_int64(st, 17);
    if (r == QD_OK) r = qd_sq_col_text(s, q, 18, &j->unused_rules, err);
    if (r != QD_OK) wipe(j);
    return r;
}

/* A state-guarded UPDATE or DELETE changed nothing: the job is missing, or not `want`. */
static qd_status miss(qd_sq *s, int64_t id, const char *want, qd_err *err)
{
    bool row = false;
    qd_status st = qd_sq_run(s, QD_Q_JOB_STATE, "read job state", err, &row, "i", id);
    if (st != QD_OK) return st;
    if (!row) return qd_fail(err, QD_NOT_FOUND, "job %lld not found", (long long)id);
    const unsigned char *state = sqlite3_column_text(s->q[QD_Q_JOB_STATE], 0);
    return qd_fail(err, QD_CONFLICT, "job %lld is %s, not %s", (long long)id,
                   state ? (const char *)state : "unreadable", want);
}

/* ---- insert, get, list ------------------------------------------------------------------------
 */

typedef struct insert_ctx {
    const qd_job *j;
    int64_t id, now;
} insert_ctx;

static qd_status insert_fn(qd_sq *s, void *p, qd_err *err)
{
    insert_ctx *c = p;
    const qd_job *j = c->j;
    bool row = false;
    c->now = qd_now_ms();
    qd_status st = qd_sq_run(
        s, QD_Q_JOB_INSERT, "insert job", err, &row, "ttttttitt", j->ruleset, j->rules, j->layout,
        j->source_kind, j->source_path, j->stats_model, c->now, j->unused_rules,
        qd_job_state_name(j->state == QD_JOB_RECEIVING ? QD_JOB_RECEIVING : QD_JOB_QUEUED));
    if (st == QD_OK && !row) st = qd_fail(err, QD_DB, "insert job: no id returned");
    if (st == QD_OK) c->id = sqlite3_column_int64(s->q[QD_Q_JOB_INSERT], 0);
    return st;
}

qd_status qd_sqlite_job_insert(void *cls, qd_job *j, qd_err *err)
{
    qd_sq *s = cls;
    insert_ctx c = {j, 0, 0};
    qd_status st = qd_sq_txn(s, true, insert_fn, &c, err);
    if (st != QD_OK) return st;
    j->id = c.id;
    j->created_ms = c.now;
    if (j->state != QD_JOB_RECEIVING) j->state = QD_JOB_QUEUED;
    return QD_OK;
}

typedef struct get_ctx {
    int64_t id;
    qd_job *out;
} get_ctx;

static qd_status get_fn(qd_sq *s, void *p, qd_err *err)
{
    get_ctx *c = p;
    bool row = false;
    qd_status st = qd_sq_run(s, QD_Q_JOB_GET, "get job", err, &row, "i", c->id);
    if (st == QD_OK && !row)
        st = qd_fail(err, QD_NOT_FOUND, "job %lld not found", (long long)c->id);
    return st == QD_OK ? read_job(s, QD_Q_JOB_GET, c->out, err) : st;
}

qd_status qd_sqlite_job_get(void *cls, int64_t id, qd_job *out, qd_err *err)
{
    qd_sq *s = cls;
    memset(out, 0, sizeof *out);
    get_ctx c = {id, out};
    qd_status st = qd_sq_txn(s, false, get_fn, &c, err);
    if (st != QD_OK) wipe(out); /* read, then the commit failed */
    return st;
}

typedef struct list_ctx {
    int state, limit;
    int64_t after;
    qd_job *jobs;
    size_t n, cap;
} list_ctx;

static qd_status list_fn(qd_sq *s, void *p, qd_err *err)
{
    list_ctx *c = p;
    bool row = false;
    qd_query q = c->state < 0 ? QD_Q_JOB_LIST_ALL : QD_Q_JOB_LIST_STATE;
    qd_status st = c->state < 0
                       ? qd_sq_run(s, q, "list jobs", err, &row, "ii", c->after, (int64_t)c->limit)
                       : qd_sq_run(s, q, "list jobs", err, &row, "iti", c->after,
                                   qd_job_state_name((qd_job_state)c->state), (int64_t)c->limit);
    while (st == QD_OK && row) {
        qd_job *more = reserve(c->jobs, &c->cap, c->n, sizeof *more);
        if (!more) return nomem(err);
        c->jobs = more;
        st = read_job(s, q, &c->jobs[c->n], err);
        if (st == QD_OK) c->n++;
        if (st == QD_OK) st = qd_sq_next(s, q, "list jobs", err, &row);
    }
    return st;
}

qd_status qd_sqlite_job_list(void *cls, int state, int64_t after_id, int limit, qd_job **jobs,
                             size_t *n, qd_err *err)
{
    qd_sq *s = cls;
    list_ctx c = {state, limit, after_id, NULL, 0, 0};
    qd_status st = qd_sq_txn(s, false, list_fn, &c, err);
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

static qd_status claim_fn(qd_sq *s, void *p, qd_err *err)
{
    bool row = false;
    qd_status st = qd_sq_run(s, QD_Q_JOB_CLAIM, "claim job", err, &row, "i", qd_now_ms());
    if (st == QD_OK && !row) st = qd_fail(err, QD_NOT_FOUND, "no queued job");
    return st == QD_OK ? read_job(s, QD_Q_JOB_CLAIM, p, err) : st;
}

qd_status qd_sqlite_job_claim(void *cls, qd_job *out, qd_err *err)
{
    qd_sq *s = cls;
    memset(out, 0, sizeof *out);
    qd_status st = qd_sq_txn(s, true, claim_fn, out, err);
    if (st != QD_OK) wipe(out); /* read, then the commit failed */
    return st;
}

typedef struct progress_ctx {
    int64_t id, v[4];
} progress_ctx;

static qd_status progress_fn(qd_sq *s, void *p, qd_err *err)
{
    progress_ctx *c = p;
    qd_status st = qd_sq_run(s, QD_Q_JOB_PROGRESS, "job progress", err, NULL, "iiiii", c->id,
                             c->v[0], c->v[1], c->v[2], c->v[3]);
    return st == QD_OK && qd_sq_changes(s) == 0 ? miss(s, c->id, "running", err) : st;
}

qd_status qd_sqlite_job_progress(void *cls, int64_t id, const int64_t v[4], qd_err *err)
{
    progress_ctx c = {id, {v[0], v[1], v[2], v[3]}};
    return qd_sq_txn(cls, true, progress_fn, &c, err);
}

typedef struct finish_ctx {
    int64_t id;
    qd_job_state state;
    const char *error, *report;
    const qd_output *outputs;
    size_t n;
} finish_ctx;

static qd_status insert_outputs(qd_sq *s, const finish_ctx *c, qd_err *err)
{
    qd_status st = QD_OK;
    for (size_t i = 0; st == QD_OK && i < c->n; i++) {
        const qd_output *o = &c->outputs[i];
        if (!o->name || !memchr(o->sha256, '\0', sizeof o->sha256))
            return qd_fail(err, QD_INVALID, "job %lld: output %zu lacks a name or a sha256",
                           (long long)c->id, i);
        st = qd_sq_run(s, QD_Q_OUTPUT_INSERT, "record job output", err, NULL, "itit", c->id,
                       o->name, o->bytes, o->sha256);
    }
    return st;
}

static qd_status finish_fn(qd_sq *s, void *p, qd_err *err)
{
    finish_ctx *c = p;
    qd_status st = qd_sq_run(s, QD_Q_JOB_FINISH, "finish job", err, NULL, "itit", c->id,
                             qd_job_state_name(c->state), qd_now_ms(), c->error);
    if (st == QD_OK && qd_sq_changes(s) == 0) return miss(s, c->id, "running", err);
    if (st == QD_OK) st = insert_outputs(s, c, err);
    if (st == QD_OK && c->report)
        st = qd_sq_run(s, QD_Q_REPORT_INSERT, "record job report", err, NULL, "it", c->id,
                       c->report);
    return st;
}

qd_status qd_sqlite_job_finish(void *cls, int64_t id, qd_job_state state, const char *error,
                               const qd_output *outputs, size_t n_outputs, const char *report,
                               qd_err *err)
{
    qd_sq *s = cls;
    finish_ctx c = {id, state, error, report, outputs, n_outputs};
    return qd_sq_txn(s, true, finish_fn, &c, err);
}

/* ---- requeue, cancel, delete, recover ------------------------------------------------------- */

static qd_status requeue_fn(qd_sq *s, void *p, qd_err *err)
{
    int64_t id = *(const int64_t *)p;
    qd_status st = qd_sq_run(s, QD_Q_JOB_REQUEUE_ONE, "requeue job", err, NULL, "i", id);
    return st == QD_OK && qd_sq_changes(s) == 0 ? miss(s, id, "running", err) : st;
}

qd_status qd_sqlite_job_requeue(void *cls, int64_t id, qd_err *err)
{
    qd_sq *s = cls;
    return qd_sq_txn(s, true, requeue_fn, &id, err);
}

static qd_status cancel_fn(qd_sq *s, void *p, qd_err *err)
{
    int64_t id = *(const int64_t *)p;
    qd_status st = qd_sq_run(s, QD_Q_JOB_CANCEL, "cancel job", err, NULL, "ii", id, qd_now_ms());
    return st == QD_OK && qd_sq_changes(s) == 0 ? miss(s, id, "queued", err) : st;
}

typedef struct received_ctx {
    int64_t id;
    qd_job_state state;
    const char *text; /* the unused rules, or the error */
} received_ctx;

static qd_status received_fn(qd_sq *s, void *p, qd_err *err)
{
    received_ctx *c = p;
    qd_status st = qd_sq_run(s, QD_Q_JOB_RECEIVED, "job received", err, NULL, "it", c->id, c->text);
    return st == QD_OK && qd_sq_changes(s) == 0 ? miss(s, c->id, "receiving", err) : st;
}

qd_status qd_sqlite_job_received(void *cls, int64_t id, const char *unused_rules, qd_err *err)
{
    qd_sq *s = cls;
    received_ctx c = {id, QD_JOB_QUEUED, unused_rules};
    return qd_sq_txn(s, true, received_fn, &c, err);
}

static qd_status end_receiving_fn(qd_sq *s, void *p, qd_err *err)
{
    received_ctx *c = p;
    qd_status st = qd_sq_run(s, QD_Q_JOB_END_RECEIVING, "end receiving job", err, NULL, "itit",
                             c->id, qd_job_state_name(c->state), qd_now_ms(), c->text);
    return st == QD_OK && qd_sq_changes(s) == 0 ? miss(s, c->id, "receiving", err) : st;
}

static qd_status set_unused_fn(qd_sq *s, void *p, qd_err *err)
{
    received_ctx *c = p;
    return qd_sq_run(s, QD_Q_JOB_SET_UNUSED, "set unused rules", err, NULL, "it", c->id, c->text);
}

qd_status qd_sqlite_job_set_unused(void *cls, int64_t id, const char *unused_rules, qd_err *err)
{
    qd_sq *s = cls;
    received_ctx c = {id, QD_JOB_QUEUED, unused_rules};
    return qd_sq_txn(s, true, set_unused_fn, &c, err);
}

qd_status qd_sqlite_job_end_receiving(void *cls, int64_t id, qd_job_state state, const char *error,
                                      qd_err *err)
{
    qd_sq *s = cls;
    received_ctx c = {id, state, error};
    return qd_sq_txn(s, true, end_receiving_fn, &c, err);
}

qd_status qd_sqlite_job_cancel_queued(void *cls, int64_t id, qd_err *err)
{
    qd_sq *s = cls;
    return qd_sq_txn(s, true, cancel_fn, &id, err);
}

static qd_status delete_fn(qd_sq *s, void *p, qd_err *err)
{
    int64_t id = *(const int64_t *)p;
    qd_status st = qd_sq_run(s, QD_Q_JOB_DELETE, "delete job", err, NULL, "i", id);
    return st == QD_OK && qd_sq_changes(s) == 0 ? miss(s, id, "finished", err) : st;
}

qd_status qd_sqlite_job_delete(void *cls, int64_t id, qd_err *err)
{
    qd_sq *s = cls;
    return qd_sq_txn(s, true, delete_fn, &id, err);
}

typedef struct ids_ctx {
    qd_query q;
    int64_t before_ms, keep;
    int64_t *ids;
    size_t n, cap;
} ids_ctx;

/* Every id the query (0 or 2 parameters) returns, appended to c->ids. */
static qd_status ids_fn(qd_sq *s, void *p, qd_err *err)
{
    ids_ctx *c = p;
    const char *op = "list job ids";
    bool row = false;
    qd_status st = c->q == QD_Q_JOB_EXPIRING
                       ? qd_sq_run(s, c->q, op, err, &row, "ii", c->before_ms, c->keep)
                       : qd_sq_run(s, c->q, op, err, &row, "");
    while (st == QD_OK && row) {
        int64_t *more = reserve(c->ids, &c->cap, c->n, sizeof *more);
        if (!more) return nomem(err);
        c->ids = more;
        c->ids[c->n++] = sqlite3_column_int64(s->q[c->q], 0);
        st = qd_sq_next(s, c->q, op, err, &row);
    }
    return st;
}

typedef struct recover_ctx {
    int64_t max_attempts;
    ids_ctx running;
} recover_ctx;

static qd_status recover_fn(qd_sq *s, void *p, qd_err *err)
{
    recover_ctx *c = p;
    const char *op = "recover jobs";
    qd_status st = ids_fn(s, &c->running, err);
    /* Retry first; whatever is still running has used up its attempts. */
    if (st == QD_OK) st = qd_sq_run(s, QD_Q_JOB_REQUEUE, op, err, NULL, "i", c->max_attempts);
    if (st == QD_OK) st = qd_sq_run(s, QD_Q_JOB_INTERRUPT, op, err, NULL, "i", qd_now_ms());
    return st;
}

qd_status qd_sqlite_job_recover(void *cls, int max_attempts, int64_t **ids, size_t *n, qd_err *err)
{
    qd_sq *s = cls;
    recover_ctx c = {max_attempts, {.q = QD_Q_JOB_RUNNING_IDS}};
    qd_status st = qd_sq_txn(s, true, recover_fn, &c, err);
    if (st != QD_OK) {
        free(c.running.ids);
        return st;
    }
    *ids = c.running.ids;
    *n = c.running.n;
    return QD_OK;
}

/* ---- outputs, report, counts ------------------------------------------------------------------
 */

typedef struct outputs_ctx {
    int64_t id;
    qd_output *o;
    size_t n, cap;
} outputs_ctx;

static qd_status read_output(qd_sq *s, qd_output *o, qd_err *err)
{
    sqlite3_stmt *st = s->q[QD_Q_OUTPUTS];
    const char *sha = (const char *)sqlite3_column_text(st, 2);
    o->bytes = sqlite3_column_int64(st, 1);
    if (!sha || strlen(sha) != 64) return qd_fail(err, QD_DB, "job output: unreadable sha256");
    memcpy(o->sha256, sha, 65);
    return qd_sq_col_text(s, QD_Q_OUTPUTS, 0, &o->name, err);
}

static qd_status outputs_fn(qd_sq *s, void *p, qd_err *err)
{
    outputs_ctx *c = p;
    bool row = false;
    qd_status st = qd_sq_run(s, QD_Q_JOB_STATE, "job outputs", err, &row, "i", c->id);
    if (st == QD_OK && !row)
        return qd_fail(err, QD_NOT_FOUND, "job %lld not found", (long long)c->id);
    if (st == QD_OK) st = qd_sq_run(s, QD_Q_OUTPUTS, "job outputs", err, &row, "i", c->id);
    while (st == QD_OK && row) {
        qd_output *more = reserve(c->o, &c->cap, c->n, sizeof *more);
        if (!more) return nomem(err);
        c->o = more;
        c->o[c->n] = (qd_output){0};
        st = read_output(s, &c->o[c->n], err);
        if (st == QD_OK) c->n++;
        if (st == QD_OK) st = qd_sq_next(s, QD_Q_OUTPUTS, "job outputs", err, &row);
    }
    return st;
}

qd_status qd_sqlite_job_outputs(void *cls, int64_t id, qd_output **out, size_t *n, qd_err *err)
{
    qd_sq *s = cls;
    *out = NULL;
    *n = 0;
    outputs_ctx c = {id, NULL, 0, 0};
    qd_status st = qd_sq_txn(s, false, outputs_fn, &c, err);
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

static qd_status report_fn(qd_sq *s, void *p, qd_err *err)
{
    report_ctx *c = p;
    bool row = false;
    qd_status st = qd_sq_run(s, QD_Q_REPORT, "job report", err, &row, "i", c->id);
    if (st == QD_OK && row) return qd_sq_col_text(s, QD_Q_REPORT, 0, c->report, err);
    if (st == QD_OK) st = qd_sq_run(s, QD_Q_JOB_STATE, "job report", err, &row, "i", c->id);
    if (st != QD_OK) return st;
    return row ? qd_fail(err, QD_NOT_FOUND, "job %lld has no report", (long long)c->id)
               : qd_fail(err, QD_NOT_FOUND, "job %lld not found", (long long)c->id);
}

qd_status qd_sqlite_job_report(void *cls, int64_t id, char **report, qd_err *err)
{
    qd_sq *s = cls;
    *report = NULL;
    report_ctx c = {id, report};
    qd_status st = qd_sq_txn(s, false, report_fn, &c, err);
    if (st != QD_OK) {
        free(*report);
        *report = NULL;
    }
    return st;
}

static qd_status counts_fn(qd_sq *s, void *p, qd_err *err)
{
    int64_t *counts = p;
    sqlite3_stmt *q = s->q[QD_Q_COUNTS];
    bool row = false;
    qd_status st = qd_sq_run(s, QD_Q_COUNTS, "count jobs", err, &row, "");
    while (st == QD_OK && row) {
        qd_job_state state;
        if (!qd_job_state_parse((const char *)sqlite3_column_text(q, 0), &state))
            return qd_fail(err, QD_DB, "count jobs: unreadable state");
        counts[state] = sqlite3_column_int64(q, 1);
        st = qd_sq_next(s, QD_Q_COUNTS, "count jobs", err, &row);
    }
    return st;
}

qd_status qd_sqlite_job_counts(void *cls, int64_t counts[QD_JOB_STATE_COUNT], qd_err *err)
{
    qd_sq *s = cls;
    for (int i = 0; i < QD_JOB_STATE_COUNT; i++) counts[i] = 0;
    return qd_sq_txn(s, false, counts_fn, counts, err);
}

/* ---- retention --------------------------------------------------------------------------------
 */

static qd_status read_ids(qd_sq *s, ids_ctx *c, int64_t **ids, size_t *n, qd_err *err)
{
    qd_status st = qd_sq_txn(s, false, ids_fn, c, err);
    if (st != QD_OK) {
        free(c->ids);
        c->ids = NULL;
        c->n = 0;
    }
    *ids = c->ids;
    *n = c->n;
    return st;
}

qd_status qd_sqlite_jobs_expiring(void *cls, int64_t before_ms, int keep, int64_t **ids, size_t *n,
                                  qd_err *err)
{
    qd_sq *s = cls;
    ids_ctx c = {.q = QD_Q_JOB_EXPIRING, .before_ms = before_ms, .keep = keep > 0 ? keep : -1};
    return read_ids(s, &c, ids, n, err);
}

static qd_status removed_fn(qd_sq *s, void *p, qd_err *err)
{
    int64_t id = *(const int64_t *)p;
    qd_status st = qd_sq_run(s, QD_Q_JOB_OUTPUTS_REMOVED, "record removed outputs", err, NULL, "ii",
                             id, qd_now_ms());
    return st == QD_OK && qd_sq_changes(s) == 0 ? miss(s, id, "succeeded with outputs", err) : st;
}

qd_status qd_sqlite_job_outputs_removed(void *cls, int64_t id, qd_err *err)
{
    qd_sq *s = cls;
    return qd_sq_txn(s, true, removed_fn, &id, err);
}

/* ---- what owns the data directory's entries ----------------------------------------------------
 */

typedef struct owners_ctx {
    qd_job_owner_fn fn;
    void *ctx;
} owners_ctx;

static qd_status owners_fn(qd_sq *s, void *p, qd_err *err)
{
    owners_ctx *c = p;
    sqlite3_stmt *q = s->q[QD_Q_JOB_OWNERS];
    const char *op = "list job owners";
    bool row = false;
    qd_status st = qd_sq_run(s, QD_Q_JOB_OWNERS, op, err, &row, "");
    while (st == QD_OK && row) {
        qd_job_owner o = {.id = sqlite3_column_int64(q, 0),
                          .outputs_removed = sqlite3_column_int(q, 2) != 0,
                          .upload_path = (const char *)sqlite3_column_text(q, 3)};
        if (!qd_job_state_parse((const char *)sqlite3_column_text(q, 1), &o.state))
            return qd_fail(err, QD_DB, "%s: job %lld has an unreadable state", op, (long long)o.id);
        if ((st = c->fn(c->ctx, &o, err)) == QD_OK)
            st = qd_sq_next(s, QD_Q_JOB_OWNERS, op, err, &row);
    }
    return st;
}

qd_status qd_sqlite_job_owners(void *cls, qd_job_owner_fn fn, void *ctx, qd_err *err)
{
    qd_sq *s = cls;
    owners_ctx c = {fn, ctx};
    return qd_sq_txn(s, false, owners_fn, &c, err);
}
