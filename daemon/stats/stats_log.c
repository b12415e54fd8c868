/* stats_log.c -- the statistics' delta log: the file beside the database
 * (DB-statslog) where the writer appends the posts of a group that only update activations it
 * already holds, instead of rewriting their float64 sums in SQLite; the group is answered after
 * the append's fdatasync. This file owns the record format, its checksum, the append, the
 * truncation after a fold, and reading the records back at recovery.
 *
 * A record: a 24-byte head (magic "QDSL", payload length, the log's epoch, a 64-bit checksum of
 * the payload and the epoch; the length's top bit marks the last record of an append, one write
 * and one fdatasync of a group's records), then the payload: the group's time (ms), the model's
 * post count before this post, its step, its Idempotency-Key and fingerprint (when it has one: the
 * fold, or the replay, records the key), the model name, and each entry (name, kind, rank, shape,
 * n, n_sq, count, then its arrays a, b, sq). An array whose values are all exactly representable as
 * float32 (every value of an F32 post) is stored as float32, else as float64: decoding gives back
 * the same doubles bit for bit.
 *
 * The file is not shortened after a fold: the next records overwrite the old ones in place, since
 * an fdatasync of blocks already written needs no journal commit (ext4: several times faster than
 * one that extends the file). A fold zeroes the first record's head and starts a new epoch, so
 * records of an older epoch that remain past the new ones end the log when read back.
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
#include <time.h>
#include <unistd.h>

#include "stats_log.h"

#define LOG_MAGIC 0x4c534451u /* "QDSL" little-endian */
#define HEAD_LEN  24
#define LEN_LAST  0x80000000u /* in a head's length: the last record of its append */
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

/* v as float32 when every value is exactly one (one pass: converted while checked), else as
 * float64; true for float32. Room for float64 is reserved. */
static bool put_array(qd_dlog_buf *b, const double *v, int64_t n)
{
    unsigned char *at = b->data + b->len;
    int64_t i = 0;
    for (; i < n; i++) {
        float f = (float)v[i];
        if ((double)f != v[i]) break;
        memcpy(at + (size_t)i * 4, &f, 4);
    }
    if (i == n) {
        b->len += (size_t)n * 4;
        return true;
    }
    put(b, v, (size_t)n * 8);
    return false;
}

static uint64_t record_sum(const unsigned char *payload, size_t len, uint64_t epoch)
{
    return qd_dlog_checksum(payload, len) ^ mix(epoch, 0x5851f42d4c957f2dULL);
}

