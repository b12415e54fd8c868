/* fuzz_http.c -- libFuzzer harness of quantd as a client reaches it: the whole daemon (store,
 * statistics, tokens, workers, housekeeping, HTTP on a loopback port) runs in this process,
 * started once under the harness's temporary directory, and each input is sent as raw bytes on a
 * fresh connection, followed by a last request of the harness's own (GET /healthz with
 * "Connection: close", so the daemon closes as soon as it has answered what it can, rather than
 * when the connection guard notices the shut write side a sweep or two later), then the write
 * side is shut and the answer read until the daemon closes.
 *
 * The input is one or more HTTP/1.1 requests with bodies. Markers make mutated inputs mean
 * something: "@SRC@" becomes the source root (a small safetensors file model.safetensors, a
 * directory ckpt with it and a config.json, a directory ckpt-link where tokenizer.json is a link
 * to /etc/passwd, and passwd.safetensors, another); "@OP@", "@READER@"
 * and "@TRAINER@" tokens of those roles (made at start, and again whenever an input revoked
 * one: tokens exist, so every route but the health checks asks for one); "@JOB@" the id of the
 * last job a Location header named (1 before any); "@LEN@" the number of bytes from the blank
 * line after it to the next "@END@" (removed) or the end, so Content-Length follows the body
 * the fuzzer changed, request by request.
 *
 * What must hold for every input: the daemon answers within 10 s (or closes without a word),
 * and once the exchange has ended its connection guard counts no connection and no address;
 * what it sends starts with an HTTP/1.x status line; no answer is a 500; no answer contains the
 * data directory's path, the harness's tokens or the content of a file outside the source root
 * (/etc/passwd's first line) unless a request to this daemon carried them (the daemon keeps
 * what clients post, statistics' activation names for one, and answers it back later; and
 * libFuzzer learns the data directory's path from the comparisons that take it out of error
 * messages, so an input may post it and a later GET show it). Unlike
 * the other harnesses this one is not deterministic: jobs run on the workers while later inputs
 * arrive, so an input may take another path when replayed alone. The daemon stops at exit.
 * FUZZ_HTTP_SHOW=1 in the environment prints every answer.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "app.h"
#include "app_run.h"
#include "config.h"
#include "fsutil.h"
#include "fuzz.h"
#include "http.h"
#include "log.h"
#include "tokens.h"

#define ANSWER_MAX     (8u << 20) /* read at most this much of an answer */
#define ANSWER_SECONDS 10

static struct {
    qd_config cfg;
    qd_app app;
    qd_http *http;
    int port;
    char src[4200];   /* the source root as the client names it */
    char passwd[256]; /* /etc/passwd's first line, "" if unreadable */
    char tokens[3][QD_TOKEN_LEN + 1];
    char job[24]; /* @JOB@: the last job created */
    bool told[5]; /* per secret of check_answer: a request so far carried it where the daemon
                     may keep it (anywhere but an Authorization header) */
} d = {.job = "1"};

/* The harness's tokens: marker, name, role (d.tokens[i] holds the secret). */
static const struct {
    const char *marker, *name;
    qd_role role;
} token_table[3] = {{"@OP@", "fuzz-operator", QD_ROLE_OPERATOR},
                    {"@READER@", "fuzz-reader", QD_ROLE_READER},
                    {"@TRAINER@", "fuzz-trainer", QD_ROLE_TRAINER}};

/* Makes (again) each harness token an input revoked, or never made. */
static void ensure_tokens(void)
{
    for (int i = 0; i < 3; i++) {
        qd_token_check c = QD_TOKEN_UNKNOWN;
        qd_token_info who;
        qd_err err;
        if (d.tokens[i][0] && qd_tokens_check(d.app.tokens, d.tokens[i], &c, &who, &err) == QD_OK &&
            c == QD_TOKEN_VALID && who.role == token_table[i].role)
            continue;
        qd_tokens_revoke(d.app.tokens, token_table[i].name, &err); /* whatever holds the name */
        d.told[2 + i] = false;                                     /* a new secret, never sent */
        qd_token_info info;
        if (qd_tokens_create(d.app.tokens, token_table[i].name, token_table[i].role, 0, d.tokens[i],
                             &info, &err) != QD_OK) {
            fprintf(stderr, "fuzz_http: cannot make a token: %s\n", err.message);
            abort();
        }
    }
}

