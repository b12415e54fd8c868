/* stats_group.c -- one group of the statistics writer: every queued request in one
 * BEGIN IMMEDIATE ... COMMIT on the writer's connection. The rows a group touches are loaded once
 * into an in-memory cache (models by name, activations by model and name), each post is checked
 * whole against the cache (what is stored plus what earlier posts of the group changed) before
 * any of it is applied, and each changed row is written once when the group ends. A post that
 * fails its check changes nothing and the others still commit; an SQL failure fails them all.
 * The cache outlives the group (this writer is the only one that changes these tables), within
 * a memory budget, least recently used rows leaving first; after a failed group it is dropped,
 * since the database went back to what it was.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stats_internal.h"

/* A model as the group sees it. */
typedef struct model_row {
    char *name;
    int64_t id; /* 0 while it is not in the database */
    bool live;  /* it exists: in the database, or created by this group */
    bool dirty; /* its row is to be written */
    bool kept;  /* some cached activation of it survives the trim */
    qd_model_conf conf;
    int64_t posts;   /* posts stored since created or reset */
    int64_t last_ms; /* stats_updated_ms, 0 for NULL */
    int64_t created_ms, updated_ms;
} model_row;

/* One activation of one model as the group sees it. count == 0: no statistics (not stored yet,
 * or reset in this group); kind and shape are then taken from the first post that updates it.
 * The last value and the EMA are stored only while they serve (stored as NULL otherwise): the
 * default model (simple averaging, no bootstrap steps) writes only its sums. */
typedef struct stat_row {
    model_row *model;
    char *name;
    uint64_t hash;
    int64_t rowid; /* 0: not in the database */
    qd_stat_kind kind;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    int64_t n;
    int64_t count;
    double *v;    /* n each: sum_a, last_a, ema_a, then sum_b, last_b, ema_b when MINMAX */
    size_t v_cap; /* doubles allocated in v */
    int64_t created_ms, updated_ms;
    bool has_last; /* the last arrays hold the last post (kept while bootstrapping) */
    bool has_ema;  /* the EMA arrays are kept (the model's averaging is ema) */
    bool dirty;
    bool broken;   /* its stored row could not be read: every post to it fails (QD_DB) */
    uint64_t seen; /* the post that last checked it: a name twice in one post */
    uint64_t used; /* the group that last used it */
} stat_row;

enum { A_SUM, A_LAST, A_EMA, N_ARRAYS = 6 };

/* The most models the cache keeps between groups besides those of its activations. The bytes
 * come from the caller (QD_STATS_CACHE_BYTES, 64 MiB, holds ten models of 64 activations x
 * 4096 absmax values, 6 MiB each with room for their sums, last values and EMA). */
#define CACHE_MODELS 2048

typedef enum group_stmt {
    G_BEGIN,
    G_COMMIT,
    G_ROLLBACK,
    G_MODEL_GET,
    G_MODEL_INSERT,
    G_MODEL_UPDATE,
    G_ROW_GET,
    G_ROW_INSERT,
    G_ROW_UPDATE,
    G_ROWS_DELETE,
    G_COUNT
} group_stmt;

