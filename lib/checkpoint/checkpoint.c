/* checkpoint.c -- quant_quantize_path(): options (static activation scales checked), then the run
 * over a file or a sharded directory: open and validate every shard, place each static
 * activation scale in a shard, plan every tensor (so bad rules or unsupported layouts fail
 * before any data is read) and note the unused rules, run the shards one after another, publish
 * the output. quant_check_path() and quant_plan_path() stop before the first tensor is read.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <fcntl.h>
#include <float.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "ck_internal.h"
#include "gguf_internal.h"

#define CK_MIN_CHUNK (64u << 10)

static const char *const layout_names[] = {
    [QUANT_LAYOUT_NATIVE] = "native",
    [QUANT_LAYOUT_CTENSORS] = "compressed-tensors",
    [QUANT_LAYOUT_GGUF] = "gguf",
};

bool quant_layout_parse(const char *name, quant_layout *out)
{
    for (size_t i = 0; i < sizeof layout_names / sizeof layout_names[0]; i++)
        if (name && strcmp(name, layout_names[i]) == 0) {
            *out = (quant_layout)i;
            return true;
        }
    return false;
}

const char *quant_layout_name(quant_layout layout)
{
    return (unsigned)layout < sizeof layout_names / sizeof layout_names[0] ? layout_names[layout]
                                                                           : NULL;
}

void quant_pipeline_options_init(quant_pipeline_options *o)
{
    memset(o, 0, sizeof *o);
    o->layout = QUANT_LAYOUT_NATIVE;
    o->quality = true;
    o->chunk_bytes = 16u << 20;
    o->buffers = 3;
    o->input_dir_fd = AT_FDCWD;
    o->no_symlinks = false;
}

static quant_ck_status check_options(const quant_pipeline_options *o, quant_ck_error *err)
{
    if (!quant_layout_name(o->layout))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "unknown layout %d", (int)o->layout);
    if (o->chunk_bytes < CK_MIN_CHUNK)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "chunk size %zu is below %u bytes",
                             o->chunk_bytes, CK_MIN_CHUNK);
    if (o->buffers < 1 || o->buffers > 64)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "buffers must be 1..64, not %d", o->buffers);
    if (o->map_input && o->input_wait)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "map_input cannot be used with input_wait (an input still arriving is "
                             "read as its bytes are confirmed, never mapped)");
    if (o->threads < 0 || o->threads > QUANT_MAX_THREADS)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "threads must be 0..%d, not %d",
                             QUANT_MAX_THREADS, o->threads);
    return QUANT_CK_OK;
}

/* ---- static activation scales (SRQ) -------------------------------------------------------- */

static const char *act_label(const quant_static_act *a)
{
    return a->name ? a->name : a->tensor_base ? a->tensor_base : "(unnamed)";
}

/* One static activation scale: a name, a valid qtype and rule, SPEC section 4 values. */
static quant_ck_status check_static_act(const quant_static_act *a, const quant_ruleset *rules,
                                        quant_ck_error *err)
{
    const char *who = act_label(a);
    const quant_qtype_traits *tr = quant_qtype_traits_get(a->qtype);
    int64_t n = a->rank >= 0 && a->rank <= QUANT_MAX_RANK ? quant_numel(a->rank, a->shape) : -1;
    if (!a->tensor_base || !*a->tensor_base || !tr || n < 0 || (!a->scale && n > 0))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "static activation '%s': needs a tensor base name, a qtype, a shape "
                             "and its scale",
                             who);
    if (a->rule < -1 || (a->rule >= 0 && (size_t)a->rule >= quant_ruleset_count(rules)))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "static activation '%s': no rule %ld", who,
                             a->rule);
    const quant_rule *r = a->rule >= 0 ? quant_ruleset_rule(rules, (size_t)a->rule) : NULL;
    if (r && !(r->has_act_qtype && r->act_qtype == a->qtype))
        return quant_ck_fail(
            err, QUANT_CK_ERR_ARG,
            "static activation '%s': its qtype %s is not the act_qtype of rule %ld", who, tr->name,
            a->rule);
    if (a->zero_point && !tr->asymmetric_allowed)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "static activation '%s': %s has no zero point (symmetric only)", who,
                             tr->name);
    for (int64_t i = 0; i < n; i++) {
        if (!(a->scale[i] > 0.0f && a->scale[i] <= FLT_MAX))
            return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                 "static activation '%s': scale element %lld is %g, not positive "
                                 "and finite",
                                 who, (long long)i, (double)a->scale[i]);
        if (a->zero_point && (a->zero_point[i] < tr->qmin || a->zero_point[i] > tr->qmax))
            return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                 "static activation '%s': zero point element %lld is %d, outside "
                                 "[%d, %d] of %s",
                                 who, (long long)i, (int)a->zero_point[i], (int)tr->qmin,
                                 (int)tr->qmax, tr->name);
    }
    return QUANT_CK_OK;
}

