/* test_st_read.c -- the safetensors reader: the dtype table, valid files (every kind of dtype,
 * rank 0, zero-size tensors, metadata, leading whitespace, tensors listed out of data order),
 * lookups and ranged reads, the same over an open descriptor (quant_st_open_fd: the name shown,
 * the descriptor owned and closed, also on failure) and over a buffer in memory
 * (quant_st_open_buffer), and the malformed corpus in tests/data/bad (each file, from disk and
 * from memory, must fail as a format error whose message names the file or buffer and contains
 * the case's .expect text).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckutil.h"
#include "quant_st.h"

/* make-bad.py writes this many cases; the suite fails if files go missing. */
#define MIN_BAD_CASES 40

static quant_st_file *open_ok(const char *path)
{
    quant_st_file *f = NULL;
    quant_ck_error err;
    quant_ck_status st = quant_st_open(path, &f, &err);
    ck_assert_msg(st == QUANT_CK_OK, "%s", err.message);
    ck_assert_ptr_nonnull(f);
    return f;
}

static void assert_shape(const quant_st_tensor *t, int rank, const int64_t *shape)
{
    ck_assert_int_eq(t->rank, rank);
    for (int i = 0; i < rank; i++) ck_assert_int_eq(t->shape[i], shape[i]);
}

START_TEST(test_dtype_table)
{
    for (int i = 0; i < QUANT_ST_DTYPE_COUNT; i++) {
        const char *name = quant_st_dtype_name((quant_st_dtype)i);
        ck_assert_ptr_nonnull(name);
        quant_st_dtype d;
        ck_assert(quant_st_dtype_parse(name, &d));
        ck_assert_int_eq(d, i);
        int bits = quant_st_dtype_bits(d), align = quant_st_dtype_align(d);
        ck_assert(bits == 4 || bits == 6 || bits == 8 || bits == 16 || bits == 32 || bits == 64);
        ck_assert_int_eq(align, bits < 8 ? 1 : bits / 8);
        quant_dtype q;
        if (quant_st_to_quant_dtype(d, &q)) {
            ck_assert_int_eq(quant_st_from_quant_dtype(q), d);
            ck_assert_uint_eq(quant_dtype_size(q) * 8, (unsigned)bits);
        }
    }
    for (int q = 0; q < QUANT_DTYPE_COUNT; q++) {
        quant_dtype back;
        quant_st_dtype d = quant_st_from_quant_dtype((quant_dtype)q);
        ck_assert(quant_st_to_quant_dtype(d, &back));
        ck_assert_int_eq(back, q);
    }
    ck_assert_ptr_null(quant_st_dtype_name(QUANT_ST_DTYPE_COUNT));
    ck_assert(!quant_st_dtype_parse("f32", NULL));
    ck_assert(!quant_st_dtype_parse("I4", NULL));
    ck_assert_int_eq(quant_st_dtype_bits(QUANT_ST_F4), 4);
    ck_assert_int_eq(quant_st_dtype_bits(QUANT_ST_F6_E3M2), 6);
    ck_assert_int_eq(quant_st_dtype_bits(QUANT_ST_C64), 64);
    ck_assert_int_eq(quant_st_dtype_align(QUANT_ST_BOOL), 1);
    ck_assert(!quant_st_to_quant_dtype(QUANT_ST_U16, NULL));
}
END_TEST

/* Bytes 0, 1, 2, ... offset by `seed`. */
static unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 7 + seed);
    return p;
}

