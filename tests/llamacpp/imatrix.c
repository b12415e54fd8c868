/* imatrix.c -- llamacpp-imatrix MODEL.gguf OUT.gguf: writes an importance matrix for MODEL in
 * llama.cpp's GGUF imatrix format (W.in_sum2 and W.counts for each 2-D weight W of the blocks and
 * output.weight, as llama-imatrix collects them; general.type "imatrix" and the imatrix.* keys),
 * with deterministic values instead of measured ones: log-normal column weights, every 17th
 * column weighing 0, counts of 37, and the counts of blk.0.attn_k.weight 0 (llama-quantize then
 * weighs every column 1). Both quantizers read the same file in the lane.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant_gguf.h"

#define COUNT      37.0f
#define ZERO_COUNT "blk.0.attn_k.weight"

static uint64_t rng_state = 0x2545f4914f6cdd1du;

static double uniform(void) /* [0, 1), xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1du) >> 11) / 9007199254740992.0;
}

static bool collected(const quant_gguf_tensor *t)
{
    size_t n = strlen(t->name);
    return t->n_dims == 2 && n > 7 && !strcmp(t->name + n - 7, ".weight") &&
           (!strncmp(t->name, "blk.", 4) || !strcmp(t->name, "output.weight"));
}

static quant_ck_status declare(quant_gguf_writer *w, const quant_gguf_file *m, quant_ck_error *err)
{
    const char *datasets[] = {"quantd synthetic"};
    quant_ck_status st = quant_gguf_writer_set_string(w, "general.type", "imatrix", err);
    if (!st) st = quant_gguf_writer_set_strings(w, "imatrix.datasets", datasets, 1, err);
    if (!st) st = quant_gguf_writer_set_u32(w, "imatrix.chunk_count", 1, err);
    if (!st) st = quant_gguf_writer_set_u32(w, "imatrix.chunk_size", 512, err);
    for (size_t i = 0; i < m->n_tensors && !st; i++) {
        const quant_gguf_tensor *t = &m->tensors[i];
        if (!collected(t)) continue;
        char name[QUANT_GGUF_MAX_NAME];
        int64_t sums_ne[2] = {t->ne[0], 1}, counts_ne[2] = {1, 1};
        snprintf(name, sizeof name, "%.40s.in_sum2", t->name);
        st = quant_gguf_writer_add_tensor(w, name, 2, sums_ne, QUANT_GGML_F32, NULL, err);
        snprintf(name, sizeof name, "%.40s.counts", t->name);
        if (!st)
            st = quant_gguf_writer_add_tensor(w, name, 2, counts_ne, QUANT_GGML_F32, NULL, err);
    }
    return st;
}

static quant_ck_status write_values(quant_gguf_writer *w, const quant_gguf_file *m,
                                    quant_ck_error *err)
{
    quant_ck_status st = QUANT_CK_OK;
    for (size_t i = 0; i < m->n_tensors && !st; i++) {
        const quant_gguf_tensor *t = &m->tensors[i];
        if (!collected(t)) continue;
        float count = strcmp(t->name, ZERO_COUNT) ? COUNT : 0.0f;
        for (int64_t c = 0; c < t->ne[0] && !st; c++) {
            double u = uniform() + 1e-12, v = uniform();
            double z = sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
            float sum = c % 17 == 5 ? 0.0f : (float)(exp(1.5 * z) * COUNT);
            st = quant_gguf_writer_write(w, &sum, sizeof sum, err);
        }
        if (!st) st = quant_gguf_writer_write(w, &count, sizeof count, err);
    }
    return st;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf OUT.gguf\n", argv[0]);
        return 2;
    }
    quant_ck_error err;
    quant_gguf_file *m = NULL;
    quant_gguf_writer *w = NULL;
    quant_ck_status st = quant_gguf_open(argv[1], &m, &err);
    if (!st) st = quant_gguf_writer_new(argv[2], &w, &err);
    if (!st) st = declare(w, m, &err);
    if (!st) st = quant_gguf_writer_begin(w, &err);
    if (!st) st = write_values(w, m, &err);
    if (!st) st = quant_gguf_writer_commit(w, &err);
    if (st) fprintf(stderr, "%s: %s\n", argv[2], err.message);
    quant_gguf_writer_free(w);
    quant_gguf_close(m);
    return st ? 1 : 0;
}
