/* daemon-bench.c -- owns `make bench`'s daemon part: upload -> quantize -> download of a
 * generated bf16 shard (int8 per-channel) through quantd over loopback, end to end in GB/s of
 * input, beside the offline `quant quantize` of the same file in the same run (both from the page
 * cache), the three phase times (and a download of the same output as outputs.tar), the same
 * through a checkpoint job (POST {"files"}, PUT streamed, GET outputs.tar), and the peak
 * resident memory of quantd (VmHWM) and of quant (ru_maxrss). Prints a Markdown table. Fails loudly
 * (exit 1) when any step does.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Both paths run QUANT_BENCH_DAEMON_ROUNDS times (default 2), their order swapped each round, and
 * each keeps its fastest round: on this kind of VM a run that writes right after another freed
 * its pages pays the host's page faults (BENCHMARKS.md, 2026-11-25 and 2026-12-07), so a fixed
 * order would charge the second path for the first one's files.
 *
 * Usage: daemon-bench QUANTD_BINARY QUANT_BINARY
 * Environment: QUANT_BENCH_DAEMON_MIB (shard size, default 1024), QUANT_BENCH_DAEMON_ROUNDS
 * (default 2), QUANT_BENCH_THREADS (default 2; quant --threads and quantd's
 * QUANTD_QUANT_THREADS), TMPDIR (where the shard, quantd's data dir and the outputs go; needs
 * ~3x the size free: each job is deleted once it is measured).
 */
#define _DEFAULT_SOURCE
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"
#include "kit.h"
#include "quant_st.h"

#define TENSOR_COLS 8192 /* rows x 8192 bf16; rows = 8 x MiB so 8 tensors make the shard */
#define N_TENSORS   8
#define RULES       "[{\"module_path\": \".*\", \"weight_qtype\": \"int8\"}]"
#define POLL_NS     10000000L /* job status poll: 10 ms */
#define JOB_TIMEOUT 3600.0
#define IO_BUFFER   (1 << 20) /* curl's upload and download buffers */
#define MAX_ROUNDS  20

/* ---- the input: one generated bf16 shard ----------------------------------------------------- */

static void check_ck(quant_ck_status st, const quant_ck_error *err)
{
    if (st != QUANT_CK_OK) bench_fail("writing the shard: %s", err->message);
}

static void write_shard(const char *path, int64_t rows)
{
    size_t bytes = (size_t)rows * TENSOR_COLS * 2;
    quant_st_out_tensor t[N_TENSORS];
    char names[N_TENSORS][64];
    for (int i = 0; i < N_TENSORS; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.mlp.up_proj.weight", i);
        t[i] = (quant_st_out_tensor){
            .name = names[i], .dtype = QUANT_ST_BF16, .rank = 2, .shape = {rows, TENSOR_COLS}};
    }
    uint16_t *buf = malloc(bytes);
    if (!buf) bench_die("malloc");
    const char *key = "format", *val = "pt";
    quant_st_writer *w;
    quant_ck_error err;
    check_ck(quant_st_writer_new(path, t, N_TENSORS, &key, &val, 1, &w, &err), &err);
    for (int i = 0; i < N_TENSORS; i++) {
        bench_fill_bf16(buf, bytes / 2, (uint64_t)i, quant_f32_to_bf16);
        size_t idx = (size_t)quant_st_writer_index(w, names[i]);
        check_ck(quant_st_writer_pwrite(w, idx, 0, buf, bytes, &err), &err);
    }
    check_ck(quant_st_writer_commit(w, &err), &err);
    quant_st_writer_free(w);
    free(buf);
}

static void write_text(const char *path, const char *text)
{
    if (kit_write_file(path, text, strlen(text)) != 0) bench_die(path);
}

static int64_t file_size(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) bench_die(path);
    return (int64_t)st.st_size;
}

