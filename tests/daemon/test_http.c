/* test_http.c -- the http suite: HTTP semantics through the real quantd, over libcurl and raw
 * sockets where curl would normalize the request. Range on outputs (strict RFC 9110 parsing:
 * invalid ranges ignored, several ranges answered whole, 416), If-None-Match lists and weak
 * tags (304), HEAD mirroring GET on every GET route (status, headers, no body, roles; 405's
 * Allow lists HEAD), encoded control characters in the path or a query argument (400),
 * "Expect: 100-continue" without a body (400 at once, no spinning thread), bytes that are not
 * UTF-8 quoted in an error (made '?'), and /metrics with a method label (no two samples with the
 * same name and labels).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "metrics.h"
#include "qdproc.h"
#include "qdtest.h"
#include "router.h"

#define SHARD "tests/data/stories260K-bf16-sharded/model-00001-of-00002.safetensors"
#define RULES "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]}"

/* ---- raw HTTP ---------------------------------------------------------------------------------
 */

typedef struct raw_reply {
    int status;
    char head[8192]; /* the status line and headers, names as sent */
    size_t body_len; /* bytes after the head until the server closed */
    char body[4096]; /* the first of them, NUL-terminated */
} raw_reply;

/* Reads from fd until the server closes (10 s at most) into buf (NUL-terminated), closes fd;
 * returns the bytes read. */
