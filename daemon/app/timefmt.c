/* timefmt.c -- ISO-8601 UTC times with milliseconds.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <time.h>

#include "timefmt.h"

char *qd_iso8601(int64_t unix_ms, char *buf)
{
    time_t secs = (time_t)(unix_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(buf, QD_TIME_LEN, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(unix_ms % 1000));
    return buf;
}
