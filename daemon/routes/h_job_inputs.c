/* h_job_inputs.c -- checkpoint jobs (issue 11): POST /v1/jobs with {"files": [NAME, ...]} creates
 * a job in state receiving; PUT /v1/jobs/{id}/inputs/{name} streams one listed file straight
 * into the job's inputs directory. A shard's header is validated as soon as its bytes are on
 * disk (a bad one, or a Content-Length other than the size it implies, fails the job at once);
 * a body cut short or a client that leaves fails the job naming the file; the last file in has
 * the job planned and queued (receiving.c). Bytes are written with plain write(), their
 * write-back started every 32 MiB (sync_file_range), and each file is fsync'd once complete,
 * before it counts as received.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handlers.h"
#include "inputs.h"
#include "receiving.h"
#include "req_limits.h"
#include "quant_st.h"

/* ---- creating the job -------------------------------------------------------------------------
 */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Why name cannot be a file of a job (NULL: it can): a plain file name of printable bytes. */
static const char *bad_name(const char *name, size_t len, int max_len)
{
    if (len == 0) return "is empty";
    if (len != strlen(name)) return "holds a NUL byte";
    if ((int)len > max_len) return "is longer than max_input_name";
    if (name[0] == '.') return "starts with '.'";
    if (strchr(name, '/')) return "holds a '/' (names are plain file names)";
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) return "holds a control character";
    return NULL;
}

/* doc's "files": a non-empty array of valid, distinct names, at least one a shard, at most
 * max_input_files. The names (borrowed from doc) to *names; replies 400 and returns false. */
static bool files_ok(qd_req *r, json_t *files, const char ***names, size_t *n)
{
    const qd_config *cfg = r->app->cfg;
    *names = NULL;
    *n = json_array_size(files);
    if (!json_is_array(files) || *n == 0) {
        qd_reply_ec(r, QD_EC_INVALID, "files", "files must be a non-empty array of file names");
        return false;
    }
    if (*n > (size_t)cfg->max_input_files) {
        qd_reply_ec_limit(r, QD_EC_INVALID, "max_input_files", 0,
                          "%zu files listed; a job takes at most %d (max_input_files)", *n,
                          cfg->max_input_files);
        return false;
    }
    if (!(*names = calloc(*n, sizeof **names))) return false;
    bool shard = false;
    for (size_t i = 0; i < *n; i++) {
        json_t *v = json_array_get(files, i);
        const char *s = json_string_value(v),
                   *why = s ? bad_name(s, json_string_length(v), cfg->max_input_name)
                            : "is not a string";
        for (size_t k = 0; !why && k < i; k++)
            if (strcmp((*names)[k], s) == 0) why = "is listed twice";
        if (why) {
            qd_reply_ec(r, QD_EC_INVALID, "files", "files[%zu] %s%s%.64s%s", i, why, s ? " ('" : "",
                        s ? s : "", s ? "')" : "");
            free(*names);
            *names = NULL;
            return false;
        }
        (*names)[i] = s;
        shard = shard || ends_with(s, ".safetensors");
    }
    if (!shard) {
        qd_reply_ec(r, QD_EC_INVALID, "files", "files must list at least one *.safetensors shard");
        free(*names);
        *names = NULL;
    }
    return shard;
}

enum MHD_Result qd_job_create_receiving(qd_req *r, json_t *doc)
{
    const char **names = NULL;
    size_t n = 0;
    qd_job j;
    if (!qd_job_fields_json(r, doc, &j)) return r->replied ? MHD_YES : MHD_NO;
    if (!qd_upload_layout_ok(r, j.layout) ||
        !files_ok(r, json_object_get(doc, "files"), &names, &n)) {
        free(j.rules);
        return r->replied ? MHD_YES : MHD_NO;
    }
    qd_err err;
    qd_status st = qd_receiving_create(r->app, &j, names, n, false, &err);
    free(names);
    enum MHD_Result ret;
    if (st != QD_OK) {
        ret = qd_reply_store_error(r, st, &err);
    } else {
        char loc[64];
        snprintf(loc, sizeof loc, "/v1/jobs/%lld", (long long)j.id);
        json_t *body = qd_job_json(r->app, &j);
        ret = qd_reply_text(r, MHD_HTTP_CREATED, json_dumps(body, JSON_COMPACT), "application/json",
                            MHD_HTTP_HEADER_LOCATION, loc);
        json_decref(body);
    }
    free(j.rules);
    free(j.source_path);
    return ret;
}

