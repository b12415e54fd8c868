/* h_jobs.c -- POST /v1/jobs (a streamed safetensors upload, or a JSON request naming a
 * checkpoint under a source root; either may name a stats_model whose calibration statistics
 * give static activation scales), GET /v1/jobs (filter and pagination), GET and DELETE
 * /v1/jobs/{id} (cancel, or delete a finished job with its files).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "handlers.h"
#include "inputs.h"
#include "job_source.h"
#include "jobs.h"
#include "log.h"
#include "req_limits.h"
#include "router.h"
#include "quant_pipeline.h"
#include "quant_st.h"
#include "receiving.h"
#include "stats.h"
#include "timefmt.h"

/* ---- the job as JSON --------------------------------------------------------------------------
 */

static json_t *time_or_null(int64_t ms)
{
    char buf[QD_TIME_LEN];
    return ms ? json_string(qd_iso8601(ms, buf)) : json_null();
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

json_t *qd_job_outputs_json(qd_app *app, int64_t id)
{
    qd_output *o = NULL;
    size_t n = 0;
    qd_err err;
    json_t *list = json_array();
    if (qd_store_job_outputs(app->store, id, &o, &n, &err) != QD_OK) return list;
    for (size_t i = 0; i < n; i++) {
        char url[512];
        snprintf(url, sizeof url, "/v1/jobs/%lld/outputs/%s", (long long)id, o[i].name);
        json_array_append_new(list,
                              json_pack("{s:s,s:I,s:s,s:s}", "name", o[i].name, "bytes",
                                        (json_int_t)o[i].bytes, "sha256", o[i].sha256, "url", url));
    }
    qd_outputs_free(o, n);
    return list;
}

json_t *qd_job_json(qd_app *app, const qd_job *j)
{
    json_t *source = json_pack("{s:s}", "kind", j->source_kind);
    if (strcmp(j->source_kind, "path") == 0)
        json_object_set_new(source, "path", json_string(j->source_path));
    json_t *out = json_pack(
        "{s:I,s:s,s:o,s:s,s:o,s:o,s:{s:I,s:I,s:I,s:I},s:o,s:o,s:o,s:o,s:i}", "id",
        (json_int_t)j->id, "state", qd_job_state_name(j->state), "ruleset", str_or_null(j->ruleset),
        "layout", j->layout, "source", source, "stats_model", str_or_null(j->stats_model),
        "progress", "tensors_done", (json_int_t)j->tensors_done, "tensors_total",
        (json_int_t)j->tensors_total, "bytes_done", (json_int_t)j->bytes_done, "bytes_total",
        (json_int_t)j->bytes_total, "created_at", time_or_null(j->created_ms), "started_at",
        time_or_null(j->started_ms), "finished_at", time_or_null(j->finished_ms), "error",
        str_or_null(j->error), "attempts", j->attempts);
    json_t *unused = j->unused_rules ? json_loads(j->unused_rules, 0, NULL) : NULL;
    if (out) json_object_set_new(out, "unused_rules", unused ? unused : json_null());
    if (out && j->state == QD_JOB_SUCCEEDED) {
        json_object_set_new(out, "outputs", qd_job_outputs_json(app, j->id));
        json_object_set_new(out, "outputs_removed_at", time_or_null(j->outputs_removed_ms));
    }
    return out;
}

/* ---- creating a job ---------------------------------------------------------------------------
 */

/* The rule set the job runs with: a stored one by name, or inline rules. Replies on error. */
char *qd_job_rules(qd_req *r, const char *name, json_t *inline_rules)
{
    if (name && inline_rules) {
        qd_reply_ec(r, QD_EC_INVALID, "ruleset", "give either ruleset or rules, not both");
        return NULL;
    }
    if (inline_rules) {
        json_t *doc = json_pack("{s:O}", "rules", inline_rules);
        char *text = doc ? qd_rules_validate(r, doc, "rules") : NULL;
        json_decref(doc);
        return text;
    }
    if (!name) {
        qd_reply_ec(r, QD_EC_INVALID, "ruleset",
                    "a job needs a rule set: ?ruleset=NAME (uploads), or \"ruleset\" or "
                    "\"rules\" in the JSON body");
        return NULL;
    }
    char *body = NULL;
    qd_err err;
    qd_status st = qd_store_ruleset_get(r->app->store, name, &body, NULL, NULL, &err);
    if (st == QD_NOT_FOUND)
        qd_reply_ec(r, QD_EC_UNKNOWN_RULESET, "ruleset", "no rule set named '%s'", name);
    else if (st != QD_OK)
        qd_reply_store_error(r, st, &err);
    return st == QD_OK ? body : NULL;
}

/* A stats_model must name a model the statistics store knows; replies 422 (or the store's
 * error) and returns false otherwise. NULL (none) is fine. */
bool qd_stats_model_ok(qd_req *r, const char *model)
{
    if (!model) return true;
    qd_model_conf conf;
    qd_err err;
    qd_status st = qd_stats_model_conf(r->app->stats, model, &conf, &err);
    if (st == QD_NOT_FOUND)
        qd_reply_ec(r, QD_EC_UNKNOWN_STATS_MODEL, "stats_model",
                    "no statistics for a model named '%s'", model);
    else if (st != QD_OK)
        qd_reply_store_error(r, st, &err);
    return st == QD_OK;
}

qd_ec qd_plan_error_code(quant_ck_status st)
{
    switch (st) {
    case QUANT_CK_ERR_ACCESS:
    case QUANT_CK_ERR_IO:
        return QD_EC_BAD_SOURCE;
    case QUANT_CK_ERR_FORMAT:
        return QD_EC_BAD_CHECKPOINT;
    default:
        return QD_EC_INVALID_JOB; /* a rule the checkpoint or the layout cannot take */
    }
}

/* Plans the job (every shard header read, every tensor planned, nothing of the data read), then
 * queues it: a job that would fail before its first tensor is refused now with 422, naming the
 * file, tensor or rule. */
static enum MHD_Result queue_job(qd_req *r, qd_job *j)
{
    quant_ck_error ck;
    quant_plan *plan = NULL;
    quant_ck_status planned = qd_job_plan(r->app, j, false, &plan, &ck);
    if (planned == QUANT_CK_OK) planned = qd_srq_check(r->app, j->stats_model, j->rules, plan, &ck);
    if (planned != QUANT_CK_OK) quant_plan_free(plan);
    if (planned == QUANT_CK_ERR_NOMEM) return MHD_NO;
    if (planned != QUANT_CK_OK)
        return qd_reply_ec(r, qd_plan_error_code(planned), NULL, "%s", ck.message);
    j->unused_rules = qd_plan_unused_json(plan); /* the job says so (SPEC section 10) */
    quant_plan_free(plan);
    if (!j->unused_rules) return MHD_NO;
    qd_err err;
    qd_status st = qd_store_job_insert(r->app->store, j, &err);
    if (st != QD_OK) {
        free(j->unused_rules);
        j->unused_rules = NULL;
        return qd_reply_store_error(r, st, &err);
    }
    qd_jobs_wake(r->app->jobs);
    char loc[64];
    snprintf(loc, sizeof loc, "/v1/jobs/%lld", (long long)j->id);
    json_t *body = qd_job_json(r->app, j);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    free(j->unused_rules);
    j->unused_rules = NULL;
    return qd_reply_text(r, MHD_HTTP_ACCEPTED, text, "application/json", MHD_HTTP_HEADER_LOCATION,
                         loc);
}

bool qd_layout_ok(qd_req *r, const char *layout)
{
    quant_layout l;
    if (quant_layout_parse(layout, &l)) return true;
    qd_reply_ec(r, QD_EC_INVALID, "layout",
                "layout must be \"native\", \"compressed-tensors\" or \"gguf\", not \"%s\"",
                layout);
    return false;
}

/* ---- a shard as the body: the one-file case of a checkpoint job ---------------------------------
 *
 * Its length prefix and header are held in memory (at most HEADER_MAX bytes) until they are in,
 * then validated and planned as POST /v1/plans plans a header: a bad header, or a plan that
 * fails, is answered 4xx at the body's end and no job exists. Otherwise the job is created as a
 * checkpoint job listing the one file (receiving.c), the bytes held are written to it and the
 * rest of the body streams through the input writer of PUT /v1/jobs/{id}/inputs/{name}
 * (h_job_inputs.c): same accounting, same waits, same failure (a cut body fails the job naming
 * the file, its files removed). A worker quantizes it while it arrives; the answer comes once
 * the body has ended. */

#define SHARD_NAME "model.safetensors"          /* the input's name, and so its output's */
#define HEADER_MAX (8ull + QUANT_ST_MAX_HEADER) /* the most a length prefix and header take */

typedef struct shard_head {
    char *rules; /* resolved before the body */
    unsigned char *buf;
    size_t len;
    qd_ec ec;             /* why the header was refused (QD_EC_COUNT: it was not) */
    uint64_t over_budget; /* refused: max_body_memory could not hold this many bytes (503) */
    char msg[QUANT_CK_MESSAGE_MAX];
} shard_head;

static void head_end(qd_req *r)
{
    shard_head *h = r->sink;
    free(h->rules);
    free(h->buf);
    free(h);
    r->sink = NULL;
    r->sink_end = NULL;
}

/* The held header validated and planned (messages name it model.safetensors, as the job's
 * input and as POST /v1/plans do); the job's unused rules to *unused. False with h->ec and h->msg
 * set. */
static bool head_check(qd_req *r, shard_head *h, uint64_t *expect, char **unused)
{
    quant_ck_error ck;
    quant_st_file *f = NULL;
    quant_ruleset *rs = NULL;
    quant_plan *plan = NULL;
    int fd = memfd_create("shard-header", MFD_CLOEXEC);
    if (fd < 0 || write(fd, h->buf, h->len) != (ssize_t)h->len) {
        if (fd >= 0) close(fd);
        h->ec = QD_EC_INTERNAL;
        snprintf(h->msg, sizeof h->msg, "cannot hold the header: %s", strerror(errno));
        return false;
    }
    if (quant_st_open_header_fd(fd, SHARD_NAME, &f, &ck) != QUANT_CK_OK) { /* closes fd */
        h->ec = QD_EC_BAD_SAFETENSORS;
        snprintf(h->msg, sizeof h->msg, "%s", ck.message);
        return false;
    }
    uint64_t end = 0;
    for (size_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].end > end) end = f->tensors[i].end;
    *expect = f->data_start + end;
    quant_ck_status st = quant_ruleset_parse(h->rules, strlen(h->rules), "job rules", &rs, &ck);
    if (st == QUANT_CK_OK) {
        quant_pipeline_options o;
        quant_pipeline_options_init(&o);
        const char *layout = qd_req_query(r, "layout");
        if (layout) quant_layout_parse(layout, &o.layout);
        o.allow_static_acts = qd_req_query(r, "stats_model") != NULL;
        st = quant_plan_file(rs, f, &o, &plan, &ck);
    }
    if (st == QUANT_CK_OK)
        st = qd_srq_check(r->app, qd_req_query(r, "stats_model"), h->rules, plan, &ck);
    if (st == QUANT_CK_OK && !(*unused = qd_plan_unused_json(plan)))
        st = quant_ck_fail(&ck, QUANT_CK_ERR_NOMEM, "out of memory");
    quant_plan_free(plan);
    quant_ruleset_free(rs);
    quant_st_close(f);
    if (st == QUANT_CK_OK) return true;
    h->ec = st == QUANT_CK_ERR_NOMEM ? QD_EC_INTERNAL : qd_plan_error_code(st);
    snprintf(h->msg, sizeof h->msg, "%s", ck.message);
    return false;
}

