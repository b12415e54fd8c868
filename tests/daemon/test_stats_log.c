/* test_stats_log.c -- the statistics' delta log: posts that only update stored
 * activations are appended to DB-statslog and folded later. In process: the same posts (SMA and
 * EMA with bootstrap steps, min/max, mean_sq, merges, float32-exact and float64 values, a switch
 * of averaging in between) give bit-identical reads through the log as through the rewrite of
 * every group (stats_fold_interval 0, the behaviour before the log), before a fold, after one,
 * and after a reopen that replays what a crash left; a torn tail is dropped; a log that does not
 * fit the database refuses to open, and so does one damaged before answered records; the interval
 * and the size fold it; Idempotency-Keys decided and kept through the log and its replay. Against
 * quantd: every answered post survives kill -9.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"
#include "stats.h"
#include "stats_internal.h"
#include "stats_log.h"

#define LOG_SUFFIX "-statslog"

/* ---- a store in a directory ------------------------------------------------------------------
 */

typedef struct store {
    char *dir, *path;
    qd_store *db;
    qd_stats *s;
} store;

static void store_open(store *t, int64_t fold_ms, int64_t fold_bytes)
{
    qd_err err = {{0}};
    ck_assert_msg(qd_store_open(t->path, &t->db, &err) == QD_OK, "store: %s", err.message);
    ck_assert_msg(qd_stats_open(t->path, NULL, NULL, &t->s, &err) == QD_OK, "stats: %s",
                  err.message);
    qd_stats_configure_log(t->s, fold_ms, fold_bytes);
}

static void store_new(store *t, int64_t fold_ms)
{
    t->dir = qdt_tmpdir();
    t->path = kit_join(t->dir, "quantd.db");
    store_open(t, fold_ms, (int64_t)64 << 20);
}

/* Closes as kill -9 would leave it (no final fold) or cleanly. */
static void store_close(store *t, bool crash)
{
    if (crash)
        qd_stats_close_unfolded(t->s);
    else
        qd_stats_close(t->s);
    qd_store_close(t->db);
    t->s = NULL;
    t->db = NULL;
}

static void store_free(store *t)
{
    if (t->s) store_close(t, false);
    kit_rmtree(t->dir);
    free(t->path);
    free(t->dir);
}

/* Does the log file at path begin with a record? (a fold zeroes the first head; the file keeps
 * its size so that later appends overwrite in place) */
static bool file_has_records(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char magic[4] = {0};
    bool any = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "QDSL", 4) == 0;
    if (f) fclose(f);
    return any;
}

static bool log_has_records(const store *t)
{
    char *p = malloc(strlen(t->path) + sizeof LOG_SUFFIX);
    ck_assert_ptr_nonnull(p);
    sprintf(p, "%s%s", t->path, LOG_SUFFIX);
    bool any = file_has_records(p);
    free(p);
    return any;
}

/* ---- the posts --------------------------------------------------------------------------------
 */

