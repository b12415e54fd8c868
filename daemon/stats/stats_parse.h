/* stats_parse.h -- what the two statistics parsers (stats_parse_json.c, stats_parse_st.c) share
 * and nobody else sees: one statistic's array while an activation is read, turning an
 * activation's arrays into a qd_stat_entry with every rule of a post checked (stats_parse.c),
 * and collecting the entries of a post.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STATS_PARSE_H
#define QD_STATS_PARSE_H

#include "stats.h"

/* Activation names: 1..QD_ACT_NAME_MAX bytes of UTF-8 without control characters. */
#define QD_ACT_NAME_MAX 1024
/* The most elements one statistic may have: the store's limit (QD_STATS_MAX_ELEMS in
 * stats_internal.h; the stats_api suite checks they agree), enforced while a body is read so a
 * post over it is a 400 like any malformed post, and never a 409. */
#define QD_ACT_MAX_ELEMS ((int64_t)1 << 22)

/* The statistics one activation may carry: absmax, or min and max, and/or mean_sq (in a merge:
 * sum_of_absmax, or sum_of_min and sum_of_max, and/or sum_of_mean_sq). */
typedef enum sp_slot { SP_ABSMAX = 0, SP_MIN, SP_MAX, SP_MEAN_SQ, SP_SLOTS } sp_slot;

/* One statistic's values as read: shape and n finite doubles (malloc'd, owned). */
typedef struct sp_value {
    bool present;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    int64_t n;
    double *v;
} sp_value;

/* The name a slot has in a body: "absmax", "min", "max", "mean_sq" or, in a merge,
 * "sum_of_absmax", ... */
const char *sp_slot_name(sp_slot slot, bool merge);
/* The slot named `key` (as sp_slot_name spells it for this mode); false when none is. */
bool sp_slot_parse(const char *key, size_t len, bool merge, sp_slot *out);

/* Fills err with "activation 'NAME': " and the message; returns QD_INVALID. */
qd_status sp_fail_act(qd_err *err, const char *act, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* NULL when name (len bytes, decoded) is a valid activation name, else why not. */
const char *sp_name_problem(const char *name, size_t len);

/* Frees the slots' arrays and clears them. */
void sp_values_free(sp_value slots[SP_SLOTS]);

/* The entries of a post while it is read. */
typedef struct sp_entries {
    qd_stat_entry *e;
    size_t n, cap;
} sp_entries;

/* Checks the combination of slots (absmax, or min and max of one shape, and/or mean_sq: shape [n],
 * values >= 0, n divisible by the last dimension of the others; count >= 1 for a merge) and the
 * values (absmax >= 0, min <= max element by element) and
 * appends the entry named `name` (copied); the slots' arrays move into it (the slots
 * are cleared either way). QD_INVALID naming the activation, QD_NOMEM. */
qd_status sp_entries_add(sp_entries *list, const char *name, sp_value slots[SP_SLOTS],
                         int64_t count, bool merge, qd_err *err);
/* Moves the entries into out (sorted by name); QD_INVALID when there are none or a name comes
 * twice. On failure everything is freed. */
qd_status sp_entries_finish(sp_entries *list, qd_stat_post *out, qd_err *err);
void sp_entries_free(sp_entries *list);

#endif /* QD_STATS_PARSE_H */
