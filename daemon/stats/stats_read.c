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

#include "stats_internal.h"
#include "timefmt.h"

static const qd_db_stmt_def read_sql[] = {
    {QD_R_MODELS,
     "SELECT m.name, m.averaging, m.ema_constant, m.bootstrap_steps, m.posts, "
     "m.stats_updated_ms, (SELECT count(*) FROM stats s WHERE s.model_id = m.id), "
     "(SELECT coalesce(sum(coalesce(length(s.sum_a), 0) + coalesce(length(s.sum_b), 0) + "
     "coalesce(length(s.sum_sq), 0)), 0) FROM stats s WHERE s.model_id = m.id) "
     "FROM stat_models m ORDER BY m.name"},
    {QD_R_CONF, "SELECT id, averaging, ema_constant, bootstrap_steps FROM stat_models "
                "WHERE name = ?1"},
    /* The column order read_row expects. */
    {QD_R_ROWS, "SELECT name, kind, shape, count, updated_ms, sum_a, sum_b, last_a, last_b, "
                "ema_a, ema_b, sq_len, sum_sq, last_sq, ema_sq FROM stats WHERE model_id = ?1 "
                "ORDER BY name"},
    /* An Idempotency-Key of a model, remembered since ?3 (stats_idem.c reads the row). */
    {QD_R_KEY, "SELECT k.fingerprint, k.activations, k.step, k.created_ms FROM stat_post_keys k "
               "JOIN stat_models m ON m.id = k.model_id WHERE m.name = ?1 AND k.key = ?2 "
               "AND k.created_ms >= ?3"},
};

qd_status qd_stats_prepare_reads(qd_stats *s, qd_err *err)
{
    qd_status st = qd_db_prepare(s->rdb, read_sql, sizeof read_sql / sizeof read_sql[0], s->r,
                                 QD_R_COUNT, err);
    return st == QD_OK ? qd_db_prepared_all(s->rdb, s->r, QD_R_COUNT, err) : st;
}

/* ---- one read transaction under the reader's mutex ---------------------------------------------
 */

typedef qd_status (*read_fn)(qd_stats *s, void *ctx, qd_err *err);

static qd_status read_txn(qd_stats *s, read_fn fn, void *ctx, qd_err *err)
{
    pthread_mutex_lock(&s->rmu);
    /* held for the whole read: the writer empties the overlay only after a fold committed, so
     * this read sees the rows folded or the rows before the fold plus the overlay (the same) */
    pthread_mutex_lock(&s->pend.mu);
    qd_status st = qd_db_begin(s->rdb, false, err);
    if (st == QD_OK) {
        st = fn(s, ctx, err);
        sqlite3_reset(s->r[QD_R_MODELS]);
        sqlite3_reset(s->r[QD_R_CONF]);
        sqlite3_reset(s->r[QD_R_ROWS]);
        qd_status end = qd_db_commit(s->rdb, st == QD_OK ? err : NULL);
        if (end != QD_OK) {
            if (st == QD_OK) st = end;
            qd_db_rollback(s->rdb);
        }
    }
    pthread_mutex_unlock(&s->pend.mu);
    pthread_mutex_unlock(&s->rmu);
    return st;
}

static qd_status parse_averaging(const unsigned char *t, qd_averaging *out, qd_err *err)
{
    if (t && strcmp((const char *)t, "simple") == 0)
        *out = QD_AVG_SIMPLE;
    else if (t && strcmp((const char *)t, "ema") == 0)
        *out = QD_AVG_EMA;
    else
        return qd_fail(err, QD_DB, "unreadable averaging in the database");
    return QD_OK;
}

/* Steps r_conf for model: *id and *c, QD_NOT_FOUND when there is no such model. */
static qd_status load_conf(qd_stats *s, const char *model, int64_t *id, qd_model_conf *c,
                           qd_err *err)
{
    sqlite3_stmt *st = s->r[QD_R_CONF];
    sqlite3_reset(st);
    if (sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC) != SQLITE_OK)
        return qd_db_fail(s->rdb, err, "read model");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) return qd_fail(err, QD_NOT_FOUND, "model %s not found", model);
    if (rc != SQLITE_ROW) return qd_db_fail(s->rdb, err, "read model");
    *id = sqlite3_column_int64(st, 0);
    c->ema_constant = sqlite3_column_double(st, 2);
    c->bootstrap_steps = sqlite3_column_int64(st, 3);
    return parse_averaging(sqlite3_column_text(st, 1), &c->averaging, err);
}

