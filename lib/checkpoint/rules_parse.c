/* rules_parse.c -- one rule of a rule set (SPEC section 6) from its JSON object: each field's
 * type and range, the defaults, and the checks across fields that need no tensor (qtype against
 * calibration and stochastic rounding), before any data is touched.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Every error names the source, the rule (0-based) and the field, so a user can fix the file
 * without guessing: "rules.json: rule 2: field 'tile_size': ..."; an unknown field gets a "did
 * you mean" (a misspelling, or another tool's name for the field). Checks that depend on a
 * tensor's rank or shape (axes in range, tiles dividing dims) wait for quant_rule_how().
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules_internal.h"

quant_ck_status ck_rules_fail(quant_ck_error *err, const char *source, const char *fmt, ...)
{
    char msg[QUANT_CK_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return quant_ck_fail(err, QUANT_CK_ERR_RULES, "%s%s%s", source ? source : "",
                         source ? ": " : "", msg);
}

quant_ck_status ck_rule_fail(const ck_rule_ctx *c, const char *field, const char *fmt, ...)
{
    char msg[QUANT_CK_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ck_rules_fail(c->err, c->source, "rule %zu: field '%s': %s", c->index, field, msg);
}

const char *ck_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "a list";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* ---- scalar fields --------------------------------------------------------------------------- */

static quant_ck_status want_string(const ck_rule_ctx *c, const char *field, const json_t *v,
                                   const char **s)
{
    if (!json_is_string(v))
        return ck_rule_fail(c, field, "must be a string, not %s", ck_json_type_name(v));
    *s = json_string_value(v);
    return QUANT_CK_OK;
}

static quant_ck_status want_bool(const ck_rule_ctx *c, const char *field, const json_t *v, bool *b)
{
    if (!json_is_boolean(v))
        return ck_rule_fail(c, field, "must be true or false, not %s", ck_json_type_name(v));
    *b = json_is_true(v);
    return QUANT_CK_OK;
}

/* Replaces *dst with a copy of `s`. */
static quant_ck_status set_str(const ck_rule_ctx *c, char **dst, const char *s)
{
    char *copy = strdup(s);
    if (!copy) return quant_ck_fail(c->err, QUANT_CK_ERR_NOMEM, "out of memory");
    free(*dst);
    *dst = copy;
    return QUANT_CK_OK;
}

static quant_ck_status parse_qtype(const ck_rule_ctx *c, const char *field, const json_t *v,
                                   bool *has, quant_qtype *q)
{
    if (json_is_null(v)) {
        *has = false;
        return QUANT_CK_OK;
    }
    if (!json_is_string(v))
        return ck_rule_fail(c, field, "must be a qtype name or null, not %s", ck_json_type_name(v));
    quant_error qe;
    if (quant_qtype_parse(json_string_value(v), q, &qe) != QUANT_OK)
        return ck_rule_fail(c, field, "%s", qe.message);
    *has = true;
    return QUANT_CK_OK;
}

static quant_ck_status parse_calib(const ck_rule_ctx *c, const char *field, const json_t *v,
                                   char **dst)
{
    const char *s = NULL;
    quant_ck_status st = want_string(c, field, v, &s);
    if (st != QUANT_CK_OK) return st;
    quant_calib_method m;
    quant_error qe;
    if (quant_calib_parse(s, &m, &qe) != QUANT_OK) return ck_rule_fail(c, field, "%s", qe.message);
    return set_str(c, dst, s);
}

