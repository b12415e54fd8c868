/* soak.c -- owns `make soak`: quantd under a steady mixed load over loopback for SOAK_SECONDS
 * (default 60), with its memory watched. Together: statistics posts from 4 keep-alive
 * connections (one sending an Idempotency-Key with each post), one job at a time (a generated
 * bf16 shard uploaded, polled until it succeeded, its output downloaded and checked against the
 * listed size, the job before it deleted, again), a poller (job list, the current job, the
 * model's statistics, /healthz, /metrics) and a downloader of the latest output. quantd's RSS
 * is sampled every second. Prints requests by kind, failures, RSS at 10 s and at the end, the
 * data directory's size; exits 1 on an unexpected failure (any non-2xx answer that is not by
 * design, any transport error, a job that did not succeed, a stored count that differs from the
 * posts acknowledged, quantd not exiting 0 at SIGTERM) or when quantd's RSS floor (the smallest of
 * 10 one-second samples) over the last 10 s is more than 10% above the floor of seconds 11-20:
 * a leak raises the floor, while a job holding its buffers at a sample only makes a peak. By
 * design: 404 for a job, or its output, that the job loop deleted after the request was chosen (the
 * poller and the downloader race it on purpose). SPDX-License-Identifier: Apache-2.0
 *
 * Usage: soak QUANTD_BINARY
 * Environment: SOAK_SECONDS (default 60), TMPDIR (quantd's data directory and the shard).
 */
#define _DEFAULT_SOURCE
#define _XOPEN_SOURCE 700
#include <curl/curl.h>
#include <ftw.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "benchutil.h"
#include "quant_st.h"

#define POSTERS     4
#define POST_ACTS   8
#define POST_VALUES 64
#define POST_PAUSE_NS                                                                              \
    5000000L /* between two posts of one connection: a steady, not a flat-out, load */
#define POLL_PAUSE_NS  50000000L /* the poller's round */
#define FETCH_PAUSE_NS 100000000L
#define JOB_POLL_NS    20000000L
#define SHARD_TENSORS  4
#define SHARD_ROWS     512
#define SHARD_COLS     1024 /* 4 x 512 x 1024 bf16: 4 MiB */
#define RSS_WARMUP     10   /* seconds before the reference stretch of RSS samples */
#define RSS_WINDOW     10   /* samples (one a second) whose smallest is a stretch's RSS floor */
#define RSS_GROWTH_MAX 0.10
#define RULES          "{\"rules\":[{\"module_path\":\".*\",\"weight_qtype\":\"int8\"}]}"
#define MAX_REPORTED   8 /* unexpected failures printed in full */

/* ---- what happened, by kind of request --------------------------------------------------------
 */

typedef enum kind {
    K_POST,
    K_UPLOAD,
    K_JOB_POLL,
    K_JOB_LIST,
    K_DOWNLOAD,
    K_DELETE,
    K_STATS_READ,
    K_HEALTH,
    K_METRICS,
    K_COUNT
} kind;

static const char *const kind_names[K_COUNT] = {"POST /v1/models/soak/stats",
                                                "POST /v1/jobs (upload)",
                                                "GET /v1/jobs/{id}",
                                                "GET /v1/jobs?limit=10",
                                                "GET /v1/jobs/{id}/output",
                                                "DELETE /v1/jobs/{id}",
                                                "GET /v1/models/soak/stats",
                                                "GET /healthz",
                                                "GET /metrics"};

static struct {
    atomic_long total[K_COUNT], ok[K_COUNT], by_design[K_COUNT], failed[K_COUNT];
    atomic_int reported;
    atomic_long jobs_done;
    atomic_bool stop;
    atomic_llong current_job, latest_job; /* running or queued; the newest succeeded */
    char base[64];
    char shard[2200];
    long long shard_bytes;
} g;

/* An unexpected answer: counted, and the first few printed. */
static void failed(kind k, long status, const char *detail)
{
    atomic_fetch_add(&g.failed[k], 1);
    if (atomic_fetch_add(&g.reported, 1) < MAX_REPORTED)
        fprintf(stderr, "soak: %s: status %ld: %.300s\n", kind_names[k], status,
                detail ? detail : "");
}

