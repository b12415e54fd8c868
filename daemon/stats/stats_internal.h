/* stats_internal.h -- what stats_store.c (open, close, encodings), stats_read.c (the reads),
 * stats_writer.c (the writer thread and its queue) and the group files (stats_group.h: one
 * group's transaction, its cache, the arithmetic) share and nobody else sees: the qd_stats
 * struct, the write requests, the blob and shape encodings, and the test hooks.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STATS_INTERNAL_H
#define QD_STATS_INTERNAL_H

#include <pthread.h>

#include "db.h"
#include "stats.h"

/* The most elements one activation may have: 4 Mi (each of its six float64 arrays is then
 * 32 MiB; a row stays far below SQLite's 1e9-byte limit). */
#define QD_STATS_MAX_ELEMS ((int64_t)1 << 22)
/* "[d0,d1,...]" of QUANT_MAX_RANK dimensions of up to 20 digits. */
#define QD_SHAPE_TEXT_LEN (2 + QUANT_MAX_RANK * 21 + 1)

/* ---- write requests --------------------------------------------------------------------------
 */

typedef enum stats_req_kind {
    QD_REQ_POST,
    QD_REQ_RESET,
    QD_REQ_PUT_MODEL,
    QD_REQ_FOLD /* folds the delta log, nothing else (qd_stats_fold) */
} stats_req_kind;

/* Lives on the caller's stack while the caller waits for done; the writer fills st/err before
 * setting done (under the queue mutex) and never touches it afterwards. */
typedef struct stats_req {
    stats_req_kind kind;
    const qd_stat_post *post;  /* QD_REQ_POST */
    qd_stat_answer ans;        /* QD_REQ_POST: the answer */
    const char *model;         /* QD_REQ_RESET, QD_REQ_PUT_MODEL */
    const qd_model_conf *conf; /* QD_REQ_PUT_MODEL */
    bool created;              /* QD_REQ_PUT_MODEL: the answer */
    int64_t posts_before;      /* QD_REQ_POST stored: its model's post count before it */
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
    int64_t fold_ms;     /* fold the delta log this long after its first record (0: no log) */
    int64_t fold_bytes;  /* ... or once it holds this many bytes (config stats_fold_bytes) */
} stats_settings;

/* ---- the posts logged but not folded, as the reads see them (stats_pending.c) ------------------
 */

typedef struct qd_pend_row {
    char *model, *name;
    uint64_t hash;
    qd_stat_kind kind;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    int64_t n, n_sq, count, updated_ms;
    bool has_last, has_ema;
    double *v; /* the layout of stat_row.v (stats_group.h); only the kept arrays are copied */
    size_t v_len;
} qd_pend_row;

typedef struct qd_pend_model {
    char *name;
    int64_t posts, last_ms; /* the model's stat_models.posts and stats_updated_ms, unfolded */
} qd_pend_model;

/* The overlay; mu is held by a read for its whole transaction and by the writer while it changes
 * the overlay (after a logged group is durable, and after a fold committed: emptied). */
typedef struct qd_pending {
    pthread_mutex_t mu;
    qd_pend_row *rows;
    size_t n_rows, cap_rows;
    qd_pend_model *models;
    size_t n_models, cap_models;
} qd_pending;

void qd_pending_init(qd_pending *p);
void qd_pending_free(qd_pending *p);
void qd_pending_clear(qd_pending *p);
const qd_pend_model *qd_pending_model(const qd_pending *p, const char *model);
const qd_pend_row *qd_pending_row(const qd_pending *p, const char *model, const char *name);
/* The calibration of r under the model's settings c, as a stored row would give it; false when
 * out of memory (a holds what was allocated: free it). */
bool qd_pending_avg(const qd_pend_row *r, const qd_model_conf *c, qd_stat_avg *a);

struct qd_stats_ops; /* stats_engine.h */

struct qd_stats {
    qd_metrics *metrics;            /* may be NULL */
    const struct qd_stats_ops *ops; /* the engine (stats_engine.h) */
    /* reads (stats_read.c): the engine's reader connection behind a mutex, never waiting for
     * the writer */
    void *rd;
    pthread_mutex_t rmu;
    /* the writer (stats_writer.c): its connection lives in the group */
    stats_group *group;
    pthread_mutex_t qmu;
    pthread_cond_t work_cv;
    stats_req *head, *tail;
    size_t queued;
    stats_settings set;
    qd_pending pend; /* what the reads see of the unfolded delta log */
    bool stopping, paused, started;
    bool no_final_fold; /* test hook: stop as kill -9 would, leaving the log unfolded */
    int64_t log_bytes;  /* the delta log's bytes after the last group (qd_stats_log_bytes) */
    pthread_t thread;
};

/* ---- the reader (stats_read.c) and encodings (stats_store.c) -----------------------------------
 */

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

/* Starts the writer on s->ops's writer connection to target. */
qd_status qd_stats_writer_start(qd_stats *s, const char *target, const qd_db_tuning *tuning,
                                qd_err *err);
/* Drains the queue, stops and joins the thread, frees the group. */
void qd_stats_writer_stop(qd_stats *s);

/* The writer's row cache keeps at most this many bytes between groups. */
#define QD_STATS_CACHE_BYTES ((size_t)64 << 20)
/* The limits before qd_stats_configure: config's defaults of stats_quota, idempotency_window. */
#define QD_STATS_QUOTA_BYTES ((int64_t)1 << 30)
#define QD_STATS_WINDOW_S    ((int64_t)86400)

/* The delta log's defaults before qd_stats_configure_log: config's stats_fold_interval (1 s) and
 * stats_fold_bytes (64 MiB). */
#define QD_STATS_FOLD_MS    ((int64_t)1000)
#define QD_STATS_FOLD_BYTES ((int64_t)64 << 20)

/* Opens the engine's writer connection to path and the delta log beside path, and replays the
 * log's records into the database (a fold): the posts answered before a crash. pend: the
 * readers' overlay. */
qd_status qd_stats_group_new(const struct qd_stats_ops *ops, const char *path,
                             const qd_db_tuning *tuning, qd_pending *pend, stats_group **out,
                             qd_err *err);
/* When the delta log is due for a fold (CLOCK_REALTIME ms), 0 when it holds nothing. */
int64_t qd_stats_group_fold_at(const stats_group *g, const stats_settings *set);
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
/* Closes s leaving the delta log as a kill -9 would: no final fold (tests of the recovery). */
void qd_stats_close_unfolded(qd_stats *s);
/* Folds the delta log into SQLite now (tests that read the tables themselves). */
qd_status qd_stats_fold(qd_stats *s, qd_err *err);
/* Bytes of records in the delta log now (the writer's view; tests). */
int64_t qd_stats_log_bytes(qd_stats *s);

#endif /* QD_STATS_INTERNAL_H */
