/* plan_errors.c -- planning reports every tensor it cannot plan, not only the first: a tile that
 * does not divide, a layout refusal, a missing statistic are gathered over the shard (and the
 * run) and given in one message: the first in full, then the others by name grouped by their
 * reason ("; the same for 'b.weight', 'c.weight'; 'd.weight' and 3 more: axis 1 of size 64 cannot
 * be tiled by 5 (not a divisor)"), a few names each and the rest counted. Errors that are not
 * about one tensor (out of memory, a cancel, a bad file) end planning at once.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <string.h>

#include "ck_internal.h"

bool ck_plan_error_is_tensors(quant_ck_status st)
{
    return st == QUANT_CK_ERR_QUANT || st == QUANT_CK_ERR_UNSUPPORTED || st == QUANT_CK_ERR_ARG ||
           st == QUANT_CK_ERR_RULES;
}

/* The reason at the end of a message: what follows its last ": " (the whole when none). */
static const char *reason_of(const char *msg)
{
    const char *r = msg, *p;
    while ((p = strstr(r, ": ")) != NULL) r = p + 2;
    return r;
}

/* The group of tensors failing for `why` (a new one when there is room), NULL when none. */
static ck_plan_group *group_of(ck_plan_errors *pe, const char *why)
{
    for (size_t g = 0; g < pe->n_groups; g++)
        if (strcmp(pe->groups[g].reason, why) == 0) return &pe->groups[g];
    if (pe->n_groups == CK_PLAN_GROUPS || strlen(why) >= sizeof pe->groups[0].reason) return NULL;
    ck_plan_group *g = &pe->groups[pe->n_groups++];
    snprintf(g->reason, sizeof g->reason, "%.*s", (int)sizeof g->reason - 1, why);
    return g;
}

void ck_plan_errors_add(ck_plan_errors *pe, const char *tensor, const quant_ck_error *err)
{
    if (pe->n++ == 0) {
        pe->first = *err;
        pe->first_reason = reason_of(pe->first.message);
        return;
    }
    const char *why = reason_of(err->message);
    ck_plan_group *g = strcmp(why, pe->first_reason) == 0 ? &pe->same : group_of(pe, why);
    if (!g) {
        pe->left_out++;
        return;
    }
    char buf[CK_SHORT_MAX], item[CK_SHORT_MAX + 8];
    const char *name = ck_short_text(tensor, buf, sizeof buf);
    snprintf(item, sizeof item, "%s'%s'", g->count ? ", " : "", name);
    size_t len = strlen(g->names), add = strlen(item);
    g->count++;
    if (len + add < sizeof g->names && g->count <= CK_PLAN_NAMES)
        memcpy(g->names + len, item, add + 1);
}

/* "; the same for 'a', 'b' and 3 more" or "; 'a', 'b' and 3 more: WHY" into out (cap). */
static void group_text(const ck_plan_group *g, bool same, char *out, size_t cap)
{
    size_t shown = 0;
    for (const char *p = g->names; *p; p++) shown += *p == '\'' ? 1 : 0;
    shown /= 2; /* two quotes a name (names with quotes only make the count smaller) */
    char more[48] = "";
    if (g->count > shown) snprintf(more, sizeof more, " and %zu more", g->count - shown);
    if (same)
        snprintf(out, cap, "; the same for %s%s", g->names, more);
    else
        snprintf(out, cap, "; %s%s: %s", g->names, more, g->reason);
}

quant_ck_status ck_plan_errors_finish(const ck_plan_errors *pe, quant_ck_error *err)
{
    if (pe->n == 0) return QUANT_CK_OK;
    if (pe->n == 1) {
        *err = pe->first;
        return pe->first.status;
    }
    char text[QUANT_CK_MESSAGE_MAX] = "", part[QUANT_CK_MESSAGE_MAX];
    size_t at = 0;
    for (size_t g = 0; g <= pe->n_groups && at < sizeof text; g++) {
        const ck_plan_group *grp = g == 0 ? &pe->same : &pe->groups[g - 1];
        if (grp->count == 0) continue;
        group_text(grp, g == 0, part, sizeof part);
        at += (size_t)snprintf(text + at, sizeof text - at, "%s", part);
    }
    char more[64] = "";
    if (pe->left_out) snprintf(more, sizeof more, "; and %zu more for other reasons", pe->left_out);
    return quant_ck_fail(err, pe->first.status, "%zu tensors cannot be planned: %s%s%s", pe->n,
                         pe->first.message, text, more);
}
