/* test_faults.c -- fault injection against the real quantd: kill -9 in the middle of an upload's
 * body, of a running job (with jobs queued behind it) and of a burst of statistics posts from
 * several threads, each followed by a restart on the same data directory. After each: the crash
 * image and the final database pass PRAGMA integrity_check and foreign_key_check, nothing partial
 * is listed, served or left on disk (DATA/tmp empty, no *.quant-partial-* or *.quant-tmp-* under
 * DATA/jobs), every acknowledged statistics post is counted and retries with their Idempotency-Key
 * count exactly once, and queued jobs run to success. Then a full disk (root only: a 64 MiB tmpfs
 * as the data directory): the job fails cleanly, naming no server path, and quantd goes on serving.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"

#define SHARD "tests/data/stories260K-bf16-sharded/model-00001-of-00002.safetensors"
#define RULES "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]}"
#define MIB   (1024L * 1024L)

/* Rows of the interrupted job's tensors (8 x ROWS x 4096 F32): a few seconds with one thread;
 * a quarter under ThreadSanitizer (make check-tsan), which runs the quantizer ~10x slower. */
#if defined(__SANITIZE_THREAD__)
#define JOB_ROWS 1024
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define JOB_ROWS 1024
#endif
#endif
#ifndef JOB_ROWS
#define JOB_ROWS 4096
#endif

/* ---- the database and the data directory after a crash ---------------------------------------
 */

/* The first row of a PRAGMA on the database at path ("" when it returns none), or SQLite's
 * error; malloc'd. */
static char *pragma_first(const char *path, const char *pragma)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char *res = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_prepare_v2(db, pragma, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            res = strdup((const char *)sqlite3_column_text(st, 0));
        else if (rc == SQLITE_DONE)
            res = strdup("");
    }
    if (!res) res = strdup(db ? sqlite3_errmsg(db) : "cannot open");
    sqlite3_finalize(st);
    sqlite3_close(db);
    ck_assert_ptr_nonnull(res);
    return res;
}

static void assert_db_ok(const char *path)
{
    char *ok = pragma_first(path, "PRAGMA integrity_check");
    ck_assert_msg(strcmp(ok, "ok") == 0, "%s: integrity_check: %s", path, ok);
    free(ok);
    char *fk = pragma_first(path, "PRAGMA foreign_key_check");
    ck_assert_msg(fk[0] == '\0', "%s: foreign_key_check: a violation in table %s", path, fk);
    free(fk);
}

static void copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0 && errno == ENOENT) return; /* no WAL: nothing to copy */
    ck_assert_msg(in >= 0, "%s: %s", from, strerror(errno));
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_int_ge(out, 0);
    char buf[1 << 16];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0) ck_assert_int_eq(write(out, buf, (size_t)n), n);
    ck_assert_int_eq(n, 0);
    close(in);
    close(out);
}

/* Right after kill -9: the database and its WAL as the crash left them, copied (quantd's own
 * files stay untouched for its restart) and checked. */
static void assert_crash_image_ok(const qdp *d)
{
    char *dir = kit_join(d->root, "crash"), *db = kit_join(d->data_dir, "quantd.db");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    char from[4200], to[4200];
    const char *suffix[] = {"", "-wal"};
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s%s", db, suffix[i]);
        snprintf(to, sizeof to, "%s/quantd.db%s", dir, suffix[i]);
        copy_file(from, to);
    }
    snprintf(to, sizeof to, "%s/quantd.db", dir);
    assert_db_ok(to);
    kit_rmtree(dir);
    free(dir);
    free(db);
}

/* Entries in dir (-1 when it cannot be opened). */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static int partials_found;
static char partial_seen[4096];

static int note_partial(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    const char *name = path + ftw->base;
    if (strstr(name, ".quant-partial-") || strstr(name, ".quant-tmp-")) {
        partials_found++;
        snprintf(partial_seen, sizeof partial_seen, "%s", path);
    }
    return 0;
}

/* Files or directories under dir that a run writes before publishing (the library's
 * *.quant-partial-* directories and *.quant-tmp-* files). */
static int count_partials(const char *dir)
{
    partials_found = 0;
    partial_seen[0] = '\0';
    ck_assert_int_eq(nftw(dir, note_partial, 16, FTW_PHYS), 0);
    return partials_found;
}

