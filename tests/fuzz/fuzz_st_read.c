/* fuzz_st_read.c -- libFuzzer harness of the safetensors reader: the input is a whole file,
 * opened in memory with quant_st_open_buffer(); a file it accepts must keep every promise of
 * quant_st.h (tensors in data order tiling the byte buffer exactly, names found by
 * quant_st_find(), metadata by quant_st_meta()), and the data of each small tensor is read back
 * (whole, in two parts, and out of range) and, for float dtypes, widened to F32.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "quant.h"
#include "quant_st.h"

#define NAME       "fuzz.safetensors"
#define SMALL_DATA (64u << 10) /* tensors up to this many bytes are read back */

static void check_read(const quant_st_file *f, const quant_st_tensor *t, const uint8_t *data)
{
    uint64_t nbytes = quant_st_nbytes(t);
    const uint8_t *want = data + f->data_start + t->begin;
    unsigned char *buf = malloc(nbytes ? nbytes : 1);
    FUZZ_CHECK(buf);
    quant_ck_error err;
    FUZZ_CHECK(quant_st_read(f, t, 0, buf, nbytes, &err) == QUANT_CK_OK);
    FUZZ_CHECK(nbytes == 0 || memcmp(buf, want, nbytes) == 0);
    uint64_t half = nbytes / 2;
    FUZZ_CHECK(quant_st_read(f, t, half, buf, nbytes - half, &err) == QUANT_CK_OK);
    FUZZ_CHECK(nbytes == half || memcmp(buf, want + half, nbytes - half) == 0);
    /* one byte past the end, and a length that would wrap */
    FUZZ_CHECK(quant_st_read(f, t, nbytes, buf, 1, &err) == QUANT_CK_ERR_ARG);
    FUZZ_CHECK(quant_st_read(f, t, 1, buf, (size_t)-1, &err) == QUANT_CK_ERR_ARG);

    quant_dtype qd;
    if (quant_st_to_quant_dtype(t->dtype, &qd) && quant_dtype_is_float(qd)) {
        int64_t n = quant_numel(t->rank, t->shape);
        FUZZ_CHECK(n >= 0 && (uint64_t)n * quant_dtype_size(qd) == nbytes);
        float *out = malloc(n ? (size_t)n * sizeof *out : 1);
        FUZZ_CHECK(out);
        quant_error qerr;
        FUZZ_CHECK(quant_convert(qd, buf, QUANT_DTYPE_F32, out, n, &qerr) == QUANT_OK);
        free(out);
    }
    free(buf);
}

static void check_file(const quant_st_file *f, const uint8_t *data, size_t size)
{
    FUZZ_CHECK(strcmp(f->path, NAME) == 0 && f->fd == -1);
    FUZZ_CHECK(f->file_size == size);
    FUZZ_CHECK(f->header_len <= QUANT_ST_MAX_HEADER && f->data_start == 8 + f->header_len);
    FUZZ_CHECK(f->data_start <= size);
    uint64_t pos = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const quant_st_tensor *t = &f->tensors[i];
        FUZZ_CHECK(t->name && t->rank >= 0 && t->rank <= QUANT_MAX_RANK);
        FUZZ_CHECK(t->begin == pos && t->end >= t->begin);
        FUZZ_CHECK(quant_st_dtype_name(t->dtype) != NULL);
        pos = t->end;
        FUZZ_CHECK(quant_st_find(f, t->name) == t);
        if (quant_st_nbytes(t) <= SMALL_DATA) check_read(f, t, data);
    }
    FUZZ_CHECK(pos == size - f->data_start);
    for (size_t i = 0; i < f->n_meta; i++) {
        const char *v = quant_st_meta(f, f->meta_keys[i]);
        FUZZ_CHECK(v && strcmp(v, f->meta_values[i]) == 0);
    }
    /* names that are almost there */
    FUZZ_CHECK(quant_st_find(f, "") == NULL || f->n_tensors > 0);
    if (f->n_tensors > 0) {
        size_t len = strlen(f->tensors[0].name);
        char *longer = malloc(len + 2);
        FUZZ_CHECK(longer);
        memcpy(longer, f->tensors[0].name, len);
        memcpy(longer + len, "\x01", 2);
        const quant_st_tensor *t = quant_st_find(f, longer);
        FUZZ_CHECK(!t || strcmp(t->name, longer) == 0);
        free(longer);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the reader takes any pointer for an empty buffer; never hand it NULL */
    static const uint8_t empty[1];
    const uint8_t *buf = size ? data : empty;
    quant_st_file *f = (quant_st_file *)1;
    quant_ck_error err;
    quant_ck_status st = quant_st_open_buffer(buf, size, NAME, &f, &err);
    if (st != QUANT_CK_OK) {
        FUZZ_CHECK(f == NULL);
        FUZZ_CHECK(st == QUANT_CK_ERR_FORMAT || st == QUANT_CK_ERR_NOMEM);
        FUZZ_CHECK(err.status == st && strncmp(err.message, NAME ": ", strlen(NAME ": ")) == 0);
        FUZZ_CHECK(memchr(err.message, '\0', sizeof err.message) != NULL);
        return 0;
    }
    check_file(f, buf, size);
    quant_st_close(f);
    return 0;
}
