/* test_limits.c -- the limits that must hold under abuse, through the real quantd and raw
 * sockets: slow clients cut off while others are served (header_timeout, body_min_rate),
 * half-closed clients let go at once, the per-address connection limit, the places every aborted
 * connection gives back (max_connections, max_connections_per_ip), the in-memory body budget
 * under 16 slow large posts (503 and a bound on RSS), the queue cap (429), the disk reserve (507),
 * uploads refused from their headers alone, retention of finished jobs' outputs (410), and the
 * quantd_connections_open gauge.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"

#define SHARD "tests/data/stories260K-bf16-sharded/model-00001-of-00002.safetensors"
#define RULES "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]}"
#define MIB   (1024L * 1024L)
#define POST1 "{\"stats\":{\"a\":{\"absmax\":[1]}}}"

/* Under ThreadSanitizer (make check-tsan) quantd's RSS holds its shadow memory, several times
 * what it allocates: the memory bound is left to the other lanes. */
#if defined(__SANITIZE_THREAD__)
#define RSS_MEANINGFUL 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RSS_MEANINGFUL 0
#endif
#endif
#ifndef RSS_MEANINGFUL
#define RSS_MEANINGFUL 1
#endif

/* ---- raw HTTP -------------------------------------------------------------------------------- */

/* What the server sent within ms (NUL-terminated in buf): > 0 bytes, 0 when it closed the
 * connection, -1 when it sent nothing in time. */
static ssize_t read_within(int fd, char *buf, size_t len, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    double end = kit_now() + ms / 1000.0;
    size_t at = 0;
    while (at + 1 < len) {
        int left = (int)((end - kit_now()) * 1000);
        if (left <= 0 || poll(&p, 1, left) <= 0) break;
        ssize_t k = recv(fd, buf + at, len - 1 - at, 0);
        if (k <= 0) {
            buf[at] = '\0';
            return at ? (ssize_t)at : 0; /* closed (or reset) */
        }
        at += (size_t)k;
        if (strstr(buf, "\r\n\r\n") && at > 12) break; /* the head of a reply is enough */
    }
    buf[at] = '\0';
    return at ? (ssize_t)at : -1;
}

/* The status of a reply in buf, 0 if none. */
static int status_in(const char *buf)
{
    int st = 0;
    return sscanf(buf, "HTTP/1.1 %d", &st) == 1 ? st : 0;
}

/* Headers of a request with a body of `length` bytes (no body). */
static int open_request(const qdp *d, const char *method, const char *path, const char *type,
                        unsigned long long length)
{
    int fd = qdp_raw_connect(d);
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\n"
                     "Content-Length: %llu\r\n\r\n",
                     method, path, type, length);
    ck_assert(qdp_send_all(fd, head, (size_t)n));
    return fd;
}

/* ---- slow clients -----------------------------------------------------------------------------
 */

/* 40 connections that never finish their headers, one that sends a byte every 200 ms: all cut
 * after header_timeout (1 s here) while a normal client is served throughout. */
START_TEST(test_slow_headers)
{
    qdp d;
    qdp_start(&d, (const char *[]){"--header-timeout", "1", "--max-connections-per-ip", "0",
                                   "--idle-timeout", "2", NULL});
    enum { N = 40 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = qdp_raw_connect(&d);
        ck_assert(qdp_send_all(fds[i], "GET /healthz HTTP/1.1\r\n", 23));
    }
    int drip = qdp_raw_connect(&d);
    const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    double t0 = kit_now();
    bool drip_cut = false;
    for (size_t i = 0; !drip_cut && i < strlen(req) && kit_now() - t0 < 6; i++) {
        drip_cut = !qdp_send_all(drip, req + i, 1);
        qdp_resp r = qdp_req(&d, "GET", "/healthz", NULL, NULL, 0, NULL); /* others served */
        ck_assert_int_eq(r.status, 200);
        qdp_resp_free(&r);
        char buf[64];
        if (!drip_cut && read_within(drip, buf, sizeof buf, 200) == 0) drip_cut = true;
    }
    ck_assert_msg(drip_cut, "a client sending a byte every 200 ms was not cut off");
    double cut_after = kit_now() - t0;
    ck_assert_msg(cut_after < 3.0, "cut after %.1f s (header_timeout 1)", cut_after);
    for (int i = 0; i < N; i++) {
        char buf[64];
        ck_assert_msg(read_within(fds[i], buf, sizeof buf, 2000) == 0, "slow connection %d open",
                      i);
        close(fds[i]);
    }
    close(drip);
    /* kept alive after a request: the next one's headers within idle + header timeouts */
    int ka = qdp_raw_connect(&d);
    char buf[4096];
    ck_assert(qdp_send_all(ka, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 34));
    ck_assert(read_within(ka, buf, sizeof buf, 2000) > 0);
    ck_assert_int_eq(status_in(buf), 200);
    t0 = kit_now();
    bool cut = false;
    while (!cut && kit_now() - t0 < 8) {
        cut = !qdp_send_all(ka, "G", 1) || read_within(ka, buf, sizeof buf, 500) == 0;
    }
    ck_assert_msg(cut && kit_now() - t0 < 5, "kept-alive trickler cut after %.1f s",
                  kit_now() - t0);
    close(ka);
    /* the log and the metrics say which limit */
    qdp_resp r = qdp_req(&d, "GET", "/metrics", NULL, NULL, 0, NULL);
    const char *key = "quantd_limit_hits_total{limit=\"header_timeout\"} ";
    const char *at = strstr(r.body, key);
    ck_assert_msg(at && atol(at + strlen(key)) >= N + 2, "%s", at ? at : r.body);
    qdp_resp_free(&r);
    qdp_stop(&d);
}
END_TEST