bool qd_dlog_encode(qd_dlog_buf *b, const qd_stat_post *p, int64_t now_ms, int64_t posts_before,
                    uint64_t epoch)
{
    /* room for the record with every array as float64; the length is what it took */
    size_t model_len = strlen(p->model), key_len = p->key ? strlen(p->key) : 0;
    size_t most = 8 + 8 + 8 + 4 + (key_len ? key_len + QD_FINGERPRINT_LEN : 0) + 4 + 4 + model_len;
    for (size_t i = 0; i < p->n; i++) {
        const qd_stat_entry *e = &p->e[i];
        most += entry_head_len(e->rank) + strlen(e->name);
        most += array_bytes(e->a ? e->n : 0, false) + array_bytes(e->b ? e->n : 0, false) +
                array_bytes(e->sq ? e->n_sq : 0, false);
    }
    if (most > PAYLOAD_MAX || !reserve(b, HEAD_LEN + most)) return false;
    size_t head_at = b->len;
    b->last_head = head_at;
    b->len += HEAD_LEN;
    uint32_t u32 = (uint32_t)model_len, n_e = (uint32_t)p->n;
    uint32_t k32 = (uint32_t)key_len;
    put(b, &now_ms, 8);
    put(b, &posts_before, 8);
    put(b, &p->step, 8);
    put(b, &k32, 4);
    if (key_len) {
        put(b, p->key, key_len);
        put(b, p->fingerprint, QD_FINGERPRINT_LEN);
    }
    put(b, &u32, 4);
    put(b, &n_e, 4);
    put(b, p->model, model_len);
    for (size_t i = 0; i < p->n; i++) {
        const qd_stat_entry *e = &p->e[i];
        uint32_t name_len = (uint32_t)strlen(e->name);
        unsigned char small[4] = {(unsigned char)e->kind, (unsigned char)e->rank, 0, 0};
        put(b, &name_len, 4);
        size_t flags_at = b->len + 2;
        put(b, small, 4);
        put(b, &e->n, 8);
        put(b, &e->n_sq, 8);
        put(b, &e->count, 8);
        put(b, e->shape, (size_t)e->rank * 8);
        put(b, e->name, name_len);
        unsigned flags = 0;
        if (e->a && put_array(b, e->a, e->n)) flags |= F32_A;
        if (e->b && put_array(b, e->b, e->n)) flags |= F32_B;
        if (e->sq && put_array(b, e->sq, e->n_sq)) flags |= F32_SQ;
        b->data[flags_at] = (unsigned char)flags;
    }
    uint32_t magic = LOG_MAGIC, len32 = (uint32_t)(b->len - head_at - HEAD_LEN);
    uint64_t sum = record_sum(b->data + head_at + HEAD_LEN, len32, epoch);
    memcpy(b->data + head_at, &magic, 4);
    memcpy(b->data + head_at + 4, &len32, 4);
    memcpy(b->data + head_at + 8, &epoch, 8);
    memcpy(b->data + head_at + 16, &sum, 8);
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
    if (n < 0 || n > QD_STATS_MAX_ELEMS || array_bytes(n, f32) > r->left) return NULL;
    size_t bytes = array_bytes(n, f32);
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
    uint32_t model_len, n, key_len;
    if (!take(&r, &out->now_ms, 8) || !take(&r, &out->posts_before, 8) ||
        !take(&r, &out->post.step, 8) || !take(&r, &key_len, 4))
        return false;
    if (key_len > QD_KEY_MAX) return false;
    if (key_len && (!(out->post.key = take_text(&r, key_len)) ||
                    !take(&r, out->post.fingerprint, QD_FINGERPRINT_LEN)))
        return false;
    if (!take(&r, &model_len, 4) || !take(&r, &n, 4)) return false;
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
    if (l->buf.len >= l->buf.last_head + HEAD_LEN) { /* the append's last record says so */
        uint32_t len32;
        memcpy(&len32, l->buf.data + l->buf.last_head + 4, 4);
        len32 |= LEN_LAST;
        memcpy(l->buf.data + l->buf.last_head + 4, &len32, 4);
    }
    size_t done = 0;
    while (done < l->buf.len) {
        ssize_t w = pwrite(l->fd, l->buf.data + done, l->buf.len - done, (off_t)(l->end + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) goto fail;
        done += (size_t)w;
    }
    if (fdatasync(l->fd) != 0) goto fail;
    l->end += (int64_t)l->buf.len;
    l->unsynced = false;
    return QD_OK;
fail:;
    qd_status st = qd_fail(err, QD_DB, "writing the statistics log: %s", strerror(errno));
    /* what was written past the committed end is cut (or overwritten by the next append) */
    if (ftruncate(l->fd, (off_t)l->end) != 0) l->stale = true;
    return st;
}

/* A new epoch: the time in ns, above the last one. */
static uint64_t next_epoch(uint64_t last)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t e = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    return e > last ? e : last + 1;
}

bool qd_dlog_truncate(qd_dlog *l, int64_t keep_bytes)
{
    struct stat sb;
    bool ok = fstat(l->fd, &sb) == 0;
    if (ok && sb.st_size > keep_bytes) {
        ok = ftruncate(l->fd, 0) == 0; /* larger than the log needs: give the space back */
    } else if (ok && sb.st_size > 0) {
        static const unsigned char zero[HEAD_LEN];
        ok = pwrite(l->fd, zero, HEAD_LEN, 0) == HEAD_LEN;
    }
    l->end = 0;
    l->epoch = next_epoch(l->epoch);
    l->stale = !ok;
    l->unsynced = ok;
    return ok;
}

