/* error_codes.c -- the table of API errors (error_codes.h), indexed by qd_ec.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "error_codes.h"

static const qd_ec_info table[QD_EC_COUNT] = {
    [QD_EC_INVALID] = {"invalid", 400, "a query argument, header or field is wrong"},
    [QD_EC_BAD_JSON] = {"bad_json", 400, "the body is not the JSON object the route takes"},
    [QD_EC_EMPTY_BODY] = {"empty_body", 400, "an upload without a byte"},
    [QD_EC_LENGTH_MISMATCH] = {"length_mismatch", 400,
                               "an input's length is not the size its header implies"},
    [QD_EC_INVALID_STATS] = {"invalid_stats", 400, "a statistics post breaks SPEC section 8 or 9"},
    [QD_EC_UNAUTHORIZED] = {"unauthorized", 401, "no valid bearer token"},
    [QD_EC_FORBIDDEN] = {"forbidden", 403, "the token's role, or a path outside the roots"},
    [QD_EC_NOT_FOUND] = {"not_found", 404, "no such route, job, rule set, model or output"},
    [QD_EC_UNKNOWN_INPUT] = {"unknown_input", 404, "a file the checkpoint job did not list"},
    [QD_EC_CONFLICT] = {"conflict", 409, "the resource is not in a state for the change"},
    [QD_EC_IDEMPOTENCY_CONFLICT] = {"idempotency_conflict", 409,
                                    "an Idempotency-Key reused for another body"},
    [QD_EC_JOB_NOT_READY] = {"not_ready", 409, "the job has not succeeded"},
    [QD_EC_INPUT_ALREADY_SENT] = {"input_already_sent", 409,
                                  "a file of the job was sent (or is being sent) already"},
    [QD_EC_NOT_RECEIVING] = {"not_receiving", 409, "the job takes no more files"},
    [QD_EC_SEVERAL_OUTPUTS] = {"several_outputs", 409, "/output of a job with several shards"},
    [QD_EC_OUTPUTS_REMOVED] = {"outputs_removed", 410, "retention removed the job's outputs"},
    [QD_EC_TOO_LARGE] = {"too_large", 413,
                         "a body over the route's limit, or a statistics post whose parsed "
                         "values pass max_body_memory"},
    [QD_EC_UNSUPPORTED_MEDIA_TYPE] = {"unsupported_media_type", 415,
                                      "a Content-Type the route does not take"},
    [QD_EC_INVALID_RULES] = {"invalid_rules", 422, "a rule set the parser refuses"},
    [QD_EC_UNKNOWN_RULESET] = {"unknown_ruleset", 422, "no rule set by that name"},
    [QD_EC_BAD_SAFETENSORS] = {"bad_safetensors", 422, "an upload that is not valid safetensors"},
    [QD_EC_BAD_SOURCE] = {"bad_source", 422, "a server-side source that cannot be read"},
    [QD_EC_INVALID_JOB] = {"invalid_job", 422,
                           "a rule the checkpoint or layout cannot take, or nothing to quantize"},
    [QD_EC_BAD_CHECKPOINT] = {"bad_checkpoint", 422, "a malformed checkpoint (header, index)"},
    [QD_EC_UNKNOWN_STATS_MODEL] = {"unknown_stats_model", 422,
                                   "no statistics for the job's stats_model"},
    [QD_EC_INVALID_SCALES] = {"invalid_scales", 422,
                              "static scales cannot be made from the statistics"},
    [QD_EC_QUEUE_FULL] = {"queue_full", 429, "max_queued_jobs reached"},
    [QD_EC_INTERNAL] = {"internal", 500, "the server failed"},
    [QD_EC_BUSY] = {"busy", 503, "max_body_memory reached; retry"},
    [QD_EC_UNAVAILABLE] = {"unavailable", 503, "a part of the server cannot answer now"},
    [QD_EC_NOT_READY] = {"not_ready", 503, "the daemon cannot serve (/readyz)"},
    [QD_EC_INSUFFICIENT_STORAGE] = {"insufficient_storage", 507, "min_free_disk would be crossed"},
    [QD_EC_QUOTA_EXCEEDED] = {"quota_exceeded", 507, "stats_quota reached"},
};

const qd_ec_info *qd_ec_get(qd_ec ec)
{
    return (unsigned)ec < QD_EC_COUNT ? &table[ec] : &table[QD_EC_INTERNAL];
}

qd_ec qd_ec_of_status(qd_status st)
{
    switch (st) {
    case QD_NOT_FOUND:
        return QD_EC_NOT_FOUND;
    case QD_CONFLICT:
        return QD_EC_CONFLICT;
    case QD_INVALID:
        return QD_EC_INVALID;
    default:
        return QD_EC_INTERNAL;
    }
}
