/* fuzz_stats_json.c -- libFuzzer harness of qd_stats_parse_json, the one-pass JSON reader of
 * statistics posts: every input is parsed as an update ({"step", "stats": {ACT: {"absmax"...}}})
 * and as a merge (a Qwix quant_stats dump with counts and sums); what either accepts must be a
 * well-formed post (stats_check.h), what either refuses must hand nothing out. A body it accepts
 * is read again with jansson, the reference: it must be valid JSON there too, and hold the same
 * activations, step, counts and numbers (the nesting of lists gives each shape, row-major).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>

#include "stats_check.h"

/* The numbers of v (a number or nested lists) in row-major order must be e's, from *at on. */
static void same_values(const json_t *v, const double *want, int64_t n, int64_t *at)
{
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            same_values(json_array_get(v, i), want, n, at);
        return;
    }
    FUZZ_CHECK(json_is_number(v) && *at < n);
    FUZZ_CHECK(json_number_value(v) == want[(*at)++]);
}

static void same_stat(const json_t *v, const double *want, int64_t n)
{
    FUZZ_CHECK(v && want);
    int64_t at = 0;
    same_values(v, want, n, &at);
    FUZZ_CHECK(at == n);
}

/* What jansson reads in the body must be what the parser made of it. */
static void check_with_jansson(const uint8_t *data, size_t size, const qd_stat_post *p, bool merge)
{
    json_error_t je;
    json_t *doc =
        json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &je);
    if (!doc) fprintf(stderr, "accepted, but jansson says: %s (at %d)\n", je.text, je.position);
    FUZZ_CHECK(doc && json_is_object(doc));
    const json_t *step = json_object_get(doc, "step");
    FUZZ_CHECK(step && !json_is_null(step) ? json_number_value(step) == (double)p->step
                                           : p->step == -1);
    const json_t *stats = json_object_get(doc, "stats");
    FUZZ_CHECK(json_is_object(stats) && json_object_size(stats) == p->n);
    for (size_t i = 0; i < p->n; i++) {
        const qd_stat_entry *e = &p->e[i];
        const json_t *act = json_object_get(stats, e->name);
        FUZZ_CHECK(json_is_object(act));
        const char *pre = merge ? "sum_of_" : "";
        char key[32];
        size_t keys = 0;
        if (merge) {
            FUZZ_CHECK(json_number_value(json_object_get(act, "count")) == (double)e->count);
            keys++;
        }
        if (e->kind == QD_STAT_ABSMAX) {
            snprintf(key, sizeof key, "%sabsmax", pre);
            same_stat(json_object_get(act, key), e->a, e->n);
            keys++;
        } else if (e->kind == QD_STAT_MINMAX) {
            snprintf(key, sizeof key, "%smin", pre);
            same_stat(json_object_get(act, key), e->a, e->n);
            snprintf(key, sizeof key, "%smax", pre);
            same_stat(json_object_get(act, key), e->b, e->n);
            keys += 2;
        }
        if (e->sq) {
            snprintf(key, sizeof key, "%smean_sq", pre);
            same_stat(json_object_get(act, key), e->sq, e->n_sq);
            keys++;
        }
        FUZZ_CHECK(json_object_size(act) == keys);
    }
    json_decref(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int merge = 0; merge <= 1; merge++) {
        qd_stat_post p;
        qd_err err = {{0}};
        qd_status st = qd_stats_parse_json((const char *)data, size, merge, &p, &err);
        check_post(st, &p, merge, &err);
        if (st == QD_OK) check_with_jansson(data, size, &p, merge);
        qd_stat_post_clear(&p);
    }
    return 0;
}
