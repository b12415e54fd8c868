/* stats_file.c -- quant_stats_parse() / quant_stats_load(): the calibration statistics a front end
 * reads from a file, in either of the two JSON forms of quant_srq.h (quantd's GET
 * /v1/models/{m}/stats, or a Qwix quant_stats dump, flat or nested), into averaged calibrations
 * (quant_act_stat) sorted by name. Every error names the source, the activation and the key.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"
#include "quant_srq.h"

/* Integers a count may be: exact in a double. */
#define COUNT_MAX 9007199254740992.0

struct quant_stats {
    size_t n, cap;
    quant_act_stat *acts; /* name, a, b owned */
};

/* What one activation's object may hold: statistics (arrays), the count, and what quantd's GET
 * adds around them. */
typedef enum key_role {
    K_ABSMAX = 0,
    K_MIN,
    K_MAX,
    K_MEAN_SQ,
    K_SUM_ABSMAX,
    K_SUM_MIN,
    K_SUM_MAX,
    K_SUM_MEAN_SQ,
    K_VALUES, /* the keys above hold values */
    K_COUNT = K_VALUES,
    K_SHAPE,
    K_KIND,
    K_UPDATED,
    K_BOOTSTRAPPING,
    K_ROLES
} key_role;

static const char *const key_names[K_ROLES] = {
    "absmax",         "min",   "max",   "mean_sq", "sum_of_absmax", "sum_of_min",   "sum_of_max",
    "sum_of_mean_sq", "count", "shape", "kind",    "updated_at",    "bootstrapping"};

/* The members of quantd's document around "stats". */
static const char *const wrapper_keys[] = {"model", "averaging", "ema_constant", "bootstrap_steps",
                                           "step"};

/* One statistic's values as read. */
typedef struct value {
    bool present;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    int64_t n;
    double *v;
} value;

typedef struct reader {
    const char *src;
    quant_ck_error *err;
    quant_stats *s;
    const char *act; /* the activation being read, or NULL */
    const char *key; /* its key being read, or NULL */
} reader;

static quant_ck_status fail(const reader *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static quant_ck_status fail(const reader *r, const char *fmt, ...)
{
    char msg[QUANT_CK_MESSAGE_MAX], act[CK_SHORT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->act && r->key)
        return quant_ck_fail(r->err, QUANT_CK_ERR_FORMAT, "%s: activation '%s': key \"%s\": %s",
                             r->src, ck_short_text(r->act, act, sizeof act), r->key, msg);
    if (r->act)
        return quant_ck_fail(r->err, QUANT_CK_ERR_FORMAT, "%s: activation '%s': %s", r->src,
                             ck_short_text(r->act, act, sizeof act), msg);
    return quant_ck_fail(r->err, QUANT_CK_ERR_FORMAT, "%s: %s", r->src, msg);
}

static quant_ck_status nomem(const reader *r)
{
    return quant_ck_fail(r->err, QUANT_CK_ERR_NOMEM, "out of memory");
}

/* Like the rule parser's ck_json_type_name, but the file is parsed with every number as a real
 * (JSON_DECODE_INT_AS_REAL), so a number is "a number" whichever way it was written. */
static const char *kind_of(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "a list";
    case JSON_STRING:
        return "a string";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    default:
        return "a number";
    }
}

/* "[1, 0]": the index of an element at `depth`. */
static void index_text(const int64_t *idx, int depth, char *buf, size_t cap)
{
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < depth && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)idx[i]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* ---- a value: a number or nested lists of numbers ------------------------------------------- */

/* The shape, from the first element at each depth. */
static quant_ck_status value_shape(const reader *r, const json_t *j, value *v)
{
    v->rank = 0;
    v->n = 1;
    for (; json_is_array(j); j = json_array_get(j, 0)) {
        if (v->rank == QUANT_MAX_RANK)
            return fail(r, "has more than %d dimensions", QUANT_MAX_RANK);
        int64_t len = (int64_t)json_array_size(j);
        if (len == 0) return fail(r, "holds an empty list");
        if (__builtin_mul_overflow(v->n, len, &v->n)) return fail(r, "has too many elements");
        v->shape[v->rank++] = len;
    }
    return QUANT_CK_OK;
}