/* A list of distinct axis indices in -QUANT_MAX_RANK..QUANT_MAX_RANK-1. */
static quant_ck_status parse_axes(const ck_rule_ctx *c, const char *field, const json_t *v,
                                  bool nonempty, int *n, int *axes)
{
    if (!json_is_array(v))
        return ck_rule_fail(c, field, "must be a list of axis indices, not %s",
                            ck_json_type_name(v));
    size_t len = json_array_size(v);
    if (nonempty && len == 0) return ck_rule_fail(c, field, "must name at least one axis");
    if (len > QUANT_MAX_RANK)
        return ck_rule_fail(c, field, "names %zu axes; a tensor has at most %d", len,
                            QUANT_MAX_RANK);
    for (size_t i = 0; i < len; i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_integer(e))
            return ck_rule_fail(c, field, "element %zu must be an integer, not %s", i,
                                ck_json_type_name(e));
        json_int_t a = json_integer_value(e);
        if (a < -QUANT_MAX_RANK || a >= QUANT_MAX_RANK)
            return ck_rule_fail(c, field, "axis %lld is out of range (-%d..%d)", (long long)a,
                                QUANT_MAX_RANK, QUANT_MAX_RANK - 1);
        for (size_t k = 0; k < i; k++)
            if (axes[k] == (int)a)
                return ck_rule_fail(c, field, "axis %lld is repeated", (long long)a);
        axes[i] = (int)a;
    }
    *n = (int)len;
    return QUANT_CK_OK;
}

/* ---- tile_size ------------------------------------------------------------------------------- */

#define TILE_FORMS "a positive integer, a number in (0, 1] or an object of axis -> size"

/* One tile size: a positive integer length, or a real fraction in (0, 1]. */
static quant_ck_status tile_value(const ck_rule_ctx *c, const char *what, const json_t *v,
                                  quant_tile *t)
{
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (n <= 0)
            return ck_rule_fail(c, "tile_size", "%stile length %lld must be positive", what,
                                (long long)n);
        t->size = (int64_t)n;
        return QUANT_CK_OK;
    }
    if (json_is_real(v)) {
        double f = json_real_value(v);
        if (!(f > 0 && f <= 1))
            return ck_rule_fail(c, "tile_size",
                                "%sfraction %g must be in (0, 1] (a tile length is an integer)",
                                what, f);
        t->fraction = f;
        return QUANT_CK_OK;
    }
    return ck_rule_fail(c, "tile_size", "%smust be %s, not %s", what, TILE_FORMS,
                        ck_json_type_name(v));
}

/* An object key naming an axis: a decimal integer ("0", "-1"), no sign on zero, no padding. */
static bool axis_key(const char *key, int *axis)
{
    const char *p = key + (key[0] == '-');
    size_t len = strlen(p);
    if (len == 0 || len > 3 || (p[0] == '0' && (len > 1 || p != key))) return false;
    int a = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') return false;
        a = a * 10 + (p[i] - '0');
    }
    *axis = p != key ? -a : a;
    return true;
}

static quant_ck_status tile_object(const ck_rule_ctx *c, const json_t *v, quant_rule *r)
{
    if (json_object_size(v) == 0)
        return ck_rule_fail(c, "tile_size", "an empty object tiles nothing (omit tile_size)");
    const char *key;
    const json_t *size;
    r->n_tiles = 0;
    json_object_foreach((json_t *)v, key, size)
    {
        int a = 0;
        if (!axis_key(key, &a) || a < -QUANT_MAX_RANK || a >= QUANT_MAX_RANK)
            return ck_rule_fail(c, "tile_size",
                                "key \"%.32s\" is not an axis index (a decimal integer in -%d..%d, "
                                "as in \"0\" or \"-1\")",
                                key, QUANT_MAX_RANK, QUANT_MAX_RANK - 1);
        if (r->n_tiles == QUANT_MAX_RANK)
            return ck_rule_fail(c, "tile_size", "tiles more than %d axes", QUANT_MAX_RANK);
        char what[48];
        snprintf(what, sizeof what, "axis \"%s\": ", key);
        quant_tile *t = &r->tiles[r->n_tiles++];
        *t = (quant_tile){.axis = a};
        quant_ck_status st = tile_value(c, what, size, t);
        if (st != QUANT_CK_OK) return st;
    }
    return QUANT_CK_OK;
}

static quant_ck_status parse_tile(const ck_rule_ctx *c, const json_t *v, quant_rule *r)
{
    r->n_tiles = 0;
    r->tile_on_contraction = false;
    if (json_is_null(v)) return QUANT_CK_OK;
    if (json_is_object(v)) return tile_object(c, v, r);
    r->tiles[0] = (quant_tile){.axis = -1};
    quant_ck_status st = tile_value(c, "", v, &r->tiles[0]);
    if (st != QUANT_CK_OK) return st;
    r->n_tiles = 1;
    r->tile_on_contraction = true; /* tiles[0].axis is set once contraction_axes is known */
    return QUANT_CK_OK;
}

