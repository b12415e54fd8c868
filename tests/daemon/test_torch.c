/* test_torch.c -- the torch suite: runs examples/torch_stats.py (PyTorch forward pre-hooks on
 * every nn.Linear of a real 15M-parameter Llama, stories15M) against a real quantd. The demo's
 * greedy text is the model's published sample (the forward pass is right); quantd then holds
 * absmax and mean_sq for every Linear's input, named after the weight's module path, with the
 * input's length, a count equal to the posts and averages equal to the posted bodies, the
 * bodies being what the NumPy Llama of examples/llama_np.py gives for the same tokens; a post
 * sent again with its Idempotency-Key is a replay, not counted twice; a 503 (max_body_memory
 * held by another request) is retried after its Retry-After, or ends the run with a clear error
 * once the retries are spent; a refused connection is retried, then dropped or raised; over
 * HTTPS the token and CA come from $QUANTD_TOKEN and $QUANTD_CACERT; and a job with stats_model,
 * SRQ and weight_importance rules succeeds on those statistics.
 * The interpreter: $QUANT_TORCH_PYTHON, else the first of /usr/bin/python3 (Debian's
 * python3-torch) and python3 that imports torch; the model: $QUANT_STORIES15M, else
 * ../shared/data/stories15M. Either missing fails the suite, unless QUANT_SKIP_TORCH=1.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"
#include "tlsgen.h"

#define DEMO    "examples/torch_stats.py"
#define LAYERS  6
#define HIDDEN  288
#define FFN     768
#define LINEARS (LAYERS * 7 + 1) /* q, k, v, o, gate, up, down per layer, and lm_head */

static const char *const projs[7] = {"self_attn/q_proj", "self_attn/k_proj", "self_attn/v_proj",
                                     "self_attn/o_proj", "mlp/gate_proj",    "mlp/up_proj",
                                     "mlp/down_proj"};

/* The activation of Linear i (0..LINEARS-1) into buf; its input length is the return value. */
static size_t linear_act(int i, char *buf, size_t n)
{
    if (i == LINEARS - 1) {
        snprintf(buf, n, "lm_head/dot_general0_lhs");
        return HIDDEN;
    }
    snprintf(buf, n, "model/layers/%d/%s/dot_general0_lhs", i / 7, projs[i % 7]);
    return i % 7 == 6 ? FFN : HIDDEN;
}

/* ---- the interpreter and the model, found once (an unchecked fixture) ------------------------ */

static char *torch_python;
static char model_dir[1024];
static char missing[1024]; /* why the suite cannot run, "" when it can */

/* Runs argv with stdout and stderr in dir/out and dir/err, without waiting; the child gets
 * `env` ("NAME=VALUE" strings, NULL-terminated, may be NULL) and writes no __pycache__. */
static pid_t spawn(const char *const *argv, const char *dir, const char *const *env)
{
    char *o = kit_join(dir, "out"), *e = kit_join(dir, "err");
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(o, "w", stdout) || !freopen(e, "w", stderr)) _exit(126);
        setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
        for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    free(o);
    free(e);
    return pid;
}

/* Waits for pid; *out and *err (when not NULL) get dir/out and dir/err, malloc'd. Returns the
 * exit status, or 128 + the signal. */
