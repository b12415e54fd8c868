/* test_stream_in.c -- the stream_in suite: quant_quantize_path() over inputs still arriving
 * (opts.input_wait). A writer thread copies the 2-shard fixture (or one shard, as a file run)
 * into a fresh input directory in small pieces, telling a shared byte count under a mutex and
 * condition variable that the test's wait function blocks on; the wait confirms only bytes
 * already written. Checked: outputs byte-identical to a run over the complete input (both
 * layouts, directory and file, the nvfp4 global-scale pre-pass, hashing, a static activation
 * scale; for a directory the reports too), quantization under way while the last bytes of the
 * last shard are held back, what the wait is asked (a shard's prefix, then its header, never
 * past its size; every file whole once), a plan that waits for headers only, the wait failing
 * at the length prefix, a header, mid-tensor, the last byte, the whole file, the index and
 * config.json (QUANT_CK_ERR_IO naming the file and tensor, nothing left), a shard longer or
 * shorter than its header once whole (the usual size errors), cancellation seen after a wait,
 * and map_input refused with input_wait.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckutil.h"

#define FIXTURE    "stories260K-bf16-sharded"
#define SHARD1     "model-00001-of-00002.safetensors"
#define SHARD2     "model-00002-of-00002.safetensors"
#define INDEX      "model.safetensors.index.json"
#define RULES_INT8 "[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]"
#define RULES_INT4                                                                                 \
    "[{\"module_path\":\".*(q|k|v|o|gate|up)_proj\",\"weight_qtype\":\"int4\",\"tile_size\":32}]"
#define RULES_FP4 "[{\"module_path\":\".*(q|k|v|o|gate|up)_proj\",\"weight_qtype\":\"nvfp4\"}]"

enum { MAX_FILES = 8, MAX_ASKS = 4096, PIECE = 3001, HOLD = 100, WAIT_LIMIT_S = 20 };

/* One input file the writer copies. */
typedef struct feed_file {
    char name[128];
    unsigned char *data;
    size_t size, written;
    uint64_t max_confirmed; /* the largest end the wait confirmed (QUANT_INPUT_WHOLE: all) */
    int whole_asks;
} feed_file;

/* The writer, the wait function and the progress callback share this. */
typedef struct feed {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char dst[4096];
    size_t n;
    feed_file f[MAX_FILES];
    /* the last HOLD bytes of the last file are held until `release` (or WAIT_LIMIT_S) */
    bool hold, release, tail_written, released_by_timeout;
    bool overlap; /* tensors_done > 0 seen before the last bytes were written */
    /* failure injection: the wait for file `fail_name` past `fail_at` returns false */
    const char *fail_name;
    uint64_t fail_at;
    /* when the whole of file `resize_name` is asked: grow (> 0) or cut (< 0) it first */
    const char *resize_name;
    int resize_by;
    atomic_int *cancel_on_tensor; /* set when the first tensor byte is asked */
    const quant_static_act *acts; /* SRQ: static activation scales for both runs */
    size_t n_acts;
    bool confined; /* the streamed run as quantd runs it: `in` relative to root_fd, no links */
    int root_fd;
    size_t n_asks;
    struct {
        int file;
        uint64_t end;
    } asks[MAX_ASKS];
} feed;

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int find_file(feed *fd, const char *name)
{
    for (size_t i = 0; i < fd->n; i++)
        if (strcmp(fd->f[i].name, name) == 0) return (int)i;
    return -1;
}

static void feed_add(feed *fd, const char *src_dir, const char *name, const char *as)
{
    ck_assert_uint_lt(fd->n, MAX_FILES);
    feed_file *f = &fd->f[fd->n++];
    char *path = kit_join(src_dir, name);
    f->data = kit_read_file(path, &f->size);
    ck_assert_msg(f->data != NULL, "cannot read %s", path);
    free(path);
    snprintf(f->name, sizeof f->name, "%s", as ? as : name);
}

/* Every input file exists (empty) before the run starts. */
static void feed_init(feed *fd, const char *dst)
{
    pthread_mutex_init(&fd->mu, NULL);
    pthread_cond_init(&fd->cv, NULL);
    snprintf(fd->dst, sizeof fd->dst, "%s", dst);
    for (size_t i = 0; i < fd->n; i++) {
        char *path = kit_join(dst, fd->f[i].name);
        ck_write_file(path, "", 0);
        free(path);
    }
}

