/* config_value.c -- parsers of single setting values: integers in a range, sizes with binary
 * suffixes (K, M, G, T), durations (s, m, h, d), booleans, listen addresses ("HOST:PORT",
 * "[IPv6]:PORT"), and their printed forms.
 * Pure functions: no I/O, no globals.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_impl.h"

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Leading decimal digits of s into *v; false when there are none or the number exceeds
 * INT64_MAX. *end points after the digits. */
static bool digits(const char *s, int64_t *v, const char **end, bool *overflow)
{
    int64_t acc = 0;
    *overflow = false;
    const char *p = s;
    for (; is_digit(*p); p++) {
        int d = *p - '0';
        if (acc > (INT64_MAX - d) / 10) *overflow = true;
        if (!*overflow) acc = acc * 10 + d;
    }
    *v = acc;
    *end = p;
    return p != s;
}

bool cfg_parse_int(const char *s, int64_t min, int64_t max, int64_t *out, char *why, size_t whylen)
{
    const char *p = s;
    bool neg = *p == '-';
    if (neg) p++;
    int64_t v;
    const char *end;
    bool overflow;
    if (!digits(p, &v, &end, &overflow) || *end != '\0') {
        snprintf(why, whylen, "must be an integer in %" PRId64 "..%" PRId64 ", got '%s'", min, max,
                 s);
        return false;
    }
    if (neg) v = -v;
    if (overflow || v < min || v > max) {
        snprintf(why, whylen, "must be %" PRId64 "..%" PRId64 ", got %s", min, max, s);
        return false;
    }
    *out = v;
    return true;
}

/* The multiplier of a size suffix ("", "K", "KiB", "KB", "B", any case), or 0 when unknown. */
static int64_t size_unit(const char *u)
{
    static const char units[] = "BKMGT";
    if (*u == '\0') return 1;
    const char *hit = strchr(units, *u & ~0x20);
    if (!hit) return 0;
    int shift = (int)(hit - units) * 10;
    const char *rest = u + 1;
    if (shift > 0 && (strcmp(rest, "iB") == 0 || strcmp(rest, "B") == 0)) rest = "";
    return *rest == '\0' ? (int64_t)1 << shift : 0;
}

/* A number with a unit suffix: how its suffix scales it, how it is printed, what it looks
 * like (for the message). */
typedef struct scaled_kind {
    int64_t (*unit)(const char *suffix); /* the multiplier, or 0 for an unknown suffix */
    void (*format)(int64_t v, char *buf, size_t len);
    const char *looks_like;
} scaled_kind;

static bool parse_scaled(const scaled_kind *k, const char *s, int64_t min, int64_t max,
                         int64_t *out, char *why, size_t whylen)
{
    char lo[32], hi[32];
    k->format(min, lo, sizeof lo);
    k->format(max, hi, sizeof hi);
    int64_t v, unit = 0;
    const char *end;
    bool overflow;
    if (digits(s, &v, &end, &overflow)) unit = k->unit(end);
    if (unit == 0) {
        snprintf(why, whylen, "must be %s, got '%s'", k->looks_like, s);
        return false;
    }
    if (overflow || v > INT64_MAX / unit || v * unit < min || v * unit > max) {
        snprintf(why, whylen, "must be %s..%s, got %s", lo, hi, s);
        return false;
    }
    *out = v * unit;
    return true;
}

static const scaled_kind size_kind = {size_unit, cfg_format_size,
                                      "a size like 4096, 512K or 16G (K, M, G, T: powers of 1024)"};

bool cfg_parse_size(const char *s, int64_t min, int64_t max, int64_t *out, char *why, size_t whylen)
{
    return parse_scaled(&size_kind, s, min, max, out, why, whylen);
}

void cfg_format_size(int64_t v, char *buf, size_t len)
{
    static const char units[] = "TGMK";
    for (int i = 0; i < 4 && v != 0; i++) {
        int64_t unit = (int64_t)1 << (40 - 10 * i);
        if (v % unit == 0) {
            snprintf(buf, len, "%" PRId64 "%c", v / unit, units[i]);
            return;
        }
    }
    snprintf(buf, len, "%" PRId64, v);
}

bool cfg_parse_bool(const char *s, bool *out, char *why, size_t whylen)
{
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no",
                                                                                "off", "0"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(s, yes[i]) == 0) return *out = true, true;
        if (strcmp(s, no[i]) == 0) return *out = false, true;
    }
    snprintf(why, whylen, "must be true or false (yes/no, on/off, 1/0), got '%s'", s);
    return false;
}