static quant_ck_status check_static_acts(const quant_pipeline_options *o,
                                         const quant_ruleset *rules, quant_ck_error *err)
{
    if (o->n_static_acts > 0 && !o->static_acts)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "static_acts is NULL");
    if (o->n_skipped_acts > 0 && !o->skipped_acts)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "skipped_acts is NULL");
    for (size_t i = 0; i < o->n_static_acts; i++) {
        quant_ck_status st = check_static_act(&o->static_acts[i], rules, err);
        if (st != QUANT_CK_OK) return st;
    }
    return QUANT_CK_OK;
}

static bool starts_with_module(const char *name, const char *module, size_t len)
{
    return strncmp(name, module, len) == 0 && name[len] == '.';
}

/* The shard a static activation's tensors go to: native, the first holding a tensor of its
 * module (name starting with module + "."), else the last; compressed-tensors, the one holding
 * module.weight (whose input_scale it becomes). */
static quant_ck_status act_shard(const ck_shards *s, const quant_static_act *a, quant_layout layout,
                                 size_t *shard, quant_ck_error *err)
{
    size_t cap = strlen(a->tensor_base) + 1;
    char *module = malloc(cap);
    if (!module) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    quant_module_path(a->tensor_base, module, cap);
    size_t len = strlen(module);
    bool found = false;
    for (size_t k = 0; !found && k < s->n; k++)
        for (size_t i = 0; !found && i < s->f[k]->n_tensors; i++) {
            const char *name = s->f[k]->tensors[i].name;
            bool hit = layout == QUANT_LAYOUT_CTENSORS
                           ? starts_with_module(name, module, len) && !strcmp(name + len, ".weight")
                           : starts_with_module(name, module, len);
            if (hit) {
                *shard = k;
                found = true;
            }
        }
    quant_ck_status st = QUANT_CK_OK;
    if (!found && layout == QUANT_LAYOUT_CTENSORS)
        st = quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                           "static activation '%s': the compressed-tensors layout cannot express "
                           "this: its input_scale needs a weight '%s.weight', and the checkpoint "
                           "has none",
                           act_label(a), module);
    if (!found) *shard = s->n - 1;
    free(module);
    return st;
}

/* An output name already taken (by shard `prev`) when shard s's output i comes. */
static quant_ck_status out_clash(const ck_shard_plan *plans, size_t prev, size_t s, size_t i,
                                 quant_ck_error *err)
{
    const char *name = plans[s].out[i].name;
    if (prev == s)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: output tensor '%s' would be written twice (an input tensor has "
                             "the name a quantized tensor's output takes)",
                             plans[s].in->path, name);
    return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                         "%s: output tensor '%s' is also an output tensor of %s (a name must be "
                         "in one shard only: the index maps it to one)",
                         plans[s].in->path, name, plans[prev].base);
}

