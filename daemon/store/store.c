/* store.c -- the job store's front (store.h): the job state names, choosing an engine, and one
 * function per operation that checks its arguments once for every engine and calls through the
 * engine's table (store_engine.h); the rule sets' list rows, which both engines build alike.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "migrations.h"
#include "store_engine.h"

#define LIST_MAX 1000

struct qd_store {
    const qd_store_ops *ops;
    qd_store_kind kind;
    void *cls; /* the engine's handle */
};

static const qd_store_ops *const engines[QD_STORE_KIND_COUNT] = {
    [QD_STORE_SQLITE] = &qd_store_sqlite_ops,
    [QD_STORE_POSTGRESQL] = &qd_store_pg_ops,
};

const qd_store_ops *qd_store_engine_ops(qd_store_kind kind)
{
    return (unsigned)kind < QD_STORE_KIND_COUNT ? engines[kind] : NULL;
}

const char *qd_store_kind_name(qd_store_kind kind)
{
    return (unsigned)kind < QD_STORE_KIND_COUNT ? engines[kind]->name : "unknown";
}

static const char *const state_names[QD_JOB_STATE_COUNT] = {
    [QD_JOB_QUEUED] = "queued", [QD_JOB_RUNNING] = "running",     [QD_JOB_SUCCEEDED] = "succeeded",
    [QD_JOB_FAILED] = "failed", [QD_JOB_CANCELLED] = "cancelled", [QD_JOB_RECEIVING] = "receiving"};

const char *qd_job_state_name(qd_job_state s)
{
    return (unsigned)s < QD_JOB_STATE_COUNT ? state_names[s] : "unknown";
}

bool qd_job_state_parse(const char *name, qd_job_state *out)
{
    for (int i = 0; name && i < QD_JOB_STATE_COUNT; i++) {
        if (strcmp(name, state_names[i]) == 0) {
            *out = (qd_job_state)i;
            return true;
        }
    }
    return false;
}

int64_t qd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Frees and NULLs the strings only: the numbers (the id) stay readable, as store.h promises no
 * more, and a second clear is harmless. */
void qd_job_clear(qd_job *j)
{
    if (!j) return;
    char **texts[] = {&j->ruleset,     &j->rules,       &j->layout, &j->source_kind,
                      &j->source_path, &j->stats_model, &j->error,  &j->unused_rules};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        free(*texts[i]);
        *texts[i] = NULL;
    }
}

void qd_outputs_free(qd_output *o, size_t n)
{
    for (size_t i = 0; o && i < n; i++) free(o[i].name);
    free(o);
}

/* ---- opening ----------------------------------------------------------------------------------
 */

qd_status qd_store_open(const char *path, qd_store **out, qd_err *err)
{
    return qd_store_open_engine(QD_STORE_SQLITE, path, NULL, out, err);
}

qd_status qd_store_open_tuned(const char *path, const qd_db_tuning *tuning, qd_store **out,
                              qd_err *err)
{
    return qd_store_open_engine(QD_STORE_SQLITE, path, tuning, out, err);
}

qd_status qd_store_open_engine(qd_store_kind kind, const char *target, const qd_db_tuning *tuning,
                               qd_store **out, qd_err *err)
{
    *out = NULL;
    const qd_store_ops *ops = qd_store_engine_ops(kind);
    if (!ops) return qd_fail(err, QD_INVALID, "no store engine %d", (int)kind);
    if (!target || !*target)
        return qd_fail(err, QD_INVALID,
                       kind == QD_STORE_SQLITE ? "no database path" : "no connection string");
    qd_store *s = calloc(1, sizeof *s);
    if (!s) return qd_fail(err, QD_NOMEM, "out of memory");
    s->ops = ops;
    s->kind = kind;
    qd_status st = ops->open(target, tuning, &s->cls, err);
    if (st != QD_OK) {
        free(s);
        return st;
    }
    *out = s;
    return QD_OK;
}

void qd_store_close(qd_store *s)
{
    if (!s) return;
    s->ops->close(s->cls);
    free(s);
}

qd_store_kind qd_store_kind_of(const qd_store *s)
{
    return s->kind;
}

int qd_store_schema_version(qd_store *s)
{
    return s->ops->schema_version(s->cls);
}

int qd_store_migration_count(void)
{
    return qd_n_migrations;
}

int qd_store_migration_count_of(qd_store_kind kind)
{
    return kind == QD_STORE_POSTGRESQL ? qd_pg_n_migrations : qd_n_migrations;
}

qd_status qd_store_ping(qd_store *s, qd_err *err)
{
    return s->ops->ping(s->cls, err);
}