static int finish(pid_t pid, const char *dir, char **out, char **err)
{
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    char *o = kit_join(dir, "out"), *e = kit_join(dir, "err");
    if (out) *out = qdt_read_file(o, NULL);
    if (err) *err = qdt_read_file(e, NULL);
    free(o);
    free(e);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int run(const char *const *argv, const char *const *env, char **out, char **err)
{
    char *dir = qdt_tmpdir();
    int st = finish(spawn(argv, dir, env), dir, out, err);
    kit_rmtree(dir);
    free(dir);
    return st;
}

static void find_torch(void)
{
    if (torch_python || missing[0]) return;
    const char *env = getenv("QUANT_TORCH_PYTHON");
    const char *cands[] = {env ? env : "/usr/bin/python3", env ? NULL : "python3", NULL};
    for (int i = 0; cands[i] && !torch_python; i++) {
        char *out = NULL;
        const char *probe = "import sys, torch; print(sys.executable)";
        int st = run((const char *[]){cands[i], "-c", probe, NULL}, NULL, &out, NULL);
        out[strcspn(out, "\n")] = '\0';
        if (st == 0 && out[0])
            torch_python = out;
        else
            free(out);
    }
    if (!torch_python)
        snprintf(missing, sizeof missing,
                 "no python3 imports torch (tried %s): scripts/install-deps installs Debian's "
                 "python3-torch; or set QUANT_TORCH_PYTHON, or QUANT_SKIP_TORCH=1 to skip",
                 env ? env : "/usr/bin/python3 and python3");
    const char *dir =
        getenv("QUANT_STORIES15M") ? getenv("QUANT_STORIES15M") : "../shared/data/stories15M";
    snprintf(model_dir, sizeof model_dir, "%s", dir);
    char *st_path = kit_join(dir, "model.safetensors");
    struct stat sb;
    if (!missing[0] && stat(st_path, &sb) != 0)
        snprintf(missing, sizeof missing,
                 "no %s: the stories15M checkpoint (config.json, model.safetensors, "
                 "tokenizer.bin); set QUANT_STORIES15M to its directory, or QUANT_SKIP_TORCH=1",
                 st_path);
    free(st_path);
}

static const char *python(void)
{
    ck_assert_msg(!missing[0], "%s", missing);
    return torch_python;
}

/* The demo's arguments up to and including the model name; the caller adds the rest. */
#define DEMO_ARGV(m) python(), DEMO, model_dir, "--model", m, "--batch", "2", "--seq-len", "24"

/* "QUANTD_URL=..." for d, in buf. */
static const char *url_env(const qdp *d, char *buf, size_t n)
{
    snprintf(buf, n, "QUANTD_URL=%s", d->base);
    return buf;
}

static json_t *get_json(qdp *d, const char *path)
{
    qdp_resp r = qdp_req(d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "GET %s: %ld %s", path, r.status, r.body);
    json_t *j = qdp_json(&r);
    qdp_resp_free(&r);
    return j;
}

/* The model's "posts" in GET /v1/models. */
static long long model_posts(qdp *d, const char *model)
{
    json_t *doc = get_json(d, "/v1/models"), *row;
    size_t i;
    long long posts = -1;
    json_array_foreach(json_object_get(doc, "models"), i, row)
    {
        if (strcmp(json_string_value(json_object_get(row, "name")), model) == 0)
            posts = json_integer_value(json_object_get(row, "posts"));
    }
    json_decref(doc);
    return posts;
}

static double num(json_t *a, size_t i)
{
    return json_number_value(json_array_get(a, i));
}

/* Every Linear's statistics as quantd holds them: the names, the lengths, the count, and the
 * averages of the two posted bodies (b1 + b2) / 2, key by key. */
static void check_stats(qdp *d, const char *model, json_t *b1, json_t *b2)
{
    char path[256], act[128];
    snprintf(path, sizeof path, "/v1/models/%s/stats", model);
    json_t *doc = get_json(d, path), *stats = json_object_get(doc, "stats");
    ck_assert_uint_eq(json_object_size(stats), LINEARS);
    for (int l = 0; l < LINEARS; l++) {
        size_t in = linear_act(l, act, sizeof act);
        json_t *s = json_object_get(stats, act);
        ck_assert_msg(s != NULL, "quantd has no activation %s", act);
        ck_assert_int_eq(json_integer_value(json_object_get(s, "count")), 2);
        json_t *amax = json_object_get(s, "absmax"), *msq = json_object_get(s, "mean_sq");
        ck_assert_msg(json_array_size(amax) == 1 && json_array_size(msq) == in,
                      "%s: absmax [%zu], mean_sq [%zu], input %zu", act, json_array_size(amax),
                      json_array_size(msq), in);
        const char *keys[2] = {"absmax", "mean_sq"};
        for (int k = 0; k < 2; k++) {
            json_t *got = json_object_get(s, keys[k]);
            json_t *p1 =
                json_object_get(json_object_get(json_object_get(b1, "stats"), act), keys[k]);
            json_t *p2 =
                json_object_get(json_object_get(json_object_get(b2, "stats"), act), keys[k]);
            for (size_t i = 0; i < json_array_size(got); i++) {
                double want = (num(p1, i) + num(p2, i)) / 2, v = num(got, i);
                ck_assert_msg(want > 0 && isfinite(want) && fabs(v - want) <= 1e-12 * want,
                              "%s %s[%zu]: quantd %.17g, posts average %.17g", act, keys[k], i, v,
                              want);
            }
        }
        /* a mean of squares is at most the square of the largest |x| of its post */
        double m1 =
            num(json_object_get(json_object_get(json_object_get(b1, "stats"), act), "absmax"), 0);
        json_t *q1 = json_object_get(json_object_get(json_object_get(b1, "stats"), act), "mean_sq");
        for (size_t i = 0; i < in; i++)
            ck_assert_msg(num(q1, i) <= m1 * m1 * (1 + 1e-6), "%s mean_sq[%zu] %g > absmax^2 %g",
                          act, i, num(q1, i), m1 * m1);
    }
    json_decref(doc);
}

/* The body the demo posted with key (kept with --keep-bodies in dir), as JSON and as bytes. */
static json_t *kept_body(const char *dir, const char *key, char **bytes, size_t *len)
{
    char name[128];
    snprintf(name, sizeof name, "%s.json", key);
    char *path = kit_join(dir, name);
    *bytes = qdt_read_file(path, len);
    json_error_t je;
    json_t *j = json_loadb(*bytes, *len, 0, &je);
    ck_assert_msg(j != NULL, "%s: %s", path, je.text);
    free(path);
    return j;
}

#define SRQ_RULES                                                                                  \
    "{\"rules\": [{\"module_path\": \".*down_proj\", \"weight_qtype\": \"int4\", \"tile_size\": "  \
    "32, \"weight_calibration_method\": \"mse\", \"weight_importance\": true, \"act_qtype\": "     \
    "\"int8\", \"act_static_scale\": true}, {\"module_path\": \".*_proj\", \"weight_qtype\": "     \
    "\"int8\", \"act_qtype\": \"int8\", \"act_static_scale\": true}]}"

/* An SRQ + weight_importance job on the statistics: 42 static int8 scales (one per *_proj input;
 * lm_head has no weight of its own in the tied checkpoint, and no rule), each down_proj's MSE
 * search weighed by its own activation's mean_sq. */
static void check_job(qdp *d, const char *model)
{
    qdp_resp r = qdp_req(d, "PUT", "/v1/rulesets/srq", "application/json", SRQ_RULES,
                         strlen(SRQ_RULES), NULL);
    ck_assert_msg(r.status == 201, "PUT rules: %ld %s", r.status, r.body);
    qdp_resp_free(&r);
    char path[256], act[128];
    snprintf(path, sizeof path, "/v1/jobs?ruleset=srq&stats_model=%s", model);
    char *file = kit_join(model_dir, "model.safetensors");
    r = qdp_upload(d, path, file);
    free(file);
    ck_assert_msg(r.status == 202, "job: %ld %s", r.status, r.body);
    json_t *j = qdp_json(&r);
    qdp_resp_free(&r);
    long long id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    j = qdp_wait_job(d, id, 120);
    ck_assert_msg(strcmp(json_string_value(json_object_get(j, "state")), "succeeded") == 0,
                  "job %lld: %s", id, json_string_value(json_object_get(j, "error")));
    json_decref(j);
    snprintf(path, sizeof path, "/v1/jobs/%lld/report", id);
    json_t *rep = get_json(d, path), *t;
    json_t *written = json_object_get(json_object_get(rep, "static_activations"), "written");
    ck_assert_uint_eq(json_array_size(written), LINEARS - 1);
    size_t i;
    int weighed = 0;
    json_array_foreach(json_object_get(rep, "tensors"), i, t)
    {
        json_t *mse = json_object_get(t, "mse");
        if (!mse) continue;
        const char *name = json_string_value(json_object_get(t, "name"));
        int layer = atoi(name + strlen("model.layers."));
        linear_act(layer * 7 + 6, act, sizeof act);
        ck_assert_msg(strstr(name, ".mlp.down_proj.weight") &&
                          strcmp(json_string_value(json_object_get(mse, "importance")), act) == 0,
                      "%s weighed by %s", name,
                      json_string_value(json_object_get(mse, "importance")));
        weighed++;
    }
    ck_assert_int_eq(weighed, LAYERS);
    json_decref(rep);
}

START_TEST(test_torch_posts_and_job)
{
    qdp d;
    qdp_start(&d, NULL);
    char *bodies = kit_join(d.root, "bodies"), env[128], *out = NULL, *err = NULL;
    ck_assert_int_eq(mkdir(bodies, 0700), 0);
    /* 4 steps, a post every 2: two posts, keys t1-2 and t1-4; the URL from $QUANTD_URL */
    int st = run((const char *[]){DEMO_ARGV("s15"), "--steps", "4", "--every", "2", "--run-id",
                                  "t1", "--keep-bodies", bodies, NULL},
                 (const char *[]){url_env(&d, env, sizeof env), NULL}, &out, &err);
    ck_assert_msg(st == 0, "torch_stats.py exit %d: %s", st, err);
    /* stories15M's published sample: the forward pass is the model's */
    ck_assert_msg(strstr(out, "greedy: Once upon a time, there was a little girl named Lily. "
                              "She loved\n"),
                  "%s", out);
    ck_assert_msg(strstr(out, "4 steps of 2 x 23 tokens, 2 posts of 43 activations to "
                              "/v1/models/s15/stats") &&
                      strstr(out, "0 retries, 0 replays (run t1)"),
                  "%s", out);
    free(out);
    free(err);
    char *bytes1, *bytes2;
    size_t len1, len2;
    json_t *b1 = kept_body(bodies, "t1-2", &bytes1, &len1);
    json_t *b2 = kept_body(bodies, "t1-4", &bytes2, &len2);
    ck_assert_int_eq(json_integer_value(json_object_get(b1, "step")), 2);
    check_stats(&d, "s15", b1, b2);
    ck_assert_int_eq(model_posts(&d, "s15"), 2);
    /* the second post's statistics computed again from the NumPy Llama's own forward pass */
    char *body2 = kit_join(bodies, "t1-4.json");
    st = run((const char *[]){python(), "tests/daemon/torch_vs_numpy.py", model_dir, body2,
                              "--first-step", "2", "--steps", "2", "--batch", "2", "--seq-len",
                              "24", NULL},
             NULL, &out, &err);
    ck_assert_msg(st == 0 && strstr(out, "42 activations; largest relative difference"),
                  "torch_vs_numpy.py exit %d: %s%s", st, out, err);
    free(out);
    free(err);
    free(body2);

    /* the first post again with its key: answered as a replay, counted once */
    qdp_resp r = qdp_req(&d, "POST", "/v1/models/s15/stats", "application/json", bytes1, len1,
                         "Idempotency-Key: t1-2");
    char *replayed = qdp_header(&r, "idempotent-replayed");
    ck_assert_msg(r.status == 200 && replayed && strcmp(replayed, "true") == 0, "%ld %s", r.status,
                  r.body);
    free(replayed);
    qdp_resp_free(&r);
    ck_assert_int_eq(model_posts(&d, "s15"), 2);
    check_stats(&d, "s15", b1, b2);

    check_job(&d, "s15");
    json_decref(b1);
    json_decref(b2);
    free(bytes1);
    free(bytes2);
    free(bodies);
    qdp_stop(&d);
}
END_TEST

/* A request of `length` body bytes whose body never comes: it holds that much of
 * max_body_memory until its connection closes. */
static int hold_budget(const qdp *d, unsigned long length)
{
    int fd = qdp_raw_connect(d);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "POST /v1/models/hold/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %lu\r\n\r\n",
                     length);
    ck_assert(qdp_send_all(fd, head, (size_t)n));
    return fd;
}

