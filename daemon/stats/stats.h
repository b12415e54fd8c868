/* stats.h -- calibration statistics from training jobs (SPEC section 8): what a post
 * carries, the per-model averaging settings, the single writer that group-commits posts to
 * SQLite or to its delta log (an answer only after its transaction committed or its
 * records were fdatasync'd), the reads (never blocked by the writer: WAL, own connection, and
 * the overlay of the posts logged but not folded), and the averages as the library's SRQ engine
 * takes them.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STATS_H
#define QD_STATS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "quant.h"
#include "quant_rules.h"
#include "quant_srq.h"
#include "db.h"
#include "store.h"

/* ---- what a post carries (stats_parse.c fills these) ------------------------------------------
 */

/* The range statistic of an activation. Besides it (or instead: QD_STAT_NONE) an activation may
 * carry the importance statistic mean_sq (SPEC section 9); its set of keys is fixed by its first
 * post. */
typedef enum qd_stat_kind {
    QD_STAT_ABSMAX = 0, /* one array: absmax */
    QD_STAT_MINMAX = 1, /* two arrays of one shape: min and max */
    QD_STAT_NONE = 2    /* none: mean_sq alone (rank 0, n 0, a and b NULL) */
} qd_stat_kind;

/* "absmax", "minmax" or "none" (mean_sq alone): the stats table's kind column, the API's "kind". */
const char *qd_stat_kind_name(qd_stat_kind k);
bool qd_stat_kind_parse(const char *text, qd_stat_kind *out);

typedef struct qd_stat_entry {
    char *name; /* the activation as posted, e.g. "layers/0/mlp/dot_general0_lhs" */
    qd_stat_kind kind;
    int rank; /* 0: a scalar */
    int64_t shape[QUANT_MAX_RANK];
    int64_t n;     /* elements (product of shape; 1 for a scalar; 0 for NONE) */
    double *a;     /* absmax, or min: n finite values (sums in a merge) */
    double *b;     /* max for MINMAX (sums in a merge), else NULL */
    int64_t n_sq;  /* mean_sq's length (shape [n_sq]: one value per input feature), 0: none */
    double *sq;    /* mean_sq (sum_of_mean_sq in a merge): n_sq finite values >= 0, or NULL */
    int64_t count; /* 1 for an update; the dump's count (>= 1) in a merge */
} qd_stat_entry;

/* The SHA-256 of a post as it came (qd_stats_fingerprint). */
#define QD_FINGERPRINT_LEN 32
/* An Idempotency-Key: 1-255 bytes of visible ASCII (0x21-0x7e). */
#define QD_KEY_MAX 255

typedef struct qd_stat_post {
    char *model;
    bool merge;   /* ?mode=merge: a Qwix quant_stats dump (counts and sums) */
    int64_t step; /* the training step, -1 when absent */
    qd_stat_entry *e;
    size_t n;
    /* The post's Idempotency-Key (malloc'd, freed by qd_stat_post_clear) or NULL, and the
     * fingerprint of the request it came in (only read when key is set). */
    char *key;
    uint8_t fingerprint[QD_FINGERPRINT_LEN];
} qd_stat_post;

void qd_stat_post_clear(qd_stat_post *p);
/* The bytes p's parsed statistics hold in memory (entries, names, arrays, each heap block with
 * its overhead): what a post takes of max_body_memory while it waits for its commit. */
uint64_t qd_stat_post_bytes(const qd_stat_post *p);

/* Is key a valid Idempotency-Key (QD_KEY_MAX)? */
bool qd_stat_key_valid(const char *key);
/* What tells two posts apart for an Idempotency-Key: SHA-256 over the mode, the ?step= value
 * (step -1: none), the media type (binary: application/octet-stream, else JSON) and the body
 * bytes, each framed so that no two different requests hash the same input. */
void qd_stats_fingerprint(bool merge, int64_t step, bool binary, const void *body, size_t len,
                          uint8_t out[QD_FINGERPRINT_LEN]);

/* Parsers (each validates everything and names the activation in its error; QD_INVALID). */
qd_status qd_stats_parse_json(const char *body, size_t len, bool merge, qd_stat_post *out,
                              qd_err *err);
/* A safetensors body: tensors ACT/absmax or ACT/min + ACT/max, and/or ACT/mean_sq; F32, BF16,
 * F16 or F64. */