/* ---- rule sets --------------------------------------------------------------------------------
 */

qd_status qd_store_ruleset_put(qd_store *s, const char *name, const char *body, bool *created,
                               qd_err *err)
{
    if (!name || !body) return qd_fail(err, QD_INVALID, "a rule set needs a name and a body");
    bool made = false;
    qd_status st = s->ops->ruleset_put(s->cls, name, body, &made, err);
    if (st == QD_OK && created) *created = made;
    return st;
}

qd_status qd_store_ruleset_get(qd_store *s, const char *name, char **body, int64_t *created_ms,
                               int64_t *updated_ms, qd_err *err)
{
    if (body) *body = NULL;
    if (!name) return qd_fail(err, QD_INVALID, "no rule set name");
    return s->ops->ruleset_get(s->cls, name, body, created_ms, updated_ms, err);
}

/* "2026-11-23T14:00:00.123Z"; false when the time does not fit a struct tm. */
static bool iso_utc(int64_t ms, char *buf, size_t cap)
{
    int64_t sec = ms / 1000, frac = ms % 1000;
    if (frac < 0) frac += 1000, sec--;
    time_t t = (time_t)sec;
    struct tm tm;
    if (!gmtime_r(&t, &tm)) return false;
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    return n > 0 && snprintf(buf + n, cap - n, ".%03dZ", (int)frac) == 5;
}

qd_status qd_store_ruleset_append(json_t *arr, const char *name, int64_t created_ms,
                                  int64_t updated_ms, qd_err *err)
{
    char created[40], updated[40];
    if (!iso_utc(created_ms, created, sizeof created) ||
        !iso_utc(updated_ms, updated, sizeof updated))
        return qd_fail(err, QD_DB, "list rule sets: \"%s\" has a time out of range", name);
    json_t *o =
        json_pack("{s:s, s:s, s:s}", "name", name, "created_at", created, "updated_at", updated);
    if (!o) return qd_fail(err, QD_INVALID, "list rule sets: \"%s\" is not valid UTF-8", name);
    if (json_array_append_new(arr, o) != 0)
        return qd_fail(err, QD_NOMEM, "list rule sets: out of memory");
    return QD_OK;
}

qd_status qd_store_ruleset_list(qd_store *s, json_t **out, qd_err *err)
{
    *out = NULL;
    json_t *arr = json_array();
    if (!arr) return qd_fail(err, QD_NOMEM, "list rule sets: out of memory");
    qd_status st = s->ops->ruleset_list(s->cls, arr, err);
    if (st != QD_OK) {
        json_decref(arr);
        return st;
    }
    *out = arr;
    return QD_OK;
}

qd_status qd_store_ruleset_delete(qd_store *s, const char *name, qd_err *err)
{
    if (!name) return qd_fail(err, QD_INVALID, "no rule set name");
    return s->ops->ruleset_delete(s->cls, name, err);
}

/* ---- jobs -------------------------------------------------------------------------------------
 */

qd_status qd_store_job_insert(qd_store *s, qd_job *j, qd_err *err)
{
    if (!j->rules || !j->layout || !j->source_kind || !j->source_path)
        return qd_fail(err, QD_INVALID, "a job needs rules, a layout and a source");
    return s->ops->job_insert(s->cls, j, err);
}

qd_status qd_store_job_get(qd_store *s, int64_t id, qd_job *out, qd_err *err)
{
    return s->ops->job_get(s->cls, id, out, err);
}

qd_status qd_store_job_list(qd_store *s, int state, int64_t after_id, int limit, qd_job **jobs,
                            size_t *n, qd_err *err)
{
    *jobs = NULL;
    *n = 0;
    if (state >= QD_JOB_STATE_COUNT) return qd_fail(err, QD_INVALID, "no job state %d", state);
    return s->ops->job_list(s->cls, state < 0 ? -1 : state, after_id,
                            limit < 1          ? 1
                            : limit > LIST_MAX ? LIST_MAX
                                               : limit,
                            jobs, n, err);
}

qd_status qd_store_job_claim(qd_store *s, qd_job *out, qd_err *err)
{
    return s->ops->job_claim(s->cls, out, err);
}

qd_status qd_store_job_progress(qd_store *s, int64_t id, int64_t tensors_done,
                                int64_t tensors_total, int64_t bytes_done, int64_t bytes_total,
                                qd_err *err)
{
    if (tensors_done < 0 || tensors_total < 0 || bytes_done < 0 || bytes_total < 0)
        return qd_fail(err, QD_INVALID, "job %lld: negative progress", (long long)id);
    const int64_t v[4] = {tensors_done, tensors_total, bytes_done, bytes_total};
    return s->ops->job_progress(s->cls, id, v, err);
}

