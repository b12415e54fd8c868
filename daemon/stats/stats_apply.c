/* stats_apply.c -- one entry of a post against one activation: whether it may update it (kind,
 * shape, a name twice, the count), and the arithmetic: Qwix's SimpleMovingAverage sums and
 * count (a merge adds a dump's), the exponential moving average v += c * (new - v) while the
 * model's averaging is ema, and the last value while the count is within its bootstrap steps.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <string.h>

#include "stats_group.h"

static qd_status nomem(qd_err *err)
{
    return qd_fail(err, QD_NOMEM, "out of memory");
}

qd_status qd_stat_check(stats_group *g, stat_row *r, const qd_stat_entry *e, qd_err *err)
{
    if (r->seen == g->seq)
        return qd_fail(err, QD_INVALID, "activation %s appears twice in the post", e->name);
    r->seen = g->seq;
    if (r->count == 0) {
        /* new: room for its arrays now, so that applying never fails */
        if (!qd_cache_row_alloc(r, qd_stat_arrays(e->kind) * (size_t)(e->n ? e->n : 1)))
            return nomem(err);
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
    double *sum = qd_stat_array(r, A_SUM, second), *ema = qd_stat_array(r, A_EMA, second);
    int64_t n = r->n;
    if (u->seed_ema)
        for (int64_t i = 0; i < n; i++) ema[i] = sum[i] / (double)r->count;
    if (u->ema) update_ema(ema, vals, n, u);
    if (u->last) mean_of(qd_stat_array(r, A_LAST, second), vals, n, u->k);
    add_sums(sum, vals, n, u->first);
}

void qd_stat_apply(stats_group *g, stat_row *r, const qd_stat_entry *e, const qd_model_conf *c)
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
