/* app_run.h -- bringing the daemon's parts up and down in order, for main.c and for the request
 * fuzzer (tests/fuzz/fuzz_http.c), which runs the whole daemon in its own process.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_APP_RUN_H
#define QD_APP_RUN_H

#include <stdbool.h>

#include "app.h"
#include "http.h"

/* With app->cfg and app->store set: TLS credentials (when configured), the tokens and the
 * exposure rule, metrics, the statistics store, the data directory, the job workers, the
 * housekeeping thread, then HTTP on *port. On failure *what says which part failed (for the
 * log), err why, and whatever had started is stopped again; qd_app_close() frees the rest. */
qd_status qd_app_start(qd_app *app, qd_http **http, int *port, const char **what, qd_err *err);
/* Stops accepting, requeues running jobs, stops HTTP and housekeeping (in that order). */
void qd_app_stop(qd_app *app, qd_http *http);
/* Closes and frees everything in app but cfg (the statistics' last queued posts commit first);
 * safe on a partly started or never started app. */
void qd_app_close(qd_app *app);

#endif /* QD_APP_RUN_H */
