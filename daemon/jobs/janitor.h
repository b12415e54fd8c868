/* janitor.h -- quantd's housekeeping (janitor.c): the start-up sweep of the data directory, and
 * the thread for retention of finished jobs' outputs and the hourly warning of a server open to
 * everyone.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_JANITOR_H
#define QD_JANITOR_H

#include "app.h"

typedef struct qd_janitor qd_janitor;

/* At start-up, after the recovery of interrupted jobs (qd_jobs_start) and before the HTTP server
 * accepts requests: removes every entry of DATA/uploads and DATA/jobs that no job owns, or whose
 * job's state says it should be gone (the inputs of a finished job; the outputs directory of a
 * failed or cancelled job, or of a succeeded one whose outputs retention removed), one log line
 * each (the entry and why). Entries of live jobs (queued, running, receiving) stay: the workers
 * may be using them. A symbolic link is removed itself, never followed; a name quantd never gives
 * is logged and left alone. Nothing is removed when the jobs cannot be read. Returns the number
 * of entries removed. */
size_t qd_janitor_startup_sweep(qd_app *app);
/* Starts the thread: a first pass at once (outputs past retention), then one every minute, or every
 * half of job_retention when that is shorter, and whenever woken. `insecure`: a non-loopback server
 * started --insecure, which logs a warning whenever it has no token (open to all): at once, and
 * every hour it stays so. */
qd_status qd_janitor_start(qd_app *app, bool insecure, qd_janitor **out, qd_err *err);
/* Asks for a pass soon (a job has just succeeded: keep_outputs may now drop an older one). */
void qd_janitor_wake(qd_janitor *j); /* NULL is a no-op */
/* Stops the thread and waits for it. */
void qd_janitor_stop(qd_janitor *j); /* NULL is a no-op */
/* One retention pass on the calling thread; returns the number of jobs whose outputs went. */
size_t qd_janitor_sweep(qd_app *app);

#endif /* QD_JANITOR_H */
