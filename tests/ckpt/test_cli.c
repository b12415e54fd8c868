/* test_cli.c -- the `quant` command as a user runs it: the binary named by $QUANT_BIN is run with
 * fork/exec (stdout and stderr captured to files, or stderr on a pseudo-terminal) on generated
 * files: help texts, exit statuses 0/1/2 with one-line "quant: " errors, nothing left at OUT on
 * failure, quantize -> inspect (table and JSON) -> dequantize, the report, the progress bar on a
 * terminal only, links followed (a Hugging Face cache snapshot).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckutil.h"
#include "quant_pipeline.h"

#define MAX_ARGS 24
#define ROWS     16
#define COLS     64

/* What one run of the binary produced. */
typedef struct run_result {
    int status; /* exit status, or 128 + signal */
    char *out, *err;
} run_result;

static void result_free(run_result *r)
{
    free(r->out);
    free(r->err);
}

static const char *quant_bin(void)
{
    const char *bin = getenv("QUANT_BIN");
    ck_assert_msg(bin && *bin, "QUANT_BIN is not set: it must name the quant binary to test");
    ck_assert_msg(access(bin, X_OK) == 0, "QUANT_BIN=%s is not executable", bin);
    return bin;
}

/* The whole file as a NUL-terminated string ("" when missing). */
static char *slurp(const char *path)
{
    size_t n = 0;
    char *data = kit_read_file(path, &n);
    char *s = malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    if (data) memcpy(s, data, n);
    s[n] = '\0';
    free(data);
    return s;
}

static int wait_status(pid_t pid)
{
    int ws;
    while (waitpid(pid, &ws, 0) < 0) ck_assert_int_eq(errno, EINTR);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* In the child: `fd` becomes descriptor `to`, then the binary runs with `args`. */
static void exec_quant(const char *bin, const char *const *args)
{
    char *argv[MAX_ARGS + 2];
    int n = 0;
    argv[n++] = (char *)"quant";
    for (; args[n - 1] && n <= MAX_ARGS; n++) argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    execv(bin, argv);
    _exit(127);
}

static void redirect(const char *path, int to)
{
    int fd = path ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600) : open("/dev/null", O_RDWR);
    if (fd < 0 || dup2(fd, to) < 0) _exit(126);
    close(fd);
}

/* Runs quant with the NULL-terminated `args`; stdout and stderr go through files in `dir`. */
static run_result run_in(const char *dir, const char *const *args)
{
    const char *bin = quant_bin();
    char *out = kit_join(dir, ".stdout"), *err = kit_join(dir, ".stderr");
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        redirect(NULL, STDIN_FILENO);
        redirect(out, STDOUT_FILENO);
        redirect(err, STDERR_FILENO);
        exec_quant(bin, args);
    }
    run_result r = {.status = wait_status(pid)};
    r.out = slurp(out);
    r.err = slurp(err);
    unlink(out);
    unlink(err);
    free(out);
    free(err);
    return r;
}

#define RUN(dir, ...) run_in(dir, (const char *const[]){__VA_ARGS__, NULL})

/* Runs quant with stderr on a pseudo-terminal; returns what the terminal received. */
static char *run_on_tty(const char *dir, const char *const *args, int *status)
{
    const char *bin = quant_bin();
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    ck_assert_int_ge(master, 0);
    ck_assert_int_eq(grantpt(master), 0);
    ck_assert_int_eq(unlockpt(master), 0);
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
    ck_assert_int_ge(slave, 0);
    char *out = kit_join(dir, ".stdout");
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        redirect(NULL, STDIN_FILENO);
        redirect(out, STDOUT_FILENO);
        if (dup2(slave, STDERR_FILENO) < 0) _exit(126);
        close(slave);
        close(master);
        exec_quant(bin, args);
    }
    /* The output is small (far below the terminal buffer): read it once the child is done,
     * keeping our end of the slave open so the buffered bytes stay readable. */
    *status = wait_status(pid);
    ck_assert_int_eq(fcntl(master, F_SETFL, O_NONBLOCK), 0);
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    ssize_t got;
    while (len + 1 < cap && (got = read(master, buf + len, cap - 1 - len)) > 0) len += (size_t)got;
    buf[len] = '\0';
    close(slave);
    close(master);
    unlink(out);
    free(out);
    return buf;
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* stderr holds exactly one line, starting with "quant: ". */
static void assert_one_line_error(const run_result *r)
{
    ck_assert_msg(strncmp(r->err, "quant: ", 7) == 0, "stderr: '%s'", r->err);
    char *nl = strchr(r->err, '\n');
    ck_assert_msg(nl && nl[1] == '\0', "not one line: '%s'", r->err);
}

static void assert_usage_error(const run_result *r)
{
    ck_assert_msg(r->status == 2, "exit %d, stderr '%s'", r->status, r->err);
    assert_one_line_error(r);
}

/* ---- fixtures ------------------------------------------------------------------------------- */

/* A model: "m.w.weight" [ROWS, COLS] f32, rank-1 "m.w.bias", "emb.weight" no rule touches.
 * Returns the weight (caller frees). */
static float *make_model(const char *path, uint64_t seed)
{
    float *w = malloc(ROWS * COLS * sizeof *w), bias[ROWS], emb[4 * 8];
    ck_fill(w, ROWS * COLS, seed, 1.0f);
    ck_fill(bias, ROWS, seed + 1, 1.0f);
    ck_fill(emb, 32, seed + 2, 1.0f);
    kit_st_tensor t[] = {
        {"emb.weight", "F32", 2, {4, 8}, emb, sizeof emb},
        {"m.w.weight", "F32", 2, {ROWS, COLS}, w, ROWS * COLS * sizeof *w},
        {"m.w.bias", "F32", 1, {ROWS}, bias, sizeof bias},
    };
    ck_gen_file(path, t, 3, "{\"format\":\"pt\",\"note\":\"kept\"}");
    return w;
}

static const char int8_rules[] = "[{\"module_path\":\"m\\\\..*\",\"weight_qtype\":\"int8\"}]";

/* A temporary directory with in.safetensors and rules.json; `w` receives the weight. */
static char *setup(float **w)
{
    char *dir = ck_tmpdir();
    char *in = kit_join(dir, "in.safetensors"), *rules = kit_join(dir, "rules.json");
    float *weight = make_model(in, 11);
    ck_write_file(rules, int8_rules, strlen(int8_rules));
    if (w)
        *w = weight;
    else
        free(weight);
    free(in);
    free(rules);
    return dir;
}

static json_t *load_json_text(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    ck_assert_msg(j != NULL, "bad JSON (%s): %.200s", je.text, text);
    return j;
}

static json_t *load_json_file(const char *path)
{
    ck_assert_msg(exists(path), "%s is missing", path);
    char *text = slurp(path);
    json_t *j = load_json_text(text);
    free(text);
    return j;
}

/* The tensors array entry named `name`, or NULL. */
static json_t *tensor_entry(json_t *root, const char *name)
{
    json_t *tensors = json_object_get(root, "tensors"), *e;
    size_t i;
    json_array_foreach(tensors, i, e) if (strcmp(json_string_value(json_object_get(e, "name")),
                                                 name) == 0) return e;
    return NULL;
}

/* ---- help and usage errors ------------------------------------------------------------------ */