static const char *const group_sql[G_COUNT] = {
    [G_BEGIN] = "BEGIN IMMEDIATE",
    [G_COMMIT] = "COMMIT",
    [G_ROLLBACK] = "ROLLBACK",
    [G_MODEL_GET] = "SELECT id, averaging, ema_constant, bootstrap_steps, posts, "
                    "stats_updated_ms, created_ms, updated_ms FROM stat_models WHERE name = ?1",
    [G_MODEL_INSERT] = "INSERT INTO stat_models (name, averaging, ema_constant, bootstrap_steps, "
                       "posts, stats_updated_ms, created_ms, updated_ms) "
                       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id",
    [G_MODEL_UPDATE] = "UPDATE stat_models SET averaging = ?2, ema_constant = ?3, "
                       "bootstrap_steps = ?4, posts = ?5, stats_updated_ms = ?6, updated_ms = ?7 "
                       "WHERE id = ?1",
    [G_ROW_GET] = "SELECT id, kind, shape, count, created_ms, sum_a, last_a, ema_a, sum_b, "
                  "last_b, ema_b FROM stats WHERE model_id = ?1 AND name = ?2",
    [G_ROW_INSERT] = "INSERT INTO stats (model_id, name, kind, shape, count, created_ms, "
                     "updated_ms, sum_a, last_a, ema_a, sum_b, last_b, ema_b) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    [G_ROW_UPDATE] = "UPDATE stats SET count = ?2, updated_ms = ?3, sum_a = ?4, last_a = ?5, "
                     "ema_a = ?6, sum_b = ?7, last_b = ?8, ema_b = ?9 WHERE id = ?1",
    [G_ROWS_DELETE] = "DELETE FROM stats WHERE model_id = ?1",
};

struct stats_group {
    sqlite3 *db;
    sqlite3_stmt *q[G_COUNT];
    model_row **models; /* the models touched, in order */
    size_t n_models, cap_models;
    stat_row **rows; /* the activations touched, in order */
    size_t n_rows, cap_rows;
    stat_row **slots; /* open addressing over rows, n_slots a power of two (or 0) */
    size_t n_slots;
    stat_row **post_rows; /* the rows of the post being run, by entry */
    size_t cap_post_rows;
    uint64_t seq;    /* posts run so far: stat_row.seen */
    uint64_t groups; /* groups run so far: stat_row.used */
    int64_t now_ms;  /* the group's time */
    /* the group's SQL failure: every request gets it */
    bool failed;
    qd_status fail_st;
    qd_err fail_err;
};

/* ---- set-up ----------------------------------------------------------------------------------
 */

qd_status qd_stats_group_new(const char *path, stats_group **out, qd_err *err)
{
    *out = NULL;
    stats_group *g = calloc(1, sizeof *g);
    if (!g) return qd_fail(err, QD_NOMEM, "out of memory");
    qd_status st = qd_stats_connect(path, false, &g->db, err);
    for (int i = 0; st == QD_OK && i < G_COUNT; i++)
        st = qd_stats_prepare(g->db, group_sql[i], &g->q[i], err);
    if (st != QD_OK) {
        qd_stats_group_free(g);
        return st;
    }
    *out = g;
    return QD_OK;
}

static void drop_row(stat_row *r)
{
    free(r->name);
    free(r->v);
    free(r);
}

/* Empties the cache (a failed group, or the end). */
static void forget_all(stats_group *g)
{
    for (size_t i = 0; i < g->n_rows; i++) drop_row(g->rows[i]);
    for (size_t i = 0; i < g->n_models; i++) {
        free(g->models[i]->name);
        free(g->models[i]);
    }
    if (g->slots) memset(g->slots, 0, g->n_slots * sizeof *g->slots);
    g->n_rows = g->n_models = 0;
}

void qd_stats_group_free(stats_group *g)
{
    if (!g) return;
    forget_all(g);
    for (int i = 0; i < G_COUNT; i++) sqlite3_finalize(g->q[i]);
    sqlite3_close(g->db);
    free(g->models);
    free(g->rows);
    free(g->slots);
    free(g->post_rows);
    free(g);
}

/* ---- SQL helpers ------------------------------------------------------------------------------
 */

/* Records the group's failure (the first one wins) and returns it. */
static qd_status group_fail(stats_group *g, const char *op)
{
    if (!g->failed) {
        g->failed = true;
        g->fail_st = qd_stats_dberr(g->db, &g->fail_err, op);
    }
    return g->fail_st;
}

static sqlite3_stmt *stmt(stats_group *g, group_stmt k)
{
    sqlite3_reset(g->q[k]);
    sqlite3_clear_bindings(g->q[k]);
    return g->q[k];
}

/* Steps st once: SQLITE_ROW or SQLITE_DONE, or a group failure (returned as -1). */
static int step(stats_group *g, sqlite3_stmt *st, const char *op)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW || rc == SQLITE_DONE) return rc;
    group_fail(g, op);
    return -1;
}

