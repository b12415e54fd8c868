/* stats_writer.c -- the statistics' single writer: callers queue a request (post, reset, model
 * settings) and wait on their own condition; the writer thread takes every request queued at
 * that moment into one transaction (stats_group.c), and answers each caller only after that
 * transaction committed (or failed). The fsync of a commit is thus shared by every post that
 * arrived while the previous group was being written (group commit). Each group runs with the
 * settings of the moment it was taken: the cache budget, the quota and the Idempotency-Key window
 * (qd_stats_configure), the delta log's fold interval and size (qd_stats_configure_log). A group
 * may instead be appended to the delta log (stats_group.c); while the log holds records the
 * writer also wakes when its fold is due, and folds it when stopping (unless a test asks it to
 * stop as kill -9 would).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "stats_internal.h"
#include "stats_log.h"
#include "stats_group.h"

/* CLOCK_REALTIME ms as a timespec, for pthread_cond_timedwait. */
static struct timespec at_ms(int64_t ms)
{
    return (struct timespec){.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
}

static int64_t realtime_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Everything queued now, or NULL: stopping with an empty queue (*fold false), or the delta log's
 * fold is due with nothing queued (*fold true). *set: the settings to run it with (a purge asked
 * for is handed over once). */
static stats_req *take_all(qd_stats *s, stats_settings *set, bool *fold)
{
    *fold = false;
    pthread_mutex_lock(&s->qmu);
    while ((!s->head || s->paused) && !s->stopping) {
        int64_t due = s->paused ? 0 : qd_stats_group_fold_at(s->group, &s->set);
        if (!due) {
            pthread_cond_wait(&s->work_cv, &s->qmu);
            continue;
        }
        if (realtime_ms() >= due) {
            *fold = true;
            break;
        }
        struct timespec ts = at_ms(due);
        pthread_cond_timedwait(&s->work_cv, &s->qmu, &ts);
    }
    stats_req *list = *fold ? NULL : s->head;
    if (list) {
        s->head = s->tail = NULL;
        s->queued = 0;
    }
    *set = s->set;
    if (list) s->set.purge_now = false;
    pthread_mutex_unlock(&s->qmu);
    return list;
}

/* Each caller may return (and its request vanish) once done is set and the mutex released. */
static void answer_all(qd_stats *s, stats_req *list)
{
    pthread_mutex_lock(&s->qmu);
    s->log_bytes = s->group->log->end;
    for (stats_req *r = list, *next; r; r = next) {
        next = r->next;
        r->done = true;
        pthread_cond_signal(&r->done_cv);
    }
    pthread_mutex_unlock(&s->qmu);
}

static void *writer_main(void *arg)
{
    qd_stats *s = arg;
    stats_req *list;
    stats_settings set;
    bool fold;
    for (;;) {
        list = take_all(s, &set, &fold);
        if (!list && !fold) break;
        qd_stats_group_run(s->group, list, &set, s->metrics);
        answer_all(s, list);
    }
    /* stopping: what the log holds goes into SQLite, so the next start has nothing to replay */
    if (!s->no_final_fold && s->group->log->end > 0) {
        qd_stats_group_run(s->group, NULL, &set, s->metrics);
        answer_all(s, NULL);
    }
    return NULL;
}

qd_status qd_stats_writer_start(qd_stats *s, const char *path, const qd_db_tuning *tuning,
                                qd_err *err)
{
    s->set = (stats_settings){.cache_budget = QD_STATS_CACHE_BYTES,
                              .quota_bytes = QD_STATS_QUOTA_BYTES,
                              .window_ms = QD_STATS_WINDOW_S * 1000,
                              .fold_ms = QD_STATS_FOLD_MS,
                              .fold_bytes = QD_STATS_FOLD_BYTES};
    qd_status st = qd_stats_group_new(s->ops, path, tuning, &s->pend, &s->group, err);
    if (st != QD_OK) return st;
    if (pthread_mutex_init(&s->qmu, NULL) != 0) {
        qd_stats_group_free(s->group);
        s->group = NULL;
        return qd_fail(err, QD_NOMEM, "cannot create the statistics writer's mutex");
    }
    if (pthread_cond_init(&s->work_cv, NULL) != 0) {
        pthread_mutex_destroy(&s->qmu);
        qd_stats_group_free(s->group);
        s->group = NULL;
        return qd_fail(err, QD_NOMEM, "cannot create the statistics writer's condition");
    }
    if (pthread_create(&s->thread, NULL, writer_main, s) != 0) {
        pthread_cond_destroy(&s->work_cv);
        pthread_mutex_destroy(&s->qmu);
        qd_stats_group_free(s->group);
        s->group = NULL;
        return qd_fail(err, QD_NOMEM, "cannot start the statistics writer");
    }
    s->started = true;
    return QD_OK;
}

void qd_stats_writer_stop(qd_stats *s)
{
    if (!s->started) return;
    pthread_mutex_lock(&s->qmu);
    s->stopping = true;
    s->paused = false;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->qmu);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->qmu);
    qd_stats_group_free(s->group);
    s->group = NULL;
    s->started = false;
}

void qd_stats_pause(qd_stats *s, bool paused)
{
    pthread_mutex_lock(&s->qmu);
    s->paused = paused;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->qmu);
}

