/* stats_apply.c -- one entry of a post against one activation: whether it may update it (its set
 * of keys fixed by its first post, SPEC section 9; shapes, a name twice, the count), and the
 * arithmetic: Qwix's SimpleMovingAverage sums and count (a merge adds a dump's), the exponential
 * moving average v += c * (new - v) while the model's averaging is ema, and the last value while
 * the count is within its bootstrap steps. SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <string.h>

#include "stats_group.h"

static qd_status nomem(qd_err *err)
{
    return qd_fail(err, QD_NOMEM, "out of memory");
}

/* The keys of an activation (SPEC section 9: fixed by its first post), as a bit set. */
enum { K_ABSMAX = 1, K_MIN = 2, K_MAX = 4, K_MEAN_SQ = 8 };
static const char *const key_names[] = {"absmax", "min", "max", "mean_sq"};

static unsigned key_set(qd_stat_kind kind, int64_t n_sq)
{
    unsigned k = kind == QD_STAT_ABSMAX ? K_ABSMAX : kind == QD_STAT_MINMAX ? K_MIN | K_MAX : 0;
    return k | (n_sq > 0 ? K_MEAN_SQ : 0);
}

/* "absmax, mean_sq" into buf. */
static void key_list(unsigned set, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < 4 && at < cap; i++)
        if (set & 1u << i)
            at += (size_t)snprintf(buf + at, cap - at, "%s%s", at ? ", " : "", key_names[i]);
}

/* The first key of set a that set b lacks. */
static const char *first_missing(unsigned a, unsigned b)
{
    for (int i = 0; i < 4; i++)
        if ((a & 1u << i) && !(b & 1u << i)) return key_names[i];
    return "?";
}

static qd_status key_set_differs(const stat_row *r, const qd_stat_entry *e, qd_err *err)
{
    unsigned stored = key_set(r->kind, r->n_sq), posted = key_set(e->kind, e->n_sq);
    char have[64], got[64];
    key_list(stored, have, sizeof have);
    key_list(posted, got, sizeof got);
    bool lacks = (stored & ~posted) != 0;
    return qd_fail(err, QD_INVALID,
                   "activation %s: its statistics are {%s}, fixed by its first post; the post has "
                   "{%s} (%s %s); DELETE the model's statistics to start over",
                   e->name, have, got, lacks ? "without" : "with",
                   lacks ? first_missing(stored, posted) : first_missing(posted, stored));
}

static bool same_shape(const stat_row *r, const qd_stat_entry *e)
{
    bool same = r->rank == e->rank;
    for (int i = 0; same && i < r->rank; i++) same = r->shape[i] == e->shape[i];
    return same;
}

qd_status qd_stat_check(stats_group *g, stat_row *r, const qd_stat_entry *e, qd_err *err)
{
    if (r->seen == g->seq)
        return qd_fail(err, QD_INVALID, "activation %s appears twice in the post", e->name);
    r->seen = g->seq;
    if (r->count == 0) {
        /* new: room for its arrays now, so that applying never fails */
        if (!qd_cache_row_alloc(r, qd_stat_doubles(e->kind, e->n, e->n_sq))) return nomem(err);
        return QD_OK;
    }
    if (key_set(r->kind, r->n_sq) != key_set(e->kind, e->n_sq)) return key_set_differs(r, e, err);
    if (!same_shape(r, e)) {
        char stored[QD_SHAPE_TEXT_LEN], posted[QD_SHAPE_TEXT_LEN];
        qd_shape_format(r->rank, r->shape, stored);
        qd_shape_format(e->rank, e->shape, posted);
        return qd_fail(err, QD_INVALID, "activation %s: shape %s differs from the stored %s",
                       e->name, posted, stored);
    }
    if (r->n_sq != e->n_sq)
        return qd_fail(err, QD_INVALID,
                       "activation %s: mean_sq has %lld values, the stored one %lld (shape [n], n "
                       "the input features)",
                       e->name, (long long)e->n_sq, (long long)r->n_sq);
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

/* One part (a, b or sq) of an entry into r: vals of n values. */
static void apply_part(stat_row *r, int part, const double *vals, int64_t n, const update_plan *u)
{
    double *sum = qd_stat_array(r, A_SUM, part), *ema = qd_stat_array(r, A_EMA, part);
    if (u->seed_ema)
        for (int64_t i = 0; i < n; i++) ema[i] = sum[i] / (double)r->count;
    if (u->ema) update_ema(ema, vals, n, u);
    if (u->last) mean_of(qd_stat_array(r, A_LAST, part), vals, n, u->k);
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
        r->n_sq = e->n_sq;
        r->created_ms = g->now_ms;
    }
    if (e->kind != QD_STAT_NONE) apply_part(r, P_A, e->a, e->n, &u);
    if (e->kind == QD_STAT_MINMAX) apply_part(r, P_B, e->b, e->n, &u);
    if (e->n_sq > 0) apply_part(r, P_SQ, e->sq, e->n_sq, &u);
    r->has_ema = u.ema;
    r->has_last = u.last;
    r->count += e->count;
    r->updated_ms = g->now_ms;
    r->dirty = true;
}
