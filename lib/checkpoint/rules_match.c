/* rules_match.c -- the first rule whose regex matches a module path, in bounded work: a PCRE2
 * match context with explicit limits (match, depth, heap), a first try with a small limit and
 * retries with larger ones charged to the matcher's budget, the interpreter when the JIT's stack
 * is too small, a cache of module path -> rule, and match errors as errors naming the rule, its
 * regex and the module path (quant_rules.h describes the bounds).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"
#include "rules_internal.h"

struct quant_rule_matcher {
    const quant_ruleset *rs;
    pcre2_match_context *mc;
    pcre2_match_data *md;
    json_t *cache;    /* module path -> rule index (-1: none) */
    uint64_t charged; /* cost of the retries so far, against QUANT_RULES_MATCH_BUDGET */
};

quant_rule_matcher *quant_rule_matcher_new(const quant_ruleset *rs)
{
    quant_rule_matcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->rs = rs;
    m->mc = pcre2_match_context_create(NULL);
    m->md = pcre2_match_data_create(1, NULL);
    m->cache = json_object();
    if (!rs || !m->mc || !m->md || !m->cache || pcre2_set_heap_limit(m->mc, QUANT_RULES_HEAP_KIB)) {
        quant_rule_matcher_free(m);
        return NULL;
    }
    return m;
}

void quant_rule_matcher_free(quant_rule_matcher *m)
{
    if (!m) return;
    pcre2_match_context_free(m->mc);
    pcre2_match_data_free(m->md);
    json_decref(m->cache);
    free(m);
}

/* ---- one regex against one path ---------------------------------------------------------------
 */

/* What one failed match says, for the message. */
static void limit_text(int rc, uint32_t limit, char *buf, size_t cap)
{
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT) {
        snprintf(buf, cap,
                 "hit PCRE2's %s limit (%u units for a path this long): the regex backtracks "
                 "too much on it; simplify it (nested or adjacent quantifiers, as in (a+)+ or "
                 "a*a*, backtrack a lot)",
                 rc == PCRE2_ERROR_MATCHLIMIT ? "match" : "depth", limit);
    } else if (rc == PCRE2_ERROR_HEAPLIMIT) {
        snprintf(buf, cap, "needs more than %u KiB of backtracking memory; simplify the regex",
                 QUANT_RULES_HEAP_KIB);
    } else {
        PCRE2_UCHAR msg[160];
        if (pcre2_get_error_message(rc, msg, sizeof msg) < 0) strcpy((char *)msg, "?");
        snprintf(buf, cap, "failed: PCRE2 error %d (%s)", rc, (const char *)msg);
    }
}

/* QUANT_CK_ERR_RULES: "rule I: module_path "RE": matching module path 'P' WHAT". */
static quant_ck_status match_fail(const quant_rule_matcher *m, size_t i, const char *path,
                                  const char *what, quant_ck_error *err)
{
    char re[CK_SHORT_MAX], mp[CK_SHORT_MAX];
    const char *pattern = quant_ruleset_rule(m->rs, i)->module_path;
    return quant_ck_fail(
        err, QUANT_CK_ERR_RULES, "rule %zu: module_path \"%s\": matching module path '%s' %s", i,
        ck_short_text(pattern, re, sizeof re), ck_short_text(path, mp, sizeof mp), what);
}

static bool over_limit(int rc)
{
    return rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT;
}

/* The match limit (units) worth `cost` on a path of len bytes: a unit may scan the whole path. */
static uint32_t units_for(uint64_t cost, size_t len)
{
    uint64_t units = cost / ((uint64_t)len + 64);
    return units < 1 ? 1 : units > UINT32_MAX ? UINT32_MAX : (uint32_t)units;
}

static quant_ck_status budget_fail(const quant_rule_matcher *m, size_t i, const char *path,
                                   quant_ck_error *err)
{
    char what[320];
    snprintf(what, sizeof what,
             "would exceed the run's budget for regex matching (retries worth %llu, spent on "
             "earlier paths): the regex backtracks too much on these module paths; simplify it",
             (unsigned long long)QUANT_RULES_MATCH_BUDGET);
    return match_fail(m, i, path, what, err);
}

/* Whether rule i's regex matches `path` (len bytes): tries of growing cost, each retry charged
 * to the budget; the interpreter when the JIT's stack is too small. */
static quant_ck_status match_one(quant_rule_matcher *m, size_t i, const char *path, size_t len,
                                 bool *hit, quant_ck_error *err)
{
    const pcre2_code *re = ck_ruleset_regex(m->rs, i);
    uint64_t cost = QUANT_RULES_MATCH_FIRST;
    uint32_t options = 0;
    for (;;) {
        uint32_t limit = units_for(cost, len);
        pcre2_set_match_limit(m->mc, limit);
        pcre2_set_depth_limit(m->mc, limit);
        int rc = pcre2_match(re, (PCRE2_SPTR)path, len, 0, options, m->md, m->mc);
        *hit = rc >= 0; /* 0: a match whose groups did not fit the match data */
        if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH) return QUANT_CK_OK;
        if (rc == PCRE2_ERROR_NOMEMORY)
            return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !options) {
            options = PCRE2_NO_JIT; /* same limit; the interpreter's memory is on the heap */
            continue;
        }
        if (over_limit(rc) && cost < QUANT_RULES_MATCH_LIMIT) {
            cost = cost * 10 < QUANT_RULES_MATCH_LIMIT ? cost * 10 : QUANT_RULES_MATCH_LIMIT;
            if (m->charged + cost > QUANT_RULES_MATCH_BUDGET) return budget_fail(m, i, path, err);
            m->charged += cost;
            continue;
        }
        char what[320];
        limit_text(rc, limit, what, sizeof what);
        return match_fail(m, i, path, what, err);
    }
}

/* ---- the first matching rule ------------------------------------------------------------------
 */

quant_ck_status quant_rule_matcher_find(quant_rule_matcher *m, const char *module_path, long *index,
                                        quant_ck_error *err)
{
    if (index) *index = -1;
    if (!m || !module_path || !index)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_rule_matcher_find: NULL argument");
    const json_t *known = json_object_get(m->cache, module_path);
    if (known) {
        *index = (long)json_integer_value(known);
        return QUANT_CK_OK;
    }
    size_t len = strlen(module_path), n = quant_ruleset_count(m->rs);
    long found = -1;
    for (size_t i = 0; i < n && found < 0; i++) {
        bool hit = false;
        quant_ck_status st = match_one(m, i, module_path, len, &hit, err);
        if (st != QUANT_CK_OK) return st;
        if (hit) found = (long)i;
    }
    /* a path that is not UTF-8 cannot be a key: it is then matched again each time */
    json_object_set_new(m->cache, module_path, json_integer(found));
    *index = found;
    return QUANT_CK_OK;
}

quant_ck_status quant_ruleset_find(const quant_ruleset *rs, const char *module_path, long *index,
                                   quant_ck_error *err)
{
    if (index) *index = -1;
    if (!rs || !module_path || !index)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_ruleset_find: NULL argument");
    quant_rule_matcher *m = quant_rule_matcher_new(rs);
    if (!m) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    quant_ck_status st = quant_rule_matcher_find(m, module_path, index, err);
    quant_rule_matcher_free(m);
    return st;
}

long quant_ruleset_match(const quant_ruleset *rs, const char *module_path)
{
    if (!rs || !module_path || quant_ruleset_count(rs) == 0) return -1;
    long index = -1;
    return quant_ruleset_find(rs, module_path, &index, NULL) == QUANT_CK_OK ? index : -2;
}
