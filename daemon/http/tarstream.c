/* tarstream.c -- files streamed as one deterministic POSIX tar. libarchive pushes the archive
 * (pax restricted: ustar headers, pax records only where ustar cannot say it, no blocking) into
 * a write callback; libmicrohttpd pulls the body through a content reader. The reader advances
 * the archive one step at a time (a member's header, one chunk of its data read with pread, its
 * end, the end of the archive) until the buffer libmicrohttpd offers is full; what one step
 * writes beyond it waits in a small spill buffer for the next call. Memory per download: one
 * read chunk and its spill, whatever the sizes of the files. The size is known in advance: each
 * member's header is measured by a throwaway archive, its data is padded to 512 bytes, and the
 * archive ends with two zero blocks.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "tarstream.h"

enum {
    CHUNK = 256 << 10,         /* data bytes read per step */
    SPILL = CHUNK + (64 << 10) /* one step's output: a chunk, or a header, padding and the end */
};

#define TAR_BLOCK 512u
#define TAR_END   1024u /* two zero blocks */

/* ---- the members ------------------------------------------------------------------------------
 */

/* A member's header as libarchive writes it. */
static struct archive_entry *member_entry(const qd_tar_file *f, int64_t mtime)
{
    struct archive_entry *e = archive_entry_new();
    if (!e) return NULL;
    archive_entry_set_pathname_utf8(e, f->name);
    archive_entry_set_size(e, (la_int64_t)f->bytes);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    archive_entry_set_mtime(e, (time_t)mtime, 0);
    return e;
}

/* pax restricted, unblocked: the archive's bytes are exactly its records. */
static struct archive *new_writer(void)
{
    struct archive *a = archive_write_new();
    if (a && (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
              archive_write_set_bytes_per_block(a, 0) != ARCHIVE_OK)) {
        archive_write_free(a);
        a = NULL;
    }
    return a;
}

/* Frees an archive whose member is unfinished without padding it: marked failed, then closed
 * (which then only writes the end-of-archive blocks and releases the output: freeing a failed
 * archive without closing it leaks that), then freed. NULL is a no-op. */
static void abandon(struct archive *a)
{
    if (!a) return;
    archive_write_fail(a);
    archive_write_close(a);
    archive_write_free(a);
}

static la_ssize_t count_bytes(struct archive *a, void *user, const void *buf, size_t n)
{
    (void)a;
    (void)buf;
    *(uint64_t *)user += n;
    return (la_ssize_t)n;
}

/* The bytes of member f's header (pax records included), written by a throwaway archive. */
static bool header_bytes(const qd_tar_file *f, int64_t mtime, uint64_t *n, char *why, size_t len)
{
    *n = 0;
    struct archive *a = new_writer();
    struct archive_entry *e = member_entry(f, mtime);
    bool ok = a && e && archive_write_open(a, n, NULL, count_bytes, NULL) == ARCHIVE_OK &&
              archive_write_header(a, e) == ARCHIVE_OK;
    if (!ok)
        snprintf(why, len, "%s: %s", f->name,
                 a && archive_error_string(a) ? archive_error_string(a) : "out of memory");
    uint64_t header = *n;
    abandon(a);
    *n = header;
    archive_entry_free(e);
    return ok;
}

bool qd_tar_size(const qd_tar_file *files, size_t n, int64_t mtime, uint64_t *size, char *why,
                 size_t len)
{
    uint64_t total = TAR_END;
    for (size_t i = 0; i < n; i++) {
        uint64_t h;
        if (!header_bytes(&files[i], mtime, &h, why, len)) return false;
        total += h + (files[i].bytes + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
    }
    *size = total;
    return true;
}

/* ---- the stream -------------------------------------------------------------------------------
 */

typedef struct tar_stream {
    qd_tar_file *files;
    size_t n, at; /* the member being written */
    int64_t mtime;
    uint64_t size, sent;
    char *label;
    struct archive *a;
    int fd;            /* the open member, else -1 */
    uint64_t off;      /* data bytes of it written */
    bool done, broken; /* the end written / the stream cut */
    char *dst;         /* where the write callback puts bytes first (libmicrohttpd's buffer) */
    size_t dst_cap, dst_len;
    char *spill; /* what did not fit, [spill_at, spill_len) */
    size_t spill_at, spill_len;
    char *chunk;
} tar_stream;

static la_ssize_t take_bytes(struct archive *a, void *user, const void *buf, size_t n)
{
    tar_stream *s = user;
    const char *p = buf;
    size_t direct = 0;
    if (s->spill_len == 0 && s->dst) { /* nothing waits before these bytes */
        direct = s->dst_cap - s->dst_len < n ? s->dst_cap - s->dst_len : n;
        memcpy(s->dst + s->dst_len, p, direct);
        s->dst_len += direct;
    }
    size_t rest = n - direct;
    if (rest > SPILL - s->spill_len) {
        archive_set_error(a, ENOBUFS, "a step wrote more than the %d-byte spill buffer", SPILL);
        return -1;
    }
    memcpy(s->spill + s->spill_len, p + direct, rest);
    s->spill_len += rest;
    return (la_ssize_t)n;
}

static void stream_free(void *cls)
{
    tar_stream *s = cls;
    if (s->fd >= 0) close(s->fd);
    if (s->done)
        archive_write_free(s->a); /* closed: the whole archive was written */
    else
        abandon(s->a); /* cut, or the client left: the member is not padded out */
    for (size_t i = 0; i < s->n; i++) {
        free((char *)s->files[i].name);
        free((char *)s->files[i].path);
    }
    free(s->files);
    free(s->label);
    free(s->spill);
    free(s->chunk);
    free(s);
}

/* Cuts the stream: logged once, with what went wrong. */
static bool cut(tar_stream *s, const char *what)
{
    if (!s->broken) {
        const char *member = s->at < s->n ? s->files[s->at].name : "(end)";
        qd_log(QD_LOG_WARN, "tar download cut", "job", s->label, "member", member, "error", what,
               NULL);
    }
    s->broken = true;
    return false;
}

static bool archive_ok(tar_stream *s, int rc)
{
    if (rc >= ARCHIVE_WARN) return true;
    return cut(s, archive_error_string(s->a) ? archive_error_string(s->a) : "libarchive failed");
}

/* Whether the open member still has the size it was listed with. */
static bool same_size(tar_stream *s)
{
    struct stat sb;
    if (fstat(s->fd, &sb) != 0) return cut(s, strerror(errno));
    if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != s->files[s->at].bytes)
        return cut(s, "the file changed on disk (not the size listed)");
    return true;
}