/* The header length a safetensors file's first 8 bytes give. */
static uint64_t header_len(const feed_file *f)
{
    uint64_t n = 0;
    for (int b = 7; b >= 0; b--) n = n << 8 | f->data[b];
    return n;
}

/* What the run asked of each file: a shard first its 8-byte prefix, then its header, never
 * beyond its size (but whole); every other file whole only. */
static void check_asks(const feed *fd)
{
    for (size_t i = 0; i < fd->n; i++) {
        const feed_file *f = &fd->f[i];
        bool shard = ends_with(f->name, ".safetensors");
        int seen = 0;
        for (size_t k = 0; k < fd->n_asks; k++) {
            if (fd->asks[k].file != (int)i) continue;
            uint64_t end = fd->asks[k].end;
            if (shard && seen == 0) ck_assert_uint_eq(end, 8);
            if (shard && seen == 1) ck_assert_uint_eq(end, 8 + header_len(f));
            if (shard && end != QUANT_INPUT_WHOLE) ck_assert_uint_le(end, f->size);
            if (!shard) ck_assert_uint_eq(end, QUANT_INPUT_WHOLE);
            seen++;
        }
    }
}

static void feed_free(feed *fd)
{
    for (size_t i = 0; i < fd->n; i++) free(fd->f[i].data);
    pthread_mutex_destroy(&fd->mu);
    pthread_cond_destroy(&fd->cv);
}

static void append(feed *fd, size_t i, size_t n)
{
    feed_file *f = &fd->f[i];
    char *path = kit_join(fd->dst, f->name);
    int out = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    free(path);
    if (out < 0) return;
    ssize_t k = write(out, f->data + f->written, n);
    close(out);
    pthread_mutex_lock(&fd->mu);
    if (k > 0) f->written += (size_t)k;
    pthread_cond_broadcast(&fd->cv);
    pthread_mutex_unlock(&fd->mu);
}

/* Waits (the writer) until the test releases the held bytes, or WAIT_LIMIT_S. */
static void hold_back(feed *fd)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_LIMIT_S;
    pthread_mutex_lock(&fd->mu);
    while (!fd->release)
        if (pthread_cond_timedwait(&fd->cv, &fd->mu, &until) == ETIMEDOUT) {
            fd->released_by_timeout = true;
            break;
        }
    pthread_mutex_unlock(&fd->mu);
}

/* The writer: each file in order, PIECE bytes at a time, a short sleep between pieces. */
static void *writer_main(void *arg)
{
    feed *fd = arg;
    for (size_t i = 0; i < fd->n; i++) {
        feed_file *f = &fd->f[i];
        size_t stop = fd->hold && i + 1 == fd->n && f->size > HOLD ? f->size - HOLD : f->size;
        while (f->written < stop) {
            size_t n = stop - f->written < PIECE ? stop - f->written : PIECE;
            append(fd, i, n);
            struct timespec ts = {0, 200 * 1000};
            nanosleep(&ts, NULL);
        }
        if (stop < f->size) {
            hold_back(fd);
            append(fd, i, f->size - stop);
        }
        if (i + 1 == fd->n) {
            pthread_mutex_lock(&fd->mu);
            fd->tail_written = true;
            pthread_mutex_unlock(&fd->mu);
        }
    }
    return NULL;
}

static void resize(feed *fd, feed_file *f)
{
    char *path = kit_join(fd->dst, f->name);
    if (fd->resize_by > 0) {
        int out = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
        if (out >= 0) {
            ck_assert_int_eq(write(out, "extra", (size_t)fd->resize_by), fd->resize_by);
            close(out);
        }
    } else {
        ck_assert_int_eq(truncate(path, (off_t)f->size + fd->resize_by), 0);
    }
    free(path);
}

