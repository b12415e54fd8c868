/* inputs.h -- the files of checkpoint jobs while they arrive (inputs.c): per job, per listed
 * file, the bytes on disk so far, whether the file is whole (every byte in: the run may read it)
 * and complete (synced too: received), under one mutex and condvar; the PUT handler reports
 * progress after each write, the pipeline waits through
 * qd_inputs_wait (its quant_input_wait_fn), and a failure (a cut upload, a bad header, the
 * input_timeout, a cancel) ends every wait and every write of the job at once. In memory only:
 * a job still receiving when quantd stops is failed at the next start (receiving.c).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_INPUTS_H
#define QD_INPUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct qd_inputs qd_inputs;         /* every receiving job */
typedef struct qd_job_inputs qd_job_inputs; /* one job's files (reference counted) */

qd_status qd_inputs_new(qd_inputs **out, qd_err *err);
/* Frees the registry; entries still referenced are freed by their last release. */
void qd_inputs_free(qd_inputs *in);

/* Registers job id with its n listed file names (copied) and the wall-clock deadline (unix ms)
 * by which they must all be complete. */
qd_status qd_inputs_add(qd_inputs *in, int64_t id, const char *const *names, size_t n,
                        int64_t deadline_ms, qd_err *err);
/* Job id's entry with a reference taken (qd_inputs_release), or NULL when it has none. */
qd_job_inputs *qd_inputs_get(qd_inputs *in, int64_t id);
void qd_inputs_release(qd_job_inputs *ji);
/* Unregisters job id (its entry lives on while referenced). */
void qd_inputs_remove(qd_inputs *in, int64_t id);

/* A PUT of `name` begins: QD_OK with its index in *idx; QD_NOT_FOUND when the job did not list
 * it; QD_CONFLICT when it was sent already (or is being sent) or the job's inputs failed. */
qd_status qd_inputs_begin(qd_job_inputs *ji, const char *name, size_t *idx, qd_err *err);
/* bytes of file idx are on disk now; wakes the waiters. */
void qd_inputs_progress(qd_job_inputs *ji, size_t idx, uint64_t bytes);
/* Every byte of file idx is in and its size set: waits for the whole file return (the run need
 * not wait for the fsync that qd_inputs_complete follows). */
void qd_inputs_whole(qd_job_inputs *ji, size_t idx);
/* File idx is complete (and synced); true when every listed file is. */
bool qd_inputs_complete(qd_job_inputs *ji, size_t idx);
/* The job's inputs failed with why (the first reason is kept): every wait returns false, every
 * later write is refused. True when this call is the one that failed it. */
bool qd_inputs_fail(qd_job_inputs *ji, const char *why);
/* Whether the inputs failed; the reason to why. */
bool qd_inputs_failed(qd_job_inputs *ji, char *why, size_t len);
/* The names not yet complete, comma-separated, into buf (cut with "..." when long); their
 * number. */
size_t qd_inputs_missing(qd_job_inputs *ji, char *buf, size_t len);
/* The ids (malloc'd, *n of them) of the jobs past their deadline with a file missing (and not
 * failed already). */
qd_status qd_inputs_expired(qd_inputs *in, int64_t now_ms, int64_t **ids, size_t *n, qd_err *err);

/* quant_input_wait_fn over a job's entry (user: the qd_job_inputs): blocks until bytes [0, end)
 * of `name` are on disk (QUANT_INPUT_WHOLE: the whole file), false with a reason when the
 * inputs failed or the deadline passed first. */
bool qd_inputs_wait(void *user, const char *name, uint64_t end, char *why, size_t why_len);

#endif /* QD_INPUTS_H */
