/* test_stats_store.c -- the statistics store in process (daemon/stats/stats_*.c on a temporary
 * database): Qwix's SimpleMovingAverage (one update, two averaging, bootstrap steps), merges of
 * dumps, EMA against hand-computed values, min/max statistics, rejections (shape, kind, a name
 * twice, bad values) that store nothing of the post while the rest of its group commits, an SQL
 * failure that fails the whole group, concurrent posters, reset, model settings and listing, the
 * name filter, reopening, the importance statistic mean_sq (SPEC section 9: averaged like the
 * others, the key set fixed by the first post), the SQLite tuning of its connections, and a
 * throughput print (not an assertion).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "migrations.h"
#include "pgtest.h"
#include "qdtest.h"
#include "stats.h"
#include "stats_group.h"
#include "stats_internal.h"
#include "stats_sqlite.h"

/* ---- fixture ----------------------------------------------------------------------------------
 */

static char *g_dir, *g_path;
static qd_store *g_store;
static qd_stats *g_s;
/* The engine the case runs on; g_target is what it opens: g_path (SQLite) or a connection
 * string of a fresh database of the run's cluster (PostgreSQL). */
static qd_store_kind g_kind;
static char *g_target;

static void open_all(void)
{
    qd_err err = {{0}};
    ck_assert_msg(qd_store_open_engine(g_kind, g_target, NULL, &g_store, &err) == QD_OK,
                  "store: %s", err.message);
    ck_assert_msg(qd_stats_open_engine(g_kind, g_target, NULL, NULL, &g_s, &err) == QD_OK,
                  "stats (%s): %s", qd_store_kind_name(g_kind), err.message);
}

static void close_all(void)
{
    qd_stats_close(g_s);
    qd_store_close(g_store);
    g_s = NULL;
    g_store = NULL;
}

static void setup(void)
{
    g_kind = QD_STORE_SQLITE;
    g_dir = qdt_tmpdir();
    g_path = kit_join(g_dir, "quantd.db");
    g_target = g_path;
    open_all();
}

static void setup_pg(void)
{
    g_kind = QD_STORE_POSTGRESQL;
    g_dir = qdt_tmpdir();
    g_path = kit_join(g_dir, "quantd.db");
    g_target = qdt_pg_new_db();
    open_all();
}

static void teardown(void)
{
    close_all();
    kit_rmtree(g_dir);
    if (g_target != g_path) free(g_target);
    g_target = NULL;
    free(g_path);
    free(g_dir);
}

/* ---- building posts ---------------------------------------------------------------------------
 */

static double *dup_values(const double *v, int64_t n)
{
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    ck_assert_ptr_nonnull(d);
    if (n) memcpy(d, v, (size_t)n * sizeof *d);
    return d;
}

/* A post of nothing yet for model (merge when count > 1 entries are added). */
static qd_stat_post post_new(const char *model)
{
    qd_stat_post p = {.model = strdup(model), .step = -1};
    return p;
}

/* Adds an entry: shape of rank dims (n elements), absmax (b NULL) or min/max values, count. */
static void post_add(qd_stat_post *p, const char *name, int rank, const int64_t *shape,
                     const double *a, const double *b, int64_t count)
{
    qd_stat_entry *e = realloc(p->e, (p->n + 1) * sizeof *e);
    ck_assert_ptr_nonnull(e);
    p->e = e;
    e = &p->e[p->n++];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    e->kind = b ? QD_STAT_MINMAX : QD_STAT_ABSMAX;
    e->rank = rank;
    e->n = 1;
    for (int i = 0; i < rank; i++) {
        e->shape[i] = shape[i];
        e->n *= shape[i];
    }
    e->a = dup_values(a, e->n);
    e->b = b ? dup_values(b, e->n) : NULL;
    e->count = count;
}

/* Posts one update of name: the n values of a 1-D absmax (n == 0: a scalar of a[0]). */
static qd_status post_absmax(const char *model, const char *name, const double *a, int64_t n,
                             qd_err *err)
{
    qd_stat_post p = post_new(model);
    int64_t shape[1] = {n};
    post_add(&p, name, n ? 1 : 0, shape, a, NULL, 1);
    qd_status st = qd_stats_post(g_s, &p, err);
    qd_stat_post_clear(&p);
    return st;
}

static void post_scalar_ok(const char *model, const char *name, double v)
{
    qd_err err = {{0}};
    qd_status st = post_absmax(model, name, &v, 0, &err);
    ck_assert_msg(st == QD_OK, "post %s %g: %s", name, v, err.message);
}

/* ---- reading back -----------------------------------------------------------------------------
 */

typedef struct readback {
    qd_stat_avg *v;
    size_t n;
} readback;

static readback read_all(const char *model, const char *regex)
{
    readback rb = {0};
    qd_err err = {{0}};
    qd_status st = qd_stats_read(g_s, model, regex, &rb.v, &rb.n, &err);
    ck_assert_msg(st == QD_OK, "read %s: %s", model, err.message);
    return rb;
}

static const qd_stat_avg *find(const readback *rb, const char *name)
{
    for (size_t i = 0; i < rb->n; i++)
        if (strcmp(rb->v[i].name, name) == 0) return &rb->v[i];
    return NULL;
}

static void readback_free(readback *rb)
{
    qd_stat_avgs_free(rb->v, rb->n);
    rb->v = NULL;
    rb->n = 0;
}

/* count, and the calibration's first element a[0] (and b[0] for min/max) of model/name. */
static void expect_avg(const char *model, const char *name, int64_t count, double a0,
                       bool bootstrapping)
{
    readback rb = read_all(model, NULL);
    const qd_stat_avg *a = find(&rb, name);
    ck_assert_msg(a != NULL, "%s not stored", name);
    ck_assert_int_eq(a->count, count);
    ck_assert_msg(fabs(a->a[0] - a0) < 1e-12, "%s: calibration %.17g, want %.17g", name, a->a[0],
                  a0);
    ck_assert_int_eq(a->bootstrapping, bootstrapping);
    readback_free(&rb);
}

static int64_t count_of(const char *model, const char *name)
{
    readback rb = read_all(model, NULL);
    const qd_stat_avg *a = find(&rb, name);
    int64_t c = a ? a->count : 0;
    readback_free(&rb);
    return c;
}

static void put_model_ok(const char *model, qd_averaging avg, double c, int64_t boot, bool created)
{
    qd_model_conf conf = {.averaging = avg, .ema_constant = c, .bootstrap_steps = boot};
    bool was_created = !created;
    qd_err err = {{0}};
    ck_assert_msg(qd_stats_put_model(g_s, model, &conf, &was_created, &err) == QD_OK, "put: %s",
                  err.message);
    ck_assert_int_eq(was_created, created);
}

/* ---- Qwix's averaging --------------------------------------------------------------------------
 */

START_TEST(test_one_update_is_the_value)
{
    post_scalar_ok("m", "layers/0/mlp/dot_general0_lhs", 5.25);
    expect_avg("m", "layers/0/mlp/dot_general0_lhs", 1, 5.25, false);
    readback rb = read_all("m", NULL);
    ck_assert_uint_eq(rb.n, 1);
    ck_assert_int_eq(rb.v[0].rank, 0);
    ck_assert_int_eq(rb.v[0].n, 1);
    ck_assert_int_eq(rb.v[0].kind, QD_STAT_ABSMAX);
    ck_assert_ptr_null(rb.v[0].b);
    ck_assert_ptr_null(rb.v[0].sum_b);
    ck_assert(rb.v[0].sum_a[0] == 5.25);
    ck_assert_int_gt(rb.v[0].updated_ms, 0);
    readback_free(&rb);
}
END_TEST

START_TEST(test_two_updates_average)
{
    post_scalar_ok("m", "x", 1);
    post_scalar_ok("m", "x", 3);
    expect_avg("m", "x", 2, 2.0, false);
    readback rb = read_all("m", NULL);
    ck_assert(rb.v[0].sum_a[0] == 4.0);
    readback_free(&rb);
}
END_TEST

/* bootstrap_steps 2: the calibration is the last value while count <= 2, then the average. */
START_TEST(test_bootstrap_steps)
{
    put_model_ok("m", QD_AVG_SIMPLE, 0.01, 2, true);
    post_scalar_ok("m", "x", 1);
    expect_avg("m", "x", 1, 1.0, true);
    post_scalar_ok("m", "x", 3);
    expect_avg("m", "x", 2, 3.0, true);
    post_scalar_ok("m", "x", 8);
    expect_avg("m", "x", 3, 4.0, false);
}
END_TEST

START_TEST(test_merge_adds_counts_and_sums)
{
    qd_err err = {{0}};
    int64_t shape[1] = {2};
    double sums[2] = {8, 12}, one[2] = {2, 3};
    qd_stat_post p = post_new("m");
    p.merge = true;
    post_add(&p, "x", 1, shape, sums, NULL, 4);
    ck_assert_msg(qd_stats_post(g_s, &p, &err) == QD_OK, "%s", err.message);
    qd_stat_post_clear(&p);
    ck_assert_int_eq(post_absmax("m", "x", one, 2, &err), QD_OK);
    /* and a second host's dump of min/max */
    double smin[2] = {-10, -20}, smax[2] = {10, 30};
    p = post_new("m");
    p.merge = true;
    post_add(&p, "y", 1, shape, smin, smax, 10);
    ck_assert_msg(qd_stats_post(g_s, &p, &err) == QD_OK, "%s", err.message);
    ck_assert_msg(qd_stats_post(g_s, &p, &err) == QD_OK, "%s", err.message);
    qd_stat_post_clear(&p);
    readback rb = read_all("m", NULL);
    const qd_stat_avg *x = find(&rb, "x"), *y = find(&rb, "y");
    ck_assert_int_eq(x->count, 5);
    ck_assert(x->sum_a[0] == 10 && x->sum_a[1] == 15);
    ck_assert(x->a[0] == 2 && x->a[1] == 3);
    ck_assert_int_eq(y->count, 20);
    ck_assert(y->sum_a[0] == -20 && y->sum_a[1] == -40 && y->sum_b[0] == 20 && y->sum_b[1] == 60);
    ck_assert(y->a[0] == -1 && y->a[1] == -2 && y->b[0] == 1 && y->b[1] == 3);
    readback_free(&rb);
    json_t *models = NULL;
    ck_assert_int_eq(qd_stats_models(g_s, &models, &err), QD_OK);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(models, 0), "posts")), 4);
    json_decref(models);
}
END_TEST

/* c = 0.5: 4 then 8 -> 6, then 2 -> 4; a merge counts as its mean (S / k). The sums keep the
 * simple average, whatever the averaging. */
START_TEST(test_ema_hand_computed)
{
    put_model_ok("m", QD_AVG_EMA, 0.5, 0, true);
    post_scalar_ok("m", "x", 4);
    expect_avg("m", "x", 1, 4.0, false);
    post_scalar_ok("m", "x", 8);
    expect_avg("m", "x", 2, 6.0, false);
    post_scalar_ok("m", "x", 2);
    expect_avg("m", "x", 3, 4.0, false);
    qd_err err = {{0}};
    double s = 30; /* mean 10: 4 + 0.5 * (10 - 4) = 7 */
    qd_stat_post p = post_new("m");
    p.merge = true;
    post_add(&p, "x", 0, NULL, &s, NULL, 3);
    ck_assert_msg(qd_stats_post(g_s, &p, &err) == QD_OK, "%s", err.message);
    qd_stat_post_clear(&p);
    expect_avg("m", "x", 6, 7.0, false);
    /* back to simple: (4 + 8 + 2 + 30) / 6 */
    put_model_ok("m", QD_AVG_SIMPLE, 0.5, 0, false);
    expect_avg("m", "x", 6, 44.0 / 6, false);
}
END_TEST