static double *values(int64_t n, unsigned seed, bool f32_exact, bool nonneg)
{
    double *v = malloc((size_t)n * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (int64_t i = 0; i < n; i++) {
        unsigned x = seed * 2654435761u + (unsigned)i * 40503u;
        double d = (double)(x % 10007) / 97.0 - (nonneg ? 0 : 40.0);
        v[i] = f32_exact ? (double)(float)d : d;
        if (nonneg && v[i] < 0) v[i] = -v[i];
    }
    return v;
}

static void add_entry(qd_stat_post *p, const char *name, qd_stat_kind kind, int64_t n, int64_t n_sq,
                      int64_t count, unsigned seed)
{
    qd_stat_entry *e = realloc(p->e, (p->n + 1) * sizeof *e);
    ck_assert_ptr_nonnull(e);
    p->e = e;
    e = &p->e[p->n++];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    e->kind = kind;
    e->count = count;
    if (kind != QD_STAT_NONE) {
        e->rank = 2;
        e->shape[0] = 2;
        e->shape[1] = n / 2;
        e->n = n;
        /* absmax values are >= 0; min/max any sign; every other seed is float32-exact */
        e->a = values(n, seed, seed % 2, kind == QD_STAT_ABSMAX);
        if (kind == QD_STAT_MINMAX) e->b = values(n, seed + 7, seed % 2, false);
    }
    if (n_sq) {
        e->n_sq = n_sq;
        e->sq = values(n_sq, seed + 13, seed % 3 == 0, true);
    }
}

/* Post k of the sequence to model: four activations of every kind; every fourth post a merge
 * (counts 3). */
static qd_stat_post make_post(const char *model, int k)
{
    qd_stat_post p = {.model = strdup(model), .step = k};
    bool merge = k % 4 == 3;
    int64_t c = merge ? 3 : 1;
    p.merge = merge;
    add_entry(&p, "l/0/absmax", QD_STAT_ABSMAX, 6, 0, c, (unsigned)k * 5 + 1);
    add_entry(&p, "l/0/minmax", QD_STAT_MINMAX, 4, 0, c, (unsigned)k * 5 + 2);
    add_entry(&p, "l/1/sq", QD_STAT_NONE, 0, 3, c, (unsigned)k * 5 + 3);
    add_entry(&p, "l/1/both", QD_STAT_ABSMAX, 8, 4, c, (unsigned)k * 5 + 4);
    return p;
}

static void post_ok(qd_stats *s, const char *model, int k)
{
    qd_stat_post p = make_post(model, k);
    qd_err err = {{0}};
    qd_status st = qd_stats_post(s, &p, &err);
    ck_assert_msg(st == QD_OK, "post %d to %s: %s", k, model, err.message);
    qd_stat_post_clear(&p);
}

static void put_conf(qd_stats *s, const char *model, qd_averaging avg, double c, int64_t boot)
{
    qd_model_conf conf = {.averaging = avg, .ema_constant = c, .bootstrap_steps = boot};
    qd_err err = {{0}};
    ck_assert_msg(qd_stats_put_model(s, model, &conf, NULL, &err) == QD_OK, "put: %s", err.message);
}

/* ---- comparing reads ----------------------------------------------------------------------------
 */

static void same_array(const char *what, const char *name, const double *x, const double *y,
                       int64_t n)
{
    ck_assert_msg(!x == !y, "%s of %s: present in one read only", what, name);
    if (x && n)
        ck_assert_msg(memcmp(x, y, (size_t)n * sizeof *x) == 0, "%s of %s differs", what, name);
}

/* Every activation of model reads the same from both stores, bit for bit. */
static void same_reads(qd_stats *ref, qd_stats *got, const char *model)
{
    qd_stat_avg *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    qd_err err = {{0}};
    ck_assert_msg(qd_stats_read(ref, model, NULL, &a, &na, &err) == QD_OK, "%s", err.message);
    ck_assert_msg(qd_stats_read(got, model, NULL, &b, &nb, &err) == QD_OK, "%s", err.message);
    ck_assert_uint_eq(na, nb);
    for (size_t i = 0; i < na; i++) {
        const qd_stat_avg *x = &a[i], *y = &b[i];
        ck_assert_str_eq(x->name, y->name);
        ck_assert_int_eq(x->kind, y->kind);
        ck_assert_int_eq(x->n, y->n);
        ck_assert_int_eq(x->n_sq, y->n_sq);
        ck_assert_int_eq(x->count, y->count);
        ck_assert_int_eq(x->bootstrapping, y->bootstrapping);
        same_array("sum_a", x->name, x->sum_a, y->sum_a, x->n);
        same_array("sum_b", x->name, x->sum_b, y->sum_b, x->n);
        same_array("sum_sq", x->name, x->sum_sq, y->sum_sq, x->n_sq);
        same_array("a", x->name, x->a, y->a, x->n);
        same_array("b", x->name, x->b, y->b, x->n);
        same_array("sq", x->name, x->sq, y->sq, x->n_sq);
    }
    qd_stat_avgs_free(a, na);
    qd_stat_avgs_free(b, nb);
}

/* The model listings agree on activations, posts, bytes and whether there was a post. */
static void same_models(qd_stats *ref, qd_stats *got)
{
    json_t *a = NULL, *b = NULL;
    qd_err err = {{0}};
    ck_assert_msg(qd_stats_models(ref, &a, &err) == QD_OK, "%s", err.message);
    ck_assert_msg(qd_stats_models(got, &b, &err) == QD_OK, "%s", err.message);
    ck_assert_uint_eq(json_array_size(a), json_array_size(b));
    static const char *const keys[] = {"name", "averaging", "activations", "posts", "stats_bytes"};
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            ck_assert_msg(json_equal(json_object_get(x, keys[k]), json_object_get(y, keys[k])),
                          "model %zu: %s differs", i, keys[k]);
        ck_assert_int_eq(json_is_null(json_object_get(x, "updated_at")),
                         json_is_null(json_object_get(y, "updated_at")));
    }
    json_decref(a);
    json_decref(b);
}

#define N_POSTS 24

/* The sequence on one store: "sma" (defaults), "ema" (c 0.3, bootstrap 5), and "switch" that
 * turns to ema half way (settings apply to folded statistics: a fold first). */
static void run_sequence(qd_stats *s, int from, int to)
{
    for (int k = from; k < to; k++) {
        if (k == N_POSTS / 2) put_conf(s, "switch", QD_AVG_EMA, 0.125, 0);
        post_ok(s, "sma", k);
        post_ok(s, "ema", k);
        post_ok(s, "switch", k);
    }
}

