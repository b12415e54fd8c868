/* quant_srq.h -- static-range quantization (SRQ) as one engine: averaged
 * calibration statistics + a rule set -> the static activation scales a run writes, with each
 * activation's count and the activations skipped (and why); and the reader of the two statistics
 * files the `quant` command takes (`GET /v1/models/{m}/stats` of quantd, or a Qwix quant_stats
 * dump in JSON). The CLI (`quant quantize --stats`) and the daemon (a job's `stats_model`, and
 * `GET /v1/models/{m}/scales`) both call quant_srq_compute().
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_SRQ_H
#define QUANT_SRQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant_pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- averaged statistics ----------------------------------------------------------------------
 */

/* Which calibration an activation's statistics give. */
typedef enum quant_stat_kind {
    QUANT_STAT_NONE = 0,   /* none for SRQ: the activation carries only mean_sq */
    QUANT_STAT_ABSMAX = 1, /* absmax: a symmetric scale */
    QUANT_STAT_MINMAX = 2  /* min and max of one shape: an asymmetric scale and zero point */
} quant_stat_kind;

/* One activation's averaged calibration (sum_of_KEY / count, or the model's EMA). */
typedef struct quant_act_stat {
    const char *name; /* as the statistics name it: "model/layers/0/mlp/up_proj/dot_general0_lhs" */
    quant_stat_kind kind;
    int rank; /* 0: a scalar */
    int64_t shape[QUANT_MAX_RANK];
    const double *a; /* absmax, or min: numel(shape) finite values (NULL for QUANT_STAT_NONE) */
    const double *b; /* max (QUANT_STAT_MINMAX), else NULL */
    int64_t count;   /* updates averaged; 0 is an error (nothing to average) */
    /* the averaged importance statistic mean_sq, mean_sq_len values >= 0, or NULL */
    const double *mean_sq;
    int64_t mean_sq_len;
} quant_act_stat;

/* ---- the engine ------------------------------------------------------------------------------ */

typedef struct quant_srq_options {
    /* Only a rule with act_static_scale gives a scale (default true: what a run writes). False: a
     * rule's act_qtype counts whether static or not (GET .../scales without static_only). */
    bool static_only;
    /* One qtype for every activation, the rules not consulted (rule -1); default false. */
    bool fixed_qtype;
    quant_qtype qtype;
} quant_srq_options;

/*! quant_srq_options_init() : the defaults above. */
QUANT_API void quant_srq_options_init(quant_srq_options *o);

typedef struct quant_srq quant_srq;

/*! quant_srq_compute() :
 * For each activation of `stats` (n of them; read during the call only): its module path (the
 * name with '/' read as '.', less the last component) -> the first rule of `rules` whose
 * module_path matches it -> that rule's act_qtype (with static_only, only when
 * the rule has act_static_scale) -> the scale rule on the averaged calibration rounded once to
 * float32 (min and max widened to include 0, as the minmax calibration does) -> the output tensor
 * base, the name with '/' read as '.' (written BASE_scale, BASE_zero_point). An activation that
 * gets no qtype is skipped with its reason: no rule matches, the first matching rule has no
 * act_qtype, or it is not static (static_only), or its statistics have no calibration
 * (QUANT_STAT_NONE). Scales and skipped activations come in name order (strcmp), whatever the
 * input order. `rules` must outlive the result when not NULL (it may be NULL with fixed_qtype).
 * @return : QUANT_CK_OK with `*out` (free with quant_srq_free()); QUANT_CK_ERR_ARG naming the
 *           activation for a count of 0, a qtype the scale rules refuse for the statistics
 *           (min/max on a symmetric-only qtype), two activations written under one base ("a/b"
 *           and "a.b"), a name given twice; QUANT_CK_ERR_RULES when a regex could not be matched
 *           within its limits; QUANT_CK_ERR_NOMEM. `*out` is NULL on failure. */
QUANT_API quant_ck_status quant_srq_compute(const quant_act_stat *stats, size_t n,
                                            const quant_ruleset *rules,
                                            const quant_srq_options *opts, quant_srq **out,
                                            quant_ck_error *err);

