/* qdproc.c -- starts and stops the real quantd for the integration tests, and a small libcurl
 * client for talking to it.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"

static const char *quantd_bin(void)
{
    return getenv("QUANTD_BIN") ? getenv("QUANTD_BIN") : "build/bin/quantd";
}

/* Forks quantd on d's data directory at log level debug, its stderr appended to log. */
static pid_t launch(qdp *d, const char *const *extra, const char *port_file, const char *log)
{
    kit_quantd_opts o = {.bin = quantd_bin(),
                         .data_dir = d->data_dir,
                         .port_file = port_file,
                         .log_level = "debug",
                         .extra = extra,
                         .log_file = log};
    pid_t pid = kit_quantd_spawn(&o);
    ck_assert_msg(pid > 0, "cannot start %s: %s", o.bin, strerror(errno));
    return pid;
}

/* Starts quantd on d's data directory, its log appended to root/quantd.log; waits for its port. */
static void spawn(qdp *d, const char *const *extra)
{
    char *port_file = kit_join(d->root, "port"), *log = kit_join(d->root, "quantd.log");
    d->pid = launch(d, extra, port_file, log);
    int status = 0;
    d->port = kit_quantd_wait_port(d->pid, port_file, 20, &status);
    if (d->port < 0) ck_abort_msg("quantd exited at start (status %d); see %s", status, log);
    ck_assert_msg(d->port > 0, "quantd did not listen within 20 s; see %s", log);
    snprintf(d->base, sizeof d->base, "%s://127.0.0.1:%d", d->ca_file ? "https" : "http", d->port);
    free(port_file);
    free(log);
}

void qdp_start(qdp *d, const char *const *extra)
{
    memset(d, 0, sizeof *d);
    d->root = qdt_tmpdir();
    d->data_dir = kit_join(d->root, "var");
    spawn(d, extra);
}

void qdp_start_tls(qdp *d, const char *const *extra, const char *ca_file)
{
    memset(d, 0, sizeof *d);
    d->root = qdt_tmpdir();
    d->data_dir = kit_join(d->root, "var");
    d->ca_file = ca_file;
    spawn(d, extra);
}

void qdp_restart(qdp *d, const char *const *extra)
{
    spawn(d, extra);
}

int qdp_signal(qdp *d, int sig)
{
    int status = kit_quantd_stop(d->pid, sig, 30);
    ck_assert_msg(status >= 0, "quantd did not exit within 30 s of signal %d: %s", sig,
                  strerror(errno));
    d->pid = 0;
    return kit_exit_code(status);
}

void qdp_stop(qdp *d)
{
    if (d->pid) ck_assert_int_eq(qdp_signal(d, SIGTERM), 0);
    ck_assert_msg(kit_rmtree(d->root) == 0, "cannot remove %s", d->root);
    free(d->root);
    free(d->data_dir);
}

/* ---- HTTP -------------------------------------------------------------------------------------
 */

typedef struct sink {
    char *p;
    size_t len;
} sink;

static size_t collect(char *ptr, size_t size, size_t n, void *user)
{
    sink *s = user;
    size_t k = size * n;
    char *q = realloc(s->p, s->len + k + 1);
    ck_assert_ptr_nonnull(q);
    memcpy(q + s->len, ptr, k);
    s->p = q;
    s->len += k;
    s->p[s->len] = '\0';
    return k;
}

/* The file's text ("" when it cannot be read), malloc'd. */
static char *slurp(const char *path)
{
    char *text = kit_read_file(path, NULL);
    return text ? text : strdup("");
}

int qdp_run(qdp *d, char **out, char **errout, const char *const *args)
{
    char *o = kit_join(d->root, "run.out"), *e = kit_join(d->root, "run.err");
    const char *argv[40] = {quantd_bin()};
    int n = 1;
    for (int i = 0; args && args[i] && n < 35; i++) argv[n++] = args[i];
    const char *tail[] = {"--config", "/dev/null", "--data-dir", d->data_dir, NULL};
    for (int i = 0; tail[i]; i++) argv[n++] = tail[i];
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(o, "w", stdout) || !freopen(e, "w", stderr)) _exit(126);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    if (out) *out = slurp(o);
    if (errout) *errout = slurp(e);
    unlink(o);
    unlink(e);
    free(o);
    free(e);
    return kit_exit_code(status);
}

static qdp_resp perform(qdp *d, CURL *c, struct curl_slist *hdrs)
{
    if (d->token) {
        char auth[512];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", d->token);
        hdrs = curl_slist_append(hdrs, auth);
    }
    if (d->ca_file) curl_easy_setopt(c, CURLOPT_CAINFO, d->ca_file);
    sink body = {calloc(1, 1), 0}, head = {calloc(1, 1), 0};
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &head);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    CURLcode rc = curl_easy_perform(c);
    qdp_resp r = {0, body.p, body.len, head.p};
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    /* quantd answers a refused upload from its headers and closes while curl may still be
     * sending: curl then reports a send error, but the answer was read */
    bool answered_early = rc == CURLE_SEND_ERROR && r.status >= 400;
    ck_assert_msg(rc == CURLE_OK || answered_early, "curl: %s", curl_easy_strerror(rc));
    for (char *line = r.headers; *line;) { /* lower-case the names, not the values */
        char *p = line;
        for (; *p && *p != ':' && *p != '\r'; p++) *p = (char)tolower((unsigned char)*p);
        char *eol = strstr(p, "\r\n");
        line = eol ? eol + 2 : p + strlen(p);
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return r;
}

