/* rules_internal.h -- what rules.c (the rule set), rules_parse.c (one rule) and rules_match.c
 * (matching) share: where an error points, how its message is built, the compiled regexes.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_RULES_INTERNAL_H
#define QUANT_RULES_INTERNAL_H

#include <jansson.h>
#include <pcre2.h>

#include "quant_rules.h"

/* Where a message points: "<source>: rule <index>: ...". `source` may be NULL. */
typedef struct ck_rule_ctx {
    const char *source;
    size_t index;
    quant_ck_error *err;
} ck_rule_ctx;

/* QUANT_CK_ERR_RULES with "<source>: <message>" (just the message when source is NULL). */
quant_ck_status ck_rules_fail(quant_ck_error *err, const char *source, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* QUANT_CK_ERR_RULES with "<source>: rule <index>: field '<field>': <message>". */
quant_ck_status ck_rule_fail(const ck_rule_ctx *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "an object", "a list", "a string", ... for messages. */
const char *ck_json_type_name(const json_t *v);

/* Fills `r` from one rule object: defaults, every field checked, the checks across fields.
 * Strings in `r` are malloc'd (freed by quant_ruleset_free), also when it fails. */
quant_ck_status ck_rule_parse(const ck_rule_ctx *c, const json_t *obj, quant_rule *r);

/* The compiled module_path regex of rule `index` (anchored at both ends), NULL out of range. */
const pcre2_code *ck_ruleset_regex(const quant_ruleset *rs, size_t index);

#endif /* QUANT_RULES_INTERNAL_H */
