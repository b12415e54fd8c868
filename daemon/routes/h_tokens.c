/* h_tokens.c -- /v1/tokens for operators: GET lists the tokens (never a secret), POST issues one
 * (its text is in that answer only), DELETE /v1/tokens/{name} revokes one at once. `quantd
 * token` (cmd_token.c) does the same on the server's database.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _DEFAULT_SOURCE /* explicit_bzero */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "handlers.h"
#include "timefmt.h"
#include "tokens.h"

json_t *qd_token_json(const qd_token_info *t, int64_t now_ms)
{
    char created[QD_TIME_LEN], expires[QD_TIME_LEN];
    qd_iso8601(t->created_ms, created);
    if (t->expires_ms) qd_iso8601(t->expires_ms, expires);
    return json_pack("{s:s,s:s,s:s,s:o,s:b}", "name", t->name, "role", qd_role_name(t->role),
                     "created_at", created, "expires_at",
                     t->expires_ms ? json_string(expires) : json_null(), "expired",
                     t->expires_ms != 0 && now_ms >= t->expires_ms);
}

/* GET /v1/tokens */
enum MHD_Result qd_h_token_list(qd_req *r)
{
    qd_token_info *list = NULL;
    size_t n = 0;
    qd_err err;
    qd_status st = qd_tokens_list(r->app->tokens, &list, &n, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    json_t *arr = json_array();
    int64_t now = qd_now_ms();
    for (size_t i = 0; arr && i < n; i++) json_array_append_new(arr, qd_token_json(&list[i], now));
    free(list);
    return qd_reply_json(r, MHD_HTTP_OK, json_pack("{s:o}", "tokens", arr));
}

/* The fields of a POST body; replies 400 and returns false when one is wrong. */
static bool token_fields(qd_req *r, json_t *doc, const char **name, qd_role *role, int64_t *days)
{
    const char *key;
    json_t *v;
    json_object_foreach(doc, key, v)
    {
        if (strcmp(key, "name") != 0 && strcmp(key, "role") != 0 &&
            strcmp(key, "expires_days") != 0) {
            qd_reply_ec(r, QD_EC_INVALID, key,
                        "unknown field '%s' (known: name, role, expires_days)", key);
            return false;
        }
    }
    json_t *jd = json_object_get(doc, "expires_days");
    *name = json_string_value(json_object_get(doc, "name"));
    *days = json_is_integer(jd) ? json_integer_value(jd) : 0;
    const char *bad = !*name ? "name"
                      : !qd_role_parse(json_string_value(json_object_get(doc, "role")), role)
                          ? "role"
                      : jd && !json_is_null(jd) &&
                              (!json_is_integer(jd) || *days < 1 || *days > QD_TOKEN_MAX_DAYS)
                          ? "expires_days"
                          : NULL;
    if (bad)
        qd_reply_ec(r, QD_EC_INVALID, bad,
                    "a token needs {\"name\": NAME, \"role\": \"trainer\", \"reader\" or "
                    "\"operator\"} and may have \"expires_days\": 1..%d",
                    QD_TOKEN_MAX_DAYS);
    return bad == NULL;
}

/* POST /v1/tokens {"name", "role", "expires_days"?}: 201 with the token, shown this once. */
enum MHD_Result qd_h_token_create(qd_req *r)
{
    json_t *doc = qd_req_json(r);
    if (!doc) return MHD_YES;
    const char *name;
    qd_role role;
    int64_t days;
    enum MHD_Result ret = MHD_YES;
    if (token_fields(r, doc, &name, &role, &days)) {
        char token[QD_TOKEN_LEN + 1];
        qd_token_info info;
        qd_err err;
        qd_status st = qd_tokens_create(r->app->tokens, name, role, days, token, &info, &err);
        if (st == QD_OK) {
            qd_auth_tokens_seen(r->app, true);
            json_t *out = qd_token_json(&info, qd_now_ms());
            json_object_set_new(out, "token", json_string(token));
            explicit_bzero(token, sizeof token);
            char loc[96];
            snprintf(loc, sizeof loc, "/v1/tokens/%s", info.name);
            char *text = json_dumps(out, JSON_COMPACT);
            json_decref(out);
            ret = qd_reply_text(r, MHD_HTTP_CREATED, text, "application/json",
                                MHD_HTTP_HEADER_LOCATION, loc);
        } else if (st == QD_INVALID) {
            ret = qd_reply_ec(r, QD_EC_INVALID, "name", "%s", err.message);
        } else {
            ret = qd_reply_store_error(r, st, &err);
        }
    }
    json_decref(doc);
    return ret;
}

/* DELETE /v1/tokens/{name}: the token stops working with the next request. */
enum MHD_Result qd_h_token_delete(qd_req *r)
{
    qd_err err;
    qd_status st = qd_tokens_revoke(r->app->tokens, r->params[0], &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    return qd_reply_empty(r, MHD_HTTP_NO_CONTENT);
}