static bool run_simple(stats_group *g, group_stmt k, const char *op)
{
    return step(g, stmt(g, k), op) == SQLITE_DONE;
}

/* ---- the model cache --------------------------------------------------------------------------
 */

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

/* arr (n of *cap elements of elem bytes) with room for want: arr itself or a larger copy; NULL
 * when out of memory (arr untouched). */
static void *reserve(void *arr, size_t *cap, size_t want, size_t elem)
{
    if (want <= *cap) return arr;
    size_t c = *cap ? *cap : 16;
    while (c < want) c *= 2;
    void *p = realloc(arr, c * elem);
    if (p) *cap = c;
    return p;
}

static bool parse_averaging(const unsigned char *t, qd_averaging *out)
{
    if (!t) return false;
    if (strcmp((const char *)t, "simple") == 0)
        *out = QD_AVG_SIMPLE;
    else if (strcmp((const char *)t, "ema") == 0)
        *out = QD_AVG_EMA;
    else
        return false;
    return true;
}

/* Fills m from the database when the model is stored (live then). */
static qd_status model_load(stats_group *g, model_row *m, qd_err *err)
{
    sqlite3_stmt *st = stmt(g, G_MODEL_GET);
    if (sqlite3_bind_text(st, 1, m->name, -1, SQLITE_STATIC) != SQLITE_OK)
        return group_fail(g, "read model");
    int rc = step(g, st, "read model");
    if (rc < 0) return g->fail_st;
    if (rc == SQLITE_DONE) return QD_OK;
    m->id = sqlite3_column_int64(st, 0);
    m->live = true;
    m->conf.ema_constant = sqlite3_column_double(st, 2);
    m->conf.bootstrap_steps = sqlite3_column_int64(st, 3);
    m->posts = sqlite3_column_int64(st, 4);
    m->last_ms = sqlite3_column_int64(st, 5);
    m->created_ms = sqlite3_column_int64(st, 6);
    m->updated_ms = sqlite3_column_int64(st, 7);
    if (!parse_averaging(sqlite3_column_text(st, 1), &m->conf.averaging))
        return qd_fail(err, QD_DB, "model %s: unreadable averaging", m->name);
    return QD_OK;
}

/* The group's entry for model name, loaded on first use; not live when there is no such model. */
static qd_status model_find(stats_group *g, const char *name, model_row **out, qd_err *err)
{
    for (size_t i = 0; i < g->n_models; i++) {
        if (strcmp(g->models[i]->name, name) == 0) {
            *out = g->models[i];
            return QD_OK;
        }
    }
    model_row **arr = reserve(g->models, &g->cap_models, g->n_models + 1, sizeof *arr);
    if (!arr) return nomem(err);
    g->models = arr;
    model_row *m = calloc(1, sizeof *m);
    if (m) m->name = strdup(name);
    if (!m || !m->name) {
        free(m);
        return nomem(err);
    }
    qd_model_conf_defaults(&m->conf);
    g->models[g->n_models++] = m;
    *out = m;
    return model_load(g, m, err);
}

/* A model a post or a PUT brings into being. */
static void model_create(stats_group *g, model_row *m)
{
    m->live = true;
    m->dirty = true;
    m->created_ms = m->updated_ms = g->now_ms;
}

/* ---- the activation cache ---------------------------------------------------------------------
 */

static uint64_t row_hash(const model_row *m, const char *name)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)(uintptr_t)m;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return h;
}

static stat_row **slot_of(stats_group *g, const model_row *m, const char *name, uint64_t h)
{
    size_t mask = g->n_slots - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        stat_row *r = g->slots[i];
        if (!r || (r->hash == h && r->model == m && strcmp(r->name, name) == 0))
            return &g->slots[i];
    }
}