/* Seconds per duration suffix, longest unit first (cfg_format_duration's order). */
static const struct {
    char suffix;
    int64_t seconds;
} duration_units[] = {{'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}};

/* Seconds per duration suffix ("" = seconds), or 0 when unknown. */
static int64_t duration_unit(const char *u)
{
    if (*u == '\0') return 1;
    for (size_t i = 0; i < sizeof duration_units / sizeof duration_units[0]; i++)
        if (u[0] == duration_units[i].suffix && u[1] == '\0') return duration_units[i].seconds;
    return 0;
}

static const scaled_kind duration_kind = {
    duration_unit, cfg_format_duration,
    "a duration like 30, 90s, 15m, 24h or 7d (seconds when bare)"};

bool cfg_parse_duration(const char *s, int64_t min, int64_t max, int64_t *out, char *why,
                        size_t whylen)
{
    return parse_scaled(&duration_kind, s, min, max, out, why, whylen);
}

void cfg_format_duration(int64_t seconds, char *buf, size_t len)
{
    for (size_t i = 0; seconds != 0 && i < sizeof duration_units / sizeof duration_units[0]; i++)
        if (seconds % duration_units[i].seconds == 0) {
            snprintf(buf, len, "%" PRId64 "%c", seconds / duration_units[i].seconds,
                     duration_units[i].suffix);
            return;
        }
    snprintf(buf, len, "%" PRId64, seconds);
}

/* A host name ("localhost", "db.example") or a dotted IPv4 address. */
static bool valid_host(const char *h, char *why, size_t whylen)
{
    size_t n = strlen(h);
    bool numeric = true, ok = n > 0 && n <= 253;
    size_t label = 0;
    for (const char *p = h; ok && *p; p++) {
        char c = *p;
        if (c == '.') {
            ok = label > 0;
            label = 0;
            continue;
        }
        ok = is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
        numeric = numeric && is_digit(c);
        ok = ok && ++label <= 63;
    }
    if (ok && numeric) {
        struct in_addr a;
        ok = inet_pton(AF_INET, h, &a) == 1;
    }
    if (!ok) snprintf(why, whylen, "bad host '%s' (a name, an IPv4 address or [IPv6])", h);
    return ok;
}

static bool parse_port(const char *s, const char *all, int *port, char *why, size_t whylen)
{
    int64_t v;
    const char *end;
    bool overflow;
    if (!digits(s, &v, &end, &overflow) || *end != '\0' || overflow || v > 65535) {
        snprintf(why, whylen, "port must be 0..65535, got '%s' in '%s'", s, all);
        return false;
    }
    *port = (int)v;
    return true;
}

/* Splits s into a malloc'd host and the text of the port. */
static bool split_listen(const char *s, char **host, const char **port, char *why, size_t whylen)
{
    const char *colon;
    const char *h = s;
    size_t hl;
    if (*s == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':') goto bad;
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon) goto bad;
        hl = (size_t)(colon - s);
        if (memchr(s, ':', hl)) {
            snprintf(why, whylen, "an IPv6 address goes in brackets, e.g. [::1]:8080, got '%s'", s);
            return false;
        }
    }
    if (hl == 0) {
        snprintf(why, whylen, "host missing in '%s' (0.0.0.0:PORT or [::]:PORT for all)", s);
        return false;
    }
    *host = strndup(h, hl);
    if (!*host) {
        snprintf(why, whylen, "out of memory");
        return false;
    }
    *port = colon + 1;
    return true;
bad:
    snprintf(why, whylen, "must be HOST:PORT or [IPv6]:PORT, got '%s'", s);
    return false;
}

bool cfg_parse_listen(const char *s, char **host, int *port, char *why, size_t whylen)
{
    const char *port_text;
    char *h = NULL;
    if (!split_listen(s, &h, &port_text, why, whylen)) return false;
    bool ok;
    if (*s == '[') {
        struct in6_addr a;
        ok = inet_pton(AF_INET6, h, &a) == 1;
        if (!ok) snprintf(why, whylen, "bad IPv6 address '%s'", h);
    } else {
        ok = valid_host(h, why, whylen);
    }
    ok = ok && parse_port(port_text, s, port, why, whylen);
    if (ok)
        *host = h;
    else
        free(h);
    return ok;
}

void cfg_format_listen(const char *host, int port, char *buf, size_t len)
{
    if (strchr(host, ':'))
        snprintf(buf, len, "[%s]:%d", host, port);
    else
        snprintf(buf, len, "%s:%d", host, port);
}
