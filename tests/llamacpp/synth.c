/* synth.c -- llamacpp-synth OUT.gguf: writes a small F32 GGUF model (architecture llama, one
 * block) whose 2-D weights have rows of 256 or 512 values, so that every ggml type quantd writes
 * -- the K types and iq4_xs, whose blocks are 256 long, included -- applies to every one of them
 * without llama-quantize's fallbacks. The values are deterministic and meant to reach the
 * corners of the block formats: scales from 2^-12 to 2^12, rows of one sign, a row of zeros, a
 * constant row, rows with one large outlier and rows of tiny values.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant_gguf.h"

typedef struct synth_tensor {
    const char *name;
    int n_dims;
    int64_t ne[2];
} synth_tensor;

#define N_EMBD  256
#define N_FF    512
#define N_VOCAB 40

static const synth_tensor tensors[] = {
    {"token_embd.weight", 2, {N_EMBD, N_VOCAB}},  {"blk.0.attn_norm.weight", 1, {N_EMBD, 1}},
    {"blk.0.attn_q.weight", 2, {N_EMBD, N_EMBD}}, {"blk.0.attn_k.weight", 2, {N_EMBD, N_EMBD}},
    {"blk.0.attn_v.weight", 2, {N_EMBD, N_EMBD}}, {"blk.0.attn_output.weight", 2, {N_EMBD, N_EMBD}},
    {"blk.0.ffn_gate.weight", 2, {N_EMBD, N_FF}}, {"blk.0.ffn_up.weight", 2, {N_EMBD, N_FF}},
    {"blk.0.ffn_down.weight", 2, {N_FF, N_EMBD}}, {"blk.0.ffn_norm.weight", 1, {N_EMBD, 1}},
    {"output_norm.weight", 1, {N_EMBD, 1}},       {"output.weight", 2, {N_EMBD, N_VOCAB}},
};
#define N_TENSORS (sizeof tensors / sizeof tensors[0])

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static double uniform(void) /* [0, 1), xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1du) >> 11) / 9007199254740992.0;
}

static double normal(void)
{
    double u = uniform() + 1e-12, v = uniform();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Row `r` of a weight, `n` values. Its kind cycles over r % 7: 0 and 6 normal, 1 positive, 2
 * negative, 3 zeros (every other time) or a constant, 4 one outlier 40 times the scale, 5 tiny
 * (below what a half-precision block scale holds). */
static void fill_row(float *x, int64_t n, int64_t r)
{
    double scale = ldexp(1.0, (int)(r % 25) - 12);
    int kind = (int)(r % 7);
    for (int64_t i = 0; i < n; i++) {
        double v = normal() * scale;
        if (kind == 1) v = fabs(v);
        if (kind == 2) v = -fabs(v);
        if (kind == 3) v = r % 14 == 3 ? 0.0 : 0.75 * scale;
        if (kind == 4 && i == (r * 37) % n) v = 40.0 * scale;
        if (kind == 5) v *= 1e-20;
        x[i] = (float)v;
    }
}

static int write_model(quant_gguf_writer *w, quant_ck_error *err)
{
    quant_ck_status st = quant_gguf_writer_set_string(w, "general.architecture", "llama", err);
    if (!st) st = quant_gguf_writer_set_string(w, "general.name", "quantd synthetic", err);
    if (!st) st = quant_gguf_writer_set_u32(w, "llama.block_count", 1, err);
    if (!st) st = quant_gguf_writer_set_u32(w, "llama.context_length", 256, err);
    if (!st) st = quant_gguf_writer_set_u32(w, "llama.embedding_length", N_EMBD, err);
    if (!st) st = quant_gguf_writer_set_u32(w, "llama.feed_forward_length", N_FF, err);
    if (!st) st = quant_gguf_writer_set_u32(w, "llama.attention.head_count", 4, err);
    if (!st) st = quant_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 4, err);
    if (!st)
        st = quant_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f, err);
    for (size_t i = 0; i < N_TENSORS && !st; i++)
        st = quant_gguf_writer_add_tensor(w, tensors[i].name, tensors[i].n_dims, tensors[i].ne,
                                          QUANT_GGML_F32, NULL, err);
    if (!st) st = quant_gguf_writer_begin(w, err);
    for (size_t i = 0; i < N_TENSORS && !st; i++) {
        const synth_tensor *t = &tensors[i];
        float row[N_FF];
        for (int64_t r = 0; r < t->ne[1] && !st; r++) {
            if (t->n_dims == 1)
                for (int64_t c = 0; c < t->ne[0]; c++) row[c] = (float)(1.0 + 0.01 * normal());
            else
                fill_row(row, t->ne[0], r);
            st = quant_gguf_writer_write(w, row, (size_t)t->ne[0] * sizeof(float), err);
        }
    }
    if (!st) st = quant_gguf_writer_commit(w, err);
    return st == QUANT_CK_OK ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT.gguf\n", argv[0]);
        return 2;
    }
    quant_ck_error err;
    quant_gguf_writer *w = NULL;
    int rc = quant_gguf_writer_new(argv[1], &w, &err) == QUANT_CK_OK ? write_model(w, &err) : -1;
    if (rc) fprintf(stderr, "%s: %s\n", argv[1], err.message);
    quant_gguf_writer_free(w);
    return rc ? 1 : 0;
}