/* Adds shard s's output i to `names` (name -> shard), refusing a name already there. */
static quant_ck_status claim(json_t *names, const ck_shard_plan *plans, size_t s, size_t i,
                             quant_ck_error *err)
{
    const json_t *prev = json_object_get(names, plans[s].out[i].name);
    if (prev) return out_clash(plans, (size_t)json_integer_value(prev), s, i, err);
    if (json_object_set_new(names, plans[s].out[i].name, json_integer((json_int_t)s)) != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return QUANT_CK_OK;
}

/* No two output tensors of the run share a name (the output index maps a name to one shard):
 * first the outputs of the input's tensors across shards, then the static activation scales,
 * which may not take the name of another output tensor either. */
static quant_ck_status check_out_names(const ck_shard_plan *plans, size_t n, quant_ck_error *err)
{
    json_t *names = json_object();
    if (!names) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    quant_ck_status st = QUANT_CK_OK;
    for (size_t s = 0; st == QUANT_CK_OK && s < n; s++)
        for (size_t i = 0; st == QUANT_CK_OK && i < plans[s].n_tensor_out; i++)
            st = claim(names, plans, s, i, err);
    for (size_t s = 0; st == QUANT_CK_OK && s < n; s++)
        for (size_t k = 0; st == QUANT_CK_OK && k < plans[s].n_acts; k++) {
            const ck_act_plan *ap = &plans[s].acts[k];
            long outs[2] = {ap->out_scale, ap->out_zp};
            for (int r = 0; st == QUANT_CK_OK && r < 2 && outs[r] >= 0; r++) {
                const char *name = plans[s].out[outs[r]].name;
                if (json_object_get(names, name))
                    st = quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                       "static activation '%s': output tensor '%s' is already "
                                       "another output tensor",
                                       act_label(ap->act), name);
                else
                    st = claim(names, plans, s, (size_t)outs[r], err);
            }
        }
    json_decref(names);
    return st;
}

/* ---- the run ------------------------------------------------------------------------------- */

/* Everything one run holds. */
typedef struct ck_job {
    ck_run run;
    ck_shards shards;
    ck_shard_plan *plans;
    ck_ct_config *ct;
    char *config; /* compressed-tensors: the output's config.json (a file run: beside it) */
    ck_outdir dir;
    quant_rule_matcher *matcher;       /* the run's: one budget for all its regex matching */
    size_t *act_shard;                 /* the shard of each static activation */
    const quant_static_act **act_list; /* scratch: one shard's static activations */
    long *unused;                      /* rules that are the first match of no tensor */
    size_t n_unused;
    bool plan_only; /* quant_check_path / quant_plan_*: no tensor data read, nothing written */
    ck_wait wait;   /* opts' input_wait, the inputs' ck_dir points here */
} ck_job;

/* Places every static activation in a shard. */
static quant_ck_status place_acts(ck_job *j, quant_ck_error *err)
{
    const quant_pipeline_options *o = j->run.opts;
    size_t n = o->n_static_acts ? o->n_static_acts : 1;
    j->act_shard = calloc(n, sizeof *j->act_shard);
    j->act_list = calloc(n, sizeof *j->act_list);
    if (!j->act_shard || !j->act_list)
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < o->n_static_acts; i++) {
        quant_ck_status st =
            act_shard(&j->shards, &o->static_acts[i], o->layout, &j->act_shard[i], err);
        if (st != QUANT_CK_OK) return st;
    }
    return QUANT_CK_OK;
}

/* The static activations placed in shard s, into j->act_list; returns their number. */
static size_t acts_of_shard(ck_job *j, size_t s)
{
    size_t n = 0;
    for (size_t i = 0; i < j->run.opts->n_static_acts; i++)
        if (j->act_shard[i] == s) j->act_list[n++] = &j->run.opts->static_acts[i];
    return n;
}

/* The rules that are the first match of no tensor of the run, into j->unused and the report
 * (with what each probably meant); then a run that would quantize nothing is refused unless the
 * options or the rule set allow it. */
static quant_ck_status note_unused(ck_job *j, const quant_ruleset *rules, quant_ck_error *err)
{
    quant_ck_status st = ck_unused_rules(j->plans, j->shards.n, quant_ruleset_count(rules),
                                         &j->unused, &j->n_unused, err);
    if (st != QUANT_CK_OK) return st;
    char **hints = j->n_unused ? calloc(j->n_unused, sizeof *hints) : NULL;
    if (j->n_unused && !hints) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < j->n_unused; i++)
        hints[i] = ck_rule_hint(rules, (size_t)j->unused[i], j->plans, j->shards.n);
    if (!j->run.opts->allow_nothing_quantized && !quant_ruleset_allow_nothing_quantized(rules))
        st = ck_check_quantizes(j->plans, j->shards.n, rules, j->unused, hints, j->n_unused, err);
    if (!ck_report_set_unused(j->run.report, j->unused, hints, j->n_unused)) /* takes hints */
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return st;
}

