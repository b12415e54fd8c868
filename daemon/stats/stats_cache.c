/* stats_cache.c -- the stats writer's cache: models by name (with the bytes of sums each
 * holds, what the quota counts) and activations by (model, name), each loaded through the
 * engine (stats_engine.h) on first use and decoded once, then updated in memory and written by the
 * group. It outlives the group (the writer is the only one that changes these tables), within a
 * memory budget, least recently used rows leaving first. SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "stats_group.h"

/* The most models kept between groups besides those of the activations kept. */
#define CACHE_MODELS 2048

static qd_status nomem(qd_err *err)
{
    return qd_fail(err, QD_NOMEM, "out of memory");
}

/* ---- models -----------------------------------------------------------------------------------
 */

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

/* Fills m from the database when the model is stored (live then), with the bytes of sums it
 * holds (its rows are not in the cache yet: a model is loaded before any of them). */
static qd_status model_load(stats_group *g, model_row *m, qd_err *err)
{
    qd_stat_model_rec rec = {.name = m->name};
    bool found = false;
    qd_err e;
    qd_status st = g->ops->model_lock(g->w, &rec, &found, &e);
    if (st != QD_OK) return qd_group_fail(g, st, &e);
    if (!found) return QD_OK;
    if (!parse_averaging((const unsigned char *)rec.averaging, &m->conf.averaging))
        return qd_fail(err, QD_DB, "model %s: unreadable averaging", m->name);
    m->id = rec.id;
    m->live = true;
    m->conf.ema_constant = rec.ema_constant;
    m->conf.bootstrap_steps = rec.bootstrap_steps;
    m->posts = rec.posts;
    m->last_ms = rec.last_ms;
    m->created_ms = rec.created_ms;
    m->updated_ms = rec.updated_ms;
    st = g->ops->model_bytes(g->w, m->id, &m->stats_bytes, &e);
    return st == QD_OK ? QD_OK : qd_group_fail(g, st, &e);
}

qd_status qd_cache_model(stats_group *g, const char *name, model_row **out, qd_err *err)
{
    for (size_t i = 0; i < g->n_models; i++) {
        if (strcmp(g->models[i]->name, name) == 0) {
            *out = g->models[i];
            return QD_OK;
        }
    }
    model_row **arr = qd_group_reserve(g->models, &g->cap_models, g->n_models + 1, sizeof *arr);
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

void qd_cache_model_create(stats_group *g, model_row *m)
{
    m->live = true;
    m->dirty = true;
    m->created_ms = m->updated_ms = g->now_ms;
}

/* ---- activations ------------------------------------------------------------------------------
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

bool qd_cache_row_alloc(stat_row *r, size_t doubles)
{
    if (doubles <= r->v_cap) return true;
    double *v = realloc(r->v, doubles * sizeof *v);
    if (!v) return false;
    r->v = v;
    r->v_cap = doubles;
    return true;
}

/* Reads the stored row into r. */
static qd_status row_decode(stat_row *r, const qd_stat_row_rec *rec, qd_err *err)
{
    r->n_sq = rec->sq_len;
    r->count = rec->count;
    bool ok = qd_stat_kind_parse(rec->kind, &r->kind) && r->count >= 1 && r->n_sq >= 0 &&
              r->n_sq <= QD_STATS_MAX_ELEMS;
    if (ok && r->kind == QD_STAT_NONE) {
        r->rank = 0;
        r->n = 0;
        ok = r->n_sq > 0;
    } else if (ok) {
        ok = qd_shape_parse(rec->shape, &r->rank, r->shape, &r->n);
    }
    if (!ok) return qd_fail(err, QD_DB, "activation %s: unreadable statistics row", r->name);
    r->rowid = rec->id;
    r->created_ms = rec->created_ms;
    if (!qd_cache_row_alloc(r, qd_stat_doubles(r->kind, r->n, r->n_sq))) return nomem(err);
    /* the kept arrays: the range statistic's columns tell, or mean_sq's for mean_sq alone */
    int told = r->kind == QD_STAT_NONE ? P_SQ * A_PER_PART : 0;
    r->has_last = rec->arr[told + A_LAST] != NULL;
    r->has_ema = rec->arr[told + A_EMA] != NULL;
    for (int k = 0; k < N_PARTS * A_PER_PART; k++) {
        int part = k / A_PER_PART, which = k % A_PER_PART;
        if (!qd_stat_has_part(r->kind, r->n_sq, part) || (which == A_LAST && !r->has_last) ||
            (which == A_EMA && !r->has_ema))
            continue;
        if (rec->arr_bytes[k] > INT32_MAX ||
            !qd_blob_to_doubles(rec->arr[k], (int)rec->arr_bytes[k], qd_stat_array(r, which, part),
                                qd_stat_part_len(r->kind, r->n, r->n_sq, part)))
            return qd_fail(err, QD_DB, "activation %s: unreadable statistics row", r->name);
    }
    return QD_OK;
}

/* The engine's row_lock callback: a row read but not decoded marks r broken. */
static qd_status row_fill(void *ctx, const qd_stat_row_rec *rec, qd_err *err)
{
    stat_row *r = ctx;
    qd_status st = row_decode(r, rec, err);
    r->broken = st != QD_OK;
    return st;
}

static qd_status row_load(stats_group *g, stat_row *r, qd_err *err)
{
    if (!r->model->id) return QD_OK; /* a model not stored has no rows */
    bool found = false;
    qd_err e;
    qd_status st = g->ops->row_lock(g->w, r->model->id, r->name, row_fill, r, &found, &e);
    if (st == QD_OK) return QD_OK;
    if (!r->broken) return qd_group_fail(g, st, &e); /* the engine failed */
    /* the row was read but cannot be decoded: this activation is broken, the group goes on */
    *err = e;
    r->count = 0;
    return st;
}

qd_status qd_cache_row(stats_group *g, model_row *m, const char *name, stat_row **out, qd_err *err)
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
    stat_row **rows = qd_group_reserve(g->rows, &g->cap_rows, g->n_rows + 1, sizeof *rows);
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

model_row *qd_cache_find_model(stats_group *g, const char *name)
{
    for (size_t i = 0; i < g->n_models; i++)
        if (strcmp(g->models[i]->name, name) == 0) return g->models[i];
    return NULL;
}

stat_row *qd_cache_find_row(stats_group *g, const model_row *m, const char *name)
{
    if (!g->n_slots) return NULL;
    return *slot_of(g, m, name, row_hash(m, name));
}

static void drop_row(stat_row *r)
{
    free(r->name);
    free(r->v);
    free(r);
}

void qd_cache_forget(stats_group *g)
{
    g->n_keys = 0; /* they point at the models; a replay records them again */
    for (size_t i = 0; i < g->n_rows; i++) drop_row(g->rows[i]);
    for (size_t i = 0; i < g->n_models; i++) {
        free(g->models[i]->name);
        free(g->models[i]);
    }
    if (g->slots) memset(g->slots, 0, g->n_slots * sizeof *g->slots);
    g->n_rows = g->n_models = 0;
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
void qd_cache_trim(stats_group *g, size_t budget)
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
    if (g->slots) memset(g->slots, 0, g->n_slots * sizeof *g->slots);
    for (size_t i = 0; i < g->n_rows; i++) {
        stat_row *r = g->rows[i];
        *slot_of(g, r->model, r->name, r->hash) = r;
    }
}