static void compare_all(const store *ref, const store *got)
{
    same_reads(ref->s, got->s, "sma");
    same_reads(ref->s, got->s, "ema");
    same_reads(ref->s, got->s, "switch");
    same_models(ref->s, got->s);
}

/* The log gives the reads of the rewrite, bit for bit: while unfolded (the overlay), after a
 * crash and replay, and after the fold. */
START_TEST(test_log_matches_rewrite)
{
    store ref = {0}, got = {0};
    store_new(&ref, 0);                    /* no log: every group rewrites its rows */
    store_new(&got, (int64_t)3600 * 1000); /* everything stays in the log until folded */
    put_conf(ref.s, "ema", QD_AVG_EMA, 0.3, 5);
    put_conf(got.s, "ema", QD_AVG_EMA, 0.3, 5);
    run_sequence(ref.s, 0, N_POSTS / 2 + 3);
    run_sequence(got.s, 0, N_POSTS / 2 + 3);
    ck_assert_int_eq(qd_stats_log_bytes(ref.s), 0);
    ck_assert_int_gt(qd_stats_log_bytes(got.s), 0); /* the log was used */
    compare_all(&ref, &got);
    /* kill -9: the log is replayed at open */
    ck_assert(log_has_records(&got));
    store_close(&got, true);
    ck_assert(log_has_records(&got));
    store_open(&got, (int64_t)3600 * 1000, (int64_t)64 << 20);
    ck_assert(!log_has_records(&got)); /* replayed and folded */
    compare_all(&ref, &got);
    /* and on from there, then a fold (as a reset or new settings would) */
    run_sequence(ref.s, N_POSTS / 2 + 3, N_POSTS);
    run_sequence(got.s, N_POSTS / 2 + 3, N_POSTS);
    ck_assert_int_gt(qd_stats_log_bytes(got.s), 0);
    compare_all(&ref, &got);
    qd_err err = {{0}};
    ck_assert_msg(qd_stats_fold(got.s, &err) == QD_OK, "%s", err.message);
    ck_assert_int_eq(qd_stats_log_bytes(got.s), 0);
    compare_all(&ref, &got);
    /* a clean close folds too: nothing to replay */
    run_sequence(got.s, N_POSTS, N_POSTS + 2);
    run_sequence(ref.s, N_POSTS, N_POSTS + 2);
    store_close(&got, false);
    ck_assert(!log_has_records(&got));
    store_open(&got, 0, (int64_t)64 << 20);
    compare_all(&ref, &got);
    store_free(&ref);
    store_free(&got);
}
END_TEST

/* A record cut short by the crash (never answered: a group is answered after its fdatasync) is
 * dropped, and what came before it is kept. */
START_TEST(test_log_torn_tail)
{
    store ref = {0}, got = {0};
    store_new(&ref, 0);
    store_new(&got, (int64_t)3600 * 1000);
    run_sequence(ref.s, 0, 6);
    run_sequence(got.s, 0, 6);
    store_close(&got, true);
    char *p = malloc(strlen(got.path) + sizeof LOG_SUFFIX);
    ck_assert_ptr_nonnull(p);
    sprintf(p, "%s%s", got.path, LOG_SUFFIX);
    /* a copy of the log's first 40 bytes: a whole head, then a payload cut short */
    FILE *f = fopen(p, "r+b");
    ck_assert_ptr_nonnull(f);
    unsigned char head[40];
    ck_assert_uint_eq(fread(head, 1, sizeof head, f), sizeof head);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    ck_assert_uint_eq(fwrite(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    free(p);
    store_open(&got, (int64_t)3600 * 1000, (int64_t)64 << 20);
    compare_all(&ref, &got);
    store_free(&ref);
    store_free(&got);
}
END_TEST

/* The offsets of the log's records (at most max), walking the heads; their count. */
static int record_offsets(const char *path, long *at, int max)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    int n = 0;
    unsigned char head[24];
    long off = 0;
    while (n < max && fseek(f, off, SEEK_SET) == 0 &&
           fread(head, 1, sizeof head, f) == sizeof head && memcmp(head, "QDSL", 4) == 0) {
        uint32_t len;
        memcpy(&len, head + 4, 4);
        at[n++] = off;
        off += (long)sizeof head + (long)(len & 0x7fffffffu); /* top bit: last of an append */
    }
    fclose(f);
    return n;
}

static void flip_bits(const char *path, long at, int mask)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, at, SEEK_SET), 0);
    int c = fgetc(f);
    ck_assert_int_ne(c, EOF);
    ck_assert_int_eq(fseek(f, at, SEEK_SET), 0);
    ck_assert_int_ne(fputc(c ^ mask, f), EOF);
    fclose(f);
}

/* A store whose posts a crash left in its log (closed as kill -9 leaves it): the log's path
 * (malloc'd), the offsets of its records in at[0..64) and their count (at least 4) in *n. */