/* ---- the other fields, one parser each ------------------------------------------------------- */

static quant_ck_status parse_scale_dtype(const ck_rule_ctx *c, const json_t *v, quant_rule *r)
{
    static const struct {
        const char *name;
        quant_dtype dtype;
    } names[] = {
        {"float32", QUANT_DTYPE_F32}, {"bfloat16", QUANT_DTYPE_BF16}, {"float16", QUANT_DTYPE_F16}};
    const char *s = NULL;
    quant_ck_status st = want_string(c, "scale_dtype", v, &s);
    if (st != QUANT_CK_OK) return st;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            r->scale_dtype = names[i].dtype;
            return QUANT_CK_OK;
        }
    return ck_rule_fail(c, "scale_dtype", "\"%.32s\" is not float32, bfloat16 or float16", s);
}

static quant_ck_status parse_sr(const ck_rule_ctx *c, const json_t *v, quant_rule *r)
{
    r->sr_seed = 0;
    if (json_is_boolean(v)) {
        r->stochastic_rounding = json_is_true(v);
        return QUANT_CK_OK;
    }
    if (!json_is_integer(v))
        return ck_rule_fail(c, "stochastic_rounding",
                            "must be true, false or a non-negative integer seed, not %s",
                            ck_json_type_name(v));
    if (json_integer_value(v) < 0)
        return ck_rule_fail(c, "stochastic_rounding", "seed %lld must be non-negative",
                            (long long)json_integer_value(v));
    r->stochastic_rounding = true;
    r->sr_seed = (uint64_t)json_integer_value(v);
    return QUANT_CK_OK;
}

/* ---- the field table, and hints for unknown fields --------------------------------------------
 */

static quant_ck_status f_module_path(const ck_rule_ctx *c, const char *f, const json_t *v,
                                     quant_rule *r)
{
    const char *s = NULL;
    quant_ck_status st = want_string(c, f, v, &s);
    return st != QUANT_CK_OK ? st : set_str(c, &r->module_path, s);
}

static quant_ck_status f_weight_qtype(const ck_rule_ctx *c, const char *f, const json_t *v,
                                      quant_rule *r)
{
    return parse_qtype(c, f, v, &r->has_weight_qtype, &r->weight_qtype);
}

static quant_ck_status f_weight_calib(const ck_rule_ctx *c, const char *f, const json_t *v,
                                      quant_rule *r)
{
    return parse_calib(c, f, v, &r->weight_calibration);
}

static quant_ck_status f_tile_size(const ck_rule_ctx *c, const char *f, const json_t *v,
                                   quant_rule *r)
{
    (void)f;
    return parse_tile(c, v, r);
}

static quant_ck_status f_act_qtype(const ck_rule_ctx *c, const char *f, const json_t *v,
                                   quant_rule *r)
{
    return parse_qtype(c, f, v, &r->has_act_qtype, &r->act_qtype);
}

static quant_ck_status f_act_calib(const ck_rule_ctx *c, const char *f, const json_t *v,
                                   quant_rule *r)
{
    return parse_calib(c, f, v, &r->act_calibration);
}

static quant_ck_status f_act_static(const ck_rule_ctx *c, const char *f, const json_t *v,
                                    quant_rule *r)
{
    return want_bool(c, f, v, &r->act_static_scale);
}

static quant_ck_status f_weight_importance(const ck_rule_ctx *c, const char *f, const json_t *v,
                                           quant_rule *r)
{
    return want_bool(c, f, v, &r->weight_importance);
}

static quant_ck_status f_act_batch_axes(const ck_rule_ctx *c, const char *f, const json_t *v,
                                        quant_rule *r)
{
    return parse_axes(c, f, v, false, &r->n_act_batch_axes, r->act_batch_axes);
}