START_TEST(test_valid_dtypes)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "ok.safetensors");
    enum { N = 8 };
    kit_st_tensor t[N] = {
        {"bf16", "BF16", 2, {2, 3}, NULL, 12}, {"fp8", "F8_E4M3", 1, {5}, NULL, 5},
        {"i64", "I64", 1, {3}, NULL, 24},      {"mask", "BOOL", 2, {2, 2}, NULL, 4},
        {"f4", "F4", 2, {3, 2}, NULL, 3},      {"scalar", "F32", 0, {0}, NULL, 4},
        {"empty", "F16", 2, {0, 7}, NULL, 0},  {"c", "C64", 1, {1}, NULL, 8},
    };
    for (int i = 0; i < N; i++) t[i].data = pattern(t[i].nbytes, (unsigned)i);
    ck_gen_file(path, t, N, "{\"format\": \"pt\", \"note\": \"h\\u00e9llo\"}");
    quant_st_file *f = open_ok(path);
    ck_assert_uint_eq(f->n_tensors, N);
    ck_assert_uint_eq(f->n_meta, 2);
    ck_assert_str_eq(f->meta_keys[0], "format");
    ck_assert_str_eq(quant_st_meta(f, "note"), "h\xc3\xa9llo");
    ck_assert_ptr_null(quant_st_meta(f, "absent"));
    ck_assert_uint_eq(f->data_start, 8 + f->header_len);
    for (size_t i = 1; i < f->n_tensors; i++)
        ck_assert_uint_le(f->tensors[i - 1].end, f->tensors[i].begin);
    for (int i = 0; i < N; i++) {
        const quant_st_tensor *q = quant_st_find(f, t[i].name);
        ck_assert_msg(q != NULL, "%s not found", t[i].name);
        ck_assert_str_eq(quant_st_dtype_name(q->dtype), t[i].dtype);
        assert_shape(q, t[i].rank, t[i].shape);
        ck_assert_uint_eq(quant_st_nbytes(q), t[i].nbytes);
        unsigned char got[32];
        quant_ck_error err;
        ck_assert_int_eq(quant_st_read(f, q, 0, got, t[i].nbytes, &err), QUANT_CK_OK);
        ck_assert_int_eq(memcmp(got, t[i].data, t[i].nbytes), 0);
        free((void *)t[i].data);
    }
    ck_assert_ptr_null(quant_st_find(f, "missing"));
    ck_assert_ptr_null(quant_st_find(f, "__metadata__"));
    quant_st_close(f);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

START_TEST(test_ranged_read)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "r.safetensors");
    unsigned char *data = pattern(40, 3);
    kit_st_tensor t[2] = {{"a", "U8", 1, {24}, data, 24}, {"b", "I16", 1, {8}, data + 24, 16}};
    ck_gen_file(path, t, 2, NULL);
    quant_st_file *f = open_ok(path);
    ck_assert_uint_eq(f->n_meta, 0);
    const quant_st_tensor *b = quant_st_find(f, "b");
    unsigned char got[16];
    quant_ck_error err;
    ck_assert_int_eq(quant_st_read(f, b, 5, got, 11, &err), QUANT_CK_OK);
    ck_assert_int_eq(memcmp(got, data + 29, 11), 0);
    ck_assert_int_eq(quant_st_read(f, b, 16, got, 0, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_st_read(f, b, 6, got, 11, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "tensor 'b'"));
    ck_assert_int_eq(quant_st_read(f, b, 17, got, 0, NULL), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_st_read(f, b, UINT64_MAX, got, 2, NULL), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_st_read(f, b, 1, got, SIZE_MAX, NULL), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_st_read(f, NULL, 0, got, 1, NULL), QUANT_CK_ERR_ARG);
    /* The file shrinking under an open reader is an i/o error, not garbage. */
    ck_assert_int_eq(truncate(path, (off_t)(f->data_start + 30)), 0);
    ck_assert_int_eq(quant_st_read(f, b, 0, got, 16, &err), QUANT_CK_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, path));
    quant_st_close(f);
    quant_st_close(NULL);
    kit_rmtree(dir);
    free(data);
    free(path);
    free(dir);
}
END_TEST

/* Leading and trailing JSON whitespace, tensors listed out of data order, zero-size tensors at
 * one offset, `__metadata__: null`, an empty header object. */
START_TEST(test_header_forms)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "h.safetensors");
    unsigned char data[12] = {0};
    ck_write_st(path,
                " \n\t{\"z\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]},"
                "\"e2\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[8,8]},"
                "\"__metadata__\":null,"
                "\"a\":{\"shape\":[2],\"data_offsets\":[0,8],\"dtype\":\"F32\"},"
                "\"e1\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[0,0]}} \r\n",
                data, sizeof data);
    quant_st_file *f = open_ok(path);
    const char *order[] = {"e1", "a", "e2", "z"};
    ck_assert_uint_eq(f->n_tensors, 4);
    for (int i = 0; i < 4; i++) ck_assert_str_eq(f->tensors[i].name, order[i]);
    ck_assert_uint_eq(f->n_meta, 0);
    ck_assert_uint_eq(quant_st_nbytes(quant_st_find(f, "e2")), 0);
    quant_st_close(f);
    ck_write_st(path, "{}", NULL, 0);
    f = open_ok(path);
    ck_assert_uint_eq(f->n_tensors, 0);
    ck_assert_ptr_null(quant_st_find(f, "a"));
    quant_st_close(f);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

