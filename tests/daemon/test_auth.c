/* test_auth.c -- tokens and roles through the real quantd: every route of the router for every
 * role (200-ish, 401, 403), an open loopback server locked by its first token and revocation and
 * expiry taking effect at once, the exposure rule (a non-loopback listen needs tokens or
 * --insecure), /metrics by metrics_auth, /v1/tokens, `quantd token`, and the request log naming
 * the token, never showing it.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"
#include "router.h"

/* `quantd token create` on d's data directory: the token (malloc'd). */
static char *create_token(qdp *d, const char *role, const char *name)
{
    char *out = NULL, *err = NULL;
    const char *args[] = {"token", "create", "--role", role, "--name", name, NULL};
    int rc = qdp_run(d, &out, &err, args);
    ck_assert_msg(rc == 0, "token create: %d %s", rc, err);
    size_t n = strlen(out);
    ck_assert_msg(n == 48 && strncmp(out, "qdt_", 4) == 0 && out[47] == '\n', "stdout: %s", out);
    out[47] = '\0'; /* stdout holds the token and nothing else */
    free(err);
    return out;
}

static long status_of(qdp *d, const char *method, const char *path, const char *token)
{
    const char *saved = d->token;
    d->token = token;
    bool body = strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0;
    qdp_resp r = qdp_req(d, method, path, body ? "application/json" : NULL, body ? "{}" : NULL,
                         body ? 2 : 0, NULL);
    d->token = saved;
    long st = r.status;
    qdp_resp_free(&r);
    return st;
}

/* The route's pattern with its parameters filled ({id} -> 1, others -> x). */
static void fill(const char *pattern, char *out, size_t len)
{
    size_t at = 0;
    for (const char *p = pattern; *p && at + 2 < len;) {
        if (*p == '{') {
            const char *close = strchr(p, '}');
            at +=
                (size_t)snprintf(out + at, len - at, "%s", strncmp(p, "{id}", 4) == 0 ? "1" : "x");
            p = close + 1;
        } else {
            out[at++] = *p++;
        }
    }
    out[at] = '\0';
}

/* The policy of the issue, written out: a change to the router's roles must change this too. */
#define T QD_R(QD_ROLE_TRAINER)
#define R QD_R(QD_ROLE_READER)
#define O QD_R(QD_ROLE_OPERATOR)
static const struct {
    const char *method, *pattern;
    unsigned roles;
} policy[] = {
    {"GET", "/healthz", QD_PUBLIC},
    {"GET", "/readyz", QD_PUBLIC},
    {"GET", "/metrics", QD_METRICS},
    {"GET", "/v1/rulesets", O},
    {"PUT", "/v1/rulesets/{name}", O},
    {"GET", "/v1/rulesets/{name}", O},
    {"DELETE", "/v1/rulesets/{name}", O},
    {"POST", "/v1/jobs", O},
    {"GET", "/v1/jobs", R | O},
    {"GET", "/v1/jobs/{id}", R | O},
    {"DELETE", "/v1/jobs/{id}", O},
    {"GET", "/v1/jobs/{id}/output", R | O},
    {"GET", "/v1/jobs/{id}/outputs", R | O},
    {"GET", "/v1/jobs/{id}/outputs.tar", R | O},
    {"GET", "/v1/jobs/{id}/outputs/{name}", R | O},
    {"PUT", "/v1/jobs/{id}/inputs/{name}", O}, /* a checkpoint job's files: job creation */
    {"GET", "/v1/jobs/{id}/report", R | O},
    {"POST", "/v1/plans", O}, /* like job creation: server paths, stored rule sets */
    {"GET", "/v1/models", T | O},
    {"PUT", "/v1/models/{model}", O},
    {"GET", "/v1/models/{model}", T | O},
    {"POST", "/v1/models/{model}/stats", T | O},
    {"GET", "/v1/models/{model}/stats", T | O},
    {"DELETE", "/v1/models/{model}/stats", O},
    {"GET", "/v1/models/{model}/scales", T | O},
    {"GET", "/v1/models/{model}/imatrix", T | O},
    {"GET", "/v1/tokens", O},
    {"POST", "/v1/tokens", O},
    {"DELETE", "/v1/tokens/{name}", O},
};
#undef T
#undef R
#undef O