/* Reads the file once so both runs start from the page cache. */
static void warm(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) bench_die(path);
    char *buf = malloc(IO_BUFFER);
    if (!buf) bench_die("malloc");
    ssize_t n;
    while ((n = read(fd, buf, IO_BUFFER)) > 0) {
    }
    free(buf);
    if (n < 0) bench_die(path);
    close(fd);
}

/* ---- the baseline: offline quant quantize ---------------------------------------------------- */

typedef struct offline_result {
    double seconds; /* best of two */
    long rss_kib;   /* the larger peak of the two runs */
} offline_result;

static offline_result run_offline(const char *quant, const char *threads, const char *rules,
                                  const char *in, const char *out)
{
    char *argv[] = {(char *)quant, "quantize",    "--quiet",  "--threads", (char *)threads,
                    "--rules",     (char *)rules, (char *)in, (char *)out, NULL};
    offline_result r = {1e30, 0};
    for (int rep = 0; rep < 2; rep++) {
        struct rusage ru;
        double t0 = bench_now();
        int status = bench_spawn_wait(argv, &ru);
        double t = bench_now() - t0;
        if (status < 0) bench_die("running quant");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            bench_fail("%s quantize failed (wait status %d)", quant, status);
        r.seconds = t < r.seconds ? t : r.seconds;
        r.rss_kib = ru.ru_maxrss > r.rss_kib ? ru.ru_maxrss : r.rss_kib;
        if (unlink(out) != 0) bench_die(out);
    }
    return r;
}

/* ---- HTTP (libcurl; one handle, so the connection is reused) --------------------------------- */

typedef struct client {
    CURL *c;
    char base[64]; /* http://127.0.0.1:PORT */
} client;

typedef struct membuf {
    char *data;
    size_t len;
} membuf;

static size_t membuf_write(char *p, size_t size, size_t n, void *ud)
{
    membuf *b = ud;
    char *d = realloc(b->data, b->len + size * n + 1);
    if (!d) return 0;
    memcpy(d + b->len, p, size * n);
    b->len += size * n;
    d[b->len] = '\0';
    b->data = d;
    return size * n;
}

static size_t file_read(char *p, size_t size, size_t n, void *ud)
{
    return fread(p, size, n, ud) * size;
}

static size_t file_write(char *p, size_t size, size_t n, void *ud)
{
    return fwrite(p, size, n, ud) * size;
}

/* Resets the handle for a request to path (keeps the connection). */
static void prepare(client *cl, const char *method, const char *path)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", cl->base, path);
    curl_easy_reset(cl->c);
    curl_easy_setopt(cl->c, CURLOPT_URL, url);
    curl_easy_setopt(cl->c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(cl->c, CURLOPT_NOSIGNAL, 1L);
}

/* Performs the prepared request; returns the HTTP status. */
static long perform(client *cl, const char *what, struct curl_slist *headers)
{
    if (headers) curl_easy_setopt(cl->c, CURLOPT_HTTPHEADER, headers);
    CURLcode rc = curl_easy_perform(cl->c);
    if (rc != CURLE_OK) bench_fail("%s: %s", what, curl_easy_strerror(rc));
    long code = 0;
    curl_easy_getinfo(cl->c, CURLINFO_RESPONSE_CODE, &code);
    return code;
}

/* A JSON request; fails unless the status is one of ok1/ok2. Returns the parsed reply. */
static json_t *request_json(client *cl, const char *method, const char *path, const char *body,
                            long ok1, long ok2)
{
    membuf reply = {0};
    prepare(cl, method, path);
    curl_easy_setopt(cl->c, CURLOPT_WRITEFUNCTION, membuf_write);
    curl_easy_setopt(cl->c, CURLOPT_WRITEDATA, &reply);
    struct curl_slist *h = NULL;
    if (body) {
        curl_easy_setopt(cl->c, CURLOPT_POSTFIELDS, body);
        h = curl_slist_append(h, "Content-Type: application/json");
    }
    long code = perform(cl, path, h);
    curl_slist_free_all(h);
    json_t *doc = reply.data ? json_loads(reply.data, 0, NULL) : NULL;
    if ((code != ok1 && code != ok2) || !doc)
        bench_fail("%s %s: status %ld: %s", method, path, code,
                   reply.data ? reply.data : "(no body)");
    free(reply.data);
    return doc;
}