START_TEST(test_many_tensors)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "m.safetensors");
    enum { N = 1000 };
    kit_st_tensor *t = calloc(N, sizeof *t);
    char(*names)[16] = calloc(N, sizeof *names);
    float v[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "t.%d", (i * 7919) % N);
        v[i] = (float)i;
        t[i] = (kit_st_tensor){names[i], "F32", 1, {1}, &v[i], 4};
    }
    ck_gen_file(path, t, N, NULL);
    quant_st_file *f = open_ok(path);
    for (int i = 0; i < N; i++) {
        const quant_st_tensor *q = quant_st_find(f, names[i]);
        ck_assert_ptr_nonnull(q);
        float x;
        ck_assert_int_eq(quant_st_read(f, q, 0, &x, 4, NULL), QUANT_CK_OK);
        ck_assert(x == v[i]);
    }
    quant_st_close(f);
    kit_rmtree(dir);
    free(t);
    free(names);
    free(path);
    free(dir);
}
END_TEST

START_TEST(test_open_errors)
{
    quant_st_file *f = (quant_st_file *)1;
    quant_ck_error err;
    ck_assert_int_eq(quant_st_open("/nonexistent/x.safetensors", &f, &err), QUANT_CK_ERR_IO);
    ck_assert_ptr_null(f);
    ck_assert_ptr_nonnull(strstr(err.message, "/nonexistent/x.safetensors: "));
    char *dir = ck_tmpdir();
    ck_assert_int_eq(quant_st_open(dir, &f, &err), QUANT_CK_ERR_IO);
    ck_assert_int_eq(quant_st_open(NULL, &f, &err), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_st_open(dir, NULL, NULL), QUANT_CK_ERR_ARG);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* Files that are not safetensors at all (a model card, a PyTorch zip, a PNG, a JSON file, an
 * ONNX-like binary) are named as such, not as a "header length ... is too large". */
START_TEST(test_not_safetensors)
{
    static const struct {
        const char *name;
        const char *bytes;
        size_t n;
    } cases[] = {
        {"README.md", "# Model card\n\nThis model was trained on TinyStories.\n", 53},
        {"pytorch_model.bin",
         ("PK\x03\x04\x14\x00\x00\x00\x08\x00"
          "archive/data.pkl"),
         26},
        {"model.png", "\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x00\x10", 20},
        {"config.json", "{\"model_type\": \"llama\", \"hidden_size\": 64}", 42},
        /* a small length, then bytes that are not a JSON header */
        {"small.bin", "\x04\x00\x00\x00\x00\x00\x00\x00\xff\xfe\x00\x01rest", 16},
    };
    char *dir = ck_tmpdir();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = kit_join(dir, cases[i].name);
        ck_write_file(path, cases[i].bytes, cases[i].n);
        quant_st_file *f = NULL;
        quant_ck_error err;
        ck_assert_int_eq(quant_st_open(path, &f, &err), QUANT_CK_ERR_FORMAT);
        ck_assert_msg(strncmp(err.message, path, strlen(path)) == 0 &&
                          strstr(err.message, ": not a safetensors file (") != NULL &&
                          strstr(err.message, "too large") == NULL,
                      "%s: '%s'", cases[i].name, err.message);
        ck_assert_int_eq(quant_st_open_buffer(cases[i].bytes, cases[i].n, "body", &f, &err),
                         QUANT_CK_ERR_FORMAT);
        ck_assert_msg(strncmp(err.message, "body: not a safetensors file (", 30) == 0, "%s: '%s'",
                      cases[i].name, err.message);
        free(path);
    }
    /* A safetensors file cut short inside its header is still called truncated. */
    char *cut = kit_join(dir, "cut.safetensors");
    ck_write_st(cut, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "\0\0\0\0",
                4);
    size_t n = 0;
    char *bytes = kit_read_file(cut, &n);
    ck_write_file(cut, bytes, 20);
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_int_eq(quant_st_open(cut, &f, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "runs past the end") && !strstr(err.message, "not a"), "%s",
                  err.message);
    free(bytes);
    free(cut);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* A descriptor is closed by now (quant_st_open_fd took it). */
static void assert_closed(int fd)
{
    errno = 0;
    ck_assert_int_eq(fcntl(fd, F_GETFD), -1);
    ck_assert_int_eq(errno, EBADF);
}

/* quant_st_open_fd reads as quant_st_open does, under the name given; it owns the descriptor
 * (closed by quant_st_close, and on every failure); a FIFO fails at once. */
START_TEST(test_open_fd)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "m.safetensors");
    unsigned char *data = pattern(24, 3);
    kit_st_tensor t[1] = {{"w", "F32", 2, {2, 3}, data, 24}};
    ck_gen_file(path, t, 1, NULL);
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    ck_assert_int_ge(fd, 0);
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_int_eq(quant_st_open_fd(fd, "llama/m.safetensors", &f, &err), QUANT_CK_OK);
    ck_assert_int_eq(f->fd, fd);
    ck_assert_int_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    ck_assert_str_eq(f->path, "llama/m.safetensors");
    unsigned char got[24];
    ck_assert_int_eq(quant_st_read(f, quant_st_find(f, "w"), 0, got, 24, &err), QUANT_CK_OK);
    ck_assert_int_eq(memcmp(got, data, 24), 0);
    ck_assert_int_eq(quant_st_read(f, quant_st_find(f, "w"), 1, got, 24, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "llama/m.safetensors: tensor 'w'"));
    quant_st_close(f);
    assert_closed(fd);
    /* a malformed file: the message names it, the descriptor is closed */
    char *bad = kit_join(dir, "bad.safetensors");
    ck_write_file(bad, "1234", 4);
    fd = open(bad, O_RDONLY);
    ck_assert_int_eq(quant_st_open_fd(fd, "llama/bad.safetensors", &f, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_ptr_null(f);
    ck_assert_ptr_nonnull(strstr(err.message, "llama/bad.safetensors: "));
    assert_closed(fd);
    /* not a regular file: a directory, a FIFO (never blocks) */
    fd = open(dir, O_RDONLY | O_DIRECTORY);
    ck_assert_int_eq(quant_st_open_fd(fd, "llama", &f, &err), QUANT_CK_ERR_IO);
    ck_assert_str_eq(err.message, "llama: not a regular file");
    assert_closed(fd);
    char *fifo = kit_join(dir, "fifo.safetensors");
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    ck_assert_int_eq(quant_st_open(fifo, &f, &err), QUANT_CK_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "not a regular file"));
    /* bad arguments: the descriptor is still consumed */
    fd = open(path, O_RDONLY);
    ck_assert_int_eq(quant_st_open_fd(fd, NULL, &f, &err), QUANT_CK_ERR_ARG);
    assert_closed(fd);
    fd = open(path, O_RDONLY);
    ck_assert_int_eq(quant_st_open_fd(fd, "x", NULL, NULL), QUANT_CK_ERR_ARG);
    assert_closed(fd);
    ck_assert_int_eq(quant_st_open_fd(-1, "x", &f, &err), QUANT_CK_ERR_ARG);
    free(fifo);
    free(bad);
    free(data);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

/* A file read into memory and opened with quant_st_open_buffer reads the same as from disk:
 * tensors, metadata, ranged reads and their range checks; the buffer is not copied. */
START_TEST(test_open_buffer)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "m.safetensors");
    unsigned char *data = pattern(40, 5);
    kit_st_tensor t[3] = {{"layers/0/absmax", "F32", 2, {2, 3}, data, 24},
                          {"b", "BF16", 1, {4}, data + 24, 8},
                          {"s", "F16", 0, {0}, data + 32, 2}};
    ck_gen_file(path, t, 3, "{\"step\": \"7\"}");
    size_t n;
    unsigned char *bytes = kit_read_file(path, &n);
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_int_eq(quant_st_open_buffer(bytes, n, "body", &f, &err), QUANT_CK_OK);
    ck_assert_int_eq(f->fd, -1);
    ck_assert_str_eq(f->path, "body");
    ck_assert_uint_eq(f->file_size, n);
    ck_assert_uint_eq(f->n_tensors, 3);
    ck_assert_str_eq(quant_st_meta(f, "step"), "7");
    for (int i = 0; i < 3; i++) {
        const quant_st_tensor *q = quant_st_find(f, t[i].name);
        ck_assert_ptr_nonnull(q);
        assert_shape(q, t[i].rank, t[i].shape);
        unsigned char got[24];
        ck_assert_int_eq(quant_st_read(f, q, 0, got, t[i].nbytes, &err), QUANT_CK_OK);
        ck_assert_int_eq(memcmp(got, t[i].data, t[i].nbytes), 0);
    }
    const quant_st_tensor *a = quant_st_find(f, "layers/0/absmax");
    unsigned char got[8];
    ck_assert_int_eq(quant_st_read(f, a, 20, got, 4, &err), QUANT_CK_OK);
    ck_assert_int_eq(memcmp(got, data + 20, 4), 0);
    ck_assert_int_eq(quant_st_read(f, a, 21, got, 4, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "body: tensor 'layers/0/absmax'"));
    quant_st_close(f);
    /* the same checks as a file: one byte short, one byte more, an empty buffer */
    ck_assert_int_eq(quant_st_open_buffer(bytes, n - 1, "body", &f, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "truncated"));
    ck_assert_int_eq(quant_st_open_buffer(bytes, 0, "body", &f, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "body: empty"));
    ck_assert_int_eq(quant_st_open_buffer(bytes, 7, "body", &f, &err), QUANT_CK_ERR_FORMAT);
    unsigned char *more = malloc(n + 1);
    memcpy(more, bytes, n);
    more[n] = 0;
    ck_assert_int_eq(quant_st_open_buffer(more, n + 1, "body", &f, &err), QUANT_CK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "1 trailing bytes"));
    ck_assert_ptr_null(f);
    ck_assert_int_eq(quant_st_open_buffer(NULL, 0, "body", &f, &err), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_st_open_buffer(bytes, n, NULL, &f, &err), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_st_open_buffer(bytes, n, "body", NULL, NULL), QUANT_CK_ERR_ARG);
    free(more);
    free(bytes);
    free(data);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

