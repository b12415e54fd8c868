/* auth.c -- who may call what, decided from the headers before anything else of a request is
 * looked at: the route's roles (router.c), the bearer token (tokens.h) and the server's mode.
 * With no token in the database a server on loopback (or started --insecure) is open to all;
 * once one exists every route but /healthz, /readyz (and /metrics when metrics_auth is open)
 * needs a valid token of an allowed role: 401 without one or with a bad or expired one, 403
 * for a role the route does not take. The change from open to tokens (and back, when the last
 * token is revoked) is logged once, as the requests or a token's creation see it.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <strings.h>

#include "auth.h"
#include "log.h"
#include "router.h"
#include "timefmt.h"

/* 401 with WWW-Authenticate (RFC 6750); error="invalid_token" when a token was presented. */
static bool unauthorized(qd_req *r, bool presented, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool unauthorized(qd_req *r, bool presented, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:{s:s,s:s,s:s}}", "error", "code", qd_ec_get(QD_EC_UNAUTHORIZED)->word,
                          "message", msg, "field", "Authorization");
    char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    qd_reply_text(r, qd_ec_get(QD_EC_UNAUTHORIZED)->status, text, "application/json",
                  MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                  presented ? "Bearer realm=\"quantd\", error=\"invalid_token\""
                            : "Bearer realm=\"quantd\"");
    return false;
}

/* The token of "Bearer TOKEN" (the scheme in any case, then spaces), or NULL. */
static const char *bearer(const char *h)
{
    if (strncasecmp(h, "Bearer ", 7) != 0) return NULL;
    h += 7;
    while (*h == ' ') h++;
    return *h ? h : NULL;
}

const char *qd_auth_mode(const qd_app *app, bool any)
{
    if (any || !app->open_without_tokens) return "tokens";
    return app->cfg->insecure ? "insecure" : "open";
}

void qd_auth_tokens_seen(qd_app *app, bool any)
{
    if (!app->open_without_tokens) return;
    if (any && atomic_exchange(&app->open_now, false))
        qd_log(QD_LOG_INFO, "open mode ended: an access token exists", "auth", "tokens", "detail",
               "every request but /healthz and /readyz now needs a token", NULL);
    else if (!any && !atomic_exchange(&app->open_now, true))
        qd_log(QD_LOG_WARN, "open mode: no access token is left", "auth", qd_auth_mode(app, false),
               "detail", "anyone who reaches the server may do everything", NULL);
}

/* No Authorization header: fine only on an open server (no tokens at all). */
static bool anonymous(qd_req *r)
{
    bool any = true;
    qd_err err;
    if (qd_tokens_any(r->app->tokens, &any, &err) != QD_OK) {
        qd_reply_ec(r, QD_EC_UNAVAILABLE, NULL, "cannot check tokens: %s", err.message);
        return false;
    }
    qd_auth_tokens_seen(r->app, any);
    if (!any && r->app->open_without_tokens) return true;
    if (!any)
        return unauthorized(r, false,
                            "this server has no access tokens and does not listen on loopback: "
                            "an operator must create one (quantd token create)");
    return unauthorized(r, false, "%s %s needs a token: Authorization: Bearer TOKEN", r->method,
                        r->route->pattern);
}

static const char *roles_text(unsigned roles, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < QD_ROLE_COUNT && at < len; i++)
        if (roles & QD_R(i))
            at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? " or " : "",
                                   qd_role_name((qd_role)i));
    return buf;
}

bool qd_auth_request(qd_req *r)
{
    unsigned roles = r->route->roles;
    bool metrics_open =
        (roles & QD_R_METRICS_OPTION) && r->app->cfg->metrics_auth == QD_METRICS_OPEN;
    if (roles == QD_PUBLIC || metrics_open) return true;
    const char *h = qd_req_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h) return anonymous(r);
    const char *token = bearer(h);
    if (!token) return unauthorized(r, true, "the Authorization header must be 'Bearer TOKEN'");
    qd_token_check check;
    qd_token_info who;
    qd_err err;
    if (qd_tokens_check(r->app->tokens, token, &check, &who, &err) != QD_OK) {
        qd_reply_ec(r, QD_EC_UNAVAILABLE, NULL, "cannot check tokens: %s", err.message);
        return false;
    }
    if (check == QD_TOKEN_UNKNOWN) return unauthorized(r, true, "unknown or revoked token");
    char when[QD_TIME_LEN];
    if (check == QD_TOKEN_EXPIRED)
        return unauthorized(r, true, "token '%s' expired at %s", who.name,
                            qd_iso8601(who.expires_ms, when));
    snprintf(r->who, sizeof r->who, "%s", who.name);
    qd_auth_tokens_seen(r->app, true);
    if (roles & QD_R(who.role)) return true;
    char allowed[64];
    qd_reply_ec(r, QD_EC_FORBIDDEN, NULL, "token '%s' has the role %s; %s %s needs %s", who.name,
                qd_role_name(who.role), r->method, r->route->pattern,
                roles_text(roles & QD_ANY_ROLE, allowed, sizeof allowed));
    return false;
}