/* The run's wait function: true once [0, end) (or the whole file) is written. */
static bool wait_fn(void *user, const char *name, uint64_t end, char *why, size_t why_len)
{
    feed *fd = user;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_LIMIT_S;
    pthread_mutex_lock(&fd->mu);
    int i = find_file(fd, name);
    if (fd->n_asks < MAX_ASKS) {
        fd->asks[fd->n_asks].file = i;
        fd->asks[fd->n_asks++].end = end;
    }
    bool ok = i >= 0;
    if (ok && fd->fail_name && !strcmp(name, fd->fail_name) && end > fd->fail_at) ok = false;
    feed_file *f = ok ? &fd->f[i] : NULL;
    uint64_t need = f && end == QUANT_INPUT_WHOLE ? f->size : end;
    if (f && end != QUANT_INPUT_WHOLE && end > f->size) ok = false; /* past the file */
    while (ok && f->written < need)
        if (pthread_cond_timedwait(&fd->cv, &fd->mu, &until) == ETIMEDOUT) ok = false;
    if (ok && end > f->max_confirmed) f->max_confirmed = end;
    if (ok && end == QUANT_INPUT_WHOLE) f->whole_asks++;
    if (ok && end == QUANT_INPUT_WHOLE && fd->resize_name && !strcmp(name, fd->resize_name))
        resize(fd, f);
    bool cancel = ok && fd->cancel_on_tensor && end > 100000;
    pthread_mutex_unlock(&fd->mu);
    if (cancel) atomic_store(fd->cancel_on_tensor, 1);
    if (!ok) snprintf(why, why_len, "cut by the test");
    return ok;
}

static void progress_fn(void *user, const quant_progress *p)
{
    feed *fd = user;
    if (p->tensors_done == 0) return;
    pthread_mutex_lock(&fd->mu);
    if (!fd->tail_written) fd->overlap = true;
    fd->release = true;
    pthread_cond_broadcast(&fd->cv);
    pthread_mutex_unlock(&fd->mu);
}

static void stream_options(quant_pipeline_options *o, quant_layout layout, feed *fd)
{
    quant_pipeline_options_init(o);
    o->threads = 2;
    o->layout = layout;
    o->chunk_bytes = 64u << 10;
    o->buffers = 2;
    o->input_wait = wait_fn;
    o->input_wait_user = fd;
    o->progress = progress_fn;
    o->progress_user = fd;
}

/* The fixture's files into `fd` (index, config.json first: the run waits for them whole before
 * it opens the shards, then each shard's header). */
static void feed_fixture(feed *fd)
{
    char src[4096];
    snprintf(src, sizeof src, "%s/" FIXTURE, ck_data_dir());
    feed_add(fd, src, "config.json", NULL);
    feed_add(fd, src, INDEX, NULL);
    feed_add(fd, src, SHARD1, NULL);
    feed_add(fd, src, SHARD2, NULL);
}

/* Byte-identical files. */
static void assert_same_file(const char *a, const char *b)
{
    size_t na, nb;
    unsigned char *x = kit_read_file(a, &na), *y = kit_read_file(b, &nb);
    ck_assert_msg(x && y, "cannot read %s or %s", a, b);
    ck_assert_msg(na == nb && memcmp(x, y, na) == 0, "%s and %s differ", a, b);
    free(x);
    free(y);
}

/* Every file of the directory `ref` is in `got`, identical, and nothing else. */
static void assert_same_dir(const char *ref, const char *got)
{
    static const char *const names[] = {"config.json", INDEX, SHARD1, SHARD2};
    for (size_t i = 0; i < 4; i++) {
        char *a = kit_join(ref, names[i]), *b = kit_join(got, names[i]);
        assert_same_file(a, b);
        free(a);
        free(b);
    }
    ck_assert_int_eq(ck_count_entries(got), ck_count_entries(ref));
}

/* A streamed run of `fd` (input `in` under its directory) against a run over the complete
 * input `ref_in`; `hold`: the last bytes held back until a tensor is done. */
