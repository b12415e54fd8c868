/* etag.h -- entity-tags (RFC 9110 section 8.8.3) in conditional requests: the If-None-Match
 * condition by the weak comparison. Pure: no libmicrohttpd, no allocation (thread-safe).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_ETAG_H
#define QD_ETAG_H

#include <stdbool.h>

/* Whether the If-None-Match field value `header` matches `etag`, the current representation's
 * entity-tag as the server sends it (`"..."`, or `W/"..."`), so that a GET or HEAD is answered
 * 304 (RFC 9110 13.1.2). The value, leading and trailing spaces and tabs aside, is `*` (matches
 * any representation) or a list of entity-tags separated by commas with optional whitespace
 * around each comma (empty elements allowed); it matches when one of them has etag's
 * opaque-tag, `W/` prefixes on either side ignored (the weak comparison of 8.8.3.2; W/ is
 * case-sensitive). An entity-tag is `[W/]"` then bytes 0x21, 0x23-0x7E or 0x80-0xFF then `"`.
 * A value that is not that syntax, an empty one, and NULL match nothing (the condition is
 * ignored and the representation served). */
bool qd_etag_none_match(const char *header, const char *etag);

#endif /* QD_ETAG_H */
