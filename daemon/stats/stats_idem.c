/* stats_idem.c -- the Idempotency-Keys of statistics posts (table stat_post_keys): what a key
 * may be, the fingerprint that tells two posts apart (SHA-256, nettle), the writer's look-up and
 * record of a key inside the post's own group transaction (so a key is remembered exactly when
 * its post is stored), the purge of keys older than the window, and the reader's look-up that
 * lets the HTTP handler answer a replay before parsing the body.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "stats_group.h"
#include "timefmt.h"

/* The writer deletes expired keys at most this often. */
#define PURGE_EVERY_MS 60000

_Static_assert(SHA256_DIGEST_SIZE == QD_FINGERPRINT_LEN, "a fingerprint is a SHA-256");

bool qd_stat_key_valid(const char *key)
{
    const unsigned char *k = (const unsigned char *)key;
    size_t n = 0;
    for (; k[n]; n++)
        if (k[n] < 0x21 || k[n] > 0x7e || n == QD_KEY_MAX) return false;
    return n > 0;
}

void qd_stats_fingerprint(bool merge, int64_t step, bool binary, const void *body, size_t len,
                          uint8_t out[QD_FINGERPRINT_LEN])
{
    /* one line per field, the body's length last: no two requests give the same input */
    char head[128];
    char step_text[24] = "-";
    if (step >= 0) snprintf(step_text, sizeof step_text, "%" PRId64, step);
    int n =
        snprintf(head, sizeof head, "quantd stats post 1\nmode %s\nstep %s\ntype %s\nbody %zu\n",
                 merge ? "merge" : "update", step_text, binary ? "octet-stream" : "json", len);
    struct sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, (size_t)n, (const uint8_t *)head);
    if (len) sha256_update(&c, len, body);
    sha256_digest(&c, QD_FINGERPRINT_LEN, out);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- a stored key ------------------------------------------------------------------------------
 */

/* The current row of a key look-up (fingerprint, activations, step, created_ms) into ans: a
 * replay when its fingerprint is fp, else a conflict. */
static void key_row(sqlite3_stmt *st, const uint8_t *fp, qd_stat_answer *ans)
{
    const void *stored = sqlite3_column_blob(st, 0);
    bool same = sqlite3_column_bytes(st, 0) == QD_FINGERPRINT_LEN && stored &&
                memcmp(stored, fp, QD_FINGERPRINT_LEN) == 0;
    *ans = (qd_stat_answer){
        .outcome = same ? QD_POST_REPLAYED : QD_POST_KEY_CONFLICT,
        .activations = sqlite3_column_int64(st, 1),
        .step = sqlite3_column_type(st, 2) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 2),
        .first_ms = sqlite3_column_int64(st, 3),
    };
}

/* ---- the writer -------------------------------------------------------------------------------
 */

/* A logged post's key for (m, key) within the window, or NULL. */
static const pend_key *pending_key(const stats_group *g, const model_row *m, const char *key)
{
    for (size_t i = 0; i < g->n_keys; i++) {
        const pend_key *k = &g->keys[i];
        if (k->m == m && k->created_ms >= g->now_ms - g->set.window_ms && strcmp(k->key, key) == 0)
            return k;
    }
    return NULL;
}