/* Every list at a depth has that depth's length and every leaf is a number; fills v->v in order
 * when it is allocated. */
static quant_ck_status value_walk(const reader *r, const json_t *j, value *v, int depth,
                                  int64_t *idx, int64_t *at)
{
    char where[8 * 24];
    if (depth == v->rank) {
        if (!json_is_number(j)) {
            index_text(idx, depth, where, sizeof where);
            return fail(r, "element %s is %s, not a number", where, kind_of(j));
        }
        if (v->v) v->v[*at] = json_number_value(j);
        (*at)++;
        return QUANT_CK_OK;
    }
    if (!json_is_array(j) || (int64_t)json_array_size(j) != v->shape[depth]) {
        index_text(idx, depth, where, sizeof where);
        return fail(r, "is ragged: the element at %s is %s, not a list of %lld like the first",
                    where, json_is_array(j) ? "a list of another length" : kind_of(j),
                    (long long)v->shape[depth]);
    }
    for (idx[depth] = 0; idx[depth] < v->shape[depth]; idx[depth]++) {
        quant_ck_status st =
            value_walk(r, json_array_get(j, (size_t)idx[depth]), v, depth + 1, idx, at);
        if (st != QUANT_CK_OK) return st;
    }
    return QUANT_CK_OK;
}

static quant_ck_status read_value(const reader *r, const json_t *j, value *v)
{
    int64_t idx[QUANT_MAX_RANK] = {0}, at = 0;
    quant_ck_status st = value_shape(r, j, v);
    if (st == QUANT_CK_OK) st = value_walk(r, j, v, 0, idx, &at); /* checks before allocating */
    if (st != QUANT_CK_OK) return st;
    if (!(v->v = malloc((size_t)v->n * sizeof *v->v))) return nomem(r);
    at = 0;
    value_walk(r, j, v, 0, idx, &at);
    v->present = true;
    return QUANT_CK_OK;
}

/* ---- one activation -------------------------------------------------------------------------- */

typedef struct act_keys {
    value v[K_VALUES];
    const json_t *count, *shape;
} act_keys;

static void act_keys_free(act_keys *k)
{
    for (int i = 0; i < K_VALUES; i++) free(k->v[i].v);
}

static bool same_shape(const value *x, const value *y)
{
    return x->rank == y->rank &&
           memcmp(x->shape, y->shape, (size_t)x->rank * sizeof *x->shape) == 0;
}

static quant_ck_status read_key(reader *r, const char *key, const json_t *j, act_keys *k)
{
    int role = 0;
    while (role < K_ROLES && strcmp(key_names[role], key) != 0) role++;
    r->key = key;
    quant_ck_status st = QUANT_CK_OK;
    if (role == K_ROLES)
        st = fail(r, "unknown key (an activation holds count with absmax, min and max, mean_sq or "
                     "their sum_of_ forms)");
    else if (role < K_VALUES)
        st = read_value(r, j, &k->v[role]);
    else if (role == K_COUNT)
        k->count = j;
    else if (role == K_SHAPE)
        k->shape = j;
    r->key = NULL;
    return st;
}

/* The count: an integer from 1 to 2^53 (an integral real such as 3.0 counts). */
static quant_ck_status read_count(reader *r, const act_keys *k, int64_t *count)
{
    if (!k->count) return fail(r, "has no \"count\"");
    double c = json_number_value(k->count);
    r->key = "count";
    quant_ck_status st = QUANT_CK_OK;
    if (!json_is_number(k->count))
        st = fail(r, "is %s, not an integer", kind_of(k->count));
    else if (c == 0)
        st = fail(r, "is 0: there is nothing to average (Qwix: quant_stats is not initialized)");
    else if (!(c >= 1 && c <= COUNT_MAX && c == floor(c)))
        st = fail(r, "must be an integer from 1 to 2^53, not %.17g", c);
    r->key = NULL;
    if (st == QUANT_CK_OK) *count = (int64_t)c; /* exact: an integer up to 2^53 */
    return st;
}

