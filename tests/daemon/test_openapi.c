/* test_openapi.c -- the openapi suite: api/openapi.yaml and the router's table (qd_routes) name
 * the same (method, path) pairs. The spec's operations come from a small, strict line scanner
 * (no YAML library): under the top-level `paths:` key, a path is a key indented exactly 2
 * spaces that starts with '/' (optionally quoted) and ends with ':', and an operation is one of
 * get/put/post/delete/patch/head/options followed by ':' indented exactly 4 spaces under it.
 * Deeper lines are ignored; the section ends at the next line with no indentation. Anything
 * the scanner cannot read that way is an error naming the line, so a spec written in another
 * style fails loudly instead of hiding routes. The ErrorCode schema and the table of API
 * errors (daemon/http/error_codes.c) name the same words with the same statuses.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdtest.h"
#include "error_codes.h"
#include "router.h"

#define SPEC_PATH "api/openapi.yaml"

typedef struct oa_op {
    char method[8]; /* upper case, as the router spells it */
    char path[256];
} oa_op;

typedef struct oa_ops {
    oa_op *v;
    size_t n, cap;
    char error[512]; /* why oa_scan failed, with the line number */
} oa_ops;

static const char *const oa_methods[] = {"get",   "put",  "post",    "delete",
                                         "patch", "head", "options", NULL};

static void oa_ops_free(oa_ops *ops)
{
    free(ops->v);
    *ops = (oa_ops){0};
}

static bool oa_fail(oa_ops *ops, size_t line, const char *what, const char *text, size_t len)
{
    snprintf(ops->error, sizeof ops->error, "line %zu: %s: \"%.*s\"", line, what,
             (int)(len > 120 ? 120 : len), text);
    return false;
}

static bool oa_has(const oa_ops *ops, const char *method, const char *path)
{
    for (size_t i = 0; i < ops->n; i++)
        if (strcmp(ops->v[i].method, method) == 0 && strcmp(ops->v[i].path, path) == 0) return true;
    return false;
}

static bool oa_add(oa_ops *ops, const char *method, const char *path)
{
    if (ops->n == ops->cap) {
        size_t cap = ops->cap ? ops->cap * 2 : 16;
        oa_op *v = realloc(ops->v, cap * sizeof *v);
        if (!v) return false;
        ops->v = v;
        ops->cap = cap;
    }
    oa_op *op = &ops->v[ops->n++];
    snprintf(op->method, sizeof op->method, "%s", method);
    snprintf(op->path, sizeof op->path, "%s", path);
    return true;
}

/* The path of a line "  /x:" or "  '/x':" or "  \"/x\":" (key = the text after the indent,
 * trailing blanks removed); false when the key is not of that form. */
static bool oa_path_key(const char *key, size_t len, char *path, size_t cap)
{
    if (len < 2 || key[len - 1] != ':') return false;
    len--; /* drop the ':' */
    if (key[0] == '\'' || key[0] == '"') {
        if (len < 3 || key[len - 1] != key[0]) return false;
        key++;
        len -= 2;
    }
    if (key[0] != '/' || len >= cap) return false;
    for (size_t i = 0; i < len; i++)
        if (key[i] == '\'' || key[i] == '"' || key[i] == ':' || isspace((unsigned char)key[i]))
            return false;
    memcpy(path, key, len);
    path[len] = '\0';
    return true;
}

/* Whether key (an indent-4 line without its indent) is "METHOD:" for an HTTP method; *flow is
 * set when text follows the ':' (an inline operation the scanner does not read). */
static const char *oa_method_key(const char *key, size_t len, bool *flow)
{
    for (int i = 0; oa_methods[i]; i++) {
        size_t m = strlen(oa_methods[i]);
        if (len > m && strncmp(key, oa_methods[i], m) == 0 && key[m] == ':') {
            *flow = len > m + 1;
            return oa_methods[i];
        }
    }
    return NULL;
}

