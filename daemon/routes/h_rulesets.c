/* h_rulesets.c -- PUT/GET/DELETE /v1/rulesets/{name} and GET /v1/rulesets. A rule set is
 * validated exactly as the pipeline will read it (quant_ruleset_parse) before it is stored.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "quant_rules.h"
#include "timefmt.h"

static enum MHD_Result bad_name(qd_req *r)
{
    return qd_reply_ec(r, QD_EC_INVALID, "name",
                       "rule set names are 1-64 characters of A-Z a-z 0-9 . _ - "
                       "(not starting with '.')");
}

char *qd_rules_validate(qd_req *r, json_t *doc, const char *field)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    if (!text) return NULL;
    quant_ruleset *rs = NULL;
    quant_ck_error ck;
    if (quant_ruleset_parse(text, strlen(text), field, &rs, &ck) != QUANT_CK_OK) {
        qd_reply_ec(r, QD_EC_INVALID_RULES, field, "%s", ck.message);
        free(text);
        return NULL;
    }
    quant_ruleset_free(rs);
    return text;
}

static json_t *ruleset_json(const char *name, const char *body, int64_t created, int64_t updated)
{
    json_t *doc = json_loads(body, 0, NULL);
    json_t *rules = json_incref(json_object_get(doc, "rules"));
    json_t *mix = json_incref(json_object_get(doc, "gguf_mix"));
    bool allow = json_is_true(json_object_get(doc, "allow_nothing_quantized"));
    json_decref(doc);
    char c[QD_TIME_LEN], u[QD_TIME_LEN];
    json_t *out =
        json_pack("{s:s,s:o,s:b,s:s,s:s}", "name", name, "rules", rules ? rules : json_array(),
                  "allow_nothing_quantized", allow, "created_at", qd_iso8601(created, c),
                  "updated_at", qd_iso8601(updated, u));
    if (out && mix) json_object_set(out, "gguf_mix", mix);
    json_decref(mix);
    return out;
}

enum MHD_Result qd_h_ruleset_put(qd_req *r)
{
    const char *name = r->params[0];
    if (!qd_valid_name(name)) return bad_name(r);
    json_t *doc = qd_req_json(r);
    if (!doc) return MHD_YES;
    const char *key;
    json_t *v;
    json_object_foreach(doc, key, v) if (strcmp(key, "rules") != 0 &&
                                         strcmp(key, "allow_nothing_quantized") != 0 &&
                                         strcmp(key, "gguf_mix") != 0)
    {
        enum MHD_Result ret = qd_reply_ec(r, QD_EC_INVALID, key,
                                          "unknown field '%s' (a rule set body is {\"rules\": "
                                          "[...]}, with \"allow_nothing_quantized\" and, for the "
                                          "gguf layout, \"gguf_mix\" beside it)",
                                          key);
        json_decref(doc); /* after the reply: key lives in doc */
        return ret;
    }
    if (!json_is_array(json_object_get(doc, "rules"))) {
        json_decref(doc);
        return qd_reply_ec(r, QD_EC_INVALID, "rules", "body must be {\"rules\": [...]}");
    }
    char *text = qd_rules_validate(r, doc, "rules");
    json_decref(doc);
    if (!text) return r->replied ? MHD_YES : MHD_NO;
    bool created = false;
    qd_err err;
    qd_status st = qd_store_ruleset_put(r->app->store, name, text, &created, &err);
    int64_t c = 0, u = 0;
    char *body = NULL;
    if (st == QD_OK) st = qd_store_ruleset_get(r->app->store, name, &body, &c, &u, &err);
    free(text);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    json_t *out = ruleset_json(name, body, c, u);
    free(body);
    return qd_reply_json(r, created ? MHD_HTTP_CREATED : MHD_HTTP_OK, out);
}

enum MHD_Result qd_h_ruleset_get(qd_req *r)
{
    const char *name = r->params[0];
    if (!qd_valid_name(name)) return bad_name(r);
    char *body = NULL;
    int64_t c = 0, u = 0;
    qd_err err;
    qd_status st = qd_store_ruleset_get(r->app->store, name, &body, &c, &u, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    json_t *out = ruleset_json(name, body, c, u);
    free(body);
    return qd_reply_json(r, MHD_HTTP_OK, out);
}

enum MHD_Result qd_h_ruleset_list(qd_req *r)
{
    json_t *list = NULL;
    qd_err err;
    qd_status st = qd_store_ruleset_list(r->app->store, &list, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    return qd_reply_json(r, MHD_HTTP_OK, json_pack("{s:o}", "rulesets", list));
}

enum MHD_Result qd_h_ruleset_delete(qd_req *r)
{
    const char *name = r->params[0];
    if (!qd_valid_name(name)) return bad_name(r);
    qd_err err;
    qd_status st = qd_store_ruleset_delete(r->app->store, name, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    return qd_reply_empty(r, MHD_HTTP_NO_CONTENT);
}
