/* store_pg_conninfo.c -- connection strings in messages: the PostgreSQL engine names its server
 * by the string's keywords with the password left out (libpq's own parser says which are
 * secret), and redacts the password from any libpq message that might quote the string (a
 * malformed URI's error echoes the piece it could not read). The password itself is only ever
 * handed to libpq.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_pg.h"

#define MASK_MAX    1024
#define SECRETS_MAX 4
#define REDACTED    "***"

/* Appends " key=value" (value quoted when it holds a space or a quote) to buf. */
static void append_pair(char *buf, size_t cap, const char *key, const char *val)
{
    size_t n = strlen(buf);
    bool quote = !*val || strpbrk(val, " \t'\\") != NULL;
    int w = snprintf(buf + n, cap - n, "%s%s=%s", n ? " " : "", key, quote ? "'" : "");
    if (w < 0 || (size_t)w >= cap - n) return;
    n += (size_t)w;
    for (const char *c = val; *c && n + 3 < cap; c++) {
        if (quote && (*c == '\'' || *c == '\\')) buf[n++] = '\\';
        buf[n++] = *c;
    }
    if (quote && n + 1 < cap) buf[n++] = '\'';
    buf[n] = '\0';
}

char *qd_pg_mask(const char *target)
{
    char buf[MASK_MAX] = "";
    char *errmsg = NULL;
    PQconninfoOption *opts = PQconninfoParse(target, &errmsg);
    if (!opts) {
        PQfreemem(errmsg); /* it may quote the string, password and all */
        bool bare = !strchr(target, '=') && !strstr(target, "://");
        if (bare) /* libpq takes a bare word as a database name: it holds no password */
            append_pair(buf, sizeof buf, "dbname", target);
        else
            snprintf(buf, sizeof buf, "(a connection string libpq cannot parse)");
        return strdup(buf);
    }
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        bool secret =
            strcmp(o->keyword, "password") == 0 || (o->dispchar && strchr(o->dispchar, '*'));
        if (o->val && *o->val && !secret) append_pair(buf, sizeof buf, o->keyword, o->val);
    }
    PQconninfoFree(opts);
    return strdup(*buf ? buf : "libpq's defaults");
}

/* ---- redaction --------------------------------------------------------------------------------
 */

typedef struct secrets {
    char *s[SECRETS_MAX];
    int n;
} secrets;

static void add_secret(secrets *sec, const char *p, size_t len)
{
    if (len == 0 || sec->n == SECRETS_MAX) return;
    char *copy = strndup(p, len);
    if (copy) sec->s[sec->n++] = copy;
}

/* A URI's password percent-decoded too (the form a message may show once decoded). */
static void add_decoded(secrets *sec, const char *p, size_t len)
{
    char *d = malloc(len + 1);
    if (!d) return;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '%' && i + 2 < len && isxdigit((unsigned char)p[i + 1]) &&
            isxdigit((unsigned char)p[i + 2])) {
            char hex[3] = {p[i + 1], p[i + 2], '\0'};
            d[k++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else {
            d[k++] = p[i];
        }
    }
    add_secret(sec, d, k);
    free(d);
}

/* The password of a keyword/value string: password = value, value bare or single-quoted. */
static void keyword_secret(secrets *sec, const char *t)
{
    for (const char *k = strstr(t, "password"); k; k = strstr(k + 1, "password")) {
        const char *v = k + strlen("password");
        while (isspace((unsigned char)*v)) v++;
        if (*v != '=') continue;
        v++;
        while (isspace((unsigned char)*v)) v++;
        size_t len = 0;
        if (*v == '\'') {
            v++;
            while (v[len] && v[len] != '\'') len += v[len] == '\\' && v[len + 1] ? 2 : 1;
        } else {
            len = strcspn(v, " \t\n&");
        }
        add_secret(sec, v, len);
    }
}

/* The password of a URI's user:password@ (the last '@' before the path ends the user info). */
static void uri_secret(secrets *sec, const char *t)
{
    const char *auth = strstr(t, "://");
    if (!auth) return;
    auth += 3;
    size_t alen = strcspn(auth, "/?");
    const char *at = NULL;
    for (size_t i = 0; i < alen; i++)
        if (auth[i] == '@') at = auth + i;
    const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
    if (!colon) return;
    add_secret(sec, colon + 1, (size_t)(at - colon - 1));
    add_decoded(sec, colon + 1, (size_t)(at - colon - 1));
}

/* Replaces every occurrence of each secret in out (cap bytes) by REDACTED, longest first. */
static void scrub(char *out, size_t cap, secrets *sec)
{
    for (int i = 0; i < sec->n; i++) {
        size_t len = strlen(sec->s[i]);
        size_t keep = strlen(REDACTED);
        for (char *hit = strstr(out, sec->s[i]); hit; hit = strstr(hit, sec->s[i])) {
            size_t at = (size_t)(hit - out), tail = strlen(hit + len);
            if (at + keep + 1 > cap) { /* no room for the mark: cut the message here */
                *hit = '\0';
                break;
            }
            if (at + keep + tail + 1 > cap) tail = cap - at - keep - 1;
            memmove(hit + keep, hit + len, tail);
            memcpy(hit, REDACTED, keep);
            hit[keep + tail] = '\0';
            hit += keep;
        }
    }
}

void qd_pg_redact(const char *target, const char *msg, char *out, size_t cap)
{
    if (cap == 0) return;
    snprintf(out, cap, "%s", msg);
    if (cap <= strlen(REDACTED) + 1) {
        out[0] = '\0';
        return;
    }
    secrets sec = {.n = 0};
    keyword_secret(&sec, target);
    uri_secret(&sec, target);
    /* longest first, so a secret inside another is not left half-replaced */
    for (int i = 0; i < sec.n; i++)
        for (int j = i + 1; j < sec.n; j++)
            if (strlen(sec.s[j]) > strlen(sec.s[i])) {
                char *x = sec.s[i];
                sec.s[i] = sec.s[j];
                sec.s[j] = x;
            }
    scrub(out, cap, &sec);
    for (int i = 0; i < sec.n; i++) {
        explicit_bzero(sec.s[i], strlen(sec.s[i]));
        free(sec.s[i]);
    }
}
