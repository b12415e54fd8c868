/* rules.c -- rule sets (SPEC section 6): the JSON top level (a list, or {"rules": [...]} with an
 * optional "gguf_mix"), the
 * compiled module_path regexes (PCRE2, full match), and the rule set object (load, free,
 * accessors). Each rule's fields are rules_parse.c's; matching is rules_match.c's.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pcre2.h>

#include "quant_gguf_mix.h"
#include "rules_internal.h"

#define RULES_FILE_MAX (64u << 20) /* a rule set is a few KiB; refuse to slurp a wrong file */

struct quant_ruleset {
    size_t n;
    quant_rule *rules;
    char *gguf_mix;               /* the "gguf_mix" key: a llama-quantize mix name, or NULL */
    pcre2_code **re;              /* re[i]: rules[i].module_path, compiled anchored at both ends */
    bool allow_nothing_quantized; /* the top-level key of that name */
};

static quant_ck_status nomem(quant_ck_error *err)
{
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

/* Full match (Python re.fullmatch): anchored at the start and the end of the subject, so every
 * alternative of "a|b" must span the whole module path. JIT when available; pcre2_match falls
 * back to the interpreter by itself otherwise (and rules_match.c when the JIT's stack is too
 * small). */
static quant_ck_status compile_path(const ck_rule_ctx *c, const char *pattern, pcre2_code **out)
{
    int code = 0;
    PCRE2_SIZE offset = 0;
    uint32_t opts =
        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED;
    *out = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &code, &offset, NULL);
    if (!*out) {
        if (code == PCRE2_ERROR_NOMEMORY) return nomem(c->err);
        PCRE2_UCHAR msg[256];
        if (pcre2_get_error_message(code, msg, sizeof msg) < 0) strcpy((char *)msg, "?");
        return ck_rule_fail(c, "module_path", "bad regex \"%.64s\": %s at offset %zu", pattern,
                            (const char *)msg, (size_t)offset);
    }
    (void)pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE);
    return QUANT_CK_OK;
}

/* ---- where a duplicate key is: rule index and field, from the text before the error ---------- */

#define SCAN_DEPTH 16

typedef struct dup_scan {
    char open[SCAN_DEPTH];     /* '[' or '{' per depth */
    char last[SCAN_DEPTH][64]; /* the last string seen directly in the container at each depth */
    size_t commas[SCAN_DEPTH]; /* commas seen directly in it: the index of its current element */
    int depth;
} dup_scan;

static size_t scan_string(const char *t, size_t i, size_t end, char *dst)
{
    size_t n = 0;
    for (i++; i < end && t[i] != '"'; i++) {
        if (t[i] == '\\' && i + 1 < end) i++;
        if (n < 63) dst[n++] = t[i];
    }
    dst[n] = '\0';
    return i;
}

/* The containers open at `end` (valid JSON up to there: jansson stopped at the duplicate). */
static bool scan_to(const char *t, size_t end, dup_scan *s)
{
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < end; i++) {
        char ch = t[i];
        if (ch == '"' && s->depth > 0) {
            i = scan_string(t, i, end, s->last[s->depth - 1]);
        } else if (ch == '[' || ch == '{') {
            if (s->depth == SCAN_DEPTH) return false;
            s->open[s->depth] = ch;
            s->last[s->depth][0] = '\0';
            s->commas[s->depth++] = 0;
        } else if ((ch == ']' || ch == '}') && s->depth > 0) {
            s->depth--;
        } else if (ch == ',' && s->depth > 0) {
            s->commas[s->depth - 1]++;
        }
    }
    return true;
}

/* Names the rule and field of a duplicate key; false when it is not inside a rule. */
static bool duplicate_fail(const char *text, const char *source, const json_error_t *je,
                           quant_ck_error *err)
{
    dup_scan s;
    if (je->position <= 0 || !scan_to(text, (size_t)je->position, &s)) return false;
    int rd = s.open[0] == '[' ? 2 : 3; /* [ {rule} ] or {"rules": [ {rule} ]} */
    if (s.depth < rd || s.open[rd - 2] != '[' || s.open[rd - 1] != '{') return false;
    ck_rule_ctx c = {source, s.commas[rd - 2], err};
    if (s.depth == rd)
        ck_rule_fail(&c, s.last[rd - 1], "given twice");
    else
        ck_rule_fail(&c, s.last[rd - 1], "key \"%s\" given twice", s.last[s.depth - 1]);
    return true;
}