START_TEST(test_help)
{
    char *dir = ck_tmpdir();
    static const char *const cmds[] = {"quantize", "inspect", "dequantize", "plan"};
    run_result r = RUN(dir, "--help");
    ck_assert_int_eq(r.status, 0);
    for (size_t i = 0; i < 4; i++) ck_assert_ptr_nonnull(strstr(r.out, cmds[i]));
    ck_assert_str_eq(r.err, "");
    result_free(&r);
    for (size_t i = 0; i < 4; i++) {
        char want[64];
        snprintf(want, sizeof want, "usage: quant %s", cmds[i]);
        r = RUN(dir, cmds[i], "--help");
        ck_assert_msg(r.status == 0, "%s --help: exit %d", cmds[i], r.status);
        ck_assert_msg(strstr(r.out, want) != NULL, "%s --help: '%s'", cmds[i], r.out);
        ck_assert_str_eq(r.err, "");
        result_free(&r);
        r = RUN(dir, "help", cmds[i]);
        ck_assert_int_eq(r.status, 0);
        ck_assert_ptr_nonnull(strstr(r.out, want));
        result_free(&r);
    }
    r = RUN(dir, "--version");
    ck_assert_int_eq(r.status, 0);
    char want_version[64];
    snprintf(want_version, sizeof want_version, "quant %s (libquant ", QUANT_RELEASE);
    ck_assert_msg(strncmp(r.out, want_version, strlen(want_version)) == 0, "--version: '%s'",
                  r.out);
    result_free(&r);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_usage_errors)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.safetensors");
    char *rules = kit_join(dir, "rules.json");
    const char *const cases[][MAX_ARGS] = {
        {"frobnicate", NULL},
        {"--frobnicate", NULL},
        {"quantize", "--bogus", "--rules", rules, in, out, NULL},
        {"quantize", "-Z", "--rules", rules, in, out, NULL},
        {"quantize", in, out, NULL}, /* no --rules */
        {"quantize", in, out, "--rules", NULL},
        {"quantize", "--rules", rules, in, NULL},
        {"quantize", "--rules", rules, in, out, "extra", NULL},
        {"quantize", "--rules", rules, "--threads", "257", in, out, NULL},
        {"quantize", "--rules", rules, "--threads", "-1", in, out, NULL},
        {"quantize", "--rules", rules, "--threads", "4x", in, out, NULL},
        {"quantize", "--rules", rules, "--layout", "ggml", in, out, NULL},
        {"quantize", "--rules", rules, "--chunk-mib", "0", in, out, NULL},
        {"inspect", "--bogus", in, NULL},
        {"inspect", NULL},
        {"inspect", in, out, NULL},
        {"dequantize", "--dtype", "f64", in, out, NULL},
        {"dequantize", in, NULL},
        {"dequantize", "--threads", "many", in, out, NULL},
        {"help", "frobnicate", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result r = run_in(dir, cases[i]);
        ck_assert_msg(r.status == 2, "case %zu (%s %s): exit %d, stderr '%s'", i, cases[i][0],
                      cases[i][1] ? cases[i][1] : "", r.status, r.err);
        assert_one_line_error(&r);
        ck_assert_msg(!exists(out), "case %zu created OUT", i);
        result_free(&r);
    }
    run_result r = RUN(dir, "quantize", in, out);
    ck_assert_ptr_nonnull(strstr(r.err, "--rules"));
    result_free(&r);
    r = RUN(dir, "frobnicate");
    ck_assert_ptr_nonnull(strstr(r.err, "frobnicate"));
    result_free(&r);
    r = run_in(dir, (const char *const[]){NULL});
    assert_usage_error(&r);
    result_free(&r);
    free(in);
    free(out);
    free(rules);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- runtime failures ----------------------------------------------------------------------- */

START_TEST(test_bad_input)
{
    char *dir = setup(NULL);
    char *bad = kit_join(dir, "bad.safetensors"), *out = kit_join(dir, "out.safetensors");
    char *rules = kit_join(dir, "rules.json"), *missing = kit_join(dir, "missing.safetensors");
    /* The header claims 24 bytes of data; the file holds 4. */
    ck_write_st(bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", "abcd",
                4);
    const char *const inputs[] = {bad, missing};
    for (size_t i = 0; i < 2; i++) {
        run_result r = RUN(dir, "quantize", "--rules", rules, inputs[i], out);
        ck_assert_msg(r.status == 1, "exit %d, stderr '%s'", r.status, r.err);
        assert_one_line_error(&r);
        ck_assert(!exists(out));
        result_free(&r);
        r = RUN(dir, "inspect", inputs[i]);
        ck_assert_int_eq(r.status, 1);
        assert_one_line_error(&r);
        result_free(&r);
        r = RUN(dir, "dequantize", inputs[i], out);
        ck_assert_int_eq(r.status, 1);
        assert_one_line_error(&r);
        ck_assert(!exists(out));
        result_free(&r);
    }
    /* Only the input file and the rules remain (plus bad.safetensors): no temporary left. */
    ck_assert_int_eq(ck_count_entries(dir), 3);
    free(bad);
    free(out);
    free(rules);
    free(missing);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_bad_rules)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.safetensors");
    char *rules = kit_join(dir, "bad-rules.json"), *missing = kit_join(dir, "none.json");
    static const char bad[] = "[{\"module_path\":\".*\",\"weight_qtype\":\"int9\"}]";
    ck_write_file(rules, bad, strlen(bad));
    run_result r = RUN(dir, "quantize", "--rules", rules, in, out);
    ck_assert_msg(r.status == 1, "exit %d, stderr '%s'", r.status, r.err);
    assert_one_line_error(&r);
    ck_assert_msg(strstr(r.err, "weight_qtype") != NULL, "stderr: %s", r.err);
    ck_assert(!exists(out));
    result_free(&r);
    r = RUN(dir, "quantize", "--rules", missing, in, out);
    ck_assert_int_eq(r.status, 1);
    assert_one_line_error(&r);
    ck_assert(!exists(out));
    result_free(&r);
    /* A rule the tensor cannot satisfy: 64 columns do not split into tiles of 5. */
    static const char tiles[] = "[{\"weight_qtype\":\"int8\",\"tile_size\":5}]";
    ck_write_file(rules, tiles, strlen(tiles));
    r = RUN(dir, "quantize", "--rules", rules, in, out);
    ck_assert_int_eq(r.status, 1);
    assert_one_line_error(&r);
    ck_assert(!exists(out));
    result_free(&r);
    free(in);
    free(out);
    free(rules);
    free(missing);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_existing_output)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.safetensors");
    char *rules = kit_join(dir, "rules.json");
    ck_write_file(out, "keep", 4);
    run_result r = RUN(dir, "quantize", "--rules", rules, in, out);
    ck_assert_int_eq(r.status, 1);
    assert_one_line_error(&r);
    char *kept = slurp(out);
    ck_assert_str_eq(kept, "keep");
    free(kept);
    result_free(&r);
    free(in);
    free(out);
    free(rules);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- quantize -> inspect -> dequantize ------------------------------------------------------ */

