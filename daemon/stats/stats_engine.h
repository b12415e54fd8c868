/* stats_engine.h -- the one table of operations a database engine implements for the
 * statistics (as store_engine.h does for the job store): the writer's group transaction, a
 * model's and an activation's stored rows read under a row lock and written once per group, the
 * Idempotency-Keys, and the reads on a connection of their own. The group (stats_group.c), its
 * cache, the arithmetic, the quota, the delta log and the readers' overlay stay above the table,
 * shared by every engine. Rows cross it as the records below, engine-neutral: what an engine
 * hands to a callback or fills in is valid during the call only. SQLite: stats_sqlite.c (the
 * writer's side), stats_sqlite_read.c (the reader's); PostgreSQL: stats_pg.c, stats_pg_read.c.
 *
 * Every operation returns a qd_status and, on failure, a message naming the operation (never a
 * password or a server path).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STATS_ENGINE_H
#define QD_STATS_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "db.h"
#include "stats.h"

/* An activation's arrays as stored: per part (a: absmax or min, b: max, sq: mean_sq) its sum, its
 * last post and its EMA, in that order: arr[part * QD_ARR_PER_PART + which] (stats_group.h's
 * P_* and A_* index them alike). */
enum { QD_ARR_SUM, QD_ARR_LAST, QD_ARR_EMA, QD_ARR_PER_PART };
enum { QD_PART_A, QD_PART_B, QD_PART_SQ, QD_PARTS };
#define QD_STAT_ARRAYS (QD_PARTS * QD_ARR_PER_PART)
/* A model's averaging as stored ("simple", "ema"), with room for a damaged value to be read. */
#define QD_AVERAGING_TEXT 16

/* A model's row. */
typedef struct qd_stat_model_rec {
    int64_t id;
    const char *name;
    char averaging[QD_AVERAGING_TEXT]; /* as stored; the caller parses it */
    double ema_constant;
    int64_t bootstrap_steps;
    int64_t posts;   /* posts stored since created or reset */
    int64_t last_ms; /* stats_updated_ms; 0: never (stored as NULL) */
    int64_t created_ms, updated_ms;
    int64_t activations, stats_bytes; /* read_models only: its rows, the bytes of its sums */
} qd_stat_model_rec;

/* An activation's row. arr[k] is NULL (stored as NULL) or arr_bytes[k] bytes of little-endian
 * float64. */
typedef struct qd_stat_row_rec {
    int64_t id, model_id;
    const char *name;
    const char *kind;  /* "absmax", "minmax", "none" as stored */
    const char *shape; /* "[2,3]", NULL for mean_sq alone */
    int64_t sq_len;    /* mean_sq's length, 0 for none (stored as NULL) */
    int64_t count, created_ms, updated_ms;
    const void *arr[QD_STAT_ARRAYS];
    int64_t arr_bytes[QD_STAT_ARRAYS];
} qd_stat_row_rec;

/* An Idempotency-Key's row: the fingerprint of its post and the answer it got. */
typedef struct qd_stat_key_rec {
    uint8_t fingerprint[QD_FINGERPRINT_LEN];
    int fingerprint_len; /* as stored; a fingerprint is QD_FINGERPRINT_LEN bytes */
    int64_t activations;
    int64_t step; /* -1: none (stored as NULL) */
    int64_t created_ms;
} qd_stat_key_rec;

/* Called once per row read; a status other than QD_OK stops the walk and is returned. */
typedef qd_status (*qd_stat_row_fn)(void *ctx, const qd_stat_row_rec *row, qd_err *err);
typedef qd_status (*qd_stat_model_fn)(void *ctx, const qd_stat_model_rec *model, qd_err *err);

