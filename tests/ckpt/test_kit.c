/* test_kit.c -- the test kit's own suite (tests/kit/kit.h): what every other suite and bench builds
 * its fixtures with, checked against the library's safetensors reader and the file system.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckutil.h"
#include "quant_st.h"

static const float vals[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
static const uint16_t halves[2] = {0x3f80, 0xc000};

/* Two tensors with data and one of zeros, plus metadata. */
static void three(kit_st_tensor t[3])
{
    t[0] = (kit_st_tensor){"a.weight", "F32", 2, {2, 3}, vals, sizeof vals};
    t[1] = (kit_st_tensor){"b.bias", "BF16", 1, {2}, halves, sizeof halves};
    t[2] = (kit_st_tensor){"c.zeros", "F32", 1, {1000}, NULL, 4000};
}

/* The file the library opened holds the three tensors where the kit put them, and the metadata. */
static void check_three(const quant_st_file *f, const unsigned char *bytes)
{
    ck_assert_uint_eq(f->n_tensors, 3);
    ck_assert_uint_eq(f->data_start % 8, 0);
    const quant_st_tensor *a = quant_st_find(f, "a.weight"), *b = quant_st_find(f, "b.bias"),
                          *c = quant_st_find(f, "c.zeros");
    ck_assert(a && b && c);
    ck_assert_int_eq(a->rank, 2);
    ck_assert_int_eq(a->shape[1], 3);
    ck_assert_uint_eq(a->end - a->begin, sizeof vals);
    ck_assert_uint_eq(b->begin, a->end);
    ck_assert_uint_eq(c->end, b->end + 4000);
    ck_assert_uint_eq(f->file_size, f->data_start + c->end);
    ck_assert_uint_eq(f->n_meta, 1);
    ck_assert_str_eq(f->meta_keys[0], "format");
    ck_assert_str_eq(f->meta_values[0], "pt");
    ck_assert_mem_eq(bytes + f->data_start + a->begin, vals, sizeof vals);
    ck_assert_mem_eq(bytes + f->data_start + b->begin, halves, sizeof halves);
    for (uint64_t i = c->begin; i < c->end; i++) ck_assert_uint_eq(bytes[f->data_start + i], 0);
}

START_TEST(st_build_and_write_agree_with_the_reader)
{
    kit_st_tensor t[3];
    three(t);
    size_t len;
    unsigned char *img = kit_st_build(t, 3, "{\"format\":\"pt\"}", &len);
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_open_buffer(img, len, "built", &f, &err) == QUANT_CK_OK, "%s",
                  err.message);
    check_three(f, img);
    quant_st_close(f);

    char *dir = ck_tmpdir(), *path = kit_join(dir, "w.safetensors");
    ck_assert_int_eq(kit_st_write(path, t, 3, "{\"format\":\"pt\"}"), 0);
    size_t n;
    unsigned char *disk = kit_read_file(path, &n);
    ck_assert_uint_eq(n, len); /* the trailing zeros are a hole, but the size is the same */
    ck_assert_mem_eq(disk, img, len);
    ck_assert_int_eq(quant_st_open(path, &f, &err), QUANT_CK_OK);
    check_three(f, disk);
    quant_st_close(f);
    free(disk);
    free(img);
    free(path);
    ck_assert_int_eq(kit_rmtree(dir), 0);
    free(dir);
}
END_TEST

START_TEST(st_header_is_padded_to_8_whatever_its_length)
{
    for (int k = 0; k < 8; k++) { /* every header length modulo 8 */
        char meta[32];
        snprintf(meta, sizeof meta, "{\"k\":\"%.*s\"}", k, "xxxxxxx");
        kit_st_tensor t = {"w", "F32", 1, {6}, vals, sizeof vals};
        size_t len, hl;
        unsigned char *img = kit_st_build(&t, 1, meta, &len);
        free(kit_st_header(&t, 1, meta, &hl));
        ck_assert_uint_eq(hl % 8, 0);
        ck_assert_uint_eq(len, 8 + hl + sizeof vals);
        quant_st_file *f = NULL;
        quant_ck_error err;
        ck_assert_msg(quant_st_open_buffer(img, len, "padded", &f, &err) == QUANT_CK_OK, "%s",
                      err.message);
        ck_assert_uint_eq(f->header_len, hl);
        ck_assert_uint_eq(strlen(f->meta_values[0]), (size_t)k);
        quant_st_close(f);
        free(img);
    }
}
END_TEST