static void check_report(const char *path, bool quality)
{
    json_t *rep = load_json_file(path);
    ck_assert_str_eq(json_string_value(json_object_get(rep, "format")), "quantd.report/1");
    json_t *w = tensor_entry(rep, "m.w.weight");
    ck_assert_ptr_nonnull(w);
    ck_assert_str_eq(json_string_value(json_object_get(w, "qtype")), "int8");
    ck_assert((json_object_get(w, "sqnr_db") != NULL) == quality);
    json_t *summary = json_object_get(rep, "summary");
    ck_assert_int_eq(json_integer_value(json_object_get(summary, "quantized")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(summary, "copied")), 2);
    json_decref(rep);
}

static void check_inspect(const char *dir, const char *path)
{
    run_result r = RUN(dir, "inspect", path);
    ck_assert_msg(r.status == 0, "inspect: exit %d, %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "int8") && strstr(r.out, "m.w.weight") &&
                      strstr(r.out, "emb.weight") && !strstr(r.out, "m.w.weight.qvalue") &&
                      !strstr(r.out, "m.w.weight.scale") && strstr(r.out, "note: kept") &&
                      strstr(r.out, "[16, 64]"),
                  "inspect: %s", r.out);
    result_free(&r);

    r = RUN(dir, "inspect", "--json", path);
    ck_assert_msg(r.status == 0, "inspect --json: exit %d, %s", r.status, r.err);
    json_t *root = load_json_text(r.out);
    json_t *w = tensor_entry(root, "m.w.weight"), *e = tensor_entry(root, "emb.weight");
    ck_assert_ptr_nonnull(w);
    ck_assert_ptr_nonnull(e);
    ck_assert_ptr_null(tensor_entry(root, "m.w.weight.qvalue"));
    ck_assert_str_eq(json_string_value(json_object_get(w, "qtype")), "int8");
    ck_assert_str_eq(json_string_value(json_object_get(w, "dtype")), "F32");
    json_t *shape = json_object_get(w, "shape");
    ck_assert_int_eq(json_array_size(shape), 2);
    ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), ROWS);
    ck_assert_int_eq(json_integer_value(json_array_get(shape, 1)), COLS);
    double lo = json_number_value(json_object_get(w, "scale_min"));
    double hi = json_number_value(json_object_get(w, "scale_max"));
    ck_assert_msg(lo > 0.0 && lo <= hi, "scale range [%g, %g]", lo, hi);
    ck_assert(json_is_null(json_object_get(e, "qtype")));
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(root, "metadata"), "note")),
                     "kept");
    ck_assert_ptr_null(json_object_get(json_object_get(root, "metadata"), "quantization"));
    json_decref(root);
    result_free(&r);
}