typedef struct qd_stats_ops {
    const char *name; /* "sqlite", "postgresql" */
    /* Other processes write the same rows (several instances on one database): the writer keeps
     * nothing cached between groups (each group locks and reads what it touches) and keeps no
     * delta log (a post is acknowledged after its group's commit). */
    bool shared;

    /* ---- the writer's connection: one group at a time, in its thread ---- */
    /* target: the database file, or a libpq connection string; tuning is SQLite's (NULL: the
     * defaults). The schema was migrated by the job store's open. */
    qd_status (*writer_open)(const char *target, const qd_db_tuning *tuning, void **cls,
                             qd_err *err);
    void (*writer_close)(void *cls);
    /* Starts a group's write transaction. */
    qd_status (*group_begin)(void *cls, qd_err *err);
    /* Ends it: commits when commit (a failed commit rolls back), else rolls back (never fails).
     * The transaction is over either way. */
    qd_status (*group_end)(void *cls, bool commit, qd_err *err);
    /* The model named m->name, locked until the group ends: *found, and its row into *m. */
    qd_status (*model_lock)(void *cls, qd_stat_model_rec *m, bool *found, qd_err *err);
    /* The bytes of sums (sum_a, sum_b, sum_sq) the model's rows hold: what the quota counts. */
    qd_status (*model_bytes)(void *cls, int64_t model_id, int64_t *bytes, qd_err *err);
    /* Inserts m (every field but id) and sets m->id. */
    qd_status (*model_insert)(void *cls, qd_stat_model_rec *m, qd_err *err);
    /* Writes m's settings, posts, last_ms and updated_ms (by m->id). */
    qd_status (*model_update)(void *cls, const qd_stat_model_rec *m, qd_err *err);
    /* The model's activation name, locked until the group ends: fn is called with its row when
     * it is stored, *found tells. */
    qd_status (*row_lock)(void *cls, int64_t model_id, const char *name, qd_stat_row_fn fn,
                          void *ctx, bool *found, qd_err *err);
    /* Inserts r (every field but id) and sets *id. */
    qd_status (*row_insert)(void *cls, const qd_stat_row_rec *r, int64_t *id, qd_err *err);
    /* Writes r's count, updated_ms and arrays (by r->id). */
    qd_status (*row_update)(void *cls, const qd_stat_row_rec *r, qd_err *err);
    /* Deletes every activation of the model (a reset; its keys stay). */
    qd_status (*rows_delete)(void *cls, int64_t model_id, qd_err *err);
    /* The model's key recorded at or after since_ms: *found and its row into *k. */
    qd_status (*key_get)(void *cls, int64_t model_id, const char *key, int64_t since_ms,
                         qd_stat_key_rec *k, bool *found, qd_err *err);
    /* Records the model's key, replacing a row of the same key (an expired one). */
    qd_status (*key_put)(void *cls, int64_t model_id, const char *key, const qd_stat_key_rec *k,
                         qd_err *err);
    /* Deletes the keys recorded before before_ms. */
    qd_status (*keys_purge)(void *cls, int64_t before_ms, qd_err *err);
    /* After a failed group: was the failure the database giving way to another writer (a
     * deadlock, a serialization failure, a unique key another writer took first), so that the
     * group may run again? NULL: never (one writer holds the database). */
    bool (*retryable)(void *cls);

    /* ---- the reads' connection: the caller serializes its use ---- */
    /* tuning: as writer_open's (only the busy timeout applies to SQLite's reader). */
    qd_status (*reader_open)(const char *target, const qd_db_tuning *tuning, void **cls,
                             qd_err *err);
    void (*reader_close)(void *cls);
    /* One snapshot for the reads between them; read_end after a failed read only ends it. */
    qd_status (*read_begin)(void *cls, qd_err *err);
    qd_status (*read_end)(void *cls, bool ok, qd_err *err);
    /* Every model by name, with its activations and the bytes of its sums. */
    qd_status (*read_models)(void *cls, qd_stat_model_fn fn, void *ctx, qd_err *err);
    /* The model named m->name: *found, its id and settings into *m. */
    qd_status (*read_conf)(void *cls, qd_stat_model_rec *m, bool *found, qd_err *err);
    /* The model's activations by name. */
    qd_status (*read_rows)(void *cls, int64_t model_id, qd_stat_row_fn fn, void *ctx, qd_err *err);
    /* The key of the model named model recorded at or after since_ms, in a statement of its own
     * (no read_begin): *found and its row into *k. */
    qd_status (*read_key)(void *cls, const char *model, const char *key, int64_t since_ms,
                          qd_stat_key_rec *k, bool *found, qd_err *err);
} qd_stats_ops;

extern const qd_stats_ops qd_stats_sqlite_ops;
extern const qd_stats_ops qd_stats_pg_ops;

#endif /* QD_STATS_ENGINE_H */
