/* stats_parse_st.c -- qd_stats_parse_safetensors: a post whose body is a safetensors file
 * (validated in memory by quant_st_open_buffer, exactly as the pipeline validates a shard) with
 * tensors named ACT/absmax, or ACT/min and ACT/max, and/or ACT/mean_sq (ACT may hold '/': the
 * name is split at its last one), in F32, BF16, F16 or F64, widened exactly to doubles straight
 * from the body. The step may come in the header's __metadata__ as {"step": "N"}; other metadata is
 * ignored. SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_st.h"
#include "stats_parse.h"

/* One tensor of the body: the activation and statistic its name gives. */
typedef struct st_stat {
    char *act;
    sp_slot slot;
    const quant_st_tensor *t;
} st_stat;

typedef struct st_reader {
    const quant_st_file *f;
    const unsigned char *data; /* the body's byte buffer (validated offsets point into it) */
    qd_err *err;
} st_reader;

static int by_act(const void *x, const void *y)
{
    const st_stat *a = x, *b = y;
    int c = strcmp(a->act, b->act);
    return c ? c : (int)a->slot - (int)b->slot;
}

/* ACT/absmax, ACT/min or ACT/max into s. */
static qd_status split_name(const quant_st_tensor *t, st_stat *s, qd_err *err)
{
    const char *slash = strrchr(t->name, '/');
    if (!slash || slash == t->name)
        return qd_fail(err, QD_INVALID,
                       "tensor '%.200s' is not named ACTIVATION/absmax, ACTIVATION/min, "
                       "ACTIVATION/max or ACTIVATION/mean_sq",
                       t->name);
    size_t len = (size_t)(slash - t->name);
    const char *problem = sp_name_problem(t->name, len);
    if (problem) return qd_fail(err, QD_INVALID, "tensor '%.200s': %s", t->name, problem);
    s->act = strndup(t->name, len);
    if (!s->act) return qd_fail(err, QD_NOMEM, "out of memory");
    if (!sp_slot_parse(slash + 1, strlen(slash + 1), false, &s->slot))
        return sp_fail_act(
            err, s->act, "tensor '%.200s': unknown statistic '%.40s' (absmax, min, max or mean_sq)",
            t->name, slash + 1);
    s->t = t;
    return QD_OK;
}

/* n elements of dtype at src (unaligned, little-endian) widened exactly into dst; returns the
 * index of the first value that is not finite, or -1. One loop per dtype, the finiteness test
 * on the exponent bits, so the compiler can vectorize both. */
static int64_t widen_f32(const unsigned char *src, int64_t n, double *dst)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        float f;
        memcpy(&u, src + 4 * i, 4);
        memcpy(&f, &u, 4);
        dst[i] = f;
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return bad ? 0 : -1;
}

static int64_t widen_bf16(const unsigned char *src, int64_t n, double *dst)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        dst[i] = f;
        bad |= (h & 0x7f80u) == 0x7f80u;
    }
    return bad ? 0 : -1;
}

static int64_t widen_f16(const unsigned char *src, int64_t n, double *dst)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = quant_f16_to_f32(h);
        bad |= (h & 0x7c00u) == 0x7c00u;
    }
    return bad ? 0 : -1;
}

static int64_t widen_f64(const unsigned char *src, int64_t n, double *dst)
{
    memcpy(dst, src, (size_t)n * 8);
    uint64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, src + 8 * i, 8);
        bad |= (u & 0x7ff0000000000000u) == 0x7ff0000000000000u;
    }
    return bad ? 0 : -1;
}

/* The first element that is not finite (dst is widened). */
static int64_t first_bad(const double *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return i;
    return -1;
}

static int64_t widen(quant_st_dtype dt, const unsigned char *src, int64_t n, double *dst)
{
    int64_t bad = dt == QUANT_ST_F32    ? widen_f32(src, n, dst)
                  : dt == QUANT_ST_BF16 ? widen_bf16(src, n, dst)
                  : dt == QUANT_ST_F16  ? widen_f16(src, n, dst)
                                        : widen_f64(src, n, dst);
    return bad < 0 ? -1 : first_bad(dst, n);
}