/* ---- the top level --------------------------------------------------------------------------- */

static quant_ck_status load_fail(const char *text, const char *source, const json_error_t *je,
                                 quant_ck_error *err)
{
    if (json_error_code(je) == json_error_duplicate_key && duplicate_fail(text, source, je, err))
        return QUANT_CK_ERR_RULES;
    char why[256];
    return ck_rules_fail(
        err, source, "line %d, column %d: %s", je->line, je->column,
        quant_json_error_text(text, strlen(text), je->position, je->text, why, sizeof why));
}

/* The "gguf_mix" key of the object form: a mix name the gguf layout knows. */
static quant_ck_status mix_key(const json_t *v, const char *source, const char **mix,
                               quant_ck_error *err)
{
    if (!json_is_string(v) || !quant_gguf_mix_find(json_string_value(v)))
        return ck_rules_fail(
            err, source,
            "top-level key \"gguf_mix\": must be the name of a llama-quantize "
            "mix (Q8_0, Q6_K, Q5_K_M, Q5_K_S, Q4_K_M, Q4_K_S, Q3_K_L, Q3_K_M, "
            "Q3_K_S, Q2_K, IQ4_NL, IQ4_XS, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4_MOE, F16, "
            "BF16, F32)");
    *mix = json_string_value(v);
    return QUANT_CK_OK;
}

/* The top-level keys beside "rules" (the object form). */
typedef struct top_keys {
    bool allow;      /* "allow_nothing_quantized" */
    const char *mix; /* "gguf_mix", or NULL */
} top_keys;

/* The list of rules: the root itself, or root["rules"] (beside which "allow_nothing_quantized"
 * and "gguf_mix" may stand, into *top). */
static quant_ck_status rules_list(const json_t *root, const char *source, const json_t **list,
                                  top_keys *top, quant_ck_error *err)
{
    *top = (top_keys){0};
    if (json_is_object(root)) {
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)root, key, v)
        {
            if (strcmp(key, "allow_nothing_quantized") == 0 && !json_is_boolean(v))
                return ck_rules_fail(err, source,
                                     "top-level key \"allow_nothing_quantized\": must be true or "
                                     "false, not %s",
                                     ck_json_type_name(v));
            if (strcmp(key, "allow_nothing_quantized") == 0) {
                top->allow = json_is_true(v);
            } else if (strcmp(key, "gguf_mix") == 0) {
                quant_ck_status st = mix_key(v, source, &top->mix, err);
                if (st != QUANT_CK_OK) return st;
            } else if (strcmp(key, "rules") != 0)
                return ck_rules_fail(err, source,
                                     "unknown top-level key \"%.64s\" (only \"rules\", "
                                     "\"allow_nothing_quantized\" and \"gguf_mix\" are allowed)",
                                     key);
        }
        root = json_object_get(root, "rules");
        if (!root) return ck_rules_fail(err, source, "missing top-level key \"rules\"");
    }
    if (!json_is_array(root))
        return ck_rules_fail(err, source,
                             "expected a list of rules or an object {\"rules\": [...]}, not %s",
                             ck_json_type_name(root));
    *list = root;
    return QUANT_CK_OK;
}

