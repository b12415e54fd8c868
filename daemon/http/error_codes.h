/* error_codes.h -- every error the API answers, in one table (error_codes.c): the name a handler
 * uses, the stable word clients read in {"error": {"code": WORD}}, the HTTP status that always
 * comes with it, and what it means. Handlers name a code; they never choose a status. The
 * OpenAPI document's ErrorCode lists the same words and statuses (the openapi suite keeps them
 * equal). One word has two rows, as the API has always answered it: not_ready is 409 for a job
 * that has not succeeded and 503 for a daemon that is not ready.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_ERROR_CODES_H
#define QD_ERROR_CODES_H

#include <stddef.h>

#include "status.h"

typedef enum qd_ec {
    QD_EC_INVALID,                /* 400 a query argument, header or field is wrong */
    QD_EC_BAD_JSON,               /* 400 the body is not the JSON object the route takes */
    QD_EC_EMPTY_BODY,             /* 400 an upload without a byte */
    QD_EC_LENGTH_MISMATCH,        /* 400 an input's length is not what its header implies */
    QD_EC_INVALID_STATS,          /* 400 a malformed statistics post */
    QD_EC_UNAUTHORIZED,           /* 401 no valid bearer token */
    QD_EC_FORBIDDEN,              /* 403 the token's role, or a path outside the roots */
    QD_EC_NOT_FOUND,              /* 404 no such route, job, rule set, model or output */
    QD_EC_UNKNOWN_INPUT,          /* 404 a file the checkpoint job did not list */
    QD_EC_CONFLICT,               /* 409 the resource is not in a state for the change */
    QD_EC_IDEMPOTENCY_CONFLICT,   /* 409 an Idempotency-Key reused for another body */
    QD_EC_JOB_NOT_READY,          /* 409 not_ready: the job has not succeeded */
    QD_EC_INPUT_ALREADY_SENT,     /* 409 a file of the job sent (or being sent) already */
    QD_EC_NOT_RECEIVING,          /* 409 the job takes no more files */
    QD_EC_SEVERAL_OUTPUTS,        /* 409 /output of a job with several shards */
    QD_EC_OUTPUTS_REMOVED,        /* 410 retention removed the job's outputs */
    QD_EC_TOO_LARGE,              /* 413 a body over the route's limit */
    QD_EC_UNSUPPORTED_MEDIA_TYPE, /* 415 a Content-Type the route does not take */
    QD_EC_INVALID_RULES,          /* 422 a rule set the parser refuses */
    QD_EC_UNKNOWN_RULESET,        /* 422 no rule set by that name */
    QD_EC_BAD_SAFETENSORS,        /* 422 an upload that is not a valid safetensors file */
    QD_EC_BAD_SOURCE,             /* 422 a server-side source that cannot be read */
    QD_EC_INVALID_JOB,            /* 422 a rule the checkpoint or layout cannot take */
    QD_EC_BAD_CHECKPOINT,         /* 422 a malformed checkpoint (header, index) */
    QD_EC_UNKNOWN_STATS_MODEL,    /* 422 no statistics for the job's stats_model */
    QD_EC_INVALID_SCALES,         /* 422 static scales cannot be made from the statistics */
    QD_EC_QUEUE_FULL,             /* 429 max_queued_jobs reached */
    QD_EC_INTERNAL,               /* 500 the server failed */
    QD_EC_BUSY,                   /* 503 max_body_memory reached, retry */
    QD_EC_UNAVAILABLE,            /* 503 a part of the server cannot answer now */
    QD_EC_NOT_READY,              /* 503 not_ready: /readyz, the daemon cannot serve */
    QD_EC_INSUFFICIENT_STORAGE,   /* 507 min_free_disk would be crossed */
    QD_EC_QUOTA_EXCEEDED,         /* 507 stats_quota reached */
    QD_EC_COUNT
} qd_ec;

typedef struct qd_ec_info {
    const char *word;  /* the API's code */
    unsigned status;   /* the HTTP status */
    const char *means; /* one line, as the OpenAPI document says it */
} qd_ec_info;

/* The row of `ec`; an out-of-range value gets the row of QD_EC_INTERNAL. */
const qd_ec_info *qd_ec_get(qd_ec ec);

/* The API error a failed daemon call (qd_status) becomes when nothing more specific applies:
 * not found 404, conflict 409, invalid 400, anything else internal 500. */
qd_ec qd_ec_of_status(qd_status st);

#endif /* QD_ERROR_CODES_H */
