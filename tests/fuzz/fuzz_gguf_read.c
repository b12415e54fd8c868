/* fuzz_gguf_read.c -- libFuzzer harness of the GGUF reader: the input is a whole file, opened in
 * memory with quant_gguf_open_buffer(); a file it accepts must keep every promise of
 * quant_gguf.h (pairs with known types and raw bytes their decoders walk exactly, unique keys and
 * names found by the lookups, tensors contiguous in info order and padded to the alignment,
 * inside the buffer, sized by the traits table), and each small tensor is read back (whole, by
 * rows, out of range) and dequantized to F32. A refused file hands nothing out and its message
 * names it.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "quant_gguf.h"

#define NAME       "fuzz.gguf"
#define SMALL_DATA (64u << 10) /* tensors up to this many bytes are read back */

/* Walks a pair's elements with the decoders; the raw bytes must hold exactly them. */
static void check_kv(const quant_gguf_file *f, const quant_gguf_kv *kv)
{
    FUZZ_CHECK(kv->key && kv->key[0] && quant_gguf_find_kv(f, kv->key) == kv);
    FUZZ_CHECK(quant_gguf_type_name(kv->type) && quant_gguf_type_name(kv->elem));
    FUZZ_CHECK(kv->elem != QUANT_GGUF_ARRAY);
    FUZZ_CHECK(kv->type == QUANT_GGUF_ARRAY || (kv->elem == kv->type && kv->n == 1));
    FUZZ_CHECK(kv->n <= QUANT_GGUF_MAX_ARRAY);
    size_t head = kv->type == QUANT_GGUF_ARRAY ? 12 : 0;
    if (kv->elem == QUANT_GGUF_STRING) {
        size_t cursor = 0, count = 0;
        const char *s;
        uint64_t len;
        while (quant_gguf_kv_next_string(kv, &cursor, &s, &len)) {
            FUZZ_CHECK(len <= QUANT_GGUF_MAX_STRING && s >= (const char *)kv->raw);
            count++;
        }
        FUZZ_CHECK(count == kv->n && (cursor == kv->raw_len || kv->n == 0));
        FUZZ_CHECK(kv->type != QUANT_GGUF_STRING || strlen(kv->str) <= kv->raw_len - 8);
        return;
    }
    FUZZ_CHECK(kv->raw_len == head + kv->n * quant_gguf_type_size(kv->elem));
    bool is_float = kv->elem == QUANT_GGUF_F32 || kv->elem == QUANT_GGUF_F64;
    for (uint64_t i = 0; i < kv->n && i < 64; i++) {
        int64_t v;
        double d;
        FUZZ_CHECK(quant_gguf_kv_float(kv, i, &d) == is_float);
        FUZZ_CHECK(quant_gguf_kv_int(kv, i, &v) || is_float || kv->elem == QUANT_GGUF_U64);
    }
    int64_t v;
    FUZZ_CHECK(!quant_gguf_kv_int(kv, kv->n, &v));
}