/* A pair that must come together, of one shape. */
static quant_ck_status pair_ok(reader *r, const act_keys *k, key_role lo, key_role hi)
{
    const value *a = &k->v[lo], *b = &k->v[hi];
    if (a->present != b->present)
        return fail(r, "has \"%s\" without \"%s\"", key_names[a->present ? lo : hi],
                    key_names[a->present ? hi : lo]);
    if (a->present && !same_shape(a, b))
        return fail(r, "\"%s\" and \"%s\" have different shapes", key_names[lo], key_names[hi]);
    return QUANT_CK_OK;
}

/* quantd's "shape" (when given) is the shape of the values. */
static quant_ck_status shape_matches(reader *r, const act_keys *k, const value *v)
{
    if (!k->shape) return QUANT_CK_OK;
    bool ok = json_is_array(k->shape) && (int)json_array_size(k->shape) == v->rank;
    for (int i = 0; ok && i < v->rank; i++) {
        const json_t *d = json_array_get(k->shape, (size_t)i);
        ok = json_is_number(d) && json_number_value(d) == (double)v->shape[i];
    }
    r->key = "shape";
    quant_ck_status st = ok ? QUANT_CK_OK : fail(r, "is not the shape of the values");
    r->key = NULL;
    return st;
}

/* Which keys give the calibration: the averaged ones, else the sums (divided by count). */
static quant_ck_status choose_kind(reader *r, const act_keys *k, quant_stat_kind *kind, int *first,
                                   bool *sums)
{
    quant_ck_status st = pair_ok(r, k, K_MIN, K_MAX);
    if (st == QUANT_CK_OK) st = pair_ok(r, k, K_SUM_MIN, K_SUM_MAX);
    if (st != QUANT_CK_OK) return st;
    if (k->v[K_ABSMAX].present && k->v[K_MIN].present)
        return fail(r, "has both \"absmax\" and \"min\"/\"max\": one kind per activation");
    if (k->v[K_SUM_ABSMAX].present && k->v[K_SUM_MIN].present)
        return fail(r, "has both \"sum_of_absmax\" and \"sum_of_min\"/\"sum_of_max\"");
    static const struct {
        key_role key;
        quant_stat_kind kind;
        bool sums;
    } order[] = {{K_ABSMAX, QUANT_STAT_ABSMAX, false},
                 {K_MIN, QUANT_STAT_MINMAX, false},
                 {K_SUM_ABSMAX, QUANT_STAT_ABSMAX, true},
                 {K_SUM_MIN, QUANT_STAT_MINMAX, true}};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (k->v[order[i].key].present) {
            *kind = order[i].kind;
            *first = order[i].key;
            *sums = order[i].sums;
            return QUANT_CK_OK;
        }
    if (k->v[K_MEAN_SQ].present || k->v[K_SUM_MEAN_SQ].present) {
        *kind = QUANT_STAT_NONE;
        *first = k->v[K_MEAN_SQ].present ? K_MEAN_SQ : K_SUM_MEAN_SQ;
        *sums = false;
        return QUANT_CK_OK;
    }
    return fail(r, "has no statistics: give absmax, or min and max (or their sum_of_ forms with "
                   "a count)");
}

/* The importance statistic (SPEC 9): mean_sq as averaged, else sum_of_mean_sq / count; one
 * value >= 0 per input feature (a list). NULL in *out when the activation has none. */
static quant_ck_status take_mean_sq(reader *r, act_keys *k, int64_t count, value **out)
{
    int role = k->v[K_MEAN_SQ].present ? K_MEAN_SQ : K_SUM_MEAN_SQ;
    value *v = &k->v[role];
    *out = NULL;
    if (!v->present) return QUANT_CK_OK;
    r->key = key_names[role];
    quant_ck_status st = QUANT_CK_OK;
    if (v->rank != 1)
        st = fail(r, "must be a list of one value per input feature, not %d-dimensional", v->rank);
    for (int64_t i = 0; st == QUANT_CK_OK && i < v->n; i++) {
        if (role == K_SUM_MEAN_SQ) v->v[i] /= (double)count;
        if (!(v->v[i] >= 0)) st = fail(r, "element [%lld] is negative", (long long)i);
    }
    r->key = NULL;
    if (st == QUANT_CK_OK) *out = v;
    return st;
}

