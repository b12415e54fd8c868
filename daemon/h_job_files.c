/* h_job_files.c -- a succeeded job's files: GET /v1/jobs/{id}/output (the one safetensors
 * output), GET /v1/jobs/{id}/outputs/{name} (any output, by the name the store lists; never a
 * path from the request), served from the file with Content-Length, ETag (its SHA-256),
 * If-None-Match, single byte ranges and If-Range; GET /v1/jobs/{id}/report.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handlers.h"
#include "timefmt.h"

/* The job, which must have succeeded (and, for its files, still have them); replies 404, 409
 * or 410 otherwise. */
static bool succeeded_job(qd_req *r, int64_t *id, bool files)
{
    char *end;
    errno = 0;
    long long v = strtoll(r->params[0], &end, 10);
    if (errno || *end || v <= 0) {
        qd_reply_error(r, MHD_HTTP_NOT_FOUND, "not_found", NULL, "no job %s", r->params[0]);
        return false;
    }
    qd_job j;
    qd_err err;
    qd_status st = qd_store_job_get(r->app->store, v, &j, &err);
    if (st != QD_OK) {
        qd_reply_store_error(r, st, &err);
        return false;
    }
    bool ok = j.state == QD_JOB_SUCCEEDED && !(files && j.outputs_removed_ms);
    char when[QD_TIME_LEN];
    if (j.state != QD_JOB_SUCCEEDED)
        qd_reply_error(r, MHD_HTTP_CONFLICT, "not_ready", NULL,
                       "job %lld is %s; its outputs exist once it has succeeded", v,
                       qd_job_state_name(j.state));
    else if (!ok)
        qd_reply_limit(r, MHD_HTTP_GONE, "outputs_removed", "retention", 0,
                       "the outputs of job %lld were removed at %s by retention ([jobs] "
                       "retention and keep_outputs); its report and output hashes remain",
                       v, qd_iso8601(j.outputs_removed_ms, when));
    qd_job_clear(&j);
    *id = v;
    return ok;
}

/* Parses "bytes=A-B", "bytes=A-", "bytes=-N" against size; false when unsatisfiable or not a
 * single range (the caller then answers 416). */
static bool parse_range(const char *h, uint64_t size, uint64_t *from, uint64_t *to)
{
    if (strncmp(h, "bytes=", 6) != 0 || strchr(h, ',')) return false;
    h += 6;
    char *end;
    if (*h == '-') {
        uint64_t n = strtoull(h + 1, &end, 10);
        if (*end || end == h + 1 || n == 0 || size == 0) return false;
        *from = n >= size ? 0 : size - n;
        *to = size - 1;
        return true;
    }
    *from = strtoull(h, &end, 10);
    if (end == h || *end != '-') return false;
    const char *b = end + 1;
    *to = *b ? strtoull(b, &end, 10) : size - 1;
    if (*b && *end) return false;
    if (*to >= size) *to = size - 1;
    return *from < size && *from <= *to;
}

static enum MHD_Result serve_file(qd_req *r, const char *path, const qd_output *o)
{
    char etag[70];
    snprintf(etag, sizeof etag, "\"%s\"", o->sha256);
    const char *inm = qd_req_header(r, MHD_HTTP_HEADER_IF_NONE_MATCH);
    if (inm && (strcmp(inm, etag) == 0 || strcmp(inm, "*") == 0)) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
        return qd_reply(r, MHD_HTTP_NOT_MODIFIED, resp);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != (uint64_t)o->bytes) {
        if (fd >= 0) close(fd);
        return qd_reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", NULL,
                              "output %s is missing or changed on disk", o->name);
    }
    uint64_t size = (uint64_t)sb.st_size, from = 0, to = size ? size - 1 : 0;
    const char *range = qd_req_header(r, MHD_HTTP_HEADER_RANGE);
    const char *if_range = qd_req_header(r, MHD_HTTP_HEADER_IF_RANGE);
    if (range && if_range && strcmp(if_range, etag) != 0)
        range = NULL; /* the client's copy is of another file: send the whole of this one */
    char cr[96];
    unsigned status = MHD_HTTP_OK;
    if (range && !parse_range(range, size, &from, &to)) {
        close(fd);
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        snprintf(cr, sizeof cr, "bytes */%" PRIu64, size);
        if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
        return qd_reply(r, MHD_HTTP_RANGE_NOT_SATISFIABLE, resp);
    }
    if (range) {
        status = MHD_HTTP_PARTIAL_CONTENT;
        snprintf(cr, sizeof cr, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, from, to, size);
    }
    uint64_t len = size ? to - from + 1 : 0;
    struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64(len, fd, from);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    char disp[320];
    snprintf(disp, sizeof disp, "attachment; filename=\"%s\"", o->name);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, disp);
    if (range) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
    return qd_reply(r, status, resp);
}

/* Serves output `name` (or the single safetensors output when name is NULL). */
static enum MHD_Result serve_output(qd_req *r, const char *name)
{
    int64_t id;
    if (!succeeded_job(r, &id, true)) return MHD_YES;
    qd_output *o = NULL;
    size_t n = 0, hit = SIZE_MAX, shards = 0;
    qd_err err;
    qd_status st = qd_store_job_outputs(r->app->store, id, &o, &n, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(o[i].name);
        bool shard = len > 12 && strcmp(o[i].name + len - 12, ".safetensors") == 0;
        if (name ? strcmp(o[i].name, name) == 0 : shard) hit = i;
        shards += shard;
    }
    enum MHD_Result ret;
    if (!name && shards != 1)
        ret = qd_reply_error(r, MHD_HTTP_CONFLICT, "several_outputs", NULL,
                             "job %lld has %zu shards; fetch them by name from "
                             "/v1/jobs/%lld/outputs/{name}",
                             (long long)id, shards, (long long)id);
    else if (hit == SIZE_MAX)
        ret = qd_reply_error(r, MHD_HTTP_NOT_FOUND, "not_found", NULL, "job %lld has no output %s",
                             (long long)id, name);
    else {
        char *dir = qd_app_job_dir(r->app, id), path[4400];
        snprintf(path, sizeof path, "%s/output/%s", dir ? dir : "", o[hit].name);
        ret = dir ? serve_file(r, path, &o[hit]) : MHD_NO;
        free(dir);
    }
    qd_outputs_free(o, n);
    return ret;
}

enum MHD_Result qd_h_job_output(qd_req *r)
{
    return serve_output(r, NULL);
}

enum MHD_Result qd_h_job_output_named(qd_req *r)
{
    return serve_output(r, r->params[1]);
}

enum MHD_Result qd_h_job_report(qd_req *r)
{
    int64_t id;
    if (!succeeded_job(r, &id, false)) return MHD_YES;
    char *text = NULL;
    qd_err err;
    qd_status st = qd_store_job_report(r->app->store, id, &text, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    return qd_reply_text(r, MHD_HTTP_OK, text, "application/json", NULL, NULL);
}