qd_status qd_idem_check(stats_group *g, const model_row *m, const qd_stat_post *p,
                        qd_stat_answer *ans, qd_err *err)
{
    *ans = (qd_stat_answer){.outcome = QD_POST_NONE};
    if (!m->id) return QD_OK; /* a model not stored yet has no keys */
    const pend_key *k = pending_key(g, m, p->key);
    if (k) {
        bool same = memcmp(k->fingerprint, p->fingerprint, QD_FINGERPRINT_LEN) == 0;
        *ans = (qd_stat_answer){.outcome = same ? QD_POST_REPLAYED : QD_POST_KEY_CONFLICT,
                                .activations = k->activations,
                                .step = k->step,
                                .first_ms = k->created_ms};
    } else {
        sqlite3_stmt *st = qd_group_stmt(g, G_KEY_GET);
        if (sqlite3_bind_int64(st, 1, m->id) != SQLITE_OK ||
            sqlite3_bind_text(st, 2, p->key, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(st, 3, g->now_ms - g->set.window_ms) != SQLITE_OK)
            return qd_group_fail(g, "read Idempotency-Key");
        int rc = qd_group_step(g, st, "read Idempotency-Key");
        if (rc < 0) return g->fail_st;
        if (rc == SQLITE_ROW) key_row(st, p->fingerprint, ans);
        sqlite3_reset(st);
    }
    if (ans->outcome != QD_POST_KEY_CONFLICT) return QD_OK;
    char when[QD_TIME_LEN];
    return qd_fail(err, QD_CONFLICT,
                   "Idempotency-Key '%s' was used on model '%s' for a different post at %s; a "
                   "retry must repeat the post exactly (mode, step, Content-Type and body), a new "
                   "post needs a new key",
                   p->key, m->name, qd_iso8601(ans->first_ms, when));
}

static bool key_put(stats_group *g, int64_t model_id, const char *key, const uint8_t *fp,
                    int64_t activations, int64_t step, int64_t created_ms)
{
    sqlite3_stmt *st = qd_group_stmt(g, G_KEY_PUT);
    int rc = sqlite3_bind_int64(st, 1, model_id);
    rc |= sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_blob(st, 3, fp, QD_FINGERPRINT_LEN, SQLITE_STATIC);
    rc |= sqlite3_bind_int64(st, 4, activations);
    rc |= step >= 0 ? sqlite3_bind_int64(st, 5, step) : sqlite3_bind_null(st, 5);
    rc |= sqlite3_bind_int64(st, 6, created_ms);
    if (rc != SQLITE_OK) return qd_group_fail(g, "record Idempotency-Key"), false;
    bool ok = qd_group_step(g, st, "record Idempotency-Key") >= 0;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st); /* SQLite lets go of the key and fingerprint */
    return ok;
}

bool qd_idem_record(stats_group *g, const model_row *m, const qd_stat_post *p)
{
    if (!g->logging)
        return key_put(g, m->id, p->key, p->fingerprint, (int64_t)p->n, p->step, g->now_ms);
    pend_key *k = &g->keys[g->n_keys++]; /* room reserved by the log group */
    *k = (pend_key){.m = m, .activations = (int64_t)p->n, .step = p->step, .created_ms = g->now_ms};
    snprintf(k->key, sizeof k->key, "%s", p->key);
    memcpy(k->fingerprint, p->fingerprint, QD_FINGERPRINT_LEN);
    return true;
}

bool qd_idem_flush(stats_group *g)
{
    for (size_t i = 0; i < g->n_keys; i++) {
        const pend_key *k = &g->keys[i];
        if (!key_put(g, k->m->id, k->key, k->fingerprint, k->activations, k->step, k->created_ms))
            return false;
    }
    return true;
}

bool qd_idem_purge(stats_group *g)
{
    if (!g->set.purge_now && g->last_purge_ms && g->now_ms - g->last_purge_ms < PURGE_EVERY_MS)
        return true;
    g->last_purge_ms = g->now_ms;
    sqlite3_stmt *st = qd_group_stmt(g, G_KEY_PURGE);
    if (sqlite3_bind_int64(st, 1, g->now_ms - g->set.window_ms) != SQLITE_OK)
        return qd_group_fail(g, "purge Idempotency-Keys"), false;
    return qd_group_step(g, st, "purge Idempotency-Keys") >= 0;
}

/* ---- the reader -------------------------------------------------------------------------------
 */

qd_status qd_stats_key_peek(qd_stats *s, const char *model, const char *key,
                            const uint8_t fingerprint[QD_FINGERPRINT_LEN], qd_stat_answer *ans,
                            qd_err *err)
{
    *ans = (qd_stat_answer){.outcome = QD_POST_NONE};
    int64_t since = now_ms() - qd_stats_settings(s).window_ms;
    pthread_mutex_lock(&s->rmu);
    sqlite3_stmt *st = s->r[QD_R_KEY];
    sqlite3_reset(st);
    qd_status res = QD_OK;
    int rc = SQLITE_ERROR;
    if (sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_int64(st, 3, since) == SQLITE_OK)
        rc = sqlite3_step(st); /* one statement: its own read transaction */
    if (rc == SQLITE_ROW)
        key_row(st, fingerprint, ans);
    else if (rc != SQLITE_DONE)
        res = qd_db_fail(s->rdb, err, "read Idempotency-Key");
    if (ans->outcome != QD_POST_REPLAYED) ans->outcome = QD_POST_NONE; /* the writer decides */
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    pthread_mutex_unlock(&s->rmu);
    return res;
}
