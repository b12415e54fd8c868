/* janitor.c -- housekeeping. The start-up sweep removes what crashes leave in DATA/uploads and
 * DATA/jobs: every entry no job owns, or whose job's state says it should be gone. The
 * housekeeping thread: retention removes the output files of succeeded jobs that ended more than
 * job_retention ago or are older than the keep_outputs newest (the job's row, report and outputs
 * list stay; its files answer 410 from then on). The store records the removal before the files
 * go, so nothing is served half-removed; a crash in between leaves a directory that the next
 * start-up sweep removes. A server started --insecure on a non-loopback address warns whenever
 * it is open to all: at start without tokens, as soon as a pass sees its last token gone, and
 * every hour it stays so.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fsutil.h"
#include "janitor.h"
#include "log.h"
#include "tokens.h"

#define WARN_EVERY_S 3600

struct qd_janitor {
    qd_app *app;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    bool stopping, woken, insecure;
    int period_s;
};

/* Removes job id's output directory; logs a failure. */
static void remove_job_dir(qd_app *app, int64_t id)
{
    qd_err err;
    char *dir = qd_app_job_dir(app, id);
    if (dir && qd_rmtree(dir, &err) != QD_OK)
        qd_log(QD_LOG_WARN, "retention: cannot remove outputs", "error", err.message, NULL);
    free(dir);
}

size_t qd_janitor_sweep(qd_app *app)
{
    const qd_config *cfg = app->cfg;
    int64_t before = cfg->job_retention ? qd_now_ms() - cfg->job_retention * 1000 : 0;
    int64_t *ids = NULL;
    size_t n = 0, removed = 0;
    qd_err err;
    if (qd_store_jobs_expiring(app->store, before, cfg->keep_outputs, &ids, &n, &err) != QD_OK) {
        qd_log(QD_LOG_WARN, "retention pass failed", "error", err.message, NULL);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (qd_store_job_outputs_removed(app->store, ids[i], &err) != QD_OK) continue;
        remove_job_dir(app, ids[i]);
        char id[24];
        snprintf(id, sizeof id, "%lld", (long long)ids[i]);
        qd_log(QD_LOG_INFO, "retention: outputs removed", "job", id, NULL);
        removed++;
    }
    free(ids);
    return removed;
}

/* ---- the start-up sweep -----------------------------------------------------------------------
 */

#define UPLOAD_NAME_LEN 32 /* DATA/uploads/HEX: 16 random bytes in lowercase hex (receiving.c) */

typedef struct owned_job {
    int64_t id;
    qd_job_state state;
    bool outputs_removed;
} owned_job;

typedef struct owned_upload {
    char name[UPLOAD_NAME_LEN + 1];
    qd_job_state state;
} owned_upload;

/* Every job of the store's snapshot: by id (the store's order, for bsearch), and the upload
 * directories of upload jobs by name (sorted before use). */
typedef struct owners {
    owned_job *jobs;
    owned_upload *uploads;
    size_t n_jobs, cap_jobs, n_uploads, cap_uploads;
} owners;

/* Why an entry goes when a job in each state owns it; NULL: the job may still need it. A live
 * job (queued, running, receiving) keeps everything: a worker may be using it right now. */
static const char *const job_dir_gone[QD_JOB_STATE_COUNT] = {
    [QD_JOB_FAILED] = "its job failed: a failed job has no outputs",
    [QD_JOB_CANCELLED] = "its job was cancelled: a cancelled job has no outputs",
};
static const char *const upload_gone[QD_JOB_STATE_COUNT] = {
    [QD_JOB_SUCCEEDED] = "its job succeeded: a finished job's inputs are not kept",
    [QD_JOB_FAILED] = "its job failed: a finished job's inputs are not kept",
    [QD_JOB_CANCELLED] = "its job was cancelled: a finished job's inputs are not kept",
};
#define OUTPUTS_REMOVED "retention removed its job's outputs"
#define NO_JOB          "no job owns it"

