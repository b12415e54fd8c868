/* stats_group.h -- what the writer's group files share and nobody else sees: the group
 * (stats_group.c: its engine's connection and transaction, the quota), its cache of models
 * and activations (stats_cache.c), the checks and arithmetic of one update (stats_apply.c), and
 * the posts' Idempotency-Keys (stats_idem.c).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STATS_GROUP_H
#define QD_STATS_GROUP_H

#include "stats_engine.h"
#include "stats_internal.h"

/* A model as the group sees it. */
typedef struct model_row {
    char *name;
    int64_t id; /* 0 while it is not in the database */
    bool live;  /* it exists: in the database, or created by this group */
    bool dirty; /* its row is to be written */
    bool kept;  /* some cached activation of it survives the trim */
    qd_model_conf conf;
    int64_t posts;       /* posts stored since created or reset */
    int64_t last_ms;     /* stats_updated_ms, 0 for NULL */
    int64_t stats_bytes; /* what the quota counts: 8 bytes per value of its sum_a and sum_b */
    int64_t created_ms, updated_ms;
} model_row;

/* The arrays of a part, and the parts: a (absmax or min), b (max), sq (mean_sq); the engine's
 * records order them alike (part * A_PER_PART + array). */
enum { A_SUM, A_LAST, A_EMA, A_PER_PART };
enum { P_A, P_B, P_SQ, N_PARTS };
_Static_assert((int)A_PER_PART == (int)QD_ARR_PER_PART && (int)A_EMA == (int)QD_ARR_EMA &&
                   (int)P_SQ == (int)QD_PART_SQ && N_PARTS * A_PER_PART == QD_STAT_ARRAYS,
               "a row's arrays as stats_engine.h has them");

/* One activation of one model as the group sees it. count == 0: no statistics (not stored yet,
 * or reset in this group); kind and shape are then taken from the first post that updates it.
 * The last value and the EMA are stored only while they serve (stored as NULL otherwise): the
 * default model (simple averaging, no bootstrap steps) writes only its sums. */
typedef struct stat_row {
    model_row *model;
    char *name;
    uint64_t hash;
    int64_t rowid; /* 0: not in the database */
    qd_stat_kind kind;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    int64_t n;    /* the range statistic's elements (0 for NONE) */
    int64_t n_sq; /* mean_sq's length, 0 when the activation has none */
    int64_t count;
    double *v;    /* the arrays of each part (a; b when MINMAX; sq when n_sq > 0): its sum, last
                   * value and EMA, n (n_sq for sq) each: qd_stat_array */
    size_t v_cap; /* doubles allocated in v */
    int64_t created_ms, updated_ms;
    bool has_last; /* the last arrays hold the last post (kept while bootstrapping) */
    bool has_ema;  /* the EMA arrays are kept (the model's averaging is ema) */
    bool dirty;
    bool broken;   /* its stored row could not be read: every post to it fails (QD_DB) */
    uint64_t seen; /* the post that last checked it: a name twice in one post */
    uint64_t used; /* the group that last used it */
    size_t pend;   /* 1 + its index in the readers' overlay (stats_pending.c), 0: not there */
} stat_row;

/* An Idempotency-Key of a logged post, not yet in stat_post_keys (the fold writes it). */
typedef struct pend_key {
    const model_row *m;
    char key[QD_KEY_MAX + 1];
    uint8_t fingerprint[QD_FINGERPRINT_LEN];
    int64_t activations, step, created_ms;
} pend_key;

struct stats_group {
    const qd_stats_ops *ops; /* the engine (stats_engine.h) */
    void *w;                 /* its writer's connection */
    model_row **models;      /* the models touched, in order */
    size_t n_models, cap_models;
    stat_row **rows; /* the activations touched, in order */
    size_t n_rows, cap_rows;
    stat_row **slots; /* open addressing over rows, n_slots a power of two (or 0) */
    size_t n_slots;
    stat_row **post_rows; /* the rows of the post being run, by entry */
    size_t cap_post_rows;
    uint64_t seq;          /* posts run so far: stat_row.seen */
    uint64_t groups;       /* groups run so far: stat_row.used */
    int64_t now_ms;        /* the group's time */
    stats_settings set;    /* the limits it runs with */
    int64_t last_purge_ms; /* when expired keys were last deleted (0: never) */
    /* the delta log (stats_log.h) and the readers' overlay of what it holds */
    struct qd_dlog *log;
    qd_pending *pend;
    int64_t first_logged_ms; /* when the log's first record since the last fold was written */
    bool need_replay;        /* the cache lost the log's posts: the next SQL group replays it */
    bool logging;            /* running a log group: keys go to keys[], not to SQL */
    bool replaying;          /* replaying the log: a record's key is not checked again */
    pend_key *keys;          /* the keys of the logged posts, until the fold writes them */
    size_t n_keys, cap_keys;
    /* the group's SQL failure: every request gets it */
    bool failed;
    qd_status fail_st;
    qd_err fail_err;
};

/* ---- stats_group.c: failures, arrays ------------------------------------------------------------
 */

/* Records st (an engine operation's failure, its message in e) as the group's failure (the first
 * one wins; every request gets it) and returns the group's failure. */
qd_status qd_group_fail(stats_group *g, qd_status st, const qd_err *e);
/* arr (of *cap elements of elem bytes) with room for want: arr itself or a larger copy; NULL
 * when out of memory (arr untouched). */
