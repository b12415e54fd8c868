/* h_models.h -- what the model, statistics and scales handlers (h_models.c, h_stats.c,
 * h_scales.c) share: the {model} path parameter checked, arrays written as nested JSON lists,
 * and a model's JSON as GET /v1/models lists it.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_H_MODELS_H
#define QD_H_MODELS_H

#include "handlers.h"
#include "stats.h"

/* The {model} path parameter (r->params[0]) when it is a valid name (the rule-set rule: 1-64 of
 * [A-Za-z0-9._-], not starting with '.'); otherwise replies 400 and returns NULL. */
const char *qd_model_param(qd_req *r);

/* n = product(shape) values as nested JSON lists (a bare number for rank 0); a value that is
 * not finite becomes null. NULL on allocation failure. */
json_t *qd_json_doubles(const double *v, int rank, const int64_t *shape);
json_t *qd_json_floats(const float *v, int rank, const int64_t *shape);
json_t *qd_json_int32s(const int32_t *v, int rank, const int64_t *shape);
json_t *qd_json_shape(int rank, const int64_t *shape);

/* ISO-8601 text of unix ms, or null for 0. */
json_t *qd_json_time(int64_t ms);

#endif /* QD_H_MODELS_H */