/* Keeps the table at most half full. */
static bool slots_grow(stats_group *g)
{
    if ((g->n_rows + 1) * 2 <= g->n_slots) return true;
    size_t n = g->n_slots ? g->n_slots * 2 : 64;
    stat_row **slots = calloc(n, sizeof *slots);
    if (!slots) return false;
    free(g->slots);
    g->slots = slots;
    g->n_slots = n;
    for (size_t i = 0; i < g->n_rows; i++) {
        stat_row *r = g->rows[i];
        *slot_of(g, r->model, r->name, r->hash) = r;
    }
    return true;
}

static bool row_alloc(stat_row *r, size_t doubles)
{
    if (doubles <= r->v_cap) return true;
    double *v = realloc(r->v, doubles * sizeof *v);
    if (!v) return false;
    r->v = v;
    r->v_cap = doubles;
    return true;
}

static size_t arrays_of(qd_stat_kind k)
{
    return k == QD_STAT_MINMAX ? N_ARRAYS : N_ARRAYS / 2;
}

static double *array_of(const stat_row *r, int which, bool second)
{
    return r->v + (size_t)r->n * (size_t)(which + (second ? 3 : 0));
}

/* Reads the stored row (the current row of G_ROW_GET) into r. */
static qd_status row_fill(sqlite3_stmt *st, stat_row *r, qd_err *err)
{
    const unsigned char *kind = sqlite3_column_text(st, 1);
    const char *shape = (const char *)sqlite3_column_text(st, 2);
    r->count = sqlite3_column_int64(st, 3);
    if (!kind || !qd_shape_parse(shape, &r->rank, r->shape, &r->n) || r->count < 1)
        return qd_fail(err, QD_DB, "activation %s: unreadable statistics row", r->name);
    r->rowid = sqlite3_column_int64(st, 0);
    r->kind = strcmp((const char *)kind, "minmax") == 0 ? QD_STAT_MINMAX : QD_STAT_ABSMAX;
    r->created_ms = sqlite3_column_int64(st, 4);
    size_t arrays = arrays_of(r->kind);
    if (!row_alloc(r, arrays * (size_t)(r->n ? r->n : 1))) return nomem(err);
    r->has_last = sqlite3_column_type(st, 5 + A_LAST) != SQLITE_NULL;
    r->has_ema = sqlite3_column_type(st, 5 + A_EMA) != SQLITE_NULL;
    for (size_t k = 0; k < arrays; k++) {
        int col = 5 + (int)k, which = (int)k % 3;
        if ((which == A_LAST && !r->has_last) || (which == A_EMA && !r->has_ema)) continue;
        if (!qd_blob_to_doubles(sqlite3_column_blob(st, col), sqlite3_column_bytes(st, col),
                                r->v + k * (size_t)r->n, r->n))
            return qd_fail(err, QD_DB, "activation %s: unreadable statistics row", r->name);
    }
    return QD_OK;
}

static qd_status row_load(stats_group *g, stat_row *r, qd_err *err)
{
    if (!r->model->id) return QD_OK; /* a model not stored has no rows */
    sqlite3_stmt *st = stmt(g, G_ROW_GET);
    if (sqlite3_bind_int64(st, 1, r->model->id) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, r->name, -1, SQLITE_STATIC) != SQLITE_OK)
        return group_fail(g, "read statistics");
    int rc = step(g, st, "read statistics");
    if (rc < 0) return g->fail_st;
    qd_status res = rc == SQLITE_ROW ? row_fill(st, r, err) : QD_OK;
    sqlite3_reset(st);
    if (res != QD_OK) {
        r->broken = true;
        r->count = 0;
    }
    return res;
}

