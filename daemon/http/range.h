/* range.h -- the Range request header (RFC 9110 section 14): a strict parser of the `bytes`
 * ranges-specifier, and what it asks of a representation of a given size. Pure: no
 * libmicrohttpd, no allocation, no global state (thread-safe).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_RANGE_H
#define QD_RANGE_H

#include <stdint.h>

typedef enum qd_range_result {
    QD_RANGE_NONE = 0,     /* no header: serve 200 with the whole representation */
    QD_RANGE_INVALID,      /* not a valid `bytes=` ranges-specifier: ignore it (200, whole) */
    QD_RANGE_SINGLE,       /* one satisfiable range: 206 of *from..*to (from <= to < size) */
    QD_RANGE_MULTI,        /* satisfiable, but not as one range: 200 with the whole body */
    QD_RANGE_UNSATISFIABLE /* 416, with a Content-Range giving only the size */
} qd_range_result;

/* Parses header (a Range field value, or NULL) against a representation of size bytes.
 *
 * Grammar (RFC 9110 14.1.1 and the list rule of 5.6.1): the field value, leading and trailing
 * spaces and tabs aside, is `bytes=` (the unit case-insensitive) then a list of range-specs:
 * `A-B`, `A-` or `-N` with A, B, N of 1*DIGIT (no sign, no space inside a range-spec; no
 * value past UINT64_MAX), separated by commas with optional whitespace around each comma;
 * empty list elements are allowed, at least one range-spec is required, and B must not be
 * below A. Anything else is QD_RANGE_INVALID: another unit, a sign, a space after '=', an
 * overflowing number.
 *
 * Then (RFC 9110 14.1.2): A-B and A- are satisfiable when A < size (B past the end is clamped
 * to size - 1); -N when N > 0 (the last N bytes, the whole when N >= size). No satisfiable
 * range-spec: QD_RANGE_UNSATISFIABLE. One range-spec, satisfiable: QD_RANGE_SINGLE with
 * *from, *to. Several range-specs with at least one satisfiable: QD_RANGE_MULTI (the daemon
 * does not send multipart/byteranges; RFC 9110 lets a server ignore Range). An empty
 * representation with a satisfiable -N has no byte to send either: QD_RANGE_MULTI.
 * *from and *to are written only for QD_RANGE_SINGLE. */
qd_range_result qd_range_parse(const char *header, uint64_t size, uint64_t *from, uint64_t *to);

/* "none", "invalid", "single", "multi", "unsatisfiable" (tests and logs). */
const char *qd_range_result_name(qd_range_result r);

#endif /* QD_RANGE_H */