START_TEST(test_policy)
{
    ck_assert_uint_eq(qd_n_routes, sizeof policy / sizeof policy[0]);
    for (size_t k = 0; k < qd_n_routes; k++) {
        size_t i = 0;
        while (i < qd_n_routes && (strcmp(policy[i].method, qd_routes[k].method) != 0 ||
                                   strcmp(policy[i].pattern, qd_routes[k].pattern) != 0))
            i++;
        ck_assert_msg(i < qd_n_routes, "%s %s is not in the policy", qd_routes[k].method,
                      qd_routes[k].pattern);
        ck_assert_msg(policy[i].roles == qd_routes[k].roles, "%s %s: roles %#x, policy %#x",
                      qd_routes[k].method, qd_routes[k].pattern, qd_routes[k].roles,
                      policy[i].roles);
    }
}
END_TEST

START_TEST(test_roles_by_route)
{
    qdp d;
    qdp_start(&d, NULL);
    char *tok[QD_ROLE_COUNT];
    for (int i = 0; i < QD_ROLE_COUNT; i++) {
        char name[32];
        snprintf(name, sizeof name, "t-%s", qd_role_name((qd_role)i));
        tok[i] = create_token(&d, qd_role_name((qd_role)i), name);
    }
    const char *bad = "qdt_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    for (size_t k = 0; k < qd_n_routes; k++) {
        const qd_route *rt = &qd_routes[k];
        char path[256];
        fill(rt->pattern, path, sizeof path);
        bool open = rt->roles == QD_PUBLIC || (rt->roles & QD_R_METRICS_OPTION); /* default */
        long none = status_of(&d, rt->method, path, NULL);
        long wrong = status_of(&d, rt->method, path, bad);
        if (open) {
            ck_assert_msg(none == 200 && wrong == 200, "%s %s: %ld / %ld", rt->method, path, none,
                          wrong);
            continue;
        }
        ck_assert_msg(none == 401, "%s %s without a token: %ld", rt->method, path, none);
        ck_assert_msg(wrong == 401, "%s %s with a bad token: %ld", rt->method, path, wrong);
        for (int i = 0; i < QD_ROLE_COUNT; i++) {
            long st = status_of(&d, rt->method, path, tok[i]);
            bool allowed = rt->roles & QD_R(i);
            ck_assert_msg(allowed ? st != 401 && st != 403 : st == 403, "%s %s as %s: %ld",
                          rt->method, path, qd_role_name((qd_role)i), st);
        }
    }
    /* the operator may do everything; the matrix above holds the rest */
    for (size_t k = 0; k < qd_n_routes; k++)
        ck_assert(qd_routes[k].roles == QD_PUBLIC || (qd_routes[k].roles & QD_R(QD_ROLE_OPERATOR)));
    for (int i = 0; i < QD_ROLE_COUNT; i++) free(tok[i]);
    qdp_stop(&d);
}
END_TEST

static void expect_status(qdp *d, const char *path, const char *token, long want, const char *has)
{
    const char *saved = d->token;
    d->token = token;
    qdp_resp r = qdp_req(d, "GET", path, NULL, NULL, 0, NULL);
    d->token = saved;
    ck_assert_msg(r.status == want, "GET %s: %ld %s (wanted %ld)", path, r.status, r.body, want);
    if (has) ck_assert_msg(strstr(r.body, has), "GET %s: %s lacks '%s'", path, r.body, has);
    if (want == 401) {
        char *wa = qdp_header(&r, "www-authenticate");
        ck_assert_msg(wa && strncmp(wa, "Bearer realm=\"quantd\"", 21) == 0, "%s", wa);
        free(wa);
    }
    qdp_resp_free(&r);
}