/* The group's entry for (m, name), loaded on first use. */
static qd_status row_find(stats_group *g, model_row *m, const char *name, stat_row **out,
                          qd_err *err)
{
    uint64_t h = row_hash(m, name);
    if (g->n_slots) {
        stat_row **slot = slot_of(g, m, name, h);
        if (*slot) {
            *out = *slot;
            (*slot)->used = g->groups;
            if ((*slot)->broken)
                return qd_fail(err, QD_DB, "activation %s: unreadable statistics row", name);
            return QD_OK;
        }
    }
    stat_row **rows = reserve(g->rows, &g->cap_rows, g->n_rows + 1, sizeof *rows);
    if (!rows) return nomem(err);
    g->rows = rows;
    if (!slots_grow(g)) return nomem(err);
    stat_row *r = calloc(1, sizeof *r);
    if (r) r->name = strdup(name);
    if (!r || !r->name) {
        free(r);
        return nomem(err);
    }
    r->model = m;
    r->hash = h;
    r->used = g->groups;
    g->rows[g->n_rows++] = r;
    *slot_of(g, m, name, h) = r;
    *out = r;
    return row_load(g, r, err);
}

/* ---- keeping the cache within its budget between groups ---------------------------------------
 */

static size_t row_bytes(const stat_row *r)
{
    return sizeof *r + strlen(r->name) + 1 + r->v_cap * sizeof *r->v;
}

static int most_recent_first(const void *pa, const void *pb)
{
    const stat_row *a = *(stat_row *const *)pa, *b = *(stat_row *const *)pb;
    return a->used < b->used ? 1 : a->used > b->used ? -1 : 0;
}

/* Keeps the most recently used rows that fit budget bytes, the models they belong to, and up
 * to CACHE_MODELS others; rows that could not be read are never kept. */
static void trim_cache(stats_group *g, size_t budget)
{
    size_t bytes = 0;
    bool broken = false;
    for (size_t i = 0; i < g->n_rows; i++) {
        bytes += row_bytes(g->rows[i]);
        broken |= g->rows[i]->broken;
    }
    if (bytes <= budget && !broken && g->n_models <= CACHE_MODELS) return;
    qsort(g->rows, g->n_rows, sizeof *g->rows, most_recent_first);
    size_t keep = 0, kept_bytes = 0;
    for (size_t i = 0; i < g->n_models; i++) g->models[i]->kept = false;
    for (size_t i = 0; i < g->n_rows; i++) {
        stat_row *r = g->rows[i];
        size_t b = row_bytes(r);
        if (r->broken || kept_bytes + b > budget) {
            drop_row(r);
            continue;
        }
        kept_bytes += b;
        r->model->kept = true;
        g->rows[keep++] = r;
    }
    g->n_rows = keep;
    size_t keep_models = 0;
    for (size_t i = 0; i < g->n_models; i++) {
        model_row *m = g->models[i];
        bool in_use = m->kept || keep_models < CACHE_MODELS;
        if (in_use)
            g->models[keep_models++] = m;
        else {
            free(m->name);
            free(m);
        }
    }
    g->n_models = keep_models;
    memset(g->slots, 0, g->n_slots * sizeof *g->slots);
    for (size_t i = 0; i < g->n_rows; i++) {
        stat_row *r = g->rows[i];
        *slot_of(g, r->model, r->name, r->hash) = r;
    }
}

/* ---- a post: checked whole, then applied -------------------------------------------------------
 */

/* Can e update r? (the post's seq marks r as taken by this post) */
static qd_status row_check(stats_group *g, stat_row *r, const qd_stat_entry *e, qd_err *err)
{
    if (r->seen == g->seq)
        return qd_fail(err, QD_INVALID, "activation %s appears twice in the post", e->name);
    r->seen = g->seq;
    if (r->count == 0) {
        /* new: room for its arrays now, so that applying never fails */
        if (!row_alloc(r, arrays_of(e->kind) * (size_t)(e->n ? e->n : 1))) return nomem(err);
        return QD_OK;
    }
    if (r->kind != e->kind)
        return qd_fail(err, QD_INVALID,
                       "activation %s: the stored statistics are %s, the post has %s", e->name,
                       r->kind == QD_STAT_MINMAX ? "min/max" : "absmax",
                       e->kind == QD_STAT_MINMAX ? "min/max" : "absmax");
    bool same = r->rank == e->rank;
    for (int i = 0; same && i < r->rank; i++) same = r->shape[i] == e->shape[i];
    if (!same) {
        char stored[QD_SHAPE_TEXT_LEN], posted[QD_SHAPE_TEXT_LEN];
        qd_shape_format(r->rank, r->shape, stored);
        qd_shape_format(e->rank, e->shape, posted);
        return qd_fail(err, QD_INVALID, "activation %s: shape %s differs from the stored %s",
                       e->name, posted, stored);
    }
    if (r->count > INT64_MAX - e->count)
        return qd_fail(err, QD_INVALID, "activation %s: its count would overflow", e->name);
    return QD_OK;
}