/* Scans an OpenAPI YAML text; fills ops with the (METHOD, path) pairs of its `paths:` section.
 * False (with ops->error) on a line the scanner cannot read, a duplicate, or no section. */
static bool oa_scan(const char *text, oa_ops *ops)
{
    *ops = (oa_ops){0};
    bool in_paths = false, seen_paths = false;
    char path[256] = "";
    size_t lineno = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *line = p;
        p = nl ? nl + 1 : p + len;
        lineno++;
        while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
            len--;
        size_t indent = 0;
        while (indent < len && line[indent] == ' ') indent++;
        if (indent == len || line[indent] == '#') continue; /* blank or comment */
        const char *key = line + indent;
        size_t klen = len - indent;
        if (in_paths && indent <= 4 && line[indent] == '\t') /* deeper: block scalar text */
            return oa_fail(ops, lineno, "a tab in the indentation", line, len);
        if (indent == 0) {
            if (in_paths) break; /* the next top-level key ends the section */
            if (klen == 6 && memcmp(key, "paths:", 6) == 0) {
                if (seen_paths) return oa_fail(ops, lineno, "a second paths section", line, len);
                in_paths = seen_paths = true;
            }
            continue;
        }
        if (!in_paths) continue;
        if (indent == 2) {
            if (!oa_path_key(key, klen, path, sizeof path))
                return oa_fail(ops, lineno, "not a path key (\"  /path:\")", line, len);
            for (size_t i = 0; i < ops->n; i++)
                if (strcmp(ops->v[i].path, path) == 0)
                    return oa_fail(ops, lineno, "this path is listed twice", line, len);
        } else if (indent == 4) {
            bool flow = false;
            const char *method = oa_method_key(key, klen, &flow);
            if (!method) continue; /* parameters, summary, description, ... */
            if (flow)
                return oa_fail(ops, lineno, "an operation must be a block (\"    get:\")", line,
                               len);
            if (!path[0]) return oa_fail(ops, lineno, "an operation before any path", line, len);
            char upper[8];
            size_t m = strlen(method);
            for (size_t i = 0; i <= m; i++) upper[i] = (char)toupper((unsigned char)method[i]);
            if (oa_has(ops, upper, path))
                return oa_fail(ops, lineno, "this operation is listed twice", line, len);
            if (!oa_add(ops, upper, path)) return oa_fail(ops, lineno, "out of memory", line, len);
        } else if (indent < 4) {
            return oa_fail(ops, lineno, "indentation other than 2 (paths) or 4 (operations)", line,
                           len);
        }
        /* deeper: inside an operation or path-level field */
    }
    if (!seen_paths) {
        snprintf(ops->error, sizeof ops->error, "no top-level \"paths:\" line");
        return false;
    }
    return true;
}

/* ---- the spec against the router -------------------------------------------------------------
 */

START_TEST(test_spec_matches_router)
{
    char *text = kit_read_file(SPEC_PATH, NULL);
    ck_assert_msg(text, "cannot read %s (tests run from the repository root)", SPEC_PATH);
    oa_ops ops;
    bool ok = oa_scan(text, &ops);
    free(text);
    ck_assert_msg(ok, "%s: %s", SPEC_PATH, ops.error);
    ck_assert_msg(ops.n > 0, "%s: no operations under paths:", SPEC_PATH);

    char report[4096] = "";
    size_t at = 0, bad = 0;
    for (size_t i = 0; i < qd_n_routes; i++) {
        if (oa_has(&ops, qd_routes[i].method, qd_routes[i].pattern)) continue;
        bad++;
        int k = snprintf(report + at, sizeof report - at, "\n  route %s %s is not in %s",
                         qd_routes[i].method, qd_routes[i].pattern, SPEC_PATH);
        if (k > 0 && (size_t)k < sizeof report - at) at += (size_t)k;
    }
    for (size_t i = 0; i < ops.n; i++) {
        bool found = false;
        for (size_t r = 0; r < qd_n_routes && !found; r++)
            found = strcmp(qd_routes[r].method, ops.v[i].method) == 0 &&
                    strcmp(qd_routes[r].pattern, ops.v[i].path) == 0;
        if (found) continue;
        bad++;
        int k = snprintf(report + at, sizeof report - at,
                         "\n  %s %s in %s is not a route of daemon/http/router.c", ops.v[i].method,
                         ops.v[i].path, SPEC_PATH);
        if (k > 0 && (size_t)k < sizeof report - at) at += (size_t)k;
    }
    oa_ops_free(&ops);
    ck_assert_msg(bad == 0, "the spec and the router differ:%s", report);
}
END_TEST

