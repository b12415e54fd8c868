/* log.h -- one line per event in logfmt on stderr (journald picks it up):
 *   ts=2026-11-23T14:00:00.123Z level=info msg="job finished" job=12 state=succeeded
 * Thread-safe (one write(2) per line); values are quoted and escaped when needed.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_LOG_H
#define QD_LOG_H

#include <stdbool.h>

typedef enum qd_log_level { QD_LOG_DEBUG = 0, QD_LOG_INFO, QD_LOG_WARN, QD_LOG_ERROR } qd_log_level;

bool qd_log_level_parse(const char *s, qd_log_level *out);
const char *qd_log_level_name(qd_log_level l);
void qd_log_set_level(qd_log_level l);
bool qd_log_enabled(qd_log_level l);

/* Logs msg with key/value pairs: keys and values alternate, NULL-terminated; values are strings
 * (quoted when they hold spaces, quotes, '=' or control characters). Example:
 *   qd_log(QD_LOG_INFO, "request", "route", "/v1/jobs", "status", "202", NULL); */
void qd_log(qd_log_level level, const char *msg, ...) __attribute__((sentinel));

#endif /* QD_LOG_H */
