/* job_source.h -- what a job reads and how the pipeline is set up for it (job_source.c): shared
 * by the workers (jobs.c), which run jobs, by job creation (h_jobs.c), which plans a job
 * before accepting it, and by POST /v1/plans (h_plans.c), which only plans it.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_JOB_SOURCE_H
#define QD_JOB_SOURCE_H

#include <stdbool.h>

#include "app.h"
#include "quant_pipeline.h"

/* What a job reads: `in` relative to dir_fd (AT_FDCWD: as it is), confined or not. */
typedef struct qd_job_source {
    int dir_fd;
    char *in;
    bool confined; /* no link is followed anywhere under it */
    bool is_dir;
} qd_job_source;

/* An upload from its own directory in DATA/uploads (named model.safetensors, or the directory
 * `inputs` holding a checkpoint job's files); a server-side
 * path below its source root's parent, opened without following any link (as the pipeline then
 * does for every file under it), so that a link swapped in after the job was accepted leads
 * nowhere. */
quant_ck_status qd_job_source_open(const qd_app *app, const qd_job *j, qd_job_source *src,
                                   quant_ck_error *ck);
void qd_job_source_close(qd_job_source *src);

/* The pipeline options of job j on src: layout, threads (quant_threads, or the CPUs shared
 * between the workers), the input's confinement, mapping of uploads, static activation scales
 * allowed with a stats_model. The caller adds progress, cancel and the scales themselves. */
void qd_job_options(const qd_app *app, const qd_job *j, const qd_job_source *src,
                    quant_pipeline_options *o);

/* Job j planned without reading tensor data (quant_plan_path): the error it would fail with
 * before its first tensor, so that it is refused when asked for rather than when it runs; else
 * its plan in *plan (to free with quant_plan_free). Job creation keeps the plan's unused rules;
 * POST /v1/plans returns the plan of a job it does not create. `stats_later` (POST /v1/plans):
 * rules that need statistics are planned also without a stats_model, their tensors marked as
 * needing them; a job (false) without stats_model is refused such rules. */
quant_ck_status qd_job_plan(const qd_app *app, const qd_job *j, bool stats_later, quant_plan **plan,
                            quant_ck_error *ck);

/* A job with `stats_model` (NULL: nothing to check) against the statistics it names, at
 * creation (srq_check.c): every weight `plan` quantizes by an act_static_scale rule of `rules`
 * needs the statistics of its module's input. QUANT_CK_ERR_ARG naming the weights that lack them,
 * their rules and the model's activation names; the errors of quant_srq_compute() and of the
 * store's read otherwise. */
quant_ck_status qd_srq_check(const qd_app *app, const char *stats_model, const char *rules,
                             const quant_plan *plan, quant_ck_error *ck);

/* The plan's unused rules as a JSON array text ("[0,2]"), malloc'd; NULL on OOM. */
char *qd_plan_unused_json(const quant_plan *plan);

#endif /* QD_JOB_SOURCE_H */
