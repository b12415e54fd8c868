/* stats_read.c -- the statistics' reads on their own connection (WAL: never waiting for the
 * writer): the models with their counters and the bytes of sums each holds, one model's settings,
 * and a model's activations with the calibration its averaging gives (sum / count, the EMA, or the
 * last post while bootstrapping), optionally filtered by a PCRE2 full match on the name.
 * SPDX-License-Identifier: Apache-2.0
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "stats_engine.h"
#include "stats_internal.h"
#include "timefmt.h"

/* ---- one read transaction under the reader's mutex ---------------------------------------------
 */

typedef qd_status (*read_fn)(qd_stats *s, void *ctx, qd_err *err);

static qd_status read_txn(qd_stats *s, read_fn fn, void *ctx, qd_err *err)
{
    pthread_mutex_lock(&s->rmu);
    /* held for the whole read: the writer empties the overlay only after a fold committed, so
     * this read sees the rows folded or the rows before the fold plus the overlay (the same) */
    pthread_mutex_lock(&s->pend.mu);
    qd_status st = s->ops->read_begin(s->rd, err);
    if (st == QD_OK) {
        st = fn(s, ctx, err);
        qd_status end = s->ops->read_end(s->rd, st == QD_OK, err);
        if (st == QD_OK) st = end;
    }
    pthread_mutex_unlock(&s->pend.mu);
    pthread_mutex_unlock(&s->rmu);
    return st;
}

static qd_status parse_averaging(const char *t, qd_averaging *out, qd_err *err)
{
    if (strcmp(t, "simple") == 0)
        *out = QD_AVG_SIMPLE;
    else if (strcmp(t, "ema") == 0)
        *out = QD_AVG_EMA;
    else
        return qd_fail(err, QD_DB, "unreadable averaging in the database");
    return QD_OK;
}

/* Model's id and settings: *id and *c, QD_NOT_FOUND when there is no such model. */
static qd_status load_conf(qd_stats *s, const char *model, int64_t *id, qd_model_conf *c,
                           qd_err *err)
{
    qd_stat_model_rec rec = {.name = model};
    bool found = false;
    qd_status st = s->ops->read_conf(s->rd, &rec, &found, err);
    if (st != QD_OK) return st;
    if (!found) return qd_fail(err, QD_NOT_FOUND, "model %s not found", model);
    *id = rec.id;
    c->ema_constant = rec.ema_constant;
    c->bootstrap_steps = rec.bootstrap_steps;
    return parse_averaging(rec.averaging, &c->averaging, err);
}

/* ---- models -----------------------------------------------------------------------------------
 */

/* A model's row, with its post count and time from the overlay when posts of it are unfolded. */
static json_t *model_json(const qd_stat_model_rec *m, const qd_pending *pend)
{
    char when[QD_TIME_LEN];
    const qd_pend_model *pm = m->name ? qd_pending_model(pend, m->name) : NULL;
    int64_t posts = pm ? pm->posts : m->posts;
    int64_t last = pm ? pm->last_ms : m->last_ms;
    json_t *updated = last == 0 ? json_null() : json_string(qd_iso8601(last, when));
    return json_pack("{s:s,s:s,s:f,s:I,s:I,s:I,s:o,s:I}", "name", m->name ? m->name : "",
                     "averaging", m->averaging, "ema_constant", m->ema_constant, "bootstrap_steps",
                     (json_int_t)m->bootstrap_steps, "activations", (json_int_t)m->activations,
                     "posts", (json_int_t)posts, "updated_at", updated, "stats_bytes",
                     (json_int_t)m->stats_bytes);
}

typedef struct models_ctx {
    qd_stats *s;
    json_t *list;
} models_ctx;

static qd_status model_fn(void *ctx, const qd_stat_model_rec *m, qd_err *err)
{
    models_ctx *c = ctx;
    json_t *j = model_json(m, &c->s->pend);
    if (!j || json_array_append_new(c->list, j) != 0)
        return qd_fail(err, QD_NOMEM, "out of memory listing models");
    return QD_OK;
}

static qd_status models_fn(qd_stats *s, void *ctx, qd_err *err)
{
    models_ctx c = {s, ctx};
    return s->ops->read_models(s->rd, model_fn, &c, err);
}

qd_status qd_stats_models(qd_stats *s, json_t **out, qd_err *err)
{
    *out = json_array();
    if (!*out) return qd_fail(err, QD_NOMEM, "out of memory");
    qd_status st = read_txn(s, models_fn, *out, err);
    if (st != QD_OK) {
        json_decref(*out);
        *out = NULL;
    }
    return st;
}

