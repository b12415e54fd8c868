/* handlers.h -- one function per route; each resource's handlers live in their own file
 * (h_health.c, h_rulesets.c, h_jobs.c, h_job_files.c, h_models.c, h_stats.c, h_scales.c,
 * h_tokens.c, h_plans.c).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_HANDLERS_H
#define QD_HANDLERS_H

#include "http.h"
#include "inputs.h"
#include "quant_ckpt.h"
#include "tokens.h"

enum MHD_Result qd_h_healthz(qd_req *r);
enum MHD_Result qd_h_readyz(qd_req *r);
enum MHD_Result qd_h_metrics(qd_req *r);

enum MHD_Result qd_h_ruleset_put(qd_req *r);
enum MHD_Result qd_h_ruleset_get(qd_req *r);
enum MHD_Result qd_h_ruleset_list(qd_req *r);
enum MHD_Result qd_h_ruleset_delete(qd_req *r);

enum MHD_Result qd_h_job_precheck(qd_req *r);
enum MHD_Result qd_h_job_create(qd_req *r);
enum MHD_Result qd_h_job_list(qd_req *r);
enum MHD_Result qd_h_job_get(qd_req *r);
enum MHD_Result qd_h_job_delete(qd_req *r);
enum MHD_Result qd_h_job_output(qd_req *r);
enum MHD_Result qd_h_job_output_named(qd_req *r);
enum MHD_Result qd_h_job_outputs(qd_req *r);
enum MHD_Result qd_h_job_outputs_tar(qd_req *r);
enum MHD_Result qd_h_job_report(qd_req *r);

enum MHD_Result qd_h_model_list(qd_req *r);
enum MHD_Result qd_h_model_put(qd_req *r);
enum MHD_Result qd_h_model_get(qd_req *r);
enum MHD_Result qd_h_stats_precheck(qd_req *r);
enum MHD_Result qd_h_stats_post(qd_req *r);
enum MHD_Result qd_h_stats_get(qd_req *r);
enum MHD_Result qd_h_stats_delete(qd_req *r);
enum MHD_Result qd_h_scales_get(qd_req *r);
enum MHD_Result qd_h_imatrix_get(qd_req *r);

enum MHD_Result qd_h_token_list(qd_req *r);
enum MHD_Result qd_h_token_create(qd_req *r);
enum MHD_Result qd_h_token_delete(qd_req *r);

/* Validates a {"rules":[...]} document with the pipeline's parser; on failure replies 422
 * naming `field` and returns NULL. Returns the canonical text (malloc'd). */
char *qd_rules_validate(qd_req *r, json_t *doc, const char *field);

/* A token as the API lists it (never its secret): name, role, created_at, expires_at,
 * expired. */
json_t *qd_token_json(const qd_token_info *t, int64_t now_ms);

/* POST /v1/plans (h_plans.c): the plan of a job that is not created. */
enum MHD_Result qd_h_plan_precheck(qd_req *r);
enum MHD_Result qd_h_plan_create(qd_req *r);

/* What job creation checks, shared with POST /v1/plans (h_jobs.c); each replies on error. The
 * rule set a job runs with, a stored one by name or inline rules (malloc'd text, NULL after a
 * reply or on OOM); a layout name; a stats_model the statistics store knows (NULL is fine). */
char *qd_job_rules(qd_req *r, const char *name, json_t *inline_rules);
bool qd_layout_ok(qd_req *r, const char *layout);
/* qd_layout_ok() for an upload (a shard or a checkpoint job's files): the gguf layout is refused
 * (422 invalid_job: it reads a server-side GGUF file). False once it replied. */
bool qd_upload_layout_ok(qd_req *r, const char *layout);

/* A job's outputs as the API lists them (h_jobs.c): [{name, bytes, sha256, url}], by name. */
json_t *qd_job_outputs_json(qd_app *app, int64_t id);

/* A job's {id} path parameter (h_jobs.c), the one parser every /v1/jobs/{id}... route uses;
 * replies 404 and returns false unless it is 1 to 18 digits without a leading zero. */
bool qd_job_id_param(qd_req *r, int64_t *id);
bool qd_stats_model_ok(qd_req *r, const char *model);
/* The body POST /v1/jobs and POST /v1/plans take, by Content-Type: a shard (octet-stream) or
 * JSON. Anything else is answered 415 with `takes`, what the route takes (QD_PAYLOAD_REPLIED). */
typedef enum qd_payload { QD_PAYLOAD_SHARD, QD_PAYLOAD_JSON, QD_PAYLOAD_REPLIED } qd_payload;
qd_payload qd_shard_or_json(qd_req *r, const char *takes);
/* A shard's query: layout, stats_model and ruleset name what exists (replies 4xx otherwise;
 * false then, with *ret what the precheck returns). */
bool qd_shard_query_ok(qd_req *r, enum MHD_Result *ret);

/* A job on a server-side path from a JSON body, as POST /v1/jobs and POST /v1/plans take it
 * (h_jobs.c): fields ruleset | rules, layout, stats_model, source {"path"} checked, the rule set
 * resolved and validated, the path confined below a source root (qd_source_locate) and opened
 * without following links. j->rules and j->source_path are malloc'd (the caller frees them), the
 * other strings live in `doc`. Replies (400, 403, 422) and returns false on error. */
bool qd_job_from_json(qd_req *r, json_t *doc, qd_job *j);
/* The same fields without the source (ruleset | rules, layout, stats_model; unknown fields
 * refused): j->rules malloc'd, the rest in doc. */
bool qd_job_fields_json(qd_req *r, json_t *doc, qd_job *j);
/* POST /v1/jobs with "files" (h_job_inputs.c): a checkpoint job whose client PUTs the files. */
enum MHD_Result qd_job_create_receiving(qd_req *r, json_t *doc);
/* PUT /v1/jobs/{id}/inputs/{name} (h_job_inputs.c): one of those files, streamed. */
enum MHD_Result qd_h_job_input_precheck(qd_req *r);
enum MHD_Result qd_h_job_input_put(qd_req *r);
/* The writer of a receiving job's file (h_job_inputs.c), which PUT /v1/jobs/{id}/inputs/{name}
 * and the shard of POST /v1/jobs?ruleset= both stream through: attach takes ji (with file idx
 * begun) and path (malloc'd) and opens the file as r->upload_fd, r->sink watching each write
 * (header, size, the job's failure); false when it cannot (the job failed; r->sink, when set,
 * says why). finish, once the body is in: its size checked, fsync'd, counted as received (the
 * last file in: the job planned and queued unless a worker runs it); false when it replied
 * (*ret what to return). */
bool qd_input_sink_attach(qd_req *r, int64_t id, qd_job_inputs *ji, size_t idx, const char *name,
                          char *path);
bool qd_input_sink_finish(qd_req *r, enum MHD_Result *ret);
int64_t qd_input_sink_job(const qd_req *r);
/* The 422 code of a job that cannot be planned, by the pipeline's status (h_jobs.c). */
qd_ec qd_plan_error_code(quant_ck_status st);

/* Job JSON as the API shows it (also used by job creation's reply). */
json_t *qd_job_json(qd_app *app, const qd_job *j);

#endif /* QD_HANDLERS_H */
