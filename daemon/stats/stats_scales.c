/* stats_scales.c -- the daemon's averaged statistics (qd_stat_avg, from the store) seen as the
 * library's quant_act_stat, so that a job's stats_model and GET /v1/models/{m}/scales go through
 * libquant-checkpoint's one SRQ engine (quant_srq_compute, SPEC sections 4 and 8).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "stats.h"

/* The library's kind of each of the store's. */
static const quant_stat_kind kinds[] = {
    [QD_STAT_ABSMAX] = QUANT_STAT_ABSMAX,
    [QD_STAT_MINMAX] = QUANT_STAT_MINMAX,
};

quant_act_stat *qd_stat_views(const qd_stat_avg *avg, size_t n)
{
    quant_act_stat *v = calloc(n ? n : 1, sizeof *v);
    for (size_t i = 0; v && i < n; i++) {
        const qd_stat_avg *a = &avg[i];
        /* a kind without a calibration for SRQ (none yet; importance-only statistics, SPEC
         * section 9) is skipped by the engine with its reason */
        bool known = (size_t)a->kind < sizeof kinds / sizeof kinds[0];
        quant_stat_kind kind = known ? kinds[a->kind] : QUANT_STAT_NONE;
        v[i] = (quant_act_stat){.name = a->name,
                                .kind = kind,
                                .rank = a->rank,
                                .a = kind == QUANT_STAT_NONE ? NULL : a->a,
                                .b = kind == QUANT_STAT_MINMAX ? a->b : NULL,
                                .count = a->count,
                                .mean_sq = a->n_sq ? a->sq : NULL, /* weight_importance */
                                .mean_sq_len = a->n_sq};
        memcpy(v[i].shape, a->shape, sizeof v[i].shape);
    }
    return v;
}