/* ---- one file, streamed -----------------------------------------------------------------------
 */

/* Write-back of a file's bytes is started every this many bytes as they arrive, so that the
 * fsync at its end has little left to write (BENCHMARKS.md, daemon section). */
#define WRITEBACK_EVERY (32u << 20)

typedef struct input_sink {
    qd_app *app;
    int64_t id;
    qd_job_inputs *ji;
    size_t idx;
    char *path;        /* the file on disk (for reading its header back) */
    const char *name;  /* r->params[1] */
    bool shard;        /* *.safetensors: its header is checked */
    bool checked;      /* the header was validated; expect is known */
    uint64_t expect;   /* the size the header implies */
    uint64_t declared; /* Content-Length, or UINT64_MAX (chunked) */
    uint64_t flushed;  /* bytes whose write-back was started (sync_file_range) */
    bool ended;        /* answered (or the job failed with a reason of ours): nothing at the end */
    qd_ec ec;          /* why the sink refused the bytes (QD_EC_COUNT: it did not) */
    char msg[QUANT_CK_MESSAGE_MAX];
} input_sink;

/* The job fails with msg (s->msg itself, or copied there), and the request answers ec with it. */
static void sink_refuse(input_sink *s, qd_ec ec, const char *msg)
{
    s->ec = ec;
    if (msg != s->msg) snprintf(s->msg, sizeof s->msg, "%s", msg);
    s->ended = true;
    qd_receiving_fail(s->app, s->id, QD_JOB_FAILED, s->msg);
}

/* Validates the shard's header from what is on disk (have bytes; whole: the body has ended).
 * Returns false when it is bad (the job failed) or, before the end, when the header is not in
 * yet (s->checked stays false). */
static bool check_header(input_sink *s, uint64_t have, bool whole)
{
    unsigned char len8[8];
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sink_refuse(s, QD_EC_INTERNAL, "cannot read the input back");
        return false;
    }
    bool in = have >= 8 && pread(fd, len8, 8, 0) == 8;
    uint64_t n = 0;
    if (in) memcpy(&n, len8, 8);
    n = le64toh(n);
    if (!whole && (!in || (n <= QUANT_ST_MAX_HEADER && have < 8 + n))) {
        close(fd);
        return true; /* not in yet */
    }
    quant_st_file *f = NULL;
    quant_ck_error ck;
    if (quant_st_open_header_fd(fd, s->name, &f, &ck) != QUANT_CK_OK) { /* closes fd */
        sink_refuse(s, QD_EC_BAD_SAFETENSORS, ck.message);
        return false;
    }
    uint64_t end = 0;
    for (size_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].end > end) end = f->tensors[i].end;
    s->expect = f->data_start + end;
    s->checked = true;
    quant_st_close(f);
    if (s->declared != UINT64_MAX && s->declared != s->expect) {
        snprintf(s->msg, sizeof s->msg, "%s: Content-Length is %llu bytes; its header implies %llu",
                 s->name, (unsigned long long)s->declared, (unsigned long long)s->expect);
        sink_refuse(s, QD_EC_LENGTH_MISMATCH, s->msg);
        return false;
    }
    return true;
}

static bool sink_wrote(qd_req *r)
{
    input_sink *s = r->sink;
    char why[256];
    if (qd_inputs_failed(s->ji, why, sizeof why)) { /* timed out, cancelled, another file */
        s->ec = QD_EC_NOT_RECEIVING;
        snprintf(s->msg, sizeof s->msg, "job %lld takes no more files: %s", (long long)s->id, why);
        s->ended = true;
        return false;
    }
    if (s->shard && !s->checked && !check_header(s, r->upload_bytes, false)) return false;
    if (s->checked && r->upload_bytes > s->expect) {
        snprintf(s->msg, sizeof s->msg,
                 "%s: the body is longer than the %llu bytes its header "
                 "implies",
                 s->name, (unsigned long long)s->expect);
        sink_refuse(s, QD_EC_LENGTH_MISMATCH, s->msg);
        return false;
    }
    qd_inputs_progress(s->ji, s->idx, r->upload_bytes);
    if (r->upload_bytes - s->flushed >= WRITEBACK_EVERY) { /* so the last fsync has little left */
        sync_file_range(r->upload_fd, (off_t)s->flushed, (off_t)(r->upload_bytes - s->flushed),
                        SYNC_FILE_RANGE_WRITE);
        s->flushed = r->upload_bytes;
    }
    return true;
}

