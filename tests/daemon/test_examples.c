/* test_examples.c -- the examples suite: runs the NumPy example scripts
 * (examples/llama_np.py, collect_stats.py, eval_kld.py) on the fixture with a python3 that has
 * NumPy: the forward pass against the fixture's known greedy tokens; collect_stats.py posting to
 * the real quantd (what the server then holds equals the dump the script writes with --out for
 * the same seed, and its per-tensor SRQ scales are the absmax / 127.5 of the layer they name);
 * eval_kld.py on checkpoints made by `quant quantize` (int4 tile 32 diverges more
 * than int8 per-channel, both more than 0; an unquantized copy gives exactly 0 and full top-1
 * agreement; the compressed-tensors layout of the int4 rules gives the native layout's figures
 * exactly); and the scripts' refusals. The interpreter: $QUANT_PYTHON, else the first of
 * python3 (PATH) and /usr/bin/python3 (Debian's python3-numpy) that imports numpy; none is a
 * failure, not a skip.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"

#define SHARDED "tests/data/stories260K-bf16-sharded"
#define COLLECT "examples/collect_stats.py"
#define EVAL    "examples/eval_kld.py"

static const char *quant_bin(void)
{
    return getenv("QUANT_BIN") ? getenv("QUANT_BIN") : "build/bin/quant";
}

/* Runs argv (argv[0] looked up in PATH) with stdout and stderr in files of a temporary
 * directory; *out and *err (when not NULL) get them, malloc'd. Returns the exit status, or 128 +
 * the signal. Python writes no __pycache__ into the source tree. */
