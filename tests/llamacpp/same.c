/* same.c -- llamacpp-same OURS.gguf THEIRS.gguf [TYPE,... IN.gguf IMATRIX.gguf]: proves that
 * quant's GGUF file OURS holds the same tensors as THEIRS, the file llama.cpp's own quantizer made
 * of the same input with the same mix: the same names (llama.cpp orders them its own way), the
 * same ggml type and shape each (the mix chose alike, fallbacks included), general.file_type
 * alike when OURS has one and, tensor by tensor, the same bytes (the blocks quantized alike).
 * When both quantized IN with the importance matrix IMATRIX, the tensors of the TYPEs listed
 * that have importance are quant's own blocks (q4_0, q4_1, q5_0, q5_1, iq4_nl and iq4_xs: further
 * searches, each kept when it lowers the weighted error), held to weighted.h's contract instead:
 * no block's importance-weighted error above llama.cpp's. Prints one line; exits 0 when all of
 * it holds, 1 naming the first tensor that differs (and how many do) otherwise.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "imatrix_read.h"
#include "quant_gguf.h"
#include "weighted.h"

typedef struct pair {
    const char *ours_path, *theirs_path;
    const char *own; /* "TYPE,TYPE": with importance, held to weighted.h's contract */
    quant_gguf_file *in;
    lc_imatrix_data *imatrix;
    size_t n_own;
    lc_weighted weighted;
    quant_gguf_file *ours, *theirs;
    unsigned char *a, *b;
    size_t n_types, n_bytes; /* tensors whose type or shape / whose bytes differ */
    char first[512];         /* the first difference */
} pair;

static void note(pair *p, size_t *count, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void note(pair *p, size_t *count, const char *fmt, ...)
{
    if (!p->n_types && !p->n_bytes) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->first, sizeof p->first, fmt, ap);
        va_end(ap);
    }
    (*count)++;
}

/* Whether `x` is one of quant's own blocks: a listed type, with importance. */
static const float *own_blocks(const pair *p, const quant_gguf_tensor *x)
{
    const char *s = p->own;
    size_t n = strlen(x->traits->name);
    const lc_imatrix_data *e = lc_imatrix_find(p->imatrix, x->name);
    while (s && *s && e) {
        size_t len = strcspn(s, ",");
        if (len == n && !strncmp(s, x->traits->name, n)) return e->data;
        s += len + (s[len] == ',');
    }
    return NULL;
}

static bool same_shape(const quant_gguf_tensor *x, const quant_gguf_tensor *y)
{
    return x->n_dims == y->n_dims && !memcmp(x->ne, y->ne, sizeof x->ne);
}

/* Compares one tensor pair's bytes (or, for quant's own blocks, their weighted errors); -1 when
 * they cannot be read or the contract is broken. */
static int compare_bytes(pair *p, const quant_gguf_tensor *x, const quant_gguf_tensor *y)
{
    free(p->a);
    free(p->b);
    p->a = malloc(x->nbytes + 1);
    p->b = malloc(x->nbytes + 1);
    quant_ck_error err;
    if (!p->a || !p->b) {
        printf("FAIL %s: out of memory\n", p->ours_path);
        return -1;
    }
    if (quant_gguf_read(p->ours, x, 0, p->a, x->nbytes, &err) ||
        quant_gguf_read(p->theirs, y, 0, p->b, y->nbytes, &err)) {
        printf("FAIL %s\n", err.message);
        return -1;
    }
    const float *qw = own_blocks(p, x);
    if (qw) {
        char msg[512];
        p->n_own++;
        if (!lc_no_worse(p->in, x, p->a, p->b, qw, &p->weighted, msg, sizeof msg)) return 0;
        printf("FAIL %s: %s\n", p->ours_path, msg);
        return -1;
    }
    if (!memcmp(p->a, p->b, x->nbytes)) return 0;
    uint64_t at = 0;
    while (p->a[at] == p->b[at]) at++;
    uint64_t row = at / x->row_bytes;
    note(p, &p->n_bytes,
         "tensor '%s' (%s): bytes differ from byte %" PRIu64 " (row %" PRIu64 ", block %" PRIu64
         ")",
         x->name, x->traits->name, at, row, (at % x->row_bytes) / (uint64_t)x->traits->block_bytes);
    return 0;
}