bool qd_dlog_sync(qd_dlog *l)
{
    if (!l->unsynced) return true;
    if (fdatasync(l->fd) != 0) return false;
    l->unsynced = false;
    return true;
}

void qd_dlog_record_clear(qd_dlog_record *rec)
{
    qd_stat_post_clear(&rec->post);
    rec->now_ms = rec->posts_before = 0;
}

/* What read_record() found at an offset. */
typedef enum { REC_WHOLE, REC_BAD, REC_OTHER_EPOCH, REC_NOMEM } rec_found;

/* The record at `at` of a file of `size` bytes: whole (decoded into *rec, its length in *len),
 * of another epoch than `epoch` (any epoch goes when any_epoch), or not a whole record. */
static rec_found read_record(const qd_dlog *l, int64_t at, int64_t size, uint64_t epoch,
                             bool any_epoch, qd_dlog_record *rec, int64_t *len_out, bool *last)
{
    unsigned char head[HEAD_LEN];
    if (size - at < HEAD_LEN || pread(l->fd, head, HEAD_LEN, (off_t)at) != HEAD_LEN) return REC_BAD;
    uint32_t magic, len;
    uint64_t rec_epoch, sum;
    memcpy(&magic, head, 4);
    memcpy(&len, head + 4, 4);
    memcpy(&rec_epoch, head + 8, 8);
    memcpy(&sum, head + 16, 8);
    *last = (len & LEN_LAST) != 0;
    len &= ~LEN_LAST;
    if (magic != LOG_MAGIC || (size_t)len > PAYLOAD_MAX || size - at - HEAD_LEN < len)
        return REC_BAD;
    if (!any_epoch && rec_epoch != epoch) return REC_OTHER_EPOCH;
    unsigned char *payload = malloc(len ? len : 1);
    if (!payload) return REC_NOMEM;
    bool ok = pread(l->fd, payload, len, (off_t)(at + HEAD_LEN)) == (ssize_t)len &&
              record_sum(payload, len, rec_epoch) == sum;
    *rec = (qd_dlog_record){.post = {.step = -1}, .epoch = rec_epoch};
    ok = ok && decode(payload, len, rec);
    free(payload);
    if (!ok) {
        qd_dlog_record_clear(rec);
        return REC_BAD;
    }
    *len_out = HEAD_LEN + (int64_t)len;
    return REC_WHOLE;
}

/* After a bad record at `from` (from_last: its head, when readable, marks the end of an append):
 * the whole records of `epoch` in a row from the first one found past it (a byte search for a
 * head of that epoch whose record is whole) into *count, and whether one of them belongs to a
 * later append than the bad record. An append is written and fdatasync'd before the next begins,
 * so that is damage to answered posts; whole records of the bad one's own append only are a
 * crash's torn last append, whose pages reach the disk in any order. -1 when out of memory. */
static int records_after(const qd_dlog *l, int64_t from, bool from_last, int64_t size,
                         uint64_t epoch, int64_t *count, bool *later)
{
    enum { WINDOW = 1 << 20 };
    *count = 0;
    *later = false;
    unsigned char *buf = malloc(WINDOW);
    if (!buf) return -1;
    uint32_t magic = LOG_MAGIC;
    int64_t found = -1, len = 0;
    qd_dlog_record rec;
    bool last;
    /* windows overlap by a head, so a head across a window's end is seen whole in the next */
    for (int64_t w = from + 1; found < 0 && size - w >= HEAD_LEN; w += WINDOW - HEAD_LEN) {
        int64_t n = size - w < WINDOW ? size - w : WINDOW;
        if (pread(l->fd, buf, (size_t)n, (off_t)w) != (ssize_t)n) break;
        for (int64_t i = 0; found < 0 && i + HEAD_LEN <= n; i++) {
            if (memcmp(buf + i, &magic, 4) != 0 || memcmp(buf + i + 8, &epoch, 8) != 0) continue;
            rec_found f = read_record(l, w + i, size, epoch, false, &rec, &len, &last);
            if (f == REC_NOMEM) {
                free(buf);
                return -1;
            }
            if (f != REC_WHOLE) continue;
            qd_dlog_record_clear(&rec);
            found = w + i;
        }
    }
    free(buf);
    bool boundary = from_last; /* an append ended at or after the bad record */
    for (int64_t at = found; at >= 0; at += len) {
        rec_found f = read_record(l, at, size, epoch, false, &rec, &len, &last);
        if (f == REC_NOMEM) return -1;
        if (f != REC_WHOLE) break;
        qd_dlog_record_clear(&rec);
        ++*count;
        *later = *later || boundary;
        boundary = boundary || last;
    }
    return 0;
}

