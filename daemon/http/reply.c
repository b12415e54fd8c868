/* reply.c -- the replies handlers send (JSON, errors in the API's one shape, empty) and the
 * request accessors (headers, query arguments, the JSON body).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "http.h"
#include "log.h"
#include "quant_ckpt.h"
#include "router.h"

enum MHD_Result qd_reply(qd_req *r, unsigned status, struct MHD_Response *resp)
{
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "X-Request-Id", r->id);
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->status = status;
    r->replied = true;
    return ret;
}

enum MHD_Result qd_reply_empty(qd_req *r, unsigned status)
{
    return qd_reply(r, status, MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT));
}

/* What a reply that could not be built says (out of memory, or JSON that would not encode). */
static const char unbuilt[] =
    "{\"error\":{\"code\":\"internal\",\"message\":\"the reply could not be built\","
    "\"field\":null}}";

enum MHD_Result qd_reply_text(qd_req *r, unsigned status, char *text, const char *content_type,
                              const char *name, const char *value)
{
    if (!text) { /* still an answer: a request left without one is called again, for good */
        qd_log(QD_LOG_ERROR, "a reply could not be built", "request_id", r->id, NULL);
        struct MHD_Response *resp = MHD_create_response_from_buffer(
            sizeof unbuilt - 1, (void *)unbuilt, MHD_RESPMEM_PERSISTENT);
        if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        return qd_reply(r, MHD_HTTP_INTERNAL_SERVER_ERROR, resp);
    }
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (name) MHD_add_response_header(resp, name, value);
    return qd_reply(r, status, resp);
}

enum MHD_Result qd_reply_json(qd_req *r, unsigned status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return qd_reply_text(r, status, text, "application/json", NULL, NULL);
}

/* Bytes of s that are not well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
 * above U+10FFFF) become '?': messages quote what clients sent (a header, a query argument),
 * and JSON holds only UTF-8. */
static void utf8_clean(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        size_t n = *p < 0x80                  ? 1
                   : *p >= 0xc2 && *p <= 0xdf ? 2
                   : *p >= 0xe0 && *p <= 0xef ? 3
                   : *p >= 0xf0 && *p <= 0xf4 ? 4
                                              : 0;
        bool ok = n > 0;
        for (size_t i = 1; ok && i < n; i++) ok = (p[i] & 0xc0) == 0x80;
        if (ok && n == 3) /* overlong (E0 80..9F) and surrogates (ED A0..BF) */
            ok = !(p[0] == 0xe0 && p[1] < 0xa0) && !(p[0] == 0xed && p[1] >= 0xa0);
        if (ok && n == 4) /* overlong (F0 80..8F) and above U+10FFFF (F4 90..) */
            ok = !(p[0] == 0xf0 && p[1] < 0x90) && !(p[0] == 0xf4 && p[1] >= 0x90);
        if (!ok) {
            *p++ = '?';
            continue;
        }
        p += n;
    }
}

/* A safety net under every error message: no path of quantd's data directory reaches a client
 * ("/srv/var/tmp/upload-x1: fsync: ..." -> "upload-x1: fsync: ..."). */
static void scrub(const qd_app *app, char *msg, size_t len)
{
    const char *paths[] = {app->uploads_dir, app->jobs_dir, app->tmp_dir, app->cfg->data_dir,
                           app->cfg->db_path};
    char clean[1024];
    qd_scrub_paths(msg, paths, sizeof paths / sizeof paths[0], clean, sizeof clean);
    snprintf(msg, len, "%s", clean);
}

enum MHD_Result qd_reply_ec(qd_req *r, qd_ec ec, const char *field, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    scrub(r->app, msg, sizeof msg);
    utf8_clean(msg);
    const qd_ec_info *e = qd_ec_get(ec);
    json_t *body = json_pack("{s:{s:s,s:s,s:o}}", "error", "code", e->word, "message", msg, "field",
                             field ? json_string(field) : json_null());
    return qd_reply_json(r, e->status, body);
}

enum MHD_Result qd_reply_ec_limit(qd_req *r, qd_ec ec, const char *limit, unsigned retry_after,
                                  const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    utf8_clean(msg);
    qd_metrics_limit(r->app->metrics, limit, 1);
    r->limit_hit = limit;
    const qd_ec_info *e = qd_ec_get(ec);
    json_t *body = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "code", e->word, "message", msg,
                             "field", "limit", limit);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    char after[16];
    snprintf(after, sizeof after, "%u", retry_after);
    return qd_reply_text(r, e->status, text, "application/json",
                         retry_after ? MHD_HTTP_HEADER_RETRY_AFTER : NULL, after);
}

enum MHD_Result qd_reply_store_error(qd_req *r, qd_status st, const qd_err *err)
{
    return qd_reply_ec(r, qd_ec_of_status(st), NULL, "%s", err->message);
}

bool qd_valid_name(const char *s)
{
    size_t n = strlen(s);
    bool ok = n > 0 && n <= 64 && s[0] != '.';
    for (size_t i = 0; ok && i < n; i++)
        ok = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", s[i]);
    return ok;
}

const char *qd_req_header(const qd_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *qd_req_query(const qd_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

/* What a route's body looks like, for a client that sent a bare list. */
static const char *object_hint(const qd_req *r)
{
    static const struct {
        const char *prefix, *hint;
    } hints[] = {
        {"/v1/rulesets/", ", not a list: a rule set is {\"rules\": [...]} (wrap the list)"},
        {"/v1/jobs", ", not a list: a job is {\"ruleset\": NAME or \"rules\": [...], "
                     "\"source\": {\"path\": ...}}"},
    };
    for (size_t i = 0; r->route && i < sizeof hints / sizeof hints[0]; i++)
        if (strncmp(r->route->pattern, hints[i].prefix, strlen(hints[i].prefix)) == 0)
            return hints[i].hint;
    return ", not a list";
}

json_t *qd_req_json(qd_req *r)
{
    const char *ct = qd_req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (ct && strncmp(ct, "application/json", 16) != 0) {
        qd_reply_ec(r, QD_EC_UNSUPPORTED_MEDIA_TYPE, NULL,
                    "the body must be application/json, not %s", ct);
        return NULL;
    }
    json_error_t je;
    json_t *doc = json_loadb(r->body ? r->body : "", r->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!doc) {
        char why[256];
        qd_reply_ec(
            r, QD_EC_BAD_JSON, NULL, "body is not JSON: %s (line %d)",
            quant_json_error_text(r->body, r->body_len, je.position, je.text, why, sizeof why),
            je.line);
        return NULL;
    }
    if (!json_is_object(doc)) {
        bool list = json_is_array(doc);
        json_decref(doc);
        qd_reply_ec(r, QD_EC_BAD_JSON, NULL, "body must be a JSON object%s",
                    list ? object_hint(r) : "");
        return NULL;
    }
    return doc;
}