static quant_ck_status f_contraction_axes(const ck_rule_ctx *c, const char *f, const json_t *v,
                                          quant_rule *r)
{
    return parse_axes(c, f, v, true, &r->n_contraction_axes, r->contraction_axes);
}

static quant_ck_status f_scale_dtype(const ck_rule_ctx *c, const char *f, const json_t *v,
                                     quant_rule *r)
{
    (void)f;
    return parse_scale_dtype(c, v, r);
}

static quant_ck_status f_pack(const ck_rule_ctx *c, const char *f, const json_t *v, quant_rule *r)
{
    return want_bool(c, f, v, &r->pack);
}

static quant_ck_status f_stochastic(const ck_rule_ctx *c, const char *f, const json_t *v,
                                    quant_rule *r)
{
    (void)f;
    return parse_sr(c, v, r);
}

typedef quant_ck_status (*field_parser)(const ck_rule_ctx *c, const char *f, const json_t *v,
                                        quant_rule *r);

/* Every field of a rule, in the order messages list them. */
static const struct {
    const char *name;
    field_parser parse;
} fields[] = {
    {"module_path", f_module_path},
    {"weight_qtype", f_weight_qtype},
    {"weight_calibration_method", f_weight_calib},
    {"tile_size", f_tile_size},
    {"act_qtype", f_act_qtype},
    {"act_calibration_method", f_act_calib},
    {"act_static_scale", f_act_static},
    {"act_batch_axes", f_act_batch_axes},
    {"contraction_axes", f_contraction_axes},
    {"scale_dtype", f_scale_dtype},
    {"pack", f_pack},
    {"stochastic_rounding", f_stochastic},
    {"weight_importance", f_weight_importance},
};

#define N_FIELDS (sizeof fields / sizeof fields[0])

/* What other tools (llm-compressor, GPTQ, bitsandbytes, torchao, ...) call our fields. */
static const struct {
    const char *alias, *field, *note;
} aliases[] = {
    {"group_size", "tile_size", "a tile length along the contraction axis"},
    {"block_size", "tile_size", "a tile length, or {\"0\": 128, \"1\": 128} for 2-D blocks"},
    {"blocksize", "tile_size", "a tile length along the contraction axis"},
    {"bits", "weight_qtype", "a qtype name such as \"int4\" or \"int8\""},
    {"num_bits", "weight_qtype", "a qtype name such as \"int4\" or \"int8\""},
    {"wbits", "weight_qtype", "a qtype name such as \"int4\" or \"int8\""},
    {"symmetric", "weight_calibration_method", "\"absmax\" is symmetric, \"minmax\" asymmetric"},
    {"sym", "weight_calibration_method", "\"absmax\" is symmetric, \"minmax\" asymmetric"},
    {"targets", "module_path", "one regex matched against the whole module path"},
    {"pattern", "module_path", "a regex matched against the whole module path"},
    {"regex", "module_path", "a regex matched against the whole module path"},
};

static char lower(char ch)
{
    return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
}

/* Edit distance with adjacent transpositions (optimal string alignment), case-insensitive;
 * anything above `cap` is reported as cap + 1. Names are short: longer ones are not compared. */
static size_t edit_distance(const char *a, const char *b, size_t cap)
{
    enum { MAX = 40 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= MAX || m >= MAX) return cap + 1;
    size_t d[MAX][MAX];
    for (size_t i = 0; i <= n; i++) d[i][0] = i;
    for (size_t j = 0; j <= m; j++) d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t cost = lower(a[i - 1]) != lower(b[j - 1]);
            size_t best = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
                lower(a[i - 2]) == lower(b[j - 1]) && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m] > cap ? cap + 1 : d[n][m];
}

/* The known field `f` is probably a misspelling of (at most 2 edits, 1 for short names), or NULL.
 */
static const char *closest_field(const char *f)
{
    size_t cap = strlen(f) < 6 ? 1 : 2, best = cap + 1;
    const char *hit = NULL;
    for (size_t i = 0; i < N_FIELDS; i++) {
        size_t d = edit_distance(f, fields[i].name, cap);
        if (d < best) {
            best = d;
            hit = fields[i].name;
        }
    }
    return hit;
}

