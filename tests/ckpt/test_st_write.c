/* test_st_write.c -- the safetensors writer: the reference layout byte for byte, a round trip
 * through the reader (every dtype kind, rank 0, zero-size, metadata, alignment, pieces written
 * from several threads), atomic output (nothing on disk without commit, commit replaces a
 * regular file, never a link or a FIFO) and refused arguments.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckutil.h"
#include "quant_st.h"

static quant_st_writer *writer_ok(const char *path, const quant_st_out_tensor *t, size_t n,
                                  const char *const *keys, const char *const *values, size_t n_meta)
{
    quant_st_writer *w = NULL;
    quant_ck_error err;
    quant_ck_status st = quant_st_writer_new(path, t, n, keys, values, n_meta, &w, &err);
    ck_assert_msg(st == QUANT_CK_OK, "%s", err.message);
    ck_assert_ptr_nonnull(w);
    return w;
}

static void commit_ok(quant_st_writer *w)
{
    quant_ck_error err;
    quant_ck_status st = quant_st_writer_commit(w, &err);
    ck_assert_msg(st == QUANT_CK_OK, "%s", err.message);
    quant_st_writer_free(w);
}

/* Byte i of tensor `k`'s data. */
static unsigned char byte_of(size_t k, uint64_t i)
{
    return (unsigned char)(i * 13 + k * 101 + 7);
}

static void fill(unsigned char *p, size_t k, uint64_t off, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = byte_of(k, off + i);
}

/* Three tensors and one metadata pair give exactly the reference writer's bytes. */
START_TEST(test_reference_layout)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "ref.safetensors");
    quant_st_out_tensor t[3] = {
        {"b", QUANT_ST_F32, 1, {1}}, {"a", QUANT_ST_U8, 1, {2}}, {"c", QUANT_ST_F32, 1, {1}}};
    const char *k = "format", *v = "pt";
    quant_st_writer *w = writer_ok(path, t, 3, &k, &v, 1);
    ck_assert_int_eq(quant_st_writer_index(w, "a"), 1);
    ck_assert_int_eq(quant_st_writer_index(w, "c"), 2);
    ck_assert_int_eq(quant_st_writer_index(w, "zz"), -1);
    ck_assert_uint_eq(quant_st_writer_nbytes(w, 1), 2);
    ck_assert_uint_eq(quant_st_writer_total(w), 10);
    commit_ok(w);
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                       "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[8,10]}}";
    size_t n, hl = strlen(want), padded = (hl + 7) / 8 * 8;
    unsigned char *got = kit_read_file(path, &n);
    ck_assert_ptr_nonnull(got);
    ck_assert_uint_eq(n, 8 + padded + 10);
    for (int i = 0; i < 8; i++) ck_assert_uint_eq(got[i], (padded >> (8 * i)) & 0xff);
    ck_assert_int_eq(memcmp(got + 8, want, hl), 0);
    for (size_t i = hl; i < padded; i++) ck_assert_uint_eq(got[8 + i], ' ');
    for (size_t i = 8 + padded; i < n; i++) ck_assert_uint_eq(got[i], 0); /* never written */
    free(got);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

enum { RT_N = 9 };
static const quant_st_out_tensor rt_tensors[RT_N] = {
    {"z.bool", QUANT_ST_BOOL, 2, {3, 3}}, {"f4", QUANT_ST_F4, 2, {5, 2}},
    {"w.bf16", QUANT_ST_BF16, 2, {3, 5}}, {"scalar", QUANT_ST_F64, 0, {0}},
    {"idx", QUANT_ST_I64, 1, {7}},        {"fp8", QUANT_ST_F8_E4M3, 3, {2, 3, 1}},
    {"empty", QUANT_ST_F32, 2, {4, 0}},   {"a.f32", QUANT_ST_F32, 1, {6}},
    {"u16", QUANT_ST_U16, 1, {1}},
};