static quant_ck_status plan_all(ck_job *j, const quant_ruleset *rules, quant_ck_error *err)
{
    const quant_pipeline_options *o = j->run.opts;
    j->plans = calloc(j->shards.n, sizeof *j->plans);
    j->matcher = quant_rule_matcher_new(rules);
    if (!j->plans || !j->matcher) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    quant_ck_status st = place_acts(j, err);
    ck_plan_errors pe = {0}; /* every tensor that cannot be planned, over every shard */
    for (size_t s = 0; st == QUANT_CK_OK && s < j->shards.n; s++) {
        quant_st_file *f = j->shards.f[s];
        size_t n_acts = acts_of_shard(j, s), failed = pe.n;
        bool later = j->plan_only && o->allow_static_acts && o->n_static_acts == 0;
        st = ck_plan_shard(&j->plans[s], f, rules, j->matcher, o, j->act_list, n_acts, later, &pe,
                           err);
        for (size_t i = 0; st == QUANT_CK_OK && pe.n == failed && j->ct && i < j->plans[s].n; i++)
            st = ck_ct_config_add(j->ct, &j->plans[s].t[i], err);
        j->run.tensors_total += f->n_tensors;
        for (size_t i = 0; i < f->n_tensors; i++)
            j->run.bytes_total += quant_st_nbytes(&f->tensors[i]);
    }
    if (st == QUANT_CK_OK) st = ck_plan_errors_finish(&pe, err);
    if (st == QUANT_CK_OK && j->ct)
        st = ck_ct_fuse_groups(j->plans, j->shards.n, j->shards.is_dir, err);
    if (st == QUANT_CK_OK) st = check_out_names(j->plans, j->shards.n, err);
    if (st == QUANT_CK_OK) st = note_unused(j, rules, err);
    return st;
}

/* compressed-tensors: config.json of the input directory (read under it; none makes a new one)
 * with the run's quantization_config, into j->config. */
static quant_ck_status ct_config_text(ck_job *j, quant_ck_error *err)
{
    char *text = NULL;
    struct stat sb;
    quant_ck_status st = QUANT_CK_OK;
    if (ck_stat_in(&j->shards.dir, "config.json", &sb))
        st = ck_read_small_in(&j->shards.dir, "config.json", CK_CONFIG_MAX, &text, NULL, err);
    if (st == QUANT_CK_OK && !(j->config = ck_ct_config_apply(j->ct, text, err)))
        st = err ? err->status : QUANT_CK_ERR_NOMEM;
    free(text);
    return st;
}

static quant_ck_status run_dir(ck_job *j, const char *out, quant_ck_error *err)
{
    quant_ck_status st = ck_outdir_begin(out, &j->dir, err);
    j->dir.report = j->run.report;
    j->dir.sha256 = j->run.opts->sha256;
    for (size_t s = 0; st == QUANT_CK_OK && s < j->shards.n; s++) {
        ck_shard_plan *sp = &j->plans[s];
        char *path = ck_outdir_path(&j->dir, sp->base);
        st = path ? ck_run_shard(&j->run, sp, path, err)
                  : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        free(path);
        if (st == QUANT_CK_OK) st = ck_outdir_add_shard(&j->dir, sp->base, sp->out, sp->n_out, err);
    }
    if (st == QUANT_CK_OK) st = ck_outdir_finish(&j->dir, &j->shards, j->config, out, err);
    return st;
}

/* One file: the shard, then (compressed-tensors) config.json beside it; the shard is taken back
 * when config.json cannot be written, so no output is left that vLLM would load unquantized. */
static quant_ck_status run_file(ck_job *j, const char *out, quant_ck_error *err)
{
    quant_ck_status st = ck_run_shard(&j->run, &j->plans[0], out, err);
    if (st != QUANT_CK_OK || !j->config) return st;
    st = ck_ct_file_config_write(out, j->config, j->run.report, j->run.opts->sha256, err);
    if (st != QUANT_CK_OK) unlink(out);
    return st;
}