/* A body trickled below body_min_rate after its grace is cut; a normal post is not. */
/* A client that shuts its sending side is done: once its requests are answered (or when its
 * request can no longer complete), its connection is closed within a sweep or two instead of
 * being held for idle_timeout or header_timeout; a kept-alive client that has not shut its side
 * keeps its connection. */
START_TEST(test_half_closed)
{
    qdp d;
    qdp_start(&d, NULL); /* header_timeout 10 s, idle_timeout 60 s */
    static const char *const reqs[] = {
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",   /* answered, then closed */
        "PUT /v1/rulesets/a HTTP/1.1\r\nHost: x\r\n", /* headers cut short */
    };
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        int fd = qdp_raw_connect(&d);
        double t0 = kit_now();
        ck_assert(qdp_send_all(fd, reqs[i], strlen(reqs[i])));
        ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
        char buf[4096];
        ssize_t k = read_within(fd, buf, sizeof buf, 3000);
        if (i == 0) {
            ck_assert_msg(k > 0 && status_in(buf) == 200, "%zd: %s", k, k > 0 ? buf : "");
            k = read_within(fd, buf, sizeof buf, 3000);
        }
        ck_assert_msg(k == 0, "request %zu: the connection stayed open (%zd)", i, k);
        ck_assert_msg(kit_now() - t0 < 2.5, "closed after %.1f s", kit_now() - t0);
        close(fd);
    }
    int ka = qdp_raw_connect(&d);
    char buf[4096];
    for (int round = 0; round < 2; round++) {
        ck_assert(qdp_send_all(ka, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 34));
        ck_assert_int_gt(read_within(ka, buf, sizeof buf, 2000), 0);
        ck_assert_int_eq(status_in(buf), 200);
        usleep(1200 * 1000); /* several sweeps */
    }
    close(ka);
    qdp_stop(&d);
}
END_TEST

START_TEST(test_slow_body)
{
    qdp d;
    qdp_start(&d, (const char *[]){"--body-timeout", "1", "--body-min-rate", "1K", NULL});
    int fd = open_request(&d, "POST", "/v1/models/m/stats", "application/json", 100000);
    double t0 = kit_now();
    bool cut = false;
    char buf[256];
    while (!cut && kit_now() - t0 < 6) {
        cut = !qdp_send_all(fd, " ", 1) || read_within(fd, buf, sizeof buf, 200) == 0;
        qdp_resp r = qdp_req(&d, "POST", "/v1/models/m/stats", "application/json", POST1,
                             strlen(POST1), NULL);
        ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
        qdp_resp_free(&r);
    }
    ck_assert_msg(cut, "a body at 5 bytes/s was not cut");
    ck_assert_msg(kit_now() - t0 < 3.5, "cut after %.1f s", kit_now() - t0);
    close(fd);
    qdp_stop(&d);
}
END_TEST

/* max_connections_per_ip: the next connection from the address is closed at once; one more is
 * taken when one ends. */