typedef struct conf_ctx {
    const char *model;
    qd_model_conf *c;
} conf_ctx;

static qd_status conf_fn(qd_stats *s, void *p, qd_err *err)
{
    conf_ctx *c = p;
    int64_t id = 0;
    return load_conf(s, c->model, &id, c->c, err);
}

qd_status qd_stats_model_conf(qd_stats *s, const char *model, qd_model_conf *c, qd_err *err)
{
    if (!model) return qd_fail(err, QD_INVALID, "no model");
    conf_ctx ctx = {model, c};
    return read_txn(s, conf_fn, &ctx, err);
}

/* ---- a model's activations --------------------------------------------------------------------
 */

typedef struct rows_ctx {
    const char *model;
    pcre2_code *re; /* or NULL: every activation */
    pcre2_match_data *md;
    qd_stat_avg *v;
    size_t n, cap;
} rows_ctx;

static double *doubles_col(const qd_stat_row_rec *r, int k, int64_t n, bool *ok)
{
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    if (!d) return NULL;
    if (r->arr_bytes[k] > INT32_MAX || !qd_blob_to_doubles(r->arr[k], (int)r->arr_bytes[k], d, n)) {
        *ok = false;
        free(d);
        return NULL;
    }
    return d;
}

/* The calibration of n values of part: the last post while bootstrapping, else the EMA (when
 * kept: a model switched to ema has none until its next post, and the EMA starts from
 * sum / count then), else sum / count. */
static double *calibration(const qd_stat_row_rec *r, const qd_model_conf *c, const qd_stat_avg *a,
                           const double *sum, int64_t n, int part, bool *ok)
{
    int at = part * QD_ARR_PER_PART;
    if (a->bootstrapping) return doubles_col(r, at + QD_ARR_LAST, n, ok);
    if (c->averaging == QD_AVG_EMA && r->arr[at + QD_ARR_EMA])
        return doubles_col(r, at + QD_ARR_EMA, n, ok);
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    for (int64_t i = 0; d && i < n; i++) d[i] = sum[i] / (double)a->count;
    return d;
}

static void avg_clear(qd_stat_avg *a)
{
    free(a->name);
    free(a->sum_a);
    free(a->sum_b);
    free(a->a);
    free(a->b);
    free(a->sum_sq);
    free(a->sq);
    memset(a, 0, sizeof *a);
}

/* The kind, shape and lengths of r into *a; false when unreadable. */
static bool read_layout(const qd_stat_row_rec *r, qd_stat_avg *a)
{
    a->n_sq = r->sq_len;
    if (!qd_stat_kind_parse(r->kind, &a->kind) || a->n_sq < 0 || a->n_sq > QD_STATS_MAX_ELEMS)
        return false;
    if (a->kind == QD_STAT_NONE) return a->n_sq > 0; /* rank 0, n 0 */
    return qd_shape_parse(r->shape, &a->rank, a->shape, &a->n);
}

/* Row r into *a (cleared on failure). Bootstrapping needs the last post, kept only while
 * count <= bootstrap_steps when it was stored: raising bootstrap_steps later does not bring back
 * a last value that was not kept. */
static qd_status read_row(const qd_stat_row_rec *r, const qd_model_conf *c, qd_stat_avg *a,
                          qd_err *err)
{
    memset(a, 0, sizeof *a);
    if (!r->name || !read_layout(r, a)) return qd_fail(err, QD_DB, "an unreadable statistics row");
    a->count = r->count;
    a->updated_ms = r->updated_ms;
    bool range = a->kind != QD_STAT_NONE, minmax = a->kind == QD_STAT_MINMAX, sq = a->n_sq > 0;
    int last = (range ? QD_PART_A : QD_PART_SQ) * QD_ARR_PER_PART + QD_ARR_LAST;
    a->bootstrapping = a->count <= c->bootstrap_steps && r->arr[last] != NULL;
    bool ok = true;
    a->name = strdup(r->name);
    if (range) a->sum_a = doubles_col(r, QD_PART_A * QD_ARR_PER_PART + QD_ARR_SUM, a->n, &ok);
    if (minmax) a->sum_b = doubles_col(r, QD_PART_B * QD_ARR_PER_PART + QD_ARR_SUM, a->n, &ok);
    if (sq) a->sum_sq = doubles_col(r, QD_PART_SQ * QD_ARR_PER_PART + QD_ARR_SUM, a->n_sq, &ok);
    if (a->sum_a) a->a = calibration(r, c, a, a->sum_a, a->n, QD_PART_A, &ok);
    if (a->sum_b) a->b = calibration(r, c, a, a->sum_b, a->n, QD_PART_B, &ok);
    if (a->sum_sq) a->sq = calibration(r, c, a, a->sum_sq, a->n_sq, QD_PART_SQ, &ok);
    qd_status res = QD_OK;
    if (!ok || a->count < 1)
        res = qd_fail(err, QD_DB, "activation %s: unreadable sums", r->name);
    else if (!a->name || (range && (!a->sum_a || !a->a)) || (minmax && (!a->sum_b || !a->b)) ||
             (sq && (!a->sum_sq || !a->sq)))
        res = qd_fail(err, QD_NOMEM, "out of memory reading statistics");
    if (res != QD_OK) avg_clear(a);
    return res;
}