static void stop_daemon(void)
{
    qd_app_stop(&d.app, d.http);
    qd_app_close(&d.app);
    qd_config_free(&d.cfg);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f && fwrite(data, 1, n, f) == n && fclose(f) == 0);
}

/* A 4x8 F32 tensor named model.layers.0.mlp.up_proj.weight, laid out as safetensors. */
static void write_model(const char *path)
{
    static const char header[] = "{\"model.layers.0.mlp.up_proj.weight\":{\"dtype\":\"F32\","
                                 "\"shape\":[4,8],\"data_offsets\":[0,128]}}";
    size_t hlen = sizeof header - 1, padded = (hlen + 7) & ~(size_t)7;
    unsigned char buf[8 + 256 + 128];
    FUZZ_CHECK(padded <= 256);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, header, hlen);
    memset(buf + 8 + hlen, ' ', padded - hlen);
    float w[32]; /* little-endian on every machine this builds for */
    for (int i = 0; i < 32; i++) w[i] = (float)(i - 16) / 8.0f;
    memcpy(buf + 8 + padded, w, sizeof w);
    write_file(path, buf, 8 + padded + 128);
}

static void make_source(const char *tmp)
{
    char p[4300];
    snprintf(d.src, sizeof d.src, "%s/src", tmp);
    FUZZ_CHECK(mkdir(d.src, 0700) == 0);
    snprintf(p, sizeof p, "%s/model.safetensors", d.src);
    write_model(p);
    snprintf(p, sizeof p, "%s/ckpt", d.src);
    FUZZ_CHECK(mkdir(p, 0700) == 0);
    snprintf(p, sizeof p, "%s/ckpt/model.safetensors", d.src);
    write_model(p);
    snprintf(p, sizeof p, "%s/ckpt/config.json", d.src);
    write_file(p, "{\"model_type\": \"llama\"}\n", 24);
    snprintf(p, sizeof p, "%s/passwd.safetensors", d.src);
    FUZZ_CHECK(symlink("/etc/passwd", p) == 0);
    snprintf(p, sizeof p, "%s/ckpt-link", d.src);
    FUZZ_CHECK(mkdir(p, 0700) == 0);
    snprintf(p, sizeof p, "%s/ckpt-link/model.safetensors", d.src);
    write_model(p);
    snprintf(p, sizeof p, "%s/ckpt-link/tokenizer.json", d.src);
    FUZZ_CHECK(symlink("/etc/passwd", p) == 0);
    FILE *f = fopen("/etc/passwd", "r");
    if (f) {
        if (!fgets(d.passwd, sizeof d.passwd, f)) d.passwd[0] = '\0';
        d.passwd[strcspn(d.passwd, "\n")] = '\0';
        fclose(f);
    }
}

static void start_daemon(void)
{
    fuzz_clear_quantd_env();
    const char *tmp = fuzz_tmpdir();
    FUZZ_CHECK(tmp);
    signal(SIGPIPE, SIG_IGN);
    make_source(tmp);
    char data[4200], conf[4200];
    snprintf(data, sizeof data, "%s/data", tmp);
    snprintf(conf, sizeof conf, "%s/quantd.conf", tmp);
    write_file(conf, "", 0);
    char *argv[] = {"quantd",      "--config",
                    conf,          "--data-dir",
                    data,          "--listen",
                    "127.0.0.1:0", "--workers",
                    "1",           "--quant-threads",
                    "1",           "--http-threads",
                    "2",           "--max-upload",
                    "256K",        "--max-json-body",
                    "64K",         "--max-stats-body",
                    "64K",         "--max-body-memory",
                    "4M",          "--min-free-disk",
                    "1M",          "--max-queued-jobs",
                    "8",           "--header-timeout",
                    "5",           "--body-timeout",
                    "5",           "--source-root",
                    d.src,         "--log-level",
                    "error",       NULL};
    int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
    qd_command cmd;
    bool exit_now = false;
    char msg[512];
    if (!qd_config_load(&d.cfg, argc, argv, &cmd, &exit_now, stdout, msg, sizeof msg)) {
        fprintf(stderr, "fuzz_http: %s\n", msg);
        abort();
    }
    qd_log_set_level(d.cfg.log_level);
    d.app.cfg = &d.cfg;
    qd_err err;
    const char *what = "cannot open the store";
    if (qd_mkdir(d.cfg.data_dir, 0700, &err) != QD_OK ||
        qd_store_open(d.cfg.db_path, &d.app.store, &err) != QD_OK ||
        qd_app_start(&d.app, &d.http, &d.port, &what, &err) != QD_OK) {
        fprintf(stderr, "fuzz_http: %s: %s\n", what, err.message);
        abort();
    }
    atexit(stop_daemon); /* runs before the temporary directory is removed */
}

