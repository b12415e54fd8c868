/* fuzz_stats_st.c -- libFuzzer harness of qd_stats_parse_safetensors: the input is a binary
 * statistics post (a safetensors file of ACT/absmax or ACT/min + ACT/max tensors and/or
 * ACT/mean_sq, F32, BF16, F16 or F64, the step in __metadata__); what it accepts must be a
 * well-formed post (stats_check.h), what it refuses must hand nothing out. A post it accepts is
 * read again with the safetensors reader and libquant's dtype conversions: every tensor must be one
 * of its statistics, with the same shape and the same values. SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>

#include "quant_st.h"
#include "stats_check.h"

/* The tensor named ACT/stat holds v (n values of the shape rank, shape: e's, or [n_sq]). */
static void same_values(const quant_st_file *f, const uint8_t *data, const char *act,
                        const char *stat, int rank, const int64_t *shape, int64_t n,
                        const double *v)
{
    size_t len = strlen(act) + strlen(stat) + 2;
    char *name = malloc(len);
    FUZZ_CHECK(name);
    snprintf(name, len, "%s/%s", act, stat);
    const quant_st_tensor *t = quant_st_find(f, name);
    FUZZ_CHECK(t && t->rank == rank);
    for (int i = 0; i < t->rank; i++) FUZZ_CHECK(t->shape[i] == shape[i]);
    quant_dtype dt;
    FUZZ_CHECK(quant_st_to_quant_dtype(t->dtype, &dt) && quant_dtype_is_float(dt));
    /* the data may sit at any offset of the body; libquant wants its elements aligned */
    size_t nbytes = (size_t)quant_st_nbytes(t);
    void *raw = malloc(nbytes);
    double *want = malloc((size_t)n * sizeof *want);
    float *f32 = malloc((size_t)n * sizeof *f32);
    FUZZ_CHECK(raw && want && f32);
    memcpy(raw, data + f->data_start + t->begin, nbytes);
    if (dt == QUANT_DTYPE_F64) {
        memcpy(want, raw, nbytes);
    } else {
        quant_error err;
        FUZZ_CHECK(quant_convert(dt, raw, QUANT_DTYPE_F32, f32, n, &err) == QUANT_OK);
        for (int64_t i = 0; i < n; i++) want[i] = f32[i];
    }
    free(raw);
    free(f32);
    for (int64_t i = 0; i < n; i++) FUZZ_CHECK(want[i] == v[i]);
    free(want);
    free(name);
}

static void same_tensor(const quant_st_file *f, const uint8_t *data, const qd_stat_entry *e,
                        const char *stat, const double *v)
{
    same_values(f, data, e->name, stat, e->rank, e->shape, e->n, v);
}

static void check_with_reader(const uint8_t *data, size_t size, const qd_stat_post *p)
{
    quant_st_file *f = NULL;
    quant_ck_error err;
    FUZZ_CHECK(quant_st_open_buffer(data, size, "body", &f, &err) == QUANT_CK_OK);
    size_t tensors = 0;
    for (size_t i = 0; i < p->n; i++) {
        const qd_stat_entry *e = &p->e[i];
        if (e->kind == QD_STAT_ABSMAX) {
            same_tensor(f, data, e, "absmax", e->a);
            tensors++;
        } else if (e->kind == QD_STAT_MINMAX) {
            same_tensor(f, data, e, "min", e->a);
            same_tensor(f, data, e, "max", e->b);
            tensors += 2;
        }
        if (e->sq) {
            same_values(f, data, e->name, "mean_sq", 1, &e->n_sq, e->n_sq, e->sq);
            tensors++;
        }
    }
    FUZZ_CHECK(tensors == f->n_tensors);
    const char *step = quant_st_meta(f, "step");
    FUZZ_CHECK(step ? p->step == strtoll(step, NULL, 10) : p->step == -1);
    quant_st_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qd_stat_post p;
    qd_err err = {{0}};
    qd_status st = qd_stats_parse_safetensors(data, size, &p, &err);
    check_post(st, &p, false, &err);
    if (st == QD_OK) check_with_reader(data, size, &p);
    qd_stat_post_clear(&p);
    return 0;
}