static bool write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        c += k;
        n -= (size_t)k;
    }
    return true;
}

/* The header is in and good: the job, its file, the input writer; the bytes held written. */
static bool head_to_job(qd_req *r, shard_head *h, char *unused)
{
    const char *name = SHARD_NAME;
    qd_job j = {.ruleset = (char *)qd_req_query(r, "ruleset"),
                .rules = h->rules,
                .layout =
                    (char *)(qd_req_query(r, "layout") ? qd_req_query(r, "layout") : "native"),
                .stats_model = (char *)qd_req_query(r, "stats_model"),
                .unused_rules = unused};
    qd_err err;
    qd_status st = qd_receiving_create(r->app, &j, &name, 1, true, &err);
    free(unused);
    if (st != QD_OK) { /* err names server paths: logged, not answered */
        qd_log(QD_LOG_ERROR, "creating an upload job failed", "error", err.message, NULL);
        h->ec = QD_EC_INTERNAL;
        snprintf(h->msg, sizeof h->msg, "cannot create the job's files");
        return false;
    }
    size_t idx = 0;
    qd_job_inputs *ji = qd_inputs_get(r->app->inputs, j.id);
    if (!ji || qd_inputs_begin(ji, name, &idx, &err) != QD_OK) {
        qd_inputs_release(ji);
        free(j.source_path);
        h->ec = QD_EC_INTERNAL;
        snprintf(h->msg, sizeof h->msg, "job %lld lost its inputs", (long long)j.id);
        qd_receiving_fail(r->app, j.id, QD_JOB_FAILED, h->msg);
        return false;
    }
    unsigned char *held = h->buf;
    size_t n = h->len;
    h->buf = NULL;
    head_end(r); /* the input writer takes the request over */
    qd_budget_release(r);
    r->sink_take = NULL;
    bool ok = qd_input_sink_attach(r, j.id, ji, idx, SHARD_NAME, j.source_path);
    if (ok && !write_all(r->upload_fd, held, n)) r->upload_failed = true;
    free(held);
    return ok;
}