START_TEST(test_minmax)
{
    qd_err err = {{0}};
    int64_t shape[2] = {1, 2};
    double min1[2] = {-1, -2}, max1[2] = {1, 4}, min2[2] = {-3, 0}, max2[2] = {3, 0};
    qd_stat_post p = post_new("m");
    post_add(&p, "act", 2, shape, min1, max1, 1);
    ck_assert_msg(qd_stats_post(g_s, &p, &err) == QD_OK, "%s", err.message);
    qd_stat_post_clear(&p);
    p = post_new("m");
    post_add(&p, "act", 2, shape, min2, max2, 1);
    ck_assert_msg(qd_stats_post(g_s, &p, &err) == QD_OK, "%s", err.message);
    qd_stat_post_clear(&p);
    readback rb = read_all("m", NULL);
    const qd_stat_avg *a = find(&rb, "act");
    ck_assert_int_eq(a->kind, QD_STAT_MINMAX);
    ck_assert_int_eq(a->rank, 2);
    ck_assert(a->shape[0] == 1 && a->shape[1] == 2 && a->n == 2);
    ck_assert(a->a[0] == -2 && a->a[1] == -1 && a->b[0] == 2 && a->b[1] == 2);
    ck_assert(a->sum_a[0] == -4 && a->sum_b[1] == 4);
    readback_free(&rb);
}
END_TEST

/* ---- rejections -------------------------------------------------------------------------------
 */

START_TEST(test_shape_mismatch_stores_nothing)
{
    qd_err err = {{0}};
    double v[3] = {1, 2, 3};
    ck_assert_int_eq(post_absmax("m", "x", v, 2, &err), QD_OK);
    ck_assert_int_eq(post_absmax("m", "x", v, 3, &err), QD_INVALID);
    ck_assert_msg(strstr(err.message, "x") && strstr(err.message, "[3]") &&
                      strstr(err.message, "[2]"),
                  "%s", err.message);
    ck_assert_int_eq(count_of("m", "x"), 1);
    /* a post whose second activation is bad leaves its first one alone too */
    qd_stat_post p = post_new("m");
    int64_t two[1] = {2}, three[1] = {3};
    post_add(&p, "a_good", 1, two, v, NULL, 1);
    post_add(&p, "x", 1, three, v, NULL, 1);
    ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID);
    qd_stat_post_clear(&p);
    ck_assert_int_eq(count_of("m", "a_good"), 0);
    ck_assert_int_eq(count_of("m", "x"), 1);
    json_t *models = NULL;
    ck_assert_int_eq(qd_stats_models(g_s, &models, &err), QD_OK);
    json_t *m = json_array_get(models, 0);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "posts")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "activations")), 1);
    json_decref(models);
}
END_TEST

START_TEST(test_kind_mismatch_stores_nothing)
{
    qd_err err = {{0}};
    double v[2] = {1, 2};
    ck_assert_int_eq(post_absmax("m", "x", v, 2, &err), QD_OK);
    qd_stat_post p = post_new("m");
    int64_t two[1] = {2};
    post_add(&p, "x", 1, two, v, v, 1);
    ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID);
    ck_assert_msg(strstr(err.message, "activation x: its statistics are {absmax}") &&
                      strstr(err.message, "the post has {min, max} (without absmax)"),
                  "%s", err.message);
    qd_stat_post_clear(&p);
    ck_assert_int_eq(count_of("m", "x"), 1);
}
END_TEST

/* What the store checks itself before queueing, and a name twice in one post. */
START_TEST(test_bad_posts)
{
    qd_err err = {{0}};
    double v[2] = {1, NAN};
    ck_assert_int_eq(post_absmax("m", "x", v, 2, &err), QD_INVALID);
    ck_assert_msg(strstr(err.message, "x") && strstr(err.message, "finite"), "%s", err.message);
    qd_stat_post p = post_new("m");
    int64_t two[1] = {2};
    double ok[2] = {1, 2};
    post_add(&p, "x", 1, two, ok, NULL, 0);
    ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID); /* count 0 */
    p.e[0].count = 1;
    p.e[0].n = 3;
    ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID); /* n does not fit the shape */
    p.e[0].n = 2;
    post_add(&p, "x", 1, two, ok, NULL, 1);
    ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID);
    ck_assert_msg(strstr(err.message, "twice"), "%s", err.message);
    qd_stat_post_clear(&p);
    p = post_new("");
    ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID);
    qd_stat_post_clear(&p);
    readback rb = {0};
    ck_assert_int_eq(qd_stats_read(g_s, "m", NULL, &rb.v, &rb.n, &err), QD_NOT_FOUND);
}
END_TEST

/* ---- groups -----------------------------------------------------------------------------------
 */

/* A request from its own thread: a post, a reset of `reset`, or settings conf for `put`. */
typedef struct poster {
    qd_stat_post p;
    const char *reset, *put;
    qd_model_conf conf;
    qd_status st;
    qd_stat_answer ans;
    qd_err err;
    pthread_t t;
} poster;

static void *poster_main(void *arg)
{
    poster *q = arg;
    if (q->reset)
        q->st = qd_stats_reset(g_s, q->reset, &q->err);
    else if (q->put)
        q->st = qd_stats_put_model(g_s, q->put, &q->conf, NULL, &q->err);
    else
        q->st = qd_stats_post_answer(g_s, &q->p, &q->ans, &q->err);
    return NULL;
}

static void wait_queued(size_t n)
{
    for (int i = 0; i < 5000 && qd_stats_queued(g_s) < n; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    ck_assert_uint_eq(qd_stats_queued(g_s), n);
}

/* The requests from threads while the writer is paused, queued in order: one group. */
static void run_group(poster *ps, size_t n)
{
    qd_stats_pause(g_s, true);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(pthread_create(&ps[i].t, NULL, poster_main, &ps[i]), 0);
        wait_queued(i + 1);
    }
    qd_stats_pause(g_s, false);
    for (size_t i = 0; i < n; i++) {
        pthread_join(ps[i].t, NULL);
        qd_stat_post_clear(&ps[i].p);
    }
}

/* In one group: a good post, a bad one (its good activations are not stored either), a good
 * one; an activation new in the group takes its shape from its first post there. */
START_TEST(test_bad_post_in_a_group)
{
    double v[3] = {1, 2, 3};
    int64_t two[1] = {2}, three[1] = {3};
    ck_assert_int_eq(post_absmax("m", "y", v, 3, NULL), QD_OK); /* y is [3] */
    poster ps[5] = {{.p = post_new("m")},
                    {.p = post_new("m")},
                    {.p = post_new("m")},
                    {.p = post_new("m")},
                    {.p = post_new("m")}};
    post_add(&ps[0].p, "x", 1, two, v, NULL, 1);
    post_add(&ps[1].p, "new", 1, three, v, NULL, 1);
    post_add(&ps[1].p, "x", 1, two, v, NULL, 1);
    post_add(&ps[1].p, "y", 1, two, v, NULL, 1); /* refused: y is [3] */
    post_add(&ps[2].p, "x", 1, two, v, NULL, 1);
    post_add(&ps[3].p, "z", 1, three, v, NULL, 1); /* z becomes [3] ... */
    post_add(&ps[4].p, "z", 1, two, v, NULL, 1);   /* ... so [2] is refused */
    run_group(ps, 5);
    ck_assert_int_eq(ps[0].st, QD_OK);
    ck_assert_int_eq(ps[1].st, QD_INVALID);
    ck_assert_msg(strstr(ps[1].err.message, "activation y"), "%s", ps[1].err.message);
    ck_assert_int_eq(ps[2].st, QD_OK);
    ck_assert_int_eq(ps[3].st, QD_OK);
    ck_assert_int_eq(ps[4].st, QD_INVALID);
    ck_assert_msg(strstr(ps[4].err.message, "activation z"), "%s", ps[4].err.message);
    ck_assert_int_eq(count_of("m", "x"), 2);
    ck_assert_int_eq(count_of("m", "y"), 1);
    ck_assert_int_eq(count_of("m", "z"), 1);
    ck_assert_int_eq(count_of("m", "new"), 0);
    expect_avg("m", "x", 2, 1.0, false);
}
END_TEST

/* A model's first post fails its check: the model is not created. */
START_TEST(test_rejected_first_post_creates_no_model)
{
    qd_err err = {{0}};
    double v[2] = {1, 2};
    qd_stat_post p = post_new("fresh");
    post_add(&p, "x", 0, NULL, v, NULL, 1);
    post_add(&p, "x", 0, NULL, v, NULL, 1);
    ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID);
    qd_stat_post_clear(&p);
    json_t *models = NULL;
    ck_assert_int_eq(qd_stats_models(g_s, &models, &err), QD_OK);
    ck_assert_uint_eq(json_array_size(models), 0);
    json_decref(models);
    qd_model_conf c;
    ck_assert_int_eq(qd_stats_model_conf(g_s, "fresh", &c, &err), QD_NOT_FOUND);
}
END_TEST

/* A reset between posts of one group: what came before it is gone, what comes after is new (so
 * may have another shape). */
START_TEST(test_reset_inside_a_group)
{
    double v[3] = {1, 2, 3};
    int64_t three[1] = {3};
    post_scalar_ok("m", "x", 7);
    poster ps[4] = {{.p = post_new("m")}, {.reset = "m"}, {.p = post_new("m")}, {.reset = "nope"}};
    post_add(&ps[0].p, "x", 0, NULL, v, NULL, 1);
    post_add(&ps[2].p, "x", 1, three, v, NULL, 1);
    run_group(ps, 4);
    ck_assert_int_eq(ps[0].st, QD_OK);
    ck_assert_int_eq(ps[1].st, QD_OK);
    ck_assert_int_eq(ps[2].st, QD_OK);
    ck_assert_int_eq(ps[3].st, QD_NOT_FOUND);
    readback rb = read_all("m", NULL);
    ck_assert_uint_eq(rb.n, 1);
    ck_assert_int_eq(rb.v[0].count, 1);
    ck_assert_int_eq(rb.v[0].n, 3);
    ck_assert(rb.v[0].a[2] == 3);
    readback_free(&rb);
}
END_TEST

/* An SQL failure (a trigger refusing new activations) fails every request of the group, the
 * settings change included; the next group works from what is stored. */
