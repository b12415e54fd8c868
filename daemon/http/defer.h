/* defer.h -- a pool of waiter threads for request work that blocks (a statistics post waiting
 * for its group commit), so that the HTTP threads never wait for it: http.c suspends the
 * connection, a waiter runs the work and resumes it. Draining refuses new items and waits for
 * every item begun.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_DEFER_H
#define QD_DEFER_H

#include <stdbool.h>

#include "store.h"

typedef struct qd_defer qd_defer;

/* Starts `threads` waiter threads (they inherit the caller's signal mask). */
qd_status qd_defer_start(int threads, qd_defer **out, qd_err *err);

/* Counts one more item in flight; false (nothing counted) once stopping has begun. Each true
 * must be followed by exactly one qd_defer_run. */
bool qd_defer_begin(qd_defer *d);
/* Queues fn(arg) for a waiter; the item ends when fn returns. */
void qd_defer_run(qd_defer *d, void (*fn)(void *arg), void *arg);

/* Refuses new items (qd_defer_begin answers false from now on) and waits until every item begun
 * has ended. The pool stays usable that way until it is freed. */
void qd_defer_drain(qd_defer *d);
/* Drains, joins the threads and frees the pool. NULL is a no-op. */
void qd_defer_free(qd_defer *d);

#endif /* QD_DEFER_H */