static quant_ck_status unknown_field(const ck_rule_ctx *c, const char *f)
{
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(f, aliases[i].alias) == 0)
            return ck_rule_fail(c, f, "unknown field, did you mean '%s'? (%s here: %s)",
                                aliases[i].field, aliases[i].field, aliases[i].note);
    const char *near = closest_field(f);
    if (near) return ck_rule_fail(c, f, "unknown field, did you mean '%s'?", near);
    char known[512];
    size_t len = 0;
    for (size_t i = 0; i < N_FIELDS && len < sizeof known; i++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "",
                                fields[i].name);
    return ck_rule_fail(c, f, "unknown field (known: %s)", known);
}

static quant_ck_status parse_field(const ck_rule_ctx *c, const char *f, const json_t *v,
                                   quant_rule *r)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strcmp(f, fields[i].name) == 0) return fields[i].parse(c, f, v, r);
    return unknown_field(c, f);
}

/* ---- one rule: defaults, fields, checks across fields ---------------------------------------- */

static void rule_defaults(quant_rule *r)
{
    memset(r, 0, sizeof *r);
    r->n_act_batch_axes = 1;
    r->act_batch_axes[0] = 0;
    r->n_contraction_axes = 1;
    r->contraction_axes[0] = -1;
    r->scale_dtype = QUANT_DTYPE_F32;
    r->pack = true;
}

/* What libquant itself refuses for (qtype, calibration, stochastic), checked before any data. */
static quant_ck_status check_how(const ck_rule_ctx *c, const char *field, quant_qtype q,
                                 const char *calib, bool stochastic)
{
    quant_how how;
    quant_how_init(&how, q);
    how.calibration = calib;
    how.stochastic = stochastic;
    quant_error qe;
    const quant_qtype_traits *t = quant_qtype_traits_get(q);
    if (t && t->kind == QUANT_CODE_GGML) { /* the gguf layout checks the rest (gguf_plan.c) */
        if (!strncmp(field, "act_", 4) || stochastic)
            return ck_rule_fail(c, field,
                                "%s is one of ggml's block types: weights only, rounded to "
                                "nearest (llama.cpp quantizes activations itself)",
                                t->name);
        if (quant_calib_parse(calib, &(quant_calib_method){0}, &qe) != QUANT_OK)
            return ck_rule_fail(c, field, "%s", qe.message);
        return QUANT_CK_OK;
    }
    if (quant_how_check(&how, &qe) != QUANT_OK) return ck_rule_fail(c, field, "%s", qe.message);
    return QUANT_CK_OK;
}

/* Microscaling weight qtypes (SPEC 2b): tile_size omitted or the fixed tile itself (an integer,
 * along the last contraction axis), float32 scales. The calibration is checked by check_how. */
static quant_ck_status check_microscaling(const ck_rule_ctx *c, const quant_rule *r)
{
    const quant_qtype_traits *t = quant_qtype_traits_get(r->weight_qtype);
    if (!t->fixed_tile) return QUANT_CK_OK;
    long long ft = (long long)t->fixed_tile;
    if (r->n_tiles > 0 && !r->tile_on_contraction)
        return ck_rule_fail(c, "tile_size",
                            "%s has a fixed tile of %lld along the last contraction axis; omit "
                            "tile_size or give %lld, not an object of axes (no 2-D tiles)",
                            t->name, ft, ft);
    if (r->n_tiles == 1 && r->tiles[0].size == 0)
        return ck_rule_fail(c, "tile_size",
                            "%s has a fixed tile of %lld; omit tile_size or give %lld, not the "
                            "fraction %g",
                            t->name, ft, ft, r->tiles[0].fraction);
    if (r->n_tiles == 1 && r->tiles[0].size != t->fixed_tile)
        return ck_rule_fail(c, "tile_size",
                            "%s has a fixed tile of %lld; omit tile_size or give %lld, not %lld",
                            t->name, ft, ft, (long long)r->tiles[0].size);
    if (r->scale_dtype != QUANT_DTYPE_F32)
        return ck_rule_fail(c, "scale_dtype", "%s stores float32 scales; \"%s\" is not allowed",
                            t->name, r->scale_dtype == QUANT_DTYPE_BF16 ? "bfloat16" : "float16");
    return QUANT_CK_OK;
}