/* Nothing half-done on disk: DATA/tmp empty, no partial output under DATA/jobs; DATA/uploads
 * holds `uploads` entries (the uploads of jobs not yet finished: a worker removes a job's upload
 * just after it stored the job's end, so this waits a little for it). */
static void assert_no_leftovers(const qdp *d, int uploads)
{
    char *tmp = kit_join(d->data_dir, "tmp"), *jobs = kit_join(d->data_dir, "jobs");
    char *up = kit_join(d->data_dir, "uploads");
    for (double t0 = kit_now(); count_entries(up) != uploads && kit_now() - t0 < 10;)
        kit_sleep_ms(10);
    ck_assert_msg(count_entries(tmp) == 0, "%s is not empty", tmp);
    ck_assert_msg(count_partials(jobs) == 0, "left behind: %s", partial_seen);
    ck_assert_msg(count_entries(up) == uploads, "%s: %d entries, wanted %d", up, count_entries(up),
                  uploads);
    free(tmp);
    free(jobs);
    free(up);
}

/* SIGTERM (exit 0), then the database as quantd left it, then the temporary root removed. */
static void stop_and_check(qdp *d)
{
    ck_assert_int_eq(qdp_signal(d, SIGTERM), 0);
    char *db = kit_join(d->data_dir, "quantd.db");
    assert_db_ok(db);
    free(db);
    qdp_stop(d);
}

/* ---- requests ---------------------------------------------------------------------------------
 */

static void put_rules(qdp *d)
{
    qdp_resp r =
        qdp_req(d, "PUT", "/v1/rulesets/int8", "application/json", RULES, strlen(RULES), NULL);
    ck_assert_msg(r.status == 200 || r.status == 201, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
}

static long long id_in(const qdp_resp *r, long want)
{
    ck_assert_msg(r->status == want, "%ld, wanted %ld: %s", r->status, want, r->body);
    json_t *j = qdp_json(r);
    long long id = (long long)json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    return id;
}

static long long upload_job(qdp *d)
{
    qdp_resp r = qdp_upload(d, "/v1/jobs?ruleset=int8", SHARD);
    long long id = id_in(&r, 202);
    qdp_resp_free(&r);
    return id;
}

static long long path_job(qdp *d, const char *file)
{
    char body[4200];
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"%s\"}}", file);
    qdp_resp r = qdp_req(d, "POST", "/v1/jobs", "application/json", body, strlen(body), NULL);
    long long id = id_in(&r, 202);
    qdp_resp_free(&r);
    return id;
}

static const char *state_of(json_t *job)
{
    return json_string_value(json_object_get(job, "state"));
}

/* The job succeeded; returns its first output's sha256 (malloc'd). */
static char *wait_success(qdp *d, long long id, double timeout_s)
{
    json_t *j = qdp_wait_job(d, id, timeout_s);
    ck_assert_msg(strcmp(state_of(j), "succeeded") == 0, "job %lld: %s (%s)", id, state_of(j),
                  json_string_value(json_object_get(j, "error")));
    json_t *out = json_array_get(json_object_get(j, "outputs"), 0);
    char *sha = strdup(json_string_value(json_object_get(out, "sha256")));
    json_decref(j);
    return sha;
}

/* Neither listed nor served: a job that has not succeeded has no outputs, and its files 409. */
static void assert_unpublished(qdp *d, long long id)
{
    json_t *j = qdp_get_job(d, id);
    ck_assert_msg(strcmp(state_of(j), "succeeded") != 0, "job %lld already succeeded", id);
    ck_assert_msg(json_object_get(j, "outputs") == NULL, "job %lld (%s) lists outputs", id,
                  state_of(j));
    json_decref(j);
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
    qdp_resp r = qdp_req(d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 409 || r.status == 404, "GET %s: %ld %s", path, r.status, r.body);
    qdp_resp_free(&r);
}

/* The job's output is served with the ETag "sha" (its first byte is enough). */
static void assert_served(qdp *d, long long id, const char *sha)
{
    char path[96], want[80];
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
    qdp_resp r = qdp_req_headers(d, "GET", path, "Range: bytes=0-0", "Accept: */*");
    ck_assert_msg(r.status == 206 && r.len == 1, "GET %s bytes 0-0: %ld", path, r.status);
    char *etag = qdp_header(&r, "etag");
    snprintf(want, sizeof want, "\"%s\"", sha);
    ck_assert_msg(etag && strcmp(etag, want) == 0, "%s: ETag %s, wanted %s", path, etag, want);
    free(etag);
    qdp_resp_free(&r);
}