static quant_ck_status add_act(reader *r, const char *name, act_keys *k)
{
    quant_stat_kind kind = QUANT_STAT_NONE;
    int first = K_MEAN_SQ;
    bool sums = false;
    int64_t count = 0;
    quant_ck_status st = choose_kind(r, k, &kind, &first, &sums);
    if (st == QUANT_CK_OK) st = read_count(r, k, &count);
    if (st == QUANT_CK_OK) st = shape_matches(r, k, &k->v[first]);
    value *msq = NULL;
    if (st == QUANT_CK_OK) st = take_mean_sq(r, k, count, &msq);
    if (st != QUANT_CK_OK) return st;
    quant_stats *s = r->s;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        quant_act_stat *a = realloc(s->acts, cap * sizeof *a);
        if (!a) return nomem(r);
        s->acts = a;
        s->cap = cap;
    }
    value *a = &k->v[first], *b = kind == QUANT_STAT_MINMAX ? &k->v[first + 1] : NULL;
    for (int64_t i = 0; sums && i < a->n; i++) {
        a->v[i] /= (double)count; /* Qwix's SimpleMovingAverage: sum_of_k / count */
        if (b) b->v[i] /= (double)count;
    }
    quant_act_stat *e = &s->acts[s->n];
    *e = (quant_act_stat){.name = strdup(name), .kind = kind, .rank = a->rank, .count = count};
    if (!e->name) return nomem(r);
    memcpy(e->shape, a->shape, sizeof e->shape);
    if (kind != QUANT_STAT_NONE) {
        e->a = a->v; /* the arrays move into the entry */
        a->v = NULL;
    }
    if (b) {
        e->b = b->v;
        b->v = NULL;
    }
    if (msq) {
        e->mean_sq_len = msq->n;
        e->mean_sq = msq->v; /* moves too (a mean_sq-only activation's a stays NULL) */
        msq->v = NULL;
    }
    s->n++;
    return QUANT_CK_OK;
}

static quant_ck_status read_act(reader *r, const char *name, const json_t *obj)
{
    if (!*name) return fail(r, "an activation name must not be empty");
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return fail(r, "activation names must not hold control characters");
    r->act = name;
    act_keys k = {0};
    const char *key;
    json_t *j;
    quant_ck_status st = QUANT_CK_OK;
    json_object_foreach((json_t *)obj, key, j)
    {
        st = read_key(r, key, j, &k);
        if (st != QUANT_CK_OK) break;
    }
    if (st == QUANT_CK_OK) st = add_act(r, name, &k);
    act_keys_free(&k);
    r->act = NULL;
    return st;
}

/* ---- the two document forms ------------------------------------------------------------------ */

/* An activation has a "count", or a statistic that is not itself an object (a module named
 * "min" holds objects); anything else is a module of activations. */
static bool is_activation(const json_t *obj)
{
    if (json_object_get(obj, key_names[K_COUNT])) return true;
    for (int i = 0; i < K_VALUES; i++) {
        const json_t *v = json_object_get(obj, key_names[i]);
        if (v && !json_is_object(v)) return true;
    }
    return false;
}

/* A Qwix dump: each member an activation (an object with a count or statistics) or a module of
 * them, whose name prefixes theirs with '/'. */
static quant_ck_status read_tree(reader *r, const json_t *obj, const char *prefix)
{
    const char *key;
    json_t *j;
    json_object_foreach((json_t *)obj, key, j)
    {
        size_t len = strlen(prefix) + strlen(key) + 2;
        char *name = malloc(len);
        if (!name) return nomem(r);
        snprintf(name, len, "%s%s%s", prefix, *prefix ? "/" : "", key);
        quant_ck_status st;
        if (!json_is_object(j))
            st = fail(r,
                      "'%s' is %s, not an activation's object {\"count\": n, ...} or a module "
                      "of them",
                      name, kind_of(j));
        else if (is_activation(j))
            st = read_act(r, name, j);
        else if (json_object_size(j) == 0)
            st = fail(r, "'%s' is an empty object", name);
        else
            st = read_tree(r, j, name);
        free(name);
        if (st != QUANT_CK_OK) return st;
    }
    return QUANT_CK_OK;
}