static int compare(pair *p)
{
    quant_gguf_file *o = p->ours, *t = p->theirs;
    if (o->n_tensors != t->n_tensors) {
        printf("FAIL %s: %zu tensors, llama.cpp's %s: %zu\n", p->ours_path, o->n_tensors,
               p->theirs_path, t->n_tensors);
        return -1;
    }
    for (size_t i = 0; i < o->n_tensors; i++) {
        const quant_gguf_tensor *x = &o->tensors[i], *y = quant_gguf_find_tensor(t, x->name);
        if (!y) {
            printf("FAIL %s: tensor '%s' is not in llama.cpp's %s\n", p->ours_path, x->name,
                   p->theirs_path);
            return -1;
        }
        if (x->type != y->type || !same_shape(x, y))
            note(p, &p->n_types,
                 "tensor '%s': %s [%" PRId64 ", %" PRId64 "] here, %s [%" PRId64 ", %" PRId64
                 "] in llama.cpp's",
                 x->name, x->traits->name, x->ne[0], x->ne[1], y->traits->name, y->ne[0], y->ne[1]);
        else if (compare_bytes(p, x, y))
            return -1;
    }
    /* general.file_type: a file quant made without a mix has none (llama.cpp then guesses). */
    uint32_t fo = 0, ft = 0;
    quant_ck_error err;
    if (quant_gguf_find_kv(o, "general.file_type") &&
        (quant_gguf_get_u32(o, "general.file_type", &fo, &err) ||
         quant_gguf_get_u32(t, "general.file_type", &ft, &err) || fo != ft))
        note(p, &p->n_types, "general.file_type %" PRIu32 " here, %" PRIu32 " in llama.cpp's", fo,
             ft);
    if (p->n_types || p->n_bytes) {
        printf("FAIL %s: %s; %zu tensors (or keys) differ in type or shape, %zu in bytes from "
               "llama.cpp's %s\n",
               p->ours_path, p->first, p->n_types, p->n_bytes, p->theirs_path);
        return -1;
    }
    printf("ok %s: the same %zu tensors as llama.cpp's own quantizer wrote (types, shapes, "
           "bytes",
           p->ours_path, o->n_tensors);
    if (p->n_own)
        printf("; its %zu tensors of %s with importance no worse by the weighted error: %" PRIu64
               " blocks, %" PRIu64 " better",
               p->n_own, p->own, p->weighted.blocks, p->weighted.better);
    printf(")\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 6) {
        fprintf(stderr, "usage: %s OURS.gguf THEIRS.gguf [TYPE,... IN.gguf IMATRIX.gguf]\n",
                argv[0]);
        return 2;
    }
    pair p = {.ours_path = argv[1], .theirs_path = argv[2], .own = argc == 6 ? argv[3] : NULL};
    quant_ck_error err;
    char msg[512];
    int rc = -1;
    if (quant_gguf_open(argv[1], &p.ours, &err) || quant_gguf_open(argv[2], &p.theirs, &err) ||
        (argc == 6 && quant_gguf_open(argv[4], &p.in, &err)))
        printf("FAIL %s\n", err.message);
    else if (argc == 6 && lc_imatrix_read(argv[5], &p.imatrix, msg, sizeof msg))
        printf("FAIL %s\n", msg);
    else
        rc = compare(&p);
    free(p.a);
    free(p.b);
    lc_imatrix_free(p.imatrix);
    quant_gguf_close(p.in);
    quant_gguf_close(p.ours);
    quant_gguf_close(p.theirs);
    return rc ? 1 : 0;
}