static size_t count_jobs(qdp *d)
{
    qdp_resp r = qdp_req(d, "GET", "/v1/jobs", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    json_t *doc = qdp_json(&r);
    size_t n = json_array_size(json_object_get(doc, "jobs"));
    json_decref(doc);
    qdp_resp_free(&r);
    return n;
}

/* ---- kill -9 during an upload ------------------------------------------------------------------
 */

/* Starts a request (head: its first line, "POST /v1/jobs?ruleset=int8") sending file with its
 * whole Content-Length, and sends its first `part` bytes. */
static int upload_part(const qdp *d, const char *head_line, const char *file, size_t part)
{
    int in = open(file, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(in, 0);
    struct stat sb;
    ck_assert_int_eq(fstat(in, &sb), 0);
    int fd = qdp_raw_connect(d);
    char head[512];
    int n = snprintf(head, sizeof head,
                     "%s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/octet-stream\r\nContent-Length: %lld\r\n\r\n",
                     head_line, (long long)sb.st_size);
    ck_assert_msg(qdp_send_all(fd, head, (size_t)n), "send: %s", strerror(errno));
    char *buf = malloc(MIB);
    ck_assert_ptr_nonnull(buf);
    for (size_t sent = 0; sent < part;) {
        size_t want = part - sent < (size_t)MIB ? part - sent : (size_t)MIB;
        ssize_t got = read(in, buf, want);
        ck_assert_int_gt(got, 0);
        ck_assert_msg(qdp_send_all(fd, buf, (size_t)got), "send: %s", strerror(errno));
        sent += (size_t)got;
    }
    free(buf);
    close(in);
    return fd;
}

/* The size of the largest regular file anywhere under dir. */
static off_t largest_below;
static int note_size(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)path;
    (void)ftw;
    if (type == FTW_F && sb->st_size > largest_below) largest_below = sb->st_size;
    return 0;
}

static off_t largest_file(const char *dir)
{
    largest_below = 0;
    ck_assert_int_eq(nftw(dir, note_size, 16, FTW_PHYS), 0);
    return largest_below;
}

/* Waits until job id is in state want (60 s at most). */
static void wait_state(qdp *d, long long id, const char *want)
{
    double t0 = kit_now();
    for (;;) {
        json_t *j = qdp_get_job(d, id);
        bool there = strcmp(state_of(j), want) == 0;
        char got[32];
        snprintf(got, sizeof got, "%s", state_of(j));
        json_decref(j);
        if (there) return;
        ck_assert_msg(kit_now() - t0 < 60, "job %lld stayed %s, never %s", id, got, want);
        kit_sleep_ms(10);
    }
}

/* After the restart, job id (its inputs cut by the kill) failed at once with the restart's
 * message: not queued again to fail on a truncated file. */
static void assert_failed_restarted(qdp *d, long long id)
{
    json_t *j = qdp_get_job(d, id);
    ck_assert_str_eq(state_of(j), "failed");
    ck_assert_str_eq(json_string_value(json_object_get(j, "error")),
                     "quantd restarted while its inputs were being uploaded; create the job again");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "attempts")), 1);
    json_decref(j);
}

/* kill -9 while a shard's body streams into its job (created from its header, taken by the
 * worker, quantizing as the bytes arrive): after the restart that job failed at once with a
 * clear error and its files are gone (DATA/tmp and DATA/uploads empty), the job finished
 * before still serves its output, and the next upload runs. */
START_TEST(test_kill_mid_upload)
{
    qdp d;
    const char *args[] = {"--workers", "1", NULL};
    qdp_start(&d, args);
    put_rules(&d);
    long long done = upload_job(&d);
    char *sha = wait_success(&d, done, 60);
    char *file = kit_join(d.root, "upload.safetensors"), *up = kit_join(d.data_dir, "uploads");
    qdt_make_big(file, 8, 2048); /* 256 MiB announced, 16 MiB sent */
    int fd = upload_part(&d, "POST /v1/jobs?ruleset=int8", file, (size_t)(16 * MIB));
    double t0 = kit_now();
    while (largest_file(up) < MIB && kit_now() - t0 < 20) kit_sleep_ms(10);
    ck_assert_msg(largest_file(up) >= MIB, "the upload is not streaming into %s", up);
    long long cut = done + 1;
    wait_state(&d, cut, "running"); /* the worker reads it as it arrives */
    ck_assert_int_eq(qdp_signal(&d, SIGKILL), 128 + SIGKILL);
    close(fd);
    assert_crash_image_ok(&d);
    qdp_restart(&d, args);
    assert_no_leftovers(&d, 0);
    ck_assert_int_eq(count_jobs(&d), 2);
    assert_failed_restarted(&d, cut);
    assert_served(&d, done, sha);
    long long next = upload_job(&d);
    free(wait_success(&d, next, 60));
    assert_no_leftovers(&d, 0);
    stop_and_check(&d);
    free(sha);
    free(file);
    free(up);
}
END_TEST