static void job_free(ck_job *j)
{
    for (size_t s = 0; j->plans && s < j->shards.n; s++) ck_plan_free(&j->plans[s]);
    free(j->plans);
    ck_ct_config_free(j->ct);
    free(j->config);
    free(j->act_shard);
    free(j->act_list);
    free(j->unused);
    quant_rule_matcher_free(j->matcher);
    ck_shards_close(&j->shards);
    if (j->dir.tmp || j->dir.weight_map) ck_outdir_free(&j->dir);
    quant_ctx_free(j->run.ctx);
}

/* Opens, validates and plans everything before any data is read: the shards, and for a
 * directory config.json (compressed-tensors) and the other files to copy. */
/* Everything before the first tensor is read: the shards opened and validated, the output
 * checked (unless out is NULL: a check only), every tensor planned, the other files looked at;
 * then (with out) the libquant context. */
static quant_ck_status job_start(ck_job *j, const quant_ruleset *rules, const char *in,
                                 const char *out, quant_ck_error *err)
{
    const quant_pipeline_options *o = j->run.opts;
    j->wait = (ck_wait){.fn = o->input_wait, .user = o->input_wait_user, .cancel = o->cancel};
    ck_dir base = {.fd = o->input_dir_fd,
                   .shown = NULL,
                   .nofollow = o->no_symlinks,
                   .wait = o->input_wait ? &j->wait : NULL};
    quant_ck_status st = ck_shards_open(&base, in, &j->shards, err);
    if (st == QUANT_CK_OK && out) st = ck_check_output(out, j->shards.is_dir, err);
    if (st == QUANT_CK_OK && o->layout == QUANT_LAYOUT_CTENSORS && !(j->ct = ck_ct_config_new()))
        st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    if (st == QUANT_CK_OK) st = plan_all(j, rules, err);
    if (st == QUANT_CK_OK && j->shards.is_dir && j->ct) st = ct_config_text(j, err);
    if (st == QUANT_CK_OK && !j->shards.is_dir && j->ct && out)
        st = ck_ct_file_config_text(&base, in, out, j->ct, &j->config, err);
    if (st == QUANT_CK_OK && j->shards.is_dir)
        st = ck_outdir_check_others(&j->shards, j->config != NULL, err);
    if (st != QUANT_CK_OK || !out) return st;
    quant_ctx_options co = {.threads = j->run.opts->threads, .isa = QUANT_ISA_AUTO};
    quant_error qe;
    j->run.ctx = quant_ctx_new(&co, &qe);
    if (!j->run.ctx) return quant_ck_fail(err, QUANT_CK_ERR_QUANT, "libquant: %s", qe.message);
    return QUANT_CK_OK;
}