/* Waits up to 60 s until dir/err holds needle (the running demo's stderr). */
static void wait_stderr(const char *dir, const char *needle)
{
    char *path = kit_join(dir, "err");
    for (int i = 0; i < 600; i++) {
        if (access(path, R_OK) != 0) { /* the child has not opened it yet */
            kit_sleep_ms(100);
            continue;
        }
        char *s = qdt_read_file(path, NULL);
        bool found = strstr(s, needle) != NULL;
        free(s);
        if (found) {
            free(path);
            return;
        }
        kit_sleep_ms(100);
    }
    ck_abort_msg("the demo never said \"%s\" on stderr", needle);
}

START_TEST(test_torch_503)
{
    qdp d;
    qdp_start(&d, (const char *[]){"--max-body-memory", "1M", "--max-stats-body", "1M",
                                   "--max-json-body", "1M", "--body-timeout", "3600",
                                   "--idle-timeout", "3600", NULL});
    char env[128], *out = NULL, *err = NULL;
    /* leaves 48576 bytes (a post is ~200 KB), for as long as the test needs (body_timeout) */
    int hold = hold_budget(&d, 1000000);
    /* held throughout: one retry after Retry-After, then a clear error, and nothing stored */
    int st = run((const char *[]){DEMO_ARGV("b1"), "--steps", "1", "--every", "1", "--greedy", "0",
                                  "--retries", "1", "--run-id", "t2", NULL},
                 (const char *[]){url_env(&d, env, sizeof env), NULL}, &out, &err);
    ck_assert_int_eq(st, 1);
    ck_assert_msg(strstr(err, "retry 1 of 1 in 2.00 s") && strstr(err, "torch_stats: POST ") &&
                      strstr(err, "/v1/models/b1/stats (Idempotency-Key t2-1) (1 retries): "
                                  "HTTP 503: ") &&
                      strstr(err, "max_body_memory"),
                  "%s", err);
    free(out);
    free(err);
    ck_assert_int_eq(model_posts(&d, "b1"), -1);

    /* released after the first 503: the retry is stored, once */
    char *dir = qdt_tmpdir();
    pid_t pid = spawn((const char *[]){DEMO_ARGV("b2"), "--steps", "2", "--every", "2", "--greedy",
                                       "0", "--run-id", "t3", NULL},
                      dir, (const char *[]){url_env(&d, env, sizeof env), NULL});
    wait_stderr(dir, "HTTP 503: ");
    close(hold);
    st = finish(pid, dir, &out, &err);
    ck_assert_msg(st == 0, "exit %d: %s", st, err);
    ck_assert_msg(strstr(err, "retry 1 of 5 in 2.00 s"), "%s", err);
    ck_assert_msg(strstr(out, "1 posts of 43 activations") && !strstr(out, " 0 retries"), "%s",
                  out);
    free(out);
    free(err);
    ck_assert_int_eq(model_posts(&d, "b2"), 1);
    kit_rmtree(dir);
    free(dir);
    qdp_stop(&d);
}
END_TEST

