/* h_stats.c -- POST, GET and DELETE /v1/models/{model}/stats: a training job's statistics post
 * (JSON, a safetensors body, or a Qwix quant_stats dump with ?mode=merge) parsed and validated
 * whole on the HTTP thread, then stored as one transaction by the stats writer while a waiter
 * thread waits for the commit (the answer comes after it); a post's Idempotency-Key (a retry of
 * an answered post is a replay: its first answer again, with Idempotent-Replayed: true, nothing
 * counted twice; the writer decides, the reader answers a known replay before parsing); the
 * quota's refusal (507); a model's statistics and calibrations read back; a reset.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "h_models.h"
#include "req_limits.h"

/* ---- POST -------------------------------------------------------------------------------------
 */

#define KEY_HEADER      "Idempotency-Key"
#define REPLAYED_HEADER "Idempotent-Replayed"

static bool has_type(const qd_req *r, const char *type)
{
    const char *ct = qd_req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    return ct && strncmp(ct, type, strlen(type)) == 0;
}

/* ?step=N: decimal digits, fewer than 19; -1 when absent. Replies 400 when malformed. */
static bool query_step(qd_req *r, int64_t *step)
{
    const char *s = qd_req_query(r, "step");
    *step = -1;
    if (!s) return true;
    size_t n = strlen(s);
    if (n == 0 || n > 18 || strspn(s, "0123456789") != n) {
        qd_reply_ec(r, QD_EC_INVALID, "step", "step must be an integer from 0 to 10^18 - 1");
        return false;
    }
    *step = strtoll(s, NULL, 10);
    return true;
}

/* ?mode=update (the default) or merge. Replies 400 otherwise. */
static bool query_merge(qd_req *r, bool *merge)
{
    const char *mode = qd_req_query(r, "mode");
    *merge = mode && strcmp(mode, "merge") == 0;
    if (!mode || *merge || strcmp(mode, "update") == 0) return true;
    qd_reply_ec(r, QD_EC_INVALID, "mode", "mode must be update (the default) or merge");
    return false;
}

/* The Content-Type fits the mode; replies 415 otherwise. */
static bool type_ok(qd_req *r, bool merge)
{
    const char *ct = qd_req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    bool binary = has_type(r, "application/octet-stream");
    if (binary && merge) {
        qd_reply_ec(r, QD_EC_UNSUPPORTED_MEDIA_TYPE, "mode",
                    "mode=merge takes a JSON quant_stats dump, not application/octet-stream");
        return false;
    }
    if (!binary && ct && !has_type(r, "application/json")) {
        qd_reply_ec(r, QD_EC_UNSUPPORTED_MEDIA_TYPE, NULL,
                    "a statistics post is application/json or application/octet-stream "
                    "(safetensors), not %s",
                    ct);
        return false;
    }
    return true;
}

/* The body, by its Content-Type (type_ok has passed), into post. Replies 400 (or 500) on
 * failure. */
static bool parse_body(qd_req *r, bool merge, qd_stat_post *post)
{
    bool binary = has_type(r, "application/octet-stream");
    qd_err err;
    qd_status st;
    if (binary)
        st = qd_stats_parse_safetensors(r->body, r->body_len, post, &err);
    else
        st = qd_stats_parse_json(r->body, r->body_len, merge, post, &err);
    if (st == QD_INVALID)
        qd_reply_ec(r, QD_EC_INVALID_STATS, "stats", "%s", err.message);
    else if (st != QD_OK)
        qd_reply_store_error(r, st, &err);
    return st == QD_OK;
}

/* The parsed statistics take the body's place in max_body_memory while the post waits for its
 * commit: a number of two bytes of JSON is eight as a double, a bf16 value four times its size,
 * so counting only the body let posts held by the writer's queue pass the budget. What the
 * request holds becomes the post's bytes in one step (no other request can take the body's share
 * in between), then the body goes (its fingerprint is taken; nothing reads it again). Replies
 * 503 (Retry-After) when the budget has not that much left now, 413 when it never could (the
 * post alone is more than max_body_memory), and returns false. */
static bool hold_parsed(qd_req *r, const qd_stat_post *post)
{
    uint64_t need = qd_stat_post_bytes(post);
    if (qd_budget_resize(r, need)) {
        qd_req_free_body(r);
        return true;
    }
    int64_t cap = r->app->cfg->max_body_memory;
    if (need <= (uint64_t)cap) {
        qd_reply_budget(r, need);
        return false;
    }
    char text[32];
    qd_config_size_text(cap, text, sizeof text);
    qd_reply_ec_limit(r, QD_EC_TOO_LARGE, "max_body_memory", 0,
                      "the statistics parsed from this body take %" PRIu64
                      " bytes in memory, more than max_body_memory (%s) allows any request: "
                      "post them in smaller parts",
                      need, text);
    return false;
}

/* The Idempotency-Key header: absent, or valid; replies 400 otherwise. */
static bool key_ok(qd_req *r)
{
    const char *key = qd_req_header(r, KEY_HEADER);
    if (!key || qd_stat_key_valid(key)) return true;
    qd_reply_ec(r, QD_EC_INVALID, KEY_HEADER,
                "an Idempotency-Key is 1-%d bytes of visible ASCII (0x21-0x7e: no spaces, no "
                "control characters)",
                QD_KEY_MAX);
    return false;
}

