/* jobs.c -- the worker threads: claim the oldest queued job, compute its static activation
 * scales when it names a stats_model (the model's averaged statistics through the library's SRQ
 * engine, quant_srq_compute, as `quant quantize --stats` does), run quant_quantize_path on it
 * with a cancel flag and a progress callback that writes to the store at most every 250 ms, then
 * publish (the outputs with the SHA-256 the pipeline took while writing them, the library's
 * report stored as it is, one transaction) or clean up.
 * Claim + registration happen under one mutex, so a cancel never misses a job in between.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fsutil.h"
#include "inputs.h"
#include "receiving.h"
#include "janitor.h"
#include "job_source.h"
#include "jobs.h"
#include "req_limits.h"
#include "log.h"
#include "quant_pipeline.h"
#include "stats.h"

typedef struct slot {
    int64_t id; /* 0: idle */
    atomic_int cancel;
    bool interrupted; /* cancelled by qd_jobs_stop, not by a user */
    struct timespec last_progress;
} slot;

struct qd_jobs {
    qd_app *app;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    bool stopping;
    int n;
    pthread_t *threads;
    slot *slots;
};

typedef struct worker_arg {
    qd_jobs *jobs;
    slot *slot;
} worker_arg;

/* ---- one job ----------------------------------------------------------------------------------
 */

static void on_progress(void *user, const quant_progress *p)
{
    void **ctx = user; /* {app, slot} */
    qd_app *app = ctx[0];
    slot *s = ctx[1];
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double dt = (double)(now.tv_sec - s->last_progress.tv_sec) +
                (double)(now.tv_nsec - s->last_progress.tv_nsec) * 1e-9;
    if (dt < 0.25 && p->tensors_done < p->tensors_total) return;
    s->last_progress = now;
    qd_err err;
    if (qd_store_job_progress(app->store, s->id, (int64_t)p->tensors_done,
                              (int64_t)p->tensors_total, (int64_t)p->bytes_done,
                              (int64_t)p->bytes_total, &err) != QD_OK)
        qd_log(QD_LOG_WARN, "progress not stored", "error", err.message, NULL);
}

/* The outputs: every regular file in dir, with the size and SHA-256 the pipeline recorded as
 * it wrote them (`done`, n_done of them). A file it did not record, or whose size differs, is
 * hashed here and logged: that would be a bug, and the ETag must still be the file's. */
static qd_status list_outputs(const char *dir, const qd_output *done, size_t n_done,
                              qd_output **out, size_t *n, qd_err *err)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return qd_fail(err, QD_IO, "%s: %s", dir, strerror(errno));
    qd_status st = QD_OK;
    size_t cap = 0;
    struct dirent *e;
    while (st == QD_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[8192];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            qd_output *o = realloc(*out, cap * sizeof *o);
            if (!o) {
                st = qd_fail(err, QD_NOMEM, "out of memory");
                break;
            }
            *out = o;
        }
        qd_output *o = &(*out)[*n];
        memset(o, 0, sizeof *o);
        if (!(o->name = strdup(e->d_name))) {
            st = qd_fail(err, QD_NOMEM, "out of memory");
            break;
        }
        (*n)++;
        size_t k = 0;
        while (k < n_done && strcmp(done[k].name, e->d_name) != 0) k++;
        if (k < n_done && done[k].sha256[0] && done[k].bytes == (int64_t)sb.st_size) {
            memcpy(o->sha256, done[k].sha256, sizeof o->sha256);
            o->bytes = done[k].bytes;
            continue;
        }
        qd_log(QD_LOG_WARN, "output not hashed by the pipeline; hashing it now", "file", path,
               NULL);
        st = qd_sha256_file(path, o->sha256, &o->bytes, err);
    }
    closedir(d);
    if (st != QD_OK) {
        qd_outputs_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return st;
}

/* The pipeline's record of the files it wrote (name, size, SHA-256); false on OOM. */
static bool written_outputs(const quant_report *rep, qd_output **out, size_t *n)
{
    *n = quant_report_output_count(rep);
    *out = calloc(*n ? *n : 1, sizeof **out);
    for (size_t i = 0; *out && i < *n; i++) {
        const quant_report_output *o = quant_report_output_at(rep, i);
        (*out)[i].bytes = (int64_t)o->bytes;
        if (o->sha256) snprintf((*out)[i].sha256, sizeof(*out)[i].sha256, "%s", o->sha256);
        if (!((*out)[i].name = strdup(o->name))) {
            qd_outputs_free(*out, i);
            *out = NULL;
        }
    }
    if (!*out) *n = 0;
    return *out != NULL;
}