/* POST /v1/jobs?ruleset=NAME streaming the file; returns the new job's id. */
static json_int_t upload(client *cl, const char *ruleset, const char *path, int64_t size)
{
    FILE *f = fopen(path, "rb");
    if (!f) bench_die(path);
    char target[128];
    snprintf(target, sizeof target, "/v1/jobs?ruleset=%s", ruleset);
    membuf reply = {0};
    prepare(cl, "POST", target);
    curl_easy_setopt(cl->c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(cl->c, CURLOPT_READFUNCTION, file_read);
    curl_easy_setopt(cl->c, CURLOPT_READDATA, f);
    curl_easy_setopt(cl->c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
    curl_easy_setopt(cl->c, CURLOPT_UPLOAD_BUFFERSIZE, (long)IO_BUFFER);
    curl_easy_setopt(cl->c, CURLOPT_WRITEFUNCTION, membuf_write);
    curl_easy_setopt(cl->c, CURLOPT_WRITEDATA, &reply);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/octet-stream");
    h = curl_slist_append(h, "Expect:");
    long code = perform(cl, "POST /v1/jobs", h);
    curl_slist_free_all(h);
    fclose(f);
    json_t *doc = reply.data ? json_loads(reply.data, 0, NULL) : NULL;
    json_t *id = json_object_get(doc, "id");
    if (code != 202 || !json_is_integer(id))
        bench_fail("POST %s: status %ld: %s", target, code, reply.data ? reply.data : "(no body)");
    json_int_t v = json_integer_value(id);
    json_decref(doc);
    free(reply.data);
    return v;
}

/* A checkpoint job (POST /v1/jobs {"files": ["model.safetensors"]}) whose one file is then
 * PUT streamed from path, as `curl -T` does; returns the job's id. */
static json_int_t upload_put(client *cl, const char *ruleset, const char *path, int64_t size)
{
    char body[160], target[128];
    snprintf(body, sizeof body, "{\"ruleset\":\"%s\",\"files\":[\"model.safetensors\"]}", ruleset);
    json_t *job = request_json(cl, "POST", "/v1/jobs", body, 201, 201);
    json_int_t id = json_integer_value(json_object_get(job, "id"));
    json_decref(job);
    snprintf(target, sizeof target, "/v1/jobs/%lld/inputs/model.safetensors", (long long)id);
    FILE *f = fopen(path, "rb");
    if (!f) bench_die(path);
    membuf reply = {0};
    prepare(cl, "PUT", target);
    curl_easy_setopt(cl->c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(cl->c, CURLOPT_READFUNCTION, file_read);
    curl_easy_setopt(cl->c, CURLOPT_READDATA, f);
    curl_easy_setopt(cl->c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
    curl_easy_setopt(cl->c, CURLOPT_UPLOAD_BUFFERSIZE, (long)IO_BUFFER);
    curl_easy_setopt(cl->c, CURLOPT_WRITEFUNCTION, membuf_write);
    curl_easy_setopt(cl->c, CURLOPT_WRITEDATA, &reply);
    struct curl_slist *h = curl_slist_append(NULL, "Expect:");
    long code = perform(cl, target, h);
    curl_slist_free_all(h);
    fclose(f);
    if (code != 200)
        bench_fail("PUT %s: status %ld: %s", target, code, reply.data ? reply.data : "");
    free(reply.data);
    return id;
}

/* Polls GET /v1/jobs/{id} every 10 ms until it succeeds; returns outputs[0].bytes. */
static int64_t wait_job(client *cl, json_int_t id)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", (long long)id);
    double t0 = bench_now();
    while (bench_now() - t0 < JOB_TIMEOUT) {
        json_t *job = request_json(cl, "GET", path, NULL, 200, 200);
        const char *state = json_string_value(json_object_get(job, "state"));
        if (state && strcmp(state, "succeeded") == 0) {
            json_t *bytes =
                json_object_get(json_array_get(json_object_get(job, "outputs"), 0), "bytes");
            if (!json_is_integer(bytes))
                bench_fail("job %lld succeeded without outputs[0].bytes", (long long)id);
            int64_t n = (int64_t)json_integer_value(bytes);
            json_decref(job);
            return n;
        }
        if (!state || (strcmp(state, "queued") != 0 && strcmp(state, "running") != 0 &&
                       strcmp(state, "receiving") != 0)) {
            const char *e = json_string_value(json_object_get(job, "error"));
            bench_fail("job %lld ended %s: %s", (long long)id, state ? state : "(no state)",
                       e ? e : "(no error)");
        }
        json_decref(job);
        bench_quantd_alive("while the job ran");
        bench_sleep_ns(POLL_NS);
    }
    bench_fail("job %lld did not finish within %.0f s", (long long)id, JOB_TIMEOUT);
}

/* GET /v1/jobs/{id}/WHAT (output, outputs.tar) into the file at out; returns the bytes written. */
static int64_t download(client *cl, json_int_t id, const char *what, const char *out)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%lld/%s", (long long)id, what);
    FILE *f = fopen(out, "wb");
    if (!f) bench_die(out);
    prepare(cl, "GET", path);
    curl_easy_setopt(cl->c, CURLOPT_WRITEFUNCTION, file_write);
    curl_easy_setopt(cl->c, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(cl->c, CURLOPT_BUFFERSIZE, (long)IO_BUFFER);
    long code = perform(cl, path, NULL);
    if (fclose(f) != 0) bench_die(out);
    if (code != 200) bench_fail("GET %s: status %ld", path, code);
    return file_size(out);
}

/* ---- the run --------------------------------------------------------------------------------- */

/* One path's round: its three phases in seconds and the bytes its download received. */
typedef struct path_result {
    double upload, quantize, download;
    int64_t down_bytes;
    /* the single-shard path only: GET outputs.tar after GET output, not in the sum */
    double tar;
    int64_t tar_bytes;
} path_result;

typedef struct daemon_result {
    path_result single; /* POST ?ruleset= (streamed), wait, GET output */
    path_result ck;     /* POST {"files"} + PUT (streamed), wait, GET outputs.tar */
    long rss_kib;
    int exit_status;
} daemon_result;

static double path_seconds(const path_result *p)
{
    return p->upload + p->quantize + p->download;
}

/* DELETE /v1/jobs/{id} of a finished job: its row and files go, so rounds do not fill the disk. */
static void delete_job(client *cl, json_int_t id)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", (long long)id);
    membuf reply = {0};
    prepare(cl, "DELETE", path);
    curl_easy_setopt(cl->c, CURLOPT_WRITEFUNCTION, membuf_write);
    curl_easy_setopt(cl->c, CURLOPT_WRITEDATA, &reply);
    long code = perform(cl, path, NULL);
    if (code != 204)
        bench_fail("DELETE %s: status %ld: %s", path, code, reply.data ? reply.data : "");
    free(reply.data);
}

static void put_ruleset(client *cl)
{
    json_decref(request_json(cl, "PUT", "/v1/rulesets/bench", "{\"rules\":" RULES "}", 201, 200));
}

static void end_to_end(client *cl, const char *in, int64_t in_bytes, const char *out,
                       const char *tar, path_result *r)
{
    double t0 = bench_now();
    json_int_t id = upload(cl, "bench", in, in_bytes);
    double t1 = bench_now();
    int64_t expect = wait_job(cl, id);
    double t2 = bench_now();
    r->down_bytes = download(cl, id, "output", out);
    double t3 = bench_now();
    r->tar_bytes = download(cl, id, "outputs.tar", tar);
    r->tar = bench_now() - t3;
    if (r->tar_bytes < r->down_bytes)
        bench_fail("the tar (%lld bytes) is smaller than its output", (long long)r->tar_bytes);
    if (r->down_bytes != expect)
        bench_fail("downloaded %lld bytes, the job reports %lld", (long long)r->down_bytes,
                   (long long)expect);
    r->upload = t1 - t0;
    r->quantize = t2 - t1;
    r->download = t3 - t2;
    delete_job(cl, id);
}

/* The checkpoint-job path: create, PUT the shard (quantized while it arrives), wait for the
 * job, download the outputs as a tar (what examples/upload_checkpoint.sh does). */
static void end_to_end_checkpoint(client *cl, const char *in, int64_t in_bytes, const char *tar,
                                  path_result *r)
{
    double t0 = bench_now();
    json_int_t id = upload_put(cl, "bench", in, in_bytes);
    double t1 = bench_now();
    int64_t expect = wait_job(cl, id);
    double t2 = bench_now();
    r->down_bytes = download(cl, id, "outputs.tar", tar);
    r->download = bench_now() - t2;
    if (r->down_bytes < expect)
        bench_fail("the tar (%lld bytes) is smaller than its output", (long long)r->down_bytes);
    r->upload = t1 - t0;
    r->quantize = t2 - t1;
    delete_job(cl, id);
}

/* *best becomes `round` when that was faster (or the first). */
static void keep_faster(path_result *best, const path_result *round, bool first)
{
    if (first || path_seconds(round) < path_seconds(best)) *best = *round;
}

static daemon_result run_daemon(const char *quantd, const char *threads, const char *in,
                                int64_t in_bytes, int rounds)
{
    char out[2200], tar[2200];
    snprintf(out, sizeof out, "%s/download.safetensors", bench_root());
    snprintf(tar, sizeof tar, "%s/download.tar", bench_root());
    const char *const workers[] = {"--workers", "1", NULL};
    int port = bench_quantd_start(quantd, workers, threads);
    client cl = {.c = curl_easy_init()};
    if (!cl.c) bench_fail("curl_easy_init failed");
    snprintf(cl.base, sizeof cl.base, "http://127.0.0.1:%d", port);
    daemon_result r = {0};
    put_ruleset(&cl);
    for (int round = 0; round < rounds; round++) {
        path_result one = {0}, ck = {0};
        if (round % 2 == 0) {
            end_to_end(&cl, in, in_bytes, out, tar, &one);
            end_to_end_checkpoint(&cl, in, in_bytes, tar, &ck);
        } else {
            end_to_end_checkpoint(&cl, in, in_bytes, tar, &ck);
            end_to_end(&cl, in, in_bytes, out, tar, &one);
        }
        keep_faster(&r.single, &one, round == 0);
        keep_faster(&r.ck, &ck, round == 0);
    }
    curl_easy_cleanup(cl.c);
    r.rss_kib = bench_quantd_hwm_kib();
    r.exit_status = bench_quantd_stop();
    return r;
}

static void print_row(const char *run, double bytes, double seconds, const char *ratio,
                      long rss_kib)
{
    char rss[32] = "-";
    if (rss_kib > 0) snprintf(rss, sizeof rss, "%.0f", (double)rss_kib / 1024.0);
    printf("| %s | %.2f | %s | %.3f | %s |\n", run, bytes / 1e9 / seconds, ratio, seconds, rss);
}

static void print_table(double mib, const char *threads, int rounds, int64_t in_bytes,
                        offline_result off, const daemon_result *d, const char *load_before)
{
    const path_result *one = &d->single, *ckp = &d->ck;
    double e2e = path_seconds(one);
    char ratio[32];
    snprintf(ratio, sizeof ratio, "%.2f", off.seconds / e2e);
    printf("## daemon: upload -> quantize -> download of a %.0f MiB bf16 shard over loopback "
           "(%d tensors, int8 per-channel), threads %s, each path the best of %d round%s (order "
           "swapped each round)\n\n",
           mib, N_TENSORS, threads, rounds, rounds == 1 ? "" : "s");
    printf("| run | GB/s | ratio vs offline | seconds | peak RSS MiB |\n|---|---|---|---|---|\n");
    print_row("quant quantize, offline (baseline, best of 2)", (double)in_bytes, off.seconds,
              "1.00", off.rss_kib);
    print_row("quantd end to end", (double)in_bytes, e2e, ratio, d->rss_kib);
    print_row("- upload (POST, streamed; quantizing meanwhile)", (double)in_bytes, one->upload, "-",
              0);
    print_row("- quantize (202 to succeeded, 10 ms polls)", (double)in_bytes, one->quantize, "-",
              0);
    print_row("- download (GET output, to disk)", (double)one->down_bytes, one->download, "-", 0);
    print_row("download as a tar (GET outputs.tar, to disk; not in the sum)",
              (double)one->tar_bytes, one->tar, "-", 0);
    double ck = path_seconds(ckp);
    snprintf(ratio, sizeof ratio, "%.2f", off.seconds / ck);
    print_row("quantd checkpoint job end to end (POST files, PUT, outputs.tar)", (double)in_bytes,
              ck, ratio, d->rss_kib);
    print_row("- create + PUT (streamed; quantizing meanwhile)", (double)in_bytes, ckp->upload, "-",
              0);
    print_row("- PUT answered to succeeded (10 ms polls)", (double)in_bytes, ckp->quantize, "-", 0);
    print_row("- GET outputs.tar (to disk)", (double)ckp->down_bytes, ckp->download, "-", 0);
    printf("\nGB/s: input bytes per second (downloads: bytes received); goals: end to "
           "end >= 0.75x "
           "offline, quantd peak RSS < 300 MiB. Load average (1 min) before the run %s, after "
           "%s.\n",
           load_before, bench_load_avg());
}

int main(int argc, char **argv)
{
    bench_init("daemon-bench");
    if (argc != 3) {
        fprintf(stderr, "usage: daemon-bench QUANTD_BINARY QUANT_BINARY\n");
        return 2;
    }
    const char *env = getenv("QUANT_BENCH_DAEMON_MIB");
    long mib = env ? atol(env) : 1024;
    if (mib < 1) mib = 1;
    const char *threads = getenv("QUANT_BENCH_THREADS") ? getenv("QUANT_BENCH_THREADS") : "2";
    const char *renv = getenv("QUANT_BENCH_DAEMON_ROUNDS");
    int rounds = renv ? atoi(renv) : 2;
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "daemon-bench: QUANT_BENCH_DAEMON_ROUNDS=\"%s\" must be in 1..%d\n", renv,
                MAX_ROUNDS);
        return 2;
    }
    const char *root = bench_make_root();
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) bench_fail("curl_global_init failed");
    char in[2200], out[2200], rules[2200];
    snprintf(in, sizeof in, "%s/in.safetensors", root);
    snprintf(out, sizeof out, "%s/offline.safetensors", root);
    snprintf(rules, sizeof rules, "%s/rules.json", root);
    char load_before[32];
    snprintf(load_before, sizeof load_before, "%s", bench_load_avg());
    write_shard(in, (int64_t)mib * 8);
    write_text(rules, RULES "\n");
    int64_t in_bytes = file_size(in);
    warm(in);
    offline_result off = run_offline(argv[2], threads, rules, in, out);
    daemon_result d = run_daemon(argv[1], threads, in, in_bytes, rounds);
    print_table((double)mib, threads, rounds, in_bytes, off, &d, load_before);
    curl_global_cleanup();
    return bench_finish(d.exit_status);
}