/* A parsed post on its way to the store, owned by the request (qd_req_defer). */
typedef struct post_job {
    qd_stat_post post;
    qd_stat_answer ans;
    qd_status st;
    qd_err err;
} post_job;

static void post_job_free(void *arg)
{
    post_job *job = arg;
    qd_stat_post_clear(&job->post);
    free(job);
}

/* On a waiter thread: the post, answered by the writer once its group committed. */
static void commit_post(qd_req *r, void *arg)
{
    post_job *job = arg;
    job->st = qd_stats_post_answer(r->app->stats, &job->post, &job->ans, &job->err);
}

/* 200 {"model","activations","step"}: a stored post's answer, or a replay's (the first answer
 * again, with Idempotent-Replayed: true). */
static enum MHD_Result reply_answer(qd_req *r, const qd_stat_answer *a)
{
    bool replayed = a->outcome == QD_POST_REPLAYED;
    if (replayed) qd_metrics_stats_replay(r->app->metrics);
    json_t *body =
        json_pack("{s:s,s:I,s:o}", "model", r->params[0], "activations", (json_int_t)a->activations,
                  "step", a->step >= 0 ? json_integer(a->step) : json_null());
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return qd_reply_text(r, MHD_HTTP_OK, text, "application/json",
                         replayed ? REPLAYED_HEADER : NULL, "true");
}

/* How the writer's refusals beyond the body are answered, by outcome. */
static const struct refusal {
    qd_ec ec;          /* QD_EC_INVALID (0): no refusal of its own */
    const char *field; /* qd_reply_ec's */
    const char *limit; /* or qd_reply_ec_limit's: the configuration key */
} refusals[] = {
    [QD_POST_KEY_CONFLICT] = {QD_EC_IDEMPOTENCY_CONFLICT, KEY_HEADER, NULL},
    [QD_POST_OVER_QUOTA] = {QD_EC_QUOTA_EXCEEDED, NULL, "stats_quota"},
};

/* The handler's second call, after commit_post. */
static enum MHD_Result reply_posted(qd_req *r, const post_job *job)
{
    if (job->st == QD_OK) return reply_answer(r, &job->ans);
    const char *msg = job->err.message;
    size_t k = (size_t)job->ans.outcome;
    const struct refusal *f = k < sizeof refusals / sizeof refusals[0] ? &refusals[k] : NULL;
    if (f && f->limit) return qd_reply_ec_limit(r, f->ec, f->limit, 0, "%s", msg);
    if (f && f->ec != QD_EC_INVALID) return qd_reply_ec(r, f->ec, f->field, "%s", msg);
    if (job->st == QD_INVALID) /* does not fit what is stored: kind, shape or set of keys */
        return qd_reply_ec(r, QD_EC_CONFLICT, "stats", "%s", msg);
    return qd_reply_store_error(r, job->st, &job->err);
}

/* Is this a retry whose key the reader already holds with this fingerprint? Then it is answered
 * at once from *ans, its body never parsed. Anything else (a key not known yet, another
 * fingerprint, a read failure) goes on to the writer, which decides. */
static bool known_replay(qd_req *r, const char *key, const uint8_t *fp, qd_stat_answer *ans)
{
    qd_err err;
    return qd_stats_key_peek(r->app->stats, r->params[0], key, fp, ans, &err) == QD_OK &&
           ans->outcome == QD_POST_REPLAYED;
}

/* The key (and the request's fingerprint) into the parsed post. */
static bool set_key(qd_stat_post *post, const char *key, const uint8_t *fp)
{
    if (!key) return true;
    memcpy(post->fingerprint, fp, QD_FINGERPRINT_LEN);
    return (post->key = strdup(key)) != NULL;
}

/* The step of the query (-1: none) into the parsed post; false when both give one. */
static bool set_step(qd_stat_post *post, int64_t query_step)
{
    if (query_step < 0) return true;
    if (post->step >= 0) return false;
    post->step = query_step;
    return true;
}

/* POST /v1/models/{model}/stats, before the body: the model name, the query, the Content-Type
 * and the Idempotency-Key are checked first, so a post that can only fail does not cost its
 * body. */
enum MHD_Result qd_h_stats_precheck(qd_req *r)
{
    bool merge;
    int64_t step;
    if (qd_model_param(r) && query_merge(r, &merge) && query_step(r, &step) && type_ok(r, merge))
        key_ok(r);
    return MHD_YES;
}

/* POST /v1/models/{model}/stats[?mode=merge][&step=N]: parsed and checked on the HTTP thread,
 * stored from a waiter thread (the connection suspended until the commit). The precheck has
 * passed. */
