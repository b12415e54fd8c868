/* stats_store.c -- the statistics store's frame: opening and closing (on an engine of
 * stats_engine.h: the reader's connection here, the writer's in stats_group.c), the encodings the
 * tables use (float64 blobs, shapes as JSON text), checking a post before it is queued, the model
 * settings' defaults, and freeing what the API hands out. The reads are in stats_read.c, the writes
 * in stats_writer.c. SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats_engine.h"
#include "stats_internal.h"

void qd_model_conf_defaults(qd_model_conf *c)
{
    c->averaging = QD_AVG_SIMPLE;
    c->ema_constant = 0.01;
    c->bootstrap_steps = 0;
}

void qd_stat_post_clear(qd_stat_post *p)
{
    if (!p) return;
    for (size_t i = 0; p->e && i < p->n; i++) {
        free(p->e[i].name);
        free(p->e[i].a);
        free(p->e[i].b);
        free(p->e[i].sq);
    }
    free(p->e);
    free(p->model);
    free(p->key);
    memset(p, 0, sizeof *p);
    p->step = -1;
}

/* What one heap block of n bytes costs beyond them (glibc's header and rounding, about). */
#define BLOCK_OVERHEAD 32

static uint64_t block(bool present, uint64_t bytes)
{
    return present ? bytes + BLOCK_OVERHEAD : 0;
}

uint64_t qd_stat_post_bytes(const qd_stat_post *p)
{
    uint64_t bytes = block(p->e != NULL, (uint64_t)p->n * sizeof *p->e) +
                     block(p->model != NULL, p->model ? strlen(p->model) + 1 : 0) +
                     block(p->key != NULL, p->key ? strlen(p->key) + 1 : 0);
    for (size_t i = 0; p->e && i < p->n; i++) {
        const qd_stat_entry *e = &p->e[i];
        bytes += block(e->name != NULL, e->name ? strlen(e->name) + 1 : 0) +
                 block(e->a != NULL, (uint64_t)e->n * sizeof(double)) +
                 block(e->b != NULL, (uint64_t)e->n * sizeof(double)) +
                 block(e->sq != NULL, (uint64_t)e->n_sq * sizeof(double));
    }
    return bytes;
}

void qd_stat_avgs_free(qd_stat_avg *a, size_t n)
{
    for (size_t i = 0; a && i < n; i++) {
        free(a[i].name);
        free(a[i].sum_a);
        free(a[i].sum_b);
        free(a[i].a);
        free(a[i].b);
        free(a[i].sum_sq);
        free(a[i].sq);
    }
    free(a);
}

static const char *const kind_names[] = {
    [QD_STAT_ABSMAX] = "absmax", [QD_STAT_MINMAX] = "minmax", [QD_STAT_NONE] = "none"};

const char *qd_stat_kind_name(qd_stat_kind k)
{
    return (unsigned)k < sizeof kind_names / sizeof kind_names[0] ? kind_names[k] : "absmax";
}

bool qd_stat_kind_parse(const char *text, qd_stat_kind *out)
{
    for (size_t i = 0; text && i < sizeof kind_names / sizeof kind_names[0]; i++) {
        if (strcmp(text, kind_names[i]) == 0) {
            *out = (qd_stat_kind)i;
            return true;
        }
    }
    return false;
}

/* ---- encodings --------------------------------------------------------------------------------
 */

void qd_shape_format(int rank, const int64_t *shape, char *buf)
{
    size_t at = 0;
    buf[at++] = '[';
    for (int i = 0; i < rank; i++)
        at += (size_t)snprintf(buf + at, QD_SHAPE_TEXT_LEN - at, "%s%lld", i ? "," : "",
                               (long long)shape[i]);
    buf[at++] = ']';
    buf[at] = '\0';
}

bool qd_shape_parse(const char *text, int *rank, int64_t *shape, int64_t *n)
{
    const char *p = text;
    if (!p || *p++ != '[') return false;
    *rank = 0;
    *n = 1;
    while (*p != ']') {
        if (*rank == QUANT_MAX_RANK || (*rank > 0 && *p++ != ',')) return false;
        int64_t d = 0;
        if (*p < '0' || *p > '9') return false;
        while (*p >= '0' && *p <= '9') {
            d = d * 10 + (*p++ - '0');
            if (d > QD_STATS_MAX_ELEMS) return false;
        }
        shape[(*rank)++] = d;
        *n *= d;
        if (*n > QD_STATS_MAX_ELEMS) return false;
    }
    return p[1] == '\0';
}