static char *crashed_log(store *got, long *at, int *n)
{
    store_new(got, (int64_t)3600 * 1000);
    run_sequence(got->s, 0, 6);
    store_close(got, true);
    char *p = malloc(strlen(got->path) + sizeof LOG_SUFFIX);
    ck_assert_ptr_nonnull(p);
    sprintf(p, "%s%s", got->path, LOG_SUFFIX);
    *n = record_offsets(p, at, 64);
    ck_assert_int_ge(*n, 4);
    return p;
}

/* A damaged record with answered ones of its epoch after it is refused, naming the byte and the
 * way out (replaying only what precedes it would drop answered posts silently); cut there as the
 * message says, the log opens with the posts before it. A damaged last record is a write cut by
 * the crash as far as anyone can tell: dropped, as a torn tail. */
START_TEST(test_log_damage_refused)
{
    store got = {0};
    long at[64];
    int n;
    char *p = crashed_log(&got, at, &n);
    flip_bits(p, at[n - 1] + 24 + 9, 0x10); /* the last record: a torn tail */
    flip_bits(p, at[1] + 24 + 9, 0x10);     /* the second: answered posts follow it */
    qd_err err = {{0}};
    ck_assert_msg(qd_store_open(got.path, &got.db, &err) == QD_OK, "%s", err.message);
    ck_assert_int_eq(qd_stats_open(got.path, NULL, NULL, &got.s, &err), QD_DB);
    char want[160];
    snprintf(want, sizeof want,
             "the statistics log quantd.db%s is damaged at byte %ld: %d answered", LOG_SUFFIX,
             at[1], n - 3);
    ck_assert_msg(strstr(err.message, want) != NULL, "%s\nwanted: %s", err.message, want);
    snprintf(want, sizeof want, "truncate -s %ld quantd.db%s", at[1], LOG_SUFFIX);
    ck_assert_msg(strstr(err.message, want) != NULL, "%s", err.message);
    ck_assert_ptr_null(strstr(err.message, got.dir)); /* no server path */
    got.s = NULL;
    ck_assert_int_eq(truncate(p, at[1]), 0);
    ck_assert_msg(qd_stats_open(got.path, NULL, NULL, &got.s, &err) == QD_OK, "%s", err.message);
    free(p);
    store_free(&got);
}
END_TEST

/* What is not refused, and what is. A group's records are one append: when power is lost
 * during it, its pages reach the disk in any order, so a damaged record followed by whole ones of
 * its own append only (here: the last two records made one append, the first of them damaged) is
 * a torn last append and opens; a damaged epoch field in a record's head, with answered records
 * after it, is refused like a damaged payload. */
START_TEST(test_log_damage_kinds)
{
    for (int kind = 0; kind < 2; kind++) {
        store got = {0};
        long at[64];
        int n;
        char *p = crashed_log(&got, at, &n);
        if (kind == 0) {
            flip_bits(p, at[n - 2] + 7, 0x80);      /* its last-of-append mark off: one append */
            flip_bits(p, at[n - 2] + 24 + 9, 0x10); /* and its payload damaged */
        } else {
            flip_bits(p, at[1] + 8, 0x10); /* the second record's epoch */
        }
        qd_err err = {{0}};
        ck_assert_msg(qd_store_open(got.path, &got.db, &err) == QD_OK, "%s", err.message);
        qd_status st = qd_stats_open(got.path, NULL, NULL, &got.s, &err);
        if (kind == 0) {
            ck_assert_msg(st == QD_OK, "%s", err.message);
        } else {
            ck_assert_int_eq(st, QD_DB);
            char want[160];
            snprintf(want, sizeof want, "is damaged at byte %ld: %d answered", at[1], n - 2);
            ck_assert_msg(strstr(err.message, want) != NULL, "%s\nwanted: %s", err.message, want);
            got.s = NULL;
            qd_store_close(got.db); /* store_free closes it only beside an open stats */
            got.db = NULL;
        }
        free(p);
        store_free(&got);
    }
}
END_TEST

/* A log that holds posts the database cannot follow (posts missing before them) refuses to open,
 * naming the model, rather than dropping answered posts silently. */
