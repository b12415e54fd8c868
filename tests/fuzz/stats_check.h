/* stats_check.h -- what fuzz_stats_json.c and fuzz_stats_st.c check of a parsed statistics post:
 * every promise of stats.h's qd_stat_entry (names valid, sorted and unique; shapes that give n;
 * finite values; min and max together; mean_sq of shape [n], >= 0, or alone), and that a refused
 * post hands nothing out. SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_FUZZ_STATS_CHECK_H
#define QUANT_FUZZ_STATS_CHECK_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "stats.h"
#include "stats_parse.h"

static void check_post(qd_status st, const qd_stat_post *p, bool merge, const qd_err *err)
{
    if (st != QD_OK) {
        FUZZ_CHECK(st == QD_INVALID || st == QD_NOMEM);
        FUZZ_CHECK(!p->e && p->n == 0 && !p->model && !p->key);
        FUZZ_CHECK(memchr(err->message, '\0', sizeof err->message) && err->message[0]);
        return;
    }
    FUZZ_CHECK(p->e && p->n >= 1 && p->merge == merge && p->step >= -1 && !p->model && !p->key);
    for (size_t i = 0; i < p->n; i++) {
        const qd_stat_entry *e = &p->e[i];
        size_t len = strlen(e->name);
        FUZZ_CHECK(sp_name_problem(e->name, len) == NULL);
        FUZZ_CHECK(i == 0 || strcmp(p->e[i - 1].name, e->name) < 0);
        FUZZ_CHECK(e->rank >= 0 && e->rank <= QUANT_MAX_RANK);
        FUZZ_CHECK(merge ? e->count >= 1 : e->count == 1);
        /* mean_sq: shape [n_sq], finite, >= 0 */
        FUZZ_CHECK(e->n_sq >= 0 && e->n_sq <= QD_ACT_MAX_ELEMS && (e->n_sq > 0) == (e->sq != NULL));
        for (int64_t k = 0; k < e->n_sq; k++) FUZZ_CHECK(isfinite(e->sq[k]) && e->sq[k] >= 0);
        if (e->kind == QD_STAT_NONE) { /* mean_sq alone */
            FUZZ_CHECK(e->n_sq >= 1 && e->rank == 0 && e->n == 0 && !e->a && !e->b);
        } else {
            FUZZ_CHECK(e->kind == QD_STAT_ABSMAX || e->kind == QD_STAT_MINMAX);
            int64_t n = 1;
            for (int k = 0; k < e->rank; k++) {
                FUZZ_CHECK(e->shape[k] >= 1);
                n *= e->shape[k];
            }
            FUZZ_CHECK(n == e->n && n >= 1 && n <= QD_ACT_MAX_ELEMS);
            FUZZ_CHECK(e->a && (e->kind == QD_STAT_MINMAX) == (e->b != NULL));
            for (int64_t k = 0; k < n; k++)
                FUZZ_CHECK(isfinite(e->a[k]) && (!e->b || isfinite(e->b[k])));
            /* the range's last dimension divides the input features */
            if (e->sq && e->rank > 0) FUZZ_CHECK(e->n_sq % e->shape[e->rank - 1] == 0);
        }
        /* what a job and the scales make of the name (quant_srq_compute: its module path) */
        char mod[QD_ACT_NAME_MAX + 1];
        FUZZ_CHECK(quant_module_path(e->name, mod, sizeof mod) && strlen(mod) < len + 1);
    }
}

#endif /* QUANT_FUZZ_STATS_CHECK_H */
