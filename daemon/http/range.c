/* range.c -- the Range request header (RFC 9110 section 14): the strict `bytes=` parser and
 * the satisfiable part of what it asks (range.h says what each result means).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "range.h"

/* One range-spec: `first-last`, `first-` (open) or `-n` (suffix). */
typedef struct range_spec {
    uint64_t first, last; /* last: the suffix length of `-n` */
    bool open, suffix;
} range_spec;

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static const char *skip_ows(const char *p, const char *end)
{
    while (p < end && is_ows(*p)) p++;
    return p;
}

/* 1*DIGIT at *p into *v; false when there is no digit or the number is past UINT64_MAX. */
static bool digits(const char **p, const char *end, uint64_t *v)
{
    const char *s = *p;
    uint64_t n = 0;
    for (; s < end && is_digit(*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (n > (UINT64_MAX - d) / 10) return false;
        n = n * 10 + d;
    }
    if (s == *p) return false;
    *v = n;
    *p = s;
    return true;
}

/* A range-spec at *p (int-range or suffix-range; other-range is not of the bytes unit). */
static bool parse_spec(const char **p, const char *end, range_spec *s)
{
    *s = (range_spec){0};
    if (*p < end && **p == '-') {
        (*p)++;
        s->suffix = true;
        return digits(p, end, &s->last);
    }
    if (!digits(p, end, &s->first) || *p >= end || **p != '-') return false;
    (*p)++;
    s->open = *p >= end || !is_digit(**p);
    return s->open || (digits(p, end, &s->last) && s->last >= s->first);
}

/* Whether s is satisfiable against size (RFC 9110 14.1.2); its bytes when there are any. */
static bool resolve(const range_spec *s, uint64_t size, uint64_t *from, uint64_t *to)
{
    if (s->suffix) {
        if (s->last == 0) return false;
        if (size == 0) return true; /* satisfiable, but no byte to send */
        *from = s->last >= size ? 0 : size - s->last;
        *to = size - 1;
        return true;
    }
    if (s->first >= size) return false;
    *from = s->first;
    *to = s->open || s->last >= size ? size - 1 : s->last;
    return true;
}

/* The unit: "bytes=" in any case. */
static bool bytes_unit(const char **p, const char *end)
{
    static const char unit[] = "bytes=";
    if ((size_t)(end - *p) < sizeof unit - 1) return false;
    for (size_t i = 0; i < sizeof unit - 1; i++) {
        char c = (*p)[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != unit[i]) return false;
    }
    *p += sizeof unit - 1;
    return true;
}

qd_range_result qd_range_parse(const char *header, uint64_t size, uint64_t *from, uint64_t *to)
{
    if (!header) return QD_RANGE_NONE;
    const char *p = header, *end = header + strlen(header);
    p = skip_ows(p, end); /* the field value excludes surrounding whitespace */
    while (end > p && is_ows(end[-1])) end--;
    if (!bytes_unit(&p, end)) return QD_RANGE_INVALID;
    size_t specs = 0, satisfiable = 0;
    uint64_t a = 0, b = 0;
    for (;;) { /* [ range-spec ] *( OWS "," OWS [ range-spec ] ), RFC 9110 5.6.1.2 */
        if (p < end && !is_ows(*p) && *p != ',') {
            range_spec s;
            if (!parse_spec(&p, end, &s)) return QD_RANGE_INVALID;
            specs++;
            if (resolve(&s, size, &a, &b)) satisfiable++;
        }
        p = skip_ows(p, end);
        if (p == end) break;
        if (*p != ',') return QD_RANGE_INVALID;
        p = skip_ows(p + 1, end);
    }
    if (specs == 0) return QD_RANGE_INVALID;
    if (satisfiable == 0) return QD_RANGE_UNSATISFIABLE;
    if (specs > 1 || size == 0) return QD_RANGE_MULTI;
    *from = a;
    *to = b;
    return QD_RANGE_SINGLE;
}

const char *qd_range_result_name(qd_range_result r)
{
    static const char *const names[] = {[QD_RANGE_NONE] = "none",
                                        [QD_RANGE_INVALID] = "invalid",
                                        [QD_RANGE_SINGLE] = "single",
                                        [QD_RANGE_MULTI] = "multi",
                                        [QD_RANGE_UNSATISFIABLE] = "unsatisfiable"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}
