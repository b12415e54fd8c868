/* stats-bench.c -- owns `make bench`'s stats part: a self-contained load generator on
 * loopback (threads, one keep-alive TCP connection each, HTTP/1.1 written by hand, responses
 * parsed minimally) against a quantd it starts in a temporary directory. For
 * QUANT_BENCH_STATS_SECONDS (default 30) per load it posts calibration statistics to
 * POST /v1/models/{model}/stats: (a) small JSON posts (4 activations x 1 value) from 32
 * connections, (b) large safetensors posts (64 activations x 4096 F32 values, ~1 MiB) from 4.
 * Every request's latency is recorded; it prints a Markdown table of posts/s, p50/p99 latency
 * and MB/s of request body against the goals, the CPU seconds of quantd and of the
 * generator, and quantd's peak RSS (VmHWM), and checks that the stored count of an activation
 * equals the posts acknowledged. Stops quantd with SIGTERM (expects exit 0) and removes the
 * temporary directory on every exit. Fails loudly (exit 1) when any step does; missed goals
 * are reported, not failed.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Usage: stats-bench QUANTD_BINARY
 * Environment: QUANT_BENCH_STATS_SECONDS (seconds per load, default 30; CI uses 1), TMPDIR
 * (where quantd's data directory goes), QUANT_BENCH_STATS_MEAN_SQ=1 (the large posts also carry
 * the importance statistic ACT/mean_sq: 2 MiB each).
 */
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "benchutil.h"
#include "kit.h"

#define IO_TIMEOUT   30    /* seconds a socket read or write may block */
#define RESP_BUF     65536 /* response header bytes kept per connection */
#define SMALL_CONNS  32
#define SMALL_ACTS   4
#define LARGE_CONNS  4
#define LARGE_ACTS   64
#define LARGE_VALUES 4096
#define ACT_NAME     "layers/%d/mlp/dot_general0_lhs"

static int quantd_port; /* where quantd listens */
/* QUANT_BENCH_STATS_MEAN_SQ=1: each large post also carries ACT/mean_sq F32 [LARGE_VALUES]
 * (SPEC section 9), doubling its body. */
static bool with_mean_sq;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) bench_die("malloc");
    return p;
}

/* ---- CPU time -------------------------------------------------------------------------------- */

/* The daemon's user + system CPU seconds so far (/proc/PID/stat fields 14 and 15). */
static double daemon_cpu_seconds(void)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)bench_quantd_pid());
    FILE *f = fopen(path, "r");
    if (!f) bench_die(path);
    char *ok = fgets(line, sizeof line, f);
    fclose(f);
    char *p = ok ? strrchr(line, ')') : NULL; /* the command name may hold spaces */
    unsigned long long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        bench_fail("cannot read the CPU times in %s", path);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* This process's user + system CPU seconds so far (every thread). */
static double self_cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* ---- HTTP/1.1 by hand over one keep-alive connection ----------------------------------------- */

typedef struct conn {
    int fd;
    char buf[RESP_BUF + 1];
    size_t len; /* bytes in buf */
} conn;

typedef struct response {
    int status;
    char *body; /* only when asked for; NUL-terminated */
    size_t body_len;
} response;

static void conn_open(conn *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) bench_die("socket");
    int one = 1;
    struct timeval tv = {IO_TIMEOUT, 0};
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)quantd_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0) bench_die("connect to quantd");
    c->len = 0;
}

static void conn_close(conn *c)
{
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

/* Writes every byte of the iovecs (modified as it goes). */
static void send_all(conn *c, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(c->fd, iov, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) bench_die("writing a request to quantd");
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
}

/* "Authorization: Bearer TOKEN\r\n" once the token load runs, else "". */
static char auth_header[160];

/* Sends method path with the body (may be NULL) in one writev. */
static void send_request(conn *c, const char *method, const char *path, const char *ctype,
                         const void *body, size_t len)
{
    char head[640];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: %s\r\n%s"
                     "Content-Length: %zu\r\n\r\n",
                     method, path, quantd_port, ctype, auth_header, len);
    if (n < 0 || (size_t)n >= sizeof head) bench_fail("request line too long: %s", path);
    struct iovec iov[2] = {{head, (size_t)n}, {(void *)body, len}};
    send_all(c, iov, len ? 2 : 1);
}

static size_t recv_some(conn *c, char *into, size_t cap)
{
    ssize_t r;
    do r = recv(c->fd, into, cap, 0);
    while (r < 0 && errno == EINTR);
    if (r < 0) bench_die("reading a response from quantd");
    if (r == 0) bench_fail("quantd closed the connection mid-response");
    return (size_t)r;
}

