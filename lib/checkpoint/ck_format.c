/* ck_format.c -- vsnprintf for error messages that keeps the reason: a string argument of more
 * than CK_FORMAT_LONG bytes without a space (a 5000-character tensor name, a long regex: a name,
 * not a message being nested) is written as its first CK_SHORT_KEEP bytes, "..." and its length
 * (ck_short_text), so that what follows it in the message survives the 1 KiB limit. Every other
 * conversion is vsnprintf's, one at a time.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ck_internal.h"

#define CK_FORMAT_LONG 200 /* longer names are shortened; paths of real checkpoints stay whole */

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wformat-nonliteral" /* each piece is a checked caller's spec */
#endif

/* One conversion spec copied from fmt (at most 31 bytes: flags, width, precision, length). */
typedef struct spec {
    char text[32];
    char conv;
    char len[3];    /* "", "h", "hh", "l", "ll", "z", "j", "t", "L" */
    bool precision; /* "%.Ns" / "%.*s": the caller bounds the string (maybe not NUL-ended) */
} spec;

/* Appends text printed by snprintf(fmt-piece, value) to buf at *at (capacity cap). */
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int k_ = snprintf(buf + *at, cap - *at, __VA_ARGS__);                                      \
        *at += k_ > 0 ? ((size_t)k_ < cap - *at ? (size_t)k_ : cap - *at - 1) : 0;                 \
    } while (0)

/* Parses the spec at fmt (just after '%'), '*' widths taken from ap; returns the bytes read, 0
 * for a spec this formatter does not know (written as is). */
static size_t parse_spec(const char *fmt, spec *s, va_list *ap)
{
    size_t i = 0, o = 0;
    s->precision = false;
    s->text[o++] = '%';
    while (fmt[i] && strchr("-+ #0", fmt[i]) && o < 20) s->text[o++] = fmt[i++];
    for (int part = 0; part < 2; part++) {
        if (part == 1 && fmt[i] != '.') break;
        if (part == 1) s->text[o++] = fmt[i++];
        s->precision = part == 1;
        if (fmt[i] == '*') {
            o += (size_t)snprintf(s->text + o, sizeof s->text - o, "%d", va_arg(*ap, int));
            i++;
        }
        while (fmt[i] >= '0' && fmt[i] <= '9' && o < 26) s->text[o++] = fmt[i++];
    }
    size_t l = strspn(fmt + i, "hljztL");
    if (l > 2 || o + l + 2 > sizeof s->text) return 0;
    memcpy(s->len, fmt + i, l);
    s->len[l] = '\0';
    memcpy(s->text + o, fmt + i, l);
    o += l;
    i += l;
    s->conv = fmt[i];
    if (!s->conv || !strchr("diouxXcspfFeEgGaA", s->conv)) return 0;
    s->text[o++] = fmt[i++];
    s->text[o] = '\0';
    return i;
}

/* An integer conversion: its argument read as the type its length modifier names. */
static void put_int(const spec *s, va_list *ap, char *buf, size_t cap, size_t *at)
{
    bool sign = s->conv == 'd' || s->conv == 'i';
    const char *l = s->len;
    if (!strcmp(l, "ll") && sign)
        PUT(s->text, va_arg(*ap, long long));
    else if (!strcmp(l, "ll"))
        PUT(s->text, va_arg(*ap, unsigned long long));
    else if (!strcmp(l, "l") && sign)
        PUT(s->text, va_arg(*ap, long));
    else if (!strcmp(l, "l"))
        PUT(s->text, va_arg(*ap, unsigned long));
    else if ((!strcmp(l, "z") || !strcmp(l, "t")) && sign)
        PUT(s->text, va_arg(*ap, ptrdiff_t));
    else if (!strcmp(l, "z") || !strcmp(l, "t"))
        PUT(s->text, va_arg(*ap, size_t));
    else if (!strcmp(l, "j") && sign)
        PUT(s->text, va_arg(*ap, intmax_t));
    else if (!strcmp(l, "j"))
        PUT(s->text, va_arg(*ap, uintmax_t));
    else if (sign) /* int, and the h / hh widths promoted to it */
        PUT(s->text, va_arg(*ap, int));
    else
        PUT(s->text, va_arg(*ap, unsigned));
}

/* One conversion: the value taken from ap by its type, a long string shortened. */
static void put_one(const spec *s, va_list *ap, char *buf, size_t cap, size_t *at)
{
    if (s->conv == 's') {
        const char *v = va_arg(*ap, const char *);
        char shortened[CK_SHORT_MAX];
        bool name = v && !s->precision && strlen(v) > CK_FORMAT_LONG && !strchr(v, ' ');
        if (!v)
            PUT("%s", "(null)");
        else
            PUT(s->text, name ? ck_short_text(v, shortened, sizeof shortened) : v);
    } else if (s->conv == 'c') {
        PUT(s->text, va_arg(*ap, int));
    } else if (s->conv == 'p') {
        PUT(s->text, va_arg(*ap, void *));
    } else if (strchr("fFeEgGaA", s->conv)) {
        if (!strcmp(s->len, "L"))
            PUT(s->text, va_arg(*ap, long double));
        else
            PUT(s->text, va_arg(*ap, double));
    } else {
        put_int(s, ap, buf, cap, at);
    }
}

void ck_vformat(char *buf, size_t cap, const char *fmt, va_list ap)
{
    if (cap == 0) return;
    va_list aq;
    va_copy(aq, ap);
    size_t at = 0;
    buf[0] = '\0';
    for (const char *p = fmt; *p && at + 1 < cap;) {
        if (*p != '%' || p[1] == '%') {
            buf[at++] = *p;
            p += *p == '%' ? 2 : 1;
            continue;
        }
        spec s;
        size_t n = parse_spec(p + 1, &s, &aq);
        if (n == 0) { /* unknown: the rest as vsnprintf would print it */
            vsnprintf(buf + at, cap - at, p, aq);
            at = strlen(buf);
            break;
        }
        put_one(&s, &aq, buf, cap, &at);
        p += 1 + n;
    }
    buf[at < cap ? at : cap - 1] = '\0';
    va_end(aq);
}