/* Counts one answer: 2xx ok, `design` (0: none) by design, anything else a failure. */
static bool tally(kind k, long status, long design, const char *body)
{
    atomic_fetch_add(&g.total[k], 1);
    if (status / 100 == 2) {
        atomic_fetch_add(&g.ok[k], 1);
        return true;
    }
    if (design && status == design)
        atomic_fetch_add(&g.by_design[k], 1);
    else
        failed(k, status, body);
    return false;
}

/* ---- HTTP (libcurl, one handle per thread so its connection is kept) --------------------------
 */

typedef struct client {
    CURL *c;
    char *body; /* the last reply, NUL-terminated */
    size_t len, cap;
    long long received; /* bytes of a download */
    bool keep;          /* keep the reply's bytes (downloads only count them) */
} client;

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    client *cl = ud;
    size_t k = size * n;
    cl->received += (long long)k;
    if (!cl->keep) return k;
    if (cl->len + k + 1 > cl->cap) {
        size_t cap = (cl->len + k + 1) * 2;
        char *b = realloc(cl->body, cap);
        if (!b) return 0;
        cl->body = b;
        cl->cap = cap;
    }
    memcpy(cl->body + cl->len, p, k);
    cl->len += k;
    cl->body[cl->len] = '\0';
    return k;
}

static size_t file_read(char *p, size_t size, size_t n, void *ud)
{
    return fread(p, size, n, ud) * size;
}

static void client_init(client *cl)
{
    *cl = (client){.c = curl_easy_init()};
    if (!cl->c) bench_fail("curl_easy_init");
}

static void client_free(client *cl)
{
    curl_easy_cleanup(cl->c);
    free(cl->body);
}