/* ---- models -----------------------------------------------------------------------------------
 */

/* A model's row, with its post count and time from the overlay when posts of it are unfolded. */
static json_t *model_json(sqlite3_stmt *st, const qd_pending *pend)
{
    char when[QD_TIME_LEN];
    const unsigned char *name = sqlite3_column_text(st, 0), *avg = sqlite3_column_text(st, 1);
    const qd_pend_model *pm = name ? qd_pending_model(pend, (const char *)name) : NULL;
    int64_t posts = pm ? pm->posts : sqlite3_column_int64(st, 4);
    bool never = pm ? pm->last_ms == 0 : sqlite3_column_type(st, 5) == SQLITE_NULL;
    int64_t last = pm ? pm->last_ms : sqlite3_column_int64(st, 5);
    json_t *updated = never ? json_null() : json_string(qd_iso8601(last, when));
    return json_pack("{s:s,s:s,s:f,s:I,s:I,s:I,s:o,s:I}", "name", name ? (const char *)name : "",
                     "averaging", avg ? (const char *)avg : "simple", "ema_constant",
                     sqlite3_column_double(st, 2), "bootstrap_steps",
                     (json_int_t)sqlite3_column_int64(st, 3), "activations",
                     (json_int_t)sqlite3_column_int64(st, 6), "posts", (json_int_t)posts,
                     "updated_at", updated, "stats_bytes", (json_int_t)sqlite3_column_int64(st, 7));
}

static qd_status models_fn(qd_stats *s, void *ctx, qd_err *err)
{
    json_t *list = ctx;
    sqlite3_stmt *st = s->r[QD_R_MODELS];
    sqlite3_reset(st);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *m = model_json(st, &s->pend);
        if (!m || json_array_append_new(list, m) != 0)
            return qd_fail(err, QD_NOMEM, "out of memory listing models");
    }
    return rc == SQLITE_DONE ? QD_OK : qd_db_fail(s->rdb, err, "list models");
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

static double *doubles_col(sqlite3_stmt *st, int col, int64_t n, bool *ok)
{
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    if (!d) return NULL;
    if (!qd_blob_to_doubles(sqlite3_column_blob(st, col), sqlite3_column_bytes(st, col), d, n)) {
        *ok = false;
        free(d);
        return NULL;
    }
    return d;
}

/* The calibration of n values: the last post while bootstrapping, else the EMA (when kept: a
 * model switched to ema has none until its next post, and the EMA starts from sum / count then),
 * else sum / count. */
static double *calibration(sqlite3_stmt *st, const qd_model_conf *c, const qd_stat_avg *a,
                           const double *sum, int64_t n, int col_last, int col_ema, bool *ok)
{
    if (a->bootstrapping) return doubles_col(st, col_last, n, ok);
    if (c->averaging == QD_AVG_EMA && sqlite3_column_type(st, col_ema) != SQLITE_NULL)
        return doubles_col(st, col_ema, n, ok);
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    for (int64_t i = 0; d && i < n; i++) d[i] = sum[i] / (double)a->count;
    return d;
}

/* Columns of sql_rows. */
enum {
    C_NAME,
    C_KIND,
    C_SHAPE,
    C_COUNT,
    C_UPDATED,
    C_SUM_A,
    C_SUM_B,
    C_LAST_A,
    C_LAST_B,
    C_EMA_A,
    C_EMA_B,
    C_SQ_LEN,
    C_SUM_SQ,
    C_LAST_SQ,
    C_EMA_SQ
};

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

/* The kind, shape and lengths of the current row into *a; false when unreadable. */
static bool read_layout(sqlite3_stmt *st, qd_stat_avg *a)
{
    const char *kind = (const char *)sqlite3_column_text(st, C_KIND);
    const char *shape = (const char *)sqlite3_column_text(st, C_SHAPE);
    a->n_sq =
        sqlite3_column_type(st, C_SQ_LEN) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, C_SQ_LEN);
    if (!qd_stat_kind_parse(kind, &a->kind) || a->n_sq < 0 || a->n_sq > QD_STATS_MAX_ELEMS)
        return false;
    if (a->kind == QD_STAT_NONE) return a->n_sq > 0; /* rank 0, n 0 */
    return qd_shape_parse(shape, &a->rank, a->shape, &a->n);
}