/* The tensor's values as doubles into v: a float dtype, not empty, every value finite. */
static qd_status tensor_values(st_reader *r, const char *act, const quant_st_tensor *t, sp_value *v)
{
    quant_st_dtype dt = t->dtype;
    if (dt != QUANT_ST_F32 && dt != QUANT_ST_BF16 && dt != QUANT_ST_F16 && dt != QUANT_ST_F64)
        return sp_fail_act(r->err, act,
                           "tensor '%.200s' is %s; statistics are F32, BF16, F16 or F64", t->name,
                           quant_st_dtype_name(dt));
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->shape[i]; /* the bytes are in the body: no overflow */
    if (n == 0) return sp_fail_act(r->err, act, "tensor '%.200s' is empty", t->name);
    if (n > QD_ACT_MAX_ELEMS)
        return sp_fail_act(r->err, act, "tensor '%.200s' has more than %lld elements", t->name,
                           (long long)QD_ACT_MAX_ELEMS);
    double *vals = malloc((size_t)n * sizeof *vals);
    if (!vals) return qd_fail(r->err, QD_NOMEM, "out of memory");
    int64_t bad = widen(dt, r->data + t->begin, n, vals);
    if (bad >= 0) {
        free(vals);
        return sp_fail_act(r->err, act,
                           "tensor '%.200s' holds a non-finite value at element %lld; values "
                           "must be finite",
                           t->name, (long long)bad);
    }
    *v = (sp_value){.present = true, .rank = t->rank, .n = n, .v = vals};
    memcpy(v->shape, t->shape, sizeof v->shape);
    return QD_OK;
}

/* The run of stats s[0..k) of one activation into an entry. */
static qd_status add_activation(st_reader *r, const st_stat *s, size_t k, sp_entries *list)
{
    sp_value slots[SP_SLOTS] = {{0}};
    qd_status st = QD_OK;
    for (size_t i = 0; i < k && st == QD_OK; i++)
        st = tensor_values(r, s[i].act, s[i].t, &slots[s[i].slot]);
    if (st != QD_OK) {
        sp_values_free(slots);
        return st;
    }
    return sp_entries_add(list, s[0].act, slots, 1, false, r->err);
}

static qd_status read_entries(st_reader *r, st_stat *s, size_t n, sp_entries *list)
{
    qd_status st = QD_OK;
    for (size_t i = 0; i < n && st == QD_OK; i++) st = split_name(&r->f->tensors[i], &s[i], r->err);
    if (st != QD_OK) return st;
    qsort(s, n, sizeof *s, by_act);
    for (size_t i = 0, k; i < n && st == QD_OK; i += k) {
        for (k = 1; i + k < n && strcmp(s[i].act, s[i + k].act) == 0;) k++;
        st = add_activation(r, s + i, k, list);
    }
    return st;
}

/* __metadata__ "step": decimal digits, fewer than 19. */
static qd_status meta_step(const quant_st_file *f, int64_t *step, qd_err *err)
{
    const char *text = quant_st_meta(f, "step");
    if (!text) return QD_OK;
    size_t len = strlen(text);
    if (len == 0 || len > 18 || strspn(text, "0123456789") != len)
        return qd_fail(err, QD_INVALID,
                       "__metadata__ step must be a decimal integer from 0 to 10^18 - 1, not "
                       "\"%.40s\"",
                       text);
    *step = strtoll(text, NULL, 10);
    return QD_OK;
}

static qd_status open_body(const void *body, size_t len, quant_st_file **f, qd_err *err)
{
    if (!body || len == 0)
        return qd_fail(err, QD_INVALID, "the body is empty; a binary post is a safetensors file");
    quant_ck_error ck;
    quant_ck_status cs = quant_st_open_buffer(body, len, "safetensors body", f, &ck);
    if (cs == QUANT_CK_ERR_NOMEM) return qd_fail(err, QD_NOMEM, "out of memory");
    if (cs != QUANT_CK_OK) return qd_fail(err, QD_INVALID, "%s", ck.message);
    return QD_OK;
}

qd_status qd_stats_parse_safetensors(const void *body, size_t len, qd_stat_post *out, qd_err *err)
{
    *out = (qd_stat_post){.step = -1};
    quant_st_file *f = NULL;
    qd_status st = open_body(body, len, &f, err);
    if (st != QD_OK) return st;
    int64_t step = -1;
    st = meta_step(f, &step, err);
    size_t n = f->n_tensors;
    st_stat *s = st == QD_OK ? calloc(n ? n : 1, sizeof *s) : NULL;
    if (st == QD_OK && !s) st = qd_fail(err, QD_NOMEM, "out of memory");
    st_reader r = {.f = f, .data = (const unsigned char *)body + f->data_start, .err = err};
    sp_entries list = {0};
    if (st == QD_OK) st = read_entries(&r, s, n, &list);
    for (size_t i = 0; s && i < n; i++) free(s[i].act);
    free(s);
    quant_st_close(f);
    if (st != QD_OK) {
        sp_entries_free(&list);
        return st;
    }
    out->step = step;
    return sp_entries_finish(&list, out, err);
}
