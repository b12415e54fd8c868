/* stats_internal.h -- what stats_store.c (open, close, encodings), stats_read.c (the reads),
 * stats_writer.c (the writer thread and its queue) and the group files (stats_group.h: one
 * group's transaction, its cache, the arithmetic) share and nobody else sees: the qd_stats
 * struct, the write requests, the blob and shape encodings, and the test hooks.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STATS_INTERNAL_H
#define QD_STATS_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>

#include "stats.h"

/* The most elements one activation may have: 4 Mi (each of its six float64 arrays is then
 * 32 MiB; a row stays far below SQLite's 1e9-byte limit). */
#define QD_STATS_MAX_ELEMS ((int64_t)1 << 22)
/* "[d0,d1,...]" of QUANT_MAX_RANK dimensions of up to 20 digits. */
#define QD_SHAPE_TEXT_LEN (2 + QUANT_MAX_RANK * 21 + 1)

/* ---- write requests --------------------------------------------------------------------------
 */

typedef enum stats_req_kind { QD_REQ_POST, QD_REQ_RESET, QD_REQ_PUT_MODEL } stats_req_kind;

/* Lives on the caller's stack while the caller waits for done; the writer fills st/err before
 * setting done (under the queue mutex) and never touches it afterwards. */
typedef struct stats_req {
    stats_req_kind kind;
    const qd_stat_post *post;  /* QD_REQ_POST */
    qd_stat_answer ans;        /* QD_REQ_POST: the answer */
    const char *model;         /* QD_REQ_RESET, QD_REQ_PUT_MODEL */
    const qd_model_conf *conf; /* QD_REQ_PUT_MODEL */
    bool created;              /* QD_REQ_PUT_MODEL: the answer */
    qd_status st;
    qd_err err;
    bool done;
    pthread_cond_t done_cv;
    struct stats_req *next;
} stats_req;

typedef struct stats_group stats_group; /* stats_group.c */

/* What the writer takes with each group (under the queue mutex). */
typedef struct stats_settings {
    size_t cache_budget; /* bytes the writer's row cache keeps between groups */
    int64_t quota_bytes; /* sums a model may hold (config stats_quota) */
    int64_t window_ms;   /* how long an Idempotency-Key is remembered (idempotency_window) */
    bool purge_now;      /* test hook: purge expired keys in the next group, whenever the last */
} stats_settings;

struct qd_stats {
    qd_metrics *metrics; /* may be NULL */
    /* reads (stats_store.c): one connection behind a mutex, never waiting for the writer */
    sqlite3 *rdb;
    pthread_mutex_t rmu;
    sqlite3_stmt *r_models, *r_conf, *r_rows, *r_key;
    /* the writer (stats_writer.c): its connection lives in the group */
    stats_group *group;
    pthread_mutex_t qmu;
    pthread_cond_t work_cv;
    stats_req *head, *tail;
    size_t queued;
    stats_settings set;
    bool stopping, paused, started;
    pthread_t thread;
};

/* ---- connections and encodings (stats_store.c) ------------------------------------------------
 */

/* Opens a connection on path with the store's settings (busy timeout, defensive, foreign keys,
 * synchronous FULL); query_only for a reader. */
qd_status qd_stats_connect(const char *path, bool reader, sqlite3 **out, qd_err *err);
/* "op: sqlite's message" from db; QD_DB (QD_NOMEM for SQLITE_NOMEM). */
qd_status qd_stats_dberr(sqlite3 *db, qd_err *err, const char *op);
qd_status qd_stats_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **out, qd_err *err);
/* The reader's statements (stats_read.c), on s->rdb. */
qd_status qd_stats_prepare_reads(qd_stats *s, qd_err *err);

/* "[2,3]" ("[]" for rank 0) into buf (QD_SHAPE_TEXT_LEN). */
void qd_shape_format(int rank, const int64_t *shape, char *buf);
/* The reverse; false when text is not such a list (or too large). *n: the element count. */
bool qd_shape_parse(const char *text, int *rank, int64_t *shape, int64_t *n);
/* n doubles from a little-endian float64 blob (false when its length is not 8 * n). */
bool qd_blob_to_doubles(const void *blob, int bytes, double *dst, int64_t n);
/* Checks a post before it is queued: model and names present, a valid Idempotency-Key if any,
 * shapes and element counts consistent, the arrays of the kind present, values finite (mean_sq
 * also >= 0), counts >= 1. QD_INVALID naming the activation. */
qd_status qd_stat_post_check(const qd_stat_post *p, qd_err *err);

/* ---- the writer (stats_writer.c) and its groups (stats_group.c) -------------------------------
 */

qd_status qd_stats_writer_start(qd_stats *s, const char *path, qd_err *err);
/* Drains the queue, stops and joins the thread, frees the group. */
void qd_stats_writer_stop(qd_stats *s);

/* The writer's row cache keeps at most this many bytes between groups. */
#define QD_STATS_CACHE_BYTES ((size_t)64 << 20)
/* The limits before qd_stats_configure: config's defaults of stats_quota, idempotency_window. */
#define QD_STATS_QUOTA_BYTES ((int64_t)1 << 30)
#define QD_STATS_WINDOW_S    ((int64_t)86400)

qd_status qd_stats_group_new(const char *path, stats_group **out, qd_err *err);
void qd_stats_group_free(stats_group *g);
/* Runs the requests of list (linked by next) in one transaction and fills each one's st/err
 * (and a post's answer); returns the number of posts stored (replays are not). */
size_t qd_stats_group_run(stats_group *g, stats_req *list, const stats_settings *set,
                          qd_metrics *m);
/* The settings a group is run with, under the queue mutex. */
stats_settings qd_stats_settings(qd_stats *s);

/* Test hooks: a paused writer takes nothing from the queue (so a test can build a group);
 * qd_stats_queued tells how many requests wait; the cache budget applies from the next group
 * (0: nothing is kept between groups); qd_stats_purge_next makes the next group delete the
 * expired Idempotency-Keys however recently the last one did. */
void qd_stats_pause(qd_stats *s, bool paused);
size_t qd_stats_queued(qd_stats *s);
void qd_stats_cache_budget(qd_stats *s, size_t bytes);
void qd_stats_purge_next(qd_stats *s);

#endif /* QD_STATS_INTERNAL_H */