static void run_ok(qdp *d, const char *const *args, int want)
{
    char *out = NULL, *err = NULL;
    int rc = qdp_run(d, &out, &err, args);
    ck_assert_msg(rc == want, "quantd %s %s: exit %d (wanted %d): %s", args[0], args[1], rc, want,
                  err);
    free(out);
    free(err);
}

/* Loopback with no token: open. The first token locks it at once; revoking the last opens it
 * again; a revoked or expired token fails with the next request. */
START_TEST(test_lock_revoke_expire)
{
    qdp d;
    qdp_start(&d, NULL);
    expect_status(&d, "/v1/jobs", NULL, 200, NULL);
    char *op = create_token(&d, "operator", "op");
    expect_status(&d, "/v1/jobs", NULL, 401, "needs a token");
    expect_status(&d, "/v1/jobs", op, 200, NULL);
    char *tr = create_token(&d, "trainer", "tr");
    expect_status(&d, "/v1/models", tr, 200, NULL);
    /* revoked over REST: the next request fails */
    d.token = op;
    qdp_resp r = qdp_req(&d, "DELETE", "/v1/tokens/tr", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 204);
    qdp_resp_free(&r);
    expect_status(&d, "/v1/models", tr, 401, "unknown or revoked");
    /* expiry: the row says it has passed */
    char *db = kit_join(d.data_dir, "quantd.db");
    sqlite3 *h = NULL;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_busy_timeout(h, 5000);
    char *tr2 = create_token(&d, "trainer", "tr2");
    expect_status(&d, "/v1/models", tr2, 200, NULL);
    ck_assert_int_eq(sqlite3_exec(h,
                                  "UPDATE tokens SET expires_ms = created_ms + 1 WHERE name = "
                                  "'tr2'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    expect_status(&d, "/v1/models", tr2, 401, "token 'tr2' expired at");
    /* the last tokens revoked with the CLI: open again (loopback) */
    run_ok(&d, (const char *[]){"token", "revoke", "tr2", NULL}, 0);
    run_ok(&d, (const char *[]){"token", "revoke", "op", NULL}, 0);
    d.token = NULL;
    expect_status(&d, "/v1/jobs", NULL, 200, NULL);
    expect_status(&d, "/v1/jobs", op, 401, "unknown or revoked");
    free(db);
    free(op);
    free(tr);
    free(tr2);
    qdp_stop(&d);
}
END_TEST

/* Lines of the file at path that contain `what`. */
static int count_lines(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

/* A non-loopback address: refused without tokens, started with --insecure (and warned), or with
 * a token (which it then requires). */
START_TEST(test_exposure)
{
    qdp d;
    qdp_start(&d, NULL);
    ck_assert_int_eq(qdp_signal(&d, SIGTERM), 0);
    char *out = NULL, *err = NULL;
    int rc = qdp_run(&d, &out, &err, (const char *[]){"--listen", "0.0.0.0:0", NULL});
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(err, "not a loopback address and there are no access tokens"), "%s", err);
    ck_assert_msg(strstr(err, "--insecure"), "%s", err);
    free(out);
    free(err);
    qdp_restart(&d, (const char *[]){"--listen", "0.0.0.0:0", "--insecure", NULL});
    expect_status(&d, "/v1/jobs", NULL, 200, NULL);
    char *log = kit_join(d.root, "quantd.log");
    for (int i = 0; i < 50 && count_lines(log, "level=warn msg=\"insecure:") == 0; i++)
        usleep(100000); /* the housekeeping thread's first pass */
    ck_assert_msg(count_lines(log, "level=warn msg=\"insecure:") == 1, "no insecure warning in %s",
                  log);
    ck_assert_int_eq(qdp_signal(&d, SIGTERM), 0);
    char *op = create_token(&d, "operator", "op");
    qdp_restart(&d, (const char *[]){"--listen", "0.0.0.0:0", NULL});
    expect_status(&d, "/v1/jobs", NULL, 401, NULL);
    expect_status(&d, "/v1/jobs", op, 200, NULL);
    expect_status(&d, "/healthz", NULL, 200, NULL);
    /* the last token revoked while it runs: locked, not open (it is not on loopback) */
    run_ok(&d, (const char *[]){"token", "revoke", "op", NULL}, 0);
    expect_status(&d, "/v1/jobs", NULL, 401, "no access tokens");
    /* started --insecure with a token: no warning; its last token revoked: open, and warned
     * (the housekeeping pass runs every second with a 2 s retention) */
    ck_assert_int_eq(qdp_signal(&d, SIGTERM), 0);
    free(op);
    op = create_token(&d, "operator", "op");
    int before = count_lines(log, "msg=\"insecure:");
    qdp_restart(
        &d, (const char *[]){"--listen", "0.0.0.0:0", "--insecure", "--job-retention", "2", NULL});
    expect_status(&d, "/v1/jobs", NULL, 401, NULL);
    ck_assert_int_eq(count_lines(log, "msg=\"insecure:"), before);
    run_ok(&d, (const char *[]){"token", "revoke", "op", NULL}, 0);
    expect_status(&d, "/v1/jobs", NULL, 200, NULL);
    for (int i = 0; i < 50 && count_lines(log, "msg=\"insecure:") == before; i++) usleep(100000);
    ck_assert_int_eq(count_lines(log, "msg=\"insecure:"), before + 1);
    free(op);
    free(log);
    qdp_stop(&d);
}
END_TEST

START_TEST(test_metrics_auth)
{
    qdp d;
    qdp_start(&d, (const char *[]){"--metrics-auth", "token", NULL});
    char *rd = create_token(&d, "reader", "scraper"), *tr = create_token(&d, "trainer", "tr");
    expect_status(&d, "/metrics", NULL, 401, NULL);
    expect_status(&d, "/metrics", rd, 200, "quantd_limit_hits_total");
    expect_status(&d, "/metrics", tr, 200, NULL); /* any valid token */
    expect_status(&d, "/healthz", NULL, 200, NULL);
    expect_status(&d, "/readyz", NULL, 200, NULL);
    free(rd);
    free(tr);
    qdp_stop(&d);
    qdp_start(&d, NULL); /* default: open, also once tokens exist */
    free(create_token(&d, "reader", "r"));
    expect_status(&d, "/metrics", NULL, 200, "quantd_http_requests_total");
    qdp_stop(&d);
}
END_TEST

static json_t *post_token(qdp *d, const char *body, long want)
{
    qdp_resp r = qdp_req(d, "POST", "/v1/tokens", "application/json", body, strlen(body), NULL);
    ck_assert_msg(r.status == want, "POST /v1/tokens %s: %ld %s", body, r.status, r.body);
    json_t *j = qdp_json(&r);
    if (want == 201) {
        char *loc = qdp_header(&r, "location");
        ck_assert_str_eq(loc, "/v1/tokens/ci");
        free(loc);
    }
    qdp_resp_free(&r);
    return j;
}

START_TEST(test_tokens_rest)
{
    qdp d;
    qdp_start(&d, NULL);
    char *op = create_token(&d, "operator", "op");
    d.token = op;
    json_t *j = post_token(&d, "{\"name\":\"ci\",\"role\":\"trainer\",\"expires_days\":30}", 201);
    const char *tok = json_string_value(json_object_get(j, "token"));
    ck_assert_ptr_nonnull(tok);
    ck_assert_str_eq(json_string_value(json_object_get(j, "role")), "trainer");
    ck_assert(json_is_string(json_object_get(j, "expires_at")));
    expect_status(&d, "/v1/models", tok, 200, NULL);
    expect_status(&d, "/v1/jobs", tok, 403, "needs reader or operator");
    qdp_resp r = qdp_req(&d, "GET", "/v1/tokens", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(!strstr(r.body, tok) && !strstr(r.body, "\"token\""), "%s", r.body);
    ck_assert_msg(strstr(r.body, "\"name\":\"ci\"") && strstr(r.body, "\"name\":\"op\""), "%s",
                  r.body);
    qdp_resp_free(&r);
    json_decref(j);
    json_decref(post_token(&d, "{\"name\":\"ci\",\"role\":\"reader\"}", 409));
    json_decref(post_token(&d, "{\"name\":\"x\",\"role\":\"admin\"}", 400));
    json_decref(post_token(&d, "{\"name\":\"x\",\"role\":\"reader\",\"expires_days\":0}", 400));
    json_decref(post_token(&d, "{\"name\":\"x\",\"role\":\"reader\",\"scope\":1}", 400));
    json_decref(post_token(&d, "{\"name\":\".x\",\"role\":\"reader\"}", 400));
    json_decref(post_token(&d, "{\"role\":\"reader\"}", 400));
    r = qdp_req(&d, "DELETE", "/v1/tokens/ci", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 204);
    qdp_resp_free(&r);
    r = qdp_req(&d, "DELETE", "/v1/tokens/ci", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 404);
    qdp_resp_free(&r);
    free(op);
    qdp_stop(&d);
}
END_TEST

START_TEST(test_token_cli)
{
    qdp d;
    qdp_start(&d, NULL);
    run_ok(&d, (const char *[]){"token", NULL}, 2);
    run_ok(&d, (const char *[]){"token", "create", "--name", "a", NULL}, 2);
    run_ok(&d, (const char *[]){"token", "create", "--role", "x", "--name", "a", NULL}, 2);
    run_ok(&d,
           (const char *[]){"token", "create", "--role", "reader", "--name", "a", "--expires", "0",
                            NULL},
           2);
    run_ok(&d, (const char *[]){"token", "list", "--nope", NULL}, 2);
    run_ok(&d, (const char *[]){"token", "revoke", NULL}, 2);
    run_ok(&d, (const char *[]){"token", "revoke", "ghost", NULL}, 1);
    run_ok(&d, (const char *[]){"token", "create", "--role", "reader", "--name", "bad name", NULL},
           1);
    char *t = create_token(&d, "reader", "serving");
    run_ok(&d, (const char *[]){"token", "create", "--role", "reader", "--name", "serving", NULL},
           1);
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(qdp_run(&d, &out, &err, (const char *[]){"token", "list", NULL}), 0);
    ck_assert_msg(strstr(out, "serving") && strstr(out, "reader") && !strstr(out, t), "%s", out);
    free(out);
    free(err);
    ck_assert_int_eq(qdp_run(&d, &out, &err, (const char *[]){"token", "list", "--json", NULL}), 0);
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_msg(j && json_array_size(json_object_get(j, "tokens")) == 1, "%s", out);
    json_decref(j);
    free(out);
    free(err);
    ck_assert_int_eq(qdp_run(&d, &out, &err, (const char *[]){"token", "--help", NULL}), 0);
    ck_assert_msg(strstr(out, "quantd token create --role ROLE --name NAME"), "%s", out);
    free(out);
    free(err);
    free(t);
    qdp_stop(&d);
}
END_TEST

/* quantd's log (root/quantd.log), malloc'd. */
static char *server_log(const qdp *d)
{
    char *path = kit_join(d->root, "quantd.log");
    char *s = qdt_read_file(path, NULL);
    free(path);
    return s ? s : strdup("");
}

/* The start-up line states the access mode, TLS and the source roots; the first token ends open
 * mode with a log line (and revoking the last one opens the server again, logged too). */
START_TEST(test_mode_logged)
{
    char *src = qdt_tmpdir();
    qdp d;
    qdp_start(&d, (const char *[]){"--source-root", src, NULL});
    char *log = server_log(&d), want[4400];
    snprintf(want, sizeof want, " tls=off auth=open source_roots=%s version=", src);
    ck_assert_msg(strstr(log, "msg=listening ") && strstr(log, want), "%s", log);
    ck_assert_ptr_null(strstr(log, "open mode ended"));
    free(log);
    char *t = create_token(&d, "operator", "first");
    ck_assert_int_eq(status_of(&d, "GET", "/v1/jobs", NULL), 401);
    log = server_log(&d);
    ck_assert_msg(strstr(log, "msg=\"open mode ended: an access token exists\" auth=tokens"), "%s",
                  log);
    free(log);
    ck_assert_int_eq(status_of(&d, "GET", "/v1/jobs", t), 200);
    run_ok(&d, (const char *[]){"token", "revoke", "first", NULL}, 0);
    ck_assert_int_eq(status_of(&d, "GET", "/v1/jobs", NULL), 200);
    log = server_log(&d);
    ck_assert_msg(strstr(log, "msg=\"open mode: no access token is left\" auth=open"), "%s", log);
    const char *first = strstr(log, "open mode ended");
    ck_assert_msg(first && !strstr(first + 1, "open mode ended"), "logged more than once: %s", log);
    free(log);
    free(t);
    qdp_stop(&d);
    kit_rmtree(src);
    free(src);
}
END_TEST

/* quantd token names the database it used, and refuses a data directory that does not exist
 * (a relative default run elsewhere would make a database no server reads). */
START_TEST(test_token_database)
{
    qdp d;
    qdp_start(&d, NULL);
    char *out = NULL, *err = NULL, want[4200];
    ck_assert_int_eq(qdp_run(&d, &out, &err, (const char *[]){"token", "list", NULL}), 0);
    snprintf(want, sizeof want, "quantd token: database %s/quantd.db\n", d.data_dir);
    ck_assert_msg(strstr(err, want), "%s", err);
    free(out);
    free(err);
    char *missing = kit_join(d.root, "no-such-dir"), *eo = kit_join(d.root, "tok.err");
    const char *args[] = {"token",    "create",    "--role",     "operator", "--name", "x",
                          "--config", "/dev/null", "--data-dir", missing,    NULL};
    ck_assert_int_eq(kit_run(getenv("QUANTD_BIN") ? getenv("QUANTD_BIN") : "build/bin/quantd",
                             "quantd", args, NULL, eo),
                     1);
    err = qdt_read_file(eo, NULL);
    snprintf(want, sizeof want, "quantd token: the data directory %s does not exist", missing);
    ck_assert_msg(err && strstr(err, want) && strstr(err, "--data-dir DIR"), "%s", err);
    ck_assert_int_ne(access(missing, F_OK), 0); /* nothing made */
    free(err);
    free(eo);
    free(missing);
    qdp_stop(&d);
}
END_TEST

/* The request log names the token; the token itself appears nowhere in the log. */
START_TEST(test_log_names_token)
{
    qdp d;
    qdp_start(&d, NULL);
    char *t = create_token(&d, "reader", "fleet-7");
    expect_status(&d, "/v1/jobs", t, 200, NULL);
    expect_status(&d, "/v1/jobs", "qdt_bogusbogusbogusbogusbogusbogusbogusbogusbog", 401, NULL);
    char *log = kit_join(d.root, "quantd.log");
    bool named = false;
    for (int tries = 0; !named && tries < 40; tries++) { /* logged once the reply has gone */
        if (tries) kit_sleep_ms(50);
        FILE *f = fopen(log, "r");
        ck_assert_ptr_nonnull(f);
        char line[4096];
        while (fgets(line, sizeof line, f)) {
            ck_assert_msg(!strstr(line, t) && !strstr(line, "qdt_bogus"), "token in the log: %s",
                          line);
            named = named || (strstr(line, "path=/v1/jobs") && strstr(line, "token=fleet-7"));
        }
        fclose(f);
    }
    ck_assert_msg(named, "no request line with token=fleet-7");
    free(log);
    free(t);
    qdp_stop(&d);
}
END_TEST

Suite *suite_auth(void)
{
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("auth");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_policy);
    tcase_add_test(tc, test_roles_by_route);
    tcase_add_test(tc, test_lock_revoke_expire);
    tcase_add_test(tc, test_exposure);
    tcase_add_test(tc, test_metrics_auth);
    tcase_add_test(tc, test_tokens_rest);
    tcase_add_test(tc, test_token_cli);
    tcase_add_test(tc, test_mode_logged);
    tcase_add_test(tc, test_token_database);
    tcase_add_test(tc, test_log_names_token);
    suite_add_tcase(s, tc);
    return s;
}
