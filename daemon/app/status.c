/* status.c -- qd_fail, the one way a daemon call reports a failure (status.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdarg.h>
#include <stdio.h>

#include "status.h"

qd_status qd_fail(qd_err *err, qd_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return st;
}
