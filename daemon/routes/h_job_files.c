/* h_job_files.c -- a succeeded job's files: GET /v1/jobs/{id}/output (the one safetensors
 * output), GET /v1/jobs/{id}/outputs/{name} (any output, by the name the store lists; never a
 * path from the request), served from the file with Content-Length, ETag (its SHA-256),
 * If-None-Match (etag.c: lists, weak comparison), one byte range (range.c: several satisfiable
 * ranges and invalid Range headers get the whole file) and If-Range; GET /v1/jobs/{id}/outputs
 * (the list, with the tar's size and ETag), GET /v1/jobs/{id}/outputs.tar (every output as one
 * tar, tarstream.c; its ETag a hash over the list); GET /v1/jobs/{id}/report.
 * HEAD is answered by the same handlers (router.c); libmicrohttpd leaves the body out.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <archive.h>
#include <fcntl.h>
#include <inttypes.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "etag.h"
#include "handlers.h"
#include "range.h"
#include "tarstream.h"
#include "timefmt.h"

/* The job, which must have succeeded (and, for its files, still have them); replies 404, 409
 * or 410 otherwise. *finished_ms (when not NULL) gets the time it ended. */
static bool succeeded_job_at(qd_req *r, int64_t *id, bool files, int64_t *finished_ms)
{
    int64_t v;
    if (!qd_job_id_param(r, &v)) return false;
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
        qd_reply_ec(r, QD_EC_JOB_NOT_READY, NULL,
                    "job %lld is %s; its outputs exist once it has succeeded", (long long)v,
                    qd_job_state_name(j.state));
    else if (!ok)
        qd_reply_ec_limit(r, QD_EC_OUTPUTS_REMOVED, "retention", 0,
                          "the outputs of job %lld were removed at %s by retention ([jobs] "
                          "retention and keep_outputs); its report and output hashes remain",
                          (long long)v, qd_iso8601(j.outputs_removed_ms, when));
    if (finished_ms) *finished_ms = j.finished_ms;
    qd_job_clear(&j);
    *id = v;
    return ok;
}

static bool succeeded_job(qd_req *r, int64_t *id, bool files)
{
    return succeeded_job_at(r, id, files, NULL);
}

/* 304: If-None-Match matched; the reply carries the ETag and no body. */
static enum MHD_Result not_modified(qd_req *r, const char *etag)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    return qd_reply(r, MHD_HTTP_NOT_MODIFIED, resp);
}

/* 416 with Content-Range: bytes STAR/SIZE (RFC 9110 15.5.17). */
static enum MHD_Result not_satisfiable(qd_req *r, uint64_t size)
{
    char cr[48];
    snprintf(cr, sizeof cr, "bytes */%" PRIu64, size);
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
    return qd_reply(r, MHD_HTTP_RANGE_NOT_SATISFIABLE, resp);
}

/* The Range header to honour: none when If-Range names another representation (the client's
 * copy is of another file: it gets the whole of this one). If-Range takes the strong
 * comparison: only this exact ETag (a date or a weak tag never matches). */
static const char *wanted_range(const qd_req *r, const char *etag)
{
    const char *range = qd_req_header(r, MHD_HTTP_HEADER_RANGE);
    const char *if_range = qd_req_header(r, MHD_HTTP_HEADER_IF_RANGE);
    return range && if_range && strcmp(if_range, etag) != 0 ? NULL : range;
}

/* The file's bytes from..to (206 when partial, else 200) from fd, which the response takes. */
static enum MHD_Result send_bytes(qd_req *r, int fd, const qd_output *o, const char *etag,
                                  uint64_t size, uint64_t from, uint64_t to, bool partial)
{
    uint64_t len = size ? to - from + 1 : 0;
    struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64(len, fd, from);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    char disp[320], cr[96];
    snprintf(disp, sizeof disp, "attachment; filename=\"%s\"", o->name);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, disp);
    if (partial) {
        snprintf(cr, sizeof cr, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, from, to, size);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
    }
    return qd_reply(r, partial ? MHD_HTTP_PARTIAL_CONTENT : MHD_HTTP_OK, resp);
}

static enum MHD_Result serve_file(qd_req *r, const char *path, const qd_output *o)
{
    char etag[70];
    snprintf(etag, sizeof etag, "\"%s\"", o->sha256);
    if (qd_etag_none_match(qd_req_header(r, MHD_HTTP_HEADER_IF_NONE_MATCH), etag))
        return not_modified(r, etag);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != (uint64_t)o->bytes) {
        if (fd >= 0) close(fd);
        return qd_reply_ec(r, QD_EC_INTERNAL, NULL, "output %s is missing or changed on disk",
                           o->name);
    }
    uint64_t size = (uint64_t)sb.st_size, from = 0, to = size ? size - 1 : 0;
    /* from and to change only for one range; no header, an invalid one and several ranges
     * (QD_RANGE_MULTI: we send no multipart/byteranges) get the whole file */
    qd_range_result range = qd_range_parse(wanted_range(r, etag), size, &from, &to);
    if (range == QD_RANGE_UNSATISFIABLE) {
        close(fd);
        return not_satisfiable(r, size);
    }
    return send_bytes(r, fd, o, etag, size, from, to, range == QD_RANGE_SINGLE);
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
        ret = qd_reply_ec(r, QD_EC_SEVERAL_OUTPUTS, NULL,
                          "job %lld has %zu shards; fetch them by name from "
                          "/v1/jobs/%lld/outputs/{name}",
                          (long long)id, shards, (long long)id);
    else if (hit == SIZE_MAX)
        ret =
            qd_reply_ec(r, QD_EC_NOT_FOUND, NULL, "job %lld has no output %s", (long long)id, name);
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

