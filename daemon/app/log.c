/* log.c -- logfmt lines on stderr: ts (RFC 3339, UTC, milliseconds), level, msg, then the
 * caller's key/value pairs; the global level (atomic).
 *
 * Each line is built in a fixed buffer of QD_LOG_LINE_MAX bytes (newline included) and written with
 * one write(2), so lines from different threads never interleave (4096 bytes is PIPE_BUF on Linux:
 * a write of a whole line into a pipe is atomic). A line that would be longer has the value being
 * written cut at a UTF-8 character boundary (its quotes still closed), the pairs after it dropped,
 * and ends in " truncated=1". Values are quoted when empty or when they hold a space, '"', '=' or a
 * control character; inside quotes '"' and '\' are escaped with '\', a newline is \n and every
 * other control character \xNN; bytes >= 0x80 pass unchanged. Keys are written as given, with
 * anything but [A-Za-z0-9_.-] replaced by '_'; a NULL value ends the pairs (its key is written
 * with an empty value). errno is preserved.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define QD_LOG_LINE_MAX 4096
#define TRUNC_TAIL      " truncated=1\n"

static atomic_int g_level = QD_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

bool qd_log_level_parse(const char *s, qd_log_level *out)
{
    if (!s) return false;
    for (int l = QD_LOG_DEBUG; l <= QD_LOG_ERROR; l++) {
        if (strcasecmp(s, level_names[l]) == 0) {
            *out = (qd_log_level)l;
            return true;
        }
    }
    if (strcasecmp(s, "warning") == 0) {
        *out = QD_LOG_WARN;
        return true;
    }
    return false;
}

const char *qd_log_level_name(qd_log_level l)
{
    if ((int)l < QD_LOG_DEBUG || l > QD_LOG_ERROR) return "unknown";
    return level_names[l];
}

void qd_log_set_level(qd_log_level l)
{
    atomic_store_explicit(&g_level, (int)l, memory_order_relaxed);
}

bool qd_log_enabled(qd_log_level l)
{
    return (int)l >= atomic_load_explicit(&g_level, memory_order_relaxed);
}

/* The line being built: text in buf[0..len), at most cap bytes (the tail is kept free). */
typedef struct line {
    char buf[QD_LOG_LINE_MAX];
    size_t len;
    size_t cap;
    bool truncated;
} line;

static bool put(line *ln, const char *s, size_t n)
{
    if (ln->len + n > ln->cap) return false;
    memcpy(ln->buf + ln->len, s, n);
    ln->len += n;
    return true;
}

static bool is_ctl(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

static bool needs_quotes(const char *v)
{
    if (*v == '\0') return true;
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        if (*p == ' ' || *p == '"' || *p == '=' || is_ctl(*p)) return true;
    return false;
}

/* How c is written inside quotes (into out); returns the length. */
static size_t escape(unsigned char c, char out[4])
{
    static const char hex[] = "0123456789abcdef";
    if (c == '"' || c == '\\') {
        out[0] = '\\';
        out[1] = (char)c;
        return 2;
    }
    if (c == '\n') {
        memcpy(out, "\\n", 2);
        return 2;
    }
    if (is_ctl(c)) {
        out[0] = '\\';
        out[1] = 'x';
        out[2] = hex[c >> 4];
        out[3] = hex[c & 15];
        return 4;
    }
    out[0] = (char)c;
    return 1;
}

/* Writes v, quoted when needed; when it does not fit, cuts it at a character boundary (room for
 * the closing quote is kept) and marks the line truncated. */
static void put_value(line *ln, const char *v)
{
    bool quoted = needs_quotes(v);
    size_t reserve = quoted ? 1 : 0; /* the closing quote always fits */
    if (quoted) {
        if (ln->len + 2 > ln->cap) {
            ln->truncated = true;
            return;
        }
        put(ln, "\"", 1);
    }
    for (const unsigned char *p = (const unsigned char *)v; *p;) {
        /* One whole UTF-8 sequence (or a single byte) at a time. */
        size_t n = 1;
        while ((p[n] & 0xc0) == 0x80 && n < 4) n++;
        char tmp[16];
        size_t tl = 0;
        for (size_t i = 0; i < n; i++) {
            if (quoted)
                tl += escape(p[i], tmp + tl);
            else
                tmp[tl++] = (char)p[i];
        }
        if (ln->len + tl + reserve > ln->cap) goto full;
        put(ln, tmp, tl);
        p += n;
    }
    if (quoted) put(ln, "\"", 1);
    return;
full:
    if (quoted) put(ln, "\"", 1);
    ln->truncated = true;
}

/* " key=", all or nothing. */
static void put_key(line *ln, const char *k)
{
    size_t start = ln->len;
    bool ok = put(ln, " ", 1);
    for (const char *p = k; ok && *p; p++) {
        char c = *p;
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '_' || c == '.' || c == '-';
        ok = put(ln, plain ? &c : "_", 1);
    }
    if (ok) ok = put(ln, "=", 1);
    if (!ok) {
        ln->len = start;
        ln->truncated = true;
    }
}

static void put_pair(line *ln, const char *k, const char *v)
{
    put_key(ln, k);
    if (!ln->truncated) put_value(ln, v);
}

/* "ts=2026-11-23T14:00:00.123Z" into b (at least 40 bytes); returns its length. */
static size_t timestamp(char *b, size_t len)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(b, len, "ts=%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(b + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000L);
    return n;
}

/* One write(2) for the whole line; a short write (a signal, a full non-blocking pipe) is
 * finished with more writes, and a failing stderr is ignored. */
static void emit(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(STDERR_FILENO, buf, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        buf += w;
        len -= (size_t)w;
    }
}

static void line_init(line *ln, size_t cap)
{
    ln->len = 0;
    ln->cap = cap;
    ln->truncated = false;
}

/* Builds the line within ln->cap bytes (the newline or the truncation mark is added after). */
static void build(line *ln, const char *ts, size_t ts_len, qd_log_level level, const char *msg,
                  va_list ap)
{
    put(ln, ts, ts_len);
    put_pair(ln, "level", qd_log_level_name(level));
    put_pair(ln, "msg", msg ? msg : "");
    /* A key without a value (the sentinel came first) is written with an empty value. */
    for (const char *k; !ln->truncated && (k = va_arg(ap, const char *)) != NULL;) {
        const char *v = va_arg(ap, const char *);
        put_pair(ln, k, v ? v : "");
        if (!v) break;
    }
}

void qd_log(qd_log_level level, const char *msg, ...)
{
    if (!qd_log_enabled(level)) return;
    int saved = errno;
    char ts[64];
    size_t ts_len = timestamp(ts, sizeof ts);
    line ln;
    /* First with room for the newline only; a line that does not fit is built again with room
     * for the truncation mark. */
    line_init(&ln, sizeof ln.buf - 1);
    va_list ap, again;
    va_start(ap, msg);
    va_copy(again, ap);
    build(&ln, ts, ts_len, level, msg, ap);
    if (ln.truncated) {
        line_init(&ln, sizeof ln.buf - (sizeof TRUNC_TAIL - 1));
        build(&ln, ts, ts_len, level, msg, again);
        ln.truncated = true;
    }
    va_end(again);
    va_end(ap);
    ln.cap = sizeof ln.buf;
    if (ln.truncated)
        put(&ln, TRUNC_TAIL, sizeof TRUNC_TAIL - 1);
    else
        put(&ln, "\n", 1);
    emit(ln.buf, ln.len);
    errno = saved;
}