static size_t raw_read_all(int fd, char *buf, size_t cap)
{
    size_t at = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    double end = kit_now() + 10;
    while (at < cap - 1 && kit_now() < end && poll(&p, 1, 1000) >= 0) {
        ssize_t k = recv(fd, buf + at, cap - 1 - at, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        at += (size_t)k;
    }
    close(fd);
    buf[at] = '\0';
    return at;
}

/* Sends `method target HTTP/1.1` with Connection: close and one more header line when extra is
 * not NULL, then reads until the server closes (10 s at most). */
static raw_reply raw_request(const qdp *d, const char *method, const char *target,
                             const char *extra)
{
    int fd = qdp_raw_connect(d);
    char req[4096];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%sConnection: close\r\n\r\n", method,
                     target, extra ? extra : "", extra ? "\r\n" : "");
    ck_assert(n > 0 && (size_t)n < sizeof req);
    ck_assert_int_eq(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    static char buf[1 << 20];
    size_t at = raw_read_all(fd, buf, sizeof buf);
    raw_reply r = {0};
    ck_assert_int_eq(sscanf(buf, "HTTP/1.1 %d", &r.status), 1);
    char *eoh = strstr(buf, "\r\n\r\n");
    ck_assert_msg(eoh != NULL, "no end of headers in: %.200s", buf);
    size_t hl = (size_t)(eoh - buf) + 4;
    ck_assert_uint_lt(hl, sizeof r.head);
    memcpy(r.head, buf, hl);
    r.head[hl] = '\0';
    r.body_len = at - hl;
    snprintf(r.body, sizeof r.body, "%s", buf + hl);
    return r;
}

/* Sends the bytes as they are, then reads until the server closes (10 s at most); returns what
 * came back (a static buffer, NUL-terminated). */
static const char *raw_exchange(const qdp *d, const char *bytes)
{
    int fd = qdp_raw_connect(d);
    size_t n = strlen(bytes);
    ck_assert_int_eq(send(fd, bytes, n, MSG_NOSIGNAL), (ssize_t)n);
    static char buf[1 << 16];
    raw_read_all(fd, buf, sizeof buf);
    return buf;
}

/* CPU seconds (user + system) process pid has used so far. */
static double cpu_seconds(pid_t pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    fclose(f);
    const char *p = strrchr(line, ')'); /* the command name may hold spaces */
    ck_assert_ptr_nonnull(p);
    unsigned long long utime = 0, stime = 0;
    /* after ") ": state, then 10 fields, then utime and stime (proc(5): fields 14 and 15) */
    ck_assert_int_eq(
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime), 2);
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* The value of header name (case-insensitive) in a raw reply's head, into out; false if none. */
static bool raw_header(const raw_reply *r, const char *name, char *out, size_t len)
{
    size_t n = strlen(name);
    for (const char *p = strstr(r->head, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (strncasecmp(line, name, n) != 0 || line[n] != ':') continue;
        const char *v = line + n + 1, *eol = strstr(v, "\r\n");
        while (*v == ' ') v++;
        snprintf(out, len, "%.*s", (int)(eol - v), v);
        return true;
    }
    return false;
}

/* ---- a finished job ---------------------------------------------------------------------------
 */

typedef struct job_file {
    long long id;
    char path[64]; /* /v1/jobs/ID/output */
    char etag[80]; /* "SHA256" */
    char sha[72];  /* SHA256 */
    size_t size;
} job_file;

static void finished_job(qdp *d, job_file *f)
{
    qdp_resp r =
        qdp_req(d, "PUT", "/v1/rulesets/int8", "application/json", RULES, strlen(RULES), NULL);
    ck_assert_int_eq(r.status, 201);
    qdp_resp_free(&r);
    r = qdp_upload(d, "/v1/jobs?ruleset=int8", SHARD);
    ck_assert_msg(r.status == 202, "upload: %ld %s", r.status, r.body);
    json_t *j = qdp_json(&r);
    f->id = (long long)json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    qdp_resp_free(&r);
    j = qdp_wait_job(d, f->id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    json_t *o = json_array_get(json_object_get(j, "outputs"), 0);
    snprintf(f->sha, sizeof f->sha, "%s", json_string_value(json_object_get(o, "sha256")));
    snprintf(f->etag, sizeof f->etag, "\"%s\"", f->sha);
    f->size = (size_t)json_integer_value(json_object_get(o, "bytes"));
    snprintf(f->path, sizeof f->path, "/v1/jobs/%lld/output", f->id);
    json_decref(j);
}

/* GET (or HEAD) of f with one extra header; checks the status, and for 200 and 206 the body's
 * length (GET) and Content-Length (both). */
static void expect_file(qdp *d, const job_file *f, const char *method, const char *header,
                        long status, size_t len)
{
    qdp_resp r = qdp_req(d, method, f->path, NULL, NULL, 0, header);
    ck_assert_msg(r.status == status, "%s %s with %s: %ld, wanted %ld", method, f->path,
                  header ? header : "(nothing)", r.status, status);
    if (status == 200 || status == 206) {
        char *cl = qdp_header(&r, "content-length");
        ck_assert_msg(cl && strtoull(cl, NULL, 10) == len, "%s %s with %s: Content-Length %s",
                      method, f->path, header ? header : "(nothing)", cl ? cl : "(none)");
        free(cl);
        ck_assert_uint_eq(r.len, strcmp(method, "HEAD") == 0 ? 0 : len);
    }
    qdp_resp_free(&r);
}

/* ---- Range, If-None-Match ---------------------------------------------------------------------
 */

START_TEST(test_ranges)
{
    qdp d;
    qdp_start(&d, NULL);
    job_file f;
    finished_job(&d, &f);
    /* what strtoull let through: not ranges-specifiers, so ignored (200, the whole file) */
    static const char *const invalid[] = {
        "Range: bytes=1--2", "Range: bytes=--5", "Range: bytes=+1-+2",
        "Range: bytes= 1-2", "Range: bytes=5-3", "Range: bytes=1-2x",
        "Range: items=0-1",  "Range: bytes=-+1", "Range: bytes=0-18446744073709551616",
    };
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++)
        expect_file(&d, &f, "GET", invalid[i], 200, f.size);
    /* several ranges: the whole file (no multipart) */
    expect_file(&d, &f, "GET", "Range: bytes=0-0,-1", 200, f.size);
    expect_file(&d, &f, "GET", "Range: bytes=0-0, 999999999-", 200, f.size);
    /* one range; the unit in any case; OWS around commas */
    expect_file(&d, &f, "GET", "Range: BYTES=8-15", 206, 8);
    expect_file(&d, &f, "GET", "Range: bytes=8-15, ", 206, 8);
    expect_file(&d, &f, "GET", "Range: bytes=-4", 206, 4);
    expect_file(&d, &f, "GET", "Range: bytes=0-99999999999", 206, f.size);
    qdp_resp r = qdp_req(&d, "GET", f.path, NULL, NULL, 0, "Range: bytes=10-");
    ck_assert_int_eq(r.status, 206);
    char *cr = qdp_header(&r, "content-range"), want[96];
    snprintf(want, sizeof want, "bytes 10-%zu/%zu", f.size - 1, f.size);
    ck_assert_str_eq(cr, want);
    free(cr);
    qdp_resp_free(&r);
    /* nothing satisfiable: 416 with the size */
    static const char *const unsatisfiable[] = {"Range: bytes=999999999-", "Range: bytes=-0",
                                                "Range: bytes=999999999-,-0"};
    for (size_t i = 0; i < sizeof unsatisfiable / sizeof unsatisfiable[0]; i++) {
        r = qdp_req(&d, "GET", f.path, NULL, NULL, 0, unsatisfiable[i]);
        ck_assert_msg(r.status == 416, "%s: %ld", unsatisfiable[i], r.status);
        cr = qdp_header(&r, "content-range");
        snprintf(want, sizeof want, "bytes */%zu", f.size);
        ck_assert_str_eq(cr, want);
        free(cr);
        qdp_resp_free(&r);
    }
    /* If-Range as before: a range of this file only */
    char ir[128];
    snprintf(ir, sizeof ir, "If-Range: %s", f.etag);
    r = qdp_req_headers(&d, "GET", f.path, "Range: bytes=8-15", ir);
    ck_assert_int_eq(r.status, 206);
    qdp_resp_free(&r);
    snprintf(ir, sizeof ir, "If-Range: W/%s", f.etag); /* strong comparison: a weak tag fails */
    r = qdp_req_headers(&d, "GET", f.path, "Range: bytes=8-15", ir);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, f.size);
    qdp_resp_free(&r);
    qdp_stop(&d);
}
END_TEST

START_TEST(test_if_none_match)
{
    qdp d;
    qdp_start(&d, NULL);
    job_file f;
    finished_job(&d, &f);
    char h[256];
    static const char *const match[][2] = {
        {"", ""}, {"\"aaaa\", ", ""}, {"", ", \"aaaa\""}, {"W/", ""}, {"\"a\",W/", " , "}};
    for (size_t i = 0; i < sizeof match / sizeof match[0]; i++) {
        snprintf(h, sizeof h, "If-None-Match: %s%s%s", match[i][0], f.etag, match[i][1]);
        qdp_resp r = qdp_req(&d, "GET", f.path, NULL, NULL, 0, h);
        ck_assert_msg(r.status == 304, "%s: %ld", h, r.status);
        ck_assert_uint_eq(r.len, 0);
        char *etag = qdp_header(&r, "etag");
        ck_assert_str_eq(etag, f.etag);
        free(etag);
        qdp_resp_free(&r);
    }
    expect_file(&d, &f, "GET", "If-None-Match: *", 304, 0);
    expect_file(&d, &f, "GET", "If-None-Match: \"aaaa\", W/\"bbbb\"", 200, f.size);
    snprintf(h, sizeof h, "If-None-Match: w/%s", f.etag); /* W/ is case-sensitive */
    expect_file(&d, &f, "GET", h, 200, f.size);
    snprintf(h, sizeof h, "If-None-Match: %s bogus", f.etag); /* malformed: ignored */
    expect_file(&d, &f, "GET", h, 200, f.size);
    /* by name too */
    snprintf(f.path, sizeof f.path, "/v1/jobs/%lld/outputs/model.safetensors", f.id);
    snprintf(h, sizeof h, "If-None-Match: \"x\", W/%s", f.etag);
    expect_file(&d, &f, "GET", h, 304, 0);
    expect_file(&d, &f, "HEAD", h, 304, 0);
    qdp_stop(&d);
}
END_TEST

/* ---- HEAD -------------------------------------------------------------------------------------
 */

/* HEAD of an output: GET's status and headers, Content-Length included, and no byte of body on
 * the wire. */
START_TEST(test_head_outputs)
{
    qdp d;
    qdp_start(&d, NULL);
    job_file f;
    finished_job(&d, &f);
    expect_file(&d, &f, "HEAD", NULL, 200, f.size);
    expect_file(&d, &f, "HEAD", "Range: bytes=8-15", 206, 8);
    expect_file(&d, &f, "HEAD", "Range: bytes=999999999-", 416, 0);
    char h[160];
    snprintf(h, sizeof h, "If-None-Match: %s", f.etag);
    expect_file(&d, &f, "HEAD", h, 304, 0);
    static const char *const same[] = {"content-length", "etag", "accept-ranges",
                                       "content-disposition", "content-type"};
    qdp_resp g = qdp_req(&d, "GET", f.path, NULL, NULL, 0, NULL);
    qdp_resp hd = qdp_req(&d, "HEAD", f.path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(hd.status, 200);
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char *a = qdp_header(&g, same[i]), *b = qdp_header(&hd, same[i]);
        ck_assert_msg(a && b && strcmp(a, b) == 0, "%s: GET %s, HEAD %s", same[i], a, b);
        free(a);
        free(b);
    }
    qdp_resp_free(&g);
    qdp_resp_free(&hd);
    /* on the wire: headers only, whatever Content-Length says */
    raw_reply r = raw_request(&d, "HEAD", f.path, NULL);
    ck_assert_int_eq(r.status, 200);
    char v[128];
    ck_assert(raw_header(&r, "Content-Length", v, sizeof v));
    ck_assert_uint_eq(strtoull(v, NULL, 10), f.size);
    ck_assert(raw_header(&r, "ETag", v, sizeof v));
    ck_assert_str_eq(v, f.etag);
    ck_assert_uint_eq(r.body_len, 0);
    r = raw_request(&d, "HEAD", f.path, "Range: bytes=0-9");
    ck_assert_int_eq(r.status, 206);
    ck_assert(raw_header(&r, "Content-Range", v, sizeof v));
    ck_assert_uint_eq(r.body_len, 0);
    r = raw_request(&d, "HEAD", "/healthz", NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.body_len, 0);
    r = raw_request(&d, "HEAD", "/v1/jobs/999", NULL); /* errors too: no body */
    ck_assert_int_eq(r.status, 404);
    ck_assert_uint_eq(r.body_len, 0);
    qdp_stop(&d);
}
END_TEST

/* The route's pattern with its parameters filled ({id} -> 1, others -> x). */
static void fill(const char *pattern, char *out, size_t len)
{
    size_t at = 0;
    for (const char *p = pattern; *p && at + 2 < len;) {
        if (*p == '{') {
            at +=
                (size_t)snprintf(out + at, len - at, "%s", strncmp(p, "{id}", 4) == 0 ? "1" : "x");
            p = strchr(p, '}') + 1;
        } else {
            out[at++] = *p++;
        }
    }
    out[at] = '\0';
}

static long status_as(qdp *d, const char *method, const char *path, const char *token)
{
    const char *saved = d->token;
    d->token = token;
    qdp_resp r = qdp_req(d, method, path, NULL, NULL, 0, NULL);
    d->token = saved;
    long st = r.status;
    if (strcmp(method, "HEAD") == 0) ck_assert_uint_eq(r.len, 0);
    qdp_resp_free(&r);
    return st;
}

static char *make_token(qdp *d, const char *role)
{
    char *out = NULL;
    const char *args[] = {"token", "create", "--role", role, "--name", role, NULL};
    ck_assert_int_eq(qdp_run(d, &out, NULL, args), 0);
    out[strcspn(out, "\n")] = '\0';
    return out;
}

/* Every GET route answers HEAD with GET's status, with no token and with each role's. */
START_TEST(test_head_every_get_route)
{
    qdp d;
    qdp_start(&d, NULL);
    const char *roles[] = {"reader", "trainer", "operator"};
    char *tok[4] = {NULL};
    for (int i = 0; i < 3; i++) tok[i + 1] = make_token(&d, roles[i]);
    size_t gets = 0;
    for (size_t k = 0; k < qd_n_routes; k++) {
        if (strcmp(qd_routes[k].method, "GET") != 0) continue;
        gets++;
        char path[256];
        fill(qd_routes[k].pattern, path, sizeof path);
        for (int i = 0; i < 4; i++) {
            long g = status_as(&d, "GET", path, tok[i]), h = status_as(&d, "HEAD", path, tok[i]);
            ck_assert_msg(g == h, "%s as %s: GET %ld, HEAD %ld", path, i ? roles[i - 1] : "nobody",
                          g, h);
            ck_assert_msg(h != 405, "HEAD %s: 405", path);
        }
    }
    ck_assert_uint_ge(gets, 10);
    /* 405: Allow lists HEAD where GET is, and HEAD where there is no GET is refused */
    d.token = tok[3];
    qdp_resp r = qdp_req(&d, "PATCH", "/v1/jobs", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 405);
    char *allow = qdp_header(&r, "allow");
    ck_assert_str_eq(allow, "POST, GET, HEAD");
    free(allow);
    qdp_resp_free(&r);
    r = qdp_req(&d, "HEAD", "/v1/tokens/x", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 405);
    allow = qdp_header(&r, "allow");
    ck_assert_str_eq(allow, "DELETE");
    free(allow);
    qdp_resp_free(&r);
    r = qdp_req(&d, "POST", "/v1/jobs/1/report", "application/json", "{}", 2, NULL);
    ck_assert_int_eq(r.status, 405);
    allow = qdp_header(&r, "allow");
    ck_assert_str_eq(allow, "GET, HEAD");
    free(allow);
    qdp_resp_free(&r);
    for (int i = 1; i < 4; i++) free(tok[i]);
    qdp_stop(&d);
}
END_TEST

/* ---- control characters in the URL ------------------------------------------------------------
 */

/* An encoded NUL (or any control character) in the path or a query argument: 400 invalid before
 * routing, where it used to cut the path ("/v1/jobs/1%00/output" served job 1). */
START_TEST(test_encoded_nul)
{
    qdp d;
    qdp_start(&d, NULL);
    job_file f;
    finished_job(&d, &f);
    char target[128];
    raw_reply r = raw_request(&d, "GET", f.path, NULL);
    ck_assert_int_eq(r.status, 200);
    /* /v1/jobs/ID%00/output served job ID */
    snprintf(target, sizeof target, "/v1/jobs/%lld%%00/output", f.id);
    r = raw_request(&d, "GET", target, NULL);
    ck_assert_msg(r.status == 400, "%s: %d", target, r.status);
    snprintf(target, sizeof target, "/v1/jobs/%lld/output%%00.txt", f.id);
    r = raw_request(&d, "GET", target, NULL);
    ck_assert_msg(r.status == 400, "%s: %d", target, r.status);
    static const char *const bad[] = {
        "/healthz%00",
        "/healthz%00x",
        "/%00",
        "/healthz%01",
        "/healthz%0a",
        "/healthz%0D%0AX-Injected:%201",
        "/healthz%1f",
        "/healthz%7f",
        "/healthz%7F",
        "/v1/jobs?state=queued%00x",
        "/v1/jobs?sta%00te=queued",
        "/v1/jobs?state=%0a",
        "/v1/jobs?x=1&state=queued%00",
        "/v1/jobs?%00",
        "/v1/jobs?limit=1%09",
        /* raw: libmicrohttpd lets them through */
        "/healthz\x01",
        "/v1/jobs?state=queued\x7f",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = raw_request(&d, "GET", bad[i], NULL);
        ck_assert_msg(r.status == 400, "GET %s: %d", bad[i], r.status);
        ck_assert_msg(strstr(r.body, "\"code\":\"invalid\""), "GET %s: %s", bad[i], r.body);
        r = raw_request(&d, "HEAD", bad[i], NULL);
        ck_assert_msg(r.status == 400, "HEAD %s: %d", bad[i], r.status);
    }
    /* refused before routing and before the body: a POST with a body gets 400 too */
    r = raw_request(&d, "POST", "/v1/jobs?ruleset=a%00b", "Content-Length: 0");
    ck_assert_int_eq(r.status, 400);
    r = raw_request(&d, "DELETE", "/v1/rulesets/int8%00", NULL);
    ck_assert_int_eq(r.status, 400);
    /* the error through curl (it sends %00 as it is) */
    qdp_resp c = qdp_req(&d, "GET", "/healthz%00", NULL, NULL, 0, NULL);
    ck_assert_int_eq(c.status, 400);
    json_t *doc = qdp_json(&c);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(doc, "error"), "code")),
                     "invalid");
    json_decref(doc);
    qdp_resp_free(&c);
    /* other escapes still decode: %69 is 'i', %2e%2e%2f walks nowhere, '+' in a query is ' ' */
    static const struct {
        const char *target;
        int status;
    } ok[] = {
        {"/v1/rulesets/%69nt8", 200},
        {"/v1/rulesets/int8%20", 400}, /* "int8 " is not a name */
        {"/v1/jobs?state=%71ueued", 200},
        {"/v1/jobs?state=queued+", 400}, /* "queued " is no state */
        {"/healthz%", 404},              /* a lone '%' stays as it is */
        {"/healthz%zz", 404},
        {"/v1/jobs/1/outputs/%2e%2e%2fquantd.db", 404},
        {"/v1/jobs?state=%c3%a9", 400}, /* UTF-8 is not a control character */
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        r = raw_request(&d, "GET", ok[i].target, NULL);
        ck_assert_msg(r.status == ok[i].status, "GET %s: %d, wanted %d", ok[i].target, r.status,
                      ok[i].status);
    }
    /* the job is still there, and the refusals were counted as unmatched requests */
    r = raw_request(&d, "GET", f.path, NULL);
    ck_assert_int_eq(r.status, 200);
    qdp_resp m = qdp_req(&d, "GET", "/metrics", NULL, NULL, 0, NULL);
    ck_assert_ptr_nonnull(strstr(m.body, "route=\"unmatched\",method=\"GET\",status=\"400\"}"));
    qdp_resp_free(&m);
    qdp_stop(&d);
}
END_TEST