/* Checks the committed round-trip file with the reader. */
static void check_round_trip(const char *path, const char *const *keys, const char *const *values,
                             size_t n_meta)
{
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_open(path, &f, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_uint_eq(f->header_len % 8, 0);
    ck_assert_uint_eq(f->n_tensors, RT_N);
    ck_assert_uint_eq(f->n_meta, n_meta);
    for (size_t i = 0; i < n_meta; i++) {
        ck_assert_str_eq(f->meta_keys[i], keys[i]); /* header order kept */
        ck_assert_str_eq(f->meta_values[i], values[i]);
    }
    /* the reference writer's order: its enum Dtype descending (so BF16 before U16 although both
     * align to 2), then name */
    static const char *const order[RT_N] = {"idx", "scalar", "a.f32", "empty", "w.bf16",
                                            "u16", "fp8",    "f4",    "z.bool"};
    for (size_t i = 0; i < RT_N; i++) ck_assert_str_eq(f->tensors[i].name, order[i]);
    for (size_t k = 0; k < RT_N; k++) {
        const quant_st_tensor *t = quant_st_find(f, rt_tensors[k].name);
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(t->dtype, rt_tensors[k].dtype);
        ck_assert_int_eq(t->rank, rt_tensors[k].rank);
        for (int a = 0; a < t->rank; a++) ck_assert_int_eq(t->shape[a], rt_tensors[k].shape[a]);
        ck_assert_uint_eq((f->data_start + t->begin) % (uint64_t)quant_st_dtype_align(t->dtype), 0);
        size_t n = (size_t)quant_st_nbytes(t);
        unsigned char got[128], want[128];
        ck_assert_uint_le(n, sizeof got);
        ck_assert_int_eq(quant_st_read(f, t, 0, got, n, &err), QUANT_CK_OK);
        fill(want, k, 0, n);
        ck_assert_msg(memcmp(got, want, n) == 0, "tensor %s differs", t->name);
    }
    quant_st_close(f);
}

START_TEST(test_round_trip)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "rt.safetensors");
    const char *keys[] = {"format", "zeta", "alpha"}, *values[] = {"pt", "\xc3\xa9t\xc3\xa9", ""};
    quant_st_writer *w = writer_ok(path, rt_tensors, RT_N, keys, values, 3);
    uint64_t total = 0;
    for (size_t k = 0; k < RT_N; k++) {
        size_t n = (size_t)quant_st_writer_nbytes(w, k), half = n / 2;
        unsigned char buf[128];
        ck_assert_uint_le(n, sizeof buf);
        total += n;
        fill(buf, k, 0, n); /* in two pieces, the second first */
        ck_assert_int_eq(quant_st_writer_pwrite(w, k, half, buf + half, n - half, NULL),
                         QUANT_CK_OK);
        ck_assert_int_eq(quant_st_writer_pwrite(w, k, 0, buf, half, NULL), QUANT_CK_OK);
        ck_assert_int_eq(quant_st_writer_index(w, rt_tensors[k].name), (long)k);
    }
    ck_assert_uint_eq(quant_st_writer_nbytes(w, 1), 5); /* F4 [5, 2]: 10 nibbles */
    ck_assert_uint_eq(quant_st_writer_total(w), total);
    ck_assert_int_eq(ck_count_entries(dir), 1); /* the temporary file */
    commit_ok(w);
    ck_assert_int_eq(ck_count_entries(dir), 1);
    check_round_trip(path, keys, values, 3);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 0777, 0644);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

typedef struct piece_job {
    quant_st_writer *w;
    size_t tensor;
    uint64_t off;
    size_t n;
} piece_job;

static void *write_piece(void *arg)
{
    piece_job *j = arg;
    unsigned char buf[4096];
    fill(buf, j->tensor, j->off, j->n);
    quant_ck_status st = quant_st_writer_pwrite(j->w, j->tensor, j->off, buf, j->n, NULL);
    return st == QUANT_CK_OK ? arg : NULL;
}

