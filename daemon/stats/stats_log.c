/* stats_log.c -- the statistics' delta log (issue 13): the file beside the database
 * (DB-statslog) where the writer appends the posts of a group that only update activations it
 * already holds, instead of rewriting their float64 sums in SQLite; the group is answered after
 * the append's fdatasync. This file owns the record format, its checksum, the append, the
 * truncation after a fold, and reading the records back at recovery.
 *
 * A record: a 16-byte head (magic "QDSL", payload length, a 64-bit checksum of the payload),
 * then the payload: the group's time (ms), the model's post count before this post, the model
 * name, and each entry (name, kind, rank, shape, n, n_sq, count, then its arrays a, b, sq). An
 * array whose values are all exactly representable as float32 (every value of an F32 post) is
 * stored as float32, else as float64: decoding gives back the same doubles bit for bit.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stats_log.h"

#define LOG_MAGIC 0x4c534451u /* "QDSL" little-endian */
#define HEAD_LEN  16
/* A record's payload is at most this (a post of more is folded, not logged: qd_dlog_encode). */
#define PAYLOAD_MAX ((size_t)INT32_MAX)

enum { F32_A = 1, F32_B = 2, F32_SQ = 4 };

/* ---- checksum: 64-bit words, multiply and rotate (not cryptographic: torn writes, bit rot) ----
 */

static uint64_t mix(uint64_t h, uint64_t w)
{
    h ^= w * 0x9e3779b97f4a7c15ULL;
    h = (h << 31 | h >> 33) * 0xbf58476d1ce4e5b9ULL;
    return h;
}

uint64_t qd_dlog_checksum(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint64_t h = 0x243f6a8885a308d3ULL ^ (uint64_t)len, w;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        memcpy(&w, p + i, 8);
        h = mix(h, w);
    }
    w = 0;
    if (i < len) memcpy(&w, p + i, len - i);
    return mix(h, w) ^ (h >> 29);
}

/* ---- encoding ---------------------------------------------------------------------------------
 */

static bool exact_f32(const double *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if ((double)(float)v[i] != v[i]) return false;
    return true;
}

static size_t array_bytes(int64_t n, bool f32)
{
    return (size_t)n * (f32 ? 4 : 8);
}

/* Fixed part of an entry: name_len u32, kind u8, rank u8, flags u8, pad u8, n, n_sq, count i64,
 * shape i64 x rank. */
static size_t entry_head_len(int rank)
{
    return 8 + 3 * 8 + (size_t)rank * 8;
}

static bool reserve(qd_dlog_buf *b, size_t more)
{
    if (b->len + more <= b->cap) return true;
    size_t c = b->cap ? b->cap : 1 << 16;
    while (c < b->len + more) c *= 2;
    unsigned char *p = realloc(b->data, c);
    if (!p) return false;
    b->data = p;
    b->cap = c;
    return true;
}

static void put(qd_dlog_buf *b, const void *src, size_t n)
{
    memcpy(b->data + b->len, src, n);
    b->len += n;
}

static void put_array(qd_dlog_buf *b, const double *v, int64_t n, bool f32)
{
    if (!f32) {
        put(b, v, (size_t)n * 8);
        return;
    }
    unsigned char *at = b->data + b->len;
    for (int64_t i = 0; i < n; i++) {
        float f = (float)v[i];
        memcpy(at + (size_t)i * 4, &f, 4);
    }
    b->len += (size_t)n * 4;
}

/* False when out of memory or the record would exceed PAYLOAD_MAX (the group then fails: an
 * activation holds at most QD_STATS_MAX_ELEMS values, so only a post of hundreds of large
 * activations comes near). */