/* The same for a checkpoint job (POST /v1/jobs {"files"}, PUT per file) killed while a shard
 * is half sent: failed at the restart with the same message, its inputs directory removed. */
START_TEST(test_kill_mid_checkpoint_upload)
{
    qdp d;
    const char *args[] = {"--workers", "1", NULL};
    qdp_start(&d, args);
    put_rules(&d);
    const char *body = "{\"ruleset\":\"int8\",\"files\":[\"model.safetensors\"]}";
    qdp_resp r = qdp_req(&d, "POST", "/v1/jobs", "application/json", body, strlen(body), NULL);
    long long id = id_in(&r, 201);
    qdp_resp_free(&r);
    char *file = kit_join(d.root, "upload.safetensors"), *up = kit_join(d.data_dir, "uploads");
    qdt_make_big(file, 8, 2048);
    char line[96];
    snprintf(line, sizeof line, "PUT /v1/jobs/%lld/inputs/model.safetensors", id);
    int fd = upload_part(&d, line, file, (size_t)(16 * MIB));
    double t0 = kit_now();
    while (largest_file(up) < MIB && kit_now() - t0 < 20) kit_sleep_ms(10);
    ck_assert_msg(largest_file(up) >= MIB, "the upload is not streaming into %s", up);
    wait_state(&d, id, "running");
    ck_assert_int_eq(qdp_signal(&d, SIGKILL), 128 + SIGKILL);
    close(fd);
    assert_crash_image_ok(&d);
    qdp_restart(&d, args);
    assert_no_leftovers(&d, 0);
    assert_failed_restarted(&d, id);
    stop_and_check(&d);
    free(file);
    free(up);
}
END_TEST

/* ---- kill -9 during a running job --------------------------------------------------------------
 */

/* Waits until job id runs and its partial output under DATA/jobs/ID has data in it. */
static void wait_partial_output(qdp *d, long long id)
{
    char name[32];
    snprintf(name, sizeof name, "jobs/%lld", id);
    char *dir = kit_join(d->data_dir, name);
    double t0 = kit_now();
    for (;;) {
        json_t *j = qdp_get_job(d, id);
        bool running = strcmp(state_of(j), "running") == 0;
        long long done =
            json_integer_value(json_object_get(json_object_get(j, "progress"), "bytes_done"));
        json_decref(j);
        if (running && done > 0 && access(dir, F_OK) == 0 && count_partials(dir) > 0) break;
        ck_assert_msg(kit_now() - t0 < 60, "job %lld wrote no partial output within 60 s", id);
        kit_sleep_ms(10);
    }
    free(dir);
}

/* kill -9 while a job writes its output, two more queued behind it: after the restart none of
 * them lists or serves an output until it succeeded, the interrupted one runs again (attempt 2)
 * to the same bytes as its twin that never was interrupted, the queued ones run, and nothing
 * partial is left. */
START_TEST(test_kill_running_job)
{
    char *src = qdt_tmpdir(), *big = kit_join(src, "big.safetensors");
    qdt_make_big(big, 8, JOB_ROWS);
    const char *args[] = {"--workers", "1", "--quant-threads", "1", "--source-root", src, NULL};
    qdp d;
    qdp_start(&d, args);
    put_rules(&d);
    long long a = path_job(&d, big), b = path_job(&d, big), c = upload_job(&d);
    wait_partial_output(&d, a);
    ck_assert_int_eq(qdp_signal(&d, SIGKILL), 128 + SIGKILL);
    assert_crash_image_ok(&d);
    qdp_restart(&d, args);
    assert_unpublished(&d, a);
    assert_unpublished(&d, b);
    assert_unpublished(&d, c);
    char *sha_a = wait_success(&d, a, 300), *sha_b = wait_success(&d, b, 300);
    free(wait_success(&d, c, 120));
    ck_assert_str_eq(sha_a, sha_b);
    json_t *j = qdp_get_job(&d, a);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "attempts")), 2);
    json_decref(j);
    j = qdp_get_job(&d, b);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "attempts")), 1);
    json_decref(j);
    assert_served(&d, a, sha_a);
    assert_no_leftovers(&d, 0);
    stop_and_check(&d);
    free(sha_a);
    free(sha_b);
    kit_rmtree(src);
    free(big);
    free(src);
}
END_TEST