/*! quant_srq_acts() : the scales (`*n` of them), in the pipeline's form, with their counts.
 * Owned by `srq`. */
QUANT_API const quant_static_act *quant_srq_acts(const quant_srq *srq, size_t *n);

/*! quant_srq_skipped() : the activations skipped, with their reasons. Owned by `srq`. */
QUANT_API const quant_skipped_act *quant_srq_skipped(const quant_srq *srq, size_t *n);

/*! quant_srq_apply() :
 * Sets `o`'s allow_static_acts, static_acts / n_static_acts and skipped_acts / n_skipped_acts
 * from `srq` (borrowed: keep it until the run returns), so the run writes the scales and its
 * report lists each written activation's count and the skipped ones; and importance_given,
 * importance / n_importance: every activation of the statistics that has a mean_sq,
 * for the rules with weight_importance. */
QUANT_API void quant_srq_apply(const quant_srq *srq, quant_pipeline_options *o);

/*! quant_srq_free() : NULL is a no-op. */
QUANT_API void quant_srq_free(quant_srq *srq);

/* ---- statistics files ------------------------------------------------------------------------

 * Two forms of JSON, told apart by a top-level "stats" object:
 *  - quantd's: what `GET /v1/models/{m}/stats` returns, {"model", "averaging", "ema_constant",
 *    "bootstrap_steps", "stats": {ACT: {"kind", "count", "shape", "updated_at", "bootstrapping",
 *    "sum_of_absmax", "absmax"} | {..., "sum_of_min", "min", "sum_of_max", "max"}}} (also the body
 *    of a ?mode=merge post, {"stats": {ACT: {"count", "sum_of_..."}}});
 *  - a Qwix quant_stats dump: {ACT: {"count": n, "sum_of_absmax": V} | {"count": n,
 *    "sum_of_min": V, "sum_of_max": V}}; a nested dump (Qwix's module tree, {"layers": {"0":
 *    {... {"dot_general0_lhs": {"count": ...}}}}}) names an activation by its path joined with
 *    '/'; an object is an activation when it has a "count" (or a
 *    statistic that is not an object: a module may be called "min").
 * V is a number or nested lists of numbers (the nesting is the shape). An activation with the
 * averaged calibration ("absmax", or "min" and "max": the model's averaging, EMA and bootstrapping
 * included) takes it as it is; one with sums only takes sum_of_KEY / count in float64 (Qwix's
 * SimpleMovingAverage; Qwix divides in float32, we round once afterwards). "mean_sq" (else
 * "sum_of_mean_sq" / count) must be a list of values >= 0 and becomes the
 * activation's mean_sq; an activation with only those is QUANT_STAT_NONE for SRQ. Any other key
 * is an error naming it. */

typedef struct quant_stats quant_stats;

/*! quant_stats_parse() :
 * Parses statistics from JSON text (either form); `source` names it in messages (a file name).
 * @return : QUANT_CK_OK with `*out` (free with quant_stats_free()), or QUANT_CK_ERR_FORMAT with
 *           a message naming the source, the activation and the key ("stats.json: activation
 *           'a/x': key \"absmax\": element [1, 0] is a string, not a number"). */
QUANT_API quant_ck_status quant_stats_parse(const char *json, size_t len, const char *source,
                                            quant_stats **out, quant_ck_error *err);

/*! quant_stats_load() : reads the file `path` and parses it as quant_stats_parse() does
 * (QUANT_CK_ERR_IO when it cannot be read). */
QUANT_API quant_ck_status quant_stats_load(const char *path, quant_stats **out,
                                           quant_ck_error *err);

/*! quant_stats_acts() : the activations read (`*n`), by name. Owned by `s`. */
QUANT_API const quant_act_stat *quant_stats_acts(const quant_stats *s, size_t *n);

/*! quant_stats_free() : NULL is a no-op. */
QUANT_API void quant_stats_free(quant_stats *s);

#ifdef __cplusplus
}
#endif
#endif /* QUANT_SRQ_H */