/* The next member's header, or the end of the archive. */
static bool start_member(tar_stream *s)
{
    if (s->at == s->n) {
        s->done = true;
        return archive_ok(s, archive_write_close(s->a));
    }
    const qd_tar_file *f = &s->files[s->at];
    s->fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) return cut(s, strerror(errno));
    if (!same_size(s)) return false;
    struct archive_entry *e = member_entry(f, s->mtime);
    if (!e) return cut(s, "out of memory");
    int rc = archive_write_header(s->a, e);
    archive_entry_free(e);
    s->off = 0;
    return archive_ok(s, rc);
}

/* One chunk of the open member's data, or its end. */
static bool member_data(tar_stream *s)
{
    const qd_tar_file *f = &s->files[s->at];
    if (s->off == f->bytes) {
        bool ok = same_size(s) && archive_ok(s, archive_write_finish_entry(s->a));
        close(s->fd);
        s->fd = -1;
        s->at++;
        return ok;
    }
    size_t want = f->bytes - s->off < CHUNK ? (size_t)(f->bytes - s->off) : CHUNK;
    ssize_t k = pread(s->fd, s->chunk, want, (off_t)s->off);
    if (k < 0 && errno == EINTR) return true;
    if (k < 0) return cut(s, strerror(errno));
    if (k == 0) return cut(s, "the file changed on disk (it ended early)");
    s->off += (uint64_t)k;
    la_ssize_t w = archive_write_data(s->a, s->chunk, (size_t)k);
    return w == k || archive_ok(s, ARCHIVE_FATAL);
}

static bool step(tar_stream *s)
{
    return s->fd < 0 ? start_member(s) : member_data(s);
}

/* libmicrohttpd's content reader: fills buf with the next bytes of the archive. */
static ssize_t read_tar(void *cls, uint64_t pos, char *buf, size_t max)
{
    tar_stream *s = cls;
    if (s->broken || pos != s->sent) return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t got = s->spill_len - s->spill_at < max ? s->spill_len - s->spill_at : max;
    memcpy(buf, s->spill + s->spill_at, got);
    s->spill_at += got;
    if (s->spill_at == s->spill_len) s->spill_at = s->spill_len = 0;
    while (got < max && !s->done) {
        s->dst = buf;
        s->dst_cap = max;
        s->dst_len = got;
        bool ok = step(s);
        got = s->dst_len;
        s->dst = NULL;
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    s->sent += got;
    if (got == 0 && s->sent != s->size) {
        cut(s, "the archive's size differs from the one announced");
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    return got ? (ssize_t)got : MHD_CONTENT_READER_END_OF_STREAM;
}

static tar_stream *stream_new(const qd_tar_file *files, size_t n, int64_t mtime, uint64_t size,
                              const char *label)
{
    tar_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->fd = -1;
    s->n = n;
    s->mtime = mtime;
    s->size = size;
    s->files = calloc(n ? n : 1, sizeof *s->files);
    s->label = strdup(label ? label : "");
    s->spill = malloc(SPILL);
    s->chunk = malloc(CHUNK);
    s->a = new_writer();
    bool ok = s->files && s->label && s->spill && s->chunk && s->a &&
              archive_write_open(s->a, s, NULL, take_bytes, NULL) == ARCHIVE_OK;
    for (size_t i = 0; ok && i < n; i++) {
        s->files[i].name = strdup(files[i].name);
        s->files[i].path = strdup(files[i].path);
        s->files[i].bytes = files[i].bytes;
        ok = s->files[i].name && s->files[i].path;
    }
    if (!ok) {
        stream_free(s);
        return NULL;
    }
    return s;
}

struct MHD_Response *qd_tar_response(const qd_tar_file *files, size_t n, int64_t mtime,
                                     uint64_t size, const char *label)
{
    tar_stream *s = stream_new(files, n, mtime, size, label);
    if (!s) return NULL;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(size, 64 << 10, read_tar, s, stream_free);
    if (!resp) stream_free(s);
    return resp;
}
