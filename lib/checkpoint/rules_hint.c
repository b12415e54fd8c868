/* rules_hint.c -- a run that would quantize nothing (refused unless allowed: its output is the
 * input copied), and what an unused rule probably meant: module_path is matched against the whole
 * module path, so "q_proj" matches nothing in "model.layers.0.self_attn.q_proj". When the regex
 * with ".*" put before it matches a module path of the run, the rule gets the hint ".*q_proj"
 * (".*(?:a|b)" for a regex with an alternation), which messages show as "did you mean ...?".
 * The trial matches are bounded (PCRE2 match and depth limits); a limit hit means no hint.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"
#include "rules_internal.h"

#define HINT_MATCH_LIMIT 100000u /* PCRE2 units per trial match */
#define HINT_PATHS_MAX   4096u   /* module paths tried per rule */

/* The suggested regex for `pattern` (malloc'd), NULL on OOM. */
static char *suggestion(const char *pattern)
{
    bool alt = strchr(pattern, '|') != NULL;
    size_t n = strlen(pattern) + 8;
    char *s = malloc(n);
    if (s) snprintf(s, n, alt ? ".*(?:%s)" : ".*%s", pattern);
    return s;
}

/* Whether `re` matches the module path of some tensor of the planned shards. */
static bool matches_some(const pcre2_code *re, const ck_shard_plan *plans, size_t n_plans)
{
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    bool hit = false;
    size_t tried = 0;
    if (mc && md) {
        pcre2_set_match_limit(mc, HINT_MATCH_LIMIT);
        pcre2_set_depth_limit(mc, HINT_MATCH_LIMIT);
    }
    for (size_t s = 0; mc && md && !hit && s < n_plans; s++)
        for (size_t i = 0; !hit && i < plans[s].n && tried < HINT_PATHS_MAX; i++) {
            const char *name = plans[s].t[i].in->name;
            size_t cap = strlen(name) + 1;
            char *module = malloc(cap);
            if (module && quant_module_path(name, module, cap) && *module) {
                tried++;
                hit = pcre2_match(re, (PCRE2_SPTR)module, strlen(module), 0, 0, md, mc) >= 0;
            }
            free(module);
        }
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    return hit;
}

char *ck_rule_hint(const quant_ruleset *rules, size_t rule, const ck_shard_plan *plans,
                   size_t n_plans)
{
    const quant_rule *r = quant_ruleset_rule(rules, rule);
    if (!r || !r->module_path || strncmp(r->module_path, ".*", 2) == 0) return NULL;
    char *hint = suggestion(r->module_path);
    if (!hint) return NULL;
    int code = 0;
    PCRE2_SIZE offset = 0;
    uint32_t opts =
        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)hint, PCRE2_ZERO_TERMINATED, opts, &code, &offset, NULL);
    bool hit = re && matches_some(re, plans, n_plans);
    pcre2_code_free(re);
    if (hit) return hint;
    free(hint);
    return NULL;
}

/* ---- a run that quantizes nothing ------------------------------------------------------------ */

/* The module path of the first rank-2 tensor of the plans (an example for the message), into
 * buf; "" when there is none. */
static void example_path(const ck_shard_plan *plans, size_t n_plans, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (size_t s = 0; s < n_plans; s++)
        for (size_t i = 0; i < plans[s].n; i++) {
            const quant_st_tensor *t = plans[s].t[i].in;
            if (t->rank == 2 && quant_module_path(t->name, buf, cap) && *buf) return;
        }
    buf[0] = '\0';
}

/* "; rule K (module_path "RE") matches no module path[: did you mean 'HINT'?]" for the first
 * unused rules, appended to buf. */
static void unused_text(const quant_ruleset *rules, const long *unused, char *const *hints,
                        size_t n_unused, char *buf, size_t cap)
{
    size_t at = strlen(buf);
    for (size_t i = 0; i < n_unused && i < 3 && at < cap; i++) {
        char re[CK_SHORT_MAX], h[CK_SHORT_MAX];
        const quant_rule *r = quant_ruleset_rule(rules, (size_t)unused[i]);
        int k =
            snprintf(buf + at, cap - at, "; rule %ld (module_path \"%s\") matches no tensor%s%s%s",
                     unused[i], ck_short_text(r->module_path, re, sizeof re),
                     hints && hints[i] ? ": did you mean '" : "",
                     hints && hints[i] ? ck_short_text(hints[i], h, sizeof h) : "",
                     hints && hints[i] ? "'?" : "");
        at += k > 0 ? (size_t)k : 0;
    }
}

quant_ck_status ck_check_quantizes(const ck_shard_plan *plans, size_t n_plans,
                                   const quant_ruleset *rules, const long *unused,
                                   char *const *hints, size_t n_unused, quant_ck_error *err)
{
    size_t tensors = 0;
    for (size_t s = 0; s < n_plans; s++)
        for (size_t i = 0; i < plans[s].n; i++) {
            if (plans[s].t[i].quantize) return QUANT_CK_OK;
            tensors++;
        }
    if (tensors == 0) return QUANT_CK_OK; /* nothing to quantize is not a mistake of the rules */
    char rules_text[768] = "", example[CK_SHORT_MAX * 2], shown[CK_SHORT_MAX];
    unused_text(rules, unused, hints, n_unused, rules_text, sizeof rules_text);
    example_path(plans, n_plans, example, sizeof example);
    char eg[CK_SHORT_MAX + 64] = "";
    if (*example)
        snprintf(eg, sizeof eg, " (a module path here: '%s')",
                 ck_short_text(example, shown, sizeof shown));
    return quant_ck_fail(
        err, QUANT_CK_ERR_RULES,
        "nothing to quantize: the rules quantize none of the %zu tensors%s; a module_path "
        "regex must match the whole module path%s. A run that only copies is refused unless the "
        "rule set says \"allow_nothing_quantized\": true (quant: --allow-nothing-quantized)",
        tensors, rules_text, eg);
}
