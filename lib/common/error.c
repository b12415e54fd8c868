/* error.c -- status names and the error struct every failing call fills.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdarg.h>
#include <stdio.h> /* vsnprintf only: the library never prints */

#include "internal.h"

static const char *const status_names[] = {
    [QUANT_OK] = "ok",
    [QUANT_ERR_ARG] = "invalid argument",
    [QUANT_ERR_QTYPE] = "unknown qtype",
    [QUANT_ERR_METHOD] = "bad calibration method",
    [QUANT_ERR_AXIS] = "bad axis",
    [QUANT_ERR_TILE] = "bad tile size",
    [QUANT_ERR_ASYMMETRIC] = "asymmetric quantization not allowed for this qtype",
    [QUANT_ERR_NONFINITE] = "non-finite input",
    [QUANT_ERR_DTYPE] = "unsupported dtype",
    [QUANT_ERR_NOMEM] = "out of memory",
    [QUANT_ERR_RANGE] = "scale out of range",
    [QUANT_ERR_ISA] = "instruction set unavailable",
    [QUANT_ERR_THREAD] = "cannot start thread",
    [QUANT_ERR_UNSUPPORTED] = "unsupported for this qtype",
};

const char *quant_status_str(quant_status status)
{
    if ((unsigned)status >= sizeof status_names / sizeof status_names[0]) return "unknown status";
    return status_names[status];
}

unsigned quant_version_number(void)
{
    return QUANT_VERSION_NUMBER;
}

void quant_error_clear(quant_error *err)
{
    if (!err) return;
    err->status = QUANT_OK;
    err->index = -1;
    err->message[0] = '\0';
}

quant_status quant_fail(quant_error *err, quant_status status, const char *fmt, ...)
{
    if (!err) return status;
    err->status = status;
    err->index = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return status;
}