/* Resets the handle (the connection stays) for method path. */
static void prepare(client *cl, const char *method, const char *path, bool keep)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", g.base, path);
    curl_easy_reset(cl->c);
    curl_easy_setopt(cl->c, CURLOPT_URL, url);
    curl_easy_setopt(cl->c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(cl->c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(cl->c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(cl->c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(cl->c, CURLOPT_WRITEDATA, cl);
    cl->len = 0;
    cl->received = 0;
    cl->keep = keep;
    if (cl->body) cl->body[0] = '\0';
}

/* Performs the prepared request: the status, or 0 after a transport error (counted as a failure
 * of kind k). */
static long perform(client *cl, kind k, struct curl_slist *headers)
{
    if (headers) curl_easy_setopt(cl->c, CURLOPT_HTTPHEADER, headers);
    CURLcode rc = curl_easy_perform(cl->c);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
        atomic_fetch_add(&g.total[k], 1);
        failed(k, 0, curl_easy_strerror(rc));
        return 0;
    }
    long code = 0;
    curl_easy_getinfo(cl->c, CURLINFO_RESPONSE_CODE, &code);
    return code;
}

static long get(client *cl, kind k, const char *path, bool keep)
{
    prepare(cl, "GET", path, keep);
    return perform(cl, k, NULL);
}

static long send_json(client *cl, kind k, const char *method, const char *path, const char *body,
                      const char *extra_header)
{
    prepare(cl, method, path, true);
    curl_easy_setopt(cl->c, CURLOPT_POSTFIELDS, body);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (extra_header) h = curl_slist_append(h, extra_header);
    return perform(cl, k, h);
}

/* ---- statistics posters -----------------------------------------------------------------------
 */

/* A JSON post of POST_ACTS activations x POST_VALUES absmax values, varied by n. */
static size_t post_body(char *buf, size_t cap, long n)
{
    size_t at = (size_t)snprintf(buf, cap, "{\"stats\":{");
    for (int a = 0; a < POST_ACTS; a++) {
        at += (size_t)snprintf(buf + at, cap - at,
                               "%s\"layers/%d/mlp/dot_general0_lhs\":{"
                               "\"absmax\":[",
                               a ? "," : "", a);
        for (int v = 0; v < POST_VALUES; v++)
            at += (size_t)snprintf(buf + at, cap - at, "%s%.3f", v ? "," : "",
                                   1.0 + (double)((n * 31 + a * 7 + v) % 1000) / 1000.0);
        at += (size_t)snprintf(buf + at, cap - at, "]}");
    }
    at += (size_t)snprintf(buf + at, cap - at, "}}");
    if (at >= cap) bench_fail("post body too long");
    return at;
}

static void *poster_main(void *arg)
{
    int idx = (int)(intptr_t)arg;
    client cl;
    client_init(&cl);
    char *body = malloc(32768), key[96];
    if (!body) bench_die("malloc");
    for (long n = 0; !atomic_load(&g.stop); n++) {
        post_body(body, 32768, n * POSTERS + idx);
        snprintf(key, sizeof key, "Idempotency-Key: soak-%d-%ld", idx, n);
        long st =
            send_json(&cl, K_POST, "POST", "/v1/models/soak/stats", body, idx == 0 ? key : NULL);
        if (st) tally(K_POST, st, 0, cl.body);
        bench_sleep_ns(POST_PAUSE_NS);
    }
    free(body);
    client_free(&cl);
    return NULL;
}

/* ---- the job loop -----------------------------------------------------------------------------
 */

/* The generated shard: SHARD_TENSORS bf16 tensors, int8 per-channel by RULES. */
static void write_shard(const char *path)
{
    quant_st_out_tensor t[SHARD_TENSORS];
    char names[SHARD_TENSORS][64];
    for (int i = 0; i < SHARD_TENSORS; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.mlp.up_proj.weight", i);
        t[i] = (quant_st_out_tensor){
            .name = names[i], .dtype = QUANT_ST_BF16, .rank = 2, .shape = {SHARD_ROWS, SHARD_COLS}};
    }
    size_t n = (size_t)SHARD_ROWS * SHARD_COLS;
    uint16_t *buf = malloc(n * 2);
    if (!buf) bench_die("malloc");
    quant_st_writer *w;
    quant_ck_error err;
    if (quant_st_writer_new(path, t, SHARD_TENSORS, NULL, NULL, 0, &w, &err) != QUANT_CK_OK)
        bench_fail("writing the shard: %s", err.message);
    for (int i = 0; i < SHARD_TENSORS; i++) {
        bench_fill_bf16(buf, n, (uint64_t)i, quant_f32_to_bf16);
        size_t idx = (size_t)quant_st_writer_index(w, names[i]);
        if (quant_st_writer_pwrite(w, idx, 0, buf, n * 2, &err) != QUANT_CK_OK)
            bench_fail("writing the shard: %s", err.message);
    }
    if (quant_st_writer_commit(w, &err) != QUANT_CK_OK)
        bench_fail("writing the shard: %s", err.message);
    quant_st_writer_free(w);
    free(buf);
    struct stat sb;
    if (stat(path, &sb) != 0) bench_die(path);
    g.shard_bytes = (long long)sb.st_size;
}

/* POST /v1/jobs?ruleset=soak with the shard; the new job's id, 0 when refused. */
static long long upload(client *cl)
{
    FILE *f = fopen(g.shard, "rb");
    if (!f) bench_die(g.shard);
    prepare(cl, "POST", "/v1/jobs?ruleset=soak", true);
    curl_easy_setopt(cl->c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(cl->c, CURLOPT_READFUNCTION, file_read);
    curl_easy_setopt(cl->c, CURLOPT_READDATA, f);
    curl_easy_setopt(cl->c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)g.shard_bytes);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/octet-stream");
    h = curl_slist_append(h, "Expect:");
    long st = perform(cl, K_UPLOAD, h);
    fclose(f);
    if (!st || !tally(K_UPLOAD, st, 0, cl->body)) return 0;
    json_t *doc = json_loads(cl->body, 0, NULL);
    long long id = (long long)json_integer_value(json_object_get(doc, "id"));
    json_decref(doc);
    if (id <= 0) failed(K_UPLOAD, st, "no job id in the answer");
    return id;
}

/* Polls the job until it ends; its output's listed size when it succeeded, else -1. */
static long long wait_job(client *cl, long long id)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", id);
    for (;;) {
        long st = get(cl, K_JOB_POLL, path, true);
        if (!st || !tally(K_JOB_POLL, st, 0, cl->body)) return -1;
        json_t *doc = json_loads(cl->body, 0, NULL);
        const char *state = json_string_value(json_object_get(doc, "state"));
        long long bytes = -1;
        bool over = !state || (strcmp(state, "queued") != 0 && strcmp(state, "running") != 0);
        if (state && strcmp(state, "succeeded") == 0)
            bytes = (long long)json_integer_value(
                json_object_get(json_array_get(json_object_get(doc, "outputs"), 0), "bytes"));
        else if (over)
            failed(K_JOB_POLL, st, cl->body);
        json_decref(doc);
        if (over) return bytes;
        bench_sleep_ns(JOB_POLL_NS);
    }
}

static void *job_main(void *arg)
{
    (void)arg;
    client cl;
    client_init(&cl);
    long long prev = 0;
    char path[96];
    while (!atomic_load(&g.stop)) {
        long long id = upload(&cl);
        if (!id) {
            bench_sleep_ns(POLL_PAUSE_NS);
            continue;
        }
        atomic_store(&g.current_job, id);
        long long bytes = wait_job(&cl, id);
        if (bytes < 0) continue;
        snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
        long st = get(&cl, K_DOWNLOAD, path, false);
        if (st && tally(K_DOWNLOAD, st, 0, NULL) && cl.received != bytes)
            failed(K_DOWNLOAD, st, "the output's size differs from the listed one");
        atomic_store(&g.latest_job, id);
        if (prev) { /* the job before: its output, upload and row go (bounded disk) */
            snprintf(path, sizeof path, "/v1/jobs/%lld", prev);
            st = send_json(&cl, K_DELETE, "DELETE", path, "", NULL);
            if (st) tally(K_DELETE, st, 0, cl.body);
        }
        prev = id;
        atomic_fetch_add(&g.jobs_done, 1);
    }
    client_free(&cl);
    return NULL;
}

/* ---- readers ----------------------------------------------------------------------------------
 */

/* A 404 for job id is by design once the job loop has moved past it (deleted or about to be). */
static long design_404(long long id)
{
    return id != atomic_load(&g.current_job) && id != atomic_load(&g.latest_job) ? 404 : 0;
}

static void *poller_main(void *arg)
{
    (void)arg;
    client cl;
    client_init(&cl);
    char path[96];
    for (long round = 0; !atomic_load(&g.stop); round++) {
        long st = get(&cl, K_JOB_LIST, "/v1/jobs?limit=10", true);
        if (st) tally(K_JOB_LIST, st, 0, cl.body);
        long long id = atomic_load(&g.current_job);
        if (id) {
            snprintf(path, sizeof path, "/v1/jobs/%lld", id);
            st = get(&cl, K_JOB_POLL, path, true);
            if (st) tally(K_JOB_POLL, st, design_404(id), cl.body);
        }
        st = get(&cl, K_STATS_READ, "/v1/models/soak/stats", true);
        if (st) tally(K_STATS_READ, st, 0, cl.body);
        st = get(&cl, K_HEALTH, "/healthz", true);
        if (st) tally(K_HEALTH, st, 0, cl.body);
        if (round % 20 == 0 && (st = get(&cl, K_METRICS, "/metrics", true)) != 0)
            tally(K_METRICS, st, 0, cl.body);
        bench_sleep_ns(POLL_PAUSE_NS);
    }
    client_free(&cl);
    return NULL;
}

static void *fetcher_main(void *arg)
{
    (void)arg;
    client cl;
    client_init(&cl);
    char path[96];
    while (!atomic_load(&g.stop)) {
        long long id = atomic_load(&g.latest_job);
        if (id) {
            snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
            long st = get(&cl, K_DOWNLOAD, path, false);
            if (st) tally(K_DOWNLOAD, st, design_404(id), NULL);
        }
        bench_sleep_ns(FETCH_PAUSE_NS);
    }
    client_free(&cl);
    return NULL;
}

/* ---- memory and disk --------------------------------------------------------------------------
 */

static long rss_kib(void)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)bench_quantd_pid());
    FILE *f = fopen(path, "r");
    if (!f) bench_die(path);
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    fclose(f);
    if (kib < 0) bench_fail("no VmRSS in %s", path);
    return kib;
}