START_TEST(test_log_gap_refused)
{
    store got = {0};
    store_new(&got, (int64_t)3600 * 1000);
    run_sequence(got.s, 0, 4);
    store_close(&got, true);
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(got.path, &db), SQLITE_OK);
    ck_assert_int_eq(
        sqlite3_exec(db, "UPDATE stat_models SET posts = 0 WHERE name = 'ema'", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    qd_err err = {{0}};
    ck_assert_msg(qd_store_open(got.path, &got.db, &err) == QD_OK, "%s", err.message);
    ck_assert_int_eq(qd_stats_open(got.path, NULL, NULL, &got.s, &err), QD_DB);
    ck_assert_msg(strstr(err.message, "the statistics log holds post 2 of model ema, the database "
                                      "0 posts") != NULL,
                  "%s", err.message);
    got.s = NULL;
    qd_store_close(got.db);
    got.db = NULL;
    store_free(&got);
}
END_TEST

static void post_one(qd_stats *s, const char *model, int k)
{
    qd_stat_post p = {.model = strdup(model), .step = k};
    add_entry(&p, "w", QD_STAT_ABSMAX, 16, 0, 1, 2u * (unsigned)k + 1); /* float32: one size */
    qd_err err = {{0}};
    ck_assert_msg(qd_stats_post(s, &p, &err) == QD_OK, "%s", err.message);
    qd_stat_post_clear(&p);
}

/* After a fold the log is overwritten from its start; records of the older epoch that remain
 * past the new ones (here of the same size, so at record boundaries, and of a model reset since:
 * replaying them would refuse the start) end the log. */
START_TEST(test_log_epochs)
{
    store got = {0};
    store_new(&got, (int64_t)3600 * 1000);
    for (int k = 0; k < 7; k++) post_one(got.s, "r", k); /* 0 creates, 1..6 logged */
    qd_err err = {{0}};
    ck_assert_msg(qd_stats_reset(got.s, "r", &err) == QD_OK, "%s", err.message); /* folds */
    post_one(got.s, "r", 0);
    post_one(got.s, "r", 1); /* logged over the old first record */
    ck_assert(log_has_records(&got));
    store_close(&got, true);
    store_open(&got, (int64_t)3600 * 1000, (int64_t)64 << 20);
    qd_stat_avg *a = NULL;
    size_t n = 0;
    ck_assert_msg(qd_stats_read(got.s, "r", NULL, &a, &n, &err) == QD_OK, "%s", err.message);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(a[0].count, 2);
    qd_stat_avgs_free(a, n);
    store_free(&got);
}
END_TEST

/* Post k to model with key "s<k>" and a fingerprint of k + fp_salt; the outcome. */
static qd_stat_outcome post_keyed(qd_stats *s, const char *model, int k, int fp_salt)
{
    qd_stat_post p = make_post(model, k);
    char key[16];
    snprintf(key, sizeof key, "s%d", k);
    p.key = strdup(key);
    memset(p.fingerprint, k + fp_salt, sizeof p.fingerprint);
    qd_stat_answer ans;
    qd_err err = {{0}};
    qd_status st = qd_stats_post_answer(s, &p, &ans, &err);
    ck_assert_msg(st == QD_OK || ans.outcome == QD_POST_KEY_CONFLICT, "post %d: %s", k,
                  err.message);
    if (ans.outcome == QD_POST_REPLAYED) {
        ck_assert_int_eq(ans.activations, 4);
        ck_assert_int_eq(ans.step, k);
    }
    qd_stat_post_clear(&p);
    return ans.outcome;
}

/* Posts with an Idempotency-Key go to the log too: a retry is a replay and a different post a
 * conflict while the key is only in the log, and after a crash the replayed log has recorded the
 * key, so a retry then is still a replay. */
START_TEST(test_log_keys)
{
    store ref = {0}, got = {0};
    store_new(&ref, 0);
    store_new(&got, (int64_t)3600 * 1000);
    post_ok(ref.s, "m", 0);
    post_ok(got.s, "m", 0);
    for (int k = 1; k < 6; k++) {
        ck_assert_int_eq(post_keyed(ref.s, "m", k, 0), QD_POST_STORED);
        ck_assert_int_eq(post_keyed(got.s, "m", k, 0), QD_POST_STORED);
    }
    ck_assert_int_gt(qd_stats_log_bytes(got.s), 0); /* logged, keys and all */
    ck_assert_int_eq(post_keyed(got.s, "m", 3, 0), QD_POST_REPLAYED);
    ck_assert_int_eq(post_keyed(got.s, "m", 3, 1), QD_POST_KEY_CONFLICT);
    ck_assert_int_eq(post_keyed(ref.s, "m", 3, 0), QD_POST_REPLAYED);
    ck_assert_int_eq(post_keyed(ref.s, "m", 3, 1), QD_POST_KEY_CONFLICT);
    same_reads(ref.s, got.s, "m");
    store_close(&got, true); /* kill -9 */
    store_open(&got, (int64_t)3600 * 1000, (int64_t)64 << 20);
    ck_assert_int_eq(post_keyed(got.s, "m", 4, 0), QD_POST_REPLAYED);
    ck_assert_int_eq(post_keyed(got.s, "m", 5, 1), QD_POST_KEY_CONFLICT);
    ck_assert_int_eq(post_keyed(got.s, "m", 6, 0), QD_POST_STORED);
    ck_assert_int_eq(post_keyed(ref.s, "m", 6, 0), QD_POST_STORED);
    same_reads(ref.s, got.s, "m");
    same_models(ref.s, got.s);
    /* the fold wrote the keys: the reader's look-up finds them */
    qd_err err = {{0}};
    ck_assert_msg(qd_stats_fold(got.s, &err) == QD_OK, "%s", err.message);
    uint8_t fp[QD_FINGERPRINT_LEN];
    memset(fp, 6, sizeof fp);
    qd_stat_answer ans;
    ck_assert_msg(qd_stats_key_peek(got.s, "m", "s6", fp, &ans, &err) == QD_OK, "%s", err.message);
    ck_assert_int_eq(ans.outcome, QD_POST_REPLAYED);
    store_free(&ref);
    store_free(&got);
}
END_TEST

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* stats_fold_interval folds an idle log; stats_fold_bytes folds a large one at its next group;
 * a reset folds first. */
START_TEST(test_log_fold_triggers)
{
    store got = {0};
    store_new(&got, 300);
    run_sequence(got.s, 0, 3);
    ck_assert_int_gt(qd_stats_log_bytes(got.s), 0);
    for (int i = 0; i < 500 && qd_stats_log_bytes(got.s) > 0; i++) sleep_ms(20);
    ck_assert_int_eq(qd_stats_log_bytes(got.s), 0);
    ck_assert(!log_has_records(&got));
    /* fold_bytes 1 MiB: posts of 64 KiB each, the log never passes one post beyond it */
    qd_stats_configure_log(got.s, (int64_t)3600 * 1000, (int64_t)1 << 20);
    for (int k = 0; k < 40; k++) {
        qd_stat_post p = {.model = strdup("big"), .step = k};
        add_entry(&p, "w", QD_STAT_ABSMAX, 8192, 0, 1, (unsigned)k);
        qd_err err = {{0}};
        ck_assert_msg(qd_stats_post(got.s, &p, &err) == QD_OK, "%s", err.message);
        qd_stat_post_clear(&p);
        ck_assert_int_le(qd_stats_log_bytes(got.s), ((int64_t)1 << 20) + 8192 * 8 + 4096);
    }
    ck_assert_int_gt(qd_stats_log_bytes(got.s), 0);
    qd_err err = {{0}};
    ck_assert_msg(qd_stats_reset(got.s, "big", &err) == QD_OK, "%s", err.message);
    ck_assert_int_eq(qd_stats_log_bytes(got.s), 0);
    store_free(&got);
}
END_TEST

/* A hostile log: the first record's payload rewritten (random bytes, or a length, count or offset
 * field set to an extreme) with its checksum made valid again, so that the decoder reads it.
 * Opening must replay it or refuse it (QD_DB), never read past it (ASan: make check-asan). */
START_TEST(test_log_hostile_record)
{
    static const uint64_t extremes[] = {0,           1,          0x7fffffffu, 0xffffffffu,
                                        0x80000000u, UINT64_MAX, INT64_MAX,   32};
    uint32_t rng = 12345;
    for (int it = 0; it < 48; it++) {
        store got = {0};
        store_new(&got, (int64_t)3600 * 1000);
        for (int k = 0; k < 3; k++) post_ok(got.s, "m", k); /* 0 creates, 1..2 logged */
        ck_assert_int_eq(post_keyed(got.s, "m", 3, 0), QD_POST_STORED);
        store_close(&got, true);
        char *path = malloc(strlen(got.path) + sizeof LOG_SUFFIX);
        ck_assert_ptr_nonnull(path);
        sprintf(path, "%s%s", got.path, LOG_SUFFIX);
        size_t size = 0;
        unsigned char *log = kit_read_file(path, &size);
        ck_assert_ptr_nonnull(log);
        uint32_t len;
        uint64_t sum;
        memcpy(&len, log + 4, 4);
        len &= 0x7fffffffu; /* the top bit marks the last record of an append */
        memcpy(&sum, log + 16, 8);
        ck_assert_uint_le(24 + (size_t)len, size);
        unsigned char *payload = log + 24;
        uint64_t epoch_part = sum ^ qd_dlog_checksum(payload, len);
        rng = rng * 1103515245u + 12345u;
        size_t at = (rng >> 8) % len;
        if (it % 2 == 0) { /* a field: 4 or 8 bytes from a record's field boundary */
            uint64_t v = extremes[(rng >> 4) % (sizeof extremes / sizeof *extremes)];
            size_t w = it % 4 == 0 ? 4 : 8;
            at -= at % 4;
            if (at + w > len) at = len - w;
            memcpy(payload + at, &v, w);
        } else { /* a few random bytes */
            for (int j = 0; j < 1 + it % 5; j++) {
                rng = rng * 1103515245u + 12345u;
                payload[(at + (rng >> 8) % 64) % len] = (unsigned char)(rng >> 24);
            }
        }
        sum = epoch_part ^ qd_dlog_checksum(payload, len);
        memcpy(log + 16, &sum, 8);
        ck_assert_int_eq(kit_write_file(path, log, size), 0);
        free(log);
        free(path);
        qd_err err = {{0}};
        ck_assert_msg(qd_store_open(got.path, &got.db, &err) == QD_OK, "%s", err.message);
        qd_status st = qd_stats_open(got.path, NULL, NULL, &got.s, &err);
        ck_assert_msg(st == QD_OK || st == QD_DB, "iteration %d: %d %s", it, st, err.message);
        if (st != QD_OK) {
            got.s = NULL;
            qd_store_close(got.db);
            got.db = NULL;
        }
        store_free(&got);
    }
}
END_TEST

/* A logged post reuses an Idempotency-Key whose window (1 s here) has passed, for a different
 * post: stored. A kill -9, and the replay at the next start must store it again, as it was
 * answered, whatever the window it runs with (the start-up replay runs before the configured
 * window is set) and although the old key is still in the database. */
START_TEST(test_log_key_reused_after_window)
{
    store ref = {0}, got = {0};
    store_new(&ref, 0);
    store_new(&got, (int64_t)3600 * 1000);
    qd_stats_configure(ref.s, 0, 1);
    qd_stats_configure(got.s, 0, 1);
    qd_err err = {{0}};
    for (int i = 0; i < 2; i++) {
        qd_stats *s = i ? got.s : ref.s;
        post_ok(s, "m", 0);
        ck_assert_int_eq(post_keyed(s, "m", 1, 0), QD_POST_STORED);
        ck_assert_msg(qd_stats_fold(s, &err) == QD_OK, "%s", err.message);
    }
    sleep_ms(1100);
    ck_assert_int_eq(post_keyed(ref.s, "m", 1, 1), QD_POST_STORED);
    ck_assert_int_eq(post_keyed(got.s, "m", 1, 1), QD_POST_STORED);
    ck_assert_int_gt(qd_stats_log_bytes(got.s), 0); /* in the log only */
    store_close(&got, true);                        /* kill -9 */
    ck_assert_msg(qd_store_open(got.path, &got.db, &err) == QD_OK, "%s", err.message);
    ck_assert_msg(qd_stats_open(got.path, NULL, NULL, &got.s, &err) == QD_OK, "%s", err.message);
    qd_stats_configure(got.s, 0, 1);
    same_reads(ref.s, got.s, "m");
    same_models(ref.s, got.s);
    store_free(&ref);
    store_free(&got);
}
END_TEST

/* ---- the log file failing ---------------------------------------------------------------------
 */

/* The descriptor of t's open log file (found through /proc/self/fd). */
static int log_fd(const store *t)
{
    char want[4096], link[4096], at[300];
    snprintf(want, sizeof want, "%s%s", t->path, LOG_SUFFIX);
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int fd = -1;
    for (struct dirent *e; fd < 0 && (e = readdir(d));) {
        snprintf(at, sizeof at, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(at, link, sizeof link - 1);
        if (n <= 0) continue;
        link[n] = '\0';
        if (strcmp(link, want) == 0) fd = atoi(e->d_name);
    }
    closedir(d);
    ck_assert_int_ge(fd, 0);
    return fd;
}

/* Makes the log's descriptor read-only (every write and truncation of it fails); the saved
 * read-write descriptor to give back with log_writable. */
static int log_read_only(const store *t)
{
    char p[4096];
    snprintf(p, sizeof p, "%s%s", t->path, LOG_SUFFIX);
    int fd = log_fd(t), saved = dup(fd), ro = open(p, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(ro, 0);
    ck_assert_int_ge(dup2(ro, fd), 0);
    close(ro);
    return saved;
}

static void log_writable(const store *t, int saved)
{
    ck_assert_int_ge(dup2(saved, log_fd(t)), 0);
    close(saved);
}

/* A post whose append fails is folded into SQLite instead and answered only then. When the fold
 * cannot empty the log either, its records (held by the database) stay in the file: a reset
 * then must not commit (a replay would find the reset model's old posts and refuse to start, or
 * apply them again), and once the log can be emptied the reset goes through. */
START_TEST(test_log_unemptied_reset)
{
    store got = {0};
    store_new(&got, (int64_t)3600 * 1000);
    for (int k = 0; k < 4; k++) post_one(got.s, "r", k); /* 0 creates, 1..3 logged */
    ck_assert(log_has_records(&got));
    int saved = log_read_only(&got);
    post_one(got.s, "r", 4);          /* the append fails: folded, with 1..3, into SQLite */
    ck_assert(log_has_records(&got)); /* and the log could not be emptied */
    qd_err err = {{0}};
    ck_assert_int_eq(qd_stats_reset(got.s, "r", &err), QD_DB);
    log_writable(&got, saved);
    store_close(&got, true); /* kill -9 */
    store_open(&got, (int64_t)3600 * 1000, (int64_t)64 << 20);
    qd_stat_avg *a = NULL;
    size_t n = 0;
    ck_assert_msg(qd_stats_read(got.s, "r", NULL, &a, &n, &err) == QD_OK, "%s", err.message);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(a[0].count, 5); /* post 4 was answered: it is there, once */
    qd_stat_avgs_free(a, n);
    /* the log writable again: a post to the log, then a reset that holds across kill -9 */
    post_one(got.s, "r", 5); /* caches the activation */
    post_one(got.s, "r", 6); /* logged */
    ck_assert(log_has_records(&got));
    saved = log_read_only(&got);
    ck_assert_int_eq(qd_stats_reset(got.s, "r", &err), QD_DB);
    log_writable(&got, saved);
    ck_assert_msg(qd_stats_reset(got.s, "r", &err) == QD_OK, "%s", err.message);
    ck_assert(!log_has_records(&got));
    store_close(&got, true);
    store_open(&got, (int64_t)3600 * 1000, (int64_t)64 << 20);
    ck_assert_msg(qd_stats_read(got.s, "r", NULL, &a, &n, &err) == QD_OK, "%s", err.message);
    ck_assert_uint_eq(n, 0);
    qd_stat_avgs_free(a, n);
    store_free(&got);
}
END_TEST

/* ---- against quantd -------------------------------------------------------------------------
 */

/* Every answered post survives kill -9: the log holds them (nothing folded in an hour), quantd
 * restarts, replays, and counts them all; a clean stop then leaves no log. */
START_TEST(test_log_kill9_daemon)
{
    qdp d;
    const char *const args[] = {"--stats-fold-interval", "1h", NULL};
    qdp_start(&d, args);
    enum { POSTS = 30 };
    for (int i = 0; i < POSTS; i++) {
        char body[200];
        snprintf(body, sizeof body,
                 "{\"stats\":{\"l/0/x\":{\"absmax\":[%d,1.5]},\"l/0/y\":{\"min\":[-%d],"
                 "\"max\":[%d]}}}",
                 i, i, 2 * i);
        qdp_resp r =
            qdp_req(&d, "POST", "/v1/models/k/stats", "application/json", body, strlen(body), NULL);
        ck_assert_msg(r.status == 200, "post %d: %ld %s", i, r.status, r.body);
        qdp_resp_free(&r);
    }
    char *log = kit_join(d.data_dir, "quantd.db" LOG_SUFFIX);
    ck_assert(file_has_records(log)); /* posts 2..30 are in the log only */
    ck_assert_int_eq(qdp_signal(&d, SIGKILL), 128 + SIGKILL);
    qdp_restart(&d, args);
    qdp_resp r = qdp_req(&d, "GET", "/v1/models/k/stats", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    json_t *doc = qdp_json(&r);
    json_t *x = json_object_get(json_object_get(doc, "stats"), "l/0/x");
    ck_assert_ptr_nonnull(x);
    ck_assert_int_eq(json_integer_value(json_object_get(x, "count")), POSTS);
    /* sum of 0..29 = 435 */
    ck_assert(json_number_value(json_array_get(json_object_get(x, "sum_of_absmax"), 0)) == 435.0);
    json_decref(doc);
    qdp_resp_free(&r);
    r = qdp_req(&d, "GET", "/v1/models/k", NULL, NULL, 0, NULL);
    doc = qdp_json(&r);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "posts")), POSTS);
    json_decref(doc);
    qdp_resp_free(&r);
    ck_assert_int_eq(qdp_signal(&d, SIGTERM), 0);
    ck_assert(!file_has_records(log)); /* the clean stop folded */
    free(log);
    qdp_restart(&d, NULL);
    qdp_stop(&d);
}
END_TEST

Suite *suite_stats_log(void)
{
    Suite *s = suite_create("stats_log");
    TCase *tc = tcase_create("delta log");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_log_matches_rewrite);
    tcase_add_test(tc, test_log_torn_tail);
    tcase_add_test(tc, test_log_gap_refused);
    tcase_add_test(tc, test_log_damage_refused);
    tcase_add_test(tc, test_log_damage_kinds);
    tcase_add_test(tc, test_log_epochs);
    tcase_add_test(tc, test_log_keys);
    tcase_add_test(tc, test_log_fold_triggers);
    tcase_add_test(tc, test_log_unemptied_reset);
    tcase_add_test(tc, test_log_hostile_record);
    tcase_add_test(tc, test_log_key_reused_after_window);
    tcase_add_test(tc, test_log_kill9_daemon);
    suite_add_tcase(s, tc);
    return s;
}