/* The text a marker at data[0..left) stands for, *k its length; NULL when none starts there. */
static const char *marker_at(const uint8_t *data, size_t left, size_t *k)
{
    const struct {
        const char *marker, *text;
    } fixed[] = {{"@SRC@", d.src}, {"@JOB@", d.job}};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        if (left >= 5 && memcmp(data, fixed[i].marker, 5) == 0) {
            *k = 5;
            return fixed[i].text;
        }
    }
    for (int i = 0; i < 3; i++) {
        size_t m = strlen(token_table[i].marker);
        if (left >= m && memcmp(data, token_table[i].marker, m) == 0) {
            *k = m;
            return d.tokens[i];
        }
    }
    return NULL;
}

/* The input with @SRC@, @JOB@ and the token markers replaced (malloc'd, *n its length). */
static char *expand_names(const uint8_t *data, size_t size, size_t *n)
{
    size_t cap = 1, k = 0;
    for (size_t i = 0; i < size; i++) {
        const char *with = data[i] == '@' ? marker_at(data + i, size - i, &k) : NULL;
        cap += with ? strlen(with) : 1;
    }
    char *out = malloc(cap);
    FUZZ_CHECK(out);
    size_t at = 0;
    for (size_t i = 0; i < size;) {
        const char *with = data[i] == '@' ? marker_at(data + i, size - i, &k) : NULL;
        if (with) {
            memcpy(out + at, with, strlen(with));
            at += strlen(with);
            i += k;
        } else {
            out[at++] = (char)data[i++];
        }
    }
    *n = at;
    return out;
}

/* Bytes from the blank line after at to the next "@END@" (or the end of in[0..len)). */
static size_t body_length(const char *in, size_t len, size_t at)
{
    const char *blank = memmem(in + at, len - at, "\r\n\r\n", 4);
    if (!blank) return 0;
    const char *body = blank + 4, *end = memmem(body, (size_t)(in + len - body), "@END@", 5);
    return (size_t)((end ? end : in + len) - body);
}

/* The input with every marker replaced: "@LEN@" by the length of the body after it (up to the
 * next "@END@", which goes), the others by expand_names(). Malloc'd, NUL-terminated. */
static char *expand(const uint8_t *data, size_t size, size_t *n)
{
    size_t len = 0, lens = 0;
    char *in = expand_names(data, size, &len);
    for (const char *p = in; (p = memmem(p, len - (size_t)(p - in), "@LEN@", 5)); p += 5) lens++;
    char *out = malloc(len + 20 * lens + 1); /* a length has at most 20 digits */
    FUZZ_CHECK(out);
    size_t at = 0;
    for (size_t i = 0; i < len;) {
        if (len - i >= 5 && memcmp(in + i, "@END@", 5) == 0) {
            i += 5;
        } else if (len - i >= 5 && memcmp(in + i, "@LEN@", 5) == 0) {
            at += (size_t)sprintf(out + at, "%zu", body_length(in, len, i + 5));
            i += 5;
        } else {
            out[at++] = in[i++];
        }
    }
    out[at] = '\0';
    free(in);
    *n = at;
    return out;
}

/* The job an answer's Location names becomes @JOB@. */
static void note_job(const char *ans, size_t n)
{
    static const char loc[] = "Location: /v1/jobs/";
    const char *p = memmem(ans, n, loc, sizeof loc - 1);
    if (!p) return;
    p += sizeof loc - 1;
    size_t k = 0;
    while (k < sizeof d.job - 1 && p + k < ans + n && p[k] >= '0' && p[k] <= '9') k++;
    if (k == 0 || k == sizeof d.job - 1) return;
    memcpy(d.job, p, k);
    d.job[k] = '\0';
}