/* r->sink_take while the header arrives: bytes held until the length prefix and the header it
 * announces are in (or HEADER_MAX), then checked; from a good header on, the job's file. */
static bool head_take(qd_req *r, const char *data, size_t n)
{
    shard_head *h = r->sink;
    if (!qd_budget_take(r, n)) { /* the header is held in memory: max_body_memory counts it */
        h->over_budget = h->len + n;
        return false;
    }
    unsigned char *b = realloc(h->buf, h->len + n);
    if (!b) {
        h->ec = QD_EC_INTERNAL;
        snprintf(h->msg, sizeof h->msg, "out of memory");
        return false;
    }
    h->buf = b;
    memcpy(h->buf + h->len, data, n); /* all of it: what is past the header is data to write */
    h->len += n;
    uint64_t hn = 0;
    if (h->len < 8) return true;
    memcpy(&hn, h->buf, 8);
    hn = le64toh(hn);
    if (hn <= QUANT_ST_MAX_HEADER && h->len < 8 + hn) return true; /* not in yet */
    uint64_t expect = 0;
    char *unused = NULL;
    size_t held = h->len;
    if (hn <= QUANT_ST_MAX_HEADER) h->len = (size_t)(8 + hn); /* the header alone is checked */
    bool good = head_check(r, h, &expect, &unused);
    h->len = held;
    if (!good) return false;
    const char *cl = qd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (expect > r->limit) { /* a chunked body: its header tells */
        free(unused);
        h->ec = QD_EC_TOO_LARGE;
        snprintf(h->msg, sizeof h->msg,
                 SHARD_NAME ": its header implies %llu bytes, over this route's limit of %zu "
                            "bytes (max_upload)",
                 (unsigned long long)expect, r->limit);
        return false;
    }
    if (cl && strtoull(cl, NULL, 10) != expect) {
        free(unused);
        h->ec = QD_EC_LENGTH_MISMATCH;
        snprintf(h->msg, sizeof h->msg,
                 SHARD_NAME ": Content-Length is %s bytes; its header implies %llu", cl,
                 (unsigned long long)expect);
        return false;
    }
    return head_to_job(r, h, unused);
}