/* The request ended before its handler answered: a client that left, or a body shorter than
 * its Content-Length. The job fails naming the file. */
static void sink_end(qd_req *r)
{
    input_sink *s = r->sink;
    if (!s->ended) {
        char msg[512];
        snprintf(msg, sizeof msg, "the upload of '%s' did not complete: %s after %llu bytes",
                 s->name,
                 r->upload_failed ? "writing it failed (disk full?)"
                 : r->refused != QD_REFUSE_NONE
                     ? "its body was refused"
                     : "the client left, or sent less than its Content-Length,",
                 (unsigned long long)r->upload_bytes);
        qd_receiving_fail(s->app, s->id, QD_JOB_FAILED, msg);
    }
    qd_inputs_release(s->ji);
    free(s->path);
    free(s);
    r->sink = NULL;
    r->sink_end = NULL;
    r->sink_wrote = NULL;
}

/* 404 when the job or the name is unknown, 409 when it takes no more files or the name was sent;
 * else the entry with the file's index taken. */
static qd_job_inputs *take_input(qd_req *r, int64_t id, size_t *idx)
{
    qd_job_inputs *ji = qd_inputs_get(r->app->inputs, id);
    if (!ji) {
        qd_job j;
        qd_err err;
        qd_status st = qd_store_job_get(r->app->store, id, &j, &err);
        if (st != QD_OK) {
            qd_reply_store_error(r, st, &err);
            return NULL;
        }
        qd_reply_ec(r, QD_EC_NOT_RECEIVING, NULL, "job %lld is %s; it takes no more files",
                    (long long)id, qd_job_state_name(j.state));
        qd_job_clear(&j);
        return NULL;
    }
    qd_err err;
    qd_status st = qd_inputs_begin(ji, r->params[1], idx, &err);
    if (st == QD_OK) return ji;
    bool failed = qd_inputs_failed(ji, NULL, 0);
    qd_inputs_release(ji);
    if (st == QD_NOT_FOUND)
        qd_reply_ec(r, QD_EC_UNKNOWN_INPUT, "name", "%s", err.message);
    else
        qd_reply_ec(r, failed ? QD_EC_NOT_RECEIVING : QD_EC_INPUT_ALREADY_SENT, "name", "%s",
                    err.message);
    return NULL;
}

/* The listed file's path in the job's inputs directory (malloc'd), NULL on error. */
static char *input_path(qd_app *app, int64_t id, const char *name)
{
    qd_job j;
    qd_err err;
    if (qd_store_job_get(app->store, id, &j, &err) != QD_OK) return NULL;
    char *path = NULL;
    if (asprintf(&path, "%s/%s", j.source_path, name) < 0) path = NULL;
    qd_job_clear(&j);
    return path;
}

bool qd_input_sink_attach(qd_req *r, int64_t id, qd_job_inputs *ji, size_t idx, const char *name,
                          char *path)
{
    input_sink *s = calloc(1, sizeof *s);
    if (!s) {
        qd_inputs_release(ji);
        free(path);
        qd_receiving_fail(r->app, id, QD_JOB_FAILED, "out of memory");
        return false;
    }
    *s = (input_sink){.app = r->app,
                      .id = id,
                      .ji = ji,
                      .idx = idx,
                      .path = path,
                      .name = name,
                      .ec = QD_EC_COUNT,
                      .declared = UINT64_MAX};
    s->shard = ends_with(s->name, ".safetensors");
    r->sink = s;
    r->sink_end = sink_end; /* from here on, a request that ends unanswered fails the job */
    const char *cl = qd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) s->declared = strtoull(cl, NULL, 10);
    int fd = s->path ? open(s->path, O_RDWR | O_TRUNC | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (fd < 0) {
        snprintf(s->msg, sizeof s->msg, "%s: cannot open the input: %s", s->name, strerror(errno));
        sink_refuse(s, QD_EC_INTERNAL, s->msg);
        return false;
    }
    r->upload_fd = fd;
    r->sink_wrote = sink_wrote;
    return true;
}