static void streamed_matches(feed *fd, const char *rules, quant_layout layout, const char *in,
                             const char *ref_in, const char *dir, bool hold, bool sha)
{
    char *out = kit_join(dir, "out"), *ref = kit_join(dir, "ref");
    quant_pipeline_options o;
    stream_options(&o, layout, fd);
    o.sha256 = sha;
    o.static_acts = fd->acts;
    o.n_static_acts = fd->n_acts;
    if (fd->confined) {
        o.input_dir_fd = fd->root_fd;
        o.no_symlinks = true;
    }
    fd->hold = hold;
    pthread_t w;
    ck_assert_int_eq(pthread_create(&w, NULL, writer_main, fd), 0);
    quant_ck_error err;
    quant_report *rep = NULL;
    quant_ck_status st = ck_quantize(rules, in, out, &o, &rep, &err);
    pthread_join(w, NULL);
    ck_assert_msg(st == QUANT_CK_OK, "%s", err.message);
    char *cfg = kit_join(dir, "config.json"), *streamed_cfg = kit_join(dir, "streamed.json");
    bool file_ct = layout == QUANT_LAYOUT_CTENSORS && ck_count_entries(out) < 0;
    if (file_ct) ck_assert_int_eq(rename(cfg, streamed_cfg), 0); /* the reference writes one */
    quant_pipeline_options_init(&o);
    o.layout = layout;
    o.chunk_bytes = 64u << 10;
    o.sha256 = sha;
    o.static_acts = fd->acts;
    o.n_static_acts = fd->n_acts;
    quant_report *ref_rep = NULL;
    ck_assert_msg(ck_quantize(rules, ref_in, ref, &o, &ref_rep, &err) == QUANT_CK_OK, "%s",
                  err.message);
    struct stat sb;
    ck_assert_int_eq(stat(out, &sb), 0);
    if (S_ISDIR(sb.st_mode)) {
        assert_same_dir(ref, out);
        char *a = quant_report_json(ref_rep), *b = quant_report_json(rep); /* same order, too */
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        ck_assert_str_eq(a, b);
        for (size_t i = 0; i < fd->n_acts; i++) /* written by both */
            ck_assert_ptr_nonnull(strstr(b, fd->acts[i].tensor_base));
        free(a);
        free(b);
    } else {
        assert_same_file(ref, out);
    }
    if (file_ct) { /* the same quantization_config (the input still arriving has none beside) */
        json_t *a = json_load_file(cfg, 0, NULL), *b = json_load_file(streamed_cfg, 0, NULL);
        ck_assert(json_equal(json_object_get(a, "quantization_config"),
                             json_object_get(b, "quantization_config")));
        json_decref(a);
        json_decref(b);
    }
    free(cfg);
    free(streamed_cfg);
    quant_report_free(rep);
    quant_report_free(ref_rep);
    check_asks(fd);
    for (size_t i = 0; i < fd->n; i++)
        if (ends_with(fd->f[i].name, ".safetensors"))
            ck_assert_msg(fd->f[i].whole_asks == 1, "%s: waited whole %d times", fd->f[i].name,
                          fd->f[i].whole_asks);
    if (hold) {
        ck_assert_msg(!fd->released_by_timeout, "no tensor was done while bytes were held back");
        ck_assert(fd->overlap);
    }
    kit_rmtree(out);
    kit_rmtree(ref);
    free(out);
    free(ref);
}

/* ---- identity --------------------------------------------------------------------------------
 */

/* `confined`: the streamed run under the temporary directory's descriptor, `in` relative. */
static void dir_identity(const char *rules, quant_layout layout, bool hold, bool sha, bool confined)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in"), ref_in[4096];
    snprintf(ref_in, sizeof ref_in, "%s/" FIXTURE, ck_data_dir());
    ck_assert_int_eq(mkdir(in, 0755), 0);
    feed fd = {0};
    feed_fixture(&fd);
    feed_init(&fd, in);
    fd.confined = confined;
    fd.root_fd = confined ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (confined) ck_assert_int_ge(fd.root_fd, 0);
    streamed_matches(&fd, rules, layout, confined ? "in" : in, ref_in, dir, hold, sha);
    if (confined) close(fd.root_fd);
    /* the index and config.json were waited for whole before being read */
    ck_assert_int_ge(fd.f[find_file(&fd, INDEX)].whole_asks, 1);
    ck_assert_int_ge(fd.f[find_file(&fd, "config.json")].whole_asks, 1);
    feed_free(&fd);
    kit_rmtree(dir);
    free(in);
    free(dir);
}

START_TEST(test_dir_native)
{
    dir_identity(RULES_INT8, QUANT_LAYOUT_NATIVE, true, false, false);
}
END_TEST

START_TEST(test_dir_ctensors)
{
    dir_identity(RULES_INT4, QUANT_LAYOUT_CTENSORS, true, true, true);
}
END_TEST

/* nvfp4 in compressed-tensors: the global-scale pass reads every fused group first */
START_TEST(test_dir_nvfp4_prepass)
{
    dir_identity(RULES_FP4, QUANT_LAYOUT_CTENSORS, false, false, false);
}
END_TEST

