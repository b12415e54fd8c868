/* janitor.h -- quantd's housekeeping thread (janitor.c): retention of finished jobs' outputs
 * and the hourly warning of a server open to everyone.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_JANITOR_H
#define QD_JANITOR_H

#include "app.h"

typedef struct qd_janitor qd_janitor;

/* Starts the thread: a first pass at once (outputs past retention, directories of jobs whose
 * outputs were removed), then one every minute, or every half of job_retention when that is
 * shorter, and whenever woken. `insecure`: a non-loopback server started --insecure, which logs
 * a warning whenever it has no token (open to all): at once, and every hour it stays so. */
qd_status qd_janitor_start(qd_app *app, bool insecure, qd_janitor **out, qd_err *err);
/* Asks for a pass soon (a job has just succeeded: keep_outputs may now drop an older one). */
void qd_janitor_wake(qd_janitor *j); /* NULL is a no-op */
/* Stops the thread and waits for it. */
void qd_janitor_stop(qd_janitor *j); /* NULL is a no-op */
/* One retention pass on the calling thread; returns the number of jobs whose outputs went. */
size_t qd_janitor_sweep(qd_app *app);

#endif /* QD_JANITOR_H */
