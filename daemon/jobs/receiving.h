/* receiving.h -- checkpoint jobs while their files arrive (receiving.c): creating one (its
 * inputs directory DATA/uploads/ID/inputs with every listed file created empty, the store row in
 * state receiving, the entry in app->inputs), its end once every file is in (planned, then
 * queued), its failure or cancel (files removed, nothing published), the input_timeout watch
 * (a thread) and, at start-up, the jobs a stopped quantd left receiving (failed).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_RECEIVING_H
#define QD_RECEIVING_H

#include "app.h"
#include "quant_ckpt.h"

typedef struct qd_receiving qd_receiving;

/* Creates job j (rules, layout, ruleset, stats_model and perhaps unused_rules set by the
 * caller) receiving the n listed files -- in DATA/uploads/HEX/inputs, or, one_file (the shard of
 * POST /v1/jobs?ruleset=, n == 1), as the file DATA/uploads/HEX/NAME the job runs on: sets
 * j->source_kind, j->source_path (malloc'd: the caller frees it), j->state, j->id. The job is
 * runnable at once (a worker claims it like a queued one and reads its files as they arrive); it is
 * registered in app->inputs before a worker can see it. Nothing is left behind on failure. */
qd_status qd_receiving_create(qd_app *app, qd_job *j, const char *const *names, size_t n,
                              bool one_file, qd_err *err);
/* Ends receiving job id as failed with why (or cancelled): its inputs fail (waits and writes
 * stop), the store records it, its files are removed. A job a worker runs is left to the worker
 * (its run's next wait fails with why) apart from its inputs' failure. */
void qd_receiving_fail(qd_app *app, int64_t id, qd_job_state state, const char *why);
/* Every file of job id is in. A job a worker runs already (it reads its files as they arrive)
 * only loses its entry in app->inputs (the run holds its own reference); one still waiting for
 * a worker is planned (every shard header read, as a job on a server-side directory is at
 * creation: its unused rules) and queued. When the plan fails the job fails with its message,
 * QUANT_CK_OK is not returned and ck says why. */
quant_ck_status qd_receiving_done(qd_app *app, int64_t id, quant_ck_error *ck);

/* At start-up, before any job runs (qd_jobs_start): fails the jobs a stopped or killed quantd
 * left with inputs still arriving -- receiving, or claimed by a worker (running) or queued with
 * their upload's receiving mark still there -- with "quantd restarted while its inputs were
 * being uploaded; create the job again", their files removed, so that none is requeued to fail
 * on a truncated file. */
void qd_receiving_recover(qd_app *app);
/* Starts the thread that fails the jobs whose files miss the input_timeout. */
qd_status qd_receiving_start(qd_app *app, qd_receiving **out, qd_err *err);
/* Fails the jobs past input_timeout now (the thread does it every second). */
void qd_receiving_sweep(qd_app *app);
void qd_receiving_stop(qd_receiving *rc);

#endif /* QD_RECEIVING_H */