void *qd_group_reserve(void *arr, size_t *cap, size_t want, size_t elem);

/* ---- stats_pending.c: the writer's side of the overlay (under its mutex) ------------------------
 */

bool qd_pending_put_model(qd_pending *p, const model_row *m);
bool qd_pending_put_row(qd_pending *p, stat_row *r);

/* ---- stats_cache.c: models and activations, loaded once, kept within a budget -----------------
 */

/* The entry for model name, loaded on first use; not live when there is no such model. */
qd_status qd_cache_model(stats_group *g, const char *name, model_row **out, qd_err *err);
/* A model a post or a PUT brings into being. */
void qd_cache_model_create(stats_group *g, model_row *m);
/* The entry for (m, name), loaded on first use (count 0 when not stored). QD_DB for a stored
 * row that cannot be read. */
qd_status qd_cache_row(stats_group *g, model_row *m, const char *name, stat_row **out, qd_err *err);
/* The cached entry for model name / for (m, name), or NULL: never loads. */
model_row *qd_cache_find_model(stats_group *g, const char *name);
stat_row *qd_cache_find_row(stats_group *g, const model_row *m, const char *name);
/* Room for doubles values in r->v. */
bool qd_cache_row_alloc(stat_row *r, size_t doubles);
/* Keeps the most recently used rows that fit budget bytes (after a committed group). */
void qd_cache_trim(stats_group *g, size_t budget);
/* Empties the cache (after a failed group, and at the end). */
void qd_cache_forget(stats_group *g);

/* ---- stats_idem.c: the posts' Idempotency-Keys, inside the group transaction -----------------
 */

/* Looks up p's key for m in SQL (which sees the keys recorded earlier in the group): QD_OK with
 * ans->outcome QD_POST_REPLAYED and the first answer (same fingerprint), or QD_POST_NONE (not
 * known, or older than the window: the post is to be applied); QD_CONFLICT with outcome
 * QD_POST_KEY_CONFLICT and a message naming the key and when it was used (another fingerprint);
 * QD_DB after a group failure. */
qd_status qd_idem_check(stats_group *g, const model_row *m, const qd_stat_post *p,
                        qd_stat_answer *ans, qd_err *err);
/* Records p's key for m (stored: m->id known) with its answer, replacing an expired row; in a
 * log group into g->keys (room reserved by the group), written by the fold. False after
 * recording a group failure. */
bool qd_idem_record(stats_group *g, const model_row *m, const qd_stat_post *p);
/* Writes the logged posts' keys (g->keys) into SQL (in the fold's transaction). */
bool qd_idem_flush(stats_group *g);
/* Deletes the keys older than the window, at most once a minute (or when the settings say
 * purge_now). False after recording a group failure. */
bool qd_idem_purge(stats_group *g);

/* ---- stats_apply.c: one entry of a post against one activation --------------------------------
 */

/* Can e update r? (marks r as taken by the post being run: a name twice is refused) Makes room
 * for a new activation's arrays, so that applying cannot fail. */
qd_status qd_stat_check(stats_group *g, stat_row *r, const qd_stat_entry *e, qd_err *err);
/* Adds e to r: sums and count, and the EMA and last value when the model's settings keep them. */
void qd_stat_apply(stats_group *g, stat_row *r, const qd_stat_entry *e, const qd_model_conf *c);

/* ---- the arrays of a row ------------------------------------------------------------------------
 */

/* Does an activation of kind k with n_sq mean_sq values have part p? */
static inline bool qd_stat_has_part(qd_stat_kind k, int64_t n_sq, int p)
{
    return p == P_A ? k != QD_STAT_NONE : p == P_B ? k == QD_STAT_MINMAX : n_sq > 0;
}

/* Its values per array of part p (n, or n_sq for sq; 0 for a part it has not). */
static inline int64_t qd_stat_part_len(qd_stat_kind k, int64_t n, int64_t n_sq, int p)
{
    return !qd_stat_has_part(k, n_sq, p) ? 0 : p == P_SQ ? n_sq : n;
}

/* What an activation adds to its model's quota: its sums, 8 bytes a value (sum_a, sum_b for
 * MINMAX, and sum_sq). */
static inline int64_t qd_stat_sum_bytes(qd_stat_kind k, int64_t n, int64_t n_sq)
{
    int64_t values = 0;
    for (int p = 0; p < N_PARTS; p++) values += qd_stat_part_len(k, n, n_sq, p);
    return 8 * values;
}

/* The doubles its row keeps (at least 1). */
static inline size_t qd_stat_doubles(qd_stat_kind k, int64_t n, int64_t n_sq)
{
    size_t d = (size_t)qd_stat_sum_bytes(k, n, n_sq) / 8 * A_PER_PART;
    return d ? d : 1;
}

/* Array which (A_SUM, A_LAST, A_EMA) of part p (P_A, P_B, P_SQ) of r. */
static inline double *qd_stat_array(const stat_row *r, int which, int p)
{
    size_t at = 0;
    for (int q = 0; q < p; q++) at += (size_t)qd_stat_part_len(r->kind, r->n, r->n_sq, q);
    at *= A_PER_PART;
    return r->v + at + (size_t)qd_stat_part_len(r->kind, r->n, r->n_sq, p) * (size_t)which;
}

#endif /* QD_STATS_GROUP_H */