/* The dequantized weight: F32 (or `dtype`), original shape, within one step of each scale. */
static void check_dequantized(const char *path, const float *w, quant_st_dtype dtype)
{
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_open(path, &f, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_int_eq(f->n_tensors, 3);
    const quant_st_tensor *t = quant_st_find(f, "m.w.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(quant_st_find(f, "m.w.bias"));
    ck_assert_ptr_nonnull(quant_st_find(f, "emb.weight"));
    ck_assert_int_eq(t->dtype, dtype);
    ck_assert_int_eq(t->rank, 2);
    ck_assert_int_eq(t->shape[0], ROWS);
    ck_assert_int_eq(t->shape[1], COLS);
    if (dtype == QUANT_ST_F32) {
        float *x = malloc(ROWS * COLS * sizeof *x);
        ck_assert_int_eq(quant_st_read(f, t, 0, x, ROWS * COLS * sizeof *x, &err), QUANT_CK_OK);
        float absmax = 0.0f;
        for (int i = 0; i < ROWS * COLS; i++) absmax = fmaxf(absmax, fabsf(w[i]));
        for (int i = 0; i < ROWS * COLS; i++)
            ck_assert_msg(fabsf(x[i] - w[i]) <= absmax / 127.0f, "element %d: %g vs %g", i,
                          (double)x[i], (double)w[i]);
        free(x);
    }
    quant_st_close(f);
}

START_TEST(test_roundtrip)
{
    float *w;
    char *dir = setup(&w);
    char *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.safetensors");
    char *rules = kit_join(dir, "rules.json"), *report = kit_join(dir, "quant-report.json");
    char *dq = kit_join(dir, "dq.safetensors"), *dq16 = kit_join(dir, "dq16.safetensors");
    run_result r = RUN(dir, "quantize", "--rules", rules, "--threads", "2", in, out);
    ck_assert_msg(r.status == 0, "quantize: exit %d, %s", r.status, r.err);
    ck_assert_msg(strchr(r.err, '\r') == NULL, "a progress bar went into a pipe: %s", r.err);
    ck_assert_msg(strstr(r.err, "quantized 1 tensor") && strstr(r.err, "SQNR") &&
                      strstr(r.err, "quant-report.json"),
                  "summary: %s", r.err);
    ck_assert_str_eq(r.out, "");
    result_free(&r);
    check_report(report, true);
    check_inspect(dir, out);

    r = RUN(dir, "dequantize", out, dq);
    ck_assert_msg(r.status == 0, "dequantize: exit %d, %s", r.status, r.err);
    result_free(&r);
    check_dequantized(dq, w, QUANT_ST_F32);
    r = RUN(dir, "dequantize", "--dtype", "bf16", "--quiet", out, dq16);
    ck_assert_msg(r.status == 0, "dequantize: exit %d, %s", r.status, r.err);
    ck_assert_str_eq(r.err, "");
    result_free(&r);
    check_dequantized(dq16, w, QUANT_ST_BF16);

    r = RUN(dir, "inspect", in); /* a plain file: no qtype anywhere */
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_null(strstr(r.out, "int8"));
    result_free(&r);
    free(w);
    free(in);
    free(out);
    free(rules);
    free(report);
    free(dq);
    free(dq16);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_flags)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.safetensors");
    char *rules = kit_join(dir, "rules.json"), *report = kit_join(dir, "custom.json");
    char *ct = kit_join(dir, "ct.safetensors");
    run_result r = RUN(dir, "quantize", "--quiet", "--no-quality", "--report", report,
                       "--chunk-mib", "1", "--rules", rules, in, out);
    ck_assert_msg(r.status == 0, "exit %d, %s", r.status, r.err);
    ck_assert_str_eq(r.err, "");
    result_free(&r);
    check_report(report, false);
    char *default_report = kit_join(dir, "quant-report.json");
    ck_assert(!exists(default_report));
    free(default_report);

    r = RUN(dir, "quantize", "-q", "-l", "compressed-tensors", "-r", rules, "--report", report, in,
            ct);
    ck_assert_msg(r.status == 0, "exit %d, %s", r.status, r.err);
    result_free(&r);
    json_t *rep = load_json_file(report);
    ck_assert_str_eq(json_string_value(json_object_get(rep, "layout")), "compressed-tensors");
    json_decref(rep);
    free(in);
    free(out);
    free(rules);
    free(report);
    free(ct);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* A directory of two shards -> a directory with the report inside; dequantized back. */
START_TEST(test_directory)
{
    char *dir = ck_tmpdir();
    char *in = kit_join(dir, "model"), *out = kit_join(dir, "model-q"), *dq = kit_join(dir, "dq");
    char *rules = kit_join(dir, "rules.json");
    ck_assert_int_eq(mkdir(in, 0700), 0);
    char *s1 = kit_join(in, "a.safetensors"), *s2 = kit_join(in, "b.safetensors");
    free(make_model(s1, 1));
    float x[COLS * 4];
    ck_fill(x, COLS * 4, 5, 1.0f);
    kit_st_tensor t = {"m.v.weight", "F32", 2, {4, COLS}, x, sizeof x};
    ck_gen_file(s2, &t, 1, NULL);
    ck_write_file(rules, int8_rules, strlen(int8_rules));

    run_result r = RUN(dir, "quantize", "--rules", rules, in, out);
    ck_assert_msg(r.status == 0, "exit %d, %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "quantized 2 tensors"));
    result_free(&r);
    char *report = kit_join(out, "quant-report.json");
    json_t *rep = load_json_file(report);
    ck_assert_int_eq(json_array_size(json_object_get(rep, "tensors")), 4);
    json_decref(rep);
    char *q2 = kit_join(out, "b.safetensors");
    r = RUN(dir, "inspect", "--json", q2);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "\"int8\""));
    result_free(&r);

    r = RUN(dir, "dequantize", in, dq); /* nothing quantized: a copy */
    ck_assert_int_eq(r.status, 0);
    result_free(&r);
    kit_rmtree(dq);
    r = RUN(dir, "dequantize", out, dq);
    ck_assert_msg(r.status == 0, "exit %d, %s", r.status, r.err);
    result_free(&r);
    char *d2 = kit_join(dq, "b.safetensors");
    quant_st_file *f = NULL;
    ck_assert_int_eq(quant_st_open(d2, &f, NULL), QUANT_CK_OK);
    ck_assert_ptr_nonnull(quant_st_find(f, "m.v.weight"));
    ck_assert_int_eq(f->n_tensors, 1);
    quant_st_close(f);
    free(d2);
    free(q2);
    free(report);
    free(s1);
    free(s2);
    free(in);
    free(out);
    free(dq);
    free(rules);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* Links are followed by the command: a Hugging Face cache snapshot, every file a link into
 * ../../blobs, quantizes (and dequantizes) into real files. */
START_TEST(test_hf_cache_links)
{
    char *dir = ck_tmpdir();
    char *repo = kit_join(dir, "models--tiny"), *blobs = kit_join(repo, "blobs");
    char *snaps = kit_join(repo, "snapshots"), *snap = kit_join(snaps, "0123abcd");
    char *out = kit_join(dir, "q"), *dq = kit_join(dir, "dq"), *rules = kit_join(dir, "rules.json");
    ck_assert_int_eq(mkdir(repo, 0700), 0);
    ck_assert_int_eq(mkdir(blobs, 0700), 0);
    ck_assert_int_eq(mkdir(snaps, 0700), 0);
    ck_assert_int_eq(mkdir(snap, 0700), 0);
    char *b1 = kit_join(blobs, "5f1e0a"), *b2 = kit_join(blobs, "9c3d7b");
    free(make_model(b1, 4));
    ck_write_file(b2, "{\"model_type\":\"llama\"}", 22);
    ck_write_file(rules, int8_rules, strlen(int8_rules));
    char *l1 = kit_join(snap, "model.safetensors"), *l2 = kit_join(snap, "config.json");
    ck_assert_int_eq(symlink("../../blobs/5f1e0a", l1), 0);
    ck_assert_int_eq(symlink("../../blobs/9c3d7b", l2), 0);

    run_result r = RUN(dir, "quantize", "--quiet", "--rules", rules, snap, out);
    ck_assert_msg(r.status == 0, "exit %d, %s", r.status, r.err);
    result_free(&r);
    char *q1 = kit_join(out, "model.safetensors"), *qc = kit_join(out, "config.json");
    struct stat sb;
    ck_assert(lstat(q1, &sb) == 0 && S_ISREG(sb.st_mode));
    ck_assert(lstat(qc, &sb) == 0 && S_ISREG(sb.st_mode));
    quant_st_file *f = NULL;
    ck_assert_int_eq(quant_st_open(q1, &f, NULL), QUANT_CK_OK);
    ck_assert_ptr_nonnull(quant_st_find(f, "m.w.weight.qvalue"));
    quant_st_close(f);
    char *cfg = slurp(qc);
    ck_assert_str_eq(cfg, "{\"model_type\":\"llama\"}");
    free(cfg);
    r = RUN(dir, "dequantize", snap, dq);
    ck_assert_msg(r.status == 0, "exit %d, %s", r.status, r.err);
    result_free(&r);
    free(q1);
    free(qc);
    free(l1);
    free(l2);
    free(b1);
    free(b2);
    free(repo);
    free(blobs);
    free(snaps);
    free(snap);
    free(out);
    free(dq);
    free(rules);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* The bar is drawn on a terminal ('\r' redraws) and not with --quiet. */
START_TEST(test_progress_tty)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.safetensors");
    char *out2 = kit_join(dir, "out2.safetensors"), *rules = kit_join(dir, "rules.json");
    int status;
    char *tty = run_on_tty(dir, (const char *const[]){"quantize", "--rules", rules, in, out, NULL},
                           &status);
    ck_assert_msg(status == 0, "exit %d: %s", status, tty);
    ck_assert_msg(strchr(tty, '\r') && strstr(tty, "tensors") && strstr(tty, "ETA"),
                  "no progress bar on a terminal: '%s'", tty);
    free(tty);
    tty = run_on_tty(dir,
                     (const char *const[]){"quantize", "--quiet", "--rules", rules, in, out2, NULL},
                     &status);
    ck_assert_int_eq(status, 0);
    ck_assert_msg(tty[0] == '\0', "--quiet wrote to the terminal: '%s'", tty);
    free(tty);
    free(in);
    free(out);
    free(out2);
    free(rules);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- outputs are regular files only -----------------------------------------------------------
 */

static bool is_type(const char *path, mode_t type)
{
    struct stat sb;
    return lstat(path, &sb) == 0 && (sb.st_mode & S_IFMT) == type;
}

/* quant quantize ... --report TARGET: refused before the run, TARGET and OUT untouched. */
static void expect_report_refused(const char *dir, const char *target, const char *why)
{
    char *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.safetensors");
    char *rules = kit_join(dir, "rules.json");
    run_result r = RUN(dir, "quantize", "-q", "--rules", rules, "--report", target, in, out);
    ck_assert_msg(r.status == 1, "%s: exit %d, stderr '%s'", target, r.status, r.err);
    assert_one_line_error(&r);
    ck_assert_msg(strstr(r.err, target) && strstr(r.err, why), "%s: '%s'", target, r.err);
    ck_assert_msg(!exists(out), "%s: the run went ahead", target);
    result_free(&r);
    free(in);
    free(out);
    free(rules);
}

/* --report FILE must be a regular file or nothing: a FIFO, a directory, a device or a link is
 * refused (never replaced, never written through); an existing regular file is replaced. */
START_TEST(test_report_target)
{
    char *dir = setup(NULL);
    char *fifo = kit_join(dir, "fifo"), *sub = kit_join(dir, "sub"), *dev = kit_join(dir, "null");
    char *target = kit_join(dir, "target.json"), *link = kit_join(dir, "link.json");
    char *dangling = kit_join(dir, "dangling.json"), *report = kit_join(dir, "r.json");
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    expect_report_refused(dir, fifo, "not a regular file (a FIFO)");
    ck_assert(is_type(fifo, S_IFIFO));
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    expect_report_refused(dir, sub, "not a regular file (a directory)");
    ck_assert(is_type(sub, S_IFDIR));
    if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0) { /* root: a /dev/null of our own */
        expect_report_refused(dir, dev, "not a regular file (a character device)");
        ck_assert(is_type(dev, S_IFCHR));
    }
    ck_write_file(target, "keep", 4);
    ck_assert_int_eq(symlink("target.json", link), 0);
    expect_report_refused(dir, link, "a symbolic link");
    ck_assert(is_type(link, S_IFLNK));
    char *kept = slurp(target);
    ck_assert_str_eq(kept, "keep");
    free(kept);
    ck_assert_int_eq(symlink("nowhere.json", dangling), 0);
    expect_report_refused(dir, dangling, "a symbolic link");
    ck_assert(is_type(dangling, S_IFLNK));
    /* the default report beside a file OUT: a link there is refused too */
    char *in = kit_join(dir, "in.safetensors"), *out = kit_join(dir, "out.safetensors");
    char *rules = kit_join(dir, "rules.json"), *def = kit_join(dir, "quant-report.json");
    ck_assert_int_eq(symlink("target.json", def), 0);
    run_result r = RUN(dir, "quantize", "-q", "--rules", rules, in, out);
    ck_assert_msg(r.status == 1 && strstr(r.err, "quant-report.json") &&
                      strstr(r.err, "a symbolic link"),
                  "exit %d: %s", r.status, r.err);
    ck_assert(!exists(out));
    ck_assert(is_type(def, S_IFLNK));
    result_free(&r);
    /* a regular file is replaced */
    ck_write_file(report, "old", 3);
    r = RUN(dir, "quantize", "-q", "--rules", rules, "--report", report, in, out);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    result_free(&r);
    check_report(report, true);
    free(in);
    free(out);
    free(rules);
    free(def);
    free(fifo);
    free(sub);
    free(dev);
    free(target);
    free(link);
    free(dangling);
    free(report);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* OUT itself: a link (even a dangling one, even to an empty directory) is refused, for quantize
 * and dequantize, and left as it is. */
START_TEST(test_output_target)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *rules = kit_join(dir, "rules.json");
    char *out = kit_join(dir, "out.safetensors"), *empty = kit_join(dir, "empty");
    char *model = kit_join(dir, "model"), *shard = kit_join(model, "a.safetensors");
    char *outdir = kit_join(dir, "outdir"), *fifo = kit_join(dir, "fifo.safetensors");
    ck_assert_int_eq(symlink("nowhere.safetensors", out), 0);
    run_result r = RUN(dir, "quantize", "-q", "--rules", rules, in, out);
    ck_assert_msg(r.status == 1 && strstr(r.err, out) && strstr(r.err, "a symbolic link"),
                  "exit %d: %s", r.status, r.err);
    assert_one_line_error(&r);
    result_free(&r);
    ck_assert(is_type(out, S_IFLNK));
    r = RUN(dir, "dequantize", "-q", in, out);
    ck_assert_msg(r.status == 1 && strstr(r.err, "a symbolic link"), "exit %d: %s", r.status,
                  r.err);
    result_free(&r);
    ck_assert(is_type(out, S_IFLNK));
    char *nowhere = kit_join(dir, "nowhere.safetensors");
    ck_assert(!exists(nowhere));
    free(nowhere);
    /* a directory run into a link to an empty directory */
    ck_assert_int_eq(mkdir(model, 0755), 0);
    free(make_model(shard, 3));
    ck_assert_int_eq(mkdir(empty, 0755), 0);
    ck_assert_int_eq(symlink("empty", outdir), 0);
    r = RUN(dir, "quantize", "-q", "--rules", rules, model, outdir);
    ck_assert_msg(r.status == 1 && strstr(r.err, "a symbolic link"), "exit %d: %s", r.status,
                  r.err);
    result_free(&r);
    ck_assert(is_type(outdir, S_IFLNK));
    char *slashed = kit_join(outdir, ""); /* "outdir/" names the link too */
    r = RUN(dir, "quantize", "-q", "--rules", rules, model, slashed);
    ck_assert_msg(r.status == 1 && strstr(r.err, "a symbolic link"), "exit %d: %s", r.status,
                  r.err);
    result_free(&r);
    free(slashed);
    ck_assert(is_type(outdir, S_IFLNK));
    ck_assert_int_eq(ck_count_entries(empty), 0);
    /* a FIFO as OUT */
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    r = RUN(dir, "quantize", "-q", "--rules", rules, in, fifo);
    ck_assert_msg(r.status == 1 && strstr(r.err, "not a regular file (a FIFO)"), "exit %d: %s",
                  r.status, r.err);
    result_free(&r);
    ck_assert(is_type(fifo, S_IFIFO));
    free(in);
    free(rules);
    free(out);
    free(empty);
    free(model);
    free(shard);
    free(outdir);
    free(fifo);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- stale temporaries ------------------------------------------------------------------------
 */

static void die_now(void *user, const quant_progress *p)
{
    (void)user;
    (void)p;
    raise(SIGKILL);
}

/* A run killed with SIGKILL after its first unit of work (in a child process of ours). */
static void quantize_then_die(const char *in, const char *out)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        quant_ruleset *rs = NULL;
        if (quant_ruleset_parse(int8_rules, strlen(int8_rules), NULL, &rs, NULL) != QUANT_CK_OK)
            _exit(2);
        quant_pipeline_options o;
        quant_pipeline_options_init(&o);
        o.progress = die_now;
        quant_quantize_path(rs, in, out, &o, NULL, NULL);
        _exit(3); /* not reached */
    }
    ck_assert_int_eq(wait_status(pid), 128 + SIGKILL);
}

/* kill -9 leaves a temporary behind; the next run into the same directory removes it and says
 * so on stderr (a file run, a directory run, and dequantize). */
START_TEST(test_stale_temporaries)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *rules = kit_join(dir, "rules.json");
    char *out = kit_join(dir, "out.safetensors"), *dq = kit_join(dir, "dq.safetensors");
    char *model = kit_join(dir, "model"), *shard = kit_join(model, "a.safetensors");
    char *outdir = kit_join(dir, "outdir");
    quantize_then_die(in, out);
    ck_assert_int_eq(ck_count_entries(dir), 3); /* in, rules, the leftover */
    run_result r = RUN(dir, "quantize", "--rules", rules, in, out);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "quant: removed stale temporary ") &&
                      strstr(r.err, "out.safetensors."),
                  "%s", r.err);
    result_free(&r);
    ck_assert_int_eq(ck_count_entries(dir), 4); /* in, rules, out, quant-report.json */
    /* a directory run */
    ck_assert_int_eq(mkdir(model, 0755), 0);
    free(make_model(shard, 3));
    quantize_then_die(model, outdir);
    ck_assert_int_eq(ck_count_entries(dir), 6);
    r = RUN(dir, "quantize", "--rules", rules, model, outdir);
    ck_assert_msg(r.status == 0 && strstr(r.err, "removed stale temporary ") &&
                      strstr(r.err, "outdir."),
                  "exit %d: %s", r.status, r.err);
    result_free(&r);
    ck_assert_int_eq(ck_count_entries(dir), 6); /* + model, outdir; no leftover */
    /* dequantize cleans the directory it writes into, and prints notes even with -q */
    char *out2 = kit_join(dir, "out2.safetensors");
    quantize_then_die(in, out2);
    ck_assert_int_eq(ck_count_entries(dir), 7);
    r = RUN(dir, "dequantize", "-q", out, dq);
    ck_assert_msg(r.status == 0 && strstr(r.err, "removed stale temporary ") &&
                      strstr(r.err, "out2.safetensors."),
                  "exit %d: %s", r.status, r.err);
    result_free(&r);
    ck_assert_int_eq(ck_count_entries(dir), 7); /* the leftover gone, dq there */
    free(out2);
    free(in);
    free(rules);
    free(out);
    free(dq);
    free(model);
    free(shard);
    free(outdir);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* A file that is not safetensors: one line saying so, naming it. */
