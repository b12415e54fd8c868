/* stats_log.h -- the statistics' delta log (stats_log.c): a file of checksummed records, one per
 * post the writer stored without rewriting sums in SQLite, appended with fdatasync before the
 * post is answered, read back (replayed) at recovery, emptied after each fold.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STATS_LOG_H
#define QD_STATS_LOG_H

#include "stats_internal.h"

/* The log's file: the database's path with this appended. */
#define QD_LOG_SUFFIX "-statslog"

typedef struct qd_dlog_buf {
    unsigned char *data;
    size_t len, cap;
    size_t last_head; /* where the last record encoded begins (its head) */
} qd_dlog_buf;

typedef struct qd_dlog {
    int fd;
    char *path;
    int64_t end;     /* bytes of acknowledged records: the next append goes here */
    int64_t dropped; /* qd_dlog_read: bytes after the last whole record (a torn, unanswered tail) */
    uint64_t epoch;  /* written into every record: a fold starts a new one */
    bool stale;      /* a truncation failed: records the database already holds may remain */
    bool unsynced;   /* a truncation not yet fdatasync'd (qd_dlog_sync, or the next append) */
    qd_dlog_buf buf; /* the group's records being built */
} qd_dlog;

/* One record read back: a post as it was stored, its group's time and its model's post count
 * before it (the record's place: replay applies it only when the model's count is that). */
typedef struct qd_dlog_record {
    qd_stat_post post;
    int64_t now_ms;
    int64_t posts_before;
    uint64_t epoch; /* the record's epoch */
} qd_dlog_record;

qd_status qd_dlog_open(qd_dlog *l, const char *db_path, qd_err *err);
void qd_dlog_close(qd_dlog *l);
/* Appends p's record to l->buf (false when out of memory). */
bool qd_dlog_encode(qd_dlog_buf *b, const qd_stat_post *p, int64_t now_ms, int64_t posts_before,
                    uint64_t epoch);
/* Writes l->buf at l->end and fdatasyncs; l->end advances on success. QD_DB naming the error. */
qd_status qd_dlog_append(qd_dlog *l, qd_err *err);
/* Empties the log after a fold committed: zeroes the first record's head (the file keeps its
 * size, so the next appends overwrite blocks in place) and starts a new epoch; a file larger than
 * keep_bytes is cut to 0 instead. Not fdatasync'd: until it is, a crash leaves records that the
 * database holds, which replay skips (their model's post count is past them), as long as no
 * model's count went back; so a reset syncs it first (qd_dlog_sync). False when it failed
 * (l->stale). */
bool qd_dlog_truncate(qd_dlog *l, int64_t keep_bytes);
/* fdatasyncs a truncation not yet synced; false when that failed. */
bool qd_dlog_sync(qd_dlog *l);

typedef qd_status (*qd_dlog_visit)(void *ctx, const qd_dlog_record *rec, qd_err *err);
/* Calls visit for each whole record in order, from the first one's epoch on; stops at the first
 * torn or unreadable one or one of another epoch (its bytes and the rest are l->dropped) or at
 * visit's first failure. Sets l->end, and a new epoch for what is appended after. A bad record
 * followed by whole ones of its epoch from a later append (damage to answered posts, not a torn
 * last append) is QD_DB, naming the byte and what the operator can do. */
qd_status qd_dlog_read(qd_dlog *l, qd_dlog_visit visit, void *ctx, qd_err *err);
void qd_dlog_record_clear(qd_dlog_record *rec);
uint64_t qd_dlog_checksum(const void *buf, size_t len);

#endif /* QD_STATS_LOG_H */