qd_status qd_stats_parse_safetensors(const void *body, size_t len, qd_stat_post *out, qd_err *err);

/* ---- per-model settings -----------------------------------------------------------------------
 */

typedef enum qd_averaging { QD_AVG_SIMPLE = 0, QD_AVG_EMA = 1 } qd_averaging;

typedef struct qd_model_conf {
    qd_averaging averaging;  /* default simple (Qwix SimpleMovingAverage) */
    double ema_constant;     /* default 0.01, in (0, 1] */
    int64_t bootstrap_steps; /* default 0: while count <= this, the calibration is the last post */
} qd_model_conf;

void qd_model_conf_defaults(qd_model_conf *c);

/* ---- the store of statistics ------------------------------------------------------------------
 */

typedef struct qd_stats qd_stats;

/* Opens its own SQLite connections on db_path (db.h's statistics writer for the writer thread,
 * its reader), the schema having been migrated by qd_store_open, and starts the writer thread.
 * metrics may be NULL. tuning (NULL: db.h's defaults; config [stats] busy_timeout, page_cache):
 * the busy timeout of both connections, the page cache of the writer's. Until
 * qd_stats_configure: a quota of 1 GiB, a window of 1 day. */
qd_status qd_stats_open(const char *db_path, qd_metrics *metrics, const qd_db_tuning *tuning,
                        qd_stats **out, qd_err *err);
/* qd_stats_open on the database engine kind (store.h): SQLite, target the database file, as
 * qd_stats_open; PostgreSQL, target a libpq connection string of a database the job store's open
 * migrated (qd_store_open_engine). On PostgreSQL the writer locks every model and activation row
 * it touches (SELECT ... FOR UPDATE) and keeps nothing between groups, so several instances may
 * post to one database: their posts apply in the order the database commits them. There is no
 * delta log (qd_stats_configure_log changes nothing); the reads take one snapshot each. tuning is
 * SQLite's (PostgreSQL ignores it). */
qd_status qd_stats_open_engine(qd_store_kind kind, const char *target, qd_metrics *metrics,
                               const qd_db_tuning *tuning, qd_stats **out, qd_err *err);
/* The limits (config stats_quota, idempotency_window), from the writer's next group on:
 * quota_bytes of sums a model may hold (8 bytes per value of sum_a and sum_b), and how many
 * seconds an Idempotency-Key is remembered. Values below 1 keep the current setting. */
void qd_stats_configure(qd_stats *s, int64_t quota_bytes, int64_t idempotency_window_s);
/* The delta log (config stats_fold_interval, stats_fold_bytes), from the writer's next group
 * on. A group of posts that only update activations the writer holds in memory (their
 * Idempotency-Keys logged with them and written to SQLite by the fold) is made durable by appending
 * the posts to the log (DB-statslog) with one fdatasync instead of rewriting the activations'
 * float64 sums in SQLite; the log is folded into SQLite (every changed row written, the log
 * emptied) once fold_interval_ms passed since its first record or it holds fold_bytes, before a
 * reset or new settings, at close, and at open (the records a kill -9 left are replayed). Reads see
 * folded and logged posts alike, bit for bit. fold_interval_ms 0: no log (every group writes its
 * rows, as before); values below 0 (and fold_bytes below 1) keep the current setting. */
void qd_stats_configure_log(qd_stats *s, int64_t fold_interval_ms, int64_t fold_bytes);
/* Finishes the queued writes, folds the delta log, stops the writer, closes. NULL is a no-op. */
void qd_stats_close(qd_stats *s);

/* Writes go through the one writer thread, which takes every write queued while it was busy
 * into one transaction or one append to the delta log (group commit; qd_stats_configure_log);
 * each call returns after that transaction committed or that append was fdatasync'd (or
 * failed). A post is all or nothing: QD_INVALID (message naming the activation: shape or kind
 * differs from what is stored) leaves nothing of it stored, whatever the other posts of the
 * group do. An unknown model is created with the default settings by its first post. */
qd_status qd_stats_post(qd_stats *s, const qd_stat_post *p, qd_err *err);

/* What the writer did with a post. */
typedef enum qd_stat_outcome {
    QD_POST_NONE = 0,     /* nothing (a failure: the status says which; or a key not known) */
    QD_POST_STORED,       /* QD_OK: applied, and its key (if any) recorded with the answer */
    QD_POST_REPLAYED,     /* QD_OK: its key came with the same post before: nothing applied */
    QD_POST_KEY_CONFLICT, /* QD_CONFLICT: its key came with a different post (within the window) */
    QD_POST_OVER_QUOTA    /* QD_CONFLICT: its new activations would take the model over its quota */
} qd_stat_outcome;