/* Every output has a name and a NUL-terminated sha256 of 64 lowercase hex digits. */
static qd_status check_outputs(int64_t id, const qd_output *outputs, size_t n, qd_err *err)
{
    if (n && !outputs) return qd_fail(err, QD_INVALID, "job %lld: no outputs array", (long long)id);
    for (size_t i = 0; i < n; i++) {
        const qd_output *o = &outputs[i];
        if (!o->name || !memchr(o->sha256, '\0', sizeof o->sha256))
            return qd_fail(err, QD_INVALID, "job %lld: output %zu lacks a name or a sha256",
                           (long long)id, i);
    }
    return QD_OK;
}

qd_status qd_store_job_finish(qd_store *s, int64_t id, qd_job_state state, const char *error,
                              const qd_output *outputs, size_t n_outputs, const char *report,
                              qd_err *err)
{
    if (state != QD_JOB_SUCCEEDED && state != QD_JOB_FAILED && state != QD_JOB_CANCELLED)
        return qd_fail(err, QD_INVALID, "job %lld: %s is not a final state", (long long)id,
                       qd_job_state_name(state));
    qd_status st = check_outputs(id, outputs, n_outputs, err);
    if (st != QD_OK) return st;
    return s->ops->job_finish(s->cls, id, state, error, outputs, n_outputs, report, err);
}

qd_status qd_store_job_requeue(qd_store *s, int64_t id, qd_err *err)
{
    return s->ops->job_requeue(s->cls, id, err);
}

qd_status qd_store_job_received(qd_store *s, int64_t id, const char *unused_rules, qd_err *err)
{
    return s->ops->job_received(s->cls, id, unused_rules, err);
}

qd_status qd_store_job_set_unused(qd_store *s, int64_t id, const char *unused_rules, qd_err *err)
{
    return s->ops->job_set_unused(s->cls, id, unused_rules, err);
}

qd_status qd_store_job_end_receiving(qd_store *s, int64_t id, qd_job_state state, const char *error,
                                     qd_err *err)
{
    if (state != QD_JOB_FAILED && state != QD_JOB_CANCELLED)
        return qd_fail(err, QD_INVALID, "a receiving job ends failed or cancelled");
    return s->ops->job_end_receiving(s->cls, id, state, error, err);
}

qd_status qd_store_job_cancel_queued(qd_store *s, int64_t id, qd_err *err)
{
    return s->ops->job_cancel_queued(s->cls, id, err);
}

qd_status qd_store_job_delete(qd_store *s, int64_t id, qd_err *err)
{
    return s->ops->job_delete(s->cls, id, err);
}

qd_status qd_store_job_recover(qd_store *s, int max_attempts, int64_t **ids, size_t *n, qd_err *err)
{
    *ids = NULL;
    *n = 0;
    if (max_attempts < 0) return qd_fail(err, QD_INVALID, "max_attempts is negative");
    return s->ops->job_recover(s->cls, max_attempts, ids, n, err);
}

qd_status qd_store_job_outputs(qd_store *s, int64_t id, qd_output **out, size_t *n, qd_err *err)
{
    *out = NULL;
    *n = 0;
    return s->ops->job_outputs(s->cls, id, out, n, err);
}

qd_status qd_store_job_report(qd_store *s, int64_t id, char **report, qd_err *err)
{
    *report = NULL;
    return s->ops->job_report(s->cls, id, report, err);
}

qd_status qd_store_jobs_expiring(qd_store *s, int64_t before_ms, int keep, int64_t **ids, size_t *n,
                                 qd_err *err)
{
    *ids = NULL;
    *n = 0;
    return s->ops->jobs_expiring(s->cls, before_ms, keep > 0 ? keep : 0, ids, n, err);
}

qd_status qd_store_job_outputs_removed(qd_store *s, int64_t id, qd_err *err)
{
    return s->ops->job_outputs_removed(s->cls, id, err);
}

qd_status qd_store_job_owners(qd_store *s, qd_job_owner_fn fn, void *ctx, qd_err *err)
{
    return s->ops->job_owners(s->cls, fn, ctx, err);
}

qd_status qd_store_job_counts(qd_store *s, int64_t counts[QD_JOB_STATE_COUNT], qd_err *err)
{
    for (int i = 0; i < QD_JOB_STATE_COUNT; i++) counts[i] = 0;
    return s->ops->job_counts(s->cls, counts, err);
}
