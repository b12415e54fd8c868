/* stats_parse_json.c -- qd_stats_parse_json: a post's JSON body read in one pass straight into
 * arrays of doubles, without building a jansson tree (a number costs no allocation, so large
 * per-token statistics parse several times faster), and with errors that name the activation,
 * also for what jansson would refuse before we could look: Python's NaN and Infinity, numbers
 * that overflow a double. The grammar is RFC 8259 (strict UTF-8, no duplicate keys); the
 * document is
 *   {"step": N (optional), "stats": {ACT: {"absmax": V} | {"min": V, "max": V}, ...}}
 * or, for a merge, {ACT: {"count": n, "sum_of_absmax": V} | {"count": n, "sum_of_min": V,
 * "sum_of_max": V}}, where V is a number or nested lists of numbers (the nesting is the shape);
 * any activation may also carry "mean_sq" (a merge: "sum_of_mean_sq"), a list [n], or only it.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats_parse.h"

/* Integers a count may be: exact in a double. */
#define COUNT_MAX ((int64_t)1 << 53)

typedef struct jp {
    const char *p, *end, *begin;
    bool merge;
    qd_err *err;
    const char *act; /* the activation being read (for messages), or NULL */
    /* one statistic's array while it is read */
    double *buf;
    size_t n, cap;
    int rank; /* depth of the numbers, -1 until the first one */
    int64_t dims[QUANT_MAX_RANK];
} jp;

static qd_status fail(jp *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static qd_status fail(jp *j, const char *fmt, ...)
{
    char msg[sizeof j->err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (j->act) return sp_fail_act(j->err, j->act, "%s", msg);
    return qd_fail(j->err, QD_INVALID, "%s", msg);
}

/* A syntax error at the current byte. */
static qd_status syntax(jp *j, const char *expected)
{
    if (j->p >= j->end)
        return fail(j, "the body is not valid JSON: it ends where %s was expected", expected);
    return fail(j, "the body is not valid JSON: %s expected at byte %zu", expected,
                (size_t)(j->p - j->begin));
}

static void skip_ws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

/* Skips whitespace and takes byte c. */
static bool take(jp *j, char c)
{
    skip_ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return true;
    }
    return false;
}

/* ---- strings ----------------------------------------------------------------------------------
 */

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the strict UTF-8 sequence at p (no overlong forms, surrogates or code points above
 * U+10FFFF), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *p, size_t avail)
{
    unsigned c = p[0];
    size_t len = c >= 0xC2 && c <= 0xDF   ? 2
                 : (c & 0xF0) == 0xE0     ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4
                                          : 0;
    if (len == 0 || len > avail) return 0;
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t k = 2; k < len; k++)
        if ((p[k] & 0xC0) != 0x80) return 0;
    return len;
}