/* Over HTTPS with tokens: $QUANTD_CACERT and $QUANTD_TOKEN are all the client needs; without the
 * token, the 401 ends the run at once (no retry), naming the key. */
START_TEST(test_torch_tls_token)
{
    char *pki = qdt_tmpdir();
    char *crt = kit_join(pki, "cert.pem"), *key = kit_join(pki, "key.pem");
    tlsgen_pair(crt, key, "127.0.0.1", 3600);
    qdp d;
    qdp_start_tls(&d, (const char *[]){"--tls-cert", crt, "--tls-key", key, NULL}, crt);
    char *tok = NULL, *terr = NULL;
    int st =
        qdp_run(&d, &tok, &terr,
                (const char *[]){"token", "create", "--role", "trainer", "--name", "tr", NULL});
    ck_assert_msg(st == 0, "token create: %s", terr);
    tok[strcspn(tok, "\n")] = '\0';
    char url[128], ca[1100], tk[128], *out = NULL, *err = NULL;
    snprintf(ca, sizeof ca, "QUANTD_CACERT=%s", crt);
    snprintf(tk, sizeof tk, "QUANTD_TOKEN=%s", tok);
    st = run((const char *[]){DEMO_ARGV("tls"), "--steps", "1", "--every", "1", "--greedy", "0",
                              "--run-id", "t4", NULL},
             (const char *[]){url_env(&d, url, sizeof url), ca, NULL}, &out, &err);
    ck_assert_int_eq(st, 1);
    ck_assert_msg(strstr(err, "(Idempotency-Key t4-1): HTTP 401: ") && !strstr(err, "retry"), "%s",
                  err);
    free(out);
    free(err);
    st = run((const char *[]){DEMO_ARGV("tls"), "--steps", "1", "--every", "1", "--greedy", "0",
                              "--run-id", "t5", NULL},
             (const char *[]){url_env(&d, url, sizeof url), ca, tk, NULL}, &out, &err);
    ck_assert_msg(st == 0, "exit %d: %s", st, err);
    ck_assert_msg(strstr(out, "1 posts of 43 activations"), "%s", out);
    free(out);
    free(err);
    d.token = tok;
    ck_assert_int_eq(model_posts(&d, "tls"), 1);
    d.token = NULL;
    free(tok);
    free(terr);
    qdp_stop(&d);
    kit_rmtree(pki);
    free(crt);
    free(key);
    free(pki);
}
END_TEST