/* Eight threads write interleaved 4 KiB pieces of two tensors. */
START_TEST(test_threads)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "th.safetensors");
    quant_st_out_tensor t[2] = {{"x", QUANT_ST_F32, 2, {64, 64}}, {"y", QUANT_ST_BF16, 1, {8192}}};
    quant_st_writer *w = writer_ok(path, t, 2, NULL, NULL, 0);
    enum { THREADS = 8 };
    piece_job jobs[THREADS];
    pthread_t tid[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (piece_job){w, (size_t)(i % 2), (uint64_t)(i / 2) * 4096, 4096};
        ck_assert_int_eq(pthread_create(&tid[i], NULL, write_piece, &jobs[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        void *ret;
        ck_assert_int_eq(pthread_join(tid[i], &ret), 0);
        ck_assert_ptr_nonnull(ret);
    }
    commit_ok(w);
    quant_st_file *f = NULL;
    ck_assert_int_eq(quant_st_open(path, &f, NULL), QUANT_CK_OK);
    for (size_t k = 0; k < 2; k++) {
        unsigned char got[16384], want[16384];
        ck_assert_int_eq(quant_st_read(f, quant_st_find(f, t[k].name), 0, got, 16384, NULL),
                         QUANT_CK_OK);
        fill(want, k, 0, 16384);
        ck_assert_int_eq(memcmp(got, want, 16384), 0);
    }
    quant_st_close(f);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

/* No tensors, no metadata: "{}" padded to 8 bytes, which the reader accepts. */
START_TEST(test_empty_file)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "e.safetensors");
    quant_st_writer *w = writer_ok(path, NULL, 0, NULL, NULL, 0);
    ck_assert_uint_eq(quant_st_writer_total(w), 0);
    ck_assert_int_eq(quant_st_writer_index(w, "a"), -1);
    commit_ok(w);
    size_t n;
    char *got = kit_read_file(path, &n);
    ck_assert_uint_eq(n, 16);
    ck_assert_int_eq(memcmp(got, "\x08\0\0\0\0\0\0\0{}      ", 16), 0);
    free(got);
    quant_st_file *f = NULL;
    ck_assert_int_eq(quant_st_open(path, &f, NULL), QUANT_CK_OK);
    ck_assert_uint_eq(f->n_tensors, 0);
    quant_st_close(f);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

START_TEST(test_free_without_commit)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "gone.safetensors");
    quant_st_out_tensor t = {"w", QUANT_ST_F32, 1, {4}};
    quant_st_writer *w = writer_ok(path, &t, 1, NULL, NULL, 0);
    float x[4] = {1, 2, 3, 4};
    ck_assert_int_eq(quant_st_writer_pwrite(w, 0, 0, x, sizeof x, NULL), QUANT_CK_OK);
    ck_assert_int_eq(ck_count_entries(dir), 1);
    quant_st_writer_free(w);
    ck_assert_int_eq(ck_count_entries(dir), 0);
    quant_st_writer_free(NULL);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

START_TEST(test_commit_replaces)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "model.safetensors");
    ck_write_file(path, "old contents", 12);
    quant_st_out_tensor t = {"w", QUANT_ST_I32, 1, {2}};
    quant_st_writer *w = writer_ok(path, &t, 1, NULL, NULL, 0);
    int32_t x[2] = {-5, 7};
    ck_assert_int_eq(quant_st_writer_pwrite(w, 0, 0, x, sizeof x, NULL), QUANT_CK_OK);
    ck_assert_int_eq(ck_count_entries(dir), 2);
    quant_ck_error err;
    ck_assert_int_eq(quant_st_writer_commit(w, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_st_writer_pwrite(w, 0, 0, x, 4, NULL), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_st_writer_commit(w, NULL), QUANT_CK_ERR_ARG);
    quant_st_writer_free(w); /* leaves the committed file alone */
    ck_assert_int_eq(ck_count_entries(dir), 1);
    quant_st_file *f = NULL;
    ck_assert_int_eq(quant_st_open(path, &f, NULL), QUANT_CK_OK);
    int32_t y[2];
    ck_assert_int_eq(quant_st_read(f, quant_st_find(f, "w"), 0, y, sizeof y, NULL), QUANT_CK_OK);
    ck_assert(y[0] == -5 && y[1] == 7);
    quant_st_close(f);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

static bool is_type(const char *path, mode_t type)
{
    struct stat sb;
    return lstat(path, &sb) == 0 && (sb.st_mode & S_IFMT) == type;
}

/* The writer's target: a link or a FIFO is refused at once (never written through, never
 * replaced), and again at commit when one appears meanwhile; the temporary is named after its
 * creator and gone either way. */
START_TEST(test_targets)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "m.safetensors");
    char *fifo = kit_join(dir, "fifo.safetensors"), *other = kit_join(dir, "other");
    quant_st_out_tensor t = {"w", QUANT_ST_F32, 1, {2}};
    quant_st_writer *w = NULL;
    quant_ck_error err;
    ck_assert_int_eq(symlink("other", path), 0);
    ck_assert_int_eq(quant_st_writer_new(path, &t, 1, NULL, NULL, 0, &w, &err),
                     QUANT_CK_ERR_ACCESS);
    ck_assert_msg(strstr(err.message, "m.safetensors: a symbolic link"), "%s", err.message);
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    ck_assert_int_eq(quant_st_writer_new(fifo, &t, 1, NULL, NULL, 0, &w, &err),
                     QUANT_CK_ERR_ACCESS);
    ck_assert_msg(strstr(err.message, "not a regular file (a FIFO)"), "%s", err.message);
    ck_assert_int_eq(ck_count_entries(dir), 2); /* the link and the FIFO, nothing else */
    /* a link put at the target while the file is written: commit refuses it, removes the
     * temporary and leaves the link (and what it points to) alone */
    ck_assert_int_eq(unlink(path), 0);
    w = writer_ok(path, &t, 1, NULL, NULL, 0);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "m.safetensors.quant-tmp-%ld-", (long)getpid());
    DIR *d = opendir(dir);
    bool named = false;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        named |= strncmp(e->d_name, prefix, strlen(prefix)) == 0 &&
                 strlen(e->d_name) == strlen(prefix) + 6;
    closedir(d);
    ck_assert_msg(named, "no %sXXXXXX", prefix);
    ck_assert_int_eq(symlink("other", path), 0);
    ck_assert_int_eq(quant_st_writer_commit(w, &err), QUANT_CK_ERR_ACCESS);
    ck_assert_msg(strstr(err.message, "a symbolic link"), "%s", err.message);
    quant_st_writer_free(w);
    ck_assert(is_type(path, S_IFLNK));
    ck_assert(!is_type(other, S_IFREG));
    ck_assert_int_eq(ck_count_entries(dir), 2);
    free(fifo);
    free(other);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