/* What a post keeps besides the sums: the EMA while the model's averaging is ema (seeded with
 * the average so far when it starts after the first post), the last value while the count is
 * within the model's bootstrap steps. */
typedef struct update_plan {
    bool first;    /* the activation's first update */
    bool ema;      /* keep the EMA */
    bool seed_ema; /* the EMA starts now from sum / count */
    bool last;     /* keep the last value */
    double c;      /* ema_constant */
    int64_t k;     /* the entry's count: its values are sums of k updates */
} update_plan;

static void add_sums(double *restrict sum, const double *restrict vals, int64_t n, bool first)
{
    if (first)
        memcpy(sum, vals, (size_t)n * sizeof *sum);
    else
        for (int64_t i = 0; i < n; i++) sum[i] += vals[i];
}

/* The entry's mean (vals / k) into out. */
static void mean_of(double *restrict out, const double *restrict vals, int64_t n, int64_t k)
{
    if (k == 1)
        memcpy(out, vals, (size_t)n * sizeof *out);
    else
        for (int64_t i = 0; i < n; i++) out[i] = vals[i] / (double)k;
}

static void update_ema(double *restrict ema, const double *restrict vals, int64_t n,
                       const update_plan *u)
{
    if (u->first) {
        mean_of(ema, vals, n, u->k);
        return;
    }
    double c = u->c, k = (double)u->k;
    if (u->k == 1)
        for (int64_t i = 0; i < n; i++) ema[i] += c * (vals[i] - ema[i]);
    else
        for (int64_t i = 0; i < n; i++) ema[i] += c * (vals[i] / k - ema[i]);
}

/* One array half (a, or b for MINMAX) of an entry into r. */
static void apply_half(stat_row *r, const double *vals, const update_plan *u, bool second)
{
    double *sum = array_of(r, A_SUM, second), *ema = array_of(r, A_EMA, second);
    int64_t n = r->n;
    if (u->seed_ema)
        for (int64_t i = 0; i < n; i++) ema[i] = sum[i] / (double)r->count;
    if (u->ema) update_ema(ema, vals, n, u);
    if (u->last) mean_of(array_of(r, A_LAST, second), vals, n, u->k);
    add_sums(sum, vals, n, u->first);
}

static void row_apply(stats_group *g, stat_row *r, const qd_stat_entry *e, const qd_model_conf *c)
{
    update_plan u = {.first = r->count == 0, .c = c->ema_constant, .k = e->count};
    u.ema = c->averaging == QD_AVG_EMA;
    u.seed_ema = u.ema && !u.first && !r->has_ema;
    u.last = r->count + e->count <= c->bootstrap_steps;
    if (u.first) {
        r->kind = e->kind;
        r->rank = e->rank;
        memcpy(r->shape, e->shape, sizeof r->shape);
        r->n = e->n;
        r->created_ms = g->now_ms;
    }
    apply_half(r, e->a, &u, false);
    if (e->kind == QD_STAT_MINMAX) apply_half(r, e->b, &u, true);
    r->has_ema = u.ema;
    r->has_last = u.last;
    r->count += e->count;
    r->updated_ms = g->now_ms;
    r->dirty = true;
}

/* QD_OK: stored (in the group); QD_INVALID/QD_NOMEM/QD_DB: nothing of it is; a group failure
 * is also recorded in g. */