START_TEST(test_sql_failure_fails_the_group)
{
    post_scalar_ok("m", "x", 1);
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(g_path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    ck_assert_int_eq(sqlite3_exec(db,
                                  "CREATE TRIGGER no_new BEFORE INSERT ON stats "
                                  "BEGIN SELECT RAISE(ABORT, 'no new activations'); END",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    double v = 2;
    poster ps[3] = {
        {.p = post_new("m")}, {.put = "made", .conf = {QD_AVG_EMA, 0.5, 0}}, {.p = post_new("m")}};
    post_add(&ps[0].p, "x", 0, NULL, &v, NULL, 1);
    post_add(&ps[2].p, "brand_new", 0, NULL, &v, NULL, 1);
    run_group(ps, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(ps[i].st, QD_DB);
        ck_assert_msg(strstr(ps[i].err.message, "no new activations"), "%s", ps[i].err.message);
    }
    qd_model_conf c;
    ck_assert_int_eq(qd_stats_model_conf(g_s, "made", &c, NULL), QD_NOT_FOUND);
    ck_assert_int_eq(count_of("m", "x"), 1);
    ck_assert_int_eq(sqlite3_exec(db, "DROP TRIGGER no_new", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    post_scalar_ok("m", "x", 3);
    expect_avg("m", "x", 2, 2.0, false);
    put_model_ok("made", QD_AVG_EMA, 0.5, 0, true);
}
END_TEST

/* A model row the writer cannot read (its averaging damaged past the CHECK constraint) fails the
 * posts to that model, naming it, releases the read (a WAL checkpoint can pass it) and leaves the
 * writer able to read every other model. */
START_TEST(test_unreadable_model_row)
{
    post_scalar_ok("bad", "x", 1);
    post_scalar_ok("good", "x", 1);
    close_all();
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(g_path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db,
                                  "PRAGMA ignore_check_constraints = ON; UPDATE stat_models SET "
                                  "averaging = 'bogus' WHERE name = 'bad'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    open_all();
    double v = 2;
    qd_err err = {{0}};
    ck_assert_int_eq(post_absmax("bad", "x", &v, 0, &err), QD_DB);
    ck_assert_msg(strstr(err.message, "model bad: unreadable averaging"), "%s", err.message);
    /* the writer's read of the row is over: a statement left mid-step would pin its snapshot,
     * and no checkpoint could then empty the WAL */
    ck_assert_int_eq(sqlite3_open(g_path, &db), SQLITE_OK);
    sqlite3_stmt *cp = NULL;
    ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA wal_checkpoint(TRUNCATE)", -1, &cp, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(cp), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(cp, 0), 0); /* not busy */
    sqlite3_finalize(cp);
    sqlite3_close(db);
    post_scalar_ok("good", "x", 3);
    expect_avg("good", "x", 2, 2.0, false);
    post_scalar_ok("new", "x", 5);
    expect_avg("new", "x", 1, 5.0, false);
}
END_TEST

#define N_THREADS 8
#define N_POSTS   150

static void *concurrent_main(void *arg)
{
    const char *model = arg;
    for (int i = 0; i < N_POSTS; i++) {
        qd_stat_post p = post_new(model);
        double v[2] = {1, (double)i};
        int64_t two[1] = {2};
        post_add(&p, "a", 1, two, v, NULL, 1);
        post_add(&p, "b", 0, NULL, v, NULL, 1);
        qd_err err = {{0}};
        qd_status st = qd_stats_post(g_s, &p, &err);
        qd_stat_post_clear(&p);
        if (st != QD_OK) return strdup(err.message);
    }
    return NULL;
}

START_TEST(test_concurrent_posters_exact_count)
{
    pthread_t t[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, concurrent_main, i % 2 ? "odd" : "even"), 0);
    for (int i = 0; i < N_THREADS; i++) {
        void *msg = NULL;
        pthread_join(t[i], &msg);
        ck_assert_msg(msg == NULL, "%s", (char *)msg);
    }
    const char *models[2] = {"even", "odd"};
    for (int k = 0; k < 2; k++) {
        readback rb = read_all(models[k], NULL);
        const qd_stat_avg *a = find(&rb, "a"), *b = find(&rb, "b");
        int64_t want = N_THREADS / 2 * N_POSTS;
        ck_assert_int_eq(a->count, want);
        ck_assert_int_eq(b->count, want);
        ck_assert(a->sum_a[0] == (double)want);
        ck_assert(a->sum_a[1] == (double)(N_THREADS / 2) * (N_POSTS * (N_POSTS - 1) / 2));
        readback_free(&rb);
    }
    json_t *list = NULL;
    ck_assert_int_eq(qd_stats_models(g_s, &list, NULL), QD_OK);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(list, 1), "posts")),
                     N_THREADS / 2 * N_POSTS);
    json_decref(list);
}
END_TEST

/* ---- reset, settings, listing, filter, reopening ----------------------------------------------
 */

START_TEST(test_reset)
{
    qd_err err = {{0}};
    put_model_ok("m", QD_AVG_EMA, 0.25, 3, true);
    post_scalar_ok("m", "x", 1);
    post_scalar_ok("m", "y", 1);
    ck_assert_int_eq(qd_stats_reset(g_s, "m", &err), QD_OK);
    readback rb = read_all("m", NULL);
    ck_assert_uint_eq(rb.n, 0);
    readback_free(&rb);
    qd_model_conf c;
    ck_assert_int_eq(qd_stats_model_conf(g_s, "m", &c, &err), QD_OK);
    ck_assert(c.averaging == QD_AVG_EMA && c.ema_constant == 0.25 && c.bootstrap_steps == 3);
    json_t *list = NULL;
    ck_assert_int_eq(qd_stats_models(g_s, &list, &err), QD_OK);
    json_t *m = json_array_get(list, 0);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "posts")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "activations")), 0);
    ck_assert(json_is_null(json_object_get(m, "updated_at")));
    json_decref(list);
    ck_assert_int_eq(qd_stats_reset(g_s, "unknown", &err), QD_NOT_FOUND);
    ck_assert_msg(strstr(err.message, "unknown"), "%s", err.message);
    double v[2] = {5, 6};
    ck_assert_int_eq(post_absmax("m", "x", v, 2, &err), QD_OK); /* any shape after a reset */
    ck_assert_int_eq(count_of("m", "x"), 1);
}
END_TEST

START_TEST(test_put_model)
{
    qd_err err = {{0}};
    qd_model_conf c;
    qd_model_conf_defaults(&c);
    ck_assert(c.averaging == QD_AVG_SIMPLE && c.ema_constant == 0.01 && c.bootstrap_steps == 0);
    post_scalar_ok("posted", "x", 1); /* created by its first post, with the defaults */
    ck_assert_int_eq(qd_stats_model_conf(g_s, "posted", &c, &err), QD_OK);
    ck_assert(c.averaging == QD_AVG_SIMPLE && c.ema_constant == 0.01 && c.bootstrap_steps == 0);
    put_model_ok("posted", QD_AVG_EMA, 0.125, 7, false);
    put_model_ok("put", QD_AVG_EMA, 1.0, 0, true);
    put_model_ok("put", QD_AVG_SIMPLE, 0.5, 2, false);
    ck_assert_int_eq(qd_stats_model_conf(g_s, "posted", &c, &err), QD_OK);
    ck_assert(c.averaging == QD_AVG_EMA && c.ema_constant == 0.125 && c.bootstrap_steps == 7);
    ck_assert_int_eq(qd_stats_model_conf(g_s, "put", &c, &err), QD_OK);
    ck_assert(c.averaging == QD_AVG_SIMPLE && c.ema_constant == 0.5 && c.bootstrap_steps == 2);
    ck_assert_int_eq(qd_stats_model_conf(g_s, "none", &c, &err), QD_NOT_FOUND);
    qd_model_conf bad[3] = {{QD_AVG_EMA, 0, 0}, {QD_AVG_EMA, 1.5, 0}, {QD_AVG_SIMPLE, 0.5, -1}};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(qd_stats_put_model(g_s, "bad", &bad[i], NULL, &err), QD_INVALID);
    ck_assert_int_eq(qd_stats_model_conf(g_s, "bad", &c, &err), QD_NOT_FOUND);
}
END_TEST

START_TEST(test_models_listing)
{
    qd_err err = {{0}};
    put_model_ok("zeta", QD_AVG_EMA, 0.5, 1, true);
    post_scalar_ok("alpha", "x", 1);
    post_scalar_ok("alpha", "y", 1);
    post_scalar_ok("alpha", "x", 2);
    json_t *list = NULL;
    ck_assert_int_eq(qd_stats_models(g_s, &list, &err), QD_OK);
    ck_assert_uint_eq(json_array_size(list), 2);
    json_t *a = json_array_get(list, 0), *z = json_array_get(list, 1);
    ck_assert_str_eq(json_string_value(json_object_get(a, "name")), "alpha");
    ck_assert_str_eq(json_string_value(json_object_get(a, "averaging")), "simple");
    ck_assert(json_real_value(json_object_get(a, "ema_constant")) == 0.01);
    ck_assert_int_eq(json_integer_value(json_object_get(a, "bootstrap_steps")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(a, "activations")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(a, "posts")), 3);
    const char *when = json_string_value(json_object_get(a, "updated_at"));
    ck_assert_msg(when && strlen(when) == 24 && when[10] == 'T' && when[23] == 'Z', "%s",
                  when ? when : "null");
    ck_assert_str_eq(json_string_value(json_object_get(z, "name")), "zeta");
    ck_assert_str_eq(json_string_value(json_object_get(z, "averaging")), "ema");
    ck_assert_int_eq(json_integer_value(json_object_get(z, "activations")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(z, "posts")), 0);
    ck_assert(json_is_null(json_object_get(z, "updated_at")));
    ck_assert_int_eq(json_integer_value(json_object_get(a, "stats_bytes")), 16); /* x, y */
    ck_assert_int_eq(json_integer_value(json_object_get(z, "stats_bytes")), 0);
    ck_assert_uint_eq(json_object_size(a), 8);
    json_decref(list);
}
END_TEST

START_TEST(test_name_filter)
{
    qd_err err = {{0}};
    const char *names[4] = {"layers/0/mlp/dot_general0_lhs", "layers/1/mlp/dot_general0_lhs",
                            "layers/10/attn/einsum0_lhs", "head/dot_general0_lhs"};
    for (int i = 0; i < 4; i++) post_scalar_ok("m", names[i], i);
    readback rb = read_all("m", "layers/\\d+/mlp/.*");
    ck_assert_uint_eq(rb.n, 2);
    ck_assert_str_eq(rb.v[0].name, names[0]); /* by name */
    ck_assert_str_eq(rb.v[1].name, names[1]);
    readback_free(&rb);
    rb = read_all("m", "mlp|head/dot_general0_lhs"); /* full match: "mlp" alone matches none */
    ck_assert_uint_eq(rb.n, 1);
    ck_assert_str_eq(rb.v[0].name, names[3]);
    readback_free(&rb);
    rb = read_all("m", "nothing");
    ck_assert_uint_eq(rb.n, 0);
    readback_free(&rb);
    rb = read_all("m", NULL);
    ck_assert_uint_eq(rb.n, 4);
    ck_assert_str_eq(rb.v[0].name, names[3]);
    readback_free(&rb);
    ck_assert_int_eq(qd_stats_read(g_s, "m", "layers/(", &rb.v, &rb.n, &err), QD_INVALID);
    ck_assert_msg(strstr(err.message, "regex"), "%s", err.message);
    ck_assert_int_eq(qd_stats_read(g_s, "other", NULL, &rb.v, &rb.n, &err), QD_NOT_FOUND);
    ck_assert_int_eq(qd_stats_read(g_s, "other", "(", &rb.v, &rb.n, &err), QD_INVALID);
}
END_TEST

/* Close right after posts: everything acknowledged is there after reopening. */
START_TEST(test_close_and_reopen)
{
    put_model_ok("m", QD_AVG_EMA, 0.5, 1, true);
    double big[4096];
    for (int i = 0; i < 4096; i++) big[i] = i * 0.5;
    qd_err err = {{0}};
    for (int k = 0; k < 3; k++) {
        post_scalar_ok("m", "x", 4 * (k + 1));
        ck_assert_int_eq(post_absmax("m", "big", big, 4096, &err), QD_OK);
    }
    close_all();
    open_all();
    readback rb = read_all("m", NULL);
    ck_assert_uint_eq(rb.n, 2);
    const qd_stat_avg *b = find(&rb, "big"), *x = find(&rb, "x");
    ck_assert_int_eq(b->count, 3);
    ck_assert(b->a[4095] == 4095 * 0.5 && b->sum_a[4095] == 3 * 4095 * 0.5);
    ck_assert_int_eq(x->count, 3);
    ck_assert(x->a[0] == 9); /* EMA 0.5: 4 -> 6 -> 9 */
    readback_free(&rb);
    qd_model_conf c;
    ck_assert_int_eq(qd_stats_model_conf(g_s, "m", &c, &err), QD_OK);
    ck_assert(c.averaging == QD_AVG_EMA && c.bootstrap_steps == 1);
}
END_TEST

