/* fuzz_srq_stats.c -- libFuzzer harness of the statistics files `quant quantize --stats` reads
 * (quant_stats_parse: quantd's GET .../stats document or a Qwix quant_stats dump, flat or nested)
 * and of the SRQ engine on what parses (quant_srq_compute with a fixed rule set, and with one
 * qtype for every activation): what the reader accepts is well formed (names non-empty, sorted,
 * unique; shapes of at most 8 positive dims; values present for a calibration, finite; counts
 * from 1), what it refuses hands nothing out and says why; the engine's scales are positive and
 * finite, zero points within the qtype, and every activation is either scaled or skipped with a
 * reason.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "quant_srq.h"

#define RULES                                                                                      \
    "[{\"module_path\":\".*q_proj\",\"act_qtype\":\"int8\",\"act_static_scale\":true},"            \
    "{\"module_path\":\".*up_proj\",\"act_qtype\":\"uint8\",\"act_static_scale\":true},"           \
    "{\"module_path\":\"layers\\\\.[0-9]+\",\"act_qtype\":\"int4\"},"                              \
    "{\"module_path\":\".*\",\"act_qtype\":\"int16\",\"act_static_scale\":true}]"

static void check_stats(const quant_act_stat *a, size_t n)
{
    FUZZ_CHECK(a && n >= 1);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(a[i].name && a[i].name[0]);
        FUZZ_CHECK(i == 0 || strcmp(a[i - 1].name, a[i].name) < 0);
        FUZZ_CHECK(a[i].rank >= 0 && a[i].rank <= QUANT_MAX_RANK && a[i].count >= 1);
        int64_t numel = 1;
        for (int k = 0; k < a[i].rank; k++) {
            FUZZ_CHECK(a[i].shape[k] >= 1);
            numel *= a[i].shape[k];
        }
        FUZZ_CHECK((a[i].kind == QUANT_STAT_NONE) == (a[i].a == NULL));
        FUZZ_CHECK((a[i].kind == QUANT_STAT_MINMAX) == (a[i].b != NULL));
        for (int64_t k = 0; a[i].a && k < numel; k++)
            FUZZ_CHECK(isfinite(a[i].a[k]) && (!a[i].b || isfinite(a[i].b[k])));
    }
}

static void check_srq(const quant_srq *srq, size_t n_stats)
{
    size_t n, n_skipped;
    const quant_static_act *s = quant_srq_acts(srq, &n);
    const quant_skipped_act *k = quant_srq_skipped(srq, &n_skipped);
    FUZZ_CHECK(n + n_skipped == n_stats);
    for (size_t i = 0; i < n; i++) {
        const quant_qtype_traits *t = quant_qtype_traits_get(s[i].qtype);
        FUZZ_CHECK(t && s[i].name && s[i].tensor_base && s[i].count >= 1);
        int64_t numel = quant_numel(s[i].rank, s[i].shape);
        for (int64_t e = 0; e < numel; e++) {
            FUZZ_CHECK(s[i].scale[e] > 0.0f && isfinite(s[i].scale[e]));
            FUZZ_CHECK(!s[i].zero_point ||
                       (s[i].zero_point[e] >= t->qmin && s[i].zero_point[e] <= t->qmax));
        }
    }
    for (size_t i = 0; i < n_skipped; i++) FUZZ_CHECK(k[i].name && k[i].reason && k[i].reason[0]);
}

static void engine(const quant_act_stat *a, size_t n, const quant_ruleset *rs,
                   const quant_srq_options *o)
{
    quant_srq *srq = NULL;
    quant_ck_error err;
    quant_ck_status st = quant_srq_compute(a, n, rs, o, &srq, &err);
    if (st == QUANT_CK_OK)
        check_srq(srq, n);
    else
        FUZZ_CHECK(!srq && err.message[0]);
    quant_srq_free(srq);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static quant_ruleset *rs;
    if (!rs)
        FUZZ_CHECK(quant_ruleset_parse(RULES, strlen(RULES), "fuzz", &rs, NULL) == QUANT_CK_OK);
    quant_stats *s = NULL;
    quant_ck_error err;
    quant_ck_status st = quant_stats_parse((const char *)data, size, "fuzz.json", &s, &err);
    if (st != QUANT_CK_OK) {
        FUZZ_CHECK(!s && (st == QUANT_CK_ERR_FORMAT || st == QUANT_CK_ERR_NOMEM));
        FUZZ_CHECK(strncmp(err.message, "fuzz.json: ", 11) == 0 || st == QUANT_CK_ERR_NOMEM);
        return 0;
    }
    size_t n;
    const quant_act_stat *a = quant_stats_acts(s, &n);
    check_stats(a, n);
    engine(a, n, rs, NULL);
    quant_srq_options o;
    quant_srq_options_init(&o);
    o.fixed_qtype = true;
    o.qtype = QUANT_QTYPE_UINT8;
    engine(a, n, NULL, &o);
    quant_stats_free(s);
    return 0;
}