static bool is_upload_name(const char *name, size_t len)
{
    if (len != UPLOAD_NAME_LEN) return false;
    for (size_t i = 0; i < len; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return false;
    return true;
}

/* A job id as DATA/jobs names it: decimal, no sign or leading zero, 1..INT64_MAX. */
static bool parse_job_name(const char *name, int64_t *id)
{
    size_t len = strlen(name);
    if (len == 0 || len > 19 || name[0] == '0' || strspn(name, "0123456789") != len) return false;
    if (len == 19 && strcmp(name, "9223372036854775807") > 0) return false;
    *id = strtoll(name, NULL, 10);
    return true;
}

static void *grow(void *p, size_t *cap, size_t n, size_t size)
{
    if (n < *cap) return p;
    size_t c = *cap ? *cap * 2 : 64;
    void *q = realloc(p, c * size);
    if (q) *cap = c;
    return q;
}

/* The upload directory an upload job's source_path lies in: DATA/uploads/HEX/model.safetensors
 * or DATA/uploads/HEX/inputs give HEX (whatever DATA was when the job was made). */
static bool upload_name_of(const char *path, char name[UPLOAD_NAME_LEN + 1])
{
    const char *last = strrchr(path, '/');
    if (!last || last == path) return false;
    const char *start = last;
    while (start > path && start[-1] != '/') start--;
    if (!is_upload_name(start, (size_t)(last - start))) return false;
    memcpy(name, start, UPLOAD_NAME_LEN);
    name[UPLOAD_NAME_LEN] = '\0';
    return true;
}

static qd_status add_owner(void *ctx, const qd_job_owner *job, qd_err *err)
{
    owners *o = ctx;
    owned_job *jobs = grow(o->jobs, &o->cap_jobs, o->n_jobs, sizeof *jobs);
    if (!jobs) return qd_fail(err, QD_NOMEM, "out of memory");
    o->jobs = jobs;
    o->jobs[o->n_jobs++] = (owned_job){job->id, job->state, job->outputs_removed};
    char name[UPLOAD_NAME_LEN + 1];
    if (!job->upload_path || !upload_name_of(job->upload_path, name)) return QD_OK;
    owned_upload *ups = grow(o->uploads, &o->cap_uploads, o->n_uploads, sizeof *ups);
    if (!ups) return qd_fail(err, QD_NOMEM, "out of memory");
    o->uploads = ups;
    memcpy(o->uploads[o->n_uploads].name, name, sizeof name);
    o->uploads[o->n_uploads++].state = job->state;
    return QD_OK;
}

static int cmp_job(const void *a, const void *b)
{
    int64_t x = ((const owned_job *)a)->id, y = ((const owned_job *)b)->id;
    return (x > y) - (x < y);
}

static int cmp_upload(const void *a, const void *b)
{
    return strcmp(((const owned_upload *)a)->name, ((const owned_upload *)b)->name);
}

/* Why DATA/uploads/NAME goes (NULL: it stays); *ours false for a name quantd never gives. */
static const char *upload_verdict(const owners *o, const char *name, bool *ours)
{
    *ours = is_upload_name(name, strlen(name));
    if (!*ours) return NULL;
    owned_upload key = {.state = QD_JOB_QUEUED};
    memcpy(key.name, name, sizeof key.name);
    const owned_upload *u =
        o->n_uploads ? bsearch(&key, o->uploads, o->n_uploads, sizeof key, cmp_upload) : NULL;
    return u ? upload_gone[u->state] : NO_JOB;
}

/* Why DATA/jobs/NAME goes (NULL: it stays); *ours false for a name quantd never gives. */
static const char *job_dir_verdict(const owners *o, const char *name, bool *ours)
{
    owned_job key = {0};
    *ours = parse_job_name(name, &key.id);
    if (!*ours) return NULL;
    const owned_job *j = o->n_jobs ? bsearch(&key, o->jobs, o->n_jobs, sizeof key, cmp_job) : NULL;
    if (!j) return NO_JOB;
    if (j->state == QD_JOB_SUCCEEDED && j->outputs_removed) return OUTPUTS_REMOVED;
    return job_dir_gone[j->state];
}

typedef const char *(*verdict_fn)(const owners *o, const char *name, bool *ours);

/* The data directory's areas the sweep walks: the directory (a qd_app member) and its verdict. */
static const struct {
    const char *label;
    size_t dir_offset;
    verdict_fn verdict;
} areas[] = {
    {"uploads", offsetof(qd_app, uploads_dir), upload_verdict},
    {"jobs", offsetof(qd_app, jobs_dir), job_dir_verdict},
};

/* Removes one entry (a symbolic link itself, never what it points to); logs what happened. */
static bool remove_entry(const char *dir, const char *label, const char *name, const char *why)
{
    char entry[512], *path = NULL;
    snprintf(entry, sizeof entry, "%s/%s", label, name);
    qd_err err;
    if (asprintf(&path, "%s/%s", dir, name) < 0 || qd_rmtree(path, &err) != QD_OK) {
        qd_log(QD_LOG_WARN, "start-up sweep: cannot remove", "entry", entry, "why", why, "error",
               path ? err.message : "out of memory", NULL);
        free(path);
        return false;
    }
    free(path);
    qd_log(QD_LOG_INFO, "start-up sweep: removed", "entry", entry, "why", why, NULL);
    return true;
}

/* Walks one area: removes what its verdict says goes, logs names that are not quantd's. */
static size_t sweep_area(const owners *o, const char *dir, const char *label, verdict_fn verdict)
{
    DIR *d = opendir(dir);
    if (!d) {
        qd_log(QD_LOG_WARN, "start-up sweep: cannot read", "dir", label, "error", strerror(errno),
               NULL);
        return 0;
    }
    size_t removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        bool ours = false;
        const char *why = verdict(o, e->d_name, &ours);
        if (!ours) {
            char entry[512];
            snprintf(entry, sizeof entry, "%s/%s", label, e->d_name);
            qd_log(QD_LOG_WARN,
                   "start-up sweep: unknown entry left alone (not a name quantd gives)", "entry",
                   entry, NULL);
        } else if (why) {
            removed += remove_entry(dir, label, e->d_name, why);
        }
    }
    closedir(d);
    return removed;
}