typedef struct rows_walk {
    qd_stats *s;
    rows_ctx *c;
    const qd_model_conf *conf;
} rows_walk;

/* One stored activation (the engine's read_rows callback): skipped when the filter does not
 * match, from the overlay when posts of it are unfolded. */
static qd_status row_fn(void *ctx, const qd_stat_row_rec *r, qd_err *err)
{
    rows_walk *w = ctx;
    rows_ctx *c = w->c;
    if (c->re && r->name &&
        pcre2_match(c->re, (PCRE2_SPTR)r->name, (PCRE2_SIZE)strlen(r->name), 0, 0, c->md, NULL) < 0)
        return QD_OK;
    if (c->n == c->cap) {
        size_t want = c->cap ? c->cap * 2 : 16;
        qd_stat_avg *v = realloc(c->v, want * sizeof *v);
        if (!v) return qd_fail(err, QD_NOMEM, "out of memory reading statistics");
        c->v = v;
        c->cap = want;
    }
    const qd_pend_row *pr = r->name ? qd_pending_row(&w->s->pend, c->model, r->name) : NULL;
    qd_status res = QD_OK;
    if (!pr)
        res = read_row(r, w->conf, &c->v[c->n], err);
    else if (!qd_pending_avg(pr, w->conf, &c->v[c->n])) {
        avg_clear(&c->v[c->n]);
        res = qd_fail(err, QD_NOMEM, "out of memory reading statistics");
    }
    if (res == QD_OK) c->n++;
    return res;
}

static qd_status rows_fn(qd_stats *s, void *p, qd_err *err)
{
    rows_ctx *c = p;
    int64_t id = 0;
    qd_model_conf conf;
    qd_status res = load_conf(s, c->model, &id, &conf, err);
    if (res != QD_OK) return res;
    rows_walk w = {s, c, &conf};
    return s->ops->read_rows(s->rd, id, row_fn, &w, err);
}

/* Full match (Python re.fullmatch), as the rules' module_path (lib/checkpoint/rules.c). */
static qd_status compile_filter(const char *pattern, pcre2_code **re, qd_err *err)
{
    int code = 0;
    PCRE2_SIZE offset = 0;
    uint32_t opts =
        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED;
    *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &code, &offset, NULL);
    if (*re) return QD_OK;
    if (code == PCRE2_ERROR_NOMEMORY) return qd_fail(err, QD_NOMEM, "out of memory");
    PCRE2_UCHAR msg[256];
    if (pcre2_get_error_message(code, msg, sizeof msg) < 0) strcpy((char *)msg, "?");
    return qd_fail(err, QD_INVALID, "bad regex \"%.64s\": %s at offset %zu", pattern,
                   (const char *)msg, (size_t)offset);
}

qd_status qd_stats_read(qd_stats *s, const char *model, const char *name_regex, qd_stat_avg **out,
                        size_t *n, qd_err *err)
{
    *out = NULL;
    *n = 0;
    if (!model) return qd_fail(err, QD_INVALID, "no model");
    rows_ctx c = {.model = model};
    qd_status st = name_regex ? compile_filter(name_regex, &c.re, err) : QD_OK;
    if (st == QD_OK && c.re) {
        c.md = pcre2_match_data_create_from_pattern(c.re, NULL);
        if (!c.md) st = qd_fail(err, QD_NOMEM, "out of memory");
    }
    if (st == QD_OK) st = read_txn(s, rows_fn, &c, err);
    pcre2_match_data_free(c.md);
    pcre2_code_free(c.re);
    if (st != QD_OK) {
        qd_stat_avgs_free(c.v, c.n);
        return st;
    }
    *out = c.v;
    *n = c.n;
    return QD_OK;
}