typedef struct qd_stat_answer {
    qd_stat_outcome outcome;
    int64_t activations; /* STORED: the post's; REPLAYED: the first post's answer */
    int64_t step;        /* likewise (-1: none) */
    int64_t first_ms;    /* REPLAYED, KEY_CONFLICT: when the key was recorded */
    int64_t stats_bytes; /* STORED: what the model holds now; OVER_QUOTA: what it would hold */
} qd_stat_answer;

/* qd_stats_post with an Idempotency-Key (p->key, p->fingerprint) and the answer in *ans (may be
 * NULL). The key is looked up inside the post's group transaction, which also sees the keys of
 * the posts before it in the group: the same fingerprint is a replay (nothing applied, the first
 * answer returned), another one is a conflict (the message names the key and when it was used);
 * a key unknown or older than the window is applied and recorded in that same transaction, so
 * an answered post's key survives kill -9. A post whose new activations would take the model
 * over its quota is refused whole (QD_CONFLICT, outcome QD_POST_OVER_QUOTA, message naming
 * stats_quota). A failed post records nothing. */
qd_status qd_stats_post_answer(qd_stats *s, const qd_stat_post *p, qd_stat_answer *ans,
                               qd_err *err);
/* The reader's look at a key, never waiting for the writer (the HTTP fast path, before the body
 * is parsed): ans->outcome QD_POST_REPLAYED with the first answer when model's key is
 * remembered with this fingerprint, else QD_POST_NONE (the writer decides). */
qd_status qd_stats_key_peek(qd_stats *s, const char *model, const char *key,
                            const uint8_t fingerprint[QD_FINGERPRINT_LEN], qd_stat_answer *ans,
                            qd_err *err);
/* Deletes a model's statistics (its settings stay). QD_NOT_FOUND for an unknown model. */
qd_status qd_stats_reset(qd_stats *s, const char *model, qd_err *err);
/* Creates or replaces a model's settings; *created tells which. */
qd_status qd_stats_put_model(qd_stats *s, const char *model, const qd_model_conf *c, bool *created,
                             qd_err *err);

/* Reads. */
/* [{"name","averaging","ema_constant","bootstrap_steps","activations","posts","updated_at",
 * "stats_bytes"}] by name ("posts": updates and merges stored; "updated_at": ISO-8601 or null;
 * "stats_bytes": the sums it holds, what the quota counts). */
qd_status qd_stats_models(qd_stats *s, json_t **out, qd_err *err);
qd_status qd_stats_model_conf(qd_stats *s, const char *model, qd_model_conf *c, qd_err *err);

/* One activation's statistics and the calibration its model's averaging gives. */
typedef struct qd_stat_avg {
    char *name;
    qd_stat_kind kind;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    int64_t n;
    int64_t count;
    double *sum_a, *sum_b; /* sum_of_absmax (or sum_of_min), sum_of_max (MINMAX); NULL for NONE */
    double *a, *b;         /* the calibration: absmax (or min), max */
    int64_t n_sq;          /* mean_sq's length, 0 when the activation has none */
    double *sum_sq, *sq;   /* sum_of_mean_sq and its average (as a and b are averaged), or NULL */
    bool bootstrapping;    /* count <= bootstrap_steps: a/b are the last posted values */
    int64_t updated_ms;
} qd_stat_avg;

/* The model's activations (all, or those whose name fully matches name_regex, PCRE2), by name.
 * QD_NOT_FOUND for an unknown model; QD_INVALID for a bad regex. */
qd_status qd_stats_read(qd_stats *s, const char *model, const char *name_regex, qd_stat_avg **out,
                        size_t *n, qd_err *err);
void qd_stat_avgs_free(qd_stat_avg *a, size_t n);

/* ---- static activation scales (stats_scales.c) ------------------------------------------------
 */

/* The averages as the library's SRQ engine takes them (quant_srq_compute): n views pointing
 * into `avg` (which must outlive them), malloc'd; NULL on allocation failure. */
quant_act_stat *qd_stat_views(const qd_stat_avg *avg, size_t n);

#endif /* QD_STATS_H */
