/* test_hash.c -- the hash suite: SHA-256 taken while writing. The safetensors writer's hash
 * (quant_st_writer_hash) against sha256sum(1) of the committed file when pieces come from
 * several threads in any order or a range is never written; the pipeline's outputs
 * (opts.sha256, quant_report_output_at) against sha256sum of every published file for
 * multi-threaded runs of a file and of the 2-shard fixture in both layouts; no hashes without
 * the option, no outputs after a failed run.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckutil.h"
#include "quant_st.h"

/* What sha256sum prints for `path`: 64 hex digits into `hex`. */
static void sha256sum(const char *path, char hex[65])
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_msg(fscanf(p, "%64s", hex) == 1, "sha256sum %s printed nothing", path);
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_uint_eq(strlen(hex), 64);
}

static uint64_t file_size(const char *path)
{
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    return (uint64_t)sb.st_size;
}

/* ---- the writer -------------------------------------------------------------------------------
 */

enum { N_T = 24, PIECE = 1000, THREADS = 4 };

typedef struct job {
    quant_st_writer *w;
    int thread;
    uint64_t bytes[N_T];
} job;

/* Thread `thread` writes every THREADS-th piece of every tensor, last tensor and last piece
 * first (so the file fills from its end). */
static void *write_pieces(void *arg)
{
    job *j = arg;
    unsigned char buf[PIECE];
    for (int k = N_T - 1; k >= 0; k--) {
        uint64_t n = j->bytes[k], pieces = (n + PIECE - 1) / PIECE;
        for (uint64_t p = pieces; p-- > 0;) {
            if ((int)(p % THREADS) != j->thread) continue;
            uint64_t off = p * PIECE, len = n - off < PIECE ? n - off : PIECE;
            for (uint64_t i = 0; i < len; i++) buf[i] = (unsigned char)((off + i) * 31 + k);
            if (quant_st_writer_pwrite(j->w, (size_t)k, off, buf, (size_t)len, NULL) != QUANT_CK_OK)
                return NULL;
        }
    }
    return j;
}

/* N_T tensors of mixed dtypes (the layout reorders them: F32 first, then BF16, then U8). */
static quant_st_writer *mixed_writer(const char *path, uint64_t bytes[N_T])
{
    static const quant_st_dtype dt[3] = {QUANT_ST_U8, QUANT_ST_F32, QUANT_ST_BF16};
    quant_st_out_tensor t[N_T];
    char names[N_T][32];
    for (int k = 0; k < N_T; k++) {
        snprintf(names[k], sizeof names[k], "t%02d", k);
        int64_t elems = 700 + 997 * k;
        t[k] = (quant_st_out_tensor){names[k], dt[k % 3], 1, {elems}};
        bytes[k] = (uint64_t)elems * (uint64_t)quant_st_dtype_bits(dt[k % 3]) / 8;
    }
    quant_st_writer *w = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_writer_new(path, t, N_T, NULL, NULL, 0, &w, &err) == QUANT_CK_OK, "%s",
                  err.message);
    return w;
}