/* writer_new must refuse `t` with QUANT_CK_ERR_ARG and leave `dir` empty. */
static void refuse(const char *dir, const quant_st_out_tensor *t, size_t n, const char *key,
                   const char *value, size_t n_meta, const char *expect)
{
    char *path = kit_join(dir, "x.safetensors");
    quant_st_writer *w = (quant_st_writer *)1;
    quant_ck_error err;
    const char *keys[2] = {key, key}, *values[2] = {value, value};
    quant_ck_status st = quant_st_writer_new(path, t, n, keys, values, n_meta, &w, &err);
    ck_assert_msg(st == QUANT_CK_ERR_ARG, "%s: status %d", expect, st);
    ck_assert_ptr_null(w);
    ck_assert_msg(strstr(err.message, expect) != NULL, "\"%s\" lacks \"%s\"", err.message, expect);
    ck_assert_int_eq(ck_count_entries(dir), 0);
    free(path);
}

START_TEST(test_refused)
{
    char *dir = ck_tmpdir();
    quant_st_out_tensor dup[3] = {
        {"a", QUANT_ST_F32, 1, {1}}, {"b", QUANT_ST_U8, 0, {0}}, {"a", QUANT_ST_F16, 1, {1}}};
    refuse(dir, dup, 3, NULL, NULL, 0, "tensor name 'a' is used twice");
    quant_st_out_tensor meta = {"__metadata__", QUANT_ST_U8, 1, {1}};
    refuse(dir, &meta, 1, NULL, NULL, 0, "reserved");
    quant_st_out_tensor neg = {"n", QUANT_ST_F32, 2, {2, -1}};
    refuse(dir, &neg, 1, NULL, NULL, 0, "tensor 'n': shape[1] = -1");
    quant_st_out_tensor odd = {"f4", QUANT_ST_F4, 1, {3}};
    refuse(dir, &odd, 1, NULL, NULL, 0, "not a whole number of bytes");
    quant_st_out_tensor big = {"big", QUANT_ST_F64, 3, {1 << 30, 1 << 30, 1 << 30}};
    refuse(dir, &big, 1, NULL, NULL, 0, "overflows");
    quant_st_out_tensor rank = {"r", QUANT_ST_F32, 9, {1}};
    refuse(dir, &rank, 1, NULL, NULL, 0, "tensor 'r': rank 9 is outside 0..8");
    quant_st_out_tensor dtype = {"d", QUANT_ST_DTYPE_COUNT, 1, {1}};
    refuse(dir, &dtype, 1, NULL, NULL, 0, "tensor 'd': unknown dtype");
    quant_st_out_tensor ok = {"ok", QUANT_ST_F32, 1, {1}};
    refuse(dir, &ok, 1, "k", "v", 2, "repeats key 'k'");
    refuse(dir, &ok, 1, "k", NULL, 1, "NULL");
    refuse(dir, &ok, 1, "k", "\xff", 1, "not valid UTF-8");
    quant_st_out_tensor bad_name = {"\xc0\x80", QUANT_ST_F32, 1, {1}};
    refuse(dir, &bad_name, 1, NULL, NULL, 0, "not valid UTF-8");
    kit_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_bad_calls)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "c.safetensors");
    quant_st_out_tensor t[2] = {{"a", QUANT_ST_F32, 1, {4}}, {"b", QUANT_ST_U8, 1, {3}}};
    quant_st_writer *w = NULL;
    quant_ck_error err;
    ck_assert_int_eq(
        quant_st_writer_new("/nonexistent/dir/x.safetensors", t, 2, NULL, NULL, 0, &w, &err),
        QUANT_CK_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "/nonexistent/dir/x.safetensors: "));
    ck_assert_int_eq(quant_st_writer_new(NULL, t, 2, NULL, NULL, 0, &w, NULL), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_st_writer_new(path, NULL, 2, NULL, NULL, 0, &w, NULL), QUANT_CK_ERR_ARG);
    w = writer_ok(path, t, 2, NULL, NULL, 0);
    char buf[16] = {0};
    ck_assert_int_eq(quant_st_writer_pwrite(w, 1, 1, buf, 3, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "tensor 'b'"));
    ck_assert_int_eq(quant_st_writer_pwrite(w, 1, 4, buf, 0, NULL), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_st_writer_pwrite(w, 0, UINT64_MAX, buf, 1, NULL), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_st_writer_pwrite(w, 0, 1, buf, SIZE_MAX, NULL), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_st_writer_pwrite(w, 2, 0, buf, 1, NULL), QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_st_writer_pwrite(w, 1, 3, buf, 0, NULL), QUANT_CK_OK);
    ck_assert_uint_eq(quant_st_writer_nbytes(w, 2), 0);
    quant_st_writer_free(w);
    ck_assert_int_eq(ck_count_entries(dir), 0);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

Suite *suite_st_write(void)
{
    Suite *s = suite_create("st_write");
    TCase *tc = tcase_create("st_write");
    tcase_add_test(tc, test_reference_layout);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_empty_file);
    tcase_add_test(tc, test_free_without_commit);
    tcase_add_test(tc, test_commit_replaces);
    tcase_add_test(tc, test_targets);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_bad_calls);
    suite_add_tcase(s, tc);
    return s;
}