/* The tables and indexes of migrations/0002_stats.sql. */
START_TEST(test_schema)
{
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(g_path, &db), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    ck_assert_int_eq(sqlite3_prepare_v2(db,
                                        "SELECT group_concat(name) FROM (SELECT name FROM "
                                        "sqlite_master WHERE tbl_name IN ('stats', "
                                        "'stat_models') ORDER BY name)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(st, 0),
                     "sqlite_autoindex_stat_models_1,sqlite_autoindex_stats_1,stat_models,stats");
    sqlite3_finalize(st);
    ck_assert_int_eq(sqlite3_prepare_v2(db,
                                        "SELECT group_concat(name) FROM pragma_index_info("
                                        "'sqlite_autoindex_stats_1')",
                                        -1, &st, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "model_id,name");
    sqlite3_finalize(st);
    sqlite3_close(db);
}
END_TEST

/* ---- what is kept besides the sums -------------------------------------------------------------
 */

/* The first column of sql's first row as an integer, from a plain connection. */
/* The database as the store's writer left it, the delta log folded first. */
static long long raw_int(const char *sql)
{
    qd_err err = {{0}};
    if (g_s) ck_assert_msg(qd_stats_fold(g_s, &err) == QD_OK, "fold: %s", err.message);
    if (g_kind == QD_STORE_POSTGRESQL) {
        char *t = qdt_pg_text(g_target, sql);
        long long v = strtoll(t, NULL, 10);
        free(t);
        return v;
    }
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    ck_assert_int_eq(sqlite3_open(g_path, &db), SQLITE_OK);
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s",
                  sqlite3_errmsg(db));
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Runs sql on a plain connection (another writer than the store's: it waits its turn). */
static void raw_exec(const char *sql)
{
    qd_err err = {{0}};
    if (g_s) ck_assert_msg(qd_stats_fold(g_s, &err) == QD_OK, "fold: %s", err.message);
    if (g_kind == QD_STORE_POSTGRESQL) {
        qdt_pg_exec(g_target, sql);
        return;
    }
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(g_path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char *msg = NULL;
    ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK, "%s: %s", sql, msg);
    sqlite3_close(db);
}

/* A model with the default settings stores only its sums. */
START_TEST(test_default_model_stores_only_sums)
{
    post_scalar_ok("m", "x", 1);
    post_scalar_ok("m", "x", 2);
    ck_assert_int_eq(raw_int("SELECT count(*) FROM stats WHERE last_a IS NULL AND ema_a IS NULL "
                             "AND length(sum_a) = 8"),
                     1);
    put_model_ok("e", QD_AVG_EMA, 0.5, 1, true);
    post_scalar_ok("e", "x", 1); /* count 1 <= 1: the last value is kept */
    ck_assert_int_eq(raw_int("SELECT count(*) FROM stats WHERE last_a IS NOT NULL AND ema_a IS "
                             "NOT NULL"),
                     1);
    post_scalar_ok("e", "x", 3); /* count 2: not any more */
    ck_assert_int_eq(raw_int("SELECT count(*) FROM stats WHERE last_a IS NULL AND ema_a IS "
                             "NOT NULL"),
                     1);
}
END_TEST

/* Switching to ema after posts: the average until the next post, which starts the EMA from the
 * average; back to simple drops it; again to ema starts it again from the average. */
START_TEST(test_switching_averaging)
{
    post_scalar_ok("m", "x", 2);
    post_scalar_ok("m", "x", 4);
    put_model_ok("m", QD_AVG_EMA, 0.5, 0, false);
    expect_avg("m", "x", 2, 3.0, false);
    post_scalar_ok("m", "x", 9); /* 3 + 0.5 * (9 - 3) */
    expect_avg("m", "x", 3, 6.0, false);
    put_model_ok("m", QD_AVG_SIMPLE, 0.5, 0, false);
    expect_avg("m", "x", 3, 5.0, false);
    post_scalar_ok("m", "x", 1);
    put_model_ok("m", QD_AVG_EMA, 0.5, 0, false);
    expect_avg("m", "x", 4, 4.0, false);
    post_scalar_ok("m", "x", 8); /* 4 + 0.5 * (8 - 4) */
    expect_avg("m", "x", 5, 6.0, false);
}
END_TEST

/* bootstrap_steps decides at each post whether its value is kept: lowering it ends
 * bootstrapping at once, raising it again finds the value kept; raising it over posts stored
 * while it was lower finds none until the next post. A merge's last value is its mean. */
START_TEST(test_bootstrap_changes)
{
    put_model_ok("m", QD_AVG_SIMPLE, 0.01, 5, true);
    post_scalar_ok("m", "x", 1);
    post_scalar_ok("m", "x", 3);
    expect_avg("m", "x", 2, 3.0, true);
    put_model_ok("m", QD_AVG_SIMPLE, 0.01, 0, false);
    expect_avg("m", "x", 2, 2.0, false);
    put_model_ok("m", QD_AVG_SIMPLE, 0.01, 5, false);
    expect_avg("m", "x", 2, 3.0, true);
    post_scalar_ok("n", "y", 1);
    post_scalar_ok("n", "y", 3);
    put_model_ok("n", QD_AVG_SIMPLE, 0.01, 5, false);
    expect_avg("n", "y", 2, 2.0, false);
    post_scalar_ok("n", "y", 8);
    expect_avg("n", "y", 3, 8.0, true);
    qd_err err = {{0}};
    double s = 12;
    qd_stat_post p = post_new("n");
    p.merge = true;
    post_add(&p, "y", 0, NULL, &s, NULL, 2); /* count 5 <= 5: last = 12 / 2 */
    ck_assert_msg(qd_stats_post(g_s, &p, &err) == QD_OK, "%s", err.message);
    qd_stat_post_clear(&p);
    expect_avg("n", "y", 5, 6.0, true);
}
END_TEST

/* EMA on min/max, with nothing cached between groups: every group reads its rows back. */
START_TEST(test_minmax_ema_without_cache)
{
    qd_stats_cache_budget(g_s, 0);
    put_model_ok("m", QD_AVG_EMA, 0.25, 1, true);
    qd_err err = {{0}};
    int64_t shape[1] = {2};
    double mins[3][2] = {{-4, -8}, {-8, 0}, {0, -4}}, maxs[3][2] = {{4, 8}, {8, 0}, {0, 4}};
    for (int k = 0; k < 3; k++) {
        qd_stat_post p = post_new("m");
        post_add(&p, "act", 1, shape, mins[k], maxs[k], 1);
        ck_assert_msg(qd_stats_post(g_s, &p, &err) == QD_OK, "%s", err.message);
        qd_stat_post_clear(&p);
        if (k == 0) { /* bootstrapping: the last post */
            readback rb = read_all("m", NULL);
            ck_assert(rb.v[0].bootstrapping && rb.v[0].a[1] == -8 && rb.v[0].b[1] == 8);
            readback_free(&rb);
        }
    }
    /* min[0]: -4 -> -5 -> -3.75; max[1]: 8 -> 6 -> 5.5 */
    readback rb = read_all("m", NULL);
    const qd_stat_avg *a = &rb.v[0];
    ck_assert_int_eq(a->count, 3);
    ck_assert(!a->bootstrapping);
    ck_assert_msg(a->a[0] == -3.75 && a->b[1] == 5.5, "%g %g", a->a[0], a->b[1]);
    ck_assert(a->sum_a[0] == -12 && a->sum_b[1] == 12);
    readback_free(&rb);
}
END_TEST

/* A small cache keeps the most recent rows and reads the others back: the counts stay exact. */
START_TEST(test_small_cache)
{
    qd_stats_cache_budget(g_s, 3000);
    double v[64];
    for (int i = 0; i < 64; i++) v[i] = i;
    qd_err err = {{0}};
    for (int round = 0; round < 5; round++)
        for (int k = 0; k < 6; k++) {
            char name[16];
            snprintf(name, sizeof name, "act%d", k);
            ck_assert_int_eq(post_absmax("m", name, v, 64, &err), QD_OK);
        }
    readback rb = read_all("m", NULL);
    ck_assert_uint_eq(rb.n, 6);
    for (size_t i = 0; i < rb.n; i++) {
        ck_assert_int_eq(rb.v[i].count, 5);
        ck_assert(rb.v[i].sum_a[63] == 5 * 63 && rb.v[i].a[63] == 63);
    }
    readback_free(&rb);
}
END_TEST

/* ---- Idempotency-Keys ---------------------------------------------------------------------------
 */

/* A post of one scalar activation `name` = v with an Idempotency-Key and the fingerprint of
 * `request` (any text standing for the HTTP request it came in). */
static qd_stat_post keyed_post(const char *model, const char *name, double v, const char *key,
                               const char *request)
{
    qd_stat_post p = post_new(model);
    post_add(&p, name, 0, NULL, &v, NULL, 1);
    p.key = strdup(key);
    qd_stats_fingerprint(false, -1, false, request, strlen(request), p.fingerprint);
    return p;
}

/* Posts it; returns the status, the answer in *ans. */
static qd_status post_keyed(const char *model, const char *name, double v, const char *key,
                            const char *request, qd_stat_answer *ans, qd_err *err)
{
    qd_stat_post p = keyed_post(model, name, v, key, request);
    p.step = 7;
    qd_status st = qd_stats_post_answer(g_s, &p, ans, err);
    qd_stat_post_clear(&p);
    return st;
}

static int64_t model_field(const char *model, const char *field)
{
    json_t *list = NULL;
    ck_assert_int_eq(qd_stats_models(g_s, &list, NULL), QD_OK);
    size_t i;
    json_t *m;
    int64_t v = -1;
    json_array_foreach(list, i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "name")), model) == 0)
            v = json_integer_value(json_object_get(m, field));
    }
    json_decref(list);
    return v;
}

START_TEST(test_fingerprint_and_keys)
{
    uint8_t a[QD_FINGERPRINT_LEN], b[QD_FINGERPRINT_LEN];
    const char *body = "{\"stats\":{\"a\":{\"absmax\":1}}}";
    size_t n = strlen(body);
    qd_stats_fingerprint(false, -1, false, body, n, a);
    qd_stats_fingerprint(false, -1, false, body, n, b);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    /* each of mode, step (absent, 0, 1), media type and body tells posts apart */
    qd_stats_fingerprint(true, -1, false, body, n, b);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    qd_stats_fingerprint(false, 0, false, body, n, b);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    uint8_t c[QD_FINGERPRINT_LEN];
    qd_stats_fingerprint(false, 1, false, body, n, c);
    ck_assert(memcmp(b, c, sizeof b) != 0);
    qd_stats_fingerprint(false, -1, true, body, n, b);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    qd_stats_fingerprint(false, -1, false, body, n - 1, b);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    qd_stats_fingerprint(false, -1, false, NULL, 0, b);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    /* keys: 1-255 bytes of 0x21-0x7e */
    char k[300];
    memset(k, 'k', sizeof k);
    k[255] = '\0';
    ck_assert(qd_stat_key_valid(k));
    k[255] = 'k';
    k[256] = '\0';
    ck_assert(!qd_stat_key_valid(k));
    ck_assert(qd_stat_key_valid("!~run-1/step:12"));
    static const char *const bad[] = {"", "a b", "a\tb", "a\x01", "\x7f", "caf\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!qd_stat_key_valid(bad[i]), "key %zu accepted", i);
    /* the store refuses a post with a bad key */
    qd_stat_post p = keyed_post("m", "x", 1, "a b", "r");
    qd_err err = {{0}};
    ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID);
    ck_assert_msg(strstr(err.message, "Idempotency-Key"), "%s", err.message);
    qd_stat_post_clear(&p);
}
END_TEST

/* The same key and fingerprint again: the first answer, nothing applied; another fingerprint:
 * a conflict naming the key; keys belong to one model; the reader sees what the writer does. */