static qd_status run_post(stats_group *g, const qd_stat_post *p, qd_err *err)
{
    model_row *m = NULL;
    qd_status st = model_find(g, p->model, &m, err);
    if (st != QD_OK) return st;
    stat_row **rows = reserve(g->post_rows, &g->cap_post_rows, p->n, sizeof *rows);
    if (!rows) return nomem(err);
    g->post_rows = rows;
    g->seq++;
    for (size_t i = 0; i < p->n; i++) {
        st = row_find(g, m, p->e[i].name, &rows[i], err);
        if (st == QD_OK) st = row_check(g, rows[i], &p->e[i], err);
        if (st != QD_OK) return st;
    }
    if (m->live && m->posts == INT64_MAX)
        return qd_fail(err, QD_INVALID, "model %s: its post count would overflow", m->name);
    if (!m->live) model_create(g, m);
    for (size_t i = 0; i < p->n; i++) row_apply(g, rows[i], &p->e[i], &m->conf);
    m->posts++;
    m->last_ms = g->now_ms;
    m->dirty = true;
    return QD_OK;
}

/* ---- reset and settings -----------------------------------------------------------------------
 */

static qd_status run_reset(stats_group *g, const char *model, qd_err *err)
{
    model_row *m = NULL;
    qd_status st = model_find(g, model, &m, err);
    if (st != QD_OK) return st;
    if (!m->live) return qd_fail(err, QD_NOT_FOUND, "model %s not found", model);
    if (m->id) {
        sqlite3_stmt *q = stmt(g, G_ROWS_DELETE);
        if (sqlite3_bind_int64(q, 1, m->id) != SQLITE_OK) return group_fail(g, "reset");
        if (step(g, q, "reset") < 0) return g->fail_st;
    }
    for (size_t i = 0; i < g->n_rows; i++) {
        stat_row *r = g->rows[i];
        if (r->model != m) continue;
        r->rowid = 0;
        r->count = 0;
        r->dirty = false;
    }
    m->posts = 0;
    m->last_ms = 0;
    m->dirty = true;
    return QD_OK;
}

static qd_status run_put_model(stats_group *g, stats_req *r, qd_err *err)
{
    model_row *m = NULL;
    qd_status st = model_find(g, r->model, &m, err);
    if (st != QD_OK) return st;
    r->created = !m->live;
    if (!m->live) model_create(g, m);
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
    bool insert = m->id == 0;
    sqlite3_stmt *st = stmt(g, insert ? G_MODEL_INSERT : G_MODEL_UPDATE);
    int at = 1;
    int rc = insert ? sqlite3_bind_text(st, at++, m->name, -1, SQLITE_STATIC)
                    : sqlite3_bind_int64(st, at++, m->id);
    rc |= sqlite3_bind_text(st, at++, averaging_names[m->conf.averaging], -1, SQLITE_STATIC);
    rc |= sqlite3_bind_double(st, at++, m->conf.ema_constant);
    rc |= sqlite3_bind_int64(st, at++, m->conf.bootstrap_steps);
    rc |= sqlite3_bind_int64(st, at++, m->posts);
    rc |= m->last_ms ? sqlite3_bind_int64(st, at++, m->last_ms) : sqlite3_bind_null(st, at++);
    if (insert) rc |= sqlite3_bind_int64(st, at++, m->created_ms);
    rc |= sqlite3_bind_int64(st, at++, m->updated_ms);
    if (rc != SQLITE_OK) return group_fail(g, "write model"), false;
    int s = step(g, st, "write model");
    if (s < 0) return false;
    if (insert) {
        if (s != SQLITE_ROW) return group_fail(g, "write model: no id"), false;
        m->id = sqlite3_column_int64(st, 0);
    }
    sqlite3_reset(st);
    m->dirty = false;
    return true;
}

/* Binds the arrays of r from parameter at on, in the order sum_a, last_a, ema_a, sum_b, last_b,
 * ema_b; NULL for the second half of ABSMAX and for the last values and EMA not kept. The arrays
 * stay put until the statement is reset, so SQLite reads them in place. */
