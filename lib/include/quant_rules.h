/* quant_rules.h -- rule sets (SPEC section 6): parse and validate the JSON (jansson), compile
 * module_path regexes (PCRE2, full-match), pick the first matching rule for a module path (in
 * bounded work: match errors are errors), and turn a rule into a libquant quant_how for a tensor
 * shape.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_RULES_H
#define QUANT_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant_ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One rule, validated. Strings are owned by the rule set. */
typedef struct quant_rule {
    char *module_path;     /* the regex source; default ".*" */
    bool has_weight_qtype; /* false: weight_qtype absent or null (tensor left as it is) */
    quant_qtype weight_qtype;
    char *weight_calibration; /* default "absmax"; validated with quant_calib_parse */
    int n_tiles;              /* 0: no tile_size */
    quant_tile tiles[QUANT_MAX_RANK];
    bool tile_on_contraction; /* tile_size was a number: tiles[0].axis is the last contraction
                                 axis, resolved per tensor by quant_rule_how() */
    bool has_act_qtype;
    quant_qtype act_qtype;
    char *act_calibration; /* default "absmax" */
    bool act_static_scale;
    int n_act_batch_axes; /* default [0] */
    int act_batch_axes[QUANT_MAX_RANK];
    int n_contraction_axes; /* default [-1] */
    int contraction_axes[QUANT_MAX_RANK];
    quant_dtype scale_dtype;  /* default F32; also BF16, F16 */
    bool pack;                /* default true */
    bool stochastic_rounding; /* default false */
    uint64_t sr_seed;         /* stochastic_rounding: true = seed 0, an integer = that seed */
    bool weight_importance;   /* default false; true needs an mse or minmax_mse weight
                                 calibration and a single contraction axis (SPEC 9) */
} quant_rule;

typedef struct quant_ruleset quant_ruleset;

/*! quant_ruleset_parse() :
 * Parses a rule set from JSON text: either a list of rules or an object {"rules": [...]} (which
 * may also hold "allow_nothing_quantized": true, see below, and name a llama-quantize mix for
 * the gguf layout: {"gguf_mix": "Q4_K_M", "rules": []}).
 * Every field is checked (type, range, qtype and calibration names, regex syntax); unknown
 * fields are errors. `source` names the input in messages (a file name, or NULL).
 * @return : QUANT_CK_OK with `*out` to free with quant_ruleset_free(), or QUANT_CK_ERR_RULES
 *           with a message like "rules.json: rule 2: field 'tile_size': must be a positive
 *           integer, a number in (0, 1] or an object of axis -> size". */
QUANT_API quant_ck_status quant_ruleset_parse(const char *json, size_t len, const char *source,
                                              quant_ruleset **out, quant_ck_error *err);

/*! quant_ruleset_load() : reads the file `path` and parses it with quant_ruleset_parse(). */
QUANT_API quant_ck_status quant_ruleset_load(const char *path, quant_ruleset **out,
                                             quant_ck_error *err);

/*! quant_ruleset_free() : NULL is a no-op. */
QUANT_API void quant_ruleset_free(quant_ruleset *rs);

/*! quant_ruleset_gguf_mix() :
 * The object form's "gguf_mix" (a llama-quantize mix name, quant_gguf_mix.h, checked when the set
 * was parsed): the mix the gguf layout starts from before the rules override it per tensor; NULL
 * when the set has none. Owned by the set. */
QUANT_API const char *quant_ruleset_gguf_mix(const quant_ruleset *rs);

/*! quant_ruleset_allow_nothing_quantized() :
 * Whether the rule set's object form says "allow_nothing_quantized": true. A run (or plan) in
 * which no tensor would be quantized fails (QUANT_CK_ERR_RULES) unless this, or the pipeline
 * option of the same name, allows it: a checkpoint copied unchanged is almost always a rule whose
 * module_path matches nothing. */
QUANT_API bool quant_ruleset_allow_nothing_quantized(const quant_ruleset *rs);

/*! quant_ruleset_count(), quant_ruleset_rule() : the rules in order (index < count). */
QUANT_API size_t quant_ruleset_count(const quant_ruleset *rs);
QUANT_API const quant_rule *quant_ruleset_rule(const quant_ruleset *rs, size_t index);