/* POST /v1/jobs?ruleset=, before the body: the header is to be held (the query was checked). */
static bool head_begin(qd_req *r)
{
    shard_head *h = calloc(1, sizeof *h);
    if (!h) return false;
    h->ec = QD_EC_COUNT;
    h->rules = qd_job_rules(r, qd_req_query(r, "ruleset"), NULL);
    if (!h->rules) {
        free(h);
        return false;
    }
    r->sink = h;
    r->sink_end = head_end;
    r->sink_take = head_take;
    return true;
}

/* The body ended while the header was still held (short, empty, or refused): no job. */
static enum MHD_Result head_answer(qd_req *r)
{
    shard_head *h = r->sink;
    if (h->over_budget) return qd_reply_budget(r, h->over_budget);
    if (h->ec == QD_EC_COUNT && h->len == 0)
        return qd_reply_ec(r, QD_EC_EMPTY_BODY, NULL, "the upload is empty");
    uint64_t expect;
    char *unused = NULL;
    if (h->ec == QD_EC_COUNT && head_check(r, h, &expect, &unused)) { /* whole body: header only */
        free(unused);
        h->ec = QD_EC_BAD_SAFETENSORS;
        snprintf(h->msg, sizeof h->msg,
                 SHARD_NAME ": file is truncated (its header implies %llu bytes, the body "
                            "has %zu)",
                 (unsigned long long)expect, h->len);
    }
    if (h->ec == QD_EC_TOO_LARGE) return qd_reply_ec_limit(r, h->ec, "max_upload", 0, "%s", h->msg);
    return qd_reply_ec(r, h->ec, NULL, "%s", h->msg);
}

