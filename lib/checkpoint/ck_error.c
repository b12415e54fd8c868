/* ck_error.c -- libquant-checkpoint's status names and error formatting (long names shortened
 * for messages).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <string.h>

#include "ck_internal.h"

static const char *const status_names[] = {
    [QUANT_CK_OK] = "ok",
    [QUANT_CK_ERR_IO] = "i/o error",
    [QUANT_CK_ERR_FORMAT] = "malformed file",
    [QUANT_CK_ERR_RULES] = "invalid rules",
    [QUANT_CK_ERR_QUANT] = "quantization failed",
    [QUANT_CK_ERR_NOMEM] = "out of memory",
    [QUANT_CK_ERR_CANCELLED] = "cancelled",
    [QUANT_CK_ERR_UNSUPPORTED] = "unsupported",
    [QUANT_CK_ERR_ARG] = "invalid argument",
    [QUANT_CK_ERR_ACCESS] = "access refused",
};

const char *quant_ck_status_str(quant_ck_status status)
{
    if ((unsigned)status >= sizeof status_names / sizeof status_names[0]) return "unknown status";
    return status_names[status];
}

quant_ck_status quant_ck_fail(quant_ck_error *err, quant_ck_status status, const char *fmt, ...)
{
    if (err) {
        err->status = status;
        va_list ap;
        va_start(ap, fmt);
        ck_vformat(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

void quant_ck_prefix(quant_ck_error *err, const char *fmt, ...)
{
    if (!err) return;
    char prefix[QUANT_CK_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    ck_vformat(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[QUANT_CK_MESSAGE_MAX];
    memcpy(old, err->message, sizeof old);
    old[sizeof old - 1] = '\0';
    /* prefix + ": " + old, cut to the message size (always NUL-terminated). */
    size_t cap = sizeof err->message - 1, len = 0;
    const char *parts[] = {prefix, ": ", old};
    for (size_t i = 0; i < 3 && len < cap; i++) {
        size_t k = strlen(parts[i]);
        if (k > cap - len) k = cap - len;
        memcpy(err->message + len, parts[i], k);
        len += k;
    }
    err->message[len] = '\0';
}

const char *ck_short_text(const char *s, char *buf, size_t cap)
{
    size_t len = strlen(s), keep = CK_SHORT_KEEP;
    if (len <= CK_SHORT_KEEP + 16 || cap < CK_SHORT_MAX) return s;
    while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80) keep--; /* whole characters */
    snprintf(buf, cap, "%.*s...[%zu bytes]", (int)keep, s, len);
    return buf;
}