static quant_ck_status build(const json_t *list, const char *source, quant_ruleset **out,
                             quant_ck_error *err)
{
    size_t n = json_array_size(list);
    quant_ruleset *rs = calloc(1, sizeof *rs);
    if (rs) {
        rs->rules = calloc(n ? n : 1, sizeof *rs->rules);
        rs->re = calloc(n ? n : 1, sizeof *rs->re);
    }
    if (!rs || !rs->rules || !rs->re) {
        quant_ruleset_free(rs);
        return nomem(err);
    }
    rs->n = n;
    for (size_t i = 0; i < n; i++) {
        ck_rule_ctx c = {source, i, err};
        quant_ck_status st = ck_rule_parse(&c, json_array_get(list, i), &rs->rules[i]);
        if (st == QUANT_CK_OK) st = compile_path(&c, rs->rules[i].module_path, &rs->re[i]);
        if (st != QUANT_CK_OK) {
            quant_ruleset_free(rs);
            return st;
        }
    }
    *out = rs;
    return QUANT_CK_OK;
}

quant_ck_status quant_ruleset_parse(const char *json, size_t len, const char *source,
                                    quant_ruleset **out, quant_ck_error *err)
{
    if (!out || (!json && len))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_ruleset_parse: NULL argument");
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(json ? json : "", len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!root) return load_fail(json ? json : "", source, &je, err);
    const json_t *list = NULL;
    top_keys top = {0};
    quant_ck_status st = rules_list(root, source, &list, &top, err);
    if (st == QUANT_CK_OK) st = build(list, source, out, err);
    if (st == QUANT_CK_OK) (*out)->allow_nothing_quantized = top.allow;
    if (st == QUANT_CK_OK && top.mix && !((*out)->gguf_mix = strdup(top.mix))) {
        quant_ruleset_free(*out);
        *out = NULL;
        st = nomem(err);
    }
    json_decref(root);
    return st;
}

/* ---- the rule set object --------------------------------------------------------------------- */

static quant_ck_status read_text(FILE *f, const char *path, char **text, size_t *len,
                                 quant_ck_error *err)
{
    size_t cap = 0, n = 0, got = 1;
    char *buf = NULL;
    while (got > 0) {
        if (n == cap) {
            char *bigger = cap < RULES_FILE_MAX ? realloc(buf, cap ? cap * 2 : 4096) : NULL;
            if (!bigger) {
                free(buf);
                return cap < RULES_FILE_MAX
                           ? nomem(err)
                           : ck_rules_fail(err, path, "larger than %u MiB", RULES_FILE_MAX >> 20);
            }
            buf = bigger;
            cap = cap ? cap * 2 : 4096;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    }
    if (ferror(f)) {
        free(buf);
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: read: %s", path, strerror(errno));
    }
    *text = buf;
    *len = n;
    return QUANT_CK_OK;
}

quant_ck_status quant_ruleset_load(const char *path, quant_ruleset **out, quant_ck_error *err)
{
    if (!path || !out)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_ruleset_load: NULL argument");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0;
    quant_ck_status st = read_text(f, path, &text, &len, err);
    fclose(f);
    if (st != QUANT_CK_OK) return st;
    st = quant_ruleset_parse(text, len, path, out, err);
    free(text);
    return st;
}

void quant_ruleset_free(quant_ruleset *rs)
{
    if (!rs) return;
    for (size_t i = 0; rs->rules && i < rs->n; i++) {
        free(rs->rules[i].module_path);
        free(rs->rules[i].weight_calibration);
        free(rs->rules[i].act_calibration);
        if (rs->re) pcre2_code_free(rs->re[i]);
    }
    free(rs->rules);
    free(rs->re);
    free(rs->gguf_mix);
    free(rs);
}

const char *quant_ruleset_gguf_mix(const quant_ruleset *rs)
{
    return rs ? rs->gguf_mix : NULL;
}

size_t quant_ruleset_count(const quant_ruleset *rs)
{
    return rs ? rs->n : 0;
}

bool quant_ruleset_allow_nothing_quantized(const quant_ruleset *rs)
{
    return rs && rs->allow_nothing_quantized;
}

const quant_rule *quant_ruleset_rule(const quant_ruleset *rs, size_t index)
{
    return rs && index < rs->n ? &rs->rules[index] : NULL;
}

const pcre2_code *ck_ruleset_regex(const quant_ruleset *rs, size_t index)
{
    return rs && index < rs->n ? rs->re[index] : NULL;
}