START_TEST(test_key_replay_and_conflict)
{
    qd_stat_answer ans;
    qd_err err = {{0}};
    ck_assert_int_eq(post_keyed("m", "x", 1, "run-1", "A", &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_STORED);
    ck_assert_int_eq(ans.activations, 1);
    ck_assert_int_eq(ans.step, 7);
    ck_assert_int_eq(post_keyed("m", "x", 1, "run-1", "A", &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_REPLAYED);
    ck_assert_int_eq(ans.activations, 1);
    ck_assert_int_eq(ans.step, 7);
    ck_assert_int_gt(ans.first_ms, 0);
    expect_avg("m", "x", 1, 1.0, false);
    ck_assert_int_eq(model_field("m", "posts"), 1);
    ck_assert_int_eq(post_keyed("m", "x", 5, "run-1", "B", &ans, &err), QD_CONFLICT);
    ck_assert_int_eq(ans.outcome, QD_POST_KEY_CONFLICT);
    ck_assert_msg(strstr(err.message, "Idempotency-Key 'run-1'") &&
                      strstr(err.message, "different post at 20"),
                  "%s", err.message);
    expect_avg("m", "x", 1, 1.0, false);
    /* another model has keys of its own; a keyless post is always applied */
    ck_assert_int_eq(post_keyed("other", "x", 5, "run-1", "B", &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_STORED);
    ck_assert_int_eq(qd_stats_post_answer(g_s, &(qd_stat_post){0}, &ans, &err), QD_INVALID);
    post_scalar_ok("m", "x", 3);
    expect_avg("m", "x", 2, 2.0, false);
    /* the reader's look */
    uint8_t fa[QD_FINGERPRINT_LEN], fb[QD_FINGERPRINT_LEN];
    qd_stats_fingerprint(false, -1, false, "A", 1, fa);
    qd_stats_fingerprint(false, -1, false, "B", 1, fb);
    ck_assert_int_eq(qd_stats_key_peek(g_s, "m", "run-1", fa, &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_REPLAYED);
    ck_assert_int_eq(ans.step, 7);
    ck_assert_int_eq(qd_stats_key_peek(g_s, "m", "run-1", fb, &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_NONE);
    ck_assert_int_eq(qd_stats_key_peek(g_s, "m", "run-2", fa, &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_NONE);
    ck_assert_int_eq(qd_stats_key_peek(g_s, "nope", "run-1", fa, &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_NONE);
}
END_TEST

/* In one group: a key recorded by an earlier post of the group (on a model the group creates)
 * is seen by the later ones; a post that fails records nothing, so its key stays free. */
START_TEST(test_keys_in_one_group)
{
    double v[3] = {1, 2, 3};
    int64_t two[1] = {2};
    poster ps[6] = {
        {.p = keyed_post("g", "x", 1, "k", "A")},  {.p = keyed_post("g", "x", 1, "k", "A")},
        {.p = keyed_post("g", "x", 1, "k", "B")},  {.p = keyed_post("g", "x", 9, "k2", "C")},
        {.p = keyed_post("g", "x", 2, "k2", "D")}, {.p = post_new("g")}};
    post_add(&ps[3].p, "x", 1, two, v, NULL, 1); /* x twice: refused whole */
    post_add(&ps[5].p, "y", 1, two, v, NULL, 1);
    run_group(ps, 6);
    ck_assert_int_eq(ps[0].st, QD_OK);
    ck_assert_int_eq(ps[0].ans.outcome, QD_POST_STORED);
    ck_assert_int_eq(ps[1].st, QD_OK);
    ck_assert_int_eq(ps[1].ans.outcome, QD_POST_REPLAYED);
    ck_assert_int_eq(ps[2].st, QD_CONFLICT);
    ck_assert_int_eq(ps[2].ans.outcome, QD_POST_KEY_CONFLICT);
    ck_assert_int_eq(ps[3].st, QD_INVALID);
    ck_assert_int_eq(ps[3].ans.outcome, QD_POST_NONE);
    ck_assert_int_eq(ps[4].st, QD_OK);
    ck_assert_int_eq(ps[4].ans.outcome, QD_POST_STORED);
    ck_assert_int_eq(ps[5].st, QD_OK);
    expect_avg("g", "x", 2, 1.5, false);
    ck_assert_int_eq(model_field("g", "posts"), 3);
    ck_assert_int_eq(raw_int("SELECT count(*) FROM stat_post_keys"), 2);
}
END_TEST

/* A key older than the window is unknown: a post under it is applied and replaces it. Expired
 * keys are deleted by the writer at most once a minute (here: when the test hook asks). */
START_TEST(test_key_window_and_purge)
{
    qd_stats_configure(g_s, 0, 60);
    qd_stat_answer ans;
    qd_err err = {{0}};
    ck_assert_int_eq(post_keyed("m", "x", 1, "old", "A", &ans, &err), QD_OK);
    raw_exec("UPDATE stat_post_keys SET created_ms = created_ms - 59000");
    ck_assert_int_eq(post_keyed("m", "x", 1, "old", "A", &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_REPLAYED); /* 59 s: still known */
    raw_exec("UPDATE stat_post_keys SET created_ms = created_ms - 2000");
    ck_assert_int_eq(post_keyed("m", "x", 3, "old", "B", &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_STORED); /* 61 s: forgotten, B takes it */
    expect_avg("m", "x", 2, 2.0, false);
    ck_assert_int_eq(post_keyed("m", "x", 3, "old", "B", &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_REPLAYED);
    ck_assert_int_eq(post_keyed("m", "x", 1, "old", "A", &ans, &err), QD_CONFLICT);
    ck_assert_int_eq(raw_int("SELECT count(*) FROM stat_post_keys"), 1);
    /* the reader forgets it too */
    uint8_t fb[QD_FINGERPRINT_LEN];
    qd_stats_fingerprint(false, -1, false, "B", 1, fb);
    ck_assert_int_eq(qd_stats_key_peek(g_s, "m", "old", fb, &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_REPLAYED);
    raw_exec("UPDATE stat_post_keys SET created_ms = created_ms - 61000");
    ck_assert_int_eq(qd_stats_key_peek(g_s, "m", "old", fb, &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_NONE);
    /* purging: not within a minute of the last purge, then when asked */
    ck_assert_int_eq(post_keyed("m", "x", 1, "fresh", "F", &ans, &err), QD_OK);
    ck_assert_int_eq(raw_int("SELECT count(*) FROM stat_post_keys"), 2);
    qd_stats_purge_next(g_s);
    post_scalar_ok("m", "x", 1);
    ck_assert_int_eq(raw_int("SELECT count(*) FROM stat_post_keys WHERE key = 'old'"), 0);
    ck_assert_int_eq(raw_int("SELECT count(*) FROM stat_post_keys WHERE key = 'fresh'"), 1);
}
END_TEST

/* A group whose purge of old Idempotency-Keys fails (here a trigger refuses the DELETE) fails
 * and ends its transaction: the write lock is free for another connection at once, and the next
 * group, the trigger gone, commits. */
START_TEST(test_failed_purge_rolls_back)
{
    qd_stats_configure(g_s, 0, 60);
    qd_stat_answer ans;
    qd_err err = {{0}};
    ck_assert_int_eq(post_keyed("m", "x", 1, "old", "A", &ans, &err), QD_OK);
    raw_exec("UPDATE stat_post_keys SET created_ms = created_ms - 61000");
    raw_exec("CREATE TRIGGER no_purge BEFORE DELETE ON stat_post_keys "
             "BEGIN SELECT RAISE(ABORT, 'no purge'); END");
    qd_stats_purge_next(g_s);
    double v = 2;
    ck_assert_int_eq(post_absmax("m", "x", &v, 0, &err), QD_DB);
    ck_assert_msg(strstr(err.message, "no purge"), "%s", err.message);
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(g_path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 200);
    char *msg = NULL;
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE; DROP TRIGGER no_purge; COMMIT", NULL, NULL, &msg);
    ck_assert_msg(rc == SQLITE_OK, "the writer still holds the write lock: %s", msg);
    sqlite3_free(msg);
    sqlite3_close(db);
    post_scalar_ok("m", "x", 3);
    expect_avg("m", "x", 2, 2.0, false);
}
END_TEST

/* A reset keeps the model's keys (those posts did happen): a retry after it stores nothing. */
START_TEST(test_keys_survive_reset_and_reopen)
{
    qd_stat_answer ans;
    qd_err err = {{0}};
    ck_assert_int_eq(post_keyed("m", "x", 1, "k", "A", &ans, &err), QD_OK);
    ck_assert_int_eq(qd_stats_reset(g_s, "m", &err), QD_OK);
    ck_assert_int_eq(post_keyed("m", "x", 1, "k", "A", &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_REPLAYED);
    ck_assert_int_eq(count_of("m", "x"), 0);
    close_all();
    open_all();
    ck_assert_int_eq(post_keyed("m", "x", 1, "k", "A", &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_REPLAYED);
    ck_assert_int_eq(count_of("m", "x"), 0);
}
END_TEST

/* ---- the quota on stored sums -------------------------------------------------------------------
 */

/* A post of one new 1-D activation of n values (min/max when minmax). */
static qd_status post_new_act(const char *model, const char *name, int64_t n, bool minmax,
                              qd_stat_answer *ans, qd_err *err)
{
    double *v = calloc((size_t)n, sizeof *v);
    ck_assert_ptr_nonnull(v);
    qd_stat_post p = post_new(model);
    int64_t shape[1] = {n};
    post_add(&p, name, 1, shape, v, minmax ? v : NULL, 1);
    qd_status st = qd_stats_post_answer(g_s, &p, ans, err);
    qd_stat_post_clear(&p);
    free(v);
    return st;
}

/* 1K: 64 + 64 values fill it; a post adding a new activation then fails whole, updates go on,
 * min/max count twice, a reset frees it, and the usage is read back after reopening. */
START_TEST(test_quota)
{
    qd_stats_configure(g_s, 1024, 0);
    qd_stat_answer ans;
    qd_err err = {{0}};
    ck_assert_int_eq(post_new_act("m", "a", 64, false, &ans, &err), QD_OK);
    ck_assert_int_eq(ans.stats_bytes, 512);
    ck_assert_int_eq(post_new_act("m", "b", 32, true, &ans, &err), QD_OK);
    ck_assert_int_eq(ans.stats_bytes, 1024);
    ck_assert_int_eq(model_field("m", "stats_bytes"), 1024);
    /* an update of a and a new c in one post: refused whole */
    double v[64] = {0}, one = 1;
    int64_t shape[1] = {64};
    qd_stat_post p = post_new("m");
    post_add(&p, "a", 1, shape, v, NULL, 1);
    post_add(&p, "c", 0, NULL, &one, NULL, 1);
    ck_assert_int_eq(qd_stats_post_answer(g_s, &p, &ans, &err), QD_CONFLICT);
    ck_assert_int_eq(ans.outcome, QD_POST_OVER_QUOTA);
    ck_assert_int_eq(ans.stats_bytes, 1032);
    ck_assert_msg(strstr(err.message, "model 'm' would hold 1032 bytes") &&
                      strstr(err.message, "stats_quota (1K)"),
                  "%s", err.message);
    qd_stat_post_clear(&p);
    ck_assert_int_eq(count_of("m", "a"), 1);
    ck_assert_int_eq(count_of("m", "c"), 0);
    ck_assert_int_eq(model_field("m", "posts"), 2);
    /* updates keep their size; a merge that adds an activation is held to the quota too */
    ck_assert_int_eq(post_absmax("m", "a", v, 64, &err), QD_OK);
    p = post_new("m");
    p.merge = true;
    post_add(&p, "d", 0, NULL, &one, NULL, 3);
    ck_assert_int_eq(qd_stats_post_answer(g_s, &p, &ans, &err), QD_CONFLICT);
    ck_assert_int_eq(ans.outcome, QD_POST_OVER_QUOTA);
    qd_stat_post_clear(&p);
    /* the writer reads the usage back from the database */
    close_all();
    open_all();
    qd_stats_configure(g_s, 1024, 0);
    ck_assert_int_eq(post_new_act("m", "c", 1, false, &ans, &err), QD_CONFLICT);
    ck_assert_int_eq(post_absmax("m", "a", v, 64, &err), QD_OK);
    expect_avg("m", "a", 3, 0.0, false);
    /* a reset frees it */
    ck_assert_int_eq(qd_stats_reset(g_s, "m", &err), QD_OK);
    ck_assert_int_eq(model_field("m", "stats_bytes"), 0);
    ck_assert_int_eq(post_new_act("m", "c", 1, false, &ans, &err), QD_OK);
    ck_assert_int_eq(ans.stats_bytes, 8);
    ck_assert_int_eq(model_field("m", "stats_bytes"), 8);
    /* a raised quota applies from the next group */
    ck_assert_int_eq(post_new_act("m", "big", 200, false, &ans, &err), QD_CONFLICT);
    qd_stats_configure(g_s, 4096, 0);
    ck_assert_int_eq(post_new_act("m", "big", 200, false, &ans, &err), QD_OK);
    ck_assert_int_eq(model_field("m", "stats_bytes"), 1608);
}
END_TEST

/* The posts of one group see each other's growth, and a reset's. */
START_TEST(test_quota_in_one_group)
{
    qd_stats_configure(g_s, 1024, 0);
    double v[64] = {0};
    int64_t shape[1] = {64};
    poster ps[5] = {{.p = post_new("q")},
                    {.p = post_new("q")},
                    {.p = post_new("q")},
                    {.reset = "q"},
                    {.p = post_new("q")}};
    post_add(&ps[0].p, "a", 1, shape, v, NULL, 1);
    post_add(&ps[1].p, "b", 1, shape, v, NULL, 1);
    post_add(&ps[2].p, "c", 1, shape, v, NULL, 1); /* 1536 > 1024 */
    post_add(&ps[4].p, "c", 1, shape, v, NULL, 1); /* after the reset: 512 */
    run_group(ps, 5);
    ck_assert_int_eq(ps[0].st, QD_OK);
    ck_assert_int_eq(ps[1].st, QD_OK);
    ck_assert_int_eq(ps[1].ans.stats_bytes, 1024);
    ck_assert_int_eq(ps[2].st, QD_CONFLICT);
    ck_assert_int_eq(ps[2].ans.outcome, QD_POST_OVER_QUOTA);
    ck_assert_int_eq(ps[3].st, QD_OK);
    ck_assert_int_eq(ps[4].st, QD_OK);
    ck_assert_int_eq(ps[4].ans.stats_bytes, 512);
    ck_assert_int_eq(model_field("q", "stats_bytes"), 512);
    ck_assert_int_eq(count_of("q", "c"), 1);
    ck_assert_int_eq(count_of("q", "a"), 0);
}
END_TEST

/* ---- throughput (printed, not asserted) -------------------------------------------------------
 */

typedef struct load {
    int posts, acts;
    int64_t elems;
    char model[16];
} load;

static void *load_main(void *arg)
{
    load *l = arg;
    qd_stat_post p = post_new(l->model);
    double *v = calloc((size_t)l->elems, sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (int64_t i = 0; i < l->elems; i++) v[i] = (double)(i % 97);
    int64_t shape[1] = {l->elems};
    for (int a = 0; a < l->acts; a++) {
        char name[32];
        snprintf(name, sizeof name, "layers/%d/mlp/lhs", a);
        post_add(&p, name, 1, shape, v, NULL, 1);
    }
    for (int i = 0; i < l->posts; i++) {
        qd_err err = {{0}};
        qd_status st = qd_stats_post(g_s, &p, &err);
        ck_assert_msg(st == QD_OK, "%s", err.message);
    }
    qd_stat_post_clear(&p);
    free(v);
    return NULL;
}

/* threads posters (one model each when own_models), each posts posts of acts x elems. */
static void throughput(const char *what, int threads, int posts, int acts, int64_t elems)
{
    pthread_t t[64];
    load l[64];
    double t0 = kit_now();
    for (int i = 0; i < threads; i++) {
        l[i] = (load){.posts = posts, .acts = acts, .elems = elems};
        snprintf(l[i].model, sizeof l[i].model, "%.8s%d", what, i % 4);
        ck_assert_int_eq(pthread_create(&t[i], NULL, load_main, &l[i]), 0);
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    double s = kit_now() - t0, n = (double)threads * posts;
    printf("stats_store throughput, %s: %.0f posts/s, %.1f MB/s of float32 payload (%d threads, "
           "%.2f s)\n",
           what, n / s, n * acts * (double)elems * 4 / s / 1e6, threads, s);
}

START_TEST(test_throughput_print)
{
    throughput("4 activations x 1 value", 32, 200, 4, 1);
    throughput("64 activations x 4096 values", 8, 12, 64, 4096);
}
END_TEST

/* ---- the importance statistic mean_sq (SPEC section 9) ---------------------------------------
 */

/* Adds mean_sq (n_sq values) to the last entry added, or an entry of mean_sq alone when name is
 * not NULL. */
static void post_add_sq(qd_stat_post *p, const char *name, const double *sq, int64_t n_sq,
                        int64_t count)
{
    if (name) {
        qd_stat_entry *e = realloc(p->e, (p->n + 1) * sizeof *e);
        ck_assert_ptr_nonnull(e);
        p->e = e;
        e = &p->e[p->n++];
        memset(e, 0, sizeof *e);
        e->name = strdup(name);
        e->kind = QD_STAT_NONE;
        e->count = count;
    }
    qd_stat_entry *e = &p->e[p->n - 1];
    e->n_sq = n_sq;
    e->sq = dup_values(sq, n_sq);
}

/* One update of name: absmax a[0..n) (n 0: none, mean_sq alone) and mean_sq sq[0..n_sq). */
static qd_status post_sq(const char *model, const char *name, const double *a, int64_t n,
                         const double *sq, int64_t n_sq, qd_err *err)
{
    qd_stat_post p = post_new(model);
    int64_t shape[1] = {n};
    if (n) {
        post_add(&p, name, 1, shape, a, NULL, 1);
        if (n_sq) post_add_sq(&p, NULL, sq, n_sq, 1);
    } else {
        post_add_sq(&p, name, sq, n_sq, 1);
    }
    qd_status st = qd_stats_post(g_s, &p, err);
    qd_stat_post_clear(&p);
    return st;
}

static void post_sq_ok(const char *model, const char *name, const double *a, int64_t n,
                       const double *sq, int64_t n_sq)
{
    qd_err err = {{0}};
    qd_status st = post_sq(model, name, a, n, sq, n_sq, &err);
    ck_assert_msg(st == QD_OK, "post %s: %s", name, err.message);
}

/* name's mean_sq average must be want[0..n) exactly, its sums sum[0..n), count count. */
static void expect_sq(const char *model, const char *name, int64_t count, const double *want,
                      const double *sum, int64_t n)
{
    readback rb = read_all(model, NULL);
    const qd_stat_avg *a = find(&rb, name);
    ck_assert_msg(a != NULL, "%s not stored", name);
    ck_assert_int_eq(a->count, count);
    ck_assert_int_eq(a->n_sq, n);
    for (int64_t i = 0; i < n; i++) {
        ck_assert_msg(a->sq[i] == want[i], "%s mean_sq[%lld] %.17g, want %.17g", name, (long long)i,
                      a->sq[i], want[i]);
        ck_assert_msg(a->sum_sq[i] == sum[i], "%s sum_of_mean_sq[%lld] %.17g, want %.17g", name,
                      (long long)i, a->sum_sq[i], sum[i]);
    }
    readback_free(&rb);
}

/* SMA: count += 1 and sum += value per post, the average sum / count, exactly; beside absmax
 * (averaged as before) and alone; a merge adds its count and sums; the quota counts its sums. */
START_TEST(test_mean_sq_simple)
{
    double a1[2] = {1, 2}, a2[2] = {3, 4}, q1[4] = {0.5, 1, 0, 8}, q2[4] = {1.5, 2, 0, 1};
    post_sq_ok("m", "x", a1, 2, q1, 4);
    expect_sq("m", "x", 1, q1, q1, 4);
    post_sq_ok("m", "x", a2, 2, q2, 4);
    expect_sq("m", "x", 2, (const double[]){1, 1.5, 0, 4.5}, (const double[]){2, 3, 0, 9}, 4);
    expect_avg("m", "x", 2, 2.0, false);
    double s1[3] = {0.25, 0.5, 1}, s2[3] = {0.75, 1.5, 0};
    post_sq_ok("m", "alone", NULL, 0, s1, 3);
    post_sq_ok("m", "alone", NULL, 0, s2, 3);
    expect_sq("m", "alone", 2, (const double[]){0.5, 1, 0.5}, (const double[]){1, 2, 1}, 3);
    readback rb = read_all("m", NULL);
    const qd_stat_avg *al = find(&rb, "alone");
    ck_assert_int_eq(al->kind, QD_STAT_NONE);
    ck_assert_ptr_null(al->a);
    ck_assert_ptr_null(al->sum_a);
    ck_assert_int_eq(al->n, 0);
    readback_free(&rb);
    /* a merge: count 4, sums {6, 2, 2} (+ absmax sums for x) */
    qd_err err = {{0}};
    qd_stat_post p = post_new("m");
    p.merge = true;
    post_add_sq(&p, "alone", (const double[]){6, 2, 2}, 3, 4);
    int64_t two[1] = {2};
    post_add(&p, "x", 1, two, (const double[]){8, 8}, NULL, 2);
    post_add_sq(&p, NULL, (const double[]){2, 1, 4, 1}, 4, 2);
    ck_assert_msg(qd_stats_post(g_s, &p, &err) == QD_OK, "%s", err.message);
    qd_stat_post_clear(&p);
    expect_sq("m", "alone", 6, (const double[]){7.0 / 6, 4.0 / 6, 3.0 / 6},
              (const double[]){7, 4, 3}, 3);
    expect_sq("m", "x", 4, (const double[]){1, 1, 1, 2.5}, (const double[]){4, 4, 4, 10}, 4);
    expect_avg("m", "x", 4, 3.0, false); /* (1 + 3 + 8) / 4 */
    /* 8 bytes per value of every sum: x 2 + 4, alone 3 */
    ck_assert_int_eq(model_field("m", "stats_bytes"), 8 * (2 + 4 + 3));
}
END_TEST

/* EMA c = 0.5 on mean_sq exactly as on absmax: the first update sets it, then v += c (new - v);
 * a merge counts as its mean; bootstrap_steps keeps the last value as the calibration. */
START_TEST(test_mean_sq_ema)
{
    put_model_ok("m", QD_AVG_EMA, 0.5, 1, true);
    double a[1] = {4}, q1[2] = {4, 2}, q2[2] = {8, 0}, q3[2] = {2, 6};
    post_sq_ok("m", "x", a, 1, q1, 2);
    readback rb = read_all("m", NULL);
    ck_assert(rb.v[0].bootstrapping && rb.v[0].sq[0] == 4 && rb.v[0].sq[1] == 2);
    readback_free(&rb);
    post_sq_ok("m", "x", a, 1, q2, 2); /* 4 + 0.5 (8 - 4) = 6; 2 + 0.5 (0 - 2) = 1 */
    expect_sq("m", "x", 2, (const double[]){6, 1}, (const double[]){12, 2}, 2);
    post_sq_ok("m", "x", a, 1, q3, 2); /* 4, 3.5 */
    expect_sq("m", "x", 3, (const double[]){4, 3.5}, (const double[]){14, 8}, 2);
    qd_err err = {{0}};
    qd_stat_post p = post_new("m");
    p.merge = true;
    post_add_sq(&p, "x", (const double[]){30, 1.5}, 2, 3); /* mean {10, 0.5}: 7, 2 */
    post_add(&p, "y", 0, NULL, (const double[]){3}, NULL, 3);
    ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID); /* x lacks absmax: nothing */
    ck_assert_msg(strstr(err.message, "activation x") && strstr(err.message, "without absmax"),
                  "%s", err.message);
    qd_stat_post_clear(&p);
    ck_assert_int_eq(count_of("m", "y"), 0);
    p = post_new("m");
    p.merge = true;
    post_add(&p, "x", 1, (const int64_t[]){1}, (const double[]){12}, NULL, 3);
    post_add_sq(&p, NULL, (const double[]){30, 1.5}, 2, 3);
    ck_assert_msg(qd_stats_post(g_s, &p, &err) == QD_OK, "%s", err.message);
    qd_stat_post_clear(&p);
    expect_sq("m", "x", 6, (const double[]){7, 2}, (const double[]){44, 9.5}, 2);
    /* back to simple: sum / count */
    put_model_ok("m", QD_AVG_SIMPLE, 0.5, 1, false);
    expect_sq("m", "x", 6, (const double[]){44.0 / 6, 9.5 / 6}, (const double[]){44, 9.5}, 2);
}
END_TEST

/* The keys of an activation are fixed by its first post: another set, or another mean_sq length,
 * is refused whole (naming the activation and the key), the other activations of the post and
 * the counts untouched; DELETE starts over. */
START_TEST(test_mean_sq_key_set_fixed)
{
    qd_err err = {{0}};
    double a[2] = {1, 2}, q[2] = {1, 4}, q3[3] = {1, 1, 1};
    post_sq_ok("m", "both", a, 2, q, 2);
    post_sq_ok("m", "alone", NULL, 0, q, 2);
    ck_assert_int_eq(post_absmax("m", "plain", a, 2, &err), QD_OK);
    static const struct {
        const char *name;
        int64_t n, n_sq;
        const char *want;
    } cases[] = {
        {"both", 2, 0,
         "activation both: its statistics are {absmax, mean_sq}, fixed by its first post; the "
         "post has {absmax} (without mean_sq)"},
        {"both", 0, 2, "activation both: its statistics are {absmax, mean_sq}"},
        {"alone", 2, 2,
         "activation alone: its statistics are {mean_sq}, fixed by its first post; the post has "
         "{absmax, mean_sq} (with absmax)"},
        {"plain", 2, 2,
         "activation plain: its statistics are {absmax}, fixed by its first post; the post has "
         "{absmax, mean_sq} (with mean_sq)"},
        {"both", 2, 3, "activation both: mean_sq has 3 values, the stored one 2"},
        {"alone", 0, 3, "activation alone: mean_sq has 3 values, the stored one 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qd_stat_post p = post_new("m");
        post_add(&p, "a_first", 1, (const int64_t[]){2}, a, NULL, 1); /* fine on its own */
        int64_t shape[1] = {cases[i].n};
        if (cases[i].n) {
            post_add(&p, cases[i].name, 1, shape, a, NULL, 1);
            if (cases[i].n_sq) post_add_sq(&p, NULL, q3, cases[i].n_sq, 1);
        } else {
            post_add_sq(&p, cases[i].name, q3, cases[i].n_sq, 1);
        }
        ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID);
        ck_assert_msg(strstr(err.message, cases[i].want), "case %zu: %s", i, err.message);
        qd_stat_post_clear(&p);
    }
    ck_assert_int_eq(count_of("m", "a_first"), 0);
    ck_assert_int_eq(count_of("m", "both"), 1);
    ck_assert_int_eq(count_of("m", "alone"), 1);
    ck_assert_int_eq(count_of("m", "plain"), 1);
    ck_assert_int_eq(model_field("m", "posts"), 3);
    /* min/max with mean_sq is its own set */
    qd_stat_post p = post_new("m");
    post_add(&p, "mm", 1, (const int64_t[]){2}, (const double[]){-1, -2}, a, 1);
    post_add_sq(&p, NULL, q, 2, 1);
    ck_assert_msg(qd_stats_post(g_s, &p, &err) == QD_OK, "%s", err.message);
    p.e[0].kind = QD_STAT_ABSMAX;
    free(p.e[0].b);
    p.e[0].b = NULL;
    ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID);
    ck_assert_msg(strstr(err.message, "{min, max, mean_sq}") && strstr(err.message, "without min"),
                  "%s", err.message);
    qd_stat_post_clear(&p);
    /* a reset starts over: another set is then fine */
    ck_assert_int_eq(qd_stats_reset(g_s, "m", &err), QD_OK);
    ck_assert_int_eq(post_absmax("m", "both", a, 2, &err), QD_OK);
    post_sq_ok("m", "plain", a, 2, q3, 3);
    expect_sq("m", "plain", 1, q3, q3, 3);
}
END_TEST

/* What the store refuses itself: non-finite or negative mean_sq, mean_sq alone without values. */
START_TEST(test_mean_sq_bad_posts)
{
    qd_err err = {{0}};
    double bad[2][2] = {{1, NAN}, {1, -0.5}};
    const char *want[2] = {"activation x: mean_sq value 1 is not finite",
                           "activation x: mean_sq value 1 is negative"};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(post_sq("m", "x", NULL, 0, bad[i], 2, &err), QD_INVALID);
        ck_assert_msg(strstr(err.message, want[i]), "%s", err.message);
        ck_assert_int_eq(post_sq("m", "x", (const double[]){1}, 1, bad[i], 2, &err), QD_INVALID);
        ck_assert_msg(strstr(err.message, want[i]), "%s", err.message);
    }
    qd_stat_post p = post_new("m");
    post_add_sq(&p, "x", (const double[]){1}, 1, 1);
    p.e[0].n_sq = 0; /* no values at all */
    ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID);
    ck_assert_msg(strstr(err.message, "activation x: mean_sq of 0 values"), "%s", err.message);
    p.e[0].n_sq = 1;
    p.e[0].rank = 1; /* mean_sq alone with a range shape */
    ck_assert_int_eq(qd_stats_post(g_s, &p, &err), QD_INVALID);
    qd_stat_post_clear(&p);
    readback rb = {0};
    ck_assert_int_eq(qd_stats_read(g_s, "m", NULL, &rb.v, &rb.n, &err), QD_NOT_FOUND);
}
END_TEST

/* Reopened, and with nothing cached between groups, every kind of row reads back exactly; the
 * row holds NULL where a part is absent (the migration's CHECKs hold). */
START_TEST(test_mean_sq_reopen_and_uncached)
{
    put_model_ok("m", QD_AVG_EMA, 0.5, 1, true);
    double a[2] = {2, 4}, q[2] = {4, 8};
    post_sq_ok("m", "both", a, 2, q, 2);
    post_sq_ok("m", "alone", NULL, 0, q, 2);
    close_all();
    open_all();
    qd_stats_cache_budget(g_s, 0);
    double a2[2] = {4, 0}, q2[2] = {0, 4};
    post_sq_ok("m", "both", a2, 2, q2, 2);
    post_sq_ok("m", "alone", NULL, 0, q2, 2);
    post_sq_ok("m", "alone", NULL, 0, q2, 2);
    expect_sq("m", "both", 2, (const double[]){2, 6}, (const double[]){4, 12}, 2);
    expect_avg("m", "both", 2, 3.0, false);
    expect_sq("m", "alone", 3, (const double[]){1, 5}, (const double[]){4, 16}, 2);
    ck_assert_int_eq(raw_int("SELECT count(*) FROM stats WHERE kind = 'none' AND shape IS NULL "
                             "AND sum_a IS NULL AND sq_len = 2 AND length(sum_sq) = 16 AND "
                             "ema_sq IS NOT NULL AND last_sq IS NULL"),
                     1);
    ck_assert_int_eq(raw_int("SELECT count(*) FROM stats WHERE kind = 'absmax' AND sq_len = 2 "
                             "AND ema_a IS NOT NULL AND ema_sq IS NOT NULL"),
                     1);
    close_all();
    open_all();
    expect_sq("m", "alone", 3, (const double[]){1, 5}, (const double[]){4, 16}, 2);
}
END_TEST

/* A database written before migration 0006 (its stats table from 0002): the rows keep their ids,
 * sums, EMA and last values through the rebuild, update as before, and the model takes mean_sq on
 * new activations. */
START_TEST(test_mean_sq_migration_keeps_rows)
{
    close_all();
    kit_rmtree(g_dir);
    free(g_path);
    free(g_dir);
    g_dir = qdt_tmpdir();
    g_path = kit_join(g_dir, "quantd.db");
    g_target = g_path;
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(g_path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "PRAGMA journal_mode = WAL; BEGIN", NULL, NULL, NULL),
                     SQLITE_OK);
    int before = 0;
    while (before < qd_n_migrations && !strstr(qd_migrations[before].sql, "stats_mean_sq"))
        ck_assert_int_eq(sqlite3_exec(db, qd_migrations[before++].sql, NULL, NULL, NULL),
                         SQLITE_OK);
    ck_assert_int_lt(before, qd_n_migrations);
    char sql[160];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d; PRAGMA application_id = %d", before,
             0x514E5444);
    char *msg = NULL;
    const char *rows =
        "INSERT INTO stat_models (id, name, averaging, ema_constant, created_ms, updated_ms) "
        "VALUES (7, 'm', 'ema', 0.5, 1, 1);"
        /* absmax [2] = {4, 8} over 2 posts, EMA {3, 5}; min/max scalar -1/1 over 1 post, last */
        "INSERT INTO stats (id, model_id, name, kind, shape, count, created_ms, updated_ms, sum_a, "
        "ema_a) VALUES (40, 7, 'x', 'absmax', '[2]', 2, 1, 1, "
        "X'00000000000010400000000000002040', X'00000000000008400000000000001440');"
        "INSERT INTO stats (id, model_id, name, kind, shape, count, created_ms, updated_ms, sum_a, "
        "sum_b, last_a, last_b, ema_a, ema_b) VALUES (41, 7, 'y', 'minmax', '[]', 1, 1, 1, "
        "X'000000000000F0BF', X'000000000000F03F', X'000000000000F0BF', X'000000000000F03F', "
        "X'000000000000F0BF', X'000000000000F03F');";
    ck_assert_msg(sqlite3_exec(db, rows, NULL, NULL, &msg) == SQLITE_OK, "%s", msg);
    ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    open_all(); /* migrates */
    ck_assert_int_eq(raw_int("SELECT id FROM stats WHERE name = 'x'"), 40);
    ck_assert_int_eq(raw_int("SELECT count(*) FROM stats WHERE sq_len IS NULL AND sum_sq IS NULL"),
                     2);
    readback rb = read_all("m", NULL);
    const qd_stat_avg *x = find(&rb, "x"), *y = find(&rb, "y");
    ck_assert(x && x->count == 2 && x->a[0] == 3 && x->a[1] == 5 && x->sum_a[1] == 8);
    ck_assert_int_eq(x->n_sq, 0);
    ck_assert_ptr_null(x->sq);
    ck_assert(y && y->kind == QD_STAT_MINMAX && y->a[0] == -1 && y->b[0] == 1);
    readback_free(&rb);
    qd_err err = {{0}};
    ck_assert_int_eq(post_absmax("m", "x", (const double[]){5, 1}, 2, &err), QD_OK);
    expect_avg("m", "x", 3, 4.0, false); /* 3 + 0.5 (5 - 3) */
    ck_assert_int_eq(post_sq("m", "x", (const double[]){5, 1}, 2, (const double[]){1}, 1, &err),
                     QD_INVALID); /* its keys stay {absmax} */
    post_sq_ok("m", "z", (const double[]){1}, 1, (const double[]){2, 2}, 2);
    expect_sq("m", "z", 1, (const double[]){2, 2}, (const double[]){2, 2}, 2);
}
END_TEST

/* qd_stats_open's tuning (config [stats] busy_timeout, page_cache): the reader and the writer
 * wait that long for a lock, the writer has that page cache; without tuning, db.h's defaults. */
START_TEST(test_sqlite_tuning)
{
    static const qd_db_tuning tuned = {.busy_timeout_ms = 12000, .cache_kib = 65536};
    static const struct {
        const qd_db_tuning *t;
        int busy, cache;
    } cases[] = {
        {&tuned, 12000, -65536},
        {NULL, QD_DB_BUSY_TIMEOUT_MS, -QD_DB_STATS_PAGE_CACHE_KIB},
    };
    close_all(); /* the fixture's store stays closed: this test opens its own */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qd_err err = {{0}};
        ck_assert_msg(qd_store_open(g_path, &g_store, &err) == QD_OK, "%s", err.message);
        ck_assert_msg(qd_stats_open(g_path, NULL, cases[i].t, &g_s, &err) == QD_OK, "%s",
                      err.message);
        int v = 0;
        ck_assert_int_eq(qd_db_int(qd_sqstat_reader_db(g_s->rd), "PRAGMA busy_timeout", &v, &err),
                         QD_OK);
        ck_assert_int_eq(v, cases[i].busy);
        /* the writer's connection, read while its thread waits for work (nothing is queued) */
        ck_assert_int_eq(
            qd_db_int(qd_sqstat_writer_db(g_s->group->w), "PRAGMA busy_timeout", &v, &err), QD_OK);
        ck_assert_int_eq(v, cases[i].busy);
        ck_assert_int_eq(
            qd_db_int(qd_sqstat_writer_db(g_s->group->w), "PRAGMA cache_size", &v, &err), QD_OK);
        ck_assert_int_eq(v, cases[i].cache);
        close_all();
    }
}
END_TEST

/* ---- what only PostgreSQL has: several writers on one database ------------------------------
 */

typedef struct sharer {
    qd_stats *s;
    const char *model;
} sharer;

static void *sharer_main(void *arg)
{
    const sharer *w = arg;
    for (int i = 0; i < N_POSTS; i++) {
        qd_stat_post p = post_new(w->model);
        double v[2] = {1, (double)i};
        int64_t two[1] = {2};
        post_add(&p, "a", 1, two, v, NULL, 1);
        qd_err err = {{0}};
        qd_status st = qd_stats_post(w->s, &p, &err);
        qd_stat_post_clear(&p);
        if (st != QD_OK) return strdup(err.message);
    }
    return NULL;
}

static void post_via_ok(qd_stats *via, const char *model, const char *name, double v)
{
    qd_stats *mine = g_s;
    g_s = via;
    post_scalar_ok(model, name, v);
    g_s = mine;
}

/* Two statistics stores on one database, as two instances have them: posts through either land
 * in the same rows (counts and sums exact under concurrent posters on both), the EMA is the one
 * the commit order gives (each writer reads the rows again under their locks: a cached row
 * would apply a post to a stale EMA), reads through either see every acknowledged post, and an
 * Idempotency-Key recorded through one is a replay, or a conflict, through the other. */
START_TEST(test_pg_two_writers_share_rows)
{
    qd_stats *other = NULL;
    qd_err err = {{0}};
    ck_assert_msg(qd_stats_open_engine(QD_STORE_POSTGRESQL, g_target, NULL, NULL, &other, &err) ==
                      QD_OK,
                  "%s", err.message);
    put_model_ok("ema", QD_AVG_EMA, 0.5, 0, true);
    double ema = 0;
    for (int i = 1; i <= 7; i++) {
        double v = (double)(i * i % 11);
        post_via_ok(i % 2 ? g_s : other, "ema", "x", v);
        ema = i == 1 ? v : ema + 0.5 * (v - ema);
    }
    expect_avg("ema", "x", 7, ema, false);
    qd_stats *mine = g_s;
    g_s = other; /* the other store reads the same */
    expect_avg("ema", "x", 7, ema, false);
    g_s = mine;

    sharer w[4] = {{g_s, "shared"}, {other, "shared"}, {g_s, "shared"}, {other, "shared"}};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, sharer_main, &w[i]), 0);
    for (int i = 0; i < 4; i++) {
        void *msg = NULL;
        pthread_join(t[i], &msg);
        ck_assert_msg(msg == NULL, "%s", (char *)msg);
    }
    readback rb = read_all("shared", NULL);
    const qd_stat_avg *a = find(&rb, "a");
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->count, 4 * N_POSTS);
    ck_assert(a->sum_a[0] == 4.0 * N_POSTS);
    ck_assert(a->sum_a[1] == 4.0 * (N_POSTS * (N_POSTS - 1) / 2));
    readback_free(&rb);
    ck_assert_int_eq(model_field("shared", "posts"), 4 * N_POSTS);

    qd_stat_answer ans;
    ck_assert_int_eq(post_keyed("k", "x", 1, "run-1", "A", &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_STORED);
    g_s = other;
    ck_assert_int_eq(post_keyed("k", "x", 1, "run-1", "A", &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_REPLAYED);
    ck_assert_int_eq(post_keyed("k", "x", 5, "run-1", "B", &ans, &err), QD_CONFLICT);
    ck_assert_int_eq(ans.outcome, QD_POST_KEY_CONFLICT);
    uint8_t fa[QD_FINGERPRINT_LEN];
    qd_stats_fingerprint(false, -1, false, "A", 1, fa);
    ck_assert_int_eq(qd_stats_key_peek(other, "k", "run-1", fa, &ans, &err), QD_OK);
    ck_assert_int_eq(ans.outcome, QD_POST_REPLAYED);
    expect_avg("k", "x", 1, 1.0, false);
    g_s = mine;
    qd_stats_close(other);
}
END_TEST

typedef struct creator {
    qd_stats *s;
    const char *model;
} creator;

static void *creator_main(void *arg)
{
    const creator *c = arg;
    qd_stat_post p = post_new(c->model);
    double v = 1;
    post_add(&p, "x", 0, NULL, &v, NULL, 1);
    qd_err err = {{0}};
    qd_status st = qd_stats_post(c->s, &p, &err);
    qd_stat_post_clear(&p);
    return st == QD_OK ? NULL : strdup(err.message);
}

static void pg_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK,
                  "%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
}

/* Two writers creating the same model at the same moment: a transaction holding stat_models in
 * SHARE mode lets both find no model and stops both at their insert; released, one inserts and
 * commits, the other finds the name taken, runs its group again and then finds the model. Both
 * posts are stored. */
START_TEST(test_pg_models_created_together)
{
    qd_stats *other = NULL;
    qd_err err = {{0}};
    ck_assert_msg(qd_stats_open_engine(QD_STORE_POSTGRESQL, g_target, NULL, NULL, &other, &err) ==
                      QD_OK,
                  "%s", err.message);
    PGconn *hold = PQconnectdb(g_target);
    ck_assert_int_eq(PQstatus(hold), CONNECTION_OK);
    pg_ok(hold, "BEGIN");
    pg_ok(hold, "LOCK TABLE stat_models IN SHARE MODE");
    creator c[2] = {{g_s, "new"}, {other, "new"}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, creator_main, &c[i]), 0);
    int waiting = 0;
    for (int i = 0; i < 1000 && waiting < 2; i++) {
        char *n = qdt_pg_text(g_target, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                        "current_database() AND wait_event_type = 'Lock'");
        waiting = atoi(n);
        free(n);
        if (waiting < 2) nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    pg_ok(hold, "COMMIT");
    PQfinish(hold);
    char *msg[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) pthread_join(t[i], (void **)&msg[i]);
    qd_stats_close(other);
    ck_assert_int_eq(waiting, 2);
    for (int i = 0; i < 2; i++) ck_assert_msg(msg[i] == NULL, "%s", msg[i]);
    expect_avg("new", "x", 2, 1.0, false);
    ck_assert_int_eq(model_field("new", "posts"), 2);
}
END_TEST

/* The server drops every connection (a restart, a failover): the call that finds its connection
 * gone fails naming it, the next one reconnects; nothing acknowledged is lost. */
START_TEST(test_pg_connection_lost)
{
    post_scalar_ok("m", "x", 1);
    expect_avg("m", "x", 1, 1.0, false);
    qdt_pg_exec(g_target, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                          "datname = current_database() AND pid <> pg_backend_pid()");
    int failed = 0;
    for (int i = 0; i < 3; i++) {
        double v = 1;
        qd_err err = {{0}};
        qd_status st = post_absmax("m", "x", &v, 0, &err);
        if (st != QD_OK) {
            ck_assert_int_eq(st, QD_DB);
            ck_assert_msg(strstr(err.message, "connection"), "%s", err.message);
            failed++;
        }
    }
    ck_assert_int_le(failed, 1);
    readback rb = {0};
    qd_err err = {{0}};
    if (qd_stats_read(g_s, "m", NULL, &rb.v, &rb.n, &err) != QD_OK) /* the reader's turn */
        ck_assert_msg(strstr(err.message, "connection"), "%s", err.message);
    readback_free(&rb);
    expect_avg("m", "x", 4 - failed, 1.0, false);
    ck_assert_int_eq(model_field("m", "posts"), 4 - failed);
}
END_TEST

/* The cases every engine runs, as TCases named "<group> <engine>" (Check keeps the names). */
typedef struct engine_cases {
    const char *engine;
    void (*fixture)(void);
} engine_cases;

static TCase *engine_tcase(Suite *s, const engine_cases *e, const char *group)
{
    char name[64];
    snprintf(name, sizeof name, "%s %s", group, e->engine);
    TCase *tc = tcase_create(name); /* Check copies the name */
    tcase_add_checked_fixture(tc, e->fixture, teardown);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return tc;
}

static void add_engine_cases(Suite *s, const engine_cases *e)
{
    TCase *avg = engine_tcase(s, e, "averaging");
    tcase_add_test(avg, test_one_update_is_the_value);
    tcase_add_test(avg, test_two_updates_average);
    tcase_add_test(avg, test_bootstrap_steps);
    tcase_add_test(avg, test_merge_adds_counts_and_sums);
    tcase_add_test(avg, test_ema_hand_computed);
    tcase_add_test(avg, test_minmax);
    TCase *rej = engine_tcase(s, e, "rejections and groups");
    tcase_add_test(rej, test_shape_mismatch_stores_nothing);
    tcase_add_test(rej, test_kind_mismatch_stores_nothing);
    tcase_add_test(rej, test_bad_posts);
    tcase_add_test(rej, test_bad_post_in_a_group);
    tcase_add_test(rej, test_rejected_first_post_creates_no_model);
    tcase_add_test(rej, test_reset_inside_a_group);
    tcase_add_test(rej, test_concurrent_posters_exact_count);
    TCase *api = engine_tcase(s, e, "models and reads");
    tcase_add_test(api, test_reset);
    tcase_add_test(api, test_put_model);
    tcase_add_test(api, test_models_listing);
    tcase_add_test(api, test_name_filter);
    tcase_add_test(api, test_close_and_reopen);
    tcase_add_test(api, test_default_model_stores_only_sums);
    tcase_add_test(api, test_switching_averaging);
    tcase_add_test(api, test_bootstrap_changes);
    tcase_add_test(api, test_minmax_ema_without_cache);
    tcase_add_test(api, test_small_cache);
    TCase *keys = engine_tcase(s, e, "keys and quota");
    tcase_add_test(keys, test_fingerprint_and_keys);
    tcase_add_test(keys, test_key_replay_and_conflict);
    tcase_add_test(keys, test_keys_in_one_group);
    tcase_add_test(keys, test_key_window_and_purge);
    tcase_add_test(keys, test_keys_survive_reset_and_reopen);
    tcase_add_test(keys, test_quota);
    tcase_add_test(keys, test_quota_in_one_group);
    TCase *sq = engine_tcase(s, e, "mean_sq");
    tcase_add_test(sq, test_mean_sq_simple);
    tcase_add_test(sq, test_mean_sq_ema);
    tcase_add_test(sq, test_mean_sq_key_set_fixed);
    tcase_add_test(sq, test_mean_sq_bad_posts);
    tcase_add_test(sq, test_mean_sq_reopen_and_uncached);
}

static const engine_cases sqlite_cases = {"sqlite", setup};
static const engine_cases pg_cases = {"postgresql", setup_pg};

Suite *suite_stats_store(void)
{
    Suite *s = suite_create("stats_store");
    add_engine_cases(s, &sqlite_cases);
    if (!qdt_pg_skipped()) add_engine_cases(s, &pg_cases);
    /* what only SQLite has: its connections' tuning, its triggers, its schema's history */
    TCase *lite = tcase_create("sqlite only");
    tcase_add_checked_fixture(lite, setup, teardown);
    tcase_set_timeout(lite, 60);
    tcase_add_test(lite, test_sqlite_tuning);
    tcase_add_test(lite, test_sql_failure_fails_the_group);
    tcase_add_test(lite, test_unreadable_model_row);
    tcase_add_test(lite, test_schema);
    tcase_add_test(lite, test_failed_purge_rolls_back);
    tcase_add_test(lite, test_mean_sq_migration_keeps_rows);
    suite_add_tcase(s, lite);
    if (!qdt_pg_skipped()) {
        TCase *pg = tcase_create("postgresql only");
        tcase_add_checked_fixture(pg, setup_pg, teardown);
        tcase_set_timeout(pg, 60);
        tcase_add_test(pg, test_pg_two_writers_share_rows);
        tcase_add_test(pg, test_pg_models_created_together);
        tcase_add_test(pg, test_pg_connection_lost);
        suite_add_tcase(s, pg);
    }
    TCase *perf = tcase_create("throughput");
    tcase_add_checked_fixture(perf, setup, teardown);
    tcase_set_timeout(perf, 120);
    tcase_add_test(perf, test_throughput_print);
    suite_add_tcase(s, perf);
    return s;
}
