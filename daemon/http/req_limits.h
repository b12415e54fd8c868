/* req_limits.h -- the limits a request is held to beyond its own body limit (req_limits.c): the
 * in-memory body budget shared by all requests, and the data directory's free-space reserve.
 * Each names its configuration key when it refuses (qd_reply_ec_limit).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_REQ_LIMITS_H
#define QD_REQ_LIMITS_H

#include <stdbool.h>
#include <stdint.h>

#include "http.h"

/* Takes n bytes of max_body_memory for r (r->budget grows by n); false when that would pass
 * the budget (nothing taken). */
bool qd_budget_take(qd_req *r, uint64_t n);
/* Makes what r holds of max_body_memory n bytes in one step (what it held counts as free for
 * it, so no other request can take that in between); false when n would pass the budget
 * (nothing changed). */
bool qd_budget_resize(qd_req *r, uint64_t n);
/* Gives back everything r holds (at the request's end). */
void qd_budget_release(qd_req *r);
/* Bytes of bodies held now, all requests together (tests, metrics). */
uint64_t qd_budget_used(const qd_app *app);
/* Replies 503 + Retry-After naming max_body_memory; returns MHD_YES. */
enum MHD_Result qd_reply_budget(qd_req *r, uint64_t wanted);

/* Whether `incoming` more bytes fit in the data directory above min_free_disk; replies 507
 * naming min_free_disk and returns false when not. */
bool qd_limit_disk(qd_req *r, uint64_t incoming);
/* The same without a request: false and a message in why (for jobs and uploads mid-way). */
bool qd_disk_room(const qd_app *app, uint64_t incoming, char *why, size_t len);

#endif /* QD_REQ_LIMITS_H */