enum MHD_Result qd_h_stats_post(qd_req *r)
{
    if (r->deferred) return reply_posted(r, r->defer_arg);
    const char *model = r->params[0];
    bool merge;
    int64_t step;
    if (!query_merge(r, &merge) || !query_step(r, &step)) return MHD_YES;
    const char *key = qd_req_header(r, KEY_HEADER); /* the precheck found it valid */
    uint8_t fp[QD_FINGERPRINT_LEN] = {0};
    qd_stat_answer early;
    if (key) {
        qd_stats_fingerprint(merge, step, has_type(r, "application/octet-stream"), r->body,
                             r->body_len, fp);
        if (known_replay(r, key, fp, &early)) return reply_answer(r, &early);
    }
    post_job *job = calloc(1, sizeof *job);
    if (!job) return MHD_NO;
    if (!parse_body(r, merge, &job->post)) {
        free(job); /* the parser left nothing in the post */
        return MHD_YES;
    }
    if (!set_step(&job->post, step)) {
        post_job_free(job);
        return qd_reply_ec(r, QD_EC_INVALID, "step",
                           "the step comes both in the query and in the body");
    }
    if (!(job->post.model = strdup(model)) || !set_key(&job->post, key, fp)) {
        post_job_free(job);
        return MHD_NO;
    }
    if (!hold_parsed(r, &job->post)) {
        post_job_free(job);
        return MHD_YES;
    }
    return qd_req_defer(r, commit_post, job, post_job_free);
}

/* ---- GET and DELETE ---------------------------------------------------------------------------
 */

static const char *averaging_name(qd_averaging a)
{
    return a == QD_AVG_EMA ? "ema" : "simple";
}

/* One activation: its counters, sums and calibration as nested lists; mean_sq (SPEC section 9)
 * as a list of n. kind "none" (mean_sq alone) has no range statistic: its shape is mean_sq's,
 * [n], as libquant-checkpoint's statistics reader (quant_stats_parse) takes it. */
static json_t *activation_json(const qd_stat_avg *a)
{
    bool minmax = a->kind == QD_STAT_MINMAX, range = a->kind != QD_STAT_NONE;
    int64_t sq_shape[1] = {a->n_sq};
    json_t *o = json_pack(
        "{s:s,s:I,s:o,s:o,s:b}", "kind", qd_stat_kind_name(a->kind), "count", (json_int_t)a->count,
        "shape", range ? qd_json_shape(a->rank, a->shape) : qd_json_shape(1, sq_shape),
        "updated_at", qd_json_time(a->updated_ms), "bootstrapping", a->bootstrapping);
    if (!o) return NULL;
    if (range) {
        json_object_set_new(o, minmax ? "sum_of_min" : "sum_of_absmax",
                            qd_json_doubles(a->sum_a, a->rank, a->shape));
        json_object_set_new(o, minmax ? "min" : "absmax", qd_json_doubles(a->a, a->rank, a->shape));
    }
    if (minmax) {
        json_object_set_new(o, "sum_of_max", qd_json_doubles(a->sum_b, a->rank, a->shape));
        json_object_set_new(o, "max", qd_json_doubles(a->b, a->rank, a->shape));
    }
    if (a->n_sq > 0) {
        json_object_set_new(o, "sum_of_mean_sq", qd_json_doubles(a->sum_sq, 1, sq_shape));
        json_object_set_new(o, "mean_sq", qd_json_doubles(a->sq, 1, sq_shape));
    }
    return o;
}

/* GET /v1/models/{model}/stats[?name=REGEX] */
enum MHD_Result qd_h_stats_get(qd_req *r)
{
    const char *model = qd_model_param(r);
    if (!model) return MHD_YES;
    const char *regex = qd_req_query(r, "name");
    qd_stat_avg *avg = NULL;
    size_t n = 0;
    qd_model_conf c;
    qd_err err;
    qd_status st = qd_stats_read(r->app->stats, model, regex, &avg, &n, &err);
    if (st == QD_INVALID) return qd_reply_ec(r, QD_EC_INVALID, "name", "%s", err.message);
    if (st == QD_OK) st = qd_stats_model_conf(r->app->stats, model, &c, &err);
    if (st != QD_OK) {
        qd_stat_avgs_free(avg, n);
        return qd_reply_store_error(r, st, &err);
    }
    json_t *stats = json_object();
    for (size_t i = 0; stats && i < n; i++)
        json_object_set_new(stats, avg[i].name, activation_json(&avg[i]));
    qd_stat_avgs_free(avg, n);
    return qd_reply_json(r, MHD_HTTP_OK,
                         json_pack("{s:s,s:s,s:f,s:I,s:o}", "model", model, "averaging",
                                   averaging_name(c.averaging), "ema_constant", c.ema_constant,
                                   "bootstrap_steps", (json_int_t)c.bootstrap_steps, "stats",
                                   stats));
}

/* DELETE /v1/models/{model}/stats: the statistics go, the settings stay. */
enum MHD_Result qd_h_stats_delete(qd_req *r)
{
    const char *model = qd_model_param(r);
    if (!model) return MHD_YES;
    qd_err err;
    qd_status st = qd_stats_reset(r->app->stats, model, &err);
    if (st != QD_OK) return qd_reply_store_error(r, st, &err);
    return qd_reply_empty(r, MHD_HTTP_NO_CONTENT);
}