/* SRQ: a static activation scale written with the streamed weights */
START_TEST(test_dir_static_acts)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in"), ref_in[4096];
    snprintf(ref_in, sizeof ref_in, "%s/" FIXTURE, ck_data_dir());
    ck_assert_int_eq(mkdir(in, 0755), 0);
    static const float scale = 0.03125f;
    const quant_static_act act = {.name = "model.layers.1.mlp.down_proj.dot_general0_lhs",
                                  .tensor_base = "model.layers.1.mlp.down_proj.dot_general0_lhs",
                                  .rule = -1,
                                  .qtype = QUANT_QTYPE_INT8,
                                  .rank = 0,
                                  .scale = &scale};
    feed fd = {0};
    fd.acts = &act;
    fd.n_acts = 1;
    feed_fixture(&fd);
    feed_init(&fd, in);
    streamed_matches(&fd, RULES_INT8, QUANT_LAYOUT_NATIVE, in, ref_in, dir, true, false);
    feed_free(&fd);
    kit_rmtree(dir);
    free(in);
    free(dir);
}
END_TEST

START_TEST(test_file_both_layouts)
{
    for (int layout = 0; layout < 2; layout++) {
        char *dir = ck_tmpdir(), *in = kit_join(dir, "in"), src[4096];
        snprintf(src, sizeof src, "%s/" FIXTURE "/" SHARD1, ck_data_dir());
        ck_assert_int_eq(mkdir(in, 0755), 0);
        feed fd = {0};
        char from[4096];
        snprintf(from, sizeof from, "%s/" FIXTURE, ck_data_dir());
        feed_add(&fd, from, SHARD1, "one.safetensors"); /* the wait names the base name */
        feed_init(&fd, in);
        char *file = kit_join(in, "one.safetensors"), *out_dir = kit_join(dir, "o");
        ck_assert_int_eq(mkdir(out_dir, 0755), 0);
        streamed_matches(&fd, RULES_INT8, (quant_layout)layout, file, src, out_dir, true, false);
        feed_free(&fd);
        kit_rmtree(dir);
        free(file);
        free(out_dir);
        free(in);
        free(dir);
    }
}
END_TEST

/* A plan waits for the headers only: no shard byte past its header is asked. */
START_TEST(test_check_waits_for_headers)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    feed fd = {0};
    feed_fixture(&fd);
    feed_init(&fd, in);
    pthread_t w;
    ck_assert_int_eq(pthread_create(&w, NULL, writer_main, &fd), 0);
    quant_pipeline_options o;
    stream_options(&o, QUANT_LAYOUT_CTENSORS, &fd);
    quant_ruleset *rs = ck_rules(RULES_INT8);
    quant_plan *plan = NULL;
    quant_ck_error err;
    quant_ck_status st = quant_plan_path(rs, in, &o, &plan, &err);
    pthread_join(w, NULL);
    ck_assert_msg(st == QUANT_CK_OK, "%s", err.message);
    ck_assert_uint_gt(quant_plan_count(plan), 0);
    for (size_t k = 0; k < fd.n_asks; k++) {
        const feed_file *f = &fd.f[fd.asks[k].file];
        if (!ends_with(f->name, ".safetensors")) continue;
        uint64_t header = header_len(f);
        ck_assert_msg(fd.asks[k].end <= 8 + header, "%s: asked for %llu", f->name,
                      (unsigned long long)fd.asks[k].end);
    }
    quant_plan_free(plan);
    quant_ruleset_free(rs);
    feed_free(&fd);
    kit_rmtree(dir);
    free(in);
    free(dir);
}
END_TEST

/* ---- failures ---------------------------------------------------------------------------------
 */

static char last_message[QUANT_CK_MESSAGE_MAX]; /* dir_fails' error message */

/* A streamed run of the fixture directory expected to fail with `status`, its message holding
 * every string of `want` (NULL-terminated; the first, but for a cancellation, after the input
 * directory's name and "/"); nothing is left beside the input. With fd->confined the run is
 * quantd's (`in` relative to a directory descriptor, no links): no path above it is named. */