START_TEST(test_not_safetensors)
{
    char *dir = setup(NULL);
    char *readme = kit_join(dir, "README.md"), *out = kit_join(dir, "out.safetensors");
    char *rules = kit_join(dir, "rules.json");
    const char text[] = "# tiny model\n\nweights in model.safetensors\n";
    ck_write_file(readme, text, sizeof text - 1);
    run_result r = RUN(dir, "inspect", readme);
    ck_assert_int_eq(r.status, 1);
    assert_one_line_error(&r);
    ck_assert_msg(strstr(r.err, readme) && strstr(r.err, "not a safetensors file"), "%s", r.err);
    result_free(&r);
    r = RUN(dir, "quantize", "--rules", rules, readme, out);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "not a safetensors file"), "%s", r.err);
    result_free(&r);
    free(readme);
    free(out);
    free(rules);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* A rule set as a bare list and as {"rules": [...]} both work; a misspelt field gets a hint. */
START_TEST(test_rules_forms_and_hints)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *rules = kit_join(dir, "r.json");
    char *o1 = kit_join(dir, "o1.safetensors"), *o2 = kit_join(dir, "o2.safetensors");
    const char obj[] = "{\"rules\": [{\"module_path\": \"m\\\\..*\", \"weight_qtype\": \"int8\"}]}";
    ck_write_file(rules, obj, strlen(obj));
    run_result r = RUN(dir, "quantize", "-q", "-r", rules, in, o1);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    result_free(&r);
    const char hint[] = "[{\"module_path\": \"m\\\\..*\", \"group_size\": 32}]";
    ck_write_file(rules, hint, strlen(hint));
    r = RUN(dir, "quantize", "-q", "-r", rules, in, o2);
    ck_assert_int_eq(r.status, 1);
    assert_one_line_error(&r);
    ck_assert_msg(strstr(r.err, "field 'group_size': unknown field, did you mean 'tile_size'?"),
                  "%s", r.err);
    result_free(&r);
    free(in);
    free(rules);
    free(o1);
    free(o2);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- the MSE search with importance from --stats (SPEC 9) ---------------------------------- */