static int bind_arrays(sqlite3_stmt *st, int at, const stat_row *r)
{
    int rc = SQLITE_OK, bytes = (int)(r->n * 8);
    for (int k = 0; k < N_ARRAYS; k++) {
        bool second = k >= 3;
        int which = k % 3;
        if ((second && r->kind != QD_STAT_MINMAX) || (which == A_LAST && !r->has_last) ||
            (which == A_EMA && !r->has_ema)) {
            rc |= sqlite3_bind_null(st, at + k);
            continue;
        }
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        rc |= sqlite3_bind_blob(st, at + k, array_of(r, which, second), bytes, SQLITE_STATIC);
#else
#error "the statistics store writes little-endian float64 blobs; add a byte swap for this host"
#endif
    }
    return rc;
}

static bool flush_row(stats_group *g, stat_row *r)
{
    bool insert = r->rowid == 0;
    sqlite3_stmt *st = stmt(g, insert ? G_ROW_INSERT : G_ROW_UPDATE);
    int rc;
    if (insert) {
        char shape[QD_SHAPE_TEXT_LEN];
        qd_shape_format(r->rank, r->shape, shape);
        rc = sqlite3_bind_int64(st, 1, r->model->id);
        rc |= sqlite3_bind_text(st, 2, r->name, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 3, qd_stat_kind_name(r->kind), -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 4, shape, -1, SQLITE_TRANSIENT);
        rc |= sqlite3_bind_int64(st, 5, r->count);
        rc |= sqlite3_bind_int64(st, 6, r->created_ms);
        rc |= sqlite3_bind_int64(st, 7, r->updated_ms);
        rc |= bind_arrays(st, 8, r);
    } else {
        rc = sqlite3_bind_int64(st, 1, r->rowid);
        rc |= sqlite3_bind_int64(st, 2, r->count);
        rc |= sqlite3_bind_int64(st, 3, r->updated_ms);
        rc |= bind_arrays(st, 4, r);
    }
    if (rc != SQLITE_OK) return group_fail(g, "write statistics"), false;
    bool ok = step(g, st, "write statistics") >= 0;
    if (ok && insert) r->rowid = sqlite3_last_insert_rowid(g->db);
    r->dirty = !ok;
    sqlite3_reset(st); /* SQLite lets go of the arrays */
    sqlite3_clear_bindings(st);
    return ok;
}

/* Models first: a model this group created gets its id before its rows are inserted. */
static bool flush_all(stats_group *g)
{
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
        r->st = run_post(g, r->post, &r->err);
        break;
    case QD_REQ_RESET:
        r->st = run_reset(g, r->model, &r->err);
        break;
    case QD_REQ_PUT_MODEL:
        r->st = run_put_model(g, r, &r->err);
        break;
    }
}

size_t qd_stats_group_run(stats_group *g, stats_req *list, size_t cache_budget, qd_metrics *m)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    g->failed = false;
    g->now_ms = now_ms();
    if (run_simple(g, G_BEGIN, "begin the statistics transaction")) {
        for (stats_req *r = list; r && !g->failed; r = r->next) run_one(g, r);
        if (!g->failed && flush_all(g)) run_simple(g, G_COMMIT, "commit the statistics");
        if (g->failed && !sqlite3_get_autocommit(g->db)) run_simple(g, G_ROLLBACK, "rollback");
    }
    if (g->failed)
        forget_all(g); /* the database went back: so does the cache */
    else
        trim_cache(g, cache_budget);
    g->groups++;
    size_t posts = 0;
    for (stats_req *r = list; r; r = r->next) {
        if (g->failed) {
            r->st = g->fail_st;
            r->err = g->fail_err;
        } else if (r->kind == QD_REQ_POST && r->st == QD_OK) {
            posts++;
            if (m) qd_metrics_stats_post(m, r->post->n);
        }
    }
    if (!g->failed && m) qd_metrics_stats_commit(m, posts, seconds_since(&t0));
    return g->failed ? 0 : posts;
}