void qd_stats_cache_budget(qd_stats *s, size_t bytes)
{
    pthread_mutex_lock(&s->qmu);
    s->set.cache_budget = bytes;
    pthread_mutex_unlock(&s->qmu);
}

void qd_stats_purge_next(qd_stats *s)
{
    pthread_mutex_lock(&s->qmu);
    s->set.purge_now = true;
    pthread_mutex_unlock(&s->qmu);
}

void qd_stats_configure(qd_stats *s, int64_t quota_bytes, int64_t idempotency_window_s)
{
    pthread_mutex_lock(&s->qmu);
    if (quota_bytes > 0) s->set.quota_bytes = quota_bytes;
    if (idempotency_window_s > 0 && idempotency_window_s <= INT64_MAX / 1000)
        s->set.window_ms = idempotency_window_s * 1000;
    pthread_mutex_unlock(&s->qmu);
}

void qd_stats_configure_log(qd_stats *s, int64_t fold_interval_ms, int64_t fold_bytes)
{
    pthread_mutex_lock(&s->qmu);
    if (fold_interval_ms >= 0) s->set.fold_ms = fold_interval_ms;
    if (fold_bytes > 0) s->set.fold_bytes = fold_bytes;
    pthread_cond_signal(&s->work_cv); /* a sooner fold may be due */
    pthread_mutex_unlock(&s->qmu);
}

int64_t qd_stats_log_bytes(qd_stats *s)
{
    pthread_mutex_lock(&s->qmu);
    int64_t n = s->log_bytes;
    pthread_mutex_unlock(&s->qmu);
    return n;
}

stats_settings qd_stats_settings(qd_stats *s)
{
    pthread_mutex_lock(&s->qmu);
    stats_settings set = s->set;
    pthread_mutex_unlock(&s->qmu);
    return set;
}

size_t qd_stats_queued(qd_stats *s)
{
    pthread_mutex_lock(&s->qmu);
    size_t n = s->queued;
    pthread_mutex_unlock(&s->qmu);
    return n;
}

/* Queues r and waits until the writer answered it; r->st is the answer. */
static qd_status submit(qd_stats *s, stats_req *r, qd_err *err)
{
    r->done = false;
    r->next = NULL;
    r->st = QD_OK;
    r->err.message[0] = '\0';
    if (pthread_cond_init(&r->done_cv, NULL) != 0)
        return qd_fail(err, QD_NOMEM, "cannot wait for the statistics writer");
    pthread_mutex_lock(&s->qmu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->qmu);
        pthread_cond_destroy(&r->done_cv);
        return qd_fail(err, QD_DB, "the statistics store is closing");
    }
    if (s->tail)
        s->tail->next = r;
    else
        s->head = r;
    s->tail = r;
    s->queued++;
    if (s->head == r) pthread_cond_signal(&s->work_cv);
    while (!r->done) pthread_cond_wait(&r->done_cv, &s->qmu);
    pthread_mutex_unlock(&s->qmu);
    pthread_cond_destroy(&r->done_cv);
    if (r->st != QD_OK && err) *err = r->err;
    return r->st;
}

qd_status qd_stats_post_answer(qd_stats *s, const qd_stat_post *p, qd_stat_answer *ans, qd_err *err)
{
    if (ans) *ans = (qd_stat_answer){.outcome = QD_POST_NONE};
    qd_status st = qd_stat_post_check(p, err);
    if (st != QD_OK) return st;
    stats_req r = {.kind = QD_REQ_POST, .post = p};
    st = submit(s, &r, err);
    if (ans) *ans = r.ans;
    return st;
}

qd_status qd_stats_post(qd_stats *s, const qd_stat_post *p, qd_err *err)
{
    return qd_stats_post_answer(s, p, NULL, err);
}

qd_status qd_stats_fold(qd_stats *s, qd_err *err)
{
    stats_req r = {.kind = QD_REQ_FOLD};
    return submit(s, &r, err);
}

qd_status qd_stats_reset(qd_stats *s, const char *model, qd_err *err)
{
    if (!model || !*model) return qd_fail(err, QD_INVALID, "no model");
    stats_req r = {.kind = QD_REQ_RESET, .model = model};
    return submit(s, &r, err);
}

static qd_status check_conf(const qd_model_conf *c, qd_err *err)
{
    if (c->averaging != QD_AVG_SIMPLE && c->averaging != QD_AVG_EMA)
        return qd_fail(err, QD_INVALID, "averaging must be simple or ema");
    if (!(c->ema_constant > 0 && c->ema_constant <= 1))
        return qd_fail(err, QD_INVALID, "ema_constant must be in (0, 1]");
    if (c->bootstrap_steps < 0)
        return qd_fail(err, QD_INVALID, "bootstrap_steps must be 0 or more");
    return QD_OK;
}

qd_status qd_stats_put_model(qd_stats *s, const char *model, const qd_model_conf *c, bool *created,
                             qd_err *err)
{
    if (!model || !*model) return qd_fail(err, QD_INVALID, "no model");
    qd_status st = check_conf(c, err);
    if (st != QD_OK) return st;
    stats_req r = {.kind = QD_REQ_PUT_MODEL, .model = model, .conf = c};
    st = submit(s, &r, err);
    if (st == QD_OK && created) *created = r.created;
    return st;
}