/* ---- metrics ----------------------------------------------------------------------------------
 */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every sample line's name and labels (the line up to its last space) occurs once. */
static void assert_unique_samples(const char *text)
{
    char *copy = strdup(text);
    ck_assert_ptr_nonnull(copy);
    size_t n = 0, cap = 1024;
    char **keys = malloc(cap * sizeof *keys);
    ck_assert_ptr_nonnull(keys);
    for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#' || line[0] == '\0') continue;
        char *sp = strrchr(line, ' ');
        ck_assert_msg(sp != NULL, "sample without a value: %s", line);
        *sp = '\0';
        if (n == cap) {
            cap *= 2;
            keys = realloc(keys, cap * sizeof *keys);
            ck_assert_ptr_nonnull(keys);
        }
        keys[n++] = line;
    }
    ck_assert_uint_gt(n, 20);
    qsort(keys, n, sizeof *keys, cmp_str);
    for (size_t i = 1; i < n; i++)
        ck_assert_msg(strcmp(keys[i - 1], keys[i]) != 0, "duplicate sample: %s", keys[i]);
    free(keys);
    free(copy);
}

START_TEST(test_metrics_methods)
{
    qdp d;
    qdp_start(&d, NULL);
    /* one pattern, several methods: GET and POST /v1/jobs, PUT/GET/DELETE a rule set */
    static const struct {
        const char *method, *path, *type, *body;
    } reqs[] = {
        {"GET", "/v1/jobs", NULL, NULL},
        {"POST", "/v1/jobs", "application/json", "{}"},
        {"PUT", "/v1/rulesets/a", "application/json", "{\"rules\":[]}"},
        {"GET", "/v1/rulesets/a", NULL, NULL},
        {"HEAD", "/v1/rulesets/a", NULL, NULL},
        {"DELETE", "/v1/rulesets/a", NULL, NULL},
        {"GET", "/v1/rulesets/a", NULL, NULL},
        {"GET", "/nope", NULL, NULL},
        {"POST", "/nope", "application/json", "{}"},
        {"PATCH", "/v1/jobs", NULL, NULL},
        {"BREW", "/v1/jobs", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        qdp_resp r = qdp_req(&d, reqs[i].method, reqs[i].path, reqs[i].type, reqs[i].body,
                             reqs[i].body ? strlen(reqs[i].body) : 0, NULL);
        qdp_resp_free(&r);
    }
    static const char *const want[] = {
        "quantd_http_requests_total{route=\"/v1/jobs\",method=\"GET\",status=\"200\"} 1\n",
        "quantd_http_requests_total{route=\"/v1/jobs\",method=\"POST\",status=\"400\"} 1\n",
        "quantd_http_requests_total{route=\"/v1/rulesets/{name}\",method=\"GET\",status=\"200\"} "
        "2\n", /* GET and HEAD: HEAD is served by the GET route */
        "quantd_http_requests_total{route=\"/v1/rulesets/{name}\",method=\"GET\",status=\"404\"} "
        "1\n",
        "quantd_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1\n",
        "quantd_http_requests_total{route=\"unmatched\",method=\"POST\",status=\"404\"} 1\n",
        "quantd_http_requests_total{route=\"unmatched\",method=\"PATCH\",status=\"405\"} 1\n",
        "quantd_http_requests_total{route=\"unmatched\",method=\"other\",status=\"405\"} 1\n",
        "quantd_http_request_duration_seconds_count{route=\"/v1/jobs\",method=\"POST\"} 1\n",
        "quantd_http_request_duration_seconds_bucket{route=\"/v1/jobs\",method=\"GET\",le=\"+Inf\"}"
        " 1\n",
    };
    /* a request is counted once its reply has gone out: the scrape may come first */
    size_t missing = 0;
    for (double t0 = kit_now(); kit_now() - t0 < 10; kit_sleep_ms(50)) {
        qdp_resp r = qdp_req(&d, "GET", "/metrics", NULL, NULL, 0, NULL);
        ck_assert_int_eq(r.status, 200);
        assert_unique_samples(r.body);
        missing = 0;
        while (missing < sizeof want / sizeof want[0] && strstr(r.body, want[missing])) missing++;
        qdp_resp_free(&r);
        if (missing == sizeof want / sizeof want[0]) break;
    }
    ck_assert_msg(missing == sizeof want / sizeof want[0], "no %s in /metrics", want[missing]);
    qdp_stop(&d);
}
END_TEST

/* The exposition of every route and every unmatched method at once has no duplicate. */
START_TEST(test_metrics_render_unique)
{
    const char *names[64], *methods[64];
    for (size_t i = 0; i < qd_n_routes; i++) {
        names[i] = qd_routes[i].name;
        methods[i] = qd_routes[i].method;
    }
    qd_metrics *m = qd_metrics_new(names, methods, qd_n_routes);
    ck_assert_ptr_nonnull(m);
    static const char *const verbs[] = {"GET",     "HEAD",  "POST",    "PUT",  "DELETE", "PATCH",
                                        "OPTIONS", "TRACE", "CONNECT", "BREW", ""};
    static const unsigned statuses[] = {200, 304, 400, 404, 405, 418, 500};
    for (size_t i = 0; i <= qd_n_routes; i++)
        for (size_t v = 0; v < sizeof verbs / sizeof verbs[0]; v++)
            for (size_t s = 0; s < sizeof statuses / sizeof statuses[0]; s++)
                qd_metrics_request(m, i, verbs[v], statuses[s], 0.002 * (double)s);
    int64_t jobs[QD_JOB_STATE_COUNT] = {0};
    char *text = qd_metrics_render(m, jobs);
    ck_assert_ptr_nonnull(text);
    assert_unique_samples(text);
    ck_assert_ptr_nonnull(strstr(text, "{route=\"unmatched\",method=\"TRACE\",status=\"404\"}"));
    ck_assert_ptr_nonnull(strstr(text, "{route=\"unmatched\",method=\"other\",status=\"other\"}"));
    free(text);
    qd_metrics_free(m);
}
END_TEST

/* libmicrohttpd 0.9.75 answered "100 Continue" to a request announcing no body, then spun a
 * pool thread at full CPU when more bytes followed on the connection (and dropped a GET's
 * answer): such a request gets 400 at once, and the connection is closed. */
START_TEST(test_expect_without_body)
{
    qdp d;
    qdp_start(&d, NULL);
    static const char *const heads[] = {
        "PUT /v1/rulesets/x HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n",
        ("POST /v1/jobs?ruleset=int8 HTTP/1.1\r\nHost: h\r\n"
         "Content-Type: application/octet-stream\r\nContent-Length: 0\r\n"),
        "GET /healthz HTTP/1.1\r\nHost: h\r\n",
    };
    double cpu0 = cpu_seconds(d.pid);
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        char req[1024];
        snprintf(req, sizeof req,
                 "%sExpect: 100-continue\r\n\r\n"
                 "GET /readyz HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                 heads[i]);
        const char *ans = raw_exchange(&d, req);
        ck_assert_msg(strncmp(ans, "HTTP/1.1 400 ", 13) == 0, "%s: %.300s", heads[i], ans);
        ck_assert_msg(strstr(ans, "\"field\":\"Expect\""), "%.300s", ans);
        ck_assert_msg(!strstr(ans, "100 Continue"), "%.300s", ans);
        /* libmicrohttpd closes after an early answer: the request behind it is not read */
        ck_assert_msg(strstr(ans, "Connection: close\r\n"), "%.300s", ans);
    }
    /* a request with a body and Expect is taken as before (libcurl sends it with uploads) */
    job_file f;
    finished_job(&d, &f);
    const char *with_body = raw_exchange(
        &d, "PUT /v1/rulesets/e HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
            "Expect: 100-continue\r\nConnection: close\r\nContent-Length: 54\r\n\r\n"
            "{\"rules\":[{\"module_path\":\".*\",\"weight_qtype\":\"int8\"}]}");
    ck_assert_msg(strstr(with_body, "HTTP/1.1 201 "), "%.300s", with_body);
    /* no thread left spinning: the daemon idles */
    usleep(200 * 1000);
    double cpu1 = cpu_seconds(d.pid);
    usleep(1000 * 1000);
    double idle = cpu_seconds(d.pid) - cpu1;
    ck_assert_msg(idle < 0.3, "quantd used %.2f s of CPU in 1 s idle (%.2f s before)", idle,
                  cpu1 - cpu0);
    qdp_stop(&d);
}
END_TEST

/* Error messages quote what the client sent; bytes that are not UTF-8 there made the JSON error
 * unbuildable, the request went unanswered and libmicrohttpd called the handler again at full
 * CPU for good (found by tests/fuzz/fuzz_http.c). They become '?'. */
START_TEST(test_non_utf8_echo)
{
    qdp d;
    qdp_start(&d, NULL);
    double cpu0 = cpu_seconds(d.pid);
    const char *ans = raw_exchange(&d, "PUT /v1/rulesets/x HTTP/1.1\r\nHost: h\r\n"
                                       "Content-Type: text/\xf3\xff\xc0\x80x\r\n"
                                       "Content-Length: 2\r\nConnection: close\r\n\r\n{}");
    ck_assert_msg(strncmp(ans, "HTTP/1.1 415 ", 13) == 0, "%.300s", ans);
    ck_assert_msg(strstr(ans, "not text/????x\""), "%.400s", ans);
    raw_reply r = raw_request(&d, "POST", "/v1/jobs?ruleset=%F3%80",
                              "Content-Type: application/octet-stream\r\nContent-Length: 1");
    ck_assert_msg(r.status == 422 || r.status == 400, "%d %s", r.status, r.body);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    ck_assert_msg(j != NULL, "not JSON: %s", r.body);
    json_decref(j);
    usleep(1000 * 1000);
    double used = cpu_seconds(d.pid) - cpu0;
    ck_assert_msg(used < 0.5, "quantd used %.2f s of CPU in about 1 s", used);
    qdp_stop(&d);
}
END_TEST

Suite *suite_http(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("daemon");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_ranges);
    tcase_add_test(tc, test_if_none_match);
    tcase_add_test(tc, test_head_outputs);
    tcase_add_test(tc, test_head_every_get_route);
    tcase_add_test(tc, test_encoded_nul);
    tcase_add_test(tc, test_expect_without_body);
    tcase_add_test(tc, test_non_utf8_echo);
    tcase_add_test(tc, test_metrics_methods);
    tcase_add_test(tc, test_metrics_render_unique);
    suite_add_tcase(s, tc);
    return s;
}