/* The value of header `name` in the header block, or NULL. */
static const char *find_header(const char *head, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n"))
        if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') return p + 3 + n;
    return NULL;
}

/* Reads one response: status line, Content-Length, then the body, kept when keep is true and
 * otherwise skipped. Closes the connection when the server said it would. */
static response read_response(conn *c, bool keep)
{
    char *end;
    while (!(c->buf[c->len] = '\0', end = strstr(c->buf, "\r\n\r\n"))) {
        if (c->len == RESP_BUF) bench_fail("response header larger than %d bytes", RESP_BUF);
        c->len += recv_some(c, c->buf + c->len, RESP_BUF - c->len);
    }
    end[2] = '\0'; /* the header block ends with its last line's CRLF */
    response r = {0};
    if (sscanf(c->buf, "HTTP/1.%*d %d", &r.status) != 1)
        bench_fail("bad status line: %.80s", c->buf);
    const char *cl = find_header(c->buf, "Content-Length");
    if (!cl) bench_fail("response without Content-Length (status %d)", r.status);
    r.body_len = strtoull(cl, NULL, 10);
    const char *cn = find_header(c->buf, "Connection");
    bool close_after = cn && strncasecmp(cn + strspn(cn, " "), "close", 5) == 0;
    size_t head = (size_t)(end + 4 - c->buf), have = c->len - head;
    if (have > r.body_len) bench_fail("unexpected bytes after a response (pipelining is not used)");
    if (keep) {
        r.body = xmalloc(r.body_len + 1);
        memcpy(r.body, end + 4, have);
    }
    for (size_t got = have; got < r.body_len;) {
        char *into = keep ? r.body + got : c->buf;
        size_t cap = keep ? r.body_len - got : RESP_BUF;
        got += recv_some(c, into, cap < r.body_len - got ? cap : r.body_len - got);
    }
    if (keep) r.body[r.body_len] = '\0';
    c->len = 0;
    if (close_after) {
        conn_close(c);
        conn_open(c);
    }
    return r;
}

/* ---- request bodies -------------------------------------------------------------------------- */

/* A JSON post of SMALL_ACTS activations, one absmax value each, into buf; returns its length. */
static size_t small_body(char *buf, size_t cap, long step, unsigned seed)
{
    int n = snprintf(buf, cap, "{\"step\":%ld,\"stats\":{", step);
    for (int i = 0; i < SMALL_ACTS; i++) {
        double v = 1.0 + i + (double)((seed * 2654435761u + (unsigned)i * 40503u) % 1000) / 4000.0;
        n += snprintf(buf + n, cap - (size_t)n, "%s\"" ACT_NAME "\":{\"absmax\":[%.4f]}",
                      i ? "," : "", i, v);
    }
    n += snprintf(buf + n, cap - (size_t)n, "}}");
    if (n < 0 || (size_t)n >= cap) bench_fail("small body too long");
    return (size_t)n;
}

typedef struct large_body {
    char *data;
    size_t len;
    size_t data_start; /* where the F32 data begins */
} large_body;

/* Tensors per large post: ACT/absmax, and ACT/mean_sq with QUANT_BENCH_STATS_MEAN_SQ. */
static int large_tensors(void)
{
    return LARGE_ACTS * (with_mean_sq ? 2 : 1);
}

/* A safetensors file (kit_st_build) of LARGE_ACTS tensors ACT/absmax (and as many ACT/mean_sq),
 * F32 [LARGE_VALUES], every value positive, as mean_sq needs. */
static large_body make_large_body(unsigned seed)
{
    int per = with_mean_sq ? 2 : 1, tensors = large_tensors();
    kit_st_tensor *t = xmalloc((size_t)tensors * sizeof *t);
    char(*names)[96] = xmalloc((size_t)tensors * sizeof *names);
    for (int k = 0; k < tensors; k++) {
        snprintf(names[k], sizeof names[k], ACT_NAME "/%s", k / per,
                 k % per ? "mean_sq" : "absmax");
        t[k] = (kit_st_tensor){.name = names[k],
                               .dtype = "F32",
                               .rank = 1,
                               .shape = {LARGE_VALUES},
                               .nbytes = (size_t)LARGE_VALUES * 4};
    }
    large_body b;
    b.data = (char *)kit_st_build(t, (size_t)tensors, NULL, &b.len);
    b.data_start = b.len - (size_t)tensors * LARGE_VALUES * 4;
    free(names);
    free(t);
    float *v = (float *)(void *)(b.data + b.data_start); /* the header is padded to 8 */
    for (size_t i = 0; i < (size_t)tensors * LARGE_VALUES; i++)
        v[i] = 0.5f + (float)((seed + i * 2654435761u) % 4096) / 1024.0f;
    return b;
}