START_TEST(test_per_ip_limit)
{
    qdp d;
    qdp_start(&d, (const char *[]){"--max-connections-per-ip", "3", NULL});
    int held[3];
    for (int i = 0; i < 3; i++) held[i] = qdp_raw_connect(&d);
    kit_sleep_ms(200);
    int extra = qdp_raw_connect(&d);
    char buf[256];
    qdp_send_all(extra, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 34);
    ck_assert_int_eq(read_within(extra, buf, sizeof buf, 2000), 0); /* closed, no answer */
    close(extra);
    close(held[0]);
    kit_sleep_ms(300);
    int again = qdp_raw_connect(&d);
    ck_assert(qdp_send_all(again, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 34));
    ck_assert(read_within(again, buf, sizeof buf, 2000) > 0);
    ck_assert_int_eq(status_in(buf), 200);
    close(again);
    close(held[1]);
    close(held[2]);
    qdp_stop(&d);
    /* max_connections: all addresses together */
    qdp_start(&d,
              (const char *[]){"--max-connections", "4", "--max-connections-per-ip", "0", NULL});
    int all[4];
    for (int i = 0; i < 4; i++) all[i] = qdp_raw_connect(&d);
    kit_sleep_ms(200);
    extra = qdp_raw_connect(&d);
    qdp_send_all(extra, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 34);
    ck_assert_int_eq(read_within(extra, buf, sizeof buf, 2000), 0);
    close(extra);
    for (int i = 0; i < 4; i++) close(all[i]);
    kit_sleep_ms(600); /* the guard's sweep logs and counts the refusal */
    qdp_resp r = qdp_req(&d, "GET", "/metrics", NULL, NULL, 0, NULL);
    ck_assert_msg(strstr(r.body, "quantd_limit_hits_total{limit=\"max_connections\"} 1"), "%s",
                  strstr(r.body, "quantd_limit_hits_total"));
    qdp_resp_free(&r);
    qdp_stop(&d);
}
END_TEST

/* quantd_connections_open (read when it reaches `want` within 5 s; the scrape's own connection
 * counts), or the last value read. */
static long connections_open_reaches(qdp *d, long want)
{
    const char *key = "\nquantd_connections_open ";
    long v = -1;
    for (double t0 = kit_now(); kit_now() - t0 < 5; kit_sleep_ms(50)) {
        qdp_resp r = qdp_req(d, "GET", "/metrics", NULL, NULL, 0, NULL);
        ck_assert_int_eq(r.status, 200);
        const char *at = strstr(r.body, key);
        ck_assert_msg(at && strstr(r.body, "# TYPE quantd_connections_open gauge\n"), "%s", r.body);
        v = atol(at + strlen(key));
        qdp_resp_free(&r);
        if (v == want) break;
    }
    return v;
}

/* The gauge counts open connections: 1 at idle (the scrape itself), 1 + 3 while three raw
 * connections are held open, 1 again once they have closed. */
START_TEST(test_connections_open_gauge)
{
    qdp d;
    qdp_start(&d, NULL);
    ck_assert_int_eq(connections_open_reaches(&d, 1), 1);
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = qdp_raw_connect(&d);
        ck_assert_int_ge(fds[i], 0);
    }
    ck_assert_int_eq(connections_open_reaches(&d, 4), 4);
    for (int i = 0; i < 3; i++) close(fds[i]);
    ck_assert_int_eq(connections_open_reaches(&d, 1), 1);
    qdp_stop(&d);
}
END_TEST

/* ---- aborted connections ---------------------------------------------------------------------
 *
 * Every way a client can end a connection gives back its place in max_connections and in its
 * address's max_connections_per_ip: a count left behind would, repeated, lock the address (or
 * everyone) out. Each kind below is done twice the limit over, then the limit's worth of clients
 * must all be served at once (a single count kept would refuse the last of them).
 */

#define ABORT_LIMIT "4"
#define PUT_HEAD    "PUT /v1/rulesets/a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
#define STATS_HEAD                                                                                 \
    "POST /v1/models/m/stats HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"            \
    "Content-Length: 30\r\n\r\n"
#define UPLOAD_HEAD                                                                                \
    "POST /v1/jobs?ruleset=int8 HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n" \
    "Content-Length: 100000\r\n\r\n"

#define BYTES(s) s, sizeof s - 1

typedef enum abort_end { END_CLOSE, END_RST, END_HALF } abort_end;