static CURL *open_url(qdp *d, const char *method, const char *path)
{
    CURL *c = curl_easy_init();
    ck_assert_ptr_nonnull(c);
    char url[1024];
    snprintf(url, sizeof url, "%s%s", d->base, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    return c;
}

qdp_resp qdp_req(qdp *d, const char *method, const char *path, const char *content_type,
                 const void *body, size_t len, const char *extra_header)
{
    CURL *c = open_url(d, method, path);
    struct curl_slist *h = curl_slist_append(NULL, "Expect:");
    if (content_type) {
        char ct[256];
        snprintf(ct, sizeof ct, "Content-Type: %s", content_type);
        h = curl_slist_append(h, ct);
    }
    if (extra_header) h = curl_slist_append(h, extra_header);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    }
    return perform(d, c, h);
}

qdp_resp qdp_req_headers(qdp *d, const char *method, const char *path, const char *h1,
                         const char *h2)
{
    CURL *c = open_url(d, method, path);
    struct curl_slist *h = curl_slist_append(NULL, h1);
    h = curl_slist_append(h, h2);
    return perform(d, c, h);
}

qdp_resp qdp_upload(qdp *d, const char *path_and_query, const char *file)
{
    return qdp_upload_mode(d, path_and_query, file, false);
}

qdp_resp qdp_upload_mode(qdp *d, const char *path_and_query, const char *file, bool chunked)
{
    FILE *f = fopen(file, "rb");
    ck_assert_msg(f != NULL, "%s", file);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    CURL *c = open_url(d, "POST", path_and_query);
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READDATA, f);
    if (!chunked) curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/octet-stream");
    h = curl_slist_append(h, "Expect:");
    qdp_resp r = perform(d, c, h);
    fclose(f);
    return r;
}

void qdp_resp_free(qdp_resp *r)
{
    free(r->body);
    free(r->headers);
    memset(r, 0, sizeof *r);
}

char *qdp_header(const qdp_resp *r, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = r->headers; p && *p;) {
        const char *eol = strstr(p, "\r\n");
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len > n && strncmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ') v++;
            return strndup(v, len - (size_t)(v - p));
        }
        p = eol ? eol + 2 : p + len;
    }
    return NULL;
}

json_t *qdp_json(const qdp_resp *r)
{
    json_error_t je;
    json_t *doc = json_loadb(r->body, r->len, 0, &je);
    ck_assert_msg(doc != NULL, "not JSON (%s): %.300s", je.text, r->body);
    return doc;
}

json_t *qdp_get_job(qdp *d, long long id)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", id);
    qdp_resp r = qdp_req(d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "GET %s: %ld %s", path, r.status, r.body);
    json_t *j = qdp_json(&r);
    qdp_resp_free(&r);
    return j;
}

json_t *qdp_wait_job(qdp *d, long long id, double timeout_s)
{
    double t0 = kit_now();
    for (;;) {
        json_t *j = qdp_get_job(d, id);
        const char *st = json_string_value(json_object_get(j, "state"));
        bool over =
            strcmp(st, "queued") != 0 && strcmp(st, "running") != 0 && strcmp(st, "receiving") != 0;
        if (over || kit_now() - t0 > timeout_s) return j;
        json_decref(j);
        kit_sleep_ms(20);
    }
}

json_t *qdp_wait_state(qdp *d, long long id, const char *state, double timeout_s)
{
    double t0 = kit_now();
    for (;;) {
        json_t *j = qdp_get_job(d, id);
        if (strcmp(json_string_value(json_object_get(j, "state")), state) == 0) return j;
        ck_assert_msg(kit_now() - t0 < timeout_s, "job %lld: still %s after %.0f s, wanted %s", id,
                      json_string_value(json_object_get(j, "state")), timeout_s, state);
        json_decref(j);
        kit_sleep_ms(5);
    }
}

/* ---- a start expected to fail -----------------------------------------------------------------
 */

int qdp_start_fail(qdp *d, const char *const *extra, char **log)
{
    memset(d, 0, sizeof *d);
    d->root = qdt_tmpdir();
    d->data_dir = kit_join(d->root, "var");
    char *port_file = kit_join(d->root, "port"), *log_path = kit_join(d->root, "quantd.log");
    pid_t pid = launch(d, extra, port_file, log_path);
    int status = 0;
    if (kit_quantd_wait_port(pid, port_file, 20, &status) >= 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ck_abort_msg("quantd started, but it should have refused to; see %s", log_path);
    }
    if (log) *log = slurp(log_path);
    free(port_file);
    free(log_path);
    return kit_exit_code(status);
}

int qdp_raw_connect(const qdp *d)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

bool qdp_send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        c += k;
        n -= (size_t)k;
    }
    return true;
}