size_t qd_janitor_startup_sweep(qd_app *app)
{
    owners o = {0};
    qd_err err;
    size_t removed = 0;
    if (qd_store_job_owners(app->store, add_owner, &o, &err) != QD_OK) {
        qd_log(QD_LOG_ERROR, "start-up sweep skipped: the jobs cannot be read", "error",
               err.message, NULL);
    } else {
        if (o.n_uploads) qsort(o.uploads, o.n_uploads, sizeof *o.uploads, cmp_upload);
        for (size_t i = 0; i < sizeof areas / sizeof *areas; i++) {
            const char *dir = *(char *const *)((const char *)app + areas[i].dir_offset);
            removed += sweep_area(&o, dir, areas[i].label, areas[i].verdict);
        }
    }
    free(o.jobs);
    free(o.uploads);
    return removed;
}

static void warn_insecure(const qd_app *app)
{
    char port[16];
    snprintf(port, sizeof port, "%d", app->cfg->listen_port);
    qd_log(QD_LOG_WARN,
           "insecure: listening beyond loopback with no access tokens; anyone who reaches this "
           "address may do everything (create a token: quantd token create)",
           "host", app->cfg->listen_host, "port", port, NULL);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *janitor_main(void *arg)
{
    qd_janitor *j = arg;
    double last_warn = 0;
    bool was_open = false;
    pthread_mutex_lock(&j->mu);
    while (!j->stopping) {
        pthread_mutex_unlock(&j->mu);
        qd_janitor_sweep(j->app);
        /* open to all: when it starts so, when its last token goes, and every hour it stays so */
        bool any = true;
        qd_err err;
        bool open = j->insecure && qd_tokens_any(j->app->tokens, &any, &err) == QD_OK && !any;
        if (open && (!was_open || mono_s() - last_warn >= WARN_EVERY_S)) {
            warn_insecure(j->app);
            last_warn = mono_s();
        }
        was_open = open;
        pthread_mutex_lock(&j->mu);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += j->period_s;
        while (!j->stopping && !j->woken && pthread_cond_timedwait(&j->cv, &j->mu, &until) == 0) {
        }
        j->woken = false;
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

qd_status qd_janitor_start(qd_app *app, bool insecure, qd_janitor **out, qd_err *err)
{
    *out = NULL;
    qd_janitor *j = calloc(1, sizeof *j);
    if (!j) return qd_fail(err, QD_NOMEM, "out of memory");
    j->app = app;
    j->insecure = insecure;
    int64_t half = app->cfg->job_retention / 2;
    j->period_s = half > 0 && half < 60 ? (int)half : 60;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    bool ok = pthread_mutex_init(&j->mu, NULL) == 0 && pthread_cond_init(&j->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!ok || pthread_create(&j->thread, NULL, janitor_main, j) != 0) {
        free(j);
        return qd_fail(err, QD_NOMEM, "cannot start the housekeeping thread");
    }
    *out = j;
    return QD_OK;
}

void qd_janitor_wake(qd_janitor *j)
{
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    j->woken = true;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void qd_janitor_stop(qd_janitor *j)
{
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    j->stopping = true;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->thread, NULL);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}