bool qd_dlog_encode(qd_dlog_buf *b, const qd_stat_post *p, int64_t now_ms, int64_t posts_before)
{
    size_t model_len = strlen(p->model), payload = 8 + 8 + 4 + 4 + model_len;
    unsigned *flags = calloc(p->n ? p->n : 1, sizeof *flags);
    if (!flags) return false;
    for (size_t i = 0; i < p->n; i++) {
        const qd_stat_entry *e = &p->e[i];
        bool fa = e->a && exact_f32(e->a, e->n), fb = e->b && exact_f32(e->b, e->n);
        bool fs = e->sq && exact_f32(e->sq, e->n_sq);
        flags[i] = (fa ? F32_A : 0) | (fb ? F32_B : 0) | (fs ? F32_SQ : 0);
        payload += entry_head_len(e->rank) + strlen(e->name);
        if (e->a) payload += array_bytes(e->n, fa);
        if (e->b) payload += array_bytes(e->n, fb);
        if (e->sq) payload += array_bytes(e->n_sq, fs);
    }
    if (payload > PAYLOAD_MAX || !reserve(b, HEAD_LEN + payload)) {
        free(flags);
        return false;
    }
    size_t head_at = b->len;
    b->len += HEAD_LEN;
    uint32_t u32 = (uint32_t)model_len, n_e = (uint32_t)p->n;
    put(b, &now_ms, 8);
    put(b, &posts_before, 8);
    put(b, &u32, 4);
    put(b, &n_e, 4);
    put(b, p->model, model_len);
    for (size_t i = 0; i < p->n; i++) {
        const qd_stat_entry *e = &p->e[i];
        uint32_t name_len = (uint32_t)strlen(e->name);
        unsigned char small[4] = {(unsigned char)e->kind, (unsigned char)e->rank,
                                  (unsigned char)flags[i], 0};
        put(b, &name_len, 4);
        put(b, small, 4);
        put(b, &e->n, 8);
        put(b, &e->n_sq, 8);
        put(b, &e->count, 8);
        put(b, e->shape, (size_t)e->rank * 8);
        put(b, e->name, name_len);
        if (e->a) put_array(b, e->a, e->n, flags[i] & F32_A);
        if (e->b) put_array(b, e->b, e->n, flags[i] & F32_B);
        if (e->sq) put_array(b, e->sq, e->n_sq, flags[i] & F32_SQ);
    }
    free(flags);
    uint32_t magic = LOG_MAGIC, len32 = (uint32_t)payload;
    uint64_t sum = qd_dlog_checksum(b->data + head_at + HEAD_LEN, payload);
    memcpy(b->data + head_at, &magic, 4);
    memcpy(b->data + head_at + 4, &len32, 4);
    memcpy(b->data + head_at + 8, &sum, 8);
    return true;
}

/* ---- decoding ---------------------------------------------------------------------------------
 */

typedef struct reader {
    const unsigned char *p;
    size_t left;
} reader;

static bool take(reader *r, void *dst, size_t n)
{
    if (n > r->left) return false;
    memcpy(dst, r->p, n);
    r->p += n;
    r->left -= n;
    return true;
}

static double *take_array(reader *r, int64_t n, bool f32)
{
    size_t bytes = array_bytes(n, f32);
    if (n < 0 || n > QD_STATS_MAX_ELEMS || bytes > r->left) return NULL;
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return NULL;
    for (int64_t i = 0; i < n; i++) {
        if (f32) {
            float f;
            memcpy(&f, r->p + (size_t)i * 4, 4);
            v[i] = (double)f;
        } else {
            memcpy(&v[i], r->p + (size_t)i * 8, 8);
        }
    }
    r->p += bytes;
    r->left -= bytes;
    return v;
}

static char *take_text(reader *r, uint32_t len)
{
    if (len == 0 || len > r->left) return NULL;
    char *s = malloc((size_t)len + 1);
    if (!s) return NULL;
    memcpy(s, r->p, len);
    s[len] = '\0';
    r->p += len;
    r->left -= len;
    return memchr(s, '\0', len) ? (free(s), NULL) : s;
}

static bool take_entry(reader *r, qd_stat_entry *e)
{
    uint32_t name_len;
    unsigned char small[4];
    if (!take(r, &name_len, 4) || !take(r, small, 4) || !take(r, &e->n, 8) ||
        !take(r, &e->n_sq, 8) || !take(r, &e->count, 8))
        return false;
    e->kind = (qd_stat_kind)small[0];
    e->rank = small[1];
    if (e->rank > QUANT_MAX_RANK || !take(r, e->shape, (size_t)e->rank * 8)) return false;
    if (!(e->name = take_text(r, name_len))) return false;
    if (e->kind != QD_STAT_NONE && !(e->a = take_array(r, e->n, small[2] & F32_A))) return false;
    if (e->kind == QD_STAT_MINMAX && !(e->b = take_array(r, e->n, small[2] & F32_B))) return false;
    if (e->n_sq > 0 && !(e->sq = take_array(r, e->n_sq, small[2] & F32_SQ))) return false;
    return true;
}

