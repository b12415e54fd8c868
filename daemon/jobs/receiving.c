/* receiving.c -- checkpoint jobs while their files arrive (receiving.h). The job's files live in
 * DATA/uploads/HEX/inputs (HEX random, as a single-shard upload's directory), so a run reads them
 * through the same upload source (job_source.c) and the same cleanup (qd_remove_upload) removes
 * them whatever way the job ends.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "fsutil.h"
#include "inputs.h"
#include "job_source.h"
#include "jobs.h"
#include "log.h"
#include "receiving.h"

struct qd_receiving {
    qd_app *app;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
};

/* DATA/uploads/HEX/inputs with the n files in it, empty (the pipeline needs every input to exist
 * when it starts) -- or, one_file, the file DATA/uploads/HEX/NAME alone; malloc'd, NULL with err
 * set (and nothing left) on failure. */
static char *make_inputs(qd_app *app, const char *const *names, size_t n, bool one_file,
                         qd_status *status, qd_err *err)
{
    unsigned char rnd[16];
    char hex[33];
    *status = QD_NOMEM;
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        *status = qd_fail(err, QD_IO, "getrandom failed");
        return NULL;
    }
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
    size_t len = strlen(app->uploads_dir) + 48;
    char *dir = malloc(len);
    if (!dir) {
        qd_fail(err, QD_NOMEM, "out of memory");
        return NULL;
    }
    snprintf(dir, len, "%s/%s", app->uploads_dir, hex);
    qd_status st = qd_mkdir(dir, 0700, err);
    snprintf(dir, len, "%s/%s/" QD_RECEIVING_MARK, app->uploads_dir, hex);
    int mark = st == QD_OK ? open(dir, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    if (st == QD_OK && mark < 0) st = qd_fail(err, QD_IO, "receiving mark: %s", strerror(errno));
    if (mark >= 0) close(mark);
    snprintf(dir, len, "%s/%s/inputs", app->uploads_dir, hex);
    if (st == QD_OK && !one_file) st = qd_mkdir(dir, 0700, err);
    if (one_file) snprintf(dir, len, "%s/%s", app->uploads_dir, hex);
    int dfd = st == QD_OK ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (st == QD_OK && dfd < 0) st = qd_fail(err, QD_IO, "inputs: %s", strerror(errno));
    for (size_t i = 0; st == QD_OK && i < n; i++) {
        int fd = openat(dfd, names[i], O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            st = qd_fail(err, QD_IO, "%s: %s", names[i], strerror(errno));
        else
            close(fd);
    }
    if (dfd >= 0) close(dfd);
    *status = st;
    if (one_file && st == QD_OK) { /* the file is the job's source */
        char *file = NULL;
        if (asprintf(&file, "%s/%s", dir, names[0]) < 0) file = NULL;
        if (!file) *status = qd_fail(err, QD_NOMEM, "out of memory");
        if (!file) unlinkat(AT_FDCWD, dir, AT_REMOVEDIR);
        free(dir);
        return file;
    }
    if (st != QD_OK) {
        qd_remove_upload(dir);
        free(dir);
        return NULL;
    }
    return dir;
}

qd_status qd_receiving_create(qd_app *app, qd_job *j, const char *const *names, size_t n,
                              bool one_file, qd_err *err)
{
    if (one_file && n != 1) return qd_fail(err, QD_INVALID, "one file, not %zu", n);
    j->source_kind = "upload";
    j->state = QD_JOB_RECEIVING;
    qd_status st;
    if (!(j->source_path = make_inputs(app, names, n, one_file, &st, err))) return st;
    qd_jobs_hold(app->jobs, true); /* no claim before the job's inputs are registered */
    st = qd_store_job_insert(app->store, j, err);
    if (st == QD_OK)
        st = qd_inputs_add(app->inputs, j->id, names, n,
                           j->created_ms + app->cfg->input_timeout * 1000, err);
    qd_jobs_hold(app->jobs, false);
    if (st == QD_OK) {
        qd_jobs_wake(app->jobs);
        return QD_OK;
    }
    if (j->id) {
        qd_err ignored;
        qd_store_job_end_receiving(app->store, j->id, QD_JOB_FAILED, "internal error", &ignored);
    }
    qd_remove_upload(j->source_path);
    free(j->source_path);
    j->source_path = NULL;
    return st;
}

void qd_receiving_fail(qd_app *app, int64_t id, qd_job_state state, const char *why)
{
    qd_job_inputs *ji = qd_inputs_get(app->inputs, id);
    if (ji) qd_inputs_fail(ji, why);
    qd_inputs_release(ji);
    qd_job j;
    qd_err err;
    if (qd_store_job_get(app->store, id, &j, &err) != QD_OK) return;
    /* still receiving: it ends here. Running (a worker took it, perhaps a moment ago): its run
     * sees the failure in its next wait and the worker ends it, removes the files and the
     * entry, which stays registered until then so that the run finds it. */
    if (j.state == QD_JOB_RECEIVING &&
        qd_store_job_end_receiving(app->store, id, state, why, &err) == QD_OK) {
        qd_inputs_remove(app->inputs, id);
        qd_remove_upload(j.source_path);
        char sid[24];
        snprintf(sid, sizeof sid, "%lld", (long long)id);
        qd_log(QD_LOG_INFO, "job finished", "job", sid, "state", qd_job_state_name(state), "error",
               why, NULL);
    }
    qd_job_clear(&j);
}

/* Every file of the job is in (and synced): its mark goes, so that a crash from here on leaves
 * a job that can run again. */
static void unmark(const char *source_path)
{
    char mark[4096];
    const char *slash = strrchr(source_path, '/');
    if (!slash) return;
    snprintf(mark, sizeof mark, "%.*s/" QD_RECEIVING_MARK, (int)(slash - source_path), source_path);
    unlink(mark);
}

quant_ck_status qd_receiving_done(qd_app *app, int64_t id, quant_ck_error *ck)
{
    qd_job j;
    qd_err err;
    if (qd_store_job_get(app->store, id, &j, &err) != QD_OK)
        return quant_ck_fail(ck, QUANT_CK_ERR_IO, "%s", err.message);
    unmark(j.source_path);
    if (j.state != QD_JOB_RECEIVING) { /* a worker runs it already (its own plan did it) */
        qd_job_clear(&j);
        qd_inputs_remove(app->inputs, id);
        return QUANT_CK_OK;
    }
    quant_plan *plan = NULL;
    quant_ck_status st = qd_job_plan(app, &j, false, &plan, ck);
    if (st == QUANT_CK_OK) st = qd_srq_check(app, j.stats_model, j.rules, plan, ck);
    char *unused = st == QUANT_CK_OK ? qd_plan_unused_json(plan) : NULL;
    quant_plan_free(plan);
    if (st == QUANT_CK_OK && !unused) st = quant_ck_fail(ck, QUANT_CK_ERR_NOMEM, "out of memory");
    qd_status stored =
        st == QUANT_CK_OK ? qd_store_job_received(app->store, id, unused, &err) : QD_OK;
    if (stored != QD_OK && stored != QD_CONFLICT) /* conflict: a worker took it meanwhile */
        st = quant_ck_fail(ck, QUANT_CK_ERR_IO, "%s", err.message);
    free(unused);
    qd_job_clear(&j);
    if (st != QUANT_CK_OK) {
        qd_receiving_fail(app, id, QD_JOB_FAILED, ck->message);
        return st;
    }
    qd_inputs_remove(app->inputs, id);
    qd_jobs_wake(app->jobs);
    return QUANT_CK_OK;
}

/* ---- input_timeout and start-up ---------------------------------------------------------------
 */

void qd_receiving_sweep(qd_app *app)
{
    int64_t *ids = NULL;
    size_t n = 0;
    qd_err err;
    if (qd_inputs_expired(app->inputs, qd_now_ms(), &ids, &n, &err) != QD_OK) return;
    for (size_t i = 0; i < n; i++) {
        qd_job_inputs *ji = qd_inputs_get(app->inputs, ids[i]);
        char missing[512] = "", why[768];
        size_t k = ji ? qd_inputs_missing(ji, missing, sizeof missing) : 0;
        qd_inputs_release(ji);
        snprintf(why, sizeof why,
                 "the job's files did not all arrive within input_timeout (%llds): %zu missing "
                 "(%s)",
                 (long long)app->cfg->input_timeout, k, missing);
        qd_receiving_fail(app, ids[i], QD_JOB_FAILED, why);
    }
    free(ids);
}

#define RESTARTED "quantd restarted while its inputs were being uploaded; create the job again"

/* Whether the job's upload still has its receiving mark (some input never arrived whole). */
static bool marked(const qd_job *j)
{
    char mark[4096];
    const char *slash = strrchr(j->source_path, '/');
    if (strcmp(j->source_kind, "upload") != 0 || !slash) return false;
    snprintf(mark, sizeof mark, "%.*s/" QD_RECEIVING_MARK, (int)(slash - j->source_path),
             j->source_path);
    return access(mark, F_OK) == 0;
}

/* Fails job j of the given state: receiving, or running on inputs that never all arrived. */
static void fail_cut(qd_app *app, const qd_job *j)
{
    qd_err err;
    qd_status st =
        j->state == QD_JOB_RECEIVING
            ? qd_store_job_end_receiving(app->store, j->id, QD_JOB_FAILED, RESTARTED, &err)
            : qd_store_job_finish(app->store, j->id, QD_JOB_FAILED, RESTARTED, NULL, 0, NULL, &err);
    if (st != QD_OK) {
        qd_log(QD_LOG_ERROR, "failing a job left receiving failed", "error", err.message, NULL);
        return;
    }
    char *dir = qd_app_job_dir(app, j->id), sid[24];
    if (dir) qd_rmtree(dir, &err);
    free(dir);
    qd_remove_upload(j->source_path);
    snprintf(sid, sizeof sid, "%lld", (long long)j->id);
    qd_log(QD_LOG_WARN, "job failed: its inputs were arriving when quantd stopped", "job", sid,
           NULL);
}

void qd_receiving_recover(qd_app *app)
{
    static const qd_job_state states[] = {QD_JOB_RECEIVING, QD_JOB_RUNNING, QD_JOB_QUEUED};
    for (size_t s = 0; s < sizeof states / sizeof *states; s++) {
        int64_t after = 0;
        size_t n;
        do {
            qd_job *jobs = NULL;
            qd_err err;
            n = 0;
            if (qd_store_job_list(app->store, states[s], after, 1000, &jobs, &n, &err) != QD_OK) {
                qd_log(QD_LOG_ERROR, "failing jobs left receiving failed", "error", err.message,
                       NULL);
                return;
            }
            for (size_t i = 0; i < n; i++) {
                if (jobs[i].state == QD_JOB_RECEIVING || marked(&jobs[i])) fail_cut(app, &jobs[i]);
                after = jobs[i].id;
                qd_job_clear(&jobs[i]);
            }
            free(jobs);
        } while (n == 1000);
    }
}

static void *watch_main(void *arg)
{
    qd_receiving *rc = arg;
    pthread_mutex_lock(&rc->mu);
    while (!rc->stopping) {
        pthread_mutex_unlock(&rc->mu);
        qd_receiving_sweep(rc->app);
        pthread_mutex_lock(&rc->mu);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += 1;
        while (!rc->stopping && pthread_cond_timedwait(&rc->cv, &rc->mu, &until) == 0) {
        }
    }
    pthread_mutex_unlock(&rc->mu);
    return NULL;
}

qd_status qd_receiving_start(qd_app *app, qd_receiving **out, qd_err *err)
{
    *out = NULL;
    qd_receiving *rc = calloc(1, sizeof *rc);
    if (!rc) return qd_fail(err, QD_NOMEM, "out of memory");
    rc->app = app;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&rc->mu, NULL);
    pthread_cond_init(&rc->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&rc->thread, NULL, watch_main, rc) != 0) {
        pthread_mutex_destroy(&rc->mu);
        pthread_cond_destroy(&rc->cv);
        free(rc);
        return qd_fail(err, QD_NOMEM, "cannot start the input_timeout thread");
    }
    *out = rc;
    return QD_OK;
}

void qd_receiving_stop(qd_receiving *rc)
{
    if (!rc) return;
    pthread_mutex_lock(&rc->mu);
    rc->stopping = true;
    pthread_cond_signal(&rc->cv);
    pthread_mutex_unlock(&rc->mu);
    pthread_join(rc->thread, NULL);
    pthread_mutex_destroy(&rc->mu);
    pthread_cond_destroy(&rc->cv);
    free(rc);
}