static void dir_fails(feed *fd, const char *rules, quant_layout layout, atomic_int *cancel,
                      quant_ck_status status, const char *const *want)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in"), *out = kit_join(dir, "out");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    feed_fixture(fd);
    feed_init(fd, in);
    pthread_t w;
    ck_assert_int_eq(pthread_create(&w, NULL, writer_main, fd), 0);
    quant_pipeline_options o;
    stream_options(&o, layout, fd);
    o.cancel = cancel;
    int root = -1;
    if (fd->confined) { /* messages then name "in/...", never the directory above */
        root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(root, 0);
        o.input_dir_fd = root;
        o.no_symlinks = true;
    }
    quant_ck_error err = {0};
    quant_report *rep = NULL;
    quant_ck_status st = ck_quantize(rules, fd->confined ? "in" : in, out, &o, &rep, &err);
    pthread_join(w, NULL);
    if (root >= 0) close(root);
    if (fd->confined)
        ck_assert_msg(strstr(err.message, dir) == NULL, "a server path in: %s", err.message);
    ck_assert_msg(st == status, "status %d, not %d: %s", (int)st, (int)status, err.message);
    snprintf(last_message, sizeof last_message, "%s", err.message);
    for (size_t i = 0; want[i]; i++) {
        char name[4200]; /* the first: the file, named as the input directory + "/" + name */
        snprintf(name, sizeof name, "%s/%s", fd->confined ? "in" : in, want[i]);
        bool named = i == 0 && status != QUANT_CK_ERR_CANCELLED;
        ck_assert_msg(strstr(err.message, named ? name : want[i]), "'%s' not in: %s",
                      named ? name : want[i], err.message);
    }
    ck_assert_uint_eq(quant_report_output_count(rep), 0);
    quant_report_free(rep);
    ck_assert_int_ne(access(out, F_OK), 0);
    ck_assert_int_eq(ck_count_entries(dir), 1); /* "in" alone: no temporaries left */
    feed_free(fd);
    kit_rmtree(dir);
    free(out);
    free(in);
    free(dir);
}

/* Where the wait gives up: the file, the end past which it says false. */
typedef struct cut {
    const char *file;
    int64_t at; /* bytes; negative: from the end of the file (-1: all but the last byte) */
    quant_layout layout;
    const char *want[4]; /* in the message; a name is matched as in/name */
} cut;

START_TEST(test_wait_false)
{
    static const cut cuts[] = {
        {SHARD1, 0, QUANT_LAYOUT_NATIVE, {SHARD1 ": input stopped before byte 8 ", NULL}},
        {SHARD2, 8, QUANT_LAYOUT_NATIVE, {SHARD2 ": input stopped before byte ", NULL}},
        {SHARD1,
         150000,
         QUANT_LAYOUT_NATIVE,
         {SHARD1 ": tensor '", "': input stopped before byte ", NULL}},
        {SHARD2, -1, QUANT_LAYOUT_CTENSORS, {SHARD2 ": tensor '", NULL}},
        {SHARD2,
         0x7fffffff,
         QUANT_LAYOUT_NATIVE,
         {SHARD2 ": input stopped before the whole file", NULL}},
        {"config.json",
         0,
         QUANT_LAYOUT_NATIVE,
         {"config.json: input stopped before the whole file", NULL}},
        {"config.json",
         0,
         QUANT_LAYOUT_CTENSORS,
         {"config.json: input stopped before the whole file", NULL}},
        {INDEX, 0, QUANT_LAYOUT_NATIVE, {INDEX ": input stopped before the whole file", NULL}},
    };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        feed fd = {0};
        fd.fail_name = cuts[i].file;
        fd.confined = i % 2 == 1;
        char src[4096];
        snprintf(src, sizeof src, "%s/" FIXTURE "/%s", ck_data_dir(), cuts[i].file);
        struct stat sb;
        ck_assert_int_eq(stat(src, &sb), 0);
        int64_t at = cuts[i].at;
        fd.fail_at = (uint64_t)(at < 0 ? sb.st_size + at : at);
        const char *want[6] = {cuts[i].want[0], cuts[i].want[1], ": cut by the test", NULL};
        if (!want[1]) want[1] = ": cut by the test", want[2] = NULL;
        dir_fails(&fd, RULES_INT8, cuts[i].layout, NULL, QUANT_CK_ERR_IO, want);
    }
}
END_TEST

