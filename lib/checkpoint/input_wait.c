/* input_wait.c -- inputs still arriving (quant_pipeline_options.input_wait): one call of the
 * caller's wait function, a false from it turned into the run's error with the reason it gave,
 * and the run's cancel flag checked once it returns.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ck_internal.h"

/* What never arrived: "byte N" or "the whole file". */
static const char *what_text(uint64_t end, char *buf, size_t cap)
{
    if (end == QUANT_INPUT_WHOLE) return "the whole file";
    snprintf(buf, cap, "byte %" PRIu64, end);
    return buf;
}

quant_ck_status ck_wait_input(const ck_wait *w, const char *name, uint64_t end, const char *tensor,
                              quant_ck_error *err)
{
    if (!w || !w->fn) return QUANT_CK_OK;
    char why[CK_WHY_MAX];
    memset(why, 0, sizeof why);
    bool ok = w->fn(w->user, name, end, why, sizeof why);
    why[sizeof why - 1] = '\0';
    if (!ok) {
        const char *reason = why[0] ? why : "no reason given";
        char what[48], shortname[CK_SHORT_MAX];
        const char *upto = what_text(end, what, sizeof what);
        if (tensor)
            return quant_ck_fail(err, QUANT_CK_ERR_IO,
                                 "tensor '%s': input stopped before %s arrived: %s",
                                 ck_short_text(tensor, shortname, sizeof shortname), upto, reason);
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "input stopped before %s arrived: %s", upto,
                             reason);
    }
    if (w->cancel && atomic_load(w->cancel))
        return quant_ck_fail(err, QUANT_CK_ERR_CANCELLED, "cancelled");
    return QUANT_CK_OK;
}