/* --stats with mean_sq weighs a weight_importance rule's search: the summary says what it did,
 * the report names the activation; the same rules without --stats are refused naming the
 * weight. */
START_TEST(test_mse_importance_stats)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *rules = kit_join(dir, "mse.json");
    char *stats = kit_join(dir, "stats.json"), *out = kit_join(dir, "out.safetensors");
    char *report = kit_join(dir, "quant-report.json");
    static const char mse_rules[] =
        "[{\"module_path\":\"m\\\\.w\",\"weight_qtype\":\"int4\",\"tile_size\":16,"
        "\"weight_calibration_method\":\"mse\",\"weight_importance\":true}]";
    ck_write_file(rules, mse_rules, strlen(mse_rules));
    char json[2048];
    size_t at = (size_t)snprintf(json, sizeof json,
                                 "{\"m/w/dot_general0_lhs\":{\"count\":1,"
                                 "\"mean_sq\":[");
    for (int i = 0; i < COLS; i++)
        at += (size_t)snprintf(json + at, sizeof json - at, "%s%d", i ? "," : "", i % 3);
    snprintf(json + at, sizeof json - at, "]}}");
    ck_write_file(stats, json, strlen(json));
    run_result r = RUN(dir, "quantize", "-r", rules, "--stats", stats, in, out);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "mse search: 1 tensor, "), "%s", r.err);
    result_free(&r);
    json_t *rep = load_json_file(report);
    size_t i;
    json_t *t, *mse = NULL;
    json_array_foreach(json_object_get(rep, "tensors"), i, t)
    {
        if (json_object_get(t, "mse")) mse = json_object_get(t, "mse");
    }
    ck_assert_ptr_nonnull(mse);
    ck_assert_str_eq(json_string_value(json_object_get(mse, "importance")), "m/w/dot_general0_lhs");
    ck_assert_int_eq(json_integer_value(json_object_get(mse, "groups")), ROWS * COLS / 16);
    ck_assert(json_real_value(json_object_get(mse, "error_after")) <=
              json_real_value(json_object_get(mse, "error_before")));
    json_decref(rep);
    char *out2 = kit_join(dir, "out2.safetensors");
    r = RUN(dir, "quantize", "-r", rules, in, out2);
    free(out2);
    ck_assert_int_ne(r.status, 0);
    ck_assert_msg(strstr(r.err, "weight 'm.w.weight'") && strstr(r.err, "weight_importance"), "%s",
                  r.err);
    result_free(&r);
    kit_rmtree(dir);
    free(in);
    free(rules);
    free(stats);
    free(out);
    free(report);
    free(dir);
}
END_TEST

/* ---- plans and unused rules (SPEC section 10) ------------------------------------------------ */

/* Rule 0 matches nothing, rule 1 quantizes m.w.weight, rule 2 is shadowed by rule 1. */
static const char unused_rules[] = "[{\"module_path\":\"zzz\",\"weight_qtype\":\"int8\"},"
                                   "{\"module_path\":\"m\\\\..*\",\"weight_qtype\":\"int8\"},"
                                   "{\"module_path\":\"m\\\\.w\",\"weight_qtype\":\"int4\"}]";

/* quantize warns on stderr for each unused rule (index and regex) and still exits 0; the summary
 * and the report list them; a run that quantizes nothing says so. */