/* The options and static activations checked, and the job's report made. */
static quant_ck_status job_new(ck_job *j, const quant_ruleset *rules,
                               const quant_pipeline_options *opts, quant_ck_error *err)
{
    quant_ck_status st = check_options(opts, err);
    if (st == QUANT_CK_OK) st = check_static_acts(opts, rules, err);
    if (st != QUANT_CK_OK) return st;
    bool static_acts = opts->allow_static_acts || opts->n_static_acts > 0;
    *j = (ck_job){.run = {.opts = opts, .report = ck_report_new(opts->layout, static_acts)}};
    if (j->run.report &&
        ck_report_set_skipped(j->run.report, opts->skipped_acts, opts->n_skipped_acts))
        return QUANT_CK_OK;
    quant_report_free(j->run.report);
    j->run.report = NULL;
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

/* quant_check_path() and quant_plan_path(): the run up to its first read of tensor data, then,
 * with `plan`, the public plan of it. */
static quant_ck_status check_run(const quant_ruleset *rules, const char *in,
                                 const quant_pipeline_options *opts, quant_plan **plan,
                                 quant_ck_error *err)
{
    quant_pipeline_options defaults;
    if (!opts) {
        quant_pipeline_options_init(&defaults);
        opts = &defaults;
    }
    if (!rules || !in) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    if (opts->layout == QUANT_LAYOUT_GGUF) return ck_gguf_check(rules, in, opts, plan, err);
    ck_job j;
    quant_ck_status st = job_new(&j, rules, opts, err);
    if (st != QUANT_CK_OK) return st;
    j.plan_only = true;
    st = job_start(&j, rules, in, NULL, err);
    if (st == QUANT_CK_OK && plan)
        st = ck_plan_doc_new(opts->layout, j.plans, j.shards.n, j.unused, j.n_unused, plan, err);
    job_free(&j);
    quant_report_free(j.run.report);
    return st;
}

quant_ck_status quant_check_path(const quant_ruleset *rules, const char *in,
                                 const quant_pipeline_options *opts, quant_ck_error *err)
{
    return check_run(rules, in, opts, NULL, err);
}

quant_ck_status quant_plan_path(const quant_ruleset *rules, const char *in,
                                const quant_pipeline_options *opts, quant_plan **out,
                                quant_ck_error *err)
{
    if (!out) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    *out = NULL;
    return check_run(rules, in, opts, out, err);
}

quant_ck_status quant_plan_file(const quant_ruleset *rules, quant_st_file *f,
                                const quant_pipeline_options *opts, quant_plan **out,
                                quant_ck_error *err)
{
    quant_pipeline_options defaults;
    if (!opts) {
        quant_pipeline_options_init(&defaults);
        opts = &defaults;
    }
    if (out) *out = NULL;
    if (!rules || !f || !out) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    if (opts->layout == QUANT_LAYOUT_GGUF)
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "the gguf layout takes a GGUF file, not a safetensors one");
    ck_job j;
    quant_ck_status st = job_new(&j, rules, opts, err);
    if (st != QUANT_CK_OK) return st;
    j.plan_only = true;
    quant_st_file **files = malloc(sizeof *files);
    if (!files) st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    if (files) files[0] = f; /* borrowed: taken back before job_free closes the shards */
    j.shards = (ck_shards){.n = files ? 1 : 0, .f = files, .dir = {.fd = -1}};
    if (st == QUANT_CK_OK && opts->layout == QUANT_LAYOUT_CTENSORS && !(j.ct = ck_ct_config_new()))
        st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    if (st == QUANT_CK_OK) st = plan_all(&j, rules, err);
    if (st == QUANT_CK_OK)
        st = ck_plan_doc_new(opts->layout, j.plans, j.shards.n, j.unused, j.n_unused, out, err);
    for (size_t s = 0; j.plans && s < j.shards.n; s++) ck_plan_free(&j.plans[s]);
    free(j.plans);
    j.plans = NULL;
    free(files);
    j.shards = (ck_shards){.dir = {.fd = -1}};
    job_free(&j);
    quant_report_free(j.run.report);
    return st;
}

quant_ck_status quant_quantize_path(const quant_ruleset *rules, const char *in, const char *out,
                                    const quant_pipeline_options *opts, quant_report **report,
                                    quant_ck_error *err)
{
    quant_pipeline_options defaults;
    if (!opts) {
        quant_pipeline_options_init(&defaults);
        opts = &defaults;
    }
    if (report) *report = NULL;
    if (!rules || !in || !out) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    if (opts->layout == QUANT_LAYOUT_GGUF)
        return ck_gguf_quantize(rules, in, out, opts, report, err);
    ck_job j;
    quant_ck_status st = job_new(&j, rules, opts, err);
    if (st != QUANT_CK_OK) return st;
    st = job_start(&j, rules, in, out, err);
    if (st == QUANT_CK_OK) st = ck_global_scales(&j.run, j.plans, j.shards.n, err);
    if (st == QUANT_CK_OK) st = j.shards.is_dir ? run_dir(&j, out, err) : run_file(&j, out, err);
    job_free(&j);
    if (st != QUANT_CK_OK) ck_report_drop_outputs(j.run.report); /* none was published */
    ck_buf_trim(); /* an idle process (a daemon between jobs) keeps no chunk buffers */
    if (report)
        *report = j.run.report;
    else
        quant_report_free(j.run.report);
    return st;
}