int64_t qd_input_sink_job(const qd_req *r)
{
    return ((const input_sink *)r->sink)->id;
}

enum MHD_Result qd_h_job_input_precheck(qd_req *r)
{
    int64_t id;
    size_t idx;
    if (!qd_job_id_param(r, &id)) return MHD_YES;
    qd_job_inputs *ji = take_input(r, id, &idx);
    if (!ji) return MHD_YES;
    if (!qd_input_sink_attach(r, id, ji, idx, r->params[1], input_path(r->app, id, r->params[1])))
        return r->sink ? qd_reply_ec(r, QD_EC_INTERNAL, "name", "%s", ((input_sink *)r->sink)->msg)
                       : MHD_NO;
    input_sink *s = r->sink;
    const char *cl = qd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!qd_limit_disk(r, cl ? s->declared : 0)) { /* replied 507 */
        s->ended = true;
        qd_receiving_fail(r->app, id, QD_JOB_FAILED, "not enough free disk for its files");
    }
    return MHD_YES;
}

static enum MHD_Result refused(qd_req *r, input_sink *s)
{
    return qd_reply_ec(r, s->ec, s->ec == QD_EC_BAD_SAFETENSORS ? NULL : "name", "%s", s->msg);
}

bool qd_input_sink_finish(qd_req *r, enum MHD_Result *ret)
{
    input_sink *s = r->sink;
    *ret = MHD_YES;
    if (s->ec != QD_EC_COUNT) return *ret = refused(r, s), false;
    if (s->shard && !s->checked && !check_header(s, r->upload_bytes, true))
        return *ret = refused(r, s), false;
    if (s->shard && r->upload_bytes != s->expect) {
        snprintf(s->msg, sizeof s->msg, "%s: the body ends at %llu bytes; its header implies %llu",
                 s->name, (unsigned long long)r->upload_bytes, (unsigned long long)s->expect);
        sink_refuse(s, QD_EC_LENGTH_MISMATCH, s->msg);
        return *ret = refused(r, s), false;
    }
    /* the run may read it whole now (from the page cache) while it is synced; it counts as
     * received, and the job's receiving mark goes, only once it is on disk */
    qd_inputs_progress(s->ji, s->idx, r->upload_bytes);
    qd_inputs_whole(s->ji, s->idx);
    if (fsync(r->upload_fd) != 0) {
        snprintf(s->msg, sizeof s->msg, "%s: fsync: %s", s->name, strerror(errno));
        sink_refuse(s, QD_EC_INTERNAL, s->msg);
        return *ret = refused(r, s), false;
    }
    s->ended = true;
    if (qd_inputs_complete(s->ji, s->idx)) {
        quant_ck_error ck;
        quant_ck_status st = qd_receiving_done(r->app, s->id, &ck);
        if (st == QUANT_CK_ERR_NOMEM) return *ret = MHD_NO, false;
        if (st != QUANT_CK_OK)
            return *ret = qd_reply_ec(r, qd_plan_error_code(st), NULL, "%s", ck.message), false;
    }
    return true;
}

enum MHD_Result qd_h_job_input_put(qd_req *r)
{
    input_sink *s = r->sink;
    enum MHD_Result ret;
    if (!qd_input_sink_finish(r, &ret)) return ret;
    qd_job j;
    qd_err err;
    qd_status st = qd_store_job_get(r->app->store, s->id, &j, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    json_t *out = qd_job_json(r->app, &j);
    qd_job_clear(&j);
    json_object_set_new(
        out, "input",
        json_pack("{s:s,s:I}", "name", s->name, "bytes", (json_int_t)r->upload_bytes));
    return qd_reply_json(r, MHD_HTTP_OK, out);
}