START_TEST(files_dirs_and_rmtree)
{
    char *dir = ck_tmpdir(), *sub = kit_join(dir, "a"), *deep = kit_join(sub, "b");
    ck_assert_ptr_nonnull(strstr(dir, "quant-ckpt-test-"));
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    ck_assert_int_eq(mkdir(deep, 0755), 0);
    char *file = kit_join(deep, "f.txt");
    ck_assert_int_eq(kit_write_file(file, "hello", 5), 0);
    size_t n = 99;
    char *text = kit_read_file(file, &n);
    ck_assert_uint_eq(n, 5);
    ck_assert_str_eq(text, "hello"); /* NUL-terminated */
    free(text);
    ck_assert_ptr_null(kit_read_file(sub, &n)); /* a directory cannot be read */
    char *link = kit_join(dir, "link");
    ck_assert_int_eq(symlink("/", link), 0); /* not followed */
    ck_assert_int_eq(kit_rmtree(dir), 0);
    ck_assert_int_ne(access(dir, F_OK), 0);
    ck_assert_int_eq(access("/", F_OK), 0);
    ck_assert_int_eq(kit_rmtree(dir), 0); /* already gone */
    char *missing = kit_join(dir, "x");
    ck_assert_int_eq(kit_write_file(missing, "x", 1), -1);
    ck_assert_ptr_null(kit_read_file(missing, NULL));
    free(missing);
    free(link);
    free(file);
    free(deep);
    free(sub);
    free(dir);
}
END_TEST

START_TEST(quantd_spawn_reports_an_early_exit_and_stops)
{
    /* a stand-in for quantd that exits 1 at once, ignoring quantd's arguments */
    char *dir = ck_tmpdir(), *port = kit_join(dir, "port"), *log = kit_join(dir, "log");
    kit_quantd_opts o = {.bin = "/bin/false",
                         .data_dir = dir,
                         .port_file = port,
                         .log_level = "debug",
                         .log_file = log};
    pid_t pid = kit_quantd_spawn(&o);
    ck_assert_int_gt(pid, 0);
    int status = 0;
    ck_assert_int_eq(kit_quantd_wait_port(pid, port, 10, &status), -1);
    ck_assert_int_eq(kit_exit_code(status), 1);

    /* a stand-in that writes its port and runs until signalled */
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", "echo 4242 > \"$0\"; exec sleep 30", port, (char *)NULL);
        _exit(127);
    }
    ck_assert_int_eq(kit_quantd_wait_port(pid, port, 10, &status), 4242);
    status = kit_quantd_stop(pid, SIGTERM, 10);
    ck_assert_int_ge(status, 0);
    ck_assert_int_eq(kit_exit_code(status), 128 + SIGTERM);

    const char *many[64];
    for (int i = 0; i < 63; i++) many[i] = "x";
    many[63] = NULL;
    o.extra = many;
    errno = 0;
    ck_assert_int_eq(kit_quantd_spawn(&o), -1);
    ck_assert_int_eq(errno, E2BIG);
    ck_assert_int_eq(kit_rmtree(dir), 0);
    free(port);
    free(log);
    free(dir);
}
END_TEST

Suite *suite_kit(void)
{
    Suite *s = suite_create("kit");
    TCase *tc = tcase_create("kit");
    tcase_add_test(tc, st_build_and_write_agree_with_the_reader);
    tcase_add_test(tc, st_header_is_padded_to_8_whatever_its_length);
    tcase_add_test(tc, files_dirs_and_rmtree);
    tcase_add_test(tc, quantd_spawn_reports_an_early_exit_and_stops);
    suite_add_tcase(s, tc);
    return s;
}