/* The .expect text, without its final newline. */
static char *read_expect(const char *path)
{
    size_t n;
    char *s = kit_read_file(path, &n);
    ck_assert_msg(s != NULL, "%s is missing", path);
    char *z = realloc(s, n + 1);
    ck_assert_ptr_nonnull(z);
    while (n > 0 && (z[n - 1] == '\n' || z[n - 1] == '\r')) n--;
    z[n] = '\0';
    return z;
}

/* The same bytes through quant_st_open_buffer: the same fault, named after the buffer. */
static void check_bad_buffer(const char *path, const char *file, const char *expect)
{
    size_t n;
    void *bytes = kit_read_file(path, &n);
    ck_assert_ptr_nonnull(bytes);
    quant_st_file *f = (quant_st_file *)1;
    quant_ck_error err;
    quant_ck_status st = quant_st_open_buffer(bytes, n, "request body", &f, &err);
    ck_assert_msg(st == QUANT_CK_ERR_FORMAT, "%s (buffer): status %d (%s)", file, st,
                  st ? err.message : "accepted");
    ck_assert_ptr_null(f);
    ck_assert_msg(strncmp(err.message, "request body: ", 14) == 0, "%s: message \"%s\"", file,
                  err.message);
    ck_assert_msg(strstr(err.message, expect) != NULL, "%s (buffer): message \"%s\" lacks \"%s\"",
                  file, err.message, expect);
    free(bytes);
}