static enum MHD_Result create_from_upload(qd_req *r)
{
    if (r->sink_take) return head_answer(r);
    enum MHD_Result ret;
    if (!qd_input_sink_finish(r, &ret)) return ret;
    qd_job j;
    qd_err err;
    int64_t id = qd_input_sink_job(r);
    qd_status st = qd_store_job_get(r->app->store, id, &j, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    char loc[64];
    snprintf(loc, sizeof loc, "/v1/jobs/%lld", (long long)id);
    json_t *body = qd_job_json(r->app, &j);
    qd_job_clear(&j);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return qd_reply_text(r, MHD_HTTP_ACCEPTED, text, "application/json", MHD_HTTP_HEADER_LOCATION,
                         loc);
}

/* ---- limits checked before a job's body is read -----------------------------------------------
 */

/* Replies 429 when max_queued_jobs jobs wait already. */
static bool queue_has_room(qd_req *r)
{
    int cap = r->app->cfg->max_queued_jobs;
    int64_t counts[QD_JOB_STATE_COUNT];
    qd_err err;
    if (cap == 0) return true;
    if (qd_store_job_counts(r->app->store, counts, &err) != QD_OK) {
        qd_reply_store_error(r, QD_DB, &err);
        return false;
    }
    int64_t waiting = counts[QD_JOB_QUEUED] + counts[QD_JOB_RECEIVING];
    if (waiting < cap) return true;
    qd_reply_ec_limit(r, QD_EC_QUEUE_FULL, "max_queued_jobs", 30,
                      "%lld jobs are queued or receiving their files, the most this server takes "
                      "(max_queued_jobs = %d); retry once some have run",
                      (long long)waiting, cap);
    return false;
}

/* POST /v1/jobs, before the body: what the query (an upload) or the headers already tell --
 * layout, stats_model and rule set (an upload names them in the query), the queue's room and
 * the data directory's -- so a job that cannot be accepted never costs its body. */
qd_payload qd_shard_or_json(qd_req *r, const char *takes)
{
    const char *ct = qd_req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (ct && strncmp(ct, "application/octet-stream", 24) == 0) return QD_PAYLOAD_SHARD;
    if (ct && strncmp(ct, "application/json", 16) == 0) return QD_PAYLOAD_JSON;
    qd_reply_ec(r, QD_EC_UNSUPPORTED_MEDIA_TYPE, NULL, "%s %s takes %s; the Content-Type was %s",
                r->method, r->route->pattern, takes, ct ? ct : "missing");
    return QD_PAYLOAD_REPLIED;
}

bool qd_upload_layout_ok(qd_req *r, const char *layout)
{
    if (!qd_layout_ok(r, layout)) return false;
    if (strcmp(layout, "gguf") != 0) return true;
    qd_reply_ec(r, QD_EC_INVALID_JOB, "layout",
                "the gguf layout reads a GGUF file named by a server-side source (\"source\": "
                "{\"path\": ...}); uploads take the native or compressed-tensors layout");
    return false;
}

bool qd_shard_query_ok(qd_req *r, enum MHD_Result *ret)
{
    *ret = MHD_YES;
    const char *layout = qd_req_query(r, "layout") ? qd_req_query(r, "layout") : "native";
    if (!qd_upload_layout_ok(r, layout) || !qd_stats_model_ok(r, qd_req_query(r, "stats_model")))
        return false;
    char *rules = qd_job_rules(r, qd_req_query(r, "ruleset"), NULL);
    free(rules);
    if (!rules) *ret = r->replied ? MHD_YES : MHD_NO;
    return rules != NULL;
}

enum MHD_Result qd_h_job_precheck(qd_req *r)
{
    qd_payload kind =
        qd_shard_or_json(r, "a shard as application/octet-stream (curl -X POST -H 'Content-Type: "
                            "application/octet-stream' -T FILE 'URL?ruleset=NAME'), or a job on a "
                            "server-side checkpoint as application/json");
    if (kind == QD_PAYLOAD_REPLIED || !queue_has_room(r)) return MHD_YES;
    if (kind == QD_PAYLOAD_JSON) return qd_limit_disk(r, 0), MHD_YES; /* a path job: later */
    enum MHD_Result ret;
    if (!qd_shard_query_ok(r, &ret)) return ret;
    const char *cl = qd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;
    if (!qd_limit_disk(r, n)) return MHD_YES;
    return head_begin(r) ? MHD_YES : r->replied ? MHD_YES : MHD_NO;
}

static const char *const job_fields[] = {
    "ruleset", "rules", "source", "layout", "stats_model", "files", "allow_nothing_quantized",
    NULL};

static bool known_field(const char *key)
{
    for (int i = 0; job_fields[i]; i++)
        if (strcmp(key, job_fields[i]) == 0) return true;
    return false;
}

/* source.path: an absolute path of plain components under a source root (403 otherwise, the
 * same answer whether it exists or not: the text alone decides), then opened below the root one
 * component at a time without following a link (422 naming the component that is missing, a
 * link or not a file or directory). Returns the normalized path; replies on error. */
static char *source_path(qd_req *r, json_t *source)
{
    const qd_config *cfg = r->app->cfg;
    json_t *jp = json_object_get(source, "path");
    const char *path = json_string_value(jp);
    if (!json_is_object(source) || !path || json_object_size(source) != 1 ||
        strlen(path) != json_string_length(jp)) {
        qd_reply_ec(r, QD_EC_INVALID, "source", "source must be {\"path\": FILE_OR_DIR}");
        return NULL;
    }
    int dir_fd = -1;
    char *rel = NULL, *norm = NULL;
    qd_err err;
    qd_status st =
        qd_source_locate(path, cfg->source_roots, cfg->n_source_roots, &dir_fd, &rel, &norm, &err);
    if (st != QD_OK) {
        qd_reply_ec(r, st == QD_NOMEM ? QD_EC_INTERNAL : QD_EC_FORBIDDEN, "source.path", "%s",
                    err.message);
        return NULL;
    }
    quant_ck_error ck;
    int fd = quant_open_beneath(dir_fd, rel, O_RDONLY, &ck);
    close(dir_fd);
    free(rel);
    if (fd < 0) {
        free(norm);
        qd_reply_ec(r, QD_EC_BAD_SOURCE, "source.path", "%s", ck.message);
        return NULL;
    }
    close(fd);
    return norm;
}

/* The job's "allow_nothing_quantized": true, set in its rule text (*rules replaced); false when
 * out of memory (*rules freed). */
static bool allow_nothing(char **rules)
{
    json_t *doc = json_loads(*rules, 0, NULL);
    char *text = doc && json_object_set_new(doc, "allow_nothing_quantized", json_true()) == 0
                     ? json_dumps(doc, JSON_COMPACT)
                     : NULL;
    json_decref(doc);
    free(*rules);
    *rules = text;
    return text != NULL;
}

bool qd_job_fields_json(qd_req *r, json_t *doc, qd_job *j)
{
    *j = (qd_job){.source_kind = "path"};
    const char *key;
    json_t *v;
    json_object_foreach(doc, key, v) if (!known_field(key))
    {
        qd_reply_ec(r, QD_EC_INVALID, key, "unknown field '%s'", key);
        return false;
    }
    json_t *name = json_object_get(doc, "ruleset"), *layout = json_object_get(doc, "layout");
    json_t *stats_model = json_object_get(doc, "stats_model");
    if (json_is_null(stats_model)) stats_model = NULL;
    const char *not_string = name && !json_is_string(name)                 ? "ruleset"
                             : layout && !json_is_string(layout)           ? "layout"
                             : stats_model && !json_is_string(stats_model) ? "stats_model"
                                                                           : NULL;
    if (not_string) {
        qd_reply_ec(r, QD_EC_INVALID, not_string, "must be a string");
        return false;
    }
    json_t *allow = json_object_get(doc, "allow_nothing_quantized");
    if (allow && !json_is_boolean(allow)) {
        qd_reply_ec(r, QD_EC_INVALID, "allow_nothing_quantized", "must be true or false");
        return false;
    }
    j->ruleset = (char *)json_string_value(name);
    j->layout = (char *)(layout ? json_string_value(layout) : "native");
    j->stats_model = (char *)json_string_value(stats_model);
    if (!qd_layout_ok(r, j->layout) || !qd_stats_model_ok(r, j->stats_model)) return false;
    j->rules = qd_job_rules(r, j->ruleset, json_object_get(doc, "rules"));
    if (j->rules && json_is_true(allow) && !allow_nothing(&j->rules)) return false;
    return j->rules != NULL;
}

bool qd_job_from_json(qd_req *r, json_t *doc, qd_job *j)
{
    if (json_object_get(doc, "files")) {
        *j = (qd_job){.source_kind = "path"};
        qd_reply_ec(r, QD_EC_INVALID, "files",
                    "files name the files of a checkpoint job created by POST /v1/jobs; a job on "
                    "a server-side source takes none");
        return false;
    }
    if (!qd_job_fields_json(r, doc, j)) return false;
    if ((j->source_path = source_path(r, json_object_get(doc, "source")))) return true;
    free(j->rules);
    j->rules = NULL;
    return false;
}

static enum MHD_Result create_from_json(qd_req *r)
{
    json_t *doc = qd_req_json(r);
    if (!doc) return MHD_YES;
    if (json_object_get(doc, "files") && !json_object_get(doc, "source")) {
        enum MHD_Result ret = qd_job_create_receiving(r, doc);
        json_decref(doc);
        return ret;
    }
    qd_job j;
    enum MHD_Result ret = MHD_YES;
    if (qd_job_from_json(r, doc, &j)) ret = queue_job(r, &j);
    free(j.rules);
    free(j.source_path);
    json_decref(doc); /* after the reply: the job's strings live in doc */
    return r->replied ? MHD_YES : ret;
}

enum MHD_Result qd_h_job_create(qd_req *r)
{
    return r->streaming ? create_from_upload(r) : create_from_json(r);
}

/* ---- reading, listing, cancelling, deleting ---------------------------------------------------
 */

/* The one reading of a job's {id}: 1 to 18 decimal digits, nothing else (no sign, no blanks,
 * no leading zero), so /v1/jobs/+1, /v1/jobs/01 and /v1/jobs/1/report agree on what exists. */
bool qd_job_id_param(qd_req *r, int64_t *id)
{
    const char *s = r->params[0];
    size_t n = strlen(s);
    if (n == 0 || n > 18 || s[0] == '0' || strspn(s, "0123456789") != n) {
        qd_reply_ec(r, QD_EC_NOT_FOUND, NULL, "no job %s", s);
        return false;
    }
    *id = strtoll(s, NULL, 10);
    return true;
}

enum MHD_Result qd_h_job_get(qd_req *r)
{
    int64_t id;
    if (!qd_job_id_param(r, &id)) return MHD_YES;
    qd_job j;
    qd_err err;
    qd_status st = qd_store_job_get(r->app->store, id, &j, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    json_t *out = qd_job_json(r->app, &j);
    qd_job_clear(&j);
    return qd_reply_json(r, MHD_HTTP_OK, out);
}

static bool query_int(qd_req *r, const char *name, long long lo, long long hi, long long *v)
{
    const char *s = qd_req_query(r, name);
    if (!s) return true;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end || !*s || x < lo || x > hi) {
        qd_reply_ec(r, QD_EC_INVALID, name, "%s must be an integer in %lld..%lld", name, lo, hi);
        return false;
    }
    *v = x;
    return true;
}

enum MHD_Result qd_h_job_list(qd_req *r)
{
    long long after = 0, limit = 100;
    qd_job_state state = QD_JOB_STATE_COUNT;
    const char *s = qd_req_query(r, "state");
    if (s && !qd_job_state_parse(s, &state))
        return qd_reply_ec(
            r, QD_EC_INVALID, "state",
            "state must be receiving, queued, running, succeeded, failed or cancelled");
    if (!query_int(r, "after", 0, INT64_MAX, &after) || !query_int(r, "limit", 1, 1000, &limit))
        return MHD_YES;
    qd_job *jobs = NULL;
    size_t n = 0;
    qd_err err;
    qd_status st =
        qd_store_job_list(r->app->store, s ? (int)state : -1, after, (int)limit, &jobs, &n, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(list, qd_job_json(r->app, &jobs[i]));
        qd_job_clear(&jobs[i]);
    }
    json_t *next = n == (size_t)limit ? json_integer(jobs[n - 1].id) : json_null();
    free(jobs);
    return qd_reply_json(r, MHD_HTTP_OK, json_pack("{s:o,s:o}", "jobs", list, "next_after", next));
}

enum MHD_Result qd_h_job_delete(qd_req *r)
{
    int64_t id;
    if (!qd_job_id_param(r, &id)) return MHD_YES;
    bool running = false;
    qd_err err;
    qd_job_inputs *ji = qd_inputs_get(r->app->inputs, id);
    qd_inputs_release(ji);
    /* running: told to stop before its inputs fail (so its run ends cancelled, not failed) */
    qd_status st = qd_jobs_cancel(r->app->jobs, id, &running, &err);
    if (ji) { /* still receiving files: its uploads stop; not yet running: its files go */
        qd_receiving_fail(r->app, id, QD_JOB_CANCELLED, "cancelled");
        if (st == QD_CONFLICT) st = QD_OK;
    }
    if (st == QD_OK) {
        qd_job j;
        if (qd_store_job_get(r->app->store, id, &j, &err) != QD_OK)
            return qd_reply_store_error(r, QD_DB, &err);
        json_t *out = qd_job_json(r->app, &j);
        json_object_set_new(out, "cancel_requested", json_true());
        qd_job_clear(&j);
        return qd_reply_json(r, running ? MHD_HTTP_ACCEPTED : MHD_HTTP_OK, out);
    }
    if (st != QD_CONFLICT) return qd_reply_store_error(r, st, &err);
    qd_job j; /* finished: delete the row, then the files */
    st = qd_store_job_get(r->app->store, id, &j, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    st = qd_store_job_delete(r->app->store, id, &err);
    if (st != QD_OK) {
        qd_job_clear(&j);
        return qd_reply_store_error(r, st, &err);
    }
    char *dir = qd_app_job_dir(r->app, id);
    if (dir) qd_rmtree(dir, &err);
    if (strcmp(j.source_kind, "upload") == 0) qd_remove_upload(j.source_path);
    free(dir);
    qd_job_clear(&j);
    return qd_reply_empty(r, MHD_HTTP_NO_CONTENT);
}