static bool decode(const unsigned char *payload, size_t len, qd_dlog_record *out)
{
    reader r = {payload, len};
    uint32_t model_len, n;
    if (!take(&r, &out->now_ms, 8) || !take(&r, &out->posts_before, 8) ||
        !take(&r, &model_len, 4) || !take(&r, &n, 4))
        return false;
    if (!(out->post.model = take_text(&r, model_len))) return false;
    if (n > r.left / 32 + 1) return false; /* each entry takes at least 32 bytes */
    out->post.e = calloc(n ? n : 1, sizeof *out->post.e);
    if (!out->post.e) return false;
    for (uint32_t i = 0; i < n; i++) {
        out->post.n = i + 1;
        if (!take_entry(&r, &out->post.e[i])) return false;
    }
    out->post.n = n;
    return r.left == 0 && qd_stat_post_check(&out->post, &(qd_err){0}) == QD_OK;
}

/* ---- the file ---------------------------------------------------------------------------------
 */

qd_status qd_dlog_open(qd_dlog *l, const char *db_path, qd_err *err)
{
    memset(l, 0, sizeof *l);
    l->fd = -1;
    size_t n = strlen(db_path) + sizeof QD_LOG_SUFFIX;
    l->path = malloc(n);
    if (!l->path) return qd_fail(err, QD_NOMEM, "out of memory");
    snprintf(l->path, n, "%s%s", db_path, QD_LOG_SUFFIX);
    l->fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (l->fd < 0) {
        qd_status st =
            qd_fail(err, QD_DB, "opening the statistics log %s: %s", l->path, strerror(errno));
        qd_dlog_close(l);
        return st;
    }
    return QD_OK;
}

void qd_dlog_close(qd_dlog *l)
{
    if (l->fd >= 0) close(l->fd);
    free(l->path);
    free(l->buf.data);
    memset(l, 0, sizeof *l);
    l->fd = -1;
}

qd_status qd_dlog_append(qd_dlog *l, qd_err *err)
{
    size_t done = 0;
    while (done < l->buf.len) {
        ssize_t w = pwrite(l->fd, l->buf.data + done, l->buf.len - done, (off_t)(l->end + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) goto fail;
        done += (size_t)w;
    }
    if (fdatasync(l->fd) != 0) goto fail;
    l->end += (int64_t)l->buf.len;
    return QD_OK;
fail:;
    qd_status st = qd_fail(err, QD_DB, "writing the statistics log: %s", strerror(errno));
    /* what was written past the committed end is cut (or overwritten by the next append) */
    if (ftruncate(l->fd, (off_t)l->end) != 0) l->stale = true;
    return st;
}

bool qd_dlog_truncate(qd_dlog *l)
{
    bool ok = ftruncate(l->fd, 0) == 0 && fdatasync(l->fd) == 0;
    l->end = 0;
    l->stale = !ok;
    return ok;
}

void qd_dlog_record_clear(qd_dlog_record *rec)
{
    qd_stat_post_clear(&rec->post);
    rec->now_ms = rec->posts_before = 0;
}

qd_status qd_dlog_read(qd_dlog *l, qd_dlog_visit visit, void *ctx, qd_err *err)
{
    l->end = 0;
    l->dropped = 0;
    struct stat sb;
    if (fstat(l->fd, &sb) != 0)
        return qd_fail(err, QD_DB, "reading the statistics log: %s", strerror(errno));
    int64_t size = sb.st_size, at = 0;
    qd_status st = QD_OK;
    while (st == QD_OK && size - at >= HEAD_LEN) {
        unsigned char head[HEAD_LEN];
        if (pread(l->fd, head, HEAD_LEN, (off_t)at) != HEAD_LEN) break;
        uint32_t magic, len;
        uint64_t sum;
        memcpy(&magic, head, 4);
        memcpy(&len, head + 4, 4);
        memcpy(&sum, head + 8, 8);
        if (magic != LOG_MAGIC || (size_t)len > PAYLOAD_MAX || size - at - HEAD_LEN < len) break;
        unsigned char *payload = malloc(len ? len : 1);
        if (!payload) return qd_fail(err, QD_NOMEM, "out of memory reading the statistics log");
        bool ok = pread(l->fd, payload, len, (off_t)(at + HEAD_LEN)) == (ssize_t)len &&
                  qd_dlog_checksum(payload, len) == sum;
        qd_dlog_record rec = {.post = {.step = -1}};
        ok = ok && decode(payload, len, &rec);
        free(payload);
        if (!ok) {
            qd_dlog_record_clear(&rec);
            break;
        }
        st = visit(ctx, &rec, err);
        qd_dlog_record_clear(&rec);
        at += HEAD_LEN + (int64_t)len;
    }
    /* a torn or unreadable tail: never acknowledged (a group is answered after its fdatasync) */
    l->dropped = size - at;
    l->end = at;
    return st;
}
