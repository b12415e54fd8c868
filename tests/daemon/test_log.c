/* test_log.c -- the log suite: qd_log's lines as they reach stderr (captured through a pipe, as
 * journald's stream would take them): the exact logfmt shape, quoting and escaping, level
 * names and filtering, truncation of over-long lines, errno kept, and whole lines from many
 * threads at once; and qd_notify's datagrams (path and abstract sockets).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "notify.h"
#include "qdtest.h"

#define LINE_MAX_BYTES 4096

/* stderr redirected into a pipe drained by a thread into a growing buffer. */
typedef struct capture {
    int saved_fd, read_fd;
    pthread_t reader;
    char *buf;
    size_t len, cap;
} capture;

static void *drain(void *arg)
{
    capture *c = arg;
    for (;;) {
        if (c->cap - c->len < 65536) {
            c->cap = c->cap * 2 + 65536;
            c->buf = realloc(c->buf, c->cap + 1);
            if (!c->buf) abort();
        }
        ssize_t n = read(c->read_fd, c->buf + c->len, c->cap - c->len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        c->len += (size_t)n;
    }
    c->buf[c->len] = '\0';
    return NULL;
}

static void capture_start(capture *c)
{
    memset(c, 0, sizeof *c);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    fflush(stderr);
    c->saved_fd = dup(STDERR_FILENO);
    ck_assert_int_ge(c->saved_fd, 0);
    ck_assert_int_ge(dup2(p[1], STDERR_FILENO), 0);
    close(p[1]);
    c->read_fd = p[0];
    ck_assert_int_eq(pthread_create(&c->reader, NULL, drain, c), 0);
}

/* Restores stderr and returns what was written (caller frees). */
static char *capture_end(capture *c)
{
    ck_assert_int_ge(dup2(c->saved_fd, STDERR_FILENO), 0); /* closes the pipe's write end */
    close(c->saved_fd);
    pthread_join(c->reader, NULL);
    close(c->read_fd);
    return c->buf;
}

static void setup(void)
{
    qd_log_set_level(QD_LOG_INFO);
}

static void teardown(void)
{
    qd_log_set_level(QD_LOG_INFO);
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* "ts=YYYY-MM-DDTHH:MM:SS.mmmZ " with digits where the pattern has 'D'. */
static bool timestamp_ok(const char *line)
{
    static const char pattern[] = "ts=DDDD-DD-DDTDD:DD:DD.DDDZ ";
    for (size_t i = 0; i < sizeof pattern - 1; i++) {
        if (pattern[i] == 'D' ? !is_digit(line[i]) : line[i] != pattern[i]) return false;
    }
    return true;
}

/* The line after its timestamp; checks there is exactly one line. */
static const char *body(const char *out)
{
    ck_assert_msg(timestamp_ok(out), "bad timestamp: %s", out);
    const char *nl = strchr(out, '\n');
    ck_assert_ptr_nonnull(nl);
    ck_assert_msg(nl[1] == '\0', "more than one line: %s", out);
    return out + strlen("ts=2026-01-01T00:00:00.000Z ");
}

START_TEST(test_format)
{
    capture c;
    capture_start(&c);
    time_t before = time(NULL);
    qd_log(QD_LOG_INFO, "job finished", "job", "12", "state", "succeeded", NULL);
    time_t after = time(NULL);
    char *out = capture_end(&c);
    ck_assert_str_eq(body(out), "level=info msg=\"job finished\" job=12 state=succeeded\n");
    /* the timestamp is now, in UTC */
    struct tm tm = {0};
    ck_assert_ptr_nonnull(strptime(out + 3, "%Y-%m-%dT%H:%M:%S", &tm));
    char b[32], a[32], got[32];
    strftime(got, sizeof got, "%Y-%m-%dT%H:%M:%S", &tm);
    strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", gmtime(&before));
    strftime(a, sizeof a, "%Y-%m-%dT%H:%M:%S", gmtime(&after));
    ck_assert_msg(strcmp(got, b) >= 0 && strcmp(got, a) <= 0, "%s not in [%s, %s]", got, b, a);
    free(out);

    capture_start(&c);
    qd_log(QD_LOG_ERROR, "boom", NULL);
    qd_log(QD_LOG_WARN, "", "k", NULL); /* empty message; a key without a value */
    qd_log(QD_LOG_INFO, NULL, NULL);
    out = capture_end(&c);
    char *second = strchr(out, '\n') + 1;
    char *third = strchr(second, '\n') + 1;
    ck_assert(timestamp_ok(second) && timestamp_ok(third));
    ck_assert_int_eq(strncmp(body(third), "level=info msg=\"\"\n", 18), 0);
    third[0] = '\0';
    ck_assert_str_eq(body(second), "level=warn msg=\"\" k=\"\"\n");
    second[0] = '\0';
    ck_assert_str_eq(body(out), "level=error msg=boom\n");
    free(out);
}
END_TEST

START_TEST(test_quoting)
{
    static const struct {
        const char *value, *want;
    } cases[] = {
        {"plain", "plain"},
        {"", "\"\""},
        {"two words", "\"two words\""},
        {"a=b", "\"a=b\""},
        {"say \"hi\"", "\"say \\\"hi\\\"\""},
        {"q\"", "\"q\\\"\""},
        {"C:\\dir", "C:\\dir"},            /* a backslash alone needs no quotes */
        {"a\\ b", "\"a\\\\ b\""},          /* inside quotes it is escaped */
        {"l1\nl2", "\"l1\\nl2\""},         /* newline */
        {"tab\there", "\"tab\\x09here\""}, /* other control characters */
        {"cr\r", "\"cr\\x0d\""},
        {"\x01\x1f", "\"\\x01\\x1f\""},
        {"del\x7f", "\"del\\x7f\""},
        {"caf\xc3\xa9", "caf\xc3\xa9"}, /* UTF-8 as is */
        {"/v1/jobs?state=queued", "\"/v1/jobs?state=queued\""},
        {"-", "-"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        capture c;
        capture_start(&c);
        qd_log(QD_LOG_INFO, "m", "v", cases[i].value, NULL);
        char *out = capture_end(&c);
        char want[128];
        snprintf(want, sizeof want, "level=info msg=m v=%s\n", cases[i].want);
        ck_assert_str_eq(body(out), want);
        free(out);
    }
    /* keys are not quoted: characters outside [A-Za-z0-9_.-] become '_' */
    capture c;
    capture_start(&c);
    qd_log(QD_LOG_INFO, "m", "a key", "1", "x=y", "2", "req.id", "3", "dash-ok", "4", NULL);
    char *out = capture_end(&c);
    ck_assert_str_eq(body(out), "level=info msg=m a_key=1 x_y=2 req.id=3 dash-ok=4\n");
    free(out);
}
END_TEST

START_TEST(test_levels)
{
    static const struct {
        const char *text;
        bool ok;
        qd_log_level level;
    } parse[] = {
        {"debug", true, QD_LOG_DEBUG},  {"info", true, QD_LOG_INFO},   {"warn", true, QD_LOG_WARN},
        {"warning", true, QD_LOG_WARN}, {"error", true, QD_LOG_ERROR}, {"INFO", true, QD_LOG_INFO},
        {"Error", true, QD_LOG_ERROR},  {"", false, QD_LOG_INFO},      {"err", false, QD_LOG_INFO},
        {"trace", false, QD_LOG_INFO},  {"info ", false, QD_LOG_INFO},
    };
    for (size_t i = 0; i < sizeof parse / sizeof parse[0]; i++) {
        qd_log_level l = QD_LOG_INFO;
        ck_assert_msg(qd_log_level_parse(parse[i].text, &l) == parse[i].ok, "%s", parse[i].text);
        ck_assert_int_eq(l, parse[i].level);
    }
    qd_log_level l;
    ck_assert(!qd_log_level_parse(NULL, &l));
    ck_assert_str_eq(qd_log_level_name(QD_LOG_DEBUG), "debug");
    ck_assert_str_eq(qd_log_level_name(QD_LOG_INFO), "info");
    ck_assert_str_eq(qd_log_level_name(QD_LOG_WARN), "warn");
    ck_assert_str_eq(qd_log_level_name(QD_LOG_ERROR), "error");
    ck_assert_str_eq(qd_log_level_name((qd_log_level)42), "unknown");

    ck_assert(!qd_log_enabled(QD_LOG_DEBUG));
    ck_assert(qd_log_enabled(QD_LOG_INFO));
    qd_log_set_level(QD_LOG_WARN);
    ck_assert(!qd_log_enabled(QD_LOG_INFO));
    ck_assert(qd_log_enabled(QD_LOG_WARN));
    ck_assert(qd_log_enabled(QD_LOG_ERROR));

    capture c;
    capture_start(&c);
    qd_log(QD_LOG_DEBUG, "d", NULL);
    qd_log(QD_LOG_INFO, "i", NULL);
    qd_log(QD_LOG_WARN, "w", NULL);
    qd_log(QD_LOG_ERROR, "e", NULL);
    qd_log_set_level(QD_LOG_DEBUG);
    qd_log(QD_LOG_DEBUG, "d2", NULL);
    qd_log_set_level(QD_LOG_ERROR);
    qd_log(QD_LOG_WARN, "w2", NULL);
    char *out = capture_end(&c);
    const char *want[] = {"level=warn msg=w\n", "level=error msg=e\n", "level=debug msg=d2\n"};
    const char *line = out;
    for (size_t i = 0; i < 3; i++) {
        ck_assert(timestamp_ok(line));
        const char *nl = strchr(line, '\n');
        ck_assert_int_eq(strncmp(line + 28, want[i], strlen(want[i])), 0);
        line = nl + 1;
    }
    ck_assert_str_eq(line, "");
    free(out);
}
END_TEST

/* One over-long line: at most LINE_MAX_BYTES, " truncated=1" at the end, quotes closed, no
 * escape or UTF-8 sequence cut in half, later pairs dropped. */
static void check_truncated(const char *value, const char *value_start)
{
    capture c;
    capture_start(&c);
    qd_log(QD_LOG_INFO, "big", "v", value, "after", "dropped", NULL);
    char *out = capture_end(&c);
    size_t n = strlen(out);
    ck_assert_uint_le(n, LINE_MAX_BYTES);
    ck_assert_uint_ge(n, LINE_MAX_BYTES - 16);
    const char *tail = " truncated=1\n";
    ck_assert_str_eq(out + n - strlen(tail), tail);
    ck_assert_ptr_null(strstr(out, "after="));
    const char *v = strstr(out, " v=");
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(strncmp(v + 3, value_start, strlen(value_start)), 0);
    const char *end = out + n - strlen(tail); /* just after the value */
    if (v[3] == '"') {
        ck_assert_int_eq(end[-1], '"');
        size_t backslashes = 0;
        for (const char *p = end - 2; *p == '\\'; p--) backslashes++;
        ck_assert_msg(backslashes % 2 == 0, "an escape was cut in half");
    }
    /* the byte before the end of the value does not start or continue a cut UTF-8 sequence */
    const unsigned char *p = (const unsigned char *)end - (v[3] == '"' ? 2 : 1);
    if (*p >= 0x80) {
        size_t cont = 0;
        while ((*p & 0xc0) == 0x80) p--, cont++;
        size_t need = *p >= 0xf0 ? 3 : *p >= 0xe0 ? 2 : 1;
        ck_assert_uint_eq(cont, need);
    }
    free(out);
}

START_TEST(test_truncation)
{
    size_t n = 3 * LINE_MAX_BYTES;
    char *v = malloc(n + 1);
    ck_assert_ptr_nonnull(v);
    memset(v, 'x', n);
    v[n] = '\0';
    check_truncated(v, "xxx"); /* unquoted */
    v[1] = ' ';
    check_truncated(v, "\"x xx"); /* quoted */
    memset(v, '"', n);
    check_truncated(v, "\"\\\"\\\""); /* two-byte escapes */
    memset(v, '\x01', n);
    check_truncated(v, "\"\\x01\\x01"); /* four-byte escapes */
    for (size_t off = 0; off < 4; off++) {
        for (size_t i = 0; i + 3 <= n; i += 3) memcpy(v + i, "\xe2\x82\xac", 3); /* euro sign */
        v[n - n % 3] = '\0';
        memset(v, 'a', off);
        char first[2] = {v[0], '\0'};
        check_truncated(v, first);
        v[n] = '\0';
    }
    free(v);

    /* wherever the limit falls (in a key, at an opening quote, in an escape), the line stays
     * well formed: at most LINE_MAX_BYTES, quotes balanced */
    char *first = malloc(LINE_MAX_BYTES + 1);
    ck_assert_ptr_nonnull(first);
    size_t full_minus_len; /* the line's length without truncation, less len */
    {
        capture c;
        capture_start(&c);
        qd_log(QD_LOG_INFO, "m", "first", "f", "second_key", "a \"b\" \x01", "third", "", NULL);
        char *out = capture_end(&c);
        full_minus_len = strlen(out) - 1;
        free(out);
    }
    for (size_t len = LINE_MAX_BYTES - 120; len <= LINE_MAX_BYTES - 30; len++) {
        memset(first, 'f', len);
        first[len] = '\0';
        capture c;
        capture_start(&c);
        qd_log(QD_LOG_INFO, "m", "first", first, "second_key", "a \"b\" \x01", "third", "", NULL);
        char *out = capture_end(&c);
        size_t ol = strlen(out);
        ck_assert_uint_le(ol, LINE_MAX_BYTES);
        ck_assert_int_eq(out[ol - 1], '\n');
        ck_assert_ptr_eq(strchr(out, '\n'), out + ol - 1);
        size_t quotes = 0;
        for (size_t i = 0; i < ol; i++) {
            if (out[i] == '\\')
                i++; /* only inside quotes: "first" holds no backslash */
            else if (out[i] == '"')
                quotes++;
        }
        ck_assert_msg(quotes % 2 == 0, "unbalanced quotes at len %zu: %s", len, out + 4000);
        bool cut = strstr(out, " truncated=1\n") != NULL;
        ck_assert_msg(cut == (len + full_minus_len > LINE_MAX_BYTES), "len %zu: %s", len, out);
        if (!cut) ck_assert_uint_eq(ol, len + full_minus_len);
        free(out);
    }
    free(first);

    /* a line of exactly LINE_MAX_BYTES (newline included) is not truncated; one more byte is */
    size_t fixed = strlen("ts=2026-01-01T00:00:00.000Z level=info msg=m v=\n");
    char *fit = malloc(LINE_MAX_BYTES + 2);
    ck_assert_ptr_nonnull(fit);
    memset(fit, 'y', LINE_MAX_BYTES + 1);
    for (int extra = 0; extra < 2; extra++) {
        fit[LINE_MAX_BYTES - fixed + (size_t)extra] = '\0';
        capture c;
        capture_start(&c);
        qd_log(QD_LOG_INFO, "m", "v", fit, NULL);
        char *out = capture_end(&c);
        if (extra == 0) {
            ck_assert_uint_eq(strlen(out), LINE_MAX_BYTES);
            ck_assert_ptr_null(strstr(out, "truncated"));
        } else {
            check_truncated(fit, "yyy");
        }
        free(out);
        fit[LINE_MAX_BYTES - fixed + (size_t)extra] = 'y';
    }
    free(fit);
}
END_TEST

START_TEST(test_errno_kept)
{
    capture c;
    capture_start(&c);
    errno = ENOSPC;
    qd_log(QD_LOG_INFO, "x", "k", "v", NULL);
    ck_assert_int_eq(errno, ENOSPC);
    errno = 0;
    free(capture_end(&c));
}
END_TEST

#define THREADS 8
#define LINES   2000

static void *log_lines(void *arg)
{
    int t = (int)(intptr_t)arg;
    char tid[16], seq[16], pad[301];
    snprintf(tid, sizeof tid, "%d", t);
    memset(pad, 'a' + t, 300);
    pad[300] = '\0';
    for (int i = 0; i < LINES; i++) {
        snprintf(seq, sizeof seq, "%d", i);
        pad[i % 300] = ' '; /* some lines quoted */
        qd_log(QD_LOG_INFO, "concurrent line", "thread", tid, "seq", seq, "pad", pad, NULL);
        pad[i % 300] = (char)('a' + t);
    }
    return NULL;
}

START_TEST(test_threads)
{
    capture c;
    capture_start(&c);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, log_lines, (void *)(intptr_t)t), 0);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    char *out = capture_end(&c);

    static unsigned char seen[THREADS][LINES];
    memset(seen, 0, sizeof seen);
    size_t lines = 0;
    for (char *line = out, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        ck_assert_ptr_nonnull(nl);
        *nl = '\0';
        ck_assert_msg(timestamp_ok(line), "bad line: %s", line);
        int t, i, off;
        ck_assert_msg(sscanf(line + 28,
                             "level=info msg=\"concurrent line\" thread=%d seq=%d pad=%n", &t, &i,
                             &off) == 2,
                      "bad line: %s", line);
        ck_assert(t >= 0 && t < THREADS && i >= 0 && i < LINES);
        char want[310];
        memset(want + 1, 'a' + t, 300);
        want[1 + i % 300] = ' ';
        want[0] = want[301] = '"';
        want[302] = '\0';
        ck_assert_str_eq(line + 28 + off, want);
        ck_assert_int_eq(seen[t][i], 0);
        seen[t][i] = 1;
        lines++;
    }
    ck_assert_uint_eq(lines, THREADS * LINES);
    free(out);
}
END_TEST

/* ---- qd_notify ------------------------------------------------------------------------------- */

static char *saved_notify;

static void notify_setup(void)
{
    const char *v = getenv("NOTIFY_SOCKET");
    saved_notify = v ? strdup(v) : NULL;
}

static void notify_teardown(void)
{
    if (saved_notify)
        setenv("NOTIFY_SOCKET", saved_notify, 1);
    else
        unsetenv("NOTIFY_SOCKET");
    free(saved_notify);
    saved_notify = NULL;
}

/* A datagram socket bound to addr; returns its fd. */
static int listener(const struct sockaddr_un *addr, socklen_t len)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (const struct sockaddr *)addr, len), 0);
    return fd;
}