/* ---- kill -9 during a burst of statistics posts ------------------------------------------------
 */

/* Every kind of row: absmax with mean_sq (SPEC section 9), min/max, and mean_sq alone. */
#define BURST_BODY                                                                                 \
    "{\"stats\":{\"a\":{\"absmax\":[1,2,3,4],\"mean_sq\":[1,4,9,16]},\"b\":{\"min\":[-1],"         \
    "\"max\":[1]},\"c\":{\"mean_sq\":[0.5,2]}}}"

typedef struct burst {
    const char *base;
    int idx;
    int sent; /* posts begun, keys b<idx>-0 .. b<idx>-(sent-1) */
    bool acked[4096];
    atomic_int *answered; /* posts answered 200 by all threads so far */
} burst;

static size_t discard(char *p, size_t size, size_t n, void *user)
{
    (void)p;
    (void)user;
    return size * n;
}

/* Posts with keys b<idx>-N until the daemon is gone (or the table is full). */
static void *burst_thread(void *arg)
{
    burst *b = arg;
    CURL *c = curl_easy_init();
    char url[128], key[64];
    snprintf(url, sizeof url, "%s/v1/models/burst/stats", b->base);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, BURST_BODY);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    for (b->sent = 0; b->sent < (int)(sizeof b->acked); b->sent++) {
        snprintf(key, sizeof key, "Idempotency-Key: b%d-%d", b->idx, b->sent);
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        h = curl_slist_append(h, key);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        long status = 0;
        CURLcode rc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_slist_free_all(h);
        b->acked[b->sent] = rc == CURLE_OK && status == 200;
        if (b->acked[b->sent]) atomic_fetch_add(b->answered, 1);
        if (rc != CURLE_OK) { /* the daemon is gone: this post may or may not have landed */
            b->sent++;
            break;
        }
    }
    curl_easy_cleanup(c);
    return NULL;
}