/* Where the job writes: DATA/jobs/ID/output (a directory source), or the file
 * DATA/jobs/ID/output/NAME (a file source; NAME is model.safetensors for an upload); the gguf
 * layout writes one file whatever its source, DATA/jobs/ID/output/model.gguf. */
static char *output_target(qd_app *app, const qd_job *j, bool is_dir, qd_err *err)
{
    char *dir = qd_app_job_dir(app, j->id);
    if (!dir || qd_rmtree(dir, err) != QD_OK || qd_mkdir(dir, 0700, err) != QD_OK) {
        if (!dir) qd_fail(err, QD_NOMEM, "out of memory");
        free(dir);
        return NULL;
    }
    const char *base = strrchr(j->source_path, '/');
    base = strcmp(j->source_kind, "upload") == 0 ? "model.safetensors" : base ? base + 1 : "x";
    if (strcmp(j->layout, "gguf") == 0) {
        base = "model.gguf";
        is_dir = false;
    }
    size_t len = strlen(dir) + strlen(base) + 16;
    char *out = malloc(len);
    if (out) snprintf(out, len, "%s/output", dir);
    if (out && !is_dir && qd_mkdir(out, 0700, err) == QD_OK)
        snprintf(out, len, "%s/output/%s", dir, base);
    free(dir);
    if (!out) qd_fail(err, QD_NOMEM, "out of memory");
    return out;
}

static void count_quantized(qd_app *app, const quant_report *rep)
{
    uint64_t bytes = 0, tensors = 0;
    for (size_t i = 0; i < quant_report_count(rep); i++) {
        const quant_report_entry *e = quant_report_entry_at(rep, i);
        bytes += e->bytes_in;
        tensors += e->quantized;
    }
    qd_metrics_quantized(app->metrics, bytes, tensors);
}

/* ---- static activation scales (SRQ) ----------------------------------------------------------
 */

/* The model's averaged statistics through the library's SRQ engine (the rules' act_static_scale
 * rules, first match decides): the scales, their counts and the activations skipped, which the
 * run writes and its report lists. */
static quant_ck_status srq_prepare(qd_app *app, const qd_job *j, const quant_ruleset *rs,
                                   quant_srq **srq, quant_ck_error *ck)
{
    qd_stat_avg *avg = NULL;
    size_t n = 0;
    qd_err err;
    qd_status st = qd_stats_read(app->stats, j->stats_model, NULL, &avg, &n, &err);
    if (st != QD_OK)
        return quant_ck_fail(ck, QUANT_CK_ERR_ARG, "stats_model '%s': %s", j->stats_model,
                             err.message);
    quant_act_stat *views = n ? qd_stat_views(avg, n) : NULL;
    quant_ck_status cs;
    if (n == 0)
        cs = quant_ck_fail(ck, QUANT_CK_ERR_ARG,
                           "stats_model '%s': the model has no statistics (reset, or never posted)",
                           j->stats_model);
    else if (!views)
        cs = quant_ck_fail(ck, QUANT_CK_ERR_NOMEM, "out of memory");
    else if ((cs = quant_srq_compute(views, n, rs, NULL, srq, ck)) != QUANT_CK_OK)
        quant_ck_prefix(ck, "stats_model '%s'", j->stats_model);
    free(views);
    qd_stat_avgs_free(avg, n);
    return cs;
}

/* ---- one job's run ----------------------------------------------------------------------------
 */

int qd_jobs_threads(int quant_threads, long online_cpus, int workers)
{
    long n = quant_threads;
    if (n == 0) /* the CPUs shared between the workers */
        n = workers > 0 && online_cpus > workers ? online_cpus / workers : 1;
    return n > QUANT_MAX_THREADS ? QUANT_MAX_THREADS : (int)n;
}

/* Runs the pipeline on src; on success *report_json and the files written (*written, with their
 * SHA-256, n_written of them) are set. Returns the pipeline's status. */
