/* json_error.c -- jansson's parse errors in words a user can act on: an integer beyond 64 bits
 * ("too big integer near '99999999999999999999'") becomes a message naming the field it was given
 * for (the key before it in the text) and the range integers must lie in. Other errors pass
 * through as jansson words them.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "quant_ckpt.h"

/* The key whose value ends at text[end) (a number token), into key (NUL-terminated, shortened);
 * false when the value is not an object member (an array element, the whole document). */
static bool key_before(const char *text, size_t end, char *key, size_t cap)
{
    size_t i = end;
    while (i > 0 && strchr("0123456789+-.eE", text[i - 1])) i--;
    while (i > 0 && strchr(" \t\r\n", text[i - 1])) i--;
    if (i == 0 || text[i - 1] != ':') return false;
    i--;
    while (i > 0 && strchr(" \t\r\n", text[i - 1])) i--;
    if (i == 0 || text[i - 1] != '"') return false;
    size_t close = --i;
    while (i > 0 && !(text[i - 1] == '"' && (i < 2 || text[i - 2] != '\\'))) i--;
    if (i == 0) return false;
    size_t n = close - i;
    if (n >= cap) n = cap - 1;
    memcpy(key, text + i, n);
    key[n] = '\0';
    return true;
}

const char *quant_json_error_text(const char *text, size_t len, int position, const char *what,
                                  char *buf, size_t cap)
{
    if (!what || !buf || cap == 0) return what ? what : "";
    if (strncmp(what, "too big integer", 15) != 0 && strncmp(what, "too big negative", 16) != 0)
        return what;
    size_t end = position > 0 && (size_t)position <= len ? (size_t)position : 0;
    size_t start = end;
    while (text && start > 0 && strchr("0123456789+-", text[start - 1])) start--;
    char key[72];
    bool member = text && end > 0 && key_before(text, end, key, sizeof key);
    int digits = (int)(end - start > 40 ? 40 : end - start);
    snprintf(buf, cap,
             "%s%s%sinteger %.*s%s is out of range: integers must lie in %lld..%lld (64 bits)",
             member ? "field '" : "", member ? key : "", member ? "': " : "", digits,
             text ? text + start : "", end - start > 40 ? "..." : "", (long long)INT64_MIN,
             (long long)INT64_MAX);
    return buf;
}