bool qd_blob_to_doubles(const void *blob, int bytes, double *dst, int64_t n)
{
    if (bytes < 0 || (int64_t)bytes != n * 8 || (n > 0 && !blob)) return false;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n > 0) memcpy(dst, blob, (size_t)n * 8);
#else
    const unsigned char *b = blob;
    for (int64_t i = 0; i < n; i++) {
        uint64_t u = 0;
        for (int k = 7; k >= 0; k--) u = u << 8 | b[i * 8 + k];
        memcpy(&dst[i], &u, 8);
    }
#endif
    return true;
}

/* ---- checking a post before it is queued ------------------------------------------------------
 */

static qd_status check_values(const qd_stat_entry *e, const double *v, int64_t n, const char *which,
                              qd_err *err)
{
    if (!v) return qd_fail(err, QD_INVALID, "activation %s: no %s values", e->name, which);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return qd_fail(err, QD_INVALID, "activation %s: %s value %lld is not finite", e->name,
                           which, (long long)i);
    return QD_OK;
}

/* The range statistic's shape gives n (kind NONE: none, n 0). */
static qd_status check_shape(const qd_stat_entry *e, qd_err *err)
{
    if (e->rank < 0 || e->rank > QUANT_MAX_RANK)
        return qd_fail(err, QD_INVALID, "activation %s: rank %d (at most %d)", e->name, e->rank,
                       QUANT_MAX_RANK);
    int64_t n = e->kind == QD_STAT_NONE ? 0 : 1;
    for (int i = 0; i < e->rank; i++) {
        if (e->shape[i] < 0 || e->shape[i] > QD_STATS_MAX_ELEMS)
            return qd_fail(err, QD_INVALID, "activation %s: dimension %d is %lld", e->name, i,
                           (long long)e->shape[i]);
        n *= e->shape[i];
        if (n > QD_STATS_MAX_ELEMS)
            return qd_fail(err, QD_INVALID, "activation %s: more than %lld elements", e->name,
                           (long long)QD_STATS_MAX_ELEMS);
    }
    if (e->kind == QD_STAT_NONE && (e->rank != 0 || e->a || e->b))
        return qd_fail(err, QD_INVALID, "activation %s: mean_sq alone with range values", e->name);
    if (n != e->n)
        return qd_fail(err, QD_INVALID, "activation %s: %lld elements for a shape of %lld", e->name,
                       (long long)e->n, (long long)n);
    return QD_OK;
}

/* mean_sq: none (n_sq 0, no array), or n_sq finite values >= 0; an activation has something. */
static qd_status check_mean_sq(const qd_stat_entry *e, qd_err *err)
{
    if (e->n_sq < 0 || e->n_sq > QD_STATS_MAX_ELEMS || (e->n_sq == 0) != (e->sq == NULL))
        return qd_fail(err, QD_INVALID, "activation %s: mean_sq of %lld values", e->name,
                       (long long)e->n_sq);
    if (e->kind == QD_STAT_NONE && e->n_sq == 0)
        return qd_fail(err, QD_INVALID, "activation %s: no statistics", e->name);
    qd_status st = e->sq ? check_values(e, e->sq, e->n_sq, "mean_sq", err) : QD_OK;
    for (int64_t i = 0; st == QD_OK && i < e->n_sq; i++)
        if (e->sq[i] < 0)
            st = qd_fail(err, QD_INVALID, "activation %s: mean_sq value %lld is negative", e->name,
                         (long long)i);
    return st;
}