/* ---- matching module paths, in bounded work -------------------------------------------------
 *
 * Matching is PCRE2's, bounded by its match limit: units of about one step of the matcher
 * (backtracking included), a step scanning at most the whole module path. The cost of a try is
 * its limit x (module path bytes + 64), so the limits shrink as paths grow. Every match first runs
 * with a limit worth QUANT_RULES_MATCH_FIRST (about 8000 units for a 64-byte path; real rule
 * sets need tens of units on real module paths); one that needs more runs again with ten times
 * the limit, and so on up to QUANT_RULES_MATCH_LIMIT (about PCRE2's default of 10 million units
 * for a 150-byte path, 200000 for a 10000-byte one), the cost of every retry charged to the
 * matcher's budget of QUANT_RULES_MATCH_BUDGET (a run's). The interpreter's memory for one match
 * is capped at QUANT_RULES_HEAP_KIB; a match the JIT's stack cannot hold runs in the interpreter
 * instead. A match that hits the limit, the budget or the heap cap is an error naming the rule,
 * its regex and the module path, never "no match". The matching of a run thus costs at most
 * distinct module paths x rules x QUANT_RULES_MATCH_FIRST, plus about 1.1 x the budget (a
 * retry's failed tries cost a ninth of it): well under a millisecond per path and rule at
 * worst, and a few seconds all told. */
#define QUANT_RULES_MATCH_FIRST  (1ull << 20) /* cost of the first try of each match */
#define QUANT_RULES_MATCH_LIMIT  (1ull << 31) /* cost of one match at most */
#define QUANT_RULES_MATCH_BUDGET (1ull << 33) /* cost of a matcher's retries, all together */
#define QUANT_RULES_HEAP_KIB     65536u       /* interpreter memory for one match (64 MiB) */

typedef struct quant_rule_matcher quant_rule_matcher;

/*! quant_rule_matcher_new() :
 * A matcher over `rs` for one run: its PCRE2 match context (the limits above), its budget, and a
 * cache of module path -> result (many tensors share a module path). `rs` must outlive it. Not
 * thread-safe: one matcher per thread.
 * @return : the matcher, to free with quant_rule_matcher_free(); NULL on allocation failure. */
QUANT_API quant_rule_matcher *quant_rule_matcher_new(const quant_ruleset *rs);

/*! quant_rule_matcher_find() :
 * `*index` gets the index of the first rule whose module_path regex matches the whole of
 * `module_path` (Python re.fullmatch semantics), or -1 when none does.
 * @return : QUANT_CK_OK; QUANT_CK_ERR_RULES when a regex could not be matched within the limits
 *           ("rule 1: module_path \"(a+)+$\": matching module path 'aaaa...' (10001 characters)
 *           hit PCRE2's match limit ..."; the budget and the heap cap likewise);
 *           QUANT_CK_ERR_NOMEM; QUANT_CK_ERR_ARG for a NULL argument. `*index` is -1 on error. */
QUANT_API quant_ck_status quant_rule_matcher_find(quant_rule_matcher *m, const char *module_path,
                                                  long *index, quant_ck_error *err);

/*! quant_rule_matcher_free() : NULL is a no-op. */
QUANT_API void quant_rule_matcher_free(quant_rule_matcher *m);

/*! quant_ruleset_find() :
 * quant_rule_matcher_find() with a matcher of its own (so a budget of its own): one lookup.
 * Thread-safe. */
QUANT_API quant_ck_status quant_ruleset_find(const quant_ruleset *rs, const char *module_path,
                                             long *index, quant_ck_error *err);

/*! quant_ruleset_match() :
 * quant_ruleset_find() without the message.
 * @return : the index of the first rule whose module_path regex matches the whole of
 *           `module_path` (Python re.fullmatch semantics), -1 when none does, -2 when matching
 *           failed (a limit above, out of memory): not "no match". Thread-safe. */
QUANT_API long quant_ruleset_match(const quant_ruleset *rs, const char *module_path);

/*! quant_module_path() :
 * Writes `name` without its last component (components separated by '.' or '/') into `out`
 * (capacity `cap`, NUL-terminated): "model.layers.0.mlp.up_proj.weight" ->
 * "model.layers.0.mlp.up_proj"; a name without a separator gives "".
 * @return : false if `out` is too small. */
QUANT_API bool quant_module_path(const char *name, char *out, size_t cap);

/*! quant_rule_how() :
 * Fills `how` for a weight of `rank` dims from rule `r` (which must have a weight qtype):
 * contraction axes are reduced, every other axis is channelwise except tiled axes; a numeric
 * tile_size applies to the last contraction axis. Axes are checked against `rank` and `shape`
 * with quant_scale_shape(); `how->calibration` points into the rule (keep the set alive).
 * Stochastic rounding: how->sr_key = quant_sr_key(r->sr_seed, tensor_name).
 * @return : QUANT_CK_OK, or QUANT_CK_ERR_QUANT with libquant's message (bad axis for this rank,
 *           tile not dividing the dim, ...). */
QUANT_API quant_ck_status quant_rule_how(const quant_rule *r, const char *tensor_name, int rank,
                                         const int64_t *shape, quant_how *how, quant_ck_error *err);

#ifdef __cplusplus
}
#endif
#endif /* QUANT_RULES_H */