/* ---- every output at once: the list and the tar ------------------------------------------------
 */

/* A succeeded job's outputs (store order: by name), their files and the tar of them. */
typedef struct job_files {
    int64_t id, finished_ms;
    qd_output *o;
    size_t n;
    qd_tar_file *tar;
    char **paths;
    uint64_t tar_bytes;
    char etag[70]; /* the tar's, quoted */
} job_files;

static void job_files_free(job_files *f)
{
    for (size_t i = 0; f->paths && i < f->n; i++) free(f->paths[i]);
    free(f->paths);
    free(f->tar);
    qd_outputs_free(f->o, f->n);
}

/* The tar's ETag: SHA-256 over what decides its bytes (the members' names, sizes and hashes in
 * order, the modification time, libarchive's version), so a strong validator: equal tags, equal
 * bytes. */
static void tar_etag(job_files *f)
{
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    char line[400];
    int k = snprintf(line, sizeof line, "quantd.tar/1\n%s\n%lld\n", archive_version_string(),
                     (long long)(f->finished_ms / 1000));
    sha256_update(&ctx, (size_t)k, (const uint8_t *)line);
    for (size_t i = 0; i < f->n; i++) {
        sha256_update(&ctx, strlen(f->o[i].name) + 1, (const uint8_t *)f->o[i].name);
        k = snprintf(line, sizeof line, "%lld %s\n", (long long)f->o[i].bytes, f->o[i].sha256);
        sha256_update(&ctx, (size_t)k, (const uint8_t *)line);
    }
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(&ctx, sizeof d, d);
    f->etag[0] = '"';
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++) snprintf(f->etag + 1 + 2 * i, 3, "%02x", d[i]);
    snprintf(f->etag + 1 + 2 * SHA256_DIGEST_SIZE, 3, "\"");
}

/* Loads the job's outputs and sizes their tar; replies (404, 409, 410, 500) and returns false
 * on failure. */
static bool job_files_load(qd_req *r, job_files *f)
{
    memset(f, 0, sizeof *f);
    if (!succeeded_job_at(r, &f->id, true, &f->finished_ms)) return false;
    qd_err err;
    qd_status st = qd_store_job_outputs(r->app->store, f->id, &f->o, &f->n, &err);
    if (st != QD_OK) {
        qd_reply_store_error(r, st, &err);
        return false;
    }
    char *dir = qd_app_job_dir(r->app, f->id), why[320];
    f->tar = calloc(f->n ? f->n : 1, sizeof *f->tar);
    f->paths = calloc(f->n ? f->n : 1, sizeof *f->paths);
    bool ok = dir && f->tar && f->paths;
    for (size_t i = 0; ok && i < f->n; i++) {
        size_t len = strlen(dir) + strlen(f->o[i].name) + 16;
        ok = (f->paths[i] = malloc(len)) != NULL;
        if (ok) snprintf(f->paths[i], len, "%s/output/%s", dir, f->o[i].name);
        f->tar[i] = (qd_tar_file){f->o[i].name, f->paths[i], (uint64_t)f->o[i].bytes};
    }
    free(dir);
    if (!ok) {
        qd_reply_ec(r, QD_EC_INTERNAL, NULL, "out of memory");
        return false;
    }
    if (!qd_tar_size(f->tar, f->n, f->finished_ms / 1000, &f->tar_bytes, why, sizeof why)) {
        qd_reply_ec(r, QD_EC_INTERNAL, NULL, "job %lld: its outputs cannot be put in a tar: %s",
                    (long long)f->id, why);
        return false;
    }
    tar_etag(f);
    return true;
}

enum MHD_Result qd_h_job_outputs(qd_req *r)
{
    job_files f;
    if (!job_files_load(r, &f)) {
        job_files_free(&f);
        return MHD_YES;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < f.n; i++) total += (uint64_t)f.o[i].bytes;
    char url[64];
    snprintf(url, sizeof url, "/v1/jobs/%lld/outputs.tar", (long long)f.id);
    json_t *doc =
        json_pack("{s:I, s:o, s:I, s:{s:s, s:I, s:s}}", "job", (json_int_t)f.id, "outputs",
                  qd_job_outputs_json(r->app, f.id), "bytes", (json_int_t)total, "tar", "url", url,
                  "bytes", (json_int_t)f.tar_bytes, "etag", f.etag);
    job_files_free(&f);
    return qd_reply_json(r, MHD_HTTP_OK, doc);
}

enum MHD_Result qd_h_job_outputs_tar(qd_req *r)
{
    job_files f;
    if (!job_files_load(r, &f)) {
        job_files_free(&f);
        return MHD_YES;
    }
    enum MHD_Result ret;
    if (qd_etag_none_match(qd_req_header(r, MHD_HTTP_HEADER_IF_NONE_MATCH), f.etag)) {
        ret = not_modified(r, f.etag);
    } else {
        char label[24], disp[64];
        snprintf(label, sizeof label, "%lld", (long long)f.id);
        snprintf(disp, sizeof disp, "attachment; filename=\"job-%lld.tar\"", (long long)f.id);
        struct MHD_Response *resp =
            qd_tar_response(f.tar, f.n, f.finished_ms / 1000, f.tar_bytes, label);
        if (resp) {
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-tar");
            MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, f.etag);
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, disp);
        }
        ret = qd_reply(r, MHD_HTTP_OK, resp);
    }
    job_files_free(&f);
    return ret;
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