/* Changes one value per tensor so that no two posts are the same. */
static void touch_large_body(large_body *b, long step)
{
    float *v = (float *)(void *)(b->data + b->data_start);
    for (int i = 0; i < large_tensors(); i++)
        v[(size_t)i * LARGE_VALUES + (size_t)step % LARGE_VALUES] = 1.0f + (float)(step % 97);
}

/* ---- one load: N threads posting until told to stop ------------------------------------------ */

typedef enum load_kind { LOAD_SMALL_JSON, LOAD_LARGE_ST } load_kind;

typedef struct load {
    load_kind kind;
    int conns;
    const char *model;
    char path[128];
    atomic_bool stop;
    pthread_barrier_t go;
} load;

typedef struct worker {
    load *ld;
    int idx;
    pthread_t th;
    double *lat; /* seconds, one per request */
    size_t n, cap;
    uint64_t body_bytes;
} worker;

static void record(worker *w, double seconds, size_t body)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 4096;
        w->lat = realloc(w->lat, w->cap * sizeof *w->lat);
        if (!w->lat) bench_die("realloc");
    }
    w->lat[w->n++] = seconds;
    w->body_bytes += body;
}

/* One POST; fails unless quantd answers 2xx. Returns the latency in seconds. */
static double post_once(conn *c, const load *ld, const void *body, size_t len)
{
    const char *ctype =
        ld->kind == LOAD_SMALL_JSON ? "application/json" : "application/octet-stream";
    double t0 = bench_now();
    send_request(c, "POST", ld->path, ctype, body, len);
    response r = read_response(c, false);
    double t = bench_now() - t0;
    if (r.status / 100 != 2) {
        conn_close(c);
        bench_fail("POST %s: status %d", ld->path, r.status);
    }
    return t;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    load *ld = w->ld;
    conn *c = xmalloc(sizeof *c);
    conn_open(c);
    char small[1024];
    large_body big = {0};
    if (ld->kind == LOAD_LARGE_ST) big = make_large_body((unsigned)w->idx);
    pthread_barrier_wait(&ld->go);
    for (long i = 0; !atomic_load_explicit(&ld->stop, memory_order_relaxed); i++) {
        long step = i * ld->conns + w->idx;
        const void *body = big.data;
        size_t len = big.len;
        if (ld->kind == LOAD_SMALL_JSON)
            len = small_body(small, sizeof small, step, (unsigned)step), body = small;
        else
            touch_large_body(&big, step);
        record(w, post_once(c, ld, body, len), len);
    }
    conn_close(c);
    free(c);
    free(big.data);
    return NULL;
}

typedef struct load_result {
    size_t posts;          /* acknowledged during the timed run */
    double seconds;        /* from the start barrier to the last thread's end */
    double p50_ms, p99_ms; /* over every request */
    double mb_per_s;       /* request bodies, 1e6 bytes */
    double daemon_cpu, self_cpu;
    double commits, commit_posts, commit_seconds; /* the writer's, from /metrics */
} load_result;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (nearest rank) of sorted v. */
static double quantile(const double *v, size_t n, double q)
{
    size_t rank = (size_t)ceil(q * (double)n);
    return v[rank ? rank - 1 : 0];
}

static load_result summarize(worker *w, int n, double seconds)
{
    load_result r = {.seconds = seconds};
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) r.posts += w[i].n, bytes += w[i].body_bytes;
    if (!r.posts) bench_fail("no post completed");
    double *all = xmalloc(r.posts * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        memcpy(all + k, w[i].lat, w[i].n * sizeof *all);
        k += w[i].n;
        free(w[i].lat);
    }
    qsort(all, r.posts, sizeof *all, cmp_double);
    r.p50_ms = quantile(all, r.posts, 0.50) * 1e3;
    r.p99_ms = quantile(all, r.posts, 0.99) * 1e3;
    r.mb_per_s = (double)bytes / 1e6 / seconds;
    free(all);
    return r;
}

