/* stats_check.h -- what fuzz_stats_json.c and fuzz_stats_st.c check of a parsed statistics post:
 * every promise of stats.h's qd_stat_entry (names valid, sorted and unique; shapes that give n;
 * finite values; min and max together), and that a refused post hands nothing out.
 * SPDX-License-Identifier: Apache-2.0
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
        int64_t n = 1;
        for (int k = 0; k < e->rank; k++) {
            FUZZ_CHECK(e->shape[k] >= 1);
            n *= e->shape[k];
        }
        FUZZ_CHECK(n == e->n && n >= 1 && n <= QD_ACT_MAX_ELEMS);
        FUZZ_CHECK(e->a && (e->kind == QD_STAT_MINMAX) == (e->b != NULL));
        FUZZ_CHECK(merge ? e->count >= 1 : e->count == 1);
        for (int64_t k = 0; k < n; k++)
            FUZZ_CHECK(isfinite(e->a[k]) && (!e->b || isfinite(e->b[k])));
        /* what a job and the scales make of the name (quant_srq_compute: its module path) */
        char mod[QD_ACT_NAME_MAX + 1];
        FUZZ_CHECK(quant_module_path(e->name, mod, sizeof mod) && strlen(mod) < len + 1);
    }
}

#endif /* QUANT_FUZZ_STATS_CHECK_H */
