/* stats_pending.c -- what the reads see of the posts that are in the delta log but not yet
 * folded into SQLite: a copy, made by the writer after each logged group, of every
 * activation those posts changed (its count, time, sums and the last value and EMA it keeps)
 * and of each such model's post count and time. A read holds the overlay's mutex for its whole
 * SQLite read, and the writer empties it only after a fold committed, so a read sees either the
 * folded rows or the rows plus this copy: the same numbers either way, bit for bit, since both
 * come from the same arithmetic (stats_apply.c).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "stats_group.h"

void qd_pending_init(qd_pending *p)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
}

static void row_free(qd_pend_row *r)
{
    free(r->model);
    free(r->name);
    free(r->v);
}

void qd_pending_clear(qd_pending *p)
{
    for (size_t i = 0; i < p->n_rows; i++) row_free(&p->rows[i]);
    for (size_t i = 0; i < p->n_models; i++) free(p->models[i].name);
    p->n_rows = p->n_models = 0;
}

void qd_pending_free(qd_pending *p)
{
    qd_pending_clear(p);
    free(p->rows);
    free(p->models);
    pthread_mutex_destroy(&p->mu);
}

static uint64_t name_hash(const char *model, const char *name)
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *s = model; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL;
    for (const char *s = name; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* ---- the writer's side --------------------------------------------------------------------------
 */

bool qd_pending_put_model(qd_pending *p, const model_row *m)
{
    qd_pend_model *pm = NULL;
    for (size_t i = 0; i < p->n_models && !pm; i++)
        if (strcmp(p->models[i].name, m->name) == 0) pm = &p->models[i];
    if (!pm) {
        qd_pend_model *arr =
            qd_group_reserve(p->models, &p->cap_models, p->n_models + 1, sizeof *arr);
        if (!arr) return false;
        p->models = arr;
        char *name = strdup(m->name);
        if (!name) return false;
        pm = &p->models[p->n_models++];
        pm->name = name;
    }
    pm->posts = m->posts;
    pm->last_ms = m->last_ms;
    return true;
}

/* Copies the arrays r keeps: the sums always, the last value and the EMA when kept. */
static void copy_arrays(qd_pend_row *d, const stat_row *r)
{
    for (int part = 0; part < N_PARTS; part++) {
        int64_t len = qd_stat_part_len(r->kind, r->n, r->n_sq, part);
        if (len == 0) continue;
        for (int which = 0; which < A_PER_PART; which++) {
            if ((which == A_LAST && !r->has_last) || (which == A_EMA && !r->has_ema)) continue;
            size_t at = (size_t)(qd_stat_array(r, which, part) - r->v);
            memcpy(d->v + at, r->v + at, (size_t)len * sizeof *d->v);
        }
    }
}

bool qd_pending_put_row(qd_pending *p, stat_row *r)
{
    qd_pend_row *d = r->pend ? &p->rows[r->pend - 1] : NULL;
    if (!d) {
        qd_pend_row *arr = qd_group_reserve(p->rows, &p->cap_rows, p->n_rows + 1, sizeof *arr);
        if (!arr) return false;
        p->rows = arr;
        d = &p->rows[p->n_rows];
        memset(d, 0, sizeof *d);
        d->model = strdup(r->model->name);
        d->name = strdup(r->name);
        if (!d->model || !d->name) {
            row_free(d);
            return false;
        }
        d->hash = name_hash(d->model, d->name);
        r->pend = ++p->n_rows;
    }
    size_t doubles = qd_stat_doubles(r->kind, r->n, r->n_sq);
    if (d->v_len != doubles) {
        double *v = realloc(d->v, doubles * sizeof *v);
        if (!v) return false;
        d->v = v;
        d->v_len = doubles;
    }
    d->kind = r->kind;
    d->rank = r->rank;
    memcpy(d->shape, r->shape, sizeof d->shape);
    d->n = r->n;
    d->n_sq = r->n_sq;
    d->count = r->count;
    d->updated_ms = r->updated_ms;
    d->has_last = r->has_last;
    d->has_ema = r->has_ema;
    copy_arrays(d, r);
    return true;
}

/* ---- the reader's side --------------------------------------------------------------------------
 */

const qd_pend_model *qd_pending_model(const qd_pending *p, const char *model)
{
    for (size_t i = 0; i < p->n_models; i++)
        if (strcmp(p->models[i].name, model) == 0) return &p->models[i];
    return NULL;
}

const qd_pend_row *qd_pending_row(const qd_pending *p, const char *model, const char *name)
{
    if (p->n_rows == 0 || !model || !name) return NULL;
    uint64_t h = name_hash(model, name);
    for (size_t i = 0; i < p->n_rows; i++) {
        const qd_pend_row *r = &p->rows[i];
        if (r->hash == h && strcmp(r->name, name) == 0 && strcmp(r->model, model) == 0) return r;
    }
    return NULL;
}

/* The row's array which of part, in stat_row's layout (stats_group.h). */
static const double *pend_array(const qd_pend_row *r, int which, int part)
{
    stat_row view = {.kind = r->kind, .n = r->n, .n_sq = r->n_sq, .v = r->v};
    return qd_stat_array(&view, which, part);
}

static double *dup_array(const double *src, int64_t n)
{
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    if (d && n) memcpy(d, src, (size_t)n * sizeof *d);
    return d;
}

/* As stats_read.c's calibration: the last post while bootstrapping, the EMA when the model's
 * averaging is ema and it is kept, else sum / count. */
static double *calibration(const qd_pend_row *r, const qd_model_conf *c, bool bootstrapping,
                           int part, int64_t n)
{
    if (bootstrapping) return dup_array(pend_array(r, A_LAST, part), n);
    if (c->averaging == QD_AVG_EMA && r->has_ema) return dup_array(pend_array(r, A_EMA, part), n);
    const double *sum = pend_array(r, A_SUM, part);
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    for (int64_t i = 0; d && i < n; i++) d[i] = sum[i] / (double)r->count;
    return d;
}

bool qd_pending_avg(const qd_pend_row *r, const qd_model_conf *c, qd_stat_avg *a)
{
    char *name = strdup(r->name);
    if (!name) return false;
    memset(a, 0, sizeof *a);
    a->name = name;
    a->kind = r->kind;
    a->rank = r->rank;
    memcpy(a->shape, r->shape, sizeof a->shape);
    a->n = r->n;
    a->n_sq = r->n_sq;
    a->count = r->count;
    a->updated_ms = r->updated_ms;
    a->bootstrapping = r->count <= c->bootstrap_steps && r->has_last;
    bool ok = true;
    if (r->kind != QD_STAT_NONE) {
        a->sum_a = dup_array(pend_array(r, A_SUM, P_A), r->n);
        a->a = calibration(r, c, a->bootstrapping, P_A, r->n);
        ok = a->sum_a && a->a;
    }
    if (ok && r->kind == QD_STAT_MINMAX) {
        a->sum_b = dup_array(pend_array(r, A_SUM, P_B), r->n);
        a->b = calibration(r, c, a->bootstrapping, P_B, r->n);
        ok = a->sum_b && a->b;
    }
    if (ok && r->n_sq > 0) {
        a->sum_sq = dup_array(pend_array(r, A_SUM, P_SQ), r->n_sq);
        a->sq = calibration(r, c, a->bootstrapping, P_SQ, r->n_sq);
        ok = a->sum_sq && a->sq;
    }
    return ok;
}