static long long du_bytes;

static int add_size(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)path;
    (void)flag;
    (void)ftw;
    du_bytes += (long long)sb->st_blocks * 512;
    return 0;
}

/* Bytes on disk under the data directory. */
static long long data_dir_bytes(void)
{
    char dir[2200];
    snprintf(dir, sizeof dir, "%s/var", bench_root());
    du_bytes = 0;
    if (nftw(dir, add_size, 16, FTW_PHYS) != 0) bench_die(dir);
    return du_bytes;
}

/* ---- the run ----------------------------------------------------------------------------------
 */

/* The stored count of activation 0 of model soak (every post updates it once). */
static long long stored_count(void)
{
    client cl;
    client_init(&cl);
    long st = get(&cl, K_STATS_READ, "/v1/models/soak/stats?name=layers/0/.*", true);
    json_t *doc = st == 200 ? json_loads(cl.body, 0, NULL) : NULL;
    json_t *a = json_object_get(json_object_get(doc, "stats"), "layers/0/mlp/dot_general0_lhs");
    long long n = a ? (long long)json_integer_value(json_object_get(a, "count")) : -1;
    if (n < 0) bench_fail("GET /v1/models/soak/stats: status %ld: %.300s", st, cl.body);
    json_decref(doc);
    client_free(&cl);
    return n;
}