/* The activation's count; *sq (when not NULL) the last value of its sum_of_mean_sq. */
static long long count_sq_of(qdp *d, const char *activation, double *sq)
{
    qdp_resp r = qdp_req(d, "GET", "/v1/models/burst/stats", NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    json_t *doc = qdp_json(&r);
    json_t *a = json_object_get(json_object_get(doc, "stats"), activation);
    long long n = (long long)json_integer_value(json_object_get(a, "count"));
    json_t *sums = json_object_get(a, "sum_of_mean_sq");
    if (sq) *sq = json_number_value(json_array_get(sums, json_array_size(sums) - 1));
    json_decref(doc);
    qdp_resp_free(&r);
    return n;
}

static long long count_of(qdp *d, const char *activation)
{
    return count_sq_of(d, activation, NULL);
}

/* The unanswered posts again, each with its key: a post that had committed is a replay, the
 * others are applied. Returns the replays. */
static int retry_unanswered(qdp *d, const burst *b)
{
    int replays = 0;
    char key[64];
    for (int i = 0; i < b->sent; i++) {
        if (b->acked[i]) continue;
        snprintf(key, sizeof key, "Idempotency-Key: b%d-%d", b->idx, i);
        qdp_resp r = qdp_req(d, "POST", "/v1/models/burst/stats", "application/json", BURST_BODY,
                             strlen(BURST_BODY), key);
        ck_assert_msg(r.status == 200, "retry %s: %ld %s", key, r.status, r.body);
        char *rep = qdp_header(&r, "idempotent-replayed");
        replays += rep && strcmp(rep, "true") == 0;
        free(rep);
        qdp_resp_free(&r);
    }
    return replays;
}

/* kill -9 while 6 threads post statistics (mean_sq among them), each post with its own
 * Idempotency-Key: every post answered 200 is stored, with its sums, at most the posts sent are;
 * retrying the unanswered ones with their keys then counts every post exactly once. */
START_TEST(test_kill_stats_burst)
{
    qdp d;
    qdp_start(&d, NULL);
    enum { THREADS = 6 };
    pthread_t t[THREADS];
    burst *b = calloc(THREADS, sizeof *b);
    ck_assert_ptr_nonnull(b);
    atomic_int answered = 0;
    for (int i = 0; i < THREADS; i++) {
        b[i].base = d.base;
        b[i].idx = i;
        b[i].answered = &answered;
        ck_assert_int_eq(pthread_create(&t[i], NULL, burst_thread, &b[i]), 0);
    }
    /* mid-burst: 400 ms in, and not before some post was answered (a loaded machine may take
     * longer for the first commit) */
    kit_sleep_ms(400);
    for (int waited = 0; atomic_load(&answered) == 0 && waited < 20000; waited += 20)
        kit_sleep_ms(20);
    ck_assert_int_eq(qdp_signal(&d, SIGKILL), 128 + SIGKILL);
    int sent = 0, acked = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        sent += b[i].sent;
        for (int k = 0; k < b[i].sent; k++) acked += b[i].acked[k];
    }
    ck_assert_int_gt(acked, 0);
    assert_crash_image_ok(&d);
    qdp_restart(&d, NULL);
    long long stored = count_of(&d, "a");
    ck_assert_msg(stored >= acked && stored <= sent, "stored %lld, answered %d, sent %d", stored,
                  acked, sent);
    ck_assert_int_eq(count_of(&d, "b"), stored); /* one post, one transaction */
    double sq_a = 0, sq_c = 0;
    ck_assert_int_eq(count_sq_of(&d, "c", &sq_c), stored);
    ck_assert_int_eq(count_sq_of(&d, "a", &sq_a), stored);
    ck_assert(sq_a == 16.0 * (double)stored && sq_c == 2.0 * (double)stored);
    int replays = 0;
    for (int i = 0; i < THREADS; i++) replays += retry_unanswered(&d, &b[i]);
    ck_assert_int_eq(replays, stored - acked);
    ck_assert_int_eq(count_of(&d, "a"), sent);
    ck_assert_int_eq(count_of(&d, "b"), sent);
    ck_assert_int_eq(count_sq_of(&d, "c", &sq_c), sent);
    ck_assert(sq_c == 2.0 * (double)sent);
    stop_and_check(&d);
    free(b);
}
END_TEST

/* ---- a full disk -------------------------------------------------------------------------------
 */

/* A 64 MiB tmpfs mounted on ROOT/var by the parent process (Check's unchecked fixture), so that
 * it is unmounted even when the test fails in its forked child. */
static struct {
    char root[512];
    char var[600];
    bool mounted;
    char why[1024]; /* why not, when not mounted */
    pid_t *quantd;  /* shared with the forked test: a quantd to kill at teardown */
} fx;

#define TMPFS_SIZE (64 * MIB)

static void tmpfs_setup(void)
{
    fx.mounted = false;
    fx.quantd =
        mmap(NULL, sizeof *fx.quantd, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (fx.quantd == MAP_FAILED) fx.quantd = NULL;
    if (fx.quantd) *fx.quantd = 0;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(fx.root, sizeof fx.root, "%s/quantd-tmpfs-XXXXXX", base);
    if (geteuid() != 0) {
        snprintf(fx.why, sizeof fx.why, "not running as root");
        fx.root[0] = '\0';
        return;
    }
    if (!mkdtemp(fx.root)) {
        snprintf(fx.why, sizeof fx.why, "mkdtemp: %s", strerror(errno));
        fx.root[0] = '\0';
        return;
    }
    snprintf(fx.var, sizeof fx.var, "%s/var", fx.root);
    if (mkdir(fx.var, 0700) != 0 ||
        mount("tmpfs", fx.var, "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=0700") != 0) {
        snprintf(fx.why, sizeof fx.why, "mount -t tmpfs %s: %s", fx.var, strerror(errno));
        return;
    }
    fx.mounted = true;
}

static void tmpfs_teardown(void)
{
    pid_t pid = fx.quantd ? *fx.quantd : 0;
    if (pid > 0 && kill(pid, SIGKILL) == 0) /* the test failed with quantd running */
        for (int i = 0; i < 500 && kill(pid, 0) == 0; i++) {
            waitpid(pid, NULL, WNOHANG); /* ours when Check does not fork */
            kit_sleep_ms(10);
        }
    if (fx.mounted && umount2(fx.var, MNT_DETACH) != 0)
        fprintf(stderr, "faults: umount %s: %s\n", fx.var, strerror(errno));
    fx.mounted = false;
    if (fx.root[0]) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx.root);
        if (system(cmd) != 0) fprintf(stderr, "faults: %s failed\n", cmd);
        fx.root[0] = '\0';
    }
    if (fx.quantd) munmap(fx.quantd, sizeof *fx.quantd);
    fx.quantd = NULL;
}