/* Once whole, a shard longer or shorter than its header says: the usual size errors. */
START_TEST(test_whole_size_checked)
{
    feed fd = {0};
    fd.resize_name = SHARD2;
    fd.resize_by = 5;
    const char *longer[] = {SHARD2 ": 5 trailing bytes after the last tensor's data", NULL};
    dir_fails(&fd, RULES_INT8, QUANT_LAYOUT_NATIVE, NULL, QUANT_CK_ERR_FORMAT, longer);
    feed fd2 = {0};
    fd2.resize_name = SHARD1;
    fd2.resize_by = -3;
    const char *shorter[] = {SHARD1 ": file is truncated", " (3 missing bytes)", NULL};
    dir_fails(&fd2, RULES_INT8, QUANT_LAYOUT_CTENSORS, NULL, QUANT_CK_ERR_FORMAT, shorter);
}
END_TEST

/* The library checks the cancel flag once a wait returns. */
START_TEST(test_cancel_in_wait)
{
    feed fd = {0};
    atomic_int cancel = 0;
    fd.cancel_on_tensor = &cancel;
    const char *want[] = {"cancelled", NULL};
    dir_fails(&fd, RULES_INT8, QUANT_LAYOUT_NATIVE, &cancel, QUANT_CK_ERR_CANCELLED, want);
    ck_assert_str_eq(last_message, "cancelled"); /* as any cancelled run says it */
}
END_TEST

/* A file run's message names the file as given. */
START_TEST(test_file_cut_mid_tensor)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "in"), from[4096];
    snprintf(from, sizeof from, "%s/" FIXTURE, ck_data_dir());
    ck_assert_int_eq(mkdir(in, 0755), 0);
    feed fd = {0};
    feed_add(&fd, from, SHARD1, "one.safetensors");
    fd.fail_name = "one.safetensors";
    fd.fail_at = 200000;
    feed_init(&fd, in);
    char *file = kit_join(in, "one.safetensors"), *out = kit_join(dir, "out.safetensors");
    pthread_t w;
    ck_assert_int_eq(pthread_create(&w, NULL, writer_main, &fd), 0);
    quant_pipeline_options o;
    stream_options(&o, QUANT_LAYOUT_NATIVE, &fd);
    quant_ck_error err;
    quant_ck_status st = ck_quantize(RULES_INT8, file, out, &o, NULL, &err);
    pthread_join(w, NULL);
    ck_assert_int_eq(st, QUANT_CK_ERR_IO);
    char want[4200];
    snprintf(want, sizeof want, "%s: tensor '", file);
    ck_assert_msg(strncmp(err.message, want, strlen(want)) == 0, "%s", err.message);
    ck_assert_ptr_nonnull(strstr(err.message, ": cut by the test"));
    ck_assert_int_eq(ck_count_entries(dir), 1);
    feed_free(&fd);
    kit_rmtree(dir);
    free(file);
    free(out);
    free(in);
    free(dir);
}
END_TEST

START_TEST(test_map_input_refused)
{
    char in[4096];
    snprintf(in, sizeof in, "%s/" FIXTURE, ck_data_dir());
    char *dir = ck_tmpdir(), *out = kit_join(dir, "out");
    feed fd = {0};
    quant_pipeline_options o;
    stream_options(&o, QUANT_LAYOUT_NATIVE, &fd);
    o.map_input = true;
    quant_ck_error err;
    ck_assert_int_eq(ck_quantize(RULES_INT8, in, out, &o, NULL, &err), QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "map_input"));
    quant_ruleset *rs = ck_rules(RULES_INT8);
    ck_assert_int_eq(quant_check_path(rs, in, &o, &err), QUANT_CK_ERR_ARG);
    quant_ruleset_free(rs);
    ck_assert_int_eq(fd.n_asks, 0);
    ck_assert_int_eq(ck_count_entries(dir), 0);
    kit_rmtree(dir);
    free(out);
    free(dir);
}
END_TEST

Suite *suite_stream_in(void)
{
    Suite *s = suite_create("stream_in");
    TCase *tc = tcase_create("stream_in");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_dir_native);
    tcase_add_test(tc, test_dir_ctensors);
    tcase_add_test(tc, test_dir_nvfp4_prepass);
    tcase_add_test(tc, test_dir_static_acts);
    tcase_add_test(tc, test_file_both_layouts);
    tcase_add_test(tc, test_check_waits_for_headers);
    tcase_add_test(tc, test_wait_false);
    tcase_add_test(tc, test_whole_size_checked);
    tcase_add_test(tc, test_cancel_in_wait);
    tcase_add_test(tc, test_file_cut_mid_tensor);
    tcase_add_test(tc, test_map_input_refused);
    suite_add_tcase(s, tc);
    return s;
}