static const struct {
    const char *name;
    const char *bytes; /* sent first (NULL: nothing), len of them */
    size_t len;
    int copies;  /* of bytes, back to back (pipelined) */
    int wait_ms; /* before the end, for the server to read or answer */
    abort_end end;
} abort_kinds[] = {
    {"closed before any byte", NULL, 0, 0, 0, END_CLOSE},
    {"reset before any byte", NULL, 0, 0, 50, END_RST},
    {"closed mid-headers", BYTES("GET /healthz HTTP/1.1\r\nHo"), 1, 0, END_CLOSE},
    {"reset mid-headers", BYTES("GET /healthz HTTP/1.1\r\nHo"), 1, 50, END_RST},
    {"half-closed mid-headers", BYTES("GET /healthz HTTP/1.1\r\nHo"), 1, 0, END_HALF},
    {"closed mid-body", BYTES(PUT_HEAD "Content-Length: 100\r\n\r\n{\"ru"), 1, 50, END_CLOSE},
    {"reset mid-body", BYTES(PUT_HEAD "Content-Length: 100\r\n\r\n{\"ru"), 1, 50, END_RST},
    {"closed mid-chunk", BYTES(PUT_HEAD "Transfer-Encoding: chunked\r\n\r\n9\r\n{\"ru"), 1, 50,
     END_CLOSE},
    {"closed mid-upload", BYTES(UPLOAD_HEAD "\x08\0\0\0\0\0\0\0{}"), 1, 50, END_CLOSE},
    {"reset mid-upload", BYTES(UPLOAD_HEAD "\x08\0\0\0\0\0\0\0{}"), 1, 50, END_RST},
    {"closed after the response, unread", BYTES("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), 1, 100,
     END_CLOSE},
    {"closed with responses unread (pipelined)", BYTES("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
     40, 100, END_CLOSE},
    {"reset with responses unread (pipelined)", BYTES("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
     40, 100, END_RST},
    {"closed while its post waits for a commit", BYTES(STATS_HEAD POST1), 1, 0, END_CLOSE},
    {"reset while its post waits for a commit", BYTES(STATS_HEAD POST1), 1, 0, END_RST},
};

static void abort_one(const qdp *d, size_t kind)
{
    int fd = qdp_raw_connect(d);
    for (int i = 0; i < abort_kinds[kind].copies; i++)
        if (!qdp_send_all(fd, abort_kinds[kind].bytes, abort_kinds[kind].len))
            break; /* refused at accept while earlier ones close */
    if (abort_kinds[kind].wait_ms) kit_sleep_ms(abort_kinds[kind].wait_ms);
    if (abort_kinds[kind].end == END_RST) {
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    } else if (abort_kinds[kind].end == END_HALF) {
        shutdown(fd, SHUT_WR);
    }
    close(fd);
}

/* n clients at once, each answered 200 on /healthz. */
static bool all_served(const qdp *d, int n)
{
    int fds[16];
    bool ok = true;
    ck_assert_int_le(n, 16);
    for (int i = 0; i < n; i++) {
        fds[i] = qdp_raw_connect(d);
        ok = qdp_send_all(fds[i], "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 34) && ok;
    }
    for (int i = 0; i < n; i++) {
        char buf[512];
        ok = read_within(fds[i], buf, sizeof buf, 2000) > 0 && status_in(buf) == 200 && ok;
    }
    for (int i = 0; i < n; i++) close(fds[i]);
    return ok;
}

START_TEST(test_aborted_connections)
{
    qdp d;
    qdp_start(&d, (const char *[]){"--max-connections", ABORT_LIMIT, "--max-connections-per-ip",
                                   ABORT_LIMIT, NULL});
    int limit = atoi(ABORT_LIMIT);
    qdp_resp r =
        qdp_req(&d, "PUT", "/v1/rulesets/int8", "application/json", RULES, strlen(RULES), NULL);
    ck_assert_int_lt(r.status, 300);
    qdp_resp_free(&r);
    for (size_t k = 0; k < sizeof abort_kinds / sizeof abort_kinds[0]; k++) {
        for (int i = 0; i < 2 * limit; i++) abort_one(&d, k);
        /* the daemon sees each end within a sweep or two; then nothing may be counted */
        double t0 = kit_now();
        bool served = false;
        while (!served && kit_now() - t0 < 5) {
            served = all_served(&d, limit);
            if (!served) kit_sleep_ms(250);
        }
        ck_assert_msg(served,
                      "%d connections %s: %d clients at once are not all served 5 s on "
                      "(max_connections and max_connections_per_ip %d)",
                      2 * limit, abort_kinds[k].name, limit, limit);
    }
    qdp_stop(&d);
}
END_TEST

/* ---- memory -----------------------------------------------------------------------------------
 */

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

/* 16 posts of 32 MiB each send 30 MiB and stall: max_body_memory (64M) admits two, the others
 * get 503 + Retry-After at once, and quantd's RSS grows by less than the budget + 32 MiB. */
START_TEST(test_body_budget)
{
    qdp d;
    qdp_start(&d, (const char *[]){"--max-body-memory", "64M", "--max-stats-body", "32M", NULL});
    kit_sleep_ms(200);
    long before = rss_kib(d.pid);
    enum { N = 16 };
    int fds[N], admitted = 0, busy = 0;
    char *chunk = malloc(30 * MIB);
    ck_assert_ptr_nonnull(chunk);
    memset(chunk, ' ', 30 * MIB);
    for (int i = 0; i < N; i++) {
        fds[i] = open_request(&d, "POST", "/v1/models/m/stats", "application/json", 32 * MIB);
        char buf[1024];
        ssize_t n = read_within(fds[i], buf, sizeof buf, 300);
        if (n > 0) {
            ck_assert_int_eq(status_in(buf), 503);
            ck_assert_msg(strstr(buf, "Retry-After: 2") || strstr(buf, "retry-after: 2"), "%s",
                          buf);
            n = read_within(fds[i], buf, sizeof buf, 1000);
            busy++;
            continue;
        }
        admitted++;
        ck_assert(qdp_send_all(fds[i], chunk, 30 * MIB));
    }
    ck_assert_int_eq(admitted, 2);
    ck_assert_int_eq(busy, N - 2);
    kit_sleep_ms(300);
    long grown = rss_kib(d.pid) - before;
    ck_assert_msg(grown < (64 + 32) * 1024 || !RSS_MEANINGFUL, "RSS grew by %ld KiB", grown);
    /* the error names the limit */
    qdp_resp r = qdp_req(&d, "POST", "/v1/models/m/stats", "application/json", "{}", 2, NULL);
    ck_assert_int_eq(r.status, 503);
    ck_assert_msg(strstr(r.body, "\"limit\":\"max_body_memory\""), "%s", r.body);
    qdp_resp_free(&r);
    for (int i = 0; i < N; i++) close(fds[i]);
    kit_sleep_ms(300); /* the stalled requests end: their share comes back */
    r = qdp_req(&d, "POST", "/v1/models/m/stats", "application/json", POST1, strlen(POST1), NULL);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    free(chunk);
    qdp_stop(&d);
}
END_TEST

/* Without Content-Length the budget is taken as the body grows: past it, 503 at its end. */
START_TEST(test_body_budget_chunked)
{
    qdp d;
    qdp_start(&d, (const char *[]){"--max-body-memory", "1M", "--max-stats-body", "1M",
                                   "--max-json-body", "1M", NULL});
    int hold = open_request(&d, "POST", "/v1/models/m/stats", "application/json", 900 * 1024);
    char buf[512];
    ck_assert_int_eq(read_within(hold, buf, sizeof buf, 300), -1); /* admitted, waiting */
    char *file = kit_join(d.root, "post.bin");
    FILE *f = fopen(file, "wb");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 300 * 1024; i++) fputc(' ', f);
    fclose(f);
    qdp_resp r = qdp_upload_mode(&d, "/v1/models/m/stats", file, true);
    ck_assert_msg(r.status == 503 && strstr(r.body, "max_body_memory"), "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    close(hold);
    free(file);
    qdp_stop(&d);
}
END_TEST

/* A statistics post of `values` zeros as JSON ("0," each: two bytes of body, eight parsed). */
static char *zeros_post(long values)
{
    const char head[] = "{\"stats\":{\"act\":{\"absmax\":[", tail[] = "]}}}";
    size_t len = sizeof head - 1 + (size_t)values * 2 + sizeof tail;
    char *body = malloc(len);
    ck_assert_ptr_nonnull(body);
    char *p = memcpy(body, head, sizeof head - 1);
    p += sizeof head - 1;
    for (long i = 0; i < values; i++, p += 2) memcpy(p, i + 1 < values ? "0," : "0 ", 2);
    memcpy(p, tail, sizeof tail);
    return body;
}

/* The parsed statistics count against max_body_memory in the body's place: 300,000 zeros are
 * 600 KB of JSON but 2.4 MB of doubles, more than a 1M budget allows any request (413 naming
 * max_body_memory, nothing stored); 50,000 zeros (100 KB, 400 KB parsed) fit a free budget but
 * not the 200 KiB another request leaves of it (503 + Retry-After), and are stored once it ends.
 * Counting only the body, both were stored. */
START_TEST(test_parsed_stats_budget)
{
    qdp d;
    qdp_start(&d, (const char *[]){"--max-body-memory", "1M", "--max-stats-body", "1M",
                                   "--max-json-body", "1M", NULL});
    char *big = zeros_post(300000);
    qdp_resp r =
        qdp_req(&d, "POST", "/v1/models/m/stats", "application/json", big, strlen(big), NULL);
    ck_assert_msg(r.status == 413 && strstr(r.body, "\"limit\":\"max_body_memory\"") &&
                      strstr(r.body, "take 2400"),
                  "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    r = qdp_req(&d, "GET", "/v1/models/m/stats", NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 404, "nothing stored: %ld %s", r.status, r.body);
    qdp_resp_free(&r);
    int hold = open_request(&d, "POST", "/v1/models/m/stats", "application/json", 824 * 1024);
    char buf[512];
    ck_assert_int_eq(read_within(hold, buf, sizeof buf, 300), -1); /* admitted, waiting */
    char *mid = zeros_post(50000);
    r = qdp_req(&d, "POST", "/v1/models/m/stats", "application/json", mid, strlen(mid), NULL);
    ck_assert_msg(r.status == 503 && strstr(r.body, "\"limit\":\"max_body_memory\"") &&
                      strstr(r.body, "needs 400"),
                  "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    close(hold);
    /* the held request ends and its share comes back (within a few seconds, also under TSan) */
    for (int tries = 0;; tries++) {
        r = qdp_req(&d, "POST", "/v1/models/m/stats", "application/json", mid, strlen(mid), NULL);
        if (r.status != 503 || tries == 50) break;
        qdp_resp_free(&r);
        kit_sleep_ms(100);
    }
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    free(big);
    free(mid);
    qdp_stop(&d);
}
END_TEST

/* ---- jobs -------------------------------------------------------------------------------------
 */

static void put_rules(qdp *d)
{
    qdp_resp r =
        qdp_req(d, "PUT", "/v1/rulesets/int8", "application/json", RULES, strlen(RULES), NULL);
    ck_assert_int_lt(r.status, 300);
    qdp_resp_free(&r);
}

/* The reply to an upload's headers alone (the body never sent). */
static int upload_refused(qdp *d, const char *path_and_query, char *buf, size_t len)
{
    int fd = open_request(d, "POST", path_and_query, "application/octet-stream", 256 * MIB);
    ssize_t n = read_within(fd, buf, len, 3000);
    close(fd);
    return n > 0 ? status_in(buf) : 0;
}

/* A shard's header is held in memory until its job exists: max_body_memory counts it. With 1 KiB
 * of the budget left (another request holds the rest), the upload of a shard whose header is
 * 2936 bytes is 503 naming max_body_memory and makes no job; once the budget is free it runs. */
START_TEST(test_upload_header_budget)
{
    qdp d;
    qdp_start(&d, (const char *[]){"--max-body-memory", "1M", "--max-stats-body", "1M",
                                   "--max-json-body", "1M", NULL});
    put_rules(&d);
    int hold = open_request(&d, "POST", "/v1/models/m/stats", "application/json", 1023 * 1024);
    char buf[512];
    ck_assert_int_eq(read_within(hold, buf, sizeof buf, 300), -1); /* admitted, waiting */
    qdp_resp r = qdp_upload(&d, "/v1/jobs?ruleset=int8", SHARD);
    ck_assert_msg(r.status == 503 && strstr(r.body, "max_body_memory"), "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    r = qdp_req(&d, "GET", "/v1/jobs", NULL, NULL, 0, NULL);
    ck_assert_msg(strstr(r.body, "\"jobs\":[]"), "%s", r.body);
    qdp_resp_free(&r);
    close(hold);
    kit_sleep_ms(100);
    r = qdp_upload(&d, "/v1/jobs?ruleset=int8", SHARD);
    ck_assert_msg(r.status == 202, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    qdp_stop(&d);
}
END_TEST

/* An upload is refused from its URL and headers, before any of its 256 MiB is sent. */
START_TEST(test_upload_refused_early)
{
    qdp d;
    qdp_start(&d, NULL);
    put_rules(&d);
    char buf[4096];
    ck_assert_int_eq(upload_refused(&d, "/v1/jobs?ruleset=nope", buf, sizeof buf), 422);
    ck_assert_msg(strstr(buf, "unknown_ruleset"), "%s", buf);
    ck_assert_int_eq(upload_refused(&d, "/v1/jobs?ruleset=int8&layout=ggml", buf, sizeof buf), 400);
    ck_assert_int_eq(upload_refused(&d, "/v1/jobs?ruleset=int8&layout=gguf", buf, sizeof buf), 422);
    ck_assert_msg(strstr(buf, "server-side source"), "%s", buf);
    ck_assert_int_eq(upload_refused(&d, "/v1/jobs?ruleset=int8&stats_model=m", buf, sizeof buf),
                     422);
    ck_assert_msg(strstr(buf, "unknown_stats_model"), "%s", buf);
    ck_assert_int_eq(upload_refused(&d, "/v1/jobs", buf, sizeof buf), 400);
    int fd = open_request(&d, "POST", "/v1/models/.bad/stats", "application/json", 256 * MIB);
    ck_assert(read_within(fd, buf, sizeof buf, 3000) > 0);
    ck_assert_int_eq(status_in(buf), 400);
    close(fd);
    fd = open_request(&d, "POST", "/v1/models/m/stats", "text/csv", 256 * MIB);
    ck_assert(read_within(fd, buf, sizeof buf, 3000) > 0);
    ck_assert_int_eq(status_in(buf), 415);
    close(fd);
    /* over the route's body limit: 413 naming the setting, in the reply and the log */
    fd = open_request(&d, "POST", "/v1/models/m/stats", "application/json", 65 * MIB);
    ck_assert(read_within(fd, buf, sizeof buf, 3000) > 0);
    ck_assert_int_eq(status_in(buf), 413);
    close(fd);
    char *log = kit_join(d.root, "quantd.log");
    bool logged = false;
    for (int tries = 0; !logged && tries < 40; tries++, kit_sleep_ms(50)) { /* logged at its end */
        FILE *lf = fopen(log, "r");
        ck_assert_ptr_nonnull(lf);
        char line[4096];
        while (fgets(line, sizeof line, lf))
            logged = logged || (strstr(line, "status=413") && strstr(line, "limit=max_stats_body"));
        fclose(lf);
    }
    ck_assert_msg(logged, "no request line with status=413 limit=max_stats_body in %s", log);
    free(log);
    qdp_stop(&d);
}
END_TEST

/* min_free_disk: an upload or a job that would eat into the reserve gets 507 up front. */
START_TEST(test_disk_reserve)
{
    char *src = qdt_tmpdir();
    qdp d;
    qdp_start(&d, (const char *[]){"--min-free-disk", "1000T", "--source-root", src, NULL});
    put_rules(&d);
    char buf[4096];
    ck_assert_int_eq(upload_refused(&d, "/v1/jobs?ruleset=int8", buf, sizeof buf), 507);
    ck_assert_msg(strstr(buf, "\"limit\":\"min_free_disk\""), "%s", buf);
    char body[2048];
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"%s\"}}", src);
    qdp_resp r = qdp_req(&d, "POST", "/v1/jobs", "application/json", body, strlen(body), NULL);
    ck_assert_msg(r.status == 507, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    qdp_stop(&d);
    kit_rmtree(src);
    free(src);
}
END_TEST

static long long post_job(qdp *d, const char *body, long want, qdp_resp *keep)
{
    qdp_resp r = qdp_req(d, "POST", "/v1/jobs", "application/json", body, strlen(body), NULL);
    ck_assert_msg(r.status == want, "POST /v1/jobs %s: %ld %s", body, r.status, r.body);
    long long id = 0;
    if (want == 202) {
        json_t *j = qdp_json(&r);
        id = json_integer_value(json_object_get(j, "id"));
        json_decref(j);
    }
    if (keep)
        *keep = r;
    else
        qdp_resp_free(&r);
    return id;
}

/* max_queued_jobs: with one job running and one queued, the next gets 429 (uploads before their
 * body). */
START_TEST(test_queue_cap)
{
    char *src = qdt_tmpdir(), *big = kit_join(src, "big.safetensors");
    qdt_make_big(big, 8, 8192);
    setenv("QUANTD_QUANT_THREADS", "1", 1);
    qdp d;
    qdp_start(&d, (const char *[]){"--workers", "1", "--max-queued-jobs", "1", "--source-root", src,
                                   NULL});
    unsetenv("QUANTD_QUANT_THREADS");
    put_rules(&d);
    char body[2048];
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"%s\"}}", big);
    long long a = post_job(&d, body, 202, NULL);
    json_decref(qdp_wait_state(&d, a, "running", 30));
    long long b = post_job(&d, body, 202, NULL);
    qdp_resp r;
    post_job(&d, body, 429, &r);
    char *after = qdp_header(&r, "retry-after");
    ck_assert_msg(after && atoi(after) > 0, "Retry-After: %s", after);
    ck_assert_msg(strstr(r.body, "\"limit\":\"max_queued_jobs\""), "%s", r.body);
    free(after);
    qdp_resp_free(&r);
    char buf[4096];
    ck_assert_int_eq(upload_refused(&d, "/v1/jobs?ruleset=int8", buf, sizeof buf), 429);
    char path[64];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "/v1/jobs/%lld", i ? a : b);
        qdp_resp c = qdp_req(&d, "DELETE", path, NULL, NULL, 0, NULL);
        ck_assert_int_lt(c.status, 300);
        qdp_resp_free(&c);
    }
    json_decref(qdp_wait_job(&d, a, 60));
    qdp_stop(&d);
    kit_rmtree(src);
    free(big);
    free(src);
}
END_TEST

static long long upload_job(qdp *d)
{
    qdp_resp r = qdp_upload(d, "/v1/jobs?ruleset=int8", SHARD);
    ck_assert_msg(r.status == 202, "%ld %s", r.status, r.body);
    json_t *j = qdp_json(&r);
    long long id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    qdp_resp_free(&r);
    json_t *done = qdp_wait_job(d, id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(done, "state")), "succeeded");
    json_decref(done);
    return id;
}

static long get_status(qdp *d, long long id, const char *what, const char *has)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%lld%s", id, what);
    qdp_resp r = qdp_req(d, "GET", path, NULL, NULL, 0, NULL);
    if (has) ck_assert_msg(strstr(r.body, has), "GET %s: %s lacks %s", path, r.body, has);
    long st = r.status;
    qdp_resp_free(&r);
    return st;
}

/* job_retention: outputs go after it (410, report and row kept); keep_outputs: the newest N. */
START_TEST(test_retention)
{
    qdp d;
    qdp_start(&d, (const char *[]){"--job-retention", "2", NULL});
    put_rules(&d);
    long long a = upload_job(&d);
    ck_assert_int_eq(get_status(&d, a, "/output", NULL), 200);
    ck_assert_int_eq(get_status(&d, a, "", "\"outputs_removed_at\":null"), 200);
    double t0 = kit_now();
    while (get_status(&d, a, "/output", NULL) == 200 && kit_now() - t0 < 10) kit_sleep_ms(200);
    ck_assert_int_eq(get_status(&d, a, "/output", "\"limit\":\"retention\""), 410);
    ck_assert_int_eq(get_status(&d, a, "/outputs/model.safetensors", NULL), 410);
    ck_assert_int_eq(get_status(&d, a, "/report", "\"tensors\""), 200);
    ck_assert_int_eq(get_status(&d, a, "", "\"outputs_removed_at\":\"20"), 200);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/jobs/%lld", d.data_dir, a);
    ck_assert_msg(access(dir, F_OK) != 0, "%s is still there", dir);
    qdp_stop(&d);

    qdp_start(&d, (const char *[]){"--keep-outputs", "1", NULL});
    put_rules(&d);
    long long b = upload_job(&d), c = upload_job(&d);
    t0 = kit_now();
    while (get_status(&d, b, "/output", NULL) == 200 && kit_now() - t0 < 10) kit_sleep_ms(100);
    ck_assert_int_eq(get_status(&d, b, "/output", NULL), 410);
    ck_assert_int_eq(get_status(&d, c, "/output", NULL), 200);
    qdp_stop(&d);
}
END_TEST

/* One quantd per data directory: a second one on it refuses to start naming the first's PID
 * (so it cannot take the first's running jobs for interrupted ones), and starts once the first
 * has gone, however it went. */
START_TEST(test_one_process_per_data_dir)
{
    qdp d;
    qdp_start(&d, NULL);
    char *out = NULL, *err = NULL;
    int rc = qdp_run(&d, &out, &err, (const char *[]){"--listen", "127.0.0.1:0", NULL});
    ck_assert_int_eq(rc, 1);
    char want[64];
    snprintf(want, sizeof want, "in use by another quantd (pid %d)", (int)d.pid);
    ck_assert_msg(strstr(err, want), "%s", err);
    free(out);
    free(err);
    rc = qdp_run(&d, &out, &err, (const char *[]){"migrate", NULL});
    ck_assert_int_eq(rc, 1); /* no schema change under a running server */
    free(out);
    free(err);
    rc = qdp_run(&d, &out, &err, (const char *[]){"token", "list", NULL});
    ck_assert_int_eq(rc, 0); /* tokens are managed while it runs */
    free(out);
    free(err);
    ck_assert_int_eq(qdp_signal(&d, SIGKILL), 128 + SIGKILL);
    qdp_restart(&d, NULL); /* the kernel dropped the dead one's lock */
    qdp_resp r = qdp_req(&d, "GET", "/healthz", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    qdp_resp_free(&r);
    qdp_stop(&d);
}
END_TEST

Suite *suite_limits(void)
{
    Suite *s = suite_create("limits");
    TCase *tc = tcase_create("limits");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_slow_headers);
    tcase_add_test(tc, test_slow_body);
    tcase_add_test(tc, test_half_closed);
    tcase_add_test(tc, test_per_ip_limit);
    tcase_add_test(tc, test_connections_open_gauge);
    tcase_add_test(tc, test_aborted_connections);
    tcase_add_test(tc, test_body_budget);
    tcase_add_test(tc, test_body_budget_chunked);
    tcase_add_test(tc, test_parsed_stats_budget);
    tcase_add_test(tc, test_upload_refused_early);
    tcase_add_test(tc, test_upload_header_budget);
    tcase_add_test(tc, test_disk_reserve);
    tcase_add_test(tc, test_queue_cap);
    tcase_add_test(tc, test_retention);
    tcase_add_test(tc, test_one_process_per_data_dir);
    suite_add_tcase(s, tc);
    return s;
}