START_TEST(test_writer_hash_any_order)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "h.safetensors"), hex[65], want[65];
    job jobs[THREADS];
    quant_st_writer *w = mixed_writer(path, jobs[0].bytes);
    quant_ck_error err;
    ck_assert_msg(quant_st_writer_hash(w, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_int_eq(quant_st_writer_hash(w, &err), QUANT_CK_ERR_ARG); /* once */
    ck_assert(!quant_st_writer_sha256(w, hex, NULL));                  /* not before commit */
    pthread_t tid[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i].w = w;
        jobs[i].thread = i;
        memcpy(jobs[i].bytes, jobs[0].bytes, sizeof jobs[0].bytes);
        ck_assert_int_eq(pthread_create(&tid[i], NULL, write_pieces, &jobs[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        void *ret;
        ck_assert_int_eq(pthread_join(tid[i], &ret), 0);
        ck_assert_ptr_nonnull(ret);
    }
    ck_assert_msg(quant_st_writer_commit(w, &err) == QUANT_CK_OK, "%s", err.message);
    uint64_t bytes = 0;
    ck_assert(quant_st_writer_sha256(w, hex, &bytes));
    quant_st_writer_free(w);
    sha256sum(path, want);
    ck_assert_str_eq(hex, want);
    ck_assert_uint_eq(bytes, file_size(path));
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

/* Bytes never written (the sized file's zeros) are hashed at commit all the same; a writer that
 * did not hash has no SHA-256. */
START_TEST(test_writer_hash_gaps)
{
    char *dir = ck_tmpdir(), *path = kit_join(dir, "g.safetensors"), hex[65], want[65];
    uint64_t bytes[N_T];
    quant_st_writer *w = mixed_writer(path, bytes);
    quant_ck_error err;
    ck_assert_int_eq(quant_st_writer_hash(w, &err), QUANT_CK_OK);
    unsigned char buf[64] = {1, 2, 3};
    ck_assert_int_eq(quant_st_writer_pwrite(w, 5, 16, buf, sizeof buf, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_st_writer_commit(w, &err), QUANT_CK_OK);
    ck_assert(quant_st_writer_sha256(w, hex, NULL));
    quant_st_writer_free(w);
    sha256sum(path, want);
    ck_assert_str_eq(hex, want);
    w = mixed_writer(path, bytes);
    ck_assert_int_eq(quant_st_writer_commit(w, &err), QUANT_CK_OK);
    ck_assert(!quant_st_writer_sha256(w, hex, NULL));
    quant_st_writer_free(w);
    /* abandoned while hashing: nothing left, no thread left behind (ASan/TSan watch) */
    w = mixed_writer(path, bytes);
    ck_assert_int_eq(quant_st_writer_hash(w, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_st_writer_pwrite(w, 0, 0, buf, 8, &err), QUANT_CK_OK);
    quant_st_writer_free(w);
    kit_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

/* ---- the pipeline ----------------------------------------------------------------------------
 */

/* Every output of `rep` is a file of `out_dir` (or, when `file`, the file `out_dir` itself and,
 * when `ct` (compressed-tensors), config.json beside it), of its size and sha256sum; the
 * directory holds nothing else. */
static void check_outputs(const quant_report *rep, const char *out, bool file, bool ct)
{
    size_t n = quant_report_output_count(rep);
    ck_assert_uint_eq(n, file ? 1u + ct : (size_t)ck_count_entries(out));
    char *dir = strdup(out);
    *strrchr(dir, '/') = '\0';
    for (size_t i = 0; i < n; i++) {
        const quant_report_output *o = quant_report_output_at(rep, i);
        bool beside = file && i == 1;
        char *path = beside ? kit_join(dir, o->name)
                     : file ? strdup(out)
                            : kit_join(out, o->name),
             want[65];
        if (file) ck_assert_str_eq(o->name, beside ? "config.json" : strrchr(out, '/') + 1);
        ck_assert_uint_eq(o->bytes, file_size(path));
        ck_assert_ptr_nonnull(o->sha256);
        sha256sum(path, want);
        ck_assert_msg(strcmp(o->sha256, want) == 0, "%s: %s, sha256sum %s", o->name, o->sha256,
                      want);
        if (beside) unlink(path); /* the next run writes it again */
        free(path);
    }
    free(dir);
    ck_assert_ptr_null(quant_report_output_at(rep, n));
}

static void options(quant_pipeline_options *o, quant_layout layout)
{
    quant_pipeline_options_init(o);
    o->threads = 3;
    o->chunk_bytes = 64 << 10; /* many units, landing out of file order */
    o->buffers = 2;
    o->layout = layout;
    o->sha256 = true;
}

START_TEST(test_pipeline_hashes_file)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "o.st");
    enum { T = 6, ROWS = 96, COLS = 1024 };
    float *x = malloc(sizeof(float) * ROWS * COLS * T);
    kit_st_tensor t[T];
    char names[T][48];
    for (int k = 0; k < T; k++) {
        ck_fill(x + (size_t)k * ROWS * COLS, (size_t)ROWS * COLS, (uint64_t)k + 1, 1.0f);
        snprintf(names[k], sizeof names[k], "model.layers.%d.mlp.up_proj.weight", k);
        t[k] = (kit_st_tensor){names[k],
                               "F32",
                               2,
                               {ROWS, COLS},
                               x + (size_t)k * ROWS * COLS,
                               sizeof(float) * ROWS * COLS};
    }
    ck_gen_file(in, t, T, NULL);
    const char *rules[] = {"[{\"weight_qtype\":\"int8\"}]",
                           "[{\"weight_qtype\":\"int4\",\"tile_size\":128}]"};
    for (int layout = 0; layout < 2; layout++)
        for (size_t r = 0; r < 2; r++) {
            quant_pipeline_options o;
            options(&o, (quant_layout)layout);
            quant_report *rep = NULL;
            quant_ck_error err;
            unlink(out);
            ck_assert_msg(ck_quantize(rules[r], in, out, &o, &rep, &err) == QUANT_CK_OK, "%s",
                          err.message);
            check_outputs(rep, out, true, layout == QUANT_LAYOUT_CTENSORS);
            quant_report_free(rep);
        }
    /* without the option: the outputs, no hashes */
    quant_pipeline_options o;
    options(&o, QUANT_LAYOUT_NATIVE);
    o.sha256 = false;
    quant_report *rep = NULL;
    unlink(out);
    ck_assert_int_eq(ck_quantize(rules[0], in, out, &o, &rep, NULL), QUANT_CK_OK);
    ck_assert_uint_eq(quant_report_output_count(rep), 1);
    ck_assert_ptr_null(quant_report_output_at(rep, 0)->sha256);
    ck_assert_uint_eq(quant_report_output_at(rep, 0)->bytes, file_size(out));
    quant_report_free(rep);
    /* a failed run (cancelled) published nothing and lists nothing */
    atomic_int cancel = 1;
    o.cancel = &cancel;
    o.sha256 = true;
    unlink(out);
    ck_assert_int_eq(ck_quantize(rules[0], in, out, &o, &rep, NULL), QUANT_CK_ERR_CANCELLED);
    ck_assert_uint_eq(quant_report_output_count(rep), 0);
    ck_assert_int_ne(access(out, F_OK), 0);
    quant_report_free(rep);
    free(x);
    kit_rmtree(dir);
    free(in);
    free(out);
    free(dir);
}
END_TEST

START_TEST(test_pipeline_hashes_checkpoint)
{
    char *dir = ck_tmpdir(), in[4096];
    snprintf(in, sizeof in, "%s/stories260K-bf16-sharded", ck_data_dir());
    for (int layout = 0; layout < 2; layout++) {
        char *out = kit_join(dir, layout ? "ct" : "native");
        quant_pipeline_options o;
        options(&o, (quant_layout)layout);
        quant_report *rep = NULL;
        quant_ck_error err;
        ck_assert_msg(ck_quantize("[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]", in,
                                  out, &o, &rep, &err) == QUANT_CK_OK,
                      "%s", err.message);
        check_outputs(rep, out, false, false); /* shards, index, config.json */
        ck_assert_uint_eq(quant_report_output_count(rep), 4);
        quant_report_free(rep);
        free(out);
    }
    kit_rmtree(dir);
    free(dir);
}
END_TEST

Suite *suite_hash(void)
{
    Suite *s = suite_create("hash");
    TCase *tc = tcase_create("hash");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_writer_hash_any_order);
    tcase_add_test(tc, test_writer_hash_gaps);
    tcase_add_test(tc, test_pipeline_hashes_file);
    tcase_add_test(tc, test_pipeline_hashes_checkpoint);
    suite_add_tcase(s, tc);
    return s;
}