/* quantd's {"model", ..., "stats": {ACT: {...}}}. */
static quant_ck_status read_wrapped(reader *r, const json_t *root)
{
    const char *key;
    json_t *j;
    json_object_foreach((json_t *)root, key, j)
    {
        bool known = strcmp(key, "stats") == 0;
        for (size_t i = 0; !known && i < sizeof wrapper_keys / sizeof *wrapper_keys; i++)
            known = strcmp(key, wrapper_keys[i]) == 0;
        if (!known)
            return fail(r,
                        "unknown top-level key \"%s\" beside \"stats\" (quantd's statistics "
                        "have model, averaging, ema_constant, bootstrap_steps and stats)",
                        key);
    }
    json_object_foreach(json_object_get(root, "stats"), key, j)
    {
        quant_ck_status st = json_is_object(j)
                                 ? read_act(r, key, j)
                                 : fail(r, "activation '%s' is %s, not an object", key, kind_of(j));
        if (st != QUANT_CK_OK) return st;
    }
    return QUANT_CK_OK;
}

/* ---- the public calls ------------------------------------------------------------------------ */

static int by_name(const void *x, const void *y)
{
    return strcmp(((const quant_act_stat *)x)->name, ((const quant_act_stat *)y)->name);
}

static quant_ck_status read_root(reader *r, const json_t *root)
{
    if (!json_is_object(root))
        return fail(r, "must be a JSON object of activations, not %s", kind_of(root));
    const json_t *stats = json_object_get(root, "stats");
    quant_ck_status st = json_is_object(stats) && !is_activation(stats) ? read_wrapped(r, root)
                                                                        : read_tree(r, root, "");
    if (st != QUANT_CK_OK) return st;
    if (r->s->n == 0) return fail(r, "holds no activation statistics");
    qsort(r->s->acts, r->s->n, sizeof *r->s->acts, by_name);
    for (size_t i = 1; i < r->s->n; i++)
        if (strcmp(r->s->acts[i - 1].name, r->s->acts[i].name) == 0)
            return fail(r, "activation '%s' comes twice", r->s->acts[i].name);
    return QUANT_CK_OK;
}

static quant_ck_status finish(reader *r, json_t *root, const json_error_t *je, quant_stats **out)
{
    quant_ck_status st = QUANT_CK_OK;
    if (!root)
        st = fail(r, "line %d column %d: %s", je->line, je->column, je->text);
    else if (!(r->s = calloc(1, sizeof *r->s)))
        st = nomem(r);
    else
        st = read_root(r, root);
    json_decref(root);
    if (st != QUANT_CK_OK) {
        quant_stats_free(r->s);
        return st;
    }
    *out = r->s;
    return QUANT_CK_OK;
}

quant_ck_status quant_stats_parse(const char *json, size_t len, const char *source,
                                  quant_stats **out, quant_ck_error *err)
{
    if (out) *out = NULL;
    if (!json || !out)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_stats_parse: NULL argument");
    reader r = {.src = source ? source : "statistics", .err = err};
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &je);
    return finish(&r, root, &je, out);
}

quant_ck_status quant_stats_load(const char *path, quant_stats **out, quant_ck_error *err)
{
    if (out) *out = NULL;
    if (!path || !out)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_stats_load: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f) return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", path, strerror(errno));
    reader r = {.src = path, .err = err};
    json_error_t je;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &je);
    int read_errno = ferror(f) ? errno : 0;
    fclose(f);
    if (read_errno) {
        json_decref(root);
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", path, strerror(read_errno));
    }
    return finish(&r, root, &je, out);
}

const quant_act_stat *quant_stats_acts(const quant_stats *s, size_t *n)
{
    if (n) *n = s ? s->n : 0;
    return s ? s->acts : NULL;
}

void quant_stats_free(quant_stats *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) {
        free((char *)s->acts[i].name);
        free((double *)s->acts[i].a);
        free((double *)s->acts[i].b);
        free((double *)s->acts[i].mean_sq);
    }
    free(s->acts);
    free(s);
}