/* The last-of-append mark of the head at `at`, when it is a readable head of `epoch`. */
static bool head_says_last(const qd_dlog *l, int64_t at, int64_t size, uint64_t epoch)
{
    unsigned char head[HEAD_LEN];
    if (size - at < HEAD_LEN || pread(l->fd, head, HEAD_LEN, (off_t)at) != HEAD_LEN) return false;
    uint32_t magic, len;
    memcpy(&magic, head, 4);
    memcpy(&len, head + 4, 4);
    return magic == LOG_MAGIC && memcmp(head + 8, &epoch, 8) == 0 && (len & LEN_LAST) != 0;
}

/* The error for answered records after a damaged one: replaying the records before it alone
 * would drop the later ones silently, so the log is refused with what the operator can do. */
static qd_status damaged(const qd_dlog *l, int64_t at, int64_t kept, int64_t lost, qd_err *err)
{
    const char *slash = strrchr(l->path, '/'), *name = slash ? slash + 1 : l->path;
    return qd_fail(err, QD_DB,
                   "the statistics log %s is damaged at byte %lld: %lld answered post(s) after "
                   "the damage cannot be replayed. To keep the %lld post(s) before it and lose "
                   "those, cut the file there (truncate -s %lld %s) and start again; or restore "
                   "the data directory from a backup",
                   name, (long long)at, (long long)lost, (long long)kept, (long long)at, name);
}

qd_status qd_dlog_read(qd_dlog *l, qd_dlog_visit visit, void *ctx, qd_err *err)
{
    l->end = 0;
    l->dropped = 0;
    struct stat sb;
    if (fstat(l->fd, &sb) != 0)
        return qd_fail(err, QD_DB, "reading the statistics log: %s", strerror(errno));
    int64_t size = sb.st_size, at = 0, kept = 0;
    qd_status st = QD_OK;
    while (st == QD_OK && size - at >= HEAD_LEN) {
        qd_dlog_record rec;
        int64_t len = 0;
        bool last;
        rec_found f = read_record(l, at, size, l->epoch, at == 0, &rec, &len, &last);
        if (f == REC_NOMEM)
            return qd_fail(err, QD_NOMEM, "out of memory reading the statistics log");
        if (f != REC_WHOLE) {
            /* a torn last append ends the log, as does an older epoch's record (each epoch is
             * written from the file's start, so none of this one can follow it); but whole
             * records of this epoch from a later append than a bad record are answered posts.
             * The first record's epoch is not known when it is the bad one: damage there is not
             * told from a torn first append */
            int64_t lost = 0;
            bool later = false;
            if (at > 0 && records_after(l, at, head_says_last(l, at, size, l->epoch), size,
                                        l->epoch, &lost, &later) != 0)
                return qd_fail(err, QD_NOMEM, "out of memory reading the statistics log");
            if (later) return damaged(l, at, kept, lost, err);
            break;
        }
        l->epoch = rec.epoch;
        st = visit(ctx, &rec, err);
        qd_dlog_record_clear(&rec);
        at += len;
        kept++;
    }
    /* a torn or unreadable tail: never acknowledged (a group is answered after its fdatasync) */
    l->dropped = size - at;
    l->end = at;
    /* appends go on in the epoch of the records read (they stay until a fold); after none, in a
     * new one that no record left in the file has */
    if (at == 0) l->epoch = next_epoch(l->epoch);
    return st;
}
