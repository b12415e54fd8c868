/* etag.c -- entity-tags: the If-None-Match list and its weak comparison (etag.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stddef.h>
#include <string.h>

#include "etag.h"

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static const char *skip_ows(const char *p, const char *end)
{
    while (p < end && is_ows(*p)) p++;
    return p;
}

/* etagc = %x21 / %x23-7E / obs-text */
static bool is_etagc(unsigned char c)
{
    return c == 0x21 || (c >= 0x23 && c != 0x7f);
}

/* An entity-tag at *p (before end): its opaque-tag, quotes included, to *tag and *len (the W/
 * prefix skipped); *p moves past it. */
static bool entity_tag(const char **p, const char *end, const char **tag, size_t *len)
{
    const char *s = *p;
    if (end - s >= 2 && s[0] == 'W' && s[1] == '/') s += 2;
    if (s >= end || *s != '"') return false;
    const char *q = s + 1;
    while (q < end && is_etagc((unsigned char)*q)) q++;
    if (q >= end || *q != '"') return false;
    *tag = s;
    *len = (size_t)(q + 1 - s);
    *p = q + 1;
    return true;
}

bool qd_etag_none_match(const char *header, const char *etag)
{
    if (!header || !etag) return false;
    const char *e = etag, *e_end = etag + strlen(etag), *mine;
    size_t mine_len;
    if (!entity_tag(&e, e_end, &mine, &mine_len) || e != e_end) return false;
    const char *p = header, *end = header + strlen(header);
    p = skip_ows(p, end); /* the field value excludes surrounding whitespace */
    while (end > p && is_ows(end[-1])) end--;
    if (end - p == 1 && *p == '*') return true;
    bool match = false, any = false;
    for (;;) { /* [ entity-tag ] *( OWS "," OWS [ entity-tag ] ), RFC 9110 5.6.1.2 */
        if (p < end && !is_ows(*p) && *p != ',') {
            const char *tag;
            size_t len;
            if (!entity_tag(&p, end, &tag, &len)) return false;
            any = true;
            match = match || (len == mine_len && memcmp(tag, mine, len) == 0);
        }
        p = skip_ows(p, end);
        if (p == end) break;
        if (*p != ',') return false;
        p = skip_ows(p + 1, end);
    }
    return any && match;
}
