/* timefmt.h -- unix milliseconds as the API writes times: ISO-8601 UTC with milliseconds.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_TIMEFMT_H
#define QD_TIMEFMT_H

#include <stdint.h>

#define QD_TIME_LEN 48 /* buffer size for qd_iso8601 */

/* "2026-11-23T14:00:00.123Z" into buf (QD_TIME_LEN bytes); returns buf. */
char *qd_iso8601(int64_t unix_ms, char *buf);

#endif /* QD_TIMEFMT_H */