START_TEST(test_unused_rules_warned)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *rules = kit_join(dir, "u.json");
    char *out = kit_join(dir, "out.safetensors"), *report = kit_join(dir, "quant-report.json");
    ck_write_file(rules, unused_rules, strlen(unused_rules));
    run_result r = RUN(dir, "quantize", "-r", rules, in, out);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "quant: warning: rule 0 (module_path \"zzz\") is unused"), "%s",
                  r.err);
    ck_assert_msg(strstr(r.err, "quant: warning: rule 2 (module_path \"m\\.w\") is unused"), "%s",
                  r.err);
    ck_assert_ptr_null(strstr(r.err, "rule 1 ("));
    ck_assert_msg(strstr(r.err, "unused rules: 0, 2\n"), "%s", r.err);
    ck_assert_ptr_null(strstr(r.err, "no tensor was quantized"));
    result_free(&r);
    json_t *rep = load_json_file(report);
    json_t *u = json_object_get(json_object_get(rep, "summary"), "unused_rules");
    ck_assert_uint_eq(json_array_size(u), 2);
    ck_assert_int_eq(json_integer_value(json_array_get(u, 0)), 0);
    ck_assert_int_eq(json_integer_value(json_array_get(u, 1)), 2);
    json_decref(rep);
    /* nothing quantized: refused before any work, naming the rule and a module path */
    const char none[] = "[{\"module_path\":\"zzz\",\"weight_qtype\":\"int8\"}]";
    ck_write_file(rules, none, strlen(none));
    unlink(out);
    r = RUN(dir, "quantize", "-q", "-r", rules, in, out);
    ck_assert_msg(r.status == 1 && strstr(r.err, "quant: nothing to quantize: ") &&
                      strstr(r.err, "rule 0 (module_path \"zzz\") matches no tensor;") &&
                      strstr(r.err, "--allow-nothing-quantized") && !strstr(r.err, "did you mean"),
                  "exit %d: %s", r.status, r.err);
    ck_assert(!exists(out));
    result_free(&r);
    /* a regex that matches with ".*" before it: "did you mean '.*w'?", in the refusal and, when
     * something else is quantized, in the unused rule's warning */
    const char part[] = "[{\"module_path\":\"w\",\"weight_qtype\":\"int8\"}]";
    ck_write_file(rules, part, strlen(part));
    r = RUN(dir, "plan", "-r", rules, in);
    ck_assert_msg(r.status == 1 && strstr(r.err, "matches no tensor: did you mean '.*w'?"),
                  "exit %d: %s", r.status, r.err);
    result_free(&r);
    const char part2[] = "[{\"module_path\":\"w\",\"weight_qtype\":\"int8\"},"
                         "{\"module_path\":\"emb\",\"weight_qtype\":\"int8\"}]";
    ck_write_file(rules, part2, strlen(part2));
    r = RUN(dir, "quantize", "-q", "-r", rules, in, out);
    ck_assert_msg(r.status == 0 && strstr(r.err, "rule 0 (module_path \"w\") is unused") &&
                      strstr(r.err, "did you mean '.*w'?"),
                  "exit %d: %s", r.status, r.err);
    result_free(&r);
    unlink(out);
    /* allowed (the flag, or the rule set's allow_nothing_quantized): both warnings, even with
     * --quiet, and exit 0 */
    ck_write_file(rules, none, strlen(none));
    r = RUN(dir, "quantize", "-q", "--allow-nothing-quantized", "-r", rules, in, out);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "quant: warning: rule 0 (module_path \"zzz\") is unused"), "%s",
                  r.err);
    ck_assert_msg(strstr(r.err, "quant: warning: no tensor was quantized"), "%s", r.err);
    ck_assert(exists(out));
    result_free(&r);
    unlink(out);
    const char allowed[] = "{\"allow_nothing_quantized\":true,\"rules\":[{\"module_path\":"
                           "\"zzz\",\"weight_qtype\":\"int8\"}]}";
    ck_write_file(rules, allowed, strlen(allowed));
    r = RUN(dir, "quantize", "-q", "-r", rules, in, out);
    ck_assert_msg(r.status == 0 && strstr(r.err, "quant: warning: no tensor was quantized"),
                  "exit %d: %s", r.status, r.err);
    result_free(&r);
    free(in);
    free(rules);
    free(out);
    free(report);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* The quoted fields of the .TH line of man page `path`: field k (0-based) into out. */
static void th_field(const char *path, int k, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    char line[512];
    out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, ".TH ", 4) != 0) continue;
        const char *p = line;
        for (int i = 0; p && i <= k; i++) {
            const char *open = strchr(p, '"'), *close = open ? strchr(open + 1, '"') : NULL;
            if (i == k && close) snprintf(out, cap, "%.*s", (int)(close - open - 1), open + 1);
            p = close ? close + 1 : NULL;
        }
        break;
    }
    fclose(f);
}

/* One release for quant, quantd and the man pages: the Makefile's VERSION (the one definition,
 * passed to both programs) is what `quant --version` prints and what both man pages say, with
 * one date. */
START_TEST(test_one_version)
{
    FILE *f = fopen("Makefile", "r");
    ck_assert_ptr_nonnull(f);
    char line[256], version[64] = "";
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VERSION := %63s", version) == 1 ||
            sscanf(line, "VERSION    := %63s", version) == 1)
            break;
    fclose(f);
    ck_assert_str_eq(version, QUANT_RELEASE);
    char want[96], v1[96], v8[96], d1[96], d8[96];
    snprintf(want, sizeof want, "quantd %s", version);
    th_field("man/quant.1", 1, v1, sizeof v1);
    th_field("man/quantd.8", 1, v8, sizeof v8);
    th_field("man/quant.1", 0, d1, sizeof d1);
    th_field("man/quantd.8", 0, d8, sizeof d8);
    ck_assert_str_eq(v1, want);
    ck_assert_str_eq(v8, want);
    ck_assert_str_eq(d1, d8);
    ck_assert_msg(strlen(d1) > 4, "man page date '%s'", d1);
}
END_TEST

/* quantize with act_static_scale rules and no statistics: the error says how to give them; plan
 * takes them and marks the tensor */
START_TEST(test_srq_needs_stats)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *rules = kit_join(dir, "srq.json");
    char *out = kit_join(dir, "out.safetensors");
    const char srq[] = "[{\"module_path\":\"m\\\\.w\",\"weight_qtype\":\"int8\",\"act_qtype\":"
                       "\"int8\",\"act_static_scale\":true}]";
    ck_write_file(rules, srq, strlen(srq));
    run_result r = RUN(dir, "quantize", "-q", "-r", rules, in, out);
    ck_assert_msg(r.status == 1 && strstr(r.err, "sets act_static_scale") &&
                      strstr(r.err, "--stats STATS.json"),
                  "exit %d: %s", r.status, r.err);
    ck_assert(!exists(out));
    result_free(&r);
    /* quant plan takes the rules without statistics and marks the tensor as needing them */
    r = RUN(dir, "plan", "-r", rules, in);
    ck_assert_msg(r.status == 0 && strstr(r.out, "rule 0 (needs statistics)") &&
                      strstr(r.out, "1 tensor needs calibration statistics"),
                  "exit %d: %s%s", r.status, r.out, r.err);
    result_free(&r);
    r = RUN(dir, "plan", "--json", "-r", rules, in);
    ck_assert_msg(r.status == 0 && strstr(r.out, "\"needs_statistics\": true") &&
                      strstr(r.out, "\"needs_statistics\": 1"),
                  "exit %d: %s%s", r.status, r.out, r.err);
    result_free(&r);
    free(in);
    free(rules);
    free(out);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* quant plan: the table (rule or "copied: why", qtype, scale shape, output bytes), the totals and
 * the unused rules; --json is the library's document byte for byte; nothing is written. */