/* Runs the load for `seconds`, checking every 100 ms that quantd is alive. */
static load_result run_load(load *ld, double seconds)
{
    worker *w = xmalloc((size_t)ld->conns * sizeof *w);
    atomic_init(&ld->stop, false);
    if (pthread_barrier_init(&ld->go, NULL, (unsigned)ld->conns + 1) != 0) bench_die("barrier");
    for (int i = 0; i < ld->conns; i++) {
        w[i] = (worker){.ld = ld, .idx = i};
        if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0) bench_die("pthread_create");
    }
    pthread_barrier_wait(&ld->go);
    double cpu0 = daemon_cpu_seconds(), self0 = self_cpu_seconds(), t0 = bench_now();
    while (bench_now() - t0 < seconds) {
        bench_sleep_ns(100000000L);
        bench_quantd_alive("during the load");
    }
    atomic_store(&ld->stop, true);
    for (int i = 0; i < ld->conns; i++) pthread_join(w[i].th, NULL);
    double t = bench_now() - t0;
    load_result r = summarize(w, ld->conns, t);
    r.daemon_cpu = daemon_cpu_seconds() - cpu0;
    r.self_cpu = self_cpu_seconds() - self0;
    pthread_barrier_destroy(&ld->go);
    free(w);
    return r;
}

/* ---- checks around the loads ----------------------------------------------------------------- */

/* One post before the timed run, so the model and its activations exist. */
static void prime(load *ld)
{
    conn c;
    conn_open(&c);
    char small[1024];
    if (ld->kind == LOAD_SMALL_JSON) {
        size_t len = small_body(small, sizeof small, 0, 1);
        post_once(&c, ld, small, len);
    } else {
        large_body b = make_large_body(99);
        post_once(&c, ld, b.data, b.len);
        free(b.data);
    }
    conn_close(&c);
}

/* The stored count of activation 0 of the load's model (GET .../stats?name=ACT). */
static long long stored_count(const load *ld)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/models/%s/stats?name=" ACT_NAME, ld->model, 0);
    conn c;
    conn_open(&c);
    send_request(&c, "GET", path, "application/json", NULL, 0);
    response r = read_response(&c, true);
    conn_close(&c);
    const char *p = r.status == 200 ? strstr(r.body, "\"count\"") : NULL;
    long long n = -1;
    if (!p || sscanf(p + 7, " : %lld", &n) != 1)
        bench_fail("GET %s: status %d: %.300s", path, r.status, r.body);
    free(r.body);
    return n;
}

/* The stats writer's counters from GET /metrics: commits, posts carried, seconds committing. */
static void writer_metrics(double *commits, double *posts, double *seconds)
{
    conn c;
    conn_open(&c);
    send_request(&c, "GET", "/metrics", "text/plain", NULL, 0);
    response r = read_response(&c, true);
    conn_close(&c);
    if (r.status != 200) bench_fail("GET /metrics: status %d", r.status);
    const char *names[3] = {"\nquantd_stats_commit_seconds_count ",
                            "\nquantd_stats_commit_posts_total ",
                            "\nquantd_stats_commit_seconds_sum "};
    double *into[3] = {commits, posts, seconds};
    for (int i = 0; i < 3; i++) {
        const char *p = strstr(r.body, names[i]);
        if (!p || sscanf(p + strlen(names[i]), "%lf", into[i]) != 1)
            bench_fail("GET /metrics: no line%s", names[i]);
    }
    free(r.body);
}

/* The 1-minute load average, as /proc/loadavg gives it ("?" when unreadable). */
static const char *load_avg(void)
{
    static char buf[32];
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f || fscanf(f, "%31s", buf) != 1) snprintf(buf, sizeof buf, "?");
    if (f) fclose(f);
    return buf;
}

/* ---- the run --------------------------------------------------------------------------------- */

static const char *met(bool ok)
{
    return ok ? "met" : "**not met**";
}

static void print_row(const char *what, int conns, const load_result *r, const char *target,
                      bool ok)
{
    double posts = (double)r->posts, commits = r->commits > 0 ? r->commits : 1;
    printf("| %s | %d | %zu | %.0f | %.2f | %.2f | %.1f | %.1f | %.3f | %.1f | %.2f | %.1f | %s | "
           "%s |\n",
           what, conns, r->posts, posts / r->seconds, r->p50_ms, r->p99_ms, r->mb_per_s,
           r->daemon_cpu, r->daemon_cpu / posts * 1e3, r->commit_posts / commits,
           r->commit_seconds / commits * 1e3, r->self_cpu, target, met(ok));
}