/* ---- the scanner itself ----------------------------------------------------------------------
 */

static const char scan_sample[] =
    "openapi: 3.1.0\n"
    "info:\n"
    "  title: t\n"
    "    get:\n" /* not under paths: ignored */
    "paths:\n"
    "  # a comment\n"
    "  /a:\n"
    "    parameters:\n"
    "      - name: q\n"
    "    get:\n"
    "      responses:\n"
    "        '200':\n"
    "          description: x\n"
    "\n"
    "  '/b/{id}':\r\n"
    "    put:\n"
    "      requestBody:\n"
    "        content:\n"
    "          application/json:\n"
    "            schema:\n"
    "              properties:\n"
    "      get:\n" /* 6 spaces: a key inside the operation, not an operation */
    "                post:\n"
    "                  type: string\n"
    "    delete:  \n"
    "    summary: not an operation\n"
    "  \"/c\":\n"
    "    description: |\n"
    "      get:\n"
    "    post:\n"
    "    get:\n"
    "      description: >\n"
    "        delete:\n"
    "    x-internal: true\n"
    "components:\n"
    "  schemas:\n"
    "    get:\n" /* after the section: ignored */
    "  /d:\n"
    "    patch:\n";

START_TEST(test_scanner)
{
    oa_ops ops;
    ck_assert_msg(oa_scan(scan_sample, &ops), "%s", ops.error);
    static const char *const want[][2] = {
        {"GET", "/a"}, {"PUT", "/b/{id}"}, {"DELETE", "/b/{id}"}, {"POST", "/c"}, {"GET", "/c"}};
    size_t n_want = sizeof want / sizeof want[0];
    for (size_t i = 0; i < ops.n; i++)
        ck_assert_msg(i < n_want && strcmp(ops.v[i].method, want[i][0]) == 0 &&
                          strcmp(ops.v[i].path, want[i][1]) == 0,
                      "pair %zu: %s %s", i, ops.v[i].method, ops.v[i].path);
    ck_assert_uint_eq(ops.n, n_want);
    oa_ops_free(&ops);

    /* what the scanner refuses rather than misread */
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"openapi: 3.1.0\n", "no top-level"},
        {"paths:\n  /a:\n    get:\n    get:\n", "listed twice"},
        {"paths:\n  /a:\n    get:\n  /a:\n", "listed twice"},
        {"paths:\n    get:\n", "before any path"},
        {"paths:\n  /a: {get: {}}\n", "not a path key"},
        {"paths:\n  a:\n", "not a path key"},
        {"paths:\n  '/a:\n", "not a path key"},
        {"paths:\n  /a:\n    get: {responses: {}}\n", "must be a block"},
        {"paths:\n   /a:\n", "indentation"},
        {"paths:\n  /a:\n   get:\n", "indentation"},
        {"paths:\n  /a:\n \tget:\n", "tab"},
        {"paths:\n  /a:\n\tget:\n", "tab"},
        {"paths:\n  /a:\nx: 1\npaths:\n  /b:\n", NULL}, /* ends at x: (a second paths: is
                                                          never reached) */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bool ok = oa_scan(bad[i].text, &ops);
        if (!bad[i].why) {
            ck_assert_msg(ok && ops.n == 0, "case %zu: %s", i, ops.error);
        } else {
            ck_assert_msg(!ok, "case %zu was accepted: %s", i, bad[i].text);
            ck_assert_msg(strstr(ops.error, bad[i].why), "case %zu: %s (wanted \"%s\")", i,
                          ops.error, bad[i].why);
        }
        oa_ops_free(&ops);
    }
}
END_TEST