static qd_status check_entry(const qd_stat_entry *e, qd_err *err)
{
    if (!e->name || !*e->name) return qd_fail(err, QD_INVALID, "an activation without a name");
    if (e->kind != QD_STAT_ABSMAX && e->kind != QD_STAT_MINMAX && e->kind != QD_STAT_NONE)
        return qd_fail(err, QD_INVALID, "activation %s: unknown statistics kind", e->name);
    qd_status st = check_shape(e, err);
    if (st == QD_OK && e->count < 1)
        st = qd_fail(err, QD_INVALID, "activation %s: count %lld (at least 1)", e->name,
                     (long long)e->count);
    if (st == QD_OK && e->kind != QD_STAT_NONE)
        st = check_values(e, e->a, e->n, e->kind == QD_STAT_MINMAX ? "min" : "absmax", err);
    if (st == QD_OK && e->kind == QD_STAT_MINMAX) st = check_values(e, e->b, e->n, "max", err);
    if (st == QD_OK && e->kind != QD_STAT_MINMAX && e->b)
        st = qd_fail(err, QD_INVALID, "activation %s: absmax statistics with a second array",
                     e->name);
    if (st == QD_OK) st = check_mean_sq(e, err);
    return st;
}

qd_status qd_stat_post_check(const qd_stat_post *p, qd_err *err)
{
    if (!p || !p->model || !*p->model) return qd_fail(err, QD_INVALID, "a post without a model");
    if (p->key && !qd_stat_key_valid(p->key))
        return qd_fail(err, QD_INVALID, "an Idempotency-Key is 1-%d bytes of visible ASCII",
                       QD_KEY_MAX);
    if (p->n > 0 && !p->e) return qd_fail(err, QD_INVALID, "a post without its activations");
    for (size_t i = 0; i < p->n; i++) {
        qd_status st = check_entry(&p->e[i], err);
        if (st != QD_OK) return st;
    }
    return QD_OK;
}

/* ---- open and close ---------------------------------------------------------------------------
 */

static void close_reader(qd_stats *s)
{
    if (s->rd) s->ops->reader_close(s->rd);
    s->rd = NULL;
}

qd_status qd_stats_open(const char *db_path, qd_metrics *metrics, const qd_db_tuning *tuning,
                        qd_stats **out, qd_err *err)
{
    return qd_stats_open_engine(QD_STORE_SQLITE, db_path, metrics, tuning, out, err);
}

/* The statistics' engine of each kind of store (store.h). */
static const qd_stats_ops *const engines[QD_STORE_KIND_COUNT] = {
    [QD_STORE_SQLITE] = &qd_stats_sqlite_ops,
    [QD_STORE_POSTGRESQL] = &qd_stats_pg_ops,
};

qd_status qd_stats_open_engine(qd_store_kind kind, const char *db_path, qd_metrics *metrics,
                               const qd_db_tuning *tuning, qd_stats **out, qd_err *err)
{
    *out = NULL;
    if ((unsigned)kind >= QD_STORE_KIND_COUNT)
        return qd_fail(err, QD_INVALID, "unknown database engine %d", (int)kind);
    if (!db_path || !*db_path) return qd_fail(err, QD_INVALID, "no database path");
    qd_stats *s = calloc(1, sizeof *s);
    if (!s) return qd_fail(err, QD_NOMEM, "out of memory");
    s->metrics = metrics;
    s->ops = engines[kind];
    if (pthread_mutex_init(&s->rmu, NULL) != 0) {
        free(s);
        return qd_fail(err, QD_NOMEM, "cannot create the statistics' read mutex");
    }
    qd_pending_init(&s->pend);
    qd_status st = s->ops->reader_open(db_path, tuning, &s->rd, err);
    if (st == QD_OK) st = qd_stats_writer_start(s, db_path, tuning, err);
    if (st != QD_OK) {
        close_reader(s);
        pthread_mutex_destroy(&s->rmu);
        qd_pending_free(&s->pend);
        free(s);
        return st;
    }
    *out = s;
    return QD_OK;
}

void qd_stats_close(qd_stats *s)
{
    if (!s) return;
    qd_stats_writer_stop(s);
    close_reader(s);
    pthread_mutex_destroy(&s->rmu);
    qd_pending_free(&s->pend);
    free(s);
}

void qd_stats_close_unfolded(qd_stats *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->qmu);
    s->no_final_fold = true;
    pthread_mutex_unlock(&s->qmu);
    qd_stats_close(s);
}