static void check_bad_case(const char *dir, const char *file)
{
    char *path = kit_join(dir, file);
    char *expect_path = strdup(path);
    ck_assert_ptr_nonnull(expect_path);
    strcpy(expect_path + strlen(expect_path) - strlen(".safetensors"), ".expect");
    char *expect = read_expect(expect_path);
    quant_st_file *f = NULL;
    quant_ck_error err;
    quant_ck_status st = quant_st_open(path, &f, &err);
    ck_assert_msg(st == QUANT_CK_ERR_FORMAT, "%s: status %d (%s)", file, st,
                  st ? err.message : "accepted");
    ck_assert_ptr_null(f);
    ck_assert_msg(strncmp(err.message, path, strlen(path)) == 0, "%s: message \"%s\"", file,
                  err.message);
    ck_assert_msg(strstr(err.message, expect) != NULL, "%s: message \"%s\" lacks \"%s\"", file,
                  err.message, expect);
    check_bad_buffer(path, file, expect);
    free(expect);
    free(expect_path);
    free(path);
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

START_TEST(test_bad_corpus)
{
    char *dir = kit_join(ck_data_dir(), "bad");
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    int cases = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!has_suffix(e->d_name, ".safetensors")) continue;
        check_bad_case(dir, e->d_name);
        cases++;
    }
    closedir(d);
    ck_assert_msg(cases >= MIN_BAD_CASES, "%d cases in %s, expected at least %d", cases, dir,
                  MIN_BAD_CASES);
    free(dir);
}
END_TEST

Suite *suite_st_read(void)
{
    Suite *s = suite_create("st_read");
    TCase *tc = tcase_create("st_read");
    tcase_add_test(tc, test_dtype_table);
    tcase_add_test(tc, test_valid_dtypes);
    tcase_add_test(tc, test_ranged_read);
    tcase_add_test(tc, test_header_forms);
    tcase_add_test(tc, test_many_tensors);
    tcase_add_test(tc, test_open_errors);
    tcase_add_test(tc, test_not_safetensors);
    tcase_add_test(tc, test_open_fd);
    tcase_add_test(tc, test_open_buffer);
    tcase_add_test(tc, test_bad_corpus);
    suite_add_tcase(s, tc);
    return s;
}