static quant_ck_status run_pipeline(qd_app *app, slot *s, const qd_job *j, const qd_job_source *src,
                                    qd_job_inputs *ji, const char *out, char **report_json,
                                    qd_output **written, size_t *n_written, quant_ck_error *ck)
{
    quant_ruleset *rs = NULL;
    quant_ck_status st = quant_ruleset_parse(j->rules, strlen(j->rules), "job rules", &rs, ck);
    if (st != QUANT_CK_OK) return st;
    quant_srq *srq = NULL;
    if (j->stats_model) st = srq_prepare(app, j, rs, &srq, ck);
    if (st != QUANT_CK_OK) {
        quant_ruleset_free(rs);
        return st;
    }
    quant_pipeline_options o;
    qd_job_options(app, j, src, &o);
    void *ctx[2] = {app, s};
    o.progress = on_progress;
    o.progress_user = ctx;
    o.cancel = &s->cancel;
    if (srq) quant_srq_apply(srq, &o);
    o.sha256 = true; /* the outputs' ETags, taken as they are written */
    if (ji) {        /* a checkpoint job whose files are still arriving: read as they land */
        o.input_wait = qd_inputs_wait;
        o.input_wait_user = ji;
        o.map_input = false; /* the library refuses both (a growing file) */
    }
    quant_report *rep = NULL;
    st = quant_quantize_path(rs, src->in, out, &o, &rep, ck);
    if (st == QUANT_CK_OK) {
        count_quantized(app, rep);
        *report_json = quant_report_json(rep);
        if (!*report_json || !written_outputs(rep, written, n_written))
            st = quant_ck_fail(ck, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    quant_report_free(rep);
    quant_srq_free(srq);
    quant_ruleset_free(rs);
    return st;
}

/* Removes the job's directory and, once the job is over, its upload. */
static void remove_files(qd_app *app, const qd_job *j, bool upload_too)
{
    qd_err err;
    char *dir = qd_app_job_dir(app, j->id);
    if (dir && qd_rmtree(dir, &err) != QD_OK)
        qd_log(QD_LOG_WARN, "cleanup failed", "error", err.message, NULL);
    free(dir);
    if (upload_too && strcmp(j->source_kind, "upload") == 0) qd_remove_upload(j->source_path);
}

/* The error a client reads: no server path in it. The job's own directories, quantd's data
 * directory and the source roots are taken out ("/srv/var/jobs/7/output.quant-partial-9-x/a.
 * safetensors: No space left on device" -> "output.quant-partial-9-x/a.safetensors: No space
 * left on device"); the log keeps the whole message. */
static const char *client_message(const qd_app *app, const qd_job *j, const char *msg, char *buf,
                                  size_t len)
{
    const qd_config *cfg = app->cfg;
    const char *paths[QD_MAX_SOURCE_ROOTS + 8];
    size_t n = 0;
    char *job_dir = qd_app_job_dir(app, j->id), upload_dir[4096] = "";
    const char *slash = strrchr(j->source_path, '/');
    if (strcmp(j->source_kind, "upload") == 0 && slash)
        snprintf(upload_dir, sizeof upload_dir, "%.*s", (int)(slash - j->source_path),
                 j->source_path);
    const char *fixed[] = {upload_dir,   job_dir,       app->uploads_dir, app->jobs_dir,
                           app->tmp_dir, cfg->data_dir, cfg->db_path};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (fixed[i] && fixed[i][0]) paths[n++] = fixed[i];
    for (int i = 0; i < cfg->n_source_roots; i++) paths[n++] = cfg->source_roots[i];
    qd_scrub_paths(msg, paths, n, buf, len);
    free(job_dir);
    return buf;
}

/* A job not planned before its run (a checkpoint job run as its files arrived): its unused
 * rules from the report's summary, as the job's JSON shows them for every other job. */
static void set_unused_from(qd_app *app, int64_t id, const char *report)
{
    json_t *doc = report ? json_loads(report, 0, NULL) : NULL;
    json_t *unused = json_object_get(json_object_get(doc, "summary"), "unused_rules");
    char *text = json_is_array(unused) ? json_dumps(unused, JSON_COMPACT) : NULL;
    qd_err err;
    if (text && qd_store_job_set_unused(app->store, id, text, &err) != QD_OK)
        qd_log(QD_LOG_WARN, "unused rules not stored", "error", err.message, NULL);
    free(text);
    json_decref(doc);
}

static void finish(qd_app *app, slot *s, const qd_job *j, quant_ck_status st, const char *msg,
                   char *report, const qd_output *written, size_t n_written)
{
    qd_err err;
    qd_status done;
    char id[24];
    snprintf(id, sizeof id, "%lld", (long long)j->id);
    if (st == QUANT_CK_ERR_CANCELLED && s->interrupted) {
        remove_files(app, j, false);
        done = qd_store_job_requeue(app->store, j->id, &err);
        qd_log(QD_LOG_INFO, "job interrupted, queued again", "job", id, NULL);
    } else if (st == QUANT_CK_OK) {
        char *dir = qd_app_job_dir(app, j->id), out[4200];
        snprintf(out, sizeof out, "%s/output", dir ? dir : "");
        qd_output *outs = NULL;
        size_t n = 0;
        done = dir ? list_outputs(out, written, n_written, &outs, &n, &err)
                   : qd_fail(&err, QD_NOMEM, "no memory");
        if (done == QD_OK && !j->unused_rules) set_unused_from(app, j->id, report);
        if (done == QD_OK)
            done = qd_store_job_finish(app->store, j->id, QD_JOB_SUCCEEDED, NULL, outs, n, report,
                                       &err);
        qd_outputs_free(outs, n);
        free(dir);
        if (done != QD_OK) remove_files(app, j, false);
        if (strcmp(j->source_kind, "upload") == 0) qd_remove_upload(j->source_path);
        qd_log(QD_LOG_INFO, "job finished", "job", id, "state", "succeeded", NULL);
        qd_janitor_wake(app->janitor); /* keep_outputs may now drop an older job's outputs */
    } else {
        /* a cancel also ends the job's uploads: a wait that gave up on them was the cancel */
        bool cancelled = st == QUANT_CK_ERR_CANCELLED || atomic_load(&s->cancel);
        remove_files(app, j, true);
        char shown[QUANT_CK_MESSAGE_MAX];
        done = qd_store_job_finish(app->store, j->id, cancelled ? QD_JOB_CANCELLED : QD_JOB_FAILED,
                                   cancelled ? "cancelled"
                                             : client_message(app, j, msg, shown, sizeof shown),
                                   NULL, 0, NULL, &err);
        qd_log(QD_LOG_INFO, "job finished", "job", id, "state", cancelled ? "cancelled" : "failed",
               "error", cancelled ? "" : msg, NULL);
    }
    if (done != QD_OK)
        qd_log(QD_LOG_ERROR, "job end not stored", "job", id, "error", err.message, NULL);
}

static void run_job(qd_app *app, slot *s, const qd_job *j)
{
    char id[24];
    snprintf(id, sizeof id, "%lld", (long long)j->id);
    qd_log(QD_LOG_INFO, "job started", "job", id, "source", j->source_path, NULL);
    quant_ck_error ck = {0};
    char *report = NULL, *out = NULL, why[256];
    qd_output *written = NULL;
    size_t n_written = 0;
    qd_err err;
    qd_job_source src;
    quant_ck_status st = qd_job_source_open(app, j, &src, &ck);
    if (st == QUANT_CK_OK && !qd_disk_room(app, 0, why, sizeof why))
        st = quant_ck_fail(&ck, QUANT_CK_ERR_IO, "not started: %s", why);
    if (st == QUANT_CK_OK && !(out = output_target(app, j, src.is_dir, &err)))
        st = quant_ck_fail(&ck, QUANT_CK_ERR_IO, "%s", err.message);
    /* the job's files, when some are still arriving (receiving.h); NULL when all are in */
    qd_job_inputs *ji = qd_inputs_get(app->inputs, j->id);
    if (st == QUANT_CK_OK)
        st = run_pipeline(app, s, j, &src, ji, out, &report, &written, &n_written, &ck);
    qd_job_source_close(&src);
    if (ji && st != QUANT_CK_OK) { /* uploads still going stop: the job is over */
        qd_inputs_fail(ji, st == QUANT_CK_ERR_CANCELLED ? "cancelled" : "the job failed");
        qd_inputs_remove(app->inputs, j->id);
        if (s->interrupted) { /* its uploads are cut: it cannot run again */
            s->interrupted = false;
            atomic_store(&s->cancel, 0);
            st = quant_ck_fail(&ck, QUANT_CK_ERR_IO,
                               "interrupted: quantd stopped while the job's files were arriving");
        }
    }
    qd_inputs_release(ji);
    finish(app, s, j, st, ck.message, report, written, n_written);
    qd_outputs_free(written, n_written);
    free(report);
    free(out);
}

/* ---- the workers ------------------------------------------------------------------------------
 */

/* Takes the next job under the mutex (so a cancel sees it registered); false when stopping. */
static bool next_job(qd_jobs *js, slot *s, qd_job *j)
{
    pthread_mutex_lock(&js->mu);
    while (!js->stopping) {
        qd_err err;
        qd_status st = qd_store_job_claim(js->app->store, j, &err);
        if (st == QD_OK) {
            s->id = j->id;
            atomic_store(&s->cancel, 0);
            s->interrupted = false;
            clock_gettime(CLOCK_MONOTONIC, &s->last_progress);
            pthread_mutex_unlock(&js->mu);
            return true;
        }
        if (st != QD_NOT_FOUND)
            qd_log(QD_LOG_ERROR, "claiming a job failed", "error", err.message, NULL);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += st == QD_NOT_FOUND ? 5 : 1; /* the wake-up is the normal path */
        pthread_cond_timedwait(&js->wake, &js->mu, &until);
    }
    pthread_mutex_unlock(&js->mu);
    return false;
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    qd_jobs *js = wa->jobs;
    slot *s = wa->slot;
    free(wa);
    qd_job j;
    while (next_job(js, s, &j)) {
        run_job(js->app, s, &j);
        pthread_mutex_lock(&js->mu);
        s->id = 0;
        pthread_mutex_unlock(&js->mu);
        qd_job_clear(&j);
    }
    return NULL;
}

static void recover(qd_app *app)
{
    int64_t *ids = NULL;
    size_t n = 0;
    qd_err err;
    qd_receiving_recover(app); /* a job whose inputs were cut cannot run again */
    if (qd_store_job_recover(app->store, app->cfg->max_attempts, &ids, &n, &err) != QD_OK) {
        qd_log(QD_LOG_ERROR, "recovering interrupted jobs failed", "error", err.message, NULL);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        char *dir = qd_app_job_dir(app, ids[i]), id[24];
        snprintf(id, sizeof id, "%lld", (long long)ids[i]);
        if (dir) qd_rmtree(dir, &err);
        free(dir);
        qd_log(QD_LOG_WARN, "job was interrupted by a stop or crash", "job", id, NULL);
    }
    free(ids);
}

qd_status qd_jobs_start(qd_app *app, qd_jobs **out, qd_err *err)
{
    recover(app);
    qd_jobs *js = calloc(1, sizeof *js);
    if (!js) return qd_fail(err, QD_NOMEM, "out of memory");
    js->app = app;
    js->n = app->cfg->workers;
    js->threads = calloc((size_t)js->n, sizeof *js->threads);
    js->slots = calloc((size_t)js->n, sizeof *js->slots);
    pthread_mutex_init(&js->mu, NULL);
    pthread_cond_init(&js->wake, NULL);
    if (!js->threads || !js->slots) {
        js->n = 0;
        qd_jobs_stop(js);
        return qd_fail(err, QD_NOMEM, "out of memory");
    }
    for (int i = 0; i < js->n; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) *wa = (worker_arg){js, &js->slots[i]};
        if (!wa || pthread_create(&js->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            js->n = i;
            qd_jobs_stop(js);
            return qd_fail(err, QD_IO, "cannot start worker threads");
        }
    }
    *out = js;
    return QD_OK;
}

void qd_jobs_hold(qd_jobs *js, bool hold)
{
    if (hold)
        pthread_mutex_lock(&js->mu);
    else
        pthread_mutex_unlock(&js->mu);
}

void qd_jobs_wake(qd_jobs *js)
{
    pthread_mutex_lock(&js->mu);
    pthread_cond_signal(&js->wake);
    pthread_mutex_unlock(&js->mu);
}

qd_status qd_jobs_cancel(qd_jobs *js, int64_t id, bool *running, qd_err *err)
{
    pthread_mutex_lock(&js->mu);
    *running = false;
    qd_status st = qd_store_job_cancel_queued(js->app->store, id, err);
    qd_job j;
    /* a worker records a job's end before it lets go of the slot: the store has the last word */
    if (st == QD_CONFLICT && qd_store_job_get(js->app->store, id, &j, err) == QD_OK) {
        for (int i = 0; j.state == QD_JOB_RUNNING && i < js->n; i++)
            if (js->slots[i].id == id) {
                atomic_store(&js->slots[i].cancel, 1);
                *running = true;
                st = QD_OK;
            }
        qd_job_clear(&j);
    }
    pthread_mutex_unlock(&js->mu);
    return st;
}

void qd_jobs_stop(qd_jobs *js)
{
    if (!js) return;
    pthread_mutex_lock(&js->mu);
    js->stopping = true;
    for (int i = 0; i < js->n; i++)
        if (js->slots[i].id) {
            js->slots[i].interrupted = true;
            atomic_store(&js->slots[i].cancel, 1);
        }
    pthread_cond_broadcast(&js->wake);
    pthread_mutex_unlock(&js->mu);
    for (int i = 0; i < js->n; i++) pthread_join(js->threads[i], NULL);
    pthread_mutex_destroy(&js->mu);
    pthread_cond_destroy(&js->wake);
    free(js->threads);
    free(js->slots);
    free(js);
}