static void expect_datagram(int fd, const char *want)
{
    char buf[2048];
    ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
    ck_assert_int_eq(n, (ssize_t)strlen(want));
    buf[n] = '\0';
    ck_assert_str_eq(buf, want);
}

START_TEST(test_notify_path)
{
    char *dir = qdt_tmpdir();
    char *path = kit_join(dir, "notify");
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    ck_assert_uint_lt(strlen(path), sizeof addr.sun_path);
    strcpy(addr.sun_path, path);
    int fd = listener(&addr, sizeof addr);
    setenv("NOTIFY_SOCKET", path, 1);
    ck_assert(qd_notify("READY=1"));
    expect_datagram(fd, "READY=1");
    ck_assert(qd_notify("STATUS=2 jobs running\nRELOADING=1"));
    expect_datagram(fd, "STATUS=2 jobs running\nRELOADING=1");
    ck_assert(qd_notifyf("STATUS=%d queued", 7));
    expect_datagram(fd, "STATUS=7 queued");
    close(fd);
    /* nobody listening any more: false, no crash */
    ck_assert(!qd_notify("STOPPING=1"));
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

START_TEST(test_notify_abstract)
{
    char name[64];
    snprintf(name, sizeof name, "@quantd-test-%ld", (long)getpid());
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, name, strlen(name));
    addr.sun_path[0] = '\0';
    int fd = listener(&addr, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(name)));
    setenv("NOTIFY_SOCKET", name, 1);
    ck_assert(qd_notify("STOPPING=1"));
    expect_datagram(fd, "STOPPING=1");
    close(fd);
}
END_TEST

START_TEST(test_notify_unset)
{
    unsetenv("NOTIFY_SOCKET");
    ck_assert(!qd_notify("READY=1"));
    setenv("NOTIFY_SOCKET", "", 1);
    ck_assert(!qd_notify("READY=1"));
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    ck_assert(!qd_notify("READY=1"));
    setenv("NOTIFY_SOCKET", "@", 1);
    ck_assert(!qd_notify("READY=1"));
    char longpath[200];
    memset(longpath, 'x', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = '\0';
    setenv("NOTIFY_SOCKET", longpath, 1);
    ck_assert(!qd_notify("READY=1"));
}
END_TEST

Suite *suite_log(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("log");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_format);
    tcase_add_test(tc, test_quoting);
    tcase_add_test(tc, test_levels);
    tcase_add_test(tc, test_truncation);
    tcase_add_test(tc, test_errno_kept);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    TCase *tn = tcase_create("notify");
    tcase_add_checked_fixture(tn, notify_setup, notify_teardown);
    tcase_add_test(tn, test_notify_path);
    tcase_add_test(tn, test_notify_abstract);
    tcase_add_test(tn, test_notify_unset);
    suite_add_tcase(s, tn);
    return s;
}
