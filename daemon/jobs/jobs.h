/* jobs.h -- the job runner: --workers threads take queued jobs from the store in FIFO order and
 * run the checkpoint pipeline on them, publishing outputs (with SHA-256) and the report in one
 * store transaction; cancel of a running job; recovery of jobs a dead process left running; a
 * stop that requeues what was interrupted.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_JOBS_H
#define QD_JOBS_H

#include "app.h"

/* The threads of one job: quant_threads when it is not 0, else the online CPUs shared between
 * the workers (at least 1); never more than QUANT_MAX_THREADS, the pipeline's limit. */
int qd_jobs_threads(int quant_threads, long online_cpus, int workers);
/* Recovers interrupted jobs (their partial files removed), then starts the workers. */
qd_status qd_jobs_start(qd_app *app, qd_jobs **out, qd_err *err);
/* A job was queued: wake a worker. */
void qd_jobs_wake(qd_jobs *j);
/* Holds (true) or lets go of (false) the workers' claim lock: what is done in between (a job
 * inserted and registered) is seen whole by the next claim. */
void qd_jobs_hold(qd_jobs *j, bool hold);
/* Cancels job id: queued -> cancelled at once (QD_OK, *running false); running -> its pipeline
 * is told to stop (QD_OK, *running true; the worker records the end). QD_NOT_FOUND / QD_CONFLICT
 * from the store otherwise. */
qd_status qd_jobs_cancel(qd_jobs *j, int64_t id, bool *running, qd_err *err);
/* Stops taking jobs, interrupts the running ones (they go back to the queue, partial files
 * removed) and joins the workers. NULL is a no-op. */
void qd_jobs_stop(qd_jobs *j);

#endif /* QD_JOBS_H */
