/* stats_group.c -- one group of the statistics writer: every queued request in one transaction
 * of the engine's writer connection (stats_engine.h; SQLite: BEGIN IMMEDIATE ... COMMIT), every
 * stored row it reads taken through the engine's row locks. Each post is checked whole against the
 * cache (stats_cache.c: what is stored plus what earlier posts of the group changed) before any
 * of it is applied (stats_apply.c): its Idempotency-Key first (stats_idem.c: a replay or a
 * conflict applies nothing), then every activation, then the model's quota on stored sums (the
 * bytes its new activations add, on top of what earlier posts of the group added). Each changed
 * row is written once when the group ends; a key is recorded as soon as its post is applied. A
 * post that fails its check changes nothing and the others still commit; an SQL failure fails
 * them all and empties the cache, since the database went back to what it was.
 *
 * The delta log (stats_log.c): a group whose posts only update cached activations
 * runs against the cache alone (a key is looked up among the logged posts' keys, g->keys, then in
 * SQL, and recorded in g->keys, which the fold writes) and is made durable by appending its posts'
 * records to the log (log_group); the changed rows stay dirty in the cache and are copied to the
 * readers' overlay (stats_pending.c). Every SQL group writes all dirty rows, so it folds the log,
 * which it then resets; it first replays the log into the cache when the cache lost it (at open,
 * after a failure). A reset or new settings fold first. Replay runs each record as its post ran
 * (run_post, at its group's time), when its model's post count is the record's place.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "stats_group.h"
#include "stats_log.h"

static int64_t now_ms(void);

/* ---- set-up ----------------------------------------------------------------------------------
 */

static size_t sql_group(stats_group *g, stats_req *list);

qd_status qd_stats_group_new(const qd_stats_ops *ops, const char *path, const qd_db_tuning *tuning,
                             qd_pending *pend, stats_group **out, qd_err *err)
{
    *out = NULL;
    stats_group *g = calloc(1, sizeof *g);
    if (!g) return qd_fail(err, QD_NOMEM, "out of memory");
    g->ops = ops;
    g->pend = pend;
    g->log = calloc(1, sizeof *g->log);
    if (!g->log) {
        free(g);
        return qd_fail(err, QD_NOMEM, "out of memory");
    }
    g->log->fd = -1;
    qd_status st = ops->writer_open(path, tuning, &g->w, err);
    /* a shared database has no delta log: every group commits its rows */
    if (st == QD_OK && !ops->shared) st = qd_dlog_open(g->log, path, err);
    if (st == QD_OK) {
        /* the posts answered before the last stop (or crash) that were not folded: into SQLite */
        g->need_replay = !ops->shared;
        g->set = (stats_settings){.cache_budget = QD_STATS_CACHE_BYTES,
                                  .quota_bytes = QD_STATS_QUOTA_BYTES,
                                  .window_ms = QD_STATS_WINDOW_S * 1000,
                                  .fold_ms = QD_STATS_FOLD_MS,
                                  .fold_bytes = QD_STATS_FOLD_BYTES};
        g->now_ms = now_ms();
        sql_group(g, NULL);
        if (g->failed) st = g->fail_st, *err = g->fail_err;
    }
    if (st != QD_OK) {
        qd_stats_group_free(g);
        return st;
    }
    *out = g;
    return QD_OK;
}

void qd_stats_group_free(stats_group *g)
{
    if (!g) return;
    qd_cache_forget(g);
    if (g->w) g->ops->writer_close(g->w);
    if (g->log) qd_dlog_close(g->log);
    free(g->log);
    free(g->models);
    free(g->rows);
    free(g->slots);
    free(g->post_rows);
    free(g->keys);
    free(g);
}

int64_t qd_stats_group_fold_at(const stats_group *g, const stats_settings *set)
{
    return g->log->end > 0 ? g->first_logged_ms + set->fold_ms : 0;
}

/* ---- failures ---------------------------------------------------------------------------------
 */