static void print_table(double seconds, const load_result *a, const load_result *b,
                        const load_result *t, long rss_kib, long long checked_a,
                        long long checked_b, const char *load0)
{
    char what[128];
    printf("## stats: POST /v1/models/{model}/stats to quantd over loopback, %.0f s per load, "
           "%ld CPUs online\n\n",
           seconds, sysconf(_SC_NPROCESSORS_ONLN));
    printf("| load | connections | posts | posts/s | p50 ms | p99 ms | MB/s of body | quantd CPU s "
           "| quantd CPU ms/post | posts/commit | commit ms | bench CPU s | target | |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    snprintf(what, sizeof what, "(a) JSON, %d activations x 1 value", SMALL_ACTS);
    print_row(what, SMALL_CONNS, a, ">= 5,000 posts/s, p99 <= 20 ms",
              (double)a->posts / a->seconds >= 5000 && a->p99_ms <= 20);
    snprintf(what, sizeof what, "(b) safetensors, %d activations x %d F32%s", LARGE_ACTS,
             LARGE_VALUES, with_mean_sq ? ", absmax + mean_sq" : "");
    print_row(what, LARGE_CONNS, b, ">= 250 MB/s, p99 <= 50 ms",
              b->mb_per_s >= 250 && b->p99_ms <= 50);
    snprintf(what, sizeof what, "(a') as (a), each post with a trainer token");
    print_row(what, SMALL_CONNS, t, ">= 5,000 posts/s, p99 <= 20 ms",
              (double)t->posts / t->seconds >= 5000 && t->p99_ms <= 20);
    printf("\nquantd peak RSS (VmHWM): %.0f MiB. Latency: request written to response read, every "
           "request, nearest rank. MB/s: request body bytes (1e6) per second. posts/commit and "
           "commit ms: the stats writer's group commits during the load (quantd's /metrics). "
           "Load average (1 min) before the run %s, after %s. Stored count of activation 0 after "
           "each load = posts acknowledged + 1 priming post: %lld, %lld (checked).\n",
           (double)rss_kib / 1024.0, load0, load_avg(), checked_a, checked_b);
}

static load_result bench_load(load *ld, double seconds, long long *count)
{
    snprintf(ld->path, sizeof ld->path, "/v1/models/%s/stats", ld->model);
    prime(ld);
    double c0, p0, s0;
    writer_metrics(&c0, &p0, &s0);
    load_result r = run_load(ld, seconds);
    writer_metrics(&r.commits, &r.commit_posts, &r.commit_seconds);
    r.commits -= c0;
    r.commit_posts -= p0;
    r.commit_seconds -= s0;
    *count = stored_count(ld);
    if (*count != (long long)r.posts + 1)
        bench_fail("model %s: stored count %lld, but %zu + 1 posts were acknowledged", ld->model,
                   *count, r.posts);
    return r;
}

int main(int argc, char **argv)
{
    bench_init("stats-bench");
    if (argc != 2) {
        fprintf(stderr, "usage: stats-bench QUANTD_BINARY\n");
        return 2;
    }
    const char *env = getenv("QUANT_BENCH_STATS_SECONDS");
    double seconds = env ? atof(env) : 30;
    if (!(seconds > 0)) seconds = 30;
    const char *sq = getenv("QUANT_BENCH_STATS_MEAN_SQ");
    with_mean_sq = sq && strcmp(sq, "1") == 0;
    signal(SIGPIPE, SIG_IGN);
    char load0[32];
    snprintf(load0, sizeof load0, "%s", load_avg());
    bench_make_root();
    quantd_port = bench_quantd_start(argv[1], NULL, NULL);
    load small = {.kind = LOAD_SMALL_JSON, .conns = SMALL_CONNS, .model = "bench-json"};
    load large = {.kind = LOAD_LARGE_ST, .conns = LARGE_CONNS, .model = "bench-st"};
    long long count_a, count_b;
    load_result a = bench_load(&small, seconds, &count_a);
    load_result b = bench_load(&large, seconds, &count_b);
    /* the same small posts once the server has a token: each request's token is checked */
    snprintf(auth_header, sizeof auth_header, "Authorization: Bearer %s\r\n",
             bench_quantd_token(argv[1], "trainer", "bench"));
    load authed = {.kind = LOAD_SMALL_JSON, .conns = SMALL_CONNS, .model = "bench-json-token"};
    long long count_t;
    load_result t = bench_load(&authed, seconds, &count_t);
    long rss = bench_quantd_hwm_kib();
    int status = bench_quantd_stop();
    print_table(seconds, &a, &b, &t, rss, count_a, count_b, load0);
    return bench_finish(status);
}