/* The current row of r_rows into *a (cleared on failure). Bootstrapping needs the last post,
 * kept only while count <= bootstrap_steps when it was stored: raising bootstrap_steps later
 * does not bring back a last value that was not kept. */
static qd_status read_row(sqlite3_stmt *st, const qd_model_conf *c, qd_stat_avg *a, qd_err *err)
{
    memset(a, 0, sizeof *a);
    const unsigned char *name = sqlite3_column_text(st, C_NAME);
    if (!name || !read_layout(st, a)) return qd_fail(err, QD_DB, "an unreadable statistics row");
    a->count = sqlite3_column_int64(st, C_COUNT);
    a->updated_ms = sqlite3_column_int64(st, C_UPDATED);
    bool range = a->kind != QD_STAT_NONE, minmax = a->kind == QD_STAT_MINMAX, sq = a->n_sq > 0;
    int last_col = range ? C_LAST_A : C_LAST_SQ;
    a->bootstrapping =
        a->count <= c->bootstrap_steps && sqlite3_column_type(st, last_col) != SQLITE_NULL;
    bool ok = true;
    a->name = strdup((const char *)name);
    if (range) a->sum_a = doubles_col(st, C_SUM_A, a->n, &ok);
    if (minmax) a->sum_b = doubles_col(st, C_SUM_B, a->n, &ok);
    if (sq) a->sum_sq = doubles_col(st, C_SUM_SQ, a->n_sq, &ok);
    if (a->sum_a) a->a = calibration(st, c, a, a->sum_a, a->n, C_LAST_A, C_EMA_A, &ok);
    if (a->sum_b) a->b = calibration(st, c, a, a->sum_b, a->n, C_LAST_B, C_EMA_B, &ok);
    if (a->sum_sq) a->sq = calibration(st, c, a, a->sum_sq, a->n_sq, C_LAST_SQ, C_EMA_SQ, &ok);
    qd_status r = QD_OK;
    if (!ok || a->count < 1)
        r = qd_fail(err, QD_DB, "activation %s: unreadable sums", name);
    else if (!a->name || (range && (!a->sum_a || !a->a)) || (minmax && (!a->sum_b || !a->b)) ||
             (sq && (!a->sum_sq || !a->sq)))
        r = qd_fail(err, QD_NOMEM, "out of memory reading statistics");
    if (r != QD_OK) avg_clear(a);
    return r;
}

static bool wanted(rows_ctx *c, sqlite3_stmt *st)
{
    if (!c->re) return true;
    const unsigned char *name = sqlite3_column_text(st, 0);
    if (!name) return true; /* read_row reports it */
    return pcre2_match(c->re, (PCRE2_SPTR)name, (PCRE2_SIZE)sqlite3_column_bytes(st, 0), 0, 0,
                       c->md, NULL) >= 0;
}

static qd_status rows_fn(qd_stats *s, void *p, qd_err *err)
{
    rows_ctx *c = p;
    int64_t id = 0;
    qd_model_conf conf;
    qd_status r = load_conf(s, c->model, &id, &conf, err);
    if (r != QD_OK) return r;
    sqlite3_stmt *st = s->r[QD_R_ROWS];
    sqlite3_reset(st);
    if (sqlite3_bind_int64(st, 1, id) != SQLITE_OK)
        return qd_db_fail(s->rdb, err, "read statistics");
    int rc;
    while (r == QD_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!wanted(c, st)) continue;
        if (c->n == c->cap) {
            size_t want = c->cap ? c->cap * 2 : 16;
            qd_stat_avg *v = realloc(c->v, want * sizeof *v);
            if (!v) return qd_fail(err, QD_NOMEM, "out of memory reading statistics");
            c->v = v;
            c->cap = want;
        }
        const qd_pend_row *pr =
            qd_pending_row(&s->pend, c->model, (const char *)sqlite3_column_text(st, C_NAME));
        if (!pr)
            r = read_row(st, &conf, &c->v[c->n], err);
        else if (!qd_pending_avg(pr, &conf, &c->v[c->n])) {
            avg_clear(&c->v[c->n]);
            r = qd_fail(err, QD_NOMEM, "out of memory reading statistics");
        }
        if (r == QD_OK) c->n++;
    }
    if (r == QD_OK && rc != SQLITE_DONE) r = qd_db_fail(s->rdb, err, "read statistics");
    return r;
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