/* What the kernel holds on the tuple of a connect that failed (the client's port to the
 * daemon's, either way round: /proc/net/tcp's lines, state in hex: 01 established, 02 SYN sent,
 * 06 TIME_WAIT, 08 CLOSE_WAIT...), with the guard's counts, so that a failure in CI says which
 * side kept the connection. */
static void report_connect_failure(int fd, int err)
{
    struct sockaddr_in me = {0};
    socklen_t len = sizeof me;
    unsigned port = 0, open = 0, addresses = 0;
    if (getsockname(fd, (struct sockaddr *)&me, &len) == 0) port = ntohs(me.sin_port);
    qd_http_conn_counts(d.http, &open, &addresses);
    fprintf(stderr,
            "fuzz_http: connect from port %u to the daemon's %d failed (%s); the guard counts %u "
            "connections, %u addresses\n",
            port, d.port, strerror(err), open, addresses);
    FILE *f = fopen("/proc/net/tcp", "r");
    char line[512], a[32], b[32];
    snprintf(a, sizeof a, ":%04X %08X:%04X", port, 0x0100007Fu, (unsigned)d.port);
    snprintf(b, sizeof b, ":%04X %08X:%04X", (unsigned)d.port, 0x0100007Fu, port);
    while (f && fgets(line, sizeof line, f))
        if (port && (strstr(line, a) || strstr(line, b))) fprintf(stderr, "  %s", line);
    if (f) fclose(f);
}

/* The handshake of a connect(2) a signal interrupted goes on in the kernel: wait for its end
 * (POLLOUT) and take its result (SO_ERROR); 0 once connected, else an errno. */
static int finish_connect(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int k;
    while ((k = poll(&p, 1, ANSWER_SECONDS * 1000)) < 0 && errno == EINTR) continue;
    if (k == 0) return ETIMEDOUT;
    if (k < 0) return errno;
    int err = 0;
    socklen_t len = sizeof err;
    return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : errno;
}

/* A connection to the daemon; a failure is reported with the kernel's view of its tuple and
 * ends the run. libFuzzer's SIGALRM (every -timeout/2 + 1 s, 6 s here) interrupts whatever this
 * thread is doing, and a connect(2) or send(2) on a socket with a timeout (SO_SNDTIMEO) is never
 * restarted (signal(7)): it fails with EINTR. The connect used to end the run then, once in a
 * while in CI ("the daemon did not accept for 10 s"), while its handshake went on to succeed:
 * EINTR is not a failure here. */
static int connect_daemon(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0);
    struct timeval tv = {.tv_sec = ANSWER_SECONDS};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int err = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno;
    if (err == EINTR) err = finish_connect(fd);
    if (err != 0) {
        report_connect_failure(fd, err);
        FUZZ_CHECK(!"a connection to the daemon");
    }
    return fd;
}

/* Sends req, reads the answer until the daemon closes (malloc'd, NUL-terminated, *n long). */
static char *exchange(const char *req, size_t len, size_t *n)
{
    int fd = connect_daemon();
    static const char last[] = "GET /healthz HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n";
    const struct {
        const char *p;
        size_t n;
    } parts[2] = {{req, len}, {last, sizeof last - 1}};
    for (int i = 0; i < 2; i++) {
        size_t sent = 0;
        while (sent < parts[i].n) {
            ssize_t k = send(fd, parts[i].p + sent, parts[i].n - sent, MSG_NOSIGNAL);
            if (k < 0 && errno == EINTR) continue; /* libFuzzer's SIGALRM: not the daemon */
            if (k <= 0) break; /* the daemon answered early and closed: read what it said */
            sent += (size_t)k;
        }
        if (sent < parts[i].n) break;
    }
    shutdown(fd, SHUT_WR);
    size_t cap = 1 << 16, at = 0;
    char *buf = malloc(cap + 1);
    FUZZ_CHECK(buf);
    for (;;) {
        if (at == cap) {
            FUZZ_CHECK(cap < ANSWER_MAX);
            char *bigger = realloc(buf, cap * 2 + 1);
            FUZZ_CHECK(bigger);
            buf = bigger;
            cap *= 2;
        }
        ssize_t k = recv(fd, buf + at, cap - at, 0);
        if (k > 0) {
            at += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == ECONNRESET) break; /* closed with the request unread */
        if (k < 0) fprintf(stderr, "fuzz_http: no answer within %d s\n", ANSWER_SECONDS);
        FUZZ_CHECK(k == 0);
        break;
    }
    close(fd);
    buf[at] = '\0';
    *n = at;
    return buf;
}

