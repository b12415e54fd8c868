/* stats_parse.c -- the rules every statistics post follows, whatever its encoding: activation
 * names, which statistics an activation carries (absmax, or min and max of one shape, and/or
 * mean_sq of shape [n]; their sums and a count in a merge), their values (absmax >= 0, min <= max,
 * mean_sq >= 0; finite, as the readers check) and entries sorted by name with no name
 * twice (a post is freed with qd_stat_post_clear, in stats_store.c). The JSON and safetensors
 * readers (stats_parse_json.c, stats_parse_st.c) call these. SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats_parse.h"

static const char *const slot_names[2][SP_SLOTS] = {
    {"absmax", "min", "max", "mean_sq"},
    {"sum_of_absmax", "sum_of_min", "sum_of_max", "sum_of_mean_sq"},
};

const char *sp_slot_name(sp_slot slot, bool merge)
{
    return slot_names[merge][slot];
}

bool sp_slot_parse(const char *key, size_t len, bool merge, sp_slot *out)
{
    for (int i = 0; i < SP_SLOTS; i++) {
        const char *name = slot_names[merge][i];
        if (strlen(name) == len && memcmp(name, key, len) == 0) {
            *out = (sp_slot)i;
            return true;
        }
    }
    return false;
}

qd_status sp_fail_act(qd_err *err, const char *act, const char *fmt, ...)
{
    if (!err) return QD_INVALID;
    int at = snprintf(err->message, sizeof err->message, "activation '%.200s': ", act);
    if (at < 0 || (size_t)at >= sizeof err->message) return QD_INVALID;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message + at, sizeof err->message - (size_t)at, fmt, ap);
    va_end(ap);
    return QD_INVALID;
}

const char *sp_name_problem(const char *name, size_t len)
{
    if (len == 0) return "an activation name must not be empty";
    if (len > QD_ACT_NAME_MAX) return "an activation name is longer than 1024 bytes";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f) return "an activation name must not hold control characters";
    }
    return NULL;
}

void sp_values_free(sp_value slots[SP_SLOTS])
{
    for (int i = 0; i < SP_SLOTS; i++) {
        free(slots[i].v);
        slots[i] = (sp_value){0};
    }
}

static bool same_shape(const sp_value *x, const sp_value *y)
{
    if (x->rank != y->rank) return false;
    for (int i = 0; i < x->rank; i++)
        if (x->shape[i] != y->shape[i]) return false;
    return true;
}

static void shape_text(const sp_value *v, char *buf, size_t cap)
{
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < v->rank && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%" PRId64, i ? ", " : "", v->shape[i]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* mean_sq (SPEC section 9): the mean of x^2 over every axis but the last, one value per input
 * feature: shape [n], every value >= 0. The range statistic beside it (absmax, or min and max)
 * keeps the last axis whole (n), tiled (n / tile) or reduced (1): its last dimension divides n.
 * SPEC does not tie the two shapes together; this is the one relation every Qwix calibration
 * of an input satisfies, and it catches a mean_sq posted under the wrong activation. */
static qd_status check_mean_sq(const char *name, const sp_value s[SP_SLOTS], bool merge,
                               qd_err *err)
{
    const sp_value *q = &s[SP_MEAN_SQ], *range = s[SP_ABSMAX].present ? &s[SP_ABSMAX] : &s[SP_MIN];
    const char *key = sp_slot_name(SP_MEAN_SQ, merge);
    char text[200];
    if (q->rank != 1) {
        shape_text(q, text, sizeof text);
        return sp_fail_act(err, name,
                           "%s has shape %s; it holds one value per input feature (the last axis), "
                           "shape [n]",
                           key, text);
    }
    for (int64_t i = 0; i < q->n; i++)
        if (q->v[i] < 0)
            return sp_fail_act(err, name, "%s value %lld is %.17g; a mean of squares is >= 0", key,
                               (long long)i, q->v[i]);
    if (!range->present || range->rank == 0) return QD_OK;
    int64_t last = range->shape[range->rank - 1];
    if (q->n % last == 0) return QD_OK;
    shape_text(range, text, sizeof text);
    return sp_fail_act(err, name,
                       "%s has %lld values (input features) but %s has shape %s; its last "
                       "dimension must divide them (the features whole, tiled or reduced to 1)",
                       key, (long long)q->n,
                       sp_slot_name(s[SP_ABSMAX].present ? SP_ABSMAX : SP_MIN, merge), text);
}

/* The values themselves (SPEC section 8): an absolute maximum is >= 0, a minimum is <= the
 * maximum of the same element (a merge's sums keep both relations). Without these a post of
 * {"absmax": -1} or {"min": 3, "max": -3} would be stored and become a meaningless scale. */
static qd_status check_values(const char *name, const sp_value s[SP_SLOTS], bool merge, qd_err *err)
{
    const sp_value *ab = &s[SP_ABSMAX], *mn = &s[SP_MIN], *mx = &s[SP_MAX];
    for (int64_t i = 0; ab->present && i < ab->n; i++)
        if (ab->v[i] < 0)
            return sp_fail_act(err, name,
                               "%s element %lld is %.17g; an absolute maximum is >= 0 (did you "
                               "mean min and max?)",
                               sp_slot_name(SP_ABSMAX, merge), (long long)i, ab->v[i]);
    for (int64_t i = 0; mn->present && mx->present && i < mn->n; i++)
        if (mn->v[i] > mx->v[i])
            return sp_fail_act(err, name,
                               "%s element %lld is %.17g but %s element %lld is %.17g; a minimum "
                               "is <= its maximum (min and max swapped?)",
                               sp_slot_name(SP_MIN, merge), (long long)i, mn->v[i],
                               sp_slot_name(SP_MAX, merge), (long long)i, mx->v[i]);
    return QD_OK;
}