/* A \uXXXX escape at j->p (after the backslash and 'u'), a surrogate pair taken whole. */
static qd_status unicode_escape(jp *j, unsigned *cp)
{
    int hi = j->end - j->p >= 4 ? hex4(j->p) : -1;
    if (hi < 0) return syntax(j, "four hex digits after \\u");
    j->p += 4;
    *cp = (unsigned)hi;
    if (hi >= 0xDC00 && hi <= 0xDFFF) return syntax(j, "a high surrogate before a low one");
    if (hi < 0xD800 || hi > 0xDBFF) return QD_OK;
    int lo = j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u' ? hex4(j->p + 2) : -1;
    if (lo < 0xDC00 || lo > 0xDFFF) return syntax(j, "a low surrogate (\\uDC00-\\uDFFF)");
    j->p += 6;
    *cp = 0x10000 + (((unsigned)hi - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
    return QD_OK;
}

static qd_status escape(jp *j, char *out, size_t *at)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    if (j->p >= j->end) return syntax(j, "an escape");
    const char *k = memchr(from, *j->p, sizeof from - 1);
    if (k) {
        out[(*at)++] = to[k - from];
        j->p++;
        return QD_OK;
    }
    if (*j->p != 'u') return syntax(j, "one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
    j->p++;
    unsigned cp = 0;
    qd_status st = unicode_escape(j, &cp);
    if (st == QD_OK) *at += put_utf8(out + *at, cp);
    return st;
}

/* A string at j->p (the opening quote), decoded into *out (malloc'd, NUL-terminated; *len
 * bytes, which may include NULs from \u0000). Decoded text is never longer than its source. */
static qd_status string(jp *j, char **out, size_t *len)
{
    if (!take(j, '"')) return syntax(j, "a string");
    const char *q = j->p;
    while (q < j->end && *q != '"') q += *q == '\\' && q + 1 < j->end ? 2 : 1;
    char *s = malloc((size_t)(q - j->p) + 1);
    if (!s) return qd_fail(j->err, QD_NOMEM, "out of memory");
    size_t at = 0;
    qd_status st = QD_OK;
    while (st == QD_OK) {
        if (j->p >= j->end) {
            st = syntax(j, "the closing '\"' of a string");
            break;
        }
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') break;
        if (c == '\\') {
            j->p++;
            st = escape(j, s, &at);
        } else if (c < 0x20) {
            st = syntax(j, "no control character in a string (escape it)");
        } else if (c < 0x80) {
            s[at++] = (char)c;
            j->p++;
        } else {
            size_t k = utf8_len((const unsigned char *)j->p, (size_t)(j->end - j->p));
            if (k == 0)
                st = fail(j, "the body is not valid UTF-8 at byte %zu", (size_t)(j->p - j->begin));
            memcpy(s + at, j->p, k);
            at += k;
            j->p += k;
        }
    }
    if (st != QD_OK) {
        free(s);
        return st;
    }
    j->p++; /* the closing quote */
    s[at] = '\0';
    *out = s;
    *len = at;
    return QD_OK;
}

/* ---- numbers ----------------------------------------------------------------------------------
 */

static bool is_digit(const jp *j, const char *q)
{
    return q < j->end && *q >= '0' && *q <= '9';
}

/* The extent of a JSON number at j->p: false when there is none. *integer: no fraction or
 * exponent. */
static bool number_extent(const jp *j, const char **stop, bool *integer)
{
    const char *q = j->p;
    if (q < j->end && *q == '-') q++;
    if (!is_digit(j, q)) return false;
    if (*q == '0')
        q++;
    else
        while (is_digit(j, q)) q++;
    *integer = true;
    if (q < j->end && *q == '.') {
        if (!is_digit(j, ++q)) return false;
        while (is_digit(j, q)) q++;
        *integer = false;
    }
    if (q < j->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < j->end && (*q == '+' || *q == '-')) q++;
        if (!is_digit(j, q)) return false;
        while (is_digit(j, q)) q++;
        *integer = false;
    }
    *stop = q;
    return true;
}

/* What stands where a number belongs, for the message. */
static const char *value_kind(const jp *j)
{
    if (j->p >= j->end) return "nothing";
    switch (*j->p) {
    case '"':
        return "a string";
    case '{':
        return "an object";
    case '[':
        return "a list";
    case 't':
    case 'f':
        return "a boolean";
    case 'n':
        return "null";
    default:
        return "an invalid token";
    }
}

static bool starts_with(const jp *j, const char *word)
{
    size_t n = strlen(word);
    return (size_t)(j->end - j->p) >= n && memcmp(j->p, word, n) == 0;
}

/* A number at j->p (after whitespace) into *v, finite. what names the value in messages. */
static qd_status number(jp *j, double *v, bool *integer, const char *what)
{
    const char *stop;
    if (!number_extent(j, &stop, integer)) {
        if (starts_with(j, "NaN") || starts_with(j, "Infinity") || starts_with(j, "-Infinity"))
            return fail(j, "%s holds %.*s; values must be finite numbers", what,
                        *j->p == 'N'   ? 3
                        : *j->p == 'I' ? 8
                                       : 9,
                        j->p);
        return fail(j, "%s must be a number or nested lists of numbers, not %s", what,
                    value_kind(j));
    }
    char small[64], *text = small;
    size_t len = (size_t)(stop - j->p);
    if (len >= sizeof small && !(text = malloc(len + 1)))
        return qd_fail(j->err, QD_NOMEM, "out of memory");
    memcpy(text, j->p, len);
    text[len] = '\0';
    *v = strtod(text, NULL);
    if (text != small) free(text);
    if (!isfinite(*v))
        return fail(j, "%s holds %.*s, which overflows a double; values must be finite", what,
                    (int)(len > 40 ? 40 : len), j->p);
    j->p = stop;
    return QD_OK;
}

/* ---- one statistic: a number or nested lists ------------------------------------------------- */

static qd_status push(jp *j, double v)
{
    if ((int64_t)j->n == QD_ACT_MAX_ELEMS)
        return fail(j, "a statistic has more than %lld elements", (long long)QD_ACT_MAX_ELEMS);
    if (j->n == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 64;
        double *b = realloc(j->buf, cap * sizeof *b);
        if (!b) return qd_fail(j->err, QD_NOMEM, "out of memory");
        j->buf = b;
        j->cap = cap;
    }
    j->buf[j->n++] = v;
    return QD_OK;
}

static qd_status ragged(jp *j, const char *what, int depth)
{
    return fail(j,
                "%s is ragged: lists nested to different depths or of different lengths "
                "(at depth %d, byte %zu)",
                what, depth, (size_t)(j->p - j->begin));
}

/* The list at j->p ('['), at depth (0: the outermost). Every list at one depth has the length
 * the first one had (j->dims, -1 until known) and numbers are all at depth j->rank. */
static qd_status list(jp *j, int depth, const char *what)
{
    if (depth >= QUANT_MAX_RANK)
        return fail(j, "%s has more than %d dimensions", what, QUANT_MAX_RANK);
    j->p++; /* '[' */
    if (take(j, ']')) return fail(j, "%s holds an empty list", what);
    int64_t len = 0;
    do {
        skip_ws(j);
        qd_status st;
        if (j->p < j->end && *j->p == '[') {
            if (j->rank >= 0 && depth + 1 >= j->rank) return ragged(j, what, depth + 1);
            st = list(j, depth + 1, what);
        } else {
            if (j->rank < 0) j->rank = depth + 1;
            if (j->rank != depth + 1) return ragged(j, what, depth + 1);
            double v;
            bool integer;
            st = number(j, &v, &integer, what);
            if (st == QD_OK) st = push(j, v);
        }
        if (st != QD_OK) return st;
        len++;
    } while (take(j, ','));
    if (!take(j, ']')) return syntax(j, "',' or ']'");
    if (j->dims[depth] < 0) j->dims[depth] = len;
    if (j->dims[depth] != len) return ragged(j, what, depth);
    return QD_OK;
}

/* A statistic's value (a number: rank 0, or nested lists) into v. */
static qd_status stat_value(jp *j, sp_value *v, const char *what)
{
    j->n = 0;
    j->rank = -1;
    for (int i = 0; i < QUANT_MAX_RANK; i++) j->dims[i] = -1;
    skip_ws(j);
    qd_status st;
    if (j->p < j->end && *j->p == '[') {
        st = list(j, 0, what);
    } else {
        double x;
        bool integer;
        j->rank = 0;
        st = number(j, &x, &integer, what);
        if (st == QD_OK) st = push(j, x);
    }
    if (st != QD_OK) return st;
    *v = (sp_value){.present = true, .rank = j->rank, .n = (int64_t)j->n};
    memcpy(v->shape, j->dims, (size_t)j->rank * sizeof *v->shape);
    v->v = realloc(j->buf, j->n * sizeof *v->v); /* the scratch array moves into v */
    if (!v->v) v->v = j->buf;
    j->buf = NULL;
    j->n = j->cap = 0;
    return QD_OK;
}

/* ---- an activation ----------------------------------------------------------------------------
 */

/* "count": an integer >= 1 (an integral real such as 3.0 counts, as numpy may write it). */
static qd_status count_value(jp *j, int64_t *count)
{
    double v;
    bool integer;
    const char *stop;
    skip_ws(j);
    if (!number_extent(j, &stop, &integer))
        return fail(j, "count must be an integer from 1 to 2^53, not %s", value_kind(j));
    qd_status st = number(j, &v, &integer, "count");
    if (st != QD_OK) return st;
    if (v < 1 || v > (double)COUNT_MAX || v != floor(v))
        return fail(j, "count must be an integer from 1 to 2^53, not %.17g", v);
    *count = (int64_t)v;
    return QD_OK;
}

/* One key of an activation's object and its value. */
static qd_status act_member(jp *j, sp_value slots[SP_SLOTS], int64_t *count)
{
    char *key;
    size_t len;
    qd_status st = string(j, &key, &len);
    if (st != QD_OK) return st;
    if (!take(j, ':')) st = syntax(j, "':'");
    sp_slot slot;
    if (st != QD_OK) {
        /* reported */
    } else if (j->merge && strcmp(key, "count") == 0 && len == 5) {
        st = *count ? fail(j, "key \"count\" comes twice") : count_value(j, count);
    } else if (sp_slot_parse(key, len, j->merge, &slot)) {
        st = slots[slot].present ? fail(j, "key \"%s\" comes twice", key)
                                 : stat_value(j, &slots[slot], key);
    } else if (j->merge) {
        st = fail(j,
                  "unknown key \"%.100s\" (a merge takes count with sum_of_absmax, or with "
                  "sum_of_min and sum_of_max, and/or with sum_of_mean_sq)",
                  key);
    } else {
        st = fail(j,
                  "unknown key \"%.100s\" (an update takes absmax, or min and max, and/or "
                  "mean_sq)",
                  key);
    }
    free(key);
    return st;
}

static qd_status activation(jp *j, sp_entries *list)
{
    sp_value slots[SP_SLOTS] = {{0}};
    int64_t count = 0;
    skip_ws(j);
    if (j->p >= j->end || *j->p != '{')
        return fail(j, "must be an object such as {\"%s\": [...]}, not %s",
                    sp_slot_name(SP_ABSMAX, j->merge), value_kind(j));
    j->p++;
    qd_status st = QD_OK;
    if (!take(j, '}')) {
        do st = act_member(j, slots, &count);
        while (st == QD_OK && take(j, ','));
        if (st == QD_OK && !take(j, '}')) st = syntax(j, "',' or '}'");
    }
    if (st != QD_OK) {
        sp_values_free(slots);
        return st;
    }
    return sp_entries_add(list, j->act, slots, count, j->merge, j->err);
}

/* ---- the document -----------------------------------------------------------------------------
 */

static qd_status stats_member(jp *j, sp_entries *list)
{
    char *name;
    size_t len;
    qd_status st = string(j, &name, &len);
    if (st != QD_OK) return st;
    const char *problem = sp_name_problem(name, len);
    if (problem)
        st = fail(j, "%s (\"%.100s\")", problem, name);
    else if (!take(j, ':'))
        st = syntax(j, "':'");
    j->act = name;
    if (st == QD_OK) st = activation(j, list);
    j->act = NULL;
    free(name);
    return st;
}

static qd_status stats_object(jp *j, sp_entries *list)
{
    if (!take(j, '{'))
        return fail(j, "\"stats\" must be an object of activations, not %s", value_kind(j));
    if (take(j, '}')) return QD_OK;
    qd_status st;
    do st = stats_member(j, list);
    while (st == QD_OK && take(j, ','));
    if (st == QD_OK && !take(j, '}')) st = syntax(j, "',' or '}'");
    return st;
}

static qd_status step_value(jp *j, int64_t *step)
{
    skip_ws(j);
    if (starts_with(j, "null")) {
        j->p += 4;
        return QD_OK;
    }
    const char *stop;
    bool integer = false;
    if (!number_extent(j, &stop, &integer) || !integer || *j->p == '-' || stop - j->p > 18)
        return fail(j, "\"step\" must be an integer from 0 to 10^18 - 1 (or null)");
    int64_t v = 0;
    for (const char *q = j->p; q < stop; q++) v = v * 10 + (*q - '0');
    *step = v;
    j->p = stop;
    return QD_OK;
}

static qd_status document_member(jp *j, sp_entries *list, bool *seen_step, bool *seen_stats,
                                 int64_t *step)
{
    char *key;
    size_t len;
    qd_status st = string(j, &key, &len);
    if (st != QD_OK) return st;
    if (!take(j, ':'))
        st = syntax(j, "':'");
    else if (strcmp(key, "step") == 0 && len == 4)
        st = *seen_step ? fail(j, "\"step\" comes twice") : step_value(j, step);
    else if (strcmp(key, "stats") == 0 && len == 5)
        st = *seen_stats ? fail(j, "\"stats\" comes twice") : stats_object(j, list);
    else
        st = fail(j, "unknown field \"%.100s\" (a post is {\"step\": N, \"stats\": {...}})", key);
    *seen_step |= strcmp(key, "step") == 0;
    *seen_stats |= strcmp(key, "stats") == 0;
    free(key);
    return st;
}

static qd_status document(jp *j, sp_entries *list, int64_t *step)
{
    bool seen_step = false, seen_stats = false;
    if (!take(j, '{')) return fail(j, "the body must be a JSON object {\"stats\": {...}}");
    qd_status st = QD_OK;
    if (!take(j, '}')) {
        do st = document_member(j, list, &seen_step, &seen_stats, step);
        while (st == QD_OK && take(j, ','));
        if (st == QD_OK && !take(j, '}')) st = syntax(j, "',' or '}'");
    }
    skip_ws(j);
    if (st == QD_OK && j->p != j->end) st = syntax(j, "the end of the body");
    if (st == QD_OK && !seen_stats) st = fail(j, "the body has no \"stats\" object");
    return st;
}

qd_status qd_stats_parse_json(const char *body, size_t len, bool merge, qd_stat_post *out,
                              qd_err *err)
{
    *out = (qd_stat_post){.merge = merge, .step = -1};
    if (!body) body = "";
    jp j = {.p = body, .end = body + len, .begin = body, .merge = merge, .err = err};
    sp_entries list = {0};
    int64_t step = -1;
    qd_status st = document(&j, &list, &step);
    free(j.buf);
    if (st != QD_OK) {
        sp_entries_free(&list);
        return st;
    }
    out->step = step;
    return sp_entries_finish(&list, out, err);
}
