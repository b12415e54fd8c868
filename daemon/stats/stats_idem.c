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

#include "stats_engine.h"
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

/* A stored key's row into ans: a replay when its fingerprint is fp, else a conflict. */
static void key_row(const qd_stat_key_rec *k, const uint8_t *fp, qd_stat_answer *ans)
{
    bool same = k->fingerprint_len == QD_FINGERPRINT_LEN &&
                memcmp(k->fingerprint, fp, QD_FINGERPRINT_LEN) == 0;
    *ans = (qd_stat_answer){
        .outcome = same ? QD_POST_REPLAYED : QD_POST_KEY_CONFLICT,
        .activations = k->activations,
        .step = k->step,
        .first_ms = k->created_ms,
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
        qd_stat_key_rec rec;
        bool found = false;
        qd_err e;
        qd_status st =
            g->ops->key_get(g->w, m->id, p->key, g->now_ms - g->set.window_ms, &rec, &found, &e);
        if (st != QD_OK) return qd_group_fail(g, st, &e);
        if (found) key_row(&rec, p->fingerprint, ans);
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
    qd_stat_key_rec rec = {.fingerprint_len = QD_FINGERPRINT_LEN,
                           .activations = activations,
                           .step = step,
                           .created_ms = created_ms};
    memcpy(rec.fingerprint, fp, QD_FINGERPRINT_LEN);
    qd_err e;
    qd_status st = g->ops->key_put(g->w, model_id, key, &rec, &e);
    return st == QD_OK || (qd_group_fail(g, st, &e), false);
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
    qd_err e;
    qd_status st = g->ops->keys_purge(g->w, g->now_ms - g->set.window_ms, &e);
    return st == QD_OK || (qd_group_fail(g, st, &e), false);
}

/* ---- the reader -------------------------------------------------------------------------------
 */

qd_status qd_stats_key_peek(qd_stats *s, const char *model, const char *key,
                            const uint8_t fingerprint[QD_FINGERPRINT_LEN], qd_stat_answer *ans,
                            qd_err *err)
{
    *ans = (qd_stat_answer){.outcome = QD_POST_NONE};
    int64_t since = now_ms() - qd_stats_settings(s).window_ms;
    qd_stat_key_rec rec;
    bool found = false;
    pthread_mutex_lock(&s->rmu);
    qd_status res = s->ops->read_key(s->rd, model, key, since, &rec, &found, err);
    if (res == QD_OK && found) key_row(&rec, fingerprint, ans);
    if (ans->outcome != QD_POST_REPLAYED) ans->outcome = QD_POST_NONE; /* the writer decides */
    pthread_mutex_unlock(&s->rmu);
    return res;
}