/* The module without quantd: a connection refused is retried after a backoff, then reported
 * (on_error="warn": the batch is dropped and training goes on; "raise": StatsPostError, naming
 * the URL, the key and the failure); names are module paths with '/' for '.'. */
static const char unreachable_py[] =
    "import sys, torch\n"
    "sys.path.insert(0, 'examples')\n"
    "from torch_stats import StatsHooks, StatsPostError\n"
    "m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(),\n"
    "                        torch.nn.Sequential(torch.nn.Linear(3, 2)))\n"
    "for on_error in ('warn', 'raise'):\n"
    "    h = StatsHooks(m, 'http://127.0.0.1:1', 'toy', every=1, run_id='k', retries=2,\n"
    "                   max_wait=10, on_error=on_error)\n"
    "    m(torch.ones(2, 4))\n"
    "    print(sorted(h.acc))\n"
    "    try:\n"
    "        print('step:', h.step())\n"
    "    except StatsPostError as e:\n"
    "        print('raised:', e)\n"
    "    h.remove()\n";

START_TEST(test_torch_unreachable)
{
    char *out = NULL, *err = NULL;
    int st = run((const char *[]){python(), "-c", unreachable_py, NULL}, NULL, &out, &err);
    ck_assert_msg(st == 0, "exit %d: %s", st, err);
    ck_assert_msg(strstr(out, "['0/dot_general0_lhs', '2/0/dot_general0_lhs']\nstep: None\n") &&
                      strstr(out, "raised: POST http://127.0.0.1:1/v1/models/toy/stats "
                                  "(Idempotency-Key k-1) (2 retries): no answer ("),
                  "%s", out);
    ck_assert_msg(strstr(err, "retry 2 of 2 in ") &&
                      strstr(err, "torch_stats: statistics of step 1 dropped: POST "),
                  "%s", err);
    free(out);
    free(err);
}
END_TEST

Suite *suite_torch(void)
{
    Suite *s = suite_create("torch");
    const char *skip = getenv("QUANT_SKIP_TORCH");
    if (skip && strcmp(skip, "1") == 0) {
        fprintf(stderr, "torch suite skipped: QUANT_SKIP_TORCH=1\n");
        return s;
    }
    TCase *tc = tcase_create("torch");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, find_torch, NULL);
    tcase_add_test(tc, test_torch_posts_and_job);
    tcase_add_test(tc, test_torch_503);
    tcase_add_test(tc, test_torch_tls_token);
    tcase_add_test(tc, test_torch_unreachable);
    suite_add_tcase(s, tc);
    return s;
}