static unsigned long long free_bytes(const char *dir)
{
    struct statvfs sv;
    ck_assert_int_eq(statvfs(dir, &sv), 0);
    return (unsigned long long)sv.f_bavail * sv.f_frsize;
}

/* The data directory on a 64 MiB tmpfs and a job whose 256 MiB output cannot fit: the job fails
 * (no server path in its error, nothing published, its partial files removed, the space back),
 * and quantd goes on serving: /healthz, a statistics post and a small job afterwards. */
START_TEST(test_full_disk)
{
    if (!fx.mounted) {
        fprintf(stderr, "faults: test_full_disk skipped: %s (needs root and a tmpfs mount)\n",
                fx.why);
        return;
    }
    char *src = qdt_tmpdir(), *big = kit_join(src, "big.safetensors");
    qdt_make_big(big, 8, 8192); /* 1 GiB of F32 -> 256 MiB of int8 */
    qdp d = {.root = strdup(fx.root), .data_dir = strdup(fx.var)};
    const char *args[] = {"--min-free-disk", "0", "--workers", "1", "--source-root", src, NULL};
    qdp_restart(&d, args); /* spawn on the tmpfs: the root is the fixture's */
    *fx.quantd = d.pid;
    put_rules(&d);
    unsigned long long before = free_bytes(fx.var);
    long long id = path_job(&d, big);
    json_t *j = qdp_wait_job(&d, id, 120);
    const char *error = json_string_value(json_object_get(j, "error"));
    ck_assert_msg(strcmp(state_of(j), "failed") == 0, "job on a full disk: %s", state_of(j));
    ck_assert_msg(error && strstr(error, "No space left"), "error: %s", error);
    ck_assert_msg(!strstr(error, fx.root) && !strstr(error, src) && !strstr(error, "/var/"),
                  "the error names a server path: %s", error);
    ck_assert_ptr_null(json_object_get(j, "outputs"));
    json_decref(j);
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
    qdp_resp r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 409, "GET %s: %ld %s", path, r.status, r.body);
    qdp_resp_free(&r);
    snprintf(path, sizeof path, "jobs/%lld", id);
    char *job_dir = kit_join(fx.var, path);
    ck_assert_msg(access(job_dir, F_OK) != 0, "%s is still there", job_dir);
    free(job_dir);
    assert_no_leftovers(&d, 0);
    ck_assert_msg(free_bytes(fx.var) + 4 * MIB >= before, "free %llu of %llu bytes after the job",
                  free_bytes(fx.var), before);
    /* still serving */
    r = qdp_req(&d, "GET", "/healthz", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    qdp_resp_free(&r);
    const char *post = "{\"stats\":{\"a\":{\"absmax\":[1]}}}";
    r = qdp_req(&d, "POST", "/v1/models/m/stats", "application/json", post, strlen(post), NULL);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    long long small = upload_job(&d);
    char *sha = wait_success(&d, small, 60);
    assert_served(&d, small, sha);
    free(sha);
    ck_assert_int_eq(qdp_signal(&d, SIGTERM), 0);
    *fx.quantd = 0;
    char *db = kit_join(fx.var, "quantd.db");
    assert_db_ok(db);
    free(db);
    free(d.root);
    free(d.data_dir);
    kit_rmtree(src);
    free(big);
    free(src);
}
END_TEST

Suite *suite_faults(void)
{
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("kill9");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, test_kill_mid_upload);
    tcase_add_test(tc, test_kill_mid_checkpoint_upload);
    tcase_add_test(tc, test_kill_running_job);
    tcase_add_test(tc, test_kill_stats_burst);
    suite_add_tcase(s, tc);
    TCase *disk = tcase_create("full_disk");
    tcase_set_timeout(disk, 300);
    tcase_add_unchecked_fixture(disk, tmpfs_setup, tmpfs_teardown);
    tcase_add_test(disk, test_full_disk);
    suite_add_tcase(s, disk);
    return s;
}
