/* h_models.c -- GET /v1/models, PUT and GET /v1/models/{model} (a model's averaging settings
 * and counters), and the helpers every /v1/models handler uses (h_models.h): the model name
 * check and arrays as nested JSON lists.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "h_models.h"
#include "timefmt.h"

/* ---- shared helpers ---------------------------------------------------------------------------
 */

const char *qd_model_param(qd_req *r)
{
    const char *s = r->params[0];
    if (qd_valid_name(s)) return s;
    qd_reply_ec(r, QD_EC_INVALID, "model",
                "model names are 1-64 characters of A-Z a-z 0-9 . _ - (not starting with '.')");
    return NULL;
}

typedef json_t *(*leaf_fn)(const void *values, int64_t i);

static json_t *leaf_double(const void *values, int64_t i)
{
    double v = ((const double *)values)[i];
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *leaf_float(const void *values, int64_t i)
{
    float v = ((const float *)values)[i];
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *leaf_int32(const void *values, int64_t i)
{
    return json_integer(((const int32_t *)values)[i]);
}

/* The values from *at on, at depth (rank levels of lists below the top). */
static json_t *nested(const void *values, leaf_fn leaf, int rank, const int64_t *shape, int depth,
                      int64_t *at)
{
    if (depth == rank) return leaf(values, (*at)++);
    json_t *list = json_array();
    for (int64_t i = 0; list && i < shape[depth]; i++) {
        if (json_array_append_new(list, nested(values, leaf, rank, shape, depth + 1, at)) != 0) {
            json_decref(list);
            list = NULL;
        }
    }
    return list;
}

json_t *qd_json_doubles(const double *v, int rank, const int64_t *shape)
{
    int64_t at = 0;
    return nested(v, leaf_double, rank, shape, 0, &at);
}

json_t *qd_json_floats(const float *v, int rank, const int64_t *shape)
{
    int64_t at = 0;
    return nested(v, leaf_float, rank, shape, 0, &at);
}

json_t *qd_json_int32s(const int32_t *v, int rank, const int64_t *shape)
{
    int64_t at = 0;
    return nested(v, leaf_int32, rank, shape, 0, &at);
}

json_t *qd_json_shape(int rank, const int64_t *shape)
{
    json_t *list = json_array();
    for (int i = 0; list && i < rank; i++) json_array_append_new(list, json_integer(shape[i]));
    return list;
}

json_t *qd_json_time(int64_t ms)
{
    char buf[QD_TIME_LEN];
    return ms ? json_string(qd_iso8601(ms, buf)) : json_null();
}

/* ---- the routes -------------------------------------------------------------------------------
 */

/* The model's entry of qd_stats_models (a new reference), QD_NOT_FOUND when there is none. */
static qd_status model_json(qd_app *app, const char *name, json_t **out, qd_err *err)
{
    json_t *list = NULL;
    qd_status st = qd_stats_models(app->stats, &list, err);
    if (st != QD_OK) return st;
    size_t i;
    json_t *m;
    *out = NULL;
    json_array_foreach(list, i, m)
    {
        const char *n = json_string_value(json_object_get(m, "name"));
        if (n && strcmp(n, name) == 0) *out = json_incref(m);
    }
    json_decref(list);
    return *out ? QD_OK : qd_fail(err, QD_NOT_FOUND, "no model named '%s'", name);
}

/* GET /v1/models */
enum MHD_Result qd_h_model_list(qd_req *r)
{
    json_t *list = NULL;
    qd_err err;
    qd_status st = qd_stats_models(r->app->stats, &list, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    return qd_reply_json(r, MHD_HTTP_OK, json_pack("{s:o}", "models", list));
}

/* GET /v1/models/{model} */
enum MHD_Result qd_h_model_get(qd_req *r)
{
    const char *name = qd_model_param(r);
    if (!name) return MHD_YES;
    json_t *m = NULL;
    qd_err err;
    qd_status st = model_json(r->app, name, &m, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    return qd_reply_json(r, MHD_HTTP_OK, m);
}

/* One field of a PUT body into c: NULL, or what is wrong with it. */
static const char *conf_field(const char *key, json_t *v, qd_model_conf *c)
{
    if (strcmp(key, "averaging") == 0) {
        const char *s = json_string_value(v);
        if (!s || (strcmp(s, "simple") != 0 && strcmp(s, "ema") != 0))
            return "must be \"simple\" or \"ema\"";
        c->averaging = strcmp(s, "ema") == 0 ? QD_AVG_EMA : QD_AVG_SIMPLE;
    } else if (strcmp(key, "ema_constant") == 0) {
        double x = json_number_value(v);
        if (!json_is_number(v) || !(x > 0 && x <= 1)) return "must be a number in (0, 1]";
        c->ema_constant = x;
    } else if (strcmp(key, "bootstrap_steps") == 0) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) return "must be an integer >= 0";
        c->bootstrap_steps = json_integer_value(v);
    } else {
        return "unknown field (a model takes averaging, ema_constant and bootstrap_steps)";
    }
    return NULL;
}

/* PUT /v1/models/{model}: the settings given, the defaults for the rest (also for no body). */
enum MHD_Result qd_h_model_put(qd_req *r)
{
    const char *name = qd_model_param(r);
    if (!name) return MHD_YES;
    json_t *doc = r->body_len == 0 ? json_object() : qd_req_json(r); /* no body: the defaults */
    if (!doc) return r->replied ? MHD_YES : MHD_NO;
    qd_model_conf c;
    qd_model_conf_defaults(&c);
    const char *key;
    json_t *v;
    json_object_foreach(doc, key, v)
    {
        const char *why = conf_field(key, v, &c);
        if (why) {
            enum MHD_Result ret = qd_reply_ec(r, QD_EC_INVALID, key, "%s: %s", key, why);
            json_decref(doc); /* after the reply: key lives in doc */
            return ret;
        }
    }
    json_decref(doc);
    bool created = false;
    qd_err err;
    json_t *m = NULL;
    qd_status st = qd_stats_put_model(r->app->stats, name, &c, &created, &err);
    if (st == QD_OK) st = model_json(r->app, name, &m, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    return qd_reply_json(r, created ? MHD_HTTP_CREATED : MHD_HTTP_OK, m);
}