static bool is_mse(const char *calib)
{
    quant_calib_method m;
    return quant_calib_parse(calib, &m, NULL) == QUANT_OK &&
           (m.kind == QUANT_CALIB_MSE || m.kind == QUANT_CALIB_MINMAX_MSE);
}

/* weight_importance (SPEC 9) weighs an MSE search's error along one contraction axis; the MSE
 * methods search weight scales only (activation scales come from statistics or at run time). */
static quant_ck_status check_mse_fields(const ck_rule_ctx *c, const quant_rule *r)
{
    if (r->has_act_qtype && is_mse(r->act_calibration))
        return ck_rule_fail(c, "act_calibration_method",
                            "\"%.64s\" searches weight scales only; use absmax or minmax for "
                            "activations",
                            r->act_calibration);
    if (!r->weight_importance || !r->has_weight_qtype) return QUANT_CK_OK;
    if (!is_mse(r->weight_calibration))
        return ck_rule_fail(c, "weight_importance",
                            "true weighs an MSE scale search: it needs weight_calibration_method "
                            "mse[,n[,lo]] or minmax_mse[,n[,lo]], not \"%.64s\"",
                            r->weight_calibration);
    if (r->n_contraction_axes != 1)
        return ck_rule_fail(c, "weight_importance",
                            "true needs a single contraction axis (the input features the "
                            "activation's mean_sq is over), not %d",
                            r->n_contraction_axes);
    return QUANT_CK_OK;
}

static quant_ck_status rule_finish(const ck_rule_ctx *c, quant_rule *r)
{
    quant_ck_status st = QUANT_CK_OK;
    if (!r->module_path) st = set_str(c, &r->module_path, ".*");
    if (st == QUANT_CK_OK && !r->weight_calibration)
        st = set_str(c, &r->weight_calibration, "absmax");
    if (st == QUANT_CK_OK && !r->act_calibration) st = set_str(c, &r->act_calibration, "absmax");
    if (st != QUANT_CK_OK) return st;
    if (r->tile_on_contraction) r->tiles[0].axis = r->contraction_axes[r->n_contraction_axes - 1];
    if (r->act_static_scale && !r->has_act_qtype)
        return ck_rule_fail(c, "act_static_scale", "true requires an act_qtype");
    if (r->has_weight_qtype) {
        st = check_how(c, "weight_calibration_method", r->weight_qtype, r->weight_calibration,
                       false);
        if (st == QUANT_CK_OK && r->stochastic_rounding)
            st = check_how(c, "stochastic_rounding", r->weight_qtype, r->weight_calibration, true);
        if (st == QUANT_CK_OK) st = check_microscaling(c, r);
        if (st != QUANT_CK_OK) return st;
    }
    st = check_mse_fields(c, r);
    if (st != QUANT_CK_OK) return st;
    if (!r->has_act_qtype) return QUANT_CK_OK;
    if (r->act_static_scale && quant_qtype_traits_get(r->act_qtype)->fixed_tile)
        return ck_rule_fail(c, "act_static_scale",
                            "%s activations take a scale per block of each input at run time; a "
                            "static per-tensor scale does not apply",
                            quant_qtype_traits_get(r->act_qtype)->name);
    return check_how(c, "act_calibration_method", r->act_qtype, r->act_calibration, false);
}

quant_ck_status ck_rule_parse(const ck_rule_ctx *c, const json_t *obj, quant_rule *r)
{
    rule_defaults(r);
    if (!json_is_object(obj))
        return ck_rules_fail(c->err, c->source, "rule %zu: must be an object of fields, not %s",
                             c->index, ck_json_type_name(obj));
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        quant_ck_status st = parse_field(c, key, v, r);
        if (st != QUANT_CK_OK) return st;
    }
    return rule_finish(c, r);
}
