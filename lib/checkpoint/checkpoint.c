/* checkpoint.c -- quant_quantize_path(): options, then the run over a file or a sharded
 * directory: open and validate every shard, plan every tensor (so bad rules or unsupported
 * layouts fail before any data is read), run the shards one after another, publish the output.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "ck_internal.h"

#define CK_MIN_CHUNK (64u << 10)

static const char *const layout_names[] = {
    [QUANT_LAYOUT_NATIVE] = "native",
    [QUANT_LAYOUT_CTENSORS] = "compressed-tensors",
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
    if (o->threads < 0 || o->threads > QUANT_MAX_THREADS)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "threads must be 0..%d, not %d",
                             QUANT_MAX_THREADS, o->threads);
    return QUANT_CK_OK;
}

/* Everything one run holds. */
typedef struct ck_job {
    ck_run run;
    ck_shards shards;
    ck_shard_plan *plans;
    ck_ct_config *ct;
    ck_outdir dir;
} ck_job;

static quant_ck_status plan_all(ck_job *j, const quant_ruleset *rules, quant_ck_error *err)
{
    const quant_pipeline_options *o = j->run.opts;
    j->plans = calloc(j->shards.n, sizeof *j->plans);
    if (!j->plans) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t s = 0; s < j->shards.n; s++) {
        quant_st_file *f = j->shards.f[s];
        quant_ck_status st = ck_plan_shard(&j->plans[s], f, rules, o->layout, o->chunk_bytes, err);
        for (size_t i = 0; st == QUANT_CK_OK && j->ct && i < j->plans[s].n; i++)
            st = ck_ct_config_add(j->ct, &j->plans[s].t[i], err);
        if (st != QUANT_CK_OK) return st;
        j->run.tensors_total += f->n_tensors;
        for (size_t i = 0; i < f->n_tensors; i++)
            j->run.bytes_total += quant_st_nbytes(&f->tensors[i]);
    }
    return QUANT_CK_OK;
}

static quant_ck_status run_dir(ck_job *j, const char *in, const char *out, quant_ck_error *err)
{
    quant_ck_status st = ck_outdir_begin(out, &j->dir, err);
    for (size_t s = 0; st == QUANT_CK_OK && s < j->shards.n; s++) {
        ck_shard_plan *sp = &j->plans[s];
        char *path = ck_outdir_path(&j->dir, sp->base);
        st = path ? ck_run_shard(&j->run, sp, path, err)
                  : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        free(path);
        if (st == QUANT_CK_OK) st = ck_outdir_add_shard(&j->dir, sp->base, sp->out, sp->n_out, err);
    }
    char *config = NULL;
    if (st == QUANT_CK_OK && j->ct) {
        char *path = NULL, *text = NULL;
        size_t n = strlen(in) + 16;
        path = malloc(n);
        if (path) snprintf(path, n, "%s/config.json", in);
        struct stat sb;
        if (!path)
            st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        else if (stat(path, &sb) == 0) /* else no config.json: one with quantization_config */
            st = ck_read_small_file(path, 64u << 20, &text, NULL, err);
        if (st == QUANT_CK_OK) {
            config = ck_ct_config_apply(j->ct, text, err);
            if (!config) st = err ? err->status : QUANT_CK_ERR_NOMEM;
        }
        free(path);
        free(text);
    }
    if (st == QUANT_CK_OK) st = ck_outdir_finish(&j->dir, in, &j->shards, config, out, err);
    free(config);
    return st;
}

static void job_free(ck_job *j)
{
    for (size_t s = 0; j->plans && s < j->shards.n; s++) ck_plan_free(&j->plans[s]);
    free(j->plans);
    ck_ct_config_free(j->ct);
    ck_shards_close(&j->shards);
    if (j->dir.tmp || j->dir.weight_map) ck_outdir_free(&j->dir);
    quant_ctx_free(j->run.ctx);
}

static quant_ck_status job_start(ck_job *j, const quant_ruleset *rules, const char *in,
                                 const char *out, quant_ck_error *err)
{
    quant_ck_status st = ck_shards_open(in, &j->shards, err);
    if (st == QUANT_CK_OK) st = ck_check_output(out, j->shards.is_dir, err);
    if (st == QUANT_CK_OK && j->run.opts->layout == QUANT_LAYOUT_CTENSORS &&
        !(j->ct = ck_ct_config_new()))
        st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    if (st == QUANT_CK_OK) st = plan_all(j, rules, err);
    if (st != QUANT_CK_OK) return st;
    quant_ctx_options co = {.threads = j->run.opts->threads, .isa = QUANT_ISA_AUTO};
    quant_error qe;
    j->run.ctx = quant_ctx_new(&co, &qe);
    if (!j->run.ctx) return quant_ck_fail(err, QUANT_CK_ERR_QUANT, "libquant: %s", qe.message);
    return QUANT_CK_OK;
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
    quant_ck_status st = check_options(opts, err);
    if (st != QUANT_CK_OK) return st;
    ck_job j = {.run = {.opts = opts, .report = ck_report_new(opts->layout)}};
    if (!j.run.report) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    st = job_start(&j, rules, in, out, err);
    if (st == QUANT_CK_OK)
        st = j.shards.is_dir ? run_dir(&j, in, out, err)
                             : ck_run_shard(&j.run, &j.plans[0], out, err);
    job_free(&j);
    ck_buf_trim(); /* an idle process (a daemon between jobs) keeps no chunk buffers */
    if (report)
        *report = j.run.report;
    else
        quant_report_free(j.run.report);
    return st;
}