/* The rule set, and one post so that the model exists before the readers start. */
static void prepare_server(void)
{
    client cl;
    client_init(&cl);
    long st = send_json(&cl, K_UPLOAD, "PUT", "/v1/rulesets/soak", RULES, NULL);
    if (st != 201 && st != 200) bench_fail("PUT /v1/rulesets/soak: status %ld: %s", st, cl.body);
    char *body = malloc(32768);
    if (!body) bench_die("malloc");
    post_body(body, 32768, -1);
    st = send_json(&cl, K_POST, "POST", "/v1/models/soak/stats", body, NULL);
    if (st != 200) bench_fail("POST /v1/models/soak/stats: status %ld: %s", st, cl.body);
    free(body);
    client_free(&cl);
}

typedef struct rss_trace {
    long *kib; /* one sample per second, [0] at 1 s */
    int n;
} rss_trace;

/* Samples RSS every second for `seconds`, checking quantd is alive. */
static rss_trace watch(double seconds)
{
    rss_trace t = {calloc((size_t)seconds + 2, sizeof(long)), 0};
    if (!t.kib) bench_die("calloc");
    double t0 = bench_now();
    for (int s = 1; s <= (int)seconds; s++) {
        while (bench_now() - t0 < s) bench_sleep_ns(20000000L);
        bench_quantd_alive("during the soak");
        t.kib[t.n++] = rss_kib();
    }
    return t;
}

/* The RSS floor of samples [from, from + RSS_WINDOW) (clipped to the trace): their smallest.
 * A leak raises the floor; a sample taken while a job holds its buffers only raises a peak. */
static long rss_floor(const rss_trace *t, int from)
{
    if (from < 0) from = 0;
    long least = t->kib[from];
    for (int k = from; k < t->n && k < from + RSS_WINDOW; k++)
        least = t->kib[k] < least ? t->kib[k] : least;
    return least;
}

typedef struct rss_summary {
    int ref;          /* the first sample of the reference stretch: after RSS_WARMUP s */
    long at_ref, end; /* floors of the reference stretch and of the last RSS_WINDOW samples */
    long most;        /* the largest sample from ref on */
    double growth;    /* (end - at_ref) / at_ref */
} rss_summary;

static rss_summary summarize_rss(const rss_trace *t)
{
    rss_summary r = {.ref = t->n >= RSS_WARMUP + RSS_WINDOW ? RSS_WARMUP : 0};
    r.at_ref = rss_floor(t, r.ref);
    r.end = rss_floor(t, t->n - RSS_WINDOW);
    for (int i = r.ref; i < t->n; i++) r.most = t->kib[i] > r.most ? t->kib[i] : r.most;
    r.growth = (double)(r.end - r.at_ref) / (double)r.at_ref;
    return r;
}

static long total_of(atomic_long *v)
{
    long n = 0;
    for (int k = 0; k < K_COUNT; k++) n += atomic_load(&v[k]);
    return n;
}

static double mib(long kib)
{
    return (double)kib / 1024.0;
}

/* The 1-minute load average, as /proc/loadavg gives it ("?" when unreadable). */
static const char *load_avg(char *buf, size_t len)
{
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f || !fgets(buf, (int)len, f)) snprintf(buf, len, "?");
    if (f) fclose(f);
    buf[strcspn(buf, " \n")] = '\0';
    return buf;
}