qd_status qd_group_fail(stats_group *g, qd_status st, const qd_err *e)
{
    if (!g->failed) {
        g->failed = true;
        g->fail_st = st;
        g->fail_err = *e;
    }
    return g->fail_st;
}

/* Records st (a failed BEGIN or COMMIT, its message in e) as the group's failure. */
static bool txn_ok(stats_group *g, qd_status st, const qd_err *e)
{
    if (st != QD_OK && !g->failed) {
        g->failed = true;
        g->fail_st = st;
        g->fail_err = *e;
    }
    return st == QD_OK;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static qd_status nomem(qd_err *err)
{
    return qd_fail(err, QD_NOMEM, "out of memory");
}

void *qd_group_reserve(void *arr, size_t *cap, size_t want, size_t elem)
{
    if (want <= *cap) return arr;
    size_t c = *cap ? *cap : 16;
    while (c < want) c *= 2;
    void *p = realloc(arr, c * elem);
    if (p) *cap = c;
    return p;
}

/* ---- the quota --------------------------------------------------------------------------------
 */

/* The bytes the post's new activations (rows without statistics yet) add to its model. */
static int64_t post_growth(const qd_stat_post *p, stat_row *const *rows)
{
    int64_t bytes = 0;
    for (size_t i = 0; i < p->n; i++)
        if (rows[i]->count == 0) bytes += qd_stat_sum_bytes(p->e[i].kind, p->e[i].n, p->e[i].n_sq);
    return bytes;
}

/* Growth only comes from new activations: a post that adds none always fits. */
static qd_status check_quota(stats_group *g, const model_row *m, int64_t growth,
                             qd_stat_answer *ans, qd_err *err)
{
    int64_t total = m->stats_bytes + growth;
    if (growth == 0 || total <= g->set.quota_bytes) return QD_OK;
    char quota[32];
    qd_config_size_text(g->set.quota_bytes, quota, sizeof quota);
    ans->outcome = QD_POST_OVER_QUOTA;
    ans->stats_bytes = total;
    return qd_fail(err, QD_CONFLICT,
                   "model '%s' would hold %" PRId64 " bytes of statistics, over stats_quota (%s); "
                   "delete its statistics or raise stats_quota",
                   m->name, total, quota);
}

/* ---- the requests -----------------------------------------------------------------------------
 */

static bool flush_model(stats_group *g, model_row *m);

/* Records the post's key; a model new in this group is inserted first, for its id. */
static bool record_key(stats_group *g, model_row *m, const qd_stat_post *p)
{
    if (!m->id && !flush_model(g, m)) return false;
    return qd_idem_record(g, m, p);
}

/* QD_OK: stored (in the group) or replayed (r->ans says which); QD_INVALID/QD_CONFLICT/
 * QD_NOMEM/QD_DB: nothing of it is; a group failure is also recorded in g. */
static qd_status run_post(stats_group *g, stats_req *r, qd_err *err)
{
    const qd_stat_post *p = r->post;
    model_row *m = NULL;
    qd_status st = qd_cache_model(g, p->model, &m, err);
    if (st != QD_OK) return st;
    if (p->key && !g->replaying) {
        st = qd_idem_check(g, m, p, &r->ans, err);
        if (st != QD_OK || r->ans.outcome == QD_POST_REPLAYED) return st;
    }
    stat_row **rows = qd_group_reserve(g->post_rows, &g->cap_post_rows, p->n, sizeof *rows);
    if (!rows) return nomem(err);
    g->post_rows = rows;
    g->seq++;
    for (size_t i = 0; i < p->n; i++) {
        st = qd_cache_row(g, m, p->e[i].name, &rows[i], err);
        if (st == QD_OK) st = qd_stat_check(g, rows[i], &p->e[i], err);
        if (st != QD_OK) return st;
    }
    int64_t growth = post_growth(p, rows);
    st = check_quota(g, m, growth, &r->ans, err);
    if (st != QD_OK) return st;
    if (m->live && m->posts == INT64_MAX)
        return qd_fail(err, QD_INVALID, "model %s: its post count would overflow", m->name);
    if (!m->live) qd_cache_model_create(g, m);
    r->posts_before = m->posts;
    for (size_t i = 0; i < p->n; i++) qd_stat_apply(g, rows[i], &p->e[i], &m->conf);
    m->stats_bytes += growth;
    m->posts++;
    m->last_ms = g->now_ms;
    m->dirty = true;
    if (p->key && !record_key(g, m, p)) return g->fail_st;
    r->ans = (qd_stat_answer){.outcome = QD_POST_STORED,
                              .activations = (int64_t)p->n,
                              .step = p->step,
                              .stats_bytes = m->stats_bytes};
    return QD_OK;
}

static qd_status run_reset(stats_group *g, const char *model, qd_err *err)
{
    model_row *m = NULL;
    qd_status st = qd_cache_model(g, model, &m, err);
    if (st != QD_OK) return st;
    if (!m->live) return qd_fail(err, QD_NOT_FOUND, "model %s not found", model);
    qd_err e;
    if (m->id && (st = g->ops->rows_delete(g->w, m->id, &e)) != QD_OK)
        return qd_group_fail(g, st, &e);
    for (size_t i = 0; i < g->n_rows; i++) {
        stat_row *r = g->rows[i];
        if (r->model != m) continue;
        r->rowid = 0;
        r->count = 0;
        r->dirty = false;
    }
    m->posts = 0;
    m->last_ms = 0;
    m->stats_bytes = 0;
    m->dirty = true;
    return QD_OK; /* its Idempotency-Keys stay: those posts did happen */
}

static qd_status run_put_model(stats_group *g, stats_req *r, qd_err *err)
{
    model_row *m = NULL;
    qd_status st = qd_cache_model(g, r->model, &m, err);
    if (st != QD_OK) return st;
    r->created = !m->live;
    if (!m->live) qd_cache_model_create(g, m);
    m->conf = *r->conf;
    m->updated_ms = g->now_ms;
    m->dirty = true;
    return QD_OK;
}

/* ---- writing the changed rows -----------------------------------------------------------------
 */

static const char *const averaging_names[] = {[QD_AVG_SIMPLE] = "simple", [QD_AVG_EMA] = "ema"};

static bool flush_model(stats_group *g, model_row *m)
{
    qd_stat_model_rec rec = {.id = m->id,
                             .name = m->name,
                             .ema_constant = m->conf.ema_constant,
                             .bootstrap_steps = m->conf.bootstrap_steps,
                             .posts = m->posts,
                             .last_ms = m->last_ms,
                             .created_ms = m->created_ms,
                             .updated_ms = m->updated_ms};
    snprintf(rec.averaging, sizeof rec.averaging, "%s", averaging_names[m->conf.averaging]);
    qd_err e;
    qd_status st =
        m->id ? g->ops->model_update(g->w, &rec, &e) : g->ops->model_insert(g->w, &rec, &e);
    if (st != QD_OK) return qd_group_fail(g, st, &e), false;
    m->id = rec.id;
    m->dirty = false;
    return true;
}

/* r as the engine writes it: the arrays part by part (a, b, sq), each sum, last, ema; NULL for a
 * part the activation has not and for the last values and EMA not kept; shape NULL for mean_sq
 * alone, sq_len 0 without mean_sq. shape is the caller's buffer (QD_SHAPE_TEXT_LEN). */
static void row_rec(const stat_row *r, char *shape, qd_stat_row_rec *rec)
{
    qd_shape_format(r->rank, r->shape, shape);
    *rec = (qd_stat_row_rec){.id = r->rowid,
                             .model_id = r->model->id,
                             .name = r->name,
                             .kind = qd_stat_kind_name(r->kind),
                             .shape = r->kind == QD_STAT_NONE ? NULL : shape,
                             .sq_len = r->n_sq,
                             .count = r->count,
                             .created_ms = r->created_ms,
                             .updated_ms = r->updated_ms};
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the statistics store writes little-endian float64 blobs; add a byte swap for this host"
#endif
    for (int k = 0; k < N_PARTS * A_PER_PART; k++) {
        int part = k / A_PER_PART, which = k % A_PER_PART;
        if (!qd_stat_has_part(r->kind, r->n_sq, part) || (which == A_LAST && !r->has_last) ||
            (which == A_EMA && !r->has_ema))
            continue;
        rec->arr[k] = qd_stat_array(r, which, part);
        rec->arr_bytes[k] = qd_stat_part_len(r->kind, r->n, r->n_sq, part) * 8;
    }
}

static bool flush_row(stats_group *g, stat_row *r)
{
    char shape[QD_SHAPE_TEXT_LEN];
    qd_stat_row_rec rec;
    row_rec(r, shape, &rec);
    qd_err e;
    int64_t id = 0;
    qd_status st =
        r->rowid ? g->ops->row_update(g->w, &rec, &e) : g->ops->row_insert(g->w, &rec, &id, &e);
    if (st != QD_OK) return qd_group_fail(g, st, &e), false;
    if (!r->rowid) r->rowid = id;
    r->dirty = false;
    return true;
}

/* Models first: a model this group created gets its id before its rows are inserted. */
static bool flush_all(stats_group *g)
{
    if (!qd_idem_flush(g)) return false; /* the logged posts' keys */
    for (size_t i = 0; i < g->n_models; i++)
        if (g->models[i]->dirty && !flush_model(g, g->models[i])) return false;
    for (size_t i = 0; i < g->n_rows; i++) {
        stat_row *r = g->rows[i];
        if (r->dirty && r->count > 0 && !flush_row(g, r)) return false;
    }
    return true;
}

/* ---- the group --------------------------------------------------------------------------------
 */

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void run_one(stats_group *g, stats_req *r)
{
    switch (r->kind) {
    case QD_REQ_POST:
        r->st = run_post(g, r, &r->err);
        break;
    case QD_REQ_RESET:
        r->st = run_reset(g, r->model, &r->err);
        break;
    case QD_REQ_PUT_MODEL:
        r->st = run_put_model(g, r, &r->err);
        break;
    case QD_REQ_FOLD: /* the group itself folds */
        r->st = QD_OK;
        break;
    }
}

/* ---- replaying the delta log (in an SQL group, before its requests) ----------------------------
 */

/* One record: applied when its model's post count is the record's place (posts_before), skipped
 * when the model already holds it (a fold committed but the log was not emptied), refused when
 * posts are missing before it. It runs as the post ran (run_post), at its group's time. */
static qd_status replay_one(void *ctx, const qd_dlog_record *rec, qd_err *err)
{
    stats_group *g = ctx;
    model_row *m = NULL;
    qd_status st = qd_cache_model(g, rec->post.model, &m, err);
    if (st != QD_OK) return st;
    if (m->live && rec->posts_before < m->posts) return QD_OK;
    if (!m->live || rec->posts_before > m->posts)
        return qd_fail(err, QD_DB,
                       "the statistics log holds post %lld of model %s, the database %lld posts",
                       (long long)rec->posts_before + 1, rec->post.model, (long long)m->posts);
    stats_req r = {.kind = QD_REQ_POST, .post = &rec->post};
    int64_t saved = g->now_ms;
    g->now_ms = rec->now_ms;
    /* its key was checked when it was answered (stored): checked again here, with whatever
     * window the replay runs with, an expired key still in the database would refuse it */
    g->replaying = true;
    st = run_post(g, &r, err);
    g->replaying = false;
    g->now_ms = saved;
    if (st != QD_OK && !g->failed) {
        qd_err why = *err;
        st = qd_fail(err, QD_DB, "replaying the statistics log: %s", why.message);
    }
    return st;
}

static bool replay(stats_group *g)
{
    if (!g->need_replay) return true;
    qd_err err = {0};
    qd_status st = qd_dlog_read(g->log, replay_one, g, &err);
    if (st == QD_OK) return true;
    if (!g->failed) {
        g->failed = true;
        g->fail_st = st;
        g->fail_err = err;
    }
    return false;
}

/* ---- the two kinds of group ---------------------------------------------------------------------
 */

/* Everything in one transaction of the engine, as before the log: the log's posts replayed first
 * when the cache lost them, every changed row written (a fold), the log emptied after the commit.
 */
static size_t sql_group(stats_group *g, stats_req *list)
{
    bool logged = g->log->end > 0 || g->need_replay || g->log->stale;
    g->failed = false;
    qd_err e;
    if (txn_ok(g, g->ops->group_begin(g->w, &e), &e)) {
        if (qd_idem_purge(g) && replay(g)) {
            for (stats_req *r = list; r && !g->failed; r = r->next) run_one(g, r);
            if (!g->failed) flush_all(g);
        }
        /* every failure after BEGIN (the purge and the replay included) ends the transaction:
         * left open, it would keep the write lock and refuse every later BEGIN */
        txn_ok(g, g->ops->group_end(g->w, !g->failed, &e), &e);
    }
    if (g->failed) {
        qd_cache_forget(g); /* the database went back: so does the cache */
        g->need_replay = g->need_replay || g->log->end > 0;
        return 0;
    }
    if (logged) {
        /* on failure l->stale: the next group retries; a file past twice the fold size (after
         * fold_bytes was lowered) is cut */
        qd_dlog_truncate(g->log, 2 * g->set.fold_bytes + ((int64_t)16 << 20));
        g->first_logged_ms = 0;
        g->need_replay = false;
        pthread_mutex_lock(&g->pend->mu);
        qd_pending_clear(g->pend);
        pthread_mutex_unlock(&g->pend->mu);
        for (size_t i = 0; i < g->n_rows; i++) g->rows[i]->pend = 0;
    }
    g->n_keys = 0; /* written by this fold */
    if (g->ops->shared)
        qd_cache_forget(g); /* other instances may change the rows before the next group */
    else
        qd_cache_trim(g, g->set.cache_budget);
    return 1;
}

/* How often a group the database gave way on runs again. */
#define GROUP_RETRIES 3

/* sql_group, run again (from a clean slate: the transaction rolled back, the cache forgotten)
 * while its failure is one the engine says may pass: another instance's writer deadlocked with
 * it or created the same model first. */
static void sql_group_retried(stats_group *g, stats_req *list)
{
    sql_group(g, list);
    for (int again = 0;
         g->failed && again < GROUP_RETRIES && g->ops->retryable && g->ops->retryable(g->w);
         again++) {
        for (stats_req *r = list; r; r = r->next) {
            r->st = QD_OK;
            r->ans = (qd_stat_answer){.outcome = QD_POST_NONE};
        }
        sql_group(g, list);
    }
}

/* May the group go to the log? Only posts that update activations the cache holds (nothing to
 * create, no quota to grow), while the log is within its fold interval and size. */
static bool log_eligible(stats_group *g, const stats_req *list)
{
    const stats_settings *set = &g->set;
    if (!list || g->ops->shared || set->fold_ms <= 0 || set->purge_now || g->need_replay ||
        g->log->stale)
        return false;
    if (g->log->end > 0 &&
        (g->now_ms >= g->first_logged_ms + set->fold_ms || g->log->end >= set->fold_bytes))
        return false;
    size_t keyed = 0;
    for (const stats_req *r = list; r; r = r->next) {
        if (r->kind != QD_REQ_POST) return false;
        keyed += r->post->key != NULL;
        model_row *m = qd_cache_find_model(g, r->post->model);
        if (!m || !m->live || !m->id) return false;
        for (size_t i = 0; i < r->post->n; i++) {
            stat_row *row = qd_cache_find_row(g, m, r->post->e[i].name);
            if (!row || row->count == 0 || row->broken) return false;
        }
    }
    /* room for the keys the group may record (qd_idem_record cannot fail then) */
    if (keyed == 0) return true;
    pend_key *keys = qd_group_reserve(g->keys, &g->cap_keys, g->n_keys + keyed, sizeof *keys);
    if (!keys) return false;
    g->keys = keys;
    return true;
}

/* Copies what the group changed into the readers' overlay; false when out of memory. */
static bool publish(stats_group *g)
{
    bool ok = true;
    pthread_mutex_lock(&g->pend->mu);
    for (size_t i = 0; ok && i < g->n_models; i++)
        if (g->models[i]->dirty) ok = qd_pending_put_model(g->pend, g->models[i]);
    for (size_t i = 0; ok && i < g->n_rows; i++) {
        stat_row *r = g->rows[i];
        if (r->dirty && r->used == g->groups) ok = qd_pending_put_row(g->pend, r);
    }
    pthread_mutex_unlock(&g->pend->mu);
    return ok;
}

/* The posts run against the cache (no SQL: every row is cached), their records appended to the
 * log with one write and one fdatasync; answered after it. When the records cannot be built or
 * written, the group is folded instead: its posts (applied to the cache) go to SQLite with the
 * rest of what the log held, and the log is emptied. */
static size_t log_group(stats_group *g, stats_req *list)
{
    g->failed = false;
    g->logging = true;
    for (stats_req *r = list; r; r = r->next) run_one(g, r);
    g->logging = false;
    if (g->failed) { /* a key's look-up failed: the cache holds posts never logged */
        qd_cache_forget(g);
        g->need_replay = g->log->end > 0;
        return 0;
    }
    g->log->buf.len = 0;
    bool ok = true;
    for (stats_req *r = list; ok && r; r = r->next)
        if (r->kind == QD_REQ_POST && r->ans.outcome == QD_POST_STORED)
            ok = qd_dlog_encode(&g->log->buf, r->post, g->now_ms, r->posts_before, g->log->epoch);
    if (!ok) return sql_group(g, NULL);
    if (g->log->buf.len == 0) return 1;
    qd_err err;
    if (qd_dlog_append(g->log, &err) != QD_OK) return sql_group(g, NULL);
    if (!g->first_logged_ms) g->first_logged_ms = g->now_ms;
    if (!publish(g)) return sql_group(g, NULL); /* the overlay is short: fold (it empties it) */
    return 1;
}

size_t qd_stats_group_run(stats_group *g, stats_req *list, const stats_settings *set, qd_metrics *m)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    g->set = *set;
    bool admin = false;
    for (stats_req *r = list; r; r = r->next) admin |= r->kind != QD_REQ_POST;
    g->now_ms = now_ms();
    g->failed = false;
    if (admin && (g->log->end > 0 || g->need_replay || g->log->stale)) {
        /* a reset or new settings apply to folded statistics only: fold first (a log left
         * stale by a failed emptying is emptied again) */
        sql_group(g, NULL);
        g->groups++;
    }
    if (admin && !g->failed && g->log->stale) {
        /* records the database holds are still in the log: after a reset they would be
         * replayed onto the model's new posts */
        g->failed = true;
        g->fail_st = qd_fail(&g->fail_err, QD_DB,
                             "the statistics log could not be emptied; a reset or new settings "
                             "wait until it can");
    }
    if (admin && !g->failed && !qd_dlog_sync(g->log)) {
        /* a reset takes post counts back: the log's old records must be gone for good first */
        g->failed = true;
        g->fail_st =
            qd_fail(&g->fail_err, QD_DB, "syncing the statistics log: %s", strerror(errno));
    }
    g->now_ms = now_ms();
    if (!g->failed) { /* else the admin requests are answered with the failure */
        if (log_eligible(g, list))
            log_group(g, list);
        else
            sql_group_retried(g, list);
    }
    g->groups++;
    size_t posts = 0;
    for (stats_req *r = list; r; r = r->next) {
        if (g->failed) {
            r->st = g->fail_st;
            r->err = g->fail_err;
            r->ans = (qd_stat_answer){.outcome = QD_POST_NONE};
        } else if (r->kind == QD_REQ_POST && r->ans.outcome == QD_POST_STORED) {
            posts++;
            if (m) qd_metrics_stats_post(m, r->post->n);
        }
    }
    if (!g->failed && m) qd_metrics_stats_commit(m, posts, seconds_since(&t0));
    return g->failed ? 0 : posts;
}