static int run(const char *const *argv, char **out, char **err)
{
    char *dir = qdt_tmpdir();
    char *o = kit_join(dir, "out"), *e = kit_join(dir, "err");
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(o, "w", stdout) || !freopen(e, "w", stderr)) _exit(126);
        setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    if (out) *out = qdt_read_file(o, NULL);
    if (err) *err = qdt_read_file(e, NULL);
    kit_rmtree(dir);
    free(o);
    free(e);
    free(dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The interpreter, found once in the runner's process (an unchecked fixture) so each forked test
 * does not pay for the search: the real executable behind a candidate that imports numpy (a
 * version manager's python3 shim takes seconds to start). */
static char *found_python;
static char tried[512];

static void find_python(void)
{
    if (found_python || tried[0]) return;
    const char *env = getenv("QUANT_PYTHON");
    const char *cands[] = {env ? env : "python3", env ? NULL : "/usr/bin/python3", NULL};
    for (int i = 0; cands[i]; i++) {
        char *out = NULL;
        const char *probe = "import sys, numpy; print(sys.executable)";
        int st = run((const char *[]){cands[i], "-c", probe, NULL}, &out, NULL);
        out[strcspn(out, "\n")] = '\0';
        if (st == 0 && out[0]) {
            found_python = out;
            return;
        }
        free(out);
        snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s%s", i ? " and " : "",
                 cands[i]);
    }
}

static const char *python(void)
{
    ck_assert_msg(found_python != NULL,
                  "no python3 that imports numpy (tried %s): scripts/install-deps installs "
                  "Debian's python3-numpy; or set QUANT_PYTHON",
                  tried);
    return found_python;
}

/* ---- llama_np.py ----------------------------------------------------------------------------- */

/* The forward pass against known tokens: the fixture's greedy continuation of BOS. The first four
 * are the ones published with this network (461, 461, 401, 401); the rest were
 * recorded from llama_np.py, which the float32 copy of the weights continues identically through
 * token 10. A wrong rotary convention, mask, GQA head mapping or norm changes them. */
START_TEST(test_forward_known_answer)
{
    char *out = NULL, *err = NULL;
    int st =
        run((const char *[]){python(), "examples/llama_np.py", SHARDED, "--greedy", "10", NULL},
            &out, &err);
    ck_assert_msg(st == 0, "llama_np.py exit %d: %s", st, err);
    ck_assert_msg(
        strstr(out, "dim 64, 5 layers, 8 heads / 4 KV heads, vocab 512, tied embeddings") &&
            strstr(out, "greedy from BOS: 1 461 461 401 401 401 461 378 455 473 456\n"),
        "%s", out);
    free(out);
    free(err);
}
END_TEST

/* ---- collect_stats.py ------------------------------------------------------------------------ */

/* The script's common arguments: 2 steps of 2 sequences of 16 tokens, seed 7. */
#define COLLECT_ARGS "--steps", "2", "--batch", "2", "--seq-len", "16", "--seed", "7"

/* The contraction (input) dimension of the fixture's linear layer behind activation `act`. */
static size_t in_dim(const char *act)
{
    return strstr(act, "/down_proj/") ? 172 : 64;
}

START_TEST(test_collect_posts)
{
    qdp d;
    qdp_start(&d, NULL);
    char *dump = kit_join(d.root, "stats.json"), *out = NULL, *err = NULL;
    /* the default statistics: absmax and mean_sq (SPEC sections 8 and 9) */
    int st = run((const char *[]){python(), COLLECT, SHARDED, "--url", d.base, "--model", "stories",
                                  COLLECT_ARGS, "--run-id", "t1", NULL},
                 &out, &err);
    ck_assert_msg(st == 0, "collect_stats.py exit %d: %s", st, err);
    ck_assert_msg(strstr(out, "posted 2 steps x 2 sequences x 16 tokens (seed 7), 35 activations"),
                  "%s", out);
    free(out);
    free(err);
    st = run((const char *[]){python(), COLLECT, SHARDED, COLLECT_ARGS, "--out", dump, NULL}, &out,
             &err);
    ck_assert_msg(st == 0, "collect_stats.py --out exit %d: %s", st, err);
    free(out);
    free(err);

    json_error_t je;
    json_t *file = json_load_file(dump, 0, &je);
    ck_assert_msg(file != NULL, "%s: %s", dump, je.text);
    json_t *fstats = json_object_get(file, "stats");
    ck_assert_uint_eq(json_object_size(fstats), 35); /* 5 layers x 7 linear layers */
    qdp_resp r = qdp_req(&d, "GET", "/v1/models/stories/stats", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    json_t *server = qdp_json(&r);
    json_t *sstats = json_object_get(server, "stats");
    ck_assert_uint_eq(json_object_size(sstats), 35);
    const char *act;
    json_t *f;
    json_object_foreach(fstats, act, f)
    {
        ck_assert_msg(strstr(act, "model/layers/") == act &&
                          strstr(act, "/dot_general0_lhs") == act + strlen(act) - 17,
                      "%s", act);
        json_t *s = json_object_get(sstats, act);
        ck_assert_msg(s != NULL, "quantd has no activation %s", act);
        ck_assert_int_eq(json_integer_value(json_object_get(s, "count")), 2);
        ck_assert_int_eq(json_integer_value(json_object_get(f, "count")), 2);
        /* the same sequences: the server's average is the file's sum / 2 */
        double avg = json_real_value(json_array_get(json_object_get(s, "absmax"), 0));
        double sum = json_real_value(json_array_get(json_object_get(f, "sum_of_absmax"), 0));
        ck_assert_msg(sum > 0 && fabs(avg - sum / 2) <= 1e-12 * sum, "%s: %.17g vs %.17g / 2", act,
                      avg, sum);
        json_t *msq = json_object_get(f, "sum_of_mean_sq");
        json_t *smsq = json_object_get(s, "mean_sq"); /* quantd's average of the same posts */
        ck_assert_uint_eq(json_array_size(msq), in_dim(act));
        ck_assert_uint_eq(json_array_size(smsq), in_dim(act));
        size_t i;
        json_t *v;
        json_array_foreach(msq, i, v)
        {
            /* a mean of squares is at most the square of the absmax, averaged */
            double x = json_real_value(v), m = json_real_value(json_array_get(smsq, i));
            ck_assert_msg(x > 0 && x <= sum * sum, "%s[%zu] = %g", act, i, x);
            ck_assert_msg(fabs(m - x / 2) <= 1e-12 * x, "%s mean_sq[%zu]: %.17g vs %.17g / 2", act,
                          i, m, x);
        }
    }
    /* the names are the checkpoint's module paths: quantd turns each into a static int8 scale
     * named after the layer, absmax / 127.5 (SPEC section 4) */
    qdp_resp sr = qdp_req(&d, "GET", "/v1/models/stories/scales?qtype=int8", NULL, NULL, 0, NULL);
    ck_assert_int_eq(sr.status, 200);
    json_t *sdoc = qdp_json(&sr), *scales = json_object_get(sdoc, "scales");
    ck_assert_uint_eq(json_object_size(scales), 35);
    const char *q0 = "model/layers/0/self_attn/q_proj/dot_general0_lhs";
    json_t *q0s = json_object_get(scales, q0);
    ck_assert_str_eq(json_string_value(json_object_get(q0s, "tensor_base")),
                     "model.layers.0.self_attn.q_proj.dot_general0_lhs");
    double absmax =
        json_real_value(json_array_get(json_object_get(json_object_get(sstats, q0), "absmax"), 0));
    double scale = json_real_value(json_array_get(json_object_get(q0s, "scale"), 0));
    ck_assert_msg(fabs(scale - absmax / 127.5) <= 1e-6 * scale, "%g vs %g / 127.5", scale, absmax);
    json_decref(sdoc);
    qdp_resp_free(&sr);
    json_decref(server);
    json_decref(file);
    qdp_resp_free(&r);
    free(dump);
    qdp_stop(&d);
}
END_TEST

START_TEST(test_collect_refusals)
{
    char *out = NULL, *err = NULL;
    int st = run((const char *[]){python(), COLLECT, SHARDED, "--stats", "absmax,min", NULL}, &out,
                 &err);
    ck_assert_int_eq(st, 2);
    ck_assert_msg(strstr(err, "--stats: a comma-separated list of distinct absmax, mean_sq"), "%s",
                  err);
    free(out);
    free(err);
    st = run((const char *[]){python(), COLLECT, "tests/data/bad", "--out", "/dev/null", NULL},
             &out, &err);
    ck_assert_int_eq(st, 1);
    ck_assert_msg(strstr(err, "collect_stats: ") && strstr(err, "config.json"), "%s", err);
    free(out);
    free(err);
}
END_TEST

/* ---- eval_kld.py ----------------------------------------------------------------------------- */

typedef struct kld {
    double mean, top1;
    long long positions;
    int dequantized;
    char layout[32]; /* the layout eval_kld.py found, "" for none */
} kld;

/* Quantizes the fixture with `rules` (a JSON list) into dir/name in `layout` (native or
 * compressed-tensors), then runs eval_kld.py on it. */
static kld quantize_and_eval_in(const char *dir, const char *name, const char *rules,
                                const char *layout)
{
    char *rules_path = kit_join(dir, "rules.json"), *q = kit_join(dir, name);
    FILE *f = fopen(rules_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(rules, f);
    fclose(f);
    char *out = NULL, *err = NULL;
    int st = run((const char *[]){quant_bin(), "quantize", "-q", "-l", layout, "-r", rules_path,
                                  SHARDED, q, NULL},
                 &out, &err);
    ck_assert_msg(st == 0, "quant quantize %s: exit %d: %s", name, st, err);
    free(out);
    free(err);
    st = run((const char *[]){python(), EVAL, "--quant", quant_bin(), "--sequences", "4",
                              "--seq-len", "24", "--json", SHARDED, q, NULL},
             &out, &err);
    ck_assert_msg(st == 0, "eval_kld.py %s: exit %d: %s", name, st, err);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    ck_assert_msg(j != NULL, "eval_kld.py --json: %s: %s", je.text, out);
    kld k = {json_number_value(json_object_get(j, "kld_mean")),
             json_number_value(json_object_get(j, "top1")),
             json_integer_value(json_object_get(j, "positions")),
             json_is_true(json_object_get(j, "dequantized")), ""};
    const char *l = json_string_value(json_object_get(j, "layout"));
    snprintf(k.layout, sizeof k.layout, "%s", l ? l : "");
    json_decref(j);
    free(out);
    free(err);
    free(rules_path);
    free(q);
    return k;
}

static kld quantize_and_eval(const char *dir, const char *name, const char *rules)
{
    return quantize_and_eval_in(dir, name, rules, "native");
}

/* int4 tiles of 32, down_proj (172 columns) int8 per channel, the embedding left alone */
static const char int4_rules[] =
    "[{\"module_path\": \"model\\\\.embed_tokens\", \"weight_qtype\": null},"
    " {\"module_path\": \".*down_proj\", \"weight_qtype\": \"int8\"},"
    " {\"module_path\": \".*_proj\", \"weight_qtype\": \"int4\", \"tile_size\": 32}]";

START_TEST(test_eval_kld)
{
    char *dir = qdt_tmpdir();
    kld k4 = quantize_and_eval(dir, "int4", int4_rules);
    kld k8 = quantize_and_eval(dir, "int8",
                               "[{\"module_path\": \".*_proj\", \"weight_qtype\": \"int8\"}]");
    kld k0 = quantize_and_eval(dir, "none",
                               "{\"allow_nothing_quantized\": true, \"rules\": [{\"module_path\": "
                               "\".*\", \"weight_qtype\": null}]}");
    ck_assert_int_eq(k4.positions, 4 * 24);
    ck_assert(k4.dequantized && k8.dequantized && k0.dequantized);
    ck_assert_str_eq(k4.layout, "native");
    /* quantized weights diverge, fewer bits more; both stay finite (this fixed network is very
     * sensitive: int8 per-channel is about 0.02 nats, int4 tile 32 about 2) */
    ck_assert_msg(k8.mean > 0 && k8.mean < 0.25, "int8 KLD %g", k8.mean);
    ck_assert_msg(k4.mean > k8.mean && k4.mean < 10, "int4 KLD %g, int8 %g", k4.mean, k8.mean);
    ck_assert(k4.top1 >= 0 && k4.top1 <= 1 && k8.top1 >= 0 && k8.top1 <= 1);
    ck_assert_msg(k8.top1 > k4.top1, "top-1 int8 %g, int4 %g", k8.top1, k4.top1);
    /* nothing quantized: the same weights give the same logits, bit for bit */
    ck_assert_msg(k0.mean == 0.0 && k0.top1 == 1.0, "unquantized copy: KLD %g, top-1 %g", k0.mean,
                  k0.top1);
    /* the same rules in the compressed-tensors layout: `quant dequantize` reads it back to the
     * native layout's weights bit for bit, so the figures are the same to the last digit */
    kld kc = quantize_and_eval_in(dir, "int4-ct", int4_rules, "compressed-tensors");
    ck_assert(kc.dequantized);
    ck_assert_str_eq(kc.layout, "compressed-tensors");
    ck_assert_msg(kc.mean == k4.mean && kc.top1 == k4.top1 && kc.positions == k4.positions,
                  "compressed-tensors KLD %.17g top-1 %g, native %.17g %g", kc.mean, kc.top1,
                  k4.mean, k4.top1);
    kit_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_eval_kld_plain_and_refusals)
{
    char *out = NULL, *err = NULL;
    /* a float checkpoint against itself, printed plainly, not dequantized */
    int st = run((const char *[]){python(), EVAL, "--sequences", "2", "--seq-len", "8", SHARDED,
                                  SHARDED, NULL},
                 &out, &err);
    ck_assert_msg(st == 0, "exit %d: %s", st, err);
    ck_assert_msg(strstr(out, "mean KLD:  0.000000 +/- 0.000000") &&
                      strstr(out, "same top1: 100.00 %") && strstr(out, "2 x 8 tokens") &&
                      !strstr(out, "dequantize"),
                  "%s", out);
    free(out);
    free(err);
    /* the same shards without model.safetensors.index.json: found by listing the directory */
    char *dir = qdt_tmpdir();
    st = run((const char *[]){"cp", SHARDED "/config.json",
                              SHARDED "/model-00001-of-00002.safetensors",
                              SHARDED "/model-00002-of-00002.safetensors", dir, NULL},
             NULL, NULL);
    ck_assert_int_eq(st, 0);
    st = run((const char *[]){python(), EVAL, "--json", "--sequences", "2", "--seq-len", "8",
                              SHARDED, dir, NULL},
             &out, &err);
    ck_assert_msg(st == 0, "exit %d: %s", st, err);
    ck_assert_msg(strstr(out, "\"kld_mean\": 0.0,") && strstr(out, "\"top1\": 1.0,") &&
                      strstr(out, "\"positions\": 16,") && strstr(out, "\"dequantized\": false"),
                  "%s", out);
    free(out);
    free(err);
    kit_rmtree(dir);
    free(dir);
    st = run((const char *[]){python(), EVAL, SHARDED, "tests/data/no-such-checkpoint", NULL}, &out,
             &err);
    ck_assert_int_eq(st, 1);
    ck_assert_msg(strstr(err, "eval_kld: ") && strstr(err, "no-such-checkpoint"), "%s", err);
    free(out);
    free(err);
    st =
        run((const char *[]){python(), EVAL, "--seq-len", "1", SHARDED, SHARDED, NULL}, &out, &err);
    ck_assert_int_eq(st, 2);
    free(out);
    free(err);
}
END_TEST

Suite *suite_examples(void)
{
    Suite *s = suite_create("examples");
    TCase *tc = tcase_create("examples");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, find_python, NULL);
    tcase_add_test(tc, test_forward_known_answer);
    tcase_add_test(tc, test_collect_posts);
    tcase_add_test(tc, test_collect_refusals);
    tcase_add_test(tc, test_eval_kld);
    tcase_add_test(tc, test_eval_kld_plain_and_refusals);
    suite_add_tcase(s, tc);
    return s;
}