START_TEST(test_plan_command)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *rules = kit_join(dir, "u.json");
    ck_write_file(rules, unused_rules, strlen(unused_rules));
    int before = ck_count_entries(dir);
    run_result r = RUN(dir, "plan", "-r", rules, in);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.err, "");
    ck_assert_msg(strstr(r.out, "TENSOR") && strstr(r.out, "SCALE SHAPE"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "m.w.weight") && strstr(r.out, "rule 1") && strstr(r.out, "int8") &&
                      strstr(r.out, "[16, 1]"),
                  "%s", r.out);
    ck_assert_msg(strstr(r.out, "copied: rank < 2"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "copied: no rule matched"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "3 tensors: 1 quantized, 2 copied"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "unused rule 0: module_path \"zzz\""), "%s", r.out);
    ck_assert_msg(strstr(r.out, "unused rule 2: module_path \"m\\.w\""), "%s", r.out);
    result_free(&r);
    r = RUN(dir, "plan", "--json", "--rules", rules, in);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    quant_ruleset *rs = NULL;
    quant_plan *plan = NULL;
    quant_ck_error err;
    ck_assert_int_eq(quant_ruleset_load(rules, &rs, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_plan_path(rs, in, NULL, &plan, &err), QUANT_CK_OK);
    char *doc = quant_plan_json(plan);
    ck_assert_uint_eq(strlen(r.out), strlen(doc) + 1);
    ck_assert(strncmp(r.out, doc, strlen(doc)) == 0);
    free(doc);
    quant_plan_free(plan);
    quant_ruleset_free(rs);
    result_free(&r);
    ck_assert_int_eq(ck_count_entries(dir), before); /* nothing written */
    free(in);
    free(rules);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* Errors name the file or rule, on one line; usage errors exit 2. */
START_TEST(test_plan_errors)
{
    char *dir = setup(NULL);
    char *in = kit_join(dir, "in.safetensors"), *rules = kit_join(dir, "rules.json");
    char *missing = kit_join(dir, "missing.safetensors"), *bad = kit_join(dir, "bad.json");
    run_result r = RUN(dir, "plan", "-r", rules, missing);
    ck_assert_int_eq(r.status, 1);
    assert_one_line_error(&r);
    ck_assert_msg(strstr(r.err, "missing.safetensors"), "%s", r.err);
    result_free(&r);
    const char tile[] =
        "[{\"module_path\":\"m\\\\..*\",\"weight_qtype\":\"int8\",\"tile_size\":5}]";
    ck_write_file(bad, tile, strlen(tile));
    r = RUN(dir, "plan", "-r", bad, in);
    ck_assert_int_eq(r.status, 1);
    assert_one_line_error(&r);
    ck_assert_msg(strstr(r.err, "m.w.weight") && strstr(r.err, "rule 0"), "%s", r.err);
    result_free(&r);
    r = RUN(dir, "plan", in);
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "--rules is required"), "%s", r.err);
    result_free(&r);
    r = RUN(dir, "plan", "-r", rules, "--layout", "ggml", in);
    ck_assert_int_eq(r.status, 2);
    result_free(&r);
    r = RUN(dir, "plan", "-r", rules, in, in);
    ck_assert_int_eq(r.status, 2);
    result_free(&r);
    free(in);
    free(rules);
    free(missing);
    free(bad);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

/* A compressed-tensors group size no common vLLM kernel takes: plan and quantize succeed and warn
 * once for the rule on stderr (its first tensor, how many more, the group size, what to use);
 * the plan's JSON and the report carry the warning per tensor. */
START_TEST(test_ct_group_size_warned)
{
    char *dir = ck_tmpdir(), *in = kit_join(dir, "model"), *out = kit_join(dir, "model-q");
    char *rules = kit_join(dir, "rules.json");
    ck_assert_int_eq(mkdir(in, 0700), 0);
    char *shard = kit_join(in, "model.safetensors"), *cfg = kit_join(in, "config.json");
    float a[4 * 86], b[4 * 86];
    ck_fill(a, 4 * 86, 31, 1.0f);
    ck_fill(b, 4 * 86, 32, 1.0f);
    kit_st_tensor t[] = {{"m.a_proj.weight", "F32", 2, {4, 86}, a, sizeof a},
                         {"m.b_proj.weight", "F32", 2, {4, 86}, b, sizeof b}};
    ck_gen_file(shard, t, 2, NULL);
    ck_write_file(cfg, "{}", 2);
    const char *text = "[{\"module_path\":\".*_proj\",\"weight_qtype\":\"int4\",\"tile_size\":43}]";
    ck_write_file(rules, text, strlen(text));

    run_result r = RUN(dir, "plan", "-l", "compressed-tensors", "-r", rules, in);
    ck_assert_msg(r.status == 0, "exit %d, %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "quant: warning: tensor 'm.a_proj.weight' and 1 more tensor of "
                                "rule 0: vLLM has a scheme for this rule (WNA16)") != NULL,
                  "stderr: %s", r.err);
    ck_assert_msg(strstr(r.err, "not 43") && strstr(r.err, "use tile_size 32, 64 or 128"),
                  "stderr: %s", r.err);
    ck_assert_ptr_null(strstr(r.err, "m.b_proj.weight")); /* one line for the rule */
    result_free(&r);
    r = RUN(dir, "plan", "--json", "-l", "compressed-tensors", "-r", rules, in);
    ck_assert_int_eq(r.status, 0);
    json_t *doc = json_loads(r.out, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    json_t *ts = json_object_get(doc, "tensors");
    for (size_t i = 0; i < json_array_size(ts); i++)
        ck_assert_ptr_nonnull(json_object_get(json_array_get(ts, i), "warning"));
    json_decref(doc);
    result_free(&r);

    r = RUN(dir, "quantize", "-q", "-l", "compressed-tensors", "-r", rules, in, out);
    ck_assert_msg(r.status == 0, "exit %d, %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "warning: tensor 'm.a_proj.weight' and 1 more tensor of rule 0") &&
                      strstr(r.err, "not 43"),
                  "stderr: %s", r.err);
    result_free(&r);
    char *report = kit_join(out, "quant-report.json");
    json_t *rep = load_json_file(report);
    ts = json_object_get(rep, "tensors");
    ck_assert_int_eq(json_array_size(ts), 2);
    for (size_t i = 0; i < json_array_size(ts); i++)
        ck_assert_ptr_nonnull(
            strstr(json_string_value(json_object_get(json_array_get(ts, i), "warning")), "not 43"));
    json_decref(rep);
    free(report);
    free(shard);
    free(cfg);
    free(rules);
    free(in);
    free(out);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

Suite *suite_cli(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_usage_errors);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_bad_rules);
    tcase_add_test(tc, test_existing_output);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_flags);
    tcase_add_test(tc, test_directory);
    tcase_add_test(tc, test_hf_cache_links);
    tcase_add_test(tc, test_progress_tty);
    tcase_add_test(tc, test_report_target);
    tcase_add_test(tc, test_output_target);
    tcase_add_test(tc, test_stale_temporaries);
    tcase_add_test(tc, test_not_safetensors);
    tcase_add_test(tc, test_rules_forms_and_hints);
    tcase_add_test(tc, test_unused_rules_warned);
    tcase_add_test(tc, test_srq_needs_stats);
    tcase_add_test(tc, test_one_version);
    tcase_add_test(tc, test_mse_importance_stats);
    tcase_add_test(tc, test_plan_command);
    tcase_add_test(tc, test_plan_errors);
    tcase_add_test(tc, test_ct_group_size_warned);
    suite_add_tcase(s, tc);
    return s;
}