/* ---- the error codes against the spec ---------------------------------------------------------
 */

/* The ErrorCode schema's text: from its `description: |` to the end of its `enum:` list. */
static const char *error_code_schema(const char *text, const char **end)
{
    const char *s = strstr(text, "\n    ErrorCode:\n");
    if (!s) return NULL;
    const char *e = strstr(s + 1, "\n    Error:\n");
    *end = e ? e : s + strlen(s);
    return s;
}

START_TEST(test_error_codes_match_spec)
{
    char *text = kit_read_file(SPEC_PATH, NULL);
    ck_assert_ptr_nonnull(text);
    const char *end, *schema = error_code_schema(text, &end);
    ck_assert_msg(schema, SPEC_PATH " has no ErrorCode schema");
    size_t len = (size_t)(end - schema);
    char *sch = strndup(schema, len);
    const char *enum_at = strstr(sch, "\n      enum:\n");
    ck_assert_ptr_nonnull(enum_at);
    size_t listed = 0;
    for (int ec = 0; ec < QD_EC_COUNT; ec++) {
        const qd_ec_info *e = qd_ec_get((qd_ec)ec);
        ck_assert_msg(e->word && e->means && e->status >= 400 && e->status <= 599,
                      "error code %d has no word, meaning or 4xx/5xx status", ec);
        /* the description says "`word` (STATUS..." with this row's status before the ')' */
        char key[64], item[80], status[8];
        snprintf(key, sizeof key, "`%s` (", e->word);
        snprintf(item, sizeof item, "\n        - %s\n", e->word);
        snprintf(status, sizeof status, "%u", e->status);
        const char *d = strstr(sch, key);
        ck_assert_msg(d && d < enum_at, "%s: ErrorCode's description does not name `%s`", SPEC_PATH,
                      e->word);
        const char *close = strchr(d, ')');
        const char *st = strstr(d + strlen(key), status);
        ck_assert_msg(st && close && st < close, "%s: `%s` is %u in daemon/http/error_codes.c",
                      SPEC_PATH, e->word, e->status);
        ck_assert_msg(strstr(enum_at, item), "%s: ErrorCode's enum does not list %s", SPEC_PATH,
                      e->word);
    }
    /* and the enum lists no word the table lacks */
    for (const char *p = strstr(enum_at, "\n        - "); p; p = strstr(p + 1, "\n        - ")) {
        char word[64];
        ck_assert_int_eq(sscanf(p, "\n        - %63[a-z_]", word), 1);
        bool known = false;
        for (int ec = 0; ec < QD_EC_COUNT && !known; ec++)
            known = strcmp(qd_ec_get((qd_ec)ec)->word, word) == 0;
        ck_assert_msg(known, "%s: ErrorCode lists %s, which quantd never answers", SPEC_PATH, word);
        listed++;
    }
    ck_assert_uint_eq(listed, QD_EC_COUNT - 1); /* not_ready has two rows, one word */
    ck_assert_int_eq(qd_ec_get((qd_ec)QD_EC_COUNT)->status, 500); /* out of range: internal */
    free(sch);
    free(text);
}
END_TEST

Suite *suite_openapi(void)
{
    Suite *s = suite_create("openapi");
    TCase *tc = tcase_create("openapi");
    tcase_add_test(tc, test_spec_matches_router);
    tcase_add_test(tc, test_scanner);
    tcase_add_test(tc, test_error_codes_match_spec);
    suite_add_tcase(s, tc);
    return s;
}
