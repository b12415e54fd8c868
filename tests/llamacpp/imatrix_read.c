/* imatrix_read.c -- reads llama.cpp's GGUF importance matrices into the values llama-quantize
 * computes from them (imatrix_read.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "imatrix_read.h"
#include "quant_gguf.h"

#define SUFFIX     ".in_sum2"
#define SUFFIX_LEN 8

/* Entry `sums` (W.in_sum2, one F32 row) with W.counts into `e`. */
static int read_entry(const quant_gguf_file *f, const quant_gguf_tensor *sums, size_t stem,
                      lc_imatrix_data *e, char *msg, size_t msg_len)
{
    char counts_name[QUANT_GGUF_MAX_NAME + 8];
    snprintf(counts_name, sizeof counts_name, "%.*s.counts", (int)stem, sums->name);
    const quant_gguf_tensor *counts = quant_gguf_find_tensor(f, counts_name);
    float count = 0, *v = malloc(sums->nbytes + 1);
    e->name = strndup(sums->name, stem);
    e->data = v;
    e->size = (size_t)sums->ne[0];
    quant_ck_error err;
    if (!counts || !v || !e->name || sums->type != QUANT_GGML_F32 || sums->nrows != 1 ||
        counts->type != QUANT_GGML_F32 ||
        quant_gguf_read(f, counts, 0, &count, sizeof count, &err) ||
        quant_gguf_read(f, sums, 0, v, sums->nbytes, &err)) {
        snprintf(msg, msg_len, "%s: entry '%s' is not one F32 row with its F32 counts", f->path,
                 sums->name);
        return -1;
    }
    for (size_t c = 0; c < e->size; c++) v[c] = count > 0 ? v[c] / count : 1.0f;
    return 0;
}

int lc_imatrix_read(const char *path, lc_imatrix_data **out, char *msg, size_t msg_len)
{
    quant_ck_error err;
    quant_gguf_file *f = NULL;
    *out = NULL;
    if (quant_gguf_open(path, &f, &err)) {
        snprintf(msg, msg_len, "%s", err.message);
        return -1;
    }
    lc_imatrix_data *list = calloc(f->n_tensors + 1, sizeof *list);
    int rc = 0;
    if (!list) {
        snprintf(msg, msg_len, "%s: out of memory", path);
        rc = -1;
    }
    for (size_t i = 0, n = 0; i < f->n_tensors && !rc; i++) {
        const quant_gguf_tensor *t = &f->tensors[i];
        size_t len = strlen(t->name);
        if (len > SUFFIX_LEN && !strcmp(t->name + len - SUFFIX_LEN, SUFFIX))
            rc = read_entry(f, t, len - SUFFIX_LEN, &list[n++], msg, msg_len);
    }
    quant_gguf_close(f);
    *out = list;
    return rc;
}

const lc_imatrix_data *lc_imatrix_find(const lc_imatrix_data *list, const char *name)
{
    for (const lc_imatrix_data *p = list; p && p->name; p++)
        if (!strcmp(p->name, name)) return p;
    return NULL;
}

void lc_imatrix_free(lc_imatrix_data *list)
{
    for (lc_imatrix_data *p = list; p && (p->name || p->data); p++) {
        free((void *)p->name);
        free((void *)p->data);
    }
    free(list);
}