/* Once the harness has closed its side, the daemon's connection guard must count nothing: every
 * way a connection ends (answered, cut, refused, reset, half-closed) gives its per-address and
 * total counts back. A count that stays would lock the address out once it reached
 * max_connections_per_ip. The daemon closes its end before the answer's end reaches the
 * harness, but libmicrohttpd tells the guard at its next cleanup: a short wait. */
static void check_guard_empty(void)
{
    unsigned open = 0, addresses = 0;
    for (int ms = 0; ms < ANSWER_SECONDS * 1000; ms++) {
        qd_http_conn_counts(d.http, &open, &addresses);
        if (open == 0 && addresses == 0) return;
        usleep(1000);
    }
    fprintf(stderr,
            "fuzz_http: %u connections and %u addresses still counted %d s after the "
            "exchange\n",
            open, addresses, ANSWER_SECONDS);
    FUZZ_CHECK(!"the connection guard kept a count");
}

/* needle occurs in the answer but not in the request. */
static bool leaked(const char *ans, size_t n, const char *req, size_t len, const char *needle)
{
    size_t k = strlen(needle);
    return k && memmem(ans, n, needle, k) && !memmem(req, len, needle, k);
}

static size_t count(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle), c = 0;
    for (const char *p = s; k && (p = memmem(p, n - (size_t)(p - s), needle, k)); p++) c++;
    return c;
}

/* needle occurs in the request other than as a bearer token (which the daemon never stores). */
static bool carried(const char *req, size_t len, const char *needle)
{
    char bearer[QD_TOKEN_LEN + 16];
    snprintf(bearer, sizeof bearer, "Bearer %s", needle);
    return *needle && count(req, len, needle) > count(req, len, bearer);
}

static void check_answer(const char *ans, size_t n, const char *req, size_t len)
{
    if (n == 0) return; /* closed without a word: allowed for a request it cannot parse */
    FUZZ_CHECK(n >= 12 && memcmp(ans, "HTTP/1.", 7) == 0 && ans[8] == ' ');
    /* every status line of a pipelined exchange: never 500 */
    for (const char *p = ans; p; p = memmem(p + 1, n - (size_t)(p + 1 - ans), "\r\nHTTP/1.", 9)) {
        const char *line = p == ans ? p : p + 2;
        if ((size_t)(line - ans) + 12 > n) break;
        if (memcmp(line + 9, "500", 3) == 0) {
            fprintf(stderr, "fuzz_http: a 500 answer:\n%.*s\n", (int)(n < 2048 ? n : 2048), ans);
            FUZZ_CHECK(!"an internal error");
        }
    }
    /* the source root is not among them: a job's source.path is shown to those who may read it */
    const char *secrets[] = {d.cfg.data_dir, d.passwd, d.tokens[0], d.tokens[1], d.tokens[2]};
    _Static_assert(sizeof secrets / sizeof secrets[0] == sizeof d.told / sizeof d.told[0],
                   "one told flag per secret");
    for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++) {
        if (carried(req, len, secrets[i])) d.told[i] = true; /* the daemon may keep it */
        if (!d.told[i] && leaked(ans, n, req, len, secrets[i])) {
            fprintf(stderr, "fuzz_http: the answer holds %s:\n%.*s\n", secrets[i],
                    (int)(n < 2048 ? n : 2048), ans);
            FUZZ_CHECK(!"a server path, a token or a file outside the root");
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!d.http) start_daemon();
    ensure_tokens();
    size_t len = 0, n = 0;
    char *req = expand(data, size, &len);
    char *ans = exchange(req, len, &n);
    check_guard_empty();
    check_answer(ans, n, req, len);
    note_job(ans, n);
    if (getenv("FUZZ_HTTP_SHOW")) fprintf(stderr, "---- %zu bytes in, %zu out:\n%s\n", len, n, ans);
    free(ans);
    free(req);
    return 0;
}