static void check_tensor(const quant_gguf_file *f, const quant_gguf_tensor *t, uint64_t pos,
                         const uint8_t *data)
{
    FUZZ_CHECK(t->name && strlen(t->name) < QUANT_GGUF_MAX_NAME);
    FUZZ_CHECK(quant_gguf_find_tensor(f, t->name) == t);
    FUZZ_CHECK(t->n_dims >= 0 && t->n_dims <= QUANT_GGUF_MAX_DIMS);
    FUZZ_CHECK(t->traits && quant_ggml_traits_get(t->type) == t->traits);
    FUZZ_CHECK(t->offset == pos && t->offset % f->alignment == 0);
    FUZZ_CHECK(t->ne[0] % t->traits->block == 0 && t->ne[1] * t->ne[2] * t->ne[3] == t->nrows);
    FUZZ_CHECK(t->nbytes == t->row_bytes * (uint64_t)t->nrows);
    FUZZ_CHECK(f->data_start + t->offset + t->nbytes <= f->file_size);
    int64_t shape[QUANT_GGUF_MAX_DIMS];
    FUZZ_CHECK(quant_gguf_shape(t, shape) == t->n_dims);
    if (t->nbytes > SMALL_DATA || t->nbytes == 0) return;
    unsigned char *buf = malloc(t->nbytes);
    FUZZ_CHECK(buf);
    quant_ck_error err;
    FUZZ_CHECK(quant_gguf_read(f, t, 0, buf, t->nbytes, &err) == QUANT_CK_OK);
    FUZZ_CHECK(memcmp(buf, data + f->data_start + t->offset, t->nbytes) == 0);
    FUZZ_CHECK(quant_gguf_read(f, t, t->nbytes, buf, 1, &err) == QUANT_CK_ERR_ARG);
    FUZZ_CHECK(quant_gguf_read(f, t, 1, buf, (size_t)-1, &err) == QUANT_CK_ERR_ARG);
    FUZZ_CHECK(quant_gguf_read_rows(f, t, t->nrows - 1, 1, buf, &err) == QUANT_CK_OK);
    FUZZ_CHECK(quant_gguf_read_rows(f, t, t->nrows, 1, buf, &err) == QUANT_CK_ERR_ARG);
    FUZZ_CHECK(quant_gguf_read_rows(f, t, 0, t->nrows, buf, &err) == QUANT_CK_OK);
    uint64_t n = (uint64_t)t->ne[0] * (uint64_t)t->nrows;
    if (n <= SMALL_DATA) {
        float *x = malloc(n * sizeof *x);
        quant_error qe;
        FUZZ_CHECK(x);
        FUZZ_CHECK(quant_ggml_dequantize(NULL, t->type, buf, t->nrows, t->ne[0], x, &qe) ==
                   QUANT_OK);
        free(x);
    }
    free(buf);
}

static void check_file(const quant_gguf_file *f, const uint8_t *data, size_t size)
{
    FUZZ_CHECK(strcmp(f->path, NAME) == 0 && f->fd == -1 && f->file_size == size);
    FUZZ_CHECK(f->version == 2 || f->version == 3);
    FUZZ_CHECK(f->alignment && (f->alignment & (f->alignment - 1)) == 0);
    FUZZ_CHECK(f->data_start % f->alignment == 0);
    for (size_t i = 0; i < f->n_kv; i++) check_kv(f, &f->kv[i]);
    uint64_t pos = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const quant_gguf_tensor *t = &f->tensors[i];
        check_tensor(f, t, pos, data);
        pos = (t->offset + t->nbytes + f->alignment - 1) / f->alignment * f->alignment;
    }
    FUZZ_CHECK(pos == f->data_size);
    FUZZ_CHECK(f->n_tensors == 0 || f->data_start <= size);
    /* the typed accessors on a few keys a model reads */
    static const char *const keys[] = {"general.architecture", "general.alignment",
                                       "llama.block_count", "tokenizer.ggml.tokens"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        quant_ck_error err;
        uint32_t u;
        const char *s;
        const quant_gguf_kv *kv;
        quant_ck_status st = quant_gguf_get_u32(f, keys[i], &u, &err);
        FUZZ_CHECK(st == QUANT_CK_OK || st == QUANT_CK_ERR_FORMAT);
        st = quant_gguf_get_string(f, keys[i], &s, &err);
        FUZZ_CHECK(st != QUANT_CK_OK || (s && strlen(s) < size));
        st = quant_gguf_get_u32_layer(f, keys[i], 3, &u, &err);
        FUZZ_CHECK(st == QUANT_CK_OK || st == QUANT_CK_ERR_FORMAT);
        st = quant_gguf_get_array(f, keys[i], QUANT_GGUF_TYPE_COUNT, &kv, &err);
        FUZZ_CHECK(st != QUANT_CK_OK || kv->type == QUANT_GGUF_ARRAY);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t empty[1];
    const uint8_t *buf = size ? data : empty;
    quant_gguf_file *f = (quant_gguf_file *)1;
    quant_ck_error err;
    quant_ck_status st = quant_gguf_open_buffer(buf, size, NAME, &f, &err);
    if (st != QUANT_CK_OK) {
        FUZZ_CHECK(f == NULL);
        FUZZ_CHECK(st == QUANT_CK_ERR_FORMAT || st == QUANT_CK_ERR_NOMEM);
        FUZZ_CHECK(err.status == st && strncmp(err.message, NAME ": ", strlen(NAME ": ")) == 0);
        FUZZ_CHECK(memchr(err.message, '\0', sizeof err.message) != NULL);
        return 0;
    }
    check_file(f, buf, size);
    quant_gguf_close(f);
    return 0;
}