static void print_report(double seconds, const rss_trace *t, long long stored, long long disk,
                         const char *load0)
{
    char load1[64];
    rss_summary r = summarize_rss(t);
    printf("## soak: %.0f s of mixed load on quantd over loopback, %ld CPUs online\n\n", seconds,
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("| requests | total | 2xx | by design | failures |\n|---|---|---|---|---|\n");
    for (int k = 0; k < K_COUNT; k++)
        printf("| %s | %ld | %ld | %ld | %ld |\n", kind_names[k], atomic_load(&g.total[k]),
               atomic_load(&g.ok[k]), atomic_load(&g.by_design[k]), atomic_load(&g.failed[k]));
    printf("| all | %ld | %ld | %ld | %ld |\n\n", total_of(g.total), total_of(g.ok),
           total_of(g.by_design), total_of(g.failed));
    printf("Jobs run to success: %ld (a %lld-byte shard each). quantd RSS floor (the smallest of "
           "%d samples, one a second): %.1f MiB from %d s, %.1f MiB over the last %d s (%+.1f%%, "
           "at most %+.0f%% allowed); largest sample from %d s %.1f MiB. Every 5 s (MiB):",
           atomic_load(&g.jobs_done), g.shard_bytes, RSS_WINDOW, mib(r.at_ref), r.ref + 1,
           mib(r.end), RSS_WINDOW, 100 * r.growth, 100 * RSS_GROWTH_MAX, r.ref + 1, mib(r.most));
    for (int i = 0; i < t->n; i++)
        if (i == 0 || (i + 1) % 5 == 0) printf(" %.1f", mib(t->kib[i]));
    printf(". Data directory at the end: %.1f MiB. Stored count of activation 0 = posts "
           "acknowledged + 1 priming post: %lld. Load average (1 min) before %s, after %s.\n",
           (double)disk / 1048576.0, stored, load0, load_avg(load1, sizeof load1));
}

int main(int argc, char **argv)
{
    bench_init("soak");
    if (argc != 2) {
        fprintf(stderr, "usage: soak QUANTD_BINARY\n");
        return 2;
    }
    const char *env = getenv("SOAK_SECONDS");
    double seconds = env ? atof(env) : 60;
    if (!(seconds >= 2)) seconds = 60;
    char load0[64];
    load_avg(load0, sizeof load0);
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    bench_make_root();
    snprintf(g.shard, sizeof g.shard, "%s/shard.safetensors", bench_root());
    write_shard(g.shard);
    const char *args[] = {"--workers", "1", NULL};
    int port = bench_quantd_start(argv[1], args, "1");
    snprintf(g.base, sizeof g.base, "http://127.0.0.1:%d", port);
    prepare_server();
    pthread_t th[POSTERS + 3];
    int n = 0;
    for (int i = 0; i < POSTERS; i++)
        if (pthread_create(&th[n++], NULL, poster_main, (void *)(intptr_t)i) != 0)
            bench_die("pthread_create");
    void *(*others[3])(void *) = {job_main, poller_main, fetcher_main};
    for (int i = 0; i < 3; i++)
        if (pthread_create(&th[n++], NULL, others[i], NULL) != 0) bench_die("pthread_create");
    rss_trace trace = watch(seconds);
    atomic_store(&g.stop, true);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    long long stored = stored_count(), acked = atomic_load(&g.ok[K_POST]) + 1; /* + priming */
    long long disk = data_dir_bytes();
    int status = bench_quantd_stop();
    print_report(seconds, &trace, stored, disk, load0);
    fflush(stdout);
    rss_summary rss = summarize_rss(&trace);
    int rc = bench_finish(status);
    if (stored != acked) {
        fprintf(stderr, "soak: stored count %lld, but %lld posts were acknowledged\n", stored,
                acked);
        rc = 1;
    }
    if (total_of(g.failed) > 0) {
        fprintf(stderr, "soak: %ld unexpected failures (see above)\n", total_of(g.failed));
        rc = 1;
    }
    if (atomic_load(&g.jobs_done) == 0) {
        fprintf(stderr, "soak: no job ran to success\n");
        rc = 1;
    }
    if (rss.growth > RSS_GROWTH_MAX) {
        fprintf(stderr,
                "soak: quantd's RSS floor grew by %.1f%% from second %d to the end (at most "
                "%.0f%%)\n",
                100 * rss.growth, rss.ref + 1, 100 * RSS_GROWTH_MAX);
        rc = 1;
    }
    free(trace.kib);
    curl_global_cleanup();
    return rc;
}