/* Which statistics are there: absmax, or min and max of one shape, and/or mean_sq. */
static qd_status check_slots(const char *name, const sp_value s[SP_SLOTS], bool merge, qd_err *err)
{
    const char *ab = sp_slot_name(SP_ABSMAX, merge), *mn = sp_slot_name(SP_MIN, merge),
               *mx = sp_slot_name(SP_MAX, merge), *sq = sp_slot_name(SP_MEAN_SQ, merge);
    if (s[SP_ABSMAX].present && (s[SP_MIN].present || s[SP_MAX].present))
        return sp_fail_act(err, name, "has both %s and %s/%s; post one kind per activation", ab, mn,
                           mx);
    if (s[SP_MEAN_SQ].present) {
        qd_status st = check_mean_sq(name, s, merge, err);
        if (st != QD_OK) return st;
    }
    if (s[SP_ABSMAX].present) return check_values(name, s, merge, err);
    if (!s[SP_MIN].present && !s[SP_MAX].present) {
        if (s[SP_MEAN_SQ].present) return QD_OK;
        return sp_fail_act(err, name, "has no statistics: give %s, or %s and %s, and/or %s", ab, mn,
                           mx, sq);
    }
    if (!s[SP_MIN].present || !s[SP_MAX].present)
        return sp_fail_act(err, name, "has %s without %s", s[SP_MIN].present ? mn : mx,
                           s[SP_MIN].present ? mx : mn);
    if (!same_shape(&s[SP_MIN], &s[SP_MAX])) {
        char a[200], b[200];
        shape_text(&s[SP_MIN], a, sizeof a);
        shape_text(&s[SP_MAX], b, sizeof b);
        return sp_fail_act(err, name, "%s has shape %s but %s has shape %s", mn, a, mx, b);
    }
    return check_values(name, s, merge, err);
}

qd_status sp_entries_add(sp_entries *list, const char *name, sp_value slots[SP_SLOTS],
                         int64_t count, bool merge, qd_err *err)
{
    qd_status st = check_slots(name, slots, merge, err);
    if (st == QD_OK && merge && count < 1)
        st = sp_fail_act(err, name, "a merge needs \"count\", an integer >= 1");
    if (st == QD_OK && list->n == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 16;
        qd_stat_entry *e = realloc(list->e, cap * sizeof *e);
        if (e) {
            list->e = e;
            list->cap = cap;
        } else {
            st = qd_fail(err, QD_NOMEM, "out of memory");
        }
    }
    char *copy = st == QD_OK ? strdup(name) : NULL;
    if (st == QD_OK && !copy) st = qd_fail(err, QD_NOMEM, "out of memory");
    if (st != QD_OK) {
        sp_values_free(slots);
        return st;
    }
    qd_stat_kind kind = slots[SP_ABSMAX].present ? QD_STAT_ABSMAX
                        : slots[SP_MIN].present  ? QD_STAT_MINMAX
                                                 : QD_STAT_NONE;
    const sp_value *first = kind == QD_STAT_MINMAX ? &slots[SP_MIN] : &slots[SP_ABSMAX];
    qd_stat_entry *e = &list->e[list->n++];
    *e = (qd_stat_entry){.name = copy,
                         .kind = kind,
                         .rank = first->rank,
                         .n = first->n,
                         .a = first->v,
                         .b = kind == QD_STAT_MINMAX ? slots[SP_MAX].v : NULL,
                         .n_sq = slots[SP_MEAN_SQ].n,
                         .sq = slots[SP_MEAN_SQ].v,
                         .count = merge ? count : 1};
    memcpy(e->shape, first->shape, sizeof e->shape);
    for (int i = 0; i < SP_SLOTS; i++) slots[i] = (sp_value){0}; /* the arrays moved */
    return QD_OK;
}

static int by_name(const void *x, const void *y)
{
    return strcmp(((const qd_stat_entry *)x)->name, ((const qd_stat_entry *)y)->name);
}

qd_status sp_entries_finish(sp_entries *list, qd_stat_post *out, qd_err *err)
{
    qd_status st = QD_OK;
    if (list->n == 0) st = qd_fail(err, QD_INVALID, "the post holds no activations");
    if (st == QD_OK) qsort(list->e, list->n, sizeof *list->e, by_name);
    for (size_t i = 1; st == QD_OK && i < list->n; i++)
        if (strcmp(list->e[i - 1].name, list->e[i].name) == 0)
            st = sp_fail_act(err, list->e[i].name, "comes twice in the post");
    if (st != QD_OK) {
        sp_entries_free(list);
        return st;
    }
    /* the doubling's spare entries go: qd_stat_post_bytes counts n of them */
    qd_stat_entry *fit = realloc(list->e, list->n * sizeof *list->e);
    out->e = fit ? fit : list->e;
    out->n = list->n;
    *list = (sp_entries){0};
    return QD_OK;
}

void sp_entries_free(sp_entries *list)
{
    for (size_t i = 0; i < list->n; i++) {
        free(list->e[i].name);
        free(list->e[i].a);
        free(list->e[i].b);
        free(list->e[i].sq);
    }
    free(list->e);
    *list = (sp_entries){0};
}
